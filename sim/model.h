/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * model: a pure, deterministic model of a simulated NVIDIA vGPU host (SPEC §14).
 *
 * The model knows GPUs, their SR-IOV VFs, the vGPU type catalogs, the equal-size and
 * mixed-size capacity rules, mdevs, VFIO open counts, injected faults and NVML settings. It
 * does no I/O and reads no clock: callers pass the monotonic time in milliseconds where a rule
 * depends on it (release lag). vgpu-sim maps its FUSE tree onto these functions, and the fake
 * NVML library and fake-qemu read the same model back from `.sim/state.json`.
 *
 * Promises:
 *  - functions returning int return >= 0 or -errno; errnos of refused driver writes are the
 *    simulation's choices listed in SIM-11 (EINVAL, ENOSPC, EBUSY);
 *  - out-parameters are written only on success;
 *  - the host YAML and state.json parsers are strict: unknown or duplicate keys, wrong types
 *    and inconsistent values are errors with a message;
 *  - sim_host_to_json() followed by sim_host_from_json() gives back an equal model.
 */

#include "base/base.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SIM_STATE_VERSION 1
#define SIM_UUID_STRLEN 37             /* 8-4-4-4-12 hex digits plus NUL */
#define SIM_HOST_MAX_BYTES 65536       /* bound on the host YAML file */
#define SIM_STATE_MAX_BYTES (4u << 20) /* bound on state.json */
#define SIM_MAX_QUERIES_IN_FLIGHT 64
#define SIM_AGE_MAX_S (10ull * 365 * 24 * 3600) /* `age` moves an mdev back at most 10 years */

/* ---- GPU models and type catalogs (SIM-4, SIM-5) ------------------------------------------- */

typedef struct SimType {
        uint32_t id;           /* vGPU type ID; for mdev models also the N of `nvidia-N` */
        const char *name;      /* "NVIDIA L40S-2Q" */
        const char *mdev_type; /* "nvidia-901" on mdev models, else NULL */
        uint32_t size;         /* framebuffer in GiB, which is also its slot count */
} SimType;

typedef struct SimGpuModel {
        const char *key;       /* the host file's `model` value */
        const char *nvml_name; /* nvmlDeviceGetName() */
        uint16_t device_id;    /* PCI device ID of PF and VFs */
        uint32_t slots;        /* framebuffer in GiB = 1 GiB slots */
        uint32_t max_vfs;      /* sriov_totalvfs */
        uint32_t max_vgpus;    /* vGPUs per card in any mode */
        bool mdev;             /* mdev framework (else vendor VFIO) */
        bool mixed_capable;    /* supports mixed-size mode */
        const SimType *types;
        size_t n_types;
} SimGpuModel;

const SimGpuModel *sim_gpu_model_find(const char *key);

/* The equal-size maximum of a type: min(max_vgpus, slots / size) (SIM-4). */
uint32_t sim_type_max_instances(const SimGpuModel *m, const SimType *t);

/* Looks a type up by ID (or, for mdev models, by directory name) in one model's catalog. */
const SimType *sim_gpu_model_find_type(const SimGpuModel *m, uint32_t id);
const SimType *sim_gpu_model_find_mdev_type(const SimGpuModel *m, const char *mdev_type);

/* Looks a type up by ID across every model (NVML type IDs are global). */
int sim_type_find_any(uint32_t id, const SimGpuModel **ret_model, const SimType **ret);

/* ---- host state ----------------------------------------------------------------------------- */

typedef enum SimMode {
        SIM_MODE_EQUAL,
        SIM_MODE_MIXED,
} SimMode;

const char *sim_mode_to_string(SimMode m);

typedef struct SimVf {
        char address[PCI_ADDRESS_STRLEN];
        uint32_t iommu_group;
        int32_t vfio;       /* N of vfio-dev/vfio<N> and dev/vfio/devices/vfio<N>; -1 on mdev VFs */
        uint32_t type;      /* current vGPU type ID (mdev: the type of its mdev); 0 = free */
        uint32_t placement; /* first slot of the vGPU on a mixed-size card */
        char mdev_uuid[SIM_UUID_STRLEN]; /* empty when the VF carries no mdev */
        uint32_t mdev_group;             /* the mdev's own IOMMU group */
        uint64_t mdev_created_ms;        /* CLOCK_MONOTONIC millisecond of its creation */
        uint64_t mdev_aged_s;            /* how far `age` moved its creation back (SIM-6) */
        uint32_t open_handles;           /* VFIO nodes of this VF (or its mdev) held open */
        uint32_t writes_in_flight;
        uint32_t max_concurrent_writes; /* DEV-11 */
        bool wedged;
        uint64_t release_lag_ms;
        bool closed_once; /* last_close_ms is meaningful */
        uint64_t last_close_ms;
} SimVf;

typedef struct SimQuery {
        char *token;
        bool overlapped;
} SimQuery;

/*
 * A PF and its VFs. While SR-IOV is off (`sriov <pf> off`, SIM-14) the PF has no VFs: n_vfs is
 * 0, so everything that walks the VFs sees none, while vfs[] keeps the sriov_vfs entries of
 * the layout (address, IOMMU group, vfio number) with their state cleared, for `on` to bring
 * back.
 */
typedef struct SimGpu {
        char address[PCI_ADDRESS_STRLEN];
        const SimGpuModel *model;
        SimMode mode;
        SimVf *vfs;
        size_t n_vfs;          /* VFs present now: sriov_vfs, or 0 while SR-IOV is off */
        size_t sriov_vfs;      /* VFs while SR-IOV is on (the host file's `vfs`) */
        bool sriov_off;        /* `sriov <pf> off` removed the VFs */
        uint64_t sriov_cycles; /* `off` transitions so far: a VF of an earlier cycle is gone */
        uint64_t query_write_overlaps; /* PLACE-9 */
        SimQuery *queries;             /* fake NVML queries in flight */
        size_t n_queries;
} SimGpu;

typedef enum SimFaultOp {
        SIM_FAULT_READ,
        SIM_FAULT_WRITE,
        SIM_FAULT_OPEN,
        SIM_FAULT_FSYNC,
        SIM_FAULT_RENAME,
        _SIM_FAULT_OP_MAX,
} SimFaultOp;

typedef enum SimFaultKind {
        SIM_FAULT_ERRNO,
        SIM_FAULT_DELAY,
        SIM_FAULT_HANG,
} SimFaultKind;

typedef struct SimFault {
        SimFaultOp op;
        char *glob;
        SimFaultKind kind;
        int error;          /* SIM_FAULT_ERRNO: positive errno */
        uint64_t delay_ms;  /* SIM_FAULT_DELAY */
        uint64_t remaining; /* 0 = unlimited */
} SimFault;

/* What the FUSE layer must do for one operation; see sim_host_take_fault(). */
typedef struct SimFaultAction {
        SimFaultKind kind;
        int error;
        uint64_t delay_ms;
} SimFaultAction;

typedef struct SimNvmlError {
        char *function;
        int code;
        uint64_t remaining; /* 0 = unlimited */
} SimNvmlError;

typedef struct SimQemu {
        char *name;
        char **flags;
} SimQemu;

#define SIM_NVML_R550 (1u << 1)
#define SIM_NVML_R570 ((1u << 1) | (1u << 2))

typedef struct SimHost {
        char *driver_version;
        SimGpu *gpus;
        size_t n_gpus;
        uint32_t next_iommu_group; /* the next mdev gets this group */
        SimFault *faults;
        size_t n_faults;
        uint64_t fault_clears;       /* bumped by clear-faults: hung operations wait for a change */
        uint32_t operations_delayed; /* held by a delay or hang fault right now */
        uint64_t nvml_latency_ms;
        bool nvml_hang;
        /*
         * The placement list versions the fake library knows, bit n for vn (SIM-13, NVML-3a):
         * SIM_NVML_R570 by default, SIM_NVML_R550 refuses v2, 0 refuses both.
         */
        unsigned nvml_struct_versions;
        SimNvmlError *nvml_errors;
        size_t n_nvml_errors;
        SimQemu *qemu;
        size_t n_qemu;
        char **forbidden_writes;    /* NULL-terminated, may be NULL */
        uint64_t layout_generation; /* bumped when an mdev appears or vanishes */
} SimHost;

SimHost *sim_host_free(SimHost *h);
DEFINE_TRIVIAL_CLEANUP_FUNC(SimHost *, sim_host_free);
#define _cleanup_sim_host_ _cleanup_(sim_host_freep)

/*
 * Parses the host YAML (SIM-2, SIM-20): `driver_version` (string) and `gpus`, a list of
 * `{address, model: L40S | A40-mdev, mode: equal | mixed, vfs: N}` (mode defaults to equal),
 * and optionally `nvml_struct_versions`, the placement list versions the fake library knows: a
 * list of 1 and 2, default `[1, 2]` (SIM-13, NVML-3a).
 * Errors read "<line>:<column>: <what>".
 */
int sim_host_parse_yaml(const char *text, size_t size, SimHost **ret, char **error);

int sim_host_find_gpu(const SimHost *h, const char *address, size_t *ret);
int sim_host_find_vf(const SimHost *h, const char *address, size_t *ret_gpu, size_t *ret_vf);
int sim_host_find_mdev(const SimHost *h, const char *uuid, size_t *ret_gpu, size_t *ret_vf);

/* Number of vGPUs (configured VFs) on a card. */
uint32_t sim_gpu_vgpus(const SimGpu *g);

/* ---- capacity rules (SIM-7..SIM-11) --------------------------------------------------------- */

/*
 * Whether a free VF of g may take t now, and if so at which slot (mixed-size). -EINVAL for a
 * size other than the card's equal-size class, -ENOSPC for no capacity.
 */
int sim_gpu_can_take(const SimGpu *g, const SimType *t, uint32_t *ret_placement);

/* Whether VF v of g lists t in creatable_vgpu_types (SIM-7, SIM-10). */
bool sim_vf_lists_type(const SimGpu *g, size_t v, const SimType *t);

/* creatable_vgpu_types as the driver prints it: a header line, then "<id> : <name>" lines. */
int sim_vf_format_creatable(const SimGpu *g, size_t v, char **ret);

/*
 * Free placements of t on a mixed-size card (SIM-9): the start slots, lowest first, at most
 * cap of them stored; *ret_n is the full count even when cap is smaller. -EOPNOTSUPP on an
 * equal-size card. A card that holds its maximum number of vGPUs has none.
 */
int sim_gpu_placements(const SimGpu *g, const SimType *t, uint32_t *starts, size_t cap,
                       size_t *ret_n);

/*
 * A store into nvidia/current_vgpu_type (SIM-11): decimal text with at most one trailing
 * newline. now_ms is the monotonic clock, for the release lag.
 */
int sim_vf_store_type(SimHost *h, size_t g, size_t v, const char *buf, size_t size,
                      uint64_t now_ms);

/* The same with a parsed value, for callers that have one. */
int sim_vf_set_type(SimHost *h, size_t g, size_t v, uint32_t id, uint64_t now_ms);

/* available_instances of an mdev type on a VF (SIM-6): 1 or 0. */
uint32_t sim_mdev_available(const SimGpu *g, size_t v, const SimType *t);

/*
 * A store into mdev_supported_types/<type>/create: a UUID, case-insensitive, one "\n" allowed.
 * now_ms (the monotonic clock) becomes the mdev's creation time.
 */
int sim_mdev_store_create(SimHost *h, size_t g, size_t v, const SimType *t, const char *buf,
                          size_t size, uint64_t now_ms);

/*
 * The mdev's creation time as its sysfs directory shows it (SIM-6): the CLOCK_MONOTONIC
 * millisecond it was created at, moved back by `age`, so negative once aged past the clock's
 * origin. -ENOENT for a UUID no VF carries.
 */
int sim_mdev_birth_ms(const SimHost *h, const char *uuid, int64_t *ret);

/* A store into an mdev's remove: "1" removes it unless its node is open or within release lag. */
int sim_mdev_store_remove(SimHost *h, size_t g, size_t v, const char *buf, size_t size,
                          uint64_t now_ms);

/* ---- VFIO handles, write spans and NVML query spans ---------------------------------------- */

void sim_vf_open(SimHost *h, size_t g, size_t v);
void sim_vf_close(SimHost *h, size_t g, size_t v, uint64_t now_ms);

/* A write operation on one of the VF's attributes starts or ends (DEV-11, PLACE-9). */
void sim_vf_write_begin(SimHost *h, size_t g, size_t v);
void sim_vf_write_end(SimHost *h, size_t g, size_t v);

/* A fake NVML query about g starts or ends; a query that saw a write counts once (PLACE-9). */
int sim_gpu_query_begin(SimHost *h, size_t g, const char *token);
int sim_gpu_query_end(SimHost *h, size_t g, const char *token);

/* ---- faults, forbidden writes, control commands -------------------------------------------- */

/*
 * Finds the first fault for op whose glob matches path or one of its aliases (fnmatch without
 * FNM_PATHNAME, so `*` crosses `/`), consumes one use of it, and returns 1 with the action;
 * 0 when none matches.
 */
int sim_host_take_fault(SimHost *h, SimFaultOp op, const char *path, char *const *aliases,
                        SimFaultAction *ret);

/* Appends a refused write (SIM-16). */
int sim_host_record_forbidden(SimHost *h, const char *path);

/* Flags for fake-qemu, one per line (SIM-15); NULL when the name has none. */
const SimQemu *sim_host_find_qemu(const SimHost *h, const char *name);

/*
 * Runs one `.sim/ctl` command (SIM-14), without its trailing newline. Parse errors are
 * -EINVAL; `mode` on a busy card and `sriov <pf> off` while a VFIO node of one of its VFs is
 * open are -EBUSY (and change nothing); an unknown device or mdev is -ENOENT. The message
 * says why.
 */
int sim_host_ctl(SimHost *h, const char *command, char **error);

/*
 * Whether a command is one the fake NVML library sends on its own (`nvml consume`,
 * `nvml query-begin`, `nvml query-end`); reading .sim/ctl shows the result of the last
 * command a person or test sent, not of these.
 */
bool sim_ctl_is_internal(const char *command);

/* ---- state.json (SIM-14) -------------------------------------------------------------------- */

int sim_host_to_json(const SimHost *h, char **ret);
int sim_host_from_json(const char *text, size_t size, SimHost **ret, char **error);

/* NVML return codes the fake library may be told to inject, by name or number (NVML-5). */
int sim_nvml_code_from_string(const char *s, int *ret);
const char *sim_nvml_code_to_string(int code);

/* The NVML-4 function names; the `nvml error` command accepts only these. */
bool sim_nvml_function_is_known(const char *name);

/* errno names for `fault ... <errno-name>`. */
int sim_errno_from_string(const char *s, int *ret);
const char *sim_errno_to_string(int error);
