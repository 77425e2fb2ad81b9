/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * claim: the claim flow of a vGPU instance (SPEC PLACE-1, PLACE-2, PLACE-7, PLACE-8, PLACE-9,
 * PLACE-10, PLACE-11, PLACE-12, PLACE-16, PLACE-17, PLACE-20, PLACE-22; NVML-16).
 *
 * A Claimer runs claims on the owner's thread (the event loop), on top of the owner's worker
 * pool, DeviceOps, NvmlClient and GpuTracker (the host's one picture, which the reconciler's
 * passes keep current too). One claim goes:
 *
 *   rediscover (DISC-20) → wait for fresh NVML answers for the mixed-size GPUs it needs
 *   (PLACE-7, PLACE-8) or for pending configures of sysfs-path GPUs (PLACE-10) → select
 *   (placement_select_vf) → reserve → reset a dirty choice (PLACE-11, PLACE-12) → save the
 *   durable claim through the owner's callback (PLACE-1, PLACE-20) → configure via DeviceOps →
 *   done, or on a capacity refusal reset, clear the claim and select once more (PLACE-17).
 *   When nothing is selectable, dirty VFs are reset with one shared scan and the claim selects
 *   once more (PLACE-16).
 *
 * Batching (PLACE-9): discoveries and NVML rounds are shared. Claims that entered before a
 * discovery started share its result; when no round is in flight, one NVML request covers
 * every (GPU, type) pair any waiting claim needs. A query for GPU G is never submitted while a
 * write to one of G's VFs runs (DeviceOps busy on the VF, or a refresh that the Claimer holds
 * back), and the Claimer starts no write on G while a query for G runs; a round abandoned at
 * its deadline (NVML-10) ends at once, which unblocks writes. Cache refreshes go through
 * claimer_request_nvml_refresh(), which starts one only while the Claimer has no write in
 * flight, and the Claimer starts no write while a refresh runs. Writes the owner makes itself
 * (releases) should check claimer_gpu_is_querying() first.
 *
 * Accounting (PLACE-7): free placements of P on G = the answer's count − reservations of P on
 * G whose write had not completed when the query was submitted. Because queries and writes on G
 * never overlap, "completed before submission" equals "completed before the query started".
 *
 * Rediscovery (DISC-20, for the GPUs concerned, through the tracker): a claim whose candidate
 * GPUs all decide on fresh NVML placements asks for a re-read of the VFs' current_vgpu_type,
 * and its NVML round runs alongside that read; a claim that needs any GPU's creatable lists
 * (equal-size, fallback, mdev, PLACE-5/6/10), a profile no catalog names, or PLACE-16's second
 * selection asks for a full discovery. Selection always reads the tracker's host through
 * placement_view_build(), the snapshot /resources reads too.
 *
 * Failures (ClaimResult.failure, API-21): discovery failure, HEALTH-16 store text, a DEV-2 store
 * refusal, an exhausted sysfs pool and PLACE-8's `vGPU placement round timed out after <d>` are
 * PLACEMENT_DISABLED; PLACE-18/19 texts, a second capacity refusal (the driver's DEV-7 text)
 * and `repair dirty VF <vf> before claim: <err>` (PLACE-12) are INSUFFICIENT_RESOURCES; a
 * name no NVML catalog knows is UNKNOWN_PROFILE; `save vGPU claim: <err>` and configure
 * failures are INTERNAL. The API maps them to codes and HTTP statuses (api/).
 *
 * Driving: the owner attaches the Claimer to its sd-event loop (claimer_attach_event()), next
 * to its worker pool, DeviceOps and NvmlClient, whose completions call into the Claimer. Every
 * callback below runs on the owner's thread, never from inside the call that started the work.
 *
 * Promises: functions return >= 0 or -errno; out-parameters are written only on success; a
 * claim's done() runs exactly once (unless the Claimer is freed first) with the failure kind
 * and the SPEC text of a failure.
 */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "base/base.h"
#include "device/device.h"
#include "gpu/gpu.h"
#include "nvml/nvml.h"
#include "placement/placement.h"
#include "sysfs/sysfs.h"
#include "worker/worker.h"
#include "write-gate.h"

typedef struct Claimer Claimer;
typedef struct Claim Claim;

/* ---- the durable claim (PLACE-20), supplied by the owner ----------------------------------- */

typedef struct ClaimRecord {
        const char *instance_id;
        const char *framework; /* "vendor-vfio" or "mdev" */
        const char *vf;        /* the VF (mdev: the parent VF) */
        const char *gpu;       /* the VF's PF */
        const char *profile;   /* "NVIDIA L40S-2Q" */
        uint32_t type_id;      /* vendor VFIO: the type ID on that GPU; 0 for mdev */
        const char *mdev_type; /* mdev: the type directory; else NULL */
        const char *mdev_uuid; /* mdev: the new mdev's UUID; else NULL */
        const char
            *device_path; /* <sysfs_root>/bus/pci/devices/<vf> or .../bus/mdev/devices/<uuid> */
        Timestamp claimed_at;
} ClaimRecord;

/*
 * The owner's side of the claim. save() writes the claim into the instance record and clear()
 * removes it again (after a capacity refusal or a failed configure); both are asynchronous:
 * they return 0 once started and later call claimer_save_done() / claimer_clear_done() with the
 * token they were given (not from inside the call), or return < 0 with *error set when they
 * could not start (the claim then fails as if the operation had failed). is_claimed() tells
 * whether a VF is held by a claim the owner knows (its instance records), with the framebuffer
 * MiB of that claim's profile (0 if unknown).
 */
typedef struct ClaimerOwner {
        int (*save)(void *userdata, const ClaimRecord *record, Claim *token, char **error);
        int (*clear)(void *userdata, const ClaimRecord *record, Claim *token, char **error);
        bool (*is_claimed)(void *userdata, const char *vf, uint64_t *ret_framebuffer_mib);
        /*
         * Optional: a configure or reset of vf by the Claimer has ended, so the owner can re-read
         * the VF (DISC-20). The Claimer asks for NVML-14's cache refresh itself.
         */
        void (*vf_changed)(void *userdata, const char *vf);
        /*
         * Optional: the claim of instance_id holds a reservation now (each selection makes one),
         * so INST-10's admitted-but-unreserved count can drop it.
         */
        void (*reserved)(void *userdata, const char *instance_id);
        void *userdata;
} ClaimerOwner;

/*
 * Completes the owner's save() or clear(): r >= 0 on success (error NULL), else r < 0 and its
 * message in error, which must not be NULL then.
 */
void claimer_save_done(Claimer *cl, Claim *token, int r, const char *error);
void claimer_clear_done(Claimer *cl, Claim *token, int r, const char *error);

/* ---- configuration ------------------------------------------------------------------------- */

typedef struct ClaimerConfig {
        const Root *sysfs;    /* sysfs_root (borrowed; duplicated for the PLACE-16 scan) */
        GpuTracker *tracker;  /* the host's one picture (borrowed); outlives the Claimer */
        const Root *proc;     /* proc_root, for PLACE-16's shared scan */
        const char *dev_root; /* dev_root, absolute */
        WorkerPool *pool;     /* the sysfs pool the DeviceOps uses (borrowed) */
        DeviceOps *ops;       /* borrowed */
        WriteGate *gate;      /* PLACE-9 for the owner's writes (borrowed; bound to the Claimer) */
        NvmlClient *nvml;     /* borrowed; may be NULL (every GPU on the sysfs path) */
        nsec_t nvml_timeout;  /* gpu.nvml_timeout: PLACE-8's bound; 0 for 5 s */
        nsec_t sysfs_timeout; /* deadline of the PLACE-16 scan job; 0 for 30 s */
        PlacementPolicy policy;
        PlacementPicker picker; /* PLACE-15; NULL pick: a PlacementRandom of the Claimer's own */
        DeviceGuard guard;      /* quarantine and the health store, as the DeviceOps has it */
        ClaimerOwner owner;
        const Clock *clock;    /* claimed_at; NULL for clock_realtime */
        const MonoClock *mono; /* nvml_ms and PLACE-8; NULL for mono_clock_system */
} ClaimerConfig;

int claimer_new(const ClaimerConfig *config, Claimer **ret);

/*
 * Drops every claim without running its done(). Free the worker pool and the NVML client first
 * (their pending completions point into the Claimer); the DeviceOps after them.
 */
Claimer *claimer_free(Claimer *cl);
DEFINE_TRIVIAL_CLEANUP_FUNC(Claimer *, claimer_free);
#define _cleanup_claimer_ _cleanup_(claimer_freep)

/*
 * Adds the Claimer's sources to event (NULL: sd_event_default()), so that the loop starts
 * what is due: tracker requests, NVML rounds, queued writes, PLACE-8 timeouts. -EBUSY if already
 * attached; claimer_free() removes the sources.
 */
int claimer_attach_event(Claimer *cl, sd_event *event);

/*
 * The overlays a /resources snapshot folds over the host to show what this Claimer and its
 * owner hold (PLACE-21): its reservations, the owner's claims, quarantine, uncertain VFs and
 * NVML's cache. Claims select on the same ones, with fresh NVML answers instead of the cache.
 * The callbacks point into the Claimer: use the result while it lives.
 */
void claimer_fill_overlays(Claimer *cl, PlacementOverlays *ret);

/*
 * The snapshot a claim would select on now: the tracker's host with those overlays and the
 * Claimer's fresh NVML answers (PLACE-7). -EAGAIN before the first discovery, -ENOMEM.
 */
int claimer_build_view(Claimer *cl, PlacementView **ret);

/* ---- claims -------------------------------------------------------------------------------- */

/* What kind of failure ended a claim; api/ maps it to API-21's code and status. */
typedef enum ClaimFailure {
        CLAIM_FAILURE_NONE,
        CLAIM_FAILURE_UNKNOWN_PROFILE,        /* PLACE-19: no catalog names the profile */
        CLAIM_FAILURE_INSUFFICIENT_RESOURCES, /* PLACE-12, PLACE-17, PLACE-18, PLACE-19 */
        CLAIM_FAILURE_PLACEMENT_DISABLED,     /* DISC-7, HEALTH-16, GEN-4, PLACE-8 */
        CLAIM_FAILURE_INTERNAL,               /* PLACE-20's save, a configure failure */
        _CLAIM_FAILURE_MAX,
} ClaimFailure;

/* "none", "unknown_profile", "insufficient_resources", "placement_disabled", "internal". */
const char *claim_failure_to_string(ClaimFailure f);

typedef struct ClaimRequest {
        const char *instance_id;
        const char *profile;
        const char *mdev_uuid; /* mdev hosts: the UUID to create (lowercase v4); else NULL */
        /* FLEET-6: only this PF is considered (PlacementRequest.gpu); NULL: every GPU. */
        const char *gpu;
} ClaimRequest;

typedef struct ClaimResult {
        int r;                /* >= 0, or -errno */
        ClaimFailure failure; /* on failure: what kind (API-21) */
        const char *error;    /* on failure: the SPEC text, never NULL */
        const char *vf;       /* on success */
        const char *gpu;      /* on success */
        const char *profile;  /* the request's */
        uint32_t type_id;
        const char *framework;
        Timestamp claimed_at;
        uint64_t nvml_ms;    /* PLACE-22: entering placement → reservation, waits included */
        unsigned selections; /* how many times the claim selected (tests) */
} ClaimResult;

/* Runs once on the owner's thread; result and its strings are valid during the call only. */
typedef void (*ClaimDoneFunc)(const ClaimResult *result, void *userdata);

/*
 * Starts a claim. It enters placement now (PLACE-22's clock starts) and proceeds on later
 * dispatches; done() always runs later. Fails only for an invalid request (-EINVAL) or ENOMEM.
 */
int claimer_claim(Claimer *cl, const ClaimRequest *request, ClaimDoneFunc done, void *userdata);

/* ---- PLACE-9 and PLACE-4 for the owner ----------------------------------------------------------
 */

/*
 * Whether GPU pf decides on fresh NVML placements (PLACE-4: vendor VFIO, mixed-size, NVML
 * usable) rather than on its VFs' sysfs lists; after a write to one of its VFs, a re-read of the
 * VFs' types then suffices, where the lists need a full discovery (DISC-20).
 */
bool claimer_gpu_uses_nvml(Claimer *cl, const char *pf);

/* True while a claim-time NVML query covering pf is in flight: don't start a write on pf. */
bool claimer_gpu_is_querying(Claimer *cl, const char *pf);

/*
 * Requests an NVML cache refresh (NVML-14) that starts only once no write of the Claimer is in
 * flight; while it runs, the Claimer holds its writes back. Coalesced like
 * nvml_client_request_refresh().
 */
int claimer_request_nvml_refresh(Claimer *cl, bool init);

/* Counters for tests and metrics. */
typedef struct ClaimerStats {
        uint64_t rounds;      /* NVML rounds submitted */
        uint64_t discoveries; /* tracker runs asked for (full or re-read) */
        uint64_t claims_ok, claims_failed;
} ClaimerStats;
const ClaimerStats *claimer_get_stats(Claimer *cl);

/*
 * Moves on (monotonically) whenever the reservations the overlays show change: one made, one
 * dropped, a claim that held one gone. The API keeps its rendered bodies until it moves (PERF-1).
 */
uint64_t claimer_generation(const Claimer *cl);

/* ---- pure helpers (unit-tested) ------------------------------------------------------------ */

/* The PLACE-7 subtraction for one (GPU, type) and an answer of per-GPU round q: see above. */
typedef struct ClaimWriteMark {
        uint32_t type_id;
        bool write_done;  /* the type write completed */
        uint64_t done_at; /* the GPU's submitted-round count when it completed */
} ClaimWriteMark;
uint32_t claim_count_unreflected(const ClaimWriteMark *marks, size_t n, uint32_t type_id,
                                 uint64_t round);
