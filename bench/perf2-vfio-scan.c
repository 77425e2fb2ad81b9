/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * PERF-2 driver: times vgpud's open-handle scan (DEV-13) plus the in-use probe of 64 VFs
 * against `fuser -s` over the same 64 VFIO nodes, with 500 processes holding 20 descriptors
 * each. Run it inside a private PID namespace (bench/perf2-vfio-scan.sh does) so /proc lists
 * only its own processes.
 *
 *   perf2-vfio-scan --fuser PATH [--proc-root DIR] [--processes N] [--fds N] [--reps N]
 *       prints "PERF-2 <ours_ms> <fuser_ms> <ratio>" (medians; ratio = ours / fuser)
 *   perf2-vfio-scan --scan TREE [--proc-root DIR]
 *       one scan and 64 probes against TREE/sys and TREE/dev; exit 0 iff all 64 are in use
 *
 * Both sides are timed the same way, as a spawned process from exec to exit, so the figure
 * includes our start-up as fuser's includes its own. The in-process time of scan + probes,
 * which is what the daemon pays, goes to stderr.
 */
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/base.h"
#include "testlib.h"
#include "vfio/vfio.h"

#define N_NODES 64

extern char **environ;

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void vf_address(int i, char buf[static PCI_ADDRESS_STRLEN])
{
        snprintf(buf, PCI_ADDRESS_STRLEN, "0000:41:%02x.%d", i / 8, i % 8);
}

static int die(const char *what, int r)
{
        fprintf(stderr, "perf2-vfio-scan: %s: %s\n", what, strerror(r < 0 ? -r : r));
        return 1;
}

/* ---- --scan: what is timed on our side ---------------------------------------------------- */

static int scan_and_probe(const Root *proc, const Root *sysfs, const char *dev_root)
{
        _cleanup_(vfio_scan_freep) VfioScan *scan = NULL;
        _cleanup_free_ char *error = NULL;

        int r = vfio_scan(proc, dev_root, &scan, &error);
        if (r < 0) {
                fprintf(stderr, "perf2-vfio-scan: scan open VFIO handles: %s\n", error);
                return r;
        }
        for (int i = 0; i < N_NODES; i++) {
                char vf[PCI_ADDRESS_STRLEN];
                vf_address(i, vf);
                r = vfio_probe_vf(scan, sysfs, vf, NULL, &error);
                if (r < 0) {
                        fprintf(stderr, "perf2-vfio-scan: probe %s: %s\n", vf, error);
                        return r;
                }
                if (r == 0) {
                        fprintf(stderr, "perf2-vfio-scan: VF %s not seen in use\n", vf);
                        return -ESRCH;
                }
        }
        return 0;
}

static int open_roots(const char *proc_root, const char *tree, Root **ret_proc, Root **ret_sysfs,
                      char **ret_dev)
{
        _cleanup_root_ Root *proc = NULL, *sysfs = NULL;
        _cleanup_free_ char *sys_path = NULL, *dev_path = NULL;

        int r = root_open(proc_root, &proc);
        if (r >= 0)
                r = strprintf(&sys_path, "%s/sys", tree);
        if (r >= 0)
                r = strprintf(&dev_path, "%s/dev", tree);
        if (r >= 0)
                r = root_open(sys_path, &sysfs);
        if (r < 0)
                return r;
        *ret_proc = TAKE_PTR(proc);
        *ret_sysfs = TAKE_PTR(sysfs);
        *ret_dev = TAKE_PTR(dev_path);
        return 0;
}

static int run_scan_mode(const char *proc_root, const char *tree)
{
        _cleanup_root_ Root *proc = NULL, *sysfs = NULL;
        _cleanup_free_ char *dev = NULL;

        int r = open_roots(proc_root, tree, &proc, &sysfs, &dev);
        if (r < 0)
                return die("open roots", r);
        return scan_and_probe(proc, sysfs, dev) < 0 ? 1 : 0;
}

/* ---- the fixture: 64 VFs, their nodes, and the holder processes --------------------------- */

static int mkdir_p_at(int dirfd, const char *path)
{
        char buf[PATH_MAX];
        snprintf(buf, sizeof buf, "%s", path);
        for (char *p = buf + 1;; p++) {
                if (*p == '/' || *p == 0) {
                        char c = *p;
                        *p = 0;
                        if (mkdirat(dirfd, buf, 0755) < 0 && errno != EEXIST)
                                return negative_errno();
                        if (c == 0)
                                return 0;
                        *p = c;
                }
        }
}

static int touch_at(int dirfd, const char *path)
{
        int fd = openat(dirfd, path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
                return negative_errno();
        close(fd);
        return 0;
}

static int make_tree(int tree)
{
        int r = mkdir_p_at(tree, "dev/vfio/devices");
        if (r < 0)
                return r;
        for (int i = 0; i < N_NODES && r >= 0; i++) {
                char vf[PCI_ADDRESS_STRLEN], path[PATH_MAX], target[64];
                vf_address(i, vf);

                snprintf(path, sizeof path, "sys/bus/pci/devices/%s/vfio-dev/vfio%d", vf, i);
                r = mkdir_p_at(tree, path);
                snprintf(path, sizeof path, "sys/bus/pci/devices/%s/iommu_group", vf);
                snprintf(target, sizeof target, "../../../../kernel/iommu_groups/%d", 100 + i);
                if (r >= 0 && symlinkat(target, tree, path) < 0)
                        r = negative_errno();
                snprintf(path, sizeof path, "dev/vfio/%d", 100 + i);
                if (r >= 0)
                        r = touch_at(tree, path);
                snprintf(path, sizeof path, "dev/vfio/devices/vfio%d", i);
                if (r >= 0)
                        r = touch_at(tree, path);
        }
        return r >= 0 ? touch_at(tree, "filler") : r;
}

/*
 * A holder owns exactly nfds descriptors: its VFIO node (if any), then a mix of files,
 * socket pairs, pipes and eventfds, like a VMM. It reports ready on `ready` and waits to
 * be killed.
 */
static _Noreturn void holder_main(int tree, int node, int nfds, int ready)
{
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* Park the two descriptors we need above the range the holder fills. */
        if (dup2(tree, 1000) < 0 || dup2(ready, 1001) < 0)
                _exit(1);
        close_range(0, 999, 0);
        close_range(1002, ~0U, 0);

        int n = 0;
        if (node >= 0) {
                char path[32];
                snprintf(path, sizeof path, "dev/vfio/%d", 100 + node);
                if (openat(1000, path, O_RDWR | O_CLOEXEC) < 0)
                        _exit(1);
                n++;
        }
        for (int k = 0; n < nfds; k++) {
                int fds[2];
                switch (k % 4) {
                case 0:
                        if (openat(1000, "filler", O_RDONLY | O_CLOEXEC) < 0)
                                _exit(1);
                        n++;
                        break;
                case 1:
                        if (nfds - n < 2 ||
                            socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0) {
                                if (eventfd(0, EFD_CLOEXEC) < 0)
                                        _exit(1);
                                n++;
                                break;
                        }
                        n += 2;
                        break;
                case 2:
                        if (nfds - n < 2 || pipe2(fds, O_CLOEXEC) < 0) {
                                if (eventfd(0, EFD_CLOEXEC) < 0)
                                        _exit(1);
                                n++;
                                break;
                        }
                        n += 2;
                        break;
                default:
                        if (eventfd(0, EFD_CLOEXEC) < 0)
                                _exit(1);
                        n++;
                        break;
                }
        }
        close(1000);
        if (write(1001, "r", 1) != 1)
                _exit(1);
        close(1001);
        for (;;)
                pause();
}

/* Fills pids[] (0 for a holder that was never started) and waits until all are ready. */
static int spawn_holders(int tree, int nproc, int nfds, pid_t *pids)
{
        int p[2];
        if (pipe2(p, O_CLOEXEC) < 0)
                return negative_errno();

        int r = 0, started = 0;
        for (; started < nproc; started++) {
                pid_t pid = fork();
                if (pid < 0) {
                        r = negative_errno();
                        break;
                }
                if (pid == 0)
                        holder_main(tree, started < N_NODES ? started : -1, nfds, p[1]);
                pids[started] = pid;
        }
        close(p[1]);
        /* One byte per holder; EOF early means one died before it was ready. */
        for (int got = 0; r >= 0 && got < started;) {
                char buf[512];
                ssize_t n = read(p[0], buf, sizeof buf);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        r = n < 0 ? negative_errno() : -ECHILD;
                else
                        got += (int)n;
        }
        close(p[0]);
        return r;
}

static void reap_holders(const pid_t *pids, int n)
{
        for (int i = 0; i < n; i++)
                if (pids[i] > 0)
                        kill(pids[i], SIGKILL);
        for (int i = 0; i < n; i++)
                if (pids[i] > 0)
                        waitpid(pids[i], NULL, 0);
}

static void remove_tree(const char *path)
{
        (void)test_remove_tree_at(AT_FDCWD, path);
}

/* ---- timing -------------------------------------------------------------------------------- */

static int run_timed(char **argv, double *ret_ms)
{
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);

        pid_t pid;
        double t0 = now_ms();
        int r = -posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r < 0)
                return r;
        int status;
        if (waitpid(pid, &status, 0) < 0)
                return negative_errno();
        *ret_ms = now_ms() - t0;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static int compare_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return (x > y) - (x < y);
}

static double median(double *v, int n)
{
        qsort(v, (size_t)n, sizeof *v, compare_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct Options {
        const char *fuser;
        const char *proc_root;
        int nproc, nfds, reps;
} Options;

static int measure(const Options *o, const char *self, const char *tree)
{
        char *ours[] = {(char *)self,         "--scan", (char *)tree, "--proc-root",
                        (char *)o->proc_root, NULL};
        char *fuser[N_NODES + 3] = {(char *)o->fuser, "-s"};
        char paths[N_NODES][PATH_MAX];
        for (int i = 0; i < N_NODES; i++) {
                snprintf(paths[i], sizeof paths[i], "%s/dev/vfio/%d", tree, 100 + i);
                fuser[2 + i] = paths[i];
        }

        _cleanup_root_ Root *proc = NULL, *sysfs = NULL;
        _cleanup_free_ char *dev = NULL;
        int r = open_roots(o->proc_root, tree, &proc, &sysfs, &dev);
        if (r < 0)
                return die("open roots", r);

        double t_ours[o->reps], t_fuser[o->reps], t_inproc[o->reps];
        for (int rep = -1; rep < o->reps; rep++) { /* rep -1 is the warm-up */
                double a, b;
                if (run_timed(ours, &a) != 0)
                        return die("our scan found wrong results", EIO);
                if (run_timed(fuser, &b) != 0)
                        return die("fuser -s did not find the nodes in use", EIO);
                double t0 = now_ms();
                if (scan_and_probe(proc, sysfs, dev) < 0)
                        return die("in-process scan", EIO);
                double c = now_ms() - t0;
                if (rep >= 0) {
                        t_ours[rep] = a;
                        t_fuser[rep] = b;
                        t_inproc[rep] = c;
                }
        }

        double m_ours = median(t_ours, o->reps), m_fuser = median(t_fuser, o->reps);
        fprintf(stderr,
                "perf2-vfio-scan: %d processes x %d fds, %d nodes open; medians of %d: "
                "vgpud scan as a process %.2f ms (in-process %.2f ms), fuser -s %.2f ms\n",
                o->nproc, o->nfds, N_NODES, o->reps, m_ours, median(t_inproc, o->reps), m_fuser);
        printf("PERF-2 %.2f %.2f %.3f\n", m_ours, m_fuser, m_ours / m_fuser);
        return 0;
}

static int parse_count(const char *s, int max, int *ret)
{
        uint64_t v;
        int r = parse_uint64_range(s, 1, (uint64_t)max, &v);
        if (r < 0)
                return r;
        *ret = (int)v;
        return 0;
}

int main(int argc, char **argv)
{
        Options o = {.proc_root = "/proc", .nproc = 500, .nfds = 20, .reps = 5};
        const char *scan_tree = NULL;

        for (int i = 1; i < argc; i += 2) {
                const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
                int r = 0;
                if (!val)
                        r = -EINVAL;
                else if (streq(opt, "--fuser"))
                        o.fuser = val;
                else if (streq(opt, "--proc-root"))
                        o.proc_root = val;
                else if (streq(opt, "--scan"))
                        scan_tree = val;
                else if (streq(opt, "--processes"))
                        r = parse_count(val, 4096, &o.nproc);
                else if (streq(opt, "--fds"))
                        r = parse_count(val, 900, &o.nfds);
                else if (streq(opt, "--reps"))
                        r = parse_count(val, 101, &o.reps);
                else
                        r = -EINVAL;
                if (r < 0) {
                        fprintf(stderr, "perf2-vfio-scan: bad argument \"%s\"\n", opt);
                        return 2;
                }
        }
        if (scan_tree)
                return run_scan_mode(o.proc_root, scan_tree);
        if (!o.fuser || o.nproc < N_NODES) {
                fprintf(stderr, "perf2-vfio-scan: need --fuser PATH and --processes >= %d\n",
                        N_NODES);
                return 2;
        }

        const char *tmp = getenv("TMPDIR");
        _cleanup_free_ char *tree = NULL;
        if (strprintf(&tree, "%s/perf2-vfio-XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0 ||
            !mkdtemp(tree))
                return die("create temp dir", errno);
        _cleanup_close_ int tree_fd = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        int r = tree_fd < 0 ? negative_errno() : make_tree(tree_fd);
        pid_t *pids = calloc((size_t)o.nproc, sizeof *pids);
        if (r >= 0 && !pids)
                r = -ENOMEM;
        if (r >= 0)
                r = spawn_holders(tree_fd, o.nproc, o.nfds, pids);
        r = r < 0 ? die("set up holders", r) : measure(&o, argv[0], tree);
        if (pids)
                reap_holders(pids, o.nproc);
        free(pids);
        remove_tree(tree);
        return r;
}
