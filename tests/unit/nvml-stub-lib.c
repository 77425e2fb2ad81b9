/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * UNIT-TEST DOUBLE of libnvidia-ml.so.1, used only by tests/unit/test-nvml.c.
 *
 * Not the simulator's fake NVML (sim/, SIM-13), which answers from vgpu-sim's host model: this
 * is a small in-memory table the test fills and steers directly through the nvml_stub_*
 * functions, which it resolves with dlsym() on the same library handle the client loads. It
 * declares the NVML ABI itself, from the library's documented interface, so that the client's
 * own declarations (NVML-3) are checked against an independent copy. Built as
 * libnvml-stub.so, and as libnvml-stub-partial.so without the placements function.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct {
        unsigned int version;
        unsigned int mode;
} StubMode;

/* The v2 list; v1 is its first four fields, 24 bytes with the padding before the pointer. */
typedef struct {
        unsigned int version;
        unsigned int placementSize;
        unsigned int count;
        unsigned int *placementIds;
        unsigned int mode;
} StubPlacementList;

#define STUB_MODE_VERSION (8u | (1u << 24))
#define STUB_PLACEMENT_VERSION (32u | (2u << 24))
#define STUB_PLACEMENT_VERSION_V1 (24u | (1u << 24))

enum {
        OK = 0,
        INVALID_ARGUMENT = 2,
        NOT_SUPPORTED = 3,
        NOT_FOUND = 6,
        INSUFFICIENT_SIZE = 7,
        ARGUMENT_VERSION_MISMATCH = 25,
};

#define MAX_GPUS 4
#define MAX_TYPES 8
#define MAX_FAULTS 8
#define MAX_FUNCS 16

typedef struct StubType {
        unsigned id;
        char name[80];
        unsigned long long fb;
        unsigned max;
        unsigned free_count;
        unsigned size;
} StubType;

struct nvmlDevice_st {
        char pci[16];
        char name[100];
        unsigned mode;
        StubType types[MAX_TYPES];
        unsigned n_types;
};

typedef struct Fault {
        char function[64];
        int code;
        int count; /* < 0: forever */
} Fault;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static struct nvmlDevice_st gpus[MAX_GPUS];
static unsigned n_gpus;
static Fault faults[MAX_FAULTS];
static bool hang;
static unsigned hung;
static bool initialised;
static unsigned shutdowns;
/* Bit n set: the placement list vn is accepted (R570+: v1 and v2; R550/R560: v1 only). */
static unsigned placement_versions = (1u << 1) | (1u << 2);
static unsigned placement_calls[3]; /* by the version word's list version */
static struct {
        char name[64];
        unsigned calls;
} counts[MAX_FUNCS];
static pthread_t caller;
static bool have_caller, many_callers;

/*
 * Every entry point: counts the call, notes the thread, waits while hung, applies a fault, and
 * returns with the lock held until leave().
 */
static int enter(const char *function)
{
        int code = OK;

        pthread_mutex_lock(&lock);
        for (unsigned i = 0; i < MAX_FUNCS; i++) {
                if (counts[i].name[0] && strcmp(counts[i].name, function) != 0)
                        continue;
                snprintf(counts[i].name, sizeof counts[i].name, "%s", function);
                counts[i].calls++;
                break;
        }
        if (have_caller && !pthread_equal(caller, pthread_self()))
                many_callers = true;
        caller = pthread_self();
        have_caller = true;
        while (hang) {
                hung++;
                pthread_cond_broadcast(&cond);
                pthread_cond_wait(&cond, &lock);
                hung--;
        }
        for (unsigned i = 0; i < MAX_FAULTS; i++)
                if (faults[i].count != 0 && strcmp(faults[i].function, function) == 0) {
                        code = faults[i].code;
                        if (faults[i].count > 0)
                                faults[i].count--;
                        break;
                }
        return code; /* with the lock held: the call's body reads the model under it */
}

/* Ends a call: drops the lock enter() took. */
static int leave(int code)
{
        pthread_mutex_unlock(&lock);
        return code;
}

static struct nvmlDevice_st *device(nvmlDevice_t d)
{
        for (unsigned i = 0; i < n_gpus; i++)
                if (d == &gpus[i])
                        return d;
        return NULL;
}

static StubType *find_type(struct nvmlDevice_st *g, unsigned id)
{
        for (unsigned i = 0; g && i < g->n_types; i++)
                if (g->types[i].id == id)
                        return &g->types[i];
        return NULL;
}

static StubType *find_any_type(unsigned id)
{
        for (unsigned i = 0; i < n_gpus; i++) {
                StubType *t = find_type(&gpus[i], id);
                if (t)
                        return t;
        }
        return NULL;
}

/* ---- the steering interface ------------------------------------------------------------------ */

EXPORT void nvml_stub_reset(void);
EXPORT void nvml_stub_reset(void)
{
        pthread_mutex_lock(&lock);
        memset(gpus, 0, sizeof gpus);
        memset(faults, 0, sizeof faults);
        memset(counts, 0, sizeof counts);
        n_gpus = 0;
        hang = false;
        initialised = false;
        shutdowns = 0;
        placement_versions = (1u << 1) | (1u << 2);
        memset(placement_calls, 0, sizeof placement_calls);
        have_caller = many_callers = false;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
}

EXPORT void nvml_stub_add_gpu(const char *pci, const char *name, unsigned mode);
EXPORT void nvml_stub_add_gpu(const char *pci, const char *name, unsigned mode)
{
        pthread_mutex_lock(&lock);
        struct nvmlDevice_st *g = &gpus[n_gpus++];
        snprintf(g->pci, sizeof g->pci, "%s", pci);
        snprintf(g->name, sizeof g->name, "%s", name);
        g->mode = mode;
        pthread_mutex_unlock(&lock);
}

EXPORT void nvml_stub_add_type(const char *pci, unsigned id, const char *name,
                               unsigned long long fb, unsigned max, unsigned free_count,
                               unsigned size);
EXPORT void nvml_stub_add_type(const char *pci, unsigned id, const char *name,
                               unsigned long long fb, unsigned max, unsigned free_count,
                               unsigned size)
{
        pthread_mutex_lock(&lock);
        for (unsigned i = 0; i < n_gpus; i++)
                if (strcmp(gpus[i].pci, pci) == 0) {
                        StubType *t = &gpus[i].types[gpus[i].n_types++];
                        *t = (StubType){
                            .id = id, .fb = fb, .max = max, .free_count = free_count, .size = size};
                        snprintf(t->name, sizeof t->name, "%s", name);
                }
        pthread_mutex_unlock(&lock);
}

EXPORT void nvml_stub_set_mode(const char *pci, unsigned mode);
EXPORT void nvml_stub_set_mode(const char *pci, unsigned mode)
{
        pthread_mutex_lock(&lock);
        for (unsigned i = 0; i < n_gpus; i++)
                if (strcmp(gpus[i].pci, pci) == 0)
                        gpus[i].mode = mode;
        pthread_mutex_unlock(&lock);
}

EXPORT void nvml_stub_set_free(const char *pci, unsigned id, unsigned free_count);
EXPORT void nvml_stub_set_free(const char *pci, unsigned id, unsigned free_count)
{
        pthread_mutex_lock(&lock);
        for (unsigned i = 0; i < n_gpus; i++)
                if (strcmp(gpus[i].pci, pci) == 0) {
                        StubType *t = find_type(&gpus[i], id);
                        if (t)
                                t->free_count = free_count;
                }
        pthread_mutex_unlock(&lock);
}

/* The next count calls of function (count < 0: all) return code. */
EXPORT void nvml_stub_fail(const char *function, int code, int count);
EXPORT void nvml_stub_fail(const char *function, int code, int count)
{
        pthread_mutex_lock(&lock);
        for (unsigned i = 0; i < MAX_FAULTS; i++)
                if (faults[i].count == 0) {
                        snprintf(faults[i].function, sizeof faults[i].function, "%s", function);
                        faults[i].code = code;
                        faults[i].count = count;
                        break;
                }
        pthread_mutex_unlock(&lock);
}

/* While on, every call blocks on entry; turning it off lets them go on. */
EXPORT void nvml_stub_hang(bool on);
EXPORT void nvml_stub_hang(bool on)
{
        pthread_mutex_lock(&lock);
        hang = on;
        pthread_cond_broadcast(&cond);
        pthread_mutex_unlock(&lock);
}

/* Calls blocked by nvml_stub_hang(). */
EXPORT unsigned nvml_stub_hung_calls(void);
EXPORT unsigned nvml_stub_hung_calls(void)
{
        pthread_mutex_lock(&lock);
        unsigned n = hung;
        pthread_mutex_unlock(&lock);
        return n;
}

EXPORT unsigned nvml_stub_calls(const char *function);
EXPORT unsigned nvml_stub_calls(const char *function)
{
        unsigned n = 0;
        pthread_mutex_lock(&lock);
        for (unsigned i = 0; i < MAX_FUNCS; i++)
                if (strcmp(counts[i].name, function) == 0)
                        n = counts[i].calls;
        pthread_mutex_unlock(&lock);
        return n;
}

/* 1 when every call so far came from one thread, which is not `not`. */
EXPORT int nvml_stub_single_caller(pthread_t not );
EXPORT int nvml_stub_single_caller(pthread_t not )
{
        pthread_mutex_lock(&lock);
        int ok = !many_callers && (!have_caller || !pthread_equal(caller, not ));
        pthread_mutex_unlock(&lock);
        return ok;
}

/* Which placement list versions the library knows: a bit per version (bit 1: v1, bit 2: v2). */
EXPORT void nvml_stub_set_placement_versions(unsigned mask);
EXPORT void nvml_stub_set_placement_versions(unsigned mask)
{
        pthread_mutex_lock(&lock);
        placement_versions = mask;
        pthread_mutex_unlock(&lock);
}

/* Placement calls that reached the version check with list ver (1 or 2), accepted or not. */
EXPORT unsigned nvml_stub_placement_calls(unsigned ver);
EXPORT unsigned nvml_stub_placement_calls(unsigned ver)
{
        pthread_mutex_lock(&lock);
        unsigned n = ver < 3 ? placement_calls[ver] : 0;
        pthread_mutex_unlock(&lock);
        return n;
}

EXPORT unsigned nvml_stub_shutdowns(void);
EXPORT unsigned nvml_stub_shutdowns(void)
{
        pthread_mutex_lock(&lock);
        unsigned n = shutdowns;
        pthread_mutex_unlock(&lock);
        return n;
}

/* ---- NVML-4 ---------------------------------------------------------------------------------- */

EXPORT nvmlReturn_t nvmlInit_v2(void);
EXPORT nvmlReturn_t nvmlInit_v2(void)
{
        int code = enter("nvmlInit_v2");
        if (code == OK)
                initialised = true;
        return leave(code);
}

EXPORT nvmlReturn_t nvmlShutdown(void);
EXPORT nvmlReturn_t nvmlShutdown(void)
{
        int code = enter("nvmlShutdown");
        initialised = false;
        shutdowns++;
        return leave(code);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r);
EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
        (void)r;
        return "stub error";
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length);
EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
        int code = enter("nvmlSystemGetDriverVersion");
        if (code == OK)
                snprintf(version, length, "580.159.01");
        return leave(code);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pci, nvmlDevice_t *dev);
EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pci, nvmlDevice_t *dev)
{
        int code = enter("nvmlDeviceGetHandleByPciBusId_v2");
        if (code != OK)
                return leave(code);
        for (unsigned i = 0; i < n_gpus; i++)
                if (strcmp(gpus[i].pci, pci) == 0) {
                        *dev = &gpus[i];
                        return leave(OK);
                }
        return leave(NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length);
EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t dev, char *name, unsigned int length)
{
        int code = enter("nvmlDeviceGetName");
        if (code != OK)
                return leave(code);
        struct nvmlDevice_st *g = device(dev);
        if (!g)
                return leave(INVALID_ARGUMENT);
        if (strlen(g->name) >= length)
                return leave(INSUFFICIENT_SIZE);
        snprintf(name, length, "%s", g->name);
        return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetVgpuHeterogeneousMode(nvmlDevice_t dev, StubMode *mode);
EXPORT nvmlReturn_t nvmlDeviceGetVgpuHeterogeneousMode(nvmlDevice_t dev, StubMode *mode)
{
        int code = enter("nvmlDeviceGetVgpuHeterogeneousMode");
        if (code != OK)
                return leave(code);
        struct nvmlDevice_st *g = device(dev);
        if (!g)
                return leave(INVALID_ARGUMENT);
        if (mode->version != STUB_MODE_VERSION)
                return leave(ARGUMENT_VERSION_MISMATCH);
        mode->mode = g->mode;
        return leave(OK);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedVgpus(nvmlDevice_t dev, unsigned int *count,
                                                unsigned int *ids);
EXPORT nvmlReturn_t nvmlDeviceGetSupportedVgpus(nvmlDevice_t dev, unsigned int *count,
                                                unsigned int *ids)
{
        int code = enter("nvmlDeviceGetSupportedVgpus");
        if (code != OK)
                return leave(code);
        struct nvmlDevice_st *g = device(dev);
        if (!g)
                return leave(INVALID_ARGUMENT);
        if (*count < g->n_types) {
                *count = g->n_types;
                return leave(INSUFFICIENT_SIZE);
        }
        for (unsigned i = 0; i < g->n_types; i++)
                ids[i] = g->types[i].id;
        *count = g->n_types;
        return leave(OK);
}

EXPORT nvmlReturn_t nvmlVgpuTypeGetName(unsigned int type, char *name, unsigned int *size);
EXPORT nvmlReturn_t nvmlVgpuTypeGetName(unsigned int type, char *name, unsigned int *size)
{
        int code = enter("nvmlVgpuTypeGetName");
        if (code != OK)
                return leave(code);
        StubType *t = find_any_type(type);
        if (!t)
                return leave(INVALID_ARGUMENT);
        if (strlen(t->name) >= *size) {
                /* A name that does not fit is written unterminated, to test the caller. */
                memcpy(name, t->name, *size);
                return leave(OK);
        }
        snprintf(name, *size, "%s", t->name);
        *size = (unsigned)strlen(t->name) + 1;
        return leave(OK);
}

EXPORT nvmlReturn_t nvmlVgpuTypeGetFramebufferSize(unsigned int type, unsigned long long *fb);
EXPORT nvmlReturn_t nvmlVgpuTypeGetFramebufferSize(unsigned int type, unsigned long long *fb)
{
        int code = enter("nvmlVgpuTypeGetFramebufferSize");
        if (code != OK)
                return leave(code);
        StubType *t = find_any_type(type);
        if (!t)
                return leave(INVALID_ARGUMENT);
        *fb = t->fb;
        return leave(OK);
}

EXPORT nvmlReturn_t nvmlVgpuTypeGetMaxInstances(nvmlDevice_t dev, unsigned int type,
                                                unsigned int *count);
EXPORT nvmlReturn_t nvmlVgpuTypeGetMaxInstances(nvmlDevice_t dev, unsigned int type,
                                                unsigned int *count)
{
        int code = enter("nvmlVgpuTypeGetMaxInstances");
        if (code != OK)
                return leave(code);
        StubType *t = find_type(device(dev), type);
        if (!t)
                return leave(INVALID_ARGUMENT);
        *count = t->max;
        return leave(OK);
}

#ifndef NVML_STUB_OMIT_PLACEMENTS
EXPORT nvmlReturn_t nvmlDeviceGetVgpuTypeCreatablePlacements(nvmlDevice_t dev, unsigned int type,
                                                             StubPlacementList *list);
EXPORT nvmlReturn_t nvmlDeviceGetVgpuTypeCreatablePlacements(nvmlDevice_t dev, unsigned int type,
                                                             StubPlacementList *list)
{
        int code = enter("nvmlDeviceGetVgpuTypeCreatablePlacements");
        struct nvmlDevice_st *g = device(dev);
        StubType *t = find_type(g, type);
        if (code == INSUFFICIENT_SIZE && t) {
                /* An injected INSUFFICIENT_SIZE asks for one entry more than offered. */
                list->count = list->count + 1;
                return leave(code);
        }
        if (code != OK)
                return leave(code);
        /* The version word first: a v1 list ends before `mode`, which must not be read. */
        unsigned ver = list->version == STUB_PLACEMENT_VERSION      ? 2
                       : list->version == STUB_PLACEMENT_VERSION_V1 ? 1
                                                                    : 0;
        if (ver)
                placement_calls[ver]++;
        if (!ver || !(placement_versions & (1u << ver)))
                return leave(ARGUMENT_VERSION_MISMATCH);
        if (!t || (ver == 2 && list->mode != 0))
                return leave(INVALID_ARGUMENT);
        if (g->mode != 1)
                return leave(NOT_SUPPORTED);
        if (list->count < t->free_count) {
                list->count = t->free_count;
                return leave(INSUFFICIENT_SIZE);
        }
        for (unsigned i = 0; i < t->free_count; i++)
                list->placementIds[i] = i * t->size;
        list->count = t->free_count;
        list->placementSize = t->size;
        return leave(OK);
}
#endif
