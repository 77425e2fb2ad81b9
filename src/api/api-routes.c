/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The route table and its handlers (API-2, API-3, API-9, API-10, API-11, API-12, API-17, API-18,
 * API-19). Reads answer from memory at once. Operator health routes change the health store, which
 * applies the change to memory at once and writes it on a worker (HEALTH-20); the request is
 * suspended until that write completes, so a 200 means the change is on disk (HEALTH-25).
 */
#include <microhttpd.h>

#include "api-internal.h"

#define CONTENT_TYPE_YAML "application/yaml"
#define CONTENT_TYPE_JSON "application/json" /* as http_reply_json() sends it */

/* ---- helpers --------------------------------------------------------------------------------- */

static int reply_body(HttpRequest *req, unsigned status, json_t *body, int r)
{
        json_auto_t *owned = body;
        if (r < 0)
                return r;
        return http_reply_json(req, status, owned);
}

/*
 * API-17: until the first reconcile pass, and while stopping, nothing changes state. Returns 1
 * when it answered 503, 0 when the daemon is ready.
 */
int api_refuse_unless_ready(ApiContext *ctx, HttpRequest *req)
{
        if (ctx->stopping) {
                (void)http_reply_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                                       "vgpud is shutting down");
                return 1;
        }
        if (!ctx->ready) {
                (void)http_reply_error(req, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                                       "vgpud is not ready: the first reconcile pass has not "
                                       "completed");
                return 1;
        }
        return 0;
}

/* HEALTH-21: reads never wait on disk, but they ask for a repair of an unavailable store. */
static void schedule_repair(ApiContext *ctx)
{
        if (ctx->health && health_store_unavailable_reason(ctx->health) && ctx->schedule_repair)
                ctx->schedule_repair(ctx->userdata);
}

/* ---- public routes --------------------------------------------------------------------------- */

static int handle_healthz(HttpRequest *req, void *userdata)
{
        json_auto_t *body = json_pack("{s:s}", "status", "ok");
        if (!body)
                return -ENOMEM;
        return http_reply_json(req, MHD_HTTP_OK, body);
}

static int handle_readyz(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        if (api_refuse_unless_ready(ctx, req))
                return 0;
        json_auto_t *body = json_pack("{s:s}", "status", "ready");
        if (!body)
                return -ENOMEM;
        return http_reply_json(req, MHD_HTTP_OK, body);
}

static int handle_openapi(HttpRequest *req, void *userdata)
{
        return http_reply(req, MHD_HTTP_OK, CONTENT_TYPE_YAML, api_openapi_yaml,
                          api_openapi_yaml_size);
}

/* ---- reads ----------------------------------------------------------------------------------- */

/* /resources and /gpus: the body kept for the state as it is now (api-cache.c, PERF-1). */
static int reply_cached(HttpRequest *req, ApiContext *ctx, ApiBody b)
{
        const char *body = NULL;
        size_t size = 0;
        int r = api_cached_body(ctx, b, &body, &size);
        if (r < 0)
                return r;
        return http_reply(req, MHD_HTTP_OK, CONTENT_TYPE_JSON, body, size);
}

static int handle_resources(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        schedule_repair(ctx);
        return reply_cached(req, ctx, API_BODY_RESOURCES);
}

static int handle_gpus(HttpRequest *req, void *userdata)
{
        return reply_cached(req, userdata, API_BODY_GPUS);
}

static int handle_health(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        json_t *body = NULL;
        int r = api_health_json(ctx, &body);
        return reply_body(req, MHD_HTTP_OK, body, r);
}

/* The kept resource gauges (MET-4: /resources' key), then the counters as they are now. */
static int handle_metrics(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        _cleanup_free_ char *counters = NULL, *text = NULL;
        const char *gauges = NULL;
        size_t gauges_size = 0, counters_size = 0;

        schedule_repair(ctx);
        int r = api_cached_body(ctx, API_BODY_GAUGES, &gauges, &gauges_size);
        if (r >= 0)
                r = api_metrics_counters_text(ctx, &counters, &counters_size);
        if (r < 0)
                return r;
        text = malloc(gauges_size + counters_size);
        if (!text)
                return -ENOMEM;
        memcpy(text, gauges, gauges_size);
        memcpy(text + gauges_size, counters, counters_size);
        return http_reply(req, MHD_HTTP_OK, METRICS_CONTENT_TYPE, text,
                          gauges_size + counters_size);
}

/* ---- operator health routes (API-18) --------------------------------------------------------- */

typedef enum OpKind {
        OP_RECORDS, /* answers {"records": [...], "running_instances": [...]} */
        OP_BREAKER, /* answers {"breaker": {...}} */
} OpKind;

/* A request that waits for the health store. */
struct ApiWaiter {
        ApiContext *ctx;
        HttpRequest *req;
        OpKind kind;
        char **vfs;     /* the affected VFs, whose resulting records the answer lists */
        bool idle_wait; /* waits for the store to go idle, not for a write of its own */
        ApiWaiter *prev, *next;
};

static ApiWaiter *waiter_free(ApiWaiter *w)
{
        if (!w)
                return NULL;
        if (w->req)
                http_request_unref(w->req);
        strv_freep(&w->vfs);
        free(w);
        return NULL;
}

static void waiter_unlink(ApiWaiter *w)
{
        ApiContext *ctx = w->ctx;
        if (w->prev)
                w->prev->next = w->next;
        else
                ctx->waiters = w->next;
        if (w->next)
                w->next->prev = w->prev;
        w->prev = w->next = NULL;
        ctx->n_suspended--;
}

static int answer_records(ApiWaiter *w)
{
        ApiContext *ctx = w->ctx;
        const HealthState *st = health_store_state(ctx->health);
        json_auto_t *body = json_object();
        json_t *records = json_array(), *running = json_array();

        if (!body || json_set(body, "records", records) < 0 ||
            json_set(body, "running_instances", running) < 0)
                return -ENOMEM;
        for (char **vf = w->vfs; vf && *vf; vf++) {
                /* API-18: the instances that still run on the affected VFs. */
                const InstanceRecord *owner =
                    ctx->instances ? instance_manager_find_claim(ctx->instances, *vf) : NULL;
                if (owner && instance_manager_is_running(ctx->instances, owner->id) &&
                    json_push(running, json_pack("{s:s, s:s}", "id", owner->id, "vf", *vf)) < 0)
                        return -ENOMEM;
        }
        for (char **vf = w->vfs; vf && *vf; vf++) {
                const HealthRecord *rec = health_state_find(st, *vf);
                json_t *o;
                if (!rec)
                        continue;
                int r = api_health_record_json(ctx, rec, &o);
                if (r < 0)
                        return r;
                if (json_push(records, o) < 0)
                        return -ENOMEM;
        }
        return http_reply_json(w->req, MHD_HTTP_OK, body);
}

static int answer_breaker(ApiWaiter *w)
{
        json_auto_t *body = json_object();
        json_t *breaker = NULL;
        if (!body)
                return -ENOMEM;
        int r = api_breaker_json(w->ctx, &breaker);
        if (r < 0)
                return r;
        if (json_set(body, "breaker", breaker) < 0)
                return -ENOMEM;
        return http_reply_json(w->req, MHD_HTTP_OK, body);
}

static int answer_success(ApiWaiter *w)
{
        return w->kind == OP_BREAKER ? answer_breaker(w) : answer_records(w);
}

/* Answers a waiter: 503 when the change is not durable, 500 for a failure of our own. */
static void waiter_answer(ApiWaiter *w, int r, const char *error)
{
        if (r < 0) {
                (void)http_reply_error(w->req, MHD_HTTP_SERVICE_UNAVAILABLE,
                                       "health_store_unavailable", "%s", error);
                return;
        }
        r = answer_success(w);
        if (r < 0 && r != -ECONNABORTED && r != -EALREADY)
                (void)http_reply_error(w->req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                       "internal error: %s", strerror(-r));
}

static void on_health_done(HealthStore *s, int r, const HealthResult *result, const char *error,
                           void *userdata)
{
        ApiWaiter *w = userdata;
        waiter_unlink(w);
        if (r < 0)
                log_line(LOG_LEVEL_WARNING, r, "operator VF health change not saved", "path",
                         http_request_get_path(w->req), "error", error, NULL);
        waiter_answer(w, r, error);
        waiter_free(w);
}

static bool store_idle(const ApiContext *ctx)
{
        return !health_store_write_in_flight(ctx->health) &&
               !health_store_write_pending(ctx->health);
}

void api_health_idle(ApiContext *ctx)
{
        if (!ctx->health || !store_idle(ctx))
                return;
        ApiWaiter *w = ctx->waiters;
        while (w) {
                ApiWaiter *next = w->next;
                if (w->idle_wait) {
                        waiter_unlink(w);
                        /* A write that failed since leaves the store unavailable: the state
                         * this request saw may not be on disk. */
                        const char *reason = health_store_unavailable_reason(ctx->health);
                        waiter_answer(w, reason ? -EAGAIN : 0, reason);
                        waiter_free(w);
                }
                w = next;
        }
}

void api_context_done(ApiContext *ctx)
{
        while (ctx->waiters) {
                ApiWaiter *w = ctx->waiters;
                waiter_unlink(w);
                (void)http_reply_error(w->req, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                                       "vgpud is shutting down");
                waiter_free(w);
        }
        api_instances_done(ctx);
        api_images_done(ctx);
        api_body_cache_done(&ctx->cache);
}

static int waiter_new(ApiContext *ctx, HttpRequest *req, OpKind kind, char **vfs, ApiWaiter **ret)
{
        ApiWaiter *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *w = (ApiWaiter){.ctx = ctx, .req = http_request_ref(req), .kind = kind, .vfs = vfs};
        *ret = w;
        return 0;
}

static void waiter_link(ApiWaiter *w)
{
        ApiContext *ctx = w->ctx;
        w->next = ctx->waiters;
        if (ctx->waiters)
                ctx->waiters->prev = w;
        ctx->waiters = w;
        ctx->n_suspended++;
}

/*
 * Submits a change and answers when it is durable. vfs (taken over) are the VFs whose records
 * the answer lists.
 */
static int submit_change(ApiContext *ctx, HttpRequest *req, const HealthRequest *hr, OpKind kind,
                         char **vfs_owned)
{
        _cleanup_strv_free_ char **vfs = vfs_owned;
        _cleanup_free_ char *error = NULL;
        ApiWaiter *w = NULL;

        int r = waiter_new(ctx, req, kind, TAKE_PTR(vfs), &w);
        if (r < 0)
                return r;

        r = health_store_submit(ctx->health, hr, on_health_done, w, NULL, &error);
        if (r < 0) {
                waiter_free(w);
                if (r == -EAGAIN)
                        return http_reply_error(req, MHD_HTTP_SERVICE_UNAVAILABLE,
                                                "health_store_unavailable", "%s", error);
                if (r == -EINVAL)
                        return http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", "%s",
                                                error);
                return http_reply_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "%s",
                                        error);
        }
        if (r == 0) {
                /* Nothing changed; the state it confirms is durable once no write is left. */
                if (store_idle(ctx)) {
                        r = answer_success(w);
                        waiter_free(w);
                        return r;
                }
                w->idle_wait = true;
        }
        /* Linked first: the store holds w either way, and a failed suspension (impossible
         * inside a handler) leaves the client a 500 and the later answer unsent. */
        waiter_link(w);
        return http_request_suspend(req);
}

/* API-9: {"reason": "<1..256 bytes>"} and nothing else. */
static int parse_reason(HttpRequest *req, json_t **ret_body, const char **ret_reason)
{
        json_t *body = NULL;
        int r = http_request_parse_json(req, &body);
        if (r < 0)
                return r; /* answered */
        json_auto_t *owned = body;

        const char *reason = NULL;
        json_error_t e;
        if (json_unpack_ex(body, &e, JSON_STRICT, "{s:s}", "reason", &reason) < 0) {
                (void)http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                       "invalid body: %s", e.text);
                return -EINVAL;
        }
        size_t n = strlen(reason);
        if (n < 1 || n > HEALTH_REASON_MAX) {
                (void)http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                       "reason must be 1 to %d bytes, got %zu", HEALTH_REASON_MAX,
                                       n);
                return -EINVAL;
        }
        *ret_reason = reason;
        *ret_body = TAKE_PTR(owned);
        return 0;
}

int api_refuse_body(HttpRequest *req)
{
        size_t size = 0;
        (void)http_request_get_body(req, &size);
        if (size == 0)
                return 0;
        (void)http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                               "this route takes no request body");
        return -EINVAL;
}

/* The address parameter, checked (400 invalid_address). NULL when it answered. */
static const char *address_param(HttpRequest *req)
{
        const char *a = http_request_get_param(req, "address");
        if (a && pci_address_is_valid(a))
                return a;
        (void)http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_address",
                               "invalid PCI address \"%s\"", a ? a : "");
        return NULL;
}

static int single_vf(const char *address, char ***ret)
{
        _cleanup_strv_free_ char **v = NULL;
        int r = strv_push(&v, address);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(v);
        return 0;
}

/* Every VF of a PF in the last discovery (HEALTH-26). */
static int pf_vfs(const GpuHost *h, const char *pf, char ***ret)
{
        _cleanup_strv_free_ char **v = calloc(1, sizeof(char *));
        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < h->n_vfs; i++)
                if (streq(h->vfs[i].parent, pf)) {
                        int r = strv_push(&v, h->vfs[i].address);
                        if (r < 0)
                                return r;
                }
        *ret = TAKE_PTR(v);
        return 0;
}

static int handle_quarantine(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *address = address_param(req);
        if (!address)
                return 0;
        json_auto_t *body = NULL;
        const char *reason;
        if (parse_reason(req, &body, &reason) < 0)
                return 0;
        if (api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        if (!gpu_host_find_vf(api_host(ctx), address))
                return http_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found",
                                        "no VF %s on this host", address);

        char **vfs = NULL;
        int r = single_vf(address, &vfs);
        if (r < 0)
                return r;
        return submit_change(
            ctx, req,
            &(HealthRequest){.kind = HEALTH_REQUEST_QUARANTINE, .vfs = vfs, .text = reason},
            OP_RECORDS, vfs);
}

static int handle_clear(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *address = address_param(req);
        if (!address || api_refuse_body(req) < 0 || api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        /* API-18: clearing may name an absent VF that still has a record. */
        if (!gpu_host_find_vf(api_host(ctx), address) &&
            !health_state_find(health_store_state(ctx->health), address))
                return http_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found",
                                        "no VF %s on this host and no health record for it",
                                        address);

        char **vfs = NULL;
        int r = single_vf(address, &vfs);
        if (r < 0)
                return r;
        return submit_change(ctx, req, &(HealthRequest){.kind = HEALTH_REQUEST_CLEAR, .vfs = vfs},
                             OP_RECORDS, vfs);
}

static int handle_drain(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *address = address_param(req);
        if (!address)
                return 0;
        json_auto_t *body = NULL;
        const char *reason;
        if (parse_reason(req, &body, &reason) < 0 || api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        if (!gpu_host_find_gpu(api_host(ctx), address))
                return http_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found",
                                        "no GPU %s on this host", address);

        /* HEALTH-26: a mark on the PF; the answer lists its VFs' records, untouched. */
        char **vfs = NULL;
        int r = pf_vfs(api_host(ctx), address, &vfs);
        if (r < 0)
                return r;
        return submit_change(
            ctx, req,
            &(HealthRequest){.kind = HEALTH_REQUEST_DRAIN, .gpu = address, .text = reason},
            OP_RECORDS, vfs);
}

/* Undrain (the mark only) and clear-gpu (every VF record of the PF): HEALTH-26. */
static int handle_pf_change(HttpRequest *req, ApiContext *ctx, HealthRequestKind kind)
{
        const char *address = address_param(req);
        if (!address || api_refuse_body(req) < 0 || api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        if (!gpu_host_find_gpu(api_host(ctx), address))
                return http_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found",
                                        "no GPU %s on this host", address);

        char **vfs = NULL;
        int r = pf_vfs(api_host(ctx), address, &vfs);
        if (r < 0)
                return r;
        return submit_change(ctx, req, &(HealthRequest){.kind = kind, .vfs = vfs, .gpu = address},
                             OP_RECORDS, vfs);
}

static int handle_undrain(HttpRequest *req, void *userdata)
{
        return handle_pf_change(req, userdata, HEALTH_REQUEST_UNDRAIN);
}

static int handle_clear_gpu(HttpRequest *req, void *userdata)
{
        return handle_pf_change(req, userdata, HEALTH_REQUEST_CLEAR);
}

static int handle_breaker_reset(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        if (api_refuse_body(req) < 0 || api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        return submit_change(ctx, req, &(HealthRequest){.kind = HEALTH_REQUEST_BREAKER_RESET},
                             OP_BREAKER, NULL);
}

/* ---- the table ------------------------------------------------------------------------------- */

static const char *const console_query[] = {"tail_bytes", "follow", NULL};

static const HttpRoute routes[] = {
    {"GET", "/healthz", handle_healthz, NULL, true},
    {"GET", "/readyz", handle_readyz, NULL, true},
    {"GET", "/openapi.yaml", handle_openapi, NULL, true},
    {"GET", "/ui", api_handle_ui_redirect, NULL, true},
    {"GET", "/ui/", api_handle_ui_index, NULL, true},
    {"GET", "/ui/vgpud.js", api_handle_ui_js, NULL, true},
    {"GET", "/ui/vgpud.css", api_handle_ui_css, NULL, true},
    {"GET", "/ui/xterm.js", api_handle_ui_xterm_js, NULL, true},
    {"GET", "/ui/xterm.css", api_handle_ui_xterm_css, NULL, true},
    {"GET", "/ui/xterm-LICENSE.txt", api_handle_ui_xterm_license, NULL, true},
    {"GET", "/resources", handle_resources, NULL, false},
    {"GET", "/gpus", handle_gpus, NULL, false},
    {"GET", "/gpu/health", handle_health, NULL, false},
    {"DELETE", "/gpu/health/breaker", handle_breaker_reset, NULL, false},
    {"POST", "/gpu/vfs/{address}/quarantine", handle_quarantine, NULL, false},
    {"DELETE", "/gpu/vfs/{address}/quarantine", handle_clear, NULL, false},
    {"POST", "/gpu/gpus/{address}/drain", handle_drain, NULL, false},
    {"DELETE", "/gpu/gpus/{address}/drain", handle_undrain, NULL, false},
    {"DELETE", "/gpu/gpus/{address}/records", handle_clear_gpu, NULL, false},
    {"GET", "/metrics", handle_metrics, NULL, false},
    {"GET", "/network", api_handle_network, NULL, false},
    {"GET", "/instances", api_handle_instances_list, NULL, false},
    {"POST", "/instances", api_handle_instance_create, NULL, false},
    {"GET", "/instances/{id}", api_handle_instance_get, NULL, false},
    {"DELETE", "/instances/{id}", api_handle_instance_delete, NULL, false},
    {"POST", "/instances/{id}/start", api_handle_instance_start, NULL, false},
    {"POST", "/instances/{id}/stop", api_handle_instance_stop, NULL, false},
    {"POST", "/instances/{id}/volumes", api_handle_instance_volume_attach, NULL, false},
    {"DELETE", "/instances/{id}/volumes/{volume}", api_handle_instance_volume_detach, NULL, false},
    {"POST", "/instances/{id}/standby", api_handle_instance_standby, NULL, false},
    {"POST", "/instances/{id}/snapshot", api_handle_instance_snapshot, NULL, false},
    {"POST", "/instances/{id}/fork", api_handle_instance_fork, NULL, false},
    {"GET", "/instances/{id}/console", api_handle_instance_console, console_query, false},
    {"GET", "/instances/{id}/console/attach", api_handle_instance_console_attach, NULL, false,
     .websocket = true},
    {"GET", "/images", api_handle_images_list, NULL, false},
    {"POST", "/images", api_handle_image_import, NULL, false},
    {"GET", "/images/{name}", api_handle_image_get, NULL, false},
    {"DELETE", "/images/{name}", api_handle_image_delete, NULL, false},
    {"GET", "/volumes", api_handle_volumes_list, NULL, false},
    {"POST", "/volumes", api_handle_volume_create, NULL, false},
    {"GET", "/volumes/{id}", api_handle_volume_get, NULL, false},
    {"DELETE", "/volumes/{id}", api_handle_volume_delete, NULL, false},
};

const HttpRoute *api_routes(size_t *ret_n)
{
        *ret_n = ELEMENTSOF(routes);
        return routes;
}
