/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The peer of the reconcile pass's fd scan (bench/reconcile-pass.py): times, in this process,
 * a bare walk of <proc_root>/<pid>/fd/<n> (opendir, readdir, readlinkat and nothing else) and
 * vgpud's own open-handle scan, vfio_scan() of DEV-13, over the same /proc, alternating the two.
 *
 *   rec-fd-walk --dev-root DIR [--proc-root DIR] [--reps N]
 *       prints "walk <processes> <fds> <bare_ms> <vgpud_ms>" (medians of N after one warm-up)
 *
 * It runs inside the benchmark's PID namespace while vgpud idles between passes, so /proc
 * holds the processes the pass walked. The bare walk skips what vanishes meanwhile and keeps
 * nothing: it is the floor of any walk that reads every link. vfio_scan() on top of that
 * checks every name, parses socket links, and keeps VFIO targets and socket owners (VMM-18).
 */
#include <dirent.h>
#include <fcntl.h>

#include "base/base.h"
#include "vfio/vfio.h"

static double now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static bool is_pid_name(const char *s)
{
        if (!*s)
                return false;
        for (; *s; s++)
                if (*s < '0' || *s > '9')
                        return false;
        return true;
}

/* The bare walk: 0 with the processes and links read, or -errno listing proc_root. */
static int bare_walk(const char *proc_root, size_t *ret_procs, size_t *ret_fds)
{
        DIR *proc = opendir(proc_root);
        if (!proc)
                return negative_errno();
        size_t procs = 0, fds = 0;
        struct dirent *de;
        while ((de = readdir(proc))) {
                if (!is_pid_name(de->d_name) || strlen(de->d_name) > 10)
                        continue;
                char rel[sizeof "2147483647/fd"];
                snprintf(rel, sizeof rel, "%.10s/fd", de->d_name);
                int fd_dir = openat(dirfd(proc), rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd_dir < 0)
                        continue; /* exited meanwhile */
                DIR *d = fdopendir(fd_dir);
                if (!d) {
                        close(fd_dir);
                        continue;
                }
                procs++;
                struct dirent *fe;
                while ((fe = readdir(d))) {
                        char target[PATH_MAX];
                        if (fe->d_name[0] == '.')
                                continue;
                        if (readlinkat(dirfd(d), fe->d_name, target, sizeof target) >= 0)
                                fds++;
                }
                closedir(d);
        }
        closedir(proc);
        *ret_procs = procs;
        *ret_fds = fds;
        return 0;
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

int main(int argc, char **argv)
{
        const char *proc_root = "/proc", *dev_root = NULL;
        int reps = 5;

        for (int i = 1; i < argc; i += 2) {
                const char *opt = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
                uint64_t v;
                if (val && streq(opt, "--proc-root"))
                        proc_root = val;
                else if (val && streq(opt, "--dev-root"))
                        dev_root = val;
                else if (val && streq(opt, "--reps") && parse_uint64_range(val, 1, 101, &v) >= 0)
                        reps = (int)v;
                else {
                        fprintf(stderr, "rec-fd-walk: bad argument \"%s\"\n", opt);
                        return 2;
                }
        }
        if (!dev_root) {
                fprintf(stderr, "rec-fd-walk: need --dev-root DIR\n");
                return 2;
        }

        _cleanup_root_ Root *proc = NULL;
        int r = root_open(proc_root, &proc);
        if (r < 0) {
                fprintf(stderr, "rec-fd-walk: open %s: %s\n", proc_root, strerror(-r));
                return 1;
        }

        double t_bare[reps], t_vgpud[reps];
        size_t procs = 0, fds = 0;
        for (int rep = -1; rep < reps; rep++) { /* rep -1 is the warm-up */
                double t0 = now_ms();
                r = bare_walk(proc_root, &procs, &fds);
                double bare = now_ms() - t0;
                if (r < 0) {
                        fprintf(stderr, "rec-fd-walk: list %s: %s\n", proc_root, strerror(-r));
                        return 1;
                }

                _cleanup_vfio_scan_ VfioScan *scan = NULL;
                _cleanup_free_ char *error = NULL;
                t0 = now_ms();
                r = vfio_scan(proc, dev_root, &scan, &error);
                double ours = now_ms() - t0;
                if (r < 0) {
                        fprintf(stderr, "rec-fd-walk: scan open VFIO handles: %s\n", error);
                        return 1;
                }
                if (rep >= 0) {
                        t_bare[rep] = bare;
                        t_vgpud[rep] = ours;
                }
                if (rep == reps - 1)
                        fprintf(stderr,
                                "rec-fd-walk: vfio_scan saw %zu processes, %zu VFIO targets, "
                                "%zu sockets\n",
                                vfio_scan_n_processes(scan), vfio_scan_n_nodes(scan),
                                vfio_scan_n_sockets(scan));
        }
        printf("walk %zu %zu %.2f %.2f\n", procs, fds, median(t_bare, reps), median(t_vgpud, reps));
        return 0;
}
