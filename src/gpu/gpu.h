/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * gpu: what the host offers (SPEC §1, DISC-1..DISC-22).
 *
 * Discovery reads a sysfs tree through a Root and returns a GpuHost: the framework the host
 * uses, its GPUs (PFs) with their profile catalogs, its VFs sorted by PCI address, and the
 * active mdevs. It never writes to the tree, and it never calls NVML itself: NVML answers
 * come through the GpuNvml seam, which may be NULL.
 *
 * Promises:
 *  - functions return >= 0 on success and -errno on failure; out-parameters are written only on
 *    success; a function that takes `char **error` sets it on every failure (`out of memory`
 *    included), and failures that SPEC gives a text for store that exact text;
 *  - every file read from the tree is bounded (a larger file is an error, never truncated);
 *  - a type ID is only ever looked up in the catalog of the GPU that reported it (DISC-19);
 *  - warnings (skipped entries, NVML answers not used) are logged once, as they happen, as
 *    "<4>message key=value ...", and kept in GpuHost.warnings as "message: detail".
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "sysfs/sysfs.h"
#include "worker/worker.h"

/* ---- frameworks (DISC-1, DISC-22) ---------------------------------------------------------- */

typedef enum GpuFramework {
        GPU_FRAMEWORK_NONE,        /* no vGPU on this host */
        GPU_FRAMEWORK_MDEV,        /* mediated devices created on each VF */
        GPU_FRAMEWORK_VENDOR_VFIO, /* NVIDIA's per-VF nvidia/current_vgpu_type */
} GpuFramework;

/* "none", "mdev" or "vendor-vfio". */
const char *gpu_framework_to_string(GpuFramework f);

/*
 * The framework recorded in a claim: "mdev" or "vendor-vfio". Anything else (including "none",
 * which no claim can carry) fails with -EINVAL and `unknown vGPU framework "<f>"`.
 */
int gpu_framework_from_string(const char *s, GpuFramework *ret, char **error);

/* ---- profiles ------------------------------------------------------------------------------ */

/* Upper bounds of what discovery reads from one file. */
#define GPU_CREATABLE_TYPES_MAX ((size_t)64 * 1024) /* DISC-13 */
#define GPU_CURRENT_TYPE_MAX ((size_t)16)           /* DISC-5 */
#define GPU_ATTR_MAX ((size_t)4096)                 /* name, description, device */
#define GPU_PROFILE_NAME_MAX ((size_t)127)          /* DISC-13 */
#define GPU_MDEV_AVAILABLE_MAX ((size_t)32)         /* available_instances (PLACE-6) */
#define GPU_DRIVER_VERSION_MAX ((size_t)256)        /* module/nvidia/version (HEALTH-30) */

typedef struct GpuProfile {
        char *name;               /* "NVIDIA L40S-2Q": 1..127 printable ASCII bytes */
        uint32_t type_id;         /* vendor-VFIO and NVML: card-local type ID; 0 for mdev */
        char *mdev_type;          /* mdev: the type directory ("nvidia-901"); else NULL */
        uint64_t framebuffer_mib; /* 0 means unknown */
        /*
         * An mdev VF's supported type: its available_instances as discovery read it (PLACE-6);
         * an unreadable or malformed value reads 0 (fail closed). 0 everywhere else.
         */
        uint32_t available_instances;
} GpuProfile;

void gpu_profiles_free(GpuProfile *profiles, size_t n);

/*
 * Parses the driver's creatable_vgpu_types table (DISC-10..DISC-13): an "ID : vGPU Name"
 * header and one "<type id> : <name>" line per creatable type. A header-only or empty file is an
 * empty list (a full card). Each profile's framebuffer comes from its name (DISC-14). The
 * result keeps the file's order. More than GPU_CREATABLE_TYPES_MAX bytes fail with -EFBIG;
 * malformed content fails with -EINVAL and the DISC-11/DISC-12 text.
 */
int gpu_parse_creatable_types(const char *buf, size_t size, GpuProfile **ret, size_t *ret_n,
                              char **error);

/*
 * Parses nvidia/current_vgpu_type (DISC-5): decimal digits, at most one trailing newline, at
 * most GPU_CURRENT_TYPE_MAX bytes (-EFBIG beyond). 0 means not configured. Anything else
 * fails with -EINVAL and `invalid current vGPU type "<v>"`.
 */
int gpu_parse_current_type(const char *buf, size_t size, uint32_t *ret, char **error);

/*
 * Reads a vendor VF's nvidia/current_vgpu_type (DISC-5) through the root. Fails with the text
 * discovery gives an unreadable VF: `read current vGPU type: <err>` or the parser's.
 */
int gpu_read_current_type(const Root *sysfs, const char *vf, uint32_t *ret, char **error);

/*
 * Framebuffer size in MiB from a profile name (DISC-14): "<...>-<N><A|B|C|Q>..." gives
 * N × 1024. 0 when the name has another shape.
 */
uint64_t gpu_profile_framebuffer_mib(const char *name);

/* Framebuffer size in MiB from an mdev type description (DISC-16), 0 when it has none. */
uint64_t gpu_mdev_description_framebuffer_mib(const char *description);

/*
 * The model part of a profile name (DISC-17): the text before its last "-"
 * ("NVIDIA L40S-2Q" gives "NVIDIA L40S"). -EINVAL when that text would be empty.
 */
int gpu_profile_model(const char *name, char **ret);

/* Checks a profile name against DISC-13: 1..127 bytes of printable ASCII. */
bool gpu_profile_name_is_valid(const char *name);

/* ---- the NVML seam (DISC-15, DISC-17, DISC-18) --------------------------------------------- */

typedef struct GpuNvmlType {
        uint32_t type_id;
        char *name;
        uint64_t framebuffer_bytes; /* nvmlVgpuTypeGetFramebufferSize */
} GpuNvmlType;

void gpu_nvml_types_free(GpuNvmlType *types, size_t n);

/*
 * What discovery asks NVML, per PF address. Discovery calls these synchronously. A NULL
 * GpuNvml, a usable() answer <= 0, or a failure of one of the other calls puts that GPU on
 * the sysfs branch: model from its profile names, catalog from its VFs' lists. Answers are
 * validated like sysfs input: a bad one is logged and ignored.
 */
typedef struct GpuNvml {
        void *userdata;
        /* > 0 when NVML can answer for the GPU, 0 when it cannot, -errno on failure. */
        int (*usable)(void *userdata, const char *pf);
        /* The device name (nvmlDeviceGetName), malloc'd. */
        int (*device_name)(void *userdata, const char *pf, char **ret);
        /* The supported vGPU types, a malloc'd array freed with gpu_nvml_types_free(). */
        int (*supported_types)(void *userdata, const char *pf, GpuNvmlType **ret, size_t *ret_n);
} GpuNvml;

/*
 * A copy of what a seam answers for a list of PFs, taken where the live seam may be called
 * (the NVML client's seam: its loop thread) so that discovery can run on another thread.
 * Nothing is shared with the live seam afterwards, and answering only reads the copy, so any
 * thread may use it until it is freed.
 *
 * The copy keeps the discovery branch each GPU would take, not every error code: a PF outside
 * the list, or any PF when live is NULL, is not usable; usable() answers are kept as they were
 * (errors included); a GPU whose device name could not be copied answers -ENOENT for it; one
 * whose supported types could not be copied (or a seam without that call) is not usable, so
 * it takes the sysfs branch whole.
 */
typedef struct GpuNvmlSnapshot GpuNvmlSnapshot;

int gpu_nvml_snapshot_new(const GpuNvml *live, char *const *pfs, size_t n_pfs,
                          GpuNvmlSnapshot **ret);
GpuNvmlSnapshot *gpu_nvml_snapshot_free(GpuNvmlSnapshot *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(GpuNvmlSnapshot *, gpu_nvml_snapshot_free);
#define _cleanup_gpu_nvml_snapshot_ _cleanup_(gpu_nvml_snapshot_freep)

/* A seam answering from the copy; it borrows s, which must outlive it. */
void gpu_nvml_snapshot_seam(GpuNvmlSnapshot *s, GpuNvml *ret);

/* ---- the host inventory -------------------------------------------------------------------- */

typedef enum GpuCatalogSource {
        GPU_CATALOG_SYSFS, /* union of the VFs' lists: shrinks as the card fills (DISC-18) */
        GPU_CATALOG_NVML,  /* NVML's supported types: complete */
} GpuCatalogSource;

typedef struct Gpu {
        char address[PCI_ADDRESS_STRLEN]; /* the PF */
        uint16_t device_id;               /* from the PF's "device" file; 0 when unknown */
        char *model;                      /* DISC-17 */
        GpuCatalogSource catalog_source;
        GpuProfile *catalog; /* DISC-18: sorted by type ID (mdev: by type directory) */
        size_t n_catalog;
} Gpu;

typedef struct GpuVf {
        char address[PCI_ADDRESS_STRLEN];
        char parent[PCI_ADDRESS_STRLEN]; /* the PF (DISC-8); "" when it could not be read */
        char *error;              /* non-NULL: the VF is unreadable (DISC-6), and this says why */
        uint32_t current_type_id; /* vendor-VFIO: DISC-5; 0 = free */
        char **mdev_uuids;        /* mdev: the active mdevs on this VF (NULL when none) */
        char *current_profile;    /* the configured profile's name; NULL when free or unknown */
        /*
         * vendor-VFIO: the creatable list as read now (types may hide as the card fills);
         * mdev: every supported type of the VF.
         */
        GpuProfile *creatable;
        size_t n_creatable;
} GpuVf;

typedef struct GpuMdev {
        char *uuid;
        char vf[PCI_ADDRESS_STRLEN]; /* the parent VF (DISC-9) */
        char *mdev_type;             /* "nvidia-901" */
        char *profile;               /* the type's name on that VF, else the type string */
} GpuMdev;

typedef struct GpuHost {
        GpuFramework framework;
        Gpu *gpus; /* sorted by address */
        size_t n_gpus;
        GpuVf *vfs; /* sorted by address, readable and unreadable alike */
        size_t n_vfs;
        GpuMdev *mdevs; /* sorted by UUID */
        size_t n_mdevs;
        char **warnings; /* "message: detail" of each warning logged; NULL when none */
} GpuHost;

GpuHost *gpu_host_free(GpuHost *h);
DEFINE_TRIVIAL_CLEANUP_FUNC(GpuHost *, gpu_host_free);
#define _cleanup_gpu_host_ _cleanup_(gpu_host_freep)

/*
 * Discovers the host (DISC-1..DISC-14, DISC-16..DISC-19): mdev detection first, then vendor
 * VFIO detection when no mdev VF exists. A host without either is GPU_FRAMEWORK_NONE, which is
 * success. Failures carry the SPEC texts `discover mdev VFs: <err>` and
 * `discover vendor VFIO VFs: <err>`; they never mean "no vGPU host" (DISC-7).
 */
int gpu_discover(const Root *sysfs, const GpuNvml *nvml, GpuHost **ret, char **error);

static inline bool gpu_vf_is_readable(const GpuVf *vf)
{
        return !vf->error;
}

/* A configured VF holds a non-zero type or carries an mdev (SPEC §0.2). */
static inline bool gpu_vf_is_configured(const GpuVf *vf)
{
        return vf->current_type_id != 0 || vf->mdev_uuids;
}

/* By address; NULL when h (which may be NULL) has none. */
const Gpu *gpu_host_find_gpu(const GpuHost *h, const char *address);
const GpuVf *gpu_host_find_vf(const GpuHost *h, const char *address);

/*
 * Profile name → profile, from this GPU's own catalog only (DISC-19). NULL when the GPU does
 * not resolve the name, which makes it no candidate for that profile.
 */
const GpuProfile *gpu_find_profile(const Gpu *g, const char *name);
const GpuProfile *gpu_find_profile_by_type_id(const Gpu *g, uint32_t type_id);

/*
 * A model's catalog (DISC-18): the union by name of the catalogs of the host's GPUs of that
 * model, sorted by name. Type IDs are card-local, so the union carries none (type_id 0);
 * resolve them per GPU with gpu_find_profile().
 */
int gpu_host_model_catalog(const GpuHost *h, const char *model, GpuProfile **ret, size_t *ret_n);

/* ---- the one picture of the host (ARCHITECTURE.md decision 3) ------------------------------- */

/*
 * A GpuTracker keeps the host's one GpuHost current: the reconciler's passes and every claim
 * (DISC-20) ask it to discover, so /resources, /gpus, metrics and claims all read the same
 * table. Discovery jobs run on the sysfs worker pool with a deadline (GEN-4); results are folded
 * in on the owner's thread (the loop), where every function here is called.
 *
 * Two kinds of run, which never overlap:
 *  - a full discovery (gpu_discover's steps, the driver version of HEALTH-30): a listing job
 *    (the directory walks), one job per VF, one job for the GPUs. On success the host is
 *    replaced; on failure the last host is kept and gpu_tracker_error() carries the failure
 *    (`discover mdev VFs: <err>`, `discover vendor VFIO VFs: <err>`, `discover GPUs: <err>` for
 *    a listing or GPUs job that timed out, or the pool's GEN-4 text when a job could not
 *    start) until a full discovery succeeds (DISC-7);
 *  - a re-read of every readable VF's current_vgpu_type (DISC-5), one job per VF: what a claim
 *    deciding on NVML placements needs (VFs only appear or vanish through an SR-IOV cycle,
 *    which needs vgpud stopped, OPS-10). A VF that cannot be re-read becomes unreadable
 *    (DISC-6). Without a host yet, a re-read is a full discovery.
 * A VF's job is keyed by its address, so a VF read stuck past the deadline makes that VF
 * uncertain alone (GEN-4) and the run goes on without it: the VF keeps its state from the last
 * table (a VF the last table lacks is unreadable with `timed out after <d>` on a vendor-VFIO
 * host, and left out on an mdev host), the pool's uncertain key keeps every placement off it,
 * and a VF still uncertain at a later run is not read again until its call returns. A VF job
 * that expired unrun (nothing stuck) makes the VF unreadable until a later run reads it.
 * A request made while a run is in flight waits for the next run (which starts after it, so it
 * sees every change made before the request); requests waiting together share one run, and a
 * full run answers the re-reads waiting with it. done() runs once per request, later, on the
 * owner's thread, after the result is folded in.
 *
 * Full discoveries copy the live NVML seam's answers on the loop for the GPUs of the current
 * host (a GPU found for the first time takes the sysfs branch until the next discovery).
 */
#define GPU_TRACKER_TIMEOUT_DEFAULT (30 * NSEC_PER_SEC) /* gpu.sysfs_timeout */

typedef struct GpuTracker GpuTracker;

typedef struct GpuTrackerConfig {
        const Root *sysfs;   /* duplicated */
        WorkerPool *pool;    /* the sysfs pool (borrowed); free it before the tracker */
        const GpuNvml *nvml; /* the live seam (copied); NULL: every GPU on the sysfs branch */
        nsec_t timeout;      /* per job; 0 for GPU_TRACKER_TIMEOUT_DEFAULT */
} GpuTrackerConfig;

/* r >= 0 when the run succeeded (error is NULL); else r < 0 and error, never NULL, says why. */
typedef void (*GpuTrackerDone)(int r, const char *error, void *userdata);

typedef struct GpuTrackerStats {
        uint64_t discoveries; /* full runs started */
        uint64_t rereads;     /* re-read runs started */
} GpuTrackerStats;

int gpu_tracker_new(const GpuTrackerConfig *config, GpuTracker **ret);
GpuTracker *gpu_tracker_free(GpuTracker *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(GpuTracker *, gpu_tracker_free);

/*
 * Request a full discovery / a re-read of the VFs' types: 0 once started or queued. When the
 * tracker is idle and the run cannot start (GEN-4's exhausted pool, ENOMEM), the request fails
 * here with *error (a full one also sets gpu_tracker_error()) and done() never runs; a queued
 * request whose run cannot start later gets done() with the failure.
 */
int gpu_tracker_discover(GpuTracker *t, GpuTrackerDone done, void *userdata, char **error);
int gpu_tracker_reread_types(GpuTracker *t, GpuTrackerDone done, void *userdata, char **error);

/* Forgets the callbacks of every request made with userdata (its owner is going away). */
void gpu_tracker_cancel(GpuTracker *t, void *userdata);

/* A run is in flight or waiting. */
bool gpu_tracker_is_busy(const GpuTracker *t);

/* The host as last discovered (borrowed; NULL before the first successful discovery). */
const GpuHost *gpu_tracker_host(const GpuTracker *t);
/* DISC-7's placement_disabled_reason text, NULL while the last full discovery succeeded. */
const char *gpu_tracker_error(const GpuTracker *t);
/*
 * Moves on (monotonically) whenever what gpu_tracker_host() or gpu_tracker_error() shows may
 * have changed: a new table, a re-read VF's type or its unreadable state, the DISC-7 error. The
 * API keeps its rendered bodies until this (and the other sources' counters) moves (PERF-1).
 */
uint64_t gpu_tracker_generation(const GpuTracker *t);
/* module/nvidia/version as last read (HEALTH-30), NULL when never read. */
const char *gpu_tracker_driver_version(const GpuTracker *t);
const GpuTrackerStats *gpu_tracker_get_stats(const GpuTracker *t);
