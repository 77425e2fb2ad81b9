/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * What a claim waits for before it selects (claim-internal.h): a discovery through the host's
 * tracker (DISC-20) and, for mixed-size GPUs, fresh NVML answers from a shared round (PLACE-7,
 * PLACE-8), or the end of pending configures (PLACE-10).
 */
#include "claim-internal.h"

#include <inttypes.h>

/* ---- discovery (DISC-20, through the host's one tracker) ------------------------------------ */

bool claimer_gpu_uses_nvml(Claimer *cl, const char *pf)
{
        return cl->nvml && claimer_host(cl) &&
               claimer_host(cl)->framework == GPU_FRAMEWORK_VENDOR_VFIO &&
               nvml_client_get_gpu_fallback(cl->nvml, pf, NULL) == NVML_FALLBACK_NONE &&
               nvml_client_get_gpu_mode(cl->nvml, pf) == NVML_MODE_MIXED;
}

/*
 * DISC-20 for the GPUs concerned: a claim whose candidate GPUs all decide on NVML needs only
 * their VFs' states re-read; any sysfs-path GPU needs its lists, which a full discovery reads.
 */
static bool claim_needs_full_discovery(Claimer *cl, const Claim *c)
{
        const GpuHost *h = claimer_host(cl);
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
        claimer_process(cl);
}

void claimer_maybe_start_discovery(Claimer *cl)
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

/* ---- waiting (PLACE-7, PLACE-8, PLACE-9, PLACE-10) ------------------------------------------ */

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

void claim_pairs_free(Pair *pairs, size_t n)
{
        for (size_t i = 0; i < n; i++)
                free(pairs[i].types);
        free(pairs);
}

/* What a waiting claim still needs before it may select. */
Readiness claim_readiness(Claimer *cl, Claim *c, const PlacementSnapshot *sn, bool collect_only,
                          Pair **pairs, size_t *n_pairs)
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
                GpuRoundState *rs = claimer_round_gpu(cl, g->address, false);
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
bool claimer_maybe_start_round(Claimer *cl, Pair *pairs, size_t n_pairs)
{
        bool poll_again = false;

        if (cl->round_in_flight || n_pairs == 0 || !cl->nvml)
                return false;
        if (claimer_refresh_running(cl))
                return true;

        _cleanup_free_ NvmlGpuRequest *gpus = calloc(n_pairs, sizeof *gpus);
        if (!gpus)
                return false;
        size_t n = 0;
        for (size_t i = 0; i < n_pairs; i++) {
                if (claimer_gpu_is_writing(cl, pairs[i].pf) ||
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
                        GpuRoundState *g = claimer_round_gpu(cl, gpus[i].pf, true);
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
        claimer_process(cl);
}
