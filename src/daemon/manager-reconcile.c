/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Reconcile passes (REC-1, REC-10 as far as this release goes): discovery with the host driver
 * version (DISC-20, HEALTH-30), the open-handle scan (DEV-14), a health-store repair
 * (HEALTH-21) and an NVML cache refresh with initialisation retried (NVML-2, NVML-14). The
 * blocking parts run on the worker pool or the NVML thread; a pass is done when every step has
 * posted back. Passes never overlap: one that comes due meanwhile runs right after (REC-1).
 *
 * The start-up pass (GEN-10) is the same minus the scan and the repair: it exists to fill the
 * NVML cache before the listeners start, so that the first real pass discovers with NVML's
 * catalogs.
 */
#include <fcntl.h>
#include <systemd/sd-daemon.h>

#include "manager.h"
#include "vfio/vfio.h"

/* HEALTH-30: the version file is one short line. */
#define DRIVER_VERSION_MAX 256

struct ReconcilePass {
        Manager *manager;
        nsec_t started;
        unsigned pending; /* steps that have not posted back */
        bool startup;     /* the start-up pass of GEN-10 */
        bool nvml_refreshed;
};

/* ---- roots a job may keep using after the Manager is gone ----------------------------------- */

/*
 * A job abandoned at its deadline keeps running after the loop has moved on, possibly after the
 * Manager is freed, so it works on its own duplicate of a root.
 */
static int root_dup(const Root *r, Root **ret)
{
        _cleanup_close_ int fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return negative_errno();
        Root *copy = calloc(1, sizeof *copy);
        if (!copy)
                return -ENOMEM;
        copy->path = strdup(r->path);
        if (!copy->path) {
                free(copy);
                return -ENOMEM;
        }
        copy->fd = TAKE_FD(fd);
        *ret = copy;
        return 0;
}

/* ---- discovery's NVML seam, copied for the worker ------------------------------------------- */

/* The PF addresses of h (none when h is NULL), NULL-terminated and borrowed from h. */
static int host_pfs(GpuHost *h, char ***ret)
{
        size_t n = h ? h->n_gpus : 0;
        char **pfs = calloc(n + 1, sizeof *pfs);
        if (!pfs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                pfs[i] = h->gpus[i].address;
        *ret = pfs;
        return 0;
}

/*
 * The NVML client's cache lives on the loop and is not thread-safe, so discovery on a worker
 * gets a copy of the answers the client's own seam gives for the GPUs known so far. A GPU found
 * for the first time is answered "not usable" and gets NVML's catalog on the next pass, once
 * the refresh that follows this discovery has covered it.
 */
static int seam_copy(NvmlClient *nvml, GpuHost *h, GpuNvmlSnapshot **ret)
{
        _cleanup_free_ char **pfs = NULL;
        GpuNvml live;

        int r = host_pfs(h, &pfs);
        if (r < 0)
                return r;
        nvml_client_fill_gpu_seam(nvml, &live);
        return gpu_nvml_snapshot_new(&live, pfs, h ? h->n_gpus : 0, ret);
}

/* ---- mdev availability (PLACE-6, PLACE-21) --------------------------------------------------- */

void manager_mdev_availability_free(ApiMdevAvailability *a, size_t n)
{
        for (size_t i = 0; a && i < n; i++) {
                for (size_t k = 0; k < a[i].n_types; k++)
                        free((char *)a[i].types[k].mdev_type);
                free(a[i].types);
        }
        free(a);
}

/* Reads available_instances of every type of every readable mdev VF; unreadable counts 0. */
static int read_mdev_availability(const Root *sysfs, const GpuHost *h, ApiMdevAvailability **ret)
{
        ApiMdevAvailability *a = calloc(h->n_vfs ? h->n_vfs : 1, sizeof *a);
        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < h->n_vfs; i++) {
                const GpuVf *vf = &h->vfs[i];
                if (!gpu_vf_is_readable(vf) || vf->n_creatable == 0)
                        continue;
                a[i].types = calloc(vf->n_creatable, sizeof *a[i].types);
                if (!a[i].types) {
                        manager_mdev_availability_free(a, h->n_vfs);
                        return -ENOMEM;
                }
                for (size_t k = 0; k < vf->n_creatable; k++) {
                        const char *type = vf->creatable[k].mdev_type;
                        _cleanup_free_ char *path = NULL, *value = NULL;
                        uint32_t n = 0;

                        if (!type)
                                continue;
                        if (strprintf(&path,
                                      "class/mdev_bus/%s/mdev_supported_types/%s/"
                                      "available_instances",
                                      vf->address, type) < 0) {
                                manager_mdev_availability_free(a, h->n_vfs);
                                return -ENOMEM;
                        }
                        if (root_read_attr(sysfs, path, 32, &value) < 0 ||
                            parse_uint32(value, &n) < 0)
                                n = 0; /* unknown availability is no availability */
                        char *copy = strdup(type);
                        if (!copy) {
                                manager_mdev_availability_free(a, h->n_vfs);
                                return -ENOMEM;
                        }
                        a[i].types[a[i].n_types++] = (PlacementMdevAvailability){
                            .mdev_type = copy,
                            .available_instances = n,
                        };
                }
        }
        *ret = a;
        return 0;
}

/* ---- the discovery job ----------------------------------------------------------------------- */

typedef struct DiscoverJob {
        Root *sysfs;
        GpuNvmlSnapshot *nvml;
        /* results, read on the loop once the job has returned */
        GpuHost *host;
        ApiMdevAvailability *mdev;
        size_t n_mdev;
        char *driver_version;
} DiscoverJob;

static void discover_job_free(void *data)
{
        DiscoverJob *j = data;
        root_free(j->sysfs);
        gpu_nvml_snapshot_free(j->nvml);
        gpu_host_free(j->host);
        manager_mdev_availability_free(j->mdev, j->n_mdev);
        free(j->driver_version);
        free(j);
}

static int discover_job_run(void *data, char **error)
{
        DiscoverJob *j = data;
        GpuNvml seam;
        gpu_nvml_snapshot_seam(j->nvml, &seam);

        int r = gpu_discover(j->sysfs, &seam, &j->host, error);
        if (r < 0)
                return r;
        if (j->host->framework == GPU_FRAMEWORK_MDEV) {
                r = read_mdev_availability(j->sysfs, j->host, &j->mdev);
                if (r < 0)
                        return r;
                j->n_mdev = j->host->n_vfs;
        }

        /* HEALTH-30: a host without the module file simply has no version to track. */
        _cleanup_free_ char *version = NULL;
        if (root_read_attr(j->sysfs, "module/nvidia/version", DRIVER_VERSION_MAX, &version) >= 0)
                j->driver_version = strdup(strstrip(version));
        return 0;
}

static void pass_step_done(ReconcilePass *p);

static void set_discovery_error(Manager *m, const char *error)
{
        if (streq_ptr(m->discovery_error, error))
                return;
        if (error)
                log_line(LOG_LEVEL_ERR, 0, "GPU discovery failed; keeping the last VF table",
                         "error", error, NULL);
        else
                log_line(LOG_LEVEL_INFO, 0, "GPU discovery succeeded again", NULL);
        free(m->discovery_error);
        m->discovery_error = error ? strdup(error) : NULL;
        if (error && !m->discovery_error)
                log_error("out of memory recording a discovery error");
        m->api.discovery_error = m->discovery_error;
}

static void adopt_host(Manager *m, DiscoverJob *j)
{
        gpu_host_free(m->host);
        manager_mdev_availability_free(m->mdev_availability, m->n_mdev_availability);
        m->host = TAKE_PTR(j->host);
        m->mdev_availability = TAKE_PTR(j->mdev);
        m->n_mdev_availability = j->n_mdev;
        j->n_mdev = 0;
        m->api.host = m->host;
        m->api.mdev_availability = m->mdev_availability;

        /* NVML-14: the cache covers exactly the GPUs discovered now. */
        _cleanup_free_ char **pfs = NULL;
        int r = host_pfs(m->host, &pfs);
        if (r < 0) {
                log_error("out of memory updating the NVML GPU list");
                return;
        }
        r = nvml_client_set_gpus(m->nvml, pfs, m->host->n_gpus);
        if (r < 0)
                log_warning_errno(r, "set NVML GPU list: %m");
}

static void request_nvml_refresh(ReconcilePass *p)
{
        Manager *m = p->manager;
        /* A refresh already running may predate this discovery; the one after it does not
         * (NVML-15 coalesces every request meanwhile into exactly one more run). */
        m->nvml_refreshes_to_skip = nvml_client_refresh_is_running(m->nvml) ? 1 : 0;
        int r = nvml_client_request_refresh(m->nvml, true);
        if (r < 0) {
                log_warning_errno(r, "NVML placement cache refresh not started: %m");
                return;
        }
        m->waiting_nvml_refresh = true;
        p->pending++;
}

static void on_discover_done(int r, void *data, const char *error, void *userdata)
{
        ReconcilePass *p = userdata;
        Manager *m = p->manager;
        DiscoverJob *j = data;

        if (r < 0) {
                _cleanup_free_ char *msg = NULL;
                if (!error || !startswith(error, "discover "))
                        (void)strprintf(&msg, "discover GPUs: %s", error ? error : strerror(-r));
                set_discovery_error(m, msg ? msg : error ? error : "discover GPUs: failed");
        } else {
                adopt_host(m, j);
                set_discovery_error(m, NULL);
                if (j->driver_version && !p->startup)
                        manager_health_set_driver_version(m, j->driver_version);
        }
        request_nvml_refresh(p);
        pass_step_done(p);
}

static int submit_discovery(ReconcilePass *p)
{
        Manager *m = p->manager;
        _cleanup_free_ char *error = NULL;
        DiscoverJob *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        int r = root_dup(m->sysfs, &j->sysfs);
        if (r >= 0)
                r = seam_copy(m->nvml, m->host, &j->nvml);
        if (r < 0) {
                discover_job_free(j);
                return r;
        }

        WorkerJob job = {
            .timeout = m->config.gpu.sysfs_timeout,
            .run = discover_job_run,
            .done = on_discover_done,
            .data = j,
            .free_data = discover_job_free,
            .userdata = p,
        };
        r = worker_pool_submit(m->workers, &job, &error);
        if (r < 0) {
                discover_job_free(j);
                /* GEN-4: no thread to discover with is a discovery failure like any other. */
                set_discovery_error(m, error ? error : strerror(-r));
                request_nvml_refresh(p);
                return 0;
        }
        p->pending++;
        return 0;
}

/* ---- the open-handle scan (DEV-14) ----------------------------------------------------------- */

typedef struct ScanJob {
        Root *proc;
        char *dev_root;
        size_t n_processes;
} ScanJob;

static void scan_job_free(void *data)
{
        ScanJob *j = data;
        root_free(j->proc);
        free(j->dev_root);
        free(j);
}

static int scan_job_run(void *data, char **error)
{
        ScanJob *j = data;
        _cleanup_vfio_scan_ VfioScan *scan = NULL;
        int r = vfio_scan_startup(j->proc, j->dev_root, &scan, error);
        if (r < 0)
                return r;
        j->n_processes = vfio_scan_n_processes(scan);
        return 0;
}

static void set_scan_error(Manager *m, const char *error)
{
        if (streq_ptr(m->scan_error, error))
                return;
        if (error)
                log_line(LOG_LEVEL_ERR, 0, "open-handle scan failed; placement disabled", "error",
                         error, NULL);
        else if (m->scan_error)
                log_line(LOG_LEVEL_INFO, 0, "open-handle scan succeeded again", NULL);
        free(m->scan_error);
        m->scan_error = error ? strdup(error) : NULL;
        m->api.scan_error = m->scan_error;
}

static void on_scan_done(int r, void *data, const char *error, void *userdata)
{
        ReconcilePass *p = userdata;
        Manager *m = p->manager;

        if (r < 0) {
                _cleanup_free_ char *msg = NULL;
                if (!error || !startswith(error, "open-handle scan failed: "))
                        (void)strprintf(&msg, "open-handle scan failed: %s",
                                        error ? error : strerror(-r));
                set_scan_error(m, msg ? msg : error ? error : "open-handle scan failed");
        } else {
                set_scan_error(m, NULL);
        }
        pass_step_done(p);
}

static int submit_scan(ReconcilePass *p)
{
        Manager *m = p->manager;
        _cleanup_free_ char *error = NULL;
        ScanJob *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        int r = root_dup(m->proc, &j->proc);
        if (r >= 0 && !(j->dev_root = strdup(m->config.dev_root)))
                r = -ENOMEM;
        if (r < 0) {
                scan_job_free(j);
                return r;
        }
        WorkerJob job = {
            .timeout = m->config.gpu.sysfs_timeout,
            .run = scan_job_run,
            .done = on_scan_done,
            .data = j,
            .free_data = scan_job_free,
            .userdata = p,
        };
        r = worker_pool_submit(m->workers, &job, &error);
        if (r < 0) {
                scan_job_free(j);
                _cleanup_free_ char *msg = NULL;
                (void)strprintf(&msg, "open-handle scan failed: %s", error ? error : strerror(-r));
                set_scan_error(m, msg);
                return 0;
        }
        p->pending++;
        return 0;
}

/* ---- the health repair step (HEALTH-21) ------------------------------------------------------ */

static void on_repair_done(HealthStore *s, int r, const HealthResult *result, const char *error,
                           void *userdata)
{
        ReconcilePass *p = userdata;
        if (r < 0)
                log_line(LOG_LEVEL_WARNING, r, "VF health state repair failed", "error", error,
                         NULL);
        pass_step_done(p);
}

static void submit_repair(ReconcilePass *p)
{
        Manager *m = p->manager;
        _cleanup_free_ char *error = NULL;
        int r = health_store_submit(m->health, &(HealthRequest){.kind = HEALTH_REQUEST_REPAIR},
                                    on_repair_done, p, NULL, &error);
        if (r < 0)
                log_line(LOG_LEVEL_DEBUG, r, "VF health state repair failed", "error", error, NULL);
        else if (r > 0)
                p->pending++;
}

/* ---- passes ---------------------------------------------------------------------------------- */

static void pass_step_done(ReconcilePass *p)
{
        if (--p->pending > 0)
                return;
        Manager *m = p->manager;
        char took[DURATION_STRLEN];
        format_duration(manager_now() - p->started, took);
        log_line(LOG_LEVEL_DEBUG, 0, p->startup ? "start-up discovery done" : "reconcile pass done",
                 "duration", took, NULL);
        m->pass = NULL;
        free(p);
        manager_check_placement(m);
        manager_reconcile_done(m);
}

void manager_nvml_refreshed(Manager *m)
{
        if (!m->waiting_nvml_refresh)
                return;
        if (m->nvml_refreshes_to_skip > 0) {
                m->nvml_refreshes_to_skip--;
                return;
        }
        m->waiting_nvml_refresh = false;
        if (m->pass)
                pass_step_done(m->pass);
}

int manager_reconcile_start(Manager *m)
{
        if (m->pass) {
                m->pass_again = true;
                return 0;
        }
        ReconcilePass *p = calloc(1, sizeof *p);
        if (!p)
                return -ENOMEM;
        *p = (ReconcilePass){
            .manager = m,
            .started = manager_now(),
            .startup = m->phase == MANAGER_PHASE_STARTING,
            /* Held until every step is submitted, so that a step finishing early cannot end
             * the pass. */
            .pending = 1,
        };
        m->pass = p;
        m->pass_again = false;

        int r = submit_discovery(p);
        if (r >= 0 && !p->startup)
                r = submit_scan(p);
        if (r < 0)
                log_error_errno(r, "start reconcile pass: %m");
        if (!p->startup)
                submit_repair(p);
        pass_step_done(p);
        return 0;
}

void manager_check_placement(Manager *m)
{
        _cleanup_free_ char *reason = NULL;
        if (api_placement_disabled_reason(&m->api, &reason) < 0)
                return;
        if (streq_ptr(reason, m->logged_disabled))
                return;
        if (reason)
                log_line(LOG_LEVEL_WARNING, 0, "vGPU placement disabled", "reason", reason, NULL);
        else
                log_line(LOG_LEVEL_NOTICE, 0, "vGPU placement enabled", NULL);
        free(m->logged_disabled);
        m->logged_disabled = TAKE_PTR(reason);
        if (m->phase == MANAGER_PHASE_RUNNING)
                (void)sd_notifyf(false, "STATUS=%s%s",
                                 m->logged_disabled ? "serving; placement disabled: " : "serving",
                                 m->logged_disabled ? m->logged_disabled : "");
}
