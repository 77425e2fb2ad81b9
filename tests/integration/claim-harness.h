/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * A small owner for the claim flow against a mounted vgpu-sim: the sysfs worker pool, DeviceOps,
 * the NVML client on the simulator's fake libnvidia-ml.so.1, a Claimer, and a fake owner whose
 * durable claims live in memory (saves and clears complete on the next loop turn, never inside
 * the call, and a save can be made to fail). Used by tests/integration/test-claim-sim.c and
 * bench/perf4-claims.c; the loop is a bounded poll over every descriptor the parts expose.
 */

#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <poll.h>

#include "claim/claim.h"

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
        char *mnt;
        Root *sys, *proc;
        char *dev;
        WorkerPool *pool;
        DeviceOps *ops;
        NvmlClient *nvml;
        Claimer *cl;
        nsec_t nvml_timeout;

        /* the fake owner */
        OwnerOp ops_pending[2 * HARNESS_MAX_CLAIMS];
        size_t n_pending;
        OwnerClaim claims[256];
        size_t n_claims;
        const char *save_error; /* non-NULL: every save fails with it */
        char *saved_vfs[2 * HARNESS_MAX_CLAIMS];
        size_t n_saves, n_clears;
        bool refresh_on_change; /* NVML-14: the owner asks for a refresh after each write */
        unsigned refreshes_asked;
};

static inline nsec_t harness_now(void)
{
        return mono_clock_now(&mono_clock_system);
}

static inline char *harness_path(const Harness *h, const char *rel)
{
        char *p = NULL;
        if (strprintf(&p, "%s/%s", h->mnt, rel) < 0)
                abort();
        return p;
}

static inline int harness_write(const char *path, const char *value)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t n = write(fd, value, strlen(value));
        if (n < 0)
                return negative_errno();
        return (size_t)n == strlen(value) ? 0 : -EIO;
}

static inline int harness_ctl(const Harness *h, const char *command)
{
        _cleanup_free_ char *p = harness_path(h, ".sim/ctl");
        return harness_write(p, command);
}

static inline json_t *harness_state(const Harness *h)
{
        _cleanup_free_ char *p = harness_path(h, ".sim/state.json"), *text = NULL;
        if (read_file_at(AT_FDCWD, p, 8 << 20, &text, NULL) < 0)
                return NULL;
        return json_loads(text, JSON_REJECT_DUPLICATES, NULL);
}

/* Writes a VF's current_vgpu_type through the simulator's own file, as a test set-up step. */
static inline int harness_set_type(const Harness *h, const char *vf, const char *type)
{
        _cleanup_free_ char *rel = NULL;
        if (strprintf(&rel, "sys/bus/pci/devices/%s/nvidia/current_vgpu_type", vf) < 0)
                return -ENOMEM;
        _cleanup_free_ char *p = harness_path(h, rel);
        return harness_write(p, type);
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
        if (!h->refresh_on_change)
                return;
        h->refreshes_asked++;
        (void)claimer_request_nvml_refresh(h->cl, false);
}

static inline void harness_owner_dispatch(Harness *h)
{
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
}

/* ---- the loop ----------------------------------------------------------------------------- */

static inline void harness_turn(Harness *h, int timeout_ms)
{
        worker_pool_dispatch_completions(h->pool);
        device_ops_dispatch(h->ops);
        nvml_client_dispatch(h->nvml);
        harness_owner_dispatch(h);
        claimer_dispatch(h->cl);
        if (h->n_pending > 0)
                return;
        struct pollfd pfd[] = {
            {.fd = worker_pool_get_fd(h->pool), .events = POLLIN},
            {.fd = device_ops_get_fd(h->ops), .events = POLLIN},
            {.fd = nvml_client_get_fd(h->nvml), .events = POLLIN},
            {.fd = claimer_get_fd(h->cl), .events = POLLIN},
        };
        (void)poll(pfd, ELEMENTSOF(pfd), timeout_ms);
}

/* Turns the loop until pred holds or timeout passes: 0 or -ETIMEDOUT. */
static inline int harness_run_until(Harness *h, bool (*pred)(Harness *h, void *arg), void *arg,
                                    nsec_t timeout)
{
        nsec_t deadline = harness_now() + timeout;
        for (;;) {
                if (pred(h, arg))
                        return 0;
                if (harness_now() > deadline)
                        return -ETIMEDOUT;
                harness_turn(h, 20);
        }
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
            .code = res->code ? strdup(res->code) : NULL,
            .status = res->http_status,
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

/*
 * Opens the roots of the mounted simulator, starts the parts and fills the NVML cache (NVML-14)
 * so that discovery gets NVML's catalogs. 0, or -errno with *error naming the step.
 */
static inline int harness_start(Harness *h, const char *nvml_library, nsec_t nvml_timeout,
                                const char **error)
{
        const char *mnt = getenv("VGPU_SIM_MOUNT");
        char real[PATH_MAX];
        int r;

        *error = "VGPU_SIM_MOUNT is not set: run this through run-with-sim.sh";
        if (!mnt || !*mnt || !realpath(mnt, real))
                return -EINVAL;
        h->mnt = strdup(real);
        _cleanup_free_ char *sys = harness_path(h, "sys");
        h->dev = harness_path(h, "dev");
        h->nvml_timeout = nvml_timeout;
        *error = "open roots";
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
        ClaimerConfig cc = {
            .sysfs = h->sys,
            .proc = h->proc,
            .dev_root = h->dev,
            .pool = h->pool,
            .ops = h->ops,
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

        /* The PFs, as the owner's start-up discovery would have found them. */
        _cleanup_(gpu_host_freep) GpuHost *host = NULL;
        *error = "initial discovery";
        if ((r = gpu_discover(h->sys, NULL, &host, NULL)) < 0)
                return r;
        _cleanup_free_ char **pfs = calloc(host->n_gpus + 1, sizeof *pfs);
        if (!pfs)
                return -ENOMEM;
        for (size_t i = 0; i < host->n_gpus; i++)
                pfs[i] = host->gpus[i].address;
        if ((r = nvml_client_set_gpus(h->nvml, pfs, host->n_gpus)) < 0 ||
            (r = claimer_set_gpus(h->cl, pfs, host->n_gpus)) < 0)
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
        for (size_t i = 0; i < h->n_saves; i++)
                free(h->saved_vfs[i]);
        for (size_t i = 0; i < h->n_pending; i++)
                free(h->ops_pending[i].error);
        root_free(h->sys);
        root_free(h->proc);
        free(h->dev);
        free(h->mnt);
        *h = (Harness){};
}

/* Writes 0 to every configured VF through the simulator's files; -errno on the first refusal. */
static inline int harness_reset_all(Harness *h)
{
        json_auto_t *st = harness_state(h);
        size_t i, k;
        json_t *gpu, *vf;
        if (!st)
                return -EIO;
        json_array_foreach (json_object_get(st, "gpus"), i, gpu) {
                json_array_foreach (json_object_get(gpu, "vfs"), k, vf) {
                        json_t *mdev = json_object_get(vf, "mdev");
                        if (json_is_object(mdev)) {
                                _cleanup_free_ char *rel = NULL, *p = NULL;
                                if (strprintf(&rel, "sys/bus/mdev/devices/%s/remove",
                                              json_string_value(json_object_get(mdev, "uuid"))) < 0)
                                        return -ENOMEM;
                                p = harness_path(h, rel);
                                int r = harness_write(p, "1");
                                if (r < 0)
                                        return r;
                                continue;
                        }
                        if (json_integer_value(json_object_get(vf, "type")) == 0)
                                continue;
                        int r = harness_set_type(
                            h, json_string_value(json_object_get(vf, "address")), "0");
                        if (r < 0)
                                return r;
                }
        }
        return 0;
}
