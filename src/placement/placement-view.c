/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The one host→placement snapshot (placement.h, PlacementView): the discovered host with the
 * NVML cache, the uncertain, quarantined, claimed and reserved overlays folded in. Claims,
 * /resources, /gpus and the resource gauges all read what this builds, so they cannot disagree
 * about a VF.
 */
#include "placement.h"

typedef struct Storage {
        PlacementGpu *gpus;
        PlacementProfile *profiles;
        PlacementNvmlCount **counts; /* per GPU */
        size_t n_gpus;
        PlacementVf *vfs;
        const char **creatable;
        PlacementMdevAvailability *mdev_types;
} Storage;

static void storage_free(Storage *st)
{
        if (!st)
                return;
        for (size_t i = 0; st->counts && i < st->n_gpus; i++)
                free(st->counts[i]);
        free(st->counts);
        free(st->gpus);
        free(st->profiles);
        free(st->vfs);
        free(st->creatable);
        free(st->mdev_types);
        free(st);
}

const char *placement_mode_to_string(PlacementMode m)
{
        switch (m) {
        case PLACEMENT_MODE_EQUAL:
                return "equal";
        case PLACEMENT_MODE_MIXED:
                return "mixed";
        default:
                return "unknown";
        }
}

PlacementMode placement_mode_from_nvml(NvmlMode m)
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

/* /resources' counts: the client's cached placements of every type in the GPU's catalog. */
static int cached_counts(NvmlClient *nvml, const Gpu *g, PlacementNvmlCount **ret, size_t *ret_n)
{
        _cleanup_free_ PlacementNvmlCount *counts = calloc(g->n_catalog + 1, sizeof *counts);
        if (!counts)
                return -ENOMEM;
        size_t n = 0;
        for (size_t k = 0; k < g->n_catalog; k++) {
                NvmlPlacements np;
                if (g->catalog[k].type_id == 0 ||
                    nvml_client_get_cached_placements(nvml, g->address, g->catalog[k].type_id,
                                                      &np) < 0)
                        continue;
                counts[n++] =
                    (PlacementNvmlCount){.type_id = g->catalog[k].type_id, .count = np.count};
        }
        *ret = TAKE_PTR(counts);
        *ret_n = n;
        return 0;
}

static int fill_gpu(const GpuHost *h, const PlacementOverlays *o, size_t i, Storage *st,
                    PlacementProfile *catalog)
{
        const Gpu *g = &h->gpus[i];
        bool mdev = h->framework == GPU_FRAMEWORK_MDEV;
        PlacementNvmlCount *counts = NULL;
        size_t n_counts = 0;

        for (size_t k = 0; k < g->n_catalog; k++)
                catalog[k] = (PlacementProfile){
                    .name = g->catalog[k].name,
                    .type_id = g->catalog[k].type_id,
                    .mdev_type = g->catalog[k].mdev_type,
                    .framebuffer_mib = g->catalog[k].framebuffer_mib,
                };
        if (!mdev && o->nvml_counts) {
                int r = o->nvml_counts(o->claims_userdata, g->address, &counts, &n_counts);
                if (r < 0)
                        return r;
        } else if (!mdev && o->nvml) {
                int r = cached_counts(o->nvml, g, &counts, &n_counts);
                if (r < 0)
                        return r;
        }
        st->counts[i] = counts;

        st->gpus[i] = (PlacementGpu){
            .address = g->address,
            .framework = mdev ? PLACEMENT_FRAMEWORK_MDEV : PLACEMENT_FRAMEWORK_VENDOR_VFIO,
            /* API-6: mdev GPUs are equal-size; PLACE-6 decides there, never NVML. */
            .mode = mdev ? PLACEMENT_MODE_EQUAL
                    : o->nvml
                        ? placement_mode_from_nvml(nvml_client_get_gpu_mode(o->nvml, g->address))
                        : PLACEMENT_MODE_UNKNOWN,
            .nvml_usable =
                !mdev && o->nvml &&
                nvml_client_get_gpu_fallback(o->nvml, g->address, NULL) == NVML_FALLBACK_NONE,
            .nvml_counts = counts,
            .n_nvml_counts = n_counts,
            .catalog_from_nvml = g->catalog_source == GPU_CATALOG_NVML,
            .catalog = catalog,
            .n_catalog = g->n_catalog,
        };
        return 0;
}

/* The framebuffer of what occupies a VF: its leftover type, else its mdev's profile. */
static uint64_t occupant_mib(const GpuHost *h, const GpuVf *vf)
{
        const Gpu *g = vf->parent[0] ? gpu_host_find_gpu(h, vf->parent) : NULL;
        const GpuProfile *p = NULL;
        if (g && vf->current_type_id != 0)
                p = gpu_find_profile_by_type_id(g, vf->current_type_id);
        else if (g && vf->current_profile)
                p = gpu_find_profile(g, vf->current_profile);
        if (p && p->framebuffer_mib)
                return p->framebuffer_mib;
        return vf->current_profile ? gpu_profile_framebuffer_mib(vf->current_profile) : 0;
}

static void fill_vf(const GpuHost *h, const PlacementOverlays *o, const GpuVf *vf, PlacementVf *pv,
                    const char **creatable, PlacementMdevAvailability *mdev)
{
        uint64_t claimed_mib = 0;
        PlacementReservation res = {};
        bool claimed =
            o->is_claimed && o->is_claimed(o->claims_userdata, vf->address, &claimed_mib);
        bool reserved = o->is_reserved && o->is_reserved(o->claims_userdata, vf->address, &res);
        bool is_mdev = h->framework == GPU_FRAMEWORK_MDEV;

        uint64_t mib = occupant_mib(h, vf);
        if (reserved)
                mib = res.framebuffer_mib;
        else if (claimed && claimed_mib)
                mib = claimed_mib;

        for (size_t k = 0; k < vf->n_creatable; k++) {
                creatable[k] = vf->creatable[k].name;
                if (is_mdev)
                        mdev[k] = (PlacementMdevAvailability){
                            .mdev_type = vf->creatable[k].mdev_type,
                            .available_instances = vf->creatable[k].available_instances,
                        };
        }
        *pv = (PlacementVf){
            .address = vf->address,
            .parent = vf->parent[0] ? vf->parent : NULL,
            .readable = gpu_vf_is_readable(vf),
            .current_type = vf->current_type_id,
            .has_mdev = vf->mdev_uuids != NULL,
            .framebuffer_mib = mib,
            /* A reservation whose write is done is not allocatable until it ends. */
            .claimed = claimed || (reserved && res.write_done),
            .reserved = reserved && !res.write_done,
            .reserved_type = reserved ? res.type_id : 0,
            .uncertain = o->pool && worker_pool_key_is_uncertain(o->pool, vf->address),
            .quarantined =
                o->is_quarantined && o->is_quarantined(o->quarantine_userdata, vf->address),
            .creatable = creatable,
            .n_creatable = vf->n_creatable,
            .mdev_types = is_mdev && gpu_vf_is_readable(vf) ? mdev : NULL,
            .n_mdev_types = is_mdev && gpu_vf_is_readable(vf) ? vf->n_creatable : 0,
        };
}

int placement_view_build(const GpuHost *h, const PlacementOverlays *overlays, PlacementView **ret)
{
        static const PlacementOverlays none = {};
        const PlacementOverlays *o = overlays ? overlays : &none;
        if (!h)
                return -EINVAL;

        size_t n_profiles = 0, n_names = 0;
        for (size_t i = 0; i < h->n_gpus; i++)
                n_profiles += h->gpus[i].n_catalog;
        for (size_t i = 0; i < h->n_vfs; i++)
                n_names += h->vfs[i].n_creatable;

        _cleanup_free_ PlacementView *v = calloc(1, sizeof *v);
        Storage *st = calloc(1, sizeof *st);
        if (!v || !st) {
                free(st);
                return -ENOMEM;
        }
        v->storage = st;
        st->n_gpus = h->n_gpus;
        st->gpus = calloc(h->n_gpus + 1, sizeof *st->gpus);
        st->counts = calloc(h->n_gpus + 1, sizeof *st->counts);
        st->profiles = calloc(n_profiles + 1, sizeof *st->profiles);
        st->vfs = calloc(h->n_vfs + 1, sizeof *st->vfs);
        st->creatable = calloc(n_names + 1, sizeof *st->creatable);
        st->mdev_types = calloc(n_names + 1, sizeof *st->mdev_types);
        if (!st->gpus || !st->counts || !st->profiles || !st->vfs || !st->creatable ||
            !st->mdev_types) {
                storage_free(st);
                return -ENOMEM;
        }

        n_profiles = 0;
        for (size_t i = 0; i < h->n_gpus; i++) {
                int r = fill_gpu(h, o, i, st, st->profiles + n_profiles);
                if (r < 0) {
                        storage_free(st);
                        return r;
                }
                n_profiles += h->gpus[i].n_catalog;
        }
        n_names = 0;
        for (size_t i = 0; i < h->n_vfs; i++) {
                fill_vf(h, o, &h->vfs[i], &st->vfs[i], st->creatable + n_names,
                        st->mdev_types + n_names);
                n_names += h->vfs[i].n_creatable;
        }
        v->snapshot = (PlacementSnapshot){
            .gpus = st->gpus,
            .n_gpus = h->n_gpus,
            .vfs = st->vfs,
            .n_vfs = h->n_vfs,
        };
        *ret = TAKE_PTR(v);
        return 0;
}

PlacementView *placement_view_free(PlacementView *v)
{
        if (!v)
                return NULL;
        storage_free(v->storage);
        free(v);
        return NULL;
}
