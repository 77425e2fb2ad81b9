/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The one door for children (decision 13): QEMU through vmm_spawn(), helper programs (`qemu
 * -device help` today, qemu-img and dnsmasq next) through spawn_run_helper(). Both block on the
 * kernel (the spawn, the wait for a helper), so they run on worker threads; that is also why
 * the primitive lives in worker/, below vmm/ and hostcheck/, next to the helper pool that will
 * run most of its calls.
 */
#include "worker/worker.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- the start ----------------------------------------------------------------------------- */

typedef struct SpawnSetup {
        posix_spawn_file_actions_t actions;
        posix_spawnattr_t attr;
        bool have_actions, have_attr;
} SpawnSetup;

static void spawn_setup_done(SpawnSetup *s)
{
        if (s->have_actions)
                posix_spawn_file_actions_destroy(&s->actions);
        if (s->have_attr)
                posix_spawnattr_destroy(&s->attr);
}

/*
 * The descriptor each child number takes, in the order of the dup2() actions: stdin, stdout,
 * stderr, then the passed ones. A source numbered below every target's end is first copied
 * (close-on-exec) above it: then no dup2() overwrites a source still to be duplicated, and none
 * is its own target (dup2() onto itself would keep the close-on-exec flag, and the child would
 * not get it). Only those are copied, so a caller near its descriptor limit still spawns (VMM-14).
 */
typedef struct ChildFds {
        int fd[3 + SPAWN_PASSED_FDS_MAX];
        int copy[3 + SPAWN_PASSED_FDS_MAX]; /* ours to close; -1 where fd is the caller's */
        size_t n;
} ChildFds;

static void child_fds_done(ChildFds *c)
{
        for (size_t i = 0; i < c->n; i++)
                closep(&c->copy[i]);
        c->n = 0;
}

static int child_fds_copy(ChildFds *c, const int *fds, size_t n)
{
        int floor = (int)n;
        for (size_t i = 0; i < n; i++) {
                c->copy[i] = -1;
                c->fd[i] = fds[i];
                c->n = i + 1;
                if (fds[i] >= floor)
                        continue;
                /* stdout and stderr are often the same file: one copy serves both. */
                for (size_t k = 0; k < i && c->copy[i] < 0; k++)
                        if (fds[k] == fds[i] && c->copy[k] >= 0)
                                c->fd[i] = c->fd[k];
                if (c->fd[i] != fds[i])
                        continue;
                int fd = fcntl(fds[i], F_DUPFD_CLOEXEC, floor);
                if (fd < 0)
                        return negative_errno();
                c->fd[i] = c->copy[i] = fd;
        }
        return 0;
}

/*
 * glibc keeps the signals below SIGRTMIN for itself, and sigfillset() leaves them out. Its
 * posix_spawn child then sets every such signal to SIG_IGN (they are blocked while it runs),
 * and an ignored signal stays ignored across execve: the child would start with two ignored
 * signals. Named in the default set, they get SIG_DFL like the rest. sigaddset() refuses them,
 * so the bits are set by hand.
 */
static void add_libc_internal_signals(sigset_t *set)
{
        const size_t bits = 8 * sizeof(set->__val[0]);
        for (int sig = __SIGRTMIN; sig < SIGRTMIN; sig++)
                set->__val[(size_t)(sig - 1) / bits] |= 1UL << ((size_t)(sig - 1) % bits);
}

/* c->fd[0..2] to 0..2, c->fd[3..] to 3.., everything else closed; a clean signal state. */
static int spawn_setup(SpawnSetup *s, const ChildFds *c)
{
        sigset_t empty, all;
        int r;

        r = posix_spawn_file_actions_init(&s->actions);
        if (r != 0)
                return -r;
        s->have_actions = true;
        r = posix_spawnattr_init(&s->attr);
        if (r != 0)
                return -r;
        s->have_attr = true;

        for (size_t i = 0; r == 0 && i < c->n; i++)
                r = posix_spawn_file_actions_adddup2(&s->actions, c->fd[i], (int)i);
        /* Nothing else is inherited: the daemon's sockets, its lock, other VMs' files. */
        if (r == 0)
                r = posix_spawn_file_actions_addclosefrom_np(&s->actions, (int)c->n);
        if (r != 0)
                return -r;

        /* The daemon blocks SIGCHLD, SIGTERM, SIGINT and SIGHUP (VMM-4); a child must not
         * inherit that, nor any ignored signal, or its own shutdown on SIGTERM would not work.
         * Its own session makes its process group killable as one (VMM-10, helper deadlines). */
        sigemptyset(&empty);
        sigfillset(&all);
        add_libc_internal_signals(&all);
        r = posix_spawnattr_setsigmask(&s->attr, &empty);
        if (r == 0)
                r = posix_spawnattr_setsigdefault(&s->attr, &all);
        if (r == 0)
                r = posix_spawnattr_setflags(&s->attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                                           POSIX_SPAWN_SETSIGDEF);
        return -r;
}

/*
 * posix_spawn has no rlimit action, setrlimit() here would bind the whole daemon, and a
 * prlimit() after posix_spawn returns comes after the exec, too late for a quick helper. So a
 * child with limits starts as a shell that stops itself before it execs the helper in its own
 * place (same pid, same session): the limits are set on the stopped shell and survive the exec.
 */
#define SPAWN_SHELL "/bin/sh"
#define STOP_THEN_EXEC "kill -STOP $$ && exec \"$0\" \"$@\""

static bool limits_wanted(const SpawnLimits *l)
{
        return l->as_bytes || l->cpu_seconds || l->nofile || l->nice;
}

/* sh -c STOP_THEN_EXEC argv[0] argv[1]...: "$0" is the helper's path, "$@" its arguments. */
static int wrap_argv(char *const *argv, char ***ret)
{
        size_t n = strv_length((char **)argv);
        char **w = calloc(n + 4, sizeof(char *));
        if (!w)
                return -ENOMEM;
        w[0] = (char *)SPAWN_SHELL;
        w[1] = (char *)"-c";
        w[2] = (char *)STOP_THEN_EXEC;
        for (size_t i = 0; i < n; i++)
                w[3 + i] = argv[i];
        *ret = w; /* the array only: its strings are borrowed */
        return 0;
}

static int apply_limits(pid_t pid, const SpawnLimits *l)
{
        const struct {
                int resource;
                uint64_t value;
        } limits[] = {
            {RLIMIT_AS, l->as_bytes},
            {RLIMIT_CPU, l->cpu_seconds},
            {RLIMIT_NOFILE, l->nofile},
        };
        for (size_t i = 0; i < ELEMENTSOF(limits); i++) {
                if (limits[i].value == 0)
                        continue;
                struct rlimit rl = {.rlim_cur = limits[i].value, .rlim_max = limits[i].value};
                if (prlimit(pid, limits[i].resource, &rl, NULL) < 0)
                        return negative_errno();
        }
        if (l->nice > 0 && setpriority(PRIO_PROCESS, (id_t)pid, l->nice) < 0)
                return negative_errno();
        return 0;
}

/* Waits for the wrapper shell to stop itself, limits it, lets it exec the helper. */
static int limit_stopped_child(pid_t pid, const SpawnLimits *l)
{
        siginfo_t si = {0};
        while (waitid(P_PID, (id_t)pid, &si, WSTOPPED | WEXITED) < 0)
                if (errno != EINTR)
                        return negative_errno();
        if (si.si_code != CLD_STOPPED)
                return -ECHILD; /* the shell ended (and is reaped) before the helper ran */
        int r = apply_limits(pid, l);
        if (r < 0)
                return r;
        return kill(pid, SIGCONT) < 0 ? negative_errno() : 0;
}

/* Called through syscall(), so that nothing depends on how a libc wraps it. */
static int pidfd_open(pid_t pid)
{
        long fd = syscall(SYS_pidfd_open, pid, 0);
        return fd < 0 ? negative_errno() : (int)fd;
}

static void kill_and_reap(pid_t pid)
{
        (void)kill(-pid, SIGKILL);
        (void)kill(pid, SIGKILL);
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
                ;
}

/* The start shared by spawn_start() and spawn_run_helper(); verb begins the messages. */
static int start(const SpawnRequest *req, const char *verb, SpawnedChild *ret, char **error)
{
        _cleanup_(spawn_setup_done) SpawnSetup setup = {0};
        _cleanup_(child_fds_done) ChildFds child = {.n = 0};
        char *const default_env[] = {(char *)SPAWN_PATH_ENV, NULL};
        const char *binary = req->argv && req->argv[0] ? req->argv[0] : NULL;
        const char *null_device = req->null_device ? req->null_device : "/dev/null";
        pid_t pid;
        int r;

        if (!binary)
                return error_set(error, -EINVAL, "%s: empty command line", verb);
        if (req->n_fds > SPAWN_PASSED_FDS_MAX)
                return error_set(error, -E2BIG, "%s %s: %zu descriptors to pass, at most %d", verb,
                                 binary, req->n_fds, SPAWN_PASSED_FDS_MAX);

        _cleanup_close_ int null_fd = -1;
        if (req->stdin_fd < 0 || req->stdout_fd < 0) {
                null_fd = open(null_device, O_RDWR | O_CLOEXEC | O_NOCTTY);
                if (null_fd < 0) {
                        r = negative_errno();
                        return error_set(error, r, "%s %s: open %s: %s", verb, binary, null_device,
                                         strerror(-r));
                }
        }
        int all[3 + SPAWN_PASSED_FDS_MAX];
        all[0] = req->stdin_fd >= 0 ? req->stdin_fd : null_fd;
        all[1] = req->stdout_fd >= 0 ? req->stdout_fd : null_fd;
        all[2] = req->stderr_fd >= 0 ? req->stderr_fd : all[1];
        for (size_t i = 0; i < req->n_fds; i++)
                all[3 + i] = req->fds[i];
        r = child_fds_copy(&child, all, 3 + req->n_fds);
        if (r < 0)
                return error_set(error, r, "%s %s: pass descriptors: %s", verb, binary,
                                 strerror(-r));
        r = spawn_setup(&setup, &child);
        if (r < 0)
                return error_set(error, r, "%s %s: %s", verb, binary, strerror(-r));

        bool limited = limits_wanted(&req->limits);
        _cleanup_free_ char **wrapped = NULL;
        if (limited) {
                /* The helper itself must exist: the shell would only say so after its stop. */
                if (access(binary, X_OK) < 0) {
                        r = negative_errno();
                        return error_set(error, r, "%s %s: %s", verb, binary, strerror(-r));
                }
                r = wrap_argv(req->argv, &wrapped);
                if (r < 0)
                        return error_set_oom(error);
        }

        /* argv[0] is a path from configuration: posix_spawn, not posix_spawnp. */
        r = posix_spawn(&pid, limited ? SPAWN_SHELL : binary, &setup.actions, &setup.attr,
                        limited ? wrapped : req->argv, req->envp ? req->envp : default_env);
        if (r != 0)
                return error_set(error, -r, "%s %s: %s", verb, limited ? SPAWN_SHELL : binary,
                                 strerror(r));

        if (limited) {
                r = limit_stopped_child(pid, &req->limits);
                if (r < 0) {
                        /* A child without its limits must not run on. */
                        kill_and_reap(pid);
                        return error_set(error, r, "%s %s: set resource limits: %s", verb, binary,
                                         strerror(-r));
                }
        }

        /* The child is not reaped until its owner waits, so its pid stays its own (VMM-14). */
        SpawnedChild s = {.pid = pid, .pidfd = pidfd_open(pid)};
        if (s.pidfd < 0) {
                s.pidfd_error = s.pidfd;
                s.pidfd = -1;
        }
        *ret = s;
        return 0;
}

int spawn_start(const SpawnRequest *req, SpawnedChild *ret, char **error)
{
        return start(req, "spawn", ret, error);
}

/* ---- helpers: a deadline and bounded output ------------------------------------------------ */

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

/* Reads the child's output to EOF, streaming it to req's on_output: 0, -ETIME at the
 * deadline, -errno. */
static int collect_output(const SpawnRequest *req, int fd, nsec_t deadline, size_t max, char **buf,
                          size_t *size)
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
                if (req->on_output)
                        req->on_output(chunk, (size_t)n, req->output_userdata);
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

typedef struct Pipe {
        int fd[2];
} Pipe;

static void pipe_done(Pipe *p)
{
        closep(&p->fd[0]);
        closep(&p->fd[1]);
}

int spawn_run_helper(const SpawnRequest *req, nsec_t deadline, size_t max_output, char **ret_output,
                     int *ret_status, char **error)
{
        const char *binary = req->argv && req->argv[0] ? req->argv[0] : "";
        _cleanup_(pipe_done) Pipe out = {{-1, -1}};
        _cleanup_free_ char *output = NULL;
        size_t size = 0;
        SpawnedChild s;
        int r;

        if (pipe2(out.fd, O_CLOEXEC) < 0) {
                r = negative_errno();
                return error_set(error, r, "run %s: %s", binary, strerror(-r));
        }
        /* stdin at EOF; stdout and stderr into one pipe, read here. */
        SpawnRequest helper = *req;
        helper.stdin_fd = -1;
        helper.stdout_fd = out.fd[1];
        helper.stderr_fd = out.fd[1];
        r = start(&helper, "run", &s, error);
        if (r < 0)
                return r;
        /* Our end only: its output ends when it and everything it started have closed theirs. */
        closep(&out.fd[1]);

        _cleanup_close_ int pidfd = s.pidfd;
        if (pidfd < 0) {
                kill_and_reap(s.pid);
                return error_set(error, s.pidfd_error, "run %s: pidfd_open: %s", binary,
                                 strerror(-s.pidfd_error));
        }

        r = collect_output(req, out.fd[0], deadline, max_output, &output, &size);
        /* Output closed is not an exit: a child may close it and go on. */
        if (r >= 0 && (r = wait_readable(pidfd, deadline)) == 0)
                r = -ETIME;
        if (r < 0) {
                /* The whole session's group: a shell's children go with it. */
                kill_and_reap(s.pid);
                if (r == -ETIME)
                        return error_set(error, r, "%s did not finish in time", binary);
                return error_set(error, r, "run %s: %s", binary, strerror(-r));
        }

        int status;
        while (waitpid(s.pid, &status, 0) < 0)
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
