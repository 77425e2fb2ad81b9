/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * device: the writes that give a VF a vGPU and take it away again (SPEC §2, DEV-1..DEV-11,
 * DEV-16..DEV-19, GEN-4).
 *
 * Two layers.
 *
 * The synchronous primitives (device_vfio_*, device_mdev_*, device_release_claim) are what a
 * worker thread runs: pure functions of a sysfs Root, the /proc and /dev roots (for a fresh
 * open-handle scan when none is given) and the request. They block on the driver, so the event
 * loop never calls them. Every write they make goes through device_guard_write() first (DEV-18):
 * only a VF's nvidia/current_vgpu_type, an mdev type's create file on a VF and an mdev's remove
 * file can ever be written, and a PF never is.
 *
 * The asynchronous layer (DeviceOps) runs those primitives on the sysfs worker pool for the
 * owner's thread (the event loop, which both are attached to): operations on one VF never overlap
 * (DEV-11); each job has the gpu.sysfs_timeout deadline, and a VF with a call stuck past it is
 * refused until the call returns (GEN-4); configure re-checks quarantine and the health store on
 * the loop just before its write is dispatched (DEV-2); a release after a VMM exit retries (DEV-10)
 * and, for an mdev, first waits for the driver's own cleanup (DEV-17); every operation logs one
 * info line (DEV-19).
 *
 * Promises: functions return >= 0 or -errno; out-parameters (ret_*) are written only on
 * success; every failure, out of memory included, stores its message (the SPEC text where SPEC
 * gives one) in *error (error may be NULL) and, where a DeviceFailure is asked for, says what
 * kind of failure it was, so callers can act on it (PLACE-17, DEV-2, DEV-10) without parsing
 * messages.
 */

#include <stdbool.h>
#include <stdint.h>
#include <systemd/sd-event.h>

#include "base/base.h"
#include "sysfs/sysfs.h"
#include "vfio/vfio.h"
#include "worker/worker.h"

/* ---- roots and failure reports ------------------------------------------------------------- */

typedef struct DeviceRoots {
        const Root *sysfs;    /* sysfs_root */
        const Root *proc;     /* proc_root, for a fresh open-handle scan */
        const char *dev_root; /* dev_root, absolute, the path through which VMMs open nodes */
} DeviceRoots;

typedef enum DeviceFailureKind {
        DEVICE_FAILURE_ERROR,       /* anything not listed below */
        DEVICE_FAILURE_CAPACITY,    /* DEV-7: the driver refused a non-zero type (PLACE-17) */
        DEVICE_FAILURE_IN_USE,      /* DEV-4, DEV-9, DEV-17: a VFIO node is held open */
        DEVICE_FAILURE_REFUSED,     /* the driver refused the teardown write (DEV-10 retries) */
        DEVICE_FAILURE_UNVERIFIED,  /* DEV-4, DEV-6, DEV-9: the read-back disagrees */
        DEVICE_FAILURE_QUARANTINED, /* DEV-2: async layer only */
        DEVICE_FAILURE_STORE,       /* DEV-2: the health store is unavailable; async only */
        DEVICE_FAILURE_TIMEOUT,     /* GEN-4: abandoned at its deadline; the VF is uncertain */
        DEVICE_FAILURE_UNCERTAIN,   /* GEN-4: refused, an earlier call on the VF is stuck */
} DeviceFailureKind;

/* "error", "capacity", "in_use", ... for logs and tests. */
const char *device_failure_kind_to_string(DeviceFailureKind k);

/*
 * What a failed primitive reports besides its message. Like write_file_atomic_at()'s
 * failed_step it is a failure report, not an out-parameter: it is written only on failure.
 */
typedef struct DeviceFailure {
        DeviceFailureKind kind;
        uint32_t type_id; /* vendor-VFIO: the VF's type if it was read before failing, else 0 */
} DeviceFailure;

/* ---- the write guard (DEV-18) -------------------------------------------------------------- */

/*
 * Whether rel (relative to the sysfs root) may be written. Allowed are exactly
 *   bus/pci/devices/<vf>/nvidia/current_vgpu_type
 *   class/mdev_bus/<vf>/mdev_supported_types/<type>/create
 *   bus/mdev/devices/<uuid>/remove
 * and the first two only when <vf> carries a physfn link, i.e. is no PF. Everything else, and
 * in particular any path ending in driver/unbind, driver_override, sriov_numvfs, reset or (but
 * for an mdev's) remove, fails with -EPERM and `refuse to write <rel>: <why>`.
 */
int device_guard_write(const Root *sysfs, const char *rel, char **error);

/* ---- vendor VFIO (DEV-1..DEV-9) ------------------------------------------------------------ */

/*
 * Reads nvidia/current_vgpu_type of vf (DISC-5). Failures (-ENOENT when the file is missing)
 * read `read current vGPU type for VF <vf>: <err>`.
 */
int device_vfio_read_type(const Root *sysfs, const char *vf, uint32_t *ret, char **error);

/*
 * Configures vf with the type ID given as decimal text (DEV-1, DEV-3..DEV-7). Returns 0 when
 * the VF already held it (nothing written) and 1 after writing it. scan serves the in-use
 * probe when the VF holds another type; NULL takes a fresh scan then. The DEV-2 check is the
 * async layer's: callers of this function have made it.
 */
int device_vfio_configure(const DeviceRoots *roots, const VfioScan *scan, const char *vf,
                          const char *type, DeviceFailure *failure, char **error);

/*
 * Releases (or resets) vf (DEV-8, DEV-9): 0 when nothing was configured (a missing
 * current_vgpu_type included; nothing written), 1 after writing 0 and reading it back.
 * *ret_type (may be NULL) gets the type the VF held, 0 when none. scan as above.
 */
int device_vfio_release(const DeviceRoots *roots, const VfioScan *scan, const char *vf,
                        uint32_t *ret_type, DeviceFailure *failure, char **error);

/* ---- mdev (DEV-16, DEV-17) ----------------------------------------------------------------- */

/* A lowercase RFC 4122 version 4 UUID, as claims carry (DEV-16). */
bool device_mdev_uuid_is_valid(const char *uuid);

/*
 * Creates mdev uuid of the type named profile (exact name match among the VF's
 * mdev_supported_types/<type>/name) on vf, then checks that bus/mdev/devices/<uuid>/mdev_type
 * names that type, removing the mdev if it does not. Failures read
 * `create mdev on VF <vf>: <err>`; a refused create write is a capacity refusal.
 */
int device_mdev_create(const Root *sysfs, const char *vf, const char *profile, const char *uuid,
                       DeviceFailure *failure, char **error);

/* 1 while bus/mdev/devices/<uuid> exists, 0 once it is gone; `check mdev <uuid>: <err>`. */
int device_mdev_exists(const Root *sysfs, const char *uuid, char **error);

/*
 * Removes mdev uuid, gated by the in-use probe (DEV-17): 0 when it was already gone, 1 after
 * writing 1 to its remove file (ENOENT counts as removed). Failures: the scan and probe texts
 * (`scan open VFIO handles: <err>`, `check mdev <uuid> usage: <err>`, `mdev <uuid> is still in
 * use`) and `remove mdev <uuid>: <err>`. No waiting here: that is the async layer's.
 */
int device_mdev_remove(const DeviceRoots *roots, const VfioScan *scan, const char *uuid,
                       DeviceFailure *failure, char **error);

/* ---- release by the claim's framework (DISC-22) -------------------------------------------- */

typedef struct DeviceClaim {
        const char *framework; /* as recorded in the claim: "vendor-vfio" or "mdev" */
        const char *vf;        /* vendor-VFIO: the VF; mdev: its parent VF, or NULL if unknown */
        const char *mdev_uuid; /* mdev only */
} DeviceClaim;

/*
 * Releases what the claim holds, the way its recorded framework says, even if the host's
 * framework has changed since. An unknown framework fails with -EINVAL and
 * `unknown vGPU framework "<f>"`. Returns 0 (nothing to release) or 1 (released).
 */
int device_release_claim(const DeviceRoots *roots, const VfioScan *scan, const DeviceClaim *claim,
                         DeviceFailure *failure, char **error);

/* ---- a scan shared by jobs (DEV-15) -------------------------------------------------------- */

/*
 * A reference-counted VfioScan, so one scan can serve every release of a batch even though a
 * job abandoned at its deadline may still read it after its caller has moved on.
 */
typedef struct DeviceScan DeviceScan;

/* Takes ownership of scan on success. */
int device_scan_new(VfioScan *scan, DeviceScan **ret);
DeviceScan *device_scan_ref(DeviceScan *s);
DeviceScan *device_scan_unref(DeviceScan *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(DeviceScan *, device_scan_unref);
#define _cleanup_device_scan_ _cleanup_(device_scan_unrefp)
const VfioScan *device_scan_get(const DeviceScan *s);

/* ---- the asynchronous layer ---------------------------------------------------------------- */

/*
 * DEV-2's questions, asked on the owner's thread. is_quarantined() answers for a VF address;
 * store_unavailable() returns NULL while the health store is available, else its HEALTH-16
 * text (`VF health state unavailable: ...`), which configure fails with. Either may be NULL
 * (never quarantined; always available).
 */
typedef struct DeviceGuard {
        bool (*is_quarantined)(void *userdata, const char *vf);
        const char *(*store_unavailable)(void *userdata);
        void *userdata;
} DeviceGuard;

#define DEVICE_SYSFS_TIMEOUT_DEFAULT (30 * NSEC_PER_SEC) /* gpu.sysfs_timeout (GEN-4) */
#define DEVICE_RETRY_INTERVAL_DEFAULT NSEC_PER_SEC       /* DEV-10, DEV-17 */
#define DEVICE_RETRY_ATTEMPTS_DEFAULT 10u                /* DEV-10 */

typedef struct DeviceOpsConfig {
        DeviceRoots roots;     /* borrowed; must outlive the pool's last job */
        WorkerPool *pool;      /* the sysfs pool (borrowed); its completions call into DeviceOps */
        nsec_t sysfs_timeout;  /* each job's deadline; 0 for the default */
        nsec_t retry_interval; /* 0 for the default */
        /* Release attempts after a VMM exit, and DEV-17's polls; 0 for the default. */
        unsigned retry_attempts;
        const MonoClock *clock; /* NULL: CLOCK_MONOTONIC, and the attached timer is real */
        DeviceGuard guard;
} DeviceOpsConfig;

typedef struct DeviceOps DeviceOps;

int device_ops_new(const DeviceOpsConfig *config, DeviceOps **ret);

/*
 * Frees the layer without running any completion. Free the worker pool first: a job still in
 * it would complete into freed memory.
 */
DeviceOps *device_ops_free(DeviceOps *o);
DEFINE_TRIVIAL_CLEANUP_FUNC(DeviceOps *, device_ops_free);
#define _cleanup_device_ops_ _cleanup_(device_ops_freep)

/*
 * Adds the layer's timer source to event (NULL: sd_event_default()): the loop starts retries and
 * polls when they are due. -EBUSY when attached already; device_ops_free() removes the source.
 * The worker pool is attached on its own (worker_pool_attach_event()).
 */
int device_ops_attach_event(DeviceOps *o, sd_event *event);

/*
 * One turn of that source: starts the retries and polls that are due; returns how many started.
 * With an injected clock the timer never fires (the loop cannot see such a clock move): a test
 * calls this right after moving the clock. Owners on the system clock leave it to the loop.
 */
int device_ops_dispatch(DeviceOps *o);

/* The earliest due retry or poll: 1 and *ret, or 0 when none waits. */
int device_ops_get_next_wakeup(DeviceOps *o, nsec_t *ret);

/*
 * True while an operation with this key (a VF address, or "mdev:<uuid>", see
 * device_ops_release()) is queued, running or waiting for a retry.
 */
bool device_ops_is_busy(DeviceOps *o, const char *key);

/*
 * Why an operation on vf would be refused at once now: DEVICE_FAILURE_UNCERTAIN (GEN-4) or, for
 * one that configures (a type write, an mdev create), DEVICE_FAILURE_STORE or
 * DEVICE_FAILURE_QUARANTINED (DEV-2); DEVICE_FAILURE_ERROR when nothing refuses it. A caller
 * whose request failed at once asks this to tell a refusal from another error, never the text.
 */
DeviceFailureKind device_ops_refusal_kind(DeviceOps *o, const char *vf, bool configures);

typedef enum DeviceOutcome {
        DEVICE_OUTCOME_CONFIGURED,     /* the type was written, the mdev created */
        DEVICE_OUTCOME_UNCHANGED,      /* the VF already held the type (DEV-3) */
        DEVICE_OUTCOME_RELEASED,       /* 0 written and read back; the mdev removed */
        DEVICE_OUTCOME_NOT_CONFIGURED, /* nothing to release (DEV-8); the mdev was gone */
        DEVICE_OUTCOME_FAILED,
} DeviceOutcome;

/* "configured", "unchanged", "released", "not_configured", "failed": DEV-19's outcome. */
const char *device_outcome_to_string(DeviceOutcome o);

typedef struct DeviceResult {
        int r;                  /* >= 0 or -errno */
        DeviceOutcome outcome;  /* DEVICE_OUTCOME_FAILED exactly when r < 0 */
        DeviceFailureKind kind; /* when r < 0 */
        const char *error;      /* r < 0: the message, never NULL; valid during the call only */
        const char *vf;         /* the VF (or NULL for an mdev whose VF was not given) */
        uint32_t type_id;       /* vendor-VFIO: the type written or released, 0 if unknown */
        unsigned attempts;      /* jobs that ran the operation's write step */
} DeviceResult;

/*
 * Runs on the owner's thread when an operation ends. It may start new operations; it must not
 * free the DeviceOps or the pool.
 */
typedef void (*DeviceDoneFunc)(const DeviceResult *result, void *userdata);

/*
 * Queues a vendor-VFIO configure of vf with type (decimal type ID text). On success the
 * operation runs once the VF's earlier operations have ended, and done() always runs later,
 * never inside this call. On failure nothing was queued, done() never runs, and *error says why:
 * an invalid request (-EINVAL, DEV-1), or, when the VF was idle so the operation started at
 * once, a refusal at its start: -EAGAIN `<VF <vf>|mdev <uuid>> is uncertain: an earlier sysfs
 * call on it has not returned` (GEN-4), -EAGAIN with the store's HEALTH-16 text or -EPERM
 * `vendor VFIO vGPU on VF <vf> is quarantined` (DEV-2), -EAGAIN `sysfs worker pool exhausted
 * (<n> calls stuck)`. An operation that waited for the VF meets the same refusals when its turn
 * comes, and reports them through done(). Each job (one configure, one release attempt, one
 * poll) has the gpu.sysfs_timeout deadline: past it, done() gets -ETIMEDOUT and
 * `timed out after <d>`, and the VF is uncertain until the call returns. instance_id (may be
 * NULL) is only for the log line.
 */
int device_ops_configure(DeviceOps *o, const char *vf, const char *type, const char *instance_id,
                         DeviceDoneFunc done, void *userdata, char **error);

/*
 * Queues an mdev create (DEV-16), as device_ops_configure. DEV-2 applies to it as well; its
 * quarantine refusal reads `mdev vGPU on VF <vf> is quarantined` (SPEC gives only the
 * vendor-VFIO text).
 */
int device_ops_mdev_create(DeviceOps *o, const char *vf, const char *profile, const char *uuid,
                           const char *instance_id, DeviceDoneFunc done, void *userdata,
                           char **error);

typedef struct DeviceReleaseRequest {
        DeviceClaim claim;
        const char *instance_id; /* NULL for the reset of a dirty VF (logged as a reset) */
        bool after_vmm_exit;     /* DEV-10 retries; for an mdev, DEV-17's wait first */
        DeviceScan *scan;        /* serves the first attempt's probe (DEV-15); NULL: fresh */
} DeviceReleaseRequest;

/*
 * Queues a release (or, without instance_id, the reset of a dirty VF). The operation's key is
 * the VF; an mdev claim without its VF is keyed by "mdev:<uuid>". After a VMM exit a refused or
 * unverified release is retried up to retry_attempts times, retry_interval apart, each attempt
 * with a fresh scan; an mdev is first given retry_attempts polls, retry_interval apart, to
 * vanish by itself. Otherwise as device_ops_configure.
 */
int device_ops_release(DeviceOps *o, const DeviceReleaseRequest *request, DeviceDoneFunc done,
                       void *userdata, char **error);
