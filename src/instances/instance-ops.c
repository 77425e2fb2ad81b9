/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The operations on an instance (INST-8..19, 21, 24, 25) as small state machines on the loop.
 * Each step that announces a transition writes the record first (INST-8) and acts in the
 * write's completion; blocking work (path checks, spawn, file removal, qemu.log) runs on the
 * disk pool, device releases on DeviceOps, and VMM waits in the Vmm's own sources.
 *
 * Rollback follows INST-14: a VMM provably gone (or never started) lets the VF be released and
 * the record deleted (create) or stopped (start); a VMM that may be alive keeps record and claim
 * in Failed.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "instances/instance-internal.h"

typedef enum OpKind {
        OP_CREATE,
        OP_START,
        OP_STOP,
        OP_DELETE,
        OP_EXIT,      /* INST-19: a VMM exited unrequested */
        OP_RECOVER,   /* INST-21: QMP readiness of an adopted Creating VMM */
        OP_TERMINATE, /* INST-21: a live VMM behind a Stopped or Failed record */
        OP_RELEASE,   /* REC-4: a stale claim, its VMM provably gone */
} OpKind;

static const char *const op_names[] = {
    [OP_CREATE] = "create",         [OP_START] = "start",     [OP_STOP] = "stop",
    [OP_DELETE] = "delete",         [OP_EXIT] = "exit",       [OP_RECOVER] = "recovery",
    [OP_TERMINATE] = "termination", [OP_RELEASE] = "release",
};

typedef void (*OpStep)(Op *op, int r, const char *error);

struct Op {
        OpKind kind;
        Instance *i;
        InstanceManager *m;
        InstanceDoneFunc done;
        void *userdata;
        bool admitted;     /* counted in admitted_unreserved (INST-10) */
        bool vmm_started;  /* a VMM was spawned by this operation */
        InstanceState was; /* delete: the state to return to if Deleting cannot be written */
        InstanceFailure failure;
        char *error;         /* the failure being rolled back */
        char **pending_name; /* create: the name held while validation runs */
        InstanceSpec spec;   /* create, start: what to boot */
        OpStep next;         /* the step after a record write, job or release */
        void *job_data;      /* during a job's next step: the job's data */
        int release_r;       /* a release waiting for the host's re-read */
        char *release_error;
        bool release_after_exit;  /* a release waiting at the PLACE-9 gate: DEV-10's retries */
        DeviceScan *release_scan; /* a pass's scan for the release's first probe (DEV-15) */
        /*
         * A claim released in hardware whose clearing no record write has carried yet: a failed
         * write puts it back, so that memory never hands out a VF the disk still claims.
         */
        InstanceGpu released;
        char released_vf[PCI_ADDRESS_STRLEN];
        void *spawn; /* the spawn waiting for its sockets' record write */
        /*
         * create, start: the boot files, opened by the check (INST-6) and handed to the spawn,
         * so that a path swapped in between is never opened.
         */
        InstanceBootFiles boot_files;
};

static void spawn_data_free(void *data);

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
        if (op->admitted)
                op->m->admitted_unreserved--;
        if (op->m->cfg.claimer.tracker)
                gpu_tracker_cancel(op->m->cfg.claimer.tracker, op);
        claimer_cancel_gates(op->m->claimer, op);
        device_scan_unref(op->release_scan);
        released_forget(op);
        free(op->release_error);
        if (op->spawn)
                spawn_data_free(op->spawn);
        instance_boot_files_close(&op->boot_files);
        free(op->error);
        instance_spec_done(&op->spec);
        free(op);
}

static char *dup_error(const char *e)
{
        return strdup(e ? e : "unknown error");
}

/* error may be op->error itself. */
static void op_set_error(Op *op, const char *error)
{
        char *e = dup_error(error);
        free(op->error);
        op->error = e;
}

static void refuse(InstanceFailure f, InstanceFailure *ret_failure, char **ret_error,
                   const char *fmt, ...) _printf_(4, 5);
static void refuse(InstanceFailure f, InstanceFailure *ret_failure, char **ret_error,
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

/* ---- ending an operation ------------------------------------------------------------------- */

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

static void op_succeed(Op *op)
{
        op_finish(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void op_fail(Op *op, int r, InstanceFailure failure, const char *error)
{
        op_finish(op, r < 0 ? r : -EIO, failure, error);
}

static Op *op_new(InstanceManager *m, Instance *i, OpKind kind, InstanceDoneFunc done,
                  void *userdata)
{
        Op *op = calloc(1, sizeof *op);
        if (!op)
                return NULL;
        *op = (Op){.kind = kind,
                   .i = i,
                   .m = m,
                   .done = done,
                   .userdata = userdata,
                   .boot_files = INSTANCE_BOOT_FILES_NONE};
        if (i)
                i->op = op;
        return op;
}

/* ---- steps shared by the machines ---------------------------------------------------------- */

static void write_then(Op *op, OpStep next);

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

/* Writes the record; next gets the write's result. */
static void write_then(Op *op, OpStep next)
{
        op->next = next;
        int r = instance_write(op->i, write_done);
        if (r < 0)
                next(op, r, strerror(-r));
}

static int set_error(InstanceRecord *rec, const char *text)
{
        char *e = text ? strdup(text) : NULL;
        if (text && !e)
                return -ENOMEM;
        free(rec->error);
        rec->error = e;
        return 0;
}

/* VMM-15: the socket files go with the VMM; the runtime directory with them. */
static void remove_runtime(Instance *i)
{
        const char *names[] = {INSTANCE_QMP_SOCKET, INSTANCE_AGENT_SOCKET};
        for (size_t k = 0; k < 2; k++) {
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

typedef int (*JobFunc)(void *data, char **error);

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

/* Runs run(data) on the disk pool; next gets its result. data is freed with free_data. */
static void job_then(Op *op, JobFunc run, void *data, void (*free_data)(void *), OpStep next)
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
        int r = worker_pool_submit(op->m->cfg.disk_pool,
                                   &(WorkerJob){.key = op->i ? op->i->rec.id : NULL,
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

/* ---- releases (INST-14, 15, 17, 18) -------------------------------------------------------- */

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
        if (instance_manager_reread_host(op->m, res->vf, release_reread, op) < 0)
                release_reread(0, NULL, op);
}

/* The claim's VF: the one in memory, else the record's device_path (vendor VFIO); or NULL. */
static const char *claimed_vf(const Instance *i)
{
        if (i->vf[0])
                return i->vf;
        if (!streq_ptr(i->rec.gpu.framework, "vendor-vfio"))
                return NULL;
        const char *slash = strrchr(i->rec.gpu.device_path, '/');
        return slash ? slash + 1 : NULL;
}

/* The release itself, once no NVML query about the VF's GPU runs (PLACE-9). */
static void release_dispatch(void *userdata)
{
        Op *op = userdata;
        Instance *i = op->i;
        _cleanup_free_ char *error = NULL;
        int r =
            device_ops_release(op->m->cfg.ops,
                               &(DeviceReleaseRequest){.claim = {.framework = i->rec.gpu.framework,
                                                                 .vf = claimed_vf(i),
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

/* Releases the claim if there is one; next gets the result (0 without a claim). */
static void release_then(Op *op, bool after_vmm_exit, OpStep next)
{
        Instance *i = op->i;
        op->next = next;
        if (!instance_record_is_claimed(&i->rec)) {
                next(op, 0, NULL);
                return;
        }
        op->release_after_exit = after_vmm_exit;
        /* A release writes the VF: it waits for a query about its GPU to end (PLACE-9). */
        int r = claimer_gate_write(op->m->claimer, claimed_vf(i), release_dispatch, op);
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

static void remove_then(Op *op, OpStep next)
{
        RemoveData *d = calloc(1, sizeof *d);
        if (!d) {
                next(op, -ENOMEM, "out of memory");
                return;
        }
        d->dirfd = op->m->cfg.instances_dirfd;
        snprintf(d->id, sizeof d->id, "%s", op->i->rec.id);
        job_then(op, remove_run, d, free, next);
}

/* The instance leaves the table; the operation answers without a record. */
static void drop_instance(Op *op)
{
        Instance *i = op->i;
        remove_runtime(i);
        i->op = NULL;
        op->i = NULL;
        instance_drop(op->m, i);
}

/* ---- rollback (INST-14) -------------------------------------------------------------------- */

/*
 * FLEET-6: the instance that held a Placement consumer is gone for good, so its allocation
 * should go too; the fleet side queues the DELETE for its worker (it never blocks this). It
 * takes the instance out of the table first: the fleet side never deletes the allocation of a
 * consumer a listed instance names, and may look at once.
 */
static void drop_releasing_consumer(Op *op)
{
        InstanceManager *m = op->m;
        _cleanup_free_ char *consumer = TAKE_PTR(op->i->rec.placement.consumer);
        drop_instance(op);
        if (consumer && m->cfg.consumer_released)
                m->cfg.consumer_released(m->cfg.userdata, consumer);
}

static void rollback_removed(Op *op, int r, const char *error)
{
        if (r < 0)
                log_line(LOG_LEVEL_ERR, r, "cannot remove instance after a failed create",
                         "instance_id", op->i->rec.id, "error", error, NULL);
        _cleanup_free_ char *e = TAKE_PTR(op->error);
        InstanceFailure f = op->failure;
        /*
         * INST-14: a create vgpud had taken on and then failed (500) gives its allocation back.
         * A refusal (no room on the PF, placement disabled, an unknown profile) keeps it, so
         * that the scheduler can move it to another host with the consumer generation it knows
         * (FLEET-7); if it does neither, the orphan audit deletes it after placement.orphan_grace.
         */
        if (f == INSTANCE_FAILURE_INTERNAL)
                drop_releasing_consumer(op);
        else
                drop_instance(op);
        op_fail(op, -EIO, f, e);
}

static void rollback_stopped(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        _cleanup_free_ char *e = TAKE_PTR(op->error);
        op_fail(op, -EIO, op->failure, e);
}

static void rollback_released(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        Instance *i = op->i;
        remove_runtime(i);
        instance_forget_vmm(i);
        if (op->kind == OP_CREATE) {
                /* The record goes whatever the release did: a dirty VF is REC-6's. */
                remove_then(op, rollback_removed);
                return;
        }
        /* A start ends Stopped; a claim the release kept is REC-4's. */
        instance_record_clear_hypervisor(&i->rec);
        i->rec.state = INSTANCE_STOPPED;
        (void)set_error(&i->rec, op->error);
        write_then(op, rollback_stopped);
}

/* The operation failed with the VMM provably gone or never started. */
static void rollback_gone(Op *op, InstanceFailure failure, const char *error)
{
        op->failure = failure;
        op_set_error(op, error);
        release_then(op, op->vmm_started, rollback_released);
}

static void failed_written(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        _cleanup_free_ char *e = TAKE_PTR(op->error);
        op_fail(op, -EIO, op->failure, e);
}

/* The VMM may be alive: record and claim stay, in Failed (INST-14, INST-16, VMM-11). */
static void fail_alive(Op *op, InstanceFailure failure, const char *error)
{
        op->failure = failure;
        op_set_error(op, error);
        op->i->rec.state = INSTANCE_FAILED;
        (void)set_error(&op->i->rec, op->error);
        write_then(op, failed_written);
}

/* VMM-14: after a spawn, failures always go through the ladder. */
static void terminated_for_rollback(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                if (strprintf(&e, "%s; %s", op->error, error) < 0)
                        e = NULL;
                fail_alive(op, op->failure, e ? e : error);
                return;
        }
        _cleanup_free_ char *e = TAKE_PTR(op->error);
        rollback_gone(op, op->failure, e);
}

static void fail_after_spawn(Op *op, InstanceFailure failure, const char *error)
{
        op->failure = failure;
        op_set_error(op, error);
        int r = op->i->vmm ? vmm_terminate(op->i->vmm, terminated_for_rollback, op) : -ENOENT;
        if (r == -ENOENT) {
                _cleanup_free_ char *e = TAKE_PTR(op->error);
                rollback_gone(op, failure, e);
        } else if (r < 0)
                fail_alive(op, failure, error);
}

/* ---- create and start: validation and admission (INST-6, 10, 11) --------------------------- */

static InstanceFailure claim_failure_map(ClaimFailure f)
{
        switch (f) {
        case CLAIM_FAILURE_UNKNOWN_PROFILE:
                return INSTANCE_FAILURE_UNKNOWN_PROFILE;
        case CLAIM_FAILURE_INSUFFICIENT_RESOURCES:
                return INSTANCE_FAILURE_INSUFFICIENT_RESOURCES;
        case CLAIM_FAILURE_PLACEMENT_DISABLED:
                return INSTANCE_FAILURE_PLACEMENT_DISABLED;
        default:
                return INSTANCE_FAILURE_INTERNAL;
        }
}

/* INST-10, INST-11: 0 when admitted, else the refusal. */
static int admit(InstanceManager *m, InstanceFailure *ret_failure, char **ret_error)
{
        _cleanup_free_ char *disabled =
            m->cfg.placement_disabled ? m->cfg.placement_disabled(m->cfg.userdata) : NULL;
        if (disabled) {
                refuse(INSTANCE_FAILURE_PLACEMENT_DISABLED, ret_failure, ret_error,
                       "insufficient GPU: vGPU placement is disabled: %s", disabled);
                return -EAGAIN;
        }
        uint64_t total = 0, used = 0, allocatable = 0;
        bool has_gpu = false;
        int r = m->cfg.slot_figures
                    ? m->cfg.slot_figures(m->cfg.userdata, &total, &used, &allocatable, &has_gpu)
                    : -ENODEV;
        if (r < 0 || !has_gpu) {
                refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                       "insufficient GPU: no GPU available on this host");
                return -ENOSPC;
        }
        if (allocatable == 0) {
                refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                       "insufficient GPU: no allocatable vgpu slots available (%" PRIu64
                       " total, %" PRIu64 " in use)",
                       total, used);
                return -ENOSPC;
        }
        if (allocatable <= m->admitted_unreserved) {
                refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                       "insufficient GPU: requested 1 vgpu slot(s), but only %" PRIu64 " available",
                       allocatable > m->admitted_unreserved ? allocatable - m->admitted_unreserved
                                                            : 0);
                return -ENOSPC;
        }
        return 0;
}

void instance_ops_reserved(Instance *i)
{
        Op *op = i->op;
        if (op && op->admitted) {
                op->admitted = false;
                op->m->admitted_unreserved--;
        }
}

typedef struct PathCheck {
        InstanceBoot boot; /* borrowed from the operation's spec */
        char *const *image_dirs;
        InstanceBootFiles files;
} PathCheck;

/* INST-6: the check is the open; the descriptors go on to the spawn. */
static int path_check_run(void *data, char **error)
{
        PathCheck *p = data;
        return instance_boot_files_open(&p->boot, p->image_dirs, &p->files, error);
}

static void path_check_free(void *data)
{
        PathCheck *p = data;
        instance_boot_files_close(&p->files);
        free(p);
}

/* ---- create and start: claim, spawn, readiness (INST-12, 13, 17) --------------------------- */

static void spawn_step(Op *op);

static void claim_done(const ClaimResult *res, void *userdata)
{
        Op *op = userdata;
        instance_ops_reserved(op->i);
        if (res->r < 0) {
                rollback_gone(op, claim_failure_map(res->failure), res->error);
                return;
        }
        spawn_step(op);
}

static void claim_step(Op *op)
{
        Instance *i = op->i;
        if (!i->rec.gpu.profile) {
                spawn_step(op);
                return;
        }
        /* FLEET-6: a Placement allocation names one PF, and a start claims there again too, so
         * that the allocation stays true for the VF the instance holds. */
        int r = claimer_claim(op->m->claimer,
                              &(ClaimRequest){.instance_id = i->rec.id,
                                              .profile = i->rec.gpu.profile,
                                              .gpu = i->rec.placement.gpu},
                              claim_done, op);
        if (r < 0)
                rollback_gone(op, INSTANCE_FAILURE_INTERNAL, strerror(-r));
}

static void creating_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "save instance record: %s", error);
                op->failure = INSTANCE_FAILURE_INTERNAL;
                op_set_error(op, e ? e : error);
                if (op->kind == OP_CREATE) {
                        remove_then(op, rollback_removed);
                        return;
                }
                /*
                 * INST-17: no VMM was started, so the start ends Stopped with its error; that
                 * is written too, or memory would say Stopped while the record keeps the state
                 * and error from before the start.
                 */
                op->i->rec.state = INSTANCE_STOPPED;
                (void)set_error(&op->i->rec, op->error);
                write_then(op, rollback_stopped);
                return;
        }
        claim_step(op);
}

/* Validation passed: admission, then the Creating record (INST-12, INST-17). */
static void admit_step(Op *op)
{
        Instance *i = op->i;
        if (i->rec.gpu.profile) {
                InstanceFailure f;
                _cleanup_free_ char *e = NULL;
                if (admit(op->m, &f, &e) < 0) {
                        if (op->kind == OP_CREATE) {
                                drop_instance(op);
                                op_fail(op, -ENOSPC, f, e);
                        } else
                                op_fail(op, -ENOSPC, f, e);
                        return;
                }
                op->admitted = true;
                op->m->admitted_unreserved++;
        }
        if (op->kind == OP_START)
                (void)set_error(&i->rec, NULL);
        i->rec.state = INSTANCE_CREATING;
        write_then(op, creating_written);
}

static void paths_checked(Op *op, int r, const char *error)
{
        if (r < 0) {
                if (op->kind == OP_CREATE)
                        drop_instance(op);
                op_fail(op, r, INSTANCE_FAILURE_INVALID_REQUEST, error);
                return;
        }
        PathCheck *p = op->job_data;
        instance_boot_files_close(&op->boot_files);
        op->boot_files = p->files;
        p->files = INSTANCE_BOOT_FILES_NONE;
        admit_step(op);
}

static void check_paths_step(Op *op)
{
        PathCheck *p = calloc(1, sizeof *p);
        if (!p) {
                paths_checked(op, -ENOMEM, "out of memory");
                return;
        }
        p->boot = op->i->rec.boot;
        p->image_dirs = op->m->config->image_dirs;
        p->files = INSTANCE_BOOT_FILES_NONE;
        job_then(op, path_check_run, p, path_check_free, paths_checked);
}

typedef struct SpawnData {
        InstanceRecord rec;      /* a copy: the worker reads it while the loop goes on */
        const Config *config;    /* the manager's, as long-lived as it */
        char *runtime_dir;       /* <runtime_dir>/instances */
        char *console_log;       /* <data_dir>/instances/<id>/console.log */
        InstanceBootFiles files; /* the operation's, taken over (INST-6) */
        int instances_dirfd;
        const Root *proc;
        VmmSpawned spawned;
        bool spawned_ok;
} SpawnData;

static void spawn_data_free(void *data)
{
        SpawnData *d = data;
        instance_record_done(&d->rec);
        instance_boot_files_close(&d->files);
        free(d->runtime_dir);
        free(d->console_log);
        if (d->spawned_ok && d->spawned.pidfd >= 0)
                close(d->spawned.pidfd);
        free(d->spawned.identity_error);
        free(d);
}

/*
 * VMM-1 from the record, with the boot files this operation's check opened (INST-6): QEMU gets
 * them by descriptor, so that nothing swapped in since the check can be opened by it.
 */
static int spawn_vmm(SpawnData *d, int instance_dirfd, char **error)
{
        const InstanceRecord *rec = &d->rec;
        const InstanceCommandPaths paths = {.qmp_socket = rec->hypervisor.qmp_socket,
                                            .agent_socket = rec->hypervisor.agent_socket,
                                            .console_log = d->console_log};
        VmmCommand cmd;
        int r = instance_command_build(rec, d->config, &paths, &d->files, &cmd, error);
        if (r < 0)
                return r;
        _cleanup_strv_free_ char **argv = NULL;
        r = vmm_command_argv(&cmd, &argv, error);
        if (r < 0)
                return r;
        int fds[VMM_PASSED_FDS_MAX];
        size_t n_fds = vmm_command_passed_fds(&cmd, fds);
        r = vmm_spawn(&(VmmSpawnRequest){.argv = argv,
                                         .fds = fds,
                                         .n_fds = n_fds,
                                         .log_dirfd = instance_dirfd,
                                         .log = INSTANCE_QEMU_LOG_FILE,
                                         .proc = d->proc},
                      &d->spawned, error);
        if (r < 0)
                return r;
        d->spawned_ok = true;
        return 0;
}

static int spawn_run(void *data, char **error)
{
        SpawnData *d = data;
        const char *id = d->rec.id;
        if (mkdir(d->runtime_dir, 0755) < 0 && errno != EEXIST)
                return error_set(error, -errno, "create %s: %m", d->runtime_dir);
        _cleanup_close_ int rfd = open(d->runtime_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (rfd < 0)
                return error_set(error, -errno, "open %s: %m", d->runtime_dir);
        if (mkdirat(rfd, id, 0700) < 0 && errno != EEXIST)
                return error_set(error, -errno, "create %s/%s: %m", d->runtime_dir, id);
        _cleanup_close_ int ifd = openat(rfd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (ifd < 0)
                return error_set(error, -errno, "open %s/%s: %m", d->runtime_dir, id);
        /* Stale sockets of an earlier VMM would make QEMU's bind fail. */
        (void)unlinkat(ifd, INSTANCE_QMP_SOCKET, 0);
        (void)unlinkat(ifd, INSTANCE_AGENT_SOCKET, 0);
        _cleanup_close_ int dfd =
            openat(d->instances_dirfd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return error_set(error, -errno, "open instance directory %s: %m", id);
        return spawn_vmm(d, dfd, error);
}

static void ready_done(Vmm *v, int r, const char *error, void *userdata);

static void running_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "save instance record: %s", error);
                fail_after_spawn(op, INSTANCE_FAILURE_INTERNAL, e ? e : error);
                return;
        }
        log_line(LOG_LEVEL_INFO, 0, "instance running", "instance_id", op->i->rec.id, "name",
                 op->i->rec.name, NULL);
        op_succeed(op);
}

typedef struct LogLine {
        int dirfd;
        char id[INSTANCE_ID_LEN + 1];
        char *line;
} LogLine;

static int log_line_run(void *data, char **error)
{
        LogLine *l = data;
        _cleanup_close_ int dfd = openat(l->dirfd, l->id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return error_set(error, -errno, "open instance directory %s: %m", l->id);
        return vmm_log_last_line(dfd, INSTANCE_QEMU_LOG_FILE, &l->line, error);
}

static void log_line_free(void *data)
{
        LogLine *l = data;
        free(l->line);
        free(l);
}

static void not_ready_with_line(Op *op, int r, const char *error);

static void ready_done(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                /* VMM-5: QEMU's own last word goes with the error. */
                op_set_error(op, error);
                LogLine *l = calloc(1, sizeof *l);
                if (!l) {
                        fail_after_spawn(op, INSTANCE_FAILURE_INTERNAL, error);
                        return;
                }
                l->dirfd = op->m->cfg.instances_dirfd;
                snprintf(l->id, sizeof l->id, "%s", op->i->rec.id);
                job_then(op, log_line_run, l, log_line_free, not_ready_with_line);
                return;
        }
        if (r == 0 && op->m->config->qemu_accel == CONFIG_QEMU_ACCEL_AUTO)
                log_line(LOG_LEVEL_WARNING, 0, "KVM unavailable; VM runs under TCG", "instance_id",
                         op->i->rec.id, NULL);
        op->i->rec.state = INSTANCE_RUNNING;
        write_then(op, running_written);
}

static void identity_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                /* INST-13: no running VMM may lack a persisted identity. */
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "save VMM identity: %s", error);
                fail_after_spawn(op, INSTANCE_FAILURE_INTERNAL, e ? e : error);
                return;
        }
        r = vmm_wait_ready(op->i->vmm, op->m->config->vmm.boot_timeout,
                           op->m->config->qemu_accel == CONFIG_QEMU_ACCEL_AUTO, ready_done, op);
        if (r < 0)
                fail_after_spawn(op, INSTANCE_FAILURE_INTERNAL, strerror(-r));
}

static void spawned(Op *op, int r, const char *error);

static void sockets_written(Op *op, int r, const char *error)
{
        SpawnData *d = TAKE_PTR(op->spawn);
        if (r < 0) {
                spawn_data_free(d);
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "save instance record: %s", error);
                instance_record_clear_hypervisor(&op->i->rec);
                rollback_gone(op, INSTANCE_FAILURE_INTERNAL, e ? e : error);
                return;
        }
        job_then(op, spawn_run, d, spawn_data_free, spawned);
}

static void spawn_step(Op *op)
{
        Instance *i = op->i;
        InstanceManager *m = op->m;
        _cleanup_free_ char *qmp = instance_runtime_path(i, INSTANCE_QMP_SOCKET);
        _cleanup_free_ char *agent = instance_runtime_path(i, INSTANCE_AGENT_SOCKET);
        SpawnData *d = calloc(1, sizeof *d);
        if (!qmp || !agent || !d) {
                free(d);
                rollback_gone(op, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        d->spawned.pidfd = -1;
        d->files = op->boot_files;
        op->boot_files = INSTANCE_BOOT_FILES_NONE;
        free(i->rec.hypervisor.qmp_socket);
        free(i->rec.hypervisor.agent_socket);
        i->rec.hypervisor.qmp_socket = TAKE_PTR(qmp);
        i->rec.hypervisor.agent_socket = TAKE_PTR(agent);
        if (instance_record_copy(&i->rec, &d->rec) < 0 ||
            strprintf(&d->runtime_dir, "%s", m->runtime_instances) < 0 ||
            strprintf(&d->console_log, "%s/instances/%s/%s", m->config->data_dir, i->rec.id,
                      INSTANCE_CONSOLE_FILE) < 0) {
                spawn_data_free(d);
                instance_record_clear_hypervisor(&i->rec);
                rollback_gone(op, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        d->config = m->config;
        d->instances_dirfd = m->cfg.instances_dirfd;
        d->proc = m->cfg.proc;
        /*
         * The socket paths reach the record before the spawn: a daemon killed between spawn and
         * the pid save leaves a record through which VMM-17/18 find the VMM by its socket.
         */
        op->spawn = d;
        write_then(op, sockets_written);
}

static void spawned(Op *op, int r, const char *error)
{
        Instance *i = op->i;
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "spawn VMM: %s", error);
                instance_record_clear_hypervisor(&i->rec);
                rollback_gone(op, INSTANCE_FAILURE_INTERNAL, e ? e : error);
                return;
        }
        SpawnData *d = op->job_data;
        op->vmm_started = true;
        r = instance_attach_vmm(i, d->spawned.pid, d->spawned.pidfd, true, d->spawned.start_time);
        d->spawned_ok = false; /* the pidfd is taken, whatever the result */
        if (r < 0) {
                /* Killed, but not seen to exit: it may be alive until proven gone. */
                fail_alive(op, INSTANCE_FAILURE_INTERNAL, "watch VMM: out of memory");
                return;
        }
        if (!d->spawned.identified) {
                /* VMM-14: a child without an identity goes through the ladder, by pid. */
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "spawn VMM: %s",
                                d->spawned.identity_error ? d->spawned.identity_error
                                                          : ERROR_OUT_OF_MEMORY);
                fail_after_spawn(op, INSTANCE_FAILURE_INTERNAL, e ? e : "spawn VMM");
                return;
        }
        if (instance_set_identity(i, d->spawned.pid, d->spawned.start_time) < 0) {
                fail_after_spawn(op, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        write_then(op, identity_written);
}

static void not_ready_with_line(Op *op, int r, const char *error)
{
        (void)error;
        LogLine *l = op->job_data;
        _cleanup_free_ char *e = NULL;
        if (r >= 0 && l && l->line)
                (void)strprintf(&e, "%s: %s", op->error, l->line);
        fail_after_spawn(op, INSTANCE_FAILURE_INTERNAL, e ? e : op->error);
}

/* ---- stop (INST-15, INST-16, INST-25) ------------------------------------------------------ */

static void stopped_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "save instance record: %s", error);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, e ? e : error);
                return;
        }
        op_succeed(op);
}

static void stop_released(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        /* A failed release keeps the claim (visible as gpu.device_path) and still answers 200. */
        Instance *i = op->i;
        instance_record_clear_hypervisor(&i->rec);
        i->rec.state = INSTANCE_STOPPED;
        write_then(op, stopped_written);
}

static void vmm_gone_then_release(Op *op, OpStep next)
{
        Instance *i = op->i;
        bool had_vmm = i->vmm != NULL;
        remove_runtime(i);
        instance_forget_vmm(i);
        release_then(op, had_vmm, next);
}

static void stop_vmm_done(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                /* INST-16: the ladder failed; the VMM may be alive. */
                fail_alive(op, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        vmm_gone_then_release(op, stop_released);
}

static bool may_be_alive(const Instance *i)
{
        return (i->vmm && !i->exited) || i->ambiguous;
}

/* The VMM stop of a stop (graceful_timeout 0: the ladder only, INST-25). */
static void stop_vmm_step(Op *op, nsec_t graceful_timeout)
{
        Instance *i = op->i;
        if (i->vmm && !i->exited) {
                int r = vmm_stop(i->vmm, graceful_timeout, stop_vmm_done, op);
                if (r < 0)
                        fail_alive(op, INSTANCE_FAILURE_INTERNAL, strerror(-r));
                return;
        }
        if (i->ambiguous) {
                fail_alive(op, INSTANCE_FAILURE_INTERNAL,
                           "VMM liveness is ambiguous; the VMM may still be running");
                return;
        }
        vmm_gone_then_release(op, stop_released);
}

static void stopping_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                op->i->rec.state = INSTANCE_RUNNING;
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "save instance record: %s", error);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, e ? e : error);
                return;
        }
        stop_vmm_step(op, op->m->config->vmm.stop_timeout);
}

/* ---- delete (INST-18) ---------------------------------------------------------------------- */

static void deleted(Op *op, int r, const char *error)
{
        if (r < 0) {
                /* The .deleted-<id> tree is retried later (REC-10); the instance is gone. */
                log_line(LOG_LEVEL_WARNING, r, "instance removal incomplete", "instance_id",
                         op->i->rec.id, "error", error, NULL);
        }
        log_line(LOG_LEVEL_INFO, 0, "instance deleted", "instance_id", op->i->rec.id, NULL);
        drop_releasing_consumer(op);
        op_succeed(op);
}

static void delete_released(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        /* Removed whatever the release did: a dirty VF is REC-6's. */
        remove_then(op, deleted);
}

static void delete_vmm_done(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                /* May be alive: the record stays Deleting with its claim; a later delete resumes.
                 */
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        vmm_gone_then_release(op, delete_released);
}

static void delete_vmm_step(Op *op)
{
        Instance *i = op->i;
        const Config *c = op->m->config;
        nsec_t cap = instance_has_vfio(i) ? 5 * NSEC_PER_SEC : 2 * NSEC_PER_SEC;
        nsec_t graceful = c->vmm.stop_timeout < cap ? c->vmm.stop_timeout : cap;
        if (i->vmm && !i->exited) {
                int r = vmm_stop(i->vmm, graceful, delete_vmm_done, op);
                if (r < 0)
                        op_fail(op, r, INSTANCE_FAILURE_INTERNAL, strerror(-r));
                return;
        }
        if (i->ambiguous) {
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "instance %s VMM may still be running", i->rec.id);
                op_fail(op, -EBUSY, INSTANCE_FAILURE_INTERNAL, e ? e : "VMM may still be running");
                return;
        }
        vmm_gone_then_release(op, delete_released);
}

static void deleting_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                /* INST-8: the delete was not announced, so it did not happen. */
                op->i->rec.state = op->was;
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "save instance record: %s", error);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, e ? e : error);
                return;
        }
        delete_vmm_step(op);
}

/* ---- unrequested exits (INST-19) ----------------------------------------------------------- */

static void exit_released(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        instance_record_clear_hypervisor(&op->i->rec);
        write_then(op, stopped_written);
}

/*
 * The exit's state is on disk before the release it announces (INST-8); a failed write still
 * releases, since the VMM is gone either way, and the next write carries the state.
 */
static void exit_written(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        vmm_gone_then_release(op, exit_released);
}

void instance_ops_vmm_exited(Instance *i)
{
        if (i->rec.state != INSTANCE_RUNNING) {
                /*
                 * A VMM behind a Stopped or Failed record (INST-21): nothing else to do. One
                 * whose recovery waits for READY=1 is that recovery's (it sees the exit).
                 */
                if (!i->op && i->recovery == RECOVERY_NONE) {
                        remove_runtime(i);
                        instance_forget_vmm(i);
                }
                return;
        }
        Op *op = op_new(i->m, i, OP_EXIT, NULL, NULL);
        if (!op)
                return;
        const VmmExit *e = &i->last_exit;
        _cleanup_free_ char *why = NULL;
        if (e->status_known && e->signal)
                (void)strprintf(&why, "qemu was killed by signal SIG%s", sigabbrev_np(e->signal));
        else if (e->status_known && e->code != 0)
                (void)strprintf(&why, "qemu exited with status %d", e->code);
        i->rec.state = why ? INSTANCE_FAILED : INSTANCE_STOPPED;
        (void)set_error(&i->rec, why);
        log_line(why ? LOG_LEVEL_WARNING : LOG_LEVEL_INFO, 0, "VMM exited", "instance_id",
                 i->rec.id, "state", instance_state_to_string(i->rec.state), "error", why, NULL);
        write_then(op, exit_written);
}

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
                remove_runtime(op->i);
                instance_forget_vmm(op->i);
                instance_record_clear_hypervisor(&op->i->rec);
        }
        fail_alive(op, INSTANCE_FAILURE_INTERNAL, e ? e : op->error);
}

static void recovered_ready(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                op_set_error(op, error);
                r = vmm_terminate(op->i->vmm, recover_terminated, op);
                if (r < 0)
                        fail_alive(op, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        op->i->rec.state = INSTANCE_RUNNING;
        write_then(op, stopped_written);
}

static void terminate_done(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        remove_runtime(op->i);
        instance_forget_vmm(op->i);
        instance_record_clear_hypervisor(&op->i->rec);
        write_then(op, stopped_written);
}

/* A recovery whose VMM has gone meanwhile: the state INST-21 gives a gone VMM. */
static void recovered_gone(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        op_succeed(op);
}

void instance_ops_recover(Instance *i)
{
        Recovery what = i->recovery;
        if (i->op)
                return; /* kept: op_finish() runs it when the operation ends */
        i->recovery = RECOVERY_NONE;
        bool gone = !i->vmm || i->exited;
        if (gone && (what == RECOVERY_READY || what == RECOVERY_TERMINATE)) {
                Op *op = op_new(i->m, i, OP_RECOVER, NULL, NULL);
                if (!op)
                        return;
                remove_runtime(i);
                instance_forget_vmm(i);
                instance_record_clear_hypervisor(&i->rec);
                if (what == RECOVERY_READY) {
                        i->rec.state = INSTANCE_FAILED;
                        (void)set_error(&i->rec, "interrupted by daemon restart");
                }
                write_then(op, recovered_gone);
                return;
        }
        static const OpKind kinds[] = {[RECOVERY_READY] = OP_RECOVER,
                                       [RECOVERY_STOP] = OP_STOP,
                                       [RECOVERY_DELETE] = OP_DELETE,
                                       [RECOVERY_TERMINATE] = OP_TERMINATE};
        Op *op = op_new(i->m, i, kinds[what], NULL, NULL);
        if (!op)
                return;
        int r = 0;
        switch (what) {
        case RECOVERY_READY:
                r = vmm_wait_ready(i->vmm, i->m->config->vmm.boot_timeout, false, recovered_ready,
                                   op);
                if (r < 0) {
                        /* As a readiness that failed: terminated, then Failed. */
                        recovered_ready(i->vmm, r, strerror(-r), op);
                        return;
                }
                break;
        case RECOVERY_STOP:
                stop_vmm_step(op, i->m->config->vmm.stop_timeout);
                return;
        case RECOVERY_DELETE:
                delete_vmm_step(op);
                return;
        case RECOVERY_TERMINATE:
                r = vmm_terminate(i->vmm, terminate_done, op);
                break;
        default:
                break;
        }
        if (r < 0)
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, strerror(-r));
}

/* ---- the entry points ---------------------------------------------------------------------- */

static Instance *find_idle(InstanceManager *m, const char *id, InstanceFailure *ret_failure,
                           char **ret_error)
{
        Instance *i = instance_find(m, id);
        if (!i) {
                refuse(INSTANCE_FAILURE_NOT_FOUND, ret_failure, ret_error, "instance %s not found",
                       id);
                return NULL;
        }
        if (i->op) {
                refuse(INSTANCE_FAILURE_BUSY, ret_failure, ret_error,
                       "instance %s is busy: %s in progress", id, op_names[i->op->kind]);
                return NULL;
        }
        return i;
}

static bool name_taken(const InstanceManager *m, const char *name)
{
        for (size_t k = 0; k < m->n_instances; k++)
                if (streq(m->instances[k]->rec.name, name))
                        return true;
        return false;
}

static bool consumer_taken(const InstanceManager *m, const char *consumer)
{
        for (size_t k = 0; consumer && k < m->n_instances; k++)
                if (streq_ptr(m->instances[k]->rec.placement.consumer, consumer))
                        return true;
        return false;
}

int instance_manager_create(InstanceManager *m, const InstanceSpec *spec, InstanceDoneFunc done,
                            void *userdata, InstanceFailure *ret_failure, char **ret_error)
{
        /*
         * FLEET-6 on a host outside the fleet: nothing here would ever delete the allocation or
         * keep Placement's figures true, so the scheduler is told so plainly. A 409 rather than
         * a 400 because the request is well formed, and a scheduler that moves an allocation on
         * any 409 (FLEET-7) then tries the next host, which is what this refusal calls for.
         */
        if (spec->placement.consumer && !*m->config->placement.url) {
                refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                       "placement.consumer given, but this host is not in a Placement fleet "
                       "(placement.url is not set)");
                return -EOPNOTSUPP;
        }
        if (name_taken(m, spec->name)) {
                refuse(INSTANCE_FAILURE_ALREADY_EXISTS, ret_failure, ret_error,
                       "an instance named %s already exists", spec->name);
                return -EEXIST;
        }
        /* One allocation, one VM: a scheduler's retried POST must not start a second one. */
        if (consumer_taken(m, spec->placement.consumer)) {
                refuse(INSTANCE_FAILURE_ALREADY_EXISTS, ret_failure, ret_error,
                       "an instance with placement.consumer %s already exists",
                       spec->placement.consumer);
                return -EEXIST;
        }
        /* Admission answers at once when it refuses (INST-10, 11); it runs again after INST-6. */
        if (spec->profile && admit(m, ret_failure, ret_error) < 0)
                return -ENOSPC;
        Instance *i = instance_new(m);
        if (!i) {
                refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
                return -ENOMEM;
        }
        InstanceRecord *rec = &i->rec;
        int r = instance_id_generate(rec->id);
        if (r >= 0) {
                rec->name = strdup(spec->name);
                rec->state = INSTANCE_CREATING;
                rec->created_at = clock_now(m->cfg.clock ? m->cfg.clock : &clock_realtime);
                rec->vcpus = spec->vcpus;
                rec->memory_mb = spec->memory_mb;
                r = rec->name ? instance_boot_copy(&spec->boot, &rec->boot) : -ENOMEM;
        }
        if (r >= 0 && spec->profile && !(rec->gpu.profile = strdup(spec->profile)))
                r = -ENOMEM;
        if (r >= 0 && (strdup_nullable(spec->placement.consumer, &rec->placement.consumer) < 0 ||
                       strdup_nullable(spec->placement.gpu, &rec->placement.gpu) < 0))
                r = -ENOMEM;
        if (r >= 0)
                r = instance_insert(m, i);
        if (r < 0) {
                instance_record_done(rec);
                free(i);
                refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "create instance: %s",
                       strerror(-r));
                return r;
        }
        Op *op = op_new(m, i, OP_CREATE, done, userdata);
        if (!op) {
                instance_drop(m, i);
                refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
                return -ENOMEM;
        }
        /*
         * The instance is in the table from here on, so its name is taken at once; until its
         * record is written it is Creating in memory only, and a failure takes it out again.
         */
        check_paths_step(op);
        return 0;
}

static void start_cleared(Op *op, int r, const char *error)
{
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "save instance record: %s", error);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, e ? e : error);
                return;
        }
        check_paths_step(op);
}

static void start_released(Op *op, int r, const char *error)
{
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "instance %s still holds VF %s: %s", op->i->rec.id,
                                op->i->vf[0] ? op->i->vf : op->i->rec.gpu.device_path, error);
                op_fail(op, r, INSTANCE_FAILURE_INVALID_STATE, e ? e : error);
                return;
        }
        instance_record_clear_hypervisor(&op->i->rec);
        write_then(op, start_cleared);
}

int instance_manager_start(InstanceManager *m, const char *id, InstanceDoneFunc done,
                           void *userdata, InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = find_idle(m, id, ret_failure, ret_error);
        if (!i)
                return -EBUSY;
        if (i->rec.state != INSTANCE_STOPPED && i->rec.state != INSTANCE_FAILED) {
                refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error, "instance %s is %s",
                       id, instance_state_to_string(i->rec.state));
                return -EBUSY;
        }
        if (may_be_alive(i)) {
                refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                       "instance %s VMM may still be running; stop it first", id);
                return -EBUSY;
        }
        if (i->rec.gpu.profile && admit(m, ret_failure, ret_error) < 0)
                return -ENOSPC;
        Op *op = op_new(m, i, OP_START, done, userdata);
        if (!op) {
                refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
                return -ENOMEM;
        }
        /* INST-17: a claim left from the last run is released first. */
        release_then(op, true, start_released);
        return 0;
}

int instance_manager_stop(InstanceManager *m, const char *id, InstanceDoneFunc done, void *userdata,
                          InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = find_idle(m, id, ret_failure, ret_error);
        if (!i)
                return -EBUSY;
        switch (i->rec.state) {
        case INSTANCE_STOPPED:
                return 1; /* INST-25: unchanged */
        case INSTANCE_RUNNING:
        case INSTANCE_FAILED:
                break;
        default:
                refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error, "instance %s is %s",
                       id, instance_state_to_string(i->rec.state));
                return -EBUSY;
        }
        Op *op = op_new(m, i, OP_STOP, done, userdata);
        if (!op) {
                refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
                return -ENOMEM;
        }
        if (i->rec.state == INSTANCE_FAILED) {
                /* INST-25: termination and release only. */
                stop_vmm_step(op, 0);
                return 0;
        }
        i->rec.state = INSTANCE_STOPPING;
        write_then(op, stopping_written);
        return 0;
}

int instance_manager_delete(InstanceManager *m, const char *id, InstanceDoneFunc done,
                            void *userdata, InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = find_idle(m, id, ret_failure, ret_error);
        if (!i)
                return -EBUSY;
        Op *op = op_new(m, i, OP_DELETE, done, userdata);
        if (!op) {
                refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
                return -ENOMEM;
        }
        op->was = i->rec.state;
        i->rec.state = INSTANCE_DELETING;
        write_then(op, deleting_written);
        return 0;
}

int instance_manager_refuse(InstanceManager *m, const char *id, const char *operation,
                            InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = instance_find(m, id);
        if (!i)
                refuse(INSTANCE_FAILURE_NOT_FOUND, ret_failure, ret_error, "instance %s not found",
                       id);
        else if (i->rec.gpu.profile)
                refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                       "%s is not supported for instances with vGPU attached (driver limitation)",
                       operation);
        else
                refuse(INSTANCE_FAILURE_NOT_IMPLEMENTED, ret_failure, ret_error,
                       "%s is not implemented", operation);
        return -EOPNOTSUPP;
}

/* ---- reconcile passes (REC-4, REC-5, REC-10) ----------------------------------------------- */

static void stale_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "save instance record: %s", error);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, e ? e : error);
                return;
        }
        log_line(LOG_LEVEL_INFO, 0, "released stale vGPU assignment", "instance_id", op->i->rec.id,
                 NULL);
        op_succeed(op);
}

static void stale_released(Op *op, int r, const char *error)
{
        Instance *i = op->i;
        if (r < 0) {
                /* REC-5: the claim stays for the next pass. */
                op->m->stale_release_failures++;
                log_line(LOG_LEVEL_WARNING, r,
                         "failed to release stale vGPU assignment; retrying on the next "
                         "reconcile pass",
                         "instance_id", i->rec.id, "device_path", i->rec.gpu.device_path, "error",
                         error, NULL);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        instance_record_clear_hypervisor(&i->rec);
        if (i->rec.state == INSTANCE_RUNNING)
                i->rec.state = INSTANCE_STOPPED;
        write_then(op, stale_written);
}

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
        remove_runtime(op->i);
        release_then(op, true, stale_released);
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

int instance_ops_resume_delete(Instance *i, InstanceDoneFunc done, void *userdata)
{
        if (i->op)
                return -EBUSY;
        Op *op = op_new(i->m, i, OP_DELETE, done, userdata);
        if (!op)
                return -ENOMEM;
        i->ambiguous = false; /* the pass proved the VMM gone */
        delete_vmm_step(op);
        return 0;
}
