/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * PERF-3: a durable VF health report against a durable single-row sqlite3 transaction.
 *
 * vgpud: 1,000 failure reports (distinct assignments over 200 VFs, threshold 64, breaker off,
 * so every report writes the file: temp file, fsync, rename, fsync of gpu/). sqlite3: 1,000
 * single-row UPSERT transactions, journal_mode=DELETE and synchronous=FULL (the PERF-3
 * baseline), and the same in WAL mode for reference, in the same directory, so on the same
 * filesystem. One warm-up, then five repetitions, interleaved; each figure is the median of
 * the five per-repetition percentiles.
 *
 * It also counts the fsyncs of one report (the store counts them) and shows group commit:
 * several reporter threads drive the asynchronous API through a tiny loop + worker, as the
 * daemon will, and one write carries many reports.
 *
 * Output: one row per figure, tab-separated, for bench/run to lay out:
 *   row <id> <measurement> <vgpud> <baseline> <ratio> <target> <result>
 */
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include "health/health.h"
#include "testlib.h"

#define VFS 200
#define REPETITIONS 5

typedef struct Options {
        const char *dir;
        size_t reports;
        unsigned threads;
        const char *only; /* one pass of one mode, no output: for strace -c */
} Options;

static double now_us(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void vf_address(size_t i, char buf[static PCI_ADDRESS_STRLEN])
{
        PciAddress a = {
            .bus = (uint8_t)(0x10 + (i % VFS) / 32),
            .device = (uint8_t)((i % VFS) % 32 / 8),
            .function = (uint8_t)(i % 8),
        };
        pci_address_format(&a, buf);
}

static int compare_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array. */
static double percentile(const double *sorted, size_t n, double p)
{
        size_t rank = (size_t)ceil(p / 100.0 * (double)n);
        return sorted[rank > 0 ? rank - 1 : 0];
}

typedef struct Figures {
        double p50, p99;
} Figures;

static Figures figures_of(double *lat, size_t n)
{
        qsort(lat, n, sizeof *lat, compare_double);
        return (Figures){percentile(lat, n, 50), percentile(lat, n, 99)};
}

static double median(double *v, size_t n)
{
        qsort(v, n, sizeof *v, compare_double);
        return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void remove_tree(const char *path)
{
        (void)test_remove_tree_at(AT_FDCWD, path);
}

/* ---- vgpud --------------------------------------------------------------------------------- */

typedef struct DataDir {
        char *path;
        int fd;
} DataDir;

static int data_dir_open(const Options *o, const char *name, DataDir *ret)
{
        char *path;
        if (strprintf(&path, "%s/%s", o->dir, name) < 0)
                return -ENOMEM;
        remove_tree(path);
        if (mkdir(path, 0755) < 0) {
                int r = negative_errno();
                free(path);
                return r;
        }
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) {
                int r = negative_errno();
                free(path);
                return r;
        }
        *ret = (DataDir){path, fd};
        return 0;
}

static void data_dir_close(DataDir *d)
{
        close(d->fd);
        remove_tree(d->path);
        free(d->path);
}

static void write_wanted(HealthStore *s, void *userdata)
{
        /* The drivers below poll health_store_write_pending() after each batch. */
}

static int store_open(const DataDir *d, bool async, HealthStore **ret)
{
        HealthOptions opts = HEALTH_OPTIONS_DEFAULT;
        opts.threshold = 64;
        opts.breaker_enabled = false;
        if (async)
                opts.io_wanted = write_wanted;
        HealthStore *s;
        int r = health_store_new(d->fd, &opts, &s);
        if (r < 0)
                return r;
        _cleanup_free_ char *error = NULL;
        r = health_store_load(s, &error);
        if (r < 0) {
                fprintf(stderr, "perf3: load: %s\n", error);
                health_store_free(s);
                return r;
        }
        *ret = s;
        return 0;
}

static void report_ids(size_t i, char vf[static PCI_ADDRESS_STRLEN], char id[static 48])
{
        vf_address(i, vf);
        snprintf(id, 48, "perf3-instance-%06zu", i);
}

/* What one pass wrote: the file's size after the last report, and the mean per write. */
typedef struct Written {
        double last, mean;
} Written;

/* The synchronous path: one report, one durable write, timed each. */
static int run_vgpud(const Options *o, double *lat, Written *ret_written)
{
        DataDir d;
        int r = data_dir_open(o, "perf3-vgpud", &d);
        if (r < 0)
                return r;
        HealthStore *s;
        double bytes = 0, last = 0;
        r = store_open(&d, false, &s);
        for (size_t i = 0; r >= 0 && i < o->reports; i++) {
                char vf[PCI_ADDRESS_STRLEN], id[48];
                _cleanup_free_ char *error = NULL;
                HealthResult res;

                report_ids(i, vf, id);
                double t0 = now_us();
                r = health_store_report_failure(s, vf, id, "2026-09-02T20:08:04.5974Z",
                                                "RmInitAdapter failed", &res, &error);
                lat[i] = now_us() - t0;
                if (r >= 0 && res.outcome != HEALTH_OUTCOME_RECORDED)
                        r = -EPROTO; /* PERF-3 needs every report to write */
                if (r < 0)
                        fprintf(stderr, "perf3: report %zu: %s\n", i, error ? error : "");
                struct stat st; /* outside the timed part */
                if (r >= 0 && fstatat(d.fd, HEALTH_FILE_PATH, &st, 0) >= 0) {
                        last = (double)st.st_size;
                        bytes += last;
                }
        }
        if (s)
                health_store_free(s);
        data_dir_close(&d);
        if (r >= 0 && ret_written)
                *ret_written = (Written){.last = last, .mean = bytes / (double)o->reports};
        return r;
}

/* The asynchronous path on one thread, to count what one report costs in fsyncs. */
static int count_fsyncs(const Options *o, double *ret)
{
        DataDir d;
        int r = data_dir_open(o, "perf3-fsyncs", &d);
        if (r < 0)
                return r;
        HealthStore *s;
        r = store_open(&d, true, &s);
        unsigned fsyncs = 0, writes = 0;
        for (size_t i = 0; r >= 0 && i < 100; i++) {
                char vf[PCI_ADDRESS_STRLEN], id[48];
                HealthWrite *w;

                report_ids(i, vf, id);
                r = health_store_submit(s,
                                        &(HealthRequest){.kind = HEALTH_REQUEST_FAILURE,
                                                         .vf_address = vf,
                                                         .instance_id = id},
                                        NULL, NULL, NULL, NULL);
                if (r >= 0 && health_store_begin_write(s, &w) > 0) {
                        r = health_write_run(w);
                        fsyncs += health_write_fsyncs(w);
                        writes++;
                        health_store_finish_write(s, w);
                }
        }
        health_store_free(s);
        data_dir_close(&d);
        if (r < 0)
                return r;
        /* The first write created gpu/ and synced data_dir too; count the steady state. */
        *ret = writes > 1 ? (double)(fsyncs - 1) / writes : 0;
        return 0;
}

/* ---- sqlite3 ------------------------------------------------------------------------------- */

static int sqlite_exec(sqlite3 *db, const char *sql)
{
        char *msg = NULL;
        if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
                fprintf(stderr, "perf3: sqlite: %s: %s\n", sql, msg ? msg : "?");
                sqlite3_free(msg);
                return -EIO;
        }
        return 0;
}

static void sqlite_remove(const char *path)
{
        static const char *const suffixes[] = {"", "-journal", "-wal", "-shm"};
        for (size_t i = 0; i < ELEMENTSOF(suffixes); i++) {
                _cleanup_free_ char *p = NULL;
                if (strprintf(&p, "%s%s", path, suffixes[i]) >= 0)
                        unlink(p);
        }
}

/* One UPSERT per report, each its own transaction (autocommit). */
static int run_sqlite(const Options *o, const char *journal_mode, double *lat)
{
        _cleanup_free_ char *path = NULL, *pragma = NULL;
        if (strprintf(&path, "%s/perf3-sqlite-%s.db", o->dir, journal_mode) < 0 ||
            strprintf(&pragma, "PRAGMA journal_mode=%s; PRAGMA synchronous=FULL;", journal_mode) <
                0)
                return -ENOMEM;
        sqlite_remove(path);

        sqlite3 *db = NULL;
        sqlite3_stmt *st = NULL;
        int r = sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) ==
                        SQLITE_OK
                    ? 0
                    : -EIO;
        if (r >= 0)
                r = sqlite_exec(db, pragma);
        if (r >= 0)
                r = sqlite_exec(db, "CREATE TABLE failures (vf_address TEXT NOT NULL, "
                                    "instance_id TEXT NOT NULL, assigned_at TEXT NOT NULL, "
                                    "reported_at TEXT NOT NULL, "
                                    "PRIMARY KEY (vf_address, instance_id, assigned_at))");
        if (r >= 0 && sqlite3_prepare_v2(db,
                                         "INSERT INTO failures VALUES (?1, ?2, ?3, ?4) "
                                         "ON CONFLICT (vf_address, instance_id, assigned_at) "
                                         "DO UPDATE SET reported_at = excluded.reported_at",
                                         -1, &st, NULL) != SQLITE_OK)
                r = -EIO;

        for (size_t i = 0; r >= 0 && i < o->reports; i++) {
                char vf[PCI_ADDRESS_STRLEN], id[48], at[TIMESTAMP_STRLEN];
                report_ids(i, vf, id);
                format_timestamp(clock_now(&clock_realtime), at);

                double t0 = now_us();
                sqlite3_bind_text(st, 1, vf, -1, SQLITE_STATIC);
                sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
                sqlite3_bind_text(st, 3, "2026-09-02T20:08:04.5974Z", -1, SQLITE_STATIC);
                sqlite3_bind_text(st, 4, at, -1, SQLITE_STATIC);
                if (sqlite3_step(st) != SQLITE_DONE) {
                        fprintf(stderr, "perf3: sqlite step: %s\n", sqlite3_errmsg(db));
                        r = -EIO;
                }
                sqlite3_reset(st);
                lat[i] = now_us() - t0;
        }
        sqlite3_finalize(st);
        sqlite3_close(db);
        sqlite_remove(path);
        return r;
}

/* ---- group commit -------------------------------------------------------------------------- */

/*
 * The daemon's shape in miniature: reporter threads hand requests to one loop thread that owns
 * the store; the loop hands each write to a worker thread, which posts it back.
 */
typedef struct Request {
        size_t index;
        bool done;
        int r;
        struct Request *next;
} Request;

typedef struct Driver {
        pthread_mutex_t lock;
        pthread_cond_t loop_wake, done_wake, worker_wake;
        Request *inbox;
        HealthWrite *to_run, *ran;
        bool stop;
        HealthStore *store;
        unsigned writes;
        size_t per_thread;
        unsigned next_thread;
        double *lat;
} Driver;

static void request_done(HealthStore *s, int r, const HealthResult *res, const char *error,
                         void *userdata)
{
        Request *req = userdata;
        Driver *d = health_store_options(s)->userdata;
        pthread_mutex_lock(&d->lock);
        req->done = true;
        req->r = r;
        pthread_cond_broadcast(&d->done_wake);
        pthread_mutex_unlock(&d->lock);
}

static void *loop_thread(void *userdata)
{
        Driver *d = userdata;
        bool writing = false;

        pthread_mutex_lock(&d->lock);
        for (;;) {
                while (!d->inbox && !d->ran && !(d->stop && !writing))
                        pthread_cond_wait(&d->loop_wake, &d->lock);
                if (d->stop && !writing && !d->inbox && !d->ran)
                        break;
                Request *batch = d->inbox;
                HealthWrite *ran = d->ran;
                d->inbox = NULL;
                d->ran = NULL;
                pthread_mutex_unlock(&d->lock);

                for (Request *req = batch, *next; req; req = next) {
                        char vf[PCI_ADDRESS_STRLEN], id[48];
                        next = req->next;
                        report_ids(req->index, vf, id);
                        int r = health_store_submit(
                            d->store,
                            &(HealthRequest){.kind = HEALTH_REQUEST_FAILURE,
                                             .vf_address = vf,
                                             .instance_id = id,
                                             .assigned_at = "2026-09-02T20:08:04.5974Z"},
                            request_done, req, NULL, NULL);
                        if (r <= 0)
                                request_done(d->store, r, &(HealthResult){0}, NULL, req);
                }
                if (ran) {
                        health_store_finish_write(d->store, ran);
                        writing = false;
                }
                HealthWrite *w = NULL;
                if (!writing && health_store_begin_write(d->store, &w) > 0)
                        writing = true;

                pthread_mutex_lock(&d->lock);
                if (w) {
                        d->to_run = w;
                        pthread_cond_signal(&d->worker_wake);
                }
        }
        pthread_mutex_unlock(&d->lock);
        return NULL;
}

static void *worker_thread(void *userdata)
{
        Driver *d = userdata;

        pthread_mutex_lock(&d->lock);
        for (;;) {
                while (!d->to_run && !d->stop)
                        pthread_cond_wait(&d->worker_wake, &d->lock);
                if (!d->to_run)
                        break;
                HealthWrite *w = d->to_run;
                d->to_run = NULL;
                pthread_mutex_unlock(&d->lock);
                (void)health_write_run(w);
                pthread_mutex_lock(&d->lock);
                d->ran = w;
                d->writes++;
                pthread_cond_signal(&d->loop_wake);
        }
        pthread_mutex_unlock(&d->lock);
        return NULL;
}

static void *reporter_thread(void *userdata)
{
        Driver *d = userdata;

        pthread_mutex_lock(&d->lock);
        size_t first = d->next_thread++ * d->per_thread;
        pthread_mutex_unlock(&d->lock);
        for (size_t i = first; i < first + d->per_thread; i++) {
                Request req = {.index = i};
                double t0 = now_us();
                pthread_mutex_lock(&d->lock);
                req.next = d->inbox;
                d->inbox = &req;
                pthread_cond_signal(&d->loop_wake);
                while (!req.done)
                        pthread_cond_wait(&d->done_wake, &d->lock);
                pthread_mutex_unlock(&d->lock);
                d->lat[i] = now_us() - t0;
                if (req.r < 0)
                        fprintf(stderr, "perf3: concurrent report %zu failed: %d\n", i, req.r);
        }
        return NULL;
}

static int run_group_commit(const Options *o, double *lat, unsigned *ret_writes,
                            double *ret_seconds)
{
        Driver d = {
            .lock = PTHREAD_MUTEX_INITIALIZER,
            .loop_wake = PTHREAD_COND_INITIALIZER,
            .done_wake = PTHREAD_COND_INITIALIZER,
            .worker_wake = PTHREAD_COND_INITIALIZER,
            .per_thread = o->reports / o->threads,
            .lat = lat,
        };
        DataDir dir;
        int r = data_dir_open(o, "perf3-group", &dir);
        if (r < 0)
                return r;
        HealthOptions opts = HEALTH_OPTIONS_DEFAULT;
        opts.threshold = 64;
        opts.breaker_enabled = false;
        opts.io_wanted = write_wanted;
        opts.userdata = &d;
        r = health_store_new(dir.fd, &opts, &d.store);
        if (r >= 0)
                r = health_store_load(d.store, NULL);
        if (r < 0) {
                health_store_free(d.store);
                data_dir_close(&dir);
                return r;
        }

        pthread_t loop, worker, reporters[64];
        double t0 = now_us();
        pthread_create(&loop, NULL, loop_thread, &d);
        pthread_create(&worker, NULL, worker_thread, &d);
        for (unsigned i = 0; i < o->threads; i++)
                pthread_create(&reporters[i], NULL, reporter_thread, &d);
        for (unsigned i = 0; i < o->threads; i++)
                pthread_join(reporters[i], NULL);
        double t1 = now_us();
        pthread_mutex_lock(&d.lock);
        d.stop = true;
        pthread_cond_broadcast(&d.loop_wake);
        pthread_cond_broadcast(&d.worker_wake);
        pthread_mutex_unlock(&d.lock);
        pthread_join(loop, NULL);
        pthread_join(worker, NULL);

        *ret_writes = d.writes;
        *ret_seconds = (t1 - t0) / 1e6;
        health_store_free(d.store);
        data_dir_close(&dir);
        return 0;
}

/* ---- output -------------------------------------------------------------------------------- */

static void row(const char *id, const char *what, const char *ours, const char *baseline,
                const char *ratio, const char *target, const char *result)
{
        printf("row\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", id, what, ours, baseline, ratio, target,
               result);
}

static char *ms(double us, char buf[static 32])
{
        snprintf(buf, 32, "%.2f ms", us / 1000);
        return buf;
}

static int parse_options(int argc, char **argv, Options *o)
{
        static const struct option longopts[] = {
            {"dir", required_argument, NULL, 'd'},
            {"reports", required_argument, NULL, 'n'},
            {"threads", required_argument, NULL, 't'},
            {"only", required_argument, NULL, 'o'},
            {},
        };
        int c;
        uint64_t v;

        while ((c = getopt_long(argc, argv, "", longopts, NULL)) >= 0) {
                switch (c) {
                case 'd':
                        o->dir = optarg;
                        break;
                case 'n':
                        if (parse_uint64_range(optarg, 1, 1000000, &v) < 0)
                                return -EINVAL;
                        o->reports = v;
                        break;
                case 't':
                        if (parse_uint64_range(optarg, 1, 64, &v) < 0)
                                return -EINVAL;
                        o->threads = (unsigned)v;
                        break;
                case 'o':
                        if (!streq(optarg, "vgpud") && !streq(optarg, "DELETE") &&
                            !streq(optarg, "WAL"))
                                return -EINVAL;
                        o->only = optarg;
                        break;
                default:
                        return -EINVAL;
                }
        }
        return optind == argc && o->dir ? 0 : -EINVAL;
}

int main(int argc, char **argv)
{
        Options o = {.reports = 1000, .threads = 8};
        if (parse_options(argc, argv, &o) < 0) {
                fprintf(stderr, "usage: perf3-health --dir DIR [--reports N] [--threads N] "
                                "[--only vgpud|DELETE|WAL]\n");
                return 2;
        }

        _cleanup_free_ double *lat = calloc(o.reports, sizeof *lat);
        double p50[3][REPETITIONS], p99[3][REPETITIONS];
        static const char *const modes[] = {"vgpud", "DELETE", "WAL"};
        if (!lat)
                return 1;
        if (o.only) {
                int r =
                    streq(o.only, "vgpud") ? run_vgpud(&o, lat, NULL) : run_sqlite(&o, o.only, lat);
                return r < 0 ? 1 : 0;
        }

        /* Repetition 0 is the warm-up and is not counted. */
        Written written = {0};
        for (int rep = 0; rep <= REPETITIONS; rep++)
                for (int m = 0; m < 3; m++) {
                        int r =
                            m == 0 ? run_vgpud(&o, lat, &written) : run_sqlite(&o, modes[m], lat);
                        if (r < 0) {
                                fprintf(stderr, "perf3: %s run failed: %s\n", modes[m],
                                        strerror(-r));
                                return 1;
                        }
                        Figures f = figures_of(lat, o.reports);
                        if (rep > 0) {
                                p50[m][rep - 1] = f.p50;
                                p99[m][rep - 1] = f.p99;
                        }
                }

        double ours50 = median(p50[0], REPETITIONS), ours99 = median(p99[0], REPETITIONS);
        double del50 = median(p50[1], REPETITIONS), del99 = median(p99[1], REPETITIONS);
        double wal50 = median(p50[2], REPETITIONS), wal99 = median(p99[2], REPETITIONS);
        char a[32], b[32], ratio[32];

        snprintf(ratio, sizeof ratio, "%.2f", ours50 / del50);
        row("PERF-3", "health report p50 vs sqlite DELETE/FULL", ms(ours50, a), ms(del50, b), ratio,
            "<= 2.00", ours50 <= 2 * del50 ? "pass" : "FAIL");
        snprintf(ratio, sizeof ratio, "%.2f", ours99 / del99);
        row("PERF-3", "health report p99 vs sqlite DELETE/FULL", ms(ours99, a), ms(del99, b), ratio,
            "-", "info");
        snprintf(ratio, sizeof ratio, "%.2f", ours50 / wal50);
        row("PERF-3", "health report p50 vs sqlite WAL/FULL", ms(ours50, a), ms(wal50, b), ratio,
            "-", "info");
        snprintf(ratio, sizeof ratio, "%.2f", ours99 / wal99);
        row("PERF-3", "health report p99 vs sqlite WAL/FULL", ms(ours99, a), ms(wal99, b), ratio,
            "-", "info");

        /* Every report rewrites the whole file (HEALTH-18), so this is what a sync carries. */
        snprintf(a, sizeof a, "%.0f / %.0f", written.mean / 1000, written.last / 1000);
        row("PERF-3", "bytes written per report, mean / at the last (kB)", a, "-", "-", "-",
            "info");

        double fsyncs;
        if (count_fsyncs(&o, &fsyncs) < 0) {
                fprintf(stderr, "perf3: fsync count failed\n");
                return 1;
        }
        snprintf(a, sizeof a, "%.2f", fsyncs);
        row("PERF-3", "fsyncs per report (counted by the store)", a, "-", "-", "2 (floor)",
            fsyncs <= 2.0 ? "pass" : "FAIL");

        unsigned writes;
        double seconds;
        if (run_group_commit(&o, lat, &writes, &seconds) < 0) {
                fprintf(stderr, "perf3: group commit run failed\n");
                return 1;
        }
        size_t n = o.reports / o.threads * o.threads;
        Figures g = figures_of(lat, n);
        char what[96], seq[64];
        snprintf(what, sizeof what, "group commit: %u reporters, %zu reports -> writes", o.threads,
                 n);
        snprintf(a, sizeof a, "%u", writes);
        snprintf(b, sizeof b, "%zu", n);
        snprintf(ratio, sizeof ratio, "%.2f", (double)writes / (double)n);
        row("PERF-3", what, a, b, ratio, "< 1.00", writes < n ? "pass" : "FAIL");
        snprintf(what, sizeof what, "group commit: reports/s (%u reporters vs 1)", o.threads);
        snprintf(a, sizeof a, "%.0f", (double)n / seconds);
        snprintf(seq, sizeof seq, "%.0f", 1e6 / ours50);
        snprintf(ratio, sizeof ratio, "%.2f", (double)n / seconds / (1e6 / ours50));
        row("PERF-3", what, a, seq, ratio, "-", "info");
        snprintf(what, sizeof what, "group commit: report p50 / p99 with %u reporters", o.threads);
        snprintf(seq, sizeof seq, "%.2f / %.2f ms", g.p50 / 1000, g.p99 / 1000);
        row("PERF-3", what, seq, "-", "-", "-", "info");
        return 0;
}
