/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Root overlays (DISK-5) by template. The first overlay of an image at a given size is made by
 * `qemu-img create` exactly as DISK-5 says, and a copy of it, taken before anything opened it, is
 * kept beside the image as overlay-<size>.qcow2; every later overlay of that image and size is a
 * copy of the template. A fresh qcow2 overlay is headers only: it holds no data, no identifier and
 * no trace of its own path, and every overlay of an image names the same absolute backing path
 * and format, so the copy is byte for byte the file qemu-img would write, made without a process
 * (PERF-7). The template goes with its image (DISK-4 deletes the image's directory).
 *
 * A template that cannot be kept (a file system without hard links, a full disk) only means that
 * the next overlay is made by qemu-img too. Blocking; run on the helper pool.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/storage.h"

/* A fresh overlay is four clusters of 64 KiB up to sizes far beyond storage.max_disk_gb. */
#define OVERLAY_TEMPLATE_MAX (1024 * 1024)

static void template_name(char *buf, size_t size, uint64_t bytes)
{
        snprintf(buf, size, OVERLAY_TEMPLATE_PREFIX "%" PRIu64 ".qcow2", bytes);
}

/* The directory that holds the backing image, where its templates live. */
static int open_image_dir(const char *backing)
{
        const char *slash = strrchr(backing, '/');
        if (!slash || slash == backing)
                return -EINVAL;
        _cleanup_free_ char *dir = strndup(backing, (size_t)(slash - backing));
        if (!dir)
                return -ENOMEM;
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Writes the template's bytes as dirfd/name, a new file; 0, or -errno with the file removed. */
static int copy_template(const char *bytes, size_t size, int dirfd, const char *name)
{
        _cleanup_close_ int fd =
            openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        int r = write_all(fd, bytes, size);
        if (r < 0)
                (void)unlinkat(dirfd, name, 0);
        return r;
}

/*
 * Keeps a copy of the overlay qemu-img just wrote as the image's template; best effort. The copy
 * is written under a temp name of this thread's and linked to the template's, so a crash never
 * leaves a half-written template (start-up removes the temp, image_store_new()) and of two
 * creates racing, the first link wins with the same bytes.
 */
static void publish_template(int image_dirfd, const char *template, int dirfd, const char *name)
{
        _cleanup_free_ char *bytes = NULL;
        size_t size;
        if (read_own_file_at(dirfd, name, OVERLAY_TEMPLATE_MAX, &bytes, &size) < 0)
                return;
        char temp[96];
        snprintf(temp, sizeof temp, "%s.%d" OVERLAY_TEMPLATE_TEMP_SUFFIX, template, (int)gettid());
        _cleanup_close_ int fd =
            openat(image_dirfd, temp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return;
        if (write_all(fd, bytes, size) >= 0 && fsync(fd) >= 0 &&
            linkat(image_dirfd, temp, image_dirfd, template, 0) == 0)
                (void)fsync_directory_at(image_dirfd, ".");
        (void)unlinkat(image_dirfd, temp, 0);
}

/* Makes the overlay's bytes as dirfd/temp (path_temp): the template's copy, else qemu-img's. */
static int overlay_make(const char *qemu_img, const char *backing, uint64_t size, int dirfd,
                        const char *temp, const char *path_temp, nsec_t deadline, char **error)
{
        char template[64];
        template_name(template, sizeof template, size);
        _cleanup_close_ int image_dirfd = open_image_dir(backing);
        if (image_dirfd >= 0) {
                _cleanup_free_ char *bytes = NULL;
                size_t n;
                if (read_own_file_at(image_dirfd, template, OVERLAY_TEMPLATE_MAX, &bytes, &n) >=
                        0 &&
                    n > 0) {
                        int r = copy_template(bytes, n, dirfd, temp);
                        return r < 0 ? error_set(error, r, "create %s: %s", path_temp, strerror(-r))
                                     : 0;
                }
        }
        int r = qemu_img_create(qemu_img, path_temp, backing, size, deadline, error);
        if (r >= 0 && image_dirfd >= 0)
                publish_template(image_dirfd, template, dirfd, temp);
        return r;
}

int storage_overlay_create(const char *qemu_img, const char *backing, uint64_t size, int dirfd,
                           const char *name, const char *path, nsec_t deadline, char **error)
{
        _cleanup_free_ char *temp = NULL, *path_temp = NULL;
        if (strprintf(&temp, "%s" OVERLAY_TEMP_SUFFIX, name) < 0 ||
            strprintf(&path_temp, "%s" OVERLAY_TEMP_SUFFIX, path) < 0)
                return error_set_oom(error);
        (void)unlinkat(dirfd, temp, 0); /* qemu-img would replace it; a copy must not meet it */
        int r = overlay_make(qemu_img, backing, size, dirfd, temp, path_temp, deadline, error);
        if (r >= 0) {
                _cleanup_close_ int fd = open_own_file_at(dirfd, temp, O_RDONLY, 0);
                if (fd < 0 || fsync(fd) < 0)
                        r = error_set(error, fd < 0 ? fd : negative_errno(), "sync %s: %s",
                                      path_temp, fd < 0 ? file_strerror(fd) : strerror(errno));
        }
        if (r >= 0 && renameat(dirfd, temp, dirfd, name) < 0)
                r = error_set(error, negative_errno(), "rename %s: %s", path_temp, strerror(errno));
        if (r >= 0 && (r = fsync_directory_at(dirfd, ".")) < 0)
                (void)error_set(error, r, "sync the directory of %s: %s", path, strerror(-r));
        if (r < 0)
                (void)unlinkat(dirfd, temp, 0);
        return r;
}
