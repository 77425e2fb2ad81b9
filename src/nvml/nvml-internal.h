/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/* Shared by the files of the nvml module; not part of its interface. */

#include <stdatomic.h>

#include "nvml.h"

/* The NVML-4 functions, resolved once per load (NVML-1). */
typedef struct NvmlFunctions {
        nvmlReturn_t (*init_v2)(void);
        nvmlReturn_t (*shutdown)(void);
        const char *(*error_string)(nvmlReturn_t r);
        nvmlReturn_t (*system_get_driver_version)(char *version, unsigned int length);
        nvmlReturn_t (*device_get_handle_by_pci_bus_id_v2)(const char *pci, nvmlDevice_t *dev);
        nvmlReturn_t (*device_get_name)(nvmlDevice_t dev, char *name, unsigned int length);
        nvmlReturn_t (*device_get_vgpu_heterogeneous_mode)(nvmlDevice_t dev,
                                                           nvmlVgpuHeterogeneousMode_v1_t *mode);
        nvmlReturn_t (*device_get_supported_vgpus)(nvmlDevice_t dev, unsigned int *count,
                                                   nvmlVgpuTypeId_t *ids);
        nvmlReturn_t (*vgpu_type_get_name)(nvmlVgpuTypeId_t type, char *name, unsigned int *size);
        nvmlReturn_t (*vgpu_type_get_framebuffer_size)(nvmlVgpuTypeId_t type,
                                                       unsigned long long *bytes);
        nvmlReturn_t (*vgpu_type_get_max_instances)(nvmlDevice_t dev, nvmlVgpuTypeId_t type,
                                                    unsigned int *count);
        nvmlReturn_t (*device_get_vgpu_type_creatable_placements)(nvmlDevice_t dev,
                                                                  nvmlVgpuTypeId_t type,
                                                                  nvmlVgpuPlacementList_v2_t *list);
        /*
         * The same symbol as the one above, typed for the v1 list: which struct the library's
         * nvmlVgpuPlacementList_t is depends on its branch (NVML-3a), so each call goes through
         * the pointer typed for the list it passes.
         */
        nvmlReturn_t (*device_get_vgpu_type_creatable_placements_v1)(
            nvmlDevice_t dev, nvmlVgpuTypeId_t type, nvmlVgpuPlacementList_v1_t *list);
} NvmlFunctions;

typedef struct NvmlHandle {
        char pf[PCI_ADDRESS_STRLEN];
        nvmlDevice_t dev;
} NvmlHandle;

/*
 * The library side of the client: everything here is touched only by jobs on the NVML thread,
 * one at a time. It is reference-counted because a job stuck in the library may outlive the
 * client that started it.
 */
typedef struct NvmlSession {
        atomic_uint refs;
        char *path;
        const MonoClock *clock;
        void *dl;
        NvmlFunctions fn;
        bool initialised;
        uint64_t query_seq; /* placement queries started so far */
        /*
         * NVML-3a: the placement list version the library accepted (1 or 2), remembered for its
         * lifetime once a call with it succeeded; 0 until then, when v2 goes first.
         */
        unsigned placement_list_version;
        NvmlHandle *handles; /* NVML-6: per PF */
        size_t n_handles;
} NvmlSession;

int nvml_session_new(const char *path, const MonoClock *clock, NvmlSession **ret);
NvmlSession *nvml_session_ref(NvmlSession *s);
NvmlSession *nvml_session_unref(NvmlSession *s);

/*
 * NVML-1, NVML-2: loads the library when needed, resolves every NVML-4 function, calls
 * nvmlInit_v2 and reads the driver version. Fails with the cause in *error.
 */
int nvml_session_init(NvmlSession *s, char **ret_driver_version, char **error);

/* NVML-17. */
void nvml_session_shutdown(NvmlSession *s);

/* Runs one request on the NVML thread and fills *answer (zeroed by the caller). */
void nvml_session_run(NvmlSession *s, const NvmlRequest *req, NvmlAnswer *answer);

/* Deep copies and frees. */
int nvml_request_copy(const NvmlRequest *src, NvmlRequest *ret);
void nvml_request_done(NvmlRequest *r);
void nvml_answer_done(NvmlAnswer *a);
void nvml_type_infos_free(NvmlTypeInfo *t, size_t n);
