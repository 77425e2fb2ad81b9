/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A small owner for the claim flow against a mounted vgpu-sim: the sysfs worker pool, DeviceOps,
 * the NVML client on the simulator's fake libnvidia-ml.so.1, a Claimer, and a fake owner whose
 * durable claims live in memory (saves and clears complete on the next loop turn, never inside
 * the call, and a save can be made to fail). Used by tests/integration/test-claim-sim.c and
 * bench/perf4-claims.c. Every part is attached to one sd-event loop, as the daemon attaches them;
 * harness_run_until() runs it (bounded). The simulator client is testlib's.
 */

#include <inttypes.h>
#include <jansson.h>

#include "api/api.h"
#include "claim/claim.h"
#include "testlib.h"

#define HARNESS_MAX_CLAIMS 64

typedef struct OwnerOp {
        Claim *token;
        bool clear;
        int r;
        char *error;
} OwnerOp;

typedef struct OwnerClaim {
        char vf[PCI_ADDRESS_STRLEN];
        uint64_t framebuffer_mib;
} OwnerClaim;

typedef struct Harness Harness;

typedef struct ClaimOutcome {
        bool done;
        int r;
        char *code;
        int status;
        char *error;
        char vf[PCI_ADDRESS_STRLEN];
        char gpu[PCI_ADDRESS_STRLEN];
        uint64_t nvml_ms;
        unsigned selections;
        nsec_t finished; /* CLOCK_MONOTONIC */
} ClaimOutcome;

struct Harness {
        TestSim *sim;
        sd_event *event;
        sd_event_source *owner_turn; /* completes the fake owner's saves and clears */
        Root *sys, *proc;
        char *dev;
        WorkerPool *pool;
        DeviceOps *ops;
        NvmlClient *nvml;
        GpuTracker *tracker;
        Claimer *cl;
        WriteGate *gate; /* PLACE-9 for the owner's writes, as the Manager owns it */
        nsec_t nvml_timeout;
        int discovered; /* the last tracker run asked for: 0 pending, 1 done, -errno */

        /* the fake owner */
        OwnerOp ops_pending[2 * HARNESS_MAX_CLAIMS];
        size_t n_pending;
        OwnerClaim claims[256];
        size_t n_claims;
        const char *save_error; /* non-NULL: every save fails with it */
        char *saved_vfs[2 * HARNESS_MAX_CLAIMS];
        size_t n_saves, n_clears;
        unsigned vf_changes; /* the owner's vf_changed() calls: one per write that ended */
};

static inline nsec_t harness_now(void)
{
        return mono_clock_now(&mono_clock_system);
}

static inline int harness_ctl(const Harness *h, const char *command)
{
        return test_sim_ctl(h->sim, "%s", command);
}

/* state.json, or NULL when it cannot be read. */
static inline json_t *harness_state(const Harness *h)
{
        json_t *st = NULL;
        return test_sim_state(h->sim, &st) < 0 ? NULL : st;
}

/* Writes a VF's current_vgpu_type through the simulator's own file, as a test set-up step. */
static inline int harness_set_type(const Harness *h, const char *vf, const char *type)
{
        _cleanup_free_ char *p =
            test_sim_path(h->sim, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", vf);
        return p ? test_write_once(p, type) : -ENOMEM;
}

/* ---- the fake owner ----------------------------------------------------------------------- */

static inline void harness_owner_claim(Harness *h, const char *vf, uint64_t fb)
{
        OwnerClaim *c = &h->claims[h->n_claims++];
        snprintf(c->vf, sizeof c->vf, "%s", vf);
        c->framebuffer_mib = fb;
}

static inline void harness_owner_unclaim(Harness *h, const char *vf)
{
        for (size_t i = 0; i < h->n_claims; i++)
                if (streq(h->claims[i].vf, vf)) {
                        h->claims[i] = h->claims[--h->n_claims];
                        return;
                }
}

static inline int harness_save(void *userdata, const ClaimRecord *rec, Claim *token, char **error)
{
        Harness *h = userdata;
        OwnerOp *op = &h->ops_pending[h->n_pending++];
        *op = (OwnerOp){.token = token};
        (void)sd_event_source_set_enabled(h->owner_turn, SD_EVENT_ONESHOT);
        h->saved_vfs[h->n_saves++] = strdup(rec->vf);
        if (h->save_error) {
                op->r = -ENOSPC;
                op->error = strdup(h->save_error);
        } else
                harness_owner_claim(h, rec->vf, gpu_profile_framebuffer_mib(rec->profile));
        return 0;
}

static inline int harness_clear(void *userdata, const ClaimRecord *rec, Claim *token, char **error)
{
        Harness *h = userdata;
        h->n_clears++;
        harness_owner_unclaim(h, rec->vf);
        h->ops_pending[h->n_pending++] = (OwnerOp){.token = token, .clear = true};
        (void)sd_event_source_set_enabled(h->owner_turn, SD_EVENT_ONESHOT);
        return 0;
}

static inline bool harness_is_claimed(void *userdata, const char *vf, uint64_t *ret_fb)
{
        Harness *h = userdata;
        for (size_t i = 0; i < h->n_claims; i++)
                if (streq(h->claims[i].vf, vf)) {
                        *ret_fb = h->claims[i].framebuffer_mib;
                        return true;
                }
        return false;
}

static inline void harness_vf_changed(void *userdata, const char *vf)
{
        Harness *h = userdata;
        h->vf_changes++;
}

/* The owner's turn on the loop: what save() and clear() started completes, in order. */
static inline int harness_owner_turn(sd_event_source *s, void *userdata)
{
        Harness *h = userdata;
        while (h->n_pending > 0) {
                OwnerOp op = h->ops_pending[0];
                memmove(&h->ops_pending[0], &h->ops_pending[1],
                        (h->n_pending - 1) * sizeof(OwnerOp));
                h->n_pending--;
                if (op.clear)
                        claimer_clear_done(h->cl, op.token, op.r, op.error);
                else
                        claimer_save_done(h->cl, op.token, op.r, op.error);
                free(op.error);
        }
        return 0;
}

/* ---- the loop ----------------------------------------------------------------------------- */

/* Runs the loop until pred holds or timeout passes: 0 or -ETIMEDOUT. */
static inline int harness_run_until(Harness *h, bool (*pred)(Harness *h, void *arg), void *arg,
                                    nsec_t timeout)
{
        TestWait w = test_wait_begin(h->event, timeout);
        while (!pred(h, arg)) {
                int r = test_wait_step(&w);
                if (r < 0)
                        return r;
        }
        return 0;
}

static inline bool harness_refreshed(Harness *h, void *arg)
{
        return nvml_client_is_initialised(h->nvml) && !nvml_client_refresh_is_running(h->nvml);
}

static inline void harness_on_claim(const ClaimResult *res, void *userdata)
{
        ClaimOutcome *o = userdata;
        *o = (ClaimOutcome){
            .done = true,
            .r = res->r,
            /* API-21 as the API maps a failure kind. */
            .code = res->r < 0 ? strdup(api_claim_failure_code(res->failure)) : NULL,
            .status = res->r < 0 ? api_claim_failure_status(res->failure) : 0,
            .error = res->error ? strdup(res->error) : NULL,
            .nvml_ms = res->nvml_ms,
            .selections = res->selections,
            .finished = harness_now(),
        };
        if (res->vf)
                snprintf(o->vf, sizeof o->vf, "%s", res->vf);
        if (res->gpu)
                snprintf(o->gpu, sizeof o->gpu, "%s", res->gpu);
}

static inline void claim_outcome_clear(ClaimOutcome *o)
{
        free(o->code);
        free(o->error);
        *o = (ClaimOutcome){};
}

typedef struct Waiting {
        ClaimOutcome *o;
        size_t n;
} Waiting;

static inline bool harness_all_done(Harness *h, void *arg)
{
        Waiting *w = arg;
        for (size_t i = 0; i < w->n; i++)
                if (!w->o[i].done)
                        return false;
        return true;
}

/* ---- set-up --------------------------------------------------------------------------------- */

static inline void harness_on_discovered(int r, const char *error, void *userdata)
{
        Harness *h = userdata;
        h->discovered = r < 0 ? r : 1;
}

static inline bool harness_discovered(Harness *h, void *arg)
{
        return h->discovered != 0;
}

/* A full discovery through the tracker, as a reconcile pass runs it. */
static inline int harness_discover(Harness *h)
{
        h->discovered = 0;
        int r = gpu_tracker_discover(h->tracker, harness_on_discovered, h, NULL);
        if (r >= 0)
                r = harness_run_until(h, harness_discovered, NULL, 30 * NSEC_PER_SEC);
        return r < 0 ? r : h->discovered < 0 ? h->discovered : 0;
}

/*
 * Opens the roots of the mounted simulator, starts the parts and fills the NVML cache (NVML-14)
 * so that discovery gets NVML's catalogs. 0, or -errno with *error naming the step.
 */
static inline int harness_start(Harness *h, const char *nvml_library, nsec_t nvml_timeout,
                                const char **error)
{
        int r;

        *error = "VGPU_SIM_MOUNT is not set: run this through run-with-sim.sh";
        if ((r = test_sim_open(&h->sim)) < 0)
                return r;
        *error = "event loop";
        if ((r = sd_event_new(&h->event)) < 0 ||
            (r = sd_event_add_defer(h->event, &h->owner_turn, harness_owner_turn, h)) < 0 ||
            (r = sd_event_source_set_enabled(h->owner_turn, SD_EVENT_OFF)) < 0)
                return r;
        _cleanup_free_ char *sys = test_sim_path(h->sim, "sys");
        h->dev = test_sim_path(h->sim, "dev");
        h->nvml_timeout = nvml_timeout;
        *error = "open roots";
        if (!sys || !h->dev)
                return -ENOMEM;
        if ((r = root_open(sys, &h->sys)) < 0 || (r = root_open("/proc", &h->proc)) < 0)
                return r;

        WorkerPoolConfig pc = WORKER_POOL_CONFIG_SYSFS;
        *error = "worker pool";
        if ((r = worker_pool_new(&pc, &h->pool)) < 0)
                return r;
        DeviceOpsConfig dc = {
            .roots = {.sysfs = h->sys, .proc = h->proc, .dev_root = h->dev},
            .pool = h->pool,
            .retry_interval = 100 * NSEC_PER_MSEC,
        };
        *error = "device ops";
        if ((r = device_ops_new(&dc, &h->ops)) < 0)
                return r;
        NvmlClientConfig nc = {.library = nvml_library, .timeout = nvml_timeout};
        *error = "NVML client";
        if ((r = nvml_client_new(&nc, &h->nvml)) < 0)
                return r;
        GpuNvml seam;
        nvml_client_fill_gpu_seam(h->nvml, &seam);
        GpuTrackerConfig tc = {.sysfs = h->sys, .pool = h->pool, .nvml = &seam};
        *error = "host tracker";
        if ((r = gpu_tracker_new(&tc, &h->tracker)) < 0)
                return r;
        *error = "write gate";
        if ((r = write_gate_new(h->tracker, &h->gate)) < 0)
                return r;
        ClaimerConfig cc = {
            .sysfs = h->sys,
            .tracker = h->tracker,
            .proc = h->proc,
            .dev_root = h->dev,
            .pool = h->pool,
            .ops = h->ops,
            .gate = h->gate,
            .nvml = h->nvml,
            .nvml_timeout = nvml_timeout,
            .owner = {.save = harness_save,
                      .clear = harness_clear,
                      .is_claimed = harness_is_claimed,
                      .vf_changed = harness_vf_changed,
                      .userdata = h},
        };
        *error = "claimer";
        if ((r = claimer_new(&cc, &h->cl)) < 0)
                return r;
        *error = "attach to the loop";
        if ((r = worker_pool_attach_event(h->pool, h->event)) < 0 ||
            (r = device_ops_attach_event(h->ops, h->event)) < 0 ||
            (r = nvml_client_attach_event(h->nvml, h->event)) < 0 ||
            (r = claimer_attach_event(h->cl, h->event)) < 0)
                return r;

        /* As the reconciler's start-up pass: discover, then fill the NVML cache for the PFs. */
        *error = "initial discovery";
        if ((r = harness_discover(h)) < 0)
                return r;
        const GpuHost *host = gpu_tracker_host(h->tracker);
        _cleanup_free_ char **pfs = calloc(host->n_gpus + 1, sizeof *pfs);
        if (!pfs)
                return -ENOMEM;
        for (size_t i = 0; i < host->n_gpus; i++)
                pfs[i] = (char *)host->gpus[i].address;
        if ((r = nvml_client_set_gpus(h->nvml, pfs, host->n_gpus)) < 0)
                return r;
        /* A short nvml_timeout may cut the first (cold) refresh: try a few times. */
        *error = "NVML cache refresh";
        for (unsigned attempt = 0;; attempt++) {
                if ((r = nvml_client_request_refresh(h->nvml, true)) < 0)
                        return r;
                if ((r = harness_run_until(h, harness_refreshed, NULL, 30 * NSEC_PER_SEC)) < 0)
                        return r;
                if (nvml_client_get_host_fallback(h->nvml, NULL) == NVML_FALLBACK_NONE)
                        break;
                if (attempt == 5)
                        return -ETIMEDOUT;
        }
        /* The first real pass: discovery with NVML's catalogs (DISC-18). */
        *error = "discovery with NVML";
        if ((r = harness_discover(h)) < 0)
                return r;
        *error = NULL;
        return 0;
}

static inline void harness_stop(Harness *h)
{
        if (h->pool) {
                (void)worker_pool_wait_idle(h->pool, 30 * NSEC_PER_SEC);
                h->pool = worker_pool_free(h->pool);
        }
        if (h->nvml)
                h->nvml = nvml_client_free(h->nvml);
        h->ops = device_ops_free(h->ops);
        h->cl = claimer_free(h->cl);
        h->gate = write_gate_free(h->gate);
        h->tracker = gpu_tracker_free(h->tracker);
        for (size_t i = 0; i < h->n_saves; i++)
                free(h->saved_vfs[i]);
        for (size_t i = 0; i < h->n_pending; i++)
                free(h->ops_pending[i].error);
        root_free(h->sys);
        root_free(h->proc);
        free(h->dev);
        sd_event_source_disable_unref(h->owner_turn);
        sd_event_unref(h->event);
        test_sim_free(h->sim);
        *h = (Harness){};
}

/*
 * Gives every VF back through the simulator's files (testlib), waiting out a release lag for at
 * most 5 s; -errno on the first refusal.
 */
static inline int harness_reset_all(Harness *h)
{
        return test_sim_release_all(h->sim, 5 * NSEC_PER_SEC);
}
