/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "base.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The read loop of read_file_at() and read_own_file_at(): fd to EOF, at most max bytes. */
static int read_fd_all(int fd, size_t max, char **ret, size_t *ret_size)
{
        /*
         * Read one byte past max so an oversize file is detected, never truncated. The limit
         * stays below SIZE_MAX so that neither max + 1 nor the terminator can wrap around when
         * a caller passes SIZE_MAX for "no limit".
         */
        size_t limit = max < SIZE_MAX - 1 ? max + 1 : SIZE_MAX - 1;
        size_t cap = limit < 4096 ? limit : 4096, used = 0;
        _cleanup_free_ char *buf = malloc(cap + 1);
        if (!buf)
                return -ENOMEM;

        for (;;) {
                if (used == cap) {
                        if (cap == limit)
                                return -EFBIG;
                        size_t next = cap > limit / 2 ? limit : cap * 2;
                        char *grown = realloc(buf, next + 1);
                        if (!grown)
                                return -ENOMEM;
                        buf = grown;
                        cap = next;
                }
                ssize_t n = read(fd, buf + used, cap - used);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (n == 0)
                        break;
                used += (size_t)n;
        }
        if (used > max)
                return -EFBIG;

        buf[used] = 0;
        if (ret_size)
                *ret_size = used;
        *ret = TAKE_PTR(buf);
        return 0;
}

/*
 * Opens path and keeps it only if it is a regular file. O_NONBLOCK: opening a FIFO must not
 * wait for a peer; it is refused after the fstat, and the flag is dropped from a regular file.
 */
static int open_regular(int dirfd, const char *path, int flags, mode_t mode)
{
        _cleanup_close_ int fd =
            openat(dirfd, path, flags | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, mode);
        if (fd < 0)
                return negative_errno();
        struct stat st;
        if (fstat(fd, &st) < 0)
                return negative_errno();
        if (!S_ISREG(st.st_mode))
                return S_ISDIR(st.st_mode) ? -EISDIR : -EBADFD;
        if (fcntl(fd, F_SETFL, flags & O_APPEND) < 0)
                return negative_errno();
        return TAKE_FD(fd);
}

int read_file_at(int dirfd, const char *path, size_t max, char **ret, size_t *ret_size)
{
        _cleanup_close_ int fd = open_regular(dirfd, path, O_RDONLY, 0);
        if (fd < 0)
                return fd;
        return read_fd_all(fd, max, ret, ret_size);
}

int open_own_file_at(int dirfd, const char *path, int flags, mode_t mode)
{
        int fd = open_regular(dirfd, path, flags | O_NOFOLLOW, mode);
        /*
         * O_NOFOLLOW refuses a link with ELOOP, which reads as a loop, and a FIFO without a
         * reader or a socket opened for writing gives ENXIO: say what they are.
         */
        return fd == -ELOOP || fd == -ENXIO ? -EBADFD : fd;
}

int read_own_file_at(int dirfd, const char *path, size_t max, char **ret, size_t *ret_size)
{
        _cleanup_close_ int fd = open_own_file_at(dirfd, path, O_RDONLY, 0);
        if (fd < 0)
                return fd;
        return read_fd_all(fd, max, ret, ret_size);
}

int openat_beneath(int dirfd, const char *path, int flags)
{
        struct open_how how = {
            .flags = (uint64_t)(flags | O_CLOEXEC),
            .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
        };
        /* Through syscall(): glibc 2.36 has no wrapper. */
        long fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
        return fd < 0 ? negative_errno() : (int)fd;
}

const char *file_strerror(int r)
{
        return r == -EBADFD ? "not a regular file" : strerror(-r);
}

int opendir_at(int dirfd, const char *path, int flags, DIR **ret)
{
        int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | flags);
        if (fd < 0)
                return negative_errno();
        DIR *d = fdopendir(fd);
        if (!d) {
                int r = negative_errno();
                close(fd);
                return r;
        }
        *ret = d;
        return 0;
}

int readdir_next(DIR *d, struct dirent **ret)
{
        for (;;) {
                errno = 0;
                struct dirent *de = readdir(d);
                if (!de)
                        return errno ? negative_errno() : 0;
                if (!streq(de->d_name, ".") && !streq(de->d_name, "..")) {
                        *ret = de;
                        return 1;
                }
        }
}

int write_all(int fd, const void *buf, size_t size)
{
        const char *p = buf;
        while (size > 0) {
                ssize_t n = write(fd, p, size);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return negative_errno();
                }
                if (n == 0)
                        return -EIO;
                p += n;
                size -= (size_t)n;
        }
        return 0;
}

int fsync_directory_at(int dirfd, const char *path)
{
        _cleanup_close_ int fd = openat(dirfd, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        if (fsync(fd) < 0)
                return negative_errno();
        return 0;
}

static int fail_at(WriteStep step, WriteStep *failed_step, int error)
{
        if (failed_step)
                *failed_step = step;
        return error;
}

int write_file_atomic_at(int dirfd, const char *name, const void *buf, size_t size, mode_t mode,
                         WriteStep *failed_step)
{
        _cleanup_free_ char *tmp = NULL;
        int r = strprintf(&tmp, "%s.tmp", name);
        if (r < 0)
                return fail_at(WRITE_STEP_CREATE, failed_step, r);

        int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode);
        if (fd < 0)
                return fail_at(WRITE_STEP_CREATE, failed_step, negative_errno());

        /* The umask must not narrow the mode; a failure here belongs to creating the file. */
        WriteStep step = WRITE_STEP_CREATE;
        r = fchmod(fd, mode) < 0 ? negative_errno() : 0;
        if (r >= 0) {
                step = WRITE_STEP_WRITE;
                r = write_all(fd, buf, size);
        }
        if (r >= 0) {
                step = WRITE_STEP_SYNC;
                r = fsync(fd) < 0 ? negative_errno() : 0;
        }
        if (r < 0) {
                close(fd);
                unlinkat(dirfd, tmp, 0);
                return fail_at(step, failed_step, r);
        }
        if (close(fd) < 0) {
                r = negative_errno();
                unlinkat(dirfd, tmp, 0);
                return fail_at(WRITE_STEP_CLOSE, failed_step, r);
        }
        if (renameat(dirfd, tmp, dirfd, name) < 0) {
                r = negative_errno();
                unlinkat(dirfd, tmp, 0);
                return fail_at(WRITE_STEP_RENAME, failed_step, r);
        }
        r = fsync_directory_at(dirfd, ".");
        if (r < 0)
                return fail_at(WRITE_STEP_SYNC_DIR, failed_step, r);
        return 0;
}

/* ---- trees (INST-20, DISK-4) ------------------------------------------------------------------
 */

#define TREE_DEPTH_MAX 32

static int tree_failed(char **error, int r, const char *path)
{
        _cleanup_free_ char *shown = escape_text(path, strlen(path), SIZE_MAX, ESCAPE_UTF8);
        if (!shown)
                return error_set_oom(error);
        return error_set(error, r, "delete %s: %s", shown, strerror(-r));
}

/* Deletes name below parent, whose device is dev; path names it in messages. */
static int tree_delete(int parent, const char *name, const char *path, dev_t dev, unsigned depth,
                       char **error)
{
        struct stat st;
        if (fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
                return errno == ENOENT ? 0 : tree_failed(error, negative_errno(), path);

        /* A symlink is removed as itself, whatever it points to. */
        if (!S_ISDIR(st.st_mode)) {
                if (unlinkat(parent, name, 0) < 0 && errno != ENOENT)
                        return tree_failed(error, negative_errno(), path);
                return 0;
        }
        /* Another filesystem mounted in the tree is not ours to empty. */
        if (st.st_dev != dev)
                return error_set(error, -EXDEV, "delete %s: a mount point", path);
        if (depth >= TREE_DEPTH_MAX)
                return error_set(error, -ELOOP, "delete %s: nested deeper than %d directories",
                                 path, TREE_DEPTH_MAX);

        _cleanup_closedir_ DIR *d = NULL;
        int r = opendir_at(parent, name, O_NOFOLLOW, &d);
        if (r < 0)
                return r == -ENOENT ? 0 : tree_failed(error, r, path);
        struct dirent *de;
        while ((r = readdir_next(d, &de)) > 0) {
                _cleanup_free_ char *child = NULL;
                if (strprintf(&child, "%s/%s", path, de->d_name) < 0)
                        return error_set_oom(error);
                r = tree_delete(dirfd(d), de->d_name, child, st.st_dev, depth + 1, error);
                if (r < 0)
                        return r;
        }
        if (r < 0)
                return tree_failed(error, r, path);

        if (unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
                return tree_failed(error, negative_errno(), path);
        return 0;
}

int tree_delete_at(int dirfd, const char *name, char **error)
{
        if (!name[0] || strchr(name, '/') || streq(name, ".") || streq(name, ".."))
                return error_set(error, -EINVAL, "delete: %s is not a name in the directory",
                                 name[0] ? name : "\"\"");
        struct stat st;
        if (fstat(dirfd, &st) < 0)
                return tree_failed(error, negative_errno(), name);
        return tree_delete(dirfd, name, name, st.st_dev, 0, error);
}
