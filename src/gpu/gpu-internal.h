/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * gpu-internal: discovery in steps, for the tracker (tracker.c), which runs each step that
 * touches the tree as its own job on the sysfs pool, so that one hung VF read makes that VF
 * uncertain alone instead of timing out the whole discovery (GEN-4):
 *
 *   1. gpu_listing_new(): the directory walks: mdev detection's class/mdev_bus and each
 *      entry's types directory (DISC-1..DISC-3), the active mdevs' links (DISC-9), or vendor
 *      detection's bus/pci/devices with DISC-4's classification. One job.
 *   2. gpu_read_listed_vf(): one VF's own files: physfn, current_vgpu_type and
 *      creatable_vgpu_types (DISC-5, DISC-6, DISC-8, DISC-10..DISC-13); mdev: physfn and its
 *      supported types (DISC-3, DISC-16). One job per VF, keyed by its address.
 *   3. gpu_host_assemble(): no I/O: the VF table from the readings, with DISC-3's and DISC-6's
 *      rules, VFs whose read never ended (unsettled) as the previous table had them, and the
 *      active mdevs on their VFs (DISC-9's profile names from the VFs' own type lists).
 *   4. gpu_host_finish(): the GPUs: each PF's device file (DISC-8), catalogs and models
 *      (DISC-15, DISC-17..DISC-19), then the VFs' current profiles. One job.
 *
 * gpu_discover() is the four in a row on the calling thread. Error texts are discovery's
 * (gpu.h): a step's failure carries `discover mdev VFs: <err>`, `discover vendor VFIO VFs:
 * <err>` or `discover GPUs: <err>`.
 */

#include "gpu.h"

/* One VF the walks found, with what reading it takes. */
typedef struct GpuListedVf {
        char address[PCI_ADDRESS_STRLEN];
        char **mdev_types; /* mdev: the entry's supported types (DISC-2); NULL for vendor VFIO */
        /*
         * mdev: the entry's types directory could not be listed (DISC-3): there is nothing to
         * read, and the entry counts as unreadable when the table is assembled.
         */
        char *error;
        int error_r;
} GpuListedVf;

typedef struct GpuListing {
        /* MDEV or VENDOR_VFIO: how the VFs are read; NONE when no VF was listed. */
        GpuFramework framework;
        GpuListedVf *vfs; /* in listing order */
        size_t n_vfs;
        size_t n_mdev_entries; /* mdev: entries with a valid address, typeless ones too (DISC-3) */
        /* The host so far: the active mdevs (profile not named yet) and the walks' warnings. */
        GpuHost *host;
} GpuListing;

GpuListing *gpu_listing_free(GpuListing *l);
DEFINE_TRIVIAL_CLEANUP_FUNC(GpuListing *, gpu_listing_free);

/* Step 1. Fails with `discover mdev VFs: <err>` or `discover vendor VFIO VFs: <err>`. */
int gpu_listing_new(const Root *sysfs, GpuListing **ret, char **error);

/*
 * Step 2: reads one listed VF as framework says. 0 with *ret filled; or -errno with *error,
 * and *ret holds the address and whatever parent was read: the VF is unreadable (DISC-3,
 * DISC-6). *ret starts out zeroed, and the caller frees it with gpu_vf_done() either way.
 */
int gpu_read_listed_vf(const Root *sysfs, GpuFramework framework, const GpuListedVf *in, GpuVf *ret,
                       char **error);

/* Frees what a GpuVf holds and zeroes it. */
void gpu_vf_done(GpuVf *vf);

/* What step 2 gave for one listed VF. */
typedef struct GpuVfReading {
        int r; /* 0: vf was read; < 0: it was not, and error says why */
        GpuVf vf;
        char *error;
        /*
         * The read has not ended (GEN-4: it is stuck past its deadline, or an earlier call on
         * the VF is): the VF keeps its state from the previous table, and a VF the previous
         * table lacks is unreadable with error (vendor VFIO) or left out (mdev).
         */
        bool unsettled;
} GpuVfReading;

void gpu_vf_readings_free(GpuVfReading *readings, size_t n);

/*
 * Step 3: the VF table of l from readings (one per listed VF; an entry whose listing failed
 * has none to give), taking l's host and the readings' contents. previous is the last table
 * (NULL for none), for the unsettled VFs. Fails with the DISC-3 or DISC-6 text when no listed
 * VF is readable.
 */
int gpu_host_assemble(GpuListing *l, GpuVfReading *readings, const GpuHost *previous, GpuHost **ret,
                      char **error);

/* Step 4: fills h's GPUs and the VFs' current profiles. Fails with `discover GPUs: <err>`. */
int gpu_host_finish(const Root *sysfs, const GpuNvml *nvml, GpuHost *h, char **error);
