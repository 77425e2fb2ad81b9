/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The asynchronous device layer (DEV-2, DEV-10, DEV-11, DEV-17, DEV-19, GEN-4): operations run
 * as jobs on the sysfs worker pool, and everything here runs on the owner's thread.
 *
 * An operation holds its key (the VF) from its start until it ends, across every job, poll and
 * retry it makes, so two operations on one VF never overlap (DEV-11), even between the jobs of
 * one of them. The pool's own per-key order covers the rest: a job abandoned at its deadline
 * still holds the key in the pool, and the VF counts as uncertain until it returns (GEN-4).
 */
#include <inttypes.h>

#include "device.h"
#include "gpu/gpu.h"

typedef enum OpKind {
        OP_CONFIGURE,
        OP_MDEV_CREATE,
        OP_RELEASE_VFIO,
        OP_RELEASE_MDEV,
} OpKind;

/* What one job does. */
typedef enum Step {
        STEP_CONFIGURE,
        STEP_MDEV_CREATE,
        STEP_RELEASE_VFIO,
        STEP_MDEV_POLL, /* DEV-17: has the driver removed the mdev by itself? */
        STEP_MDEV_REMOVE,
} Step;

typedef struct Op Op;
struct Op {
        Op *next; /* every operation, in submission order */
        DeviceOps *owner;
        OpKind kind;
        bool active;  /* started: holds its key */
        bool waiting; /* active, and waiting for due to run next_step */
        nsec_t due;
        Step next_step;

        char *key, *vf, *type, *uuid, *instance_id;
        bool after_vmm_exit;
        bool reset;
        DeviceScan *scan; /* for the first job only */

        unsigned attempts; /* write-step jobs that ran */
        unsigned polls;    /* DEV-17 polls that found the mdev still there */
        uint32_t type_id;  /* vendor release: the type found */

        DeviceDoneFunc done;
        void *userdata;
};

struct DeviceOps {
        DeviceOpsConfig config;
        const MonoClock *clock;
        bool system_clock;
        sd_event_source *event_source; /* the timer of the next due step (loop_timer_add()) */
        nsec_t armed;
        Op *ops;
};

/* The data of one job: copies, since an abandoned job may outlive its operation. */
typedef struct Job {
        Step step;
        DeviceRoots roots;
        DeviceScan *scan;
        char *vf, *type, *uuid;
        DeviceFailure failure; /* set by run() on failure */
        uint32_t type_id;      /* STEP_RELEASE_VFIO: the type it released */
} Job;

const char *device_outcome_to_string(DeviceOutcome o)
{
        static const char *const names[] = {
            [DEVICE_OUTCOME_CONFIGURED] = "configured",
            [DEVICE_OUTCOME_UNCHANGED] = "unchanged",
            [DEVICE_OUTCOME_RELEASED] = "released",
            [DEVICE_OUTCOME_NOT_CONFIGURED] = "not_configured",
            [DEVICE_OUTCOME_FAILED] = "failed",
        };
        return (unsigned)o < ELEMENTSOF(names) ? names[o] : "failed";
}

/* ---- jobs (worker threads) ----------------------------------------------------------------- */

static void job_free(void *data)
{
        Job *j = data;
        if (!j)
                return;
        device_scan_unref(j->scan);
        free(j->vf);
        free(j->type);
        free(j->uuid);
        free(j);
}

static void job_freep(Job **j)
{
        job_free(*j);
}

static int job_run(void *data, char **error)
{
        Job *j = data;
        const VfioScan *scan = device_scan_get(j->scan);

        switch (j->step) {
        case STEP_CONFIGURE:
                return device_vfio_configure(&j->roots, scan, j->vf, j->type, &j->failure, error);
        case STEP_MDEV_CREATE:
                return device_mdev_create(j->roots.sysfs, j->vf, j->type, j->uuid, &j->failure,
                                          error);
        case STEP_RELEASE_VFIO:
                return device_vfio_release(&j->roots, scan, j->vf, &j->type_id, &j->failure, error);
        case STEP_MDEV_POLL:
                return device_mdev_exists(j->roots.sysfs, j->uuid, error);
        case STEP_MDEV_REMOVE:
                break;
        }
        return device_mdev_remove(&j->roots, scan, j->uuid, &j->failure, error);
}

static bool step_writes(Step s)
{
        return s != STEP_MDEV_POLL;
}

/* ---- the timer ----------------------------------------------------------------------------- */

static nsec_t next_due(const DeviceOps *o)
{
        nsec_t d = NSEC_INFINITY;
        for (const Op *op = o->ops; op; op = op->next)
                if (op->waiting && op->due < d)
                        d = op->due;
        return d;
}

static void arm_timer(DeviceOps *o)
{
        if (!o->system_clock || !o->event_source)
                return;
        nsec_t d = next_due(o);
        if (d == o->armed)
                return;
        loop_timer_arm(o->event_source, d);
        o->armed = d;
}

/* ---- operations ---------------------------------------------------------------------------- */

static Op *op_free(Op *op)
{
        if (op) {
                device_scan_unref(op->scan);
                free(op->key);
                free(op->vf);
                free(op->type);
                free(op->uuid);
                free(op->instance_id);
                free(op);
        }
        return NULL;
}

static void op_freep(Op **op)
{
        op_free(*op);
}

static void op_unlink(DeviceOps *o, Op *op)
{
        for (Op **p = &o->ops; *p; p = &(*p)->next)
                if (*p == op) {
                        *p = op->next;
                        return;
                }
}

static bool key_busy(const DeviceOps *o, const char *key)
{
        for (const Op *op = o->ops; op; op = op->next)
                if (op->active && streq(op->key, key))
                        return true;
        return false;
}

bool device_ops_is_busy(DeviceOps *o, const char *key)
{
        for (const Op *op = o->ops; op; op = op->next)
                if (key && streq(op->key, key))
                        return true;
        return false;
}

/* "VF <vf>", or "mdev <uuid>" when the VF is not known: how messages name the device. */
static const char *op_object(const Op *op, char *buf, size_t size)
{
        if (op->vf)
                snprintf(buf, size, "VF %s", op->vf);
        else
                snprintf(buf, size, "mdev %s", op->uuid);
        return buf;
}

/* DEV-19: one info line per operation, whatever its outcome. */
static void op_log(const Op *op, DeviceOutcome outcome, const char *error)
{
        const char *message = op->kind == OP_CONFIGURE || op->kind == OP_MDEV_CREATE
                                  ? "configure vGPU"
                              : op->reset ? "reset vGPU"
                                          : "release vGPU";
        char type[sizeof "4294967295"], attempts[16];
        const char *type_value = op->type;
        if (op->kind == OP_RELEASE_VFIO && op->type_id != 0) {
                snprintf(type, sizeof type, "%" PRIu32, op->type_id);
                type_value = type;
        }
        snprintf(attempts, sizeof attempts, "%u", op->attempts);
        bool releasing = op->kind == OP_RELEASE_VFIO || op->kind == OP_RELEASE_MDEV;

        log_line(LOG_LEVEL_INFO, 0, message, "vf", op->vf, "type", type_value, "mdev_uuid",
                 op->uuid, "instance_id", op->instance_id, "outcome",
                 device_outcome_to_string(outcome), "attempts", releasing ? attempts : NULL,
                 "error", error, NULL);
}

/*
 * Ends an operation: logs it, takes it out, runs its completion. error is the failure's
 * message (r < 0), never NULL then: the pool's done(), op_start() and op_submit_step() all
 * give one. The caller then calls start_pending(), since the key is free now.
 */
static void op_finish(DeviceOps *o, Op *op, int r, DeviceOutcome outcome, DeviceFailureKind kind,
                      const char *error)
{
        if (r < 0)
                outcome = DEVICE_OUTCOME_FAILED;
        else
                error = NULL;
        op_log(op, outcome, error);
        op_unlink(o, op);

        DeviceResult result = {
            .r = r,
            .outcome = outcome,
            .kind = kind,
            .error = error,
            .vf = op->vf,
            .type_id = op->type_id,
            .attempts = op->attempts,
        };
        if (op->done)
                op->done(&result, op->userdata);
        op_free(op);
}

static void job_done(int r, void *data, const char *error, void *userdata);

/* Hands one step of op to the pool. The operation's shared scan serves its first job only. */
static int op_submit_step(DeviceOps *o, Op *op, Step step, char **error)
{
        _cleanup_(job_freep) Job *j = calloc(1, sizeof *j);
        if (!j)
                return error_set_oom(error);
        j->step = step;
        j->roots = o->config.roots;
        if ((op->vf && !(j->vf = strdup(op->vf))) || (op->type && !(j->type = strdup(op->type))) ||
            (op->uuid && !(j->uuid = strdup(op->uuid))))
                return error_set_oom(error);
        if (step_writes(step))
                j->scan = TAKE_PTR(op->scan);

        WorkerJob job = {
            .key = op->key,
            .timeout = o->config.sysfs_timeout,
            .run = job_run,
            .done = job_done,
            .data = j,
            .free_data = job_free,
            .userdata = op,
        };
        int r = worker_pool_submit(o->config.pool, &job, error);
        if (r < 0) {
                /* The shared scan stays with the operation; the job never ran. */
                if (!op->scan)
                        op->scan = TAKE_PTR(j->scan);
                return r;
        }
        TAKE_PTR(j);
        /* After the first job the shared scan is stale: later attempts take fresh ones. */
        op->scan = device_scan_unref(op->scan);
        return 0;
}

static Step first_step(const Op *op)
{
        switch (op->kind) {
        case OP_CONFIGURE:
                return STEP_CONFIGURE;
        case OP_MDEV_CREATE:
                return STEP_MDEV_CREATE;
        case OP_RELEASE_VFIO:
                return STEP_RELEASE_VFIO;
        case OP_RELEASE_MDEV:
                break;
        }
        return op->after_vmm_exit ? STEP_MDEV_POLL : STEP_MDEV_REMOVE;
}

/* GEN-4, then DEV-2 for an operation that configures: why it may not start now. */
static DeviceFailureKind refusal_kind(DeviceOps *o, const char *key, const char *vf,
                                      bool configures)
{
        if (worker_pool_key_is_uncertain(o->config.pool, key))
                return DEVICE_FAILURE_UNCERTAIN;
        if (!configures)
                return DEVICE_FAILURE_ERROR;
        /* DEV-2: the last word on the loop before anything is written. The store comes first:
         * while it is unavailable, its quarantine answers mean nothing. */
        const DeviceGuard *g = &o->config.guard;
        if (g->store_unavailable && g->store_unavailable(g->userdata))
                return DEVICE_FAILURE_STORE;
        if (g->is_quarantined && g->is_quarantined(g->userdata, vf))
                return DEVICE_FAILURE_QUARANTINED;
        return DEVICE_FAILURE_ERROR;
}

DeviceFailureKind device_ops_refusal_kind(DeviceOps *o, const char *vf, bool configures)
{
        return refusal_kind(o, vf, vf, configures);
}

/*
 * Starts op: the GEN-4 and DEV-2 refusals, then its first job. On failure *kind says what
 * refused it (a failure report, written only then).
 */
static int op_start(DeviceOps *o, Op *op, DeviceFailureKind *kind, char **error)
{
        const DeviceGuard *g = &o->config.guard;
        char object[sizeof "mdev " + 40];

        switch (refusal_kind(o, op->key, op->vf,
                             op->kind == OP_CONFIGURE || op->kind == OP_MDEV_CREATE)) {
        case DEVICE_FAILURE_UNCERTAIN:
                *kind = DEVICE_FAILURE_UNCERTAIN;
                return error_set(error, -EAGAIN,
                                 "%s is uncertain: an earlier sysfs call on it has not returned",
                                 op_object(op, object, sizeof object));
        case DEVICE_FAILURE_STORE:
                *kind = DEVICE_FAILURE_STORE;
                return error_set(error, -EAGAIN, "%s", g->store_unavailable(g->userdata));
        case DEVICE_FAILURE_QUARANTINED:
                *kind = DEVICE_FAILURE_QUARANTINED;
                return error_set(error, -EPERM, "%s vGPU on VF %s is quarantined",
                                 op->kind == OP_CONFIGURE ? "vendor VFIO" : "mdev", op->vf);
        default:
                break;
        }

        int r = op_submit_step(o, op, first_step(op), error);
        if (r < 0) {
                *kind = DEVICE_FAILURE_ERROR;
                return r;
        }
        op->active = true;
        return 0;
}

/* Starts every operation whose key has become free, oldest first. */
static void start_pending(DeviceOps *o)
{
        for (;;) {
                Op *next = NULL;
                for (Op *op = o->ops; op && !next; op = op->next)
                        if (!op->active && !key_busy(o, op->key))
                                next = op;
                if (!next)
                        break;

                _cleanup_free_ char *e = NULL;
                DeviceFailureKind kind;
                int r = op_start(o, next, &kind, &e);
                if (r < 0)
                        op_finish(o, next, r, DEVICE_OUTCOME_FAILED, kind, e);
        }
        arm_timer(o);
}

static void op_wait(DeviceOps *o, Op *op, Step step)
{
        op->waiting = true;
        op->next_step = step;
        nsec_t now = mono_clock_now(o->clock);
        op->due = now > NSEC_INFINITY - o->config.retry_interval ? NSEC_INFINITY - 1
                                                                 : now + o->config.retry_interval;
}

/* DEV-10: a driver that refused or did not yet finish its teardown gets another chance. */
static bool should_retry(const DeviceOps *o, const Op *op, DeviceFailureKind kind)
{
        return op->after_vmm_exit && op->attempts < o->config.retry_attempts &&
               (kind == DEVICE_FAILURE_REFUSED || kind == DEVICE_FAILURE_UNVERIFIED);
}

static void job_done(int r, void *data, const char *error, void *userdata)
{
        Op *op = userdata;
        DeviceOps *o = op->owner;
        Job *j = data;

        if (!j) {
                /* The pool ended the job itself: past its deadline (GEN-4), or never run. */
                op_finish(o, op, r, DEVICE_OUTCOME_FAILED,
                          r == -ETIMEDOUT ? DEVICE_FAILURE_TIMEOUT : DEVICE_FAILURE_ERROR, error);
                start_pending(o);
                return;
        }

        if (step_writes(j->step))
                op->attempts++;
        if (r < 0 && j->step != STEP_MDEV_POLL && j->failure.type_id != 0)
                op->type_id = j->failure.type_id;

        DeviceOutcome outcome = DEVICE_OUTCOME_FAILED;
        switch (j->step) {
        case STEP_CONFIGURE:
        case STEP_MDEV_CREATE:
                outcome = r == 0 && j->step == STEP_CONFIGURE ? DEVICE_OUTCOME_UNCHANGED
                                                              : DEVICE_OUTCOME_CONFIGURED;
                break;
        case STEP_RELEASE_VFIO:
        case STEP_MDEV_REMOVE:
                if (r >= 0 && j->step == STEP_RELEASE_VFIO)
                        op->type_id = j->type_id;
                if (r < 0 && should_retry(o, op, j->failure.kind)) {
                        op_wait(o, op, j->step);
                        arm_timer(o);
                        return;
                }
                outcome = r > 0 ? DEVICE_OUTCOME_RELEASED : DEVICE_OUTCOME_NOT_CONFIGURED;
                break;
        case STEP_MDEV_POLL:
                if (r > 0) {
                        /* DEV-17: give the driver's own cleanup its polls, then remove. */
                        op->polls++;
                        op_wait(o, op,
                                op->polls < o->config.retry_attempts ? STEP_MDEV_POLL
                                                                     : STEP_MDEV_REMOVE);
                        arm_timer(o);
                        return;
                }
                outcome = DEVICE_OUTCOME_NOT_CONFIGURED; /* the driver removed it */
                break;
        }
        op_finish(o, op, r, outcome, r < 0 ? j->failure.kind : DEVICE_FAILURE_ERROR, error);
        start_pending(o);
}

int device_ops_dispatch(DeviceOps *o)
{
        int n = 0;

        /* One at a time: a failing submit finishes an operation, which changes the list. */
        for (;;) {
                nsec_t now = mono_clock_now(o->clock);
                Op *due = NULL;
                for (Op *op = o->ops; op && !due; op = op->next)
                        if (op->waiting && op->due <= now)
                                due = op;
                if (!due)
                        break;

                due->waiting = false;
                n++;
                _cleanup_free_ char *e = NULL;
                int r = op_submit_step(o, due, due->next_step, &e);
                if (r < 0) {
                        op_finish(o, due, r, DEVICE_OUTCOME_FAILED, DEVICE_FAILURE_ERROR, e);
                        start_pending(o);
                }
        }
        arm_timer(o);
        return n;
}

int device_ops_get_next_wakeup(DeviceOps *o, nsec_t *ret)
{
        nsec_t d = next_due(o);
        if (d == NSEC_INFINITY)
                return 0;
        *ret = d;
        return 1;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata)
{
        DeviceOps *o = userdata;
        o->armed = NSEC_INFINITY; /* a one-shot: disarmed now */
        (void)device_ops_dispatch(o);
        return 0;
}

int device_ops_attach_event(DeviceOps *o, sd_event *event)
{
        if (!o)
                return -EINVAL;
        int r = loop_timer_add(event, &o->event_source, on_timer, o);
        if (r < 0)
                return r;
        arm_timer(o); /* what was submitted before */
        return 0;
}

/* ---- construction -------------------------------------------------------------------------- */

int device_ops_new(const DeviceOpsConfig *config, DeviceOps **ret)
{
        if (!config || !config->pool || !config->roots.sysfs)
                return -EINVAL;

        _cleanup_free_ DeviceOps *o = calloc(1, sizeof *o);
        if (!o)
                return -ENOMEM;
        o->config = *config;
        if (o->config.sysfs_timeout == 0)
                o->config.sysfs_timeout = DEVICE_SYSFS_TIMEOUT_DEFAULT;
        if (o->config.retry_interval == 0)
                o->config.retry_interval = DEVICE_RETRY_INTERVAL_DEFAULT;
        if (o->config.retry_attempts == 0)
                o->config.retry_attempts = DEVICE_RETRY_ATTEMPTS_DEFAULT;
        o->clock = config->clock ? config->clock : &mono_clock_system;
        o->system_clock = o->clock == &mono_clock_system;
        o->armed = NSEC_INFINITY;
        *ret = TAKE_PTR(o);
        return 0;
}

DeviceOps *device_ops_free(DeviceOps *o)
{
        if (!o)
                return NULL;
        while (o->ops) {
                Op *op = o->ops;
                o->ops = op->next;
                op_free(op);
        }
        sd_event_source_disable_unref(o->event_source);
        free(o);
        return NULL;
}

/* ---- submission ---------------------------------------------------------------------------- */

static int op_new(DeviceOps *o, OpKind kind, const char *vf, const char *type, const char *uuid,
                  const char *instance_id, DeviceDoneFunc done, void *userdata, Op **ret)
{
        _cleanup_(op_freep) Op *op = calloc(1, sizeof *op);
        if (!op)
                return -ENOMEM;
        op->owner = o;
        op->kind = kind;
        op->done = done;
        op->userdata = userdata;
        if ((vf && !(op->vf = strdup(vf))) || (type && !(op->type = strdup(type))) ||
            (uuid && !(op->uuid = strdup(uuid))) ||
            (instance_id && !(op->instance_id = strdup(instance_id))))
                return -ENOMEM;
        int r = vf ? strprintf(&op->key, "%s", vf) : strprintf(&op->key, "mdev:%s", uuid);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(op);
        return 0;
}

/* Queues op (taking it), and starts it when its key is free. */
static int op_enqueue(DeviceOps *o, Op *op, char **error)
{
        Op **tail = &o->ops;
        while (*tail)
                tail = &(*tail)->next;
        *tail = op;
        if (key_busy(o, op->key))
                return 0;

        _cleanup_free_ char *e = NULL;
        DeviceFailureKind kind;
        int r = op_start(o, op, &kind, &e);
        if (r < 0) {
                /* Refused at once: the caller hears it here, and done() never runs. */
                op_log(op, DEVICE_OUTCOME_FAILED, e);
                op_unlink(o, op);
                op_free(op);
                return error_set(error, r, "%s", e);
        }
        return 0;
}

/* A request the primitives would refuse is refused here, before it is queued. */
static int check_request(Op *op, char **error)
{
        if (op->vf && !pci_address_is_valid(op->vf))
                return error_set(error, -EINVAL, "invalid VF address \"%s\"", op->vf);
        switch (op->kind) {
        case OP_CONFIGURE: {
                uint32_t t;
                if (!op->type || parse_uint32(op->type, &t) < 0 || t == 0)
                        return error_set(error, -EINVAL,
                                         "invalid vendor VFIO vGPU profile type \"%s\"",
                                         op->type ? op->type : "");
                op->type_id = t;
                break;
        }
        case OP_MDEV_CREATE:
                if (!device_mdev_uuid_is_valid(op->uuid))
                        return error_set(error, -EINVAL, "invalid mdev UUID \"%s\"",
                                         op->uuid ? op->uuid : "");
                break;
        case OP_RELEASE_VFIO:
                break;
        case OP_RELEASE_MDEV:
                if (!op->uuid)
                        return error_set(error, -EINVAL, "invalid mdev UUID \"\"");
                break;
        }
        if (!op->vf && op->kind != OP_RELEASE_MDEV)
                return error_set(error, -EINVAL, "invalid VF address \"\"");
        return 0;
}

static int submit(DeviceOps *o, OpKind kind, const char *vf, const char *type, const char *uuid,
                  const char *instance_id, const DeviceReleaseRequest *release, DeviceDoneFunc done,
                  void *userdata, char **error)
{
        _cleanup_(op_freep) Op *op = NULL;
        _cleanup_free_ char *e = NULL;
        int r = op_new(o, kind, vf, type, uuid, instance_id, done, userdata, &op);
        if (r < 0)
                return error_set(error, r, "%s", strerror(-r));
        if (release) {
                op->after_vmm_exit = release->after_vmm_exit;
                op->reset = !release->instance_id;
                op->scan = device_scan_ref(release->scan);
        }
        r = check_request(op, &e);
        if (r < 0) {
                op_log(op, DEVICE_OUTCOME_FAILED, e);
                return error_set(error, r, "%s", e);
        }
        return op_enqueue(o, TAKE_PTR(op), error);
}

int device_ops_configure(DeviceOps *o, const char *vf, const char *type, const char *instance_id,
                         DeviceDoneFunc done, void *userdata, char **error)
{
        return submit(o, OP_CONFIGURE, vf, type, NULL, instance_id, NULL, done, userdata, error);
}

int device_ops_mdev_create(DeviceOps *o, const char *vf, const char *profile, const char *uuid,
                           const char *instance_id, DeviceDoneFunc done, void *userdata,
                           char **error)
{
        return submit(o, OP_MDEV_CREATE, vf, profile, uuid, instance_id, NULL, done, userdata,
                      error);
}

int device_ops_release(DeviceOps *o, const DeviceReleaseRequest *request, DeviceDoneFunc done,
                       void *userdata, char **error)
{
        if (!request)
                return error_set(error, -EINVAL, "no release request");

        /* DISC-22: the claim's recorded framework decides, whatever the host runs now. */
        const DeviceClaim *c = &request->claim;
        GpuFramework f;
        _cleanup_free_ char *e = NULL;
        int r = gpu_framework_from_string(c->framework ? c->framework : "", &f, &e);
        if (r < 0) {
                log_line(LOG_LEVEL_INFO, 0, request->instance_id ? "release vGPU" : "reset vGPU",
                         "vf", c->vf, "mdev_uuid", c->mdev_uuid, "instance_id",
                         request->instance_id, "outcome",
                         device_outcome_to_string(DEVICE_OUTCOME_FAILED), "error", e, NULL);
                return error_set(error, r, "%s", e);
        }
        if (f == GPU_FRAMEWORK_MDEV)
                return submit(o, OP_RELEASE_MDEV, c->vf, NULL, c->mdev_uuid, request->instance_id,
                              request, done, userdata, error);
        return submit(o, OP_RELEASE_VFIO, c->vf, NULL, NULL, request->instance_id, request, done,
                      userdata, error);
}
