/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The one view of the host that /resources, /gpus and the resource gauges share (MET-4): the
 * host's placement snapshot (placement_view_build(), the claim flow's too) with the health
 * store's quarantines (pending ones included, HEALTH-20), the NVML placement cache, the
 * uncertain VFs of the worker pool and the claim flow's reservations and claims, and the figures
 * of API-5 computed from it.
 */
#include "api-internal.h"

const GpuHost *api_host(const ApiContext *ctx)
{
        return ctx->tracker ? gpu_tracker_host(ctx->tracker) : NULL;
}

const char *api_claim_failure_code(ClaimFailure f)
{
        return claim_failure_to_string(f != CLAIM_FAILURE_NONE ? f : CLAIM_FAILURE_INTERNAL);
}

int api_claim_failure_status(ClaimFailure f)
{
        switch (f) {
        case CLAIM_FAILURE_UNKNOWN_PROFILE:
                return 400;
        case CLAIM_FAILURE_INSUFFICIENT_RESOURCES:
                return 409;
        case CLAIM_FAILURE_PLACEMENT_DISABLED:
                return 503;
        default:
                return 500;
        }
}

const char *api_vf_state_to_string(ApiVfState s)
{
        static const char *const names[_API_VF_STATE_MAX] = {
            [API_VF_FREE] = "free",
            [API_VF_RESERVED] = "reserved",
            [API_VF_CLAIMED] = "claimed",
            [API_VF_DIRTY] = "dirty",
            [API_VF_QUARANTINED] = "quarantined",
            [API_VF_UNREADABLE] = "unreadable",
        };
        return s < _API_VF_STATE_MAX ? names[s] : "unknown";
}

int api_placement_disabled_reason(const ApiContext *ctx, char **ret)
{
        /* With an instance manager, its answer: the one admission refuses with (MET-4). */
        if (ctx->instances)
                return instance_manager_placement_disabled_reason(ctx->instances, ret);
        PlacementDisabledSources sources = {
            .store_unavailable = ctx->health ? health_store_unavailable_reason(ctx->health) : NULL,
            .discovery_error = ctx->tracker ? gpu_tracker_error(ctx->tracker) : NULL,
            .scan_error = ctx->reconciler ? reconciler_scan_error(ctx->reconciler) : NULL,
            .pool = ctx->workers,
        };
        return placement_disabled_reason(&sources, ret);
}

static bool is_quarantined(void *userdata, const char *vf)
{
        return health_store_is_quarantined(userdata, vf);
}

static int build_view(const ApiContext *ctx, const GpuHost *h, PlacementView **ret)
{
        PlacementOverlays o = {.nvml = ctx->nvml, .pool = ctx->workers};
        /* With a claim flow, exactly its overlays (its guard is the health store), so that a
         * read and a claim see one picture; without one, the store's quarantine directly. */
        if (ctx->claimer)
                claimer_fill_overlays(ctx->claimer, &o);
        else if (ctx->health) {
                o.is_quarantined = is_quarantined;
                o.quarantine_userdata = ctx->health;
        }
        return placement_view_build(h, &o, ret);
}

static int compare_figures(const void *a, const void *b)
{
        const ApiProfileFigure *x = a, *y = b;
        return strcmp(x->name, y->name);
}

/* Every profile some GPU's catalog names, once, sorted by name (API-5). */
static int collect_profiles(const GpuHost *h, ApiSnapshot *s)
{
        size_t n = 0;
        for (size_t i = 0; i < h->n_gpus; i++)
                n += h->gpus[i].n_catalog;
        if (n == 0)
                return 0;

        _cleanup_free_ ApiProfileFigure *all = calloc(n, sizeof *all);
        if (!all)
                return -ENOMEM;
        n = 0;
        for (size_t i = 0; i < h->n_gpus; i++)
                for (size_t k = 0; k < h->gpus[i].n_catalog; k++)
                        all[n++] = (ApiProfileFigure){
                            .name = h->gpus[i].catalog[k].name,
                            .framebuffer_mib = h->gpus[i].catalog[k].framebuffer_mib,
                        };
        qsort(all, n, sizeof *all, compare_figures);

        size_t out = 0;
        for (size_t i = 0; i < n; i++) {
                if (out > 0 && streq(all[out - 1].name, all[i].name)) {
                        /* A size known on one card is the size (DISC-14, DISC-15). */
                        if (all[out - 1].framebuffer_mib == 0)
                                all[out - 1].framebuffer_mib = all[i].framebuffer_mib;
                        continue;
                }
                all[out++] = all[i];
        }
        s->profiles = TAKE_PTR(all);
        s->n_profiles = out;
        return 0;
}

static ApiVfState vf_state(const PlacementVf *pv)
{
        if (!pv->readable)
                return API_VF_UNREADABLE;
        if (pv->quarantined)
                return API_VF_QUARANTINED;
        if (pv->claimed)
                return API_VF_CLAIMED;
        if (pv->reserved)
                return API_VF_RESERVED;
        if (placement_vf_is_dirty(pv))
                return API_VF_DIRTY;
        return API_VF_FREE;
}

static int compute_figures(ApiSnapshot *s)
{
        const PlacementSnapshot *ps = &s->view->snapshot;
        bool disabled = s->placement_disabled_reason != NULL;

        s->vf_states = calloc(ps->n_vfs ? ps->n_vfs : 1, sizeof *s->vf_states);
        s->vf_uncertain = calloc(ps->n_vfs ? ps->n_vfs : 1, sizeof *s->vf_uncertain);
        if (!s->vf_states || !s->vf_uncertain)
                return -ENOMEM;
        s->n_vfs = ps->n_vfs;

        for (size_t i = 0; i < ps->n_vfs; i++) {
                const PlacementVf *pv = &ps->vfs[i];
                ApiVfState st = vf_state(pv);

                s->vf_states[i] = st;
                s->vf_uncertain[i] = pv->uncertain;
                if (pv->uncertain)
                        s->vfs_uncertain++;
                else
                        s->vfs_by_state[st]++;
        }
        PlacementSlots slots;
        placement_count_slots(ps, disabled, &slots);
        s->total_slots = slots.total;
        s->used_slots = slots.used;
        s->quarantined_slots = slots.quarantined;
        s->allocatable_slots = slots.allocatable;
        if (disabled || s->n_profiles == 0)
                return 0; /* every available is 0 while placement is disabled (API-5) */

        _cleanup_free_ const char **names = calloc(s->n_profiles, sizeof *names);
        _cleanup_free_ uint64_t *counts = calloc(s->n_profiles, sizeof *counts);
        if (!names || !counts)
                return -ENOMEM;
        for (size_t i = 0; i < s->n_profiles; i++)
                names[i] = s->profiles[i].name;
        int r = placement_count_available_many(ps, names, s->n_profiles, counts);
        if (r < 0)
                return r;
        for (size_t i = 0; i < s->n_profiles; i++)
                s->profiles[i].available = counts[i];
        return 0;
}

int api_snapshot_build(const ApiContext *ctx, ApiSnapshot **ret)
{
        _cleanup_api_snapshot_ ApiSnapshot *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;

        int r = api_placement_disabled_reason(ctx, &s->placement_disabled_reason);
        if (r < 0)
                return r;
        if (ctx->health) {
                r = health_store_breaker_warning(ctx->health, &s->placement_warning);
                if (r < 0)
                        return r;
        }

        const GpuHost *h = api_host(ctx);
        /* DISC-7: a discovery error is never "no vGPU host". */
        s->has_gpu = (h && h->framework != GPU_FRAMEWORK_NONE) ||
                     (ctx->tracker && gpu_tracker_error(ctx->tracker));
        if (!h) {
                *ret = TAKE_PTR(s);
                return 0;
        }

        r = build_view(ctx, h, &s->view);
        if (r >= 0)
                r = collect_profiles(h, s);
        if (r >= 0)
                r = compute_figures(s);
        if (r < 0)
                return r;
        *ret = TAKE_PTR(s);
        return 0;
}

ApiSnapshot *api_snapshot_free(ApiSnapshot *s)
{
        if (!s)
                return NULL;
        free(s->profiles);
        free(s->placement_disabled_reason);
        free(s->placement_warning);
        free(s->vf_states);
        free(s->vf_uncertain);
        placement_view_free(s->view);
        free(s);
        return NULL;
}
