/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The model's input from the daemon's state: the placement snapshot that /resources and the
 * claim flow read (ARCHITECTURE.md decision 3), so that Placement is told exactly what a local
 * claim would see, with the health store's drains and NVML's maximum instances per type.
 */
#include "fleet/fleet.h"

typedef struct Storage {
        FleetGpuInput *gpus;
        size_t n_gpus;
        FleetProfileInput **profiles; /* per GPU */
        FleetVfInput **vfs;           /* per GPU */
} Storage;

static void storage_free(Storage *st)
{
        if (!st)
                return;
        for (size_t i = 0; i < st->n_gpus; i++) {
                free(st->profiles ? st->profiles[i] : NULL);
                free(st->vfs ? st->vfs[i] : NULL);
        }
        free(st->profiles);
        free(st->vfs);
        free(st->gpus);
        free(st);
}

FleetHostSnapshot *fleet_host_snapshot_free(FleetHostSnapshot *s)
{
        if (!s)
                return NULL;
        storage_free(s->storage);
        free(s);
        return NULL;
}

static uint32_t nvml_max_instances(NvmlClient *nvml, const char *pf, uint32_t type_id)
{
        const NvmlTypeInfo *types;
        size_t n;
        if (!nvml || type_id == 0 || nvml_client_get_gpu_catalog(nvml, pf, &types, &n) < 0)
                return 0;
        for (size_t i = 0; i < n; i++)
                if (types[i].type_id == type_id)
                        return types[i].max_instances;
        return 0;
}

static bool is_drained(const HealthStore *health, const char *pf)
{
        return health && health_state_find_drain(health_store_state(health), pf);
}

static int fill_gpu(const FleetHostSources *src, const PlacementGpu *pg, Storage *st, size_t gi)
{
        const PlacementSnapshot *ps = src->snapshot;
        FleetGpuInput *g = &st->gpus[gi];
        *g = (FleetGpuInput){
            .address = pg->address,
            .mixed = pg->mode == PLACEMENT_MODE_MIXED,
            .drained = is_drained(src->health, pg->address),
        };

        /* This GPU's VFs, and a snapshot of the GPU alone for its PLACE-21 figures. */
        size_t n_vfs = 0;
        for (size_t i = 0; i < ps->n_vfs; i++)
                if (streq_ptr(ps->vfs[i].parent, pg->address))
                        n_vfs++;
        _cleanup_free_ PlacementVf *own = calloc(n_vfs ? n_vfs : 1, sizeof *own);
        FleetVfInput *vfs = calloc(n_vfs ? n_vfs : 1, sizeof *vfs);
        if (!own || !vfs) {
                free(vfs);
                return -ENOMEM;
        }
        st->vfs[gi] = vfs;
        size_t k = 0;
        for (size_t i = 0; i < ps->n_vfs; i++) {
                const PlacementVf *pv = &ps->vfs[i];
                if (!streq_ptr(pv->parent, pg->address))
                        continue;
                own[k] = *pv;
                bool held = pv->claimed || pv->reserved;
                vfs[k++] = (FleetVfInput){
                    .readable = pv->readable,
                    .allocatable = placement_vf_is_allocatable(ps, pv),
                    .occupied = held || pv->current_type != 0 || pv->has_mdev,
                    .consumer =
                        held && src->has_consumer && src->has_consumer(src->userdata, pv->address),
                    .framebuffer_mib = pv->framebuffer_mib,
                };
        }
        g->vfs = vfs;
        g->n_vfs = n_vfs;

        FleetProfileInput *profiles = calloc(pg->n_catalog ? pg->n_catalog : 1, sizeof *profiles);
        _cleanup_free_ const char **names =
            calloc(pg->n_catalog ? pg->n_catalog : 1, sizeof *names);
        _cleanup_free_ uint64_t *counts = calloc(pg->n_catalog ? pg->n_catalog : 1, sizeof *counts);
        if (!profiles || !names || !counts) {
                free(profiles);
                return -ENOMEM;
        }
        st->profiles[gi] = profiles;
        for (size_t i = 0; i < pg->n_catalog; i++)
                names[i] = pg->catalog[i].name;
        if (!src->placement_disabled && pg->n_catalog > 0) {
                PlacementSnapshot one = {.gpus = pg, .n_gpus = 1, .vfs = own, .n_vfs = n_vfs};
                int r = placement_count_available_many(&one, names, pg->n_catalog, counts);
                if (r < 0)
                        return r;
        }
        for (size_t i = 0; i < pg->n_catalog; i++)
                profiles[i] = (FleetProfileInput){
                    .name = pg->catalog[i].name,
                    .framebuffer_mib = pg->catalog[i].framebuffer_mib,
                    .max_instances =
                        nvml_max_instances(src->nvml, pg->address, pg->catalog[i].type_id),
                    .available = counts[i],
                };
        g->profiles = profiles;
        g->n_profiles = pg->n_catalog;
        return 0;
}

int fleet_host_snapshot_build(const FleetHostSources *src, FleetHostSnapshot **ret)
{
        _cleanup_fleet_host_snapshot_ FleetHostSnapshot *s = calloc(1, sizeof *s);
        Storage *st = calloc(1, sizeof *st);
        if (!s || !st) {
                free(st);
                return -ENOMEM;
        }
        s->storage = st;
        s->input = (FleetHostInput){
            .host_name = src->host_name,
            .placement_disabled = src->placement_disabled,
            .stopping = src->stopping,
        };
        const PlacementSnapshot *ps = src->host ? src->snapshot : NULL;
        size_t n = ps ? ps->n_gpus : 0;
        st->gpus = calloc(n ? n : 1, sizeof *st->gpus);
        st->profiles = calloc(n ? n : 1, sizeof *st->profiles);
        st->vfs = calloc(n ? n : 1, sizeof *st->vfs);
        if (!st->gpus || !st->profiles || !st->vfs)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                st->n_gpus = i + 1;
                int r = fill_gpu(src, &ps->gpus[i], st, i);
                if (r < 0)
                        return r;
        }
        s->input.gpus = st->gpus;
        s->input.n_gpus = n;
        *ret = TAKE_PTR(s);
        return 0;
}
