/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Create and start (INST-6, INST-10..14, INST-17) as one list of steps: start adds its
 * prelude, create its entry in the table; from the path check on they are the same boot.
 *
 * The undos are INST-14's rollback. Before a VMM was started, the claim is released and the
 * record removed (create) or written Stopped with the error (start). After a spawn, VMM-14: the
 * ladder first; a VMM it cannot prove gone keeps record and claim in Failed, and nothing more
 * is undone.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "instances/instance-internal.h"

static void done_ok(Op *op)
{
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

/* ---- admission (INST-10, INST-11) ---------------------------------------------------------- */

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
                instance_refuse(INSTANCE_FAILURE_PLACEMENT_DISABLED, ret_failure, ret_error,
                                "insufficient GPU: vGPU placement is disabled: %s", disabled);
                return -EAGAIN;
        }
        uint64_t total = 0, used = 0, allocatable = 0;
        bool has_gpu = false;
        int r = m->cfg.slot_figures
                    ? m->cfg.slot_figures(m->cfg.userdata, &total, &used, &allocatable, &has_gpu)
                    : -ENODEV;
        if (r < 0 || !has_gpu) {
                instance_refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                                "insufficient GPU: no GPU available on this host");
                return -ENOSPC;
        }
        if (allocatable == 0) {
                instance_refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                                "insufficient GPU: no allocatable vgpu slots available (%" PRIu64
                                " total, %" PRIu64 " in use)",
                                total, used);
                return -ENOSPC;
        }
        if (allocatable <= m->admitted_unreserved) {
                instance_refuse(
                    INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
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

/* ---- create's entry, start's prelude (INST-17) --------------------------------------------- */

/* The instance is in the table from the request on, so its name is taken at once. */
static void insert_run(Op *op)
{
        done_ok(op);
}

/* Until its record is written it is Creating in memory only: a failure takes it out again. */
static void insert_undo(Op *op)
{
        if (op->i)
                op_drop_instance(op);
        step_undone(op);
}

static const Step step_insert = {.name = "insert", .run = insert_run, .undo = insert_undo};

static void last_claim_released(Op *op, int r, const char *error)
{
        if (r < 0) {
                step_failed(op, r, INSTANCE_FAILURE_INVALID_STATE, error,
                            "instance %s still holds VF %s", op->i->rec.id,
                            op->i->vf[0] ? op->i->vf : op->i->rec.gpu.device_path);
                return;
        }
        done_ok(op);
}

/* INST-17: a claim left from the last run is released first. */
static void release_last_run(Op *op)
{
        op_release_then(op, true, last_claim_released);
}

static const Step step_release_last = {.name = "release_last_claim", .run = release_last_run};

static void write_cleared_run(Op *op)
{
        instance_record_clear_hypervisor(&op->i->rec);
        op_write_then(op, step_written);
}

static const Step step_clear_last = {.name = "write_cleared", .run = write_cleared_run};

/* ---- the boot files (INST-6) --------------------------------------------------------------- */

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

static void paths_checked(Op *op, int r, const char *error)
{
        if (r < 0) {
                step_done(op, r, INSTANCE_FAILURE_INVALID_REQUEST, error);
                return;
        }
        PathCheck *p = op->job_data;
        instance_boot_files_close(&op->boot_files);
        op->boot_files = p->files;
        p->files = INSTANCE_BOOT_FILES_NONE;
        done_ok(op);
}

static void check_paths_run(Op *op)
{
        PathCheck *p = calloc(1, sizeof *p);
        if (!p) {
                paths_checked(op, -ENOMEM, "out of memory");
                return;
        }
        p->boot = op->i->rec.boot;
        p->image_dirs = op->m->config->image_dirs;
        p->files = INSTANCE_BOOT_FILES_NONE;
        op_job_then(op, path_check_run, p, path_check_free, paths_checked);
}

static const Step step_check_paths = {.name = "check_paths", .run = check_paths_run};

/* Admission again, after INST-6: counted as admitted-but-unreserved until the claim reserves. */
static void admit_run(Op *op)
{
        if (op->i->rec.gpu.profile) {
                InstanceFailure f;
                _cleanup_free_ char *e = NULL;
                if (admit(op->m, &f, &e) < 0) {
                        step_done(op, -ENOSPC, f, e);
                        return;
                }
                op->admitted = true;
                op->m->admitted_unreserved++;
        }
        done_ok(op);
}

static const Step step_admit = {.name = "admit", .run = admit_run};

/* ---- the Creating record (INST-12, INST-17) ------------------------------------------------ */

static void creating_run(Op *op)
{
        if (op->kind == OP_START)
                (void)instance_set_error(&op->i->rec, NULL);
        op->i->rec.state = INSTANCE_CREATING;
        op_write_then(op, step_written);
}

static void creating_removed(Op *op, int r, const char *error)
{
        if (r < 0)
                log_line(LOG_LEVEL_ERR, r, "cannot remove instance after a failed create",
                         "instance_id", op->i->rec.id, "error", error, NULL);
        /*
         * INST-14: a create vgpud had taken on and then failed (500) gives its allocation back.
         * A refusal (no room on the PF, placement disabled, an unknown profile) keeps it, so
         * that the scheduler can move it to another host with the consumer generation it knows
         * (FLEET-7); if it does neither, the orphan audit deletes it after placement.orphan_grace.
         */
        if (op->failure == INSTANCE_FAILURE_INTERNAL)
                op_drop_releasing_consumer(op);
        else
                op_drop_instance(op);
        step_undone(op);
}

static void stopped_written(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        step_undone(op);
}

/*
 * A create's record goes whatever the release did (a dirty VF is REC-6's). A start ends Stopped
 * with its error; that is written too, or memory would say Stopped while the record keeps the
 * state and error from before the start; a claim the release kept is REC-4's.
 */
static void creating_undo(Op *op)
{
        Instance *i = op->i;
        if (op->kind == OP_CREATE) {
                op_remove_then(op, creating_removed);
                return;
        }
        instance_record_clear_hypervisor(&i->rec);
        i->rec.state = INSTANCE_STOPPED;
        (void)instance_set_error(&i->rec, op->error);
        op_write_then(op, stopped_written);
}

/* A write that failed may still have made the directory: its undo runs too. */
static const Step step_write_creating = {
    .name = "write_creating", .run = creating_run, .undo = creating_undo, .undo_failed = true};

/* ---- the claim (INST-12) ------------------------------------------------------------------- */

static void claim_done(const ClaimResult *res, void *userdata)
{
        Op *op = userdata;
        instance_ops_reserved(op->i);
        if (res->r < 0) {
                step_done(op, res->r, claim_failure_map(res->failure), res->error);
                return;
        }
        done_ok(op);
}

static void claim_run(Op *op)
{
        Instance *i = op->i;
        if (!i->rec.gpu.profile) {
                done_ok(op);
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
                step_done(op, r, INSTANCE_FAILURE_INTERNAL, strerror(-r));
}

static void claim_released(Op *op, int r, const char *error)
{
        (void)r;
        (void)error;
        instance_remove_runtime(op->i);
        instance_forget_vmm(op->i);
        step_undone(op);
}

/* The VMM is provably gone or was never started: the VF may be released (INST-14). */
static void claim_undo(Op *op)
{
        op_release_then(op, op->vmm_started, claim_released);
}

/* A claim that failed may have been saved before its configure failed: released too. */
static const Step step_claim = {
    .name = "claim", .run = claim_run, .undo = claim_undo, .undo_failed = true};

/* ---- the spawn (VMM-1..4, INST-13, VMM-14) ------------------------------------------------- */

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

void spawn_data_free(void *data)
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
                                            .console_socket = rec->hypervisor.console_socket,
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
        (void)unlinkat(ifd, INSTANCE_CONSOLE_SOCKET, 0);
        _cleanup_close_ int dfd =
            openat(d->instances_dirfd, id, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd < 0)
                return error_set(error, -errno, "open instance directory %s: %m", id);
        return spawn_vmm(d, dfd, error);
}

static void identity_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                /* INST-13: no running VMM may lack a persisted identity. */
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, error, "save VMM identity");
                return;
        }
        done_ok(op);
}

static void spawned(Op *op, int r, const char *error)
{
        Instance *i = op->i;
        if (r < 0) {
                instance_record_clear_hypervisor(&i->rec);
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, error, "spawn VMM");
                return;
        }
        SpawnData *d = op->job_data;
        op->vmm_started = true;
        r = instance_attach_vmm(i, d->spawned.pid, d->spawned.pidfd, true, d->spawned.start_time);
        d->spawned_ok = false; /* the pidfd is taken, whatever the result */
        if (r < 0) {
                /* Killed, but not seen to exit: it may be alive until proven gone. */
                step_fail_alive(op, INSTANCE_FAILURE_INTERNAL, "watch VMM: out of memory");
                return;
        }
        if (!d->spawned.identified) {
                /* VMM-14: a child without an identity goes through the ladder, by pid. */
                step_failed(op, -ESRCH, INSTANCE_FAILURE_INTERNAL,
                            d->spawned.identity_error ? d->spawned.identity_error
                                                      : ERROR_OUT_OF_MEMORY,
                            "spawn VMM");
                return;
        }
        if (instance_set_identity(i, d->spawned.pid, d->spawned.start_time) < 0) {
                step_done(op, -ENOMEM, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        op_write_then(op, identity_written);
}

static void sockets_written(Op *op, int r, const char *error)
{
        SpawnData *d = TAKE_PTR(op->spawn);
        if (r < 0) {
                spawn_data_free(d);
                instance_record_clear_hypervisor(&op->i->rec);
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, error, "save instance record");
                return;
        }
        op_job_then(op, spawn_run, d, spawn_data_free, spawned);
}

static void spawn_step_run(Op *op)
{
        Instance *i = op->i;
        InstanceManager *m = op->m;
        _cleanup_free_ char *qmp = instance_runtime_path(i, INSTANCE_QMP_SOCKET);
        _cleanup_free_ char *agent = instance_runtime_path(i, INSTANCE_AGENT_SOCKET);
        _cleanup_free_ char *console = instance_runtime_path(i, INSTANCE_CONSOLE_SOCKET);
        SpawnData *d = calloc(1, sizeof *d);
        if (!qmp || !agent || !console || !d) {
                free(d);
                step_done(op, -ENOMEM, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        d->spawned.pidfd = -1;
        d->files = op->boot_files;
        op->boot_files = INSTANCE_BOOT_FILES_NONE;
        free(i->rec.hypervisor.qmp_socket);
        free(i->rec.hypervisor.agent_socket);
        free(i->rec.hypervisor.console_socket);
        i->rec.hypervisor.qmp_socket = TAKE_PTR(qmp);
        i->rec.hypervisor.agent_socket = TAKE_PTR(agent);
        /* CONS-1: every start makes the console a socket, whatever the record had before. */
        i->rec.hypervisor.console_socket = TAKE_PTR(console);
        if (instance_record_copy(&i->rec, &d->rec) < 0 ||
            strprintf(&d->runtime_dir, "%s", m->runtime_instances) < 0 ||
            strprintf(&d->console_log, "%s/instances/%s/%s", m->config->data_dir, i->rec.id,
                      INSTANCE_CONSOLE_FILE) < 0) {
                spawn_data_free(d);
                instance_record_clear_hypervisor(&i->rec);
                step_done(op, -ENOMEM, INSTANCE_FAILURE_INTERNAL, "out of memory");
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
        op_write_then(op, sockets_written);
}

/* VMM-14: after a spawn, a failure always goes through the ladder. */
static void terminated_for_rollback(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                if (strprintf(&e, "%s; %s", op->error, error) < 0)
                        e = NULL;
                step_fail_alive(op, op->failure, e ? e : error);
                return;
        }
        step_undone(op);
}

static void spawn_undo(Op *op)
{
        if (!op->vmm_started) {
                step_undone(op);
                return;
        }
        int r = op->i->vmm ? vmm_terminate(op->i->vmm, terminated_for_rollback, op) : -ENOENT;
        if (r == -ENOENT)
                step_undone(op);
        else if (r < 0)
                step_fail_alive(op, op->failure, op->error);
}

/* A spawn fails before or after its child exists: the undo finds out which. */
static const Step step_spawn = {
    .name = "spawn", .run = spawn_step_run, .undo = spawn_undo, .undo_failed = true};

/* ---- readiness (VMM-5) --------------------------------------------------------------------- */

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

static void not_ready_with_line(Op *op, int r, const char *error)
{
        (void)error;
        LogLine *l = op->job_data;
        _cleanup_free_ char *e = NULL;
        if (r >= 0 && l && l->line)
                (void)strprintf(&e, "%s: %s", op->error, l->line);
        step_done(op, -EIO, INSTANCE_FAILURE_INTERNAL, e ? e : op->error);
}

static void ready_done(Vmm *v, int r, const char *error, void *userdata)
{
        Op *op = userdata;
        (void)v;
        if (r < 0) {
                /* VMM-5: QEMU's own last word goes with the error. */
                op_set_error(op, error);
                LogLine *l = calloc(1, sizeof *l);
                if (!l) {
                        step_done(op, r, INSTANCE_FAILURE_INTERNAL, error);
                        return;
                }
                l->dirfd = op->m->cfg.instances_dirfd;
                snprintf(l->id, sizeof l->id, "%s", op->i->rec.id);
                op_job_then(op, log_line_run, l, log_line_free, not_ready_with_line);
                return;
        }
        if (r == 0 && op->m->config->qemu_accel == CONFIG_QEMU_ACCEL_AUTO)
                log_line(LOG_LEVEL_WARNING, 0, "KVM unavailable; VM runs under TCG", "instance_id",
                         op->i->rec.id, NULL);
        done_ok(op);
}

static void wait_ready_run(Op *op)
{
        int r = vmm_wait_ready(op->i->vmm, op->m->config->vmm.boot_timeout,
                               op->m->config->qemu_accel == CONFIG_QEMU_ACCEL_AUTO, ready_done, op);
        if (r < 0)
                step_done(op, r, INSTANCE_FAILURE_INTERNAL, strerror(-r));
}

static const Step step_wait_ready = {.name = "wait_ready", .run = wait_ready_run};

/* ---- the lists ----------------------------------------------------------------------------- */

static const Step *const create_steps[] = {
    &step_insert,         &step_check_paths,   &step_admit,
    &step_write_creating, &step_claim,         &step_spawn,
    &step_wait_ready,     &step_write_running, NULL,
};

static const Step *const start_steps[] = {
    &step_release_last,   &step_clear_last,
    &step_check_paths,    &step_admit,
    &step_write_creating, &step_claim,
    &step_spawn,          &step_wait_ready,
    &step_write_running,  NULL,
};

/* ---- the entry points ---------------------------------------------------------------------- */

static bool may_be_alive(const Instance *i)
{
        return (i->vmm && !i->exited) || i->ambiguous;
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
                instance_refuse(
                    INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                    "placement.consumer given, but this host is not in a Placement fleet "
                    "(placement.url is not set)");
                return -EOPNOTSUPP;
        }
        if (name_taken(m, spec->name)) {
                instance_refuse(INSTANCE_FAILURE_ALREADY_EXISTS, ret_failure, ret_error,
                                "an instance named %s already exists", spec->name);
                return -EEXIST;
        }
        /* One allocation, one VM: a scheduler's retried POST must not start a second one. */
        if (consumer_taken(m, spec->placement.consumer)) {
                instance_refuse(INSTANCE_FAILURE_ALREADY_EXISTS, ret_failure, ret_error,
                                "an instance with placement.consumer %s already exists",
                                spec->placement.consumer);
                return -EEXIST;
        }
        /* Admission answers at once when it refuses (INST-10, 11); it runs again after INST-6. */
        if (spec->profile && admit(m, ret_failure, ret_error) < 0)
                return -ENOSPC;
        Instance *i = instance_new(m);
        if (!i) {
                instance_refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
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
                instance_refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error,
                                "create instance: %s", strerror(-r));
                return r;
        }
        Op *op = op_begin(m, i, OP_CREATE, done, userdata, ret_failure, ret_error);
        if (!op) {
                instance_drop(m, i);
                return -ENOMEM;
        }
        /*
         * The instance is in the table from here on, so its name is taken at once; until its
         * record is written it is Creating in memory only, and a failure takes it out again.
         */
        op_run(op, create_steps);
        return 0;
}

int instance_manager_start(InstanceManager *m, const char *id, InstanceDoneFunc done,
                           void *userdata, InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = instance_find_idle(m, id, ret_failure, ret_error);
        if (!i)
                return -EBUSY;
        if (i->rec.state != INSTANCE_STOPPED && i->rec.state != INSTANCE_FAILED) {
                instance_refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                                "instance %s is %s", id, instance_state_to_string(i->rec.state));
                return -EBUSY;
        }
        if (may_be_alive(i)) {
                instance_refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                                "instance %s VMM may still be running; stop it first", id);
                return -EBUSY;
        }
        if (i->rec.gpu.profile && admit(m, ret_failure, ret_error) < 0)
                return -ENOSPC;
        Op *op = op_begin(m, i, OP_START, done, userdata, ret_failure, ret_error);
        if (!op)
                return -ENOMEM;
        op_run(op, start_steps);
        return 0;
}
