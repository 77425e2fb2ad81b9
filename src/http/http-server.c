/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * libmicrohttpd on the caller's sd-event loop, one MHD daemon per listener (so that the
 * connection limit is per listener, API-1), and the life of a request through it.
 *
 * MHD calls on_access() several times per request: once when the headers are in (every check
 * that needs no body runs then, and may answer at once), once per piece of body, and once
 * more at the end, when the handler runs. A suspended request gets one further call after it
 * is resumed, which sends the answer it was given meanwhile.
 */
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "http-internal.h"
#include "http/websocket.h"

typedef enum RequestState {
        REQUEST_NEW,       /* headers in, nothing decided yet */
        REQUEST_BODY,      /* accepted; reading the body */
        REQUEST_HANDLING,  /* inside the handler */
        REQUEST_SUSPENDED, /* the handler suspended it; waiting for an answer */
        REQUEST_ANSWERED,  /* the answer is queued */
} RequestState;

typedef struct HttpListener HttpListener;

/*
 * One per MHD connection, to notice a peer that has closed (REL-8). MHD reads in edge-triggered
 * epoll and takes a short read for "drained": a client whose request and FIN were both queued
 * before MHD accepted it gets its bytes read and its FIN never seen, and holds its place until
 * the idle timeout. So each connection is also watched for EPOLLRDHUP; once MHD has read all
 * that was sent, shutdown(SHUT_RD) wakes its epoll again, and its next read sees the end.
 */
typedef struct HttpConnection HttpConnection;
struct HttpConnection {
        HttpListener *listener;
        int fd;
        sd_event_source *hup;
        HttpStream *stream; /* a streamed answer on this connection, told of a hang-up */
        bool hup_seen;      /* the peer has shut down its sending side */
        bool peer_closed;   /* on the listener's list: checked after each MHD run */
        HttpConnection *peer_closed_prev, *peer_closed_next;
};

struct HttpRequest {
        unsigned n_ref;
        HttpListener *listener;            /* NULL once MHD is done with the request */
        struct MHD_Connection *connection; /* likewise */
        RequestState state;
        HttpRequest *suspended_prev, *suspended_next;
        nsec_t start; /* CLOCK_MONOTONIC */

        char *target;           /* as sent: path and query */
        const char *raw_target; /* where MHD holds it, until the first on_access() */
        char *method;
        char *peer;
        HttpTarget parsed;
        const HttpRoute *route;
        HttpParam *params;
        size_t n_params;
        char *subject;

        bool body_declared; /* Content-Length > 0 or chunked */
        bool close;         /* the answer ends the connection */
        char *body;
        size_t body_size, body_allocated;
        uint64_t received; /* body bytes seen, kept or not */

        bool suspend_wanted;
        bool flushing; /* answered after a suspension: counted in the listener's n_flushing */
        struct MHD_Response *response; /* set by a reply, until queued */
        unsigned status;               /* 0 until answered */
        HttpStream *stream;            /* a streamed answer (CONS-2), until the request ends */
        struct UpgradeHandle *upgrade; /* a WebSocket answer (CONS-3), until the request ends */
};

struct HttpStream {
        unsigned n_ref;
        HttpServer *server;
        HttpRequest *req;   /* NULL once the request is over */
        HttpConnection *hc; /* NULL when its connection is unwatched or gone */
        char *buf;
        size_t len, max;
        bool ended, peer_gone, closed;
        bool suspended; /* on the listener's list of suspended streams */
        HttpStream *suspended_prev, *suspended_next;
        sd_event_source *drain; /* drained() due on the loop */
        HttpStreamConfig config;
};

struct HttpListener {
        HttpServer *server;
        const char *kind; /* "tcp" or "unix", for logs */
        struct MHD_Daemon *daemon;
        sd_event_source *io, *timer;
        HttpRequest *suspended;         /* so that freeing can resume them: MHD insists */
        HttpStream *suspended_streams;  /* likewise */
        struct UpgradeHandle *upgrades; /* upgraded connections: given back before MHD stops */
        bool freeing;                   /* its sources are gone: nothing may wake it */
        unsigned n_flushing;            /* resumed with an answer that is not sent yet */
        HttpConnection *peer_closed;
        bool woken; /* a run at once is due; the timer says so already */
};

#define HTTP_STATUS_MAX 599

/*
 * MHD's memory per connection, which bounds the request head it takes in (it answers 414 or 431
 * itself past that, in HTML): well above HTTP_HEAD_MAX, so that our own limit answers first.
 */
#define HTTP_POOL_SIZE (64 * 1024)

/* How long freeing the server keeps sending answers already given (OPS-3). */
#define HTTP_FLUSH_USEC (1000 * 1000)

struct HttpServer {
        sd_event *event;
        HttpListener *tcp, *unix_socket;
        bool has_tcp;
        HttpAddress tcp_address;
        char *unix_path;
        dev_t unix_dev;
        ino_t unix_ino;
        const HttpRoute *routes;
        size_t n_routes;
        const JwtSecret *secret;
        JwtTokenCache *tokens; /* accepted tokens until their exp (PERF-1) */
        const Clock *clock;
        void *userdata;
        bool stopping;
        uint64_t responses[HTTP_STATUS_MAX + 1];
};

static nsec_t now_monotonic(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (nsec_t)ts.tv_sec * NSEC_PER_SEC + (nsec_t)ts.tv_nsec;
}

/* ---- requests: accessors and references ------------------------------------------------------ */

HttpRequest *http_request_ref(HttpRequest *req)
{
        req->n_ref++;
        return req;
}

HttpRequest *http_request_unref(HttpRequest *req)
{
        if (!req || --req->n_ref > 0)
                return NULL;
        if (req->response)
                MHD_destroy_response(req->response);
        free(req->target);
        free(req->method);
        free(req->peer);
        http_target_done(&req->parsed);
        http_params_free(req->params, req->n_params);
        free(req->subject);
        free(req->body);
        free(req);
        return NULL;
}

const char *http_request_get_method(const HttpRequest *req)
{
        return req->method;
}

const char *http_request_get_path(const HttpRequest *req)
{
        return req->parsed.path;
}

static const char *params_lookup(const HttpParam *params, size_t n, const char *name)
{
        for (size_t i = 0; i < n; i++)
                if (streq(params[i].name, name))
                        return params[i].value;
        return NULL;
}

const char *http_request_get_param(const HttpRequest *req, const char *name)
{
        return params_lookup(req->params, req->n_params, name);
}

const char *http_request_get_query(const HttpRequest *req, const char *name)
{
        return params_lookup(req->parsed.query, req->parsed.n_query, name);
}

const void *http_request_get_body(const HttpRequest *req, size_t *ret_size)
{
        *ret_size = req->body_size;
        return req->body;
}

const char *http_request_get_peer(const HttpRequest *req)
{
        return req->peer;
}

const char *http_request_get_subject(const HttpRequest *req)
{
        return req->subject;
}

/* ---- answers --------------------------------------------------------------------------------- */

static void suspended_remove(HttpRequest *req)
{
        HttpListener *l = req->listener;
        if (req->suspended_prev)
                req->suspended_prev->suspended_next = req->suspended_next;
        else if (l && l->suspended == req)
                l->suspended = req->suspended_next;
        if (req->suspended_next)
                req->suspended_next->suspended_prev = req->suspended_prev;
        req->suspended_prev = req->suspended_next = NULL;
}

static void listener_wake(HttpListener *l);

static int response_add_header(struct MHD_Response *resp, const char *name, const char *value)
{
        return MHD_add_response_header(resp, name, value) == MHD_YES ? 0 : -ENOMEM;
}

static int request_can_answer(HttpRequest *req, unsigned status)
{
        if (req->response || req->state == REQUEST_ANSWERED)
                return -EALREADY;
        if (!req->connection)
                return -ECONNABORTED;
        if (status < 100 || status > HTTP_STATUS_MAX)
                return -EINVAL;
        return 0;
}

/* Takes resp: the answer is set (and a suspended request resumed to send it), or it is freed. */
static int request_set_response(HttpRequest *req, unsigned status, struct MHD_Response *resp,
                                const char *content_type, const char *allow,
                                const char *const *headers);

static int request_set_answer(HttpRequest *req, unsigned status, const char *content_type,
                              const void *body, size_t size, const char *allow,
                              const char *const *headers)
{
        int r = request_can_answer(req, status);
        if (r < 0)
                return r;
        if (size > 0 && !content_type)
                return -EINVAL;
        struct MHD_Response *resp =
            MHD_create_response_from_buffer(size, (void *)body, MHD_RESPMEM_MUST_COPY);
        if (!resp)
                return -ENOMEM;
        return request_set_response(req, status, resp, content_type, allow, headers);
}

static int request_set_response(HttpRequest *req, unsigned status, struct MHD_Response *resp,
                                const char *content_type, const char *allow,
                                const char *const *headers)
{
        int r = 0;
        if (content_type)
                r = response_add_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        if (r >= 0 && allow)
                r = response_add_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
        if (r >= 0 && status == MHD_HTTP_UNAUTHORIZED)
                r = response_add_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        for (const char *const *h = headers; r >= 0 && h && h[0]; h += 2)
                r = h[1] ? response_add_header(resp, h[0], h[1]) : -EINVAL;
        /* Answered before a declared body was read: the unread body must not be taken for the
         * next request (API-15), so the connection ends with this answer. */
        if (r >= 0 && (req->close || (req->state == REQUEST_NEW && req->body_declared)))
                r = response_add_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
        if (r < 0) {
                MHD_destroy_response(resp);
                return r;
        }

        req->response = resp;
        req->status = status;
        if (req->state == REQUEST_SUSPENDED) {
                suspended_remove(req);
                req->flushing = true;
                req->listener->n_flushing++;
                MHD_resume_connection(req->connection);
                listener_wake(req->listener);
        }
        return 0;
}

int http_reply(HttpRequest *req, unsigned status, const char *content_type, const void *body,
               size_t size)
{
        return request_set_answer(req, status, content_type, body, size, NULL, NULL);
}

int http_reply_with_headers(HttpRequest *req, unsigned status, const char *content_type,
                            const void *body, size_t size, const char *const *headers)
{
        return request_set_answer(req, status, content_type, body, size, NULL, headers);
}

/* ---- streamed answers (CONS-2) --------------------------------------------------------------- */

HttpStream *http_stream_ref(HttpStream *s)
{
        s->n_ref++;
        return s;
}

HttpStream *http_stream_unref(HttpStream *s)
{
        if (!s || --s->n_ref > 0)
                return NULL;
        sd_event_source_disable_unref(s->drain);
        free(s->buf);
        free(s);
        return NULL;
}

static void stream_suspended_remove(HttpStream *s)
{
        if (!s->suspended)
                return;
        HttpListener *l = s->req ? s->req->listener : NULL;
        if (s->suspended_prev)
                s->suspended_prev->suspended_next = s->suspended_next;
        else if (l && l->suspended_streams == s)
                l->suspended_streams = s->suspended_next;
        if (s->suspended_next)
                s->suspended_next->suspended_prev = s->suspended_prev;
        s->suspended_prev = s->suspended_next = NULL;
        s->suspended = false;
}

/* Something to send, or the end to tell: MHD takes the connection back at its next run. */
static void stream_resume(HttpStream *s)
{
        if (!s->suspended || !s->req || !s->req->connection)
                return;
        HttpListener *l = s->req->listener;
        stream_suspended_remove(s);
        MHD_resume_connection(s->req->connection);
        listener_wake(l);
}

static int on_stream_drain(sd_event_source *source, void *userdata)
{
        HttpStream *s = userdata;
        s->drain = sd_event_source_disable_unref(s->drain);
        if (!s->closed && !s->ended && s->config.drained)
                s->config.drained(s, s->config.userdata);
        return 0;
}

/* The producer hears of an empty buffer from the loop, never from inside MHD's run. */
static void stream_schedule_drained(HttpStream *s)
{
        if (s->drain || s->closed || s->ended || !s->config.drained)
                return;
        if (sd_event_add_defer(s->server->event, &s->drain, on_stream_drain, s) < 0)
                s->drain = NULL; /* out of memory: the next write's room still tells */
}

static ssize_t stream_read(void *cls, uint64_t pos, char *out, size_t max)
{
        HttpStream *s = cls;
        if (s->len > 0) {
                size_t n = s->len < max ? s->len : max;
                memcpy(out, s->buf, n);
                memmove(s->buf, s->buf + n, s->len - n);
                s->len -= n;
                if (s->len == 0)
                        stream_schedule_drained(s);
                return (ssize_t)n;
        }
        if (s->ended)
                return MHD_CONTENT_READER_END_OF_STREAM;
        /* A server being freed must not be left with a suspended connection (MHD aborts). */
        if (s->peer_gone || !s->req || !s->req->connection || s->server->stopping)
                return MHD_CONTENT_READER_END_WITH_ERROR;
        /* Nothing to send: out of MHD's loop until a write, an end or a hang-up. */
        HttpListener *l = s->req->listener;
        MHD_suspend_connection(s->req->connection);
        s->suspended = true;
        s->suspended_next = l->suspended_streams;
        if (l->suspended_streams)
                l->suspended_streams->suspended_prev = s;
        l->suspended_streams = s;
        return 0;
}

static void stream_response_free(void *cls)
{
        http_stream_unref(cls);
}

/* The request is over: the producer hears it once. */
static void stream_close(HttpStream *s)
{
        if (s->closed)
                return;
        stream_suspended_remove(s);
        s->closed = true;
        s->req = NULL;
        if (s->hc) {
                s->hc->stream = NULL;
                s->hc = NULL;
        }
        s->drain = sd_event_source_disable_unref(s->drain);
        if (s->config.closed)
                s->config.closed(s, s->config.userdata);
}

int http_reply_stream(HttpRequest *req, unsigned status, const char *content_type,
                      const HttpStreamConfig *config, HttpStream **ret)
{
        int r = request_can_answer(req, status);
        if (r < 0)
                return r;
        if (!content_type || config->max_buffered == 0)
                return -EINVAL;
        HttpStream *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        *s = (HttpStream){.n_ref = 1,
                          .server = req->listener->server,
                          .req = req,
                          .max = config->max_buffered,
                          .config = *config};
        /* One reference for the producer, one for MHD's response, one for the request. */
        struct MHD_Response *resp = MHD_create_response_from_callback(
            MHD_SIZE_UNKNOWN, 4096, stream_read, http_stream_ref(s), stream_response_free);
        if (!resp) {
                s->n_ref--;
                http_stream_unref(s);
                return -ENOMEM;
        }
        r = request_set_response(req, status, resp, content_type, NULL,
                                 (const char *const[]){"Cache-Control", "no-store", NULL});
        if (r < 0) {
                http_stream_unref(s);
                return r;
        }
        req->stream = http_stream_ref(s);
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(req->connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        HttpConnection *hc = info ? info->socket_context : NULL;
        if (hc) {
                hc->stream = s;
                s->hc = hc;
                /* Gone while its answer was being prepared: the body ends at its first read. */
                s->peer_gone = hc->hup_seen;
        }
        *ret = s;
        return 0;
}

size_t http_stream_room(const HttpStream *s)
{
        return s->closed || s->ended || s->peer_gone ? 0 : s->max - s->len;
}

int http_stream_write(HttpStream *s, const void *data, size_t size)
{
        if (s->closed || s->peer_gone)
                return -EPIPE;
        if (s->ended)
                return -EINVAL;
        if (size > s->max - s->len)
                return -ENOBUFS;
        if (size == 0)
                return 0;
        if (!s->buf) {
                s->buf = malloc(s->max);
                if (!s->buf)
                        return -ENOMEM;
        }
        memcpy(s->buf + s->len, data, size);
        s->len += size;
        stream_resume(s);
        return 0;
}

void http_stream_end(HttpStream *s)
{
        if (s->ended)
                return;
        s->ended = true;
        s->drain = sd_event_source_disable_unref(s->drain);
        stream_resume(s);
}

/* ---- WebSocket upgrades (CONS-3) ---------------------------------------------------------------
 */

/* Whether a comma-separated header value holds token (case-insensitive), as Connection does. */
static bool header_has_token(const char *value, const char *token)
{
        size_t n = strlen(token);
        for (const char *p = value; p && *p;) {
                p += strspn(p, " \t,");
                size_t k = strcspn(p, ",");
                size_t t = k;
                while (t > 0 && (p[t - 1] == ' ' || p[t - 1] == '\t'))
                        t--;
                if (t == n && strncasecmp(p, token, n) == 0)
                        return true;
                p += k;
        }
        return false;
}

#define WS_VERSION_ERROR \
        "{\"code\":\"invalid_request\",\"message\":\"Sec-WebSocket-Version must be 13\"}"

int http_request_check_websocket(HttpRequest *req, const char *subprotocol)
{
        struct MHD_Connection *c = req->connection;
        if (!c)
                return -ECONNABORTED;
        const char *upgrade = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Upgrade");
        const char *connection = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Connection");
        const char *version =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Version");
        const char *key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Key");
        const char *protocols =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Sec-WebSocket-Protocol");
        int r = 0;
        if (!header_has_token(upgrade, "websocket") || !header_has_token(connection, "upgrade"))
                r = http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                     "a WebSocket upgrade is required (Upgrade: websocket, "
                                     "Connection: Upgrade)");
        else if (!streq_ptr(version, "13"))
                /* RFC 6455 4.4: the version the server speaks goes with the refusal. */
                r = http_reply_with_headers(
                    req, MHD_HTTP_BAD_REQUEST, "application/json", WS_VERSION_ERROR,
                    strlen(WS_VERSION_ERROR),
                    (const char *const[]){"Sec-WebSocket-Version", "13", NULL});
        else if (!ws_key_is_valid(key))
                r = http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                     "Sec-WebSocket-Key must be 16 bytes in base64");
        else if (!ws_protocols_find(protocols, subprotocol, NULL, NULL, NULL))
                r = http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request",
                                     "Sec-WebSocket-Protocol must offer %s", subprotocol);
        else
                return 0;
        return r < 0 ? r : -EINVAL;
}

/*
 * A WebSocket from its 101 on. MHD reports the request completed as soon as the 101 is queued
 * and calls the upgrade handler after it, so the session outlives its request: the listener
 * holds it here, and must give every upgraded connection back before MHD is stopped.
 */
typedef struct UpgradeHandle {
        HttpListener *listener;
        struct MHD_UpgradeResponseHandle *urh; /* NULL until upgraded */
        HttpWebSocket *ws;
        HttpRequest *req; /* while the request lasts */
        struct UpgradeHandle *prev, *next;
} UpgradeHandle;

static void upgrade_drop(UpgradeHandle *h)
{
        HttpListener *l = h->listener;
        if (h->req) /* a session released while its request lasts (the server stopping) */
                h->req->upgrade = NULL;
        if (h->prev)
                h->prev->next = h->next;
        else
                l->upgrades = h->next;
        if (h->next)
                h->next->prev = h->prev;
        http_websocket_unref(h->ws);
        free(h);
}

/* The session is over: the connection goes back to MHD, which closes it in its next run. */
static void upgrade_release(void *userdata)
{
        UpgradeHandle *h = userdata;
        HttpListener *l = h->listener;
        (void)MHD_upgrade_action(h->urh, MHD_UPGRADE_ACTION_CLOSE);
        listener_wake(l);
        upgrade_drop(h);
}

static void peer_closed_remove(HttpConnection *hc);

static void on_upgrade(void *cls, struct MHD_Connection *c, void *con_cls, const char *extra_in,
                       size_t extra_in_size, MHD_socket sock, struct MHD_UpgradeResponseHandle *urh)
{
        UpgradeHandle *h = cls;
        h->urh = urh;
        /* The session watches the socket from now on: the hang-up watch makes way for it. */
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        HttpConnection *hc = info ? info->socket_context : NULL;
        if (hc) {
                peer_closed_remove(hc);
                hc->hup = sd_event_source_disable_unref(hc->hup);
        }
        http_websocket_upgraded(h->ws, sock, extra_in, extra_in_size, upgrade_release, h);
}

/* The request is over: a WebSocket whose 101 did not go out ends with it. */
static void request_websocket_end(HttpRequest *req, bool completed)
{
        UpgradeHandle *h = TAKE_PTR(req->upgrade);
        h->req = NULL;
        if (completed && req->status == MHD_HTTP_SWITCHING_PROTOCOLS)
                return; /* the upgrade handler takes it from here */
        http_websocket_abort(h->ws);
        upgrade_drop(h);
}

int http_reply_websocket(HttpRequest *req, const char *subprotocol,
                         const HttpWebSocketConfig *config, HttpWebSocket **ret)
{
        int r = request_can_answer(req, MHD_HTTP_SWITCHING_PROTOCOLS);
        if (r < 0)
                return r;
        char accept[WS_ACCEPT_LEN + 1];
        r = ws_accept_key(
            MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND, "Sec-WebSocket-Key"),
            accept);
        if (r < 0)
                return r;
        HttpListener *l = req->listener;
        UpgradeHandle *h = calloc(1, sizeof *h);
        if (!h)
                return -ENOMEM;
        HttpWebSocket *ws = http_websocket_new(l->server->event, config);
        struct MHD_Response *resp = ws ? MHD_create_response_for_upgrade(on_upgrade, h) : NULL;
        if (!resp) {
                http_websocket_unref(ws);
                free(h);
                return -ENOMEM;
        }
        r = request_set_response(req, MHD_HTTP_SWITCHING_PROTOCOLS, resp, NULL, NULL,
                                 (const char *const[]){"Upgrade", "websocket", "Connection",
                                                       "Upgrade", "Sec-WebSocket-Accept", accept,
                                                       "Sec-WebSocket-Protocol", subprotocol,
                                                       NULL});
        if (r < 0) {
                http_websocket_unref(ws);
                free(h);
                return r;
        }
        *h = (UpgradeHandle){
            .listener = l, .ws = http_websocket_ref(ws), .req = req, .next = l->upgrades};
        if (l->upgrades)
                l->upgrades->prev = h;
        l->upgrades = h;
        req->upgrade = h;
        *ret = ws;
        return 0;
}

static int reply_json_allow(HttpRequest *req, unsigned status, const json_t *body,
                            const char *allow)
{
        _cleanup_free_ char *text = json_dumps(body, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!text)
                return -ENOMEM;
        return request_set_answer(req, status, "application/json", text, strlen(text), allow, NULL);
}

int http_reply_json(HttpRequest *req, unsigned status, const json_t *body)
{
        return reply_json_allow(req, status, body, NULL);
}

static int reply_error_va(HttpRequest *req, unsigned status, const char *code, const char *allow,
                          const char *fmt, va_list ap) _printf_(5, 0);
static int reply_error_va(HttpRequest *req, unsigned status, const char *code, const char *allow,
                          const char *fmt, va_list ap)
{
        _cleanup_free_ char *message = NULL;
        if (vasprintf(&message, fmt, ap) < 0)
                return -ENOMEM;
        /* Messages may quote client bytes; JSON strings must be UTF-8. */
        json_auto_t *body = json_pack("{s:s,s:s}", "code", code, "message", message);
        if (!body) {
                for (char *p = message; *p; p++)
                        if ((unsigned char)*p >= 0x80)
                                *p = '?';
                body = json_pack("{s:s,s:s}", "code", code, "message", message);
        }
        if (!body)
                return -ENOMEM;
        return reply_json_allow(req, status, body, allow);
}

int http_reply_error(HttpRequest *req, unsigned status, const char *code, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = reply_error_va(req, status, code, NULL, fmt, ap);
        va_end(ap);
        return r;
}

static int reply_error_allow(HttpRequest *req, const char *allow, const char *fmt, ...)
    _printf_(3, 4);
static int reply_error_allow(HttpRequest *req, const char *allow, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r =
            reply_error_va(req, MHD_HTTP_METHOD_NOT_ALLOWED, "method_not_allowed", allow, fmt, ap);
        va_end(ap);
        return r;
}

int http_request_parse_json(HttpRequest *req, json_t **ret)
{
        _cleanup_free_ char *error = NULL;
        int r = http_json_parse_body(req->body, req->body_size, ret, &error);
        if (r == -EINVAL)
                (void)http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", "%s", error);
        return r;
}

int http_request_suspend(HttpRequest *req)
{
        if (req->state != REQUEST_HANDLING)
                return -EINVAL;
        req->suspend_wanted = true;
        return 0;
}

/* ---- the steps of a request ------------------------------------------------------------------ */

static enum MHD_Result request_send(HttpRequest *req)
{
        HttpServer *s = req->listener->server;
        struct MHD_Response *resp = TAKE_PTR(req->response);

        req->state = REQUEST_ANSWERED;
        enum MHD_Result ok = MHD_queue_response(req->connection, req->status, resp);
        MHD_destroy_response(resp);
        if (ok != MHD_YES) {
                log_line(LOG_LEVEL_DEBUG, 0, "http response not queued", "path", req->parsed.path,
                         NULL);
                return MHD_NO;
        }
        s->responses[req->status]++;
        return MHD_YES;
}

/* Answers 500 for a failure of our own; when even that fails, the connection just closes. */
static enum MHD_Result request_fail(HttpRequest *req, int r)
{
        if (!req->response &&
            http_reply_error(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal", "internal error: %s",
                             strerror(r < 0 ? -r : EIO)) < 0)
                return MHD_NO;
        return request_send(req);
}

static char *peer_describe(HttpListener *l, struct MHD_Connection *c)
{
        char *s = NULL;

        if (l == l->server->unix_socket) {
                const union MHD_ConnectionInfo *info =
                    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
                struct ucred cred;
                socklen_t len = sizeof cred;
                if (info && getsockopt(info->connect_fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0)
                        (void)strprintf(&s, "unix:pid=%d,uid=%u", (int)cred.pid,
                                        (unsigned)cred.uid);
                return s ? s : strdup("unix");
        }

        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
        HttpAddress a = {0};
        if (info && info->client_addr) {
                size_t len = info->client_addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                                      : sizeof(struct sockaddr_in);
                memcpy(&a.sa, info->client_addr, len);
        }
        char buf[HTTP_ADDRESS_STRLEN];
        return strdup(http_address_format(&a, buf));
}

static enum MHD_Result count_authorization(void *userdata, enum MHD_ValueKind kind, const char *key,
                                           const char *value)
{
        unsigned *n = userdata;
        if (strcasecmp(key, MHD_HTTP_HEADER_AUTHORIZATION) == 0)
                (*n)++;
        return MHD_YES;
}

/* The bearer-token check (API-12, API-13, API-14): 0, or -EACCES with the cause logged at debug
 * level. */
static int request_authenticate(HttpRequest *req)
{
        HttpServer *s = req->listener->server;
        _cleanup_free_ char *cause = NULL;
        unsigned n = 0;
        int r;

        MHD_get_connection_values(req->connection, MHD_HEADER_KIND, count_authorization, &n);
        if (n > 1)
                r = error_set(&cause, -EACCES, "more than one Authorization header");
        else if (!s->secret)
                r = error_set(&cause, -EACCES, "no jwt secret configured");
        else {
                const char *authorization = MHD_lookup_connection_value(
                    req->connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
                _cleanup_free_ char *from_protocol = NULL;
                if (!authorization && req->route->websocket) {
                        /* CONS-3: a browser offers its token as a subprotocol instead. */
                        const char *bearer = NULL;
                        size_t len = 0;
                        (void)ws_protocols_find(
                            MHD_lookup_connection_value(req->connection, MHD_HEADER_KIND,
                                                        "Sec-WebSocket-Protocol"),
                            "", "bearer.", &bearer, &len);
                        if (bearer &&
                            strprintf(&from_protocol, "Bearer %.*s", (int)(len - strlen("bearer.")),
                                      bearer + strlen("bearer.")) < 0)
                                return -ENOMEM;
                        authorization = from_protocol;
                }
                /* Every request is checked; a token accepted before skips the HMAC and the
                 * JSON until its exp (jwt_verify_cached()). */
                r = http_auth_check_cached(s->tokens, s->secret, authorization, clock_now(s->clock),
                                           &req->subject, &cause);
        }
        if (r == -EACCES)
                log_line(LOG_LEVEL_DEBUG, 0, "http request refused", "path", req->parsed.path,
                         "peer", req->peer, "cause", cause, NULL);
        return r;
}

static bool media_type_is_json(const char *content_type)
{
        if (!content_type)
                return false;
        size_t n = strcspn(content_type, ";");
        while (n > 0 && (content_type[n - 1] == ' ' || content_type[n - 1] == '\t'))
                n--;
        return n == strlen("application/json") &&
               strncasecmp(content_type, "application/json", n) == 0;
}

/* 1 for "answered", or the failure to answer. */
static int answered(int r)
{
        return r < 0 ? r : 1;
}

typedef struct HeaderCount {
        unsigned content_length, transfer_encoding;
} HeaderCount;

static enum MHD_Result count_framing(void *userdata, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
        HeaderCount *n = userdata;
        if (strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH) == 0)
                n->content_length++;
        else if (strcasecmp(key, MHD_HTTP_HEADER_TRANSFER_ENCODING) == 0)
                n->transfer_encoding++;
        return MHD_YES;
}

/*
 * MHD cuts the request line into NUL-terminated method, target and version in place, and hands
 * them over as C strings, so a NUL the client sent silently shortens one of them ("/heal\0thz"
 * would be "/heal"). In the line the target ends where the version starts (one space, now a
 * NUL, before it), and the method is followed by its NUL and spaces only: anything else there
 * is a client's NUL. Only meaningful during the first on_access(), while MHD's buffer holds the
 * line.
 */
static bool request_line_has_nul(const HttpRequest *req, const char *method, const char *version)
{
        uintptr_t target = (uintptr_t)req->raw_target, m = (uintptr_t)method,
                  v = (uintptr_t)version;

        if (!req->raw_target || !method || !version)
                return false;
        if (*version && v > target && v - target <= HTTP_HEAD_MAX * 4 &&
            v - 1 - target != strlen(req->target))
                return true;
        if (m < target && target - m <= HTTP_HEAD_MAX * 4) {
                const char *p = method + strlen(method) + 1;
                for (; (uintptr_t)p < target; p++)
                        if (*p != ' ')
                                return true;
        }
        return false;
}

/*
 * Message framing (RFC 9112 6.1, 6.3) and our own size limits, before anything else: a request
 * whose end is ambiguous is refused, and its connection closed, so that no byte of it can be
 * taken for a request of its own. 0, 1 when an answer is set, < 0 on a failure of our own.
 */
static int request_check_framing(HttpRequest *req, const char *method, const char *version)
{
        struct MHD_Connection *c = req->connection;
        HeaderCount n = {0};
        const char *message = NULL;

        MHD_get_connection_values(c, MHD_HEADER_KIND, count_framing, &n);
        const char *te =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        if (request_line_has_nul(req, method, version))
                message = "NUL byte in request line";
        else if (n.content_length > 1)
                message = "more than one Content-Length header";
        else if (n.transfer_encoding > 1)
                message = "more than one Transfer-Encoding header";
        else if (te && n.content_length > 0)
                message = "Content-Length together with Transfer-Encoding";
        else if (te && strcasecmp(te, "chunked") != 0)
                message = "unsupported Transfer-Encoding";
        if (message) {
                req->close = true;
                return answered(
                    http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", "%s", message));
        }

        /* Below what MHD's memory pool takes (HTTP_POOL_SIZE), so that the answer is ours. */
        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
        if (strlen(req->target) > HTTP_TARGET_MAX) {
                req->close = true;
                return answered(http_reply_error(req, MHD_HTTP_URI_TOO_LONG, "invalid_request",
                                                 "request target longer than %d bytes",
                                                 HTTP_TARGET_MAX));
        }
        if (info && info->header_size > HTTP_HEAD_MAX) {
                req->close = true;
                return answered(http_reply_error(
                    req, MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE, "invalid_request",
                    "request head larger than %d bytes", HTTP_HEAD_MAX));
        }
        return 0;
}

/* Only these methods carry a body in our API; any other route refuses one unread (API-15). */
static bool route_takes_body(const HttpRoute *route)
{
        return streq(route->method, "POST") || streq(route->method, "PUT") ||
               streq(route->method, "PATCH");
}

/*
 * Everything decided from the headers alone. Returns 0 to read the body, 1 when an answer is
 * set, < 0 on a failure of our own.
 */
static int request_check_headers(HttpRequest *req, const char *method, const char *version)
{
        HttpServer *s = req->listener->server;
        struct MHD_Connection *c = req->connection;
        _cleanup_free_ char *error = NULL, *allow = NULL;
        uint64_t length = 0;
        size_t index;
        int r;

        if (!(req->method = strdup(method)) || !(req->peer = peer_describe(req->listener, c)))
                return -ENOMEM;

        const char *cl =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        const char *te =
            MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING);
        /* MHD has already refused a malformed length; this only reads it. */
        if (cl && parse_uint64(cl, &length) < 0)
                length = UINT64_MAX;
        req->body_declared = length > 0 || te;

        r = request_check_framing(req, method, version);
        if (r != 0)
                return r;

        r = http_target_parse(req->target, &req->parsed, &error);
        if (r == -EINVAL)
                return answered(
                    http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", "%s", error));
        if (r < 0)
                return r;

        r = http_route_find(s->routes, s->n_routes, method, req->parsed.segments,
                            req->parsed.n_segments, &index);
        if (r == -ENOENT)
                return answered(http_reply_error(req, MHD_HTTP_NOT_FOUND, "not_found",
                                                 "no route for %s", req->parsed.path));
        if (r == -EPERM) {
                r = http_route_allow(s->routes, s->n_routes, req->parsed.segments,
                                     req->parsed.n_segments, &allow);
                if (r < 0)
                        return r;
                return answered(reply_error_allow(req, allow,
                                                  "method %s not allowed on %s (allowed: %s)",
                                                  method, req->parsed.path, allow));
        }
        req->route = &s->routes[index];

        if (!req->route->public && request_authenticate(req) < 0)
                return answered(http_reply_error(req, MHD_HTTP_UNAUTHORIZED, "unauthorized",
                                                 HTTP_UNAUTHORIZED_MESSAGE));

        if (req->body_declared && !route_takes_body(req->route))
                return answered(http_reply_error(req, MHD_HTTP_CONTENT_TOO_LARGE,
                                                 "payload_too_large",
                                                 "this route takes no request body"));
        if (length > HTTP_BODY_MAX)
                return answered(
                    http_reply_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "payload_too_large",
                                     "request body larger than %d bytes", HTTP_BODY_MAX));
        if (req->body_declared && !media_type_is_json(MHD_lookup_connection_value(
                                      c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_TYPE)))
                return answered(http_reply_error(req, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE,
                                                 "unsupported_media_type",
                                                 "request body must be application/json"));

        r = http_route_check_query(req->route, req->parsed.query, req->parsed.n_query, &error);
        if (r == -EINVAL)
                return answered(
                    http_reply_error(req, MHD_HTTP_BAD_REQUEST, "invalid_request", "%s", error));

        r = http_route_params(req->route, req->parsed.segments, req->parsed.n_segments,
                              &req->params, &req->n_params);
        return r < 0 ? r : 0;
}

static enum MHD_Result request_begin(HttpRequest *req, const char *method, const char *version)
{
        int r = request_check_headers(req, method, version);
        req->raw_target = NULL; /* MHD may reuse its buffer from here on */
        if (r < 0)
                return request_fail(req, r);
        if (r > 0)
                return request_send(req);
        req->state = REQUEST_BODY;
        return MHD_YES;
}

/* Keeps up to HTTP_BODY_MAX bytes; past that counts and drops, and gives up past the limit. */
static enum MHD_Result request_receive(HttpRequest *req, const char *data, size_t size)
{
        req->received += size;
        if (req->received <= HTTP_BODY_MAX) {
                /* Grown as data arrives, never from what the client declares it will send. */
                if (req->body_size + size > req->body_allocated) {
                        size_t want = req->body_allocated ? req->body_allocated : 16384;
                        while (want < req->body_size + size)
                                want *= 2;
                        char *grown = realloc(req->body, want);
                        if (!grown)
                                return MHD_NO;
                        req->body = grown;
                        req->body_allocated = want;
                }
                memcpy(req->body + req->body_size, data, size);
                req->body_size += size;
                return MHD_YES;
        }

        /* Only chunked bodies get here: MHD holds a declared length to its word. */
        free(req->body);
        req->body = NULL;
        req->body_size = req->body_allocated = 0;
        if (req->received - HTTP_BODY_MAX > HTTP_DISCARD_MAX) {
                log_line(LOG_LEVEL_DEBUG, 0, "http request body discarded past the limit, closing",
                         "path", req->parsed.path, "peer", req->peer, NULL);
                return MHD_NO;
        }
        return MHD_YES;
}

static enum MHD_Result request_dispatch(HttpRequest *req)
{
        if (req->received > HTTP_BODY_MAX) {
                if (http_reply_error(req, MHD_HTTP_CONTENT_TOO_LARGE, "payload_too_large",
                                     "request body larger than %d bytes", HTTP_BODY_MAX) < 0)
                        return MHD_NO;
                return request_send(req);
        }

        req->state = REQUEST_HANDLING;
        int r = req->route->handler(req, req->listener->server->userdata);
        if (req->response)
                return request_send(req);
        if (req->suspend_wanted && r >= 0) {
                HttpListener *l = req->listener;
                req->state = REQUEST_SUSPENDED;
                req->suspended_next = l->suspended;
                if (l->suspended)
                        l->suspended->suspended_prev = req;
                l->suspended = req;
                MHD_suspend_connection(req->connection);
                return MHD_YES;
        }
        if (r >= 0) {
                log_error("http handler for %s %s neither answered nor suspended", req->method,
                          req->route->pattern);
                r = -EIO;
        }
        return request_fail(req, r);
}

/* ---- MHD callbacks --------------------------------------------------------------------------- */

/* MHD's first sight of a request: the raw target, before MHD decodes anything in it. */
static void *on_request_start(void *cls, const char *uri, struct MHD_Connection *c)
{
        HttpRequest *req = calloc(1, sizeof *req);
        if (!req)
                return NULL;
        *req = (HttpRequest){.n_ref = 1,
                             .listener = cls,
                             .connection = c,
                             .start = now_monotonic(),
                             .target = strdup(uri),
                             .raw_target = uri};
        if (!req->target)
                return http_request_unref(req);
        return req;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *data,
                                 size_t *data_size, void **con_cls)
{
        HttpListener *l = cls;
        HttpRequest *req = *con_cls;

        /* A server being freed only sends the answers already given (listener_flush()). */
        if (!req || (l->server->stopping && req->state != REQUEST_SUSPENDED))
                return MHD_NO;

        switch (req->state) {
        case REQUEST_NEW:
                return request_begin(req, method, version);
        case REQUEST_BODY:
                if (*data_size > 0) {
                        size_t n = *data_size;
                        *data_size = 0;
                        return request_receive(req, data, n);
                }
                return request_dispatch(req);
        case REQUEST_SUSPENDED:
                /* Resumed: by an answer, or by the server going away without one. */
                return req->response ? request_send(req) : MHD_NO;
        case REQUEST_HANDLING:
        case REQUEST_ANSWERED:
                break;
        }
        /* Body bytes after an early answer: that connection closes anyway. */
        return MHD_NO;
}

static const char *termination_reason(enum MHD_RequestTerminationCode toe)
{
        switch (toe) {
        case MHD_REQUEST_TERMINATED_COMPLETED_OK:
                return "completed";
        case MHD_REQUEST_TERMINATED_WITH_ERROR:
                return "error";
        case MHD_REQUEST_TERMINATED_TIMEOUT_REACHED:
                return "idle timeout";
        case MHD_REQUEST_TERMINATED_DAEMON_SHUTDOWN:
                return "shutdown";
        case MHD_REQUEST_TERMINATED_READ_ERROR:
                return "read error";
        case MHD_REQUEST_TERMINATED_CLIENT_ABORT:
                return "client abort";
        }
        return "unknown";
}

static void on_request_done(void *cls, struct MHD_Connection *c, void **con_cls,
                            enum MHD_RequestTerminationCode toe)
{
        HttpRequest *req = *con_cls;
        if (!req)
                return;
        *con_cls = NULL;

        /* MHD answered itself (a malformed header, say): still a response to count (API-20). */
        if (req->status == 0 && req->listener) {
                const union MHD_ConnectionInfo *info =
                    MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
                if (info && info->http_status >= 100 && info->http_status <= HTTP_STATUS_MAX) {
                        req->status = info->http_status;
                        req->listener->server->responses[req->status]++;
                }
        }

        char status[16] = "none", duration[DURATION_STRLEN];
        if (req->status > 0)
                snprintf(status, sizeof status, "%u", req->status);
        format_duration(now_monotonic() - req->start, duration);
        log_line(LOG_LEVEL_DEBUG, 0, "http request", "method", req->method ? req->method : "-",
                 "path", req->parsed.path ? req->parsed.path : req->target, "status", status,
                 "duration", duration, "peer", req->peer, "end",
                 toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? NULL : termination_reason(toe), NULL);

        suspended_remove(req);
        if (req->stream) {
                stream_close(req->stream);
                req->stream = http_stream_unref(req->stream);
        }
        if (req->upgrade)
                request_websocket_end(req, toe == MHD_REQUEST_TERMINATED_COMPLETED_OK);
        if (req->flushing && req->listener)
                req->listener->n_flushing--;
        req->flushing = false;
        req->listener = NULL;
        req->connection = NULL;
        http_request_unref(req);
}

static void on_mhd_log(void *cls, const char *fmt, va_list ap) _printf_(2, 0);
static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
        HttpListener *l = cls;
        char message[512];
        vsnprintf(message, sizeof message, fmt, ap);
        /* MHD ends its messages with a newline; the log line adds its own. */
        strchomp(message);
        log_line(LOG_LEVEL_DEBUG, 0, "libmicrohttpd", "listener", l->kind, "message", message,
                 NULL);
}

static void peer_closed_remove(HttpConnection *hc)
{
        if (!hc->peer_closed)
                return;
        if (hc->peer_closed_prev)
                hc->peer_closed_prev->peer_closed_next = hc->peer_closed_next;
        else
                hc->listener->peer_closed = hc->peer_closed_next;
        if (hc->peer_closed_next)
                hc->peer_closed_next->peer_closed_prev = hc->peer_closed_prev;
        hc->peer_closed_prev = hc->peer_closed_next = NULL;
        hc->peer_closed = false;
}

static int on_peer_hup(sd_event_source *source, int fd, uint32_t revents, void *userdata)
{
        HttpConnection *hc = userdata;
        HttpListener *l = hc->listener;

        (void)sd_event_source_set_enabled(source, SD_EVENT_OFF);
        hc->hup_seen = true;
        /* A streamed answer may be suspended, where MHD would never see the end: it ends now. */
        if (hc->stream) {
                hc->stream->peer_gone = true;
                stream_resume(hc->stream);
        }
        if (!hc->peer_closed) {
                hc->peer_closed = true;
                hc->peer_closed_next = l->peer_closed;
                if (l->peer_closed)
                        l->peer_closed->peer_closed_prev = hc;
                l->peer_closed = hc;
        }
        listener_wake(l);
        return 0;
}

/* After a run: a closed peer whose bytes MHD has all read gets its end seen by MHD's next. */
static void listener_check_peers(HttpListener *l)
{
        HttpConnection *next;
        for (HttpConnection *hc = l->peer_closed; hc; hc = next) {
                int unread = 0;
                next = hc->peer_closed_next;
                if (ioctl(hc->fd, FIONREAD, &unread) == 0 && unread > 0)
                        continue; /* MHD reads on first (or is busy with a suspended request) */
                peer_closed_remove(hc);
                (void)shutdown(hc->fd, SHUT_RD);
        }
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
        HttpListener *l = cls;
        HttpConnection *hc = *socket_context;

        if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
                if (!hc)
                        return;
                peer_closed_remove(hc);
                if (hc->stream)
                        hc->stream->hc = NULL;
                sd_event_source_disable_unref(hc->hup);
                free(hc);
                *socket_context = NULL;
                return;
        }

        const union MHD_ConnectionInfo *info =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (!info || !(hc = calloc(1, sizeof *hc)))
                return; /* unwatched: MHD's idle timeout still ends it */
        *hc = (HttpConnection){.listener = l, .fd = info->connect_fd};
        if (sd_event_add_io(l->server->event, &hc->hup, hc->fd, EPOLLRDHUP, on_peer_hup, hc) < 0) {
                free(hc);
                return;
        }
        *socket_context = hc;
}

/* ---- listeners on the loop ------------------------------------------------------------------- */

/* Re-arms the timer from MHD_get_timeout(): MHD needs a run by then even without I/O. */
static void listener_arm(HttpListener *l)
{
        MHD_UNSIGNED_LONG_LONG ms;
        uint64_t now;
        int r;

        if (MHD_get_timeout(l->daemon, &ms) != MHD_YES) {
                r = sd_event_source_set_enabled(l->timer, SD_EVENT_OFF);
        } else {
                r = sd_event_now(l->server->event, CLOCK_MONOTONIC, &now);
                if (r >= 0) {
                        uint64_t usec =
                            ms >= (UINT64_MAX - 1 - now) / 1000 ? UINT64_MAX - 1 : now + ms * 1000;
                        r = sd_event_source_set_time(l->timer, usec);
                }
                if (r >= 0)
                        r = sd_event_source_set_enabled(l->timer, SD_EVENT_ONESHOT);
        }
        if (r < 0)
                log_error_errno(r, "http %s listener: arming its timer failed: %m", l->kind);
}

static unsigned listener_connections(HttpListener *l)
{
        const union MHD_DaemonInfo *info =
            MHD_get_daemon_info(l->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
        return info ? info->num_connections : 0;
}

/* Asks for an MHD run at once, e.g. after a resume, which MHD only notices in its next run. */
static void listener_wake(HttpListener *l)
{
        if (l->freeing)
                return;
        l->woken = true;
        /* Once the loop has finished, freeing the server sends what is due (listener_flush()). */
        if (sd_event_get_state(l->server->event) == SD_EVENT_FINISHED)
                return;
        int r = sd_event_source_set_time(l->timer, 1);
        if (r >= 0)
                r = sd_event_source_set_enabled(l->timer, SD_EVENT_ONESHOT);
        if (r < 0)
                log_error_errno(r, "http %s listener: waking it failed: %m", l->kind);
}

static void listener_run(HttpListener *l)
{
        unsigned before = listener_connections(l);
        l->woken = false;
        if (MHD_run(l->daemon) != MHD_YES)
                log_line(LOG_LEVEL_DEBUG, 0, "MHD_run failed", "listener", l->kind, NULL);
        /*
         * At the limit MHD takes its listening socket out of epoll and puts it back only at the
         * start of a run. A run that freed a place is therefore followed by another at once;
         * otherwise clients queued in the backlog wait for the next timeout (up to 10 s).
         */
        if (before >= HTTP_CONNECTIONS_MAX && listener_connections(l) < HTTP_CONNECTIONS_MAX)
                listener_wake(l);
        listener_check_peers(l);
        /* A handler that answered a suspended request during this run asked for the next. */
        if (!l->woken)
                listener_arm(l);
}

static int on_io(sd_event_source *source, int fd, uint32_t revents, void *userdata)
{
        listener_run(userdata);
        return 0;
}

static int on_timer(sd_event_source *source, uint64_t usec, void *userdata)
{
        listener_run(userdata);
        return 0;
}

/*
 * Runs MHD, without the loop, until the answers given to suspended requests are sent (OPS-3:
 * the 503s of a shutdown reach their clients), for at most HTTP_FLUSH_USEC.
 */
static void listener_flush(HttpListener *l)
{
        const union MHD_DaemonInfo *info = MHD_get_daemon_info(l->daemon, MHD_DAEMON_INFO_EPOLL_FD);
        nsec_t deadline = now_monotonic() + HTTP_FLUSH_USEC * NSEC_PER_USEC;

        while (l->n_flushing > 0 && info) {
                (void)MHD_run(l->daemon);
                nsec_t now = now_monotonic();
                if (l->n_flushing == 0 || now >= deadline)
                        break;
                struct pollfd p = {.fd = info->epoll_fd, .events = POLLIN};
                (void)poll(&p, 1, 10);
        }
        if (l->n_flushing > 0)
                log_line(LOG_LEVEL_DEBUG, 0, "http answers not sent before the server stopped",
                         "listener", l->kind, NULL);
}

static void listener_free(HttpListener *l)
{
        if (!l)
                return;
        l->freeing = true;
        sd_event_source_disable_unref(l->io);
        sd_event_source_disable_unref(l->timer);
        if (l->daemon)
                listener_flush(l);
        if (l->daemon) {
                /* MHD must not be stopped with suspended connections: resume them unanswered,
                 * and let one last run close them. */
                bool resumed = false;
                while (l->upgrades) {
                        /* Upgraded connections must be given back before MHD stops (the
                         * session's end releases its handle); one not upgraded yet just ends. */
                        UpgradeHandle *h = l->upgrades;
                        bool upgraded = h->urh;
                        http_websocket_abort(h->ws);
                        if (!upgraded)
                                upgrade_drop(h);
                        resumed = true;
                }
                while (l->suspended_streams) {
                        /* Its sources are gone: no stream_resume(), which would wake them. */
                        HttpStream *st = l->suspended_streams;
                        st->peer_gone = true;
                        stream_suspended_remove(st);
                        MHD_resume_connection(st->req->connection);
                        resumed = true;
                }
                while (l->suspended) {
                        HttpRequest *req = l->suspended;
                        suspended_remove(req);
                        MHD_resume_connection(req->connection);
                        resumed = true;
                }
                if (resumed)
                        (void)MHD_run(l->daemon);
                MHD_stop_daemon(l->daemon);
        }
        free(l);
}

void http_server_stop_listening(HttpServer *s)
{
        HttpListener *listeners[] = {s->tcp, s->unix_socket};

        for (size_t i = 0; i < ELEMENTSOF(listeners); i++) {
                if (!listeners[i] || !listeners[i]->daemon)
                        continue;
                /* Single-threaded external polling: quiescing needs no inter-thread channel. */
                MHD_socket fd = MHD_quiesce_daemon(listeners[i]->daemon);
                if (fd != MHD_INVALID_SOCKET)
                        close(fd);
        }
}

/* Takes fd: MHD owns it from MHD_start_daemon() on, whatever the outcome. */
static int listener_new(HttpServer *s, const char *kind, int fd, unsigned idle_timeout,
                        HttpListener **ret)
{
        HttpListener *l = calloc(1, sizeof *l);
        if (!l) {
                close(fd);
                return -ENOMEM;
        }
        *l = (HttpListener){.server = s, .kind = kind};

        l->daemon = MHD_start_daemon(
            MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME | MHD_ALLOW_UPGRADE | MHD_USE_ERROR_LOG, 0,
            NULL, NULL, on_access, l, MHD_OPTION_EXTERNAL_LOGGER, on_mhd_log, l,
            MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned)HTTP_CONNECTIONS_MAX, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
            (size_t)HTTP_POOL_SIZE, MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout,
            MHD_OPTION_URI_LOG_CALLBACK, on_request_start, l, MHD_OPTION_NOTIFY_COMPLETED,
            on_request_done, l, MHD_OPTION_NOTIFY_CONNECTION, on_connection, l,
            MHD_OPTION_STRICT_FOR_CLIENT, (int)1, MHD_OPTION_END);
        if (!l->daemon) {
                free(l);
                return -EIO;
        }

        const union MHD_DaemonInfo *info = MHD_get_daemon_info(l->daemon, MHD_DAEMON_INFO_EPOLL_FD);
        int r = info ? 0 : -EIO;
        if (r >= 0)
                r = sd_event_add_io(s->event, &l->io, info->epoll_fd, EPOLLIN, on_io, l);
        if (r >= 0)
                r = sd_event_add_time(s->event, &l->timer, CLOCK_MONOTONIC, 1, 1000, on_timer, l);
        if (r < 0) {
                listener_free(l);
                return r;
        }
        listener_arm(l);
        *ret = l;
        return 0;
}

/* ---- the server ------------------------------------------------------------------------------ */

HttpServer *http_server_free(HttpServer *s)
{
        if (!s)
                return NULL;
        s->stopping = true;
        listener_free(s->tcp);
        listener_free(s->unix_socket);
        if (s->unix_path) {
                /* Only our own socket: another server may have replaced it since. */
                struct stat st;
                if (lstat(s->unix_path, &st) == 0 && st.st_dev == s->unix_dev &&
                    st.st_ino == s->unix_ino)
                        (void)unlink(s->unix_path);
                free(s->unix_path);
        }
        sd_event_unref(s->event);
        jwt_token_cache_free(s->tokens);
        free(s);
        return NULL;
}

static int server_listen_tcp(HttpServer *s, const char *listen, unsigned idle_timeout, char **error)
{
        HttpAddress a;
        int fd, r = http_address_parse(listen, true, &a);
        if (r < 0)
                return error_set(error, r, "listen %s: not an address:port literal", listen);
        r = http_listen_tcp(&a, &fd, &s->tcp_address);
        if (r >= 0)
                r = listener_new(s, "tcp", fd, idle_timeout, &s->tcp);
        if (r < 0)
                return error_set(error, r, "listen %s: %s", listen, strerror(-r));
        s->has_tcp = true;
        return 0;
}

static int server_listen_unix(HttpServer *s, const char *path, mode_t mode, unsigned idle_timeout,
                              char **error)
{
        struct stat st;
        int fd, r = http_listen_unix(path, mode, &fd, &st);
        if (r >= 0) {
                s->unix_dev = st.st_dev;
                s->unix_ino = st.st_ino;
                if (!(s->unix_path = strdup(path))) {
                        (void)unlink(path);
                        close(fd);
                        r = -ENOMEM;
                }
        }
        if (r >= 0)
                r = listener_new(s, "unix", fd, idle_timeout, &s->unix_socket);
        if (r < 0)
                return error_set(error, r, "unix_socket %s: %s", path, strerror(-r));
        return 0;
}

int http_server_new(sd_event *event, const HttpServerConfig *config, HttpServer **ret, char **error)
{
        bool tcp = config->listen && *config->listen;
        bool unix_socket = config->unix_socket && *config->unix_socket;
        unsigned idle = config->idle_timeout_sec ? config->idle_timeout_sec : HTTP_IDLE_TIMEOUT_SEC;

        if (!tcp && !unix_socket)
                return error_set(error, -EINVAL, "no listener configured");
        int r = http_routes_validate(config->routes, config->n_routes, error);
        if (r < 0)
                return r;

        _cleanup_http_server_ HttpServer *s = calloc(1, sizeof *s);
        if (!s)
                return error_set_oom(error);
        *s = (HttpServer){
            .event = sd_event_ref(event),
            .routes = config->routes,
            .n_routes = config->n_routes,
            .secret = config->secret,
            .clock = config->clock ? config->clock : &clock_realtime,
            .userdata = config->userdata,
        };
        r = jwt_token_cache_new(&s->tokens);
        if (r < 0)
                return error_set(error, r, "bearer token cache: %s", strerror(-r));

        if (tcp && (r = server_listen_tcp(s, config->listen, idle, error)) < 0)
                return r;
        if (unix_socket && (r = server_listen_unix(s, config->unix_socket, config->unix_socket_mode,
                                                   idle, error)) < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

int http_server_get_tcp_address(const HttpServer *s, HttpAddress *ret)
{
        if (!s->has_tcp)
                return -ENOENT;
        *ret = s->tcp_address;
        return 0;
}

uint64_t http_server_get_response_count(const HttpServer *s, unsigned status)
{
        return status <= HTTP_STATUS_MAX ? s->responses[status] : 0;
}

int http_server_write_metrics(const HttpServer *s, MetricsWriter *w)
{
        /* The statuses API-2 and API-11 name: their series exist from start-up (MET-3). */
        static const unsigned expected[] = {200, 201, 204, 400, 401, 404, 405,
                                            409, 413, 415, 500, 501, 503};
        bool exported[HTTP_STATUS_MAX + 1] = {false};
        for (size_t i = 0; i < ELEMENTSOF(expected); i++)
                exported[expected[i]] = true;

        int r = metrics_family(w, "vgpud_http_requests_total", METRIC_COUNTER,
                               "HTTP responses by status code.");
        for (unsigned code = 100; code <= HTTP_STATUS_MAX && r >= 0; code++) {
                if (!exported[code] && s->responses[code] == 0)
                        continue;
                char label[8];
                snprintf(label, sizeof label, "%u", code);
                r = metrics_sample_u64(w, s->responses[code], "code", label, NULL);
        }
        return r;
}
