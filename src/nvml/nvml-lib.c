/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "nvml-internal.h"

const char *nvml_return_name(nvmlReturn_t r, char buf[static NVML_RETURN_NAME_MAX])
{
        static const struct {
                nvmlReturn_t code;
                const char *name;
        } names[] = {
            {NVML_SUCCESS, "SUCCESS"},
            {NVML_ERROR_UNINITIALIZED, "UNINITIALIZED"},
            {NVML_ERROR_INVALID_ARGUMENT, "INVALID_ARGUMENT"},
            {NVML_ERROR_NOT_SUPPORTED, "NOT_SUPPORTED"},
            {NVML_ERROR_NO_PERMISSION, "NO_PERMISSION"},
            {NVML_ERROR_NOT_FOUND, "NOT_FOUND"},
            {NVML_ERROR_INSUFFICIENT_SIZE, "INSUFFICIENT_SIZE"},
            {NVML_ERROR_DRIVER_NOT_LOADED, "DRIVER_NOT_LOADED"},
            {NVML_ERROR_TIMEOUT, "TIMEOUT"},
            {NVML_ERROR_LIBRARY_NOT_FOUND, "LIBRARY_NOT_FOUND"},
            {NVML_ERROR_FUNCTION_NOT_FOUND, "FUNCTION_NOT_FOUND"},
            {NVML_ERROR_GPU_IS_LOST, "GPU_IS_LOST"},
            {NVML_ERROR_LIB_RM_VERSION_MISMATCH, "LIB_RM_VERSION_MISMATCH"},
            {NVML_ERROR_IN_USE, "IN_USE"},
            {NVML_ERROR_ARGUMENT_VERSION_MISMATCH, "ARGUMENT_VERSION_MISMATCH"},
            {NVML_ERROR_GPU_NOT_FOUND, "GPU_NOT_FOUND"},
            {NVML_ERROR_UNKNOWN, "UNKNOWN"},
        };

        for (size_t i = 0; i < ELEMENTSOF(names); i++)
                if (names[i].code == r)
                        return names[i].name;
        snprintf(buf, NVML_RETURN_NAME_MAX, "NVML error %d", r);
        return buf;
}

int nvml_return_to_errno(nvmlReturn_t r)
{
        switch (r) {
        case NVML_SUCCESS:
                return 0;
        case NVML_ERROR_NOT_SUPPORTED:
                return -EOPNOTSUPP;
        case NVML_ERROR_INSUFFICIENT_SIZE:
                return -ENOBUFS;
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                return -EPROTO;
        case NVML_ERROR_GPU_IS_LOST:
        case NVML_ERROR_GPU_NOT_FOUND:
        case NVML_ERROR_NOT_FOUND:
                return -ENODEV;
        case NVML_ERROR_NO_PERMISSION:
                return -EPERM;
        case NVML_ERROR_INVALID_ARGUMENT:
                return -EINVAL;
        default:
                return -EIO;
        }
}

const char *nvml_mode_to_string(NvmlMode m)
{
        switch (m) {
        case NVML_MODE_EQUAL:
                return "equal";
        case NVML_MODE_MIXED:
                return "mixed";
        default:
                return "unknown";
        }
}

const char *nvml_fallback_to_string(NvmlFallback f)
{
        static const char *const names[_NVML_FALLBACK_MAX] = {
            [NVML_FALLBACK_NONE] = "ok",         [NVML_FALLBACK_EQUAL_SIZE] = "equal_size",
            [NVML_FALLBACK_ERROR] = "error",     [NVML_FALLBACK_UNAVAILABLE] = "unavailable",
            [NVML_FALLBACK_TIMEOUT] = "timeout", [NVML_FALLBACK_STUCK] = "stuck",
        };
        return f >= 0 && f < _NVML_FALLBACK_MAX ? names[f] : "unknown";
}

const NvmlGpuAnswer *nvml_answer_find_gpu(const NvmlAnswer *a, const char *pf)
{
        for (size_t i = 0; a && i < a->n_gpus; i++)
                if (streq(a->gpus[i].pf, pf))
                        return &a->gpus[i];
        return NULL;
}

const NvmlPlacements *nvml_gpu_answer_find_placements(const NvmlGpuAnswer *g,
                                                      nvmlVgpuTypeId_t type_id)
{
        for (size_t i = 0; g && i < g->n_placements; i++)
                if (g->placements[i].type_id == type_id)
                        return &g->placements[i];
        return NULL;
}

void nvml_gpu_request_done(NvmlGpuRequest *r)
{
        if (!r)
                return;
        free(r->types);
        free(r->max_instances);
        r->types = NULL;
        r->max_instances = NULL;
        r->n_types = 0;
}

void nvml_request_done(NvmlRequest *r)
{
        for (size_t i = 0; i < r->n_gpus; i++)
                nvml_gpu_request_done(&r->gpus[i]);
        free(r->gpus);
        *r = (NvmlRequest){};
}

int nvml_request_copy(const NvmlRequest *src, NvmlRequest *ret)
{
        NvmlRequest copy = {.init = src->init};

        if (src->n_gpus > 0 && !src->gpus)
                return -EINVAL;
        for (size_t i = 0; i < src->n_gpus; i++) {
                const NvmlGpuRequest *g = &src->gpus[i];
                if (!pci_address_is_valid(g->pf) || (g->n_types > 0 && !g->types) ||
                    g->n_types > NVML_MAX_TYPES)
                        return -EINVAL;
        }
        if (src->n_gpus > 0) {
                copy.gpus = calloc(src->n_gpus, sizeof *copy.gpus);
                if (!copy.gpus)
                        return -ENOMEM;
        }
        copy.n_gpus = src->n_gpus;
        for (size_t i = 0; i < src->n_gpus; i++) {
                const NvmlGpuRequest *g = &src->gpus[i];
                NvmlGpuRequest *d = &copy.gpus[i];
                *d = *g;
                d->types = NULL;
                d->max_instances = NULL;
                d->n_types = 0;
                if (g->n_types == 0)
                        continue;
                d->types = calloc(g->n_types, sizeof *d->types);
                d->max_instances = calloc(g->n_types, sizeof *d->max_instances);
                if (!d->types || !d->max_instances) {
                        nvml_request_done(&copy);
                        return -ENOMEM;
                }
                d->n_types = g->n_types;
                memcpy(d->types, g->types, g->n_types * sizeof *d->types);
                if (g->max_instances)
                        memcpy(d->max_instances, g->max_instances,
                               g->n_types * sizeof *d->max_instances);
        }
        *ret = copy;
        return 0;
}

void nvml_type_infos_free(NvmlTypeInfo *t, size_t n)
{
        for (size_t i = 0; t && i < n; i++)
                free(t[i].name);
        free(t);
}

void nvml_answer_done(NvmlAnswer *a)
{
        for (size_t i = 0; i < a->n_gpus; i++) {
                NvmlGpuAnswer *g = &a->gpus[i];
                free(g->error);
                free(g->name);
                nvml_type_infos_free(g->catalog, g->n_catalog);
                free(g->placements);
        }
        free(a->gpus);
        free(a->host_error);
        *a = (NvmlAnswer){};
}
