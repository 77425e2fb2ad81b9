/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the gpu module: the pure parsers, and discovery against fixture sysfs trees.
 * Realistic hosts come from tests/data/mkhost.sh (run into a private temporary directory);
 * edge cases are built here file by file. Every tree is removed after its test.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/base.h"
#include "gpu/gpu.h"
#include "sysfs/sysfs.h"
#include "testlib.h"
#include "worker/worker.h"

/* ---- fixtures ------------------------------------------------------------------------------ */

typedef struct Fixture {
        char *dir;   /* the sysfs root of this test */
        Root *root;  /* opened on it */
        TestLog log; /* where log lines go during the test */
} Fixture;

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        const char *tmp = getenv("TMPDIR");
        assert_int_equal(strprintf(&f->dir, "%s/vgpud-test-gpu.XXXXXX", tmp ? tmp : "/tmp"), 0);
        assert_non_null(mkdtemp(f->dir));
        assert_int_equal(root_open(f->dir, &f->root), 0);
        assert_int_equal(test_log_start(&f->log), 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        test_log_stop(&f->log);
        root_free(f->root);
        assert_int_equal(test_remove_tree_at(AT_FDCWD, f->dir), 0);
        free(f->dir);
        free(f);
        return 0;
}

static const char *log_text(Fixture *f)
{
        return test_log_text(&f->log);
}

static char *path_of(Fixture *f, const char *rel)
{
        char *p;
        assert_int_equal(strprintf(&p, "%s/%s", f->dir, rel), 0);
        return p;
}

/* mkdir -p below the fixture root. */
static void mkdirs(Fixture *f, const char *rel)
{
        _cleanup_free_ char *p = path_of(f, rel);
        for (char *s = p + strlen(f->dir) + 1; (s = strchr(s, '/')); s++) {
                *s = 0;
                assert_true(mkdir(p, 0755) == 0 || errno == EEXIST);
                *s = '/';
        }
        assert_true(mkdir(p, 0755) == 0 || errno == EEXIST);
}

static void parent_dirs(Fixture *f, const char *rel)
{
        _cleanup_free_ char *dir = strdup(rel);
        assert_non_null(dir);
        char *slash = strrchr(dir, '/');
        if (slash) {
                *slash = 0;
                mkdirs(f, dir);
        }
}

static void put(Fixture *f, const char *rel, const char *content)
{
        parent_dirs(f, rel);
        _cleanup_free_ char *p = path_of(f, rel);
        _cleanup_close_ int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write_all(fd, content, strlen(content)), 0);
}

static void put_link(Fixture *f, const char *rel, const char *target)
{
        parent_dirs(f, rel);
        _cleanup_free_ char *p = path_of(f, rel);
        assert_int_equal(symlink(target, p), 0);
}

/* rm -rf below the fixture root. */
static void remove_path(Fixture *f, const char *rel)
{
        _cleanup_free_ char *p = path_of(f, rel);
        struct stat st;
        assert_int_equal(lstat(p, &st), 0);
        assert_int_equal(test_remove_tree_at(AT_FDCWD, p), 0);
}

/* Replaces whatever is at rel by a regular file. */
static void replace_by_file(Fixture *f, const char *rel)
{
        remove_path(f, rel);
        put(f, rel, "");
}

/* Writes the fixture host `kind` with tests/data/mkhost.sh into the fixture root. */
static void mkhost(Fixture *f, const char *kind)
{
        const char *data = getenv("VGPUD_TEST_DATA");
        assert_non_null(data);
        _cleanup_free_ char *script = NULL;
        assert_int_equal(strprintf(&script, "%s/mkhost.sh", data), 0);

        char *argv[] = {"sh", script, f->dir, (char *)kind, NULL};
        char *envp[] = {"PATH=/usr/bin:/bin", NULL};
        pid_t pid;
        assert_int_equal(posix_spawn(&pid, "/bin/sh", NULL, NULL, argv, envp), 0);
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0);
}

static GpuHost *discover_ok(Fixture *f, const GpuNvml *nvml)
{
        GpuHost *h = NULL;
        _cleanup_free_ char *error = NULL;
        int r = gpu_discover(f->root, nvml, &h, &error);
        if (r < 0)
                fail_msg("discovery failed: %s", error ? error : strerror(-r));
        assert_non_null(h);
        return h;
}

/* Runs a discovery that must fail; returns its message and checks out-parameter discipline. */
static char *discover_error(Fixture *f, const GpuNvml *nvml, int *ret_r)
{
        GpuHost *h = NULL;
        char *error = NULL;
        int r = gpu_discover(f->root, nvml, &h, &error);
        assert_true(r < 0);
        assert_null(h);
        assert_non_null(error);
        *ret_r = r;
        return error;
}

#define HEADER "ID    : vGPU Name\n"
#define L40S_2GIB HEADER "1146  : NVIDIA L40S-2B\n1148  : NVIDIA L40S-2Q\n1158  : NVIDIA L40S-2A\n"

/* A PF directory with its device file, as discovery reads it (no links needed). */
static void tree_pf(Fixture *f, const char *pf, const char *device)
{
        _cleanup_free_ char *rel = NULL;
        assert_int_equal(strprintf(&rel, "bus/pci/devices/%s/device", pf), 0);
        put(f, rel, device);
}

static void tree_vendor_vf(Fixture *f, const char *vf, const char *pf, const char *current,
                           const char *creatable)
{
        _cleanup_free_ char *rel = NULL, *target = NULL;
        assert_int_equal(strprintf(&rel, "bus/pci/devices/%s/nvidia/current_vgpu_type", vf), 0);
        put(f, rel, current);
        free(rel);
        assert_int_equal(strprintf(&rel, "bus/pci/devices/%s/nvidia/creatable_vgpu_types", vf), 0);
        put(f, rel, creatable);
        free(rel);
        assert_int_equal(strprintf(&rel, "bus/pci/devices/%s/physfn", vf), 0);
        assert_int_equal(strprintf(&target, "../%s", pf), 0);
        put_link(f, rel, target);
}

/* An mdev parent VF under class/mdev_bus (a real directory here) with the given types. */
static void tree_mdev_vf(Fixture *f, const char *vf, const char *pf, const char *const *types)
{
        _cleanup_free_ char *rel = NULL, *target = NULL;
        if (pf) {
                assert_int_equal(strprintf(&rel, "class/mdev_bus/%s/physfn", vf), 0);
                assert_int_equal(strprintf(&target, "../../../bus/pci/devices/%s", pf), 0);
                put_link(f, rel, target);
        }
        for (size_t i = 0; types && types[i]; i += 3) {
                free(rel);
                rel = NULL;
                assert_int_equal(
                    strprintf(&rel, "class/mdev_bus/%s/mdev_supported_types/%s/name", vf, types[i]),
                    0);
                if (types[i + 1])
                        put(f, rel, types[i + 1]);
                else
                        parent_dirs(f, rel);
                free(rel);
                assert_int_equal(strprintf(&rel,
                                           "class/mdev_bus/%s/mdev_supported_types/%s/description",
                                           vf, types[i]),
                                 0);
                if (types[i + 2])
                        put(f, rel, types[i + 2]);
        }
}

static void assert_has_warning(const GpuHost *h, const char *text)
{
        for (char **w = h->warnings; w && *w; w++)
                if (streq(*w, text))
                        return;
        for (char **w = h->warnings; w && *w; w++)
                print_message("warning: %s\n", *w);
        fail_msg("no warning \"%s\"", text);
}

static void assert_log_has(Fixture *f, const char *line)
{
        if (!strstr(log_text(f), line))
                fail_msg("log lacks \"%s\"; log:\n%s", line, log_text(f));
}

/* ---- parsers ------------------------------------------------------------------------------- */

static void parse_creatable_ok(const char *text, GpuProfile **ret, size_t *ret_n)
{
        _cleanup_free_ char *error = NULL;
        int r = gpu_parse_creatable_types(text, strlen(text), ret, ret_n, &error);
        if (r < 0)
                fail_msg("parse failed: %s", error ? error : strerror(-r));
}

/* Parses text that must fail with r and exactly message. */
static void parse_creatable_fails(const char *text, size_t size, int r, const char *message)
{
        GpuProfile *p = (GpuProfile *)0x1;
        size_t n = 77;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(gpu_parse_creatable_types(text, size, &p, &n, &error), r);
        assert_ptr_equal(p, (GpuProfile *)0x1); /* out-parameters untouched on failure */
        assert_int_equal(n, 77);
        assert_non_null(error);
        assert_string_equal(error, message);
}

/* DISC-10, DISC-14 */
static void test_creatable_table(void **state)
{
        GpuProfile *p;
        size_t n;
        parse_creatable_ok(HEADER "1145  : NVIDIA L40S-1B\n"
                                  "1147  : NVIDIA L40S-1Q\r\n"
                                  "\n"
                                  "  1156:NVIDIA L40S-48Q  \n"
                                  "1167 : NVIDIA H200X-1-18C",
                           &p, &n);
        assert_int_equal(n, 4);
        assert_int_equal(p[0].type_id, 1145);
        assert_string_equal(p[0].name, "NVIDIA L40S-1B");
        assert_int_equal(p[0].framebuffer_mib, 1024);
        assert_null(p[0].mdev_type);
        assert_int_equal(p[1].type_id, 1147);
        assert_string_equal(p[1].name, "NVIDIA L40S-1Q");
        assert_int_equal(p[2].type_id, 1156);
        assert_string_equal(p[2].name, "NVIDIA L40S-48Q");
        assert_int_equal(p[2].framebuffer_mib, 49152);
        assert_int_equal(p[3].type_id, 1167);
        assert_int_equal(p[3].framebuffer_mib, 18432);
        gpu_profiles_free(p, n);

        /* A name may hold a colon: only the first one splits. */
        parse_creatable_ok("7 : NVIDIA X:Y-2Q\n", &p, &n);
        assert_int_equal(n, 1);
        assert_string_equal(p[0].name, "NVIDIA X:Y-2Q");
        gpu_profiles_free(p, n);
}

/* DISC-10 */
static void test_creatable_header_only(void **state)
{
        GpuProfile *p = (GpuProfile *)0x1;
        size_t n = 5;
        parse_creatable_ok(HEADER, &p, &n);
        assert_int_equal(n, 0);
        gpu_profiles_free(p, n);

        parse_creatable_ok("", &p, &n);
        assert_int_equal(n, 0);
        gpu_profiles_free(p, n);

        parse_creatable_ok("\n  \n" HEADER "\n", &p, &n);
        assert_int_equal(n, 0);
        gpu_profiles_free(p, n);
}

/* DISC-11 */
static void test_creatable_bad_lines(void **state)
{
        const char *t = HEADER "\n1145 : NVIDIA L40S-1B\n  broken line  \n";
        parse_creatable_fails(t, strlen(t), -EINVAL,
                              "parse creatable vGPU types line 4: \"broken line\"");

        t = "1145  :   \n";
        parse_creatable_fails(t, strlen(t), -EINVAL,
                              "parse creatable vGPU types line 1: \"1145  :\"");

        t = HEADER "ID :\n";
        parse_creatable_fails(t, strlen(t), -EINVAL, "parse creatable vGPU types line 2: \"ID :\"");

        /* A NUL byte inside a line is shown escaped. */
        static const char nul[] = "1145 : NVIDIA\0L40S-1B\n";
        parse_creatable_fails(nul, sizeof nul - 1, -EINVAL,
                              "parse creatable vGPU types line 1: \"1145 : NVIDIA\\x00L40S-1B\"");
}

/* DISC-11, DISC-13 */
static void test_creatable_bad_ids(void **state)
{
        static const struct {
                const char *text, *message;
        } cases[] = {
            {"abc : NVIDIA L40S-1B", "parse vGPU type ID \"abc\": not a decimal number"},
            {"0 : NVIDIA L40S-1B", "parse vGPU type ID \"0\": out of range 1..4294967295"},
            {"4294967296 : NVIDIA L40S-1B",
             "parse vGPU type ID \"4294967296\": out of range 1..4294967295"},
            {"99999999999999999999999 : X",
             "parse vGPU type ID \"99999999999999999999999\": out of range 1..4294967295"},
            {"-1 : NVIDIA L40S-1B", "parse vGPU type ID \"-1\": not a decimal number"},
            {"+5 : NVIDIA L40S-1B", "parse vGPU type ID \"+5\": not a decimal number"},
            {"0x10 : NVIDIA L40S-1B", "parse vGPU type ID \"0x10\": not a decimal number"},
            {": NVIDIA L40S-1B", "parse vGPU type ID \"\": not a decimal number"},
            {"11 45 : NVIDIA L40S-1B", "parse vGPU type ID \"11 45\": not a decimal number"},
            /* DISC-13: there is no name-first variant. */
            {"vGPU Name : ID\nNVIDIA L40S-1B : 1145",
             "parse vGPU type ID \"vGPU Name\": not a decimal number"},
            {"NVIDIA L40S-1B : 1145",
             "parse vGPU type ID \"NVIDIA L40S-1B\": not a decimal number"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                parse_creatable_fails(cases[i].text, strlen(cases[i].text), -EINVAL,
                                      cases[i].message);

        GpuProfile *p;
        size_t n;
        parse_creatable_ok("4294967295 : NVIDIA L40S-1B\n", &p, &n);
        assert_int_equal(n, 1);
        assert_int_equal(p[0].type_id, UINT32_MAX);
        gpu_profiles_free(p, n);
}

/* DISC-12 */
static void test_creatable_duplicates(void **state)
{
        const char *t = HEADER "1145 : NVIDIA L40S-1B\n1147 : NVIDIA L40S-1Q\n1145 : NVIDIA X-1B\n";
        parse_creatable_fails(t, strlen(t), -EINVAL,
                              "parse creatable vGPU types line 4: duplicate vGPU type ID 1145");

        /* The first problem in the file wins, as a line-by-line reader would report it. */
        t = "1 : A-1Q\n1 : B-1Q\nbroken\n";
        parse_creatable_fails(t, strlen(t), -EINVAL,
                              "parse creatable vGPU types line 2: duplicate vGPU type ID 1");
        t = "1 : A-1Q\nbroken\n1 : B-1Q\n";
        parse_creatable_fails(t, strlen(t), -EINVAL,
                              "parse creatable vGPU types line 2: \"broken\"");
        t = "1 : A-1Q\n2 : B-1Q\n3 : B-1Q\n2 : C-1Q\n";
        parse_creatable_fails(
            t, strlen(t), -EINVAL,
            "parse creatable vGPU types line 3: duplicate vGPU type name \"B-1Q\"");
        t = "1 : A-1Q\n2 : B-1Q\n2 : A-1Q\n";
        parse_creatable_fails(t, strlen(t), -EINVAL,
                              "parse creatable vGPU types line 3: duplicate vGPU type ID 2");
}

/* DISC-13 */
static void test_creatable_limits(void **state)
{
        /* Exactly 64 KiB is accepted, one byte more is -EFBIG. */
        _cleanup_free_ char *big = malloc(GPU_CREATABLE_TYPES_MAX + 2);
        assert_non_null(big);
        memset(big, '\n', GPU_CREATABLE_TYPES_MAX + 1);
        memcpy(big, "1145 : NVIDIA L40S-1B", 21);
        big[GPU_CREATABLE_TYPES_MAX + 1] = 0;
        GpuProfile *p;
        size_t n;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(gpu_parse_creatable_types(big, GPU_CREATABLE_TYPES_MAX, &p, &n, &error),
                         0);
        assert_int_equal(n, 1);
        gpu_profiles_free(p, n);
        parse_creatable_fails(big, GPU_CREATABLE_TYPES_MAX + 1, -EFBIG,
                              "creatable vGPU types exceed 65536 bytes");

        /* Names: 1..127 printable ASCII bytes. */
        char line[200], name[130];
        memset(name, 'N', 127);
        name[127] = 0;
        snprintf(line, sizeof line, "9 : %s\n", name);
        parse_creatable_ok(line, &p, &n);
        assert_int_equal(strlen(p[0].name), 127);
        assert_int_equal(p[0].framebuffer_mib, 0);
        gpu_profiles_free(p, n);

        name[127] = 'N';
        name[128] = 0;
        snprintf(line, sizeof line, "9 : %s\n", name);
        char message[300];
        snprintf(message, sizeof message,
                 "parse creatable vGPU types line 1: invalid vGPU type name \"%s\"", name);
        parse_creatable_fails(line, strlen(line), -EINVAL, message);

        const char *t = "9 : NVIDIA\x01L40S\n";
        parse_creatable_fails(t, strlen(t), -EINVAL,
                              "parse creatable vGPU types line 1: invalid vGPU type name "
                              "\"NVIDIA\\x01L40S\"");
        t = "9 : NVIDIA \"L40S\"\xc3\xa9\n";
        parse_creatable_fails(t, strlen(t), -EINVAL,
                              "parse creatable vGPU types line 1: invalid vGPU type name "
                              "\"NVIDIA \\\"L40S\\\"\\xc3\\xa9\"");

        /* Thousands of lines stay fast and are all checked for duplicates. */
        _cleanup_free_ char *many = NULL;
        for (unsigned i = 1; i <= 3000; i++)
                assert_int_equal(strextend(&many, "%u : T-%uQ\n", i, i), 0);
        assert_int_equal(strextend(&many, "2999 : again\n"), 0);
        parse_creatable_fails(many, strlen(many), -EINVAL,
                              "parse creatable vGPU types line 3001: duplicate vGPU type ID 2999");
}

/* DISC-5 */
static void test_current_type(void **state)
{
        static const struct {
                const char *text;
                uint32_t want;
        } good[] = {
            {"0", 0}, {"0\n", 0}, {"1148\n", 1148}, {"4294967295", UINT32_MAX}, {"000042\n", 42},
        };
        for (size_t i = 0; i < ELEMENTSOF(good); i++) {
                uint32_t v = 7;
                assert_int_equal(
                    gpu_parse_current_type(good[i].text, strlen(good[i].text), &v, NULL), 0);
                assert_int_equal(v, good[i].want);
        }

        static const struct {
                const char *text, *message;
        } bad[] = {
            {"", "invalid current vGPU type \"\""},
            {"\n", "invalid current vGPU type \"\""},
            {"garbage\n", "invalid current vGPU type \"garbage\""},
            {"12\n\n", "invalid current vGPU type \"12\\x0a\""},
            {" 12", "invalid current vGPU type \" 12\""},
            {"12 ", "invalid current vGPU type \"12 \""},
            {"-1", "invalid current vGPU type \"-1\""},
            {"4294967296", "invalid current vGPU type \"4294967296\""},
            {"9999999999999999", "invalid current vGPU type \"9999999999999999\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                uint32_t v = 7;
                _cleanup_free_ char *error = NULL;
                assert_int_equal(
                    gpu_parse_current_type(bad[i].text, strlen(bad[i].text), &v, &error), -EINVAL);
                assert_int_equal(v, 7);
                assert_string_equal(error, bad[i].message);
        }

        /* At most 16 bytes. */
        uint32_t v = 7;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(gpu_parse_current_type("000000000000001\n", 16, &v, NULL), 0);
        assert_int_equal(v, 1);
        assert_int_equal(gpu_parse_current_type("0000000000000001\n", 17, &v, &error), -EFBIG);
        assert_string_equal(error, "current vGPU type exceeds 16 bytes");
        free(error);
        error = NULL;
        assert_int_equal(gpu_parse_current_type("1\0", 2, &v, &error), -EINVAL);
        assert_string_equal(error, "invalid current vGPU type \"1\\x00\"");
}

/* DISC-14 */
static void test_profile_framebuffer(void **state)
{
        static const struct {
                const char *name;
                uint64_t mib;
        } cases[] = {
            {"NVIDIA L40S-48Q", 49152},
            {"NVIDIA L40S-1B", 1024},
            {"NVIDIA L40S-2A", 2048},
            {"NVIDIA H200X-1-18C", 18432},
            {"NVIDIA A40-2Q", 2048},
            {"GRID T4-2Q-extra", 2048}, /* the last size letter is the Q */
            {"NVIDIA L40S-Q", 0},
            {"NVIDIA L40S-2", 0},
            {"NVIDIA L40S-x2Q", 0},
            {"NVIDIA L40S 2Q", 0},
            {"NVIDIA", 0},
            {"Q", 0},
            {"-2Q", 2048},
            {"", 0},
            {"X-2q", 0},
            {"X-99999999999999999999Q", 0},
            {"X-18014398509481983Q", UINT64_C(18014398509481983) * 1024},
            {"X-18014398509481984Q", 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                if (gpu_profile_framebuffer_mib(cases[i].name) != cases[i].mib)
                        fail_msg("%s: got %" PRIu64 ", want %" PRIu64, cases[i].name,
                                 gpu_profile_framebuffer_mib(cases[i].name), cases[i].mib);
        }
}

/* DISC-16 */
static void test_mdev_description(void **state)
{
        static const struct {
                const char *text;
                uint64_t mib;
        } cases[] = {
            {"num_heads=4, frl_config=60, framebuffer=2048M, max_resolution=5120x2880, "
             "max_instance=24",
             2048},
            {"framebuffer=1024M", 1024},
            {"framebuffer=1024M\n", 1024},
            {"a=1,framebuffer=512M,framebuffer=1024M", 512},
            {"framebuffer=abcM, framebuffer=4096M", 4096}, /* the first well-formed token */
            {"framebuffer=2048", 0},
            {"framebuffer=2048MB", 0},
            {"myframebuffer=2048M", 0},
            {"framebuffer=M", 0},
            {"framebuffer=99999999999999999999999M", 0},
            {"", 0},
            {"num_heads=4", 0},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                if (gpu_mdev_description_framebuffer_mib(cases[i].text) != cases[i].mib)
                        fail_msg("\"%s\": got %" PRIu64, cases[i].text,
                                 gpu_mdev_description_framebuffer_mib(cases[i].text));
}

/* DISC-17 */
static void test_profile_model(void **state)
{
        char *m = NULL;
        assert_int_equal(gpu_profile_model("NVIDIA L40S-2Q", &m), 0);
        assert_string_equal(m, "NVIDIA L40S");
        free(m);
        assert_int_equal(gpu_profile_model("NVIDIA H200X-1-18C", &m), 0);
        assert_string_equal(m, "NVIDIA H200X-1");
        free(m);
        m = NULL;
        assert_int_equal(gpu_profile_model("NVIDIA", &m), -EINVAL);
        assert_int_equal(gpu_profile_model("-2Q", &m), -EINVAL);
        assert_null(m);
}

/* DISC-22 */
static void test_framework_strings(void **state)
{
        GpuFramework fw = GPU_FRAMEWORK_NONE;
        assert_int_equal(gpu_framework_from_string("mdev", &fw, NULL), 0);
        assert_int_equal(fw, GPU_FRAMEWORK_MDEV);
        assert_int_equal(gpu_framework_from_string("vendor-vfio", &fw, NULL), 0);
        assert_int_equal(fw, GPU_FRAMEWORK_VENDOR_VFIO);
        assert_string_equal(gpu_framework_to_string(GPU_FRAMEWORK_MDEV), "mdev");
        assert_string_equal(gpu_framework_to_string(GPU_FRAMEWORK_VENDOR_VFIO), "vendor-vfio");
        assert_string_equal(gpu_framework_to_string(GPU_FRAMEWORK_NONE), "none");

        static const char *const bad[] = {"none", "", "MDEV", "vendor_vfio", "vfio"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++) {
                _cleanup_free_ char *error = NULL, *want = NULL;
                fw = GPU_FRAMEWORK_MDEV;
                assert_int_equal(gpu_framework_from_string(bad[i], &fw, &error), -EINVAL);
                assert_int_equal(fw, GPU_FRAMEWORK_MDEV);
                assert_int_equal(strprintf(&want, "unknown vGPU framework \"%s\"", bad[i]), 0);
                assert_string_equal(error, want);
        }
        _cleanup_free_ char *error = NULL;
        assert_int_equal(gpu_framework_from_string("x\"\n", &fw, &error), -EINVAL);
        assert_string_equal(error, "unknown vGPU framework \"x\\\"\\x0a\"");
}

/* DISC-13 */
static void test_profile_name_validity(void **state)
{
        assert_true(gpu_profile_name_is_valid("NVIDIA L40S-2Q"));
        assert_true(gpu_profile_name_is_valid("~"));
        assert_false(gpu_profile_name_is_valid(""));
        assert_false(gpu_profile_name_is_valid("tab\there"));
        assert_false(gpu_profile_name_is_valid("del\x7f"));
}

/* ---- discovery: vendor VFIO ---------------------------------------------------------------- */

/* DISC-4, DISC-5, DISC-8, DISC-17, DISC-18, DISC-19, SIM-2, SIM-4, SIM-8 */
static void test_discover_l40s(void **state)
{
        Fixture *f = *state;
        mkhost(f, "l40s-vfio");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);

        assert_int_equal(h->framework, GPU_FRAMEWORK_VENDOR_VFIO);
        assert_null(h->warnings);
        assert_int_equal(h->n_mdevs, 0);

        /* Both PFs carry nvidia/ too, but have no physfn: they are GPUs, not VFs (DISC-4). */
        assert_int_equal(h->n_gpus, 2);
        assert_int_equal(h->n_vfs, 64);
        assert_string_equal(h->vfs[0].address, "0000:e3:00.4");
        assert_string_equal(h->vfs[31].address, "0000:e3:04.3");
        assert_string_equal(h->vfs[32].address, "0000:e4:00.4");
        assert_string_equal(h->vfs[63].address, "0000:e4:04.3");
        for (size_t i = 1; i < h->n_vfs; i++)
                assert_true(strcmp(h->vfs[i - 1].address, h->vfs[i].address) < 0);
        assert_null(gpu_host_find_vf(h, "0000:e3:00.0"));
        assert_null(gpu_host_find_vf(h, "0000:00:00.0"));

        const Gpu *a = gpu_host_find_gpu(h, "0000:e3:00.0");
        const Gpu *b = gpu_host_find_gpu(h, "0000:e4:00.0");
        assert_ptr_equal(a, &h->gpus[0]);
        assert_ptr_equal(b, &h->gpus[1]);
        assert_null(gpu_host_find_gpu(h, "0000:e5:00.0"));
        assert_null(gpu_host_find_gpu(h, "not an address"));
        assert_int_equal(a->device_id, 0x26b9);
        assert_string_equal(a->model, "NVIDIA L40S");
        assert_string_equal(b->model, "NVIDIA L40S");
        assert_int_equal(a->catalog_source, GPU_CATALOG_SYSFS);

        /* Equal-size after three 2Q: the free VFs list only the 2 GiB types (SIM-8). */
        assert_int_equal(a->n_catalog, 3);
        assert_int_equal(a->catalog[0].type_id, 1146);
        assert_string_equal(a->catalog[0].name, "NVIDIA L40S-2B");
        assert_int_equal(a->catalog[1].type_id, 1148);
        assert_int_equal(a->catalog[2].type_id, 1158);
        for (size_t i = 0; i < a->n_catalog; i++)
                assert_int_equal(a->catalog[i].framebuffer_mib, 2048);
        assert_int_equal(b->n_catalog, 22);
        assert_int_equal(b->catalog[0].type_id, 1145);
        assert_int_equal(b->catalog[21].type_id, 1166);
        assert_string_equal(b->catalog[21].name, "NVIDIA L40S-48A");
        assert_int_equal(b->catalog[21].framebuffer_mib, 49152);

        const GpuVf *vf = gpu_host_find_vf(h, "0000:e3:00.6");
        assert_non_null(vf);
        assert_true(gpu_vf_is_readable(vf));
        assert_true(gpu_vf_is_configured(vf));
        assert_string_equal(vf->parent, "0000:e3:00.0");
        assert_int_equal(vf->current_type_id, 1148);
        assert_string_equal(vf->current_profile, "NVIDIA L40S-2Q");
        assert_int_equal(vf->n_creatable, 0);

        vf = gpu_host_find_vf(h, "0000:e3:00.7");
        assert_false(gpu_vf_is_configured(vf));
        assert_int_equal(vf->current_type_id, 0);
        assert_null(vf->current_profile);
        assert_int_equal(vf->n_creatable, 3);

        vf = gpu_host_find_vf(h, "0000:e4:02.1");
        assert_string_equal(vf->parent, "0000:e4:00.0");
        assert_int_equal(vf->n_creatable, 22);

        /* DISC-19: 4Q is no longer creatable on the first card, so only the second resolves it. */
        assert_null(gpu_find_profile(a, "NVIDIA L40S-4Q"));
        assert_int_equal(gpu_find_profile(b, "NVIDIA L40S-4Q")->type_id, 1150);
        assert_int_equal(gpu_find_profile(a, "NVIDIA L40S-2Q")->type_id, 1148);
        assert_null(gpu_find_profile_by_type_id(a, 1150));
        assert_null(gpu_find_profile_by_type_id(a, 0));

        /* DISC-18: the model's catalog is the union of its GPUs' catalogs. */
        GpuProfile *u;
        size_t n;
        assert_int_equal(gpu_host_model_catalog(h, "NVIDIA L40S", &u, &n), 0);
        assert_int_equal(n, 22);
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(u[i].type_id, 0);
                assert_true(u[i].framebuffer_mib > 0);
                if (i > 0)
                        assert_true(strcmp(u[i - 1].name, u[i].name) < 0);
        }
        gpu_profiles_free(u, n);
        assert_int_equal(gpu_host_model_catalog(h, "NVIDIA A40", &u, &n), 0);
        assert_int_equal(n, 0);
        gpu_profiles_free(u, n);
}

/* DISC-19 */
static void test_type_ids_are_card_local(void **state)
{
        Fixture *f = *state;
        tree_pf(f, "0000:e3:00.0", "0x26b9\n");
        tree_pf(f, "0000:e4:00.0", "0x26b9\n");
        tree_vendor_vf(f, "0000:e3:00.4", "0000:e3:00.0", "0\n", L40S_2GIB);
        /* The same profile under another ID on the other card, and an ID only it knows. */
        tree_vendor_vf(f, "0000:e4:00.4", "0000:e4:00.0", "0\n",
                       HEADER "2148 : NVIDIA L40S-2Q\n2999 : NVIDIA L40S-3Q\n");
        tree_vendor_vf(f, "0000:e3:00.5", "0000:e3:00.0", "2999\n", HEADER);
        tree_vendor_vf(f, "0000:e4:00.5", "0000:e4:00.0", "2999\n", HEADER);

        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        const Gpu *a = gpu_host_find_gpu(h, "0000:e3:00.0");
        const Gpu *b = gpu_host_find_gpu(h, "0000:e4:00.0");
        assert_int_equal(gpu_find_profile(a, "NVIDIA L40S-2Q")->type_id, 1148);
        assert_int_equal(gpu_find_profile(b, "NVIDIA L40S-2Q")->type_id, 2148);
        assert_null(gpu_find_profile(a, "NVIDIA L40S-3Q"));

        /* An ID read on one card never names a profile on another. */
        assert_null(gpu_host_find_vf(h, "0000:e3:00.5")->current_profile);
        assert_string_equal(gpu_host_find_vf(h, "0000:e4:00.5")->current_profile, "NVIDIA L40S-3Q");
}

/* DISC-10, DISC-17 */
static void test_full_card(void **state)
{
        Fixture *f = *state;
        /* One 48Q fills the card: every VF lists only the header, the catalog is empty. */
        tree_pf(f, "0000:e3:00.0", "0x26b9\n");
        tree_vendor_vf(f, "0000:e3:00.4", "0000:e3:00.0", "1156\n", HEADER);
        tree_vendor_vf(f, "0000:e3:00.5", "0000:e3:00.0", "0\n", HEADER);

        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->framework, GPU_FRAMEWORK_VENDOR_VFIO);
        assert_int_equal(h->n_gpus, 1);
        assert_int_equal(h->gpus[0].n_catalog, 0);
        assert_string_equal(h->gpus[0].model, "10de:26b9");
        assert_int_equal(h->vfs[0].current_type_id, 1156);
        assert_null(h->vfs[0].current_profile);
        assert_null(h->warnings);
}

/* DISC-8, DISC-17 */
static void test_unknown_device_id(void **state)
{
        Fixture *f = *state;
        static const struct {
                const char *device; /* NULL: no file */
                const char *warning;
        } cases[] = {
            {NULL, "unknown device ID of GPU: 0000:e3:00.0: No such file or directory"},
            {"0x26B9\n", "unknown device ID of GPU: 0000:e3:00.0: Invalid argument"},
            {"26b9\n", "unknown device ID of GPU: 0000:e3:00.0: Invalid argument"},
            {"0x26b9a\n", "unknown device ID of GPU: 0000:e3:00.0: Invalid argument"},
        };
        tree_vendor_vf(f, "0000:e3:00.4", "0000:e3:00.0", "0\n", HEADER);
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                if (cases[i].device)
                        tree_pf(f, "0000:e3:00.0", cases[i].device);
                _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
                assert_int_equal(h->gpus[0].device_id, 0);
                assert_string_equal(h->gpus[0].model, "10de:unknown");
                assert_has_warning(h, cases[i].warning);
        }
        assert_log_has(f, "<4>unknown device ID of GPU gpu=0000:e3:00.0 "
                          "error=\"No such file or directory\"\n");
}

/* DISC-8 */
static void test_any_domain(void **state)
{
        Fixture *f = *state;
        mkhost(f, "domain-0001");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->framework, GPU_FRAMEWORK_VENDOR_VFIO);
        assert_int_equal(h->n_gpus, 1);
        assert_string_equal(h->gpus[0].address, "0001:c8:00.0");
        assert_int_equal(h->n_vfs, 4);
        assert_string_equal(h->vfs[0].address, "0001:c8:00.4");
        assert_string_equal(h->vfs[0].parent, "0001:c8:00.0");
        assert_int_equal(h->vfs[0].current_type_id, 1157);
        assert_string_equal(h->vfs[0].current_profile, "NVIDIA L40S-1A");
        assert_int_equal(h->gpus[0].n_catalog, 3);
}

/* DISC-8 */
static void test_invalid_addresses(void **state)
{
        Fixture *f = *state;
        tree_pf(f, "0000:e3:00.0", "0x26b9\n");
        tree_vendor_vf(f, "0000:e3:00.4", "0000:e3:00.0", "0\n", L40S_2GIB);
        tree_vendor_vf(f, "0000:E3:00.5", "0000:e3:00.0", "0\n", L40S_2GIB);
        tree_vendor_vf(f, "e3:00.6", "0000:e3:00.0", "0\n", L40S_2GIB);

        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->n_vfs, 1);
        assert_string_equal(h->vfs[0].address, "0000:e3:00.4");
        assert_has_warning(h, "skipping vendor VFIO VF with invalid PCI address: \"0000:E3:00.5\"");
        assert_has_warning(h, "skipping vendor VFIO VF with invalid PCI address: \"e3:00.6\"");
        assert_log_has(f, "<4>skipping vendor VFIO VF with invalid PCI address "
                          "entry=0000:E3:00.5\n");
}

/* DISC-6, DISC-5 */
static void test_unreadable_vf(void **state)
{
        Fixture *f = *state;
        mkhost(f, "unreadable-vf");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);

        assert_int_equal(h->framework, GPU_FRAMEWORK_VENDOR_VFIO);
        assert_int_equal(h->n_vfs, 4);
        const GpuVf *bad = gpu_host_find_vf(h, "0000:e3:00.5");
        assert_false(gpu_vf_is_readable(bad));
        assert_false(gpu_vf_is_configured(bad));
        assert_string_equal(bad->error, "invalid current vGPU type \"garbage\"");
        assert_string_equal(bad->parent, "0000:e3:00.0");
        assert_int_equal(bad->n_creatable, 0);
        bad = gpu_host_find_vf(h, "0000:e3:00.6");
        assert_string_equal(bad->error, "read current vGPU type: Is a directory");
        assert_true(gpu_vf_is_readable(gpu_host_find_vf(h, "0000:e3:00.4")));
        assert_true(gpu_vf_is_readable(gpu_host_find_vf(h, "0000:e3:00.7")));

        assert_has_warning(h, "skipping unreadable vendor VFIO VFs: 0000:e3:00.5,0000:e3:00.6");
        assert_log_has(f, "<4>skipping unreadable vendor VFIO VFs vfs=0000:e3:00.5,0000:e3:00.6 "
                          "error=\"VF 0000:e3:00.5: invalid current vGPU type \\\"garbage\\\"; "
                          "VF 0000:e3:00.6: read current vGPU type: Is a directory\"\n");
        assert_int_equal(h->gpus[0].n_catalog, 22);
}

/* DISC-6, DISC-11, DISC-13 */
static void test_unreadable_reasons(void **state)
{
        Fixture *f = *state;
        tree_pf(f, "0000:e3:00.0", "0x26b9\n");
        tree_vendor_vf(f, "0000:e3:00.4", "0000:e3:00.0", "0\n", L40S_2GIB);

        /* physfn is not a link. */
        tree_vendor_vf(f, "0000:e3:00.5", "0000:e3:00.0", "0\n", L40S_2GIB);
        replace_by_file(f, "bus/pci/devices/0000:e3:00.5/physfn");
        /* physfn names something that is no PCI address. */
        tree_vendor_vf(f, "0000:e3:00.6", "bogus", "0\n", L40S_2GIB);
        /* current_vgpu_type missing, too long. */
        tree_vendor_vf(f, "0000:e3:00.7", "0000:e3:00.0", "0\n", L40S_2GIB);
        remove_path(f, "bus/pci/devices/0000:e3:00.7/nvidia/current_vgpu_type");
        tree_vendor_vf(f, "0000:e3:01.0", "0000:e3:00.0", "00000000000000001\n", L40S_2GIB);
        /* creatable_vgpu_types malformed, a directory, too large. */
        tree_vendor_vf(f, "0000:e3:01.1", "0000:e3:00.0", "0\n", HEADER "oops\n");
        tree_vendor_vf(f, "0000:e3:01.2", "0000:e3:00.0", "0\n", L40S_2GIB);
        remove_path(f, "bus/pci/devices/0000:e3:01.2/nvidia/creatable_vgpu_types");
        mkdirs(f, "bus/pci/devices/0000:e3:01.2/nvidia/creatable_vgpu_types");
        _cleanup_free_ char *big = malloc(GPU_CREATABLE_TYPES_MAX + 2);
        assert_non_null(big);
        memset(big, '\n', GPU_CREATABLE_TYPES_MAX + 1);
        big[GPU_CREATABLE_TYPES_MAX + 1] = 0;
        tree_vendor_vf(f, "0000:e3:01.3", "0000:e3:00.0", "0\n", big);
        /* Duplicates make the list unreadable too (DISC-12). */
        tree_vendor_vf(f, "0000:e3:01.4", "0000:e3:00.0", "0\n", L40S_2GIB "1146 : again\n");

        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        static const struct {
                const char *vf, *error;
        } cases[] = {
            {"0000:e3:00.5", "read physfn link: Invalid argument"},
            {"0000:e3:00.6", "invalid parent address \"bogus\""},
            {"0000:e3:00.7", "read current vGPU type: No such file or directory"},
            {"0000:e3:01.0", "read current vGPU type: File too large"},
            {"0000:e3:01.1", "parse creatable vGPU types line 2: \"oops\""},
            {"0000:e3:01.2", "read creatable vGPU types: Is a directory"},
            {"0000:e3:01.3", "read creatable vGPU types: File too large"},
            {"0000:e3:01.4", "parse creatable vGPU types line 5: duplicate vGPU type ID 1146"},
        };
        assert_int_equal(h->n_vfs, 1 + ELEMENTSOF(cases));
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                const GpuVf *vf = gpu_host_find_vf(h, cases[i].vf);
                assert_non_null(vf);
                assert_false(gpu_vf_is_readable(vf));
                assert_string_equal(vf->error, cases[i].error);
        }
        /* A VF whose parent cannot be read belongs to no GPU. */
        assert_string_equal(gpu_host_find_vf(h, "0000:e3:00.5")->parent, "");
        assert_string_equal(gpu_host_find_vf(h, "0000:e3:00.6")->parent, "");
        assert_string_equal(gpu_host_find_vf(h, "0000:e3:01.1")->parent, "0000:e3:00.0");
        assert_int_equal(h->n_gpus, 1);
        assert_int_equal(h->gpus[0].n_catalog, 3);
}

/* DISC-6 */
static void test_all_vfs_unreadable(void **state)
{
        Fixture *f = *state;
        mkhost(f, "vfs-unreadable");
        int r;
        _cleanup_free_ char *error = discover_error(f, NULL, &r);
        assert_int_equal(r, -EINVAL);
        assert_string_equal(error, "discover vendor VFIO VFs: VF 0000:e3:00.4: invalid current "
                                   "vGPU type \"garbage\"; VF 0000:e3:00.5: parse vGPU type ID "
                                   "\"NVIDIA L40S-1B\": not a decimal number");
        /* The error carries the story; no separate "skipping" warning is logged. */
        assert_null(strstr(log_text(f), "skipping"));

        /* With one VF readable again, the other is skipped and discovery succeeds. */
        put(f, "devices/pci0000:e3/0000:e3:00.4/nvidia/current_vgpu_type", "0\n");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->n_vfs, 2);
        assert_has_warning(h, "skipping unreadable vendor VFIO VFs: 0000:e3:00.5");
}

/* DISC-4 */
static void test_unreadable_pci_entry(void **state)
{
        Fixture *f = *state;
        tree_pf(f, "0000:e3:00.0", "0x26b9\n");
        tree_vendor_vf(f, "0000:e3:00.4", "0000:e3:00.0", "0\n", L40S_2GIB);
        /* An entry whose nvidia/ is a symlink loop cannot be classified: skipped, never used. */
        put_link(f, "bus/pci/devices/0000:e3:00.5/nvidia", "nvidia");

        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->n_vfs, 1);
        assert_has_warning(h, "skipping unreadable PCI device: \"0000:e3:00.5\": check "
                              "nvidia/creatable_vgpu_types: Too many levels of symbolic links");
}

/* DISC-7 */
static void test_no_gpu(void **state)
{
        Fixture *f = *state;

        /* Not even a bus/pci/devices directory. */
        _cleanup_gpu_host_ GpuHost *empty = discover_ok(f, NULL);
        assert_int_equal(empty->framework, GPU_FRAMEWORK_NONE);
        assert_int_equal(empty->n_gpus, 0);
        assert_int_equal(empty->n_vfs, 0);

        mkhost(f, "no-gpu");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->framework, GPU_FRAMEWORK_NONE);
        assert_int_equal(h->n_gpus, 0);
        assert_int_equal(h->n_vfs, 0);
        assert_null(h->warnings);

        /* A PF with nvidia/ but no VF is still no vGPU host (DISC-4). */
        tree_vendor_vf(f, "0000:65:00.0", "0000:00:00.0", "0\n", HEADER);
        remove_path(f, "bus/pci/devices/0000:65:00.0/physfn");
        _cleanup_gpu_host_ GpuHost *pf_only = discover_ok(f, NULL);
        assert_int_equal(pf_only->framework, GPU_FRAMEWORK_NONE);
}

/* DISC-7 */
static void test_vendor_listing_error(void **state)
{
        Fixture *f = *state;
        put(f, "bus/pci/devices", "");
        int r;
        _cleanup_free_ char *error = discover_error(f, NULL, &r);
        assert_int_equal(r, -ENOTDIR);
        assert_string_equal(error, "discover vendor VFIO VFs: list bus/pci/devices: Not a "
                                   "directory");
}

/* DISC-20, DISC-21 */
static void test_rediscovery(void **state)
{
        Fixture *f = *state;
        mkhost(f, "domain-0001");
        _cleanup_gpu_host_ GpuHost *before = discover_ok(f, NULL);
        assert_non_null(gpu_host_find_vf(before, "0001:c8:00.6"));

        /* An SR-IOV cycle took the VF away: the next discovery no longer lists it. */
        remove_path(f, "bus/pci/devices/0001:c8:00.6");
        remove_path(f, "devices/pci0001:c8/0001:c8:00.6");
        _cleanup_gpu_host_ GpuHost *after = discover_ok(f, NULL);
        assert_int_equal(after->n_vfs, before->n_vfs - 1);
        assert_null(gpu_host_find_vf(after, "0001:c8:00.6"));
        assert_non_null(gpu_host_find_vf(after, "0001:c8:00.7"));
        /* The earlier result is untouched: callers keep it until they swap. */
        assert_non_null(gpu_host_find_vf(before, "0001:c8:00.6"));

        /* A VF's state is re-read each time (DISC-20). */
        put(f, "devices/pci0001:c8/0001:c8:00.5/nvidia/current_vgpu_type", "1145\n");
        _cleanup_gpu_host_ GpuHost *again = discover_ok(f, NULL);
        assert_int_equal(gpu_host_find_vf(again, "0001:c8:00.5")->current_type_id, 1145);
        assert_string_equal(gpu_host_find_vf(again, "0001:c8:00.5")->current_profile,
                            "NVIDIA L40S-1B");
}

/* ---- discovery: mdev ----------------------------------------------------------------------- */

/* DISC-1, DISC-2, DISC-9, DISC-16, DISC-17, DISC-18, SIM-5, SIM-6 */
static void test_discover_mdev(void **state)
{
        Fixture *f = *state;
        mkhost(f, "mdev");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);

        assert_int_equal(h->framework, GPU_FRAMEWORK_MDEV);
        assert_null(h->warnings);
        assert_int_equal(h->n_gpus, 1);
        const Gpu *g = &h->gpus[0];
        assert_string_equal(g->address, "0000:41:00.0");
        assert_int_equal(g->device_id, 0x2235);
        assert_string_equal(g->model, "NVIDIA A40");
        assert_int_equal(g->n_catalog, 10);
        assert_string_equal(g->catalog[0].mdev_type, "nvidia-900");
        assert_string_equal(g->catalog[0].name, "NVIDIA A40-1Q");
        assert_int_equal(g->catalog[0].framebuffer_mib, 1024);
        assert_int_equal(g->catalog[0].type_id, 0);
        assert_string_equal(g->catalog[9].mdev_type, "nvidia-909");
        assert_int_equal(g->catalog[9].framebuffer_mib, 49152);
        assert_string_equal(gpu_find_profile(g, "NVIDIA A40-2Q")->mdev_type, "nvidia-901");

        assert_int_equal(h->n_vfs, 4);
        const GpuVf *vf = gpu_host_find_vf(h, "0000:41:00.5");
        assert_string_equal(vf->parent, "0000:41:00.0");
        assert_true(gpu_vf_is_configured(vf));
        assert_int_equal(strv_length(vf->mdev_uuids), 1);
        assert_string_equal(vf->mdev_uuids[0], "3b0c2f4e-8d1a-4c6b-9e2f-5a7d1c3e9b40");
        assert_string_equal(vf->current_profile, "NVIDIA A40-2Q");
        assert_int_equal(vf->n_creatable, 10);
        vf = gpu_host_find_vf(h, "0000:41:00.4");
        assert_false(gpu_vf_is_configured(vf));
        assert_null(vf->current_profile);

        assert_int_equal(h->n_mdevs, 1);
        assert_string_equal(h->mdevs[0].uuid, "3b0c2f4e-8d1a-4c6b-9e2f-5a7d1c3e9b40");
        assert_string_equal(h->mdevs[0].vf, "0000:41:00.5");
        assert_string_equal(h->mdevs[0].mdev_type, "nvidia-901");
        assert_string_equal(h->mdevs[0].profile, "NVIDIA A40-2Q");
}

/* DISC-1 */
static void test_mdev_before_vendor(void **state)
{
        Fixture *f = *state;
        /* A host with both: mdev VFs decide, and vendor VFs are not looked at. */
        mkhost(f, "mdev");
        tree_pf(f, "0000:e3:00.0", "0x26b9\n");
        tree_vendor_vf(f, "0000:e3:00.4", "0000:e3:00.0", "0\n", L40S_2GIB);
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->framework, GPU_FRAMEWORK_MDEV);
        assert_null(gpu_host_find_vf(h, "0000:e3:00.4"));
        assert_int_equal(h->n_gpus, 1);
}

/* DISC-1 */
static void test_mdev_error_stops_discovery(void **state)
{
        Fixture *f = *state;
        /* class/mdev_bus is a file; the host's vendor VFs are fine but must not be used. */
        mkhost(f, "mdev-bus-error");
        int r;
        _cleanup_free_ char *error = discover_error(f, NULL, &r);
        assert_int_equal(r, -ENOTDIR);
        assert_string_equal(error, "discover mdev VFs: list class/mdev_bus: Not a directory");

        /*
         * Vendor detection is not attempted: with bus/pci/devices broken as well, the error is
         * still the mdev one.
         */
        remove_path(f, "bus/pci/devices");
        put(f, "bus/pci/devices", "");
        free(error);
        error = discover_error(f, NULL, &r);
        assert_string_equal(error, "discover mdev VFs: list class/mdev_bus: Not a directory");

        /* A dangling class/mdev_bus link counts as missing (DISC-2). */
        remove_path(f, "class/mdev_bus");
        put_link(f, "class/mdev_bus", "../nowhere");
        free(error);
        error = discover_error(f, NULL, &r);
        assert_string_equal(error,
                            "discover vendor VFIO VFs: list bus/pci/devices: Not a directory");
}

/* DISC-2 */
static void test_typeless_mdev_bus(void **state)
{
        Fixture *f = *state;
        mkhost(f, "vfio-typeless-mdev");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->framework, GPU_FRAMEWORK_VENDOR_VFIO);
        assert_int_equal(h->n_vfs, 4);
        assert_int_equal(h->n_gpus, 1);
        assert_null(h->warnings);
        assert_int_equal(h->n_mdevs, 0);

        /* A dangling entry is typeless too. */
        put_link(f, "class/mdev_bus/0000:c1:00.6", "../../devices/nowhere");
        _cleanup_gpu_host_ GpuHost *again = discover_ok(f, NULL);
        assert_int_equal(again->framework, GPU_FRAMEWORK_VENDOR_VFIO);
}

/* DISC-3 */
static void test_mdev_entry_unreadable(void **state)
{
        Fixture *f = *state;
        mkhost(f, "mdev");
        replace_by_file(f, "devices/pci0000:41/0000:41:00.6/mdev_supported_types");

        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->framework, GPU_FRAMEWORK_MDEV);
        assert_int_equal(h->n_vfs, 3);
        assert_null(gpu_host_find_vf(h, "0000:41:00.6"));
        assert_has_warning(h, "skipping unreadable mdev parents: VF 0000:41:00.6: list "
                              "mdev_supported_types: Not a directory");
        assert_log_has(f, "<4>skipping unreadable mdev parents vfs=0000:41:00.6 error=\"VF "
                          "0000:41:00.6: list mdev_supported_types: Not a directory\"\n");

        /* A type whose name or description cannot be read makes its parent unreadable too. */
        remove_path(f, "devices/pci0000:41/0000:41:00.7/mdev_supported_types/nvidia-903/name");
        mkdirs(f, "devices/pci0000:41/0000:41:00.7/mdev_supported_types/nvidia-903/name");
        remove_path(f, "devices/pci0000:41/0000:41:00.4/mdev_supported_types/nvidia-901/"
                       "description");
        mkdirs(f, "devices/pci0000:41/0000:41:00.4/mdev_supported_types/nvidia-901/description");
        _cleanup_gpu_host_ GpuHost *h2 = discover_ok(f, NULL);
        assert_int_equal(h2->n_vfs, 1);
        assert_has_warning(h2, "skipping unreadable mdev parents: VF 0000:41:00.4: read mdev "
                               "type nvidia-901 description: Is a directory; VF 0000:41:00.6: "
                               "list mdev_supported_types: Not a directory; VF 0000:41:00.7: "
                               "read mdev type nvidia-903 name: Is a directory");
}

/* DISC-3 */
static void test_mdev_all_unreadable(void **state)
{
        Fixture *f = *state;
        mkhost(f, "mdev");
        static const char *const vfs[] = {"0000:41:00.4", "0000:41:00.5", "0000:41:00.6",
                                          "0000:41:00.7"};
        for (size_t i = 0; i < ELEMENTSOF(vfs); i++) {
                _cleanup_free_ char *rel = NULL;
                assert_int_equal(
                    strprintf(&rel, "devices/pci0000:41/%s/mdev_supported_types", vfs[i]), 0);
                replace_by_file(f, rel);
        }
        int r;
        _cleanup_free_ char *error = discover_error(f, NULL, &r);
        assert_int_equal(r, -ENOTDIR);
        assert_string_equal(error,
                            "discover mdev VFs: VF 0000:41:00.4: list mdev_supported_types: Not "
                            "a directory; VF 0000:41:00.5: list mdev_supported_types: Not a "
                            "directory; VF 0000:41:00.6: list mdev_supported_types: Not a "
                            "directory; VF 0000:41:00.7: list mdev_supported_types: Not a "
                            "directory");

        /*
         * Not every entry is unreadable once a typeless one joins: the unreadable ones are
         * skipped with a warning and, without mdev VFs, vendor detection runs.
         */
        mkdirs(f, "class/mdev_bus/0000:41:01.0/mdev_supported_types");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->framework, GPU_FRAMEWORK_NONE);
        assert_non_null(h->warnings);
}

/* DISC-8, DISC-9 */
static void test_active_mdev_details(void **state)
{
        Fixture *f = *state;
        static const char *const types[] = {
            "nvidia-901", "NVIDIA A40-2Q\n", "framebuffer=2048M", "nvidia-902", NULL,
            NULL, /* no name, no description */
            NULL,
        };
        /* A VF in domain 0002 whose PF sits two bridges up. */
        tree_mdev_vf(f, "0002:11:00.4", "0002:11:00.0", types);
        tree_pf(f, "0002:11:00.0", "0x2235\n");
        /* An mdev bus entry with a name that is no PCI address. */
        tree_mdev_vf(f, "bogus", NULL, types);

        const char *ok = "7d4f0e6a-1b2c-4d3e-8f90-a1b2c3d4e5f6";
        const char *named = "0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9";
        /* The parent VF is the component just before the UUID, not the PF further up. */
        put_link(f,
                 "devices/pci0002:10/0002:10:01.0/0002:11:00.4/"
                 "7d4f0e6a-1b2c-4d3e-8f90-a1b2c3d4e5f6/mdev_type",
                 "../../../../../class/mdev_bus/0002:11:00.4/mdev_supported_types/nvidia-902");
        put_link(f, "bus/mdev/devices/7d4f0e6a-1b2c-4d3e-8f90-a1b2c3d4e5f6",
                 "../../../devices/pci0002:10/0002:10:01.0/0002:11:00.4/"
                 "7d4f0e6a-1b2c-4d3e-8f90-a1b2c3d4e5f6");
        put_link(f,
                 "devices/pci0002:10/0002:11:00.4/0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9/mdev_type",
                 "../mdev_supported_types/nvidia-901");
        put_link(f, "bus/mdev/devices/0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9",
                 "../../../devices/pci0002:10/0002:11:00.4/0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9");
        /* Skipped with warnings: a bad UUID, no parent in the target, an unreadable type. */
        mkdirs(f, "bus/mdev/devices/NOT-A-UUID");
        put_link(f, "bus/mdev/devices/11111111-2222-4333-8444-555555555555",
                 "../../../devices/virtual/11111111-2222-4333-8444-555555555555");
        mkdirs(f, "bus/mdev/devices/22222222-2222-4333-8444-555555555555");
        mkdirs(f, "bus/mdev/devices/33333333-2222-4333-8444-555555555555");

        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->framework, GPU_FRAMEWORK_MDEV);
        assert_int_equal(h->n_vfs, 1);
        const GpuVf *vf = &h->vfs[0];
        assert_string_equal(vf->address, "0002:11:00.4");
        assert_string_equal(vf->parent, "0002:11:00.0");
        assert_int_equal(vf->n_creatable, 2);
        /* The second type has no name file: its type string stands in, size unknown. */
        assert_string_equal(vf->creatable[1].name, "nvidia-902");
        assert_int_equal(vf->creatable[1].framebuffer_mib, 0);

        assert_int_equal(h->n_mdevs, 2);
        assert_string_equal(h->mdevs[0].uuid, named);
        assert_string_equal(h->mdevs[0].vf, "0002:11:00.4");
        assert_string_equal(h->mdevs[0].profile, "NVIDIA A40-2Q");
        assert_string_equal(h->mdevs[1].uuid, ok);
        assert_string_equal(h->mdevs[1].mdev_type, "nvidia-902");
        assert_string_equal(h->mdevs[1].profile, "nvidia-902");
        assert_int_equal(strv_length(vf->mdev_uuids), 2);
        assert_string_equal(vf->current_profile, "NVIDIA A40-2Q");

        assert_has_warning(h, "skipping mdev parent with invalid PCI address: \"bogus\"");
        assert_has_warning(h, "skipping mdev with invalid UUID: \"NOT-A-UUID\"");
        assert_has_warning(h, "skipping mdev without a parent VF: "
                              "11111111-2222-4333-8444-555555555555: "
                              "../../../devices/virtual/11111111-2222-4333-8444-555555555555");
        assert_has_warning(h, "skipping unreadable mdev: 22222222-2222-4333-8444-555555555555: "
                              "Invalid argument");
        assert_log_has(f, "<4>skipping mdev with invalid UUID entry=NOT-A-UUID\n");

        /* A target whose component before the UUID is no VF address names no parent. */
        _cleanup_gpu_host_ GpuHost *h2 = NULL;
        remove_path(f, "bus/mdev/devices/33333333-2222-4333-8444-555555555555");
        put_link(f, "bus/mdev/devices/33333333-2222-4333-8444-555555555555",
                 "../../../devices/0002:11:00.4/x/33333333-2222-4333-8444-555555555555");
        h2 = discover_ok(f, NULL);
        assert_has_warning(h2, "skipping mdev without a parent VF: "
                               "33333333-2222-4333-8444-555555555555: "
                               "../../../devices/0002:11:00.4/x/"
                               "33333333-2222-4333-8444-555555555555");

        /* An mdev whose type link is missing is skipped too. */
        remove_path(f, "devices/pci0002:10/0002:11:00.4/0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9/"
                       "mdev_type");
        _cleanup_gpu_host_ GpuHost *h3 = discover_ok(f, NULL);
        assert_int_equal(h3->n_mdevs, 1);
        assert_has_warning(h3, "skipping mdev with unreadable type: "
                               "0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9: No such file or directory");
}

/* DISC-8 (a card without SR-IOV is its own mdev parent) */
static void test_mdev_parent_without_physfn(void **state)
{
        Fixture *f = *state;
        static const char *const types[] = {"nvidia-222", "GRID T4-2Q\n",
                                            "num_heads=4, framebuffer=2048M", NULL};
        tree_mdev_vf(f, "0000:3b:00.0", NULL, types);
        tree_pf(f, "0000:3b:00.0", "0x1eb8\n");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->framework, GPU_FRAMEWORK_MDEV);
        assert_string_equal(h->vfs[0].parent, "0000:3b:00.0");
        assert_string_equal(h->gpus[0].address, "0000:3b:00.0");
        assert_string_equal(h->gpus[0].model, "GRID T4");

        /* A physfn that is not a link makes the entry unreadable (DISC-3). */
        put(f, "class/mdev_bus/0000:3b:00.0/physfn", "");
        int r;
        _cleanup_free_ char *error = discover_error(f, NULL, &r);
        assert_string_equal(
            error, "discover mdev VFs: VF 0000:3b:00.0: read physfn link: Invalid argument");
}

/* DISC-9 */
static void test_mdev_listing_error(void **state)
{
        Fixture *f = *state;
        mkhost(f, "mdev");
        remove_path(f, "bus/mdev/devices");
        put(f, "bus/mdev/devices", "");
        int r;
        _cleanup_free_ char *error = discover_error(f, NULL, &r);
        assert_string_equal(error, "discover mdev VFs: list bus/mdev/devices: Not a directory");

        /* No bus/mdev/devices at all: no active mdevs. */
        remove_path(f, "bus/mdev");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        assert_int_equal(h->n_mdevs, 0);
        assert_null(h->vfs[1].mdev_uuids);
}

/* ---- the NVML seam (DISC-15, DISC-17, DISC-18) --------------------------------------------- */

typedef struct FakeNvml {
        const char *pf;   /* NVML answers for this PF only */
        int usable;       /* what usable() answers for it */
        const char *name; /* device name; NULL fails with name_error */
        int name_error;
        const GpuNvmlType *types; /* supported types; NULL fails with types_error */
        size_t n_types;
        int types_error;
        unsigned calls;
} FakeNvml;

static int fake_usable(void *userdata, const char *pf)
{
        FakeNvml *n = userdata;
        n->calls++;
        return streq(pf, n->pf) ? n->usable : 0;
}

static int fake_device_name(void *userdata, const char *pf, char **ret)
{
        FakeNvml *n = userdata;
        assert_string_equal(pf, n->pf); /* asked only for GPUs it said it can answer */
        if (!n->name)
                return n->name_error;
        *ret = strdup(n->name);
        return *ret ? 0 : -ENOMEM;
}

static int fake_supported_types(void *userdata, const char *pf, GpuNvmlType **ret, size_t *ret_n)
{
        FakeNvml *n = userdata;
        assert_string_equal(pf, n->pf);
        if (!n->types)
                return n->types_error;
        GpuNvmlType *t = calloc(n->n_types ? n->n_types : 1, sizeof *t);
        assert_non_null(t);
        for (size_t i = 0; i < n->n_types; i++) {
                t[i] = n->types[i];
                t[i].name = n->types[i].name ? strdup(n->types[i].name) : NULL;
        }
        *ret = t;
        *ret_n = n->n_types;
        return 0;
}

#define MIB (UINT64_C(1024) * 1024)

static const GpuNvmlType nvml_types[] = {
    {1166, "NVIDIA L40S-48A", 48 * 1024 * MIB},
    {1145, "NVIDIA L40S-1B", 1024 * MIB},
    /* A known name-derived size wins over NVML's figure (DISC-15). */
    {1147, "NVIDIA L40S-1Q", 999 * MIB},
    /* An unknown one is filled from NVML. */
    {1200, "NVIDIA L40S-special", 5 * 1024 * MIB},
    {1157, "NVIDIA L40S-1A", 1024 * MIB},
};

/* DISC-15, DISC-17, DISC-18, DISC-19 */
static void test_nvml_branch(void **state)
{
        Fixture *f = *state;
        mkhost(f, "domain-0001");
        tree_pf(f, "0002:c8:00.0", "0x26b9\n");
        tree_vendor_vf(f, "0002:c8:00.4", "0002:c8:00.0", "0\n", L40S_2GIB);

        FakeNvml fake = {
            .pf = "0001:c8:00.0",
            .usable = 1,
            .name = "NVIDIA L40S PCIe",
            .types = nvml_types,
            .n_types = ELEMENTSOF(nvml_types),
        };
        GpuNvml nvml = {&fake, fake_usable, fake_device_name, fake_supported_types};
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, &nvml);
        assert_null(h->warnings);
        assert_int_equal(h->n_gpus, 2);

        const Gpu *g = gpu_host_find_gpu(h, "0001:c8:00.0");
        assert_string_equal(g->model, "NVIDIA L40S PCIe");
        assert_int_equal(g->catalog_source, GPU_CATALOG_NVML);
        /* NVML's list, not the three the VFs show, sorted by type ID. */
        assert_int_equal(g->n_catalog, 5);
        assert_int_equal(g->catalog[0].type_id, 1145);
        assert_int_equal(g->catalog[1].type_id, 1147);
        assert_int_equal(g->catalog[1].framebuffer_mib, 1024);
        assert_int_equal(g->catalog[2].type_id, 1157);
        assert_int_equal(g->catalog[3].type_id, 1166);
        assert_int_equal(g->catalog[3].framebuffer_mib, 49152);
        assert_int_equal(g->catalog[4].type_id, 1200);
        assert_string_equal(g->catalog[4].name, "NVIDIA L40S-special");
        assert_int_equal(g->catalog[4].framebuffer_mib, 5120);
        assert_int_equal(gpu_find_profile(g, "NVIDIA L40S-48A")->type_id, 1166);
        assert_string_equal(gpu_host_find_vf(h, "0001:c8:00.4")->current_profile, "NVIDIA L40S-1A");

        /* The other GPU stays on the sysfs branch. */
        const Gpu *other = gpu_host_find_gpu(h, "0002:c8:00.0");
        assert_string_equal(other->model, "NVIDIA L40S");
        assert_int_equal(other->catalog_source, GPU_CATALOG_SYSFS);
        assert_int_equal(other->n_catalog, 3);

        /* usable() saying no, or failing, means the sysfs branch without a warning. */
        static const int answers[] = {0, -EIO};
        for (size_t i = 0; i < ELEMENTSOF(answers); i++) {
                fake.usable = answers[i];
                _cleanup_gpu_host_ GpuHost *s = discover_ok(f, &nvml);
                g = gpu_host_find_gpu(s, "0001:c8:00.0");
                assert_string_equal(g->model, "NVIDIA L40S");
                assert_int_equal(g->catalog_source, GPU_CATALOG_SYSFS);
                assert_int_equal(g->n_catalog, 3);
                assert_null(s->warnings);
        }

        /* A seam without the optional calls is the sysfs branch too. */
        fake.usable = 1;
        GpuNvml partial = {&fake, fake_usable, NULL, NULL};
        _cleanup_gpu_host_ GpuHost *p = discover_ok(f, &partial);
        assert_int_equal(gpu_host_find_gpu(p, "0001:c8:00.0")->catalog_source, GPU_CATALOG_SYSFS);
}

/* DISC-15, DISC-17, DISC-18 */
static void test_nvml_failures(void **state)
{
        Fixture *f = *state;
        mkhost(f, "domain-0001");

        FakeNvml fake = {
            .pf = "0001:c8:00.0", .usable = 1, .name_error = -EIO, .types_error = -ETIMEDOUT};
        GpuNvml nvml = {&fake, fake_usable, fake_device_name, fake_supported_types};
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, &nvml);
        const Gpu *g = &h->gpus[0];
        assert_string_equal(g->model, "NVIDIA L40S");
        assert_int_equal(g->catalog_source, GPU_CATALOG_SYSFS);
        assert_int_equal(g->n_catalog, 3);
        assert_has_warning(h, "NVML catalog unavailable; using sysfs lists: 0001:c8:00.0: query "
                              "supported vGPU types: Connection timed out");
        assert_has_warning(h, "NVML device name unavailable: 0001:c8:00.0: Input/output error");
        assert_log_has(f, "<4>NVML device name unavailable gpu=0001:c8:00.0 "
                          "error=\"Input/output error\"\n");

        /* Answers that break the rules sysfs input obeys are not used either. */
        static const GpuNvmlType dup_id[] = {{5, "A-1Q", MIB}, {5, "B-1Q", MIB}};
        static const GpuNvmlType dup_name[] = {{5, "A-1Q", MIB}, {6, "A-1Q", MIB}};
        static const GpuNvmlType zero_id[] = {{0, "A-1Q", MIB}};
        static const GpuNvmlType no_name[] = {{7, NULL, MIB}};
        static const GpuNvmlType bad_name[] = {{7, "tab\t", MIB}};
        static const struct {
                const GpuNvmlType *types;
                size_t n;
                const char *warning;
        } cases[] = {
            {dup_id, 2,
             "NVML catalog unavailable; using sysfs lists: 0001:c8:00.0: NVML "
             "reported vGPU type 5 twice"},
            {dup_name, 2,
             "NVML catalog unavailable; using sysfs lists: 0001:c8:00.0: NVML "
             "reported vGPU type 6 twice"},
            {zero_id, 1,
             "NVML catalog unavailable; using sysfs lists: 0001:c8:00.0: NVML "
             "reported an invalid vGPU type"},
            {no_name, 1,
             "NVML catalog unavailable; using sysfs lists: 0001:c8:00.0: NVML "
             "reported an invalid vGPU type"},
            {bad_name, 1,
             "NVML catalog unavailable; using sysfs lists: 0001:c8:00.0: NVML "
             "reported an invalid vGPU type"},
        };
        fake.name = "bad\tname";
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                fake.types = cases[i].types;
                fake.n_types = cases[i].n;
                _cleanup_gpu_host_ GpuHost *b = discover_ok(f, &nvml);
                assert_int_equal(b->gpus[0].catalog_source, GPU_CATALOG_SYSFS);
                assert_has_warning(b, cases[i].warning);
                assert_has_warning(b, "NVML device name unavailable: 0001:c8:00.0: invalid name");
                assert_string_equal(b->gpus[0].model, "NVIDIA L40S");
        }

        /* An empty NVML catalog is an answer: the model then comes from NVML or the IDs. */
        static const GpuNvmlType none[1];
        fake.types = none;
        fake.n_types = 0;
        fake.name = NULL;
        _cleanup_gpu_host_ GpuHost *e = discover_ok(f, &nvml);
        assert_int_equal(e->gpus[0].catalog_source, GPU_CATALOG_NVML);
        assert_int_equal(e->gpus[0].n_catalog, 0);
        assert_string_equal(e->gpus[0].model, "10de:26b9");
}

/* DISC-18 (mdev: NVML names the types, sysfs their directories) */
static void test_nvml_mdev(void **state)
{
        Fixture *f = *state;
        mkhost(f, "mdev");
        static const GpuNvmlType types[] = {{901, "NVIDIA A40-2Q", 2048 * MIB},
                                            {950, "NVIDIA A40-special", 3000 * MIB}};
        FakeNvml fake = {
            .pf = "0000:41:00.0", .usable = 1, .name = "NVIDIA A40", .types = types, .n_types = 2};
        GpuNvml nvml = {&fake, fake_usable, fake_device_name, fake_supported_types};
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, &nvml);
        const Gpu *g = &h->gpus[0];
        assert_int_equal(g->catalog_source, GPU_CATALOG_NVML);
        assert_int_equal(g->n_catalog, 2);
        assert_string_equal(g->catalog[0].mdev_type, "nvidia-901");
        assert_int_equal(g->catalog[0].framebuffer_mib, 2048);
        assert_null(g->catalog[1].mdev_type);
        assert_int_equal(g->catalog[1].framebuffer_mib, 3000);
}

/* ---- the NVML seam snapshot ---------------------------------------------------------------- */

static GpuNvmlSnapshot *snapshot_ok(const GpuNvml *live, char *const *pfs, size_t n)
{
        GpuNvmlSnapshot *s = NULL;
        assert_int_equal(gpu_nvml_snapshot_new(live, pfs, n, &s), 0);
        assert_non_null(s);
        return s;
}

static void assert_seam_name(const GpuNvml *seam, const char *pf, const char *name)
{
        _cleanup_free_ char *got = NULL;
        assert_int_equal(seam->device_name(seam->userdata, pf, &got), 0);
        assert_string_equal(got, name);
}

static void assert_seam_types(const GpuNvml *seam, const char *pf, const GpuNvmlType *want,
                              size_t n_want)
{
        GpuNvmlType *types = NULL;
        size_t n = 0;
        assert_int_equal(seam->supported_types(seam->userdata, pf, &types, &n), 0);
        assert_int_equal(n, n_want);
        for (size_t i = 0; i < n; i++) {
                assert_int_equal(types[i].type_id, want[i].type_id);
                assert_string_equal(types[i].name, want[i].name);
                assert_int_equal(types[i].framebuffer_bytes, want[i].framebuffer_bytes);
        }
        gpu_nvml_types_free(types, n);
}

/* A GPU the copy cannot answer for: no name, no types, its usable() answer as given. */
static void assert_seam_unusable(const GpuNvml *seam, const char *pf, int usable)
{
        char *name = NULL;
        GpuNvmlType *types = NULL;
        size_t n = 0;
        assert_int_equal(seam->usable(seam->userdata, pf), usable);
        assert_int_equal(seam->device_name(seam->userdata, pf, &name), -ENOENT);
        assert_null(name);
        assert_int_equal(seam->supported_types(seam->userdata, pf, &types, &n), -ENOENT);
        assert_null(types);
}

/* The copy answers what the live seam answered when it was taken, and nothing after. */
static void test_nvml_snapshot_copies(void **state)
{
        char name[] = "NVIDIA L40S PCIe";
        char pf[] = "0001:c8:00.0", other[] = "0002:c8:00.0";
        char *pfs[] = {pf, other};
        FakeNvml fake = {
            .pf = "0001:c8:00.0", .usable = 1, .name = name, .types = nvml_types, .n_types = 2};
        GpuNvml live = {&fake, fake_usable, fake_device_name, fake_supported_types};

        _cleanup_gpu_nvml_snapshot_ GpuNvmlSnapshot *s = snapshot_ok(&live, pfs, 2);
        GpuNvml seam;
        gpu_nvml_snapshot_seam(s, &seam);

        /* Change everything the copy was taken from: the PF list, the name, the answers. */
        unsigned calls = fake.calls;
        pf[0] = 'x';
        name[0] = 'x';
        fake.usable = -EIO;
        fake.name = NULL;
        fake.types = NULL;

        assert_int_equal(seam.usable(seam.userdata, "0001:c8:00.0"), 1);
        assert_seam_name(&seam, "0001:c8:00.0", "NVIDIA L40S PCIe");
        assert_seam_types(&seam, "0001:c8:00.0", nvml_types, 2);
        /* Answers are the caller's: changing one does not change the next. */
        GpuNvmlType *types = NULL;
        size_t n = 0;
        assert_int_equal(seam.supported_types(seam.userdata, "0001:c8:00.0", &types, &n), 0);
        free(types[0].name);
        types[0].name = strdup("changed");
        gpu_nvml_types_free(types, n);
        assert_seam_types(&seam, "0001:c8:00.0", nvml_types, 2);

        /* Listed but not usable, and not listed at all. */
        assert_seam_unusable(&seam, "0002:c8:00.0", 0);
        assert_seam_unusable(&seam, "0003:c8:00.0", 0);
        assert_seam_unusable(&seam, "x001:c8:00.0", 0);
        assert_int_equal(fake.calls, calls); /* the live seam is not asked again */
}

/* How each failure of the live seam is kept (gpu.h: the branch, not every error code). */
static void test_nvml_snapshot_failures(void **state)
{
        char pf[] = "0001:c8:00.0";
        char *pfs[] = {pf};
        FakeNvml fake = {.pf = pf,
                         .usable = -EIO,
                         .name = "NVIDIA L40S PCIe",
                         .types = nvml_types,
                         .n_types = 2};
        GpuNvml live = {&fake, fake_usable, fake_device_name, fake_supported_types};
        GpuNvml seam;

        /* usable() failing is answered as it was. */
        GpuNvmlSnapshot *s = snapshot_ok(&live, pfs, 1);
        gpu_nvml_snapshot_seam(s, &seam);
        assert_seam_unusable(&seam, pf, -EIO);
        s = gpu_nvml_snapshot_free(s);
        assert_null(s);

        /* No device name: -ENOENT, the catalog is still NVML's. */
        fake.usable = 1;
        fake.name = NULL;
        fake.name_error = -EIO;
        s = snapshot_ok(&live, pfs, 1);
        gpu_nvml_snapshot_seam(s, &seam);
        assert_int_equal(seam.usable(seam.userdata, pf), 1);
        char *name = NULL;
        assert_int_equal(seam.device_name(seam.userdata, pf, &name), -ENOENT);
        assert_null(name);
        assert_seam_types(&seam, pf, nvml_types, 2);
        s = gpu_nvml_snapshot_free(s);

        /* No supported types: the GPU is not usable at all. */
        fake.name = "NVIDIA L40S PCIe";
        fake.types = NULL;
        fake.types_error = -ETIMEDOUT;
        s = snapshot_ok(&live, pfs, 1);
        gpu_nvml_snapshot_seam(s, &seam);
        assert_seam_unusable(&seam, pf, 0);
        s = gpu_nvml_snapshot_free(s);

        /* Nor is it under a seam without the optional calls, without a seam, or unlisted. */
        fake.types = nvml_types;
        GpuNvml partial = {&fake, fake_usable, NULL, NULL};
        s = snapshot_ok(&partial, pfs, 1);
        gpu_nvml_snapshot_seam(s, &seam);
        assert_seam_unusable(&seam, pf, 0);
        s = gpu_nvml_snapshot_free(s);

        s = snapshot_ok(NULL, pfs, 1);
        gpu_nvml_snapshot_seam(s, &seam);
        assert_seam_unusable(&seam, pf, 0);
        s = gpu_nvml_snapshot_free(s);

        unsigned calls = fake.calls;
        s = snapshot_ok(&live, NULL, 0);
        gpu_nvml_snapshot_seam(s, &seam);
        assert_seam_unusable(&seam, pf, 0);
        assert_int_equal(fake.calls, calls);
        gpu_nvml_snapshot_free(s);
        assert_null(gpu_nvml_snapshot_free(NULL));
}

/* Discovery through the copy builds what it builds through the live seam. */
static void test_nvml_snapshot_discovery(void **state)
{
        Fixture *f = *state;
        mkhost(f, "domain-0001");
        char pf[] = "0001:c8:00.0";
        char *pfs[] = {pf};
        FakeNvml fake = {.pf = pf,
                         .usable = 1,
                         .name = "NVIDIA L40S PCIe",
                         .types = nvml_types,
                         .n_types = ELEMENTSOF(nvml_types)};
        GpuNvml live = {&fake, fake_usable, fake_device_name, fake_supported_types};
        _cleanup_gpu_host_ GpuHost *want = discover_ok(f, &live);

        _cleanup_gpu_nvml_snapshot_ GpuNvmlSnapshot *s = snapshot_ok(&live, pfs, 1);
        GpuNvml seam;
        gpu_nvml_snapshot_seam(s, &seam);
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, &seam);
        assert_null(h->warnings);
        assert_int_equal(h->n_gpus, 1);
        const Gpu *g = &h->gpus[0], *w = &want->gpus[0];
        assert_string_equal(g->model, w->model);
        assert_int_equal(g->catalog_source, GPU_CATALOG_NVML);
        assert_int_equal(g->n_catalog, w->n_catalog);
        for (size_t i = 0; i < g->n_catalog; i++) {
                assert_string_equal(g->catalog[i].name, w->catalog[i].name);
                assert_int_equal(g->catalog[i].type_id, w->catalog[i].type_id);
                assert_int_equal(g->catalog[i].framebuffer_mib, w->catalog[i].framebuffer_mib);
        }

        /* A name NVML could not give is reported as missing, not with the live error code. */
        fake.name = NULL;
        fake.name_error = -EIO;
        _cleanup_gpu_nvml_snapshot_ GpuNvmlSnapshot *nameless = snapshot_ok(&live, pfs, 1);
        gpu_nvml_snapshot_seam(nameless, &seam);
        _cleanup_gpu_host_ GpuHost *n = discover_ok(f, &seam);
        assert_int_equal(n->gpus[0].catalog_source, GPU_CATALOG_NVML);
        assert_string_equal(n->gpus[0].model, "NVIDIA L40S");
        assert_has_warning(n, "NVML device name unavailable: 0001:c8:00.0: No such file or "
                              "directory");
}

/* ---- the tracker --------------------------------------------------------------------------- */

typedef struct TrackerRun {
        Fixture *f;
        sd_event *event;
        WorkerPool *pool;
        GpuTracker *t;
} TrackerRun;

typedef struct Done {
        unsigned calls;
        int r;
        char *error;
        /* what to ask for from inside the callback */
        TrackerRun *again;
        struct Done *again_done;
} Done;

static void on_tracker_done(int r, const char *error, void *userdata)
{
        Done *d = userdata;
        d->calls++;
        d->r = r;
        free(d->error);
        d->error = error ? strdup(error) : NULL;
        if (d->again) {
                assert_int_equal(
                    gpu_tracker_discover(d->again->t, on_tracker_done, d->again_done, NULL), 0);
                d->again = NULL;
        }
}

static void move_path(Fixture *f, const char *from, const char *to)
{
        _cleanup_free_ char *a = path_of(f, from), *b = path_of(f, to);
        assert_int_equal(rename(a, b), 0);
}

static void tracker_start(TrackerRun *run, Fixture *f)
{
        *run = (TrackerRun){.f = f};
        assert_int_equal(sd_event_new(&run->event), 0);
        WorkerPoolConfig pc = WORKER_POOL_CONFIG_SYSFS;
        assert_int_equal(worker_pool_new(&pc, &run->pool), 0);
        assert_int_equal(worker_pool_attach_event(run->pool, run->event), 0);
        GpuTrackerConfig tc = {.sysfs = f->root, .pool = run->pool};
        assert_int_equal(gpu_tracker_new(&tc, &run->t), 0);
}

static void tracker_stop(TrackerRun *run)
{
        run->pool = worker_pool_free(run->pool);
        run->t = gpu_tracker_free(run->t);
        run->event = sd_event_unref(run->event);
}

/* Turns the loop until every request made so far has been answered. */
static void tracker_settle(TrackerRun *run)
{
        TEST_WAIT_UNTIL(run->event, !gpu_tracker_is_busy(run->t));
}

/* DISC-5, DISC-6, DISC-20: a re-read folds VF states into the host; a full run replaces it */
static void test_tracker_discovers_and_rereads(void **state)
{
        Fixture *f = *state;
        TrackerRun run;
        Done full = {}, reread = {};
        mkhost(f, "domain-0001");
        tracker_start(&run, f);

        assert_null(gpu_tracker_host(run.t));
        /* Without a host yet, a re-read is a full discovery. */
        assert_int_equal(gpu_tracker_reread_types(run.t, on_tracker_done, &reread, NULL), 0);
        assert_int_equal(reread.calls, 0); /* never from inside the call */
        tracker_settle(&run);
        assert_int_equal(reread.calls, 1);
        assert_int_equal(reread.r, 0);
        assert_int_equal(gpu_tracker_get_stats(run.t)->discoveries, 1);
        const GpuHost *h = gpu_tracker_host(run.t);
        assert_non_null(h);
        assert_int_equal(gpu_host_find_vf(h, "0001:c8:00.5")->current_type_id, 0);

        put(f, "devices/pci0001:c8/0001:c8:00.5/nvidia/current_vgpu_type", "1145\n");
        put(f, "devices/pci0001:c8/0001:c8:00.6/nvidia/current_vgpu_type", "x\n");
        assert_int_equal(gpu_tracker_reread_types(run.t, on_tracker_done, &reread, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(reread.calls, 2);
        assert_int_equal(gpu_tracker_get_stats(run.t)->rereads, 1);
        assert_ptr_equal(gpu_tracker_host(run.t), h); /* folded in, not replaced */
        const GpuVf *vf = gpu_host_find_vf(h, "0001:c8:00.5");
        assert_int_equal(vf->current_type_id, 1145);
        assert_string_equal(vf->current_profile, "NVIDIA L40S-1B");
        /* A VF that cannot be re-read is unreadable, with discovery's own text. */
        vf = gpu_host_find_vf(h, "0001:c8:00.6");
        assert_false(gpu_vf_is_readable(vf));
        assert_string_equal(vf->error, "invalid current vGPU type \"x\"");

        put(f, "devices/pci0001:c8/0001:c8:00.6/nvidia/current_vgpu_type", "0\n");
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &full, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(full.r, 0);
        assert_true(gpu_vf_is_readable(gpu_host_find_vf(gpu_tracker_host(run.t), "0001:c8:00.6")));
        assert_null(gpu_tracker_error(run.t));
        free(full.error);
        free(reread.error);
        tracker_stop(&run);
}

/* DISC-7: a failed discovery keeps the last host and says why until one succeeds */
static void test_tracker_keeps_host_on_failure(void **state)
{
        Fixture *f = *state;
        TrackerRun run;
        Done d = {};
        mkhost(f, "domain-0001");
        tracker_start(&run, f);
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        const GpuHost *h = gpu_tracker_host(run.t);
        assert_non_null(h);
        size_t n_vfs = h->n_vfs;

        move_path(f, "bus/pci/devices", "bus/pci/devices.away");
        put(f, "bus/pci/devices", "");
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(d.r, -ENOTDIR);
        const char *want = "discover vendor VFIO VFs: list bus/pci/devices: Not a directory";
        assert_string_equal(d.error, want);
        assert_string_equal(gpu_tracker_error(run.t), want);
        assert_ptr_equal(gpu_tracker_host(run.t), h);
        assert_int_equal(gpu_tracker_host(run.t)->n_vfs, n_vfs);

        /* A re-read is no discovery: it neither clears nor sets the error. */
        assert_int_equal(gpu_tracker_reread_types(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_string_equal(gpu_tracker_error(run.t), want);

        remove_path(f, "bus/pci/devices");
        move_path(f, "bus/pci/devices.away", "bus/pci/devices");
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(d.r, 0);
        assert_null(d.error);
        assert_null(gpu_tracker_error(run.t));
        free(d.error);
        tracker_stop(&run);
}

/* DISC-20, PLACE-9: runs never overlap; a request waits for a run that starts after it */
static void test_tracker_batches_requests(void **state)
{
        Fixture *f = *state;
        TrackerRun run;
        Done a = {}, b = {}, c = {}, r1 = {}, r2 = {};
        mkhost(f, "domain-0001");
        tracker_start(&run, f);

        /* a starts run 1; b and the re-read r1 wait and share run 2, a full one. From a's
         * callback, c asks again: run 2 is already in flight, so c gets run 3. */
        a.again = &run;
        a.again_done = &c;
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &a, NULL), 0);
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &b, NULL), 0);
        assert_int_equal(gpu_tracker_reread_types(run.t, on_tracker_done, &r1, NULL), 0);
        assert_true(gpu_tracker_is_busy(run.t));
        tracker_settle(&run);
        assert_int_equal(a.calls, 1);
        assert_int_equal(b.calls, 1);
        assert_int_equal(c.calls, 1);
        assert_int_equal(r1.calls, 1);
        assert_int_equal(gpu_tracker_get_stats(run.t)->discoveries, 3);
        assert_int_equal(gpu_tracker_get_stats(run.t)->rereads, 0);

        /* A cancelled request is never answered; the run still happens. */
        assert_int_equal(gpu_tracker_reread_types(run.t, on_tracker_done, &r2, NULL), 0);
        gpu_tracker_cancel(run.t, &r2);
        tracker_settle(&run);
        assert_int_equal(r2.calls, 0);
        assert_int_equal(gpu_tracker_get_stats(run.t)->rereads, 1);
        tracker_stop(&run);
}

/*
 * A call on the pool keyed by a VF's address that holds the key until the test writes to the
 * returned descriptor: past its short deadline the VF is uncertain (GEN-4), as it is while a
 * sysfs read of it hangs. The pool owns the read end, so a failed test leaves nothing but a
 * thread that ends with the process.
 */
typedef struct Blocker {
        int fd;
} Blocker;

static void blocker_free(void *data)
{
        Blocker *b = data;
        closep(&b->fd);
        free(b);
}

static int blocker_run(void *data, char **error)
{
        Blocker *b = data;
        char c;
        (void)error;
        return read(b->fd, &c, 1) == 1 ? 0 : -EIO;
}

static int block_key(TrackerRun *run, const char *key)
{
        int fds[2];
        assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
        Blocker *b = calloc(1, sizeof *b);
        assert_non_null(b);
        b->fd = fds[0];
        WorkerJob job = {
            .key = key,
            .timeout = 20 * NSEC_PER_MSEC,
            .run = blocker_run,
            .data = b,
            .free_data = blocker_free,
        };
        assert_int_equal(worker_pool_submit(run->pool, &job, NULL), 0);
        TEST_WAIT_UNTIL(run->event, worker_pool_key_is_uncertain(run->pool, key));
        return fds[1];
}

static void unblock_key(TrackerRun *run, int fd, const char *key)
{
        assert_int_equal(write(fd, "x", 1), 1);
        closep(&fd);
        TEST_WAIT_UNTIL(run->event, !worker_pool_key_is_uncertain(run->pool, key));
}

#define VF5_TYPE "devices/pci0001:c8/0001:c8:00.5/nvidia/current_vgpu_type"
#define VF6_TYPE "devices/pci0001:c8/0001:c8:00.6/nvidia/current_vgpu_type"

/* GEN-4, DISC-7: an uncertain VF keeps its last state; the run succeeds for every other VF */
static void test_tracker_uncertain_vf(void **state)
{
        Fixture *f = *state;
        TrackerRun run;
        Done d = {};
        mkhost(f, "domain-0001");
        tracker_start(&run, f);
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(d.r, 0);
        size_t n_creatable = gpu_host_find_vf(gpu_tracker_host(run.t), "0001:c8:00.5")->n_creatable;
        assert_true(n_creatable > 0);

        int release = block_key(&run, "0001:c8:00.5");
        put(f, VF5_TYPE, "1145\n");
        put(f, VF6_TYPE, "1145\n");
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(d.r, 0);
        assert_null(d.error);
        assert_null(gpu_tracker_error(run.t)); /* placement stays enabled (DISC-7) */
        const GpuHost *h = gpu_tracker_host(run.t);
        assert_int_equal(h->n_vfs, 4);
        assert_null(h->warnings);
        /* Not read: what the last table had, its parent, type and lists. */
        const GpuVf *vf = gpu_host_find_vf(h, "0001:c8:00.5");
        assert_true(gpu_vf_is_readable(vf));
        assert_string_equal(vf->parent, "0001:c8:00.0");
        assert_int_equal(vf->current_type_id, 0);
        assert_null(vf->current_profile);
        assert_int_equal(vf->n_creatable, n_creatable);
        /* Read: the others. */
        assert_int_equal(gpu_host_find_vf(h, "0001:c8:00.6")->current_type_id, 1145);
        assert_string_equal(gpu_host_find_vf(h, "0001:c8:00.4")->current_profile, "NVIDIA L40S-1A");

        /* A re-read skips it too, and folds the others in. */
        put(f, VF6_TYPE, "0\n");
        assert_int_equal(gpu_tracker_reread_types(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(d.r, 0);
        assert_int_equal(gpu_host_find_vf(h, "0001:c8:00.5")->current_type_id, 0);
        assert_int_equal(gpu_host_find_vf(h, "0001:c8:00.6")->current_type_id, 0);

        /* Once the call returns, the next run reads it. */
        unblock_key(&run, release, "0001:c8:00.5");
        assert_int_equal(gpu_tracker_reread_types(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        vf = gpu_host_find_vf(gpu_tracker_host(run.t), "0001:c8:00.5");
        assert_int_equal(vf->current_type_id, 1145);
        assert_string_equal(vf->current_profile, "NVIDIA L40S-1B");
        assert_int_equal(gpu_tracker_get_stats(run.t)->discoveries, 2);
        assert_int_equal(gpu_tracker_get_stats(run.t)->rereads, 2);
        free(d.error);
        tracker_stop(&run);
}

/* DISC-6, GEN-4: an uncertain VF the last table lacks is unreadable; all of them fail */
static void test_tracker_uncertain_new_vf(void **state)
{
        Fixture *f = *state;
        static const char *const others[] = {"0001:c8:00.4", "0001:c8:00.6", "0001:c8:00.7"};
        TrackerRun run;
        Done d = {};
        mkhost(f, "domain-0001");
        tracker_start(&run, f);

        int release = block_key(&run, "0001:c8:00.5");
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(d.r, 0);
        assert_null(gpu_tracker_error(run.t));
        const GpuHost *h = gpu_tracker_host(run.t);
        assert_int_equal(h->n_vfs, 4);
        const GpuVf *vf = gpu_host_find_vf(h, "0001:c8:00.5");
        assert_false(gpu_vf_is_readable(vf));
        assert_string_equal(vf->error, "an earlier sysfs call on it has not returned");
        assert_string_equal(vf->parent, ""); /* never read */
        assert_int_equal(vf->n_creatable, 0);
        assert_has_warning(h, "skipping unreadable vendor VFIO VFs: 0001:c8:00.5");
        for (size_t i = 0; i < ELEMENTSOF(others); i++)
                assert_true(gpu_vf_is_readable(gpu_host_find_vf(h, others[i])));
        assert_int_equal(h->n_gpus, 1);

        /* A re-read whose every VF is uncertain reads nothing, and still answers later. */
        int more[ELEMENTSOF(others)];
        for (size_t i = 0; i < ELEMENTSOF(others); i++)
                more[i] = block_key(&run, others[i]);
        unsigned calls = d.calls;
        assert_int_equal(gpu_tracker_reread_types(run.t, on_tracker_done, &d, NULL), 0);
        assert_int_equal(d.calls, calls);
        tracker_settle(&run);
        assert_int_equal(d.calls, calls + 1);
        assert_int_equal(d.r, 0);
        assert_ptr_equal(gpu_tracker_host(run.t), h);

        /* Without a last table, no VF readable is DISC-6's failure, and DISC-7 keeps none. */
        GpuTracker *fresh = NULL;
        GpuTrackerConfig tc = {.sysfs = f->root, .pool = run.pool};
        assert_int_equal(gpu_tracker_new(&tc, &fresh), 0);
        assert_int_equal(gpu_tracker_discover(fresh, on_tracker_done, &d, NULL), 0);
        TEST_WAIT_UNTIL(run.event, !gpu_tracker_is_busy(fresh));
        assert_int_equal(d.r, -EAGAIN);
        const char *want = "discover vendor VFIO VFs: VF 0001:c8:00.4: an earlier sysfs call on "
                           "it has not returned; VF 0001:c8:00.5: an earlier sysfs call on it "
                           "has not returned; VF 0001:c8:00.6: an earlier sysfs call on it has "
                           "not returned; VF 0001:c8:00.7: an earlier sysfs call on it has not "
                           "returned";
        assert_string_equal(d.error, want);
        assert_string_equal(gpu_tracker_error(fresh), want);
        assert_null(gpu_tracker_host(fresh));
        gpu_tracker_free(fresh);

        unblock_key(&run, release, "0001:c8:00.5");
        for (size_t i = 0; i < ELEMENTSOF(others); i++)
                unblock_key(&run, more[i], others[i]);
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_true(gpu_vf_is_readable(gpu_host_find_vf(gpu_tracker_host(run.t), "0001:c8:00.5")));
        assert_null(gpu_tracker_host(run.t)->warnings);
        free(d.error);
        tracker_stop(&run);
}

/* DISC-3, DISC-9, GEN-4: on an mdev host, an uncertain VF keeps its types and its mdevs */
static void test_tracker_uncertain_mdev_vf(void **state)
{
        Fixture *f = *state;
        TrackerRun run;
        Done d = {};
        mkhost(f, "mdev"); /* 0000:41:00.5 carries the active 2Q mdev */
        tracker_start(&run, f);

        /* New and uncertain: left out, as an unreadable mdev parent is (DISC-3). */
        int release6 = block_key(&run, "0000:41:00.6");
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(d.r, 0);
        const GpuHost *h = gpu_tracker_host(run.t);
        assert_int_equal(h->framework, GPU_FRAMEWORK_MDEV);
        assert_int_equal(h->n_vfs, 3);
        assert_null(gpu_host_find_vf(h, "0000:41:00.6"));
        assert_has_warning(h, "skipping unreadable mdev parents: VF 0000:41:00.6: an earlier "
                              "sysfs call on it has not returned");
        unblock_key(&run, release6, "0000:41:00.6");

        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(gpu_tracker_host(run.t)->n_vfs, 4);

        /* Known and uncertain: its last types stand, and its mdev is this pass's. */
        int release5 = block_key(&run, "0000:41:00.5");
        int release7 = block_key(&run, "0000:41:00.7");
        put(f, "class/mdev_bus/0000:41:00.7/mdev_supported_types/nvidia-901/available_instances",
            "0\n");
        put(f, "class/mdev_bus/0000:41:00.6/mdev_supported_types/nvidia-901/available_instances",
            "0\n");
        assert_int_equal(gpu_tracker_discover(run.t, on_tracker_done, &d, NULL), 0);
        tracker_settle(&run);
        assert_int_equal(d.r, 0);
        h = gpu_tracker_host(run.t);
        assert_int_equal(h->n_vfs, 4);
        assert_null(h->warnings);
        const GpuVf *vf5 = gpu_host_find_vf(h, "0000:41:00.5");
        assert_string_equal(vf5->parent, "0000:41:00.0");
        assert_int_equal(vf5->n_creatable, 10);
        assert_int_equal(strv_length(vf5->mdev_uuids), 1);
        assert_string_equal(vf5->current_profile, "NVIDIA A40-2Q");
        assert_string_equal(h->mdevs[0].profile, "NVIDIA A40-2Q");
        for (size_t k = 0; k < 10; k++) {
                const GpuProfile *p7 = &gpu_host_find_vf(h, "0000:41:00.7")->creatable[k];
                const GpuProfile *p6 = &gpu_host_find_vf(h, "0000:41:00.6")->creatable[k];
                bool is_2q = streq(p7->mdev_type, "nvidia-901");
                assert_int_equal(p7->available_instances, is_2q ? 1 : 0); /* as last read */
                assert_int_equal(p6->available_instances, 0);             /* read now */
        }
        unblock_key(&run, release5, "0000:41:00.5");
        unblock_key(&run, release7, "0000:41:00.7");
        free(d.error);
        tracker_stop(&run);
}

/* PLACE-6: an mdev VF's available_instances as discovery read it; unreadable reads 0 */
static void test_mdev_availability(void **state)
{
        Fixture *f = *state;
        mkhost(f, "mdev"); /* every VF but .5 (busy) has one 2Q left (nvidia-901) */
        put(f, "class/mdev_bus/0000:41:00.4/mdev_supported_types/nvidia-901/available_instances",
            "lots\n");
        remove_path(
            f, "class/mdev_bus/0000:41:00.7/mdev_supported_types/nvidia-901/available_instances");
        _cleanup_gpu_host_ GpuHost *h = discover_ok(f, NULL);
        static const struct {
                const char *vf;
                uint32_t available_2q;
        } want[] = {
            {"0000:41:00.4", 0}, /* garbage */
            {"0000:41:00.5", 0}, /* busy */
            {"0000:41:00.6", 1},
            {"0000:41:00.7", 0}, /* unreadable */
        };
        for (size_t i = 0; i < ELEMENTSOF(want); i++) {
                const GpuVf *vf = gpu_host_find_vf(h, want[i].vf);
                assert_non_null(vf);
                assert_int_equal(vf->n_creatable, 10);
                for (size_t k = 0; k < vf->n_creatable; k++)
                        assert_int_equal(vf->creatable[k].available_instances,
                                         streq(vf->creatable[k].mdev_type, "nvidia-901")
                                             ? want[i].available_2q
                                             : 0);
        }
        /* The catalog is what the card offers, not what a VF has left. */
        for (size_t k = 0; k < h->gpus[0].n_catalog; k++)
                assert_int_equal(h->gpus[0].catalog[k].available_instances, 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_creatable_table),
            cmocka_unit_test(test_creatable_header_only),
            cmocka_unit_test(test_creatable_bad_lines),
            cmocka_unit_test(test_creatable_bad_ids),
            cmocka_unit_test(test_creatable_duplicates),
            cmocka_unit_test(test_creatable_limits),
            cmocka_unit_test(test_current_type),
            cmocka_unit_test(test_profile_framebuffer),
            cmocka_unit_test(test_mdev_description),
            cmocka_unit_test(test_profile_model),
            cmocka_unit_test(test_framework_strings),
            cmocka_unit_test(test_profile_name_validity),
            cmocka_unit_test_setup_teardown(test_discover_l40s, setup, teardown),
            cmocka_unit_test_setup_teardown(test_type_ids_are_card_local, setup, teardown),
            cmocka_unit_test_setup_teardown(test_full_card, setup, teardown),
            cmocka_unit_test_setup_teardown(test_unknown_device_id, setup, teardown),
            cmocka_unit_test_setup_teardown(test_any_domain, setup, teardown),
            cmocka_unit_test_setup_teardown(test_invalid_addresses, setup, teardown),
            cmocka_unit_test_setup_teardown(test_unreadable_vf, setup, teardown),
            cmocka_unit_test_setup_teardown(test_unreadable_reasons, setup, teardown),
            cmocka_unit_test_setup_teardown(test_all_vfs_unreadable, setup, teardown),
            cmocka_unit_test_setup_teardown(test_unreadable_pci_entry, setup, teardown),
            cmocka_unit_test_setup_teardown(test_no_gpu, setup, teardown),
            cmocka_unit_test_setup_teardown(test_vendor_listing_error, setup, teardown),
            cmocka_unit_test_setup_teardown(test_rediscovery, setup, teardown),
            cmocka_unit_test_setup_teardown(test_discover_mdev, setup, teardown),
            cmocka_unit_test_setup_teardown(test_mdev_before_vendor, setup, teardown),
            cmocka_unit_test_setup_teardown(test_mdev_error_stops_discovery, setup, teardown),
            cmocka_unit_test_setup_teardown(test_typeless_mdev_bus, setup, teardown),
            cmocka_unit_test_setup_teardown(test_mdev_entry_unreadable, setup, teardown),
            cmocka_unit_test_setup_teardown(test_mdev_all_unreadable, setup, teardown),
            cmocka_unit_test_setup_teardown(test_active_mdev_details, setup, teardown),
            cmocka_unit_test_setup_teardown(test_mdev_parent_without_physfn, setup, teardown),
            cmocka_unit_test_setup_teardown(test_mdev_listing_error, setup, teardown),
            cmocka_unit_test_setup_teardown(test_nvml_branch, setup, teardown),
            cmocka_unit_test_setup_teardown(test_nvml_failures, setup, teardown),
            cmocka_unit_test_setup_teardown(test_nvml_mdev, setup, teardown),
            cmocka_unit_test(test_nvml_snapshot_copies),
            cmocka_unit_test(test_nvml_snapshot_failures),
            cmocka_unit_test_setup_teardown(test_nvml_snapshot_discovery, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tracker_discovers_and_rereads, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tracker_keeps_host_on_failure, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tracker_batches_requests, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tracker_uncertain_vf, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tracker_uncertain_new_vf, setup, teardown),
            cmocka_unit_test_setup_teardown(test_tracker_uncertain_mdev_vf, setup, teardown),
            cmocka_unit_test_setup_teardown(test_mdev_availability, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
