/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The Claimer's own writes (claim-internal.h): the configure of a reservation, PLACE-11's and
 * PLACE-17's resets and PLACE-16's, each through DeviceOps, none while an NVML query about its
 * GPU runs (PLACE-9).
 */
#include "claim-internal.h"

void claim_write_op_free(WriteOp *w)
{
        device_scan_unref(w->scan);
        free(w->mdev_uuid);
        free(w);
}

void claimer_write_unlink(Claimer *cl, WriteOp *w)
{
        for (WriteOp **p = &cl->writes; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        return;
                }
}

/* ---- writes (PLACE-9 gated) ---------------------------------------------------------------- */

int claim_queue_write(Claim *c, WriteKind kind, const char *vf, const char *gpu,
                      const char *mdev_uuid)
{
        Claimer *cl = c->cl;
        WriteOp *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->claim = c;
        w->kind = kind;
        snprintf(w->vf, sizeof w->vf, "%s", vf);
        snprintf(w->gpu, sizeof w->gpu, "%s", gpu);
        if (mdev_uuid && !(w->mdev_uuid = strdup(mdev_uuid))) {
                free(w);
                return -ENOMEM;
        }
        WriteOp **tail = &cl->writes;
        while (*tail)
                tail = &(*tail)->next;
        *tail = w;
        c->state = CLAIM_BUSY;
        claimer_notify(cl);
        return 0;
}

static void on_write_done(const DeviceResult *res, void *userdata);

static void write_failed_to_start(Claimer *cl, WriteOp *w, int r, const char *error)
{
        DeviceResult res = {
            .r = r,
            .outcome = DEVICE_OUTCOME_FAILED,
            /* Refused at once, on this loop turn: the refusal is still what it was. */
            .kind = device_ops_refusal_kind(cl->ops, w->vf, w->kind == WRITE_CONFIGURE),
            .error = error,
            .vf = w->vf,
        };
        w->started = true;
        on_write_done(&res, w);
}

static void start_write(Claimer *cl, WriteOp *w)
{
        Claim *c = w->claim;
        _cleanup_free_ char *error = NULL;
        bool mdev = claimer_host_is_mdev(cl);
        int r;

        w->started = true;
        if (w->kind == WRITE_CONFIGURE) {
                if (mdev)
                        r = device_ops_mdev_create(cl->ops, c->vf, c->chosen_profile, c->mdev_uuid,
                                                   c->instance_id, on_write_done, w, &error);
                else {
                        char type[16];
                        snprintf(type, sizeof type, "%" PRIu32, c->type_id);
                        r = device_ops_configure(cl->ops, c->vf, type, c->instance_id,
                                                 on_write_done, w, &error);
                }
        } else {
                DeviceReleaseRequest req = {
                    .claim = {.framework = mdev ? "mdev" : "vendor-vfio",
                              .vf = w->vf,
                              .mdev_uuid = w->mdev_uuid},
                    .instance_id = w->kind == WRITE_RESET_REFUSED ? c->instance_id : NULL,
                    .scan = w->scan,
                };
                r = device_ops_release(cl->ops, &req, on_write_done, w, &error);
        }
        if (r < 0)
                write_failed_to_start(cl, w, r, error);
}

/* Starts the queued writes that PLACE-9 allows now. */
bool claimer_kick_writes(Claimer *cl)
{
        bool blocked = false;
        bool refreshing = claimer_refresh_running(cl);

        for (WriteOp *w = cl->writes, *next; w; w = next) {
                next = w->next;
                if (w->started)
                        continue;
                GpuRoundState *g = claimer_round_gpu(cl, w->gpu, false);
                if (refreshing || (g && g->querying)) {
                        blocked = true;
                        continue;
                }
                start_write(cl, w);
        }
        return blocked && refreshing;
}

static void configure_done(Claim *c, const DeviceResult *res)
{
        Claimer *cl = c->cl;

        if (res->r >= 0) {
                /* PLACE-2: the reservation ends; PLACE-7 keeps the write until it is reflected. */
                GpuRoundState *g =
                    claimer_gpu_uses_nvml(cl, c->gpu) ? claimer_round_gpu(cl, c->gpu, true) : NULL;
                WriteRecord *recs =
                    g ? realloc(cl->records, (cl->n_records + 1) * sizeof *recs) : NULL;
                if (recs) {
                        cl->records = recs;
                        recs[cl->n_records] =
                            (WriteRecord){.type_id = c->type_id, .done_at = g->submitted};
                        snprintf(recs[cl->n_records].gpu, PCI_ADDRESS_STRLEN, "%s", c->gpu);
                        cl->n_records++;
                }
                claim_drop_reservation(c);
                claim_finish(c, 0, CLAIM_FAILURE_NONE, NULL);
                return;
        }

        switch (res->kind) {
        case DEVICE_FAILURE_CAPACITY:
                /* PLACE-17: reset, clear, select once more without the VF; twice fails. */
                c->capacity_refusals++;
                c->fail_r = error_set(&c->fail_error, -ENOSPC, "%s", res->error);
                c->fail_kind = CLAIM_FAILURE_INSUFFICIENT_RESOURCES;
                if (strv_push(&c->exclude, c->vf) < 0 ||
                    claim_queue_write(c, WRITE_RESET_REFUSED, c->vf, c->gpu, c->mdev_uuid) < 0)
                        claim_fail_after_save(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory",
                                              false);
                return;
        case DEVICE_FAILURE_QUARANTINED:
        case DEVICE_FAILURE_UNCERTAIN:
                /*
                 * DEV-2 (and GEN-4's refusal of a VF that turned uncertain since selection):
                 * nothing was written; drop the VF and select once more.
                 */
                if (strv_push(&c->exclude, c->vf) < 0) {
                        claim_fail_after_save(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory",
                                              false);
                        return;
                }
                claim_fail_after_save(c, res->r, CLAIM_FAILURE_INTERNAL, res->error, true);
                return;
        case DEVICE_FAILURE_STORE:
                claim_fail_after_save(c, res->r, CLAIM_FAILURE_PLACEMENT_DISABLED, res->error,
                                      false);
                return;
        case DEVICE_FAILURE_TIMEOUT: {
                /* GEN-4's bare text, named (GEN-7): the VF is uncertain from now on. */
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "%s on VF %s: %s",
                                claimer_host_is_mdev(c->cl) ? "create mdev" : "configure vGPU",
                                c->vf, res->error);
                claim_fail_after_save(c, res->r, CLAIM_FAILURE_INTERNAL, e ? e : res->error, false);
                return;
        }
        default:
                /* GEN-4: an exhausted pool disables placement rather than failing internally. */
                claim_fail_after_save(c, res->r,
                                      res->r == -EAGAIN ? CLAIM_FAILURE_PLACEMENT_DISABLED
                                                        : CLAIM_FAILURE_INTERNAL,
                                      res->error, false);
                return;
        }
}

static void on_write_done(const DeviceResult *res, void *userdata)
{
        WriteOp *w = userdata;
        Claim *c = w->claim;
        Claimer *cl = c->cl;
        WriteKind kind = w->kind;

        claimer_write_unlink(cl, w);
        _cleanup_free_ char *vf = strdup(w->vf);
        claim_write_op_free(w);
        if (cl->owner.vf_changed && vf)
                cl->owner.vf_changed(cl->owner.userdata, vf);
        /* NVML-14: the placement cache follows, never overlapping a write (PLACE-9). */
        (void)claimer_request_nvml_refresh(cl, false);

        switch (kind) {
        case WRITE_CONFIGURE:
                configure_done(c, res);
                break;
        case WRITE_RESET_DIRTY:
                if (res->r >= 0) {
                        int r = claim_save(c);
                        if (r < 0)
                                claim_finish(c, r, CLAIM_FAILURE_INTERNAL, "out of memory");
                        break;
                }
                /* PLACE-12 */
                log_line(LOG_LEVEL_WARNING, 0, "dirty vGPU VF refused reset; trying another VF",
                         "vf", vf, "instance_id", c->instance_id, "error", res->error, NULL);
                free(c->refused_dirty_vf);
                c->refused_dirty_vf = vf ? strdup(vf) : NULL;
                (void)error_set(&c->refused_dirty_error, res->r, "%s", res->error);
                if (!vf || strv_push(&c->exclude, vf) < 0) {
                        claim_finish(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory");
                        break;
                }
                claim_restart(c);
                break;
        case WRITE_RESET_REFUSED:
                if (res->r < 0) {
                        /* The VF may still hold the type: the claim stays for the reconciler. */
                        _cleanup_free_ char *msg = NULL;
                        (void)error_set(&msg, -EIO, "%s; reset after refusal: %s", c->fail_error,
                                        res->error);
                        claim_finish(c, -EIO, CLAIM_FAILURE_INTERNAL, msg);
                        break;
                }
                if (c->capacity_refusals >= 2)
                        claim_fail_after_save(c, -ENOSPC, CLAIM_FAILURE_INSUFFICIENT_RESOURCES,
                                              c->fail_error, false);
                else
                        claim_fail_after_save(c, -ENOSPC, CLAIM_FAILURE_INSUFFICIENT_RESOURCES,
                                              c->fail_error, true);
                break;
        case WRITE_RESET_PLACE16:
                claim_place16_step_done(c, res->r >= 0);
                break;
        }
        claimer_process(cl);
}
