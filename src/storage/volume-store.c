/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Volumes (DISK-7): <data_dir>/volumes/<id>/{volume.json, volume.qcow2}, disks that outlive the
 * instances they are attached to. Who holds a volume is never stored here: the instance records
 * say so, and the store asks its owner (count_holders) before a delete.
 *
 * A create runs on the helper pool (qemu-img create, fsync, then volume.json crash-safely, then
 * the directory fsynced); its name is taken in memory from the request on, so two creates of one
 * name cannot both succeed. A failure removes the directory it made.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "base/json-util.h"
#include "storage/storage.h"

#define VOLUME_RECORD_MAX (16 * 1024)

typedef struct VolumeEntry {
        Volume volume;
        VolumeStore *store;
        bool pending; /* being created: its name is taken, it is not listed */
        bool busy;    /* a delete runs */
} VolumeEntry;

struct VolumeStore {
        VolumeStoreConfig cfg;
        int volumes_fd;
        VolumeEntry **entries; /* sorted by id */
        size_t n_entries;
        const Volume **view;
        StorageSpace space; /* data_dir's filesystem, as last sampled (DISK-10) */
};

/* The blocks of the regular files one level below dir (an instance's directory). */
static uint64_t files_bytes(int dir_fd)
{
        _cleanup_closedir_ DIR *d = NULL;
        if (opendir_at(dir_fd, ".", 0, &d) < 0)
                return 0;
        uint64_t sum = 0;
        for (struct dirent *de; readdir_next(d, &de) > 0;) {
                struct stat st;
                if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode))
                        sum += (uint64_t)st.st_blocks * 512;
        }
        return sum;
}

/* DISK-10: <data_dir>/instances, the volumes directory's sibling, summed per instance. */
static uint64_t instances_bytes(int volumes_fd)
{
        _cleanup_closedir_ DIR *d = NULL;
        if (opendir_at(volumes_fd, "../instances", 0, &d) < 0)
                return 0;
        uint64_t sum = 0;
        for (struct dirent *de; readdir_next(d, &de) > 0;) {
                if (!random_id_is_valid(de->d_name))
                        continue; /* INST-20's .deleted- leftovers */
                _cleanup_close_ int ifd =
                    openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (ifd >= 0)
                        sum += files_bytes(ifd);
        }
        return sum;
}

/* fstatvfs() of data_dir's filesystem; blocking, so on a worker but at start-up. */
static StorageSpace space_sample(int fd)
{
        struct statvfs st;
        if (fstatvfs(fd, &st) < 0)
                return (StorageSpace){0};
        return (StorageSpace){.known = true,
                              .free_bytes = (uint64_t)st.f_bavail * st.f_frsize,
                              .total_bytes = (uint64_t)st.f_blocks * st.f_frsize,
                              .instances_disk_bytes = instances_bytes(fd)};
}

const StorageSpace *volume_store_space(VolumeStore *s)
{
        return &s->space;
}

int storage_space_check(const StorageSpace *space, uint64_t min_free_bytes,
                        unsigned min_free_percent, uint64_t needed, char **error)
{
        if (!space->known)
                return 0;
        uint64_t floor =
            min_free_bytes ? min_free_bytes : space->total_bytes / 100 * min_free_percent;
        uint64_t want = floor + needed < floor ? UINT64_MAX : floor + needed;
        if (space->free_bytes >= want)
                return 0;
        return error_set(error, -ENOSPC,
                         "insufficient storage: %" PRIu64 " free, %" PRIu64 " needed",
                         space->free_bytes, want);
}

static VolumeEntry *entry_free(VolumeEntry *e)
{
        if (e) {
                free(e->volume.name);
                free(e);
        }
        return NULL;
}

static const char *entry_key(const void *item)
{
        return ((const VolumeEntry *)item)->volume.id;
}

static VolumeEntry *entry_find(VolumeStore *s, const char *id)
{
        return sorted_get((void *const *)s->entries, s->n_entries, id, entry_key);
}

static int entry_insert(VolumeStore *s, VolumeEntry *e)
{
        int r = sorted_insert((void ***)&s->entries, &s->n_entries, e, entry_key);
        if (r < 0)
                return r;
        e->store = s;
        return 0;
}

static void entry_remove(VolumeStore *s, VolumeEntry *e)
{
        if (!sorted_remove((void **)s->entries, &s->n_entries, e, entry_key))
                return;
        entry_free(e);
}

static VolumeEntry *entry_by_name(VolumeStore *s, const char *name)
{
        for (size_t i = 0; i < s->n_entries; i++)
                if (streq(s->entries[i]->volume.name, name))
                        return s->entries[i];
        return NULL;
}

/* ---- volume.json ---------------------------------------------------------------------------- */

typedef struct RecordKeys {
        json_int_t version, size_gb;
        const char *id, *name, *created_at;
} RecordKeys;

static const JsonField record_fields[] = {
    {"version", JSON_FIELD_INTEGER, true, JSON_AT(RecordKeys, version)},
    {"id", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, id)},
    {"name", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, name), RESOURCE_NAME_MAX},
    {"size_gb", JSON_FIELD_INTEGER, true, JSON_AT(RecordKeys, size_gb)},
    {"created_at", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, created_at)},
    {},
};

int volume_record_parse(const char *text, size_t size, const char *dir, Volume *ret, char **error)
{
        if (size > VOLUME_RECORD_MAX)
                return error_set(error, -EFBIG, "volumes/%s/" VOLUME_RECORD_NAME ": over %d bytes",
                                 dir, VOLUME_RECORD_MAX);
        json_error_t jerr;
        json_auto_t *o = json_loadb(text, size, JSON_REJECT_DUPLICATES, &jerr);
        if (!o || !json_is_object(o))
                return error_set(error, -EINVAL, "volumes/%s/" VOLUME_RECORD_NAME ": %s", dir,
                                 o ? "not an object" : jerr.text);
        RecordKeys k = {.version = 0};
        int r = json_schema_read(o, NULL, record_fields, &k, -EINVAL, error);
        if (r < 0)
                return error_prefix(error, r, "volumes/%s/" VOLUME_RECORD_NAME, dir);
        Volume v = {.size_gb = 0};
        const char *bad = NULL;
        if (k.version != 1)
                bad = "version must be 1";
        else if (!random_id_is_valid(k.id) || !streq(k.id, dir))
                bad = "id must be its directory's name";
        else if (!resource_name_is_valid(k.name))
                bad = "name must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$";
        else if (k.size_gb < 1 || k.size_gb > 65536)
                bad = "size_gb must be 1..65536";
        else if (parse_timestamp(k.created_at, &v.created_at) < 0)
                bad = "created_at is not a timestamp";
        if (bad)
                return error_set(error, -EINVAL, "volumes/%s/" VOLUME_RECORD_NAME ": %s", dir, bad);
        memcpy(v.id, k.id, sizeof v.id);
        v.size_gb = (uint64_t)k.size_gb;
        if (!(v.name = strdup(k.name)))
                return error_set_oom(error);
        *ret = v;
        return 0;
}

static int record_text(const Volume *v, char **ret, size_t *ret_size)
{
        char created[TIMESTAMP_STRLEN];
        json_auto_t *o = json_pack("{s:I, s:s, s:s, s:I, s:s}", "version", (json_int_t)1, "id",
                                   v->id, "name", v->name, "size_gb", (json_int_t)v->size_gb,
                                   "created_at", format_timestamp(v->created_at, created));
        if (!o)
                return -ENOMEM;
        return json_dump_file_text(o, JSON_PRESERVE_ORDER, ret, ret_size);
}

/* ---- the store ---------------------------------------------------------------------------- */

/* One entry of the volumes directory at start-up: loaded, removed (a deletion a crash cut
 * short) or left alone with a log line. Only -ENOMEM stops the load. */
static int store_load_one(VolumeStore *s, const char *name)
{
        _cleanup_free_ char *e = NULL;
        if (startswith(name, VOLUME_DELETED_PREFIX)) {
                if (tree_delete_at(s->volumes_fd, name, &e) < 0)
                        log_warning("volume store: %s", e);
                return 0;
        }
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        _cleanup_close_ int fd =
            random_id_is_valid(name)
                ? openat(s->volumes_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                : -1;
        int r = fd < 0 ? -ENOENT
                       : read_own_file_at(fd, VOLUME_RECORD_NAME, VOLUME_RECORD_MAX, &text, &size);
        VolumeEntry *entry = calloc(1, sizeof *entry);
        if (!entry)
                return -ENOMEM;
        if (r >= 0)
                r = volume_record_parse(text, size, name, &entry->volume, &e);
        else
                (void)error_set(&e, r, "volumes/%s: not a volume: %s", name, file_strerror(r));
        if (r >= 0)
                r = entry_insert(s, entry);
        if (r < 0) {
                entry_free(entry);
                if (r == -ENOMEM)
                        return r;
                log_error("volume store: %s; left alone", e);
        }
        return 0;
}

static int store_load(VolumeStore *s, char **error)
{
        _cleanup_closedir_ DIR *d = NULL;
        int r = opendir_at(s->volumes_fd, ".", 0, &d);
        struct dirent *de;
        while (r >= 0 && (r = readdir_next(d, &de)) > 0)
                if (store_load_one(s, de->d_name) < 0)
                        return error_set_oom(error);
        if (r < 0)
                return error_set(error, r, "read directory volumes: %s", strerror(-r));
        return 0;
}

int volume_store_new(const VolumeStoreConfig *config, VolumeStore **ret, char **error)
{
        _cleanup_(volume_store_freep) VolumeStore *s = calloc(1, sizeof *s);
        if (!s)
                return error_set_oom(error);
        s->cfg = *config;
        s->volumes_fd = -1;
        if (mkdirat(config->data_dir_fd, VOLUME_DIR_NAME, 0700) < 0 && errno != EEXIST)
                return error_set(error, negative_errno(), "create %s/" VOLUME_DIR_NAME ": %s",
                                 config->data_dir, strerror(errno));
        s->volumes_fd = openat(config->data_dir_fd, VOLUME_DIR_NAME,
                               O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (s->volumes_fd < 0)
                return error_set(error, negative_errno(), "open %s/" VOLUME_DIR_NAME ": %s",
                                 config->data_dir, strerror(errno));
        int r = store_load(s, error);
        if (r < 0)
                return r;
        s->space = space_sample(s->volumes_fd);
        *ret = TAKE_PTR(s);
        return 0;
}

VolumeStore *volume_store_free(VolumeStore *s)
{
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n_entries; i++)
                entry_free(s->entries[i]);
        free(s->entries);
        free(s->view);
        closep(&s->volumes_fd);
        free(s);
        return NULL;
}

size_t volume_store_list(VolumeStore *s, const Volume *const **ret)
{
        const Volume **view = reallocarray(s->view, s->n_entries + 1, sizeof *view);
        if (!view) {
                *ret = NULL;
                return 0;
        }
        s->view = view;
        size_t n = 0;
        for (size_t i = 0; i < s->n_entries; i++)
                if (!s->entries[i]->pending)
                        view[n++] = &s->entries[i]->volume;
        *ret = view;
        return n;
}

const Volume *volume_store_get(VolumeStore *s, const char *id_or_name)
{
        VolumeEntry *e = random_id_is_valid(id_or_name) ? entry_find(s, id_or_name) : NULL;
        if (!e)
                e = entry_by_name(s, id_or_name);
        return e && !e->pending ? &e->volume : NULL;
}

int volume_store_disk_path(VolumeStore *s, const char *id, char **ret)
{
        VolumeEntry *e = entry_find(s, id);
        if (!e || e->pending)
                return -ENOENT;
        return strprintf(ret, "%s/" VOLUME_DIR_NAME "/%s/" VOLUME_FILE_NAME, s->cfg.data_dir, id) <
                       0
                   ? -ENOMEM
                   : 0;
}

/* ---- create ------------------------------------------------------------------------------- */

typedef struct CreateJob {
        int volumes_fd;
        Volume volume; /* a copy */
        char *qemu_img, *target;
        VolumeDoneFunc done;
        void *userdata;
} CreateJob;

static void create_job_free(void *data)
{
        CreateJob *j = data;
        if (!j)
                return;
        closep(&j->volumes_fd);
        free(j->volume.name);
        free(j->qemu_img);
        free(j->target);
        free(j);
}

static int create_files(CreateJob *j, char **error)
{
        const char *id = j->volume.id;
        if (mkdirat(j->volumes_fd, id, 0700) < 0)
                return error_set(error, negative_errno(), "create volumes/%s: %s", id,
                                 strerror(errno));
        int r =
            qemu_img_create(j->qemu_img, j->target, NULL, j->volume.size_gb << 30,
                            mono_clock_now(&mono_clock_system) + QEMU_IMG_CREATE_TIMEOUT, error);
        if (r < 0)
                return r;
        _cleanup_close_ int dfd =
            openat(j->volumes_fd, id, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dfd < 0)
                return error_set(error, negative_errno(), "open volumes/%s: %s", id,
                                 strerror(errno));
        _cleanup_close_ int fd = open_own_file_at(dfd, VOLUME_FILE_NAME, O_RDONLY, 0);
        if (fd < 0)
                return error_set(error, fd, "open volumes/%s/" VOLUME_FILE_NAME ": %s", id,
                                 file_strerror(fd));
        if (fsync(fd) < 0)
                return error_set(error, negative_errno(),
                                 "sync volumes/%s/" VOLUME_FILE_NAME ": %s", id, strerror(errno));
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        if (record_text(&j->volume, &text, &size) < 0)
                return error_set_oom(error);
        r = write_file_atomic_at(dfd, VOLUME_RECORD_NAME, text, size, 0600, NULL);
        if (r < 0)
                return error_set(error, r, "write volumes/%s/" VOLUME_RECORD_NAME ": %s", id,
                                 strerror(-r));
        r = fsync_directory_at(j->volumes_fd, ".");
        if (r < 0)
                return error_set(error, r, "sync directory volumes: %s", strerror(-r));
        return 0;
}

static int create_run(void *data, char **error)
{
        CreateJob *j = data;
        int r = create_files(j, error);
        if (r < 0) {
                /* Nothing half-made stays: no volume without its record, no record alone. */
                _cleanup_free_ char *ignored = NULL;
                (void)tree_delete_at(j->volumes_fd, j->volume.id, &ignored);
        }
        return r;
}

static void create_ended(int r, void *data, const char *error, void *userdata)
{
        VolumeEntry *e = userdata;
        CreateJob *j = data;
        VolumeStore *s = e->store;
        if (r < 0) {
                /* An abandoned job (j NULL) cannot be answered: its caller learns of it never;
                 * the helper pool's deadline is far beyond qemu-img's own, so it does not occur. */
                if (j && j->done)
                        j->done(r, STORAGE_FAILURE_INTERNAL, error, NULL, j->userdata);
                entry_remove(s, e);
                return;
        }
        e->pending = false;
        log_info("volume %s (%s) created: %" PRIu64 " GiB", e->volume.id, e->volume.name,
                 e->volume.size_gb);
        if (j && j->done)
                j->done(0, STORAGE_FAILURE_NONE, NULL, &e->volume, j->userdata);
}

static int refuse(StorageFailure f, StorageFailure *ret_failure, char **ret_error, int r,
                  const char *fmt, ...) _printf_(5, 6);
static int refuse(StorageFailure f, StorageFailure *ret_failure, char **ret_error, int r,
                  const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        (void)error_setv(ret_error, r, fmt, ap);
        va_end(ap);
        *ret_failure = f;
        return r;
}

int volume_store_create(VolumeStore *s, const char *name, uint64_t size_gb, uint64_t max_gb,
                        VolumeDoneFunc done, void *userdata, StorageFailure *ret_failure,
                        char **ret_error)
{
        if (!resource_name_is_valid(name))
                return refuse(STORAGE_FAILURE_INVALID_REQUEST, ret_failure, ret_error, -EINVAL,
                              "name must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
        if (size_gb < 1 || size_gb > max_gb)
                return refuse(STORAGE_FAILURE_INVALID_REQUEST, ret_failure, ret_error, -EINVAL,
                              "size_gb must be 1..%" PRIu64 " (storage.max_disk_gb)", max_gb);
        if (entry_by_name(s, name))
                return refuse(STORAGE_FAILURE_ALREADY_EXISTS, ret_failure, ret_error, -EEXIST,
                              "a volume named %s already exists", name);
        if (s->cfg.check_space) {
                _cleanup_free_ char *why = NULL;
                int k = s->cfg.check_space(0, &why, s->cfg.userdata);
                if (k < 0)
                        return refuse(STORAGE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure,
                                      ret_error, k, "%s", why);
        }

        VolumeEntry *e = calloc(1, sizeof *e);
        CreateJob *j = calloc(1, sizeof *j);
        int r = e && j ? random_id_generate(e->volume.id) : -ENOMEM;
        if (r >= 0 && !(e->volume.name = strdup(name)))
                r = -ENOMEM;
        if (r >= 0) {
                e->volume.size_gb = size_gb;
                e->volume.created_at = clock_now(&clock_realtime);
                e->pending = true;
                j->volume = e->volume;
                j->volume.name = NULL;
                j->volumes_fd = fcntl(s->volumes_fd, F_DUPFD_CLOEXEC, 3);
                j->done = done;
                j->userdata = userdata;
                if (j->volumes_fd < 0 || !(j->volume.name = strdup(name)) ||
                    strdup_nullable(s->cfg.qemu_img, &j->qemu_img) < 0 ||
                    strprintf(&j->target, "%s/" VOLUME_DIR_NAME "/%s/" VOLUME_FILE_NAME,
                              s->cfg.data_dir, e->volume.id) < 0)
                        r = -ENOMEM;
        }
        if (r >= 0)
                r = entry_insert(s, e);
        if (r < 0) {
                create_job_free(j);
                entry_free(e);
                return refuse(STORAGE_FAILURE_INTERNAL, ret_failure, ret_error, r,
                              "create volume %s: %s", name, strerror(-r));
        }
        _cleanup_free_ char *error = NULL;
        WorkerJob job = {.key = e->volume.id,
                         .timeout = QEMU_IMG_CREATE_TIMEOUT + 60 * NSEC_PER_SEC,
                         .run = create_run,
                         .done = create_ended,
                         .data = j,
                         .free_data = create_job_free,
                         .userdata = e};
        r = worker_pool_submit(s->cfg.helper_pool, &job, &error);
        if (r < 0) {
                create_job_free(j);
                entry_remove(s, e);
                return refuse(STORAGE_FAILURE_INTERNAL, ret_failure, ret_error, r,
                              "create volume %s: %s", name, error);
        }
        return 0;
}

/* ---- delete (DISK-7) ---------------------------------------------------------------------- */

typedef struct DeleteJob {
        int volumes_fd;
        char id[RANDOM_ID_LEN + 1];
        VolumeDoneFunc done;
        void *userdata;
} DeleteJob;

static void delete_job_free(void *data)
{
        DeleteJob *j = data;
        if (j) {
                closep(&j->volumes_fd);
                free(j);
        }
}

static int delete_run(void *data, char **error)
{
        DeleteJob *j = data;
        char deleted[sizeof VOLUME_DELETED_PREFIX + RANDOM_ID_LEN];
        snprintf(deleted, sizeof deleted, VOLUME_DELETED_PREFIX "%s", j->id);
        int r = tree_delete_at(j->volumes_fd, deleted, error);
        if (r < 0)
                return r;
        if (renameat(j->volumes_fd, j->id, j->volumes_fd, deleted) < 0 && errno != ENOENT)
                return error_set(error, negative_errno(), "rename volumes/%s to volumes/%s: %s",
                                 j->id, deleted, strerror(errno));
        r = fsync_directory_at(j->volumes_fd, ".");
        if (r < 0)
                return error_set(error, r, "sync directory volumes: %s", strerror(-r));
        return tree_delete_at(j->volumes_fd, deleted, error);
}

static void delete_ended(int r, void *data, const char *error, void *userdata)
{
        VolumeEntry *e = userdata;
        DeleteJob *j = data; /* the disk pool sets no deadline: never abandoned */
        e->busy = false;
        if (r >= 0) {
                log_info("volume %s deleted", e->volume.id);
                entry_remove(e->store, e);
        }
        if (j && j->done)
                j->done(r, r < 0 ? STORAGE_FAILURE_INTERNAL : STORAGE_FAILURE_NONE, error, NULL,
                        j->userdata);
}

int volume_store_delete(VolumeStore *s, const char *id, VolumeDoneFunc done, void *userdata,
                        StorageFailure *ret_failure, char **ret_error)
{
        VolumeEntry *e = random_id_is_valid(id) ? entry_find(s, id) : NULL;
        if (!e || e->pending)
                return refuse(STORAGE_FAILURE_NOT_FOUND, ret_failure, ret_error, -ENOENT,
                              "volume %s not found", id);
        if (e->busy)
                return refuse(STORAGE_FAILURE_BUSY, ret_failure, ret_error, -EBUSY,
                              "volume %s is being deleted", id);
        _cleanup_free_ char *holder = NULL;
        if (s->cfg.holder && s->cfg.holder(id, &holder, s->cfg.userdata) > 0)
                return refuse(STORAGE_FAILURE_INVALID_STATE, ret_failure, ret_error, -EBUSY,
                              "volume %s is attached to instance %s", id, holder);
        DeleteJob *j = calloc(1, sizeof *j);
        if (!j || (j->volumes_fd = fcntl(s->volumes_fd, F_DUPFD_CLOEXEC, 3)) < 0) {
                free(j);
                return refuse(STORAGE_FAILURE_INTERNAL, ret_failure, ret_error, -ENOMEM,
                              ERROR_OUT_OF_MEMORY);
        }
        memcpy(j->id, e->volume.id, sizeof j->id);
        j->done = done;
        j->userdata = userdata;
        _cleanup_free_ char *error = NULL;
        WorkerJob job = {.key = e->volume.id,
                         .run = delete_run,
                         .done = delete_ended,
                         .data = j,
                         .free_data = delete_job_free,
                         .userdata = e};
        int r = worker_pool_submit(s->cfg.disk_pool, &job, &error);
        if (r < 0) {
                delete_job_free(j);
                return refuse(STORAGE_FAILURE_INTERNAL, ret_failure, ret_error, r, "volume %s: %s",
                              id, error);
        }
        e->busy = true;
        return 0;
}

/* ---- the reconciler's sweep (DISK-11) ----------------------------------------------------- */

typedef struct SweepJob {
        VolumeStore *store;
        StorageSpace space;
        int volumes_fd;
        char **known; /* ids in memory, pending creates included */
        Timestamp now;
        VolumeSweepResult result;
        VolumeSweepFunc done;
        void *userdata;
} SweepJob;

static void sweep_job_free(void *data)
{
        SweepJob *j = data;
        if (!j)
                return;
        closep(&j->volumes_fd);
        strv_free(j->known);
        strv_free(j->result.failures);
        free(j);
}

static bool is_known(char **known, const char *name)
{
        for (char **k = known; k && *k; k++)
                if (streq(*k, name))
                        return true;
        return false;
}

/* A directory that a create left before its volume.json, old enough not to be one in flight. */
static int sweep_one(SweepJob *j, const char *name, char **error)
{
        struct stat st;
        if (fstatat(j->volumes_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0
                                       : error_set(error, negative_errno(), "stat volumes/%s: %s",
                                                   name, strerror(errno));
        if (!startswith(name, VOLUME_DELETED_PREFIX)) {
                if (!S_ISDIR(st.st_mode) || !random_id_is_valid(name) || is_known(j->known, name))
                        return 0;
                if (j->now.sec - st.st_mtim.tv_sec < VOLUME_ORPHAN_MIN_AGE)
                        return 0;
                /* A volume.json that does not load is the operator's to look at, not ours. */
                _cleanup_free_ char *record = NULL;
                if (strprintf(&record, "%s/" VOLUME_RECORD_NAME, name) < 0)
                        return error_set_oom(error);
                if (faccessat(j->volumes_fd, record, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
                        return 0;
        }
        int r = tree_delete_at(j->volumes_fd, name, error);
        if (r < 0)
                return r;
        j->result.removed++;
        return 0;
}

static int sweep_run(void *data, char **error)
{
        SweepJob *j = data;
        j->space = space_sample(j->volumes_fd);
        _cleanup_closedir_ DIR *d = NULL;
        int r = opendir_at(j->volumes_fd, ".", 0, &d);
        struct dirent *de;
        while (r >= 0 && (r = readdir_next(d, &de)) > 0) {
                _cleanup_free_ char *e = NULL;
                if (sweep_one(j, de->d_name, &e) < 0 && strv_push(&j->result.failures, e) < 0)
                        return error_set_oom(error);
        }
        if (r < 0)
                return error_set(error, r, "read directory volumes: %s", strerror(-r));
        return 0;
}

static void sweep_ended(int r, void *data, const char *error, void *userdata)
{
        SweepJob *j = data;
        if (!j)
                return;
        if (r < 0 && strv_push(&j->result.failures, error) < 0)
                log_error("volume sweep: out of memory");
        if (j->space.known)
                j->store->space = j->space;
        j->done(&j->result, j->userdata);
}

int volume_store_sweep(VolumeStore *s, Timestamp now, VolumeSweepFunc done, void *userdata)
{
        SweepJob *j = calloc(1, sizeof *j);
        if (!j)
                return -ENOMEM;
        j->store = s;
        j->now = now;
        j->done = done;
        j->userdata = userdata;
        j->volumes_fd = fcntl(s->volumes_fd, F_DUPFD_CLOEXEC, 3);
        int r = j->volumes_fd < 0 ? -errno : 0;
        for (size_t i = 0; r >= 0 && i < s->n_entries; i++)
                r = strv_push(&j->known, s->entries[i]->volume.id);
        if (r < 0) {
                sweep_job_free(j);
                return r;
        }
        WorkerJob job = {.key = "volumes",
                         .run = sweep_run,
                         .done = sweep_ended,
                         .data = j,
                         .free_data = sweep_job_free};
        r = worker_pool_submit(s->cfg.disk_pool, &job, NULL);
        if (r < 0)
                sweep_job_free(j);
        return r;
}
