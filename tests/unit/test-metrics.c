/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for src/metrics: the Prometheus text format 0.0.4 as MET-1 wants it (one HELP and
 * one TYPE line per family, escaped label values, the exact content type), the grammar checks,
 * and the sticky error that keeps a broken exposition from being served half-written.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "metrics/metrics.h"

static int setup(void **state)
{
        MetricsWriter *w = NULL;
        if (metrics_writer_new(&w) < 0)
                return -1;
        *state = w;
        return 0;
}

static int teardown(void **state)
{
        metrics_writer_free(*state);
        return 0;
}

/* Finishes the writer and compares the whole text. */
static void assert_exposition(MetricsWriter *w, const char *expected)
{
        _cleanup_free_ char *text = NULL;
        size_t size = 0;
        assert_int_equal(metrics_writer_finish(w, &text, &size), 0);
        assert_string_equal(text, expected);
        assert_int_equal(size, strlen(expected));
}

static void test_content_type(void **state) /* MET-1 */
{
        assert_string_equal(METRICS_CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8");
}

static void test_families(void **state) /* MET-1, MET-6 */
{
        MetricsWriter *w = *state;

        assert_int_equal(metrics_family(w, "vgpud_resources_gpu_slots", METRIC_GAUGE,
                                        "vGPU slots on this host by kind."),
                         0);
        assert_int_equal(metrics_sample_u64(w, 64, "kind", "total", NULL), 0);
        assert_int_equal(metrics_sample_u64(w, 3, "kind", "used", NULL), 0);
        assert_int_equal(metrics_family(w, "vgpud_instances_vgpu_sentinel_checks_total",
                                        METRIC_COUNTER, "Guest GPU init checks by result."),
                         0);
        assert_int_equal(metrics_sample_u64(w, 1520, "result", "ok", NULL), 0);
        assert_int_equal(metrics_sample_u64(w, UINT64_MAX, "result", "rpc_error", NULL), 0);
        assert_int_equal(metrics_family(w, "vgpud_build_info", METRIC_GAUGE, "Build."), 0);
        assert_int_equal(metrics_sample_u64(w, 1, "version", "0.1.0", "commit", "abc", NULL), 0);
        assert_int_equal(metrics_family(w, "vgpud_resources_gpu_placement_disabled", METRIC_GAUGE,
                                        "1 while placement is disabled."),
                         0);
        assert_int_equal(metrics_sample_u64(w, 0, NULL), 0);
        /* A family without samples is still announced. */
        assert_int_equal(metrics_family(w, "vgpud_empty", METRIC_GAUGE, "Nothing yet."), 0);

        assert_exposition(w, "# HELP vgpud_resources_gpu_slots vGPU slots on this host by kind.\n"
                             "# TYPE vgpud_resources_gpu_slots gauge\n"
                             "vgpud_resources_gpu_slots{kind=\"total\"} 64\n"
                             "vgpud_resources_gpu_slots{kind=\"used\"} 3\n"
                             "# HELP vgpud_instances_vgpu_sentinel_checks_total Guest GPU init "
                             "checks by result.\n"
                             "# TYPE vgpud_instances_vgpu_sentinel_checks_total counter\n"
                             "vgpud_instances_vgpu_sentinel_checks_total{result=\"ok\"} 1520\n"
                             "vgpud_instances_vgpu_sentinel_checks_total{result=\"rpc_error\"} "
                             "18446744073709551615\n"
                             "# HELP vgpud_build_info Build.\n"
                             "# TYPE vgpud_build_info gauge\n"
                             "vgpud_build_info{version=\"0.1.0\",commit=\"abc\"} 1\n"
                             "# HELP vgpud_resources_gpu_placement_disabled 1 while placement is "
                             "disabled.\n"
                             "# TYPE vgpud_resources_gpu_placement_disabled gauge\n"
                             "vgpud_resources_gpu_placement_disabled 0\n"
                             "# HELP vgpud_empty Nothing yet.\n"
                             "# TYPE vgpud_empty gauge\n");
}

static void test_escaping(void **state) /* MET-1 */
{
        MetricsWriter *w = *state;

        assert_int_equal(metrics_family(w, "m", METRIC_GAUGE, "back\\slash \"quoted\"\nnext"), 0);
        assert_int_equal(metrics_sample_u64(w, 1, "profile", "a\\b\"c\nd", NULL), 0);
        assert_int_equal(metrics_sample_u64(w, 2, "profile", "NVIDIA L40S-2Q \xc3\xa9", NULL), 0);
        /* HELP escapes only backslash and newline; label values also the double quote. */
        assert_exposition(w, "# HELP m back\\\\slash \"quoted\"\\nnext\n"
                             "# TYPE m gauge\n"
                             "m{profile=\"a\\\\b\\\"c\\nd\"} 1\n"
                             "m{profile=\"NVIDIA L40S-2Q \xc3\xa9\"} 2\n");
}

static void test_doubles(void **state)
{
        MetricsWriter *w = *state;

        assert_int_equal(metrics_family(w, "d", METRIC_GAUGE, "Doubles."), 0);
        assert_int_equal(metrics_sample_double(w, 0.1, "v", "a", NULL), 0);
        assert_int_equal(metrics_sample_double(w, 3, "v", "b", NULL), 0);
        assert_int_equal(metrics_sample_double(w, -2.5e-9, "v", "c", NULL), 0);
        assert_int_equal(metrics_sample_double(w, NAN, "v", "d", NULL), 0);
        assert_int_equal(metrics_sample_double(w, INFINITY, "v", "e", NULL), 0);
        assert_int_equal(metrics_sample_double(w, -INFINITY, "v", "f", NULL), 0);
        assert_int_equal(metrics_sample_double(w, 1.0 / 3, "v", "g", NULL), 0);
        assert_exposition(w, "# HELP d Doubles.\n# TYPE d gauge\n"
                             "d{v=\"a\"} 0.1\nd{v=\"b\"} 3\nd{v=\"c\"} -2.5e-09\n"
                             "d{v=\"d\"} NaN\nd{v=\"e\"} +Inf\nd{v=\"f\"} -Inf\n"
                             "d{v=\"g\"} 0.3333333333333333\n");
}

static void test_family_once(void **state) /* MET-1 */
{
        MetricsWriter *w = *state;
        _cleanup_free_ char *text = NULL;

        assert_int_equal(metrics_family(w, "a_total", METRIC_COUNTER, "A."), 0);
        assert_int_equal(metrics_family(w, "b", METRIC_GAUGE, "B."), 0);
        assert_int_equal(metrics_family(w, "a_total", METRIC_COUNTER, "A again."), -EEXIST);
        /* Sticky: nothing more is written, and finishing reports the first error. */
        assert_int_equal(metrics_family(w, "c", METRIC_GAUGE, "C."), -EEXIST);
        assert_int_equal(metrics_sample_u64(w, 1, NULL), -EEXIST);
        assert_int_equal(metrics_writer_finish(w, &text, NULL), -EEXIST);
        assert_null(text);
}

static void test_series_once(void **state) /* MET-1 */
{
        MetricsWriter *w = *state;
        _cleanup_free_ char *text = NULL;

        assert_int_equal(metrics_family(w, "s", METRIC_GAUGE, "S."), 0);
        assert_int_equal(metrics_sample_u64(w, 1, "k", "x", NULL), 0);
        assert_int_equal(metrics_sample_u64(w, 1, "k", "y", NULL), 0);
        assert_int_equal(metrics_sample_u64(w, 2, "k", "x", NULL), -EEXIST);
        assert_int_equal(metrics_writer_finish(w, &text, NULL), -EEXIST);
}

static void test_same_labels_other_family(void **state)
{
        MetricsWriter *w = *state;

        assert_int_equal(metrics_family(w, "one", METRIC_GAUGE, "One."), 0);
        assert_int_equal(metrics_sample_u64(w, 1, "k", "x", NULL), 0);
        assert_int_equal(metrics_family(w, "two", METRIC_GAUGE, "Two."), 0);
        assert_int_equal(metrics_sample_u64(w, 2, "k", "x", NULL), 0);
        assert_exposition(w, "# HELP one One.\n# TYPE one gauge\none{k=\"x\"} 1\n"
                             "# HELP two Two.\n# TYPE two gauge\ntwo{k=\"x\"} 2\n");
}

/* Each call must fail with -EINVAL on a fresh writer. */
static void assert_family_invalid(const char *name, MetricType type, const char *help)
{
        MetricsWriter *w = NULL;
        _cleanup_free_ char *text = NULL;
        assert_int_equal(metrics_writer_new(&w), 0);
        assert_int_equal(metrics_family(w, name, type, help), -EINVAL);
        assert_int_equal(metrics_writer_finish(w, &text, NULL), -EINVAL);
        metrics_writer_free(w);
}

static void test_invalid_families(void **state)
{
        assert_family_invalid("", METRIC_GAUGE, "x");
        assert_family_invalid("9lives", METRIC_GAUGE, "x");
        assert_family_invalid("has-dash", METRIC_GAUGE, "x");
        assert_family_invalid("has space", METRIC_GAUGE, "x");
        assert_family_invalid("ok", METRIC_GAUGE, "");
        assert_family_invalid("ok", METRIC_GAUGE, NULL);
        assert_family_invalid("requests", METRIC_COUNTER, "Counters end in _total.");
        assert_family_invalid("ok", (MetricType)7, "x");
}

static void test_colon_names(void **state)
{
        MetricsWriter *w = *state;
        assert_int_equal(metrics_family(w, "job:rate_5m", METRIC_GAUGE, "Recorded."), 0);
        assert_int_equal(metrics_sample_u64(w, 5, NULL), 0);
        assert_exposition(w, "# HELP job:rate_5m Recorded.\n# TYPE job:rate_5m gauge\n"
                             "job:rate_5m 5\n");
}

static void test_invalid_samples(void **state)
{
        static const struct {
                const char *name, *value;
        } cases[] = {
            {"", "x"},
            {"9k", "x"},
            {"k:v", "x"},
            {"__reserved", "x"},
            {"k-dash", "x"},
            {"k", "\xff"},
            {"k", "\xc0\xaf"},         /* overlong "/" */
            {"k", "\xed\xa0\x80"},     /* a UTF-16 surrogate */
            {"k", "\xf4\x90\x80\x80"}, /* past U+10FFFF */
            {"k", "\xe2\x82"},         /* truncated */
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                MetricsWriter *w = NULL;
                assert_int_equal(metrics_writer_new(&w), 0);
                assert_int_equal(metrics_family(w, "f", METRIC_GAUGE, "F."), 0);
                assert_int_equal(metrics_sample_u64(w, 1, cases[i].name, cases[i].value, NULL),
                                 -EINVAL);
                metrics_writer_free(w);
        }

        /* A label named twice, a NULL value, and a sample before any family. */
        MetricsWriter *w = *state;
        assert_int_equal(metrics_sample_u64(w, 1, NULL), -EINVAL);
        metrics_writer_free(w);
        assert_int_equal(metrics_writer_new(&w), 0);
        *state = w;
        assert_int_equal(metrics_family(w, "f", METRIC_GAUGE, "F."), 0);
        assert_int_equal(metrics_sample_u64(w, 1, "k", "a", "k", "b", NULL), -EINVAL);
        metrics_writer_free(w);
        assert_int_equal(metrics_writer_new(&w), 0);
        *state = w;
        assert_int_equal(metrics_family(w, "f", METRIC_GAUGE, "F."), 0);
        assert_int_equal(metrics_sample_u64(w, 1, "k", NULL, NULL), -EINVAL);
}

static void test_empty_and_reuse(void **state)
{
        MetricsWriter *w = *state;

        assert_exposition(w, "");
        /* After finishing, the writer starts over: the family name is free again. */
        assert_int_equal(metrics_family(w, "r", METRIC_GAUGE, "R."), 0);
        assert_int_equal(metrics_sample_u64(w, 1, NULL), 0);
        assert_exposition(w, "# HELP r R.\n# TYPE r gauge\nr 1\n");
        assert_int_equal(metrics_family(w, "r", METRIC_GAUGE, "R."), 0);
        assert_exposition(w, "# HELP r R.\n# TYPE r gauge\n");
}

static void test_large(void **state)
{
        MetricsWriter *w = *state;
        _cleanup_free_ char *text = NULL;
        size_t size;
        char value[32];

        /* Enough series to grow the buffer several times. */
        assert_int_equal(metrics_family(w, "big", METRIC_GAUGE, "Big."), 0);
        for (unsigned i = 0; i < 2000; i++) {
                snprintf(value, sizeof value, "profile-%u", i);
                assert_int_equal(metrics_sample_u64(w, i, "profile", value, NULL), 0);
        }
        assert_int_equal(metrics_writer_finish(w, &text, &size), 0);
        assert_int_equal(strlen(text), size);
        assert_non_null(strstr(text, "big{profile=\"profile-1999\"} 1999\n"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_content_type),
            cmocka_unit_test_setup_teardown(test_families, setup, teardown),
            cmocka_unit_test_setup_teardown(test_escaping, setup, teardown),
            cmocka_unit_test_setup_teardown(test_doubles, setup, teardown),
            cmocka_unit_test_setup_teardown(test_family_once, setup, teardown),
            cmocka_unit_test_setup_teardown(test_series_once, setup, teardown),
            cmocka_unit_test_setup_teardown(test_same_labels_other_family, setup, teardown),
            cmocka_unit_test(test_invalid_families),
            cmocka_unit_test_setup_teardown(test_colon_names, setup, teardown),
            cmocka_unit_test_setup_teardown(test_invalid_samples, setup, teardown),
            cmocka_unit_test_setup_teardown(test_empty_and_reuse, setup, teardown),
            cmocka_unit_test_setup_teardown(test_large, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
