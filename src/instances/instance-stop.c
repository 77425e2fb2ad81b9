/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Stop (INST-15, INST-16, INST-25), delete (INST-18) and a VMM's unrequested exit (INST-19) as
 * lists of steps. Each announces itself on disk first, stops the VMM, and releases the claim
 * only once the VMM is gone; a VMM that may be alive keeps its claim.
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "instances/instance-internal.h"

/* ---- stop (INST-15, INST-16, INST-25) ------------------------------------------------------ */

static void announced(Op *op, int r, const char *error)
{
        /* INST-8: the operation was not announced, so it did not happen. */
        if (r < 0)
                op->i->rec.state = op->was;
        step_written(op, r, error);
}

/* The operation's state written before it acts; the state from before comes back on failure. */
static void announce(Op *op, InstanceState state)
{
        op->was = op->i->rec.state;
        op->i->rec.state = state;
        op_write_then(op, announced);
}

static void write_stopping_run(Op *op)
{
        announce(op, INSTANCE_STOPPING);
}

static const Step step_write_stopping = {.name = "write_stopping", .run = write_stopping_run};

static void stop_vmm_done(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                /* INST-16: the ladder failed; the VMM may be alive. */
                step_fail_alive(op, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

/* The VMM stop of a stop (op->graceful 0: the ladder only, INST-25). */
static void stop_vmm_run(Op *op)
{
        Instance *i = op->i;
        if (i->vmm && !i->exited) {
                int r = vmm_stop(i->vmm, op->graceful, stop_vmm_done, op);
                if (r < 0)
                        step_fail_alive(op, INSTANCE_FAILURE_INTERNAL, strerror(-r));
                return;
        }
        if (i->ambiguous) {
                step_fail_alive(op, INSTANCE_FAILURE_INTERNAL,
                                "VMM liveness is ambiguous; the VMM may still be running");
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static const Step step_stop_vmm = {.name = "stop_vmm", .run = stop_vmm_run};

/* A failed release keeps the claim (visible as gpu.device_path) and the stop still answers 200. */
const Step *const stop_steps[] = {
    &step_write_stopping, &step_stop_vmm, &step_release_gone, &step_write_cleared, NULL,
};

int instance_manager_stop(InstanceManager *m, const char *id, InstanceDoneFunc done, void *userdata,
                          InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = instance_find_idle(m, id, ret_failure, ret_error);
        if (!i)
                return -EBUSY;
        switch (i->rec.state) {
        case INSTANCE_STOPPED:
                return 1; /* INST-25: unchanged */
        case INSTANCE_RUNNING:
        case INSTANCE_FAILED:
                break;
        default:
                instance_refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                                "instance %s is %s", id, instance_state_to_string(i->rec.state));
                return -EBUSY;
        }
        Op *op = op_begin(m, i, OP_STOP, done, userdata, ret_failure, ret_error);
        if (!op)
                return -ENOMEM;
        if (i->rec.state == INSTANCE_FAILED) {
                /* INST-25: termination and release only. */
                op->graceful = 0;
                op_run(op, stop_steps + STEPS_RESUME);
                return 0;
        }
        op->graceful = m->config->vmm.stop_timeout;
        op_run(op, stop_steps);
        return 0;
}

/* ---- delete (INST-18) ---------------------------------------------------------------------- */

static void write_deleting_run(Op *op)
{
        announce(op, INSTANCE_DELETING);
}

static const Step step_write_deleting = {.name = "write_deleting", .run = write_deleting_run};

static void delete_vmm_done(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        /* May be alive: the record stays Deleting with its claim; a later delete resumes. */
        step_done(op, r, INSTANCE_FAILURE_INTERNAL, error);
}

static void delete_vmm_run(Op *op)
{
        Instance *i = op->i;
        const Config *c = op->m->config;
        nsec_t cap = instance_has_vfio(i) ? 5 * NSEC_PER_SEC : 2 * NSEC_PER_SEC;
        nsec_t graceful = c->vmm.stop_timeout < cap ? c->vmm.stop_timeout : cap;
        if (i->vmm && !i->exited) {
                int r = vmm_stop(i->vmm, graceful, delete_vmm_done, op);
                if (r < 0)
                        step_done(op, r, INSTANCE_FAILURE_INTERNAL, strerror(-r));
                return;
        }
        if (i->ambiguous) {
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "instance %s VMM may still be running", i->rec.id);
                step_done(op, -EBUSY, INSTANCE_FAILURE_INTERNAL,
                          e ? e : "VMM may still be running");
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static const Step step_delete_vmm = {.name = "stop_vmm", .run = delete_vmm_run};

static void removed(Op *op, int r, const char *error)
{
        if (r < 0) {
                /* The .deleted-<id> tree is retried later (REC-10); the instance is gone. */
                log_line(LOG_LEVEL_WARNING, r, "instance removal incomplete", "instance_id",
                         op->i->rec.id, "error", error, NULL);
        }
        log_line(LOG_LEVEL_INFO, 0, "instance deleted", "instance_id", op->i->rec.id, NULL);
        op_drop_releasing_consumer(op);
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

/* Removed whatever the release did: a dirty VF is REC-6's. */
static void remove_run(Op *op)
{
        op_remove_then(op, removed);
}

static const Step step_remove = {.name = "remove", .run = remove_run};

const Step *const delete_steps[] = {
    &step_write_deleting, &step_delete_vmm, &step_release_gone, &step_remove, NULL,
};

int instance_manager_delete(InstanceManager *m, const char *id, InstanceDoneFunc done,
                            void *userdata, InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = instance_find_idle(m, id, ret_failure, ret_error);
        if (!i)
                return -EBUSY;
        Op *op = op_begin(m, i, OP_DELETE, done, userdata, ret_failure, ret_error);
        if (!op)
                return -ENOMEM;
        op_run(op, delete_steps);
        return 0;
}

int instance_ops_resume_delete(Instance *i, InstanceDoneFunc done, void *userdata)
{
        if (i->op)
                return -EBUSY;
        Op *op = op_new(i->m, i, OP_DELETE, done, userdata);
        if (!op)
                return -ENOMEM;
        i->ambiguous = false; /* the pass proved the VMM gone */
        op_run(op, delete_steps + STEPS_RESUME);
        return 0;
}

/* ---- unrequested exits (INST-19) ----------------------------------------------------------- */

/*
 * The exit's state is on disk before the release it announces (INST-8); a failed write still
 * releases, since the VMM is gone either way, and the next write carries the state.
 */
static void write_exit_run(Op *op)
{
        Instance *i = op->i;
        const VmmExit *e = &i->last_exit;
        _cleanup_free_ char *why = NULL;
        if (e->status_known && e->signal)
                (void)strprintf(&why, "qemu was killed by signal SIG%s", sigabbrev_np(e->signal));
        else if (e->status_known && e->code != 0)
                (void)strprintf(&why, "qemu exited with status %d", e->code);
        i->rec.state = why ? INSTANCE_FAILED : INSTANCE_STOPPED;
        (void)instance_set_error(&i->rec, why);
        log_line(why ? LOG_LEVEL_WARNING : LOG_LEVEL_INFO, 0, "VMM exited", "instance_id",
                 i->rec.id, "state", instance_state_to_string(i->rec.state), "error", why, NULL);
        op_write_then(op, step_next_anyway);
}

static const Step step_write_exit = {.name = "write_exit", .run = write_exit_run};

static const Step *const exit_steps[] = {
    &step_write_exit,
    &step_release_gone,
    &step_write_cleared,
    NULL,
};

void instance_ops_vmm_exited(Instance *i)
{
        if (i->rec.state != INSTANCE_RUNNING) {
                /*
                 * A VMM behind a Stopped or Failed record (INST-21): nothing else to do. One
                 * whose recovery waits for READY=1 is that recovery's (it sees the exit).
                 */
                if (!i->op && i->recovery == RECOVERY_NONE) {
                        instance_remove_runtime(i);
                        instance_forget_vmm(i);
                }
                return;
        }
        Op *op = op_new(i->m, i, OP_EXIT, NULL, NULL);
        if (!op)
                return;
        op_run(op, exit_steps);
}
