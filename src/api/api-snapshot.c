/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The one view of the host that /resources, /gpus and the resource gauges share (MET-4): the
 * last discovery, the health store's quarantines (pending ones included, HEALTH-20), the NVML
 * placement cache and the uncertain VFs of the worker pool, folded into a placement snapshot
 * and the figures of API-5.
 */
#include "api-internal.h"

typedef struct Storage {
        PlacementGpu *gpus;
        PlacementProfile *profiles;
        PlacementNvmlCount *counts;
        PlacementVf *vfs;
        const char **creatable;
} Storage;

static void storage_free(Storage *st)
{
        if (!st)
                return;
        free(st->gpus);
        free(st->profiles);
        free(st->counts);
        free(st->vfs);
        free(st->creatable);
        free(st);
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
        const char *reason = ctx->health ? health_store_unavailable_reason(ctx->health) : NULL;
        if (!reason)
                reason = ctx->discovery_error;
        if (!reason)
                reason = ctx->scan_error;
        if (reason) {
                char *copy = strdup(reason);
                if (!copy)
                        return -ENOMEM;
                *ret = copy;
                return 1;
        }
        if (ctx->workers) {
                /* GEN-4: with every extra thread stuck, no sysfs work can start. */
                _cleanup_free_ char *pool_error = NULL;
                int r = worker_pool_check_accepting(ctx->workers, &pool_error);
                if (r < 0) {
                        if (!pool_error &&
                            strprintf(&pool_error, "sysfs worker pool: %s", strerror(-r)) < 0)
                                return -ENOMEM;
                        *ret = TAKE_PTR(pool_error);
                        return 1;
                }
        }
        *ret = NULL;
        return 0;
}

static PlacementMode placement_mode(NvmlMode m)
{
        switch (m) {
        case NVML_MODE_EQUAL:
                return PLACEMENT_MODE_EQUAL;
        case NVML_MODE_MIXED:
                return PLACEMENT_MODE_MIXED;
        default:
                return PLACEMENT_MODE_UNKNOWN;
        }
}

/* The framebuffer of what occupies a VF: its leftover type or its mdev's profile. */
static uint64_t vf_occupant_mib(const Gpu *g, const GpuVf *vf)
{
        const GpuProfile *p = NULL;
        if (!g)
                return 0;
        if (vf->current_type_id != 0)
                p = gpu_find_profile_by_type_id(g, vf->current_type_id);
        else if (vf->current_profile)
                p = gpu_find_profile(g, vf->current_profile);
        return p ? p->framebuffer_mib : 0;
}

static int fill_gpus(const ApiContext *ctx, const GpuHost *h, Storage *st)
{
        size_t n_profiles = 0, n_counts = 0;
        for (size_t i = 0; i < h->n_gpus; i++)
                n_profiles += h->gpus[i].n_catalog;

        st->gpus = calloc(h->n_gpus ? h->n_gpus : 1, sizeof *st->gpus);
        st->profiles = calloc(n_profiles ? n_profiles : 1, sizeof *st->profiles);
        st->counts = calloc(n_profiles ? n_profiles : 1, sizeof *st->counts);
        if (!st->gpus || !st->profiles || !st->counts)
                return -ENOMEM;

        n_profiles = 0;
        for (size_t i = 0; i < h->n_gpus; i++) {
                const Gpu *g = &h->gpus[i];
                bool mdev = h->framework == GPU_FRAMEWORK_MDEV;
                PlacementGpu *pg = &st->gpus[i];

                *pg = (PlacementGpu){
                    .address = g->address,
                    .framework = mdev ? PLACEMENT_FRAMEWORK_MDEV : PLACEMENT_FRAMEWORK_VENDOR_VFIO,
                    .mode = mdev ? PLACEMENT_MODE_EQUAL
                                 : placement_mode(nvml_client_get_gpu_mode(ctx->nvml, g->address)),
                    .nvml_usable = nvml_client_get_gpu_fallback(ctx->nvml, g->address, NULL) ==
                                   NVML_FALLBACK_NONE,
                    .catalog_from_nvml = g->catalog_source == GPU_CATALOG_NVML,
                    .catalog = st->profiles + n_profiles,
                    .n_catalog = g->n_catalog,
                    .nvml_counts = st->counts + n_counts,
                };
                for (size_t k = 0; k < g->n_catalog; k++) {
                        const GpuProfile *p = &g->catalog[k];
                        st->profiles[n_profiles++] = (PlacementProfile){
                            .name = p->name,
                            .type_id = p->type_id,
                            .mdev_type = p->mdev_type,
                            .framebuffer_mib = p->framebuffer_mib,
                        };
                        NvmlPlacements np;
                        if (mdev || p->type_id == 0 ||
                            nvml_client_get_cached_placements(ctx->nvml, g->address, p->type_id,
                                                              &np) < 0)
                                continue;
                        st->counts[n_counts++] = (PlacementNvmlCount){
                            .type_id = p->type_id,
                            .count = np.count,
                        };
                        pg->n_nvml_counts++;
                }
        }
        return 0;
}

static int fill_vfs(const ApiContext *ctx, const GpuHost *h, Storage *st)
{
        size_t n_names = 0;
        for (size_t i = 0; i < h->n_vfs; i++)
                n_names += h->vfs[i].n_creatable;

        st->vfs = calloc(h->n_vfs ? h->n_vfs : 1, sizeof *st->vfs);
        st->creatable = calloc(n_names ? n_names : 1, sizeof *st->creatable);
        if (!st->vfs || !st->creatable)
                return -ENOMEM;

        n_names = 0;
        for (size_t i = 0; i < h->n_vfs; i++) {
                const GpuVf *vf = &h->vfs[i];
                const Gpu *g = *vf->parent ? gpu_host_find_gpu(h, vf->parent) : NULL;
                PlacementVf *pv = &st->vfs[i];

                *pv = (PlacementVf){
                    .address = vf->address,
                    .parent = g ? g->address : NULL,
                    .readable = gpu_vf_is_readable(vf),
                    .current_type = vf->current_type_id,
                    .has_mdev = vf->mdev_uuids != NULL,
                    .framebuffer_mib = vf_occupant_mib(g, vf),
                    /* Claims and reservations come with the instances release. */
                    .uncertain =
                        ctx->workers && worker_pool_key_is_uncertain(ctx->workers, vf->address),
                    .quarantined =
                        ctx->health && health_store_is_quarantined(ctx->health, vf->address),
                    .creatable = st->creatable + n_names,
                    .n_creatable = vf->n_creatable,
                };
                for (size_t k = 0; k < vf->n_creatable; k++)
                        st->creatable[n_names++] = vf->creatable[k].name;
                if (ctx->mdev_availability) {
                        pv->mdev_types = ctx->mdev_availability[i].types;
                        pv->n_mdev_types = ctx->mdev_availability[i].n_types;
                }
        }
        return 0;
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
        const PlacementSnapshot *ps = &s->placement;
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

                if (!pv->readable)
                        continue;
                s->total_slots++;
                if (pv->current_type != 0 || pv->has_mdev || pv->claimed || pv->reserved)
                        s->used_slots++;
                if (pv->quarantined)
                        s->quarantined_slots++;
                if (!disabled && placement_vf_is_allocatable(ps, pv))
                        s->allocatable_slots++;
        }
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
        Storage *st = calloc(1, sizeof *st);
        if (!st)
                return -ENOMEM;
        s->storage = st;

        int r = api_placement_disabled_reason(ctx, &s->placement_disabled_reason);
        if (r < 0)
                return r;
        if (ctx->health) {
                r = health_store_breaker_warning(ctx->health, &s->placement_warning);
                if (r < 0)
                        return r;
        }

        const GpuHost *h = ctx->host;
        /* DISC-7: a discovery error is never "no vGPU host". */
        s->has_gpu = (h && h->framework != GPU_FRAMEWORK_NONE) || ctx->discovery_error;
        if (!h) {
                *ret = TAKE_PTR(s);
                return 0;
        }

        r = fill_gpus(ctx, h, st);
        if (r >= 0)
                r = fill_vfs(ctx, h, st);
        if (r >= 0)
                r = collect_profiles(h, s);
        if (r < 0)
                return r;
        s->placement = (PlacementSnapshot){
            .gpus = st->gpus,
            .n_gpus = h->n_gpus,
            .vfs = st->vfs,
            .n_vfs = h->n_vfs,
        };
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
        storage_free(s->storage);
        free(s);
        return NULL;
}
