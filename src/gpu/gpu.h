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
 *    success; failures that SPEC gives a text for store that exact text in *error;
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

typedef struct GpuProfile {
        char *name;               /* "NVIDIA L40S-2Q": 1..127 printable ASCII bytes */
        uint32_t type_id;         /* vendor-VFIO and NVML: card-local type ID; 0 for mdev */
        char *mdev_type;          /* mdev: the type directory ("nvidia-901"); else NULL */
        uint64_t framebuffer_mib; /* 0 means unknown */
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
static inline void gpu_nvml_snapshot_freep(GpuNvmlSnapshot **s)
{
        gpu_nvml_snapshot_free(*s);
}
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
static inline void gpu_host_freep(GpuHost **h)
{
        gpu_host_free(*h);
}
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
