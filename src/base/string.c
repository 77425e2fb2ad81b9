/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "base.h"

#include <ctype.h>

int strprintf(char **ret, const char *fmt, ...)
{
        va_list ap;
        char *s;

        va_start(ap, fmt);
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -ENOMEM;
        *ret = s;
        return 0;
}

int strextend(char **s, const char *fmt, ...)
{
        _cleanup_free_ char *tail = NULL;
        va_list ap;

        va_start(ap, fmt);
        int n = vasprintf(&tail, fmt, ap);
        va_end(ap);
        if (n < 0)
                return -ENOMEM;

        size_t old = *s ? strlen(*s) : 0;
        char *joined = realloc(*s, old + (size_t)n + 1);
        if (!joined)
                return -ENOMEM;
        memcpy(joined + old, tail, (size_t)n + 1);
        *s = joined;
        return 0;
}

char *strchomp(char *s)
{
        size_t n = strlen(s);
        if (n > 0 && s[n - 1] == '\n')
                s[n - 1] = 0;
        return s;
}

char *strstrip(char *s)
{
        while (*s && isspace((unsigned char)*s))
                s++;
        size_t n = strlen(s);
        while (n > 0 && isspace((unsigned char)s[n - 1]))
                s[--n] = 0;
        return s;
}

size_t strv_length(char *const *strv)
{
        size_t n = 0;
        while (strv && strv[n])
                n++;
        return n;
}

int strv_push(char ***strv, const char *s)
{
        size_t n = strv_length(*strv);
        _cleanup_free_ char *copy = strdup(s);
        if (!copy)
                return -ENOMEM;
        char **grown = realloc(*strv, (n + 2) * sizeof(char *));
        if (!grown)
                return -ENOMEM;
        grown[n] = TAKE_PTR(copy);
        grown[n + 1] = NULL;
        *strv = grown;
        return 0;
}

int strv_copy(char *const *strv, char ***ret)
{
        if (!strv) {
                *ret = NULL;
                return 0;
        }
        size_t n = strv_length(strv);
        _cleanup_strv_free_ char **copy = calloc(n + 1, sizeof *copy);
        if (!copy)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                if (!(copy[i] = strdup(strv[i])))
                        return -ENOMEM;
        *ret = TAKE_PTR(copy);
        return 0;
}

bool utf8_is_valid(const char *s, size_t n)
{
        const unsigned char *p = (const unsigned char *)s;
        for (size_t i = 0; i < n;) {
                unsigned char c = p[i];
                size_t len;
                uint32_t cp, min;
                if (c < 0x80) {
                        i++;
                        continue;
                } else if ((c & 0xe0) == 0xc0) {
                        len = 2, cp = c & 0x1f, min = 0x80;
                } else if ((c & 0xf0) == 0xe0) {
                        len = 3, cp = c & 0x0f, min = 0x800;
                } else if ((c & 0xf8) == 0xf0) {
                        len = 4, cp = c & 0x07, min = 0x10000;
                } else
                        return false;
                if (n - i < len)
                        return false;
                for (size_t k = 1; k < len; k++) {
                        if ((p[i + k] & 0xc0) != 0x80)
                                return false;
                        cp = (cp << 6) | (p[i + k] & 0x3f);
                }
                /* Overlong forms, UTF-16 surrogates and code points past Unicode's end. */
                if (cp < min || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
                        return false;
                i += len;
        }
        return true;
}

int strv_compare(const void *a, const void *b)
{
        return strcmp(*(char *const *)a, *(char *const *)b);
}

void strv_sort(char **strv)
{
        if (strv)
                qsort(strv, strv_length(strv), sizeof *strv, strv_compare);
}

/* The message that stands in for one that could not be formatted; never NULL. */
static char *error_fallback(void)
{
        char *m = strdup(ERROR_OUT_OF_MEMORY);
        /* Without 14 bytes the process can neither report nor recover: end it, rather than
         * hand a failure on without the message every caller relies on. */
        if (!m)
                abort();
        return m;
}

int error_setv(char **error, int r, const char *fmt, va_list ap)
{
        char *msg;

        if (!error)
                return r;
        /* Formatted before the old message goes: the arguments may still point into it. */
        if (vasprintf(&msg, fmt, ap) < 0)
                msg = error_fallback();
        free(*error);
        *error = msg;
        return r;
}

int error_set(char **error, int r, const char *fmt, ...)
{
        va_list ap;

        va_start(ap, fmt);
        r = error_setv(error, r, fmt, ap);
        va_end(ap);
        return r;
}

int error_set_oom(char **error)
{
        return error_set(error, -ENOMEM, "%s", ERROR_OUT_OF_MEMORY);
}

int error_prefix(char **error, int r, const char *fmt, ...)
{
        _cleanup_free_ char *prefix = NULL;
        va_list ap;

        if (!error)
                return r;
        va_start(ap, fmt);
        (void)error_setv(&prefix, r, fmt, ap);
        va_end(ap);
        return error_set(error, r, "%s: %s", prefix, *error ? *error : strerror(r < 0 ? -r : r));
}

bool json_text_too_deep(const char *buf, size_t size, unsigned max)
{
        unsigned depth = 0;
        bool in_string = false, escaped = false;

        for (size_t i = 0; i < size; i++) {
                char c = buf[i];
                if (in_string) {
                        if (escaped)
                                escaped = false;
                        else if (c == '\\')
                                escaped = true;
                        else if (c == '"')
                                in_string = false;
                } else if (c == '"')
                        in_string = true;
                else if (c == '[' || c == '{') {
                        if (++depth > max)
                                return true;
                } else if ((c == ']' || c == '}') && depth > 0)
                        depth--;
        }
        return false;
}

int strdup_nullable(const char *s, char **ret)
{
        char *copy = NULL;
        if (s && !(copy = strdup(s)))
                return -ENOMEM;
        *ret = copy;
        return 0;
}

static int base64_digit(char c, Base64Form form)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == (form == BASE64_URL_UNPADDED ? '-' : '+'))
                return 62;
        if (c == (form == BASE64_URL_UNPADDED ? '_' : '/'))
                return 63;
        return -EINVAL;
}

int base64_decode(const char *s, size_t n, Base64Form form, uint8_t **ret, size_t *ret_size)
{
        size_t digits = n;
        if (form == BASE64_PADDED) {
                if (n == 0 || n % 4 != 0)
                        return -EINVAL;
                digits -= s[n - 1] == '=' ? (s[n - 2] == '=' ? 2 : 1) : 0;
        }
        if (digits % 4 == 1) /* 6 bits cannot end a byte */
                return -EINVAL;
        _cleanup_free_ uint8_t *out = malloc(digits / 4 * 3 + 3);
        if (!out)
                return -ENOMEM;
        size_t k = 0;
        uint32_t acc = 0;
        unsigned bits = 0;
        for (size_t i = 0; i < digits; i++) {
                int v = base64_digit(s[i], form);
                if (v < 0)
                        return -EINVAL;
                acc = acc << 6 | (uint32_t)v;
                bits += 6;
                if (bits >= 8) {
                        bits -= 8;
                        out[k++] = (uint8_t)(acc >> bits);
                        acc &= (1u << bits) - 1;
                }
        }
        if (acc != 0)
                return -EINVAL;
        *ret = TAKE_PTR(out);
        *ret_size = k;
        return 0;
}
