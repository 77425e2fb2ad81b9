/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "metrics.h"

#include <inttypes.h>
#include <math.h>

struct MetricsWriter {
        char *text;
        size_t size, allocated;
        int error; /* the first failure; every later call returns it */

        char **families; /* names used so far, to refuse a second HELP/TYPE */
        bool in_family;
        MetricType type;
        char **series; /* rendered label sets of the current family */
};

int metrics_writer_new(MetricsWriter **ret)
{
        MetricsWriter *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        *ret = w;
        return 0;
}

static void writer_reset(MetricsWriter *w)
{
        free(w->text);
        strv_freep(&w->families);
        strv_freep(&w->series);
        *w = (MetricsWriter){0};
}

MetricsWriter *metrics_writer_free(MetricsWriter *w)
{
        if (w) {
                writer_reset(w);
                free(w);
        }
        return NULL;
}

static int writer_fail(MetricsWriter *w, int r)
{
        if (w->error == 0)
                w->error = r;
        return w->error;
}

static int buf_append(MetricsWriter *w, const char *s, size_t n)
{
        if (w->size + n + 1 > w->allocated) {
                size_t want = w->allocated ? w->allocated : 1024;
                while (want < w->size + n + 1)
                        want *= 2;
                char *grown = realloc(w->text, want);
                if (!grown)
                        return -ENOMEM;
                w->text = grown;
                w->allocated = want;
        }
        memcpy(w->text + w->size, s, n);
        w->size += n;
        w->text[w->size] = 0;
        return 0;
}

static int buf_append_str(MetricsWriter *w, const char *s)
{
        return buf_append(w, s, strlen(s));
}

/* Appends s with the escapes the format wants: \\ and \n always, \" inside label values. */
static int buf_append_escaped(MetricsWriter *w, const char *s, bool quote)
{
        for (const char *p = s; *p; p++) {
                const char *esc = NULL;
                if (*p == '\\')
                        esc = "\\\\";
                else if (*p == '\n')
                        esc = "\\n";
                else if (*p == '"' && quote)
                        esc = "\\\"";
                int r = esc ? buf_append_str(w, esc) : buf_append(w, p, 1);
                if (r < 0)
                        return r;
        }
        return 0;
}

static bool is_name_char(char c, bool first, bool colon_ok)
{
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_')
                return true;
        if (c == ':')
                return colon_ok;
        return !first && c >= '0' && c <= '9';
}

/* Metric names: [a-zA-Z_:][a-zA-Z0-9_:]*; label names: [a-zA-Z_][a-zA-Z0-9_]*. */
static bool name_is_valid(const char *s, bool colon_ok)
{
        if (!s || !*s)
                return false;
        for (const char *p = s; *p; p++)
                if (!is_name_char(*p, p == s, colon_ok))
                        return false;
        return true;
}

static bool has_suffix(const char *s, const char *suffix)
{
        size_t n = strlen(s), m = strlen(suffix);
        return n >= m && streq(s + n - m, suffix);
}

int metrics_family(MetricsWriter *w, const char *name, MetricType type, const char *help)
{
        if (w->error)
                return w->error;
        if (!name_is_valid(name, true) || !help || !*help ||
            (type != METRIC_COUNTER && type != METRIC_GAUGE) ||
            (type == METRIC_COUNTER && !has_suffix(name, "_total")))
                return writer_fail(w, -EINVAL);
        for (size_t i = 0; w->families && w->families[i]; i++)
                if (streq(w->families[i], name))
                        return writer_fail(w, -EEXIST);

        int r = strv_push(&w->families, name);
        if (r < 0)
                return writer_fail(w, r);
        strv_freep(&w->series);
        w->series = NULL;
        w->in_family = true;
        w->type = type;

        if ((r = buf_append_str(w, "# HELP ")) < 0 || (r = buf_append_str(w, name)) < 0 ||
            (r = buf_append_str(w, " ")) < 0 || (r = buf_append_escaped(w, help, false)) < 0 ||
            (r = buf_append_str(w, "\n# TYPE ")) < 0 || (r = buf_append_str(w, name)) < 0 ||
            (r = buf_append_str(w, type == METRIC_COUNTER ? " counter\n" : " gauge\n")) < 0)
                return writer_fail(w, r);
        return 0;
}

/* Renders the label pairs as "{a=\"x\",b=\"y\"}" (empty without labels) into *ret. */
static int render_labels(va_list ap, char **ret)
{
        _cleanup_free_ char *out = NULL;
        _cleanup_strv_free_ char **names = NULL;

        for (;;) {
                const char *name = va_arg(ap, const char *);
                if (!name)
                        break;
                const char *value = va_arg(ap, const char *);
                if (!name_is_valid(name, false) || startswith(name, "__") || !value ||
                    !utf8_is_valid(value, strlen(value)))
                        return -EINVAL;
                for (size_t i = 0; names && names[i]; i++)
                        if (streq(names[i], name))
                                return -EINVAL;
                int r = strv_push(&names, name);
                if (r < 0)
                        return r;

                /* Worst case every byte doubles when escaped. */
                _cleanup_free_ char *escaped = malloc(2 * strlen(value) + 1);
                if (!escaped)
                        return -ENOMEM;
                char *q = escaped;
                for (const char *p = value; *p; p++) {
                        if (*p == '\\' || *p == '"' || *p == '\n')
                                *q++ = '\\';
                        *q++ = *p == '\n' ? 'n' : *p;
                }
                *q = 0;
                r = strextend(&out, "%s%s=\"%s\"", out ? "," : "{", name, escaped);
                if (r < 0)
                        return r;
        }
        if (out) {
                int r = strextend(&out, "}");
                if (r < 0)
                        return r;
        } else if (!(out = strdup("")))
                return -ENOMEM;
        *ret = TAKE_PTR(out);
        return 0;
}

static int sample_va(MetricsWriter *w, const char *value, va_list ap)
{
        if (w->error)
                return w->error;
        if (!w->in_family)
                return writer_fail(w, -EINVAL);

        _cleanup_free_ char *labels = NULL;
        int r = render_labels(ap, &labels);
        if (r < 0)
                return writer_fail(w, r);
        for (size_t i = 0; w->series && w->series[i]; i++)
                if (streq(w->series[i], labels))
                        return writer_fail(w, -EEXIST);
        if ((r = strv_push(&w->series, labels)) < 0)
                return writer_fail(w, r);

        const char *name = w->families[strv_length(w->families) - 1];
        if ((r = buf_append_str(w, name)) < 0 || (r = buf_append_str(w, labels)) < 0 ||
            (r = buf_append_str(w, " ")) < 0 || (r = buf_append_str(w, value)) < 0 ||
            (r = buf_append_str(w, "\n")) < 0)
                return writer_fail(w, r);
        return 0;
}

int metrics_sample_u64(MetricsWriter *w, uint64_t value, ...)
{
        char buf[24];
        snprintf(buf, sizeof buf, "%" PRIu64, value);

        va_list ap;
        va_start(ap, value);
        int r = sample_va(w, buf, ap);
        va_end(ap);
        return r;
}

/* The shortest decimal that reads back as the same double; Go's spellings of NaN and infinity. */
static void format_double(double v, char buf[static 32])
{
        if (isnan(v)) {
                strcpy(buf, "NaN");
                return;
        }
        if (isinf(v)) {
                strcpy(buf, v > 0 ? "+Inf" : "-Inf");
                return;
        }
        for (int precision = 15; precision <= 17; precision++) {
                snprintf(buf, 32, "%.*g", precision, v);
                if (strtod(buf, NULL) == v)
                        return;
        }
}

int metrics_sample_double(MetricsWriter *w, double value, ...)
{
        char buf[32];
        format_double(value, buf);

        va_list ap;
        va_start(ap, value);
        int r = sample_va(w, buf, ap);
        va_end(ap);
        return r;
}

int metrics_writer_finish(MetricsWriter *w, char **ret, size_t *ret_size)
{
        if (w->error)
                return w->error;
        if (!w->text && buf_append(w, "", 0) < 0)
                return writer_fail(w, -ENOMEM);

        size_t size = w->size;
        *ret = TAKE_PTR(w->text);
        if (ret_size)
                *ret_size = size;
        writer_reset(w);
        return 0;
}
