/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * instances: the GPU VMs vgpud runs (SPEC §6, INST-1, INST-2, INST-3, INST-4, INST-5, INST-6,
 * INST-7, INST-8, INST-9, INST-10, INST-11, INST-12, INST-13, INST-14, INST-15, INST-16, INST-17,
 * INST-18, INST-19, INST-20, INST-21, INST-22, INST-23, INST-24, INST-25).
 *
 * Records (instance-record.c): the instance.json format of INST-2 with its strict loader and
 * crash-safe writer (INST-1), the create body of API-9 with INST-3, INST-4, INST-5, INST-6,
 * INST-7's validation, INST-6's confinement of boot paths, and the directory layout and removal of
 * INST-20. These are pure functions and blocking file primitives for worker threads; nothing here
 * keeps state.
 *
 * Promises: functions return >= 0 or -errno; out-parameters are written only on success; a
 * function that takes `char **error` sets it on every failure, with the SPEC text where SPEC
 * gives one and otherwise a message naming the file or field.
 */

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"
#include "seed/seed.h"
#include "storage/storage.h"

/* ---- identity and validation (INST-3, INST-4, INST-5, INST-6, INST-7) ----------------------- */

#define INSTANCE_ID_LEN 20
#define INSTANCE_NAME_MAX 63
#define INSTANCE_VCPUS_MIN 1u
#define INSTANCE_VCPUS_MAX 256u
#define INSTANCE_MEMORY_MB_MIN UINT64_C(128)
#define INSTANCE_MEMORY_MB_MAX UINT64_C(1048576)
#define INSTANCE_CMDLINE_MAX 4096
#define INSTANCE_PATH_MAX 4096
/*
 * instance.json is refused above this (GEN-5). The worst case a record can reach, as JSON text
 * (a string byte written escaped takes at most 2 bytes where control bytes are refused, and 6
 * for a control byte written as \u00XX):
 *   64 SSH keys of 16 KiB, no control bytes:   64 * (2 * 16384 + 4)  = 2,097,408
 *   user_data of 64 KiB, control bytes allowed:      6 * 65536 + 16  =   393,232
 *   8 volumes of ~70 bytes, the network (16 ports of ~50 bytes, 8 name servers of ~20),
 *   disk and hostname:                                               <     4,096
 *   every field records held before (their old cap):                      65,536
 * which is 2,560,272 bytes: 3 MiB leaves about a fifth of margin.
 */
#define INSTANCE_RECORD_MAX (3 * 1024 * 1024)

/* INST-3: 20 characters of [a-z0-9] from getrandom(). */
int instance_id_generate(char ret[static INSTANCE_ID_LEN + 1]);
bool instance_id_is_valid(const char *id);

/* INST-4's pattern (uniqueness is the manager's). */
bool instance_name_is_valid(const char *name);

/* ---- states (INST-8) ----------------------------------------------------------------------- */

typedef enum InstanceState {
        INSTANCE_CREATING,
        INSTANCE_RUNNING,
        INSTANCE_STOPPING,
        INSTANCE_STOPPED,
        INSTANCE_FAILED,
        INSTANCE_DELETING,
        _INSTANCE_STATE_MAX,
} InstanceState;

/* "Creating", "Running", ... exactly as records and the API spell them. */
const char *instance_state_to_string(InstanceState s);
int instance_state_from_string(const char *s, InstanceState *ret);

/* ---- the record (INST-2) ------------------------------------------------------------------- */

typedef struct InstanceBoot {
        char *kernel, *initrd, *cmdline, *disk; /* NULL when absent */
} InstanceBoot;

typedef struct InstanceGpu {
        char *profile;        /* NULL: no vGPU requested; the rest is then NULL/zero too */
        char *framework;      /* the claim: "vendor-vfio" or "mdev"; NULL while unclaimed */
        char *device_path;    /* <sysfs_root>/bus/pci/devices/<vf> or .../bus/mdev/devices/<uuid> */
        char *mdev_uuid;      /* mdev claims only */
        Timestamp claimed_at; /* zero while unclaimed */
} InstanceGpu;

/*
 * FLEET-6: the OpenStack Placement allocation a scheduler made for this instance before it asked
 * for it. Both NULL, or both set (a record or a create body never holds one alone).
 */
typedef struct InstancePlacement {
        char *consumer; /* the allocation's consumer: a canonical lowercase UUID */
        char *gpu;      /* the PF the allocation is against; claims consider only that PF */
} InstancePlacement;

#define INSTANCE_CONSUMER_STRLEN 37 /* a UUID's 36 characters and the NUL */

/*
 * The parts later issues give behaviour (INST-2): parsed, checked for shape and kept, so that a
 * record holding them loads and saves unchanged. All optional: a record of an earlier shape has
 * none of them.
 */
#define INSTANCE_VOLUMES_MAX 8                 /* DISK-8 */
#define INSTANCE_PORTS_MAX 16                  /* NET-1 */
#define INSTANCE_DNS_MAX 8                     /* resolv.conf reads 3; room beyond, and a bound */
#define INSTANCE_DISK_GB_MAX UINT64_C(1048576) /* 1 PiB: any storage.max_disk_gb fits below */

/* DISK-5: the root disk. image NULL: none. */
typedef struct InstanceDisk {
        char *image; /* an image name (INST-4's pattern) */
        uint64_t size_gb;
} InstanceDisk;

typedef enum InstanceVolumeState {
        INSTANCE_VOLUME_ATTACHED,
        INSTANCE_VOLUME_ATTACHING,
        INSTANCE_VOLUME_DETACHING,
        _INSTANCE_VOLUME_STATE_MAX,
} InstanceVolumeState;

/* "attached", "attaching", "detaching" (INST-2). */
const char *instance_volume_state_to_string(InstanceVolumeState s);

/* DISK-8: one attached volume. */
typedef struct InstanceVolume {
        char id[INSTANCE_ID_LEN + 1];
        bool readonly;
        InstanceVolumeState state;
} InstanceVolume;

typedef enum InstanceNetworkMode {
        INSTANCE_NETWORK_ABSENT, /* no "network" in the record */
        INSTANCE_NETWORK_NAT,
        INSTANCE_NETWORK_BRIDGE,
        INSTANCE_NETWORK_NONE,
        _INSTANCE_NETWORK_MODE_MAX,
} InstanceNetworkMode;

/* NET-1: a port forward. */
typedef struct InstancePort {
        uint16_t host, guest;
        bool udp; /* "udp", else "tcp" */
} InstancePort;

/* NET-1, NET-2, NET-5: the NIC. Strings NULL when absent; prefix 0 when absent. */
typedef struct InstanceNetwork {
        InstanceNetworkMode mode;
        char *bridge, *mac, *ip, *gateway;
        uint32_t prefix;
        char **dns; /* IPv4 addresses, NULL-terminated; NULL when none */
        InstancePort *ports;
        size_t n_ports;
} InstanceNetwork;

/* SEED-1: the seed's input, as given (the seed module's type; its check is the one check). */
typedef SeedCloudInit InstanceCloudInit;

typedef struct InstanceHypervisor {
        pid_t pid;                       /* 0: none */
        uint64_t start_time;             /* with pid */
        char *boot_id;                   /* with pid */
        char *qmp_socket, *agent_socket; /* NULL when absent */
        /*
         * CONS-1's console socket; NULL when absent: a VMM started before the console became a
         * socket writes console.log as a file until its next start.
         */
        char *console_socket;
} InstanceHypervisor;

typedef struct InstanceRecord {
        char id[INSTANCE_ID_LEN + 1];
        char *name;
        InstanceState state;
        Timestamp created_at;
        char *error; /* NULL when none */
        InstanceBoot boot;
        uint32_t vcpus;
        uint64_t memory_mb;
        InstanceGpu gpu;
        InstancePlacement placement; /* FLEET-6; absent (NULLs) without a Placement consumer */
        InstanceHypervisor hypervisor;
        InstanceDisk disk;
        InstanceVolume *volumes;
        size_t n_volumes;
        InstanceNetwork network;
        InstanceCloudInit cloud_init;
} InstanceRecord;

/* Frees the members (not r itself) and zeroes r. */
void instance_record_done(InstanceRecord *r);
/* Frees the NIC's members and zeroes it. */
void instance_network_done(InstanceNetwork *n);
/* A deep copy into *ret; -ENOMEM. */
int instance_network_copy(const InstanceNetwork *n, InstanceNetwork *ret);
/* A deep copy of the boot paths. */
int instance_boot_copy(const InstanceBoot *from, InstanceBoot *ret);
/* A deep copy. */
int instance_record_copy(const InstanceRecord *r, InstanceRecord *ret);
/*
 * SEED-1, SEED-2: whether the instance boots with a cloud-init seed: one with an image always
 * (host name and network), any other when its cloud_init gives something.
 */
bool instance_record_wants_seed(const InstanceRecord *r);
/* Whether the record holds a claim (gpu.device_path set). */
bool instance_record_is_claimed(const InstanceRecord *r);
/* Clears the claim fields (framework, device_path, mdev_uuid, claimed_at), keeps the profile. */
void instance_record_clear_claim(InstanceRecord *r);
/* Clears the hypervisor fields. */
void instance_record_clear_hypervisor(InstanceRecord *r);

/*
 * instance.json (INST-2): version 1, unknown keys rejected at every level, integers where INST-2
 * says so and strings elsewhere, empty objects and absent values omitted, timestamps per GEN-8
 * and GEN-9 (claimed_at is compared as a string, so it must be GEN-8's exact rendering). Load
 * also re-checks INST-3, INST-4, INST-5 and that a claim is whole (framework, device_path and
 * claimed_at together; mdev_uuid exactly for mdev) so a damaged file never yields a half claim. The
 * device fields are optional, so that records of every earlier shape load: their counts are
 * integers (disk.size_gb, network.prefix, ports' host and guest), volumes' readonly a boolean.
 * Failures: -EBADMSG with a message naming the key by its path ("volumes[2].id").
 */
int instance_record_to_json(const InstanceRecord *r, char **ret, size_t *ret_size);
int instance_record_from_json(const char *buf, size_t size, InstanceRecord *ret, char **error);

/* ---- the create body (API-9, INST-4, INST-5, INST-6, INST-7) -------------------------------- */

typedef struct InstanceSpec {
        char *name;
        uint32_t vcpus;
        uint64_t memory_mb;
        InstanceBoot boot;
        char *profile; /* NULL without "gpu" */
        /* FLEET-6: "placement": {"consumer", "gpu"}; only with a profile. NULLs without. */
        InstancePlacement placement;
        /* DISK-5: "image" and "disk_gb" (size_gb 0: the image's size). image NULL: none. */
        InstanceDisk disk;
        /* DISK-8: "volumes": [{"volume": "<id or name>", "readonly"?}], at most 8. */
        struct {
                char *volume;
                bool readonly;
        } volumes[INSTANCE_VOLUMES_MAX];
        size_t n_volumes;
        /* NET-1: "network" as given (mode INSTANCE_NETWORK_ABSENT without it; no mac). */
        InstanceNetwork network;
        /* SEED-1: "cloud_init" as given, checked by seed_cloud_init_check(); empty without. */
        InstanceCloudInit cloud_init;
} InstanceSpec;

void instance_spec_done(InstanceSpec *s);

/*
 * Parses and validates a create body: exactly the keys of API-9 and FLEET-6's "placement" (other
 * keys, wrong types, malformed or duplicate-key JSON, nesting over 16 are refused), INST-4's name
 * pattern, INST-5's ranges, and INST-6's form of the boot paths (absolute, ≤ 4096 bytes, no "." or
 * ".." components; the file checks are instance_boot_files_open()'s). "placement" needs both its
 * keys, placement.consumer a canonical lowercase UUID, placement.gpu a PCI address in DISC-8's
 * form, and "gpu" beside it. -EINVAL with a message that names the field (INST-7), e.g. `vcpus
 * must be 1..256`, `boot.kernel must be an absolute path without . or .. components`.
 */
int instance_spec_from_json(const char *body, size_t size, InstanceSpec *ret, char **error);

/* The open boot files of an instance (INST-6): -1 where a file is not given. */
typedef struct InstanceBootFiles {
        int kernel, initrd, disk;
        int root;         /* DISK-5: <id>/root.qcow2, read-write; opened right before a spawn */
        bool root_direct; /* DISK-9: its file system takes O_DIRECT */
        /* DISK-8: the record's attached volumes, in its order; opened right before a spawn, each
         * with its QEMU node name "vol-<id>" (instance_boot_files_add_volume()). */
        int volumes[INSTANCE_VOLUMES_MAX];
        char volume_nodes[INSTANCE_VOLUMES_MAX][sizeof "vol-" + INSTANCE_ID_LEN];
        size_t n_volumes;
        bool volumes_direct;
        int seed; /* SEED-2: <id>/seed.iso, read-only; opened right before a spawn */
} InstanceBootFiles;

/* Takes over fd as the next volume's descriptor; -E2BIG past INSTANCE_VOLUMES_MAX. */
int instance_boot_files_add_volume(InstanceBootFiles *f, const char *id, int fd);

#define INSTANCE_BOOT_FILES_NONE \
        ((InstanceBootFiles){.kernel = -1, .initrd = -1, .disk = -1, .root = -1, .seed = -1})

/*
 * INST-6, blocking (run on a worker): opens each given boot path read-only. A path must lie,
 * as written, under one of image_dirs (NULL-terminated) and name a readable regular file whose
 * real path lies under one of them too (resolved); the file is opened beneath that resolved
 * dir with every link refused, so nothing swapped in after the check is followed. QEMU gets
 * these descriptors, never the paths. -EINVAL with `boot.<field> <path>: <why>`.
 */
int instance_boot_files_open(const InstanceBoot *boot, char *const *image_dirs,
                             InstanceBootFiles *ret, char **error);
void instance_boot_files_close(InstanceBootFiles *f);

/* ---- files (INST-1, INST-20), blocking primitives for workers ------------------------------ */

#define INSTANCE_RECORD_FILE "instance.json"
#define INSTANCE_CONSOLE_FILE "console.log"
#define INSTANCE_QEMU_LOG_FILE "qemu.log"
#define INSTANCE_QMP_SOCKET "qmp.sock"
#define INSTANCE_AGENT_SOCKET "agent.sock"
#define INSTANCE_CONSOLE_SOCKET "console.sock" /* CONS-1 */
#define INSTANCE_SEED_FILE "seed.iso"          /* SEED-2 */
#define INSTANCE_ROOT_OVERLAY "root.qcow2"     /* DISK-5 */
#define INSTANCE_DELETED_PREFIX ".deleted-"

/*
 * Writes r to <instances_dirfd>/<id>/instance.json crash-safely (INST-1): the directory is
 * created 0700 when missing (and instances/ fsynced then), the file written 0600 through a temp
 * file, fsync, rename, fsync of the directory. Failures name the step and the path
 * (write_file_atomic_at's texts).
 */
int instance_record_save_at(int instances_dirfd, const InstanceRecord *r, char **error);

/*
 * Reads and parses <id>/instance.json; -ENOENT when it is missing. A leftover temp is removed.
 * The file is opened as INST-2a says (a link, FIFO or device fails at once with -EBADFD), and
 * its socket paths must be the ones vgpud derives under runtime_instances
 * (<runtime_dir>/instances): a record naming any other socket is -EBADMSG, so that no record can
 * point liveness (VMM-17, VMM-18) at another process's listener.
 */
int instance_record_load_at(int instances_dirfd, const char *runtime_instances, const char *id,
                            InstanceRecord *ret, char **error);

/*
 * INST-20's removal: renames <id> to .deleted-<id>, fsyncs instances/, deletes the tree.
 * 0 when removed; a failure after the rename leaves the .deleted-<id> tree for a retry
 * (instance_dir_list_at() lists it, instance_tree_delete_at() deletes it) and fails with its
 * message.
 */
int instance_remove_at(int instances_dirfd, const char *id, char **error);

typedef struct InstanceDirList {
        char **ids;     /* directories named by a valid id holding instance.json */
        char **deleted; /* ".deleted-*" names left to delete */
        char **orphans; /* valid-id directories without instance.json (INST-20) */
        char **unknown; /* anything else: logged, never touched */
} InstanceDirList;

void instance_dir_list_done(InstanceDirList *l);

/* Lists <data_dir>/instances (INST-20, INST-21's input), each list sorted. */
int instance_dir_list_at(int instances_dirfd, InstanceDirList *ret, char **error);

/* Deletes the tree name below dirfd (never following links): .deleted-* and orphans. */
int instance_tree_delete_at(int dirfd, const char *name, char **error);

/* ---- the instance manager (INST-8, INST-9, INST-10, INST-11, INST-12, INST-13, INST-14, INST-15,
 * INST-16, INST-17, INST-18, INST-19, INST-20, INST-21, INST-22, INST-23, INST-24, INST-25;
 * instance-manager.c, instance-steps.c and the rest) ---- */

/*
 * An InstanceManager owns every instance on the event loop: the records in memory (written
 * through a disk worker pool of their own, so that stuck sysfs calls never stop persistence,
 * GEN-4), one operation at a time per instance (INST-9), admission (INST-10, INST-11), the
 * Claimer (claim-first, PLACE-1, PLACE-20) and each running VMM (vmm/). Operations announce each
 * transition by persisting it before they act (INST-8), and answer their caller once a persisted
 * state is reached (INST-23: the caller's disconnect cancels nothing).
 */

#include <systemd/sd-event.h>

#include "claim/claim.h"
#include "config/config.h"
#include "device/device.h"
#include "sysfs/sysfs.h"
#include "vmm/vmm.h"
#include "worker/worker.h"

typedef struct InstanceManager InstanceManager;

/* What kind of failure ended an operation; api/ maps it to API-21's status and code. */
typedef enum InstanceFailure {
        INSTANCE_FAILURE_NONE,
        INSTANCE_FAILURE_INVALID_REQUEST,        /* 400 invalid_request */
        INSTANCE_FAILURE_UNKNOWN_PROFILE,        /* 400 unknown_profile */
        INSTANCE_FAILURE_NOT_FOUND,              /* 404 not_found */
        INSTANCE_FAILURE_ALREADY_EXISTS,         /* 409 already_exists */
        INSTANCE_FAILURE_BUSY,                   /* 409 busy */
        INSTANCE_FAILURE_INVALID_STATE,          /* 409 invalid_state */
        INSTANCE_FAILURE_INSUFFICIENT_RESOURCES, /* 409 insufficient_resources */
        INSTANCE_FAILURE_PLACEMENT_DISABLED,     /* 503 placement_disabled */
        INSTANCE_FAILURE_NOT_IMPLEMENTED,        /* 501 not_implemented */
        INSTANCE_FAILURE_INTERNAL,               /* 500 internal */
        _INSTANCE_FAILURE_MAX,
} InstanceFailure;

typedef struct InstanceOutcome {
        int r;                   /* >= 0, or -errno */
        InstanceFailure failure; /* r < 0 */
        const char *error;       /* r < 0: the SPEC text, never NULL */
        /* r >= 0: the instance after the operation; NULL after a delete or a rolled-back create */
        const InstanceRecord *record;
} InstanceOutcome;

/* Runs once on the loop, never inside the call that started the operation. */
typedef void (*InstanceDoneFunc)(const InstanceOutcome *outcome, void *userdata);

typedef struct InstanceManagerConfig {
        const Config *config;   /* image_dirs, qemu, vmm.*, gpu.vfio_*, runtime_dir (borrowed) */
        int instances_dirfd;    /* <data_dir>/instances (borrowed) */
        const Root *proc;       /* proc_root */
        const char *dev_root;   /* dev_root, absolute */
        const char *sysfs_path; /* sysfs_root, for device paths */
        WorkerPool *disk_pool;  /* record I/O, spawns, path checks, console reads, liveness */
        /* Helper programs (qemu-img, dnsmasq) and file copies: every job with a deadline, apart
         * from the disk pool so that none of them delays a record write (GEN-4; borrowed). */
        WorkerPool *helper_pool;
        DeviceOps *ops;       /* releases (borrowed) */
        ImageStore *images;   /* DISK-5: the images root disks are made from (borrowed) */
        VolumeStore *volumes; /* DISK-8: the volumes instances attach (borrowed) */
        /* DISK-10: as ImageStoreConfig's; checked for a create with an image. NULL: none. */
        int (*check_space)(uint64_t needed, char **error, void *userdata);
        /* The claim flow's configuration; the manager fills in its owner (borrowed parts). */
        ClaimerConfig claimer;
        /*
         * FLEET-6, INST-14: optional; the instance that held Placement consumer `consumer` is
         * gone, deleted (INST-18, REC-10) or its create rolled back after vgpud had taken it on
         * (a 500 internal), so its allocation should go. Never called for a create refused with
         * 400, 409 or 503: that allocation is the scheduler's to move elsewhere (FLEET-7) or
         * delete. Runs on the loop and must not block (the DELETE is the fleet worker's).
         */
        void (*consumer_released)(void *userdata, const char *consumer);
        void *userdata;
        const Clock *clock; /* created_at; NULL for clock_realtime */
} InstanceManagerConfig;

int instance_manager_new(const InstanceManagerConfig *config, InstanceManager **ret, char **error);
/* Drops every operation without answering; running VMMs keep running. Free the pools first. */
InstanceManager *instance_manager_free(InstanceManager *m);
DEFINE_TRIVIAL_CLEANUP_FUNC(InstanceManager *, instance_manager_free);
#define _cleanup_instance_manager_ _cleanup_(instance_manager_freep)

/* Adds the manager's sources (the Claimer's, each VMM's) to event. -EBUSY if attached. */
int instance_manager_attach_event(InstanceManager *m, sd_event *event);

/*
 * GEN-10's record step: sweeps INST-20's leftovers, loads every record, probes each VMM's
 * liveness and classifies the record by INST-21's table without waiting on any VMM (state
 * changes are written before this returns). Unloadable records keep placement disabled
 * (INST-22). Fails only on ENOMEM or an unreadable instances/ directory.
 */
int instance_manager_load(InstanceManager *m, char **error);

/* After READY=1: starts INST-21's waiting actions as ordinary operations. */
void instance_manager_start_recovery(InstanceManager *m);

Claimer *instance_manager_get_claimer(InstanceManager *m);

/*
 * INST-22's `instance record <dir> unreadable: <err>`, or `instance record <dir> not loaded,
 * retried on the next pass: <err>` when the process ran out of descriptors (a resource
 * failure, not a bad record); NULL when every record loaded.
 */
const char *instance_manager_disabled_reason(const InstanceManager *m);

/*
 * placement_disabled_reason (INST-11, API-5): the health store's, the host's discovery error, the
 * reconciler's scan error (instance_manager_set_scan_error()), INST-22's, or the sysfs pool's
 * refusal; placement_disabled_reason()'s rule. Admission refuses with it and /resources shows it.
 */
int instance_manager_placement_disabled_reason(const InstanceManager *m, char **ret);
/* DEV-14: the reconciler's open-handle scan failed with error, or succeeded again (NULL). */
int instance_manager_set_scan_error(InstanceManager *m, const char *error);

/*
 * The operations (INST-12, INST-13, INST-14, INST-15, INST-16, INST-17, INST-18, INST-19, INST-24,
 * INST-25). Each returns 0 once started (done runs later), or < 0 when refused at once, with
 * *ret_failure and *ret_error (malloc'd) saying why (not found, busy, invalid state, name taken,
 * admission). done is not called then.
 */
int instance_manager_create(InstanceManager *m, const InstanceSpec *spec, InstanceDoneFunc done,
                            void *userdata, InstanceFailure *ret_failure, char **ret_error);
int instance_manager_start(InstanceManager *m, const char *id, InstanceDoneFunc done,
                           void *userdata, InstanceFailure *ret_failure, char **ret_error);
int instance_manager_stop(InstanceManager *m, const char *id, InstanceDoneFunc done, void *userdata,
                          InstanceFailure *ret_failure, char **ret_error);
int instance_manager_delete(InstanceManager *m, const char *id, InstanceDoneFunc done,
                            void *userdata, InstanceFailure *ret_failure, char **ret_error);

/*
 * DISK-8: volume (id or name) attached to or detached from instance id while it is Running (hot,
 * over QMP) or Stopped (the record only). Refusals: 404 not_found (instance, volume, or a detach
 * of a volume not attached), 409 invalid_state (another state; already attached; 8 volumes; a
 * holder that excludes this attachment, named), 409 busy (another operation). A detach the guest
 * does not release within vmm.device_release_timeout fails 409 busy and stays attached.
 */
int instance_manager_attach_volume(InstanceManager *m, const char *id, const char *volume,
                                   bool readonly, InstanceDoneFunc done, void *userdata,
                                   InstanceFailure *ret_failure, char **ret_error);
int instance_manager_detach_volume(InstanceManager *m, const char *id, const char *volume,
                                   InstanceDoneFunc done, void *userdata,
                                   InstanceFailure *ret_failure, char **ret_error);

/* INST-24 for operation "standby", "snapshot" or "fork": always < 0, with the refusal. */
int instance_manager_refuse(InstanceManager *m, const char *id, const char *operation,
                            InstanceFailure *ret_failure, char **ret_error);

/* Reads (API-16: from memory). */
const InstanceRecord *instance_manager_get(const InstanceManager *m, const char *id);
/* Every instance sorted by created_at, then id (API-2); the array is the manager's. */
size_t instance_manager_list(InstanceManager *m, const InstanceRecord *const **ret);
/* The instance whose claim holds vf (vendor-VFIO VF, or an mdev's parent VF), or NULL. */
const InstanceRecord *instance_manager_find_claim(const InstanceManager *m, const char *vf);
/* Whether a VMM of the instance may be running (API-18's running_instances). */
bool instance_manager_is_running(const InstanceManager *m, const char *id);
/* Whether the instance's VMM is watched and has not exited (SENT-2; an ambiguous one is not). */
bool instance_manager_vmm_is_watched(const InstanceManager *m, const char *id);

/*
 * Moves on (monotonically) whenever instance_manager_find_claim() may answer differently: an
 * instance added or dropped, a record write started or completed (a claim saved, cleared or put
 * back after a failed write), a release re-reading the host (the claim it cleared). The API keeps
 * its rendered bodies until it moves (PERF-1); the INST-22 reason it compares itself.
 */
uint64_t instance_manager_generation(const InstanceManager *m);

/*
 * The console route (API-2): the last tail_bytes of console.log, read on the disk pool.
 * done gets r >= 0 and the bytes, or r < 0 and a message.
 */
typedef void (*InstanceConsoleFunc)(int r, const char *data, size_t size, const char *error,
                                    void *userdata);
int instance_manager_console(InstanceManager *m, const char *id, size_t tail_bytes,
                             InstanceConsoleFunc done, void *userdata, InstanceFailure *ret_failure,
                             char **ret_error);

/*
 * Following the console (CONS-2): the last tail_bytes of console.log, then what the VMM appends,
 * until the VMM exits (the log then read to its end) or the instance goes away; a follow of an
 * instance without a running VMM ends after the tail. Reads run on the disk pool, one at a time
 * per follower and no larger than the sink's room, started by inotify on the instance's
 * directory (never a poll and never a read on the loop); a log truncated by VMM-8 is read again
 * from its start. At most INSTANCE_CONSOLE_FOLLOWERS_MAX per instance (409 busy past that).
 *
 * The sink is the follower's client. Nothing is read until instance_console_follow_wake(), which
 * its owner calls once the sink is ready and again whenever room frees up. The first write()
 * comes once the tail has been read, even when it is empty (size 0): whatever the VMM writes
 * after that is streamed, so a client answered from there on misses nothing. end() says the follow
 * is over; the follow is freed after it returns and must not be used again. A follow closed by
 * its owner (instance_console_follow_close()) never calls end().
 */
#define INSTANCE_CONSOLE_FOLLOWERS_MAX 16
#define INSTANCE_CONSOLE_READ_MAX (64u * 1024)

typedef struct InstanceConsoleSink {
        size_t (*room)(void *userdata);
        int (*write)(void *userdata, const char *data, size_t size);
        void (*end)(void *userdata);
        void *userdata;
} InstanceConsoleSink;

typedef struct InstanceConsoleFollow InstanceConsoleFollow;

int instance_manager_console_follow(InstanceManager *m, const char *id, size_t tail_bytes,
                                    const InstanceConsoleSink *sink, InstanceConsoleFollow **ret,
                                    InstanceFailure *ret_failure, char **ret_error);
void instance_console_follow_wake(InstanceConsoleFollow *f);
void instance_console_follow_close(InstanceConsoleFollow *f);

/*
 * Attaching to the console (CONS-3): a connection to the VMM's console socket (CONS-1), one per
 * instance. Refused (409) while another is attached (busy), while no VMM runs (invalid_state),
 * and for a VMM started before CONS-1, whose console is a plain file until its next start
 * (invalid_state). The connection is made at once (a Unix socket connects without waiting);
 * nothing is read until instance_console_attach_start().
 *
 * What the guest writes goes to the sink's send() as it comes, in pieces of at most
 * INSTANCE_CONSOLE_READ_MAX bytes; a send() that fails ends the attach. What the client types
 * goes in with instance_console_attach_write() (pieces of at most INSTANCE_CONSOLE_INPUT_MAX
 * bytes), queued while the console socket does not take it: a write that brings the queue to
 * INSTANCE_CONSOLE_INPUT_MAX bytes returns 1 (taken, but stop writing), a write while it is
 * there -ENOBUFS (not taken); the sink's writable() says when there is room again. end() says the
 * console has closed (the VMM exited, or the instance went away); the attach is freed after it
 * returns. An attach closed by its owner never calls end().
 */
#define INSTANCE_CONSOLE_INPUT_MAX (64u * 1024)

typedef struct InstanceConsoleAttachSink {
        int (*send)(void *userdata, const char *data, size_t size);
        void (*writable)(void *userdata);
        void (*end)(void *userdata);
        void *userdata;
} InstanceConsoleAttachSink;

typedef struct InstanceConsoleAttach InstanceConsoleAttach;

int instance_manager_console_attach(InstanceManager *m, const char *id,
                                    const InstanceConsoleAttachSink *sink,
                                    InstanceConsoleAttach **ret, InstanceFailure *ret_failure,
                                    char **ret_error);
int instance_console_attach_start(InstanceConsoleAttach *a);
int instance_console_attach_write(InstanceConsoleAttach *a, const void *data, size_t size);
void instance_console_attach_close(InstanceConsoleAttach *a);

/* Counters and figures for /metrics (MET-2). */
typedef struct InstanceManagerStats {
        uint64_t by_state[_INSTANCE_STATE_MAX];
        uint64_t forced_kills[2];        /* [in_grace] (VMM-12) */
        uint64_t liveness_uncertain;     /* VMM-19 */
        uint64_t stale_release_failures; /* REC-5 */
} InstanceManagerStats;
void instance_manager_get_stats(const InstanceManager *m, InstanceManagerStats *ret);

/* OPS-3: whether no operation is between two persisted states (shutdown may finish). */
bool instance_manager_is_settled(const InstanceManager *m);

/* ---- reconcile passes (REC-4, REC-5, REC-10; instance-reconcile.c) ------------------------- */

typedef struct InstanceReconcileResult {
        /*
         * REC-3: records on disk that are neither in memory nor loadable. The pass stops there
         * (nothing below ran): such a record may hold a claim. unreadable_id names the first.
         */
        unsigned unreadable;
        char unreadable_id[INSTANCE_ID_LEN + 1];
        bool unreadable_transient;   /* the first failed for want of descriptors, not its content */
        unsigned loaded;             /* records found on disk and taken in (REC-3) */
        unsigned checked;            /* claims and Deleting records whose liveness was resolved */
        unsigned released;           /* stale claims released (REC-4) */
        unsigned release_failed;     /* stale releases that failed (REC-5); claims kept */
        unsigned kept;               /* claims kept because the VMM is or may be alive */
        unsigned deletes_resumed;    /* Deleting records completed (REC-10) */
        unsigned consoles_truncated; /* console logs over vmm.console_max_bytes (VMM-8) */
} InstanceReconcileResult;

typedef void (*InstanceReconcileDone)(const InstanceReconcileResult *result, void *userdata);

/* NET-10: the NAT network's figures. */
typedef struct InstanceNatStats {
        bool dnsmasq_up;
        uint64_t dnsmasq_restarts;
        uint64_t errors[4]; /* by NetStep: tap, link, nft, dnsmasq */
        uint64_t addresses_allocated, addresses_free;
        const char *error; /* why nat creates are refused: the last pass failed (NET-8) or the
                            * records disagree on addresses (NET-5); NULL if neither; borrowed */
} InstanceNatStats;

void instance_nat_stats(const InstanceManager *m, InstanceNatStats *ret);

/*
 * The instance stages of a reconcile pass. list_instances (REC-3) first, on the disk pool:
 * instances/ is listed again, leftover .deleted-* trees deleted (REC-10, INST-20), and a valid id
 * that is not in memory is loaded and taken in; one that cannot be loaded names itself in
 * INST-22's placement_disabled_reason and ends the stages (nothing below runs), and the reason
 * clears once no such record is left. Then every claim and every Deleting record with no
 * operation in progress and no VMM watched alive has its liveness resolved on the disk pool
 * with the pass's one fd scan (REC-9; referenced, may be NULL when the scan failed: only claims
 * without a socket to check are decided then). Provably gone: the instance is marked busy, steps
 * 1–2 of VMM-16/17 run again just before the release (a listening socket keeps the claim), the
 * claim is released with DEV-10's retries, cleared and written, and a Running record becomes
 * Stopped (REC-4); a Deleting record completes its delete (REC-10). Consoles over
 * vmm.console_max_bytes are truncated with VMM-8's marker. done runs once, on the loop, when
 * everything started has ended. -EBUSY while a previous call runs.
 */
int instance_manager_reconcile(InstanceManager *m, DeviceScan *scan, InstanceReconcileDone done,
                               void *userdata);
