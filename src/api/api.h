/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * api: the REST routes of vgpud and their JSON (SPEC §11, §12), on top of the http module.
 *
 * The modules own every piece of state; this module only reads it, through the modules an
 * ApiContext points to (the host tracker, the reconciler, the health store, the NVML cache, the
 * worker pool, the claim flow), and writes none of it but through their calls. Handlers run on
 * the event loop, like everything that touches that state, so nothing here locks.
 *
 * Promises:
 *  - reads (/resources, /gpus, /gpu/health, /metrics) answer from memory and never wait on
 *    hardware, NVML, disk or the worker pool (API-16); when the health store is unavailable
 *    they ask the daemon to repair it, without waiting (HEALTH-21);
 *  - /resources, /gpus and the resource gauges of /metrics read one snapshot, built by
 *    placement_view_build() like the claim flow's, so two reads with no change in between
 *    agree (MET-4) and they agree with what a claim would see;
 *  - those three bodies are rendered once per change of what they show and then served from
 *    memory (PERF-1): each is kept with the key of the state it was rendered from
 *    (ApiViewKey: the sources' generation counters and the placement_disabled_reason), and a
 *    request whose key differs renders afresh, so a change is visible to the next request;
 *  - operator health routes answer only once their change is durable: the request is suspended
 *    until the health write that carries it completes (API-18, HEALTH-25);
 *  - every family of MET-2 is exported from start-up with its fixed label values (MET-3).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "claim/claim.h"
#include "config/config.h"
#include "ctrl/ctrl.h"
#include "fleet/fleet.h"
#include "gpu/gpu.h"
#include "health/health.h"
#include "http/http.h"
#include "instances/instances.h"
#include "metrics/metrics.h"
#include "nvml/nvml.h"
#include "placement/placement.h"
#include "storage/storage.h"
#include "worker/worker.h"

/* ---- the view of the daemon's state ---------------------------------------------------------- */

typedef struct ApiWaiter ApiWaiter;
typedef struct InstanceWaiter InstanceWaiter;
typedef struct ImageWaiter ImageWaiter;

/* ---- rendered bodies, kept until what they show changes (PERF-1) ---------------------------- */

/* The modules whose state the cached bodies show, each with its generation counter. */
typedef enum ApiSource {
        API_SOURCE_TRACKER,   /* gpu_tracker_generation() */
        API_SOURCE_HEALTH,    /* health_store_generation() */
        API_SOURCE_NVML,      /* nvml_client_cache_generation() */
        API_SOURCE_WORKERS,   /* worker_pool_generation() */
        API_SOURCE_CLAIMER,   /* claimer_generation() */
        API_SOURCE_INSTANCES, /* instance_manager_generation() */
        _API_SOURCE_MAX,
} ApiSource;

/*
 * What a body was rendered from: each source's identity and generation, and the
 * placement_disabled_reason text itself (api_placement_disabled_reason(), cheap to compute; it
 * covers the reconciler's scan error and the pool's accepting state as they are, with no
 * counter to forget). Two equal keys mean the same state, hence the same bytes.
 */
typedef struct ApiViewKey {
        const void *source[_API_SOURCE_MAX];
        uint64_t generation[_API_SOURCE_MAX];
        char *disabled_reason; /* NULL when placement is enabled */
        /* DISK-10: /resources' storage figures, compared as they are */
        bool storage_known;
        uint64_t storage_free, storage_images, storage_volumes, storage_instances_bytes;
} ApiViewKey;

typedef enum ApiBody {
        API_BODY_RESOURCES, /* /resources (API-4, API-5) */
        API_BODY_GPUS,      /* /gpus (API-6) */
        API_BODY_GAUGES,    /* the resource gauges at the head of /metrics (MET-2, MET-4) */
        _API_BODY_MAX,
} ApiBody;

typedef struct ApiCachedBody {
        bool valid;
        ApiViewKey key; /* read before the render, so a change during it shows next time */
        char *text;
        size_t size;
        uint64_t renders; /* renders so far (tests) */
} ApiCachedBody;

typedef struct ApiBodyCache {
        ApiCachedBody body[_API_BODY_MAX];
} ApiBodyCache;

typedef struct ApiContext {
        const Config *config;
        HealthStore *health;
        NvmlClient *nvml;
        WorkerPool *workers;        /* the sysfs pool: uncertain VFs (GEN-4), exhaustion */
        GpuTracker *tracker;        /* the host as last discovered, DISC-7's error */
        Reconciler *reconciler;     /* DEV-14's scan failure; NULL: none */
        Sentinel *sentinel;         /* the sentinel's counters (MET-2); NULL: zeros */
        Claimer *claimer;           /* reservations and claims (PLACE-21); NULL: none */
        InstanceManager *instances; /* the instances (INST); NULL: none (tests of reads) */
        ImageStore *images;         /* the image store (DISK-1, DISK-2); NULL: none (tests) */
        VolumeStore *volumes;       /* volumes (DISK-7); NULL: none (tests of reads) */
        HttpServer *http;           /* for vgpud_http_requests_total; NULL before the listeners */
        /* The Placement sync's figures (FLEET-5); NULL while placement.url is empty, and then
         * its families are not exported (the whole of SPEC §18 is off). */
        const FleetSyncStats *fleet;

        bool ready;    /* the first reconcile pass has run (API-17) */
        bool stopping; /* shutting down (OPS-3): mutations are refused */

        const char *version;
        const char *commit;

        /* Asks the daemon to repair the health store soon (HEALTH-21); never waits. */
        void (*schedule_repair)(void *userdata);
        void *userdata;

        /* Owned by this module: requests waiting for the health store to go idle. */
        ApiWaiter *waiters;
        unsigned n_suspended; /* requests suspended on health writes */
        /* Requests suspended on instance operations (INST-23); shutdown answers them 503. */
        InstanceWaiter *instance_waiters;
        /* Requests suspended on image operations (DISK-2, DISK-4); shutdown answers them 503. */
        ImageWaiter *image_waiters;
        /* The last rendered bodies (PERF-1); freed by api_context_done(). */
        ApiBodyCache cache;
} ApiContext;

/* The host as last discovered (DISC-7: kept when a later discovery fails); NULL before it. */
const GpuHost *api_host(const ApiContext *ctx);

/* API-21: the error code and HTTP status of a claim failure. */
const char *api_claim_failure_code(ClaimFailure f);
int api_claim_failure_status(ClaimFailure f);

/* The route table (API-2 without the instance routes of a later release); userdata is the
 * ApiContext. */
const HttpRoute *api_routes(size_t *ret_n);

/* The OpenAPI document served at /openapi.yaml (API-19), embedded at build time. */
extern const char api_openapi_yaml[];
extern const size_t api_openapi_yaml_size;

/*
 * placement_disabled_reason (API-5): the health store's unavailability (HEALTH-16), the
 * discovery error (DISC-7), the failed open-handle scan (DEV-14), or the exhausted sysfs
 * worker pool (GEN-4), in this order. 0 and *ret = NULL when placement is enabled.
 */
int api_placement_disabled_reason(const ApiContext *ctx, char **ret);

/*
 * The daemon calls this after every health write completes and whenever the store may have
 * become idle: requests that wait for durability of a change that needed no write of their own
 * are answered once no write is in flight or queued.
 */
void api_health_idle(ApiContext *ctx);

/* Answers every waiting request with 503 and forgets them (shutdown). */
void api_context_done(ApiContext *ctx);

/* ---- the snapshot behind /resources, /gpus and the gauges (MET-4) ---------------------------- */

typedef enum ApiVfState {
        API_VF_FREE,
        API_VF_RESERVED,
        API_VF_CLAIMED,
        API_VF_DIRTY,
        API_VF_QUARANTINED,
        API_VF_UNREADABLE,
        _API_VF_STATE_MAX,
} ApiVfState;

/* "free", "reserved", "claimed", "dirty", "quarantined", "unreadable" (API-6). */
const char *api_vf_state_to_string(ApiVfState s);

typedef struct ApiProfileFigure {
        const char *name; /* borrowed from the host */
        uint64_t framebuffer_mib;
        uint64_t available;
} ApiProfileFigure;

typedef struct ApiSnapshot {
        bool has_gpu; /* false: /resources answers {"gpu": null} */
        uint64_t total_slots, used_slots, allocatable_slots, quarantined_slots;
        ApiProfileFigure *profiles; /* sorted by name */
        size_t n_profiles;
        char *placement_disabled_reason; /* NULL when placement is enabled */
        char *placement_warning;         /* HEALTH-28; NULL while the breaker is closed */
        /* Per host VF, index as in host->vfs. */
        ApiVfState *vf_states;
        bool *vf_uncertain;
        size_t n_vfs;
        /* VFs by state for vgpud_resources_gpu_vfs: uncertain counts apart (MET-2). */
        uint64_t vfs_by_state[_API_VF_STATE_MAX];
        uint64_t vfs_uncertain;
        /* The placement view the figures come from; NULL before the first discovery. */
        PlacementView *view;
} ApiSnapshot;

int api_snapshot_build(const ApiContext *ctx, ApiSnapshot **ret);
ApiSnapshot *api_snapshot_free(ApiSnapshot *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(ApiSnapshot *, api_snapshot_free);
#define _cleanup_api_snapshot_ _cleanup_(api_snapshot_freep)

/* The /resources body (API-4, API-5). */
int api_resources_json(const ApiContext *ctx, const ApiSnapshot *snap, json_t **ret);
/* The /gpus body (API-6). */
int api_gpus_json(const ApiContext *ctx, const ApiSnapshot *snap, json_t **ret);
/* The /gpu/health body (API-10). */
int api_health_json(const ApiContext *ctx, json_t **ret);
/*
 * The /metrics exposition (MET-1, MET-2, MET-3) in two parts, written one after the other: the
 * resource gauges, from the snapshot alone (cached with /resources' key), and every other family,
 * from counters that move with each request and event (written fresh for each scrape).
 */
int api_metrics_gauges_text(const ApiSnapshot *snap, char **ret, size_t *ret_size);
int api_metrics_counters_text(const ApiContext *ctx, char **ret, size_t *ret_size);

/* ---- the body cache (api-cache.c) ------------------------------------------------------------ */

/* The key of the state as it is now. */
int api_view_key_read(const ApiContext *ctx, ApiViewKey *ret);
void api_view_key_done(ApiViewKey *k);
bool api_view_key_equal(const ApiViewKey *a, const ApiViewKey *b);

/* Renders a body from the state as it is now. */
typedef int (*ApiRenderFunc)(const ApiContext *ctx, char **ret, size_t *ret_size);

/*
 * The body of slot b for key (taken over, whatever the result): the kept bytes when the slot
 * was rendered at an equal key, else render()'s, kept with key. *ret stays valid until the next
 * call for b or api_body_cache_done().
 */
int api_body_cache_get(ApiBodyCache *c, ApiBody b, ApiViewKey *key, ApiRenderFunc render,
                       const ApiContext *ctx, const char **ret, size_t *ret_size);
void api_body_cache_done(ApiBodyCache *c);

/* A route's body, from ctx->cache, with the key of the state now and the route's renderer. */
int api_cached_body(ApiContext *ctx, ApiBody b, const char **ret, size_t *ret_size);
