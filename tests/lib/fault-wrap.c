/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The fault engine and the wrapped file calls (fault-wrap.h). */
#include "fault-wrap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static struct {
        FaultCall call;
        char match[PATH_MAX];
        int error;
        int remaining; /* failures left; -1 for every matching call */
        int hits;
} fault;

static FaultObserver observer;

static bool ends_with(const char *s, const char *suffix)
{
        size_t n = strlen(s), m = strlen(suffix);
        return n >= m && strcmp(s + n - m, suffix) == 0;
}

void fault_arm(FaultCall call, const char *match, int error, int times)
{
        fault.call = call;
        snprintf(fault.match, sizeof fault.match, "%s", match);
        fault.error = error;
        fault.remaining = times;
        fault.hits = 0;
}

void fault_disarm(void)
{
        fault.call = FAULT_NONE;
}

int fault_hits(void)
{
        return fault.hits;
}

void fault_observe(FaultObserver o)
{
        observer = o;
}

bool fault_hit(FaultCall call, const char *path)
{
        if (fault.call != call || fault.remaining == 0 || !path || !ends_with(path, fault.match))
                return false;
        if (fault.remaining > 0)
                fault.remaining--;
        fault.hits++;
        errno = fault.error;
        return true;
}

bool fault_fd_target(int fd, char buf[static PATH_MAX])
{
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, buf, PATH_MAX - 1);
        if (n < 0)
                return false;
        buf[n] = 0;
        return true;
}

/* A path call: observed, then failed or passed on. */
static bool path_call(FaultCall call, const char *path, int flags)
{
        if (observer)
                observer(call, path, flags);
        return fault_hit(call, path);
}

/* A descriptor call: its target is read only when someone looks at it. */
static bool fd_call(FaultCall call, int fd)
{
        char path[PATH_MAX];
        if (!observer && fault.call != call)
                return false;
        bool known = fault_fd_target(fd, path);
        if (observer)
                observer(call, known ? path : NULL, 0);
        return known && fault_hit(call, path);
}

/* ---- the wrapped calls (fault_wrap_link_args) ----------------------------------------------- */

int __real_mkdirat(int dirfd, const char *path, mode_t mode);
int __real_openat64(int dirfd, const char *path, int flags, ...);
int __real_fstatat64(int dirfd, const char *path, struct stat64 *st, int flags);
ssize_t __real_write(int fd, const void *buf, size_t n);
int __real_fsync(int fd);
int __real_close(int fd);
int __real_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int __real_unlinkat(int dirfd, const char *path, int flags);

int __wrap_mkdirat(int dirfd, const char *path, mode_t mode);
int __wrap_openat64(int dirfd, const char *path, int flags, ...);
int __wrap_fstatat64(int dirfd, const char *path, struct stat64 *st, int flags);
ssize_t __wrap_write(int fd, const void *buf, size_t n);
int __wrap_fsync(int fd);
int __wrap_close(int fd);
int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int __wrap_unlinkat(int dirfd, const char *path, int flags);

int __wrap_mkdirat(int dirfd, const char *path, mode_t mode)
{
        return path_call(FAULT_MKDIRAT, path, 0) ? -1 : __real_mkdirat(dirfd, path, mode);
}

int __wrap_openat64(int dirfd, const char *path, int flags, ...)
{
        int mode = 0;
        if (flags & (O_CREAT | __O_TMPFILE)) {
                va_list ap;
                va_start(ap, flags);
                mode = va_arg(ap, int);
                va_end(ap);
        }
        return path_call(FAULT_OPENAT, path, flags) ? -1
                                                    : __real_openat64(dirfd, path, flags, mode);
}

int __wrap_fstatat64(int dirfd, const char *path, struct stat64 *st, int flags)
{
        return path_call(FAULT_FSTATAT, path, 0) ? -1 : __real_fstatat64(dirfd, path, st, flags);
}

ssize_t __wrap_write(int fd, const void *buf, size_t n)
{
        return fd_call(FAULT_WRITE, fd) ? -1 : __real_write(fd, buf, n);
}

int __wrap_fsync(int fd)
{
        return fd_call(FAULT_FSYNC, fd) ? -1 : __real_fsync(fd);
}

int __wrap_close(int fd)
{
        if (!fd_call(FAULT_CLOSE, fd))
                return __real_close(fd);
        /* Linux closes the descriptor even when close() reports an error. */
        int error = errno;
        (void)__real_close(fd);
        errno = error;
        return -1;
}

int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
        return path_call(FAULT_RENAMEAT, oldpath, 0)
                   ? -1
                   : __real_renameat(olddirfd, oldpath, newdirfd, newpath);
}

int __wrap_unlinkat(int dirfd, const char *path, int flags)
{
        return path_call(FAULT_UNLINKAT, path, 0) ? -1 : __real_unlinkat(dirfd, path, flags);
}
