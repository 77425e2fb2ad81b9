/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the device module (SPEC DEV-1..DEV-11, DEV-15..DEV-19, DISC-22, GEN-4).
 *
 * Each test builds a fixture tree in a temp dir: sys/ with regular files standing in for sysfs
 * attributes (a file's content is what a read returns, and a write overwrites it from offset 0
 * the way sysfs stores a value, without truncating), and proc/ with fake <pid>/fd/<n> links.
 * Writes that end in a longer old value leave its tail behind ("1150" then "0" reads "0150"),
 * which is how a driver that keeps a type it was told to drop is played here.
 *
 * write() is wrapped (-Wl,--wrap=write) for what no fixture can do: make the driver refuse a
 * store (an errno) or hang in one, and record every store below the fixture (path, value, open
 * flags, overlap). The asynchronous layer runs on a real worker pool with an injected clock, so
 * deadlines, retries and polls happen when a test moves the clock, never after a real wait. Pool
 * and DeviceOps are attached to the test's sd-event loop, which the test runs until what it
 * waits for has happened.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "device/device.h"
#include "device-done.h"
#include "testlib.h"

#define VF "0000:e3:00.4"
#define VF2 "0000:e3:00.5"
#define PF "0000:e3:00.0"
#define GROUP "12"
#define UUID "3b2c4e6a-1f0d-4c8b-9a7e-5d6f7a8b9c0d"
#define TYPE_ATTR "bus/pci/devices/" VF "/nvidia/current_vgpu_type"
#define TYPE_ATTR2 "bus/pci/devices/" VF2 "/nvidia/current_vgpu_type"
#define MDEV_TYPES "bus/pci/devices/" VF "/mdev_supported_types"
#define MDEV_DIR "bus/mdev/devices/" UUID
#define MDEV_REMOVE MDEV_DIR "/remove"

/* ---- the write() wrapper ------------------------------------------------------------------- */

ssize_t __real_write(int fd, const void *buf, size_t count);
ssize_t __wrap_write(int fd, const void *buf, size_t count);

typedef struct Rule {
        char op;          /* 'w' for write(), 'r' for read() */
        char suffix[256]; /* matches calls on a path that ends in it */
        int skip;         /* matching writes to let through first */
        int err;          /* fail with this errno (after the hang, if any) */
        int count;        /* uses left; -1 for unlimited */
        bool hang;        /* block until inject_release() */
} Rule;

typedef struct Seen {
        char path[256]; /* relative to the fixture's sys/ */
        char value[64];
        bool write_only, cloexec;
        int result; /* 0 or -errno */
} Seen;

static struct {
        pthread_mutex_t lock;
        pthread_cond_t cond;
        char prefix[PATH_MAX]; /* "<dir>/sys/": stores below it are recorded */
        Rule rules[8];
        size_t n_rules;
        bool released;
        unsigned hanging, in_flight, max_in_flight;
        Seen seen[128];
        size_t n_seen;
} inject = {.lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER};

static Rule *match_rule_locked(char op, const char *path)
{
        size_t n = strlen(path);
        for (size_t i = 0; i < inject.n_rules; i++) {
                Rule *r = &inject.rules[i];
                size_t k = strlen(r->suffix);
                if (r->op != op || r->count == 0 || n < k || !streq(path + n - k, r->suffix))
                        continue;
                if (r->skip > 0) {
                        /* This call is the rule's to let through: no later rule sees it. */
                        r->skip--;
                        return NULL;
                }
                return r;
        }
        return NULL;
}

/* The path of fd below the fixture's sys/, or NULL for any other descriptor. */
static const char *fixture_path_locked(int fd, char path[static PATH_MAX])
{
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, path, PATH_MAX - 1);
        if (n <= 0 || !inject.prefix[0])
                return NULL;
        path[n] = 0;
        return startswith(path, inject.prefix);
}

ssize_t __wrap_write(int fd, const void *buf, size_t count)
{
        char path[PATH_MAX];
        pthread_mutex_lock(&inject.lock);
        const char *rel = fixture_path_locked(fd, path);
        if (!rel) {
                pthread_mutex_unlock(&inject.lock);
                return __real_write(fd, buf, count);
        }

        Seen *s = inject.n_seen < ELEMENTSOF(inject.seen) ? &inject.seen[inject.n_seen++] : NULL;
        if (s) {
                int fl = fcntl(fd, F_GETFL), fdfl = fcntl(fd, F_GETFD);
                snprintf(s->path, sizeof s->path, "%s", rel);
                snprintf(s->value, sizeof s->value, "%.*s", (int)count, (const char *)buf);
                s->write_only = fl >= 0 && (fl & O_ACCMODE) == O_WRONLY;
                s->cloexec = fdfl >= 0 && (fdfl & FD_CLOEXEC);
        }
        if (++inject.in_flight > inject.max_in_flight)
                inject.max_in_flight = inject.in_flight;

        int err = 0;
        Rule *r = match_rule_locked('w', rel);
        if (r) {
                if (r->count > 0)
                        r->count--;
                err = r->err;
                if (r->hang) {
                        inject.hanging++;
                        pthread_cond_broadcast(&inject.cond);
                        while (!inject.released)
                                pthread_cond_wait(&inject.cond, &inject.lock);
                        inject.hanging--;
                }
        }
        pthread_mutex_unlock(&inject.lock);

        ssize_t w = err ? -1 : __real_write(fd, buf, count);
        int saved = err ? err : errno;

        pthread_mutex_lock(&inject.lock);
        inject.in_flight--;
        if (s)
                s->result = w < 0 ? -saved : 0;
        pthread_mutex_unlock(&inject.lock);
        errno = saved;
        return w;
}

ssize_t __real_read(int fd, void *buf, size_t count);
ssize_t __wrap_read(int fd, void *buf, size_t count);

ssize_t __wrap_read(int fd, void *buf, size_t count)
{
        char path[PATH_MAX];
        int err = 0;
        pthread_mutex_lock(&inject.lock);
        const char *rel = fixture_path_locked(fd, path);
        Rule *r = rel ? match_rule_locked('r', rel) : NULL;
        if (r) {
                if (r->count > 0)
                        r->count--;
                err = r->err;
        }
        pthread_mutex_unlock(&inject.lock);
        if (err) {
                errno = err;
                return -1;
        }
        return __real_read(fd, buf, count);
}

static void add_rule(char op, const char *suffix, int skip, int err, int count, bool hang)
{
        pthread_mutex_lock(&inject.lock);
        assert_true(inject.n_rules < ELEMENTSOF(inject.rules));
        Rule *r = &inject.rules[inject.n_rules++];
        r->op = op;
        snprintf(r->suffix, sizeof r->suffix, "%s", suffix);
        r->skip = skip;
        r->err = err;
        r->count = count;
        r->hang = hang;
        pthread_mutex_unlock(&inject.lock);
}

/* write() on a path ending in suffix: after skip matching calls, fail with err (or hang). */
static void inject_rule(const char *suffix, int skip, int err, int count, bool hang)
{
        add_rule('w', suffix, skip, err, count, hang);
}

/* read() likewise, failures only. A whole-file read is two calls: the data, then EOF. */
static void inject_read_rule(const char *suffix, int skip, int err, int count)
{
        add_rule('r', suffix, skip, err, count, false);
}

static void inject_release(void)
{
        pthread_mutex_lock(&inject.lock);
        inject.released = true;
        pthread_cond_broadcast(&inject.cond);
        pthread_mutex_unlock(&inject.lock);
}

static unsigned inject_hanging(void)
{
        pthread_mutex_lock(&inject.lock);
        unsigned n = inject.hanging;
        pthread_mutex_unlock(&inject.lock);
        return n;
}

static size_t seen_count(void)
{
        pthread_mutex_lock(&inject.lock);
        size_t n = inject.n_seen;
        pthread_mutex_unlock(&inject.lock);
        return n;
}

/* The i-th recorded store, as "<path>=<value>" plus " (-errno)" when it failed. */
static char *seen_at(size_t i)
{
        char *s = NULL;
        pthread_mutex_lock(&inject.lock);
        assert_true(i < inject.n_seen);
        Seen *w = &inject.seen[i];
        if (w->result < 0)
                assert_int_equal(strprintf(&s, "%s=%s (%d)", w->path, w->value, w->result), 0);
        else
                assert_int_equal(strprintf(&s, "%s=%s", w->path, w->value), 0);
        pthread_mutex_unlock(&inject.lock);
        return s;
}

static void assert_seen(size_t i, const char *expected)
{
        _cleanup_free_ char *s = seen_at(i);
        assert_string_equal(s, expected);
}

/* ---- an injected clock --------------------------------------------------------------------- */

/* One clock for the whole run, set to 1000 s by main(); tests only look at differences. */
static TestClock fake;

static nsec_t fake_now(void *userdata)
{
        (void)userdata;
        return test_clock_get(&fake);
}

static void advance(nsec_t d)
{
        test_clock_advance(&fake, d);
}

/* ---- fixture trees ------------------------------------------------------------------------- */

typedef struct Fixture {
        TestTree *tree;
        char *dir; /* the tree's */
        int fd;    /* the tree's */
        Root *sys, *proc;
        char *dev; /* "<dir>/dev": the dev_root (fake proc links name nodes below it) */
        DeviceRoots roots;

        /* The asynchronous layer. */
        WorkerPool *pool;
        DeviceOps *ops;
        bool quarantined;       /* the fake health store's answer for every VF */
        const char *store_down; /* its unavailability text, or NULL */
        sd_event *event;
        TestLog log;
} Fixture;

static void vpath(char *buf, size_t size, const char *fmt, va_list ap) _printf_(3, 0);
static void vpath(char *buf, size_t size, const char *fmt, va_list ap)
{
        int n = vsnprintf(buf, size, fmt, ap);
        assert_true(n > 0 && (size_t)n < size);
}

static void mkdirs(Fixture *f, const char *path)
{
        assert_int_equal(test_mkdirs_at(f->fd, path), 0);
}

static void mkparents(Fixture *f, const char *path)
{
        assert_int_equal(test_mkparents_at(f->fd, path), 0);
}

/*
 * Creates or replaces <path> (relative to the fixture dir) with content, a regular file. Not
 * through write(): the wrapper would take the fixture's own set-up for the driver's stores.
 */
static void put_at(Fixture *f, const char *content, const char *path)
{
        mkparents(f, path);
        int fd = openat(f->fd, path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(__real_write(fd, content, strlen(content)), (ssize_t)strlen(content));
        close(fd);
}

/* The same below sys/. */
static void put(Fixture *f, const char *content, const char *fmt, ...) _printf_(3, 4);
static void put(Fixture *f, const char *content, const char *fmt, ...)
{
        char rel[PATH_MAX], path[PATH_MAX + 8];
        va_list ap;
        va_start(ap, fmt);
        vpath(rel, sizeof rel, fmt, ap);
        va_end(ap);
        snprintf(path, sizeof path, "sys/%s", rel);
        put_at(f, content, path);
}

/* A symlink at <path> (relative to the fixture dir, not sys/). */
static void link_at(Fixture *f, const char *target, const char *fmt, ...) _printf_(3, 4);
static void link_at(Fixture *f, const char *target, const char *fmt, ...)
{
        char path[PATH_MAX];
        va_list ap;
        va_start(ap, fmt);
        vpath(path, sizeof path, fmt, ap);
        va_end(ap);
        mkparents(f, path);
        (void)unlinkat(f->fd, path, 0); /* replaces an older link */
        assert_int_equal(symlinkat(target, f->fd, path), 0);
}

static char *get(Fixture *f, const char *rel)
{
        char *s = NULL;
        assert_int_equal(root_read_file(f->sys, rel, 4096, &s, NULL), 0);
        return s;
}

static void assert_content(Fixture *f, const char *rel, const char *expected)
{
        _cleanup_free_ char *s = get(f, rel);
        assert_string_equal(s, expected);
}

/* A vendor-VFIO VF: physfn, IOMMU group, current_vgpu_type holding type. */
static void add_vf(Fixture *f, const char *vf, const char *group, const char *type)
{
        link_at(f, "../" PF, "sys/bus/pci/devices/%s/physfn", vf);
        char target[64];
        snprintf(target, sizeof target, "../../../../kernel/iommu_groups/%s", group);
        link_at(f, target, "sys/bus/pci/devices/%s/iommu_group", vf);
        put(f, type, "bus/pci/devices/%s/nvidia/current_vgpu_type", vf);
}

/* A fake process <pid> holding <dev_root>/<node> as descriptor fd. */
static void hold(Fixture *f, const char *pid, int fd, const char *node)
{
        char target[PATH_MAX];
        snprintf(target, sizeof target, "%s/%s", f->dev, node);
        link_at(f, target, "proc/%s/fd/%d", pid, fd);
}

static void remove_tree_at(int parent, const char *name)
{
        (void)test_remove_tree_at(parent, name);
}

static void inject_reset(const char *prefix)
{
        pthread_mutex_lock(&inject.lock);
        inject.n_rules = 0;
        inject.n_seen = 0;
        inject.released = false;
        inject.in_flight = inject.max_in_flight = 0;
        snprintf(inject.prefix, sizeof inject.prefix, "%s", prefix ? prefix : "");
        pthread_mutex_unlock(&inject.lock);
}

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);

        assert_int_equal(test_tree_new("test-device", &f->tree), 0);
        f->dir = f->tree->dir;
        f->fd = f->tree->fd;
        assert_int_equal(sd_event_new(&f->event), 0);
        mkdirs(f, "sys/bus/pci/devices");
        mkdirs(f, "sys/bus/mdev/devices");
        mkdirs(f, "proc");

        _cleanup_free_ char *sys = NULL, *proc = NULL, *prefix = NULL;
        assert_int_equal(strprintf(&sys, "%s/sys", f->dir), 0);
        assert_int_equal(strprintf(&proc, "%s/proc", f->dir), 0);
        assert_int_equal(strprintf(&f->dev, "%s/dev", f->dir), 0);
        assert_int_equal(root_open(sys, &f->sys), 0);
        assert_int_equal(root_open(proc, &f->proc), 0);
        f->roots = (DeviceRoots){.sysfs = f->sys, .proc = f->proc, .dev_root = f->dev};

        /* The PF: no physfn, and an nvidia/ directory a careless caller might aim at. */
        put(f, "0x26b9\n", "bus/pci/devices/%s/device", PF);
        put(f, "5\n", "bus/pci/devices/%s/nvidia/current_vgpu_type", PF);

        /* Descriptors show resolved paths: compare against the resolved fixture dir. */
        char real[PATH_MAX];
        assert_non_null(realpath(sys, real));
        assert_int_equal(strprintf(&prefix, "%s/", real), 0);
        inject_reset(prefix);

        assert_int_equal(test_log_start(&f->log), 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;

        /* Hung stores go on, and the pool is drained before the tree goes away. */
        inject_release();
        if (f->pool) {
                (void)worker_pool_wait_idle(f->pool, 10 * NSEC_PER_SEC);
                worker_pool_free(f->pool);
        }
        device_ops_free(f->ops);
        inject_reset(NULL);
        test_log_stop(&f->log);
        root_free(f->sys);
        root_free(f->proc);
        test_tree_free(f->tree);
        sd_event_unref(f->event);
        free(f->dev);
        free(f);
        return 0;
}

/* Everything logged so far. */
static const char *logged(Fixture *f)
{
        return test_log_text(&f->log);
}

static void assert_logged(Fixture *f, const char *line)
{
        const char *all = logged(f);
        if (!strstr(all, line))
                fail_msg("log line\n  %s\nnot in\n%s", line, all);
}

static char *fmt(const char *format, ...) _printf_(1, 2);
static char *fmt(const char *format, ...)
{
        char *s = NULL;
        va_list ap;
        va_start(ap, format);
        assert_true(vasprintf(&s, format, ap) >= 0);
        va_end(ap);
        return s;
}

/* A failure: return value, kind and the exact message. */
#define assert_failure(r, error, failure, want_r, want_kind, want_message) \
        do {                                                               \
                assert_int_equal((r), (want_r));                           \
                assert_non_null(error);                                    \
                assert_string_equal((error), (want_message));              \
                assert_int_equal((failure).kind, (want_kind));             \
        } while (0)

/* ---- the write guard (DEV-18) -------------------------------------------------------------- */

static void test_guard_allows_vgpu_attributes(void **state) /* DEV-18 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "0\n");

        static const char *const allowed[] = {
            TYPE_ATTR,
            "class/mdev_bus/" VF "/mdev_supported_types/nvidia-901/create",
            MDEV_REMOVE,
        };
        for (size_t i = 0; i < ELEMENTSOF(allowed); i++) {
                _cleanup_free_ char *e = NULL;
                assert_int_equal(device_guard_write(f->sys, allowed[i], &e), 0);
                assert_null(e);
        }
}

static void test_guard_refuses_everything_else(void **state) /* DEV-18 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "0\n");

        static const struct {
                const char *path, *why;
        } refused[] = {
            {"bus/pci/devices/" VF "/driver/unbind", "driver/unbind is never written"},
            {"bus/pci/drivers/nvidia/unbind", "not a vGPU attribute"},
            {"bus/pci/devices/" VF "/driver_override", "driver_override is never written"},
            {"bus/pci/devices/" PF "/sriov_numvfs", "sriov_numvfs is never written"},
            {"bus/pci/devices/" VF "/remove", "remove is never written"},
            {"bus/pci/devices/" VF "/reset", "reset is never written"},
            {"devices/pci0000:e3/" VF "/reset", "reset is never written"},
            {"bus/pci/devices/" VF "/nvidia/creatable_vgpu_types", "not a vGPU attribute"},
            {"bus/pci/devices/" PF "/device", "not a vGPU attribute"},
            {"bus/mdev/devices/3B2C4E6A-1F0D-4C8B-9A7E-5D6F7A8B9C0D/remove",
             "remove is never written"},
            {"bus/mdev/devices/" UUID "/mdev_type", "not a vGPU attribute"},
            {"bus/pci/devices/0000:E3:00.4/nvidia/current_vgpu_type", "not a vGPU attribute"},
            {"bus/pci/devices/" VF "/nvidia/current_vgpu_type/extra", "not a vGPU attribute"},
            {"class/mdev_bus/" VF "/mdev_supported_types/nvidia-901/remove",
             "remove is never written"},
        };
        for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
                _cleanup_free_ char *e = NULL, *want = NULL;
                want = fmt("refuse to write %s: %s", refused[i].path, refused[i].why);
                assert_int_equal(device_guard_write(f->sys, refused[i].path, &e), -EPERM);
                assert_string_equal(e, want);
        }

        /* A component beyond NAME_MAX matches no shape. */
        char long_path[400];
        snprintf(long_path, sizeof long_path, "bus/pci/devices/%0300d/nvidia/current_vgpu_type", 0);
        _cleanup_free_ char *e = NULL, *want = NULL;
        assert_int_equal(device_guard_write(f->sys, long_path, &e), -EPERM);
        want = fmt("refuse to write %s: not a vGPU attribute", long_path);
        assert_string_equal(e, want);
        free(e);
        e = NULL;

        assert_int_equal(device_guard_write(
                             f->sys, "bus/../bus/pci/devices/" VF "/nvidia/current_vgpu_type", &e),
                         -EPERM);
        assert_string_equal(e, "refuse to write bus/../bus/pci/devices/" VF
                               "/nvidia/current_vgpu_type: not a plain relative path");
}

static void test_guard_refuses_pf_attributes(void **state) /* DEV-18 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;

        /* The PF has the right shape of path, but no physfn. */
        assert_int_equal(
            device_guard_write(f->sys, "bus/pci/devices/" PF "/nvidia/current_vgpu_type", &e),
            -EPERM);
        assert_string_equal(e, "refuse to write bus/pci/devices/" PF
                               "/nvidia/current_vgpu_type: " PF " is not a VF");
        free(e);
        e = NULL;
        assert_int_equal(
            device_guard_write(f->sys,
                               "class/mdev_bus/" PF "/mdev_supported_types/nvidia-900/create", &e),
            -EPERM);
        assert_string_equal(e, "refuse to write class/mdev_bus/" PF
                               "/mdev_supported_types/nvidia-900/create: " PF " is not a VF");

        /* A physfn that cannot be checked refuses too. */
        free(e);
        e = NULL;
        link_at(f, VF2, "sys/bus/pci/devices/%s", VF2); /* a link to itself: ELOOP */
        assert_int_equal(device_guard_write(f->sys, TYPE_ATTR2, &e), -EPERM);
        assert_string_equal(e, "refuse to write " TYPE_ATTR2 ": check bus/pci/devices/" VF2
                               "/physfn: Too many levels of symbolic links");
}

static void test_release_never_writes_a_pf(void **state) /* DEV-18 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        int r = device_vfio_release(&f->roots, NULL, PF, NULL, &failure, &e);
        assert_failure(r, e, failure, -EPERM, DEVICE_FAILURE_ERROR,
                       "refuse to write bus/pci/devices/" PF "/nvidia/current_vgpu_type: " PF
                       " is not a VF");
        assert_int_equal(seen_count(), 0);
        assert_content(f, "bus/pci/devices/" PF "/nvidia/current_vgpu_type", "5\n");

        /* Configure: the reset of the PF's type, and the type itself on a free one. */
        free(e);
        e = NULL;
        r = device_vfio_configure(&f->roots, NULL, PF, "7", &failure, &e);
        assert_failure(r, e, failure, -EPERM, DEVICE_FAILURE_ERROR,
                       "refuse to write bus/pci/devices/" PF "/nvidia/current_vgpu_type: " PF
                       " is not a VF");
        free(e);
        e = NULL;
        put(f, "0\n", "bus/pci/devices/" PF "/nvidia/current_vgpu_type");
        r = device_vfio_configure(&f->roots, NULL, PF, "7", &failure, &e);
        assert_failure(r, e, failure, -EPERM, DEVICE_FAILURE_ERROR,
                       "refuse to write bus/pci/devices/" PF "/nvidia/current_vgpu_type: " PF
                       " is not a VF");
        assert_int_equal(seen_count(), 0);
}

/* ---- vendor VFIO configure (DEV-1, DEV-3..DEV-7) ------------------------------------------- */

static void test_configure_refuses_invalid_types(void **state) /* DEV-1 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "0\n");

        static const char *const bad[] = {"0", "", "00", "abc", "-1", "4294967296", " 7"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *e = NULL, *want = NULL;
                DeviceFailure failure;
                want = fmt("invalid vendor VFIO vGPU profile type \"%s\"", bad[i]);
                int r = device_vfio_configure(&f->roots, NULL, VF, bad[i], &failure, &e);
                assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR, want);
        }
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;
        assert_int_equal(device_vfio_configure(&f->roots, NULL, VF, NULL, &failure, &e), -EINVAL);
        assert_string_equal(e, "invalid vendor VFIO vGPU profile type \"\"");
        free(e);
        e = NULL;
        assert_int_equal(device_vfio_configure(&f->roots, NULL, "0000:E3:00.4", "7", &failure, &e),
                         -EINVAL);
        assert_string_equal(e, "invalid VF address \"0000:E3:00.4\"");
        assert_int_equal(seen_count(), 0);
}

static void test_configure_writes_type_once(void **state) /* DEV-5 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "0\n");
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        assert_int_equal(device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e), 1);
        assert_null(e);
        assert_int_equal(seen_count(), 1);
        assert_seen(0, TYPE_ATTR "=7"); /* decimal, no newline, one write() */
        assert_true(inject.seen[0].write_only);
        assert_true(inject.seen[0].cloexec);
        assert_content(f, TYPE_ATTR, "7\n");
}

static void test_configure_is_idempotent(void **state) /* DEV-3 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "7\n");
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        /* Leading zeros are the same ID. */
        assert_int_equal(device_vfio_configure(&f->roots, NULL, VF, "007", &failure, &e), 0);
        assert_int_equal(seen_count(), 0);
}

static void test_configure_resets_another_type_first(void **state) /* DEV-4 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "5\n");
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        assert_int_equal(device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e), 1);
        assert_int_equal(seen_count(), 2);
        assert_seen(0, TYPE_ATTR "=0");
        assert_seen(1, TYPE_ATTR "=7");
        assert_content(f, TYPE_ATTR, "7\n");
}

static void test_configure_refuses_vf_in_use(void **state) /* DEV-4, DEV-12 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "5\n");
        hold(f, "41", 7, "vfio/" GROUP);
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        int r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EBUSY, DEVICE_FAILURE_IN_USE,
                       "vendor VFIO vGPU on VF " VF " is still in use");
        assert_int_equal(failure.type_id, 5);
        assert_int_equal(seen_count(), 0);

        /* The iommufd cdev counts as well. */
        free(e);
        e = NULL;
        add_vf(f, VF2, "13", "5\n");
        mkdirs(f, "sys/bus/pci/devices/" VF2 "/vfio-dev/vfio3");
        hold(f, "42", 9, "vfio/devices/vfio3");
        r = device_vfio_configure(&f->roots, NULL, VF2, "7", &failure, &e);
        assert_failure(r, e, failure, -EBUSY, DEVICE_FAILURE_IN_USE,
                       "vendor VFIO vGPU on VF " VF2 " is still in use");
        assert_int_equal(seen_count(), 0);
}

static void test_configure_scan_and_probe_errors(void **state) /* DEV-4, DEV-9, DEV-14 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "5\n");
        _cleanup_free_ char *e = NULL, *want = NULL;
        DeviceFailure failure;

        /* An unreadable fd directory fails the scan closed. */
        put_at(f, "", "proc/55/fd");
        int r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -ENOTDIR, DEVICE_FAILURE_ERROR,
                       "scan open VFIO handles: read process 55 file descriptors: Not a directory");
        assert_int_equal(unlinkat(f->fd, "proc/55/fd", 0), 0);

        /* An IOMMU group link that names no group fails the probe. */
        free(e);
        e = NULL;
        assert_int_equal(unlinkat(f->fd, "sys/bus/pci/devices/" VF "/iommu_group", 0), 0);
        link_at(f, "../../../../kernel/iommu_groups/x1", "sys/bus/pci/devices/%s/iommu_group", VF);
        r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        want = fmt("check vendor VFIO vGPU usage for VF " VF ": invalid IOMMU group \"x1\" in "
                   "%s/sys/bus/pci/devices/" VF "/iommu_group",
                   f->dir);
        assert_failure(r, e, failure, -EBADMSG, DEVICE_FAILURE_ERROR, want);
        assert_int_equal(seen_count(), 0);

        /* Without a proc root there is no fresh scan to take. */
        free(e);
        e = NULL;
        DeviceRoots no_proc = {.sysfs = f->sys, .dev_root = f->dev};
        r = device_vfio_configure(&no_proc, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR,
                       "scan open VFIO handles: no proc or dev root configured");
}

static void test_configure_reset_refused_or_unverified(void **state) /* DEV-4 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "5\n");
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        inject_rule(TYPE_ATTR, 0, EBUSY, 1, false);
        int r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EBUSY, DEVICE_FAILURE_REFUSED,
                       "destroy vGPU on VF " VF ": Device or resource busy");
        assert_int_equal(failure.type_id, 5);
        assert_int_equal(seen_count(), 1);

        /* A driver that keeps part of the old type: "1150" then "0" reads "0150". */
        free(e);
        e = NULL;
        put(f, "1150", TYPE_ATTR);
        r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "verify reset vGPU on VF " VF ": type is 150, want 0");
        assert_int_equal(seen_count(), 2); /* the 0, never the 7 */
        assert_seen(1, TYPE_ATTR "=0");
}

static void test_configure_capacity_refusals(void **state) /* DEV-7, PLACE-17 */
{
        Fixture *f = *state;
        add_vf(f, VF, GROUP, "0\n");

        static const struct {
                int err;
                const char *text;
        } refusals[] = {
            {EINVAL, "Invalid argument"},
            {ENOSPC, "No space left on device"},
            {EBUSY, "Device or resource busy"},
            {EIO, "Input/output error"},
        };
        for (size_t i = 0; i < ELEMENTSOF(refusals); i++) {
                _cleanup_free_ char *e = NULL, *want = NULL;
                DeviceFailure failure;
                inject_rule(TYPE_ATTR, 0, refusals[i].err, 1, false);
                want = fmt("driver refused vGPU type 1150 on VF " VF ": %s", refusals[i].text);
                int r = device_vfio_configure(&f->roots, NULL, VF, "1150", &failure, &e);
                assert_failure(r, e, failure, -refusals[i].err, DEVICE_FAILURE_CAPACITY, want);
                assert_content(f, TYPE_ATTR, "0\n");
        }

        /* A refused 0 during the reset of another type is no capacity refusal. */
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;
        put(f, "5\n", TYPE_ATTR);
        inject_rule(TYPE_ATTR, 0, ENOSPC, 1, false);
        int r = device_vfio_configure(&f->roots, NULL, VF, "1150", &failure, &e);
        assert_failure(r, e, failure, -ENOSPC, DEVICE_FAILURE_REFUSED,
                       "destroy vGPU on VF " VF ": No space left on device");
}

static void test_configure_verify_and_rollback(void **state) /* DEV-6 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        /* "000" then "7" reads "700": rolled back to "000", which reads 0. */
        add_vf(f, VF, GROUP, "000");
        int r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "verify vGPU on VF " VF ": type is 700, want 7");
        assert_int_equal(seen_count(), 2);
        assert_seen(1, TYPE_ATTR "=0");
        assert_content(f, TYPE_ATTR, "000");

        /* The rollback write fails. */
        free(e);
        e = NULL;
        put(f, "000", TYPE_ATTR);
        inject_rule(TYPE_ATTR, 1, EIO, 1, false);
        r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "verify vGPU on VF " VF
                       ": type is 700, want 7; rollback: Input/output error");
        assert_content(f, TYPE_ATTR, "700");

        /* The rollback is not read back as 0 either: "0000", "12" reads "1200", "0" "0200". */
        free(e);
        e = NULL;
        put(f, "0000", TYPE_ATTR);
        r = device_vfio_configure(&f->roots, NULL, VF, "12", &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "verify vGPU on VF " VF
                       ": type is 1200, want 12; rollback: type is 200, want 0");

        /* A read-back that does not parse, and a rollback that does not either. */
        free(e);
        e = NULL;
        put(f, "0000000000000000", TYPE_ATTR);
        r = device_vfio_configure(&f->roots, NULL, VF, "1234", &failure, &e);
        assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_UNVERIFIED,
                       "verify vGPU on VF " VF ": read current vGPU type for VF " VF
                       ": invalid current vGPU type \"1234000000000000\"; rollback: read current "
                       "vGPU type for VF " VF ": invalid current vGPU type \"0234000000000000\"");
}

static void test_configure_read_errors(void **state) /* DEV-3, DISC-5 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        int r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -ENOENT, DEVICE_FAILURE_ERROR,
                       "read current vGPU type for VF " VF ": No such file or directory");

        free(e);
        e = NULL;
        add_vf(f, VF, GROUP, "seven\n");
        r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR,
                       "read current vGPU type for VF " VF ": invalid current vGPU type \"seven\"");

        free(e);
        e = NULL;
        put(f, "00000000000000007", TYPE_ATTR); /* 17 bytes: beyond DISC-5's bound */
        r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EFBIG, DEVICE_FAILURE_ERROR,
                       "read current vGPU type for VF " VF ": File too large");
        assert_int_equal(seen_count(), 0);
}

/* ---- vendor VFIO release (DEV-8, DEV-9) ---------------------------------------------------- */

static void test_release_nothing_configured(void **state) /* DEV-8, DISC-21 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;
        uint32_t type = 99;

        /* The VF is gone altogether. */
        assert_int_equal(device_vfio_release(&f->roots, NULL, VF, &type, &failure, &e), 0);
        assert_int_equal(type, 0);

        /* The VF is there without the attribute. */
        link_at(f, "../" PF, "sys/bus/pci/devices/%s/physfn", VF);
        type = 99;
        assert_int_equal(device_vfio_release(&f->roots, NULL, VF, &type, &failure, &e), 0);
        assert_int_equal(type, 0);

        put(f, "0\n", TYPE_ATTR);
        assert_int_equal(device_vfio_release(&f->roots, NULL, VF, NULL, &failure, &e), 0);
        assert_null(e);
        assert_int_equal(seen_count(), 0);
}

static void test_release_read_error(void **state) /* DEV-8 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        add_vf(f, VF, GROUP, "0x5\n");
        int r = device_vfio_release(&f->roots, NULL, VF, NULL, &failure, &e);
        assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR,
                       "read current vGPU type for VF " VF ": invalid current vGPU type \"0x5\"");

        free(e);
        e = NULL;
        assert_int_equal(unlinkat(f->fd, "sys/" TYPE_ATTR, 0), 0);
        mkdirs(f, "sys/" TYPE_ATTR);
        r = device_vfio_release(&f->roots, NULL, VF, NULL, &failure, &e);
        assert_failure(r, e, failure, -EISDIR, DEVICE_FAILURE_ERROR,
                       "read current vGPU type for VF " VF ": Is a directory");
        assert_int_equal(seen_count(), 0);
}

static void test_release_writes_zero(void **state) /* DEV-9 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;
        uint32_t type = 0;

        add_vf(f, VF, GROUP, "5\n");
        assert_int_equal(device_vfio_release(&f->roots, NULL, VF, &type, &failure, &e), 1);
        assert_int_equal(type, 5);
        assert_int_equal(seen_count(), 1);
        assert_seen(0, TYPE_ATTR "=0");
        assert_true(inject.seen[0].write_only && inject.seen[0].cloexec);
        assert_content(f, TYPE_ATTR, "0\n");
}

static void test_release_failures(void **state) /* DEV-9 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL, *want = NULL;
        DeviceFailure failure;

        add_vf(f, VF, GROUP, "5\n");

        /* Held open. */
        hold(f, "300", 4, "vfio/" GROUP);
        int r = device_vfio_release(&f->roots, NULL, VF, NULL, &failure, &e);
        assert_failure(r, e, failure, -EBUSY, DEVICE_FAILURE_IN_USE,
                       "vendor VFIO vGPU on VF " VF " is still in use");
        assert_int_equal(failure.type_id, 5);
        remove_tree_at(f->fd, "proc/300");

        /* The scan fails. */
        free(e);
        e = NULL;
        put_at(f, "", "proc/302/fd");
        r = device_vfio_release(&f->roots, NULL, VF, NULL, &failure, &e);
        assert_failure(
            r, e, failure, -ENOTDIR, DEVICE_FAILURE_ERROR,
            "scan open VFIO handles: read process 302 file descriptors: Not a directory");
        remove_tree_at(f->fd, "proc/302");

        /* The probe fails. */
        free(e);
        e = NULL;
        put(f, "", "bus/pci/devices/%s/vfio-dev", VF);
        r = device_vfio_release(&f->roots, NULL, VF, NULL, &failure, &e);
        want = fmt("check vendor VFIO vGPU usage for VF " VF ": list %s/sys/bus/pci/devices/" VF
                   "/vfio-dev: Not a directory",
                   f->dir);
        assert_failure(r, e, failure, -ENOTDIR, DEVICE_FAILURE_ERROR, want);
        assert_int_equal(unlinkat(f->fd, "sys/bus/pci/devices/" VF "/vfio-dev", 0), 0);
        assert_int_equal(seen_count(), 0);

        /* The driver refuses the 0. */
        free(e);
        e = NULL;
        inject_rule(TYPE_ATTR, 0, EBUSY, 1, false);
        r = device_vfio_release(&f->roots, NULL, VF, NULL, &failure, &e);
        assert_failure(r, e, failure, -EBUSY, DEVICE_FAILURE_REFUSED,
                       "destroy vGPU on VF " VF ": Device or resource busy");

        /* The 0 does not stick. */
        free(e);
        e = NULL;
        put(f, "1150\n", TYPE_ATTR);
        r = device_vfio_release(&f->roots, NULL, VF, NULL, &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "verify reset vGPU on VF " VF ": type is 150, want 0");
        assert_int_equal(failure.type_id, 1150);
}

static void test_read_back_failures(void **state) /* DEV-4, DEV-6, DEV-9, DISC-21 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;
        uint32_t type = 0;

        /* The VF vanishes with its vGPU right after the 0 (an SR-IOV cycle): released. */
        add_vf(f, VF, GROUP, "5\n");
        inject_read_rule(TYPE_ATTR, 2, ENOENT, 1);
        assert_int_equal(device_vfio_release(&f->roots, NULL, VF, &type, &failure, &e), 1);
        assert_int_equal(type, 5);

        /* The read-back fails: unverified. */
        put(f, "5\n", TYPE_ATTR);
        inject_read_rule(TYPE_ATTR, 2, EIO, 1);
        int r = device_vfio_release(&f->roots, NULL, VF, NULL, &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "read current vGPU type for VF " VF ": Input/output error");
        assert_int_equal(failure.type_id, 5);

        /* The same in configure's verify: the rollback reads back an error ... */
        free(e);
        e = NULL;
        put(f, "0\n", TYPE_ATTR);
        inject_read_rule(TYPE_ATTR, 2, EIO, 2);
        r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "verify vGPU on VF " VF ": read current vGPU type for VF " VF
                       ": Input/output error; rollback: read current vGPU type for VF " VF
                       ": Input/output error");
        assert_content(f, TYPE_ATTR, "0\n");

        /* ... or finds the VF gone, which leaves nothing to roll back. */
        free(e);
        e = NULL;
        inject_read_rule(TYPE_ATTR, 2, EIO, 1);
        inject_read_rule(TYPE_ATTR, 0, ENOENT, 1);
        r = device_vfio_configure(&f->roots, NULL, VF, "7", &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "verify vGPU on VF " VF ": read current vGPU type for VF " VF
                       ": Input/output error");

        free(e);
        e = NULL;
        r = device_vfio_release(&f->roots, NULL, "0000:e3:00.8", NULL, &failure, &e);
        assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR,
                       "invalid VF address \"0000:e3:00.8\"");
}

static void test_release_uses_the_given_scan(void **state) /* DEV-15 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL, *proc2 = NULL;
        DeviceFailure failure;

        add_vf(f, VF, GROUP, "5\n");

        /* A scan of another proc tree, where a process holds the group: that scan decides. */
        char target[PATH_MAX];
        snprintf(target, sizeof target, "%s/vfio/" GROUP, f->dev);
        link_at(f, target, "proc2/77/fd/3");
        assert_int_equal(strprintf(&proc2, "%s/proc2", f->dir), 0);
        _cleanup_root_ Root *p2 = NULL;
        assert_int_equal(root_open(proc2, &p2), 0);
        VfioScan *scan = NULL;
        assert_int_equal(vfio_scan(p2, f->dev, &scan, NULL), 0);
        _cleanup_device_scan_ DeviceScan *shared = NULL;
        assert_int_equal(device_scan_new(scan, &shared), 0);
        assert_int_equal(device_scan_new(NULL, &shared), -EINVAL);

        int r = device_vfio_release(&f->roots, device_scan_get(shared), VF, NULL, &failure, &e);
        assert_failure(r, e, failure, -EBUSY, DEVICE_FAILURE_IN_USE,
                       "vendor VFIO vGPU on VF " VF " is still in use");
        /* A fresh scan of the fixture's own proc tree sees nobody. */
        assert_int_equal(device_vfio_release(&f->roots, NULL, VF, NULL, &failure, NULL), 1);
}

/* ---- mdev (DEV-16, DEV-17) ----------------------------------------------------------------- */

/* A VF with two mdev types, as class/mdev_bus shows it. */
static void add_mdev_vf(Fixture *f)
{
        link_at(f, "../" PF, "sys/bus/pci/devices/%s/physfn", VF);
        link_at(f, "../../bus/pci/devices/" VF, "sys/class/mdev_bus/%s", VF);
        put(f, "NVIDIA A40-1Q\n", MDEV_TYPES "/nvidia-900/name");
        put(f, "", MDEV_TYPES "/nvidia-900/create");
        put(f, "  NVIDIA A40-2Q \n", MDEV_TYPES "/nvidia-901/name");
        put(f, "", MDEV_TYPES "/nvidia-901/create");
}

/* What the driver leaves after a create: the mdev, of type t, in IOMMU group 40. */
static void add_mdev(Fixture *f, const char *t)
{
        char target[PATH_MAX];
        snprintf(target, sizeof target, "../../../../" MDEV_TYPES "/%s", t);
        link_at(f, target, "sys/" MDEV_DIR "/mdev_type");
        link_at(f, "../../../../kernel/iommu_groups/40", "sys/" MDEV_DIR "/iommu_group");
        put(f, "", MDEV_REMOVE);
}

static void test_mdev_uuid_validity(void **state) /* DEV-16 */
{
        (void)state;
        assert_true(device_mdev_uuid_is_valid(UUID));
        assert_true(device_mdev_uuid_is_valid("00000000-0000-4000-8000-000000000000"));
        assert_false(device_mdev_uuid_is_valid("3B2C4E6A-1F0D-4C8B-9A7E-5D6F7A8B9C0D"));
        assert_false(device_mdev_uuid_is_valid("3b2c4e6a-1f0d-1c8b-9a7e-5d6f7a8b9c0d"));
        assert_false(device_mdev_uuid_is_valid("3b2c4e6a-1f0d-4c8b-ca7e-5d6f7a8b9c0d"));
        assert_false(device_mdev_uuid_is_valid("3b2c4e6a-1f0d-4c8b-9a7e-5d6f7a8b9c0d\n"));
        assert_false(device_mdev_uuid_is_valid("3b2c4e6a1f0d4c8b9a7e5d6f7a8b9c0d"));
        assert_false(device_mdev_uuid_is_valid(""));
        assert_false(device_mdev_uuid_is_valid(NULL));
}

static void test_mdev_create(void **state) /* DEV-16 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        add_mdev_vf(f);
        add_mdev(f, "nvidia-901"); /* the driver's answer to the store below */
        assert_int_equal(device_mdev_create(f->sys, VF, "NVIDIA A40-2Q", UUID, &failure, &e), 0);
        assert_null(e);
        assert_int_equal(seen_count(), 1);
        assert_seen(0, MDEV_TYPES "/nvidia-901/create=" UUID); /* no newline */
}

static void test_mdev_create_failures(void **state) /* DEV-16 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL, *want = NULL;
        DeviceFailure failure;

        /* No types directory. */
        link_at(f, "../" PF, "sys/bus/pci/devices/%s/physfn", VF);
        int r = device_mdev_create(f->sys, VF, "NVIDIA A40-2Q", UUID, &failure, &e);
        assert_failure(r, e, failure, -ENOENT, DEVICE_FAILURE_ERROR,
                       "create mdev on VF " VF ": list class/mdev_bus/" VF
                       "/mdev_supported_types: No such file or directory");

        /* No type of that name; names match exactly, after trimming. */
        free(e);
        e = NULL;
        add_mdev_vf(f);
        r = device_mdev_create(f->sys, VF, "NVIDIA A40-2", UUID, &failure, &e);
        assert_failure(r, e, failure, -ENOENT, DEVICE_FAILURE_ERROR,
                       "create mdev on VF " VF ": no mdev type named \"NVIDIA A40-2\"");
        assert_int_equal(seen_count(), 0);

        /* A type directory without a name is passed over. */
        mkdirs(f, "sys/" MDEV_TYPES "/nvidia-898");
        r = device_mdev_create(f->sys, VF, "NVIDIA A40-7Q", UUID, &failure, &e);
        assert_failure(r, e, failure, -ENOENT, DEVICE_FAILURE_ERROR,
                       "create mdev on VF " VF ": no mdev type named \"NVIDIA A40-7Q\"");
        free(e);
        e = NULL;

        /* A name that cannot be read. */
        free(e);
        e = NULL;
        mkdirs(f, "sys/" MDEV_TYPES "/nvidia-899/name");
        r = device_mdev_create(f->sys, VF, "NVIDIA A40-2Q", UUID, &failure, &e);
        assert_failure(r, e, failure, -EISDIR, DEVICE_FAILURE_ERROR,
                       "create mdev on VF " VF ": read class/mdev_bus/" VF
                       "/mdev_supported_types/nvidia-899/name: Is a directory");
        remove_tree_at(f->fd, "sys/" MDEV_TYPES "/nvidia-899");

        /* The driver refuses: a capacity refusal. */
        free(e);
        e = NULL;
        inject_rule("nvidia-901/create", 0, ENOSPC, 1, false);
        r = device_mdev_create(f->sys, VF, "NVIDIA A40-2Q", UUID, &failure, &e);
        assert_failure(r, e, failure, -ENOSPC, DEVICE_FAILURE_CAPACITY,
                       "create mdev on VF " VF ": No space left on device");

        /* The create is accepted but no mdev appears: its removal finds nothing to remove. */
        free(e);
        e = NULL;
        size_t before = seen_count();
        r = device_mdev_create(f->sys, VF, "NVIDIA A40-2Q", UUID, &failure, &e);
        assert_failure(r, e, failure, -ENOENT, DEVICE_FAILURE_UNVERIFIED,
                       "create mdev on VF " VF ": read type of mdev " UUID
                       ": No such file or directory");
        assert_int_equal(seen_count(), before + 1);

        /* An mdev of another type appears: it is removed. */
        free(e);
        e = NULL;
        add_mdev(f, "nvidia-900");
        before = seen_count();
        r = device_mdev_create(f->sys, VF, "NVIDIA A40-2Q", UUID, &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "create mdev on VF " VF ": mdev " UUID
                       " has type \"nvidia-900\", want \"nvidia-901\"");
        assert_int_equal(seen_count(), before + 2);
        assert_seen(before + 1, MDEV_REMOVE "=1");

        /* ... and the removal fails. */
        free(e);
        e = NULL;
        inject_rule(MDEV_REMOVE, 0, EBUSY, 1, false);
        r = device_mdev_create(f->sys, VF, "NVIDIA A40-2Q", UUID, &failure, &e);
        assert_failure(r, e, failure, -EIO, DEVICE_FAILURE_UNVERIFIED,
                       "create mdev on VF " VF ": mdev " UUID
                       " has type \"nvidia-900\", want \"nvidia-901\"; remove: Device or "
                       "resource busy");

        /* Invalid requests. */
        free(e);
        e = NULL;
        r = device_mdev_create(f->sys, VF, "NVIDIA A40-2Q", "3B2C4E6A-1F0D-4C8B-9A7E-5D6F7A8B9C0D",
                               &failure, &e);
        assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR,
                       "invalid mdev UUID \"3B2C4E6A-1F0D-4C8B-9A7E-5D6F7A8B9C0D\"");
        free(e);
        e = NULL;
        r = device_mdev_create(f->sys, VF, "", UUID, &failure, &e);
        assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR,
                       "invalid vGPU profile name \"\"");
        free(e);
        e = NULL;
        r = device_mdev_create(f->sys, "0000:e3:00", "NVIDIA A40-2Q", UUID, &failure, &e);
        assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR,
                       "invalid VF address \"0000:e3:00\"");

        /* A PF as the parent: the guard refuses before anything is written. */
        free(e);
        e = NULL;
        link_at(f, "../../bus/pci/devices/" PF, "sys/class/mdev_bus/%s", PF);
        put(f, "NVIDIA A40-2Q\n", "bus/pci/devices/" PF "/mdev_supported_types/nvidia-901/name");
        before = seen_count();
        r = device_mdev_create(f->sys, PF, "NVIDIA A40-2Q", UUID, &failure, &e);
        want = fmt("refuse to write class/mdev_bus/" PF
                   "/mdev_supported_types/nvidia-901/create: " PF " is not a VF");
        assert_failure(r, e, failure, -EPERM, DEVICE_FAILURE_ERROR, want);
        assert_int_equal(seen_count(), before);
}

static void test_mdev_remove(void **state) /* DEV-17 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        /* Gone already. */
        assert_int_equal(device_mdev_exists(f->sys, UUID, &e), 0);
        assert_int_equal(device_mdev_remove(&f->roots, NULL, UUID, &failure, &e), 0);
        assert_int_equal(seen_count(), 0);

        add_mdev_vf(f);
        add_mdev(f, "nvidia-901");
        assert_int_equal(device_mdev_exists(f->sys, UUID, &e), 1);
        assert_int_equal(device_mdev_remove(&f->roots, NULL, UUID, &failure, &e), 1);
        assert_null(e);
        assert_int_equal(seen_count(), 1);
        assert_seen(0, MDEV_REMOVE "=1");

        /* A remove attribute that is gone counts as removed. */
        assert_int_equal(unlinkat(f->fd, "sys/" MDEV_REMOVE, 0), 0);
        assert_int_equal(device_mdev_remove(&f->roots, NULL, UUID, &failure, &e), 1);
        assert_null(e);
}

static void test_mdev_remove_failures(void **state) /* DEV-17 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL, *want = NULL;
        DeviceFailure failure;

        add_mdev_vf(f);
        add_mdev(f, "nvidia-901");

        hold(f, "60", 3, "vfio/40");
        int r = device_mdev_remove(&f->roots, NULL, UUID, &failure, &e);
        assert_failure(r, e, failure, -EBUSY, DEVICE_FAILURE_IN_USE,
                       "mdev " UUID " is still in use");
        remove_tree_at(f->fd, "proc/60");

        free(e);
        e = NULL;
        put_at(f, "", "proc/61/fd");
        r = device_mdev_remove(&f->roots, NULL, UUID, &failure, &e);
        assert_failure(r, e, failure, -ENOTDIR, DEVICE_FAILURE_ERROR,
                       "scan open VFIO handles: read process 61 file descriptors: Not a directory");
        remove_tree_at(f->fd, "proc/61");

        free(e);
        e = NULL;
        assert_int_equal(unlinkat(f->fd, "sys/" MDEV_DIR "/iommu_group", 0), 0);
        link_at(f, "../../../../kernel/iommu_groups/040", "sys/" MDEV_DIR "/iommu_group");
        r = device_mdev_remove(&f->roots, NULL, UUID, &failure, &e);
        want = fmt("check mdev " UUID " usage: invalid IOMMU group \"040\" in %s/sys/" MDEV_DIR
                   "/iommu_group",
                   f->dir);
        assert_failure(r, e, failure, -EBADMSG, DEVICE_FAILURE_ERROR, want);
        assert_int_equal(unlinkat(f->fd, "sys/" MDEV_DIR "/iommu_group", 0), 0);
        assert_int_equal(seen_count(), 0);

        free(e);
        e = NULL;
        inject_rule(MDEV_REMOVE, 0, EBUSY, 1, false);
        r = device_mdev_remove(&f->roots, NULL, UUID, &failure, &e);
        assert_failure(r, e, failure, -EBUSY, DEVICE_FAILURE_REFUSED,
                       "remove mdev " UUID ": Device or resource busy");

        /* Whether it exists cannot be told. */
        free(e);
        e = NULL;
        remove_tree_at(f->fd, "sys/bus/mdev/devices");
        link_at(f, "devices", "sys/bus/mdev/devices"); /* a loop: ELOOP below it */
        r = device_mdev_remove(&f->roots, NULL, UUID, &failure, &e);
        assert_failure(r, e, failure, -ELOOP, DEVICE_FAILURE_ERROR,
                       "remove mdev " UUID ": Too many levels of symbolic links");
        free(e);
        e = NULL;
        assert_int_equal(device_mdev_exists(f->sys, UUID, &e), -ELOOP);
        assert_string_equal(e, "check mdev " UUID ": Too many levels of symbolic links");

        free(e);
        e = NULL;
        assert_int_equal(device_mdev_exists(f->sys, "not-a-uuid", &e), -EINVAL);
        assert_string_equal(e, "invalid mdev UUID \"not-a-uuid\"");
        free(e);
        e = NULL;
        r = device_mdev_remove(&f->roots, NULL, "not-a-uuid", &failure, &e);
        assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR,
                       "invalid mdev UUID \"not-a-uuid\"");
}

/* ---- release by framework (DISC-22) -------------------------------------------------------- */

static void test_release_claim_by_framework(void **state) /* DISC-22 */
{
        Fixture *f = *state;
        _cleanup_free_ char *e = NULL;
        DeviceFailure failure;

        add_mdev_vf(f);
        add_mdev(f, "nvidia-901");
        put(f, "5\n", TYPE_ATTR); /* the same VF also shows a vendor type */

        DeviceClaim mdev = {.framework = "mdev", .vf = VF, .mdev_uuid = UUID};
        assert_int_equal(device_release_claim(&f->roots, NULL, &mdev, &failure, &e), 1);
        assert_int_equal(seen_count(), 1);
        assert_seen(0, MDEV_REMOVE "=1");

        DeviceClaim vendor = {.framework = "vendor-vfio", .vf = VF};
        assert_int_equal(device_release_claim(&f->roots, NULL, &vendor, &failure, &e), 1);
        assert_int_equal(seen_count(), 2);
        assert_seen(1, TYPE_ATTR "=0");

        static const char *const unknown[] = {"none", "vfio", "", "MDEV"};
        for (size_t i = 0; i < ELEMENTSOF(unknown); i++) {
                _cleanup_free_ char *want = fmt("unknown vGPU framework \"%s\"", unknown[i]);
                free(e);
                e = NULL;
                DeviceClaim c = {.framework = unknown[i], .vf = VF, .mdev_uuid = UUID};
                int r = device_release_claim(&f->roots, NULL, &c, &failure, &e);
                assert_failure(r, e, failure, -EINVAL, DEVICE_FAILURE_ERROR, want);
        }
        assert_int_equal(seen_count(), 2);
}

/* ---- the asynchronous layer ---------------------------------------------------------------- */

static bool guard_is_quarantined(void *userdata, const char *vf)
{
        Fixture *f = userdata;
        assert_non_null(vf);
        return f->quarantined;
}

static const char *guard_store_unavailable(void *userdata)
{
        Fixture *f = userdata;
        return f->store_down;
}

static void start_ops_with(Fixture *f, unsigned max_extra, const MonoClock *clock,
                           nsec_t retry_interval)
{
        WorkerPoolConfig pc = {.threads = 4, .max_extra = max_extra, .clock = clock};
        assert_int_equal(worker_pool_new(&pc, &f->pool), 0);
        DeviceOpsConfig c = {
            .roots = f->roots,
            .pool = f->pool,
            .sysfs_timeout = 2 * NSEC_PER_SEC,
            .retry_interval = retry_interval,
            .clock = clock,
            .guard = {.is_quarantined = guard_is_quarantined,
                      .store_unavailable = guard_store_unavailable,
                      .userdata = f},
        };
        assert_int_equal(device_ops_new(&c, &f->ops), 0);
        assert_int_equal(worker_pool_attach_event(f->pool, f->event), 0);
        assert_int_equal(device_ops_attach_event(f->ops, f->event), 0);
}

static void start_ops(Fixture *f)
{
        start_ops_with(f, WORKER_POOL_MAX_EXTRA, &fake.clock, 0);
}

/*
 * Runs the loop until pred holds, for at most 10 s of real time. The injected clock may have
 * moved since the last wait, which the loop cannot see: first the pool and DeviceOps look at
 * their deadlines and due retries once.
 */
static void pump_until(Fixture *f, bool (*pred)(Fixture *f, const void *arg), const void *arg)
{
        (void)worker_pool_dispatch_completions(f->pool);
        (void)device_ops_dispatch(f->ops);
        TEST_WAIT_UNTIL_LIMIT(f->event, 10 * NSEC_PER_SEC, pred(f, arg));
}

static bool is_done(Fixture *f, const void *arg)
{
        (void)f;
        return ((const DeviceDone *)arg)->called;
}

static bool is_waiting(Fixture *f, const void *arg)
{
        (void)arg;
        nsec_t t;
        return device_ops_get_next_wakeup(f->ops, &t) == 1;
}

static bool is_hanging(Fixture *f, const void *arg)
{
        (void)f;
        return inject_hanging() >= *(const unsigned *)arg;
}

static bool is_certain(Fixture *f, const void *arg)
{
        return !worker_pool_key_is_uncertain(f->pool, arg);
}

/* Moves the clock to the next due retry or poll, which must be interval away. */
static void advance_to_wakeup(Fixture *f, nsec_t interval)
{
        nsec_t t;
        pump_until(f, is_waiting, NULL);
        assert_int_equal(device_ops_get_next_wakeup(f->ops, &t), 1);
        assert_true(t == fake_now(NULL) + interval);
        advance(interval);
}

static void release_request(DeviceReleaseRequest *req, const char *framework, const char *vf,
                            const char *uuid, const char *instance_id, bool after_exit)
{
        *req = (DeviceReleaseRequest){
            .claim = {.framework = framework, .vf = vf, .mdev_uuid = uuid},
            .instance_id = instance_id,
            .after_vmm_exit = after_exit,
        };
}

static void test_ops_outcomes_are_logged(void **state) /* DEV-19, DEV-3, DEV-8 */
{
        Fixture *f = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;

        add_vf(f, VF, GROUP, "0\n");
        start_ops(f);

        assert_int_equal(device_ops_configure(f->ops, VF, "7", "k3x9q2m8v1c4z7n5b0wd",
                                              device_done_record, &d, &e),
                         0);
        assert_true(device_ops_is_busy(f->ops, VF));
        pump_until(f, is_done, &d);
        assert_int_equal(d.r, 1);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_CONFIGURED);
        assert_int_equal(d.type_id, 7);
        assert_string_equal(d.vf, VF);
        assert_false(device_ops_is_busy(f->ops, VF));
        assert_logged(f, "<6>configure vGPU vf=" VF " type=7 instance_id=k3x9q2m8v1c4z7n5b0wd "
                         "outcome=configured\n");
        device_done_clear(&d);

        assert_int_equal(device_ops_configure(f->ops, VF, "7", NULL, device_done_record, &d, &e),
                         0);
        pump_until(f, is_done, &d);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_UNCHANGED);
        assert_logged(f, "<6>configure vGPU vf=" VF " type=7 outcome=unchanged\n");
        device_done_clear(&d);

        put(f, "0\n", TYPE_ATTR);
        inject_rule(TYPE_ATTR, 0, ENOSPC, 1, false);
        assert_int_equal(device_ops_configure(f->ops, VF, "9", "k3x9q2m8v1c4z7n5b0wd",
                                              device_done_record, &d, &e),
                         0);
        pump_until(f, is_done, &d);
        assert_int_equal(d.r, -ENOSPC);
        assert_int_equal(d.kind, DEVICE_FAILURE_CAPACITY);
        assert_string_equal(d.error,
                            "driver refused vGPU type 9 on VF " VF ": No space left on device");
        assert_logged(f, "<6>configure vGPU vf=" VF " type=9 instance_id=k3x9q2m8v1c4z7n5b0wd "
                         "outcome=failed error=\"driver refused vGPU type 9 on VF " VF
                         ": No space left on device\"\n");
        device_done_clear(&d);

        put(f, "7\n", TYPE_ATTR);
        release_request(&req, "vendor-vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", false);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        pump_until(f, is_done, &d);
        assert_int_equal(d.r, 1);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_RELEASED);
        assert_int_equal(d.type_id, 7);
        assert_int_equal(d.attempts, 1);
        assert_logged(f, "<6>release vGPU vf=" VF " type=7 instance_id=k3x9q2m8v1c4z7n5b0wd "
                         "outcome=released attempts=1\n");
        device_done_clear(&d);

        release_request(&req, "vendor-vfio", VF, NULL, NULL, false);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        pump_until(f, is_done, &d);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_NOT_CONFIGURED);
        assert_logged(f, "<6>reset vGPU vf=" VF " outcome=not_configured attempts=1\n");
        device_done_clear(&d);
        assert_null(e);
}

static void test_ops_invalid_requests(void **state) /* DEV-1, DISC-22, DEV-19 */
{
        Fixture *f = *state;
        DeviceDone d = {};
        DeviceReleaseRequest req;
        start_ops(f);

        static const struct {
                const char *vf, *type, *message;
        } bad[] = {
            {VF, "0", "invalid vendor VFIO vGPU profile type \"0\""},
            {VF, "", "invalid vendor VFIO vGPU profile type \"\""},
            {VF, NULL, "invalid vendor VFIO vGPU profile type \"\""},
            {"e3:00.4", "7", "invalid VF address \"e3:00.4\""},
            {NULL, "7", "invalid VF address \"\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *e = NULL;
                assert_int_equal(device_ops_configure(f->ops, bad[i].vf, bad[i].type, NULL,
                                                      device_done_record, &d, &e),
                                 -EINVAL);
                assert_string_equal(e, bad[i].message);
        }
        assert_logged(f, "<6>configure vGPU vf=" VF " type=0 outcome=failed "
                         "error=\"invalid vendor VFIO vGPU profile type \\\"0\\\"\"\n");
        /* DEV-19: a caller that takes no message still finds the refusal in the log line. */
        assert_int_equal(
            device_ops_configure(f->ops, VF, "abc", NULL, device_done_record, &d, NULL), -EINVAL);
        assert_logged(f, "<6>configure vGPU vf=" VF " type=abc outcome=failed "
                         "error=\"invalid vendor VFIO vGPU profile type \\\"abc\\\"\"\n");

        _cleanup_free_ char *e = NULL;
        assert_int_equal(device_ops_mdev_create(f->ops, VF, "NVIDIA A40-2Q", "nope", NULL,
                                                device_done_record, &d, &e),
                         -EINVAL);
        assert_string_equal(e, "invalid mdev UUID \"nope\"");

        free(e);
        e = NULL;
        release_request(&req, "vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), -EINVAL);
        assert_string_equal(e, "unknown vGPU framework \"vfio\"");
        assert_logged(f, "<6>release vGPU vf=" VF " instance_id=k3x9q2m8v1c4z7n5b0wd "
                         "outcome=failed error=\"unknown vGPU framework \\\"vfio\\\"\"\n");

        free(e);
        e = NULL;
        release_request(&req, "vendor-vfio", NULL, NULL, NULL, false);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), -EINVAL);
        assert_string_equal(e, "invalid VF address \"\"");
        free(e);
        e = NULL;
        release_request(&req, "mdev", VF, NULL, NULL, false);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), -EINVAL);
        assert_string_equal(e, "invalid mdev UUID \"\"");
        assert_int_equal(device_ops_release(f->ops, NULL, device_done_record, &d, NULL), -EINVAL);

        assert_false(d.called);
        assert_int_equal(seen_count(), 0);
}

static void test_ops_quarantine_rechecked(void **state) /* DEV-2, HEALTH-16, HEALTH-24 */
{
        Fixture *f = *state;
        DeviceDone d1 = {}, d2 = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;

        add_vf(f, VF, GROUP, "0\n");
        start_ops(f);

        /* Refused at once, nothing written. */
        f->quarantined = true;
        assert_int_equal(device_ops_configure(f->ops, VF, "7", NULL, device_done_record, &d1, &e),
                         -EPERM);
        assert_string_equal(e, "vendor VFIO vGPU on VF " VF " is quarantined");
        assert_logged(f, "<6>configure vGPU vf=" VF " type=7 outcome=failed error=\"vendor VFIO "
                         "vGPU on VF " VF " is quarantined\"\n");
        free(e);
        e = NULL;
        assert_int_equal(device_ops_mdev_create(f->ops, VF, "NVIDIA A40-2Q", UUID, NULL,
                                                device_done_record, &d1, &e),
                         -EPERM);
        assert_string_equal(e, "mdev vGPU on VF " VF " is quarantined");

        /* An unavailable store answers first, with its own text. */
        free(e);
        e = NULL;
        f->store_down = "VF health state unavailable: last write failed: sync VF health state: "
                        "Input/output error";
        assert_int_equal(device_ops_configure(f->ops, VF, "7", NULL, device_done_record, &d1, &e),
                         -EAGAIN);
        assert_string_equal(e, f->store_down);
        assert_false(d1.called);
        assert_int_equal(seen_count(), 0);

        /* A quarantine never holds up a release. */
        put(f, "5\n", TYPE_ATTR);
        release_request(&req, "vendor-vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", true);
        inject_rule(TYPE_ATTR, 0, EBUSY, 1, false); /* the release waits for one retry */
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d1, &e), 0);
        pump_until(f, is_waiting, NULL);

        /* Queued behind it while the store is fine and the VF is not quarantined ... */
        f->store_down = NULL;
        f->quarantined = false;
        assert_int_equal(device_ops_configure(f->ops, VF, "7", NULL, device_done_record, &d2, &e),
                         0);
        /* ... and quarantined before its turn: the check at dispatch catches it. */
        f->quarantined = true;
        advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        pump_until(f, is_done, &d2);
        assert_true(d1.called);
        assert_int_equal(d1.outcome, DEVICE_OUTCOME_RELEASED);
        assert_int_equal(d2.r, -EPERM);
        assert_int_equal(d2.kind, DEVICE_FAILURE_QUARANTINED);
        assert_string_equal(d2.error, "vendor VFIO vGPU on VF " VF " is quarantined");
        assert_int_equal(seen_count(), 2); /* the two zeros of the release */
        assert_seen(1, TYPE_ATTR "=0");

        /* The same with the store going down instead. */
        device_done_clear(&d1);
        device_done_clear(&d2);
        put(f, "5\n", TYPE_ATTR);
        f->quarantined = false;
        inject_rule(TYPE_ATTR, 0, EBUSY, 1, false);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d1, &e), 0);
        pump_until(f, is_waiting, NULL);
        assert_int_equal(device_ops_configure(f->ops, VF, "7", NULL, device_done_record, &d2, &e),
                         0);
        f->store_down = "VF health state unavailable: read VF health state: Permission denied";
        advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        pump_until(f, is_done, &d2);
        assert_int_equal(d2.kind, DEVICE_FAILURE_STORE);
        assert_string_equal(d2.error, f->store_down);
        assert_int_equal(seen_count(), 4);
        device_done_clear(&d1);
        device_done_clear(&d2);
}

static void test_ops_serialise_one_vf(void **state) /* DEV-11 */
{
        Fixture *f = *state;
        DeviceDone d1 = {}, d2 = {}, d3 = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;

        add_vf(f, VF, GROUP, "5\n");
        add_vf(f, VF2, "13", "0\n");
        start_ops(f);

        /* A release that waits between its attempts still holds the VF. */
        inject_rule(TYPE_ATTR, 0, EBUSY, 1, false);
        release_request(&req, "vendor-vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d1, &e), 0);
        pump_until(f, is_waiting, NULL);
        assert_int_equal(device_ops_configure(f->ops, VF, "7", NULL, device_done_record, &d2, &e),
                         0);

        /* Another VF is not held up. */
        assert_int_equal(device_ops_configure(f->ops, VF2, "8", NULL, device_done_record, &d3, &e),
                         0);
        pump_until(f, is_done, &d3);
        assert_int_equal(d3.outcome, DEVICE_OUTCOME_CONFIGURED);

        assert_false(d2.called);
        assert_true(device_ops_is_busy(f->ops, VF));
        assert_int_equal(seen_count(), 2); /* the refused 0, and VF2's type */

        advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        pump_until(f, is_done, &d2);
        assert_true(d1.called);
        assert_int_equal(d1.attempts, 2);
        assert_int_equal(d2.outcome, DEVICE_OUTCOME_CONFIGURED);
        assert_int_equal(seen_count(), 4);
        assert_seen(0, TYPE_ATTR "=0 (-16)");
        assert_seen(1, TYPE_ATTR2 "=8");
        assert_seen(2, TYPE_ATTR "=0");
        assert_seen(3, TYPE_ATTR "=7");
        assert_true(inject.max_in_flight <= 1);
        device_done_clear(&d1);
        device_done_clear(&d2);
        device_done_clear(&d3);
}

static void test_ops_many_on_one_vf(void **state) /* DEV-11 */
{
        Fixture *f = *state;
        enum { N = 24 };
        DeviceDone d[N] = {};
        _cleanup_free_ char *e = NULL;

        add_vf(f, VF, GROUP, "0\n");
        start_ops(f);
        for (unsigned i = 0; i < N; i++) {
                if (i % 2 == 0) {
                        char type[4];
                        snprintf(type, sizeof type, "%u", 1 + i % 9);
                        assert_int_equal(device_ops_configure(f->ops, VF, type, NULL,
                                                              device_done_record, &d[i], &e),
                                         0);
                } else {
                        DeviceReleaseRequest req;
                        release_request(&req, "vendor-vfio", VF, NULL, "x", false);
                        assert_int_equal(
                            device_ops_release(f->ops, &req, device_done_record, &d[i], &e), 0);
                }
        }
        pump_until(f, is_done, &d[N - 1]);
        for (unsigned i = 0; i < N; i++) {
                assert_true(d[i].called);
                assert_int_equal(d[i].outcome,
                                 i % 2 == 0 ? DEVICE_OUTCOME_CONFIGURED : DEVICE_OUTCOME_RELEASED);
                device_done_clear(&d[i]);
        }
        /* In submission order, one at a time. */
        assert_int_equal(seen_count(), N);
        for (unsigned i = 0; i < N; i++) {
                _cleanup_free_ char *want = NULL;
                want = i % 2 == 0 ? fmt(TYPE_ATTR "=%u", 1 + i % 9) : fmt(TYPE_ATTR "=0");
                assert_seen(i, want);
        }
        assert_int_equal(inject.max_in_flight, 1);
}

static void test_ops_timeout_makes_vf_uncertain(void **state) /* GEN-4, GEN-12 */
{
        Fixture *f = *state;
        DeviceDone d1 = {}, d2 = {}, d3 = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;
        const unsigned one = 1;

        add_vf(f, VF, GROUP, "0\n");
        start_ops(f);

        inject_rule(TYPE_ATTR, 0, 0, 1, true);
        assert_int_equal(device_ops_configure(f->ops, VF, "7", "k3x9q2m8v1c4z7n5b0wd",
                                              device_done_record, &d1, &e),
                         0);
        pump_until(f, is_hanging, &one);
        release_request(&req, "vendor-vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d2, &e), 0);

        advance(2 * NSEC_PER_SEC);
        pump_until(f, is_done, &d2);
        assert_int_equal(d1.r, -ETIMEDOUT);
        assert_int_equal(d1.kind, DEVICE_FAILURE_TIMEOUT);
        assert_string_equal(d1.error, "timed out after 2s");
        assert_logged(f, "<6>configure vGPU vf=" VF " type=7 instance_id=k3x9q2m8v1c4z7n5b0wd "
                         "outcome=failed error=\"timed out after 2s\"\n");
        assert_true(worker_pool_key_is_uncertain(f->pool, VF));

        /* The release queued behind it is refused when its turn comes ... */
        assert_int_equal(d2.r, -EAGAIN);
        assert_int_equal(d2.kind, DEVICE_FAILURE_UNCERTAIN);
        assert_string_equal(d2.error,
                            "VF " VF " is uncertain: an earlier sysfs call on it has not returned");
        /* ... and a new operation at once. */
        assert_int_equal(device_ops_configure(f->ops, VF, "7", NULL, device_done_record, &d3, &e),
                         -EAGAIN);
        assert_string_equal(e,
                            "VF " VF " is uncertain: an earlier sysfs call on it has not returned");
        assert_false(d3.called);

        /* The call returns at last: the VF is certain again, and holds what was written. */
        inject_release();
        pump_until(f, is_certain, VF);
        free(e);
        e = NULL;
        assert_int_equal(device_ops_configure(f->ops, VF, "7", NULL, device_done_record, &d3, &e),
                         0);
        pump_until(f, is_done, &d3);
        assert_int_equal(d3.outcome, DEVICE_OUTCOME_UNCHANGED);
        device_done_clear(&d1);
        device_done_clear(&d2);
        device_done_clear(&d3);
}

static void test_ops_pool_exhausted(void **state) /* GEN-4 */
{
        Fixture *f = *state;
        DeviceDone d1 = {}, d2 = {}, d3 = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;
        const unsigned one = 1;

        add_vf(f, VF, GROUP, "0\n");
        add_vf(f, VF2, "13", "5\n");
        start_ops_with(f, 1, &fake.clock, 0); /* one stuck call exhausts this pool */

        /* VF2's release waits for a retry ... */
        inject_rule(TYPE_ATTR2, 0, EBUSY, 1, false);
        release_request(&req, "vendor-vfio", VF2, NULL, "k3x9q2m8v1c4z7n5b0wd", true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d2, &e), 0);
        pump_until(f, is_waiting, NULL);

        /* ... while a call on VF gets stuck. */
        inject_rule(TYPE_ATTR, 0, 0, 1, true);
        assert_int_equal(device_ops_configure(f->ops, VF, "7", NULL, device_done_record, &d1, &e),
                         0);
        pump_until(f, is_hanging, &one);
        advance(DEVICE_RETRY_INTERVAL_DEFAULT + NSEC_PER_SEC); /* past the 2 s deadline too */
        pump_until(f, is_done, &d2);
        assert_int_equal(d1.kind, DEVICE_FAILURE_TIMEOUT);
        assert_int_equal(d2.r, -EAGAIN);
        assert_int_equal(d2.kind, DEVICE_FAILURE_ERROR);
        assert_string_equal(d2.error, "sysfs worker pool exhausted (1 calls stuck)");

        assert_int_equal(device_ops_configure(f->ops, VF2, "7", NULL, device_done_record, &d3, &e),
                         -EAGAIN);
        assert_string_equal(e, "sysfs worker pool exhausted (1 calls stuck)");
        assert_false(d3.called);
        device_done_clear(&d1);
        device_done_clear(&d2);
}

static void test_ops_release_retries_after_vmm_exit(void **state) /* DEV-10 */
{
        Fixture *f = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;

        add_vf(f, VF, GROUP, "5\n");
        start_ops(f);

        /* Refused three times, then done. */
        inject_rule(TYPE_ATTR, 0, EBUSY, 3, false);
        release_request(&req, "vendor-vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        for (int i = 0; i < 3; i++)
                advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        pump_until(f, is_done, &d);
        assert_int_equal(d.r, 1);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_RELEASED);
        assert_int_equal(d.attempts, 4);
        assert_int_equal(d.type_id, 5);
        assert_logged(f, "<6>release vGPU vf=" VF " type=5 instance_id=k3x9q2m8v1c4z7n5b0wd "
                         "outcome=released attempts=4\n");
        device_done_clear(&d);

        /* An unverified release is retried too: the second attempt finds a clean 5. */
        put(f, "1150\n", TYPE_ATTR);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        pump_until(f, is_waiting, NULL);
        put(f, "5\n", TYPE_ATTR);
        advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        pump_until(f, is_done, &d);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_RELEASED);
        assert_int_equal(d.attempts, 2);
        device_done_clear(&d);

        /* Without a VMM exit there is one attempt. */
        put(f, "5\n", TYPE_ATTR);
        inject_rule(TYPE_ATTR, 0, EBUSY, 1, false);
        release_request(&req, "vendor-vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", false);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        pump_until(f, is_done, &d);
        assert_int_equal(d.attempts, 1);
        assert_int_equal(d.kind, DEVICE_FAILURE_REFUSED);
        assert_int_equal(device_ops_get_next_wakeup(f->ops, &(nsec_t){0}), 0);
        device_done_clear(&d);
        assert_null(e);
}

static void test_ops_release_gives_up(void **state) /* DEV-10 */
{
        Fixture *f = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;

        add_vf(f, VF, GROUP, "5\n");
        start_ops(f);

        inject_rule(TYPE_ATTR, 0, EBUSY, -1, false);
        release_request(&req, "vendor-vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        for (unsigned i = 1; i < DEVICE_RETRY_ATTEMPTS_DEFAULT; i++)
                advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        pump_until(f, is_done, &d);
        assert_int_equal(d.r, -EBUSY);
        assert_int_equal(d.kind, DEVICE_FAILURE_REFUSED);
        assert_int_equal(d.attempts, 10);
        assert_int_equal(d.type_id, 5);
        assert_string_equal(d.error, "destroy vGPU on VF " VF ": Device or resource busy");
        assert_int_equal(seen_count(), 10);
        assert_false(device_ops_is_busy(f->ops, VF));
        assert_logged(f, "<6>release vGPU vf=" VF " type=5 instance_id=k3x9q2m8v1c4z7n5b0wd "
                         "outcome=failed attempts=10 error=\"destroy vGPU on VF " VF
                         ": Device or resource busy\"\n");
        assert_content(f, TYPE_ATTR, "5\n"); /* the claim stays for the reconciler */
        device_done_clear(&d);
}

static void test_ops_release_reprobes_each_attempt(void **state) /* DEV-10, DEV-15 */
{
        Fixture *f = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;

        add_vf(f, VF, GROUP, "5\n");
        start_ops(f);

        /* The batch's scan (nobody holds anything) serves the first attempt only. */
        VfioScan *scan = NULL;
        assert_int_equal(vfio_scan(f->proc, f->dev, &scan, NULL), 0);
        _cleanup_device_scan_ DeviceScan *shared = NULL;
        assert_int_equal(device_scan_new(scan, &shared), 0);

        inject_rule(TYPE_ATTR, 0, EBUSY, 1, false);
        release_request(&req, "vendor-vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", true);
        req.scan = shared;
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        pump_until(f, is_waiting, NULL);

        /* Something opens the VF before the retry: the fresh probe sees it, and no retry
         * follows an in-use answer. */
        hold(f, "88", 5, "vfio/" GROUP);
        advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        pump_until(f, is_done, &d);
        assert_int_equal(d.kind, DEVICE_FAILURE_IN_USE);
        assert_string_equal(d.error, "vendor VFIO vGPU on VF " VF " is still in use");
        assert_int_equal(d.attempts, 2);
        assert_int_equal(seen_count(), 1);
        assert_int_equal(device_ops_get_next_wakeup(f->ops, &(nsec_t){0}), 0);
        device_done_clear(&d);
}

static void test_ops_mdev_release_waits_for_driver(void **state) /* DEV-17, DEV-10 */
{
        Fixture *f = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;

        add_mdev_vf(f);
        add_mdev(f, "nvidia-901");
        start_ops(f);

        /* The driver never cleans up here: ten polls a second apart, then the remove. */
        release_request(&req, "mdev", VF, UUID, "k3x9q2m8v1c4z7n5b0wd", true);
        inject_rule(MDEV_REMOVE, 0, EBUSY, 1, false); /* and the first remove is refused */
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        for (unsigned i = 0; i < DEVICE_RETRY_ATTEMPTS_DEFAULT; i++) {
                advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
                if (i < DEVICE_RETRY_ATTEMPTS_DEFAULT - 1) {
                        device_ops_dispatch(f->ops);
                        assert_int_equal(seen_count(), 0);
                }
        }
        /* Ten seconds after the start: the remove, refused once and retried. */
        advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        pump_until(f, is_done, &d);
        assert_int_equal(d.r, 1);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_RELEASED);
        assert_int_equal(d.attempts, 2);
        assert_string_equal(d.vf, VF);
        assert_int_equal(seen_count(), 2);
        assert_seen(0, MDEV_REMOVE "=1 (-16)");
        assert_seen(1, MDEV_REMOVE "=1");
        assert_logged(f, "<6>release vGPU vf=" VF " mdev_uuid=" UUID
                         " instance_id=k3x9q2m8v1c4z7n5b0wd outcome=released attempts=2\n");
        device_done_clear(&d);
}

static void test_ops_mdev_release_driver_cleans_up(void **state) /* DEV-17 */
{
        Fixture *f = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;

        add_mdev_vf(f);
        add_mdev(f, "nvidia-901");
        start_ops(f);

        /* Without its VF the operation is keyed by the mdev. */
        release_request(&req, "mdev", NULL, UUID, "k3x9q2m8v1c4z7n5b0wd", true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        assert_true(device_ops_is_busy(f->ops, "mdev:" UUID));
        advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        remove_tree_at(f->fd, "sys/" MDEV_DIR); /* the driver's own cleanup */
        pump_until(f, is_done, &d);             /* the third poll finds it gone */
        assert_int_equal(d.r, 0);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_NOT_CONFIGURED);
        assert_string_equal(d.vf, "");
        assert_int_equal(seen_count(), 0);
        assert_logged(f, "<6>release vGPU mdev_uuid=" UUID " instance_id=k3x9q2m8v1c4z7n5b0wd "
                         "outcome=not_configured attempts=0\n");
        device_done_clear(&d);

        /* A reset (no VMM exit) removes at once. */
        add_mdev(f, "nvidia-901");
        release_request(&req, "mdev", VF, UUID, NULL, false);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        pump_until(f, is_done, &d);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_RELEASED);
        assert_logged(f,
                      "<6>reset vGPU vf=" VF " mdev_uuid=" UUID " outcome=released attempts=1\n");
        device_done_clear(&d);

        /* A poll that fails ends the release. */
        remove_tree_at(f->fd, "sys/bus/mdev/devices");
        link_at(f, "devices", "sys/bus/mdev/devices");
        release_request(&req, "mdev", VF, UUID, "k3x9q2m8v1c4z7n5b0wd", true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        pump_until(f, is_done, &d);
        assert_int_equal(d.r, -ELOOP);
        assert_string_equal(d.error, "check mdev " UUID ": Too many levels of symbolic links");
        device_done_clear(&d);
}

static void test_ops_mdev_create(void **state) /* DEV-16, DEV-19 */
{
        Fixture *f = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;

        add_mdev_vf(f);
        add_mdev(f, "nvidia-901");
        start_ops(f);

        assert_int_equal(device_ops_mdev_create(f->ops, VF, "NVIDIA A40-2Q", UUID,
                                                "k3x9q2m8v1c4z7n5b0wd", device_done_record, &d, &e),
                         0);
        pump_until(f, is_done, &d);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_CONFIGURED);
        assert_int_equal(d.attempts, 1);
        assert_logged(f, "<6>configure vGPU vf=" VF " type=\"NVIDIA A40-2Q\" mdev_uuid=" UUID
                         " instance_id=k3x9q2m8v1c4z7n5b0wd outcome=configured\n");
        device_done_clear(&d);

        inject_rule("nvidia-901/create", 0, EDQUOT, 1, false);
        assert_int_equal(device_ops_mdev_create(f->ops, VF, "NVIDIA A40-2Q", UUID, NULL,
                                                device_done_record, &d, &e),
                         0);
        pump_until(f, is_done, &d);
        assert_int_equal(d.kind, DEVICE_FAILURE_CAPACITY);
        assert_string_equal(d.error, "create mdev on VF " VF ": Disk quota exceeded");
        device_done_clear(&d);
}

static void test_ops_real_timer(void **state) /* DEV-10 */
{
        Fixture *f = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;

        /* The system clock and a short interval: the descriptor wakes the owner. */
        add_vf(f, VF, GROUP, "5\n");
        start_ops_with(f, WORKER_POOL_MAX_EXTRA, NULL, 20 * NSEC_PER_MSEC);
        inject_rule(TYPE_ATTR, 0, EBUSY, 2, false);
        release_request(&req, "vendor-vfio", VF, NULL, "k3x9q2m8v1c4z7n5b0wd", true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        pump_until(f, is_waiting, NULL);

        /* Bounded: the timer fires after 20 ms; 10 s means it never did. Nothing but the loop
         * dispatches here, and the one waiting retry starts. */
        nsec_t due;
        assert_int_equal(device_ops_get_next_wakeup(f->ops, &due), 1);
        TEST_WAIT_UNTIL_LIMIT(f->event, 10 * NSEC_PER_SEC, !is_waiting(f, NULL));
        assert_true(mono_clock_now(&mono_clock_system) >= due);
        pump_until(f, is_done, &d);
        assert_int_equal(d.outcome, DEVICE_OUTCOME_RELEASED);
        assert_int_equal(d.attempts, 3);
        device_done_clear(&d);
}

static void test_ops_config(void **state)
{
        Fixture *f = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req;
        DeviceOps *o = NULL;

        WorkerPoolConfig pc = {.threads = 1, .clock = &fake.clock};
        assert_int_equal(worker_pool_new(&pc, &f->pool), 0);
        assert_int_equal(device_ops_new(NULL, &o), -EINVAL);
        assert_int_equal(device_ops_new(&(DeviceOpsConfig){.roots = f->roots}, &o), -EINVAL);
        assert_int_equal(device_ops_new(&(DeviceOpsConfig){.pool = f->pool}, &o), -EINVAL);
        assert_null(o);

        /* Defaults: 30 s per job, retries 1 s apart. */
        DeviceOpsConfig c = {.roots = f->roots, .pool = f->pool, .clock = &fake.clock};
        assert_int_equal(device_ops_new(&c, &f->ops), 0);
        assert_null(device_ops_free(NULL));
        assert_int_equal(worker_pool_attach_event(f->pool, f->event), 0);
        assert_int_equal(device_ops_attach_event(f->ops, f->event), 0);
        assert_int_equal(device_ops_attach_event(f->ops, f->event), -EBUSY);

        add_vf(f, VF, GROUP, "5\n");
        inject_rule(TYPE_ATTR, 0, 0, 1, true);
        release_request(&req, "vendor-vfio", VF, NULL, NULL, true);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        const unsigned one = 1;
        pump_until(f, is_hanging, &one);
        advance(30 * NSEC_PER_SEC - 1);
        worker_pool_dispatch_completions(f->pool);
        assert_false(d.called);
        advance(1);
        pump_until(f, is_done, &d);
        assert_string_equal(d.error, "timed out after 30s");
        device_done_clear(&d);
        inject_release();
        pump_until(f, is_certain, VF);

        /* Freed with an operation waiting for its retry: no completion runs. */
        inject_rule(TYPE_ATTR, 0, EBUSY, 1, false);
        put(f, "5\n", TYPE_ATTR);
        assert_int_equal(device_ops_release(f->ops, &req, device_done_record, &d, &e), 0);
        advance_to_wakeup(f, DEVICE_RETRY_INTERVAL_DEFAULT);
        f->pool = worker_pool_free(f->pool);
        f->ops = device_ops_free(f->ops);
        assert_false(d.called);
}

static void test_names(void **state)
{
        (void)state;
        assert_string_equal(device_failure_kind_to_string(DEVICE_FAILURE_CAPACITY), "capacity");
        assert_string_equal(device_failure_kind_to_string(DEVICE_FAILURE_UNCERTAIN), "uncertain");
        assert_string_equal(device_failure_kind_to_string((DeviceFailureKind)99), "error");
        assert_string_equal(device_outcome_to_string(DEVICE_OUTCOME_NOT_CONFIGURED),
                            "not_configured");
        assert_string_equal(device_outcome_to_string((DeviceOutcome)99), "failed");
}

int main(void)
{
        test_clock_init(&fake, 1000 * NSEC_PER_SEC);
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        const struct CMUnitTest tests[] = {
            T(test_guard_allows_vgpu_attributes),
            T(test_guard_refuses_everything_else),
            T(test_guard_refuses_pf_attributes),
            T(test_release_never_writes_a_pf),
            T(test_configure_refuses_invalid_types),
            T(test_configure_writes_type_once),
            T(test_configure_is_idempotent),
            T(test_configure_resets_another_type_first),
            T(test_configure_refuses_vf_in_use),
            T(test_configure_scan_and_probe_errors),
            T(test_configure_reset_refused_or_unverified),
            T(test_configure_capacity_refusals),
            T(test_configure_verify_and_rollback),
            T(test_configure_read_errors),
            T(test_release_nothing_configured),
            T(test_release_read_error),
            T(test_release_writes_zero),
            T(test_release_failures),
            T(test_read_back_failures),
            T(test_release_uses_the_given_scan),
            T(test_mdev_uuid_validity),
            T(test_mdev_create),
            T(test_mdev_create_failures),
            T(test_mdev_remove),
            T(test_mdev_remove_failures),
            T(test_release_claim_by_framework),
            T(test_ops_outcomes_are_logged),
            T(test_ops_invalid_requests),
            T(test_ops_quarantine_rechecked),
            T(test_ops_serialise_one_vf),
            T(test_ops_many_on_one_vf),
            T(test_ops_timeout_makes_vf_uncertain),
            T(test_ops_pool_exhausted),
            T(test_ops_release_retries_after_vmm_exit),
            T(test_ops_release_gives_up),
            T(test_ops_release_reprobes_each_attempt),
            T(test_ops_mdev_release_waits_for_driver),
            T(test_ops_mdev_release_driver_cleans_up),
            T(test_ops_mdev_create),
            T(test_ops_real_timer),
            T(test_ops_config),
            T(test_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
