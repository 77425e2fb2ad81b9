/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "sysfs.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "base/base.h"

int root_open(const char *path, Root **ret)
{
        if (!path || path[0] != '/')
                return -EINVAL;

        _cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();

        Root *r = calloc(1, sizeof *r);
        if (!r)
                return -ENOMEM;
        r->path = strdup(path);
        if (!r->path) {
                free(r);
                return -ENOMEM;
        }
        r->fd = TAKE_FD(fd);
        *ret = r;
        return 0;
}

Root *root_free(Root *r)
{
        if (r) {
                closep(&r->fd);
                free(r->path);
                free(r);
        }
        return NULL;
}

int root_dup(const Root *r, Root **ret)
{
        _cleanup_close_ int fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return negative_errno();
        _cleanup_free_ char *path = strdup(r->path);
        _cleanup_free_ Root *copy = calloc(1, sizeof *copy);
        if (!path || !copy)
                return -ENOMEM;
        copy->fd = TAKE_FD(fd);
        copy->path = TAKE_PTR(path);
        *ret = TAKE_PTR(copy);
        return 0;
}

int root_check_path(const char *rel)
{
        if (!rel || !*rel || rel[0] == '/')
                return -EINVAL;
        for (const char *p = rel; *p;) {
                size_t n = strcspn(p, "/");
                if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return -EINVAL;
                p += n;
                if (*p == '/')
                        p++;
        }
        return 0;
}

int root_read_file(const Root *r, const char *rel, size_t max, char **ret, size_t *ret_size)
{
        int k = root_check_path(rel);
        if (k < 0)
                return k;
        return read_file_at(r->fd, rel, max, ret, ret_size);
}

int root_read_attr(const Root *r, const char *rel, size_t max, char **ret)
{
        char *s;
        int k = root_read_file(r, rel, max, &s, NULL);
        if (k < 0)
                return k;
        *ret = strchomp(s);
        return 0;
}

int root_write_attr(const Root *r, const char *rel, const char *value)
{
        int k = root_check_path(rel);
        if (k < 0)
                return k;

        _cleanup_close_ int fd = openat(r->fd, rel, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return negative_errno();

        /* sysfs takes one write() per value: a retried partial write would be a second value. */
        size_t n = strlen(value);
        ssize_t w;
        do
                w = write(fd, value, n);
        while (w < 0 && errno == EINTR);
        if (w < 0)
                return negative_errno();
        if ((size_t)w != n)
                return -EIO;
        return 0;
}

int root_readlink(const Root *r, const char *rel, char **ret)
{
        int k = root_check_path(rel);
        if (k < 0)
                return k;

        char buf[4096];
        ssize_t n = readlinkat(r->fd, rel, buf, sizeof buf);
        if (n < 0)
                return negative_errno();
        if ((size_t)n >= sizeof buf)
                return -ENAMETOOLONG;
        buf[n] = 0;

        char *s = strdup(buf);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

int root_readlink_basename(const Root *r, const char *rel, char **ret)
{
        _cleanup_free_ char *target = NULL;
        int k = root_readlink(r, rel, &target);
        if (k < 0)
                return k;

        size_t n = strlen(target);
        while (n > 0 && target[n - 1] == '/')
                target[--n] = 0;
        const char *base = strrchr(target, '/');
        base = base ? base + 1 : target;
        if (!*base || streq(base, ".") || streq(base, ".."))
                return -EINVAL;

        char *s = strdup(base);
        if (!s)
                return -ENOMEM;
        *ret = s;
        return 0;
}

int root_opendir(const Root *r, const char *rel, DIR **ret)
{
        int k = root_check_path(rel);
        if (k < 0)
                return k;

        return opendir_at(r->fd, rel, 0, ret);
}

int root_list_dir(const Root *r, const char *rel, char ***ret)
{
        _cleanup_closedir_ DIR *d = NULL;
        _cleanup_strv_free_ char **names = NULL;
        size_t n = 0, cap = 0;

        int k = root_opendir(r, rel, &d);
        if (k < 0)
                return k;

        struct dirent *de;
        while ((k = readdir_next(d, &de)) > 0) {
                if (n + 2 > cap) {
                        size_t next = cap ? cap * 2 : 16;
                        char **grown = realloc(names, next * sizeof(char *));
                        if (!grown)
                                return -ENOMEM;
                        names = grown;
                        cap = next;
                }
                names[n] = strdup(de->d_name);
                if (!names[n])
                        return -ENOMEM;
                names[++n] = NULL;
        }
        if (k < 0)
                return k;

        if (!names) {
                names = calloc(1, sizeof(char *));
                if (!names)
                        return -ENOMEM;
        }
        qsort(names, n, sizeof(char *), strv_compare);
        *ret = TAKE_PTR(names);
        return 0;
}

int root_exists(const Root *r, const char *rel)
{
        int k = root_check_path(rel);
        if (k < 0)
                return k;

        struct stat st;
        if (fstatat(r->fd, rel, &st, AT_SYMLINK_NOFOLLOW) < 0) {
                if (errno == ENOENT || errno == ENOTDIR)
                        return 0;
                return negative_errno();
        }
        return 1;
}

int root_stat(const Root *r, const char *rel, struct stat *ret)
{
        int k = root_check_path(rel);
        if (k < 0)
                return k;
        struct stat st;
        if (fstatat(r->fd, rel, &st, 0) < 0)
                return negative_errno();
        *ret = st;
        return 0;
}
