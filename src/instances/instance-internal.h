/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * Between the instance manager's files: instance-manager.c (the table of instances, records on
 * the disk pool, the Claimer's owner, start-up recovery, reads), instance-steps.c (the engine
 * that runs an operation's list of steps, and the steps several operations share),
 * instance-create.c (create and start), instance-stop.c (stop, delete, unrequested exits),
 * instance-recover.c (INST-21's recovery, REC-4's stale releases) and instance-console.c
 * (API-2's console read).
 */

#include "instances/instances.h"
#include "net/net.h"

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
        unsigned writes;                    /* record writes in flight */
        struct ConsoleFollowers *followers; /* CONS-2; NULL while nobody follows */
        InstanceConsoleAttach *attached;    /* CONS-3; NULL while nobody is attached */
};

typedef struct ClaimIndex ClaimIndex;

struct InstanceManager {
        InstanceManagerConfig cfg;
        const Config *config;
        sd_event *event;
        Claimer *claimer;
        WriteGate *gate;      /* PLACE-9 for its releases: config->claimer.gate */
        Instance **instances; /* sorted by created_at, then id */
        size_t n_instances;
        Instance **by_id;   /* the same, sorted by id (instance-index.c) */
        ClaimIndex *claims; /* the claims by VF (instance-index.c) */
        char *boot_id;
        char *disabled_reason;           /* INST-22 */
        char *scan_error;                /* DEV-14, as the reconciler reports it */
        uint64_t admitted_unreserved;    /* INST-10 */
        uint64_t forced_kills[2];        /* VMM-12 [in_grace] */
        uint64_t liveness_uncertain;     /* VMM-19 */
        uint64_t stale_release_failures; /* REC-5 */
        uint64_t generation;             /* instance_manager_generation() */
        struct Sweep *sweep;             /* the reconcile pass's instance stages in flight */
        char *runtime_instances;         /* <runtime_dir>/instances */
        const InstanceRecord **view;     /* instance_manager_list()'s array */
        size_t n_view;
        struct InstanceNat *nat; /* the NAT network's host side (instance-nat.c); NULL until used */
};

/* ---- instance-index.c ---------------------------------------------------------------------- */

Instance *instance_find(const InstanceManager *m, const char *id);
/* Keep the id index in step with the table: before n_instances counts i (-EEXIST, -ENOMEM), and
 * while it still does. */
int instance_index_add(InstanceManager *m, Instance *i);
void instance_index_remove(InstanceManager *m, Instance *i);
/*
 * The VF the instance's claim holds, the one place that says so: the claim's VF, or the one a
 * release has not recorded yet; NULL for none (or an mdev claim whose mdev the host does not show).
 */
const char *instance_claimed_vf(const InstanceManager *m, const Instance *i);
int claim_index_new(ClaimIndex **ret);
ClaimIndex *claim_index_free(ClaimIndex *x);

/* ---- instance-manager.c -------------------------------------------------------------------- */

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
 * where sysfs lists or mdevs decide. done (may be NULL) runs when the re-read has ended; < 0 when
 * it could not start (done never runs then).
 */
int instance_manager_reread_host(InstanceManager *m, const char *vf, GpuTrackerDone done,
                                 void *userdata);

/* Whether the instance passes a VFIO device to its VMM (VMM-10's ladder). */
bool instance_has_vfio(const Instance *i);

/* ---- instance-console.c (CONS-2) ------------------------------------------------------------ */

/* The VMM has exited: followers read the log to its end, then end. */
void instance_console_vmm_exited(Instance *i);
/* The instance goes away: every follower ends now, and the attached client. */
void instance_console_followers_free(Instance *i);

/* ---- instance-command.c (VMM-1, decision 12) ----------------------------------------------- */

/* The NIC's descriptors a start opened (NET-3): -1 where there is none. */
typedef struct InstanceNicFiles {
        int tap, vhost;
} InstanceNicFiles;

#define INSTANCE_NIC_FILES_NONE ((InstanceNicFiles){.tap = -1, .vhost = -1})

void instance_nic_files_close(InstanceNicFiles *f);

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
 * borrowed from rec, config and paths. nic holds the TAP (and vhost-net) of a record whose
 * network mode is nat or bridge, and only then (NET-3). Render it with vmm_command_argv().
 */
/*
 * DISK-8, DISK-9: a volume's drive, qcow2 over fd, its id as serial, read-only or with discard
 * and detect-zeroes unmap; the same at a start and a hot attach. Borrows v, node and fd.
 */
VmmDrive instance_volume_drive(const InstanceVolume *v, const char *node, int fd, bool direct);

int instance_command_build(const InstanceRecord *rec, const Config *config,
                           const InstanceCommandPaths *paths, const InstanceBootFiles *files,
                           const InstanceNicFiles *nic, VmmCommand *ret, char **error);

/* ---- instance-create.c's disk helpers (DISK-8, DISK-9) ----------------------------------------
 */

/*
 * DISK-9: cache.direct only where the file system takes O_DIRECT (never FUSE, which passes
 * some O_DIRECT reads and fails others); a probe read of the first block, as QEMU will read it.
 */
bool instance_takes_direct_io(int dirfd, const char *name);
/* DISK-8: who holds volume id, other than self: its read-write holder, else a read-only one. */
const Instance *instance_volume_holder(const InstanceManager *m, const char *id,
                                       const Instance *self, bool *ret_readonly);

/* ---- instance-volumes.c (DISK-8) ----------------------------------------------------------- */

/*
 * Start-up and each reconcile pass: an instance whose record has an `attaching` or `detaching`
 * volume and a live VMM, and runs no operation, is settled from query-block (DISK-8).
 */
void instance_volumes_settle(Instance *i);

/* ---- instance-nat.c (NET-4, NET-6, NET-8) -------------------------------------------------- */

typedef struct InstanceNat InstanceNat;

/*
 * Requests a pass of the NAT network's host side from the records as they are (no-op while
 * network.nat.enabled is false): one pass at a time on the helper pool, a request during a pass
 * runs one more after it. Each successful pass starts dnsmasq if it is not running, SIGHUPs it
 * when a hosts file changed and restarts it when its configuration did.
 */
void instance_nat_sync(InstanceManager *m);
/* The last pass's failure (NET-8 refuses nat creates meanwhile), NULL after a success. */
const char *instance_nat_error(const InstanceManager *m);
/*
 * NET-5: the records' NAT addresses checked again (instance_network_records_problem()); a change
 * is logged (at start-up, when a pass takes in a record, when the offending one is deleted or
 * corrected). The reason nat creates are refused for, borrowed until the next call; NULL when the
 * records agree or nat is disabled. Every sync calls it, so GET /network shows the reason.
 */
const char *instance_nat_records_recheck(InstanceManager *m);
/* NET-10: a failure of step outside a pass (a TAP step's). */
void instance_nat_count_error(InstanceManager *m, NetStep step);
/* Stops dnsmasq (SIGTERM, reaped) and frees. */
void instance_nat_free(InstanceNat *n);

/* ---- instance-network.c (SPEC §20) --------------------------------------------------------- */

/*
 * At create, before the record is first written: the record's network from the body's (want;
 * mode absent means network.default_mode), checked against the configuration (NET-1: the
 * bridge allow-list, nat enabled, the port range, host ports no other record forwards), with
 * its MAC (NET-2) and, in nat mode, the lowest free address of the subnet (NET-5). Refusals:
 * 400 invalid_request, 409 already_exists (a host port's holder named), 409
 * insufficient_resources (the subnet is full), 409 invalid_state (nat disabled), 503 while the
 * records disagree on addresses. rec's network is replaced, on failure too (it is freed with
 * rec).
 */
int instance_network_plan(InstanceManager *m, const InstanceNetwork *want, InstanceRecord *rec,
                          InstanceFailure *ret_failure, char **ret_error);

/*
 * NET-5: 0 with *ret NULL while no nat record names an address outside subnet or one another
 * holds; 1 with *ret the reason (malloc'd) when one does; -ENOMEM.
 */
int instance_network_records_problem(const InstanceManager *m, const NetSubnet *subnet, char **ret);

/* ---- the operations (instance-steps.c, instance-create.c, instance-stop.c, ...) ------------- */

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

/* A liveness probe of the instance's recorded VMM on the disk pool (VMM-16, VMM-17, VMM-18,
 * VMM-19). */
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

/* ---- the step engine (instance-steps.c) ---------------------------------------------------- */

typedef enum OpKind {
        OP_CREATE,
        OP_START,
        OP_STOP,
        OP_DELETE,
        OP_EXIT,      /* INST-19: a VMM exited unrequested */
        OP_RECOVER,   /* INST-21: QMP readiness of an adopted Creating VMM */
        OP_TERMINATE, /* INST-21: a live VMM behind a Stopped or Failed record */
        OP_RELEASE,   /* REC-4: a stale claim, its VMM provably gone */
        OP_ATTACH,    /* DISK-8: a volume attached */
        OP_DETACH,    /* DISK-8: a volume detached */
        OP_SETTLE,    /* DISK-8: an interrupted attach or detach settled from query-block */
} OpKind;

/*
 * One step of an operation. run starts the step and ends, now or later, with step_done();
 * undo (NULL: nothing to take back) ends with step_undone(). When a step fails, the undos of
 * the steps before it run in reverse, and the operation ends with the failing step's error.
 * undo_failed: the step can fail half done (a record write whose directory was made, a claim
 * saved before its configure failed), so its own undo runs first. An undo that cannot take
 * its step back (a VMM the ladder did not end) calls step_fail_alive() instead, which ends the
 * operation there.
 */
typedef struct Step {
        const char *name;
        void (*run)(Op *op);
        void (*undo)(Op *op);
        bool undo_failed;
} Step;

/*
 * NET-3 as a step of create and start, after the claim and before the spawn: the TAP, on its
 * bridge (the NAT bridge ensured first, NET-4), into op->nic; the spawn takes the descriptors.
 * A bridge-mode bridge that is missing or down is 409 invalid_state (NET-7); every other failure
 * names its step (NET-8). The undo closes the descriptors, which removes the TAP.
 */
extern const Step instance_step_tap;

/*
 * SEED-2 as a step of create and start, after the Creating record and before the spawn (which
 * opens the file): the seed rendered from the record and written crash-safely to <id>/seed.iso
 * on the disk pool, for an instance that wants one (instance_record_wants_seed()). A failure
 * (the vendor-data file unreadable, say) is a 500 naming it (instance-seed.c).
 */
extern const Step instance_step_seed;

/* A step's continuation after a record write, a job on the disk pool or a release. */
typedef void (*OpStep)(Op *op, int r, const char *error);

#define OP_STEPS_MAX 16 /* the longest list's steps, for their timings */

struct Op {
        OpKind kind;
        Instance *i; /* NULL once the instance has left the table */
        InstanceManager *m;
        InstanceDoneFunc done;
        void *userdata;
        const Step *const *steps; /* the operation's list, NULL-terminated */
        size_t at;                /* the step running, or while undoing, the undos left */
        bool undoing;
        int r; /* the failing step's */
        InstanceFailure failure;
        char *error;      /* the failing step's, kept for the operation's answer */
        bool admitted;    /* counted in admitted_unreserved (INST-10) */
        bool vmm_started; /* a VMM was spawned by this operation */
        /* PERF-7: the loop's clock (CLOCK_MONOTONIC, µs) at the spawn, and the VMM's time from
         * there to QMP readiness, logged with `instance running`; 0 until known. */
        uint64_t vmm_spawned_usec, vmm_ready_usec;
        /* Each step's time on the loop's clock (µs), logged with `instance running` so that a
         * slow create names its slow step; step_began is the running step's start. */
        uint64_t step_began, step_usec[OP_STEPS_MAX];
        InstanceState was; /* the state to return to if a stop or delete cannot be written */
        nsec_t graceful;   /* stop: VMM-9's wait before the ladder (0: the ladder only) */
        InstanceSpec spec; /* create, start: what to boot */
        OpStep next;       /* the continuation of a record write, job or release */
        void *job_data;    /* during a job's continuation: the job's data */
        int release_r;     /* a release waiting for the host's re-read */
        char *release_error;
        bool release_after_exit;  /* a release waiting at the PLACE-9 gate: DEV-10's retries */
        DeviceScan *release_scan; /* a pass's scan for the release's first probe (DEV-15) */
        /*
         * A claim released in hardware whose clearing no record write has carried yet: a failed
         * write puts it back, so that memory never hands out a VF the disk still claims.
         */
        InstanceGpu released;
        char released_vf[PCI_ADDRESS_STRLEN];
        void *spawn; /* the spawn waiting for its sockets' record write */
        /*
         * create, start: the boot files, opened by the check (INST-6) and handed to the spawn,
         * so that a path swapped in between is never opened.
         */
        InstanceBootFiles boot_files;
        InstanceNicFiles nic; /* create, start: the TAP step's, handed to the spawn (NET-3) */
        /* attach, detach, settle (DISK-8): the volume, its file and the QMP job in flight */
        char volume[INSTANCE_ID_LEN + 1];
        bool volume_readonly;
        int volume_fd;
        bool volume_direct;
        VmmBlockJob *block;
        bool keep_intent; /* a detach whose outcome is unknown: the settle decides */
};

/* A new operation, the instance's one (INST-9); NULL without memory. */
Op *op_new(InstanceManager *m, Instance *i, OpKind kind, InstanceDoneFunc done, void *userdata);
/* op_new() for an entry point: without memory, the refusal. */
Op *op_begin(InstanceManager *m, Instance *i, OpKind kind, InstanceDoneFunc done, void *userdata,
             InstanceFailure *ret_failure, char **ret_error);
/* Runs steps (NULL-terminated) from the first; the operation succeeds after the last. */
void op_run(Op *op, const Step *const *steps);
/* The end of a step's run: r >= 0 goes on, r < 0 undoes and ends with failure and error. */
void step_done(Op *op, int r, InstanceFailure failure, const char *error);
/* An OpStep that goes on to the next step whatever the write, job or release did. */
void step_next_anyway(Op *op, int r, const char *error);
/* step_done() with the error as "<prefix>: <error>" (error_prefix()). */
void step_failed(Op *op, int r, InstanceFailure failure, const char *error, const char *fmt, ...)
    _printf_(5, 6);
/* The end of an undo: the next one back runs. */
void step_undone(Op *op);
/*
 * The VMM may be alive (INST-14, INST-16, VMM-11): record and claim stay, in Failed, and no
 * further undo runs. From a run or an undo.
 */
void step_fail_alive(Op *op, InstanceFailure failure, const char *error);
/* Ends the operation at once, outside the step list. */
void op_succeed(Op *op);
void op_fail(Op *op, int r, InstanceFailure failure, const char *error);
/* error may be op->error itself. */
void op_set_error(Op *op, const char *error);

/* Writes the record; next gets the write's result. */
void op_write_then(Op *op, OpStep next);
/* The end of a step whose run is a record write: a failure reads "save instance record: ...". */
void step_written(Op *op, int r, const char *error);
typedef int (*JobFunc)(void *data, char **error);
/* Runs run(data) on the disk pool; next gets its result. data is freed with free_data. */
void op_job_then(Op *op, JobFunc run, void *data, void (*free_data)(void *), OpStep next);
/* The same on the helper pool, for helper programs (qemu-img), with a deadline: a job past it
 * continues with -ETIMEDOUT and no job data. */
void op_helper_job_then(Op *op, nsec_t timeout, JobFunc run, void *data, void (*free_data)(void *),
                        OpStep next);
/* Releases the claim if there is one through the PLACE-9 gate; next gets the result. */
void op_release_then(Op *op, bool after_vmm_exit, OpStep next);
/* Removes the instance's directory (INST-18) on the disk pool. */
void op_remove_then(Op *op, OpStep next);
/* The instance leaves the table; the operation answers without a record. */
void op_drop_instance(Op *op);
/* op_drop_instance(), then FLEET-6's release of the instance's Placement consumer. */
void op_drop_releasing_consumer(Op *op);
/* VMM-15: the socket files go with the VMM; the runtime directory with them. */
void instance_remove_runtime(Instance *i);
/* rec->error = a copy of text (NULL: none). */
int instance_set_error(InstanceRecord *rec, const char *text);

void instance_refuse(InstanceFailure f, InstanceFailure *ret_failure, char **ret_error,
                     const char *fmt, ...) _printf_(4, 5);
/* The instance if it exists and runs no operation (INST-9), else the refusal. */
Instance *instance_find_idle(InstanceManager *m, const char *id, InstanceFailure *ret_failure,
                             char **ret_error);

/* Steps several operations share. */
extern const Step step_release_gone;  /* the VMM is gone: runtime files, Vmm and claim go */
extern const Step step_write_cleared; /* the hypervisor fields cleared, the record written */
extern const Step step_write_running; /* Running written */
/* A stop's and a delete's lists; from STEPS_RESUME on, they resume at the VMM stop (INST-21). */
extern const Step *const stop_steps[];
extern const Step *const delete_steps[];
#define STEPS_RESUME 1

/* ---- instance-create.c --------------------------------------------------------------------- */

void spawn_data_free(void *data);
