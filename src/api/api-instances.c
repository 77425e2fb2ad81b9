/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The instance routes (API-2, API-7, API-8, API-9, API-21, INST-3, INST-23, INST-24): reads answer
 * from the manager's memory; lifecycle requests are suspended until their operation reaches a
 * persisted state, and a client that leaves meanwhile cancels nothing (the answer is then dropped).
 */
#include <microhttpd.h>
#include <stdlib.h>
#include <string.h>

#include "api-internal.h"
#include "http/websocket.h"
#include "net/net.h"

/* ---- JSON (API-7, API-8) ------------------------------------------------------------------- */

/* NET-9: the NIC; "tap" only while the VMM runs, since the TAP lives exactly as long. */
static int network_json(const InstanceRecord *r, json_t *o)
{
        const InstanceNetwork *n = &r->network;
        static const char *const modes[] = {[INSTANCE_NETWORK_NAT] = "nat",
                                            [INSTANCE_NETWORK_BRIDGE] = "bridge",
                                            [INSTANCE_NETWORK_NONE] = "none"};
        if (n->mode == INSTANCE_NETWORK_ABSENT || n->mode >= _INSTANCE_NETWORK_MODE_MAX)
                return 0;
        char tap[IFNAMSIZ];
        bool running = r->state == INSTANCE_RUNNING && net_tap_name(r->id, tap) >= 0 &&
                       n->mode != INSTANCE_NETWORK_NONE;
        json_auto_t *ports = NULL;
        if (n->n_ports > 0 && !(ports = json_array()))
                return -ENOMEM;
        for (size_t i = 0; i < n->n_ports; i++)
                if (json_array_append_new(ports,
                                          json_pack("{s:i, s:i, s:s}", "host", n->ports[i].host,
                                                    "guest", n->ports[i].guest, "protocol",
                                                    n->ports[i].udp ? "udp" : "tcp")) < 0)
                        return -ENOMEM;
        json_t *net = json_pack("{s:s, s:s*, s:s*, s:s*}", "mode", modes[n->mode], "bridge",
                                n->bridge, "mac", n->mac, "ip", n->ip);
        if (!net || json_object_set_new(o, "network", net) < 0)
                return -ENOMEM;
        if ((n->prefix > 0 && json_object_set_new(net, "prefix", json_integer(n->prefix)) < 0) ||
            (n->gateway && json_object_set_new(net, "gateway", json_string(n->gateway)) < 0) ||
            (running && json_object_set_new(net, "tap", json_string(tap)) < 0) ||
            (ports && json_object_set_new(net, "ports", TAKE_PTR(ports)) < 0))
                return -ENOMEM;
        return 0;
}

int api_instance_json(const InstanceRecord *r, json_t **ret)
{
        char created[TIMESTAMP_STRLEN], claimed[TIMESTAMP_STRLEN];
        json_auto_t *boot =
            json_pack("{s:s*, s:s*, s:s*, s:s*}", "kernel", r->boot.kernel, "initrd",
                      r->boot.initrd, "cmdline", r->boot.cmdline, "disk", r->boot.disk);
        json_auto_t *gpu = NULL;
        if (r->gpu.profile) {
                bool claimed_now = instance_record_is_claimed(r);
                gpu = json_pack("{s:s, s:s*, s:s*, s:s*}", "profile", r->gpu.profile, "device_path",
                                r->gpu.device_path, "mdev_uuid", r->gpu.mdev_uuid, "claimed_at",
                                claimed_now ? format_timestamp(r->gpu.claimed_at, claimed) : NULL);
                if (!gpu)
                        return -ENOMEM;
        }
        /* FLEET-6: the Placement consumer the instance holds, and the PF its allocation names. */
        json_auto_t *placement = NULL;
        if (r->placement.consumer) {
                placement = json_pack("{s:s, s:s}", "consumer", r->placement.consumer, "gpu",
                                      r->placement.gpu);
                if (!placement)
                        return -ENOMEM;
        }
        if (!boot)
                return -ENOMEM;
        json_auto_t *o =
            json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:O, s:O*, s:O*, s:s*}", "id", r->id, "name",
                      r->name, "state", instance_state_to_string(r->state), "created_at",
                      format_timestamp(r->created_at, created), "vcpus", (json_int_t)r->vcpus,
                      "memory_mb", (json_int_t)r->memory_mb, "boot", boot, "gpu", gpu, "placement",
                      placement, "error", r->error);
        if (!o || network_json(r, o) < 0)
                return -ENOMEM;
        /* DISK-8: volumes as the record holds them. */
        if (r->n_volumes > 0) {
                json_t *vols = json_array();
                if (json_set(o, "volumes", vols) < 0)
                        return -ENOMEM;
                for (size_t k = 0; k < r->n_volumes; k++)
                        if (json_push(vols, json_pack("{s:s, s:b, s:s}", "id", r->volumes[k].id,
                                                      "readonly", r->volumes[k].readonly, "state",
                                                      instance_volume_state_to_string(
                                                          r->volumes[k].state))) < 0)
                                return -ENOMEM;
        }
        /* DISK-5: the root disk as the record holds it. */
        if (r->disk.image && json_set(o, "disk",
                                      json_pack("{s:s, s:I}", "image", r->disk.image, "size_gb",
                                                (json_int_t)r->disk.size_gb)) < 0)
                return -ENOMEM;
        /* SEED-4: the keys' fingerprints and whether user data was given, never the data. */
        if (instance_record_wants_seed(r) &&
            json_set(o, "cloud_init", seed_cloud_init_to_json(&r->cloud_init)) < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(o);
        return 0;
}

static int reply_instance(HttpRequest *req, unsigned status, const InstanceRecord *r)
{
        json_auto_t *o = NULL;
        int k = api_instance_json(r, &o);
        if (k < 0)
                return k;
        return http_reply_json(req, status, o);
}

/* ---- failures (API-21) --------------------------------------------------------------------- */

static const struct {
        unsigned status;
        const char *code;
} failure_map[_INSTANCE_FAILURE_MAX] = {
    [INSTANCE_FAILURE_NONE] = {MHD_HTTP_INTERNAL_SERVER_ERROR, "internal"},
    [INSTANCE_FAILURE_INVALID_REQUEST] = {MHD_HTTP_BAD_REQUEST, "invalid_request"},
    [INSTANCE_FAILURE_UNKNOWN_PROFILE] = {MHD_HTTP_BAD_REQUEST, "unknown_profile"},
    [INSTANCE_FAILURE_NOT_FOUND] = {MHD_HTTP_NOT_FOUND, "not_found"},
    [INSTANCE_FAILURE_ALREADY_EXISTS] = {MHD_HTTP_CONFLICT, "already_exists"},
    [INSTANCE_FAILURE_BUSY] = {MHD_HTTP_CONFLICT, "busy"},
    [INSTANCE_FAILURE_INVALID_STATE] = {MHD_HTTP_CONFLICT, "invalid_state"},
    [INSTANCE_FAILURE_INSUFFICIENT_RESOURCES] = {MHD_HTTP_CONFLICT, "insufficient_resources"},
    [INSTANCE_FAILURE_PLACEMENT_DISABLED] = {MHD_HTTP_SERVICE_UNAVAILABLE, "placement_disabled"},
    [INSTANCE_FAILURE_NOT_IMPLEMENTED] = {MHD_HTTP_NOT_IMPLEMENTED, "not_implemented"},
    [INSTANCE_FAILURE_INTERNAL] = {MHD_HTTP_INTERNAL_SERVER_ERROR, "internal"},
};

static const char *api_instance_failure_code(InstanceFailure f)
{
        return f < _INSTANCE_FAILURE_MAX ? failure_map[f].code : "internal";
}

static unsigned api_instance_failure_status(InstanceFailure f)
{
        return f < _INSTANCE_FAILURE_MAX ? failure_map[f].status : MHD_HTTP_INTERNAL_SERVER_ERROR;
}

static int reply_failure(HttpRequest *req, InstanceFailure f, const char *error)
{
        return http_reply_error(req, api_instance_failure_status(f), api_instance_failure_code(f),
                                "%s", error ? error : "unknown error");
}

/* ---- waiting requests (INST-23) ------------------------------------------------------------ */

struct InstanceWaiter {
        ApiContext *ctx;
        HttpRequest *req;
        unsigned status; /* on success */
        InstanceWaiter *prev, *next;
};

static void waiter_free(InstanceWaiter *w)
{
        if (w->prev)
                w->prev->next = w->next;
        else if (w->ctx->instance_waiters == w)
                w->ctx->instance_waiters = w->next;
        if (w->next)
                w->next->prev = w->prev;
        http_request_unref(w->req);
        free(w);
}

/*
 * OPS-3: at shutdown the operations stop where their last write left them (INST-21 resumes
 * them at the next start); their clients learn it now rather than from a closed connection.
 */
void api_instances_done(ApiContext *ctx)
{
        while (ctx->instance_waiters) {
                InstanceWaiter *w = ctx->instance_waiters;
                (void)http_reply_error(w->req, MHD_HTTP_SERVICE_UNAVAILABLE, "not_ready",
                                       "vgpud is shutting down");
                waiter_free(w);
        }
}

static void on_done(const InstanceOutcome *o, void *userdata)
{
        InstanceWaiter *w = userdata;
        int r;
        if (o->r < 0)
                r = reply_failure(w->req, o->failure, o->error);
        else if (w->status == MHD_HTTP_NO_CONTENT || !o->record)
                r = http_reply(w->req, MHD_HTTP_NO_CONTENT, NULL, NULL, 0);
        else
                r = reply_instance(w->req, w->status, o->record);
        if (r < 0 && r != -ECONNABORTED)
                (void)http_reply_error(w->req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal",
                                       "answer: %s", strerror(-r));
        waiter_free(w);
}

typedef int (*InstanceOp)(InstanceManager *m, const char *id, InstanceDoneFunc done, void *userdata,
                          InstanceFailure *ret_failure, char **ret_error);

/* The id parameter (INST-3: 400 invalid_id before any file is touched); NULL when answered. */
static const char *id_param(HttpRequest *req)
{
        const char *id = http_request_get_param(req, "id");
        if (id && instance_id_is_valid(id))
                return id;
        (void)http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_id",
                               "invalid instance id \"%s\": 20 characters of [a-z0-9] expected",
                               id ? id : "");
        return NULL;
}

/*
 * After a manager call with waiter w: r < 0 refused (answered here), 1 nothing to do (the
 * instance as it is), else the request waits for on_done.
 */
static int settle(HttpRequest *req, ApiContext *ctx, InstanceWaiter *w, int r, const char *id,
                  InstanceFailure f, const char *error)
{
        if (r < 0 || r == 1) {
                unsigned status = w->status;
                waiter_free(w);
                if (r < 0)
                        return reply_failure(req, f, error);
                return reply_instance(req, status, instance_manager_get(ctx->instances, id));
        }
        return http_request_suspend(req);
}

static InstanceWaiter *waiter_new(ApiContext *ctx, HttpRequest *req, unsigned status)
{
        InstanceWaiter *w = calloc(1, sizeof *w);
        if (!w)
                return NULL;
        *w = (InstanceWaiter){.ctx = ctx,
                              .req = http_request_ref(req),
                              .status = status,
                              .next = ctx->instance_waiters};
        if (w->next)
                w->next->prev = w;
        ctx->instance_waiters = w;
        return w;
}

static int lifecycle(HttpRequest *req, void *userdata, InstanceOp op, unsigned status)
{
        ApiContext *ctx = userdata;
        const char *id = id_param(req);
        if (!id || api_refuse_body(req) < 0 || api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        InstanceWaiter *w = waiter_new(ctx, req, status);
        if (!w)
                return -ENOMEM;
        InstanceFailure f = INSTANCE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        int r = op(ctx->instances, id, on_done, w, &f, &error);
        return settle(req, ctx, w, r, id, f, error);
}

/* ---- the routes ---------------------------------------------------------------------------- */

int api_handle_instances_list(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const InstanceRecord *const *list = NULL;
        size_t n = instance_manager_list(ctx->instances, &list);
        json_auto_t *a = json_array();
        if (!a)
                return -ENOMEM;
        for (size_t k = 0; k < n; k++) {
                json_t *o = NULL;
                int r = api_instance_json(list[k], &o);
                if (r < 0)
                        return r;
                if (json_push(a, o) < 0)
                        return -ENOMEM;
        }
        return http_reply_json(req, MHD_HTTP_OK, a);
}

int api_handle_instance_get(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *id = id_param(req);
        if (!id)
                return 0;
        const InstanceRecord *r = instance_manager_get(ctx->instances, id);
        if (!r)
                return http_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found",
                                        "instance %s not found", id);
        return reply_instance(req, MHD_HTTP_OK, r);
}

int api_handle_instance_create(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        size_t size = 0;
        const char *body = http_request_get_body(req, &size);
        _cleanup_free_ char *error = NULL;
        InstanceSpec spec = {0};
        int r = instance_spec_from_json(body ? body : "", size, &spec, &error);
        if (r < 0)
                return http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", "%s", error);
        if (api_refuse_unless_ready(ctx, req) != 0) {
                instance_spec_done(&spec);
                return 0;
        }
        InstanceWaiter *w = waiter_new(ctx, req, MHD_HTTP_CREATED);
        if (!w) {
                instance_spec_done(&spec);
                return -ENOMEM;
        }
        InstanceFailure f = INSTANCE_FAILURE_NONE;
        _cleanup_free_ char *refusal = NULL;
        r = instance_manager_create(ctx->instances, &spec, on_done, w, &f, &refusal);
        instance_spec_done(&spec);
        return settle(req, ctx, w, r, NULL, f, refusal);
}

int api_handle_instance_delete(HttpRequest *req, void *userdata)
{
        return lifecycle(req, userdata, instance_manager_delete, MHD_HTTP_NO_CONTENT);
}

int api_handle_instance_start(HttpRequest *req, void *userdata)
{
        return lifecycle(req, userdata, instance_manager_start, MHD_HTTP_OK);
}

int api_handle_instance_stop(HttpRequest *req, void *userdata)
{
        return lifecycle(req, userdata, instance_manager_stop, MHD_HTTP_OK);
}

/* ---- volumes (DISK-8) ----------------------------------------------------------------------- */

typedef struct AttachBody {
        const char *volume;
        bool readonly;
} AttachBody;

static const JsonField attach_fields[] = {
    {"volume", JSON_FIELD_STRING, true, JSON_AT(AttachBody, volume)},
    {"readonly", JSON_FIELD_BOOLEAN, false, JSON_AT(AttachBody, readonly)},
    {},
};

int api_handle_instance_volume_attach(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *id = id_param(req);
        if (!id)
                return 0;
        json_t *parsed = NULL;
        if (http_request_parse_json(req, &parsed) < 0)
                return 0; /* answered */
        json_auto_t *body = parsed;
        AttachBody b = {0};
        _cleanup_free_ char *error = NULL;
        if (json_schema_read(body, NULL, attach_fields, &b, -EINVAL, &error) < 0)
                return http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", "%s", error);
        if (api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        InstanceWaiter *w = waiter_new(ctx, req, MHD_HTTP_OK);
        if (!w)
                return -ENOMEM;
        InstanceFailure f = INSTANCE_FAILURE_NONE;
        int r = instance_manager_attach_volume(ctx->instances, id, b.volume, b.readonly, on_done, w,
                                               &f, &error);
        return settle(req, ctx, w, r, id, f, error);
}

int api_handle_instance_volume_detach(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *id = id_param(req);
        const char *volume = http_request_get_param(req, "volume");
        if (!id || api_refuse_body(req) < 0 || api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        InstanceWaiter *w = waiter_new(ctx, req, MHD_HTTP_OK);
        if (!w)
                return -ENOMEM;
        InstanceFailure f = INSTANCE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        int r = instance_manager_detach_volume(ctx->instances, id, volume ? volume : "", on_done, w,
                                               &f, &error);
        return settle(req, ctx, w, r, id, f, error);
}

static int refused(HttpRequest *req, void *userdata, const char *operation)
{
        ApiContext *ctx = userdata;
        const char *id = id_param(req);
        if (!id || api_refuse_body(req) < 0 || api_refuse_unless_ready(ctx, req) != 0)
                return 0;
        InstanceFailure f = INSTANCE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        (void)instance_manager_refuse(ctx->instances, id, operation, &f, &error);
        return reply_failure(req, f, error);
}

int api_handle_instance_standby(HttpRequest *req, void *userdata)
{
        return refused(req, userdata, "standby");
}

int api_handle_instance_snapshot(HttpRequest *req, void *userdata)
{
        return refused(req, userdata, "snapshot");
}

int api_handle_instance_fork(HttpRequest *req, void *userdata)
{
        return refused(req, userdata, "fork");
}

/* ---- the console (API-2) ------------------------------------------------------------------- */

#define CONSOLE_TAIL_DEFAULT 65536
#define CONSOLE_TAIL_MAX 1048576

static void on_console(int r, const char *data, size_t size, const char *error, void *userdata)
{
        HttpRequest *req = userdata;
        if (r < 0)
                (void)http_reply_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "%s",
                                       error);
        else
                (void)http_reply(req, MHD_HTTP_OK, "text/plain; charset=utf-8", data, size);
        http_request_unref(req);
}

/*
 * CONS-2: a follower is a streamed answer fed by the instance's follow. The request waits
 * (suspended) until the tail has been read, and is answered with it: whatever the guest writes
 * once the client has its 200 is streamed. Whichever side ends first tells the other: the
 * follow's end ends the body; the client's leaving closes the follow.
 */
#define CONSOLE_STREAM_BUFFER (64 * 1024)

typedef struct ConsoleFollower {
        HttpRequest *req; /* until the answer starts */
        HttpStream *stream;
        InstanceConsoleFollow *follow; /* NULL once the follow is over */
} ConsoleFollower;

static void follower_drained(HttpStream *s, void *userdata);
static void follower_closed(HttpStream *s, void *userdata);

/* The tail is read: the answer starts. On failure the follower is the caller's to free. */
static int follower_open(ConsoleFollower *cf)
{
        _cleanup_(http_request_unrefp) HttpRequest *req = TAKE_PTR(cf->req);
        if (!req)
                return -EPIPE;
        return http_reply_stream(req, MHD_HTTP_OK, "text/plain; charset=utf-8",
                                 &(HttpStreamConfig){.max_buffered = CONSOLE_STREAM_BUFFER,
                                                     .drained = follower_drained,
                                                     .closed = follower_closed,
                                                     .userdata = cf},
                                 &cf->stream);
}

static size_t follower_room(void *userdata)
{
        ConsoleFollower *cf = userdata;
        if (!cf->stream)
                return cf->req ? CONSOLE_STREAM_BUFFER : 0;
        return http_stream_room(cf->stream);
}

static int follower_write(void *userdata, const char *data, size_t size)
{
        ConsoleFollower *cf = userdata;
        if (!cf->stream && follower_open(cf) < 0)
                return -EPIPE; /* the follow ends, and end() frees the follower */
        return http_stream_write(cf->stream, data, size);
}

static void follower_end(void *userdata)
{
        ConsoleFollower *cf = userdata;
        cf->follow = NULL;
        if (!cf->stream && follower_open(cf) < 0) {
                /* No answer could start (the client has gone): nothing will call closed(). */
                free(cf);
                return;
        }
        http_stream_end(cf->stream);
}

static void follower_drained(HttpStream *s, void *userdata)
{
        ConsoleFollower *cf = userdata;
        if (cf->follow)
                instance_console_follow_wake(cf->follow);
}

static void follower_closed(HttpStream *s, void *userdata)
{
        ConsoleFollower *cf = userdata;
        if (cf->follow)
                instance_console_follow_close(cf->follow);
        http_stream_unref(cf->stream);
        free(cf);
}

static int console_follow(ApiContext *ctx, HttpRequest *req, const char *id, size_t tail)
{
        ConsoleFollower *cf = calloc(1, sizeof *cf);
        if (!cf)
                return -ENOMEM;
        InstanceFailure f = INSTANCE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        int r = instance_manager_console_follow(ctx->instances, id, tail,
                                                &(InstanceConsoleSink){.room = follower_room,
                                                                       .write = follower_write,
                                                                       .end = follower_end,
                                                                       .userdata = cf},
                                                &cf->follow, &f, &error);
        if (r < 0) {
                free(cf);
                return reply_failure(req, f, error);
        }
        r = http_request_suspend(req);
        if (r < 0) {
                instance_console_follow_close(cf->follow);
                free(cf);
                return r;
        }
        cf->req = http_request_ref(req);
        instance_console_follow_wake(cf->follow);
        return 0;
}

/*
 * CONS-3: an attached client is a WebSocket bridged to the instance's console socket. The
 * client's frames go to the console, paused while the console's queue is full; the console's
 * output goes out as binary frames, and a client that does not take them is dropped (bounded
 * queue). Whichever side ends first ends the other.
 */
#define CONSOLE_SUBPROTOCOL "vgpud.console.v1"
#define CONSOLE_WEBSOCKET_QUEUE (256 * 1024)

typedef struct ConsoleAttacher {
        HttpWebSocket *ws;
        InstanceConsoleAttach *attach; /* NULL once the console has closed */
        char id[INSTANCE_ID_LEN + 1];
        char *peer; /* who is attached, for the log (the runbook's "who holds the console") */
} ConsoleAttacher;

static int attacher_send(void *userdata, const char *data, size_t size)
{
        ConsoleAttacher *ca = userdata;
        return http_websocket_send(ca->ws, data, size);
}

static void attacher_writable(void *userdata)
{
        ConsoleAttacher *ca = userdata;
        http_websocket_pause(ca->ws, false);
}

static void attacher_end(void *userdata)
{
        ConsoleAttacher *ca = userdata;
        ca->attach = NULL;
        http_websocket_close(ca->ws, WS_CLOSE_NORMAL, "console closed");
}

static void attacher_opened(HttpWebSocket *ws, void *userdata)
{
        ConsoleAttacher *ca = userdata;
        if (ca->attach && instance_console_attach_start(ca->attach) < 0)
                http_websocket_close(ws, WS_CLOSE_INTERNAL, "cannot watch the console");
}

static void attacher_data(HttpWebSocket *ws, const void *data, size_t size, void *userdata)
{
        ConsoleAttacher *ca = userdata;
        if (!ca->attach)
                return;
        int r = instance_console_attach_write(ca->attach, data, size);
        if (r > 0)
                /* Taken, but the console is not keeping up: no more frames until it does. */
                http_websocket_pause(ws, true);
        else if (r < 0)
                /* -ENOBUFS cannot happen: frames stop at the mark (r > 0) before it. */
                http_websocket_close(ws, WS_CLOSE_INTERNAL, "console write failed");
}

static void attacher_free(ConsoleAttacher *ca)
{
        free(ca->peer);
        free(ca);
}

static void attacher_closed(HttpWebSocket *ws, void *userdata)
{
        ConsoleAttacher *ca = userdata;
        if (ca->attach)
                instance_console_attach_close(ca->attach);
        log_line(LOG_LEVEL_INFO, 0, "console detached", "instance_id", ca->id, "peer", ca->peer,
                 NULL);
        http_websocket_unref(ca->ws);
        attacher_free(ca);
}

int api_handle_instance_console_attach(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *id = id_param(req);
        if (!id)
                return 0;
        int r = http_request_check_websocket(req, CONSOLE_SUBPROTOCOL);
        if (r == -EINVAL)
                return 0;
        if (r < 0)
                return r;
        ConsoleAttacher *ca = calloc(1, sizeof *ca);
        if (!ca)
                return -ENOMEM;
        snprintf(ca->id, sizeof ca->id, "%s", id);
        ca->peer = strdup(http_request_get_peer(req) ? http_request_get_peer(req) : "-");
        if (!ca->peer) {
                free(ca);
                return -ENOMEM;
        }
        InstanceFailure f = INSTANCE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        r = instance_manager_console_attach(
            ctx->instances, id,
            &(InstanceConsoleAttachSink){.send = attacher_send,
                                         .writable = attacher_writable,
                                         .end = attacher_end,
                                         .userdata = ca},
            &ca->attach, &f, &error);
        if (r < 0) {
                attacher_free(ca);
                return reply_failure(req, f, error);
        }
        r = http_reply_websocket(req, CONSOLE_SUBPROTOCOL,
                                 &(HttpWebSocketConfig){.max_queued = CONSOLE_WEBSOCKET_QUEUE,
                                                        .opened = attacher_opened,
                                                        .data = attacher_data,
                                                        .closed = attacher_closed,
                                                        .userdata = ca},
                                 &ca->ws);
        if (r < 0) {
                instance_console_attach_close(ca->attach);
                attacher_free(ca);
                return r;
        }
        log_line(LOG_LEVEL_INFO, 0, "console attached", "instance_id", ca->id, "peer", ca->peer,
                 NULL);
        return 0;
}

int api_handle_instance_console(HttpRequest *req, void *userdata)
{
        ApiContext *ctx = userdata;
        const char *id = id_param(req);
        if (!id)
                return 0;
        uint64_t tail = CONSOLE_TAIL_DEFAULT;
        const char *q = http_request_get_query(req, "tail_bytes");
        if (q && parse_uint64_range(q, 1, CONSOLE_TAIL_MAX, &tail) < 0)
                return http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                        "tail_bytes must be 1..%d", CONSOLE_TAIL_MAX);
        const char *follow = http_request_get_query(req, "follow");
        if (follow && !streq(follow, "true") && !streq(follow, "false"))
                return http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                        "follow must be true or false");
        if (follow && streq(follow, "true"))
                return console_follow(ctx, req, id, (size_t)tail);
        InstanceFailure f = INSTANCE_FAILURE_NONE;
        _cleanup_free_ char *error = NULL;
        HttpRequest *ref = http_request_ref(req);
        int r =
            instance_manager_console(ctx->instances, id, (size_t)tail, on_console, ref, &f, &error);
        if (r < 0) {
                http_request_unref(ref);
                return reply_failure(req, f, error);
        }
        return http_request_suspend(req);
}
