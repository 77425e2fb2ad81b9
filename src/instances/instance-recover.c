/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The operations a start-up or a reconcile pass starts on its own: INST-21's actions after
 * READY=1 (an adopted VMM's readiness, a resumed stop or delete, the termination of a VMM
 * behind a Stopped or Failed record) and REC-4's release of a stale claim.
 */
#include <stdlib.h>
#include <string.h>

#include "instances/instance-internal.h"

/* ---- start-up recovery (INST-21) ----------------------------------------------------------- */

/* INST-21: an adopted Creating VMM whose QMP never became ready ends Failed, claim kept. */
static void recover_terminated(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        _cleanup_free_ char *e = NULL;
        if (r < 0)
                (void)strprintf(&e, "%s; %s", op->error, error);
        else {
                instance_remove_runtime(op->i);
                instance_forget_vmm(op->i);
                instance_record_clear_hypervisor(&op->i->rec);
        }
        step_fail_alive(op, INSTANCE_FAILURE_INTERNAL, e ? e : op->error);
}

static void recovered_ready(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                op_set_error(op, error);
                r = vmm_terminate(op->i->vmm, recover_terminated, op);
                if (r < 0)
                        step_fail_alive(op, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void adopted_ready_run(Op *op)
{
        Instance *i = op->i;
        int r = vmm_wait_ready(i->vmm, i->m->config->vmm.boot_timeout, false, recovered_ready, op);
        if (r < 0)
                /* As a readiness that failed: terminated, then Failed. */
                recovered_ready(i->vmm, r, strerror(-r), op);
}

static const Step step_adopted_ready = {.name = "wait_ready", .run = adopted_ready_run};

static const Step *const recover_ready_steps[] = {&step_adopted_ready, &step_write_running, NULL};

static void terminate_done(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                step_done(op, r, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        instance_remove_runtime(op->i);
        instance_forget_vmm(op->i);
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void terminate_run(Op *op)
{
        int r = vmm_terminate(op->i->vmm, terminate_done, op);
        if (r < 0)
                step_done(op, r, INSTANCE_FAILURE_INTERNAL, strerror(-r));
}

static const Step step_terminate = {.name = "terminate", .run = terminate_run};

static const Step *const terminate_steps[] = {&step_terminate, &step_write_cleared, NULL};

/* The state INST-21 gives a gone VMM is written once; the VMM is gone either way. */
static void write_gone_run(Op *op)
{
        op_write_then(op, step_next_anyway);
}

static const Step step_write_gone = {.name = "write_gone", .run = write_gone_run};

static const Step *const gone_steps[] = {&step_write_gone, NULL};

void instance_ops_recover(Instance *i)
{
        Recovery what = i->recovery;
        if (i->op)
                return; /* kept: op_finish() runs it when the operation ends */
        i->recovery = RECOVERY_NONE;
        bool gone = !i->vmm || i->exited;
        if (gone && (what == RECOVERY_READY || what == RECOVERY_TERMINATE)) {
                /* A recovery whose VMM has gone meanwhile. */
                Op *op = op_new(i->m, i, OP_RECOVER, NULL, NULL);
                if (!op)
                        return;
                instance_remove_runtime(i);
                instance_forget_vmm(i);
                instance_record_clear_hypervisor(&i->rec);
                if (what == RECOVERY_READY) {
                        i->rec.state = INSTANCE_FAILED;
                        (void)instance_set_error(&i->rec, "interrupted by daemon restart");
                }
                op_run(op, gone_steps);
                return;
        }
        static const OpKind kinds[] = {[RECOVERY_READY] = OP_RECOVER,
                                       [RECOVERY_STOP] = OP_STOP,
                                       [RECOVERY_DELETE] = OP_DELETE,
                                       [RECOVERY_TERMINATE] = OP_TERMINATE};
        static const Step *const *const lists[] = {[RECOVERY_READY] = recover_ready_steps,
                                                   [RECOVERY_STOP] = stop_steps + STEPS_RESUME,
                                                   [RECOVERY_DELETE] = delete_steps + STEPS_RESUME,
                                                   [RECOVERY_TERMINATE] = terminate_steps};
        Op *op = op_new(i->m, i, kinds[what], NULL, NULL);
        if (!op)
                return;
        op->graceful = i->m->config->vmm.stop_timeout;
        op_run(op, lists[what]);
}

/* ---- reconcile passes (REC-4, REC-5) ------------------------------------------------------- */

static void stale_released(Op *op, int r, const char *error)
{
        if (r < 0) {
                /* REC-5: the claim stays for the next pass. */
                op->m->stale_release_failures++;
                log_line(LOG_LEVEL_WARNING, r,
                         "failed to release stale vGPU assignment; retrying on the next "
                         "reconcile pass",
                         "instance_id", op->i->rec.id, "device_path", op->i->rec.gpu.device_path,
                         "error", error, NULL);
                step_done(op, r, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void release_stale_run(Op *op)
{
        op_release_then(op, true, stale_released);
}

static const Step step_release_stale = {.name = "release", .run = release_stale_run};

static void stale_written(Op *op, int r, const char *error)
{
        if (r >= 0)
                log_line(LOG_LEVEL_INFO, 0, "released stale vGPU assignment", "instance_id",
                         op->i->rec.id, NULL);
        step_written(op, r, error);
}

static void write_released_run(Op *op)
{
        Instance *i = op->i;
        instance_record_clear_hypervisor(&i->rec);
        if (i->rec.state == INSTANCE_RUNNING)
                i->rec.state = INSTANCE_STOPPED;
        op_write_then(op, stale_written);
}

static const Step step_write_released = {.name = "write_record", .run = write_released_run};

static const Step *const release_stale_steps[] = {&step_release_stale, &step_write_released, NULL};

/* The re-check decides whether the release starts at all. */
static void stale_rechecked(InstanceManager *m, const char *id, const VmmLiveness *l,
                            void *userdata)
{
        Op *op = userdata;
        (void)m;
        (void)id;
        if (l->verdict != VMM_GONE) {
                /* REC-4: a socket still listening, or a pid back, keeps the claim. */
                op_fail(op, -EBUSY, INSTANCE_FAILURE_BUSY, "VMM may be alive");
                return;
        }
        instance_remove_runtime(op->i);
        op_run(op, release_stale_steps);
}

int instance_ops_release_stale(Instance *i, DeviceScan *scan, InstanceDoneFunc done, void *userdata)
{
        if (i->op)
                return -EBUSY;
        Op *op = op_new(i->m, i, OP_RELEASE, done, userdata);
        if (!op)
                return -ENOMEM;
        op->release_scan = scan ? device_scan_ref(scan) : NULL;
        /* Steps 1-2 again, just before the release (REC-4): no scan, a listener is ambiguous. */
        int r = instance_probe(i, NULL, true, stale_rechecked, op);
        if (r < 0) {
                i->op = NULL;
                instance_op_free(op);
        }
        return r;
}
