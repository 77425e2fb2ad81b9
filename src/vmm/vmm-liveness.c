/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Is the VMM of a record still there (VMM-16, VMM-17, VMM-18, VMM-19)? Run on a worker thread: it
 * reads /proc and may walk every process's descriptors.
 *
 * The verdict errs towards "alive": whatever cannot be read or parsed makes it ambiguous,
 * which the callers treat as alive (ARCHITECTURE.md decision 5). Only proof moves it to gone:
 * a stored pid that belongs to another process or to no process, and no listener on the
 * socket, or a listener that a complete fd scan finds nobody holding.
 */
#include "vmm.h"

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>

#include "vmm-internal.h"

/* More listeners on one path than this cannot be ours; the rest are counted, not looked up. */
#define LISTENERS_MAX 16

const char *vmm_verdict_to_string(VmmVerdict v)
{
        switch (v) {
        case VMM_GONE:
                return "gone";
        case VMM_ALIVE:
                return "alive";
        case VMM_AMBIGUOUS:
                return "ambiguous";
        }
        return "ambiguous";
}

void vmm_liveness_done(VmmLiveness *l)
{
        if (!l)
                return;
        closep(&l->pidfd);
        l->pidfd = -1;
        free(l->reason);
        l->reason = NULL;
}

typedef struct Probe {
        const VmmLivenessQuery *q;
        VmmLiveness result;
} Probe;

/* Appends one reason, "; " between several, so the log line tells every step that was taken. */
static int probe_reason(Probe *p, const char *fmt, ...) _printf_(2, 3);
static int probe_reason(Probe *p, const char *fmt, ...)
{
        _cleanup_free_ char *s = NULL;
        va_list ap;
        va_start(ap, fmt);
        int k = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        return strextend(&p->result.reason, "%s%s", p->result.reason ? "; " : "", s);
}

/* A verdict (ALIVE takes over pidfd): 1, so that callers can "return probe_end(...)". */
static int probe_end(Probe *p, VmmVerdict v, pid_t pid, int pidfd, uint64_t start_time)
{
        p->result.verdict = v;
        p->result.pid = pid;
        p->result.pidfd = pidfd;
        p->result.start_time = start_time;
        return 1;
}

typedef enum StatResult {
        STAT_OK,
        STAT_GONE,  /* no such process */
        STAT_ERROR, /* unreadable or malformed: reason added */
} StatResult;

/* <proc>/<pid>/stat; -ENOMEM only. */
static int read_stat(Probe *p, pid_t pid, VmmProcStat *ret, StatResult *ret_result)
{
        _cleanup_free_ char *rel = NULL, *buf = NULL, *err = NULL;
        const Root *proc = p->q->proc;
        size_t size;
        int r;

        if (strprintf(&rel, "%d/stat", (int)pid) < 0)
                return -ENOMEM;
        r = root_read_file(proc, rel, VMM_PROC_STAT_MAX, &buf, &size);
        if (r == -ENOENT || r == -ESRCH) {
                *ret_result = STAT_GONE;
                return 0;
        }
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                *ret_result = STAT_ERROR;
                return probe_reason(p, "read %s/%s: %s", proc->path, rel, strerror(-r));
        }
        r = vmm_parse_proc_stat(buf, size, ret, &err);
        if (r == -ENOMEM)
                return r;
        if (r >= 0 && ret->pid != pid) {
                r = -EBADMSG;
                free(err);
                err = NULL;
                if (strprintf(&err, "pid is %d", (int)ret->pid) < 0)
                        return -ENOMEM;
        }
        if (r < 0) {
                *ret_result = STAT_ERROR;
                return probe_reason(p, "parse %s/%s: %s", proc->path, rel,
                                    err ? err : strerror(-r));
        }
        *ret_result = STAT_OK;
        return 0;
}

static bool is_dead_state(char state)
{
        return state == 'Z' || state == 'X' || state == 'x';
}

#define DELETED_SUFFIX " (deleted)" /* how the kernel shows an unlinked executable */

/*
 * VMM-16: is pid's executable qemu_binary, the same file (device and inode)? 0: yes; 1: a
 * verdict was reached (ambiguous); 2: another program, the pid is discarded; -ENOMEM.
 */
static int check_executable(Probe *p, pid_t pid)
{
        const VmmLivenessQuery *q = p->q;
        char rel[32];
        struct stat want, got;
        int r;

        snprintf(rel, sizeof rel, "%d/exe", (int)pid);
        if (stat(q->qemu_binary, &want) < 0) {
                r = probe_reason(p, "stat qemu_binary %s: %m", q->qemu_binary);
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        if (fstatat(q->proc->fd, rel, &got, 0) < 0) {
                if (errno == ENOENT) /* a kernel thread, or a process exiting */
                        return probe_reason(p, "pid %d has no executable", (int)pid) < 0 ? -ENOMEM
                                                                                         : 2;
                r = probe_reason(p, "stat %s/%s: %m", q->proc->path, rel);
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        if (got.st_dev == want.st_dev && got.st_ino == want.st_ino)
                return 0;

        /*
         * A package upgrade replaces qemu_binary while its VMMs run on: their executable is the
         * former file, shown as "<path> (deleted)". Such a process may well be ours; only an
         * executable that never was qemu_binary discards the pid.
         */
        char target[PATH_MAX + sizeof DELETED_SUFFIX];
        ssize_t n = readlinkat(q->proc->fd, rel, target, sizeof target - 1);
        if (n < 0) {
                r = probe_reason(p, "read %s/%s: %m", q->proc->path, rel);
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        target[n] = 0;
        _cleanup_free_ char *shown = escape_text(target, (size_t)n, 256, ESCAPE_UTF8);
        if (!shown)
                return -ENOMEM;
        size_t len = (size_t)n, suffix = strlen(DELETED_SUFFIX);
        _cleanup_free_ char *binary = realpath(q->qemu_binary, NULL);
        if (len > suffix && memcmp(target + len - suffix, DELETED_SUFFIX, suffix) == 0 && binary &&
            len - suffix == strlen(binary) && memcmp(target, binary, len - suffix) == 0) {
                r = probe_reason(p, "pid %d runs %s, qemu_binary replaced since it started",
                                 (int)pid, shown);
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        return probe_reason(p, "pid %d is another program (%s, not qemu_binary %s)", (int)pid,
                            shown, q->qemu_binary) < 0
                   ? -ENOMEM
                   : 2;
}

/*
 * Step 1 (VMM-16, VMM-4's order: pidfd, identity, pidfd still live). 1: a verdict; 0: the pid
 * is discarded and the probe goes on; -ENOMEM.
 */
static int probe_stored_pid(Probe *p)
{
        const VmmLivenessQuery *q = p->q;
        pid_t pid = q->identity.pid;
        VmmProcStat st;
        StatResult sr;
        int r;

        /* A pid of another boot names nothing of ours, whatever runs under it now. */
        if (q->identity.boot_id && q->boot_id && !streq(q->identity.boot_id, q->boot_id))
                return probe_reason(p, "boot id changed since pid %d was recorded", (int)pid);

        _cleanup_close_ int pidfd = vmm_pidfd_open(pid);
        if (pidfd == -ESRCH)
                return probe_reason(p, "pid %d exited", (int)pid);
        if (pidfd < 0) {
                r = probe_reason(p, "open a pidfd on pid %d: %s", (int)pid, strerror(-pidfd));
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }

        r = read_stat(p, pid, &st, &sr);
        if (r < 0)
                return r;
        if (sr == STAT_GONE)
                return probe_reason(p, "pid %d exited", (int)pid);
        if (sr == STAT_ERROR)
                return probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        if (is_dead_state(st.state)) {
                p->result.zombie = st.state == 'Z';
                return probe_reason(p, "pid %d exited (%s)", (int)pid,
                                    st.state == 'Z' ? "zombie" : "dead");
        }
        if (st.start_time != q->identity.start_time)
                return probe_reason(
                    p, "pid %d is another process (start time %" PRIu64 ", recorded %" PRIu64 ")",
                    (int)pid, st.start_time, q->identity.start_time);
        if (q->qemu_binary) {
                r = check_executable(p, pid);
                if (r < 0 || r == 1)
                        return r;
                if (r == 2)
                        return 0;
        }

        /* The stat was read through the pid; the pidfd proves it was this process's. */
        r = vmm_pidfd_send_signal(pidfd, 0);
        if (r == -ESRCH)
                return probe_reason(p, "pid %d exited", (int)pid);
        if (r < 0) {
                r = probe_reason(p, "signal pid %d: %s", (int)pid, strerror(-r));
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        r = probe_reason(p, "pid %d is running", (int)pid);
        if (r < 0)
                return r;
        return probe_end(p, VMM_ALIVE, pid, TAKE_FD(pidfd), st.start_time);
}

/* The owner of a listening socket: alive if it can be identified, else ambiguous. */
static int probe_owner(Probe *p, pid_t owner)
{
        const char *path = p->q->identity.qmp_socket;
        VmmProcStat st;
        StatResult sr;
        int r;

        _cleanup_close_ int pidfd = vmm_pidfd_open(owner);
        if (pidfd < 0) {
                r = probe_reason(p, "pid %d holds %s but cannot be opened: %s", (int)owner, path,
                                 strerror(-pidfd));
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        r = read_stat(p, owner, &st, &sr);
        if (r < 0)
                return r;
        if (sr == STAT_GONE) {
                r = probe_reason(p, "pid %d holds %s but exited", (int)owner, path);
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        if (sr == STAT_ERROR)
                return probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        r = vmm_pidfd_send_signal(pidfd, 0);
        if (r < 0 || is_dead_state(st.state)) {
                r = probe_reason(p, "pid %d holds %s but exited", (int)owner, path);
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        r = probe_reason(p, "pid %d holds %s", (int)owner, path);
        if (r < 0)
                return r;
        return probe_end(p, VMM_ALIVE, owner, TAKE_FD(pidfd), st.start_time);
}

/* Steps 2 and 3 (VMM-17, VMM-18): always a verdict (1), or -ENOMEM. */
static int probe_socket(Probe *p)
{
        const VmmLivenessQuery *q = p->q;
        const char *path = q->identity.qmp_socket;
        _cleanup_free_ char *buf = NULL, *err = NULL;
        _cleanup_vfio_scan_ VfioScan *own_scan = NULL;
        uint64_t inodes[LISTENERS_MAX];
        size_t size, n;
        int r;

        r = root_read_file(q->proc, "net/unix", VMM_NET_UNIX_MAX, &buf, &size);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                r = probe_reason(p, "read %s/net/unix: %s", q->proc->path, strerror(-r));
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        r = vmm_net_unix_find_listening(buf, size, path, inodes, LISTENERS_MAX, &n, &err);
        if (r == -ENOMEM)
                return r;
        if (r < 0) {
                r = probe_reason(p, "parse %s/net/unix: %s", q->proc->path,
                                 err ? err : strerror(-r));
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        if (n == 0) {
                r = probe_reason(p, "nothing listens on %s", path);
                return r < 0 ? r : probe_end(p, VMM_GONE, 0, -1, 0);
        }

        const VfioScan *scan = q->scan;
        if (!scan) {
                if (!q->dev_root) {
                        r = probe_reason(p, "%s is listening and no fd scan was given", path);
                        return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
                }
                free(err);
                err = NULL;
                r = vfio_scan(q->proc, q->dev_root, &own_scan, &err);
                if (r == -ENOMEM)
                        return r;
                if (r < 0) {
                        r = probe_reason(p, "%s is listening and the fd scan failed: %s", path,
                                         err ? err : strerror(-r));
                        return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
                }
                scan = own_scan;
        }

        pid_t owner = 0;
        for (size_t i = 0; i < n && i < LISTENERS_MAX; i++) {
                pid_t holder;
                if (vfio_scan_find_socket(scan, inodes[i], &holder) >= 0 &&
                    (owner == 0 || holder < owner))
                        owner = holder;
        }
        if (owner > 0)
                return probe_owner(p, owner);
        if (n > LISTENERS_MAX) {
                /* Those not looked up might be held: cannot tell. */
                r = probe_reason(p, "%zu sockets listen on %s", n, path);
                return r < 0 ? r : probe_end(p, VMM_AMBIGUOUS, 0, -1, 0);
        }
        r = probe_reason(p, "no process holds the socket listening on %s", path);
        return r < 0 ? r : probe_end(p, VMM_GONE, 0, -1, 0);
}

int vmm_liveness_probe(const VmmLivenessQuery *q, VmmLiveness *ret)
{
        Probe p = {.q = q, .result = {.verdict = VMM_AMBIGUOUS, .pidfd = -1}};
        int r = 0;

        if (q->identity.pid > 0)
                r = probe_stored_pid(&p);
        if (r == 0 && q->identity.qmp_socket)
                r = probe_socket(&p);
        if (r == 0) {
                /* Step 4, or a discarded pid without a socket to look for. */
                if (q->identity.pid <= 0)
                        r = probe_reason(&p, "no pid and no QMP socket recorded");
                if (r >= 0)
                        r = probe_end(&p, VMM_GONE, 0, -1, 0);
        }
        if (r < 0) {
                vmm_liveness_done(&p.result);
                return r;
        }
        *ret = p.result;
        return 0;
}
