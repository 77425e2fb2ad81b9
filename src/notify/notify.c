/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The notification socket without waiting (notify.h). The socket is connected to the service
 * manager's, so that EPOLLOUT reports room in the manager's queue, not only in ours: an
 * unconnected datagram socket is always writable and a retry would spin.
 */
#include "notify.h"

#include <stdarg.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>

struct Notifier {
        int fd; /* -1: no NOTIFY_SOCKET */
        bool connected;
        struct sockaddr_un addr;
        socklen_t addr_len;
        nsec_t watchdog;
        sd_event_source *io, *timer;

        /* waiting to be sent, folded into one datagram */
        bool ready, stopping, ping;
        char *status;
};

static bool pending(const Notifier *n)
{
        return n->ready || n->stopping || n->ping || n->status;
}

static void forget(Notifier *n)
{
        n->ready = n->stopping = n->ping = false;
        free(n->status);
        n->status = NULL;
}

static int set_writable_watch(Notifier *n, bool on)
{
        return n->io ? sd_event_source_set_enabled(n->io, on ? SD_EVENT_ON : SD_EVENT_OFF) : 0;
}

/* Sends what waits, once. EAGAIN: the manager's queue is full; it stays, and we watch. */
static int flush(Notifier *n)
{
        if (n->fd < 0) {
                forget(n);
                return 0;
        }
        if (!pending(n))
                return set_writable_watch(n, false);

        if (!n->connected) {
                if (connect(n->fd, (const struct sockaddr *)&n->addr, n->addr_len) < 0) {
                        int r = negative_errno();
                        forget(n); /* nobody listens: there is no one to tell */
                        return r;
                }
                n->connected = true;
        }

        _cleanup_free_ char *msg = NULL;
        if (strprintf(&msg, "%s%s%s%s%s%s", n->ready ? "READY=1\n" : "",
                      n->stopping ? "STOPPING=1\n" : "", n->ping ? "WATCHDOG=1\n" : "",
                      n->status ? "STATUS=" : "", n->status ? n->status : "",
                      n->status ? "\n" : "") < 0)
                return -ENOMEM;
        if (send(n->fd, msg, strlen(msg), MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
                int r = negative_errno();
                if (r == -EAGAIN)
                        return set_writable_watch(n, true);
                /* The manager's socket went away: reconnect next time, drop this. */
                n->connected = false;
                forget(n);
                return r;
        }
        forget(n);
        return set_writable_watch(n, false);
}

static int on_writable(sd_event_source *s, int fd, uint32_t revents, void *userdata)
{
        (void)flush(userdata);
        return 0;
}

static int on_watchdog(sd_event_source *s, uint64_t usec, void *userdata)
{
        Notifier *n = userdata;
        n->ping = true;
        (void)flush(n);
        int r = sd_event_source_set_time_relative(s, n->watchdog / 2 / NSEC_PER_USEC);
        return r < 0 ? r : sd_event_source_set_enabled(s, SD_EVENT_ON);
}

int notifier_ready(Notifier *n)
{
        n->ready = true;
        return flush(n);
}

int notifier_stopping(Notifier *n)
{
        n->stopping = true;
        return flush(n);
}

int notifier_status(Notifier *n, const char *fmt, ...)
{
        char *text = NULL;
        va_list ap;
        va_start(ap, fmt);
        int k = vasprintf(&text, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        /* One line: the protocol is newline-separated assignments. */
        for (char *p = text; *p; p++)
                if (*p == '\n')
                        *p = ' ';
        free(n->status);
        n->status = text;
        return flush(n);
}

nsec_t notifier_watchdog_interval(const Notifier *n)
{
        return n->watchdog;
}

bool notifier_is_pending(const Notifier *n)
{
        return pending(n);
}

int notifier_attach_event(Notifier *n, sd_event *event)
{
        if (n->io || n->timer)
                return -EBUSY;
        if (n->fd < 0)
                return 0;
        int r = sd_event_add_io(event, &n->io, n->fd, EPOLLOUT, on_writable, n);
        if (r >= 0)
                r = set_writable_watch(n, pending(n));
        if (r >= 0 && n->watchdog > 0)
                r = sd_event_add_time_relative(event, &n->timer, CLOCK_MONOTONIC,
                                               n->watchdog / 2 / NSEC_PER_USEC, 0, on_watchdog, n);
        return r;
}

static int parse_address(const char *s, struct sockaddr_un *ret, socklen_t *ret_len)
{
        size_t len = strlen(s);
        if ((s[0] != '/' && s[0] != '@') || len < 2 || len >= sizeof ret->sun_path)
                return -EINVAL;
        *ret = (struct sockaddr_un){.sun_family = AF_UNIX};
        memcpy(ret->sun_path, s, len);
        if (s[0] == '@')
                ret->sun_path[0] = 0; /* the abstract namespace: no terminating NUL */
        *ret_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (s[0] == '/'));
        return 0;
}

int notifier_new(Notifier **ret)
{
        _cleanup_(notifier_freep) Notifier *n = calloc(1, sizeof *n);
        if (!n)
                return -ENOMEM;
        n->fd = -1;

        const char *path = getenv("NOTIFY_SOCKET");
        if (path && *path) {
                int r = parse_address(path, &n->addr, &n->addr_len);
                if (r < 0)
                        return r;
                n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (n->fd < 0)
                        return negative_errno();
                uint64_t usec = 0;
                if (sd_watchdog_enabled(false, &usec) > 0)
                        n->watchdog = usec * NSEC_PER_USEC;
        }
        *ret = TAKE_PTR(n);
        return 0;
}

Notifier *notifier_free(Notifier *n)
{
        if (!n)
                return NULL;
        sd_event_source_disable_unref(n->io);
        sd_event_source_disable_unref(n->timer);
        closep(&n->fd);
        free(n->status);
        free(n);
        return NULL;
}
