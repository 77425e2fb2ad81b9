/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * storage: vgpud's disk files (SPEC §19): every qemu-img call, and the image store under
 * <data_dir>/images (DISK-1..DISK-4, REL-12). It knows nothing of instances: instances/ calls
 * it, and the instance records stay the one source of truth for who uses which image.
 *
 * Promises:
 *  - qemu-img runs only here, through the spawn primitive (worker/), always with an explicit
 *    -f, under resource limits and a deadline, its output kept bounded (GEN-5: more than the
 *    bound is an error, never cut short). The calls block: they run on the helper pool.
 *  - A disk image is hostile input. An import source is opened once, confined to image_dirs
 *    as INST-6 confines boot files, and qemu-img reads it only through that descriptor
 *    (/dev/fd/3), so no path is resolved twice. Its format is probed here from its magic bytes,
 *    never by qemu-img; `qemu-img info` runs on it before anything else and its answer is parsed
 *    strictly, and the conversion names the source's driver with `backing: null`, so even a
 *    header changed after the check cannot make qemu-img open another file.
 *  - An image's state is image.json, written crash-safely; disk.qcow2 exists only once the
 *    image is ready (mode 0444), so a failure never leaves a file a create could use.
 */

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "base/base.h"
#include "worker/worker.h"

/* ---- qemu-img (qemu-img.c) ----------------------------------------------------------------- */

/* DISK-3: `prlimit --as=1GiB --cpu=30` and a 60 s deadline for `qemu-img info`. */
#define QEMU_IMG_AS_BYTES (UINT64_C(1) << 30)
#define QEMU_IMG_INFO_CPU_SECONDS 30
#define QEMU_IMG_INFO_TIMEOUT (60 * NSEC_PER_SEC)
/* A conversion reads the whole image: CPU time grows with its size, so it gets an hour of CPU
 * and a deadline of a day (a 2 TiB image at 50 MB/s takes 12 h). Its thread pool reserves a
 * stack per thread, which 1 GiB of address space cannot always hold, so it gets 4 GiB. */
#define QEMU_IMG_CONVERT_AS_BYTES (UINT64_C(4) << 30)
/* PERF-8: a conversion runs at a lower CPU priority, the digest read beside it too, so that the
 * loop answers at once while an import takes the CPU it leaves. */
#define QEMU_IMG_CONVERT_NICE 10
#define QEMU_IMG_CONVERT_CPU_SECONDS 3600
#define QEMU_IMG_CONVERT_TIMEOUT (24 * NSEC_PER_HOUR)
/* `qemu-img info --output=json` of an image we accept is well under this (GEN-5). */
#define QEMU_IMG_INFO_MAX (256 * 1024)
/* What a failing qemu-img says is kept up to this many bytes for its message. */
#define QEMU_IMG_OUTPUT_MAX 4096

/* What `qemu-img info --output=json` says of an image, as far as vgpud needs it. */
typedef struct QemuImgInfo {
        char *format;          /* "format" */
        uint64_t virtual_size; /* "virtual-size" */
        uint64_t actual_size;  /* "actual-size"; 0 when absent */
        char *backing;         /* "backing-filename" (or "full-backing-filename"); NULL for none */
        char *data_file;       /* qcow2's "data-file"; NULL for none */
        bool encrypted;        /* "encrypted", qcow2's "encrypt", or a luks container */
        bool corrupt;          /* qcow2's "corrupt" */
} QemuImgInfo;

void qemu_img_info_done(QemuImgInfo *info);

/*
 * Parses qemu-img's JSON strictly (GEN-5): duplicate keys, unknown top-level keys, wrong types
 * and more than QEMU_IMG_INFO_MAX bytes are errors (-EINVAL, -EFBIG), with
 * `qemu-img info: <why>`. Known keys of qemu-img 7.2 to 9.x are accepted; qcow2's
 * format-specific data is read by its own table, other formats' only for its type.
 */
int qemu_img_info_parse(const char *json, size_t size, QemuImgInfo *ret, char **error);

/*
 * DISK-3's refusals, each naming its reason (-EINVAL): a format other than raw and qcow2, a
 * format other than the one probed, a backing file, an external data file, encryption, the
 * corrupt flag, a virtual size over max_size (storage.max_image_size).
 */
int qemu_img_info_check(const QemuImgInfo *info, const char *probed, uint64_t max_size,
                        char **error);

/*
 * The format a file's magic bytes say, read with pread() from fd: "qcow2", "raw", or the name
 * of a format vgpud refuses ("qcow", "vmdk", "vpc", "vhdx", "vdi", "qed", "luks", "parallels",
 * "cloop", "dmg", "bochs"). Anything without a known magic is raw: read as raw it is only data.
 */
int storage_probe_format(int fd, const char **ret, char **error);

/*
 * `qemu-img info --output=json -f <format> /dev/fd/3` with source_fd passed at 3, under
 * DISK-3's limits, to deadline (CLOCK_MONOTONIC) at the latest. Blocks.
 */
int qemu_img_info(const char *binary, int source_fd, const char *format, nsec_t deadline,
                  QemuImgInfo *ret, char **error);

/* Called on the converting thread with the fraction done, 0..1000 (per mille). */
typedef void (*QemuImgProgressFunc)(unsigned permille, void *userdata);

/*
 * `qemu-img convert -p -f <format> -O qcow2 json:{driver: <format>, [backing: null,] file:
 * /dev/fd/3} <target>` with source_fd passed at 3; progress streamed as it is printed. The
 * target is created by qemu-img (an existing one is replaced). Blocks until done or deadline.
 */
int qemu_img_convert(const char *binary, int source_fd, const char *format, const char *target,
                     nsec_t deadline, QemuImgProgressFunc progress, void *userdata, char **error);

/* `qemu-img create` is quick: it writes headers only. */
#define QEMU_IMG_CREATE_TIMEOUT (60 * NSEC_PER_SEC)

/*
 * `qemu-img create -q -f qcow2 [-F qcow2 -b <backing>] <target> <size>`: a root overlay over an
 * image (DISK-5: backing absolute, its format named) or, without backing, an empty volume
 * (DISK-7), under DISK-3's limits. Blocks.
 */
int qemu_img_create(const char *binary, const char *target, const char *backing, uint64_t size,
                    nsec_t deadline, char **error);

/* The templates of an image's overlays in its directory: overlay-<size in bytes>.qcow2. */
#define OVERLAY_TEMPLATE_PREFIX "overlay-"
#define OVERLAY_TEMPLATE_TEMP_SUFFIX ".tmp" /* a template being written: <template>.<tid>.tmp */

/* An overlay being made: <name>.tmp, which a loader removes after a crash. */
#define OVERLAY_TEMP_SUFFIX ".tmp"

/*
 * DISK-5's root overlay over backing (an image's disk.qcow2, absolute) as dirfd/name, which is
 * path: a copy of the image's template for that size when there is one, else made by
 * qemu_img_create(), and then kept as the template (overlay.c says why a copy is the same file).
 * Crash-safe: made as <name>.tmp, synced, renamed, the directory synced; on failure nothing is
 * left. Blocks.
 */
int storage_overlay_create(const char *qemu_img, const char *backing, uint64_t size, int dirfd,
                           const char *name, const char *path, nsec_t deadline, char **error);

/* ---- confined sources (INST-6, DISK-2) ----------------------------------------------------- */

/*
 * Opens path read-only as INST-6 confines a boot file: absolute, no . or .. components, under
 * one of image_dirs as written and as resolved, a regular file, opened beneath the resolved
 * directory with every symlink refused. Failures are -EINVAL and friends with
 * `<label> <path>: <why>`.
 */
int storage_open_source(const char *label, const char *path, char *const *image_dirs, char **error);

/* ---- the image store (image-store.c) ------------------------------------------------------- */

typedef enum ImageState {
        IMAGE_STATE_IMPORTING,
        IMAGE_STATE_READY,
        IMAGE_STATE_FAILED,
        _IMAGE_STATE_MAX,
} ImageState;

const char *image_state_to_string(ImageState s);

#define IMAGE_SHA256_HEX 64
#define IMAGE_DIR_NAME "images"
#define IMAGE_FILE_NAME "disk.qcow2"
#define IMAGE_RECORD_NAME "image.json"
#define IMAGE_DELETED_PREFIX ".deleted-"

/* An image as GET /images/{name} shows it (DISK-2). */
typedef struct Image {
        char *name;
        ImageState state;
        char *format; /* of the source; NULL until probed */
        uint64_t virtual_size, actual_size;
        char *sha256; /* of the source as read; NULL until read */
        Timestamp created_at;
        char *error; /* when failed */
        char *source;
        unsigned progress; /* per mille, while importing */
} Image;

void image_done(Image *i);

/*
 * image.json's text, strictly (GEN-5: at most 64 KiB, version 1, unknown and duplicate keys
 * refused); dir is the directory it was read from, which must be its name. -EINVAL, -EFBIG,
 * -ENOMEM with `images/<dir>/image.json: <why>`.
 */
int image_record_parse(const char *text, size_t size, const char *dir, Image *ret, char **error);

/* Why a store refused a request (API-21's codes), images and volumes alike. */
typedef enum StorageFailure {
        STORAGE_FAILURE_NONE,
        STORAGE_FAILURE_INVALID_REQUEST,        /* 400 */
        STORAGE_FAILURE_NOT_FOUND,              /* 404 */
        STORAGE_FAILURE_ALREADY_EXISTS,         /* 409 */
        STORAGE_FAILURE_BUSY,                   /* 409: an import of that name runs */
        STORAGE_FAILURE_INVALID_STATE,          /* 409: in use, or importing */
        STORAGE_FAILURE_INSUFFICIENT_RESOURCES, /* 409: DISK-10's free-space floor */
        STORAGE_FAILURE_INTERNAL,               /* 500 */
        _STORAGE_FAILURE_MAX,
} StorageFailure;

typedef struct ImageStore ImageStore;

typedef struct ImageStoreConfig {
        int data_dir_fd;      /* <data_dir>, borrowed */
        const char *data_dir; /* its path, for the absolute target of qemu-img */
        char *const *image_dirs;
        const char *qemu_img; /* storage.qemu_img_binary */
        uint64_t max_image_size;
        WorkerPool *disk_pool;   /* image.json writes and removals */
        WorkerPool *helper_pool; /* qemu-img */
        /* How many instance records use the image (DISK-2 `instances`, DISK-4); NULL: none. */
        unsigned (*count_users)(const char *name, void *userdata);
        /* DISK-10: 0, or < 0 with `insufficient storage: ...` when needed bytes more would
         * leave less than storage.min_free; NULL: no check. */
        int (*check_space)(uint64_t needed, char **error, void *userdata);
        void *userdata;
} ImageStoreConfig;

/*
 * Opens (creating, 0700) <data_dir>/images and loads every image.json there, synchronously, at
 * start-up: leftover `.deleted-*` trees and `*.tmp` files are removed, and an image that was
 * `importing` is marked `failed` with `interrupted by daemon restart` (DISK-11, REL-12). A record
 * that does not load is logged and skipped, its directory left for the operator.
 */
int image_store_new(const ImageStoreConfig *config, ImageStore **ret, char **error);
ImageStore *image_store_free(ImageStore *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(ImageStore *, image_store_free);

/* Sorted by name; valid until the next change on the loop. */
size_t image_store_list(ImageStore *s, const Image *const **ret);
const Image *image_store_get(ImageStore *s, const char *name);
unsigned image_store_count_users(ImageStore *s, const char *name);

/* Called on the loop when an operation ends: r < 0 with failure and error, or the image. */
typedef void (*ImageDoneFunc)(int r, StorageFailure failure, const char *error, const Image *image,
                              void *userdata);

/*
 * POST /images (DISK-2): name (INST-4's pattern), source (an absolute path under image_dirs),
 * sha256 (64 lowercase hex digits, or NULL). Writes image.json `importing` on the disk pool,
 * then calls done with the image (202), and goes on importing on the helper pool. A refusal
 * before that returns < 0 with *ret_failure and *ret_error, and done is never called.
 */
int image_store_import(ImageStore *s, const char *name, const char *source, const char *sha256,
                       ImageDoneFunc done, void *userdata, StorageFailure *ret_failure,
                       char **ret_error);

/*
 * DELETE /images/{name} (DISK-4): 409 invalid_state while importing or while a record uses it;
 * otherwise renames the directory to `.deleted-<name>`, fsyncs images/, deletes the tree, and
 * calls done (r >= 0, image NULL).
 */
int image_store_delete(ImageStore *s, const char *name, ImageDoneFunc done, void *userdata,
                       StorageFailure *ret_failure, char **ret_error);

/* The absolute path of a ready image's disk.qcow2 (DISK-5's backing path); -ENOENT. */
int image_store_disk_path(ImageStore *s, const char *name, char **ret);

/* A ready image by name, or NULL (DISK-5's check of a create). */
const Image *image_store_get_ready(ImageStore *s, const char *name);

/* ---- volumes (volume-store.c, DISK-7) ------------------------------------------------------ */

/* data_dir's filesystem (DISK-10), sampled on a worker by each storage stage, and at start-up. */
typedef struct StorageSpace {
        bool known;
        uint64_t free_bytes;  /* f_bavail: what vgpud, not root's reserve, may use */
        uint64_t total_bytes; /* f_blocks */
        /* DISK-10: what the files of <data_dir>/instances/<id>/ occupy (overlays, seeds, logs) */
        uint64_t instances_disk_bytes;
} StorageSpace;

#define VOLUME_DIR_NAME "volumes"
#define VOLUME_FILE_NAME "volume.qcow2"
#define VOLUME_RECORD_NAME "volume.json"
#define VOLUME_DELETED_PREFIX ".deleted-"

typedef struct Volume {
        char id[RANDOM_ID_LEN + 1]; /* INST-3's form */
        char *name;                 /* INST-4's pattern, unique */
        uint64_t size_gb;
        Timestamp created_at;
} Volume;

/* volume.json's text, strictly; dir must be its id. `volumes/<dir>/volume.json: <why>`. */
int volume_record_parse(const char *text, size_t size, const char *dir, Volume *ret, char **error);

typedef struct VolumeStore VolumeStore;

typedef struct VolumeStoreConfig {
        int data_dir_fd;
        const char *data_dir;
        const char *qemu_img;
        WorkerPool *disk_pool;   /* removals */
        WorkerPool *helper_pool; /* qemu-img create */
        /*
         * DISK-7: how many instance records hold the volume, with the first holder's id in
         * *ret (malloc'd) when there is one; NULL: none.
         */
        unsigned (*holder)(const char *id, char **ret, void *userdata);
        int (*check_space)(uint64_t needed, char **error, void *userdata); /* as images' */
        void *userdata;
} VolumeStoreConfig;

/* Opens (creating, 0700) <data_dir>/volumes and loads every volume.json; `.deleted-*` trees go. */
int volume_store_new(const VolumeStoreConfig *config, VolumeStore **ret, char **error);
VolumeStore *volume_store_free(VolumeStore *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(VolumeStore *, volume_store_free);

/* Sorted by id; valid until the next change on the loop. */
size_t volume_store_list(VolumeStore *s, const Volume *const **ret);
/* By id, or else by name (DISK-8's "volume": "<id or name>"); NULL when there is none. */
const Volume *volume_store_get(VolumeStore *s, const char *id_or_name);
/* <data_dir>/volumes/<id>/volume.qcow2; -ENOENT. */
int volume_store_disk_path(VolumeStore *s, const char *id, char **ret);

typedef void (*VolumeDoneFunc)(int r, StorageFailure failure, const char *error,
                               const Volume *volume, void *userdata);

/*
 * POST /volumes (DISK-7): name unique (409 already_exists), size_gb 1..max_gb; `qemu-img create
 * -f qcow2` on the helper pool; done with the volume (201) once volume.json is on disk.
 */
int volume_store_create(VolumeStore *s, const char *name, uint64_t size_gb, uint64_t max_gb,
                        VolumeDoneFunc done, void *userdata, StorageFailure *ret_failure,
                        char **ret_error);

/* DELETE /volumes/{id} (DISK-7): 409 invalid_state naming the holder while attached. */
int volume_store_delete(VolumeStore *s, const char *id, VolumeDoneFunc done, void *userdata,
                        StorageFailure *ret_failure, char **ret_error);

/* The space as last sampled; never waits (the loop reads it for /metrics, DISK-10). */
const StorageSpace *volume_store_space(VolumeStore *s);

/*
 * DISK-10: -ENOSPC with `insufficient storage: <free> free, <needed> needed` when needed bytes
 * more would leave less than min_free_bytes (or min_free_percent of the filesystem, when
 * min_free_bytes is 0) free; 0 when they fit or the space is not known yet.
 */
int storage_space_check(const StorageSpace *space, uint64_t min_free_bytes,
                        unsigned min_free_percent, uint64_t needed, char **error);

/* DISK-11: a volume directory without volume.json younger than this may be a create in flight. */
#define VOLUME_ORPHAN_MIN_AGE 300 /* seconds */

typedef struct VolumeSweepResult {
        unsigned removed;
        char **failures; /* one message each: `delete volumes/<id>: <why>` */
} VolumeSweepResult;

typedef void (*VolumeSweepFunc)(const VolumeSweepResult *result, void *userdata);

/*
 * The reconciler's storage stage (DISK-11), on the disk pool: removes each volume directory
 * that no volume in memory names and that holds no volume.json (a create a crash cut short),
 * once its mtime is VOLUME_ORPHAN_MIN_AGE old at now, and each leftover `.deleted-*` tree; and
 * samples data_dir's free space (DISK-10).
 * done runs on the loop with what was removed and what failed. -errno when it cannot start.
 */
int volume_store_sweep(VolumeStore *s, Timestamp now, VolumeSweepFunc done, void *userdata);
