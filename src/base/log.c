/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "base.h"

#include <stdlib.h>

/* Log settings are the one mutable global the house rules allow. */
static int log_max_level = LOG_LEVEL_INFO;
static FILE *log_stream;

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

static int log_emit(int level, int error, const char *message, va_list pairs)
{
        char line[LOG_LINE_MAX];

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
