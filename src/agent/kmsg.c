/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "agent/kmsg.h"

#include <fcntl.h>

#define NVRM_PREFIX "NVRM:"
#define NVRM_INIT_FAILED "RmInitAdapter failed!"
#define KMSG_PRIO_DIGITS_MAX 10

static bool is_blank(char c)
{
        return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

int kmsg_record_match(const char *line, size_t n, char **ret_message)
{
        /* A dictionary line (" SUBSYSTEM=pci") belongs to the record before it; its text is a
         * key=value the kernel attached, never a message of its own. */
        if (n == 0 || line[0] == ' ')
                return 0;

        const char *semicolon = memchr(line, ';', n);
        if (!semicolon)
                return 0;

        /* The priority field ends at the first ',' of the prefix: "<prio>,<seq>,<ts>,<flags>". */
        const char *comma = memchr(line, ',', (size_t)(semicolon - line));
        if (!comma)
                return 0;
        size_t digits = (size_t)(comma - line);
        if (digits == 0 || digits > KMSG_PRIO_DIGITS_MAX)
                return 0;
        uint64_t prio = 0;
        for (size_t i = 0; i < digits; i++) {
                if (line[i] < '0' || line[i] > '9')
                        return 0;
                prio = prio * 10 + (uint64_t)(line[i] - '0');
        }
        /* prio = facility << 3 | level. Only the kernel's own records have facility 0: what user
         * space writes to /dev/kmsg is given the user facility unless it names another one, and
         * the kernel refuses to let it name facility 0. */
        if (prio >> 3 != 0)
                return 0;

        const char *msg = semicolon + 1;
        size_t m = (size_t)(line + n - msg);
        while (m > 0 && is_blank(msg[0]))
                msg++, m--;
        while (m > 0 && is_blank(msg[m - 1]))
                m--;

        if (m < strlen(NVRM_PREFIX) || memcmp(msg, NVRM_PREFIX, strlen(NVRM_PREFIX)) != 0)
                return 0;
        if (!memmem(msg, m, NVRM_INIT_FAILED, strlen(NVRM_INIT_FAILED)))
                return 0;

        /* The kernel already escapes what /dev/kmsg shows; a stand-in file need not have. */
        char *text = escape_text(msg, m, SIZE_MAX, ESCAPE_ECHO);
        if (!text)
                return -ENOMEM;
        *ret_message = text;
        return 1;
}

int kmsg_watcher_init(KmsgWatcher *w, const char *path, nsec_t reopen_after, KmsgMatchFn on_match,
                      void *userdata)
{
        char *p = strdup(path);
        if (!p)
                return -ENOMEM;
        *w = (KmsgWatcher){
            .path = p,
            .reopen_after = reopen_after,
            .on_match = on_match,
            .userdata = userdata,
            .state = KMSG_WATCH_IDLE,
            .fd = -1,
        };
        return 0;
}

static void watcher_close(KmsgWatcher *w)
{
        if (w->fd >= 0)
                close(w->fd);
        w->fd = -1;
        w->len = 0;
        w->discarding = false;
}

void kmsg_watcher_done(KmsgWatcher *w)
{
        watcher_close(w);
        w->path = (free(w->path), NULL);
}

static void watcher_wait(KmsgWatcher *w, nsec_t now, nsec_t after)
{
        watcher_close(w);
        w->state = KMSG_WATCH_WAITING;
        w->reopen_at = now > NSEC_INFINITY - after ? NSEC_INFINITY : now + after;
}

static void watcher_open(KmsgWatcher *w, nsec_t now)
{
        char d[DURATION_STRLEN];

        watcher_close(w);
        int fd = open(w->path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        if (fd < 0) {
                log_warning_errno(negative_errno(), "open kernel log %s: %m; retrying in %s",
                                  w->path, format_duration(w->reopen_after, d));
                watcher_wait(w, now, w->reopen_after);
                return;
        }

        /* A reopen must not hand the host records it has seen already, nor old ones from before
         * the gap: what was missed is gone, and the probe still tells the outcome. A FIFO cannot
         * seek and has no old records to skip. */
        if (w->opened_once && lseek(fd, 0, SEEK_END) < 0 && errno != ESPIPE)
                log_warning_errno(negative_errno(), "seek to the end of kernel log %s: %m",
                                  w->path);
        log_info("%s kernel log %s", w->opened_once ? "reopened" : "watching", w->path);
        w->opened_once = true;
        w->fd = fd;
        w->state = KMSG_WATCH_OPEN;
}

void kmsg_watcher_start(KmsgWatcher *w, nsec_t now)
{
        if (w->state == KMSG_WATCH_IDLE)
                watcher_open(w, now);
}

int kmsg_watcher_fd(const KmsgWatcher *w)
{
        return w->state == KMSG_WATCH_OPEN ? w->fd : -1;
}

nsec_t kmsg_watcher_deadline(const KmsgWatcher *w)
{
        return w->state == KMSG_WATCH_WAITING ? w->reopen_at : NSEC_INFINITY;
}

void kmsg_watcher_on_timer(KmsgWatcher *w, nsec_t now)
{
        if (w->state == KMSG_WATCH_WAITING && now >= w->reopen_at)
                watcher_open(w, now);
}

static void watcher_line(KmsgWatcher *w, const char *line, size_t n)
{
        _cleanup_free_ char *message = NULL;

        w->records++;
        int r = kmsg_record_match(line, n, &message);
        if (r < 0) {
                log_error_errno(r, "kernel log record: %m");
                return;
        }
        if (r > 0) {
                w->matches++;
                w->on_match(w->userdata, message);
        }
}

/* n new bytes follow the w->len kept ones: hands on every complete line, keeps the rest. */
static void watcher_consume(KmsgWatcher *w, size_t n)
{
        size_t total = w->len + n, start = 0;

        for (;;) {
                char *nl = memchr(w->buf + start, '\n', total - start);
                if (!nl)
                        break;
                size_t end = (size_t)(nl - w->buf);
                if (w->discarding)
                        w->discarding = false;
                else
                        watcher_line(w, w->buf + start, end - start);
                start = end + 1;
        }

        size_t rest = total - start;
        if (w->discarding)
                w->len = 0;
        else if (rest == sizeof w->buf) {
                /* Longer than any record: not one the kernel wrote. Skip it to its end. */
                log_warning("kernel log %s: a line exceeds %zu bytes; skipped", w->path,
                            sizeof w->buf);
                w->discarding = true;
                w->len = 0;
        } else {
                memmove(w->buf, w->buf + start, rest);
                w->len = rest;
        }
}

/* A few buffers per wake-up: a long stand-in file must not keep requests waiting. */
#define KMSG_READS_PER_WAKEUP 8

void kmsg_watcher_on_readable(KmsgWatcher *w, nsec_t now)
{
        for (int i = 0; i < KMSG_READS_PER_WAKEUP && w->state == KMSG_WATCH_OPEN; i++) {
                ssize_t k = read(w->fd, w->buf + w->len, sizeof w->buf - w->len);
                if (k > 0) {
                        watcher_consume(w, (size_t)k);
                        continue;
                }
                if (k == 0) {
                        /* /dev/kmsg never ends; a stand-in file does, and has said all it had. */
                        if (!w->discarding && w->len > 0)
                                watcher_line(w, w->buf, w->len);
                        watcher_close(w);
                        w->state = KMSG_WATCH_ENDED;
                        log_info("kernel log %s ended; GPU init failure watch stopped", w->path);
                        return;
                }

                int r = negative_errno();
                switch (r) {
                case -EINTR:
                        continue;
                case -EAGAIN:
                        return;
                case -EPIPE:
                        /* The ring overwrote records before we read them; the descriptor now
                         * points at the oldest record left. */
                        w->overruns++;
                        log_notice("kernel log %s: records were overwritten before they were read",
                                   w->path);
                        continue;
                case -EINVAL:
                        log_warning("kernel log %s: a record exceeds %zu bytes; reopening at the "
                                    "end",
                                    w->path, sizeof w->buf);
                        watcher_open(w, now);
                        return;
                default: {
                        char d[DURATION_STRLEN];
                        log_warning_errno(r, "read kernel log %s: %m; reopening in %s", w->path,
                                          format_duration(KMSG_ERROR_REOPEN_AFTER, d));
                        watcher_wait(w, now, KMSG_ERROR_REOPEN_AFTER);
                        return;
                }
                }
        }
}
