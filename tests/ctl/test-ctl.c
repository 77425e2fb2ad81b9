/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Tests of vgpuctl (SPEC OPS-6, OPS-7, OPS-8) against a small HTTP server written here: one thread
 * per listener (127.0.0.1:0 and a Unix socket in a temporary directory) that records each request
 * and answers with the response the test set up, then closes the connection. Command lines run
 * in-process through ctl_run() with memory streams and an injected clock and timeouts; a few
 * run the installed-style binary (path in $VGPUCTL) to check the real exit statuses and the
 * environment defaults. Nothing here sleeps: the one timeout test waits for vgpuctl's own,
 * shortened, deadline.
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>

#include <cmocka.h>
#include <curl/curl.h>

#include "ctl/ctl.h"
#include "jwt/jwt.h"
#include "testlib.h"

extern char **environ;

#define TEST_NOW INT64_C(1900000000)
#define TEST_SECRET "0123456789abcdef0123456789abcdef" /* 32 bytes: the smallest allowed */
#define REQUEST_MAX (64 * 1024)

/* ---- the test server ------------------------------------------------------------------------- */

typedef struct Server {
        int listen_fd;
        int stop_pipe[2];
        pthread_t thread;
        bool running;
        pthread_mutex_t lock;

        /* The answer, set by the test before it runs vgpuctl. */
        unsigned status;
        const char *content_type;
        const char *body;
        size_t body_size;
        bool omit_length; /* end the body by closing the connection */
        bool hang;        /* never answer; wait for the client to give up */
        int delay_ms;     /* answer this late (a lifecycle operation that takes its time) */

        /* The last request. */
        unsigned n_requests;
        char *method;
        char *path;
        char *authorization;
        char *accept;
        char *request_content_type;
        char *request_body;
} Server;

static void server_forget_request(Server *s)
{
        free(s->method);
        free(s->path);
        free(s->authorization);
        free(s->accept);
        free(s->request_content_type);
        free(s->request_body);
        s->method = s->path = s->authorization = s->accept = s->request_content_type =
            s->request_body = NULL;
}

static int send_all(int fd, const void *buf, size_t size)
{
        const char *p = buf;
        while (size > 0) {
                ssize_t n = send(fd, p, size, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                p += n;
                size -= (size_t)n;
        }
        return 0;
}

/* A header's value in the raw header block, or NULL; names compare without case. */
static char *header_get(const char *headers, const char *name)
{
        size_t n = strlen(name);
        for (const char *line = strstr(headers, "\r\n"); line && line[2];
             line = strstr(line + 2, "\r\n")) {
                const char *l = line + 2;
                if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
                        const char *v = l + n + 1;
                        v += strspn(v, " ");
                        return strndup(v, (size_t)(strstr(v, "\r\n") - v));
                }
        }
        return NULL;
}

/* Reads one request (headers, then a Content-Length body) and records it. */
static int server_read_request(Server *s, int fd)
{
        _cleanup_free_ char *buf = malloc(REQUEST_MAX + 1);
        size_t size = 0;
        char *end = NULL;

        assert_non_null(buf);
        while (!end) {
                ssize_t n = recv(fd, buf + size, REQUEST_MAX - size, 0);
                if (n <= 0)
                        return -EIO;
                size += (size_t)n;
                buf[size] = 0;
                end = strstr(buf, "\r\n\r\n");
        }
        *end = 0;
        _cleanup_free_ char *length_text = header_get(buf, "Content-Length");
        size_t length = length_text ? strtoul(length_text, NULL, 10) : 0;
        size_t have = size - (size_t)(end + 4 - buf);
        while (have < length) {
                ssize_t n = recv(fd, buf + size, REQUEST_MAX - size, 0);
                if (n <= 0)
                        return -EIO;
                size += (size_t)n;
                have += (size_t)n;
        }

        char *sp1 = strchr(buf, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
        assert_non_null(sp2);
        pthread_mutex_lock(&s->lock);
        server_forget_request(s);
        s->n_requests++;
        s->method = strndup(buf, (size_t)(sp1 - buf));
        s->path = strndup(sp1 + 1, (size_t)(sp2 - sp1 - 1));
        s->authorization = header_get(buf, "Authorization");
        s->accept = header_get(buf, "Accept");
        s->request_content_type = header_get(buf, "Content-Type");
        s->request_body = length ? strndup(end + 4, length) : NULL;
        pthread_mutex_unlock(&s->lock);
        return 0;
}

static void server_answer(Server *s, int fd)
{
        if (server_read_request(s, fd) < 0)
                return;

        if (s->hang) {
                /* Until vgpuctl hangs up (EOF or reset) or the test ends. */
                struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
                                      {.fd = s->stop_pipe[0], .events = POLLIN}};
                for (;;) {
                        char c;
                        if (poll(p, 2, -1) < 0 && errno == EINTR)
                                continue;
                        if (p[1].revents || recv(fd, &c, 1, 0) <= 0)
                                return;
                }
        }

        if (s->delay_ms > 0) {
                /* The stop pipe cuts the delay short when the test ends early. */
                struct pollfd p = {.fd = s->stop_pipe[0], .events = POLLIN};
                if (poll(&p, 1, s->delay_ms) != 0)
                        return;
        }

        _cleanup_free_ char *head = NULL;
        /* A 204 has neither a body nor a Content-Length (RFC 9110, 8.6). */
        int r = s->status == 204
                    ? strprintf(&head, "HTTP/1.1 204 Test\r\nConnection: close\r\n\r\n")
                : s->omit_length ? strprintf(&head,
                                             "HTTP/1.1 %u Test\r\nContent-Type: %s\r\n"
                                             "Connection: close\r\n\r\n",
                                             s->status, s->content_type)
                                 : strprintf(&head,
                                             "HTTP/1.1 %u Test\r\nContent-Type: %s\r\n"
                                             "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                                             s->status, s->content_type, s->body_size);
        /* The client may hang up early (size cap): a failed send is its business. */
        if (r >= 0 && send_all(fd, head, strlen(head)) == 0 && s->status != 204)
                (void)send_all(fd, s->body, s->body_size);
}

static void *server_main(void *userdata)
{
        Server *s = userdata;

        for (;;) {
                struct pollfd p[2] = {{.fd = s->listen_fd, .events = POLLIN},
                                      {.fd = s->stop_pipe[0], .events = POLLIN}};
                if (poll(p, 2, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        break;
                }
                if (p[1].revents)
                        break;
                _cleanup_close_ int fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
                if (fd >= 0)
                        server_answer(s, fd);
        }
        return NULL;
}

static void server_set_answer_bytes(Server *s, unsigned status, const char *content_type,
                                    const char *body, size_t size)
{
        s->status = status;
        s->content_type = content_type;
        s->body = body;
        s->body_size = size;
        s->omit_length = false;
        s->hang = false;
        s->delay_ms = 0;
}

static void server_set_answer(Server *s, unsigned status, const char *content_type,
                              const char *body)
{
        server_set_answer_bytes(s, status, content_type, body, strlen(body));
}

static void server_start(Server *s, int listen_fd)
{
        *s = (Server){.listen_fd = listen_fd};
        assert_int_equal(pthread_mutex_init(&s->lock, NULL), 0);
        assert_int_equal(pipe2(s->stop_pipe, O_CLOEXEC), 0);
        assert_int_equal(listen(listen_fd, 16), 0);
        server_set_answer(s, 200, "application/json", "{}");
        assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
        s->running = true;
}

static void server_stop(Server *s)
{
        if (!s->running)
                return;
        assert_int_equal(write(s->stop_pipe[1], "x", 1), 1);
        assert_int_equal(pthread_join(s->thread, NULL), 0);
        close(s->stop_pipe[0]);
        close(s->stop_pipe[1]);
        close(s->listen_fd);
        server_forget_request(s);
        pthread_mutex_destroy(&s->lock);
        s->running = false;
}

/* ---- the fixture ----------------------------------------------------------------------------- */

typedef struct Fixture {
        char dir[64];
        char unix_path[128];
        char url[64];
        char dead_url[64]; /* a bound port nobody listens on: connections are refused */
        int dead_fd;
        Server tcp;
        Server unix_server;
        Timestamp now;
        CtlEnv env;
        char *out;
        size_t out_size; /* out may hold NUL bytes (instances console) */
        char *err;
} Fixture;

static Timestamp fixture_now(void *userdata)
{
        const Fixture *f = userdata;
        return f->now;
}

static int bind_loopback(uint16_t *ret_port)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof sa;

        assert_true(fd >= 0);
        assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
        assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
        *ret_port = ntohs(sa.sin_port);
        return fd;
}

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        uint16_t port;

        assert_non_null(f);
        snprintf(f->dir, sizeof f->dir, "/tmp/test-ctl-XXXXXX");
        assert_non_null(mkdtemp(f->dir));

        server_start(&f->tcp, bind_loopback(&port));
        snprintf(f->url, sizeof f->url, "http://127.0.0.1:%u", port);
        f->dead_fd = bind_loopback(&port);
        snprintf(f->dead_url, sizeof f->dead_url, "http://127.0.0.1:%u", port);

        snprintf(f->unix_path, sizeof f->unix_path, "%s/api.sock", f->dir);
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        strcpy(sun.sun_path, f->unix_path);
        int ufd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(ufd >= 0);
        assert_int_equal(bind(ufd, (struct sockaddr *)&sun, sizeof sun), 0);
        server_start(&f->unix_server, ufd);

        f->now = (Timestamp){.sec = TEST_NOW};
        f->env = (CtlEnv){
            .clock = {.now = fixture_now, .userdata = f},
            .connect_timeout_ms = CTL_CONNECT_TIMEOUT_MS,
            .timeout_ms = CTL_TIMEOUT_MS,
            .lifecycle_timeout_ms = CTL_LIFECYCLE_TIMEOUT_MS,
        };
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;

        server_stop(&f->tcp);
        server_stop(&f->unix_server);
        close(f->dead_fd);
        (void)test_remove_tree_at(AT_FDCWD, f->dir);
        free(f->out);
        free(f->err);
        free(f);
        return 0;
}

/* Runs "vgpuctl <args...>" (NULL-terminated) in-process; f->out and f->err get its output. */
static int run_args(Fixture *f, const char *const *args)
{
        char *argv[64] = {"vgpuctl"};
        int argc = 1;
        size_t err_size;

        for (; args[argc - 1]; argc++) {
                assert_true(argc < 63);
                argv[argc] = (char *)args[argc - 1];
        }
        free(f->out);
        free(f->err);
        f->out = f->err = NULL;
        f->env.out = open_memstream(&f->out, &f->out_size);
        f->env.err = open_memstream(&f->err, &err_size);
        assert_non_null(f->env.out);
        assert_non_null(f->env.err);

        int status = ctl_run(argc, argv, &f->env);

        assert_int_equal(fclose(f->env.out), 0);
        assert_int_equal(fclose(f->env.err), 0);
        f->env.out = f->env.err = NULL;
        return status;
}

#define RUN(f, ...) run_args(f, (const char *const[]){__VA_ARGS__, NULL})

static void write_file(const char *path, const void *data, size_t size, mode_t mode)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        assert_true(fd >= 0);
        assert_int_equal(write_all(fd, data, size), 0);
        assert_int_equal(fchmod(fd, mode), 0);
}

/* ---- canned answers (SPEC §11) --------------------------------------------------------------- */

static const char resources_json[] =
    "{\"gpu\":{\"mode\":\"vgpu\",\"total_slots\":64,\"used_slots\":3,\"allocatable_slots\":0,"
    "\"quarantined_slots\":1,\"placement_disabled_reason\":\"VF health state unavailable: "
    "read VF health state: Input/output error\",\"placement_warning\":\"automatic VF "
    "quarantine suspended: 5 automatic quarantines within 1h0m0s\",\"profiles\":["
    "{\"name\":\"NVIDIA L40S-12Q\",\"framebuffer_mb\":12288,\"available\":0},"
    "{\"name\":\"NVIDIA L40S-1B\",\"framebuffer_mb\":1024,\"available\":0},"
    "{\"name\":\"NVIDIA L40S-2Q\",\"framebuffer_mb\":0,\"available\":0}]}}";

static const char resources_table[] =
    "mode                vgpu\n"
    "total slots         64\n"
    "used slots          3\n"
    "allocatable slots   0\n"
    "quarantined slots   1\n"
    "placement disabled  VF health state unavailable: read VF health state: Input/output "
    "error\n"
    "placement warning   automatic VF quarantine suspended: 5 automatic quarantines within "
    "1h0m0s\n"
    "\n"
    "PROFILE          FRAMEBUFFER  AVAILABLE\n"
    "NVIDIA L40S-12Q  12288 MiB    0\n"
    "NVIDIA L40S-1B   1024 MiB     0\n"
    "NVIDIA L40S-2Q   -            0\n";

/* API-22's example, plus a second GPU with an uncertain VF and one without VFs. */
static const char gpus_json[] =
    "{\"gpus\":[{\"address\":\"0000:e3:00.0\",\"model\":\"NVIDIA L40S\",\"framework\":"
    "\"vendor-vfio\",\"mode\":\"mixed\",\"nvml\":\"ok\",\"vfs\":["
    "{\"address\":\"0000:e3:00.4\",\"parent\":\"0000:e3:00.0\",\"state\":\"claimed\","
    "\"profile\":\"NVIDIA L40S-4Q\",\"instance_id\":\"k3x9q2m8v1c4z7n5b0wd\",\"failures\":0},"
    "{\"address\":\"0000:e3:00.5\",\"parent\":\"0000:e3:00.0\",\"state\":\"quarantined\","
    "\"failures\":2},"
    "{\"address\":\"0000:e3:00.6\",\"parent\":\"0000:e3:00.0\",\"state\":\"free\","
    "\"failures\":0}]},"
    "{\"address\":\"0001:c8:00.0\",\"model\":\"NVIDIA L40S\",\"framework\":\"vendor-vfio\","
    "\"mode\":\"unknown\",\"nvml\":\"timeout\",\"vfs\":["
    "{\"address\":\"0001:c8:00.4\",\"parent\":\"0001:c8:00.0\",\"state\":\"claimed\","
    "\"profile\":\"NVIDIA L40S-2Q\",\"instance_id\":\"z3x9q2m8v1c4z7n5b0wd\",\"failures\":1,"
    "\"uncertain\":true}]},"
    "{\"address\":\"0002:01:00.0\",\"model\":\"NVIDIA A40\",\"framework\":\"mdev\","
    "\"mode\":\"equal\",\"nvml\":\"ok\",\"vfs\":[]}]}";

static const char gpus_table[] =
    "GPU 0000:e3:00.0  NVIDIA L40S  vendor-vfio  mode: mixed  nvml: ok\n"
    "  VF            STATE        PROFILE         INSTANCE              FAILURES\n"
    "  0000:e3:00.4  claimed      NVIDIA L40S-4Q  k3x9q2m8v1c4z7n5b0wd  0\n"
    "  0000:e3:00.5  quarantined  -               -                     2\n"
    "  0000:e3:00.6  free         -               -                     0\n"
    "\n"
    "GPU 0001:c8:00.0  NVIDIA L40S  vendor-vfio  mode: unknown  nvml: timeout\n"
    "  VF            STATE                PROFILE         INSTANCE              FAILURES\n"
    "  0001:c8:00.4  claimed (uncertain)  NVIDIA L40S-2Q  z3x9q2m8v1c4z7n5b0wd  1\n"
    "\n"
    "GPU 0002:01:00.0  NVIDIA A40  mdev  mode: equal  nvml: ok\n"
    "  no VFs\n";

/* The second record's reason carries an escape sequence, which must not reach the terminal. */
static const char health_json[] =
    "{\"available\":true,\"threshold\":2,\"breaker\":{\"enabled\":true,\"open\":true,"
    "\"opened_at\":\"2026-09-02T20:30:00Z\",\"reason\":\"5 automatic quarantines within "
    "1h0m0s\",\"window\":\"1h0m0s\",\"max_quarantines\":4},\"records\":["
    "{\"vf_address\":\"0000:e3:00.4\",\"failures\":[{\"instance_id\":\"k3x9q2m8v1c4z7n5b0wd\","
    "\"assigned_at\":\"2026-09-02T20:08:04.5974Z\",\"reported_at\":\"2026-09-02T20:09:01.1Z\"}"
    "],\"gpu\":\"0000:e3:00.0\",\"present\":true},"
    "{\"vf_address\":\"0000:e3:00.5\",\"failures\":[{\"reported_at\":\"2026-09-02T20:09:01Z\"},"
    "{\"reported_at\":\"2026-09-02T20:10:01Z\"}],\"quarantined_at\":\"2026-09-02T20:10:01Z\","
    "\"reason\":\"NVRM: RmInitAdapter failed!\\u001b[2J\",\"source\":\"auto\","
    "\"gpu\":\"0000:e3:00.0\",\"present\":true},"
    "{\"vf_address\":\"0000:e4:00.4\",\"quarantined_at\":\"2026-09-03T08:00:00Z\","
    "\"reason\":\"bad fan\",\"source\":\"operator\",\"present\":false}]}";

static const char health_table[] =
    "store      available\n"
    "threshold  2 failures\n"
    "breaker    open since 2026-09-02T20:30:00Z: 5 automatic quarantines within 1h0m0s\n"
    "\n"
    "VF            GPU           PRESENT  FAILURES  QUARANTINED           SOURCE    REASON\n"
    "0000:e3:00.4  0000:e3:00.0  yes      1         -                     -         -\n"
    "0000:e3:00.5  0000:e3:00.0  yes      2         2026-09-02T20:10:01Z  auto      NVRM: "
    "RmInitAdapter failed!?[2J\n"
    "0000:e4:00.4  -             no       0         2026-09-03T08:00:00Z  operator  bad fan\n";

static const char operator_json[] =
    "{\"records\":[{\"vf_address\":\"0000:e3:00.4\",\"quarantined_at\":\"2026-09-03T08:00:00Z\","
    "\"reason\":\"fan noise\",\"source\":\"operator\",\"gpu\":\"0000:e3:00.0\","
    "\"present\":true}],\"running_instances\":[{\"id\":\"k3x9q2m8v1c4z7n5b0wd\","
    "\"vf\":\"0000:e3:00.4\"}]}";

static const char operator_table_records[] =
    "VF            GPU           PRESENT  FAILURES  QUARANTINED           SOURCE    REASON\n"
    "0000:e3:00.4  0000:e3:00.0  yes      0         2026-09-03T08:00:00Z  operator  fan noise\n"
    "\n"
    "still running on these VFs (a quarantine never stops a VM; stop or delete them to free "
    "the VFs):\n"
    "INSTANCE              VF\n"
    "k3x9q2m8v1c4z7n5b0wd  0000:e3:00.4\n";

/* ---- tables (OPS-6, OPS-7) ------------------------------------------------------------------- */

static void test_resources_table(void **state) /* OPS-7, API-4, API-5 */
{
        Fixture *f = *state;

        server_set_answer(&f->tcp, 200, "application/json", resources_json);
        assert_int_equal(RUN(f, "--url", f->url, "--token", "tok-1", "resources"), CTL_EXIT_OK);
        assert_string_equal(f->out, resources_table);
        assert_string_equal(f->err, "");
        assert_string_equal(f->tcp.method, "GET");
        assert_string_equal(f->tcp.path, "/resources");
        assert_string_equal(f->tcp.authorization, "Bearer tok-1");
        assert_null(f->tcp.request_body);
}

static void test_resources_without_framework(void **state) /* OPS-7, API-4 */
{
        Fixture *f = *state;

        server_set_answer(&f->tcp, 200, "application/json", "{\"gpu\":null}");
        assert_int_equal(RUN(f, "--url", f->url, "resources"), CTL_EXIT_OK);
        assert_string_equal(f->out, "no vGPU framework on this host\n");

        /* A slot table without profiles still prints, and says so. */
        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"gpu\":{\"mode\":\"vgpu\",\"total_slots\":0,\"used_slots\":0,"
                          "\"allocatable_slots\":0,\"quarantined_slots\":0,\"profiles\":[]}}");
        assert_int_equal(RUN(f, "--url", f->url, "resources"), CTL_EXIT_OK);
        assert_string_equal(f->out, "mode               vgpu\n"
                                    "total slots        0\n"
                                    "used slots         0\n"
                                    "allocatable slots  0\n"
                                    "quarantined slots  0\n"
                                    "\n"
                                    "no vGPU profiles\n");
}

static void test_gpus_table(void **state) /* OPS-7, API-6, API-22 */
{
        Fixture *f = *state;

        server_set_answer(&f->tcp, 200, "application/json", gpus_json);
        assert_int_equal(RUN(f, "--url", f->url, "gpus"), CTL_EXIT_OK);
        assert_string_equal(f->out, gpus_table);
        assert_string_equal(f->tcp.method, "GET");
        assert_string_equal(f->tcp.path, "/gpus");

        server_set_answer(&f->tcp, 200, "application/json", "{\"gpus\":[]}");
        assert_int_equal(RUN(f, "--url", f->url, "gpus"), CTL_EXIT_OK);
        assert_string_equal(f->out, "no GPUs\n");

        /* HEALTH-26: a drained GPU says since when and why, its text sanitised. */
        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"gpus\":[{\"address\":\"0000:e3:00.0\",\"model\":\"NVIDIA L40S\","
                          "\"framework\":\"vendor-vfio\",\"mode\":\"mixed\",\"nvml\":\"ok\","
                          "\"drained\":{\"reason\":\"SR-IOV\\u001b cycle\","
                          "\"drained_at\":\"2026-09-02T20:00:00Z\"},\"vfs\":[]}]}");
        assert_int_equal(RUN(f, "--url", f->url, "gpus"), CTL_EXIT_OK);
        assert_non_null(strstr(f->out, "\n  drained since 2026-09-02T20:00:00Z: SR-IOV? cycle\n"));
}

static void test_health_list(void **state) /* OPS-7, API-10 */
{
        Fixture *f = *state;

        server_set_answer(&f->tcp, 200, "application/json", health_json);
        assert_int_equal(RUN(f, "--url", f->url, "health", "list"), CTL_EXIT_OK);
        assert_string_equal(f->out, health_table);
        assert_string_equal(f->tcp.method, "GET");
        assert_string_equal(f->tcp.path, "/gpu/health");

        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"available\":false,\"unavailable_reason\":\"unmarshal VF health "
                          "state: bad\",\"threshold\":3,\"breaker\":{\"enabled\":true,\"open\":"
                          "false,\"window\":\"1h0m0s\",\"max_quarantines\":4},\"records\":[]}");
        assert_int_equal(RUN(f, "--url", f->url, "health", "list"), CTL_EXIT_OK);
        assert_string_equal(f->out, "store      unavailable: unmarshal VF health state: bad\n"
                                    "threshold  3 failures\n"
                                    "breaker    closed; opens at more than 4 automatic "
                                    "quarantines within 1h0m0s\n"
                                    "\n"
                                    "no health records\n");

        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"available\":true,\"threshold\":2,\"breaker\":{\"enabled\":false,"
                          "\"open\":false,\"window\":\"1h0m0s\",\"max_quarantines\":4},"
                          "\"records\":[]}");
        assert_int_equal(RUN(f, "--url", f->url, "health", "list"), CTL_EXIT_OK);
        assert_string_equal(f->out, "store      available\n"
                                    "threshold  2 failures\n"
                                    "breaker    disabled\n"
                                    "\n"
                                    "no health records\n");
}

static void test_json_passthrough(void **state) /* OPS-6 */
{
        Fixture *f = *state;
        _cleanup_free_ char *want = NULL;

        server_set_answer(&f->tcp, 200, "application/json", gpus_json);
        assert_int_equal(RUN(f, "--json", "--url", f->url, "gpus"), CTL_EXIT_OK);
        assert_int_equal(strprintf(&want, "%s\n", gpus_json), 0);
        assert_string_equal(f->out, want);

        /* Options may follow the command; a body that ends in a newline gets no second one. */
        server_set_answer(&f->tcp, 200, "application/json", "{\"gpu\": null}\n");
        assert_int_equal(RUN(f, "resources", "--url", f->url, "--json"), CTL_EXIT_OK);
        assert_string_equal(f->out, "{\"gpu\": null}\n");
}

/* ---- API errors (OPS-8, API-11) -------------------------------------------------------------- */

static void test_api_errors(void **state) /* OPS-8, API-11, API-12 */
{
        Fixture *f = *state;

        server_set_answer(&f->tcp, 401, "application/json",
                          "{\"code\":\"unauthorized\",\"message\":\"invalid or missing bearer "
                          "token\"}");
        assert_int_equal(RUN(f, "--url", f->url, "gpus"), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err,
                            "error: unauthorized: invalid or missing bearer token (HTTP 401)\n"
                            "hint: no token was given; use --token, --token-file or VGPUD_TOKEN\n");
        /* Without a token there is no Authorization header at all. */
        assert_null(f->tcp.authorization);

        /* With one, the daemon's word stands alone. */
        assert_int_equal(RUN(f, "--url", f->url, "--token", "stale", "gpus"), CTL_EXIT_API);
        assert_string_equal(f->err,
                            "error: unauthorized: invalid or missing bearer token (HTTP 401)\n");

        server_set_answer(&f->tcp, 404, "application/json",
                          "{\"code\":\"not_found\",\"message\":\"no VF 0000:e3:00.7\"}");
        assert_int_equal(RUN(f, "--url", f->url, "health", "clear", "0000:e3:00.7", "--json"),
                         CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, "error: not_found: no VF 0000:e3:00.7 (HTTP 404)\n");

        server_set_answer(&f->tcp, 502, "text/html", "<html>bad gateway</html>");
        assert_int_equal(RUN(f, "--url", f->url, "resources"), CTL_EXIT_API);
        assert_string_equal(f->err, "error: HTTP 502 without a JSON error body\n");
}

static void test_bad_responses(void **state) /* OPS-8, GEN-6 */
{
        Fixture *f = *state;

        server_set_answer(&f->tcp, 200, "application/json", "{\"gpu\":null,\"gpu\":null}");
        assert_int_equal(RUN(f, "--url", f->url, "--json", "resources"), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, "error: invalid JSON in the response (HTTP 200): duplicate "
                                    "object key near '\"gpu\"'\n");

        server_set_answer(&f->tcp, 200, "application/json", "[]");
        assert_int_equal(RUN(f, "--url", f->url, "resources"), CTL_EXIT_API);
        assert_string_equal(f->err, "error: invalid JSON in the response (HTTP 200): not an "
                                    "object\n");

        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"gpu\":{\"mode\":\"vgpu\",\"total_slots\":\"64\"}}");
        assert_int_equal(RUN(f, "--url", f->url, "resources"), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, "error: unexpected resources in the response: Expected "
                                    "integer, got string\n");

        /* Nothing is printed when a later part of the answer is wrong. */
        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"gpus\":[{\"address\":\"0000:e3:00.0\",\"model\":\"m\","
                          "\"framework\":\"mdev\",\"mode\":\"equal\",\"nvml\":\"ok\",\"vfs\":["
                          "{\"address\":\"0000:e3:00.4\",\"state\":\"free\"}]}]}");
        assert_int_equal(RUN(f, "--url", f->url, "gpus"), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, "error: unexpected VF in the response: Object item not found: "
                                    "failures\n");
}

static void test_response_size_cap(void **state) /* OPS-8, GEN-5 */
{
        Fixture *f = *state;
        _cleanup_free_ char *big = malloc(CTL_RESPONSE_MAX + 2);
        _cleanup_free_ char *want = NULL;

        assert_non_null(big);
        memset(big, ' ', CTL_RESPONSE_MAX + 1);
        big[0] = '{';
        big[CTL_RESPONSE_MAX] = '}';
        big[CTL_RESPONSE_MAX + 1] = 0;
        assert_int_equal(strprintf(&want, "error: response from %s is larger than %d bytes\n",
                                   f->url, CTL_RESPONSE_MAX),
                         0);

        /* Announced by Content-Length, and refused before the body is read. */
        server_set_answer(&f->tcp, 200, "application/json", big);
        assert_int_equal(RUN(f, "--url", f->url, "--json", "gpus"), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, want);

        /* Unannounced: counted as it arrives. */
        f->tcp.omit_length = true;
        assert_int_equal(RUN(f, "--url", f->url, "--json", "gpus"), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, want);

        /* Exactly the cap is fine. */
        big[CTL_RESPONSE_MAX - 1] = '}';
        big[CTL_RESPONSE_MAX] = 0;
        server_set_answer(&f->tcp, 200, "application/json", big);
        f->tcp.omit_length = true;
        assert_int_equal(RUN(f, "--url", f->url, "--json", "gpus"), CTL_EXIT_OK);
        assert_int_equal(strlen(f->out), CTL_RESPONSE_MAX + 1);
}

/* ---- operator routes (OPS-7, API-2, API-9, API-18) ------------------------------------------- */

static void test_operator_routes(void **state) /* OPS-7, API-2, API-9, API-18 */
{
        Fixture *f = *state;
        static const struct {
                const char *args[4];
                const char *method;
                const char *path;
                const char *body;
                const char *summary;
        } cases[] = {
            {{"quarantine", "0000:e3:00.4", "--reason", "fan noise"},
             "POST",
             "/gpu/vfs/0000:e3:00.4/quarantine",
             "{\"reason\":\"fan noise\"}",
             "quarantined VF 0000:e3:00.4\n"},
            {{"clear", "0000:e3:00.4"},
             "DELETE",
             "/gpu/vfs/0000:e3:00.4/quarantine",
             NULL,
             "cleared VF 0000:e3:00.4\n"},
            {{"drain", "--reason=RMA \"ticket\" 42", "0001:c8:00.0"},
             "POST",
             "/gpu/gpus/0001:c8:00.0/drain",
             "{\"reason\":\"RMA \\\"ticket\\\" 42\"}",
             "drained GPU 0001:c8:00.0\n"},
            {{"undrain", "0001:c8:00.0"},
             "DELETE",
             "/gpu/gpus/0001:c8:00.0/drain",
             NULL,
             "undrained GPU 0001:c8:00.0\n"},
            /* HEALTH-26: the explicit wipe after a recovery. */
            {{"clear-gpu", "0001:c8:00.0"},
             "DELETE",
             "/gpu/gpus/0001:c8:00.0/records",
             NULL,
             "cleared the VF records of GPU 0001:c8:00.0\n"},
            {{"breaker-reset"},
             "DELETE",
             "/gpu/health/breaker",
             NULL,
             "closed the quarantine breaker\n"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *argv[10] = {"--url", f->url, "--token", "op-token", "health"};
                size_t n = 5;
                for (size_t j = 0; j < 4 && cases[i].args[j]; j++)
                        argv[n++] = cases[i].args[j];
                argv[n] = NULL;

                server_set_answer(&f->tcp, 200, "application/json", operator_json);
                assert_int_equal(run_args(f, argv), CTL_EXIT_OK);
                assert_string_equal(f->tcp.method, cases[i].method);
                assert_string_equal(f->tcp.path, cases[i].path);
                assert_string_equal(f->tcp.authorization, "Bearer op-token");
                if (cases[i].body) {
                        assert_string_equal(f->tcp.request_body, cases[i].body);
                        assert_string_equal(f->tcp.request_content_type, "application/json");
                } else {
                        assert_null(f->tcp.request_body);
                        assert_null(f->tcp.request_content_type);
                }

                _cleanup_free_ char *want = NULL;
                assert_int_equal(
                    strprintf(&want, "%s\n%s", cases[i].summary, operator_table_records), 0);
                assert_string_equal(f->out, want);
                assert_string_equal(f->err, "");
        }

        /* An answer with nothing left to show: the records were deleted, nothing runs. */
        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"records\":[],\"running_instances\":[]}");
        assert_int_equal(RUN(f, "--url", f->url, "health", "undrain", "0001:c8:00.0"), CTL_EXIT_OK);
        assert_string_equal(f->out, "undrained GPU 0001:c8:00.0\n");
        server_set_answer(&f->tcp, 200, "application/json", "{}");
        assert_int_equal(RUN(f, "--url", f->url, "health", "breaker-reset"), CTL_EXIT_OK);
        assert_string_equal(f->out, "closed the quarantine breaker\n");

        /* --json prints the answer as sent. */
        server_set_answer(&f->tcp, 200, "application/json", operator_json);
        assert_int_equal(RUN(f, "--url", f->url, "--json", "health", "quarantine", "0000:e3:00.4",
                             "--reason", "x"),
                         CTL_EXIT_OK);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want, "%s\n", operator_json), 0);
        assert_string_equal(f->out, want);

        /* The daemon refuses while the store is down: the message is the daemon's. */
        server_set_answer(&f->tcp, 503, "application/json",
                          "{\"code\":\"health_store_unavailable\",\"message\":\"VF health state "
                          "unavailable: last write failed: No space left on device\"}");
        assert_int_equal(
            RUN(f, "--url", f->url, "health", "drain", "0000:e3:00.0", "--reason", "r"),
            CTL_EXIT_API);
        assert_string_equal(f->err, "error: health_store_unavailable: VF health state "
                                    "unavailable: last write failed: No space left on device "
                                    "(HTTP 503)\n");
}

/* ---- instances (OPS-7, API-2, API-7, API-8, API-9, INST-9, INST-24, INST-25) ---------------- */

#define ID1 "k3x9q2m8v1c4z7n5b0wd"

/* API-7's example, claimed; one without a profile and with an error; one waiting for a claim;
 * one on an mdev GPU, with a key this client does not know. */
static const char instances_json[] =
    "[{\"id\":\"" ID1 "\",\"name\":\"render-01\",\"state\":\"Running\","
    "\"created_at\":\"2026-09-02T20:08:03Z\",\"vcpus\":4,\"memory_mb\":8192,"
    "\"boot\":{\"kernel\":\"/var/lib/vgpud/images/vmlinuz\",\"cmdline\":\"console=ttyS0\"},"
    "\"gpu\":{\"profile\":\"NVIDIA L40S-2Q\",\"device_path\":\"/sys/bus/pci/devices/"
    "0000:e3:00.6\",\"claimed_at\":\"2026-09-02T20:08:04.5974Z\"},"
    "\"network\":{\"mode\":\"nat\",\"bridge\":\"vgpud0\",\"mac\":\"52:54:00:35:1d:5b\","
    "\"ip\":\"10.233.0.2\",\"prefix\":24,\"gateway\":\"10.233.0.1\",\"tap\":\"vgtk3x9q2m8v1c4\"}},"
    "{\"id\":\"a0000000000000000001\",\"name\":\"build-7\",\"state\":\"Stopped\","
    "\"created_at\":\"2026-09-02T21:00:00Z\",\"vcpus\":16,\"memory_mb\":65536,"
    "\"boot\":{\"disk\":\"/var/lib/vgpud/images/build.img\"},"
    "\"error\":\"qemu exited with status 1 before QMP was ready: no\\u001b[2J disk\","
    "\"network\":{\"mode\":\"bridge\",\"bridge\":\"br-lan\",\"mac\":\"52:54:00:aa:bb:cc\"}},"
    "{\"id\":\"b0000000000000000002\",\"name\":\"queued\",\"state\":\"Stopped\","
    "\"created_at\":\"2026-09-02T21:05:00Z\",\"vcpus\":1,\"memory_mb\":128,"
    "\"boot\":{\"disk\":\"/var/lib/vgpud/images/q.img\"},\"gpu\":{\"profile\":\"NVIDIA "
    "L40S-1B\"}},"
    "{\"id\":\"c0000000000000000003\",\"name\":\"a40-vm\",\"state\":\"Running\","
    "\"created_at\":\"2026-09-03T08:00:00Z\",\"vcpus\":8,\"memory_mb\":16384,"
    "\"boot\":{\"kernel\":\"/img/vmlinuz\",\"initrd\":\"/img/initrd\"},"
    "\"gpu\":{\"profile\":\"NVIDIA A40-4Q\",\"device_path\":\"/sys/bus/mdev/devices/"
    "4b20d080-1b54-4048-85b3-a6a62d165c01\",\"mdev_uuid\":\"4b20d080-1b54-4048-85b3-"
    "a6a62d165c01\",\"claimed_at\":\"2026-09-03T08:00:01Z\"},\"hypervisor_hint\":1}]";

static const char instances_table[] =
    "ID                    NAME       STATE    VCPUS  MEMORY     PROFILE         VF          "
    "                          NETWORK  IP          CREATED\n"
    "k3x9q2m8v1c4z7n5b0wd  render-01  Running  4      8192 MiB   NVIDIA L40S-2Q  0000:e3:00.6"
    "                          nat      10.233.0.2  2026-09-02T20:08:03Z\n"
    "a0000000000000000001  build-7    Stopped  16     65536 MiB  -               -           "
    "                          bridge   -           2026-09-02T21:00:00Z\n"
    "b0000000000000000002  queued     Stopped  1      128 MiB    NVIDIA L40S-1B  -           "
    "                          -        -           2026-09-02T21:05:00Z\n"
    "c0000000000000000003  a40-vm     Running  8      16384 MiB  NVIDIA A40-4Q   4b20d080-1b5"
    "4-4048-85b3-a6a62d165c01  -        -           2026-09-03T08:00:00Z\n";

/* API-7's example as one instance. */
static const char instance_json[] =
    "{\"id\":\"" ID1 "\",\"name\":\"render-01\",\"state\":\"Running\","
    "\"created_at\":\"2026-09-02T20:08:03Z\",\"vcpus\":4,\"memory_mb\":8192,"
    "\"boot\":{\"kernel\":\"/var/lib/vgpud/images/vmlinuz\",\"cmdline\":\"console=ttyS0\"},"
    "\"gpu\":{\"profile\":\"NVIDIA L40S-2Q\",\"device_path\":\"/sys/bus/pci/devices/"
    "0000:e3:00.6\",\"claimed_at\":\"2026-09-02T20:08:04.5974Z\"}}";

static const char instance_table[] = "id           " ID1 "\n"
                                     "name         render-01\n"
                                     "state        Running\n"
                                     "created      2026-09-02T20:08:03Z\n"
                                     "vcpus        4\n"
                                     "memory       8192 MiB\n"
                                     "kernel       /var/lib/vgpud/images/vmlinuz\n"
                                     "cmdline      console=ttyS0\n"
                                     "profile      NVIDIA L40S-2Q\n"
                                     "device path  /sys/bus/pci/devices/0000:e3:00.6\n"
                                     "claimed      2026-09-02T20:08:04.5974Z\n";

static void test_instances_requests(void **state) /* OPS-7, API-2, API-9 */
{
        Fixture *f = *state;
        static const struct {
                const char *args[24];
                const char *method;
                const char *path;
                const char *body; /* NULL: none sent, and no Content-Type */
                unsigned status;
                const char *answer;
                const char *out;
        } cases[] = {
            {{"list"}, "GET", "/instances", NULL, 200, instances_json, instances_table},
            {{"get", ID1}, "GET", "/instances/" ID1, NULL, 200, instance_json, instance_table},
            /* Every option, in an order unlike the body's; the body follows API-9's shape. */
            {{"create", "--profile", "NVIDIA L40S-2Q", "--disk", "/img/d.raw", "--cmdline",
              "console=ttyS0 quiet \"x\"", "--initrd", "/img/initrd", "--kernel", "/img/vmlinuz",
              "--memory-mb", "8192", "--vcpus", "4", "--name", "render-01"},
             "POST",
             "/instances",
             "{\"name\":\"render-01\",\"vcpus\":4,\"memory_mb\":8192,\"boot\":{\"kernel\":"
             "\"/img/vmlinuz\",\"initrd\":\"/img/initrd\",\"cmdline\":\"console=ttyS0 quiet "
             "\\\"x\\\"\",\"disk\":\"/img/d.raw\"},\"gpu\":{\"profile\":\"NVIDIA L40S-2Q\"}}",
             201,
             instance_json,
             instance_table},
            /* Without a profile there is no "gpu"; absent boot keys are left out. */
            {{"create", "--name=build-7", "--vcpus=16", "--memory-mb=65536", "--disk=/img/b.img"},
             "POST",
             "/instances",
             "{\"name\":\"build-7\",\"vcpus\":16,\"memory_mb\":65536,\"boot\":{\"disk\":"
             "\"/img/b.img\"}}",
             201,
             instance_json,
             instance_table},
            /* Sizes the daemon refuses (INST-5) still travel: it names the field (INST-7). */
            {{"create", "--name", "x", "--vcpus", "0", "--memory-mb", "18446744073", "--kernel",
              "relative/vmlinuz"},
             "POST",
             "/instances",
             "{\"name\":\"x\",\"vcpus\":0,\"memory_mb\":18446744073,\"boot\":{\"kernel\":"
             "\"relative/vmlinuz\"}}",
             201,
             instance_json,
             instance_table},
            {{"start", ID1},
             "POST",
             "/instances/" ID1 "/start",
             NULL,
             200,
             instance_json,
             instance_table},
            {{"stop", ID1},
             "POST",
             "/instances/" ID1 "/stop",
             NULL,
             200,
             instance_json,
             instance_table},
            {{"delete", ID1},
             "DELETE",
             "/instances/" ID1,
             NULL,
             204,
             "",
             "deleted instance " ID1 "\n"},
            {{"console", ID1},
             "GET",
             "/instances/" ID1 "/console",
             NULL,
             200,
             "login: ",
             "login: "},
            {{"console", "--tail-bytes", "1", ID1},
             "GET",
             "/instances/" ID1 "/console?tail_bytes=1",
             NULL,
             200,
             " ",
             " "},
            {{"console", ID1, "--tail-bytes=1048576"},
             "GET",
             "/instances/" ID1 "/console?tail_bytes=1048576",
             NULL,
             200,
             "",
             ""},
            /* CONS-4: --follow asks for the stream, and prints it as it comes. */
            {{"console", ID1, "--follow"},
             "GET",
             "/instances/" ID1 "/console?follow=true",
             NULL,
             200,
             "boot\nlogin: ",
             "boot\nlogin: "},
            {{"console", ID1, "--follow", "--tail-bytes", "9"},
             "GET",
             "/instances/" ID1 "/console?follow=true&tail_bytes=9",
             NULL,
             200,
             "login: ",
             "login: "},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *argv[32] = {"--url", f->url, "--token", "inst-token", "instances"};
                size_t n = 5;
                for (size_t j = 0; j < ELEMENTSOF(cases[i].args) && cases[i].args[j]; j++)
                        argv[n++] = cases[i].args[j];
                argv[n] = NULL;

                server_set_answer(&f->tcp, cases[i].status,
                                  startswith(cases[i].path, "/instances/" ID1 "/console")
                                      ? "text/plain; charset=utf-8"
                                      : "application/json",
                                  cases[i].answer);
                unsigned before = f->tcp.n_requests;
                assert_int_equal(run_args(f, argv), CTL_EXIT_OK);
                assert_int_equal(f->tcp.n_requests, before + 1);
                assert_string_equal(f->tcp.method, cases[i].method);
                assert_string_equal(f->tcp.path, cases[i].path);
                assert_string_equal(f->tcp.authorization, "Bearer inst-token");
                if (cases[i].body) {
                        assert_string_equal(f->tcp.request_body, cases[i].body);
                        assert_string_equal(f->tcp.request_content_type, "application/json");
                } else {
                        assert_null(f->tcp.request_body);
                        assert_null(f->tcp.request_content_type);
                }
                assert_string_equal(f->tcp.accept, streq(cases[i].args[0], "console")
                                                       ? "text/plain"
                                                       : "application/json");
                assert_string_equal(f->out, cases[i].out);
                assert_string_equal(f->err, "");
        }
}

/* OPS-7's disk commands: each one's request and what it prints. */
#define VOL1 "v0lume0000000000000a"
static const char image_json[] =
    "{\"name\":\"debian-12\",\"state\":\"ready\",\"format\":\"qcow2\","
    "\"virtual_size_bytes\":2147483648,\"actual_size_bytes\":524288000,\"sha256\":\"ab12\","
    "\"created_at\":\"2026-09-02T20:08:03Z\",\"instances\":2,\"future\":1}";
static const char image_table[] = "name          debian-12\n"
                                  "state         ready\n"
                                  "format        qcow2\n"
                                  "virtual size  2.0 GiB\n"
                                  "actual size   500.0 MiB\n"
                                  "sha256        ab12\n"
                                  "instances     2\n"
                                  "created       2026-09-02T20:08:03Z\n";
static const char volume_json[] =
    "{\"id\":\"" VOL1 "\",\"name\":\"data\",\"size_gb\":100,\"created_at\":"
    "\"2026-09-02T20:08:03Z\",\"attachments\":[{\"instance\":\"" ID1 "\",\"readonly\":true}]}";
static const char volume_table[] = "id           " VOL1 "\n"
                                   "name         data\n"
                                   "size         100 GiB\n"
                                   "attached to  " ID1 " (ro)\n"
                                   "created      2026-09-02T20:08:03Z\n";

static void test_disk_requests(void **state) /* OPS-7, DISK-2, DISK-4, DISK-7, DISK-8 */
{
        Fixture *f = *state;
        static const struct {
                const char *args[12];
                const char *method;
                const char *path;
                const char *body; /* NULL: none sent */
                unsigned status;
                const char *answer;
                const char *out;
        } cases[] = {
            {{"images", "list"},
             "GET",
             "/images",
             NULL,
             200,
             "[{\"name\":\"debian-12\",\"state\":\"importing\",\"progress\":0.425,"
             "\"format\":\"raw\",\"created_at\":\"2026-09-02T20:08:03Z\",\"instances\":0}]",
             "NAME       STATE          FORMAT  SIZE  INSTANCES  CREATED\n"
             "debian-12  importing 42%  raw           0          2026-09-02T20:08:03Z\n"},
            {{"images", "list"}, "GET", "/images", NULL, 200, "[]", "no images\n"},
            {{"images", "get", "debian-12"},
             "GET",
             "/images/debian-12",
             NULL,
             200,
             image_json,
             image_table},
            {{"images", "delete", "debian-12"},
             "DELETE",
             "/images/debian-12",
             NULL,
             204,
             "",
             "deleted image debian-12\n"},
            /* The import follows the image to its end; ready in the POST's answer here, so nothing
               is polled. */
            {{"images", "import", "debian-12", "--source", "/srv/import/d.qcow2", "--sha256",
              "ab12"},
             "POST",
             "/images",
             "{\"name\":\"debian-12\",\"source\":\"/srv/import/d.qcow2\",\"sha256\":\"ab12\"}",
             202,
             image_json,
             image_table},
            {{"volumes", "list"},
             "GET",
             "/volumes",
             NULL,
             200,
             "[{\"id\":\"" VOL1 "\",\"name\":\"data\",\"size_gb\":100,\"attachments\":[]}]",
             "ID                    NAME  SIZE     ATTACHED TO  CREATED\n" VOL1
             "  data  100 GiB  -            \n"},
            {{"volumes", "get", VOL1},
             "GET",
             "/volumes/" VOL1,
             NULL,
             200,
             volume_json,
             volume_table},
            {{"volumes", "create", "--name", "data", "--size-gb", "100"},
             "POST",
             "/volumes",
             "{\"name\":\"data\",\"size_gb\":100}",
             201,
             volume_json,
             volume_table},
            {{"volumes", "delete", VOL1},
             "DELETE",
             "/volumes/" VOL1,
             NULL,
             204,
             "",
             "deleted volume " VOL1 "\n"},
            {{"instances", "attach-volume", ID1, "--volume", "data", "--readonly"},
             "POST",
             "/instances/" ID1 "/volumes",
             "{\"volume\":\"data\",\"readonly\":true}",
             200,
             instance_json,
             instance_table},
            {{"instances", "attach-volume", ID1, "--volume", VOL1},
             "POST",
             "/instances/" ID1 "/volumes",
             "{\"volume\":\"" VOL1 "\",\"readonly\":false}",
             200,
             instance_json,
             instance_table},
            {{"instances", "detach-volume", ID1, "--volume", "data"},
             "DELETE",
             "/instances/" ID1 "/volumes/data",
             NULL,
             200,
             instance_json,
             instance_table},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *argv[32] = {"--url", f->url, "--token", "disk-token"};
                size_t n = 4;
                for (size_t j = 0; j < ELEMENTSOF(cases[i].args) && cases[i].args[j]; j++)
                        argv[n++] = cases[i].args[j];
                argv[n] = NULL;

                server_set_answer(&f->tcp, cases[i].status, "application/json", cases[i].answer);
                assert_int_equal(run_args(f, argv), CTL_EXIT_OK);
                assert_string_equal(f->tcp.method, cases[i].method);
                assert_string_equal(f->tcp.path, cases[i].path);
                if (cases[i].body)
                        assert_string_equal(f->tcp.request_body, cases[i].body);
                else
                        assert_null(f->tcp.request_body);
                assert_string_equal(f->out, cases[i].out);
                assert_string_equal(f->err, "");
        }
}

static void test_disk_import_failed(void **state) /* OPS-7, OPS-8, DISK-2, DISK-3 */
{
        Fixture *f = *state;
        server_set_answer(&f->tcp, 202, "application/json",
                          "{\"name\":\"bad\",\"state\":\"failed\",\"error\":\"qcow2 with a "
                          "backing file is refused\"}");
        assert_int_equal(RUN(f, "--url", f->url, "images", "import", "bad", "--source", "/srv/b"),
                         CTL_EXIT_API);
        assert_string_equal(f->tcp.method, "POST");
        assert_string_equal(f->err, "error: import failed: qcow2 with a backing file is refused\n");
        assert_string_equal(f->out, "name   bad\n"
                                    "state  failed\n"
                                    "error  qcow2 with a backing file is refused\n");

        /* A refused import is OPS-8's API error, and nothing is polled. */
        server_set_answer(&f->tcp, 409, "application/json",
                          "{\"code\":\"busy\",\"message\":\"image bad is importing\"}");
        unsigned before = f->tcp.n_requests;
        assert_int_equal(RUN(f, "--url", f->url, "images", "import", "bad", "--source", "/srv/b"),
                         CTL_EXIT_API);
        assert_int_equal(f->tcp.n_requests, before + 1);
        assert_string_equal(f->err, "error: busy: image bad is importing (HTTP 409)\n");

        /* DISK-8: a guest that keeps its disk. */
        server_set_answer(&f->tcp, 409, "application/json",
                          "{\"code\":\"busy\",\"message\":\"volume " VOL1
                          ": the guest did not release the device within 30s\"}");
        assert_int_equal(
            RUN(f, "--url", f->url, "instances", "detach-volume", ID1, "--volume", VOL1),
            CTL_EXIT_API);
        assert_string_equal(f->err, "error: busy: volume " VOL1
                                    ": the guest did not release the device within 30s (HTTP "
                                    "409)\n");
}

static void test_disk_usage_errors(void **state) /* OPS-7, OPS-8, INST-3, INST-4 */
{
        Fixture *f = *state;
        static const struct {
                const char *args[10];
                const char *err;
        } cases[] = {
            {{"images", "get"}, "\"images get\" needs an image name"},
            {{"images", "get", "../etc"}, "invalid image name \"../etc\" for \"images get\""},
            {{"images", "import", "x"}, "\"images import\" needs --source"},
            {{"volumes", "get", "short"}, "invalid volume id \"short\" for \"volumes get\""},
            {{"volumes", "delete"}, "\"volumes delete\" needs a volume id"},
            {{"volumes", "create", "--name", "d"}, "\"volumes create\" needs --size-gb"},
            {{"volumes", "create", "--name", "d", "--size-gb", "0"},
             "--size-gb \"0\": expected a whole number of GiB"},
            {{"volumes", "create", "--name", "d", "--size-gb", "ten"},
             "--size-gb \"ten\": expected a whole number of GiB"},
            {{"instances", "attach-volume", ID1}, "\"instances attach-volume\" needs --volume"},
            {{"instances", "detach-volume", ID1, "--volume", "a/b"},
             "--volume \"a/b\": expected a volume id or name"},
            {{"instances", "detach-volume", ID1, "--volume", "d", "--readonly"},
             "option --readonly does not apply to \"instances detach-volume\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *argv[16] = {"--url", f->url};
                size_t n = 2;
                for (size_t j = 0; j < ELEMENTSOF(cases[i].args) && cases[i].args[j]; j++)
                        argv[n++] = cases[i].args[j];
                argv[n] = NULL;
                unsigned before = f->tcp.n_requests;
                assert_int_equal(run_args(f, argv), CTL_EXIT_USAGE);
                assert_int_equal(f->tcp.n_requests, before);
                if (!strstr(f->err, cases[i].err))
                        fail_msg("case %zu: \"%s\" lacks \"%s\"", i, f->err, cases[i].err);
        }
}

static void test_instances_tables(void **state) /* OPS-7, API-7, API-8 */
{
        Fixture *f = *state;

        server_set_answer(&f->tcp, 200, "application/json", "[]");
        assert_int_equal(RUN(f, "--url", f->url, "instances", "list"), CTL_EXIT_OK);
        assert_string_equal(f->out, "no instances\n");

        /* Everything API-8 may add: an error (sanitised), an mdev claim, a consumer. */
        server_set_answer(
            &f->tcp, 200, "application/json",
            "{\"id\":\"c0000000000000000003\",\"name\":\"a40-vm\",\"state\":\"Failed\","
            "\"created_at\":\"2026-09-03T08:00:00Z\",\"vcpus\":8,\"memory_mb\":16384,"
            "\"boot\":{\"kernel\":\"/img/vmlinuz\",\"initrd\":\"/img/initrd\",\"disk\":"
            "\"/img/root.raw\"},\"gpu\":{\"profile\":\"NVIDIA A40-4Q\",\"device_path\":"
            "\"/sys/bus/mdev/devices/4b20d080-1b54-4048-85b3-a6a62d165c01\",\"mdev_uuid\":"
            "\"4b20d080-1b54-4048-85b3-a6a62d165c01\",\"claimed_at\":\"2026-09-03T08:00:01Z\"},"
            "\"placement\":{\"consumer\":\"9d3b1f5e-0a47-4c1e-9a35-2f1e7c6b8d40\"},"
            "\"error\":\"VMM survived SIGKILL\\u001b]0;x\\u0007\"}");
        assert_int_equal(RUN(f, "--url", f->url, "instances", "get", "c0000000000000000003"),
                         CTL_EXIT_OK);
        assert_string_equal(f->out, "id                  c0000000000000000003\n"
                                    "name                a40-vm\n"
                                    "state               Failed\n"
                                    "error               VMM survived SIGKILL?]0;x?\n"
                                    "created             2026-09-03T08:00:00Z\n"
                                    "vcpus               8\n"
                                    "memory              16384 MiB\n"
                                    "kernel              /img/vmlinuz\n"
                                    "initrd              /img/initrd\n"
                                    "disk                /img/root.raw\n"
                                    "profile             NVIDIA A40-4Q\n"
                                    "device path         /sys/bus/mdev/devices/"
                                    "4b20d080-1b54-4048-85b3-a6a62d165c01\n"
                                    "mdev uuid           4b20d080-1b54-4048-85b3-a6a62d165c01\n"
                                    "claimed             2026-09-03T08:00:01Z\n"
                                    "placement consumer  9d3b1f5e-0a47-4c1e-9a35-2f1e7c6b8d40\n");

        /* Without a GPU, and a profile that waits for its claim (API-8). */
        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"id\":\"a0000000000000000001\",\"name\":\"build-7\",\"state\":"
                          "\"Stopped\",\"created_at\":\"2026-09-02T21:00:00Z\",\"vcpus\":16,"
                          "\"memory_mb\":65536,\"boot\":{\"disk\":\"/img/b.img\"}}");
        assert_int_equal(RUN(f, "--url", f->url, "instances", "stop", "a0000000000000000001"),
                         CTL_EXIT_OK);
        assert_string_equal(f->out, "id       a0000000000000000001\n"
                                    "name     build-7\n"
                                    "state    Stopped\n"
                                    "created  2026-09-02T21:00:00Z\n"
                                    "vcpus    16\n"
                                    "memory   65536 MiB\n"
                                    "disk     /img/b.img\n");
        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"id\":\"b0000000000000000002\",\"name\":\"queued\",\"state\":"
                          "\"Stopped\",\"created_at\":\"2026-09-02T21:05:00Z\",\"vcpus\":1,"
                          "\"memory_mb\":128,\"boot\":{\"disk\":\"/img/q.img\"},\"gpu\":"
                          "{\"profile\":\"NVIDIA L40S-1B\"}}");
        assert_int_equal(RUN(f, "--url", f->url, "instances", "get", "b0000000000000000002"),
                         CTL_EXIT_OK);
        assert_string_equal(f->out, "id       b0000000000000000002\n"
                                    "name     queued\n"
                                    "state    Stopped\n"
                                    "created  2026-09-02T21:05:00Z\n"
                                    "vcpus    1\n"
                                    "memory   128 MiB\n"
                                    "disk     /img/q.img\n"
                                    "profile  NVIDIA L40S-1B\n");
}

/* OPS-7, NET-9: an instance's NIC in `instances get`, and `vgpuctl network` */
static void test_network(void **state) /* OPS-7, NET-9 */
{
        Fixture *f = *state;
        server_set_answer(
            &f->tcp, 200, "application/json",
            "{\"id\":\"" ID1 "\",\"name\":\"render-01\",\"state\":\"Running\","
            "\"created_at\":\"2026-09-02T20:08:03Z\",\"vcpus\":4,\"memory_mb\":8192,"
            "\"boot\":{\"kernel\":\"/k\"},\"network\":{\"mode\":\"nat\",\"bridge\":"
            "\"vgpud0\",\"mac\":\"52:54:00:35:1d:5b\",\"ip\":\"10.233.0.2\",\"prefix\""
            ":24,\"gateway\":\"10.233.0.1\",\"tap\":\"vgtk3x9q2m8v1c4\",\"ports\":"
            "[{\"host\":20022,\"guest\":22,\"protocol\":\"tcp\"}]}}");
        assert_int_equal(RUN(f, "--url", f->url, "instances", "get", ID1), CTL_EXIT_OK);
        assert_string_equal(f->out, "id       " ID1 "\n"
                                    "name     render-01\n"
                                    "state    Running\n"
                                    "created  2026-09-02T20:08:03Z\n"
                                    "vcpus    4\n"
                                    "memory   8192 MiB\n"
                                    "kernel   /k\n"
                                    "network  nat\n"
                                    "bridge   vgpud0\n"
                                    "mac      52:54:00:35:1d:5b\n"
                                    "ip       10.233.0.2\n"
                                    "gateway  10.233.0.1\n"
                                    "ports    20022->22/tcp\n"
                                    "tap      vgtk3x9q2m8v1c4\n");

        server_set_answer(
            &f->tcp, 200, "application/json",
            "{\"default_mode\":\"nat\",\"bridges\":[\"br-lan\",\"br-vlan100\"],\"nat\":{"
            "\"enabled\":true,\"bridge\":\"vgpud0\",\"subnet\":\"10.233.0.0/24\",\"gateway\":"
            "\"10.233.0.1\",\"isolate\":true,\"port_range\":\"20000-29999\",\"addresses\":{"
            "\"allocated\":1,\"free\":252},\"in_use\":[{\"ip\":\"10.233.0.2\",\"mac\":"
            "\"52:54:00:35:1d:5b\",\"instance_id\":\"" ID1 "\",\"name\":\"render-01\"}],"
            "\"port_forwards\":[],\"dnsmasq\":{\"up\":true,\"restarts\":2}}}");
        assert_int_equal(RUN(f, "--url", f->url, "network"), CTL_EXIT_OK);
        assert_string_equal(f->out, "default mode         nat\n"
                                    "bridges              br-lan, br-vlan100\n"
                                    "nat                  enabled\n"
                                    "nat bridge           vgpud0\n"
                                    "subnet               10.233.0.0/24\n"
                                    "gateway              10.233.0.1\n"
                                    "isolate              yes\n"
                                    "port range           20000-29999\n"
                                    "addresses allocated  1\n"
                                    "addresses free       252\n"
                                    "dnsmasq              up\n"
                                    "dnsmasq restarts     2\n"
                                    "\n"
                                    "IP          MAC                INSTANCE              NAME\n"
                                    "10.233.0.2  52:54:00:35:1d:5b  " ID1 "  render-01\n");
        assert_string_equal(f->tcp.path, "/network");
        /* An answer of another shape prints nothing and fails. */
        server_set_answer(&f->tcp, 200, "application/json", "{\"default_mode\":1}");
        assert_int_not_equal(RUN(f, "--url", f->url, "network"), CTL_EXIT_OK);
}

static void test_instances_json(void **state) /* OPS-6, API-7 */
{
        Fixture *f = *state;
        _cleanup_free_ char *want = NULL;

        server_set_answer(&f->tcp, 200, "application/json", instances_json);
        assert_int_equal(RUN(f, "--url", f->url, "--json", "instances", "list"), CTL_EXIT_OK);
        assert_int_equal(strprintf(&want, "%s\n", instances_json), 0);
        assert_string_equal(f->out, want);

        free(want);
        want = NULL;
        assert_int_equal(strprintf(&want, "%s\n", instance_json), 0);
        static const char *const one[][2] = {{"get", "GET"}, {"start", "POST"}, {"stop", "POST"}};
        for (size_t i = 0; i < ELEMENTSOF(one); i++) {
                server_set_answer(&f->tcp, 200, "application/json", instance_json);
                assert_int_equal(RUN(f, "--url", f->url, "instances", one[i][0], ID1, "--json"),
                                 CTL_EXIT_OK);
                assert_string_equal(f->out, want);
                assert_string_equal(f->tcp.method, one[i][1]);
        }
        server_set_answer(&f->tcp, 201, "application/json", instance_json);
        assert_int_equal(RUN(f, "--url", f->url, "--json", "instances", "create", "--name", "r",
                             "--vcpus", "1", "--memory-mb", "128", "--kernel", "/k"),
                         CTL_EXIT_OK);
        assert_string_equal(f->out, want);

        /* A 204 carries no JSON to print. */
        server_set_answer(&f->tcp, 204, "application/json", "");
        assert_int_equal(RUN(f, "--url", f->url, "--json", "instances", "delete", ID1),
                         CTL_EXIT_OK);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, "");
}

static void test_instances_console_raw(void **state) /* OPS-7, API-2 */
{
        Fixture *f = *state;
        /* A guest console is bytes: invalid UTF-8, escape sequences, a NUL, no final newline. */
        static const char bytes[] = "boot\r\n\xff\xfe\x1b[2J\0after NUL\xc3";

        for (int json = 0; json < 2; json++) {
                server_set_answer_bytes(&f->tcp, 200, "text/plain", bytes, sizeof bytes - 1);
                assert_int_equal(
                    json ? RUN(f, "--url", f->url, "--json", "instances", "console", ID1)
                         : RUN(f, "--url", f->url, "instances", "console", ID1),
                    CTL_EXIT_OK);
                assert_int_equal(f->out_size, sizeof bytes - 1);
                assert_memory_equal(f->out, bytes, sizeof bytes - 1);
                assert_string_equal(f->err, "");
        }

        /* Errors of the console route are API errors like any other. */
        server_set_answer(&f->tcp, 404, "application/json",
                          "{\"code\":\"not_found\",\"message\":\"no instance " ID1 "\"}");
        assert_int_equal(RUN(f, "--url", f->url, "instances", "console", ID1), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, "error: not_found: no instance " ID1 " (HTTP 404)\n");
}

static void test_instances_api_errors(void **state) /* OPS-8, API-21, INST-9, INST-25 */
{
        Fixture *f = *state;
        static const struct {
                const char *args[12];
                unsigned status;
                const char *answer;
                const char *err;
        } cases[] = {
            /* INST-9 */
            {{"stop", ID1},
             409,
             "{\"code\":\"busy\",\"message\":\"instance " ID1 " is busy: start in progress\"}",
             "error: busy: instance " ID1 " is busy: start in progress (HTTP 409)\n"},
            {{"delete", ID1},
             409,
             "{\"code\":\"busy\",\"message\":\"instance " ID1 " is busy: stop in progress\"}",
             "error: busy: instance " ID1 " is busy: stop in progress (HTTP 409)\n"},
            /* INST-25 */
            {{"start", ID1},
             409,
             "{\"code\":\"invalid_state\",\"message\":\"instance " ID1 " is Running\"}",
             "error: invalid_state: instance " ID1 " is Running (HTTP 409)\n"},
            /* API-21 */
            {{"create", "--name", "r", "--vcpus", "1", "--memory-mb", "128", "--profile",
              "NVIDIA L40S-2Q", "--disk", "/d"},
             409,
             "{\"code\":\"insufficient_resources\",\"message\":\"insufficient GPU: requested 1 "
             "vgpu slot(s), but only 0 available\"}",
             "error: insufficient_resources: insufficient GPU: requested 1 vgpu slot(s), but "
             "only 0 available (HTTP 409)\n"},
            {{"create", "--name", "r", "--vcpus", "1", "--memory-mb", "64", "--disk", "/d"},
             400,
             "{\"code\":\"invalid_request\",\"message\":\"memory_mb must be 128..1048576\"}",
             "error: invalid_request: memory_mb must be 128..1048576 (HTTP 400)\n"},
            {{"get", ID1},
             404,
             "{\"code\":\"not_found\",\"message\":\"no instance " ID1 "\"}",
             "error: not_found: no instance " ID1 " (HTTP 404)\n"},
            {{"delete", ID1},
             500,
             "{\"code\":\"internal\",\"message\":\"VMM of " ID1 " survived SIGKILL\"}",
             "error: internal: VMM of " ID1 " survived SIGKILL (HTTP 500)\n"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *argv[20] = {"--url", f->url, "instances"};
                size_t n = 3;
                for (size_t j = 0; j < ELEMENTSOF(cases[i].args) && cases[i].args[j]; j++)
                        argv[n++] = cases[i].args[j];
                argv[n] = NULL;

                server_set_answer(&f->tcp, cases[i].status, "application/json", cases[i].answer);
                assert_int_equal(run_args(f, argv), CTL_EXIT_API);
                assert_string_equal(f->out, "");
                assert_string_equal(f->err, cases[i].err);
                /* --json changes nothing about errors. */
                argv[n++] = "--json";
                argv[n] = NULL;
                assert_int_equal(run_args(f, argv), CTL_EXIT_API);
                assert_string_equal(f->out, "");
                assert_string_equal(f->err, cases[i].err);
        }

        /* Answers of the wrong shape are reported, and nothing is printed. */
        server_set_answer(&f->tcp, 200, "application/json", instance_json);
        assert_int_equal(RUN(f, "--url", f->url, "instances", "list"), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, "error: invalid JSON in the response (HTTP 200): not an "
                                    "array\n");
        server_set_answer(&f->tcp, 200, "application/json", instances_json);
        assert_int_equal(RUN(f, "--url", f->url, "instances", "get", ID1), CTL_EXIT_API);
        assert_string_equal(f->err, "error: invalid JSON in the response (HTTP 200): not an "
                                    "object\n");
        server_set_answer(&f->tcp, 200, "application/json",
                          "[{\"id\":\"" ID1 "\",\"name\":\"a\",\"state\":\"Running\","
                          "\"created_at\":\"t\",\"vcpus\":1,\"memory_mb\":128},"
                          "{\"id\":\"" ID1 "\",\"name\":\"b\",\"state\":\"Running\","
                          "\"created_at\":\"t\",\"vcpus\":\"1\",\"memory_mb\":128}]");
        assert_int_equal(RUN(f, "--url", f->url, "instances", "list"), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, "error: unexpected instance in the response: Expected "
                                    "integer, got string\n");
        server_set_answer(&f->tcp, 200, "application/json",
                          "{\"id\":\"" ID1 "\",\"name\":\"a\",\"state\":\"Running\","
                          "\"created_at\":\"t\",\"vcpus\":1,\"memory_mb\":128,"
                          "\"gpu\":{\"device_path\":\"/x\"}}");
        assert_int_equal(RUN(f, "--url", f->url, "instances", "get", ID1), CTL_EXIT_API);
        assert_string_equal(f->out, "");
        assert_string_equal(f->err, "error: unexpected instance gpu in the response: Object "
                                    "item not found: profile\n");
}

static void test_instances_usage_errors(void **state) /* OPS-7, OPS-8, INST-3, API-2 */
{
        Fixture *f = *state;
        static const struct {
                const char *args[16];
                const char *error;
        } cases[] = {
            {{"instances", "create", "--vcpus", "1", "--memory-mb", "128", "--kernel", "/k"},
             "\"instances create\" needs --name"},
            {{"instances", "create", "--name", "r", "--memory-mb", "128", "--kernel", "/k"},
             "\"instances create\" needs --vcpus"},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--kernel", "/k"},
             "\"instances create\" needs --memory-mb"},
            {{"instances", "create", "--name", "r", "--vcpus", "four", "--memory-mb", "128",
              "--kernel", "/k"},
             "--vcpus \"four\": expected a whole number"},
            {{"instances", "create", "--name", "r", "--vcpus", "-1", "--memory-mb", "128",
              "--kernel", "/k"},
             "--vcpus \"-1\": expected a whole number"},
            {{"instances", "create", "--name", "r", "--vcpus", "4294967296", "--memory-mb", "128",
              "--kernel", "/k"},
             "--vcpus \"4294967296\": expected a whole number"},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--memory-mb", "8G", "--kernel",
              "/k"},
             "--memory-mb \"8G\": expected a whole number of MiB"},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--memory-mb", " 128",
              "--kernel", "/k"},
             "--memory-mb \" 128\": expected a whole number of MiB"},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--memory-mb", "128"},
             "\"instances create\" needs --image, --kernel or --disk"},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--memory-mb", "128",
              "--initrd", "/i", "--cmdline", "c"},
             "\"instances create\" needs --image, --kernel or --disk"},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--memory-mb", "128",
              "--kernel", "/k", "--cmdline", "x\xc3("},
             "--cmdline must be UTF-8 text"},
            {{"instances", "create", "--name", "r\xff", "--vcpus", "1", "--memory-mb", "128",
              "--kernel", "/k"},
             "--name must be UTF-8 text"},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--memory-mb", "128",
              "--kernel", "/k", "--wait"},
             "unknown option \"--wait\""},
            {{"instances", "create", "--name", "r", "--name", "s", "--vcpus", "1"},
             "option --name given twice"},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--memory-mb", "128",
              "--kernel", "/k", "--reason", "x"},
             "option --reason does not apply to \"instances create\""},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--memory-mb", "128",
              "--kernel", "/k", "--tail-bytes", "1"},
             "option --tail-bytes does not apply to \"instances create\""},
            {{"instances", "create", "--name", "r", "--vcpus", "1", "--memory-mb", "128",
              "--kernel", "/k", ID1},
             "unexpected argument \"" ID1 "\""},
            {{"instances", "get", ID1, "--profile", "p"},
             "option --profile does not apply to \"instances get\""},
            {{"health", "drain", "0000:e3:00.0", "--reason", "r", "--name", "n"},
             "option --name does not apply to \"health drain\""},
            {{"instances", "list", ID1}, "unexpected argument \"" ID1 "\""},
            {{"instances", "get"}, "\"instances get\" needs an instance id"},
            {{"instances", "start"}, "\"instances start\" needs an instance id"},
            {{"instances", "stop", "--json"}, "\"instances stop\" needs an instance id"},
            {{"instances", "delete"}, "\"instances delete\" needs an instance id"},
            {{"instances", "console", "--tail-bytes", "10"},
             "\"instances console\" needs an instance id"},
            {{"instances", "stop", ID1, ID1}, "unexpected argument \"" ID1 "\""},
            /* Path-unsafe or malformed ids never reach a URL (INST-3). */
            {{"instances", "get", "../x"},
             "invalid instance id \"../x\" for \"instances get\": expected 20 characters from "
             "a-z and 0-9"},
            {{"instances", "delete", "a/b"},
             "invalid instance id \"a/b\" for \"instances delete\": expected 20 characters "
             "from a-z and 0-9"},
            {{"instances", "start", "../../gpu/health/brk"},
             "invalid instance id \"../../gpu/health/brk\" for \"instances start\": expected 20 "
             "characters from a-z and 0-9"},
            {{"instances", "stop", "K3X9Q2M8V1C4Z7N5B0WD"},
             "invalid instance id \"K3X9Q2M8V1C4Z7N5B0WD\" for \"instances stop\": expected 20 "
             "characters from a-z and 0-9"},
            {{"instances", "console", "k3x9q2m8v1c4z7n5b0w"},
             "invalid instance id \"k3x9q2m8v1c4z7n5b0w\" for \"instances console\": expected "
             "20 characters from a-z and 0-9"},
            {{"instances", "get", ID1 "x"},
             "invalid instance id \"" ID1 "x\" for \"instances get\": expected 20 characters "
             "from a-z and 0-9"},
            {{"instances", "get", "k3x9q2m8v1c4z7n5b0w?"},
             "invalid instance id \"k3x9q2m8v1c4z7n5b0w?\" for \"instances get\": expected 20 "
             "characters from a-z and 0-9"},
            {{"instances", "get", ""},
             "invalid instance id \"\" for \"instances get\": expected 20 characters from a-z "
             "and 0-9"},
            /* API-2: 1..1048576 */
            {{"instances", "console", ID1, "--tail-bytes", "0"},
             "--tail-bytes \"0\": expected a number of bytes from 1 to 1048576"},
            {{"instances", "console", ID1, "--tail-bytes", "1048577"},
             "--tail-bytes \"1048577\": expected a number of bytes from 1 to 1048576"},
            {{"instances", "console", ID1, "--tail-bytes", "-5"},
             "--tail-bytes \"-5\": expected a number of bytes from 1 to 1048576"},
            {{"instances", "console", ID1, "--tail-bytes", "64k"},
             "--tail-bytes \"64k\": expected a number of bytes from 1 to 1048576"},
            {{"instances", "console", ID1, "--tail-bytes="},
             "--tail-bytes \"\": expected a number of bytes from 1 to 1048576"},
            {{"instances", "console", ID1, "--tail-bytes"}, "option --tail-bytes needs a value"},
            {{"instances", "get", ID1, "--tail-bytes", "5"},
             "option --tail-bytes does not apply to \"instances get\""},
            /* CONS-4 */
            {{"instances", "console", ID1, "--follow", "--attach"},
             "--follow and --attach exclude each other"},
            {{"instances", "console", ID1, "--attach", "--tail-bytes", "5"},
             "--tail-bytes goes with a tail or --follow, not --attach"},
            {{"instances", "console", ID1, "--follow=yes"}, "option --follow takes no value"},
            {{"instances", "get", ID1, "--attach"},
             "option --attach does not apply to \"instances get\""},
        };

        f->env.url = f->url;
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *want = NULL;
                assert_int_equal(strprintf(&want, "vgpuctl: %s\nRun 'vgpuctl --help' for usage.\n",
                                           cases[i].error),
                                 0);
                assert_int_equal(run_args(f, cases[i].args), CTL_EXIT_USAGE);
                assert_string_equal(f->err, want);
                assert_string_equal(f->out, "");
        }
        /* None of them sent a request. */
        assert_int_equal(f->tcp.n_requests, 0);
}

static void test_instances_timeouts(void **state) /* OPS-8, INST-23 */
{
        Fixture *f = *state;

        /*
         * Lifecycle commands wait as long as the operation: an answer later than the read
         * timeout still arrives. The margins are wide, so a slow machine does not matter.
         */
        f->env.timeout_ms = 200;
        f->env.lifecycle_timeout_ms = 60000;
        server_set_answer(&f->tcp, 201, "application/json", instance_json);
        f->tcp.delay_ms = 1000;
        assert_int_equal(RUN(f, "--url", f->url, "instances", "create", "--name", "render-01",
                             "--vcpus", "4", "--memory-mb", "8192", "--kernel", "/k"),
                         CTL_EXIT_OK);
        assert_string_equal(f->out, instance_table);
        static const char *const waiting[][2] = {
            {"start", "200"}, {"stop", "200"}, {"delete", "204"}};
        for (size_t i = 0; i < ELEMENTSOF(waiting); i++) {
                server_set_answer(&f->tcp, (unsigned)atoi(waiting[i][1]), "application/json",
                                  instance_json);
                f->tcp.delay_ms = 1000;
                assert_int_equal(RUN(f, "--url", f->url, "instances", waiting[i][0], ID1),
                                 CTL_EXIT_OK);
        }

        /* Reads keep the short timeout. */
        _cleanup_free_ char *prefix = NULL;
        assert_int_equal(
            strprintf(&prefix, "error: cannot reach vgpud at %s: Operation timed out", f->url), 0);
        static const char *const reads[] = {"get", "console"};
        for (size_t i = 0; i < ELEMENTSOF(reads); i++) {
                f->tcp.hang = true;
                assert_int_equal(RUN(f, "--url", f->url, "instances", reads[i], ID1),
                                 CTL_EXIT_CONNECT);
                assert_true(startswith(f->err, prefix));
                assert_null(strstr(f->err, "hint:"));
        }
        f->tcp.hang = true;
        assert_int_equal(RUN(f, "--url", f->url, "instances", "list"), CTL_EXIT_CONNECT);
        assert_true(startswith(f->err, prefix));

        /* A lifecycle command that gives up says the operation goes on (INST-23). */
        f->env.lifecycle_timeout_ms = 200;
        f->tcp.hang = true;
        assert_int_equal(RUN(f, "--url", f->url, "instances", "stop", ID1), CTL_EXIT_CONNECT);
        assert_true(startswith(f->err, prefix));
        assert_non_null(strstr(f->err,
                               "\nhint: vgpud goes on with the operation; see 'vgpuctl instances "
                               "list'\n"));
        assert_string_equal(f->out, "");
}

/* ---- connection choice and defaults (OPS-6) -------------------------------------------------- */

static void test_unix_socket(void **state) /* OPS-6, API-1, API-12 */
{
        Fixture *f = *state;

        server_set_answer(&f->unix_server, 200, "application/json", gpus_json);
        assert_int_equal(RUN(f, "--unix", f->unix_path, "--token", "sock-token", "gpus"),
                         CTL_EXIT_OK);
        assert_string_equal(f->out, gpus_table);
        assert_string_equal(f->unix_server.method, "GET");
        assert_string_equal(f->unix_server.path, "/gpus");
        assert_string_equal(f->unix_server.authorization, "Bearer sock-token");
        assert_int_equal(f->tcp.n_requests, 0);

        /* --unix wins over VGPUD_URL. */
        f->env.url = f->dead_url;
        assert_int_equal(RUN(f, "--unix", f->unix_path, "--json", "gpus"), CTL_EXIT_OK);
        assert_int_equal(f->unix_server.n_requests, 2);
}

static void test_environment_defaults(void **state) /* OPS-6 */
{
        Fixture *f = *state;
        _cleanup_free_ char *token_file = NULL, *url_slash = NULL;

        f->env.url = f->url;
        f->env.token = "env-token";
        assert_int_equal(RUN(f, "--json", "resources"), CTL_EXIT_OK);
        assert_string_equal(f->tcp.authorization, "Bearer env-token");

        assert_int_equal(RUN(f, "--token", "flag-token", "--json", "resources"), CTL_EXIT_OK);
        assert_string_equal(f->tcp.authorization, "Bearer flag-token");

        /* A file written by `token mint > file` ends in a newline, which is not sent. */
        assert_int_equal(strprintf(&token_file, "%s/token", f->dir), 0);
        write_file(token_file, "file-token\n", 11, 0600);
        assert_int_equal(RUN(f, "--token-file", token_file, "--json", "resources"), CTL_EXIT_OK);
        assert_string_equal(f->tcp.authorization, "Bearer file-token");

        /* --url wins over VGPUD_URL; a trailing slash is not doubled into the path. */
        f->env.url = f->dead_url;
        assert_int_equal(strprintf(&url_slash, "%s/", f->url), 0);
        assert_int_equal(RUN(f, "--url", url_slash, "--json", "health", "list"), CTL_EXIT_OK);
        assert_string_equal(f->tcp.path, "/gpu/health");

        /* Empty variables count as unset. */
        f->env.url = "";
        f->env.token = "";
        assert_int_equal(RUN(f, "--url", f->url, "--json", "resources"), CTL_EXIT_OK);
        assert_null(f->tcp.authorization);
}

/* ---- usage errors (OPS-7, OPS-8) ------------------------------------------------------------- */

static void test_usage_errors(void **state) /* OPS-7, OPS-8 */
{
        Fixture *f = *state;
        static const struct {
                const char *args[8];
                const char *error;
        } cases[] = {
            {{NULL}, "no command given"},
            {{"instances"}, "unknown command \"instances\""},
            {{"instances", "show"}, "unknown command \"instances show\""},
            {{"health"}, "unknown command \"health\""},
            {{"health", "status"}, "unknown command \"health status\""},
            {{"token", "verify"}, "unknown command \"token verify\""},
            {{"resources", "now"}, "unexpected argument \"now\""},
            {{"--bogus", "gpus"}, "unknown option \"--bogus\""},
            {{"-x", "gpus"}, "unknown option \"-x\""},
            {{"--json", "--json", "gpus"}, "option --json given twice"},
            {{"--json=yes", "gpus"}, "option --json takes no value"},
            {{"gpus", "--url"}, "option --url needs a value"},
            {{"--url", "http://a:1", "--unix", "/s", "gpus"},
             "--url and --unix exclude each other"},
            {{"--url", "ftp://a:1", "gpus"},
             "--url: invalid URL \"ftp://a:1\": expected http://HOST:PORT or https://HOST:PORT"},
            {{"--url", "http://a:1/x?y=1", "gpus"},
             "--url: invalid URL \"http://a:1/x?y=1\": no spaces, control characters, query or "
             "fragment allowed"},
            {{"--unix", "", "gpus"}, "--unix: a socket path needs 1 to 107 bytes"},
            {{"--token", "a b", "gpus"},
             "--token: the token contains a character not allowed in an HTTP header"},
            {{"--token", "t", "--token-file", "/x", "gpus"},
             "--token and --token-file exclude each other"},
            {{"--token-file", "/nonexistent/token", "gpus"},
             "--token-file /nonexistent/token: No such file or directory"},
            {{"gpus", "--reason", "r"}, "option --reason does not apply to \"gpus\""},
            {{"health", "clear", "0000:e3:00.4", "--reason", "r"},
             "option --reason does not apply to \"health clear\""},
            {{"health", "list", "--ttl", "1h"}, "option --ttl does not apply to \"health list\""},
            {{"health", "quarantine", "0000:e3:00.4"}, "\"health quarantine\" needs --reason"},
            {{"health", "quarantine", "--reason", "r"},
             "\"health quarantine\" needs a PCI address"},
            {{"health", "drain", "0000:E3:00.0", "--reason", "r"},
             "invalid PCI address \"0000:E3:00.0\": expected dddd:bb:dd.f in lowercase hex"},
            {{"health", "undrain", "../breaker"},
             "invalid PCI address \"../breaker\": expected dddd:bb:dd.f in lowercase hex"},
            {{"health", "drain", "0000:e3:00.0", "--reason", ""},
             "--reason must be UTF-8 text of 1 to 256 bytes"},
            {{"health", "drain", "0000:e3:00.0", "--reason", "\xff"},
             "--reason must be UTF-8 text of 1 to 256 bytes"},
            {{"token", "mint"}, "\"token mint\" needs --secret-file"},
            {{"token", "mint", "--secret-file", "/s", "--ttl", "90"},
             "--ttl \"90\": expected a duration of at least 1s, such as 30m, 1h or 1h30m"},
            {{"token", "mint", "--secret-file", "/s", "--ttl", "500ms"},
             "--ttl \"500ms\": expected a duration of at least 1s, such as 30m, 1h or 1h30m"},
            {{"token", "mint", "--secret-file", "/s", "--sub", ""},
             "--sub must be non-empty UTF-8 text"},
        };

        f->env.url = f->url;
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *want = NULL;
                assert_int_equal(strprintf(&want, "vgpuctl: %s\nRun 'vgpuctl --help' for usage.\n",
                                           cases[i].error),
                                 0);
                assert_int_equal(run_args(f, cases[i].args), CTL_EXIT_USAGE);
                assert_string_equal(f->err, want);
                assert_string_equal(f->out, "");
        }

        /* A reason of exactly 256 bytes is fine; 257 is not. */
        char reason[258];
        memset(reason, 'r', 257);
        reason[257] = 0;
        assert_int_equal(RUN(f, "health", "drain", "0000:e3:00.0", "--reason", reason),
                         CTL_EXIT_USAGE);
        reason[256] = 0;
        assert_int_equal(RUN(f, "--json", "health", "drain", "0000:e3:00.0", "--reason", reason),
                         CTL_EXIT_OK);

        /* Only that last command line reached the server. */
        assert_int_equal(f->tcp.n_requests, 1);

        assert_int_equal(RUN(f, "--help"), CTL_EXIT_OK);
        assert_string_equal(f->out, ctl_usage);
        assert_int_equal(RUN(f, "health", "list", "-h"), CTL_EXIT_OK);
        assert_string_equal(f->out, ctl_usage);
        assert_int_equal(f->tcp.n_requests, 1);
}

/* ---- connection errors (OPS-8) --------------------------------------------------------------- */

static void test_connection_errors(void **state) /* OPS-8 */
{
        Fixture *f = *state;
        _cleanup_free_ char *want = NULL, *missing = NULL, *prefix = NULL;

        assert_int_equal(RUN(f, "--url", f->dead_url, "resources"), CTL_EXIT_CONNECT);
        assert_int_equal(
            strprintf(&want, "error: cannot reach vgpud at %s: Connection refused\n", f->dead_url),
            0);
        assert_string_equal(f->err, want);
        assert_string_equal(f->out, "");

        assert_int_equal(strprintf(&missing, "%s/missing.sock", f->dir), 0);
        assert_int_equal(RUN(f, "--unix", missing, "health", "list"), CTL_EXIT_CONNECT);
        free(want);
        assert_int_equal(strprintf(&want,
                                   "error: cannot reach vgpud at unix:%s: No such file or "
                                   "directory\n",
                                   missing),
                         0);
        assert_string_equal(f->err, want);

        /* A daemon that accepts and never answers: vgpuctl's deadline ends the wait. */
        f->env.timeout_ms = 300;
        f->tcp.hang = true;
        assert_int_equal(RUN(f, "--url", f->url, "gpus"), CTL_EXIT_CONNECT);
        assert_int_equal(
            strprintf(&prefix, "error: cannot reach vgpud at %s: Operation timed out", f->url), 0);
        assert_true(startswith(f->err, prefix));
        assert_string_equal(f->out, "");
}

/* ---- token mint (OPS-7, API-13, API-14) ------------------------------------------------------ */

static json_t *decode_part(const char *s, size_t n)
{
        _cleanup_free_ uint8_t *buf = NULL;
        size_t size;

        assert_int_equal(jwt_base64url_decode(s, n, &buf, &size), 0);
        json_t *j = json_loadb((const char *)buf, size, JSON_REJECT_DUPLICATES, NULL);
        assert_non_null(j);
        return j;
}

/* Checks a minted token: HS256 header, exp = now + ttl, iat = now, sub, and the signature. */
static void check_token(const char *token, const void *key, size_t key_size, int64_t now,
                        int64_t ttl_sec, const char *sub)
{
        _cleanup_jwt_secret_ JwtSecret *secret = NULL, *other = NULL;
        _cleanup_free_ char *subject = NULL, *error = NULL;
        const char *dot1 = strchr(token, '.'), *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;

        assert_non_null(dot2);
        json_auto_t *header = decode_part(token, (size_t)(dot1 - token));
        json_auto_t *payload = decode_part(dot1 + 1, (size_t)(dot2 - dot1 - 1));
        assert_string_equal(json_string_value(json_object_get(header, "alg")), "HS256");
        assert_int_equal(json_integer_value(json_object_get(payload, "exp")), now + ttl_sec);
        assert_int_equal(json_integer_value(json_object_get(payload, "iat")), now);
        if (sub)
                assert_string_equal(json_string_value(json_object_get(payload, "sub")), sub);
        else
                assert_null(json_object_get(payload, "sub"));

        /* The daemon's verifier accepts it until exp, and only under this exact secret. */
        assert_int_equal(jwt_secret_new(key, key_size, &secret), 0);
        assert_int_equal(jwt_verify(secret, token, (Timestamp){.sec = now}, &subject, &error), 0);
        assert_string_equal(subject ? subject : "(none)", sub ? sub : "(none)");
        free(subject);
        subject = NULL;
        assert_int_equal(
            jwt_verify(secret, token, (Timestamp){.sec = now + ttl_sec - 1}, &subject, &error), 0);
        assert_int_equal(
            jwt_verify(secret, token, (Timestamp){.sec = now + ttl_sec}, &subject, &error),
            -EACCES);
        assert_int_equal(jwt_secret_new("another secret, also 32 bytes...", 32, &other), 0);
        assert_int_equal(jwt_verify(other, token, (Timestamp){.sec = now}, &subject, &error),
                         -EACCES);
}

static void test_token_mint(void **state) /* OPS-7, API-13, API-14 */
{
        Fixture *f = *state;
        _cleanup_free_ char *path = NULL;
        /* A trailing newline is part of the key: the file is used byte for byte (API-14). */
        static const char key[] = TEST_SECRET "\n";

        assert_int_equal(strprintf(&path, "%s/jwt.secret", f->dir), 0);
        write_file(path, key, sizeof key - 1, 0600);

        assert_int_equal(
            RUN(f, "token", "mint", "--secret-file", path, "--ttl", "1h30m", "--sub", "alice"),
            CTL_EXIT_OK);
        assert_string_equal(f->err, "");
        size_t n = strlen(f->out);
        assert_true(n > 1 && f->out[n - 1] == '\n');
        f->out[n - 1] = 0;
        check_token(f->out, key, sizeof key - 1, TEST_NOW, 5400, "alice");

        /* The newline really is part of the key. */
        _cleanup_jwt_secret_ JwtSecret *trimmed = NULL;
        _cleanup_free_ char *error = NULL, *subject = NULL;
        assert_int_equal(jwt_secret_new(TEST_SECRET, 32, &trimmed), 0);
        assert_int_equal(
            jwt_verify(trimmed, f->out, (Timestamp){.sec = TEST_NOW}, &subject, &error), -EACCES);

        /* Defaults: one hour, no subject; --url and friends do not matter to a local command. */
        assert_int_equal(RUN(f, "--url", f->dead_url, "token", "mint", "--secret-file", path),
                         CTL_EXIT_OK);
        f->out[strlen(f->out) - 1] = 0;
        check_token(f->out, key, sizeof key - 1, TEST_NOW, 3600, NULL);
        assert_int_equal(f->tcp.n_requests, 0);
}

static void test_token_mint_secret_file(void **state) /* API-14 */
{
        Fixture *f = *state;
        _cleanup_free_ char *path = NULL, *want = NULL;

        assert_int_equal(strprintf(&path, "%s/jwt.secret", f->dir), 0);

        write_file(path, TEST_SECRET, 32, 0640);
        assert_int_equal(RUN(f, "token", "mint", "--secret-file", path), CTL_EXIT_USAGE);
        assert_int_equal(strprintf(&want,
                                   "error: jwt_secret_file %s: mode 0640 gives group or other "
                                   "access\n",
                                   path),
                         0);
        assert_string_equal(f->err, want);
        assert_string_equal(f->out, "");

        write_file(path, TEST_SECRET, 31, 0600);
        assert_int_equal(RUN(f, "token", "mint", "--secret-file", path), CTL_EXIT_USAGE);
        free(want);
        assert_int_equal(
            strprintf(&want, "error: jwt_secret_file %s: 31 bytes, at least 32 needed\n", path), 0);
        assert_string_equal(f->err, want);

        assert_int_equal(unlink(path), 0);
        assert_int_equal(RUN(f, "token", "mint", "--secret-file", path), CTL_EXIT_USAGE);
        free(want);
        assert_int_equal(
            strprintf(&want, "error: jwt_secret_file %s: No such file or directory\n", path), 0);
        assert_string_equal(f->err, want);
}

/* ---- the binary (OPS-6, OPS-8) --------------------------------------------------------------- */

typedef struct Spawned {
        int status;
        char *out;
        char *err;
} Spawned;

static void spawned_done(Spawned *s)
{
        free(s->out);
        free(s->err);
}

/* Runs $VGPUCTL with args and the extra environment entries (NULL-terminated lists). */
static void spawn_vgpuctl(Fixture *f, const char *const *args, const char *const *extra_env,
                          Spawned *ret)
{
        const char *binary = getenv("VGPUCTL");
        char *argv[16] = {(char *)binary};
        char *envp[256];
        size_t n = 0;
        _cleanup_free_ char *out_path = NULL, *err_path = NULL;

        assert_non_null(binary);
        for (size_t i = 0; args[i]; i++) {
                assert_true(i + 2 < ELEMENTSOF(argv));
                argv[i + 1] = (char *)args[i];
        }
        /* The test's own environment (sanitizer options, say), without any VGPUD_ variable
         * or one that extra_env sets. */
        for (char **e = environ; *e && n + 8 < ELEMENTSOF(envp); e++) {
                bool replaced = false;
                for (size_t i = 0; extra_env[i]; i++) {
                        size_t name = strcspn(extra_env[i], "=") + 1;
                        replaced = replaced || strncmp(*e, extra_env[i], name) == 0;
                }
                if (!startswith(*e, "VGPUD_") && !replaced)
                        envp[n++] = *e;
        }
        for (size_t i = 0; extra_env[i]; i++)
                envp[n++] = (char *)extra_env[i];
        envp[n] = NULL;

        assert_int_equal(strprintf(&out_path, "%s/spawn.out", f->dir), 0);
        assert_int_equal(strprintf(&err_path, "%s/spawn.err", f->dir), 0);
        _cleanup_close_ int out_fd = open(out_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        _cleanup_close_ int err_fd = open(err_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        assert_true(out_fd >= 0 && err_fd >= 0);

        posix_spawn_file_actions_t actions;
        pid_t pid;
        int status;
        assert_int_equal(posix_spawn_file_actions_init(&actions), 0);
        assert_int_equal(posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO), 0);
        assert_int_equal(posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO), 0);
        assert_int_equal(posix_spawn(&pid, binary, &actions, NULL, argv, envp), 0);
        posix_spawn_file_actions_destroy(&actions);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));

        *ret = (Spawned){.status = WEXITSTATUS(status)};
        assert_int_equal(read_file_at(AT_FDCWD, out_path, 1 << 20, &ret->out, NULL), 0);
        assert_int_equal(read_file_at(AT_FDCWD, err_path, 1 << 20, &ret->err, NULL), 0);
}

static void test_binary(void **state) /* OPS-6, OPS-8 */
{
        Fixture *f = *state;
        _cleanup_free_ char *url_env = NULL, *dead_env = NULL, *path = NULL, *want = NULL;
        _cleanup_(spawned_done) Spawned usage = {}, refused = {}, ok = {}, mint = {};

        assert_int_equal(strprintf(&url_env, "VGPUD_URL=%s", f->url), 0);
        assert_int_equal(strprintf(&dead_env, "VGPUD_URL=%s", f->dead_url), 0);

        spawn_vgpuctl(f, (const char *[]){NULL}, (const char *[]){NULL}, &usage);
        assert_int_equal(usage.status, 2);
        assert_string_equal(usage.err, "vgpuctl: no command given\nRun 'vgpuctl --help' for "
                                       "usage.\n");

        spawn_vgpuctl(f, (const char *[]){"resources", NULL}, (const char *[]){dead_env, NULL},
                      &refused);
        assert_int_equal(refused.status, 3);
        assert_int_equal(
            strprintf(&want, "error: cannot reach vgpud at %s: Connection refused\n", f->dead_url),
            0);
        assert_string_equal(refused.err, want);

        server_set_answer(&f->tcp, 200, "application/json", "{\"gpu\":null}");
        spawn_vgpuctl(f, (const char *[]){"--json", "resources", NULL},
                      (const char *[]){url_env, "VGPUD_TOKEN=bin-token", NULL}, &ok);
        assert_int_equal(ok.status, 0);
        assert_string_equal(ok.out, "{\"gpu\":null}\n");
        assert_string_equal(f->tcp.authorization, "Bearer bin-token");

        /* With the real clock: exp is now + 1h, within the seconds the run took. */
        assert_int_equal(strprintf(&path, "%s/jwt.secret", f->dir), 0);
        write_file(path, TEST_SECRET, 32, 0600);
        int64_t before = time(NULL);
        spawn_vgpuctl(f, (const char *[]){"token", "mint", "--secret-file", path, NULL},
                      (const char *[]){NULL}, &mint);
        int64_t after = time(NULL);
        assert_int_equal(mint.status, 0);
        const char *dot1 = strchr(mint.out, '.'), *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
        assert_non_null(dot2);
        json_auto_t *payload = decode_part(dot1 + 1, (size_t)(dot2 - dot1 - 1));
        json_int_t exp = json_integer_value(json_object_get(payload, "exp"));
        assert_in_range(exp, before + 3600, after + 3600);
}

/* ---- instances create's devices, network and cloud_init (OPS-7, API-9) ---------------------- */

static void
test_instances_create_flags(void **state) /* OPS-7, API-9, DISK-5, DISK-8, NET-1, SEED-1 */
{
        Fixture *f = *state;
        _cleanup_free_ char *keys1 = NULL, *keys2 = NULL, *user_data = NULL;
        assert_int_equal(strprintf(&keys1, "%s/id_ed25519.pub", f->dir), 0);
        assert_int_equal(strprintf(&keys2, "%s/authorized_keys", f->dir), 0);
        assert_int_equal(strprintf(&user_data, "%s/user-data", f->dir), 0);
        static const char k1[] = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA op@desk\n";
        /* Blank lines, one of spaces, and a CR line end are no keys. */
        static const char k2[] =
            "\nssh-rsa AAAAB3NzaC1yc2E= a\r\n   \necdsa-sha2-nistp256 AAAAE2 b";
        static const char ud[] = "#cloud-config\npackages: [htop]\n";
        write_file(keys1, k1, sizeof k1 - 1, 0600);
        write_file(keys2, k2, sizeof k2 - 1, 0600);
        write_file(user_data, ud, sizeof ud - 1, 0600);

        /* Everything: an image, a volume twice (one read-only), nat with two forwards. */
        server_set_answer(&f->tcp, 201, "application/json", instance_json);
        assert_int_equal(RUN(f, "--url", f->url, "instances", "create", "--name", "web", "--vcpus",
                             "2", "--memory-mb", "2048", "--image", "debian-12", "--disk-gb", "20",
                             "--volume", "data", "--volume", ID1 ":ro", "--network", "nat",
                             "--port", "20022:22", "--port=20053:53/udp", "--ssh-key", keys1,
                             "--ssh-key", keys2, "--hostname", "web-1", "--profile",
                             "NVIDIA L40S-4Q"),
                         CTL_EXIT_OK);
        assert_string_equal(f->err, "");
        assert_string_equal(f->tcp.path, "/instances");
        assert_string_equal(
            f->tcp.request_body,
            "{\"name\":\"web\",\"vcpus\":2,\"memory_mb\":2048,\"gpu\":{\"profile\":\"NVIDIA "
            "L40S-4Q\"},\"image\":\"debian-12\",\"disk_gb\":20,\"volumes\":[{\"volume\":\"data\","
            "\"readonly\":false},{\"volume\":\"" ID1 "\",\"readonly\":true}],\"network\":{"
            "\"mode\":\"nat\",\"ports\":[{\"host\":20022,\"guest\":22,\"protocol\":\"tcp\"},"
            "{\"host\":20053,\"guest\":53,\"protocol\":\"udp\"}]},\"cloud_init\":{"
            "\"ssh_authorized_keys\":[\"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA op@desk\","
            "\"ssh-rsa AAAAB3NzaC1yc2E= a\",\"ecdsa-sha2-nistp256 AAAAE2 b\"],\"hostname\":"
            "\"web-1\"}}");

        /* Bridge mode with static addressing, and user data read verbatim. */
        assert_int_equal(RUN(f, "--url", f->url, "instances", "create", "--name", "lan", "--vcpus",
                             "1", "--memory-mb", "512", "--image", "debian-12", "--network",
                             "bridge:br-lan", "--ip", "192.0.2.10", "--prefix", "24", "--gateway",
                             "192.0.2.1", "--dns", "192.0.2.53", "--dns", "192.0.2.54",
                             "--user-data", user_data),
                         CTL_EXIT_OK);
        assert_string_equal(
            f->tcp.request_body,
            "{\"name\":\"lan\",\"vcpus\":1,\"memory_mb\":512,\"image\":\"debian-12\",\"network\":{"
            "\"mode\":\"bridge\",\"bridge\":\"br-lan\",\"ip\":\"192.0.2.10\",\"prefix\":24,"
            "\"gateway\":\"192.0.2.1\",\"dns\":[\"192.0.2.53\",\"192.0.2.54\"]},\"cloud_init\":{"
            "\"user_data\":\"#cloud-config\\npackages: [htop]\\n\"}}");

        /* No NIC; a kernel beside the image keeps its boot object. */
        assert_int_equal(RUN(f, "--url", f->url, "instances", "create", "--name", "n", "--vcpus",
                             "1", "--memory-mb", "512", "--image", "debian-12", "--kernel", "/k",
                             "--network", "none"),
                         CTL_EXIT_OK);
        assert_string_equal(f->tcp.request_body,
                            "{\"name\":\"n\",\"vcpus\":1,\"memory_mb\":512,\"boot\":{\"kernel\":"
                            "\"/k\"},\"image\":\"debian-12\",\"network\":{\"mode\":\"none\"}}");
}

static void test_instances_create_flag_errors(void **state) /* OPS-7, OPS-8, NET-1, SEED-1 */
{
        Fixture *f = *state;
        _cleanup_free_ char *empty = NULL, *binary = NULL, *missing = NULL;
        assert_int_equal(strprintf(&empty, "%s/empty.pub", f->dir), 0);
        assert_int_equal(strprintf(&binary, "%s/binary", f->dir), 0);
        assert_int_equal(strprintf(&missing, "%s/missing.pub", f->dir), 0);
        write_file(empty, "\n \n", 3, 0600);
        write_file(binary, "ssh-ed25519 A\0B\n", 16, 0600);

        static const char *const base[] = {
            "--url", "http://127.0.0.1:1", "instances", "create", "--name", "r", "--vcpus",
            "1",     "--memory-mb",        "128"};
        const struct {
                const char *args[6];
                const char *error;
        } cases[] = {
            {{"--kernel", "/k", "--image", NULL}, "option --image needs a value"},
            {{"--image", "i", "--disk-gb", "20G"},
             "--disk-gb \"20G\": expected a whole number of GiB"},
            {{"--image", "i", "--volume", ""},
             "--volume \"\": expected a volume id or name, optionally followed by :ro"},
            {{"--image", "i", "--volume", "data:rw"},
             "--volume \"data:rw\": expected a volume id or name, optionally followed by :ro"},
            {{"--image", "i", "--volume", ":ro"},
             "--volume \":ro\": expected a volume id or name, optionally followed by :ro"},
            {{"--image", "i", "--network", "routed"},
             "--network \"routed\": expected nat, bridge:NAME, bridge or none"},
            {{"--image", "i", "--network", "nat:vgpud0"},
             "--network \"nat:vgpud0\": expected nat, bridge:NAME, bridge or none"},
            {{"--image", "i", "--port", "20022:22"},
             "--port, --ip, --prefix, --gateway and --dns need --network"},
            {{"--image", "i", "--network", "nat", "--port", "22"},
             "--port \"22\": expected HOST:GUEST[/tcp|/udp], ports 1 to 65535"},
            {{"--image", "i", "--network", "nat", "--port", "0:22"},
             "--port \"0:22\": expected HOST:GUEST[/tcp|/udp], ports 1 to 65535"},
            {{"--image", "i", "--network", "nat", "--port", "20022:65536"},
             "--port \"20022:65536\": expected HOST:GUEST[/tcp|/udp], ports 1 to 65535"},
            {{"--image", "i", "--network", "nat", "--port", "20022:22/sctp"},
             "--port \"20022:22/sctp\": expected HOST:GUEST[/tcp|/udp], ports 1 to 65535"},
            {{"--image", "i", "--network", "nat", "--port", "x:22"},
             "--port \"x:22\": expected HOST:GUEST[/tcp|/udp], ports 1 to 65535"},
            {{"--image", "i", "--network", "bridge:a/b"},
             "--network \"bridge:a/b\": \"a/b\" is not an interface name"},
            {{"--image", "i", "--network", "bridge", "--ip", "192.0.2.300"},
             "--ip \"192.0.2.300\": expected an IPv4 address (a.b.c.d)"},
            {{"--image", "i", "--network", "bridge", "--gateway", "gw"},
             "--gateway \"gw\": expected an IPv4 address (a.b.c.d)"},
            {{"--image", "i", "--network", "bridge", "--dns", "::1"},
             "--dns \"::1\": expected an IPv4 address (a.b.c.d)"},
            {{"--image", "i", "--network", "bridge", "--prefix", "33"},
             "--prefix \"33\": expected a prefix length 1 to 32"},
            {{"--image", "i", "--network", "nat", "--network", "none"},
             "option --network given twice"},
            {{"--kernel", "/k", "--via", "gpu-1"},
             "option --via does not apply to \"instances create\""},
            {{"--image", "i", "--ssh-key", empty}, NULL},  /* holds no key */
            {{"--image", "i", "--ssh-key", binary}, NULL}, /* a NUL byte */
            {{"--image", "i", "--ssh-key", missing}, NULL},
            {{"--image", "i", "--user-data", binary}, NULL},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const char *argv[32];
                size_t n = 0;
                for (size_t j = 0; j < ELEMENTSOF(base); j++)
                        argv[n++] = base[j];
                for (size_t j = 0; j < ELEMENTSOF(cases[i].args) && cases[i].args[j]; j++)
                        argv[n++] = cases[i].args[j];
                argv[n] = NULL;
                unsigned before = f->tcp.n_requests;
                assert_int_equal(run_args(f, argv), CTL_EXIT_USAGE);
                assert_int_equal(f->tcp.n_requests, before);
                _cleanup_free_ char *want = NULL;
                if (cases[i].error)
                        assert_int_equal(strprintf(&want,
                                                   "vgpuctl: %s\nRun 'vgpuctl --help' for usage.\n",
                                                   cases[i].error),
                                         0);
                else if (i == ELEMENTSOF(cases) - 4)
                        assert_int_equal(strprintf(&want,
                                                   "vgpuctl: --ssh-key %s: holds no key\n"
                                                   "Run 'vgpuctl --help' for usage.\n",
                                                   empty),
                                         0);
                else if (i == ELEMENTSOF(cases) - 3)
                        assert_int_equal(strprintf(&want,
                                                   "vgpuctl: --ssh-key %s: not UTF-8 text (or "
                                                   "holds a NUL byte)\n"
                                                   "Run 'vgpuctl --help' for usage.\n",
                                                   binary),
                                         0);
                else if (i == ELEMENTSOF(cases) - 2)
                        assert_int_equal(strprintf(&want,
                                                   "vgpuctl: --ssh-key %s: No such file or "
                                                   "directory\n"
                                                   "Run 'vgpuctl --help' for usage.\n",
                                                   missing),
                                         0);
                else
                        assert_int_equal(strprintf(&want,
                                                   "vgpuctl: --user-data %s: not UTF-8 text "
                                                   "(or holds a NUL byte)\n"
                                                   "Run 'vgpuctl --help' for usage.\n",
                                                   binary),
                                         0);
                assert_string_equal(f->err, want);
        }
}

/* ---- instances ssh (OPS-7, NET-9) ------------------------------------------------------------ */

#define SSH_INSTANCE(state, network)                                                              \
        "{\"id\":\"" ID1 "\",\"name\":\"web\",\"state\":\"" state "\",\"created_at\":"            \
        "\"2026-09-02T20:08:03Z\",\"vcpus\":1,\"memory_mb\":512,\"boot\":{},\"network\":" network \
        "}"

static const char ssh_nat[] = SSH_INSTANCE(
    "Running", "{\"mode\":\"nat\",\"bridge\":\"vgpud0\",\"mac\":\"52:54:00:35:1d:5b\",\"ip\":"
               "\"10.233.0.2\",\"prefix\":24,\"gateway\":\"10.233.0.1\",\"ports\":[{\"host\":"
               "20080,\"guest\":80,\"protocol\":\"tcp\"},{\"host\":20022,\"guest\":22,"
               "\"protocol\":\"udp\"},{\"host\":20023,\"guest\":22,\"protocol\":\"tcp\"}]}");

/* A fake ssh on PATH that prints its arguments, one a line. */
static char *fake_ssh_path(Fixture *f)
{
        _cleanup_free_ char *bin = NULL, *ssh = NULL;
        char *path = NULL;
        static const char script[] = "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n";
        assert_int_equal(strprintf(&bin, "%s/bin", f->dir), 0);
        assert_true(mkdir(bin, 0755) == 0 || errno == EEXIST);
        assert_int_equal(strprintf(&ssh, "%s/ssh", bin), 0);
        write_file(ssh, script, sizeof script - 1, 0755);
        assert_int_equal(strprintf(&path, "PATH=%s", bin), 0);
        return path;
}

static void test_instances_ssh(void **state) /* OPS-7, NET-9 */
{
        Fixture *f = *state;
        _cleanup_free_ char *path = fake_ssh_path(f), *url = NULL;
        assert_int_equal(strprintf(&url, "VGPUD_URL=%s", f->url), 0);
        const char *const env[] = {path, url, NULL};

        /* nat: the instance's address; the words after the id (after "--" too) are ssh's. */
        server_set_answer(&f->tcp, 200, "application/json", ssh_nat);
        _cleanup_(spawned_done) Spawned a = {}, b = {}, c = {}, d = {};
        spawn_vgpuctl(
            f, (const char *[]){"instances", "ssh", ID1, "--", "-l", "debian", "uptime", NULL}, env,
            &a);
        assert_int_equal(a.status, 0);
        assert_string_equal(a.err, "");
        assert_string_equal(a.out, "-o\nStrictHostKeyChecking=accept-new\n10.233.0.2\n-l\ndebian\n"
                                   "uptime\n");
        assert_string_equal(f->tcp.method, "GET");
        assert_string_equal(f->tcp.path, "/instances/" ID1);

        /* --via HOST: that host and the first tcp forward to guest port 22. */
        spawn_vgpuctl(f, (const char *[]){"instances", "ssh", "--via", "gpu-1.example", ID1, NULL},
                      env, &b);
        assert_int_equal(b.status, 0);
        assert_string_equal(b.out,
                            "-o\nStrictHostKeyChecking=accept-new\n-p\n20023\ngpu-1.example\n");

        /* A --via that ssh would read as an option or a user is refused before any request. */
        spawn_vgpuctl(
            f,
            (const char *[]){"instances", "ssh", ID1, "--via=-oProxyCommand=x", "hostname", NULL},
            env, &c);
        assert_int_equal(c.status, 2);
        assert_string_equal(c.out, "");
        assert_non_null(strstr(c.err, "--via \"-oProxyCommand=x\": expected a host name"));

        /* An API error is printed as any other; ssh does not run. */
        server_set_answer(&f->tcp, 404, "application/json",
                          "{\"code\":\"not_found\",\"message\":\"no instance " ID1 "\"}");
        spawn_vgpuctl(f, (const char *[]){"instances", "ssh", ID1, NULL}, env, &d);
        assert_int_equal(d.status, 1);
        assert_string_equal(d.out, "");
        assert_string_equal(d.err, "error: not_found: no instance " ID1 " (HTTP 404)\n");
}

static void test_instances_ssh_argv(void **state) /* OPS-7, NET-1, NET-9 */
{
        (void)state;
        _cleanup_free_ char *error = NULL;
        char **argv = NULL;
        static const struct {
                const char *json;
                const char *via;
                const char *error;
        } refused[] = {
            {SSH_INSTANCE("Stopped", "{\"mode\":\"nat\",\"ip\":\"10.233.0.2\"}"), NULL,
             "instance " ID1 " is Stopped, not Running"},
            {SSH_INSTANCE("Running", "{\"mode\":\"none\"}"), NULL,
             "instance " ID1 " has no address vgpud knows (network mode none)"},
            {SSH_INSTANCE("Running", "{\"mode\":\"bridge\",\"bridge\":\"br-lan\"}"), NULL,
             "instance " ID1 " has no address vgpud knows (network mode bridge)"},
            {SSH_INSTANCE("Running", "{\"mode\":\"nat\",\"ip\":\"10.233.0.2\",\"ports\":[{"
                                     "\"host\":20080,\"guest\":80,\"protocol\":\"tcp\"}]}"),
             "gpu-1",
             "instance " ID1 " forwards no host port to its port 22/tcp (create it with --port "
             "HOST:22)"},
        };
        for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
                json_auto_t *j = json_loads(refused[i].json, 0, NULL);
                assert_non_null(j);
                free(error);
                error = NULL;
                assert_int_equal(ctl_ssh_argv(j, refused[i].via, NULL, &argv, &error), -ENOENT);
                assert_string_equal(error, refused[i].error);
        }
        /* Bridge mode with a static address: that address. */
        json_auto_t *j = json_loads(
            SSH_INSTANCE("Running", "{\"mode\":\"bridge\",\"ip\":\"192.0.2.10\",\"prefix\":24}"), 0,
            NULL);
        assert_int_equal(ctl_ssh_argv(j, NULL, NULL, &argv, &error), 0);
        assert_string_equal(argv[3], "192.0.2.10");
        assert_null(argv[4]);
        strv_free(argv);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_resources_table, setup, teardown),
            cmocka_unit_test_setup_teardown(test_resources_without_framework, setup, teardown),
            cmocka_unit_test_setup_teardown(test_gpus_table, setup, teardown),
            cmocka_unit_test_setup_teardown(test_health_list, setup, teardown),
            cmocka_unit_test_setup_teardown(test_json_passthrough, setup, teardown),
            cmocka_unit_test_setup_teardown(test_api_errors, setup, teardown),
            cmocka_unit_test_setup_teardown(test_bad_responses, setup, teardown),
            cmocka_unit_test_setup_teardown(test_response_size_cap, setup, teardown),
            cmocka_unit_test_setup_teardown(test_operator_routes, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_requests, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_tables, setup, teardown),
            cmocka_unit_test_setup_teardown(test_disk_requests, setup, teardown),
            cmocka_unit_test_setup_teardown(test_disk_import_failed, setup, teardown),
            cmocka_unit_test_setup_teardown(test_disk_usage_errors, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_json, setup, teardown),
            cmocka_unit_test_setup_teardown(test_network, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_console_raw, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_api_errors, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_usage_errors, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_timeouts, setup, teardown),
            cmocka_unit_test_setup_teardown(test_unix_socket, setup, teardown),
            cmocka_unit_test_setup_teardown(test_environment_defaults, setup, teardown),
            cmocka_unit_test_setup_teardown(test_usage_errors, setup, teardown),
            cmocka_unit_test_setup_teardown(test_connection_errors, setup, teardown),
            cmocka_unit_test_setup_teardown(test_token_mint, setup, teardown),
            cmocka_unit_test_setup_teardown(test_token_mint_secret_file, setup, teardown),
            cmocka_unit_test_setup_teardown(test_binary, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_create_flags, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_create_flag_errors, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_ssh, setup, teardown),
            cmocka_unit_test_setup_teardown(test_instances_ssh_argv, setup, teardown),
        };

        if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
                return 1;
        int r = cmocka_run_group_tests(tests, NULL, NULL);
        curl_global_cleanup();
        return r;
}
