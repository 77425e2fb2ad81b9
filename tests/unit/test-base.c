/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for src/base: strict parsers, durations, timestamps, bounded reads, crash-safe
 * writes, logging and string helpers.
 *
 * Syscall failures are injected through the linker (-Wl,--wrap=fsync,renameat,write,close):
 * each wrapper passes the call on unless the running test armed a Fault for it. Every test that
 * touches files gets a fresh temporary directory from setup; teardown removes it, disarms all
 * faults and restores the umask and the log settings, also when an assertion failed.
 */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "base/base.h"
#include "base/json-util.h"
#include "testlib.h"

/* ---- syscall fault injection ----------------------------------------------------------------- */

typedef struct Fault {
        unsigned calls;      /* calls seen since the fault was armed */
        unsigned fail_from;  /* first failing call, 1-based; 0 never fails */
        unsigned fail_count; /* how many consecutive calls fail */
        int error;           /* errno of a failing call; for write(), 0 means "returns 0" */
} Fault;

static Fault fsync_fault, renameat_fault, write_fault, close_fault;
static size_t write_chunk_max; /* > 0: each write() passes on at most this many bytes */

static void fault_arm(Fault *f, unsigned fail_from, unsigned fail_count, int error)
{
        *f = (Fault){.fail_from = fail_from, .fail_count = fail_count, .error = error};
}

static void faults_disarm(void)
{
        fault_arm(&fsync_fault, 0, 0, 0);
        fault_arm(&renameat_fault, 0, 0, 0);
        fault_arm(&write_fault, 0, 0, 0);
        fault_arm(&close_fault, 0, 0, 0);
        write_chunk_max = 0;
}

static bool fault_hit(Fault *f)
{
        f->calls++;
        return f->fail_from > 0 && f->calls >= f->fail_from &&
               f->calls - f->fail_from < f->fail_count;
}

int __real_fsync(int fd);
int __wrap_fsync(int fd);
int __real_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath);
ssize_t __real_write(int fd, const void *buf, size_t count);
ssize_t __wrap_write(int fd, const void *buf, size_t count);
int __real_close(int fd);
int __wrap_close(int fd);

int __wrap_fsync(int fd)
{
        if (fault_hit(&fsync_fault)) {
                errno = fsync_fault.error;
                return -1;
        }
        return __real_fsync(fd);
}

int __wrap_renameat(int olddirfd, const char *oldpath, int newdirfd, const char *newpath)
{
        if (fault_hit(&renameat_fault)) {
                errno = renameat_fault.error;
                return -1;
        }
        return __real_renameat(olddirfd, oldpath, newdirfd, newpath);
}

ssize_t __wrap_write(int fd, const void *buf, size_t count)
{
        if (fault_hit(&write_fault)) {
                if (write_fault.error == 0)
                        return 0;
                errno = write_fault.error;
                return -1;
        }
        if (write_chunk_max > 0 && count > write_chunk_max)
                count = write_chunk_max;
        return __real_write(fd, buf, count);
}

int __wrap_close(int fd)
{
        if (fault_hit(&close_fault)) {
                /* Like a deferred NFS error: the descriptor is gone, the call still fails. */
                __real_close(fd);
                errno = close_fault.error;
                return -1;
        }
        return __real_close(fd);
}

/* ---- fixture: a temporary directory, a log capture, the process settings a test may change --- */

typedef struct Fixture {
        TestTree *tree; /* removed with every directory a test left read-only */
        char path[PATH_MAX];
        int dirfd; /* the tree's */
        mode_t saved_umask;
        int saved_log_level;
        TestLog log;
} Fixture;

static int fixture_setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        if (!f)
                return -1;
        if (test_tree_new("vgpud-test-base", &f->tree) < 0) {
                free(f);
                return -1;
        }
        snprintf(f->path, sizeof f->path, "%s", f->tree->dir);
        f->dirfd = f->tree->fd;
        f->saved_umask = umask(022);
        f->saved_log_level = log_get_max_level();
        if (test_log_start(&f->log) < 0) {
                test_tree_free(f->tree);
                free(f);
                return -1;
        }
        faults_disarm();
        *state = f;
        return 0;
}

static int fixture_teardown(void **state)
{
        Fixture *f = *state;
        faults_disarm();
        test_log_stop(&f->log);
        log_set_max_level(f->saved_log_level);
        umask(f->saved_umask);
        test_tree_free(f->tree);
        free(f);
        return 0;
}

#define fixture_test(fn) cmocka_unit_test_setup_teardown(fn, fixture_setup, fixture_teardown)

/* The log output written since the last call, as a malloc'd string. */
static char *log_take(Fixture *f)
{
        char *s = strdup(test_log_text(&f->log));
        assert_non_null(s);
        test_log_clear(&f->log);
        return s;
}

static void assert_log(Fixture *f, const char *expected)
{
        char *s = log_take(f);
        /* Compare, then free before a possible failure so the report is not a leak as well. */
        bool same = streq(s, expected);
        if (!same)
                fprintf(stderr, "log: got   \"%s\"\n     want  \"%s\"\n", s, expected);
        free(s);
        assert_true(same);
}

static void write_fixture_file(int dirfd, const char *name, const void *data, size_t size)
{
        int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(__real_write(fd, data, size), (ssize_t)size);
        assert_int_equal(__real_close(fd), 0);
}

/* Reads a file back with stdio, which the wrappers do not see. */
static char *slurp(int dirfd, const char *name)
{
        int fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        FILE *fp = fdopen(fd, "r");
        assert_non_null(fp);
        char *buf = NULL;
        size_t size = 0;
        FILE *out = open_memstream(&buf, &size);
        assert_non_null(out);
        int c;
        while ((c = fgetc(fp)) != EOF)
                fputc(c, out);
        fclose(out);
        fclose(fp);
        return buf;
}

static void assert_file_content(int dirfd, const char *name, const char *expected)
{
        char *s = slurp(dirfd, name);
        bool same = streq(s, expected);
        free(s);
        assert_true(same);
}

static bool file_exists(int dirfd, const char *name)
{
        struct stat st;
        return fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* ---- unsigned integers (GEN-5) --------------------------------------------------------------- */

static const char *const bad_numbers[] = {"",     "+1", "-1", " 1",       "1 ",  "1\n", "\t1",
                                          "0x10", "1a", "1.", "1.0",      "1e3", "1,0", "1_0",
                                          "a",    "-0", "+0", "\xd9\xa1", /* ARABIC-INDIC 1 */
                                          "1 2"};

/* GEN-5 */
static void test_parse_uint64_valid(void **state)
{
        static const struct {
                const char *s;
                uint64_t v;
        } cases[] = {
            {"0", 0},
            {"1", 1},
            {"007", 7},
            {"4294967296", UINT64_C(4294967296)},
            {"18446744073709551614", UINT64_MAX - 1},
            {"18446744073709551615", UINT64_MAX},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint64_t v = 12345;
                assert_int_equal(parse_uint64(cases[i].s, &v), 0);
                assert_true(v == cases[i].v);
        }
}

/* GEN-5 */
static void test_parse_uint64_invalid(void **state)
{
        for (size_t i = 0; i < ELEMENTSOF(bad_numbers); i++) {
                uint64_t v = 12345;
                assert_int_equal(parse_uint64(bad_numbers[i], &v), -EINVAL);
                assert_true(v == 12345);
        }
        uint64_t v = 12345;
        assert_int_equal(parse_uint64(NULL, &v), -EINVAL);
        assert_true(v == 12345);
}

/* GEN-5 */
static void test_parse_uint64_overflow(void **state)
{
        static const char *const cases[] = {
            "18446744073709551616",  "18446744073709551620",
            "99999999999999999999",  "000000000000000000000018446744073709551616",
            "184467440737095516150",
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                uint64_t v = 12345;
                assert_int_equal(parse_uint64(cases[i], &v), -ERANGE);
                assert_true(v == 12345);
        }
}

/* GEN-5 */
static void test_parse_uint64_range(void **state)
{
        uint64_t v = 12345;
        assert_int_equal(parse_uint64_range("5", 5, 10, &v), 0);
        assert_true(v == 5);
        assert_int_equal(parse_uint64_range("10", 5, 10, &v), 0);
        assert_true(v == 10);
        assert_int_equal(parse_uint64_range("18446744073709551615", 0, UINT64_MAX, &v), 0);
        assert_true(v == UINT64_MAX);
        assert_int_equal(parse_uint64_range("7", 7, 7, &v), 0);
        assert_true(v == 7);

        v = 12345;
        assert_int_equal(parse_uint64_range("4", 5, 10, &v), -ERANGE);
        assert_int_equal(parse_uint64_range("11", 5, 10, &v), -ERANGE);
        assert_int_equal(parse_uint64_range("0", 1, 64, &v), -ERANGE);
        assert_int_equal(parse_uint64_range("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
        assert_int_equal(parse_uint64_range("", 0, 10, &v), -EINVAL);
        assert_int_equal(parse_uint64_range("-5", 0, 10, &v), -EINVAL);
        assert_int_equal(parse_uint64_range(" 5", 0, 10, &v), -EINVAL);
        assert_true(v == 12345);
}

/* GEN-5 */
static void test_parse_uint32(void **state)
{
        uint32_t v = 12345;
        assert_int_equal(parse_uint32("0", &v), 0);
        assert_int_equal(v, 0);
        assert_int_equal(parse_uint32("4294967295", &v), 0);
        assert_true(v == UINT32_MAX);

        v = 12345;
        assert_int_equal(parse_uint32("4294967296", &v), -ERANGE);
        assert_int_equal(parse_uint32("18446744073709551615", &v), -ERANGE);
        assert_int_equal(parse_uint32("18446744073709551616", &v), -ERANGE);
        for (size_t i = 0; i < ELEMENTSOF(bad_numbers); i++)
                assert_int_equal(parse_uint32(bad_numbers[i], &v), -EINVAL);
        assert_int_equal(parse_uint32(NULL, &v), -EINVAL);
        assert_int_equal(v, 12345);
}

/* ---- PCI addresses (GEN-5) ------------------------------------------------------------------- */

/* GEN-5 */
static void test_pci_address_valid(void **state)
{
        static const struct {
                const char *s;
                PciAddress a;
        } cases[] = {
            {"0000:00:00.0", {0x0000, 0x00, 0x00, 0}}, {"0000:e3:00.4", {0x0000, 0xe3, 0x00, 4}},
            {"0001:3b:1f.7", {0x0001, 0x3b, 0x1f, 7}}, {"abcd:ef:12.3", {0xabcd, 0xef, 0x12, 3}},
            {"ffff:ff:ff.7", {0xffff, 0xff, 0xff, 7}}, {"10de:41:00.1", {0x10de, 0x41, 0x00, 1}},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                PciAddress a = {1, 2, 3, 4};
                assert_int_equal(parse_pci_address(cases[i].s, &a), 0);
                assert_int_equal(a.domain, cases[i].a.domain);
                assert_int_equal(a.bus, cases[i].a.bus);
                assert_int_equal(a.device, cases[i].a.device);
                assert_int_equal(a.function, cases[i].a.function);
                assert_true(pci_address_is_valid(cases[i].s));

                char buf[PCI_ADDRESS_STRLEN];
                assert_ptr_equal(pci_address_format(&a, buf), buf);
                assert_string_equal(buf, cases[i].s);
        }
}

/* GEN-5: the one UUID shape check (placement consumers, mdev UUIDs, the boot id). */
static void test_uuid(void **state)
{
        static const char *const lower[] = {
            "00000000-0000-0000-0000-000000000000",
            "8f14e45f-ceea-467f-a0e6-0123456789ab",
        };
        static const char *const bad[] = {
            "",
            "8f14e45f-ceea-467f-a0e6-0123456789a",   /* too short */
            "8f14e45f-ceea-467f-a0e6-0123456789abc", /* too long */
            "8f14e45fceea-467f-a0e6-0123456789ab-",  /* dash misplaced */
            "8f14e45f-ceea-467f-a0e6-0123456789ag",  /* not hex */
            "{8f14e45f-ceea-467f-a0e6-0123456789a}", /* braces */
            " 8f14e45f-ceea-467f-a0e6-0123456789a",  /* space */
        };
        for (size_t i = 0; i < ELEMENTSOF(lower); i++) {
                assert_true(uuid_is_lowercase(lower[i]));
                assert_true(uuid_text_is_valid(lower[i], strlen(lower[i]), false));
        }
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                assert_false(uuid_is_lowercase(bad[i]));
                assert_false(uuid_text_is_valid(bad[i], strlen(bad[i]), false));
        }
        /* Upper case is a UUID, but not the spelling compared as a string. */
        const char *upper = "8F14E45F-CEEA-467F-A0E6-0123456789AB";
        assert_false(uuid_is_lowercase(upper));
        assert_true(uuid_text_is_valid(upper, strlen(upper), false));
        /* A length that stops before the terminator is what is checked. */
        assert_true(uuid_text_is_valid("00000000-0000-0000-0000-000000000000/remove", 36, true));
        assert_false(uuid_is_lowercase(NULL));
}

/* ---- json_schema_read (STYLE.md rule 9) ---- */

typedef struct Inner {
        const char *name;
        bool on;
} Inner;

typedef struct Outer {
        json_int_t count;
        const char *label;
        json_t *inner, *items, *tags;
        Inner inner_v;
        size_t n_items, n_tags;
} Outer;

static const JsonField inner_fields[] = {
    {"name", JSON_FIELD_STRING, true, JSON_AT(Inner, name)},
    {"on", JSON_FIELD_BOOLEAN, false, JSON_AT(Inner, on)},
    {NULL},
};

static int count_item(const void *element, const char *path, void *view, int code, char **error)
{
        const Inner *item = element;
        Outer *o = view;
        if (streq(item->name, "bad"))
                return error_set(error, code, "%s.name is bad", path);
        o->n_items++;
        return 0;
}

static int count_tag(const void *element, const char *path, void *view, int code, char **error)
{
        ((Outer *)view)->n_tags += strlen(*(const char *const *)element) > 0;
        return 0;
}

static const JsonField outer_fields[] = {
    {"count", JSON_FIELD_INTEGER, true, JSON_AT(Outer, count)},
    {"label", JSON_FIELD_STRING, false, JSON_AT(Outer, label), .max = 5},
    {"inner", JSON_FIELD_OBJECT, false, JSON_AT(Outer, inner), .fields = inner_fields,
     .nested_offset = JSON_AT(Outer, inner_v)},
    {"items", JSON_FIELD_ARRAY, false, JSON_AT(Outer, items), .max = 3,
     .element_type = JSON_FIELD_OBJECT, .element_fields = inner_fields,
     .element_size = sizeof(Inner), .each = count_item},
    {"tags", JSON_FIELD_ARRAY, false, JSON_AT(Outer, tags), .element_type = JSON_FIELD_STRING,
     .element_max = 3, .each = count_tag},
    {NULL},
};

static int read_outer(const char *text, Outer *view, char **error)
{
        json_auto_t *o = json_loads(text, JSON_REJECT_DUPLICATES, NULL);
        assert_non_null(o);
        *view = (Outer){0};
        int r = json_schema_read(o, "", outer_fields, view, -EBADMSG, error);
        /* The view borrows from o: keep only what the test compares after it is gone. */
        view->label = view->label ? "set" : NULL;
        view->inner_v.name = view->inner_v.name ? "set" : NULL;
        view->inner = view->items = view->tags = NULL;
        return r;
}

static void test_json_schema_read(void **state)
{
        Outer v;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(read_outer("{\"count\": 3, \"label\": \"abc\", \"inner\": {\"name\": "
                                    "\"x\", \"on\": true}, \"items\": [{\"name\": \"a\"}, "
                                    "{\"name\": \"b\"}], \"tags\": [\"t\", \"\"]}",
                                    &v, &error),
                         0);
        assert_null(error);
        assert_int_equal(v.count, 3);
        assert_string_equal(v.label, "set");
        assert_string_equal(v.inner_v.name, "set");
        assert_true(v.inner_v.on);
        assert_int_equal(v.n_items, 2);
        assert_int_equal(v.n_tags, 1);

        /* Optional fields absent: the view keeps what it held. */
        assert_int_equal(read_outer("{\"count\": -1}", &v, &error), 0);
        assert_null(v.label);
        assert_int_equal(v.n_items, 0);

        /* Each refusal names the field by its path from the root. */
        static const struct {
                const char *text, *message;
        } refused[] = {
            {"{}", "count is required"},
            {"{\"count\": 1, \"colour\": 2}", "unknown key \"colour\""},
            {"{\"count\": 1, \"\\u001b[2J\": 2}", "unknown key \"\\x1b[2J\""},
            {"{\"count\": \"1\"}", "count must be an integer"},
            {"{\"count\": 1.0}", "count must be an integer"},
            {"{\"count\": 1, \"label\": \"abcdef\"}", "label must be at most 5 bytes"},
            {"{\"count\": 1, \"inner\": []}", "inner must be an object"},
            {"{\"count\": 1, \"inner\": {}}", "inner.name is required"},
            {"{\"count\": 1, \"inner\": {\"name\": \"x\", \"on\": 1}}",
             "inner.on must be a boolean"},
            {"{\"count\": 1, \"inner\": {\"name\": \"x\", \"off\": 1}}",
             "unknown key \"inner.off\""},
            {"{\"count\": 1, \"items\": {}}", "items must be an array"},
            {"{\"count\": 1, \"items\": [{\"name\": \"a\"}, 7]}", "items[1] must be an object"},
            {"{\"count\": 1, \"items\": [{\"name\": \"a\"}, {}, {}]}", "items[1].name is required"},
            {"{\"count\": 1, \"items\": [{\"name\": \"a\"}, {\"name\": \"b\", \"x\": 0}]}",
             "unknown key \"items[1].x\""},
            {"{\"count\": 1, \"items\": [{\"name\": \"bad\"}]}", "items[0].name is bad"},
            {"{\"count\": 1, \"items\": [{\"name\": \"a\"}, {\"name\": \"a\"}, {\"name\": \"a\"}, "
             "{\"name\": \"a\"}]}",
             "items must hold at most 3 entries"},
            {"{\"count\": 1, \"tags\": [\"abcd\"]}", "tags[0] must be at most 3 bytes"},
            {"{\"count\": 1, \"tags\": [null]}", "tags[0] must be a string"},
        };
        for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
                _cleanup_free_ char *why = NULL;
                assert_int_equal(read_outer(refused[i].text, &v, &why), -EBADMSG);
                if (!why || !streq(why, refused[i].message))
                        fail_msg("%s: \"%s\", expected \"%s\"", refused[i].text,
                                 why ? why : "(none)", refused[i].message);
        }

        /* A nested object's path: the caller's path comes first. */
        json_auto_t *o = json_loads("{\"name\": 1}", 0, NULL);
        Inner inner = {0};
        _cleanup_free_ char *why = NULL;
        assert_int_equal(json_schema_read(o, "boot", inner_fields, &inner, -EINVAL, &why), -EINVAL);
        assert_string_equal(why, "boot.name must be a string");
}

/* The one unknown-key walk, over a table or a plain list of names. */
static void test_json_first_unknown_key(void **state)
{
        static const char *const names[] = {"a", "b", NULL};
        json_auto_t *ok = json_loads("{\"b\": 1, \"a\": 2}", 0, NULL);
        json_auto_t *bad = json_loads("{\"a\": 1, \"c\": 2, \"d\": 3}", 0, NULL);
        json_auto_t *empty = json_object();
        assert_null(json_first_unknown_key(ok, names));
        assert_string_equal(json_first_unknown_key(bad, names), "c");
        assert_null(json_first_unknown_key(empty, names));
        assert_string_equal(json_first_unknown_key_in(bad, inner_fields, sizeof *inner_fields),
                            "a");
}

/* GEN-5 */
static void test_pci_address_invalid(void **state)
{
        static const char *const cases[] = {
            "",
            "0000:E3:00.0",  /* uppercase */
            "0000:e3:0A.0",  /* uppercase */
            "ABCD:e3:00.0",  /* uppercase */
            "0000:e3:00.8",  /* function 8 */
            "0000:e3:00.f",  /* function is octal-range decimal */
            "0000:e3:00.a",  /* function */
            "0000:e3:00.",   /* too short */
            "000:e3:00.0",   /* too short */
            "00000:e3:00.0", /* too long */
            "0000:e3:00.00", /* too long */
            "0000:e3:00.0\n",
            " 0000:e3:00.0",
            "0000:e3:000.0", /* same length, fields shifted */
            "0000:e30:0.00",
            "0000-e3:00.0",
            "0000:e3-00.0",
            "0000:e3:00:0",
            "0000:e3.00.0",
            "g000:e3:00.0",
            "0000:+3:00.0",
            "0000:e3:-0.0",
            "e3:00.0",
            "0000:e3:00.0 ",
            "0000:e3:00.-",
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                PciAddress a = {1, 2, 3, 4};
                assert_int_equal(parse_pci_address(cases[i], &a), -EINVAL);
                assert_int_equal(a.domain, 1);
                assert_int_equal(a.bus, 2);
                assert_int_equal(a.device, 3);
                assert_int_equal(a.function, 4);
                assert_false(pci_address_is_valid(cases[i]));
        }
        PciAddress a = {1, 2, 3, 4};
        assert_int_equal(parse_pci_address(NULL, &a), -EINVAL);
        assert_int_equal(a.domain, 1);
        assert_false(pci_address_is_valid(NULL));
}

/* NET-3, VMM-1: the MAC vgpud gives a NIC is six lowercase pairs */
static void test_mac_address(void **state)
{
        assert_true(mac_address_is_valid("52:54:00:12:ab:cd"));
        static const char *const bad[] = {"",
                                          "52:54:00:12:AB:CD",
                                          "52:54:00:12:ab",
                                          "52:54:00:12:ab:cd:",
                                          "52-54-00-12-ab-cd",
                                          "52:54:00:12:ab:cg",
                                          "5:254:00:12:ab:cd"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_false(mac_address_is_valid(bad[i]));
        assert_false(mac_address_is_valid(NULL));
}

/* VMM-1, VMM-2: ids and node names QEMU accepts, which need no comma doubling */
static void test_qemu_id(void **state)
{
        static const char *const good[] = {"bootdisk", "vol-v0a1b2c3", "net0", "a.b_c-d",
                                           "abcdefghijklmnopqrstuvwxyz01234"};
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                assert_true(qemu_id_is_valid(good[i]));
        static const char *const bad[] = {"",    "0root", "-x", "a,b",
                                          "a b", "a/b",   "é",  "abcdefghijklmnopqrstuvwxyz012345"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_false(qemu_id_is_valid(bad[i]));
        assert_false(qemu_id_is_valid(NULL));
}

/* ---- durations (CFG-3, GEN-12) --------------------------------------------------------------- */

/* CFG-3 */
static void test_parse_duration_valid(void **state)
{
        static const struct {
                const char *s;
                nsec_t v;
        } cases[] = {
            {"0s", 0},
            {"0ms", 0},
            {"1ms", NSEC_PER_MSEC},
            {"100ms", 100 * NSEC_PER_MSEC},
            {"1500ms", 1500 * NSEC_PER_MSEC},
            {"1s", NSEC_PER_SEC},
            {"30s", 30 * NSEC_PER_SEC},
            {"2m", 2 * NSEC_PER_MIN},
            {"1h", NSEC_PER_HOUR},
            {"1m30s", 90 * NSEC_PER_SEC},
            {"1h0m0s", NSEC_PER_HOUR},
            {"1h1m1s1ms", NSEC_PER_HOUR + NSEC_PER_MIN + NSEC_PER_SEC + NSEC_PER_MSEC},
            {"10m", 600 * NSEC_PER_SEC},
            {"90s", 90 * NSEC_PER_SEC},
            {"007s", 7 * NSEC_PER_SEC},
            /* The largest value: 18446744073 s and 709551615 ns do not fit the syntax. */
            {"5124095h34m33s", UINT64_C(18446744073) * NSEC_PER_SEC},
            {"18446744073709ms", UINT64_C(18446744073709) * NSEC_PER_MSEC},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                nsec_t v = 12345;
                assert_int_equal(parse_duration(cases[i].s, &v), 0);
                assert_true(v == cases[i].v);
        }
}

/* CFG-3 */
static void test_parse_duration_invalid(void **state)
{
        static const char *const cases[] = {
            "",    "5",    "5x",   "5d",     "1.5s", "0.5h", "-1s",  "+1s",   " 1s",
            "1s ", "1 s",  "1s\n", "1m 30s", "s",    "ms",   "m30s", "1us",   "1ns",
            "1µs", "1S",   "1H",   "1M",     "1Ms",  "1m30", "1s1",  "1sec",  "1min",
            "1hr", "1mss", "1e3s", "0x10s",  "1s-",  "1,5s", "1_0s", "1h-1m",
        };
        /* Each unit once, the largest first. */
        static const char *const out_of_order[] = {
            "1m1m", "1s1m", "1s1s", "1ms1s", "30s1h", "1h1h", "1m1s1m", "1ms1ms",
        };
        for (size_t i = 0; i < ELEMENTSOF(cases) + ELEMENTSOF(out_of_order); i++) {
                const char *c =
                    i < ELEMENTSOF(cases) ? cases[i] : out_of_order[i - ELEMENTSOF(cases)];
                nsec_t v = 12345;
                assert_int_equal(parse_duration(c, &v), -EINVAL);
                assert_true(v == 12345);
        }
        nsec_t v = 12345;
        assert_int_equal(parse_duration(NULL, &v), -EINVAL);
        assert_true(v == 12345);
}

/* CFG-3 */
static void test_parse_duration_overflow(void **state)
{
        static const char *const cases[] = {
            "5124095h34m34s",         /* one second past UINT64_MAX ns */
            "5124096h",               /* the hours alone */
            "18446744074s",           /* the seconds alone */
            "18446744073710ms",       /* the milliseconds alone */
            "18446744073709551615s",  /* value fits uint64, the product does not */
            "18446744073709551616ms", /* the digits overflow */
            "99999999999999999999999h",
            "5124095h999999999m", /* the sum overflows */
            "18446744073s1000ms", /* the sum overflows at the last step */
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                nsec_t v = 12345;
                assert_int_equal(parse_duration(cases[i], &v), -ERANGE);
                assert_true(v == 12345);
        }
}

/*
 * GEN-12: each expected string is what Go's time.Duration(v).String() prints, but for the micro
 * sign, written "us" (which Go's ParseDuration reads too) so that logfmt need not escape it.
 */
static void test_format_duration(void **state)
{
        static const struct {
                nsec_t v;
                const char *s;
        } cases[] = {
            {0, "0s"},
            {1, "1ns"},
            {999, "999ns"},
            {1000, "1us"},
            {1001, "1.001us"},
            {1500, "1.5us"},
            {999999, "999.999us"},
            {NSEC_PER_MSEC, "1ms"},
            {1500000, "1.5ms"},
            {1234567, "1.234567ms"},
            {100 * NSEC_PER_MSEC, "100ms"},
            {999999999, "999.999999ms"},
            {NSEC_PER_SEC, "1s"},
            {NSEC_PER_SEC + 1, "1.000000001s"},
            {1500 * NSEC_PER_MSEC, "1.5s"},
            {30 * NSEC_PER_SEC, "30s"},
            {59 * NSEC_PER_SEC + 999999999, "59.999999999s"},
            {60 * NSEC_PER_SEC, "1m0s"},
            {90 * NSEC_PER_SEC, "1m30s"},
            {90 * NSEC_PER_SEC + 250 * NSEC_PER_MSEC, "1m30.25s"},
            {10 * NSEC_PER_MIN, "10m0s"},
            {59 * NSEC_PER_MIN + 59 * NSEC_PER_SEC, "59m59s"},
            {3600 * NSEC_PER_SEC, "1h0m0s"},
            {3600 * NSEC_PER_SEC + 500 * NSEC_PER_MSEC, "1h0m0.5s"},
            {3601 * NSEC_PER_SEC, "1h0m1s"},
            {NSEC_PER_HOUR + NSEC_PER_MIN + NSEC_PER_SEC + 1, "1h1m1.000000001s"},
            {24 * NSEC_PER_HOUR, "24h0m0s"},
            {100 * NSEC_PER_HOUR, "100h0m0s"},
            {(nsec_t)INT64_MAX, "2562047h47m16.854775807s"}, /* Go's largest Duration */
            {UINT64_MAX, "5124095h34m33.709551615s"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char buf[DURATION_STRLEN];
                memset(buf, 'X', sizeof buf);
                assert_ptr_equal(format_duration(cases[i].v, buf), buf);
                assert_string_equal(buf, cases[i].s);
                /* GEN-12, OPS-4: a log line shows the duration as the API does, unescaped. */
                char line[64] = "";
                logfmt_append(line, sizeof line, "duration", buf);
                _cleanup_free_ char *want = NULL;
                assert_int_equal(strprintf(&want, " duration=%s", cases[i].s), 0);
                assert_string_equal(line, want);
        }
}

/* GEN-12, CFG-3: the forms format_duration writes for whole seconds and milliseconds read back. */
static void test_duration_round_trip(void **state)
{
        static const nsec_t values[] = {
            0,
            NSEC_PER_MSEC,
            100 * NSEC_PER_MSEC,
            999 * NSEC_PER_MSEC,
            NSEC_PER_SEC,
            30 * NSEC_PER_SEC,
            90 * NSEC_PER_SEC,
            NSEC_PER_HOUR,
            25 * NSEC_PER_HOUR + 61 * NSEC_PER_SEC,
            UINT64_C(18446744073) * NSEC_PER_SEC,
        };
        for (size_t i = 0; i < ELEMENTSOF(values); i++) {
                char buf[DURATION_STRLEN];
                nsec_t v = 12345;
                assert_int_equal(parse_duration(format_duration(values[i], buf), &v), 0);
                assert_true(v == values[i]);
        }
}

/* ---- timestamps (GEN-8, GEN-9) --------------------------------------------------------------- */

#define T_2026_09_02_20_08_04 INT64_C(1788379684)
#define T_9999_12_31_23_59_59 INT64_C(253402300799)

static void assert_timestamp_parses(const char *s, int64_t sec, uint32_t nsec)
{
        Timestamp t = {42, 7};
        int r = parse_timestamp(s, &t);
        if (r < 0 || t.sec != sec || t.nsec != nsec)
                fprintf(stderr, "parse_timestamp(\"%s\") = %d, {%lld, %u}\n", s, r,
                        (long long)t.sec, t.nsec);
        assert_int_equal(r, 0);
        assert_true(t.sec == sec);
        assert_int_equal(t.nsec, nsec);
}

static void assert_timestamp_formats(int64_t sec, uint32_t nsec, const char *expected)
{
        char buf[TIMESTAMP_STRLEN];
        memset(buf, 'X', sizeof buf);
        assert_ptr_equal(format_timestamp((Timestamp){sec, nsec}, buf), buf);
        assert_string_equal(buf, expected);
}

/* GEN-8 */
static void test_format_timestamp(void **state)
{
        assert_timestamp_formats(T_2026_09_02_20_08_04, 597400000, "2026-09-02T20:08:04.5974Z");
        assert_timestamp_formats(T_2026_09_02_20_08_04, 0, "2026-09-02T20:08:04Z");
        assert_timestamp_formats(T_2026_09_02_20_08_04, 1, "2026-09-02T20:08:04.000000001Z");
        assert_timestamp_formats(T_2026_09_02_20_08_04, 999999999,
                                 "2026-09-02T20:08:04.999999999Z");
        assert_timestamp_formats(T_2026_09_02_20_08_04, 500000000, "2026-09-02T20:08:04.5Z");
        assert_timestamp_formats(T_2026_09_02_20_08_04, 120000, "2026-09-02T20:08:04.00012Z");
        assert_timestamp_formats(0, 0, "1970-01-01T00:00:00Z");
        assert_timestamp_formats(-1, 0, "1969-12-31T23:59:59Z");
        assert_timestamp_formats(-1, 500000000, "1969-12-31T23:59:59.5Z");
        assert_timestamp_formats(-86400, 0, "1969-12-31T00:00:00Z");
        assert_timestamp_formats(-86401, 0, "1969-12-30T23:59:59Z");
        assert_timestamp_formats(951825600, 0, "2000-02-29T12:00:00Z");
        assert_timestamp_formats(1709164800, 0, "2024-02-29T00:00:00Z");
        assert_timestamp_formats(-2203891200, 0, "1900-03-01T00:00:00Z");
        assert_timestamp_formats(TIMESTAMP_ZERO_SEC, 0, "0001-01-01T00:00:00Z");
        assert_timestamp_formats(T_9999_12_31_23_59_59, 999999999,
                                 "9999-12-31T23:59:59.999999999Z");
}

/* GEN-9 */
static void test_parse_timestamp_valid(void **state)
{
        const int64_t t = T_2026_09_02_20_08_04;

        assert_timestamp_parses("2026-09-02T20:08:04Z", t, 0);
        assert_timestamp_parses("2026-09-02T20:08:04.5974Z", t, 597400000);
        /* 1 to 9 fractional digits */
        assert_timestamp_parses("2026-09-02T20:08:04.5Z", t, 500000000);
        assert_timestamp_parses("2026-09-02T20:08:04.12Z", t, 120000000);
        assert_timestamp_parses("2026-09-02T20:08:04.123Z", t, 123000000);
        assert_timestamp_parses("2026-09-02T20:08:04.1234Z", t, 123400000);
        assert_timestamp_parses("2026-09-02T20:08:04.12345Z", t, 123450000);
        assert_timestamp_parses("2026-09-02T20:08:04.123456Z", t, 123456000);
        assert_timestamp_parses("2026-09-02T20:08:04.1234567Z", t, 123456700);
        assert_timestamp_parses("2026-09-02T20:08:04.12345678Z", t, 123456780);
        assert_timestamp_parses("2026-09-02T20:08:04.123456789Z", t, 123456789);
        assert_timestamp_parses("2026-09-02T20:08:04.000000000Z", t, 0);
        assert_timestamp_parses("2026-09-02T20:08:04.000000001Z", t, 1);
        /* numeric offsets */
        assert_timestamp_parses("2026-09-02T22:08:04+02:00", t, 0);
        assert_timestamp_parses("2026-09-02T15:08:04-05:00", t, 0);
        assert_timestamp_parses("2026-09-03T01:38:04.5974+05:30", t, 597400000);
        assert_timestamp_parses("2026-09-02T20:08:04+00:00", t, 0);
        assert_timestamp_parses("2026-09-02T20:08:04-00:00", t, 0);
        assert_timestamp_parses("2026-09-03T20:07:04+23:59", t, 0);
        assert_timestamp_parses("2026-01-01T00:30:00+01:00", INT64_C(1767223800), 0);
        /* calendar edges */
        assert_timestamp_parses("1970-01-01T00:00:00Z", 0, 0);
        assert_timestamp_parses("1969-12-31T23:59:59Z", -1, 0);
        assert_timestamp_parses("2000-02-29T12:00:00Z", 951825600, 0);
        assert_timestamp_parses("2024-02-29T00:00:00Z", 1709164800, 0);
        assert_timestamp_parses("1900-03-01T00:00:00Z", -2203891200, 0);
        assert_timestamp_parses("9999-12-31T23:59:59.999999999Z", T_9999_12_31_23_59_59, 999999999);
        assert_timestamp_parses("0001-01-01T01:00:00+01:00", TIMESTAMP_ZERO_SEC, 0);
        assert_timestamp_parses("0001-01-01T00:00:00-01:00", TIMESTAMP_ZERO_SEC + 3600, 0);
}

/* GEN-9 */
static void test_parse_timestamp_zero(void **state)
{
        Timestamp t = {42, 7};
        assert_int_equal(parse_timestamp("0001-01-01T00:00:00Z", &t), 0);
        assert_true(timestamp_is_zero(t));
        assert_true(t.sec == TIMESTAMP_ZERO_SEC);
        assert_int_equal(t.nsec, 0);

        assert_int_equal(parse_timestamp("0001-01-01T00:00:00.000000001Z", &t), 0);
        assert_false(timestamp_is_zero(t));
        assert_int_equal(parse_timestamp("0001-01-01T00:00:01Z", &t), 0);
        assert_false(timestamp_is_zero(t));
        assert_false(timestamp_is_zero((Timestamp){0, 0}));
}

/* GEN-9 */
static void test_parse_timestamp_invalid(void **state)
{
        static const char *const cases[] = {
            "",
            "2026-09-02T20:08:04.1234567890Z", /* 10 fractional digits */
            "2026-09-02T20:08:04.Z",           /* a dot without digits */
            "2026-09-02T20:08:04",             /* no zone */
            "2026-09-02T20:08:04.5974",
            "2026-09-02t20:08:04Z", /* lowercase t */
            "2026-09-02T20:08:04z", /* lowercase z */
            "2026-09-02 20:08:04Z",
            "2026-09-02T20:08:04ZZ", /* trailing garbage */
            "2026-09-02T20:08:04Z ",
            "2026-09-02T20:08:04Z\n",
            "2026-09-02T20:08:04+02:00Z",
            " 2026-09-02T20:08:04Z",
            "2026-00-02T20:08:04Z", /* month 0 */
            "2026-13-02T20:08:04Z", /* month 13 */
            "2026-09-00T20:08:04Z", /* day 0 */
            "2026-09-31T20:08:04Z", /* September has 30 days */
            "2026-01-32T20:08:04Z",
            "2026-04-31T00:00:00Z",
            "2025-02-29T00:00:00Z", /* not a leap year */
            "1900-02-29T00:00:00Z", /* a century that is not a leap year */
            "2100-02-29T00:00:00Z",
            "2024-02-30T00:00:00Z",
            "2026-09-02T24:00:00Z", /* hour 24 */
            "2026-09-02T20:60:04Z",
            "2026-09-02T20:08:60Z", /* no leap seconds */
            "0000-01-01T00:00:00Z", /* year 0 */
            "26-09-02T20:08:04Z",
            "12026-09-02T20:08:04Z",
            "2026-9-02T20:08:04Z",
            "2026-09-2T20:08:04Z",
            "2026-09-02T2:08:04Z",
            "2026-09-02T20:8:04Z",
            "2026-09-02T20:08:4Z",
            "2026-09-02T20:08Z",
            "2026-09-02",
            "2026/09/02T20:08:04Z",
            "2026-09-02T20.08.04Z",
            "2026-09-02T20:08:04,5Z",
            "2026-09-02T20:08:04+0200",  /* offset without a colon */
            "2026-09-02T20:08:04+02",    /* offset without minutes */
            "2026-09-02T20:08:04+24:00", /* offset hour 24 */
            "2026-09-02T20:08:04+02:60",
            "2026-09-02T20:08:04+2:00",
            "2026-09-02T20:08:04 +02:00",
            "2026-09-02T20:08:04UTC",
            "+2026-09-02T20:08:04Z",
            "-2026-09-02T20:08:04Z",
            "2026-09-02T20:08:04.-5Z",
            "2026-09-02T20:08:04.+5Z",
            "2026-09-02T20:08:04. 5Z",
            "\xef\xbc\x92\xef\xbc\x90\xef\xbc\x92\xef\xbc\x96-09-02T20:08:04Z", /* fullwidth */
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Timestamp t = {42, 7};
                int r = parse_timestamp(cases[i], &t);
                if (r != -EINVAL)
                        fprintf(stderr, "parse_timestamp(\"%s\") = %d\n", cases[i], r);
                assert_int_equal(r, -EINVAL);
                assert_true(t.sec == 42);
                assert_int_equal(t.nsec, 7);
        }
        Timestamp t = {42, 7};
        assert_int_equal(parse_timestamp(NULL, &t), -EINVAL);
        assert_true(t.sec == 42);
}

/*
 * GEN-8, GEN-9: an instant that an offset moves outside years 1..9999 has no RFC 3339
 * rendering in UTC, so it is refused rather than written back as something unreadable.
 */
static void test_parse_timestamp_out_of_range(void **state)
{
        static const char *const cases[] = {
            "0001-01-01T00:00:00+00:01",
            "0001-01-01T00:59:59.999999999+01:00",
            "9999-12-31T23:59:59-00:01",
            "9999-12-31T23:00:00-01:00",
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Timestamp t = {42, 7};
                assert_int_equal(parse_timestamp(cases[i], &t), -ERANGE);
                assert_true(t.sec == 42);
                assert_int_equal(t.nsec, 7);
        }
}

/* GEN-8, GEN-9 */
static void test_timestamp_round_trip(void **state)
{
        static const struct {
                const char *in, *canonical;
        } cases[] = {
            {"2026-09-02T20:08:04.5974Z", "2026-09-02T20:08:04.5974Z"},
            {"2026-09-02T20:08:04.597400000Z", "2026-09-02T20:08:04.5974Z"},
            {"2026-09-02T20:08:04.000Z", "2026-09-02T20:08:04Z"},
            {"2026-09-02T22:08:04+02:00", "2026-09-02T20:08:04Z"},
            {"2026-01-01T00:30:00+01:00", "2025-12-31T23:30:00Z"},
            {"2025-12-31T23:30:00-01:00", "2026-01-01T00:30:00Z"},
            {"2024-02-29T23:59:59.999999999-00:00", "2024-02-29T23:59:59.999999999Z"},
            {"0001-01-01T00:00:00Z", "0001-01-01T00:00:00Z"},
            {"9999-12-31T23:59:59.999999999Z", "9999-12-31T23:59:59.999999999Z"},
            {"1600-02-29T12:00:00Z", "1600-02-29T12:00:00Z"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                Timestamp t, again;
                char buf[TIMESTAMP_STRLEN];
                assert_int_equal(parse_timestamp(cases[i].in, &t), 0);
                assert_string_equal(format_timestamp(t, buf), cases[i].canonical);
                assert_int_equal(parse_timestamp(buf, &again), 0);
                assert_int_equal(timestamp_compare(t, again), 0);
        }

        /* And from values: a sweep over years 1..9999 (steps of 7 days + 3599 s) reads back. */
        for (int64_t sec = TIMESTAMP_ZERO_SEC; sec <= T_9999_12_31_23_59_59;
             sec += 86400 * INT64_C(7) + 3599) {
                Timestamp t = {sec, (uint32_t)(sec & 0x3fffffff) % 1000000000u}, again;
                char buf[TIMESTAMP_STRLEN];
                format_timestamp(t, buf);
                assert_int_equal(parse_timestamp(buf, &again), 0);
                assert_int_equal(timestamp_compare(t, again), 0);
        }
}

static Timestamp fixed_now(void *userdata)
{
        return *(const Timestamp *)userdata;
}

/* GEN-8 */
static void test_timestamp_helpers(void **state)
{
        Timestamp a = {100, 5}, b = {100, 6}, c = {101, 0}, d = {-1, 999999999};
        assert_int_equal(timestamp_compare(a, a), 0);
        assert_int_equal(timestamp_compare(a, b), -1);
        assert_int_equal(timestamp_compare(b, a), 1);
        assert_int_equal(timestamp_compare(b, c), -1);
        assert_int_equal(timestamp_compare(c, a), 1);
        assert_int_equal(timestamp_compare(d, a), -1);

        Timestamp t =
            timestamp_from_timespec((struct timespec){.tv_sec = 1788379684, .tv_nsec = 597400000});
        assert_true(t.sec == T_2026_09_02_20_08_04);
        assert_int_equal(t.nsec, 597400000);

        Clock clock = {.now = fixed_now, .userdata = &t};
        assert_int_equal(timestamp_compare(clock_now(&clock), t), 0);

        /* The real clock is past this test's writing and its nanoseconds are in range. */
        Timestamp now = clock_now(&clock_realtime);
        assert_true(now.sec > INT64_C(1700000000));
        assert_true(now.nsec < NSEC_PER_SEC);
}

/* ---- files (GEN-5) --------------------------------------------------------------------------- */

static void make_sized_file(int dirfd, const char *name, size_t size)
{
        char *data = malloc(size + 1);
        assert_non_null(data);
        for (size_t i = 0; i < size; i++)
                data[i] = (char)('a' + i % 26);
        write_fixture_file(dirfd, name, data, size);
        free(data);
}

static void assert_reads(int dirfd, const char *name, size_t max, size_t expected_size)
{
        char *buf = NULL;
        size_t size = 12345;
        assert_int_equal(read_file_at(dirfd, name, max, &buf, &size), 0);
        assert_non_null(buf);
        bool ok = size == expected_size && strlen(buf) == expected_size;
        for (size_t i = 0; ok && i < expected_size; i++)
                ok = buf[i] == (char)('a' + i % 26);
        free(buf);
        assert_true(ok);
}

static void assert_read_fails(int dirfd, const char *name, size_t max, int error)
{
        char *sentinel = (char *)"untouched", *buf = sentinel;
        size_t size = 12345;
        assert_int_equal(read_file_at(dirfd, name, max, &buf, &size), error);
        assert_ptr_equal(buf, sentinel);
        assert_int_equal(size, 12345);
}

/* GEN-5 */
static void test_read_file_bounded(void **state)
{
        Fixture *f = *state;
        static const size_t sizes[] = {1, 10, 4095, 4096, 4097, 8192, 10000, 100000};

        for (size_t i = 0; i < ELEMENTSOF(sizes); i++) {
                char name[32];
                snprintf(name, sizeof name, "f%zu", sizes[i]);
                make_sized_file(f->dirfd, name, sizes[i]);
                assert_reads(f->dirfd, name, sizes[i], sizes[i]);     /* exactly max */
                assert_reads(f->dirfd, name, sizes[i] + 1, sizes[i]); /* below max */
                assert_reads(f->dirfd, name, sizes[i] * 3, sizes[i]);
                assert_read_fails(f->dirfd, name, sizes[i] - 1, -EFBIG); /* max + 1 */
                if (sizes[i] > 2)
                        assert_read_fails(f->dirfd, name, sizes[i] / 2, -EFBIG);
        }

        /* "no limit" must not overflow the max + 1 look-ahead */
        assert_reads(f->dirfd, "f10000", SIZE_MAX, 10000);
        assert_reads(f->dirfd, "f10000", SIZE_MAX - 1, 10000);
        assert_reads(f->dirfd, "f10", SIZE_MAX, 10);

        /* a path relative to AT_FDCWD, and ret_size may be NULL */
        char path[PATH_MAX + 16];
        snprintf(path, sizeof path, "%s/f10", f->path);
        char *buf = NULL;
        assert_int_equal(read_file_at(AT_FDCWD, path, 10, &buf, NULL), 0);
        assert_int_equal(strlen(buf), 10);
        free(buf);
}

/* GEN-5 */
static void test_read_file_special(void **state)
{
        Fixture *f = *state;

        /* an empty file reads as "" */
        write_fixture_file(f->dirfd, "empty", "", 0);
        char *buf = NULL;
        size_t size = 12345;
        assert_int_equal(read_file_at(f->dirfd, "empty", 0, &buf, &size), 0);
        assert_string_equal(buf, "");
        assert_int_equal(size, 0);
        free(buf);
        buf = NULL;
        assert_int_equal(read_file_at(f->dirfd, "empty", 4096, &buf, &size), 0);
        assert_int_equal(size, 0);
        free(buf);

        /* max 0 still refuses one byte */
        write_fixture_file(f->dirfd, "one", "x", 1);
        assert_read_fails(f->dirfd, "one", 0, -EFBIG);

        /* embedded NUL bytes are data: the size tells them apart from the terminator */
        write_fixture_file(f->dirfd, "nul", "a\0b", 3);
        buf = NULL;
        assert_int_equal(read_file_at(f->dirfd, "nul", 3, &buf, &size), 0);
        assert_int_equal(size, 3);
        assert_memory_equal(buf, "a\0b\0", 4);
        free(buf);

        assert_read_fails(f->dirfd, "missing", 100, -ENOENT);
        assert_int_equal(mkdirat(f->dirfd, "dir", 0755), 0);
        assert_read_fails(f->dirfd, "dir", 100, -EISDIR);
        assert_read_fails(f->dirfd, "one/child", 100, -ENOTDIR);
        assert_read_fails(-1, "one", 100, -EBADF);

        /* only regular files: a FIFO nobody writes is refused at once, never waited on */
        assert_int_equal(mkfifoat(f->dirfd, "fifo", 0644), 0);
        assert_read_fails(f->dirfd, "fifo", 100, -EBADFD);
        assert_read_fails(AT_FDCWD, "/dev/null", 100, -EBADFD);
}

/* GEN-7 */
static void test_write_all(void **state)
{
        Fixture *f = *state;
        const char data[] = "0123456789abcdefghij";
        const size_t n = sizeof data - 1;

        /* short writes: 3 bytes per call */
        int fd = openat(f->dirfd, "short", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        write_chunk_max = 3;
        fault_arm(&write_fault, 0, 0, 0);
        assert_int_equal(write_all(fd, data, n), 0);
        assert_int_equal(write_fault.calls, (n + 2) / 3);
        write_chunk_max = 0;
        assert_int_equal(__real_close(fd), 0);
        assert_file_content(f->dirfd, "short", data);

        /* EINTR twice, then short writes */
        fd = openat(f->dirfd, "eintr", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        write_chunk_max = 7;
        fault_arm(&write_fault, 1, 2, EINTR);
        assert_int_equal(write_all(fd, data, n), 0);
        assert_int_equal(write_fault.calls, 2 + (n + 6) / 7);
        fault_arm(&write_fault, 2, 1, EINTR); /* and in the middle */
        assert_int_equal(write_all(fd, data, n), 0);
        write_chunk_max = 0;
        assert_int_equal(__real_close(fd), 0);
        char twice[64];
        snprintf(twice, sizeof twice, "%s%s", data, data);
        assert_file_content(f->dirfd, "eintr", twice);

        /* a hard error after a partial write is reported */
        fd = openat(f->dirfd, "enospc", O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        write_chunk_max = 5;
        fault_arm(&write_fault, 2, 1, ENOSPC);
        assert_int_equal(write_all(fd, data, n), -ENOSPC);
        /* a write() that makes no progress is an error, not a busy loop */
        fault_arm(&write_fault, 1, 1, 0);
        assert_int_equal(write_all(fd, data, n), -EIO);
        write_chunk_max = 0;
        assert_int_equal(__real_close(fd), 0);

        /* nothing to write calls nothing */
        fault_arm(&write_fault, 1, 1, EBADF);
        assert_int_equal(write_all(-1, data, 0), 0);
        assert_int_equal(write_fault.calls, 0);
        fault_arm(&write_fault, 0, 0, 0);
        assert_int_equal(write_all(-1, data, 1), -EBADF);
}

/* GEN-7 */
static void test_fsync_directory_at(void **state)
{
        Fixture *f = *state;

        assert_int_equal(mkdirat(f->dirfd, "sub", 0755), 0);
        write_fixture_file(f->dirfd, "file", "x", 1);

        assert_int_equal(fsync_directory_at(f->dirfd, "."), 0);
        assert_int_equal(fsync_directory_at(f->dirfd, "sub"), 0);
        assert_int_equal(fsync_directory_at(AT_FDCWD, f->path), 0);
        assert_int_equal(fsync_directory_at(f->dirfd, "missing"), -ENOENT);
        assert_int_equal(fsync_directory_at(f->dirfd, "file"), -ENOTDIR);

        fault_arm(&fsync_fault, 1, 1, EIO);
        fault_arm(&close_fault, 0, 0, 0);
        assert_int_equal(fsync_directory_at(f->dirfd, "."), -EIO);
        assert_int_equal(close_fault.calls, 1); /* the directory fd is not leaked */
}

/* The names readdir_next() gives for the stream d, sorted, as "a,b,c" (dots never among them). */
static char *stream_names(DIR *d)
{
        _cleanup_strv_free_ char **names = NULL;
        struct dirent *de;
        int r;
        while ((r = readdir_next(d, &de)) > 0)
                assert_int_equal(strv_push(&names, de->d_name), 0);
        assert_int_equal(r, 0);
        char *joined = strdup("");
        assert_non_null(joined);
        if (names)
                qsort(names, strv_length(names), sizeof(char *), strv_compare);
        for (char **n = names; n && *n; n++)
                assert_int_equal(strextend(&joined, "%s%s", n == names ? "" : ",", *n), 0);
        return joined;
}

/* DISK-11, INST-20: the stores' start-up scans list a directory with a stream of its own. */
static void test_opendir_at(void **state)
{
        Fixture *f = *state;
        write_fixture_file(f->dirfd, "b", "x", 1);
        write_fixture_file(f->dirfd, "a", "x", 1);
        assert_int_equal(mkdirat(f->dirfd, "c", 0755), 0);
        assert_int_equal(symlinkat("c", f->dirfd, "link"), 0);

        /* A stream on a dup of dirfd read to the end leaves the shared offset there; the next
         * stream on a dup would see nothing, while opendir_at's starts at the beginning. */
        _cleanup_closedir_ DIR *dup_stream = fdopendir(fcntl(f->dirfd, F_DUPFD_CLOEXEC, 3));
        assert_non_null(dup_stream);
        _cleanup_free_ char *first = stream_names(dup_stream);
        assert_string_equal(first, "a,b,c,link");
        _cleanup_closedir_ DIR *second_dup = fdopendir(fcntl(f->dirfd, F_DUPFD_CLOEXEC, 3));
        assert_non_null(second_dup);
        _cleanup_free_ char *nothing = stream_names(second_dup);
        assert_string_equal(nothing, "");
        _cleanup_closedir_ DIR *d = NULL;
        assert_int_equal(opendir_at(f->dirfd, ".", 0, &d), 0);
        _cleanup_free_ char *again = stream_names(d);
        assert_string_equal(again, "a,b,c,link");
        assert_int_equal(fcntl(dirfd(d), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);

        _cleanup_closedir_ DIR *empty = NULL;
        assert_int_equal(opendir_at(f->dirfd, "c", O_NOFOLLOW, &empty), 0);
        _cleanup_free_ char *none = stream_names(empty);
        assert_string_equal(none, "");

        DIR *unset = NULL;
        assert_int_equal(opendir_at(f->dirfd, "missing", 0, &unset), -ENOENT);
        assert_int_equal(opendir_at(f->dirfd, "a", 0, &unset), -ENOTDIR);
        assert_int_equal(opendir_at(f->dirfd, "link", O_NOFOLLOW, &unset), -ENOTDIR);
        assert_null(unset);
        /* Through the link without O_NOFOLLOW: the directory it names. */
        assert_int_equal(opendir_at(f->dirfd, "link", 0, &unset), 0);
        closedir(unset);
}

/* GEN-7: content and mode of a successful replace */
static void test_write_file_atomic_success(void **state)
{
        Fixture *f = *state;
        WriteStep step = (WriteStep)99;
        struct stat st;

        umask(077);
        assert_int_equal(
            write_file_atomic_at(f->dirfd, "state.json", "{\"v\":1}\n", 8, 0644, &step), 0);
        assert_int_equal(step, 99); /* only written on failure */
        assert_file_content(f->dirfd, "state.json", "{\"v\":1}\n");
        assert_int_equal(fstatat(f->dirfd, "state.json", &st, 0), 0);
        assert_int_equal(st.st_mode & 07777, 0644);
        assert_false(file_exists(f->dirfd, "state.json.tmp"));

        /* replacing: a stale temp file from a crash is truncated and consumed */
        write_fixture_file(f->dirfd, "state.json.tmp", "stale stale stale stale", 23);
        assert_int_equal(write_file_atomic_at(f->dirfd, "state.json", "{}", 2, 0600, NULL), 0);
        assert_file_content(f->dirfd, "state.json", "{}");
        assert_int_equal(fstatat(f->dirfd, "state.json", &st, 0), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_false(file_exists(f->dirfd, "state.json.tmp"));

        /* an empty file is a valid content */
        assert_int_equal(write_file_atomic_at(f->dirfd, "state.json", "", 0, 0644, NULL), 0);
        assert_file_content(f->dirfd, "state.json", "");

        /* the steps in order: one write, a file fsync, a close, a rename, a directory fsync */
        fault_arm(&write_fault, 0, 0, 0);
        fault_arm(&fsync_fault, 0, 0, 0);
        fault_arm(&renameat_fault, 0, 0, 0);
        assert_int_equal(write_file_atomic_at(f->dirfd, "state.json", "abc", 3, 0644, NULL), 0);
        assert_int_equal(write_fault.calls, 1);
        assert_int_equal(fsync_fault.calls, 2);
        assert_int_equal(renameat_fault.calls, 1);
}

typedef struct AtomicFailure {
        Fault *fault;
        unsigned call;
        int error;
        WriteStep step;
} AtomicFailure;

/* GEN-7: every step's failure is reported, and the old file survives without a temp file */
static void test_write_file_atomic_failures(void **state)
{
        Fixture *f = *state;
        const AtomicFailure cases[] = {
            {&write_fault, 1, ENOSPC, WRITE_STEP_WRITE},
            {&write_fault, 2, EIO, WRITE_STEP_WRITE}, /* after a short write */
            {&fsync_fault, 1, EIO, WRITE_STEP_SYNC},
            {&close_fault, 1, EIO, WRITE_STEP_CLOSE},
            {&renameat_fault, 1, EXDEV, WRITE_STEP_RENAME},
            {&fsync_fault, 2, EIO, WRITE_STEP_SYNC_DIR},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                write_fixture_file(f->dirfd, "state", "old", 3);
                faults_disarm();
                write_chunk_max = 2;
                fault_arm(cases[i].fault, cases[i].call, 1, cases[i].error);

                WriteStep step = (WriteStep)99;
                assert_int_equal(
                    write_file_atomic_at(f->dirfd, "state", "new content", 11, 0644, &step),
                    -cases[i].error);
                faults_disarm();
                assert_int_equal(step, cases[i].step);
                assert_false(file_exists(f->dirfd, "state.tmp"));
                /* Up to the rename the old file stands; after it the new one is complete. */
                assert_file_content(f->dirfd, "state",
                                    cases[i].step == WRITE_STEP_SYNC_DIR ? "new content" : "old");

                /* failed_step may be NULL */
                write_fixture_file(f->dirfd, "state", "old", 3);
                fault_arm(cases[i].fault, cases[i].call, 1, cases[i].error);
                write_chunk_max = 2;
                assert_int_equal(
                    write_file_atomic_at(f->dirfd, "state", "new content", 11, 0644, NULL),
                    -cases[i].error);
                faults_disarm();
                assert_false(file_exists(f->dirfd, "state.tmp"));
        }
}

/* GEN-7: the temp file cannot be created */
static void test_write_file_atomic_create_fails(void **state)
{
        Fixture *f = *state;
        WriteStep step = (WriteStep)99;

        /* the directory is gone */
        assert_int_equal(mkdirat(f->dirfd, "gone", 0755), 0);
        int gone = openat(f->dirfd, "gone", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(gone >= 0);
        assert_int_equal(unlinkat(f->dirfd, "gone", AT_REMOVEDIR), 0);
        assert_int_equal(write_file_atomic_at(gone, "state", "new", 3, 0644, &step), -ENOENT);
        __real_close(gone);
        assert_int_equal(step, WRITE_STEP_CREATE);

        /* the temp name is taken by a directory; the old file stays */
        write_fixture_file(f->dirfd, "state", "old", 3);
        assert_int_equal(mkdirat(f->dirfd, "state.tmp", 0755), 0);
        step = (WriteStep)99;
        assert_int_equal(write_file_atomic_at(f->dirfd, "state", "new", 3, 0644, &step), -EISDIR);
        assert_int_equal(step, WRITE_STEP_CREATE);
        assert_file_content(f->dirfd, "state", "old");
        assert_int_equal(unlinkat(f->dirfd, "state.tmp", AT_REMOVEDIR), 0);

        /* the temp name is a symbolic link: never followed */
        assert_int_equal(symlinkat("elsewhere", f->dirfd, "state.tmp"), 0);
        step = (WriteStep)99;
        assert_int_equal(write_file_atomic_at(f->dirfd, "state", "new", 3, 0644, &step), -ELOOP);
        assert_int_equal(step, WRITE_STEP_CREATE);
        assert_false(file_exists(f->dirfd, "elsewhere"));
        assert_file_content(f->dirfd, "state", "old");
        assert_int_equal(unlinkat(f->dirfd, "state.tmp", 0), 0);

        /* a read-only directory, where the permission check applies (not for root) */
        assert_int_equal(mkdirat(f->dirfd, "ro", 0755), 0);
        int ro = openat(f->dirfd, "ro", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(ro >= 0);
        write_fixture_file(ro, "state", "old", 3);
        assert_int_equal(fchmod(ro, 0555), 0);
        int probe = openat(ro, "probe", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (probe >= 0) {
                /* privileged: the mode bits do not stop us, so there is nothing to test */
                __real_close(probe);
                unlinkat(ro, "probe", 0);
        } else {
                step = (WriteStep)99;
                assert_int_equal(write_file_atomic_at(ro, "state", "new", 3, 0644, &step), -EACCES);
                assert_int_equal(step, WRITE_STEP_CREATE);
                assert_file_content(ro, "state", "old");
                assert_false(file_exists(ro, "state.tmp"));
        }
        __real_close(ro);
}

/* ---- logging (OPS-4) ------------------------------------------------------------------------- */

/* OPS-4 */
static void test_log_line_shape(void **state)
{
        Fixture *f = *state;
        log_set_max_level(LOG_LEVEL_DEBUG);

        assert_int_equal(log_info("hello"), 0);
        assert_log(f, "<6>hello\n");
        assert_int_equal(log_error("e %d", 3), 0);
        assert_log(f, "<3>e 3\n");
        assert_int_equal(log_warning("w"), 0);
        assert_log(f, "<4>w\n");
        assert_int_equal(log_notice("n"), 0);
        assert_log(f, "<5>n\n");
        assert_int_equal(log_debug("d"), 0);
        assert_log(f, "<7>d\n");

        assert_int_equal(
            log_line(LOG_LEVEL_INFO, 0, "VF reset", "vf", "0000:e3:00.4", "took", "1.5s", NULL), 0);
        assert_log(f, "<6>VF reset vf=0000:e3:00.4 took=1.5s\n");

        /* a NULL value skips its pair */
        assert_int_equal(log_line(LOG_LEVEL_INFO, 0, "m", "a", "1", "b", NULL, "c", "3", NULL), 0);
        assert_log(f, "<6>m a=1 c=3\n");

        /* log_line's message is text, not a format */
        assert_int_equal(log_line(LOG_LEVEL_INFO, 0, "100% %s %m", NULL), 0);
        assert_log(f, "<6>100% %s %m\n");

        /* with an error: the return value is -abs(error) */
        assert_int_equal(log_line(LOG_LEVEL_ERR, -EIO, "x", NULL), -EIO);
        assert_log(f, "<3>x\n");
        assert_int_equal(log_line(LOG_LEVEL_ERR, EIO, "x", NULL), -EIO);
        assert_log(f, "<3>x\n");
}

/* OPS-4 */
static void test_log_quoting(void **state)
{
        Fixture *f = *state;
        static const struct {
                const char *value, *rendered;
        } cases[] = {
            {"plain", "k=plain"},
            {"0000:e3:00.0", "k=0000:e3:00.0"},
            {"a/b-c_d.e:f", "k=a/b-c_d.e:f"},
            {"", "k=\"\""},
            {"a b", "k=\"a b\""},
            {"a\"b", "k=\"a\\\"b\""},
            {"a=b", "k=\"a=b\""},
            {"a\\b", "k=\"a\\\\b\""},
            {"tab\there", "k=\"tab\\x09here\""},
            {"line\nbreak", "k=\"line\\x0abreak\""},
            {"cr\r", "k=\"cr\\x0d\""},
            {"\x1b[31m", "k=\"\\x1b[31m\""},
            {"del\x7f", "k=\"del\\x7f\""},
            {"caf\xc3\xa9", "k=\"caf\\xc3\\xa9\""},
            {"\xff", "k=\"\\xff\""},
            {" ", "k=\" \""},
            {"\"", "k=\"\\\"\""},
            {"say \"hi\" = \\o/", "k=\"say \\\"hi\\\" = \\\\o/\""},
        };
        log_set_max_level(LOG_LEVEL_INFO);

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char expected[256];
                snprintf(expected, sizeof expected, "<6>m %s\n", cases[i].rendered);
                assert_int_equal(log_line(LOG_LEVEL_INFO, 0, "m", "k", cases[i].value, NULL), 0);
                assert_log(f, expected);

                /* logfmt_append writes the same thing, with a leading space */
                char buf[256] = "";
                logfmt_append(buf, sizeof buf, "k", cases[i].value);
                expected[strlen(expected) - 1] = 0; /* without the newline */
                assert_string_equal(buf, expected + strlen("<6>m"));
        }
}

/* OPS-4 */
static void test_logfmt_append_truncates(void **state)
{
        char buf[8] = "ab";
        logfmt_append(buf, sizeof buf, "key", "value");
        assert_string_equal(buf, "ab key=");
        logfmt_append(buf, sizeof buf, "more", "x");
        assert_string_equal(buf, "ab key=");

        char small[4] = "";
        logfmt_append(small, sizeof small, "k", "a b");
        assert_string_equal(small, " k=");

        char one[1] = "";
        logfmt_append(one, sizeof one, "k", "v");
        assert_string_equal(one, "");
}

/* OPS-4 */
static void test_log_percent_m(void **state)
{
        Fixture *f = *state;

        errno = EPERM;
        assert_int_equal(log_error_errno(-ENOENT, "open %s: %m", "/var/lib/vgpud/x"), -ENOENT);
        assert_log(f, "<3>open /var/lib/vgpud/x: No such file or directory\n");
        assert_int_equal(errno, EPERM); /* the caller's errno survives */

        assert_int_equal(log_warning_errno(EBUSY, "reset: %m"), -EBUSY);
        assert_log(f, "<4>reset: Device or resource busy\n");

        assert_int_equal(log_full_errno(LOG_LEVEL_NOTICE, -EIO, "%m%%"), -EIO);
        assert_log(f, "<5>Input/output error%\n");
}

/* OPS-4 */
static void test_log_level_filter(void **state)
{
        Fixture *f = *state;

        log_set_max_level(LOG_LEVEL_NOTICE);
        assert_int_equal(log_get_max_level(), LOG_LEVEL_NOTICE);
        assert_int_equal(log_info("hidden"), 0);
        assert_int_equal(log_debug("hidden"), 0);
        assert_int_equal(log_line(LOG_LEVEL_INFO, 0, "hidden", "k", "v", NULL), 0);
        /* filtered lines still return the error, so "return log_..." keeps working */
        assert_int_equal(log_full_errno(LOG_LEVEL_DEBUG, -EAGAIN, "hidden %m"), -EAGAIN);
        assert_int_equal(log_line(LOG_LEVEL_INFO, ENOMEM, "hidden", NULL), -ENOMEM);
        assert_log(f, "");

        assert_int_equal(log_notice("shown"), 0);
        assert_int_equal(log_warning("shown"), 0);
        assert_int_equal(log_error("shown"), 0);
        assert_log(f, "<5>shown\n<4>shown\n<3>shown\n");

        log_set_max_level(LOG_LEVEL_ERR);
        assert_int_equal(log_warning("hidden"), 0);
        assert_int_equal(log_error("shown"), 0);
        assert_log(f, "<3>shown\n");
}

/* OPS-4: one line per event, whatever the message holds */
static void test_log_newlines(void **state)
{
        Fixture *f = *state;

        assert_int_equal(log_info("a\nb\r\nc\n"), 0);
        assert_log(f, "<6>a b  c \n");
        assert_int_equal(log_line(LOG_LEVEL_INFO, 0, "x\ny", "k", "v\nw", NULL), 0);
        assert_log(f, "<6>x y k=\"v\\x0aw\"\n");
}

static void assert_capped(Fixture *f, const char *prefix)
{
        char *s = log_take(f);
        size_t n = strlen(s);
        bool ok = n <= LOG_LINE_MAX && n > LOG_LINE_MAX - 16 && s[n - 1] == '\n' &&
                  strchr(s, '\n') == s + n - 1 && strncmp(s, prefix, strlen(prefix)) == 0;
        if (!ok)
                fprintf(stderr, "capped line: %zu bytes\n", n);
        free(s);
        assert_true(ok);
}

/* OPS-4: at most 4 KiB, newline included */
static void test_log_cap(void **state)
{
        Fixture *f = *state;
        char *big = malloc(3 * LOG_LINE_MAX + 1);
        assert_non_null(big);
        memset(big, 'm', 3 * LOG_LINE_MAX);
        big[3 * LOG_LINE_MAX] = 0;

        assert_int_equal(log_info("%s", big), 0);
        assert_capped(f, "<6>mmm");

        assert_int_equal(log_line(LOG_LEVEL_INFO, 0, big, NULL), 0);
        assert_capped(f, "<6>mmm");

        /* a long value after a short message */
        assert_int_equal(log_line(LOG_LEVEL_INFO, 0, "short", "k", big, NULL), 0);
        assert_capped(f, "<6>short k=mmm");

        /* a long value that needs escapes */
        memset(big, '\n', 3 * LOG_LINE_MAX);
        assert_int_equal(log_line(LOG_LEVEL_INFO, 0, "short", "k", big, NULL), 0);
        assert_capped(f, "<6>short k=\"\\x0a");

        /* a message that fills the line leaves no room for pairs, and still one line */
        memset(big, 'm', 3 * LOG_LINE_MAX);
        assert_int_equal(log_line(LOG_LEVEL_INFO, 0, big, "k", "v", "k2", "v w", NULL), 0);
        assert_capped(f, "<6>mmm");

        /* just under the cap is written in full */
        big[LOG_LINE_MAX - 5] = 0; /* "<6>" + 4091 + "\n" = 4095 */
        assert_int_equal(log_line(LOG_LEVEL_INFO, 0, big, NULL), 0);
        char *s = log_take(f);
        size_t n = strlen(s);
        free(s);
        assert_int_equal(n, LOG_LINE_MAX - 1);
        free(big);
}

/* OPS-4, CFG-3 (log_level) */
static void test_log_level_from_string(void **state)
{
        static const struct {
                const char *s;
                int level;
        } cases[] = {
            {"err", LOG_LEVEL_ERR},   {"warning", LOG_LEVEL_WARNING}, {"notice", LOG_LEVEL_NOTICE},
            {"info", LOG_LEVEL_INFO}, {"debug", LOG_LEVEL_DEBUG},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                int level = -1;
                assert_int_equal(log_level_from_string(cases[i].s, &level), 0);
                assert_int_equal(level, cases[i].level);
        }
        static const char *const bad[] = {"",      "error", "warn", "INFO",  "Info",  "info ",
                                          " info", "6",     "crit", "emerg", "trace", "debug\n"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                int level = -1;
                assert_int_equal(log_level_from_string(bad[i], &level), -EINVAL);
                assert_int_equal(level, -1);
        }
}

/* ---- strings and failure messages (GEN-7) ---------------------------------------------------- */

static void test_strprintf_strextend(void **state)
{
        char *s = NULL;
        assert_int_equal(strprintf(&s, "%s-%d", "vf", 4), 0);
        assert_string_equal(s, "vf-4");
        free(s);

        s = NULL;
        assert_int_equal(strextend(&s, "a"), 0);
        assert_string_equal(s, "a");
        assert_int_equal(strextend(&s, "%s=%d", "b", 2), 0);
        assert_string_equal(s, "ab=2");
        assert_int_equal(strextend(&s, "%s", ""), 0);
        assert_string_equal(s, "ab=2");
        for (int i = 0; i < 1000; i++)
                assert_int_equal(strextend(&s, ",%d", i), 0);
        assert_int_equal(strncmp(s, "ab=2,0,1,2,", 11), 0);
        assert_string_equal(s + strlen(s) - 4, ",999");
        free(s);
}

static void test_strstrip_strchomp(void **state)
{
        static const struct {
                const char *in, *stripped, *chomped;
        } cases[] = {
            {"", "", ""},
            {"a", "a", "a"},
            {"\n", "", ""},
            {"a\n", "a", "a"},
            {"a\n\n", "a", "a\n"},
            {"  a b \t\n", "a b", "  a b \t"},
            {"\t\r\n\v\f ", "", "\t\r\n\v\f "},
            {"a\r\n", "a", "a\r"},
            {" \na", "a", " \na"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                char *a = strdup(cases[i].in), *b = strdup(cases[i].in);
                assert_non_null(a);
                assert_non_null(b);
                char *stripped = strstrip(a);
                assert_true(stripped >= a && stripped <= a + strlen(cases[i].in));
                assert_string_equal(stripped, cases[i].stripped);
                assert_ptr_equal(strchomp(b), b);
                assert_string_equal(b, cases[i].chomped);
                free(a);
                free(b);
        }
}

static void test_strv(void **state)
{
        char **v = NULL;
        assert_int_equal(strv_length(v), 0);
        assert_int_equal(strv_push(&v, "a"), 0);
        assert_int_equal(strv_push(&v, ""), 0);
        char s[] = "c";
        assert_int_equal(strv_push(&v, s), 0);
        s[0] = 'x'; /* the vector holds copies */
        assert_int_equal(strv_length(v), 3);
        assert_string_equal(v[0], "a");
        assert_string_equal(v[1], "");
        assert_string_equal(v[2], "c");
        assert_null(v[3]);
        for (int i = 0; i < 100; i++)
                assert_int_equal(strv_push(&v, "more"), 0);
        assert_int_equal(strv_length(v), 103);
        assert_null(v[103]);
        strv_freep(&v);

        /* strv_sort: byte order (upper case before lower), repeats kept, NULL and one entry
         * left as they are. */
        strv_sort(NULL);
        v = NULL;
        assert_int_equal(strv_push(&v, "b"), 0);
        strv_sort(v);
        assert_string_equal(v[0], "b");
        assert_null(v[1]);
        const char *in[] = {"traits", "VGPU", "b", "a", "b", "CUSTOM_X"};
        for (size_t i = 0; i < ELEMENTSOF(in); i++)
                assert_int_equal(strv_push(&v, in[i]), 0);
        strv_sort(v);
        const char *want[] = {"CUSTOM_X", "VGPU", "a", "b", "b", "b", "traits"};
        assert_int_equal(strv_length(v), ELEMENTSOF(want));
        for (size_t i = 0; i < ELEMENTSOF(want); i++)
                assert_string_equal(v[i], want[i]);
        strv_freep(&v);
}

/* SEED-1, REL-13: well-formed UTF-8 only. */
static void test_utf8_is_valid(void **state)
{
        static const char *const good[] = {
            "", "ascii", "caf\xc3\xa9", "\xe2\x9c\x93", "\xf0\x9f\x94\x91", "\xf4\x8f\xbf\xbf"};
        static const char *const bad[] = {
            "\xff",         "\xc3",         "\xe2\x9c",         "\xc0\xaf",
            "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80",
            "a\xc3("};
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                assert_true(utf8_is_valid(good[i], strlen(good[i])));
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_false(utf8_is_valid(bad[i], strlen(bad[i])));
        /* NUL is U+0000: the length decides, not a terminator. */
        assert_true(utf8_is_valid("a\0b", 3));
}

/* SEED-1's keys and API-13's tokens: one strict base64 decoder, two forms. */
static void test_base64_decode(void **state)
{
        static const struct {
                const char *in;
                Base64Form form;
                const char *out; /* NULL: refused */
        } cases[] = {
            {"YWJj", BASE64_PADDED, "abc"},
            {"YWI=", BASE64_PADDED, "ab"},
            {"YQ==", BASE64_PADDED, "a"},
            {"+/8=", BASE64_PADDED, "\xfb\xff"},
            {"", BASE64_PADDED, NULL},     /* a key's blob is never empty */
            {"YWI", BASE64_PADDED, NULL},  /* padding missing */
            {"Y===", BASE64_PADDED, NULL}, /* a lone digit */
            {"YW=j", BASE64_PADDED, NULL}, /* '=' inside */
            {"YR==", BASE64_PADDED, NULL}, /* non-zero bits in the tail */
            {"-_8=", BASE64_PADDED, NULL}, /* the URL alphabet */
            {"YWJj", BASE64_URL_UNPADDED, "abc"},
            {"YWI", BASE64_URL_UNPADDED, "ab"},
            {"-_8", BASE64_URL_UNPADDED, "\xfb\xff"},
            {"", BASE64_URL_UNPADDED, ""},
            {"YWI=", BASE64_URL_UNPADDED, NULL},  /* padding */
            {"YWJjZ", BASE64_URL_UNPADDED, NULL}, /* 1 mod 4 */
            {"YR", BASE64_URL_UNPADDED, NULL},    /* non-zero bits in the tail */
            {"+/8", BASE64_URL_UNPADDED, NULL},   /* the standard alphabet */
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ uint8_t *out = NULL;
                size_t size = 0;
                int r = base64_decode(cases[i].in, strlen(cases[i].in), cases[i].form, &out, &size);
                if (!cases[i].out) {
                        assert_int_equal(r, -EINVAL);
                        continue;
                }
                assert_int_equal(r, 0);
                assert_int_equal(size, strlen(cases[i].out));
                assert_memory_equal(out, cases[i].out, size);
        }
}

static void test_small_helpers(void **state)
{
        assert_true(streq("a", "a"));
        assert_false(streq("a", "ab"));
        assert_true(streq_ptr(NULL, NULL));
        assert_false(streq_ptr("a", NULL));
        assert_false(streq_ptr(NULL, "a"));
        assert_true(streq_ptr("a", "a"));
        assert_string_equal(startswith("0000:e3", "0000:"), "e3");
        assert_string_equal(startswith("abc", ""), "abc");
        assert_null(startswith("ab", "abc"));

        errno = 0;
        assert_int_equal(negative_errno(), -EIO);
        errno = ENOENT;
        assert_int_equal(negative_errno(), -ENOENT);

        _cleanup_free_ char *p = strdup("x");
        char *q = TAKE_PTR(p);
        assert_null(p);
        free(q);
        int fd = 5;
        assert_int_equal(TAKE_FD(fd), 5);
        assert_int_equal(fd, -1);
}

/* GEN-7 */
static void test_error_set_prefix(void **state)
{
        char *error = NULL;

        assert_int_equal(error_set(NULL, -EIO, "ignored %d", 1), -EIO);
        assert_int_equal(error_prefix(NULL, -EIO, "ignored"), -EIO);

        assert_int_equal(error_set(&error, -ENOENT, "open %s", "/x"), -ENOENT);
        assert_string_equal(error, "open /x");
        /* a new message replaces the old one; the old one may be an argument */
        assert_int_equal(error_set(&error, -EINVAL, "parse: %s", error), -EINVAL);
        assert_string_equal(error, "parse: open /x");
        assert_int_equal(error_prefix(&error, -EINVAL, "VF %s", "0000:e3:00.4"), -EINVAL);
        assert_string_equal(error, "VF 0000:e3:00.4: parse: open /x");
        free(error);

        /* without a message, the prefix is followed by strerror */
        error = NULL;
        assert_int_equal(error_prefix(&error, -ENOENT, "read %s", "state"), -ENOENT);
        assert_string_equal(error, "read state: No such file or directory");

        /* a failed allocation has its one wording, and replaces what was there */
        assert_int_equal(error_set_oom(&error), -ENOMEM);
        assert_string_equal(error, "out of memory");
        assert_int_equal(error_set_oom(NULL), -ENOMEM);
        free(error);
}

/* A variadic helper of the kind error_setv() is for: a fixed prefix before the caller's text. */
static int fail_with_prefix(char **error, int r, const char *fmt, ...) _printf_(3, 4);
static int fail_with_prefix(char **error, int r, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        r = error_setv(error, r, fmt, ap);
        va_end(ap);
        return error_prefix(error, r, "prefix");
}

/* GEN-7 */
static void test_error_setv(void **state)
{
        char *error = NULL;

        assert_int_equal(fail_with_prefix(NULL, -EIO, "ignored %d", 1), -EIO);
        assert_int_equal(fail_with_prefix(&error, -ENOENT, "open %s: %d", "/x", 2), -ENOENT);
        assert_string_equal(error, "prefix: open /x: 2");
        /* the old message may be an argument of the new one */
        assert_int_equal(fail_with_prefix(&error, -EINVAL, "again: %s", error), -EINVAL);
        assert_string_equal(error, "prefix: again: prefix: open /x: 2");
        free(error);
}

/* ---- escaping outside text ------------------------------------------------------------------- */

static char *escaped(const char *s, size_t n, size_t max, EscapeFlags flags)
{
        char *e = escape_text(s, n, max, flags);
        assert_non_null(e);
        /* the buffer form gives the same text and says how long it is */
        char buf[2048];
        assert_true(strlen(e) < sizeof buf);
        assert_int_equal(escape_text_buf(buf, sizeof buf, s, n, max, flags), strlen(e));
        assert_string_equal(buf, e);
        assert_int_equal(escape_text_buf(NULL, 0, s, n, max, flags), strlen(e));
        return e;
}

static void assert_escaped(const char *s, EscapeFlags flags, const char *expected)
{
        _cleanup_free_ char *e = escaped(s, strlen(s), SIZE_MAX, flags);
        assert_string_equal(e, expected);
}

/* GEN-5, OPS-4, CFG-4: the one rule for outside text in a message or log line */
static void test_escape_text(void **state)
{
        static const struct {
                const char *s, *bare, *quoted, *echo_utf8;
        } cases[] = {
            {"", "", "\"\"", ""},
            {"plain 0000:e3:00.0 a/b=c", "plain 0000:e3:00.0 a/b=c", "\"plain 0000:e3:00.0 a/b=c\"",
             "plain 0000:e3:00.0 a/b=c"},
            {"a\"b", "a\\\"b", "\"a\\\"b\"", "a\"b"},
            {"a\\b", "a\\\\b", "\"a\\\\b\"", "a\\b"},
            /* a literal escape in the text cannot pass for one in the output */
            {"\\x0a", "\\\\x0a", "\"\\\\x0a\"", "\\x0a"},
            {"tab\there", "tab\\x09here", "\"tab\\x09here\"", "tab\\x09here"},
            {"line\nbreak\r", "line\\x0abreak\\x0d", "\"line\\x0abreak\\x0d\"",
             "line\\x0abreak\\x0d"},
            {"\x1b[2J\x1b]0;title\x07", "\\x1b[2J\\x1b]0;title\\x07",
             "\"\\x1b[2J\\x1b]0;title\\x07\"", "\\x1b[2J\\x1b]0;title\\x07"},
            {"del\x7f", "del\\x7f", "\"del\\x7f\"", "del\\x7f"},
            {"caf\xc3\xa9", "caf\\xc3\\xa9", "\"caf\\xc3\\xa9\"", "caf\xc3\xa9"},
            {"\23331m\xff", "\\x9b31m\\xff", "\"\\x9b31m\\xff\"", "\23331m\xff"}, /* 0x9b: CSI */
            {"x\" y=\"z", "x\\\" y=\\\"z", "\"x\\\" y=\\\"z\"", "x\" y=\"z"},
        };

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                assert_escaped(cases[i].s, 0, cases[i].bare);
                assert_escaped(cases[i].s, ESCAPE_QUOTE, cases[i].quoted);
                assert_escaped(cases[i].s, ESCAPE_ECHO | ESCAPE_UTF8, cases[i].echo_utf8);
                /* quoting wins over echo: inside quotes, '"' and '\' are always escaped */
                assert_escaped(cases[i].s, ESCAPE_QUOTE | ESCAPE_ECHO, cases[i].quoted);
        }
        assert_escaped("caf\xc3\xa9 \"\\", ESCAPE_QUOTE | ESCAPE_UTF8, "\"caf\xc3\xa9 \\\"\\\\\"");
        assert_escaped("\"\xc3\xa9\"", ESCAPE_ECHO, "\"\\xc3\\xa9\"");

        /* a NUL inside the counted bytes is shown, not an end */
        _cleanup_free_ char *nul = escaped("a\0b", 3, SIZE_MAX, ESCAPE_QUOTE);
        assert_string_equal(nul, "\"a\\x00b\"");

        /* every byte: the output is printable ASCII, and one line */
        char all[256];
        for (int c = 0; c < 256; c++)
                all[c] = (char)(c == 255 ? 1 : c + 1);
        static const EscapeFlags flag_sets[] = {0, ESCAPE_QUOTE, ESCAPE_ECHO};
        for (size_t f = 0; f < ELEMENTSOF(flag_sets); f++) {
                _cleanup_free_ char *e = escaped(all, sizeof all, SIZE_MAX, flag_sets[f]);
                for (const char *p = e; *p; p++)
                        assert_true(*p >= 0x20 && *p < 0x7f);
        }
}

/* GEN-5: a long value is cut, never inside a UTF-8 character */
static void test_escape_text_max(void **state)
{
        _cleanup_free_ char *cut = escaped("abcdef", 6, 3, ESCAPE_QUOTE);
        assert_string_equal(cut, "\"abc...\"");
        _cleanup_free_ char *exact = escaped("abc", 3, 3, ESCAPE_QUOTE);
        assert_string_equal(exact, "\"abc\"");
        /* "é" is two bytes: cutting after 2 bytes of "xé" would split it */
        _cleanup_free_ char *utf8 = escaped("x\xc3\xa9y", 4, 2, ESCAPE_QUOTE | ESCAPE_UTF8);
        assert_string_equal(utf8, "\"x...\"");
        _cleanup_free_ char *bare = escaped("\n\n\n", 3, 1, 0);
        assert_string_equal(bare, "\\x0a...");
        _cleanup_free_ char *none = escaped("abc", 3, 0, 0);
        assert_string_equal(none, "...");
}

/* The buffer form cuts before an escape that does not fit, never inside one. */
static void test_escape_text_buf_cut(void **state)
{
        char buf[8];
        /* "\"a\\x0ab\"" needs 8 bytes and a NUL */
        assert_int_equal(escape_text_buf(buf, sizeof buf, "a\nb", 3, SIZE_MAX, ESCAPE_QUOTE), 8);
        assert_string_equal(buf, "\"a\\x0ab");
        assert_int_equal(escape_text_buf(buf, 5, "a\nb", 3, SIZE_MAX, ESCAPE_QUOTE), 8);
        assert_string_equal(buf, "\"a");
        /* nothing after a piece that did not fit, even a smaller one */
        assert_int_equal(escape_text_buf(buf, 4, "\nb", 2, SIZE_MAX, 0), 5);
        assert_string_equal(buf, "");
        assert_int_equal(escape_text_buf(buf, 1, "a", 1, SIZE_MAX, 0), 1);
        assert_string_equal(buf, "");
}

/* ---- hex digits --------------------------------------------------------------------------------
 */

static void test_hex_value(void **state)
{
        static const char digits[] = "0123456789abcdef", upper[] = "ABCDEF";

        for (int i = 0; i < 16; i++) {
                assert_int_equal(hex_value(digits[i]), i);
                assert_int_equal(hex_value_lower(digits[i]), i);
        }
        for (int i = 0; i < 6; i++) {
                assert_int_equal(hex_value(upper[i]), 10 + i);
                assert_int_equal(hex_value_lower(upper[i]), -EINVAL); /* not canonical */
        }
        for (int c = -128; c < 128; c++)
                if (!strchr("0123456789abcdefABCDEF", c) || c == 0) {
                        assert_int_equal(hex_value((char)c), -EINVAL);
                        assert_int_equal(hex_value_lower((char)c), -EINVAL);
                }
}

/* ---- cleanup functions ------------------------------------------------------------------------
 */

typedef struct Counted {
        int *frees;
} Counted;

static Counted *counted_free(Counted *c)
{
        (*c->frees)++; /* never called with NULL: the cleanup function checks first */
        free(c);
        return NULL;
}
DEFINE_TRIVIAL_CLEANUP_FUNC(Counted *, counted_free);

static void test_trivial_cleanup_func(void **state)
{
        int frees = 0;
        {
                _cleanup_(counted_freep) Counted *none = NULL;
                _cleanup_(counted_freep) Counted *one = malloc(sizeof *one);
                assert_non_null(one);
                one->frees = &frees;
                _cleanup_(counted_freep) Counted *taken = malloc(sizeof *taken);
                assert_non_null(taken);
                taken->frees = &frees;
                free(TAKE_PTR(taken));
                (void)none;
        }
        assert_int_equal(frees, 1);

        _cleanup_strv_free_ char **strv = NULL;
        assert_int_equal(strv_push(&strv, "a"), 0);
        assert_null(strv_free(NULL));
}

/* The sorted pointer arrays behind the instance, image and volume lookups (PERF-5, DISK-2). */
static const char *sorted_key(const void *item)
{
        return item;
}

static void test_sorted(void **state)
{
        char *names[] = {"m", "c", "x", "a"};
        void **items = NULL;
        size_t n = 0, at;
        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                assert_int_equal(sorted_insert(&items, &n, names[i], sorted_key), 0);
        assert_int_equal(n, 4);
        assert_string_equal(items[0], "a");
        assert_string_equal(items[3], "x");
        assert_int_equal(sorted_insert(&items, &n, names[0], sorted_key), -EEXIST);
        assert_ptr_equal(sorted_get(items, n, "c", sorted_key), names[1]);
        assert_null(sorted_get(items, n, "d", sorted_key));
        assert_null(sorted_get(items, n, NULL, sorted_key));
        assert_false(sorted_find(items, n, "d", sorted_key, &at));
        assert_int_equal(at, 2); /* between c and m */
        char other[] = "c";      /* the same key, another item: not removed */
        assert_false(sorted_remove(items, &n, other, sorted_key));
        assert_true(sorted_remove(items, &n, names[1], sorted_key));
        assert_int_equal(n, 3);
        assert_null(sorted_get(items, n, "c", sorted_key));
        assert_string_equal(items[1], "m");
        free(items);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_parse_uint64_valid),
            cmocka_unit_test(test_parse_uint64_invalid),
            cmocka_unit_test(test_parse_uint64_overflow),
            cmocka_unit_test(test_parse_uint64_range),
            cmocka_unit_test(test_parse_uint32),
            cmocka_unit_test(test_pci_address_valid),
            cmocka_unit_test(test_pci_address_invalid),
            cmocka_unit_test(test_uuid),
            cmocka_unit_test(test_json_schema_read),
            cmocka_unit_test(test_json_first_unknown_key),
            cmocka_unit_test(test_mac_address),
            cmocka_unit_test(test_qemu_id),
            cmocka_unit_test(test_parse_duration_valid),
            cmocka_unit_test(test_parse_duration_invalid),
            cmocka_unit_test(test_parse_duration_overflow),
            cmocka_unit_test(test_format_duration),
            cmocka_unit_test(test_duration_round_trip),
            cmocka_unit_test(test_format_timestamp),
            cmocka_unit_test(test_parse_timestamp_valid),
            cmocka_unit_test(test_parse_timestamp_zero),
            cmocka_unit_test(test_parse_timestamp_invalid),
            cmocka_unit_test(test_parse_timestamp_out_of_range),
            cmocka_unit_test(test_timestamp_round_trip),
            cmocka_unit_test(test_timestamp_helpers),
            fixture_test(test_read_file_bounded),
            fixture_test(test_read_file_special),
            fixture_test(test_write_all),
            fixture_test(test_fsync_directory_at),
            fixture_test(test_opendir_at),
            fixture_test(test_write_file_atomic_success),
            fixture_test(test_write_file_atomic_failures),
            fixture_test(test_write_file_atomic_create_fails),
            fixture_test(test_log_line_shape),
            fixture_test(test_log_quoting),
            cmocka_unit_test(test_logfmt_append_truncates),
            fixture_test(test_log_percent_m),
            fixture_test(test_log_level_filter),
            fixture_test(test_log_newlines),
            fixture_test(test_log_cap),
            cmocka_unit_test(test_log_level_from_string),
            cmocka_unit_test(test_strprintf_strextend),
            cmocka_unit_test(test_strstrip_strchomp),
            cmocka_unit_test(test_strv),
            cmocka_unit_test(test_small_helpers),
            cmocka_unit_test(test_utf8_is_valid),
            cmocka_unit_test(test_base64_decode),
            cmocka_unit_test(test_error_set_prefix),
            cmocka_unit_test(test_error_setv),
            cmocka_unit_test(test_escape_text),
            cmocka_unit_test(test_escape_text_max),
            cmocka_unit_test(test_escape_text_buf_cut),
            cmocka_unit_test(test_hex_value),
            cmocka_unit_test(test_trivial_cleanup_func),
            cmocka_unit_test(test_sorted),
        };
        return cmocka_run_group_tests_name("base", tests, NULL, NULL);
}
