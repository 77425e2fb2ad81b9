/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The claim flow against a mounted vgpu-sim (SPEC PLACE-1, PLACE-2, PLACE-4, PLACE-7, PLACE-8,
 * PLACE-9, PLACE-17, PLACE-20, PLACE-22, NVML-10, NVML-16, SIM-17, SIM-18). run-with-sim.sh mounts
 * the simulator in a private PID namespace; argv[1] is the fake libnvidia-ml.so.1 and argv[2] the
 * host the group expects: "l40s" (host-l40s.yaml: a mixed-size and an equal-size L40S, 4 VFs each)
 * or "mixed" (host-claim-mixed.yaml: one mixed-size L40S with 16 VFs).
 *
 * Every part runs as the daemon runs it: real worker pool, DeviceOps, NVML client and clock, all
 * attached to one sd-event loop, which a test runs until what it waits for has happened
 * (bounded). After every test without an NVML hang the simulator must show no
 * query that overlapped a write (PLACE-9), no VF written twice at once (DEV-11) and no
 * forbidden write (DEV-18); then every VF is reset through the simulator's files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include "claim-harness.h"

#define MIXED_PF "0000:e3:00.0"
#define TYPE_1Q "1147"
#define TYPE_2Q "1148"
#define TYPE_4Q "1150"
#define P_2Q "NVIDIA L40S-2Q"
#define P_4Q "NVIDIA L40S-4Q"
#define NVML_TIMEOUT (5 * NSEC_PER_SEC)
#define WAIT (60 * NSEC_PER_SEC)

static const char *nvml_library;
static const char *host_kind;

typedef struct Test {
        Harness h;
        bool nvml_hang;    /* the test hangs NVML on purpose: overlaps are allowed (PLACE-9) */
        TestHolder holder; /* a stand-in VMM holding a VFIO node open */
} Test;

/* ---- helpers ------------------------------------------------------------------------------- */

static Harness *H(void **state)
{
        return &((Test *)*state)->h;
}

static void ctl(Harness *h, const char *command)
{
        int r = harness_ctl(h, command);
        if (r < 0)
                fail_msg(".sim/ctl \"%s\": %s", command, strerror(-r));
}

static const char *vf_name(const char *pf, unsigned i, char buf[static PCI_ADDRESS_STRLEN])
{
        /* SIM-2: VF i of a PF at dddd:bb:00.0 has devfn 4 + i. */
        unsigned devfn = 4 + i;
        snprintf(buf, PCI_ADDRESS_STRLEN, "%.8s%02x.%u", pf, devfn / 8, devfn % 8);
        return buf;
}

static json_int_t vf_type(Harness *h, const char *vf)
{
        json_int_t type = -1;
        int r = test_sim_vf_int(h->sim, vf, "type", &type);
        if (r < 0)
                fail_msg("type of VF %s in state.json: %s", vf, strerror(-r));
        return type;
}

/* VFs configured with type on pf. */
static unsigned count_type(Harness *h, const char *pf, json_int_t type)
{
        json_auto_t *st = harness_state(h);
        size_t i, k;
        json_t *gpu, *v;
        unsigned n = 0;
        assert_non_null(st);
        json_array_foreach (json_object_get(st, "gpus"), i, gpu) {
                if (!streq(json_string_value(json_object_get(gpu, "address")), pf))
                        continue;
                json_array_foreach (json_object_get(gpu, "vfs"), k, v) {
                        if (json_integer_value(json_object_get(v, "type")) == type)
                                n++;
                }
        }
        return n;
}

static void start_claims(Harness *h, const char *profile, ClaimOutcome *o, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                char id[32];
                snprintf(id, sizeof id, "inst%02zu", i);
                ClaimRequest req = {.instance_id = id, .profile = profile};
                assert_int_equal(claimer_claim(h->cl, &req, harness_on_claim, &o[i]), 0);
        }
}

static void run_claims(Harness *h, ClaimOutcome *o, size_t n)
{
        Waiting w = {.o = o, .n = n};
        if (harness_run_until(h, harness_all_done, &w, WAIT) < 0)
                fail_msg("claims did not finish within 60 s");
}

/* One claim of profile run to its end, with the log at level captured: the log, malloc'd. */
static char *run_claim_logged(Harness *h, const char *profile, ClaimOutcome *o, int level)
{
        TestLog log;
        assert_int_equal(test_log_start(&log), 0);
        log_set_max_level(level);
        start_claims(h, profile, o, 1);
        run_claims(h, o, 1);
        char *text = strdup(test_log_text(&log));
        test_log_stop(&log);
        log_set_max_level(LOG_LEVEL_ERR);
        assert_non_null(text);
        return text;
}

static void assert_success(const ClaimOutcome *o)
{
        if (o->r < 0)
                fail_msg("claim failed: %s %s", o->code, o->error);
}

/* SIM-17's first steps on the mixed-size card: nine 4Q (slots 0-35), then `ones` 1Q. */
static void fill_card(Harness *h, unsigned ones)
{
        char vf[PCI_ADDRESS_STRLEN];
        for (unsigned i = 0; i < 9 + ones; i++) {
                vf_name(MIXED_PF, i, vf);
                int r = harness_set_type(h, vf, i < 9 ? TYPE_4Q : TYPE_1Q);
                if (r < 0)
                        fail_msg("set up %s: %s", vf, strerror(-r));
                /* These belong to running VMs: claimed, not dirty. */
                harness_owner_claim(h, vf, i < 9 ? 4096 : 1024);
        }
}

static bool creatable_lists(Harness *h, const char *vf, const char *profile)
{
        _cleanup_free_ char *rel = NULL, *text = NULL;
        assert_int_equal(strprintf(&rel, "bus/pci/devices/%s/nvidia/creatable_vgpu_types", vf), 0);
        assert_int_equal(root_read_file(h->sys, rel, 65536, &text, NULL), 0);
        return strstr(text, profile) != NULL;
}

/* A child that opens vf's legacy group node and holds it until its control pipe closes. */
static void hold_vf(Test *t, const char *vf)
{
        Harness *h = &t->h;
        _cleanup_free_ char *rel = NULL, *group = NULL, *node = NULL;
        assert_int_equal(strprintf(&rel, "bus/pci/devices/%s/iommu_group", vf), 0);
        assert_int_equal(root_readlink_basename(h->sys, rel, &group), 0);
        assert_int_equal(strprintf(&node, "%s/vfio/%s", h->dev, group), 0);
        assert_int_equal(test_holder_start(node, &t->holder), 0);
}

static void release_holder(Test *t)
{
        test_holder_end(&t->holder);
}

/* ---- set-up and checks --------------------------------------------------------------------- */

/* Starts the harness with nvml_timeout; nvml_hang for a test that hangs NVML on purpose. */
static int setup_with(void **state, nsec_t nvml_timeout, bool nvml_hang)
{
        Test *t = calloc(1, sizeof *t);
        const char *step;
        assert_non_null(t);
        t->holder = TEST_HOLDER_NULL;
        log_set_max_level(LOG_LEVEL_ERR);
        int r = harness_start(&t->h, nvml_library, nvml_timeout, &step);
        if (r < 0)
                fail_msg("start: %s: %s", step, strerror(-r));
        t->nvml_hang = nvml_hang;
        *state = t;
        return 0;
}

static int setup(void **state)
{
        return setup_with(state, NVML_TIMEOUT, false);
}

static int setup_short_timeout(void **state)
{
        return setup_with(state, NSEC_PER_SEC, true);
}

static int teardown(void **state)
{
        Test *t = *state;
        Harness *h = &t->h;

        release_holder(t);
        (void)harness_ctl(h, "nvml hang off");
        (void)harness_ctl(h, "clear-faults");
        json_auto_t *st = harness_state(h);
        assert_non_null(st);
        size_t i, k;
        json_t *gpu, *vf;
        json_array_foreach (json_object_get(st, "gpus"), i, gpu) {
                const char *pf = json_string_value(json_object_get(gpu, "address"));
                json_int_t overlaps =
                    json_integer_value(json_object_get(gpu, "query_write_overlaps"));
                if (!t->nvml_hang && overlaps != 0) /* PLACE-9 */
                        fail_msg("GPU %s: %" JSON_INTEGER_FORMAT " queries overlapped a write", pf,
                                 overlaps);
                json_array_foreach (json_object_get(gpu, "vfs"), k, vf) {
                        json_int_t maxw =
                            json_integer_value(json_object_get(vf, "max_concurrent_writes"));
                        if (maxw > 1) /* DEV-11 */
                                fail_msg("VF %s saw %" JSON_INTEGER_FORMAT " concurrent writes",
                                         json_string_value(json_object_get(vf, "address")), maxw);
                }
        }
        _cleanup_free_ char *text = NULL;
        assert_int_equal(test_sim_forbidden_writes(h->sim, &text), 0);
        assert_string_equal(text, ""); /* DEV-18, SIM-16 */

        /* Leave the simulator as the next test expects it: every VF free. A holder's FUSE
         * release may trail its exit (SIM-12): retried, bounded. */
        _cleanup_test_sim_ TestSim *sim = NULL;
        assert_int_equal(test_sim_open(&sim), 0);
        harness_stop(h);
        assert_int_equal(test_sim_release_all(sim, 5 * NSEC_PER_SEC), 0);
        free(t);
        return 0;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static void test_concurrent_claims_never_share_a_vf(void **state) /* PLACE-2, PLACE-3, PLACE-9 */
{
        Harness *h = H(state);
        ClaimOutcome o[6] = {};

        start_claims(h, P_2Q, o, ELEMENTSOF(o));
        run_claims(h, o, ELEMENTSOF(o));
        for (size_t i = 0; i < ELEMENTSOF(o); i++) {
                assert_success(&o[i]);
                assert_int_equal(vf_type(h, o[i].vf), 1148);
                for (size_t k = 0; k < i; k++)
                        assert_string_not_equal(o[i].vf, o[k].vf);
        }
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                claim_outcome_clear(&o[i]);
}

static void test_refreshes_never_overlap_writes(void **state) /* NVML-14, PLACE-9 */
{
        Harness *h = H(state);
        ClaimOutcome o[6] = {};

        /* A cache refresh asked for now, and the Claimer's own after every configure (NVML-14). */
        start_claims(h, P_2Q, o, ELEMENTSOF(o));
        assert_int_equal(claimer_request_nvml_refresh(h->cl, false), 0);
        run_claims(h, o, ELEMENTSOF(o));
        for (size_t i = 0; i < ELEMENTSOF(o); i++) {
                assert_success(&o[i]);
                for (size_t k = 0; k < i; k++)
                        assert_string_not_equal(o[i].vf, o[k].vf);
        }
        assert_true(h->vf_changes >= ELEMENTSOF(o));
        /* Let the last refresh run; teardown checks that no query overlapped a write. */
        if (harness_run_until(h, harness_refreshed, NULL, WAIT) < 0)
                fail_msg("the last refresh did not end");
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                claim_outcome_clear(&o[i]);
}

/* Watches a burst of claims: did a cache refresh run while one of them was unfinished? */
typedef struct BurstWatch {
        Waiting w;
        bool refresh_during_claims;
} BurstWatch;

static bool burst_done(Harness *h, void *arg)
{
        BurstWatch *b = arg;
        bool done = harness_all_done(h, &b->w);
        if (!done && nvml_client_refresh_is_running(h->nvml))
                b->refresh_during_claims = true;
        return done;
}

static bool refresh_started(Harness *h, void *arg)
{
        return nvml_client_refresh_is_running(h->nvml);
}

static void test_refresh_waits_for_claims_in_flight(void **state) /* NVML-15, PLACE-9 */
{
        Harness *h = H(state);
        ClaimOutcome o[6] = {};

        /*
         * A refresh asked for during a burst of claims, and the Claimer's own after each of its
         * configures, runs once the burst is done: it never holds the claims' own rounds and
         * writes.
         */
        ctl(h, "nvml latency 5");
        start_claims(h, P_2Q, o, ELEMENTSOF(o));
        assert_int_equal(claimer_request_nvml_refresh(h->cl, false), 0);
        BurstWatch b = {.w = {.o = o, .n = ELEMENTSOF(o)}};
        if (harness_run_until(h, burst_done, &b, WAIT) < 0)
                fail_msg("claims did not finish within 60 s");
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                assert_success(&o[i]);
        assert_false(b.refresh_during_claims);
        /* The wanted refresh is not lost (NVML-15: exactly one more run). */
        if (harness_run_until(h, refresh_started, NULL, WAIT) < 0)
                fail_msg("the wanted refresh never started");
        if (harness_run_until(h, harness_refreshed, NULL, WAIT) < 0)
                fail_msg("the refresh did not end");
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                claim_outcome_clear(&o[i]);
}

/* An owner's release through write_gate_pass(), as instances/ makes its releases. */
typedef struct GatedRelease {
        Harness *h;
        char vf[PCI_ADDRESS_STRLEN];
        bool dispatched, done;
        bool refresh_at_dispatch; /* a refresh was running when the write was handed over */
        int r;
} GatedRelease;

static void gated_release_done(const DeviceResult *res, void *userdata)
{
        GatedRelease *g = userdata;
        g->done = true;
        g->r = res->r;
}

static void gated_release_go(void *userdata)
{
        GatedRelease *g = userdata;
        _cleanup_free_ char *error = NULL;

        g->dispatched = true;
        g->refresh_at_dispatch = nvml_client_refresh_is_running(g->h->nvml);
        int r = device_ops_release(
            g->h->ops,
            &(DeviceReleaseRequest){.claim = {.framework = "vendor-vfio", .vf = g->vf},
                                    .instance_id = "gate0000000000000000"},
            gated_release_done, g, &error);
        if (r < 0) {
                g->done = true;
                g->r = r;
        }
}

static bool gated_release_ended(Harness *h, void *arg)
{
        return ((GatedRelease *)arg)->done;
}

static void test_owner_release_waits_for_refresh(void **state) /* PLACE-9, NVML-14 */
{
        Harness *h = H(state);
        ClaimOutcome o[2] = {};

        start_claims(h, P_2Q, o, ELEMENTSOF(o));
        run_claims(h, o, ELEMENTSOF(o));
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                assert_success(&o[i]);
        if (harness_run_until(h, harness_refreshed, NULL, WAIT) < 0)
                fail_msg("the refresh after the configures did not end");

        /* Slow NVML calls keep the refresh (every GPU, every type) running for a while. */
        ctl(h, "nvml latency 5");
        GatedRelease g = {.h = h};
        snprintf(g.vf, sizeof g.vf, "%s", o[0].vf);
        assert_int_equal(claimer_request_nvml_refresh(h->cl, false), 0);
        assert_true(nvml_client_refresh_is_running(h->nvml));
        /* The release waits for the refresh (teardown checks the simulator saw no overlap). */
        assert_int_equal(write_gate_pass(h->gate, g.vf, gated_release_go, &g), 0);
        assert_false(g.dispatched);
        if (harness_run_until(h, gated_release_ended, &g, WAIT) < 0)
                fail_msg("the gated release did not end");
        assert_false(g.refresh_at_dispatch);
        assert_true(g.r >= 0);
        assert_int_equal(vf_type(h, g.vf), 0);
        harness_owner_unclaim(h, g.vf);

        /* A cancelled wait never dispatches; with no query running the gate is open at once. */
        GatedRelease g2 = {.h = h};
        snprintf(g2.vf, sizeof g2.vf, "%s", o[1].vf);
        assert_int_equal(claimer_request_nvml_refresh(h->cl, false), 0);
        assert_true(nvml_client_refresh_is_running(h->nvml));
        assert_int_equal(write_gate_pass(h->gate, g2.vf, gated_release_go, &g2), 0);
        write_gate_cancel(h->gate, &g2);
        if (harness_run_until(h, harness_refreshed, NULL, WAIT) < 0)
                fail_msg("the second refresh did not end");
        assert_false(g2.dispatched);
        assert_int_equal(write_gate_pass(h->gate, g2.vf, gated_release_go, &g2), 1);
        gated_release_go(&g2);
        if (harness_run_until(h, gated_release_ended, &g2, WAIT) < 0)
                fail_msg("the second release did not end");
        assert_true(g2.r >= 0);
        assert_int_equal(vf_type(h, g2.vf), 0);
        harness_owner_unclaim(h, g2.vf);
        ctl(h, "nvml latency 0");
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                claim_outcome_clear(&o[i]);
}

static void test_failed_save_leaves_vf_untouched(void **state) /* PLACE-1, PLACE-20 */
{
        Harness *h = H(state);
        ClaimOutcome o = {};

        h->save_error = "write instance record: No space left on device";
        start_claims(h, P_2Q, &o, 1);
        run_claims(h, &o, 1);
        assert_int_equal(o.r, -ENOSPC);
        assert_string_equal(o.code, "internal");
        assert_int_equal(o.status, 500);
        assert_string_equal(o.error,
                            "save vGPU claim: write instance record: No space left on device");
        assert_int_equal(h->n_saves, 1);
        /* The VF the claim would have used was never written. */
        assert_int_equal(vf_type(h, h->saved_vfs[0]), 0);
        json_auto_t *st = harness_state(h);
        size_t i, k;
        json_t *gpu, *vf;
        json_array_foreach (json_object_get(st, "gpus"), i, gpu) {
                json_array_foreach (json_object_get(gpu, "vfs"), k, vf)
                        assert_int_equal(json_integer_value(json_object_get(vf, "type")), 0);
        }

        /* The reservation went with the failure: the next claim can have the same VF. */
        h->save_error = NULL;
        claim_outcome_clear(&o);
        start_claims(h, P_2Q, &o, 1);
        run_claims(h, &o, 1);
        assert_success(&o);
        claim_outcome_clear(&o);
}

static void test_capacity_refusal_retries_once(void **state) /* PLACE-17, DEV-7 */
{
        Harness *h = H(state);
        ClaimOutcome o = {};

        ctl(h, "fault write sys/bus/pci/devices/*/nvidia/current_vgpu_type ENOSPC count=1");
        start_claims(h, P_2Q, &o, 1);
        run_claims(h, &o, 1);
        assert_success(&o);
        assert_int_equal(o.selections, 2);
        assert_int_equal(h->n_saves, 2);
        assert_int_equal(h->n_clears, 1);
        assert_string_not_equal(h->saved_vfs[0], o.vf);
        assert_string_equal(h->saved_vfs[1], o.vf);
        assert_int_equal(vf_type(h, h->saved_vfs[0]), 0); /* refused, reset, unclaimed */
        assert_int_equal(vf_type(h, o.vf), 1148);
        claim_outcome_clear(&o);
}

static void test_second_capacity_refusal_fails_409(void **state) /* PLACE-17 */
{
        Harness *h = H(state);
        ClaimOutcome o = {};

        ctl(h, "fault write sys/bus/pci/devices/*/nvidia/current_vgpu_type ENOSPC count=2");
        start_claims(h, P_2Q, &o, 1);
        run_claims(h, &o, 1);
        assert_int_equal(h->n_saves, 2);
        assert_int_equal(h->n_clears, 2);
        assert_int_equal(o.r, -ENOSPC);
        assert_string_equal(o.code, "insufficient_resources");
        assert_int_equal(o.status, 409);
        /* The second refusal's driver text (DEV-7). */
        _cleanup_free_ char *exact = NULL;
        assert_int_equal(strprintf(&exact, "driver refused vGPU type 1148 on VF %s: %s",
                                   h->saved_vfs[1], strerror(ENOSPC)),
                         0);
        assert_string_equal(o.error, exact);
        assert_int_equal(vf_type(h, h->saved_vfs[0]), 0);
        assert_int_equal(vf_type(h, h->saved_vfs[1]), 0);
        claim_outcome_clear(&o);
}

static void test_4q_lands_where_sysfs_hides_it(void **state) /* PLACE-4, SIM-18, NVML-16 */
{
        Harness *h = H(state);
        ClaimOutcome o = {};
        char vf[PCI_ADDRESS_STRLEN];

        fill_card(h, 3); /* 12 vGPUs: free 4Q placements at 40 and 44 */
        assert_false(creatable_lists(h, vf_name(MIXED_PF, 12, vf), P_4Q));

        start_claims(h, P_4Q, &o, 1);
        run_claims(h, &o, 1);
        assert_success(&o);
        assert_string_equal(o.gpu, MIXED_PF);
        assert_int_equal(vf_type(h, o.vf), 1150);
        assert_int_equal(count_type(h, MIXED_PF, 1150), 10);
        claim_outcome_clear(&o);
}

static void test_five_4q_claims_three_placements(void **state) /* PLACE-7, PLACE-9, SIM-17 */
{
        Harness *h = H(state);
        ClaimOutcome o[5] = {};
        unsigned ok = 0, refused = 0;

        fill_card(h, 0); /* nine 4Q: free 4Q placements at 36, 40 and 44 */
        nsec_t started = harness_now();
        start_claims(h, P_4Q, o, ELEMENTSOF(o));
        run_claims(h, o, ELEMENTSOF(o));
        for (size_t i = 0; i < ELEMENTSOF(o); i++) {
                if (o[i].r >= 0) {
                        ok++;
                        assert_int_equal(vf_type(h, o[i].vf), 1150);
                        continue;
                }
                refused++;
                assert_string_equal(o[i].code, "insufficient_resources");
                assert_int_equal(o[i].status, 409);
                assert_string_equal(o[i].error, "no available VF for profile \"NVIDIA L40S-4Q\"");
                /* Fast: no configure was tried for them (PLACE-7 counted the reservations). */
                assert_true(o[i].finished - started < 2 * NSEC_PER_SEC);
                assert_int_equal(o[i].selections, 1);
        }
        assert_int_equal(ok, 3);
        assert_int_equal(refused, 2);
        assert_int_equal(h->n_saves, 3);
        assert_int_equal(count_type(h, MIXED_PF, 1150), 12); /* nothing configured beyond 3 */
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                claim_outcome_clear(&o[i]);
}

static void test_mixed_sizes_wait_for_fresh_rounds(void **state) /* PLACE-7, PLACE-8, PLACE-9 */
{
        Harness *h = H(state);
        ClaimOutcome o[6] = {};

        /* 4Q, 2Q, 4Q, 2Q, ...: a 2Q claim behind an unfinished 4Q reservation waits. */
        for (size_t i = 0; i < ELEMENTSOF(o); i++) {
                char id[32];
                snprintf(id, sizeof id, "inst%02zu", i);
                ClaimRequest req = {.instance_id = id, .profile = i % 2 ? P_2Q : P_4Q};
                assert_int_equal(claimer_claim(h->cl, &req, harness_on_claim, &o[i]), 0);
        }
        run_claims(h, o, ELEMENTSOF(o));
        for (size_t i = 0; i < ELEMENTSOF(o); i++) {
                assert_success(&o[i]);
                assert_int_equal(vf_type(h, o[i].vf), i % 2 ? 1148 : 1150);
        }
        assert_int_equal(count_type(h, MIXED_PF, 1150), 3);
        assert_int_equal(count_type(h, MIXED_PF, 1148), 3);
        /* The stale answers were not used: at least one more round after the 4Q writes. */
        assert_true(claimer_get_stats(h->cl)->rounds >= 2);
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                claim_outcome_clear(&o[i]);
}

static void test_nvml_hang_costs_one_timeout(void **state) /* NVML-10, PLACE-8, PLACE-9 */
{
        Harness *h = H(state);
        ClaimOutcome o[4] = {};

        ctl(h, "nvml hang on");
        nsec_t started = harness_now();
        start_claims(h, P_2Q, o, ELEMENTSOF(o));
        run_claims(h, o, ELEMENTSOF(o));
        for (size_t i = 0; i < ELEMENTSOF(o); i++) {
                nsec_t took = o[i].finished - started;
                /* Each claim ends after about one nvml_timeout, not one per claim. */
                if (took < 900 * NSEC_PER_MSEC || took > 2500 * NSEC_PER_MSEC)
                        fail_msg("claim %zu ended after %" PRIu64 " ms", i, took / NSEC_PER_MSEC);
                if (getenv("CLAIM_SIM_VERBOSE"))
                        fprintf(stderr, "# claim %zu: %d %s after %" PRIu64 " ms\n", i, o[i].r,
                                o[i].r < 0 ? o[i].error : o[i].vf, took / NSEC_PER_MSEC);
                if (o[i].r < 0) {
                        /* PLACE-8 */
                        assert_string_equal(o[i].code, "placement_disabled");
                        assert_int_equal(o[i].status, 503);
                        assert_string_equal(o[i].error, "vGPU placement round timed out after 1s");
                }
        }
        /* One NVML round for all of them. */
        assert_int_equal(claimer_get_stats(h->cl)->rounds, 1);
        ctl(h, "nvml hang off");
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                claim_outcome_clear(&o[i]);
}

/* Fills host-l40s.yaml's mixed-size card with claimed 2Q so that only the equal-size one counts. */
static void fill_mixed_4vfs(Harness *h)
{
        char vf[PCI_ADDRESS_STRLEN];
        for (unsigned i = 0; i < 4; i++) {
                vf_name(MIXED_PF, i, vf);
                assert_int_equal(harness_set_type(h, vf, TYPE_2Q), 0);
                harness_owner_claim(h, vf, 2048);
        }
}

#define EQUAL_PF "0001:c8:00.0"

static void test_dirty_vf_reset_then_claimed(void **state) /* PLACE-11 */
{
        Harness *h = H(state);
        ClaimOutcome o = {};
        char vf[PCI_ADDRESS_STRLEN];

        fill_mixed_4vfs(h);
        /* The equal-size card: a leftover 2Q on VF 0 (no claim), claimed 2Q on the rest. */
        for (unsigned i = 0; i < 4; i++) {
                vf_name(EQUAL_PF, i, vf);
                assert_int_equal(harness_set_type(h, vf, TYPE_2Q), 0);
                if (i > 0)
                        harness_owner_claim(h, vf, 2048);
        }
        start_claims(h, P_2Q, &o, 1);
        run_claims(h, &o, 1);
        assert_success(&o);
        assert_string_equal(o.vf, vf_name(EQUAL_PF, 0, vf));
        assert_int_equal(o.selections, 1);
        assert_int_equal(vf_type(h, o.vf), 1148);
        claim_outcome_clear(&o);
}

static void test_nothing_selectable_resets_dirty_vfs(void **state) /* PLACE-16 */
{
        Harness *h = H(state);
        ClaimOutcome o = {};
        char vf[PCI_ADDRESS_STRLEN];

        fill_mixed_4vfs(h);
        /* A leftover 4Q fixes the equal-size card's class: no VF lists 2Q (SIM-7). */
        assert_int_equal(harness_set_type(h, vf_name(EQUAL_PF, 0, vf), TYPE_4Q), 0);
        assert_false(creatable_lists(h, vf_name(EQUAL_PF, 1, vf), P_2Q));

        start_claims(h, P_2Q, &o, 1);
        run_claims(h, &o, 1);
        assert_success(&o);
        assert_string_equal(o.gpu, EQUAL_PF);
        assert_int_equal(o.selections, 2); /* once before the resets, once after */
        assert_int_equal(vf_type(h, o.vf), 1148);
        assert_int_equal(count_type(h, EQUAL_PF, 1150), 0);
        claim_outcome_clear(&o);
}

static void test_dirty_vf_held_open(void **state) /* PLACE-12, PLACE-16, DEV-9 */
{
        Test *t = *state;
        Harness *h = &t->h;
        ClaimOutcome o = {};
        char vf[PCI_ADDRESS_STRLEN], dirty[PCI_ADDRESS_STRLEN];

        fill_mixed_4vfs(h);
        for (unsigned i = 0; i < 4; i++) {
                vf_name(EQUAL_PF, i, vf);
                assert_int_equal(harness_set_type(h, vf, TYPE_2Q), 0);
                if (i > 0)
                        harness_owner_claim(h, vf, 2048);
        }
        vf_name(EQUAL_PF, 0, dirty);
        hold_vf(t, dirty); /* a VMM nobody knows about still has it open */

        _cleanup_free_ char *buf = run_claim_logged(h, P_2Q, &o, LOG_LEVEL_WARNING);

        assert_int_equal(o.r, -ENOSPC);
        assert_string_equal(o.code, "insufficient_resources");
        assert_int_equal(o.status, 409);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want,
                                   "repair dirty VF %s before claim: vendor VFIO vGPU on VF %s "
                                   "is still in use",
                                   dirty, dirty),
                         0);
        assert_string_equal(o.error, want);
        assert_non_null(strstr(buf, "<4>dirty vGPU VF refused reset; trying another VF vf="));
        assert_int_equal(vf_type(h, dirty), 1148); /* held: never reset */
        assert_int_equal(h->n_saves, 0);           /* the claim was never written */
        claim_outcome_clear(&o);
}

static void test_placed_log_line(void **state) /* PLACE-22 */
{
        Harness *h = H(state);
        ClaimOutcome o = {};
        _cleanup_free_ char *buf = run_claim_logged(h, P_2Q, &o, LOG_LEVEL_INFO);
        assert_success(&o);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(strprintf(&want,
                                   "<6>placed vGPU claim instance_id=inst00 vf=%s gpu=%s "
                                   "profile=\"NVIDIA L40S-2Q\" policy=spread nvml_ms=%" PRIu64 "\n",
                                   o.vf, o.gpu, o.nvml_ms),
                         0);
        assert_non_null(strstr(buf, want));
        claim_outcome_clear(&o);
}

static void test_mdev_claims(void **state) /* PLACE-1, PLACE-6, PLACE-20, DEV-16 */
{
        Harness *h = H(state);
        ClaimOutcome o[2] = {};

        start_claims(h, "NVIDIA A40-2Q", o, ELEMENTSOF(o));
        run_claims(h, o, ELEMENTSOF(o));
        json_auto_t *st = harness_state(h);
        for (size_t i = 0; i < ELEMENTSOF(o); i++) {
                assert_success(&o[i]);
                for (size_t k = 0; k < i; k++)
                        assert_string_not_equal(o[i].vf, o[k].vf);
                /* The VF now carries the mdev the claim named. */
                size_t g, v;
                json_t *gpu, *vf;
                bool found = false;
                json_array_foreach (json_object_get(st, "gpus"), g, gpu) {
                        json_array_foreach (json_object_get(gpu, "vfs"), v, vf) {
                                if (streq(json_string_value(json_object_get(vf, "address")),
                                          o[i].vf))
                                        found = json_is_object(json_object_get(vf, "mdev"));
                        }
                }
                assert_true(found);
        }
        for (size_t i = 0; i < ELEMENTSOF(o); i++)
                claim_outcome_clear(&o[i]);
}

int main(int argc, char **argv)
{
        if (argc != 3) {
                fprintf(stderr, "usage: %s LIBNVIDIA_ML l40s|mixed|mdev\n", argv[0]);
                return 2;
        }
        nvml_library = argv[1];
        host_kind = argv[2];

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        const struct CMUnitTest l40s[] = {
            T(test_concurrent_claims_never_share_a_vf),
            T(test_refreshes_never_overlap_writes),
            T(test_refresh_waits_for_claims_in_flight),
            T(test_failed_save_leaves_vf_untouched),
            T(test_capacity_refusal_retries_once),
            T(test_second_capacity_refusal_fails_409),
            T(test_placed_log_line),
            T(test_dirty_vf_reset_then_claimed),
            T(test_dirty_vf_held_open),
            T(test_nothing_selectable_resets_dirty_vfs),
            T(test_owner_release_waits_for_refresh),
        };
        const struct CMUnitTest mixed[] = {
            T(test_4q_lands_where_sysfs_hides_it),
            T(test_five_4q_claims_three_placements),
            T(test_concurrent_claims_never_share_a_vf),
            T(test_mixed_sizes_wait_for_fresh_rounds),
            cmocka_unit_test_setup_teardown(test_nvml_hang_costs_one_timeout, setup_short_timeout,
                                            teardown),
        };
        const struct CMUnitTest mdev[] = {
            T(test_mdev_claims),
        };
        if (streq(host_kind, "l40s"))
                return cmocka_run_group_tests_name("claim-sim-l40s", l40s, NULL, NULL);
        if (streq(host_kind, "mdev"))
                return cmocka_run_group_tests_name("claim-sim-mdev", mdev, NULL, NULL);
        return cmocka_run_group_tests_name("claim-sim-mixed", mixed, NULL, NULL);
}
