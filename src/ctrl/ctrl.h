/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * ctrl: the controllers that keep the host in order on the event loop (SPEC §8, §10): the
 * Reconciler, REC-8's sysfs checks and the Sentinel (at the end of this header).
 *
 * The Reconciler runs reconcile passes (REC-1, REC-2, REC-3, REC-4, REC-5, REC-6, REC-7, REC-8,
 * REC-9, REC-10, REC-11 as far as this release goes), in three phases:
 *  1. a full discovery through the host's GpuTracker with the host driver version (DISC-20,
 *     HEALTH-30), the pass's one open-handle scan (DEV-14, REC-9), a health-store repair
 *     (HEALTH-21), and an NVML cache refresh with initialisation retried (NVML-2, NVML-14) once
 *     discovery has said which GPUs there are;
 *  2. the instance stages through the InstanceManager: list_instances (REC-3: a record that
 *     cannot be read stops the pass), then stale claims whose VMM is provably gone are
 *     released (release_stale, REC-4, REC-5), Deleting records completed, leftover .deleted-*
 *     trees deleted and consoles truncated (REC-10, VMM-8); beside them the storage stage
 *     (DISK-11) removes volume directories a crashed create left;
 *  3. the GPU stage of the host's framework, with the pass's scan: on vendor VFIO
 *     reset_unclaimed_vfs (REC-6, REC-7): every dirty VF that is neither uncertain, reserved,
 *     claimed, busy nor held open gets 0 written; on mdev reconcile_devices (REC-8): every mdev
 *     on a managed VF that no record or reservation names, older than ORPHAN_MDEV_MIN_AGE, with
 *     an IOMMU group that resolves and no open node, is removed. Each write waits at the
 *     PLACE-9 write gate and re-checks the reservations on the loop just before dispatch.
 * A failed scan counts against and skips the stages that need it (REC-9); a failed discovery,
 * or a host without a framework, skips the GPU stages (REC-2). Each pass ends with REC-11's debug
 * line. The blocking parts run on the worker pools or the NVML thread; a pass is done when every
 * step has posted back. Passes never overlap: a pass asked for while one runs starts right after
 * it (REC-1).
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
#include <systemd/sd-event.h>

#include "base/base.h"
#include "device/device.h"
#include "gpu/gpu.h"
#include "health/health.h"
#include "instances/instances.h"
#include "nvml/nvml.h"
#include "storage/storage.h"
#include "sysfs/sysfs.h"
#include "worker/worker.h"

typedef struct Reconciler Reconciler;

typedef struct ReconcilerConfig {
        GpuTracker *tracker;  /* borrowed */
        WorkerPool *pool;     /* the sysfs pool, for the scan (borrowed) */
        NvmlClient *nvml;     /* borrowed */
        HealthStore *health;  /* borrowed; NULL: no repair, no driver version */
        const Root *proc;     /* proc_root (duplicated for each scan) */
        const Root *sysfs;    /* sysfs_root, for REC-8's checks (duplicated for each job) */
        const Clock *clock;   /* the time of day REC-8's age is taken against; NULL: real */
        const char *dev_root; /* dev_root, absolute */
        nsec_t sysfs_timeout; /* the scan job's deadline (GEN-4); 0 for 30 s */
        /*
         * The repair stages (REC-4, REC-5, REC-6, REC-7, REC-10); both NULL: none (start-up tests
         * of discovery). The Claimer's reservations come through the instance manager.
         */
        InstanceManager *instances; /* borrowed */
        DeviceOps *ops;             /* borrowed */
        WriteGate *gate;            /* PLACE-9 for the GPU stages' writes (borrowed) */
        VolumeStore *volumes;       /* DISK-11's storage stage; NULL: none (borrowed) */
        /* A pass has ended (startup: it was the start-up pass). */
        void (*pass_done)(void *userdata, bool startup);
        void *userdata;
} ReconcilerConfig;

int reconciler_new(const ReconcilerConfig *config, Reconciler **ret);
/*
 * Abandons a pass in flight without calling pass_done, and its writes waiting at the gate. Free
 * the worker pool first.
 */
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

/* MET-2's reconcile_failures_total stages, in this order. */
typedef enum ReconcileStage {
        RECONCILE_STAGE_LIST_INSTANCES,
        RECONCILE_STAGE_RELEASE_STALE,
        RECONCILE_STAGE_RESET_UNCLAIMED_VFS,
        RECONCILE_STAGE_RECONCILE_DEVICES,
        RECONCILE_STAGE_STORAGE, /* DISK-11 */
        _RECONCILE_STAGE_MAX,
} ReconcileStage;

const char *reconcile_stage_to_string(ReconcileStage s);

typedef struct ReconcilerStats {
        uint64_t passes;
        uint64_t stage_failures[_RECONCILE_STAGE_MAX]; /* REC-5, REC-7, REC-9 */
        uint64_t resets;                               /* dirty VFs reset (REC-6) */
} ReconcilerStats;

const ReconcilerStats *reconciler_get_stats(const Reconciler *r);

/* DEV-14: `open-handle scan failed: <err>` while the last scan failed, else NULL. */
const char *reconciler_scan_error(const Reconciler *r);

/* ---- REC-8's sysfs side (orphan-mdev.c) ---------------------------------------------------- */

/* An mdev younger than this may be a create in flight: the sweep leaves it (REC-8). */
#define ORPHAN_MDEV_MIN_AGE 300 /* seconds */

/*
 * The conditions of REC-8 that sysfs answers, for an mdev the loop found unnamed: 1 when
 * bus/mdev/devices/<uuid> is more than ORPHAN_MDEV_MIN_AGE old at now and its iommu_group
 * link names a group; 0 when it is younger or has gone; -errno when its mtime or its group
 * cannot be read (`check orphaned mdev <uuid>: read mtime: <err>`, `...: no IOMMU group`,
 * `...: read IOMMU group: <err>`, `...: IOMMU group "<g>" is not a number`). Blocking: call it
 * on a worker.
 */
int orphan_mdev_check(const Root *sysfs, const char *uuid, Timestamp now, char **error);

/* ---- the sentinel (every SENT requirement; sentinel.c) --------------------------------------- */

/*
 * The Sentinel asks each running vGPU guest's agent, over the VMM's agent.sock chardev (never
 * the serial console, SENT-11), whether its GPU driver initialised, and reports the answers to
 * the health store (HEALTH-10, HEALTH-11, HEALTH-12, HEALTH-13, HEALTH-14, HEALTH-15), which
 * quarantines a VF after the threshold of distinct failed assignments and rescinds on a success
 * from the triggering one.
 *
 * A tick (every interval, the first when sentinel_start() is called, after the first reconcile
 * pass) submits one health repair (HEALTH-21), then, unless discovery has failed (SENT-3:
 * list_error, tick skipped), takes as targets the Running instances with a vendor-VFIO claim
 * (mdev too with config.mdev) whose VMM is watched alive and whose agent.sock exists (SENT-2),
 * capturing (id, VF, claimed_at). Checks are non-blocking sd-event io sources: at most
 * config.concurrency open, the rest queued for this tick (each re-read just before its connect,
 * and dropped if it is no longer a target with that assignment); a target whose previous check
 * is still open is skipped; each check has config.timeout from its connect (SENT-4, SENT-5). A
 * tick that finds the last tick's queue not yet started through adds no round of its own, so
 * every target is checked before any is checked again; each round ends with a debug line
 * `vGPU sentinel round done duration=<d> targets=<n>` (PERF-5 reads its duration).
 * Request ids come from one counter, and reply lines with another id, or that are not JSON
 * objects, are discarded: the chardev serves one client at a time, so a late reply to a check
 * that timed out reaches the next connection. Every check ends in one SENT-6 result, counted;
 * ok and failed re-read the claim (SENT-7) and report (SENT-8, SENT-9, SENT-10). No cursor is kept:
 * repeats after a restart are the store's dedup (HEALTH-11) and `ok` being terminal.
 *
 * State it owns and shows read-only: the counters of MET-2. Functions return >= 0 or -errno.
 */

typedef struct Sentinel Sentinel;

/* SENT-6's results, in MET-2's order. */
typedef enum SentinelResult {
        SENTINEL_RESULT_OK,
        SENTINEL_RESULT_FAILED,
        SENTINEL_RESULT_UNKNOWN,
        SENTINEL_RESULT_RPC_ERROR,
        SENTINEL_RESULT_UNSUPPORTED_AGENT,
        SENTINEL_RESULT_LIST_ERROR,
        _SENTINEL_RESULT_MAX,
} SentinelResult;

/* "ok", "failed", "unknown", "rpc_error", "unsupported_agent", "list_error". */
const char *sentinel_result_to_string(SentinelResult r);

typedef struct SentinelConfig {
        InstanceManager *instances; /* borrowed */
        GpuTracker *tracker;        /* borrowed: SENT-3, the parent VF of an mdev claim */
        HealthStore *health;        /* borrowed */
        nsec_t interval;            /* gpu.sentinel_interval */
        nsec_t timeout;             /* gpu.sentinel_timeout, per check */
        unsigned concurrency;       /* gpu.sentinel_concurrency */
        bool mdev;                  /* gpu.sentinel_mdev */
} SentinelConfig;

/* A failure_message longer than this makes the reply malformed (HEALTH-12, SENT-6). */
#define SENTINEL_MESSAGE_MAX 4096
/* A reply line longer than this is not read to its end: the check is an rpc_error. */
#define SENTINEL_LINE_MAX (256 * 1024)

int sentinel_new(const SentinelConfig *config, Sentinel **ret);
/* Closes the open checks; reports still waiting on the store complete without it. */
Sentinel *sentinel_free(Sentinel *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(Sentinel *, sentinel_free);

/* Adds the tick timer (disabled until sentinel_start()). -EBUSY if attached. */
int sentinel_attach_event(Sentinel *s, sd_event *event);
/* SENT-1: the first tick runs now, from the loop; later ones every interval. Idempotent. */
int sentinel_start(Sentinel *s);
/* Stops ticking (shutdown); open checks run to their end. */
void sentinel_stop(Sentinel *s);

typedef struct SentinelStats {
        uint64_t checks[_SENTINEL_RESULT_MAX]; /* checks_total{result} */
        uint64_t init_failures;                /* init_failures_total (SENT-8) */
        uint64_t quarantines;                  /* quarantines_total (SENT-8) */
        uint64_t ticks;
} SentinelStats;

const SentinelStats *sentinel_get_stats(const Sentinel *s);
/* Checks open now (SENT-5). */
unsigned sentinel_open_checks(const Sentinel *s);

/* The request line of check id (SENT-4), with its newline, malloc'd. */
int sentinel_format_request(uint64_t id, char **ret);

/*
 * One line read from agent.sock for the check with request id `id` (SENT-4, SENT-6): 0 when it
 * is to be discarded (not a JSON object, no id, or another id); 1 when it is this check's
 * reply, with *ret_result; for SENTINEL_RESULT_FAILED *ret_message is the guest's failure
 * message (malloc'd, may be ""), NULL otherwise. A reply whose content is invalid (no return or
 * error object, a state that is not a known string, a non-string or over-long
 * failure_message, an error of another class than CommandNotFound) is RPC_ERROR.
 */
int sentinel_parse_reply(const char *line, size_t size, uint64_t id, SentinelResult *ret_result,
                         char **ret_message);
