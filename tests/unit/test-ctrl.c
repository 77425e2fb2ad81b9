/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of ctrl's Reconciler on fixture trees: a pass discovers through the tracker, scans
 * /proc and refreshes NVML; the start-up pass does not scan; passes never overlap; failures of
 * discovery (DISC-7) and of the scan (DEV-14) are kept, logged once, and cleared by success.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <sys/stat.h>

#include "ctrl/ctrl.h"
#include "testlib.h"

#define PF "0001:c8:00.0"
#define VF "0001:c8:00.4"

typedef struct Fixture {
        TestTree *tree;
        Root *sys, *proc;
        char *dev;
        sd_event *event;
        WorkerPool *pool;
        NvmlClient *nvml;
        GpuTracker *tracker;
        Reconciler *rc;
        unsigned passes, startup_passes;
        bool start_again; /* pass_done asks for one more pass, as the Manager does */
        TestLog log;
} Fixture;

static void on_pass_done(void *userdata, bool startup)
{
        Fixture *f = userdata;
        f->passes++;
        f->startup_passes += startup;
        if (f->start_again) {
                f->start_again = false;
                assert_int_equal(reconciler_start(f->rc, false), 0);
        }
}

static void on_refreshed(NvmlClient *c, void *userdata)
{
        Fixture *f = userdata;
        reconciler_nvml_refreshed(f->rc);
}

/* One L40S with one vendor VF (DISC-4). */
static void put_host(Fixture *f)
{
        assert_int_equal(test_tree_put(f->tree, "0x26b9\n", "sys/bus/pci/devices/%s/device", PF),
                         0);
        assert_int_equal(
            test_tree_put(f->tree, "0\n", "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", VF),
            0);
        assert_int_equal(test_tree_put(f->tree, "ID    : vGPU Name\n1148  : NVIDIA L40S-2Q\n",
                                       "sys/bus/pci/devices/%s/nvidia/creatable_vgpu_types", VF),
                         0);
        assert_int_equal(test_tree_link(f->tree, "../" PF, "sys/bus/pci/devices/%s/physfn", VF), 0);
}

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(test_tree_new("vgpud-ctrl", &f->tree), 0);
        put_host(f);
        assert_int_equal(test_tree_put(f->tree, "580.159.01\n", "sys/module/nvidia/version"), 0);
        assert_int_equal(test_mkdirs_at(f->tree->fd, "proc"), 0);
        assert_int_equal(test_mkdirs_at(f->tree->fd, "dev"), 0);
        assert_int_equal(test_log_start(&f->log), 0);
        log_set_max_level(LOG_LEVEL_INFO);

        _cleanup_free_ char *sys = test_tree_path(f->tree, "sys");
        _cleanup_free_ char *proc = test_tree_path(f->tree, "proc");
        f->dev = test_tree_path(f->tree, "dev");
        assert_int_equal(root_open(sys, &f->sys), 0);
        assert_int_equal(root_open(proc, &f->proc), 0);
        assert_int_equal(sd_event_new(&f->event), 0);
        WorkerPoolConfig pc = WORKER_POOL_CONFIG_SYSFS;
        assert_int_equal(worker_pool_new(&pc, &f->pool), 0);
        assert_int_equal(worker_pool_attach_event(f->pool, f->event), 0);
        /* No library: NVML is unavailable, and its refreshes still end (NVML-11). */
        NvmlClientConfig nc = {.timeout = NSEC_PER_SEC, .refreshed = on_refreshed, .userdata = f};
        assert_int_equal(nvml_client_new(&nc, &f->nvml), 0);
        assert_int_equal(nvml_client_attach_event(f->nvml, f->event), 0);
        GpuTrackerConfig tc = {.sysfs = f->sys, .pool = f->pool};
        assert_int_equal(gpu_tracker_new(&tc, &f->tracker), 0);
        ReconcilerConfig rc = {
            .tracker = f->tracker,
            .pool = f->pool,
            .nvml = f->nvml,
            .proc = f->proc,
            .dev_root = f->dev,
            .pass_done = on_pass_done,
            .userdata = f,
        };
        assert_int_equal(reconciler_new(&rc, &f->rc), 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        Fixture *f = *state;
        worker_pool_free(f->pool);
        nvml_client_free(f->nvml);
        reconciler_free(f->rc);
        gpu_tracker_free(f->tracker);
        sd_event_unref(f->event);
        root_free(f->sys);
        root_free(f->proc);
        free(f->dev);
        test_log_stop(&f->log);
        test_tree_free(f->tree);
        free(f);
        return 0;
}

static void run_pass(Fixture *f, bool startup)
{
        unsigned before = f->passes;
        assert_int_equal(reconciler_start(f->rc, startup), 0);
        assert_true(reconciler_is_running(f->rc));
        TEST_WAIT_UNTIL(f->event, f->passes > before && !reconciler_is_running(f->rc));
}

static unsigned log_count(Fixture *f, const char *needle)
{
        unsigned n = 0;
        for (const char *p = test_log_text(&f->log); (p = strstr(p, needle)); p++)
                n++;
        return n;
}

/* REC-1, DISC-20, NVML-14 */
static void test_pass_discovers(void **state)
{
        Fixture *f = *state;
        run_pass(f, false);
        assert_int_equal(f->passes, 1);
        assert_int_equal(f->startup_passes, 0);
        const GpuHost *h = gpu_tracker_host(f->tracker);
        assert_non_null(h);
        assert_non_null(gpu_host_find_vf(h, VF));
        assert_null(gpu_tracker_error(f->tracker));
        assert_null(reconciler_scan_error(f->rc));
        assert_string_equal(gpu_tracker_driver_version(f->tracker), "580.159.01");
        assert_int_equal(log_count(f, "reconcile pass done"), 0); /* a debug line */
}

/* GEN-10: the start-up pass discovers and fills NVML, and does not scan */
static void test_startup_pass_skips_scan(void **state)
{
        Fixture *f = *state;
        /* A /proc the scan cannot read (DEV-14) goes unnoticed by the start-up pass ... */
        assert_int_equal(test_tree_put(f->tree, "", "proc/1/fd"), 0);
        run_pass(f, true);
        assert_int_equal(f->startup_passes, 1);
        assert_non_null(gpu_tracker_host(f->tracker));
        assert_null(reconciler_scan_error(f->rc));

        /* ... and disables placement from the first real pass on, logged once. */
        run_pass(f, false);
        run_pass(f, false);
        const char *want = "open-handle scan failed: read process 1 file descriptors: Not a "
                           "directory";
        assert_string_equal(reconciler_scan_error(f->rc), want);
        assert_int_equal(log_count(f, "open-handle scan failed; placement disabled"), 1);

        assert_int_equal(test_remove_tree_at(f->tree->fd, "proc/1"), 0);
        run_pass(f, false);
        assert_null(reconciler_scan_error(f->rc));
        assert_int_equal(log_count(f, "open-handle scan succeeded again"), 1);
}

/* REC-1: a pass asked for during another runs right after it, never alongside */
static void test_passes_never_overlap(void **state)
{
        Fixture *f = *state;
        assert_int_equal(reconciler_start(f->rc, false), 0);
        assert_int_equal(reconciler_start(f->rc, false), 0); /* due meanwhile */
        assert_int_equal(reconciler_start(f->rc, false), 0); /* coalesced with the one above */
        TEST_WAIT_UNTIL(f->event, f->passes == 2 && !reconciler_is_running(f->rc));
        assert_int_equal(gpu_tracker_get_stats(f->tracker)->discoveries, 2);

        /* The owner may start the next pass from pass_done (GEN-10's phases do). */
        f->start_again = true;
        assert_int_equal(reconciler_start(f->rc, false), 0);
        TEST_WAIT_UNTIL(f->event, f->passes == 4 && !reconciler_is_running(f->rc));
        assert_int_equal(gpu_tracker_get_stats(f->tracker)->discoveries, 4);
}

/* DISC-7: a failed discovery keeps the table, is logged once, and success is logged once */
static void test_discovery_failure_is_kept(void **state)
{
        Fixture *f = *state;
        run_pass(f, false);
        const GpuHost *h = gpu_tracker_host(f->tracker);
        assert_int_equal(test_remove_tree_at(f->tree->fd, "sys/bus/pci/devices"), 0);
        assert_int_equal(test_tree_put(f->tree, "", "sys/bus/pci/devices"), 0);
        run_pass(f, false);
        run_pass(f, false);
        const char *want = "discover vendor VFIO VFs: list bus/pci/devices: Not a directory";
        assert_string_equal(gpu_tracker_error(f->tracker), want);
        assert_ptr_equal(gpu_tracker_host(f->tracker), h);
        assert_int_equal(log_count(f, "GPU discovery failed; keeping the last VF table"), 1);
        assert_int_equal(f->passes, 3); /* the pass still ends */
        assert_int_equal(log_count(f, "GPU discovery succeeded again"), 0);

        assert_int_equal(test_remove_tree_at(f->tree->fd, "sys/bus/pci/devices"), 0);
        put_host(f);
        run_pass(f, false);
        assert_null(gpu_tracker_error(f->tracker));
        assert_int_equal(log_count(f, "GPU discovery succeeded again"), 1);
        assert_non_null(gpu_host_find_vf(gpu_tracker_host(f->tracker), VF));
}

/* ---- orphan_mdev_check (REC-8's sysfs side) ---------------------------------------------- */

#define MDEV "5a1f7a3e-8c1d-4a57-9a35-2f3c1b7e6d01"
#define MDEV_DIR "sys/bus/mdev/devices/" MDEV

/* Sets the mdev directory's mtime; any entry added to it afterwards moves it to now. */
static void set_mtime(Fixture *f, int64_t sec)
{
        struct timespec times[2] = {{.tv_sec = sec}, {.tv_sec = sec}};
        assert_int_equal(utimensat(f->tree->fd, MDEV_DIR, times, 0), 0);
}

/* An mdev directory whose mtime is at sec, with an iommu_group link to target (NULL: none). */
static void put_mdev(Fixture *f, int64_t sec, const char *target)
{
        assert_int_equal(test_tree_put(f->tree, "nvidia-901\n", MDEV_DIR "/mdev_type_name"), 0);
        if (target)
                assert_int_equal(test_tree_link(f->tree, target, MDEV_DIR "/iommu_group"), 0);
        set_mtime(f, sec);
}

static int check_at(Fixture *f, int64_t sec, char **error)
{
        return orphan_mdev_check(f->sys, MDEV, (Timestamp){.sec = sec}, error);
}

/* REC-8: only an mdev over five minutes old whose IOMMU group resolves may be removed */
static void test_orphan_mdev_age_and_group(void **state)
{
        Fixture *f = *state;
        const int64_t born = 1700000000;
        _cleanup_free_ char *error = NULL;
        put_mdev(f, born, "../../../../kernel/iommu_groups/142");

        assert_int_equal(check_at(f, born + ORPHAN_MDEV_MIN_AGE, &error), 0); /* not over */
        assert_int_equal(check_at(f, born + ORPHAN_MDEV_MIN_AGE + 1, &error), 1);
        assert_int_equal(check_at(f, born - 3600, &error), 0); /* a clock set back: young */
        assert_null(error);

        /* Gone meanwhile: nothing to do, and no failure. */
        assert_int_equal(test_remove_tree_at(f->tree->fd, MDEV_DIR), 0);
        assert_int_equal(check_at(f, born + 3600, &error), 0);
        assert_null(error);
}

/* REC-8: an unresolvable group or an unreadable mtime keeps the mdev, with a reason */
static void test_orphan_mdev_fails_closed(void **state)
{
        Fixture *f = *state;
        const int64_t born = 1700000000;
        _cleanup_free_ char *e1 = NULL, *e2 = NULL, *e3 = NULL, *e4 = NULL;

        put_mdev(f, born, NULL);
        assert_int_equal(check_at(f, born + 3600, &e1), -ENOENT);
        assert_string_equal(e1, "check orphaned mdev " MDEV ": no IOMMU group");

        assert_int_equal(
            test_tree_link(f->tree, "../../kernel/iommu_groups/x1", MDEV_DIR "/iommu_group"), 0);
        set_mtime(f, born);
        assert_int_equal(check_at(f, born + 3600, &e2), -EBADMSG);
        assert_string_equal(e2, "check orphaned mdev " MDEV ": IOMMU group \"x1\" is not a number");

        /* A directory entry that cannot be stat()ed (a link loop): its age is unknown. */
        assert_int_equal(test_remove_tree_at(f->tree->fd, MDEV_DIR), 0);
        assert_int_equal(test_tree_link(f->tree, MDEV, MDEV_DIR), 0);
        assert_int_equal(check_at(f, born + 3600, &e3), -ELOOP);
        assert_string_equal(e3, "check orphaned mdev " MDEV
                                ": read mtime: Too many levels of symbolic links");

        assert_int_equal(orphan_mdev_check(f->sys, "../../x", (Timestamp){0}, &e4), -EINVAL);
        assert_string_equal(e4, "invalid mdev UUID \"../../x\"");
}

/* ---- the sentinel's pure parts (SENT-4, SENT-6) --------------------------------------------- */

/* Parses one line for check 7; returns the parse result, the result and the message. */
static int parse7(const char *line, SentinelResult *ret, char **ret_message)
{
        *ret = _SENTINEL_RESULT_MAX;
        *ret_message = NULL;
        return sentinel_parse_reply(line, strlen(line), 7, ret, ret_message);
}

/* SENT-4: the request line carries the check's id; SENT-6, MET-2: the result names. */
static void test_sentinel_request_and_names(void **state)
{
        _cleanup_free_ char *req = NULL;
        assert_int_equal(sentinel_format_request(42, &req), 0);
        assert_string_equal(req, "{\"execute\":\"guest-gpu-init-status\",\"id\":42}\n");

        static const char *const want[] = {
            "ok", "failed", "unknown", "rpc_error", "unsupported_agent", "list_error"};
        for (size_t k = 0; k < _SENTINEL_RESULT_MAX; k++)
                assert_string_equal(sentinel_result_to_string(k), want[k]);
}

/* SENT-6: each reply state is its result; failed carries the guest's message. */
static void test_sentinel_reply_states(void **state)
{
        SentinelResult r;
        char *m;

        assert_int_equal(
            parse7("{\"return\":{\"state\":\"ok\",\"failure_message\":\"\"},\"id\":7}", &r, &m), 1);
        assert_int_equal(r, SENTINEL_RESULT_OK);
        assert_null(m);

        assert_int_equal(
            parse7("{\"return\":{\"state\":\"unknown\",\"failure_message\":\"\"},\"id\":7}", &r,
                   &m),
            1);
        assert_int_equal(r, SENTINEL_RESULT_UNKNOWN);
        assert_null(m);

        assert_int_equal(parse7("{\"return\":{\"state\":\"failed\",\"failure_message\":\"NVRM: GPU "
                                "0000:00:06.0: RmInitAdapter failed! (0x22:0x65:884)\"},\"id\":7}",
                                &r, &m),
                         1);
        assert_int_equal(r, SENTINEL_RESULT_FAILED);
        assert_string_equal(m, "NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x22:0x65:884)");
        free(m);

        /* A failed state without a message is still a failure (the store's reason is absent). */
        assert_int_equal(parse7("{\"id\":7,\"return\":{\"state\":\"failed\"}}", &r, &m), 1);
        assert_int_equal(r, SENTINEL_RESULT_FAILED);
        assert_string_equal(m, "");
        free(m);

        /* SENT-6: CommandNotFound is an agent without the command; other errors are rpc_error. */
        assert_int_equal(parse7("{\"error\":{\"class\":\"CommandNotFound\",\"desc\":\"command "
                                "\\\"guest-gpu-init-status\\\" not found\"},\"id\":7}",
                                &r, &m),
                         1);
        assert_int_equal(r, SENTINEL_RESULT_UNSUPPORTED_AGENT);
        assert_int_equal(
            parse7("{\"error\":{\"class\":\"GenericError\",\"desc\":\"x\"},\"id\":7}", &r, &m), 1);
        assert_int_equal(r, SENTINEL_RESULT_RPC_ERROR);
        assert_null(m);
}

/* SENT-4: lines that are not this check's reply are discarded, whatever they say. */
static void test_sentinel_reply_discarded(void **state)
{
        static const char *const lines[] = {
            /* another check's reply: the chardev hands a late one to the next connection */
            "{\"return\":{\"state\":\"failed\",\"failure_message\":\"late\"},\"id\":6}",
            "{\"return\":{\"state\":\"ok\"},\"id\":8}",
            /* the tail of an earlier reply, and other text that is not a JSON object */
            "failure_message\":\"x\"},\"id\":7}",
            "",
            "[1,2]",
            "7",
            "{\"return\":{\"state\":\"ok\"}",
            /* no id, or one of another type */
            "{\"return\":{\"state\":\"failed\",\"failure_message\":\"x\"}}",
            "{\"return\":{\"state\":\"ok\"},\"id\":\"7\"}",
            "{\"return\":{\"state\":\"ok\"},\"id\":7.0}",
            "{\"return\":{\"state\":\"ok\"},\"id\":-7}",
            /* a duplicate key makes the line invalid JSON for jansson's strict reader */
            "{\"id\":7,\"id\":7,\"return\":{\"state\":\"ok\"}}",
            /* nor does it take a NUL inside a string, so such a line has no readable id */
            "{\"id\":7,\"return\":{\"state\":\"failed\",\"failure_message\":\"a\\u0000b\"}}",
        };
        for (size_t k = 0; k < ELEMENTSOF(lines); k++) {
                SentinelResult r;
                char *m;
                assert_int_equal(parse7(lines[k], &r, &m), 0);
                assert_int_equal(r, _SENTINEL_RESULT_MAX); /* untouched */
                assert_null(m);
        }
}

/* SENT-4, SENT-6: a line with this check's id but invalid content is malformed: rpc_error. */
static void test_sentinel_reply_malformed(void **state)
{
        static const char *const lines[] = {
            "{\"id\":7}",
            "{\"id\":7,\"return\":{}}",
            "{\"id\":7,\"return\":[]}",
            "{\"id\":7,\"return\":{\"state\":\"fine\"}}",
            "{\"id\":7,\"return\":{\"state\":1}}",
            "{\"id\":7,\"return\":{\"state\":\"failed\",\"failure_message\":5}}",
            "{\"id\":7,\"return\":{\"state\":\"ok\",\"failure_message\":null}}",
            "{\"id\":7,\"return\":{\"state\":\"ok\"},\"error\":{\"class\":\"CommandNotFound\"}}",
            "{\"id\":7,\"error\":\"CommandNotFound\"}",
            "{\"id\":7,\"error\":{\"desc\":\"no class\"}}",
        };
        for (size_t k = 0; k < ELEMENTSOF(lines); k++) {
                SentinelResult r;
                char *m;
                assert_int_equal(parse7(lines[k], &r, &m), 1);
                assert_int_equal(r, SENTINEL_RESULT_RPC_ERROR);
                assert_null(m);
        }
}

/* HEALTH-12, SENT-6: a failure_message of 4096 bytes is kept; one byte more is rpc_error. */
static void test_sentinel_reply_message_cap(void **state)
{
        for (size_t len = SENTINEL_MESSAGE_MAX; len <= SENTINEL_MESSAGE_MAX + 1; len++) {
                _cleanup_free_ char *msg = malloc(len + 1);
                _cleanup_free_ char *line = NULL;
                assert_non_null(msg);
                memset(msg, 'x', len);
                msg[len] = 0;
                assert_true(
                    asprintf(&line,
                             "{\"return\":{\"state\":\"failed\",\"failure_message\":\"%s\"},"
                             "\"id\":7}",
                             msg) > 0);
                SentinelResult r;
                char *m;
                assert_int_equal(parse7(line, &r, &m), 1);
                if (len == SENTINEL_MESSAGE_MAX) {
                        assert_int_equal(r, SENTINEL_RESULT_FAILED);
                        assert_string_equal(m, msg);
                        free(m);
                } else {
                        assert_int_equal(r, SENTINEL_RESULT_RPC_ERROR);
                        assert_null(m);
                }
        }
}

/* SENT-1: the sentinel needs its instance manager and tracker, and non-zero limits. */
static void test_sentinel_new_validates(void **state)
{
        Fixture *f = *state;
        Sentinel *s = NULL;
        SentinelConfig c = {.tracker = f->tracker,
                            .interval = NSEC_PER_SEC,
                            .timeout = NSEC_PER_SEC,
                            .concurrency = 1};
        assert_int_equal(sentinel_new(&c, &s), -EINVAL);
        assert_null(s);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_pass_discovers, setup, teardown),
            cmocka_unit_test_setup_teardown(test_startup_pass_skips_scan, setup, teardown),
            cmocka_unit_test_setup_teardown(test_passes_never_overlap, setup, teardown),
            cmocka_unit_test_setup_teardown(test_discovery_failure_is_kept, setup, teardown),
            cmocka_unit_test_setup_teardown(test_orphan_mdev_age_and_group, setup, teardown),
            cmocka_unit_test_setup_teardown(test_orphan_mdev_fails_closed, setup, teardown),
            cmocka_unit_test(test_sentinel_request_and_names),
            cmocka_unit_test(test_sentinel_reply_states),
            cmocka_unit_test(test_sentinel_reply_discarded),
            cmocka_unit_test(test_sentinel_reply_malformed),
            cmocka_unit_test(test_sentinel_reply_message_cap),
            cmocka_unit_test_setup_teardown(test_sentinel_new_validates, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
