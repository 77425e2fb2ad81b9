/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the VF health store (SPEC §5). Every test runs in its own temporary data dir
 * with an injected clock. Syscall failures are injected with -Wl,--wrap (tests/unit/meson.build)
 * and only ever on the calls a test arms; the same wrappers count the store's I/O so "no I/O"
 * can be asserted.
 */
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include <jansson.h>

#include "health/health.h"
#include "fault-wrap.h"
#include "testlib.h"

/* ---- the store's I/O, through the fault wrappers (tests/lib/fault-wrap.h) ------------------ */

#define TMP_SUFFIX "/" HEALTH_FILE_NAME ".tmp"

static struct {
        unsigned opens, stats, renames, fsyncs;
        char fsynced[32][PATH_MAX];
        /*
         * The steps of a write, one letter each: O create the temp file, W write to it, S sync
         * it, C close it, R rename it, D sync gpu/, F sync anything else (data_dir).
         */
        char steps[64];
} io;

static void io_step(char step)
{
        size_t n = strlen(io.steps);
        if (n + 1 < sizeof io.steps)
                io.steps[n] = step;
}

static bool is_tmp(const char *path)
{
        return path && endswith(path, TMP_SUFFIX);
}

/* Counts the store's I/O and records the steps of its writes (the fault-wrap observer). */
static void observe_io(FaultCall call, const char *path, int flags)
{
        switch (call) {
        case FAULT_OPENAT:
                io.opens++;
                if ((flags & O_CREAT) && path && endswith(path, HEALTH_FILE_NAME ".tmp"))
                        io_step('O');
                break;
        case FAULT_FSTATAT:
                io.stats++;
                break;
        case FAULT_WRITE:
                if (is_tmp(path))
                        io_step('W');
                break;
        case FAULT_FSYNC:
                if (path) {
                        io_step(is_tmp(path) ? 'S' : endswith(path, "/gpu") ? 'D' : 'F');
                        if (io.fsyncs < ELEMENTSOF(io.fsynced))
                                snprintf(io.fsynced[io.fsyncs], PATH_MAX, "%s", path);
                }
                io.fsyncs++;
                break;
        case FAULT_CLOSE:
                if (is_tmp(path))
                        io_step('C');
                break;
        case FAULT_RENAMEAT:
                io.renames++;
                if (path && endswith(path, HEALTH_FILE_NAME ".tmp"))
                        io_step('R');
                break;
        default:
                break;
        }
}

static void io_reset(void)
{
        memset(&io, 0, sizeof io);
}

static unsigned io_total(void)
{
        return io.opens + io.stats + io.renames + io.fsyncs;
}

static bool io_fsynced(const char *suffix)
{
        for (unsigned i = 0; i < io.fsyncs && i < ELEMENTSOF(io.fsynced); i++)
                if (endswith(io.fsynced[i], suffix))
                        return true;
        return false;
}

/* ---- fixture ------------------------------------------------------------------------------- */

#define VF1 "0000:e3:00.4"
#define VF2 "0000:e3:00.5"
#define VF3 "0000:e3:00.6"
#define VF4 "0000:e3:00.7"
#define VF5 "0000:e3:01.0"
#define VF6 "0000:e3:01.1"
#define VF_A40 "0000:41:00.4"

typedef struct Completion {
        bool done;
        int r;
        HealthResult result;
        char error[512];
} Completion;

typedef struct Fixture {
        TestTree *tree;
        char path[PATH_MAX];
        int fd; /* the tree's */
        Timestamp now;
        Clock clock;
        HealthOptions options;
        HealthStore *store;
        unsigned write_wanted;
} Fixture;

static Timestamp fixture_now(void *userdata)
{
        return ((Fixture *)userdata)->now;
}

static Timestamp ts(const char *s)
{
        Timestamp t;
        assert_int_equal(parse_timestamp(s, &t), 0);
        return t;
}

static void advance(Fixture *fx, nsec_t d)
{
        fx->now.sec += (int64_t)(d / NSEC_PER_SEC);
}

static const char *model_of(const char *vf, void *userdata)
{
        return startswith(vf, "0000:41:") ? "NVIDIA A40" : "NVIDIA L40S";
}

static void on_write_wanted(HealthStore *s, void *userdata)
{
        ((Fixture *)userdata)->write_wanted++;
}

static void on_done(HealthStore *s, int r, const HealthResult *result, const char *error,
                    void *userdata)
{
        Completion *c = userdata;
        assert_false(c->done);
        c->done = true;
        c->r = r;
        c->result = *result;
        snprintf(c->error, sizeof c->error, "%s", error ? error : "");
}

static int setup(void **state)
{
        Fixture *fx = calloc(1, sizeof *fx);
        assert_non_null(fx);
        assert_int_equal(test_tree_new("test-health", &fx->tree), 0);
        snprintf(fx->path, sizeof fx->path, "%s", fx->tree->dir);
        fx->fd = fx->tree->fd;
        fx->now = ts("2026-09-02T20:00:00Z");
        fx->clock = (Clock){.now = fixture_now, .userdata = fx};
        fx->options = HEALTH_OPTIONS_DEFAULT;
        fx->options.clock = &fx->clock;
        fx->options.model_of = model_of;
        fx->options.userdata = fx;
        fault_disarm();
        fault_observe(observe_io);
        io_reset();
        *state = fx;
        return 0;
}

static int teardown(void **state)
{
        Fixture *fx = *state;
        fault_disarm();
        fault_observe(NULL);
        health_store_free(fx->store);
        test_tree_free(fx->tree);
        free(fx);
        return 0;
}

static HealthStore *open_store(Fixture *fx)
{
        _cleanup_free_ char *error = NULL;
        health_store_free(fx->store);
        fx->store = NULL;
        assert_int_equal(health_store_new(fx->fd, &fx->options, &fx->store), 0);
        int r = health_store_load(fx->store, &error);
        if (r < 0)
                fail_msg("load: %s", error);
        return fx->store;
}

/*
 * A hand edit: new content in place, with an mtime no write of ours can have, as an editor
 * would leave it. (Our own writes within one kernel clock tick could otherwise look alike.)
 */
static void put_file(Fixture *fx, const char *content)
{
        static long edits;
        (void)mkdirat(fx->fd, HEALTH_DIR_NAME, 0755);
        int fd = openat(fx->fd, HEALTH_FILE_PATH, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write_all(fd, content, strlen(content)), 0);
        edits++;
        struct timespec times[2] = {{.tv_sec = 1000000000 + edits}, {.tv_sec = 1000000000 + edits}};
        assert_int_equal(futimens(fd, times), 0);
        close(fd);
}

static char *get_file(Fixture *fx);

/*
 * A record whose source is operator although it has failures: HEALTH-25 (revised) never lets
 * an operator take over an automatic quarantine, so such a record comes from a file (an older
 * release wrote them). Rewrites the file so and reloads it.
 */
static void make_source_operator(Fixture *fx)
{
        _cleanup_free_ char *file = get_file(fx);
        char *at = strstr(file, "\"source\": \"auto\"");
        assert_non_null(at);
        _cleanup_free_ char *edited = NULL;
        assert_true(strprintf(&edited, "%.*s\"source\": \"operator\"%s", (int)(at - file), file,
                              at + strlen("\"source\": \"auto\"")) >= 0);
        put_file(fx, edited);
        assert_int_equal(health_store_reload(fx->store, NULL), 0);
        assert_int_equal(health_state_find(health_store_state(fx->store), VF1)->source,
                         HEALTH_SOURCE_OPERATOR);
}

static char *get_file(Fixture *fx)
{
        char *buf = NULL;
        int r = read_file_at(fx->fd, HEALTH_FILE_PATH, HEALTH_FILE_MAX, &buf, NULL);
        return r < 0 ? NULL : buf;
}

static bool file_exists(Fixture *fx, const char *rel)
{
        return faccessat(fx->fd, rel, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static char *data_file(const char *name)
{
        const char *dir = getenv("VGPUD_TEST_DATA");
        char *buf = NULL, *path = NULL;
        assert_non_null(dir);
        assert_int_equal(strprintf(&path, "%s/health/%s", dir, name), 0);
        assert_int_equal(read_file_at(AT_FDCWD, path, HEALTH_FILE_MAX, &buf, NULL), 0);
        free(path);
        return buf;
}

/* The file on disk says what memory says: nothing acknowledged is only in memory. */
static void assert_disk_matches_memory(Fixture *fx)
{
        _cleanup_free_ char *disk = get_file(fx), *mem = NULL;
        assert_int_equal(health_state_format(health_store_state(fx->store), &mem, NULL), 0);
        if (!disk) {
                assert_int_equal(health_store_state(fx->store)->n_records, 0);
                return;
        }
        assert_string_equal(disk, mem);
}

static HealthResult report_failure(Fixture *fx, const char *vf, const char *id, const char *at,
                                   const char *message)
{
        HealthResult res;
        _cleanup_free_ char *error = NULL;
        int r = health_store_report_failure(fx->store, vf, id, at, message, &res, &error);
        if (r < 0)
                fail_msg("report failure %s %s: %s", vf, id, error);
        return res;
}

static HealthResult report_success(Fixture *fx, const char *vf, const char *id, const char *at)
{
        HealthResult res;
        _cleanup_free_ char *error = NULL;
        int r = health_store_report_success(fx->store, vf, id, at, &res, &error);
        if (r < 0)
                fail_msg("report success %s %s: %s", vf, id, error);
        return res;
}

static const HealthRecord *record(Fixture *fx, const char *vf)
{
        return health_state_find(health_store_state(fx->store), vf);
}

/* The instance ids of a VF's failures, comma-separated ("" when it has no record). */
static const char *kept(Fixture *fx, const char *vf)
{
        static char buf[256];
        const HealthRecord *r = record(fx, vf);
        buf[0] = 0;
        for (size_t i = 0; r && i < r->n_failures; i++)
                snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%s", i ? "," : "",
                         r->failures[i].instance_id);
        return buf;
}

static void assert_parse_error(const char *json, const char *expected)
{
        _cleanup_free_ char *error = NULL;
        HealthState *s = NULL;
        int r = health_state_parse(json, strlen(json), &s, &error);
        if (r >= 0)
                fail_msg("parsed, expected: %s\ninput: %s", expected, json);
        assert_null(s);
        assert_non_null(error);
        if (!streq(error, expected))
                fail_msg("error\n  got:  %s\n  want: %s\ninput: %s", error, expected, json);
}

/* ---- file format --------------------------------------------------------------------------- */

/* HEALTH-1, HEALTH-3, HEALTH-4, GEN-8 */
static void test_example_round_trips(void **state)
{
        _cleanup_free_ char *canonical = data_file("example.json");
        _cleanup_free_ char *spec = data_file("example-spec.json");
        _cleanup_free_ char *out = NULL, *out2 = NULL, *error = NULL;
        _cleanup_health_state_ HealthState *s = NULL, *s2 = NULL;

        assert_int_equal(health_state_parse(spec, strlen(spec), &s, &error), 0);
        assert_int_equal(s->n_records, 1);
        const HealthRecord *r = &s->records[0];
        assert_string_equal(r->vf_address, VF1);
        assert_true(r->quarantined);
        assert_int_equal(r->source, HEALTH_SOURCE_AUTO);
        assert_false(r->source_implicit);
        assert_string_equal(r->failures[0].assigned_at, "2026-09-02T20:08:04.5974Z");
        assert_true(s->breaker_open);
        assert_string_equal(s->breaker_reason, "5 automatic quarantines within 1h0m0s");
        assert_string_equal(s->driver_version, "580.159.01");

        /* The SPEC's example, reformatted, is exactly the canonical file ... */
        assert_int_equal(health_state_format(s, &out, NULL), 0);
        assert_string_equal(out, canonical);
        /* ... which is a fixed point. */
        assert_int_equal(health_state_parse(canonical, strlen(canonical), &s2, &error), 0);
        assert_int_equal(health_state_format(s2, &out2, NULL), 0);
        assert_string_equal(out2, canonical);
}

/* HEALTH-3, HEALTH-6 */
static void test_upstream_file_round_trips(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *upstream = data_file("upstream.json");
        _cleanup_free_ char *out = NULL, *error = NULL;
        _cleanup_health_state_ HealthState *s = NULL;

        assert_int_equal(health_state_parse(upstream, strlen(upstream), &s, &error), 0);
        assert_int_equal(s->n_records, 3);
        /* Without "source": auto when it has failures, operator otherwise. */
        assert_int_equal(s->records[0].source, HEALTH_SOURCE_AUTO);
        assert_true(s->records[0].source_implicit);
        assert_false(s->records[1].quarantined);
        assert_int_equal(s->records[2].source, HEALTH_SOURCE_OPERATOR);
        assert_true(s->records[2].source_implicit);
        assert_int_equal(health_state_format(s, &out, NULL), 0);
        assert_string_equal(out, upstream);

        /* Through the store: loading writes nothing, and two writes later it is unchanged. */
        put_file(fx, upstream);
        io_reset();
        open_store(fx);
        assert_int_equal(io.renames, 0);
        assert_true(health_store_is_quarantined(fx->store, VF3));
        report_failure(fx, VF4, "x", "2026-09-04T00:00:00Z", "boom");
        assert_int_equal(health_store_clear(fx->store, (char *[]){VF4, NULL}, &error), 0);
        _cleanup_free_ char *after = get_file(fx);
        assert_string_equal(after, upstream);
}

/* HEALTH-2, HEALTH-4, GEN-8 */
static void test_written_file_is_canonical(void **state)
{
        Fixture *fx = *state;
        fx->options.threshold = 2;
        open_store(fx);

        fx->now = ts("2026-09-02T20:09:01.100Z");
        report_failure(fx, VF2, "", "", "");
        fx->now = ts("2026-09-02T20:10:00.000000001Z");
        report_failure(fx, VF1, "k3x9", "2026-09-02T20:08:04.5974Z", "");
        report_failure(fx, VF1, "m4n5", "", "NVRM: RmInitAdapter failed");

        _cleanup_free_ char *file = get_file(fx);
        assert_string_equal(file, "{\n"
                                  "  \"version\": 1,\n"
                                  "  \"records\": [\n"
                                  "    {\n"
                                  "      \"vf_address\": \"0000:e3:00.4\",\n"
                                  "      \"failures\": [\n"
                                  "        {\n"
                                  "          \"instance_id\": \"k3x9\",\n"
                                  "          \"assigned_at\": \"2026-09-02T20:08:04.5974Z\",\n"
                                  "          \"reported_at\": \"2026-09-02T20:10:00.000000001Z\"\n"
                                  "        },\n"
                                  "        {\n"
                                  "          \"instance_id\": \"m4n5\",\n"
                                  "          \"reported_at\": \"2026-09-02T20:10:00.000000001Z\"\n"
                                  "        }\n"
                                  "      ],\n"
                                  "      \"quarantined_at\": \"2026-09-02T20:10:00.000000001Z\",\n"
                                  "      \"reason\": \"NVRM: RmInitAdapter failed\",\n"
                                  "      \"source\": \"auto\"\n"
                                  "    },\n"
                                  "    {\n"
                                  "      \"vf_address\": \"0000:e3:00.5\",\n"
                                  "      \"failures\": [\n"
                                  "        {\n"
                                  "          \"reported_at\": \"2026-09-02T20:09:01.1Z\"\n"
                                  "        }\n"
                                  "      ]\n"
                                  "    }\n"
                                  "  ]\n"
                                  "}\n");
}

/*
 * What jansson itself makes of text: its load and its JSON_INDENT(2) dump, with the trailing
 * newline, which is how the file was written before the writer wrote it by hand.
 */
static char *jansson_canonical(const char *text)
{
        json_error_t jerr;
        json_auto_t *root = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
                fail_msg("jansson cannot load the output: %s\n%s", jerr.text, text);
        _cleanup_free_ char *dump = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        assert_non_null(dump);
        char *out = NULL;
        assert_true(strprintf(&out, "%s\n", dump) >= 0);
        return out;
}

/*
 * HEALTH-4, HEALTH-3: the writer's bytes are exactly jansson's two-space layout, escapes
 * included (quotes, backslashes, control bytes, DEL, '/', UTF-8 of every length), for every
 * optional part of the file; the hand-edited input layout (one failure a line) still loads.
 */
static void test_format_is_jansson_layout(void **state)
{
        static const char *const inputs[] = {
            "{\"version\": 1, \"records\": []}",
            "{\"version\": 1, \"records\": [\n"
            "  {\"vf_address\": \"0000:e3:00.4\", \"failures\": [\n"
            "    {\"instance_id\": \"q\\\"b\\\\s/\\u0001\\u001f\\u007f\\t\\n\\r\\b\\f\", "
            "\"assigned_at\": \"\\u00e9\\u20ac\\ud83d\\ude00\\u2028\", "
            "\"reported_at\": \"2026-09-02T20:09:01.1Z\"},\n"
            "    {\"reported_at\": \"2026-09-02T20:09:02Z\"}],\n"
            "   \"quarantined_at\": \"2026-09-02T20:09:01.1Z\", "
            "\"reason\": \"line\\nbreak \\\"quoted\\\" caf\\u00e9\", \"source\": \"operator\"},\n"
            "  {\"vf_address\": \"0000:e3:00.5\", \"quarantined_at\": \"2026-09-03T00:00:00Z\"}],\n"
            " \"drains\": [{\"gpu\": \"0000:e3:00.0\", \"reason\": \"tab\\there\", "
            "\"drained_at\": \"2026-09-02T21:00:00Z\"}],\n"
            " \"breaker\": {\"opened_at\": \"2026-09-02T20:30:00Z\", \"reason\": \"\\u00fc\"},\n"
            " \"driver_version\": \"580.159.01\", \"driver_changed_at\": \"2026-09-01T08:00:00Z\"}",
        };
        for (size_t i = 0; i < ELEMENTSOF(inputs); i++) {
                _cleanup_health_state_ HealthState *s = NULL, *again = NULL;
                _cleanup_free_ char *out = NULL, *out2 = NULL, *error = NULL, *want = NULL;
                size_t n;

                if (health_state_parse(inputs[i], strlen(inputs[i]), &s, &error) < 0)
                        fail_msg("input %zu: %s", i, error);
                assert_int_equal(health_state_format(s, &out, &n), 0);
                assert_int_equal(n, strlen(out));
                want = jansson_canonical(out);
                assert_string_equal(out, want);
                /* And it loads back to the same bytes. */
                assert_int_equal(health_state_parse(out, n, &again, &error), 0);
                assert_int_equal(health_state_format(again, &out2, NULL), 0);
                assert_string_equal(out2, out);
        }
}

/* HEALTH-4, GEN-9: timestamps are written as format_timestamp() writes them, on any day */
static void test_format_timestamps(void **state)
{
        static const char *const stamps[] = {
            "2026-09-02T20:09:01Z",           "2026-09-02T20:09:01.1Z",
            "2026-09-02T23:59:59.999999999Z", "2026-09-03T00:00:00.000000001Z",
            "2026-09-02T00:00:00.12Z",        "1969-12-31T23:59:59.5Z",
            "1970-01-01T00:00:00Z",           "0001-01-01T00:00:01Z",
            "2024-02-29T12:34:56.000100Z",    "9999-12-31T23:59:59.987654321Z",
            "2026-09-02T20:09:01.100000000Z",
        };
        _cleanup_health_state_ HealthState *s = NULL;
        assert_int_equal(health_state_new(&s), 0);
        s->records = calloc(1, sizeof *s->records);
        assert_non_null(s->records);
        s->n_records = 1;
        HealthRecord *r = &s->records[0];
        strcpy(r->vf_address, VF1);
        r->failures = calloc(ELEMENTSOF(stamps), sizeof *r->failures);
        assert_non_null(r->failures);
        for (size_t i = 0; i < ELEMENTSOF(stamps); i++) {
                HealthFailure *f = &r->failures[r->n_failures++];
                f->reported_at = ts(stamps[i]);
                assert_true(strprintf(&f->instance_id, "i%zu", i) >= 0);
                f->assigned_at = strdup("");
                assert_non_null(f->assigned_at);
        }
        /* The day changes back and forth: a remembered date must follow. */
        r->quarantined = true;
        r->quarantined_at = ts("2026-09-02T20:09:01.1Z");
        s->breaker_open = true;
        s->breaker_opened_at = ts("1999-01-01T00:00:00.5Z");
        s->breaker_reason = strdup("r");
        assert_non_null(s->breaker_reason);

        _cleanup_free_ char *out = NULL;
        assert_int_equal(health_state_format(s, &out, NULL), 0);
        json_auto_t *root = json_loads(out, 0, NULL);
        assert_non_null(root);
        json_t *failures =
            json_object_get(json_array_get(json_object_get(root, "records"), 0), "failures");
        assert_int_equal(json_array_size(failures), ELEMENTSOF(stamps));
        for (size_t i = 0; i < ELEMENTSOF(stamps); i++) {
                char want[TIMESTAMP_STRLEN];
                json_t *got = json_object_get(json_array_get(failures, i), "reported_at");
                assert_string_equal(json_string_value(got),
                                    format_timestamp(r->failures[i].reported_at, want));
        }
        assert_string_equal(
            json_string_value(json_object_get(json_object_get(root, "breaker"), "opened_at")),
            "1999-01-01T00:00:00.5Z");
}

/* HEALTH-4: a string that is not UTF-8 (it can only be put there by hand) is not written */
static void test_format_refuses_invalid_utf8(void **state)
{
        static const char *const bad[] = {
            "\xff", "a\xc3", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_health_state_ HealthState *s = NULL;
                _cleanup_free_ char *out = NULL;
                assert_int_equal(health_state_new(&s), 0);
                s->breaker_open = true;
                s->breaker_opened_at = ts("2026-09-02T20:30:00Z");
                s->breaker_reason = strdup(bad[i]);
                assert_non_null(s->breaker_reason);
                assert_int_equal(health_state_format(s, &out, NULL), -EILSEQ);
                assert_null(out);
        }
}

/* HEALTH-4: at most 64 failures per record, the oldest dropped (here while the breaker is open) */
static void test_failures_are_capped(void **state)
{
        Fixture *fx = *state;
        put_file(fx, "{\"version\": 1, \"records\": [], \"breaker\": {\"opened_at\": "
                     "\"2026-09-02T19:00:00Z\", \"reason\": \"5 automatic quarantines within "
                     "1h0m0s\"}}");
        open_store(fx);
        for (int i = 0; i < 70; i++) {
                char id[16];
                snprintf(id, sizeof id, "i%d", i);
                HealthResult res = report_failure(fx, VF1, id, "", "");
                assert_int_equal(res.outcome, HEALTH_OUTCOME_RECORDED);
                assert_int_equal(res.failures, i < 64 ? i + 1 : 64);
        }
        const HealthRecord *r = record(fx, VF1);
        assert_int_equal(r->n_failures, 64);
        assert_string_equal(r->failures[0].instance_id, "i6");
        assert_string_equal(r->failures[63].instance_id, "i69");
        assert_false(r->quarantined);
        assert_disk_matches_memory(fx);

        /* A hand-written file with more keeps its newest 64. */
        _cleanup_free_ char *json = NULL, *error = NULL;
        _cleanup_health_state_ HealthState *s = NULL;
        assert_int_equal(strprintf(&json,
                                   "{\"version\":1,\"records\":[{\"vf_address\":\"%s\","
                                   "\"failures\":[",
                                   VF2),
                         0);
        for (int i = 0; i < 66; i++)
                assert_int_equal(strextend(&json,
                                           "%s{\"instance_id\":\"f%d\",\"reported_at\":"
                                           "\"2026-09-02T19:00:00Z\"}",
                                           i ? "," : "", i),
                                 0);
        assert_int_equal(strextend(&json, "]}]}"), 0);
        assert_int_equal(health_state_parse(json, strlen(json), &s, &error), 0);
        assert_int_equal(s->records[0].n_failures, 64);
        assert_string_equal(s->records[0].failures[0].instance_id, "f2");
}

/* HEALTH-5, HEALTH-6, GEN-6: every load error, byte for byte */
static void test_load_errors(void **state)
{
        static const struct {
                const char *json, *error;
        } cases[] = {
            /* unmarshal */
            {"{\"version\": 1, \"records\": [",
             "unmarshal VF health state: ']' expected near end of file (line 1, column 27)"},
            {"{\"version\": 1, \"version\": 1, \"records\": []}",
             "unmarshal VF health state: duplicate object key near '\"version\"' (line 1, column "
             "24)"},
            {"[]", "unmarshal VF health state: expected an object"},
            {"{\"version\": \"1\", \"records\": []}",
             "unmarshal VF health state: version: expected an integer"},
            {"{\"version\": 1, \"records\": [7]}",
             "unmarshal VF health state: records[0]: expected an object"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": 4}]}",
             "unmarshal VF health state: records[0].vf_address: expected a string"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "{}}]}",
             "unmarshal VF health state: records[0].failures: expected an array"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[{\"instance_id\": 1}]}]}",
             "unmarshal VF health state: records[0].failures[0].instance_id: expected a string"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[{\"assigned_at\": []}]}]}",
             "unmarshal VF health state: records[0].failures[0].assigned_at: expected a string"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[\"x\"]}]}",
             "unmarshal VF health state: records[0].failures[0]: expected an object"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"source\": "
             "false}]}",
             "unmarshal VF health state: records[0].source: expected a string"},
            {"{\"version\": 1, \"records\": [], \"breaker\": []}",
             "unmarshal VF health state: breaker: expected an object"},
            {"{\"version\": 1, \"records\": [], \"breaker\": {\"reason\": 5}}",
             "unmarshal VF health state: breaker.reason: expected a string"},
            {"{\"version\": 1, \"records\": [], \"driver_version\": 580}",
             "unmarshal VF health state: driver_version: expected a string"},
            /* type errors anywhere come before validation errors anywhere */
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"bad\"}, {\"vf_address\": 1}]}",
             "unmarshal VF health state: records[1].vf_address: expected a string"},
            {"{\"version\": 1, \"records\": [], \"a\": [[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]}",
             "unmarshal VF health state: nesting deeper than 16 levels"},
            /* version and records */
            {"{\"version\": 2, \"records\": []}",
             "validate VF health state: unsupported version 2"},
            {"{\"records\": []}", "validate VF health state: unsupported version 0"},
            {"{\"version\": 1}", "validate VF health state: expected a records array"},
            {"{\"version\": 1, \"records\": null}",
             "validate VF health state: expected a records array"},
            /* records */
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:E3:00.4\", "
             "\"quarantined_at\": \"2026-09-02T20:09:01Z\"}]}",
             "validate VF health state record 0: invalid VF address \"0000:E3:00.4\""},
            {"{\"version\": 1, \"records\": [{\"quarantined_at\": \"2026-09-02T20:09:01Z\"}]}",
             "validate VF health state record 0: invalid VF address \"\""},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", "
             "\"quarantined_at\": \"0001-01-01T00:00:00Z\"}]}",
             "validate VF health state record 0: missing quarantine timestamp"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", "
             "\"quarantined_at\": \"yesterday\"}]}",
             "validate VF health state record 0: missing quarantine timestamp"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\"}]}",
             "validate VF health state record 0: neither quarantined nor any recorded failures"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[]}]}",
             "validate VF health state record 0: neither quarantined nor any recorded failures"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[{\"instance_id\": \"a\", \"reported_at\": \"2026-09-02T20:09:01Z\"}, "
             "{\"instance_id\": \"b\"}]}]}",
             "validate VF health state record 0 failure 1: missing report timestamp"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[{\"reported_at\": \"0001-01-01T00:00:00Z\"}]}]}",
             "validate VF health state record 0 failure 0: missing report timestamp"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[{\"instance_id\": \"a\", \"assigned_at\": \"t1\", \"reported_at\": "
             "\"2026-09-02T20:09:01Z\"}, {\"instance_id\": \"a\", \"assigned_at\": \"t1\", "
             "\"reported_at\": \"2026-09-02T20:09:02Z\"}]}]}",
             "validate VF health state record 0: duplicate failure for instance \"a\" assigned at "
             "\"t1\""},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", "
             "\"quarantined_at\": \"2026-09-02T20:09:01Z\"}, {\"vf_address\": \"0000:e3:00.5\", "
             "\"quarantined_at\": \"2026-09-02T20:09:01Z\"}, {\"vf_address\": \"0000:e3:00.4\", "
             "\"quarantined_at\": \"2026-09-02T20:09:01Z\"}]}",
             "validate VF health state record 2: duplicate VF address \"0000:e3:00.4\""},
            /* unknown keys and the extensions */
            {"{\"version\": 1, \"records\": [], \"extra\": true}",
             "validate VF health state: unknown key \"extra\""},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", "
             "\"quarantined_at\": \"2026-09-02T20:09:01Z\", \"note\": \"x\"}]}",
             "validate VF health state record 0: unknown key \"note\""},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[{\"reported_at\": \"2026-09-02T20:09:01Z\", \"why\": 1}]}]}",
             "validate VF health state record 0 failure 0: unknown key \"why\""},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", "
             "\"quarantined_at\": \"2026-09-02T20:09:01Z\", \"source\": \"manual\"}]}",
             "validate VF health state record 0: invalid source \"manual\""},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[{\"reported_at\": \"2026-09-02T20:09:01Z\"}], \"source\": \"auto\"}]}",
             "validate VF health state record 0: source without quarantine"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": "
             "[{\"reported_at\": \"2026-09-02T20:09:01Z\"}], \"reason\": \"x\"}]}",
             "validate VF health state record 0: reason without quarantine"},
            {"{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", "
             "\"quarantined_at\": \"2026-09-02T20:09:01Z\", \"reason\": \"\"}]}",
             "validate VF health state record 0: invalid reason length 0"},
            {"{\"version\": 1, \"records\": [], \"breaker\": {\"opened_at\": "
             "\"2026-09-02T20:09:01Z\", \"reason\": \"x\", \"by\": \"me\"}}",
             "validate VF health state: unknown key \"breaker.by\""},
            {"{\"version\": 1, \"records\": [], \"breaker\": {\"reason\": \"x\"}}",
             "validate VF health state: missing breaker timestamp"},
            {"{\"version\": 1, \"records\": [], \"breaker\": {\"opened_at\": "
             "\"0001-01-01T00:00:00Z\", \"reason\": \"x\"}}",
             "validate VF health state: missing breaker timestamp"},
            {"{\"version\": 1, \"records\": [], \"breaker\": {\"opened_at\": "
             "\"2026-09-02T20:09:01Z\"}}",
             "validate VF health state: invalid breaker reason length 0"},
            {"{\"version\": 1, \"records\": [], \"driver_version\": \"\"}",
             "validate VF health state: invalid driver_version length 0"},
            {"{\"version\": 1, \"records\": [], \"driver_changed_at\": \"2026-09-02T20:09:01Z\"}",
             "validate VF health state: driver_changed_at without driver_version"},
            {"{\"version\": 1, \"records\": [], \"driver_version\": \"580.1\", "
             "\"driver_changed_at\": \"soon\"}",
             "validate VF health state: invalid driver_changed_at"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_parse_error(cases[i].json, cases[i].error);

        /* A reason of 257 bytes, and one of exactly 256 that loads. */
        char reason[258];
        memset(reason, 'r', 257);
        reason[257] = 0;
        _cleanup_free_ char *json = NULL;
        assert_int_equal(strprintf(&json,
                                   "{\"version\": 1, \"records\": [{\"vf_address\": \"%s\", "
                                   "\"quarantined_at\": \"2026-09-02T20:09:01Z\", "
                                   "\"reason\": \"%s\"}]}",
                                   VF1, reason),
                         0);
        assert_parse_error(json, "validate VF health state record 0: invalid reason length 257");
        reason[256] = 0;
        free(json);
        assert_int_equal(strprintf(&json,
                                   "{\"version\": 1, \"records\": [{\"vf_address\": \"%s\", "
                                   "\"quarantined_at\": \"2026-09-02T20:09:01Z\", "
                                   "\"reason\": \"%s\"}]}",
                                   VF1, reason),
                         0);
        HealthState *s = NULL;
        assert_int_equal(health_state_parse(json, strlen(json), &s, NULL), 0);
        health_state_free(s);

        /* Unprintable bytes in a quoted value stay on one line. */
        assert_parse_error("{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\\n\", "
                           "\"quarantined_at\": \"2026-09-02T20:09:01Z\"}]}",
                           "validate VF health state record 0: invalid VF address "
                           "\"0000:e3:00.4\\x0a\"");
}

/* HEALTH-5: read errors and the 4 MiB bound, through the store, which latches them */
static void test_load_read_errors(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;

        assert_int_equal(mkdirat(fx->fd, HEALTH_DIR_NAME, 0755), 0);
        assert_int_equal(mkdirat(fx->fd, HEALTH_FILE_PATH, 0755), 0);
        assert_int_equal(health_store_new(fx->fd, &fx->options, &fx->store), 0);
        assert_int_equal(health_store_load(fx->store, &error), -EAGAIN);
        assert_string_equal(error, "read VF health state: Is a directory");
        assert_string_equal(health_store_unavailable_reason(fx->store),
                            "VF health state unavailable: read VF health state: Is a directory");
        assert_int_equal(unlinkat(fx->fd, HEALTH_FILE_PATH, AT_REMOVEDIR), 0);

        /* One byte above 4 MiB is an unmarshal error, never a truncated read. */
        _cleanup_free_ char *big = malloc(HEALTH_FILE_MAX + 2);
        assert_non_null(big);
        memset(big, ' ', HEALTH_FILE_MAX + 1);
        big[HEALTH_FILE_MAX + 1] = 0;
        memcpy(big, "{\"version\":1,\"records\":[]}", 26);
        put_file(fx, big);
        free(error);
        error = NULL;
        assert_int_equal(health_store_load(fx->store, &error), -EAGAIN);
        assert_string_equal(error, "unmarshal VF health state: file larger than 4194304 bytes");

        /* Exactly 4 MiB loads. */
        big[HEALTH_FILE_MAX] = 0;
        put_file(fx, big);
        assert_int_equal(health_store_load(fx->store, NULL), 0);
        assert_null(health_store_unavailable_reason(fx->store));

        /* A missing file is an empty store (HEALTH-1). */
        assert_int_equal(unlinkat(fx->fd, HEALTH_FILE_PATH, 0), 0);
        assert_int_equal(health_store_load(fx->store, NULL), 0);
        assert_int_equal(health_store_state(fx->store)->n_records, 0);
}

/* HEALTH-5, HEALTH-16: a failed load keeps the previous memory state and latches */
static void test_failed_load_keeps_memory(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;

        fx->options.threshold = 1;
        open_store(fx);
        report_failure(fx, VF1, "a", "t", "wedged");
        put_file(fx, "{\"version\": 2, \"records\": []}");
        assert_int_equal(health_store_reload(fx->store, &error), -EAGAIN);
        assert_string_equal(error, "VF health state unavailable: validate VF health state: "
                                   "unsupported version 2");
        assert_true(health_store_is_quarantined(fx->store, VF1));
        assert_string_equal(health_store_unavailable_reason(fx->store),
                            "VF health state unavailable: validate VF health state: unsupported "
                            "version 2");
}

/* ---- threshold and load-time re-evaluation ------------------------------------------------- */

/* HEALTH-7 */
static void test_threshold_range(void **state)
{
        Fixture *fx = *state;
        HealthStore *s = NULL;

        assert_false(health_threshold_is_valid(0));
        assert_true(health_threshold_is_valid(1));
        assert_true(health_threshold_is_valid(64));
        assert_false(health_threshold_is_valid(65));
        fx->options.threshold = 0;
        assert_int_equal(health_store_new(fx->fd, &fx->options, &s), -EINVAL);
        fx->options.threshold = 65;
        assert_int_equal(health_store_new(fx->fd, &fx->options, &s), -EINVAL);
        assert_null(s);
        fx->options.threshold = 64;
        assert_int_equal(health_store_new(fx->fd, &fx->options, &s), 0);
        health_store_free(s);
        s = NULL;

        /* The other options are checked too (CFG-3 validates them first). */
        HealthOptions o = fx->options;
        o.breaker_window = 0;
        assert_int_equal(health_store_new(fx->fd, &o, &s), -EINVAL);
        o = fx->options;
        o.breaker_max_quarantines = 0;
        assert_int_equal(health_store_new(fx->fd, &o, &s), -EINVAL);
        assert_int_equal(health_store_new(-1, &fx->options, &s), -EINVAL);
        assert_null(s);
}

static const char three_failures[] =
    "{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.4\", \"failures\": ["
    "{\"instance_id\": \"a\", \"reported_at\": \"2026-09-01T00:00:00Z\"},"
    "{\"instance_id\": \"b\", \"reported_at\": \"2026-09-01T00:00:01Z\"},"
    "{\"instance_id\": \"c\", \"reported_at\": \"2026-09-01T00:00:02Z\"}]},"
    "{\"vf_address\": \"0000:e3:00.5\", \"failures\": ["
    "{\"instance_id\": \"d\", \"reported_at\": \"2026-09-01T00:00:03Z\"}],"
    "\"quarantined_at\": \"2026-09-01T00:00:03Z\", \"source\": \"auto\"}]}";

/* HEALTH-8 */
static void test_reevaluation_at_load(void **state)
{
        Fixture *fx = *state;

        put_file(fx, three_failures);
        fx->options.threshold = 3;
        open_store(fx);
        const HealthRecord *r = record(fx, VF1);
        assert_true(r->quarantined);
        assert_int_equal(r->source, HEALTH_SOURCE_AUTO);
        assert_string_equal(r->reason, "re-evaluated at load: 3 failures, threshold 3");
        assert_int_equal(timestamp_compare(r->quarantined_at, fx->now), 0);
        assert_disk_matches_memory(fx); /* re-persisted */

        /* Raising the threshold never lifts a quarantine; nothing to write either. */
        fx->options.threshold = 64;
        io_reset();
        open_store(fx);
        assert_true(health_store_is_quarantined(fx->store, VF1));
        assert_true(health_store_is_quarantined(fx->store, VF2));
        assert_int_equal(io.renames, 0);
}

/* HEALTH-9 */
static void test_reevaluation_write_failure_keeps_quarantine(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;

        put_file(fx, three_failures);
        fx->options.threshold = 2;
        assert_int_equal(health_store_new(fx->fd, &fx->options, &fx->store), 0);
        fault_arm(FAULT_RENAMEAT, ".tmp", EIO, -1);
        assert_int_equal(health_store_load(fx->store, &error), -EIO);
        assert_string_equal(error, "rename VF health state: Input/output error");
        assert_true(health_store_is_quarantined(fx->store, VF1));
        assert_string_equal(health_store_unavailable_reason(fx->store),
                            "VF health state unavailable: last write failed: rename VF health "
                            "state: Input/output error");
        _cleanup_free_ char *file = get_file(fx);
        assert_string_equal(file, three_failures);

        /* The repair re-persists the kept quarantine. */
        fault_disarm();
        assert_int_equal(health_store_repair(fx->store, NULL), 0);
        assert_null(health_store_unavailable_reason(fx->store));
        assert_disk_matches_memory(fx);
        assert_true(record(fx, VF1)->quarantined);
}

/* HEALTH-9: no re-evaluation while the breaker is open */
static void test_reevaluation_skipped_while_breaker_open(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *json = NULL;

        assert_int_equal(strprintf(&json,
                                   "%.*s, \"breaker\": {\"opened_at\": "
                                   "\"2026-09-02T19:00:00Z\", \"reason\": \"tripped\"}}",
                                   (int)strlen(three_failures) - 1, three_failures),
                         0);
        put_file(fx, json);
        fx->options.threshold = 2;
        io_reset();
        open_store(fx);
        assert_false(health_store_is_quarantined(fx->store, VF1));
        assert_int_equal(io.renames, 0);
        _cleanup_free_ char *file = get_file(fx);
        assert_string_equal(file, json);
}

/* HEALTH-9: re-evaluated quarantines do not count towards the breaker */
static void test_reevaluation_not_counted_by_breaker(void **state)
{
        Fixture *fx = *state;

        put_file(fx, three_failures);
        fx->options.threshold = 1;
        fx->options.breaker_max_quarantines = 1;
        open_store(fx);
        assert_true(health_store_is_quarantined(fx->store, VF1));
        HealthResult res = report_failure(fx, VF3, "e", "", "wedged");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_QUARANTINED);
        assert_false(res.breaker_tripped);
        /* VF2's quarantine is "auto" from 2026-09-01, outside the window, so it is not counted. */
        res = report_failure(fx, VF4, "f", "", "wedged");
        assert_true(res.breaker_tripped);
        assert_string_equal(health_store_state(fx->store)->breaker_reason,
                            "2 automatic quarantines within 1h0m0s");
}

/* ---- reports ------------------------------------------------------------------------------- */

/* HEALTH-10 */
static void test_report_outcomes_and_invalid_address(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;
        HealthResult res;

        open_store(fx);
        res = report_failure(fx, VF1, "a", "t1", "m");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_RECORDED);
        assert_string_equal(health_outcome_to_string(res.outcome), "recorded");
        assert_int_equal(res.failures, 1);
        assert_int_equal(res.threshold, 2);

        io_reset();
        assert_int_equal(
            health_store_report_failure(fx->store, "0000:E3:00.4", "b", "t2", "m", &res, &error),
            -EINVAL);
        assert_string_equal(error, "invalid VF address \"0000:E3:00.4\"");
        assert_int_equal(io_total(), 0);
        free(error);
        error = NULL;
        assert_int_equal(health_store_report_success(fx->store, "e3:00.4", "a", "t1", &res, &error),
                         -EINVAL);
        assert_string_equal(error, "invalid VF address \"e3:00.4\"");
        assert_int_equal(record(fx, VF1)->n_failures, 1);
        assert_int_equal(io.renames, 0);
}

/* HEALTH-11: no I/O for an unchanged report, even while the store is unavailable */
static void test_unchanged_reports_do_no_io(void **state)
{
        Fixture *fx = *state;
        HealthResult res;
        _cleanup_free_ char *error = NULL;

        fx->options.threshold = 1;
        open_store(fx);
        report_failure(fx, VF1, "a", "t1", "m");
        report_failure(fx, VF2, "b", "t1", "m");
        fx->options.threshold = 2;
        open_store(fx);
        report_failure(fx, VF3, "c", "t1", "m");

        /* Make the store unavailable: a write error is latched. */
        fault_arm(FAULT_RENAMEAT, ".tmp", EIO, -1);
        assert_int_equal(health_store_report_failure(fx->store, VF4, "d", "t", "m", &res, &error),
                         -EIO);
        assert_non_null(health_store_unavailable_reason(fx->store));

        io_reset();
        res = report_failure(fx, VF1, "z", "t9", "m"); /* already quarantined */
        assert_int_equal(res.outcome, HEALTH_OUTCOME_UNCHANGED);
        assert_int_equal(res.failures, 1);
        res = report_failure(fx, VF3, "c", "t1", "m"); /* already recorded */
        assert_int_equal(res.outcome, HEALTH_OUTCOME_UNCHANGED);
        assert_int_equal(res.failures, 1);
        res = report_success(fx, VF3, "x", "t1"); /* HEALTH-13: no match */
        assert_int_equal(res.cleared, 0);
        res = report_success(fx, VF6, "x", "t1"); /* HEALTH-13: no record */
        assert_int_equal(res.cleared, 0);
        assert_int_equal(io_total(), 0);

        /* A change is refused while unavailable (HEALTH-16). */
        free(error);
        error = NULL;
        assert_int_equal(health_store_report_failure(fx->store, VF3, "e", "t2", "m", &res, &error),
                         -EAGAIN);
        assert_string_equal(error, "VF health state unavailable: last write failed: rename VF "
                                   "health state: Input/output error");
        assert_int_equal(record(fx, VF3)->n_failures, 1);
}

/* HEALTH-12 */
static void test_reason_sanitising(void **state)
{
        Fixture *fx = *state;
        char *out;

        assert_int_equal(health_sanitize_reason("", &out), 0);
        assert_null(out);
        assert_int_equal(health_sanitize_reason("a\tb\x01\x7f\xc3\xa9z", &out), 0);
        assert_string_equal(out, "a?b????z");
        free(out);

        char long_message[300];
        memset(long_message, 'x', sizeof long_message - 1);
        long_message[299] = 0;
        long_message[252] = 'E';
        assert_int_equal(health_sanitize_reason(long_message, &out), 0);
        assert_int_equal(strlen(out), 256);
        assert_int_equal(out[252], 'E');
        assert_string_equal(out + 253, "...");
        free(out);
        long_message[256] = 0; /* exactly 256: kept whole */
        assert_int_equal(health_sanitize_reason(long_message, &out), 0);
        assert_string_equal(out, long_message);
        free(out);

        /* Through a report: the quarantine carries the sanitised message, or none. */
        fx->options.threshold = 1;
        open_store(fx);
        report_failure(fx, VF1, "a", "t", "NVRM:\nXid 79\x1b[0m");
        assert_string_equal(record(fx, VF1)->reason, "NVRM:?Xid 79?[0m");
        report_failure(fx, VF2, "a", "t", "");
        assert_true(record(fx, VF2)->quarantined);
        assert_null(record(fx, VF2)->reason);
        assert_disk_matches_memory(fx);
}

/* HEALTH-13, HEALTH-14, HEALTH-15 */
static void test_success_rules(void **state)
{
        Fixture *fx = *state;
        HealthResult res;

        fx->options.threshold = 3;
        fx->options.breaker_enabled = false;
        open_store(fx);
        report_failure(fx, VF1, "a", "t1", "m");
        report_failure(fx, VF1, "b", "t2", "m");
        report_failure(fx, VF1, "c", "t3", "m");
        assert_true(record(fx, VF1)->quarantined);

        /* The same instance with another assignment identity matches nothing. */
        res = report_success(fx, VF1, "b", "t9");
        assert_int_equal(res.cleared, 0);
        /* Another VF's success never clears this one (HEALTH-15). */
        res = report_success(fx, VF2, "c", "t3");
        assert_int_equal(res.cleared, 0);

        /* A middle match clears it and everything older, keeps the quarantine. */
        res = report_success(fx, VF1, "b", "t2");
        assert_int_equal(res.cleared, 2);
        assert_false(res.rescinded);
        assert_string_equal(kept(fx, VF1), "c");
        assert_true(record(fx, VF1)->quarantined);

        /* An operator quarantine is never lifted by a success (HEALTH-15). */
        make_source_operator(fx);
        res = report_success(fx, VF1, "c", "t3");
        assert_int_equal(res.cleared, 1);
        assert_false(res.rescinded);
        assert_true(record(fx, VF1)->quarantined);
        assert_int_equal(record(fx, VF1)->n_failures, 0);

        /* A record left with failures but no quarantine stays; left with neither it goes. */
        report_failure(fx, VF2, "d", "t4", "m");
        report_failure(fx, VF2, "e", "t5", "m");
        res = report_success(fx, VF2, "d", "t4");
        assert_int_equal(res.cleared, 1);
        assert_string_equal(kept(fx, VF2), "e");
        res = report_success(fx, VF2, "e", "t5");
        assert_int_equal(res.cleared, 1);
        assert_null(record(fx, VF2));
        assert_disk_matches_memory(fx);
}

/* HEALTH-31 (the table verbatim), HEALTH-11, HEALTH-13, HEALTH-14 */
typedef enum StepKind {
        STEP_FAILURE,
        STEP_SUCCESS,
        STEP_OPERATOR_QUARANTINE,
} StepKind;

typedef struct Step {
        StepKind kind;
        const char *who;
        HealthOutcome outcome; /* failure */
        unsigned count;        /* failure: n of 2; success: cleared */
        bool rescinded;
        const char *kept; /* NULL: record deleted */
        bool quarantined;
} Step;

static void run_steps(Fixture *fx, const Step *steps, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                const Step *st = &steps[i];
                char at[32];
                HealthResult res;

                snprintf(at, sizeof at, "2026-09-02T20:0%c:00Z", st->who[0] - 'A' + '1');
                advance(fx, NSEC_PER_MIN);
                switch (st->kind) {
                case STEP_FAILURE:
                        res = report_failure(fx, VF1, st->who, at, "RmInitAdapter failed");
                        assert_int_equal(res.outcome, st->outcome);
                        if (st->outcome != HEALTH_OUTCOME_UNCHANGED) {
                                assert_int_equal(res.failures, st->count);
                                assert_int_equal(res.threshold, 2);
                        }
                        break;
                case STEP_SUCCESS:
                        res = report_success(fx, VF1, st->who, at);
                        assert_int_equal(res.cleared, st->count);
                        assert_int_equal(res.rescinded, st->rescinded);
                        break;
                case STEP_OPERATOR_QUARANTINE:
                        make_source_operator(fx);
                        break;
                }
                const HealthRecord *r = record(fx, VF1);
                if (!st->kept) {
                        assert_null(r);
                } else {
                        assert_non_null(r);
                        assert_string_equal(kept(fx, VF1), st->kept);
                        assert_int_equal(r->quarantined, st->quarantined);
                }
                assert_disk_matches_memory(fx);
        }
}

static void test_health31_table(void **state)
{
        Fixture *fx = *state;
        static const Step steps[] = {
            {STEP_FAILURE, "A", HEALTH_OUTCOME_RECORDED, 1, false, "A", false},
            {STEP_FAILURE, "A", HEALTH_OUTCOME_UNCHANGED, 0, false, "A", false},
            {STEP_FAILURE, "B", HEALTH_OUTCOME_QUARANTINED, 2, false, "A,B", true},
            {STEP_FAILURE, "C", HEALTH_OUTCOME_UNCHANGED, 0, false, "A,B", true},
            {STEP_SUCCESS, "C", 0, 0, false, "A,B", true},
            {STEP_SUCCESS, "A", 0, 1, false, "B", true},
            {STEP_SUCCESS, "B", 0, 1, true, NULL, false},
            {STEP_FAILURE, "D", HEALTH_OUTCOME_RECORDED, 1, false, "D", false},
        };
        fx->options.threshold = 2;
        fx->options.breaker_enabled = false;
        open_store(fx);
        run_steps(fx, steps, ELEMENTSOF(steps));
}

static void test_health31_operator_variant(void **state)
{
        Fixture *fx = *state;
        static const Step steps[] = {
            {STEP_FAILURE, "A", HEALTH_OUTCOME_RECORDED, 1, false, "A", false},
            {STEP_FAILURE, "A", HEALTH_OUTCOME_UNCHANGED, 0, false, "A", false},
            {STEP_FAILURE, "B", HEALTH_OUTCOME_QUARANTINED, 2, false, "A,B", true},
            {STEP_FAILURE, "C", HEALTH_OUTCOME_UNCHANGED, 0, false, "A,B", true},
            {STEP_SUCCESS, "C", 0, 0, false, "A,B", true},
            {STEP_SUCCESS, "A", 0, 1, false, "B", true},
            {STEP_OPERATOR_QUARANTINE, "B", 0, 0, false, "B", true},
            {STEP_SUCCESS, "B", 0, 1, false, "", true},
        };
        fx->options.threshold = 2;
        fx->options.breaker_enabled = false;
        open_store(fx);
        run_steps(fx, steps, ELEMENTSOF(steps));
        assert_int_equal(record(fx, VF1)->source, HEALTH_SOURCE_OPERATOR);
}

/* ---- availability -------------------------------------------------------------------------- */

/* HEALTH-16, HEALTH-17 */
static void test_failed_load_refuses_and_retries(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;
        static const char bad[] = "{\"version\": 1, \"records\": [{\"vf_address\": \"x\"}]}";

        put_file(fx, bad);
        assert_int_equal(health_store_new(fx->fd, &fx->options, &fx->store), 0);
        assert_int_equal(health_store_load(fx->store, &error), -EAGAIN);
        assert_string_equal(error, "validate VF health state record 0: invalid VF address \"x\"");
        assert_string_equal(health_store_unavailable_reason(fx->store),
                            "VF health state unavailable: validate VF health state record 0: "
                            "invalid VF address \"x\"");

        /* The mutation retries the load first, and is refused: the file stays as it was. */
        HealthResult res;
        free(error);
        error = NULL;
        assert_int_equal(health_store_report_failure(fx->store, VF1, "a", "t", "m", &res, &error),
                         -EAGAIN);
        assert_string_equal(error, "VF health state unavailable: validate VF health state record "
                                   "0: invalid VF address \"x\"");
        _cleanup_free_ char *file = get_file(fx);
        assert_string_equal(file, bad);
        assert_int_equal(health_store_state(fx->store)->n_records, 0);

        /* Once the file is repaired, the next mutation loads it and goes through. */
        put_file(fx, "{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.5\", "
                     "\"quarantined_at\": \"2026-09-02T19:00:00Z\"}]}");
        res = report_failure(fx, VF1, "a", "t", "m");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_RECORDED);
        assert_null(health_store_unavailable_reason(fx->store));
        assert_true(health_store_is_quarantined(fx->store, VF2));
        assert_disk_matches_memory(fx);
}

/* HEALTH-21 */
static void test_repair(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;
        HealthResult res;

        fx->options.threshold = 1;
        open_store(fx);
        report_failure(fx, VF1, "a", "t", "m");

        /* A healthy store: no I/O at all. */
        io_reset();
        assert_int_equal(health_store_repair(fx->store, &error), 0);
        assert_int_equal(io_total(), 0);

        /* A latched write error: the repair re-persists memory. */
        fault_arm(FAULT_FSYNC, ".tmp", EIO, 1);
        assert_int_equal(health_store_report_failure(fx->store, VF2, "b", "t", "m", &res, &error),
                         -EIO);
        assert_string_equal(error, "sync VF health state: Input/output error");
        assert_false(health_store_is_quarantined(fx->store, VF2)); /* rolled back */
        io_reset();
        assert_int_equal(health_store_repair(fx->store, NULL), 0);
        assert_int_equal(io.renames, 1);
        assert_null(health_store_unavailable_reason(fx->store));

        /* A failing repair stays latched and says why. */
        fault_arm(FAULT_FSYNC, ".tmp", EIO, 1);
        assert_int_equal(health_store_report_failure(fx->store, VF2, "b", "t", "m", &res, NULL),
                         -EIO);
        fault_arm(FAULT_RENAMEAT, ".tmp", EXDEV, 1);
        free(error);
        error = NULL;
        assert_int_equal(health_store_repair(fx->store, &error), -EXDEV);
        assert_string_equal(error, "rename VF health state: Invalid cross-device link");
        assert_int_equal(health_store_repair(fx->store, NULL), 0);

        /* A latched load error: the repair retries the load. */
        put_file(fx, "{");
        assert_int_equal(health_store_reload(fx->store, NULL), -EAGAIN);
        free(error);
        error = NULL;
        assert_int_equal(health_store_repair(fx->store, &error), -EAGAIN);
        assert_string_equal(error, "VF health state unavailable: unmarshal VF health state: string "
                                   "or '}' expected near end of file (line 1, column 1)");
        put_file(fx, "{\"version\": 1, \"records\": []}");
        assert_int_equal(health_store_repair(fx->store, NULL), 0);
        assert_null(health_store_unavailable_reason(fx->store));
        assert_false(health_store_is_quarantined(fx->store, VF1));
}

/* ---- the write protocol -------------------------------------------------------------------- */

/* HEALTH-18 */
static void test_write_protocol(void **state)
{
        Fixture *fx = *state;
        struct stat st;

        fx->options.threshold = 64; /* every report below writes */
        mode_t old = umask(077);
        open_store(fx);
        io_reset();
        report_failure(fx, VF1, "a", "t", "m");
        umask(old);

        assert_int_equal(fstatat(fx->fd, HEALTH_DIR_NAME, &st, 0), 0);
        assert_int_equal(st.st_mode & 07777, 0755);
        assert_int_equal(fstatat(fx->fd, HEALTH_FILE_PATH, &st, 0), 0);
        assert_int_equal(st.st_mode & 07777, 0644);
        assert_false(file_exists(fx, HEALTH_FILE_PATH ".tmp"));
        /* It created gpu/, so it synced data_dir, then the file, then gpu/. */
        assert_int_equal(io.fsyncs, 3);
        assert_true(endswith(io.fsynced[0], fx->path));
        assert_true(endswith(io.fsynced[1], "/gpu/" HEALTH_FILE_NAME ".tmp"));
        assert_true(endswith(io.fsynced[2], "/gpu"));
        assert_int_equal(io.renames, 1);
        /* In this order, and the file's bytes in one write(). */
        assert_string_equal(io.steps, "FOWSCRD");

        /* gpu/ exists now: two fsyncs, the floor. */
        io_reset();
        report_failure(fx, VF2, "a", "t", "m");
        assert_int_equal(io.fsyncs, 2);
        assert_false(io_fsynced(fx->path));
        assert_string_equal(io.steps, "OWSCRD");

        /* A file of many records is still written with one write(). */
        static const char *const vfs[] = {VF3, VF4, VF5, VF6};
        for (int i = 0; i < 200; i++) {
                char id[16];
                snprintf(id, sizeof id, "b%d", i);
                report_failure(fx, vfs[i % 4], id, "2026-09-02T20:08:04.5974Z", "m");
        }
        io_reset();
        report_failure(fx, VF1, "b", "t", "m");
        assert_string_equal(io.steps, "OWSCRD");
        _cleanup_free_ char *file = get_file(fx);
        assert_true(strlen(file) > 16384);
}

/* HEALTH-18: a failed fsync of data_dir is retried by the next write, and only until it works */
static void test_parent_sync_retry(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;
        HealthResult res;

        fx->options.threshold = 1;
        open_store(fx);
        fault_arm(FAULT_FSYNC, fx->path, EIO, 1);
        assert_int_equal(health_store_report_failure(fx->store, VF1, "a", "t", "m", &res, &error),
                         -EIO);
        assert_string_equal(error, "sync VF health state parent dir: Input/output error");
        assert_false(health_store_is_quarantined(fx->store, VF1));
        assert_false(file_exists(fx, HEALTH_FILE_PATH));
        assert_string_equal(health_store_unavailable_reason(fx->store),
                            "VF health state unavailable: last write failed: sync VF health state "
                            "parent dir: Input/output error");

        /* gpu/ exists now, but data_dir was never synced: the repair syncs it. */
        io_reset();
        assert_int_equal(health_store_repair(fx->store, NULL), 0);
        assert_true(io_fsynced(fx->path));
        assert_null(health_store_unavailable_reason(fx->store));

        io_reset();
        report_failure(fx, VF1, "a", "t", "m");
        assert_false(io_fsynced(fx->path));
        assert_int_equal(io.fsyncs, 2);
}

/* HEALTH-19: every step's failure, its exact text, and what survives it */
static void test_write_step_failures(void **state)
{
        Fixture *fx = *state;
        static const struct {
                FaultCall call;
                const char *match; /* "" stands for the data dir */
                int error;
                bool fresh; /* the data dir has no gpu/ yet */
                bool after_rename;
                const char *text;
        } cases[] = {
            {FAULT_MKDIRAT, HEALTH_DIR_NAME, EACCES, true, false,
             "create VF health state dir: Permission denied"},
            {FAULT_FSYNC, "", EIO, true, false,
             "sync VF health state parent dir: Input/output error"},
            {FAULT_OPENAT, HEALTH_DIR_NAME, EMFILE, false, false,
             "create VF health state dir: Too many open files"},
            {FAULT_OPENAT, ".tmp", ENOSPC, false, false,
             "create VF health state: No space left on device"},
            {FAULT_WRITE, ".tmp", ENOSPC, false, false,
             "write VF health state: No space left on device"},
            {FAULT_FSYNC, ".tmp", EIO, false, false, "sync VF health state: Input/output error"},
            {FAULT_CLOSE, ".tmp", EIO, false, false, "close VF health state: Input/output error"},
            {FAULT_RENAMEAT, ".tmp", EIO, false, false,
             "rename VF health state: Input/output error"},
            {FAULT_FSYNC, "/gpu", EIO, false, true, "sync VF health state dir: Input/output error"},
        };

        fx->options.threshold = 1;
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char name[32];
                _cleanup_free_ char *error = NULL, *before = NULL, *expected = NULL, *dir = NULL;
                HealthResult res;

                snprintf(name, sizeof name, "case-%zu", i);
                assert_int_equal(strprintf(&dir, "%s/%s", fx->path, name), 0);
                assert_int_equal(mkdirat(fx->fd, name, 0755), 0);
                _cleanup_close_ int fd = openat(fx->fd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                assert_true(fd >= 0);
                _cleanup_health_store_ HealthStore *s = NULL;
                assert_int_equal(health_store_new(fd, &fx->options, &s), 0);
                assert_int_equal(health_store_load(s, NULL), 0);
                if (!cases[i].fresh) {
                        assert_int_equal(
                            health_store_report_failure(s, VF1, "a", "t", "m", &res, NULL), 0);
                        assert_int_equal(
                            read_file_at(fd, HEALTH_FILE_PATH, HEALTH_FILE_MAX, &before, NULL), 0);
                }

                fault_arm(cases[i].call, *cases[i].match ? cases[i].match : dir, cases[i].error,
                          -1);
                int r = health_store_report_failure(s, VF2, "b", "t", "m", &res, &error);
                fault_disarm();
                assert_int_equal(r, -cases[i].error);
                assert_string_equal(error, cases[i].text);
                assert_int_equal(strprintf(&expected,
                                           "VF health state unavailable: last write failed: %s",
                                           cases[i].text),
                                 0);
                assert_string_equal(health_store_unavailable_reason(s), expected);
                assert_int_equal(faccessat(fd, HEALTH_FILE_PATH ".tmp", F_OK, 0), -1);

                /* Before the rename: rolled back, the old file stands. After: both kept. */
                assert_int_equal(health_store_is_quarantined(s, VF2), cases[i].after_rename);
                _cleanup_free_ char *after = NULL;
                int rr = read_file_at(fd, HEALTH_FILE_PATH, HEALTH_FILE_MAX, &after, NULL);
                if (cases[i].after_rename)
                        assert_non_null(strstr(after, VF2));
                else if (before)
                        assert_string_equal(after, before);
                else
                        assert_int_equal(rr, -ENOENT);

                /* Any successful write clears the latch (HEALTH-20). */
                assert_int_equal(health_store_repair(s, NULL), 0);
                assert_null(health_store_unavailable_reason(s));
        }
}

/* HEALTH-19: a leftover temp file is removed at start-up */
static void test_leftover_tmp_removed(void **state)
{
        Fixture *fx = *state;
        assert_int_equal(mkdirat(fx->fd, HEALTH_DIR_NAME, 0755), 0);
        int fd = openat(fx->fd, HEALTH_FILE_PATH ".tmp", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        close(fd);
        open_store(fx);
        assert_false(file_exists(fx, HEALTH_FILE_PATH ".tmp"));
}

/* ---- group commit -------------------------------------------------------------------------- */

static int submit(Fixture *fx, const char *vf, const char *id, Completion *c)
{
        return health_store_submit(fx->store,
                                   &(HealthRequest){
                                       .kind = HEALTH_REQUEST_FAILURE,
                                       .vf_address = vf,
                                       .instance_id = id,
                                       .assigned_at = "t",
                                       .text = "wedged",
                                   },
                                   on_done, c, NULL, NULL);
}

static HealthWrite *begin(Fixture *fx)
{
        HealthWrite *w = NULL;
        assert_int_equal(health_store_begin_write(fx->store, &w), 1);
        assert_non_null(w);
        return w;
}

/* Runs the read the store queued, as the owner's worker would: finish_read()'s result. */
static int run_read(Fixture *fx)
{
        HealthRead *rd = NULL;
        assert_int_equal(health_store_begin_read(fx->store, &rd), 1);
        health_read_run(rd);
        return health_store_finish_read(fx->store, rd, NULL);
}

static void *run_write_thread(void *w)
{
        health_write_run(w);
        return NULL;
}

/* HEALTH-20: one write at a time, the requests that arrive meanwhile share the next one */
static void test_group_commit(void **state)
{
        Fixture *fx = *state;
        Completion c1 = {0}, c2 = {0}, c3 = {0}, c4 = {0};

        fx->options.threshold = 1;
        fx->options.io_wanted = on_write_wanted;
        open_store(fx);
        io_reset();

        assert_int_equal(submit(fx, VF1, "a", &c1), 1);
        assert_int_equal(fx->write_wanted, 1);
        assert_true(health_store_write_pending(fx->store));
        assert_true(health_store_is_quarantined(fx->store, VF1)); /* placement sees it at once */
        HealthWrite *w1 = begin(fx);
        assert_true(health_store_write_in_flight(fx->store));

        /* While w1 is in flight: queued, visible, not written, no new wake-up. */
        assert_int_equal(submit(fx, VF2, "b", &c2), 1);
        assert_int_equal(submit(fx, VF3, "c", &c3), 1);
        assert_int_equal(submit(fx, VF4, "d", &c4), 1);
        assert_int_equal(fx->write_wanted, 1);
        assert_true(health_store_is_quarantined(fx->store, VF3));
        HealthWrite *none = NULL;
        assert_int_equal(health_store_begin_write(fx->store, &none), 0);
        assert_null(none);

        /* The blocking part runs on another thread, as the worker pool would run it. */
        pthread_t t;
        assert_int_equal(pthread_create(&t, NULL, run_write_thread, w1), 0);
        assert_int_equal(pthread_join(t, NULL), 0);
        assert_int_equal(health_write_fsyncs(w1), 3);
        assert_false(c1.done);
        health_store_finish_write(fx->store, w1);
        assert_true(c1.done);
        assert_int_equal(c1.r, 0);
        assert_int_equal(c1.result.outcome, HEALTH_OUTCOME_QUARANTINED);
        assert_false(c2.done);
        assert_int_equal(fx->write_wanted, 2);

        _cleanup_free_ char *file = get_file(fx);
        assert_non_null(strstr(file, VF1));
        assert_null(strstr(file, VF2));

        /* The three queued requests: one write. */
        HealthWrite *w2 = begin(fx);
        assert_int_equal(health_write_run(w2), 0);
        health_store_finish_write(fx->store, w2);
        assert_true(c2.done && c3.done && c4.done);
        assert_int_equal(c2.r + c3.r + c4.r, 0);
        assert_int_equal(io.renames, 2);
        assert_false(health_store_write_pending(fx->store));
        assert_disk_matches_memory(fx);
}

/* HEALTH-20: a failure before the rename rolls back exactly its own requests */
static void test_group_commit_rollback(void **state)
{
        Fixture *fx = *state;
        Completion c1 = {0}, c2 = {0}, c3 = {0};

        fx->options.threshold = 2;
        fx->options.io_wanted = on_write_wanted;
        open_store(fx);

        /* VF1: A rides in w1; B and VF2's C wait for w2. B quarantines, counting A. */
        assert_int_equal(submit(fx, VF1, "A", &c1), 1);
        HealthWrite *w1 = begin(fx);
        assert_int_equal(submit(fx, VF1, "B", &c2), 1);
        assert_int_equal(submit(fx, VF2, "C", &c3), 1);
        assert_true(health_store_is_quarantined(fx->store, VF1));

        fault_arm(FAULT_RENAMEAT, ".tmp", EIO, 1);
        assert_int_equal(health_write_run(w1), -EIO);
        health_store_finish_write(fx->store, w1);
        assert_true(c1.done);
        assert_int_equal(c1.r, -EIO);
        assert_string_equal(c1.error, "rename VF health state: Input/output error");
        assert_false(c2.done);

        /* A is gone; B, applied again without A, no longer quarantines. */
        assert_string_equal(kept(fx, VF1), "B");
        assert_false(health_store_is_quarantined(fx->store, VF1));
        assert_string_equal(kept(fx, VF2), "C");
        assert_string_equal(health_store_unavailable_reason(fx->store),
                            "VF health state unavailable: last write failed: rename VF health "
                            "state: Input/output error");
        /* New changes are refused while latched; the queued ones still get their write. */
        Completion c4 = {0};
        assert_int_equal(submit(fx, VF3, "D", &c4), -EAGAIN);

        HealthWrite *w2 = begin(fx);
        assert_int_equal(health_write_run(w2), 0);
        health_store_finish_write(fx->store, w2);
        assert_int_equal(c2.r, 0);
        assert_int_equal(c2.result.outcome, HEALTH_OUTCOME_RECORDED);
        assert_int_equal(c2.result.failures, 1);
        assert_int_equal(c3.r, 0);
        assert_null(health_store_unavailable_reason(fx->store));
        assert_disk_matches_memory(fx);
}

/* HEALTH-20: a failure after the rename keeps its requests */
static void test_group_commit_failure_after_rename(void **state)
{
        Fixture *fx = *state;
        Completion c1 = {0}, c2 = {0};

        fx->options.threshold = 1;
        fx->options.io_wanted = on_write_wanted;
        open_store(fx);
        assert_int_equal(submit(fx, VF1, "A", &c1), 1);
        HealthWrite *w1 = begin(fx);
        assert_int_equal(submit(fx, VF2, "B", &c2), 1);

        fault_arm(FAULT_FSYNC, "/gpu", EIO, 1);
        assert_int_equal(health_write_run(w1), -EIO);
        health_store_finish_write(fx->store, w1);
        assert_int_equal(c1.r, -EIO);
        assert_string_equal(c1.error, "sync VF health state dir: Input/output error");
        assert_true(health_store_is_quarantined(fx->store, VF1));
        assert_true(health_store_is_quarantined(fx->store, VF2));
        _cleanup_free_ char *file = get_file(fx);
        assert_non_null(strstr(file, VF1));
        assert_non_null(health_store_unavailable_reason(fx->store));

        HealthWrite *w2 = begin(fx);
        assert_int_equal(health_write_run(w2), 0);
        health_store_finish_write(fx->store, w2);
        assert_int_equal(c2.r, 0);
        assert_null(health_store_unavailable_reason(fx->store));
        assert_disk_matches_memory(fx);
}

/* ---- external edits ------------------------------------------------------------------------ */

/* HEALTH-22: a hand edit followed at once by a report */
static void test_hand_edit_then_report(void **state)
{
        Fixture *fx = *state;

        fx->options.threshold = 1;
        open_store(fx);
        report_failure(fx, VF1, "a", "t", "m");

        /* The operator clears VF1 and holds VF2, by hand. */
        put_file(fx,
                 "{\n  \"version\": 1,\n  \"records\": [\n    {\n      \"vf_address\": "
                 "\"0000:e3:00.5\",\n      \"quarantined_at\": \"2026-09-02T19:00:00Z\",\n"
                 "      \"reason\": \"hand\",\n      \"source\": \"operator\"\n    }\n  ]\n}\n");
        HealthResult res = report_failure(fx, VF3, "c", "t", "m");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_QUARANTINED);
        assert_false(health_store_is_quarantined(fx->store, VF1));
        assert_true(health_store_is_quarantined(fx->store, VF2));
        assert_disk_matches_memory(fx);
        _cleanup_free_ char *file = get_file(fx);
        assert_null(strstr(file, VF1));
        assert_non_null(strstr(file, "\"reason\": \"hand\""));

        /* A report that was a no-op before the edit is one now that the VF was cleared. */
        put_file(fx, "{\"version\": 1, \"records\": []}");
        res = report_failure(fx, VF3, "c2", "t", "m");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_UNCHANGED); /* memory says quarantined */
        assert_int_equal(health_store_poll(fx->store, NULL), 1);
        res = report_failure(fx, VF3, "c2", "t", "m");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_QUARANTINED);
}

/* HEALTH-22: an edit between submit and the write is loaded before the write */
static void test_hand_edit_before_async_write(void **state)
{
        Fixture *fx = *state;
        Completion c = {0};

        fx->options.threshold = 1;
        fx->options.io_wanted = on_write_wanted;
        open_store(fx);
        assert_int_equal(submit(fx, VF1, "a", &c), 1);
        put_file(fx, "{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.5\", "
                     "\"quarantined_at\": \"2026-09-02T19:00:00Z\"}]}");
        /* The write finds the edit on its worker, reads it instead of writing, and the
         * request goes into the next write on top of it. */
        HealthWrite *w = begin(fx);
        io_reset();
        assert_int_equal(health_write_run(w), 0);
        assert_int_equal(io.renames, 0);
        health_store_finish_write(fx->store, w);
        assert_false(c.done);
        assert_true(health_store_is_quarantined(fx->store, VF2));
        w = begin(fx);
        assert_int_equal(health_write_run(w), 0);
        health_store_finish_write(fx->store, w);
        assert_int_equal(c.r, 0);
        assert_true(health_store_is_quarantined(fx->store, VF1));
        assert_true(health_store_is_quarantined(fx->store, VF2));
        assert_disk_matches_memory(fx);
}

/* HEALTH-23 */
static void test_invalid_hand_edit_is_refused(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;
        HealthResult res;
        static const char invalid[] = "{\"version\": 1, \"records\": [], \"comment\": \"x\"}\n";

        fx->options.threshold = 1;
        open_store(fx);
        report_failure(fx, VF1, "a", "t", "m");
        put_file(fx, invalid);

        assert_int_equal(health_store_report_failure(fx->store, VF2, "b", "t", "m", &res, &error),
                         -EAGAIN);
        assert_string_equal(error, "VF health state changed on disk and is invalid: validate VF "
                                   "health state: unknown key \"comment\"");
        assert_string_equal(health_store_unavailable_reason(fx->store),
                            "VF health state unavailable: validate VF health state: unknown key "
                            "\"comment\"");
        _cleanup_free_ char *file = get_file(fx);
        assert_string_equal(file, invalid);
        assert_true(health_store_is_quarantined(fx->store, VF1)); /* previous memory kept */
        assert_false(health_store_is_quarantined(fx->store, VF2));

        /* A queued asynchronous request meets the same refusal at its write. */
        Completion c = {0};
        put_file(fx, "{\"version\": 1, \"records\": []}");
        fx->options.io_wanted = on_write_wanted;
        open_store(fx);
        assert_int_equal(submit(fx, VF3, "c", &c), 1);
        put_file(fx, invalid);
        HealthWrite *w = begin(fx);
        assert_int_equal(health_write_run(w), 0);
        health_store_finish_write(fx->store, w);
        assert_true(c.done);
        assert_int_equal(c.r, -EAGAIN);
        assert_string_equal(c.error, "VF health state changed on disk and is invalid: validate VF "
                                     "health state: unknown key \"comment\"");
        assert_false(health_store_is_quarantined(fx->store, VF3));
        free(file);
        file = get_file(fx);
        assert_string_equal(file, invalid);
}

/* HEALTH-32, HEALTH-22 (SIGHUP) */
static void test_poll_and_reload(void **state)
{
        Fixture *fx = *state;
        Completion c = {0};

        fx->options.threshold = 1;
        fx->options.io_wanted = on_write_wanted;
        open_store(fx);
        assert_int_equal(health_store_apply(fx->store,
                                            &(HealthRequest){.kind = HEALTH_REQUEST_FAILURE,
                                                             .vf_address = VF1,
                                                             .instance_id = "a"},
                                            NULL, NULL),
                         0);

        /* The poll only queues a read (decision 1); unchanged: a stat on the worker, no read. */
        io_reset();
        assert_int_equal(health_store_poll(fx->store, NULL), 0);
        assert_int_equal(io_total(), 0);
        assert_int_equal(run_read(fx), 0);
        assert_int_equal(io.stats, 1);
        assert_int_equal(io.opens, 0);

        put_file(fx, "{\"version\": 1, \"records\": []}");
        assert_int_equal(health_store_poll(fx->store, NULL), 0);
        assert_true(health_store_is_quarantined(fx->store, VF1)); /* the last state until read */
        assert_int_equal(run_read(fx), 1);
        assert_false(health_store_is_quarantined(fx->store, VF1));
        assert_int_equal(health_store_poll(fx->store, NULL), 0);
        assert_int_equal(run_read(fx), 0);

        /* While a write is in flight, the poll waits and SIGHUP is deferred to its end. The
         * write itself finds the edit, so it is loaded and the request written on top. */
        assert_int_equal(submit(fx, VF2, "b", &c), 1);
        HealthWrite *w = begin(fx);
        put_file(fx, "{\"version\": 1, \"records\": [{\"vf_address\": \"0000:e3:00.6\", "
                     "\"quarantined_at\": \"2026-09-02T19:00:00Z\"}]}");
        assert_int_equal(health_store_poll(fx->store, NULL), 0);
        assert_int_equal(health_store_reload(fx->store, NULL), 1);
        HealthRead *rd = NULL;
        assert_int_equal(health_store_begin_read(fx->store, &rd), 0);
        assert_int_equal(health_write_run(w), 0);
        health_store_finish_write(fx->store, w);
        assert_false(c.done);
        assert_int_equal(run_read(fx), 1); /* SIGHUP's, before the next write */
        w = begin(fx);
        assert_int_equal(health_write_run(w), 0);
        health_store_finish_write(fx->store, w);
        assert_int_equal(c.r, 0);
        assert_true(health_store_is_quarantined(fx->store, VF2));
        assert_true(health_store_is_quarantined(fx->store, VF3));
        assert_disk_matches_memory(fx);

        /* SIGHUP with nothing in flight reads even an unchanged file, on the worker. */
        io_reset();
        assert_int_equal(health_store_reload(fx->store, NULL), 1);
        assert_int_equal(io_total(), 0);
        assert_int_equal(run_read(fx), 1);
        assert_true(io.opens >= 1);
}

/*
 * Decision 1, HEALTH-16, HEALTH-17, HEALTH-21: on an asynchronous store nothing touches the
 * file on the owner's thread; a read that does not return makes the store unavailable with a
 * reason, refuses what waited for it, and the next read that returns clears it.
 */
static void test_async_reads_off_the_owner(void **state)
{
        Fixture *fx = *state;
        Completion c = {0}, c2 = {0};
        _cleanup_free_ char *error = NULL;

        fx->options.threshold = 1;
        fx->options.io_wanted = on_write_wanted;
        put_file(fx, "{");
        assert_int_equal(health_store_new(fx->fd, &fx->options, &fx->store), 0);
        assert_int_equal(health_store_load(fx->store, NULL), -EAGAIN);

        /* A repair and a mutation with a load error latched: both wait for one read. */
        io_reset();
        assert_int_equal(health_store_submit(fx->store,
                                             &(HealthRequest){.kind = HEALTH_REQUEST_REPAIR},
                                             on_done, &c, NULL, NULL),
                         1);
        assert_int_equal(submit(fx, VF1, "a", &c2), 1);
        assert_int_equal(io_total(), 0);
        assert_true(fx->write_wanted >= 1);

        /* The read does not return: the store says why and refuses what waited. */
        HealthRead *stuck = NULL;
        assert_int_equal(health_store_begin_read(fx->store, &stuck), 1);
        assert_int_equal(health_read_kind(stuck), HEALTH_READ_RETRY);
        health_store_abandon_read(fx->store, "timed out after 5s");
        assert_string_equal(
            health_store_unavailable_reason(fx->store),
            "VF health state unavailable: read VF health state: timed out after 5s");
        assert_true(c.done && c2.done);
        assert_int_equal(c2.r, -EAGAIN);
        assert_string_equal(
            c2.error, "VF health state unavailable: read VF health state: timed out after 5s");
        assert_false(health_store_is_quarantined(fx->store, VF1));

        /* Meanwhile a mutation is refused at once, and asks for another read. */
        assert_int_equal(health_store_report_failure(fx->store, VF2, "b", "t", "m", NULL, &error),
                         -EAGAIN);
        assert_string_equal(
            error, "VF health state unavailable: read VF health state: timed out after 5s");

        /* The disk comes back: the next read loads the file and clears the latch. */
        put_file(fx, "{\"version\": 1, \"records\": []}");
        assert_int_equal(run_read(fx), 1);
        assert_null(health_store_unavailable_reason(fx->store));
        health_read_free(stuck); /* the abandoned read returns late: its result is not used */
        Completion c3 = {0};
        assert_int_equal(submit(fx, VF3, "c", &c3), 1);
        HealthWrite *w = begin(fx);
        assert_int_equal(health_write_run(w), 0);
        health_store_finish_write(fx->store, w);
        assert_int_equal(c3.r, 0);
        assert_disk_matches_memory(fx);

        /* A check after an abandoned read reads the file even when it did not change, so the
         * 5 s poll alone lifts the latch once the disk answers again. */
        assert_int_equal(health_store_poll(fx->store, NULL), 0);
        assert_int_equal(health_store_begin_read(fx->store, &stuck), 1);
        health_store_abandon_read(fx->store, "timed out after 5s");
        health_read_free(stuck);
        assert_non_null(health_store_unavailable_reason(fx->store));
        assert_int_equal(health_store_poll(fx->store, NULL), 0);
        assert_int_equal(run_read(fx), 1);
        assert_null(health_store_unavailable_reason(fx->store));
}

/* ---- operator actions ---------------------------------------------------------------------- */

static const char *gpu_of(const char *vf, void *userdata)
{
        return startswith(vf, "0000:e3:") ? "0000:e3:00.0" : NULL;
}

static int drain(Fixture *fx, HealthRequestKind kind, const char *gpu, const char *reason)
{
        return health_store_apply(
            fx->store, &(HealthRequest){.kind = kind, .gpu = gpu, .text = reason}, NULL, NULL);
}

/* HEALTH-26 (revised), HEALTH-3: a drain is a mark on the PF; a drain cycle forgets nothing */
static void test_drain_is_a_mark(void **state)
{
        Fixture *fx = *state;

        fx->options.threshold = 1;
        fx->options.gpu_of = gpu_of;
        open_store(fx);
        report_failure(fx, VF1, "a", "t", "RmInitAdapter failed");
        fx->options.threshold = 2;
        open_store(fx);
        report_failure(fx, VF2, "b", "t", "m"); /* a tally, below the threshold */
        _cleanup_free_ char *old = get_file(fx);
        assert_null(strstr(old, "drains")); /* a file as the older release wrote it */

        io_reset();
        assert_int_equal(drain(fx, HEALTH_REQUEST_DRAIN, "0000:e3:00.0", "maintenance"), 0);
        assert_int_equal(io.renames, 1);
        assert_true(health_store_is_quarantined(fx->store, VF2));
        assert_true(health_store_is_quarantined(fx->store, VF3));
        assert_false(health_store_is_quarantined(fx->store, VF_A40));
        const HealthDrain *d =
            health_state_find_drain(health_store_state(fx->store), "0000:e3:00.0");
        assert_non_null(d);
        assert_string_equal(d->reason, "maintenance");
        assert_int_equal(timestamp_compare(d->drained_at, fx->now), 0);
        assert_string_equal(record(fx, VF1)->reason, "RmInitAdapter failed");
        assert_int_equal(record(fx, VF1)->source, HEALTH_SOURCE_AUTO);
        assert_int_equal(health_store_state(fx->store)->n_records, 2);
        assert_disk_matches_memory(fx);
        _cleanup_free_ char *file = get_file(fx);
        assert_non_null(strstr(file, "\"drains\": [\n    {\n      \"gpu\": \"0000:e3:00.0\",\n"
                                     "      \"reason\": \"maintenance\",\n"
                                     "      \"drained_at\": \"2026-09-02T20:00:00Z\"\n    }\n  ]"));

        /* Again: the same reason is a no-op, a new one replaces it and keeps drained_at. */
        io_reset();
        assert_int_equal(drain(fx, HEALTH_REQUEST_DRAIN, "0000:e3:00.0", "maintenance"), 0);
        assert_int_equal(io_total(), 0);
        advance(fx, NSEC_PER_HOUR);
        assert_int_equal(drain(fx, HEALTH_REQUEST_DRAIN, "0000:e3:00.0", "longer"), 0);
        d = health_state_find_drain(health_store_state(fx->store), "0000:e3:00.0");
        assert_string_equal(d->reason, "longer");
        assert_int_equal(timestamp_compare(d->drained_at, ts("2026-09-02T20:00:00Z")), 0);

        /* A restart loads the mark. */
        open_store(fx);
        assert_true(health_store_is_quarantined(fx->store, VF3));

        /* Undrain: the mark only; the wedge and the tally survive. */
        assert_int_equal(drain(fx, HEALTH_REQUEST_UNDRAIN, "0000:e3:00.0", NULL), 0);
        assert_true(health_store_is_quarantined(fx->store, VF1));
        assert_false(health_store_is_quarantined(fx->store, VF2));
        assert_false(health_store_is_quarantined(fx->store, VF3));
        assert_int_equal(record(fx, VF2)->n_failures, 1);
        free(file);
        file = get_file(fx);
        assert_string_equal(file, old); /* byte for byte the file before the drain */
        io_reset();
        assert_int_equal(drain(fx, HEALTH_REQUEST_UNDRAIN, "0000:e3:00.0", NULL), 0);
        assert_int_equal(io_total(), 0);

        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            health_store_apply(
                fx->store,
                &(HealthRequest){.kind = HEALTH_REQUEST_DRAIN, .gpu = "0000:E3:00.0", .text = "r"},
                NULL, &error),
            -EINVAL);
        assert_string_equal(error, "invalid GPU address \"0000:E3:00.0\"");
}

/* HEALTH-5, HEALTH-6 for the drains list */
static void test_drains_parse(void **state)
{
        static const struct {
                const char *drains, *error;
        } cases[] = {
            {"5", "unmarshal VF health state: drains: expected an array"},
            {"[1]", "unmarshal VF health state: drains[0]: expected an object"},
            {"[{\"gpu\": 1}]", "unmarshal VF health state: drains[0].gpu: expected a string"},
            {"[{\"gpu\": \"0000:e3:00.0\", \"reason\": \"r\", \"drained_at\": "
             "\"2026-09-02T20:00:00Z\", \"x\": 1}]",
             "validate VF health state drain 0: unknown key \"x\""},
            {"[{\"gpu\": \"e3\", \"reason\": \"r\", \"drained_at\": \"2026-09-02T20:00:00Z\"}]",
             "validate VF health state drain 0: invalid GPU address \"e3\""},
            {"[{\"gpu\": \"0000:e3:00.0\", \"reason\": \"r\"}]",
             "validate VF health state drain 0: missing drain timestamp"},
            {"[{\"gpu\": \"0000:e3:00.0\", \"reason\": \"\", \"drained_at\": "
             "\"2026-09-02T20:00:00Z\"}]",
             "validate VF health state drain 0: invalid reason length 0"},
            {"[{\"gpu\": \"0000:e3:00.0\", \"reason\": \"r\", \"drained_at\": "
             "\"2026-09-02T20:00:00Z\"}, {\"gpu\": \"0000:e3:00.0\", \"reason\": \"r\", "
             "\"drained_at\": \"2026-09-02T20:00:00Z\"}]",
             "validate VF health state drain 1: duplicate GPU address \"0000:e3:00.0\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *text = NULL, *error = NULL;
                HealthState *st = NULL;
                assert_true(strprintf(&text, "{\"version\": 1, \"records\": [], \"drains\": %s}",
                                      cases[i].drains) >= 0);
                assert_int_equal(health_state_parse(text, strlen(text), &st, &error), -EINVAL);
                assert_string_equal(error, cases[i].error);
        }
        /* Two marks load sorted and round-trip. */
        static const char two[] =
            "{\"version\": 1, \"records\": [], \"drains\": [{\"gpu\": \"0000:e4:00.0\", "
            "\"reason\": \"b\", \"drained_at\": \"2026-09-02T20:00:00Z\"}, {\"gpu\": "
            "\"0000:e3:00.0\", \"reason\": \"a\", \"drained_at\": \"2026-09-02T20:00:00Z\"}]}";
        _cleanup_health_state_ HealthState *st = NULL;
        assert_int_equal(health_state_parse(two, strlen(two), &st, NULL), 0);
        assert_int_equal(st->n_drains, 2);
        assert_string_equal(st->drains[0].gpu, "0000:e3:00.0");
        _cleanup_health_state_ HealthState *copy = NULL;
        assert_int_equal(health_state_copy(st, &copy), 0);
        _cleanup_free_ char *a = NULL, *b = NULL;
        assert_int_equal(health_state_format(st, &a, NULL), 0);
        assert_int_equal(health_state_format(copy, &b, NULL), 0);
        assert_string_equal(a, b);
}

/* HEALTH-25, HEALTH-26 */
static void test_operator_quarantine_clear_drain(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;

        fx->options.threshold = 1;
        open_store(fx);
        fx->now = ts("2026-09-02T20:00:00Z");
        report_failure(fx, VF1, "a", "t", "wedged");
        advance(fx, NSEC_PER_HOUR);

        /* HEALTH-25 (revised): an auto-quarantined VF keeps its record unchanged, no I/O. */
        io_reset();
        assert_int_equal(
            health_store_quarantine(fx->store, (char *[]){VF1, NULL}, "fan noise", &error), 0);
        assert_int_equal(io_total(), 0);
        const HealthRecord *r = record(fx, VF1);
        assert_int_equal(timestamp_compare(r->quarantined_at, ts("2026-09-02T20:00:00Z")), 0);
        assert_int_equal(r->source, HEALTH_SOURCE_AUTO);
        assert_string_equal(r->reason, "wedged");
        assert_int_equal(r->n_failures, 1);

        /* A fresh VF: quarantined now. The same request again is a no-op without I/O; a new
         * reason replaces an operator's. */
        assert_int_equal(health_store_quarantine(fx->store, (char *[]){VF2, NULL}, "hold", NULL),
                         0);
        assert_int_equal(timestamp_compare(record(fx, VF2)->quarantined_at, fx->now), 0);
        io_reset();
        assert_int_equal(health_store_quarantine(fx->store, (char *[]){VF2, NULL}, "hold", NULL),
                         0);
        assert_int_equal(io_total(), 0);
        assert_int_equal(health_store_quarantine(fx->store, (char *[]){VF2, NULL}, "hold 2", NULL),
                         0);
        assert_string_equal(record(fx, VF2)->reason, "hold 2");

        /* Item 8 of issue 10: control bytes in an operator's reason are stored as '?'. */
        assert_int_equal(
            health_store_quarantine(fx->store, (char *[]){VF3, NULL}, "a\x1b[0m\tb\xc3\xa9", NULL),
            0);
        assert_string_equal(record(fx, VF3)->reason, "a?[0m?b??");
        assert_int_equal(health_store_clear(fx->store, (char *[]){VF3, NULL}, NULL), 0);

        /* Clearing deletes the whole record, tallies included. */
        assert_int_equal(health_store_clear(fx->store, (char *[]){VF1, NULL}, NULL), 0);
        assert_null(record(fx, VF1));
        io_reset();
        assert_int_equal(health_store_clear(fx->store, (char *[]){VF1, NULL}, NULL), 0);
        assert_int_equal(io_total(), 0);

        /* clear-gpu: every record of one PF deleted, one write (HEALTH-26). */
        char *pf_vfs[] = {VF1, VF2, VF3, VF4, NULL};
        assert_int_equal(health_store_quarantine(fx->store, pf_vfs, "hold", NULL), 0);
        io_reset();
        assert_int_equal(health_store_clear(fx->store, pf_vfs, NULL), 0);
        assert_int_equal(io.renames, 1);
        assert_int_equal(health_store_state(fx->store)->n_records, 0);
        assert_disk_matches_memory(fx);

        /* Bad requests change nothing. */
        free(error);
        error = NULL;
        assert_int_equal(health_store_quarantine(fx->store, pf_vfs, "", &error), -EINVAL);
        assert_string_equal(error, "invalid reason length 0");
        char reason[258];
        memset(reason, 'x', 257);
        reason[257] = 0;
        free(error);
        error = NULL;
        assert_int_equal(health_store_quarantine(fx->store, pf_vfs, reason, &error), -EINVAL);
        assert_string_equal(error, "invalid reason length 257");
        free(error);
        error = NULL;
        assert_int_equal(
            health_store_quarantine(fx->store, (char *[]){VF1, "nope", NULL}, "r", &error),
            -EINVAL);
        assert_string_equal(error, "invalid VF address \"nope\"");
        assert_int_equal(health_store_state(fx->store)->n_records, 0);
}

/* ---- the breaker --------------------------------------------------------------------------- */

static void quarantine_vfs(Fixture *fx, char *const *vfs)
{
        for (size_t i = 0; vfs[i]; i++) {
                HealthResult res = report_failure(fx, vfs[i], "x", "t", "wedged");
                assert_int_equal(res.outcome, HEALTH_OUTCOME_QUARANTINED);
                advance(fx, NSEC_PER_MIN);
        }
}

/* HEALTH-27 (a), HEALTH-28 */
static void test_breaker_trip_count(void **state)
{
        Fixture *fx = *state;

        fx->options.threshold = 1;
        open_store(fx);
        quarantine_vfs(fx, (char *[]){VF1, VF2, VF3, VF4, NULL});

        HealthResult res = report_failure(fx, VF5, "x", "t", "wedged");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_RECORDED);
        assert_true(res.breaker_tripped);
        assert_int_equal(res.failures, 1);
        assert_false(health_store_is_quarantined(fx->store, VF5));
        assert_true(health_store_breaker_open(fx->store));
        const HealthState *s = health_store_state(fx->store);
        assert_string_equal(s->breaker_reason, "5 automatic quarantines within 1h0m0s");
        assert_int_equal(timestamp_compare(s->breaker_opened_at, fx->now), 0);
        _cleanup_free_ char *warning = NULL;
        assert_int_equal(health_store_breaker_warning(fx->store, &warning), 0);
        assert_string_equal(warning, "automatic VF quarantine suspended: 5 automatic quarantines "
                                     "within 1h0m0s");
        assert_disk_matches_memory(fx);
        _cleanup_free_ char *file = get_file(fx);
        assert_non_null(strstr(file,
                               "  \"breaker\": {\n    \"opened_at\": \"2026-09-02T20:04:00Z\",\n"
                               "    \"reason\": \"5 automatic quarantines within 1h0m0s\"\n"
                               "  }\n"));

        /* HEALTH-28: open, failures are still counted and never quarantine; one trip only. */
        advance(fx, NSEC_PER_MIN);
        res = report_failure(fx, VF6, "x", "t", "wedged");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_RECORDED);
        assert_false(res.breaker_tripped);
        res = report_failure(fx, VF5, "y", "t", "wedged");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_RECORDED);
        assert_int_equal(res.failures, 2);
        assert_false(health_store_is_quarantined(fx->store, VF5));

        /* It survives a restart. */
        open_store(fx);
        assert_true(health_store_breaker_open(fx->store));
}

/* HEALTH-27: only quarantines within the window count */
static void test_breaker_window(void **state)
{
        Fixture *fx = *state;

        fx->options.threshold = 1;
        open_store(fx);
        quarantine_vfs(fx, (char *[]){VF1, VF2, VF3, VF4, NULL});
        advance(fx, 57 * NSEC_PER_MIN); /* VF1 is exactly 1h old: out of the window */
        HealthResult res = report_failure(fx, VF5, "x", "t", "wedged");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_QUARANTINED);
        assert_false(health_store_breaker_open(fx->store));
        char *warning = (char *)"unset";
        assert_int_equal(health_store_breaker_warning(fx->store, &warning), 0);
        assert_null(warning);

        /* Disabled: never trips. */
        fx->options.breaker_enabled = false;
        open_store(fx);
        quarantine_vfs(fx, (char *[]){VF6, "0000:e3:01.2", "0000:e3:01.3", "0000:e3:01.4",
                                      "0000:e3:01.5", NULL});
        assert_false(health_store_breaker_open(fx->store));
}

/* HEALTH-33 (b) */
static void test_breaker_trip_models(void **state)
{
        Fixture *fx = *state;

        fx->options.threshold = 1;
        open_store(fx);
        quarantine_vfs(fx, (char *[]){VF1, NULL});
        HealthResult res = report_failure(fx, VF_A40, "x", "t", "wedged");
        assert_true(res.breaker_tripped);
        assert_int_equal(res.outcome, HEALTH_OUTCOME_RECORDED);
        assert_string_equal(health_store_state(fx->store)->breaker_reason,
                            "automatic quarantines on more than one GPU model within 1h0m0s: "
                            "NVIDIA A40, NVIDIA L40S");
}

/* HEALTH-33 (c), HEALTH-30 */
static void test_breaker_trip_driver_change(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;

        fx->options.threshold = 1;
        open_store(fx);

        /* The first version seen is no change; the same version again is no I/O. */
        assert_int_equal(health_store_set_driver_version(fx->store, "550.54.14", &error), 0);
        const HealthState *s = health_store_state(fx->store);
        assert_string_equal(s->driver_version, "550.54.14");
        assert_true(timestamp_is_zero(s->driver_changed_at));
        io_reset();
        assert_int_equal(health_store_set_driver_version(fx->store, "550.54.14", NULL), 0);
        assert_int_equal(io_total(), 0);
        quarantine_vfs(fx, (char *[]){VF1, NULL});

        advance(fx, NSEC_PER_HOUR);
        assert_int_equal(health_store_set_driver_version(fx->store, "580.159.01", NULL), 0);
        s = health_store_state(fx->store);
        assert_int_equal(timestamp_compare(s->driver_changed_at, fx->now), 0);
        assert_disk_matches_memory(fx);

        advance(fx, 10 * NSEC_PER_MIN);
        HealthResult res = report_failure(fx, VF2, "x", "t", "wedged");
        assert_true(res.breaker_tripped);
        assert_string_equal(health_store_state(fx->store)->breaker_reason,
                            "host driver changed to 580.159.01 less than 1h0m0s ago");

        /* An hour after the change it no longer trips. */
        assert_int_equal(health_store_reset_breaker(fx->store, NULL), 0);
        advance(fx, NSEC_PER_HOUR);
        res = report_failure(fx, VF3, "x", "t", "wedged");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_QUARANTINED);

        free(error);
        error = NULL;
        assert_int_equal(health_store_set_driver_version(fx->store, "", &error), -EINVAL);
        assert_string_equal(error, "invalid driver version \"\"");
}

/* HEALTH-29 */
static void test_breaker_reset(void **state)
{
        Fixture *fx = *state;

        fx->options.threshold = 1;
        fx->options.breaker_max_quarantines = 1;
        open_store(fx);
        quarantine_vfs(fx, (char *[]){VF1, NULL});                      /* t0 */
        HealthResult res = report_failure(fx, VF2, "x", "t", "wedged"); /* t1: trips */
        assert_true(res.breaker_tripped);
        advance(fx, NSEC_PER_MIN);
        report_failure(fx, VF3, "y", "t", "wedged");
        report_failure(fx, VF1, "z", "t", "wedged"); /* quarantined already: unchanged */

        /* Not open: a reset is a no-op. Open: one write drops what came since opened_at. */
        io_reset();
        assert_int_equal(health_store_reset_breaker(fx->store, NULL), 0);
        assert_int_equal(io.renames, 1);
        assert_false(health_store_breaker_open(fx->store));
        assert_null(record(fx, VF2));
        assert_null(record(fx, VF3));
        assert_string_equal(kept(fx, VF1), "x");
        assert_true(health_store_is_quarantined(fx->store, VF1));
        _cleanup_free_ char *file = get_file(fx);
        assert_null(strstr(file, "breaker"));
        io_reset();
        assert_int_equal(health_store_reset_breaker(fx->store, NULL), 0);
        assert_int_equal(io_total(), 0);

        /* The window restarts empty: VF1's quarantine, 3 minutes old, no longer counts. */
        advance(fx, NSEC_PER_MIN);
        res = report_failure(fx, VF4, "x", "t", "wedged");
        assert_int_equal(res.outcome, HEALTH_OUTCOME_QUARANTINED);
        assert_false(res.breaker_tripped);
        res = report_failure(fx, VF5, "x", "t", "wedged");
        assert_true(res.breaker_tripped);
        assert_string_equal(health_store_state(fx->store)->breaker_reason,
                            "2 automatic quarantines within 1h0m0s");
}

/* HEALTH-10, GEN-7: requests the store cannot take */
static void test_bad_requests(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;
        HealthResult res;

        fx->options.io_wanted = on_write_wanted;
        open_store(fx);
        assert_int_equal(health_store_submit(fx->store,
                                             &(HealthRequest){.kind = HEALTH_REQUEST_REEVALUATE},
                                             NULL, NULL, NULL, &error),
                         -EINVAL);
        assert_string_equal(error, "re-evaluation is not a request");
        free(error);
        error = NULL;
        assert_int_equal(
            health_store_submit(fx->store, &(HealthRequest){.kind = 99}, NULL, NULL, NULL, &error),
            -EINVAL);
        assert_string_equal(error, "unknown VF health request 99");
        free(error);
        error = NULL;
        assert_int_equal(
            health_store_report_failure(fx->store, VF1, "a\x01", "t", "m", &res, &error), -EINVAL);
        assert_string_equal(error, "invalid instance id \"a\\x01\"");
        free(error);
        error = NULL;
        assert_int_equal(health_store_report_success(fx->store, VF1, "a", "t\n", &res, &error),
                         -EINVAL);
        assert_string_equal(error, "invalid assignment timestamp \"t\\x0a\"");

        /* The synchronous path refuses to wait behind an asynchronous write in flight. */
        Completion c = {0};
        assert_int_equal(submit(fx, VF1, "a", &c), 1);
        HealthWrite *w = begin(fx);
        free(error);
        error = NULL;
        assert_int_equal(health_store_report_failure(fx->store, VF2, "b", "t", "m", &res, &error),
                         -EBUSY);
        assert_string_equal(error, "VF health state write in flight");
        assert_int_equal(health_store_load(fx->store, NULL), -EBUSY);
        assert_null(record(fx, VF2));
        assert_int_equal(health_write_run(w), 0);
        health_store_finish_write(fx->store, w);
        assert_int_equal(c.r, 0);
}

/* HEALTH-22: a fingerprint that cannot be read counts as a change */
static void test_unreadable_fingerprint_reloads(void **state)
{
        Fixture *fx = *state;

        fx->options.threshold = 1;
        open_store(fx);
        report_failure(fx, VF1, "a", "t", "m");
        fault_arm(FAULT_FSTATAT, HEALTH_FILE_NAME, EIO, 1);
        io_reset();
        assert_int_equal(health_store_poll(fx->store, NULL), 1);
        assert_true(io.opens >= 1);
        assert_true(health_store_is_quarantined(fx->store, VF1));
        assert_null(health_store_unavailable_reason(fx->store));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
            T(test_example_round_trips),
            T(test_upstream_file_round_trips),
            T(test_written_file_is_canonical),
            T(test_format_is_jansson_layout),
            T(test_format_timestamps),
            T(test_format_refuses_invalid_utf8),
            T(test_failures_are_capped),
            T(test_load_errors),
            T(test_load_read_errors),
            T(test_failed_load_keeps_memory),
            T(test_threshold_range),
            T(test_reevaluation_at_load),
            T(test_reevaluation_write_failure_keeps_quarantine),
            T(test_reevaluation_skipped_while_breaker_open),
            T(test_reevaluation_not_counted_by_breaker),
            T(test_report_outcomes_and_invalid_address),
            T(test_unchanged_reports_do_no_io),
            T(test_reason_sanitising),
            T(test_success_rules),
            T(test_health31_table),
            T(test_health31_operator_variant),
            T(test_failed_load_refuses_and_retries),
            T(test_repair),
            T(test_write_protocol),
            T(test_parent_sync_retry),
            T(test_write_step_failures),
            T(test_leftover_tmp_removed),
            T(test_group_commit),
            T(test_group_commit_rollback),
            T(test_group_commit_failure_after_rename),
            T(test_hand_edit_then_report),
            T(test_hand_edit_before_async_write),
            T(test_invalid_hand_edit_is_refused),
            T(test_poll_and_reload),
            T(test_async_reads_off_the_owner),
            T(test_operator_quarantine_clear_drain),
            T(test_drain_is_a_mark),
            T(test_drains_parse),
            T(test_breaker_trip_count),
            T(test_breaker_window),
            T(test_breaker_trip_models),
            T(test_breaker_trip_driver_change),
            T(test_breaker_reset),
            T(test_bad_requests),
            T(test_unreadable_fingerprint_reloads),
#undef T
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
