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
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/timerfd.h>

#define CLAIM_DEFAULT_NVML_TIMEOUT (5 * NSEC_PER_SEC)
/* How often blocked work (a foreign write, a refresh in the NVML slot) is looked at again. */
#define CLAIM_POLL_INTERVAL (5 * NSEC_PER_MSEC)
#define MDEV_AVAILABLE_MAX ((size_t)32)

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
        const char *fail_code;
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

/* A VF's mdev availability as the claim's discovery read it (PLACE-6). */
typedef struct MdevAvail {
        PlacementMdevAvailability *types;
        size_t n_types;
} MdevAvail;

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

        int epoll_fd, event_fd, timer_fd;
        sd_event_source *event_source;
        Claim *claims; /* in entry order */
        WriteOp *writes;

        char **pfs;
        GpuHost *host;
        MdevAvail *mdev; /* parallel to host->vfs on mdev hosts */
        uint64_t discoveries_started, discoveries_done;
        bool discovering, discovering_full;
        unsigned discover_pending; /* jobs of the running discovery not yet back */
        char *discover_error;      /* the first failure among them */

        uint64_t rounds; /* rounds submitted */
        bool round_in_flight;
        GpuRoundState *gpus;
        size_t n_gpus;
        WriteRecord *records;
        size_t n_records;

        bool refresh_wanted, refresh_init, refresh_started_by_us;
        bool processing, again;
        ClaimerStats stats;
};

static void process(Claimer *cl);
static bool gpu_uses_nvml(Claimer *cl, const char *pf);

/* ---- pure helpers -------------------------------------------------------------------------- */

int claim_code_http_status(const char *code)
{
        if (!code)
                return 0;
        if (streq(code, "unknown_profile") || streq(code, "invalid_request"))
                return 400;
        if (streq(code, "insufficient_resources") || streq(code, "busy") ||
            streq(code, "invalid_state"))
                return 409;
        if (streq(code, "placement_disabled"))
                return 503;
        return 500;
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

static const char *policy_to_string(PlacementPolicy p)
{
        return p == PLACEMENT_POLICY_PACK ? "pack" : "spread";
}

/* ---- small state helpers ------------------------------------------------------------------- */

static nsec_t now_mono(Claimer *cl)
{
        return mono_clock_now(cl->mono);
}

static void notify(Claimer *cl)
{
        uint64_t one = 1;
        (void)!write(cl->event_fd, &one, sizeof one);
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
        for (size_t i = 0; cl->host && i < cl->host->n_vfs; i++)
                if (streq(cl->host->vfs[i].parent, pf) &&
                    device_ops_is_busy(cl->ops, cl->host->vfs[i].address))
                        return true;
        return false;
}

static bool refresh_running(Claimer *cl)
{
        return cl->nvml && nvml_client_refresh_is_running(cl->nvml);
}

/* ---- finishing claims ---------------------------------------------------------------------- */

static void drop_reservation(Claim *c)
{
        c->reserved = false;
        c->write_done = false;
}

static void claim_finish(Claim *c, int r, const char *code, const char *error)
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
                res.code = code ? code : "internal";
                res.http_status = claim_code_http_status(res.code);
                res.error = error ? error : strerror(-r);
                cl->stats.claims_failed++;
                /* The owner logs the failure with its request; this is for tracing. */
                log_line(LOG_LEVEL_DEBUG, 0, "vGPU claim failed", "instance_id", c->instance_id,
                         "profile", c->profile, "code", res.code, "error", res.error, NULL);
        } else {
                char ms[32];

                res.vf = c->vf;
                res.gpu = c->gpu;
                res.type_id = c->type_id;
                res.framework = gpu_framework_to_string(cl->host->framework);
                res.claimed_at = c->claimed_at;
                res.nvml_ms = c->nvml_ms;
                cl->stats.claims_ok++;
                snprintf(ms, sizeof ms, "%" PRIu64, c->nvml_ms);
                /* PLACE-22 */
                log_line(LOG_LEVEL_INFO, 0, "placed vGPU claim", "instance_id", c->instance_id,
                         "vf", c->vf, "gpu", c->gpu, "profile", c->profile, "policy",
                         policy_to_string(cl->policy), "nvml_ms", ms, NULL);
        }
        if (c->done)
                c->done(&res, c->userdata);
}

static void claim_free(Claim *c)
{
        free(c->instance_id);
        free(c->profile);
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
        Claimer *cl = c->cl;
        bool mdev = cl->host && cl->host->framework == GPU_FRAMEWORK_MDEV;
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
        if (cl->host && cl->host->framework == GPU_FRAMEWORK_MDEV)
                return strprintf(ret, "%s/bus/mdev/devices/%s", cl->sysfs->path, c->mdev_uuid);
        return strprintf(ret, "%s/bus/pci/devices/%s", cl->sysfs->path, c->vf);
}

/*
 * A failure after the claim was saved: the claim is cleared first (the VF holds nothing of it
 * by now), then done() runs, or, with reselect, the claim selects once more.
 */
static void claim_fail_after_save(Claim *c, int r, const char *code, const char *error,
                                  bool reselect)
{
        Claimer *cl = c->cl;
        _cleanup_free_ char *path = NULL, *clear_error = NULL;

        char *copy = error ? strdup(error) : NULL; /* error may be c->fail_error itself */
        c->fail_r = r;
        c->fail_code = code;
        free(c->fail_error);
        c->fail_error = copy;
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
                claim_finish(c, c->fail_r, c->fail_code, c->fail_error);
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

static void write_failed_to_start(WriteOp *w, int r, const char *error)
{
        DeviceResult res = {
            .r = r,
            .outcome = DEVICE_OUTCOME_FAILED,
            .kind = DEVICE_FAILURE_ERROR,
            .error = error ? error : strerror(-r),
            .vf = w->vf,
        };
        if (r == -EPERM)
                res.kind = DEVICE_FAILURE_QUARANTINED;
        else if (error && startswith(error, "VF health state unavailable"))
                res.kind = DEVICE_FAILURE_STORE;
        else if (r == -EAGAIN && error && strstr(error, "is uncertain"))
                res.kind = DEVICE_FAILURE_UNCERTAIN;
        w->started = true;
        on_write_done(&res, w);
}

static void start_write(Claimer *cl, WriteOp *w)
{
        Claim *c = w->claim;
        _cleanup_free_ char *error = NULL;
        bool mdev = cl->host && cl->host->framework == GPU_FRAMEWORK_MDEV;
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
                write_failed_to_start(w, r, error);
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
                if (refreshing || (g && g->querying) || cl->refresh_wanted) {
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
                GpuRoundState *g = gpu_uses_nvml(cl, c->gpu) ? round_gpu(cl, c->gpu, true) : NULL;
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
                claim_finish(c, 0, NULL, NULL);
                return;
        }

        switch (res->kind) {
        case DEVICE_FAILURE_CAPACITY:
                /* PLACE-17: reset, clear, select once more without the VF; twice fails. */
                c->capacity_refusals++;
                free(c->fail_error);
                c->fail_error = strdup(res->error);
                c->fail_r = -ENOSPC;
                c->fail_code = "insufficient_resources";
                if (strv_push(&c->exclude, c->vf) < 0 ||
                    queue_write(c, WRITE_RESET_REFUSED, c->vf, c->gpu, c->mdev_uuid) < 0)
                        claim_fail_after_save(c, -ENOMEM, "internal", "out of memory", false);
                return;
        case DEVICE_FAILURE_QUARANTINED:
        case DEVICE_FAILURE_UNCERTAIN:
                /*
                 * DEV-2 (and GEN-4's refusal of a VF that turned uncertain since selection):
                 * nothing was written; drop the VF and select once more.
                 */
                if (strv_push(&c->exclude, c->vf) < 0) {
                        claim_fail_after_save(c, -ENOMEM, "internal", "out of memory", false);
                        return;
                }
                claim_fail_after_save(c, res->r, "internal", res->error, true);
                return;
        case DEVICE_FAILURE_STORE:
                claim_fail_after_save(c, res->r, "placement_disabled", res->error, false);
                return;
        default:
                /* GEN-4: an exhausted pool disables placement rather than failing internally. */
                claim_fail_after_save(c, res->r,
                                      res->r == -EAGAIN ? "placement_disabled" : "internal",
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
                                claim_finish(c, r, "internal", "out of memory");
                        break;
                }
                /* PLACE-12 */
                log_line(LOG_LEVEL_WARNING, 0, "dirty vGPU VF refused reset; trying another VF",
                         "vf", vf, "instance_id", c->instance_id, "error", res->error, NULL);
                free(c->refused_dirty_vf);
                free(c->refused_dirty_error);
                c->refused_dirty_vf = vf ? strdup(vf) : NULL;
                c->refused_dirty_error = strdup(res->error);
                if (!vf || strv_push(&c->exclude, vf) < 0) {
                        claim_finish(c, -ENOMEM, "internal", "out of memory");
                        break;
                }
                claim_restart(c);
                break;
        case WRITE_RESET_REFUSED:
                if (res->r < 0) {
                        /* The VF may still hold the type: the claim stays for the reconciler. */
                        _cleanup_free_ char *msg = NULL;
                        (void)strprintf(&msg, "%s; reset after refusal: %s", c->fail_error,
                                        res->error);
                        claim_finish(c, -EIO, "internal", msg ? msg : res->error);
                        break;
                }
                if (c->capacity_refusals >= 2)
                        claim_fail_after_save(c, -ENOSPC, "insufficient_resources", c->fail_error,
                                              false);
                else
                        claim_fail_after_save(c, -ENOSPC, "insufficient_resources", c->fail_error,
                                              true);
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
                (void)strprintf(&msg, "save vGPU claim: %s", error ? error : strerror(-r));
                claim_finish(c, r, "internal", msg ? msg : "save vGPU claim");
        } else {
                c->saved = true;
                if (queue_write(c, WRITE_CONFIGURE, c->vf, c->gpu, NULL) < 0)
                        claim_fail_after_save(c, -ENOMEM, "internal", "out of memory", false);
        }
        process(cl);
}

/* ---- discovery ----------------------------------------------------------------------------- */

typedef struct DiscoverJob {
        Root *sysfs;
        GpuNvmlSnapshot *nvml; /* full: what the NVML seam answers, copied on the loop */
        bool full;
        /* light: the VFs whose current_vgpu_type is re-read, and what was read */
        char **vfs;
        uint32_t *types;
        char **errors;
        GpuHost *host;
        MdevAvail *mdev;
        size_t n_mdev;
} DiscoverJob;

static void mdev_avail_free(MdevAvail *a, size_t n)
{
        for (size_t i = 0; a && i < n; i++) {
                for (size_t k = 0; k < a[i].n_types; k++)
                        free((char *)a[i].types[k].mdev_type);
                free(a[i].types);
        }
        free(a);
}

static void discover_job_free(void *data)
{
        DiscoverJob *j = data;
        root_free(j->sysfs);
        gpu_nvml_snapshot_free(j->nvml);
        gpu_host_free(j->host);
        mdev_avail_free(j->mdev, j->n_mdev);
        size_t n = strv_length(j->vfs);
        for (size_t i = 0; j->errors && i < n; i++)
                free(j->errors[i]);
        free(j->errors);
        free(j->types);
        strv_freep(&j->vfs);
        free(j);
}

/* The NVML cache is the loop's: discovery on a worker gets a copy of what the seam answers. */
static int seam_fill(Claimer *cl, DiscoverJob *j)
{
        GpuNvml live;

        if (cl->nvml)
                nvml_client_fill_gpu_seam(cl->nvml, &live);
        return gpu_nvml_snapshot_new(cl->nvml ? &live : NULL, cl->pfs, strv_length(cl->pfs),
                                     &j->nvml);
}

static int read_mdev_avail(const Root *sysfs, const GpuHost *h, MdevAvail **ret)
{
        MdevAvail *a = calloc(h->n_vfs ? h->n_vfs : 1, sizeof *a);
        if (!a)
                return -ENOMEM;
        for (size_t i = 0; i < h->n_vfs; i++) {
                const GpuVf *vf = &h->vfs[i];
                if (!gpu_vf_is_readable(vf) || vf->n_creatable == 0)
                        continue;
                a[i].types = calloc(vf->n_creatable, sizeof *a[i].types);
                if (!a[i].types) {
                        mdev_avail_free(a, h->n_vfs);
                        return -ENOMEM;
                }
                for (size_t k = 0; k < vf->n_creatable; k++) {
                        const char *type = vf->creatable[k].mdev_type;
                        _cleanup_free_ char *path = NULL, *value = NULL;
                        uint32_t n = 0;
                        if (!type)
                                continue;
                        if (strprintf(&path,
                                      "class/mdev_bus/%s/mdev_supported_types/%s/"
                                      "available_instances",
                                      vf->address, type) < 0) {
                                mdev_avail_free(a, h->n_vfs);
                                return -ENOMEM;
                        }
                        /* Unreadable availability is no availability (fail closed). */
                        if (root_read_attr(sysfs, path, MDEV_AVAILABLE_MAX, &value) < 0 ||
                            parse_uint32(value, &n) < 0)
                                n = 0;
                        char *copy = strdup(type);
                        if (!copy) {
                                mdev_avail_free(a, h->n_vfs);
                                return -ENOMEM;
                        }
                        a[i].types[a[i].n_types++] = (PlacementMdevAvailability){
                            .mdev_type = copy, .available_instances = n};
                }
        }
        *ret = a;
        return 0;
}

static int discover_job_run(void *data, char **error)
{
        DiscoverJob *j = data;
        if (!j->full) {
                /*
                 * Between full discoveries only the VFs' configuration changes (SR-IOV cycles
                 * need vgpud stopped, OPS-10), so a claim that decides on NVML placements
                 * re-reads just that: one bounded read per VF (DISC-5).
                 */
                for (size_t i = 0; j->vfs[i]; i++) {
                        uint32_t t;
                        if (device_vfio_read_type(j->sysfs, j->vfs[i], &t, &j->errors[i]) >= 0)
                                j->types[i] = t;
                        else if (!j->errors[i])
                                j->errors[i] = strdup("read current vGPU type failed");
                }
                return 0;
        }
        GpuNvml seam;
        gpu_nvml_snapshot_seam(j->nvml, &seam);
        int r = gpu_discover(j->sysfs, &seam, &j->host, error);
        if (r < 0)
                return r;
        if (j->host->framework == GPU_FRAMEWORK_MDEV) {
                r = read_mdev_avail(j->sysfs, j->host, &j->mdev);
                if (r < 0)
                        return r;
                j->n_mdev = j->host->n_vfs;
        }
        return 0;
}

/* An abandoned job may outlive the Claimer, so it works on its own duplicate of the root. */
static int root_dup(const Root *r, Root **ret)
{
        _cleanup_close_ int fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 3);
        if (fd < 0)
                return negative_errno();
        Root *copy = calloc(1, sizeof *copy);
        if (!copy)
                return -ENOMEM;
        copy->path = strdup(r->path);
        if (!copy->path) {
                free(copy);
                return -ENOMEM;
        }
        copy->fd = TAKE_FD(fd);
        *ret = copy;
        return 0;
}

/* A GPU decides on fresh NVML placements (PLACE-4) rather than on its VFs' lists. */
static bool gpu_uses_nvml(Claimer *cl, const char *pf)
{
        return cl->nvml && cl->host && cl->host->framework == GPU_FRAMEWORK_VENDOR_VFIO &&
               nvml_client_get_gpu_fallback(cl->nvml, pf, NULL) == NVML_FALLBACK_NONE &&
               nvml_client_get_gpu_mode(cl->nvml, pf) == NVML_MODE_MIXED;
}

/*
 * DISC-20 for the GPUs concerned: a claim whose candidate GPUs all decide on NVML needs only
 * their VFs' states re-read; any sysfs-path GPU needs its lists, which a full discovery reads.
 */
static bool claim_needs_full_discovery(Claimer *cl, const Claim *c)
{
        if (!cl->host || cl->host->framework != GPU_FRAMEWORK_VENDOR_VFIO || c->force_full)
                return true;
        bool any = false;
        for (size_t i = 0; i < cl->host->n_gpus; i++) {
                const Gpu *g = &cl->host->gpus[i];
                if (!gpu_find_profile(g, c->profile))
                        continue;
                if (!gpu_uses_nvml(cl, g->address) || g->catalog_source != GPU_CATALOG_NVML)
                        return true;
                any = true;
        }
        return !any; /* a name no catalog knows: read everything before saying so */
}

static int light_fill(Claimer *cl, DiscoverJob *j, size_t from, size_t to)
{
        size_t n = to - from;
        j->types = calloc(n + 1, sizeof *j->types);
        j->errors = calloc(n + 1, sizeof *j->errors);
        if (!j->types || !j->errors)
                return -ENOMEM;
        for (size_t i = from; i < to; i++)
                if (strv_push(&j->vfs, cl->host->vfs[i].address) < 0)
                        return -ENOMEM;
        if (!j->vfs && !(j->vfs = calloc(1, sizeof *j->vfs)))
                return -ENOMEM;
        return 0;
}

/* Folds a light refresh into the host: configured state and profile (DISC-5, DISC-6). */
static void apply_vf_states(Claimer *cl, DiscoverJob *j)
{
        for (size_t i = 0; j->vfs[i]; i++) {
                GpuVf *vf = (GpuVf *)gpu_host_find_vf(cl->host, j->vfs[i]);
                if (!vf || !gpu_vf_is_readable(vf))
                        continue;
                if (j->errors[i]) {
                        vf->error = TAKE_PTR(j->errors[i]);
                        continue;
                }
                if (vf->current_type_id == j->types[i])
                        continue;
                vf->current_type_id = j->types[i];
                free(vf->current_profile);
                vf->current_profile = NULL;
                const Gpu *g = vf->parent[0] ? gpu_host_find_gpu(cl->host, vf->parent) : NULL;
                const GpuProfile *p =
                    g && j->types[i] ? gpu_find_profile_by_type_id(g, j->types[i]) : NULL;
                if (p)
                        vf->current_profile = strdup(p->name);
        }
}

static void set_pfs_from_host(Claimer *cl)
{
        _cleanup_strv_free_ char **pfs = NULL;
        for (size_t i = 0; i < cl->host->n_gpus; i++)
                if (strv_push(&pfs, cl->host->gpus[i].address) < 0)
                        return;
        strv_freep(&cl->pfs);
        cl->pfs = TAKE_PTR(pfs);
}

static void on_discover_done(int r, void *data, const char *error, void *userdata)
{
        Claimer *cl = userdata;
        DiscoverJob *j = data;
        uint64_t seq = cl->discoveries_started; /* one runs at a time */
        bool full = cl->discovering_full;

        if (r >= 0 && j && !full)
                apply_vf_states(cl, j);
        else if (r >= 0 && j) {
                mdev_avail_free(cl->mdev, cl->host ? cl->host->n_vfs : 0);
                gpu_host_free(cl->host);
                cl->mdev = TAKE_PTR(j->mdev);
                j->n_mdev = 0;
                cl->host = TAKE_PTR(j->host);
                set_pfs_from_host(cl);
        } else if (!cl->discover_error)
                cl->discover_error = strdup(error ? error : strerror(-r));
        if (--cl->discover_pending > 0)
                return;

        _cleanup_free_ char *msg = TAKE_PTR(cl->discover_error);
        if (r >= 0 && msg)
                r = -EIO;
        cl->discovering = false;
        cl->discoveries_done = seq;

        for (Claim *c = cl->claims; c; c = c->next) {
                if (c->state != CLAIM_DISCOVER || c->discovery_floor >= seq ||
                    (c->needs_full && !full))
                        continue;
                if (msg) {
                        /* API-21: discovery failed → placement disabled. */
                        claim_finish(c, r < 0 ? r : -EIO, "placement_disabled", msg);
                        continue;
                }
                c->state = CLAIM_WAIT;
                c->discovered_full = full;
        }
        process(cl);
}

static int submit_discovery(Claimer *cl, bool full, size_t from, size_t to, char **error)
{
        DiscoverJob *j = calloc(1, sizeof *j);
        int r = j ? root_dup(cl->sysfs, &j->sysfs) : -ENOMEM;
        if (j)
                j->full = full;
        if (r >= 0 && full)
                r = seam_fill(cl, j);
        else if (r >= 0)
                r = light_fill(cl, j, from, to);
        if (r >= 0) {
                WorkerJob job = {
                    .timeout = cl->sysfs_timeout,
                    .run = discover_job_run,
                    .done = on_discover_done,
                    .data = j,
                    .free_data = discover_job_free,
                    .userdata = cl,
                };
                r = worker_pool_submit(cl->pool, &job, error);
        }
        if (r < 0 && j)
                discover_job_free(j);
        return r;
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

        /* A light re-read is split over the pool's threads: it is on every claim's path. */
        size_t n_vfs = full ? 0 : cl->host->n_vfs;
        size_t chunks = n_vfs / 8;
        if (chunks < 1)
                chunks = 1;
        if (chunks > WORKER_POOL_THREADS)
                chunks = WORKER_POOL_THREADS;
        for (size_t k = 0; k < chunks; k++) {
                _cleanup_free_ char *error = NULL;
                int r = submit_discovery(cl, full, n_vfs * k / chunks, n_vfs * (k + 1) / chunks,
                                         &error);
                if (r >= 0) {
                        cl->discover_pending++;
                        continue;
                }
                if (k > 0) {
                        /* The jobs already out finish the discovery, as a failed one. */
                        if (!cl->discover_error)
                                cl->discover_error = strdup(error ? error : strerror(-r));
                        break;
                }
                for (Claim *c = cl->claims; c; c = c->next)
                        if (c->state == CLAIM_DISCOVER)
                                claim_finish(c, r, "placement_disabled",
                                             error ? error : strerror(-r));
                return;
        }
        cl->discovering = true;
        cl->discovering_full = full;
        cl->discoveries_started++;
        cl->stats.discoveries++;
}

/* ---- the snapshot -------------------------------------------------------------------------- */

typedef struct Snap {
        PlacementSnapshot s;
        PlacementGpu *gpus;
        PlacementProfile **catalogs;
        PlacementNvmlCount **counts;
        PlacementVf *vfs;
        const char ***creatable;
} Snap;

static void snap_done(Snap *sn)
{
        for (size_t i = 0; i < sn->s.n_gpus; i++) {
                free(sn->catalogs[i]);
                free(sn->counts[i]);
        }
        for (size_t i = 0; i < sn->s.n_vfs; i++)
                free(sn->creatable[i]);
        free(sn->gpus);
        free(sn->catalogs);
        free(sn->counts);
        free(sn->vfs);
        free(sn->creatable);
        *sn = (Snap){};
}

/* The NVML answer usable for this GPU: its latest round's, with PLACE-7's subtraction. */
static int snap_counts(Claimer *cl, const char *pf, PlacementNvmlCount **ret, size_t *ret_n)
{
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

static uint64_t vf_framebuffer(const GpuHost *h, const GpuVf *vf)
{
        const Gpu *g = vf->parent[0] ? gpu_host_find_gpu(h, vf->parent) : NULL;
        const GpuProfile *p =
            g && vf->current_type_id ? gpu_find_profile_by_type_id(g, vf->current_type_id) : NULL;
        if (p)
                return p->framebuffer_mib;
        if (vf->current_profile)
                return gpu_profile_framebuffer_mib(vf->current_profile);
        return 0;
}

static int snap_build(Claimer *cl, Snap *sn)
{
        const GpuHost *h = cl->host;
        Snap s = {};
        int r;

        s.s.n_gpus = h->n_gpus;
        s.s.n_vfs = h->n_vfs;
        s.gpus = calloc(h->n_gpus + 1, sizeof *s.gpus);
        s.catalogs = calloc(h->n_gpus + 1, sizeof *s.catalogs);
        s.counts = calloc(h->n_gpus + 1, sizeof *s.counts);
        s.vfs = calloc(h->n_vfs + 1, sizeof *s.vfs);
        s.creatable = calloc(h->n_vfs + 1, sizeof *s.creatable);
        if (!s.gpus || !s.catalogs || !s.counts || !s.vfs || !s.creatable) {
                snap_done(&s);
                return -ENOMEM;
        }
        bool mdev = h->framework == GPU_FRAMEWORK_MDEV;

        for (size_t i = 0; i < h->n_gpus; i++) {
                const Gpu *g = &h->gpus[i];
                PlacementGpu *pg = &s.gpus[i];
                NvmlFallback f = cl->nvml ? nvml_client_get_gpu_fallback(cl->nvml, g->address, NULL)
                                          : NVML_FALLBACK_UNAVAILABLE;
                NvmlMode m =
                    cl->nvml ? nvml_client_get_gpu_mode(cl->nvml, g->address) : NVML_MODE_UNKNOWN;

                s.catalogs[i] = calloc(g->n_catalog + 1, sizeof **s.catalogs);
                if (!s.catalogs[i]) {
                        snap_done(&s);
                        return -ENOMEM;
                }
                for (size_t k = 0; k < g->n_catalog; k++)
                        s.catalogs[i][k] = (PlacementProfile){
                            .name = g->catalog[k].name,
                            .type_id = g->catalog[k].type_id,
                            .mdev_type = g->catalog[k].mdev_type,
                            .framebuffer_mib = g->catalog[k].framebuffer_mib,
                        };
                size_t n_counts = 0;
                r = snap_counts(cl, g->address, &s.counts[i], &n_counts);
                if (r < 0) {
                        snap_done(&s);
                        return r;
                }
                *pg = (PlacementGpu){
                    .address = g->address,
                    .framework = mdev ? PLACEMENT_FRAMEWORK_MDEV : PLACEMENT_FRAMEWORK_VENDOR_VFIO,
                    .mode = m == NVML_MODE_MIXED   ? PLACEMENT_MODE_MIXED
                            : m == NVML_MODE_EQUAL ? PLACEMENT_MODE_EQUAL
                                                   : PLACEMENT_MODE_UNKNOWN,
                    .nvml_usable = !mdev && f == NVML_FALLBACK_NONE,
                    .nvml_counts = s.counts[i],
                    .n_nvml_counts = n_counts,
                    .catalog_from_nvml = g->catalog_source == GPU_CATALOG_NVML,
                    .catalog = s.catalogs[i],
                    .n_catalog = g->n_catalog,
                };
        }

        for (size_t i = 0; i < h->n_vfs; i++) {
                const GpuVf *vf = &h->vfs[i];
                PlacementVf *pv = &s.vfs[i];
                const Claim *owner = NULL;
                uint64_t claimed_fb = 0;
                bool claimed = cl->owner.is_claimed &&
                               cl->owner.is_claimed(cl->owner.userdata, vf->address, &claimed_fb);
                bool reserved = vf_is_reserved(cl, vf->address, &owner);

                s.creatable[i] = calloc(vf->n_creatable + 1, sizeof *s.creatable[i]);
                if (!s.creatable[i]) {
                        snap_done(&s);
                        return -ENOMEM;
                }
                for (size_t k = 0; k < vf->n_creatable; k++)
                        s.creatable[i][k] = vf->creatable[k].name;

                uint64_t fb = vf_framebuffer(h, vf);
                if (reserved)
                        fb = owner->framebuffer_mib;
                else if (claimed && claimed_fb)
                        fb = claimed_fb;
                *pv = (PlacementVf){
                    .address = vf->address,
                    .parent = vf->parent[0] ? vf->parent : NULL,
                    .readable = gpu_vf_is_readable(vf),
                    .current_type = vf->current_type_id,
                    .has_mdev = vf->mdev_uuids != NULL,
                    .framebuffer_mib = fb,
                    .claimed = claimed,
                    .reserved = reserved && !owner->write_done,
                    .reserved_type = reserved ? owner->type_id : 0,
                    .uncertain = worker_pool_key_is_uncertain(cl->pool, vf->address),
                    .quarantined = cl->guard.is_quarantined &&
                                   cl->guard.is_quarantined(cl->guard.userdata, vf->address),
                    .creatable = s.creatable[i],
                    .n_creatable = vf->n_creatable,
                    .mdev_types = cl->mdev ? cl->mdev[i].types : NULL,
                    .n_mdev_types = cl->mdev ? cl->mdev[i].n_types : 0,
                };
                /* A reservation whose write is done is still not allocatable until it ends. */
                if (reserved && owner->write_done)
                        pv->claimed = true;
        }
        s.s.gpus = s.gpus;
        s.s.vfs = s.vfs;
        *sn = s;
        return 0;
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
static Readiness claim_readiness(Claimer *cl, Claim *c, const Snap *sn, bool collect_only,
                                 Pair **pairs, size_t *n_pairs)
{
        Readiness res = READY;
        for (size_t i = 0; i < sn->s.n_gpus; i++) {
                const PlacementGpu *g = &sn->s.gpus[i];
                const PlacementProfile *p = placement_gpu_find_profile(g, c->profile);
                if (!p)
                        continue;
                if (collect_only && (placement_gpu_path(g) != PLACEMENT_PATH_NVML ||
                                     placement_nvml_answer_is_stale(&sn->s, g, c->profile)))
                        continue;
                if (placement_gpu_path(g) != PLACEMENT_PATH_NVML) {
                        if (!c->discovered_full)
                                return RELIST;
                        if (placement_gpu_must_wait(&sn->s, g)) {
                                c->rediscover = true; /* PLACE-10 */
                                res = BLOCKED;
                        }
                        continue;
                }
                if (placement_nvml_answer_is_stale(&sn->s, g, c->profile)) {
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
                if (gpu_is_writing(cl, pairs[i].pf)) {
                        poll_again = true; /* PLACE-9: never while a write to G runs */
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

static void place16_start(Claim *c, const Snap *sn, int select_r, const char *select_error);

static void claim_fail_selection(Claim *c, int r, const char *error)
{
        if (c->refused_dirty_vf && r == -ENOSPC) {
                _cleanup_free_ char *msg = NULL;
                (void)strprintf(&msg, "repair dirty VF %s before claim: %s", c->refused_dirty_vf,
                                c->refused_dirty_error);
                claim_finish(c, r, "insufficient_resources", msg ? msg : error);
                return;
        }
        if (c->capacity_refusals > 0 && r == -ENOSPC) {
                /* PLACE-17: nothing else to try; the driver's refusal is the answer. */
                claim_finish(c, r, "insufficient_resources", c->fail_error);
                return;
        }
        const char *code = placement_error_code(r);
        claim_finish(c, r, code ? code : "internal", error);
}

static void claim_select(Claimer *cl, Claim *c, const Snap *sn)
{
        _cleanup_free_ char *error = NULL;
        const char *unavailable =
            cl->guard.store_unavailable ? cl->guard.store_unavailable(cl->guard.userdata) : NULL;
        if (unavailable) {
                claim_finish(c, -EAGAIN, "placement_disabled", unavailable); /* HEALTH-16 */
                return;
        }

        PlacementRequest req = {
            .profile = c->profile,
            .policy = cl->policy,
            .exclude = (const char *const *)c->exclude,
            .n_exclude = strv_length(c->exclude),
        };
        PlacementChoice choice;
        c->selections++;
        int r = placement_select_vf(&sn->s, &req, &cl->picker, &choice, &error);
        if (r < 0) {
                if (r == -ENOSPC && !c->place16_done) {
                        place16_start(c, sn, r, error);
                        return;
                }
                claim_fail_selection(c, r, error);
                return;
        }

        /* Reserve (PLACE-2): concurrent claims see it from the next snapshot on. */
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
                claim_finish(c, -ENOMEM, "internal", "out of memory");
                return;
        }

        if (choice.dirty) {
                /* PLACE-11: reset while reserved, before the claim is written. */
                const GpuVf *vf = gpu_host_find_vf(cl->host, c->vf);
                const char *uuid = vf && vf->mdev_uuids ? vf->mdev_uuids[0] : NULL;
                if (queue_write(c, WRITE_RESET_DIRTY, c->vf, c->gpu, uuid) < 0)
                        claim_finish(c, -ENOMEM, "internal", "out of memory");
                return;
        }
        r = save_claim(c);
        if (r < 0)
                claim_finish(c, r, "internal", "out of memory");
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

static void place16_start(Claim *c, const Snap *sn, int select_r, const char *select_error)
{
        Claimer *cl = c->cl;
        _cleanup_free_ char *error = NULL;

        c->place16_done = true;
        c->force_full = true;
        c->fail_r = select_r;
        free(c->fail_error);
        c->fail_error = select_error ? strdup(select_error) : NULL;

        ScanJob *j = calloc(1, sizeof *j);
        if (!j) {
                claim_fail_selection(c, select_r, select_error);
                return;
        }
        for (size_t i = 0; i < sn->s.n_vfs; i++) {
                const PlacementVf *v = &sn->s.vfs[i];
                if (!v->readable || v->uncertain || !v->parent || !placement_vf_is_dirty(v))
                        continue;
                const GpuVf *vf = gpu_host_find_vf(cl->host, v->address);
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

static void arm_timer(Claimer *cl, nsec_t at)
{
        struct itimerspec its = {};
        if (at > 0) {
                nsec_t now = now_mono(cl);
                nsec_t d = at > now ? at - now : 1;
                its.it_value.tv_sec = (time_t)(d / NSEC_PER_SEC);
                its.it_value.tv_nsec = (long)(d % NSEC_PER_SEC);
        }
        (void)timerfd_settime(cl->timer_fd, 0, &its, NULL);
}

static void maybe_start_refresh(Claimer *cl)
{
        if (!cl->refresh_wanted || any_write_started(cl) || !cl->nvml)
                return;
        /* PLACE-9 covers the owner's writes too: a refresh queries every GPU. */
        for (size_t i = 0; cl->host && i < cl->host->n_vfs; i++)
                if (device_ops_is_busy(cl->ops, cl->host->vfs[i].address))
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

        maybe_start_refresh(cl);
        maybe_start_discovery(cl);

        Pair *pairs = NULL;
        size_t n_pairs = 0;
        if (cl->host && cl->nvml) {
                /*
                 * A claim that only re-reads VF states asks NVML at once, so the round runs
                 * alongside that read (it needs nothing from it); the round still starts after
                 * the claim entered placement (PLACE-7).
                 */
                Snap sn = {};
                bool built = false;
                for (Claim *c = cl->claims; c; c = c->next) {
                        if (c->state != CLAIM_DISCOVER || c->needs_full || !cl->discovering)
                                continue;
                        if (!built && snap_build(cl, &sn) < 0)
                                break;
                        built = true;
                        (void)claim_readiness(cl, c, &sn, true, &pairs, &n_pairs);
                }
                if (built)
                        snap_done(&sn);
        }
        if (cl->host) {
                /* Claims select in entry order, each seeing the reservations of those before. */
                for (Claim *c = cl->claims; c; c = c->next) {
                        if (c->state != CLAIM_WAIT)
                                continue;
                        if (c->wait_deadline && now >= c->wait_deadline) {
                                _cleanup_free_ char *msg = NULL;
                                (void)strprintf(&msg, "vGPU placement round timed out after %s",
                                                format_duration(cl->nvml_timeout, d));
                                claim_finish(c, -ETIMEDOUT, "placement_disabled", msg);
                                continue;
                        }
                        Snap sn = {};
                        if (snap_build(cl, &sn) < 0) {
                                claim_finish(c, -ENOMEM, "internal", "out of memory");
                                continue;
                        }
                        Readiness rd = claim_readiness(cl, c, &sn, false, &pairs, &n_pairs);
                        if (rd == RELIST || (rd == READY && c->rediscover)) {
                                snap_done(&sn);
                                claim_restart(c);
                                continue;
                        }
                        if (rd == READY) {
                                claim_select(cl, c, &sn);
                                snap_done(&sn);
                                continue;
                        }
                        snap_done(&sn);
                        if (!c->wait_deadline)
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
        if (!c->instance_id || !c->profile || (request->mdev_uuid && !c->mdev_uuid)) {
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

/* A turn of the Claimer's source: starts what is due. */
static int claimer_turn(Claimer *cl)
{
        uint64_t v;
        (void)!read(cl->event_fd, &v, sizeof v);
        (void)!read(cl->timer_fd, &v, sizeof v);
        process(cl);
        return 0;
}

DEFINE_ATTACH_EVENT(claimer_attach_event, Claimer, event_source, epoll_fd, claimer_turn)

int claimer_set_gpus(Claimer *cl, char *const *pfs, size_t n)
{
        _cleanup_strv_free_ char **copy = NULL;
        for (size_t i = 0; i < n; i++) {
                if (!pci_address_is_valid(pfs[i]))
                        return -EINVAL;
                if (strv_push(&copy, pfs[i]) < 0)
                        return -ENOMEM;
        }
        strv_freep(&cl->pfs);
        cl->pfs = TAKE_PTR(copy);
        return 0;
}

const GpuHost *claimer_get_host(Claimer *cl)
{
        return cl->host;
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

const ClaimerStats *claimer_get_stats(Claimer *cl)
{
        return &cl->stats;
}

int claimer_new(const ClaimerConfig *config, Claimer **ret)
{
        if (!config || !config->sysfs || !config->proc || !config->dev_root || !config->pool ||
            !config->ops || !config->owner.save)
                return -EINVAL;

        Claimer *cl = calloc(1, sizeof *cl);
        if (!cl)
                return -ENOMEM;
        cl->epoll_fd = cl->event_fd = cl->timer_fd = -1;
        int r = root_dup(config->sysfs, &cl->sysfs);
        if (r < 0) {
                free(cl);
                return r;
        }
        cl->proc = config->proc;
        cl->dev_root = strdup(config->dev_root);
        cl->pool = config->pool;
        cl->ops = config->ops;
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

        cl->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
        cl->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        cl->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
        if (cl->epoll_fd < 0 || cl->event_fd < 0 || cl->timer_fd < 0) {
                r = negative_errno();
                claimer_free(cl);
                return r;
        }
        int fds[] = {cl->event_fd, cl->timer_fd};
        for (size_t i = 0; i < ELEMENTSOF(fds); i++) {
                struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
                if (epoll_ctl(cl->epoll_fd, EPOLL_CTL_ADD, fds[i], &ev) < 0) {
                        r = negative_errno();
                        claimer_free(cl);
                        return r;
                }
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
        for (size_t i = 0; i < cl->n_gpus; i++)
                free(cl->gpus[i].placements);
        free(cl->gpus);
        free(cl->records);
        mdev_avail_free(cl->mdev, cl->host ? cl->host->n_vfs : 0);
        gpu_host_free(cl->host);
        strv_freep(&cl->pfs);
        free(cl->discover_error);
        root_free(cl->sysfs);
        free(cl->dev_root);
        sd_event_source_disable_unref(cl->event_source);
        closep(&cl->epoll_fd);
        closep(&cl->event_fd);
        closep(&cl->timer_fd);
        free(cl);
        return NULL;
}
