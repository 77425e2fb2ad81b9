/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * ctrl: the controllers that keep the host in order on the event loop (SPEC §8).
 *
 * The Reconciler runs reconcile passes (REC-1, REC-10 as far as this release goes): a full
 * discovery through the host's GpuTracker with the host driver version (DISC-20, HEALTH-30),
 * the open-handle scan (DEV-14), a health-store repair (HEALTH-21), and an NVML cache refresh
 * with initialisation retried (NVML-2, NVML-14) once discovery has said which GPUs there are.
 * The blocking parts run on the worker pool or the NVML thread; a pass is done when every step
 * has posted back. Passes never overlap: a pass asked for while one runs starts right after it
 * (REC-1).
 *
 * The start-up pass (GEN-10) is the same minus the scan, the repair and the driver version: it
 * exists to fill the NVML cache before the listeners start, so that the first real pass
 * discovers with NVML's catalogs.
 *
 * State it owns and shows read-only: DEV-14's scan failure, the pass in flight. Discovery's
 * state (the host, DISC-7's error) is the tracker's. It logs what it finds, once per change.
 *
 * Promises: functions return >= 0 or -errno; every callback runs on the loop, never from inside
 * the call that started the work.
 */

#include <stdbool.h>

#include "base/base.h"
#include "gpu/gpu.h"
#include "health/health.h"
#include "nvml/nvml.h"
#include "sysfs/sysfs.h"
#include "worker/worker.h"

typedef struct Reconciler Reconciler;

typedef struct ReconcilerConfig {
        GpuTracker *tracker;  /* borrowed */
        WorkerPool *pool;     /* the sysfs pool, for the scan (borrowed) */
        NvmlClient *nvml;     /* borrowed */
        HealthStore *health;  /* borrowed; NULL: no repair, no driver version */
        const Root *proc;     /* proc_root (duplicated for each scan) */
        const char *dev_root; /* dev_root, absolute */
        nsec_t sysfs_timeout; /* the scan job's deadline (GEN-4); 0 for 30 s */
        /* A pass has ended (startup: it was the start-up pass). */
        void (*pass_done)(void *userdata, bool startup);
        void *userdata;
} ReconcilerConfig;

int reconciler_new(const ReconcilerConfig *config, Reconciler **ret);
/* Abandons a pass in flight without calling pass_done. Free the worker pool first. */
Reconciler *reconciler_free(Reconciler *r);
DEFINE_TRIVIAL_CLEANUP_FUNC(Reconciler *, reconciler_free);

/*
 * Starts a pass (startup: GEN-10's start-up pass), or, while one runs, has another start right
 * after it. -ENOMEM.
 */
int reconciler_start(Reconciler *r, bool startup);

/* The owner forwards the NVML client's refreshed() callback here (NVML-15). */
void reconciler_nvml_refreshed(Reconciler *r);

bool reconciler_is_running(const Reconciler *r);

/* DEV-14: `open-handle scan failed: <err>` while the last scan failed, else NULL. */
const char *reconciler_scan_error(const Reconciler *r);
