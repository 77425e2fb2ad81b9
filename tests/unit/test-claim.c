/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The claim flow on fixture trees (SPEC PLACE-7, PLACE-11, PLACE-12, PLACE-16, PLACE-18, PLACE-19,
 * PLACE-20, PLACE-22, API-21): a vendor-VFIO host written into a temporary directory (regular files
 * stand in for the driver's attributes), no NVML (every GPU decides on its VFs' lists, PLACE-5), a
 * real worker pool and DeviceOps, and a fake owner whose saves complete on the next loop turn.
 * Every part is attached to the test's sd-event loop, which a claim runs until it is done. The
 * vgpu-sim tests (tests/integration/test-claim-sim.c) cover the NVML path and the driver's
 * refusals.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sys/stat.h>

#include "api/api.h"
#include "claim/claim.h"
#include "testlib.h"

#define PF "0000:e3:00.0"
#define VF0 "0000:e3:00.4"
#define VF1 "0000:e3:00.5"
#define P_2Q "NVIDIA L40S-2Q"

/*
 * Regular files take a write of "0" over "8" byte for byte, as the driver's attribute takes a
 * whole value: the fixture's type IDs are single digits so that a reset reads back as "0".
 */
#define LIST_HEADER "ID    : vGPU Name\n"
#define LIST_2Q LIST_HEADER "8     : NVIDIA L40S-2Q\n"
#define LIST_2Q_4Q LIST_2Q "9     : NVIDIA L40S-4Q\n"

typedef struct Fixture {
        TestTree *tree;
        const char *dir; /* the tree's */
        int fd;          /* the tree's */
        Root *sys, *proc;
        char *dev;
        WorkerPool *pool;
        DeviceOps *ops;
        GpuTracker *tracker;
        Claimer *cl;
        WriteGate *gate;

        Claim *pending[8];
        bool pending_clear[8];
        size_t n_pending;
        const char *save_error;
        char claimed[8][PCI_ADDRESS_STRLEN];
        size_t n_claimed;

        const char *store_error; /* HEALTH-16 text, or NULL */
        const char *quarantined; /* one quarantined VF, or NULL */
        bool quarantine_on_save; /* the first saved VF turns quarantined before its configure */
        char quarantined_buf[PCI_ADDRESS_STRLEN];
        unsigned n_clears;

        TestLog log;
        sd_event *event;
        sd_event_source *owner_turn; /* completes the fake owner's saves and clears */
} Fixture;

typedef struct Outcome {
        bool done;
        int r;
        char *code;
        int status;
        char *error;
        char vf[PCI_ADDRESS_STRLEN];
        unsigned selections;
} Outcome;

/* ---- the tree ------------------------------------------------------------------------------ */

static void put(Fixture *f, const char *content, const char *fmt, ...) _printf_(3, 4);
static void put(Fixture *f, const char *content, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = test_tree_vput(f->tree, content, fmt, ap);
        va_end(ap);
        assert_int_equal(r, 0);
}

static void link_at(Fixture *f, const char *target, const char *fmt, ...) _printf_(3, 4);
static void link_at(Fixture *f, const char *target, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int r = test_tree_vlink(f->tree, target, fmt, ap);
        va_end(ap);
        assert_int_equal(r, 0);
}

static char *get(Fixture *f, const char *fmt, ...) _printf_(2, 3);
static char *get(Fixture *f, const char *fmt, ...)
{
        char rel[PATH_MAX];
        char *s = NULL;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(rel, sizeof rel, fmt, ap);
        va_end(ap);
        assert_int_equal(read_file_at(f->fd, rel, 4096, &s, NULL), 0);
        return s;
}

/* A vendor-VFIO VF (DISC-4, DISC-5): physfn, IOMMU group, its list and its type. */
static void add_vf(Fixture *f, const char *vf, const char *group, const char *list,
                   const char *type)
{
        link_at(f, "../" PF, "sys/bus/pci/devices/%s/physfn", vf);
        link_at(f, group, "sys/bus/pci/devices/%s/iommu_group", vf);
        put(f, list, "sys/bus/pci/devices/%s/nvidia/creatable_vgpu_types", vf);
        put(f, type, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", vf);
}

/* A process holding the VF's group node open (DEV-12, DEV-13). */
static void hold_group(Fixture *f, const char *group)
{
        char target[PATH_MAX];
        snprintf(target, sizeof target, "%s/vfio/%s", f->dev, group);
        link_at(f, target, "proc/4242/fd/7");
}

/* ---- the fake owner and the loop ----------------------------------------------------------- */

static int fake_save(void *userdata, const ClaimRecord *rec, Claim *token, char **error)
{
        Fixture *f = userdata;
        /* PLACE-20: what the record gets. */
        _cleanup_free_ char *path = NULL;
        assert_int_equal(strprintf(&path, "%s/sys/bus/pci/devices/%s", f->dir, rec->vf), 0);
        assert_string_equal(rec->device_path, path);
        assert_string_equal(rec->framework, "vendor-vfio");
        assert_string_equal(rec->gpu, PF);
        assert_false(timestamp_is_zero(rec->claimed_at));
        f->pending_clear[f->n_pending] = false;
        f->pending[f->n_pending++] = token;
        assert_int_equal(sd_event_source_set_enabled(f->owner_turn, SD_EVENT_ONESHOT), 0);
        if (f->quarantine_on_save) {
                f->quarantine_on_save = false;
                snprintf(f->quarantined_buf, sizeof f->quarantined_buf, "%s", rec->vf);
                f->quarantined = f->quarantined_buf;
        }
        if (!f->save_error)
                snprintf(f->claimed[f->n_claimed++], PCI_ADDRESS_STRLEN, "%s", rec->vf);
        return 0;
}

static int fake_clear(void *userdata, const ClaimRecord *rec, Claim *token, char **error)
{
        Fixture *f = userdata;
        f->n_clears++;
        for (size_t i = 0; i < f->n_claimed; i++)
                if (streq(f->claimed[i], rec->vf))
                        memmove(f->claimed[i], f->claimed[--f->n_claimed], PCI_ADDRESS_STRLEN);
        f->pending_clear[f->n_pending] = true;
        f->pending[f->n_pending++] = token;
        assert_int_equal(sd_event_source_set_enabled(f->owner_turn, SD_EVENT_ONESHOT), 0);
        return 0;
}

/* The owner's turn on the loop: what save() and clear() started completes, in order. */
static int on_owner_turn(sd_event_source *s, void *userdata)
{
        Fixture *f = userdata;
        while (f->n_pending > 0) {
                Claim *token = f->pending[0];
                bool clear = f->pending_clear[0];
                memmove(&f->pending[0], &f->pending[1], --f->n_pending * sizeof(Claim *));
                memmove(&f->pending_clear[0], &f->pending_clear[1], f->n_pending * sizeof(bool));
                if (clear)
                        claimer_clear_done(f->cl, token, 0, NULL);
                else if (f->save_error)
                        claimer_save_done(f->cl, token, -EIO, f->save_error);
                else
                        claimer_save_done(f->cl, token, 0, NULL);
        }
        return 0;
}

static bool fake_is_claimed(void *userdata, const char *vf, uint64_t *ret_fb)
{
        Fixture *f = userdata;
        for (size_t i = 0; i < f->n_claimed; i++)
                if (streq(f->claimed[i], vf)) {
                        *ret_fb = 2048;
                        return true;
                }
        return false;
}

static void on_claim(const ClaimResult *res, void *userdata)
{
        Outcome *o = userdata;
        assert_false(o->done);
        *o = (Outcome){
            .done = true,
            .r = res->r,
            /* API-21 as the API maps a failure kind. */
            .code = res->r < 0 ? strdup(api_claim_failure_code(res->failure)) : NULL,
            .status = res->r < 0 ? api_claim_failure_status(res->failure) : 0,
            .error = res->error ? strdup(res->error) : NULL,
            .selections = res->selections,
        };
        if (res->vf)
                snprintf(o->vf, sizeof o->vf, "%s", res->vf);
}

static void outcome_clear(Outcome *o)
{
        free(o->code);
        free(o->error);
        *o = (Outcome){};
}

static void run_claim(Fixture *f, const char *profile, Outcome *o)
{
        ClaimRequest req = {.instance_id = "k3x9q2m8v1c4z7n5b0wd", .profile = profile};
        assert_int_equal(claimer_claim(f->cl, &req, on_claim, o), 0);
        assert_false(o->done); /* never from inside the call */
        TEST_WAIT_UNTIL(f->event, o->done);
}

static bool guard_quarantined(void *userdata, const char *vf)
{
        Fixture *f = userdata;
        return streq_ptr(f->quarantined, vf);
}

static const char *guard_store(void *userdata)
{
        Fixture *f = userdata;
        return f->store_error;
}

static size_t pick_first(size_t n, void *userdata)
{
        return 0;
}

/* ---- set-up -------------------------------------------------------------------------------- */

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(test_tree_new("vgpud-claim", &f->tree), 0);
        f->dir = f->tree->dir;
        f->fd = f->tree->fd;
        put(f, "0x26b9\n", "sys/bus/pci/devices/%s/device", PF);
        assert_int_equal(mkdirat(f->fd, "proc", 0755), 0);
        assert_int_equal(mkdirat(f->fd, "dev", 0755), 0);
        assert_int_equal(sd_event_new(&f->event), 0);
        assert_int_equal(sd_event_add_defer(f->event, &f->owner_turn, on_owner_turn, f), 0);
        assert_int_equal(sd_event_source_set_enabled(f->owner_turn, SD_EVENT_OFF), 0);
        assert_int_equal(test_log_start(&f->log), 0);
        log_set_max_level(LOG_LEVEL_INFO);
        *state = f;
        return 0;
}

/* Starts the parts once the test has written its tree. */
static void start(Fixture *f)
{
        _cleanup_free_ char *sys = NULL, *proc = NULL;
        assert_int_equal(strprintf(&sys, "%s/sys", f->dir), 0);
        assert_int_equal(strprintf(&proc, "%s/proc", f->dir), 0);
        assert_int_equal(strprintf(&f->dev, "%s/dev", f->dir), 0);
        assert_int_equal(root_open(sys, &f->sys), 0);
        assert_int_equal(root_open(proc, &f->proc), 0);
        WorkerPoolConfig pc = WORKER_POOL_CONFIG_SYSFS;
        assert_int_equal(worker_pool_new(&pc, &f->pool), 0);
        DeviceGuard guard = {
            .is_quarantined = guard_quarantined,
            .store_unavailable = guard_store,
            .userdata = f,
        };
        DeviceOpsConfig dc = {
            .roots = {.sysfs = f->sys, .proc = f->proc, .dev_root = f->dev},
            .pool = f->pool,
            .guard = guard,
        };
        assert_int_equal(device_ops_new(&dc, &f->ops), 0);
        GpuTrackerConfig tc = {.sysfs = f->sys, .pool = f->pool};
        assert_int_equal(gpu_tracker_new(&tc, &f->tracker), 0);
        assert_int_equal(write_gate_new(f->tracker, &f->gate), 0);
        ClaimerConfig cc = {
            .sysfs = f->sys,
            .tracker = f->tracker,
            .proc = f->proc,
            .dev_root = f->dev,
            .pool = f->pool,
            .ops = f->ops,
            .gate = f->gate,
            .picker = {.pick = pick_first},
            .guard = guard,
            .owner = {.save = fake_save,
                      .clear = fake_clear,
                      .is_claimed = fake_is_claimed,
                      .userdata = f},
        };
        assert_int_equal(claimer_new(&cc, &f->cl), 0);
        assert_int_equal(worker_pool_attach_event(f->pool, f->event), 0);
        assert_int_equal(device_ops_attach_event(f->ops, f->event), 0);
        assert_int_equal(claimer_attach_event(f->cl, f->event), 0);
        assert_int_equal(claimer_attach_event(f->cl, f->event), -EBUSY);
}

static int teardown(void **state)
{
        Fixture *f = *state;
        test_log_stop(&f->log);
        if (f->pool) {
                (void)worker_pool_wait_idle(f->pool, 30 * NSEC_PER_SEC);
                worker_pool_free(f->pool);
        }
        device_ops_free(f->ops);
        claimer_free(f->cl);
        write_gate_free(f->gate);
        gpu_tracker_free(f->tracker);
        root_free(f->sys);
        root_free(f->proc);
        free(f->dev);
        test_tree_free(f->tree);
        sd_event_source_disable_unref(f->owner_turn);
        sd_event_unref(f->event);
        free(f);
        return 0;
}

static const char *logged(Fixture *f)
{
        return test_log_text(&f->log);
}

/* ---- pure helpers -------------------------------------------------------------------------- */

static void test_unreflected_counts(void **state) /* PLACE-7 */
{
        const ClaimWriteMark marks[] = {
            {.type_id = 1148},                                   /* reserved, not written */
            {.type_id = 1148, .write_done = true, .done_at = 3}, /* written before query 4 */
            {.type_id = 1148, .write_done = true, .done_at = 4}, /* written after query 4 */
            {.type_id = 1150},                                   /* another type */
        };
        /* Query 4 was submitted while the second write had completed (3 submitted before). */
        assert_int_equal(claim_count_unreflected(marks, ELEMENTSOF(marks), 1148, 4), 2);
        assert_int_equal(claim_count_unreflected(marks, ELEMENTSOF(marks), 1148, 5), 1);
        assert_int_equal(claim_count_unreflected(marks, ELEMENTSOF(marks), 1148, 3), 3);
        assert_int_equal(claim_count_unreflected(marks, ELEMENTSOF(marks), 1150, 9), 1);
        assert_int_equal(claim_count_unreflected(NULL, 0, 1150, 9), 0);
}

static void test_failure_names(void **state) /* API-21 */
{
        assert_string_equal(claim_failure_to_string(CLAIM_FAILURE_NONE), "none");
        assert_string_equal(claim_failure_to_string(CLAIM_FAILURE_UNKNOWN_PROFILE),
                            "unknown_profile");
        assert_string_equal(claim_failure_to_string(CLAIM_FAILURE_INSUFFICIENT_RESOURCES),
                            "insufficient_resources");
        assert_string_equal(claim_failure_to_string(CLAIM_FAILURE_PLACEMENT_DISABLED),
                            "placement_disabled");
        assert_string_equal(claim_failure_to_string(CLAIM_FAILURE_INTERNAL), "internal");
        assert_string_equal(claim_failure_to_string(_CLAIM_FAILURE_MAX), "internal");
}

/* ---- the flow ------------------------------------------------------------------------------ */

static void test_claim_configures_and_logs(void **state) /* PLACE-1, PLACE-5, PLACE-22 */
{
        Fixture *f = *state;
        Outcome o = {};
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_2Q, "0\n");
        start(f);

        run_claim(f, P_2Q, &o);
        if (o.r < 0)
                fail_msg("claim failed: %s", o.error);
        assert_string_equal(o.vf, VF0);
        _cleanup_free_ char *type = get(f, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", VF0);
        assert_string_equal(type, "8\n");
        /* OPS-12: the first example line, field for field. */
        assert_non_null(strstr(logged(f), "<6>placed vGPU claim instance_id=k3x9q2m8v1c4z7n5b0wd "
                                          "vf=0000:e3:00.4 gpu=0000:e3:00.0 "
                                          "profile=\"NVIDIA L40S-2Q\" policy=spread nvml_ms="));
        outcome_clear(&o);
}

static void test_failed_save_drops_reservation(void **state) /* PLACE-20 */
{
        Fixture *f = *state;
        Outcome o = {};
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_2Q, "0\n");
        start(f);

        f->save_error = "write instance record: Input/output error";
        run_claim(f, P_2Q, &o);
        assert_int_equal(o.r, -EIO);
        assert_string_equal(o.code, "internal");
        assert_int_equal(o.status, 500);
        assert_string_equal(o.error, "save vGPU claim: write instance record: Input/output error");
        _cleanup_free_ char *type = get(f, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", VF0);
        assert_string_equal(type, "0\n"); /* never written */
        outcome_clear(&o);

        /* The reservation went with the failure: the VF is there for the next claim. */
        f->save_error = NULL;
        run_claim(f, P_2Q, &o);
        assert_int_equal(o.r, 0);
        assert_string_equal(o.vf, VF0);
        outcome_clear(&o);
}

static void test_hidden_name_on_sysfs_catalog(void **state) /* PLACE-18 */
{
        Fixture *f = *state;
        Outcome o = {};
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_2Q, "0\n");
        start(f);

        run_claim(f, "NVIDIA L40S-4Q", &o);
        assert_int_equal(o.r, -ENOSPC);
        assert_string_equal(o.code, "insufficient_resources");
        assert_int_equal(o.status, 409);
        assert_string_equal(o.error, "profile \"NVIDIA L40S-4Q\" is not creatable on any VF "
                                     "(unknown profile or insufficient capacity)");
        outcome_clear(&o);
}

static void test_every_catalog_empty(void **state) /* PLACE-19 */
{
        Fixture *f = *state;
        Outcome o = {};
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_HEADER, "0\n");
        start(f);

        run_claim(f, P_2Q, &o);
        assert_int_equal(o.r, -ENOSPC);
        assert_int_equal(o.status, 409);
        assert_string_equal(o.error, "no creatable vGPU profiles on any VF (GPUs at capacity or "
                                     "dirty VFs consuming framebuffer): profile "
                                     "\"NVIDIA L40S-2Q\"");
        outcome_clear(&o);
}

static void test_dirty_vf_reset_before_claim(void **state) /* PLACE-11 */
{
        Fixture *f = *state;
        Outcome o = {};
        /* The only candidate is a leftover 2Q: reset while reserved, then claimed. */
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_2Q, "8\n");
        add_vf(f, VF1, "../../../kernel/iommu_groups/8", LIST_HEADER, "0\n");
        start(f);

        run_claim(f, P_2Q, &o);
        if (o.r < 0)
                fail_msg("claim failed: %s", o.error);
        assert_string_equal(o.vf, VF0);
        _cleanup_free_ char *type = get(f, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", VF0);
        assert_string_equal(type, "8\n");
        outcome_clear(&o);
}

static void test_dirty_vf_refusing_reset(void **state) /* PLACE-12, PLACE-16 */
{
        Fixture *f = *state;
        Outcome o = {};
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_2Q, "8\n");
        start(f);
        hold_group(f, "7");

        run_claim(f, P_2Q, &o);
        assert_int_equal(o.r, -ENOSPC);
        assert_string_equal(o.code, "insufficient_resources");
        assert_string_equal(o.error, "repair dirty VF 0000:e3:00.4 before claim: vendor VFIO "
                                     "vGPU on VF 0000:e3:00.4 is still in use");
        assert_non_null(strstr(logged(f), "<4>dirty vGPU VF refused reset; trying another VF "
                                          "vf=0000:e3:00.4"));
        _cleanup_free_ char *type = get(f, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", VF0);
        assert_string_equal(type, "8\n"); /* held open: untouched */
        outcome_clear(&o);
}

static void test_dirty_vf_of_other_type_on_eligible_gpu(void **state) /* PLACE-11 */
{
        Fixture *f = *state;
        Outcome o = {};
        /*
         * A leftover 4Q is a candidate because its GPU is eligible for 2Q (a list names it) and
         * has no clean candidate: reset first, then claimed and configured.
         */
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_2Q_4Q, "9\n");
        add_vf(f, VF1, "../../../kernel/iommu_groups/8", LIST_HEADER, "0\n");
        start(f);

        run_claim(f, P_2Q, &o);
        if (o.r < 0)
                fail_msg("claim failed: %s", o.error);
        assert_string_equal(o.vf, VF0);
        assert_int_equal(o.selections, 1);
        _cleanup_free_ char *type = get(f, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", VF0);
        assert_string_equal(type, "8\n");
        outcome_clear(&o);
}

static void test_store_unavailable_refuses(void **state) /* HEALTH-16, API-21 */
{
        Fixture *f = *state;
        Outcome o = {};
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_2Q, "0\n");
        f->store_error = "VF health state unavailable: last write failed: No space left on device";
        start(f);

        run_claim(f, P_2Q, &o);
        assert_int_equal(o.r, -EAGAIN);
        assert_string_equal(o.code, "placement_disabled");
        assert_int_equal(o.status, 503);
        assert_string_equal(o.error, f->store_error);
        _cleanup_free_ char *type = get(f, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", VF0);
        assert_string_equal(type, "0\n");
        outcome_clear(&o);
}

static void test_quarantined_vf_skipped(void **state) /* PLACE-3 */
{
        Fixture *f = *state;
        Outcome o = {};
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_2Q, "0\n");
        add_vf(f, VF1, "../../../kernel/iommu_groups/8", LIST_2Q, "0\n");
        f->quarantined = VF0;
        start(f);

        run_claim(f, P_2Q, &o);
        assert_int_equal(o.r, 0);
        assert_string_equal(o.vf, VF1);
        outcome_clear(&o);
}

static void test_quarantine_before_configure(void **state) /* DEV-2, PLACE-17 */
{
        Fixture *f = *state;
        Outcome o = {};
        add_vf(f, VF0, "../../../kernel/iommu_groups/7", LIST_2Q, "0\n");
        add_vf(f, VF1, "../../../kernel/iommu_groups/8", LIST_2Q, "0\n");
        f->quarantine_on_save = true;
        start(f);

        /* The picker takes VF0; it is quarantined between the save and the write. */
        run_claim(f, P_2Q, &o);
        if (o.r < 0)
                fail_msg("claim failed: %s", o.error);
        assert_string_equal(o.vf, VF1);
        assert_int_equal(o.selections, 2);
        assert_int_equal(f->n_clears, 1); /* the first claim was cleared */
        _cleanup_free_ char *t0 = get(f, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", VF0);
        _cleanup_free_ char *t1 = get(f, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", VF1);
        assert_string_equal(t0, "0\n"); /* nothing written */
        assert_string_equal(t1, "8\n");
        outcome_clear(&o);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_unreflected_counts),
            cmocka_unit_test(test_failure_names),
            T(test_claim_configures_and_logs),
            T(test_failed_save_drops_reservation),
            T(test_hidden_name_on_sysfs_catalog),
            T(test_every_catalog_empty),
            T(test_dirty_vf_reset_before_claim),
            T(test_dirty_vf_refusing_reset),
            T(test_dirty_vf_of_other_type_on_eligible_gpu),
            T(test_store_unavailable_refuses),
            T(test_quarantined_vf_skipped),
            T(test_quarantine_before_configure),
        };
        return cmocka_run_group_tests_name("claim", tests, NULL, NULL);
}
