/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Running a helper with a deadline (`qemu_binary -device help`): posix_spawn with an explicit
 * argv and environment, its output through a pipe, a pidfd to wait on, and the whole process
 * group killed when the deadline passes (a shell wrapper's children go with it).
 */
#include "hostcheck.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#define SPAWN_PATH "PATH=/usr/sbin:/usr/bin:/sbin:/bin"

static nsec_t now_monotonic(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (nsec_t)ts.tv_sec * NSEC_PER_SEC + (nsec_t)ts.tv_nsec;
}

/* Milliseconds left until deadline, rounded up, so a poll never wakes just before it. */
static int ms_until(nsec_t deadline)
{
        nsec_t now = now_monotonic();
        if (now >= deadline)
                return 0;
        nsec_t ms = (deadline - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC;
        return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/*
 * A pipe end that the child gets on 0, 1 or 2 must not be one of those numbers already: a
 * dup2() onto itself keeps the close-on-exec flag, and the child would lose it.
 */
static int above_stdio(int *fd)
{
        if (*fd > STDERR_FILENO)
                return 0;
        int moved = fcntl(*fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
        if (moved < 0)
                return negative_errno();
        close(*fd);
        *fd = moved;
        return 0;
}

typedef struct Pipe {
        int fd[2];
} Pipe;

static void pipe_done(Pipe *p)
{
        closep(&p->fd[0]);
        closep(&p->fd[1]);
}

static int pipe_open(Pipe *p)
{
        if (pipe2(p->fd, O_CLOEXEC) < 0)
                return negative_errno();
        int r = above_stdio(&p->fd[0]);
        return r < 0 ? r : above_stdio(&p->fd[1]);
}

typedef struct SpawnPlan {
        posix_spawn_file_actions_t actions;
        posix_spawnattr_t attr;
        bool actions_ready, attr_ready;
} SpawnPlan;

static void spawn_plan_done(SpawnPlan *p)
{
        if (p->actions_ready)
                posix_spawn_file_actions_destroy(&p->actions);
        if (p->attr_ready)
                posix_spawnattr_destroy(&p->attr);
}

/* stdin from in, stdout and stderr to out, nothing else; default signals; a group of its own. */
static int spawn_plan_init(SpawnPlan *p, int in, int out)
{
        sigset_t none, all;
        int e;

        if ((e = posix_spawn_file_actions_init(&p->actions)) != 0)
                return -e;
        p->actions_ready = true;
        if ((e = posix_spawnattr_init(&p->attr)) != 0)
                return -e;
        p->attr_ready = true;

        if ((e = posix_spawn_file_actions_adddup2(&p->actions, in, STDIN_FILENO)) != 0 ||
            (e = posix_spawn_file_actions_adddup2(&p->actions, out, STDOUT_FILENO)) != 0 ||
            (e = posix_spawn_file_actions_adddup2(&p->actions, out, STDERR_FILENO)) != 0 ||
            (e = posix_spawn_file_actions_addclosefrom_np(&p->actions, STDERR_FILENO + 1)) != 0)
                return -e;

        sigemptyset(&none);
        sigfillset(&all);
        if ((e = posix_spawnattr_setsigmask(&p->attr, &none)) != 0 ||
            (e = posix_spawnattr_setsigdefault(&p->attr, &all)) != 0 ||
            (e = posix_spawnattr_setpgroup(&p->attr, 0)) != 0 ||
            (e = posix_spawnattr_setflags(&p->attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF |
                                                        POSIX_SPAWN_SETPGROUP)) != 0)
                return -e;
        return 0;
}

/* The group goes, and the child is reaped, before the call returns. */
static void kill_group(pid_t pid)
{
        (void)kill(-pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
}

/* Waits until fd is readable or deadline: 1 readable, 0 deadline, -errno. */
static int wait_readable(int fd, nsec_t deadline)
{
        for (;;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int n = poll(&p, 1, ms_until(deadline));
                if (n > 0)
                        return 1;
                if (n == 0)
                        return 0;
                if (errno != EINTR)
                        return negative_errno();
        }
}

/* Reads the child's output to EOF: 0, -ETIME at the deadline, -errno. */
static int collect_output(int fd, nsec_t deadline, size_t max, char **buf, size_t *size)
{
        char chunk[4096];

        for (;;) {
                int r = wait_readable(fd, deadline);
                if (r <= 0)
                        return r == 0 ? -ETIME : r;
                ssize_t n = read(fd, chunk, sizeof chunk);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negative_errno();
                if (n == 0)
                        return 0;
                size_t room = *size < max ? max - *size : 0;
                size_t keep = (size_t)n < room ? (size_t)n : room;
                if (keep == 0)
                        continue; /* past the cap: drained, so the child never blocks on us */
                char *grown = realloc(*buf, *size + keep + 1);
                if (!grown)
                        return -ENOMEM;
                memcpy(grown + *size, chunk, keep);
                *size += keep;
                grown[*size] = '\0';
                *buf = grown;
        }
}

int host_check_spawn(char *const argv[], nsec_t deadline, size_t max_output, char **ret_output,
                     int *ret_status, char **error)
{
        char *const env[] = {(char *)SPAWN_PATH, NULL};
        const char *binary = argv && argv[0] ? argv[0] : NULL;
        _cleanup_(pipe_done) Pipe in = {{-1, -1}}, out = {{-1, -1}};
        _cleanup_(spawn_plan_done) SpawnPlan plan = {};
        _cleanup_free_ char *output = NULL;
        size_t size = 0;
        pid_t pid;
        int r;

        if (!binary)
                return error_set(error, -EINVAL, "spawn: empty command line");
        if ((r = pipe_open(&in)) < 0 || (r = pipe_open(&out)) < 0 ||
            (r = spawn_plan_init(&plan, in.fd[0], out.fd[1])) < 0)
                return error_set(error, r, "spawn %s: %s", binary, strerror(-r));

        /* A path from configuration: posix_spawn, never a search of PATH. */
        r = posix_spawn(&pid, binary, &plan.actions, &plan.attr, argv, env);
        if (r != 0)
                return error_set(error, -r, "run %s: %s", binary, strerror(r));

        /* Our ends only: the child's stdin reads EOF at once, its output ends when it exits. */
        pipe_done(&in);
        closep(&out.fd[1]);

        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0) {
                r = negative_errno();
                kill_group(pid);
                return error_set(error, r, "run %s: pidfd_open: %s", binary, strerror(-r));
        }

        r = collect_output(out.fd[0], deadline, max_output, &output, &size);
        /* Output closed is not an exit: a child may close it and go on. */
        if (r >= 0 && (r = wait_readable(pidfd, deadline)) == 0)
                r = -ETIME;
        if (r < 0) {
                kill_group(pid);
                if (r == -ETIME)
                        return error_set(error, r, "%s did not finish in time", binary);
                return error_set(error, r, "run %s: %s", binary, strerror(-r));
        }

        int status;
        while (waitpid(pid, &status, 0) < 0)
                if (errno != EINTR) {
                        r = negative_errno();
                        return error_set(error, r, "run %s: wait: %s", binary, strerror(-r));
                }
        if (!output && !(output = strdup("")))
                return error_set_oom(error);
        *ret_output = TAKE_PTR(output);
        *ret_status = status;
        return 0;
}
