/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vfio: the open-handle scan and the in-use probe (SPEC DEV-12..DEV-15).
 *
 * Most tests build a fake proc root and a fake sysfs in a temp dir. The real-process tests
 * use the real /proc, once as it is and once inside a private PID namespace (SIM-21): the
 * test binary re-executes itself under `unshare --pid --fork --mount-proc`, runs the same
 * test there and reports through its exit status.
 */
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include <cmocka.h>

#include "base/base.h"
#include "testlib.h"
#include "vfio/vfio.h"

extern char **environ;

#define VF "0000:01:00.1"
#define MDEV "4b20d080-1b54-4048-81ae-6a9b1e9c3c0a"
#define NS_TIMEOUT_MS 20000 /* under meson's 30 s test timeout */

/* ---- syscall fault injection --------------------------------------------------------------- */

/*
 * The skip and failure paths that need a process to vanish mid-scan or the kernel to fail a
 * directory read. The test executable links with -Wl,--wrap for these calls (STYLE rule 13);
 * the wrappers pass straight through unless a test arms them, and every test disarms them in
 * its setup.
 */
static struct {
        int getdents_call; /* fail the n-th getdents64 call from now on (1-based); 0: never */
        int getdents_errno;
        const char *readlink_name; /* fail readlinkat of this entry name ... */
        int readlink_errno;        /* ... with this errno, or 0: fill the buffer completely */
        bool strndup_fails;
} inject;

ssize_t __real_getdents64(int fd, void *buf, size_t size);
ssize_t __wrap_getdents64(int fd, void *buf, size_t size);
ssize_t __wrap_getdents64(int fd, void *buf, size_t size)
{
        if (inject.getdents_call > 0 && --inject.getdents_call == 0) {
                errno = inject.getdents_errno;
                return -1;
        }
        return __real_getdents64(fd, buf, size);
}

ssize_t __real_readlinkat(int dirfd, const char *path, char *buf, size_t size);
ssize_t __wrap_readlinkat(int dirfd, const char *path, char *buf, size_t size);
ssize_t __wrap_readlinkat(int dirfd, const char *path, char *buf, size_t size)
{
        if (inject.readlink_name && streq(path, inject.readlink_name)) {
                if (inject.readlink_errno == 0) {
                        memset(buf, 'x', size);
                        return (ssize_t)size;
                }
                errno = inject.readlink_errno;
                return -1;
        }
        return __real_readlinkat(dirfd, path, buf, size);
}

char *__real_strndup(const char *s, size_t n);
char *__wrap_strndup(const char *s, size_t n);
char *__wrap_strndup(const char *s, size_t n)
{
        if (inject.strndup_fails) {
                errno = ENOMEM;
                return NULL;
        }
        return __real_strndup(s, n);
}

/* ---- fixture trees ------------------------------------------------------------------------- */

typedef struct Fixture {
        TestTree *tree;
        char *dir;  /* the tree's: the temp dir */
        int fd;     /* the tree's */
        Root *proc; /* <dir>/proc, a fake proc root */
        Root *sys;  /* <dir>/sys */
        char *dev;  /* "<dir>/dev", the dev_root */
        pid_t child;
        int hold_fd; /* the child exits when this pipe closes */
        int sock_fd; /* our end of the socket pair the child holds the other end of */
        uint64_t child_sock_inode;
} Fixture;

static void mkdirs_at(int dirfd, const char *path)
{
        assert_int_equal(test_mkdirs_at(dirfd, path), 0);
}

/* Creates the parents of path below dirfd. */
static void parents_at(int dirfd, const char *path)
{
        assert_int_equal(test_mkparents_at(dirfd, path), 0);
}

static void symlink_fmt(Fixture *f, const char *target, const char *fmt, ...) _printf_(3, 4);
static void symlink_fmt(Fixture *f, const char *target, const char *fmt, ...)
{
        char path[PATH_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(path, sizeof path, fmt, ap);
        va_end(ap);
        parents_at(f->fd, path);
        assert_int_equal(symlinkat(target, f->fd, path), 0);
}

static void file_fmt(Fixture *f, const char *fmt, ...) _printf_(2, 3);
static void file_fmt(Fixture *f, const char *fmt, ...)
{
        char path[PATH_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(path, sizeof path, fmt, ap);
        va_end(ap);
        parents_at(f->fd, path);
        int fd = openat(f->fd, path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        close(fd);
}

/* <proc>/<pid>/fd/<fd> -> target, as the kernel shows an open descriptor. */
static void add_fd(Fixture *f, const char *pid, int fd, const char *target)
{
        symlink_fmt(f, target, "proc/%s/fd/%d", pid, fd);
}

/* The same, with target "<dev_root>/<rel>". */
static void add_dev_fd(Fixture *f, const char *pid, int fd, const char *rel)
{
        char target[PATH_MAX];
        snprintf(target, sizeof target, "%s/%s", f->dev, rel);
        add_fd(f, pid, fd, target);
}

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        *f = (Fixture){.fd = -1, .hold_fd = -1, .sock_fd = -1};
        memset(&inject, 0, sizeof inject);

        assert_int_equal(test_tree_new("test-vfio", &f->tree), 0);
        f->dir = f->tree->dir;
        f->fd = f->tree->fd;
        mkdirs_at(f->fd, "proc");
        mkdirs_at(f->fd, "sys/bus/pci/devices");
        mkdirs_at(f->fd, "dev/vfio/devices");

        _cleanup_free_ char *proc = NULL, *sys = NULL;
        assert_int_equal(strprintf(&proc, "%s/proc", f->dir), 0);
        assert_int_equal(strprintf(&sys, "%s/sys", f->dir), 0);
        assert_int_equal(strprintf(&f->dev, "%s/dev", f->dir), 0);
        assert_int_equal(root_open(proc, &f->proc), 0);
        assert_int_equal(root_open(sys, &f->sys), 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        memset(&inject, 0, sizeof inject);
        if (f->child > 0) {
                kill(f->child, SIGKILL);
                waitpid(f->child, NULL, 0);
        }
        closep(&f->hold_fd);
        closep(&f->sock_fd);
        root_free(f->proc);
        root_free(f->sys);
        test_tree_free(f->tree);
        free(f->dev);
        free(f);
        return 0;
}

static VfioScan *scan_ok(Fixture *f, const Root *proc)
{
        VfioScan *s = NULL;
        _cleanup_free_ char *error = NULL;
        int r = vfio_scan(proc, f->dev, &s, &error);
        if (r < 0)
                fail_msg("scan failed: %s", error ? error : strerror(-r));
        return s;
}

/* Runs a scan that must fail with r and exactly the message want. */
static void scan_fails(Fixture *f, const char *dev_root, int r, const char *want)
{
        VfioScan *s = (VfioScan *)0x1; /* must stay untouched */
        _cleanup_free_ char *error = NULL;
        assert_int_equal(vfio_scan(f->proc, dev_root, &s, &error), r);
        assert_ptr_equal(s, (VfioScan *)0x1);
        assert_non_null(error);
        assert_string_equal(error, want);
}

static void node_held_by(Fixture *f, const VfioScan *s, const char *rel, pid_t want)
{
        char path[PATH_MAX];
        pid_t pid = -1;
        snprintf(path, sizeof path, "%s/%s", f->dev, rel);
        assert_int_equal(vfio_scan_find_node(s, path, &pid), 0);
        assert_int_equal(pid, want);
}

static void node_not_held(Fixture *f, const VfioScan *s, const char *rel)
{
        char path[PATH_MAX];
        pid_t pid = -1;
        snprintf(path, sizeof path, "%s/%s", f->dev, rel);
        assert_int_equal(vfio_scan_find_node(s, path, &pid), -ENOENT);
        assert_int_equal(pid, -1);
}

/* ---- the scan on fixture trees ------------------------------------------------------------- */

static void test_scan_keeps_vfio_targets_and_sockets(void **state) /* DEV-13, DEV-15 */
{
        Fixture *f = *state;
        char other[PATH_MAX];

        add_dev_fd(f, "100", 3, "vfio/7");
        add_dev_fd(f, "100", 4, "vfio/devices/vfio3");
        add_dev_fd(f, "42", 5, "vfio/7");  /* two holders: the lowest pid is kept */
        add_dev_fd(f, "42", 6, "vfio");    /* the directory itself is no node */
        add_dev_fd(f, "42", 7, "vfiox/8"); /* shares the prefix without the slash */
        add_dev_fd(f, "42", 8, "null");
        snprintf(other, sizeof other, "%s/vfio/7", f->dir); /* another root's vfio */
        add_fd(f, "42", 9, other);
        add_fd(f, "1", 0, "socket:[12345]");
        add_fd(f, "42", 10, "socket:[12345]");
        add_fd(f, "100", 11, "socket:[777]");
        add_fd(f, "1", 1, "pipe:[99]");
        add_fd(f, "1", 2, "anon_inode:[eventfd]");
        /* Entries that are not processes are passed over. */
        symlink_fmt(f, "42", "proc/self");
        symlink_fmt(f, "socket:[5]", "proc/net/fd/3");
        symlink_fmt(f, "socket:[6]", "proc/1abc/fd/3");
        file_fmt(f, "proc/uptime");

        _cleanup_(vfio_scan_freep) VfioScan *s = scan_ok(f, f->proc);
        assert_int_equal(vfio_scan_n_processes(s), 3);
        assert_int_equal(vfio_scan_n_nodes(s), 2);
        assert_int_equal(vfio_scan_n_sockets(s), 2);
        node_held_by(f, s, "vfio/7", 42);
        node_held_by(f, s, "vfio/devices/vfio3", 100);
        node_not_held(f, s, "vfio");
        node_not_held(f, s, "vfiox/8");
        node_not_held(f, s, "vfio/8");
        assert_int_equal(vfio_scan_find_node(s, other, NULL), -ENOENT);

        pid_t pid = -1;
        assert_int_equal(vfio_scan_find_socket(s, 12345, &pid), 0);
        assert_int_equal(pid, 1);
        assert_int_equal(vfio_scan_find_socket(s, 777, NULL), 0);
        assert_int_equal(vfio_scan_find_socket(s, 5, &pid), -ENOENT);
        assert_int_equal(vfio_scan_find_socket(s, 0, &pid), -ENOENT);
        assert_int_equal(pid, 1);
}

static void test_scan_empty(void **state) /* DEV-13 */
{
        Fixture *f = *state;
        _cleanup_(vfio_scan_freep) VfioScan *s = scan_ok(f, f->proc);
        assert_int_equal(vfio_scan_n_processes(s), 0);
        assert_int_equal(vfio_scan_n_nodes(s), 0);
        node_not_held(f, s, "vfio/7");
        assert_int_equal(vfio_scan_find_socket(s, 1, NULL), -ENOENT);
}

static void test_scan_many_entries(void **state) /* DEV-13, DEV-15 */
{
        Fixture *f = *state;

        /* Enough distinct nodes and sockets to grow both tables several times. */
        for (int pid = 1; pid <= 300; pid++) {
                char name[16], rel[64], sock[32];
                snprintf(name, sizeof name, "%d", pid);
                snprintf(rel, sizeof rel, "vfio/devices/vfio%d", pid);
                add_dev_fd(f, name, 3, rel);
                for (int k = 0; k < 4; k++) {
                        snprintf(sock, sizeof sock, "socket:[%d]", 1000 + pid * 4 + k);
                        add_fd(f, name, 4 + k, sock);
                }
        }

        _cleanup_(vfio_scan_freep) VfioScan *s = scan_ok(f, f->proc);
        assert_int_equal(vfio_scan_n_processes(s), 300);
        assert_int_equal(vfio_scan_n_nodes(s), 300);
        assert_int_equal(vfio_scan_n_sockets(s), 1200);
        for (int pid = 1; pid <= 300; pid++) {
                char rel[64];
                pid_t holder;
                snprintf(rel, sizeof rel, "vfio/devices/vfio%d", pid);
                node_held_by(f, s, rel, pid);
                assert_int_equal(vfio_scan_find_socket(s, (uint64_t)(1003 + pid * 4), &holder), 0);
                assert_int_equal(holder, pid);
        }
        node_not_held(f, s, "vfio/devices/vfio301");
        assert_int_equal(vfio_scan_find_socket(s, 999, NULL), -ENOENT);
}

static void test_scan_deleted_node_counts(void **state) /* DEV-13 */
{
        Fixture *f = *state;

        /* The kernel's rendering of a node unlinked while open. */
        add_dev_fd(f, "9", 3, "vfio/9 (deleted)");

        _cleanup_(vfio_scan_freep) VfioScan *s = scan_ok(f, f->proc);
        node_held_by(f, s, "vfio/9", 9);
}

static void test_scan_dev_root_spellings(void **state) /* DEV-13, GEN-1 */
{
        Fixture *f = *state;
        VfioScan *s = NULL;
        _cleanup_free_ char *error = NULL, *slashed = NULL;

        add_fd(f, "5", 3, "/vfio/3");
        add_dev_fd(f, "6", 3, "vfio/4");

        assert_int_equal(vfio_scan(f->proc, "/", &s, &error), 0);
        assert_int_equal(vfio_scan_find_node(s, "/vfio/3", NULL), 0);
        assert_int_equal(vfio_scan_n_nodes(s), 1);
        s = vfio_scan_free(s);

        assert_int_equal(strprintf(&slashed, "%s//", f->dev), 0);
        assert_int_equal(vfio_scan(f->proc, slashed, &s, &error), 0);
        node_held_by(f, s, "vfio/4", 6);
        s = vfio_scan_free(s);
        assert_null(error);
}

static void test_scan_invalid_dev_root(void **state) /* GEN-1, GEN-5 */
{
        Fixture *f = *state;
        char long_root[PATH_MAX];

        scan_fails(f, "dev", -EINVAL, "invalid dev_root \"dev\": Invalid argument");
        scan_fails(f, NULL, -EINVAL, "invalid dev_root \"\": Invalid argument");

        memset(long_root, 'd', sizeof long_root - 1);
        long_root[0] = '/';
        long_root[sizeof long_root - 1 - 255] = 0;
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want, "invalid dev_root \"%s\": File name too long", long_root),
                         0);
        scan_fails(f, long_root, -ENAMETOOLONG, want);
}

static void test_scan_pid_without_fd_dir_is_skipped(void **state) /* DEV-14 */
{
        Fixture *f = *state;

        mkdirs_at(f->fd, "proc/77"); /* exited between listing and opening: no fd/ */
        add_dev_fd(f, "78", 3, "vfio/7");

        _cleanup_(vfio_scan_freep) VfioScan *s = scan_ok(f, f->proc);
        assert_int_equal(vfio_scan_n_processes(s), 1);
        node_held_by(f, s, "vfio/7", 78);
}

static void test_scan_fd_dir_not_a_directory(void **state) /* DEV-14 */
{
        Fixture *f = *state;
        file_fmt(f, "proc/55/fd");
        scan_fails(f, f->dev, -ENOTDIR, "read process 55 file descriptors: Not a directory");
}

static void test_scan_pid_entry_not_a_directory(void **state) /* DEV-14 */
{
        Fixture *f = *state;
        file_fmt(f, "proc/56");
        scan_fails(f, f->dev, -ENOTDIR, "read process 56 file descriptors: Not a directory");
}

static void test_scan_fd_not_a_link(void **state) /* DEV-14 */
{
        Fixture *f = *state;
        add_dev_fd(f, "56", 3, "vfio/7");
        file_fmt(f, "proc/56/fd/4");
        scan_fails(f, f->dev, -EINVAL, "read process 56 file descriptor 4: Invalid argument");
}

static void test_scan_non_numeric_fd_entry_is_read(void **state) /* DEV-14 */
{
        Fixture *f = *state;

        /* Not a descriptor name /proc would show, but read all the same: a scan that
         * silently passed over it would look complete without being so. */
        file_fmt(f, "proc/57/fd/stray");
        scan_fails(f, f->dev, -EINVAL, "read process 57 file descriptor stray: Invalid argument");
}

static void test_scan_malformed_socket_link(void **state) /* DEV-14, GEN-5 */
{
        Fixture *f = *state;
        add_fd(f, "9", 4, "socket:[12a]");
        scan_fails(f, f->dev, -EBADMSG, "read process 9 file descriptor 4: Bad message");
}

static void test_scan_non_canonical_pid(void **state) /* DEV-14, GEN-5 */
{
        Fixture *f = *state;

        mkdirs_at(f->fd, "proc/0");
        scan_fails(f, f->dev, -ERANGE,
                   "read process 0 file descriptors: Numerical result out of range");
        unlinkat(f->fd, "proc/0", AT_REMOVEDIR);

        mkdirs_at(f->fd, "proc/0042/fd");
        scan_fails(f, f->dev, -ERANGE,
                   "read process 0042 file descriptors: Numerical result out of range");
        unlinkat(f->fd, "proc/0042/fd", AT_REMOVEDIR);
        unlinkat(f->fd, "proc/0042", AT_REMOVEDIR);

        mkdirs_at(f->fd, "proc/2147483648/fd");
        scan_fails(f, f->dev, -ERANGE,
                   "read process 2147483648 file descriptors: Numerical result out of range");
}

static void test_scan_proc_root_unlistable(void **state) /* DEV-14 */
{
        Fixture *f = *state;

        /* A root whose descriptor is no directory cannot be listed. */
        file_fmt(f, "not-a-dir");
        _cleanup_free_ char *path = NULL, *want = NULL, *error = NULL;
        assert_int_equal(strprintf(&path, "%s/not-a-dir", f->dir), 0);
        _cleanup_close_ int fd = openat(f->fd, "not-a-dir", O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        Root bad = {.fd = fd, .path = path};

        VfioScan *s = NULL;
        assert_int_equal(vfio_scan(&bad, f->dev, &s, &error), -ENOTDIR);
        assert_null(s);
        assert_int_equal(strprintf(&want, "list processes in %s: Not a directory", path), 0);
        assert_string_equal(error, want);
}

static void test_scan_proc_root_read_error(void **state) /* DEV-14 */
{
        Fixture *f = *state;
        _cleanup_free_ char *want = NULL;

        inject.getdents_call = 1;
        inject.getdents_errno = EIO;
        assert_int_equal(strprintf(&want, "list processes in %s/proc: Input/output error", f->dir),
                         0);
        scan_fails(f, f->dev, -EIO, want);
}

static void test_scan_fd_dir_read_error(void **state) /* DEV-14 */
{
        Fixture *f = *state;

        add_dev_fd(f, "31", 3, "vfio/7");
        inject.getdents_call = 2; /* the process list is the first read */
        inject.getdents_errno = EACCES;
        scan_fails(f, f->dev, -EACCES, "read process 31 file descriptors: Permission denied");
}

static void test_scan_fd_dir_vanishing_is_skipped(void **state) /* DEV-14 */
{
        Fixture *f = *state;
        static const int gone[] = {ENOENT, ESRCH};

        add_dev_fd(f, "31", 3, "vfio/7");
        for (size_t i = 0; i < ELEMENTSOF(gone); i++) {
                inject.getdents_call = 2;
                inject.getdents_errno = gone[i];
                _cleanup_(vfio_scan_freep) VfioScan *s = scan_ok(f, f->proc);
                assert_int_equal(vfio_scan_n_processes(s), 1);
                node_not_held(f, s, "vfio/7");
        }
}

static void test_scan_fd_link_errors(void **state) /* DEV-14 */
{
        Fixture *f = *state;

        add_dev_fd(f, "31", 3, "vfio/7");
        add_dev_fd(f, "31", 4, "vfio/8");
        inject.readlink_name = "4";

        /* A descriptor closed meanwhile, or its process gone: skipped. */
        inject.readlink_errno = ENOENT;
        _cleanup_(vfio_scan_freep) VfioScan *s1 = scan_ok(f, f->proc);
        node_held_by(f, s1, "vfio/7", 31);
        node_not_held(f, s1, "vfio/8");
        inject.readlink_errno = ESRCH;
        _cleanup_(vfio_scan_freep) VfioScan *s2 = scan_ok(f, f->proc);
        node_not_held(f, s2, "vfio/8");

        /* Any other failure fails the scan. */
        inject.readlink_errno = EACCES;
        scan_fails(f, f->dev, -EACCES, "read process 31 file descriptor 4: Permission denied");
}

static void test_scan_overlong_link_is_no_node(void **state) /* DEV-13, DEV-14 (decision) */
{
        Fixture *f = *state;

        /* The kernel cannot print the path (ENAMETOOLONG), or it fills the whole buffer: in
         * both cases it is longer than any candidate node, so it is not one. */
        add_dev_fd(f, "31", 3, "vfio/7");
        add_dev_fd(f, "31", 4, "vfio/8");
        inject.readlink_name = "4";
        inject.readlink_errno = ENAMETOOLONG;
        _cleanup_(vfio_scan_freep) VfioScan *s1 = scan_ok(f, f->proc);
        assert_int_equal(vfio_scan_n_nodes(s1), 1);
        inject.readlink_errno = 0;
        _cleanup_(vfio_scan_freep) VfioScan *s2 = scan_ok(f, f->proc);
        assert_int_equal(vfio_scan_n_nodes(s2), 1);
        node_held_by(f, s2, "vfio/7", 31);
}

static void test_scan_out_of_memory(void **state) /* GEN-7 */
{
        Fixture *f = *state;

        add_dev_fd(f, "3", 3, "vfio/7");
        inject.strndup_fails = true;
        scan_fails(f, f->dev, -ENOMEM, "record open VFIO node: Cannot allocate memory");
}

static void test_scan_startup_reason(void **state) /* DEV-14 */
{
        Fixture *f = *state;
        VfioScan *s = NULL;
        _cleanup_free_ char *error = NULL;

        add_dev_fd(f, "3", 3, "vfio/7");
        assert_int_equal(vfio_scan_startup(f->proc, f->dev, &s, &error), 0);
        assert_null(error);
        node_held_by(f, s, "vfio/7", 3);
        s = vfio_scan_free(s);

        file_fmt(f, "proc/55/fd");
        assert_int_equal(vfio_scan_startup(f->proc, f->dev, &s, &error), -ENOTDIR);
        assert_null(s);
        assert_string_equal(error,
                            "open-handle scan failed: read process 55 file descriptors: Not a "
                            "directory");
}

static void test_parse_socket_link(void **state) /* DEV-15, GEN-5 */
{
        static const struct {
                const char *in;
                int r;
                uint64_t inode;
        } cases[] = {
            {"socket:[1]", 0, 1},
            {"socket:[4026531993]", 0, 4026531993},
            {"socket:[18446744073709551615]", 0, UINT64_MAX},
            {"socket:[18446744073709551616]", -EBADMSG, 0},
            {"socket:[184467440737095516150]", -EBADMSG, 0},
            {"socket:[0]", -EBADMSG, 0},
            {"socket:[012]", -EBADMSG, 0},
            {"socket:[]", -EBADMSG, 0},
            {"socket:[12", -EBADMSG, 0},
            {"socket:[12]x", -EBADMSG, 0},
            {"socket:[+12]", -EBADMSG, 0},
            {"socket:[1 2]", -EBADMSG, 0},
            {"socket:[12]]", -EBADMSG, 0},
            {"socket:", -EINVAL, 0},
            {"pipe:[12]", -EINVAL, 0},
            {"/dev/vfio/7", -EINVAL, 0},
            {"", -EINVAL, 0},
        };
        (void)state;

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint64_t inode = 7;
                int r = vfio_parse_socket_link(cases[i].in, &inode);
                if (r != cases[i].r)
                        fail_msg("\"%s\": got %d, want %d", cases[i].in, r, cases[i].r);
                assert_int_equal(inode, cases[i].r == 0 ? cases[i].inode : 7);
        }
}

/* ---- the probe ----------------------------------------------------------------------------- */

/* A VF as sysfs shows it: its IOMMU group link and its iommufd cdev. */
static void add_vf(Fixture *f, const char *vf, const char *group, const char *cdev)
{
        char target[64];
        if (group) {
                snprintf(target, sizeof target, "../../../../kernel/iommu_groups/%s", group);
                symlink_fmt(f, target, "sys/bus/pci/devices/%s/iommu_group", vf);
        }
        if (cdev) {
                char path[PATH_MAX];
                snprintf(path, sizeof path, "sys/bus/pci/devices/%s/vfio-dev/%s", vf, cdev);
                mkdirs_at(f->fd, path);
        }
        if (!group && !cdev) {
                char path[PATH_MAX];
                snprintf(path, sizeof path, "sys/bus/pci/devices/%s", vf);
                mkdirs_at(f->fd, path);
        }
}

static int probe(Fixture *f, const char *vf, pid_t *ret_holder, char **error)
{
        _cleanup_(vfio_scan_freep) VfioScan *s = scan_ok(f, f->proc);
        return vfio_probe_vf(s, f->sys, vf, ret_holder, error);
}

static void probe_fails(Fixture *f, const char *vf, int r, const char *fmt, ...) _printf_(4, 5);
static void probe_fails(Fixture *f, const char *vf, int r, const char *fmt, ...)
{
        _cleanup_free_ char *want = NULL, *error = NULL;
        va_list ap;
        va_start(ap, fmt);
        assert_true(vasprintf(&want, fmt, ap) >= 0);
        va_end(ap);

        pid_t holder = -1;
        assert_int_equal(probe(f, vf, &holder, &error), r);
        assert_int_equal(holder, -1);
        assert_non_null(error);
        assert_string_equal(error, want);
}

static void test_probe_group_node_open(void **state) /* DEV-12, DEV-13, GEN-11 */
{
        Fixture *f = *state;
        pid_t holder = -1;

        /* QEMU 7.2 opens the legacy group node only. */
        add_vf(f, VF, "7", "vfio3");
        add_dev_fd(f, "900", 3, "vfio/7");
        add_dev_fd(f, "800", 3, "vfio/7");
        assert_int_equal(probe(f, VF, &holder, NULL), 1);
        assert_int_equal(holder, 800);
}

static void test_probe_cdev_open(void **state) /* DEV-12, DEV-13 */
{
        Fixture *f = *state;
        pid_t holder = -1;

        add_vf(f, VF, "7", "vfio3");
        add_dev_fd(f, "901", 5, "vfio/devices/vfio3");
        assert_int_equal(probe(f, VF, &holder, NULL), 1);
        assert_int_equal(holder, 901);
        assert_int_equal(probe(f, VF, NULL, NULL), 1);
}

static void test_probe_both_open_lowest_holder(void **state) /* DEV-12, DEV-13 */
{
        Fixture *f = *state;
        pid_t holder = -1;

        add_vf(f, VF, "7", "vfio3");
        add_dev_fd(f, "901", 5, "vfio/devices/vfio3");
        add_dev_fd(f, "600", 5, "vfio/7");
        assert_int_equal(probe(f, VF, &holder, NULL), 1);
        assert_int_equal(holder, 600);
}

static void test_probe_not_in_use(void **state) /* DEV-12, DEV-13 */
{
        Fixture *f = *state;
        pid_t holder = -1;
        _cleanup_free_ char *error = NULL;

        /* Other VFs' nodes and a node of the same number elsewhere are not ours. */
        add_vf(f, VF, "7", "vfio3");
        add_dev_fd(f, "900", 3, "vfio/17");
        add_dev_fd(f, "900", 4, "vfio/devices/vfio33");
        add_fd(f, "900", 5, "/elsewhere/vfio/7");
        assert_int_equal(probe(f, VF, &holder, &error), 0);
        assert_int_equal(holder, -1);
        assert_null(error);
}

static void test_probe_candidates_missing(void **state) /* DEV-12 */
{
        Fixture *f = *state;
        _cleanup_free_ char *error = NULL;

        add_dev_fd(f, "900", 3, "vfio/7");
        /* No iommu_group and no vfio-dev/ (VF not bound to vfio-pci): not in use. */
        add_vf(f, VF, NULL, NULL);
        assert_int_equal(probe(f, VF, NULL, &error), 0);
        /* No VF directory at all. */
        assert_int_equal(probe(f, "0000:02:00.1", NULL, &error), 0);
        assert_null(error);
}

static void test_probe_only_group(void **state) /* DEV-12 */
{
        Fixture *f = *state;

        add_vf(f, VF, "7", NULL);
        add_dev_fd(f, "900", 3, "vfio/7");
        assert_int_equal(probe(f, VF, NULL, NULL), 1);
}

static void test_probe_group_link_unreadable(void **state) /* DEV-12 */
{
        Fixture *f = *state;

        file_fmt(f, "sys/bus/pci/devices/%s/iommu_group", VF);
        probe_fails(f, VF, -EINVAL,
                    "read link %s/sys/bus/pci/devices/%s/iommu_group: Invalid argument", f->dir,
                    VF);
}

static void test_probe_cdev_dir_unreadable(void **state) /* DEV-12 */
{
        Fixture *f = *state;

        add_vf(f, VF, "7", NULL);
        file_fmt(f, "sys/bus/pci/devices/%s/vfio-dev", VF);
        probe_fails(f, VF, -ENOTDIR, "list %s/sys/bus/pci/devices/%s/vfio-dev: Not a directory",
                    f->dir, VF);
}

static void test_probe_both_unreadable(void **state) /* DEV-12 */
{
        Fixture *f = *state;

        file_fmt(f, "sys/bus/pci/devices/%s/vfio-dev", VF);
        file_fmt(f, "sys/bus/pci/devices/%s/iommu_group", VF);
        probe_fails(f, VF, -ENOTDIR,
                    "list %s/sys/bus/pci/devices/%s/vfio-dev: Not a directory; read link "
                    "%s/sys/bus/pci/devices/%s/iommu_group: Invalid argument",
                    f->dir, VF, f->dir, VF);
}

static void test_probe_match_wins_over_errors(void **state) /* DEV-13 */
{
        Fixture *f = *state;
        pid_t holder = -1;
        _cleanup_free_ char *error = NULL;

        add_vf(f, VF, "7", NULL);
        file_fmt(f, "sys/bus/pci/devices/%s/vfio-dev", VF);
        add_dev_fd(f, "900", 3, "vfio/7");
        assert_int_equal(probe(f, VF, &holder, &error), 1);
        assert_int_equal(holder, 900);
        assert_null(error);

        /* And the other way round: the cdev is open, the group unreadable. */
        add_vf(f, "0000:01:00.2", NULL, "vfio4");
        file_fmt(f, "sys/bus/pci/devices/0000:01:00.2/iommu_group");
        add_dev_fd(f, "901", 3, "vfio/devices/vfio4");
        assert_int_equal(probe(f, "0000:01:00.2", &holder, &error), 1);
        assert_int_equal(holder, 901);
        assert_null(error);
}

static void test_probe_malformed_sysfs(void **state) /* DEV-12, GEN-5 */
{
        Fixture *f = *state;

        add_vf(f, VF, "7x", NULL);
        probe_fails(f, VF, -EBADMSG,
                    "invalid IOMMU group \"7x\" in %s/sys/bus/pci/devices/%s/iommu_group", f->dir,
                    VF);

        add_vf(f, "0000:01:00.2", "007", NULL);
        probe_fails(f, "0000:01:00.2", -EBADMSG,
                    "invalid IOMMU group \"007\" in %s/sys/bus/pci/devices/0000:01:00.2/"
                    "iommu_group",
                    f->dir);

        add_vf(f, "0000:01:00.3", NULL, "card0");
        probe_fails(f, "0000:01:00.3", -EBADMSG,
                    "unexpected entry \"card0\" in %s/sys/bus/pci/devices/0000:01:00.3/vfio-dev",
                    f->dir);
}

static void test_probe_invalid_names(void **state) /* DEV-12, GEN-5 */
{
        Fixture *f = *state;
        _cleanup_(vfio_scan_freep) VfioScan *s = scan_ok(f, f->proc);
        _cleanup_free_ char *error = NULL;

        assert_int_equal(vfio_probe_vf(s, f->sys, "../../etc", NULL, &error), -EINVAL);
        assert_string_equal(error, "invalid VF address \"../../etc\"");
        assert_int_equal(vfio_probe_vf(s, f->sys, "0000:01:00.8", NULL, &error), -EINVAL);
        assert_string_equal(error, "invalid VF address \"0000:01:00.8\"");
        assert_int_equal(
            vfio_probe_mdev(s, f->sys, "4b20d080-1b54-4048-81ae-6a9b1e9c3c0", NULL, &error),
            -EINVAL);
        assert_string_equal(error, "invalid mdev UUID \"4b20d080-1b54-4048-81ae-6a9b1e9c3c0\"");
        assert_int_equal(
            vfio_probe_mdev(s, f->sys, "4b20d080x1b54-4048-81ae-6a9b1e9c3c0a", NULL, &error),
            -EINVAL);
        assert_int_equal(
            vfio_probe_mdev(s, f->sys, "4b20d080-1b54-4048-81ae-6a9b1e9c3c0g", NULL, &error),
            -EINVAL);
}

static void test_probe_mdev(void **state) /* DEV-12, DEV-17 */
{
        Fixture *f = *state;
        pid_t holder = -1;
        _cleanup_free_ char *error = NULL;

        symlink_fmt(f, "../../../kernel/iommu_groups/12", "sys/bus/mdev/devices/%s/iommu_group",
                    MDEV);
        _cleanup_(vfio_scan_freep) VfioScan *idle = scan_ok(f, f->proc);
        assert_int_equal(vfio_probe_mdev(idle, f->sys, MDEV, &holder, &error), 0);

        add_dev_fd(f, "321", 3, "vfio/12");
        _cleanup_(vfio_scan_freep) VfioScan *busy = scan_ok(f, f->proc);
        assert_int_equal(vfio_probe_mdev(busy, f->sys, MDEV, &holder, &error), 1);
        assert_int_equal(holder, 321);

        file_fmt(f, "sys/bus/mdev/devices/%s/vfio-dev", MDEV);
        assert_int_equal(vfio_probe_mdev(idle, f->sys, MDEV, &holder, &error), -ENOTDIR);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want,
                                   "list %s/sys/bus/mdev/devices/%s/vfio-dev: Not a directory",
                                   f->dir, MDEV),
                         0);
        assert_string_equal(error, want);
}

static void test_one_scan_serves_many_probes(void **state) /* DEV-15 */
{
        Fixture *f = *state;
        char vf[PCI_ADDRESS_STRLEN], group[16], rel[32];

        for (int i = 0; i < 8; i++) {
                snprintf(vf, sizeof vf, "0000:01:00.%d", i);
                snprintf(group, sizeof group, "%d", 20 + i);
                add_vf(f, vf, group, NULL);
                if (i % 2 == 0) {
                        snprintf(rel, sizeof rel, "vfio/%d", 20 + i);
                        add_dev_fd(f, "500", 3 + i, rel);
                }
        }
        _cleanup_(vfio_scan_freep) VfioScan *s = scan_ok(f, f->proc);
        for (int i = 0; i < 8; i++) {
                snprintf(vf, sizeof vf, "0000:01:00.%d", i);
                assert_int_equal(vfio_probe_vf(s, f->sys, vf, NULL, NULL), i % 2 == 0);
        }
}

/* ---- real processes ------------------------------------------------------------------------ */

/* A directory chain so deep that the kernel cannot print a path inside it. */
#define DEEP_LEVELS 20
#define DEEP_NAME_LEN 250

static int open_deep_file(int dirfd)
{
        char name[DEEP_NAME_LEN + 1];
        memset(name, 'd', DEEP_NAME_LEN);
        name[DEEP_NAME_LEN] = 0;

        int fd = dup(dirfd);
        for (int i = 0; i < DEEP_LEVELS && fd >= 0; i++) {
                if (mkdirat(fd, name, 0755) < 0 && errno != EEXIST)
                        return -1;
                int next = openat(fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                close(fd);
                fd = next;
        }
        if (fd < 0)
                return -1;
        int file = openat(fd, "file", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        close(fd);
        return file;
}

/*
 * Forks a child that holds dev/vfio/7, dev/vfio/devices/vfio3, a file too deep for the
 * kernel to name and one end of a socket pair, and that exits when f->hold_fd closes (or
 * its parent dies), so no failure path can leave it behind.
 */
static void start_holder(Fixture *f)
{
        int ready[2], hold[2], sv[2];
        assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
        assert_int_equal(pipe2(hold, O_CLOEXEC), 0);
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        struct stat st;
        assert_int_equal(fstat(sv[1], &st), 0);
        f->child_sock_inode = st.st_ino;

        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                close(ready[0]);
                close(hold[1]);
                close(sv[0]);
                if (openat(f->fd, "dev/vfio/7", O_RDWR | O_CLOEXEC) < 0 ||
                    openat(f->fd, "dev/vfio/devices/vfio3", O_RDWR | O_CLOEXEC) < 0 ||
                    open_deep_file(f->fd) < 0 || write(ready[1], "r", 1) != 1)
                        _exit(1);
                char c;
                while (read(hold[0], &c, 1) < 0 && errno == EINTR)
                        ;
                _exit(0);
        }
        f->child = pid;
        close(ready[1]);
        close(hold[0]);
        close(sv[1]);
        f->hold_fd = hold[1];
        f->sock_fd = sv[0];

        char c;
        ssize_t n;
        while ((n = read(ready[0], &c, 1)) < 0 && errno == EINTR)
                ;
        close(ready[0]);
        assert_int_equal(n, 1);
}

static int setup_real(void **state)
{
        setup(state);
        Fixture *f = *state;
        file_fmt(f, "dev/vfio/7");
        file_fmt(f, "dev/vfio/devices/vfio3");
        add_vf(f, VF, "7", "vfio3");
        root_free(f->proc);
        assert_int_equal(root_open("/proc", &f->proc), 0);
        return 0;
}

/*
 * An oracle written with readdir() rather than the scan's getdents64: the DEV-14 message for
 * the first process (in /proc's order, which is by pid) whose descriptors we may not read,
 * or NULL when we may read them all.
 */
static char *first_hidden_process(const Root *proc)
{
        int fd = openat(proc->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(fd >= 0);
        _cleanup_closedir_ DIR *d = fdopendir(fd);
        assert_non_null(d);
        for (struct dirent *de; (de = readdir(d));) {
                char rel[sizeof de->d_name + 4], *msg = NULL;
                if (de->d_name[0] < '1' || de->d_name[0] > '9')
                        continue;
                snprintf(rel, sizeof rel, "%s/fd", de->d_name);
                fd = openat(proc->fd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (fd < 0) {
                        if (errno == EACCES || errno == EPERM)
                                assert_true(asprintf(&msg, "read process %s file descriptors: %s",
                                                     de->d_name, strerror(errno)) >= 0);
                        if (msg)
                                return msg;
                        continue;
                }
                DIR *fds = fdopendir(fd);
                assert_non_null(fds);
                for (struct dirent *e; !msg && (e = readdir(fds));) {
                        char buf[PATH_MAX];
                        if (e->d_name[0] == '.' ||
                            readlinkat(dirfd(fds), e->d_name, buf, sizeof buf) >= 0)
                                continue;
                        if (errno == EACCES || errno == EPERM)
                                assert_true(asprintf(&msg, "read process %s file descriptor %s: %s",
                                                     de->d_name, e->d_name, strerror(errno)) >= 0);
                }
                closedir(fds);
                if (msg)
                        return msg;
        }
        return NULL;
}

/* The holder's nodes, cdev and socket are seen; once it is gone, a fresh scan sees none. */
static void check_real_processes(Fixture *f)
{
        pid_t holder = -1;
        _cleanup_free_ char *error = NULL;
        bool in_namespace = getpid() == 1;

        start_holder(f);
        /* The cdev is unlinked while held: the kernel now names it "... (deleted)". */
        assert_int_equal(unlinkat(f->fd, "dev/vfio/devices/vfio3", 0), 0);

        _cleanup_(vfio_scan_freep) VfioScan *busy = scan_ok(f, f->proc);
        if (in_namespace)
                assert_int_equal(vfio_scan_n_processes(busy), 2); /* us and the holder */
        else
                assert_true(vfio_scan_n_processes(busy) >= 2);
        assert_int_equal(vfio_scan_n_nodes(busy), 2);
        node_held_by(f, busy, "vfio/7", f->child);
        node_held_by(f, busy, "vfio/devices/vfio3", f->child);
        assert_int_equal(vfio_probe_vf(busy, f->sys, VF, &holder, &error), 1);
        assert_int_equal(holder, f->child);

        pid_t owner = -1;
        struct stat st;
        assert_int_equal(vfio_scan_find_socket(busy, f->child_sock_inode, &owner), 0);
        assert_int_equal(owner, f->child);
        assert_int_equal(fstat(f->sock_fd, &st), 0);
        assert_int_equal(vfio_scan_find_socket(busy, st.st_ino, &owner), 0);
        assert_int_equal(owner, getpid());

        /* Once the holder is gone, a fresh scan (DEV-15) sees the VF free. */
        assert_int_equal(kill(f->child, SIGKILL), 0);
        assert_int_equal(waitpid(f->child, NULL, 0), f->child);
        f->child = 0;
        _cleanup_(vfio_scan_freep) VfioScan *idle = scan_ok(f, f->proc);
        assert_int_equal(vfio_scan_n_nodes(idle), 0);
        assert_int_equal(vfio_probe_vf(idle, f->sys, VF, &holder, &error), 0);
        assert_int_equal(vfio_scan_find_socket(idle, f->child_sock_inode, NULL), -ENOENT);
        assert_null(error);
}

static void test_real_processes_in_namespace(void **state) /* DEV-12..DEV-15, SIM-12, SIM-21 */
{
        assert_int_equal(getpid(), 1);
        check_real_processes(*state);
}

static void test_real_processes_outside_namespace(void **state) /* DEV-12..DEV-15 */
{
        Fixture *f = *state;

        /* Reading another process's descriptors takes ptrace rights over it (DEV-14: vgpud
         * runs with CAP_SYS_PTRACE). Where some process is hidden from us even so (a sandbox
         * whose init we may not inspect), failing closed with its name is the right answer,
         * and the positive half can only run inside the namespace. */
        _cleanup_free_ char *hidden = first_hidden_process(f->proc);
        if (!hidden) {
                check_real_processes(f);
                return;
        }

        VfioScan *s = NULL;
        _cleanup_free_ char *error = NULL;
        int r = vfio_scan(f->proc, f->dev, &s, &error);
        assert_true(r == -EACCES || r == -EPERM);
        assert_null(s);
        assert_string_equal(error, hidden);
        fprintf(stderr, "# outside the namespace the scan failed closed, as it must: %s\n", error);
}

static void test_real_processes_churning(void **state) /* DEV-14 */
{
        Fixture *f = *state;
        pid_t kids[8] = {0};

        assert_int_equal(getpid(), 1); /* inside the namespace: every process is ours */

        /* Processes that come and go while we scan must never make a scan fail. */
        for (size_t i = 0; i < ELEMENTSOF(kids); i++) {
                kids[i] = fork();
                assert_true(kids[i] >= 0);
                if (kids[i] == 0) {
                        prctl(PR_SET_PDEATHSIG, SIGKILL);
                        for (int n = 0; n < 500; n++) {
                                int fd = openat(f->fd, "dev/vfio/7", O_RDONLY | O_CLOEXEC);
                                pid_t gc = fork();
                                if (gc == 0)
                                        _exit(0);
                                close(fd);
                                if (gc > 0)
                                        waitpid(gc, NULL, 0);
                        }
                        _exit(0);
                }
        }
        int failures = 0;
        _cleanup_free_ char *error = NULL;
        for (int n = 0; n < 50; n++) {
                VfioScan *s = NULL;
                if (vfio_scan(f->proc, f->dev, &s, &error) < 0)
                        failures++;
                vfio_scan_free(s);
        }
        for (size_t i = 0; i < ELEMENTSOF(kids); i++) {
                kill(kids[i], SIGKILL);
                waitpid(kids[i], NULL, 0);
        }
        if (failures)
                fail_msg("%d of 50 scans failed, last: %s", failures, error);
}

/* ---- the same inside a private PID namespace (DEV-14, SIM-21) ------------------------------ */

static const struct CMUnitTest namespace_tests[] = {
    cmocka_unit_test_setup_teardown(test_real_processes_in_namespace, setup_real, teardown),
    cmocka_unit_test_setup_teardown(test_real_processes_churning, setup_real, teardown),
};

/* Runs self under unshare and returns its exit status, 128+sig if killed, -errno if stuck. */
static int run_in_namespace(const char *self, const char *mode)
{
        const char *root_argv[] = {"unshare", "--pid", "--kill-child", "--mount-proc", self,
                                   mode,      NULL};
        const char *user_argv[] = {"unshare",
                                   "--user",
                                   "--map-root-user",
                                   "--mount",
                                   "--pid",
                                   "--kill-child",
                                   "--mount-proc",
                                   self,
                                   mode,
                                   NULL};
        char **argv = (char **)(geteuid() == 0 ? root_argv : user_argv);

        /* The inner run's TAP must not mix with ours: it goes to our stderr. */
        posix_spawn_file_actions_t fa;
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, 2, 1);
        pid_t pid;
        int r = posix_spawnp(&pid, "unshare", &fa, NULL, argv, environ);
        posix_spawn_file_actions_destroy(&fa);
        if (r != 0)
                return -r;

        /* Bounded wait; --kill-child takes the whole namespace down with unshare. */
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        struct pollfd p = {.fd = pidfd, .events = POLLIN};
        bool done = pidfd >= 0 && poll(&p, 1, NS_TIMEOUT_MS) == 1;
        if (pidfd >= 0)
                close(pidfd);
        if (!done)
                kill(pid, SIGKILL);
        int status;
        if (waitpid(pid, &status, 0) != pid)
                return -ECHILD;
        if (!done)
                return -ETIMEDOUT;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static char self_path[PATH_MAX];

static void test_inside_pid_namespace(void **state) /* DEV-14, SIM-21 */
{
        (void)state;
        /* SIM-21 runs every integration test this way, so a host without PID namespaces
         * fails here rather than skipping. */
        if (run_in_namespace(self_path, "--namespace-probe") != 0)
                fail_msg("cannot create a private PID namespace with unshare");
        int r = run_in_namespace(self_path, "--in-pid-namespace");
        if (r != 0)
                fail_msg("tests inside the PID namespace failed (status %d); see stderr", r);
}

int main(int argc, char **argv)
{
        if (argc == 2 && streq(argv[1], "--namespace-probe"))
                return getpid() == 1 ? 0 : 1;
        if (argc == 2 && streq(argv[1], "--in-pid-namespace")) {
                if (getpid() != 1)
                        return 1;
                return cmocka_run_group_tests_name("vfio inside a PID namespace", namespace_tests,
                                                   NULL, NULL);
        }
        if (!realpath(argv[0], self_path)) {
                fprintf(stderr, "realpath %s: %m\n", argv[0]);
                return 1;
        }

        const struct CMUnitTest tests[] = {
#define T(t) cmocka_unit_test_setup_teardown(t, setup, teardown)
            T(test_scan_keeps_vfio_targets_and_sockets),
            T(test_scan_empty),
            T(test_scan_many_entries),
            T(test_scan_deleted_node_counts),
            T(test_scan_dev_root_spellings),
            T(test_scan_invalid_dev_root),
            T(test_scan_pid_without_fd_dir_is_skipped),
            T(test_scan_fd_dir_not_a_directory),
            T(test_scan_pid_entry_not_a_directory),
            T(test_scan_fd_not_a_link),
            T(test_scan_non_numeric_fd_entry_is_read),
            T(test_scan_malformed_socket_link),
            T(test_scan_non_canonical_pid),
            T(test_scan_proc_root_unlistable),
            T(test_scan_proc_root_read_error),
            T(test_scan_fd_dir_read_error),
            T(test_scan_fd_dir_vanishing_is_skipped),
            T(test_scan_fd_link_errors),
            T(test_scan_overlong_link_is_no_node),
            T(test_scan_out_of_memory),
            T(test_scan_startup_reason),
            T(test_parse_socket_link),
            T(test_probe_group_node_open),
            T(test_probe_cdev_open),
            T(test_probe_both_open_lowest_holder),
            T(test_probe_not_in_use),
            T(test_probe_candidates_missing),
            T(test_probe_only_group),
            T(test_probe_group_link_unreadable),
            T(test_probe_cdev_dir_unreadable),
            T(test_probe_both_unreadable),
            T(test_probe_match_wins_over_errors),
            T(test_probe_malformed_sysfs),
            T(test_probe_invalid_names),
            T(test_probe_mdev),
            T(test_one_scan_serves_many_probes),
#undef T
            cmocka_unit_test_setup_teardown(test_real_processes_outside_namespace, setup_real,
                                            teardown),
            cmocka_unit_test(test_inside_pid_namespace),
        };
        return cmocka_run_group_tests_name("vfio", tests, NULL, NULL);
}
