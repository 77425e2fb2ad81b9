/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Instance files: boot paths (INST-6's confinement is storage_open_source()'s) and the layout
 * under <data_dir>/instances (INST-1, INST-20). Blocking; run on workers.
 *
 * Everything below instances/ is reached by *at() from the instances directory's descriptor and
 * never through a symlink: an id is checked (INST-3) before it becomes a path, directories are
 * opened with O_NOFOLLOW, and deletion never descends through a link.
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>

#include "instance-record-internal.h"
#include "storage/storage.h"

#define TEMP_SUFFIX ".tmp" /* what write_file_atomic_at() appends */

static int invalid_id(const char *id, char **error)
{
        _cleanup_free_ char *shown = escape_text(id, strlen(id), 64, ESCAPE_QUOTE);
        if (!shown)
                return error_set_oom(error);
        return error_set(error, -EINVAL, "invalid instance id %s", shown);
}

/* ---- boot paths (INST-6) ------------------------------------------------------------------- */

void instance_boot_files_close(InstanceBootFiles *f)
{
        closep(&f->kernel);
        closep(&f->initrd);
        closep(&f->disk);
        closep(&f->root);
        closep(&f->seed);
        for (size_t i = 0; i < f->n_volumes; i++)
                closep(&f->volumes[i]);
        *f = INSTANCE_BOOT_FILES_NONE;
}

int instance_boot_files_add_volume(InstanceBootFiles *f, const char *id, int fd)
{
        if (f->n_volumes == INSTANCE_VOLUMES_MAX) {
                closep(&fd);
                return -E2BIG;
        }
        snprintf(f->volume_nodes[f->n_volumes], sizeof f->volume_nodes[0], "vol-%s", id);
        f->volumes[f->n_volumes++] = fd;
        return 0;
}

int instance_boot_files_open(const InstanceBoot *boot, char *const *image_dirs,
                             InstanceBootFiles *ret, char **error)
{
        _cleanup_(instance_boot_files_close) InstanceBootFiles files = INSTANCE_BOOT_FILES_NONE;
        const struct {
                const char *label, *path;
                int *fd;
        } paths[] = {{"boot.kernel", boot->kernel, &files.kernel},
                     {"boot.initrd", boot->initrd, &files.initrd},
                     {"boot.disk", boot->disk, &files.disk}};
        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                if (!paths[i].path)
                        continue;
                int fd = storage_open_source(paths[i].label, paths[i].path, image_dirs, error);
                if (fd < 0)
                        return fd;
                *paths[i].fd = fd;
        }
        *ret = files;
        files = INSTANCE_BOOT_FILES_NONE;
        return 0;
}

/* ---- instance.json (INST-1) ---------------------------------------------------------------- */

static int save_step_failed(char **error, int r, WriteStep step, const char *id)
{
        switch (step) {
        case WRITE_STEP_CREATE:
        case WRITE_STEP_WRITE:
        case WRITE_STEP_SYNC:
        case WRITE_STEP_CLOSE: {
                static const char *const verb[] = {
                    [WRITE_STEP_CREATE] = "create",
                    [WRITE_STEP_WRITE] = "write",
                    [WRITE_STEP_SYNC] = "sync",
                    [WRITE_STEP_CLOSE] = "close",
                };
                return error_set(error, r,
                                 "%s instances/%s/" INSTANCE_RECORD_FILE TEMP_SUFFIX ": %s",
                                 verb[step], id, strerror(-r));
        }
        case WRITE_STEP_RENAME:
                return error_set(error, r,
                                 "rename instances/%s/" INSTANCE_RECORD_FILE TEMP_SUFFIX
                                 " to " INSTANCE_RECORD_FILE ": %s",
                                 id, strerror(-r));
        case WRITE_STEP_SYNC_DIR:
                break;
        }
        return error_set(error, r, "sync directory instances/%s: %s", id, strerror(-r));
}

int instance_record_save_at(int instances_dirfd, const InstanceRecord *r, char **error)
{
        if (!instance_id_is_valid(r->id))
                return error_set(error, -EINVAL,
                                 "invalid record: id must be %d characters of "
                                 "[a-z0-9]",
                                 INSTANCE_ID_LEN);

        _cleanup_free_ char *buf = NULL;
        size_t size;
        int k = instance_record_encode(r, &buf, &size, error);
        if (k < 0)
                return error_prefix(error, k, "save instances/%s/" INSTANCE_RECORD_FILE, r->id);

        bool created = false;
        if (mkdirat(instances_dirfd, r->id, 0700) >= 0) {
                created = true;
                /* The umask must not narrow the mode INST-1 asks for. */
                if (fchmodat(instances_dirfd, r->id, 0700, 0) < 0) {
                        k = negative_errno();
                        (void)unlinkat(instances_dirfd, r->id, AT_REMOVEDIR);
                        return error_set(error, k, "create directory instances/%s: %s", r->id,
                                         strerror(-k));
                }
        } else if (errno != EEXIST) {
                k = negative_errno();
                return error_set(error, k, "create directory instances/%s: %s", r->id,
                                 strerror(-k));
        }

        _cleanup_close_ int dir =
            openat(instances_dirfd, r->id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir < 0) {
                k = negative_errno();
                if (created)
                        (void)unlinkat(instances_dirfd, r->id, AT_REMOVEDIR);
                return error_set(error, k, "open directory instances/%s: %s", r->id, strerror(-k));
        }

        /*
         * The new <id> entry is made durable before anything goes into it. Should that fail, the
         * directory goes again, so that a retry creates it anew and syncs instances/ then.
         */
        if (created) {
                k = fsync_directory_at(instances_dirfd, ".");
                if (k < 0) {
                        (void)unlinkat(instances_dirfd, r->id, AT_REMOVEDIR);
                        return error_set(error, k, "sync directory instances: %s", strerror(-k));
                }
        }

        WriteStep step = WRITE_STEP_CREATE;
        k = write_file_atomic_at(dir, INSTANCE_RECORD_FILE, buf, size, 0600, &step);
        if (k < 0)
                return save_step_failed(error, k, step, r->id);
        return 0;
}

/* INST-2a: a recorded socket path is the derived one, or the record is unreadable. */
static int check_socket_path(const char *id, const char *runtime_instances, const char *field,
                             const char *name, const char *path, char **error)
{
        if (!path)
                return 0;
        _cleanup_free_ char *want = NULL;
        if (strprintf(&want, "%s/%s/%s", runtime_instances, id, name) < 0)
                return error_set_oom(error);
        if (streq(path, want))
                return 0;
        _cleanup_free_ char *shown = escape_text(path, strlen(path), SIZE_MAX, ESCAPE_UTF8);
        if (!shown)
                return error_set_oom(error);
        return error_set(error, -EBADMSG,
                         "instances/%s/" INSTANCE_RECORD_FILE ": hypervisor.%s %s is not %s", id,
                         field, shown, want);
}

int instance_record_load_at(int instances_dirfd, const char *runtime_instances, const char *id,
                            InstanceRecord *ret, char **error)
{
        if (!instance_id_is_valid(id))
                return invalid_id(id, error);

        _cleanup_close_ int dir =
            openat(instances_dirfd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dir < 0) {
                int k = negative_errno();
                return error_set(error, k, "open directory instances/%s: %s", id, strerror(-k));
        }

        /*
         * A temp file outlives only a crash in the middle of a save, whose record or seed never
         * replaced the file. One that cannot be removed now does no harm: the next save
         * truncates it.
         */
        (void)unlinkat(dir, INSTANCE_RECORD_FILE TEMP_SUFFIX, 0);
        (void)unlinkat(dir, INSTANCE_SEED_FILE TEMP_SUFFIX, 0);
        (void)unlinkat(dir, INSTANCE_ROOT_OVERLAY TEMP_SUFFIX, 0);

        _cleanup_free_ char *buf = NULL;
        size_t size;
        int k = read_own_file_at(dir, INSTANCE_RECORD_FILE, INSTANCE_RECORD_MAX, &buf, &size);
        if (k == -EFBIG)
                return error_set(error, -EBADMSG,
                                 "instances/%s/" INSTANCE_RECORD_FILE ": larger than %d bytes", id,
                                 INSTANCE_RECORD_MAX);
        if (k < 0)
                return error_set(error, k, "read instances/%s/" INSTANCE_RECORD_FILE ": %s", id,
                                 file_strerror(k));

        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        k = instance_record_from_json(buf, size, &rec, error);
        if (k < 0)
                return error_prefix(error, k, "instances/%s/" INSTANCE_RECORD_FILE, id);
        if (!streq(rec.id, id))
                return error_set(error, -EBADMSG,
                                 "instances/%s/" INSTANCE_RECORD_FILE
                                 ": id %s is not its directory's",
                                 id, rec.id);
        k = check_socket_path(id, runtime_instances, "qmp_socket", INSTANCE_QMP_SOCKET,
                              rec.hypervisor.qmp_socket, error);
        if (k >= 0)
                k = check_socket_path(id, runtime_instances, "agent_socket", INSTANCE_AGENT_SOCKET,
                                      rec.hypervisor.agent_socket, error);
        if (k >= 0)
                k = check_socket_path(id, runtime_instances, "console_socket",
                                      INSTANCE_CONSOLE_SOCKET, rec.hypervisor.console_socket,
                                      error);
        if (k < 0)
                return k;
        *ret = rec;
        rec = (InstanceRecord){0};
        return 0;
}

/* ---- removal and listing (INST-20) --------------------------------------------------------- */

int instance_tree_delete_at(int dirfd, const char *name, char **error)
{
        return tree_delete_at(dirfd, name, error);
}

int instance_remove_at(int instances_dirfd, const char *id, char **error)
{
        if (!instance_id_is_valid(id))
                return invalid_id(id, error);

        char deleted[sizeof INSTANCE_DELETED_PREFIX + INSTANCE_ID_LEN];
        snprintf(deleted, sizeof deleted, INSTANCE_DELETED_PREFIX "%s", id);

        int k = renameat(instances_dirfd, id, instances_dirfd, deleted) < 0 ? negative_errno() : 0;
        if (k == -EEXIST || k == -ENOTEMPTY) {
                /* A tree of an earlier removal is in the way: it was on its way out anyway. */
                k = instance_tree_delete_at(instances_dirfd, deleted, error);
                if (k < 0)
                        return error_prefix(error, k, "remove instance %s", id);
                k = renameat(instances_dirfd, id, instances_dirfd, deleted) < 0 ? negative_errno()
                                                                                : 0;
        }
        /* -ENOENT: gone already, or renamed by an earlier call whose delete failed. */
        if (k < 0 && k != -ENOENT)
                return error_set(
                    error, k, "rename instances/%s to instances/" INSTANCE_DELETED_PREFIX "%s: %s",
                    id, id, strerror(-k));

        /* The rename is durable before the tree goes: a crash now leaves a .deleted-* tree. */
        k = fsync_directory_at(instances_dirfd, ".");
        if (k < 0)
                return error_set(error, k, "remove instance %s: sync directory instances: %s", id,
                                 strerror(-k));
        k = instance_tree_delete_at(instances_dirfd, deleted, error);
        if (k < 0)
                return error_prefix(error, k, "remove instance %s", id);
        return 0;
}

void instance_dir_list_done(InstanceDirList *l)
{
        strv_free(l->ids);
        strv_free(l->deleted);
        strv_free(l->orphans);
        strv_free(l->unknown);
        *l = (InstanceDirList){0};
}

/* Sorted, and never NULL, so that callers may iterate without a check. */
static int strv_finish(char ***strv)
{
        if (!*strv) {
                *strv = calloc(1, sizeof(char *));
                return *strv ? 0 : -ENOMEM;
        }
        strv_sort(*strv);
        return 0;
}

typedef enum EntryKind {
        ENTRY_ID,
        ENTRY_DELETED,
        ENTRY_ORPHAN,
        ENTRY_UNKNOWN,
        ENTRY_GONE, /* removed while listed */
} EntryKind;

/* Where an entry of instances/ belongs (INST-20); -errno when that cannot be told. */
static int classify(int dirfd, const char *name, EntryKind *ret)
{
        if (startswith(name, INSTANCE_DELETED_PREFIX) && name[strlen(INSTANCE_DELETED_PREFIX)]) {
                *ret = ENTRY_DELETED;
                return 0;
        }
        if (!instance_id_is_valid(name)) {
                *ret = ENTRY_UNKNOWN;
                return 0;
        }

        struct stat st;
        if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno != ENOENT)
                        return negative_errno();
                *ret = ENTRY_GONE;
                return 0;
        }
        /* A link or a file never holds a record of ours. */
        if (!S_ISDIR(st.st_mode)) {
                *ret = ENTRY_UNKNOWN;
                return 0;
        }

        /* Anything named instance.json counts: a record that fails to load is no orphan. */
        char rel[INSTANCE_ID_LEN + sizeof "/" INSTANCE_RECORD_FILE];
        snprintf(rel, sizeof rel, "%.*s/" INSTANCE_RECORD_FILE, INSTANCE_ID_LEN, name);
        if (fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) >= 0)
                *ret = ENTRY_ID;
        else if (errno == ENOENT)
                *ret = ENTRY_ORPHAN;
        else
                return negative_errno();
        return 0;
}

int instance_dir_list_at(int instances_dirfd, InstanceDirList *ret, char **error)
{
        _cleanup_closedir_ DIR *d = NULL;
        int r = opendir_at(instances_dirfd, ".", 0, &d);
        if (r < 0)
                return error_set(error, r, "open directory instances: %s", strerror(-r));

        _cleanup_(instance_dir_list_done) InstanceDirList l = {0};
        struct dirent *de;
        while ((r = readdir_next(d, &de)) > 0) {
                EntryKind kind;
                int k = classify(dirfd(d), de->d_name, &kind);
                if (k < 0) {
                        _cleanup_free_ char *shown =
                            escape_text(de->d_name, strlen(de->d_name), SIZE_MAX, ESCAPE_UTF8);
                        if (!shown)
                                return error_set_oom(error);
                        return error_set(error, k, "stat instances/%s: %s", shown, strerror(-k));
                }
                if (kind == ENTRY_GONE)
                        continue;
                char ***target = kind == ENTRY_ID        ? &l.ids
                                 : kind == ENTRY_DELETED ? &l.deleted
                                 : kind == ENTRY_ORPHAN  ? &l.orphans
                                                         : &l.unknown;
                if (strv_push(target, de->d_name) < 0)
                        return error_set_oom(error);
        }
        if (r < 0)
                return error_set(error, r, "read directory instances: %s", strerror(-r));

        if (strv_finish(&l.ids) < 0 || strv_finish(&l.deleted) < 0 || strv_finish(&l.orphans) < 0 ||
            strv_finish(&l.unknown) < 0)
                return error_set_oom(error);
        *ret = l;
        l = (InstanceDirList){0};
        return 0;
}
