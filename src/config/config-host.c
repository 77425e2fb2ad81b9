/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The parts of the configuration that touch the host: directories and the lock (CFG-5, CFG-9). */
#include "config/config.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

/* dir/name, without doubling the slash of the root directory. */
static int path_join(const char *dir, const char *name, char **ret)
{
        return strprintf(ret, "%s/%s", streq(dir, "/") ? "" : dir, name);
}

/*
 * Creates one directory level with exactly mode (the umask does not get a say: these modes are
 * what CFG-5 promises). An existing directory is left alone, whatever its mode.
 */
static int make_directory(const char *path, mode_t mode)
{
        if (mkdir(path, mode) < 0) {
                if (errno != EEXIST)
                        return negative_errno();
                struct stat st;
                if (stat(path, &st) < 0)
                        return negative_errno();
                return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
        }

        _cleanup_close_ int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        if (fchmod(fd, mode) < 0)
                return negative_errno();
        return 1;
}

int config_prepare_dirs(const Config *c, char **error)
{
        _cleanup_free_ char *instances = NULL;

        int r = make_directory(c->runtime_dir, 0755);
        if (r < 0)
                return error_set(error, r, "create %s: %s", c->runtime_dir, strerror(-r));

        if (path_join(c->data_dir, "instances", &instances) < 0)
                return error_set(error, -ENOMEM, "create %s/instances: %s", c->data_dir,
                                 strerror(ENOMEM));
        r = make_directory(instances, 0700);
        if (r < 0)
                return error_set(error, r, "create %s: %s", instances, strerror(-r));
        return 0;
}

int config_lock_runtime_dir(const Config *c, int *ret_fd, char **error)
{
        _cleanup_free_ char *path = NULL;

        if (path_join(c->runtime_dir, CONFIG_LOCK_FILE, &path) < 0)
                return error_set(error, -ENOMEM, "lock %s/%s: %s", c->runtime_dir, CONFIG_LOCK_FILE,
                                 strerror(ENOMEM));

        /* O_NOFOLLOW: a planted symlink must not make us create or lock some other file. */
        _cleanup_close_ int fd =
            open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY, 0644);
        if (fd < 0) {
                int r = negative_errno();
                return error_set(error, r, "open lock file %s: %s", path, strerror(-r));
        }

        /*
         * flock belongs to the open file description, so a second open of the file conflicts
         * even within one process, and the lock dies with the daemon however it ends.
         */
        if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
                if (errno == EWOULDBLOCK)
                        return error_set(error, -EBUSY, "another vgpud holds %s", path);
                int r = negative_errno();
                return error_set(error, r, "lock %s: %s", path, strerror(-r));
        }

        *ret_fd = TAKE_FD(fd);
        return 0;
}
