/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NVML client against a unit-test double of libnvidia-ml.so.1 (tests/unit/nvml-stub-lib.c,
 * built as src/nvml/libnvml-stub.so): loading, return-code names, layouts, the NVML thread's
 * timeout and stuck handling, fallback scope, counters and log lines, the placement cache and
 * its refresher, and discovery's seam. Time is an injected clock; hangs are released by the test.
 * The client is attached to the test's sd-event loop, which the test runs until what it waits
 * for has happened; after moving the clock past a deadline it dispatches once by hand.
 */
#include <dlfcn.h>
#include <libgen.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gpu/gpu.h"
#include "nvml/nvml.h"
#include "testlib.h"

/* ---- the double ------------------------------------------------------------------------------ */

static struct {
        char path[4096];
        char partial_path[4096];
        void *dl;
        void (*reset)(void);
        void (*add_gpu)(const char *pci, const char *name, unsigned mode);
        void (*add_type)(const char *pci, unsigned id, const char *name, unsigned long long fb,
                         unsigned max, unsigned free_count, unsigned size);
        void (*set_mode)(const char *pci, unsigned mode);
        void (*set_free)(const char *pci, unsigned id, unsigned free_count);
        void (*inject)(const char *function, int code, int count);
        void (*hang)(bool on);
        unsigned (*hung_calls)(void);
        unsigned (*calls)(const char *function);
        int (*single_caller)(pthread_t not );
        unsigned (*shutdowns)(void);
        void (*set_placement_versions)(unsigned mask);
        unsigned (*placement_calls)(unsigned ver);
} stub;

/* The stub's placement list versions (bit n: vn) for each driver branch (NVML-3a). */
#define LIB_R570 ((1u << 1) | (1u << 2))
#define LIB_R550 (1u << 1)
#define LIB_NEITHER 0u

#define E3 "0000:e3:00.0"
#define C8 "0001:c8:00.0"
#define GIB (1024ULL * 1024 * 1024)

static void *sym(const char *name)
{
        void *p = dlsym(stub.dl, name);
        assert_non_null(p);
        return p;
}

static int load_stub(void **state)
{
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        assert_true(n > 0);
        exe[n] = 0;
        /* <build>/tests/unit/test-nvml → <build>/src/nvml/ */
        const char *dir = dirname(exe);
        snprintf(stub.path, sizeof stub.path, "%s/../../src/nvml/libnvml-stub.so", dir);
        snprintf(stub.partial_path, sizeof stub.partial_path,
                 "%s/../../src/nvml/libnvml-stub-partial.so", dir);
        stub.dl = dlopen(stub.path, RTLD_NOW | RTLD_LOCAL);
        if (!stub.dl)
                fprintf(stderr, "# %s\n", dlerror());
        assert_non_null(stub.dl);
        *(void **)&stub.reset = sym("nvml_stub_reset");
        *(void **)&stub.add_gpu = sym("nvml_stub_add_gpu");
        *(void **)&stub.add_type = sym("nvml_stub_add_type");
        *(void **)&stub.set_mode = sym("nvml_stub_set_mode");
        *(void **)&stub.set_free = sym("nvml_stub_set_free");
        *(void **)&stub.inject = sym("nvml_stub_fail");
        *(void **)&stub.hang = sym("nvml_stub_hang");
        *(void **)&stub.hung_calls = sym("nvml_stub_hung_calls");
        *(void **)&stub.calls = sym("nvml_stub_calls");
        *(void **)&stub.single_caller = sym("nvml_stub_single_caller");
        *(void **)&stub.shutdowns = sym("nvml_stub_shutdowns");
        *(void **)&stub.set_placement_versions = sym("nvml_stub_set_placement_versions");
        *(void **)&stub.placement_calls = sym("nvml_stub_placement_calls");
        return 0;
}

static int unload_stub(void **state)
{
        dlclose(stub.dl);
        return 0;
}

/* One mixed-size L40S with a 1Q and a 4Q type, one equal-size L40S with a 2Q type. */
static void stub_default_host(void)
{
        stub.reset();
        stub.add_gpu(E3, "NVIDIA L40S", 1);
        stub.add_type(E3, 1145, "NVIDIA L40S-1Q", 1 * GIB, 32, 5, 1);
        stub.add_type(E3, 1150, "NVIDIA L40S-4Q", 4 * GIB, 12, 2, 4);
        stub.add_gpu(C8, "NVIDIA L40S", 0);
        stub.add_type(C8, 1147, "NVIDIA L40S-2Q", 2 * GIB, 24, 0, 2);
}

/* ---- harness --------------------------------------------------------------------------------- */

typedef struct Harness {
        TestClock fc;
        sd_event *event;
        NvmlClient *client;
        TestLog log;
        int refreshed;
        /* the last answer seen by answer_cb */
        int answers;
        NvmlFallback host[16];
        char host_error[16][160];
        NvmlFallback gpu_fallback[16];
        char gpu_error[16][200];
        unsigned count_1150[16];
} Harness;

static void on_refreshed(NvmlClient *c, void *userdata)
{
        ((Harness *)userdata)->refreshed++;
}

static void harness_init(Harness *h, const char *library)
{
        memset(h, 0, sizeof *h);
        test_clock_init(&h->fc, 500 * NSEC_PER_SEC);
        assert_int_equal(test_log_start(&h->log), 0);
        assert_int_equal(sd_event_new(&h->event), 0);
        NvmlClientConfig cfg = {
            .library = library,
            .timeout = 5 * NSEC_PER_SEC,
            .clock = &h->fc.clock,
            .refreshed = on_refreshed,
            .userdata = h,
        };
        assert_int_equal(nvml_client_new(&cfg, &h->client), 0);
        assert_int_equal(nvml_client_attach_event(h->client, h->event), 0);
        char *gpus[] = {E3, C8};
        assert_int_equal(nvml_client_set_gpus(h->client, gpus, 2), 0);
}

static void harness_done(Harness *h)
{
        nvml_client_free(h->client);
        sd_event_unref(h->event);
        test_log_stop(&h->log);
}

/* The log so far, then forgotten. */
static char *take_log(Harness *h)
{
        char *s = strdup(test_log_text(&h->log));
        assert_non_null(s);
        test_log_clear(&h->log);
        return s;
}

static void answer_cb(NvmlClient *c, const NvmlAnswer *a, void *userdata)
{
        Harness *h = userdata;
        assert_true(h->answers < 16);
        int i = h->answers++;
        h->host[i] = a->host_fallback;
        snprintf(h->host_error[i], sizeof h->host_error[i], "%s",
                 a->host_error ? a->host_error : "");
        const NvmlGpuAnswer *g = nvml_answer_find_gpu(a, E3);
        h->gpu_fallback[i] = g ? g->fallback : NVML_FALLBACK_NONE;
        snprintf(h->gpu_error[i], sizeof h->gpu_error[i], "%s", g && g->error ? g->error : "");
        const NvmlPlacements *p = nvml_gpu_answer_find_placements(g, 1150);
        h->count_1150[i] = p ? p->count : 9999;
}

#define WAIT_LIMIT (10 * NSEC_PER_SEC)

/* Runs the loop until cond holds, for at most WAIT_LIMIT of real time. */
#define WAIT_UNTIL(h, cond) TEST_WAIT_UNTIL_LIMIT((h)->event, WAIT_LIMIT, cond)

/* Moves the injected clock, which the loop cannot see: the client looks at its deadlines now. */
static void advance(Harness *h, nsec_t d)
{
        test_clock_advance(&h->fc, d);
        (void)nvml_client_dispatch(h->client);
}

static void refresh(Harness *h, bool init)
{
        int before = h->refreshed;
        assert_int_equal(nvml_client_request_refresh(h->client, init), 0);
        WAIT_UNTIL(h, h->refreshed > before && !nvml_client_refresh_is_running(h->client));
}

/* A claim-time query of type 1150 on E3 (PLACE-9). */
static void claim_query(Harness *h)
{
        NvmlGpuRequest g;
        nvmlVgpuTypeId_t types[] = {1150};
        assert_int_equal(nvml_client_prepare_gpu_request(h->client, E3, types, 1, &g), 0);
        NvmlRequest req = {.gpus = &g, .n_gpus = 1};
        assert_int_equal(nvml_client_query(h->client, &req, answer_cb, h), 0);
        nvml_gpu_request_done(&g);
}

/* How often needle occurs in haystack. */
static unsigned occurrences(const char *haystack, const char *needle)
{
        unsigned n = 0;
        for (const char *p = haystack; (p = strstr(p, needle)); p += strlen(needle))
                n++;
        return n;
}

static void wait_hung(unsigned n)
{
        nsec_t until = test_now() + WAIT_LIMIT;
        while (stub.hung_calls() != n) {
                assert_true(test_now() < until);
                sched_yield();
        }
}

/* ---- tests ----------------------------------------------------------------------------------- */

/* NVML-5: names of known codes; others as `NVML error <n>`; and their errno. */
static void test_return_names(void **state)
{
        static const struct {
                int code;
                const char *name;
        } table[] = {
            {0, "SUCCESS"},
            {1, "UNINITIALIZED"},
            {2, "INVALID_ARGUMENT"},
            {3, "NOT_SUPPORTED"},
            {4, "NO_PERMISSION"},
            {6, "NOT_FOUND"},
            {7, "INSUFFICIENT_SIZE"},
            {9, "DRIVER_NOT_LOADED"},
            {10, "TIMEOUT"},
            {12, "LIBRARY_NOT_FOUND"},
            {13, "FUNCTION_NOT_FOUND"},
            {15, "GPU_IS_LOST"},
            {18, "LIB_RM_VERSION_MISMATCH"},
            {19, "IN_USE"},
            {25, "ARGUMENT_VERSION_MISMATCH"},
            {28, "GPU_NOT_FOUND"},
            {999, "UNKNOWN"},
            {5, "NVML error 5"},
            {8, "NVML error 8"},
            {1000, "NVML error 1000"},
            {-1, "NVML error -1"},
        };
        char buf[NVML_RETURN_NAME_MAX];
        for (size_t i = 0; i < ELEMENTSOF(table); i++)
                assert_string_equal(nvml_return_name(table[i].code, buf), table[i].name);

        assert_int_equal(nvml_return_to_errno(0), 0);
        assert_int_equal(nvml_return_to_errno(3), -EOPNOTSUPP);
        assert_int_equal(nvml_return_to_errno(7), -ENOBUFS);
        assert_int_equal(nvml_return_to_errno(25), -EPROTO);
        assert_int_equal(nvml_return_to_errno(15), -ENODEV);
        assert_int_equal(nvml_return_to_errno(28), -ENODEV);
        assert_int_equal(nvml_return_to_errno(6), -ENODEV);
        assert_int_equal(nvml_return_to_errno(4), -EPERM);
        assert_int_equal(nvml_return_to_errno(2), -EINVAL);
        assert_int_equal(nvml_return_to_errno(999), -EIO);

        assert_string_equal(nvml_mode_to_string(NVML_MODE_EQUAL), "equal");
        assert_string_equal(nvml_mode_to_string(NVML_MODE_MIXED), "mixed");
        assert_string_equal(nvml_mode_to_string(NVML_MODE_UNKNOWN), "unknown");
        static const char *const reasons[] = {"ok",          "equal_size", "error",
                                              "unavailable", "timeout",    "stuck"};
        for (int f = 0; f < _NVML_FALLBACK_MAX; f++)
                assert_string_equal(nvml_fallback_to_string(f), reasons[f]);
}

/*
 * NVML-3, NVML-3a: the project's declarations against the layouts NVIDIA publishes in nvml.h
 * (nvmlVgpuHeterogeneousMode_v1_t and nvmlVgpuPlacementList_v1_t since NVML 12.4, driver R550;
 * nvmlVgpuPlacementList_v2_t since NVML 12.8, driver R570) on LP64: every field's offset and
 * size, each struct's size, and the version word NVIDIA's NVML_STRUCT_VERSION gives it
 * (sizeof | version << 24). The figures below are NVIDIA's, written out by hand, so an edit of
 * nvml.h that moves a field, drops the padding before the pointer or changes a word fails here.
 */
typedef struct PublishedField {
        const char *name;
        size_t offset, size;       /* ours: offsetof, sizeof */
        size_t nv_offset, nv_size; /* NVIDIA's */
} PublishedField;

#define FIELD(type, field, nv_off, nv_sz)                                                       \
        {                                                                                       \
#type "." #field, offsetof(type, field), sizeof(((type *)NULL)->field), nv_off, \
                    nv_sz                                                                       \
        }

static void test_struct_layouts(void **state)
{
#if !defined(__LP64__)
        skip();
#endif
        static const PublishedField fields[] = {
            FIELD(nvmlVgpuHeterogeneousMode_v1_t, version, 0, 4),
            FIELD(nvmlVgpuHeterogeneousMode_v1_t, mode, 4, 4),
            FIELD(nvmlVgpuPlacementList_v1_t, version, 0, 4),
            FIELD(nvmlVgpuPlacementList_v1_t, placementSize, 4, 4),
            FIELD(nvmlVgpuPlacementList_v1_t, count, 8, 4),
            FIELD(nvmlVgpuPlacementList_v1_t, placementIds, 16, 8),
            FIELD(nvmlVgpuPlacementList_v2_t, version, 0, 4),
            FIELD(nvmlVgpuPlacementList_v2_t, placementSize, 4, 4),
            FIELD(nvmlVgpuPlacementList_v2_t, count, 8, 4),
            FIELD(nvmlVgpuPlacementList_v2_t, placementIds, 16, 8),
            FIELD(nvmlVgpuPlacementList_v2_t, mode, 24, 4),
        };
        for (size_t i = 0; i < ELEMENTSOF(fields); i++) {
                if (fields[i].offset != fields[i].nv_offset || fields[i].size != fields[i].nv_size)
                        fail_msg("%s: offset %zu size %zu, NVIDIA's offset %zu size %zu",
                                 fields[i].name, fields[i].offset, fields[i].size,
                                 fields[i].nv_offset, fields[i].nv_size);
        }

        static const struct {
                const char *name;
                size_t size, nv_size;
                unsigned word, nv_word, ver;
        } structs[] = {
            {"nvmlVgpuHeterogeneousMode_v1_t", sizeof(nvmlVgpuHeterogeneousMode_v1_t), 8,
             NVML_VGPU_HETEROGENEOUS_MODE_V1, 0x01000008u, 1},
            {"nvmlVgpuPlacementList_v1_t", sizeof(nvmlVgpuPlacementList_v1_t), 24,
             NVML_VGPU_PLACEMENT_LIST_V1, 0x01000018u, 1},
            {"nvmlVgpuPlacementList_v2_t", sizeof(nvmlVgpuPlacementList_v2_t), 32,
             NVML_VGPU_PLACEMENT_LIST_V2, 0x02000020u, 2},
        };
        for (size_t i = 0; i < ELEMENTSOF(structs); i++) {
                if (structs[i].size != structs[i].nv_size)
                        fail_msg("%s: %zu bytes, NVIDIA's %zu", structs[i].name, structs[i].size,
                                 structs[i].nv_size);
                if (structs[i].word != structs[i].nv_word)
                        fail_msg("%s: version word 0x%08x, NVIDIA's 0x%08x", structs[i].name,
                                 structs[i].word, structs[i].nv_word);
                /* NVIDIA's macro, applied to NVIDIA's size: the published word is consistent. */
                assert_int_equal(structs[i].nv_word,
                                 (unsigned)structs[i].nv_size | (structs[i].ver << 24));
        }

        assert_int_equal(sizeof(nvmlReturn_t), sizeof(int));
        assert_int_equal(sizeof(nvmlVgpuTypeId_t), sizeof(unsigned int));
        /* The list's mode input (NVML_VGPU_PGPU_HETEROGENEOUS_MODE), not the mode query's. */
        assert_int_equal(NVML_VGPU_PGPU_HETEROGENEOUS_MODE, 0);
}

/* NVML-1, NVML-2, NVML-11, NVML-12, NVML-13: a missing library makes NVML unavailable for the
 * whole host; an empty nvml_library disables it. */
static void test_missing_library(void **state)
{
        Harness h;
        harness_init(&h, "/nonexistent/libnvidia-ml.so.1");
        refresh(&h, true);
        const char *error = NULL;
        assert_int_equal(nvml_client_get_host_fallback(h.client, &error),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_non_null(startswith(error, "load NVML library /nonexistent/libnvidia-ml.so.1: "));
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_int_equal(nvml_client_get_gpu_mode(h.client, E3), NVML_MODE_UNKNOWN);
        assert_false(nvml_client_is_initialised(h.client));
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_UNAVAILABLE], 1);
        _cleanup_free_ char *log = take_log(&h);
        assert_non_null(strstr(log, "<4>NVML placements fall back to sysfs lists "
                                    "reason=unavailable error=\"load NVML library "));
        harness_done(&h);

        harness_init(&h, "");
        refresh(&h, true);
        assert_int_equal(nvml_client_get_host_fallback(h.client, &error),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_string_equal(error, "NVML is disabled (nvml_library is empty)");
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_UNAVAILABLE], 1);
        harness_done(&h);
}

/* NVML-1, NVML-2: a library without one NVML-4 function is unavailable. */
static void test_missing_function(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.partial_path);
        refresh(&h, true);
        const char *error = NULL;
        assert_int_equal(nvml_client_get_host_fallback(h.client, &error),
                         NVML_FALLBACK_UNAVAILABLE);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want,
                                   "NVML library %s lacks "
                                   "nvmlDeviceGetVgpuTypeCreatablePlacements",
                                   stub.partial_path),
                         0);
        assert_string_equal(error, want);
        assert_int_equal(stub.calls("nvmlInit_v2"), 0);
        harness_done(&h);
}

/* NVML-2: a failed nvmlInit_v2 is unavailable; only requests with init retry it; success logs
 * `NVML initialised` with the driver version. */
static void test_init_failure_retried(void **state)
{
        stub_default_host();
        stub.inject("nvmlInit_v2", 9, 1);
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);
        const char *error = NULL;
        assert_int_equal(nvml_client_get_host_fallback(h.client, &error),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_string_equal(error, "nvmlInit_v2: DRIVER_NOT_LOADED");

        refresh(&h, false); /* a refresh after a configure: no retry */
        assert_int_equal(nvml_client_get_host_fallback(h.client, &error),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_string_equal(error, "NVML is not initialised");
        assert_int_equal(stub.calls("nvmlInit_v2"), 1);
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_UNAVAILABLE], 2);
        free(take_log(&h));

        refresh(&h, true); /* the reconcile pass retries */
        assert_int_equal(stub.calls("nvmlInit_v2"), 2);
        assert_true(nvml_client_is_initialised(h.client));
        assert_string_equal(nvml_client_get_driver_version(h.client), "580.159.01");
        assert_int_equal(nvml_client_get_host_fallback(h.client, NULL), NVML_FALLBACK_NONE);
        _cleanup_free_ char *log = take_log(&h);
        assert_non_null(strstr(log, "<6>NVML initialised driver_version=580.159.01\n"));
        assert_non_null(strstr(log, "<6>NVML placements recovered\n"));

        refresh(&h, true); /* initialised: not again */
        assert_int_equal(stub.calls("nvmlInit_v2"), 2);
        harness_done(&h);
        assert_int_equal(stub.shutdowns(), 1); /* NVML-17 */
}

/* NVML-7, NVML-8, NVML-11, NVML-12, NVML-13, NVML-14, GEN-3: a refresh caches mode, catalog,
 * maximum instances and placements; an equal-size GPU falls back alone. */
static void test_refresh_fills_cache(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);

        assert_int_equal(nvml_client_get_host_fallback(h.client, NULL), NVML_FALLBACK_NONE);
        assert_int_equal(nvml_client_get_gpu_mode(h.client, E3), NVML_MODE_MIXED);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL), NVML_FALLBACK_NONE);
        assert_int_equal(nvml_client_get_gpu_mode(h.client, C8), NVML_MODE_EQUAL);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, C8, NULL),
                         NVML_FALLBACK_EQUAL_SIZE);

        NvmlPlacements p;
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1150, &p), 0);
        assert_int_equal(p.count, 2);
        assert_int_equal(p.placement_size, 4);
        assert_true(p.started == 500 * NSEC_PER_SEC);
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1145, &p), 0);
        assert_int_equal(p.count, 5);
        assert_int_equal(p.placement_size, 1);
        assert_int_equal(nvml_client_get_cached_placements(h.client, C8, 1147, &p), -ENOENT);
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 9999, &p), -ENOENT);

        const char *name;
        assert_int_equal(nvml_client_get_gpu_name(h.client, C8, &name), 0);
        assert_string_equal(name, "NVIDIA L40S");
        const NvmlTypeInfo *cat;
        size_t n;
        assert_int_equal(nvml_client_get_gpu_catalog(h.client, E3, &cat, &n), 0);
        assert_int_equal(n, 2);
        assert_int_equal(cat[1].type_id, 1150);
        assert_string_equal(cat[1].name, "NVIDIA L40S-4Q");
        assert_true(cat[1].framebuffer_bytes == 4 * GIB);
        assert_int_equal(cat[1].max_instances, 12);

        /* NVML-8: the supported-types count is learnt with a count of 0 first. */
        assert_int_equal(stub.calls("nvmlDeviceGetSupportedVgpus"), 4);
        /* GEN-3: every call on one thread, not this one. */
        assert_int_equal(stub.single_caller(pthread_self()), 1);

        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_EQUAL_SIZE], 1);
        _cleanup_free_ char *log = take_log(&h);
        assert_non_null(strstr(log, "<4>NVML placements fall back to sysfs lists "
                                    "gpu=0001:c8:00.0 reason=equal_size\n"));
        assert_null(strstr(log, "gpu=0000:e3:00.0"));

        /* NVML-12, NVML-13: counted every round, logged once. */
        stub.set_free(E3, 1150, 1);
        refresh(&h, false);
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_EQUAL_SIZE], 2);
        _cleanup_free_ char *log2 = take_log(&h);
        assert_string_equal(log2, "");
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1150, &p), 0);
        assert_int_equal(p.count, 1);
        /* NVML-6: handles are cached per PF. */
        assert_int_equal(stub.calls("nvmlDeviceGetHandleByPciBusId_v2"), 2);

        /* NVML-7, NVML-13: a mode change between refreshes. */
        stub.set_mode(C8, 1);
        refresh(&h, false);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, C8, NULL), NVML_FALLBACK_NONE);
        _cleanup_free_ char *log3 = take_log(&h);
        assert_non_null(strstr(log3, "<4>vGPU mode of GPU 0001:c8:00.0 changed from equal to "
                                     "mixed\n"));
        assert_non_null(strstr(log3, "<6>NVML placements recovered gpu=0001:c8:00.0\n"));
        harness_done(&h);
}

/* NVML-8: INSUFFICIENT_SIZE is retried once with the returned count; a second one is an
 * error for that GPU alone (NVML-11). */
static void test_insufficient_size(void **state)
{
        stub.reset();
        stub.add_gpu(E3, "NVIDIA L40S", 1);
        stub.add_type(E3, 1150, "NVIDIA L40S-4Q", 4 * GIB, 2, 3, 4); /* max 2, yet 3 free */
        stub.add_gpu(C8, "NVIDIA L40S", 0);
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);
        NvmlPlacements p;
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1150, &p), 0);
        assert_int_equal(p.count, 3);
        assert_int_equal(stub.calls("nvmlDeviceGetVgpuTypeCreatablePlacements"), 2);

        stub.inject("nvmlDeviceGetVgpuTypeCreatablePlacements", 7, 2);
        refresh(&h, false);
        const char *error = NULL;
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, &error), NVML_FALLBACK_ERROR);
        assert_string_equal(error, "nvmlDeviceGetVgpuTypeCreatablePlacements(0000:e3:00.0, type "
                                   "1150): INSUFFICIENT_SIZE");
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_ERROR], 1);
        _cleanup_free_ char *log = take_log(&h);
        assert_non_null(strstr(log, "<4>NVML placements fall back to sysfs lists "
                                    "gpu=0000:e3:00.0 reason=error error=\"nvmlDevice"));
        /* The host and the cached answer stay. */
        assert_int_equal(nvml_client_get_host_fallback(h.client, NULL), NVML_FALLBACK_NONE);
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1150, &p), 0);
        assert_int_equal(p.count, 3);
        harness_done(&h);
}

/* NVML-8: NOT_SUPPORTED for one type on a mixed-size GPU means 0 placements. NVML-7: when every
 * type answers NOT_SUPPORTED the mode is re-queried in the same request. */
static void test_not_supported(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);

        stub.inject("nvmlDeviceGetVgpuTypeCreatablePlacements", 3, 1);
        claim_query(&h);
        WAIT_UNTIL(&h, h.answers == 1);
        assert_int_equal(h.host[0], NVML_FALLBACK_NONE);
        assert_int_equal(h.gpu_fallback[0], NVML_FALLBACK_NONE);
        assert_int_equal(h.count_1150[0], 0);
        unsigned modes = stub.calls("nvmlDeviceGetVgpuHeterogeneousMode");

        /* The card left mixed-size mode behind our back: every type is NOT_SUPPORTED now. */
        stub.set_mode(E3, 0);
        free(take_log(&h));
        claim_query(&h);
        WAIT_UNTIL(&h, h.answers == 2);
        assert_int_equal(stub.calls("nvmlDeviceGetVgpuHeterogeneousMode"), modes + 1);
        assert_int_equal(h.gpu_fallback[1], NVML_FALLBACK_EQUAL_SIZE);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL),
                         NVML_FALLBACK_EQUAL_SIZE);
        assert_int_equal(nvml_client_get_gpu_mode(h.client, E3), NVML_MODE_EQUAL);
        _cleanup_free_ char *log = take_log(&h);
        assert_non_null(strstr(log, "<4>vGPU mode of GPU 0000:e3:00.0 changed from mixed to "
                                    "equal\n"));
        assert_non_null(strstr(log, "<4>NVML placements fall back to sysfs lists "
                                    "gpu=0000:e3:00.0 reason=equal_size\n"));
        harness_done(&h);
}

/* NVML-6: GPU_IS_LOST drops the PF handle, so the next query looks it up again; the GPU falls
 * back alone meanwhile, and a claim-time query re-reads its mode (NVML-7). */
static void test_handle_drop(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);
        refresh(&h, false);
        assert_int_equal(stub.calls("nvmlDeviceGetHandleByPciBusId_v2"), 2);

        NvmlGpuRequest g;
        nvmlVgpuTypeId_t types[] = {1150, 4242};
        assert_int_equal(nvml_client_prepare_gpu_request(h.client, E3, types, 2, &g), 0);
        assert_false(g.query_mode);
        assert_int_equal(g.max_instances[0], 12); /* NVML-8: cached at the refresh */
        assert_int_equal(g.max_instances[1], 0);
        nvml_gpu_request_done(&g);
        assert_int_equal(nvml_client_prepare_gpu_request(h.client, "0000:99:00.0", types, 1, &g),
                         -ENOENT);

        stub.inject("nvmlDeviceGetVgpuHeterogeneousMode", 15, 1);
        free(take_log(&h));
        refresh(&h, false);
        const char *error = NULL;
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, &error), NVML_FALLBACK_ERROR);
        assert_string_equal(error, "nvmlDeviceGetVgpuHeterogeneousMode(0000:e3:00.0): GPU_IS_LOST");
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, C8, NULL),
                         NVML_FALLBACK_EQUAL_SIZE);
        assert_int_equal(nvml_client_prepare_gpu_request(h.client, E3, types, 1, &g), 0);
        assert_true(g.query_mode);
        nvml_gpu_request_done(&g);

        refresh(&h, false);
        assert_int_equal(stub.calls("nvmlDeviceGetHandleByPciBusId_v2"), 3);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL), NVML_FALLBACK_NONE);
        _cleanup_free_ char *log = take_log(&h);
        assert_non_null(strstr(log, "<4>NVML placements fall back to sysfs lists "
                                    "gpu=0000:e3:00.0 reason=error "
                                    "error=\"nvmlDeviceGetVgpuHeterogeneousMode(0000:e3:00.0): "
                                    "GPU_IS_LOST\"\n"));
        assert_non_null(strstr(log, "<6>NVML placements recovered gpu=0000:e3:00.0\n"));
        /* Other losses of the device drop it too. */
        stub.inject("nvmlDeviceGetName", 28, 1);
        refresh(&h, false);
        stub.inject("nvmlVgpuTypeGetMaxInstances", 6, 1);
        refresh(&h, false);
        refresh(&h, false);
        assert_int_equal(stub.calls("nvmlDeviceGetHandleByPciBusId_v2"), 5);
        harness_done(&h);
}

/* NVML-11: ARGUMENT_VERSION_MISMATCH falls back the whole host, counted as `unavailable`. */
static void test_version_mismatch(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);
        stub.inject("nvmlDeviceGetVgpuTypeCreatablePlacements", 25, 1);
        refresh(&h, false);
        const char *error = NULL;
        assert_int_equal(nvml_client_get_host_fallback(h.client, &error),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_string_equal(error, "nvmlDeviceGetVgpuTypeCreatablePlacements(0000:e3:00.0, type "
                                   "1145): ARGUMENT_VERSION_MISMATCH");
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_UNAVAILABLE], 1);
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_ERROR], 0);
        /* NVML-3a: v2 worked on this library, so it is not swapped for v1 now. */
        assert_int_equal(stub.placement_calls(1), 0);
        harness_done(&h);
}

/*
 * NVML-3a: an R550-style library refuses the v2 list; the client retries once with v1, keeps
 * v1 for the library's lifetime (v2 is never sent again) and says so once. The GPU keeps its
 * NVML placements: no fallback, nothing counted.
 */
static void test_placement_list_v1(void **state)
{
        stub_default_host();
        stub.set_placement_versions(LIB_R550);
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);

        assert_int_equal(nvml_client_get_host_fallback(h.client, NULL), NVML_FALLBACK_NONE);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL), NVML_FALLBACK_NONE);
        assert_int_equal(nvml_client_get_gpu_mode(h.client, E3), NVML_MODE_MIXED);
        NvmlPlacements p;
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1145, &p), 0);
        assert_int_equal(p.count, 5);
        assert_int_equal(p.placement_size, 1);
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1150, &p), 0);
        assert_int_equal(p.count, 2);
        assert_int_equal(p.placement_size, 4);
        /* One refused v2 call, then v1 for both of E3's types; C8 is equal-size (NVML-7). */
        assert_int_equal(stub.placement_calls(2), 1);
        assert_int_equal(stub.placement_calls(1), 2);
        for (int f = NVML_FALLBACK_UNAVAILABLE; f < _NVML_FALLBACK_MAX; f++)
                assert_int_equal(nvml_client_get_counters(h.client)->total[f], 0);
        _cleanup_free_ char *log = take_log(&h);
        assert_int_equal(occurrences(log, "<6>NVML placement list v1 (driver 580.159.01)\n"), 1);
        assert_int_equal(occurrences(log, "NVML placement list"), 1);
        assert_null(strstr(log, "fall back to sysfs lists reason=unavailable"));

        /* Remembered: the next refresh and a claim-time query send v1 straight away. */
        stub.set_free(E3, 1150, 1);
        refresh(&h, false);
        claim_query(&h);
        WAIT_UNTIL(&h, h.answers == 1);
        assert_int_equal(h.host[0], NVML_FALLBACK_NONE);
        assert_int_equal(h.gpu_fallback[0], NVML_FALLBACK_NONE);
        assert_int_equal(h.count_1150[0], 1);
        assert_int_equal(stub.placement_calls(2), 1);
        assert_int_equal(stub.placement_calls(1), 5);
        _cleanup_free_ char *log2 = take_log(&h);
        assert_null(strstr(log2, "NVML placement list"));
        harness_done(&h);
}

/* NVML-3a: an R570+ library takes v2; v1 is never sent, and v2 is logged once. */
static void test_placement_list_v2(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);
        refresh(&h, false);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL), NVML_FALLBACK_NONE);
        assert_int_equal(stub.placement_calls(2), 4);
        assert_int_equal(stub.placement_calls(1), 0);
        _cleanup_free_ char *log = take_log(&h);
        assert_int_equal(occurrences(log, "<6>NVML placement list v2 (driver 580.159.01)\n"), 1);
        assert_int_equal(occurrences(log, "NVML placement list"), 1);
        harness_done(&h);
}

/*
 * NVML-3a, NVML-11, NVML-12, NVML-13: a library that refuses both lists falls back the whole
 * host as `unavailable` with the warning; nothing is remembered, so every round tries v2 and
 * v1 again, and a library that then takes v1 brings the host back.
 */
static void test_placement_list_both_refused(void **state)
{
        stub_default_host();
        stub.set_placement_versions(LIB_NEITHER);
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);

        static const char text[] = "nvmlDeviceGetVgpuTypeCreatablePlacements(0000:e3:00.0, type "
                                   "1145): ARGUMENT_VERSION_MISMATCH (placement list v2 and v1)";
        const char *error = NULL;
        assert_int_equal(nvml_client_get_host_fallback(h.client, &error),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_string_equal(error, text);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, C8, NULL),
                         NVML_FALLBACK_UNAVAILABLE);
        assert_int_equal(nvml_client_get_gpu_mode(h.client, E3), NVML_MODE_UNKNOWN);
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_UNAVAILABLE], 1);
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_ERROR], 0);
        assert_int_equal(stub.placement_calls(2), 1);
        assert_int_equal(stub.placement_calls(1), 1);
        _cleanup_free_ char *log = take_log(&h);
        assert_int_equal(occurrences(log, "<4>NVML placements fall back to sysfs lists "
                                          "reason=unavailable error=\"nvmlDeviceGetVgpuType"
                                          "CreatablePlacements(0000:e3:00.0, type 1145): "
                                          "ARGUMENT_VERSION_MISMATCH (placement list v2 and "
                                          "v1)\"\n"),
                         1);
        assert_null(strstr(log, "NVML placement list v"));
        /* NVML-2: the library initialised although its first request fell back the host. */
        assert_true(nvml_client_is_initialised(h.client));
        assert_string_equal(nvml_client_get_driver_version(h.client), "580.159.01");
        assert_non_null(strstr(log, "<6>NVML initialised driver_version=580.159.01\n"));

        /* The next round tries both again; counted, not logged again (NVML-12, NVML-13). */
        refresh(&h, false);
        assert_int_equal(stub.placement_calls(2), 2);
        assert_int_equal(stub.placement_calls(1), 2);
        assert_int_equal(nvml_client_get_counters(h.client)->total[NVML_FALLBACK_UNAVAILABLE], 2);
        _cleanup_free_ char *log2 = take_log(&h);
        assert_string_equal(log2, "");

        stub.set_placement_versions(LIB_R550);
        refresh(&h, false);
        assert_int_equal(nvml_client_get_host_fallback(h.client, NULL), NVML_FALLBACK_NONE);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL), NVML_FALLBACK_NONE);
        _cleanup_free_ char *log3 = take_log(&h);
        assert_non_null(strstr(log3, "<6>NVML placements recovered\n"));
        assert_non_null(strstr(log3, "<6>NVML placement list v1 (driver 580.159.01)\n"));
        harness_done(&h);
}

/*
 * NVML-7: NOT_SUPPORTED from the placement call is not proof of equal-size mode. Every type
 * refused on a GPU whose mode query still reads 1 leaves it mixed-size with 0 placements of
 * each type, no fallback and no mode warning; the mode query alone turns it equal-size, on
 * the v1 list (R550) as on v2.
 */
static void test_not_supported_is_not_equal_size(void **state)
{
        for (int lib = 0; lib < 2; lib++) {
                stub_default_host();
                stub.set_placement_versions(lib == 0 ? LIB_R570 : LIB_R550);
                Harness h;
                harness_init(&h, stub.path);
                refresh(&h, true);
                free(take_log(&h));

                stub.inject("nvmlDeviceGetVgpuTypeCreatablePlacements", 3, -1);
                unsigned modes = stub.calls("nvmlDeviceGetVgpuHeterogeneousMode");
                refresh(&h, false);
                /* The refresh's own mode query, and the re-query once every type refused. */
                assert_int_equal(stub.calls("nvmlDeviceGetVgpuHeterogeneousMode"), modes + 3);
                assert_int_equal(nvml_client_get_gpu_mode(h.client, E3), NVML_MODE_MIXED);
                assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL),
                                 NVML_FALLBACK_NONE);
                NvmlPlacements p;
                assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1145, &p), 0);
                assert_int_equal(p.count, 0);
                assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1150, &p), 0);
                assert_int_equal(p.count, 0);
                assert_int_equal(
                    nvml_client_get_counters(h.client)->total[NVML_FALLBACK_EQUAL_SIZE], 2);
                _cleanup_free_ char *log = take_log(&h);
                assert_null(strstr(log, "gpu=0000:e3:00.0"));
                assert_null(strstr(log, "vGPU mode of GPU 0000:e3:00.0"));

                /* The same at claim time: a claim sees 0 placements, not a fallback. */
                claim_query(&h);
                WAIT_UNTIL(&h, h.answers == 1);
                assert_int_equal(h.gpu_fallback[0], NVML_FALLBACK_NONE);
                assert_int_equal(h.count_1150[0], 0);

                /* Now the mode query reads 0: equal-size, from the mode query. */
                stub.set_mode(E3, 0);
                claim_query(&h);
                WAIT_UNTIL(&h, h.answers == 2);
                assert_int_equal(h.gpu_fallback[1], NVML_FALLBACK_EQUAL_SIZE);
                assert_int_equal(nvml_client_get_gpu_mode(h.client, E3), NVML_MODE_EQUAL);
                _cleanup_free_ char *log2 = take_log(&h);
                assert_non_null(strstr(log2, "<4>vGPU mode of GPU 0000:e3:00.0 changed from "
                                             "mixed to equal\n"));
                harness_done(&h);
        }
}

/*
 * NVML-7: the mode is re-queried before a claim-time query when the cached mode may be stale:
 * the GPU's last placement call failed, or the mode was never read; not after a good answer.
 */
static void test_claim_time_mode_requery(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        NvmlGpuRequest g;
        nvmlVgpuTypeId_t types[] = {1150};
        assert_int_equal(nvml_client_prepare_gpu_request(h.client, E3, types, 1, &g), 0);
        assert_true(g.query_mode); /* never read */
        nvml_gpu_request_done(&g);

        refresh(&h, true);
        assert_int_equal(nvml_client_prepare_gpu_request(h.client, E3, types, 1, &g), 0);
        assert_false(g.query_mode);
        nvml_gpu_request_done(&g);

        stub.inject("nvmlDeviceGetVgpuTypeCreatablePlacements", 999, 1);
        claim_query(&h);
        WAIT_UNTIL(&h, h.answers == 1);
        assert_int_equal(h.gpu_fallback[0], NVML_FALLBACK_ERROR);
        assert_string_equal(h.gpu_error[0], "nvmlDeviceGetVgpuTypeCreatablePlacements("
                                            "0000:e3:00.0, type 1150): UNKNOWN");
        assert_int_equal(nvml_client_prepare_gpu_request(h.client, E3, types, 1, &g), 0);
        assert_true(g.query_mode);
        nvml_gpu_request_done(&g);

        /* The re-query runs in the claim's request, and a good answer clears the mark. */
        unsigned modes = stub.calls("nvmlDeviceGetVgpuHeterogeneousMode");
        claim_query(&h);
        WAIT_UNTIL(&h, h.answers == 2);
        assert_int_equal(stub.calls("nvmlDeviceGetVgpuHeterogeneousMode"), modes + 1);
        assert_int_equal(h.gpu_fallback[1], NVML_FALLBACK_NONE);
        assert_int_equal(h.count_1150[1], 2);
        assert_int_equal(nvml_client_prepare_gpu_request(h.client, E3, types, 1, &g), 0);
        assert_false(g.query_mode);
        nvml_gpu_request_done(&g);
        harness_done(&h);
}

/* NVML-9, NVML-10, NVML-11, NVML-12, NVML-13: a hung call costs one `timeout`; the requests
 * queued behind it fail with `stuck` at once without entering the library, new ones too, until
 * the call returns; its late result is discarded. */
static void test_hang_costs_one_timeout(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);
        free(take_log(&h));
        unsigned placements = stub.calls("nvmlDeviceGetVgpuTypeCreatablePlacements");

        stub.hang(true);
        claim_query(&h); /* enters the library and hangs */
        wait_hung(1);
        for (int i = 0; i < 3; i++) {
                advance(&h, NSEC_PER_SEC);
                claim_query(&h); /* queued behind it */
        }
        advance(&h, 2 * NSEC_PER_SEC); /* 5 s after the first was queued */
        WAIT_UNTIL(&h, h.answers == 4);
        assert_int_equal(h.host[0], NVML_FALLBACK_TIMEOUT);
        assert_string_equal(h.host_error[0], "NVML request timed out after 5s");
        for (int i = 1; i < 4; i++) {
                assert_int_equal(h.host[i], NVML_FALLBACK_STUCK);
                assert_string_equal(h.host_error[i],
                                    "NVML thread stuck in a call past its deadline");
        }
        assert_int_equal(stub.hung_calls(), 1);

        /* New requests fail at once, without entering the library. */
        claim_query(&h);
        refresh(&h, true);
        WAIT_UNTIL(&h, h.answers == 5);
        assert_int_equal(h.host[4], NVML_FALLBACK_STUCK);
        assert_int_equal(stub.hung_calls(), 1);
        assert_int_equal(nvml_client_get_host_fallback(h.client, NULL), NVML_FALLBACK_STUCK);
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, NULL), NVML_FALLBACK_STUCK);
        assert_int_equal(nvml_client_get_gpu_mode(h.client, E3), NVML_MODE_UNKNOWN);
        const NvmlFallbackCounters *k = nvml_client_get_counters(h.client);
        assert_int_equal(k->total[NVML_FALLBACK_TIMEOUT], 1);
        assert_int_equal(k->total[NVML_FALLBACK_STUCK], 5);
        _cleanup_free_ char *log = take_log(&h);
        assert_non_null(strstr(log, "<4>NVML placements fall back to sysfs lists reason=timeout "
                                    "error=\"NVML request timed out after 5s\"\n"));
        const char *stuck_line = "<4>NVML placements fall back to sysfs lists reason=stuck "
                                 "error=\"NVML thread stuck in a call past its deadline\"\n";
        const char *first = strstr(log, stuck_line);
        assert_non_null(first);
        assert_null(strstr(first + 1, stuck_line)); /* logged once */

        /* The call returns: its answer reaches nobody, and NVML serves again. */
        stub.hang(false);
        TestWait w = test_wait_begin(h.event, WAIT_LIMIT);
        for (;;) {
                claim_query(&h);
                int before = h.answers;
                WAIT_UNTIL(&h, h.answers == before + 1);
                if (h.host[h.answers - 1] == NVML_FALLBACK_NONE)
                        break;
                /* Still stuck: a turn of the loop, in which the call may come back, then again. */
                assert_int_equal(test_wait_step(&w), 0);
        }
        assert_int_equal(h.count_1150[h.answers - 1], 2);
        for (int i = 0; i < h.answers - 1; i++)
                assert_int_not_equal(h.host[i], NVML_FALLBACK_NONE);
        /* Two calls entered: the hung one and the last; no queued request ever did. */
        assert_int_equal(stub.calls("nvmlDeviceGetVgpuTypeCreatablePlacements"), placements + 2);
        _cleanup_free_ char *log2 = take_log(&h);
        assert_non_null(strstr(log2, "<6>NVML placements recovered\n"));
        harness_done(&h);
        assert_int_equal(stub.shutdowns(), 1); /* NVML-17: not stuck any more */
}

/* Attaching: once only; freeing the client takes its sources, and its slot's, off the loop. */
static void test_attach_event(void **state)
{
        Harness h;
        harness_init(&h, "");
        assert_int_equal(nvml_client_attach_event(h.client, h.event), -EBUSY);
        assert_int_equal(nvml_client_attach_event(NULL, h.event), -EINVAL);
        nvml_client_free(TAKE_PTR(h.client));
        assert_int_equal(sd_event_run(h.event, 0), 0);
        harness_done(&h);
}

/* NVML-17: a stuck thread gets no nvmlShutdown, and freeing does not wait for it. */
static void test_free_while_stuck(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);
        stub.hang(true);
        claim_query(&h);
        wait_hung(1);
        advance(&h, 5 * NSEC_PER_SEC);
        WAIT_UNTIL(&h, h.answers == 1);
        assert_int_equal(h.host[0], NVML_FALLBACK_TIMEOUT);
        harness_done(&h);
        assert_int_equal(stub.shutdowns(), 0);
        stub.hang(false);
        /* The detached thread leaves the library, drops the session and ends by itself. */
        wait_hung(0);
        assert_int_equal(stub.shutdowns(), 0);
}

/* NVML-15: refreshes are coalesced: one at a time, and requests meanwhile cause exactly one
 * more run. */
static void test_refresh_coalesced(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);
        int before = h.refreshed;
        unsigned names = stub.calls("nvmlDeviceGetName");

        stub.hang(true);
        assert_int_equal(nvml_client_request_refresh(h.client, false), 0);
        wait_hung(1);
        for (int i = 0; i < 5; i++)
                assert_int_equal(nvml_client_request_refresh(h.client, false), 0);
        assert_true(nvml_client_refresh_is_running(h.client));
        stub.hang(false);
        WAIT_UNTIL(&h, h.refreshed == before + 2 && !nvml_client_refresh_is_running(h.client));
        assert_int_equal(stub.calls("nvmlDeviceGetName"), names + 4); /* 2 runs × 2 GPUs */
        assert_int_equal(nvml_client_dispatch(h.client), 0);
        assert_int_equal(h.refreshed, before + 2);
        harness_done(&h);
}

/* NVML-15, NVML-16: claim-time answers and refreshes update the cache by one rule: an entry
 * is replaced only by an answer whose query started later. */
static void test_newer_query_wins(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true); /* started at 500 s */
        NvmlPlacements first;
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1150, &first), 0);
        assert_true(first.started == 500 * NSEC_PER_SEC);

        /* A claim-time answer from a later query updates the cache. */
        test_clock_set(&h.fc, 600 * NSEC_PER_SEC);
        stub.set_free(E3, 1150, 1);
        claim_query(&h);
        WAIT_UNTIL(&h, h.answers == 1);
        assert_int_equal(h.count_1150[0], 1);
        NvmlPlacements p;
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1150, &p), 0);
        assert_int_equal(p.count, 1);
        assert_true(p.started == 600 * NSEC_PER_SEC);
        assert_true(p.seq > first.seq);

        /* Queries started within one clock tick are still ordered. */
        stub.set_free(E3, 1150, 0);
        refresh(&h, false);
        NvmlPlacements q;
        assert_int_equal(nvml_client_get_cached_placements(h.client, E3, 1150, &q), 0);
        assert_int_equal(q.count, 0);
        assert_true(q.started == p.started);
        assert_true(q.seq > p.seq);
        harness_done(&h);
}

/* DISC-15, DISC-17, DISC-18: discovery's seam answers from the cache. */
static void test_gpu_seam(void **state)
{
        stub_default_host();
        Harness h;
        harness_init(&h, stub.path);
        GpuNvml seam;
        nvml_client_fill_gpu_seam(h.client, &seam);
        assert_int_equal(seam.usable(seam.userdata, E3), 0); /* nothing cached yet */

        refresh(&h, true);
        assert_int_equal(seam.usable(seam.userdata, E3), 1);
        assert_int_equal(seam.usable(seam.userdata, C8), 1); /* either mode */
        assert_int_equal(seam.usable(seam.userdata, "0000:99:00.0"), 0);
        _cleanup_free_ char *name = NULL;
        assert_int_equal(seam.device_name(seam.userdata, E3, &name), 0);
        assert_string_equal(name, "NVIDIA L40S");
        GpuNvmlType *types = NULL;
        size_t n = 0;
        assert_int_equal(seam.supported_types(seam.userdata, E3, &types, &n), 0);
        assert_int_equal(n, 2);
        assert_int_equal(types[0].type_id, 1145);
        assert_string_equal(types[0].name, "NVIDIA L40S-1Q");
        assert_true(types[0].framebuffer_bytes == GIB);
        gpu_nvml_types_free(types, n);
        char *none = NULL;
        assert_int_equal(seam.device_name(seam.userdata, "0000:99:00.0", &none), -ENOENT);
        assert_null(none);

        /* A GPU in `error` and a host in fallback are not usable. */
        stub.inject("nvmlDeviceGetVgpuHeterogeneousMode", 999, 1);
        refresh(&h, false);
        assert_int_equal(seam.usable(seam.userdata, E3), 0);
        assert_int_equal(seam.usable(seam.userdata, C8), 1);
        stub.inject("nvmlDeviceGetVgpuTypeCreatablePlacements", 25, 1);
        refresh(&h, false);
        assert_int_equal(seam.usable(seam.userdata, C8), 0);
        harness_done(&h);
}

/* GEN-5, NVML-8: answers are validated: a type name that fills the 64-byte buffer without a
 * terminator is an error for that GPU. */
static void test_invalid_answers(void **state)
{
        stub.reset();
        stub.add_gpu(E3, "NVIDIA L40S", 1);
        stub.add_type(E3, 1150,
                      "NVIDIA L40S-4Q-with-a-name-that-is-far-too-long-for-sixty-four-bytes",
                      4 * GIB, 12, 2, 4);
        Harness h;
        harness_init(&h, stub.path);
        refresh(&h, true);
        const char *error = NULL;
        assert_int_equal(nvml_client_get_gpu_fallback(h.client, E3, &error), NVML_FALLBACK_ERROR);
        assert_string_equal(error, "nvmlVgpuTypeGetName(0000:e3:00.0, type 1150): invalid name");

        /* Invalid requests. */
        NvmlGpuRequest bad = {.pf = "0000:E3:00.0"};
        NvmlRequest req = {.gpus = &bad, .n_gpus = 1};
        assert_int_equal(nvml_client_query(h.client, &req, answer_cb, &h), -EINVAL);
        char *pfs[] = {"e3"};
        assert_int_equal(nvml_client_set_gpus(h.client, pfs, 1), -EINVAL);
        harness_done(&h);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_return_names),
            cmocka_unit_test(test_struct_layouts),
            cmocka_unit_test(test_attach_event),
            cmocka_unit_test(test_missing_library),
            cmocka_unit_test(test_missing_function),
            cmocka_unit_test(test_init_failure_retried),
            cmocka_unit_test(test_refresh_fills_cache),
            cmocka_unit_test(test_insufficient_size),
            cmocka_unit_test(test_not_supported),
            cmocka_unit_test(test_handle_drop),
            cmocka_unit_test(test_version_mismatch),
            cmocka_unit_test(test_placement_list_v1),
            cmocka_unit_test(test_placement_list_v2),
            cmocka_unit_test(test_placement_list_both_refused),
            cmocka_unit_test(test_not_supported_is_not_equal_size),
            cmocka_unit_test(test_claim_time_mode_requery),
            cmocka_unit_test(test_hang_costs_one_timeout),
            cmocka_unit_test(test_free_while_stuck),
            cmocka_unit_test(test_refresh_coalesced),
            cmocka_unit_test(test_newer_query_wins),
            cmocka_unit_test(test_gpu_seam),
            cmocka_unit_test(test_invalid_answers),
        };
        return cmocka_run_group_tests(tests, load_stub, unload_stub);
}
