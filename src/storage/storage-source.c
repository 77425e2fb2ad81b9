/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Files from outside vgpud's store: INST-6's confinement, shared by boot files (instances/) and
 * image import sources (DISK-2). Blocking; run on workers.
 */
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include "storage/storage.h"

/* Whether path lies strictly below dir; both absolute and without trailing slashes but "/". */
static bool path_is_below(const char *path, const char *dir)
{
        size_t n = strlen(dir);
        while (n > 1 && dir[n - 1] == '/')
                n--;
        if (n == 1 && dir[0] == '/')
                return path[0] == '/' && path[1] != 0;
        return strncmp(path, dir, n) == 0 && path[n] == '/' && path[n + 1] != 0;
}

static bool below_any(const char *path, char *const *dirs)
{
        for (char *const *d = dirs; d && *d; d++)
                if (path_is_below(path, *d))
                        return true;
        return false;
}

static int source_failed(char **error, const char *label, const char *path, const char *why)
{
        _cleanup_free_ char *shown = escape_text(path, strlen(path), SIZE_MAX, ESCAPE_UTF8);
        if (!shown)
                return error_set_oom(error);
        return error_set(error, -EINVAL, "%s %s: %s", label, shown, why);
}

/* The resolved image dir that real lies below, or NULL. An image dir that does not resolve
 * confines nothing: it is left out. */
static int real_dir_of(const char *real, char *const *image_dirs, char **ret)
{
        for (char *const *d = image_dirs; d && *d; d++) {
                _cleanup_free_ char *dir = realpath(*d, NULL);
                if (!dir) {
                        if (errno == ENOMEM)
                                return -ENOMEM;
                        continue;
                }
                if (path_is_below(real, dir)) {
                        *ret = TAKE_PTR(dir);
                        return 1;
                }
        }
        return 0;
}

/*
 * The typed path must lie under an image dir as written, and its real path under a resolved
 * one; the file is then opened beneath that resolved dir by the remainder of the real path with
 * every symlink refused (openat_beneath), so a link or directory swapped in after realpath()
 * fails the open instead of redirecting it. Callers hand the descriptor on, never the path.
 */
int storage_open_source(const char *label, const char *path, char *const *image_dirs, char **error)
{
        if (!host_path_form_is_valid(path))
                return source_failed(error, label, path,
                                     "must be an absolute path without . or .. components");
        /*
         * As written first: a path outside that links in would be resolved once here and again
         * by whoever opens it later; and a missing file outside reads like any other refusal,
         * so that an API client cannot probe which host files exist.
         */
        if (!below_any(path, image_dirs))
                return source_failed(error, label, path, "not under image_dirs");

        _cleanup_free_ char *real = realpath(path, NULL);
        if (!real) {
                int r = negative_errno();
                if (r == -ENOMEM)
                        return error_set_oom(error);
                return source_failed(error, label, path, strerror(-r));
        }
        _cleanup_free_ char *dir = NULL;
        int r = real_dir_of(real, image_dirs, &dir);
        if (r < 0)
                return error_set_oom(error);
        if (r == 0)
                return source_failed(error, label, path, "not under image_dirs");
        const char *rel = real + strlen(dir);
        while (*rel == '/')
                rel++;

        _cleanup_close_ int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
                return source_failed(error, label, path, strerror(errno));

        /* fstatat() first: opening a device node (even to read) can have effects of its own. */
        struct stat st;
        if (fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return source_failed(error, label, path, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return source_failed(error, label, path, "not a regular file");

        /* O_NONBLOCK: should a FIFO replace the file meanwhile, the open must not wait. */
        _cleanup_close_ int fd = openat_beneath(dirfd, rel, O_RDONLY | O_NOCTTY | O_NONBLOCK);
        if (fd < 0) {
                _cleanup_free_ char *why = NULL;
                if (strprintf(&why, "cannot be read: %s", strerror(-fd)) < 0)
                        return error_set_oom(error);
                return source_failed(error, label, path, why);
        }
        if (fstat(fd, &st) < 0)
                return source_failed(error, label, path, strerror(errno));
        if (!S_ISREG(st.st_mode))
                return source_failed(error, label, path, "not a regular file");
        if (fcntl(fd, F_SETFL, 0) < 0)
                return source_failed(error, label, path, strerror(errno));
        return TAKE_FD(fd);
}
