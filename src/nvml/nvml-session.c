/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The NVML thread's side: loading the library, the PF handle cache and the queries. Nothing here
 * runs on the loop; every function is called from a job on the NVML slot.
 */
#include <dlfcn.h>

#include "nvml-internal.h"

int nvml_session_new(const char *path, const MonoClock *clock, NvmlSession **ret)
{
        _cleanup_free_ NvmlSession *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        s->path = strdup(path);
        if (!s->path)
                return -ENOMEM;
        s->clock = clock;
        atomic_init(&s->refs, 1);
        *ret = TAKE_PTR(s);
        return 0;
}

NvmlSession *nvml_session_ref(NvmlSession *s)
{
        atomic_fetch_add(&s->refs, 1);
        return s;
}

NvmlSession *nvml_session_unref(NvmlSession *s)
{
        if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
                return NULL;
        /* Only the thread that is not inside the library any more gets here. */
        if (s->dl)
                dlclose(s->dl);
        free(s->handles);
        free(s->path);
        free(s);
        return NULL;
}

static const char *rname(nvmlReturn_t r, char buf[static NVML_RETURN_NAME_MAX])
{
        return nvml_return_name(r, buf);
}

static int resolve(NvmlSession *s, char **error)
{
        static const struct {
                const char *name;
                size_t offset;
        } table[] = {
            {"nvmlInit_v2", offsetof(NvmlFunctions, init_v2)},
            {"nvmlShutdown", offsetof(NvmlFunctions, shutdown)},
            {"nvmlErrorString", offsetof(NvmlFunctions, error_string)},
            {"nvmlSystemGetDriverVersion", offsetof(NvmlFunctions, system_get_driver_version)},
            {"nvmlDeviceGetHandleByPciBusId_v2",
             offsetof(NvmlFunctions, device_get_handle_by_pci_bus_id_v2)},
            {"nvmlDeviceGetName", offsetof(NvmlFunctions, device_get_name)},
            {"nvmlDeviceGetVgpuHeterogeneousMode",
             offsetof(NvmlFunctions, device_get_vgpu_heterogeneous_mode)},
            {"nvmlDeviceGetSupportedVgpus", offsetof(NvmlFunctions, device_get_supported_vgpus)},
            {"nvmlVgpuTypeGetName", offsetof(NvmlFunctions, vgpu_type_get_name)},
            {"nvmlVgpuTypeGetFramebufferSize",
             offsetof(NvmlFunctions, vgpu_type_get_framebuffer_size)},
            {"nvmlVgpuTypeGetMaxInstances", offsetof(NvmlFunctions, vgpu_type_get_max_instances)},
            {"nvmlDeviceGetVgpuTypeCreatablePlacements",
             offsetof(NvmlFunctions, device_get_vgpu_type_creatable_placements)},
            {"nvmlDeviceGetVgpuTypeCreatablePlacements",
             offsetof(NvmlFunctions, device_get_vgpu_type_creatable_placements_v1)},
        };
        NvmlFunctions fn = {};

        for (size_t i = 0; i < ELEMENTSOF(table); i++) {
                dlerror();
                void *sym = dlsym(s->dl, table[i].name);
                if (!sym)
                        return error_set(error, -ENOSYS, "NVML library %s lacks %s", s->path,
                                         table[i].name);
                /* POSIX guarantees that a data pointer from dlsym() converts to a function. */
                memcpy((char *)&fn + table[i].offset, &sym, sizeof sym);
        }
        s->fn = fn;
        return 0;
}

static bool is_printable(const char *s)
{
        for (; *s; s++)
                if (*s < 0x20 || *s > 0x7e)
                        return false;
        return true;
}

/* A string NVML wrote into a buffer of size bytes: NUL-terminated inside it, printable. */
static bool valid_string(const char *buf, size_t size, bool allow_empty)
{
        size_t n = strnlen(buf, size);
        return n < size && (allow_empty || n > 0) && is_printable(buf);
}

int nvml_session_init(NvmlSession *s, char **ret_driver_version, char **error)
{
        char nb[NVML_RETURN_NAME_MAX];

        if (!s->dl) {
                dlerror();
                void *dl = dlopen(s->path, RTLD_NOW | RTLD_LOCAL);
                if (!dl) {
                        const char *e = dlerror();
                        return error_set(error, -ENOENT, "load NVML library %s: %s", s->path,
                                         e ? e : "unknown error");
                }
                s->dl = dl;
                int r = resolve(s, error);
                if (r < 0) {
                        dlclose(s->dl);
                        s->dl = NULL;
                        return r;
                }
        }

        nvmlReturn_t nr = s->fn.init_v2();
        if (nr != NVML_SUCCESS)
                return error_set(error, nvml_return_to_errno(nr) ?: -EIO, "nvmlInit_v2: %s",
                                 rname(nr, nb));
        s->initialised = true;

        char version[NVML_DRIVER_VERSION_SIZE] = "";
        nr = s->fn.system_get_driver_version(version, sizeof version);
        _cleanup_free_ char *v = NULL;
        if (nr != NVML_SUCCESS || !valid_string(version, sizeof version, false))
                v = strdup("unknown"); /* the session works; only the log line loses a detail */
        else
                v = strdup(version);
        if (!v)
                return error_set_oom(error);
        *ret_driver_version = TAKE_PTR(v);
        return 0;
}

void nvml_session_shutdown(NvmlSession *s)
{
        if (!s->initialised)
                return;
        (void)s->fn.shutdown();
        s->initialised = false;
        s->n_handles = 0;
}

/* ---- handles (NVML-6) ------------------------------------------------------------------------ */

static void drop_handle(NvmlSession *s, const char *pf)
{
        for (size_t i = 0; i < s->n_handles; i++)
                if (streq(s->handles[i].pf, pf)) {
                        s->handles[i] = s->handles[--s->n_handles];
                        return;
                }
}

/* These say the handle no longer names a device: look it up again next time. */
static bool return_drops_handle(nvmlReturn_t r)
{
        return r == NVML_ERROR_GPU_IS_LOST || r == NVML_ERROR_GPU_NOT_FOUND ||
               r == NVML_ERROR_NOT_FOUND;
}

/*
 * One NVML call's failure: the errno, the message, and what it means beyond this GPU. Version
 * mismatches mean this library cannot serve us at all (NVML-11).
 */
typedef struct CallFailure {
        int r;
        char *error;
        bool host; /* falls back the whole host as `unavailable` */
} CallFailure;

static int fail_call(NvmlSession *s, const char *pf, nvmlReturn_t nr, CallFailure *f,
                     const char *fmt, ...) _printf_(5, 6);
static int fail_call(NvmlSession *s, const char *pf, nvmlReturn_t nr, CallFailure *f,
                     const char *fmt, ...)
{
        char nb[NVML_RETURN_NAME_MAX];
        _cleanup_free_ char *what = NULL;
        va_list ap;

        if (pf && return_drops_handle(nr))
                drop_handle(s, pf);
        va_start(ap, fmt);
        if (vasprintf(&what, fmt, ap) < 0)
                what = NULL;
        va_end(ap);
        f->r = nvml_return_to_errno(nr) ?: -EIO;
        f->host = nr == NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        free(f->error);
        f->error = NULL;
        (void)strprintf(&f->error, "%s: %s", what ? what : "NVML call", rname(nr, nb));
        return f->r;
}

static int fail_invalid(CallFailure *f, const char *fmt, ...) _printf_(2, 3);
static int fail_invalid(CallFailure *f, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        f->r = error_setv(&f->error, -EBADMSG, fmt, ap);
        va_end(ap);
        f->host = false;
        return f->r;
}

static int get_handle(NvmlSession *s, const char *pf, nvmlDevice_t *ret, CallFailure *f)
{
        for (size_t i = 0; i < s->n_handles; i++)
                if (streq(s->handles[i].pf, pf)) {
                        *ret = s->handles[i].dev;
                        return 0;
                }

        nvmlDevice_t dev = NULL;
        nvmlReturn_t nr = s->fn.device_get_handle_by_pci_bus_id_v2(pf, &dev);
        if (nr != NVML_SUCCESS)
                return fail_call(s, NULL, nr, f, "nvmlDeviceGetHandleByPciBusId_v2(%s)", pf);
        if (!dev)
                return fail_invalid(f, "nvmlDeviceGetHandleByPciBusId_v2(%s): no handle", pf);

        NvmlHandle *grown = realloc(s->handles, (s->n_handles + 1) * sizeof *grown);
        if (grown) {
                /* Without room the handle is simply not cached. */
                s->handles = grown;
                snprintf(grown[s->n_handles].pf, sizeof grown[s->n_handles].pf, "%s", pf);
                grown[s->n_handles++].dev = dev;
        }
        *ret = dev;
        return 0;
}

/* ---- queries --------------------------------------------------------------------------------- */

static int query_mode(NvmlSession *s, const char *pf, nvmlDevice_t dev, NvmlMode *ret,
                      CallFailure *f)
{
        nvmlVgpuHeterogeneousMode_v1_t m = {.version = NVML_VGPU_HETEROGENEOUS_MODE_V1};
        nvmlReturn_t nr = s->fn.device_get_vgpu_heterogeneous_mode(dev, &m);
        if (nr == NVML_ERROR_NOT_SUPPORTED) {
                *ret = NVML_MODE_EQUAL; /* NVML-7 */
                return 0;
        }
        if (nr != NVML_SUCCESS)
                return fail_call(s, pf, nr, f, "nvmlDeviceGetVgpuHeterogeneousMode(%s)", pf);
        if (m.mode > 1)
                return fail_invalid(f, "nvmlDeviceGetVgpuHeterogeneousMode(%s): mode %u", pf,
                                    m.mode);
        *ret = m.mode == 1 ? NVML_MODE_MIXED : NVML_MODE_EQUAL;
        return 0;
}

static int query_type_info(NvmlSession *s, const char *pf, nvmlDevice_t dev, nvmlVgpuTypeId_t id,
                           NvmlTypeInfo *ret, CallFailure *f)
{
        char name[NVML_TYPE_NAME_SIZE] = "";
        unsigned size = sizeof name;
        nvmlReturn_t nr = s->fn.vgpu_type_get_name(id, name, &size);
        if (nr != NVML_SUCCESS)
                return fail_call(s, NULL, nr, f, "nvmlVgpuTypeGetName(%s, type %u)", pf, id);
        if (!valid_string(name, sizeof name, false))
                return fail_invalid(f, "nvmlVgpuTypeGetName(%s, type %u): invalid name", pf, id);

        unsigned long long fb = 0;
        nr = s->fn.vgpu_type_get_framebuffer_size(id, &fb);
        if (nr != NVML_SUCCESS)
                return fail_call(s, NULL, nr, f, "nvmlVgpuTypeGetFramebufferSize(%s, type %u)", pf,
                                 id);

        unsigned max = 0;
        nr = s->fn.vgpu_type_get_max_instances(dev, id, &max);
        if (nr != NVML_SUCCESS)
                return fail_call(s, pf, nr, f, "nvmlVgpuTypeGetMaxInstances(%s, type %u)", pf, id);

        char *n = strdup(name);
        if (!n)
                return -ENOMEM;
        *ret = (NvmlTypeInfo){
            .type_id = id,
            .name = n,
            .framebuffer_bytes = fb,
            .max_instances = max,
        };
        return 0;
}

static int query_catalog(NvmlSession *s, const char *pf, nvmlDevice_t dev, NvmlGpuAnswer *a,
                         CallFailure *f)
{
        char name[NVML_DEVICE_NAME_SIZE] = "";
        nvmlReturn_t nr = s->fn.device_get_name(dev, name, sizeof name);
        if (nr != NVML_SUCCESS)
                return fail_call(s, pf, nr, f, "nvmlDeviceGetName(%s)", pf);
        if (!valid_string(name, sizeof name, false))
                return fail_invalid(f, "nvmlDeviceGetName(%s): invalid name", pf);

        /* NVML-8: a count of 0 first, to learn the size. */
        unsigned count = 0;
        nr = s->fn.device_get_supported_vgpus(dev, &count, NULL);
        if (nr != NVML_SUCCESS && nr != NVML_ERROR_INSUFFICIENT_SIZE)
                return fail_call(s, pf, nr, f, "nvmlDeviceGetSupportedVgpus(%s)", pf);
        if (nr == NVML_SUCCESS)
                count = 0;
        if (count > NVML_MAX_TYPES)
                return fail_invalid(f, "nvmlDeviceGetSupportedVgpus(%s): %u types, more than %u",
                                    pf, count, NVML_MAX_TYPES);

        _cleanup_free_ nvmlVgpuTypeId_t *ids = NULL;
        if (count > 0) {
                ids = calloc(count, sizeof *ids);
                if (!ids)
                        return -ENOMEM;
                unsigned filled = count;
                nr = s->fn.device_get_supported_vgpus(dev, &filled, ids);
                if (nr != NVML_SUCCESS)
                        return fail_call(s, pf, nr, f, "nvmlDeviceGetSupportedVgpus(%s)", pf);
                if (filled > count)
                        return fail_invalid(f,
                                            "nvmlDeviceGetSupportedVgpus(%s): %u types in a "
                                            "buffer of %u",
                                            pf, filled, count);
                count = filled;
        }

        NvmlTypeInfo *catalog = count > 0 ? calloc(count, sizeof *catalog) : NULL;
        if (count > 0 && !catalog)
                return -ENOMEM;
        for (unsigned i = 0; i < count; i++) {
                int r = query_type_info(s, pf, dev, ids[i], &catalog[i], f);
                if (r < 0) {
                        nvml_type_infos_free(catalog, i);
                        return r;
                }
        }

        a->name = strdup(name);
        if (!a->name) {
                nvml_type_infos_free(catalog, count);
                return -ENOMEM;
        }
        a->catalog = catalog;
        a->n_catalog = count;
        a->has_catalog = true;
        return 0;
}

/*
 * One placement call with list version ver (1 or 2, NVML-3a): *count is the buffer's capacity
 * in and the library's count out, *ret_size its placementSize.
 */
static nvmlReturn_t call_placements(NvmlSession *s, nvmlDevice_t dev, nvmlVgpuTypeId_t id,
                                    unsigned ver, unsigned *ids, unsigned *count,
                                    unsigned *ret_size)
{
        nvmlReturn_t nr;

        if (ver == 1) {
                nvmlVgpuPlacementList_v1_t list = {
                    .version = NVML_VGPU_PLACEMENT_LIST_V1,
                    .count = *count,
                    .placementIds = ids,
                };
                nr = s->fn.device_get_vgpu_type_creatable_placements_v1(dev, id, &list);
                *count = list.count;
                *ret_size = list.placementSize;
                return nr;
        }
        nvmlVgpuPlacementList_v2_t list = {
            .version = NVML_VGPU_PLACEMENT_LIST_V2,
            .count = *count,
            .placementIds = ids,
            .mode = NVML_VGPU_PGPU_HETEROGENEOUS_MODE,
        };
        nr = s->fn.device_get_vgpu_type_creatable_placements(dev, id, &list);
        *count = list.count;
        *ret_size = list.placementSize;
        return nr;
}

static int query_placements(NvmlSession *s, const char *pf, nvmlDevice_t dev, nvmlVgpuTypeId_t id,
                            unsigned max_instances, NvmlPlacements *ret, CallFailure *f)
{
        NvmlPlacements p = {
            .type_id = id,
            .started = mono_clock_now(s->clock),
            .seq = ++s->query_seq,
        };

        if (max_instances == 0) {
                /* The type cannot be created on this GPU at all: no buffer to hand over. */
                *ret = p;
                return 0;
        }
        unsigned cap = max_instances < NVML_MAX_PLACEMENTS ? max_instances : NVML_MAX_PLACEMENTS;

        /*
         * NVML-3a: the version this library took before; until one has worked, v2 first and
         * v1 once if the library refuses v2 (R550 and R560 know only v1).
         */
        unsigned ver = s->placement_list_version ?: 2;
        bool tried_both = false;
        for (unsigned attempt = 0;;) {
                _cleanup_free_ unsigned *ids = calloc(cap, sizeof *ids);
                if (!ids)
                        return -ENOMEM;
                unsigned count = cap, size = 0;
                nvmlReturn_t nr = call_placements(s, dev, id, ver, ids, &count, &size);
                if (nr == NVML_ERROR_ARGUMENT_VERSION_MISMATCH && ver == 2 &&
                    s->placement_list_version == 0) {
                        ver = 1;
                        tried_both = true;
                        continue;
                }
                if (nr == NVML_ERROR_INSUFFICIENT_SIZE && attempt == 0) {
                        /* NVML-8: retried once with the count it asked for. */
                        if (count <= cap || count > NVML_MAX_PLACEMENTS)
                                return fail_invalid(f,
                                                    "nvmlDeviceGetVgpuTypeCreatablePlacements("
                                                    "%s, type %u): asks for %u entries",
                                                    pf, id, count);
                        cap = count;
                        attempt++;
                        continue;
                }
                if (nr == NVML_ERROR_NOT_SUPPORTED) {
                        *ret = p; /* NVML-8: 0 placements of this type */
                        return -EOPNOTSUPP;
                }
                if (nr != NVML_SUCCESS) {
                        int r = fail_call(s, pf, nr, f,
                                          "nvmlDeviceGetVgpuTypeCreatablePlacements(%s, type %u)",
                                          pf, id);
                        if (tried_both && nr == NVML_ERROR_ARGUMENT_VERSION_MISMATCH && f->error)
                                (void)strextend(&f->error, " (placement list v2 and v1)");
                        return r;
                }
                if (count > cap)
                        return fail_invalid(f,
                                            "nvmlDeviceGetVgpuTypeCreatablePlacements(%s, type "
                                            "%u): %u placements in a buffer of %u",
                                            pf, id, count, cap);
                /* Only an answer proves the library reads this version (NVML-3a). */
                s->placement_list_version = ver;
                p.count = count;
                p.placement_size = size;
                *ret = p;
                return 0;
        }
}

/* One GPU of a request. A failure that concerns the whole host is returned in *host. */
static void run_gpu(NvmlSession *s, const NvmlGpuRequest *g, NvmlGpuAnswer *a, CallFailure *host)
{
        CallFailure f = {};
        nvmlDevice_t dev = NULL;
        int r;

        snprintf(a->pf, sizeof a->pf, "%s", g->pf);
        a->mode = NVML_MODE_UNKNOWN;

        r = get_handle(s, g->pf, &dev, &f);
        if (r >= 0 && g->query_mode)
                r = query_mode(s, g->pf, dev, &a->mode, &f);
        if (r >= 0 && g->query_catalog)
                r = query_catalog(s, g->pf, dev, a, &f);
        /* Without a fresh mode, the caller asks only for GPUs it has cached as mixed-size. */
        if (r >= 0 && g->query_placements && a->mode == NVML_MODE_EQUAL) {
                a->fallback = NVML_FALLBACK_EQUAL_SIZE;
                return;
        }
        if (r >= 0 && g->query_placements) {
                size_t n = g->query_catalog ? a->n_catalog : g->n_types;
                size_t not_supported = 0;
                a->placements = n > 0 ? calloc(n, sizeof *a->placements) : NULL;
                if (n > 0 && !a->placements)
                        r = -ENOMEM;
                for (size_t i = 0; r >= 0 && i < n; i++) {
                        nvmlVgpuTypeId_t id =
                            g->query_catalog ? a->catalog[i].type_id : g->types[i];
                        unsigned max =
                            g->query_catalog ? a->catalog[i].max_instances : g->max_instances[i];
                        r = query_placements(s, g->pf, dev, id, max, &a->placements[i], &f);
                        if (r == -EOPNOTSUPP) {
                                not_supported++;
                                r = 0;
                        }
                        if (r >= 0)
                                a->n_placements++;
                }
                if (r >= 0 && n > 0 && not_supported == n) {
                        /* NVML-7: every type refused; has the GPU left mixed-size mode? */
                        NvmlMode now;
                        r = query_mode(s, g->pf, dev, &now, &f);
                        if (r >= 0) {
                                a->mode = now;
                                if (now == NVML_MODE_EQUAL) {
                                        free(a->placements);
                                        a->placements = NULL;
                                        a->n_placements = 0;
                                        a->fallback = NVML_FALLBACK_EQUAL_SIZE;
                                }
                        }
                }
        }
        if (r >= 0) {
                free(f.error);
                return;
        }

        if (f.host) {
                *host = f;
                return;
        }
        free(a->placements);
        a->placements = NULL;
        a->n_placements = 0;
        a->fallback = NVML_FALLBACK_ERROR;
        if (!f.error)
                (void)strprintf(&f.error, "query NVML for GPU %s: %s", g->pf, strerror(-r));
        a->error = f.error;
}

void nvml_session_run(NvmlSession *s, const NvmlRequest *req, NvmlAnswer *answer)
{
        CallFailure host = {};

        answer->started = mono_clock_now(s->clock);
        if (!s->initialised) {
                answer->host_fallback = NVML_FALLBACK_UNAVAILABLE;
                answer->host_error = strdup("NVML is not initialised");
                return;
        }
        if (req->n_gpus > 0) {
                answer->gpus = calloc(req->n_gpus, sizeof *answer->gpus);
                if (!answer->gpus) {
                        answer->host_fallback = NVML_FALLBACK_UNAVAILABLE;
                        return;
                }
        }
        answer->n_gpus = req->n_gpus;
        for (size_t i = 0; i < req->n_gpus && !host.host; i++)
                run_gpu(s, &req->gpus[i], &answer->gpus[i], &host);

        if (host.host) {
                /* NVML-11: counted as `unavailable` for the whole host. */
                NvmlAnswer failed = {
                    .host_fallback = NVML_FALLBACK_UNAVAILABLE,
                    .host_error = host.error,
                    .started = answer->started,
                };
                nvml_answer_done(answer);
                *answer = failed;
        }
        answer->placement_list_version = s->placement_list_version;
}
