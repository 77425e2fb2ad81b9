/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The console route (API-2): the tail of an instance's console.log, read on the disk pool. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "instances/instance-internal.h"

typedef struct ConsoleJob {
        int dirfd;
        char id[INSTANCE_ID_LEN + 1];
        size_t tail;
        char *data;
        size_t size;
        InstanceConsoleFunc done;
        void *userdata;
} ConsoleJob;

static int console_job_run(void *data, char **error)
{
        ConsoleJob *j = data;
        _cleanup_free_ char *rel = NULL;
        if (strprintf(&rel, "%s/%s", j->id, INSTANCE_CONSOLE_FILE) < 0)
                return error_set_oom(error);
        _cleanup_close_ int fd = open_own_file_at(j->dirfd, rel, O_RDONLY, 0);
        if (fd == -ENOENT) {
                j->data = strdup("");
                return j->data ? 0 : error_set_oom(error);
        }
        if (fd < 0)
                return error_set(error, fd, "open console log of instance %s: %s", j->id,
                                 file_strerror(fd));
        struct stat st;
        if (fstat(fd, &st) < 0)
                return error_set(error, -errno, "stat console log of instance %s: %m", j->id);
        off_t from = st.st_size > (off_t)j->tail ? st.st_size - (off_t)j->tail : 0;
        size_t want = (size_t)(st.st_size - from);
        j->data = malloc(want + 1);
        if (!j->data)
                return error_set_oom(error);
        size_t got = 0;
        while (got < want) {
                ssize_t k = pread(fd, j->data + got, want - got, from + (off_t)got);
                if (k < 0) {
                        if (errno == EINTR)
                                continue;
                        return error_set(error, -errno, "read console log of instance %s: %m",
                                         j->id);
                }
                if (k == 0)
                        break;
                got += (size_t)k;
        }
        j->size = got;
        return 0;
}

static void console_job_done(int r, void *data, const char *error, void *userdata)
{
        ConsoleJob *j = data;
        (void)userdata;
        if (!j)
                return; /* no deadline is set: the pool never ends this job itself */
        j->done(r, r >= 0 ? j->data : NULL, r >= 0 ? j->size : 0, error, j->userdata);
}

static void console_job_free(void *data)
{
        ConsoleJob *j = data;
        free(j->data);
        free(j);
}

int instance_manager_console(InstanceManager *m, const char *id, size_t tail_bytes,
                             InstanceConsoleFunc done, void *userdata, InstanceFailure *ret_failure,
                             char **ret_error)
{
        if (!instance_find(m, id)) {
                *ret_failure = INSTANCE_FAILURE_NOT_FOUND;
                (void)strprintf(ret_error, "instance %s not found", id);
                return -ENOENT;
        }
        ConsoleJob *j = calloc(1, sizeof *j);
        if (!j) {
                *ret_failure = INSTANCE_FAILURE_INTERNAL;
                *ret_error = strdup("out of memory");
                return -ENOMEM;
        }
        *j = (ConsoleJob){.dirfd = m->cfg.instances_dirfd,
                          .tail = tail_bytes,
                          .done = done,
                          .userdata = userdata};
        snprintf(j->id, sizeof j->id, "%s", id);
        _cleanup_free_ char *error = NULL;
        int r = worker_pool_submit(m->cfg.disk_pool,
                                   &(WorkerJob){.run = console_job_run,
                                                .done = console_job_done,
                                                .data = j,
                                                .free_data = console_job_free},
                                   &error);
        if (r < 0) {
                console_job_free(j);
                *ret_failure = INSTANCE_FAILURE_INTERNAL;
                *ret_error = TAKE_PTR(error);
                return r;
        }
        return 0;
}
