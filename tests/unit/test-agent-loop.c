/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * vgpu-agent's loop end to end (SPEC §9), in this process: the Agent of src/agent/agent.h with a
 * socketpair or a pty standing in for the virtio-serial port, a FIFO or a file for /dev/kmsg,
 * and a stand-in nvidia-smi (a shell script whose exit status the test writes to a file). The
 * test is the host: it writes requests to its end and steps the agent's loop until the reply
 * is there, bounded in time, never sleeping a fixed time. Timers that would take seconds (the
 * write timeout, the port look-up) run on a clock the test moves.
 *
 * The last test runs the built vgpu-agent binary itself ($VGPU_AGENT) on a pty.
 */
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent/agent.h"
#include "config.h"
#include "testlib.h"

#define STEP (20 * NSEC_PER_MSEC)
#define FAILURE_TEXT "NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x22:0x65:884)"

typedef struct Fixture {
        TestTree *tree;
        AgentOptions o;
        Agent *a;
        int host; /* the test's end of the port */
        TestLog log;
        bool fake_clock;
        nsec_t now;
        char *smi, *kmsg;
        char rbuf[256 * 1024];
        size_t rlen;
} Fixture;

static nsec_t fixture_clock(void *userdata)
{
        Fixture *f = userdata;
        return f->now;
}

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(test_tree_new("vgpud-agent-loop", &f->tree), 0);
        agent_options_init(&f->o);
        f->o.gpu_watch = GPU_WATCH_OFF;
        f->o.pci_root = f->tree->dir;
        f->smi = test_tree_path(f->tree, "nvidia-smi");
        f->kmsg = test_tree_path(f->tree, "kmsg");
        f->o.kmsg = f->kmsg;
        f->o.nvidia_smi = f->smi;
        f->o.serial = "/nonexistent/port";
        f->host = -1;
        f->now = 1000 * NSEC_PER_SEC;
        assert_int_equal(test_log_start(&f->log), 0);
        signal(SIGPIPE, SIG_IGN);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        agent_free(f->a);
        closep(&f->host);
        test_log_stop(&f->log);
        free(f->smi);
        free(f->kmsg);
        test_tree_free(f->tree);
        free(f);
        return 0;
}

static void start_agent(Fixture *f, int port_fd)
{
        _cleanup_free_ char *error = NULL;
        if (agent_new(&f->o, &f->a, &error) < 0)
                fail_msg("agent_new: %s", error);
        if (f->fake_clock)
                agent_set_clock(f->a, fixture_clock, f);
        if (port_fd >= 0)
                agent_set_port_fd(f->a, port_fd);
        agent_start(f->a, f->fake_clock ? f->now : agent_now());
}

/* The port as a socketpair: the agent gets one end, the test keeps the other. */
static void start_agent_socketpair(Fixture *f)
{
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        f->host = sv[1];
        start_agent(f, sv[0]);
}

/* One turn of the agent's loop; with the agent in another process, a short wait for its reply. */
static void step(Fixture *f)
{
        if (f->a) {
                assert_true(agent_step(f->a, STEP) >= 0);
                return;
        }
        struct pollfd p = {.fd = f->host, .events = POLLIN};
        (void)poll(&p, 1, (int)(STEP / NSEC_PER_MSEC));
}

#define WAIT_UNTIL(f, cond)                                                 \
        do {                                                                \
                nsec_t _deadline = test_now() + TEST_WAIT_LIMIT;            \
                while (!(cond)) {                                           \
                        if (test_now() > _deadline)                         \
                                fail_msg("%s: not reached in time", #cond); \
                        step(f);                                            \
                }                                                           \
        } while (0)

/* Writes all of text to the host end, stepping the agent while the port is full. */
static void host_write(Fixture *f, const char *text, size_t n)
{
        nsec_t deadline = test_now() + TEST_WAIT_LIMIT;
        while (n > 0) {
                ssize_t k = write(f->host, text, n);
                if (k > 0) {
                        text += k;
                        n -= (size_t)k;
                        continue;
                }
                assert_true(k < 0 && errno == EAGAIN);
                if (test_now() > deadline)
                        fail_msg("host write: port full for too long");
                step(f);
        }
}

static void host_send(Fixture *f, const char *line)
{
        host_write(f, line, strlen(line));
        host_write(f, "\n", 1);
}

static void host_read_some(Fixture *f)
{
        for (;;) {
                assert_true(f->rlen < sizeof f->rbuf);
                ssize_t k = read(f->host, f->rbuf + f->rlen, sizeof f->rbuf - f->rlen);
                if (k <= 0)
                        return;
                f->rlen += (size_t)k;
        }
}

/* The next reply line (without its newline), stepping the agent until it is there. */
static char *host_reply(Fixture *f)
{
        nsec_t deadline = test_now() + TEST_WAIT_LIMIT;
        for (;;) {
                host_read_some(f);
                char *nl = memchr(f->rbuf, '\n', f->rlen);
                if (nl) {
                        size_t n = (size_t)(nl - f->rbuf);
                        char *line = strndup(f->rbuf, n);
                        assert_non_null(line);
                        memmove(f->rbuf, nl + 1, f->rlen - n - 1);
                        f->rlen -= n + 1;
                        return line;
                }
                if (test_now() > deadline)
                        fail_msg("no reply in time");
                step(f);
        }
}

static void assert_exchange(Fixture *f, const char *request, const char *expected)
{
        host_send(f, request);
        _cleanup_free_ char *reply = host_reply(f);
        assert_string_equal(reply, expected);
}

/* Steps the agent for at least d of real time. */
static void run_for(Fixture *f, nsec_t d)
{
        nsec_t end = test_now() + d;
        while (test_now() < end)
                step(f);
}

static void put_smi(Fixture *f)
{
        _cleanup_free_ char *text = NULL;
        assert_int_equal(strprintf(&text,
                                   "#!/bin/sh\n"
                                   "[ -e '%1$s/hang' ] && : >'%1$s/hanging' && exec sleep 1000\n"
                                   "exit $(cat '%1$s/status')\n",
                                   f->tree->dir),
                         0);
        assert_int_equal(test_tree_put(f->tree, text, "nvidia-smi"), 0);
        assert_int_equal(chmod(f->smi, 0755), 0);
}

#define STATUS_REQUEST "{\"execute\":\"guest-gpu-init-status\",\"id\":1}"
#define STATUS_REPLY(state, msg) \
        "{\"return\":{\"state\":\"" state "\",\"failure_message\":\"" msg "\"},\"id\":1}"

/* AGENT-4/5/9..12 together: a hung probe does not hold requests or the watcher up, a failed
 * probe never sets failed, the latest record wins, success is terminal. */
static void test_loop_gpu_states(void **state)
{
        Fixture *f = *state;
        put_smi(f);
        assert_int_equal(test_tree_put(f->tree, "1", "status"), 0);
        assert_int_equal(test_tree_put(f->tree, "", "hang"), 0);
        assert_int_equal(mkfifo(f->kmsg, 0600), 0);
        f->o.gpu_watch = GPU_WATCH_ON;
        f->o.probe_kill_after = 2 * NSEC_PER_SEC;
        f->o.probe_retry_after = 50 * NSEC_PER_MSEC;
        start_agent_socketpair(f);
        assert_true(f->a->watching);
        _cleanup_close_ int kw = open(f->kmsg, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        assert_true(kw >= 0);

        /* AGENT-12: the first attempt hangs; the agent answers and watches meanwhile */
        assert_int_equal(f->a->probe.state, PROBE_RUNNING);
        WAIT_UNTIL(f, faccessat(f->tree->fd, "hanging", F_OK, 0) == 0);
        assert_exchange(f, "{\"execute\":\"guest-ping\"}", "{\"return\":{}}");
        assert_exchange(f, STATUS_REQUEST, STATUS_REPLY("unknown", ""));
        const char *rec = "3,10,100,-;" FAILURE_TEXT "\n";
        assert_int_equal(write(kw, rec, strlen(rec)), (ssize_t)strlen(rec));
        WAIT_UNTIL(f, f->a->gpu.state == GPU_INIT_FAILED);
        assert_int_equal(f->a->probe.state, PROBE_RUNNING);
        assert_int_equal(f->a->probe.attempts, 1);
        assert_exchange(f, STATUS_REQUEST, STATUS_REPLY("failed", FAILURE_TEXT));

        /* AGENT-10: killed after --probe-kill-after, reaped, then retried; failures (exit 1)
         * leave the state alone (AGENT-11) */
        assert_int_equal(unlinkat(f->tree->fd, "hang", 0), 0);
        WAIT_UNTIL(f, f->a->probe.attempts >= 3);
        if (!strstr(test_log_text(&f->log), "killed after 2s"))
                fail_msg("no kill in the log: %s", test_log_text(&f->log));
        assert_non_null(strstr(test_log_text(&f->log), "exited with status 1"));
        assert_exchange(f, STATUS_REQUEST, STATUS_REPLY("failed", FAILURE_TEXT));

        /* AGENT-5: the latest record wins; a user-facility record is not one */
        const char *rec2 = "14,11,110,-;NVRM: forged RmInitAdapter failed!\n"
                           "6,12,120,-;NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x25)\n";
        assert_int_equal(write(kw, rec2, strlen(rec2)), (ssize_t)strlen(rec2));
        WAIT_UNTIL(f, f->a->kmsg.records >= 3);
        assert_exchange(
            f, STATUS_REQUEST,
            STATUS_REPLY("failed", "NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x25)"));

        /* AGENT-4/11: exit status 0 sets ok */
        assert_int_equal(test_tree_put(f->tree, "0", "status"), 0);
        WAIT_UNTIL(f, f->a->gpu.state == GPU_INIT_OK);
        assert_int_equal(f->a->probe.state, PROBE_SUCCEEDED);
        assert_exchange(f, STATUS_REQUEST, STATUS_REPLY("ok", ""));
        assert_non_null(strstr(test_log_text(&f->log), "<6>GPU driver initialized\n"));

        /* AGENT-4: ok is terminal, even when a later failure record arrives */
        unsigned long long matches = f->a->kmsg.matches;
        assert_int_equal(write(kw, rec, strlen(rec)), (ssize_t)strlen(rec));
        WAIT_UNTIL(f, f->a->kmsg.matches > matches);
        assert_exchange(f, STATUS_REQUEST, STATUS_REPLY("ok", ""));

        /* AGENT-8: the writer's close is the FIFO's EOF, which ends the watch only */
        closep(&kw);
        kw = -1;
        WAIT_UNTIL(f, f->a->kmsg.state == KMSG_WATCH_ENDED);
        assert_exchange(f, "{\"execute\":\"guest-ping\",\"id\":\"x\"}",
                        "{\"return\":{},\"id\":\"x\"}");
}

/* AGENT-14, AGENT-15, AGENT-16, AGENT-17 over the loop: replies in order, errors, blank lines, an
 * over-long line that arrives in pieces. */
static void test_loop_protocol(void **state)
{
        Fixture *f = *state;
        start_agent_socketpair(f);
        assert_false(f->a->watching);

        const char *batch = "{\"execute\":\"guest-ping\",\"id\":1}\n\n"
                            "{\"execute\":\"guest-reboot\",\"id\":2}\n"
                            "not json\n"
                            "{\"execute\":\"guest-gpu-init-status\",\"id\":3}\n";
        host_write(f, batch, strlen(batch));
        _cleanup_free_ char *r1 = host_reply(f), *r2 = host_reply(f), *r3 = host_reply(f),
                            *r4 = host_reply(f);
        assert_string_equal(r1, "{\"return\":{},\"id\":1}");
        assert_string_equal(r2, "{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"command "
                                "\\\"guest-reboot\\\" not found\"},\"id\":2}");
        assert_true(
            startswith(r3, "{\"error\":{\"class\":\"GenericError\",\"desc\":\"invalid JSON: "));
        assert_string_equal(
            r4, "{\"return\":{\"state\":\"unknown\",\"failure_message\":\"\"},\"id\":3}");

        /* AGENT-17: 70000 bytes in pieces, then the rest of the line and a request */
        size_t big = 70000;
        _cleanup_free_ char *junk = malloc(big);
        assert_non_null(junk);
        memset(junk, 'a', big);
        for (size_t off = 0; off < big; off += 9000)
                host_write(f, junk + off, big - off < 9000 ? big - off : 9000);
        _cleanup_free_ char *r5 = host_reply(f);
        assert_string_equal(r5, "{\"error\":{\"class\":\"GenericError\",\"desc\":\"request line "
                                "exceeds 65536 bytes\"}}");
        host_write(f, junk, 5000);
        assert_exchange(f, "tail of the long line\n{\"execute\":\"guest-ping\",\"id\":4}",
                        "{\"return\":{},\"id\":4}");
        /* AGENT-16: the connection stayed open through all of it */
        assert_exchange(f, "{\"execute\":\"guest-info\",\"id\":5}",
                        "{\"return\":{\"version\":\"" VGPUD_VERSION "\",\"supported_commands\":["
                        "{\"name\":\"guest-ping\",\"enabled\":true},"
                        "{\"name\":\"guest-info\",\"enabled\":true},"
                        "{\"name\":\"guest-gpu-init-status\",\"enabled\":true}]},\"id\":5}");
}

/* ---- AGENT-19: the host comes and goes -------------------------------------------------- */

static int open_slave(const char *name)
{
        int fd = open(name, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
        assert_true(fd >= 0);
        struct termios t;
        assert_int_equal(tcgetattr(fd, &t), 0);
        cfmakeraw(&t);
        assert_int_equal(tcsetattr(fd, TCSANOW, &t), 0);
        return fd;
}

/* The agent keeps a pty's master as its port; the host connecting and leaving is the test
 * opening and closing the slave, which a master sees as POLLHUP and EIO. */
static void test_loop_disconnect(void **state)
{
        Fixture *f = *state;
        int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        assert_true(master >= 0);
        assert_int_equal(grantpt(master), 0);
        assert_int_equal(unlockpt(master), 0);
        assert_int_equal(fcntl(master, F_SETFL, O_NONBLOCK), 0);
        _cleanup_free_ char *name = strdup(ptsname(master));
        assert_non_null(name);
        f->host = open_slave(name);
        start_agent(f, master);

        assert_exchange(f, "{\"execute\":\"guest-ping\",\"id\":0}", "{\"return\":{},\"id\":0}");

        /* a host leaves in the middle of a line */
        host_write(f, "{\"execute\":\"guest-in", 20);
        run_for(f, 50 * NSEC_PER_MSEC);
        closep(&f->host);
        f->host = -1;
        WAIT_UNTIL(f, f->a->hangups >= 1);

        /* nobody connected: the port is looked at again every 250 ms, not in a busy loop */
        unsigned long long hangups = f->a->hangups, wakeups = f->a->wakeups;
        nsec_t t0 = test_now();
        run_for(f, NSEC_PER_SEC);
        nsec_t took = test_now() - t0;
        unsigned long long seen = f->a->hangups - hangups;
        assert_true(seen >= 2);
        assert_true(seen <= took / AGENT_PORT_PAUSE + 2);
        assert_true(f->a->wakeups - wakeups <= took / STEP + seen + 4);

        /* the next host's request is not glued to the dropped partial line */
        f->host = open_slave(name);
        assert_exchange(f, "{\"execute\":\"guest-ping\",\"id\":1}", "{\"return\":{},\"id\":1}");

        /* connect, request, disconnect, again and again: every request gets its reply */
        for (int i = 0; i < 20; i++) {
                closep(&f->host);
                f->host = -1;
                unsigned long long before = f->a->hangups;
                WAIT_UNTIL(f, f->a->hangups > before);
                f->host = open_slave(name);
                f->rlen = 0;
                char req[64], want[64];
                snprintf(req, sizeof req, "{\"execute\":\"guest-ping\",\"id\":%d}", 100 + i);
                snprintf(want, sizeof want, "{\"return\":{},\"id\":%d}", 100 + i);
                assert_exchange(f, req, want);
        }
}

/* A socketpair's peer that closed is a read of 0: a hang-up too, and no busy loop either. */
static void test_loop_eof_is_hangup(void **state)
{
        Fixture *f = *state;
        start_agent_socketpair(f);
        host_write(f, "{\"execute\":", 11);
        assert_int_equal(shutdown(f->host, SHUT_WR), 0);
        WAIT_UNTIL(f, f->a->hangups >= 1);
        assert_int_equal(f->a->conn.in_len, 0); /* the partial line is gone */
        unsigned long long hangups = f->a->hangups;
        nsec_t t0 = test_now();
        run_for(f, 600 * NSEC_PER_MSEC);
        assert_true(f->a->hangups - hangups <= (test_now() - t0) / AGENT_PORT_PAUSE + 2);
        assert_true(f->a->port_fd >= 0); /* kept */
}

/* A port that fails otherwise (here a descriptor that is no port: EISDIR) is closed and looked
 * up again every second, logged once, instead of being retried four times a second. */
static void test_loop_port_failure(void **state)
{
        Fixture *f = *state;
        f->fake_clock = true;
        _cleanup_free_ char *node = test_tree_path(f->tree, "port");
        assert_int_equal(mkfifo(node, 0600), 0);
        f->o.serial = node;
        int dir = open(f->tree->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(dir >= 0);
        start_agent(f, dir);
        step(f);
        assert_int_equal(f->a->port_failures, 1);
        assert_true(f->a->port_fd < 0);
        assert_non_null(strstr(test_log_text(&f->log), "read virtio-serial port (given): "));
        assert_non_null(strstr(test_log_text(&f->log), "reopening it every second"));
        assert_int_equal(f->a->hangups, 0);

        /* a second later, --serial is opened */
        f->now += NSEC_PER_SEC;
        step(f);
        assert_true(f->a->port_fd >= 0);
        assert_string_equal(f->a->port_path, node);
}

/* AGENT-17: a reply the port does not take within 5 s is dropped with the buffers. */
static void test_loop_write_timeout(void **state)
{
        Fixture *f = *state;
        f->fake_clock = true;
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
        int small = 4096;
        assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
        assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof small), 0);
        f->host = sv[1];
        start_agent(f, sv[0]);

        /* requests with large ids, never read, until a reply is stuck */
        _cleanup_free_ char *req = NULL;
        _cleanup_free_ char *pad = malloc(20001);
        assert_non_null(pad);
        memset(pad, 'p', 20000);
        pad[20000] = 0;
        assert_int_equal(strprintf(&req, "{\"execute\":\"guest-ping\",\"id\":\"%s\"}", pad), 0);
        nsec_t deadline = test_now() + TEST_WAIT_LIMIT;
        while (!conn_has_output(&f->a->conn)) {
                if (test_now() > deadline)
                        fail_msg("no reply got stuck");
                host_send(f, req);
                step(f);
        }
        nsec_t since = f->a->conn.out_since;
        f->now = since + PROTOCOL_WRITE_TIMEOUT - 1;
        step(f);
        assert_true(conn_has_output(&f->a->conn));
        assert_int_equal(f->a->write_timeouts, 0);
        f->now = since + PROTOCOL_WRITE_TIMEOUT;
        step(f);
        assert_int_equal(f->a->write_timeouts, 1);
        assert_false(conn_has_output(&f->a->conn));
        assert_int_equal(f->a->conn.in_len, 0);
        assert_non_null(strstr(test_log_text(&f->log), "within 5s; dropped"));

        /* the host reads again: the agent serves it (after whatever was on the way) */
        f->rlen = 0;
        host_read_some(f);
        f->rlen = 0;
        host_send(f, "{\"execute\":\"guest-ping\",\"id\":\"after\"}");
        for (;;) {
                _cleanup_free_ char *line = host_reply(f);
                if (streq(line, "{\"return\":{},\"id\":\"after\"}"))
                        break;
                /* only the replies to the requests sent before, or a torn one */
                assert_non_null(strstr(line, "pppp"));
        }
}

/* AGENT-1: without udev, the port is found by its name; while it is missing, one notice and
 * another look every second. */
static void test_loop_port_lookup(void **state)
{
        Fixture *f = *state;
        f->fake_clock = true;
        _cleanup_free_ char *serial = test_tree_path(f->tree, "dev/virtio-ports/org.vgpud.agent.0");
        _cleanup_free_ char *dev = test_tree_path(f->tree, "dev");
        _cleanup_free_ char *node = test_tree_path(f->tree, "dev/vport0p1");
        f->o.serial = serial;
        f->o.dev_root = dev;
        start_agent(f, -1);
        assert_true(f->a->port_fd < 0);
        assert_non_null(
            strstr(test_log_text(&f->log), "<5>virtio-serial port org.vgpud.agent.0 not found"));
        test_log_clear(&f->log);

        /* the module loads: the port's name shows up in sysfs, its node in /dev */
        assert_int_equal(
            test_tree_put(f->tree, "org.qemu.guest_agent.0\n", "class/virtio-ports/vport0p2/name"),
            0);
        f->now += NSEC_PER_SEC - 1;
        step(f);
        assert_true(f->a->port_fd < 0);
        f->now += 1;
        step(f);
        assert_true(f->a->port_fd < 0);
        assert_string_equal(test_log_text(&f->log), ""); /* one notice only */
        assert_int_equal(
            test_tree_put(f->tree, "org.vgpud.agent.0\n", "class/virtio-ports/vport0p1/name"), 0);
        assert_int_equal(test_mkdirs_at(f->tree->fd, "dev"), 0);
        assert_int_equal(mkfifo(node, 0600), 0); /* any node that opens read-write */
        f->now += NSEC_PER_SEC;
        step(f);
        assert_true(f->a->port_fd >= 0);
        assert_string_equal(f->a->port_path, node);
        assert_non_null(strstr(test_log_text(&f->log), "serving host requests on "));

        /* with the udev link present, --serial itself is opened */
        agent_free(f->a);
        f->a = NULL;
        assert_int_equal(test_mkdirs_at(f->tree->fd, "dev/virtio-ports"), 0);
        assert_int_equal(
            symlinkat("../vport0p1", f->tree->fd, "dev/virtio-ports/org.vgpud.agent.0"), 0);
        start_agent(f, -1);
        assert_true(f->a->port_fd >= 0);
        assert_string_equal(f->a->port_path, serial);
}

/* AGENT-3: with auto, the watch starts only when an NVIDIA device is there. */
static void test_loop_gpu_watch_auto(void **state)
{
        Fixture *f = *state;
        put_smi(f);
        assert_int_equal(test_tree_put(f->tree, "0", "status"), 0);
        assert_int_equal(test_tree_put(f->tree, "3,1,2,-;" FAILURE_TEXT "\n", "kmsg"), 0);
        assert_int_equal(test_tree_put(f->tree, "0x1af4\n", "bus/pci/devices/0000:00:03.0/vendor"),
                         0);
        f->o.gpu_watch = GPU_WATCH_AUTO;
        start_agent_socketpair(f);
        assert_false(f->a->watching);
        run_for(f, 100 * NSEC_PER_MSEC);
        assert_exchange(f, STATUS_REQUEST, STATUS_REPLY("unknown", ""));
        assert_int_equal(f->a->probe.attempts, 0);
        assert_int_equal(f->a->kmsg.records, 0);
        agent_free(f->a);
        f->a = NULL;
        closep(&f->host);

        assert_int_equal(test_tree_put(f->tree, "0x10de\n", "bus/pci/devices/0000:00:06.0/vendor"),
                         0);
        start_agent_socketpair(f);
        assert_true(f->a->watching);
        WAIT_UNTIL(f, f->a->gpu.state == GPU_INIT_OK);
        assert_exchange(f, STATUS_REQUEST, STATUS_REPLY("ok", ""));
}

/* AGENT-2: SIGTERM (and SIGINT) end the loop. */
static void test_loop_sigterm(void **state)
{
        Fixture *f = *state;
        start_agent_socketpair(f);
        assert_int_equal(agent_step(f->a, 0), 0);
        assert_int_equal(kill(getpid(), SIGTERM), 0);
        int r = 0;
        nsec_t deadline = test_now() + TEST_WAIT_LIMIT;
        while ((r = agent_step(f->a, STEP)) == 0)
                assert_true(test_now() < deadline);
        assert_int_equal(r, 1);
        assert_non_null(strstr(test_log_text(&f->log), "stopping on SIGTERM"));
}

/* ---- the binary ------------------------------------------------------------------------- */

static pid_t spawn_agent(char **argv, int out_fd, int err_fd)
{
        posix_spawn_file_actions_t fa;
        assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
        assert_int_equal(posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO), 0);
        assert_int_equal(posix_spawn_file_actions_adddup2(&fa, err_fd, STDERR_FILENO), 0);
        pid_t pid;
        char *envp[] = {NULL};
        assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, envp), 0);
        posix_spawn_file_actions_destroy(&fa);
        return pid;
}

static int wait_exit(pid_t pid)
{
        nsec_t deadline = test_now() + TEST_WAIT_LIMIT;
        for (;;) {
                int status;
                pid_t r = waitpid(pid, &status, WNOHANG);
                assert_true(r >= 0);
                if (r == pid)
                        return status;
                if (test_now() > deadline) {
                        kill(pid, SIGKILL);
                        waitpid(pid, NULL, 0);
                        fail_msg("vgpu-agent pid %d did not exit", (int)pid);
                }
                (void)poll(NULL, 0, 10);
        }
}

/* The built vgpu-agent: AGENT-1's options, answers on a pty, "<N>" lines on stderr only
 * (AGENT-2), exit 0 on SIGTERM, 2 on a bad option. */
static void test_binary(void **state)
{
        Fixture *f = *state;
        const char *exe = getenv("VGPU_AGENT");
        if (!exe)
                skip();
        put_smi(f);
        assert_int_equal(test_tree_put(f->tree, "1", "status"), 0);
        assert_int_equal(
            test_tree_put(f->tree, "6,1,2,-;Linux\n3,2,3,-;" FAILURE_TEXT "\n", "kmsg"), 0);
        _cleanup_free_ char *err_path = test_tree_path(f->tree, "stderr");
        _cleanup_free_ char *out_path = test_tree_path(f->tree, "stdout");
        _cleanup_close_ int err_fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        _cleanup_close_ int out_fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(err_fd >= 0 && out_fd >= 0);

        /* --version */
        char *vargv[] = {(char *)exe, (char *)"--version", NULL};
        int status = wait_exit(spawn_agent(vargv, out_fd, err_fd));
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        _cleanup_free_ char *out = NULL;
        assert_int_equal(test_read_file(out_path, &out), 0);
        assert_string_equal(out, "vgpu-agent " VGPUD_VERSION "\n");

        /* a bad option */
        char *bargv[] = {(char *)exe, (char *)"--gpu-watch", (char *)"maybe", NULL};
        status = wait_exit(spawn_agent(bargv, out_fd, err_fd));
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 2);

        /* a pty for the port, raw, its slave opened by path as --serial */
        int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
        assert_true(master >= 0);
        assert_int_equal(grantpt(master), 0);
        assert_int_equal(unlockpt(master), 0);
        assert_int_equal(fcntl(master, F_SETFL, O_NONBLOCK), 0);
        /* held open for the whole test: the agent's closing its slave must not hang up the pty */
        _cleanup_close_ int slave = open_slave(ptsname(master));
        assert_true(slave >= 0);
        f->host = master;

        char *argv[] = {(char *)exe,     (char *)"--serial",
                        ptsname(master), (char *)"--gpu-watch",
                        (char *)"on",    (char *)"--kmsg",
                        f->kmsg,         (char *)"--pci-root",
                        f->tree->dir,    (char *)"--nvidia-smi",
                        f->smi,          (char *)"--probe-kill-after",
                        (char *)"5s",    (char *)"--probe-retry-after",
                        (char *)"100ms", (char *)"--probe-give-up-after",
                        (char *)"10m",   (char *)"--kmsg-reopen-after",
                        (char *)"1s",    NULL};
        pid_t pid = spawn_agent(argv, out_fd, err_fd);

        nsec_t deadline = test_now() + TEST_WAIT_LIMIT;
        for (;;) {
                host_send(f, STATUS_REQUEST);
                _cleanup_free_ char *reply = host_reply(f);
                if (streq(reply, STATUS_REPLY("failed", FAILURE_TEXT)))
                        break;
                assert_string_equal(reply, STATUS_REPLY("unknown", ""));
                assert_true(test_now() < deadline);
        }
        assert_exchange(f, "{\"execute\":\"guest-ping\",\"id\":2}", "{\"return\":{},\"id\":2}");

        assert_int_equal(kill(pid, SIGTERM), 0);
        status = wait_exit(pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);

        _cleanup_free_ char *log = NULL;
        assert_int_equal(test_read_file(err_path, &log), 0);
        assert_non_null(strstr(log, "<4>GPU init failure detected: " FAILURE_TEXT "\n"));
        assert_non_null(strstr(log, "stopping on SIGTERM"));
        for (const char *p = log; *p;) {
                if (!(p[0] == '<' && p[1] >= '0' && p[1] <= '7' && p[2] == '>'))
                        fail_msg("stderr line without a <N> prefix: %.80s", p);
                const char *nl = strchr(p, '\n');
                assert_non_null(nl);
                p = nl + 1;
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_loop_gpu_states, setup, teardown),
            cmocka_unit_test_setup_teardown(test_loop_protocol, setup, teardown),
            cmocka_unit_test_setup_teardown(test_loop_disconnect, setup, teardown),
            cmocka_unit_test_setup_teardown(test_loop_eof_is_hangup, setup, teardown),
            cmocka_unit_test_setup_teardown(test_loop_port_failure, setup, teardown),
            cmocka_unit_test_setup_teardown(test_loop_write_timeout, setup, teardown),
            cmocka_unit_test_setup_teardown(test_loop_port_lookup, setup, teardown),
            cmocka_unit_test_setup_teardown(test_loop_gpu_watch_auto, setup, teardown),
            cmocka_unit_test_setup_teardown(test_loop_sigterm, setup, teardown),
            cmocka_unit_test_setup_teardown(test_binary, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
