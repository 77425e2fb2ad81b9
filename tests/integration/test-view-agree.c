/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * One picture of the host (ARCHITECTURE.md decision 3; API-5, API-6, MET-4, PLACE-21): what
 * /resources and /gpus read (api_snapshot_build()) and what a claim selects on
 * (claimer_build_view()) agree VF by VF and GPU by GPU through a sequence of claims, a
 * reservation in flight, a dirty VF and a rediscovery, on a vendor-VFIO host with both modes, a
 * mixed-size-only host and an mdev host. Only the NVML counts may differ: the API reads the
 * cache, a claim its fresh round answers.
 *
 * argv[1] is the fake libnvidia-ml.so.1, argv[2] the host kind: "l40s", "mixed" or "mdev".
 * Run under run-with-sim.sh.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "claim-harness.h"

#define WAIT (60 * NSEC_PER_SEC)

static const char *nvml_library;
static const char *host_kind;

static void assert_same_str(const char *what, const char *vf, const char *a, const char *b)
{
        if (!streq_ptr(a, b))
                fail_msg("%s %s: API \"%s\", claim \"%s\"", vf, what, a ? a : "(null)",
                         b ? b : "(null)");
}

static void assert_same_u64(const char *what, const char *vf, uint64_t a, uint64_t b)
{
        if (a != b)
                fail_msg("%s %s: API %" PRIu64 ", claim %" PRIu64, vf, what, a, b);
}

static void assert_same_gpu(const PlacementGpu *a, const PlacementGpu *b)
{
        const char *pf = a->address;
        assert_same_str("address", pf, a->address, b->address);
        assert_same_u64("framework", pf, a->framework, b->framework);
        assert_same_u64("mode", pf, a->mode, b->mode);
        assert_same_u64("nvml_usable", pf, a->nvml_usable, b->nvml_usable);
        assert_same_u64("catalog_from_nvml", pf, a->catalog_from_nvml, b->catalog_from_nvml);
        assert_same_u64("n_catalog", pf, a->n_catalog, b->n_catalog);
        for (size_t k = 0; k < a->n_catalog; k++) {
                assert_same_str("catalog name", pf, a->catalog[k].name, b->catalog[k].name);
                assert_same_u64("catalog type", pf, a->catalog[k].type_id, b->catalog[k].type_id);
                assert_same_str("catalog mdev type", pf, a->catalog[k].mdev_type,
                                b->catalog[k].mdev_type);
                assert_same_u64("catalog framebuffer", pf, a->catalog[k].framebuffer_mib,
                                b->catalog[k].framebuffer_mib);
        }
        if (a->framework == PLACEMENT_FRAMEWORK_MDEV) {
                /* PLACE-6 decides on mdev GPUs; API-6 shows them equal-size. */
                assert_int_equal(a->mode, PLACEMENT_MODE_EQUAL);
                assert_false(a->nvml_usable);
        }
}

static void assert_same_vf(const PlacementVf *a, const PlacementVf *b)
{
        const char *vf = a->address;
        assert_same_str("address", vf, a->address, b->address);
        assert_same_str("parent", vf, a->parent, b->parent);
        assert_same_u64("readable", vf, a->readable, b->readable);
        assert_same_u64("current type", vf, a->current_type, b->current_type);
        assert_same_u64("has_mdev", vf, a->has_mdev, b->has_mdev);
        assert_same_u64("framebuffer", vf, a->framebuffer_mib, b->framebuffer_mib);
        assert_same_u64("claimed", vf, a->claimed, b->claimed);
        assert_same_u64("reserved", vf, a->reserved, b->reserved);
        assert_same_u64("reserved type", vf, a->reserved_type, b->reserved_type);
        assert_same_u64("uncertain", vf, a->uncertain, b->uncertain);
        assert_same_u64("quarantined", vf, a->quarantined, b->quarantined);
        assert_same_u64("n_creatable", vf, a->n_creatable, b->n_creatable);
        for (size_t k = 0; k < a->n_creatable; k++)
                assert_same_str("creatable", vf, a->creatable[k], b->creatable[k]);
        assert_same_u64("n_mdev_types", vf, a->n_mdev_types, b->n_mdev_types);
        for (size_t k = 0; k < a->n_mdev_types; k++) {
                assert_same_str("mdev type", vf, a->mdev_types[k].mdev_type,
                                b->mdev_types[k].mdev_type);
                assert_same_u64("available_instances", vf, a->mdev_types[k].available_instances,
                                b->mdev_types[k].available_instances);
        }
}

/*
 * Builds both pictures now and compares them. Returns how many VFs are reserved and claimed,
 * so that the sequence can check it really passed through those states.
 */
static void assert_agree(Harness *h, unsigned *ret_reserved, unsigned *ret_claimed)
{
        ApiContext ctx = {
            .nvml = h->nvml,
            .workers = h->pool,
            .tracker = h->tracker,
            .claimer = h->cl,
        };
        _cleanup_api_snapshot_ ApiSnapshot *api = NULL;
        _cleanup_placement_view_ PlacementView *claim = NULL;
        assert_int_equal(api_snapshot_build(&ctx, &api), 0);
        assert_int_equal(claimer_build_view(h->cl, &claim), 0);
        assert_non_null(api->view);

        const PlacementSnapshot *a = &api->view->snapshot, *c = &claim->snapshot;
        assert_int_equal(a->n_gpus, c->n_gpus);
        assert_int_equal(a->n_vfs, c->n_vfs);
        assert_true(a->n_vfs > 0);
        for (size_t i = 0; i < a->n_gpus; i++)
                assert_same_gpu(&a->gpus[i], &c->gpus[i]);
        unsigned reserved = 0, claimed = 0;
        for (size_t i = 0; i < a->n_vfs; i++) {
                assert_same_vf(&a->vfs[i], &c->vfs[i]);
                reserved += a->vfs[i].reserved;
                claimed += a->vfs[i].claimed;
                /* API-6's state is the snapshot's: a claimed VF is never shown free. */
                if (a->vfs[i].claimed)
                        assert_int_equal(api->vf_states[i], API_VF_CLAIMED);
                else if (a->vfs[i].reserved)
                        assert_int_equal(api->vf_states[i], API_VF_RESERVED);
        }
        if (ret_reserved)
                *ret_reserved = reserved;
        if (ret_claimed)
                *ret_claimed = claimed;
}

static bool save_pending_or_done(Harness *h, void *arg)
{
        const ClaimOutcome *o = arg;
        return h->n_pending > 0 || o->done;
}

static bool outcome_done(Harness *h, void *arg)
{
        const ClaimOutcome *o = arg;
        return o->done;
}

/* One claim, compared while its reservation waits for the durable save and after it ends. */
static void claim_and_compare(Harness *h, const char *id, const char *profile,
                              unsigned claimed_before)
{
        ClaimOutcome o = {};
        unsigned reserved = 0, claimed = 0;
        ClaimRequest req = {.instance_id = id, .profile = profile};
        assert_int_equal(claimer_claim(h->cl, &req, harness_on_claim, &o), 0);

        assert_int_equal(harness_run_until(h, save_pending_or_done, &o, WAIT), 0);
        if (o.done)
                fail_msg("claim %s ended before its save: %s %s", id, o.code, o.error);
        assert_agree(h, &reserved, &claimed);
        /* PLACE-2: the reservation is seen before the save completes; the harness's owner
         * records the claim when save() starts, so the VF shows both. */
        assert_int_equal(reserved, 1);
        assert_int_equal(claimed, claimed_before + 1);

        assert_int_equal(harness_run_until(h, outcome_done, &o, WAIT), 0);
        if (o.r < 0)
                fail_msg("claim %s failed: %s %s", id, o.code, o.error);
        assert_agree(h, &reserved, &claimed);
        assert_int_equal(reserved, 0);
        assert_int_equal(claimed, claimed_before + 1);
        claim_outcome_clear(&o);
}

static void test_views_agree(void **state)
{
        Harness *h = *state;
        bool mdev = streq(host_kind, "mdev");
        const char *p2 = mdev ? "NVIDIA A40-2Q" : "NVIDIA L40S-2Q";
        /* An mdev GPU holds one size at a time (SIM-5): its second claim is another 2Q. */
        const char *second = mdev ? "NVIDIA A40-2Q" : "NVIDIA L40S-4Q";

        assert_agree(h, NULL, NULL);
        claim_and_compare(h, "agree-1", p2, 0);
        claim_and_compare(h, "agree-2", second, 1);

        if (!mdev) {
                /* A leftover type nobody claims (dirty), seen by the next discovery. */
                const GpuHost *host = gpu_tracker_host(h->tracker);
                const GpuVf *free_vf = NULL;
                for (size_t i = 0; i < host->n_vfs && !free_vf; i++) {
                        uint64_t fb;
                        if (host->vfs[i].current_type_id == 0 &&
                            !harness_is_claimed(h, host->vfs[i].address, &fb))
                                free_vf = &host->vfs[i];
                }
                assert_non_null(free_vf);
                const GpuProfile *p =
                    gpu_find_profile(gpu_host_find_gpu(host, free_vf->parent), p2);
                assert_non_null(p);
                char type[16];
                snprintf(type, sizeof type, "%" PRIu32, p->type_id);
                _cleanup_free_ char *vf = strdup(free_vf->address);
                assert_int_equal(harness_set_type(h, vf, type), 0);
        }
        assert_int_equal(harness_discover(h), 0);
        unsigned claimed = 0;
        assert_agree(h, NULL, &claimed);
        assert_int_equal(claimed, 2);

        claim_and_compare(h, "agree-3", p2, 2);
}

static int setup(void **state)
{
        Harness *h = calloc(1, sizeof *h);
        const char *step;
        assert_non_null(h);
        log_set_max_level(LOG_LEVEL_ERR);
        int r = harness_start(h, nvml_library, 5 * NSEC_PER_SEC, &step);
        if (r < 0)
                fail_msg("start: %s: %s", step, strerror(-r));
        *state = h;
        return 0;
}

static int teardown(void **state)
{
        Harness *h = *state;
        int r = harness_reset_all(h);
        harness_stop(h);
        free(h);
        assert_int_equal(r, 0);
        return 0;
}

int main(int argc, char **argv)
{
        if (argc != 3) {
                fprintf(stderr, "usage: %s LIBNVIDIA_ML l40s|mixed|mdev\n", argv[0]);
                return 2;
        }
        nvml_library = argv[1];
        host_kind = argv[2];
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_views_agree, setup, teardown),
        };
        char name[32];
        snprintf(name, sizeof name, "view-agree-%s", host_kind);
        return cmocka_run_group_tests_name(name, tests, NULL, NULL);
}
