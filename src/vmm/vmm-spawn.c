/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Starting QEMU (VMM-3, VMM-4), the boot id, and the last line of qemu.log (VMM-5). All of it
 * blocks on the file system or on the kernel, so it runs on worker threads (GEN-2).
 */
#include "vmm.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "vmm-internal.h"

/* The part of qemu.log searched backwards for its last line: QEMU's reason is at the end. */
#define LOG_TAIL_MAX (1024u * 1024u)
#define LOG_BLOCK 4096u

#define BOOT_ID_PATH "sys/kernel/random/boot_id"

const char *vmm_signal_name(int sig, char buf[static 16])
{
        const char *abbrev = sigabbrev_np(sig);
        if (abbrev)
                snprintf(buf, 16, "SIG%s", abbrev);
        else
                snprintf(buf, 16, "SIG%d", sig);
        return buf;
}

/*
 * O_CLOEXEC descriptors at 3 or above: a descriptor the spawn duplicates onto 0, 1 or 2 must
 * not already be that number, since dup2() onto itself would keep its close-on-exec flag.
 */
static int open_above_stdio(int dirfd, const char *path, int flags, mode_t mode)
{
        _cleanup_close_ int fd = openat(dirfd, path, flags | O_CLOEXEC | O_NOCTTY, mode);
        if (fd < 0)
                return negative_errno();
        if (fd > STDERR_FILENO)
                return TAKE_FD(fd);
        int moved = fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
        if (moved < 0)
                return negative_errno();
        return moved;
}

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
 * glibc keeps the signals below SIGRTMIN for itself, and sigfillset() leaves them out. Its
 * posix_spawn child then sets every such signal to SIG_IGN (they are blocked while it runs),
 * and an ignored signal stays ignored across execve: QEMU would start with two ignored
 * signals. Named in the default set, they get SIG_DFL like the rest. sigaddset() refuses them,
 * so the bits are set by hand.
 */
static void add_libc_internal_signals(sigset_t *set)
{
        const size_t bits = 8 * sizeof(set->__val[0]);
        for (int sig = __SIGRTMIN; sig < SIGRTMIN; sig++)
                set->__val[(size_t)(sig - 1) / bits] |= 1UL << ((size_t)(sig - 1) % bits);
}

/*
 * stdin, stdout and stderr first, then each passed descriptor to its number, then everything
 * else closed. passed[] are copies above every target number, so that no dup2() overwrites a
 * source still to be duplicated, and none is its own target (dup2() onto itself would keep
 * close-on-exec).
 */
static int spawn_setup(SpawnSetup *s, int null_fd, int log_fd, const int *passed, size_t n)
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

        /* stdin from the null device, stdout and stderr into qemu.log, the passed files, nothing
         * else inherited (the daemon's sockets, the lock, other VMs' logs). */
        r = posix_spawn_file_actions_adddup2(&s->actions, null_fd, STDIN_FILENO);
        if (r == 0)
                r = posix_spawn_file_actions_adddup2(&s->actions, log_fd, STDOUT_FILENO);
        if (r == 0)
                r = posix_spawn_file_actions_adddup2(&s->actions, log_fd, STDERR_FILENO);
        for (size_t i = 0; r == 0 && i < n; i++)
                r = posix_spawn_file_actions_adddup2(&s->actions, passed[i],
                                                     VMM_PASSED_FD_FIRST + (int)i);
        if (r == 0)
                r = posix_spawn_file_actions_addclosefrom_np(&s->actions,
                                                             VMM_PASSED_FD_FIRST + (int)n);
        if (r != 0)
                return -r;

        /* The daemon blocks SIGCHLD, SIGTERM, SIGINT and SIGHUP (VMM-4); QEMU must not inherit
         * that, nor any ignored signal, or its own shutdown on SIGTERM would not work. */
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

static int read_start_time(const Root *proc, pid_t pid, uint64_t *ret, char **error)
{
        _cleanup_free_ char *rel = NULL, *buf = NULL, *perr = NULL;
        size_t size;
        VmmProcStat st;
        int r;

        if (strprintf(&rel, "%d/stat", (int)pid) < 0)
                return error_set_oom(error);
        r = root_read_file(proc, rel, VMM_PROC_STAT_MAX, &buf, &size);
        if (r < 0)
                return error_set(error, r, "read %s/%s: %s", proc->path, rel, strerror(-r));
        r = vmm_parse_proc_stat(buf, size, &st, &perr);
        if (r < 0)
                return error_set(error, r, "parse %s/%s: %s", proc->path, rel,
                                 perr ? perr : strerror(-r));
        if (st.pid != pid)
                return error_set(error, -EBADMSG, "parse %s/%s: pid is %d", proc->path, rel,
                                 (int)st.pid);
        *ret = st.start_time;
        return 0;
}

/* The passed descriptors, copied above every number they are to take (spawn_setup()). */
typedef struct PassedFds {
        int fd[VMM_PASSED_FDS_MAX];
        size_t n;
} PassedFds;

static void passed_fds_done(PassedFds *p)
{
        for (size_t i = 0; i < p->n; i++)
                closep(&p->fd[i]);
        p->n = 0;
}

static int passed_fds_copy(const VmmSpawnRequest *request, PassedFds *ret)
{
        if (request->n_fds > VMM_PASSED_FDS_MAX)
                return -E2BIG;
        for (size_t i = 0; i < request->n_fds; i++) {
                int fd = fcntl(request->fds[i], F_DUPFD_CLOEXEC,
                               VMM_PASSED_FD_FIRST + (int)request->n_fds);
                if (fd < 0)
                        return negative_errno();
                ret->fd[ret->n++] = fd;
        }
        return 0;
}

/* CLOCK_BOOTTIME in clock ticks: a just-spawned child's start_time when its stat is unreadable. */
static uint64_t boottime_ticks(void)
{
        struct timespec ts;
        long hz = sysconf(_SC_CLK_TCK);
        if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &ts) < 0)
                return 0;
        return (uint64_t)ts.tv_sec * (uint64_t)hz +
               (uint64_t)ts.tv_nsec / (NSEC_PER_SEC / (uint64_t)hz);
}

int vmm_spawn(const VmmSpawnRequest *request, VmmSpawned *ret, char **error)
{
        _cleanup_(spawn_setup_done) SpawnSetup setup = {0};
        _cleanup_(passed_fds_done) PassedFds passed = {0};
        char *const env[] = {(char *)VMM_SPAWN_PATH, NULL};
        const char *binary = request->argv && request->argv[0] ? request->argv[0] : NULL;
        const char *null_device = request->null_device ? request->null_device : "/dev/null";
        _cleanup_free_ char *err = NULL;
        uint64_t start_time = 0;
        pid_t pid;
        int r;

        if (!binary)
                return error_set(error, -EINVAL, "spawn: empty command line");

        /* INST-2a: a FIFO or a link in the log's place fails here, never blocks the worker. */
        _cleanup_close_ int log_fd =
            open_own_file_at(request->log_dirfd, request->log, O_WRONLY | O_APPEND | O_CREAT, 0600);
        if (log_fd >= 0 && log_fd <= STDERR_FILENO) {
                int moved = fcntl(log_fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
                closep(&log_fd);
                log_fd = moved < 0 ? negative_errno() : moved;
        }
        if (log_fd < 0)
                return error_set(error, log_fd, "spawn %s: open %s: %s", binary, request->log,
                                 file_strerror(log_fd));
        _cleanup_close_ int null_fd = open_above_stdio(AT_FDCWD, null_device, O_RDONLY, 0);
        if (null_fd < 0)
                return error_set(error, null_fd, "spawn %s: open %s: %s", binary, null_device,
                                 strerror(-null_fd));
        r = passed_fds_copy(request, &passed);
        if (r < 0)
                return error_set(error, r, "spawn %s: pass descriptors: %s", binary, strerror(-r));

        r = spawn_setup(&setup, null_fd, log_fd, passed.fd, passed.n);
        if (r < 0)
                return error_set(error, r, "spawn %s: %s", binary, strerror(-r));

        /* argv[0] is a path from configuration: posix_spawn, not posix_spawnp. */
        r = posix_spawn(&pid, binary, &setup.actions, &setup.attr, request->argv, env);
        if (r != 0)
                return error_set(error, -r, "spawn %s: %s", binary, strerror(r));

        /*
         * From here the child runs: whatever fails now is the caller's to end through the
         * ladder (VMM-14), never a bare SIGKILL here. Until it is reaped its pid is its own.
         */
        VmmSpawned s = {.pid = pid, .pidfd = vmm_pidfd_open(pid)};
        if (s.pidfd < 0) {
                if (strprintf(&s.identity_error, "open a pidfd on pid %d: %s", (int)pid,
                              strerror(-s.pidfd)) < 0)
                        s.identity_error = NULL;
                s.pidfd = -1;
        } else {
                r = read_start_time(request->proc, pid, &start_time, &err);
                if (r < 0)
                        s.identity_error = TAKE_PTR(err);
        }
        s.identified = s.pidfd >= 0 && r >= 0;
        s.start_time = s.identified ? start_time : boottime_ticks();
        *ret = s;
        return 0;
}

/* ---- the boot id --------------------------------------------------------------------------- */

int vmm_read_boot_id(const Root *proc, char **ret, char **error)
{
        _cleanup_free_ char *id = NULL;
        int r = root_read_attr(proc, BOOT_ID_PATH, 64, &id);
        if (r < 0)
                return error_set(error, r, "read %s/%s: %s", proc->path, BOOT_ID_PATH,
                                 strerror(-r));
        if (!uuid_is_lowercase(id)) {
                _cleanup_free_ char *shown = escape_text(id, strlen(id), 64, ESCAPE_QUOTE);
                if (!shown)
                        return error_set_oom(error);
                return error_set(error, -EBADMSG, "read %s/%s: invalid boot id %s", proc->path,
                                 BOOT_ID_PATH, shown);
        }
        *ret = TAKE_PTR(id);
        return 0;
}

/* ---- the last line of qemu.log ------------------------------------------------------------- */

static bool is_blank(char c)
{
        return c == '\n' || c == '\r' || c == ' ' || c == '\t';
}

/*
 * Reads the file backwards in blocks, keeping at most VMM_LOG_LINE_MAX bytes: the end of the
 * last line that has something besides white space. tail[] holds the line's last bytes, in
 * order, ending at tail + sizeof(tail).
 */
static int find_last_line(int fd, off_t size, char *tail, size_t cap, size_t *ret_len)
{
        char block[LOG_BLOCK];
        off_t pos = size, floor = size > (off_t)LOG_TAIL_MAX ? size - (off_t)LOG_TAIL_MAX : 0;
        size_t len = 0;
        bool in_line = false;

        while (pos > floor) {
                size_t n = (size_t)(pos - floor < (off_t)sizeof(block) ? pos - floor
                                                                       : (off_t)sizeof(block));
                pos -= (off_t)n;
                ssize_t k = pread(fd, block, n, pos);
                if (k < 0) {
                        if (errno == EINTR) {
                                pos += (off_t)n;
                                continue;
                        }
                        return negative_errno();
                }
                if ((size_t)k != n)
                        return -EIO; /* the file shrank under us: try another time */

                for (size_t i = n; i > 0; i--) {
                        char c = block[i - 1];
                        if (!in_line) {
                                if (is_blank(c))
                                        continue;
                                in_line = true;
                        } else if (c == '\n') {
                                *ret_len = len;
                                return 0;
                        }
                        if (len == cap) {
                                *ret_len = len;
                                return 0;
                        }
                        tail[cap - ++len] = c;
                }
        }
        *ret_len = len;
        return 0;
}

int vmm_log_last_line(int dirfd, const char *name, char **ret, char **error)
{
        char tail[VMM_LOG_LINE_MAX];
        size_t len;
        struct stat st;
        int r;

        _cleanup_close_ int fd = open_own_file_at(dirfd, name, O_RDONLY, 0);
        if (fd == -ENOENT) {
                *ret = NULL;
                return 0;
        }
        if (fd < 0)
                return error_set(error, fd, "read %s: %s", name, file_strerror(fd));
        if (fstat(fd, &st) < 0) {
                r = negative_errno();
                return error_set(error, r, "read %s: %s", name, strerror(-r));
        }

        r = find_last_line(fd, st.st_size, tail, sizeof(tail), &len);
        if (r < 0)
                return error_set(error, r, "read %s: %s", name, strerror(-r));
        if (len == 0) {
                *ret = NULL;
                return 0;
        }

        /* Escaping lengthens control and high bytes; drop from the front until it fits, so
         * that the end, where QEMU says why, is what stays. */
        const char *line = tail + sizeof(tail) - len;
        while (escape_text_buf(NULL, 0, line, len, SIZE_MAX, ESCAPE_ECHO) > VMM_LOG_LINE_MAX) {
                line++;
                len--;
        }
        char *text = escape_text(line, len, SIZE_MAX, ESCAPE_ECHO);
        if (!text)
                return error_set_oom(error);
        *ret = text;
        return 0;
}
