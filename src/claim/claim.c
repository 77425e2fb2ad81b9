/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The claim flow (claim.h): the engine. Everything here runs on the owner's thread; the
 * blocking parts (discovery, the PLACE-16 scan) run on the worker pool, NVML queries on the NVML
 * thread and writes through DeviceOps, and each posts back into claimer_process(), which moves
 * every claim as far as it can go. Its parts: claim-wait.c (discovery and NVML rounds),
 * claim-write.c (the Claimer's writes), claim-sweep.c (PLACE-16), write-gate.c (the owner's
 * writes, PLACE-9).
 */
#include "claim-internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <sys/random.h>

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

const GpuHost *claimer_host(Claimer *cl)
{
        return gpu_tracker_host(cl->tracker);
}

bool claimer_host_is_mdev(Claimer *cl)
{
        return claimer_host(cl) && claimer_host(cl)->framework == GPU_FRAMEWORK_MDEV;
}

nsec_t claimer_now(Claimer *cl)
{
        return mono_clock_now(cl->mono);
}

void claimer_notify(Claimer *cl)
{
        loop_wake(cl->wake);
}

GpuRoundState *claimer_round_gpu(Claimer *cl, const char *pf, bool create)
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
bool claimer_gpu_is_writing(Claimer *cl, const char *pf)
{
        if (gpu_has_write_started(cl, pf))
                return true;
        const GpuHost *h = claimer_host(cl);
        for (size_t i = 0; h && i < h->n_vfs; i++)
                if (streq(h->vfs[i].parent, pf) && device_ops_is_busy(cl->ops, h->vfs[i].address))
                        return true;
        return false;
}

bool claimer_refresh_running(Claimer *cl)
{
        return cl->nvml && nvml_client_refresh_is_running(cl->nvml);
}

/* An NVML query about pf runs: a round covering it, or a refresh (every GPU). */
static bool gpu_query_running(Claimer *cl, const char *pf)
{
        GpuRoundState *g = claimer_round_gpu(cl, pf, false);
        return claimer_refresh_running(cl) || (g && g->querying);
}

/* ---- finishing claims ---------------------------------------------------------------------- */

void claim_drop_reservation(Claim *c)
{
        if (c->reserved)
                c->cl->generation++;
        c->reserved = false;
        c->write_done = false;
}

/* error is the failure's message (r < 0), never NULL then; ClaimResult.error passes it on. */
void claim_finish(Claim *c, int r, ClaimFailure kind, const char *error)
{
        Claimer *cl = c->cl;

        /* PLACE-2: an abandoned reservation is dropped in the same step as the failure. */
        if (r < 0)
                claim_drop_reservation(c);
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
                res.framework = gpu_framework_to_string(claimer_host(cl)->framework);
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

static ClaimRecord claim_record(Claim *c, char *device_path)
{
        bool mdev = claimer_host_is_mdev(c->cl);
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
        if (claimer_host_is_mdev(cl))
                return strprintf(ret, "%s/bus/mdev/devices/%s", cl->sysfs->path, c->mdev_uuid);
        return strprintf(ret, "%s/bus/pci/devices/%s", cl->sysfs->path, c->vf);
}

/*
 * A failure after the claim was saved: the claim is cleared first (the VF holds nothing of it
 * by now), then done() runs, or, with reselect, the claim selects once more.
 */
void claim_fail_after_save(Claim *c, int r, ClaimFailure kind, const char *error, bool reselect)
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

void claim_restart(Claim *c)
{
        Claimer *cl = c->cl;
        claim_drop_reservation(c);
        c->saved = false;
        c->state = CLAIM_DISCOVER;
        c->discovery_floor = cl->discoveries_started;
        c->round_floor = cl->rounds;
        c->wait_deadline = 0;
        c->rediscover = false;
        claimer_notify(cl);
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
        claimer_process(cl);
}

/* ---- saving (PLACE-1, PLACE-20) ------------------------------------------------------------ */

int claim_save(Claim *c)
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
                if (claim_queue_write(c, WRITE_CONFIGURE, c->vf, c->gpu, NULL) < 0)
                        claim_fail_after_save(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory",
                                              false);
        }
        claimer_process(cl);
}

/* ---- the snapshot -------------------------------------------------------------------------- */

/* The NVML answer usable for this GPU: its latest round's, with PLACE-7's subtraction. */
static int snap_counts(void *userdata, const char *pf, PlacementNvmlCount **ret, size_t *ret_n)
{
        Claimer *cl = userdata;
        GpuRoundState *g = claimer_round_gpu(cl, pf, false);
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
        if (!claimer_host(cl))
                return -EAGAIN;
        claimer_fill_overlays(cl, &o);
        o.nvml_counts = snap_counts;
        return placement_view_build(claimer_host(cl), &o, ret);
}

/* ---- selection ----------------------------------------------------------------------------- */

void claim_fail_selection(Claim *c, int r, const char *error)
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
                        claim_place16_start(c, sn, r, error);
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
        c->nvml_ms = (claimer_now(cl) - c->entered) / NSEC_PER_MSEC;
        if (!c->chosen_profile) {
                claim_finish(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory");
                return;
        }
        if (cl->owner.reserved)
                cl->owner.reserved(cl->owner.userdata, c->instance_id);

        if (choice.dirty) {
                /* PLACE-11: reset while reserved, before the claim is written. */
                const GpuVf *vf = gpu_host_find_vf(claimer_host(cl), c->vf);
                const char *uuid = vf && vf->mdev_uuids ? vf->mdev_uuids[0] : NULL;
                if (claim_queue_write(c, WRITE_RESET_DIRTY, c->vf, c->gpu, uuid) < 0)
                        claim_finish(c, -ENOMEM, CLAIM_FAILURE_INTERNAL, "out of memory");
                return;
        }
        r = claim_save(c);
        if (r < 0)
                claim_finish(c, r, CLAIM_FAILURE_INTERNAL, "out of memory");
}

/* ---- the engine ---------------------------------------------------------------------------- */

/* at is on the Claimer's clock (which tests inject); 0 disarms. */
static void arm_timer(Claimer *cl, nsec_t at)
{
        if (at == 0) {
                loop_timer_arm(cl->timer, NSEC_INFINITY);
                return;
        }
        nsec_t now = claimer_now(cl);
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
        const GpuHost *h = claimer_host(cl);
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
        nsec_t now = claimer_now(cl);
        char d[DURATION_STRLEN];

        /* First, so that the owner's writes are in DeviceOps before new queries are considered;
         * the end of a refresh is not signalled, so waiting gates poll. */
        if (write_gate_open(cl->gate))
                *poll_again = true;
        maybe_start_refresh(cl);
        claimer_maybe_start_discovery(cl);

        Pair *pairs = NULL;
        size_t n_pairs = 0;
        if (claimer_host(cl) && cl->nvml) {
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
        if (claimer_host(cl)) {
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
        if (claimer_maybe_start_round(cl, pairs, n_pairs))
                *poll_again = true;
        claim_pairs_free(pairs, n_pairs);

        if (claimer_kick_writes(cl))
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

void claimer_process(Claimer *cl)
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
                nsec_t p = claimer_now(cl) + CLAIM_POLL_INTERVAL;
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
        c->entered = claimer_now(cl);
        c->state = CLAIM_DISCOVER;
        c->discovery_floor = cl->discoveries_started;
        c->round_floor = cl->rounds;

        Claim **tail = &cl->claims;
        while (*tail)
                tail = &(*tail)->next;
        *tail = c;
        claimer_notify(cl); /* batched: the discovery starts at the next dispatch */
        return 0;
}

/* A turn of the Claimer's sources: starts what is due. */
static int on_wake(sd_event_source *s, void *userdata)
{
        claimer_process(userdata);
        return 0;
}

static int on_timer(sd_event_source *s, uint64_t usec, void *userdata)
{
        claimer_process(userdata);
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
        claimer_notify(cl); /* what was asked before: the first turn arms the timer too */
        return 0;
}

bool claimer_gpu_is_querying(Claimer *cl, const char *pf)
{
        GpuRoundState *g = claimer_round_gpu(cl, pf, false);
        return g && g->querying;
}

int claimer_request_nvml_refresh(Claimer *cl, bool init)
{
        if (!cl->nvml)
                return 0;
        cl->refresh_wanted = true;
        cl->refresh_init |= init;
        claimer_process(cl);
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
        claimer_notify(userdata);
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
                claim_write_op_free(w);
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
