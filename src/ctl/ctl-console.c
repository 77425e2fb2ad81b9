/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * `vgpuctl instances console ID --attach` (CONS-4): the client side of the console's WebSocket
 * (CONS-3). libcurl makes the connection (TCP or the Unix socket, as every other command) and
 * then steps aside (CURLOPT_CONNECT_ONLY); the upgrade and the frames are RFC 6455 as
 * src/http/websocket.c writes it for both ends.
 *
 * The terminal goes into raw mode while attached, so that every key reaches the guest, and is
 * put back on every way out: Ctrl-] (detach), the console closing, the connection dropping,
 * SIGTERM, SIGHUP, SIGINT or SIGQUIT (read from a signalfd, so they end the loop rather than
 * the process), and any error. Nothing is printed between the guest's bytes but vgpuctl's own
 * few lines, on the error stream, each ending in "\r\n" so that they read right in raw mode.
 */
#include <curl/curl.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <termios.h>
#include <unistd.h>

#include "config.h"
#include "ctl.h"
#include "http/websocket.h"

#define SUBPROTOCOL "vgpud.console.v1"
#define DETACH_KEY 0x1D /* Ctrl-] */
#define HEAD_MAX (16 * 1024)
#define FRAME_MAX (64 * 1024) /* the daemon's HTTP_WEBSOCKET_FRAME_MAX */
#define INPUT_CAP (WS_HEADER_MAX + FRAME_MAX)

typedef struct Session {
        const CtlEnv *env;
        CURL *curl;
        int sock;
        int in_fd, out_fd;
        uint8_t *in; /* from the daemon, not yet decoded */
        size_t in_len;
        WsDecoder decoder;
        /* The terminal as it was: put back whatever happens. */
        bool raw;
        struct termios saved;
        int sigfd;
        sigset_t old_mask;
        bool mask_saved;
} Session;

static void session_done(Session *s)
{
        if (s->raw) {
                (void)tcsetattr(s->in_fd, TCSAFLUSH, &s->saved);
                s->raw = false;
        }
        if (s->sigfd >= 0)
                close(s->sigfd);
        if (s->mask_saved)
                (void)sigprocmask(SIG_SETMASK, &s->old_mask, NULL);
        if (s->curl)
                curl_easy_cleanup(s->curl);
        free(s->in);
}

/* vgpuctl's own words while attached: on the error stream, raw-mode line ends. */
static void say(const Session *s, const char *fmt, ...) _printf_(2, 3);
static void say(const Session *s, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vfprintf(s->env->err, fmt, ap);
        va_end(ap);
        fputs("\r\n", s->env->err);
        fflush(s->env->err);
}

/* Sends all of buf through libcurl, waiting for the socket when it is full. */
static int send_all(Session *s, const void *buf, size_t n)
{
        const char *p = buf;
        while (n > 0) {
                size_t sent = 0;
                CURLcode c = curl_easy_send(s->curl, p, n, &sent);
                if (c == CURLE_AGAIN) {
                        struct pollfd pfd = {.fd = s->sock, .events = POLLOUT};
                        if (poll(&pfd, 1, CTL_TIMEOUT_MS) <= 0)
                                return -ETIMEDOUT;
                        continue;
                }
                if (c != CURLE_OK)
                        return -ECOMM;
                p += sent;
                n -= sent;
        }
        return 0;
}

/* One masked frame (RFC 6455 5.3: a client masks every frame, with a fresh key). */
static int send_frame(Session *s, uint8_t opcode, const void *data, size_t size)
{
        uint8_t key[4];
        if (getrandom(key, sizeof key, 0) != sizeof key)
                return -EIO;
        _cleanup_free_ uint8_t *f = malloc(WS_HEADER_MAX + size);
        if (!f)
                return -ENOMEM;
        size_t h = ws_header_build(f, true, opcode, size, key);
        if (size > 0)
                memcpy(f + h, data, size);
        ws_mask(f + h, size, key, 0);
        return send_all(s, f, h + size);
}

static int send_close(Session *s, uint16_t code)
{
        uint8_t payload[WS_CONTROL_MAX];
        size_t n = ws_close_payload(payload, code, NULL);
        return send_frame(s, WS_OPCODE_CLOSE, payload, n);
}

static int connect_daemon(Session *s, const CtlArgs *a, char **error)
{
        _cleanup_free_ char *url = NULL;
        if (strprintf(&url, "%s/", a->unix_socket ? "http://localhost" : a->url) < 0)
                return error_set_oom(error);
        s->curl = curl_easy_init();
        if (!s->curl)
                return error_set_oom(error);
        CURLcode c = curl_easy_setopt(s->curl, CURLOPT_URL, url);
        if (c == CURLE_OK && a->unix_socket)
                c = curl_easy_setopt(s->curl, CURLOPT_UNIX_SOCKET_PATH, a->unix_socket);
        if (c == CURLE_OK)
                c = curl_easy_setopt(s->curl, CURLOPT_PROTOCOLS_STR, "http,https");
        if (c == CURLE_OK)
                c = curl_easy_setopt(s->curl, CURLOPT_CONNECT_ONLY, 1L);
        if (c == CURLE_OK)
                c = curl_easy_setopt(s->curl, CURLOPT_NOSIGNAL, 1L);
        if (c == CURLE_OK)
                c = curl_easy_setopt(s->curl, CURLOPT_CONNECTTIMEOUT_MS,
                                     s->env->connect_timeout_ms);
        if (c == CURLE_OK)
                c = curl_easy_perform(s->curl);
        curl_socket_t sock = CURL_SOCKET_BAD;
        if (c == CURLE_OK)
                c = curl_easy_getinfo(s->curl, CURLINFO_ACTIVESOCKET, &sock);
        if (c != CURLE_OK || sock == CURL_SOCKET_BAD)
                return error_set(error, -ECOMM, "cannot reach vgpud at %s%s: %s",
                                 a->unix_socket ? "unix:" : "",
                                 a->unix_socket ? a->unix_socket : a->url, curl_easy_strerror(c));
        s->sock = sock;
        return 0;
}

/* Reads at least up to the end of the response head into s->in; returns the head's length. */
static int read_head(Session *s, size_t *ret, char **error)
{
        for (;;) {
                uint8_t *end = s->in_len >= 4 ? memmem(s->in, s->in_len, "\r\n\r\n", 4) : NULL;
                if (end) {
                        *ret = (size_t)(end - s->in) + 4;
                        return 0;
                }
                if (s->in_len >= HEAD_MAX)
                        return error_set(error, -EBADMSG, "response head larger than %d bytes",
                                         HEAD_MAX);
                size_t got = 0;
                CURLcode c = curl_easy_recv(s->curl, s->in + s->in_len, HEAD_MAX - s->in_len, &got);
                if (c == CURLE_AGAIN) {
                        struct pollfd pfd = {.fd = s->sock, .events = POLLIN};
                        if (poll(&pfd, 1, CTL_TIMEOUT_MS) <= 0)
                                return error_set(error, -ETIMEDOUT, "no answer from vgpud");
                        continue;
                }
                if (c != CURLE_OK || got == 0)
                        return error_set(error, -ECOMM, "vgpud closed the connection");
                s->in_len += got;
        }
}

/* A header's value in a response head (names case-insensitive), or NULL. */
static char *head_value(const char *head, const char *name)
{
        size_t n = strlen(name);
        for (const char *p = strstr(head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n"))
                if (strncasecmp(p + 2, name, n) == 0 && p[2 + n] == ':') {
                        const char *v = p + 3 + n;
                        v += strspn(v, " \t");
                        return strndup(v, strcspn(v, "\r"));
                }
        return NULL;
}

/* An error answer instead of 101: its body (API-11), printed as every command prints one. */
static int print_refusal(Session *s, const char *head, size_t head_len, long status)
{
        _cleanup_free_ char *length = head_value(head, "Content-Length");
        uint64_t want = 0;
        if (!length || parse_uint64_range(length, 0, HEAD_MAX, &want) < 0)
                want = 0;
        while (s->in_len < head_len + want) {
                size_t got = 0;
                CURLcode c =
                    curl_easy_recv(s->curl, s->in + s->in_len, head_len + want - s->in_len, &got);
                if (c == CURLE_AGAIN) {
                        struct pollfd pfd = {.fd = s->sock, .events = POLLIN};
                        if (poll(&pfd, 1, CTL_TIMEOUT_MS) <= 0)
                                break;
                        continue;
                }
                if (c != CURLE_OK || got == 0)
                        break;
                s->in_len += got;
        }
        json_auto_t *body = json_loadb((const char *)s->in + head_len, s->in_len - head_len,
                                       JSON_REJECT_DUPLICATES, NULL);
        const char *code, *message;
        if (body && json_unpack(body, "{s:s, s:s}", "code", &code, "message", &message) == 0) {
                fputs("error: ", s->env->err);
                ctl_print_sanitized(s->env->err, code);
                fputs(": ", s->env->err);
                ctl_print_sanitized(s->env->err, message);
                fprintf(s->env->err, " (HTTP %ld)\n", status);
        } else
                fprintf(s->env->err, "error: HTTP %ld without a JSON error body\n", status);
        return CTL_EXIT_API;
}

/* The opening handshake (RFC 6455 4.1): CTL_EXIT_OK once upgraded, else the exit status. */
static int handshake(Session *s, const CtlArgs *a)
{
        uint8_t nonce[16];
        char key[WS_KEY_LEN + 1], want[WS_ACCEPT_LEN + 1];
        _cleanup_free_ char *request = NULL, *error = NULL, *authorization = NULL;
        if (getrandom(nonce, sizeof nonce, 0) != sizeof nonce ||
            EVP_EncodeBlock((unsigned char *)key, nonce, sizeof nonce) != WS_KEY_LEN ||
            ws_accept_key(key, want) < 0) {
                fputs("error: cannot make a WebSocket key\n", s->env->err);
                return CTL_EXIT_API;
        }
        if ((a->token && strprintf(&authorization, "Authorization: Bearer %s\r\n", a->token) < 0) ||
            strprintf(&request,
                      "GET /instances/%s/console/attach HTTP/1.1\r\n"
                      "Host: localhost\r\n"
                      "User-Agent: vgpuctl/%s\r\n"
                      "Upgrade: websocket\r\n"
                      "Connection: Upgrade\r\n"
                      "Sec-WebSocket-Key: %s\r\n"
                      "Sec-WebSocket-Version: 13\r\n"
                      "Sec-WebSocket-Protocol: " SUBPROTOCOL "\r\n"
                      "%s\r\n",
                      a->target, VGPUD_VERSION, key, authorization ? authorization : "") < 0) {
                fputs("vgpuctl: out of memory\n", s->env->err);
                return CTL_EXIT_API;
        }
        int r = send_all(s, request, strlen(request));
        size_t head_len = 0;
        if (r >= 0)
                r = read_head(s, &head_len, &error);
        if (r < 0) {
                fprintf(s->env->err, "error: %s\n", error ? error : "cannot send to vgpud");
                return CTL_EXIT_CONNECT;
        }
        _cleanup_free_ char *head = strndup((const char *)s->in, head_len);
        if (!head)
                return CTL_EXIT_API;
        long status = 0;
        if (strncmp(head, "HTTP/1.1 ", 9) != 0 || (status = strtol(head + 9, NULL, 10)) < 100) {
                fputs("error: not an HTTP answer from vgpud\n", s->env->err);
                return CTL_EXIT_API;
        }
        if (status != 101) {
                int k = print_refusal(s, head, head_len, status);
                if (status == 401 && !a->token)
                        fputs("hint: no token was given; use --token, --token-file or "
                              "VGPUD_TOKEN\n",
                              s->env->err);
                return k;
        }
        _cleanup_free_ char *accept = head_value(head, "Sec-WebSocket-Accept");
        _cleanup_free_ char *protocol = head_value(head, "Sec-WebSocket-Protocol");
        if (!streq_ptr(accept, want) || !streq_ptr(protocol, SUBPROTOCOL)) {
                fputs("error: vgpud's WebSocket answer does not match the request\n", s->env->err);
                return CTL_EXIT_API;
        }
        /* Frames that came with the head stay for the loop. */
        memmove(s->in, s->in + head_len, s->in_len - head_len);
        s->in_len -= head_len;
        return CTL_EXIT_OK;
}

static int terminal_raw(Session *s)
{
        if (!isatty(s->in_fd))
                return 0; /* piped input: nothing to switch */
        if (tcgetattr(s->in_fd, &s->saved) < 0)
                return -errno;
        struct termios raw = s->saved;
        cfmakeraw(&raw);
        if (tcsetattr(s->in_fd, TCSAFLUSH, &raw) < 0)
                return -errno;
        s->raw = true;
        return 0;
}

static int signals_take(Session *s)
{
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGHUP);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGQUIT);
        if (sigprocmask(SIG_BLOCK, &set, &s->old_mask) < 0)
                return -errno;
        s->mask_saved = true;
        s->sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        return s->sigfd < 0 ? -errno : 0;
}

typedef enum Outcome {
        GOING_ON,
        DETACHED,     /* Ctrl-] or the end of piped input */
        CONSOLE_DONE, /* the daemon closed the session */
        DROPPED,      /* the connection ended without a close */
        SIGNALLED,
        FAILED,
} Outcome;

/* Frames from the daemon: the guest's bytes to the output, pings answered, a close seen. */
static Outcome take_frames(Session *s, uint16_t *ret_code)
{
        size_t pos = 0;
        Outcome o = GOING_ON;
        while (o == GOING_ON && pos < s->in_len) {
                WsEvent e;
                size_t n = ws_decode(&s->decoder, s->in + pos, s->in_len - pos, &e, NULL);
                if (e.kind == WS_EVENT_NONE)
                        break;
                if (e.kind == WS_EVENT_ERROR) {
                        (void)send_close(s, e.code);
                        say(s, "vgpuctl: bad frame from vgpud: %s", e.why);
                        return FAILED;
                }
                pos += n;
                switch (e.kind) {
                case WS_EVENT_DATA:
                        for (size_t done = 0; done < e.size;) {
                                ssize_t k = write(s->out_fd, e.data + done, e.size - done);
                                if (k < 0 && errno == EINTR)
                                        continue;
                                if (k <= 0)
                                        return FAILED;
                                done += (size_t)k;
                        }
                        break;
                case WS_EVENT_PING:
                        if (send_frame(s, WS_OPCODE_PONG, e.data, e.size) < 0)
                                return DROPPED;
                        break;
                case WS_EVENT_CLOSE:
                        (void)send_close(s, e.code ? e.code : WS_CLOSE_NORMAL);
                        *ret_code = e.code;
                        o = CONSOLE_DONE;
                        break;
                default:
                        break;
                }
        }
        memmove(s->in, s->in + pos, s->in_len - pos);
        s->in_len -= pos;
        return o;
}

/* Keys to the guest, up to Ctrl-], which detaches. */
static Outcome take_keys(Session *s)
{
        uint8_t buf[4096];
        ssize_t n = read(s->in_fd, buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
                return GOING_ON;
        if (n <= 0) {
                (void)send_close(s, WS_CLOSE_NORMAL);
                return DETACHED;
        }
        uint8_t *stop = memchr(buf, DETACH_KEY, (size_t)n);
        size_t keep = stop ? (size_t)(stop - buf) : (size_t)n;
        if (keep > 0 && send_frame(s, WS_OPCODE_BINARY, buf, keep) < 0)
                return DROPPED;
        if (stop) {
                (void)send_close(s, WS_CLOSE_NORMAL);
                return DETACHED;
        }
        return GOING_ON;
}

static Outcome run_loop(Session *s, uint16_t *ret_code)
{
        Outcome o = take_frames(s, ret_code); /* what came with the 101 */
        bool input_open = true;
        while (o == GOING_ON) {
                struct pollfd p[3] = {
                    {.fd = s->sock, .events = POLLIN},
                    {.fd = s->sigfd, .events = POLLIN},
                    {.fd = input_open ? s->in_fd : -1, .events = POLLIN},
                };
                if (poll(p, 3, -1) < 0) {
                        if (errno == EINTR)
                                continue;
                        return FAILED;
                }
                if (p[1].revents) {
                        struct signalfd_siginfo si;
                        if (read(s->sigfd, &si, sizeof si) == sizeof si) {
                                (void)send_close(s, WS_CLOSE_GOING_AWAY);
                                *ret_code = (uint16_t)si.ssi_signo;
                                return SIGNALLED;
                        }
                }
                if (p[0].revents) {
                        if (s->in_len == INPUT_CAP)
                                return FAILED; /* the decoder refuses a larger frame first */
                        size_t got = 0;
                        CURLcode c =
                            curl_easy_recv(s->curl, s->in + s->in_len, INPUT_CAP - s->in_len, &got);
                        if (c == CURLE_AGAIN)
                                continue;
                        if (c != CURLE_OK || got == 0)
                                return DROPPED;
                        s->in_len += got;
                        o = take_frames(s, ret_code);
                }
                if (o == GOING_ON && p[2].revents) {
                        o = take_keys(s);
                        /* Piped input that ends detaches, as an operator's Ctrl-] does. */
                }
        }
        return o;
}

int ctl_console_attach(const CtlArgs *a, const CtlEnv *env)
{
        _cleanup_(session_done) Session s = {
            .env = env,
            .sock = -1,
            .in_fd = env->in_fd,
            .out_fd = fileno(env->out),
            .sigfd = -1,
            .decoder = {.server = false, .max_frame = FRAME_MAX},
        };
        _cleanup_free_ char *error = NULL;
        s.in = malloc(INPUT_CAP > HEAD_MAX ? INPUT_CAP : HEAD_MAX);
        if (!s.in) {
                fputs("vgpuctl: out of memory\n", env->err);
                return CTL_EXIT_API;
        }
        fflush(env->out);
        if (connect_daemon(&s, a, &error) < 0) {
                fprintf(env->err, "error: %s\n", error);
                return CTL_EXIT_CONNECT;
        }
        int status = handshake(&s, a);
        if (status != CTL_EXIT_OK)
                return status;

        int r = signals_take(&s);
        if (r >= 0)
                r = terminal_raw(&s);
        if (r < 0) {
                fprintf(env->err, "error: set up the terminal: %s\n", strerror(-r));
                (void)send_close(&s, WS_CLOSE_GOING_AWAY);
                return CTL_EXIT_USAGE;
        }
        say(&s, "vgpuctl: attached to the console of instance %s; Ctrl-] detaches", a->target);

        uint16_t code = 0;
        Outcome o = run_loop(&s, &code);
        session_done(&s); /* the terminal back before the last words */
        s = (Session){.env = env, .sock = -1, .sigfd = -1};
        switch (o) {
        case DETACHED:
                fputs("\nvgpuctl: detached\n", env->err);
                return CTL_EXIT_OK;
        case CONSOLE_DONE:
                fprintf(env->err, "\nvgpuctl: the console closed (%u)\n", code);
                return code == WS_CLOSE_NORMAL || code == 0 ? CTL_EXIT_OK : CTL_EXIT_API;
        case SIGNALLED:
                fprintf(env->err, "\nvgpuctl: %s, detached\n", strsignal(code));
                return CTL_EXIT_API;
        case DROPPED:
                fputs("\nerror: the connection to vgpud was lost\n", env->err);
                return CTL_EXIT_CONNECT;
        default:
                fputs("\nerror: the console session failed\n", env->err);
                return CTL_EXIT_API;
        }
}
