/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * placement: which VF a vGPU claim gets, and how many more claims of a profile would fit
 * (SPEC §3).
 *
 * Promises:
 *  - pure: no I/O, no threads, no clock, no state between calls. Every function reads one
 *    snapshot that the caller built; nothing here frees or keeps a pointer into it, and the
 *    pointers a choice returns point into it.
 *  - deterministic: the same snapshot, request and picker answers give the same choice. The
 *    only randomness is the injected picker (PLACE-15).
 *  - names resolve per GPU (DISC-19): a GPU whose own catalog lacks the profile is no
 *    candidate for it, and a choice carries the type as that GPU's catalog has it.
 *
 *  - one picture of the host (ARCHITECTURE.md decision 3): placement_view_build() is the only
 *    code that turns a GpuHost into a snapshot, for claims, /resources, /gpus and metrics
 *    alike. It reads state in memory only (the host, the NVML client's cache, the worker pool's
 *    uncertain keys, the caller's overlays) and does no I/O either.
 *
 * Not here: waiting. A claim must not select while placement_nvml_answer_is_stale() or
 * placement_gpu_must_wait() holds for a GPU it needs (PLACE-8, PLACE-10); this module only
 * answers those questions. Reserving, resetting and writing are the claim flow's.
 *
 * Snapshot conventions: addresses are canonical lowercase PCI addresses, so strcmp() orders
 * them by number; GPU addresses are unique; every array may be NULL when its count is 0.
 * "Unfinished reservation" means a VF with `reserved` set: a reservation ends when its
 * configure ends (PLACE-2), so the claim flow clears the flag at that moment.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "gpu/gpu.h"
#include "nvml/nvml.h"
#include "worker/worker.h"

typedef enum PlacementFramework {
        PLACEMENT_FRAMEWORK_VENDOR_VFIO,
        PLACEMENT_FRAMEWORK_MDEV,
} PlacementFramework;

typedef enum PlacementMode {
        PLACEMENT_MODE_UNKNOWN, /* NVML could not tell: treated as equal-size */
        PLACEMENT_MODE_EQUAL,
        PLACEMENT_MODE_MIXED,
} PlacementMode;

/* "unknown", "equal" or "mixed" (API-6). */
const char *placement_mode_to_string(PlacementMode m);
PlacementMode placement_mode_from_nvml(NvmlMode m);

/* Which rule decides eligibility on a GPU. */
typedef enum PlacementPath {
        PLACEMENT_PATH_NVML,  /* vendor VFIO, mixed-size, NVML usable: PLACE-4 */
        PLACEMENT_PATH_SYSFS, /* vendor VFIO, equal-size, unknown mode or NVML fallback: PLACE-5 */
        PLACEMENT_PATH_MDEV,  /* PLACE-6 */
} PlacementPath;

/* One entry of a GPU's catalog (DISC-18). */
typedef struct PlacementProfile {
        const char *name;         /* "NVIDIA L40S-2Q" */
        uint32_t type_id;         /* vendor VFIO: the type ID on this GPU */
        const char *mdev_type;    /* mdev: the mdev_supported_types entry on this GPU's VFs */
        uint64_t framebuffer_mib; /* 0: unknown */
} PlacementProfile;

/*
 * NVML's creatable placements of one type on one GPU (NVML-8).
 *
 * For selection, `count` comes from an answer whose query started after the claim entered
 * placement, and `unreflected` is the number of reservations of this type on the GPU whose
 * type write had not completed when that query started (PLACE-7). The caller computes it,
 * because only the caller knows when each query started and each write completed; the module
 * subtracts it. For /resources, `count` is the cached answer (NVML-14), `unreflected` is
 * ignored, and the module subtracts the GPU's unfinished reservations of the type (PLACE-21).
 */
typedef struct PlacementNvmlCount {
        uint32_t type_id;
        uint32_t count;
        uint32_t unreflected;
} PlacementNvmlCount;

/* An mdev VF's `mdev_supported_types/<type>/available_instances` as last read. */
typedef struct PlacementMdevAvailability {
        const char *mdev_type;
        uint32_t available_instances;
} PlacementMdevAvailability;

typedef struct PlacementGpu {
        const char *address; /* the PF */
        PlacementFramework framework;
        PlacementMode mode;
        /* NVML answered for this GPU (not in fallback); only mixed-size GPUs use the counts. */
        bool nvml_usable;
        const PlacementNvmlCount *nvml_counts; /* a type without an entry has 0 placements */
        size_t n_nvml_counts;
        bool catalog_from_nvml; /* else it is the union of its VFs' sysfs lists (DISC-18) */
        const PlacementProfile *catalog;
        size_t n_catalog;
} PlacementGpu;

typedef struct PlacementVf {
        const char *address;
        const char *parent;    /* the PF; NULL, or a PF missing from the snapshot: unknown parent */
        bool readable;         /* DISC-6 */
        uint32_t current_type; /* vendor VFIO current_vgpu_type; 0: not configured */
        bool has_mdev;         /* mdev: the VF carries an mdev */
        /* The size of what occupies the VF: its claim, reservation or leftover type; 0 unknown. */
        uint64_t framebuffer_mib;
        bool claimed;
        bool reserved;          /* an unfinished reservation */
        uint32_t reserved_type; /* vendor VFIO type ID the reservation will write */
        bool uncertain;         /* GEN-4 */
        bool quarantined;
        /* Profile names in this VF's creatable_vgpu_types (vendor VFIO), as last read. */
        const char *const *creatable;
        size_t n_creatable;
        const PlacementMdevAvailability *mdev_types; /* mdev */
        size_t n_mdev_types;
} PlacementVf;

typedef struct PlacementSnapshot {
        const PlacementGpu *gpus;
        size_t n_gpus;
        const PlacementVf *vfs;
        size_t n_vfs;
} PlacementSnapshot;

typedef struct PlacementRequest {
        const char *profile;
        PlacementPolicy policy;
        /* VFs already tried in this claim (refused reset or capacity, PLACE-12, PLACE-17). */
        const char *const *exclude;
        size_t n_exclude;
        /*
         * FLEET-6: only this PF is a candidate (a Placement allocation names it); NULL: every
         * GPU. A PF the snapshot lacks fails with -ENODEV, no room on it with -ENOSPC, and the
         * messages name it.
         */
        const char *gpu;
} PlacementRequest;

/* The random source of PLACE-15: returns an index in 0..n-1, n >= 1. */
typedef struct PlacementPicker {
        size_t (*pick)(size_t n, void *userdata);
        void *userdata;
} PlacementPicker;

typedef struct PlacementChoice {
        const PlacementGpu *gpu;
        const PlacementVf *vf;
        const PlacementProfile *profile; /* the request's profile in the chosen GPU's catalog */
        bool dirty; /* a leftover configuration: reset it, in-use gated, before the claim */
} PlacementChoice;

/* P's entry in this GPU's catalog, or NULL (DISC-19). */
const PlacementProfile *placement_gpu_find_profile(const PlacementGpu *gpu, const char *name);

PlacementPath placement_gpu_path(const PlacementGpu *gpu);

/* Configured (a non-zero type or an mdev) and owned by no claim and no reservation. */
bool placement_vf_is_dirty(const PlacementVf *vf);

/* Discovered with a known parent, readable, not configured, claimed, reserved, uncertain or
 * quarantined (SPEC §0.2). */
bool placement_vf_is_allocatable(const PlacementSnapshot *snapshot, const PlacementVf *vf);

/*
 * Chooses a VF for request->profile (PLACE-3, PLACE-4, PLACE-5, PLACE-6, PLACE-11, PLACE-13,
 * PLACE-14, PLACE-15). On failure *error says why in the exact SPEC text, and the result is
 *   -ENOENT  400 unknown_profile: no catalog has the name and every catalog came from NVML;
 *   -ENOSPC  409 insufficient_resources (PLACE-18 second case, PLACE-19; FLEET-6: no room on
 *            request->gpu);
 *   -ENODEV  409 insufficient_resources too: request->gpu is not in the snapshot (FLEET-6);
 *   -EINVAL  a missing argument, or a picker answer out of range;
 *   -ENOMEM.
 */
int placement_select_vf(const PlacementSnapshot *snapshot, const PlacementRequest *request,
                        const PlacementPicker *picker, PlacementChoice *ret, char **error);

/*
 * PLACE-8: true when the GPU holds an unfinished reservation of a type other than the
 * profile's type on it, so its NVML answer is stale for that profile and the claim waits for
 * the next round after that configure ends. False when the GPU does not resolve the profile
 * (it is no candidate, so there is nothing to wait for).
 */
bool placement_nvml_answer_is_stale(const PlacementSnapshot *snapshot, const PlacementGpu *gpu,
                                    const char *profile);

/*
 * PLACE-10: true when the GPU decides on sysfs lists (equal-size, fallback, mdev) and holds an
 * unfinished reservation: its lists are about to change, so a claim reads them only after
 * that configure ends.
 */
bool placement_gpu_must_wait(const PlacementSnapshot *snapshot, const PlacementGpu *gpu);

/* /resources availability of a profile (PLACE-21), summed over GPUs. Not additive across
 * profiles. The caller reports 0 while placement is disabled (API-5). */
uint64_t placement_count_available(const PlacementSnapshot *snapshot, const char *profile);

/* The same for n distinct profiles at once, in one pass over the VFs: ret_counts[i] is the
 * availability of profiles[i]. -EINVAL for a NULL name, -ENOMEM. */
int placement_count_available_many(const PlacementSnapshot *snapshot, const char *const *profiles,
                                   size_t n, uint64_t *ret_counts);

/* The production picker: a splitmix64 generator seeded from getrandom(). The state lives with
 * the caller (the Manager), so the module keeps none. */
typedef struct PlacementRandom {
        uint64_t state;
} PlacementRandom;

int placement_random_init(PlacementRandom *ret);
/* A PlacementPicker.pick: userdata is a PlacementRandom; uniform (no modulo bias). */
size_t placement_random_pick(size_t n, void *userdata);

/* ---- the one host→placement snapshot ------------------------------------------------------- */

/* What an unfinished claim's reservation puts on a VF (PLACE-2). */
typedef struct PlacementReservation {
        uint32_t type_id;         /* vendor VFIO: the type it will write */
        uint64_t framebuffer_mib; /* its profile's */
        /* Its configure completed: not allocatable, and counted as claimed, until it ends. */
        bool write_done;
} PlacementReservation;

/*
 * What the snapshot folds over the host. Every member may be NULL: no NVML (every GPU of unknown
 * mode, none NVML-usable), no uncertain VF, nothing quarantined, claimed or reserved.
 */
typedef struct PlacementOverlays {
        NvmlClient *nvml; /* modes, fallbacks and cached placements (NVML-14) */
        WorkerPool *pool; /* the sysfs pool: its uncertain keys (GEN-4) */

        /* The health store's quarantine, pending entries included (HEALTH-20). */
        bool (*is_quarantined)(void *userdata, const char *vf);
        void *quarantine_userdata;

        /* Durable claims (instance records), with their profile's framebuffer (0: unknown). */
        bool (*is_claimed)(void *userdata, const char *vf, uint64_t *ret_framebuffer_mib);
        /* The claim flow's reservations. */
        bool (*is_reserved)(void *userdata, const char *vf, PlacementReservation *ret);
        /*
         * A GPU's NVML counts as the caller wants them decided on: the claim flow passes its
         * fresh round answers with PLACE-7's subtraction (a malloc'd array, or NULL and 0 when
         * it has none). NULL: the client's cached placements of every catalog type (/resources,
         * PLACE-21).
         */
        int (*nvml_counts)(void *userdata, const char *pf, PlacementNvmlCount **ret, size_t *ret_n);
        void *claims_userdata;
} PlacementOverlays;

/*
 * A snapshot with the storage behind it. The rules it applies, once for every reader:
 *  - a GPU's mode is NVML's; on mdev hosts it is equal-size (API-6) and NVML's placements are
 *    never used (PLACE-6 decides);
 *  - NVML is usable for a GPU that is not in fallback (NVML-11);
 *  - a VF's framebuffer is its reservation's, else its claim's, else that of what occupies it:
 *    the leftover type in its GPU's catalog, else its mdev's profile in that catalog, else the
 *    size the profile's name gives (DISC-14);
 *  - an mdev VF's availability is what discovery read (PLACE-6).
 * snapshot points into the view and into host, which must outlive it unchanged.
 */
typedef struct PlacementView {
        PlacementSnapshot snapshot;
        void *storage;
} PlacementView;

int placement_view_build(const GpuHost *host, const PlacementOverlays *overlays,
                         PlacementView **ret);
PlacementView *placement_view_free(PlacementView *v);
DEFINE_TRIVIAL_CLEANUP_FUNC(PlacementView *, placement_view_free);
#define _cleanup_placement_view_ _cleanup_(placement_view_freep)

/* ---- what admission and /resources both decide on (MET-4) ------------------------------------ */

/*
 * The sources of placement_disabled_reason (INST-11, API-5), each NULL while it has nothing to
 * say. The first that says something is the reason, in this order.
 */
typedef struct PlacementDisabledSources {
        const char *store_unavailable; /* HEALTH-16: the health store's own reason */
        const char *discovery_error;   /* DISC-7 */
        const char *scan_error;        /* DEV-14: the reconciler's open-handle scan */
        const char *records_error;     /* INST-22: a record that cannot be loaded */
        WorkerPool *pool; /* GEN-4: with every extra thread stuck, no sysfs work can start */
} PlacementDisabledSources;

/* 1 and a malloc'd reason while placement is disabled, 0 and NULL while not; -ENOMEM. */
int placement_disabled_reason(const PlacementDisabledSources *sources, char **ret);

/* API-5's slot figures of a snapshot: every readable VF is a slot. */
typedef struct PlacementSlots {
        uint64_t total;
        uint64_t used; /* configured, an mdev, claimed or reserved */
        uint64_t quarantined;
        uint64_t allocatable; /* 0 while placement is disabled */
} PlacementSlots;

void placement_count_slots(const PlacementSnapshot *snapshot, bool disabled, PlacementSlots *ret);
