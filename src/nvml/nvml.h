/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * nvml: the NVML client (SPEC §4, NVML-1..NVML-17).
 *
 * libnvidia-ml.so.1 is loaded at run time with dlopen (NVML-1); the few NVML types used are
 * declared here, with their LP64 layouts pinned by static assertions (NVML-3). Every library
 * call runs on the single NVML thread, a WorkerPool slot (NVML-9, GEN-3); nothing else calls
 * into the library.
 *
 * The loop talks to NVML through an NvmlClient, which it owns and attaches to its sd-event loop
 * like a WorkerPool (nvml_client_attach_event(): the NVML slot's source and the client's own). A
 * request names PFs and what to ask about each; the answer comes back on the loop, exactly once,
 * through the request's callback, and never synchronously from nvml_client_query(). Before the
 * callback runs the client folds the answer into its state: modes, the fallback state of each
 * GPU and of the host (NVML-11), the fallback counters (NVML-12), the log lines of NVML-13, and
 * the placement cache (NVML-14, NVML-15: an entry is replaced only by an answer whose query
 * started later).
 *
 * The client also runs the cache refresher (NVML-14, NVML-15): refreshes are coalesced, one
 * runs at a time, and any number of requests while it runs cause exactly one more run.
 *
 * Promises:
 *  - functions return >= 0 or -errno; out-parameters are written only on success;
 *  - the placement list goes out as v2 until the library has answered one; a library that
 *    refuses v2 (R550, R560) is asked once with v1, and the version that answered is kept for
 *    the library's lifetime and logged once; only both refused fall back the host (NVML-3a);
 *  - an NVML hang costs one `timeout`: requests behind it fail with `stuck` at once, new ones
 *    fail with `stuck` without entering the library until the call returns (NVML-10);
 *  - nvmlShutdown runs at nvml_client_free() unless the NVML thread is stuck (NVML-17).
 */

#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "worker/worker.h"

/* ---- NVML declarations (NVML-3, NVML-5) ------------------------------------------------------ */

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef unsigned int nvmlVgpuTypeId_t;

enum {
        NVML_SUCCESS = 0,
        NVML_ERROR_UNINITIALIZED = 1,
        NVML_ERROR_INVALID_ARGUMENT = 2,
        NVML_ERROR_NOT_SUPPORTED = 3,
        NVML_ERROR_NO_PERMISSION = 4,
        NVML_ERROR_NOT_FOUND = 6,
        NVML_ERROR_INSUFFICIENT_SIZE = 7,
        NVML_ERROR_DRIVER_NOT_LOADED = 9,
        NVML_ERROR_TIMEOUT = 10,
        NVML_ERROR_LIBRARY_NOT_FOUND = 12,
        NVML_ERROR_FUNCTION_NOT_FOUND = 13,
        NVML_ERROR_GPU_IS_LOST = 15,
        NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
        NVML_ERROR_IN_USE = 19,
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
        NVML_ERROR_GPU_NOT_FOUND = 28,
        NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlVgpuHeterogeneousMode_v1_t {
        unsigned int version;
        unsigned int mode; /* out: 1 = enabled (mixed-size), 0 = disabled (equal-size) */
} nvmlVgpuHeterogeneousMode_v1_t;

typedef struct nvmlVgpuPlacementList_v2_t {
        unsigned int version;
        unsigned int placementSize; /* out */
        unsigned int count;         /* in: capacity of placementIds; out: entries filled */
        unsigned int *placementIds;
        unsigned int mode; /* in: NVML_VGPU_PGPU_HETEROGENEOUS_MODE */
} nvmlVgpuPlacementList_v2_t;

/*
 * The only list NVML 12.4-12.6 (drivers R550, R560) knows (NVML-3a): no `mode` input, and
 * creatable placements are listed only on a mixed-size GPU.
 */
typedef struct nvmlVgpuPlacementList_v1_t {
        unsigned int version;
        unsigned int placementSize; /* out */
        unsigned int count;         /* in: capacity of placementIds; out: entries filled */
        unsigned int *placementIds;
} nvmlVgpuPlacementList_v1_t;

#define NVML_STRUCT_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((unsigned int)(ver) << 24)))
#define NVML_VGPU_HETEROGENEOUS_MODE_V1 NVML_STRUCT_VERSION(nvmlVgpuHeterogeneousMode_v1_t, 1)
#define NVML_VGPU_PLACEMENT_LIST_V2 NVML_STRUCT_VERSION(nvmlVgpuPlacementList_v2_t, 2)
#define NVML_VGPU_PLACEMENT_LIST_V1 NVML_STRUCT_VERSION(nvmlVgpuPlacementList_v1_t, 1)

/* The placement list's mode input; not the mode query's 0/1 output (NVML-7). */
#define NVML_VGPU_PGPU_HETEROGENEOUS_MODE 0u

#if defined(__LP64__)
static_assert(sizeof(nvmlVgpuHeterogeneousMode_v1_t) == 8, "NVML-3: heterogeneous mode layout");
static_assert(NVML_VGPU_HETEROGENEOUS_MODE_V1 == 0x01000008u, "NVML-3: mode version word");
static_assert(sizeof(nvmlVgpuPlacementList_v2_t) == 32, "NVML-3: placement list layout");
static_assert(offsetof(nvmlVgpuPlacementList_v2_t, count) == 8, "NVML-3: placement list layout");
static_assert(offsetof(nvmlVgpuPlacementList_v2_t, placementIds) == 16,
              "NVML-3: padding before the pointer");
static_assert(offsetof(nvmlVgpuPlacementList_v2_t, mode) == 24, "NVML-3: placement list layout");
static_assert(NVML_VGPU_PLACEMENT_LIST_V2 == 0x02000020u, "NVML-3: placement list version word");
static_assert(sizeof(nvmlVgpuPlacementList_v1_t) == 24, "NVML-3: placement list v1 layout");
static_assert(offsetof(nvmlVgpuPlacementList_v1_t, count) == 8, "NVML-3: placement list v1 layout");
static_assert(offsetof(nvmlVgpuPlacementList_v1_t, placementIds) == 16,
              "NVML-3: placement list v1: padding before the pointer");
static_assert(NVML_VGPU_PLACEMENT_LIST_V1 == 0x01000018u, "NVML-3: placement list v1 version word");
#endif

#define NVML_TYPE_NAME_SIZE 64   /* NVML-8: names use 64-byte buffers */
#define NVML_DEVICE_NAME_SIZE 96 /* nvmlDeviceGetName: room for the longest device names */
#define NVML_DRIVER_VERSION_SIZE 80
#define NVML_MAX_TYPES 1024      /* NVML-8: supported types per GPU */
#define NVML_MAX_PLACEMENTS 1024 /* NVML-8: placement ID buffer */

/* NVML-5: "SUCCESS", "GPU_IS_LOST", ..., else "NVML error <n>". buf holds the latter. */
#define NVML_RETURN_NAME_MAX 32
const char *nvml_return_name(nvmlReturn_t r, char buf[static NVML_RETURN_NAME_MAX]);

/*
 * An NVML return code as -errno: NOT_SUPPORTED -EOPNOTSUPP, INSUFFICIENT_SIZE -ENOBUFS,
 * ARGUMENT_VERSION_MISMATCH -EPROTO, GPU_IS_LOST / GPU_NOT_FOUND / NOT_FOUND -ENODEV,
 * NO_PERMISSION -EPERM, INVALID_ARGUMENT -EINVAL, anything else -EIO; SUCCESS 0.
 */
int nvml_return_to_errno(nvmlReturn_t r);

/* ---- modes and fallback (NVML-7, NVML-11) ---------------------------------------------------- */

typedef enum NvmlMode {
        NVML_MODE_UNKNOWN,
        NVML_MODE_EQUAL,
        NVML_MODE_MIXED,
} NvmlMode;

/* "unknown", "equal", "mixed" (API-6, NVML-13). */
const char *nvml_mode_to_string(NvmlMode m);

typedef enum NvmlFallback {
        NVML_FALLBACK_NONE, /* NVML answers */
        NVML_FALLBACK_EQUAL_SIZE,
        NVML_FALLBACK_ERROR,
        NVML_FALLBACK_UNAVAILABLE,
        NVML_FALLBACK_TIMEOUT,
        NVML_FALLBACK_STUCK,
        _NVML_FALLBACK_MAX,
} NvmlFallback;

/* "ok", "equal_size", "error", "unavailable", "timeout", "stuck" (API-6, MET-2). */
const char *nvml_fallback_to_string(NvmlFallback f);

/* vgpud_resources_gpu_nvml_fallbacks_total{reason} (NVML-12); index NVML_FALLBACK_NONE unused. */
typedef struct NvmlFallbackCounters {
        uint64_t total[_NVML_FALLBACK_MAX];
} NvmlFallbackCounters;

/* ---- requests and answers -------------------------------------------------------------------- */

typedef struct NvmlGpuRequest {
        char pf[PCI_ADDRESS_STRLEN];
        bool query_mode;    /* re-query the mode first (NVML-7) */
        bool query_catalog; /* device name, supported types, names, sizes, max instances */
        bool query_placements;
        /*
         * Placement queries: with query_catalog, every catalog type (with fresh maximum
         * instances); otherwise these types, with the maximum instances cached at the last
         * refresh (NVML-8).
         */
        nvmlVgpuTypeId_t *types;
        unsigned *max_instances;
        size_t n_types;
} NvmlGpuRequest;

typedef struct NvmlRequest {
        bool init; /* initialise NVML first when it is not (NVML-2); else such a request fails */
        NvmlGpuRequest *gpus;
        size_t n_gpus;
} NvmlRequest;

typedef struct NvmlTypeInfo {
        nvmlVgpuTypeId_t type_id;
        char *name;
        uint64_t framebuffer_bytes;
        unsigned max_instances; /* 0 when the query failed */
} NvmlTypeInfo;

typedef struct NvmlPlacements {
        nvmlVgpuTypeId_t type_id;
        nsec_t started; /* when this query started, by the client's clock (PLACE-7) */
        uint64_t seq;   /* start order: a query that started later has a larger value (NVML-15) */
        unsigned count; /* free placements; 0 for NOT_SUPPORTED on a mixed-size GPU */
        unsigned placement_size;
} NvmlPlacements;

typedef struct NvmlGpuAnswer {
        char pf[PCI_ADDRESS_STRLEN];
        NvmlFallback fallback; /* NONE, EQUAL_SIZE or ERROR */
        char *error;           /* with ERROR: which call failed and how */
        NvmlMode mode;         /* as read in this request; UNKNOWN when not read */
        char *name;            /* with query_catalog */
        NvmlTypeInfo *catalog;
        size_t n_catalog;
        bool has_catalog;
        NvmlPlacements *placements; /* with fallback NONE */
        size_t n_placements;
} NvmlGpuAnswer;

typedef struct NvmlAnswer {
        NvmlFallback host_fallback; /* NONE, or UNAVAILABLE, TIMEOUT, STUCK for the whole host */
        char *host_error;
        nsec_t started; /* when the request entered the library (0 if it never did) */
        /* The placement list version this library accepts (NVML-3a); 0 while none has. */
        unsigned placement_list_version;
        NvmlGpuAnswer *gpus; /* one per requested GPU, in request order; NULL on host fallback */
        size_t n_gpus;
} NvmlAnswer;

const NvmlGpuAnswer *nvml_answer_find_gpu(const NvmlAnswer *a, const char *pf);
const NvmlPlacements *nvml_gpu_answer_find_placements(const NvmlGpuAnswer *g,
                                                      nvmlVgpuTypeId_t type_id);

/* ---- the client ------------------------------------------------------------------------------ */

typedef struct NvmlClient NvmlClient;

typedef struct NvmlClientConfig {
        const char *library;    /* nvml_library: name or path; NULL or "" disables NVML */
        nsec_t timeout;         /* gpu.nvml_timeout (NVML-9) */
        const MonoClock *clock; /* NULL for mono_clock_system */
        /* Called on the loop after each refresh has been folded into the cache. May be NULL. */
        void (*refreshed)(NvmlClient *c, void *userdata);
        void *userdata;
} NvmlClientConfig;

/* Starts the NVML thread; loads nothing yet (that is the first request with init). */
int nvml_client_new(const NvmlClientConfig *config, NvmlClient **ret);

/*
 * Shuts NVML down on its thread (nvmlShutdown, waiting at most the timeout) unless the thread is
 * stuck, then stops the thread (NVML-17). Pending callbacks do not run. Returns NULL.
 */
NvmlClient *nvml_client_free(NvmlClient *c);
DEFINE_TRIVIAL_CLEANUP_FUNC(NvmlClient *, nvml_client_free);
#define _cleanup_nvml_client_ _cleanup_(nvml_client_freep)

/*
 * Adds the client's sources to event (NULL: sd_event_default()): its NVML slot's and one for the
 * answers decided on the loop (a refused request, NVML disabled). -EBUSY when attached already;
 * nvml_client_free() removes them.
 */
int nvml_client_attach_event(NvmlClient *c, sd_event *event);

/*
 * One turn of those sources: ends requests past their deadline and runs ready callbacks; returns
 * how many ran. Owners leave this to the loop; only a test with an injected clock calls it,
 * right after moving the clock (the loop cannot see such a clock move).
 */
int nvml_client_dispatch(NvmlClient *c);

typedef void (*NvmlAnswerFunc)(NvmlClient *c, const NvmlAnswer *a, void *userdata);

/*
 * Queues a request (copied). Its callback runs later on the loop with the answer, which is valid
 * only during the call. Fails only for invalid requests (-EINVAL) and ENOMEM.
 */
int nvml_client_query(NvmlClient *c, const NvmlRequest *req, NvmlAnswerFunc done, void *userdata);

/*
 * Asks for a cache refresh of the GPUs set with nvml_client_set_gpus() (NVML-14): mode,
 * catalog, maximum instances and placements of every catalog type. Coalesced (NVML-15). init
 * also (re)tries initialisation when NVML is not initialised: pass it at start-up and on
 * reconcile passes (NVML-2).
 */
int nvml_client_request_refresh(NvmlClient *c, bool init);
bool nvml_client_refresh_is_running(NvmlClient *c);

/* The PFs the cache covers; entries of PFs not listed are dropped. */
int nvml_client_set_gpus(NvmlClient *c, char *const *pfs, size_t n);

/*
 * Fills a claim-time request for one GPU (PLACE-9): placements of the given types with the
 * cached maximum instances, and a mode query when the cached mode is unknown or the GPU's last
 * placement call failed (NVML-7). -ENOENT for a GPU the cache does not know. The result's arrays
 * are malloc'd; free them with nvml_gpu_request_done().
 */
int nvml_client_prepare_gpu_request(NvmlClient *c, const char *pf, const nvmlVgpuTypeId_t *types,
                                    size_t n_types, NvmlGpuRequest *ret);
void nvml_gpu_request_done(NvmlGpuRequest *r);

/* ---- what the loop reads (never waits) ------------------------------------------------------- */

bool nvml_client_is_initialised(NvmlClient *c);
const char *nvml_client_get_driver_version(NvmlClient *c); /* NULL before initialisation */

/* The host's fallback state: NONE, UNAVAILABLE, TIMEOUT or STUCK, with its error text. */
NvmlFallback nvml_client_get_host_fallback(NvmlClient *c, const char **ret_error);

/*
 * A GPU's effective fallback: the host's when the host falls back, else the GPU's own; a GPU not
 * yet answered for is UNAVAILABLE. ret_error may be NULL.
 */
NvmlFallback nvml_client_get_gpu_fallback(NvmlClient *c, const char *pf, const char **ret_error);

/* The cached mode; UNKNOWN while NVML cannot tell (host fallback, never read). */
NvmlMode nvml_client_get_gpu_mode(NvmlClient *c, const char *pf);

/* The device name and catalog from the last refresh: -ENOENT when there is none. */
int nvml_client_get_gpu_name(NvmlClient *c, const char *pf, const char **ret);
int nvml_client_get_gpu_catalog(NvmlClient *c, const char *pf, const NvmlTypeInfo **ret,
                                size_t *ret_n);

/* Cached free placements (NVML-14): -ENOENT when none is cached for (pf, type). */
int nvml_client_get_cached_placements(NvmlClient *c, const char *pf, nvmlVgpuTypeId_t type_id,
                                      NvmlPlacements *ret);

const NvmlFallbackCounters *nvml_client_get_counters(NvmlClient *c);

/*
 * Moves on (monotonically) with every answer folded into the cache and every change of the
 * GPUs it covers: whatever the reads above show may have changed then (modes, fallbacks,
 * catalogs, cached placements). The API keeps its rendered bodies until it moves (PERF-1).
 */
uint64_t nvml_client_cache_generation(const NvmlClient *c);

/* ---- discovery's NVML seam (DISC-15, DISC-17, DISC-18) --------------------------------------- */

struct GpuNvml;

/*
 * Fills discovery's seam (gpu.h) with answers from the cache, so discovery never waits on NVML:
 * a GPU is usable while the host does not fall back, its last refresh brought a catalog and its
 * state is not `error` (equal-size GPUs stay usable: DISC-18 uses NVML's catalog in either mode).
 * The seam borrows c, which must outlive it. Built only together with the gpu module.
 */
void nvml_client_fill_gpu_seam(NvmlClient *c, struct GpuNvml *ret);
