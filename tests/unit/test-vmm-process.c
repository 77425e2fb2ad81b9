/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The VMM runtime (SPEC §7): spawning (VMM-3, VMM-4), the exit watch, readiness (VMM-5, VMM-6),
 * the graceful stop (VMM-9), the ladder (VMM-10, VMM-11, VMM-12, VMM-13) and liveness (VMM-16,
 * VMM-17, VMM-18, VMM-19).
 *
 * The processes are real and this test's own children: /bin/sleep and /bin/sh where any process
 * will do, fake-qemu (FAKE_QEMU, SIM-15) where QMP must be spoken as QEMU speaks it, and a small
 * QMP server on a thread of this test for replies fake-qemu never gives (events before a
 * reply, error replies to query-status, overlong lines). Every Vmm runs on an sd-event loop that
 * the test drives with bounded waits. Liveness looks at the real /proc only for our own
 * children, and at fixture /proc trees for what the kernel cannot be made to show.
 *
 * syscall() and kill() are wrapped so that one test can make SIGKILL vanish: the only way to
 * see the ladder fail (VMM-10's last step) without a process that survives SIGKILL.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "sysfs/sysfs.h"
#include "testlib.h"
#include "vfio/vfio.h"
#include "vmm/vmm-internal.h"
#include "vmm/vmm.h"

#define INSTANCE "vm1"
#define SHORT_WAIT (5 * NSEC_PER_SEC)

/* ---- SIGKILL that never arrives ------------------------------------------------------------ */

static atomic_bool swallow_sigkill;
static atomic_int swallowed_sigkills;

long __real_syscall(long number, ...);
long __wrap_syscall(long number, ...);
long __wrap_syscall(long number, ...)
{
        /* Only the arguments the call has are read: reading more is undefined (ASan sees it). */
        long a[6] = {0};
        size_t n = number == SYS_pidfd_open ? 2 : number == SYS_pidfd_send_signal ? 4 : 6;
        va_list ap;
        va_start(ap, number);
        for (size_t i = 0; i < n; i++)
                a[i] = va_arg(ap, long);
        va_end(ap);
        if (number == SYS_pidfd_send_signal && a[1] == SIGKILL && swallow_sigkill) {
                swallowed_sigkills++;
                return 0;
        }
        return __real_syscall(number, a[0], a[1], a[2], a[3], a[4], a[5]);
}

int __real_kill(pid_t pid, int sig);
int __wrap_kill(pid_t pid, int sig);
int __wrap_kill(pid_t pid, int sig)
{
        if (sig == SIGKILL && swallow_sigkill) {
                swallowed_sigkills++;
                return 0;
        }
        return __real_kill(pid, sig);
}

/* ---- fixture ------------------------------------------------------------------------------- */

typedef struct Fixture {
        TestTree *tree; /* .sim/, data/instances/vm1/, run/, disk.img */
        Root *proc;     /* the real /proc, for our own children */
        sd_event *event;
        int instance_fd;
        char *qmp, *agent, *console, *disk, *qemu_log;
        const char *fake_qemu;

        Vmm *vmm;
        pid_t pid; /* the process under test, 0: none */
        int pidfd; /* our own pidfd on it, for the clean-up */
        uint64_t start_time;

        unsigned seq;
        int n_exited;
        unsigned exited_seq;
        VmmExit exit;
        int n_kills;
        bool in_grace[8];
        char signals[512]; /* the signalled callback's, "<SIG>[ group]: <reason>;" each */
        int n_ready;
        unsigned ready_seq;
        int ready_r;
        char *ready_error;
        int n_stop;
        unsigned stop_seq;
        int stop_r;
        char *stop_error;
        bool free_in_exited;
} Fixture;

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof(*f));
        assert_non_null(f);
        f->pidfd = -1;
        f->instance_fd = -1;
        assert_int_equal(test_tree_new("vmm", &f->tree), 0);
        assert_int_equal(root_open("/proc", &f->proc), 0);
        assert_int_equal(sd_event_new(&f->event), 0);
        assert_int_equal(test_mkdirs_at(f->tree->fd, "data/instances/" INSTANCE), 0);
        assert_int_equal(test_mkdirs_at(f->tree->fd, "run"), 0);
        assert_int_equal(test_mkdirs_at(f->tree->fd, ".sim/qemu"), 0);
        assert_int_equal(test_tree_put(f->tree, "", "disk.img"), 0);
        f->instance_fd =
            openat(f->tree->fd, "data/instances/" INSTANCE, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(f->instance_fd >= 0);
        f->qmp = test_tree_path(f->tree, "run/qmp.sock");
        f->agent = test_tree_path(f->tree, "run/agent.sock");
        f->console = test_tree_path(f->tree, "data/instances/" INSTANCE "/console.log");
        f->qemu_log = test_tree_path(f->tree, "data/instances/" INSTANCE "/qemu.log");
        f->disk = test_tree_path(f->tree, "disk.img");
        assert_non_null(f->disk);
        f->fake_qemu = getenv("FAKE_QEMU");
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        f->vmm = vmm_free(f->vmm);
        swallow_sigkill = false;
        if (f->pidfd >= 0) {
                /* Through the pidfd: the pid may be reaped and reused by now, the pidfd not. */
                (void)syscall(SYS_pidfd_send_signal, f->pidfd, SIGKILL, NULL, 0);
                siginfo_t si;
                while (waitid(P_PIDFD, (id_t)f->pidfd, &si, WEXITED) < 0 && errno == EINTR)
                        ;
                close(f->pidfd);
        }
        sd_event_unref(f->event);
        root_free(f->proc);
        closep(&f->instance_fd);
        test_tree_free(f->tree);
        free(f->qmp);
        free(f->agent);
        free(f->console);
        free(f->qemu_log);
        free(f->disk);
        free(f->ready_error);
        free(f->stop_error);
        free(f);
        return 0;
}

/*
 * Spawns argv with qemu.log in the instance directory, passing fds; keeps a pidfd of our own
 * for teardown.
 */
static void spawn_passing(Fixture *f, char *const *argv, const int *fds, size_t n_fds,
                          VmmSpawned *ret)
{
        _cleanup_free_ char *error = NULL;
        VmmSpawnRequest req = {.argv = argv,
                               .fds = fds,
                               .n_fds = n_fds,
                               .log_dirfd = f->instance_fd,
                               .log = "qemu.log",
                               .proc = f->proc};
        int r = vmm_spawn(&req, ret, &error);
        if (r < 0)
                fail_msg("vmm_spawn: %s", error);
        assert_null(error);
        f->pid = ret->pid;
        f->start_time = ret->start_time;
        assert_true(ret->identified);
        assert_null(ret->identity_error);
        f->pidfd = fcntl(ret->pidfd, F_DUPFD_CLOEXEC, 3);
        assert_true(f->pidfd >= 0);
}

static void spawn(Fixture *f, char *const *argv, VmmSpawned *ret)
{
        spawn_passing(f, argv, NULL, 0, ret);
}

static void spawn_sleep(Fixture *f, VmmSpawned *ret)
{
        char *argv[] = {"/bin/sleep", "1000", NULL};
        spawn(f, argv, ret);
}

static void spawn_fake_qemu(Fixture *f, const char *flags, VmmSpawned *ret)
{
        _cleanup_strv_free_ char **argv = NULL;
        _cleanup_free_ char *error = NULL;

        if (!f->fake_qemu)
                fail_msg("FAKE_QEMU is not set (tests/unit/meson.build sets it)");
        if (flags)
                assert_int_equal(test_tree_put(f->tree, flags, ".sim/qemu/" INSTANCE), 0);
        _cleanup_close_ int disk = open(f->disk, O_RDONLY | O_CLOEXEC);
        assert_true(disk >= 0);
        VmmCommand c = vmm_command_init();
        c.qemu_binary = f->fake_qemu;
        c.accel = CONFIG_QEMU_ACCEL_TCG;
        c.name = INSTANCE;
        c.vcpus = 1;
        c.memory_mb = 64;
        assert_int_equal(vmm_command_set_channels(&c, f->qmp, f->agent, NULL, f->console), 0);
        assert_int_equal(vmm_command_add_drive(&c, &(VmmDrive){.node_name = "bootdisk",
                                                               .read_only = true,
                                                               .fd = disk,
                                                               .device = VMM_DRIVE_VIRTIO_BLK}),
                         0);
        if (vmm_command_argv(&c, &argv, &error) < 0)
                fail_msg("vmm_command_argv: %s", error);
        int fds[VMM_PASSED_FDS_MAX];
        size_t n = vmm_command_passed_fds(&c, fds);
        spawn_passing(f, argv, fds, n, ret);
}

static void on_exited(Vmm *v, const VmmExit *e, void *userdata)
{
        Fixture *f = userdata;
        f->n_exited++;
        f->exited_seq = ++f->seq;
        f->exit = *e;
        if (f->free_in_exited)
                f->vmm = vmm_free(f->vmm);
}

static void on_forced_kill(Vmm *v, bool in_grace, void *userdata)
{
        Fixture *f = userdata;
        if (f->n_kills < (int)ELEMENTSOF(f->in_grace))
                f->in_grace[f->n_kills] = in_grace;
        f->n_kills++;
}

static void on_signalled(Vmm *v, int sig, bool group, const char *reason, void *userdata)
{
        Fixture *f = userdata;
        size_t len = strlen(f->signals);
        snprintf(f->signals + len, sizeof f->signals - len, "SIG%s%s: %s;", sigabbrev_np(sig),
                 group ? " group" : "", reason);
}

static void on_ready(Vmm *v, int r, const char *error, void *userdata)
{
        Fixture *f = userdata;
        f->n_ready++;
        f->ready_seq = ++f->seq;
        f->ready_r = r;
        free(f->ready_error);
        f->ready_error = error ? strdup(error) : NULL;
        assert_true((r < 0) == (error != NULL));
}

static void on_stop(Vmm *v, int r, const char *error, void *userdata)
{
        Fixture *f = userdata;
        f->n_stop++;
        f->stop_seq = ++f->seq;
        f->stop_r = r;
        free(f->stop_error);
        f->stop_error = error ? strdup(error) : NULL;
        assert_true((r < 0) == (error != NULL));
}

typedef struct VmmOptions {
        bool adopted;
        bool has_vfio;
        nsec_t term_grace;
        nsec_t init_window;
        const char *qmp_socket; /* NULL: the fixture's */
} VmmOptions;

static void make_vmm(Fixture *f, VmmSpawned *s, VmmOptions o)
{
        VmmConfig c = {
            .pid = s->pid,
            .pidfd = s->pidfd,
            .is_child = !o.adopted,
            .start_time = s->start_time,
            .qmp_socket = o.qmp_socket ? o.qmp_socket : f->qmp,
            .has_vfio = o.has_vfio,
            .vfio_term_grace = o.term_grace,
            .vfio_init_window = o.init_window,
            .exited = on_exited,
            .forced_kill = on_forced_kill,
            .signalled = on_signalled,
            .userdata = f,
        };
        assert_int_equal(vmm_new(&c, &f->vmm), 0);
        s->pidfd = -1; /* the Vmm's now */
        assert_int_equal(vmm_attach_event(f->vmm, f->event), 0);
        assert_int_equal(vmm_pid(f->vmm), s->pid);
}

static char *read_text(const char *path)
{
        char *text = NULL;
        int r = test_read_file(path, &text);
        if (r == -ENOENT)
                return strdup("");
        assert_int_equal(r, 0);
        return text;
}

static bool console_has(Fixture *f, const char *needle)
{
        _cleanup_free_ char *text = read_text(f->console);
        return strstr(text, needle) != NULL;
}

static void wait_ready_ok(Fixture *f, bool query_kvm)
{
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, query_kvm, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        if (f->ready_r < 0)
                fail_msg("readiness: %s", f->ready_error);
}

/* ---- spawn (VMM-3, VMM-4) ------------------------------------------------------------------ */

static void expect_proc_status_zero(pid_t pid, const char *field)
{
        _cleanup_free_ char *path = NULL, *text = NULL, *want = NULL;
        assert_int_equal(strprintf(&path, "/proc/%d/status", (int)pid), 0);
        assert_int_equal(test_read_file(path, &text), 0);
        assert_int_equal(strprintf(&want, "\n%s:\t0000000000000000\n", field), 0);
        if (!strstr(text, want))
                fail_msg("%s of pid %d is not empty:\n%s", field, (int)pid, text);
}

/* The entries of a /proc/<pid>/fd directory, -1 when it cannot be listed. */
static int count_fds(const char *fd_dir)
{
        DIR *d = opendir(fd_dir);
        if (!d)
                return -1;
        int n = 0;
        for (struct dirent *de; (de = readdir(d));)
                n += de->d_name[0] != '.';
        closedir(d);
        return n;
}

static void test_spawn_exact_environment(void **state) /* VMM-3, VMM-4 */
{
        Fixture *f = *state;
        VmmSpawned s;

        /* What the daemon's thread has that QEMU must not inherit: blocked and ignored
         * signals, and a descriptor without close-on-exec. */
        sigset_t block, old;
        sigemptyset(&block);
        sigaddset(&block, SIGTERM);
        sigaddset(&block, SIGUSR1);
        assert_int_equal(pthread_sigmask(SIG_BLOCK, &block, &old), 0);
        struct sigaction ign = {.sa_handler = SIG_IGN}, old_usr2;
        assert_int_equal(sigaction(SIGUSR2, &ign, &old_usr2), 0);
        int leak = open("/proc/self/status", O_RDONLY);
        assert_true(leak >= 0);
        assert_int_equal(setenv("VGPUD_TEST_LEAK", "1", 1), 0);

        spawn_sleep(f, &s);

        close(leak);
        unsetenv("VGPUD_TEST_LEAK");
        assert_int_equal(sigaction(SIGUSR2, &old_usr2, NULL), 0);
        assert_int_equal(pthread_sigmask(SIG_SETMASK, &old, NULL), 0);

        /* The environment, exactly. */
        _cleanup_free_ char *path = NULL, *env = NULL;
        size_t env_size;
        assert_int_equal(strprintf(&path, "/proc/%d/environ", (int)s.pid), 0);
        /* The spawn returns once execve has replaced the image, which may be a moment before
         * the kernel has recorded where the new environment lies: until then it reads empty. */
        for (nsec_t deadline = test_now() + SHORT_WAIT;;) {
                free(env);
                env = NULL;
                assert_int_equal(read_file_at(AT_FDCWD, path, 65536, &env, &env_size), 0);
                if (env_size > 0 || test_now() > deadline)
                        break;
                usleep(1000);
        }
        assert_int_equal(env_size, strlen(VMM_SPAWN_PATH) + 1);
        assert_memory_equal(env, VMM_SPAWN_PATH "\0", env_size);

        /* Empty mask, no ignored signal. */
        expect_proc_status_zero(s.pid, "SigBlk");
        expect_proc_status_zero(s.pid, "SigIgn");

        /* Its own session and process group; start_time as the kernel has it. */
        _cleanup_free_ char *stat_path = NULL, *stat = NULL, *error = NULL;
        size_t stat_size;
        VmmProcStat st;
        assert_int_equal(strprintf(&stat_path, "/proc/%d/stat", (int)s.pid), 0);
        assert_int_equal(read_file_at(AT_FDCWD, stat_path, VMM_PROC_STAT_MAX, &stat, &stat_size),
                         0);
        assert_int_equal(vmm_parse_proc_stat(stat, stat_size, &st, &error), 0);
        assert_int_equal(st.session, s.pid);
        assert_int_equal(st.pgrp, s.pid);
        assert_int_equal(st.ppid, getpid());
        assert_true(st.start_time == s.start_time);

        /* 0 the null device, 1 and 2 qemu.log, nothing else. The new image's dynamic loader
         * holds a library open for a moment while it maps it: wait until it is done (a real
         * leak stays), then look. */
        _cleanup_free_ char *fd_dir = NULL;
        assert_int_equal(strprintf(&fd_dir, "/proc/%d/fd", (int)s.pid), 0);
        for (nsec_t deadline = test_now() + SHORT_WAIT; count_fds(fd_dir) != 3;) {
                if (test_now() > deadline)
                        break;
                usleep(1000);
        }
        DIR *d = opendir(fd_dir);
        assert_non_null(d);
        int n = 0;
        for (struct dirent *de; (de = readdir(d));) {
                if (de->d_name[0] == '.')
                        continue;
                n++;
                char link[PATH_MAX], target[PATH_MAX];
                snprintf(link, sizeof(link), "%s/%s", fd_dir, de->d_name);
                ssize_t k = readlink(link, target, sizeof(target) - 1);
                assert_true(k > 0);
                target[k] = 0;
                if (streq(de->d_name, "0"))
                        assert_string_equal(target, "/dev/null");
                else if (streq(de->d_name, "1") || streq(de->d_name, "2"))
                        assert_string_equal(target, f->qemu_log);
                else
                        fail_msg("descriptor %s (%s) leaked into the VMM", de->d_name, target);
        }
        closedir(d);
        assert_int_equal(n, 3);

        /* The pidfd is on this very process. */
        assert_int_equal(syscall(SYS_pidfd_send_signal, s.pidfd, 0, NULL, 0), 0);
        close(s.pidfd);
}

static void wait_exit_by_pidfd(Fixture *f, siginfo_t *si)
{
        struct pollfd p = {.fd = f->pidfd, .events = POLLIN};
        assert_int_equal(poll(&p, 1, 30000), 1);
        assert_int_equal(waitid(P_PIDFD, (id_t)f->pidfd, si, WEXITED), 0);
}

static void test_spawn_output_appended(void **state) /* VMM-3 */
{
        Fixture *f = *state;
        VmmSpawned s;
        siginfo_t si;

        assert_int_equal(test_put_at(f->instance_fd, "earlier run\n", "qemu.log"), 0);
        char *argv[] = {"/bin/sh", "-c", "echo out; echo err >&2; read x || echo eof", NULL};
        spawn(f, argv, &s);
        close(s.pidfd);
        wait_exit_by_pidfd(f, &si);
        assert_int_equal(si.si_code, CLD_EXITED);
        assert_int_equal(si.si_status, 0);

        /* Appended; stdin read EOF at once (the null device). */
        _cleanup_free_ char *log = read_text(f->qemu_log);
        assert_string_equal(log, "earlier run\nout\nerr\neof\n");
}

static void test_spawn_creates_log_0600(void **state) /* VMM-3 */
{
        Fixture *f = *state;
        VmmSpawned s;
        siginfo_t si;

        char *argv[] = {"/bin/true", NULL};
        spawn(f, argv, &s);
        close(s.pidfd);
        wait_exit_by_pidfd(f, &si);
        struct stat st;
        assert_int_equal(fstatat(f->instance_fd, "qemu.log", &st, 0), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
}

static void test_spawn_missing_binary(void **state) /* VMM-3 */
{
        Fixture *f = *state;
        _cleanup_free_ char *error = NULL;
        VmmSpawned s = {.pid = -7};
        char *argv[] = {"/nonexistent/qemu-system-x86_64", NULL};
        VmmSpawnRequest req = {
            .argv = argv, .log_dirfd = f->instance_fd, .log = "qemu.log", .proc = f->proc};

        assert_int_equal(vmm_spawn(&req, &s, &error), -ENOENT);
        assert_string_equal(error,
                            "spawn /nonexistent/qemu-system-x86_64: No such file or directory");
        assert_int_equal(s.pid, -7);

        /* A binary that is not executable. */
        free(error);
        error = NULL;
        char *argv2[] = {f->disk, NULL};
        req.argv = argv2;
        assert_int_equal(vmm_spawn(&req, &s, &error), -EACCES);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want, "spawn %s: Permission denied", f->disk), 0);
        assert_string_equal(error, want);

        siginfo_t si;
        assert_int_equal(waitid(P_ALL, 0, &si, WEXITED | WNOHANG), -1);
        assert_int_equal(errno, ECHILD);
}

static void test_spawn_log_unopenable(void **state) /* VMM-3 */
{
        Fixture *f = *state;
        _cleanup_free_ char *error = NULL;
        VmmSpawned s;
        char *argv[] = {"/bin/true", NULL};
        VmmSpawnRequest req = {
            .argv = argv, .log_dirfd = f->instance_fd, .log = "gone/qemu.log", .proc = f->proc};

        assert_int_equal(vmm_spawn(&req, &s, &error), -ENOENT);
        assert_string_equal(error,
                            "spawn /bin/true: open gone/qemu.log: No such file or directory");

        free(error);
        error = NULL;
        req.log = "qemu.log";
        req.null_device = "/nonexistent-null";
        assert_int_equal(vmm_spawn(&req, &s, &error), -ENOENT);
        assert_string_equal(error,
                            "spawn /bin/true: open /nonexistent-null: No such file or directory");
}

/*
 * VMM-14: a child whose stat cannot be read right after the spawn is not killed on the spot:
 * the spawn succeeds without an identity, so that the caller's ladder ends it.
 */
static void test_spawn_unidentified_stat(void **state)
{
        Fixture *f = *state;
        _cleanup_root_ Root *empty = NULL;
        _cleanup_free_ char *error = NULL;
        VmmSpawned s;
        char *argv[] = {"/bin/sleep", "1000", NULL};

        /* A /proc where the child's stat cannot be read: no start_time. */
        assert_int_equal(test_mkdirs_at(f->tree->fd, "emptyproc"), 0);
        _cleanup_free_ char *dir = test_tree_path(f->tree, "emptyproc");
        assert_int_equal(root_open(dir, &empty), 0);
        VmmSpawnRequest req = {
            .argv = argv, .log_dirfd = f->instance_fd, .log = "qemu.log", .proc = empty};
        assert_int_equal(vmm_spawn(&req, &s, &error), 0);
        assert_null(error);
        f->pid = s.pid;
        f->pidfd = fcntl(s.pidfd, F_DUPFD_CLOEXEC, 3);

        assert_false(s.identified);
        _cleanup_free_ char *prefix = NULL, *identity_error = s.identity_error;
        assert_int_equal(strprintf(&prefix, "read %s/", dir), 0);
        assert_true(startswith(identity_error, prefix));
        assert_non_null(strstr(identity_error, "/stat: No such file or directory"));
        assert_true(s.pidfd >= 0);
        assert_true(s.start_time > 0); /* the spawn's moment, for VMM-13's window */

        /* Alive, and the ladder ends it. */
        assert_int_equal(syscall(SYS_pidfd_send_signal, s.pidfd, 0, NULL, 0), 0);
        make_vmm(f, &s, (VmmOptions){0});
        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(f->exit.signal, SIGKILL);
        assert_string_equal(f->signals, "SIGKILL: termination requested;");
}

/* The lowest free descriptor from from on. */
static int free_fd_from(int from)
{
        for (int fd = from;; fd++)
                if (fcntl(fd, F_GETFD) < 0 && errno == EBADF)
                        return fd;
}

/*
 * VMM-14 at the descriptor limit: the child runs but no pidfd can be had. The spawn hands back
 * its pid; a Vmm without a pidfd signals it by pid (it is unreaped, so the pid is still its
 * own), runs the whole ladder and reaps it by polling.
 */
static void test_spawn_without_pidfd_goes_through_ladder(void **state)
{
        Fixture *f = *state;
        _cleanup_free_ char *error = NULL;
        VmmSpawned s;
        char *argv[] = {"/bin/sleep", "1000", NULL};
        VmmSpawnRequest req = {
            .argv = argv, .log_dirfd = f->instance_fd, .log = "qemu.log", .proc = f->proc};

        /* Room for qemu.log and the null device, none for the pidfd. */
        int a = free_fd_from(0), b = free_fd_from(a + 1);
        struct rlimit old, tight;
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
        tight = (struct rlimit){.rlim_cur = (rlim_t)b + 1, .rlim_max = old.rlim_max};
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &tight), 0);
        int r = vmm_spawn(&req, &s, &error);
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
        if (r < 0)
                fail_msg("vmm_spawn: %s", error);
        f->pid = s.pid;
        f->pidfd = syscall(SYS_pidfd_open, s.pid, 0); /* the teardown's, should a check fail */
        assert_true(f->pidfd >= 0);

        assert_false(s.identified);
        assert_int_equal(s.pidfd, -1);
        _cleanup_free_ char *want = NULL, *identity_error = s.identity_error;
        assert_int_equal(
            strprintf(&want, "open a pidfd on pid %d: %s", (int)s.pid, strerror(EMFILE)), 0);
        assert_string_equal(identity_error, want);

        /* With VFIO the ladder starts at SIGTERM, by pid; the exit is polled for and reaped. */
        make_vmm(f, &s,
                 (VmmOptions){.has_vfio = true,
                              .term_grace = 5 * NSEC_PER_SEC,
                              .init_window = 60 * NSEC_PER_SEC});
        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1 && f->n_stop == 1);
        assert_int_equal(f->stop_r, 0);
        assert_true(f->exit.status_known);
        assert_int_equal(f->exit.signal, SIGTERM);
        assert_string_equal(f->signals, "SIGTERM: termination requested;");
        assert_int_equal(f->n_kills, 0);
        siginfo_t si;
        assert_int_equal(waitid(P_PID, (id_t)s.pid, &si, WEXITED | WNOHANG), -1);
        assert_int_equal(errno, ECHILD);
}

/* VMM-3, INST-6: the passed descriptors sit at 3, 4, ... in the child, and nothing else does. */
static void test_spawn_passes_descriptors(void **state)
{
        Fixture *f = *state;
        assert_int_equal(test_tree_put(f->tree, "kernel", "kernel"), 0);
        assert_int_equal(test_tree_put(f->tree, "initrd", "initrd"), 0);
        _cleanup_free_ char *kpath = test_tree_path(f->tree, "kernel"),
                            *ipath = test_tree_path(f->tree, "initrd");
        /* Low numbers on purpose: a source that is another's target must survive the moves. */
        _cleanup_close_ int initrd = open(ipath, O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int kernel = open(kpath, O_RDONLY | O_CLOEXEC);
        _cleanup_close_ int stray = open(kpath, O_RDONLY); /* not close-on-exec, not passed */
        assert_true(kernel >= 0 && initrd >= 0 && stray >= 0);
        int fds[] = {kernel, initrd};
        VmmSpawned s;
        char *argv[] = {"/bin/sleep", "1000", NULL};
        spawn_passing(f, argv, fds, ELEMENTSOF(fds), &s);
        close(s.pidfd);

        const struct {
                int fd;
                const char *target;
        } want[] = {{3, kpath}, {4, ipath}};
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                char link[64], target[PATH_MAX];
                snprintf(link, sizeof link, "/proc/%d/fd/%d", (int)s.pid, want[i].fd);
                ssize_t n = readlink(link, target, sizeof target - 1);
                assert_true(n > 0);
                target[n] = 0;
                assert_string_equal(target, want[i].target);
        }
        /* 0, 1, 2, 3, 4 and nothing else. */
        _cleanup_free_ char *fd_dir = NULL;
        assert_int_equal(strprintf(&fd_dir, "/proc/%d/fd", (int)s.pid), 0);
        _cleanup_closedir_ DIR *d = opendir(fd_dir);
        assert_non_null(d);
        int count = 0;
        for (struct dirent *de; (de = readdir(d));)
                if (de->d_name[0] != '.')
                        count++;
        assert_int_equal(count, 5);
}

/* ---- boot id and the last line of qemu.log ------------------------------------------------- */

static void test_boot_id(void **state)
{
        Fixture *f = *state;
        _cleanup_free_ char *id = NULL, *error = NULL, *dir = NULL;
        _cleanup_root_ Root *fixture = NULL;

        assert_int_equal(vmm_read_boot_id(f->proc, &id, &error), 0);
        assert_int_equal(strlen(id), 36);

        assert_int_equal(test_tree_put(f->tree, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0\n",
                                       "p/sys/kernel/random/boot_id"),
                         0);
        dir = test_tree_path(f->tree, "p");
        assert_int_equal(root_open(dir, &fixture), 0);
        free(id);
        id = NULL;
        assert_int_equal(vmm_read_boot_id(fixture, &id, &error), 0);
        assert_string_equal(id, "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0");

        static const char *const bad[] = {"0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0\n",
                                          "0f1e2d3c4b5a697887960a5b4c3d2e1f0\n", "x\n", "\n"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                assert_int_equal(test_tree_put(f->tree, bad[i], "p/sys/kernel/random/boot_id"), 0);
                free(error);
                error = NULL;
                char *out = (char *)0x1;
                assert_int_equal(vmm_read_boot_id(fixture, &out, &error), -EBADMSG);
                assert_ptr_equal(out, (char *)0x1);
                _cleanup_free_ char *prefix = NULL;
                assert_int_equal(strprintf(&prefix,
                                           "read %s/sys/kernel/random/boot_id: invalid boot id \"",
                                           dir),
                                 0);
                assert_true(startswith(error, prefix));
        }

        assert_int_equal(unlinkat(fixture->fd, "sys/kernel/random/boot_id", 0), 0);
        free(error);
        error = NULL;
        assert_int_equal(vmm_read_boot_id(fixture, &id, &error), -ENOENT);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(
            strprintf(&want, "read %s/sys/kernel/random/boot_id: No such file or directory", dir),
            0);
        assert_string_equal(error, want);
}

static void expect_last_line(Fixture *f, const char *content, size_t size, const char *want)
{
        _cleanup_free_ char *line = NULL, *error = NULL;
        _cleanup_close_ int fd =
            openat(f->instance_fd, "qemu.log", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write_all(fd, content, size), 0);
        assert_int_equal(vmm_log_last_line(f->instance_fd, "qemu.log", &line, &error), 0);
        if (want)
                assert_string_equal(line, want);
        else
                assert_null(line);
}

#define EXPECT_LAST_LINE(f, literal, want) expect_last_line(f, literal, sizeof(literal) - 1, want)

static void test_log_last_line(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        _cleanup_free_ char *line = NULL, *error = NULL;

        /* Missing, empty, blank: no line. */
        assert_int_equal(vmm_log_last_line(f->instance_fd, "qemu.log", &line, &error), 0);
        assert_null(line);
        EXPECT_LAST_LINE(f, "", NULL);
        EXPECT_LAST_LINE(f, "\n\r\n  \n", NULL);

        EXPECT_LAST_LINE(f, "first\nqemu: could not open disk\n", "qemu: could not open disk");
        EXPECT_LAST_LINE(f, "first\nlast without newline", "last without newline");
        EXPECT_LAST_LINE(f, "first\nreason\r\n\n\n  \n", "reason");
        EXPECT_LAST_LINE(f, "only\n", "only");
        /* Control and high bytes are shown, not passed on. */
        EXPECT_LAST_LINE(f, "x\nbad \033[2J\xff end\n", "bad \\x1b[2J\\xff end");

        /* A long line keeps its end, at most 512 bytes. */
        _cleanup_free_ char *big = malloc(20000);
        assert_non_null(big);
        memset(big, 'a', 20000);
        memcpy(big + 20000 - 8, "THE END\n", 8);
        _cleanup_free_ char *want = malloc(VMM_LOG_LINE_MAX + 1);
        memset(want, 'a', VMM_LOG_LINE_MAX);
        memcpy(want + VMM_LOG_LINE_MAX - 7, "THE END", 7);
        want[VMM_LOG_LINE_MAX] = 0;
        expect_last_line(f, big, 20000, want);

        /* Escapes count against the 512 bytes too. */
        memset(big, '\001', 20000);
        big[19999] = '\n';
        _cleanup_free_ char *got = NULL;
        {
                _cleanup_close_ int fd =
                    openat(f->instance_fd, "qemu.log", O_WRONLY | O_TRUNC | O_CLOEXEC);
                assert_int_equal(write_all(fd, big, 20000), 0);
        }
        assert_int_equal(vmm_log_last_line(f->instance_fd, "qemu.log", &got, &error), 0);
        assert_int_equal(strlen(got), VMM_LOG_LINE_MAX);
        assert_true(startswith(got, "\\x01\\x01"));

        /* Not a regular file (INST-2a): a directory, and a FIFO or a link, at once. */
        assert_int_equal(test_mkdirs_at(f->instance_fd, "dir.log"), 0);
        assert_int_equal(vmm_log_last_line(f->instance_fd, "dir.log", &line, &error), -EISDIR);
        assert_string_equal(error, "read dir.log: Is a directory");
        assert_int_equal(mkfifoat(f->instance_fd, "fifo.log", 0600), 0);
        assert_int_equal(vmm_log_last_line(f->instance_fd, "fifo.log", &line, &error), -EBADFD);
        assert_string_equal(error, "read fifo.log: not a regular file");
        assert_int_equal(symlinkat("qemu.log", f->instance_fd, "link.log"), 0);
        assert_int_equal(vmm_log_last_line(f->instance_fd, "link.log", &line, &error), -EBADFD);
        assert_string_equal(error, "read link.log: not a regular file");
}

/* ---- the exit watch (VMM-4) ---------------------------------------------------------------- */

static void run_sh_vmm(Fixture *f, const char *script)
{
        VmmSpawned s;
        char *argv[] = {"/bin/sh", "-c", (char *)script, NULL};
        spawn(f, argv, &s);
        make_vmm(f, &s, (VmmOptions){0});
}

static void expect_reaped(Fixture *f)
{
        siginfo_t si = {0};
        /* The child source reaped it: nothing is left to wait for. */
        assert_int_equal(waitid(P_PIDFD, (id_t)f->pidfd, &si, WEXITED | WNOHANG), -1);
        assert_int_equal(errno, ECHILD);
}

static void test_child_exit_status(void **state) /* VMM-4 */
{
        Fixture *f = *state;
        run_sh_vmm(f, "exit 3");
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_true(vmm_has_exited(f->vmm));
        assert_true(f->exit.status_known);
        assert_int_equal(f->exit.code, 3);
        assert_int_equal(f->exit.signal, 0);
        assert_false(f->exit.killed_by_us);
        expect_reaped(f);

        /* Once only. */
        for (int i = 0; i < 5; i++)
                assert_true(sd_event_run(f->event, 10000) >= 0);
        assert_int_equal(f->n_exited, 1);
}

static void test_child_killed_by_signal(void **state) /* VMM-4, VMM-13 */
{
        Fixture *f = *state;
        run_sh_vmm(f, "kill -USR1 $$");
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_true(f->exit.status_known);
        assert_int_equal(f->exit.signal, SIGUSR1);
        assert_false(f->exit.killed_by_us);
        expect_reaped(f);
}

static void test_child_sigkill_not_ours(void **state) /* VMM-13 */
{
        Fixture *f = *state;
        run_sh_vmm(f, "exec sleep 1000");
        assert_false(vmm_has_exited(f->vmm));
        assert_int_equal(kill(f->pid, SIGKILL), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(f->exit.signal, SIGKILL);
        assert_false(f->exit.killed_by_us); /* the caller logs VMM-13's warning */
}

static void test_free_in_exited(void **state) /* vmm.h: the Vmm may be freed in a callback */
{
        Fixture *f = *state;
        f->free_in_exited = true;
        run_sh_vmm(f, "exit 0");
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_null(f->vmm);
        for (int i = 0; i < 5; i++)
                assert_true(sd_event_run(f->event, 10000) >= 0);
}

static void test_attach_twice(void **state)
{
        Fixture *f = *state;
        run_sh_vmm(f, "exit 0");
        assert_int_equal(vmm_attach_event(f->vmm, f->event), -EBUSY);
        VmmConfig bad = {.pid = 0, .pidfd = 3};
        Vmm *v = NULL;
        assert_int_equal(vmm_new(&bad, &v), -EINVAL);
        assert_null(v);
}

/*
 * A process that is not our child: forked by a child of ours that exits at once, so that it is
 * re-parented away from us. Returns its pid; it sleeps until killed.
 */
static pid_t spawn_grandchild(void)
{
        int p[2];
        assert_int_equal(pipe2(p, O_CLOEXEC), 0);
        pid_t child = fork();
        assert_true(child >= 0);
        if (child == 0) {
                pid_t grandchild = fork();
                if (grandchild == 0) {
                        sigset_t none;
                        sigemptyset(&none);
                        sigprocmask(SIG_SETMASK, &none, NULL);
                        execl("/bin/sleep", "sleep", "1000", (char *)NULL);
                        _exit(127);
                }
                (void)!write(p[1], &grandchild, sizeof(grandchild));
                _exit(0);
        }
        close(p[1]);
        pid_t grandchild = 0;
        assert_int_equal(read(p[0], &grandchild, sizeof(grandchild)), sizeof(grandchild));
        close(p[0]);
        int status;
        assert_int_equal(waitpid(child, &status, 0), child);
        assert_true(grandchild > 0);
        return grandchild;
}

static void adopt(Fixture *f, pid_t pid, VmmOptions o)
{
        _cleanup_free_ char *error = NULL;
        VmmLiveness l;
        char *boot_id = NULL;
        assert_int_equal(vmm_read_boot_id(f->proc, &boot_id, &error), 0);

        /* Its start_time as liveness would confirm it after a restart (VMM-4, VMM-16). */
        _cleanup_free_ char *path = NULL, *stat = NULL, *perr = NULL;
        size_t size;
        VmmProcStat st;
        assert_int_equal(strprintf(&path, "/proc/%d/stat", (int)pid), 0);
        assert_int_equal(read_file_at(AT_FDCWD, path, VMM_PROC_STAT_MAX, &stat, &size), 0);
        assert_int_equal(vmm_parse_proc_stat(stat, size, &st, &perr), 0);
        assert_int_not_equal(st.ppid, getpid());

        VmmLivenessQuery q = {
            .proc = f->proc,
            .boot_id = boot_id,
            .identity = {.pid = pid, .start_time = st.start_time, .boot_id = boot_id},
        };
        assert_int_equal(vmm_liveness_probe(&q, &l), 0);
        free(boot_id);
        assert_int_equal(l.verdict, VMM_ALIVE);
        VmmSpawned s = {.pid = pid, .pidfd = l.pidfd, .start_time = l.start_time};
        l.pidfd = -1;
        vmm_liveness_done(&l);
        f->pid = pid;
        f->pidfd = -1; /* not ours to reap */
        make_vmm(f, &s, o);
}

static void test_adopted_exit_status_unknown(void **state) /* VMM-4 */
{
        Fixture *f = *state;
        pid_t pid = spawn_grandchild();
        adopt(f, pid, (VmmOptions){.adopted = true});

        for (int i = 0; i < 5; i++)
                assert_true(sd_event_run(f->event, 10000) >= 0);
        assert_int_equal(f->n_exited, 0);

        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        assert_true(pidfd >= 0);
        assert_int_equal(syscall(SYS_pidfd_send_signal, pidfd, SIGTERM, NULL, 0), 0);
        close(pidfd);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_false(f->exit.status_known);
        assert_false(f->exit.killed_by_us);
        assert_true(vmm_has_exited(f->vmm));
}

static void test_adopted_terminate(void **state) /* VMM-4, VMM-10 */
{
        Fixture *f = *state;
        pid_t pid = spawn_grandchild();
        adopt(f, pid, (VmmOptions){.adopted = true});

        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(f->n_stop, 1);
        assert_int_equal(f->stop_r, 0);
        assert_true(f->stop_seq < f->exited_seq);
        assert_false(f->exit.status_known);
        assert_true(f->exit.killed_by_us);
}

/* ---- a QMP server of our own --------------------------------------------------------------- */

typedef struct Reply {
        const char *command;
        const char *text; /* sent as is: one or more lines, each ending "\r\n" */
} Reply;

typedef struct Server {
        int listen_fd;
        int stop[2];
        pthread_t thread;
        const Reply *replies;
        size_t n_replies;
        const char *big_reply_for;   /* a command answered with a line over 1 MiB */
        const char *before_greeting; /* lines sent before the greeting */
        bool hang_up;                /* close the first connection at once, without a greeting */
        int kill_after_hang_up;      /* a pidfd to SIGKILL once hung up; -1: none */
        pthread_mutex_t lock;
        char log[512]; /* the commands received, each followed by " " */
} Server;

#define GREETING "{\"QMP\": {\"version\": {}, \"capabilities\": []}}\r\n"

/* A line to the client, which may have hung up already: no SIGPIPE for the test. */
static void server_send(int fd, const char *text)
{
        for (size_t done = 0, n = strlen(text); done < n;) {
                ssize_t w = send(fd, text + done, n - done, MSG_NOSIGNAL);
                if (w <= 0)
                        return;
                done += (size_t)w;
        }
}

static void server_log(Server *s, const char *command)
{
        pthread_mutex_lock(&s->lock);
        size_t n = strlen(s->log);
        snprintf(s->log + n, sizeof(s->log) - n, "%s ", command);
        pthread_mutex_unlock(&s->lock);
}

static void server_answer(Server *s, int fd, const char *line)
{
        json_error_t err;
        json_auto_t *req = json_loads(line, 0, &err);
        const char *command = json_string_value(json_object_get(req, "execute"));
        if (!command)
                command = "(invalid)";
        server_log(s, command);

        if (s->big_reply_for && streq(command, s->big_reply_for)) {
                size_t n = VMM_QMP_LINE_MAX + 100;
                char *big = malloc(n + 3);
                if (!big)
                        return;
                memset(big, ' ', n);
                memcpy(big + n, "\r\n", 3);
                server_send(fd, big); /* vgpud hangs up part-way through */
                free(big);
                return;
        }
        const char *text = "{\"return\": {}}\r\n";
        for (size_t i = 0; i < s->n_replies; i++)
                if (streq(s->replies[i].command, command))
                        text = s->replies[i].text;
        server_send(fd, text);
}

static void *server_main(void *userdata)
{
        Server *s = userdata;
        struct pollfd p[2] = {{.fd = s->listen_fd, .events = POLLIN},
                              {.fd = s->stop[0], .events = POLLIN}};
        if (poll(p, 2, 30000) <= 0 || p[1].revents)
                return NULL;
        int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
                return NULL;
        if (s->hang_up) {
                close(fd);
                if (s->kill_after_hang_up >= 0)
                        (void)syscall(SYS_pidfd_send_signal, s->kill_after_hang_up, SIGKILL, NULL,
                                      0);
                return NULL;
        }
        if (s->before_greeting)
                server_send(fd, s->before_greeting);
        server_send(fd, GREETING);

        char buf[4096];
        size_t len = 0;
        for (;;) {
                p[0] = (struct pollfd){.fd = fd, .events = POLLIN};
                if (poll(p, 2, 30000) <= 0 || p[1].revents)
                        break;
                ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
                if (n <= 0)
                        break;
                len += (size_t)n;
                char *nl;
                while ((nl = memchr(buf, '\n', len))) {
                        *nl = 0;
                        server_answer(s, fd, buf);
                        len -= (size_t)(nl + 1 - buf);
                        memmove(buf, nl + 1, len);
                }
        }
        close(fd);
        return NULL;
}

static void server_start_as(Fixture *f, Server *s, Server options)
{
        *s = options;
        pthread_mutex_init(&s->lock, NULL);
        assert_int_equal(pipe2(s->stop, O_CLOEXEC), 0);
        s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(s->listen_fd >= 0);
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        strcpy(sa.sun_path, f->qmp);
        assert_int_equal(bind(s->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        assert_int_equal(listen(s->listen_fd, 4), 0);
        assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
}

static void server_start(Fixture *f, Server *s, const Reply *replies, size_t n)
{
        server_start_as(f, s,
                        (Server){.replies = replies, .n_replies = n, .kill_after_hang_up = -1});
}

static void server_stop(Server *s)
{
        (void)!write(s->stop[1], "x", 1);
        pthread_join(s->thread, NULL);
        close(s->listen_fd);
        close(s->stop[0]);
        close(s->stop[1]);
        pthread_mutex_destroy(&s->lock);
}

/* A sleeping child stands for QEMU; the server speaks for it. */
static void ready_against_server_as(Fixture *f, Server *s, Server options, bool query_kvm)
{
        VmmSpawned sp;
        server_start_as(f, s, options);
        spawn_sleep(f, &sp);
        make_vmm(f, &sp, (VmmOptions){0});
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, query_kvm, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
}

static void ready_against_server(Fixture *f, Server *s, const Reply *replies, size_t n,
                                 bool query_kvm)
{
        ready_against_server_as(
            f, s, (Server){.replies = replies, .n_replies = n, .kill_after_hang_up = -1},
            query_kvm);
}

/* ---- readiness (VMM-5, VMM-6, VMM-20) ------------------------------------------------------ */

static void test_ready_fake_qemu(void **state) /* VMM-5, VMM-20 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_fake_qemu(f, NULL, &s);
        make_vmm(f, &s, (VmmOptions){0});

        /* done never runs inside the call. */
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), 0);
        assert_int_equal(f->n_ready, 0);
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), -EBUSY);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        assert_int_equal(f->ready_r, 0);
        assert_null(f->ready_error);

        _cleanup_free_ char *console = read_text(f->console);
        const char *caps = strstr(console, "fake-qemu: qmp command qmp_capabilities\n");
        const char *status = strstr(console, "fake-qemu: qmp command query-status\n");
        assert_non_null(caps);
        assert_non_null(status);
        assert_true(caps < status);

        /* The session is closed after readiness: a second one is served. */
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 2);
        assert_int_equal(f->ready_r, 0);
}

static void test_ready_query_kvm_error_reply(void **state) /* VMM-5, VMM-6 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_fake_qemu(f, NULL, &s);
        make_vmm(f, &s, (VmmOptions){0});
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, true, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        assert_true(f->ready_r < 0);
        /* fake-qemu knows no query-kvm: QEMU's error object, mapped. */
        assert_string_equal(f->ready_error,
                            "qmp query-kvm: CommandNotFound: The command query-kvm has not been "
                            "found");
}

static void test_ready_query_kvm(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        Server s;
        static const Reply on[] = {
            {"query-status", "{\"return\": {\"status\": \"running\", \"running\": true}}\r\n"},
            {"query-kvm", "{\"return\": {\"enabled\": true, \"present\": true}}\r\n"},
        };
        ready_against_server(f, &s, on, ELEMENTSOF(on), true);
        server_stop(&s);
        assert_int_equal(f->ready_r, 1);
        assert_string_equal(s.log, "qmp_capabilities query-status query-kvm ");
}

static void test_ready_kvm_disabled(void **state) /* VMM-5 (TCG fallback) */
{
        Fixture *f = *state;
        Server s;
        static const Reply off[] = {
            {"query-status", "{\"return\": {\"status\": \"running\", \"running\": true}}\r\n"},
            {"query-kvm", "{\"return\": {\"enabled\": false, \"present\": true}}\r\n"},
        };
        ready_against_server(f, &s, off, ELEMENTSOF(off), true);
        server_stop(&s);
        assert_int_equal(f->ready_r, 0);
}

static void test_ready_events_before_replies(void **state) /* VMM-6 */
{
        Fixture *f = *state;
        Server s;
        static const Reply replies[] = {
            {"qmp_capabilities",
             "{\"event\": \"RESUME\", \"timestamp\": {\"seconds\": 1, \"microseconds\": 2}}\r\n"
             "{\"return\": {}}\r\n"},
            {"query-status", "{\"event\": \"NIC_RX_FILTER_CHANGED\", \"data\": {\"path\": \"/x\"}, "
                             "\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}}\r\n"
                             "{\"event\": \"RTC_CHANGE\", \"data\": {\"offset\": 0}, "
                             "\"timestamp\": {\"seconds\": 1, \"microseconds\": 3}}\r\n"
                             "{\"return\": {\"status\": \"running\", \"running\": true}}\r\n"},
        };
        ready_against_server(f, &s, replies, ELEMENTSOF(replies), false);
        server_stop(&s);
        if (f->ready_r < 0)
                fail_msg("%s", f->ready_error);
        assert_int_equal(f->ready_r, 0);
}

#define VSERPORT_EVENT                                                                            \
        "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": \"VSERPORT_CHANGE\", " \
        "\"data\": {\"open\": true, \"id\": \"agent0\"}}\r\n"

static void test_ready_event_before_greeting(void **state) /* VMM-5, VMM-6 */
{
        Fixture *f = *state;
        Server s;
        static const Reply running[] = {
            {"query-status", "{\"return\": {\"status\": \"running\", \"running\": true}}\r\n"},
        };
        /* As QEMU does when the guest opens the agent's port while vgpud connects. */
        ready_against_server_as(f, &s,
                                (Server){.before_greeting = VSERPORT_EVENT,
                                         .replies = running,
                                         .n_replies = ELEMENTSOF(running),
                                         .kill_after_hang_up = -1},
                                false);
        server_stop(&s);
        if (f->ready_r < 0)
                fail_msg("%s", f->ready_error);
        assert_string_equal(s.log, "qmp_capabilities query-status ");
}

static void test_ready_reply_before_greeting(void **state) /* VMM-5, VMM-6 */
{
        Fixture *f = *state;
        Server s;
        /* A reply answers a command, and none was sent: this peer does not speak QMP. */
        ready_against_server_as(f, &s,
                                (Server){.before_greeting = VSERPORT_EVENT "{\"return\": {}}\r\n",
                                         .kill_after_hang_up = -1},
                                false);
        server_stop(&s);
        assert_int_equal(f->ready_r, -EBADMSG);
        assert_string_equal(f->ready_error, "QMP greeting: the first message is not one");
        assert_string_equal(s.log, "");
}

static void test_ready_error_reply(void **state) /* VMM-6 */
{
        Fixture *f = *state;
        Server s;
        static const Reply replies[] = {
            {"query-status",
             "{\"error\": {\"class\": \"GenericError\", \"desc\": \"monitor is busy\"}}\r\n"},
        };
        ready_against_server(f, &s, replies, ELEMENTSOF(replies), false);
        server_stop(&s);
        assert_int_equal(f->ready_r, -EREMOTEIO);
        assert_string_equal(f->ready_error, "qmp query-status: GenericError: monitor is busy");
}

static void test_ready_capabilities_refused(void **state) /* VMM-5, VMM-6 */
{
        Fixture *f = *state;
        Server s;
        static const Reply replies[] = {
            {"qmp_capabilities", "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": "
                                 "\"nope\"}}\r\n"},
        };
        ready_against_server(f, &s, replies, ELEMENTSOF(replies), false);
        server_stop(&s);
        assert_string_equal(f->ready_error, "qmp qmp_capabilities: CommandNotFound: nope");
}

static void test_ready_not_running(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        Server s;
        static const Reply replies[] = {
            {"query-status", "{\"return\": {\"status\": \"paused\", \"running\": false}}\r\n"},
        };
        ready_against_server(f, &s, replies, ELEMENTSOF(replies), false);
        server_stop(&s);
        assert_true(f->ready_r < 0);
        assert_string_equal(f->ready_error,
                            "qmp query-status: status is \"paused\", not \"running\"");
}

static void test_ready_malformed_reply(void **state) /* VMM-6, GEN-5 */
{
        Fixture *f = *state;
        Server s;
        static const Reply replies[] = {
            {"query-status", "{\"return\": {}, \"return\": {}}\r\n"},
        };
        ready_against_server(f, &s, replies, ELEMENTSOF(replies), false);
        server_stop(&s);
        assert_int_equal(f->ready_r, -EBADMSG);
        assert_true(startswith(f->ready_error, "qmp query-status: "));
}

static void test_ready_overlong_line(void **state) /* VMM-6, GEN-5 */
{
        Fixture *f = *state;
        Server s;
        VmmSpawned sp;
        server_start(f, &s, NULL, 0);
        s.big_reply_for = "query-status";
        spawn_sleep(f, &sp);
        make_vmm(f, &sp, (VmmOptions){0});
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        server_stop(&s);
        assert_int_equal(f->ready_r, -E2BIG);
        assert_string_equal(f->ready_error, "qmp query-status: line longer than 1048576 bytes");
}

static void test_ready_reply_timeout(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        Server s;
        static const Reply replies[] = {{"query-status", ""}}; /* never answered */
        nsec_t start = test_now();
        ready_against_server(f, &s, replies, ELEMENTSOF(replies), false);
        server_stop(&s);
        assert_true(test_now() - start >= VMM_QMP_COMMAND_TIMEOUT);
        assert_int_equal(f->ready_r, -ETIMEDOUT);
        assert_string_equal(f->ready_error, "qmp query-status: no reply within 5s");
}

typedef struct Replies {
        int n;
        char names[4][64];
        int r[4];
} Replies;

static void on_qmp_ready(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        int *ready = userdata;
        *ready = r < 0 ? r : 1;
}

static void on_qmp_reply(VmmQmp *q, int r, json_t *value, const char *error, void *userdata)
{
        Replies *rs = userdata;
        const char *name = r < 0 ? error : json_string_value(json_object_get(value, "name"));
        if (rs->n < 4) {
                snprintf(rs->names[rs->n], sizeof(rs->names[0]), "%s", name ? name : "?");
                rs->r[rs->n] = r;
        }
        rs->n++;
}

static void test_qmp_replies_in_order(void **state) /* VMM-6 */
{
        Fixture *f = *state;
        Server s;
        /* Each reply names its command; events come before, between and after. */
        static const Reply replies[] = {
            {"first", "{\"event\": \"A\", \"timestamp\": {\"seconds\": 1, \"microseconds\": "
                      "0}}\r\n{\"return\": {\"name\": \"first\"}}\r\n"},
            {"second", "{\"error\": {\"class\": \"GenericError\", \"desc\": \"refused\"}}\r\n"},
            {"third", "{\"return\": {\"name\": \"third\"}}\r\n{\"event\": \"B\", "
                      "\"timestamp\": {\"seconds\": 1, \"microseconds\": 0}}\r\n"},
            {"fourth", ""}, /* never answered */
        };
        server_start(f, &s, replies, ELEMENTSOF(replies));

        int ready = 0;
        Replies rs = {0};
        _cleanup_(vmm_qmp_freep) VmmQmp *q = NULL;
        assert_int_equal(vmm_qmp_connect(f->event, f->qmp, SHORT_WAIT, on_qmp_ready, &ready, &q),
                         0);
        assert_int_equal(vmm_qmp_execute(q, "first", on_qmp_reply, &rs), -ENOTCONN);
        TEST_WAIT_UNTIL(f->event, ready != 0);
        assert_int_equal(ready, 1);
        assert_true(vmm_qmp_is_alive(q));

        /* Three queued at once, answered in order. */
        assert_int_equal(vmm_qmp_execute(q, "first", on_qmp_reply, &rs), 0);
        assert_int_equal(vmm_qmp_execute(q, "second", on_qmp_reply, &rs), 0);
        assert_int_equal(vmm_qmp_execute(q, "third", on_qmp_reply, &rs), 0);
        assert_int_equal(rs.n, 0);
        TEST_WAIT_UNTIL(f->event, rs.n == 3);
        assert_string_equal(rs.names[0], "first");
        assert_int_equal(rs.r[0], 0);
        assert_string_equal(rs.names[1], "qmp second: GenericError: refused");
        assert_int_equal(rs.r[1], -EREMOTEIO);
        assert_string_equal(rs.names[2], "third");

        /* The peer goes: what is queued hears it, and the session is dead. */
        assert_int_equal(vmm_qmp_execute(q, "fourth", on_qmp_reply, &rs), 0);
        server_stop(&s);
        TEST_WAIT_UNTIL(f->event, rs.n == 4);
        assert_string_equal(rs.names[3], "qmp fourth: connection closed");
        assert_int_equal(rs.r[3], -ECONNRESET);
        assert_false(vmm_qmp_is_alive(q));
        assert_int_equal(vmm_qmp_execute(q, "fifth", on_qmp_reply, &rs), -ENOTCONN);
}

static void test_qmp_single_attempt(void **state) /* VMM-9: no retries for a stop */
{
        Fixture *f = *state;
        int ready = 0;
        _cleanup_(vmm_qmp_freep) VmmQmp *q = NULL;
        assert_int_equal(vmm_qmp_connect(f->event, f->qmp, 0, on_qmp_ready, &ready, &q), 0);
        assert_int_equal(ready, 0);
        TEST_WAIT_UNTIL(f->event, ready != 0);
        assert_int_equal(ready, -ENOENT);
}

static void test_ready_not_before_deadline(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_sleep(f, &s); /* never listens */
        make_vmm(f, &s, (VmmOptions){0});
        nsec_t start = test_now();
        assert_int_equal(vmm_wait_ready(f->vmm, 300 * NSEC_PER_MSEC, false, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        assert_true(test_now() - start >= 300 * NSEC_PER_MSEC);
        assert_int_equal(f->ready_r, -ETIMEDOUT);
        assert_string_equal(f->ready_error, "QMP not ready after 300ms");
}

static void test_ready_socket_appears_late(void **state) /* VMM-5: retried every 50 ms */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_sleep(f, &s);
        make_vmm(f, &s, (VmmOptions){0});
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), 0);
        /* Several attempts fail before the server listens. */
        TestWait w = test_wait_begin(f->event, 200 * NSEC_PER_MSEC);
        while (test_wait_step(&w) == 0)
                ;
        assert_int_equal(f->n_ready, 0);
        Server srv;
        static const Reply replies[] = {
            {"query-status", "{\"return\": {\"status\": \"running\", \"running\": true}}\r\n"},
        };
        server_start(f, &srv, replies, ELEMENTSOF(replies));
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        server_stop(&srv);
        assert_int_equal(f->ready_r, 0);
}

static void test_ready_greeting_timeout(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_fake_qemu(f, "hang-qmp\n", &s);
        make_vmm(f, &s, (VmmOptions){0});
        nsec_t start = test_now();
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        assert_true(test_now() - start >= VMM_QMP_GREETING_TIMEOUT);
        assert_int_equal(f->ready_r, -ETIMEDOUT);
        assert_string_equal(f->ready_error, "QMP greeting not received within 5s");
}

static void test_ready_exit_before_ready(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_fake_qemu(f, "exit-early:0\n", &s);
        make_vmm(f, &s, (VmmOptions){0});
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1 && f->n_exited == 1);
        assert_int_equal(f->ready_r, -ESRCH);
        assert_string_equal(f->ready_error, "qemu exited with status 1 before QMP was ready");
        assert_true(f->ready_seq < f->exited_seq);

        /* Asked again after the exit: the same answer, from the loop. */
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), 0);
        assert_int_equal(f->n_ready, 1);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 2);
        assert_string_equal(f->ready_error, "qemu exited with status 1 before QMP was ready");
}

static void test_ready_hang_up_then_exit(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        Server srv;
        VmmSpawned s;
        spawn_sleep(f, &s);
        /* As a QEMU failing at start-up: its sockets close first, then it exits. */
        server_start_as(f, &srv, (Server){.hang_up = true, .kill_after_hang_up = f->pidfd});
        make_vmm(f, &s, (VmmOptions){0});
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        server_stop(&srv);
        assert_string_equal(f->ready_error,
                            "qemu was killed by signal SIGKILL before QMP was ready");
}

static void test_ready_hang_up(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        Server srv;
        VmmSpawned s;
        spawn_sleep(f, &s);
        server_start_as(f, &srv, (Server){.hang_up = true, .kill_after_hang_up = -1});
        make_vmm(f, &s, (VmmOptions){0});
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        server_stop(&srv);
        /* No exit follows: the hang-up itself is the failure. */
        assert_int_equal(f->ready_r, -ECONNRESET);
        assert_string_equal(f->ready_error, "QMP connection closed before the greeting");
        assert_int_equal(f->n_exited, 0);
}

static void test_ready_killed_before_ready(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_sleep(f, &s);
        make_vmm(f, &s, (VmmOptions){0});
        assert_int_equal(vmm_wait_ready(f->vmm, 10 * NSEC_PER_SEC, false, on_ready, f), 0);
        assert_int_equal(kill(f->pid, SIGKILL), 0);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        assert_string_equal(f->ready_error,
                            "qemu was killed by signal SIGKILL before QMP was ready");
}

static void test_ready_adopted_exits(void **state) /* VMM-5 */
{
        Fixture *f = *state;
        pid_t pid = spawn_grandchild();
        adopt(f, pid, (VmmOptions){.adopted = true});
        assert_int_equal(vmm_wait_ready(f->vmm, 10 * NSEC_PER_SEC, false, on_ready, f), 0);
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        assert_true(pidfd >= 0);
        assert_int_equal(syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0), 0);
        close(pidfd);
        TEST_WAIT_UNTIL(f->event, f->n_ready == 1);
        assert_string_equal(f->ready_error, "qemu exited before QMP was ready");
}

static void test_ready_cancelled_by_stop(void **state) /* vmm.h: a stop cancels readiness */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_sleep(f, &s);
        make_vmm(f, &s, (VmmOptions){0});
        assert_int_equal(vmm_wait_ready(f->vmm, 10 * NSEC_PER_SEC, false, on_ready, f), 0);
        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), 0);
        assert_int_equal(f->n_ready, 0);
        assert_int_equal(vmm_wait_ready(f->vmm, SHORT_WAIT, false, on_ready, f), -EBUSY);
        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), -EBUSY);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(f->ready_r, -ECANCELED);
        assert_int_equal(f->stop_r, 0);
        assert_true(f->ready_seq < f->stop_seq);
        assert_true(f->stop_seq < f->exited_seq);
}

/* ---- stop (VMM-9) -------------------------------------------------------------------------- */

static void test_stop_graceful(void **state) /* VMM-9, VMM-20 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_fake_qemu(f, NULL, &s);
        make_vmm(f, &s,
                 (VmmOptions){
                     .has_vfio = true, .term_grace = SHORT_WAIT, .init_window = 60 * NSEC_PER_SEC});
        wait_ready_ok(f, false);

        assert_int_equal(vmm_stop(f->vmm, 10 * NSEC_PER_SEC, on_stop, f), 0);
        assert_int_equal(vmm_stop(f->vmm, 10 * NSEC_PER_SEC, on_stop, f), -EBUSY);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(f->n_stop, 1);
        assert_int_equal(f->stop_r, 0);
        assert_true(f->stop_seq < f->exited_seq);
        assert_true(f->exit.status_known);
        assert_int_equal(f->exit.code, 0);
        assert_false(f->exit.killed_by_us);
        assert_int_equal(f->n_kills, 0);
        assert_true(console_has(f, "fake-qemu: qmp command system_powerdown\n"));
        assert_true(console_has(f, "reason=system_powerdown"));
        assert_false(console_has(f, "signal SIGTERM"));
}

static void test_stop_quit_then_ladder(void **state) /* VMM-9, VMM-10 */
{
        Fixture *f = *state;
        Server srv;
        VmmSpawned s;
        server_start(f, &srv, NULL, 0); /* accepts everything, and the sleeper never exits */
        spawn_sleep(f, &s);
        make_vmm(f, &s, (VmmOptions){0});

        nsec_t start = test_now();
        assert_int_equal(vmm_stop(f->vmm, 200 * NSEC_PER_MSEC, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        nsec_t took = test_now() - start;
        server_stop(&srv);
        assert_string_equal(srv.log, "qmp_capabilities system_powerdown quit ");
        /* quit waits its 5 s before the ladder. */
        assert_true(took >= 200 * NSEC_PER_MSEC + VMM_QUIT_TIMEOUT);
        assert_int_equal(f->stop_r, 0);
        assert_int_equal(f->exit.signal, SIGKILL);
        assert_true(f->exit.killed_by_us);
}

static void test_stop_powerdown_refused_quits(void **state) /* VMM-9 */
{
        Fixture *f = *state;
        Server srv;
        VmmSpawned s;
        static const Reply replies[] = {
            {"system_powerdown",
             "{\"error\": {\"class\": \"GenericError\", \"desc\": \"no\"}}\r\n"},
        };
        server_start(f, &srv, replies, ELEMENTSOF(replies));
        spawn_sleep(f, &s);
        make_vmm(f, &s, (VmmOptions){0});
        assert_int_equal(vmm_stop(f->vmm, 30 * NSEC_PER_SEC, on_stop, f), 0);
        /* Not the 30 s: quit follows the refusal at once. */
        TestWait w = test_wait_begin(f->event, 2 * NSEC_PER_SEC);
        for (;;) {
                pthread_mutex_lock(&srv.lock);
                bool quit = strstr(srv.log, "quit ") != NULL;
                pthread_mutex_unlock(&srv.lock);
                if (quit)
                        break;
                if (test_wait_step(&w) < 0)
                        fail_msg("no quit after a refused system_powerdown");
        }
        assert_int_equal(kill(f->pid, SIGTERM), 0);
        TEST_WAIT_UNTIL(f->event, f->n_stop == 1);
        server_stop(&srv);
        assert_string_equal(srv.log, "qmp_capabilities system_powerdown quit ");
        assert_int_equal(f->stop_r, 0);
}

static void test_stop_unreachable_qmp(void **state) /* VMM-9 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_sleep(f, &s); /* no socket at all */
        make_vmm(f, &s, (VmmOptions){0});
        nsec_t start = test_now();
        assert_int_equal(vmm_stop(f->vmm, 30 * NSEC_PER_SEC, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        /* Straight to the ladder: no 50 ms retries, no graceful wait. */
        assert_true(test_now() - start < 2 * NSEC_PER_SEC);
        assert_int_equal(f->stop_r, 0);
        assert_int_equal(f->exit.signal, SIGKILL);
        assert_true(f->exit.killed_by_us);
        assert_int_equal(f->n_kills, 0); /* no VFIO: no forced-kill warning */
        /* VMM-16: every signal is told, with why, VFIO or not. */
        assert_string_equal(f->signals, "SIGKILL: QMP unreachable;");
}

static void test_stop_after_exit(void **state) /* vmm.h: an exited process completes later */
{
        Fixture *f = *state;
        run_sh_vmm(f, "exit 0");
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(vmm_stop(f->vmm, 10 * NSEC_PER_SEC, on_stop, f), 0);
        assert_int_equal(f->n_stop, 0);
        TEST_WAIT_UNTIL(f->event, f->n_stop == 1);
        assert_int_equal(f->stop_r, 0);
        assert_int_equal(f->n_exited, 1);
}

/* ---- the ladder (VMM-10, VMM-11, VMM-12, VMM-13) -------------------------------------------- */

static void test_ladder_sigterm_ignored(void **state) /* VMM-10, VMM-12, VMM-13 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_fake_qemu(f, "ignore-sigterm\n", &s);
        make_vmm(f, &s,
                 (VmmOptions){.has_vfio = true,
                              .term_grace = 300 * NSEC_PER_MSEC,
                              .init_window = 60 * NSEC_PER_SEC});
        wait_ready_ok(f, false);

        nsec_t start = test_now();
        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_true(test_now() - start >= 300 * NSEC_PER_MSEC);

        _cleanup_free_ char *want = NULL;
        assert_int_equal(
            strprintf(&want, "fake-qemu: signal SIGTERM pid=%d action=ignore\n", (int)getpid()), 0);
        assert_true(console_has(f, want));
        assert_int_equal(f->stop_r, 0);
        assert_true(f->stop_seq < f->exited_seq);
        assert_int_equal(f->exit.signal, SIGKILL);
        assert_true(f->exit.killed_by_us);
        assert_int_equal(f->n_kills, 1);
        assert_true(f->in_grace[0]);
        assert_string_equal(f->signals, "SIGTERM: termination requested;"
                                        "SIGKILL: no exit within gpu.vfio_term_grace of SIGTERM;");
}

static void test_ladder_sigterm_honoured(void **state) /* VMM-10 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_fake_qemu(f, NULL, &s);
        make_vmm(f, &s,
                 (VmmOptions){.has_vfio = true,
                              .term_grace = 10 * NSEC_PER_SEC,
                              .init_window = 60 * NSEC_PER_SEC});
        wait_ready_ok(f, false);
        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(f->exit.code, 0);
        assert_int_equal(f->exit.signal, 0);
        assert_false(f->exit.killed_by_us);
        assert_int_equal(f->n_kills, 0);
        assert_true(console_has(f, "reason=SIGTERM"));
}

static void test_ladder_no_vfio_starts_at_sigkill(void **state) /* VMM-10 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_fake_qemu(f, NULL, &s);
        make_vmm(f, &s, (VmmOptions){.has_vfio = false, .term_grace = 10 * NSEC_PER_SEC});
        wait_ready_ok(f, false);
        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(f->exit.signal, SIGKILL);
        assert_true(f->exit.killed_by_us);
        assert_int_equal(f->n_kills, 0);
        assert_false(console_has(f, "signal SIGTERM"));
}

static void test_ladder_outside_init_window(void **state) /* VMM-13 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_fake_qemu(f, "ignore-sigterm\n", &s);
        make_vmm(f, &s, (VmmOptions){.has_vfio = true, .term_grace = 0, .init_window = 0});
        assert_false(vmm_in_init_window(f->vmm));
        wait_ready_ok(f, false);
        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(f->n_kills, 1);
        assert_false(f->in_grace[0]);
}

/* Polls until pid runs the program named comm (after an exec), bounded. */
static void wait_comm(pid_t pid, const char *comm)
{
        _cleanup_free_ char *path = NULL, *want = NULL;
        assert_int_equal(strprintf(&path, "/proc/%d/comm", (int)pid), 0);
        assert_int_equal(strprintf(&want, "%s\n", comm), 0);
        for (nsec_t deadline = test_now() + SHORT_WAIT;;) {
                _cleanup_free_ char *text = NULL;
                if (test_read_file(path, &text) >= 0 && streq(text, want))
                        return;
                if (test_now() > deadline)
                        fail_msg("pid %d does not run %s", (int)pid, comm);
                usleep(1000);
        }
}

static void test_ladder_fails_after_sigkill(void **state) /* VMM-10, VMM-11, VMM-12 */
{
        Fixture *f = *state;
        VmmSpawned s;
        /* Ignores SIGTERM; SIGKILL is made to vanish below. */
        char *argv[] = {"/bin/sh", "-c", "trap '' TERM; exec sleep 1000", NULL};
        spawn(f, argv, &s);
        wait_comm(s.pid, "sleep"); /* the trap is set */
        make_vmm(f, &s,
                 (VmmOptions){.has_vfio = true,
                              .term_grace = 100 * NSEC_PER_MSEC,
                              .init_window = 60 * NSEC_PER_SEC});

        swallow_sigkill = true;
        swallowed_sigkills = 0;
        nsec_t start = test_now();
        assert_int_equal(vmm_terminate(f->vmm, on_stop, f), 0);
        TEST_WAIT_UNTIL(f->event, f->n_stop == 1);
        swallow_sigkill = false;

        nsec_t took = test_now() - start;
        if (took < 100 * NSEC_PER_MSEC + 2 * VMM_KILL_WAIT)
                fail_msg("gave up after %" PRIu64 " ms: %s, %d SIGKILLs", took / NSEC_PER_MSEC,
                         f->stop_error, (int)swallowed_sigkills);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(
            strprintf(&want, "hypervisor pid %d did not exit after SIGKILL", (int)f->pid), 0);
        assert_int_equal(f->stop_r, -ETIMEDOUT);
        assert_string_equal(f->stop_error, want);
        /* The process and then its group: two SIGKILLs, each a forced kill (VMM-12). */
        assert_int_equal(swallowed_sigkills, 2);
        assert_string_equal(f->signals, "SIGTERM: termination requested;"
                                        "SIGKILL: no exit within gpu.vfio_term_grace of SIGTERM;"
                                        "SIGKILL group: no exit within 2s of SIGKILL;");
        assert_int_equal(f->n_kills, 2);
        assert_true(f->in_grace[0] && f->in_grace[1]);
        assert_int_equal(f->n_exited, 0);
        assert_false(vmm_has_exited(f->vmm));

        /* Still watched: a later exit is reported. */
        assert_int_equal(syscall(SYS_pidfd_send_signal, f->pidfd, SIGKILL, NULL, 0), 0);
        TEST_WAIT_UNTIL(f->event, f->n_exited == 1);
        assert_int_equal(f->exit.signal, SIGKILL);
}

static void test_in_init_window(void **state) /* VMM-13 */
{
        Fixture *f = *state;
        VmmSpawned s;
        spawn_sleep(f, &s);
        make_vmm(f, &s, (VmmOptions){.has_vfio = true, .init_window = 60 * NSEC_PER_SEC});
        assert_true(vmm_in_init_window(f->vmm));
        f->vmm = vmm_free(f->vmm);

        /* Started at boot: long out of any window. */
        VmmSpawned old = s;
        old.pidfd = fcntl(f->pidfd, F_DUPFD_CLOEXEC, 3);
        old.start_time = 0;
        struct timespec ts;
        clock_gettime(CLOCK_BOOTTIME, &ts);
        make_vmm(
            f, &old,
            (VmmOptions){.has_vfio = true, .init_window = ((nsec_t)ts.tv_sec - 2) * NSEC_PER_SEC});
        assert_false(vmm_in_init_window(f->vmm));
}

/* ---- liveness (VMM-16, VMM-17, VMM-18, VMM-19) ---------------------------------------------- */

static void probe(VmmLivenessQuery *q, VmmLiveness *ret)
{
        assert_int_equal(vmm_liveness_probe(q, ret), 0);
        assert_non_null(ret->reason);
}

static char *boot_id(Fixture *f)
{
        char *id = NULL, *error = NULL;
        assert_int_equal(vmm_read_boot_id(f->proc, &id, &error), 0);
        return id;
}

static void test_liveness_stored_pid_alive(void **state) /* VMM-16 */
{
        Fixture *f = *state;
        VmmSpawned s;
        VmmLiveness l;
        _cleanup_free_ char *id = boot_id(f);
        spawn_sleep(f, &s);
        close(s.pidfd);

        VmmLivenessQuery q = {
            .proc = f->proc,
            .boot_id = id,
            .qemu_binary = "/bin/sleep",
            .identity = {.pid = s.pid,
                         .start_time = s.start_time,
                         .boot_id = id,
                         .qmp_socket = f->qmp},
        };
        probe(&q, &l);
        if (l.verdict != VMM_ALIVE)
                fail_msg("%s: %s", vmm_verdict_to_string(l.verdict), l.reason);
        assert_int_equal(l.pid, s.pid);
        assert_true(l.start_time == s.start_time);
        assert_false(l.zombie);
        assert_true(l.pidfd >= 0);
        assert_int_equal(syscall(SYS_pidfd_send_signal, l.pidfd, 0, NULL, 0), 0);
        assert_string_equal(vmm_verdict_to_string(l.verdict), "alive");
        vmm_liveness_done(&l);
        assert_int_equal(l.pidfd, -1);
}

/*
 * VMM-16 (revised): a record naming an unrelated process with its true start time names no VMM
 * of ours: its executable is not qemu_binary, so the pid is discarded, never adopted or killed.
 */
static void test_liveness_other_executable(void **state)
{
        Fixture *f = *state;
        VmmSpawned s;
        VmmLiveness l;
        _cleanup_free_ char *id = boot_id(f);
        if (!f->fake_qemu)
                fail_msg("FAKE_QEMU is not set (tests/unit/meson.build sets it)");
        spawn_sleep(f, &s);
        close(s.pidfd);

        VmmLivenessQuery q = {
            .proc = f->proc,
            .boot_id = id,
            .qemu_binary = f->fake_qemu,
            .identity = {.pid = s.pid,
                         .start_time = s.start_time,
                         .boot_id = id,
                         .qmp_socket = f->qmp},
        };
        probe(&q, &l);
        if (l.verdict != VMM_GONE)
                fail_msg("%s: %s", vmm_verdict_to_string(l.verdict), l.reason);
        assert_int_equal(l.pidfd, -1);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want, "pid %d is another program (", (int)s.pid), 0);
        assert_non_null(strstr(l.reason, want));
        assert_non_null(strstr(l.reason, "nothing listens on"));
        vmm_liveness_done(&l);
        /* And the process was not touched. */
        assert_int_equal(syscall(SYS_pidfd_send_signal, f->pidfd, 0, NULL, 0), 0);
}

/*
 * VMM-16: a VMM whose executable was replaced since it started (a QEMU package upgrade) runs
 * the former file, "<qemu_binary> (deleted)": that may be ours, so the verdict is ambiguous,
 * neither gone (which would release its VF) nor alive.
 */
static void test_liveness_replaced_binary(void **state)
{
        Fixture *f = *state;
        VmmSpawned s;
        VmmLiveness l;
        _cleanup_free_ char *id = boot_id(f);
        char *text = NULL;
        size_t size;
        assert_int_equal(read_file_at(AT_FDCWD, "/bin/sleep", 64 * 1024 * 1024, &text, &size), 0);
        _cleanup_free_ char *bytes = text;
        _cleanup_free_ char *qemu = test_tree_path(f->tree, "qemu"),
                            *next = test_tree_path(f->tree, "qemu.new");
        for (int i = 0; i < 2; i++) {
                _cleanup_close_ int fd =
                    open(i == 0 ? qemu : next, O_WRONLY | O_CREAT | O_CLOEXEC, 0755);
                assert_true(fd >= 0);
                assert_int_equal(write_all(fd, bytes, size), 0);
        }
        char *argv[] = {qemu, "1000", NULL};
        spawn(f, argv, &s);
        close(s.pidfd);
        wait_comm(s.pid, "qemu");
        assert_int_equal(rename(next, qemu), 0); /* the upgrade */

        VmmLivenessQuery q = {
            .proc = f->proc,
            .boot_id = id,
            .qemu_binary = qemu,
            .identity = {.pid = s.pid, .start_time = s.start_time, .boot_id = id},
        };
        probe(&q, &l);
        if (l.verdict != VMM_AMBIGUOUS)
                fail_msg("%s: %s", vmm_verdict_to_string(l.verdict), l.reason);
        assert_non_null(strstr(l.reason, "qemu_binary replaced since it started"));
        vmm_liveness_done(&l);
}

static void test_liveness_other_start_time(void **state) /* VMM-16 */
{
        Fixture *f = *state;
        VmmSpawned s;
        VmmLiveness l;
        _cleanup_free_ char *id = boot_id(f);
        spawn_sleep(f, &s);
        close(s.pidfd);

        VmmLivenessQuery q = {
            .proc = f->proc,
            .boot_id = id,
            .identity = {.pid = s.pid, .start_time = s.start_time + 1, .boot_id = id},
        };
        probe(&q, &l);
        assert_int_equal(l.verdict, VMM_GONE);
        assert_int_equal(l.pidfd, -1);
        assert_non_null(strstr(l.reason, "is another process"));
        vmm_liveness_done(&l);
}

static void test_liveness_boot_id_changed(void **state) /* VMM-16 */
{
        Fixture *f = *state;
        VmmSpawned s;
        VmmLiveness l;
        _cleanup_free_ char *id = boot_id(f);
        spawn_sleep(f, &s);
        close(s.pidfd);

        VmmLivenessQuery q = {
            .proc = f->proc,
            .boot_id = id,
            .identity = {.pid = s.pid,
                         .start_time = s.start_time,
                         .boot_id = "00000000-0000-0000-0000-000000000000"},
        };
        probe(&q, &l);
        assert_int_equal(l.verdict, VMM_GONE);
        assert_non_null(strstr(l.reason, "boot id changed"));
        assert_string_equal(vmm_verdict_to_string(l.verdict), "gone");
        vmm_liveness_done(&l);
}

static void test_liveness_zombie(void **state) /* VMM-16 */
{
        Fixture *f = *state;
        VmmSpawned s;
        VmmLiveness l;
        _cleanup_free_ char *id = boot_id(f);
        char *argv[] = {"/bin/true", NULL};
        spawn(f, argv, &s);
        close(s.pidfd);

        /* Exited and not reaped. */
        siginfo_t si;
        assert_int_equal(waitid(P_PIDFD, (id_t)f->pidfd, &si, WEXITED | WNOWAIT), 0);

        VmmLivenessQuery q = {
            .proc = f->proc,
            .boot_id = id,
            .identity = {.pid = s.pid, .start_time = s.start_time, .boot_id = id},
        };
        probe(&q, &l);
        assert_int_equal(l.verdict, VMM_GONE);
        assert_true(l.zombie);
        assert_non_null(strstr(l.reason, "zombie"));
        vmm_liveness_done(&l);
}

static void test_liveness_missing_pid(void **state) /* VMM-16, VMM-19 */
{
        Fixture *f = *state;
        VmmSpawned s;
        VmmLiveness l;
        _cleanup_free_ char *id = boot_id(f);
        char *argv[] = {"/bin/true", NULL};
        spawn(f, argv, &s);
        close(s.pidfd);
        siginfo_t si;
        assert_int_equal(waitid(P_PIDFD, (id_t)f->pidfd, &si, WEXITED), 0);

        VmmLivenessQuery q = {
            .proc = f->proc,
            .boot_id = id,
            .identity = {.pid = s.pid, .start_time = s.start_time, .boot_id = id},
        };
        probe(&q, &l);
        assert_int_equal(l.verdict, VMM_GONE);
        assert_false(l.zombie);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want, "pid %d exited", (int)s.pid), 0);
        assert_string_equal(l.reason, want);
        vmm_liveness_done(&l);
}

static void test_liveness_socket_owner(void **state) /* VMM-17, VMM-18 */
{
        Fixture *f = *state;
        VmmSpawned s;
        VmmLiveness l;
        _cleanup_free_ char *id = boot_id(f);
        spawn_fake_qemu(f, NULL, &s);
        close(s.pidfd);
        make_vmm(f,
                 &(VmmSpawned){.pid = s.pid,
                               .pidfd = fcntl(f->pidfd, F_DUPFD_CLOEXEC, 3),
                               .start_time = s.start_time},
                 (VmmOptions){0});
        wait_ready_ok(f, false); /* listening for sure */

        /*
         * The kernel's own view, narrowed to our child: the real net/unix and the child's real
         * /proc entry in a fixture root. A walk of the whole /proc would read processes that
         * are not ours, which unit tests outside a PID namespace may not (tests/integration
         * runs in one).
         */
        _cleanup_free_ char *net_unix = NULL, *target = NULL, *dir = NULL;
        _cleanup_root_ Root *proc = NULL;
        assert_int_equal(
            read_file_at(AT_FDCWD, "/proc/net/unix", VMM_NET_UNIX_MAX, &net_unix, NULL), 0);
        assert_int_equal(test_tree_put(f->tree, net_unix, "sproc/net/unix"), 0);
        assert_int_equal(strprintf(&target, "/proc/%d", (int)s.pid), 0);
        assert_int_equal(test_tree_link(f->tree, target, "sproc/%d", (int)s.pid), 0);
        dir = test_tree_path(f->tree, "sproc");
        assert_int_equal(root_open(dir, &proc), 0);

        /* No pid recorded: the socket's owner is found by the probe's own scan. */
        VmmLivenessQuery q = {
            .proc = proc,
            .boot_id = id,
            .identity = {.qmp_socket = f->qmp},
            .dev_root = f->tree->dir,
        };
        probe(&q, &l);
        if (l.verdict != VMM_ALIVE)
                fail_msg("%s: %s", vmm_verdict_to_string(l.verdict), l.reason);
        assert_int_equal(l.pid, s.pid);
        assert_true(l.start_time == s.start_time);
        assert_true(l.pidfd >= 0);
        vmm_liveness_done(&l);

        /* A stale pid, and the shared scan of the pass (DEV-15). */
        _cleanup_free_ char *error = NULL;
        _cleanup_vfio_scan_ VfioScan *scan = NULL;
        assert_int_equal(vfio_scan(proc, f->tree->dir, &scan, &error), 0);
        assert_int_equal(vfio_scan_n_processes(scan), 1);
        q.identity.pid = s.pid;
        q.identity.start_time = s.start_time + 5;
        q.identity.boot_id = id;
        q.scan = scan;
        q.dev_root = NULL;
        probe(&q, &l);
        assert_int_equal(l.verdict, VMM_ALIVE);
        assert_int_equal(l.pid, s.pid);
        assert_non_null(strstr(l.reason, "is another process"));
        vmm_liveness_done(&l);

        /* Without a scan or a dev_root to make one: cannot tell. */
        q.scan = NULL;
        probe(&q, &l);
        assert_int_equal(l.verdict, VMM_AMBIGUOUS);
        vmm_liveness_done(&l);
}

static void test_liveness_socket_not_listening(void **state) /* VMM-17 */
{
        Fixture *f = *state;
        VmmLiveness l;
        VmmLivenessQuery q = {
            .proc = f->proc,
            .identity = {.qmp_socket = f->qmp},
            .dev_root = f->tree->dir,
        };
        probe(&q, &l);
        assert_int_equal(l.verdict, VMM_GONE);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want, "nothing listens on %s", f->qmp), 0);
        assert_string_equal(l.reason, want);
        vmm_liveness_done(&l);
}

static void test_liveness_nothing_recorded(void **state) /* VMM-19 */
{
        Fixture *f = *state;
        VmmLiveness l;
        VmmLivenessQuery q = {.proc = f->proc};
        probe(&q, &l);
        assert_int_equal(l.verdict, VMM_GONE);
        assert_string_equal(l.reason, "no pid and no QMP socket recorded");
        assert_int_equal(l.pidfd, -1);
        vmm_liveness_done(&l);
}

#define NET_UNIX_HEADER "Num       RefCount Protocol Flags    Type St Inode Path\n"

/* A fixture /proc whose net/unix lists a listener on the fixture's QMP path. */
static Root *fixture_proc(Fixture *f, const char *net_unix_entries)
{
        _cleanup_free_ char *text = NULL, *dir = test_tree_path(f->tree, "fproc");
        Root *r = NULL;
        if (net_unix_entries) {
                assert_int_equal(strprintf(&text, "%s%s", NET_UNIX_HEADER, net_unix_entries), 0);
                assert_int_equal(test_tree_put(f->tree, text, "fproc/net/unix"), 0);
        } else
                assert_int_equal(test_mkdirs_at(f->tree->fd, "fproc/net"), 0);
        assert_int_equal(root_open(dir, &r), 0);
        return r;
}

static char *listener_line(Fixture *f, unsigned long inode)
{
        char *line = NULL;
        assert_int_equal(strprintf(&line,
                                   "0000000000000000: 00000002 00000000 00010000 0001 01 %5lu %s\n",
                                   inode, f->qmp),
                         0);
        return line;
}

static void probe_fixture(Fixture *f, Root *proc, VmmVerdict want, const char *reason_part)
{
        VmmLiveness l;
        VmmLivenessQuery q = {
            .proc = proc,
            .identity = {.qmp_socket = f->qmp},
            .dev_root = f->tree->dir,
        };
        probe(&q, &l);
        if (l.verdict != want || !strstr(l.reason, reason_part))
                fail_msg("verdict %s (%s), want %s with \"%s\"", vmm_verdict_to_string(l.verdict),
                         l.reason, vmm_verdict_to_string(want), reason_part);
        vmm_liveness_done(&l);
}

static void test_liveness_fixture_proc(void **state) /* VMM-17, VMM-18 */
{
        Fixture *f = *state;
        _cleanup_free_ char *line = listener_line(f, 4242);
        _cleanup_free_ char *other = NULL;

        /* net/unix unreadable: ambiguous. */
        {
                _cleanup_root_ Root *p = fixture_proc(f, NULL);
                probe_fixture(f, p, VMM_AMBIGUOUS, "/net/unix: No such file or directory");
                assert_string_equal(vmm_verdict_to_string(VMM_AMBIGUOUS), "ambiguous");
        }
        /* Malformed: ambiguous. */
        {
                _cleanup_root_ Root *p = fixture_proc(f, "garbage\n");
                probe_fixture(f, p, VMM_AMBIGUOUS, "parse ");
        }
        /* Our path, but not listening (flags 0): gone. */
        assert_int_equal(
            strprintf(&other, "0000000000000000: 00000002 00000000 00000000 0001 01  4243 %s\n",
                      f->qmp),
            0);
        {
                _cleanup_root_ Root *p = fixture_proc(f, other);
                probe_fixture(f, p, VMM_GONE, "nothing listens on");
        }
        /* Listening, and a complete scan finds no holder: gone. */
        {
                _cleanup_root_ Root *p = fixture_proc(f, line);
                assert_int_equal(test_mkdirs_at(f->tree->fd, "fproc/77/fd"), 0);
                probe_fixture(f, p, VMM_GONE, "no process holds the socket listening on");
        }
        /* An incomplete scan: ambiguous. */
        {
                _cleanup_root_ Root *p = fixture_proc(f, line);
                assert_int_equal(test_tree_put(f->tree, "", "fproc/78/fd"), 0);
                probe_fixture(f, p, VMM_AMBIGUOUS,
                              "the fd scan failed: read process 78 file descriptors");
                assert_int_equal(unlinkat(f->tree->fd, "fproc/78/fd", 0), 0);
        }
        /* A holder that the kernel does not know (pid above any pid_max): ambiguous. */
        {
                _cleanup_root_ Root *p = fixture_proc(f, line);
                assert_int_equal(test_mkdirs_at(f->tree->fd, "fproc/99999999/fd"), 0);
                assert_int_equal(test_tree_link(f->tree, "socket:[4242]", "fproc/99999999/fd/3"),
                                 0);
                probe_fixture(f, p, VMM_AMBIGUOUS, "pid 99999999 holds");
        }
}

static void test_liveness_stat_malformed(void **state) /* VMM-16 */
{
        Fixture *f = *state;
        VmmLiveness l;
        /* Our own pid opens a pidfd; its stat in the fixture does not parse. */
        _cleanup_root_ Root *p = fixture_proc(f, "");
        assert_int_equal(test_tree_put(f->tree, "1 (x) R\n", "fproc/%d/stat", (int)getpid()), 0);
        VmmLivenessQuery q = {.proc = p, .identity = {.pid = getpid(), .start_time = 1}};
        probe(&q, &l);
        assert_int_equal(l.verdict, VMM_AMBIGUOUS);
        assert_non_null(strstr(l.reason, "parse "));
        vmm_liveness_done(&l);
}

int main(void)
{
        /* As the daemon does before any thread (VMM-4); sd_event_add_child_pidfd needs it. */
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0)
                return 1;

        const struct CMUnitTest tests[] = {
#define T(t) cmocka_unit_test_setup_teardown(t, setup, teardown)
            T(test_spawn_exact_environment),
            T(test_spawn_output_appended),
            T(test_spawn_creates_log_0600),
            T(test_spawn_missing_binary),
            T(test_spawn_log_unopenable),
            T(test_spawn_unidentified_stat),
            T(test_spawn_without_pidfd_goes_through_ladder),
            T(test_spawn_passes_descriptors),
            T(test_boot_id),
            T(test_log_last_line),
            T(test_child_exit_status),
            T(test_child_killed_by_signal),
            T(test_child_sigkill_not_ours),
            T(test_free_in_exited),
            T(test_attach_twice),
            T(test_adopted_exit_status_unknown),
            T(test_adopted_terminate),
            T(test_ready_fake_qemu),
            T(test_ready_query_kvm_error_reply),
            T(test_ready_query_kvm),
            T(test_ready_kvm_disabled),
            T(test_ready_events_before_replies),
            T(test_ready_error_reply),
            T(test_ready_capabilities_refused),
            T(test_ready_not_running),
            T(test_ready_malformed_reply),
            T(test_ready_overlong_line),
            T(test_ready_reply_timeout),
            T(test_qmp_replies_in_order),
            T(test_qmp_single_attempt),
            T(test_ready_not_before_deadline),
            T(test_ready_socket_appears_late),
            T(test_ready_greeting_timeout),
            T(test_ready_event_before_greeting),
            T(test_ready_reply_before_greeting),
            T(test_ready_exit_before_ready),
            T(test_ready_hang_up_then_exit),
            T(test_ready_hang_up),
            T(test_ready_killed_before_ready),
            T(test_ready_adopted_exits),
            T(test_ready_cancelled_by_stop),
            T(test_stop_graceful),
            T(test_stop_quit_then_ladder),
            T(test_stop_powerdown_refused_quits),
            T(test_stop_unreachable_qmp),
            T(test_stop_after_exit),
            T(test_ladder_sigterm_ignored),
            T(test_ladder_sigterm_honoured),
            T(test_ladder_no_vfio_starts_at_sigkill),
            T(test_ladder_outside_init_window),
            T(test_ladder_fails_after_sigkill),
            T(test_in_init_window),
            T(test_liveness_stored_pid_alive),
            T(test_liveness_other_executable),
            T(test_liveness_replaced_binary),
            T(test_liveness_other_start_time),
            T(test_liveness_boot_id_changed),
            T(test_liveness_zombie),
            T(test_liveness_missing_pid),
            T(test_liveness_socket_owner),
            T(test_liveness_socket_not_listening),
            T(test_liveness_nothing_recorded),
            T(test_liveness_fixture_proc),
            T(test_liveness_stat_malformed),
#undef T
        };
        return cmocka_run_group_tests_name("vmm-process", tests, NULL, NULL);
}
