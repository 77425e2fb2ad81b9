/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fake-qemu (SPEC SIM-15): a stand-in for qemu-system-x86_64 that behaves, as seen from vgpud,
 * like a VM that boots at once. See fake-qemu.h for the pieces; this file is the process: set-up
 * from argv and the simulator mount, then one poll() loop over a signalfd, an optional
 * exit-early timer and the two socket chardevs.
 *
 * Like QEMU's socket chardevs, each socket serves one client at a time; the next one waits in
 * the listen backlog until the current one hangs up. Socket files are left behind at exit, as
 * a killed QEMU leaves them: removing them is vgpud's job (VMM-15).
 *
 * The agent channel keeps the real agent's connection rules, which the host sees through the
 * virtio-serial port (AGENT-17, AGENT-19; tests/e2e/test-e2e-agent.py compares the two): a
 * client's unfinished request line goes when it hangs up, but replies it did not take stay
 * queued and go to the next client, ahead of that client's own (the sentinel's SENT-4 discards
 * them by id); replies are written before more requests are read; replies not written within
 * 5 s are dropped with the unfinished line, and the connection stays.
 */
#include "fake-qemu.h"

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/un.h>

/* A line plus its newline fits; anything longer is an overlong request (AGENT-17). */
#define INPUT_CAP (FQ_LINE_MAX + 1)
/* A client that lets this much output pile up is not reading: drop it rather than grow. */
#define OUTPUT_MAX (1024 * 1024)
#define LISTEN_BACKLOG 8
/* At exit, how long queued replies and events may take to reach a slow client. */
#define EXIT_FLUSH_MS 1000
/* vgpu-sim bounds state.json at 4 MiB (SIM_STATE_MAX_BYTES); leave it room to grow. */
#define STATE_FILE_MAX (16 * 1024 * 1024)
#define LOG_PREFIX "fake-qemu: "

typedef enum EndpointKind {
        ENDPOINT_QMP,
        ENDPOINT_AGENT,
        ENDPOINT_CONSOLE, /* CONS-1: raw bytes, echoed */
} EndpointKind;

typedef struct Conn {
        int fd;
        char *in;
        size_t in_len;
        bool discarding; /* inside an overlong line: drop bytes up to the next newline */
        char *out;
        size_t out_len;
        size_t out_cap;
        nsec_t out_since; /* agent: when the oldest unwritten byte was queued (CLOCK_MONOTONIC) */
        FqQmpSession qmp;
} Conn;

typedef struct Endpoint {
        EndpointKind kind;
        int listen_fd;
        Conn conn; /* conn.fd < 0 while no client is connected */
} Endpoint;

typedef struct FakeQemu {
        FqArgs args;
        FqFlags flags;
        int root_fd;     /* DIR, the simulator mount (or what stands in for it) */
        char *root_path; /* DIR as a path, for messages */
        int console_fd;  /* the -serial file chardev */
        int vfio_fd;     /* DIR/dev/vfio/<group>, held until exit; -1 without a GPU */
        int signal_fd;
        int timer_fd; /* exit-early; -1 when not set */
        Endpoint qmp;
        FqBlock block; /* the disks, as QMP sees and changes them (DISK-8) */
        Endpoint agent;
        Endpoint console; /* listen_fd -1 with a file console */
        char *vf;         /* the VF's PCI address, or NULL without a GPU */
        char *failure_message;
        bool console_broken;
        int exit_status; /* -1 while running */
        const char *exit_reason;
} FakeQemu;

static void fake_qemu_done(FakeQemu *q)
{
        Endpoint *eps[] = {&q->qmp, &q->agent, &q->console};
        for (size_t i = 0; i < ELEMENTSOF(eps); i++) {
                closep(&eps[i]->listen_fd);
                closep(&eps[i]->conn.fd);
                free(eps[i]->conn.in);
                free(eps[i]->conn.out);
        }
        closep(&q->root_fd);
        closep(&q->console_fd);
        closep(&q->vfio_fd);
        closep(&q->signal_fd);
        closep(&q->timer_fd);
        fq_args_done(&q->args);
        fq_block_done(&q->block);
        free(q->root_path);
        free(q->vf);
        free(q->failure_message);
}

/* ---- console log --------------------------------------------------------------------------- */

static int conn_queue_bytes(Conn *c, const char *bytes, size_t len);
static void conn_reset(Conn *c);

/* What the guest writes reaches a connected console client too; one that does not read goes. */
static void console_to_client(FakeQemu *q, const char *bytes, size_t len)
{
        Conn *c = &q->console.conn;
        if (c->fd >= 0 && conn_queue_bytes(c, bytes, len) < 0)
                conn_reset(c);
}

/*
 * One line per event with the stable prefix "fake-qemu: ". The file is opened O_APPEND, as QEMU's
 * append=on does, so lines land after whatever vgpud wrote when it truncated the log (VMM-8).
 */
static void console_printf(FakeQemu *q, const char *fmt, ...) _printf_(2, 3);
static void console_printf(FakeQemu *q, const char *fmt, ...)
{
        _cleanup_free_ char *msg = NULL, *line = NULL;
        va_list ap;
        va_start(ap, fmt);
        int r = vasprintf(&msg, fmt, ap);
        va_end(ap);
        if (r < 0) {
                msg = NULL;
                r = -ENOMEM;
        } else
                r = strprintf(&line, LOG_PREFIX "%s\n", msg);
        if (r >= 0)
                console_to_client(q, line, strlen(line));
        if (r >= 0)
                r = write_all(q->console_fd, line, strlen(line));
        if (r < 0 && !q->console_broken) {
                /* Reported once: a full disk would otherwise flood qemu.log as well. */
                log_error_errno(r, LOG_PREFIX "write console log %s: %m", q->args.console_log);
                q->console_broken = true;
        }
}

static void request_exit(FakeQemu *q, int status, const char *reason)
{
        if (q->exit_status >= 0)
                return;
        q->exit_status = status;
        q->exit_reason = reason;
}

/* ---- connections --------------------------------------------------------------------------- */

static nsec_t now_monotonic(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (nsec_t)ts.tv_sec * NSEC_PER_SEC + (nsec_t)ts.tv_nsec;
}

/* Queues len bytes; -ENOBUFS when the client has let OUTPUT_MAX pile up. */
static int conn_queue_bytes(Conn *c, const char *bytes, size_t len)
{
        if (c->out_len + len > OUTPUT_MAX)
                return -ENOBUFS;
        if (c->out_len + len > c->out_cap) {
                size_t cap = c->out_cap ? c->out_cap : 4096;
                while (cap < c->out_len + len)
                        cap *= 2;
                char *grown = realloc(c->out, cap);
                if (!grown)
                        return -ENOMEM;
                c->out = grown;
                c->out_cap = cap;
        }
        if (c->out_len == 0)
                c->out_since = now_monotonic();
        memcpy(c->out + c->out_len, bytes, len);
        c->out_len += len;
        return 0;
}

/* Queues text and then eol (which may be ""), both or neither. */
static int conn_queue_text(Conn *c, const char *text, const char *eol)
{
        size_t len = strlen(text), eol_len = strlen(eol);
        if (c->out_len + len + eol_len > OUTPUT_MAX)
                return -ENOBUFS;
        int r = conn_queue_bytes(c, text, len);
        return r < 0 ? r : conn_queue_bytes(c, eol, eol_len);
}

/*
 * Queues one JSON value as one line. QMP is rendered as QEMU renders it (", " and ": "
 * separators, "\r\n" line ends from its monitor), the agent channel as vgpu-agent does
 * (compact, "\n"; AGENT-14).
 */
static int conn_queue(Conn *c, json_t *value, EndpointKind kind)
{
        if (!value)
                return -ENOMEM;
        bool qmp = kind == ENDPOINT_QMP;
        _cleanup_free_ char *text =
            json_dumps(value, JSON_PRESERVE_ORDER | (qmp ? 0 : JSON_COMPACT));
        if (!text)
                return -ENOMEM;
        return conn_queue_text(c, text, qmp ? "\r\n" : "\n");
}

/* Sends what the socket takes now; the loop waits for POLLOUT for the rest. */
static int conn_flush(Conn *c)
{
        while (c->out_len > 0) {
                ssize_t n = send(c->fd, c->out, c->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        return negative_errno();
                }
                memmove(c->out, c->out + n, c->out_len - (size_t)n);
                c->out_len -= (size_t)n;
        }
        return 0;
}

/* The client is gone: its unfinished line with it; unwritten output too unless keep_output. */
static void conn_close(Conn *c, bool keep_output)
{
        closep(&c->fd);
        c->fd = -1;
        c->in_len = 0;
        if (!keep_output)
                c->out_len = 0;
        c->discarding = false;
        c->qmp = (FqQmpSession){0};
}

static void conn_reset(Conn *c)
{
        conn_close(c, false);
}

static int qmp_send_event(FakeQemu *q, const char *name, json_t *data)
{
        Conn *c = &q->qmp.conn;
        /* QEMU sends events only to monitors that finished capabilities negotiation. */
        if (c->fd < 0 || !c->qmp.negotiated || q->flags.hang_qmp) {
                json_decref(data);
                return 0;
        }
        json_auto_t *e = fq_qmp_event(name, data);
        return conn_queue(c, e, ENDPOINT_QMP);
}

static int read_flags(FakeQemu *q);

static int qmp_handle_line(FakeQemu *q, const char *line, size_t size)
{
        Conn *c = &q->qmp.conn;
        _cleanup_free_ char *command = NULL, *shown = NULL;
        int r;

        if (fq_qmp_line_is_blank(line, size))
                return 0;

        if (q->flags.hang_qmp) {
                r = fq_qmp_peek_command(line, size, &command);
                if (r < 0)
                        return r;
                r = fq_sanitize(command ? command : "", 128, &shown);
                if (r < 0)
                        return r;
                console_printf(q, "qmp command %s unanswered (hang-qmp)",
                               command ? shown : "(invalid)");
                return 0;
        }

        /* hold-devices may be set while the guest runs, as a guest may stop answering. */
        _cleanup_free_ char *peek = NULL;
        if (fq_qmp_peek_command(line, size, &peek) >= 0 && streq_ptr(peek, "device_del"))
                (void)read_flags(q);

        json_auto_t *reply = NULL, *events = json_array();
        if (!events)
                return -ENOMEM;
        FqQmpAction action;
        c->qmp.block = &q->block;
        c->qmp.hold_devices = q->flags.hold_devices;
        c->qmp.events = events;
        r = fq_qmp_answer(&c->qmp, line, size, &reply, &command, &action);
        c->qmp.events = NULL;
        if (r < 0)
                return r;
        r = fq_sanitize(command ? command : "", 128, &shown);
        if (r < 0)
                return r;
        console_printf(q, "qmp command %s", command ? shown : "(invalid)");
        if (streq_ptr(command, "device_del") && q->flags.hold_devices &&
            json_object_get(reply, "return"))
                console_printf(q, "device_del held (hold-devices)");

        r = conn_queue(c, reply, ENDPOINT_QMP);
        if (r < 0)
                return r;
        size_t k;
        json_t *e;
        json_array_foreach (events, k, e) {
                if (c->qmp.negotiated && (r = conn_queue(c, e, ENDPOINT_QMP)) < 0)
                        return r;
        }

        switch (action) {
        case FQ_QMP_ACTION_POWERDOWN:
                /* The guest honours ACPI power-off at once. */
                r = qmp_send_event(q, "POWERDOWN", NULL);
                if (r >= 0)
                        r = qmp_send_event(
                            q, "SHUTDOWN",
                            json_pack("{s:b,s:s}", "guest", 1, "reason", "guest-shutdown"));
                request_exit(q, 0, "system_powerdown");
                return r;
        case FQ_QMP_ACTION_QUIT:
                r = qmp_send_event(q, "SHUTDOWN",
                                   json_pack("{s:b,s:s}", "guest", 0, "reason", "host-qmp-quit"));
                request_exit(q, 0, "quit");
                return r;
        case FQ_QMP_ACTION_NONE:
                break;
        }
        return 0;
}

static int agent_handle_line(FakeQemu *q, const char *line, size_t size)
{
        if (q->flags.silent_agent)
                return 0;

        _cleanup_free_ char *reply = NULL;
        int r = fq_agent_answer(q->failure_message, line, size, &reply);
        if (r < 0)
                return r;
        return reply ? conn_queue_text(&q->agent.conn, reply, "") : 0;
}

static int handle_overlong_line(FakeQemu *q, Endpoint *ep)
{
        if (ep->kind == ENDPOINT_AGENT) {
                if (q->flags.silent_agent)
                        return 0;
                _cleanup_free_ char *reply = fq_agent_overlong_line();
                return reply ? conn_queue_text(&ep->conn, reply, "") : -ENOMEM;
        }
        console_printf(q, "qmp command (overlong)");
        if (q->flags.hang_qmp)
                return 0;
        json_auto_t *reply = fq_qmp_overlong_reply();
        return conn_queue(&ep->conn, reply, ep->kind);
}

/*
 * CONS-1: what a console client types is echoed to it and lands in the log, as a guest's tty
 * with echo on shows it on the serial line. < 0 means drop the client.
 */
static int console_read(FakeQemu *q, Conn *c)
{
        char buf[4096];
        ssize_t n = recv(c->fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : negative_errno();
        if (n == 0) {
                (void)conn_flush(c);
                return -ECONNRESET;
        }
        int r = conn_queue_bytes(c, buf, (size_t)n);
        if (r < 0)
                return r;
        r = write_all(q->console_fd, buf, (size_t)n);
        if (r < 0 && !q->console_broken) {
                log_error_errno(r, LOG_PREFIX "write console log %s: %m", q->args.console_log);
                q->console_broken = true;
        }
        return conn_flush(c);
}

/* Reads what is there and answers every complete line; < 0 means drop the client. */
static int conn_read(FakeQemu *q, Endpoint *ep)
{
        Conn *c = &ep->conn;
        int r;

        if (ep->kind == ENDPOINT_CONSOLE)
                return console_read(q, c);

        ssize_t n;
        if (ep->kind == ENDPOINT_QMP) {
                /* QMP takes descriptors with its lines (add-fd), as QEMU's monitor does. */
                union {
                        struct cmsghdr h;
                        char buf[CMSG_SPACE(sizeof(int))];
                } control;
                struct iovec iov = {.iov_base = c->in + c->in_len,
                                    .iov_len = INPUT_CAP - c->in_len};
                struct msghdr mh = {.msg_iov = &iov,
                                    .msg_iovlen = 1,
                                    .msg_control = control.buf,
                                    .msg_controllen = sizeof control.buf};
                n = recvmsg(c->fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
                for (struct cmsghdr *h = n >= 0 ? CMSG_FIRSTHDR(&mh) : NULL; h;
                     h = CMSG_NXTHDR(&mh, h))
                        if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS &&
                            h->cmsg_len == CMSG_LEN(sizeof(int))) {
                                closep(&q->block.received_fd);
                                memcpy(&q->block.received_fd, CMSG_DATA(h), sizeof(int));
                        }
        } else
                n = recv(c->fd, c->in + c->in_len, INPUT_CAP - c->in_len, MSG_DONTWAIT);
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return 0;
                return negative_errno();
        }
        if (n == 0) {
                /* Hung up, perhaps only half: what is answered goes out, a partial line is lost. */
                (void)conn_flush(c);
                return -ECONNRESET;
        }
        c->in_len += (size_t)n;

        size_t start = 0;
        while (q->exit_status < 0) {
                char *nl = memchr(c->in + start, '\n', c->in_len - start);
                if (!nl)
                        break;
                size_t len = (size_t)(nl - (c->in + start));
                if (c->discarding)
                        c->discarding = false;
                else {
                        r = ep->kind == ENDPOINT_QMP ? qmp_handle_line(q, c->in + start, len)
                                                     : agent_handle_line(q, c->in + start, len);
                        if (r < 0)
                                return r;
                }
                start += len + 1;
        }
        memmove(c->in, c->in + start, c->in_len - start);
        c->in_len -= start;

        if (c->in_len == INPUT_CAP) {
                if (!c->discarding) {
                        r = handle_overlong_line(q, ep);
                        if (r < 0)
                                return r;
                        c->discarding = true;
                }
                c->in_len = 0;
        }
        return conn_flush(c);
}

static int endpoint_accept(FakeQemu *q, Endpoint *ep)
{
        _cleanup_close_ int fd = accept4(ep->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
                if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED)
                        return 0;
                return negative_errno();
        }

        Conn *c = &ep->conn;
        if (!c->in) {
                c->in = malloc(INPUT_CAP);
                if (!c->in)
                        return -ENOMEM;
        }
        c->fd = TAKE_FD(fd);

        if (ep->kind == ENDPOINT_QMP && !q->flags.hang_qmp) {
                json_auto_t *greeting = fq_qmp_greeting();
                int r = conn_queue(c, greeting, ENDPOINT_QMP);
                if (r >= 0)
                        r = conn_flush(c);
                if (r == -ENOMEM)
                        return r;
                /* A client that hung up before its greeting is dropped, as QEMU drops it. */
                if (r < 0)
                        conn_reset(c);
        }
        return 0;
}

static int listen_unix(const char *path, int *ret)
{
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(path) >= sizeof(sa.sun_path))
                return -ENAMETOOLONG;
        strcpy(sa.sun_path, path);

        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        /* QEMU replaces a stale socket file left by an earlier run; so does fake-qemu. */
        if (unlink(path) < 0 && errno != ENOENT)
                return negative_errno();
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
                return negative_errno();
        if (listen(fd, LISTEN_BACKLOG) < 0)
                return negative_errno();
        *ret = TAKE_FD(fd);
        return 0;
}

/* ---- signals and timers -------------------------------------------------------------------- */

static const int handled_signals[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGUSR1, SIGUSR2,
                                      SIGPIPE, SIGALRM, SIGTERM, SIGCONT, SIGWINCH};

static void handled_set(sigset_t *set)
{
        sigemptyset(set);
        for (size_t i = 0; i < ELEMENTSOF(handled_signals); i++)
                sigaddset(set, handled_signals[i]);
}

static int signals_block(void)
{
        sigset_t set;
        handled_set(&set);
        return sigprocmask(SIG_BLOCK, &set, NULL) < 0 ? negative_errno() : 0;
}

/* The signals blocked meanwhile stay pending and are read from here. */
static int signals_open(int *ret)
{
        sigset_t set;
        handled_set(&set);
        int fd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
        if (fd < 0)
                return negative_errno();
        *ret = fd;
        return 0;
}

static void handle_signal(FakeQemu *q, const struct signalfd_siginfo *si)
{
        int sig = (int)si->ssi_signo;
        const char *abbrev = sigabbrev_np(sig);
        const char *action = "ignore";

        /* Like QEMU, SIGTERM, SIGINT and SIGHUP shut the VM down; ignore-sigterm spares SIGTERM. */
        if (sig == SIGTERM && !q->flags.ignore_sigterm)
                action = "exit";
        else if (sig == SIGINT || sig == SIGHUP)
                action = "exit";

        console_printf(q, "signal SIG%s pid=%" PRIu32 " action=%s", abbrev ? abbrev : "?",
                       si->ssi_pid, action);
        if (streq(action, "exit")) {
                (void)qmp_send_event(q, "SHUTDOWN",
                                     json_pack("{s:b,s:s}", "guest", 0, "reason", "host-signal"));
                request_exit(q, 0,
                             sig == SIGTERM  ? "SIGTERM"
                             : sig == SIGINT ? "SIGINT"
                                             : "SIGHUP");
        }
}

static int signals_read(FakeQemu *q)
{
        for (;;) {
                struct signalfd_siginfo si;
                ssize_t n = read(q->signal_fd, &si, sizeof(si));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                return 0;
                        return negative_errno();
                }
                if (n != sizeof(si))
                        return -EIO;
                handle_signal(q, &si);
        }
}

static int timer_arm(uint64_t ms, int *ret)
{
        _cleanup_close_ int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (fd < 0)
                return negative_errno();
        struct itimerspec its = {
            .it_value = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000},
        };
        if (ms == 0)
                its.it_value.tv_nsec = 1; /* an all-zero value would disarm the timer */
        if (timerfd_settime(fd, 0, &its, NULL) < 0)
                return negative_errno();
        *ret = TAKE_FD(fd);
        return 0;
}

/* ---- set-up -------------------------------------------------------------------------------- */

/*
 * SIM-15: the console log is <data_dir>/instances/<id>/console.log and data_dir is DIR/data, so
 * DIR is three levels above the log's directory.
 */
static int open_root(const char *console_log, int *ret_fd, char **ret_path)
{
        const char *slash = strrchr(console_log, '/');
        _cleanup_free_ char *path = NULL;
        int r;

        if (!slash)
                r = strprintf(&path, "../../..");
        else
                r = strprintf(&path, "%.*s/../../..", (int)(slash - console_log), console_log);
        if (r < 0)
                return r;
        _cleanup_close_ int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        char *real = realpath(path, NULL);
        if (real) {
                free(path);
                path = real;
        }
        *ret_fd = TAKE_FD(fd);
        *ret_path = TAKE_PTR(path);
        return 0;
}

static int read_flags(FakeQemu *q)
{
        _cleanup_free_ char *path = NULL, *text = NULL, *error = NULL;
        size_t size;
        int r = strprintf(&path, ".sim/qemu/%s", q->args.name);
        if (r < 0)
                return r;

        r = read_file_at(q->root_fd, path, FQ_FLAGS_FILE_MAX, &text, &size);
        if (r == -ENOENT)
                return 0; /* no flags for this instance, or no simulator at all */
        if (r < 0)
                return log_error_errno(r, LOG_PREFIX "read flags %s/%s: %m", q->root_path, path);
        if (strlen(text) != size) {
                log_error(LOG_PREFIX "read flags %s/%s: file contains a NUL byte", q->root_path,
                          path);
                return -EINVAL;
        }
        r = fq_flags_parse(text, &q->flags, &error);
        if (r < 0)
                return log_error_errno(r, LOG_PREFIX "read flags %s/%s: %s", q->root_path, path,
                                       error ? error : strerror(-r));
        return 0;
}

/* The VF's address: sysfsdev names it (vendor VFIO), or is an mdev under it (DISC-9). */
static int vf_address_of(const char *sysfsdev, char **ret)
{
        const char *base = strrchr(sysfsdev, '/') + 1; /* sysfsdev is absolute (args) */
        if (pci_address_is_valid(base)) {
                char *s = strdup(base);
                if (!s)
                        return -ENOMEM;
                *ret = s;
                return 0;
        }

        _cleanup_free_ char *real = realpath(sysfsdev, NULL);
        if (!real)
                return negative_errno();
        char *end = strrchr(real, '/');
        while (end && end > real) {
                *end = 0;
                char *prev = strrchr(real, '/');
                if (!prev)
                        break;
                if (pci_address_is_valid(prev + 1)) {
                        char *s = strdup(prev + 1);
                        if (!s)
                                return -ENOMEM;
                        *ret = s;
                        return 0;
                }
                end = prev;
        }
        return -ENXIO;
}

/* SIM-15: the guest sees its GPU fail to initialise when the VF was wedged at boot. */
static int read_wedged(FakeQemu *q)
{
        _cleanup_free_ char *text = NULL;
        size_t size;
        int r = read_file_at(q->root_fd, ".sim/state.json", STATE_FILE_MAX, &text, &size);
        if (r == -ENOENT)
                return 0;
        if (r < 0)
                return log_error_errno(r, LOG_PREFIX "read %s/.sim/state.json: %m", q->root_path);

        json_error_t err;
        json_auto_t *state = json_loadb(text, size, JSON_REJECT_DUPLICATES, &err);
        if (!state) {
                log_error(LOG_PREFIX "parse %s/.sim/state.json: line %d: %s", q->root_path,
                          err.line, err.text);
                return -EINVAL;
        }
        _cleanup_free_ char *error = NULL;
        bool wedged;
        r = fq_state_vf_is_wedged(state, q->vf, &wedged, &error);
        if (r < 0)
                return log_error_errno(r, LOG_PREFIX "parse %s/.sim/state.json: %s", q->root_path,
                                       error ? error : strerror(-r));
        if (wedged)
                return fq_wedged_message(q->vf, &q->failure_message);
        return 0;
}

/* DEV-12: QEMU 7.2 opens the legacy group node, /dev/vfio/<group of the device>. */
static int open_vfio(FakeQemu *q)
{
        const char *dev = q->args.sysfsdev;
        _cleanup_free_ char *link = NULL, *node = NULL;
        char target[PATH_MAX];
        int r;

        r = vf_address_of(dev, &q->vf);
        if (r < 0)
                return log_error_errno(r, LOG_PREFIX "vfio %s: cannot tell the VF address: %m",
                                       dev);

        r = strprintf(&link, "%s/iommu_group", dev);
        if (r < 0)
                return r;
        ssize_t n = readlink(link, target, sizeof(target));
        if (n < 0)
                return log_error_errno(negative_errno(),
                                       LOG_PREFIX "vfio %s: no iommu_group found: %m", dev);
        if ((size_t)n >= sizeof(target))
                return log_error_errno(-ENAMETOOLONG,
                                       LOG_PREFIX "vfio %s: no iommu_group found: %m", dev);
        target[n] = 0;
        const char *slash = strrchr(target, '/');
        uint32_t group;
        r = parse_uint32(slash ? slash + 1 : target, &group);
        if (r < 0)
                return log_error_errno(r, LOG_PREFIX "vfio %s: invalid iommu_group link \"%s\"",
                                       dev, target);

        r = strprintf(&node, "dev/vfio/%" PRIu32, group);
        if (r < 0)
                return r;
        q->vfio_fd = openat(q->root_fd, node, O_RDWR | O_CLOEXEC | O_NOCTTY);
        if (q->vfio_fd < 0)
                return log_error_errno(negative_errno(), LOG_PREFIX "vfio: error opening %s/%s: %m",
                                       q->root_path, node);
        return 0;
}

/* QEMU refuses to start when a boot file cannot be read; so does fake-qemu. */
static int check_readable(const char *what, const char *path)
{
        if (!path)
                return 0;
        _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
        if (fd < 0)
                return log_error_errno(negative_errno(), LOG_PREFIX "could not open %s '%s': %m",
                                       what, path);
        return 0;
}

static int setup(FakeQemu *q)
{
        int r;

        q->console_fd =
            open(q->args.console_log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0644);
        if (q->console_fd < 0)
                return log_error_errno(negative_errno(),
                                       LOG_PREFIX "-serial: could not open '%s': %m",
                                       q->args.console_log);
        r = open_root(q->args.console_log, &q->root_fd, &q->root_path);
        if (r < 0)
                return log_error_errno(r, LOG_PREFIX "open the simulator directory above %s: %m",
                                       q->args.console_log);

        r = read_flags(q);
        if (r < 0)
                return r;
        if (q->flags.exit_early) {
                r = timer_arm(q->flags.exit_early_ms, &q->timer_fd);
                if (r < 0)
                        return log_error_errno(r, LOG_PREFIX "arm exit-early timer: %m");
        }

        r = check_readable("kernel", q->args.kernel);
        if (r >= 0)
                r = check_readable("initrd", q->args.initrd);
        if (r < 0)
                return r;

        if (q->args.sysfsdev) {
                r = open_vfio(q);
                if (r < 0)
                        return r;
                r = read_wedged(q);
                if (r < 0)
                        return r;
        }

        r = listen_unix(q->args.qmp_socket, &q->qmp.listen_fd);
        if (r < 0)
                return log_error_errno(r, LOG_PREFIX "-chardev: listen on %s: %m",
                                       q->args.qmp_socket);
        r = listen_unix(q->args.agent_socket, &q->agent.listen_fd);
        if (r < 0)
                return log_error_errno(r, LOG_PREFIX "-chardev: listen on %s: %m",
                                       q->args.agent_socket);
        if (q->args.console_socket) {
                r = listen_unix(q->args.console_socket, &q->console.listen_fd);
                if (r < 0)
                        return log_error_errno(r, LOG_PREFIX "-chardev: listen on %s: %m",
                                               q->args.console_socket);
        }

        /* SIM-15: QEMU would hold the TAP for its lifetime; this process keeps the inherited fd
         * open until it exits, without reading from it. */
        char tap[16] = "";
        if (q->args.nic_fd >= 0) {
                _cleanup_free_ char *error = NULL;
                r = fq_check_tap(q->args.nic_fd, q->args.qmp_socket, tap, &error);
                if (r < 0)
                        return log_error_errno(r, LOG_PREFIX "%s", error);
        }

        for (size_t k = 0; k < q->args.n_ports; k++) {
                r = fq_block_add_port(&q->block, q->args.ports[k]);
                if (r < 0)
                        return log_error_errno(r, LOG_PREFIX "-device pcie-root-port: %m");
        }
        for (size_t k = 0; k < q->args.n_drives; k++) {
                const FqArgsDrive *d = &q->args.drives[k];
                r = fq_block_add_boot_drive(&q->block, d->node, d->port, d->set, d->fd,
                                            d->read_only);
                if (r < 0)
                        return log_error_errno(r, LOG_PREFIX "-blockdev %s: %m", d->node);
        }

        _cleanup_free_ char *flags = NULL;
        r = fq_flags_format(&q->flags, &flags);
        if (r < 0)
                return r;
        console_printf(q, "started name=%s pid=%d vf=%s flags=%s gpu=%s", q->args.name,
                       (int)getpid(), q->vf ? q->vf : "none", flags,
                       q->vf ? (q->failure_message ? "wedged" : "ok") : "none");
        if (tap[0])
                console_printf(q, "nic net0 tap=%s mac=%s vhost=%s", tap, q->args.nic_mac,
                               q->args.nic_vhost ? "on" : "off");
        return 0;
}

/* ---- the loop ------------------------------------------------------------------------------ */

static void endpoint_poll_fd(const Endpoint *ep, struct pollfd *p)
{
        short events = POLLIN | (ep->conn.out_len ? POLLOUT : 0);
        /* As vgpu-agent's loop does, replies are written before more requests are read. */
        if (ep->kind == ENDPOINT_AGENT && ep->conn.out_len)
                events = POLLOUT;
        if (ep->conn.fd < 0)
                *p = (struct pollfd){.fd = ep->listen_fd, .events = POLLIN};
        else
                *p = (struct pollfd){.fd = ep->conn.fd, .events = events};
}

static int endpoint_dispatch(FakeQemu *q, Endpoint *ep, short revents)
{
        if (!revents)
                return 0;
        if (ep->conn.fd < 0)
                return endpoint_accept(q, ep);

        int r = 0;
        if (revents & (POLLIN | POLLHUP | POLLERR))
                r = conn_read(q, ep);
        else if (revents & POLLOUT)
                r = conn_flush(&ep->conn);
        if (r == -ENOMEM)
                return r;
        /* A hang-up or reset; -ENOBUFS is a client that does not read. The agent's replies that
         * the client did not take wait for the next one (AGENT-19). */
        if (r < 0)
                conn_close(&ep->conn, ep->kind == ENDPOINT_AGENT && r != -ENOBUFS);
        return 0;
}

/* AGENT-17: output not written within FQ_AGENT_WRITE_TIMEOUT of its queueing is dropped, and the
 * unfinished line with it; the connection stays. */
static void agent_check_write_timeout(FakeQemu *q, nsec_t now)
{
        Conn *c = &q->agent.conn;
        if (c->out_len == 0 || now < c->out_since + FQ_AGENT_WRITE_TIMEOUT)
                return;
        console_printf(q, "agent reply not written within %" PRIu64 "ms; dropped",
                       FQ_AGENT_WRITE_TIMEOUT / NSEC_PER_MSEC);
        c->out_len = 0;
        c->in_len = 0;
        c->discarding = false;
}

/* The poll() timeout: until the agent's write timeout, or none. */
static int agent_poll_timeout(const FakeQemu *q, nsec_t now)
{
        const Conn *c = &q->agent.conn;
        if (c->out_len == 0)
                return -1;
        nsec_t deadline = c->out_since + FQ_AGENT_WRITE_TIMEOUT;
        if (now >= deadline)
                return 0;
        /* Rounded up, so that the deadline has passed when poll() returns. */
        return (int)((deadline - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC);
}

static int run(FakeQemu *q)
{
        while (q->exit_status < 0) {
                struct pollfd p[5];
                size_t n = 0;

                p[n++] = (struct pollfd){.fd = q->signal_fd, .events = POLLIN};
                p[n++] = (struct pollfd){.fd = q->timer_fd, .events = POLLIN}; /* -1: ignored */
                endpoint_poll_fd(&q->qmp, &p[n++]);
                endpoint_poll_fd(&q->agent, &p[n++]);
                if (q->console.listen_fd >= 0)
                        endpoint_poll_fd(&q->console, &p[n++]);
                else
                        p[n++] = (struct pollfd){.fd = -1};

                if (poll(p, n, agent_poll_timeout(q, now_monotonic())) < 0) {
                        if (errno == EINTR)
                                continue;
                        return log_error_errno(negative_errno(), LOG_PREFIX "poll: %m");
                }
                agent_check_write_timeout(q, now_monotonic());

                if (p[0].revents) {
                        int r = signals_read(q);
                        if (r < 0)
                                return log_error_errno(r, LOG_PREFIX "read signalfd: %m");
                }
                if (p[1].revents && q->exit_status < 0) {
                        console_printf(q, "exit-early after %" PRIu64 "ms", q->flags.exit_early_ms);
                        request_exit(q, 1, "exit-early");
                }
                if (q->exit_status < 0) {
                        int r = endpoint_dispatch(q, &q->qmp, p[2].revents);
                        if (r >= 0 && q->exit_status < 0)
                                r = endpoint_dispatch(q, &q->agent, p[3].revents);
                        if (r >= 0 && q->exit_status < 0)
                                r = endpoint_dispatch(q, &q->console, p[4].revents);
                        if (r < 0)
                                return log_error_errno(r, LOG_PREFIX "serve clients: %m");
                }
        }
        return 0;
}

/* Gives the replies and events queued before exit a bounded chance to reach their clients. */
static void flush_before_exit(FakeQemu *q)
{
        struct timespec start;
        clock_gettime(CLOCK_MONOTONIC, &start);
        Endpoint *eps[] = {&q->qmp, &q->agent, &q->console};

        for (size_t i = 0; i < ELEMENTSOF(eps); i++) {
                Conn *c = &eps[i]->conn;
                while (c->fd >= 0 && c->out_len > 0) {
                        if (conn_flush(c) < 0 || c->out_len == 0)
                                break;
                        struct timespec now;
                        clock_gettime(CLOCK_MONOTONIC, &now);
                        int64_t left = EXIT_FLUSH_MS - ((now.tv_sec - start.tv_sec) * 1000 +
                                                        (now.tv_nsec - start.tv_nsec) / 1000000);
                        if (left <= 0)
                                break;
                        struct pollfd p = {.fd = c->fd, .events = POLLOUT};
                        if (poll(&p, 1, (int)left) < 0 && errno != EINTR)
                                break;
                }
        }
}

int main(int argc, char *argv[])
{
        _cleanup_(fake_qemu_done) FakeQemu q = {
            .root_fd = -1,
            .console_fd = -1,
            .vfio_fd = -1,
            .signal_fd = -1,
            .timer_fd = -1,
            .qmp = {.kind = ENDPOINT_QMP, .listen_fd = -1, .conn.fd = -1},
            .agent = {.kind = ENDPOINT_AGENT, .listen_fd = -1, .conn.fd = -1},
            .console = {.kind = ENDPOINT_CONSOLE, .listen_fd = -1, .conn.fd = -1},
            .exit_status = -1,
            .block = {.received_fd = -1},
        };
        _cleanup_free_ char *error = NULL;
        int r;

        /* Blocked first, so that a SIGTERM during set-up is logged and honoured, not fatal. */
        r = signals_block();
        if (r < 0) {
                log_error_errno(r, LOG_PREFIX "block signals: %m");
                return 1;
        }

        /* Before any descriptor of ours is opened: -add-fd checks what was inherited. */
        r = fq_args_parse(argc, argv, &q.args, &error);
        if (r < 0) {
                log_error_errno(r, LOG_PREFIX "%s", error ? error : strerror(-r));
                return 1;
        }

        r = signals_open(&q.signal_fd);
        if (r < 0) {
                log_error_errno(r, LOG_PREFIX "set up signalfd: %m");
                return 1;
        }

        if (setup(&q) < 0)
                return 1;

        r = run(&q);
        if (r < 0)
                request_exit(&q, 1, "internal error");
        console_printf(&q, "exit status=%d reason=%s", q.exit_status, q.exit_reason);
        flush_before_exit(&q);
        return q.exit_status;
}
