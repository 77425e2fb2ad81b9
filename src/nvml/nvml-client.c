/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The loop's side of NVML: requests go to the NVML slot, answers come back here and are folded
 * into the fallback state, the counters and the placement cache before the caller sees them.
 */
#include <sys/eventfd.h>

#include "nvml-internal.h"

#define NVML_DEFAULT_TIMEOUT (5 * NSEC_PER_SEC)
#define NVML_STUCK_MESSAGE "NVML thread stuck in a call past its deadline"

typedef struct CacheEntry {
        bool has_placements;
        NvmlPlacements placements;
} CacheEntry;

typedef struct CacheGpu {
        char pf[PCI_ADDRESS_STRLEN];
        bool answered; /* an answer has covered it: its states below are real */
        NvmlMode mode;
        NvmlFallback fallback;
        char *error;
        bool last_placement_failed;
        char *name;
        bool has_catalog;
        NvmlTypeInfo *catalog; /* names owned */
        CacheEntry *entries;   /* parallel to catalog */
        size_t n_types;
} CacheGpu;

typedef struct Pending Pending;
struct Pending {
        Pending *next;       /* every request not yet answered */
        Pending *ready_next; /* answered without the library, waiting for dispatch */
        NvmlClient *client;
        NvmlAnswerFunc done;
        void *userdata;
        bool is_refresh;
        NvmlAnswer ready;
};

/* A request's data on the NVML thread. */
typedef struct JobData {
        NvmlSession *session;
        NvmlRequest req;
        NvmlAnswer answer;
        bool shutdown; /* the last job: nvmlShutdown (NVML-17) */
        bool did_init;
        char *driver_version;
} JobData;

struct NvmlClient {
        char *library;
        nsec_t timeout;
        const MonoClock *clock;
        void (*refreshed)(NvmlClient *c, void *userdata);
        void *userdata;

        WorkerPool *slot;
        NvmlSession *session;          /* NULL when NVML is disabled */
        int event_fd;                  /* answers decided on the loop are ready */
        sd_event_source *event_source; /* on event_fd */

        Pending *pending;
        Pending *ready_head, **ready_tail;

        bool initialised;
        char *driver_version;
        unsigned placement_list_version; /* NVML-3a: logged once the library's is known */
        bool host_answered;
        NvmlFallback host_fallback;
        char *host_error;

        CacheGpu *gpus;
        size_t n_gpus;
        NvmlFallbackCounters counters;
        uint64_t generation; /* bumped by apply_answer() and set_gpus (PERF-1) */

        bool refresh_running, refresh_again, refresh_again_init;
};

/* ---- the NVML thread's jobs ------------------------------------------------------------------ */

static void job_data_free(void *data)
{
        JobData *jd = data;
        nvml_session_unref(jd->session);
        nvml_request_done(&jd->req);
        nvml_answer_done(&jd->answer);
        free(jd->driver_version);
        free(jd);
}

static int job_run(void *data, char **error)
{
        JobData *jd = data;
        NvmlSession *s = jd->session;

        if (jd->shutdown) {
                nvml_session_shutdown(s);
                return 0;
        }
        if (jd->req.init && !s->initialised) {
                _cleanup_free_ char *init_error = NULL;
                jd->did_init = true;
                int r = nvml_session_init(s, &jd->driver_version, &init_error);
                if (r < 0) {
                        jd->answer.started = mono_clock_now(s->clock);
                        jd->answer.host_fallback = NVML_FALLBACK_UNAVAILABLE;
                        jd->answer.host_error = TAKE_PTR(init_error);
                        return 0;
                }
        }
        nvml_session_run(s, &jd->req, &jd->answer);
        return 0;
}

/* ---- logging and state (NVML-11, NVML-12, NVML-13) ------------------------------------------- */

static void set_host_state(NvmlClient *c, NvmlFallback f, const char *error)
{
        if (f == NVML_FALLBACK_NONE) {
                if (c->host_answered && c->host_fallback != NVML_FALLBACK_NONE)
                        log_line(LOG_LEVEL_INFO, 0, "NVML placements recovered", NULL);
        } else if (!c->host_answered || c->host_fallback != f || !streq_ptr(c->host_error, error))
                log_line(LOG_LEVEL_WARNING, 0, "NVML placements fall back to sysfs lists", "reason",
                         nvml_fallback_to_string(f), "error", error, NULL);

        c->host_answered = true;
        c->host_fallback = f;
        if (!streq_ptr(c->host_error, error)) {
                free(c->host_error);
                c->host_error = error ? strdup(error) : NULL;
        }
}

static void set_gpu_state(CacheGpu *g, NvmlFallback f, const char *error)
{
        if (f == NVML_FALLBACK_NONE) {
                if (g->answered && g->fallback != NVML_FALLBACK_NONE)
                        log_line(LOG_LEVEL_INFO, 0, "NVML placements recovered", "gpu", g->pf,
                                 NULL);
        } else if (!g->answered || g->fallback != f || !streq_ptr(g->error, error))
                log_line(LOG_LEVEL_WARNING, 0, "NVML placements fall back to sysfs lists", "gpu",
                         g->pf, "reason", nvml_fallback_to_string(f), "error", error, NULL);

        g->fallback = f;
        if (!streq_ptr(g->error, error)) {
                free(g->error);
                g->error = error ? strdup(error) : NULL;
        }
}

static void set_gpu_mode(CacheGpu *g, NvmlMode m)
{
        if (g->answered && g->mode != m)
                log_warning("vGPU mode of GPU %s changed from %s to %s", g->pf,
                            nvml_mode_to_string(g->mode), nvml_mode_to_string(m));
        g->mode = m;
}

static CacheGpu *find_gpu(NvmlClient *c, const char *pf)
{
        for (size_t i = 0; pf && i < c->n_gpus; i++)
                if (streq(c->gpus[i].pf, pf))
                        return &c->gpus[i];
        return NULL;
}

static CacheEntry *find_entry(CacheGpu *g, nvmlVgpuTypeId_t id, const NvmlTypeInfo **ret_info)
{
        for (size_t i = 0; i < g->n_types; i++)
                if (g->catalog[i].type_id == id) {
                        if (ret_info)
                                *ret_info = &g->catalog[i];
                        return &g->entries[i];
                }
        return NULL;
}

static void cache_gpu_done(CacheGpu *g)
{
        free(g->error);
        free(g->name);
        nvml_type_infos_free(g->catalog, g->n_types);
        free(g->entries);
        *g = (CacheGpu){};
}

/* A refresh's catalog replaces the GPU's; placements of types that stay are kept. */
static int apply_catalog(CacheGpu *g, const NvmlGpuAnswer *a)
{
        size_t n = a->n_catalog;
        _cleanup_free_ char *name = strdup(a->name ? a->name : "");
        _cleanup_free_ CacheEntry *entries = n > 0 ? calloc(n, sizeof *entries) : NULL;
        NvmlTypeInfo *catalog = n > 0 ? calloc(n, sizeof *catalog) : NULL;
        if (!name || (n > 0 && (!entries || !catalog))) {
                free(catalog);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                catalog[i] = a->catalog[i];
                catalog[i].name = strdup(a->catalog[i].name);
                if (!catalog[i].name) {
                        nvml_type_infos_free(catalog, i);
                        return -ENOMEM;
                }
                CacheEntry *old = find_entry(g, a->catalog[i].type_id, NULL);
                if (old)
                        entries[i] = *old;
        }
        nvml_type_infos_free(g->catalog, g->n_types);
        free(g->entries);
        g->catalog = catalog;
        g->entries = TAKE_PTR(entries);
        g->n_types = n;
        free(g->name);
        g->name = TAKE_PTR(name);
        g->has_catalog = true;
        return 0;
}

static void apply_answer(NvmlClient *c, const NvmlAnswer *a)
{
        c->generation++;
        if (a->placement_list_version != 0 &&
            a->placement_list_version != c->placement_list_version) {
                /* NVML-3a: the session keeps the version for the library's lifetime. */
                c->placement_list_version = a->placement_list_version;
                log_info("NVML placement list v%u (driver %s)", c->placement_list_version,
                         c->driver_version ? c->driver_version : "unknown");
        }
        if (a->host_fallback != NVML_FALLBACK_NONE) {
                /* NVML-12: one per whole-host fallback round. */
                c->counters.total[a->host_fallback]++;
                set_host_state(c, a->host_fallback, a->host_error);
                return;
        }
        set_host_state(c, NVML_FALLBACK_NONE, NULL);

        for (size_t i = 0; i < a->n_gpus; i++) {
                const NvmlGpuAnswer *ga = &a->gpus[i];
                if (ga->fallback != NVML_FALLBACK_NONE)
                        c->counters.total[ga->fallback]++; /* NVML-12: one per GPU */

                CacheGpu *g = find_gpu(c, ga->pf);
                if (!g)
                        continue; /* not (or no longer) covered by the cache */
                if (ga->mode != NVML_MODE_UNKNOWN)
                        set_gpu_mode(g, ga->mode);
                set_gpu_state(g, ga->fallback, ga->error);
                g->last_placement_failed = ga->fallback == NVML_FALLBACK_ERROR;
                if (ga->has_catalog && apply_catalog(g, ga) < 0)
                        log_warning("NVML catalog of GPU %s not cached: out of memory", g->pf);
                for (size_t k = 0; k < ga->n_placements; k++) {
                        const NvmlPlacements *p = &ga->placements[k];
                        CacheEntry *e = find_entry(g, p->type_id, NULL);
                        /*
                         * NVML-15: only a query that started later replaces an entry. The
                         * thread's start order decides, since two starts may read one clock tick.
                         */
                        if (e && (!e->has_placements || p->seq > e->placements.seq)) {
                                e->placements = *p;
                                e->has_placements = true;
                        }
                }
                g->answered = true;
        }
}

/* ---- requests -------------------------------------------------------------------------------- */

static void notify(NvmlClient *c)
{
        uint64_t one = 1;
        (void)!write(c->event_fd, &one, sizeof one);
}

static void pending_unlink(NvmlClient *c, Pending *p)
{
        for (Pending **q = &c->pending; *q; q = &(*q)->next)
                if (*q == p) {
                        *q = p->next;
                        return;
                }
}

static int start_refresh(NvmlClient *c, bool init);

static void complete(Pending *p, NvmlAnswer *a)
{
        NvmlClient *c = p->client;

        apply_answer(c, a);
        pending_unlink(c, p);
        if (p->done)
                p->done(c, a, p->userdata);
        if (p->is_refresh) {
                c->refresh_running = false;
                if (c->refreshed)
                        c->refreshed(c, c->userdata);
                if (c->refresh_again) {
                        /* NVML-15: requests that came meanwhile cause exactly one more run. */
                        bool init = c->refresh_again_init;
                        c->refresh_again = c->refresh_again_init = false;
                        if (start_refresh(c, init) < 0)
                                log_warning("NVML placement cache refresh not started: "
                                            "out of memory");
                }
        }
        nvml_answer_done(&p->ready);
        free(p);
}

/* An answer decided on the loop: delivered by the next dispatch, never from inside a call. */
static void answer_later(NvmlClient *c, Pending *p, NvmlFallback f, const char *error)
{
        p->ready = (NvmlAnswer){.host_fallback = f, .host_error = error ? strdup(error) : NULL};
        p->ready_next = NULL;
        *c->ready_tail = p;
        c->ready_tail = &p->ready_next;
        notify(c);
}

static void job_done(int r, void *data, const char *error, void *userdata)
{
        Pending *p = userdata;
        NvmlClient *c = p->client;
        JobData *jd = data;
        NvmlAnswer a = {};

        if (jd) {
                /*
                 * An init that worked counts even when the rest of its request fell back the
                 * host (a library that refuses both placement lists, NVML-3a): the session
                 * stays initialised and will not report it again.
                 */
                if (jd->did_init && jd->driver_version) {
                        free(c->driver_version);
                        c->driver_version = TAKE_PTR(jd->driver_version);
                        c->initialised = true;
                        log_line(LOG_LEVEL_INFO, 0, "NVML initialised", "driver_version",
                                 c->driver_version, NULL);
                }
                a = jd->answer;
                jd->answer = (NvmlAnswer){};
        } else {
                /* The pool ended it: abandoned at its deadline, or refused behind a stuck call. */
                _cleanup_free_ char *msg = NULL;
                if (r == -ETIMEDOUT) {
                        (void)strprintf(&msg, "NVML request %s", error);
                        a.host_fallback = NVML_FALLBACK_TIMEOUT;
                } else {
                        msg = strdup(NVML_STUCK_MESSAGE);
                        a.host_fallback = NVML_FALLBACK_STUCK;
                }
                a.host_error = TAKE_PTR(msg);
        }
        complete(p, &a);
        nvml_answer_done(&a);
}

static int submit_job(NvmlClient *c, JobData *jd, Pending *p, char **error)
{
        WorkerJob job = {
            .timeout = c->timeout,
            .run = job_run,
            .done = p ? job_done : NULL,
            .data = jd,
            .free_data = job_data_free,
            .userdata = p,
        };
        return worker_pool_submit(c->slot, &job, error);
}

static int query(NvmlClient *c, const NvmlRequest *req, bool is_refresh, NvmlAnswerFunc done,
                 void *userdata)
{
        Pending *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        *p = (Pending){.client = c, .done = done, .userdata = userdata, .is_refresh = is_refresh};

        if (!c->session) {
                p->next = c->pending;
                c->pending = p;
                answer_later(c, p, NVML_FALLBACK_UNAVAILABLE,
                             "NVML is disabled (nvml_library "
                             "is empty)");
                return 0;
        }

        JobData *jd = calloc(1, sizeof *jd);
        if (!jd) {
                free(p);
                return -ENOMEM;
        }
        int r = nvml_request_copy(req, &jd->req);
        if (r < 0) {
                free(jd);
                free(p);
                return r;
        }
        jd->session = nvml_session_ref(c->session);

        _cleanup_free_ char *error = NULL;
        r = submit_job(c, jd, p, &error);
        if (r < 0) {
                job_data_free(jd);
                if (r != -EBUSY) {
                        free(p);
                        return r;
                }
                /* NVML-10: stuck; nothing enters the library, and the caller hears so at once. */
                p->next = c->pending;
                c->pending = p;
                answer_later(c, p, NVML_FALLBACK_STUCK, NVML_STUCK_MESSAGE);
                return 0;
        }
        p->next = c->pending;
        c->pending = p;
        return 0;
}

int nvml_client_query(NvmlClient *c, const NvmlRequest *req, NvmlAnswerFunc done, void *userdata)
{
        if (!c || !req)
                return -EINVAL;
        return query(c, req, false, done, userdata);
}

/* ---- the refresher (NVML-14, NVML-15) -------------------------------------------------------- */

static int start_refresh(NvmlClient *c, bool init)
{
        NvmlRequest req = {.init = init, .n_gpus = c->n_gpus};
        _cleanup_free_ NvmlGpuRequest *gpus = NULL;

        if (c->n_gpus > 0) {
                gpus = calloc(c->n_gpus, sizeof *gpus);
                if (!gpus)
                        return -ENOMEM;
        }
        for (size_t i = 0; i < c->n_gpus; i++) {
                snprintf(gpus[i].pf, sizeof gpus[i].pf, "%s", c->gpus[i].pf);
                /* NVML-7, NVML-8: mode, catalog and maximum instances on every refresh. */
                gpus[i].query_mode = gpus[i].query_catalog = gpus[i].query_placements = true;
        }
        req.gpus = gpus;
        int r = query(c, &req, true, NULL, NULL);
        if (r >= 0)
                c->refresh_running = true;
        return r;
}

int nvml_client_request_refresh(NvmlClient *c, bool init)
{
        if (c->refresh_running) {
                c->refresh_again = true;
                c->refresh_again_init |= init;
                return 0;
        }
        return start_refresh(c, init);
}

bool nvml_client_refresh_is_running(NvmlClient *c)
{
        return c->refresh_running;
}

int nvml_client_set_gpus(NvmlClient *c, char *const *pfs, size_t n)
{
        for (size_t i = 0; i < n; i++)
                if (!pci_address_is_valid(pfs[i]))
                        return -EINVAL;

        CacheGpu *gpus = n > 0 ? calloc(n, sizeof *gpus) : NULL;
        if (n > 0 && !gpus)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                CacheGpu *old = find_gpu(c, pfs[i]);
                if (old) {
                        gpus[i] = *old;
                        *old = (CacheGpu){}; /* moved */
                } else {
                        snprintf(gpus[i].pf, sizeof gpus[i].pf, "%s", pfs[i]);
                        gpus[i].fallback = NVML_FALLBACK_UNAVAILABLE;
                }
        }
        for (size_t i = 0; i < c->n_gpus; i++)
                cache_gpu_done(&c->gpus[i]);
        free(c->gpus);
        c->gpus = gpus;
        c->n_gpus = n;
        c->generation++;
        return 0;
}

int nvml_client_prepare_gpu_request(NvmlClient *c, const char *pf, const nvmlVgpuTypeId_t *types,
                                    size_t n_types, NvmlGpuRequest *ret)
{
        CacheGpu *g = find_gpu(c, pf);
        if (!g)
                return -ENOENT;
        if (n_types > NVML_MAX_TYPES || (n_types > 0 && !types))
                return -EINVAL;

        NvmlGpuRequest r = {
            .query_mode = g->mode == NVML_MODE_UNKNOWN || g->last_placement_failed,
            .query_placements = true,
            .n_types = n_types,
        };
        snprintf(r.pf, sizeof r.pf, "%s", pf);
        if (n_types > 0) {
                r.types = calloc(n_types, sizeof *r.types);
                r.max_instances = calloc(n_types, sizeof *r.max_instances);
                if (!r.types || !r.max_instances) {
                        nvml_gpu_request_done(&r);
                        return -ENOMEM;
                }
        }
        for (size_t i = 0; i < n_types; i++) {
                const NvmlTypeInfo *info = NULL;
                (void)find_entry(g, types[i], &info);
                r.types[i] = types[i];
                r.max_instances[i] = info ? info->max_instances : 0; /* NVML-8: cached */
        }
        *ret = r;
        return 0;
}

/* ---- life cycle ------------------------------------------------------------------------------ */

int nvml_client_new(const NvmlClientConfig *config, NvmlClient **ret)
{
        _cleanup_free_ NvmlClient *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->event_fd = -1;
        c->ready_tail = &c->ready_head;
        c->timeout = config->timeout > 0 ? config->timeout : NVML_DEFAULT_TIMEOUT;
        c->clock = config->clock ? config->clock : &mono_clock_system;
        c->refreshed = config->refreshed;
        c->userdata = config->userdata;
        c->host_fallback = NVML_FALLBACK_UNAVAILABLE;

        if (config->library && config->library[0]) {
                c->library = strdup(config->library);
                if (!c->library)
                        return -ENOMEM;
                int r = nvml_session_new(c->library, c->clock, &c->session);
                if (r < 0) {
                        free(c->library);
                        return r;
                }
        }

        WorkerPoolConfig wc = WORKER_POOL_CONFIG_NVML;
        wc.clock = c->clock;
        int r = worker_pool_new(&wc, &c->slot);
        if (r < 0) {
                nvml_session_unref(c->session);
                free(c->library);
                return r;
        }

        NvmlClient *made = TAKE_PTR(c);
        made->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (made->event_fd < 0) {
                r = negative_errno();
                nvml_client_free(made);
                return r;
        }
        *ret = made;
        return 0;
}

NvmlClient *nvml_client_free(NvmlClient *c)
{
        if (!c)
                return NULL;

        if (c->slot && c->session && worker_pool_check_accepting(c->slot, NULL) >= 0) {
                /* NVML-17: shut down on the NVML thread, unless it is stuck; bounded. */
                JobData *jd = calloc(1, sizeof *jd);
                if (jd) {
                        jd->session = nvml_session_ref(c->session);
                        jd->shutdown = true;
                        if (submit_job(c, jd, NULL, NULL) < 0)
                                job_data_free(jd);
                        else
                                (void)worker_pool_wait_idle(c->slot, c->timeout);
                }
        }
        worker_pool_free(c->slot);

        while (c->pending) {
                Pending *p = c->pending;
                c->pending = p->next;
                nvml_answer_done(&p->ready);
                free(p);
        }
        nvml_session_unref(c->session);
        sd_event_source_disable_unref(c->event_source);
        closep(&c->event_fd);
        for (size_t i = 0; i < c->n_gpus; i++)
                cache_gpu_done(&c->gpus[i]);
        free(c->gpus);
        free(c->library);
        free(c->driver_version);
        free(c->host_error);
        free(c);
        return NULL;
}

/* Delivers the answers decided on the loop; returns how many. */
static int dispatch_ready(NvmlClient *c)
{
        uint64_t v;
        (void)!read(c->event_fd, &v, sizeof v);

        int n = 0;
        Pending *ready = c->ready_head;
        c->ready_head = NULL;
        c->ready_tail = &c->ready_head;
        while (ready) {
                Pending *p = ready;
                ready = p->ready_next;
                NvmlAnswer a = p->ready;
                p->ready = (NvmlAnswer){};
                complete(p, &a);
                nvml_answer_done(&a);
                n++;
        }
        return n;
}

static int on_ready(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
        (void)dispatch_ready(userdata);
        return 0;
}

int nvml_client_attach_event(NvmlClient *c, sd_event *event)
{
        if (!c)
                return -EINVAL;
        int r = worker_attach_io(event, &c->event_source, c->event_fd, on_ready, c);
        if (r < 0)
                return r;
        /* The slot's source on the loop the client's went to. */
        r = worker_pool_attach_event(c->slot, sd_event_source_get_event(c->event_source));
        if (r < 0)
                c->event_source = sd_event_source_disable_unref(c->event_source);
        return r;
}

int nvml_client_dispatch(NvmlClient *c)
{
        int n = worker_pool_dispatch_completions(c->slot);
        if (n < 0)
                return n;
        return n + dispatch_ready(c);
}

/* ---- reads ----------------------------------------------------------------------------------- */

bool nvml_client_is_initialised(NvmlClient *c)
{
        return c->initialised;
}

const char *nvml_client_get_driver_version(NvmlClient *c)
{
        return c->driver_version;
}

NvmlFallback nvml_client_get_host_fallback(NvmlClient *c, const char **ret_error)
{
        if (ret_error)
                *ret_error = c->host_error;
        return c->host_fallback;
}

NvmlFallback nvml_client_get_gpu_fallback(NvmlClient *c, const char *pf, const char **ret_error)
{
        if (c->host_fallback != NVML_FALLBACK_NONE)
                return nvml_client_get_host_fallback(c, ret_error);
        CacheGpu *g = find_gpu(c, pf);
        if (!g || !g->answered) {
                if (ret_error)
                        *ret_error = NULL;
                return NVML_FALLBACK_UNAVAILABLE;
        }
        if (ret_error)
                *ret_error = g->error;
        return g->fallback;
}

NvmlMode nvml_client_get_gpu_mode(NvmlClient *c, const char *pf)
{
        CacheGpu *g = find_gpu(c, pf);
        if (!g || c->host_fallback != NVML_FALLBACK_NONE)
                return NVML_MODE_UNKNOWN;
        return g->mode;
}

int nvml_client_get_gpu_name(NvmlClient *c, const char *pf, const char **ret)
{
        CacheGpu *g = find_gpu(c, pf);
        if (!g || !g->has_catalog || !g->name)
                return -ENOENT;
        *ret = g->name;
        return 0;
}

int nvml_client_get_gpu_catalog(NvmlClient *c, const char *pf, const NvmlTypeInfo **ret,
                                size_t *ret_n)
{
        CacheGpu *g = find_gpu(c, pf);
        if (!g || !g->has_catalog)
                return -ENOENT;
        *ret = g->catalog;
        *ret_n = g->n_types;
        return 0;
}

int nvml_client_get_cached_placements(NvmlClient *c, const char *pf, nvmlVgpuTypeId_t type_id,
                                      NvmlPlacements *ret)
{
        CacheGpu *g = find_gpu(c, pf);
        CacheEntry *e = g ? find_entry(g, type_id, NULL) : NULL;
        if (!e || !e->has_placements)
                return -ENOENT;
        *ret = e->placements;
        return 0;
}

const NvmlFallbackCounters *nvml_client_get_counters(NvmlClient *c)
{
        return &c->counters;
}

uint64_t nvml_client_cache_generation(const NvmlClient *c)
{
        return c->generation;
}
