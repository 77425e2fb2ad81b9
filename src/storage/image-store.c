/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The image store (DISK-1..DISK-4, REL-12): <data_dir>/images/<name>/{image.json, disk.qcow2}.
 *
 * The loop owns the entries. An import is three jobs: image.json `importing` on the disk pool
 * (then the 202), the import itself on the helper pool (open, probe, info, convert with the
 * digest read alongside, fsync, rename), and image.json `ready` or `failed` on the disk pool;
 * memory changes only once the record that says so is on disk. A failed import leaves no
 * disk.qcow2: qemu-img writes disk.qcow2.tmp, which is removed on every failure.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json-util.h"
#include "storage/storage.h"

#define IMAGE_RECORD_MAX (64 * 1024)
#define IMAGE_TMP_NAME IMAGE_FILE_NAME ".tmp"
#define IMAGE_ERROR_MAX 1024
#define HASH_CHUNK (1024 * 1024)

static const char *const state_names[_IMAGE_STATE_MAX] = {
    [IMAGE_STATE_IMPORTING] = "importing",
    [IMAGE_STATE_READY] = "ready",
    [IMAGE_STATE_FAILED] = "failed",
};

const char *image_state_to_string(ImageState s)
{
        return s < _IMAGE_STATE_MAX ? state_names[s] : NULL;
}

static int image_state_from_string(const char *s, ImageState *ret)
{
        for (ImageState i = 0; i < _IMAGE_STATE_MAX; i++)
                if (streq(s, state_names[i])) {
                        *ret = i;
                        return 0;
                }
        return -EINVAL;
}

/* ---- entries -------------------------------------------------------------------------------- */

/* The import's progress, written by the helper thread and read by the loop. */
typedef struct ImportProgress {
        atomic_uint refs;
        atomic_uint permille;
} ImportProgress;

static ImportProgress *progress_unref(ImportProgress *p)
{
        if (p && atomic_fetch_sub(&p->refs, 1) == 1)
                free(p);
        return NULL;
}

typedef struct ImageEntry {
        Image image;
        ImageStore *store;
        ImportProgress *progress; /* while importing */
        bool busy;                /* a job of this image is in flight */
} ImageEntry;

struct ImageStore {
        ImageStoreConfig cfg;
        int images_fd;
        ImageEntry **entries; /* sorted by name */
        size_t n_entries;
        const Image **view; /* entries' images, for image_store_list() */
};

static ImageEntry *entry_free(ImageEntry *e)
{
        if (!e)
                return NULL;
        image_done(&e->image);
        progress_unref(e->progress);
        free(e);
        return NULL;
}

static const char *entry_key(const void *item)
{
        return ((const ImageEntry *)item)->image.name;
}

static ImageEntry *entry_find(ImageStore *s, const char *name)
{
        return sorted_get((void *const *)s->entries, s->n_entries, name, entry_key);
}

static int entry_insert(ImageStore *s, ImageEntry *e)
{
        int r = sorted_insert((void ***)&s->entries, &s->n_entries, e, entry_key);
        if (r < 0)
                return r;
        e->store = s;
        return 0;
}

static void entry_remove(ImageStore *s, ImageEntry *e)
{
        if (!sorted_remove((void **)s->entries, &s->n_entries, e, entry_key))
                return;
        entry_free(e);
}

/* ---- image.json ----------------------------------------------------------------------------- */

static int record_text(const Image *i, char **ret, size_t *ret_size)
{
        char created[TIMESTAMP_STRLEN];
        json_auto_t *o =
            json_pack("{s:I, s:s, s:s, s:s, s:s*, s:s*, s:s, s:s*}", "version", (json_int_t)1,
                      "name", i->name, "state", image_state_to_string(i->state), "source",
                      i->source, "format", i->format, "sha256", i->sha256, "created_at",
                      format_timestamp(i->created_at, created), "error", i->error);
        if (!o)
                return -ENOMEM;
        if (i->state == IMAGE_STATE_READY &&
            (json_set(o, "virtual_size_bytes", json_u64(i->virtual_size)) < 0 ||
             json_set(o, "actual_size_bytes", json_u64(i->actual_size)) < 0))
                return -ENOMEM;
        return json_dump_file_text(o, JSON_SORT_KEYS, ret, ret_size);
}

typedef struct RecordKeys {
        json_int_t version, virtual_size, actual_size;
        const char *name, *state, *source, *format, *sha256, *created_at, *error;
} RecordKeys;

static const JsonField record_fields[] = {
    {"version", JSON_FIELD_INTEGER, true, JSON_AT(RecordKeys, version)},
    {"name", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, name), RESOURCE_NAME_MAX},
    {"state", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, state)},
    {"source", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, source), HOST_PATH_MAX},
    {"format", JSON_FIELD_STRING, false, JSON_AT(RecordKeys, format), 32},
    {"sha256", JSON_FIELD_STRING, false, JSON_AT(RecordKeys, sha256), IMAGE_SHA256_HEX},
    {"created_at", JSON_FIELD_STRING, true, JSON_AT(RecordKeys, created_at)},
    {"error", JSON_FIELD_STRING, false, JSON_AT(RecordKeys, error), IMAGE_ERROR_MAX},
    {"virtual_size_bytes", JSON_FIELD_INTEGER, false, JSON_AT(RecordKeys, virtual_size)},
    {"actual_size_bytes", JSON_FIELD_INTEGER, false, JSON_AT(RecordKeys, actual_size)},
    {},
};

static bool sha256_text_is_valid(const char *s)
{
        size_t n = 0;
        for (; s[n]; n++)
                if (hex_value_lower(s[n]) < 0)
                        return false;
        return n == IMAGE_SHA256_HEX;
}

/* Reads <dir>/image.json strictly into *ret. */
static int record_load(int images_fd, const char *dir, Image *ret, char **error)
{
        _cleanup_close_ int fd =
            openat(images_fd, dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return error_set(error, negative_errno(), "open images/%s: %s", dir,
                                 strerror(errno));
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        int r = read_own_file_at(fd, IMAGE_RECORD_NAME, IMAGE_RECORD_MAX, &text, &size);
        if (r < 0)
                return error_set(error, r, "read images/%s/" IMAGE_RECORD_NAME ": %s", dir,
                                 file_strerror(r));
        return image_record_parse(text, size, dir, ret, error);
}

void image_done(Image *i)
{
        freep(&i->name);
        freep(&i->format);
        freep(&i->sha256);
        freep(&i->error);
        freep(&i->source);
}

int image_record_parse(const char *text, size_t size, const char *dir, Image *ret, char **error)
{
        if (size > IMAGE_RECORD_MAX)
                return error_set(error, -EFBIG, "images/%s/" IMAGE_RECORD_NAME ": over %d bytes",
                                 dir, IMAGE_RECORD_MAX);
        json_error_t jerr;
        json_auto_t *o = json_loadb(text, size, JSON_REJECT_DUPLICATES, &jerr);
        if (!o || !json_is_object(o))
                return error_set(error, -EINVAL, "images/%s/" IMAGE_RECORD_NAME ": %s", dir,
                                 o ? "not an object" : jerr.text);
        RecordKeys k = {.version = 0};
        int r = json_schema_read(o, NULL, record_fields, &k, -EINVAL, error);
        if (r < 0)
                return error_prefix(error, r, "images/%s/" IMAGE_RECORD_NAME, dir);
        Image i = {0};
        const char *bad = NULL;
        if (k.version != 1)
                bad = "version must be 1";
        else if (!streq(k.name, dir))
                bad = "name differs from its directory";
        else if (image_state_from_string(k.state, &i.state) < 0)
                bad = "unknown state";
        else if (!host_path_form_is_valid(k.source))
                bad = "source is not an absolute path";
        else if (k.sha256 && !sha256_text_is_valid(k.sha256))
                bad = "sha256 must be 64 lowercase hex digits";
        else if (parse_timestamp(k.created_at, &i.created_at) < 0)
                bad = "created_at is not a timestamp";
        else if (k.virtual_size < 0 || k.actual_size < 0)
                bad = "sizes must not be negative";
        if (bad)
                return error_set(error, -EINVAL, "images/%s/" IMAGE_RECORD_NAME ": %s", dir, bad);
        i.virtual_size = (uint64_t)k.virtual_size;
        i.actual_size = (uint64_t)k.actual_size;
        if (strdup_nullable(k.name, &i.name) < 0 || strdup_nullable(k.source, &i.source) < 0 ||
            strdup_nullable(k.format, &i.format) < 0 || strdup_nullable(k.sha256, &i.sha256) < 0 ||
            strdup_nullable(k.error, &i.error) < 0) {
                image_done(&i);
                return error_set_oom(error);
        }
        *ret = i;
        return 0;
}

/* Writes <name>/image.json crash-safely; create makes the directory first (and fsyncs
 * images/ so that the new directory survives a crash too, as INST-1 does). */
static int record_save(int images_fd, const Image *i, bool create, char **error)
{
        if (create && mkdirat(images_fd, i->name, 0700) < 0 && errno != EEXIST)
                return error_set(error, negative_errno(), "create images/%s: %s", i->name,
                                 strerror(errno));
        _cleanup_close_ int fd =
            openat(images_fd, i->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return error_set(error, negative_errno(), "open images/%s: %s", i->name,
                                 strerror(errno));
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        if (record_text(i, &text, &size) < 0)
                return error_set_oom(error);
        WriteStep step;
        int r = write_file_atomic_at(fd, IMAGE_RECORD_NAME, text, size, 0600, &step);
        if (r < 0)
                return error_set(error, r, "write images/%s/" IMAGE_RECORD_NAME ": %s", i->name,
                                 strerror(-r));
        if (create && (r = fsync_directory_at(images_fd, ".")) < 0)
                return error_set(error, r, "sync directory images: %s", strerror(-r));
        return 0;
}

/* ---- the store --------------------------------------------------------------------------------
 */

/* The temp files of overlay templates a crash cut short (overlay.c); best effort. */
static void remove_template_temps(int dirfd)
{
        _cleanup_closedir_ DIR *d = NULL;
        if (opendir_at(dirfd, ".", 0, &d) < 0)
                return;
        struct dirent *de;
        while (readdir_next(d, &de) > 0)
                if (startswith(de->d_name, OVERLAY_TEMPLATE_PREFIX) &&
                    endswith(de->d_name, OVERLAY_TEMPLATE_TEMP_SUFFIX))
                        (void)unlinkat(dirfd, de->d_name, 0);
}

/* Start-up's repairs of one image (DISK-11, REL-12): its leftover temp files go, and an import
 * that a restart cut short is failed on disk. */
static int entry_settle(ImageStore *s, ImageEntry *e)
{
        _cleanup_close_ int fd =
            openat(s->images_fd, e->image.name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        (void)unlinkat(fd, IMAGE_TMP_NAME, 0);
        (void)unlinkat(fd, IMAGE_RECORD_NAME ".tmp", 0);
        remove_template_temps(fd);
        if (e->image.state != IMAGE_STATE_IMPORTING)
                return 0;
        (void)unlinkat(fd, IMAGE_FILE_NAME, 0);
        Image failed = e->image;
        failed.state = IMAGE_STATE_FAILED;
        failed.error = (char *)"interrupted by daemon restart";
        _cleanup_free_ char *error = NULL;
        int r = record_save(s->images_fd, &failed, false, &error);
        if (r < 0) {
                log_error_errno(r, "image %s: %s", e->image.name, error);
                return r;
        }
        e->image.state = IMAGE_STATE_FAILED;
        return strdup_nullable("interrupted by daemon restart", &e->image.error);
}

/* One entry of the images directory at start-up: loaded, settled, removed (a deletion a crash
 * cut short) or left alone with a log line. Only -ENOMEM stops the load. */
static int store_load_one(ImageStore *s, const char *name)
{
        if (startswith(name, IMAGE_DELETED_PREFIX)) {
                /* DISK-4: a removal that a crash cut short. */
                _cleanup_free_ char *e = NULL;
                if (tree_delete_at(s->images_fd, name, &e) < 0)
                        log_warning("image store: %s", e);
                return 0;
        }
        if (!resource_name_is_valid(name)) {
                log_warning("image store: images/%s is not an image name; left alone", name);
                return 0;
        }
        _cleanup_free_ char *e = NULL;
        ImageEntry *entry = calloc(1, sizeof *entry);
        if (!entry)
                return -ENOMEM;
        int r = record_load(s->images_fd, name, &entry->image, &e);
        if (r < 0) {
                entry_free(entry);
                if (r == -ENOMEM)
                        return r;
                log_error("image store: %s; image %s left alone", e, name);
                return 0;
        }
        r = entry_insert(s, entry);
        if (r < 0) {
                entry_free(entry);
                return r;
        }
        r = entry_settle(s, entry);
        return r == -ENOMEM ? r : 0;
}

static int store_load(ImageStore *s, char **error)
{
        _cleanup_closedir_ DIR *d = NULL;
        int r = opendir_at(s->images_fd, ".", 0, &d);
        struct dirent *de;
        while (r >= 0 && (r = readdir_next(d, &de)) > 0)
                if (store_load_one(s, de->d_name) < 0)
                        return error_set_oom(error);
        if (r < 0)
                return error_set(error, r, "read directory images: %s", strerror(-r));
        return 0;
}

int image_store_new(const ImageStoreConfig *config, ImageStore **ret, char **error)
{
        _cleanup_(image_store_freep) ImageStore *s = calloc(1, sizeof *s);
        if (!s)
                return error_set_oom(error);
        s->cfg = *config;
        s->images_fd = -1;
        if (mkdirat(config->data_dir_fd, IMAGE_DIR_NAME, 0700) < 0 && errno != EEXIST)
                return error_set(error, negative_errno(), "create %s/" IMAGE_DIR_NAME ": %s",
                                 config->data_dir, strerror(errno));
        s->images_fd = openat(config->data_dir_fd, IMAGE_DIR_NAME,
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (s->images_fd < 0)
                return error_set(error, negative_errno(), "open %s/" IMAGE_DIR_NAME ": %s",
                                 config->data_dir, strerror(errno));
        int r = store_load(s, error);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

ImageStore *image_store_free(ImageStore *s)
{
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n_entries; i++)
                entry_free(s->entries[i]);
        free(s->entries);
        free(s->view);
        closep(&s->images_fd);
        free(s);
        return NULL;
}

static void entry_refresh(ImageEntry *e)
{
        if (e->progress && e->image.state == IMAGE_STATE_IMPORTING)
                e->image.progress = atomic_load(&e->progress->permille);
}

size_t image_store_list(ImageStore *s, const Image *const **ret)
{
        const Image **view = reallocarray(s->view, s->n_entries + 1, sizeof *view);
        if (!view) {
                *ret = NULL;
                return 0;
        }
        s->view = view;
        for (size_t i = 0; i < s->n_entries; i++) {
                entry_refresh(s->entries[i]);
                view[i] = &s->entries[i]->image;
        }
        *ret = view;
        return s->n_entries;
}

const Image *image_store_get(ImageStore *s, const char *name)
{
        ImageEntry *e = entry_find(s, name);
        if (!e)
                return NULL;
        entry_refresh(e);
        return &e->image;
}

const Image *image_store_get_ready(ImageStore *s, const char *name)
{
        const Image *i = image_store_get(s, name);
        return i && i->state == IMAGE_STATE_READY ? i : NULL;
}

unsigned image_store_count_users(ImageStore *s, const char *name)
{
        return s->cfg.count_users ? s->cfg.count_users(name, s->cfg.userdata) : 0;
}

int image_store_disk_path(ImageStore *s, const char *name, char **ret)
{
        ImageEntry *e = entry_find(s, name);
        if (!e || e->image.state != IMAGE_STATE_READY)
                return -ENOENT;
        return strprintf(ret, "%s/" IMAGE_DIR_NAME "/%s/" IMAGE_FILE_NAME, s->cfg.data_dir, name) <
                       0
                   ? -ENOMEM
                   : 0;
}

/* ---- the import (helper pool) ---------------------------------------------------------------- */

typedef struct ImportJob {
        /* input, copied */
        int images_fd;
        char *name, *source, *expected_sha256, *qemu_img, *target;
        char **image_dirs;
        uint64_t max_image_size;
        ImportProgress *progress;
        /* output */
        char *format, *sha256;
        uint64_t virtual_size, actual_size;
} ImportJob;

static void import_job_free(void *data)
{
        ImportJob *j = data;
        if (!j)
                return;
        closep(&j->images_fd);
        free(j->name);
        free(j->source);
        free(j->expected_sha256);
        free(j->qemu_img);
        free(j->target);
        strv_free(j->image_dirs);
        progress_unref(j->progress);
        free(j->format);
        free(j->sha256);
        free(j);
}

/* The source's digest, read alongside the conversion (DISK-3: "while it is read"). */
typedef struct Hasher {
        int fd;
        int r;
        char hex[IMAGE_SHA256_HEX + 1];
} Hasher;

static void *hash_source(void *userdata)
{
        Hasher *h = userdata;
        /* Linux gives each thread its own nice value: this one yields to the loop. */
        (void)setpriority(PRIO_PROCESS, (id_t)gettid(), QEMU_IMG_CONVERT_NICE);
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        _cleanup_free_ unsigned char *buf = malloc(HASH_CHUNK);
        if (!ctx || !buf || EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
                h->r = -ENOMEM;
                EVP_MD_CTX_free(ctx);
                return NULL;
        }
        for (off_t off = 0;;) {
                ssize_t n = pread(h->fd, buf, HASH_CHUNK, off);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        h->r = negative_errno();
                        break;
                }
                if (n == 0)
                        break;
                if (EVP_DigestUpdate(ctx, buf, (size_t)n) != 1) {
                        h->r = -EIO;
                        break;
                }
                off += n;
        }
        unsigned char md[32];
        unsigned len = 0;
        if (h->r == 0 && EVP_DigestFinal_ex(ctx, md, &len) == 1 && len == sizeof md)
                for (size_t i = 0; i < sizeof md; i++)
                        snprintf(h->hex + 2 * i, 3, "%02x", md[i]);
        else if (h->r == 0)
                h->r = -EIO;
        EVP_MD_CTX_free(ctx);
        return NULL;
}

static void on_progress(unsigned permille, void *userdata)
{
        ImportProgress *p = userdata;
        atomic_store(&p->permille, permille);
}

/* After the conversion: the file reaches the disk, becomes read-only and takes its name. */
static int import_finish(int dirfd, uint64_t *ret_actual, char **error)
{
        _cleanup_close_ int fd = open_own_file_at(dirfd, IMAGE_TMP_NAME, O_RDONLY, 0);
        if (fd < 0)
                return error_set(error, fd, "open " IMAGE_TMP_NAME ": %s", file_strerror(fd));
        struct stat st;
        if (fsync(fd) < 0 || fchmod(fd, 0444) < 0 || fstat(fd, &st) < 0)
                return error_set(error, negative_errno(), "sync " IMAGE_TMP_NAME ": %s",
                                 strerror(errno));
        if (renameat(dirfd, IMAGE_TMP_NAME, dirfd, IMAGE_FILE_NAME) < 0)
                return error_set(error, negative_errno(), "rename " IMAGE_TMP_NAME ": %s",
                                 strerror(errno));
        int r = fsync_directory_at(dirfd, ".");
        if (r < 0)
                return error_set(error, r, "sync the image directory: %s", strerror(-r));
        *ret_actual = (uint64_t)st.st_blocks * 512;
        return 0;
}

static int import_convert(ImportJob *j, int source_fd, int dirfd, char **error)
{
        Hasher h = {.fd = source_fd};
        pthread_t thread;
        int r = -pthread_create(&thread, NULL, hash_source, &h);
        if (r < 0)
                return error_set(error, r, "start the digest: %s", strerror(-r));
        r = qemu_img_convert(j->qemu_img, source_fd, j->format, j->target,
                             mono_clock_now(&mono_clock_system) + QEMU_IMG_CONVERT_TIMEOUT,
                             on_progress, j->progress, error);
        (void)pthread_join(thread, NULL);
        if (r < 0)
                return r;
        if (h.r < 0)
                return error_set(error, h.r, "read source for its sha256: %s", strerror(-h.r));
        if (j->expected_sha256 && !streq(j->expected_sha256, h.hex))
                return error_set(error, -EINVAL, "sha256 mismatch: expected %s, source has %s",
                                 j->expected_sha256, h.hex);
        if (strdup_nullable(h.hex, &j->sha256) < 0)
                return error_set_oom(error);
        return import_finish(dirfd, &j->actual_size, error);
}

static int import_run(void *data, char **error)
{
        ImportJob *j = data;
        _cleanup_close_ int dirfd =
            openat(j->images_fd, j->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dirfd < 0)
                return error_set(error, negative_errno(), "open images/%s: %s", j->name,
                                 strerror(errno));
        _cleanup_close_ int fd = storage_open_source("source", j->source, j->image_dirs, error);
        if (fd < 0)
                return fd;

        const char *probed = NULL;
        int r = storage_probe_format(fd, &probed, error);
        if (r < 0)
                return r;
        if (!streq(probed, "raw") && !streq(probed, "qcow2"))
                return error_set(error, -EINVAL,
                                 "image format %s is not accepted: only raw and qcow2", probed);
        if (strdup_nullable(probed, &j->format) < 0)
                return error_set_oom(error);

        _cleanup_(qemu_img_info_done) QemuImgInfo info = {0};
        r = qemu_img_info(j->qemu_img, fd, probed,
                          mono_clock_now(&mono_clock_system) + QEMU_IMG_INFO_TIMEOUT, &info, error);
        if (r >= 0)
                r = qemu_img_info_check(&info, probed, j->max_image_size, error);
        if (r < 0)
                return r;
        j->virtual_size = info.virtual_size;

        r = import_convert(j, fd, dirfd, error);
        if (r < 0)
                (void)unlinkat(dirfd, IMAGE_TMP_NAME, 0); /* never a file a create could use */
        return r;
}

/* ---- the loop side ----------------------------------------------------------------------------
 */

/* A record write on the disk pool, for an import's first and last step. */
typedef struct RecordJob {
        int images_fd;
        Image image; /* owned copy */
        bool create;
        ImageDoneFunc done;
        void *userdata;
} RecordJob;

static void record_job_free(void *data)
{
        RecordJob *j = data;
        if (!j)
                return;
        closep(&j->images_fd);
        image_done(&j->image);
        free(j);
}

static int image_copy(const Image *i, Image *ret)
{
        Image c = *i;
        c.name = c.format = c.sha256 = c.error = c.source = NULL;
        if (strdup_nullable(i->name, &c.name) < 0 || strdup_nullable(i->format, &c.format) < 0 ||
            strdup_nullable(i->sha256, &c.sha256) < 0 || strdup_nullable(i->error, &c.error) < 0 ||
            strdup_nullable(i->source, &c.source) < 0) {
                image_done(&c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

static int record_job_run(void *data, char **error)
{
        RecordJob *j = data;
        int r = record_save(j->images_fd, &j->image, j->create, error);
        if (r < 0 && j->create) {
                /* The directory made for an import that never began goes again. */
                _cleanup_free_ char *ignored = NULL;
                (void)tree_delete_at(j->images_fd, j->image.name, &ignored);
        }
        return r;
}

static int submit_record(ImageEntry *e, const Image *image, bool create, WorkerDoneFunc done,
                         void *userdata, char **error)
{
        ImageStore *s = e->store;
        RecordJob *j = calloc(1, sizeof *j);
        if (!j)
                return error_set_oom(error);
        j->images_fd = fcntl(s->images_fd, F_DUPFD_CLOEXEC, 3);
        j->create = create;
        if (j->images_fd < 0 || image_copy(image, &j->image) < 0) {
                record_job_free(j);
                return error_set_oom(error);
        }
        WorkerJob job = {.key = e->image.name,
                         .run = record_job_run,
                         .done = done,
                         .data = j,
                         .free_data = record_job_free,
                         .userdata = userdata};
        int r = worker_pool_submit(s->cfg.disk_pool, &job, error);
        if (r < 0)
                record_job_free(j);
        return r;
}

/* The caller of image_store_import(), waiting for the first record. */
typedef struct ImportStart {
        ImageEntry *entry;
        ImageDoneFunc done;
        void *userdata;
        char *expected_sha256;
} ImportStart;

static void import_ended(int r, void *data, const char *error, void *userdata);

static void final_record_written(int r, void *data, const char *error, void *userdata)
{
        ImageEntry *e = userdata;
        RecordJob *j = data;
        e->busy = false;
        e->progress = progress_unref(e->progress);
        if (r < 0 || !j) {
                /* The record still says importing: the next start-up fails it (DISK-11). */
                log_error("image %s: %s", e->image.name, error);
                e->image.state = IMAGE_STATE_FAILED;
                (void)strdup_nullable(error, &e->image.error);
                return;
        }
        Image *i = &e->image;
        image_done(i);
        *i = j->image;
        j->image = (Image){0};
        if (i->state == IMAGE_STATE_READY)
                log_info("image %s imported: %s, %" PRIu64 " bytes", i->name, i->format,
                         i->virtual_size);
        else
                log_warning("image %s: import failed: %s", i->name, i->error);
}

static void import_ended(int r, void *data, const char *error, void *userdata)
{
        ImageEntry *e = userdata;
        ImportJob *j = data;
        Image after = e->image;
        after.progress = 0;
        if (r >= 0 && j) {
                after.state = IMAGE_STATE_READY;
                after.format = j->format;
                after.sha256 = j->sha256;
                after.virtual_size = j->virtual_size;
                after.actual_size = j->actual_size;
        } else {
                after.state = IMAGE_STATE_FAILED;
                after.error = (char *)error;
                if (j)
                        after.format = j->format;
        }
        _cleanup_free_ char *e2 = NULL;
        if (submit_record(e, &after, false, final_record_written, e, &e2) < 0)
                final_record_written(-EIO, NULL, e2, e);
}

static int submit_import(ImageEntry *e, const char *expected_sha256, char **error)
{
        ImageStore *s = e->store;
        ImportJob *j = calloc(1, sizeof *j);
        if (!j)
                return error_set_oom(error);
        j->images_fd = fcntl(s->images_fd, F_DUPFD_CLOEXEC, 3);
        j->max_image_size = s->cfg.max_image_size;
        j->progress = e->progress;
        atomic_fetch_add(&j->progress->refs, 1);
        if (j->images_fd < 0 || strdup_nullable(e->image.name, &j->name) < 0 ||
            strdup_nullable(e->image.source, &j->source) < 0 ||
            strdup_nullable(expected_sha256, &j->expected_sha256) < 0 ||
            strdup_nullable(s->cfg.qemu_img, &j->qemu_img) < 0 ||
            strv_copy(s->cfg.image_dirs, &j->image_dirs) < 0 ||
            strprintf(&j->target, "%s/" IMAGE_DIR_NAME "/%s/" IMAGE_TMP_NAME, s->cfg.data_dir,
                      e->image.name) < 0) {
                import_job_free(j);
                return error_set_oom(error);
        }
        WorkerJob job = {.key = e->image.name,
                         .timeout =
                             QEMU_IMG_INFO_TIMEOUT + QEMU_IMG_CONVERT_TIMEOUT + 60 * NSEC_PER_SEC,
                         .run = import_run,
                         .done = import_ended,
                         .data = j,
                         .free_data = import_job_free,
                         .userdata = e};
        int r = worker_pool_submit(s->cfg.helper_pool, &job, error);
        if (r < 0)
                import_job_free(j);
        return r;
}

static void first_record_written(int r, void *data, const char *error, void *userdata)
{
        ImportStart *st = userdata;
        ImageEntry *e = st->entry;
        ImageStore *s = e->store;
        if (r < 0) {
                st->done(r, STORAGE_FAILURE_INTERNAL, error, NULL, st->userdata);
                entry_remove(s, e);
        } else {
                _cleanup_free_ char *e2 = NULL;
                int k = submit_import(e, st->expected_sha256, &e2);
                st->done(0, STORAGE_FAILURE_NONE, NULL, &e->image, st->userdata);
                /* The 202 went out with `importing`: a failure to queue is the import's. */
                if (k < 0)
                        import_ended(k, NULL, e2, e);
        }
        free(st->expected_sha256);
        free(st);
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

int image_store_import(ImageStore *s, const char *name, const char *source, const char *sha256,
                       ImageDoneFunc done, void *userdata, StorageFailure *ret_failure,
                       char **ret_error)
{
        if (!resource_name_is_valid(name))
                return refuse(STORAGE_FAILURE_INVALID_REQUEST, ret_failure, ret_error, -EINVAL,
                              "name must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$");
        if (!host_path_form_is_valid(source))
                return refuse(STORAGE_FAILURE_INVALID_REQUEST, ret_failure, ret_error, -EINVAL,
                              "source must be an absolute path without . or .. components");
        if (sha256 && !sha256_text_is_valid(sha256))
                return refuse(STORAGE_FAILURE_INVALID_REQUEST, ret_failure, ret_error, -EINVAL,
                              "sha256 must be 64 lowercase hex digits");
        ImageEntry *old = entry_find(s, name);
        if (old && old->image.state == IMAGE_STATE_IMPORTING)
                return refuse(STORAGE_FAILURE_BUSY, ret_failure, ret_error, -EBUSY,
                              "image %s is being imported", name);
        if (old && old->busy)
                return refuse(STORAGE_FAILURE_BUSY, ret_failure, ret_error, -EBUSY,
                              "image %s is being deleted", name);
        if (old)
                return refuse(STORAGE_FAILURE_ALREADY_EXISTS, ret_failure, ret_error, -EEXIST,
                              "image %s exists already (%s); delete it first", name,
                              image_state_to_string(old->image.state));
        if (s->cfg.check_space) {
                _cleanup_free_ char *why = NULL;
                int k = s->cfg.check_space(0, &why, s->cfg.userdata);
                if (k < 0)
                        return refuse(STORAGE_FAILURE_INSUFFICIENT_RESOURCES, ret_failure,
                                      ret_error, k, "%s", why);
        }

        ImageEntry *e = calloc(1, sizeof *e);
        ImportStart *st = calloc(1, sizeof *st);
        ImportProgress *p = calloc(1, sizeof *p);
        if (!e || !st || !p || strdup_nullable(name, &e->image.name) < 0 ||
            strdup_nullable(source, &e->image.source) < 0 ||
            strdup_nullable(sha256, &st->expected_sha256) < 0 || entry_insert(s, e) < 0) {
                free(p);
                if (st)
                        free(st->expected_sha256);
                free(st);
                entry_free(e);
                return refuse(STORAGE_FAILURE_INTERNAL, ret_failure, ret_error, -ENOMEM,
                              ERROR_OUT_OF_MEMORY);
        }
        atomic_init(&p->refs, 1);
        e->progress = p;
        e->busy = true;
        e->image.state = IMAGE_STATE_IMPORTING;
        e->image.created_at = clock_now(&clock_realtime);
        *st = (ImportStart){
            .entry = e, .done = done, .userdata = userdata, .expected_sha256 = st->expected_sha256};

        _cleanup_free_ char *error = NULL;
        int r = submit_record(e, &e->image, true, first_record_written, st, &error);
        if (r < 0) {
                free(st->expected_sha256);
                free(st);
                entry_remove(s, e);
                return refuse(STORAGE_FAILURE_INTERNAL, ret_failure, ret_error, r, "image %s: %s",
                              name, error);
        }
        return 0;
}

/* ---- deletion (DISK-4) ------------------------------------------------------------------------
 */

typedef struct DeleteJob {
        int images_fd;
        char *name;
        ImageDoneFunc done;
        void *userdata;
} DeleteJob;

static void delete_job_free(void *data)
{
        DeleteJob *j = data;
        if (!j)
                return;
        closep(&j->images_fd);
        free(j->name);
        free(j);
}

static int delete_run(void *data, char **error)
{
        DeleteJob *j = data;
        _cleanup_free_ char *deleted = NULL;
        if (strprintf(&deleted, IMAGE_DELETED_PREFIX "%s", j->name) < 0)
                return error_set_oom(error);
        /* A tree of an earlier removal in the way was on its way out anyway. */
        int r = tree_delete_at(j->images_fd, deleted, error);
        if (r < 0)
                return r;
        if (renameat(j->images_fd, j->name, j->images_fd, deleted) < 0 && errno != ENOENT)
                return error_set(error, negative_errno(), "rename images/%s to images/%s: %s",
                                 j->name, deleted, strerror(errno));
        /* The rename is durable before the tree goes: a crash now leaves a .deleted-* tree. */
        r = fsync_directory_at(j->images_fd, ".");
        if (r < 0)
                return error_set(error, r, "sync directory images: %s", strerror(-r));
        return tree_delete_at(j->images_fd, deleted, error);
}

static void delete_ended(int r, void *data, const char *error, void *userdata)
{
        ImageEntry *e = userdata;
        DeleteJob *j = data;
        ImageDoneFunc done = j ? j->done : NULL;
        void *done_userdata = j ? j->userdata : NULL;
        e->busy = false;
        if (r >= 0) {
                log_info("image %s deleted", e->image.name);
                entry_remove(e->store, e);
        }
        /* The disk pool gives this job no deadline, so it is never abandoned (j is set). */
        if (done)
                done(r, r < 0 ? STORAGE_FAILURE_INTERNAL : STORAGE_FAILURE_NONE, error, NULL,
                     done_userdata);
}

int image_store_delete(ImageStore *s, const char *name, ImageDoneFunc done, void *userdata,
                       StorageFailure *ret_failure, char **ret_error)
{
        ImageEntry *e = resource_name_is_valid(name) ? entry_find(s, name) : NULL;
        if (!e)
                return refuse(STORAGE_FAILURE_NOT_FOUND, ret_failure, ret_error, -ENOENT,
                              "image %s not found", name);
        if (e->image.state == IMAGE_STATE_IMPORTING)
                return refuse(STORAGE_FAILURE_INVALID_STATE, ret_failure, ret_error, -EBUSY,
                              "image %s is being imported", name);
        if (e->busy)
                return refuse(STORAGE_FAILURE_BUSY, ret_failure, ret_error, -EBUSY,
                              "image %s is being deleted", name);
        unsigned users = image_store_count_users(s, name);
        if (users > 0)
                return refuse(STORAGE_FAILURE_INVALID_STATE, ret_failure, ret_error, -EBUSY,
                              "image %s is the root disk of %u instance%s", name, users,
                              users == 1 ? "" : "s");

        DeleteJob *j = calloc(1, sizeof *j);
        if (!j)
                return refuse(STORAGE_FAILURE_INTERNAL, ret_failure, ret_error, -ENOMEM,
                              ERROR_OUT_OF_MEMORY);
        j->images_fd = fcntl(s->images_fd, F_DUPFD_CLOEXEC, 3);
        j->done = done;
        j->userdata = userdata;
        if (j->images_fd < 0 || strdup_nullable(name, &j->name) < 0) {
                delete_job_free(j);
                return refuse(STORAGE_FAILURE_INTERNAL, ret_failure, ret_error, -ENOMEM,
                              ERROR_OUT_OF_MEMORY);
        }
        _cleanup_free_ char *error = NULL;
        WorkerJob job = {.key = e->image.name,
                         .run = delete_run,
                         .done = delete_ended,
                         .data = j,
                         .free_data = delete_job_free,
                         .userdata = e};
        int r = worker_pool_submit(s->cfg.disk_pool, &job, &error);
        if (r < 0) {
                delete_job_free(j);
                return refuse(STORAGE_FAILURE_INTERNAL, ret_failure, ret_error, r, "image %s: %s",
                              name, error);
        }
        e->busy = true;
        return 0;
}
