/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Volumes attached to and detached from an instance after its create (DISK-8), as step lists.
 *
 * On a Stopped instance the record is all there is: one write. On a Running one each change is
 * announced in the record first (`attaching`, `detaching`), then made over QMP, then written as
 * done; a crash in between leaves the intent on disk, and instance_volumes_settle() (start-up,
 * each reconcile pass) reads the live VMM's query-block to finish it one way or the other.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "instances/instance-internal.h"
#include "storage/storage.h"

static InstanceVolume *find_volume(Instance *i, const char *id)
{
        for (size_t k = 0; k < i->rec.n_volumes; k++)
                if (streq(i->rec.volumes[k].id, id))
                        return &i->rec.volumes[k];
        return NULL;
}

static int append_volume(Instance *i, const char *id, bool readonly, InstanceVolumeState state)
{
        InstanceVolume *n = reallocarray(i->rec.volumes, i->rec.n_volumes + 1, sizeof *n);
        if (!n)
                return -ENOMEM;
        i->rec.volumes = n;
        InstanceVolume *v = &n[i->rec.n_volumes++];
        *v = (InstanceVolume){.readonly = readonly, .state = state};
        snprintf(v->id, sizeof v->id, "%s", id);
        return 0;
}

static void remove_volume(Instance *i, const char *id)
{
        InstanceVolume *v = find_volume(i, id);
        if (!v)
                return;
        size_t k = (size_t)(v - i->rec.volumes);
        memmove(v, v + 1, (i->rec.n_volumes - k - 1) * sizeof *v);
        i->rec.n_volumes--;
}

static void set_state(Instance *i, const char *id, InstanceVolumeState state)
{
        InstanceVolume *v = find_volume(i, id);
        if (v)
                v->state = state;
}

static void node_name(const char *id, char ret[static sizeof "vol-" + INSTANCE_ID_LEN])
{
        snprintf(ret, sizeof "vol-" + INSTANCE_ID_LEN, "vol-%s", id);
}

static bool vmm_is_live(const Instance *i)
{
        return i->vmm && !i->exited && i->rec.hypervisor.qmp_socket;
}

/* ---- the steps ------------------------------------------------------------------------------ */

/* attach, Stopped: the record is the attachment. */
static void record_added(Op *op, int r, const char *error)
{
        if (r < 0)
                remove_volume(op->i, op->volume);
        step_written(op, r, error);
}

static void add_attached_run(Op *op)
{
        int r = append_volume(op->i, op->volume, op->volume_readonly, INSTANCE_VOLUME_ATTACHED);
        if (r < 0) {
                step_done(op, r, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        op_write_then(op, record_added);
}

static const Step step_add_attached = {.name = "write_attached", .run = add_attached_run};

/* attach, Running: the intent first (INST-8). */
static void add_attaching_run(Op *op)
{
        int r = append_volume(op->i, op->volume, op->volume_readonly, INSTANCE_VOLUME_ATTACHING);
        if (r < 0) {
                step_done(op, r, INSTANCE_FAILURE_INTERNAL, "out of memory");
                return;
        }
        op_write_then(op, record_added);
}

static void intent_removed(Op *op, int r, const char *error)
{
        /* The intent stays on disk: the next settle finds no device and drops it. */
        if (r < 0)
                log_line(LOG_LEVEL_WARNING, r, "volume intent not removed; a reconcile pass will",
                         "instance_id", op->i->rec.id, "volume_id", op->volume, "error", error,
                         NULL);
        step_undone(op);
}

static void add_attaching_undo(Op *op)
{
        if (op->keep_intent) {
                /* What QEMU did is unknown: the settle reads it from query-block, and until
                 * then the intent holds the volume as an attachment would. */
                step_undone(op);
                return;
        }
        remove_volume(op->i, op->volume);
        op_write_then(op, intent_removed);
}

static const Step step_add_attaching = {
    .name = "write_attaching", .run = add_attaching_run, .undo = add_attaching_undo};

typedef struct OpenVolume {
        char *path;
        bool readonly;
        int fd;
        bool direct;
} OpenVolume;

static void open_volume_free(void *data)
{
        OpenVolume *o = data;
        closep(&o->fd);
        free(o->path);
        free(o);
}

/* On the disk pool: the volume's file as a start opens it (instance-create.c's spawn). */
static int open_volume_job(void *data, char **error)
{
        OpenVolume *o = data;
        o->fd = open_own_file_at(AT_FDCWD, o->path, o->readonly ? O_RDONLY : O_RDWR, 0);
        if (o->fd < 0)
                return error_set(error, o->fd, "open %s: %s", o->path, file_strerror(o->fd));
        o->direct = instance_takes_direct_io(AT_FDCWD, o->path);
        return 0;
}

static void volume_opened(Op *op, int r, const char *error)
{
        if (r < 0) {
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, error, "volume %s", op->volume);
                return;
        }
        OpenVolume *o = op->job_data;
        op->volume_fd = TAKE_FD(o->fd);
        op->volume_direct = o->direct;
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void open_volume_run(Op *op)
{
        OpenVolume *o = calloc(1, sizeof *o);
        int r = o ? volume_store_disk_path(op->m->cfg.volumes, op->volume, &o->path) : -ENOMEM;
        if (r < 0) {
                free(o);
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, strerror(-r), "volume %s",
                            op->volume);
                return;
        }
        o->readonly = op->volume_readonly;
        o->fd = -1;
        op_job_then(op, open_volume_job, o, open_volume_free, volume_opened);
}

static const Step step_open_volume = {.name = "open_volume", .run = open_volume_run};

static void hot_attached(int r, const char *error, char **nodes, void *userdata)
{
        Op *op = userdata;
        (void)nodes;
        op->block = NULL;
        closep(&op->volume_fd);
        op->volume_fd = -1;
        if (r < 0) {
                /* QEMU's own refusal was taken back (a device_add's by blockdev-del, -EIO); a
                 * session that failed may have left the device in the guest. */
                op->keep_intent = r != -EREMOTEIO && r != -EIO && r != -ENOSPC;
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, error, "attach volume %s",
                            op->volume);
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void hot_attach_run(Op *op)
{
        Instance *i = op->i;
        char node[sizeof "vol-" + INSTANCE_ID_LEN];
        node_name(op->volume, node);
        const InstanceVolume *v = find_volume(i, op->volume);
        int r = -ESRCH;
        if (v && vmm_is_live(i)) {
                VmmDrive d = instance_volume_drive(v, node, op->volume_fd, op->volume_direct);
                r = vmm_block_attach(op->m->event, i->rec.hypervisor.qmp_socket, &d, hot_attached,
                                     op, &op->block);
        }
        if (r < 0)
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL,
                            r == -ESRCH ? "the VMM is gone" : strerror(-r), "attach volume %s",
                            op->volume);
}

/*
 * Undone only when a later step fails, which none does (write_done's failure leaves the intent
 * for the settle): kept so that a step added after it detaches what it attached.
 */
static const Step step_hot_attach = {.name = "hot_attach", .run = hot_attach_run};

static void attached_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                /* The device is in the guest, the disk still says attaching: the settle's to
                 * finish (it reads query-block); undoing here would drop a device in use. */
                _cleanup_free_ char *e = NULL;
                (void)error_set(&e, r, "save instance record: %s", error);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, e);
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void write_attached_run(Op *op)
{
        set_state(op->i, op->volume, INSTANCE_VOLUME_ATTACHED);
        op_write_then(op, attached_written);
}

static const Step step_write_attached = {.name = "write_attached", .run = write_attached_run};

/* detach, Stopped. */
static void record_removed(Op *op, int r, const char *error)
{
        if (r < 0)
                (void)append_volume(op->i, op->volume, op->volume_readonly,
                                    INSTANCE_VOLUME_ATTACHED);
        step_written(op, r, error);
}

static void remove_attached_run(Op *op)
{
        remove_volume(op->i, op->volume);
        op_write_then(op, record_removed);
}

static const Step step_remove_attached = {.name = "write_detached", .run = remove_attached_run};

/* detach, Running. */
static void detaching_written(Op *op, int r, const char *error)
{
        if (r < 0)
                set_state(op->i, op->volume, INSTANCE_VOLUME_ATTACHED);
        step_written(op, r, error);
}

static void write_detaching_run(Op *op)
{
        set_state(op->i, op->volume, INSTANCE_VOLUME_DETACHING);
        op_write_then(op, detaching_written);
}

static void reattached_written(Op *op, int r, const char *error)
{
        if (r < 0)
                log_line(LOG_LEVEL_WARNING, r,
                         "volume detach not taken back on disk; a reconcile pass settles it",
                         "instance_id", op->i->rec.id, "volume_id", op->volume, "error", error,
                         NULL);
        step_undone(op);
}

static void write_detaching_undo(Op *op)
{
        if (op->keep_intent) {
                /* What QEMU did is unknown: the settle reads it from query-block. */
                step_undone(op);
                return;
        }
        set_state(op->i, op->volume, INSTANCE_VOLUME_ATTACHED);
        op_write_then(op, reattached_written);
}

static const Step step_write_detaching = {
    .name = "write_detaching", .run = write_detaching_run, .undo = write_detaching_undo};

static void hot_detached(int r, const char *error, char **nodes, void *userdata)
{
        Op *op = userdata;
        (void)nodes;
        op->block = NULL;
        if (r == -EBUSY) {
                /* DISK-8: a guest that keeps the device keeps the attachment. */
                step_failed(op, r, INSTANCE_FAILURE_BUSY, error, "volume %s", op->volume);
                return;
        }
        if (r < 0) {
                op->keep_intent = true;
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL, error, "detach volume %s",
                            op->volume);
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void hot_detach_run(Op *op)
{
        Instance *i = op->i;
        char node[sizeof "vol-" + INSTANCE_ID_LEN];
        node_name(op->volume, node);
        int r = -ESRCH;
        if (vmm_is_live(i))
                r = vmm_block_detach(op->m->event, i->rec.hypervisor.qmp_socket, node,
                                     op->m->config->vmm.device_release_timeout, hot_detached, op,
                                     &op->block);
        if (r < 0)
                step_failed(op, r, INSTANCE_FAILURE_INTERNAL,
                            r == -ESRCH ? "the VMM is gone" : strerror(-r), "detach volume %s",
                            op->volume);
}

static const Step step_hot_detach = {.name = "hot_detach", .run = hot_detach_run};

static void detached_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                /* The disk still says detaching; the settle finds no device and drops it. */
                (void)append_volume(op->i, op->volume, op->volume_readonly,
                                    INSTANCE_VOLUME_DETACHING);
                _cleanup_free_ char *e = NULL;
                (void)error_set(&e, r, "save instance record: %s", error);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, e);
                return;
        }
        step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void write_detached_run(Op *op)
{
        remove_volume(op->i, op->volume);
        op_write_then(op, detached_written);
}

static const Step step_write_detached = {.name = "write_detached", .run = write_detached_run};

static const Step *const attach_stopped_steps[] = {&step_add_attached, NULL};
static const Step *const attach_running_steps[] = {&step_add_attaching, &step_open_volume,
                                                   &step_hot_attach, &step_write_attached, NULL};
static const Step *const detach_stopped_steps[] = {&step_remove_attached, NULL};
static const Step *const detach_running_steps[] = {&step_write_detaching, &step_hot_detach,
                                                   &step_write_detached, NULL};

/* ---- the entry points ------------------------------------------------------------------------ */

/* The instance, idle and Running with a live VMM or Stopped; else the refusal. */
static Instance *find_changeable(InstanceManager *m, const char *id, bool *ret_running,
                                 InstanceFailure *ret_failure, char **ret_error)
{
        Instance *i = instance_find_idle(m, id, ret_failure, ret_error);
        if (!i)
                return NULL;
        if (i->rec.state == INSTANCE_STOPPED) {
                *ret_running = false;
                return i;
        }
        if (i->rec.state == INSTANCE_RUNNING && vmm_is_live(i)) {
                *ret_running = true;
                return i;
        }
        instance_refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                        "instance %s is %s; volumes change while it is Running or Stopped", id,
                        instance_state_to_string(i->rec.state));
        return NULL;
}

static const Volume *find_store_volume(InstanceManager *m, const char *ref,
                                       InstanceFailure *ret_failure, char **ret_error)
{
        const Volume *v = m->cfg.volumes ? volume_store_get(m->cfg.volumes, ref) : NULL;
        if (!v)
                instance_refuse(INSTANCE_FAILURE_NOT_FOUND, ret_failure, ret_error,
                                "volume %s not found", ref);
        return v;
}

int instance_manager_attach_volume(InstanceManager *m, const char *id, const char *volume,
                                   bool readonly, InstanceDoneFunc done, void *userdata,
                                   InstanceFailure *ret_failure, char **ret_error)
{
        bool running = false;
        Instance *i = find_changeable(m, id, &running, ret_failure, ret_error);
        if (!i)
                return -EBUSY;
        const Volume *v = find_store_volume(m, volume, ret_failure, ret_error);
        if (!v)
                return -ENOENT;
        const InstanceVolume *mine = find_volume(i, v->id);
        if (mine) {
                instance_refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                                "volume %s is %s to instance %s", v->id,
                                mine->state == INSTANCE_VOLUME_ATTACHED
                                    ? "already attached"
                                    : instance_volume_state_to_string(mine->state),
                                id);
                return -EEXIST;
        }
        if (i->rec.n_volumes >= INSTANCE_VOLUMES_MAX) {
                instance_refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                                "instance %s has %d volumes, the most it can have", id,
                                INSTANCE_VOLUMES_MAX);
                return -E2BIG;
        }
        bool held_ro = false;
        const Instance *h = instance_volume_holder(m, v->id, i, &held_ro);
        if (h && (!held_ro || !readonly)) {
                instance_refuse(INSTANCE_FAILURE_INVALID_STATE, ret_failure, ret_error,
                                "volume %s is attached %s to instance %s", v->id,
                                held_ro ? "read-only" : "read-write", h->rec.id);
                return -EBUSY;
        }
        Op *op = op_begin(m, i, OP_ATTACH, done, userdata, ret_failure, ret_error);
        if (!op)
                return -ENOMEM;
        snprintf(op->volume, sizeof op->volume, "%s", v->id);
        op->volume_readonly = readonly;
        op_run(op, running ? attach_running_steps : attach_stopped_steps);
        return 0;
}

int instance_manager_detach_volume(InstanceManager *m, const char *id, const char *volume,
                                   InstanceDoneFunc done, void *userdata,
                                   InstanceFailure *ret_failure, char **ret_error)
{
        bool running = false;
        Instance *i = find_changeable(m, id, &running, ret_failure, ret_error);
        if (!i)
                return -EBUSY;
        const Volume *v = find_store_volume(m, volume, ret_failure, ret_error);
        if (!v)
                return -ENOENT;
        const InstanceVolume *mine = find_volume(i, v->id);
        if (!mine) {
                instance_refuse(INSTANCE_FAILURE_NOT_FOUND, ret_failure, ret_error,
                                "volume %s is not attached to instance %s", v->id, id);
                return -ENOENT;
        }
        Op *op = op_begin(m, i, OP_DETACH, done, userdata, ret_failure, ret_error);
        if (!op)
                return -ENOMEM;
        snprintf(op->volume, sizeof op->volume, "%s", v->id);
        op->volume_readonly = mine->readonly;
        op_run(op, running ? detach_running_steps : detach_stopped_steps);
        return 0;
}

/* ---- settling an interrupted attach or detach ------------------------------------------------ */

static bool has_intent(const Instance *i)
{
        for (size_t k = 0; k < i->rec.n_volumes; k++)
                if (i->rec.volumes[k].state != INSTANCE_VOLUME_ATTACHED)
                        return true;
        return false;
}

static void settle_next(Op *op);

static void settle_written(Op *op, int r, const char *error)
{
        if (r < 0) {
                _cleanup_free_ char *e = NULL;
                (void)error_set(&e, r, "save instance record: %s", error);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, e);
                return;
        }
        op_succeed(op);
}

static void settle_dropped(int r, const char *error, char **nodes, void *userdata)
{
        Op *op = userdata;
        (void)nodes;
        op->block = NULL;
        if (r < 0) {
                /* The node may still be open in QEMU: the intent stays for the next pass. */
                _cleanup_free_ char *e = NULL;
                (void)error_set(&e, r, "settle volume %s: %s", op->volume, error);
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, e);
                return;
        }
        remove_volume(op->i, op->volume);
        settle_next(op);
}

/* One pending entry at a time; the record is written once all are settled. */
static void settle_next(Op *op)
{
        Instance *i = op->i;
        for (size_t k = 0; k < i->rec.n_volumes; k++) {
                InstanceVolume *v = &i->rec.volumes[k];
                if (v->state == INSTANCE_VOLUME_ATTACHED)
                        continue;
                char node[sizeof "vol-" + INSTANCE_ID_LEN];
                node_name(v->id, node);
                snprintf(op->volume, sizeof op->volume, "%s", v->id);
                /* Closes a node no device holds, whichever step the crash cut short. */
                int r = vmm_is_live(i)
                            ? vmm_block_detach(op->m->event, i->rec.hypervisor.qmp_socket, node,
                                               op->m->config->vmm.device_release_timeout,
                                               settle_dropped, op, &op->block)
                            : -ESRCH;
                if (r < 0)
                        op_fail(op, r, INSTANCE_FAILURE_INTERNAL, "the VMM is gone");
                return;
        }
        op_write_then(op, settle_written);
}

static void settle_queried(int r, const char *error, char **nodes, void *userdata)
{
        Op *op = userdata;
        op->block = NULL;
        if (r < 0) {
                op_fail(op, r, INSTANCE_FAILURE_INTERNAL, error);
                return;
        }
        /* A node a guest device holds is attached, whichever way the step was going: a detach
         * that did not reach device_del's end leaves the guest its disk. */
        Instance *i = op->i;
        for (size_t k = 0; k < i->rec.n_volumes; k++) {
                InstanceVolume *v = &i->rec.volumes[k];
                char node[sizeof "vol-" + INSTANCE_ID_LEN];
                node_name(v->id, node);
                for (char **n = nodes; v->state != INSTANCE_VOLUME_ATTACHED && *n; n++)
                        if (streq(*n, node))
                                v->state = INSTANCE_VOLUME_ATTACHED;
        }
        settle_next(op);
}

static void settle_done(const InstanceOutcome *o, void *userdata)
{
        (void)userdata;
        if (o->r < 0)
                log_line(LOG_LEVEL_WARNING, o->r, "volume attachments not settled", "error",
                         o->error, NULL);
}

void instance_volumes_settle(Instance *i)
{
        if (i->op || i->rec.state != INSTANCE_RUNNING || !vmm_is_live(i) || !has_intent(i))
                return;
        Op *op = op_new(i->m, i, OP_SETTLE, settle_done, NULL);
        if (!op)
                return;
        int r = vmm_block_query(i->m->event, i->rec.hypervisor.qmp_socket, settle_queried, op,
                                &op->block);
        if (r < 0) {
                log_line(LOG_LEVEL_WARNING, r, "volume attachments not settled", "instance_id",
                         i->rec.id, NULL);
                i->op = NULL;
                instance_op_free(op);
        }
}
