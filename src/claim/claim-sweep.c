/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * PLACE-16 (claim-internal.h): when nothing is selectable, every dirty VF not held open is reset
 * after one shared scan, and the claim selects once more.
 */
#include "claim-internal.h"

/* ---- PLACE-16: reset every dirty VF not held open, one shared scan ------------------------- */

typedef struct ScanJob {
        Root *proc, *sysfs;
        char *dev_root;
        VfioScan *scan;
        char **vfs; /* dirty VFs; the job keeps those not held open */
        char **gpus;
        char **uuids; /* "" for none */
        bool *free_vf;
} ScanJob;

static void scan_job_free(void *data)
{
        ScanJob *j = data;
        root_free(j->proc);
        root_free(j->sysfs);
        free(j->dev_root);
        vfio_scan_free(j->scan);
        strv_freep(&j->vfs);
        strv_freep(&j->gpus);
        strv_freep(&j->uuids);
        free(j->free_vf);
        free(j);
}

/* One scan, and every dirty VF probed against it (DEV-15); probe errors count as held. */
static int scan_job_run(void *data, char **error)
{
        ScanJob *j = data;
        int r = vfio_scan(j->proc, j->dev_root, &j->scan, error);
        if (r < 0)
                return r;
        for (size_t i = 0; j->vfs && j->vfs[i]; i++) {
                pid_t holder;
                _cleanup_free_ char *probe_error = NULL;
                if (j->uuids[i][0])
                        r = vfio_probe_mdev(j->scan, j->sysfs, j->uuids[i], &holder, &probe_error);
                else
                        r = vfio_probe_vf(j->scan, j->sysfs, j->vfs[i], &holder, &probe_error);
                j->free_vf[i] = r == 0;
        }
        return 0;
}

void claim_place16_step_done(Claim *c, bool ok)
{
        if (ok)
                c->place16_ok++;
        if (c->place16_pending > 0 && --c->place16_pending > 0)
                return;
        if (c->place16_ok > 0) {
                claim_restart(c); /* rediscover and select once more */
                return;
        }
        claim_fail_selection(c, c->fail_r, c->fail_error);
}

static void on_scan_done(int r, void *data, const char *error, void *userdata)
{
        Claim *c = userdata;
        Claimer *cl = c->cl;
        ScanJob *j = data;
        _cleanup_(device_scan_unrefp) DeviceScan *shared = NULL;

        if (r < 0 || !j || device_scan_new(j->scan, &shared) < 0) {
                claim_fail_selection(c, c->fail_r, c->fail_error);
                claimer_process(cl);
                return;
        }
        j->scan = NULL; /* the shared scan owns it now */
        c->place16_pending = 0;
        c->place16_ok = 0;
        for (size_t i = 0; j->vfs[i]; i++) {
                if (!j->free_vf[i])
                        continue;
                if (claim_queue_write(c, WRITE_RESET_PLACE16, j->vfs[i], j->gpus[i],
                                      j->uuids[i][0] ? j->uuids[i] : NULL) < 0)
                        continue;
                WriteOp *w = cl->writes;
                while (w->next)
                        w = w->next;
                w->scan = device_scan_ref(shared);
                c->place16_pending++;
        }
        c->state = CLAIM_BUSY;
        if (c->place16_pending == 0)
                claim_place16_step_done(c, false);
        claimer_process(cl);
}

void claim_place16_start(Claim *c, const PlacementSnapshot *sn, int select_r,
                         const char *select_error)
{
        Claimer *cl = c->cl;
        _cleanup_free_ char *error = NULL;

        c->place16_done = true;
        c->force_full = true;
        c->fail_r = error_set(&c->fail_error, select_r, "%s", select_error);

        ScanJob *j = calloc(1, sizeof *j);
        if (!j) {
                claim_fail_selection(c, select_r, select_error);
                return;
        }
        for (size_t i = 0; i < sn->n_vfs; i++) {
                const PlacementVf *v = &sn->vfs[i];
                if (!v->readable || v->uncertain || !v->parent || !placement_vf_is_dirty(v))
                        continue;
                const GpuVf *vf = gpu_host_find_vf(claimer_host(cl), v->address);
                const char *uuid = vf && vf->mdev_uuids ? vf->mdev_uuids[0] : "";
                if (strv_push(&j->vfs, v->address) < 0 || strv_push(&j->gpus, v->parent) < 0 ||
                    strv_push(&j->uuids, uuid) < 0) {
                        scan_job_free(j);
                        claim_fail_selection(c, select_r, select_error);
                        return;
                }
        }
        if (!j->vfs) {
                scan_job_free(j);
                claim_fail_selection(c, select_r, select_error);
                return;
        }
        int r = root_dup(cl->proc, &j->proc);
        if (r >= 0)
                r = root_dup(cl->sysfs, &j->sysfs);
        if (r >= 0 && !(j->dev_root = strdup(cl->dev_root)))
                r = -ENOMEM;
        if (r >= 0 && !(j->free_vf = calloc(strv_length(j->vfs), sizeof *j->free_vf)))
                r = -ENOMEM;
        if (r >= 0) {
                WorkerJob job = {
                    .timeout = cl->sysfs_timeout,
                    .run = scan_job_run,
                    .done = on_scan_done,
                    .data = j,
                    .free_data = scan_job_free,
                    .userdata = c,
                };
                r = worker_pool_submit(cl->pool, &job, &error);
        }
        if (r < 0) {
                scan_job_free(j);
                claim_fail_selection(c, select_r, select_error);
                return;
        }
        c->state = CLAIM_BUSY;
}
