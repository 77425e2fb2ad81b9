/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Fuzzes parse_duration (CFG-3) and format_duration (GEN-12).
 *
 * format_duration writes Go's time.Duration.String(), which may hold fractions and the units
 * "ns" and "µs" that the configuration syntax refuses. So every rendering is read back with a
 * small reader for Go's syntax below, which must give the value again; and the configuration
 * parser must accept exactly the renderings without a fraction or a sub-millisecond unit, and
 * give the value again.
 *
 * The input is parsed as text; its first eight bytes, when there are eight, are also taken as a
 * raw nanosecond count, so values the configuration syntax cannot spell get formatted too.
 */
#include "base/base.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Reads Go's rendering: components "<digits>[.<digits>]<unit>", unit ns, µs, ms, s, m or h. */
static bool go_duration_read(const char *s, uint64_t *ret)
{
        static const struct {
                const char *suffix;
                uint64_t unit;
        } units[] = {
            {"ns", 1},           {"\xc2\xb5s", NSEC_PER_USEC}, {"ms", NSEC_PER_MSEC},
            {"s", NSEC_PER_SEC}, {"m", NSEC_PER_MIN},          {"h", NSEC_PER_HOUR},
        };
        unsigned __int128 total = 0;

        if (!*s)
                return false;
        while (*s) {
                unsigned __int128 whole = 0, frac = 0, scale = 1;
                if (*s < '0' || *s > '9')
                        return false;
                for (; *s >= '0' && *s <= '9'; s++) {
                        whole = whole * 10 + (unsigned)(*s - '0');
                        if (whole > UINT64_MAX)
                                return false;
                }
                if (*s == '.') {
                        s++;
                        if (*s < '0' || *s > '9')
                                return false;
                        for (; *s >= '0' && *s <= '9'; s++) {
                                if (scale >= 1000000000)
                                        return false;
                                frac = frac * 10 + (unsigned)(*s - '0');
                                scale *= 10;
                        }
                }
                size_t i;
                for (i = 0; i < ELEMENTSOF(units); i++)
                        if (startswith(s, units[i].suffix))
                                break;
                if (i == ELEMENTSOF(units))
                        return false;
                s += strlen(units[i].suffix);
                /* The renderings only hold fractions that are whole nanoseconds. */
                if (frac * units[i].unit % scale != 0)
                        return false;
                total += whole * units[i].unit + frac * units[i].unit / scale;
                if (total > UINT64_MAX)
                        return false;
        }
        *ret = (uint64_t)total;
        return true;
}

static void check_format(nsec_t v)
{
        char buf[DURATION_STRLEN];
        if (format_duration(v, buf) != buf || strlen(buf) >= DURATION_STRLEN - 8)
                abort();

        uint64_t back;
        if (!go_duration_read(buf, &back) || back != v)
                abort();

        bool spellable = v % NSEC_PER_SEC == 0 || (v < NSEC_PER_SEC && v % NSEC_PER_MSEC == 0);
        nsec_t parsed;
        int r = parse_duration(buf, &parsed);
        if (spellable != (r >= 0) || (r >= 0 && parsed != v))
                abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        _cleanup_free_ char *s = malloc(size + 1);
        if (!s)
                return 0;
        memcpy(s, data, size);
        s[size] = 0;

        nsec_t v;
        int r = parse_duration(s, &v);
        if (r >= 0)
                check_format(v);
        else if (r != -EINVAL && r != -ERANGE)
                abort();

        if (size >= sizeof(uint64_t)) {
                uint64_t raw;
                memcpy(&raw, data, sizeof raw);
                check_format(raw);
        }
        return 0;
}
