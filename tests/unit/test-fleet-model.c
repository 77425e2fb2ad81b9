/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The fleet module's pure parts (SPEC §18): UUIDv5 against Python's uuid module, FLEET-2's
 * names, every row of FLEET-3's inventories and FLEET-4's traits on hand-built hosts, the merge
 * that keeps a vanished PF's classes reserved, backoff, the token refresh rule, the secret
 * file's rules (API-14) and the placement.* configuration keys (FLEET-1, CFG-4).
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config/config.h"
#include "fleet/fleet.h"

/* ---- UUIDv5 and names (FLEET-2, FLEET-4) ------------------------------------------------------
 */

/* FLEET-2: vectors from python3 -c 'import uuid; print(uuid.uuid5(uuid.NAMESPACE_URL, ...))' */
static void test_uuid5_vectors(void **state)
{
        static const uint8_t dns[16] = {0x6b, 0xa7, 0xb8, 0x10, 0x9d, 0xad, 0x11, 0xd1,
                                        0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8};
        char u[FLEET_UUID_STRLEN];

        assert_int_equal(fleet_uuid5(fleet_uuid_namespace_url, "vgpud:host1", u), 0);
        assert_string_equal(u, "dc165877-8afd-526c-abc6-103048d3bd18");
        assert_int_equal(fleet_root_uuid("host1", u), 0);
        assert_string_equal(u, "dc165877-8afd-526c-abc6-103048d3bd18");
        assert_int_equal(fleet_pf_uuid("host1", "0000:e3:00.0", u), 0);
        assert_string_equal(u, "87d27ff0-12a7-5131-a15a-197918e65df6");
        /* The example of Python's documentation, in the DNS namespace. */
        assert_int_equal(fleet_uuid5(dns, "python.org", u), 0);
        assert_string_equal(u, "886313e1-3b8a-5372-9b90-0c9aee199e5d");
}

/* FLEET-2 */
static void test_names(void **state)
{
        _cleanup_free_ char *name = NULL, *bad = NULL;
        char u[FLEET_UUID_STRLEN];

        assert_int_equal(fleet_pf_provider_name("host1", "0000:e3:00.0", &name), 0);
        assert_string_equal(name, "host1_pci_0000_e3_00_0");
        assert_int_equal(fleet_pf_provider_name("host1", "0000:E3:00.0", &bad), -EINVAL);
        assert_int_equal(fleet_pf_uuid("host1", "e3:00.0", u), -EINVAL);

        assert_true(fleet_host_name_is_valid("gpu-07.rack3_a"));
        assert_false(fleet_host_name_is_valid(""));
        assert_false(fleet_host_name_is_valid("a b"));
        assert_false(fleet_host_name_is_valid("host/1"));
        char long_name[FLEET_HOST_NAME_MAX + 2];
        memset(long_name, 'a', sizeof long_name - 1);
        long_name[sizeof long_name - 1] = 0;
        assert_false(fleet_host_name_is_valid(long_name));
        long_name[FLEET_HOST_NAME_MAX] = 0;
        assert_true(fleet_host_name_is_valid(long_name));
        assert_int_equal(fleet_root_uuid("", u), -EINVAL);
}

/* FLEET-4: the SPEC's example, other series, and what is left without a model */
static void test_profile_traits(void **state)
{
        static const struct {
                const char *profile, *trait;
        } cases[] = {
            {"NVIDIA L40S-4Q", "CUSTOM_VGPU_PROFILE_L40S_4Q"},
            {"NVIDIA A40-2B", "CUSTOM_VGPU_PROFILE_A40_2B"},
            {"NVIDIA RTX 6000 Ada-48Q", "CUSTOM_VGPU_PROFILE_RTX_6000_ADA_48Q"},
            {"GRID T4-1q", "CUSTOM_VGPU_PROFILE_GRID_T4_1Q"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *t = NULL;
                assert_int_equal(fleet_profile_trait(cases[i].profile, &t), 0);
                assert_string_equal(t, cases[i].trait);
                assert_true(fleet_custom_name_is_valid(t));
        }
        char *t = NULL;
        assert_int_equal(fleet_profile_trait("NVIDIA ", &t), -EINVAL);
        assert_null(t);
        assert_false(fleet_custom_name_is_valid("CUSTOM_"));
        assert_false(fleet_custom_name_is_valid("CUSTOM_a"));
        assert_false(fleet_custom_name_is_valid("VGPU"));

        _cleanup_free_ char *rc = NULL;
        assert_int_equal(fleet_place_class(24, &rc), 0);
        assert_string_equal(rc, "CUSTOM_VGPU_PLACE_24G");
}

/* ---- hosts built by hand ----------------------------------------------------------------------
 */

/* SIM-4's Q maxima on a 48 GiB L40S. */
static const uint32_t q_sizes[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 48};
static const uint32_t q_max[] = {32, 24, 16, 12, 8, 6, 4, 3, 2, 1};
#define N_Q ELEMENTSOF(q_sizes)
#define N_VFS 32

typedef struct Card {
        char names[N_Q][32];
        FleetProfileInput profiles[N_Q];
        FleetVfInput vfs[N_VFS];
        FleetGpuInput gpu;
} Card;

/* An empty card: every VF free, every size with `available` free placements (capped to its
 * maximum when available is UINT64_MAX). */
static void card_init(Card *c, const char *address, bool mixed, uint64_t available)
{
        memset(c, 0, sizeof *c);
        for (size_t i = 0; i < N_Q; i++) {
                snprintf(c->names[i], sizeof c->names[i], "NVIDIA L40S-%uQ", q_sizes[i]);
                c->profiles[i] = (FleetProfileInput){
                    .name = c->names[i],
                    .framebuffer_mib = (uint64_t)q_sizes[i] * 1024,
                    .max_instances = q_max[i],
                    .available = available == UINT64_MAX ? q_max[i] : available,
                };
        }
        for (size_t i = 0; i < N_VFS; i++)
                c->vfs[i] = (FleetVfInput){.readable = true, .allocatable = true};
        c->gpu = (FleetGpuInput){.address = address,
                                 .mixed = mixed,
                                 .profiles = c->profiles,
                                 .n_profiles = N_Q,
                                 .vfs = c->vfs,
                                 .n_vfs = N_VFS};
}

static FleetProfileInput *card_profile(Card *c, uint32_t size)
{
        for (size_t i = 0; i < N_Q; i++)
                if (q_sizes[i] == size)
                        return &c->profiles[i];
        fail();
        return NULL;
}

static FleetWanted *compute_one(Card *c, bool disabled, bool stopping)
{
        FleetHostInput in = {.host_name = "host1",
                             .placement_disabled = disabled,
                             .stopping = stopping,
                             .gpus = &c->gpu,
                             .n_gpus = 1};
        FleetWanted *w = NULL;
        assert_int_equal(fleet_wanted_compute(&in, &w), 0);
        assert_int_equal(w->n_providers, 2);
        return w;
}

static const FleetInventory *inv(const FleetWanted *w, const char *rc)
{
        const FleetInventory *i = fleet_provider_find_inventory(&w->providers[1], rc);
        if (!i)
                fail_msg("no inventory %s", rc);
        return i;
}

static const FleetInventory *place(const FleetWanted *w, uint32_t size)
{
        char rc[64];
        snprintf(rc, sizeof rc, "CUSTOM_VGPU_PLACE_%uG", size);
        return inv(w, rc);
}

#define assert_inv(i, t, r, m)                       \
        do {                                         \
                const FleetInventory *_i = (i);      \
                assert_int_equal(_i->total, (t));    \
                assert_int_equal(_i->reserved, (r)); \
                assert_int_equal(_i->max_unit, (m)); \
        } while (0)

static bool has_trait(const FleetWanted *w, const char *t)
{
        for (char **p = w->providers[1].traits; p && *p; p++)
                if (streq(*p, t))
                        return true;
        return false;
}

/* FLEET-2, FLEET-3, FLEET-4: an empty mixed-size card */
static void test_fresh_card(void **state)
{
        Card c;
        card_init(&c, "0000:e3:00.0", true, UINT64_MAX);
        _cleanup_fleet_wanted_ FleetWanted *w = compute_one(&c, false, false);

        const FleetProvider *root = &w->providers[0], *pf = &w->providers[1];
        assert_string_equal(root->name, "host1");
        assert_string_equal(root->uuid, "dc165877-8afd-526c-abc6-103048d3bd18");
        assert_string_equal(root->parent_uuid, "");
        assert_int_equal(root->n_inventories, 0);
        assert_null(root->traits);
        assert_string_equal(pf->name, "host1_pci_0000_e3_00_0");
        assert_string_equal(pf->uuid, "87d27ff0-12a7-5131-a15a-197918e65df6");
        assert_string_equal(pf->parent_uuid, root->uuid);

        assert_int_equal(pf->n_inventories, 2 + N_Q);
        for (size_t i = 1; i < pf->n_inventories; i++) /* sorted by class */
                assert_true(strcmp(pf->inventories[i - 1].resource_class,
                                   pf->inventories[i].resource_class) < 0);
        assert_inv(inv(w, "VGPU"), 32, 0, 1);
        assert_inv(inv(w, "CUSTOM_VGPU_FB_GIB"), 48, 0, 48);
        for (size_t i = 0; i < N_Q; i++)
                assert_inv(place(w, q_sizes[i]), q_max[i], 0, q_max[i]);

        assert_int_equal(strv_length(pf->traits), N_Q + 1);
        assert_true(has_trait(w, "CUSTOM_VGPU_PROFILE_L40S_4Q"));
        assert_true(has_trait(w, "CUSTOM_VGPU_PROFILE_L40S_48Q"));
        assert_true(has_trait(w, FLEET_TRAIT_MIXED));
        assert_false(has_trait(w, FLEET_TRAIT_EQUAL));
        assert_false(has_trait(w, FLEET_TRAIT_DRAINED));
}

/* DISK-12: the image traits' names, and every PF provider carrying one per ready image */
static void test_image_traits(void **state)
{
        static const struct {
                const char *image, *trait;
        } cases[] = {
            {"debian-12", "CUSTOM_VGPUD_IMAGE_DEBIAN_12"},
            {"ubuntu-2404-cuda", "CUSTOM_VGPUD_IMAGE_UBUNTU_2404_CUDA"},
            {"x", "CUSTOM_VGPUD_IMAGE_X"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *t = NULL;
                assert_int_equal(fleet_image_trait(cases[i].image, &t), 0);
                assert_string_equal(t, cases[i].trait);
                assert_true(fleet_custom_name_is_valid(t));
        }
        char *t = NULL;
        assert_int_equal(fleet_image_trait("", &t), -EINVAL);
        assert_null(t);

        Card c;
        card_init(&c, "0000:e3:00.0", true, UINT64_MAX);
        const char *images[] = {"debian-12", "a-b"};
        FleetHostInput in = {.host_name = "host1",
                             .gpus = &c.gpu,
                             .n_gpus = 1,
                             .images = images,
                             .n_images = ELEMENTSOF(images)};
        _cleanup_fleet_wanted_ FleetWanted *w = NULL;
        assert_int_equal(fleet_wanted_compute(&in, &w), 0);
        assert_true(has_trait(w, "CUSTOM_VGPUD_IMAGE_DEBIAN_12"));
        assert_true(has_trait(w, "CUSTOM_VGPUD_IMAGE_A_B"));
        assert_int_equal(strv_length(w->providers[1].traits), N_Q + 1 + 2);
        assert_null(w->providers[0].traits);                             /* the root carries none */
        for (size_t i = 1; i < strv_length(w->providers[1].traits); i++) /* sorted */
                assert_true(strcmp(w->providers[1].traits[i - 1], w->providers[1].traits[i]) < 0);
}

/* FLEET-3 VGPU: every reason a VF is not allocatable reserves it, but a Placement allocation;
 * an unreadable VF is outside total */
static void test_vgpu_reserved_rows(void **state)
{
        Card c;
        card_init(&c, "0000:e3:00.0", true, UINT64_MAX);
        c.vfs[0].allocatable = false; /* quarantined */
        c.vfs[1].allocatable = false; /* uncertain (GEN-4) */
        c.vfs[2] = (FleetVfInput){
            .readable = true, .occupied = true, .framebuffer_mib = 2048}; /* dirty: a leftover 2Q */
        c.vfs[3] = (FleetVfInput){
            .readable = true, .occupied = true, .framebuffer_mib = 4096}; /* claimed, no consumer */
        c.vfs[4] = (FleetVfInput){.readable = true,
                                  .occupied = true,
                                  .consumer = true,
                                  .framebuffer_mib = 4096}; /* claimed for a consumer */
        c.vfs[5] = (FleetVfInput){.readable = false};       /* unreadable (DISC-6) */
        _cleanup_fleet_wanted_ FleetWanted *w = compute_one(&c, false, false);

        /* 31 readable; reserved: quarantined, uncertain, dirty, claimed without consumer. */
        assert_inv(inv(w, "VGPU"), 31, 4, 1);
        /* FB: what the host holds outside Placement (2 + 4 GiB); the consumer's 4 GiB is in
         * Placement's usage. */
        assert_int_equal(inv(w, "CUSTOM_VGPU_FB_GIB")->reserved, 6);
}

/* FLEET-3 per-size classes on a mixed card: total − free − consumers, clamped to 0..total */
static void test_place_mixed(void **state)
{
        Card c;
        card_init(&c, "0000:e3:00.0", true, UINT64_MAX);
        /* A 24Q at slots 0..23 (SIM-9): NVML's free placements per size. */
        c.vfs[0] = (FleetVfInput){.readable = true, .occupied = true, .framebuffer_mib = 24576};
        static const uint64_t free24[] = {24, 12, 8, 6, 4, 3, 2, 1, 1, 0};
        for (size_t i = 0; i < N_Q; i++)
                c.profiles[i].available = free24[i];
        _cleanup_fleet_wanted_ FleetWanted *w = compute_one(&c, false, false);
        assert_inv(inv(w, "VGPU"), 32, 1, 1);
        assert_inv(inv(w, "CUSTOM_VGPU_FB_GIB"), 48, 24, 24); /* the largest free size: 24 */
        for (size_t i = 0; i < N_Q; i++) {
                uint64_t room = q_max[i] - (q_sizes[i] == 24);
                uint64_t free = free24[i] < room ? free24[i] : room;
                assert_inv(place(w, q_sizes[i]), q_max[i], q_max[i] - free, q_max[i]);
        }

        /* The same 24Q for a Placement consumer: its slot is in Placement's usage, so it is
         * given back in 24G and VGPU; nothing else moves. */
        c.vfs[0].consumer = true;
        _cleanup_fleet_wanted_ FleetWanted *w2 = compute_one(&c, false, false);
        assert_inv(inv(w2, "VGPU"), 32, 0, 1);
        assert_inv(place(w2, 24), 2, 0, 2);
        assert_inv(place(w2, 48), 1, 1, 1);
        assert_int_equal(inv(w2, "CUSTOM_VGPU_FB_GIB")->reserved, 0);

        /* Clamping: NVML reporting more than the maximum never makes reserved negative. */
        card_profile(&c, 48)->available = 5;
        _cleanup_fleet_wanted_ FleetWanted *w3 = compute_one(&c, false, false);
        assert_inv(place(w3, 48), 1, 0, 1);
}

/* FLEET-3 on an equal-size card: the sysfs lists name a type on every free VF, capped by the
 * maximum less what the card holds; hidden sizes are fully reserved */
static void test_place_equal(void **state)
{
        Card c;
        card_init(&c, "0001:c8:00.0", false, 0);
        c.vfs[0] = (FleetVfInput){.readable = true, .occupied = true, .framebuffer_mib = 2048};
        card_profile(&c, 2)->available = 31; /* every other VF lists 2Q */
        _cleanup_fleet_wanted_ FleetWanted *w = compute_one(&c, false, false);
        assert_inv(place(w, 2), 24, 1, 24);
        for (size_t i = 0; i < N_Q; i++)
                if (q_sizes[i] != 2)
                        assert_inv(place(w, q_sizes[i]), q_max[i], q_max[i], q_max[i]);
        assert_inv(inv(w, "CUSTOM_VGPU_FB_GIB"), 48, 2, 2);
        assert_true(has_trait(w, FLEET_TRAIT_EQUAL));
        assert_false(has_trait(w, FLEET_TRAIT_MIXED));
}

/* FLEET-3: placement disabled sets every reserved to its total; FLEET-4: and drains the PF */
static void test_disabled(void **state)
{
        Card c;
        card_init(&c, "0000:e3:00.0", true, UINT64_MAX);
        c.vfs[3].readable = false;
        _cleanup_fleet_wanted_ FleetWanted *w = compute_one(&c, true, false);
        const FleetProvider *pf = &w->providers[1];
        for (size_t i = 0; i < pf->n_inventories; i++)
                assert_int_equal(pf->inventories[i].reserved, pf->inventories[i].total);
        assert_int_equal(inv(w, "VGPU")->total, 31);
        assert_true(has_trait(w, FLEET_TRAIT_DRAINED));
}

/* FLEET-4: drained, stopping */
static void test_drained_and_stopping(void **state)
{
        Card c;
        card_init(&c, "0000:e3:00.0", true, UINT64_MAX);
        c.gpu.drained = true;
        for (size_t i = 0; i < N_VFS; i++)
                c.vfs[i].allocatable = false; /* HEALTH-26: a drained PF's VFs leave placement */
        _cleanup_fleet_wanted_ FleetWanted *w = compute_one(&c, false, false);
        assert_true(has_trait(w, FLEET_TRAIT_DRAINED));
        assert_inv(inv(w, "VGPU"), 32, 32, 1);

        card_init(&c, "0000:e3:00.0", true, UINT64_MAX);
        _cleanup_fleet_wanted_ FleetWanted *w2 = compute_one(&c, false, true);
        assert_true(has_trait(w2, FLEET_TRAIT_DRAINED));
        assert_int_equal(inv(w2, "VGPU")->reserved, 0); /* stopping only drains */
}

/* FLEET-3: a card with nothing free, and a card whose framebuffer is not known */
static void test_fb_edges(void **state)
{
        Card c;
        card_init(&c, "0000:e3:00.0", true, 0);
        _cleanup_fleet_wanted_ FleetWanted *w = compute_one(&c, false, false);
        assert_inv(inv(w, "CUSTOM_VGPU_FB_GIB"), 48, 0, 1); /* max_unit >= 1, admits via PLACE */
        for (size_t i = 0; i < N_Q; i++)
                assert_int_equal(place(w, q_sizes[i])->reserved, q_max[i]);

        /* No NVML maxima: the card is the largest profile, a size's maximum what fits. */
        card_init(&c, "0000:e3:00.0", true, UINT64_MAX);
        for (size_t i = 0; i < N_Q; i++)
                c.profiles[i].max_instances = 0;
        assert_int_equal(fleet_gpu_framebuffer_mib(&c.gpu), 48 * 1024);
        _cleanup_fleet_wanted_ FleetWanted *w2 = compute_one(&c, false, false);
        assert_int_equal(place(w2, 1)->total, 32); /* min(48, 32 VFs) */
        assert_int_equal(place(w2, 16)->total, 3);
        c.gpu.framebuffer_mib = 24 * 1024;
        assert_int_equal(fleet_gpu_framebuffer_mib(&c.gpu), 24 * 1024);
}

/* FLEET-3: a class whose figure is 0 is one fully reserved unit (Placement wants total >= 1) */
static void test_zero_totals(void **state)
{
        Card c;
        card_init(&c, "0000:e3:00.0", true, UINT64_MAX);
        for (size_t i = 0; i < N_VFS; i++)
                c.vfs[i].readable = false;
        _cleanup_fleet_wanted_ FleetWanted *w = compute_one(&c, false, false);
        assert_inv(inv(w, "VGPU"), 1, 1, 1);
}

/* FLEET-2: a vanished PF keeps its provider with every inventory reserved; a class vgpud no
 * longer computes is kept reserved; identical states compare equal */
static void test_merge(void **state)
{
        FleetInventory current[] = {
            {.resource_class = "CUSTOM_VGPU_FB_GIB", .total = 48, .reserved = 0, .max_unit = 48},
            {.resource_class = "CUSTOM_VGPU_PLACE_48G", .total = 1, .reserved = 0, .max_unit = 1},
            {.resource_class = "VGPU", .total = 32, .reserved = 3, .max_unit = 1},
        };
        FleetInventory *out = NULL;
        size_t n = 0;
        assert_int_equal(fleet_inventories_merge(NULL, 0, current, ELEMENTSOF(current), &out, &n),
                         0);
        assert_int_equal(n, 3);
        for (size_t i = 0; i < n; i++) {
                assert_string_equal(out[i].resource_class, current[i].resource_class);
                assert_int_equal(out[i].total, current[i].total);
                assert_int_equal(out[i].reserved, current[i].total);
        }
        assert_false(fleet_inventories_equal(out, n, current, ELEMENTSOF(current)));
        fleet_inventories_free(out, n);

        FleetInventory wanted[] = {
            {.resource_class = "CUSTOM_VGPU_FB_GIB", .total = 48, .reserved = 2, .max_unit = 2},
            {.resource_class = "VGPU", .total = 32, .reserved = 1, .max_unit = 1},
        };
        assert_int_equal(fleet_inventories_merge(wanted, 2, current, 3, &out, &n), 0);
        assert_int_equal(n, 3);
        assert_string_equal(out[1].resource_class, "CUSTOM_VGPU_PLACE_48G");
        assert_int_equal(out[1].reserved, 1);
        assert_int_equal(out[0].reserved, 2);
        assert_int_equal(out[2].reserved, 1);
        FleetInventory *again = NULL;
        size_t n2 = 0;
        assert_int_equal(fleet_inventories_merge(wanted, 2, out, n, &again, &n2), 0);
        assert_true(fleet_inventories_equal(again, n2, out, n));
        fleet_inventories_free(again, n2);
        fleet_inventories_free(out, n);
}

/* FLEET-5: jittered exponential backoff within [d/2, d], capped */
static void test_backoff(void **state)
{
        assert_int_equal(fleet_backoff(1, 0), FLEET_BACKOFF_BASE / 2);
        assert_int_equal(fleet_backoff(1, FLEET_BACKOFF_BASE / 2), FLEET_BACKOFF_BASE);
        assert_int_equal(fleet_backoff(2, 0), FLEET_BACKOFF_BASE);
        for (unsigned a = 1; a < FLEET_CONFLICT_ATTEMPTS; a++)
                for (uint64_t r = 0; r < 5; r++) {
                        nsec_t d = fleet_backoff(a, r * 0x9e3779b97f4a7c15ULL);
                        assert_true(d >= FLEET_BACKOFF_BASE / 2 && d <= FLEET_BACKOFF_MAX);
                }
        assert_int_equal(fleet_backoff(30, 0), FLEET_BACKOFF_MAX / 2);
}

/* FLEET-1: a Keystone token is renewed before its expires_at (injected times) */
static void test_token_refresh(void **state)
{
        Timestamp issued = {.sec = 1000000}, expires = {.sec = 1000000 + 3600};
        FleetToken t = {.value = (char *)"tok", .expires_at = expires};

        assert_true(fleet_token_needs_refresh(NULL, issued, issued));
        assert_true(fleet_token_needs_refresh(&(FleetToken){}, issued, issued));
        assert_false(fleet_token_needs_refresh(&t, issued, issued));
        /* An hour's token: renewed 5 minutes before it ends. */
        assert_false(fleet_token_needs_refresh(&t, issued, (Timestamp){.sec = 1000000 + 3299}));
        assert_true(fleet_token_needs_refresh(&t, issued, (Timestamp){.sec = 1000000 + 3300}));
        assert_true(fleet_token_needs_refresh(&t, issued, (Timestamp){.sec = 1000000 + 4000}));
        /* A 20 s token: at least 10 s ahead. */
        t.expires_at = (Timestamp){.sec = 1000000 + 20};
        assert_false(fleet_token_needs_refresh(&t, issued, (Timestamp){.sec = 1000000 + 9}));
        assert_true(fleet_token_needs_refresh(&t, issued, (Timestamp){.sec = 1000000 + 10}));
}

/* FLEET-1, API-14: the application credential's secret file */
static void test_secret_file(void **state)
{
        char dir[] = "/tmp/test-fleet-XXXXXX";
        assert_non_null(mkdtemp(dir));
        _cleanup_free_ char *path = NULL, *secret = NULL, *error = NULL;
        assert_int_equal(strprintf(&path, "%s/secret", dir), 0);

        assert_int_equal(fleet_read_secret_file(path, &secret, &error), -ENOENT);
        assert_non_null(strstr(error, "placement.keystone.application_credential_secret_file"));

        int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "s3cr3t-value\n", 13), 13);
        close(fd);
        assert_int_equal(fleet_read_secret_file(path, &secret, &error), 0);
        assert_string_equal(secret, "s3cr3t-value");

        assert_int_equal(chmod(path, 0640), 0);
        free(secret);
        secret = NULL;
        assert_int_equal(fleet_read_secret_file(path, &secret, &error), -EPERM);
        assert_null(secret);
        assert_non_null(strstr(error, "mode 0640 gives group or other access"));

        assert_int_equal(truncate(path, 0), 0);
        assert_int_equal(chmod(path, 0600), 0);
        assert_int_equal(fleet_read_secret_file(path, &secret, &error), -EINVAL);
        assert_non_null(strstr(error, "empty"));

        assert_int_equal(fleet_read_secret_file(dir, &secret, &error), -EINVAL);
        unlink(path);
        rmdir(dir);
}

/* FLEET-1, CFG-4: the placement.* keys, their ranges, and Keystone's three keys together */
static void test_config_keys(void **state)
{
        static const char *const refused[] = {
            "placement.url=ftp://placement",
            "placement.url=http://",
            "placement.url=http://a b",
            "placement.auth=basic",
            "placement.host_name=bad/name",
            "placement.sync_interval=4s",
            "placement.sync_interval=11m",
            "placement.orphan_grace=4s", /* FLEET-6's grace: 5s..168h */
            "placement.orphan_grace=169h",
            "placement.keystone.auth_url=keystone",
            "placement.keystone.application_credential_secret_file=rel",
            "placement.urll=http://x",
        };
        for (size_t i = 0; i < ELEMENTSOF(refused); i++) {
                Config c;
                _cleanup_free_ char *error = NULL;
                assert_int_equal(config_init_defaults(&c), 0);
                assert_int_equal(config_set(&c, refused[i], &error), -EINVAL);
                assert_non_null(strstr(error, "--set "));
                config_done(&c);
        }

        Config c;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(config_init_defaults(&c), 0);
        assert_string_equal(c.placement.url, "");
        assert_int_equal(c.placement.sync_interval, 30 * NSEC_PER_SEC);
        assert_int_equal(config_set(&c, "placement.url=https://placement.example:8778", &error), 0);
        assert_int_equal(config_set(&c, "placement.auth=keystone", &error), 0);
        assert_int_equal(config_validate(&c, &error), -EINVAL);
        assert_string_equal(error, "placement.auth is keystone but placement.keystone.auth_url "
                                   "is empty");
        assert_int_equal(config_set(&c, "placement.keystone.auth_url=http://ks:5000", &error), 0);
        assert_int_equal(
            config_set(&c, "placement.keystone.application_credential_id=abc123", &error), 0);
        assert_int_equal(config_set(&c,
                                    "placement.keystone.application_credential_secret_file=/etc/"
                                    "vgpud/placement.secret",
                                    &error),
                         0);
        assert_int_equal(config_validate(&c, &error), 0);
        /* FLEET-6: the grace's short end, which the fleet tests use. */
        assert_int_equal(c.placement.orphan_grace, 10 * NSEC_PER_MIN);
        assert_int_equal(config_set(&c, "placement.orphan_grace=5s", &error), 0);
        assert_int_equal(c.placement.orphan_grace, 5 * NSEC_PER_SEC);
        config_done(&c);
}

/* ---- the orphan audit (FLEET-6) ------------------------------------------------------------ */

#define CA "0a1b2c3d-0000-4000-8000-00000000000a"
#define CB "0a1b2c3d-0000-4000-8000-00000000000b"
#define CC "0a1b2c3d-0000-4000-8000-00000000000c"
#define CL "0a1b2c3d-0000-4000-8000-0000000000ff"

static Timestamp at(int64_t sec, uint32_t nsec)
{
        return (Timestamp){.sec = 1700000000 + sec, .nsec = nsec};
}

static const FleetOrphan *orphan(const FleetOrphan *o, size_t n, const char *consumer)
{
        for (size_t i = 0; i < n; i++)
                if (streq(o[i].consumer, consumer))
                        return &o[i];
        return NULL;
}

typedef struct Audit {
        FleetOrphan *orphans;
        size_t n;
        char **delete;
} Audit;

static void audit_done(Audit *a)
{
        free(a->orphans);
        strv_free(a->delete);
        *a = (Audit){};
}

static void decide(char *const *allocated, char *const *local, const FleetOrphan *seen,
                   size_t n_seen, Timestamp now, nsec_t grace, Audit *ret)
{
        audit_done(ret);
        assert_int_equal(fleet_audit_decide(allocated, local, seen, n_seen, now, grace,
                                            &ret->orphans, &ret->n, &ret->delete),
                         0);
}

/* FLEET-6: the audit deletes an allocation whose consumer names no local record once it has
 * been orphaned for placement.orphan_grace, and never one a record names or a younger one. */
static void test_audit_decide(void **state)
{
        const nsec_t grace = 10 * NSEC_PER_MIN;
        Audit a = {};

        /* Nothing allocated: nothing orphaned, nothing deleted. */
        decide(NULL, NULL, NULL, 0, at(0, 0), grace, &a);
        assert_int_equal(a.n, 0);
        assert_null(a.delete);

        /* First sight: every consumer no record names is an orphan from now, none deleted yet
         * (a scheduler's allocation on its way to POST /instances looks just like this). A
         * consumer with allocations on two providers counts once. */
        char *allocated[] = {CB, CA, CL, CB, NULL};
        char *local[] = {CL, NULL};
        decide(allocated, local, NULL, 0, at(0, 0), grace, &a);
        assert_int_equal(a.n, 2);
        assert_int_equal(timestamp_compare(orphan(a.orphans, a.n, CA)->first_seen, at(0, 0)), 0);
        assert_non_null(orphan(a.orphans, a.n, CB));
        assert_null(orphan(a.orphans, a.n, CL));
        assert_null(a.delete);

        /* At exactly the grace CA is due; CB, a second younger, is kept with its first sighting,
         * and one nanosecond short of the grace nothing is due. */
        FleetOrphan seen[] = {{CA, at(0, 0)}, {CB, at(1, 0)}, {CC, at(0, 0)}};
        decide(allocated, local, seen, ELEMENTSOF(seen), at(600, 0), grace, &a);
        assert_int_equal(a.n, 2);
        assert_non_null(a.delete);
        assert_string_equal(a.delete[0], CA);
        assert_null(a.delete[1]);
        assert_int_equal(timestamp_compare(orphan(a.orphans, a.n, CB)->first_seen, at(1, 0)), 0);
        /* CC holds no allocation any more: forgotten, so its grace would start again. */
        assert_null(orphan(a.orphans, a.n, CC));
        decide(allocated, local, seen, ELEMENTSOF(seen), at(599, 999999999), grace, &a);
        assert_null(a.delete);

        /* Both due: sorted. */
        decide(allocated, local, seen, ELEMENTSOF(seen), at(3600, 0), grace, &a);
        assert_non_null(a.delete);
        assert_string_equal(a.delete[0], CA);
        assert_string_equal(a.delete[1], CB);
        assert_null(a.delete[2]);

        /* A consumer a local record names is never deleted, however long it was an orphan (its
         * create arrived), and it leaves the orphans. */
        char *local_ab[] = {CA, CB, CL, NULL};
        decide(allocated, local_ab, seen, ELEMENTSOF(seen), at(86400, 0), grace, &a);
        assert_int_equal(a.n, 0);
        assert_null(a.delete);

        /* A clock that went back ages nothing. */
        FleetOrphan ahead[] = {{CA, at(7200, 0)}};
        decide(allocated, local, ahead, ELEMENTSOF(ahead), at(0, 0), grace, &a);
        assert_null(a.delete);
        assert_int_equal(timestamp_compare(orphan(a.orphans, a.n, CA)->first_seen, at(7200, 0)), 0);

        /* Nanoseconds borrow across the second. */
        FleetOrphan frac[] = {{CA, at(0, 900000000)}};
        char *only_a[] = {CA, NULL};
        decide(only_a, NULL, frac, ELEMENTSOF(frac), at(5, 899999999), 5 * NSEC_PER_SEC, &a);
        assert_null(a.delete);
        decide(only_a, NULL, frac, ELEMENTSOF(frac), at(5, 900000000), 5 * NSEC_PER_SEC, &a);
        assert_non_null(a.delete);

        /* Something that is no consumer uuid is not touched. */
        char *odd[] = {(char *)"not-a-consumer", NULL};
        decide(odd, NULL, NULL, 0, at(0, 0), 0, &a);
        assert_int_equal(a.n, 0);
        assert_null(a.delete);
        audit_done(&a);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_uuid5_vectors),
            cmocka_unit_test(test_audit_decide),
            cmocka_unit_test(test_names),
            cmocka_unit_test(test_profile_traits),
            cmocka_unit_test(test_image_traits),
            cmocka_unit_test(test_fresh_card),
            cmocka_unit_test(test_vgpu_reserved_rows),
            cmocka_unit_test(test_place_mixed),
            cmocka_unit_test(test_place_equal),
            cmocka_unit_test(test_disabled),
            cmocka_unit_test(test_drained_and_stopping),
            cmocka_unit_test(test_fb_edges),
            cmocka_unit_test(test_zero_totals),
            cmocka_unit_test(test_merge),
            cmocka_unit_test(test_backoff),
            cmocka_unit_test(test_token_refresh),
            cmocka_unit_test(test_secret_file),
            cmocka_unit_test(test_config_keys),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
