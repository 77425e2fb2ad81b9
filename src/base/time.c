/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "base.h"

#define TIMESTAMP_LAST_SEC INT64_C(253402300799) /* 9999-12-31T23:59:59Z */

/* Days since 1970-01-01 of a proleptic Gregorian date (valid for any year >= 1). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
        y -= m <= 2;
        int64_t era = (y >= 0 ? y : y - 399) / 400;
        unsigned yoe = (unsigned)(y - era * 400);
        unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
        unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + (int64_t)doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *ret_y, unsigned *ret_m, unsigned *ret_d)
{
        z += 719468;
        int64_t era = (z >= 0 ? z : z - 146096) / 146097;
        unsigned doe = (unsigned)(z - era * 146097);
        unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        unsigned mp = (5 * doy + 2) / 153;
        unsigned d = doy - (153 * mp + 2) / 5 + 1;
        unsigned m = mp < 10 ? mp + 3 : mp - 9;
        *ret_y = (int64_t)yoe + era * 400 + (m <= 2);
        *ret_m = m;
        *ret_d = d;
}

static bool is_leap(int64_t y)
{
        return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static unsigned days_in_month(int64_t y, unsigned m)
{
        static const unsigned days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        return m == 2 && is_leap(y) ? 29 : days[m - 1];
}

/* Reads exactly n digits as a number in [min, max]. */
static int take_fixed(const char **p, size_t n, unsigned min, unsigned max, unsigned *ret)
{
        unsigned v = 0;
        for (size_t i = 0; i < n; i++) {
                char c = (*p)[i];
                if (c < '0' || c > '9')
                        return -EINVAL;
                v = v * 10 + (unsigned)(c - '0');
        }
        if (v < min || v > max)
                return -EINVAL;
        *p += n;
        *ret = v;
        return 0;
}

static int expect(const char **p, char c)
{
        if (**p != c)
                return -EINVAL;
        (*p)++;
        return 0;
}

int parse_timestamp(const char *s, Timestamp *ret)
{
        unsigned year, month, day, hour, minute, second, nsec = 0;
        int64_t offset = 0;

        if (!s)
                return -EINVAL;
        if (take_fixed(&s, 4, 1, 9999, &year) < 0 || expect(&s, '-') < 0 ||
            take_fixed(&s, 2, 1, 12, &month) < 0 || expect(&s, '-') < 0 ||
            take_fixed(&s, 2, 1, 31, &day) < 0 || expect(&s, 'T') < 0 ||
            take_fixed(&s, 2, 0, 23, &hour) < 0 || expect(&s, ':') < 0 ||
            take_fixed(&s, 2, 0, 59, &minute) < 0 || expect(&s, ':') < 0 ||
            take_fixed(&s, 2, 0, 59, &second) < 0)
                return -EINVAL;
        if (day > days_in_month(year, month))
                return -EINVAL;

        if (*s == '.') {
                s++;
                unsigned digits = 0;
                while (*s >= '0' && *s <= '9') {
                        if (++digits > 9)
                                return -EINVAL;
                        nsec = nsec * 10 + (unsigned)(*s++ - '0');
                }
                if (digits == 0)
                        return -EINVAL;
                for (; digits < 9; digits++)
                        nsec *= 10;
        }

        if (*s == 'Z')
                s++;
        else if (*s == '+' || *s == '-') {
                int sign = *s++ == '-' ? -1 : 1;
                unsigned oh, om;
                if (take_fixed(&s, 2, 0, 23, &oh) < 0 || expect(&s, ':') < 0 ||
                    take_fixed(&s, 2, 0, 59, &om) < 0)
                        return -EINVAL;
                offset = sign * (int64_t)(oh * 3600 + om * 60);
        } else
                return -EINVAL;
        if (*s)
                return -EINVAL;

        int64_t sec =
            days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second - offset;
        /* An offset can carry the instant out of years 1..9999, which UTC RFC 3339 cannot write. */
        if (sec < TIMESTAMP_ZERO_SEC || sec > TIMESTAMP_LAST_SEC)
                return -ERANGE;
        *ret = (Timestamp){.sec = sec, .nsec = nsec};
        return 0;
}

char *format_timestamp(Timestamp t, char buf[static TIMESTAMP_STRLEN])
{
        int64_t days = t.sec / 86400, rem = t.sec % 86400;
        if (rem < 0) {
                rem += 86400;
                days--;
        }
        int64_t y;
        unsigned m, d;
        civil_from_days(days, &y, &m, &d);

        int n =
            snprintf(buf, TIMESTAMP_STRLEN, "%04lld-%02u-%02uT%02u:%02u:%02u", (long long)y, m, d,
                     (unsigned)(rem / 3600), (unsigned)(rem / 60 % 60), (unsigned)(rem % 60));
        if (t.nsec > 0) {
                char frac[11];
                snprintf(frac, sizeof frac, ".%09u", (unsigned)(t.nsec % NSEC_PER_SEC));
                size_t len = strlen(frac);
                while (frac[len - 1] == '0')
                        frac[--len] = 0;
                n += snprintf(buf + n, TIMESTAMP_STRLEN - (size_t)n, "%s", frac);
        }
        snprintf(buf + n, TIMESTAMP_STRLEN - (size_t)n, "Z");
        return buf;
}

bool timestamp_is_zero(Timestamp t)
{
        return t.sec == TIMESTAMP_ZERO_SEC && t.nsec == 0;
}

int timestamp_compare(Timestamp a, Timestamp b)
{
        if (a.sec != b.sec)
                return a.sec < b.sec ? -1 : 1;
        if (a.nsec != b.nsec)
                return a.nsec < b.nsec ? -1 : 1;
        return 0;
}

Timestamp timestamp_from_timespec(struct timespec ts)
{
        return (Timestamp){.sec = ts.tv_sec, .nsec = (uint32_t)ts.tv_nsec};
}

static Timestamp realtime_now(void *userdata)
{
        (void)userdata;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        return timestamp_from_timespec(ts);
}

const Clock clock_realtime = {.now = realtime_now};

Timestamp clock_now(const Clock *c)
{
        return c->now(c->userdata);
}
