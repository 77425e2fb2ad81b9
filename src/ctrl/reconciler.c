/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Reconcile passes (ctrl.h): discovery through the tracker, the open-handle scan, the health
 * repair and the NVML refresh, each posting back into pass_step_done(); then the instance
 * stages and the GPU stage, each a phase of its own.
 */
#include "ctrl.h"
#include "placement/placement.h"
#include "vfio/vfio.h"

typedef enum PassPhase {
        PHASE_OBSERVE,   /* discovery, scan, repair, NVML refresh */
        PHASE_INSTANCES, /* release_stale, resumed deletes, consoles */
        PHASE_DEVICES,   /* reset_unclaimed_vfs */
} PassPhase;

typedef struct Pass {
        nsec_t started;
        unsigned pending; /* steps that have not posted back */
        bool startup;     /* the start-up pass of GEN-10 */
        PassPhase phase;
        bool discovered;  /* this pass's discovery succeeded */
        DeviceScan *scan; /* the pass's one fd scan (REC-9); NULL when it failed */
        bool aborted;     /* REC-3 stopped the pass */
        /* REC-11's figures, and how long the fd scan took (its share of the pass) */
        unsigned released, reset, removed, failed;
        nsec_t scan_took;
        nsec_t discovered_at; /* when discovery posted back; the NVML refresh follows it */
} Pass;

struct Reconciler {
        ReconcilerConfig config;
        Root *proc;
        char *dev_root;

        Pass *pass; /* in flight, NULL when none */
        bool again; /* REC-1: a pass came due during another */
        char *scan_error;
        char *logged_discovery_error; /* DISC-7's text as last logged */
        unsigned nvml_refreshes_to_skip;
        bool waiting_nvml_refresh;
        ReconcilerStats stats;
        char **held_open_logged; /* REC-6, REC-8: held open without a claim, logged once */
        struct GpuWrite *gated;  /* the GPU stage's writes waiting at the PLACE-9 gate */
};

static const char *const stage_names[_RECONCILE_STAGE_MAX] = {
    [RECONCILE_STAGE_LIST_INSTANCES] = "list_instances",
    [RECONCILE_STAGE_RELEASE_STALE] = "release_stale",
    [RECONCILE_STAGE_RESET_UNCLAIMED_VFS] = "reset_unclaimed_vfs",
    [RECONCILE_STAGE_RECONCILE_DEVICES] = "reconcile_devices",
    [RECONCILE_STAGE_STORAGE] = "storage",
};

const char *reconcile_stage_to_string(ReconcileStage s)
{
        return s < _RECONCILE_STAGE_MAX ? stage_names[s] : "unknown";
}

/* A stage failure: its counter and one error line (REC-5, REC-7, REC-9). */
static void stage_failed(Reconciler *rc, ReconcileStage s, const char *what, const char *error)
{
        rc->stats.stage_failures[s]++;
        if (rc->pass)
                rc->pass->failed++;
        log_line(LOG_LEVEL_ERR, 0, "reconcile stage failed", "stage", stage_names[s], "what", what,
                 "error", error, NULL);
}

static void pass_step_done(Reconciler *rc);

/* ---- discovery (DISC-7, DISC-20, HEALTH-30, NVML-14) ---------------------------------------- */

static void log_discovery(Reconciler *rc, const char *error)
{
        if (streq_ptr(rc->logged_discovery_error, error))
                return;
        if (error)
                log_line(LOG_LEVEL_ERR, 0, "GPU discovery failed; keeping the last VF table",
                         "error", error, NULL);
        else
                log_line(LOG_LEVEL_INFO, 0, "GPU discovery succeeded again", NULL);
        free(rc->logged_discovery_error);
        rc->logged_discovery_error = error ? strdup(error) : NULL;
}

static void on_driver_version_done(HealthStore *s, int r, const HealthResult *result,
                                   const char *error, void *userdata)
{
        if (r < 0)
                log_line(LOG_LEVEL_WARNING, r, "host driver version not recorded", "error", error,
                         NULL);
}

/* HEALTH-30: the first version a store sees is recorded, not a change. */
static void record_driver_version(Reconciler *rc, const char *version)
{
        HealthStore *health = rc->config.health;
        _cleanup_free_ char *error = NULL;
        if (!health || !version)
                return;
        bool known = health_store_state(health)->driver_version != NULL;
        int r = health_store_submit(
            health, &(HealthRequest){.kind = HEALTH_REQUEST_DRIVER_VERSION, .text = version},
            on_driver_version_done, rc, NULL, &error);
        if (r > 0)
                log_line(LOG_LEVEL_NOTICE, 0,
                         known ? "host driver version changed" : "host driver version recorded",
                         "driver_version", version, NULL);
        else if (r < 0)
                log_line(LOG_LEVEL_DEBUG, r, "host driver version not recorded", "error", error,
                         NULL);
}

/* NVML-14: the cache covers exactly the GPUs discovered now. */
static void set_nvml_gpus(Reconciler *rc, const GpuHost *h)
{
        _cleanup_free_ char **pfs = calloc(h->n_gpus + 1, sizeof *pfs);
        if (!pfs) {
                log_error("out of memory updating the NVML GPU list");
                return;
        }
        for (size_t i = 0; i < h->n_gpus; i++)
                pfs[i] = (char *)h->gpus[i].address;
        int r = nvml_client_set_gpus(rc->config.nvml, pfs, h->n_gpus);
        if (r < 0)
                log_warning_errno(r, "set NVML GPU list: %m");
}

static void request_nvml_refresh(Reconciler *rc)
{
        /* A refresh already running may predate this discovery; the one after it does not
         * (NVML-15 coalesces every request meanwhile into exactly one more run). */
        rc->nvml_refreshes_to_skip = nvml_client_refresh_is_running(rc->config.nvml) ? 1 : 0;
        /* Through the Claimer where there is one, so that no refresh overlaps its writes
         * (PLACE-9). */
        InstanceManager *im = rc->config.instances;
        int r = im ? claimer_request_nvml_refresh(instance_manager_get_claimer(im), true)
                   : nvml_client_request_refresh(rc->config.nvml, true);
        if (r < 0) {
                log_warning_errno(r, "NVML placement cache refresh not started: %m");
                return;
        }
        rc->waiting_nvml_refresh = true;
        rc->pass->pending++;
}

static void on_discover_done(int r, const char *error, void *userdata)
{
        Reconciler *rc = userdata;
        GpuTracker *t = rc->config.tracker;

        log_discovery(rc, gpu_tracker_error(t));
        rc->pass->discovered_at = mono_clock_now(&mono_clock_system);
        if (r >= 0) {
                rc->pass->discovered = true;
                set_nvml_gpus(rc, gpu_tracker_host(t));
                if (!rc->pass->startup)
                        record_driver_version(rc, gpu_tracker_driver_version(t));
        }
        request_nvml_refresh(rc);
        pass_step_done(rc);
}

/*
 * Submits one of the pass's sysfs jobs with GEN-4's deadline; the pass waits for it. On failure
 * data is freed and *error says why.
 */
static int submit_pass_job(Reconciler *rc, int (*run)(void *data, char **error),
                           WorkerDoneFunc done, void *data, void (*free_data)(void *data),
                           char **error)
{
        WorkerJob job = {
            .timeout =
                rc->config.sysfs_timeout ? rc->config.sysfs_timeout : GPU_TRACKER_TIMEOUT_DEFAULT,
            .run = run,
            .done = done,
            .data = data,
            .free_data = free_data,
            .userdata = rc,
        };
        int r = worker_pool_submit(rc->config.pool, &job, error);
        if (r < 0) {
                free_data(data);
                return r;
        }
        rc->pass->pending++;
        return 0;
}

/* ---- the open-handle scan (DEV-14) ----------------------------------------------------------- */

typedef struct ScanJob {
        Root *proc;
        char *dev_root;
        char *scan_error; /* vfio_scan_startup()'s own text, which names the scan */
        DeviceScan *scan; /* kept for the pass's stages (REC-9) */
        nsec_t took;      /* the walk alone, without the wait for a worker */
} ScanJob;

static void scan_job_free(void *data)
{
        ScanJob *j = data;
        root_free(j->proc);
        free(j->dev_root);
        free(j->scan_error);
        device_scan_unref(j->scan);
        free(j);
}

static int scan_job_run(void *data, char **error)
{
        ScanJob *j = data;
        _cleanup_vfio_scan_ VfioScan *scan = NULL;
        nsec_t started = mono_clock_now(&mono_clock_system);
        int r = vfio_scan_startup(j->proc, j->dev_root, &scan, &j->scan_error);
        j->took = mono_clock_now(&mono_clock_system) - started;
        if (r < 0)
                return r;
        r = device_scan_new(scan, &j->scan);
        if (r < 0)
                return error_set_oom(error);
        scan = NULL; /* taken */
        return 0;
}

static void set_scan_error(Reconciler *rc, char *error)
{
        if (streq_ptr(rc->scan_error, error)) {
                free(error);
                return;
        }
        if (error)
                log_line(LOG_LEVEL_ERR, 0, "open-handle scan failed; placement disabled", "error",
                         error, NULL);
        else if (rc->scan_error)
                log_line(LOG_LEVEL_INFO, 0, "open-handle scan succeeded again", NULL);
        free(rc->scan_error);
        rc->scan_error = error;
        /* Admission decides on it too (INST-11). */
        if (rc->config.instances &&
            instance_manager_set_scan_error(rc->config.instances, error) < 0)
                log_line(LOG_LEVEL_ERR, -ENOMEM, "cannot pass the scan error to admission", NULL);
}

/* A scan the pool ended (deadline, no thread) fails with the pool's text, named as a scan. */
static char *scan_failure(const char *error, int r)
{
        char *msg = NULL;
        (void)error_set(&msg, r, "open-handle scan failed: %s", error);
        return msg;
}

static void on_scan_done(int r, void *data, const char *error, void *userdata)
{
        Reconciler *rc = userdata;
        ScanJob *j = data;

        if (j)
                rc->pass->scan_took = j->took;
        if (r >= 0) {
                set_scan_error(rc, NULL);
                rc->pass->scan = TAKE_PTR(j->scan);
        } else if (j && j->scan_error) /* vfio_scan_startup() set its own text */
                set_scan_error(rc, TAKE_PTR(j->scan_error));
        else
                set_scan_error(rc, scan_failure(error, r));
        pass_step_done(rc);
}

static int submit_scan(Reconciler *rc)
{
        _cleanup_free_ char *error = NULL;
        ScanJob *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        int r = root_dup(rc->proc, &j->proc);
        if (r >= 0 && !(j->dev_root = strdup(rc->dev_root)))
                r = -ENOMEM;
        if (r < 0) {
                scan_job_free(j);
                return r;
        }
        r = submit_pass_job(rc, scan_job_run, on_scan_done, j, scan_job_free, &error);
        if (r < 0)
                set_scan_error(rc, scan_failure(error, r));
        return 0;
}

/* ---- the health repair step (HEALTH-21) ------------------------------------------------------ */

static void on_repair_done(HealthStore *s, int r, const HealthResult *result, const char *error,
                           void *userdata)
{
        if (r < 0)
                log_line(LOG_LEVEL_WARNING, r, "VF health state repair failed", "error", error,
                         NULL);
        pass_step_done(userdata);
}

static void submit_repair(Reconciler *rc)
{
        _cleanup_free_ char *error = NULL;
        if (!rc->config.health)
                return;
        int r =
            health_store_submit(rc->config.health, &(HealthRequest){.kind = HEALTH_REQUEST_REPAIR},
                                on_repair_done, rc, NULL, &error);
        if (r < 0)
                log_line(LOG_LEVEL_DEBUG, r, "VF health state repair failed", "error", error, NULL);
        else if (r > 0)
                rc->pass->pending++;
}

/* ---- passes ---------------------------------------------------------------------------------- */

/* ---- the instance stages (REC-4, REC-5, REC-10) --------------------------------------------- */

static void on_instances_done(const InstanceReconcileResult *res, void *userdata)
{
        Reconciler *rc = userdata;
        Pass *p = rc->pass;
        if (res->unreadable > 0) {
                /* REC-3: a record that may hold a claim cannot be read: the pass stops. */
                stage_failed(rc, RECONCILE_STAGE_LIST_INSTANCES, res->unreadable_id,
                             res->unreadable_transient
                                 ? "instance record not loaded for want of descriptors; the rest "
                                   "of the pass is skipped and the next pass retries"
                                 : "instance record unreadable; the rest of the pass is skipped");
                p->aborted = true;
        }
        p->released += res->released;
        p->removed += res->deletes_resumed;
        for (unsigned k = 0; k < res->release_failed; k++)
                stage_failed(rc, RECONCILE_STAGE_RELEASE_STALE, "release a stale claim",
                             "see the release's own log line");
        pass_step_done(rc);
}

/* DISK-11: what the storage stage removed and what it could not. */
static void on_storage_done(const VolumeSweepResult *res, void *userdata)
{
        Reconciler *rc = userdata;
        rc->pass->removed += res->removed;
        for (char **f = res->failures; f && *f; f++)
                stage_failed(rc, RECONCILE_STAGE_STORAGE, "volumes", *f);
        pass_step_done(rc);
}

static void start_storage_stage(Reconciler *rc)
{
        if (!rc->config.volumes)
                return;
        int r = volume_store_sweep(rc->config.volumes,
                                   clock_now(rc->config.clock ? rc->config.clock : &clock_realtime),
                                   on_storage_done, rc);
        if (r >= 0)
                rc->pass->pending++;
        else
                stage_failed(rc, RECONCILE_STAGE_STORAGE, "start", strerror(-r));
}

static void start_instance_stages(Reconciler *rc)
{
        Pass *p = rc->pass;
        start_storage_stage(rc);
        if (!rc->config.instances)
                return;
        if (!p->scan) {
                /* REC-9: liveness needs the scan; the stage is skipped and counted. */
                stage_failed(rc, RECONCILE_STAGE_RELEASE_STALE, "skipped",
                             rc->scan_error ? rc->scan_error : "no open-handle scan");
                return;
        }
        int r = instance_manager_reconcile(rc->config.instances, p->scan, on_instances_done, rc);
        if (r >= 0)
                p->pending++;
        else
                stage_failed(rc, RECONCILE_STAGE_RELEASE_STALE, "start", strerror(-r));
}

/* ---- the GPU stages' writes (REC-6, REC-7, REC-8) ------------------------------------------- */

static bool held_open_logged(Reconciler *rc, const char *key)
{
        for (char **v = rc->held_open_logged; v && *v; v++)
                if (streq(*v, key))
                        return true;
        return false;
}

/*
 * What keeps a VF from the GPU stages: a claim or a reservation (the reservation set as it is
 * now, on the loop), an operation of DeviceOps, or a stuck call (GEN-4).
 */
static bool vf_is_owned(Reconciler *rc, const char *vf)
{
        PlacementOverlays o = {0};
        uint64_t fb;
        PlacementReservation res;
        claimer_fill_overlays(instance_manager_get_claimer(rc->config.instances), &o);
        return (o.is_claimed && o.is_claimed(o.claims_userdata, vf, &fb)) ||
               (o.is_reserved && o.is_reserved(o.claims_userdata, vf, &res)) ||
               device_ops_is_busy(rc->config.ops, vf) ||
               worker_pool_key_is_uncertain(rc->config.pool, vf);
}

/* REC-6's candidate: a readable vendor-VFIO VF with a type that nothing owns. */
static bool vf_is_dirty(Reconciler *rc, const char *address)
{
        const GpuVf *vf = gpu_host_find_vf(gpu_tracker_host(rc->config.tracker), address);
        return vf && !vf->error && vf->current_type_id != 0 && !vf_is_owned(rc, address);
}

static bool record_names_mdev(InstanceManager *im, const char *uuid)
{
        const InstanceRecord *const *recs;
        size_t n = instance_manager_list(im, &recs);
        for (size_t k = 0; k < n; k++)
                if (streq_ptr(recs[k]->gpu.mdev_uuid, uuid))
                        return true;
        return false;
}

/*
 * The loop's half of REC-8: the mdev sits on a managed, readable VF that nothing owns (see
 * vf_is_owned), and no record names it and no operation works on it. Asked once to pick the
 * candidates and again right before each remove.
 */
static bool mdev_is_unnamed(Reconciler *rc, const GpuHost *h, const GpuMdev *m)
{
        const GpuVf *vf = gpu_host_find_vf(h, m->vf);
        char key[sizeof "mdev:" + 36];
        snprintf(key, sizeof key, "mdev:%s", m->uuid); /* device ops' key of a VF-less mdev */
        return vf && !vf->error && !vf_is_owned(rc, m->vf) &&
               !record_names_mdev(rc->config.instances, m->uuid) &&
               !device_ops_is_busy(rc->config.ops, key);
}

static const GpuMdev *host_find_mdev(const GpuHost *h, const char *uuid)
{
        for (size_t k = 0; h && k < h->n_mdevs; k++)
                if (streq(h->mdevs[k].uuid, uuid))
                        return &h->mdevs[k];
        return NULL;
}

typedef struct SweepJob {
        Root *sysfs;
        Timestamp now;
        char **uuids;  /* the loop's candidates */
        int *verdicts; /* orphan_mdev_check()'s, one per uuid */
        char **errors; /* its text where it failed */
        size_t n;
} SweepJob;

static void sweep_job_free(void *data)
{
        SweepJob *j = data;
        root_free(j->sysfs);
        strv_free(j->uuids);
        for (size_t k = 0; j->errors && k < j->n; k++)
                free(j->errors[k]);
        free(j->errors);
        free(j->verdicts);
        free(j);
}

static int sweep_job_run(void *data, char **error)
{
        SweepJob *j = data;
        for (size_t k = 0; k < j->n; k++)
                j->verdicts[k] = orphan_mdev_check(j->sysfs, j->uuids[k], j->now, &j->errors[k]);
        return 0;
}

/*
 * One write of a GPU stage, a dirty VF's reset or an orphaned mdev's remove, from the Claimer's
 * PLACE-9 gate (no write while an NVML query about the VF's GPU runs) to its end.
 */
typedef struct GpuWrite {
        Reconciler *rc;
        struct GpuWrite *next; /* in rc->gated while it waits at the gate */
        bool waited;           /* the pass counted the wait */
        ReconcileStage stage;
        char vf[PCI_ADDRESS_STRLEN];
        char uuid[37];                 /* mdev: its UUID; "" for a reset */
        char key[sizeof "mdev:" + 36]; /* what "logged once" remembers: the VF or mdev:<uuid> */
} GpuWrite;

static void on_gpu_write_done(const DeviceResult *res, void *userdata)
{
        _cleanup_free_ GpuWrite *w = userdata;
        Reconciler *rc = w->rc;
        bool mdev = w->uuid[0];
        if (res->r >= 0 && !mdev) {
                rc->pass->reset++;
                rc->stats.resets++;
        } else if (res->r >= 0 && res->outcome == DEVICE_OUTCOME_RELEASED) {
                rc->pass->removed++;
                log_line(LOG_LEVEL_NOTICE, 0, "removed orphaned mdev", "vf", w->vf, "mdev_uuid",
                         w->uuid, NULL);
        } else if (res->r < 0 && res->kind == DEVICE_FAILURE_IN_USE) {
                /* Held open without a claim: left alone, logged once (REC-6, REC-8). */
                if (!held_open_logged(rc, w->key)) {
                        log_line(LOG_LEVEL_WARNING, 0,
                                 mdev ? "orphaned mdev held open; left"
                                      : "dirty VF held open without a claim; left",
                                 "vf", w->vf, "error", res->error, NULL);
                        (void)strv_push(&rc->held_open_logged, w->key);
                }
        } else if (res->r < 0)
                stage_failed(rc, w->stage, mdev ? w->uuid : w->vf, res->error);
        pass_step_done(rc);
}

/* The write itself, once past the gate, if what it repairs still needs it. */
static void gpu_write_dispatch(GpuWrite *w)
{
        Reconciler *rc = w->rc;
        const GpuHost *h = gpu_tracker_host(rc->config.tracker);
        const GpuMdev *m = w->uuid[0] ? host_find_mdev(h, w->uuid) : NULL;
        _cleanup_free_ char *error = NULL;
        /* A claim or an operation that came meanwhile keeps it. */
        if (w->uuid[0] ? !m || !mdev_is_unnamed(rc, h, m) : !vf_is_dirty(rc, w->vf)) {
                free(w);
                return;
        }
        DeviceClaim claim = {.framework = "vendor-vfio", .vf = w->vf};
        if (m)
                claim = (DeviceClaim){.framework = "mdev", .vf = w->vf, .mdev_uuid = w->uuid};
        int r = device_ops_release(rc->config.ops,
                                   &(DeviceReleaseRequest){.claim = claim, .scan = rc->pass->scan},
                                   on_gpu_write_done, w, &error);
        if (r >= 0) {
                rc->pass->pending++;
                return;
        }
        stage_failed(rc, w->stage, m ? w->uuid : w->vf, error);
        free(w);
}

static void gpu_write_go(void *userdata)
{
        GpuWrite *w = userdata;
        Reconciler *rc = w->rc;
        bool waited = w->waited;
        for (GpuWrite **pp = &rc->gated; *pp; pp = &(*pp)->next)
                if (*pp == w) {
                        *pp = w->next;
                        break;
                }
        gpu_write_dispatch(w);
        if (waited)
                pass_step_done(rc);
}

static void gpu_write_submit(Reconciler *rc, ReconcileStage stage, const char *vf, const char *uuid)
{
        GpuWrite *w = calloc(1, sizeof *w);
        if (!w) {
                stage_failed(rc, stage, uuid ? uuid : vf, strerror(ENOMEM));
                return;
        }
        *w = (GpuWrite){.rc = rc, .stage = stage};
        snprintf(w->vf, sizeof w->vf, "%s", vf);
        snprintf(w->uuid, sizeof w->uuid, "%s", uuid ? uuid : "");
        if (uuid)
                snprintf(w->key, sizeof w->key, "mdev:%s", uuid);
        else
                snprintf(w->key, sizeof w->key, "%s", vf);
        int r = rc->config.gate ? write_gate_pass(rc->config.gate, vf, gpu_write_go, w) : 1;
        if (r > 0)
                gpu_write_dispatch(w);
        else if (r == 0) {
                w->waited = true;
                w->next = rc->gated;
                rc->gated = w;
                rc->pass->pending++;
        } else {
                stage_failed(rc, stage, uuid ? uuid : vf, strerror(-r));
                free(w);
        }
}

static void start_reset_stage(Reconciler *rc, const GpuHost *h, const PlacementOverlays *o)
{
        /* The overlays /resources shows: a dirty VF there is exactly one reset here. */
        _cleanup_placement_view_ PlacementView *v = NULL;
        int r = placement_view_build(h, o, &v);
        if (r < 0) {
                stage_failed(rc, RECONCILE_STAGE_RESET_UNCLAIMED_VFS, "snapshot", strerror(-r));
                return;
        }
        const PlacementSnapshot *sn = &v->snapshot;
        for (size_t k = 0; k < sn->n_vfs; k++) {
                const PlacementVf *vf = &sn->vfs[k];
                if (vf->readable && placement_vf_is_dirty(vf) && !vf->uncertain)
                        gpu_write_submit(rc, RECONCILE_STAGE_RESET_UNCLAIMED_VFS, vf->address,
                                         NULL);
        }
}

static void on_sweep_checked(int r, void *data, const char *error, void *userdata)
{
        Reconciler *rc = userdata;
        SweepJob *j = data;
        if (r < 0)
                stage_failed(rc, RECONCILE_STAGE_RECONCILE_DEVICES, "check mdevs", error);
        for (size_t k = 0; r >= 0 && k < j->n; k++) {
                if (j->verdicts[k] < 0)
                        stage_failed(rc, RECONCILE_STAGE_RECONCILE_DEVICES, j->uuids[k],
                                     j->errors[k]);
                else if (j->verdicts[k] > 0) {
                        const GpuMdev *m =
                            host_find_mdev(gpu_tracker_host(rc->config.tracker), j->uuids[k]);
                        if (m)
                                gpu_write_submit(rc, RECONCILE_STAGE_RECONCILE_DEVICES, m->vf,
                                                 m->uuid);
                }
        }
        pass_step_done(rc);
}

static void start_mdev_stage(Reconciler *rc, const GpuHost *h)
{
        _cleanup_free_ char *error = NULL;
        SweepJob *j = calloc(1, sizeof *j);
        int r = j ? 0 : -ENOMEM;
        for (size_t k = 0; r >= 0 && k < h->n_mdevs; k++)
                if (mdev_is_unnamed(rc, h, &h->mdevs[k]))
                        r = strv_push(&j->uuids, h->mdevs[k].uuid);
        if (r >= 0 && j)
                j->n = strv_length(j->uuids);
        if (r < 0 || j->n == 0) {
                if (r < 0)
                        stage_failed(rc, RECONCILE_STAGE_RECONCILE_DEVICES, "candidates",
                                     strerror(-r));
                if (j)
                        sweep_job_free(j);
                return;
        }
        j->now = clock_now(rc->config.clock ? rc->config.clock : &clock_realtime);
        j->verdicts = calloc(j->n, sizeof *j->verdicts);
        j->errors = calloc(j->n, sizeof *j->errors);
        r = j->verdicts && j->errors ? root_dup(rc->config.sysfs, &j->sysfs) : -ENOMEM;
        if (r < 0) {
                sweep_job_free(j);
                stage_failed(rc, RECONCILE_STAGE_RECONCILE_DEVICES, "check mdevs", strerror(-r));
                return;
        }
        r = submit_pass_job(rc, sweep_job_run, on_sweep_checked, j, sweep_job_free, &error);
        if (r < 0)
                stage_failed(rc, RECONCILE_STAGE_RECONCILE_DEVICES, "check mdevs", error);
}

/* The GPU stage of the host's framework (REC-6 or REC-8), with the pass's scan (REC-9). */
static void start_device_stage(Reconciler *rc)
{
        Pass *p = rc->pass;
        const GpuHost *h = gpu_tracker_host(rc->config.tracker);
        InstanceManager *im = rc->config.instances;
        /* REC-2: no framework, or a failed discovery, skips the GPU stages. */
        if (!im || !rc->config.ops || p->aborted || !p->discovered || !h ||
            h->framework == GPU_FRAMEWORK_NONE)
                return;
        bool mdev = h->framework == GPU_FRAMEWORK_MDEV;
        ReconcileStage stage =
            mdev ? RECONCILE_STAGE_RECONCILE_DEVICES : RECONCILE_STAGE_RESET_UNCLAIMED_VFS;
        if (!p->scan) {
                stage_failed(rc, stage, "skipped",
                             rc->scan_error ? rc->scan_error : "no open-handle scan");
                return;
        }
        if (mdev) {
                start_mdev_stage(rc, h);
                return;
        }
        PlacementOverlays o = {.nvml = rc->config.nvml, .pool = rc->config.pool};
        claimer_fill_overlays(instance_manager_get_claimer(im), &o);
        start_reset_stage(rc, h, &o);
}

/* ---- passes ---------------------------------------------------------------------------------- */

/* Moves a pass to its next phase; true when the pass has ended. */
static bool pass_advance(Reconciler *rc)
{
        Pass *p = rc->pass;
        while (p->pending == 0) {
                if (p->startup || p->phase == PHASE_DEVICES)
                        return true;
                p->pending = 1; /* held while the phase submits */
                if (p->phase == PHASE_OBSERVE) {
                        p->phase = PHASE_INSTANCES;
                        start_instance_stages(rc);
                } else {
                        p->phase = PHASE_DEVICES;
                        start_device_stage(rc);
                }
                p->pending--;
        }
        return false;
}

static void pass_step_done(Reconciler *rc)
{
        Pass *p = rc->pass;
        if (--p->pending > 0 || !pass_advance(rc))
                return;
        char took[DURATION_STRLEN];
        nsec_t now = mono_clock_now(&mono_clock_system);
        format_duration(now - p->started, took);
        if (p->startup) {
                /* GEN-10's two phases before the listeners, apart (PERF-6). */
                char discovery[DURATION_STRLEN], nvml[DURATION_STRLEN];
                nsec_t at = p->discovered_at ? p->discovered_at : p->started;
                format_duration(at - p->started, discovery);
                format_duration(now - at, nvml);
                log_line(LOG_LEVEL_DEBUG, 0, "start-up discovery done", "duration", took,
                         "discovery", discovery, "nvml", nvml, NULL);
        } else {
                /* REC-11: one line per pass with its figures. */
                char released[16], reset[16], removed[16], failed[16], scan[DURATION_STRLEN];
                snprintf(released, sizeof released, "%u", p->released);
                snprintf(reset, sizeof reset, "%u", p->reset);
                snprintf(removed, sizeof removed, "%u", p->removed);
                snprintf(failed, sizeof failed, "%u", p->failed);
                format_duration(p->scan_took, scan);
                log_line(LOG_LEVEL_DEBUG, 0, "reconcile pass done", "duration", took, "released",
                         released, "reset", reset, "removed", removed, "failed", failed, "scan",
                         scan, NULL);
                rc->stats.passes++;
        }
        bool startup = p->startup;
        if (p->reset > 0)
                /* DISC-20: the resets' VFs are read again. */
                (void)gpu_tracker_reread_types(rc->config.tracker, NULL, NULL, NULL);
        rc->pass = NULL;
        device_scan_unref(p->scan);
        free(p);

        if (rc->config.pass_done)
                rc->config.pass_done(rc->config.userdata, startup);
        if (rc->again && !rc->pass) {
                int r = reconciler_start(rc, false);
                if (r < 0)
                        log_error_errno(r, "start reconcile pass: %m");
        }
}

void reconciler_nvml_refreshed(Reconciler *rc)
{
        if (!rc->waiting_nvml_refresh)
                return;
        if (rc->nvml_refreshes_to_skip > 0) {
                rc->nvml_refreshes_to_skip--;
                return;
        }
        rc->waiting_nvml_refresh = false;
        if (rc->pass)
                pass_step_done(rc);
}

int reconciler_start(Reconciler *rc, bool startup)
{
        if (rc->pass) {
                rc->again = true;
                return 0;
        }
        Pass *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        *p = (Pass){
            .started = mono_clock_now(&mono_clock_system),
            .startup = startup,
            /* Held until every step is submitted, so that a step finishing early cannot end
             * the pass. */
            .pending = 1,
        };
        rc->pass = p;
        rc->again = false;

        _cleanup_free_ char *error = NULL;
        int r = gpu_tracker_discover(rc->config.tracker, on_discover_done, rc, &error);
        if (r >= 0)
                p->pending++;
        else {
                /* DISC-7 and GEN-4: the tracker keeps the failure; the pass goes on. */
                log_discovery(rc, gpu_tracker_error(rc->config.tracker));
                request_nvml_refresh(rc);
        }
        if (!startup)
                r = submit_scan(rc);
        if (r < 0)
                log_error_errno(r, "start reconcile pass: %m");
        if (!startup)
                submit_repair(rc);
        pass_step_done(rc);
        return 0;
}

const ReconcilerStats *reconciler_get_stats(const Reconciler *rc)
{
        return &rc->stats;
}

bool reconciler_is_running(const Reconciler *rc)
{
        return rc->pass != NULL;
}

const char *reconciler_scan_error(const Reconciler *rc)
{
        return rc->scan_error;
}

int reconciler_new(const ReconcilerConfig *config, Reconciler **ret)
{
        if (!config || !config->tracker || !config->pool || !config->nvml || !config->proc ||
            !config->dev_root)
                return -EINVAL;
        _cleanup_free_ Reconciler *rc = calloc(1, sizeof *rc);
        if (!rc)
                return -ENOMEM;
        rc->config = *config;
        int r = root_dup(config->proc, &rc->proc);
        if (r < 0)
                return r;
        rc->dev_root = strdup(config->dev_root);
        if (!rc->dev_root) {
                root_free(rc->proc);
                return -ENOMEM;
        }
        *ret = TAKE_PTR(rc);
        return 0;
}

Reconciler *reconciler_free(Reconciler *rc)
{
        if (!rc)
                return NULL;
        gpu_tracker_cancel(rc->config.tracker, rc);
        if (rc->pass)
                device_scan_unref(rc->pass->scan);
        free(rc->pass);
        strv_free(rc->held_open_logged);
        while (rc->gated) {
                GpuWrite *w = rc->gated;
                rc->gated = w->next;
                write_gate_cancel(rc->config.gate, w);
                free(w);
        }
        free(rc->scan_error);
        free(rc->logged_discovery_error);
        root_free(rc->proc);
        free(rc->dev_root);
        free(rc);
        return NULL;
}
