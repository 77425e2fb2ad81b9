/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Starting QEMU (VMM-3, VMM-4) through the one spawn primitive (worker/), the boot id, and the last
 * line of qemu.log (VMM-5). All of it blocks on the file system or on the kernel, so it runs on
 * worker threads (GEN-2).
 */
#include "vmm.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "vmm-internal.h"
#include "worker/worker.h"

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

/* The argv names the passed descriptors by the numbers the primitive gives them. */
_Static_assert(VMM_PASSED_FD_FIRST == SPAWN_PASSED_FD_FIRST, "descriptor numbers differ");
_Static_assert(VMM_PASSED_FDS_MAX <= SPAWN_PASSED_FDS_MAX, "too many descriptors to pass");

int vmm_spawn(const VmmSpawnRequest *request, VmmSpawned *ret, char **error)
{
        const char *binary = request->argv && request->argv[0] ? request->argv[0] : NULL;
        _cleanup_free_ char *err = NULL;
        uint64_t start_time = 0;
        SpawnedChild child;
        int r;

        if (!binary)
                return error_set(error, -EINVAL, "spawn: empty command line");
        if (request->n_fds > VMM_PASSED_FDS_MAX)
                return error_set(error, -E2BIG, "spawn %s: pass descriptors: %s", binary,
                                 strerror(E2BIG));

        /* INST-2a: a FIFO or a link in the log's place fails here, never blocks the worker. */
        _cleanup_close_ int log_fd =
            open_own_file_at(request->log_dirfd, request->log, O_WRONLY | O_APPEND | O_CREAT, 0600);
        if (log_fd < 0)
                return error_set(error, log_fd, "spawn %s: open %s: %s", binary, request->log,
                                 file_strerror(log_fd));

        SpawnRequest spawn = SPAWN_REQUEST_INIT;
        spawn.argv = request->argv;
        spawn.envp = (char *const[]){(char *)VMM_SPAWN_PATH, NULL};
        spawn.stdout_fd = log_fd;
        spawn.stderr_fd = log_fd;
        spawn.fds = request->fds;
        spawn.n_fds = request->n_fds;
        spawn.null_device = request->null_device;
        r = spawn_start(&spawn, &child, error);
        if (r < 0)
                return r;

        /*
         * From here the child runs: whatever fails now is the caller's to end through the
         * ladder (VMM-14), never a bare SIGKILL here. Until it is reaped its pid is its own.
         */
        VmmSpawned s = {.pid = child.pid, .pidfd = child.pidfd};
        if (s.pidfd < 0) {
                if (strprintf(&s.identity_error, "open a pidfd on pid %d: %s", (int)child.pid,
                              strerror(-child.pidfd_error)) < 0)
                        s.identity_error = NULL;
        } else {
                r = read_start_time(request->proc, child.pid, &start_time, &err);
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
