/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The one picture of the host (gpu.h, GpuTracker): discovery jobs on the sysfs worker pool,
 * their results folded into one GpuHost on the loop.
 *
 * Runs never overlap: a run is one full discovery, or one re-read of every VF's
 * current_vgpu_type split over the pool's threads. A request that arrives while a run is in
 * flight waits for the next one, because the running one may have read the VFs before the
 * change the requester wants to see; all the requests waiting when a run starts share it, and
 * a full run also answers the waiting re-reads.
 */
#include <inttypes.h>

#include "gpu.h"

typedef struct Request Request;
struct Request {
        Request *next;
        bool full;
        GpuTrackerDone done;
        void *userdata;
};

struct GpuTracker {
        Root *sysfs;
        WorkerPool *pool;
        GpuNvml nvml;
        bool has_nvml;
        nsec_t timeout;

        GpuHost *host;
        char *error; /* DISC-7: the last full discovery's failure, until one succeeds */
        char *driver_version;

        Request *waiting; /* for the next run, in arrival order */
        Request *running; /* answered by the run in flight */
        bool run_full;
        unsigned run_pending; /* jobs of the run not yet back */
        int run_r;
        char *run_error; /* the first failure among them */
        GpuTrackerStats stats;
};

/* ---- the jobs ------------------------------------------------------------------------------ */

typedef struct Job {
        Root *sysfs;
        bool full;
        /* full: what the NVML seam answers, copied on the loop; the results */
        GpuNvmlSnapshot *nvml;
        GpuHost *host;
        char *driver_version;
        /* re-read: these VFs' current_vgpu_type, or why it could not be read */
        char **vfs;
        uint32_t *types;
        char **errors;
} Job;

static void job_free(void *data)
{
        Job *j = data;
        root_free(j->sysfs);
        gpu_nvml_snapshot_free(j->nvml);
        gpu_host_free(j->host);
        free(j->driver_version);
        for (size_t i = 0; j->errors && j->vfs && j->vfs[i]; i++)
                free(j->errors[i]);
        free(j->errors);
        free(j->types);
        strv_freep(&j->vfs);
        free(j);
}

static int job_run(void *data, char **error)
{
        Job *j = data;
        if (!j->full) {
                /* One bounded read per VF (DISC-5); a failure makes that VF unreadable only. */
                for (size_t i = 0; j->vfs[i]; i++)
                        (void)gpu_read_current_type(j->sysfs, j->vfs[i], &j->types[i],
                                                    &j->errors[i]);
                return 0;
        }

        GpuNvml seam;
        gpu_nvml_snapshot_seam(j->nvml, &seam);
        /* gpu_discover's own text (DISC-7) is the job's message. */
        int r = gpu_discover(j->sysfs, &seam, &j->host, error);
        if (r < 0)
                return r;
        /* HEALTH-30: a host without the module file simply has no version to track. */
        _cleanup_free_ char *version = NULL;
        if (root_read_attr(j->sysfs, "module/nvidia/version", GPU_DRIVER_VERSION_MAX, &version) >=
            0)
                j->driver_version = strdup(strstrip(version));
        return 0;
}

/* ---- folding results in -------------------------------------------------------------------- */

/* DISC-7's text, or NULL once a full discovery succeeds. */
static void set_error(GpuTracker *t, const char *error)
{
        if (streq_ptr(t->error, error))
                return;
        if (error)
                (void)error_set(&t->error, -EIO, "%s", error);
        else {
                free(t->error);
                t->error = NULL;
        }
}

/* A re-read changes what a VF holds (DISC-5) or makes it unreadable (DISC-6). */
static void apply_types(GpuTracker *t, Job *j)
{
        for (size_t i = 0; j->vfs[i]; i++) {
                GpuVf *vf = (GpuVf *)gpu_host_find_vf(t->host, j->vfs[i]);
                if (!vf || !gpu_vf_is_readable(vf))
                        continue;
                if (j->errors[i]) {
                        vf->error = TAKE_PTR(j->errors[i]);
                        continue;
                }
                if (vf->current_type_id == j->types[i])
                        continue;
                vf->current_type_id = j->types[i];
                free(vf->current_profile);
                vf->current_profile = NULL;
                const Gpu *g = vf->parent[0] ? gpu_host_find_gpu(t->host, vf->parent) : NULL;
                const GpuProfile *p =
                    g && j->types[i] ? gpu_find_profile_by_type_id(g, j->types[i]) : NULL;
                if (p)
                        vf->current_profile = strdup(p->name);
        }
}

static void apply_discovery(GpuTracker *t, Job *j)
{
        gpu_host_free(t->host);
        t->host = TAKE_PTR(j->host);
        if (j->driver_version) {
                free(t->driver_version);
                t->driver_version = TAKE_PTR(j->driver_version);
        }
}

static int start_run(GpuTracker *t, char **error);
static void complete(Request *list, int r, const char *error);

static void finish_run(GpuTracker *t)
{
        Request *done = TAKE_PTR(t->running);
        _cleanup_free_ char *error = TAKE_PTR(t->run_error);
        _cleanup_free_ char *next_error = NULL;
        int r = t->run_r;

        if (t->run_full)
                set_error(t, error); /* NULL after a run that succeeded */
        /* The next run starts before anyone hears of this one, so a requester that asks again
         * from its callback waits for a run that starts after its request. */
        int next = start_run(t, &next_error);
        Request *refused = next < 0 ? TAKE_PTR(t->running) : NULL;
        complete(done, r, error);
        complete(refused, next, next_error);
}

static void on_job_done(int r, void *data, const char *error, void *userdata)
{
        GpuTracker *t = userdata;
        Job *j = data;

        if (r >= 0 && j) {
                if (j->full)
                        apply_discovery(t, j);
                else
                        apply_types(t, j);
        } else if (t->run_r >= 0) {
                /*
                 * r < 0. A job that ran and failed was a full one, and error is gpu_discover's
                 * own text (DISC-7); without data the pool ended the job and error is its text.
                 */
                t->run_r = r;
                if (!j && t->run_full)
                        (void)error_set(&t->run_error, r, "discover GPUs: %s", error);
                else
                        (void)error_set(&t->run_error, r, "%s", error);
        }
        if (--t->run_pending == 0)
                finish_run(t);
}

/* ---- starting runs ------------------------------------------------------------------------- */

static int job_new(GpuTracker *t, bool full, Job **ret)
{
        Job *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->full = full;
        int r = root_dup(t->sysfs, &j->sysfs);
        if (r >= 0 && full) {
                /* The live seam is the loop's; the job answers from a copy (DISC-18). */
                _cleanup_free_ char **pfs =
                    calloc((t->host ? t->host->n_gpus : 0) + 1, sizeof *pfs);
                for (size_t i = 0; pfs && t->host && i < t->host->n_gpus; i++)
                        pfs[i] = t->host->gpus[i].address;
                r = pfs ? gpu_nvml_snapshot_new(t->has_nvml ? &t->nvml : NULL, pfs,
                                                t->host ? t->host->n_gpus : 0, &j->nvml)
                        : -ENOMEM;
        }
        if (r < 0) {
                job_free(j);
                return r;
        }
        *ret = j;
        return 0;
}

static int job_add_vfs(GpuTracker *t, Job *j, size_t from, size_t to)
{
        j->types = calloc(to - from + 1, sizeof *j->types);
        j->errors = calloc(to - from + 1, sizeof *j->errors);
        j->vfs = calloc(to - from + 1, sizeof *j->vfs);
        if (!j->types || !j->errors || !j->vfs)
                return -ENOMEM;
        for (size_t i = from; i < to; i++)
                if (!(j->vfs[i - from] = strdup(t->host->vfs[i].address)))
                        return -ENOMEM;
        return 0;
}

static int submit(GpuTracker *t, Job *j, char **error)
{
        WorkerJob job = {
            .timeout = t->timeout,
            .run = job_run,
            .done = on_job_done,
            .data = j,
            .free_data = job_free,
            .userdata = t,
        };
        int r = worker_pool_submit(t->pool, &job, error);
        if (r < 0)
                job_free(j);
        return r;
}

/*
 * Submits the jobs of one run. Returns the number submitted, or -errno with *error when not even
 * the first could be: then nothing is in flight.
 */
static int submit_run(GpuTracker *t, bool full, char **error)
{
        size_t n_vfs = full || !t->host ? 0 : t->host->n_vfs;
        /* A re-read is on every claim's path: split it over the pool's threads. */
        size_t chunks = n_vfs / 8;
        if (chunks < 1)
                chunks = 1;
        if (chunks > WORKER_POOL_THREADS)
                chunks = WORKER_POOL_THREADS;

        int submitted = 0;
        for (size_t k = 0; k < chunks; k++) {
                _cleanup_free_ char *e = NULL;
                Job *j = NULL;
                int r = job_new(t, full, &j);
                if (r >= 0 && !full)
                        r = job_add_vfs(t, j, n_vfs * k / chunks, n_vfs * (k + 1) / chunks);
                if (r < 0) {
                        if (j)
                                job_free(j);
                        (void)error_set(&e, r, "%s", strerror(-r));
                } else
                        r = submit(t, j, &e);
                if (r < 0) {
                        if (submitted == 0)
                                return error_set(error, r, "%s", e);
                        /* The jobs already out finish the run, as a failed one. */
                        t->run_r = r;
                        t->run_error = TAKE_PTR(e);
                        break;
                }
                submitted++;
        }
        return submitted;
}

/* error is the failure's message (r < 0), never NULL then, and NULL on success. */
static void complete(Request *list, int r, const char *error)
{
        while (list) {
                Request *q = list;
                list = q->next;
                if (q->done)
                        q->done(r, error, q->userdata);
                free(q);
        }
}

/*
 * Starts a run for the waiting requests, which then wait on it (t->running). When no job could
 * be submitted, the failure is the run's at once: a full one sets DISC-7's error (GEN-4: no
 * thread to discover with is a discovery failure like any other), the requests stay in
 * t->running for the caller to answer, and -errno with *error is returned.
 */
static int start_run(GpuTracker *t, char **error)
{
        if (t->running || !t->waiting)
                return 0;
        bool full = !t->host;
        for (Request *q = t->waiting; q; q = q->next)
                full |= q->full;

        t->run_r = 0;
        t->run_full = full;
        t->running = TAKE_PTR(t->waiting);
        int r = submit_run(t, full, error);
        if (r < 0) {
                if (full)
                        set_error(t, *error);
                return r;
        }
        t->run_pending = (unsigned)r;
        if (full)
                t->stats.discoveries++;
        else
                t->stats.rereads++;
        return 0;
}

static int request(GpuTracker *t, bool full, GpuTrackerDone done, void *userdata, char **error)
{
        Request *q = calloc(1, sizeof *q);
        if (!q)
                return error_set(error, -ENOMEM, "out of memory");
        *q = (Request){.full = full, .done = done, .userdata = userdata};
        Request **tail = &t->waiting;
        while (*tail)
                tail = &(*tail)->next;
        *tail = q;
        if (t->running)
                return 0;
        /* Idle: q is the only request waiting, so a run that cannot start is q's failure. */
        _cleanup_free_ char *e = NULL;
        int r = start_run(t, &e);
        if (r < 0) {
                free(TAKE_PTR(t->running));
                return error_set(error, r, "%s", e);
        }
        return 0;
}

/* ---- the public side ----------------------------------------------------------------------- */

int gpu_tracker_discover(GpuTracker *t, GpuTrackerDone done, void *userdata, char **error)
{
        return request(t, true, done, userdata, error);
}

int gpu_tracker_reread_types(GpuTracker *t, GpuTrackerDone done, void *userdata, char **error)
{
        return request(t, false, done, userdata, error);
}

void gpu_tracker_cancel(GpuTracker *t, void *userdata)
{
        Request **lists[] = {&t->waiting, &t->running};
        for (size_t k = 0; k < ELEMENTSOF(lists); k++)
                for (Request *q = *lists[k]; q; q = q->next)
                        if (q->userdata == userdata)
                                q->done = NULL;
}

bool gpu_tracker_is_busy(const GpuTracker *t)
{
        return t->running || t->waiting;
}

const GpuHost *gpu_tracker_host(const GpuTracker *t)
{
        return t->host;
}

const char *gpu_tracker_error(const GpuTracker *t)
{
        return t->error;
}

const char *gpu_tracker_driver_version(const GpuTracker *t)
{
        return t->driver_version;
}

const GpuTrackerStats *gpu_tracker_get_stats(const GpuTracker *t)
{
        return &t->stats;
}

int gpu_tracker_new(const GpuTrackerConfig *config, GpuTracker **ret)
{
        if (!config || !config->sysfs || !config->pool)
                return -EINVAL;
        GpuTracker *t = calloc(1, sizeof *t);
        if (!t)
                return -ENOMEM;
        int r = root_dup(config->sysfs, &t->sysfs);
        if (r < 0) {
                free(t);
                return r;
        }
        t->pool = config->pool;
        t->timeout = config->timeout ? config->timeout : GPU_TRACKER_TIMEOUT_DEFAULT;
        if (config->nvml) {
                t->nvml = *config->nvml;
                t->has_nvml = true;
        }
        *ret = t;
        return 0;
}

GpuTracker *gpu_tracker_free(GpuTracker *t)
{
        if (!t)
                return NULL;
        Request *lists[] = {t->waiting, t->running};
        for (size_t k = 0; k < ELEMENTSOF(lists); k++)
                while (lists[k]) {
                        Request *q = lists[k];
                        lists[k] = q->next;
                        free(q);
                }
        gpu_host_free(t->host);
        free(t->error);
        free(t->driver_version);
        free(t->run_error);
        root_free(t->sysfs);
        free(t);
        return NULL;
}
