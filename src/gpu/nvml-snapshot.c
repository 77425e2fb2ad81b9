/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A thread-safe copy of the NVML seam's answers (gpu.h), for discovery on a worker. */
#include "gpu.h"

typedef struct SnapshotGpu {
        char *pf;
        int usable;
        char *name; /* NULL: the device name could not be copied */
        GpuNvmlType *types;
        size_t n_types;
} SnapshotGpu;

struct GpuNvmlSnapshot {
        SnapshotGpu *gpus;
        size_t n_gpus;
};

GpuNvmlSnapshot *gpu_nvml_snapshot_free(GpuNvmlSnapshot *s)
{
        if (!s)
                return NULL;
        for (size_t i = 0; i < s->n_gpus; i++) {
                free(s->gpus[i].pf);
                free(s->gpus[i].name);
                gpu_nvml_types_free(s->gpus[i].types, s->gpus[i].n_types);
        }
        free(s->gpus);
        free(s);
        return NULL;
}

/*
 * An answer that cannot be copied is no error of the copy: it only moves that GPU towards the
 * sysfs branch (no name: the model comes from the catalog; no types: nothing comes from NVML),
 * and discovery runs on as it would without NVML.
 */
static void copy_gpu(const GpuNvml *live, SnapshotGpu *g)
{
        g->usable = live->usable ? live->usable(live->userdata, g->pf) : 0;
        if (g->usable <= 0)
                return;
        if (!live->device_name || live->device_name(live->userdata, g->pf, &g->name) < 0)
                g->name = NULL;
        if (!live->supported_types ||
            live->supported_types(live->userdata, g->pf, &g->types, &g->n_types) < 0) {
                g->usable = 0;
                free(g->name);
                g->name = NULL;
        }
}

int gpu_nvml_snapshot_new(const GpuNvml *live, char *const *pfs, size_t n_pfs,
                          GpuNvmlSnapshot **ret)
{
        _cleanup_gpu_nvml_snapshot_ GpuNvmlSnapshot *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        if (!live || n_pfs == 0) {
                *ret = TAKE_PTR(s);
                return 0;
        }
        s->gpus = calloc(n_pfs, sizeof *s->gpus);
        if (!s->gpus)
                return -ENOMEM;
        s->n_gpus = n_pfs;
        for (size_t i = 0; i < n_pfs; i++) {
                s->gpus[i].pf = strdup(pfs[i]);
                if (!s->gpus[i].pf)
                        return -ENOMEM;
                copy_gpu(live, &s->gpus[i]);
        }
        *ret = TAKE_PTR(s);
        return 0;
}

static const SnapshotGpu *snapshot_find(const GpuNvmlSnapshot *s, const char *pf)
{
        for (size_t i = 0; i < s->n_gpus; i++)
                if (streq(s->gpus[i].pf, pf))
                        return &s->gpus[i];
        return NULL;
}

static int snapshot_usable(void *userdata, const char *pf)
{
        const SnapshotGpu *g = snapshot_find(userdata, pf);
        return g ? g->usable : 0;
}

static int snapshot_device_name(void *userdata, const char *pf, char **ret)
{
        const SnapshotGpu *g = snapshot_find(userdata, pf);
        if (!g || !g->name)
                return -ENOENT;
        char *copy = strdup(g->name);
        if (!copy)
                return -ENOMEM;
        *ret = copy;
        return 0;
}

static int snapshot_supported_types(void *userdata, const char *pf, GpuNvmlType **ret,
                                    size_t *ret_n)
{
        const SnapshotGpu *g = snapshot_find(userdata, pf);
        if (!g || g->usable <= 0)
                return -ENOENT;
        GpuNvmlType *types = calloc(g->n_types ? g->n_types : 1, sizeof *types);
        if (!types)
                return -ENOMEM;
        for (size_t i = 0; i < g->n_types; i++) {
                types[i] = g->types[i];
                /* A nameless type is passed on for discovery to reject, as it would live. */
                types[i].name = g->types[i].name ? strdup(g->types[i].name) : NULL;
                if (g->types[i].name && !types[i].name) {
                        gpu_nvml_types_free(types, i);
                        return -ENOMEM;
                }
        }
        *ret = types;
        *ret_n = g->n_types;
        return 0;
}

void gpu_nvml_snapshot_seam(GpuNvmlSnapshot *s, GpuNvml *ret)
{
        *ret = (GpuNvml){
            .userdata = s,
            .usable = snapshot_usable,
            .device_name = snapshot_device_name,
            .supported_types = snapshot_supported_types,
        };
}
