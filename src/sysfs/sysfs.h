/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * sysfs: rooted, read-mostly access to a sysfs, /dev or /proc tree (GEN-1).
 *
 * A Root is a directory fd opened once from configuration; every access below it uses *at()
 * calls with relative paths. Paths that are absolute or contain a ".." component are refused
 * with -EINVAL, so a value read from the tree can never steer an access outside it. Reads are
 * bounded; writes are one write() on an O_WRONLY|O_CLOEXEC descriptor, as sysfs wants.
 */

#include <dirent.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/stat.h>

#include "base/base.h"

typedef struct Root {
        int fd;
        char *path; /* as configured, for messages */
} Root;

/* Opens path (which must be absolute) as a directory. */
int root_open(const char *path, Root **ret);
Root *root_free(Root *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(Root *, root_free);
#define _cleanup_root_ __attribute__((cleanup(root_freep)))

/*
 * An independent copy (its own descriptor). A job abandoned at its deadline keeps running after
 * the loop has moved on, possibly after the root's owner is gone, so jobs work on a copy.
 */
int root_dup(const Root *r, Root **ret);

/* -EINVAL unless rel is a non-empty relative path without "." or ".." components. */
int root_check_path(const char *rel);

/* Reads a whole file, at most max bytes (-EFBIG beyond), NUL-terminated. */
int root_read_file(const Root *r, const char *rel, size_t max, char **ret, size_t *ret_size);

/* Reads a short attribute (at most max bytes) and removes one trailing newline. */
int root_read_attr(const Root *r, const char *rel, size_t max, char **ret);

/* Writes value in one write() call, no newline added. */
int root_write_attr(const Root *r, const char *rel, const char *value);

/* The target of a symbolic link, as stored (relative links stay relative). */
int root_readlink(const Root *r, const char *rel, char **ret);
/* The last component of a link's target ("../../0000:e3:00.0" gives "0000:e3:00.0"). */
int root_readlink_basename(const Root *r, const char *rel, char **ret);

/* Opens a directory below the root for listing. */
int root_opendir(const Root *r, const char *rel, DIR **ret);

/*
 * Lists the names in a directory (without "." and ".."), sorted with strcmp, as a
 * NULL-terminated vector.
 */
int root_list_dir(const Root *r, const char *rel, char ***ret);

/* 1 if rel exists (lstat), 0 if not (ENOENT or ENOTDIR), -errno on other errors. */
int root_exists(const Root *r, const char *rel);

/* stat(2) of rel, following symbolic links (sysfs device entries are links). */
int root_stat(const Root *r, const char *rel, struct stat *ret);
