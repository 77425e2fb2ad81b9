/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The claim flow's own types and the calls its files make of each other (claim.h has the public
 * side). Everything runs on the owner's thread.
 */
#include "claim.h"

#define CLAIM_DEFAULT_NVML_TIMEOUT (5 * NSEC_PER_SEC)
/* How often blocked work (a foreign write, a refresh in the NVML slot) is looked at again. */
#define CLAIM_POLL_INTERVAL (5 * NSEC_PER_MSEC)

typedef enum ClaimState {
        CLAIM_DISCOVER, /* waiting for a discovery that started after claim->discovery_floor */
        CLAIM_WAIT, /* waiting for NVML rounds or pending configures (PLACE-8, PLACE-9, PLACE-10) */
        CLAIM_BUSY, /* a step of its own is in flight: reset, save, configure, clear, scan */
        CLAIM_FINISHED, /* done() ran; freed at the end of claimer_process() */
} ClaimState;

typedef enum WriteKind {
        WRITE_CONFIGURE,
        WRITE_RESET_DIRTY,   /* PLACE-11: the chosen dirty VF, before the claim is saved */
        WRITE_RESET_REFUSED, /* PLACE-17: the VF that refused the type */
        WRITE_RESET_PLACE16, /* PLACE-16: every dirty VF, one shared scan */
} WriteKind;

typedef struct WriteOp WriteOp;
struct WriteOp {
        WriteOp *next;
        Claim *claim;
        WriteKind kind;
        char vf[PCI_ADDRESS_STRLEN];
        char gpu[PCI_ADDRESS_STRLEN];
        char *mdev_uuid;  /* resets of an mdev VF */
        DeviceScan *scan; /* PLACE-16: the shared scan */
        bool started;
};

struct Claim {
        Claim *next;
        Claimer *cl;
        char *instance_id, *profile, *mdev_uuid;
        char *only_gpu; /* FLEET-6's PF restriction; NULL: none */
        ClaimDoneFunc done;
        void *userdata;
        ClaimState state;
        nsec_t entered;
        uint64_t discovery_floor; /* needs a discovery numbered above this */
        uint64_t round_floor;     /* needs NVML answers from rounds numbered above this */
        nsec_t wait_deadline;     /* PLACE-8; 0 while not waiting */
        bool rediscover;          /* PLACE-10: re-read the lists once the pending configure ends */
        bool force_full;          /* PLACE-16: the next discovery reads everything */
        bool needs_full;          /* the discovery it waits for must be a full one */
        bool discovered_full;     /* its last discovery read the lists too (PLACE-5) */
        unsigned selections;

        /* the reservation (PLACE-2) */
        bool reserved;
        bool write_done;
        char vf[PCI_ADDRESS_STRLEN];
        char gpu[PCI_ADDRESS_STRLEN];
        char *chosen_profile; /* the name as the chosen GPU's catalog has it */
        uint32_t type_id;
        char *mdev_type;
        uint64_t framebuffer_mib;
        bool saved;
        Timestamp claimed_at;
        uint64_t nvml_ms;

        char **exclude;
        bool place16_done;
        unsigned place16_pending, place16_ok;
        unsigned capacity_refusals;
        char *refused_dirty_vf, *refused_dirty_error; /* PLACE-12 */

        /* a failure waiting for its cleanup (clear) before done() */
        int fail_r;
        ClaimFailure fail_kind;
        char *fail_error;
        bool reselect_after_clear;
};

typedef struct GpuRoundState {
        char pf[PCI_ADDRESS_STRLEN];
        uint64_t submitted; /* queries for this GPU submitted so far: the next one is +1 */
        bool querying;
        bool has_answer;
        uint64_t answer_q;      /* this GPU's index of the answered query */
        uint64_t answer_global; /* the round it came with */
        NvmlPlacements *placements;
        size_t n_placements;
} GpuRoundState;

typedef struct WriteRecord {
        char gpu[PCI_ADDRESS_STRLEN];
        uint32_t type_id;
        uint64_t done_at;
} WriteRecord;

struct Claimer {
        Root *sysfs;
        const Root *proc;
        char *dev_root;
        WorkerPool *pool;
        DeviceOps *ops;
        NvmlClient *nvml;
        nsec_t nvml_timeout, sysfs_timeout;
        PlacementPolicy policy;
        PlacementPicker picker;
        PlacementRandom random;
        DeviceGuard guard;
        ClaimerOwner owner;
        const Clock *clock;
        const MonoClock *mono;

        /* The Claimer's turns on the owner's loop: soon after claimer_notify(), and at its next
         * deadline.
         */
        sd_event_source *wake, *timer;
        Claim *claims; /* in entry order */
        WriteOp *writes;
        WriteGate *gate; /* the owner's writes (borrowed) */

        GpuTracker *tracker; /* the host (borrowed) */
        uint64_t discoveries_started, discoveries_done;
        bool discovering, discovering_full;

        uint64_t rounds; /* rounds submitted */
        bool round_in_flight;
        GpuRoundState *gpus;
        size_t n_gpus;
        WriteRecord *records;
        size_t n_records;

        bool refresh_wanted, refresh_init, refresh_started_by_us;
        bool processing, again;
        ClaimerStats stats;
        uint64_t generation; /* reservations made or dropped (PERF-1) */
};

typedef struct Pair {
        char pf[PCI_ADDRESS_STRLEN];
        nvmlVgpuTypeId_t *types;
        size_t n_types;
} Pair;

typedef enum Readiness {
        READY,
        NEEDS_ROUND, /* pairs added */
        BLOCKED,     /* a reservation must end first */
        RELIST,      /* a GPU fell back to its lists, which this claim has not read (PLACE-5) */
} Readiness;

/* claim.c: the engine, finishing and saving claims, the snapshot, selection */
void claim_drop_reservation(Claim *c);
void claim_fail_after_save(Claim *c, int r, ClaimFailure kind, const char *error, bool reselect);
void claim_fail_selection(Claim *c, int r, const char *error);
void claim_finish(Claim *c, int r, ClaimFailure kind, const char *error);
void claim_restart(Claim *c);
int claim_save(Claim *c);
bool claimer_gpu_is_writing(Claimer *cl, const char *pf);
const GpuHost *claimer_host(Claimer *cl);
bool claimer_host_is_mdev(Claimer *cl);
void claimer_notify(Claimer *cl);
void claimer_process(Claimer *cl);
bool claimer_refresh_running(Claimer *cl);
GpuRoundState *claimer_round_gpu(Claimer *cl, const char *pf, bool create);
nsec_t claimer_now(Claimer *cl);

/* claim-write.c: the Claimer's own writes through DeviceOps (PLACE-9 gated) */
int claim_queue_write(Claim *c, WriteKind kind, const char *vf, const char *gpu,
                      const char *mdev_uuid);
bool claimer_kick_writes(Claimer *cl);
void claim_write_op_free(WriteOp *w);
void claimer_write_unlink(Claimer *cl, WriteOp *w);

/* claim-wait.c: discovery and the NVML rounds a claim waits for (DISC-20, PLACE-7, PLACE-8,
 * PLACE-9, PLACE-10) */
void claim_pairs_free(Pair *pairs, size_t n);
Readiness claim_readiness(Claimer *cl, Claim *c, const PlacementSnapshot *sn, bool collect_only,
                          Pair **pairs, size_t *n_pairs);
void claimer_maybe_start_discovery(Claimer *cl);
bool claimer_maybe_start_round(Claimer *cl, Pair *pairs, size_t n_pairs);

/* claim-sweep.c: PLACE-16's shared reset of dirty VFs */
void claim_place16_start(Claim *c, const PlacementSnapshot *sn, int select_r,
                         const char *select_error);
void claim_place16_step_done(Claim *c, bool ok);
