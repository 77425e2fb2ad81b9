/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Create and start (INST-6, INST-10, INST-11, INST-12, INST-13, INST-14, INST-17) as one list of
 * steps: start adds its prelude, create its entry in the table; from the path check on they are the
 * same boot.
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
#include <sys/vfs.h>
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

/*
 * INST-10's figures from the view /resources shows (MET-4): the host with the Claimer's overlays.
 * 0 with has_gpu false when there is no vGPU host; -ENOMEM.
 */
static int slot_figures(InstanceManager *m, bool disabled, PlacementSlots *ret, bool *ret_has_gpu)
{
        GpuTracker *t = m->cfg.claimer.tracker;
        const GpuHost *h = t ? gpu_tracker_host(t) : NULL;
        /* DISC-7: a discovery error is never "no vGPU host". */
        *ret_has_gpu = (h && h->framework != GPU_FRAMEWORK_NONE) || (t && gpu_tracker_error(t));
        *ret = (PlacementSlots){};
        if (!h)
                return 0;
        PlacementOverlays o;
        claimer_fill_overlays(m->claimer, &o);
        _cleanup_placement_view_ PlacementView *view = NULL;
        int r = placement_view_build(h, &o, &view);
        if (r < 0)
                return r;
        placement_count_slots(&view->snapshot, disabled, ret);
        return 0;
}

/* INST-10, INST-11: 0 when admitted, else the refusal. */
static int admit(InstanceManager *m, InstanceFailure *ret_failure, char **ret_error)
{
        _cleanup_free_ char *disabled = NULL;
        int r = instance_manager_placement_disabled_reason(m, &disabled);
        if (r < 0) {
                instance_refuse(INSTANCE_FAILURE_INTERNAL, ret_failure, ret_error, "out of memory");
                return r;
        }
        if (disabled) {
                instance_refuse(INSTANCE_FAILURE_PLACEMENT_DISABLED, ret_failure, ret_error,
                                "insufficient GPU: vGPU placement is disabled: %s", disabled);
                return -EAGAIN;
        }
        PlacementSlots slots;
        bool has_gpu;
        r = slot_figures(m, false, &slots, &has_gpu);
        if (r < 0 || !has_gpu) {
                instance_refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                                "insufficient GPU: no GPU available on this host");
                return -ENOSPC;
        }
        if (slots.allocatable == 0) {
                instance_refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                                "insufficient GPU: no allocatable vgpu slots available (%" PRIu64
                                " total, %" PRIu64 " in use)",
                                slots.total, slots.used);
                return -ENOSPC;
        }
        if (slots.allocatable <= m->admitted_unreserved) {
                instance_refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                                "insufficient GPU: requested 1 vgpu slot(s), but only %" PRIu64
                                " available",
                                slots.allocatable > m->admitted_unreserved
                                    ? slots.allocatable - m->admitted_unreserved
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

/* ---- the root overlay (DISK-5) ------------------------------------------------------------- */

typedef struct Overlay {
        int instances_dirfd;
        char id[INSTANCE_ID_LEN + 1];
        char *qemu_img, *backing, *target;
        uint64_t size;
        bool keep_existing; /* a start: an overlay that is there is the VM's disk */
        bool made;          /* out: a start found none and made one */
} Overlay;

static void overlay_free(void *data)
{
        Overlay *o = data;
        free(o->qemu_img);
        free(o->backing);
        free(o->target);
        free(o);
}

static int unlink_overlay(int instances_dirfd, const char *id)
{
        _cleanup_close_ int dfd =
            openat(instances_dirfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return errno == ENOENT ? 0 : -errno;
        if (unlinkat(dfd, INSTANCE_ROOT_OVERLAY, 0) < 0 && errno != ENOENT)
                return -errno;
        return 0;
}

/* The overlay reaches the disk whole (storage_overlay_create()) before the claim relies on it. */
static int overlay_run(void *data, char **error)
{
        Overlay *o = data;
        _cleanup_close_ int dfd =
            openat(o->instances_dirfd, o->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;
        if (dfd >= 0 && o->keep_existing &&
            (fstatat(dfd, INSTANCE_ROOT_OVERLAY, &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT))
                return 0; /* there (the spawn opens it as its own file) or not ours to replace */
        o->made = true;
        int r = dfd < 0
                    ? error_set(error, -errno, "open instance directory %s: %m", o->id)
                    : storage_overlay_create(
                          o->qemu_img, o->backing, o->size, dfd, INSTANCE_ROOT_OVERLAY, o->target,
                          mono_clock_now(&mono_clock_system) + QEMU_IMG_CREATE_TIMEOUT, error);
        return r;
}

static void overlay_made(Op *op, int r, const char *error)
{
        if (r < 0) {
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, error, "create root disk");
                return;
        }
        const Overlay *o = op->job_data;
        if (o->keep_existing && o->made)
                log_line(LOG_LEVEL_WARNING, 0, "root disk missing at start; made a new one",
                         "instance_id", op->i->rec.id, "image", op->i->rec.disk.image, NULL);
        done_ok(op);
}

static void overlay_step_run(Op *op)
{
        InstanceRecord *rec = &op->i->rec;
        if (!rec->disk.image) {
                done_ok(op);
                return;
        }
        Overlay *o = calloc(1, sizeof *o);
        if (!o) {
                overlay_made(op, -ENOMEM, "out of memory");
                return;
        }
        o->instances_dirfd = op->m->cfg.instances_dirfd;
        snprintf(o->id, sizeof o->id, "%s", rec->id);
        o->size = rec->disk.size_gb << 30;
        o->keep_existing = op->kind != OP_CREATE;
        int r = op->m->cfg.images
                    ? image_store_disk_path(op->m->cfg.images, rec->disk.image, &o->backing)
                    : -ENOENT;
        if (r == -ENOENT) {
                overlay_free(o);
                step_done(op, r, INSTANCE_FAILURE_INVALID_REQUEST,
                          "image is not ready (deleted or failed meanwhile)");
                return;
        }
        if (r < 0 || strdup_nullable(op->m->config->storage.qemu_img_binary, &o->qemu_img) < 0 ||
            strprintf(&o->target, "%s/instances/%s/" INSTANCE_ROOT_OVERLAY, op->m->config->data_dir,
                      rec->id) < 0) {
                overlay_free(o);
                overlay_made(op, -ENOMEM, "out of memory");
                return;
        }
        op_helper_job_then(op, QEMU_IMG_CREATE_TIMEOUT + 5 * NSEC_PER_SEC, overlay_run, o,
                           overlay_free, overlay_made);
}

typedef struct OverlayRemoval {
        int instances_dirfd;
        char id[INSTANCE_ID_LEN + 1];
} OverlayRemoval;

static int overlay_remove_run(void *data, char **error)
{
        OverlayRemoval *o = data;
        int r = unlink_overlay(o->instances_dirfd, o->id);
        if (r < 0)
                return error_set(error, r, "remove %s/" INSTANCE_ROOT_OVERLAY ": %s", o->id,
                                 strerror(-r));
        return 0;
}

static void overlay_removed(Op *op, int r, const char *error)
{
        if (r < 0)
                log_line(LOG_LEVEL_WARNING, r, "cannot remove root disk after a failed create",
                         "instance_id", op->i->rec.id, "error", error, NULL);
        step_undone(op);
}

/* The record's removal would take the overlay too; the undo does not rely on it. */
static void overlay_undo(Op *op)
{
        if (!op->i->rec.disk.image) {
                step_undone(op);
                return;
        }
        OverlayRemoval *o = calloc(1, sizeof *o);
        if (!o) {
                overlay_removed(op, -ENOMEM, "out of memory");
                return;
        }
        o->instances_dirfd = op->m->cfg.instances_dirfd;
        snprintf(o->id, sizeof o->id, "%s", op->i->rec.id);
        op_job_then(op, overlay_remove_run, o, free, overlay_removed);
}

/* INST-12: after the record, before the claim. */
static const Step step_root_overlay = {
    .name = "root_overlay", .run = overlay_step_run, .undo = overlay_undo, .undo_failed = true};

/*
 * DISK-5: a start keeps the overlay, and makes it only when it is missing: a create that a
 * crash cut short after its record and before its overlay ends Failed (INST-21) without one,
 * and such a VM never wrote a byte, so its first start boots the image as a create would have.
 * No undo: the overlay stays with the record either way.
 */
static const Step step_missing_overlay = {.name = "root_overlay", .run = overlay_step_run};

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

/* ---- the spawn (VMM-1, VMM-2, VMM-3, VMM-4, INST-13, VMM-14) -------------------------------- */

typedef struct SpawnData {
        InstanceRecord rec;      /* a copy: the worker reads it while the loop goes on */
        const Config *config;    /* the manager's, as long-lived as it */
        char *runtime_dir;       /* <runtime_dir>/instances */
        char *console_log;       /* <data_dir>/instances/<id>/console.log */
        InstanceBootFiles files; /* the operation's, taken over (INST-6) */
        InstanceNicFiles nic;    /* the TAP step's, taken over and closed after the spawn */
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
        instance_nic_files_close(&d->nic);
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
        int r = instance_command_build(rec, d->config, &paths, &d->files, &d->nic, &cmd, error);
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

/*
 * DISK-9: cache.direct only where the file system takes O_DIRECT. Some accept the flag at open
 * and then fail some reads: FUSE passes O_DIRECT reads through or not from one read to the next
 * (QEMU then fails on the backing image's refcount table), so it never gets cache.direct; on
 * others the probe reads the first block as QEMU will, aligned.
 */
#define FUSE_SUPER_MAGIC 0x65735546

bool instance_takes_direct_io(int dirfd, const char *name)
{
        _cleanup_close_ int fd =
            openat(dirfd, name, O_RDONLY | O_DIRECT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
        struct statfs sf;
        if (fd < 0 || fstatfs(fd, &sf) < 0 || sf.f_type == FUSE_SUPER_MAGIC)
                return false;
        void *buf = NULL;
        if (posix_memalign(&buf, 4096, 4096) != 0)
                return false;
        bool ok = pread(fd, buf, 4096, 0) > 0;
        free(buf);
        return ok;
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
        if (d->rec.disk.image) {
                /* DISK-5: the overlay by descriptor, like every other disk (DISK-9). */
                closep(&d->files.root);
                d->files.root = open_own_file_at(dfd, INSTANCE_ROOT_OVERLAY, O_RDWR, 0);
                if (d->files.root < 0)
                        return error_set(error, d->files.root,
                                         "open root disk %s/" INSTANCE_ROOT_OVERLAY ": %s", id,
                                         file_strerror(d->files.root));
                d->files.root_direct = instance_takes_direct_io(dfd, INSTANCE_ROOT_OVERLAY);
        }
        /* SEED-2: the seed the seed step wrote, read-only, by descriptor like every drive. */
        if (instance_record_wants_seed(&d->rec)) {
                closep(&d->files.seed);
                d->files.seed = open_own_file_at(dfd, INSTANCE_SEED_FILE, O_RDONLY, 0);
                if (d->files.seed < 0)
                        return error_set(error, d->files.seed,
                                         "open cloud-init seed %s/" INSTANCE_SEED_FILE ": %s", id,
                                         file_strerror(d->files.seed));
        }
        /* DISK-8: each attached volume by descriptor, read-only where the record says so. */
        for (size_t k = 0; k < d->rec.n_volumes; k++) {
                const InstanceVolume *v = &d->rec.volumes[k];
                _cleanup_free_ char *path = NULL;
                if (strprintf(&path, "%s/" VOLUME_DIR_NAME "/%s/" VOLUME_FILE_NAME,
                              d->config->data_dir, v->id) < 0)
                        return error_set_oom(error);
                int fd = open_own_file_at(AT_FDCWD, path, v->readonly ? O_RDONLY : O_RDWR, 0);
                if (fd < 0)
                        return error_set(error, fd, "open volume %s: %s", v->id, file_strerror(fd));
                int r = instance_boot_files_add_volume(&d->files, v->id, fd);
                if (r < 0)
                        return error_set(error, r, "open volume %s: %s", v->id, strerror(-r));
                if (k == 0)
                        d->files.volumes_direct = instance_takes_direct_io(AT_FDCWD, path);
        }
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
        (void)sd_event_now(op->m->event, CLOCK_MONOTONIC, &op->vmm_spawned_usec);
        r = instance_attach_vmm(i, d->spawned.pid, d->spawned.pidfd, true, d->spawned.start_time);
        d->spawned_ok = false; /* the pidfd is taken, whatever the result */
        if (r < 0) {
                /* Killed, but not seen to exit: it may be alive until proven gone. */
                _cleanup_free_ char *msg = NULL;
                (void)error_set(&msg, r, "watch VMM: %s", strerror(-r));
                step_fail_alive(op, INSTANCE_FAILURE_INTERNAL,
                                msg ? msg : "watch VMM: out of memory");
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
        d->nic = op->nic;
        op->nic = INSTANCE_NIC_FILES_NONE;
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
        uint64_t now;
        if (op->vmm_spawned_usec && sd_event_now(op->m->event, CLOCK_MONOTONIC, &now) >= 0)
                op->vmm_ready_usec = now - op->vmm_spawned_usec;
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
    &step_insert,       &step_check_paths,   &step_admit,         &step_write_creating,
    &step_root_overlay, &instance_step_seed, &step_claim,         &instance_step_tap,
    &step_spawn,        &step_wait_ready,    &step_write_running, NULL,
};

static const Step *const start_steps[] = {
    &step_release_last,
    &step_clear_last,
    &step_check_paths,
    &step_admit,
    &step_write_creating,
    &step_missing_overlay,
    &instance_step_seed,
    &step_claim,
    &instance_step_tap,
    &step_spawn,
    &step_wait_ready,
    &step_write_running,
    NULL,
};

_Static_assert(ELEMENTSOF(create_steps) - 1 <= OP_STEPS_MAX &&
                   ELEMENTSOF(start_steps) - 1 <= OP_STEPS_MAX,
               "every step of a create or start is timed");

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

/*
 * DISK-5: a ready image, and a size from its virtual size rounded up to whole GiB to
 * storage.max_disk_gb (the image's size when disk_gb is not given).
 */
static int root_disk_size(InstanceManager *m, const InstanceDisk *disk, uint64_t *ret,
                          InstanceFailure *ret_failure, char **ret_error)
{
        /* DISK-10: an overlay starts empty; the floor is what a create must leave. */
        _cleanup_free_ char *why = NULL;
        if (m->cfg.check_space && m->cfg.check_space(0, &why, m->cfg.userdata) < 0) {
                instance_refuse(INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure, ret_error,
                                "%s", why);
                return -ENOSPC;
        }
        const Image *image = m->cfg.images ? image_store_get(m->cfg.images, disk->image) : NULL;
        if (!image || image->state != IMAGE_STATE_READY) {
                instance_refuse(INSTANCE_FAILURE_INVALID_REQUEST, ret_failure, ret_error,
                                image ? "image %s is not ready (%s)" : "image %s not found",
                                disk->image, image ? image_state_to_string(image->state) : "");
                return -EINVAL;
        }
        uint64_t least = (image->virtual_size + (UINT64_C(1) << 30) - 1) >> 30;
        if (least == 0)
                least = 1;
        uint64_t size = disk->size_gb ? disk->size_gb : least;
        uint64_t most = m->config->storage.max_disk_gb;
        if (size < least || size > most) {
                instance_refuse(INSTANCE_FAILURE_INVALID_REQUEST, ret_failure, ret_error,
                                "disk_gb must be %" PRIu64 "..%" PRIu64
                                " (image %s's virtual size to storage.max_disk_gb)",
                                least, most, disk->image);
                return -EINVAL;
        }
        *ret = size;
        return 0;
}

const Instance *instance_volume_holder(const InstanceManager *m, const char *id,
                                       const Instance *self, bool *ret_readonly)
{
        const Instance *ro = NULL;
        for (size_t k = 0; k < m->n_instances; k++) {
                const Instance *i = m->instances[k];
                for (size_t v = 0; i != self && v < i->rec.n_volumes; v++) {
                        if (!streq(i->rec.volumes[v].id, id))
                                continue;
                        if (!i->rec.volumes[v].readonly) {
                                *ret_readonly = false;
                                return i;
                        }
                        ro = i;
                }
        }
        *ret_readonly = true;
        return ro;
}

/*
 * DISK-8: each volume by id or name, at most one read-write holder or any number of read-only
 * ones, never both (409 invalid_state naming the holder).
 */
static int resolve_volumes(InstanceManager *m, const InstanceSpec *spec, InstanceVolume *ret,
                           InstanceFailure *ret_failure, char **ret_error)
{
        for (size_t k = 0; k < spec->n_volumes; k++) {
                const char *ref = spec->volumes[k].volume;
                const Volume *v = m->cfg.volumes ? volume_store_get(m->cfg.volumes, ref) : NULL;
                if (!v) {
                        instance_refuse(INSTANCE_FAILURE_INVALID_REQUEST, ret_failure, ret_error,
                                        "volumes[%zu]: volume %s not found", k, ref);
                        return -EINVAL;
                }
                for (size_t j = 0; j < k; j++)
                        if (streq(ret[j].id, v->id)) {
                                instance_refuse(INSTANCE_FAILURE_INVALID_REQUEST, ret_failure,
                                                ret_error, "volumes[%zu]: volume %s is given twice",
                                                k, v->id);
                                return -EINVAL;
                        }
                bool held_ro = false;
                const Instance *h = instance_volume_holder(m, v->id, NULL, &held_ro);
                if (h && (!held_ro || !spec->volumes[k].readonly)) {
                        instance_refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                                        "volume %s is attached %s to instance %s", v->id,
                                        held_ro ? "read-only" : "read-write", h->rec.id);
                        return -EBUSY;
                }
                memcpy(ret[k].id, v->id, sizeof ret[k].id);
                ret[k].readonly = spec->volumes[k].readonly;
                ret[k].state = INSTANCE_VOLUME_ATTACHED;
        }
        return 0;
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
        uint64_t disk_gb = 0;
        int rs =
            spec->disk.image ? root_disk_size(m, &spec->disk, &disk_gb, ret_failure, ret_error) : 0;
        if (rs < 0)
                return rs;
        InstanceVolume volumes[INSTANCE_VOLUMES_MAX];
        int k = resolve_volumes(m, spec, volumes, ret_failure, ret_error);
        if (k < 0)
                return k;
        /* Admission answers at once when it refuses (INST-10, INST-11); it runs again after INST-6.
         */
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
                       strdup_nullable(spec->placement.gpu, &rec->placement.gpu) < 0 ||
                       strdup_nullable(spec->disk.image, &rec->disk.image) < 0 ||
                       seed_cloud_init_copy(&spec->cloud_init, &rec->cloud_init) < 0))
                r = -ENOMEM;
        rec->disk.size_gb = disk_gb;
        if (r >= 0 && spec->n_volumes > 0) {
                rec->volumes = calloc(spec->n_volumes, sizeof *rec->volumes);
                if (rec->volumes) {
                        memcpy(rec->volumes, volumes, spec->n_volumes * sizeof *volumes);
                        rec->n_volumes = spec->n_volumes;
                } else
                        r = -ENOMEM;
        }
        if (r >= 0 && instance_network_plan(m, &spec->network, rec, ret_failure, ret_error) < 0) {
                instance_record_done(rec);
                free(i);
                return -EINVAL;
        }
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
