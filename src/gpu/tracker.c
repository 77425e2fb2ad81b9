/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The one picture of the host (gpu.h, GpuTracker): discovery jobs on the sysfs worker pool,
 * their results folded into one GpuHost on the loop.
 *
 * Runs never overlap: a run is one full discovery or one re-read of the VFs' current_vgpu_type.
 * A request that arrives while a run is in flight waits for the next one, because the running
 * one may have read the VFs before the change the requester wants to see; all the requests
 * waiting when a run starts share it, and a full run also answers the waiting re-reads.
 *
 * A run's jobs follow discovery's steps (gpu-internal.h). A full run is a listing job (the
 * directory walks), then one job per listed VF, then one job for the GPUs (the PFs' device
 * files, NVML's answers); a re-read is one job per VF. VF jobs are keyed by the VF's address
 * with the sysfs deadline, so a hung read makes that VF uncertain alone (GEN-4): the pool has
 * its key uncertain until the call returns, every view built from the host leaves it
 * unplaced, and the run goes on with the other VFs. Only the listing and GPUs jobs speak for
 * the whole host: their failure is DISC-7's discovery failure.
 *
 * At most VF_WINDOW VF jobs are out at once. The pool runs jobs first come, first served, and a
 * job's deadline counts from its submission, so a run that queued every VF of a 1,024-VF host
 * at once would put a claim's device write behind all of them, and give the last VFs their
 * deadline while they waited in the queue. With the window, a VF's deadline is spent on its
 * own reads (and at most a window of others), and other work waits for a window at most.
 *
 * A VF whose key is already uncertain when its turn comes is not read at all: its job would
 * wait behind the stuck call and expire, holding the run (and every claim waiting on it) for a
 * whole deadline each time.
 */
#include <inttypes.h>

#include "gpu-internal.h"

/* VF jobs out at once: enough to keep the pool's threads busy while completions travel. */
#define VF_WINDOW (2 * WORKER_POOL_THREADS)

/* The text of a VF left unread because an earlier call on it is stuck (GEN-4). */
#define VF_UNCERTAIN_MESSAGE "an earlier sysfs call on it has not returned"

typedef struct Request Request;
struct Request {
        Request *next;
        bool full;
        GpuTrackerDone done;
        void *userdata;
};

typedef enum Phase {
        PHASE_LIST, /* full: the listing job is out */
        PHASE_VFS,  /* VF jobs (a re-read's only phase) */
        PHASE_GPUS, /* full: the GPUs job is out */
} Phase;

typedef struct GpuTracker GpuTracker;

/* A VF job's done() userdata: which VF of the run it read. */
typedef struct Slot {
        GpuTracker *t;
        size_t index;
} Slot;

struct GpuTracker {
        Root *sysfs;
        WorkerPool *pool;
        GpuNvml nvml;
        bool has_nvml;
        nsec_t timeout;

        GpuHost *host;
        char *error; /* DISC-7: the last full discovery's failure, until one succeeds */
        /* Bumped at each change of host or error above, where it is made (PERF-1). */
        uint64_t generation;
        char *driver_version;
        int driver_version_r; /* the module file's last read failure as logged, 0 when none */

        Request *waiting; /* for the next run, in arrival order */
        Request *running; /* answered by the run in flight */
        bool run_full;
        Phase phase;
        int run_r;
        char *run_error; /* the first failure of the run */
        /* full: the listing job's result, the driver version it read, a reading per VF */
        GpuListing *listing;
        char *run_driver_version;
        GpuVfReading *readings;
        /* re-read: the VFs to read */
        char **reread_vfs;
        /* the VF phase: n_vfs VFs, next_vf the next to submit, vfs_out the jobs out */
        size_t n_vfs, next_vf, vfs_out;
        Slot *slots;
        GpuTrackerStats stats;
};

/* ---- the jobs ------------------------------------------------------------------------------ */

typedef enum JobKind {
        JOB_LIST,  /* step 1 and the driver version (HEALTH-30) */
        JOB_VF,    /* step 2 for one VF */
        JOB_TYPE,  /* one VF's current_vgpu_type (DISC-5) */
        JOB_GPUS,  /* step 4 */
        JOB_EMPTY, /* a re-read with no VF to read: its answer still comes from the loop */
} JobKind;

typedef struct Job {
        JobKind kind;
        Root *sysfs;
        /* JOB_LIST */
        GpuListing *listing;
        char *driver_version;
        int driver_version_r; /* a failure to read a module file that exists */
        /* JOB_VF, JOB_TYPE: the VF and what was read of it (the job itself always succeeds) */
        GpuFramework framework;
        GpuListedVf in;
        GpuVf vf;
        uint32_t type;
        int vf_r;
        char *vf_error;
        /* JOB_GPUS: the table so far, and what the NVML seam answers, copied on the loop */
        GpuHost *host;
        GpuNvmlSnapshot *nvml;
} Job;

static void job_free(void *data)
{
        Job *j = data;
        root_free(j->sysfs);
        gpu_listing_free(j->listing);
        free(j->driver_version);
        strv_free(j->in.mdev_types);
        gpu_vf_done(&j->vf);
        free(j->vf_error);
        gpu_host_free(j->host);
        gpu_nvml_snapshot_free(j->nvml);
        free(j);
}

static int job_run(void *data, char **error)
{
        Job *j = data;
        GpuNvml seam;
        int r;

        switch (j->kind) {
        case JOB_LIST: {
                /* gpu_listing_new's own text (DISC-7) is the job's message. */
                r = gpu_listing_new(j->sysfs, &j->listing, error);
                if (r < 0)
                        return r;
                /* HEALTH-30: a host without the module file simply has no version to track. */
                _cleanup_free_ char *version = NULL;
                r = root_read_attr(j->sysfs, "module/nvidia/version", GPU_DRIVER_VERSION_MAX,
                                   &version);
                if (r >= 0)
                        j->driver_version = strdup(strstrip(version));
                else if (r != -ENOENT)
                        j->driver_version_r = r;
                return 0;
        }
        case JOB_VF:
                /* A failure makes this VF unreadable only (DISC-3, DISC-6). */
                j->vf_r = gpu_read_listed_vf(j->sysfs, j->framework, &j->in, &j->vf, &j->vf_error);
                return 0;
        case JOB_TYPE:
                j->vf_r = gpu_read_current_type(j->sysfs, j->in.address, &j->type, &j->vf_error);
                return 0;
        case JOB_GPUS:
                gpu_nvml_snapshot_seam(j->nvml, &seam);
                return gpu_host_finish(j->sysfs, &seam, j->host, error);
        case JOB_EMPTY:
                return 0;
        }
        return -EINVAL;
}

static int job_new(GpuTracker *t, JobKind kind, Job **ret)
{
        Job *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->kind = kind;
        int r = root_dup(t->sysfs, &j->sysfs);
        if (r < 0) {
                job_free(j);
                return r;
        }
        *ret = j;
        return 0;
}

/* Queues j (which the pool then owns; freed here on failure). key may be NULL. */
static int submit(GpuTracker *t, Job *j, const char *key, WorkerDoneFunc done, void *userdata,
                  char **error)
{
        WorkerJob job = {
            .key = key,
            .timeout = t->timeout,
            .run = job_run,
            .done = done,
            .data = j,
            .free_data = job_free,
            .userdata = userdata,
        };
        int r = worker_pool_submit(t->pool, &job, error);
        if (r < 0)
                job_free(j);
        return r;
}

/* ---- folding results in -------------------------------------------------------------------- */

/* DISC-7's text, or NULL once a full discovery succeeds. */
static void set_error(GpuTracker *t, const char *error)
{
        if (streq_ptr(t->error, error))
                return;
        t->generation++;
        if (error)
                (void)error_set(&t->error, -EIO, "%s", error);
        else {
                free(t->error);
                t->error = NULL;
        }
}

/* The run's first failure wins; later ones add nothing. */
static void fail_run(GpuTracker *t, int r, const char *prefix, const char *error)
{
        if (t->run_r < 0)
                return;
        t->run_r = r;
        (void)error_set(&t->run_error, r, "%s%s", prefix, error);
}

/* A re-read changes what a VF holds (DISC-5) or makes it unreadable (DISC-6). */
static void apply_type(GpuTracker *t, Job *j)
{
        GpuVf *vf = (GpuVf *)gpu_host_find_vf(t->host, j->in.address);
        if (!vf || !gpu_vf_is_readable(vf))
                return;
        t->generation++;
        if (j->vf_r < 0) {
                vf->error = TAKE_PTR(j->vf_error);
                if (!vf->error)
                        vf->error = strdup(strerror(-j->vf_r)); /* NULL only without memory */
                return;
        }
        if (vf->current_type_id == j->type)
                return;
        vf->current_type_id = j->type;
        free(vf->current_profile);
        vf->current_profile = NULL;
        const Gpu *g = vf->parent[0] ? gpu_host_find_gpu(t->host, vf->parent) : NULL;
        const GpuProfile *p = g && j->type ? gpu_find_profile_by_type_id(g, j->type) : NULL;
        if (p)
                vf->current_profile = strdup(p->name);
}

/*
 * A VF job the pool ended (r < 0, error its text). While its call is stuck, the VF is
 * uncertain (GEN-4) and its reading unsettled: the last table's word on it stands. A job that
 * expired without ever running has nothing stuck and nothing read: it fails closed, as a read
 * that failed (DISC-6), until a later run reads the VF.
 */
static void vf_not_read(GpuTracker *t, size_t i, const char *address, int r, const char *error)
{
        bool uncertain = worker_pool_key_is_uncertain(t->pool, address);

        /* Said once per call: a VF skipped while uncertain (-EAGAIN) was reported already. */
        if (r == -ETIMEDOUT)
                log_line(LOG_LEVEL_WARNING, 0,
                         uncertain ? "VF read abandoned; the VF is uncertain until it returns"
                                   : "VF read expired unrun; the VF is unreadable until read",
                         "vf", address, "error", error, NULL);
        if (t->run_full) {
                GpuVfReading *rd = &t->readings[i];
                rd->r = r;
                rd->unsettled = uncertain;
                (void)error_set(&rd->error, r, "%s", error);
                return;
        }
        if (uncertain)
                return; /* the pool's flag keeps it unplaced; its state is the last read */
        GpuVf *vf = (GpuVf *)gpu_host_find_vf(t->host, address);
        if (vf && gpu_vf_is_readable(vf)) {
                t->generation++;
                (void)error_set(&vf->error, r, "%s", error);
        }
}

static const char *run_vf_address(const GpuTracker *t, size_t i)
{
        if (t->run_full)
                /* An mdev entry whose types could not be listed has nothing to read (DISC-3). */
                return t->listing->vfs[i].error ? NULL : t->listing->vfs[i].address;
        return t->reread_vfs[i];
}

static void finish_run(GpuTracker *t);
static void on_vf_done(int r, void *data, const char *error, void *userdata);
static void on_step_done(int r, void *data, const char *error, void *userdata);

/* Submits the VF jobs the window has room for, until the first failure to submit. */
static void pump_vfs(GpuTracker *t)
{
        while (t->run_r >= 0 && t->vfs_out < VF_WINDOW && t->next_vf < t->n_vfs) {
                size_t i = t->next_vf++;
                const char *address = run_vf_address(t, i);
                if (!address)
                        continue;
                if (worker_pool_key_is_uncertain(t->pool, address)) {
                        vf_not_read(t, i, address, -EAGAIN, VF_UNCERTAIN_MESSAGE);
                        continue;
                }

                _cleanup_free_ char *e = NULL;
                Job *j = NULL;
                int r = job_new(t, t->run_full ? JOB_VF : JOB_TYPE, &j);
                if (r >= 0) {
                        memcpy(j->in.address, address, PCI_ADDRESS_STRLEN);
                        if (t->run_full) {
                                j->framework = t->listing->framework;
                                for (char **s = t->listing->vfs[i].mdev_types; r >= 0 && s && *s;
                                     s++)
                                        r = strv_push(&j->in.mdev_types, *s);
                        }
                        if (r < 0)
                                job_free(j);
                }
                if (r < 0)
                        (void)error_set(&e, r, "%s", strerror(-r));
                else
                        r = submit(t, j, address, on_vf_done, &t->slots[i], &e);
                if (r < 0) {
                        /* GEN-4: the pool refuses work: the jobs already out end the run, as a
                         * failed one. */
                        fail_run(t, r, "", e);
                        break;
                }
                t->vfs_out++;
        }
}

/* Every VF job is back: a re-read is done, a full run goes on to the table and its GPUs. */
static void vfs_done(GpuTracker *t)
{
        if (!t->run_full || t->run_r < 0) {
                finish_run(t);
                return;
        }

        _cleanup_free_ char *e = NULL;
        GpuHost *h = NULL;
        int r = gpu_host_assemble(t->listing, t->readings, t->host, &h, &e);
        if (r < 0) {
                fail_run(t, r, "", e);
                finish_run(t);
                return;
        }

        Job *j = NULL;
        r = job_new(t, JOB_GPUS, &j);
        if (r >= 0) {
                j->host = h;
                /* The live seam is the loop's; the job answers from a copy (DISC-18). */
                size_t n = t->host ? t->host->n_gpus : 0;
                _cleanup_free_ char **pfs = calloc(n + 1, sizeof *pfs);
                for (size_t i = 0; pfs && i < n; i++)
                        pfs[i] = t->host->gpus[i].address;
                r = pfs ? gpu_nvml_snapshot_new(t->has_nvml ? &t->nvml : NULL, pfs, n, &j->nvml)
                        : -ENOMEM;
                if (r < 0)
                        job_free(j);
        } else
                gpu_host_free(h);
        if (r < 0)
                (void)error_set(&e, r, "discover GPUs: %s", strerror(-r));
        else
                r = submit(t, j, NULL, on_step_done, t, &e);
        if (r < 0) {
                fail_run(t, r, "", e);
                finish_run(t);
                return;
        }
        t->phase = PHASE_GPUS;
}

/* Starts the VF phase over n VFs; false when it had nothing to submit (it is over already). */
static bool start_vfs(GpuTracker *t, size_t n)
{
        t->phase = PHASE_VFS;
        t->n_vfs = n;
        t->next_vf = 0;
        t->vfs_out = 0;
        t->slots = calloc(n + 1, sizeof *t->slots);
        if (t->run_full)
                t->readings = calloc(n + 1, sizeof *t->readings);
        if (!t->slots || (t->run_full && !t->readings)) {
                fail_run(t, -ENOMEM, "", ERROR_OUT_OF_MEMORY);
                return false;
        }
        for (size_t i = 0; i < n; i++)
                t->slots[i] = (Slot){.t = t, .index = i};
        pump_vfs(t);
        return t->vfs_out > 0;
}

static void on_vf_done(int r, void *data, const char *error, void *userdata)
{
        Slot *s = userdata;
        GpuTracker *t = s->t;
        Job *j = data;

        t->vfs_out--;
        if (!j)
                vf_not_read(t, s->index, run_vf_address(t, s->index), r, error);
        else if (t->run_full) {
                GpuVfReading *rd = &t->readings[s->index];
                rd->r = j->vf_r;
                rd->vf = j->vf;
                j->vf = (GpuVf){};
                rd->error = TAKE_PTR(j->vf_error);
        } else
                apply_type(t, j);

        pump_vfs(t);
        if (t->vfs_out == 0)
                vfs_done(t);
}

/* The listing, GPUs and empty jobs: the ones that speak for the whole run. */
static void on_step_done(int r, void *data, const char *error, void *userdata)
{
        GpuTracker *t = userdata;
        Job *j = data;

        if (r < 0) {
                /*
                 * A job that ran and failed carries discovery's own text (DISC-7); without data
                 * the pool ended the job and error is its text (GEN-4).
                 */
                fail_run(t, r, !j && t->run_full ? "discover GPUs: " : "", error);
                finish_run(t);
                return;
        }
        switch (t->phase) {
        case PHASE_LIST:
                t->listing = TAKE_PTR(j->listing);
                t->run_driver_version = TAKE_PTR(j->driver_version);
                /* The version a failed read could not give is kept, and the failure logged once. */
                if (j->driver_version_r < 0 && j->driver_version_r != t->driver_version_r)
                        log_line(LOG_LEVEL_WARNING, j->driver_version_r,
                                 "host driver version unreadable; keeping the last one", "error",
                                 strerror(-j->driver_version_r), NULL);
                t->driver_version_r = j->driver_version_r;
                if (!start_vfs(t, t->listing->n_vfs))
                        vfs_done(t);
                return;
        case PHASE_GPUS:
                gpu_host_free(t->host);
                t->host = TAKE_PTR(j->host);
                t->generation++;
                if (t->run_driver_version) {
                        free(t->driver_version);
                        t->driver_version = TAKE_PTR(t->run_driver_version);
                }
                finish_run(t);
                return;
        case PHASE_VFS:
                vfs_done(t); /* JOB_EMPTY */
                return;
        }
}

/* ---- runs ---------------------------------------------------------------------------------- */

static int start_run(GpuTracker *t, char **error);
static void complete(Request *list, int r, const char *error);

/* Drops what the run in flight held. */
static void clear_run(GpuTracker *t)
{
        t->listing = gpu_listing_free(t->listing);
        free(t->run_driver_version);
        t->run_driver_version = NULL;
        gpu_vf_readings_free(t->readings, t->n_vfs);
        t->readings = NULL;
        t->reread_vfs = strv_free(t->reread_vfs);
        free(t->slots);
        t->slots = NULL;
        t->n_vfs = t->next_vf = t->vfs_out = 0;
}

static void finish_run(GpuTracker *t)
{
        Request *done = TAKE_PTR(t->running);
        _cleanup_free_ char *error = TAKE_PTR(t->run_error);
        _cleanup_free_ char *next_error = NULL;
        int r = t->run_r;

        clear_run(t);
        if (t->run_full)
                set_error(t, error); /* NULL after a run that succeeded */
        /* The next run starts before anyone hears of this one, so a requester that asks again
         * from its callback waits for a run that starts after its request. */
        int next = start_run(t, &next_error);
        Request *refused = next < 0 ? TAKE_PTR(t->running) : NULL;
        complete(done, r, error);
        complete(refused, next, next_error);
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

/* A re-read's VFs: the readable ones (an unreadable VF stays so until a full discovery). */
static int reread_targets(GpuTracker *t, char ***ret)
{
        _cleanup_strv_free_ char **vfs = calloc(t->host->n_vfs + 1, sizeof *vfs);
        if (!vfs)
                return -ENOMEM;
        size_t n = 0;
        for (size_t i = 0; i < t->host->n_vfs; i++) {
                if (!gpu_vf_is_readable(&t->host->vfs[i]))
                        continue;
                if (!(vfs[n++] = strdup(t->host->vfs[i].address)))
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(vfs);
        return (int)n;
}

/*
 * Submits the first job(s) of a run: the listing job of a full one, the first window of a
 * re-read (or its empty job). -errno with *error when not even one could be submitted: then
 * nothing is in flight.
 */
static int submit_run(GpuTracker *t, char **error)
{
        Job *j = NULL;
        int r;

        if (t->run_full) {
                t->phase = PHASE_LIST;
                r = job_new(t, JOB_LIST, &j);
                if (r < 0)
                        return error_set(error, r, "%s", strerror(-r));
                return submit(t, j, NULL, on_step_done, t, error);
        }

        r = reread_targets(t, &t->reread_vfs);
        if (r < 0)
                return error_set(error, r, "%s", strerror(-r));
        if (start_vfs(t, (size_t)r))
                return 0;
        if (t->run_r < 0) {
                /* Nothing is out: the run never started. */
                r = error_set(error, t->run_r, "%s", t->run_error);
                t->run_r = 0;
                free(t->run_error);
                t->run_error = NULL;
                clear_run(t);
                return r;
        }
        /* Every VF was uncertain, or there is none: the answer still comes through the pool,
         * never from inside the request. */
        r = job_new(t, JOB_EMPTY, &j);
        if (r < 0) {
                clear_run(t);
                return error_set(error, r, "%s", strerror(-r));
        }
        r = submit(t, j, NULL, on_step_done, t, error);
        if (r < 0)
                clear_run(t);
        return r;
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
        int r = submit_run(t, error);
        if (r < 0) {
                if (full)
                        set_error(t, *error);
                return r;
        }
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

uint64_t gpu_tracker_generation(const GpuTracker *t)
{
        return t->generation;
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
        clear_run(t);
        gpu_host_free(t->host);
        free(t->error);
        free(t->driver_version);
        free(t->run_error);
        root_free(t->sysfs);
        free(t);
        return NULL;
}
