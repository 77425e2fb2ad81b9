/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for src/http: listen addresses, request targets and routing, the Authorization
 * header, and the server itself, driven from an sd-event loop exactly as the daemon does.
 *
 * The server runs on the test's main thread. Each exchange runs a raw HTTP/1.1 client on a
 * second thread (so that nothing in libcurl smooths over what the server sends), which writes
 * to an eventfd when it is done; the main thread runs the loop until then, within a deadline,
 * and asserts on what the client recorded once it has joined. Listeners are 127.0.0.1:0 and a
 * Unix socket in a temporary directory. Token times come from an injected clock.
 */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include <cmocka.h>

#include "fuzz/jwt-forge.h"
#include "http/http-internal.h"
#include "http/http.h"
#include "testlib.h"

#define TEST_KEY "0123456789abcdef0123456789abcdef" /* 32 bytes: the smallest allowed */
#define TEST_NOW INT64_C(1900000000)
#define LOOP_DEADLINE_SEC 30

#define ERROR_BODY(code, message) "{\"code\":\"" code "\",\"message\":\"" message "\"}"
#define UNAUTHORIZED_BODY ERROR_BODY("unauthorized", "invalid or missing bearer token")

/* ---- the fixture ----------------------------------------------------------------------------- */

typedef struct Fixture {
        sd_event *event;
        HttpServer *server;
        JwtSecret *secret;
        Timestamp now;
        Clock clock;
        char dir[64];
        char unix_path[128];
        uint16_t port;
        char *token; /* valid for an hour from now, sub "alice" */

        int done_fd; /* the client thread's "finished" */
        sd_event_source *done_source;
        bool client_done;
        pthread_t client;

        TestLog log;

        /* What the handlers saw and did. */
        HttpRequest *pending;
        bool pending_set;
        sd_event_source *complete_timer;
        int complete_result;
        int second_reply_result;
        int suspend_elsewhere_result;
        HttpStream *stream; /* the streamed answer of /stream or /stream-hold */
        unsigned stream_piece;
        int stream_overflow_result;
        bool stream_closed;
} Fixture;

static Timestamp fixture_now(void *userdata)
{
        const Fixture *f = userdata;
        return f->now;
}

static int on_client_done(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
        Fixture *f = userdata;
        uint64_t v;
        if (read(fd, &v, sizeof v) == sizeof v)
                f->client_done = true;
        return 0;
}

/* Runs the loop until *flag is set; fails the test after LOOP_DEADLINE_SEC. */
static void loop_until(Fixture *f, const bool *flag)
{
        TEST_WAIT_UNTIL_LIMIT(f->event, LOOP_DEADLINE_SEC * NSEC_PER_SEC, *flag);
}

static void client_start(Fixture *f, void *(*fn)(void *), void *arg)
{
        f->client_done = false;
        assert_int_equal(pthread_create(&f->client, NULL, fn, arg), 0);
}

static void client_wait(Fixture *f)
{
        loop_until(f, &f->client_done);
        assert_int_equal(pthread_join(f->client, NULL), 0);
}

static void client_signal_done(const Fixture *f)
{
        uint64_t one = 1;
        if (write(f->done_fd, &one, sizeof one) != sizeof one)
                abort();
}

/* ---- handlers -------------------------------------------------------------------------------- */

static int handle_ping(HttpRequest *req, void *userdata)
{
        json_auto_t *j = json_pack("{s:b}", "pong", 1);
        return http_reply_json(req, 200, j);
}

static int handle_public(HttpRequest *req, void *userdata)
{
        return http_reply(req, 200, "text/plain", "hello", 5);
}

/* A name without a value is refused and leaves the request unanswered; then the real answer. */
static int handle_headers(HttpRequest *req, void *userdata)
{
        static const char *const odd[] = {"X-One", "1", "X-Two", NULL};
        static const char *const headers[] = {"X-One", "1", "Cache-Control", "no-cache", NULL};
        assert_int_equal(http_reply_with_headers(req, 200, "text/plain", "hi", 2, odd), -EINVAL);
        return http_reply_with_headers(req, 200, "text/plain", "hi", 2, headers);
}

static int handle_item(HttpRequest *req, void *userdata)
{
        json_auto_t *j =
            json_pack("{s:s,s:s,s:s*,s:s*}", "method", http_request_get_method(req), "id",
                      http_request_get_param(req, "id"), "part",
                      http_request_get_param(req, "part"), "path", http_request_get_path(req));
        return http_reply_json(req, 200, j);
}

static int handle_create(HttpRequest *req, void *userdata)
{
        json_auto_t *body = NULL;
        int r = http_request_parse_json(req, &body);
        if (r < 0)
                return r;
        return http_reply_json(req, 201, body);
}

static int handle_echo(HttpRequest *req, void *userdata)
{
        size_t size;
        (void)http_request_get_body(req, &size);
        json_auto_t *j = json_pack("{s:I}", "size", (json_int_t)size);
        return http_reply_json(req, 200, j);
}

static int handle_search(HttpRequest *req, void *userdata)
{
        json_auto_t *j = json_pack("{s:s*,s:s*}", "q", http_request_get_query(req, "q"), "limit",
                                   http_request_get_query(req, "limit"));
        return http_reply_json(req, 200, j);
}

static int handle_whoami(HttpRequest *req, void *userdata)
{
        json_auto_t *j = json_pack("{s:s?,s:s}", "sub", http_request_get_subject(req), "peer",
                                   http_request_get_peer(req));
        return http_reply_json(req, 200, j);
}

static int handle_fail(HttpRequest *req, void *userdata)
{
        return -EIO;
}

static int handle_silent(HttpRequest *req, void *userdata)
{
        return 0;
}

static int handle_twice(HttpRequest *req, void *userdata)
{
        Fixture *f = userdata;
        int r = http_reply(req, 204, NULL, NULL, 0);
        f->second_reply_result = http_reply(req, 200, "text/plain", "x", 1);
        return r;
}

static int complete_pending(sd_event_source *s, uint64_t usec, void *userdata)
{
        Fixture *f = userdata;
        json_auto_t *j = json_pack("{s:b}", "done", 1);
        f->complete_result = http_reply_json(f->pending, 200, j);
        f->pending = http_request_unref(f->pending);
        return 0;
}

/* Suspends; a timer on the loop answers 20 ms later. */
static int handle_slow(HttpRequest *req, void *userdata)
{
        Fixture *f = userdata;
        int r = http_request_suspend(req);
        if (r < 0)
                return r;
        f->pending = http_request_ref(req);
        return sd_event_add_time_relative(f->event, &f->complete_timer, CLOCK_MONOTONIC, 20 * 1000,
                                          0, complete_pending, f);
}

/* Suspends until /release, or for good. */
static int handle_hold(HttpRequest *req, void *userdata)
{
        Fixture *f = userdata;
        int r = http_request_suspend(req);
        if (r < 0)
                return r;
        f->pending = http_request_ref(req);
        f->pending_set = true;
        return 0;
}

static int handle_release(HttpRequest *req, void *userdata)
{
        Fixture *f = userdata;
        if (!f->pending)
                return http_reply_error(req, 409, "busy", "nothing held yet");
        f->suspend_elsewhere_result = http_request_suspend(f->pending);
        f->complete_result = http_reply(f->pending, 200, "text/plain", "released", 8);
        f->pending = http_request_unref(f->pending);
        return http_reply(req, 200, "text/plain", "ok", 2);
}

/* CONS-2: /stream writes its pieces one drained() at a time, then ends. */
static const char *const stream_pieces[] = {"one\n", "two\n", "three\n"};

static void stream_drained(HttpStream *s, void *userdata)
{
        Fixture *f = userdata;
        if (f->stream_piece == ELEMENTSOF(stream_pieces)) {
                http_stream_end(s);
                return;
        }
        const char *p = stream_pieces[f->stream_piece++];
        assert_int_equal(http_stream_write(s, p, strlen(p)), 0);
}

static void stream_closed(HttpStream *s, void *userdata)
{
        Fixture *f = userdata;
        f->stream_closed = true;
}

static int handle_stream(HttpRequest *req, void *userdata)
{
        Fixture *f = userdata;
        int r = http_reply_stream(req, 200, "text/plain",
                                  &(HttpStreamConfig){.max_buffered = 8,
                                                      .drained = stream_drained,
                                                      .closed = stream_closed,
                                                      .userdata = f},
                                  &f->stream);
        if (r < 0)
                return r;
        /* All or nothing, and never past the bound. */
        f->stream_overflow_result = http_stream_write(f->stream, "123456789", 9);
        assert_int_equal(http_stream_room(f->stream), 8);
        stream_drained(f->stream, f);
        return 0;
}

/* A streamed answer that writes nothing: its connection waits suspended. */
static int handle_stream_hold(HttpRequest *req, void *userdata)
{
        Fixture *f = userdata;
        return http_reply_stream(
            req, 200, "text/plain",
            &(HttpStreamConfig){.max_buffered = 64, .closed = stream_closed, .userdata = f},
            &f->stream);
}

static const HttpRoute test_routes[] = {
    {"GET", "/ping", handle_ping},
    {"GET", "/public", handle_public, .public = true},
    {"GET", "/headers", handle_headers, .public = true},
    {"GET", "/items/{id}", handle_item},
    {"DELETE", "/items/{id}", handle_item},
    {"GET", "/items/{id}/parts/{part}", handle_item},
    {"POST", "/items", handle_create},
    {"POST", "/echo", handle_echo},
    {"GET", "/search", handle_search, .query = (const char *const[]){"q", "limit", NULL}},
    {"GET", "/whoami", handle_whoami},
    {"GET", "/fail", handle_fail},
    {"GET", "/silent", handle_silent},
    {"GET", "/twice", handle_twice},
    {"GET", "/slow", handle_slow},
    {"GET", "/hold", handle_hold},
    {"GET", "/release", handle_release, .public = true},
    {"GET", "/stream", handle_stream, .public = true},
    {"GET", "/stream-hold", handle_stream_hold, .public = true},
};

static int server_start(Fixture *f, unsigned idle_timeout_sec)
{
        HttpServerConfig config = {
            .listen = "127.0.0.1:0",
            .unix_socket = f->unix_path,
            .unix_socket_mode = 0600,
            .routes = test_routes,
            .n_routes = ELEMENTSOF(test_routes),
            .secret = f->secret,
            .clock = &f->clock,
            .idle_timeout_sec = idle_timeout_sec,
            .userdata = f,
        };
        _cleanup_free_ char *error = NULL;
        int r = http_server_new(f->event, &config, &f->server, &error);
        if (r < 0) {
                fprintf(stderr, "http_server_new: %s\n", error);
                return r;
        }
        HttpAddress a;
        r = http_server_get_tcp_address(f->server, &a);
        if (r < 0)
                return r;
        f->port = ntohs(((struct sockaddr_in *)&a.sa)->sin_port);
        return 0;
}

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        if (!f)
                return -1;
        f->now = (Timestamp){.sec = TEST_NOW, .nsec = 500000000};
        f->clock = (Clock){.now = fixture_now, .userdata = f};
        strcpy(f->dir, "/tmp/test-http-XXXXXX");
        if (!mkdtemp(f->dir))
                return -1;
        snprintf(f->unix_path, sizeof f->unix_path, "%s/api.sock", f->dir);

        if (test_log_start(&f->log) < 0)
                return -1;
        log_set_max_level(LOG_LEVEL_DEBUG);

        f->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (f->done_fd < 0 || sd_event_new(&f->event) < 0 ||
            sd_event_add_io(f->event, &f->done_source, f->done_fd, EPOLLIN, on_client_done, f) < 0)
                return -1;
        if (jwt_secret_new(TEST_KEY, strlen(TEST_KEY), &f->secret) < 0 ||
            jwt_mint(f->secret, "alice", f->now, 3600 * NSEC_PER_SEC, &f->token) < 0)
                return -1;
        *state = f;
        return server_start(f, 0);
}

static int teardown(void **state)
{
        Fixture *f = *state;
        if (f->pending)
                http_request_unref(f->pending);
        http_server_free(f->server);
        http_stream_unref(f->stream);
        sd_event_source_disable_unref(f->complete_timer);
        sd_event_source_disable_unref(f->done_source);
        sd_event_unref(f->event);
        close(f->done_fd);
        jwt_secret_free(f->secret);
        free(f->token);
        test_log_stop(&f->log);
        log_set_max_level(LOG_LEVEL_INFO);
        (void)test_remove_tree_at(AT_FDCWD, f->dir);
        free(f);
        return 0;
}

/* The captured log so far. */
static const char *fixture_log(Fixture *f)
{
        return test_log_text(&f->log);
}

/* ---- a raw HTTP/1.1 client (runs on the client thread) ----------------------------------------
 */

typedef struct Response {
        int status; /* 0: no response at all */
        char *head; /* status line and headers */
        char *body; /* NUL-terminated */
        size_t body_size;
        bool closed; /* the server closed the connection (EOF or reset) */
} Response;

static void response_done(Response *r)
{
        free(r->head);
        free(r->body);
        *r = (Response){0};
}

static int client_connect(const Fixture *f, bool unix_socket)
{
        int fd;
        if (unix_socket) {
                struct sockaddr_un sun = {.sun_family = AF_UNIX};
                strcpy(sun.sun_path, f->unix_path);
                fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd >= 0 && connect(fd, (struct sockaddr *)&sun, sizeof sun) < 0) {
                        close(fd);
                        return -1;
                }
        } else {
                struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(f->port)};
                sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
                fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd >= 0 && connect(fd, (struct sockaddr *)&sin, sizeof sin) < 0) {
                        close(fd);
                        return -1;
                }
        }
        /* No read waits forever: a server that never answers fails the test instead. */
        struct timeval tv = {.tv_sec = 10};
        if (fd >= 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        return fd;
}

static bool send_all(int fd, const void *buf, size_t n)
{
        const char *p = buf;
        while (n > 0) {
                ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0)
                        return false;
                p += k;
                n -= (size_t)k;
        }
        return true;
}

static char *head_value(const char *head, const char *name)
{
        size_t n = strlen(name);
        for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
                if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
                        const char *v = p + 3 + n;
                        v += strspn(v, " ");
                        return strndup(v, strcspn(v, "\r"));
                }
        return NULL;
}

/*
 * Reads one response. With until_eof, also reads on to the end of the connection (which must
 * then come, since the client asked for "Connection: close" or the server closes).
 */
static void read_response(int fd, Response *r, bool until_eof)
{
        size_t size = 0, allocated = 4096;
        char *buf = malloc(allocated);
        ssize_t head_end = -1;
        size_t want = SIZE_MAX;

        *r = (Response){0};
        for (;;) {
                if (head_end >= 0 && !until_eof && size >= want)
                        break;
                if (size + 1 >= allocated)
                        buf = realloc(buf, allocated *= 2);
                ssize_t k = recv(fd, buf + size, allocated - size - 1, 0);
                if (k < 0 && errno == EINTR)
                        continue;
                if (k <= 0) {
                        r->closed = k == 0 || errno == ECONNRESET;
                        break;
                }
                size += (size_t)k;
                buf[size] = 0;
                if (head_end < 0) {
                        char *e = strstr(buf, "\r\n\r\n");
                        if (!e)
                                continue;
                        head_end = e - buf;
                        r->head = strndup(buf, (size_t)head_end);
                        r->status = (int)strtol(buf + 9, NULL, 10);
                        _cleanup_free_ char *cl = head_value(r->head, "Content-Length");
                        want = (size_t)head_end + 4 + (cl ? strtoul(cl, NULL, 10) : 0);
                }
        }
        buf[size] = 0;
        if (head_end >= 0) {
                r->body_size = size - (size_t)head_end - 4;
                r->body = strndup(buf + head_end + 4, r->body_size);
        }
        free(buf);
}

typedef struct Exchange {
        Fixture *f;
        bool unix_socket;
        const char *request; /* raw bytes */
        size_t request_size;
        const void *body; /* sent after request, when non-NULL */
        size_t body_size;
        Response response;
} Exchange;

static void *exchange_thread(void *userdata)
{
        Exchange *x = userdata;
        int fd = client_connect(x->f, x->unix_socket);
        if (fd >= 0) {
                /* Read even when sending failed: the server may have answered early. */
                (void)(send_all(fd, x->request, x->request_size) &&
                       (!x->body || send_all(fd, x->body, x->body_size)));
                read_response(fd, &x->response, true);
                close(fd);
        }
        client_signal_done(x->f);
        return NULL;
}

/* Sends a raw request (with its body, if any) and reads the reply up to the connection's end. */
static void exchange_raw(Fixture *f, bool unix_socket, const char *request, size_t size,
                         Response *ret)
{
        Exchange x = {.f = f, .unix_socket = unix_socket, .request = request, .request_size = size};
        client_start(f, exchange_thread, &x);
        client_wait(f);
        *ret = x.response;
}

/*
 * A request with "Connection: close". extra_headers are full lines ("Name: value\r\n"); body,
 * when non-NULL, gets a Content-Length.
 */
static void exchange(Fixture *f, bool unix_socket, const char *method, const char *target,
                     const char *extra_headers, const char *body, Response *ret)
{
        _cleanup_free_ char *request = NULL;
        _cleanup_free_ char *length = NULL;
        if (body)
                assert_int_equal(strprintf(&length, "Content-Length: %zu\r\n", strlen(body)), 0);
        assert_int_equal(strprintf(&request,
                                   "%s %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
                                   "%s%s\r\n%s",
                                   method, target, extra_headers ? extra_headers : "",
                                   length ? length : "", body ? body : ""),
                         0);
        exchange_raw(f, unix_socket, request, strlen(request), ret);
}

/* A request with the fixture's valid token. */
static void exchange_auth(Fixture *f, bool unix_socket, const char *method, const char *target,
                          const char *extra_headers, const char *body, Response *ret)
{
        _cleanup_free_ char *headers = NULL;
        assert_int_equal(strprintf(&headers, "Authorization: Bearer %s\r\n%s", f->token,
                                   extra_headers ? extra_headers : ""),
                         0);
        exchange(f, unix_socket, method, target, headers, body, ret);
}

static void assert_response(const Response *r, int status, const char *body)
{
        assert_int_equal(r->status, status);
        assert_non_null(r->body);
        assert_string_equal(r->body, body);
}

static void assert_header(const Response *r, const char *name, const char *value)
{
        _cleanup_free_ char *v = r->head ? head_value(r->head, name) : NULL;
        if (!value) {
                assert_null(v);
                return;
        }
        assert_non_null(v);
        assert_string_equal(v, value);
}

/* An error response: status, the exact body, and Content-Type: application/json (API-11). */
static void assert_error(const Response *r, int status, const char *body)
{
        assert_response(r, status, body);
        assert_header(r, "Content-Type", "application/json");
}

/* ---- listen addresses -------------------------------------------------------------------------
 */

static void test_address_parse(void **state) /* CFG-6 */
{
        HttpAddress a;
        char buf[HTTP_ADDRESS_STRLEN];

        assert_int_equal(http_address_parse("127.0.0.1:8080", false, &a), 0);
        assert_string_equal(http_address_format(&a, buf), "127.0.0.1:8080");
        assert_int_equal(a.len, sizeof(struct sockaddr_in));
        assert_int_equal(http_address_parse("[::1]:65535", false, &a), 0);
        assert_string_equal(http_address_format(&a, buf), "[::1]:65535");
        assert_int_equal(a.len, sizeof(struct sockaddr_in6));
        assert_int_equal(http_address_parse("[::]:1", false, &a), 0);
        assert_string_equal(http_address_format(&a, buf), "[::]:1");
        assert_int_equal(http_address_parse("0.0.0.0:0", true, &a), 0);
        assert_string_equal(http_address_format(&a, buf), "0.0.0.0:0");

        static const char *const bad[] = {
            "127.0.0.1:0",    "127.0.0.1:65536", "127.0.0.1:",
            "127.0.0.1",      ":8080",           "localhost:8080",
            "::1:8080",       "[::1]8080",       "[::1:8080",
            "[localhost]:80", "127.0.0.1:+80",   "127.0.0.1:80 ",
            " 127.0.0.1:80",  "127.1:80",        "0127.0.0.1:80",
            "1.2.3.4.5:80",   "[127.0.0.1]:80",  "",
            "127.0.0.1:08x",  "[::1]:",
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                a = (HttpAddress){.len = 77};
                assert_int_equal(http_address_parse(bad[i], false, &a), -EINVAL);
                assert_int_equal(a.len, 77); /* untouched on failure */
        }
}

/* ---- request targets and routes ---------------------------------------------------------------
 */

static void test_target_parse(void **state) /* API-3 */
{
        HttpTarget t;
        _cleanup_free_ char *error = NULL;

        assert_int_equal(http_target_parse("/a/b%20c/%7E?x=1&y=%2F%3D&z", &t, &error), 0);
        assert_string_equal(t.path, "/a/b%20c/%7E");
        assert_int_equal(t.n_segments, 3);
        assert_string_equal(t.segments[0], "a");
        assert_string_equal(t.segments[1], "b c");
        assert_string_equal(t.segments[2], "~");
        assert_null(t.segments[3]);
        assert_int_equal(t.n_query, 3);
        assert_string_equal(t.query[0].name, "x");
        assert_string_equal(t.query[0].value, "1");
        assert_string_equal(t.query[1].value, "/=");
        assert_string_equal(t.query[2].name, "z");
        assert_string_equal(t.query[2].value, "");
        http_target_done(&t);

        /* A trailing slash is an empty last segment, never stripped. */
        assert_int_equal(http_target_parse("/a/?", &t, &error), 0);
        assert_int_equal(t.n_segments, 2);
        assert_string_equal(t.segments[1], "");
        assert_int_equal(t.n_query, 0);
        http_target_done(&t);
        assert_int_equal(http_target_parse("/", &t, &error), 0);
        assert_int_equal(t.n_segments, 1);
        assert_string_equal(t.segments[0], "");
        http_target_done(&t);
        /* "+" is a literal plus, not a space. */
        assert_int_equal(http_target_parse("/a?q=a+b", &t, &error), 0);
        assert_string_equal(t.query[0].value, "a+b");
        http_target_done(&t);

        static const struct {
                const char *target, *message;
        } bad[] = {
            {"a/b", "request target must be an absolute path"},
            {"*", "request target must be an absolute path"},
            {"http://x/a", "request target must be an absolute path"},
            {"/a/..", "path segment \"..\" not allowed"},
            {"/a/./b", "path segment \".\" not allowed"},
            {"/a/%2e%2e/b", "path segment \"..\" not allowed"},
            {"/a/%2E", "path segment \".\" not allowed"},
            {"/a%2fb", "encoded \"/\" in path segment"},
            {"/a%2Fb", "encoded \"/\" in path segment"},
            {"/a%00b", "invalid character or escape in path"},
            {"/a%zz", "invalid character or escape in path"},
            {"/a%4", "invalid character or escape in path"},
            {"/a%", "invalid character or escape in path"},
            {"/a b", "invalid character or escape in path"},
            {"/a\"b", "invalid character or escape in path"},
            {"/a\xc3\xa9", "invalid character or escape in path"},
            {"/a?x=1&&y=2", "invalid query string"},
            {"/a?&x", "invalid query string"},
            {"/a?x&", "invalid query string"},
            {"/a?=1", "invalid query string"},
            {"/a?x=%0", "invalid query string"},
            {"/a?x=%00", "invalid query string"},
            {"/a?x=a b", "invalid query string"},
            {"/a?x=1&x=2", "query parameter \"x\" given twice"},
            {"/a?x=1&%78=2", "query parameter \"x\" given twice"},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                t = (HttpTarget){.n_segments = 99};
                assert_int_equal(http_target_parse(bad[i].target, &t, &error), -EINVAL);
                assert_string_equal(error, bad[i].message);
                assert_int_equal(t.n_segments, 99);
        }
}

static int no_handler(HttpRequest *req, void *userdata)
{
        return 0;
}

static void assert_routes_invalid(const HttpRoute *routes, size_t n, const char *message)
{
        _cleanup_free_ char *error = NULL;
        assert_int_equal(http_routes_validate(routes, n, &error), -EINVAL);
        assert_string_equal(error, message);
}

static void test_routes_validate(void **state) /* API-3 */
{
        _cleanup_free_ char *error = NULL;
        assert_int_equal(http_routes_validate(test_routes, ELEMENTSOF(test_routes), &error), 0);
        assert_null(error);

        const HttpRoute root[] = {{"GET", "/", no_handler}};
        assert_int_equal(http_routes_validate(root, 1, &error), 0);

        const struct {
                HttpRoute route;
                const char *message;
        } bad[] = {
            {{"get", "/a", no_handler}, "route get /a: invalid"},
            {{"", "/a", no_handler}, "route  /a: invalid"},
            {{NULL, "/a", no_handler}, "route (null) /a: invalid"},
            {{"GET", NULL, no_handler}, "route GET (null): invalid"},
            {{"GET", "a", no_handler}, "route GET a: invalid"},
            {{"GET", "/a//", no_handler}, "route GET /a//: invalid"},
            {{"GET", "//a", no_handler}, "route GET //a: invalid"},
            {{"GET", "/a/..", no_handler}, "route GET /a/..: invalid"},
            {{"GET", "/a%20", no_handler}, "route GET /a%20: invalid"},
            {{"GET", "/{}", no_handler}, "route GET /{}: invalid"},
            {{"GET", "/{ID}", no_handler}, "route GET /{ID}: invalid"},
            {{"GET", "/x{id}", no_handler}, "route GET /x{id}: invalid"},
            {{"GET", "/{id}/{id}", no_handler}, "route GET /{id}/{id}: invalid"},
            {{"GET", "/a", NULL}, "route GET /a: invalid"},
            {{"GET", "/a", no_handler, .query = (const char *const[]){"", NULL}},
             "route GET /a: empty query parameter name"},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_routes_invalid(&bad[i].route, 1, bad[i].message);

        const HttpRoute overlap[] = {{"GET", "/a/{id}", no_handler},
                                     {"DELETE", "/a/b", no_handler},
                                     {"GET", "/a/b", no_handler}};
        assert_routes_invalid(overlap, 3, "route GET /a/b: overlaps with GET /a/{id}");
        const HttpRoute same[] = {{"GET", "/a/{x}/c", no_handler}, {"GET", "/a/{y}/c", no_handler}};
        assert_routes_invalid(same, 2, "route GET /a/{y}/c: overlaps with GET /a/{x}/c");
        /* Different lengths, different literals, or different methods never overlap. */
        const HttpRoute fine[] = {{"GET", "/a/{id}", no_handler},
                                  {"GET", "/a/{id}/b", no_handler},
                                  {"GET", "/b/{id}", no_handler},
                                  {"POST", "/a/{id}", no_handler},
                                  {"GET", "/{x}/c/d", no_handler},
                                  /* A trailing slash is a page of its own ("/ui/"), and a
                                   * parameter never matches its empty segment. */
                                  {"GET", "/a/", no_handler},
                                  {"GET", "/a", no_handler}};
        assert_int_equal(http_routes_validate(fine, ELEMENTSOF(fine), &error), 0);
}

static void test_route_find(void **state) /* API-3 */
{
        HttpTarget t;
        size_t index = 99;
        _cleanup_free_ char *allow = NULL;
        HttpParam *params = NULL;
        size_t n_params = 0;

        assert_int_equal(http_target_parse("/items/a%20b/parts/7", &t, NULL), 0);
        assert_int_equal(http_route_find(test_routes, ELEMENTSOF(test_routes), "GET", t.segments,
                                         t.n_segments, &index),
                         0);
        assert_string_equal(test_routes[index].pattern, "/items/{id}/parts/{part}");
        assert_int_equal(
            http_route_params(&test_routes[index], t.segments, t.n_segments, &params, &n_params),
            0);
        assert_int_equal(n_params, 2);
        assert_string_equal(params[0].name, "id");
        assert_string_equal(params[0].value, "a b");
        assert_string_equal(params[1].name, "part");
        assert_string_equal(params[1].value, "7");
        http_params_free(params, n_params);
        index = 99;
        assert_int_equal(http_route_find(test_routes, ELEMENTSOF(test_routes), "POST", t.segments,
                                         t.n_segments, &index),
                         -EPERM);
        assert_int_equal(index, 99);
        http_target_done(&t);

        assert_int_equal(http_target_parse("/items/7", &t, NULL), 0);
        assert_int_equal(http_route_allow(test_routes, ELEMENTSOF(test_routes), t.segments,
                                          t.n_segments, &allow),
                         0);
        assert_string_equal(allow, "DELETE, GET");
        http_target_done(&t);

        /* A parameter never matches an empty segment; unknown shapes are unknown paths. */
        static const char *const unknown[] = {"/items/",        "/items//parts/1", "/ping/", "/",
                                              "/items/7/parts", "/pingx",          "/PING"};
        for (size_t i = 0; i < ELEMENTSOF(unknown); i++) {
                assert_int_equal(http_target_parse(unknown[i], &t, NULL), 0);
                assert_int_equal(http_route_find(test_routes, ELEMENTSOF(test_routes), "GET",
                                                 t.segments, t.n_segments, &index),
                                 -ENOENT);
                http_target_done(&t);
        }

        /* A pattern with a trailing slash matches that path only. */
        const HttpRoute slash[] = {{"GET", "/a/", no_handler}, {"GET", "/a/{id}", no_handler}};
        static const struct {
                const char *path;
                int r;
                size_t index;
        } slash_cases[] = {{"/a/", 0, 0}, {"/a/x", 0, 1}, {"/a", -ENOENT, 0}, {"/a//", -ENOENT, 0}};
        for (size_t i = 0; i < ELEMENTSOF(slash_cases); i++) {
                index = 99;
                assert_int_equal(http_target_parse(slash_cases[i].path, &t, NULL), 0);
                assert_int_equal(http_route_find(slash, ELEMENTSOF(slash), "GET", t.segments,
                                                 t.n_segments, &index),
                                 slash_cases[i].r);
                if (slash_cases[i].r == 0)
                        assert_int_equal(index, slash_cases[i].index);
                http_target_done(&t);
        }
}

/* ---- JSON bodies ------------------------------------------------------------------------------
 */

static void assert_body_invalid(const char *body, const char *message)
{
        _cleanup_free_ char *error = NULL;
        json_t *j = (json_t *)0x1;
        assert_int_equal(http_json_parse_body(body, strlen(body), &j, &error), -EINVAL);
        assert_string_equal(error, message);
        assert_ptr_equal(j, (json_t *)0x1);
}

static void test_json_body(void **state) /* GEN-6, REL-7 */
{
        json_t *j = NULL;
        char deep[64] = "", deeper[64] = "";

        for (int i = 0; i < 16; i++)
                strcat(deep, i == 0 ? "{\"a\":" : "[");
        strcat(deep, "1");
        for (int i = 0; i < 15; i++)
                strcat(deep, "]");
        strcat(deep, "}");
        assert_int_equal(http_json_parse_body(deep, strlen(deep), &j, NULL), 0);
        json_decref(j);

        for (int i = 0; i < 17; i++)
                strcat(deeper, i == 0 ? "{\"a\":" : "[");
        strcat(deeper, "1");
        for (int i = 0; i < 16; i++)
                strcat(deeper, "]");
        strcat(deeper, "}");
        assert_body_invalid(deeper, "invalid JSON body: nested deeper than 16 levels");

        /* Brackets inside strings do not count. */
        const char *strings = "{\"a\":\"[[[[[[[[[[[[[[[[[[[[\\\"[[[[\"}";
        assert_int_equal(http_json_parse_body(strings, strlen(strings), &j, NULL), 0);
        json_decref(j);

        assert_body_invalid("", "invalid JSON body: the body is empty");
        assert_body_invalid("{\"a\":1,\"a\":2}",
                            "invalid JSON body: duplicate object key near '\"a\"' (line 1, "
                            "column 10)");
        assert_body_invalid("{\"a\":", "invalid JSON body: unexpected token near end of file "
                                       "(line 1, column 5)");
        assert_body_invalid("{\"a\":}", "invalid JSON body: unexpected token near '}' (line 1, "
                                        "column 6)");
        assert_body_invalid("[1]", "invalid JSON body: expected an object");
        assert_body_invalid("\"x\"", "invalid JSON body: '[' or '{' expected near '\"x\"' (line 1, "
                                     "column 3)");
        assert_body_invalid("{} x", "invalid JSON body: end of file expected near 'x' (line 1, "
                                    "column 4)");
        assert_body_invalid("{'a':1}", "invalid JSON body: string or '}' expected near ''' (line "
                                       "1, column 2)");
        assert_body_invalid("{\"a\":\"\xff\"}",
                            "invalid JSON body: unable to decode byte 0xff near '\"' (line 1, "
                            "column 6)");
}

/* ---- bearer tokens ----------------------------------------------------------------------------
 */

static void test_auth_header(void **state) /* API-12, REL-7 */
{
        Fixture *f = *state;
        _cleanup_free_ char *error = NULL, *sub = NULL, *header = NULL, *spaced = NULL;
        _cleanup_free_ char *trailing = NULL;

        assert_int_equal(strprintf(&header, "Bearer %s", f->token), 0);
        assert_int_equal(http_auth_check(f->secret, header, f->now, &sub, &error), 0);
        assert_string_equal(sub, "alice");
        free(TAKE_PTR(sub));
        /* The scheme is case-insensitive, and more than one space may follow it. */
        assert_int_equal(strprintf(&spaced, "bEaReR   %s", f->token), 0);
        assert_int_equal(http_auth_check(f->secret, spaced, f->now, &sub, &error), 0);
        free(TAKE_PTR(sub));

        static const struct {
                const char *value, *cause;
        } bad[] = {
            {NULL, "no Authorization header"},
            {"", "Authorization scheme is not Bearer"},
            {"Bearer", "Authorization scheme is not Bearer"},
            {"Basic YWxpY2U6c2VjcmV0", "Authorization scheme is not Bearer"},
            {"Bearer ", "token is not three dot-separated parts"},
            {"Bearer\tx.y.z", "Authorization scheme is not Bearer"},
            {"Bearerx.y.z", "Authorization scheme is not Bearer"},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                assert_int_equal(http_auth_check(f->secret, bad[i].value, f->now, &sub, &error),
                                 -EACCES);
                assert_string_equal(error, bad[i].cause);
        }
        /* A trailing space belongs to no base64url part. */
        assert_int_equal(strprintf(&trailing, "Bearer %s ", f->token), 0);
        assert_int_equal(http_auth_check(f->secret, trailing, f->now, &sub, &error), -EACCES);
        assert_string_equal(error, "token signature is not base64url");

        /* The limit counts the whole value: 4096 bytes pass, 4097 do not (API-12). */
        char value[4098];
        size_t spaces = 4096 - strlen("Bearer") - strlen(f->token);
        memcpy(value, "Bearer", 6);
        memset(value + 6, ' ', spaces);
        strcpy(value + 6 + spaces, f->token);
        assert_int_equal(strlen(value), 4096);
        assert_int_equal(http_auth_check(f->secret, value, f->now, &sub, &error), 0);
        memset(value + 6, ' ', spaces + 1);
        strcpy(value + 7 + spaces, f->token);
        assert_int_equal(strlen(value), 4097);
        assert_int_equal(http_auth_check(f->secret, value, f->now, &sub, &error), -EACCES);
        assert_string_equal(error, "Authorization header longer than 4096 bytes");
}

/* ---- the server: listeners ------------------------------------------------------------------ */

static void test_listeners(void **state) /* API-1, API-12 */
{
        Fixture *f = *state;
        Response r;
        struct stat st;

        assert_true(f->port > 0);
        assert_int_equal(stat(f->unix_path, &st), 0);
        assert_true(S_ISSOCK(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0600);

        exchange_auth(f, false, "GET", "/ping", NULL, NULL, &r);
        assert_response(&r, 200, "{\"pong\":true}");
        assert_header(&r, "Content-Type", "application/json");
        assert_true(r.closed);
        response_done(&r);
        exchange_auth(f, true, "GET", "/ping", NULL, NULL, &r);
        assert_response(&r, 200, "{\"pong\":true}");
        response_done(&r);

        /* One rule for both listeners: the Unix socket needs a token too. */
        exchange(f, true, "GET", "/ping", NULL, NULL, &r);
        assert_error(&r, 401, UNAUTHORIZED_BODY);
        response_done(&r);

        exchange_auth(f, false, "GET", "/whoami", NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_non_null(strstr(r.body, "{\"sub\":\"alice\",\"peer\":\"127.0.0.1:"));
        response_done(&r);
        exchange_auth(f, true, "GET", "/whoami", NULL, NULL, &r);
        _cleanup_free_ char *expected = NULL;
        assert_int_equal(strprintf(&expected, "{\"sub\":\"alice\",\"peer\":\"unix:pid=%d,uid=%u\"}",
                                   (int)getpid(), (unsigned)getuid()),
                         0);
        assert_response(&r, 200, expected);
        response_done(&r);

        /* The socket goes with the server. */
        f->server = http_server_free(f->server);
        assert_int_equal(lstat(f->unix_path, &st), -1);
        assert_int_equal(errno, ENOENT);
}

static void test_stop_listening(void **state) /* OPS-3 */
{
        Fixture *f = *state;
        Response r;

        exchange_auth(f, false, "GET", "/ping", NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        response_done(&r);

        /* At shutdown no new connection is accepted on either listener. */
        http_server_stop_listening(f->server);
        http_server_stop_listening(f->server);
        assert_int_equal(client_connect(f, false), -1);
        assert_int_equal(errno, ECONNREFUSED);
        assert_int_equal(client_connect(f, true), -1);
}

static void test_unix_socket_mode(void **state) /* API-1 */
{
        Fixture *f = *state;
        _cleanup_free_ char *path = NULL, *error = NULL;
        struct stat st;
        HttpServer *s = NULL;

        assert_int_equal(strprintf(&path, "%s/group.sock", f->dir), 0);
        HttpServerConfig config = {.unix_socket = path,
                                   .unix_socket_mode = 0660,
                                   .routes = test_routes,
                                   .n_routes = ELEMENTSOF(test_routes),
                                   .secret = f->secret};
        assert_int_equal(http_server_new(f->event, &config, &s, &error), 0);
        assert_int_equal(stat(path, &st), 0);
        assert_int_equal(st.st_mode & 07777, 0660);
        HttpAddress a;
        assert_int_equal(http_server_get_tcp_address(s, &a), -ENOENT);
        http_server_free(s);
}

static void assert_server_refused(Fixture *f, const HttpServerConfig *config, int r,
                                  const char *message)
{
        _cleanup_free_ char *error = NULL;
        HttpServer *s = (HttpServer *)0x1;
        assert_int_equal(http_server_new(f->event, config, &s, &error), r);
        assert_string_equal(error, message);
        assert_ptr_equal(s, (HttpServer *)0x1);
}

static void test_listener_failures(void **state) /* API-1, GEN-10 */
{
        Fixture *f = *state;
        _cleanup_free_ char *busy = NULL, *msg = NULL, *file = NULL, *stale = NULL;
        _cleanup_free_ char *long_path = NULL;
        HttpServerConfig config = {.routes = test_routes,
                                   .n_routes = ELEMENTSOF(test_routes),
                                   .secret = f->secret,
                                   .unix_socket_mode = 0600};

        assert_server_refused(f, &config, -EINVAL, "no listener configured");
        config.listen = "";
        config.unix_socket = "";
        assert_server_refused(f, &config, -EINVAL, "no listener configured");

        /* The fixture's own port is taken. */
        assert_int_equal(strprintf(&busy, "127.0.0.1:%u", f->port), 0);
        config.listen = busy;
        assert_int_equal(strprintf(&msg, "listen %s: Address already in use", busy), 0);
        assert_server_refused(f, &config, -EADDRINUSE, msg);

        config.listen = "localhost:8080";
        assert_server_refused(f, &config, -EINVAL,
                              "listen localhost:8080: not an address:port literal");

        /* A live socket is not taken over; a regular file is not replaced. */
        config.listen = NULL;
        config.unix_socket = f->unix_path;
        free(msg);
        assert_int_equal(strprintf(&msg, "unix_socket %s: Address already in use", f->unix_path),
                         0);
        assert_server_refused(f, &config, -EADDRINUSE, msg);
        assert_int_equal(strprintf(&file, "%s/plain", f->dir), 0);
        _cleanup_close_ int plain = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        assert_true(plain >= 0);
        config.unix_socket = file;
        free(msg);
        assert_int_equal(strprintf(&msg, "unix_socket %s: File exists", file), 0);
        assert_server_refused(f, &config, -EEXIST, msg);
        config.unix_socket = "relative.sock";
        assert_server_refused(f, &config, -EINVAL, "unix_socket relative.sock: Invalid argument");
        assert_int_equal(strprintf(&long_path, "/tmp/%0200d.sock", 0), 0);
        config.unix_socket = long_path;
        free(msg);
        assert_int_equal(strprintf(&msg, "unix_socket %s: File name too long", long_path), 0);
        assert_server_refused(f, &config, -ENAMETOOLONG, msg);
        config.unix_socket = "/nonexistent-dir/x.sock";
        assert_server_refused(f, &config, -ENOENT,
                              "unix_socket /nonexistent-dir/x.sock: No such file or directory");

        /* A stale socket (nobody listening) is replaced. */
        assert_int_equal(strprintf(&stale, "%s/stale.sock", f->dir), 0);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        struct sockaddr_un sun = {.sun_family = AF_UNIX};
        strcpy(sun.sun_path, stale);
        assert_int_equal(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
        close(fd);
        config.unix_socket = stale;
        HttpServer *s = NULL;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(http_server_new(f->event, &config, &s, &error), 0);
        http_server_free(s);

        /* A bad route table stops the server before it binds anything. */
        const HttpRoute bad_routes[] = {{"GET", "/a/{id}", no_handler},
                                        {"GET", "/a/{name}", no_handler}};
        config.routes = bad_routes;
        config.n_routes = 2;
        assert_server_refused(f, &config, -EINVAL,
                              "route GET /a/{name}: overlaps with GET /a/{id}");
}

/* ---- the server: routing and errors -------------------------------------------------------- */

static void test_not_found(void **state) /* API-3, API-11 */
{
        Fixture *f = *state;
        Response r;

        exchange_auth(f, false, "GET", "/nope", NULL, NULL, &r);
        assert_error(&r, 404, ERROR_BODY("not_found", "no route for /nope"));
        response_done(&r);
        /* A trailing slash is not stripped; unknown paths need no token. */
        exchange(f, false, "GET", "/ping/", NULL, NULL, &r);
        assert_error(&r, 404, ERROR_BODY("not_found", "no route for /ping/"));
        response_done(&r);
        exchange(f, false, "GET", "/items/", NULL, NULL, &r);
        assert_error(&r, 404, ERROR_BODY("not_found", "no route for /items/"));
        response_done(&r);
        exchange(f, true, "GET", "/", NULL, NULL, &r);
        assert_error(&r, 404, ERROR_BODY("not_found", "no route for /"));
        response_done(&r);
}

static void test_method_not_allowed(void **state) /* API-3, API-11 */
{
        Fixture *f = *state;
        Response r;

        exchange_auth(f, false, "POST", "/items/7", NULL, NULL, &r);
        assert_error(&r, 405,
                     ERROR_BODY("method_not_allowed",
                                "method POST not allowed on /items/7 (allowed: DELETE, GET)"));
        assert_header(&r, "Allow", "DELETE, GET");
        response_done(&r);
        exchange(f, false, "PUT", "/ping", NULL, NULL, &r);
        assert_error(
            &r, 405,
            ERROR_BODY("method_not_allowed", "method PUT not allowed on /ping (allowed: GET)"));
        assert_header(&r, "Allow", "GET");
        response_done(&r);
        exchange(f, false, "HEAD", "/public", NULL, NULL, &r);
        assert_int_equal(r.status, 405);
        assert_header(&r, "Allow", "GET");
        response_done(&r);

        exchange_auth(f, false, "DELETE", "/items/7", NULL, NULL, &r);
        assert_response(&r, 200, "{\"method\":\"DELETE\",\"id\":\"7\",\"path\":\"/items/7\"}");
        response_done(&r);
}

static void test_params_and_query(void **state) /* API-3 */
{
        Fixture *f = *state;
        Response r;

        exchange_auth(f, false, "GET", "/items/a%2Cb/parts/%C3%A9", NULL, NULL, &r);
        assert_response(&r, 200,
                        "{\"method\":\"GET\",\"id\":\"a,b\",\"part\":\"\xc3\xa9\",\"path\":"
                        "\"/items/a%2Cb/parts/%C3%A9\"}");
        response_done(&r);

        exchange_auth(f, false, "GET", "/search?q=a%20b&limit=5", NULL, NULL, &r);
        assert_response(&r, 200, "{\"q\":\"a b\",\"limit\":\"5\"}");
        response_done(&r);
        exchange_auth(f, false, "GET", "/search", NULL, NULL, &r);
        assert_response(&r, 200, "{}");
        response_done(&r);
        exchange_auth(f, false, "GET", "/search?", NULL, NULL, &r);
        assert_response(&r, 200, "{}");
        response_done(&r);

        exchange_auth(f, false, "GET", "/search?q=1&sort=x", NULL, NULL, &r);
        assert_error(&r, 400,
                     ERROR_BODY("invalid_request", "unknown query parameter \\\"sort\\\""));
        response_done(&r);
        /* A route that declares no query parameters takes none. */
        exchange_auth(f, false, "GET", "/ping?verbose", NULL, NULL, &r);
        assert_error(&r, 400,
                     ERROR_BODY("invalid_request", "unknown query parameter \\\"verbose\\\""));
        response_done(&r);
        exchange_auth(f, false, "GET", "/search?q=1&q=2", NULL, NULL, &r);
        assert_error(&r, 400,
                     ERROR_BODY("invalid_request", "query parameter \\\"q\\\" given twice"));
        response_done(&r);
        exchange_auth(f, false, "GET", "/search?q=%zz", NULL, NULL, &r);
        assert_error(&r, 400, ERROR_BODY("invalid_request", "invalid query string"));
        response_done(&r);
}

static void test_traversal(void **state) /* REL-7 */
{
        Fixture *f = *state;
        Response r;

        static const struct {
                const char *target, *body;
        } cases[] = {
            {"/items/..", ERROR_BODY("invalid_request", "path segment \\\"..\\\" not allowed")},
            {"/items/%2e%2e", ERROR_BODY("invalid_request", "path segment \\\"..\\\" not allowed")},
            {"/items/%2E%2e/parts/x",
             ERROR_BODY("invalid_request", "path segment \\\"..\\\" not allowed")},
            {"/items/..%2f..%2fetc",
             ERROR_BODY("invalid_request", "encoded \\\"/\\\" in path segment")},
            {"/items/%2fetc", ERROR_BODY("invalid_request", "encoded \\\"/\\\" in path segment")},
            {"/items/a%00", ERROR_BODY("invalid_request", "invalid character or escape in path")},
            {"/items/./x", ERROR_BODY("invalid_request", "path segment \\\".\\\" not allowed")},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                exchange_auth(f, false, "GET", cases[i].target, NULL, NULL, &r);
                assert_error(&r, 400, cases[i].body);
                response_done(&r);
        }
}

static void test_handler_failures(void **state) /* API-11 */
{
        Fixture *f = *state;
        Response r;

        exchange_auth(f, false, "GET", "/fail", NULL, NULL, &r);
        assert_error(&r, 500, ERROR_BODY("internal", "internal error: Input/output error"));
        response_done(&r);
        exchange_auth(f, false, "GET", "/silent", NULL, NULL, &r);
        assert_error(&r, 500, ERROR_BODY("internal", "internal error: Input/output error"));
        response_done(&r);
        assert_non_null(strstr(fixture_log(f), "<3>http handler for GET /silent neither answered "
                                               "nor suspended\n"));

        /* One answer per request; an empty 204 needs no content type. */
        exchange_auth(f, false, "GET", "/twice", NULL, NULL, &r);
        assert_int_equal(r.status, 204);
        assert_int_equal(r.body_size, 0);
        assert_header(&r, "Content-Type", NULL);
        response_done(&r);
        assert_int_equal(f->second_reply_result, -EALREADY);
}

/* ---- the server: authentication ----------------------------------------------------------------
 */

static void assert_unauthorized(Fixture *f, const char *extra_headers)
{
        Response r;
        exchange(f, false, "GET", "/ping", extra_headers, NULL, &r);
        assert_error(&r, 401, UNAUTHORIZED_BODY);
        assert_header(&r, "WWW-Authenticate", "Bearer");
        response_done(&r);
}

static void test_auth(void **state) /* API-12, API-13, REL-7 */
{
        Fixture *f = *state;
        _cleanup_free_ char *h = NULL;
        char payload[64];

        assert_unauthorized(f, NULL); /* missing */
        assert_unauthorized(f, "Authorization: Bearer not-a-token\r\n");
        assert_unauthorized(f, "Authorization: Basic YWxpY2U6c2VjcmV0\r\n");

        _cleanup_free_ char *wrong = jwt_forge_libjwt(
            JWT_ALG_HS256, "another key of at least 32 bytes!!", "{\"exp\":1900000100}");
        _cleanup_free_ char *none = jwt_forge_libjwt(JWT_ALG_NONE, NULL, "{\"exp\":1900000100}");
        _cleanup_free_ char *hs512 =
            jwt_forge_libjwt(JWT_ALG_HS512, TEST_KEY, "{\"exp\":1900000100}");
        snprintf(payload, sizeof payload, "{\"exp\":%" PRId64 "}", TEST_NOW - 1);
        _cleanup_free_ char *expired = jwt_forge_libjwt(JWT_ALG_HS256, TEST_KEY, payload);
        _cleanup_free_ char *no_exp = jwt_forge_libjwt(JWT_ALG_HS256, TEST_KEY, "{\"sub\":\"x\"}");
        _cleanup_free_ char *nbf =
            jwt_forge_libjwt(JWT_ALG_HS256, TEST_KEY, "{\"exp\":1900000100,\"nbf\":1900000050}");
        /* Issue 10: an absurd exp is refused like an expired one. */
        _cleanup_free_ char *exp_huge =
            jwt_forge_str(TEST_KEY, strlen(TEST_KEY), "{\"alg\":\"HS256\"}", "{\"exp\":1e300}");
        const char *tokens[] = {wrong, none, hs512, expired, no_exp, nbf, exp_huge};
        for (size_t i = 0; i < ELEMENTSOF(tokens); i++) {
                assert_non_null(tokens[i]);
                free(h);
                assert_int_equal(strprintf(&h, "Authorization: Bearer %s\r\n", tokens[i]), 0);
                assert_unauthorized(f, h);
        }

        /* Two Authorization headers, even two good ones. */
        free(h);
        assert_int_equal(strprintf(&h, "Authorization: Bearer %s\r\nAuthorization: Bearer %s\r\n",
                                   f->token, f->token),
                         0);
        assert_unauthorized(f, h);

        /* A valid token in a header over 4096 bytes: refused for its size (API-12). */
        char grants[4200];
        snprintf(grants, sizeof grants, "{\"exp\":1900000100,\"pad\":\"%04000d\"}", 0);
        _cleanup_free_ char *big = jwt_forge_libjwt(JWT_ALG_HS256, TEST_KEY, grants);
        assert_true(strlen(big) > 4096);
        free(h);
        assert_int_equal(strprintf(&h, "Authorization: Bearer %s\r\n", big), 0);
        assert_unauthorized(f, h);

        /* The cause goes to the debug log, the token never does. */
        const char *log = fixture_log(f);
        assert_non_null(strstr(log, "<7>http request refused path=/ping peer=127.0.0.1:"));
        assert_non_null(strstr(log, "cause=\"no Authorization header\"\n"));
        assert_non_null(strstr(log, "cause=\"token signature does not match\"\n"));
        assert_non_null(strstr(log, "cause=\"token algorithm is not HS256\"\n"));
        assert_non_null(strstr(log, "cause=\"token expired\"\n"));
        assert_non_null(strstr(log, "cause=\"token has no numeric exp\"\n"));
        assert_non_null(strstr(log, "cause=\"token not valid yet (nbf)\"\n"));
        assert_non_null(strstr(log, "cause=\"more than one Authorization header\"\n"));
        assert_non_null(strstr(log, "cause=\"Authorization header longer than 4096 bytes\"\n"));
        for (size_t i = 0; i < ELEMENTSOF(tokens); i++)
                assert_null(strstr(log, strchr(tokens[i], '.') + 1));
        assert_null(strstr(log, strrchr(f->token, '.') + 1));

        /* Public routes take no token, and ignore a bad one. */
        Response r;
        exchange(f, false, "GET", "/public", NULL, NULL, &r);
        assert_response(&r, 200, "hello");
        assert_header(&r, "Content-Type", "text/plain");
        response_done(&r);
        exchange(f, false, "GET", "/public", "Authorization: Bearer x\r\n", NULL, &r);
        assert_response(&r, 200, "hello");
        response_done(&r);

        /* http_reply_with_headers(): the extra headers go out with the answer (the web UI's). */
        exchange(f, false, "GET", "/headers", NULL, NULL, &r);
        assert_response(&r, 200, "hi");
        assert_header(&r, "Content-Type", "text/plain");
        assert_header(&r, "X-One", "1");
        assert_header(&r, "Cache-Control", "no-cache");
        assert_header(&r, "X-Two", NULL);
        response_done(&r);

        /* Time moves on: the fixture token dies at its exp. */
        f->now.sec += 3600;
        f->now.nsec = 0;
        assert_unauthorized(f, NULL);
        free(h);
        assert_int_equal(strprintf(&h, "Authorization: Bearer %s\r\n", f->token), 0);
        assert_unauthorized(f, h);
        assert_non_null(strstr(fixture_log(f), "cause=\"token expired\"\n"));
}

static void test_no_secret(void **state) /* API-12 */
{
        Fixture *f = *state;
        Response r;

        /* A server without a secret refuses every token: failing closed. */
        f->server = http_server_free(f->server);
        f->secret = jwt_secret_free(f->secret);
        assert_int_equal(server_start(f, 0), 0);
        exchange_auth(f, false, "GET", "/ping", NULL, NULL, &r);
        assert_error(&r, 401, UNAUTHORIZED_BODY);
        response_done(&r);
        assert_non_null(strstr(fixture_log(f), "cause=\"no jwt secret configured\"\n"));
}

/* ---- the server: bodies -------------------------------------------------------------------- */

static void test_json_bodies(void **state) /* API-11, GEN-6, REL-7 */
{
        Fixture *f = *state;
        Response r;
        const char *json = "Content-Type: application/json\r\n";

        exchange_auth(f, false, "POST", "/items", json, "{\"name\":\"a\",\"n\":[1,{\"b\":null}]}",
                      &r);
        assert_response(&r, 201, "{\"name\":\"a\",\"n\":[1,{\"b\":null}]}");
        response_done(&r);
        exchange_auth(f, false, "POST", "/items",
                      "Content-Type: Application/JSON; charset=utf-8\r\n", "{}", &r);
        assert_response(&r, 201, "{}");
        response_done(&r);

        static const struct {
                const char *body, *message;
        } bad[] = {
            {"{\"a\":", "invalid JSON body: unexpected token near end of file (line 1, "
                        "column 5)"},
            {"{\"a\":1,\"a\":2}", "invalid JSON body: duplicate object key near '\\\"a\\\"' "
                                  "(line 1, column 10)"},
            {"[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]",
             "invalid JSON body: nested deeper than 16 levels"},
            {"[]", "invalid JSON body: expected an object"},
            {"nul", "invalid JSON body: '[' or '{' expected near 'nul' (line 1, column 3)"},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *expected = NULL;
                assert_int_equal(
                    strprintf(&expected, ERROR_BODY("invalid_request", "%s"), bad[i].message), 0);
                exchange_auth(f, false, "POST", "/items", json, bad[i].body, &r);
                assert_error(&r, 400, expected);
                response_done(&r);
        }

        /* No body at all. */
        exchange_auth(f, false, "POST", "/items", NULL, NULL, &r);
        assert_error(&r, 400,
                     ERROR_BODY("invalid_request", "invalid JSON body: the body is empty"));
        response_done(&r);
}

static void test_media_type(void **state) /* API-11 */
{
        Fixture *f = *state;
        Response r;
        const char *unsupported =
            ERROR_BODY("unsupported_media_type", "request body must be application/json");

        exchange_auth(f, false, "POST", "/items", "Content-Type: text/plain\r\n", "{}", &r);
        assert_error(&r, 415, unsupported);
        assert_true(r.closed);
        response_done(&r);
        exchange_auth(f, false, "POST", "/items", NULL, "{}", &r);
        assert_error(&r, 415, unsupported);
        response_done(&r);
        exchange_auth(f, false, "POST", "/items", "Content-Type: application/jsonx\r\n", "{}", &r);
        assert_error(&r, 415, unsupported);
        response_done(&r);
        exchange_auth(f, false, "POST", "/items", "Content-Type: application/json-patch+json\r\n",
                      "{}", &r);
        assert_error(&r, 415, unsupported);
        response_done(&r);
        /* An empty body has no type to check. */
        exchange_auth(f, false, "DELETE", "/items/7", "Content-Type: text/plain\r\n", "", &r);
        assert_int_equal(r.status, 200);
        response_done(&r);
}

/* Sends the headers of a 2 MiB body, and nothing else, then reads. */
static void test_oversize_declared(void **state) /* API-15, REL-7 */
{
        Fixture *f = *state;
        Response r;
        _cleanup_free_ char *request = NULL;

        assert_int_equal(strprintf(&request,
                                   "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                                   "Content-Type: application/json\r\nContent-Length: 2097152\r\n"
                                   "\r\n",
                                   f->token),
                         0);
        exchange_raw(f, false, request, strlen(request), &r);
        assert_error(&r, 413,
                     ERROR_BODY("payload_too_large", "request body larger than 1048576 bytes"));
        assert_header(&r, "Connection", "close");
        assert_true(r.closed);
        response_done(&r);

        /* One byte over the limit is over; the limit itself is not (sent in full). */
        free(request);
        assert_int_equal(strprintf(&request,
                                   "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                                   "Content-Type: application/json\r\nContent-Length: 1048577\r\n"
                                   "\r\n",
                                   f->token),
                         0);
        exchange_raw(f, false, request, strlen(request), &r);
        assert_int_equal(r.status, 413);
        response_done(&r);

        _cleanup_free_ char *body = malloc(HTTP_BODY_MAX);
        memset(body, ' ', HTTP_BODY_MAX);
        free(request);
        assert_int_equal(strprintf(&request,
                                   "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                                   "Content-Type: application/json\r\nContent-Length: %d\r\n"
                                   "Connection: close\r\n\r\n",
                                   f->token, HTTP_BODY_MAX),
                         0);
        Exchange x = {.f = f,
                      .request = request,
                      .request_size = strlen(request),
                      .body = body,
                      .body_size = HTTP_BODY_MAX};
        client_start(f, exchange_thread, &x);
        client_wait(f);
        assert_response(&x.response, 200, "{\"size\":1048576}");
        response_done(&x.response);
}

typedef struct ChunkedSend {
        Fixture *f;
        size_t total; /* body bytes to send in chunks */
        Response response;
        bool send_failed;
} ChunkedSend;

static void *chunked_thread(void *userdata)
{
        ChunkedSend *c = userdata;
        _cleanup_free_ char *head = NULL;
        char chunk[65536 + 16];
        int fd = client_connect(c->f, false);

        if (fd < 0 || strprintf(&head,
                                "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                                "Connection: close\r\n\r\n",
                                c->f->token) < 0) {
                c->send_failed = true;
        } else if (send_all(fd, head, strlen(head))) {
                size_t left = c->total;
                while (left > 0 && !c->send_failed) {
                        size_t n = left < 65536 ? left : 65536;
                        int k = snprintf(chunk, sizeof chunk, "%zx\r\n", n);
                        memset(chunk + k, ' ', n);
                        memcpy(chunk + k + n, "\r\n", 2);
                        c->send_failed = !send_all(fd, chunk, (size_t)k + n + 2);
                        left -= n;
                }
                if (!c->send_failed)
                        c->send_failed = !send_all(fd, "0\r\n\r\n", 5);
        } else
                c->send_failed = true;
        if (fd >= 0) {
                read_response(fd, &c->response, true);
                close(fd);
        }
        client_signal_done(c->f);
        return NULL;
}

static void test_oversize_chunked(void **state) /* API-15, REL-7 */
{
        Fixture *f = *state;

        /* Exactly the limit: accepted. */
        ChunkedSend c = {.f = f, .total = HTTP_BODY_MAX};
        client_start(f, chunked_thread, &c);
        client_wait(f);
        assert_false(c.send_failed);
        assert_response(&c.response, 200, "{\"size\":1048576}");
        response_done(&c.response);

        /* Past it: read to the end, then 413. */
        c = (ChunkedSend){.f = f, .total = 3 * HTTP_BODY_MAX + 1};
        client_start(f, chunked_thread, &c);
        client_wait(f);
        assert_false(c.send_failed);
        assert_error(&c.response, 413,
                     ERROR_BODY("payload_too_large", "request body larger than 1048576 bytes"));
        response_done(&c.response);

        /* More than 16 MiB discarded: the connection closes without an answer. */
        c = (ChunkedSend){.f = f, .total = HTTP_BODY_MAX + HTTP_DISCARD_MAX + 2 * 65536};
        client_start(f, chunked_thread, &c);
        client_wait(f);
        assert_int_equal(c.response.status, 0);
        assert_true(c.response.closed);
        response_done(&c.response);
        assert_non_null(strstr(fixture_log(f), "<7>http request body discarded past the limit, "
                                               "closing path=/echo peer=127.0.0.1:"));
        assert_non_null(strstr(fixture_log(f), "path=/echo status=none duration="));
}

/* ---- the server: message framing, bodies a route does not take, and limits ----------------------
 */

/* A raw request that must get 400 `invalid_request` with message and then a closed connection. */
static void assert_framing_refused(Fixture *f, const char *request, size_t size,
                                   const char *message)
{
        Response r;
        _cleanup_free_ char *expected = NULL;
        assert_int_equal(strprintf(&expected, ERROR_BODY("invalid_request", "%s"), message), 0);
        exchange_raw(f, false, request, size, &r);
        assert_error(&r, 400, expected);
        assert_header(&r, "Connection", "close");
        assert_true(r.closed);
        response_done(&r);
}

static void test_framing(void **state) /* API-11, API-15, REL-7 (RFC 9112 6.1, 6.3) */
{
        Fixture *f = *state;
        _cleanup_free_ char *two_lengths = NULL, *length_and_chunked = NULL, *gzip = NULL,
                            *chunked_gzip = NULL, *two_encodings = NULL;
        const char *head = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n";

        /* The idle timeout bounds the wait of a server that reads on (1 s instead of 10). */
        f->server = http_server_free(f->server);
        assert_int_equal(server_start(f, 1), 0);

        /* A second Content-Length would let the "body" be served as a request of its own. */
        assert_int_equal(strprintf(&two_lengths,
                                   "%sAuthorization: Bearer %s\r\nContent-Length: 2\r\n"
                                   "Content-Length: 37\r\n\r\n{}GET /public HTTP/1.1\r\nHost: "
                                   "x\r\n\r\n",
                                   head, f->token),
                         0);
        assert_framing_refused(f, two_lengths, strlen(two_lengths),
                               "more than one Content-Length header");
        assert_int_equal(strprintf(&length_and_chunked,
                                   "%sAuthorization: Bearer %s\r\nContent-Length: 5\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                                   head, f->token),
                         0);
        assert_framing_refused(f, length_and_chunked, strlen(length_and_chunked),
                               "Content-Length together with Transfer-Encoding");
        /* Only chunked is understood, once. */
        assert_int_equal(strprintf(&gzip,
                                   "%sAuthorization: Bearer %s\r\nTransfer-Encoding: gzip\r\n\r\n",
                                   head, f->token),
                         0);
        assert_framing_refused(f, gzip, strlen(gzip), "unsupported Transfer-Encoding");
        assert_int_equal(strprintf(&chunked_gzip,
                                   "%sAuthorization: Bearer %s\r\nTransfer-Encoding: gzip, "
                                   "chunked\r\n\r\n0\r\n\r\n",
                                   head, f->token),
                         0);
        assert_framing_refused(f, chunked_gzip, strlen(chunked_gzip),
                               "unsupported Transfer-Encoding");
        assert_int_equal(strprintf(&two_encodings,
                                   "%sAuthorization: Bearer %s\r\nTransfer-Encoding: chunked\r\n"
                                   "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
                                   head, f->token),
                         0);
        assert_framing_refused(f, two_encodings, strlen(two_encodings),
                               "more than one Transfer-Encoding header");
        /* Framing is checked before routing and authentication. */
        const char *no_route = "GET /nope HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n";
        assert_framing_refused(f, no_route, strlen(no_route), "unsupported Transfer-Encoding");

        /* A NUL in the request line ends nothing: "/public\0x" is not "/public". */
        static const char nul_target[] = "GET /public\0x HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_framing_refused(f, nul_target, sizeof nul_target - 1, "NUL byte in request line");
        static const char nul_method[] = "GET\0X /public HTTP/1.1\r\nHost: x\r\n\r\n";
        assert_framing_refused(f, nul_method, sizeof nul_method - 1, "NUL byte in request line");

        /* The refusals count like any answer (API-20), and one chunked body still works. */
        assert_int_equal(http_server_get_response_count(f->server, 400), 8);
        ChunkedSend c = {.f = f, .total = 10};
        client_start(f, chunked_thread, &c);
        client_wait(f);
        assert_response(&c.response, 200, "{\"size\":10}");
        response_done(&c.response);
}

/* Sends request (headers only: the declared body never comes) and reads with a 3 s limit. */
static void exchange_head_only(Fixture *f, bool unix_socket, const char *request, Response *ret,
                               double *ret_seconds)
{
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        exchange_raw(f, unix_socket, request, strlen(request), ret);
        clock_gettime(CLOCK_MONOTONIC, &end);
        *ret_seconds =
            (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
}

static void test_body_refused(void **state) /* API-15, REL-7 */
{
        Fixture *f = *state;
        Response r;
        double seconds;
        _cleanup_free_ char *get_auth = NULL;

        /* Answered from the headers: a server that waited for the body would idle out at 5 s. */
        f->server = http_server_free(f->server);
        assert_int_equal(server_start(f, 5), 0);

        /* A route that takes no body refuses one before reading it, whatever it declares. */
        const char *requests[] = {
            "GET /public HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n",
            "GET /public HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n",
            "GET /public HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
            ("GET /release HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: 100\r\n\r\n"),
        };
        for (size_t i = 0; i < ELEMENTSOF(requests); i++)
                for (int unix_socket = 0; unix_socket <= 1; unix_socket++) {
                        exchange_head_only(f, unix_socket, requests[i], &r, &seconds);
                        assert_error(
                            &r, 413,
                            ERROR_BODY("payload_too_large", "this route takes no request body"));
                        assert_header(&r, "Connection", "close");
                        assert_true(r.closed);
                        assert_true(seconds < 2);
                        response_done(&r);
                }
        assert_int_equal(strprintf(&get_auth,
                                   "GET /ping HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                                   "Content-Length: 4096\r\n\r\n",
                                   f->token),
                         0);
        exchange_head_only(f, false, get_auth, &r, &seconds);
        assert_error(&r, 413, ERROR_BODY("payload_too_large", "this route takes no request body"));
        assert_true(r.closed && seconds < 2);
        response_done(&r);

        /* A body on an authenticated route is not read before the token is checked. */
        const char *post_no_token = "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                    "application/json\r\nContent-Length: 65536\r\n\r\n";
        exchange_head_only(f, false, post_no_token, &r, &seconds);
        assert_error(&r, 401, UNAUTHORIZED_BODY);
        assert_true(r.closed && seconds < 2);
        response_done(&r);

        /* An empty body is no body; a route that takes one still does. */
        exchange(f, false, "GET", "/public", "Content-Length: 0\r\n", NULL, &r);
        assert_response(&r, 200, "hello");
        response_done(&r);
        exchange_auth(f, false, "POST", "/echo", "Content-Type: application/json\r\n", "{}", &r);
        assert_response(&r, 200, "{\"size\":2}");
        response_done(&r);
}

/* A request with one header line of the given size (name and value). */
static char *request_with_header(size_t target_size, size_t header_size)
{
        _cleanup_free_ char *target = malloc(target_size + 1), *header = malloc(header_size + 1);
        char *request = NULL;
        if (!target || !header)
                return NULL;
        target[0] = '/';
        memset(target + 1, 'a', target_size - 1);
        target[target_size] = 0;
        memcpy(header, "X-Big: ", 7);
        memset(header + 7, 'b', header_size - 7);
        header[header_size] = 0;
        if (strprintf(&request, "GET %s HTTP/1.1\r\nHost: x\r\n%s\r\nConnection: close\r\n\r\n",
                      target, header) < 0)
                return NULL;
        return request;
}

static void test_own_limits(void **state) /* API-11, API-20 */
{
        Fixture *f = *state;
        Response r;

        /* Long targets and heads get API-11's JSON and count, where MHD would answer HTML. */
        _cleanup_free_ char *long_target = request_with_header(HTTP_TARGET_MAX + 1, 16);
        exchange_raw(f, false, long_target, strlen(long_target), &r);
        assert_error(&r, 414,
                     ERROR_BODY("invalid_request", "request target longer than 8192 "
                                                   "bytes"));
        response_done(&r);
        _cleanup_free_ char *huge_target = request_with_header(40000, 16);
        exchange_raw(f, false, huge_target, strlen(huge_target), &r);
        assert_error(&r, 414,
                     ERROR_BODY("invalid_request", "request target longer than 8192 "
                                                   "bytes"));
        response_done(&r);
        _cleanup_free_ char *big_head = request_with_header(8, HTTP_HEAD_MAX);
        exchange_raw(f, true, big_head, strlen(big_head), &r);
        assert_error(&r, 431,
                     ERROR_BODY("invalid_request", "request head larger than 16384 "
                                                   "bytes"));
        response_done(&r);
        _cleanup_free_ char *huge_head = request_with_header(8, 40000);
        exchange_raw(f, false, huge_head, strlen(huge_head), &r);
        assert_error(&r, 431,
                     ERROR_BODY("invalid_request", "request head larger than 16384 "
                                                   "bytes"));
        response_done(&r);
        /* Just within the limits: routed as usual. */
        _cleanup_free_ char *at_limit = request_with_header(HTTP_TARGET_MAX, 16);
        exchange_raw(f, false, at_limit, strlen(at_limit), &r);
        assert_int_equal(r.status, 404);
        response_done(&r);
        assert_int_equal(http_server_get_response_count(f->server, 414), 2);
        assert_int_equal(http_server_get_response_count(f->server, 431), 2);

        /* What MHD still answers itself (a missing Host, a malformed length) is counted. */
        const char *no_host = "GET /public HTTP/1.1\r\nConnection: close\r\n\r\n";
        exchange_raw(f, false, no_host, strlen(no_host), &r);
        assert_int_equal(r.status, 400);
        response_done(&r);
        const char *bad_length =
            "GET /public HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\nConnection: close\r\n\r\n";
        exchange_raw(f, false, bad_length, strlen(bad_length), &r);
        assert_int_equal(r.status, 400);
        response_done(&r);
        assert_int_equal(http_server_get_response_count(f->server, 400), 2);
        _cleanup_free_ char *too_big_for_mhd = request_with_header(8, 70000);
        exchange_raw(f, false, too_big_for_mhd, strlen(too_big_for_mhd), &r);
        assert_int_equal(r.status, 431);
        response_done(&r);
        assert_int_equal(http_server_get_response_count(f->server, 431), 3);
        /* MHD tells no method for these. */
        assert_non_null(strstr(fixture_log(f), "<7>http request method=- path=/public "
                                               "status=400 duration="));
}

/* ---- the server: suspension ---------------------------------------------------------------------
 */

typedef struct HoldExchange {
        Fixture *f;
        Response response;
} HoldExchange;

static void *hold_thread(void *userdata)
{
        HoldExchange *h = userdata;
        _cleanup_free_ char *request = NULL;
        int fd = client_connect(h->f, false);
        if (fd >= 0 &&
            strprintf(&request,
                      "GET /hold HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                      "Connection: close\r\n\r\n",
                      h->f->token) >= 0 &&
            send_all(fd, request, strlen(request)))
                read_response(fd, &h->response, true);
        if (fd >= 0)
                close(fd);
        client_signal_done(h->f);
        return NULL;
}

/* The daemon's shutdown: the loop has finished, then waiting requests get 503 and the server goes.
 */
static void test_answer_after_loop(void **state) /* OPS-3 */
{
        Fixture *f = *state;
        HoldExchange h = {.f = f};

        client_start(f, hold_thread, &h);
        loop_until(f, &f->pending_set);
        assert_int_equal(sd_event_exit(f->event, 0), 0);
        assert_int_equal(sd_event_loop(f->event), 0);
        assert_int_equal(sd_event_get_state(f->event), SD_EVENT_FINISHED);

        assert_int_equal(http_reply_error(f->pending, 503, "not_ready", "vgpud is shutting down"),
                         0);
        f->pending = http_request_unref(f->pending);
        f->server = http_server_free(f->server);
        assert_int_equal(pthread_join(f->client, NULL), 0);
        assert_error(&h.response, 503, ERROR_BODY("not_ready", "vgpud is shutting down"));
        response_done(&h.response);
        assert_null(strstr(fixture_log(f), "waking it failed"));
}

static void test_suspend_timer(void **state) /* GEN-2 */
{
        Fixture *f = *state;
        Response r;

        exchange_auth(f, false, "GET", "/slow", NULL, NULL, &r);
        assert_response(&r, 200, "{\"done\":true}");
        response_done(&r);
        assert_int_equal(f->complete_result, 0);
        assert_null(f->pending);
        assert_int_equal(http_server_get_response_count(f->server, 200), 1);
}

typedef struct HoldRelease {
        Fixture *f;
        Response held, release;
        unsigned release_attempts;
} HoldRelease;

/* Holds one request, and, while it waits, gets /release answered on another connection. */
static void *hold_release_thread(void *userdata)
{
        HoldRelease *h = userdata;
        _cleanup_free_ char *request = NULL;
        int held = client_connect(h->f, false);

        if (held >= 0 &&
            strprintf(&request,
                      "GET /hold HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                      "Connection: close\r\n\r\n",
                      h->f->token) >= 0 &&
            send_all(held, request, strlen(request))) {
                /* Until the held request has reached its handler, /release answers 409. */
                const char *release =
                    "GET /release HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
                for (h->release_attempts = 1; h->release_attempts <= 500; h->release_attempts++) {
                        int fd = client_connect(h->f, true);
                        if (fd < 0)
                                break;
                        response_done(&h->release);
                        if (send_all(fd, release, strlen(release)))
                                read_response(fd, &h->release, true);
                        close(fd);
                        if (h->release.status != 409)
                                break;
                        poll(NULL, 0, 10);
                }
                read_response(held, &h->held, true);
        }
        if (held >= 0)
                close(held);
        client_signal_done(h->f);
        return NULL;
}

static void test_suspend_release(void **state) /* GEN-2 */
{
        Fixture *f = *state;
        HoldRelease h = {.f = f};

        client_start(f, hold_release_thread, &h);
        client_wait(f);
        assert_response(&h.release, 200, "ok");
        assert_response(&h.held, 200, "released");
        assert_int_equal(f->complete_result, 0);
        /* Suspending is for a handler, about its own request. */
        assert_int_equal(f->suspend_elsewhere_result, -EINVAL);
        response_done(&h.release);
        response_done(&h.held);
}

static void *held_thread(void *userdata)
{
        Exchange *x = userdata;
        _cleanup_free_ char *request = NULL;
        int fd = client_connect(x->f, false);
        if (fd >= 0 &&
            strprintf(&request, "GET /hold HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
                      x->f->token) >= 0 &&
            send_all(fd, request, strlen(request)))
                read_response(fd, &x->response, true);
        if (fd >= 0)
                close(fd);
        client_signal_done(x->f);
        return NULL;
}

static void test_suspend_server_freed(void **state) /* GEN-2 */
{
        Fixture *f = *state;
        Exchange x = {.f = f};

        client_start(f, held_thread, &x);
        loop_until(f, &f->pending_set);
        /* The server goes while the request waits: its connection closes unanswered... */
        f->server = http_server_free(f->server);
        client_wait(f);
        assert_int_equal(x.response.status, 0);
        assert_true(x.response.closed);
        response_done(&x.response);
        /* ...and a late answer finds nobody to send it to. */
        assert_int_equal(http_reply(f->pending, 200, "text/plain", "late", 4), -ECONNABORTED);
        assert_int_equal(http_request_suspend(f->pending), -EINVAL);
        f->pending = http_request_unref(f->pending);
}

/* ---- streamed answers (CONS-2) ----------------------------------------------------------------
 */

/* A chunked body's data (RFC 9112 7.1), or NULL when it is not a complete one. */
static char *dechunk(const char *body)
{
        _cleanup_free_ char *out = calloc(1, strlen(body) + 1);
        size_t n = 0;
        for (const char *p = body;;) {
                char *end;
                unsigned long size = strtoul(p, &end, 16);
                if (end == p || strncmp(end, "\r\n", 2) != 0)
                        return NULL;
                p = end + 2;
                if (size == 0)
                        return strcmp(p, "\r\n") == 0 ? TAKE_PTR(out) : NULL;
                if (strlen(p) < size + 2 || strncmp(p + size, "\r\n", 2) != 0)
                        return NULL;
                memcpy(out + n, p, size);
                n += size;
                p += size + 2;
        }
}

/* CONS-2: the producer writes as the client takes it, within its bound, then ends the body */
static void test_stream(void **state)
{
        Fixture *f = *state;
        Response r;
        exchange(f, false, "GET", "/stream", NULL, NULL, &r);
        assert_int_equal(r.status, 200);
        assert_header(&r, "Transfer-Encoding", "chunked");
        assert_header(&r, "Content-Type", "text/plain");
        assert_header(&r, "Cache-Control", "no-store");
        _cleanup_free_ char *data = dechunk(r.body);
        assert_non_null(data);
        assert_string_equal(data, "one\ntwo\nthree\n");
        assert_int_equal(f->stream_overflow_result, -ENOBUFS);
        assert_true(f->stream_closed);
        /* Over: the producer's writes are refused, its room is none. */
        assert_int_equal(http_stream_room(f->stream), 0);
        assert_int_equal(http_stream_write(f->stream, "x", 1), -EPIPE);
        response_done(&r);
}

static void *stream_hangup_thread(void *userdata)
{
        Exchange *x = userdata;
        int fd = client_connect(x->f, true);
        char buf[4096];
        const char *request = "GET /stream-hold HTTP/1.1\r\nHost: x\r\n\r\n";
        /* The head arrives; then the client goes while the answer waits for data. */
        if (fd >= 0 && send_all(fd, request, strlen(request)))
                (void)recv(fd, buf, sizeof buf, 0);
        if (fd >= 0)
                close(fd);
        client_signal_done(x->f);
        return NULL;
}

/* CONS-2: a client that hangs up while its streamed answer waits suspended is seen at once */
static void test_stream_hangup(void **state)
{
        Fixture *f = *state;
        Exchange x = {.f = f};
        client_start(f, stream_hangup_thread, &x);
        client_wait(f);
        loop_until(f, &f->stream_closed);
        assert_int_equal(http_stream_write(f->stream, "late", 4), -EPIPE);
}

static void *idle_thread(void *userdata);

/* CONS-2: freeing the server closes a suspended streamed answer and tells its producer */
static void test_stream_server_freed(void **state)
{
        Fixture *f = *state;
        Exchange x = {.f = f};
        x.request = "GET /stream-hold HTTP/1.1\r\nHost: x\r\n\r\n";
        client_start(f, idle_thread, &x);
        TEST_WAIT_UNTIL_LIMIT(f->event, LOOP_DEADLINE_SEC * NSEC_PER_SEC, f->stream != NULL);
        f->server = http_server_free(f->server);
        assert_true(f->stream_closed);
        client_wait(f);
        assert_int_equal(x.response.status, 200);
        assert_true(x.response.closed);
        response_done(&x.response);
}

/* ---- the server: connections ---------------------------------------------------------------- */

static void *idle_thread(void *userdata)
{
        Exchange *x = userdata;
        int fd = client_connect(x->f, false);
        if (fd >= 0) {
                if (x->request)
                        (void)send_all(fd, x->request, strlen(x->request));
                read_response(fd, &x->response, true);
                close(fd);
        }
        client_signal_done(x->f);
        return NULL;
}

static void test_idle_timeout(void **state) /* API-1, API-15 */
{
        Fixture *f = *state;
        struct timespec start, end;

        f->server = http_server_free(f->server);
        assert_int_equal(server_start(f, 1), 0);

        /* Nothing sent, half the headers, half a body: each closes unanswered when idle. */
        _cleanup_free_ char *half_body = NULL;
        assert_int_equal(strprintf(&half_body,
                                   "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Type: "
                                   "application/json\r\nContent-Length: 10\r\n"
                                   "Authorization: Bearer %s\r\n\r\n{",
                                   f->token),
                         0);
        const char *requests[] = {NULL, "GET /ping HTTP/1.1\r\nHost: x\r\n", half_body};
        for (size_t i = 0; i < ELEMENTSOF(requests); i++) {
                Exchange x = {.f = f, .request = requests[i]};
                clock_gettime(CLOCK_MONOTONIC, &start);
                client_start(f, idle_thread, &x);
                client_wait(f);
                clock_gettime(CLOCK_MONOTONIC, &end);
                assert_int_equal(x.response.status, 0);
                assert_true(x.response.closed);
                double elapsed = (double)(end.tv_sec - start.tv_sec) +
                                 (double)(end.tv_nsec - start.tv_nsec) / 1e9;
                assert_true(elapsed >= 0.5 && elapsed < 5);
                response_done(&x.response);
        }
}

typedef struct LimitRun {
        Fixture *f;
        int fds[HTTP_CONNECTIONS_MAX];
        unsigned answered;   /* of the first 64, answered 200 on their kept-alive connection */
        bool extra_waited;   /* the 65th got nothing while the 64 were held */
        Response unix_reply; /* meanwhile, on the Unix socket */
        Response extra;      /* the 65th, once one of the 64 has gone */
        double extra_delay;  /* seconds from that close to the 65th's answer */
} LimitRun;

static void *limit_thread(void *userdata)
{
        LimitRun *l = userdata;
        const char *keep = "GET /public HTTP/1.1\r\nHost: x\r\n\r\n";
        const char *close_req = "GET /public HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

        for (int i = 0; i < HTTP_CONNECTIONS_MAX; i++) {
                Response r;
                l->fds[i] = client_connect(l->f, false);
                if (l->fds[i] < 0 || !send_all(l->fds[i], keep, strlen(keep)))
                        continue;
                read_response(l->fds[i], &r, false);
                l->answered += r.status == 200 && !r.closed;
                response_done(&r);
        }

        /*
         * At the limit MHD stops accepting: the 65th waits in the kernel's backlog, held by
         * nobody. Nothing may arrive on it meanwhile; 300 ms of silence stands for "never".
         */
        int extra = client_connect(l->f, false);
        if (extra >= 0 && send_all(extra, close_req, strlen(close_req))) {
                struct pollfd p = {.fd = extra, .events = POLLIN};
                l->extra_waited = poll(&p, 1, 300) == 0;
        }

        int fd = client_connect(l->f, true);
        if (fd >= 0) {
                if (send_all(fd, close_req, strlen(close_req)))
                        read_response(fd, &l->unix_reply, true);
                close(fd);
        }

        /* One of the 64 goes: the waiting one is taken in and answered. */
        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        close(l->fds[0]);
        l->fds[0] = -1;
        if (extra >= 0) {
                read_response(extra, &l->extra, true);
                close(extra);
        }
        clock_gettime(CLOCK_MONOTONIC, &end);
        l->extra_delay =
            (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;

        for (int i = 0; i < HTTP_CONNECTIONS_MAX; i++)
                if (l->fds[i] >= 0)
                        close(l->fds[i]);
        client_signal_done(l->f);
        return NULL;
}

static void test_connection_limit(void **state) /* API-1, REL-8 */
{
        Fixture *f = *state;
        LimitRun l = {.f = f};

        client_start(f, limit_thread, &l);
        client_wait(f);
        assert_int_equal(l.answered, HTTP_CONNECTIONS_MAX);
        assert_true(l.extra_waited);
        /* The other listener, with its own limit, serves on. */
        assert_response(&l.unix_reply, 200, "hello");
        assert_response(&l.extra, 200, "hello");
        /* Taken in as soon as the place is free, not at the next idle-timeout check (10 s). */
        assert_true(l.extra_delay < 5);
        response_done(&l.unix_reply);
        response_done(&l.extra);
}

typedef struct PartialRun {
        Fixture *f;
        bool unix_socket;
        unsigned held;   /* connections that got their answer and were kept open */
        unsigned queued; /* partial requests sent and closed while queued */
        Response fresh;  /* a request after those */
        double fresh_delay;
} PartialRun;

static void *partial_thread(void *userdata)
{
        PartialRun *p = userdata;
        const char *keep = "GET /public HTTP/1.1\r\nHost: x\r\n\r\n";
        const char *partial = "GET /public HTTP/1.1\r\nHo";
        const char *close_req = "GET /public HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        int fds[HTTP_CONNECTIONS_MAX];

        for (int i = 0; i < HTTP_CONNECTIONS_MAX; i++) {
                Response r;
                fds[i] = client_connect(p->f, p->unix_socket);
                if (fds[i] < 0 || !send_all(fds[i], keep, strlen(keep)))
                        continue;
                read_response(fds[i], &r, false);
                p->held += r.status == 200 && !r.closed;
                response_done(&r);
        }
        /* Queued behind the limit: each sends half a request and goes. */
        for (int i = 0; i < 2 * HTTP_CONNECTIONS_MAX; i++) {
                int fd = client_connect(p->f, p->unix_socket);
                if (fd < 0)
                        continue;
                p->queued += send_all(fd, partial, strlen(partial));
                close(fd);
        }
        for (int i = 0; i < HTTP_CONNECTIONS_MAX; i++)
                if (fds[i] >= 0)
                        close(fds[i]);

        struct timespec start, end;
        clock_gettime(CLOCK_MONOTONIC, &start);
        int fd = client_connect(p->f, p->unix_socket);
        if (fd >= 0) {
                if (send_all(fd, close_req, strlen(close_req)))
                        read_response(fd, &p->fresh, true);
                close(fd);
        }
        clock_gettime(CLOCK_MONOTONIC, &end);
        p->fresh_delay =
            (double)(end.tv_sec - start.tv_sec) + (double)(end.tv_nsec - start.tv_nsec) / 1e9;
        client_signal_done(p->f);
        return NULL;
}

/* A peer that closed a partial request while queued frees its place at once, not when idle. */
static void test_partial_and_close(void **state) /* REL-8 */
{
        Fixture *f = *state;

        f->server = http_server_free(f->server);
        assert_int_equal(server_start(f, 5), 0);
        for (int unix_socket = 0; unix_socket <= 1; unix_socket++) {
                PartialRun p = {.f = f, .unix_socket = unix_socket};
                client_start(f, partial_thread, &p);
                client_wait(f);
                assert_int_equal(p.held, HTTP_CONNECTIONS_MAX);
                assert_int_equal(p.queued, 2 * HTTP_CONNECTIONS_MAX);
                assert_response(&p.fresh, 200, "hello");
                /* With the idle timeout (5 s) holding them, two waves would take 10 s. */
                assert_true(p.fresh_delay < 2);
                response_done(&p.fresh);
        }
}

typedef struct KeepAlive {
        Fixture *f;
        Response first, second, third;
} KeepAlive;

static void *keep_alive_thread(void *userdata)
{
        KeepAlive *k = userdata;
        _cleanup_free_ char *a = NULL, *b = NULL;
        int fd = client_connect(k->f, false);

        if (fd >= 0 &&
            strprintf(&a,
                      "POST /items HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
                      "Content-Type: application/json\r\nContent-Length: 8\r\n\r\n{\"a\":1}\n",
                      k->f->token) >= 0 &&
            strprintf(&b, "GET /search?q=z HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n",
                      k->f->token) >= 0 &&
            send_all(fd, a, strlen(a))) {
                read_response(fd, &k->first, false);
                if (send_all(fd, b, strlen(b)))
                        read_response(fd, &k->second, false);
                const char *c = "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
                if (send_all(fd, c, strlen(c)))
                        read_response(fd, &k->third, true);
        }
        if (fd >= 0)
                close(fd);
        client_signal_done(k->f);
        return NULL;
}

static void test_keep_alive(void **state) /* API-1 */
{
        Fixture *f = *state;
        KeepAlive k = {.f = f};

        /* Each request on one connection starts from a clean slate. */
        client_start(f, keep_alive_thread, &k);
        client_wait(f);
        assert_response(&k.first, 201, "{\"a\":1}");
        assert_false(k.first.closed);
        assert_response(&k.second, 200, "{\"q\":\"z\"}");
        assert_error(&k.third, 404, ERROR_BODY("not_found", "no route for /nope"));
        assert_true(k.third.closed);
        response_done(&k.first);
        response_done(&k.second);
        response_done(&k.third);
}

/* ---- counting and logging -----------------------------------------------------------------------
 */

static void test_metrics_and_log(void **state) /* API-20, MET-1, MET-3 */
{
        Fixture *f = *state;
        _cleanup_metrics_writer_ MetricsWriter *w = NULL;
        _cleanup_free_ char *text = NULL;
        Response r;

        /* From start-up, every status the API answers has a series at 0. */
        assert_int_equal(metrics_writer_new(&w), 0);
        assert_int_equal(http_server_write_metrics(f->server, w), 0);
        assert_int_equal(metrics_writer_finish(w, &text, NULL), 0);
        assert_string_equal(text,
                            "# HELP vgpud_http_requests_total HTTP responses by status code.\n"
                            "# TYPE vgpud_http_requests_total counter\n"
                            "vgpud_http_requests_total{code=\"200\"} 0\n"
                            "vgpud_http_requests_total{code=\"201\"} 0\n"
                            "vgpud_http_requests_total{code=\"204\"} 0\n"
                            "vgpud_http_requests_total{code=\"400\"} 0\n"
                            "vgpud_http_requests_total{code=\"401\"} 0\n"
                            "vgpud_http_requests_total{code=\"404\"} 0\n"
                            "vgpud_http_requests_total{code=\"405\"} 0\n"
                            "vgpud_http_requests_total{code=\"409\"} 0\n"
                            "vgpud_http_requests_total{code=\"413\"} 0\n"
                            "vgpud_http_requests_total{code=\"415\"} 0\n"
                            "vgpud_http_requests_total{code=\"500\"} 0\n"
                            "vgpud_http_requests_total{code=\"501\"} 0\n"
                            "vgpud_http_requests_total{code=\"503\"} 0\n");

        exchange_auth(f, false, "GET", "/ping", NULL, NULL, &r);
        response_done(&r);
        exchange_auth(f, true, "GET", "/ping", NULL, NULL, &r);
        response_done(&r);
        exchange(f, false, "GET", "/ping", NULL, NULL, &r);
        response_done(&r);
        exchange(f, false, "GET", "/nope", NULL, NULL, &r);
        response_done(&r);
        /* A status outside the expected set gets a series once used. */
        exchange(f, false, "GET", "/release", NULL, NULL, &r);
        response_done(&r);

        assert_int_equal(http_server_get_response_count(f->server, 200), 2);
        assert_int_equal(http_server_get_response_count(f->server, 401), 1);
        assert_int_equal(http_server_get_response_count(f->server, 404), 1);
        assert_int_equal(http_server_get_response_count(f->server, 409), 1);
        assert_int_equal(http_server_get_response_count(f->server, 1000), 0);

        free(text);
        assert_int_equal(http_server_write_metrics(f->server, w), 0);
        assert_int_equal(metrics_writer_finish(w, &text, NULL), 0);
        assert_non_null(strstr(text, "vgpud_http_requests_total{code=\"200\"} 2\n"
                                     "vgpud_http_requests_total{code=\"201\"} 0\n"));
        assert_non_null(strstr(text, "vgpud_http_requests_total{code=\"401\"} 1\n"
                                     "vgpud_http_requests_total{code=\"404\"} 1\n"
                                     "vgpud_http_requests_total{code=\"405\"} 0\n"
                                     "vgpud_http_requests_total{code=\"409\"} 1\n"));

        /* One debug line per request: method, path, status, duration. */
        const char *log = fixture_log(f);
        assert_non_null(strstr(log, "<7>http request method=GET path=/ping status=200 duration="));
        assert_non_null(strstr(log, "<7>http request method=GET path=/ping status=401 duration="));
        assert_non_null(strstr(log, "<7>http request method=GET path=/nope status=404 duration="));
        assert_non_null(strstr(log, " peer=\"unix:pid="));
        assert_null(strstr(log, strrchr(f->token, '.') + 1));

        /* The log is only written at debug level. */
        size_t before = strlen(test_log_text(&f->log));
        log_set_max_level(LOG_LEVEL_INFO);
        exchange_auth(f, false, "GET", "/ping", NULL, NULL, &r);
        response_done(&r);
        assert_int_equal(strlen(test_log_text(&f->log)), before);
}

static void test_query_in_log(void **state) /* API-20 */
{
        Fixture *f = *state;
        Response r;

        /* The logged path is the path alone: a query never reaches the log. */
        exchange_auth(f, false, "GET", "/search?q=secret-looking", NULL, NULL, &r);
        response_done(&r);
        const char *log = fixture_log(f);
        assert_non_null(strstr(log, "<7>http request method=GET path=/search status=200"));
        assert_null(strstr(log, "secret-looking"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_address_parse),
            cmocka_unit_test(test_target_parse),
            cmocka_unit_test(test_routes_validate),
            cmocka_unit_test(test_route_find),
            cmocka_unit_test(test_json_body),
            cmocka_unit_test_setup_teardown(test_auth_header, setup, teardown),
            cmocka_unit_test_setup_teardown(test_listeners, setup, teardown),
            cmocka_unit_test_setup_teardown(test_unix_socket_mode, setup, teardown),
            cmocka_unit_test_setup_teardown(test_listener_failures, setup, teardown),
            cmocka_unit_test_setup_teardown(test_not_found, setup, teardown),
            cmocka_unit_test_setup_teardown(test_method_not_allowed, setup, teardown),
            cmocka_unit_test_setup_teardown(test_params_and_query, setup, teardown),
            cmocka_unit_test_setup_teardown(test_traversal, setup, teardown),
            cmocka_unit_test_setup_teardown(test_handler_failures, setup, teardown),
            cmocka_unit_test_setup_teardown(test_auth, setup, teardown),
            cmocka_unit_test_setup_teardown(test_no_secret, setup, teardown),
            cmocka_unit_test_setup_teardown(test_json_bodies, setup, teardown),
            cmocka_unit_test_setup_teardown(test_media_type, setup, teardown),
            cmocka_unit_test_setup_teardown(test_oversize_declared, setup, teardown),
            cmocka_unit_test_setup_teardown(test_oversize_chunked, setup, teardown),
            cmocka_unit_test_setup_teardown(test_framing, setup, teardown),
            cmocka_unit_test_setup_teardown(test_body_refused, setup, teardown),
            cmocka_unit_test_setup_teardown(test_own_limits, setup, teardown),
            cmocka_unit_test_setup_teardown(test_suspend_timer, setup, teardown),
            cmocka_unit_test_setup_teardown(test_suspend_release, setup, teardown),
            cmocka_unit_test_setup_teardown(test_suspend_server_freed, setup, teardown),
            cmocka_unit_test_setup_teardown(test_answer_after_loop, setup, teardown),
            cmocka_unit_test_setup_teardown(test_idle_timeout, setup, teardown),
            cmocka_unit_test_setup_teardown(test_connection_limit, setup, teardown),
            cmocka_unit_test_setup_teardown(test_partial_and_close, setup, teardown),
            cmocka_unit_test_setup_teardown(test_keep_alive, setup, teardown),
            cmocka_unit_test_setup_teardown(test_stop_listening, setup, teardown),
            cmocka_unit_test_setup_teardown(test_metrics_and_log, setup, teardown),
            cmocka_unit_test_setup_teardown(test_query_in_log, setup, teardown),
            cmocka_unit_test_setup_teardown(test_stream, setup, teardown),
            cmocka_unit_test_setup_teardown(test_stream_hangup, setup, teardown),
            cmocka_unit_test_setup_teardown(test_stream_server_freed, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
