/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The sync (FLEET-5): the loop side keeps the wanted state and what Placement holds as far as
 * vgpud knows (each provider's generation, inventories and traits, "Known"), and runs at most
 * one job at a time on its own worker thread. A job gets copies of everything it needs and
 * hands back what it learnt; nothing is shared while it runs. Triggers that arrive meanwhile
 * only update the wanted state, so when the job ends the next one sends the latest state once
 * (coalescing), and a provider whose wanted state matches Known is not sent at all.
 *
 * A job: the root document's microversion (once), a Keystone token when one is due, the custom
 * resource classes and traits (PUT, idempotent), then per provider: create it when Placement
 * lacks it (409 on a name or uuid race: read it again), PUT its inventories and its traits with
 * the generation vgpud holds; on a generation conflict (409 placement.concurrent_update) read
 * the provider again, rebuild the body, wait a jittered backoff and retry, 8 attempts at most.
 * A full job (the first, then every placement.sync_interval) reads every provider first instead
 * of trusting Known, and lists the tree, so a PF that vanished has its inventories reserved.
 *
 * FLEET-6 rides on the same jobs. Consumers whose instance is gone (fleet_sync_delete_consumer())
 * wait in a small set on the loop and go out as DELETE /allocations/<consumer> in the next job;
 * a consumer added starts one at once, a failed DELETE waits for the next job that starts for
 * another reason (at the latest the next full one), so an outage is not hammered. The set is in
 * memory only, on purpose: if vgpud dies between the local delete and the DELETE, no record
 * names the consumer any more and the orphan audit deletes its allocation after
 * placement.orphan_grace; persisting the set would only make that sooner. The audit runs in
 * every full job: it lists the allocations against each of this host's providers and deletes
 * those that fleet_audit_decide() finds orphaned for longer than the grace, never one that a
 * local record names when the job starts.
 */
#include <curl/curl.h>
#include <inttypes.h>
#include <sys/param.h>
#include <sys/random.h>
#include <time.h>

#include "fleet-internal.h"

#define CHECK_INTERVAL_DEFAULT (500 * NSEC_PER_MSEC)
#define REQUEST_TIMEOUT_DEFAULT (10 * NSEC_PER_SEC)
/* The last run at shutdown must not hold vgpud's exit for long (OPS-3's grace is 10 s). */
#define STOP_REQUEST_TIMEOUT (2 * NSEC_PER_SEC)

/* What Placement holds for one provider, as far as vgpud knows. */
typedef struct Known {
        FleetProvider state; /* uuid, inventories and traits as on Placement */
        int64_t generation;  /* -1: not known (read it before writing) */
} Known;

static void known_done(Known *k)
{
        fleet_provider_done(&k->state);
}

static void knowns_free(Known *k, size_t n)
{
        for (size_t i = 0; k && i < n; i++)
                known_done(&k[i]);
        free(k);
}

static Known *knowns_find(Known *k, size_t n, const char *uuid)
{
        for (size_t i = 0; i < n; i++)
                if (streq(k[i].state.uuid, uuid))
                        return &k[i];
        return NULL;
}

typedef struct Job {
        /* In. */
        char *url, *keystone_url, *credential_id, *credential_secret;
        FleetAuth auth;
        long timeout_ms;
        bool check_root; /* the root document is not checked yet */
        bool full;
        FleetWanted *wanted; /* the providers to send */
        Clock clock;
        uint64_t (*random)(void *userdata);
        void (*sleep)(nsec_t d, void *userdata);
        void *test_userdata;
        char **local;   /* FLEET-6: consumers local records name; never deleted */
        char **deletes; /* FLEET-6: released consumers to DELETE */
        nsec_t grace;

        /* In and out. */
        FleetOrphan *seen; /* the audit's orphans (full jobs) */
        size_t n_seen;
        Known *known; /* one per wanted provider, then the vanished ones a full job found */
        size_t n_known;
        char **ensured; /* custom classes and traits known to exist */
        FleetToken token;
        Timestamp token_issued;

        /* Out. */
        bool root_ok;
        char *disabled; /* FLEET-1: the microversion is too low */
        uint64_t conflicts, requests;
        bool down; /* a transport failure, a 5xx or a refused authentication */
        char *error;
        char **deleted;      /* of deletes: gone (204 or 404), or refused for good (4xx) */
        char **orphans_gone; /* consumers the audit deleted */
        bool audited;        /* seen holds this job's audit */
        uint64_t consumers_deleted;
} Job;

static void job_free(void *data)
{
        Job *j = data;
        if (!j)
                return;
        free(j->url);
        free(j->keystone_url);
        free(j->credential_id);
        if (j->credential_secret)
                explicit_bzero(j->credential_secret, strlen(j->credential_secret));
        free(j->credential_secret);
        fleet_wanted_free(j->wanted);
        knowns_free(j->known, j->n_known);
        strv_free(j->ensured);
        fleet_token_done(&j->token);
        free(j->disabled);
        free(j->error);
        strv_free(j->local);
        strv_free(j->deletes);
        strv_free(j->deleted);
        strv_free(j->orphans_gone);
        free(j->seen);
        free(j);
}

static void job_freep(Job **j)
{
        job_free(*j);
}

struct FleetSync {
        char *url, *keystone_url, *credential_id, *credential_secret;
        FleetAuth auth;
        nsec_t interval, check_interval, request_timeout;
        uint64_t (*state_key)(void *userdata);
        int (*compute)(void *userdata, bool stopping, FleetWanted **ret);
        void (*stopped)(void *userdata);
        void *userdata;
        Clock clock;
        uint64_t (*random)(void *userdata);
        void (*sleep)(nsec_t d, void *userdata);
        void *test_userdata;

        WorkerPool *pool;
        sd_event *event;
        sd_event_source *check_timer, *full_timer;

        bool key_valid;
        uint64_t key;
        FleetWanted *wanted; /* the latest computed */
        Known *known;
        size_t n_known;
        char **ensured;
        FleetToken token;
        Timestamp token_issued;
        bool root_ok;
        char *disabled;

        bool running, full_due, stopping, stop_sent, stopped_called;
        char *logged_error;
        FleetSyncStats stats;

        /* FLEET-6 */
        int (*consumers)(void *userdata, char ***ret);
        nsec_t orphan_grace;
        char **pending;    /* released consumers whose DELETE has not gone out */
        bool pending_new;  /* one was added since the last job started */
        FleetOrphan *seen; /* the last audit's orphans */
        size_t n_seen;
};

/* ---- the worker's side ------------------------------------------------------------------------
 */

static int job_fail(Job *j, int r, const char *fmt, ...) _printf_(3, 4);
static int job_fail(Job *j, int r, const char *fmt, ...)
{
        if (!j->error) {
                va_list ap;
                va_start(ap, fmt);
                (void)error_setv(&j->error, r, fmt, ap);
                va_end(ap);
        }
        return r;
}

/* A reader of an answer failed: -EPROTO is Placement's fault, anything else is ours. */
static int answer_failed(Job *j, int r, const char *method, const char *path)
{
        if (r == -EPROTO)
                return job_fail(j, r, "%s %s%s: malformed answer", method, j->url, path);
        return job_fail(j, r, ERROR_OUT_OF_MEMORY);
}

static uint64_t job_random(Job *j)
{
        if (j->random)
                return j->random(j->test_userdata);
        uint64_t v = 0;
        if (getrandom(&v, sizeof v, GRND_NONBLOCK) != sizeof v)
                v = (uint64_t)time(NULL);
        return v;
}

static void job_sleep(Job *j, nsec_t d)
{
        if (j->sleep) {
                j->sleep(d, j->test_userdata);
                return;
        }
        struct timespec ts = {.tv_sec = (time_t)(d / NSEC_PER_SEC),
                              .tv_nsec = (long)(d % NSEC_PER_SEC)};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

static int keystone_login(Job *j, FleetHttp *h)
{
        _cleanup_free_ char *url = NULL, *subject = NULL;
        json_auto_t *body = json_pack("{s:{s:{s:[s], s:{s:s, s:s}}}}", "auth", "identity",
                                      "methods", "application_credential", "application_credential",
                                      "id", j->credential_id, "secret", j->credential_secret);
        json_auto_t *resp = NULL;
        long status = 0;
        if (!body || strprintf(&url, "%s/v3/auth/tokens", j->keystone_url) < 0)
                return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);

        const char *saved = h->token;
        h->token = NULL;
        char *err = NULL;
        int r = fleet_http_request(h, "POST", url, body, &status, &resp, &subject, &err);
        h->token = saved;
        if (r < 0) {
                j->down = true;
                r = job_fail(j, r, "keystone: %s", err);
                free(err);
                return r;
        }
        if (status != 201 && status != 200) {
                j->down = true;
                return job_fail(j, -EACCES, "keystone: POST %s: HTTP %ld", url, status);
        }
        Timestamp exp;
        if (!subject || !*subject || fleet_answer_token_expiry(resp, &exp) < 0)
                return job_fail(j, -EPROTO,
                                "keystone: POST %s: no X-Subject-Token or token.expires_at", url);
        fleet_token_done(&j->token);
        j->token = (FleetToken){.value = TAKE_PTR(subject), .expires_at = exp};
        j->token_issued = clock_now(&j->clock);
        return 0;
}

static void job_use_token(Job *j, FleetHttp *h)
{
        /* placement's noauth2 middleware takes the token as "<user>[:<project>]" and gives the
         * user "admin" the admin role. */
        h->token = j->auth == FLEET_AUTH_KEYSTONE ? j->token.value : "admin";
}

/*
 * One exchange with Placement at path. With Keystone, a 401 renews the token once and repeats
 * the request. *ret_status and *ret_body on a completed exchange; a transport failure, a 5xx
 * and a final 401 mark Placement down.
 */
static int placement_call(Job *j, FleetHttp *h, const char *method, const char *path,
                          const json_t *body, long *ret_status, json_t **ret_body)
{
        _cleanup_free_ char *url = NULL;
        if (strprintf(&url, "%s%s", j->url, path) < 0)
                return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);

        for (unsigned attempt = 0;; attempt++) {
                if (j->auth == FLEET_AUTH_KEYSTONE &&
                    fleet_token_needs_refresh(&j->token, j->token_issued, clock_now(&j->clock))) {
                        int r = keystone_login(j, h);
                        if (r < 0)
                                return r;
                }
                job_use_token(j, h);

                char *err = NULL;
                long status = 0;
                json_t *resp = NULL;
                int r = fleet_http_request(h, method, url, body, &status, &resp, NULL, &err);
                if (r < 0) {
                        j->down = true;
                        r = job_fail(j, r, "%s", err);
                        free(err);
                        return r;
                }
                if (status == 401 && j->auth == FLEET_AUTH_KEYSTONE && attempt == 0) {
                        json_decref(resp);
                        fleet_token_done(&j->token); /* revoked or expired early */
                        continue;
                }
                if (status >= 500 || status == 401 || status == 403)
                        j->down = true;
                *ret_status = status;
                *ret_body = resp;
                return 0;
        }
}

static int unexpected(Job *j, const char *method, const char *path, long status, const json_t *body)
{
        const char *detail = fleet_http_error_detail(body);
        return job_fail(j, -EPROTO, "%s %s%s: HTTP %ld%s%s", method, j->url, path, status,
                        detail ? ": " : "", detail ? detail : "");
}

/*
 * GET of a path formatted from fmt: 1 with the answer in *ret on 200, 0 on 404 where
 * missing_ok, < 0 otherwise (job_fail() has the text). *ret_path is the path, for the caller's
 * own error texts.
 */
static int get_json(Job *j, FleetHttp *h, bool missing_ok, json_t **ret, char **ret_path,
                    const char *fmt, ...) _printf_(6, 7);
static int get_json(Job *j, FleetHttp *h, bool missing_ok, json_t **ret, char **ret_path,
                    const char *fmt, ...)
{
        _cleanup_free_ char *path = NULL;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&path, fmt, ap);
        va_end(ap);
        if (r < 0) {
                path = NULL;
                return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);
        }
        json_auto_t *resp = NULL;
        long status = 0;
        r = placement_call(j, h, "GET", path, NULL, &status, &resp);
        if (r < 0)
                return r;
        if (status == 404 && missing_ok)
                return 0;
        if (status != 200)
                return unexpected(j, "GET", path, status, resp);
        *ret = TAKE_PTR(resp);
        *ret_path = TAKE_PTR(path);
        return 1;
}

/* FLEET-1: the root document's max_version must be 1.39 or later. */
static int check_root(Job *j, FleetHttp *h)
{
        json_auto_t *resp = NULL;
        long status = 0;
        int r = placement_call(j, h, "GET", "/", NULL, &status, &resp);
        if (r < 0)
                return r;
        if (status != 200)
                return unexpected(j, "GET", "/", status, resp);

        unsigned best_major, best_minor;
        if (fleet_answer_max_version(resp, &best_major, &best_minor) < 0)
                return job_fail(j, -EPROTO, "GET %s/: no max_version in the root document", j->url);
        if (best_major < FLEET_MICROVERSION_MAJOR ||
            (best_major == FLEET_MICROVERSION_MAJOR && best_minor < FLEET_MICROVERSION_MINOR)) {
                if (strprintf(
                        &j->disabled,
                        "placement %s offers microversion %u.%u, vgpud needs " FLEET_MICROVERSION,
                        j->url, best_major, best_minor) < 0)
                        return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);
                return -EPROTONOSUPPORT;
        }
        j->root_ok = true;
        return 0;
}

static bool strv_contains_str(char *const *strv, const char *s)
{
        for (; strv && *strv; strv++)
                if (streq(*strv, s))
                        return true;
        return false;
}

/* Takes the first s out of strv, in place. */
static void strv_remove(char **strv, const char *s)
{
        for (size_t i = 0; strv && strv[i]; i++)
                if (streq(strv[i], s)) {
                        free(strv[i]);
                        memmove(&strv[i], &strv[i + 1],
                                (strv_length(&strv[i + 1]) + 1) * sizeof *strv);
                        return;
                }
}

/* PUT /resource_classes/<name> or /traits/<name> once per name (201 created, 204 existed). */
static int ensure_name(Job *j, FleetHttp *h, const char *kind, const char *name)
{
        if (!startswith(name, "CUSTOM_") || strv_contains_str(j->ensured, name))
                return 0;
        _cleanup_free_ char *path = NULL;
        json_auto_t *resp = NULL;
        long status = 0;
        if (strprintf(&path, "/%s/%s", kind, name) < 0)
                return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);
        int r = placement_call(j, h, "PUT", path, NULL, &status, &resp);
        if (r < 0)
                return r;
        if (status != 201 && status != 204)
                return unexpected(j, "PUT", path, status, resp);
        return strv_push(&j->ensured, name) < 0 ? job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY) : 0;
}

static int ensure_names(Job *j, FleetHttp *h)
{
        for (size_t i = 0; i < j->wanted->n_providers; i++) {
                const FleetProvider *p = &j->wanted->providers[i];
                for (size_t k = 0; k < p->n_inventories; k++) {
                        int r =
                            ensure_name(j, h, "resource_classes", p->inventories[k].resource_class);
                        if (r < 0)
                                return r;
                }
                for (char **t = p->traits; t && *t; t++) {
                        int r = ensure_name(j, h, "traits", *t);
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}

static int get_inventories(Job *j, FleetHttp *h, Known *k)
{
        _cleanup_free_ char *path = NULL;
        json_auto_t *resp = NULL;
        int r = get_json(j, h, false, &resp, &path, "/resource_providers/%s/inventories",
                         k->state.uuid);
        if (r < 0)
                return r;
        FleetInventory *inv;
        size_t n;
        int64_t gen;
        r = fleet_answer_inventories(resp, &inv, &n, &gen);
        if (r < 0)
                return answer_failed(j, r, "GET", path);
        fleet_inventories_free(k->state.inventories, k->state.n_inventories);
        k->state.inventories = inv;
        k->state.n_inventories = n;
        k->generation = gen;
        return 0;
}

static int get_traits(Job *j, FleetHttp *h, Known *k)
{
        _cleanup_free_ char *path = NULL;
        json_auto_t *resp = NULL;
        int r = get_json(j, h, false, &resp, &path, "/resource_providers/%s/traits", k->state.uuid);
        if (r < 0)
                return r;
        char **traits;
        int64_t gen;
        r = fleet_answer_traits(resp, &traits, &gen);
        if (r < 0)
                return answer_failed(j, r, "GET", path);
        strv_free(k->state.traits);
        k->state.traits = traits;
        k->generation = gen;
        return 0;
}

static bool traits_equal(char *const *a, char *const *b)
{
        size_t n = strv_length(a);
        if (n != strv_length(b))
                return false;
        for (size_t i = 0; i < n; i++)
                if (!streq(a[i], b[i]))
                        return false;
        return true;
}

/* GET the provider; create it when Placement lacks it; put it under its parent. */
static int ensure_provider(Job *j, FleetHttp *h, const FleetProvider *w, Known *k)
{
        _cleanup_free_ char *path = NULL;
        if (strprintf(&path, "/resource_providers/%s", w->uuid) < 0)
                return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);

        for (unsigned attempt = 0; attempt < 2; attempt++) {
                json_auto_t *resp = NULL;
                long status = 0;
                int r = placement_call(j, h, "GET", path, NULL, &status, &resp);
                if (r < 0)
                        return r;
                if (status == 200) {
                        if (fleet_answer_generation(resp, "generation", &k->generation) < 0)
                                return job_fail(j, -EPROTO, "GET %s%s: malformed answer", j->url,
                                                path);
                        const char *parent =
                            json_string_value(json_object_get(resp, "parent_provider_uuid"));
                        const char *name = json_string_value(json_object_get(resp, "name"));
                        if ((*w->parent_uuid && !streq_ptr(parent, w->parent_uuid)) ||
                            !streq_ptr(name, w->name)) {
                                /* Moved or renamed behind vgpud's back: FLEET-2's tree wins. */
                                json_auto_t *fix = json_pack(
                                    "{s:s, s:s*}", "name", w->name, "parent_provider_uuid",
                                    *w->parent_uuid ? w->parent_uuid : NULL);
                                json_auto_t *fixed = NULL;
                                if (!fix)
                                        return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);
                                r = placement_call(j, h, "PUT", path, fix, &status, &fixed);
                                if (r < 0)
                                        return r;
                                if (status != 200 || fleet_answer_generation(fixed, "generation",
                                                                             &k->generation) < 0)
                                        return unexpected(j, "PUT", path, status, fixed);
                        }
                        return 0;
                }
                if (status != 404 || attempt > 0)
                        return unexpected(j, "GET", path, status, resp);

                json_auto_t *create =
                    json_pack("{s:s, s:s, s:s*}", "name", w->name, "uuid", w->uuid,
                              "parent_provider_uuid", *w->parent_uuid ? w->parent_uuid : NULL);
                json_auto_t *created = NULL;
                if (!create)
                        return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);
                r = placement_call(j, h, "POST", "/resource_providers", create, &status, &created);
                if (r < 0)
                        return r;
                if (status == 200 || status == 201) {
                        if (fleet_answer_generation(created, "generation", &k->generation) < 0)
                                k->generation = 0;
                        fleet_inventories_free(k->state.inventories, k->state.n_inventories);
                        k->state.inventories = NULL;
                        k->state.n_inventories = 0;
                        k->state.traits = strv_free(k->state.traits);
                        return 0;
                }
                if (status != 409)
                        return unexpected(j, "POST", "/resource_providers", status, created);
                /* 409: another writer created it (idempotent: read it), or the name belongs
                 * to another uuid (the second GET's 404 says so). */
        }
        return job_fail(j, -EEXIST, "provider %s: the name is taken by another uuid", w->name);
}

/* Sends one part (inventories or traits) with conflict retries. */
typedef enum Part {
        PART_INVENTORIES,
        PART_TRAITS,
} Part;

static int build_part(const FleetProvider *w, const Known *k, Part part, json_t **ret,
                      bool *ret_same)
{
        json_auto_t *o = json_object();
        if (!o || json_set(o, "resource_provider_generation", json_integer(k->generation)) < 0)
                return -ENOMEM;
        if (part == PART_INVENTORIES) {
                FleetInventory *inv;
                size_t n;
                int r =
                    fleet_inventories_merge(w ? w->inventories : NULL, w ? w->n_inventories : 0,
                                            k->state.inventories, k->state.n_inventories, &inv, &n);
                if (r < 0)
                        return r;
                *ret_same =
                    fleet_inventories_equal(inv, n, k->state.inventories, k->state.n_inventories);
                json_t *invs = json_object();
                r = json_set(o, "inventories", invs);
                for (size_t i = 0; i < n && r >= 0; i++)
                        r = json_set(invs, inv[i].resource_class,
                                     json_pack("{s:I, s:I, s:I, s:i, s:i, s:f}", "total",
                                               (json_int_t)inv[i].total, "reserved",
                                               (json_int_t)inv[i].reserved, "max_unit",
                                               (json_int_t)inv[i].max_unit, "min_unit", 1,
                                               "step_size", 1, "allocation_ratio", 1.0));
                fleet_inventories_free(inv, n);
                if (r < 0)
                        return r;
        } else {
                char *const *traits = w ? w->traits : k->state.traits;
                *ret_same = traits_equal(traits, k->state.traits);
                json_t *a = json_array();
                int r = json_set(o, "traits", a);
                for (char *const *t = traits; t && *t && r >= 0; t++)
                        r = json_push(a, json_string(*t));
                if (r < 0)
                        return r;
        }
        *ret = TAKE_PTR(o);
        return 0;
}

static int send_part(Job *j, FleetHttp *h, const FleetProvider *w, Known *k, Part part)
{
        const char *what = part == PART_INVENTORIES ? "inventories" : "traits";
        _cleanup_free_ char *path = NULL;
        if (strprintf(&path, "/resource_providers/%s/%s", k->state.uuid, what) < 0)
                return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);

        for (unsigned attempt = 1;; attempt++) {
                json_auto_t *body = NULL, *resp = NULL;
                bool same;
                int r;
                if (k->generation < 0) {
                        r = part == PART_INVENTORIES ? get_inventories(j, h, k)
                                                     : get_traits(j, h, k);
                        if (r < 0)
                                return r;
                }
                r = build_part(w, k, part, &body, &same);
                if (r < 0)
                        return job_fail(j, r, ERROR_OUT_OF_MEMORY);
                if (same)
                        return 0; /* identical: no PUT */

                long status = 0;
                r = placement_call(j, h, "PUT", path, body, &status, &resp);
                if (r < 0)
                        return r;
                if (status == 200) {
                        int64_t gen;
                        if (part == PART_INVENTORIES) {
                                FleetInventory *inv;
                                size_t n;
                                r = fleet_answer_inventories(resp, &inv, &n, &gen);
                                if (r >= 0) {
                                        fleet_inventories_free(k->state.inventories,
                                                               k->state.n_inventories);
                                        k->state.inventories = inv;
                                        k->state.n_inventories = n;
                                }
                        } else {
                                char **traits;
                                r = fleet_answer_traits(resp, &traits, &gen);
                                if (r >= 0) {
                                        strv_free(k->state.traits);
                                        k->state.traits = traits;
                                }
                        }
                        if (r < 0) {
                                k->generation = -1;
                                return answer_failed(j, r, "PUT", path);
                        }
                        k->generation = gen;
                        return 0;
                }
                if (status == 409 &&
                    streq_ptr(fleet_http_error_code(resp), "placement.concurrent_update")) {
                        j->conflicts++;
                        k->generation = -1; /* re-read, then rebuild the body */
                        if (attempt >= FLEET_CONFLICT_ATTEMPTS)
                                return job_fail(j, -EAGAIN,
                                                "PUT %s%s: generation conflict %u times in a row",
                                                j->url, path, attempt);
                        job_sleep(j, fleet_backoff(attempt, job_random(j)));
                        continue;
                }
                k->generation = -1;
                return unexpected(j, "PUT", path, status, resp);
        }
}

static int sync_provider(Job *j, FleetHttp *h, const FleetProvider *w, Known *k)
{
        int r;
        if (w && (k->generation < 0 || j->full)) {
                r = ensure_provider(j, h, w, k);
                if (r < 0)
                        return r;
        }
        if (w && !*w->parent_uuid)
                return 0; /* the root carries nothing of vgpud's */
        if (j->full || k->generation < 0) {
                r = get_inventories(j, h, k);
                if (r >= 0)
                        r = get_traits(j, h, k);
                if (r < 0)
                        return r;
        }
        r = send_part(j, h, w, k, PART_INVENTORIES);
        if (r >= 0 && w) /* a vanished PF keeps its traits */
                r = send_part(j, h, w, k, PART_TRAITS);
        return r;
}

/* A full job's listing of the tree: providers vgpud made for PFs it no longer has. */
static int find_vanished(Job *j, FleetHttp *h)
{
        _cleanup_free_ char *path = NULL;
        json_auto_t *resp = NULL;
        int r = get_json(j, h, false, &resp, &path, "/resource_providers?in_tree=%s",
                         j->wanted->providers[0].uuid);
        if (r < 0)
                return r;
        _cleanup_strv_free_ char **tree = NULL;
        r = fleet_answer_tree(resp, &tree);
        if (r < 0)
                return answer_failed(j, r, "GET", path);
        for (char **t = tree; t && *t; t++) {
                const char *uuid = *t;
                if (fleet_wanted_find(j->wanted, uuid) || knowns_find(j->known, j->n_known, uuid))
                        continue;
                Known *n = realloc(j->known, (j->n_known + 1) * sizeof *n);
                if (!n)
                        return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);
                j->known = n;
                n[j->n_known] = (Known){.generation = -1};
                memcpy(n[j->n_known].state.uuid, uuid, FLEET_UUID_STRLEN);
                j->n_known++;
        }
        return 0;
}

/* ---- FLEET-6 on the worker ---------------------------------------------------------------- */

/* DELETE /allocations/<consumer>: 1 deleted, 0 already gone, < 0 failed (Placement down or an
 * unexpected answer; job_fail() has the text). */
static int delete_allocation(Job *j, FleetHttp *h, const char *consumer)
{
        _cleanup_free_ char *path = NULL;
        json_auto_t *resp = NULL;
        long status = 0;
        if (strprintf(&path, "/allocations/%s", consumer) < 0)
                return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);
        int r = placement_call(j, h, "DELETE", path, NULL, &status, &resp);
        if (r < 0)
                return r;
        if (status == 204)
                return 1;
        if (status == 404)
                return 0;
        return unexpected(j, "DELETE", path, status, resp);
}

/* The released consumers (INST-14): each DELETE on its own; Placement down stops the rest. */
static void send_deletes(Job *j, FleetHttp *h)
{
        for (char **c = j->deletes; c && *c && !j->down; c++) {
                int r = delete_allocation(j, h, *c);
                if (r == -ENOMEM)
                        return;
                /* A refusal other than an outage will not change by repeating it; the audit
                 * has the last word on whatever it left. */
                if (r >= 0 || !j->down) {
                        if (strv_push(&j->deleted, *c) < 0)
                                return;
                        if (r > 0)
                                j->consumers_deleted++;
                }
        }
}

/* GET /resource_providers/<uuid>/allocations: the consumers it holds, appended to list. A
 * provider Placement no longer has holds none. */
static int list_consumers(Job *j, FleetHttp *h, const char *uuid, char ***list)
{
        _cleanup_free_ char *path = NULL;
        json_auto_t *resp = NULL;
        int r = get_json(j, h, true, &resp, &path, "/resource_providers/%s/allocations", uuid);
        if (r <= 0)
                return r;
        _cleanup_strv_free_ char **consumers = NULL;
        r = fleet_answer_consumers(resp, &consumers);
        if (r < 0)
                return answer_failed(j, r, "GET", path);
        for (char **c = consumers; c && *c; c++)
                if (strv_push(list, *c) < 0)
                        return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);
        return 0;
}

/* The orphan audit (full jobs): every provider of this host but the root, which holds nothing. */
static int audit(Job *j, FleetHttp *h)
{
        const char *root = j->wanted->providers[0].uuid;
        _cleanup_strv_free_ char **allocated = NULL;
        for (size_t i = 0; i < j->n_known; i++) {
                if (streq(j->known[i].state.uuid, root))
                        continue;
                /* A listing that failed would make its orphans look gone and restart their
                 * grace, which errs the safe way; still, decide only on a whole picture. */
                int r = list_consumers(j, h, j->known[i].state.uuid, &allocated);
                if (r < 0)
                        return r;
        }

        FleetOrphan *orphans;
        size_t n;
        char **doomed;
        int r = fleet_audit_decide(allocated, j->local, j->seen, j->n_seen, clock_now(&j->clock),
                                   j->grace, &orphans, &n, &doomed);
        if (r < 0)
                return job_fail(j, r, ERROR_OUT_OF_MEMORY);
        free(j->seen);
        j->seen = orphans;
        j->n_seen = n;
        j->audited = true;
        _cleanup_strv_free_ char **delete = doomed;
        for (char **c = delete; c && *c && !j->down; c++) {
                r = delete_allocation(j, h, *c);
                if (r > 0 && strv_push(&j->orphans_gone, *c) < 0)
                        return job_fail(j, -ENOMEM, ERROR_OUT_OF_MEMORY);
        }
        return 0;
}

static int job_run(void *data, char **error)
{
        Job *j = data;
        FleetHttp h;
        int r = fleet_http_init(&h, j->timeout_ms);
        if (r < 0)
                return error_set_oom(error);

        if (j->check_root)
                r = check_root(j, &h);
        if (r >= 0)
                r = ensure_names(j, &h);
        /* Each provider on its own: one that fails does not hold back the others. */
        for (size_t i = 0; r >= 0 && i < j->wanted->n_providers; i++) {
                const FleetProvider *w = &j->wanted->providers[i];
                int q = sync_provider(j, &h, w, knowns_find(j->known, j->n_known, w->uuid));
                if (q < 0 && (j->down || i == 0))
                        r = q; /* Placement is gone, or the root is missing: stop here */
        }
        if (r >= 0 && j->full && j->wanted->n_providers > 0) {
                size_t first = j->n_known;
                r = find_vanished(j, &h);
                for (size_t i = first; r >= 0 && i < j->n_known; i++)
                        (void)sync_provider(j, &h, NULL, &j->known[i]);
        }
        /* FLEET-6 after the providers: they exist (or Placement has said why not) by then. */
        if (r >= 0 && !j->down)
                send_deletes(j, &h);
        if (r >= 0 && !j->down && j->full && j->wanted->n_providers > 0)
                (void)audit(j, &h);
        j->requests = h.requests;
        fleet_http_done(&h);
        /* The outcome travels in the job (done() reads it); the pool's result is always 0. */
        return 0;
}

/* ---- the loop's side --------------------------------------------------------------------------
 */

static bool provider_needs_send(const FleetProvider *w, const Known *k)
{
        if (!k || k->generation < 0)
                return true;
        if (!*w->parent_uuid)
                return false;
        FleetInventory *inv;
        size_t n;
        if (fleet_inventories_merge(w->inventories, w->n_inventories, k->state.inventories,
                                    k->state.n_inventories, &inv, &n) < 0)
                return true;
        bool same = fleet_inventories_equal(inv, n, k->state.inventories, k->state.n_inventories);
        fleet_inventories_free(inv, n);
        return !same || !traits_equal(w->traits, k->state.traits);
}

static int known_copy(const Known *k, Known *ret)
{
        Known c = {.generation = k->generation};
        int r = fleet_provider_copy(&k->state, &c.state);
        if (r < 0)
                return r;
        *ret = c;
        return 0;
}

static void log_outcome(FleetSync *s, const char *error)
{
        if (streq_ptr(error, s->logged_error))
                return;
        if (error)
                log_line(LOG_LEVEL_WARNING, 0, "placement sync failed", "error", error, NULL);
        else
                log_line(LOG_LEVEL_NOTICE, 0, "placement sync ok", "url", s->url, NULL);
        free(s->logged_error);
        s->logged_error = error ? strdup(error) : NULL;
}

static void maybe_start(FleetSync *s);

/* FLEET-6: what a job did with the released consumers and the audit. */
static void consumers_done(FleetSync *s, Job *j)
{
        for (char **c = j->deleted; c && *c; c++) {
                strv_remove(s->pending, *c);
                log_line(LOG_LEVEL_INFO, 0, "placement allocation of a released consumer deleted",
                         "consumer", *c, NULL);
        }
        s->stats.consumers_deleted += j->consumers_deleted;
        for (char **c = j->orphans_gone; c && *c; c++) {
                s->stats.orphans_deleted++;
                log_line(LOG_LEVEL_NOTICE, 0, "placement orphan allocation deleted", "consumer", *c,
                         "reason", "no local instance names it", NULL);
        }
        if (j->audited) {
                free(s->seen);
                s->seen = TAKE_PTR(j->seen);
                s->n_seen = j->n_seen;
                j->n_seen = 0;
                s->stats.orphans_pending = s->n_seen;
        }
}

static void finish_stop(FleetSync *s)
{
        if (s->stopping && !s->running && !s->stopped_called) {
                s->stopped_called = true;
                if (s->stopped)
                        s->stopped(s->userdata);
        }
}

static void on_job_done(int r, void *data, const char *error, void *userdata)
{
        FleetSync *s = userdata;
        Job *j = data;
        s->running = false;
        s->stats.runs++;

        if (!j) { /* the pool refused or ended it: nothing learnt */
                s->stats.sync_total[FLEET_RESULT_ERROR]++;
                s->stats.up = false;
                log_outcome(s, error);
                finish_stop(s);
                return;
        }
        s->stats.requests += j->requests;
        s->stats.sync_total[FLEET_RESULT_CONFLICT] += j->conflicts;
        consumers_done(s, j);

        /* What the job learnt replaces what the loop knew, provider by provider. */
        for (size_t i = 0; i < j->n_known; i++) {
                Known *mine = knowns_find(s->known, s->n_known, j->known[i].state.uuid);
                if (mine) {
                        known_done(mine);
                        *mine = j->known[i];
                } else {
                        Known *n = realloc(s->known, (s->n_known + 1) * sizeof *n);
                        if (!n) {
                                known_done(&j->known[i]);
                                continue;
                        }
                        s->known = n;
                        s->known[s->n_known++] = j->known[i];
                }
                j->known[i] = (Known){};
        }
        strv_free(s->ensured);
        s->ensured = TAKE_PTR(j->ensured);
        if (j->token.value != s->token.value) {
                fleet_token_done(&s->token);
                s->token = j->token;
                s->token_issued = j->token_issued;
                j->token = (FleetToken){};
        }
        if (j->root_ok)
                s->root_ok = true;
        if (j->disabled) {
                log_line(LOG_LEVEL_WARNING, 0, "placement sync disabled", "reason", j->disabled,
                         NULL);
                s->disabled = TAKE_PTR(j->disabled);
        }

        s->stats.up = !j->down && !j->disabled;
        if (j->error || j->disabled) {
                s->stats.sync_total[FLEET_RESULT_ERROR]++;
                /* Placement may have lost what vgpud thought it had made: check it all. */
                s->full_due = true;
                s->ensured = strv_free(s->ensured);
        } else {
                s->stats.sync_total[FLEET_RESULT_OK]++;
                s->stats.last_ok = clock_now(&s->clock);
        }
        log_outcome(s, j->error);

        if (s->stopping) {
                if (!s->stop_sent)
                        maybe_start(s);
                finish_stop(s);
                return;
        }
        maybe_start(s);
}

static int job_new(FleetSync *s, bool full, Job **ret)
{
        _cleanup_(job_freep) Job *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        nsec_t timeout =
            s->stopping ? MIN(s->request_timeout, STOP_REQUEST_TIMEOUT) : s->request_timeout;
        *j = (Job){
            .auth = s->auth,
            .timeout_ms = (long)(timeout / NSEC_PER_MSEC),
            .check_root = !s->root_ok,
            .full = full,
            .clock = s->clock,
            .random = s->random,
            .sleep = s->sleep,
            .test_userdata = s->test_userdata,
            .token_issued = s->token_issued,
        };
        if (strdup_nullable(s->url, &j->url) < 0 ||
            strdup_nullable(s->keystone_url, &j->keystone_url) < 0 ||
            strdup_nullable(s->credential_id, &j->credential_id) < 0 ||
            strdup_nullable(s->credential_secret, &j->credential_secret) < 0 ||
            strdup_nullable(s->token.value, &j->token.value) < 0)
                return -ENOMEM;
        j->token.expires_at = s->token.expires_at;
        for (char **e = s->ensured; e && *e; e++)
                if (strv_push(&j->ensured, *e) < 0)
                        return -ENOMEM;

        /* FLEET-6: what local records name now is never deleted, by the audit or the set (a
         * consumer released and then given to a new instance here stays). */
        if (s->consumers && s->consumers(s->userdata, &j->local) < 0)
                return -ENOMEM;
        for (char **c = s->pending; c && *c;) {
                if (strv_contains_str(j->local, *c)) {
                        strv_remove(s->pending, *c);
                        continue;
                }
                if (strv_push(&j->deletes, *c) < 0)
                        return -ENOMEM;
                c++;
        }
        j->grace = s->orphan_grace;
        if (full && s->n_seen > 0) {
                j->seen = calloc(s->n_seen, sizeof *j->seen);
                if (!j->seen)
                        return -ENOMEM;
                memcpy(j->seen, s->seen, s->n_seen * sizeof *j->seen);
                j->n_seen = s->n_seen;
        }

        j->wanted = calloc(1, sizeof *j->wanted);
        if (!j->wanted)
                return -ENOMEM;
        j->wanted->providers = calloc(s->wanted->n_providers, sizeof *j->wanted->providers);
        j->known = calloc(s->wanted->n_providers, sizeof *j->known);
        if (!j->wanted->providers || !j->known)
                return -ENOMEM;
        for (size_t i = 0; i < s->wanted->n_providers; i++) {
                const FleetProvider *w = &s->wanted->providers[i];
                Known *k = knowns_find(s->known, s->n_known, w->uuid);
                /* The root always goes first, so that children have their parent. */
                if (!full && i > 0 && !provider_needs_send(w, k))
                        continue;
                size_t n = j->wanted->n_providers;
                if (fleet_provider_copy(w, &j->wanted->providers[n]) < 0)
                        return -ENOMEM;
                j->wanted->n_providers++;
                Known blank = {.generation = -1};
                memcpy(blank.state.uuid, w->uuid, FLEET_UUID_STRLEN);
                if (k ? known_copy(k, &j->known[n]) < 0 : known_copy(&blank, &j->known[n]) < 0)
                        return -ENOMEM;
                j->n_known++;
        }
        *ret = TAKE_PTR(j);
        return 0;
}

static bool anything_to_send(FleetSync *s)
{
        for (size_t i = 0; i < s->wanted->n_providers; i++)
                if (provider_needs_send(
                        &s->wanted->providers[i],
                        knowns_find(s->known, s->n_known, s->wanted->providers[i].uuid)))
                        return true;
        return false;
}

static void maybe_start(FleetSync *s)
{
        if (s->running || s->disabled || !s->wanted || s->stop_sent || !s->event)
                return;
        bool full = s->full_due || !s->root_ok;
        if (!full && !anything_to_send(s) && !(s->pending && *s->pending && s->pending_new)) {
                if (s->stopping)
                        s->stop_sent = true;
                return;
        }
        Job *j = NULL;
        _cleanup_free_ char *error = NULL;
        int r = job_new(s, full, &j);
        if (r >= 0) {
                WorkerJob wj = {.run = job_run,
                                .done = on_job_done,
                                .data = j,
                                .free_data = job_free,
                                .userdata = s};
                r = worker_pool_submit(s->pool, &wj, &error);
                if (r < 0)
                        job_free(j);
        }
        if (r < 0) {
                log_error_errno(r, "start a placement sync: %s", error ? error : strerror(-r));
                return;
        }
        s->running = true;
        s->pending_new = false;
        if (full)
                s->full_due = false;
        if (s->stopping)
                s->stop_sent = true;
}

static void recompute(FleetSync *s, bool force)
{
        uint64_t key = s->state_key ? s->state_key(s->userdata) : 0;
        if (!force && s->key_valid && key == s->key && s->wanted)
                return;
        FleetWanted *w = NULL;
        int r = s->compute(s->userdata, s->stopping, &w);
        if (r < 0) {
                log_error_errno(r, "compute the placement providers: %m");
                return;
        }
        fleet_wanted_free(s->wanted);
        s->wanted = w;
        s->key = key;
        s->key_valid = true;
}

void fleet_sync_trigger(FleetSync *s)
{
        if (!s || s->stopping || s->disabled)
                return;
        recompute(s, false);
        maybe_start(s);
}

static int arm(FleetSync *s, sd_event_source **src, nsec_t interval,
               sd_event_time_handler_t handler)
{
        uint64_t usec = interval / NSEC_PER_USEC;
        if (*src) {
                int r = sd_event_source_set_time_relative(*src, usec);
                return r < 0 ? r : sd_event_source_set_enabled(*src, SD_EVENT_ONESHOT);
        }
        return sd_event_add_time_relative(s->event, src, CLOCK_MONOTONIC, usec, 0, handler, s);
}

static int on_check(sd_event_source *src, uint64_t usec, void *userdata)
{
        FleetSync *s = userdata;
        fleet_sync_trigger(s);
        if (!s->stopping && !s->disabled)
                (void)arm(s, &s->check_timer, s->check_interval, on_check);
        return 0;
}

static int on_full(sd_event_source *src, uint64_t usec, void *userdata)
{
        FleetSync *s = userdata;
        if (s->stopping || s->disabled)
                return 0;
        s->full_due = true;
        recompute(s, false);
        maybe_start(s);
        return arm(s, &s->full_timer, s->interval, on_full);
}

int fleet_sync_attach_event(FleetSync *s, sd_event *event)
{
        if (!s || s->event)
                return -EINVAL;
        s->event = sd_event_ref(event);
        int r = worker_pool_attach_event(s->pool, event);
        if (r >= 0)
                r = arm(s, &s->check_timer, s->check_interval, on_check);
        if (r >= 0)
                r = arm(s, &s->full_timer, s->interval, on_full);
        if (r < 0)
                return r;
        /* The first run (a full one) right away. */
        s->full_due = true;
        recompute(s, true);
        maybe_start(s);
        return 0;
}

void fleet_sync_stop(FleetSync *s)
{
        if (!s || s->stopping)
                return;
        s->stopping = true;
        sd_event_source_disable_unref(s->check_timer);
        sd_event_source_disable_unref(s->full_timer);
        s->check_timer = s->full_timer = NULL;
        if (!s->disabled && s->root_ok && s->event) {
                recompute(s, true); /* FLEET-4: every PF drained while vgpud stops */
                maybe_start(s);
        } else
                s->stop_sent = true;
        finish_stop(s);
}

bool fleet_sync_is_idle(const FleetSync *s)
{
        return !s || !s->running;
}

int fleet_sync_delete_consumer(FleetSync *s, const char *consumer)
{
        if (!s || !consumer || strlen(consumer) != FLEET_UUID_STRLEN - 1)
                return -EINVAL;
        if (!strv_contains_str(s->pending, consumer) && strv_push(&s->pending, consumer) < 0)
                return -ENOMEM;
        s->pending_new = true;
        /*
         * The next loop iteration starts the run, not this call: the caller may still be in the
         * middle of letting the instance go, and a run that listed it would keep the consumer.
         */
        if (s->check_timer && !s->stopping)
                (void)arm(s, &s->check_timer, 0, on_check);
        return 0;
}

const FleetSyncStats *fleet_sync_get_stats(const FleetSync *s)
{
        return &s->stats;
}

const char *fleet_sync_disabled_reason(const FleetSync *s)
{
        return s->disabled;
}

int fleet_sync_new(const FleetSyncConfig *c, FleetSync **ret)
{
        if (!c || !c->url || !*c->url || !c->compute)
                return -EINVAL;
        FleetSync *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        *s = (FleetSync){
            .auth = c->auth,
            .interval = c->interval ? c->interval : 30 * NSEC_PER_SEC,
            .check_interval = c->check_interval ? c->check_interval : CHECK_INTERVAL_DEFAULT,
            .request_timeout = c->request_timeout ? c->request_timeout : REQUEST_TIMEOUT_DEFAULT,
            .state_key = c->state_key,
            .compute = c->compute,
            .consumers = c->consumers,
            .orphan_grace = c->orphan_grace ? c->orphan_grace : 10 * NSEC_PER_MIN,
            .stopped = c->stopped,
            .userdata = c->userdata,
            .clock = c->clock ? *c->clock : clock_realtime,
            .random = c->random,
            .sleep = c->sleep,
            .test_userdata = c->test_userdata,
        };
        /* The URL without trailing slashes, so that paths join with one. */
        size_t n = strlen(c->url);
        while (n > 0 && c->url[n - 1] == '/')
                n--;
        s->url = strndup(c->url, n);
        WorkerPoolConfig wc = {.threads = 1};
        if (!s->url || strdup_nullable(c->keystone_url, &s->keystone_url) < 0 ||
            strdup_nullable(c->credential_id, &s->credential_id) < 0 ||
            strdup_nullable(c->credential_secret, &s->credential_secret) < 0 ||
            curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK ||
            worker_pool_new(&wc, &s->pool) < 0) {
                fleet_sync_free(s);
                return -ENOMEM;
        }
        if (s->keystone_url) {
                size_t k = strlen(s->keystone_url);
                while (k > 0 && s->keystone_url[k - 1] == '/')
                        s->keystone_url[--k] = 0;
        }
        *ret = s;
        return 0;
}

FleetSync *fleet_sync_free(FleetSync *s)
{
        if (!s)
                return NULL;
        /* A run in flight finishes on its own thread with its own copies. */
        worker_pool_free(s->pool);
        sd_event_source_disable_unref(s->check_timer);
        sd_event_source_disable_unref(s->full_timer);
        sd_event_unref(s->event);
        free(s->url);
        free(s->keystone_url);
        free(s->credential_id);
        if (s->credential_secret)
                explicit_bzero(s->credential_secret, strlen(s->credential_secret));
        free(s->credential_secret);
        fleet_wanted_free(s->wanted);
        knowns_free(s->known, s->n_known);
        strv_free(s->ensured);
        fleet_token_done(&s->token);
        free(s->disabled);
        free(s->logged_error);
        strv_free(s->pending);
        free(s->seen);
        free(s);
        return NULL;
}
