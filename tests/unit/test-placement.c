/* SPDX-License-Identifier: GPL-2.0-or-later */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "base/base.h"
#include "placement/placement.h"

#define P1Q "NVIDIA L40S-1Q"
#define P2Q "NVIDIA L40S-2Q"
#define P4Q "NVIDIA L40S-4Q"
#define T1Q 1001
#define T2Q 1002
#define T4Q 1004

#define E3 "0000:e3:00.0"
#define E4 "0000:e4:00.0"
#define E5 "0000:e5:00.0"

static const PlacementProfile l40s[] = {
    {.name = P1Q, .type_id = T1Q, .framebuffer_mib = 1024},
    {.name = P2Q, .type_id = T2Q, .framebuffer_mib = 2048},
    {.name = P4Q, .type_id = T4Q, .framebuffer_mib = 4096},
};

/* The same names under other IDs: type IDs only mean something on their own card (DISC-19). */
static const PlacementProfile l40s_other_ids[] = {
    {.name = P2Q, .type_id = 2002, .framebuffer_mib = 2048},
};

static const PlacementProfile l40s_no_2q[] = {
    {.name = P1Q, .type_id = T1Q, .framebuffer_mib = 1024},
};

static const PlacementProfile mdev_catalog[] = {
    {.name = P2Q, .mdev_type = "nvidia-558", .framebuffer_mib = 2048},
};

static const char *const lists_2q[] = {P1Q, P2Q};
static const char *const lists_1q[] = {P1Q};

/*
 * Field lists for designated initializers. Tests state a case as "the usual, except ...", so a
 * later designator overriding one of these is intended.
 */
#pragma GCC diagnostic ignored "-Woverride-init"

/* An equal-size vendor VFIO card whose catalog came from sysfs lists. */
#define GPU_SYSFS(addr)                                                \
        .address = addr, .framework = PLACEMENT_FRAMEWORK_VENDOR_VFIO, \
        .mode = PLACEMENT_MODE_EQUAL, .catalog = l40s, .n_catalog = ELEMENTSOF(l40s)
/* A mixed-size card with a usable NVML answer. */
#define GPU_NVML(addr, counts)                                                           \
        .address = addr, .framework = PLACEMENT_FRAMEWORK_VENDOR_VFIO,                   \
        .mode = PLACEMENT_MODE_MIXED, .nvml_usable = true, .nvml_counts = counts,        \
        .n_nvml_counts = ELEMENTSOF(counts), .catalog_from_nvml = true, .catalog = l40s, \
        .n_catalog = ELEMENTSOF(l40s)
/* A free VF whose sysfs list names 1Q and 2Q. */
#define VF(addr, pf)                                                            \
        .address = addr, .parent = pf, .readable = true, .creatable = lists_2q, \
        .n_creatable = ELEMENTSOF(lists_2q)
#define CLAIMED(type, mib) .current_type = type, .framebuffer_mib = mib, .claimed = true

#define SNAPSHOT(g, v) ((PlacementSnapshot){g, ELEMENTSOF(g), v, ELEMENTSOF(v)})

/* A scripted picker: records what it was asked and answers a fixed index. */
typedef struct Script {
        size_t answer;
        size_t calls;
        size_t last_n;
} Script;

static size_t script_pick(size_t n, void *userdata)
{
        Script *s = userdata;
        s->calls++;
        s->last_n = n;
        return s->answer;
}

static int select_with(const PlacementSnapshot *s, const char *profile, PlacementPolicy policy,
                       const char *const *exclude, size_t n_exclude, Script *script,
                       PlacementChoice *ret, char **error)
{
        PlacementRequest req = {
            .profile = profile, .policy = policy, .exclude = exclude, .n_exclude = n_exclude};
        PlacementPicker picker = {.pick = script_pick, .userdata = script};
        return placement_select_vf(s, &req, &picker, ret, error);
}

/* The VF chosen with the picker taking index 0; fails the test when nothing is chosen. */
static const char *chosen(const PlacementSnapshot *s, const char *profile, PlacementPolicy policy,
                          const char *const *exclude, size_t n_exclude)
{
        Script script = {};
        PlacementChoice c;
        _cleanup_free_ char *error = NULL;
        int r = select_with(s, profile, policy, exclude, n_exclude, &script, &c, &error);
        if (r < 0)
                fail_msg("select %s: %d %s", profile, r, error ? error : "(no message)");
        assert_int_equal(script.calls, 1);
        return c.vf->address;
}

/* Runs a selection that must fail, returns its code and checks the message byte for byte. */
static int fails_with(const PlacementSnapshot *s, const char *profile, const char *message)
{
        Script script = {};
        PlacementChoice c = {.vf = NULL};
        _cleanup_free_ char *error = NULL;
        int r = select_with(s, profile, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, &error);
        assert_true(r < 0);
        assert_non_null(error);
        assert_string_equal(error, message);
        assert_null(c.vf); /* out-parameter untouched on failure */
        assert_int_equal(script.calls, 0);
        return r;
}

#define NO_VF_2Q "no available VF for profile \"NVIDIA L40S-2Q\""

/* PLACE-3 */
static void test_exclusions(void **state)
{
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}};
        PlacementVf vfs[] = {
            {VF("0000:e3:00.4", E3), .quarantined = true},
            {VF("0000:e3:00.5", E3), CLAIMED(T2Q, 2048)},
            {VF("0000:e3:00.6", E3), .reserved = true, .reserved_type = T2Q},
            {VF("0000:e3:00.7", E3), .uncertain = true},
            {VF("0000:e3:01.0", E3), .readable = false},
            {VF("0000:e3:01.1", NULL)},
            {VF("0000:e3:01.2", "0000:99:00.0")},
            /* claimed before its configure: claimed, not configured */
            {VF("0000:e3:01.3", E3), .claimed = true, .framebuffer_mib = 2048},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);

        assert_int_equal(fails_with(&s, P2Q, NO_VF_2Q), -ENOSPC);
        for (size_t i = 0; i < ELEMENTSOF(vfs); i++)
                assert_false(placement_vf_is_allocatable(&s, &vfs[i]));

        PlacementVf more[] = {
            vfs[0],
            vfs[1],
            vfs[2],
            vfs[3],
            vfs[4],
            vfs[5],
            vfs[6],
            vfs[7],
            {VF("0000:e3:01.4", E3)},
            {VF("0000:e3:01.5", E3)},
        };
        s = SNAPSHOT(gpus, more);
        assert_true(placement_vf_is_allocatable(&s, &more[8]));
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e3:01.4");

        /* VFs already tried in this claim are skipped; with none left the claim fails. */
        const char *tried[] = {"0000:e3:01.4"};
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, tried, 1), "0000:e3:01.5");
        const char *both[] = {"0000:e3:01.5", "0000:e3:01.4"};
        Script script = {};
        PlacementChoice c;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, both, 2, &script, &c, &error), -ENOSPC);
        assert_string_equal(error, NO_VF_2Q);
}

/* PLACE-3: quarantine applies on mdev hosts too */
static void test_exclusions_mdev(void **state)
{
        PlacementGpu gpus[] = {{.address = E3,
                                .framework = PLACEMENT_FRAMEWORK_MDEV,
                                .catalog = mdev_catalog,
                                .n_catalog = ELEMENTSOF(mdev_catalog)}};
        PlacementMdevAvailability avail[] = {{"nvidia-558", 4}};
        PlacementVf vfs[] = {
            {.address = "0000:e3:00.4",
             .parent = E3,
             .readable = true,
             .quarantined = true,
             .mdev_types = avail,
             .n_mdev_types = 1},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        fails_with(&s, P2Q, NO_VF_2Q);
        assert_int_equal(placement_count_available(&s, P2Q), 0);
}

/* PLACE-4, PLACE-7 */
static void test_nvml_mixed_size(void **state)
{
        PlacementNvmlCount counts[] = {{.type_id = T2Q, .count = 1}};
        PlacementGpu gpus[] = {{GPU_NVML(E3, counts)}};
        /* The driver hid 2Q from this VF's list; NVML still has a placement for it. */
        PlacementVf vfs[] = {{VF("0000:e3:00.4", E3), .creatable = lists_1q, .n_creatable = 1}};
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);

        assert_int_equal(placement_gpu_path(&gpus[0]), PLACEMENT_PATH_NVML);
        Script script = {};
        PlacementChoice c;
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL),
                         0);
        assert_string_equal(c.vf->address, "0000:e3:00.4");
        assert_ptr_equal(c.gpu, &gpus[0]);
        assert_int_equal(c.profile->type_id, T2Q);
        assert_false(c.dirty);

        /* Reservations the answer cannot have seen take its placements. */
        counts[0].unreflected = 1;
        fails_with(&s, P2Q, NO_VF_2Q);
        counts[0] = (PlacementNvmlCount){.type_id = T2Q, .count = 3, .unreflected = 2};
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e3:00.4");
        counts[0] = (PlacementNvmlCount){.type_id = T2Q, .count = 1, .unreflected = 5};
        fails_with(&s, P2Q, NO_VF_2Q);

        /* No entry for the type: no placement. */
        counts[0] = (PlacementNvmlCount){.type_id = T4Q, .count = 9};
        fails_with(&s, P2Q, NO_VF_2Q);
}

/* PLACE-4, DISC-19: names resolve per GPU */
static void test_resolve_per_gpu(void **state)
{
        PlacementGpu gpus[] = {
            {GPU_SYSFS(E3), .catalog = l40s_no_2q, .n_catalog = 1},
            {GPU_SYSFS(E4), .catalog = l40s_other_ids, .n_catalog = 1},
        };
        /* e3's VF lists 2Q, yet its GPU's catalog does not resolve it. */
        PlacementVf vfs[] = {{VF("0000:e3:00.4", E3)}, {VF("0000:e4:00.4", E4)}};
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        Script script = {};
        PlacementChoice c;
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL),
                         0);
        assert_string_equal(c.vf->address, "0000:e4:00.4");
        assert_ptr_equal(c.profile, &l40s_other_ids[0]);
        assert_int_equal(c.profile->type_id, 2002);
        assert_null(placement_gpu_find_profile(&gpus[0], P2Q));
        /* /resources agrees (PLACE-21): e3's listing VF does not count. */
        assert_int_equal(placement_count_available(&s, P2Q), 1);
}

/* PLACE-5 */
static void test_sysfs_lists(void **state)
{
        PlacementNvmlCount counts[] = {{.type_id = T2Q, .count = 8}};
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}};
        PlacementVf vfs[] = {
            {VF("0000:e3:00.4", E3), .creatable = lists_1q, .n_creatable = 1},
            {VF("0000:e3:00.5", E3)},
            {VF("0000:e3:00.6", E3), .creatable = NULL, .n_creatable = 0},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        Script script = {};
        PlacementChoice c;

        assert_int_equal(placement_gpu_path(&gpus[0]), PLACEMENT_PATH_SYSFS);
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL),
                         0);
        assert_int_equal(script.last_n, 1);
        assert_string_equal(c.vf->address, "0000:e3:00.5");

        /* A mixed-size GPU in NVML fallback, or of unknown mode, also trusts the lists. */
        gpus[0] = (PlacementGpu){GPU_NVML(E3, counts), .nvml_usable = false};
        assert_int_equal(placement_gpu_path(&gpus[0]), PLACEMENT_PATH_SYSFS);
        script = (Script){};
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL),
                         0);
        assert_int_equal(script.last_n, 1);
        assert_string_equal(c.vf->address, "0000:e3:00.5");
        gpus[0] = (PlacementGpu){GPU_NVML(E3, counts), .mode = PLACEMENT_MODE_UNKNOWN};
        assert_int_equal(placement_gpu_path(&gpus[0]), PLACEMENT_PATH_SYSFS);

        /* Only the listing VF was ever eligible: without it there is none. */
        const char *tried[] = {"0000:e3:00.5"};
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, tried, 1, &script, &c, NULL),
                         -ENOSPC);
}

/* PLACE-6 */
static void test_mdev(void **state)
{
        PlacementGpu gpus[] = {{.address = E3,
                                .framework = PLACEMENT_FRAMEWORK_MDEV,
                                .catalog = mdev_catalog,
                                .n_catalog = ELEMENTSOF(mdev_catalog)}};
        PlacementMdevAvailability two[] = {{"nvidia-557", 3}, {"nvidia-558", 2}};
        PlacementMdevAvailability none[] = {{"nvidia-558", 0}};
        PlacementMdevAvailability other[] = {{"nvidia-559", 4}};
        PlacementVf vfs[] = {
            {.address = "0000:e3:00.4",
             .parent = E3,
             .readable = true,
             .has_mdev = true,
             .claimed = true,
             .framebuffer_mib = 2048,
             .mdev_types = two,
             .n_mdev_types = 2},
            {.address = "0000:e3:00.5",
             .parent = E3,
             .readable = true,
             .has_mdev = true,
             .mdev_types = two,
             .n_mdev_types = 2}, /* a leftover mdev: never reused */
            {.address = "0000:e3:00.6",
             .parent = E3,
             .readable = true,
             .mdev_types = none,
             .n_mdev_types = 1},
            {.address = "0000:e3:00.7",
             .parent = E3,
             .readable = true,
             .mdev_types = other,
             .n_mdev_types = 1},
            {.address = "0000:e3:01.0",
             .parent = E3,
             .readable = true,
             .mdev_types = two,
             .n_mdev_types = 2},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        Script script = {};
        PlacementChoice c;

        assert_int_equal(placement_gpu_path(&gpus[0]), PLACEMENT_PATH_MDEV);
        assert_true(placement_vf_is_dirty(&vfs[1]));
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL),
                         0);
        assert_int_equal(script.last_n, 1);
        assert_string_equal(c.vf->address, "0000:e3:01.0");
        assert_string_equal(c.profile->mdev_type, "nvidia-558");
        assert_false(c.dirty);

        const char *tried[] = {"0000:e3:01.0"};
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, tried, 1, &script, &c, NULL),
                         -ENOSPC);
}

/* PLACE-11 */
static void test_dirty(void **state)
{
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}};
        PlacementVf leftover_2q = {.address = "0000:e3:00.4",
                                   .parent = E3,
                                   .readable = true,
                                   .current_type = T2Q,
                                   .framebuffer_mib = 2048};
        PlacementVf leftover_4q = {.address = "0000:e3:00.5",
                                   .parent = E3,
                                   .readable = true,
                                   .current_type = T4Q,
                                   .framebuffer_mib = 4096};
        PlacementVf clean = {VF("0000:e3:00.6", E3)};
        Script script = {};
        PlacementChoice c;

        /* A clean candidate wins over any dirty one on the same GPU. */
        PlacementVf mixed[] = {leftover_2q, clean};
        PlacementSnapshot s = SNAPSHOT(gpus, mixed);
        assert_true(placement_vf_is_dirty(&mixed[0]));
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL),
                         0);
        assert_string_equal(c.vf->address, "0000:e3:00.6");
        assert_false(c.dirty);
        assert_int_equal(script.last_n, 1);

        /* Without one, a leftover of P's own type qualifies even on a GPU not eligible. */
        PlacementVf only_dirty[] = {leftover_2q, leftover_4q};
        s = SNAPSHOT(gpus, only_dirty);
        script = (Script){};
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL),
                         0);
        assert_string_equal(c.vf->address, "0000:e3:00.4");
        assert_true(c.dirty);
        assert_int_equal(script.last_n, 1);

        /* Another leftover type qualifies only if the GPU is eligible for P. */
        PlacementVf other_type[] = {leftover_4q};
        s = SNAPSHOT(gpus, other_type);
        fails_with(&s, P2Q, NO_VF_2Q);
        /* Any readable VF's list speaks for the card, even one that cannot take P itself. */
        PlacementVf eligible[] = {leftover_4q, {VF("0000:e3:00.7", E3), .quarantined = true}};
        s = SNAPSHOT(gpus, eligible);
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e3:00.5");

        /* On an NVML GPU, eligible means a free placement for P. */
        PlacementNvmlCount counts[] = {{.type_id = T2Q, .count = 1}};
        PlacementGpu nvml[] = {{GPU_NVML(E3, counts)}};
        s = SNAPSHOT(nvml, other_type);
        script = (Script){};
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL),
                         0);
        assert_true(c.dirty);
        assert_string_equal(c.vf->address, "0000:e3:00.5");
        counts[0].count = 0;
        fails_with(&s, P2Q, NO_VF_2Q);

        /* The exclusions of PLACE-3 hold for dirty VFs too. */
        PlacementVf excluded[] = {
            {.address = "0000:e3:00.4",
             .parent = E3,
             .readable = true,
             .current_type = T2Q,
             .uncertain = true},
            {.address = "0000:e3:00.5",
             .parent = E3,
             .readable = true,
             .current_type = T2Q,
             .quarantined = true},
            {.address = "0000:e3:00.6", .parent = E3, .readable = false, .current_type = T2Q},
            {.address = "0000:e3:00.7", .parent = E3, .readable = true, .current_type = T2Q},
        };
        s = SNAPSHOT(gpus, excluded);
        const char *tried[] = {"0000:e3:00.7"};
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, tried, 1, &script, &c, NULL),
                         -ENOSPC);
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e3:00.7");

        /* A VF configured for a claim or a reservation is not dirty. */
        PlacementVf owned = leftover_2q;
        owned.claimed = true;
        assert_false(placement_vf_is_dirty(&owned));
        owned = leftover_2q;
        owned.reserved = true;
        assert_false(placement_vf_is_dirty(&owned));
}

/* PLACE-15 */
static void test_uniform_pick(void **state)
{
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}};
        /* Given out of order: the picker indexes the group in address order. */
        PlacementVf vfs[] = {
            {VF("0000:e3:00.7", E3)},
            {VF("0000:e3:00.5", E3)},
            {.address = "0000:e3:00.4",
             .parent = E3,
             .readable = true,
             .current_type = T2Q,
             .framebuffer_mib = 2048},
            {VF("0000:e3:01.0", E3)},
            {VF("0000:e3:00.6", E3)},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        const char *order[] = {"0000:e3:00.5", "0000:e3:00.6", "0000:e3:00.7", "0000:e3:01.0"};

        for (size_t i = 0; i < ELEMENTSOF(order); i++) {
                Script script = {.answer = i};
                PlacementChoice c;
                assert_int_equal(
                    select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL), 0);
                assert_int_equal(script.calls, 1);
                assert_int_equal(script.last_n, 4); /* the clean group only */
                assert_string_equal(c.vf->address, order[i]);
                assert_false(c.dirty);
        }

        /* A picker answering out of range is a bug, reported rather than followed. */
        Script script = {.answer = 4};
        PlacementChoice c = {.vf = NULL};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, &error), -EINVAL);
        assert_string_equal(error, "select vGPU VF: picker returned 4 of 4");
        assert_null(c.vf);
}

/* PLACE-15: the production picker */
static void test_random_picker(void **state)
{
        PlacementRandom r;
        assert_int_equal(placement_random_init(&r), 0);
        assert_int_equal(placement_random_pick(1, &r), 0);

        size_t seen[3] = {};
        for (int i = 0; i < 3000; i++) {
                size_t k = placement_random_pick(3, &r);
                assert_true(k < 3);
                seen[k]++;
        }
        /* Each index about 1000 times; a miss of this size has odds below 1e-30. */
        for (size_t k = 0; k < 3; k++)
                assert_in_range(seen[k], 700, 1300);

        /* The state is the caller's: equal states draw equal sequences. */
        PlacementRandom a = {.state = 42}, b = {.state = 42};
        for (int i = 0; i < 100; i++)
                assert_int_equal(placement_random_pick(1000, &a), placement_random_pick(1000, &b));
        for (size_t n = 2; n < 70; n++)
                assert_true(placement_random_pick(n, &a) < n);
        assert_true(placement_random_pick(SIZE_MAX, &a) < SIZE_MAX);
}

/* PLACE-13 (1): quarantined VFs count whatever their state, claimed ones included */
static void test_spread_quarantine_first(void **state)
{
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}, {GPU_SYSFS(E4)}};
        PlacementVf vfs[] = {
            {VF("0000:e3:00.4", E3), CLAIMED(T2Q, 2048), .quarantined = true},
            {VF("0000:e3:00.5", E3)},
            {VF("0000:e4:00.4", E4), CLAIMED(T4Q, 4096)},
            {VF("0000:e4:00.5", E4), CLAIMED(T4Q, 4096)},
            {VF("0000:e4:00.6", E4)},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e4:00.6");
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e4:00.6");
}

/* PLACE-13 (2): one item of unknown size makes the load unknown, ranked after known loads */
static void test_spread_unknown_load(void **state)
{
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}, {GPU_SYSFS(E4)}, {GPU_SYSFS(E5)}};
        PlacementVf vfs[] = {
            {VF("0000:e3:00.4", E3), CLAIMED(T1Q, 1024)},
            {VF("0000:e3:00.5", E3), .reserved = true, .reserved_type = 7}, /* size unknown */
            {VF("0000:e3:00.6", E3)},
            {VF("0000:e4:00.4", E4), CLAIMED(T4Q, 4096)},
            {VF("0000:e4:00.5", E4), CLAIMED(T4Q, 4096)},
            {VF("0000:e4:00.6", E4)},
            {.address = "0000:e5:00.4", .parent = E5, .readable = true, .current_type = 99},
            {VF("0000:e5:00.5", E5)},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e4:00.6");
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e4:00.6");

        /* Two unknown loads are not compared by their known parts: the address decides. */
        const char *no_e4[] = {"0000:e4:00.6"};
        vfs[0].framebuffer_mib = 8192;
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, no_e4, 1), "0000:e3:00.6");
}

/* PLACE-13 (3), (4): load counts claims, reservations and dirty VFs; then the address */
static void test_spread_load(void **state)
{
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}, {GPU_SYSFS(E4)}};
        PlacementVf items[] = {
            {VF("0000:e3:00.4", E3), CLAIMED(T2Q, 2048)},
            {VF("0000:e3:00.4", E3), .reserved = true, .reserved_type = T2Q,
             .framebuffer_mib = 2048},
            {.address = "0000:e3:00.4",
             .parent = E3,
             .readable = true,
             .current_type = T2Q,
             .framebuffer_mib = 2048},
            /* claimed and reserved at once: counted once */
            {VF("0000:e3:00.4", E3), CLAIMED(T2Q, 2048), .reserved = true, .reserved_type = T2Q},
        };
        for (size_t i = 0; i < ELEMENTSOF(items); i++) {
                PlacementVf vfs[] = {
                    items[i],
                    {VF("0000:e3:00.5", E3)},
                    {VF("0000:e4:00.4", E4), CLAIMED(T1Q, 1024)},
                    {VF("0000:e4:00.5", E4), CLAIMED(T1Q, 1024)},
                    {VF("0000:e4:00.6", E4)},
                };
                PlacementSnapshot s = SNAPSHOT(gpus, vfs);
                /* 2048 on both: a tie, so the lower address wins. */
                assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0),
                                    "0000:e3:00.5");
                /* 3072 on e4 still loses, so e3's item counted once, not twice... */
                vfs[2].framebuffer_mib = 2048;
                assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0),
                                    "0000:e3:00.5");
                /* ...and 1024 on e4 wins, so it counted at all. */
                vfs[2].framebuffer_mib = 512;
                vfs[3].framebuffer_mib = 512;
                assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0),
                                    "0000:e4:00.6");
        }

        /* Only GPUs with a candidate are ranked: an idle card without one is passed over. */
        PlacementVf vfs[] = {
            {VF("0000:e3:00.4", E3), .creatable = lists_1q, .n_creatable = 1},
            {VF("0000:e4:00.4", E4), CLAIMED(T4Q, 4096)},
            {VF("0000:e4:00.5", E4)},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e4:00.5");
}

/* PLACE-14 */
static void test_pack(void **state)
{
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}, {GPU_SYSFS(E4)}};

        /* (3) a GPU already holding a claim of P's size first, whatever its load */
        PlacementVf same_size[] = {
            {VF("0000:e3:00.4", E3), CLAIMED(T4Q, 4096)},
            {VF("0000:e3:00.5", E3)},
            {VF("0000:e4:00.4", E4), CLAIMED(T2Q, 2048)},
            {VF("0000:e4:00.5", E4)},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, same_size);
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e4:00.5");
        /* A reservation of that size is not yet a claim: the higher load wins instead. */
        same_size[2] = (PlacementVf){VF("0000:e4:00.4", E4), .reserved = true, .reserved_type = T2Q,
                                     .framebuffer_mib = 2048};
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e3:00.5");

        /* (4) fewer remaining placements: on the sysfs path, fewer eligible VFs */
        PlacementVf fewer[] = {
            {VF("0000:e3:00.4", E3)},
            {VF("0000:e3:00.5", E3)},
            {VF("0000:e4:00.4", E4)},
        };
        s = SNAPSHOT(gpus, fewer);
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e4:00.4");
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e3:00.4");

        /* (4) on the NVML path, fewer free placements, whatever the number of free VFs */
        PlacementNvmlCount five[] = {{.type_id = T2Q, .count = 5}};
        PlacementNvmlCount two[] = {{.type_id = T2Q, .count = 4, .unreflected = 2}};
        PlacementGpu nvml[] = {{GPU_NVML(E3, two)}, {GPU_NVML(E4, five)}};
        PlacementVf placements[] = {
            {VF("0000:e3:00.4", E3)},
            {VF("0000:e3:00.5", E3)},
            {VF("0000:e3:00.6", E3)},
            {VF("0000:e4:00.4", E4)},
        };
        s = SNAPSHOT(nvml, placements);
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e3:00.4");
        two[0].unreflected = 0;
        five[0].count = 3;
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e4:00.4");

        /* (5) higher load, then (6) the lower address */
        PlacementVf load[] = {
            {VF("0000:e3:00.4", E3), CLAIMED(T1Q, 1024)},
            {VF("0000:e3:00.5", E3)},
            {VF("0000:e4:00.4", E4), CLAIMED(T4Q, 4096)},
            {VF("0000:e4:00.5", E4)},
        };
        s = SNAPSHOT(gpus, load);
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e4:00.5");
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e3:00.5");
        load[2].framebuffer_mib = 1024;
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e3:00.5");
}

/* PLACE-23: the table, both policies, rank by rank */
static void test_ranking_example(void **state)
{
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}, {GPU_SYSFS(E4)}, {GPU_SYSFS(E5)}};
        PlacementVf vfs[] = {
            {VF("0000:e3:00.4", E3), CLAIMED(T2Q, 2048)},
            {VF("0000:e3:00.5", E3)},
            {VF("0000:e4:00.4", E4)},
            {VF("0000:e4:00.5", E4)},
            {VF("0000:e5:00.4", E5), .quarantined = true},
            {VF("0000:e5:00.5", E5)},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        /* Excluding the VFs of the GPUs already ranked exposes the next rank. */
        const char *e4_out[] = {"0000:e4:00.4", "0000:e4:00.5"};
        const char *e3_out[] = {"0000:e3:00.5"};
        const char *e3_e4_out[] = {"0000:e3:00.5", "0000:e4:00.4", "0000:e4:00.5"};

        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e4:00.4");
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, e4_out, 2), "0000:e3:00.5");
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, e3_e4_out, 3), "0000:e5:00.5");

        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, NULL, 0), "0000:e3:00.5");
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, e3_out, 1), "0000:e4:00.4");
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_PACK, e3_e4_out, 3), "0000:e5:00.5");
}

/* PLACE-18, PLACE-19 */
static void test_failure_messages(void **state)
{
        PlacementGpu empty[] = {
            {.address = E3, .catalog_from_nvml = true},
            {.address = E4},
        };
        PlacementVf vfs[] = {{VF("0000:e3:00.4", E3)}};
        PlacementSnapshot s = SNAPSHOT(empty, vfs);
        const char *no_profiles = "no creatable vGPU profiles on any VF (GPUs at capacity or dirty "
                                  "VFs consuming framebuffer): profile \"NVIDIA L40S-2Q\"";
        int r = fails_with(&s, P2Q, no_profiles);
        assert_int_equal(r, -ENOSPC);
        s = (PlacementSnapshot){};
        fails_with(&s, P2Q, no_profiles);

        /* Every catalog from NVML: a name none has is unknown. */
        PlacementNvmlCount counts[] = {{.type_id = T2Q, .count = 1}};
        PlacementGpu nvml[] = {{GPU_NVML(E3, counts)}, {GPU_NVML(E4, counts)}};
        s = SNAPSHOT(nvml, vfs);
        r = fails_with(&s, "NVIDIA L40S-3Q", "unknown vGPU profile \"NVIDIA L40S-3Q\"");
        assert_int_equal(r, -ENOENT);

        /* One catalog from shrinking sysfs lists: the name may only be hidden by capacity. */
        nvml[1].catalog_from_nvml = false;
        r = fails_with(&s, "NVIDIA L40S-3Q",
                       "profile \"NVIDIA L40S-3Q\" is not creatable on any VF (unknown profile "
                       "or insufficient capacity)");
        assert_int_equal(r, -ENOSPC);

        /* Known, but no VF can take it. */
        vfs[0].quarantined = true;
        r = fails_with(&s, P2Q, NO_VF_2Q);
        assert_int_equal(r, -ENOSPC);

        /* A NULL error pointer is allowed; a missing argument is refused. */
        Script script = {};
        PlacementChoice c;
        assert_int_equal(select_with(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, NULL),
                         -ENOSPC);
        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            select_with(&s, NULL, PLACEMENT_POLICY_SPREAD, NULL, 0, &script, &c, &error), -EINVAL);
        assert_string_equal(error, "select vGPU VF: missing argument");
        PlacementRequest req = {.profile = P2Q};
        assert_int_equal(placement_select_vf(&s, &req, NULL, &c, NULL), -EINVAL);
}

/* Selection restricted to one PF (FLEET-6's placement.gpu); the message on failure. */
static int select_on(const PlacementSnapshot *s, const char *profile, const char *gpu,
                     const char **ret_vf, char **error)
{
        Script script = {};
        PlacementChoice c = {.vf = NULL};
        PlacementRequest req = {.profile = profile, .policy = PLACEMENT_POLICY_SPREAD, .gpu = gpu};
        PlacementPicker picker = {.pick = script_pick, .userdata = &script};
        int r = placement_select_vf(s, &req, &picker, &c, error);
        if (r >= 0)
                *ret_vf = c.vf->address;
        else
                assert_null(c.vf);
        return r;
}

/* FLEET-6: a Placement allocation names one PF; only it is a candidate, whatever the ranking
 * would prefer, and a refusal names the PF. */
static void test_gpu_restriction(void **state)
{
        PlacementGpu gpus[] = {{GPU_SYSFS(E3)}, {GPU_SYSFS(E4)}};
        PlacementVf vfs[] = {
            {VF("0000:e3:00.4", E3), CLAIMED(T2Q, 2048)},
            {VF("0000:e3:00.5", E3)},
            {VF("0000:e4:00.4", E4)},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);
        const char *vf = NULL;
        _cleanup_free_ char *error = NULL;

        /* spread would take the idle e4; the allocation says e3. */
        assert_string_equal(chosen(&s, P2Q, PLACEMENT_POLICY_SPREAD, NULL, 0), "0000:e4:00.4");
        assert_int_equal(select_on(&s, P2Q, E3, &vf, &error), 0);
        assert_string_equal(vf, "0000:e3:00.5");
        assert_int_equal(select_on(&s, P2Q, E4, &vf, &error), 0);
        assert_string_equal(vf, "0000:e4:00.4");

        /* No room on the named PF, though the other has some: -ENOSPC naming it. */
        vfs[1].quarantined = true;
        assert_int_equal(select_on(&s, P2Q, E3, &vf, &error), -ENOSPC);
        assert_string_equal(error, "no available VF for profile \"NVIDIA L40S-2Q\" on GPU " E3);

        /* A PF this host does not have: -ENODEV naming it. */
        free(error);
        error = NULL;
        assert_int_equal(select_on(&s, P2Q, E5, &vf, &error), -ENODEV);
        assert_string_equal(error, "GPU " E5 " is not on this host");

        /* The PF's catalog lacks the profile while another's has it. */
        gpus[0].catalog = l40s_no_2q;
        gpus[0].n_catalog = ELEMENTSOF(l40s_no_2q);
        free(error);
        error = NULL;
        assert_int_equal(select_on(&s, P2Q, E3, &vf, &error), -ENOSPC);
        assert_string_equal(error, "profile \"NVIDIA L40S-2Q\" is not creatable on GPU " E3
                                   " (unknown profile or insufficient capacity)");

        /* A name no NVML catalog knows stays PLACE-18's 400, restriction or not. */
        PlacementNvmlCount counts[] = {{.type_id = T2Q, .count = 1}};
        PlacementGpu nvml[] = {{GPU_NVML(E3, counts)}, {GPU_NVML(E4, counts)}};
        PlacementSnapshot sn = SNAPSHOT(nvml, vfs);
        free(error);
        error = NULL;
        assert_int_equal(select_on(&sn, "NVIDIA L40S-3Q", E4, &vf, &error), -ENOENT);
        assert_string_equal(error, "unknown vGPU profile \"NVIDIA L40S-3Q\"");
}

/* PLACE-8 */
static void test_nvml_answer_stale(void **state)
{
        PlacementNvmlCount counts[] = {{.type_id = T2Q, .count = 4}};
        PlacementGpu gpus[] = {{GPU_NVML(E3, counts)}, {GPU_NVML(E4, counts)}};
        PlacementVf vfs[] = {
            {VF("0000:e3:00.4", E3)},
            {VF("0000:e4:00.4", E4), CLAIMED(T4Q, 4096)}, /* a claim stands alone */
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);

        assert_false(placement_nvml_answer_is_stale(&s, &gpus[0], P2Q));
        vfs[0].reserved = true;
        vfs[0].reserved_type = T2Q;
        assert_false(placement_nvml_answer_is_stale(&s, &gpus[0], P2Q));
        vfs[0].reserved_type = T4Q;
        assert_true(placement_nvml_answer_is_stale(&s, &gpus[0], P2Q));
        assert_false(placement_nvml_answer_is_stale(&s, &gpus[0], P4Q));
        /* Another GPU's reservation does not touch this GPU's answer. */
        assert_false(placement_nvml_answer_is_stale(&s, &gpus[1], P2Q));
        /* A GPU that does not resolve the profile is no candidate: nothing to wait for. */
        assert_false(placement_nvml_answer_is_stale(&s, &gpus[0], "NVIDIA L40S-3Q"));
}

/* PLACE-10 */
static void test_sysfs_must_wait(void **state)
{
        PlacementNvmlCount counts[] = {{.type_id = T2Q, .count = 4}};
        PlacementGpu gpus[] = {
            {GPU_SYSFS(E3)},
            {GPU_NVML(E4, counts)},
            {.address = E5, .framework = PLACEMENT_FRAMEWORK_MDEV},
        };
        PlacementVf vfs[] = {
            {VF("0000:e3:00.4", E3), .reserved = true, .reserved_type = T2Q},
            {VF("0000:e4:00.4", E4), .reserved = true, .reserved_type = T2Q},
            {VF("0000:e5:00.4", E5), .reserved = true},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);

        assert_true(placement_gpu_must_wait(&s, &gpus[0]));
        assert_false(placement_gpu_must_wait(&s, &gpus[1])); /* PLACE-8 governs NVML GPUs */
        assert_true(placement_gpu_must_wait(&s, &gpus[2]));
        gpus[1].nvml_usable = false; /* fallback: back on the lists */
        assert_true(placement_gpu_must_wait(&s, &gpus[1]));
        for (size_t i = 0; i < ELEMENTSOF(vfs); i++)
                vfs[i].reserved = false;
        for (size_t i = 0; i < ELEMENTSOF(gpus); i++)
                assert_false(placement_gpu_must_wait(&s, &gpus[i]));
}

/* PLACE-21 */
static void test_available(void **state)
{
        PlacementNvmlCount cached[] = {{.type_id = T2Q, .count = 5, .unreflected = 3}};
        PlacementMdevAvailability a2[] = {{"nvidia-558", 2}}, a1[] = {{"nvidia-558", 1}},
                                  a5[] = {{"nvidia-558", 5}};
        PlacementGpu gpus[] = {
            {GPU_NVML(E3, cached)},
            {GPU_SYSFS(E4)},
            {.address = E5,
             .framework = PLACEMENT_FRAMEWORK_MDEV,
             .catalog = mdev_catalog,
             .n_catalog = ELEMENTSOF(mdev_catalog)},
        };
        PlacementVf vfs[] = {
            /* NVML GPU: 3 allocatable VFs, one unfinished 2Q and one 4Q reservation */
            {VF("0000:e3:00.4", E3)},
            {VF("0000:e3:00.5", E3), .creatable = NULL, .n_creatable = 0},
            {VF("0000:e3:00.6", E3)},
            {VF("0000:e3:00.7", E3), .reserved = true, .reserved_type = T2Q},
            {VF("0000:e3:01.0", E3), .reserved = true, .reserved_type = T4Q},
            {VF("0000:e3:01.1", E3), .quarantined = true},
            /* sysfs GPU: allocatable VFs whose list names P */
            {VF("0000:e4:00.4", E4)},
            {VF("0000:e4:00.5", E4)},
            {VF("0000:e4:00.6", E4), .creatable = lists_1q, .n_creatable = 1},
            {VF("0000:e4:00.7", E4), .quarantined = true},
            {VF("0000:e4:01.0", E4), CLAIMED(T2Q, 2048)},
            {VF("0000:e4:01.1", E4), .uncertain = true},
            /* mdev GPU: available_instances over allocatable VFs */
            {.address = "0000:e5:00.4",
             .parent = E5,
             .readable = true,
             .mdev_types = a2,
             .n_mdev_types = 1},
            {.address = "0000:e5:00.5",
             .parent = E5,
             .readable = true,
             .mdev_types = a1,
             .n_mdev_types = 1},
            {.address = "0000:e5:00.6",
             .parent = E5,
             .readable = true,
             .quarantined = true,
             .mdev_types = a5,
             .n_mdev_types = 1},
            {.address = "0000:e5:00.7",
             .parent = E5,
             .readable = true,
             .has_mdev = true,
             .claimed = true,
             .mdev_types = a5,
             .n_mdev_types = 1},
        };
        PlacementSnapshot s = SNAPSHOT(gpus, vfs);

        /* min(5 - 1, 3) + 2 + 3; the selection-only `unreflected` is not subtracted */
        assert_int_equal(placement_count_available(&s, P2Q), 3 + 2 + 3);
        cached[0].count = 3; /* min(3 - 1, 3) */
        assert_int_equal(placement_count_available(&s, P2Q), 2 + 2 + 3);
        cached[0].count = 1; /* the reservation takes the last cached placement */
        assert_int_equal(placement_count_available(&s, P2Q), 0 + 2 + 3);
        /* 1Q: no cached entry on the NVML GPU, one more listing VF on the sysfs GPU, no mdev
         * type for it */
        assert_int_equal(placement_count_available(&s, P1Q), 3);
        assert_int_equal(placement_count_available(&s, "NVIDIA L40S-3Q"), 0);
        assert_int_equal(placement_count_available(NULL, P2Q), 0);

        /* Every profile at once, in any order, gives each profile's own figure. */
        const char *const names[] = {"NVIDIA L40S-3Q", P2Q, P1Q};
        uint64_t counts[3] = {7, 7, 7};
        assert_int_equal(placement_count_available_many(&s, names, 3, counts), 0);
        assert_int_equal(counts[0], 0);
        assert_int_equal(counts[1], 0 + 2 + 3);
        assert_int_equal(counts[2], 3);
        const char *const with_null[] = {P2Q, NULL};
        assert_int_equal(placement_count_available_many(&s, with_null, 2, counts), -EINVAL);
        assert_int_equal(counts[1], 0 + 2 + 3); /* untouched on error */
        assert_int_equal(placement_count_available_many(&s, NULL, 0, NULL), 0);
}

/* ---- the one host→placement snapshot ------------------------------------------------------ */

#define PF_V "0000:e3:00.0"
#define PF_M "0000:41:00.0"

static GpuProfile l40s_catalog[] = {
    {.name = "NVIDIA L40S-2Q", .type_id = 1148, .framebuffer_mib = 2048},
    {.name = "NVIDIA L40S-4Q", .type_id = 1150, .framebuffer_mib = 4096},
};

static bool view_claimed(void *userdata, const char *vf, uint64_t *ret_fb)
{
        if (!streq(vf, "0000:e3:00.7"))
                return false;
        *ret_fb = 8192;
        return true;
}

static bool view_reserved(void *userdata, const char *vf, PlacementReservation *ret)
{
        if (streq(vf, "0000:e3:01.0")) {
                *ret = (PlacementReservation){.type_id = 1148, .framebuffer_mib = 2048};
                return true;
        }
        if (streq(vf, "0000:e3:01.1")) {
                *ret = (PlacementReservation){
                    .type_id = 1150, .framebuffer_mib = 4096, .write_done = true};
                return true;
        }
        return false;
}

static bool view_quarantined(void *userdata, const char *vf)
{
        return streq(vf, userdata);
}

static unsigned counts_asked;

static int view_counts(void *userdata, const char *pf, PlacementNvmlCount **ret, size_t *ret_n)
{
        counts_asked++;
        PlacementNvmlCount *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        *c = (PlacementNvmlCount){.type_id = 1150, .count = 3, .unreflected = 1};
        *ret = c;
        *ret_n = 1;
        return 0;
}

/* PLACE-2, PLACE-21, API-6, DISC-6, DISC-14: every overlay, and the framebuffer rules */
static void test_view_vendor_vfio(void **state)
{
        GpuProfile creatable[] = {l40s_catalog[0], l40s_catalog[1]};
        Gpu gpu = {.address = PF_V,
                   .catalog_source = GPU_CATALOG_NVML,
                   .catalog = l40s_catalog,
                   .n_catalog = ELEMENTSOF(l40s_catalog)};
        GpuVf vfs[] = {
            {.address = "0000:e3:00.4", .parent = PF_V, .creatable = creatable, .n_creatable = 2},
            /* a leftover type: its size comes from the GPU's catalog */
            {.address = "0000:e3:00.5", .parent = PF_V, .current_type_id = 1150},
            /* a type the catalog lacks, named by a profile: its size comes from the name */
            {.address = "0000:e3:00.6",
             .parent = PF_V,
             .current_type_id = 9999,
             .current_profile = "NVIDIA L40S-8Q"},
            /* claimed: the claim's size wins over the leftover's */
            {.address = "0000:e3:00.7", .parent = PF_V, .current_type_id = 1150},
            /* an unfinished reservation, and one whose write is done */
            {.address = "0000:e3:01.0", .parent = PF_V},
            {.address = "0000:e3:01.1", .parent = PF_V, .current_type_id = 1150},
            {.address = "0000:e3:01.2", .parent = PF_V, .error = "read current vGPU type: EIO"},
            {.address = "0000:e3:01.3", .parent = PF_V},
            {.address = "0000:e3:01.4", .parent = ""},
        };
        GpuHost h = {.framework = GPU_FRAMEWORK_VENDOR_VFIO,
                     .gpus = &gpu,
                     .n_gpus = 1,
                     .vfs = vfs,
                     .n_vfs = ELEMENTSOF(vfs)};
        PlacementOverlays o = {
            .is_quarantined = view_quarantined,
            .quarantine_userdata = "0000:e3:01.3",
            .is_claimed = view_claimed,
            .is_reserved = view_reserved,
            .nvml_counts = view_counts,
        };
        _cleanup_placement_view_ PlacementView *v = NULL;
        counts_asked = 0;
        assert_int_equal(placement_view_build(&h, &o, &v), 0);
        const PlacementSnapshot *s = &v->snapshot;

        assert_int_equal(s->n_gpus, 1);
        const PlacementGpu *g = &s->gpus[0];
        assert_string_equal(g->address, PF_V);
        assert_int_equal(g->framework, PLACEMENT_FRAMEWORK_VENDOR_VFIO);
        /* No NVML client: mode unknown (treated as equal-size), NVML not usable. */
        assert_int_equal(g->mode, PLACEMENT_MODE_UNKNOWN);
        assert_false(g->nvml_usable);
        assert_true(g->catalog_from_nvml);
        assert_int_equal(g->n_catalog, 2);
        assert_string_equal(g->catalog[1].name, "NVIDIA L40S-4Q");
        assert_int_equal(g->catalog[1].framebuffer_mib, 4096);
        assert_int_equal(counts_asked, 1);
        assert_int_equal(g->n_nvml_counts, 1);
        assert_int_equal(g->nvml_counts[0].count, 3);
        assert_int_equal(g->nvml_counts[0].unreflected, 1);

        assert_int_equal(s->n_vfs, ELEMENTSOF(vfs));
        const PlacementVf *pv = s->vfs;
        assert_true(placement_vf_is_allocatable(s, &pv[0]));
        assert_int_equal(pv[0].n_creatable, 2);
        assert_string_equal(pv[0].creatable[1], "NVIDIA L40S-4Q");
        assert_null(pv[0].mdev_types);
        assert_int_equal(pv[1].framebuffer_mib, 4096);
        assert_true(placement_vf_is_dirty(&pv[1]));
        assert_int_equal(pv[2].framebuffer_mib, 8192);
        assert_true(pv[3].claimed);
        assert_int_equal(pv[3].framebuffer_mib, 8192);
        assert_false(placement_vf_is_dirty(&pv[3]));
        assert_true(pv[4].reserved);
        assert_false(pv[4].claimed);
        assert_int_equal(pv[4].reserved_type, 1148);
        assert_int_equal(pv[4].framebuffer_mib, 2048);
        assert_false(pv[5].reserved); /* its write is done: it counts as claimed */
        assert_true(pv[5].claimed);
        assert_int_equal(pv[5].framebuffer_mib, 4096);
        assert_false(pv[6].readable);
        assert_true(pv[7].quarantined);
        assert_false(pv[7].claimed);
        assert_null(pv[8].parent);
        for (size_t i = 0; i < s->n_vfs; i++)
                assert_false(pv[i].uncertain); /* no pool, nothing uncertain */

        /* Without overlays: the host as discovered, nothing claimed, reserved or quarantined. */
        _cleanup_placement_view_ PlacementView *bare = NULL;
        assert_int_equal(placement_view_build(&h, NULL, &bare), 0);
        for (size_t i = 0; i < bare->snapshot.n_vfs; i++) {
                const PlacementVf *b = &bare->snapshot.vfs[i];
                assert_false(b->claimed || b->reserved || b->quarantined || b->uncertain);
        }
        assert_int_equal(bare->snapshot.gpus[0].n_nvml_counts, 0);
        assert_int_equal(bare->snapshot.vfs[3].framebuffer_mib, 4096);
        assert_int_equal(placement_view_build(NULL, NULL, &bare), -EINVAL);
}

/* API-6, PLACE-6, DISC-14: mdev GPUs are equal-size, never NVML's, and carry availability */
static void test_view_mdev(void **state)
{
        GpuProfile catalog[] = {
            {.name = "NVIDIA A40-2Q", .mdev_type = "nvidia-901", .framebuffer_mib = 2048},
            {.name = "NVIDIA A40-4Q", .mdev_type = "nvidia-903", .framebuffer_mib = 4096},
        };
        GpuProfile free_vf[] = {
            {.name = "NVIDIA A40-2Q", .mdev_type = "nvidia-901", .available_instances = 1},
            {.name = "NVIDIA A40-4Q", .mdev_type = "nvidia-903", .available_instances = 0},
        };
        char *uuids[] = {"3b0c2f4e-8d1a-4c6b-9e2f-5a7d1c3e9b40", NULL};
        Gpu gpu = {.address = PF_M, .catalog = catalog, .n_catalog = ELEMENTSOF(catalog)};
        GpuVf vfs[] = {
            {.address = "0000:41:00.4", .parent = PF_M, .creatable = free_vf, .n_creatable = 2},
            /* an mdev of a type the catalog lacks: its size comes from its profile's name */
            {.address = "0000:41:00.5",
             .parent = PF_M,
             .mdev_uuids = uuids,
             .current_profile = "NVIDIA A40-8Q"},
            {.address = "0000:41:00.6",
             .parent = PF_M,
             .mdev_uuids = uuids,
             .current_profile = "NVIDIA A40-4Q"},
            {.address = "0000:41:00.7",
             .parent = PF_M,
             .error = "gone",
             .creatable = free_vf,
             .n_creatable = 2},
        };
        GpuHost h = {.framework = GPU_FRAMEWORK_MDEV,
                     .gpus = &gpu,
                     .n_gpus = 1,
                     .vfs = vfs,
                     .n_vfs = ELEMENTSOF(vfs)};
        PlacementOverlays o = {.nvml_counts = view_counts};
        _cleanup_placement_view_ PlacementView *v = NULL;
        counts_asked = 0;
        assert_int_equal(placement_view_build(&h, &o, &v), 0);
        const PlacementSnapshot *s = &v->snapshot;

        assert_int_equal(s->gpus[0].framework, PLACEMENT_FRAMEWORK_MDEV);
        assert_int_equal(s->gpus[0].mode, PLACEMENT_MODE_EQUAL);
        assert_false(s->gpus[0].nvml_usable);
        assert_int_equal(counts_asked, 0); /* PLACE-6 decides: NVML's counts are never used */
        assert_int_equal(s->gpus[0].n_nvml_counts, 0);
        assert_int_equal(placement_gpu_path(&s->gpus[0]), PLACEMENT_PATH_MDEV);

        assert_int_equal(s->vfs[0].n_mdev_types, 2);
        assert_string_equal(s->vfs[0].mdev_types[0].mdev_type, "nvidia-901");
        assert_int_equal(s->vfs[0].mdev_types[0].available_instances, 1);
        assert_int_equal(s->vfs[0].mdev_types[1].available_instances, 0);
        assert_true(s->vfs[1].has_mdev);
        assert_int_equal(s->vfs[1].framebuffer_mib, 8192);
        assert_int_equal(s->vfs[2].framebuffer_mib, 4096);
        assert_int_equal(s->vfs[3].n_mdev_types, 0); /* unreadable: no availability */
        assert_int_equal(placement_count_available(s, "NVIDIA A40-2Q"), 1);
        assert_int_equal(placement_count_available(s, "NVIDIA A40-4Q"), 0);
}

static void test_mode_names(void **state) /* API-6 */
{
        assert_string_equal(placement_mode_to_string(PLACEMENT_MODE_EQUAL), "equal");
        assert_string_equal(placement_mode_to_string(PLACEMENT_MODE_MIXED), "mixed");
        assert_string_equal(placement_mode_to_string(PLACEMENT_MODE_UNKNOWN), "unknown");
        assert_int_equal(placement_mode_from_nvml(NVML_MODE_MIXED), PLACEMENT_MODE_MIXED);
        assert_int_equal(placement_mode_from_nvml(NVML_MODE_EQUAL), PLACEMENT_MODE_EQUAL);
        assert_int_equal(placement_mode_from_nvml(NVML_MODE_UNKNOWN), PLACEMENT_MODE_UNKNOWN);
        assert_string_equal(placement_policy_to_string(PLACEMENT_POLICY_PACK), "pack");
        assert_string_equal(placement_policy_to_string(PLACEMENT_POLICY_SPREAD), "spread");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_exclusions),
            cmocka_unit_test(test_exclusions_mdev),
            cmocka_unit_test(test_nvml_mixed_size),
            cmocka_unit_test(test_resolve_per_gpu),
            cmocka_unit_test(test_sysfs_lists),
            cmocka_unit_test(test_mdev),
            cmocka_unit_test(test_dirty),
            cmocka_unit_test(test_uniform_pick),
            cmocka_unit_test(test_random_picker),
            cmocka_unit_test(test_spread_quarantine_first),
            cmocka_unit_test(test_spread_unknown_load),
            cmocka_unit_test(test_spread_load),
            cmocka_unit_test(test_pack),
            cmocka_unit_test(test_ranking_example),
            cmocka_unit_test(test_failure_messages),
            cmocka_unit_test(test_gpu_restriction),
            cmocka_unit_test(test_nvml_answer_stale),
            cmocka_unit_test(test_sysfs_must_wait),
            cmocka_unit_test(test_available),
            cmocka_unit_test(test_view_vendor_vfio),
            cmocka_unit_test(test_view_mdev),
            cmocka_unit_test(test_mode_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
