/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A QMP session on the event loop (vmm-internal.h; VMM-5, VMM-6, VMM-20).
 *
 * Nothing here waits: the socket is non-blocking, a connect that finds no listener yet is tried
 * again from a timer, and every wait for the peer has a timer of its own. The session keeps one
 * input buffer, grown up to one line of VMM_QMP_LINE_MAX plus its "\r\n", and one output buffer.
 */
#include "vmm.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>

#include "vmm-internal.h"

#define READ_CHUNK (64u * 1024u)
/* A line, its "\r" and its "\n". */
#define INPUT_MAX (VMM_QMP_LINE_MAX + 2u)

typedef enum QmpState {
        QMP_CONNECTING,  /* retrying connect() */
        QMP_GREETING,    /* connected, waiting for {"QMP": ...} */
        QMP_NEGOTIATING, /* qmp_capabilities sent */
        QMP_READY,
        QMP_DEAD,
} QmpState;

typedef struct QmpCommand {
        char *name;
        VmmQmpFunc done;
        void *userdata;
} QmpCommand;

struct VmmQmp {
        unsigned n_ref; /* the owner's, and one per dispatch in progress */
        bool closed;    /* vmm_qmp_free() was called */

        sd_event *event;
        char *path;
        struct sockaddr_un addr;
        socklen_t addr_len;
        nsec_t connect_timeout;
        uint64_t connect_deadline; /* CLOCK_MONOTONIC, usec */

        QmpState state;
        int fd;
        int deferred_error; /* a failed send, reported from the timer */
        sd_event_source *io, *timer;

        VmmQmpFunc ready;
        void *ready_userdata;
        VmmQmpEventFunc on_event;
        void *event_userdata;

        /* sent and unanswered, oldest first; commands[0] includes qmp_capabilities */
        QmpCommand *commands;
        size_t n_commands, commands_cap;

        char *in;
        size_t in_len, in_cap;
        char *out;
        size_t out_len, out_cap;
        /* A descriptor that travels with the byte at out_fd_at of out (SCM_RIGHTS), or -1. */
        int out_fd;
        size_t out_fd_at;
};

static void qmp_release(VmmQmp *q)
{
        q->io = sd_event_source_disable_unref(q->io);
        q->timer = sd_event_source_disable_unref(q->timer);
        closep(&q->fd);
        q->fd = -1;
        closep(&q->out_fd);
        q->out_fd = -1;
        for (size_t i = 0; i < q->n_commands; i++)
                free(q->commands[i].name);
        q->n_commands = 0;
}

static void qmp_unref(VmmQmp *q)
{
        if (--q->n_ref > 0)
                return;
        qmp_release(q);
        sd_event_unref(q->event);
        free(q->commands);
        free(q->path);
        free(q->in);
        free(q->out);
        free(q);
}

VmmQmp *vmm_qmp_free(VmmQmp *q)
{
        if (!q)
                return NULL;
        /* A callback may free the session it is called from: what is left of that dispatch
         * sees closed and stops, and the last reference frees the memory. */
        q->closed = true;
        q->state = QMP_DEAD;
        qmp_release(q);
        qmp_unref(q);
        return NULL;
}

bool vmm_qmp_is_alive(const VmmQmp *q)
{
        return q && q->state == QMP_READY;
}

static uint64_t now_usec(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int arm_timer(VmmQmp *q, uint64_t usec_from_now);
static int on_timer(sd_event_source *s, uint64_t usec, void *userdata);

static int arm_timer_at(VmmQmp *q, uint64_t when)
{
        if (!q->timer)
                return sd_event_add_time(q->event, &q->timer, CLOCK_MONOTONIC, when, 1000, on_timer,
                                         q);
        int r = sd_event_source_set_time(q->timer, when);
        if (r >= 0)
                r = sd_event_source_set_enabled(q->timer, SD_EVENT_ONESHOT);
        return r;
}

static int arm_timer(VmmQmp *q, uint64_t usec_from_now)
{
        return arm_timer_at(q, now_usec() + usec_from_now);
}

static void disarm_timer(VmmQmp *q)
{
        if (q->timer)
                (void)sd_event_source_set_enabled(q->timer, SD_EVENT_OFF);
}

/*
 * The session has failed: every waiting party hears why, oldest first. Runs from a dispatch
 * holding a reference; stops as soon as a callback frees the session.
 */
static void qmp_fail(VmmQmp *q, int r, const char *fmt, ...) _printf_(3, 4);
static void qmp_fail(VmmQmp *q, int r, const char *fmt, ...)
{
        _cleanup_free_ char *reason = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&reason, fmt, ap) < 0)
                reason = NULL;
        va_end(ap);

        QmpState was = q->state;
        q->state = QMP_DEAD;
        q->io = sd_event_source_disable_unref(q->io);
        disarm_timer(q);
        closep(&q->fd);
        q->fd = -1;

        const char *text = reason ? reason : ERROR_OUT_OF_MEMORY;
        if (was == QMP_CONNECTING || was == QMP_GREETING || was == QMP_NEGOTIATING) {
                /* qmp_capabilities is ours; the ready function hears its failure. */
                for (size_t i = 0; i < q->n_commands; i++)
                        free(q->commands[i].name);
                q->n_commands = 0;
                if (q->ready)
                        q->ready(q, r, NULL, text, q->ready_userdata);
                return;
        }
        while (q->n_commands > 0 && !q->closed) {
                QmpCommand c = q->commands[0];
                memmove(q->commands, q->commands + 1, --q->n_commands * sizeof(QmpCommand));
                _cleanup_free_ char *shown = NULL;
                /* Texts name the command; the reason says what went wrong with its line. */
                if (strprintf(&shown, "qmp %s: %s", c.name, text) < 0)
                        shown = NULL;
                free(c.name);
                c.done(q, r, NULL, shown ? shown : ERROR_OUT_OF_MEMORY, c.userdata);
        }
}

/* ---- output -------------------------------------------------------------------------------- */

static int update_io_events(VmmQmp *q)
{
        if (!q->io)
                return 0;
        return sd_event_source_set_io_events(q->io, EPOLLIN | (q->out_len > 0 ? EPOLLOUT : 0));
}

/* Sends up to len bytes of out, with out_fd on the first byte when it is due there. */
static ssize_t send_some(VmmQmp *q, size_t len)
{
        if (q->out_fd < 0 || q->out_fd_at > 0)
                return send(q->fd, q->out, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        union {
                struct cmsghdr h;
                char buf[CMSG_SPACE(sizeof(int))];
        } control = {0};
        struct iovec iov = {.iov_base = q->out, .iov_len = len};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = control.buf,
                            .msg_controllen = sizeof control.buf};
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &q->out_fd, sizeof(int));
        ssize_t n = sendmsg(q->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
                /* The peer holds its own copy now. */
                closep(&q->out_fd);
                q->out_fd = -1;
        }
        return n;
}

static int flush_output(VmmQmp *q)
{
        while (q->out_len > 0) {
                /* Bytes before the descriptor's go alone, so that it rides on its own line. */
                size_t len = q->out_fd >= 0 && q->out_fd_at > 0 ? q->out_fd_at : q->out_len;
                ssize_t n = send_some(q, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno == EAGAIN)
                                break;
                        return negative_errno();
                }
                memmove(q->out, q->out + n, q->out_len - (size_t)n);
                q->out_len -= (size_t)n;
                if (q->out_fd >= 0)
                        q->out_fd_at -= (size_t)n;
        }
        return update_io_events(q);
}

static int queue_command(VmmQmp *q, const char *command, json_t *arguments, int fd, VmmQmpFunc done,
                         void *userdata)
{
        /* One descriptor in flight at a time: QEMU takes it with the line it arrives on. */
        if (fd >= 0 && q->out_fd >= 0)
                return -EBUSY;
        json_auto_t *request = json_pack("{s:s, s:O*}", "execute", command, "arguments", arguments);
        if (!request)
                return -ENOMEM;
        _cleanup_free_ char *text = json_dumps(request, JSON_COMPACT);
        if (!text)
                return -ENOMEM;
        size_t len = strlen(text);

        if (q->out_len + len + 1 > q->out_cap) {
                size_t cap = q->out_cap ? q->out_cap : 256;
                while (cap < q->out_len + len + 1)
                        cap *= 2;
                char *grown = realloc(q->out, cap);
                if (!grown)
                        return -ENOMEM;
                q->out = grown;
                q->out_cap = cap;
        }
        if (q->n_commands == q->commands_cap) {
                size_t cap = q->commands_cap ? q->commands_cap * 2 : 4;
                QmpCommand *grown = realloc(q->commands, cap * sizeof(QmpCommand));
                if (!grown)
                        return -ENOMEM;
                q->commands = grown;
                q->commands_cap = cap;
        }
        char *name = strdup(command);
        if (!name)
                return -ENOMEM;
        _cleanup_close_ int copy = -1;
        if (fd >= 0) {
                copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                if (copy < 0) {
                        free(name);
                        return negative_errno();
                }
        }

        /* Each reply has its own five seconds; a queue behind a slow reply waits its turn. */
        if (q->n_commands == 0) {
                int r = arm_timer(q, VMM_QMP_COMMAND_TIMEOUT / NSEC_PER_USEC);
                if (r < 0) {
                        free(name);
                        return r;
                }
        }

        if (copy >= 0) {
                q->out_fd = TAKE_FD(copy);
                q->out_fd_at = q->out_len;
        }
        memcpy(q->out + q->out_len, text, len);
        q->out[q->out_len + len] = '\n';
        q->out_len += len + 1;
        q->commands[q->n_commands++] =
            (QmpCommand){.name = name, .done = done, .userdata = userdata};

        /* Queued: from here on a failure is the session's, reported from the loop like any. */
        int r = flush_output(q);
        if (r < 0) {
                q->deferred_error = r;
                (void)arm_timer_at(q, 0);
        }
        return 0;
}

int vmm_qmp_execute(VmmQmp *q, const char *command, VmmQmpFunc done, void *userdata)
{
        return vmm_qmp_execute_with(q, command, NULL, -1, done, userdata);
}

int vmm_qmp_execute_with(VmmQmp *q, const char *command, json_t *arguments, int fd, VmmQmpFunc done,
                         void *userdata)
{
        if (q->state != QMP_READY)
                return -ENOTCONN;
        return queue_command(q, command, arguments, fd, done, userdata);
}

void vmm_qmp_set_event_handler(VmmQmp *q, VmmQmpEventFunc on_event, void *userdata)
{
        q->on_event = on_event;
        q->event_userdata = userdata;
}

/* ---- input --------------------------------------------------------------------------------- */

/* One complete line (without "\n"). Returns < 0 after the session failed. */
static int handle_line(VmmQmp *q, const char *line, size_t len)
{
        _cleanup_(vmm_qmp_message_done) VmmQmpMessage m = {0};
        _cleanup_free_ char *err = NULL;
        int r;

        r = vmm_qmp_message_parse(line, len, &m, &err);
        if (r < 0) {
                if (q->state == QMP_GREETING)
                        qmp_fail(q, r, "QMP greeting: %s", err ? err : strerror(-r));
                else
                        qmp_fail(q, r, "%s", err ? err : strerror(-r));
                return r;
        }

        if (q->state == QMP_GREETING) {
                /* QEMU can send a new connection an event before its greeting (VSERPORT_CHANGE,
                 * when the guest opens or closes a virtio-serial port such as the agent's).
                 * Events answer nothing; the greeting's own timer still runs. */
                if (m.kind == VMM_QMP_EVENT)
                        return 0;
                if (m.kind != VMM_QMP_GREETING) {
                        qmp_fail(q, -EBADMSG, "QMP greeting: the first message is not one");
                        return -EBADMSG;
                }
                /* qmp_capabilities is the first command; the ready function answers it. */
                q->state = QMP_NEGOTIATING;
                r = queue_command(q, "qmp_capabilities", NULL, -1, NULL, NULL);
                if (r < 0) {
                        qmp_fail(q, r, "qmp qmp_capabilities: %s", strerror(-r));
                        return r;
                }
                return 0;
        }

        if (m.kind == VMM_QMP_EVENT) {
                /* VMM-6: the exit itself is seen through the pidfd; others may listen (DISK-8). */
                if (q->state == QMP_READY && q->on_event) {
                        q->on_event(q, m.event, m.value, q->event_userdata);
                        return q->closed ? -ECANCELED : 0;
                }
                return 0;
        }
        if (m.kind == VMM_QMP_GREETING || q->n_commands == 0) {
                qmp_fail(q, -EBADMSG, "unexpected %s",
                         m.kind == VMM_QMP_GREETING ? "second greeting" : "reply");
                return -EBADMSG;
        }

        QmpCommand c = q->commands[0];
        memmove(q->commands, q->commands + 1, --q->n_commands * sizeof(QmpCommand));
        _cleanup_free_ char *name = c.name;
        if (q->n_commands > 0) {
                r = arm_timer(q, VMM_QMP_COMMAND_TIMEOUT / NSEC_PER_USEC);
                if (r < 0) {
                        qmp_fail(q, r, "%s", strerror(-r));
                        return r;
                }
        } else
                disarm_timer(q);

        _cleanup_free_ char *shown = NULL;
        if (m.kind == VMM_QMP_ERROR) {
                if (strprintf(&shown, "qmp %s: %s: %s", name, m.error_class, m.error_desc) < 0)
                        shown = NULL;
        }

        if (q->state == QMP_NEGOTIATING) {
                /* c was qmp_capabilities. */
                if (m.kind == VMM_QMP_ERROR) {
                        qmp_fail(q, -EREMOTEIO, "%s", shown ? shown : ERROR_OUT_OF_MEMORY);
                        return -EREMOTEIO;
                }
                q->state = QMP_READY;
                q->ready(q, 0, NULL, NULL, q->ready_userdata);
                return q->closed ? -ECANCELED : 0;
        }

        if (m.kind == VMM_QMP_ERROR)
                c.done(q, -EREMOTEIO, NULL, shown ? shown : ERROR_OUT_OF_MEMORY, c.userdata);
        else
                c.done(q, 0, m.value, NULL, c.userdata);
        return q->closed ? -ECANCELED : 0;
}

static int grow_input(VmmQmp *q)
{
        if (q->in_cap - q->in_len >= READ_CHUNK || q->in_cap == INPUT_MAX)
                return 0;
        size_t cap = q->in_cap ? q->in_cap * 2 : READ_CHUNK;
        while (cap - q->in_len < READ_CHUNK && cap < INPUT_MAX)
                cap *= 2;
        if (cap > INPUT_MAX)
                cap = INPUT_MAX;
        char *grown = realloc(q->in, cap);
        if (!grown)
                return -ENOMEM;
        q->in = grown;
        q->in_cap = cap;
        return 0;
}

static int read_input(VmmQmp *q)
{
        int r = grow_input(q);
        if (r < 0) {
                qmp_fail(q, r, "%s", strerror(-r));
                return r;
        }
        ssize_t n = recv(q->fd, q->in + q->in_len, q->in_cap - q->in_len, MSG_DONTWAIT);
        /* A peer that closes with our command unread resets the connection: it is gone all
         * the same, and says so in one way whatever it had read. */
        if (n < 0 && errno == ECONNRESET)
                n = 0;
        if (n < 0) {
                if (errno == EAGAIN || errno == EINTR)
                        return 0;
                r = negative_errno();
                qmp_fail(q, r, "read: %s", strerror(-r));
                return r;
        }
        if (n == 0) {
                if (q->state == QMP_GREETING)
                        qmp_fail(q, -ECONNRESET, "QMP connection closed before the greeting");
                else
                        qmp_fail(q, -ECONNRESET, "connection closed");
                return -ECONNRESET;
        }
        q->in_len += (size_t)n;

        size_t start = 0;
        for (;;) {
                char *nl = memchr(q->in + start, '\n', q->in_len - start);
                if (!nl)
                        break;
                size_t len = (size_t)(nl - (q->in + start));
                r = handle_line(q, q->in + start, len);
                if (r < 0)
                        return r;
                start += len + 1;
        }
        memmove(q->in, q->in + start, q->in_len - start);
        q->in_len -= start;

        if (q->in_len == INPUT_MAX) {
                qmp_fail(q, -E2BIG, "line longer than %u bytes", VMM_QMP_LINE_MAX);
                return -E2BIG;
        }
        return 0;
}

static int on_io(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
        VmmQmp *q = userdata;
        int r = 0;

        q->n_ref++;
        if (revents & (EPOLLIN | EPOLLHUP | EPOLLERR))
                r = read_input(q);
        if (r >= 0 && !q->closed && q->state != QMP_DEAD && (revents & EPOLLOUT)) {
                r = flush_output(q);
                if (r < 0)
                        qmp_fail(q, r, "write: %s", strerror(-r));
        }
        qmp_unref(q);
        return 0;
}

/* ---- connecting ---------------------------------------------------------------------------- */

static bool connect_may_succeed_later(int r)
{
        /* No socket file yet, no listener yet, or its backlog is full (AF_UNIX says EAGAIN). */
        return r == -ENOENT || r == -ECONNREFUSED || r == -EAGAIN || r == -EINTR;
}

/* One attempt. 1: connected; < 0: why not (connect_may_succeed_later() tells whether to retry). */
static int try_connect(VmmQmp *q)
{
        _cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        /* A non-blocking AF_UNIX connect completes at once or not at all. */
        if (connect(fd, (const struct sockaddr *)&q->addr, q->addr_len) < 0)
                return negative_errno();
        int r = sd_event_add_io(q->event, &q->io, fd, EPOLLIN, on_io, q);
        if (r < 0)
                return r;
        q->fd = TAKE_FD(fd);
        q->state = QMP_GREETING;
        r = arm_timer(q, VMM_QMP_GREETING_TIMEOUT / NSEC_PER_USEC);
        return r < 0 ? r : 1;
}

static void connect_step(VmmQmp *q)
{
        char d[DURATION_STRLEN];

        int r = try_connect(q);
        if (r > 0)
                return;
        if (q->state != QMP_CONNECTING || !connect_may_succeed_later(r) ||
            q->connect_timeout == 0) {
                /* A lasting error, or the one attempt of a stop (VMM-9): say which. */
                qmp_fail(q, r, "connect %s: %s", q->path, strerror(-r));
                return;
        }
        uint64_t now = now_usec();
        if (now >= q->connect_deadline) {
                qmp_fail(q, -ETIMEDOUT, "QMP not ready after %s",
                         format_duration(q->connect_timeout, d));
                return;
        }
        uint64_t next = now + VMM_QMP_CONNECT_INTERVAL / NSEC_PER_USEC;
        r = arm_timer_at(q, next < q->connect_deadline ? next : q->connect_deadline);
        if (r < 0)
                qmp_fail(q, r, "connect %s: %s", q->path, strerror(-r));
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata)
{
        VmmQmp *q = userdata;
        char d[DURATION_STRLEN];

        q->n_ref++;
        switch (q->state) {
        case QMP_CONNECTING:
                connect_step(q);
                break;
        case QMP_GREETING:
                qmp_fail(q, -ETIMEDOUT, "QMP greeting not received within %s",
                         format_duration(VMM_QMP_GREETING_TIMEOUT, d));
                break;
        case QMP_NEGOTIATING:
        case QMP_READY:
                if (q->deferred_error < 0)
                        qmp_fail(q, q->deferred_error, "write: %s", strerror(-q->deferred_error));
                else if (q->n_commands > 0)
                        qmp_fail(q, -ETIMEDOUT, "no reply within %s",
                                 format_duration(VMM_QMP_COMMAND_TIMEOUT, d));
                break;
        case QMP_DEAD:
                break;
        }
        qmp_unref(q);
        return 0;
}

int vmm_qmp_connect(sd_event *event, const char *path, nsec_t connect_timeout, VmmQmpFunc ready,
                    void *userdata, VmmQmp **ret)
{
        VmmQmp *q;
        int r;

        if (!path || strlen(path) >= sizeof(q->addr.sun_path))
                return -EINVAL;
        q = calloc(1, sizeof(*q));
        if (!q)
                return -ENOMEM;
        *q = (VmmQmp){
            .n_ref = 1,
            .event = sd_event_ref(event),
            .fd = -1,
            .out_fd = -1,
            .state = QMP_CONNECTING,
            .connect_timeout = connect_timeout,
            .connect_deadline = now_usec() + connect_timeout / NSEC_PER_USEC,
            .ready = ready,
            .ready_userdata = userdata,
            .addr = {.sun_family = AF_UNIX},
        };
        q->path = strdup(path);
        if (!q->path) {
                vmm_qmp_free(q);
                return -ENOMEM;
        }
        strcpy(q->addr.sun_path, path);
        q->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path) + 1);

        /* The first attempt runs from the timer too, so that ready never runs inside this
         * call; its deadline is now. */
        r = arm_timer_at(q, now_usec());
        if (r < 0) {
                vmm_qmp_free(q);
                return r;
        }
        *ret = q;
        return 0;
}
