/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "agent/probe.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "agent/kmsg.h" /* NSEC_INFINITY */

int probe_init(Probe *p, const char *binary, nsec_t kill_after, nsec_t retry_after,
               nsec_t give_up_after)
{
        char *b = NULL;
        if (binary && !(b = strdup(binary)))
                return -ENOMEM;
        *p = (Probe){
            .binary = b,
            .kill_after = kill_after,
            .retry_after = retry_after,
            .give_up_after = give_up_after,
            .state = PROBE_IDLE,
            .pid = 0,
            .out_fd = -1,
        };
        return 0;
}

static void probe_close_output(Probe *p)
{
        if (p->out_fd >= 0)
                close(p->out_fd);
        p->out_fd = -1;
}

void probe_done(Probe *p)
{
        if (p->state == PROBE_RUNNING && p->pid > 0) {
                /* Not waited for: a child stuck in the driver would hold the exit forever. */
                kill(p->pid, SIGKILL);
                (void)waitpid(p->pid, NULL, WNOHANG);
        }
        probe_close_output(p);
        p->binary = (free(p->binary), NULL);
        p->resolved = (free(p->resolved), NULL);
}

static bool is_executable_file(const char *path)
{
        struct stat st;
        return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

int probe_find_binary(const char *binary, char **ret)
{
        if (binary) {
                if (!is_executable_file(binary))
                        return -ENOENT;
                char *copy = strdup(binary);
                if (!copy)
                        return -ENOMEM;
                *ret = copy;
                return 0;
        }

        const char *dirs = PROBE_PATH;
        while (*dirs) {
                size_t n = strcspn(dirs, ":");
                _cleanup_free_ char *path = NULL;
                if (strprintf(&path, "%.*s/nvidia-smi", (int)n, dirs) < 0)
                        return -ENOMEM;
                if (is_executable_file(path)) {
                        *ret = TAKE_PTR(path);
                        return 0;
                }
                dirs += n;
                if (*dirs == ':')
                        dirs++;
        }
        return -ENOENT;
}

static nsec_t add_sat(nsec_t a, nsec_t b)
{
        return a > NSEC_INFINITY - b ? NSEC_INFINITY : a + b;
}

static int probe_spawn(Probe *p, pid_t *ret_pid, int *ret_fd)
{
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) < 0)
                return negative_errno();
        _cleanup_close_ int rfd = fds[0], wfd = fds[1];
        if (fcntl(rfd, F_SETFL, O_NONBLOCK) < 0)
                return negative_errno();

        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        int r = posix_spawn_file_actions_init(&fa);
        if (r != 0)
                return -r;
        r = posix_spawnattr_init(&attr);
        if (r != 0) {
                posix_spawn_file_actions_destroy(&fa);
                return -r;
        }

        /* The agent blocks the signals its signalfd reads and ignores SIGPIPE; the probe must
         * start with neither, or it could not be stopped the ordinary way. */
        sigset_t none, all;
        sigemptyset(&none);
        sigfillset(&all);
        char *argv[] = {p->resolved, (char *)"-L", NULL};
        char *envp[] = {(char *)"PATH=" PROBE_PATH, NULL};
        pid_t pid;

        if ((r = posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0)) ||
            (r = posix_spawn_file_actions_adddup2(&fa, wfd, STDOUT_FILENO)) ||
            (r = posix_spawn_file_actions_adddup2(&fa, wfd, STDERR_FILENO)) ||
            (r = posix_spawnattr_setsigmask(&attr, &none)) ||
            (r = posix_spawnattr_setsigdefault(&attr, &all)) ||
            (r = posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)))
                ;
        else
                r = posix_spawn(&pid, p->resolved, &fa, &attr, argv, envp);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        if (r != 0)
                return -r;

        *ret_pid = pid;
        *ret_fd = TAKE_FD(rfd);
        return 0;
}

static void probe_schedule_retry(Probe *p, nsec_t now);

static void probe_attempt(Probe *p, nsec_t now)
{
        pid_t pid;
        int fd;

        p->attempts++;
        p->started = now;
        p->killed = false;
        p->out_len = 0;
        p->out_dropped = 0;
        int r = probe_spawn(p, &pid, &fd);
        if (r < 0) {
                log_warning_errno(r, "GPU init probe attempt %u: run %s: %m", p->attempts,
                                  p->resolved);
                probe_schedule_retry(p, now);
                return;
        }
        log_debug("GPU init probe attempt %u: %s -L (pid %d)", p->attempts, p->resolved, (int)pid);
        p->pid = pid;
        p->out_fd = fd;
        p->state = PROBE_RUNNING;
}

void probe_start(Probe *p, nsec_t now)
{
        if (p->state != PROBE_IDLE)
                return;

        int r = probe_find_binary(p->binary, &p->resolved);
        if (r < 0) {
                if (r == -ENOENT)
                        log_notice("GPU init probe disabled: %s not found",
                                   p->binary ? p->binary : "nvidia-smi on " PROBE_PATH);
                else
                        log_error_errno(r, "GPU init probe disabled: %m");
                p->state = PROBE_DISABLED;
                return;
        }
        p->began = now;
        probe_attempt(p, now);
}

int probe_fd(const Probe *p)
{
        return p->out_fd;
}

void probe_on_output(Probe *p)
{
        char scratch[4096];

        while (p->out_fd >= 0) {
                size_t room = sizeof p->out - p->out_len;
                char *dst = room > 0 ? p->out + p->out_len : scratch;
                size_t want = room > 0 ? room : sizeof scratch;
                ssize_t k = read(p->out_fd, dst, want);
                if (k > 0) {
                        if (room > 0)
                                p->out_len += (size_t)k;
                        else
                                p->out_dropped += (size_t)k;
                        continue;
                }
                if (k < 0 && errno == EINTR)
                        continue;
                if (k < 0 && errno == EAGAIN)
                        return;
                /* EOF (every writer closed) or an error: nothing more to read. */
                probe_close_output(p);
        }
}

nsec_t probe_deadline(const Probe *p)
{
        switch (p->state) {
        case PROBE_RUNNING:
                return p->killed ? NSEC_INFINITY : add_sat(p->started, p->kill_after);
        case PROBE_WAITING:
                return p->retry_at;
        default:
                return NSEC_INFINITY;
        }
}

void probe_on_timer(Probe *p, nsec_t now)
{
        char d[DURATION_STRLEN];

        if (p->state == PROBE_RUNNING && !p->killed && now >= add_sat(p->started, p->kill_after)) {
                log_warning("GPU init probe attempt %u (pid %d) killed after %s", p->attempts,
                            (int)p->pid, format_duration(p->kill_after, d));
                if (kill(p->pid, SIGKILL) < 0)
                        log_warning_errno(negative_errno(), "kill GPU init probe pid %d: %m",
                                          (int)p->pid);
                /* Reaped on SIGCHLD like any exit; until then no new attempt starts. */
                p->killed = true;
        } else if (p->state == PROBE_WAITING && now >= p->retry_at)
                probe_attempt(p, now);
}

static void probe_schedule_retry(Probe *p, nsec_t now)
{
        char d[DURATION_STRLEN];
        nsec_t next = add_sat(now, p->retry_after);

        if (next > add_sat(p->began, p->give_up_after)) {
                log_warning("GPU init probe gave up after %s",
                            format_duration(p->give_up_after, d));
                p->state = PROBE_GAVE_UP;
                return;
        }
        p->retry_at = next;
        p->state = PROBE_WAITING;
}

/* The first PROBE_OUTPUT_MAX bytes of what the attempt wrote, one log line per line. */
static void probe_log_output(Probe *p)
{
        size_t start = 0;
        while (start < p->out_len) {
                const char *nl = memchr(p->out + start, '\n', p->out_len - start);
                size_t end = nl ? (size_t)(nl - p->out) : p->out_len;
                _cleanup_free_ char *line =
                    escape_text(p->out + start, end - start, SIZE_MAX, ESCAPE_ECHO);
                if (line)
                        log_info("GPU init probe output: %s", line);
                start = end + 1;
        }
        if (p->out_dropped > 0)
                log_info("GPU init probe output: %zu more bytes not shown", p->out_dropped);
}

ProbeResult probe_on_sigchld(Probe *p, nsec_t now)
{
        if (p->state != PROBE_RUNNING)
                return PROBE_RESULT_NONE;

        int status;
        pid_t r = waitpid(p->pid, &status, WNOHANG);
        if (r == 0 || (r < 0 && errno == EINTR))
                return PROBE_RESULT_NONE;
        if (r < 0) {
                /* Only a bug could take the child away from us; count it as a failure. */
                log_error_errno(negative_errno(), "wait for GPU init probe pid %d: %m",
                                (int)p->pid);
                status = -1;
        }

        probe_on_output(p); /* what the child wrote just before it exited */
        probe_close_output(p);
        p->pid = 0;

        if (r > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                log_debug("GPU init probe attempt %u succeeded", p->attempts);
                p->state = PROBE_SUCCEEDED;
                return PROBE_RESULT_OK;
        }

        char how[64];
        if (r < 0)
                snprintf(how, sizeof how, "was lost");
        else if (WIFEXITED(status))
                snprintf(how, sizeof how, "exited with status %d", WEXITSTATUS(status));
        else if (WIFSIGNALED(status))
                snprintf(how, sizeof how, "was killed by signal %d%s", WTERMSIG(status),
                         p->killed ? " (timeout)" : "");
        else
                snprintf(how, sizeof how, "ended with wait status 0x%x", (unsigned)status);
        log_warning("GPU init probe attempt %u: %s -L %s", p->attempts, p->resolved, how);
        probe_log_output(p);
        probe_schedule_retry(p, now);
        return PROBE_RESULT_NONE;
}
