/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Between the instance manager's files: instance-manager.c (the table of instances, records on
 * the disk pool, the Claimer's owner, start-up recovery, reads) and instance-ops.c (the
 * operations' state machines).
 */

#include "instances/instances.h"

typedef struct Instance Instance;
typedef struct Op Op;

/* What INST-21 left for after READY=1. */
typedef enum Recovery {
        RECOVERY_NONE,
        RECOVERY_READY,     /* Creating, VMM alive: Running if QMP is ready, else terminate */
        RECOVERY_STOP,      /* Stopping, VMM alive: the stop resumes */
        RECOVERY_DELETE,    /* Deleting, VMM alive or ambiguous: the delete resumes */
        RECOVERY_TERMINATE, /* Stopped or Failed with a live VMM: VMM-10 */
} Recovery;

struct Instance {
        InstanceManager *m;
        InstanceRecord rec;
        char vf[PCI_ADDRESS_STRLEN]; /* the claim's VF ("" when unknown or unclaimed) */
        Vmm *vmm;                    /* a VMM that may be running; NULL when none is known */
        bool ambiguous;              /* the last liveness verdict was ambiguous (VMM-19) */
        bool exited;                 /* vmm has exited: its exit is in last_exit */
        VmmExit last_exit;
        Recovery recovery;
        Op *op;             /* the one operation (INST-9) */
        Claim *claim_token; /* the Claimer's save or clear in flight */
        bool claim_clear;
        unsigned writes; /* record writes in flight */
};

struct InstanceManager {
        InstanceManagerConfig cfg;
        const Config *config;
        sd_event *event;
        Claimer *claimer;
        Instance **instances; /* sorted by created_at, then id */
        size_t n_instances;
        char *boot_id;
        char *disabled_reason;           /* INST-22 */
        uint64_t admitted_unreserved;    /* INST-10 */
        uint64_t forced_kills[2];        /* VMM-12 [in_grace] */
        uint64_t liveness_uncertain;     /* VMM-19 */
        uint64_t stale_release_failures; /* REC-5 */
        uint64_t generation;             /* instance_manager_generation() */
        struct Sweep *sweep;             /* the reconcile pass's instance stages in flight */
        char *runtime_instances;         /* <runtime_dir>/instances */
        const InstanceRecord **view;     /* instance_manager_list()'s array */
        size_t n_view;
};

/* ---- instance-manager.c -------------------------------------------------------------------- */

Instance *instance_find(const InstanceManager *m, const char *id);
int instance_insert(InstanceManager *m, Instance *i);
/* Takes i out of the table and frees it. */
void instance_drop(InstanceManager *m, Instance *i);
Instance *instance_new(InstanceManager *m);

/* Writes the record as it is now (INST-1) on the disk pool; next runs on the loop. */
typedef void (*InstanceWriteDone)(Instance *i, int r, const char *error);
int instance_write(Instance *i, InstanceWriteDone next);

/* "<runtime_dir>/instances/<id>/<name>", malloc'd. */
char *instance_runtime_path(const Instance *i, const char *name);

/*
 * A Vmm for a spawned child or an adopted process, attached to the manager's loop. Takes the
 * pidfd in every case; on failure a child is killed through it first (it must not run on
 * unwatched).
 */
int instance_attach_vmm(Instance *i, pid_t pid, int pidfd, bool is_child, uint64_t start_time);
void instance_forget_vmm(Instance *i);
/* hypervisor.pid, start_time and the current boot id, together as INST-2 wants them. */
int instance_set_identity(Instance *i, pid_t pid, uint64_t start_time);

/*
 * DISC-20 after a write to vf (NULL: unknown): a re-read of the VFs' types, or a full discovery
 * where sysfs lists or mdevs decide, and an NVML cache refresh through the daemon. done (may be
 * NULL) runs when the re-read has ended; < 0 when it could not start (done never runs then).
 */
int instance_manager_reread_host(InstanceManager *m, const char *vf, GpuTrackerDone done,
                                 void *userdata);

/* Whether the instance passes a VFIO device to its VMM (VMM-10's ladder). */
bool instance_has_vfio(const Instance *i);

/* ---- instance-command.c (VMM-1, decision 12) ----------------------------------------------- */

/* Where the VMM's channels live: the runtime directory's sockets and the data directory's log. */
typedef struct InstanceCommandPaths {
        const char *qmp_socket;
        const char *agent_socket;
        const char *console_socket; /* NULL: the console goes to console_log as a file */
        const char *console_log;
} InstanceCommandPaths;

/*
 * The QEMU command of rec under config, pure: the boot files are files' descriptors (INST-6),
 * which must be exactly those the record names (-EINVAL otherwise), and every string of *ret is
 * borrowed from rec, config and paths. Render it with vmm_command_argv().
 */
int instance_command_build(const InstanceRecord *rec, const Config *config,
                           const InstanceCommandPaths *paths, const InstanceBootFiles *files,
                           VmmCommand *ret, char **error);

/* ---- instance-ops.c ------------------------------------------------------------------------ */

/* A VMM exited while no operation ran (INST-19). */
void instance_ops_vmm_exited(Instance *i);
/* INST-21's actions after READY=1. */
void instance_ops_recover(Instance *i);

/*
 * REC-4: releases the claim of an instance whose VMM a pass found provably gone, after the
 * immediate re-check of steps 1-2, with the pass's scan (may be NULL) serving the release's
 * first probe (DEV-15); REC-10: completes a Deleting record whose VMM is gone. done gets the
 * outcome (r < 0: kept; INSTANCE_FAILURE_BUSY when the re-check found the VMM maybe alive); 0
 * once started, < 0 when no operation could start.
 */
int instance_ops_release_stale(Instance *i, DeviceScan *scan, InstanceDoneFunc done,
                               void *userdata);
int instance_ops_resume_delete(Instance *i, InstanceDoneFunc done, void *userdata);

/* Drops a reconcile sweep without running its done (the manager is going away). */
void instance_sweep_free(struct Sweep *s);

/* A liveness probe of the instance's recorded VMM on the disk pool (VMM-16..19). */
typedef void (*InstanceProbeDone)(InstanceManager *m, const char *id, const VmmLiveness *l,
                                  void *userdata);
/* scan NULL and steps_1_2: REC-4's re-check (a listening socket is ambiguous). */
int instance_probe(Instance *i, DeviceScan *scan, bool steps_1_2, InstanceProbeDone done,
                   void *userdata);
/* The Claimer's owner callbacks route claim completions of an operation here. */
void instance_ops_reserved(Instance *i);
/*
 * The VF of a claim released in hardware whose clearing no record write has carried yet, or
 * NULL: the disk still claims it, so no other claim may take it until the write lands.
 */
const char *instance_ops_unrecorded_release(const Instance *i);
void instance_op_free(Op *op);

/*
 * A record that could not be loaded for want of descriptors (EMFILE, ENFILE) says nothing about
 * the record: it is not loaded yet, and the next reconcile pass tries again (INST-22, REC-3).
 * Placement stays disabled meanwhile, as for an unreadable record, since it may hold a claim.
 */
static inline bool instance_load_failure_is_transient(int r)
{
        return r == -EMFILE || r == -ENFILE;
}

/* The log line and the disabled reason's wording for a record that did not load. */
static inline const char *instance_load_failure_event(int r)
{
        return instance_load_failure_is_transient(r)
                   ? "instance record not loaded for want of descriptors; retried on the next pass"
                   : "instance record unreadable";
}

static inline const char *instance_load_failure_reason(int r)
{
        return instance_load_failure_is_transient(r) ? "not loaded, retried on the next pass"
                                                     : "unreadable";
}
