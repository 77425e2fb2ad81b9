/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Outside text made safe for a message or a log line: the rule is in base.h. */
#include "base.h"

/* Where the escaped text goes: written while it fits, counted in full. */
typedef struct Sink {
        char *buf;
        size_t size;
        size_t len;
        bool cut;
} Sink;

static void sink_put(Sink *k, const char *piece, size_t n)
{
        /* Once a piece does not fit, nothing after it is written: never half an escape. */
        if (!k->cut && k->len + n < k->size) {
                memcpy(k->buf + k->len, piece, n);
                k->buf[k->len + n] = 0;
        } else
                k->cut = true;
        k->len += n;
}

static bool needs_hex(unsigned char c, EscapeFlags flags)
{
        return c < 0x20 || c == 0x7f || (c >= 0x80 && !(flags & ESCAPE_UTF8));
}

size_t escape_text_buf(char *buf, size_t size, const char *s, size_t n, size_t max,
                       EscapeFlags flags)
{
        static const char digits[] = "0123456789abcdef";
        Sink k = {.buf = buf, .size = size};
        bool echo = (flags & ESCAPE_ECHO) && !(flags & ESCAPE_QUOTE);
        size_t shown = n;

        if (size > 0)
                buf[0] = 0;
        if (shown > max) {
                shown = max;
                while (shown > 0 && ((unsigned char)s[shown] & 0xc0) == 0x80)
                        shown--;
        }

        if (flags & ESCAPE_QUOTE)
                sink_put(&k, "\"", 1);
        for (size_t i = 0; i < shown; i++) {
                unsigned char c = (unsigned char)s[i];
                if (needs_hex(c, flags)) {
                        char esc[4] = {'\\', 'x', digits[c >> 4], digits[c & 0xf]};
                        sink_put(&k, esc, sizeof esc);
                } else if ((c == '\\' || c == '"') && !echo) {
                        char esc[2] = {'\\', (char)c};
                        sink_put(&k, esc, sizeof esc);
                } else
                        sink_put(&k, s + i, 1);
        }
        if (shown < n)
                sink_put(&k, "...", 3);
        if (flags & ESCAPE_QUOTE)
                sink_put(&k, "\"", 1);
        return k.len;
}

char *escape_text(const char *s, size_t n, size_t max, EscapeFlags flags)
{
        size_t len = escape_text_buf(NULL, 0, s, n, max, flags);
        char *out = malloc(len + 1);
        if (!out)
                return NULL;
        escape_text_buf(out, len + 1, s, n, max, flags);
        return out;
}
