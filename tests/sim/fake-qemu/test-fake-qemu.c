/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fake-qemu as a black box (SPEC SIM-15): each test builds a small stand-in for the simulator
 * mount in a temp directory (DIR/.sim, DIR/sys with iommu_group links, DIR/dev/vfio/<group>
 * regular files, DIR/data/instances/<id>/), spawns fake-qemu with the argv of VMM-1, and talks
 * QMP and the agent protocol to it through the small client below.
 *
 * Every wait is a bounded poll; the teardown kills and reaps the child and removes DIR even when
 * a test fails.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <jansson.h>
#include <limits.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "base/base.h"
#include "testlib.h"

#define INSTANCE_ID "k3x9q2m8v1c4z7n5b0wd"
#define NAME "render-01"
#define VF "0000:e3:00.4"
#define MDEV_VF "0000:e3:00.5"
#define MDEV_UUID "6f1c3a2e-8b4d-4c5e-9f70-1a2b3c4d5e6f"
#define VF_GROUP "7"
#define MDEV_GROUP "8"
#define VF_SYSFSDEV "sys/bus/pci/devices/" VF
#define MDEV_SYSFSDEV "sys/bus/mdev/devices/" MDEV_UUID

/* The longest request line either socket accepts (AGENT-17). */
#define AGENT_LINE_MAX 65536

/* How long anything that must happen may take, and how long we watch for what must not. */
#define DEADLINE_MS 5000
#define QUIET_MS 300

typedef struct Fixture {
        char *dir; /* DIR, resolved (so it compares with /proc/<pid>/fd links) */
        char *qmp_socket;
        char *agent_socket;
        char *console_log;
        char *qemu_log; /* fake-qemu's stdout and stderr */
        pid_t pid;      /* 0 when no child is running */
        int status;
} Fixture;

typedef struct Client {
        int fd;
        size_t len;
        char buf[256 * 1024];
} Client;

/* ---- time ---------------------------------------------------------------------------------- */

static int64_t now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The poll interval of the bounded waits below; never a wait for an outcome by itself. */
static void pause_briefly(void)
{
        struct timespec ts = {.tv_nsec = 5 * 1000 * 1000};
        nanosleep(&ts, NULL);
}

/* ---- files --------------------------------------------------------------------------------- */

static void write_file(const Fixture *f, const char *rel, const char *content)
{
        _cleanup_free_ char *path = NULL;
        assert_int_equal(strprintf(&path, "%s/%s", f->dir, rel), 0);
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write_all(fd, content, strlen(content)), 0);
}

static void make_dir(const Fixture *f, const char *rel)
{
        _cleanup_free_ char *path = NULL;
        assert_int_equal(strprintf(&path, "%s/%s", f->dir, rel), 0);
        for (char *p = path + strlen(f->dir) + 1; (p = strchr(p, '/')); p++) {
                *p = 0;
                assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
                *p = '/';
        }
        assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
}

static void make_link(const Fixture *f, const char *target, const char *rel)
{
        _cleanup_free_ char *path = NULL;
        assert_int_equal(strprintf(&path, "%s/%s", f->dir, rel), 0);
        assert_int_equal(symlink(target, path), 0);
}

static char *read_text(const char *path)
{
        char *text = NULL;
        int r = read_file_at(AT_FDCWD, path, 16 * 1024 * 1024, &text, NULL);
        if (r == -ENOENT)
                return strdup("");
        assert_int_equal(r, 0);
        return text;
}

static bool file_contains(const char *path, const char *needle)
{
        _cleanup_free_ char *text = read_text(path);
        return text && strstr(text, needle);
}

/* Waits until the console log holds needle: what fake-qemu logs is how tests see it act. */
static void wait_console(const Fixture *f, const char *needle)
{
        int64_t deadline = now_ms() + DEADLINE_MS;
        while (!file_contains(f->console_log, needle)) {
                if (now_ms() > deadline)
                        fail_msg("console log never showed \"%s\"", needle);
                pause_briefly();
        }
}

/* ---- fixture ------------------------------------------------------------------------------- */

static int setup(void **state)
{
        _cleanup_free_ Fixture *f = calloc(1, sizeof(*f));
        assert_non_null(f);

        const char *tmp = getenv("TMPDIR");
        _cleanup_free_ char *template = NULL;
        assert_int_equal(strprintf(&template, "%s/fq-XXXXXX", tmp && *tmp ? tmp : "/tmp"), 0);
        assert_non_null(mkdtemp(template));
        f->dir = realpath(template, NULL);
        assert_non_null(f->dir);

        assert_int_equal(
            strprintf(&f->qmp_socket, "%s/run/instances/%s/qmp.sock", f->dir, INSTANCE_ID), 0);
        assert_int_equal(
            strprintf(&f->agent_socket, "%s/run/instances/%s/agent.sock", f->dir, INSTANCE_ID), 0);
        assert_int_equal(
            strprintf(&f->console_log, "%s/data/instances/%s/console.log", f->dir, INSTANCE_ID), 0);
        assert_int_equal(strprintf(&f->qemu_log, "%s/qemu.log", f->dir), 0);
        assert_true(strlen(f->agent_socket) < sizeof(((struct sockaddr_un *)NULL)->sun_path));

        /* What vgpu-sim would show (SIM-2, SIM-3, SIM-6, SIM-12), reduced to what is used. */
        make_dir(f, ".sim/qemu");
        make_dir(f, "data/instances/" INSTANCE_ID);
        make_dir(f, "run/instances/" INSTANCE_ID);
        make_dir(f, "dev/vfio");
        make_dir(f, "sys/kernel/iommu_groups/" VF_GROUP);
        make_dir(f, "sys/kernel/iommu_groups/" MDEV_GROUP);
        make_dir(f, "sys/devices/pci0000:e0/" VF);
        make_dir(f, "sys/devices/pci0000:e0/" MDEV_VF "/" MDEV_UUID);
        make_dir(f, "sys/bus/pci/devices");
        make_dir(f, "sys/bus/mdev/devices");
        make_link(f, "../../../devices/pci0000:e0/" VF, VF_SYSFSDEV);
        make_link(f, "../../../devices/pci0000:e0/" MDEV_VF "/" MDEV_UUID, MDEV_SYSFSDEV);
        make_link(f, "../../../kernel/iommu_groups/" VF_GROUP,
                  "sys/devices/pci0000:e0/" VF "/iommu_group");
        make_link(f, "../../../../kernel/iommu_groups/" MDEV_GROUP,
                  "sys/devices/pci0000:e0/" MDEV_VF "/" MDEV_UUID "/iommu_group");
        write_file(f, "dev/vfio/" VF_GROUP, "");
        write_file(f, "dev/vfio/" MDEV_GROUP, "");
        write_file(f, ".sim/state.json", "{\"version\": 1, \"gpus\": []}\n");

        *state = TAKE_PTR(f);
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        int r = 0;

        if (f->pid > 0) {
                kill(f->pid, SIGKILL);
                while (waitpid(f->pid, NULL, 0) < 0 && errno == EINTR)
                        ;
        }
        /* Under ASan/UBSan a report in the child lands in qemu.log: make it fail the test. */
        if (f->qemu_log && (file_contains(f->qemu_log, "Sanitizer") ||
                            file_contains(f->qemu_log, "runtime error:"))) {
                _cleanup_free_ char *log = read_text(f->qemu_log);
                print_error("fake-qemu reported a sanitizer error:\n%s\n", log);
                r = -1;
        }
        if (f->dir)
                (void)test_remove_tree_at(AT_FDCWD, f->dir);
        free(f->dir);
        free(f->qmp_socket);
        free(f->agent_socket);
        free(f->console_log);
        free(f->qemu_log);
        free(f);
        return r;
}

/* ---- the child ----------------------------------------------------------------------------- */

static const char *fake_qemu_path(void)
{
        const char *p = getenv("FAKE_QEMU");
        if (!p || !*p)
                fail_msg("FAKE_QEMU must name the fake-qemu binary");
        return p;
}

static void push(char ***argv, const char *s)
{
        assert_int_equal(strv_push(argv, s), 0);
}

static void pushf(char ***argv, const char *fmt, ...) _printf_(2, 3);
static void pushf(char ***argv, const char *fmt, ...)
{
        _cleanup_free_ char *s = NULL;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&s, fmt, ap);
        va_end(ap);
        assert_true(r >= 0);
        push(argv, s);
}

/* The argv of VMM-1 as vgpud writes it; sysfsdev is relative to DIR, or NULL for no GPU. */
static char **vmm_argv(const Fixture *f, const char *sysfsdev)
{
        char **argv = NULL;
        push(&argv, fake_qemu_path());
        push(&argv, "-name");
        push(&argv, "guest=" NAME ",debug-threads=on");
        push(&argv, "-machine");
        push(&argv, "q35");
        push(&argv, "-accel");
        push(&argv, "kvm");
        push(&argv, "-accel");
        push(&argv, "tcg");
        push(&argv, "-cpu");
        push(&argv, "max");
        push(&argv, "-smp");
        push(&argv, "4");
        push(&argv, "-m");
        push(&argv, "8192M");
        push(&argv, "-nodefaults");
        push(&argv, "-no-user-config");
        push(&argv, "-display");
        push(&argv, "none");
        push(&argv, "-chardev");
        pushf(&argv, "socket,id=qmp,path=%s,server=on,wait=off", f->qmp_socket);
        push(&argv, "-mon");
        push(&argv, "chardev=qmp,mode=control");
        push(&argv, "-chardev");
        pushf(&argv, "socket,id=agent0,path=%s,server=on,wait=off", f->agent_socket);
        push(&argv, "-device");
        push(&argv, "virtio-serial-pci,id=vser0");
        push(&argv, "-device");
        push(&argv, "virtserialport,bus=vser0.0,chardev=agent0,name=org.vgpud.agent.0");
        push(&argv, "-chardev");
        pushf(&argv, "file,id=console0,path=%s,append=on", f->console_log);
        push(&argv, "-serial");
        push(&argv, "chardev:console0");
        if (sysfsdev) {
                push(&argv, "-device");
                pushf(&argv, "vfio-pci,sysfsdev=%s/%s", f->dir, sysfsdev);
        }
        return argv;
}

/* As vgpud does (VMM-3): posix_spawn, stdin /dev/null, output appended to qemu.log. */
static void spawn_passing_fds(Fixture *f, char **argv, const int *fds, size_t n);

static void spawn(Fixture *f, char **argv)
{
        spawn_passing_fds(f, argv, NULL, 0);
}

/* As vgpud starts QEMU (VMM-3); passed (unless -1) becomes descriptor 3. */
static void spawn_passing(Fixture *f, char **argv, int passed)
{
        spawn_passing_fds(f, argv, &passed, passed >= 0 ? 1 : 0);
}

/* fds[i] becomes descriptor 3 + i; -1 leaves that number closed. */
static void spawn_passing_fds(Fixture *f, char **argv, const int *fds, size_t n)
{
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t attr;
        sigset_t empty;
        char *env[] = {(char *)"PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL};
        int copies[8];

        /* Copies above every target, so that no dup2() overwrites a source still to come. */
        assert_true(n <= ELEMENTSOF(copies));
        for (size_t i = 0; i < n; i++) {
                copies[i] = fds[i] < 0 ? -1 : fcntl(fds[i], F_DUPFD_CLOEXEC, 64);
                assert_true(fds[i] < 0 || copies[i] >= 0);
        }
        assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
        assert_int_equal(posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0), 0);
        assert_int_equal(posix_spawn_file_actions_addopen(&fa, 1, f->qemu_log,
                                                          O_WRONLY | O_CREAT | O_APPEND, 0644),
                         0);
        assert_int_equal(posix_spawn_file_actions_adddup2(&fa, 1, 2), 0);
        for (size_t i = 0; i < n; i++)
                if (copies[i] >= 0)
                        assert_int_equal(
                            posix_spawn_file_actions_adddup2(&fa, copies[i], 3 + (int)i), 0);
                else /* glibc's child ignores a close of a number that is not open */
                        assert_int_equal(posix_spawn_file_actions_addclose(&fa, 3 + (int)i), 0);
        /* Whatever the test runner leaked to us must not look like fake-qemu's own fds. */
        assert_int_equal(posix_spawn_file_actions_addclosefrom_np(&fa, 3 + (int)n), 0);
        assert_int_equal(posix_spawnattr_init(&attr), 0);
        sigemptyset(&empty);
        assert_int_equal(posix_spawnattr_setsigmask(&attr, &empty), 0);
        assert_int_equal(posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK), 0);

        int r = posix_spawn(&f->pid, argv[0], &fa, &attr, argv, env);
        posix_spawn_file_actions_destroy(&fa);
        posix_spawnattr_destroy(&attr);
        for (size_t i = 0; i < n; i++)
                if (copies[i] >= 0)
                        close(copies[i]);
        assert_int_equal(r, 0);
}

static void spawn_default(Fixture *f, const char *sysfsdev)
{
        _cleanup_strv_free_ char **argv = vmm_argv(f, sysfsdev);
        spawn(f, argv);
}

/* Reaps the child within DEADLINE_MS; returns its wait status. */
static int wait_exit(Fixture *f)
{
        int64_t deadline = now_ms() + DEADLINE_MS;
        for (;;) {
                pid_t p = waitpid(f->pid, &f->status, WNOHANG);
                assert_true(p >= 0 || errno == EINTR);
                if (p == f->pid) {
                        f->pid = 0;
                        return f->status;
                }
                if (now_ms() > deadline)
                        fail_msg("fake-qemu pid %d did not exit", (int)f->pid);
                pause_briefly();
        }
}

static void assert_exited_with(Fixture *f, int code)
{
        int status = wait_exit(f);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != code) {
                _cleanup_free_ char *log = read_text(f->qemu_log);
                fail_msg("fake-qemu: wait status 0x%x, want exit %d; output:\n%s", status, code,
                         log);
        }
}

static void assert_still_running(Fixture *f)
{
        assert_int_equal(waitpid(f->pid, &f->status, WNOHANG), 0);
}

/* ---- the client ---------------------------------------------------------------------------- */

static void client_free(Client *c)
{
        if (c) {
                closep(&c->fd);
                free(c);
        }
}

static void client_freep(Client **c)
{
        client_free(*c);
}

#define _cleanup_client_ _cleanup_(client_freep)

/* Connects, retrying while the child has not yet bound its socket. */
static Client *client_connect(Fixture *f, const char *path)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        int64_t deadline = now_ms() + DEADLINE_MS;

        assert_true(strlen(path) < sizeof(sa.sun_path));
        strcpy(sa.sun_path, path);
        for (;;) {
                _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                assert_true(fd >= 0);
                if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
                        Client *c = calloc(1, sizeof(*c));
                        assert_non_null(c);
                        c->fd = TAKE_FD(fd);
                        return c;
                }
                assert_true(errno == ENOENT || errno == ECONNREFUSED || errno == EAGAIN);
                if (f->pid > 0 && waitpid(f->pid, &f->status, WNOHANG) == f->pid) {
                        f->pid = 0;
                        _cleanup_free_ char *log = read_text(f->qemu_log);
                        fail_msg("fake-qemu exited (status 0x%x) before %s appeared:\n%s",
                                 f->status, path, log);
                }
                if (now_ms() > deadline)
                        fail_msg("%s never accepted a connection", path);
                pause_briefly();
        }
}

static void client_send(Client *c, const char *text)
{
        assert_int_equal(write_all(c->fd, text, strlen(text)), 0);
}

/*
 * One line (without "\n") within timeout_ms: 0, -ETIMEDOUT, or -ECONNRESET at end of stream.
 * raw_eol, when given, receives whether the line ended in "\r\n".
 */
static int client_read_line(Client *c, int timeout_ms, char **ret, bool *ret_crlf)
{
        int64_t deadline = now_ms() + timeout_ms;
        for (;;) {
                char *nl = memchr(c->buf, '\n', c->len);
                if (nl) {
                        size_t n = (size_t)(nl - c->buf);
                        bool crlf = n > 0 && c->buf[n - 1] == '\r';
                        char *line = strndup(c->buf, crlf ? n - 1 : n);
                        assert_non_null(line);
                        memmove(c->buf, nl + 1, c->len - n - 1);
                        c->len -= n + 1;
                        if (ret_crlf)
                                *ret_crlf = crlf;
                        *ret = line;
                        return 0;
                }
                assert_true(c->len < sizeof(c->buf));

                int64_t left = deadline - now_ms();
                if (left <= 0)
                        return -ETIMEDOUT;
                struct pollfd p = {.fd = c->fd, .events = POLLIN};
                int k = poll(&p, 1, (int)left);
                assert_true(k >= 0 || errno == EINTR);
                if (k <= 0)
                        continue;
                ssize_t n = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
                if (n < 0 && errno == ECONNRESET)
                        return -ECONNRESET;
                assert_true(n >= 0);
                if (n == 0)
                        return -ECONNRESET;
                c->len += (size_t)n;
        }
}

static json_t *parse_line(const char *line)
{
        json_error_t err;
        json_t *v = json_loads(line, JSON_REJECT_DUPLICATES, &err);
        if (!v)
                fail_msg("not a JSON object: %s (%s)", line, err.text);
        return v;
}

static json_t *client_read_json(Client *c)
{
        _cleanup_free_ char *line = NULL;
        int r = client_read_line(c, DEADLINE_MS, &line, NULL);
        if (r < 0)
                fail_msg("no reply line: %s", strerror(-r));
        return parse_line(line);
}

/* QMP lines end in "\r\n" as QEMU's do; VMM-6 clients must cope with that. */
static json_t *qmp_read(Client *c)
{
        _cleanup_free_ char *line = NULL;
        bool crlf = false;
        int r = client_read_line(c, DEADLINE_MS, &line, &crlf);
        if (r < 0)
                fail_msg("no QMP line: %s", strerror(-r));
        assert_true(crlf);
        return parse_line(line);
}

static void assert_no_line(Client *c)
{
        _cleanup_free_ char *line = NULL;
        int r = client_read_line(c, QUIET_MS, &line, NULL);
        if (r == 0)
                fail_msg("unexpected line: %s", line);
        assert_int_equal(r, -ETIMEDOUT);
}

static void assert_eof(Client *c)
{
        _cleanup_free_ char *line = NULL;
        int r;
        while ((r = client_read_line(c, DEADLINE_MS, &line, NULL)) == 0) {
                fail_msg("unexpected line before end of stream: %s", line);
        }
        assert_int_equal(r, -ECONNRESET);
}

static void assert_error(const json_t *reply, const char *class, const char *desc)
{
        const char *got_class = NULL, *got_desc = NULL;
        json_error_t err;
        if (json_unpack_ex((json_t *)reply, &err, 0, "{s:{s:s,s:s}}", "error", "class", &got_class,
                           "desc", &got_desc) < 0) {
                _cleanup_free_ char *s = json_dumps(reply, 0);
                fail_msg("not an error reply: %s (%s)", s, err.text);
        }
        assert_string_equal(got_class, class);
        if (desc)
                assert_string_equal(got_desc, desc);
}

static void assert_error_class(const json_t *reply, const char *class)
{
        const char *got_class = NULL, *got_desc = NULL;
        assert_int_equal(json_unpack((json_t *)reply, "{s:{s:s,s:s}}", "error", "class", &got_class,
                                     "desc", &got_desc),
                         0);
        assert_string_equal(got_class, class);
}

static void assert_json_equal(const json_t *v, const char *want)
{
        json_auto_t *w = parse_line(want);
        if (!json_equal((json_t *)v, w)) {
                _cleanup_free_ char *s = json_dumps(v, JSON_COMPACT);
                fail_msg("got %s, want %s", s, want);
        }
}

/* Sends one request and checks the reply with assert_json_equal. */
static void roundtrip(Client *c, const char *request, const char *want)
{
        client_send(c, request);
        json_auto_t *reply = client_read_json(c);
        assert_json_equal(reply, want);
}

/* VMM-5: greeting, then capabilities negotiation. */
static Client *qmp_open(Fixture *f)
{
        Client *c = client_connect(f, f->qmp_socket);
        json_auto_t *greeting = qmp_read(c);
        assert_non_null(json_object_get(greeting, "QMP"));
        client_send(c, "{\"execute\": \"qmp_capabilities\"}\n");
        json_auto_t *reply = qmp_read(c);
        assert_json_equal(reply, "{\"return\": {}}");
        return c;
}

static void assert_event(const json_t *e, const char *name, const char *data)
{
        json_int_t sec, usec;
        const char *got;
        json_t *got_data = NULL;
        assert_int_equal(json_unpack((json_t *)e, "{s:{s:I,s:I},s:s,s?o}", "timestamp", "seconds",
                                     &sec, "microseconds", &usec, "event", &got, "data", &got_data),
                         0);
        assert_string_equal(got, name);
        assert_true(sec > 1600000000);
        assert_true(usec >= 0 && usec < 1000000);
        if (data)
                assert_json_equal(got_data, data);
        else
                assert_null(got_data);
}

/* ---- QMP ----------------------------------------------------------------------------------- */

/* VMM-5, VMM-20: the readiness exchange, line by line, as vgpud runs it. */
static void test_qmp_readiness_exchange(void **state)
{
        Fixture *f = *state;
        spawn_default(f, VF_SYSFSDEV);

        _cleanup_client_ Client *c = client_connect(f, f->qmp_socket);
        json_auto_t *greeting = qmp_read(c);
        json_int_t major, minor, micro;
        json_t *caps;
        assert_int_equal(json_unpack(greeting, "{s:{s:{s:{s:I,s:I,s:I},s:s},s:o}}", "QMP",
                                     "version", "qemu", "major", &major, "minor", &minor, "micro",
                                     &micro, "package", &(const char *){NULL}, "capabilities",
                                     &caps),
                         0);
        assert_int_equal(major, 7);
        assert_int_equal(minor, 2);
        assert_true(json_is_array(caps));

        /* QEMU refuses every command until capabilities are negotiated. */
        client_send(c, "{\"execute\": \"query-status\"}\n");
        json_auto_t *early = qmp_read(c);
        assert_error(early, "CommandNotFound",
                     "Expecting capabilities negotiation with 'qmp_capabilities'");

        client_send(c, "{\"execute\": \"qmp_capabilities\"}\n");
        json_auto_t *ok = qmp_read(c);
        assert_json_equal(ok, "{\"return\": {}}");

        client_send(c, "{\"execute\": \"qmp_capabilities\"}\n");
        json_auto_t *again = qmp_read(c);
        assert_error(again, "CommandNotFound",
                     "Capabilities negotiation is already complete, command ignored");

        client_send(c, "{\"execute\": \"query-status\", \"id\": \"r1\"}\n");
        json_auto_t *status = qmp_read(c);
        assert_json_equal(
            status, "{\"return\": {\"status\": \"running\", \"running\": true}, \"id\": \"r1\"}");

        /* HEALTH-24 relies on every command being logged. */
        wait_console(f, "fake-qemu: qmp command qmp_capabilities\n");
        wait_console(f, "fake-qemu: qmp command query-status\n");
        assert_still_running(f);
}

/* VMM-6: errors come back as {"error": {"class", "desc"}} and the connection stays usable. */
static void test_qmp_errors(void **state)
{
        Fixture *f = *state;
        spawn_default(f, NULL);
        _cleanup_client_ Client *c = qmp_open(f);

        client_send(c, "{\"execute\": \"frobnicate\", \"id\": 5}\n");
        json_auto_t *unknown = qmp_read(c);
        assert_error(unknown, "CommandNotFound", "The command frobnicate has not been found");
        assert_int_equal(json_integer_value(json_object_get(unknown, "id")), 5);
        wait_console(f, "fake-qemu: qmp command frobnicate\n");

        const char *bad[] = {
            "{\"execute\": \"query-status\"\n",                     /* invalid JSON */
            "[\"query-status\"]\n",                                 /* not an object */
            "{\"id\": 1}\n",                                        /* no execute */
            "{\"execute\": 42}\n",                                  /* not a string */
            "{\"execute\": \"query-status\", \"arguments\": []}\n", /* bad arguments */
            "{\"execute\": \"query-status\", \"arguments\": {\"x\": 1}}\n",
            "{\"execute\": \"query-status\", \"execute\": \"quit\"}\n", /* duplicate key */
            "{\"execute\": \"query-status\", \"bogus\": 1}\n",          /* unknown member */
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                client_send(c, bad[i]);
                json_auto_t *reply = qmp_read(c);
                assert_error_class(reply, "GenericError");
        }

        /* Blank lines are white space between requests, not requests. */
        client_send(c, "\n   \n{\"execute\": \"query-status\", \"id\": \"after\"}\n");
        json_auto_t *status = qmp_read(c);
        assert_string_equal(json_string_value(json_object_get(status, "id")), "after");

        /* An overlong line gets one error, then the next request is served. */
        size_t big = AGENT_LINE_MAX + 100;
        _cleanup_free_ char *line = malloc(big + 2);
        assert_non_null(line);
        memset(line, ' ', big);
        memcpy(line + big, "\n", 2);
        client_send(c, line);
        json_auto_t *overlong = qmp_read(c);
        assert_error_class(overlong, "GenericError");
        client_send(c, "{\"execute\": \"query-status\", \"id\": 9}\n");
        json_auto_t *after = qmp_read(c);
        assert_int_equal(json_integer_value(json_object_get(after, "id")), 9);
}

/* VMM-5 polls and reconnects: one client at a time, each with its own greeting and session. */
static void test_qmp_sequential_clients(void **state)
{
        Fixture *f = *state;
        spawn_default(f, NULL);

        _cleanup_client_ Client *first = qmp_open(f);
        /* The second client waits in the backlog, as with QEMU's socket chardev. */
        _cleanup_client_ Client *second = client_connect(f, f->qmp_socket);
        assert_no_line(second);
        client_free(TAKE_PTR(first));

        json_auto_t *greeting = qmp_read(second);
        assert_non_null(json_object_get(greeting, "QMP"));
        client_send(second, "{\"execute\": \"query-status\"}\n");
        json_auto_t *early = qmp_read(second);
        assert_error_class(early, "CommandNotFound");
        client_send(second, "{\"execute\": \"qmp_capabilities\"}\n");
        json_auto_t *ok = qmp_read(second);
        assert_json_equal(ok, "{\"return\": {}}");

        for (int i = 0; i < 5; i++) {
                _cleanup_client_ Client *c = NULL;
                client_free(TAKE_PTR(second));
                c = qmp_open(f);
                client_send(c, "{\"execute\": \"query-status\"}\n");
                json_auto_t *status = qmp_read(c);
                assert_json_equal(status,
                                  "{\"return\": {\"status\": \"running\", \"running\": true}}");
        }
        assert_still_running(f);
}

/* SIM-15: a client that hangs up before its greeting is dropped; fake-qemu serves the next. */
static void test_qmp_client_gone_before_greeting(void **state)
{
        Fixture *f = *state;
        spawn_default(f, NULL);

        _cleanup_client_ Client *first = qmp_open(f);
        Client *gone = client_connect(f, f->qmp_socket); /* waits in the backlog */
        client_free(gone);
        client_free(TAKE_PTR(first));

        _cleanup_client_ Client *next = qmp_open(f);
        client_send(next, "{\"execute\": \"query-status\"}\n");
        json_auto_t *status = qmp_read(next);
        assert_json_equal(status, "{\"return\": {\"status\": \"running\", \"running\": true}}");
        assert_still_running(f);
}

/* VMM-9, VMM-20: powerdown is answered, the guest powers off, and QEMU exits 0. */
static void test_qmp_system_powerdown(void **state)
{
        Fixture *f = *state;
        spawn_default(f, VF_SYSFSDEV);
        _cleanup_client_ Client *c = qmp_open(f);

        client_send(c, "{\"execute\": \"system_powerdown\"}\n");
        json_auto_t *reply = qmp_read(c);
        assert_json_equal(reply, "{\"return\": {}}");
        json_auto_t *powerdown = qmp_read(c);
        assert_event(powerdown, "POWERDOWN", NULL);
        json_auto_t *shutdown = qmp_read(c);
        assert_event(shutdown, "SHUTDOWN", "{\"guest\": true, \"reason\": \"guest-shutdown\"}");
        assert_eof(c);

        assert_exited_with(f, 0);
        assert_true(file_contains(f->console_log, "fake-qemu: qmp command system_powerdown\n"));
        assert_true(file_contains(f->console_log, "fake-qemu: exit status=0"));
}

/* VMM-9: quit ends QEMU at once, with a SHUTDOWN event first. */
static void test_qmp_quit(void **state)
{
        Fixture *f = *state;
        spawn_default(f, NULL);
        _cleanup_client_ Client *c = qmp_open(f);

        client_send(c, "{\"execute\": \"quit\", \"id\": \"q\"}\n");
        json_auto_t *reply = qmp_read(c);
        assert_json_equal(reply, "{\"return\": {}, \"id\": \"q\"}");
        json_auto_t *shutdown = qmp_read(c);
        assert_event(shutdown, "SHUTDOWN", "{\"guest\": false, \"reason\": \"host-qmp-quit\"}");
        assert_eof(c);
        assert_exited_with(f, 0);
        assert_true(file_contains(f->console_log, "fake-qemu: qmp command quit\n"));
}

/* ---- signals ------------------------------------------------------------------------------- */

/* VMM-10: SIGTERM ends the VMM with status 0; a negotiated monitor sees SHUTDOWN. */
static void test_sigterm_exits(void **state)
{
        Fixture *f = *state;
        spawn_default(f, VF_SYSFSDEV);
        _cleanup_client_ Client *c = qmp_open(f);

        assert_int_equal(kill(f->pid, SIGTERM), 0);
        json_auto_t *shutdown = qmp_read(c);
        assert_event(shutdown, "SHUTDOWN", "{\"guest\": false, \"reason\": \"host-signal\"}");
        assert_exited_with(f, 0);

        _cleanup_free_ char *line = NULL;
        assert_int_equal(
            strprintf(&line, "fake-qemu: signal SIGTERM pid=%d action=exit\n", (int)getpid()), 0);
        assert_true(file_contains(f->console_log, line));
}

/* HEALTH-24: every signal is logged, one line each, even those that change nothing. */
static void test_signals_logged(void **state)
{
        Fixture *f = *state;
        spawn_default(f, VF_SYSFSDEV);
        _cleanup_client_ Client *c = qmp_open(f);

        assert_int_equal(kill(f->pid, SIGUSR1), 0);
        assert_int_equal(kill(f->pid, SIGCONT), 0);
        _cleanup_free_ char *usr1 = NULL, *cont = NULL;
        assert_int_equal(
            strprintf(&usr1, "fake-qemu: signal SIGUSR1 pid=%d action=ignore\n", (int)getpid()), 0);
        assert_int_equal(
            strprintf(&cont, "fake-qemu: signal SIGCONT pid=%d action=ignore\n", (int)getpid()), 0);
        wait_console(f, usr1);
        wait_console(f, cont);

        client_send(c, "{\"execute\": \"query-status\"}\n");
        json_auto_t *status = qmp_read(c);
        assert_non_null(json_object_get(status, "return"));
        assert_still_running(f);
}

/* ---- flags (SIM-14, SIM-15) ---------------------------------------------------------------- */

/* ignore-sigterm: the VMM that VMM-10's ladder must SIGKILL (REL-4). */
static void test_flag_ignore_sigterm(void **state)
{
        Fixture *f = *state;
        write_file(f, ".sim/qemu/" NAME, "ignore-sigterm\n");
        spawn_default(f, VF_SYSFSDEV);
        _cleanup_client_ Client *c = qmp_open(f);

        assert_int_equal(kill(f->pid, SIGTERM), 0);
        wait_console(f, "fake-qemu: signal SIGTERM pid=");
        wait_console(f, " action=ignore\n");
        client_send(c, "{\"execute\": \"query-status\"}\n");
        json_auto_t *status = qmp_read(c);
        assert_json_equal(status, "{\"return\": {\"status\": \"running\", \"running\": true}}");
        assert_still_running(f);

        assert_int_equal(kill(f->pid, SIGKILL), 0);
        int st = wait_exit(f);
        assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
}

/* hang-qmp: connections are accepted, nothing is ever answered (VMM-5's greeting timeout). */
static void test_flag_hang_qmp(void **state)
{
        Fixture *f = *state;
        write_file(f, ".sim/qemu/" NAME, "hang-qmp\n");
        spawn_default(f, VF_SYSFSDEV);

        _cleanup_client_ Client *c = client_connect(f, f->qmp_socket);
        assert_no_line(c);
        client_send(c, "{\"execute\": \"qmp_capabilities\"}\n");
        wait_console(f, "fake-qemu: qmp command qmp_capabilities unanswered (hang-qmp)\n");
        assert_no_line(c);

        /* The guest side is not hung. */
        _cleanup_client_ Client *agent = client_connect(f, f->agent_socket);
        roundtrip(agent, "{\"execute\": \"guest-ping\"}\n", "{\"return\": {}}");

        assert_int_equal(kill(f->pid, SIGTERM), 0);
        assert_exited_with(f, 0);
        assert_eof(c); /* not even a SHUTDOWN event */
}

/* exit-early:<ms>: the VMM dies with status 1 after that long (a crashing guest). */
static void test_flag_exit_early(void **state)
{
        Fixture *f = *state;
        write_file(f, ".sim/qemu/" NAME, "exit-early:1000\n");
        int64_t start = now_ms();
        spawn_default(f, VF_SYSFSDEV);

        /* Fully up until then. */
        client_free(qmp_open(f));
        assert_exited_with(f, 1);
        assert_true(now_ms() - start >= 1000);
        assert_true(file_contains(f->console_log, "fake-qemu: exit-early after 1000ms\n"));
        assert_true(file_contains(f->console_log, "fake-qemu: exit status=1 reason=exit-early\n"));
}

static void test_flag_exit_early_zero(void **state)
{
        Fixture *f = *state;
        write_file(f, ".sim/qemu/" NAME, "exit-early:0\n");
        spawn_default(f, NULL);
        assert_exited_with(f, 1);
}

/* silent-agent: the agent channel accepts and reads, never replies (SENT-6 rpc_error). */
static void test_flag_silent_agent(void **state)
{
        Fixture *f = *state;
        write_file(f, ".sim/qemu/" NAME, "silent-agent\n");
        spawn_default(f, VF_SYSFSDEV);

        _cleanup_client_ Client *agent = client_connect(f, f->agent_socket);
        client_send(agent, "{\"execute\": \"guest-gpu-init-status\", \"id\": 1}\n");
        client_send(agent, "this is not JSON\n");
        assert_no_line(agent);

        _cleanup_client_ Client *qmp = qmp_open(f);
        client_send(qmp, "{\"execute\": \"query-status\"}\n");
        json_auto_t *status = qmp_read(qmp);
        assert_non_null(json_object_get(status, "return"));
}

/* Flags combine, one per line; empty lines are skipped; the console names the set. */
static void test_flags_combined(void **state)
{
        Fixture *f = *state;
        write_file(f, ".sim/qemu/" NAME, "ignore-sigterm\n\nsilent-agent\nhang-qmp");
        spawn_default(f, NULL);
        wait_console(f, "flags=ignore-sigterm,hang-qmp,silent-agent ");

        _cleanup_client_ Client *agent = client_connect(f, f->agent_socket);
        client_send(agent, "{\"execute\": \"guest-ping\"}\n");
        assert_no_line(agent);
        assert_int_equal(kill(f->pid, SIGTERM), 0);
        wait_console(f, "action=ignore\n");
        assert_still_running(f);
}

/* A flag fake-qemu does not know is a test bug: refuse to start rather than guess. */
static void test_flags_invalid(void **state)
{
        Fixture *f = *state;
        const char *bad[] = {"reboot-loop\n",   "exit-early:\n", "exit-early:-5\n",
                             "exit-early:1s\n", " hang-qmp\n",   "hang-qmp \n"};

        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                write_file(f, ".sim/qemu/" NAME, bad[i]);
                spawn_default(f, NULL);
                assert_exited_with(f, 1);
                _cleanup_free_ char *want = NULL;
                assert_int_equal(
                    strprintf(&want, "read flags %s/.sim/qemu/" NAME ": line ", f->dir), 0);
                assert_true(file_contains(f->qemu_log, want));
        }
}

/* Flags are per instance name: another instance's file does not apply. */
static void test_flags_other_instance(void **state)
{
        Fixture *f = *state;
        write_file(f, ".sim/qemu/other-vm", "silent-agent\n");
        spawn_default(f, NULL);
        _cleanup_client_ Client *agent = client_connect(f, f->agent_socket);
        roundtrip(agent, "{\"execute\": \"guest-ping\"}\n", "{\"return\": {}}");
        wait_console(f, "flags=none ");
}

/* ---- the agent channel --------------------------------------------------------------------- */

/* AGENT-14, AGENT-15: the three commands, ids echoed as given. */
static void test_agent_commands(void **state)
{
        Fixture *f = *state;
        spawn_default(f, VF_SYSFSDEV);
        _cleanup_client_ Client *c = client_connect(f, f->agent_socket);

        roundtrip(c, "{\"execute\": \"guest-ping\"}\n", "{\"return\": {}}");
        roundtrip(c, "{\"execute\": \"guest-ping\", \"arguments\": {}, \"id\": [1, \"x\"]}\n",
                  "{\"return\": {}, \"id\": [1, \"x\"]}");
        roundtrip(c, "{\"execute\":\"guest-gpu-init-status\",\"id\":7}\n",
                  "{\"return\": {\"state\": \"ok\", \"failure_message\": \"\"}, \"id\": 7}");

        client_send(c, "{\"execute\": \"guest-info\"}\n");
        json_auto_t *info = client_read_json(c);
        const char *version;
        json_t *list;
        assert_int_equal(json_unpack(info, "{s:{s:s,s:o}}", "return", "version", &version,
                                     "supported_commands", &list),
                         0);
        assert_true(strlen(version) > 0);
        const char *want[] = {"guest-ping", "guest-info", "guest-gpu-init-status"};
        assert_int_equal(json_array_size(list), ELEMENTSOF(want));
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                const char *name;
                int enabled;
                assert_int_equal(json_unpack(json_array_get(list, i), "{s:s,s:b}", "name", &name,
                                             "enabled", &enabled),
                                 0);
                assert_string_equal(name, want[i]);
                assert_true(enabled);
        }

        /* Replies are compact single lines ending in "\n" (AGENT-18's rendering). */
        client_send(c, "{\"execute\":\"guest-gpu-init-status\",\"id\":7}\n");
        _cleanup_free_ char *line = NULL;
        bool crlf = true;
        assert_int_equal(client_read_line(c, DEADLINE_MS, &line, &crlf), 0);
        assert_false(crlf);
        assert_string_equal(line,
                            "{\"return\":{\"state\":\"ok\",\"failure_message\":\"\"},\"id\":7}");
}

/* AGENT-16, AGENT-17: errors keep the connection open; overlong lines are cut at the newline. */
static void test_agent_errors(void **state)
{
        Fixture *f = *state;
        spawn_default(f, NULL);
        _cleanup_client_ Client *c = client_connect(f, f->agent_socket);

        client_send(c, "{\"execute\":\"guest-reboot\"}\n");
        _cleanup_free_ char *line = NULL;
        assert_int_equal(client_read_line(c, DEADLINE_MS, &line, NULL), 0);
        assert_string_equal(line, "{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"command "
                                  "\\\"guest-reboot\\\" not found\"}}");

        const char *bad[] = {
            "{\"execute\": \"guest-ping\"\n",                        /* invalid JSON */
            "\"guest-ping\"\n",                                      /* not an object */
            "{\"id\": 3}\n",                                         /* no execute */
            "{\"execute\": true}\n",                                 /* execute not a string */
            "{\"execute\": \"guest-ping\", \"arguments\": 1}\n",     /* arguments not an object */
            "{\"execute\": \"guest-ping\", \"id\": 1, \"id\": 2}\n", /* duplicate key */
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                client_send(c, bad[i]);
                json_auto_t *reply = client_read_json(c);
                assert_error_class(reply, "GenericError");
        }

        /* Empty lines get no reply: the next reply belongs to the next request. */
        roundtrip(c, "\n\n{\"execute\": \"guest-ping\", \"id\": \"after-empty\"}\n",
                  "{\"return\": {}, \"id\": \"after-empty\"}");

        /* A line of exactly FQ_LINE_MAX bytes is served. */
        const char *req = "{\"execute\": \"guest-ping\", \"id\": \"max\"}";
        _cleanup_free_ char *max = malloc(AGENT_LINE_MAX + 2);
        assert_non_null(max);
        memset(max, ' ', AGENT_LINE_MAX);
        memcpy(max, req, strlen(req));
        memcpy(max + AGENT_LINE_MAX, "\n", 2);
        roundtrip(c, max, "{\"return\": {}, \"id\": \"max\"}");

        /* One byte more is refused, and its tail up to the newline is discarded. */
        _cleanup_free_ char *over = malloc(AGENT_LINE_MAX + 3 + 200);
        assert_non_null(over);
        memset(over, 'x', AGENT_LINE_MAX + 200);
        memcpy(over + AGENT_LINE_MAX + 200, "\n", 2);
        client_send(c, over);
        json_auto_t *overlong = client_read_json(c);
        assert_error(overlong, "GenericError", "request line exceeds 65536 bytes");
        roundtrip(c, "{\"execute\": \"guest-ping\", \"id\": \"after-overlong\"}\n",
                  "{\"return\": {}, \"id\": \"after-overlong\"}");
}

/* SENT-4 connects once per check: sequential clients, a partial line dropped at hang-up. */
static void test_agent_sequential_clients(void **state)
{
        Fixture *f = *state;
        spawn_default(f, VF_SYSFSDEV);

        for (int i = 0; i < 20; i++) {
                _cleanup_client_ Client *c = client_connect(f, f->agent_socket);
                if (i % 2)
                        client_send(c, "{\"execute\": \"guest-pi"); /* left unfinished */
                else
                        roundtrip(c, "{\"execute\": \"guest-gpu-init-status\", \"id\": 1}\n",
                                  "{\"return\": {\"state\": \"ok\", \"failure_message\": \"\"}, "
                                  "\"id\": 1}");
        }
        _cleanup_client_ Client *c = client_connect(f, f->agent_socket);
        client_send(c, "ng\"}\n{\"execute\": \"guest-ping\"}\n");
        json_auto_t *tail = client_read_json(c);
        assert_error_class(tail, "GenericError");
        json_auto_t *ping = client_read_json(c);
        assert_json_equal(ping, "{\"return\": {}}");
}

static void check_init_status(Fixture *f, const char *want_state, const char *want_message)
{
        _cleanup_client_ Client *c = client_connect(f, f->agent_socket);
        client_send(c, "{\"execute\":\"guest-gpu-init-status\",\"id\":7}\n");
        json_auto_t *reply = client_read_json(c);
        const char *state, *message;
        json_int_t id;
        assert_int_equal(json_unpack(reply, "{s:{s:s,s:s},s:I}", "return", "state", &state,
                                     "failure_message", &message, "id", &id),
                         0);
        assert_string_equal(state, want_state);
        assert_string_equal(message, want_message);
        assert_int_equal(id, 7);
}

#define WEDGED_MESSAGE(vf) "NVRM: GPU " vf ": RmInitAdapter failed! (0x22:0x65:884)"

/*
 * Writes .sim/state.json in vgpu-sim's layout (sim/README.md), reduced to the keys fake-qemu
 * reads plus one it must ignore: one GPU whose VFs are VF and MDEV_VF.
 */
static void write_state(const Fixture *f, bool vf_wedged, bool mdev_vf_wedged)
{
        _cleanup_free_ char *text = NULL;
        assert_int_equal(
            strprintf(&text,
                      "{\"version\": 1, \"gpus\": [{\"address\": \"0000:e3:00.0\", \"vfs\": ["
                      "{\"address\": \"" VF "\", \"open_handles\": 0, \"wedged\": %s},"
                      " {\"address\": \"" MDEV_VF "\", \"open_handles\": 0, \"wedged\": %s}]}]}\n",
                      vf_wedged ? "true" : "false", mdev_vf_wedged ? "true" : "false"),
            0);
        write_file(f, ".sim/state.json", text);
}

/* SIM-15, AGENT-18: a VF wedged at boot makes the guest report the driver's failure. */
static void test_agent_wedged_vf(void **state)
{
        Fixture *f = *state;
        write_state(f, true, false);
        spawn_default(f, VF_SYSFSDEV);
        check_init_status(f, "failed", WEDGED_MESSAGE(VF));
        wait_console(f, "gpu=wedged\n");

        /* "at its boot": `unwedge` after the start does not heal this guest. */
        write_state(f, false, false);
        check_init_status(f, "failed", WEDGED_MESSAGE(VF));
}

/* Another VF wedged, the VF absent from the model, or no state at all: the guest initialises. */
static void test_agent_healthy_vf(void **state)
{
        Fixture *f = *state;
        const char *states[] = {
            NULL, /* write_state(f, false, true) */
            "{\"version\": 1, \"gpus\": []}",
            "{\"version\": 1, \"gpus\": [{\"vfs\": []}]}",
        };
        for (size_t i = 0; i < ELEMENTSOF(states); i++) {
                if (states[i])
                        write_file(f, ".sim/state.json", states[i]);
                else
                        write_state(f, false, true);
                spawn_default(f, VF_SYSFSDEV);
                check_init_status(f, "ok", "");
                assert_int_equal(kill(f->pid, SIGTERM), 0);
                assert_exited_with(f, 0);
        }

        _cleanup_free_ char *path = NULL;
        assert_int_equal(strprintf(&path, "%s/.sim/state.json", f->dir), 0);
        assert_int_equal(unlink(path), 0);
        spawn_default(f, VF_SYSFSDEV);
        check_init_status(f, "ok", "");
}

/* An mdev's wedge is its parent VF's (SIM-14 `wedge <vf>`; SENT-2, DISC-9). */
static void test_agent_wedged_mdev(void **state)
{
        Fixture *f = *state;
        write_state(f, false, true);
        spawn_default(f, MDEV_SYSFSDEV);
        check_init_status(f, "failed", WEDGED_MESSAGE(MDEV_VF));
}

/* A state.json that breaks the layout is a simulator bug worth a loud failure, not an "ok". */
static void test_state_invalid(void **state)
{
        Fixture *f = *state;
        const char *bad[][2] = {
            {"{\"version\": 1, \"gpus\": [], \"gpus\": []}", "duplicate object key"},
            {"[]", "parse "},
            {"{\"version\": 2, \"gpus\": []}", "expected \"version\": 1"},
            {"{\"version\": 1}", "expected a \"gpus\" array"},
            {"{\"version\": 1, \"gpus\": [{}]}", "gpus[0]: expected a \"vfs\" array"},
            {"{\"version\": 1, \"gpus\": [{\"vfs\": [{\"address\": \"" VF "\", \"wedged\": 1}]}]}",
             "gpus[0].vfs[0]: expected a string \"address\" and a boolean \"wedged\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                write_file(f, ".sim/state.json", bad[i][0]);
                assert_true(truncate(f->qemu_log, 0) == 0 || errno == ENOENT);
                spawn_default(f, VF_SYSFSDEV);
                assert_exited_with(f, 1);
                if (!file_contains(f->qemu_log, bad[i][1])) {
                        _cleanup_free_ char *log = read_text(f->qemu_log);
                        fail_msg("case %zu: want \"%s\" in:\n%s", i, bad[i][1], log);
                }
        }
}

/* ---- VFIO node (DEV-12, DEV-13, SIM-12) ---------------------------------------------------- */

/* The targets of the child's descriptors, newline-separated, as DEV-13's scan reads them. */
static char *fd_targets(pid_t pid, bool check_cloexec)
{
        _cleanup_free_ char *fd_dir = NULL, *out = strdup("");
        assert_non_null(out);
        assert_int_equal(strprintf(&fd_dir, "/proc/%d/fd", (int)pid), 0);
        _cleanup_closedir_ DIR *d = opendir(fd_dir);
        assert_non_null(d);

        struct dirent *de;
        while ((de = readdir(d))) {
                if (de->d_name[0] == '.')
                        continue;
                char target[PATH_MAX];
                ssize_t n = readlinkat(dirfd(d), de->d_name, target, sizeof(target) - 1);
                if (n < 0)
                        continue;
                target[n] = 0;
                assert_int_equal(strextend(&out, "%s\n", target), 0);

                uint32_t fd;
                assert_int_equal(parse_uint32(de->d_name, &fd), 0);
                if (!check_cloexec || fd <= 2)
                        continue;
                /* O_CLOEXEC everywhere: fdinfo's flags are octal open flags. */
                _cleanup_free_ char *info_path = NULL, *info = NULL;
                assert_int_equal(strprintf(&info_path, "/proc/%d/fdinfo/%u", (int)pid, fd), 0);
                info = read_text(info_path);
                if (!*info)
                        continue; /* closed since the readdir: the server side of a client
                                     that just hung up, say */
                const char *flags = strstr(info, "flags:");
                assert_non_null(flags);
                unsigned long v = strtoul(flags + strlen("flags:"), NULL, 8);
                if (!(v & O_CLOEXEC))
                        fail_msg("fd %u (%s) of fake-qemu lacks O_CLOEXEC", fd, target);
        }
        return TAKE_PTR(out);
}

static void test_vfio_node_held_open(void **state)
{
        Fixture *f = *state;
        spawn_default(f, VF_SYSFSDEV);
        client_free(qmp_open(f)); /* up and serving */

        _cleanup_free_ char *node = NULL, *targets = fd_targets(f->pid, true);
        assert_int_equal(strprintf(&node, "%s/dev/vfio/" VF_GROUP "\n", f->dir), 0);
        if (!strstr(targets, node))
                fail_msg("fake-qemu does not hold %s; its fds:\n%s", node, targets);
        /* Only the group node of its own VF. */
        assert_null(strstr(targets, "/dev/vfio/" MDEV_GROUP "\n"));
        wait_console(f, "fake-qemu: started name=" NAME " pid=");
        wait_console(f, " vf=" VF " flags=none gpu=ok\n");
}

static void test_vfio_mdev_node_held_open(void **state)
{
        Fixture *f = *state;
        spawn_default(f, MDEV_SYSFSDEV);
        client_free(qmp_open(f));

        _cleanup_free_ char *node = NULL, *targets = fd_targets(f->pid, true);
        assert_int_equal(strprintf(&node, "%s/dev/vfio/" MDEV_GROUP "\n", f->dir), 0);
        if (!strstr(targets, node))
                fail_msg("fake-qemu does not hold %s; its fds:\n%s", node, targets);
}

/* A GPU-less instance opens no VFIO node, and works without any simulator directory. */
static void test_gpu_less(void **state)
{
        Fixture *f = *state;
        _cleanup_free_ char *sim = NULL;
        assert_int_equal(strprintf(&sim, "%s/.sim", f->dir), 0);
        assert_int_equal(test_remove_tree_at(AT_FDCWD, sim), 0);

        spawn_default(f, NULL);
        client_free(qmp_open(f));
        _cleanup_free_ char *targets = fd_targets(f->pid, true);
        assert_null(strstr(targets, "/dev/vfio/"));
        check_init_status(f, "ok", "");
        wait_console(f, " vf=none flags=none gpu=none\n");
}

/* Like QEMU, no VFIO group node means no VM. */
static void test_vfio_node_missing(void **state)
{
        Fixture *f = *state;
        _cleanup_free_ char *node = NULL;
        assert_int_equal(strprintf(&node, "%s/dev/vfio/" VF_GROUP, f->dir), 0);
        assert_int_equal(unlink(node), 0);

        spawn_default(f, VF_SYSFSDEV);
        assert_exited_with(f, 1);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want, "vfio: error opening %s/dev/vfio/" VF_GROUP, f->dir), 0);
        assert_true(file_contains(f->qemu_log, want));
        assert_false(file_contains(f->qemu_log, "started"));
}

static void test_vfio_no_iommu_group(void **state)
{
        Fixture *f = *state;
        _cleanup_free_ char *link = NULL;
        assert_int_equal(strprintf(&link, "%s/sys/devices/pci0000:e0/" VF "/iommu_group", f->dir),
                         0);
        assert_int_equal(unlink(link), 0);

        spawn_default(f, VF_SYSFSDEV);
        assert_exited_with(f, 1);
        assert_true(file_contains(f->qemu_log, "no iommu_group found"));
}

/* ---- command line (VMM-1, VMM-2) ----------------------------------------------------------- */

/* The optional parts of VMM-1, "-accel tcg" alone, and doubled commas in paths. */
static void test_argv_full(void **state)
{
        Fixture *f = *state;
        make_dir(f, "images,x");
        write_file(f, "images,x/vmlinuz", "kernel");
        write_file(f, "images,x/initrd.img", "initrd");
        write_file(f, "images,x/disk.raw", "disk");

        /* A socket path with a comma: vgpud doubles it on the command line (VMM-2). */
        free(f->qmp_socket);
        assert_int_equal(
            strprintf(&f->qmp_socket, "%s/run/instances/%s/q,mp.sock", f->dir, INSTANCE_ID), 0);

        _cleanup_strv_free_ char **argv = NULL;
        push(&argv, fake_qemu_path());
        const char *head[] = {"-name",       "guest=" NAME ",debug-threads=on",
                              "-machine",    "q35",
                              "-accel",      "tcg",
                              "-cpu",        "max",
                              "-smp",        "1",
                              "-m",          "128M",
                              "-nodefaults", "-no-user-config",
                              "-display",    "none",
                              "-chardev"};
        for (size_t i = 0; i < ELEMENTSOF(head); i++)
                push(&argv, head[i]);
        pushf(&argv, "socket,id=qmp,path=%s/run/instances/%s/q,,mp.sock,server=on,wait=off", f->dir,
              INSTANCE_ID);
        push(&argv, "-mon");
        push(&argv, "chardev=qmp,mode=control");
        push(&argv, "-chardev");
        pushf(&argv, "socket,id=agent0,path=%s,server=on,wait=off", f->agent_socket);
        push(&argv, "-device");
        push(&argv, "virtio-serial-pci,id=vser0");
        push(&argv, "-device");
        push(&argv, "virtserialport,bus=vser0.0,chardev=agent0,name=org.vgpud.agent.0");
        push(&argv, "-chardev");
        pushf(&argv, "file,id=console0,path=%s,append=on", f->console_log);
        push(&argv, "-serial");
        push(&argv, "chardev:console0");
        push(&argv, "-kernel");
        pushf(&argv, "%s/images,x/vmlinuz", f->dir);
        push(&argv, "-initrd");
        pushf(&argv, "%s/images,x/initrd.img", f->dir);
        push(&argv, "-append");
        push(&argv, "console=ttyS0 quiet,x");
        /* DISK-6: boot.disk by descriptor, read-only. */
        push(&argv, "-add-fd");
        push(&argv, "fd=3,set=3");
        push(&argv, "-blockdev");
        push(&argv, "{\"driver\":\"raw\",\"node-name\":\"bootdisk\",\"read-only\":true,"
                    "\"file\":{\"driver\":\"file\",\"filename\":\"/dev/fdset/3\"}}");
        push(&argv, "-device");
        push(&argv, "virtio-blk-pci,drive=bootdisk");
        push(&argv, "-device");
        pushf(&argv, "vfio-pci,sysfsdev=%s/%s", f->dir, VF_SYSFSDEV);

        _cleanup_free_ char *disk_path = NULL;
        assert_int_equal(strprintf(&disk_path, "%s/images,x/disk.raw", f->dir), 0);
        _cleanup_close_ int disk = open(disk_path, O_RDONLY | O_CLOEXEC);
        assert_true(disk >= 0);
        spawn_passing(f, argv, disk);

        _cleanup_client_ Client *c = qmp_open(f);
        client_send(c, "{\"execute\": \"quit\"}\n");
        json_auto_t *reply = qmp_read(c);
        assert_json_equal(reply, "{\"return\": {}}");
        assert_exited_with(f, 0);
}

/* Strict argv: each of these refuses to start with exit 1 and a message naming the problem. */
static void test_argv_rejected(void **state)
{
        Fixture *f = *state;
        struct {
                const char *option; /* argument to replace, or to append when not found */
                const char *replacement;
                const char *extra; /* a second word appended after replacement, or NULL */
                const char *message;
        } cases[] = {
            {NULL, "-vnc", ":0", "unknown option '-vnc'"},
            {NULL, "-nodefaults", NULL, "option -nodefaults given twice"},
            {NULL, "-name", NULL, "option -name requires an argument"},
            {NULL, "stray", NULL, "unexpected argument 'stray'"},
            {NULL, "-device", "e1000,id=net0", "unsupported device 'e1000'"},
            {NULL, "-accel", "xen", "-accel xen"},
            {NULL, "-initrd", "/nonexistent", "-initrd cannot be used without -kernel"},
            {NULL, "-append", "quiet", "-append only allowed with -kernel option"},
            {"8192M", "8192", NULL, "-m 8192: expected <MiB>M"},
            {"4", "0", NULL, "-smp 0: invalid vCPU count"},
            {"q35", "pc", NULL, "-machine pc"},
            {"chardev:console0", "stdio", NULL, "-serial stdio"},
            {"chardev=qmp,mode=control", "chardev=qmp,mode=readline", NULL,
             "parameter 'mode' must be 'control'"},
            {"chardev=qmp,mode=control", "chardev=console0,mode=control", NULL,
             "chardev 'console0' must be a socket chardev"},
            {"chardev=qmp,mode=control", "chardev=nope,mode=control", NULL,
             "chardev 'nope' not found"},
            {"virtio-serial-pci,id=vser0", "virtio-serial-pci,id=vser1", NULL,
             "bus 'vser0.0' not found"},
            {"virtserialport,bus=vser0.0,chardev=agent0,name=org.vgpud.agent.0",
             "virtserialport,bus=vser0.0,chardev=agent0,name=org.qemu.guest_agent.0", NULL,
             "parameter 'name' must be 'org.vgpud.agent.0'"},
            {"guest=" NAME ",debug-threads=on", "guest=../" NAME, NULL, "invalid guest name"},
            {"guest=" NAME ",debug-threads=on", "guest=" NAME ",,debug-threads=on", NULL,
             "invalid guest name"},
            {"guest=" NAME ",debug-threads=on", "guest=" NAME ",debug-threads=on,", NULL,
             "empty parameter"},
            {"guest=" NAME ",debug-threads=on", "guest=" NAME ",guest=x", NULL,
             "parameter 'guest' given twice"},
            {"guest=" NAME ",debug-threads=on", "process=" NAME, NULL,
             "parameter 'guest' is required"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_strv_free_ char **argv = vmm_argv(f, NULL);
                bool replaced = false;
                if (cases[i].option)
                        for (char **a = argv; *a; a++)
                                if (streq(*a, cases[i].option)) {
                                        free(*a);
                                        *a = strdup(cases[i].replacement);
                                        assert_non_null(*a);
                                        replaced = true;
                                        break;
                                }
                if (cases[i].option)
                        assert_true(replaced);
                else {
                        push(&argv, cases[i].replacement);
                        if (cases[i].extra)
                                push(&argv, cases[i].extra);
                }

                assert_true(truncate(f->qemu_log, 0) == 0 || errno == ENOENT);
                spawn(f, argv);
                assert_exited_with(f, 1);
                if (!file_contains(f->qemu_log, cases[i].message)) {
                        _cleanup_free_ char *log = read_text(f->qemu_log);
                        fail_msg("case %zu: want \"%s\" in:\n%s", i, cases[i].message, log);
                }
        }

        /* Nothing was served by any of them. */
        assert_int_equal(access(f->qmp_socket, F_OK), -1);
        assert_int_equal(access(f->agent_socket, F_OK), -1);
}

/* Without a monitor, console or agent port fake-qemu cannot do its job: refused. */
static void test_argv_required_parts(void **state)
{
        Fixture *f = *state;
        const char *drop[][2] = {
            {"-mon", "a QMP monitor"},
            {"-serial", "a console"},
            {"-name", "-name guest=<name> is required"},
        };
        for (size_t i = 0; i < ELEMENTSOF(drop); i++) {
                _cleanup_strv_free_ char **argv = vmm_argv(f, NULL);
                size_t n = strv_length(argv);
                for (size_t j = 0; j + 1 < n; j++)
                        if (streq(argv[j], drop[i][0])) {
                                free(argv[j]);
                                free(argv[j + 1]);
                                memmove(argv + j, argv + j + 2, (n - j - 1) * sizeof(char *));
                                break;
                        }
                assert_int_equal(strv_length(argv), n - 2);
                spawn(f, argv);
                assert_exited_with(f, 1);
                assert_true(file_contains(f->qemu_log, drop[i][1]));
        }
}

/* A small file to stand for a disk (and, readable, for a kernel); its path. */
static char *make_disk(Fixture *f)
{
        char *path = NULL;
        write_file(f, "disk.raw", "disk");
        assert_int_equal(strprintf(&path, "%s/disk.raw", f->dir), 0);
        return path;
}

/*
 * Case i of a command-line table: with no message fake-qemu started (it answers QMP and quits
 * cleanly); with one it refused to start, exit 1, saying message in qemu.log.
 */
static void assert_case_outcome(Fixture *f, size_t i, const char *message)
{
        if (!message) {
                _cleanup_client_ Client *c = qmp_open(f);
                client_send(c, "{\"execute\": \"quit\"}\n");
                json_auto_t *reply = qmp_read(c);
                assert_json_equal(reply, "{\"return\": {}}");
                assert_exited_with(f, 0);
                return;
        }
        assert_exited_with(f, 1);
        if (!file_contains(f->qemu_log, message)) {
                _cleanup_free_ char *log = read_text(f->qemu_log);
                fail_msg("case %zu: want \"%s\" in:\n%s", i, message, log);
        }
}

/*
 * The disk as QEMU takes it (VMM-1, DISK-6): -add-fd names an inherited descriptor, -blockdev
 * an fd set, the device a node; and a read-only node needs a read-only descriptor.
 */
static void test_argv_disk(void **state)
{
        Fixture *f = *state;
        _cleanup_free_ char *disk_path = make_disk(f);
        const char *blockdev_ro = "driver=raw,node-name=bootdisk,read-only=on,file.driver=file,"
                                  "file.filename=/dev/fdset/3";
        struct {
                int mode; /* the passed descriptor's, or -1: none */
                const char *add_fd, *blockdev, *device;
                const char *message; /* NULL: starts */
        } cases[] = {
            {O_RDONLY, "fd=3,set=3", blockdev_ro, "virtio-blk-pci,drive=bootdisk", NULL},
            {O_RDWR, "fd=3,set=3", blockdev_ro, "virtio-blk-pci,drive=bootdisk",
             "access mode does not match read-only=on"},
            {-1, "fd=3,set=3", blockdev_ro, "virtio-blk-pci,drive=bootdisk", "fd 3 is not open"},
            {O_RDONLY, "fd=3,set=4", blockdev_ro, "virtio-blk-pci,drive=bootdisk",
             "Could not open '/dev/fdset/3'"},
            {O_RDONLY, "fd=3,set=3", blockdev_ro, "virtio-blk-pci,drive=root",
             "Cannot find device nor node name 'root'"},
            {O_RDONLY, "fd=3,set=3", blockdev_ro, NULL, "no device uses it"},
            {O_RDONLY, "fd=3,set=3",
             "driver=vmdk,node-name=bootdisk,file.driver=file,file.filename=/dev/fdset/3",
             "virtio-blk-pci,drive=bootdisk", "unknown driver 'vmdk'"},
            {O_RDONLY, "fd=3,set=3",
             "driver=raw,node-name=bootdisk,read-only=on,aio=native,file.driver=file,"
             "file.filename=/dev/fdset/3",
             "virtio-blk-pci,drive=bootdisk", "unknown key 'aio'"},
            /* The JSON form meets the same checks, key by dotted key. */
            {O_RDONLY, "fd=3,set=3",
             "{\"driver\":\"raw\",\"node-name\":\"bootdisk\",\"read-only\":true,\"file\":"
             "{\"driver\":\"file\",\"filename\":\"/dev/fdset/3\"}}",
             "virtio-blk-pci,drive=bootdisk", NULL},
            {O_RDWR, "fd=3,set=3",
             "{\"driver\":\"raw\",\"node-name\":\"bootdisk\",\"read-only\":true,\"file\":"
             "{\"driver\":\"file\",\"filename\":\"/dev/fdset/3\"}}",
             "virtio-blk-pci,drive=bootdisk", "access mode does not match read-only=on"},
            {O_RDONLY, "fd=3,set=3",
             "{\"driver\":\"raw\",\"node-name\":\"bootdisk\",\"read-only\":true,\"file\":"
             "{\"driver\":\"file\",\"filename\":\"/dev/fdset/3\",\"locking\":\"off\"}}",
             "virtio-blk-pci,drive=bootdisk", "unknown key 'file.locking'"},
            {O_RDONLY, "fd=3,set=3",
             "{\"driver\":\"nbd\",\"node-name\":\"bootdisk\",\"file\":"
             "{\"driver\":\"file\",\"filename\":\"/dev/fdset/3\"}}",
             "virtio-blk-pci,drive=bootdisk", "unknown driver 'nbd'"},
            {O_RDONLY, "fd=3,set=3", "{\"driver\":\"raw\",\"driver\":\"raw\"}",
             "virtio-blk-pci,drive=bootdisk", "invalid JSON"},
            {O_RDWR, "fd=3,set=3",
             "{\"driver\":\"raw\",\"node-name\":\"bootdisk\",\"detect-zeroes\":\"unmap\","
             "\"file\":{\"driver\":\"file\",\"filename\":\"/dev/fdset/3\"}}",
             "virtio-blk-pci,drive=bootdisk", "without setting discard operation to unmap"},
            {O_RDONLY, "fd=3,set=3",
             "driver=raw,node-name=bootdisk,read-only=on,file.driver=file,file.filename=/x.raw",
             "virtio-blk-pci,drive=bootdisk", "file.filename must be /dev/fdset/<n>"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_strv_free_ char **argv = vmm_argv(f, NULL);
                push(&argv, "-kernel");
                pushf(&argv, "%s/disk.raw", f->dir); /* any readable file will do */
                push(&argv, "-add-fd");
                push(&argv, cases[i].add_fd);
                push(&argv, "-blockdev");
                push(&argv, cases[i].blockdev);
                if (cases[i].device) {
                        push(&argv, "-device");
                        push(&argv, cases[i].device);
                }
                _cleanup_close_ int fd =
                    cases[i].mode < 0 ? -1 : open(disk_path, cases[i].mode | O_CLOEXEC);
                assert_true(cases[i].mode < 0 || fd >= 0);
                assert_true(truncate(f->qemu_log, 0) == 0 || errno == ENOENT);
                spawn_passing(f, argv, fd);
                assert_case_outcome(f, i, cases[i].message);
        }
}

/*
 * VMM-1's future parts as the renderer writes them (DISK-9, SEED-2, NET-3): a writable root,
 * a volume, the seed cdrom and a TAP with vhost-net, each cross-reference resolved; then the
 * refusals of each reference that does not hold.
 */
/*
 * A real TAP of that name, as vgpud opens it (NET-3): fake-qemu checks its descriptor with
 * TUNGETIFF (SIM-15). In the network namespace main() made; -1 without one.
 */
static bool in_private_netns;

static int open_tap(const char *name)
{
        if (!in_private_netns)
                return -1;
        int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
        if (fd < 0)
                return -1;
        struct ifreq ifr = {.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR};
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
        if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
                close(fd);
                return -1;
        }
        return fd;
}

#define TAP_NAME "vgtk3x9q2m8v1c4" /* "vgt" and INSTANCE_ID's first 12 characters */

static void test_argv_drives_and_nic(void **state)
{
        Fixture *f = *state;
        if (!in_private_netns)
                skip(); /* a TAP needs root, in a network namespace of the test's own (NET-11) */
        _cleanup_free_ char *disk_path = make_disk(f);
        const char *root = "{\"driver\":\"qcow2\",\"node-name\":\"root\",\"cache\":{\"direct\":"
                           "true},\"discard\":\"unmap\",\"detect-zeroes\":\"unmap\",\"file\":{"
                           "\"driver\":\"file\",\"filename\":\"/dev/fdset/5\"}}";
        const char *volume = "{\"driver\":\"qcow2\",\"node-name\":\"vol-v1\",\"discard\":"
                             "\"unmap\",\"file\":{\"driver\":\"file\",\"filename\":"
                             "\"/dev/fdset/6\"}}";
        const char *seed = "{\"driver\":\"raw\",\"node-name\":\"seed\",\"read-only\":true,\"file\""
                           ":{\"driver\":\"file\",\"filename\":\"/dev/fdset/7\"}}";
        struct {
                const char *from, *to; /* an argument replaced in the good command line */
                bool drop_tap;         /* descriptor 3 left closed */
                const char *message;   /* NULL: starts */
                const char *tap;       /* the TAP's name, NULL: /dev/null in its place */
        } cases[] = {
            {NULL, NULL, false, NULL},
            /* SIM-15: fd 3 must be a TAP, the instance's own. */
            {NULL, NULL, false, "fd=3 is not a TAP device", .tap = ""},
            {NULL, NULL, false, "fd=3 is TAP vgtsomeoneelse, expected " TAP_NAME,
             .tap = "vgtsomeoneelse"},
            {"tap,id=net0,fd=3,vhost=on,vhostfd=4", "tap,id=net0,fd=3,vhostfd=4", false,
             "vhostfd goes"},
            {"tap,id=net0,fd=3,vhost=on,vhostfd=4", "tap,id=net0,fd=3", false, NULL},
            {"tap,id=net0,fd=3,vhost=on,vhostfd=4", "tap,id=net0,fd=3,vhost=off", false, NULL},
            {NULL, NULL, true, "fd 3 is not open"},
            {"tap,id=net0,fd=3,vhost=on,vhostfd=4", "user,id=net0", false, "unknown type 'user'"},
            {"tap,id=net0,fd=3,vhost=on,vhostfd=4", "tap,id=net0,fd=3,vhost=on,vhostfd=4,queues=2",
             false, "unknown key 'queues'"},
            {"virtio-net-pci,netdev=net0,mac=52:54:00:aa:bb:cc",
             "virtio-net-pci,netdev=net1,mac=52:54:00:aa:bb:cc", false, "netdev 'net1' not found"},
            {"virtio-net-pci,netdev=net0,mac=52:54:00:aa:bb:cc",
             "virtio-net-pci,netdev=net0,mac=52:54:00:AA:BB:CC", false, "invalid mac"},
            {"virtio-net-pci,netdev=net0,mac=52:54:00:aa:bb:cc", "vfio-pci,sysfsdev=/none", false,
             "no virtio-net-pci device uses it"},
            {"virtio-blk-pci,drive=vol-v1,serial=v1", "virtio-blk-pci,drive=vol-v1,bootindex=1",
             false, "bootindex 1 is already used"},
            {"virtio-blk-pci,drive=vol-v1,serial=v1", "virtio-blk-pci,drive=root", false,
             "node is already in use"},
            {"ide-cd,bus=ide.1,drive=seed", "ide-cd,drive=seed", false,
             "parameter 'bus' is required"},
            {"ide-cd,bus=ide.1,drive=seed", "ide-cd,bus=ide.9,drive=seed", false,
             "key 'bus' must be one of"},
            {"ide-cd,bus=ide.1,drive=seed", "ide-cd,bus=ide.1,drive=seed,serial=x", false,
             "unknown key 'serial'"},
            /* A writable node needs a read-write descriptor (fd 7 is read-only). */
            {seed,
             "{\"driver\":\"raw\",\"node-name\":\"seed\",\"file\":{\"driver\":\"file\","
             "\"filename\":\"/dev/fdset/7\"}}",
             false, "access mode does not match read-only=off"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_strv_free_ char **argv = vmm_argv(f, NULL);
                const char *tail[] = {
                    "-add-fd",   "fd=5,set=5",
                    "-blockdev", root,
                    "-device",   "virtio-blk-pci,drive=root,bootindex=1",
                    "-add-fd",   "fd=6,set=6",
                    "-blockdev", volume,
                    "-device",   "virtio-blk-pci,drive=vol-v1,serial=v1",
                    "-add-fd",   "fd=7,set=7",
                    "-blockdev", seed,
                    "-device",   "ide-cd,bus=ide.1,drive=seed",
                    "-netdev",   "tap,id=net0,fd=3,vhost=on,vhostfd=4",
                    "-device",   "virtio-net-pci,netdev=net0,mac=52:54:00:aa:bb:cc"};
                bool replaced = !cases[i].from;
                for (size_t k = 0; k < ELEMENTSOF(tail); k++) {
                        bool hit = cases[i].from && streq(tail[k], cases[i].from);
                        replaced = replaced || hit;
                        push(&argv, hit ? cases[i].to : tail[k]);
                }
                assert_true(replaced);
                push(&argv, "-kernel");
                push(&argv, disk_path); /* any readable file will do */

                /* The TAP, and a vhost-net stand-in: any open descriptor. */
                const char *tap_name = cases[i].tap ? cases[i].tap : TAP_NAME;
                _cleanup_close_ int tap = tap_name[0] ? open_tap(tap_name)
                                                      : open("/dev/null", O_RDWR | O_CLOEXEC),
                                    vhost = open("/dev/null", O_RDWR | O_CLOEXEC),
                                    rw1 = open(disk_path, O_RDWR | O_CLOEXEC),
                                    rw2 = open(disk_path, O_RDWR | O_CLOEXEC),
                                    ro = open(disk_path, O_RDONLY | O_CLOEXEC);
                const int fds[] = {cases[i].drop_tap ? -1 : tap, vhost, rw1, rw2, ro};
                assert_true(truncate(f->qemu_log, 0) == 0 || errno == ENOENT);
                assert_true(tap >= 0);
                spawn_passing_fds(f, argv, fds, ELEMENTSOF(fds));
                if (i == 0)
                        wait_console(f, "fake-qemu: nic net0 tap=" TAP_NAME
                                        " mac=52:54:00:aa:bb:cc vhost=on\n");
                assert_case_outcome(f, i, cases[i].message);
        }
}

/* QEMU will not start with a kernel it cannot read. */
static void test_argv_missing_kernel(void **state)
{
        Fixture *f = *state;
        _cleanup_strv_free_ char **argv = vmm_argv(f, NULL);
        push(&argv, "-kernel");
        pushf(&argv, "%s/no-such-vmlinuz", f->dir);
        spawn(f, argv);
        assert_exited_with(f, 1);
        assert_true(file_contains(f->qemu_log, "could not open kernel"));
}

/* ---- the console socket (CONS-1) ---------------------------------------------------------- */

/* VMM-1's argv with the console as CONS-1's socket chardev (logfile given unless !logfile). */
static char **vmm_argv_console_socket(const Fixture *f, const char *socket_path, bool logfile)
{
        char **argv = vmm_argv(f, NULL);
        for (char **a = argv; *a; a++) {
                if (!startswith(*a, "file,id=console0,"))
                        continue;
                free(*a);
                if (logfile)
                        assert_int_equal(strprintf(a,
                                                   "socket,id=console0,path=%s,server=on,wait=off,"
                                                   "logfile=%s,logappend=on",
                                                   socket_path, f->console_log),
                                         0);
                else
                        assert_int_equal(strprintf(a,
                                                   "socket,id=console0,path=%s,server=on,wait=off",
                                                   socket_path),
                                         0);
                return argv;
        }
        fail_msg("no console chardev in the argv");
        return NULL;
}

/*
 * CONS-1, SIM-15: the console socket echoes what a client types and logs it; fake-qemu's own
 * lines reach the client and the log alike; the next client is served after a hang-up.
 */
static void test_console_socket_echoes(void **state)
{
        Fixture *f = *state;
        _cleanup_free_ char *sock = NULL;
        assert_int_equal(strprintf(&sock, "%s/run/instances/%s/console.sock", f->dir, INSTANCE_ID),
                         0);
        _cleanup_strv_free_ char **argv = vmm_argv_console_socket(f, sock, true);
        spawn(f, argv);
        wait_console(f, "fake-qemu: started name=" NAME);

        {
                _cleanup_client_ Client *c = client_connect(f, sock);
                client_send(c, "echo hello\n");
                _cleanup_free_ char *line = NULL;
                assert_int_equal(client_read_line(c, DEADLINE_MS, &line, NULL), 0);
                assert_string_equal(line, "echo hello");
                wait_console(f, "\necho hello\n");
        }

        _cleanup_client_ Client *c = client_connect(f, sock);
        client_send(c, "again\n");
        _cleanup_free_ char *line = NULL, *signal = NULL;
        assert_int_equal(client_read_line(c, DEADLINE_MS, &line, NULL), 0);
        assert_string_equal(line, "again");
        assert_int_equal(kill(f->pid, SIGUSR1), 0);
        assert_int_equal(client_read_line(c, DEADLINE_MS, &signal, NULL), 0);
        assert_non_null(startswith(signal, "fake-qemu: signal SIGUSR1 pid="));
        wait_console(f, "fake-qemu: signal SIGUSR1 pid=");
}

/* CONS-1: the serial console's socket must keep a log (fake-qemu finds the simulator by it). */
static void test_console_socket_needs_logfile(void **state)
{
        Fixture *f = *state;
        _cleanup_free_ char *sock = NULL;
        assert_int_equal(strprintf(&sock, "%s/run/instances/%s/console.sock", f->dir, INSTANCE_ID),
                         0);
        _cleanup_strv_free_ char **argv = vmm_argv_console_socket(f, sock, false);
        spawn(f, argv);
        assert_exited_with(f, 1);
        _cleanup_free_ char *log = read_text(f->qemu_log);
        assert_non_null(strstr(log, "-serial: socket chardev 'console0' needs a logfile"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
            T(test_qmp_readiness_exchange),
            T(test_qmp_errors),
            T(test_qmp_sequential_clients),
            T(test_qmp_client_gone_before_greeting),
            T(test_qmp_system_powerdown),
            T(test_qmp_quit),
            T(test_sigterm_exits),
            T(test_signals_logged),
            T(test_flag_ignore_sigterm),
            T(test_flag_hang_qmp),
            T(test_flag_exit_early),
            T(test_flag_exit_early_zero),
            T(test_flag_silent_agent),
            T(test_flags_combined),
            T(test_flags_invalid),
            T(test_flags_other_instance),
            T(test_agent_commands),
            T(test_agent_errors),
            T(test_agent_sequential_clients),
            T(test_agent_wedged_vf),
            T(test_agent_healthy_vf),
            T(test_agent_wedged_mdev),
            T(test_state_invalid),
            T(test_vfio_node_held_open),
            T(test_vfio_mdev_node_held_open),
            T(test_gpu_less),
            T(test_vfio_node_missing),
            T(test_vfio_no_iommu_group),
            T(test_argv_full),
            T(test_argv_rejected),
            T(test_argv_required_parts),
            T(test_argv_missing_kernel),
            T(test_argv_disk),
            T(test_argv_drives_and_nic),
            T(test_console_socket_echoes),
            T(test_console_socket_needs_logfile),
#undef T
        };
        /* NET-11: TAPs only in a network namespace of this test's own, never the host's. */
        in_private_netns = geteuid() == 0 && unshare(CLONE_NEWNET) == 0;
        return cmocka_run_group_tests(tests, NULL, NULL);
}
