/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The Manager's side of the VF health store (SPEC §5): the store is asynchronous, and every
 * stat, open, read and write of its file runs on the worker pool, one job at a time (reads:
 * begin_read → health_read_run → finish_read; writes: begin_write → health_write_run →
 * finish_write, HEALTH-20), so a hung data directory never holds the loop (ARCHITECTURE.md
 * decision 1). Repairs are asked for by reads and by reconcile passes (HEALTH-21), the 5 s
 * poll picks up external edits (HEALTH-32), and SIGHUP reloads (CFG-8, HEALTH-22); those three
 * only queue a read. A read that does not return within HEALTH_READ_TIMEOUT is abandoned and
 * the store is unavailable with that reason until one does (HEALTH-16).
 */
#include "manager.h"

/* ---- reads and writes ------------------------------------------------------------------------ */

/* Reads and writes share the key, so they never overlap, even with an abandoned read. */
#define HEALTH_JOB_KEY "vf-health"

typedef struct ReadJob {
        HealthRead *read; /* handed back to the store by the completion */
} ReadJob;

static void read_job_free(void *data)
{
        ReadJob *j = data;
        health_read_free(j->read);
        free(j);
}

static int read_job_run(void *data, char **error)
{
        ReadJob *j = data;
        health_read_run(j->read);
        return 0;
}

typedef struct WriteJob {
        HealthWrite *write; /* handed back to the store by the completion */
} WriteJob;

static void write_job_free(void *data)
{
        WriteJob *j = data;
        health_write_free(j->write);
        free(j);
}

static int write_job_run(void *data, char **error)
{
        WriteJob *j = data;
        return health_write_run(j->write);
}

static void health_write_finished(Manager *m)
{
        m->health_writing = false;
        api_health_idle(&m->api);
        manager_check_placement(m);
        manager_maybe_finish_stop(m);
}

/* latched: a load error was latched before the read (a bad file, or a read that hung). */
static void log_read(HealthReadKind kind, int r, const char *error, bool latched)
{
        if (r > 0 && latched && kind != HEALTH_READ_RELOAD) {
                log_line(LOG_LEVEL_NOTICE, 0, "VF health state loaded again", NULL);
                return;
        }
        switch (kind) {
        case HEALTH_READ_CHECK:
                if (r > 0)
                        log_line(LOG_LEVEL_NOTICE, 0,
                                 "VF health state reloaded after an external edit", NULL);
                else if (r < 0)
                        log_line(LOG_LEVEL_ERR, r, "VF health state changed on disk and is invalid",
                                 "error", error, NULL);
                break;
        case HEALTH_READ_RELOAD:
                if (r >= 0)
                        log_line(LOG_LEVEL_NOTICE, 0, "VF health state reloaded", NULL);
                else
                        log_line(LOG_LEVEL_ERR, r, "VF health state reload failed", "error", error,
                                 NULL);
                break;
        case HEALTH_READ_RETRY:
                /* Retried once a second while reads come; the latch says the rest. */
                if (r > 0)
                        log_line(LOG_LEVEL_NOTICE, 0, "VF health state loaded again", NULL);
                else if (r < 0)
                        log_line(LOG_LEVEL_DEBUG, r, "VF health state repair failed", "error",
                                 error, NULL);
                break;
        }
}

static void on_read_done(int r, void *data, const char *error, void *userdata)
{
        Manager *m = userdata;
        ReadJob *j = data;

        if (j) {
                _cleanup_free_ char *err = NULL;
                HealthReadKind kind = health_read_kind(j->read);
                bool latched = health_store_unavailable_reason(m->health) != NULL;
                r = health_store_finish_read(m->health, TAKE_PTR(j->read), &err);
                log_read(kind, r, err, latched);
        } else {
                /* The pool ended it at its deadline: the read is stuck in the data dir. */
                log_line(LOG_LEVEL_ERR, r, "VF health state read did not return", "error", error,
                         NULL);
                health_store_abandon_read(m->health, error);
        }
        health_write_finished(m);
}

/* Returns true when a read was started (or failed to start, and was abandoned). */
static bool start_read(Manager *m)
{
        HealthRead *rd = NULL;
        _cleanup_free_ char *error = NULL;
        int r = health_store_begin_read(m->health, &rd);
        if (r == 0)
                return false;

        ReadJob *j = r > 0 ? calloc(1, sizeof *j) : NULL;
        if (j) {
                j->read = rd;
                WorkerJob job = {
                    .key = HEALTH_JOB_KEY,
                    .timeout = HEALTH_READ_TIMEOUT,
                    .run = read_job_run,
                    .done = on_read_done,
                    .data = j,
                    .free_data = read_job_free,
                    .userdata = m,
                };
                r = worker_pool_submit(m->workers, &job, &error);
                if (r >= 0) {
                        m->health_writing = true;
                        return true;
                }
                free(j);
        } else
                r = error_set_oom(&error);

        /* Never read on the loop: a refused read counts as one that did not return. */
        log_line(LOG_LEVEL_ERR, r, "VF health state read not started", "error", error, NULL);
        health_read_free(rd);
        health_store_abandon_read(m->health, error);
        return true;
}

static void on_write_done(int r, void *data, const char *error, void *userdata)
{
        Manager *m = userdata;
        WriteJob *j = data;

        /* Without a deadline the pool never ends this job by itself, so data is here. */
        if (j)
                health_store_finish_write(m->health, TAKE_PTR(j->write));
        health_write_finished(m);
}

static int on_write_wanted(sd_event_source *s, void *userdata)
{
        Manager *m = userdata;
        HealthWrite *w = NULL;
        _cleanup_free_ char *error = NULL;

        if (m->health_writing)
                return 0; /* the completion asks again */
        if (start_read(m)) {
                if (!m->health_writing)
                        health_write_finished(m);
                return 0;
        }
        int r = health_store_begin_write(m->health, &w);
        if (r <= 0) {
                /* Nothing left to write (a reload may have refused what was queued). */
                api_health_idle(&m->api);
                manager_check_placement(m);
                manager_maybe_finish_stop(m);
                return 0;
        }

        WriteJob *j = calloc(1, sizeof *j);
        if (j) {
                j->write = w;
                /*
                 * No deadline: an abandoned write could not be handed back to the store, which
                 * waits for it (HEALTH-20). Writes share a key so they never overlap.
                 */
                WorkerJob job = {
                    .key = HEALTH_JOB_KEY,
                    .run = write_job_run,
                    .done = on_write_done,
                    .data = j,
                    .free_data = write_job_free,
                    .userdata = m,
                };
                r = worker_pool_submit(m->workers, &job, &error);
                if (r >= 0) {
                        m->health_writing = true;
                        return 0;
                }
                free(j);
        } else
                r = error_set_oom(&error);

        /*
         * The pool refused (every extra thread stuck on hardware). The write is already taken
         * from the store and must be completed, but never on the loop (decision 1): it fails
         * before the rename, so its requests are refused and the error latched (HEALTH-20);
         * a repair writes it again once the pool takes work.
         */
        log_line(LOG_LEVEL_WARNING, r, "VF health state write not started", "error", error, NULL);
        health_write_set_failed(w, r, error);
        health_store_finish_write(m->health, w);
        health_write_finished(m);
        return 0;
}

void manager_health_io_wanted(HealthStore *s, void *userdata)
{
        Manager *m = userdata;
        /* Not from inside the store's call: the loop starts the write right after it. */
        int r = sd_event_source_set_enabled(m->health_write_defer, SD_EVENT_ONESHOT);
        if (r < 0)
                log_error_errno(r, "schedule VF health state write: %m");
}

/* ---- repairs (HEALTH-21) --------------------------------------------------------------------- */

static void on_repair_done(HealthStore *s, int r, const HealthResult *result, const char *error,
                           void *userdata)
{
        Manager *m = userdata;
        if (r < 0)
                log_line(LOG_LEVEL_DEBUG, r, "VF health state repair failed", "error", error, NULL);
        manager_check_placement(m);
}

int manager_health_repair(Manager *m)
{
        _cleanup_free_ char *error = NULL;
        m->last_repair = manager_now();
        int r = health_store_submit(m->health, &(HealthRequest){.kind = HEALTH_REQUEST_REPAIR},
                                    on_repair_done, m, NULL, &error);
        if (r < 0)
                log_line(LOG_LEVEL_DEBUG, r, "VF health state repair failed", "error", error, NULL);
        manager_check_placement(m);
        return r;
}

static int on_repair_defer(sd_event_source *s, void *userdata)
{
        Manager *m = userdata;
        if (health_store_unavailable_reason(m->health))
                (void)manager_health_repair(m);
        return 0;
}

void manager_schedule_repair(void *userdata)
{
        Manager *m = userdata;
        /* Reads may come thousands a second; a broken file is retried at most once a second. */
        if (m->last_repair != 0 && manager_now() - m->last_repair < MANAGER_REPAIR_MIN_INTERVAL)
                return;
        m->last_repair = manager_now();
        int r = sd_event_source_set_enabled(m->repair_defer, SD_EVENT_ONESHOT);
        if (r < 0)
                log_error_errno(r, "schedule VF health state repair: %m");
}

/* ---- reloads (HEALTH-22, HEALTH-32, CFG-8) --------------------------------------------------- */

/* Both only queue a read; on_read_done() logs what it found. */
int manager_on_health_poll(sd_event_source *s, uint64_t usec, void *userdata)
{
        Manager *m = userdata;
        (void)health_store_poll(m->health, NULL);
        return manager_arm_timer(m, &m->health_poll_timer, HEALTH_POLL_INTERVAL,
                                 manager_on_health_poll);
}

void manager_health_reload(Manager *m)
{
        if (m->health_writing)
                log_line(LOG_LEVEL_INFO, 0,
                         "VF health state reload deferred until the read or write in flight ends",
                         NULL);
        (void)health_store_reload(m->health, NULL);
}

/* ---- set-up ---------------------------------------------------------------------------------- */

/* DISC-17's model of a VF's GPU, for the breaker's trip (b) (HEALTH-33). */
static const char *model_of(const char *vf_address, void *userdata)
{
        Manager *m = userdata;
        const GpuHost *h = gpu_tracker_host(m->tracker);
        const GpuVf *vf = gpu_host_find_vf(h, vf_address);
        const Gpu *g = vf ? gpu_host_find_gpu(h, vf->parent) : NULL;
        return g ? g->model : NULL;
}

/* The PF of a VF, so a drained PF's VFs leave placement (HEALTH-26). */
static const char *gpu_of(const char *vf_address, void *userdata)
{
        Manager *m = userdata;
        const GpuVf *vf = gpu_host_find_vf(gpu_tracker_host(m->tracker), vf_address);
        return vf ? vf->parent : NULL;
}

int manager_health_setup(Manager *m)
{
        const ConfigGpu *g = &m->config.gpu;
        HealthOptions options = {
            .threshold = g->vf_quarantine_threshold,
            .breaker_enabled = g->breaker.enabled,
            .breaker_window = g->breaker.window,
            .breaker_max_quarantines = g->breaker.max_quarantines,
            .model_of = model_of,
            .gpu_of = gpu_of,
            .io_wanted = manager_health_io_wanted,
            .userdata = m,
        };

        int r = sd_event_add_defer(m->event, &m->health_write_defer, on_write_wanted, m);
        if (r >= 0)
                r = sd_event_source_set_enabled(m->health_write_defer, SD_EVENT_OFF);
        if (r >= 0)
                r = sd_event_add_defer(m->event, &m->repair_defer, on_repair_defer, m);
        if (r >= 0)
                r = sd_event_source_set_enabled(m->repair_defer, SD_EVENT_OFF);
        if (r >= 0)
                r = health_store_new(m->data_dir_fd, &options, &m->health);
        if (r < 0)
                return r;
        m->api.health = m->health;

        /* HEALTH-16: a store that does not load disables placement; start-up goes on. */
        _cleanup_free_ char *error = NULL;
        r = health_store_load(m->health, &error);
        if (r < 0)
                log_line(LOG_LEVEL_ERR, r, "VF health state unavailable", "error", error, NULL);
        return 0;
}
