/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * fleet: this host's vGPU capacity as OpenStack Placement resource providers (SPEC §18,
 * FLEET-1, FLEET-2, FLEET-3, FLEET-4, FLEET-5). Off unless placement.url is set.
 *
 * Three layers, kept apart so that the arithmetic is tested without a network:
 *
 *  - the model (fleet-model.c), pure: a FleetHostInput (what the daemon knows about its PFs and
 *    VFs at one moment) gives a FleetWanted, the providers with their names and UUIDv5 uuids
 *    (FLEET-2), inventories (FLEET-3) and traits (FLEET-4). No I/O, no clock, no state;
 *  - the input (fleet-host.c): a FleetHostInput read from the one host→placement snapshot
 *    (placement_view_build(), ARCHITECTURE.md decision 3), the health store's drains and the
 *    NVML client's cache. In-memory reads only, on the loop;
 *  - the sync (fleet-sync.c, fleet-http.c): a FleetSync on the loop that sends the latest wanted
 *    state to Placement from a worker thread with libcurl (FLEET-5), so a slow or absent
 *    Placement never holds up the loop or any local operation.
 *
 * Promises:
 *  - functions return >= 0 or -errno; out-parameters are written only on success; a function
 *    that takes `char **error` sets it on every failure;
 *  - every uuid is a function of placement.host_name and the PF address only, so a restart or
 *    a re-discovery never changes one, and two hosts never share one;
 *  - the sync never blocks the loop: every HTTP exchange has a connect and a total timeout and
 *    runs on the FleetSync's own worker thread; the loop only compares and copies.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "base/base.h"
#include "gpu/gpu.h"
#include "health/health.h"
#include "nvml/nvml.h"
#include "placement/placement.h"
#include "worker/worker.h"

/* The Placement microversion vgpud speaks, sent on every request and required of the root
 * document (FLEET-1). */
#define FLEET_MICROVERSION "1.39"
#define FLEET_MICROVERSION_MAJOR 1
#define FLEET_MICROVERSION_MINOR 39

/* ---- UUIDv5 (RFC 4122 §4.3, SHA-1) --------------------------------------------------------- */

#define FLEET_UUID_STRLEN 37 /* 36 characters and the NUL */

/* RFC 4122's URL namespace, 6ba7b811-9dad-11d1-80b4-00c04fd430c8. */
extern const uint8_t fleet_uuid_namespace_url[16];

/* The lowercase text form of UUIDv5(namespace, name). -EIO when libcrypto fails. */
int fleet_uuid5(const uint8_t namespace[16], const char *name, char ret[static FLEET_UUID_STRLEN]);

/* ---- names (FLEET-2, FLEET-4) -------------------------------------------------------------- */

/* placement.host_name: 1..64 bytes of letters, digits, '-', '.' and '_' (a kernel host name
 * fits; Placement allows 200 characters per provider name, and the PF suffix adds 19). */
#define FLEET_HOST_NAME_MAX 64
bool fleet_host_name_is_valid(const char *name);

/* The root provider's uuid: UUIDv5 of "vgpud:<host_name>" in the URL namespace. */
int fleet_root_uuid(const char *host_name, char ret[static FLEET_UUID_STRLEN]);
/* A PF provider's uuid: UUIDv5 of "vgpud:<host_name>:<pf>". */
int fleet_pf_uuid(const char *host_name, const char *pf, char ret[static FLEET_UUID_STRLEN]);
/* A PF provider's name: "<host_name>_pci_<dddd>_<bb>_<dd>_<f>". -EINVAL for a bad address. */
int fleet_pf_provider_name(const char *host_name, const char *pf, char **ret);

/*
 * FLEET-4's profile trait: "CUSTOM_VGPU_PROFILE_" and the profile name without a leading
 * "NVIDIA " vendor word, upper case, every other byte but letters and digits as '_'
 * ("NVIDIA L40S-4Q" gives CUSTOM_VGPU_PROFILE_L40S_4Q). -EINVAL when nothing is left.
 */
int fleet_profile_trait(const char *profile, char **ret);

/*
 * DISK-12's image trait: "CUSTOM_VGPUD_IMAGE_" and the image's name, upper case, every byte but
 * letters and digits as '_' ("debian-12" gives CUSTOM_VGPUD_IMAGE_DEBIAN_12). -EINVAL for an
 * empty name or one too long for a trait.
 */
int fleet_image_trait(const char *image, char **ret);

#define FLEET_RC_VGPU "VGPU"
#define FLEET_RC_FB "CUSTOM_VGPU_FB_GIB"
/* "CUSTOM_VGPU_PLACE_<s>G". */
int fleet_place_class(uint64_t size_gib, char **ret);

#define FLEET_TRAIT_MIXED "CUSTOM_VGPUD_MIXED_SIZE"
#define FLEET_TRAIT_EQUAL "CUSTOM_VGPUD_EQUAL_SIZE"
#define FLEET_TRAIT_DRAINED "CUSTOM_VGPUD_DRAINED"

/* A name Placement accepts for a custom resource class or trait: CUSTOM_[A-Z0-9_]+, at most
 * 255 bytes. */
bool fleet_custom_name_is_valid(const char *name);

/* ---- the wanted state ------------------------------------------------------------------------ */

/* One inventory record. allocation_ratio is always 1.0 and min_unit and step_size 1 (FLEET-3). */
typedef struct FleetInventory {
        char *resource_class;
        uint64_t total;
        uint64_t reserved; /* <= total */
        uint64_t max_unit; /* 1..total */
} FleetInventory;

typedef struct FleetProvider {
        char *name;
        char uuid[FLEET_UUID_STRLEN];
        char parent_uuid[FLEET_UUID_STRLEN]; /* "" for the root */
        char pf[PCI_ADDRESS_STRLEN];         /* "" for the root */
        FleetInventory *inventories;         /* sorted by class; none for the root */
        size_t n_inventories;
        char **traits; /* sorted, NULL-terminated; NULL when none */
} FleetProvider;

typedef struct FleetWanted {
        FleetProvider *providers; /* [0] is the root, then the PFs by address */
        size_t n_providers;
} FleetWanted;

FleetWanted *fleet_wanted_free(FleetWanted *w);
DEFINE_TRIVIAL_CLEANUP_FUNC(FleetWanted *, fleet_wanted_free);
#define _cleanup_fleet_wanted_ _cleanup_(fleet_wanted_freep)
void fleet_provider_done(FleetProvider *p);
int fleet_provider_copy(const FleetProvider *p, FleetProvider *ret);

const FleetProvider *fleet_wanted_find(const FleetWanted *w, const char *uuid);
const FleetInventory *fleet_provider_find_inventory(const FleetProvider *p, const char *rc);

/* Same inventories (every field) and the same traits. Names and parents are not compared. */
bool fleet_provider_state_equal(const FleetProvider *a, const FleetProvider *b);

/* ---- the model's input ----------------------------------------------------------------------- */

typedef struct FleetVfInput {
        bool readable; /* DISC-6: counted in VGPU's total */
        /* Allocatable now (SPEC §0.2: placement_vf_is_allocatable(), a drained PF's VFs not). */
        bool allocatable;
        /* Configured, claimed or reserved: it holds a slot of the card. */
        bool occupied;
        /* Claimed or reserved for an instance with a Placement consumer (FLEET-6): Placement
         * counts it in its usage already, so it is never reserved. */
        bool consumer;
        uint64_t framebuffer_mib; /* of what occupies it; 0 none or unknown */
} FleetVfInput;

typedef struct FleetProfileInput {
        const char *name;
        uint64_t framebuffer_mib; /* 0 unknown: the profile adds a trait but no size class */
        uint32_t max_instances;   /* NVML's maximum on this card; 0 unknown */
        /* This GPU's PLACE-21 figure: free placements on mixed-size NVML GPUs, allocatable
         * VFs whose last-read list names it elsewhere; 0 while placement is disabled. */
        uint64_t available;
} FleetProfileInput;

typedef struct FleetGpuInput {
        const char *address;      /* the PF */
        bool mixed;               /* NVML reports mixed-size mode; unknown counts as equal-size */
        bool drained;             /* HEALTH-26 */
        uint64_t framebuffer_mib; /* the card's; 0 unknown (then derived from its catalog) */
        const FleetProfileInput *profiles;
        size_t n_profiles;
        const FleetVfInput *vfs;
        size_t n_vfs;
} FleetGpuInput;

typedef struct FleetHostInput {
        const char *host_name;
        bool placement_disabled;   /* API-5's placement_disabled_reason is set */
        bool stopping;             /* vgpud is shutting down (FLEET-4) */
        const FleetGpuInput *gpus; /* sorted by address */
        size_t n_gpus;
        /* DISK-12: the host's ready images, by name; every PF provider carries their traits */
        const char *const *images;
        size_t n_images;
} FleetHostInput;

/*
 * FLEET-2, FLEET-3, FLEET-4: the root and one provider per GPU. -EINVAL for an invalid host name or
 * PF address, -ENOMEM. See docs/FLEET.md for why each figure is what it is.
 */
int fleet_wanted_compute(const FleetHostInput *in, FleetWanted **ret);

/* The card's framebuffer in MiB: the input's, else the largest footprint one profile can fill
 * (its size × its maximum, a maximum of 0 counted as 1). 0 when nothing is known. */
uint64_t fleet_gpu_framebuffer_mib(const FleetGpuInput *g);

/*
 * What to PUT for a provider whose Placement inventories are `current`: the wanted ones, and
 * every class of current that wanted lacks kept with reserved = total (a PF that vanished, or
 * a size its shrinking sysfs catalog no longer lists: its allocations stay valid, and it admits
 * nothing, FLEET-2). wanted may be NULL (a provider vgpud no longer computes). Sorted by class.
 */
int fleet_inventories_merge(const FleetInventory *wanted, size_t n_wanted,
                            const FleetInventory *current, size_t n_current, FleetInventory **ret,
                            size_t *ret_n);
void fleet_inventories_free(FleetInventory *inv, size_t n);
bool fleet_inventories_equal(const FleetInventory *a, size_t n_a, const FleetInventory *b,
                             size_t n_b);

/* ---- the model's input from the daemon's state ----------------------------------------------- */

/*
 * A FleetHostInput with its storage. Built on the loop from the host as last discovered, its
 * placement view (the claim flow's overlays), the health store's drains and the NVML cache's
 * maximum instances; every pointer of `input` points into it, the view or the host, which must
 * outlive it unchanged.
 */
typedef struct FleetHostSnapshot {
        FleetHostInput input;
        void *storage;
} FleetHostSnapshot;

typedef struct FleetHostSources {
        const char *host_name;
        const GpuHost *host;               /* NULL before the first discovery: no PF */
        const PlacementSnapshot *snapshot; /* over host */
        const HealthStore *health;         /* drains; may be NULL */
        NvmlClient *nvml;                  /* maximum instances; may be NULL */
        bool placement_disabled;
        bool stopping;
        /* FLEET-6's consumer of a claimed VF; NULL: no instance has one. */
        bool (*has_consumer)(void *userdata, const char *vf);
        void *userdata;
} FleetHostSources;

int fleet_host_snapshot_build(const FleetHostSources *src, FleetHostSnapshot **ret);
FleetHostSnapshot *fleet_host_snapshot_free(FleetHostSnapshot *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(FleetHostSnapshot *, fleet_host_snapshot_free);
#define _cleanup_fleet_host_snapshot_ _cleanup_(fleet_host_snapshot_freep)

/* ---- Keystone tokens ------------------------------------------------------------------------- */

typedef struct FleetToken {
        char *value;          /* X-Subject-Token; NULL: none yet */
        Timestamp expires_at; /* the token's expires_at */
} FleetToken;

void fleet_token_done(FleetToken *t);

/*
 * A token is renewed before it expires: once less than a tenth of its lifetime or 5 minutes
 * (whichever is shorter, at least 10 s) is left, as seen from `now`; issued_at is when it was
 * obtained. True without a token.
 */
bool fleet_token_needs_refresh(const FleetToken *t, Timestamp issued_at, Timestamp now);

/*
 * placement.keystone.application_credential_secret_file (FLEET-1, API-14's mode rules): a regular
 * file without group or other permission bits, 1..4096 bytes, one trailing newline dropped (the
 * secret is text, as `openstack application credential create` prints it). Failures read
 * `placement.keystone.application_credential_secret_file <path>: <reason>`.
 */
#define FLEET_SECRET_MAX 4096
int fleet_read_secret_file(const char *path, char **ret, char **error);

/* ---- the orphan audit (FLEET-6) ------------------------------------------------------------- */

/* An allocation against this host's providers whose consumer names no local instance, and
 * when the audit first saw it so (in memory only: a restart starts every grace again). */
typedef struct FleetOrphan {
        char consumer[FLEET_UUID_STRLEN];
        Timestamp first_seen;
} FleetOrphan;

/*
 * The audit's decision, pure. allocated: the consumers with an allocation against one of this
 * host's providers (repeats allowed: one consumer may hold several providers); local: the
 * consumers local instance records name, in any state (NULL-terminated, may be NULL); seen: the
 * previous run's orphans. *ret_orphans: every consumer orphaned now, with the time it was first
 * seen orphaned (kept from seen, else now); a consumer no longer orphaned is forgotten, so its
 * grace starts afresh if it is orphaned again. *ret_delete: the orphans seen orphaned for at least
 * grace (a scheduler writes its allocation before it calls POST /instances, so a young one may
 * be a create on its way), sorted. Never a consumer of local. A clock that went back counts as
 * no time passed. -ENOMEM; outputs written only on success.
 */
int fleet_audit_decide(char *const *allocated, char *const *local, const FleetOrphan *seen,
                       size_t n_seen, Timestamp now, nsec_t grace, FleetOrphan **ret_orphans,
                       size_t *ret_n_orphans, char ***ret_delete);

/* ---- backoff (FLEET-5) ------------------------------------------------------------------------
 */

#define FLEET_CONFLICT_ATTEMPTS 8
#define FLEET_BACKOFF_BASE (50 * NSEC_PER_MSEC)
#define FLEET_BACKOFF_MAX (2 * NSEC_PER_SEC)

/* The wait before retry `attempt` (1 = the first retry): a uniform pick, from `random`, in
 * [d/2, d] with d = min(FLEET_BACKOFF_MAX, FLEET_BACKOFF_BASE × 2^(attempt-1)). */
nsec_t fleet_backoff(unsigned attempt, uint64_t random);

/* ---- the sync (FLEET-5) ---------------------------------------------------------------------- */

typedef enum FleetAuth {
        FLEET_AUTH_NOAUTH,   /* placement's noauth2: X-Auth-Token: admin */
        FLEET_AUTH_KEYSTONE, /* application credentials (FLEET-1) */
} FleetAuth;

typedef enum FleetResult {
        FLEET_RESULT_OK,
        FLEET_RESULT_CONFLICT,
        FLEET_RESULT_ERROR,
        _FLEET_RESULT_MAX,
} FleetResult;

/* "ok", "conflict", "error" (vgpud_placement_sync_total{result}). Inline, so that the API's
 * metrics read the figures without linking the sync. */
static inline const char *fleet_result_to_string(FleetResult r)
{
        return r == FLEET_RESULT_OK         ? "ok"
               : r == FLEET_RESULT_CONFLICT ? "conflict"
               : r == FLEET_RESULT_ERROR    ? "error"
                                            : "unknown";
}

typedef struct FleetSyncStats {
        /* ok and error: sync runs by outcome; conflict: generation conflicts met (each retried
         * or, the 8th, ending its run as an error). */
        uint64_t sync_total[_FLEET_RESULT_MAX];
        Timestamp last_ok; /* the end of the last run that converged; zero: none yet */
        bool up;           /* the last exchange with Placement (and Keystone) succeeded */
        uint64_t runs;     /* runs finished (tests) */
        uint64_t requests; /* HTTP requests sent (tests) */
        /* FLEET-6: allocations the orphan audit deleted, and those of released consumers. */
        uint64_t orphans_deleted;
        uint64_t consumers_deleted;
        size_t orphans_pending; /* orphans inside their grace at the last audit */
} FleetSyncStats;

typedef struct FleetSync FleetSync;

typedef struct FleetSyncConfig {
        const char *url; /* placement.url */
        FleetAuth auth;
        const char *keystone_url;      /* placement.keystone.auth_url */
        const char *credential_id;     /* placement.keystone.application_credential_id */
        const char *credential_secret; /* the secret file's contents */
        nsec_t interval;               /* placement.sync_interval: the full check */
        nsec_t check_interval;         /* how often the loop compares the state; 0: 500 ms */
        nsec_t request_timeout;        /* per HTTP request; 0: 10 s */

        /*
         * Called on the loop: the key of the state the wanted state is computed from (any value
         * that moves whenever a figure of FLEET-3/4 may move: the sources' generations), and the
         * wanted state itself, computed only when the key moved or a run needs it.
         */
        uint64_t (*state_key)(void *userdata);
        int (*compute)(void *userdata, bool stopping, FleetWanted **ret);
        /*
         * FLEET-6, called on the loop when a run starts: the Placement consumers that local
         * instance records name, in any state (a NULL-terminated list the caller frees; NULL for
         * none). No allocation of theirs is ever deleted. NULL: no instance has one.
         */
        int (*consumers)(void *userdata, char ***ret);
        nsec_t orphan_grace; /* placement.orphan_grace; 0: 10 min */
        /* Called on the loop when the FleetSync has gone idle after fleet_sync_stop(). */
        void (*stopped)(void *userdata);
        void *userdata;

        /* Injectable for tests; NULL for the real ones. */
        const Clock *clock;                      /* realtime: tokens, last_ok */
        uint64_t (*random)(void *userdata);      /* backoff jitter; called on the worker */
        void (*sleep)(nsec_t d, void *userdata); /* backoff waits; called on the worker */
        void *test_userdata;
} FleetSyncConfig;

/* Copies what it needs of config. Starts its worker thread; sends nothing yet. */
int fleet_sync_new(const FleetSyncConfig *config, FleetSync **ret);
/* Stops the thread without waiting on a request in flight (its thread finishes it alone). */
FleetSync *fleet_sync_free(FleetSync *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(FleetSync *, fleet_sync_free);

/* Adds the worker's source and the check and interval timers; the first run starts at once. */
int fleet_sync_attach_event(FleetSync *s, sd_event *event);

/* A change may have moved a figure: compares now rather than at the next check. */
void fleet_sync_trigger(FleetSync *s);

/*
 * FLEET-6, INST-14: the instance holding consumer is gone (deleted, or its create rolled back):
 * DELETE /allocations/<consumer> on the worker, in the next run, which starts at once if none
 * runs. Never blocks and never fails the caller: the set is in memory, a failed DELETE stays in
 * it for the next run, and one lost to a crash is the orphan audit's after its grace. A consumer
 * that a local record names again when the run starts is dropped, not deleted. -EINVAL for a
 * consumer that is not a lowercase UUID, -ENOMEM.
 */
int fleet_sync_delete_consumer(FleetSync *s, const char *consumer);

/*
 * vgpud is stopping: one last run with every PF drained (FLEET-4), with short timeouts; then
 * stopped() runs. Nothing starts afterwards.
 */
void fleet_sync_stop(FleetSync *s);
bool fleet_sync_is_idle(const FleetSync *s);

const FleetSyncStats *fleet_sync_get_stats(const FleetSync *s);
/* Why the feature is off (FLEET-1: the microversion), NULL while it is on. */
const char *fleet_sync_disabled_reason(const FleetSync *s);
