/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "base.h"

#include <endian.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* Log settings are the one mutable global the house rules allow. */
static int log_max_level = LOG_LEVEL_INFO;
static FILE *log_stream;
static int log_journal_fd = -1; /* OPS-13: a datagram socket connected to journald, or -1 */
static const char *log_identifier;

void log_set_max_level(int level)
{
        log_max_level = level;
}

int log_get_max_level(void)
{
        return log_max_level;
}

void log_set_stream(FILE *f)
{
        log_stream = f;
}

int log_level_from_string(const char *s, int *ret)
{
        static const struct {
                const char *name;
                int level;
        } table[] = {
            {"err", LOG_LEVEL_ERR},   {"warning", LOG_LEVEL_WARNING}, {"notice", LOG_LEVEL_NOTICE},
            {"info", LOG_LEVEL_INFO}, {"debug", LOG_LEVEL_DEBUG},
        };

        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                if (streq(s, table[i].name)) {
                        *ret = table[i].level;
                        return 0;
                }
        return -EINVAL;
}

static bool logfmt_needs_quotes(const char *v)
{
        if (!*v)
                return true;
        for (const unsigned char *p = (const unsigned char *)v; *p; p++)
                if (*p <= ' ' || *p >= 0x7f || *p == '"' || *p == '=' || *p == '\\')
                        return true;
        return false;
}

/* Appends printf-style text to buf, keeping it NUL-terminated and silently truncated. */
static void buf_append(char *buf, size_t size, const char *s, size_t n)
{
        size_t used = strnlen(buf, size);
        if (used + 1 >= size)
                return;
        size_t room = size - used - 1;
        if (n > room)
                n = room;
        memcpy(buf + used, s, n);
        buf[used + n] = 0;
}

void logfmt_append(char *buf, size_t size, const char *key, const char *value)
{
        buf_append(buf, size, " ", 1);
        buf_append(buf, size, key, strlen(key));
        buf_append(buf, size, "=", 1);
        size_t used = strnlen(buf, size);
        if (used + 1 < size)
                escape_text_buf(buf + used, size - used, value, strlen(value), SIZE_MAX,
                                logfmt_needs_quotes(value) ? ESCAPE_QUOTE : 0);
}

/* ---- the journal's native protocol (OPS-13) ------------------------------------------------- */

#define JOURNAL_SOCKET "/run/systemd/journal/socket"

/*
 * JOURNAL_STREAM is "<device>:<inode>" of the stream systemd connected to the service's stderr:
 * only when stderr is still that stream are the lines the journal's anyway, and worth sending
 * with their fields.
 */
static bool stderr_is_journal_stream(void)
{
        const char *v = getenv("JOURNAL_STREAM");
        unsigned long long dev, ino;
        char tail;
        struct stat st;
        if (!v || sscanf(v, "%llu:%llu%c", &dev, &ino, &tail) != 2 || fstat(STDERR_FILENO, &st) < 0)
                return false;
        return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

int log_open_journal(const char *identifier)
{
        if (!stderr_is_journal_stream())
                return 0;
        /* Non-blocking: a journal that lags costs a line on stderr, never a stalled loop. */
        int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return negative_errno();
        struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = JOURNAL_SOCKET};
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                int r = negative_errno();
                close(fd);
                return r;
        }
        log_journal_fd = fd;
        log_identifier = identifier;
        return 1;
}

/* The journal field a pair's key fills, if any: one name per object an operator looks up. */
static const char *journal_field(const char *key)
{
        if (streq(key, "instance_id"))
                return "VGPUD_INSTANCE";
        if (streq(key, "vf"))
                return "VGPUD_VF";
        if (streq(key, "gpu"))
                return "VGPUD_GPU";
        return NULL;
}

/* Appends "FIELD=value\n", or the binary form when the value holds a newline. */
static bool journal_append(char *buf, size_t size, size_t *used, const char *field,
                           const char *value)
{
        size_t f = strlen(field), n = strlen(value);
        bool binary = memchr(value, '\n', n) != NULL;
        size_t need = f + 1 + (binary ? 8 : 0) + n + 1;
        if (*used + need > size)
                return false;
        char *p = buf + *used;
        memcpy(p, field, f);
        p += f;
        if (binary) {
                *p++ = '\n';
                uint64_t le = htole64((uint64_t)n);
                memcpy(p, &le, 8);
                p += 8;
        } else
                *p++ = '=';
        memcpy(p, value, n);
        p += n;
        *p++ = '\n';
        *used += need;
        return true;
}

/*
 * One datagram: MESSAGE (the line as stderr would show it, without the priority prefix),
 * PRIORITY, SYSLOG_IDENTIFIER, ERRNO, and VGPUD_INSTANCE, VGPUD_VF, VGPUD_GPU from the pairs,
 * so that `journalctl VGPUD_VF=0000:e3:00.6` finds a VF's history. false: not sent.
 */
static bool journal_send(int level, int error, const char *line, va_list pairs)
{
        char buf[2 * LOG_LINE_MAX];
        char priority[4], err[16];
        size_t used = 0;
        snprintf(priority, sizeof priority, "%d", level);
        snprintf(err, sizeof err, "%d", abs(error));
        bool ok = journal_append(buf, sizeof buf, &used, "MESSAGE", line) &&
                  journal_append(buf, sizeof buf, &used, "PRIORITY", priority) &&
                  (!log_identifier ||
                   journal_append(buf, sizeof buf, &used, "SYSLOG_IDENTIFIER", log_identifier)) &&
                  (error == 0 || journal_append(buf, sizeof buf, &used, "ERRNO", err));
        for (;;) {
                const char *key = va_arg(pairs, const char *);
                if (!key)
                        break;
                const char *value = va_arg(pairs, const char *);
                const char *field = journal_field(key);
                if (ok && field && value)
                        ok = journal_append(buf, sizeof buf, &used, field, value);
        }
        return ok && send(log_journal_fd, buf, used, MSG_NOSIGNAL) == (ssize_t)used;
}

static int log_emit(int level, int error, const char *message, va_list pairs)
{
        char line[LOG_LINE_MAX];
        va_list journal_pairs;
        va_copy(journal_pairs, pairs);

        snprintf(line, sizeof line, "<%d>", level);
        /* A message is one line: newlines in it would split the record. */
        size_t start = strlen(line);
        buf_append(line, sizeof line, message, strlen(message));
        for (char *p = line + start; *p; p++)
                if (*p == '\n' || *p == '\r')
                        *p = ' ';

        for (;;) {
                const char *key = va_arg(pairs, const char *);
                if (!key)
                        break;
                const char *value = va_arg(pairs, const char *);
                if (value)
                        logfmt_append(line, sizeof line - 1, key, value);
        }

        /* OPS-13: the journal gets the line with its fields; stderr is the fallback. */
        bool sent = log_journal_fd >= 0 && journal_send(level, error, line + start, journal_pairs);
        va_end(journal_pairs);
        if (sent)
                return error == 0 ? 0 : -abs(error);

        /* Leave room for the newline even when the line was truncated. */
        size_t n = strnlen(line, sizeof line - 1);
        line[n++] = '\n';
        fwrite(line, 1, n, log_stream ? log_stream : stderr);
        fflush(log_stream ? log_stream : stderr);
        return error == 0 ? 0 : -abs(error);
}

int log_kvv(int level, int error, const char *message, va_list pairs)
{
        if (level > log_max_level)
                return error == 0 ? 0 : -abs(error);
        return log_emit(level, error, message, pairs);
}

int log_line(int level, int error, const char *message, ...)
{
        va_list ap;
        va_start(ap, message);
        int r = log_kvv(level, error, message, ap);
        va_end(ap);
        return r;
}

static int log_emit_pairs_none(int level, int error, const char *message, ...)
{
        va_list ap;
        va_start(ap, message);
        int r = log_emit(level, error, message, ap);
        va_end(ap);
        return r;
}

int log_kv(int level, int error, const char *fmt, ...)
{
        char message[LOG_LINE_MAX];
        va_list ap;

        if (level > log_max_level)
                return error == 0 ? 0 : -abs(error);

        int saved = errno;
        errno = abs(error); /* so "%m" names the error being logged */
        va_start(ap, fmt);
        vsnprintf(message, sizeof message, fmt, ap);
        va_end(ap);
        errno = saved;
        return log_emit_pairs_none(level, error, message, NULL);
}
