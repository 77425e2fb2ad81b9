/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The engine that runs an operation on an instance (INST-8, INST-9, INST-10, INST-11, INST-12,
 * INST-13, INST-14, INST-15, INST-16, INST-17, INST-18, INST-19, INST-21, INST-24, INST-25) as a
 * declared list of steps on the loop, and the pieces the steps are made of: record writes, jobs on
 * the disk pool, releases through the PLACE-9 gate, removal.
 *
 * Each step that announces a transition writes the record as its run (INST-8), so the next
 * step acts only once the transition is on disk. A failing step's undo list is the rollback of
 * INST-14: each step says how to take itself back, and the engine runs those in reverse, so a
 * new step (a disk, a seed, a NIC) brings its own rollback instead of a new failure path.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "instances/instance-internal.h"

static const char *const op_names[] = {
    [OP_CREATE] = "create",
    [OP_START] = "start",
    [OP_STOP] = "stop",
    [OP_DELETE] = "delete",
    [OP_EXIT] = "exit",
    [OP_RECOVER] = "recovery",
    [OP_TERMINATE] = "termination",
    [OP_RELEASE] = "release",
    [OP_ATTACH] = "attach volume",
    [OP_DETACH] = "detach volume",
    [OP_SETTLE] = "settle volumes",
};

/* The released claim is on disk now (or was never to be): nothing to put back. */
static void released_forget(Op *op)
{
        free(op->released.framework);
        free(op->released.device_path);
        free(op->released.mdev_uuid);
        op->released = (InstanceGpu){0};
        op->released_vf[0] = 0;
}

const char *instance_ops_unrecorded_release(const Instance *i)
{
        return i->op && i->op->released.framework && i->op->released_vf[0] ? i->op->released_vf
                                                                           : NULL;
}

void instance_op_free(Op *op)
{
        if (!op)
                return;
        /* A release it kept aside no longer holds its VF (instance_claimed_vf()). */
        op->m->generation++;
        if (op->admitted)
                op->m->admitted_unreserved--;
        if (op->m->cfg.claimer.tracker)
                gpu_tracker_cancel(op->m->cfg.claimer.tracker, op);
        write_gate_cancel(op->m->gate, op);
        device_scan_unref(op->release_scan);
        released_forget(op);
        free(op->release_error);
        if (op->spawn)
                spawn_data_free(op->spawn);
        instance_boot_files_close(&op->boot_files);
        instance_nic_files_close(&op->nic);
        vmm_block_job_free(op->block);
        closep(&op->volume_fd);
        free(op->error);
        instance_spec_done(&op->spec);
        free(op);
}

static char *dup_error(const char *e)
{
        return strdup(e ? e : "unknown error");
}

void op_set_error(Op *op, const char *error)
{
        char *e = dup_error(error);
        free(op->error);
        op->error = e;
}

void instance_refuse(InstanceFailure f, InstanceFailure *ret_failure, char **ret_error,
                     const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        char *e = NULL;
        if (vasprintf(&e, fmt, ap) < 0)
                e = NULL;
        va_end(ap);
        *ret_failure = e ? f : INSTANCE_FAILURE_INTERNAL;
        *ret_error = e ? e : strdup("out of memory");
}

Instance *instance_find_idle(InstanceManager *m, const char *id, InstanceFailure *ret_failure,
                             char **ret_error)
{
        Instance *i = instance_find(m, id);
        if (!i) {
                instance_refuse(INSTANCE_FAILURE_NOT_FOUND, ret_failure, ret_error,
                                "instance %s not found", id);
                return NULL;
        }
        if (i->op) {
                instance_refuse(INSTANCE_FAILURE_BUSY, ret_failure, ret_error,
                                "instance %s is busy: %s in progress", id, op_names[i->op->kind]);
                return NULL;
        }
        return i;
}

int instance_manager_refuse(InstanceManager *m, const char *id, const char *operation,
                            InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = instance_find(m, id);
        if (!i)
                instance_refuse(INSTANCE_FAILURE_NOT_FOUND, ret_failure, ret_error,
                                "instance %s not found", id);
        else if (i->rec.gpu.profile)
                instance_refuse(
                    INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                    "%s is not supported for instances with vGPU attached (driver limitation)",
                    operation);
        else
                instance_refuse(INSTANCE_FAILURE_NOT_IMPLEMENTED, ret_failure, ret_error,
                                "%s is not implemented", operation);
        return -EOPNOTSUPP;
}

/* ---- starting and ending an operation ------------------------------------------------------ */

Op *op_begin(InstanceManager *m, Instance *i, OpKind kind, InstanceDoneFunc done, void *userdata,
             InstanceFailure *ret_failure, char **ret_error)
{
        Op *op = op_new(m, i, kind, done, userdata);
        if (!op)
                instance_refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
        return op;
}

Op *op_new(InstanceManager *m, Instance *i, OpKind kind, InstanceDoneFunc done, void *userdata)
{
        Op *op = calloc(1, sizeof *op);
        if (!op)
                return NULL;
        *op = (Op){.kind = kind,
                   .i = i,
                   .m = m,
                   .done = done,
                   .userdata = userdata,
                   .boot_files = INSTANCE_BOOT_FILES_NONE,
                   .nic = INSTANCE_NIC_FILES_NONE,
                   .volume_fd = -1};
        if (i)
                i->op = op;
        return op;
}

static void op_finish(Op *op, int r, InstanceFailure failure, const char *error)
{
        Instance *i = op->i;
        if (i && i->op == op)
                i->op = NULL;
        InstanceOutcome o = {.r = r,
                             .failure = r < 0 ? failure : INSTANCE_FAILURE_NONE,
                             .error = r < 0 ? (error ? error : "unknown error") : NULL,
                             .record = i ? &i->rec : NULL};
        if (op->done)
                op->done(&o, op->userdata);
        bool exited_meanwhile =
            i && !i->op && i->vmm && i->exited && i->rec.state == INSTANCE_RUNNING;
        bool recovery_pending = i && !i->op && i->recovery != RECOVERY_NONE;
        instance_op_free(op);
        /* A VMM that exited while the operation ran is handled now (INST-19). */
        if (exited_meanwhile)
                instance_ops_vmm_exited(i);
        else if (recovery_pending)
                instance_ops_recover(i);
}

void op_succeed(Op *op)
{
        op_finish(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

void op_fail(Op *op, int r, InstanceFailure failure, const char *error)
{
        op_finish(op, r < 0 ? r : -EIO, failure, error);
}

/* ---- the engine ---------------------------------------------------------------------------- */

static uint64_t loop_now(const Op *op)
{
        uint64_t now;
        return sd_event_now(op->m->event, CLOCK_MONOTONIC, &now) >= 0 ? now : 0;
}

static void step_run(Op *op)
{
        const Step *s = op->steps[op->at];
        op->step_began = loop_now(op);
        if (s)
                s->run(op);
        else
                op_succeed(op);
}

void op_run(Op *op, const Step *const *steps)
{
        op->steps = steps;
        op->at = 0;
        op->undoing = false;
        step_run(op);
}

/* The failing step is named in the log; the answer keeps the step's own text (SPEC). */
static void log_failed_step(Op *op, int r)
{
        const Step *s = op->steps ? op->steps[op->at] : NULL;
        log_line(LOG_LEVEL_WARNING, r, "instance operation failed", "instance_id", op->i->rec.id,
                 "operation", op_names[op->kind], "step", s ? s->name : NULL, "error", op->error,
                 NULL);
}

void step_undone(Op *op)
{
        while (op->at > 0) {
                const Step *s = op->steps[--op->at];
                if (s->undo) {
                        s->undo(op);
                        return;
                }
        }
        _cleanup_free_ char *e = TAKE_PTR(op->error);
        op_fail(op, op->r, op->failure, e);
}

void step_done(Op *op, int r, InstanceFailure failure, const char *error)
{
        if (r >= 0) {
                if (op->at < OP_STEPS_MAX)
                        op->step_usec[op->at] = loop_now(op) - op->step_began;
                op->at++;
                step_run(op);
                return;
        }
        op->r = r;
        op->failure = failure;
        op_set_error(op, error);
        log_failed_step(op, r);
        op->undoing = true;
        if (op->steps[op->at]->undo_failed)
                op->at++;
        step_undone(op);
}

void step_failed(Op *op, int r, InstanceFailure failure, const char *error, const char *fmt, ...)
{
        _cleanup_free_ char *prefix = NULL, *e = dup_error(error);
        va_list ap;
        va_start(ap, fmt);
        (void)error_setv(&prefix, r, fmt, ap);
        va_end(ap);
        (void)error_prefix(&e, r, "%s", prefix);
        step_done(op, r, failure, e);
}

static void failed_written(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        _cleanup_free_ char *e = TAKE_PTR(op->error);
        op_fail(op, -EIO, op->failure, e);
}

void step_fail_alive(Op *op, InstanceFailure failure, const char *error)
{
        op->failure = failure;
        op_set_error(op, error);
        if (!op->undoing)
                log_failed_step(op, -EIO);
        op->i->rec.state = INSTANCE_FAILED;
        (void)instance_set_error(&op->i->rec, op->error);
        op_write_then(op, failed_written);
}

/* ---- record writes ------------------------------------------------------------------------- */

/*
 * A write that failed after a release leaves the disk claiming the VF: the claim comes back
 * in memory too (the instance keeps it, as after a failed release), and a pass's release_stale
 * clears it again and saves (REC-4). Without this the VF would be free here and claimed there,
 * and the next create could claim it a second time (REL-2).
 */
static void released_restore(Op *op)
{
        InstanceGpu *g = &op->i->rec.gpu;
        if (!op->released.framework || g->framework)
                return;
        g->framework = TAKE_PTR(op->released.framework);
        g->device_path = TAKE_PTR(op->released.device_path);
        g->mdev_uuid = TAKE_PTR(op->released.mdev_uuid);
        g->claimed_at = op->released.claimed_at;
        memcpy(op->i->vf, op->released_vf, sizeof op->i->vf);
        op->m->generation++;
        log_line(LOG_LEVEL_WARNING, 0,
                 "vGPU release not recorded; the claim is kept until a reconcile pass saves it",
                 "instance_id", op->i->rec.id, "device_path", g->device_path, NULL);
        released_forget(op);
}

static void write_done(Instance *i, int r, const char *error)
{
        Op *op = i->op;
        if (!op)
                return;
        if (r < 0)
                released_restore(op);
        else
                released_forget(op);
        OpStep next = op->next;
        next(op, r, error);
}

void op_write_then(Op *op, OpStep next)
{
        op->next = next;
        int r = instance_write(op->i, write_done);
        if (r < 0)
                next(op, r, strerror(-r));
}

int instance_set_error(InstanceRecord *rec, const char *text)
{
        char *e = text ? strdup(text) : NULL;
        if (text && !e)
                return -ENOMEM;
        free(rec->error);
        rec->error = e;
        return 0;
}

void instance_remove_runtime(Instance *i)
{
        const char *names[] = {INSTANCE_QMP_SOCKET, INSTANCE_AGENT_SOCKET, INSTANCE_CONSOLE_SOCKET};
        for (size_t k = 0; k < ELEMENTSOF(names); k++) {
                _cleanup_free_ char *p = instance_runtime_path(i, names[k]);
                if (p && unlink(p) < 0 && errno != ENOENT)
                        log_line(LOG_LEVEL_WARNING, -errno, "cannot remove VMM socket", "path", p,
                                 NULL);
        }
        _cleanup_free_ char *dir = NULL;
        if (strprintf(&dir, "%s/%s", i->m->runtime_instances, i->rec.id) >= 0)
                (void)rmdir(dir);
}

/* ---- the disk pool ------------------------------------------------------------------------- */

typedef struct OpJob {
        Op *op;
        JobFunc run;
        void *data;
        void (*free_data)(void *data);
} OpJob;

static int op_job_run(void *data, char **error)
{
        OpJob *j = data;
        return j->run(j->data, error);
}

static void op_job_done(int r, void *data, const char *error, void *userdata)
{
        Op *op = userdata;
        op->job_data = data ? ((OpJob *)data)->data : NULL;
        op->next(op, r, error);
}

static void op_job_free(void *data)
{
        OpJob *j = data;
        if (j->free_data)
                j->free_data(j->data);
        free(j);
}

static void job_then(Op *op, WorkerPool *pool, nsec_t timeout, JobFunc run, void *data,
                     void (*free_data)(void *), OpStep next)
{
        op->next = next;
        OpJob *j = calloc(1, sizeof *j);
        if (!j) {
                if (free_data)
                        free_data(data);
                next(op, -ENOMEM, "out of memory");
                return;
        }
        *j = (OpJob){.op = op, .run = run, .data = data, .free_data = free_data};
        _cleanup_free_ char *error = NULL;
        int r = worker_pool_submit(pool,
                                   &(WorkerJob){.key = op->i ? op->i->rec.id : NULL,
                                                .timeout = timeout,
                                                .run = op_job_run,
                                                .done = op_job_done,
                                                .data = j,
                                                .free_data = op_job_free,
                                                .userdata = op},
                                   &error);
        if (r < 0) {
                op_job_free(j);
                next(op, r, error);
        }
}

void op_job_then(Op *op, JobFunc run, void *data, void (*free_data)(void *), OpStep next)
{
        job_then(op, op->m->cfg.disk_pool, 0, run, data, free_data, next);
}

void op_helper_job_then(Op *op, nsec_t timeout, JobFunc run, void *data, void (*free_data)(void *),
                        OpStep next)
{
        job_then(op, op->m->cfg.helper_pool, timeout, run, data, free_data, next);
}

/* ---- releases (INST-14, INST-15, INST-17, INST-18) ------------------------------------------ */

/* DISC-20: the host picture follows a release, and NVML's cache with it (NVML-14). */
/* The release's result waits here for the host's re-read (DISC-20). */
static void release_reread(int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)r;
        (void)error;
        _cleanup_free_ char *e = TAKE_PTR(op->release_error);
        op->next(op, op->release_r, e);
}

static void release_done(const DeviceResult *res, void *userdata)
{
        Op *op = userdata;
        if (res->r >= 0) {
                /* Cleared here, kept aside until a record write carries it (write_done). */
                InstanceGpu *g = &op->i->rec.gpu;
                released_forget(op);
                op->released.framework = TAKE_PTR(g->framework);
                op->released.device_path = TAKE_PTR(g->device_path);
                op->released.mdev_uuid = TAKE_PTR(g->mdev_uuid);
                op->released.claimed_at = g->claimed_at;
                memcpy(op->released_vf, op->i->vf, sizeof op->released_vf);
                instance_record_clear_claim(&op->i->rec);
                op->i->vf[0] = 0;
        } else
                log_line(LOG_LEVEL_WARNING, res->r, "release of vGPU claim failed", "instance_id",
                         op->i->rec.id, "device_path", op->i->rec.gpu.device_path, "error",
                         res->error, NULL);
        /*
         * The answer waits for the host's picture to show the release, so that a /gpus or
         * /resources read after it agrees (MET-4).
         */
        op->release_r = res->r;
        op->release_error = res->r < 0 ? dup_error(res->error) : NULL;
        /* NVML-14: the placement cache follows, never overlapping a write (PLACE-9). */
        (void)claimer_request_nvml_refresh(op->m->claimer, false);
        if (instance_manager_reread_host(op->m, res->vf, release_reread, op) < 0)
                release_reread(0, NULL, op);
}

/* The release itself, once no NVML query about the VF's GPU runs (PLACE-9). */
static void release_dispatch(void *userdata)
{
        Op *op = userdata;
        Instance *i = op->i;
        _cleanup_free_ char *error = NULL;
        int r = device_ops_release(
            op->m->cfg.ops,
            &(DeviceReleaseRequest){.claim = {.framework = i->rec.gpu.framework,
                                              .vf = instance_claimed_vf(op->m, i),
                                              .mdev_uuid = i->rec.gpu.mdev_uuid},
                                    .instance_id = i->rec.id,
                                    .after_vmm_exit = op->release_after_exit,
                                    .scan = op->release_scan},
            release_done, op, &error);
        /* One probe's worth: a later release of this operation takes a fresh scan. */
        op->release_scan = device_scan_unref(op->release_scan);
        if (r < 0) {
                log_line(LOG_LEVEL_WARNING, r, "release of vGPU claim failed", "instance_id",
                         i->rec.id, "device_path", i->rec.gpu.device_path, "error", error, NULL);
                op->next(op, r, error);
        }
}

void op_release_then(Op *op, bool after_vmm_exit, OpStep next)
{
        Instance *i = op->i;
        op->next = next;
        if (!instance_record_is_claimed(&i->rec)) {
                next(op, 0, NULL);
                return;
        }
        op->release_after_exit = after_vmm_exit;
        /* A release writes the VF: it waits for a query about its GPU to end (PLACE-9). */
        int r = write_gate_pass(op->m->gate, instance_claimed_vf(op->m, i), release_dispatch, op);
        if (r < 0) {
                log_line(LOG_LEVEL_WARNING, r, "release of vGPU claim failed", "instance_id",
                         i->rec.id, "device_path", i->rec.gpu.device_path, "error", "out of memory",
                         NULL);
                next(op, r, "out of memory");
        } else if (r > 0)
                release_dispatch(op);
}

/* ---- removal (INST-18, INST-20) ------------------------------------------------------------ */

typedef struct RemoveData {
        int dirfd;
        char id[INSTANCE_ID_LEN + 1];
} RemoveData;

static int remove_run(void *data, char **error)
{
        RemoveData *d = data;
        return instance_remove_at(d->dirfd, d->id, error);
}

void op_remove_then(Op *op, OpStep next)
{
        RemoveData *d = calloc(1, sizeof *d);
        if (!d) {
                next(op, -ENOMEM, "out of memory");
                return;
        }
        d->dirfd = op->m->cfg.instances_dirfd;
        snprintf(d->id, sizeof d->id, "%s", op->i->rec.id);
        op_job_then(op, remove_run, d, free, next);
}

void op_drop_instance(Op *op)
{
        Instance *i = op->i;
        instance_remove_runtime(i);
        i->op = NULL;
        op->i = NULL;
        instance_drop(op->m, i);
}

/*
 * FLEET-6: the instance that held a Placement consumer is gone for good, so its allocation
 * should go too; the fleet side queues the DELETE for its worker (it never blocks this). It
 * takes the instance out of the table first: the fleet side never deletes the allocation of a
 * consumer a listed instance names, and may look at once.
 */
void op_drop_releasing_consumer(Op *op)
{
        InstanceManager *m = op->m;
        _cleanup_free_ char *consumer = TAKE_PTR(op->i->rec.placement.consumer);
        op_drop_instance(op);
        if (consumer && m->cfg.consumer_released)
                m->cfg.consumer_released(m->cfg.userdata, consumer);
}

/* ---- shared steps -------------------------------------------------------------------------- */

void step_next_anyway(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

/* The VMM is gone (stopped, exited or never there): its files and claim go with it. */
static void release_gone_run(Op *op)
{
        Instance *i = op->i;
        bool had_vmm = i->vmm != NULL;
        instance_remove_runtime(i);
        instance_forget_vmm(i);
        /* A failed release keeps the claim (visible as gpu.device_path); REC-4 retries it. */
        op_release_then(op, had_vmm, step_next_anyway);
}

const Step step_release_gone = {.name = "release", .run = release_gone_run};

void step_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, error, "save instance record");
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void write_cleared_run(Op *op)
{
        instance_record_clear_hypervisor(&op->i->rec);
        if (op->kind == OP_STOP)
                op->i->rec.state = INSTANCE_STOPPED;
        op_write_then(op, step_written);
}

/* A stop ends Stopped; an exit or a termination keeps the state it wrote or found. */
const Step step_write_cleared = {.name = "write_record", .run = write_cleared_run};

/* `name=<duration>` of each step done so far, in their order (GEN-12). */
static void format_step_timings(const Op *op, char *buf, size_t size)
{
        size_t used = 0;
        buf[0] = 0;
        for (size_t k = 0; k < op->at && k < OP_STEPS_MAX && used < size; k++) {
                char d[DURATION_STRLEN];
                int n = snprintf(buf + used, size - used, "%s%s=%s", used ? " " : "",
                                 op->steps[k]->name,
                                 format_duration(op->step_usec[k] * NSEC_PER_USEC, d));
                if (n < 0)
                        break;
                used += (size_t)n;
        }
}

static void running_written(Op *op, int r, const char *error)
{
        /* An adopted VMM was announced when it booted; only a boot of ours says so now. */
        /* vmm_ready_ms: the VMM's own share of the boot (PERF-7 subtracts it from a create);
         * steps: where the rest went. */
        char ready_ms[24], steps[768];
        snprintf(ready_ms, sizeof ready_ms, "%" PRIu64, op->vmm_ready_usec / 1000);
        format_step_timings(op, steps, sizeof steps);
        if (r >= 0 && op->kind != OP_RECOVER)
                log_line(LOG_LEVEL_INFO, 0, "instance running", "instance_id", op->i->rec.id,
                         "name", op->i->rec.name, "vmm_ready_ms", ready_ms, "steps", steps, NULL);
        step_written(op, r, error);
}

static void write_running_run(Op *op)
{
        op->i->rec.state = INSTANCE_RUNNING;
        op_write_then(op, running_written);
}

const Step step_write_running = {.name = "write_running", .run = write_running_run};
