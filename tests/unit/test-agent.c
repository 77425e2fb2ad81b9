/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of vgpu-agent's parts (SPEC §9): the kmsg record matcher against the forms a kernel
 * emits (AGENT-6), the watcher's open, reopen and read results on files and FIFOs (AGENT-7,
 * AGENT-8), the GPU state machine (AGENT-4, AGENT-5), the probe with real stand-in scripts
 * (AGENT-9, AGENT-10, AGENT-11), the protocol's replies and line handling (AGENT-14, AGENT-15,
 * AGENT-16, AGENT-17), the options (AGENT-1) and the sysfs look-ups (AGENT-1, AGENT-3). The watcher
 * and the probe take the time from the test, so their timings are exact; the loop as a whole is
 * test-agent-loop.c.
 *
 * read() is wrapped (-Wl,--wrap=read) for the results only /dev/kmsg gives: EPIPE, EINVAL.
 */
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "agent/agent.h"
#include "agent/gpu-state.h"
#include "agent/guest.h"
#include "agent/kmsg.h"
#include "agent/probe.h"
#include "agent/protocol.h"
#include "config.h"
#include "testlib.h"

/* ---- the read() wrapper -------------------------------------------------------------------- */

static struct {
        int fd;
        int err;
        unsigned count;
} read_inject = {.fd = -1};

ssize_t __real_read(int fd, void *buf, size_t count);
ssize_t __wrap_read(int fd, void *buf, size_t count);

ssize_t __wrap_read(int fd, void *buf, size_t count)
{
        if (fd >= 0 && fd == read_inject.fd && read_inject.count > 0) {
                read_inject.count--;
                errno = read_inject.err;
                return -1;
        }
        return __real_read(fd, buf, count);
}

static void inject_read_error(int fd, int err, unsigned count)
{
        read_inject.fd = fd;
        read_inject.err = err;
        read_inject.count = count;
}

/* ---- the matcher (AGENT-6) ----------------------------------------------------------------- */

#define FAILURE_TEXT "NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x22:0x65:884)"

static int match(const char *line, char **ret)
{
        return kmsg_record_match(line, strlen(line), ret);
}

static void assert_matches(const char *line, const char *expected)
{
        _cleanup_free_ char *m = NULL;
        int r = match(line, &m);
        if (r != 1)
                fail_msg("no match: %s", line);
        assert_string_equal(m, expected);
}

static void assert_no_match(const char *line)
{
        char *m = NULL;
        int r = match(line, &m);
        if (r != 0)
                fail_msg("matched: %s (%s)", line, m ? m : "");
        assert_null(m);
}

/* AGENT-6: the kernel facility at every severity, with the prefix's extra fields. */
static void test_match_kernel_records(void **state)
{
        assert_matches("3,1234,5678901,-;" FAILURE_TEXT, FAILURE_TEXT);
        assert_matches("6,1,2,-;" FAILURE_TEXT, FAILURE_TEXT); /* severity is ignored */
        assert_matches("0,1,2,-;" FAILURE_TEXT, FAILURE_TEXT);
        assert_matches("7,1,2,c;" FAILURE_TEXT, FAILURE_TEXT); /* a continued record's flag */
        /* kernels with CONFIG_PRINTK_CALLER add a caller= field, more may follow */
        assert_matches("4,99,1000,-,caller=T17;" FAILURE_TEXT, FAILURE_TEXT);
        assert_matches("3,99,1000,-,caller=C2,extra=1;" FAILURE_TEXT, FAILURE_TEXT);
        /* 10 digits, leading zeros, is still prio 3 */
        assert_matches("0000000003,1,2,-;" FAILURE_TEXT, FAILURE_TEXT);
        /* the message is trimmed */
        assert_matches("3,1,2,-;  \t" FAILURE_TEXT " \r", FAILURE_TEXT);
        /* the phrase may be anywhere after the prefix */
        assert_matches("3,1,2,-;NVRM: RmInitAdapter failed!", "NVRM: RmInitAdapter failed!");
        /* a ';' in the message is the message's */
        assert_matches("3,1,2,-;NVRM: a;b RmInitAdapter failed! x",
                       "NVRM: a;b RmInitAdapter failed! x");
}

/* AGENT-6: only facility 0 is the kernel's; user space writing to /dev/kmsg gets others. */
static void test_match_other_facilities(void **state)
{
        assert_no_match("30,1,2,-;" FAILURE_TEXT); /* daemon.info */
        assert_no_match("14,1,2,-;" FAILURE_TEXT); /* user.info, what `echo > /dev/kmsg` makes */
        assert_no_match("12,1,2,-;" FAILURE_TEXT); /* user.warning */
        assert_no_match("8,1,2,-;" FAILURE_TEXT);  /* user.emerg: just past the kernel's 0-7 */
        assert_no_match("11,1,2,-;" FAILURE_TEXT);
        assert_no_match("1000,1,2,-;" FAILURE_TEXT);
        assert_no_match("9999999999,1,2,-;" FAILURE_TEXT);
}

/* AGENT-6: the prefix is strict: a decimal of 1 to 10 digits, then ',', and a ';' somewhere. */
static void test_match_prefix_strictness(void **state)
{
        assert_no_match("00000000003,1,2,-;" FAILURE_TEXT); /* 11 digits */
        assert_no_match("99999999999999999999999,1,2,-;" FAILURE_TEXT);
        assert_no_match(",1,2,-;" FAILURE_TEXT);
        assert_no_match("+3,1,2,-;" FAILURE_TEXT);
        assert_no_match("-3,1,2,-;" FAILURE_TEXT);
        assert_no_match("3a,1,2,-;" FAILURE_TEXT);
        assert_no_match("0x3,1,2,-;" FAILURE_TEXT);
        assert_no_match("<3>,1,2,-;" FAILURE_TEXT);
        assert_no_match("3,1,2,- " FAILURE_TEXT); /* no ';' */
        assert_no_match("3;" FAILURE_TEXT);       /* no ',' before the ';' */
        assert_no_match("3;NVRM: x, RmInitAdapter failed!");
        assert_no_match("");
        assert_no_match(";");
        /* dmesg's and syslog's renderings are not records */
        assert_no_match("<3>" FAILURE_TEXT);
        assert_no_match("[   12.345678] " FAILURE_TEXT);
}

/* AGENT-6: a continuation (dictionary) line never matches, whatever it says. */
static void test_match_continuation_lines(void **state)
{
        assert_no_match(" " FAILURE_TEXT);
        assert_no_match(" 3,1,2,-;" FAILURE_TEXT);
        assert_no_match(" SUBSYSTEM=pci");
        assert_no_match(" DEVICE=+pci:0000:00:06.0");
}

/* AGENT-6: text that merely mentions the driver or the phrase is not the driver's record. */
static void test_match_mentions(void **state)
{
        assert_no_match("3,1,2,-;nvidia: NVRM: RmInitAdapter failed!");
        assert_no_match("3,1,2,-;audit: comm=\"sh\" NVRM: RmInitAdapter failed!");
        assert_no_match("3,1,2,-;RmInitAdapter failed! NVRM:");
        assert_no_match("3,1,2,-;NVRM RmInitAdapter failed!");  /* no ':' */
        assert_no_match("3,1,2,-;nvrm: RmInitAdapter failed!"); /* case matters */
        assert_no_match("3,1,2,-;NVRM: GPU 0000:00:06.0: RmInitAdapter succeeded");
        assert_no_match("3,1,2,-;NVRM: RmInitAdapter failed");  /* no '!' */
        assert_no_match("3,1,2,-;NVRM: rminitadapter failed!"); /* case matters */
        assert_no_match("3,1,2,-;");
        assert_no_match("3,1,2,-;NVRM:");
}

/* The line is n bytes, not NUL-terminated; control bytes from a stand-in file are escaped. */
static void test_match_bounds_and_escapes(void **state)
{
        const char buf[] = "3,1,2,-;NVRM: RmInitAdapter failed!GARBAGE";
        _cleanup_free_ char *m = NULL;
        assert_int_equal(kmsg_record_match(buf, strlen(buf) - strlen("GARBAGE"), &m), 1);
        assert_string_equal(m, "NVRM: RmInitAdapter failed!");

        /* cut before the phrase ends: no match */
        char *none = NULL;
        assert_int_equal(kmsg_record_match(buf, strlen("3,1,2,-;NVRM: RmInitAdapter fail"), &none),
                         0);

        const char ctl[] = "3,1,2,-;NVRM: \x01\x1b[2J RmInitAdapter failed! \xff";
        _cleanup_free_ char *e = NULL;
        assert_int_equal(kmsg_record_match(ctl, sizeof ctl - 1, &e), 1);
        assert_string_equal(e, "NVRM: \\x01\\x1b[2J RmInitAdapter failed! \\xff");

        const char nul[] = "3,1,2,-;NVRM: a\0b RmInitAdapter failed!";
        _cleanup_free_ char *z = NULL;
        assert_int_equal(kmsg_record_match(nul, sizeof nul - 1, &z), 1);
        assert_string_equal(z, "NVRM: a\\x00b RmInitAdapter failed!");
}

/* ---- the GPU state (AGENT-4, AGENT-5) ------------------------------------------------------ */

static void test_gpu_state_machine(void **state)
{
        TestLog log = {0};
        GpuState g = GPU_STATE_INIT;

        assert_int_equal(test_log_start(&log), 0);
        assert_int_equal(g.state, GPU_INIT_UNKNOWN);
        assert_string_equal(gpu_init_state_to_string(g.state), "unknown");
        assert_string_equal(gpu_state_failure_message(&g), "");

        /* AGENT-4/5: the first match moves unknown to failed and is logged */
        assert_int_equal(gpu_state_record_failure(&g, "NVRM: first RmInitAdapter failed!"), 1);
        assert_string_equal(gpu_init_state_to_string(g.state), "failed");
        assert_string_equal(gpu_state_failure_message(&g), "NVRM: first RmInitAdapter failed!");
        assert_non_null(
            strstr(test_log_text(&log),
                   "<4>GPU init failure detected: NVRM: first RmInitAdapter failed!\n"));
        test_log_clear(&log);

        /* AGENT-5: the latest wins, and is not announced as a new detection */
        assert_int_equal(gpu_state_record_failure(&g, "NVRM: second RmInitAdapter failed!"), 1);
        assert_string_equal(gpu_state_failure_message(&g), "NVRM: second RmInitAdapter failed!");
        assert_null(strstr(test_log_text(&log), "detected"));

        /* AGENT-4: success moves failed to ok, logged */
        assert_true(gpu_state_record_success(&g));
        assert_string_equal(gpu_init_state_to_string(g.state), "ok");
        assert_string_equal(gpu_state_failure_message(&g), "");
        assert_non_null(strstr(test_log_text(&log), "<6>GPU driver initialized\n"));
        test_log_clear(&log);

        /* AGENT-4: ok is terminal */
        assert_int_equal(gpu_state_record_failure(&g, "NVRM: late RmInitAdapter failed!"), 0);
        assert_string_equal(gpu_init_state_to_string(g.state), "ok");
        assert_string_equal(gpu_state_failure_message(&g), "");
        assert_false(gpu_state_record_success(&g));
        assert_string_equal(test_log_text(&log), "");
        gpu_state_done(&g);

        /* AGENT-4: unknown goes straight to ok */
        GpuState h = GPU_STATE_INIT;
        assert_true(gpu_state_record_success(&h));
        assert_int_equal(h.state, GPU_INIT_OK);
        gpu_state_done(&h);
        test_log_stop(&log);
}

/* ---- the protocol (AGENT-14, AGENT-15, AGENT-16, AGENT-17) ---------------------------------- */

static char *answer_with(const char *line, const GpuState *g)
{
        char *reply = NULL;
        assert_int_equal(protocol_answer(line, strlen(line), g, &reply), 0);
        return reply;
}

static void assert_answer(const char *line, const char *expected)
{
        GpuState g = GPU_STATE_INIT;
        _cleanup_free_ char *reply = answer_with(line, &g);
        assert_non_null(reply);
        assert_string_equal(reply, expected);
}

/* AGENT-14/15: the commands, with and without an id. */
static void test_protocol_commands(void **state)
{
        assert_answer("{\"execute\":\"guest-ping\"}", "{\"return\":{}}\n");
        assert_answer("{\"execute\": \"guest-ping\", \"arguments\": {}, \"id\": 7}",
                      "{\"return\":{},\"id\":7}\n");
        assert_answer("{\"id\": 7, \"execute\": \"guest-ping\"}", "{\"return\":{},\"id\":7}\n");
        assert_answer("{\"execute\":\"guest-info\"}",
                      "{\"return\":{\"version\":\"" VGPUD_VERSION "\",\"supported_commands\":["
                      "{\"name\":\"guest-ping\",\"enabled\":true},"
                      "{\"name\":\"guest-info\",\"enabled\":true},"
                      "{\"name\":\"guest-gpu-init-status\",\"enabled\":true}]}}\n");
        /* arguments are accepted and unused */
        assert_answer("{\"execute\":\"guest-ping\",\"arguments\":{\"x\":[1]}}",
                      "{\"return\":{}}\n");
}

/* AGENT-15/18: guest-gpu-init-status in its three states. */
static void test_protocol_gpu_status(void **state)
{
        GpuState g = GPU_STATE_INIT;
        TestLog log = {0};
        assert_int_equal(test_log_start(&log), 0);
        const char *req = "{\"execute\":\"guest-gpu-init-status\",\"id\":7}";

        _cleanup_free_ char *a = answer_with(req, &g);
        assert_string_equal(
            a, "{\"return\":{\"state\":\"unknown\",\"failure_message\":\"\"},\"id\":7}\n");

        assert_int_equal(gpu_state_record_failure(&g, FAILURE_TEXT), 1);
        _cleanup_free_ char *b = answer_with(req, &g);
        assert_string_equal(b,
                            "{\"return\":{\"state\":\"failed\",\"failure_message\":\"" FAILURE_TEXT
                            "\"},\"id\":7}\n");

        gpu_state_record_success(&g);
        _cleanup_free_ char *c = answer_with(req, &g);
        assert_string_equal(c,
                            "{\"return\":{\"state\":\"ok\",\"failure_message\":\"\"},\"id\":7}\n");
        gpu_state_done(&g);
        test_log_stop(&log);
}

/* AGENT-14: the id comes back as jansson writes it, compact, whatever its type. */
static void test_protocol_id_echo(void **state)
{
        assert_answer("{\"execute\":\"guest-ping\",\"id\":\"abc\"}",
                      "{\"return\":{},\"id\":\"abc\"}\n");
        assert_answer("{\"execute\":\"guest-ping\",\"id\": { \"b\" : 1 , \"a\" : [ true, null ] }}",
                      "{\"return\":{},\"id\":{\"b\":1,\"a\":[true,null]}}\n");
        assert_answer("{\"execute\":\"guest-ping\",\"id\":-12}", "{\"return\":{},\"id\":-12}\n");
        assert_answer("{\"execute\":\"guest-ping\",\"id\":1.5}", "{\"return\":{},\"id\":1.5}\n");
        assert_answer("{\"execute\":\"guest-ping\",\"id\":null}", "{\"return\":{},\"id\":null}\n");
        assert_answer("{\"execute\":\"guest-ping\",\"id\":\"\\u00e9\\n\"}",
                      "{\"return\":{},\"id\":\"\xc3\xa9\\n\"}\n");
        /* errors echo it too, when the request was an object */
        assert_answer("{\"execute\":\"guest-reboot\",\"id\":[1]}",
                      "{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"command "
                      "\\\"guest-reboot\\\" not found\"},\"id\":[1]}\n");
        assert_answer(
            "{\"id\":3}",
            "{\"error\":{\"class\":\"GenericError\",\"desc\":\"missing \\\"execute\\\"\"},"
            "\"id\":3}\n");
}

static void assert_generic_error(const char *line, const char *desc_prefix)
{
        GpuState g = GPU_STATE_INIT;
        _cleanup_free_ char *reply = answer_with(line, &g);
        assert_non_null(reply);
        json_error_t err;
        json_auto_t *v = json_loads(reply, 0, &err);
        assert_non_null(v);
        const char *class = NULL, *desc = NULL;
        assert_int_equal(json_unpack(v, "{s:{s:s,s:s}}", "error", "class", &class, "desc", &desc),
                         0);
        assert_string_equal(class, "GenericError");
        if (!startswith(desc, desc_prefix))
                fail_msg("%s: desc %s, expected %s...", line, desc, desc_prefix);
        /* one line: its only newline ends it */
        assert_ptr_equal(strchr(reply, '\n'), reply + strlen(reply) - 1);
}

/* AGENT-16: every class of bad request. */
static void test_protocol_errors(void **state)
{
        assert_answer("{\"execute\":\"guest-reboot\"}",
                      "{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"command "
                      "\\\"guest-reboot\\\" not found\"}}\n");
        assert_answer("{\"execute\":\"\"}", "{\"error\":{\"class\":\"CommandNotFound\",\"desc\":"
                                            "\"command \\\"\\\" not found\"}}\n");
        /* a name shown back is escaped: no control bytes go back to the host */
        assert_answer("{\"execute\":\"a\\u0001b\"}",
                      "{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"command "
                      "\\\"a\\\\x01b\\\" not found\"}}\n");

        assert_generic_error("{\"execute\":", "invalid JSON: ");
        assert_generic_error("nope", "invalid JSON: ");
        assert_generic_error("{\"execute\":\"guest-ping\"} x", "invalid JSON: ");
        assert_generic_error("{\"execute\":\"guest-ping\",\"execute\":\"guest-info\"}",
                             "invalid JSON: ");
        assert_generic_error("{\"execute\":\"guest-ping\",\"id\":99999999999999999999}",
                             "invalid JSON: ");
        assert_generic_error("{\"execute\":\"\\ud800\"}", "invalid JSON: ");
        assert_generic_error("{\"execute\":\"guest-\xff\"}", "invalid JSON: ");
        assert_generic_error("[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]", "invalid JSON: nesting");
        assert_generic_error("[1]", "request is not a JSON object");
        assert_generic_error("5", "request is not a JSON object");
        assert_generic_error("\"guest-ping\"", "request is not a JSON object");
        assert_generic_error("null", "request is not a JSON object");
        assert_generic_error("{}", "missing \"execute\"");
        assert_generic_error("{\"execute\":5}", "\"execute\" must be a string");
        assert_generic_error("{\"execute\":null}", "\"execute\" must be a string");
        assert_generic_error("{\"execute\":[\"guest-ping\"]}", "\"execute\" must be a string");
        assert_generic_error("{\"execute\":\"guest-ping\",\"arguments\":[]}",
                             "\"arguments\" must be an object");
        assert_generic_error("{\"execute\":\"guest-ping\",\"arguments\":null}",
                             "\"arguments\" must be an object");
        assert_generic_error("{\"execute\":\"guest-ping\",\"extra\":1}", "unknown key \"extra\"");

        /* a NUL byte inside the line */
        GpuState g = GPU_STATE_INIT;
        const char nul[] = "{\"execute\":\"guest-ping\"}\0";
        _cleanup_free_ char *reply = NULL;
        assert_int_equal(protocol_answer(nul, sizeof nul - 1, &g, &reply), 0);
        assert_non_null(strstr(reply, "GenericError"));
}

/* AGENT-14: blank lines get no reply. */
static void test_protocol_blank_lines(void **state)
{
        GpuState g = GPU_STATE_INIT;
        const char *blank[] = {"", " ", "\r", "\t \r"};
        for (size_t i = 0; i < ELEMENTSOF(blank); i++) {
                char *reply = (char *)"unset";
                assert_int_equal(protocol_answer(blank[i], strlen(blank[i]), &g, &reply), 0);
                assert_null(reply);
        }
        /* a CRLF line is one request */
        _cleanup_free_ char *r = answer_with("{\"execute\":\"guest-ping\"}\r", &g);
        assert_string_equal(r, "{\"return\":{}}\n");
}

/* ---- a connection's buffers (AGENT-14, AGENT-17) -------------------------------------------- */

/* Feeds data in chunks of at most chunk bytes; returns all queued output (malloc'd). */
static char *conn_feed(Conn *c, const GpuState *g, const char *data, size_t n, size_t chunk)
{
        while (n > 0) {
                size_t room;
                char *buf = conn_read_buffer(c, &room);
                assert_true(room > 0);
                size_t k = n < chunk ? n : chunk;
                if (k > room)
                        k = room;
                memcpy(buf, data, k);
                assert_int_equal(conn_received(c, k, g, 0), 0);
                data += k;
                n -= k;
        }
        char *out = strndup(c->out ? c->out + c->out_off : "", c->out_len - c->out_off);
        assert_non_null(out);
        c->out_off = c->out_len = 0;
        return out;
}

static void test_conn_lines(void **state)
{
        GpuState g = GPU_STATE_INIT;
        Conn *c = malloc(sizeof *c);
        assert_non_null(c);
        conn_init(c);

        /* several requests in one read, blank lines between: replies in order */
        const char *two =
            "{\"execute\":\"guest-ping\",\"id\":1}\n\n\r\n{\"execute\":\"x\",\"id\":2}\n"
            "{\"execute\":\"guest-ping\",\"id\":3}\n";
        _cleanup_free_ char *o1 = conn_feed(c, &g, two, strlen(two), SIZE_MAX);
        assert_string_equal(o1, "{\"return\":{},\"id\":1}\n"
                                "{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"command "
                                "\\\"x\\\" not found\"},\"id\":2}\n"
                                "{\"return\":{},\"id\":3}\n");

        /* one request split byte by byte: one reply, at its newline only */
        const char *one = "{\"execute\":\"guest-ping\",\"id\":\"split\"}\n";
        _cleanup_free_ char *o2 = conn_feed(c, &g, one, strlen(one) - 1, 1);
        assert_string_equal(o2, "");
        _cleanup_free_ char *o3 = conn_feed(c, &g, "\n", 1, 1);
        assert_string_equal(o3, "{\"return\":{},\"id\":\"split\"}\n");

        /* AGENT-19's helper: a dropped partial line does not join the next one */
        _cleanup_free_ char *o4 = conn_feed(c, &g, "{\"execute\":", 11, SIZE_MAX);
        assert_string_equal(o4, "");
        conn_drop_partial(c);
        _cleanup_free_ char *o5 = conn_feed(c, &g, one, strlen(one), SIZE_MAX);
        assert_string_equal(o5, "{\"return\":{},\"id\":\"split\"}\n");

        conn_done(c);
        free(c);
}

/* A request line of exactly n bytes (padding the id), without its newline. */
static char *request_of_size(size_t n)
{
        const char *head = "{\"execute\":\"guest-ping\",\"id\":\"";
        const char *tail = "\"}";
        assert_true(n >= strlen(head) + strlen(tail));
        char *s = malloc(n + 1);
        assert_non_null(s);
        size_t pad = n - strlen(head) - strlen(tail);
        memcpy(s, head, strlen(head));
        memset(s + strlen(head), 'x', pad);
        memcpy(s + strlen(head) + pad, tail, strlen(tail) + 1);
        return s;
}

#define OVERLONG_REPLY \
        "{\"error\":{\"class\":\"GenericError\",\"desc\":\"request line exceeds 65536 bytes\"}}\n"

/* AGENT-17: 65536 bytes is a line, 65537 is too long: one error, the rest discarded. */
static void test_conn_line_limit(void **state)
{
        GpuState g = GPU_STATE_INIT;
        Conn *c = malloc(sizeof *c);
        assert_non_null(c);
        conn_init(c);

        /* exactly the limit, split over reads of 4000 bytes: answered, id and all */
        _cleanup_free_ char *max = request_of_size(PROTOCOL_LINE_MAX);
        _cleanup_free_ char *max_nl = NULL;
        assert_int_equal(strprintf(&max_nl, "%s\n", max), 0);
        _cleanup_free_ char *o1 = conn_feed(c, &g, max_nl, strlen(max_nl), 4000);
        assert_true(startswith(o1, "{\"return\":{},\"id\":\"xxx"));
        assert_int_equal(strlen(o1), strlen("{\"return\":{},\"id\":\"\"}\n") + PROTOCOL_LINE_MAX -
                                         strlen("{\"execute\":\"guest-ping\",\"id\":\"\"}"));

        /* one byte more, in one read with its newline and a request after it */
        _cleanup_free_ char *over = request_of_size(PROTOCOL_LINE_MAX + 1);
        _cleanup_free_ char *over_nl = NULL;
        assert_int_equal(strprintf(&over_nl, "%s\n{\"execute\":\"guest-ping\",\"id\":9}\n", over),
                         0);
        _cleanup_free_ char *o2 = conn_feed(c, &g, over_nl, strlen(over_nl), SIZE_MAX);
        assert_string_equal(o2, OVERLONG_REPLY "{\"return\":{},\"id\":9}\n");

        /* far over, across many reads: the error comes once, as soon as the limit is passed,
         * and the rest of that line up to its newline is discarded */
        size_t big = 3 * PROTOCOL_LINE_MAX;
        _cleanup_free_ char *huge = malloc(big);
        assert_non_null(huge);
        memset(huge, '{', big);
        _cleanup_free_ char *o3 = conn_feed(c, &g, huge, PROTOCOL_LINE_MAX + 1, 7000);
        assert_string_equal(o3, OVERLONG_REPLY);
        _cleanup_free_ char *o4 = conn_feed(c, &g, huge, big, 5000);
        assert_string_equal(o4, "");
        const char *after = "still discarded}\n{\"execute\":\"guest-ping\"}\n";
        _cleanup_free_ char *o5 = conn_feed(c, &g, after, strlen(after), 3);
        assert_string_equal(o5, "{\"return\":{}}\n");

        conn_done(c);
        free(c);
}

/* conn_flush writes what the descriptor takes; a closed peer is an error, not a signal. */
static void test_conn_flush(void **state)
{
        GpuState g = GPU_STATE_INIT;
        Conn *c = malloc(sizeof *c);
        assert_non_null(c);
        conn_init(c);
        int sv[2];
        assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);

        const char *req = "{\"execute\":\"guest-ping\"}\n";
        size_t room;
        char *buf = conn_read_buffer(c, &room);
        memcpy(buf, req, strlen(req));
        assert_int_equal(conn_received(c, strlen(req), &g, 0), 0);
        assert_true(conn_has_output(c));
        assert_int_equal(conn_flush(c, sv[0]), 0);
        assert_false(conn_has_output(c));
        char got[64] = {0};
        assert_int_equal(read(sv[1], got, sizeof got - 1), (ssize_t)strlen("{\"return\":{}}\n"));
        assert_string_equal(got, "{\"return\":{}}\n");

        close(sv[1]);
        signal(SIGPIPE, SIG_IGN);
        buf = conn_read_buffer(c, &room);
        memcpy(buf, req, strlen(req));
        assert_int_equal(conn_received(c, strlen(req), &g, 0), 0);
        assert_int_equal(conn_flush(c, sv[0]), -EPIPE);
        conn_reset(c);
        assert_false(conn_has_output(c));
        close(sv[0]);
        conn_done(c);
        free(c);
}

/* ---- options (AGENT-1) --------------------------------------------------------------------- */

static int parse(AgentOptions *o, AgentArgs *what, char **error, ...)
{
        char *argv[32] = {(char *)"vgpu-agent"};
        int argc = 1;
        va_list ap;
        va_start(ap, error);
        const char *a;
        while ((a = va_arg(ap, const char *)) && argc < 31)
                argv[argc++] = (char *)a;
        va_end(ap);
        agent_options_init(o);
        return agent_parse_args(argc, argv, o, what, error);
}

static void test_options(void **state)
{
        AgentOptions o;
        AgentArgs what;
        _cleanup_free_ char *error = NULL;

        assert_int_equal(parse(&o, &what, &error, NULL), 0);
        assert_int_equal(what, AGENT_ARGS_RUN);
        assert_string_equal(o.serial, "/dev/virtio-ports/org.vgpud.agent.0");
        assert_int_equal(o.gpu_watch, GPU_WATCH_AUTO);
        assert_string_equal(o.kmsg, "/dev/kmsg");
        assert_string_equal(o.pci_root, "/sys");
        assert_null(o.nvidia_smi);
        assert_int_equal(o.probe_kill_after, 30 * NSEC_PER_SEC);
        assert_int_equal(o.probe_retry_after, 15 * NSEC_PER_SEC);
        assert_int_equal(o.probe_give_up_after, 10 * NSEC_PER_MIN);
        assert_int_equal(o.kmsg_reopen_after, 60 * NSEC_PER_SEC);

        assert_int_equal(parse(&o, &what, &error, "--serial", "/dev/vport0p1", "--gpu-watch", "on",
                               "--kmsg", "/tmp/k", "--pci-root", "/tmp/sys", "--nvidia-smi",
                               "/bin/smi", "--probe-kill-after", "100ms", "--probe-retry-after=1s",
                               "--probe-give-up-after", "1m30s", "--kmsg-reopen-after", "2s", NULL),
                         0);
        assert_string_equal(o.serial, "/dev/vport0p1");
        assert_int_equal(o.gpu_watch, GPU_WATCH_ON);
        assert_string_equal(o.kmsg, "/tmp/k");
        assert_string_equal(o.pci_root, "/tmp/sys");
        assert_string_equal(o.nvidia_smi, "/bin/smi");
        assert_int_equal(o.probe_kill_after, 100 * NSEC_PER_MSEC);
        assert_int_equal(o.probe_retry_after, NSEC_PER_SEC);
        assert_int_equal(o.probe_give_up_after, 90 * NSEC_PER_SEC);
        assert_int_equal(o.kmsg_reopen_after, 2 * NSEC_PER_SEC);

        assert_int_equal(parse(&o, &what, &error, "--gpu-watch", "off", NULL), 0);
        assert_int_equal(o.gpu_watch, GPU_WATCH_OFF);
        assert_int_equal(parse(&o, &what, &error, "--version", NULL), 0);
        assert_int_equal(what, AGENT_ARGS_VERSION);

        static const struct {
                const char *args[3];
                const char *error;
        } bad[] = {
            {{"--gpu-watch", "yes"}, "--gpu-watch: \"yes\" is not auto, on or off"},
            {{"--probe-kill-after", "30"}, "--probe-kill-after: invalid duration \"30\""},
            {{"--probe-retry-after", "1.5s"}, "--probe-retry-after: invalid duration"},
            {{"--probe-give-up-after", "-1s"}, "--probe-give-up-after: invalid duration"},
            {{"--kmsg-reopen-after", ""}, "--kmsg-reopen-after: invalid duration"},
            {{"--serial", ""}, "--serial: empty path"},
            {{"--vsock"}, "unknown option \"--vsock\""},
            {{"--serial"}, "--serial needs a value"},
            {{"extra"}, "unexpected argument \"extra\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                error = (free(error), NULL);
                AgentOptions before;
                agent_options_init(&before);
                assert_int_equal(parse(&o, &what, &error, bad[i].args[0], bad[i].args[1], NULL),
                                 -EINVAL);
                assert_non_null(error);
                if (!startswith(error, bad[i].error))
                        fail_msg("%s: error %s, expected %s", bad[i].args[0], error, bad[i].error);
                /* o untouched on failure */
                assert_string_equal(o.serial, before.serial);
        }
}

/* ---- sysfs look-ups (AGENT-1, AGENT-3) ----------------------------------------------------- */

static void test_guest_port_lookup(void **state)
{
        _cleanup_test_tree_ TestTree *t = NULL;
        assert_int_equal(test_tree_new("vgpud-agent-port", &t), 0);
        char *entry = NULL;

        assert_int_equal(guest_find_port_entry(t->dir, &entry), -ENOENT); /* no directory */
        assert_int_equal(
            test_tree_put(t, "org.qemu.guest_agent.0\n", "class/virtio-ports/vport0p1/name"), 0);
        assert_int_equal(
            test_tree_put(t, "org.vgpud.agent.0x\n", "class/virtio-ports/vport0p2/name"), 0);
        assert_int_equal(
            test_tree_put(t, "org.vgpud.agent.0\n\n", "class/virtio-ports/vport0p3/name"), 0);
        assert_int_equal(test_mkdirs_at(t->fd, "class/virtio-ports/vport0p4"), 0); /* no name */
        assert_int_equal(guest_find_port_entry(t->dir, &entry), -ENOENT);

        assert_int_equal(
            test_tree_put(t, "org.vgpud.agent.0\n", "class/virtio-ports/vport1p2/name"), 0);
        assert_int_equal(test_tree_put(t, "org.vgpud.agent.0", "class/virtio-ports/vport1p1/name"),
                         0);
        assert_int_equal(guest_find_port_entry(t->dir, &entry), 0);
        assert_string_equal(entry, "vport1p1"); /* the first of two, by name */
        free(entry);
}

static void test_guest_nvidia_lookup(void **state)
{
        _cleanup_test_tree_ TestTree *t = NULL;
        assert_int_equal(test_tree_new("vgpud-agent-pci", &t), 0);

        assert_true(guest_has_nvidia_device(t->dir) < 0); /* no directory */
        assert_int_equal(test_mkdirs_at(t->fd, "bus/pci/devices"), 0);
        assert_int_equal(guest_has_nvidia_device(t->dir), 0);
        assert_int_equal(test_tree_put(t, "0x1af4\n", "bus/pci/devices/0000:00:03.0/vendor"), 0);
        assert_int_equal(test_tree_put(t, "0x10DE\n", "bus/pci/devices/0000:00:04.0/vendor"), 0);
        assert_int_equal(test_tree_put(t, "0x10de0\n", "bus/pci/devices/0000:00:05.0/vendor"), 0);
        assert_int_equal(guest_has_nvidia_device(t->dir), 0);
        /* sysfs shows devices as links into the device tree */
        assert_int_equal(test_tree_put(t, "0x10de\n", "devices/pci0000:00/0000:00:06.0/vendor"), 0);
        assert_int_equal(test_tree_link(t, "../../../devices/pci0000:00/0000:00:06.0",
                                        "bus/pci/devices/0000:00:06.0"),
                         0);
        assert_int_equal(guest_has_nvidia_device(t->dir), 1);
}

/* ---- the kmsg watcher (AGENT-7, AGENT-8) --------------------------------------------------- */

typedef struct Matches {
        char *list[16];
        size_t n;
} Matches;

static void record_match(void *userdata, const char *message)
{
        Matches *m = userdata;
        assert_true(m->n < ELEMENTSOF(m->list));
        m->list[m->n] = strdup(message);
        assert_non_null(m->list[m->n]);
        m->n++;
}

static void matches_clear(Matches *m)
{
        for (size_t i = 0; i < m->n; i++)
                free(m->list[i]);
        m->n = 0;
}

typedef struct WatchFixture {
        TestTree *tree;
        char *path;
        KmsgWatcher *w;
        Matches m;
        TestLog log;
} WatchFixture;

static int watch_setup(void **state)
{
        WatchFixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(test_tree_new("vgpud-agent-kmsg", &f->tree), 0);
        f->path = test_tree_path(f->tree, "kmsg");
        f->w = malloc(sizeof *f->w);
        assert_non_null(f->w);
        assert_int_equal(kmsg_watcher_init(f->w, f->path, 60 * NSEC_PER_SEC, record_match, &f->m),
                         0);
        assert_int_equal(test_log_start(&f->log), 0);
        *state = f;
        return 0;
}

static int watch_teardown(void **state)
{
        WatchFixture *f = *state;
        test_log_stop(&f->log);
        kmsg_watcher_done(f->w);
        free(f->w);
        matches_clear(&f->m);
        free(f->path);
        test_tree_free(f->tree);
        inject_read_error(-1, 0, 0);
        free(f);
        return 0;
}

/* Reads until the watcher waits (EAGAIN) or stops; bounded. */
static void watch_drain(KmsgWatcher *w, nsec_t now)
{
        for (int i = 0; i < 1000 && kmsg_watcher_fd(w) >= 0; i++) {
                struct pollfd p = {.fd = kmsg_watcher_fd(w), .events = POLLIN};
                if (poll(&p, 1, 0) == 0)
                        return;
                kmsg_watcher_on_readable(w, now);
        }
}

/* AGENT-7/8: a file read from its start, line by line, to its end, which ends the watch. */
static void test_watch_file(void **state)
{
        WatchFixture *f = *state;
        assert_int_equal(test_tree_put(f->tree,
                                       "6,1,100,-;Linux version 6.1.0\n"
                                       " SUBSYSTEM=pci\n"
                                       "3,2,200,-;" FAILURE_TEXT "\n"
                                       " DEVICE=+pci:0000:00:06.0\n"
                                       "14,3,300,-;NVRM: forged RmInitAdapter failed!\n"
                                       " NVRM: RmInitAdapter failed! in a dictionary\n"
                                       "4,4,400,-,caller=T9;NVRM: second RmInitAdapter failed!",
                                       "kmsg"),
                         0);
        kmsg_watcher_start(f->w, 0);
        assert_int_equal(f->w->state, KMSG_WATCH_OPEN);
        assert_true(kmsg_watcher_fd(f->w) >= 0);
        watch_drain(f->w, 0);
        assert_int_equal(f->w->state, KMSG_WATCH_ENDED);
        assert_int_equal(kmsg_watcher_fd(f->w), -1);
        assert_int_equal(kmsg_watcher_deadline(f->w), NSEC_INFINITY);
        assert_int_equal(f->m.n, 2);
        assert_string_equal(f->m.list[0], FAILURE_TEXT);
        /* the last line had no newline: read at EOF */
        assert_string_equal(f->m.list[1], "NVRM: second RmInitAdapter failed!");
        assert_non_null(strstr(test_log_text(&f->log), "ended"));
}

/* AGENT-8: a line longer than the buffer is skipped whole; what follows is read. */
static void test_watch_overlong_line(void **state)
{
        WatchFixture *f = *state;
        size_t big = KMSG_BUFFER_SIZE * 2 + 100;
        _cleanup_free_ char *text = malloc(big + 200);
        assert_non_null(text);
        strcpy(text, "3,1,2,-;NVRM: RmInitAdapter failed! ");
        size_t n = strlen(text);
        memset(text + n, 'x', big - n);
        strcpy(text + big, "\n3,2,3,-;NVRM: after RmInitAdapter failed!\n");
        assert_int_equal(test_tree_put(f->tree, text, "kmsg"), 0);
        kmsg_watcher_start(f->w, 0);
        watch_drain(f->w, 0);
        assert_int_equal(f->w->state, KMSG_WATCH_ENDED);
        assert_int_equal(f->m.n, 1);
        assert_string_equal(f->m.list[0], "NVRM: after RmInitAdapter failed!");
        assert_non_null(strstr(test_log_text(&f->log), "exceeds"));
}

/* AGENT-7: an open failure is logged and retried every reopen_after; the first successful open
 * still reads from the start. */
static void test_watch_open_retry(void **state)
{
        WatchFixture *f = *state;
        kmsg_watcher_start(f->w, 1000);
        assert_int_equal(f->w->state, KMSG_WATCH_WAITING);
        assert_int_equal(kmsg_watcher_fd(f->w), -1);
        assert_int_equal(kmsg_watcher_deadline(f->w), 1000 + 60 * NSEC_PER_SEC);
        assert_non_null(strstr(test_log_text(&f->log), "retrying in 1m0s"));

        assert_int_equal(test_tree_put(f->tree, "3,1,2,-;" FAILURE_TEXT "\n", "kmsg"), 0);
        kmsg_watcher_on_timer(f->w, 1000 + 60 * NSEC_PER_SEC - 1); /* not yet */
        assert_int_equal(f->w->state, KMSG_WATCH_WAITING);
        kmsg_watcher_on_timer(f->w, 1000 + 60 * NSEC_PER_SEC);
        assert_int_equal(f->w->state, KMSG_WATCH_OPEN);
        watch_drain(f->w, 1000 + 60 * NSEC_PER_SEC);
        assert_int_equal(f->m.n, 1);
}

/* AGENT-8: another read error closes, waits 5 s and reopens, at the end (AGENT-7). */
static void test_watch_read_error_reopens_at_end(void **state)
{
        WatchFixture *f = *state;
        assert_int_equal(
            test_tree_put(f->tree, "3,1,2,-;NVRM: old RmInitAdapter failed!\n", "kmsg"), 0);
        kmsg_watcher_start(f->w, 0);
        inject_read_error(kmsg_watcher_fd(f->w), EIO, 1);
        kmsg_watcher_on_readable(f->w, 7);
        assert_int_equal(f->w->state, KMSG_WATCH_WAITING);
        assert_int_equal(kmsg_watcher_deadline(f->w), 7 + 5 * NSEC_PER_SEC);
        assert_non_null(strstr(test_log_text(&f->log), "reopening in 5s"));
        assert_int_equal(f->m.n, 0);

        kmsg_watcher_on_timer(f->w, 7 + 5 * NSEC_PER_SEC);
        assert_int_equal(f->w->state, KMSG_WATCH_OPEN);
        assert_non_null(strstr(test_log_text(&f->log), "reopened kernel log"));
        /* the old record is behind the end: not read again */
        watch_drain(f->w, 7 + 5 * NSEC_PER_SEC);
        assert_int_equal(f->m.n, 0);
}

/* AGENT-8: EINVAL (a record larger than the buffer) reopens at once, at the end. */
static void test_watch_einval_reopens(void **state)
{
        WatchFixture *f = *state;
        assert_int_equal(
            test_tree_put(f->tree, "3,1,2,-;NVRM: old RmInitAdapter failed!\n", "kmsg"), 0);
        kmsg_watcher_start(f->w, 0);
        inject_read_error(kmsg_watcher_fd(f->w), EINVAL, 1);
        kmsg_watcher_on_readable(f->w, 0);
        assert_int_equal(f->w->state, KMSG_WATCH_OPEN);
        assert_non_null(strstr(test_log_text(&f->log), "reopened kernel log"));
        watch_drain(f->w, 0);
        assert_int_equal(f->m.n, 0);
        assert_int_equal(f->w->state, KMSG_WATCH_ENDED);
}

/* AGENT-8: EPIPE (records overwritten) continues on the same descriptor; EAGAIN waits. */
static void test_watch_epipe_and_eagain(void **state)
{
        WatchFixture *f = *state;
        assert_int_equal(test_tree_put(f->tree, "3,1,2,-;" FAILURE_TEXT "\n", "kmsg"), 0);
        kmsg_watcher_start(f->w, 0);
        int fd = kmsg_watcher_fd(f->w);

        inject_read_error(fd, EAGAIN, 1);
        kmsg_watcher_on_readable(f->w, 0);
        assert_int_equal(f->w->state, KMSG_WATCH_OPEN);
        assert_int_equal(kmsg_watcher_fd(f->w), fd);
        assert_int_equal(f->m.n, 0);

        inject_read_error(fd, EPIPE, 2);
        kmsg_watcher_on_readable(f->w, 0);
        assert_int_equal(f->w->overruns, 2);
        assert_int_equal(f->m.n, 1); /* read on, from the same descriptor */
        assert_null(strstr(test_log_text(&f->log), "reopened"));
}

/* AGENT-7/8 with a FIFO standing in: records arrive in pieces; a writer's close ends it. */
static void test_watch_fifo(void **state)
{
        WatchFixture *f = *state;
        assert_int_equal(mkfifo(f->path, 0600), 0);
        kmsg_watcher_start(f->w, 0);
        assert_int_equal(f->w->state, KMSG_WATCH_OPEN);

        /* no writer yet: not readable, so the loop does not read a premature EOF */
        struct pollfd p = {.fd = kmsg_watcher_fd(f->w), .events = POLLIN};
        assert_int_equal(poll(&p, 1, 0), 0);

        _cleanup_close_ int wfd = open(f->path, O_WRONLY | O_CLOEXEC);
        assert_true(wfd >= 0);
        assert_int_equal(write(wfd, "3,1,2,-;NVRM: GPU 0000:00:06.0: RmInit", 38), 38);
        watch_drain(f->w, 0);
        assert_int_equal(f->m.n, 0);
        const char *rest = "Adapter failed! (0x22:0x65:884)\n 14,9;" FAILURE_TEXT "\n";
        assert_int_equal(write(wfd, rest, strlen(rest)), (ssize_t)strlen(rest));
        watch_drain(f->w, 0);
        assert_int_equal(f->m.n, 1);
        assert_string_equal(f->m.list[0], FAILURE_TEXT);
        assert_int_equal(f->w->state, KMSG_WATCH_OPEN);

        closep(&wfd);
        wfd = -1;
        watch_drain(f->w, 0);
        assert_int_equal(f->w->state, KMSG_WATCH_ENDED);
}

/* ---- the probe (AGENT-9, AGENT-10, AGENT-11) ------------------------------------------------ */

typedef struct ProbeFixture {
        TestTree *tree;
        char *script;
        Probe *p;
        TestLog log;
} ProbeFixture;

static int probe_setup(void **state)
{
        ProbeFixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(test_tree_new("vgpud-agent-probe", &f->tree), 0);
        f->script = test_tree_path(f->tree, "nvidia-smi");
        f->p = calloc(1, sizeof *f->p);
        assert_non_null(f->p);
        assert_int_equal(
            probe_init(f->p, f->script, 30 * NSEC_PER_SEC, 15 * NSEC_PER_SEC, 10 * NSEC_PER_MIN),
            0);
        /* The agent's signal mask: SIGCHLD blocked (it comes by signalfd), SIGTERM too. */
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGTERM);
        assert_int_equal(sigprocmask(SIG_BLOCK, &mask, NULL), 0);
        assert_int_equal(test_log_start(&f->log), 0);
        *state = f;
        return 0;
}

static int probe_teardown(void **state)
{
        ProbeFixture *f = *state;
        test_log_stop(&f->log);
        probe_done(f->p);
        free(f->p);
        free(f->script);
        test_tree_free(f->tree);
        sigset_t mask;
        sigemptyset(&mask);
        sigaddset(&mask, SIGCHLD);
        sigaddset(&mask, SIGTERM);
        sigprocmask(SIG_UNBLOCK, &mask, NULL);
        free(f);
        return 0;
}

static void put_script(ProbeFixture *f, const char *body)
{
        _cleanup_free_ char *text = NULL;
        assert_int_equal(strprintf(&text, "#!/bin/sh\n%s\n", body), 0);
        assert_int_equal(test_tree_put(f->tree, text, "nvidia-smi"), 0);
        assert_int_equal(chmod(f->script, 0755), 0);
}

/* Calls probe_on_sigchld (as the loop does on SIGCHLD) until the child is reaped; bounded. */
static ProbeResult reap(Probe *p, nsec_t now)
{
        nsec_t deadline = test_now() + TEST_WAIT_LIMIT;
        while (p->state == PROBE_RUNNING) {
                if (test_now() > deadline)
                        fail_msg("probe child not reaped in time");
                struct pollfd pfd = {.fd = probe_fd(p), .events = POLLIN};
                (void)poll(&pfd, pfd.fd >= 0 ? 1 : 0, 10);
                if (pfd.fd >= 0 && pfd.revents)
                        probe_on_output(p);
                ProbeResult r = probe_on_sigchld(p, now);
                if (r != PROBE_RESULT_NONE)
                        return r;
        }
        return PROBE_RESULT_NONE;
}

/* AGENT-9: without the binary, the probe is disabled after one notice. */
static void test_probe_missing_binary(void **state)
{
        ProbeFixture *f = *state;
        probe_start(f->p, 0);
        assert_int_equal(f->p->state, PROBE_DISABLED);
        assert_int_equal(probe_fd(f->p), -1);
        assert_int_equal(probe_deadline(f->p), NSEC_INFINITY);
        const char *log = test_log_text(&f->log);
        assert_non_null(strstr(log, "<5>GPU init probe disabled: "));
        assert_null(strstr(strstr(log, "disabled") + 1, "disabled"));
        probe_on_timer(f->p, 100 * NSEC_PER_MIN);
        assert_int_equal(f->p->attempts, 0);

        /* not executable counts as missing */
        assert_int_equal(test_tree_put(f->tree, "#!/bin/sh\nexit 0\n", "nvidia-smi"), 0);
        char *found = NULL;
        assert_int_equal(probe_find_binary(f->script, &found), -ENOENT);
        assert_int_equal(chmod(f->script, 0755), 0);
        assert_int_equal(probe_find_binary(f->script, &found), 0);
        assert_string_equal(found, f->script);
        free(found);
}

/* AGENT-10/11: `nvidia-smi -L` with stdin /dev/null, PATH only; 0 is ok (the signal mask:
 * test_probe_signal_defaults). */
static void test_probe_success(void **state)
{
        ProbeFixture *f = *state;
        put_script(f, "[ \"$1\" = -L ] && [ $# = 1 ] || exit 11\n"
                      "[ \"$(readlink /proc/$$/fd/0)\" = /dev/null ] || exit 12\n"
                      "[ \"$PATH\" = \"" PROBE_PATH "\" ] || exit 13\n"
                      "[ -z \"$HOME$VGPU_TEST\" ] || exit 14\n"
                      "echo 'GPU 0: NVIDIA L40S (UUID: GPU-1)'\n"
                      "exit 0");
        setenv("VGPU_TEST", "leaks", 1);
        probe_start(f->p, 5);
        unsetenv("VGPU_TEST");
        assert_int_equal(f->p->state, PROBE_RUNNING);
        assert_int_equal(f->p->attempts, 1);
        assert_int_equal(probe_deadline(f->p), 5 + 30 * NSEC_PER_SEC);
        if (reap(f->p, 10) != PROBE_RESULT_OK)
                fail_msg("probe failed: %s", test_log_text(&f->log));
        assert_int_equal(f->p->state, PROBE_SUCCEEDED);
        assert_int_equal(probe_fd(f->p), -1);
        assert_int_equal(probe_deadline(f->p), NSEC_INFINITY);
        /* a later SIGCHLD is not ours */
        assert_int_equal(probe_on_sigchld(f->p, 20), PROBE_RESULT_NONE);
}

/* AGENT-10/11: a failure logs its output and retries 15 s after the reap. */
static void test_probe_failure_retries(void **state)
{
        ProbeFixture *f = *state;
        put_script(f, "echo 'No devices were found'; echo 'on stderr' >&2; exit 6");
        probe_start(f->p, 0);
        assert_int_equal(reap(f->p, 2 * NSEC_PER_SEC), PROBE_RESULT_NONE);
        assert_int_equal(f->p->state, PROBE_WAITING);
        assert_int_equal(probe_deadline(f->p), 17 * NSEC_PER_SEC);
        const char *log = test_log_text(&f->log);
        assert_non_null(strstr(log, "attempt 1: "));
        assert_non_null(strstr(log, " -L exited with status 6\n"));
        assert_non_null(strstr(log, "<6>GPU init probe output: No devices were found\n"));
        assert_non_null(strstr(log, "<6>GPU init probe output: on stderr\n"));

        probe_on_timer(f->p, 17 * NSEC_PER_SEC - 1);
        assert_int_equal(f->p->attempts, 1);
        put_script(f, "exit 0");
        probe_on_timer(f->p, 17 * NSEC_PER_SEC);
        assert_int_equal(f->p->attempts, 2);
        assert_int_equal(f->p->state, PROBE_RUNNING);
        assert_int_equal(reap(f->p, 18 * NSEC_PER_SEC), PROBE_RESULT_OK);
}

/* AGENT-10: only the first 4 KiB of the output are kept and logged. */
static void test_probe_output_cap(void **state)
{
        ProbeFixture *f = *state;
        put_script(f, "i=0; while [ $i -lt 200 ]; do echo "
                      "'0123456789012345678901234567890123456789012345678'; i=$((i+1)); done; "
                      "exit 1");
        probe_start(f->p, 0);
        assert_int_equal(reap(f->p, 0), PROBE_RESULT_NONE);
        assert_int_equal(f->p->out_len, PROBE_OUTPUT_MAX);
        assert_int_equal(f->p->out_len + f->p->out_dropped, 200 * 50);
        assert_non_null(strstr(test_log_text(&f->log), "5904 more bytes not shown"));
}

/* AGENT-10: a hung attempt is SIGKILLed after 30 s, and no other starts before its reap. */
static void test_probe_kill_and_single_child(void **state)
{
        ProbeFixture *f = *state;
        put_script(f, "exec sleep 1000");
        probe_start(f->p, 0);
        pid_t pid = f->p->pid;
        probe_on_timer(f->p, 30 * NSEC_PER_SEC - 1);
        assert_false(f->p->killed);
        probe_on_timer(f->p, 30 * NSEC_PER_SEC);
        assert_true(f->p->killed);
        assert_non_null(strstr(test_log_text(&f->log), "killed after 30s"));
        /* killed but not reaped: nothing else is due, however late it gets */
        assert_int_equal(probe_deadline(f->p), NSEC_INFINITY);
        probe_on_timer(f->p, 99 * NSEC_PER_MIN);
        assert_int_equal(f->p->attempts, 1);
        assert_int_equal(f->p->pid, pid);

        assert_int_equal(reap(f->p, 31 * NSEC_PER_SEC), PROBE_RESULT_NONE);
        assert_non_null(strstr(test_log_text(&f->log), "killed by signal 9 (timeout)"));
        assert_int_equal(kill(pid, 0), -1); /* gone, and reaped */
        assert_int_equal(f->p->state, PROBE_WAITING);
        assert_int_equal(probe_deadline(f->p), 46 * NSEC_PER_SEC);
}

/* AGENT-10: the child does not inherit the agent's blocked SIGTERM. */
static void test_probe_signal_defaults(void **state)
{
        ProbeFixture *f = *state;
        put_script(f, "kill -TERM $$; exit 0");
        probe_start(f->p, 0);
        assert_int_equal(reap(f->p, 0), PROBE_RESULT_NONE);
        assert_non_null(strstr(test_log_text(&f->log), "killed by signal 15\n"));
}

/* AGENT-11: retries stop 10 min after the first attempt, with GEN-12's duration. */
static void test_probe_gives_up(void **state)
{
        ProbeFixture *f = *state;
        put_script(f, "exit 3");
        probe_start(f->p, 0);
        assert_int_equal(reap(f->p, 9 * NSEC_PER_MIN), PROBE_RESULT_NONE);
        assert_int_equal(f->p->state, PROBE_WAITING); /* 9m15s is within 10m */
        probe_on_timer(f->p, 9 * NSEC_PER_MIN + 15 * NSEC_PER_SEC);
        assert_int_equal(f->p->attempts, 2);
        assert_int_equal(reap(f->p, 9 * NSEC_PER_MIN + 46 * NSEC_PER_SEC), PROBE_RESULT_NONE);
        assert_int_equal(f->p->state, PROBE_GAVE_UP);
        assert_non_null(strstr(test_log_text(&f->log), "<4>GPU init probe gave up after 10m0s\n"));
        assert_int_equal(probe_deadline(f->p), NSEC_INFINITY);
        probe_on_timer(f->p, 99 * NSEC_PER_MIN);
        assert_int_equal(f->p->attempts, 2);
}

/* A binary that cannot be run (here: not an executable format) is a failed attempt. */
static void test_probe_spawn_failure(void **state)
{
        ProbeFixture *f = *state;
        assert_int_equal(test_tree_put(f->tree,
                                       "\x7f"
                                       "ELFgarbage",
                                       "nvidia-smi"),
                         0);
        assert_int_equal(chmod(f->script, 0755), 0);
        probe_start(f->p, 0);
        if (f->p->state == PROBE_RUNNING) /* glibc may report the exec failure as exit 127 */
                assert_int_equal(reap(f->p, 0), PROBE_RESULT_NONE);
        assert_int_equal(f->p->state, PROBE_WAITING);
        assert_int_equal(f->p->attempts, 1);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_match_kernel_records),
            cmocka_unit_test(test_match_other_facilities),
            cmocka_unit_test(test_match_prefix_strictness),
            cmocka_unit_test(test_match_continuation_lines),
            cmocka_unit_test(test_match_mentions),
            cmocka_unit_test(test_match_bounds_and_escapes),
            cmocka_unit_test(test_gpu_state_machine),
            cmocka_unit_test(test_protocol_commands),
            cmocka_unit_test(test_protocol_gpu_status),
            cmocka_unit_test(test_protocol_id_echo),
            cmocka_unit_test(test_protocol_errors),
            cmocka_unit_test(test_protocol_blank_lines),
            cmocka_unit_test(test_conn_lines),
            cmocka_unit_test(test_conn_line_limit),
            cmocka_unit_test(test_conn_flush),
            cmocka_unit_test(test_options),
            cmocka_unit_test(test_guest_port_lookup),
            cmocka_unit_test(test_guest_nvidia_lookup),
            cmocka_unit_test_setup_teardown(test_watch_file, watch_setup, watch_teardown),
            cmocka_unit_test_setup_teardown(test_watch_overlong_line, watch_setup, watch_teardown),
            cmocka_unit_test_setup_teardown(test_watch_open_retry, watch_setup, watch_teardown),
            cmocka_unit_test_setup_teardown(test_watch_read_error_reopens_at_end, watch_setup,
                                            watch_teardown),
            cmocka_unit_test_setup_teardown(test_watch_einval_reopens, watch_setup, watch_teardown),
            cmocka_unit_test_setup_teardown(test_watch_epipe_and_eagain, watch_setup,
                                            watch_teardown),
            cmocka_unit_test_setup_teardown(test_watch_fifo, watch_setup, watch_teardown),
            cmocka_unit_test_setup_teardown(test_probe_missing_binary, probe_setup, probe_teardown),
            cmocka_unit_test_setup_teardown(test_probe_success, probe_setup, probe_teardown),
            cmocka_unit_test_setup_teardown(test_probe_failure_retries, probe_setup,
                                            probe_teardown),
            cmocka_unit_test_setup_teardown(test_probe_output_cap, probe_setup, probe_teardown),
            cmocka_unit_test_setup_teardown(test_probe_kill_and_single_child, probe_setup,
                                            probe_teardown),
            cmocka_unit_test_setup_teardown(test_probe_signal_defaults, probe_setup,
                                            probe_teardown),
            cmocka_unit_test_setup_teardown(test_probe_gives_up, probe_setup, probe_teardown),
            cmocka_unit_test_setup_teardown(test_probe_spawn_failure, probe_setup, probe_teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
