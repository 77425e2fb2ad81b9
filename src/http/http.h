/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * http: the REST API's transport (SPEC API-1, API-3, API-11, API-12, API-13, API-14, API-15,
 * API-20).
 *
 * An HttpServer serves a table of routes over a TCP listener and/or a Unix socket. It runs on
 * the caller's sd-event loop: libmicrohttpd in external epoll mode, one daemon per listener,
 * no threads. Handlers therefore run on the loop thread and may touch the loop's state.
 *
 * Promises:
 *  - each listener holds at most HTTP_CONNECTIONS_MAX connections and closes one that is idle
 *    for the idle timeout (API-1), and one whose peer has closed as soon as everything it sent
 *    has been read, even when it sent and closed while still queued (REL-8);
 *  - a request whose framing is ambiguous (RFC 9112 6.1, 6.3) gets 400 `invalid_request` and
 *    its connection closed, before routing: two Content-Length or two Transfer-Encoding
 *    headers, Content-Length with Transfer-Encoding, a Transfer-Encoding other than chunked, a
 *    NUL byte in the method or target; so does, with 414 or 431 and code `invalid_request`, a
 *    target longer than HTTP_TARGET_MAX or a head larger than HTTP_HEAD_MAX;
 *  - before a handler runs, the request has passed, in this order: routing (404 `not_found`,
 *    405 `method_not_allowed` with Allow; a trailing slash is part of the path), the bearer
 *    token unless the route is public (401 `unauthorized`, always with the message
 *    HTTP_UNAUTHORIZED_MESSAGE; the cause is logged at debug level, never the token), a body
 *    on a route that takes none (any but POST, PUT, PATCH: 413, unread, connection closed), the
 *    declared body size (413 before the body is read, then the connection is closed), the
 *    body's media type (415), the query parameters the route declares (400), and the body size
 *    as it arrived (413; more than HTTP_DISCARD_MAX discarded closes the connection unanswered);
 *  - request bodies are buffered up to HTTP_BODY_MAX bytes, never more;
 *  - every error body is {"code":"<code>","message":"<text>"} as application/json; JSON is
 *    written compact, without a trailing newline;
 *  - every response counts in vgpud_http_requests_total{code} and ends with one debug log
 *    line carrying method, path, status and duration (API-20).
 *
 * What libmicrohttpd 0.9.75 still answers itself, with its own HTML body: a request line or
 * head that does not fit its 64 KiB per connection (414, 431), a malformed Content-Length or
 * chunk, a header line without a colon, a missing Host (400), an unknown HTTP version (505).
 * Those that come after the request line (the 400s, 431) are counted and logged (method "-");
 * a 414 for a line that never fitted and a 505 reach no hook of the library, and are neither.
 *
 * Paths: a route's pattern is literal segments and whole-segment parameters ("/instances/{id}").
 * The request path is matched segment by segment after percent-decoding each segment, so
 * "%2e%2e" is "..". Segments "." and "..", a decoded "/" or NUL, and malformed escapes are
 * refused with 400 `invalid_request` before routing, so no handler sees a traversal.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <systemd/sd-event.h>

#include "base/base.h"
#include "jwt/jwt.h"
#include "metrics/metrics.h"

#define HTTP_CONNECTIONS_MAX 64             /* per listener (API-1) */
#define HTTP_IDLE_TIMEOUT_SEC 10            /* API-1 */
#define HTTP_BODY_MAX (1024 * 1024)         /* API-15 */
#define HTTP_DISCARD_MAX (16 * 1024 * 1024) /* API-15 */
#define HTTP_TARGET_MAX 8192                /* request target, bytes (API-11) */
#define HTTP_HEAD_MAX (16 * 1024)           /* request line and headers, bytes (API-11) */
#define HTTP_UNAUTHORIZED_MESSAGE "invalid or missing bearer token"

/* ---- listen addresses ---------------------------------------------------------------------- */

typedef struct HttpAddress {
        struct sockaddr_storage sa;
        socklen_t len;
} HttpAddress;

/* "127.0.0.1:8080" or "[::1]:8080": a literal address, never a host name (CFG-6). */
#define HTTP_ADDRESS_STRLEN 56

/*
 * Parses a `listen` value. The port is 1..65535, or also 0 (any free port) when
 * allow_port_zero is set, which only tests want. -EINVAL for anything else.
 */
int http_address_parse(const char *s, bool allow_port_zero, HttpAddress *ret);
char *http_address_format(const HttpAddress *a, char buf[static HTTP_ADDRESS_STRLEN]);

/* ---- bearer tokens (API-12, API-13, API-14) ------------------------------------------------- */

/*
 * Checks an Authorization header value: at most JWT_AUTHORIZATION_MAX bytes, the scheme
 * "Bearer" (any case), one or more spaces, then a token for jwt_verify(). NULL means the header
 * is missing. Same results as jwt_verify().
 */
int http_auth_check(const JwtSecret *secret, const char *authorization, Timestamp now,
                    char **ret_subject, char **error);
/* The same through a cache of accepted tokens (jwt_verify_cached(); NULL: none). The server
 * checks every request this way (PERF-1). */
int http_auth_check_cached(JwtTokenCache *cache, const JwtSecret *secret, const char *authorization,
                           Timestamp now, char **ret_subject, char **error);

/* ---- requests and routes -------------------------------------------------------------------- */

typedef struct HttpRequest HttpRequest;

/*
 * A handler answers with one of the http_reply*() calls, or suspends the request and answers
 * later. If it returns < 0 without having answered, the request gets 500 `internal`.
 */
typedef int (*HttpHandler)(HttpRequest *req, void *userdata);

typedef struct HttpRoute {
        const char *method;  /* "GET", "POST", "DELETE", ... */
        const char *pattern; /* "/instances/{id}/start" */
        HttpHandler handler;
        const char *const *query; /* accepted query parameters, NULL-terminated; NULL: none */
        bool public;              /* true: no bearer token needed (API-12) */
        /*
         * A WebSocket route (CONS-3): without an Authorization header, the token may come as a
         * subprotocol "bearer.<JWT>" (a browser cannot set headers on a WebSocket).
         */
        bool websocket;
} HttpRoute;

/*
 * Checks a route table: methods are upper-case tokens, patterns start with "/", parameters
 * are whole segments "{name}" with unique lower-case names, no two routes with one method can
 * match the same path, every route has a handler. -EINVAL with *error naming the route.
 */
int http_routes_validate(const HttpRoute *routes, size_t n_routes, char **error);

const char *http_request_get_method(const HttpRequest *req);
/* The path as the client sent it (still percent-encoded), without the query. */
const char *http_request_get_path(const HttpRequest *req);
/* A path parameter of the route, decoded; NULL for a name the route does not have. */
const char *http_request_get_param(const HttpRequest *req, const char *name);
/* A query parameter, decoded; NULL when the request did not give it. */
const char *http_request_get_query(const HttpRequest *req, const char *name);
/* The raw body (not NUL-terminated; NULL when empty). */
const void *http_request_get_body(const HttpRequest *req, size_t *ret_size);
/* "127.0.0.1:41234", "[::1]:41234" or, on the Unix socket, "unix:pid=<n>,uid=<n>". */
const char *http_request_get_peer(const HttpRequest *req);
/* The token's "sub" claim; NULL on public routes or when the token has none. */
const char *http_request_get_subject(const HttpRequest *req);

/*
 * Parses the body as strict JSON: UTF-8, duplicate keys refused, nesting <= 16 levels, a
 * single object. On failure answers 400 `invalid_request` itself and returns -EINVAL, so a
 * handler can simply return the result.
 */
int http_request_parse_json(HttpRequest *req, json_t **ret);

/*
 * The same rules on a buffer, without a request: -EINVAL with *error worded for the client
 * ("invalid JSON body: ...").
 */
int http_json_parse_body(const void *buf, size_t size, json_t **ret, char **error);

/*
 * Answers the request (copying body). content_type may be NULL only for an empty body. Each
 * request is answered once: -EALREADY for a second answer. When the connection has already
 * gone (the server was freed while the request was suspended) the answer is dropped with
 * -ECONNABORTED.
 */
int http_reply(HttpRequest *req, unsigned status, const char *content_type, const void *body,
               size_t size);
/*
 * http_reply() with extra response headers: headers is a NULL-ended list of name, value pairs
 * ({"Cache-Control", "no-cache", NULL}), copied; -EINVAL for a name without a value. For the
 * web UI's security headers and a redirect's Location.
 */
int http_reply_with_headers(HttpRequest *req, unsigned status, const char *content_type,
                            const void *body, size_t size, const char *const *headers);
int http_reply_json(HttpRequest *req, unsigned status, const json_t *body);
/* {"code": code, "message": <formatted>} */
int http_reply_error(HttpRequest *req, unsigned status, const char *code, const char *fmt, ...)
    _printf_(4, 5);

/*
 * Suspends the request from inside its handler (-EINVAL elsewhere). The handler then returns
 * 0; whoever completes the work must later answer with an http_reply*() from the loop thread:
 * MHD neither times out a suspended connection nor notices its client leaving, so an
 * unanswered request holds one of the listener's connections for good. The request lives as
 * long as the server holds it: take a reference with http_request_ref() to keep it until then.
 * A server freed while requests are suspended closes their connections; replies to them
 * return -ECONNABORTED.
 */
int http_request_suspend(HttpRequest *req);
HttpRequest *http_request_ref(HttpRequest *req);
HttpRequest *http_request_unref(HttpRequest *req);
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpRequest *, http_request_unref);

/* ---- streamed answers (CONS-2) --------------------------------------------------------------- */

/*
 * A body of unknown length, sent chunked as its producer writes it (the console's follow). The
 * producer writes into a bounded buffer and learns from drained() when the client has taken it
 * all, so a client that reads slowly slows the producer down and never grows vgpud. While the
 * buffer is empty the connection is suspended: it costs no wake-ups and does not time out (a
 * quiet console keeps its followers). A client that hangs up is noticed at once (EPOLLRDHUP),
 * even while suspended; so is a client that only shuts down its sending side.
 */
typedef struct HttpStream HttpStream;

typedef struct HttpStreamConfig {
        size_t max_buffered; /* bytes written and not yet sent, at most */
        /* The buffer has been sent in full: write more. Runs on the loop, never inside a write. */
        void (*drained)(HttpStream *s, void *userdata);
        /*
         * The answer is over: the client went away, or an ended stream was sent in full, or the
         * server is being freed. Runs once, on the loop; the stream takes no more writes.
         */
        void (*closed)(HttpStream *s, void *userdata);
        void *userdata;
} HttpStreamConfig;

/*
 * Answers req (from its handler, or later for a suspended request) with status and a streamed
 * body of content_type. *ret is a reference for the producer: drop it with http_stream_unref().
 * -EALREADY, -ECONNABORTED as http_reply(); -ENOMEM.
 */
int http_reply_stream(HttpRequest *req, unsigned status, const char *content_type,
                      const HttpStreamConfig *config, HttpStream **ret);
/* How many bytes http_stream_write() takes now; 0 once the answer is over or ended. */
size_t http_stream_room(const HttpStream *s);
/*
 * Queues data (all or nothing): -ENOBUFS past the room, -EPIPE once the answer is over, -EINVAL
 * after http_stream_end().
 */
int http_stream_write(HttpStream *s, const void *data, size_t size);
/* No more data: the body ends once what is queued is sent. */
void http_stream_end(HttpStream *s);
HttpStream *http_stream_ref(HttpStream *s);
HttpStream *http_stream_unref(HttpStream *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpStream *, http_stream_unref);

/* ---- WebSocket (CONS-3) -----------------------------------------------------------------------
 */

/*
 * A WebSocket on an upgraded connection (RFC 6455), binary frames only. Frames from the client
 * are decoded by websocket.h's decoder: a violation closes the connection with its status code
 * (1002, 1003, 1007, 1009; frames over HTTP_WEBSOCKET_FRAME_MAX are refused from their header).
 * vgpud pings every HTTP_WEBSOCKET_PING_SEC, which keeps the connection past the HTTP idle
 * timeout, and closes it (1008) when nothing has come from the client for
 * HTTP_WEBSOCKET_DEAD_SEC. Output is queued up to max_queued bytes: a client that lets more pile
 * up is not reading, and is dropped at once, so it never holds the loop or anyone else.
 */
#define HTTP_WEBSOCKET_FRAME_MAX (64 * 1024)
#define HTTP_WEBSOCKET_PING_SEC 5
#define HTTP_WEBSOCKET_DEAD_SEC 20

typedef struct HttpWebSocket HttpWebSocket;

typedef struct HttpWebSocketConfig {
        size_t max_queued;
        /* The 101 is out: frames may be sent from now on. Once, on the loop. */
        void (*opened)(HttpWebSocket *ws, void *userdata);
        /* The payload of a binary frame (or a piece of a fragmented message). */
        void (*data)(HttpWebSocket *ws, const void *data, size_t size, void *userdata);
        /* Over (closed by either side, dropped, or never upgraded): once, on the loop. */
        void (*closed)(HttpWebSocket *ws, void *userdata);
        void *userdata;
} HttpWebSocketConfig;

/*
 * Whether req is a WebSocket opening handshake (RFC 6455 4.2.1) that offers subprotocol: 0, or
 * answers 400 `invalid_request` naming what is missing, and returns -EINVAL.
 */
int http_request_check_websocket(HttpRequest *req, const char *subprotocol);
/*
 * Answers a checked handshake with 101 and subprotocol (only: a bearer token offered beside it
 * is never echoed). The WebSocket starts once the 101 is sent; until then, and after, the
 * handle is the caller's reference (http_websocket_unref()).
 */
int http_reply_websocket(HttpRequest *req, const char *subprotocol,
                         const HttpWebSocketConfig *config, HttpWebSocket **ret);
/*
 * Queues data as one binary frame (at most HTTP_WEBSOCKET_FRAME_MAX bytes). -EPIPE once closed
 * or while the handshake is not done; -ENOBUFS when the client has let max_queued bytes pile up:
 * it is then dropped, and closed() follows.
 */
int http_websocket_send(HttpWebSocket *ws, const void *data, size_t size);
/* Stops or resumes taking frames from the client (its consumer is full). */
void http_websocket_pause(HttpWebSocket *ws, bool paused);
/* Sends a close frame with code and reason, and closes once it is out. */
void http_websocket_close(HttpWebSocket *ws, uint16_t code, const char *reason);
HttpWebSocket *http_websocket_ref(HttpWebSocket *ws);
HttpWebSocket *http_websocket_unref(HttpWebSocket *ws);
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpWebSocket *, http_websocket_unref);

/* ---- the server ----------------------------------------------------------------------------- */

typedef struct HttpServerConfig {
        const char *listen;      /* a `listen` value (port 0 allowed), or NULL for none */
        const char *unix_socket; /* an absolute path, or NULL for none */
        mode_t unix_socket_mode;
        const HttpRoute *routes; /* not copied: must outlive the server */
        size_t n_routes;
        const JwtSecret *secret;   /* not copied; required when a route is not public */
        const Clock *clock;        /* token times; NULL for clock_realtime */
        unsigned idle_timeout_sec; /* 0 for HTTP_IDLE_TIMEOUT_SEC */
        void *userdata;            /* handed to every handler */
} HttpServerConfig;

typedef struct HttpServer HttpServer;

/*
 * Binds the listeners and starts serving on event. A Unix socket path that holds a stale
 * socket is replaced; any other file there is an error. On failure *error names the listener
 * ("listen 127.0.0.1:8080: Address already in use", "unix_socket /run/x.sock: ...") or the
 * route table, or reads `out of memory`.
 */
int http_server_new(sd_event *event, const HttpServerConfig *config, HttpServer **ret,
                    char **error);
/*
 * Stops serving: sends the answers already given to suspended requests (for up to a second,
 * also after the loop has finished: OPS-3's 503s), closes every connection (suspended requests
 * still unanswered included), removes the Unix socket if it is still the one the server bound,
 * and frees the server.
 */
HttpServer *http_server_free(HttpServer *s);

/*
 * Stops accepting new connections (OPS-3) and closes the listening sockets; connections already
 * open, suspended requests included, are served to the end. Idempotent.
 */
void http_server_stop_listening(HttpServer *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(HttpServer *, http_server_free);
#define _cleanup_http_server_ _cleanup_(http_server_freep)

/* The TCP listener's bound address (the real port when 0 was asked); -ENOENT without one. */
int http_server_get_tcp_address(const HttpServer *s, HttpAddress *ret);

/* Responses sent with this status so far. */
uint64_t http_server_get_response_count(const HttpServer *s, unsigned status);

/*
 * Writes the vgpud_http_requests_total family: one series per status the API can answer
 * (API-2, API-11), exported from start-up at 0 (MET-3), plus any other status sent.
 */
int http_server_write_metrics(const HttpServer *s, MetricsWriter *w);
