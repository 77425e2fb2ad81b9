/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes parse_timestamp (GEN-9) against format_timestamp (GEN-8): an accepted timestamp is a
 * valid instant in years 1..9999, its rendering is canonical UTC RFC 3339, and the rendering
 * reads back to the same instant and renders identically again.
 */
#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_rendering(const char *buf)
{
        size_t n = strlen(buf);
        /* "YYYY-MM-DDTHH:MM:SS" plus an optional fraction of 1..9 digits, then "Z" */
        if (n < 20 || n > 30 || buf[n - 1] != 'Z' || buf[10] != 'T')
                abort();
        if (n > 20) {
                if (buf[19] != '.' || n == 21 || buf[n - 2] == '0')
                        abort();
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_free_ char *s = malloc(size + 1);
        if (!s)
                return 0;
        memcpy(s, data, size);
        s[size] = 0;

        Timestamp t;
        if (parse_timestamp(s, &t) < 0)
                return 0;
        if (t.nsec >= NSEC_PER_SEC || t.sec < TIMESTAMP_ZERO_SEC ||
            t.sec > INT64_C(253402300799) /* 9999-12-31T23:59:59Z */)
                abort();

        char buf[TIMESTAMP_STRLEN];
        if (format_timestamp(t, buf) != buf)
                abort();
        check_rendering(buf);

        Timestamp again;
        if (parse_timestamp(buf, &again) < 0 || timestamp_compare(t, again) != 0)
                abort();
        if (timestamp_is_zero(t) != streq(buf, "0001-01-01T00:00:00Z"))
                abort();

        char buf2[TIMESTAMP_STRLEN];
        if (!streq(format_timestamp(again, buf2), buf))
                abort();
        return 0;
}
