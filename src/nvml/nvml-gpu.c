/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Discovery's NVML seam, answered from the placement cache (never from the library). */
#include "gpu/gpu.h"
#include "nvml-internal.h"

static int seam_usable(void *userdata, const char *pf)
{
        NvmlClient *c = userdata;
        const NvmlTypeInfo *catalog;
        size_t n;

        if (nvml_client_get_host_fallback(c, NULL) != NVML_FALLBACK_NONE)
                return 0;
        if (nvml_client_get_gpu_fallback(c, pf, NULL) == NVML_FALLBACK_ERROR)
                return 0;
        return nvml_client_get_gpu_catalog(c, pf, &catalog, &n) >= 0 ? 1 : 0;
}

static int seam_device_name(void *userdata, const char *pf, char **ret)
{
        const char *name;
        int r = nvml_client_get_gpu_name(userdata, pf, &name);
        if (r < 0)
                return r;
        char *copy = strdup(name);
        if (!copy)
                return -ENOMEM;
        *ret = copy;
        return 0;
}

static int seam_supported_types(void *userdata, const char *pf, GpuNvmlType **ret, size_t *ret_n)
{
        const NvmlTypeInfo *catalog;
        size_t n;
        int r = nvml_client_get_gpu_catalog(userdata, pf, &catalog, &n);
        if (r < 0)
                return r;

        GpuNvmlType *types = calloc(n > 0 ? n : 1, sizeof *types);
        if (!types)
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                types[i].type_id = catalog[i].type_id;
                types[i].framebuffer_bytes = catalog[i].framebuffer_bytes;
                types[i].name = strdup(catalog[i].name);
                if (!types[i].name) {
                        gpu_nvml_types_free(types, i);
                        return -ENOMEM;
                }
        }
        *ret = types;
        *ret_n = n;
        return 0;
}

void nvml_client_fill_gpu_seam(NvmlClient *c, struct GpuNvml *ret)
{
        *ret = (GpuNvml){
            .userdata = c,
            .usable = seam_usable,
            .device_name = seam_device_name,
            .supported_types = seam_supported_types,
        };
}
