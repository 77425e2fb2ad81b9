/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The claim flow (claim.h). Everything here runs on the owner's thread; the blocking parts
 * (discovery, the PLACE-16 scan) run on the worker pool, NVML queries on the NVML thread and
 * writes through DeviceOps, and each posts back into process(), which moves every claim as far
 * as it can go.
 */
#include "claim.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sys/random.h>

#define CLAIM_DEFAULT_NVML_TIMEOUT (5 * NSEC_PER_SEC)
/* How often blocked work (a foreign write, a refresh in the NVML slot) is looked at again. */
#define CLAIM_POLL_INTERVAL (5 * NSEC_PER_MSEC)

typedef enum ClaimState {
        CLAIM_DISCOVER, /* waiting for a discovery that started after claim->discovery_floor */
        CLAIM_WAIT,     /* waiting for NVML rounds or pending configures (PLACE-8..10) */
        CLAIM_BUSY,     /* a step of its own is in flight: reset, save, configure, clear, scan */
        CLAIM_FINISHED, /* done() ran; freed at the end of process() */
} ClaimState;

typedef enum WriteKind {
        WRITE_CONFIGURE,
        WRITE_RESET_DIRTY,   /* PLACE-11: the chosen dirty VF, before the claim is saved */
        WRITE_RESET_REFUSED, /* PLACE-17: the VF that refused the type */
        WRITE_RESET_PLACE16, /* PLACE-16: every dirty VF, one shared scan */
} WriteKind;

typedef struct WriteOp WriteOp;
struct WriteOp {
        WriteOp *next;
        Claim *claim;
        WriteKind kind;
        char vf[PCI_ADDRESS_STRLEN];
        char gpu[PCI_ADDRESS_STRLEN];
        char *mdev_uuid;  /* resets of an mdev VF */
        DeviceScan *scan; /* PLACE-16: the shared scan */
        bool started;
};

struct Claim {
        Claim *next;
        Claimer *cl;
        char *instance_id, *profile, *mdev_uuid;
        char *only_gpu; /* FLEET-6's PF restriction; NULL: none */
        ClaimDoneFunc done;
        void *userdata;
        ClaimState state;
        nsec_t entered;
        uint64_t discovery_floor; /* needs a discovery numbered above this */
        uint64_t round_floor;     /* needs NVML answers from rounds numbered above this */
        nsec_t wait_deadline;     /* PLACE-8; 0 while not waiting */
        bool rediscover;          /* PLACE-10: re-read the lists once the pending configure ends */
        bool force_full;          /* PLACE-16: the next discovery reads everything */
        bool needs_full;          /* the discovery it waits for must be a full one */
        bool discovered_full;     /* its last discovery read the lists too (PLACE-5) */
        unsigned selections;

        /* the reservation (PLACE-2) */
        bool reserved;
        bool write_done;
        char vf[PCI_ADDRESS_STRLEN];
        char gpu[PCI_ADDRESS_STRLEN];
        char *chosen_profile; /* the name as the chosen GPU's catalog has it */
        uint32_t type_id;
        char *mdev_type;
        uint64_t framebuffer_mib;
        bool saved;
        Timestamp claimed_at;
        uint64_t nvml_ms;

        char **exclude;
        bool place16_done;
        unsigned place16_pending, place16_ok;
        unsigned capacity_refusals;
        char *refused_dirty_vf, *refused_dirty_error; /* PLACE-12 */

        /* a failure waiting for its cleanup (clear) before done() */
        int fail_r;
        ClaimFailure fail_kind;
        char *fail_error;
        bool reselect_after_clear;
};

typedef struct GpuRoundState {
        char pf[PCI_ADDRESS_STRLEN];
        uint64_t submitted; /* queries for this GPU submitted so far: the next one is +1 */
        bool querying;
        bool has_answer;
        uint64_t answer_q;      /* this GPU's index of the answered query */
        uint64_t answer_global; /* the round it came with */
        NvmlPlacements *placements;
        size_t n_placements;
} GpuRoundState;

typedef struct WriteRecord {
        char gpu[PCI_ADDRESS_STRLEN];
        uint32_t type_id;
        uint64_t done_at;
} WriteRecord;

struct Claimer {
        Root *sysfs;
        const Root *proc;
        char *dev_root;
        WorkerPool *pool;
        DeviceOps *ops;
        NvmlClient *nvml;
        nsec_t nvml_timeout, sysfs_timeout;
        PlacementPolicy policy;
        PlacementPicker picker;
        PlacementRandom random;
        DeviceGuard guard;
        ClaimerOwner owner;
        const Clock *clock;
        const MonoClock *mono;

        /* The Claimer's turns on the owner's loop: soon after notify(), and at its next deadline.
         */
        sd_event_source *wake, *timer;
        Claim *claims; /* in entry order */
        WriteOp *writes;
        WriteGate *gate; /* the owner's writes (borrowed) */

        GpuTracker *tracker; /* the host (borrowed) */
        uint64_t discoveries_started, discoveries_done;
        bool discovering, discovering_full;

        uint64_t rounds; /* rounds submitted */
        bool round_in_flight;
        GpuRoundState *gpus;
        size_t n_gpus;
        WriteRecord *records;
        size_t n_records;

        bool refresh_wanted, refresh_init, refresh_started_by_us;
        bool processing, again;
        ClaimerStats stats;
        uint64_t generation; /* reservations made or dropped (PERF-1) */
};

static void process(Claimer *cl);

/* ---- pure helpers -------------------------------------------------------------------------- */

const char *claim_failure_to_string(ClaimFailure f)
{
        static const char *const names[_CLAIM_FAILURE_MAX] = {
            [CLAIM_FAILURE_NONE] = "none",
            [CLAIM_FAILURE_UNKNOWN_PROFILE] = "unknown_profile",
            [CLAIM_FAILURE_INSUFFICIENT_RESOURCES] = "insufficient_resources",
            [CLAIM_FAILURE_PLACEMENT_DISABLED] = "placement_disabled",
            [CLAIM_FAILURE_INTERNAL] = "internal",
        };
        return f < _CLAIM_FAILURE_MAX ? names[f] : "internal";
}

uint32_t claim_count_unreflected(const ClaimWriteMark *marks, size_t n, uint32_t type_id,
                                 uint64_t round)
{
        uint32_t k = 0;
        for (size_t i = 0; i < n; i++) {
                if (marks[i].type_id != type_id)
                        continue;
                /* A write that completed while `round` had not been submitted is not in it. */
                if (!marks[i].write_done || marks[i].done_at >= round)
                        k++;
        }
        return k;
}

/* ---- small state helpers ------------------------------------------------------------------- */

static const GpuHost *host(Claimer *cl)
{
        return gpu_tracker_host(cl->tracker);
}

static bool host_is_mdev(Claimer *cl)
{
        return host(cl) && host(cl)->framework == GPU_FRAMEWORK_MDEV;
}

static nsec_t now_mono(Claimer *cl)
{
        return mono_clock_now(cl->mono);
}

static void notify(Claimer *cl)
{
        loop_wake(cl->wake);
}

static GpuRoundState *round_gpu(Claimer *cl, const char *pf, bool create)
{
        for (size_t i = 0; i < cl->n_gpus; i++)
                if (streq(cl->gpus[i].pf, pf))
                        return &cl->gpus[i];
        if (!create)
                return NULL;
        GpuRoundState *g = realloc(cl->gpus, (cl->n_gpus + 1) * sizeof *g);
        if (!g)
                return NULL;
        cl->gpus = g;
        g = &cl->gpus[cl->n_gpus++];
        *g = (GpuRoundState){};
        snprintf(g->pf, sizeof g->pf, "%s", pf);
        return g;
}

static bool vf_is_reserved(Claimer *cl, const char *vf, const Claim **ret)
{
        for (Claim *c = cl->claims; c; c = c->next)
                if (c->reserved && streq(c->vf, vf)) {
                        if (ret)
                                *ret = c;
                        return true;
                }
        return false;
}

/* A write of ours on one of pf's VFs has been started and not ended. */
static bool gpu_has_write_started(Claimer *cl, const char *pf)
{
        for (WriteOp *w = cl->writes; w; w = w->next)
                if (w->started && streq(w->gpu, pf))
                        return true;
        return false;
}

static bool any_write_started(Claimer *cl)
{
        for (WriteOp *w = cl->writes; w; w = w->next)
                if (w->started)
                        return true;
        return false;
}

/* PLACE-9: anything on pf's VFs in DeviceOps (ours or the owner's) counts as a write. */
static bool gpu_is_writing(Claimer *cl, const char *pf)
{
        if (gpu_has_write_started(cl, pf))
                return true;
        const GpuHost *h = host(cl);
        for (size_t i = 0; h && i < h->n_vfs; i++)
                if (streq(h->vfs[i].parent, pf) && device_ops_is_busy(cl->ops, h->vfs[i].address))
                        return true;
        return false;
}

static bool refresh_running(Claimer *cl)
{
        return cl->nvml && nvml_client_refresh_is_running(cl->nvml);
}

/* An NVML query about pf runs: a round covering it, or a refresh (every GPU). */
static bool gpu_query_running(Claimer *cl, const char *pf)
{
        GpuRoundState *g = round_gpu(cl, pf, false);
        return refresh_running(cl) || (g && g->querying);
}

/* ---- finishing claims ---------------------------------------------------------------------- */

static void drop_reservation(Claim *c)
{
        if (c->reserved)
                c->cl->generation++;
        c->reserved = false;
        c->write_done = false;
}

/* error is the failure's message (r < 0), never NULL then; ClaimResult.error passes it on. */
static void claim_finish(Claim *c, int r, ClaimFailure kind, const char *error)
{
        Claimer *cl = c->cl;

        /* PLACE-2: an abandoned reservation is dropped in the same step as the failure. */
        if (r < 0)
                drop_reservation(c);
        c->state = CLAIM_FINISHED;
        c->wait_deadline = 0;

        ClaimResult res = {
            .r = r,
            .profile = c->profile,
            .selections = c->selections,
        };
        if (r < 0) {
                res.failure = kind != CLAIM_FAILURE_NONE ? kind : CLAIM_FAILURE_INTERNAL;
                res.error = error;
                cl->stats.claims_failed++;
                /* The owner logs the failure with its request; this is for tracing. */
                log_line(LOG_LEVEL_DEBUG, 0, "vGPU claim failed", "instance_id", c->instance_id,
                         "profile", c->profile, "failure", claim_failure_to_string(res.failure),
                         "error", res.error, NULL);
        } else {
                char ms[32];

                res.vf = c->vf;
                res.gpu = c->gpu;
                res.type_id = c->type_id;
                res.framework = gpu_framework_to_string(host(cl)->framework);
                res.claimed_at = c->claimed_at;
                res.nvml_ms = c->nvml_ms;
                cl->stats.claims_ok++;
                snprintf(ms, sizeof ms, "%" PRIu64, c->nvml_ms);
                /* PLACE-22 */
                log_line(LOG_LEVEL_INFO, 0, "placed vGPU claim", "instance_id", c->instance_id,
                         "vf", c->vf, "gpu", c->gpu, "profile", c->profile, "policy",
                         placement_policy_to_string(cl->policy), "nvml_ms", ms, NULL);
        }
        if (c->done)
                c->done(&res, c->userdata);
}

static void claim_free(Claim *c)
{
        free(c->instance_id);
        free(c->profile);
        free(c->only_gpu);
        free(c->mdev_uuid);
        free(c->chosen_profile);
        free(c->mdev_type);
        strv_freep(&c->exclude);
        free(c->refused_dirty_vf);
        free(c->refused_dirty_error);
        free(c->fail_error);
        free(c);
}

static void write_op_free(WriteOp *w)
{
        device_scan_unref(w->scan);
        free(w->mdev_uuid);
        free(w);
}

static void write_unlink(Claimer *cl, WriteOp *w)
{
        for (WriteOp **p = &cl->writes; *p; p = &(*p)->next)
                if (*p == w) {
                        *p = w->next;
                        return;
                }
}

static ClaimRecord claim_record(Claim *c, char *device_path)
{
        bool mdev = host_is_mdev(c->cl);
        return (ClaimRecord){
            .instance_id = c->instance_id,
            .framework = mdev ? "mdev" : "vendor-vfio",
            .vf = c->vf,
            .gpu = c->gpu,
            .profile = c->chosen_profile ? c->chosen_profile : c->profile,
            .type_id = mdev ? 0 : c->type_id,
            .mdev_type = mdev ? c->mdev_type : NULL,
            .mdev_uuid = mdev ? c->mdev_uuid : NULL,
            .device_path = device_path,
            .claimed_at = c->claimed_at,
        };
}

static int claim_device_path(Claim *c, char **ret)
{
        Claimer *cl = c->cl;
        if (host_is_mdev(cl))
                return strprintf(ret, "%s/bus/mdev/devices/%s", cl->sysfs->path, c->mdev_uuid);
        return strprintf(ret, "%s/bus/pci/devices/%s", cl->sysfs->path, c->vf);
}

/*
 * A failure after the claim was saved: the claim is cleared first (the VF holds nothing of it
 * by now), then done() runs, or, with reselect, the claim selects once more.
 */
static void claim_fail_after_save(Claim *c, int r, ClaimFailure kind, const char *error,
                                  bool reselect)
{
        Claimer *cl = c->cl;
        _cleanup_free_ char *path = NULL, *clear_error = NULL;

        (void)error_set(&c->fail_error, r, "%s", error); /* error may be c->fail_error itself */
        c->fail_r = r;
        c->fail_kind = kind;
        c->reselect_after_clear = reselect;
        if (!c->saved || !cl->owner.clear) {
                claimer_clear_done(cl, c, 0, NULL);
                return;
        }
        if (claim_device_path(c, &path) < 0) {
                claimer_clear_done(cl, c, -ENOMEM, "out of memory");
                return;
        }
        ClaimRecord rec = claim_record(c, path);
        c->state = CLAIM_BUSY;
        int k = cl->owner.clear(cl->owner.userdata, &rec, c, &clear_error);
        if (k < 0)
                claimer_clear_done(cl, c, k, clear_error);
}

static void claim_restart(Claim *c)
{
        Claimer *cl = c->cl;
        drop_reservation(c);
        c->saved = false;
        c->state = CLAIM_DISCOVER;
        c->discovery_floor = cl->discoveries_started;
        c->round_floor = cl->rounds;
        c->wait_deadline = 0;
        c->rediscover = false;
        notify(cl);
}

void claimer_clear_done(Claimer *cl, Claim *c, int r, const char *error)
{
        if (r < 0)
                log_line(LOG_LEVEL_ERR, 0, "clear vGPU claim failed", "instance_id", c->instance_id,
                         "vf", c->vf, "error", error, NULL);
        c->saved = false;
        if (c->reselect_after_clear && r >= 0)
                claim_restart(c);
        else
                claim_finish(c, c->fail_r, c->fail_kind, c->fail_error);
        process(cl);
}

/* ---- writes (PLACE-9 gated) ---------------------------------------------------------------- */

static int queue_write(Claim *c, WriteKind kind, const char *vf, const char *gpu,
                       const char *mdev_uuid)
{
        Claimer *cl = c->cl;
        WriteOp *w = calloc(1, sizeof *w);
        if (!w)
                return -ENOMEM;
        w->claim = c;
        w->kind = kind;
        snprintf(w->vf, sizeof w->vf, "%s", vf);
        snprintf(w->gpu, sizeof w->gpu, "%s", gpu);
        if (mdev_uuid && !(w->mdev_uuid = strdup(mdev_uuid))) {
                free(w);
                return -ENOMEM;
        }
        WriteOp **tail = &cl->writes;
        while (*tail)
                tail = &(*tail)->next;
        *tail = w;
        c->state = CLAIM_BUSY;
        notify(cl);
        return 0;
}

static void on_write_done(const DeviceResult *res, void *userdata);

static void place16_step_done(Claim *c, bool ok);

static void write_failed_to_start(Claimer *cl, WriteOp *w, int r, const char *error)
{
        DeviceResult res = {
            .r = r,
            .outcome = DEVICE_OUTCOME_FAILED,
            /* Refused at once, on this loop turn: the refusal is still what it was. */
            .kind = device_ops_refusal_kind(cl->ops, w->vf, w->kind == WRITE_CONFIGURE),
            .error = error,
            .vf = w->vf,
        };
        w->started = true;
        on_write_done(&res, w);
}

static void start_write(Claimer *cl, WriteOp *w)
{
        Claim *c = w->claim;
        _cleanup_free_ char *error = NULL;
        bool mdev = host_is_mdev(cl);
        int r;

        w->started = true;
        if (w->kind == WRITE_CONFIGURE) {
                if (mdev)
                        r = device_ops_mdev_create(cl->ops, c->vf, c->chosen_profile, c->mdev_uuid,
                                                   c->instance_id, on_write_done, w, &error);
                else {
                        char type[16];
                        snprintf(type, sizeof type, "%" PRIu32, c->type_id);
                        r = device_ops_configure(cl->ops, c->vf, type, c->instance_id,
                                                 on_write_done, w, &error);
                }
        } else {
                DeviceReleaseRequest req = {
                    .claim = {.framework = mdev ? "mdev" : "vendor-vfio",
                              .vf = w->vf,
                              .mdev_uuid = w->mdev_uuid},
                    .instance_id = w->kind == WRITE_RESET_REFUSED ? c->instance_id : NULL,
                    .scan = w->scan,
                };
                r = device_ops_release(cl->ops, &req, on_write_done, w, &error);
        }
        if (r < 0)
                write_failed_to_start(cl, w, r, error);
}

/* Starts the queued writes that PLACE-9 allows now. */
static bool kick_writes(Claimer *cl)
{
        bool blocked = false;
        bool refreshing = refresh_running(cl);

        for (WriteOp *w = cl->writes, *next; w; w = next) {
                next = w->next;
                if (w->started)
                        continue;
                GpuRoundState *g = round_gpu(cl, w->gpu, false);
                if (refreshing || (g && g->querying)) {
                        blocked = true;
                        continue;
                }
                start_write(cl, w);
        }
        return blocked && refreshing;
}

static void configure_done(Claim *c, const DeviceResult *res)
{
        Claimer *cl = c->cl;

        if (res->r >= 0) {
                /* PLACE-2: the reservation ends; PLACE-7 keeps the write until it is reflected. */
                GpuRoundState *g =
                    claimer_gpu_uses_nvml(cl, c->gpu) ? round_gpu(cl, c->gpu, true) : NULL;
                WriteRecord *recs =
                    g ? realloc(cl->records, (cl->n_records + 1) * sizeof *recs) : NULL;
                if (recs) {
                        cl->records = recs;
                        recs[cl->n_records] =
                            (WriteRecord){.type_id = c->type_id, .done_at = g->submitted};
                        snprintf(recs[cl->n_records].gpu, PCI_ADDRESS_STRLEN, "%s", c->gpu);
                        cl->n_records++;
                }
                drop_reservation(c);
                claim_finish(c, 0, CLAIM_FAILURE_NONE, NULL);
                return;
        }

        switch (res->kind) {
        case DEVICE_FAILURE_CAPACITY:
                /* PLACE-17: reset, clear, select once more without the VF; twice fails. */
                c->capacity_refusals++;
                c->fail_r = error_set(&c->fail_error, -ENOSPC, "%s", res->error);
                c->fail_kind = CLAIM_FAILURE_INSUFFICIENT_RESOURCES;
                if (strv_push(&c->exclude, c->vf) < 0 ||
                    queue_write(c, WRITE_RESET_REFUSED, c->vf, c->gpu, c->mdev_uuid) < 0)
                        claim_fail_after_save(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory",
                                              false);
                return;
        case DEVICE_FAILURE_QUARANTINED:
        case DEVICE_FAILURE_UNCERTAIN:
                /*
                 * DEV-2 (and GEN-4's refusal of a VF that turned uncertain since selection):
                 * nothing was written; drop the VF and select once more.
                 */
                if (strv_push(&c->exclude, c->vf) < 0) {
                        claim_fail_after_save(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory",
                                              false);
                        return;
                }
                claim_fail_after_save(c, res->r, CLAIM_FAILURE_INTERNAL, res->error, true);
                return;
        case DEVICE_FAILURE_STORE:
                claim_fail_after_save(c, res->r, CLAIM_FAILURE_PLACEMENT_DISABLED, res->error,
                                      false);
                return;
        case DEVICE_FAILURE_TIMEOUT: {
                /* GEN-4's bare text, named (GEN-7): the VF is uncertain from now on. */
                _cleanup_free_ char *e = NULL;
                (void)strprintf(&e, "%s on VF %s: %s",
                                host_is_mdev(c->cl) ? "create mdev" : "configure vGPU", c->vf,
                                res->error);
                claim_fail_after_save(c, res->r, CLAIM_FAILURE_INTERNAL, e ? e : res->error, false);
                return;
        }
        default:
                /* GEN-4: an exhausted pool disables placement rather than failing internally. */
                claim_fail_after_save(c, res->r,
                                      res->r == -EAGAIN ? CLAIM_FAILURE_PLACEMENT_DISABLED
                                                        : CLAIM_FAILURE_INTERNAL,
                                      res->error, false);
                return;
        }
}

static int save_claim(Claim *c);

static void on_write_done(const DeviceResult *res, void *userdata)
{
        WriteOp *w = userdata;
        Claim *c = w->claim;
        Claimer *cl = c->cl;
        WriteKind kind = w->kind;

        write_unlink(cl, w);
        _cleanup_free_ char *vf = strdup(w->vf);
        write_op_free(w);
        if (cl->owner.vf_changed && vf)
                cl->owner.vf_changed(cl->owner.userdata, vf);

        switch (kind) {
        case WRITE_CONFIGURE:
                configure_done(c, res);
                break;
        case WRITE_RESET_DIRTY:
                if (res->r >= 0) {
                        int r = save_claim(c);
                        if (r < 0)
                                claim_finish(c, r, CLAIM_FAILURE_INTERNAL, "out of memory");
                        break;
                }
                /* PLACE-12 */
                log_line(LOG_LEVEL_WARNING, 0, "dirty vGPU VF refused reset; trying another VF",
                         "vf", vf, "instance_id", c->instance_id, "error", res->error, NULL);
                free(c->refused_dirty_vf);
                c->refused_dirty_vf = vf ? strdup(vf) : NULL;
                (void)error_set(&c->refused_dirty_error, res->r, "%s", res->error);
                if (!vf || strv_push(&c->exclude, vf) < 0) {
                        claim_finish(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory");
                        break;
                }
                claim_restart(c);
                break;
        case WRITE_RESET_REFUSED:
                if (res->r < 0) {
                        /* The VF may still hold the type: the claim stays for the reconciler. */
                        _cleanup_free_ char *msg = NULL;
                        (void)error_set(&msg, -EIO, "%s; reset after refusal: %s", c->fail_error,
                                        res->error);
                        claim_finish(c, -EIO, CLAIM_FAILURE_INTERNAL, msg);
                        break;
                }
                if (c->capacity_refusals >= 2)
                        claim_fail_after_save(c, -ENOSPC, CLAIM_FAILURE_INSUFFICIENT_RESOURCES,
                                              c->fail_error, false);
                else
                        claim_fail_after_save(c, -ENOSPC, CLAIM_FAILURE_INSUFFICIENT_RESOURCES,
                                              c->fail_error, true);
                break;
        case WRITE_RESET_PLACE16:
                place16_step_done(c, res->r >= 0);
                break;
        }
        process(cl);
}

/* ---- saving (PLACE-1, PLACE-20) ------------------------------------------------------------ */

static int save_claim(Claim *c)
{
        Claimer *cl = c->cl;
        _cleanup_free_ char *path = NULL, *error = NULL;

        int r = claim_device_path(c, &path);
        if (r < 0)
                return r;
        c->claimed_at = clock_now(cl->clock);
        ClaimRecord rec = claim_record(c, path);
        c->state = CLAIM_BUSY;
        r = cl->owner.save(cl->owner.userdata, &rec, c, &error);
        if (r < 0)
                claimer_save_done(cl, c, r, error);
        return 0;
}

void claimer_save_done(Claimer *cl, Claim *c, int r, const char *error)
{
        if (r < 0) {
                /* PLACE-20: the reservation goes, the VF was not touched. */
                _cleanup_free_ char *msg = NULL;
                (void)error_set(&msg, r, "save vGPU claim: %s", error);
                claim_finish(c, r, CLAIM_FAILURE_INTERNAL, msg);
        } else {
                c->saved = true;
                if (queue_write(c, WRITE_CONFIGURE, c->vf, c->gpu, NULL) < 0)
                        claim_fail_after_save(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory",
                                              false);
        }
        process(cl);
}

/* ---- discovery (DISC-20, through the host's one tracker) ------------------------------------ */

bool claimer_gpu_uses_nvml(Claimer *cl, const char *pf)
{
        return cl->nvml && host(cl) && host(cl)->framework == GPU_FRAMEWORK_VENDOR_VFIO &&
               nvml_client_get_gpu_fallback(cl->nvml, pf, NULL) == NVML_FALLBACK_NONE &&
               nvml_client_get_gpu_mode(cl->nvml, pf) == NVML_MODE_MIXED;
}

/*
 * DISC-20 for the GPUs concerned: a claim whose candidate GPUs all decide on NVML needs only
 * their VFs' states re-read; any sysfs-path GPU needs its lists, which a full discovery reads.
 */
static bool claim_needs_full_discovery(Claimer *cl, const Claim *c)
{
        const GpuHost *h = host(cl);
        if (!h || h->framework != GPU_FRAMEWORK_VENDOR_VFIO || c->force_full)
                return true;
        bool any = false;
        for (size_t i = 0; i < h->n_gpus; i++) {
                const Gpu *g = &h->gpus[i];
                if (!gpu_find_profile(g, c->profile) ||
                    (c->only_gpu && !streq(g->address, c->only_gpu)))
                        continue;
                if (!claimer_gpu_uses_nvml(cl, g->address) || g->catalog_source != GPU_CATALOG_NVML)
                        return true;
                any = true;
        }
        return !any; /* a name no catalog knows: read everything before saying so */
}

static void on_discover_done(int r, const char *error, void *userdata)
{
        Claimer *cl = userdata;
        uint64_t seq = cl->discoveries_started; /* one runs at a time */
        bool full = cl->discovering_full;

        cl->discovering = false;
        cl->discoveries_done = seq;
        for (Claim *c = cl->claims; c; c = c->next) {
                if (c->state != CLAIM_DISCOVER || c->discovery_floor >= seq ||
                    (c->needs_full && !full))
                        continue;
                if (r < 0) {
                        /* API-21: discovery failed → placement disabled. */
                        claim_finish(c, r, CLAIM_FAILURE_PLACEMENT_DISABLED, error);
                        continue;
                }
                c->state = CLAIM_WAIT;
                c->discovered_full = full;
        }
        process(cl);
}

static void maybe_start_discovery(Claimer *cl)
{
        if (cl->discovering)
                return;
        bool wanted = false, full = false;
        for (Claim *c = cl->claims; c; c = c->next)
                if (c->state == CLAIM_DISCOVER) {
                        wanted = true;
                        c->needs_full = claim_needs_full_discovery(cl, c);
                        full |= c->needs_full;
                }
        if (!wanted)
                return;

        _cleanup_free_ char *error = NULL;
        int r = full ? gpu_tracker_discover(cl->tracker, on_discover_done, cl, &error)
                     : gpu_tracker_reread_types(cl->tracker, on_discover_done, cl, &error);
        if (r < 0) {
                /* API-21: no discovery (GEN-4's exhausted pool) → placement disabled. */
                for (Claim *c = cl->claims; c; c = c->next)
                        if (c->state == CLAIM_DISCOVER)
                                claim_finish(c, r, CLAIM_FAILURE_PLACEMENT_DISABLED, error);
                return;
        }
        cl->discovering = true;
        cl->discovering_full = full;
        cl->discoveries_started++;
        cl->stats.discoveries++;
}

/* ---- the snapshot -------------------------------------------------------------------------- */

/* The NVML answer usable for this GPU: its latest round's, with PLACE-7's subtraction. */
static int snap_counts(void *userdata, const char *pf, PlacementNvmlCount **ret, size_t *ret_n)
{
        Claimer *cl = userdata;
        GpuRoundState *g = round_gpu(cl, pf, false);
        if (!g || !g->has_answer || g->n_placements == 0) {
                *ret = NULL;
                *ret_n = 0;
                return 0;
        }

        _cleanup_free_ ClaimWriteMark *marks = NULL;
        size_t n_marks = 0, cap = cl->n_records + 1;
        for (Claim *c = cl->claims; c; c = c->next)
                cap++;
        marks = calloc(cap, sizeof *marks);
        if (!marks)
                return -ENOMEM;
        for (Claim *c = cl->claims; c; c = c->next)
                if (c->reserved && !c->write_done && streq(c->gpu, pf))
                        marks[n_marks++] = (ClaimWriteMark){.type_id = c->type_id};
        for (size_t i = 0; i < cl->n_records; i++)
                if (streq(cl->records[i].gpu, pf))
                        marks[n_marks++] = (ClaimWriteMark){.type_id = cl->records[i].type_id,
                                                            .write_done = true,
                                                            .done_at = cl->records[i].done_at};

        PlacementNvmlCount *counts = calloc(g->n_placements, sizeof *counts);
        if (!counts)
                return -ENOMEM;
        for (size_t i = 0; i < g->n_placements; i++)
                counts[i] = (PlacementNvmlCount){
                    .type_id = g->placements[i].type_id,
                    .count = g->placements[i].count,
                    .unreflected = claim_count_unreflected(marks, n_marks, g->placements[i].type_id,
                                                           g->answer_q),
                };
        *ret = counts;
        *ret_n = g->n_placements;
        return 0;
}

static bool overlay_is_reserved(void *userdata, const char *vf, PlacementReservation *ret)
{
        const Claim *c;
        if (!vf_is_reserved(userdata, vf, &c))
                return false;
        *ret = (PlacementReservation){
            .type_id = c->type_id,
            .framebuffer_mib = c->framebuffer_mib,
            .write_done = c->write_done,
        };
        return true;
}

static bool overlay_is_claimed(void *userdata, const char *vf, uint64_t *ret_framebuffer_mib)
{
        Claimer *cl = userdata;
        return cl->owner.is_claimed &&
               cl->owner.is_claimed(cl->owner.userdata, vf, ret_framebuffer_mib);
}

void claimer_fill_overlays(Claimer *cl, PlacementOverlays *ret)
{
        *ret = (PlacementOverlays){
            .nvml = cl->nvml,
            .pool = cl->pool,
            .is_quarantined = cl->guard.is_quarantined,
            .quarantine_userdata = cl->guard.userdata,
            .is_claimed = overlay_is_claimed,
            .is_reserved = overlay_is_reserved,
            .claims_userdata = cl,
        };
}

int claimer_build_view(Claimer *cl, PlacementView **ret)
{
        PlacementOverlays o;
        if (!host(cl))
                return -EAGAIN;
        claimer_fill_overlays(cl, &o);
        o.nvml_counts = snap_counts;
        return placement_view_build(host(cl), &o, ret);
}

/* ---- waiting (PLACE-7..10) ----------------------------------------------------------------- */

typedef struct Pair {
        char pf[PCI_ADDRESS_STRLEN];
        nvmlVgpuTypeId_t *types;
        size_t n_types;
} Pair;

static int pairs_add(Pair **pairs, size_t *n, const char *pf, uint32_t type)
{
        Pair *p = NULL;
        for (size_t i = 0; i < *n; i++)
                if (streq((*pairs)[i].pf, pf))
                        p = &(*pairs)[i];
        if (!p) {
                Pair *grown = realloc(*pairs, (*n + 1) * sizeof *grown);
                if (!grown)
                        return -ENOMEM;
                *pairs = grown;
                p = &grown[(*n)++];
                *p = (Pair){};
                snprintf(p->pf, sizeof p->pf, "%s", pf);
        }
        for (size_t i = 0; i < p->n_types; i++)
                if (p->types[i] == type)
                        return 0;
        nvmlVgpuTypeId_t *t = realloc(p->types, (p->n_types + 1) * sizeof *t);
        if (!t)
                return -ENOMEM;
        p->types = t;
        p->types[p->n_types++] = type;
        return 0;
}

static void pairs_free(Pair *pairs, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(pairs[i].types);
        free(pairs);
}

typedef enum Readiness {
        READY,
        NEEDS_ROUND, /* pairs added */
        BLOCKED,     /* a reservation must end first */
        RELIST,      /* a GPU fell back to its lists, which this claim has not read (PLACE-5) */
} Readiness;

/* What a waiting claim still needs before it may select. */
static Readiness claim_readiness(Claimer *cl, Claim *c, const PlacementSnapshot *sn,
                                 bool collect_only, Pair **pairs, size_t *n_pairs)
{
        Readiness res = READY;
        for (size_t i = 0; i < sn->n_gpus; i++) {
                const PlacementGpu *g = &sn->gpus[i];
                const PlacementProfile *p = placement_gpu_find_profile(g, c->profile);
                /* FLEET-6: the other GPUs are no candidates, so nothing of theirs is awaited. */
                if (!p || (c->only_gpu && !streq(g->address, c->only_gpu)))
                        continue;
                if (collect_only && (placement_gpu_path(g) != PLACEMENT_PATH_NVML ||
                                     placement_nvml_answer_is_stale(sn, g, c->profile)))
                        continue;
                if (placement_gpu_path(g) != PLACEMENT_PATH_NVML) {
                        if (!c->discovered_full)
                                return RELIST;
                        if (placement_gpu_must_wait(sn, g)) {
                                c->rediscover = true; /* PLACE-10 */
                                res = BLOCKED;
                        }
                        continue;
                }
                if (placement_nvml_answer_is_stale(sn, g, c->profile)) {
                        /*
                         * PLACE-8: no answer so far can be used, only one from a round after
                         * that configure ends. Writes and queries on G never overlap, so once
                         * the reservation has ended, every round numbered above this one was
                         * submitted after its write.
                         */
                        c->round_floor = cl->rounds;
                        res = BLOCKED;
                        continue;
                }
                GpuRoundState *rs = round_gpu(cl, g->address, false);
                bool fresh = rs && rs->has_answer && rs->answer_global > c->round_floor &&
                             nvml_gpu_answer_find_placements(
                                 &(NvmlGpuAnswer){.placements = rs->placements,
                                                  .n_placements = rs->n_placements},
                                 p->type_id);
                if (fresh)
                        continue;
                if (res == READY)
                        res = NEEDS_ROUND;
                if (pairs && pairs_add(pairs, n_pairs, g->address, p->type_id) < 0)
                        res = BLOCKED;
        }
        return res;
}

static void on_round_done(NvmlClient *nc, const NvmlAnswer *a, void *userdata);

/* Starts one NVML round for every pair waiting claims need (PLACE-9). */
static bool maybe_start_round(Claimer *cl, Pair *pairs, size_t n_pairs)
{
        bool poll_again = false;

        if (cl->round_in_flight || n_pairs == 0 || !cl->nvml)
                return false;
        if (refresh_running(cl))
                return true;

        _cleanup_free_ NvmlGpuRequest *gpus = calloc(n_pairs, sizeof *gpus);
        if (!gpus)
                return false;
        size_t n = 0;
        for (size_t i = 0; i < n_pairs; i++) {
                if (gpu_is_writing(cl, pairs[i].pf) ||
                    write_gate_is_waiting(cl->gate, pairs[i].pf)) {
                        poll_again = true; /* PLACE-9: never while a write to G runs or waits */
                        continue;
                }
                if (nvml_client_prepare_gpu_request(cl->nvml, pairs[i].pf, pairs[i].types,
                                                    pairs[i].n_types, &gpus[n]) < 0)
                        continue;
                n++;
        }
        if (n == 0)
                return poll_again;

        NvmlRequest req = {.gpus = gpus, .n_gpus = n};
        int r = nvml_client_query(cl->nvml, &req, on_round_done, cl);
        if (r >= 0) {
                cl->round_in_flight = true;
                cl->rounds++;
                cl->stats.rounds++;
                for (size_t i = 0; i < n; i++) {
                        GpuRoundState *g = round_gpu(cl, gpus[i].pf, true);
                        if (!g)
                                continue;
                        g->submitted++;
                        g->querying = true;
                }
        } else
                log_warning_errno(r, "vGPU placement round not started: %m");
        for (size_t i = 0; i < n; i++)
                nvml_gpu_request_done(&gpus[i]);
        return poll_again;
}

static void on_round_done(NvmlClient *nc, const NvmlAnswer *a, void *userdata)
{
        Claimer *cl = userdata;
        uint64_t round = cl->rounds; /* one round runs at a time */

        cl->round_in_flight = false;
        for (size_t i = 0; i < cl->n_gpus; i++) {
                GpuRoundState *g = &cl->gpus[i];
                if (!g->querying)
                        continue;
                g->querying = false;
                free(g->placements);
                g->placements = NULL;
                g->n_placements = 0;
                g->has_answer = true;
                g->answer_q = g->submitted;
                g->answer_global = round;

                const NvmlGpuAnswer *ga =
                    a->host_fallback == NVML_FALLBACK_NONE ? nvml_answer_find_gpu(a, g->pf) : NULL;
                if (ga && ga->fallback == NVML_FALLBACK_NONE && ga->n_placements > 0) {
                        g->placements = calloc(ga->n_placements, sizeof *g->placements);
                        if (g->placements) {
                                memcpy(g->placements, ga->placements,
                                       ga->n_placements * sizeof *g->placements);
                                g->n_placements = ga->n_placements;
                        }
                }
                /* Writes this answer reflects need no subtraction any more. */
                size_t k = 0;
                for (size_t w = 0; w < cl->n_records; w++)
                        if (!streq(cl->records[w].gpu, g->pf) ||
                            cl->records[w].done_at >= g->answer_q)
                                cl->records[k++] = cl->records[w];
                cl->n_records = k;
        }
        process(cl);
}

/* ---- selection ----------------------------------------------------------------------------- */

static void place16_start(Claim *c, const PlacementSnapshot *sn, int select_r,
                          const char *select_error);

static void claim_fail_selection(Claim *c, int r, const char *error)
{
        if (c->refused_dirty_vf && r == -ENOSPC) {
                _cleanup_free_ char *msg = NULL;
                (void)error_set(&msg, r, "repair dirty VF %s before claim: %s", c->refused_dirty_vf,
                                c->refused_dirty_error);
                claim_finish(c, r, CLAIM_FAILURE_INSUFFICIENT_RESOURCES, msg);
                return;
        }
        if (c->capacity_refusals > 0 && r == -ENOSPC) {
                /* PLACE-17: nothing else to try; the driver's refusal is the answer. */
                claim_finish(c, r, CLAIM_FAILURE_INSUFFICIENT_RESOURCES, c->fail_error);
                return;
        }
        /* placement_select_vf(): -ENOENT is PLACE-19's unknown name, -ENOSPC PLACE-18/19, -ENODEV
         * FLEET-6's PF that this host lacks (the scheduler's to move elsewhere, as for no room). */
        claim_finish(c, r,
                     r == -ENOENT                   ? CLAIM_FAILURE_UNKNOWN_PROFILE
                     : r == -ENOSPC || r == -ENODEV ? CLAIM_FAILURE_INSUFFICIENT_RESOURCES
                                                    : CLAIM_FAILURE_INTERNAL,
                     error);
}

static void claim_select(Claimer *cl, Claim *c, const PlacementSnapshot *sn)
{
        _cleanup_free_ char *error = NULL;
        const char *unavailable =
            cl->guard.store_unavailable ? cl->guard.store_unavailable(cl->guard.userdata) : NULL;
        if (unavailable) {
                claim_finish(c, -EAGAIN, CLAIM_FAILURE_PLACEMENT_DISABLED,
                             unavailable); /* HEALTH-16 */
                return;
        }

        PlacementRequest req = {
            .profile = c->profile,
            .policy = cl->policy,
            .exclude = (const char *const *)c->exclude,
            .n_exclude = strv_length(c->exclude),
            .gpu = c->only_gpu,
        };
        PlacementChoice choice;
        c->selections++;
        int r = placement_select_vf(sn, &req, &cl->picker, &choice, &error);
        if (r < 0) {
                if (r == -ENOSPC && !c->place16_done) {
                        place16_start(c, sn, r, error);
                        return;
                }
                claim_fail_selection(c, r, error);
                return;
        }

        /* Reserve (PLACE-2): concurrent claims see it from the next snapshot on. */
        cl->generation++;
        c->reserved = true;
        c->write_done = false;
        c->wait_deadline = 0;
        snprintf(c->vf, sizeof c->vf, "%s", choice.vf->address);
        snprintf(c->gpu, sizeof c->gpu, "%s", choice.gpu->address);
        free(c->chosen_profile);
        free(c->mdev_type);
        c->chosen_profile = strdup(choice.profile->name);
        c->mdev_type = choice.profile->mdev_type ? strdup(choice.profile->mdev_type) : NULL;
        c->type_id = choice.profile->type_id;
        c->framebuffer_mib = choice.profile->framebuffer_mib;
        c->nvml_ms = (now_mono(cl) - c->entered) / NSEC_PER_MSEC;
        if (!c->chosen_profile) {
                claim_finish(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory");
                return;
        }
        if (cl->owner.reserved)
                cl->owner.reserved(cl->owner.userdata, c->instance_id);

        if (choice.dirty) {
                /* PLACE-11: reset while reserved, before the claim is written. */
                const GpuVf *vf = gpu_host_find_vf(host(cl), c->vf);
                const char *uuid = vf && vf->mdev_uuids ? vf->mdev_uuids[0] : NULL;
                if (queue_write(c, WRITE_RESET_DIRTY, c->vf, c->gpu, uuid) < 0)
                        claim_finish(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory");
                return;
        }
        r = save_claim(c);
        if (r < 0)
                claim_finish(c, r, CLAIM_FAILURE_INTERNAL, "out of memory");
}

/* ---- PLACE-16: reset every dirty VF not held open, one shared scan ------------------------- */

typedef struct ScanJob {
        Root *proc, *sysfs;
        char *dev_root;
        VfioScan *scan;
        char **vfs; /* dirty VFs; the job keeps those not held open */
        char **gpus;
        char **uuids; /* "" for none */
        bool *free_vf;
} ScanJob;

static void scan_job_free(void *data)
{
        ScanJob *j = data;
        root_free(j->proc);
        root_free(j->sysfs);
        free(j->dev_root);
        vfio_scan_free(j->scan);
        strv_freep(&j->vfs);
        strv_freep(&j->gpus);
        strv_freep(&j->uuids);
        free(j->free_vf);
        free(j);
}

/* One scan, and every dirty VF probed against it (DEV-15); probe errors count as held. */
static int scan_job_run(void *data, char **error)
{
        ScanJob *j = data;
        int r = vfio_scan(j->proc, j->dev_root, &j->scan, error);
        if (r < 0)
                return r;
        for (size_t i = 0; j->vfs && j->vfs[i]; i++) {
                pid_t holder;
                _cleanup_free_ char *probe_error = NULL;
                if (j->uuids[i][0])
                        r = vfio_probe_mdev(j->scan, j->sysfs, j->uuids[i], &holder, &probe_error);
                else
                        r = vfio_probe_vf(j->scan, j->sysfs, j->vfs[i], &holder, &probe_error);
                j->free_vf[i] = r == 0;
        }
        return 0;
}

static void place16_step_done(Claim *c, bool ok)
{
        if (ok)
                c->place16_ok++;
        if (c->place16_pending > 0 && --c->place16_pending > 0)
                return;
        if (c->place16_ok > 0) {
                claim_restart(c); /* rediscover and select once more */
                return;
        }
        claim_fail_selection(c, c->fail_r, c->fail_error);
}

static void on_scan_done(int r, void *data, const char *error, void *userdata)
{
        Claim *c = userdata;
        Claimer *cl = c->cl;
        ScanJob *j = data;
        _cleanup_(device_scan_unrefp) DeviceScan *shared = NULL;

        if (r < 0 || !j || device_scan_new(j->scan, &shared) < 0) {
                claim_fail_selection(c, c->fail_r, c->fail_error);
                process(cl);
                return;
        }
        j->scan = NULL; /* the shared scan owns it now */
        c->place16_pending = 0;
        c->place16_ok = 0;
        for (size_t i = 0; j->vfs[i]; i++) {
                if (!j->free_vf[i])
                        continue;
                if (queue_write(c, WRITE_RESET_PLACE16, j->vfs[i], j->gpus[i],
                                j->uuids[i][0] ? j->uuids[i] : NULL) < 0)
                        continue;
                WriteOp *w = cl->writes;
                while (w->next)
                        w = w->next;
                w->scan = device_scan_ref(shared);
                c->place16_pending++;
        }
        c->state = CLAIM_BUSY;
        if (c->place16_pending == 0)
                place16_step_done(c, false);
        process(cl);
}

static void place16_start(Claim *c, const PlacementSnapshot *sn, int select_r,
                          const char *select_error)
{
        Claimer *cl = c->cl;
        _cleanup_free_ char *error = NULL;

        c->place16_done = true;
        c->force_full = true;
        c->fail_r = error_set(&c->fail_error, select_r, "%s", select_error);

        ScanJob *j = calloc(1, sizeof *j);
        if (!j) {
                claim_fail_selection(c, select_r, select_error);
                return;
        }
        for (size_t i = 0; i < sn->n_vfs; i++) {
                const PlacementVf *v = &sn->vfs[i];
                if (!v->readable || v->uncertain || !v->parent || !placement_vf_is_dirty(v))
                        continue;
                const GpuVf *vf = gpu_host_find_vf(host(cl), v->address);
                const char *uuid = vf && vf->mdev_uuids ? vf->mdev_uuids[0] : "";
                if (strv_push(&j->vfs, v->address) < 0 || strv_push(&j->gpus, v->parent) < 0 ||
                    strv_push(&j->uuids, uuid) < 0) {
                        scan_job_free(j);
                        claim_fail_selection(c, select_r, select_error);
                        return;
                }
        }
        if (!j->vfs) {
                scan_job_free(j);
                claim_fail_selection(c, select_r, select_error);
                return;
        }
        int r = root_dup(cl->proc, &j->proc);
        if (r >= 0)
                r = root_dup(cl->sysfs, &j->sysfs);
        if (r >= 0 && !(j->dev_root = strdup(cl->dev_root)))
                r = -ENOMEM;
        if (r >= 0 && !(j->free_vf = calloc(strv_length(j->vfs), sizeof *j->free_vf)))
                r = -ENOMEM;
        if (r >= 0) {
                WorkerJob job = {
                    .timeout = cl->sysfs_timeout,
                    .run = scan_job_run,
                    .done = on_scan_done,
                    .data = j,
                    .free_data = scan_job_free,
                    .userdata = c,
                };
                r = worker_pool_submit(cl->pool, &job, &error);
        }
        if (r < 0) {
                scan_job_free(j);
                claim_fail_selection(c, select_r, select_error);
                return;
        }
        c->state = CLAIM_BUSY;
}

/* ---- the engine ---------------------------------------------------------------------------- */

/* at is on the Claimer's clock (which tests inject); 0 disarms. */
static void arm_timer(Claimer *cl, nsec_t at)
{
        if (at == 0) {
                loop_timer_arm(cl->timer, NSEC_INFINITY);
                return;
        }
        nsec_t now = now_mono(cl);
        loop_timer_arm(cl->timer, mono_clock_now(&mono_clock_system) + (at > now ? at - now : 0));
}

static bool any_claim_in_flight(Claimer *cl)
{
        for (Claim *c = cl->claims; c; c = c->next)
                if (c->state != CLAIM_FINISHED)
                        return true;
        return false;
}

static void maybe_start_refresh(Claimer *cl)
{
        if (!cl->refresh_wanted || any_write_started(cl) || write_gate_any_waiting(cl->gate) ||
            !cl->nvml)
                return;
        /*
         * NVML-15: a wanted refresh waits until the claims in flight are done. They query NVML
         * for themselves (PLACE-7) and their answers update the cache, while a refresh queries
         * every type of every GPU and would hold their rounds and writes that long; in a burst
         * of creates every configure would pay for one. The start-up refresh never waits.
         */
        if (!cl->refresh_init && any_claim_in_flight(cl))
                return;
        /* PLACE-9 covers the owner's writes too: a refresh queries every GPU. */
        const GpuHost *h = host(cl);
        for (size_t i = 0; h && i < h->n_vfs; i++)
                if (device_ops_is_busy(cl->ops, h->vfs[i].address))
                        return;
        cl->refresh_wanted = false;
        int r = nvml_client_request_refresh(cl->nvml, cl->refresh_init);
        cl->refresh_init = false;
        if (r < 0)
                log_warning_errno(r, "NVML placement cache refresh not started: %m");
}

static void process_once(Claimer *cl, bool *poll_again, nsec_t *next_deadline)
{
        nsec_t now = now_mono(cl);
        char d[DURATION_STRLEN];

        /* First, so that the owner's writes are in DeviceOps before new queries are considered;
         * the end of a refresh is not signalled, so waiting gates poll. */
        if (write_gate_open(cl->gate))
                *poll_again = true;
        maybe_start_refresh(cl);
        maybe_start_discovery(cl);

        Pair *pairs = NULL;
        size_t n_pairs = 0;
        if (host(cl) && cl->nvml) {
                /*
                 * A claim that only re-reads VF states asks NVML at once, so the round runs
                 * alongside that read (it needs nothing from it); the round still starts after
                 * the claim entered placement (PLACE-7).
                 */
                _cleanup_placement_view_ PlacementView *view = NULL;
                for (Claim *c = cl->claims; c; c = c->next) {
                        if (c->state != CLAIM_DISCOVER || c->needs_full || !cl->discovering)
                                continue;
                        if (!view && claimer_build_view(cl, &view) < 0)
                                break;
                        (void)claim_readiness(cl, c, &view->snapshot, true, &pairs, &n_pairs);
                }
        }
        if (host(cl)) {
                /* Claims select in entry order, each seeing the reservations of those before. */
                for (Claim *c = cl->claims; c; c = c->next) {
                        if (c->state != CLAIM_WAIT)
                                continue;
                        if (c->wait_deadline && now >= c->wait_deadline) {
                                _cleanup_free_ char *msg = NULL;
                                (void)error_set(&msg, -ETIMEDOUT,
                                                "vGPU placement round timed out after %s",
                                                format_duration(cl->nvml_timeout, d));
                                claim_finish(c, -ETIMEDOUT, CLAIM_FAILURE_PLACEMENT_DISABLED, msg);
                                continue;
                        }
                        _cleanup_placement_view_ PlacementView *view = NULL;
                        if (claimer_build_view(cl, &view) < 0) {
                                claim_finish(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory");
                                continue;
                        }
                        Readiness rd =
                            claim_readiness(cl, c, &view->snapshot, false, &pairs, &n_pairs);
                        if (rd == RELIST || (rd == READY && c->rediscover))
                                claim_restart(c);
                        else if (rd == READY)
                                claim_select(cl, c, &view->snapshot);
                        else if (!c->wait_deadline)
                                c->wait_deadline = now + cl->nvml_timeout;
                }
        }
        if (maybe_start_round(cl, pairs, n_pairs))
                *poll_again = true;
        pairs_free(pairs, n_pairs);

        if (kick_writes(cl))
                *poll_again = true;
        if (cl->refresh_wanted)
                *poll_again = true;

        for (Claim *c = cl->claims; c; c = c->next)
                if (c->state == CLAIM_WAIT && c->wait_deadline &&
                    (*next_deadline == 0 || c->wait_deadline < *next_deadline))
                        *next_deadline = c->wait_deadline;
}

static void reap(Claimer *cl)
{
        for (Claim **p = &cl->claims; *p;) {
                Claim *c = *p;
                if (c->state == CLAIM_FINISHED) {
                        *p = c->next;
                        if (c->reserved)
                                cl->generation++; /* the owner's claim stands for it now */
                        claim_free(c);
                } else
                        p = &c->next;
        }
}

static void process(Claimer *cl)
{
        if (cl->processing) {
                cl->again = true;
                return;
        }
        cl->processing = true;
        bool poll_again;
        nsec_t next;
        do {
                cl->again = false;
                poll_again = false;
                next = 0;
                process_once(cl, &poll_again, &next);
        } while (cl->again);
        reap(cl);
        cl->processing = false;

        if (poll_again) {
                nsec_t p = now_mono(cl) + CLAIM_POLL_INTERVAL;
                if (next == 0 || p < next)
                        next = p;
        }
        arm_timer(cl, next);
}

/* ---- the public side ----------------------------------------------------------------------- */

int claimer_claim(Claimer *cl, const ClaimRequest *request, ClaimDoneFunc done, void *userdata)
{
        if (!cl || !request || !request->instance_id || !request->profile)
                return -EINVAL;
        Claim *c = calloc(1, sizeof *c);
        if (!c)
                return -ENOMEM;
        c->cl = cl;
        c->instance_id = strdup(request->instance_id);
        c->profile = strdup(request->profile);
        if (request->mdev_uuid)
                c->mdev_uuid = strdup(request->mdev_uuid);
        if (strdup_nullable(request->gpu, &c->only_gpu) < 0 || !c->instance_id || !c->profile ||
            (request->mdev_uuid && !c->mdev_uuid)) {
                claim_free(c);
                return -ENOMEM;
        }
        if (!c->mdev_uuid) {
                /* An mdev host needs one (DEV-16); a v4 UUID from getrandom. */
                uint8_t b[16];
                if (getrandom(b, sizeof b, 0) != sizeof b) {
                        claim_free(c);
                        return -EIO;
                }
                b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
                b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
                if (strprintf(
                        &c->mdev_uuid,
                        "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
                        b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11],
                        b[12], b[13], b[14], b[15]) < 0) {
                        claim_free(c);
                        return -ENOMEM;
                }
        }
        c->done = done;
        c->userdata = userdata;
        c->entered = now_mono(cl);
        c->state = CLAIM_DISCOVER;
        c->discovery_floor = cl->discoveries_started;
        c->round_floor = cl->rounds;

        Claim **tail = &cl->claims;
        while (*tail)
                tail = &(*tail)->next;
        *tail = c;
        notify(cl); /* batched: the discovery starts at the next dispatch */
        return 0;
}

/* A turn of the Claimer's sources: starts what is due. */
static int on_wake(sd_event_source *s, void *userdata)
{
        process(userdata);
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata)
{
        process(userdata);
        return 0;
}

int claimer_attach_event(Claimer *cl, sd_event *event)
{
        if (!cl)
                return -EINVAL;
        if (cl->wake)
                return -EBUSY;
        int r = loop_wake_add(event, &cl->wake, on_wake, cl);
        if (r >= 0)
                r = loop_timer_add(event, &cl->timer, on_timer, cl);
        if (r < 0) {
                cl->wake = sd_event_source_disable_unref(cl->wake);
                return r;
        }
        notify(cl); /* what was asked before: the first turn arms the timer too */
        return 0;
}

bool claimer_gpu_is_querying(Claimer *cl, const char *pf)
{
        GpuRoundState *g = round_gpu(cl, pf, false);
        return g && g->querying;
}

int claimer_request_nvml_refresh(Claimer *cl, bool init)
{
        if (!cl->nvml)
                return 0;
        cl->refresh_wanted = true;
        cl->refresh_init |= init;
        process(cl);
        return 0;
}

uint64_t claimer_generation(const Claimer *cl)
{
        return cl->generation;
}

const ClaimerStats *claimer_get_stats(Claimer *cl)
{
        return &cl->stats;
}

static bool gate_is_querying(const char *pf, void *userdata)
{
        return gpu_query_running(userdata, pf);
}

static void gate_nudge(void *userdata)
{
        notify(userdata);
}

int claimer_new(const ClaimerConfig *config, Claimer **ret)
{
        if (!config || !config->sysfs || !config->tracker || !config->proc || !config->dev_root ||
            !config->pool || !config->ops || !config->gate || !config->owner.save)
                return -EINVAL;

        Claimer *cl = calloc(1, sizeof *cl);
        if (!cl)
                return -ENOMEM;
        int r = root_dup(config->sysfs, &cl->sysfs);
        if (r < 0) {
                free(cl);
                return r;
        }
        cl->tracker = config->tracker;
        cl->proc = config->proc;
        cl->dev_root = strdup(config->dev_root);
        cl->pool = config->pool;
        cl->ops = config->ops;
        cl->gate = config->gate;
        write_gate_bind(cl->gate, &(WriteGateQueries){.is_querying = gate_is_querying,
                                                      .nudge = gate_nudge,
                                                      .userdata = cl});
        cl->nvml = config->nvml;
        cl->nvml_timeout = config->nvml_timeout ? config->nvml_timeout : CLAIM_DEFAULT_NVML_TIMEOUT;
        cl->sysfs_timeout =
            config->sysfs_timeout ? config->sysfs_timeout : DEVICE_SYSFS_TIMEOUT_DEFAULT;
        cl->policy = config->policy;
        cl->guard = config->guard;
        cl->owner = config->owner;
        cl->clock = config->clock ? config->clock : &clock_realtime;
        cl->mono = config->mono ? config->mono : &mono_clock_system;
        if (config->picker.pick)
                cl->picker = config->picker;
        else {
                r = placement_random_init(&cl->random);
                if (r < 0) {
                        claimer_free(cl);
                        return r;
                }
                cl->picker =
                    (PlacementPicker){.pick = placement_random_pick, .userdata = &cl->random};
        }
        if (!cl->dev_root) {
                claimer_free(cl);
                return -ENOMEM;
        }
        *ret = cl;
        return 0;
}

Claimer *claimer_free(Claimer *cl)
{
        if (!cl)
                return NULL;
        while (cl->claims) {
                Claim *c = cl->claims;
                cl->claims = c->next;
                claim_free(c);
        }
        while (cl->writes) {
                WriteOp *w = cl->writes;
                cl->writes = w->next;
                write_op_free(w);
        }
        if (cl->gate)
                write_gate_bind(cl->gate, NULL);
        for (size_t i = 0; i < cl->n_gpus; i++)
                free(cl->gpus[i].placements);
        free(cl->gpus);
        free(cl->records);
        gpu_tracker_cancel(cl->tracker, cl);
        root_free(cl->sysfs);
        free(cl->dev_root);
        sd_event_source_disable_unref(cl->wake);
        sd_event_source_disable_unref(cl->timer);
        free(cl);
        return NULL;
}
