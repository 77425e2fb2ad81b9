/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * The slice of the NVML ABI that vgpud uses (NVML-3, NVML-4, NVML-5), declared from the
 * library's documented interface so that the fake library and its test clients need no NVIDIA
 * header. The static assertions pin the LP64 layouts and version words, since a caller built
 * against the real header passes structs of exactly these shapes.
 */

#include <assert.h>
#include <stddef.h>

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef unsigned int nvmlVgpuTypeId_t;

enum {
        NVML_SUCCESS = 0,
        NVML_ERROR_UNINITIALIZED = 1,
        NVML_ERROR_INVALID_ARGUMENT = 2,
        NVML_ERROR_NOT_SUPPORTED = 3,
        NVML_ERROR_NO_PERMISSION = 4,
        NVML_ERROR_NOT_FOUND = 6,
        NVML_ERROR_INSUFFICIENT_SIZE = 7,
        NVML_ERROR_DRIVER_NOT_LOADED = 9,
        NVML_ERROR_TIMEOUT = 10,
        NVML_ERROR_LIBRARY_NOT_FOUND = 12,
        NVML_ERROR_FUNCTION_NOT_FOUND = 13,
        NVML_ERROR_GPU_IS_LOST = 15,
        NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
        NVML_ERROR_IN_USE = 19,
        NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
        NVML_ERROR_GPU_NOT_FOUND = 28,
        NVML_ERROR_UNKNOWN = 999,
};

/* nvmlDeviceGetVgpuHeterogeneousMode(): mode 1 = mixed-size, 0 = equal-size. */
typedef struct nvmlVgpuHeterogeneousMode_v1_t {
        unsigned int version;
        unsigned int mode;
} nvmlVgpuHeterogeneousMode_v1_t;
typedef nvmlVgpuHeterogeneousMode_v1_t nvmlVgpuHeterogeneousMode_t;

#define NVML_STRUCT_VERSION(type, ver) ((unsigned int)(sizeof(type) | ((ver) << 24U)))
#define nvmlVgpuHeterogeneousMode_v1 NVML_STRUCT_VERSION(nvmlVgpuHeterogeneousMode_v1_t, 1)

/* nvmlDeviceGetVgpuTypeCreatablePlacements(): count is the capacity in, the fill out. */
typedef struct nvmlVgpuPlacementList_v2_t {
        unsigned int version;
        unsigned int placementSize;
        unsigned int count;
        unsigned int *placementIds;
        unsigned int mode;
} nvmlVgpuPlacementList_v2_t;
typedef nvmlVgpuPlacementList_v2_t nvmlVgpuPlacementList_t;

#define nvmlVgpuPlacementList_v2 NVML_STRUCT_VERSION(nvmlVgpuPlacementList_v2_t, 2)

/* The list of NVML 12.4-12.6 (drivers R550, R560), without `mode` (NVML-3a). */
typedef struct nvmlVgpuPlacementList_v1_t {
        unsigned int version;
        unsigned int placementSize;
        unsigned int count;
        unsigned int *placementIds;
} nvmlVgpuPlacementList_v1_t;

#define nvmlVgpuPlacementList_v1 NVML_STRUCT_VERSION(nvmlVgpuPlacementList_v1_t, 1)

/* The placement list's `mode` input, a different constant set from the mode query's output. */
#define NVML_VGPU_PGPU_HETEROGENEOUS_MODE 0
#define NVML_VGPU_PGPU_HOMOGENEOUS_MODE 1

#if defined(__LP64__)
static_assert(sizeof(nvmlVgpuHeterogeneousMode_v1_t) == 8, "NVML-3 layout");
static_assert(nvmlVgpuHeterogeneousMode_v1 == 0x01000008u, "NVML-3 version word");
static_assert(sizeof(nvmlVgpuPlacementList_v2_t) == 32, "NVML-3 layout");
static_assert(offsetof(nvmlVgpuPlacementList_v2_t, placementIds) == 16, "NVML-3 layout");
static_assert(offsetof(nvmlVgpuPlacementList_v2_t, mode) == 24, "NVML-3 layout");
static_assert(nvmlVgpuPlacementList_v2 == 0x02000020u, "NVML-3 version word");
static_assert(sizeof(nvmlVgpuPlacementList_v1_t) == 24, "NVML-3 layout");
static_assert(offsetof(nvmlVgpuPlacementList_v1_t, placementIds) == 16, "NVML-3 layout");
static_assert(nvmlVgpuPlacementList_v1 == 0x01000018u, "NVML-3 version word");
#endif

#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80

/* NVML-4. */
nvmlReturn_t nvmlInit_v2(void);
nvmlReturn_t nvmlShutdown(void);
const char *nvmlErrorString(nvmlReturn_t result);
nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length);
nvmlReturn_t nvmlDeviceGetVgpuHeterogeneousMode(nvmlDevice_t device,
                                                nvmlVgpuHeterogeneousMode_t *pHeterogeneousMode);
nvmlReturn_t nvmlDeviceGetSupportedVgpus(nvmlDevice_t device, unsigned int *vgpuCount,
                                         nvmlVgpuTypeId_t *vgpuTypeIds);
nvmlReturn_t nvmlVgpuTypeGetName(nvmlVgpuTypeId_t vgpuTypeId, char *vgpuTypeName,
                                 unsigned int *size);
nvmlReturn_t nvmlVgpuTypeGetFramebufferSize(nvmlVgpuTypeId_t vgpuTypeId,
                                            unsigned long long *fbSize);
nvmlReturn_t nvmlVgpuTypeGetMaxInstances(nvmlDevice_t device, nvmlVgpuTypeId_t vgpuTypeId,
                                         unsigned int *vgpuInstanceCount);
nvmlReturn_t nvmlDeviceGetVgpuTypeCreatablePlacements(nvmlDevice_t device,
                                                      nvmlVgpuTypeId_t vgpuTypeId,
                                                      nvmlVgpuPlacementList_t *pPlacementList);
