/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A WebSocket session on the loop (CONS-3): the upgraded connection's frames in and out, the
 * keep-alive pings, and the closing handshake. The framing itself is websocket.c's; the
 * upgrade, which needs libmicrohttpd, is http-server.c's.
 *
 * Nothing here blocks: the socket is non-blocking, reads take what is there, writes what the
 * socket takes, and the rest waits for EPOLLOUT within a bounded queue. Callbacks into the
 * owner run from the loop, never from inside one of the owner's own calls (closed() is
 * deferred), so an owner may call any function here from them.
 */
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "http-internal.h"
#include "http/websocket.h"

/* Room above max_queued for the control frames (pongs, the close) that must get out. */
#define CONTROL_SLACK (4 * (WS_HEADER_MAX + WS_CONTROL_MAX))
#define INPUT_CAP (WS_HEADER_MAX + HTTP_WEBSOCKET_FRAME_MAX)
#define WS_USEC_PER_SEC UINT64_C(1000000) /* sd-event's clocks count microseconds */

struct HttpWebSocket {
        unsigned n_ref;
        sd_event *event;
        HttpWebSocketConfig config;
        int fd; /* -1 until upgraded; MHD's: closed through release() */
        void (*release)(void *handle);
        void *handle;
        sd_event_source *io, *ping, *defer;
        WsDecoder decoder;
        uint8_t *in;
        size_t in_len;
        uint8_t *out;
        size_t out_len;
        bool paused;  /* the owner takes no frames for now */
        bool closing; /* our close frame is queued: close once it is out */
        bool over;    /* the connection is given back (or never came) */
        bool opened_due, closed_told;
        uint64_t last_heard; /* CLOCK_MONOTONIC usec of the last bytes from the client */
};

HttpWebSocket *http_websocket_ref(HttpWebSocket *ws)
{
        ws->n_ref++;
        return ws;
}

HttpWebSocket *http_websocket_unref(HttpWebSocket *ws)
{
        if (!ws || --ws->n_ref > 0)
                return NULL;
        sd_event_source_disable_unref(ws->io);
        sd_event_source_disable_unref(ws->ping);
        sd_event_source_disable_unref(ws->defer);
        sd_event_unref(ws->event);
        free(ws->in);
        free(ws->out);
        free(ws);
        return NULL;
}

HttpWebSocket *http_websocket_new(sd_event *event, const HttpWebSocketConfig *config)
{
        HttpWebSocket *ws = calloc(1, sizeof *ws);
        if (!ws)
                return NULL;
        *ws = (HttpWebSocket){.n_ref = 1,
                              .event = sd_event_ref(event),
                              .config = *config,
                              .fd = -1,
                              .decoder = {.server = true, .max_frame = HTTP_WEBSOCKET_FRAME_MAX}};
        ws->in = malloc(INPUT_CAP);
        ws->out = malloc(config->max_queued + CONTROL_SLACK);
        if (!ws->in || !ws->out)
                return http_websocket_unref(ws);
        return ws;
}

static uint64_t now_usec(const HttpWebSocket *ws)
{
        uint64_t t = 0;
        (void)sd_event_now(ws->event, CLOCK_MONOTONIC, &t);
        return t;
}

static void on_defer(HttpWebSocket *ws);

static int on_defer_event(sd_event_source *s, void *userdata)
{
        HttpWebSocket *ws = userdata;
        ws->defer = sd_event_source_disable_unref(ws->defer);
        http_websocket_ref(ws);
        on_defer(ws);
        http_websocket_unref(ws);
        return 0;
}

/* Work for the next loop iteration: closed() to tell, or buffered frames to take. */
static void schedule(HttpWebSocket *ws)
{
        if (ws->defer)
                return;
        if (sd_event_add_defer(ws->event, &ws->defer, on_defer_event, ws) < 0)
                ws->defer = NULL; /* out of memory: the next event on the socket does it */
}

/* The connection goes back to MHD; the owner hears it on the loop. */
static void finish(HttpWebSocket *ws)
{
        if (ws->over)
                return;
        ws->over = true;
        ws->io = sd_event_source_disable_unref(ws->io);
        ws->ping = sd_event_source_disable_unref(ws->ping);
        if (ws->release) {
                void (*release)(void *) = ws->release;
                ws->release = NULL;
                release(ws->handle);
        }
        ws->fd = -1;
        schedule(ws);
}

static void update_events(HttpWebSocket *ws)
{
        if (!ws->io)
                return;
        uint32_t events = EPOLLRDHUP;
        if (!ws->paused && !ws->closing)
                events |= EPOLLIN;
        if (ws->out_len > 0)
                events |= EPOLLOUT;
        if (sd_event_source_set_io_events(ws->io, events) < 0)
                finish(ws);
}

/* Writes what the socket takes; the rest waits for EPOLLOUT. After a close frame, the end. */
static void flush(HttpWebSocket *ws)
{
        while (ws->out_len > 0) {
                ssize_t n = send(ws->fd, ws->out, ws->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        break;
                if (n <= 0) {
                        finish(ws);
                        return;
                }
                memmove(ws->out, ws->out + n, ws->out_len - (size_t)n);
                ws->out_len -= (size_t)n;
        }
        if (ws->closing && ws->out_len == 0) {
                finish(ws);
                return;
        }
        update_events(ws);
}

/* Queues a frame; control frames may use the slack above max_queued. */
static int queue_frame(HttpWebSocket *ws, uint8_t opcode, const void *data, size_t size)
{
        uint8_t header[WS_HEADER_MAX];
        size_t h = ws_header_build(header, true, opcode, size, NULL);
        size_t limit = ws->config.max_queued + ((opcode & 0x8) ? CONTROL_SLACK : 0);
        if (ws->out_len + h + size > limit)
                return -ENOBUFS;
        memcpy(ws->out + ws->out_len, header, h);
        if (size > 0)
                memcpy(ws->out + ws->out_len + h, data, size);
        ws->out_len += h + size;
        return 0;
}

static void close_with(HttpWebSocket *ws, uint16_t code, const char *reason)
{
        if (ws->over || ws->closing || ws->fd < 0)
                return;
        uint8_t payload[WS_CONTROL_MAX];
        size_t n = ws_close_payload(payload, code, reason);
        ws->closing = true;
        if (queue_frame(ws, WS_OPCODE_CLOSE, payload, n) < 0) {
                finish(ws); /* not even a close frame fits: the client is not reading */
                return;
        }
        flush(ws);
}

void http_websocket_close(HttpWebSocket *ws, uint16_t code, const char *reason)
{
        close_with(ws, code, reason);
}

int http_websocket_send(HttpWebSocket *ws, const void *data, size_t size)
{
        if (ws->over || ws->closing || ws->fd < 0)
                return -EPIPE;
        if (size > HTTP_WEBSOCKET_FRAME_MAX)
                return -EMSGSIZE;
        int r = queue_frame(ws, WS_OPCODE_BINARY, data, size);
        if (r < 0) {
                /* A client that lets max_queued pile up is not reading: it goes. */
                finish(ws);
                return r;
        }
        flush(ws);
        return 0;
}

/* Takes the frames that are in; stops at a pause, a close or the end. */
static void take_frames(HttpWebSocket *ws)
{
        size_t pos = 0;
        while (!ws->over && !ws->closing && !ws->paused && pos < ws->in_len) {
                WsEvent e;
                size_t n = ws_decode(&ws->decoder, ws->in + pos, ws->in_len - pos, &e, NULL);
                if (e.kind == WS_EVENT_NONE)
                        break;
                if (e.kind == WS_EVENT_ERROR) {
                        close_with(ws, e.code, e.why);
                        break;
                }
                pos += n;
                switch (e.kind) {
                case WS_EVENT_DATA:
                        if (e.size > 0 && ws->config.data)
                                ws->config.data(ws, e.data, e.size, ws->config.userdata);
                        break;
                case WS_EVENT_PING:
                        if (queue_frame(ws, WS_OPCODE_PONG, e.data, e.size) < 0)
                                finish(ws);
                        else
                                flush(ws);
                        break;
                case WS_EVENT_CLOSE:
                        /* The closing handshake: the client's code back (RFC 6455 5.5.1). */
                        close_with(ws, e.code ? e.code : WS_CLOSE_NORMAL, NULL);
                        break;
                default:
                        break;
                }
        }
        if (!ws->over) {
                memmove(ws->in, ws->in + pos, ws->in_len - pos);
                ws->in_len -= pos;
        }
}

static void read_input(HttpWebSocket *ws)
{
        while (!ws->over && !ws->closing && !ws->paused) {
                if (ws->in_len == INPUT_CAP) {
                        /* A whole largest frame fits, so the decoder has refused before this. */
                        close_with(ws, WS_CLOSE_TOO_BIG, "frame too big");
                        return;
                }
                ssize_t n = recv(ws->fd, ws->in + ws->in_len, INPUT_CAP - ws->in_len, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN)
                        return;
                if (n <= 0) {
                        finish(ws); /* the client has gone without a close frame */
                        return;
                }
                ws->last_heard = now_usec(ws);
                ws->in_len += (size_t)n;
                take_frames(ws);
        }
}

static int on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
        HttpWebSocket *ws = http_websocket_ref(userdata);
        if (revents & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
                if (ws->paused || ws->closing) {
                        /* Not reading now: a hang-up still ends it. */
                        if (revents & (EPOLLRDHUP | EPOLLHUP | EPOLLERR))
                                finish(ws);
                } else
                        read_input(ws);
        }
        if (!ws->over && (revents & EPOLLOUT))
                flush(ws);
        http_websocket_unref(ws);
        return 0;
}

static int on_ping(sd_event_source *s, uint64_t usec, void *userdata)
{
        HttpWebSocket *ws = http_websocket_ref(userdata);
        if (usec >= ws->last_heard + HTTP_WEBSOCKET_DEAD_SEC * WS_USEC_PER_SEC)
                close_with(ws, WS_CLOSE_POLICY, "no answer to pings");
        else if (queue_frame(ws, WS_OPCODE_PING, NULL, 0) < 0)
                finish(ws);
        else
                flush(ws);
        if (!ws->over && ws->ping &&
            (sd_event_source_set_time(ws->ping, usec + HTTP_WEBSOCKET_PING_SEC * WS_USEC_PER_SEC) <
                 0 ||
             sd_event_source_set_enabled(ws->ping, SD_EVENT_ON) < 0))
                finish(ws);
        http_websocket_unref(ws);
        return 0;
}

void http_websocket_upgraded(HttpWebSocket *ws, int fd, const char *extra, size_t extra_size,
                             void (*release)(void *handle), void *handle)
{
        ws->release = release;
        ws->handle = handle;
        if (ws->over) {
                /* Aborted meanwhile (the owner closed it first): the connection goes at once. */
                ws->over = false;
                finish(ws);
                return;
        }
        ws->fd = fd;
        ws->last_heard = now_usec(ws);
        int flags = fcntl(fd, F_GETFL);
        int r = flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 ? -errno : 0;
        if (r >= 0 && extra_size > INPUT_CAP)
                r = -E2BIG;
        if (r >= 0)
                r = sd_event_add_io(ws->event, &ws->io, fd, EPOLLIN | EPOLLRDHUP, on_io, ws);
        if (r >= 0)
                r = sd_event_add_time_relative(ws->event, &ws->ping, CLOCK_MONOTONIC,
                                               HTTP_WEBSOCKET_PING_SEC * WS_USEC_PER_SEC, 0,
                                               on_ping, ws);
        if (r < 0) {
                finish(ws);
                return;
        }
        if (extra_size > 0) {
                memcpy(ws->in, extra, extra_size);
                ws->in_len = extra_size;
        }
        /* opened(), then the frames that came with the request, on the loop. */
        ws->opened_due = true;
        schedule(ws);
}

static void on_defer(HttpWebSocket *ws)
{
        if (ws->over) {
                if (!ws->closed_told) {
                        ws->closed_told = true;
                        if (ws->config.closed)
                                ws->config.closed(ws, ws->config.userdata);
                }
                return;
        }
        if (ws->opened_due) {
                ws->opened_due = false;
                if (ws->config.opened)
                        ws->config.opened(ws, ws->config.userdata);
                if (ws->over)
                        return; /* closed by the owner meanwhile: told next time round */
        }
        take_frames(ws);
        if (!ws->over && !ws->paused && !ws->closing)
                update_events(ws);
}

void http_websocket_pause(HttpWebSocket *ws, bool paused)
{
        if (ws->paused == paused || ws->over)
                return;
        ws->paused = paused;
        update_events(ws);
        if (!paused && ws->in_len > 0)
                schedule(ws); /* frames that came in before the pause */
}

void http_websocket_abort(HttpWebSocket *ws)
{
        finish(ws);
        /* Once the loop is over, nothing would run the deferred call: tell the owner now. */
        if (sd_event_get_state(ws->event) == SD_EVENT_FINISHED) {
                ws->defer = sd_event_source_disable_unref(ws->defer);
                on_defer(ws);
        }
}
