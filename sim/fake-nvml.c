/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * A fake libnvidia-ml.so.1 (SIM-13): the NVML-4 functions with the NVML-3 layouts, answering
 * from the simulator's model. The model is found through VGPU_SIM_CONTROL=<DIR>/.sim. Every call
 * asks the simulator whether state.json changed (its mtime, which the simulator moves on every
 * store and every command other than the query markers) and parses it again only then, so
 * answers always follow the mounted simulator without a 35 KB parse per call.
 *
 * Each call honours the `nvml` control settings: it blocks while `nvml hang on` holds (polling
 * the state), then sleeps the configured latency, then returns an injected error code for its
 * function if one is set (a counted error is consumed through .sim/ctl, so the count is
 * shared by every process). Calls about one GPU announce themselves to the simulator with
 * `nvml query-begin`/`query-end`, which is how it counts queries that overlap a sysfs write
 * (PLACE-9).
 *
 * The library keeps the few globals an NVML implementation needs: the init count, the control
 * directory, the table that device handles point into, and the link to the simulator (its two
 * descriptors and the model last parsed).
 */
#include "model.h"
#include "nvml.h"

#include <ctype.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#define NVML_EXPORT __attribute__((visibility("default")))
#define MAX_DEVICES 64
#define HANG_POLL_MS 20

struct nvmlDevice_st {
        char address[PCI_ADDRESS_STRLEN];
};

static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned nvml_init_count;
static char nvml_control[PATH_MAX];
static struct nvmlDevice_st nvml_devices[MAX_DEVICES];
static size_t nvml_n_devices;
static atomic_ulong nvml_calls;

/* ---- talking to the simulator ---------------------------------------------------------------- */

static void sleep_ms(uint64_t ms)
{
        struct timespec ts = {.tv_sec = (time_t)(ms / 1000),
                              .tv_nsec = (long)(ms % 1000) * 1000000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
}

/*
 * The model as parsed from one read of state.json. Calls share it (it is never changed after
 * parsing); the last one to let go frees it.
 */
typedef struct Snapshot {
        unsigned refs;
        SimHost *host;
} Snapshot;

/*
 * The link to one simulator: descriptors on .sim/ctl and .sim/state.json, opened by the first
 * call that needs them and kept until the last nvmlShutdown, and the snapshot last parsed with
 * the state.json attributes it was read under. Guarded by link_lock, which also serialises the
 * reads of the one state descriptor (a read from offset 0 regenerates the text).
 */
typedef struct SimLink {
        char control[PATH_MAX]; /* "" while closed */
        int ctl_fd, state_fd;   /* -1 until first used */
        Snapshot *snapshot;
        struct statx_timestamp mtime;
        uint64_t size, ino;
} SimLink;

static pthread_mutex_t link_lock = PTHREAD_MUTEX_INITIALIZER;
static SimLink sim_link = {.ctl_fd = -1, .state_fd = -1};

static Snapshot *snapshot_ref(Snapshot *s)
{
        if (s)
                s->refs++; /* under link_lock */
        return s;
}

static Snapshot *snapshot_unref(Snapshot *s)
{
        if (!s)
                return NULL;
        pthread_mutex_lock(&link_lock);
        bool last = --s->refs == 0;
        pthread_mutex_unlock(&link_lock);
        if (last) {
                sim_host_free(s->host);
                free(s);
        }
        return NULL;
}

static void link_close_fd(int *fd)
{
        closep(fd);
        *fd = -1;
}

/* Drops the descriptors and the snapshot. Call with link_lock. */
static void link_close_locked(SimLink *l)
{
        link_close_fd(&l->ctl_fd);
        link_close_fd(&l->state_fd);
        if (l->snapshot && --l->snapshot->refs == 0) {
                sim_host_free(l->snapshot->host);
                free(l->snapshot);
        }
        l->snapshot = NULL;
        l->control[0] = 0;
}

/*
 * A library unloaded without its last nvmlShutdown (a session abandoned on a hung call, say)
 * still gives back what the link held. A call still hung in another thread may hold the lock
 * at process exit; the link is then left as it is rather than the exit blocked.
 */
static void __attribute__((destructor)) link_unload(void)
{
        if (pthread_mutex_trylock(&link_lock) != 0)
                return;
        link_close_locked(&sim_link);
        pthread_mutex_unlock(&link_lock);
}

/* Points the link at control, closing what it held for another simulator. Call with link_lock. */
static void link_use_locked(SimLink *l, const char *control)
{
        if (streq(l->control, control))
                return;
        link_close_locked(l);
        snprintf(l->control, sizeof(l->control), "%s", control);
}

static int link_open_locked(SimLink *l, const char *name, int flags, int *fd)
{
        if (*fd >= 0)
                return *fd;
        _cleanup_free_ char *path = NULL;
        int r = strprintf(&path, "%s/%s", l->control, name);
        if (r < 0)
                return r;
        *fd = open(path, flags | O_CLOEXEC | O_NOCTTY);
        return *fd >= 0 ? *fd : negative_errno();
}

/* A descriptor that a new mount under the same path left behind; a fresh open may work. */
static bool link_is_stale(int r)
{
        return r == -ENOTCONN || r == -EBADF || r == -ENODEV;
}

/*
 * Reads the whole of state.json through the kept descriptor into a buffer of its own: only the
 * parsed model is kept, so the text's 64 KiB or more do not sit in the host process between
 * reads. Call with link_lock.
 */
static int link_read_state_locked(SimLink *l, char **ret_buf, size_t *ret_size)
{
        _cleanup_free_ char *buf = NULL;
        size_t used = 0, buf_size = 0;
        for (;;) {
                if (used == buf_size) {
                        if (buf_size > SIM_STATE_MAX_BYTES)
                                return -EFBIG;
                        size_t next = buf_size ? buf_size * 2 : 64 * 1024;
                        char *grown = realloc(buf, next + 1);
                        if (!grown)
                                return -ENOMEM;
                        buf = grown;
                        buf_size = next;
                }
                /* A read from offset 0 regenerates the text; later offsets read that same text. */
                ssize_t n = pread(l->state_fd, buf + used, buf_size - used, (off_t)used);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return negative_errno();
                if (n == 0)
                        break;
                used += (size_t)n;
        }
        if (used > SIM_STATE_MAX_BYTES)
                return -EFBIG;
        buf[used] = 0;
        *ret_buf = TAKE_PTR(buf);
        *ret_size = used;
        return 0;
}

static bool same_time(const struct statx_timestamp *a, const struct statx_timestamp *b)
{
        return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/*
 * The model as it is now: the kept snapshot while state.json's attributes are those it was read
 * under, else a fresh read. The attributes are asked first, so a change racing the read can
 * only make the next call read again, never keep an old snapshot.
 */
static int link_load_locked(SimLink *l, Snapshot **ret)
{
        struct statx stx;
        int r = link_open_locked(l, "state.json", O_RDONLY, &l->state_fd);
        if (r >= 0 && statx(l->state_fd, "", AT_EMPTY_PATH | AT_STATX_FORCE_SYNC,
                            STATX_MTIME | STATX_SIZE | STATX_INO, &stx) < 0)
                r = negative_errno();
        if (r < 0)
                return r;
        if (l->snapshot && same_time(&stx.stx_mtime, &l->mtime) && stx.stx_size == l->size &&
            stx.stx_ino == l->ino) {
                *ret = snapshot_ref(l->snapshot);
                return 0;
        }

        _cleanup_free_ char *text = NULL;
        size_t size;
        if ((r = link_read_state_locked(l, &text, &size)) < 0)
                return r;
        _cleanup_free_ Snapshot *s = calloc(1, sizeof(*s));
        if (!s)
                return -ENOMEM;
        if ((r = sim_host_from_json(text, size, &s->host, NULL)) < 0)
                return r;
        s->refs = 1; /* the link's */
        if (l->snapshot && --l->snapshot->refs == 0) {
                sim_host_free(l->snapshot->host);
                free(l->snapshot);
        }
        l->snapshot = TAKE_PTR(s);
        l->mtime = stx.stx_mtime;
        l->size = stx.stx_size;
        l->ino = stx.stx_ino;
        *ret = snapshot_ref(l->snapshot);
        return 0;
}

static int load_state(const char *control, Snapshot **ret)
{
        pthread_mutex_lock(&link_lock);
        link_use_locked(&sim_link, control);
        int r = link_load_locked(&sim_link, ret);
        if (link_is_stale(r)) {
                link_close_fd(&sim_link.state_fd);
                r = link_load_locked(&sim_link, ret);
        }
        pthread_mutex_unlock(&link_lock);
        return r;
}

/* One command, in one write() to the kept .sim/ctl descriptor. Call with link_lock. */
static int link_send_locked(SimLink *l, const char *command)
{
        int r = link_open_locked(l, "ctl", O_WRONLY, &l->ctl_fd);
        if (r < 0)
                return r;
        ssize_t n = write(l->ctl_fd, command, strlen(command));
        if (n < 0)
                return negative_errno();
        return (size_t)n == strlen(command) ? 0 : -EIO;
}

/* One command to .sim/ctl; the simulator's answer is the write's errno. */
static int send_ctl(const char *control, const char *fmt, ...) _printf_(2, 3);
static int send_ctl(const char *control, const char *fmt, ...)
{
        _cleanup_free_ char *command = NULL;
        va_list ap;

        va_start(ap, fmt);
        int k = vasprintf(&command, fmt, ap);
        va_end(ap);
        if (k < 0)
                return -ENOMEM;
        pthread_mutex_lock(&link_lock);
        link_use_locked(&sim_link, control);
        int r = link_send_locked(&sim_link, command);
        if (link_is_stale(r)) {
                link_close_fd(&sim_link.ctl_fd);
                r = link_send_locked(&sim_link, command);
        }
        pthread_mutex_unlock(&link_lock);
        return r;
}

/* ---- one call -------------------------------------------------------------------------------- */

typedef struct Call {
        char control[PATH_MAX];
        char gpu[PCI_ADDRESS_STRLEN]; /* the GPU a query is about, or empty */
        char token[64];
        bool announced;
        Snapshot *snapshot;
        const SimHost *host; /* the model as of this call: the snapshot's */
} Call;

static void call_end(Call *c)
{
        if (c->announced)
                (void)send_ctl(c->control, "nvml query-end %s %s", c->gpu, c->token);
        snapshot_unref(c->snapshot);
}

/* (Re)loads the model into the call. */
static int call_load(Call *c)
{
        Snapshot *s;
        int r = load_state(c->control, &s);
        if (r < 0)
                return r;
        snapshot_unref(c->snapshot);
        c->snapshot = s;
        c->host = s->host;
        return 0;
}

static bool initialized(char control[static PATH_MAX])
{
        pthread_mutex_lock(&nvml_lock);
        bool ok = nvml_init_count > 0;
        if (ok)
                memcpy(control, nvml_control, PATH_MAX);
        pthread_mutex_unlock(&nvml_lock);
        return ok;
}

/*
 * Starts a call: waits out a hang, sleeps the latency, loads the model and applies an
 * injected error. gpu (may be NULL) names the GPU the call queries.
 */
static nvmlReturn_t call_begin(Call *c, const char *function, const char *gpu)
{
        if (gpu) {
                snprintf(c->gpu, sizeof(c->gpu), "%s", gpu);
                snprintf(c->token, sizeof(c->token), "%ld-%lu", (long)getpid(),
                         atomic_fetch_add(&nvml_calls, 1));
                /* Best effort: counting overlaps must not change what the call answers. */
                c->announced =
                    send_ctl(c->control, "nvml query-begin %s %s", c->gpu, c->token) >= 0;
        }
        if (call_load(c) < 0)
                return NVML_ERROR_UNKNOWN;
        while (c->host->nvml_hang) {
                sleep_ms(HANG_POLL_MS);
                if (call_load(c) < 0)
                        return NVML_ERROR_UNKNOWN;
        }
        if (c->host->nvml_latency_ms > 0) {
                sleep_ms(c->host->nvml_latency_ms);
                /* Answer from the model as it is when the slow call returns. */
                if (call_load(c) < 0)
                        return NVML_ERROR_UNKNOWN;
        }
        for (size_t i = 0; i < c->host->n_nvml_errors; i++) {
                const SimNvmlError *e = &c->host->nvml_errors[i];
                if (!streq(e->function, function))
                        continue;
                /* A counted error is used up in the simulator, so only the winners see it. */
                if (e->remaining == 0 || send_ctl(c->control, "nvml consume %s", function) >= 0)
                        return e->code;
        }
        return NVML_SUCCESS;
}

/* Starts a call that needs nvmlInit_v2 to have run. */
static nvmlReturn_t call_enter(Call *c, const char *function, const char *gpu)
{
        if (!initialized(c->control))
                return NVML_ERROR_UNINITIALIZED;
        return call_begin(c, function, gpu);
}

/* The address behind a handle, or NULL for a pointer this library never handed out. */
static const char *device_address(nvmlDevice_t device)
{
        for (size_t i = 0; i < MAX_DEVICES; i++)
                if (device == &nvml_devices[i])
                        return i < nvml_n_devices ? nvml_devices[i].address : NULL;
        return NULL;
}

static nvmlReturn_t device_enter(Call *c, const char *function, nvmlDevice_t device,
                                 const SimGpu **ret)
{
        if (!initialized(c->control))
                return NVML_ERROR_UNINITIALIZED;
        pthread_mutex_lock(&nvml_lock);
        const char *a = device_address(device);
        char address[PCI_ADDRESS_STRLEN];
        if (a)
                memcpy(address, a, sizeof(address));
        pthread_mutex_unlock(&nvml_lock);
        if (!a)
                return NVML_ERROR_INVALID_ARGUMENT;

        nvmlReturn_t rc = call_begin(c, function, address);
        if (rc != NVML_SUCCESS)
                return rc;
        size_t g;
        if (sim_host_find_gpu(c->host, address, &g) < 0)
                return NVML_ERROR_GPU_IS_LOST;
        *ret = &c->host->gpus[g];
        return NVML_SUCCESS;
}

static nvmlReturn_t copy_string(const char *s, char *buf, unsigned int length)
{
        if (!buf)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (strlen(s) + 1 > length)
                return NVML_ERROR_INSUFFICIENT_SIZE;
        memcpy(buf, s, strlen(s) + 1);
        return NVML_SUCCESS;
}

/* ---- the exported functions ------------------------------------------------------------------ */

NVML_EXPORT nvmlReturn_t nvmlInit_v2(void)
{
        _cleanup_(call_end) Call c = {};
        const char *control = getenv("VGPU_SIM_CONTROL");

        if (!control || control[0] != '/' || strlen(control) >= PATH_MAX)
                return NVML_ERROR_DRIVER_NOT_LOADED;
        snprintf(c.control, sizeof(c.control), "%s", control);
        nvmlReturn_t rc = call_begin(&c, "nvmlInit_v2", NULL);
        if (rc == NVML_ERROR_UNKNOWN && !c.host)
                return NVML_ERROR_DRIVER_NOT_LOADED; /* no simulator behind the path */
        if (rc != NVML_SUCCESS)
                return rc;

        pthread_mutex_lock(&nvml_lock);
        if (nvml_init_count == 0)
                memcpy(nvml_control, c.control, PATH_MAX);
        nvml_init_count++;
        pthread_mutex_unlock(&nvml_lock);
        return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlShutdown(void)
{
        _cleanup_(call_end) Call c = {};
        nvmlReturn_t rc = call_enter(&c, "nvmlShutdown", NULL);
        if (rc != NVML_SUCCESS)
                return rc;
        pthread_mutex_lock(&nvml_lock);
        if (nvml_init_count > 0)
                nvml_init_count--;
        bool last = nvml_init_count == 0;
        pthread_mutex_unlock(&nvml_lock);
        if (last) {
                /* The descriptors go with the last session; a later call opens them again. */
                pthread_mutex_lock(&link_lock);
                link_close_locked(&sim_link);
                pthread_mutex_unlock(&link_lock);
        }
        return NVML_SUCCESS;
}

NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
        switch (result) {
        case NVML_SUCCESS:
                return "Success";
        case NVML_ERROR_UNINITIALIZED:
                return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT:
                return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED:
                return "Not Supported";
        case NVML_ERROR_NO_PERMISSION:
                return "Insufficient Permissions";
        case NVML_ERROR_NOT_FOUND:
                return "Not Found";
        case NVML_ERROR_INSUFFICIENT_SIZE:
                return "Insufficient Size";
        case NVML_ERROR_DRIVER_NOT_LOADED:
                return "Driver Not Loaded";
        case NVML_ERROR_TIMEOUT:
                return "Timeout";
        case NVML_ERROR_LIBRARY_NOT_FOUND:
                return "NVML Shared Library Not Found";
        case NVML_ERROR_FUNCTION_NOT_FOUND:
                return "Function Not Found";
        case NVML_ERROR_GPU_IS_LOST:
                return "GPU is lost";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
                return "RM has detected an NVML/RM version mismatch";
        case NVML_ERROR_IN_USE:
                return "In use by another client";
        case NVML_ERROR_ARGUMENT_VERSION_MISMATCH:
                return "Argument version mismatch";
        case NVML_ERROR_GPU_NOT_FOUND:
                return "GPU not found";
        default:
                return "Unknown Error";
        }
}

NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
        _cleanup_(call_end) Call c = {};
        nvmlReturn_t rc = call_enter(&c, "nvmlSystemGetDriverVersion", NULL);
        if (rc != NVML_SUCCESS)
                return rc;
        return copy_string(c.host->driver_version, version, length);
}

/* NVML prints an 8-digit domain and uppercase hex; vgpud passes the sysfs form. Take both. */
static int normalize_bus_id(const char *s, char ret[static PCI_ADDRESS_STRLEN])
{
        char lower[32];
        size_t n = strlen(s);

        if (n >= sizeof(lower))
                return -EINVAL;
        for (size_t i = 0; i <= n; i++)
                lower[i] = (char)tolower((unsigned char)s[i]);
        const char *p = lower;
        if (n == 16) {
                if (strncmp(lower, "0000", 4) != 0)
                        return -EINVAL;
                p += 4;
        }
        if (!pci_address_is_valid(p))
                return -EINVAL;
        memcpy(ret, p, PCI_ADDRESS_STRLEN);
        return 0;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId,
                                                          nvmlDevice_t *device)
{
        _cleanup_(call_end) Call c = {};
        char address[PCI_ADDRESS_STRLEN];
        size_t g;

        if (!pciBusId || !device || normalize_bus_id(pciBusId, address) < 0)
                return NVML_ERROR_INVALID_ARGUMENT;
        nvmlReturn_t rc = call_enter(&c, "nvmlDeviceGetHandleByPciBusId_v2", address);
        if (rc != NVML_SUCCESS)
                return rc;
        if (sim_host_find_gpu(c.host, address, &g) < 0)
                return NVML_ERROR_NOT_FOUND;

        /* Handles stay valid for the life of the process, like the real library's. */
        pthread_mutex_lock(&nvml_lock);
        size_t i = 0;
        while (i < nvml_n_devices && !streq(nvml_devices[i].address, address))
                i++;
        if (i == nvml_n_devices && nvml_n_devices < MAX_DEVICES)
                memcpy(nvml_devices[nvml_n_devices++].address, address, PCI_ADDRESS_STRLEN);
        if (i < nvml_n_devices)
                *device = &nvml_devices[i];
        pthread_mutex_unlock(&nvml_lock);
        return i < MAX_DEVICES ? NVML_SUCCESS : NVML_ERROR_UNKNOWN;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
        _cleanup_(call_end) Call c = {};
        const SimGpu *g;
        nvmlReturn_t rc = device_enter(&c, "nvmlDeviceGetName", device, &g);
        if (rc != NVML_SUCCESS)
                return rc;
        return copy_string(g->model->nvml_name, name, length);
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetVgpuHeterogeneousMode(
    nvmlDevice_t device, nvmlVgpuHeterogeneousMode_t *pHeterogeneousMode)
{
        _cleanup_(call_end) Call c = {};
        const SimGpu *g;
        nvmlReturn_t rc = device_enter(&c, "nvmlDeviceGetVgpuHeterogeneousMode", device, &g);
        if (rc != NVML_SUCCESS)
                return rc;
        if (!pHeterogeneousMode)
                return NVML_ERROR_INVALID_ARGUMENT;
        if (pHeterogeneousMode->version != nvmlVgpuHeterogeneousMode_v1)
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        if (!g->model->mixed_capable)
                return NVML_ERROR_NOT_SUPPORTED;
        pHeterogeneousMode->mode = g->mode == SIM_MODE_MIXED ? 1 : 0;
        return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedVgpus(nvmlDevice_t device, unsigned int *vgpuCount,
                                                     nvmlVgpuTypeId_t *vgpuTypeIds)
{
        _cleanup_(call_end) Call c = {};
        const SimGpu *g;
        nvmlReturn_t rc = device_enter(&c, "nvmlDeviceGetSupportedVgpus", device, &g);
        if (rc != NVML_SUCCESS)
                return rc;
        if (!vgpuCount)
                return NVML_ERROR_INVALID_ARGUMENT;
        unsigned int n = (unsigned int)g->model->n_types;
        if (*vgpuCount < n) {
                *vgpuCount = n;
                return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if (n > 0 && !vgpuTypeIds)
                return NVML_ERROR_INVALID_ARGUMENT;
        for (unsigned int i = 0; i < n; i++)
                vgpuTypeIds[i] = g->model->types[i].id;
        *vgpuCount = n;
        return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlVgpuTypeGetName(nvmlVgpuTypeId_t vgpuTypeId, char *vgpuTypeName,
                                             unsigned int *size)
{
        _cleanup_(call_end) Call c = {};
        const SimGpuModel *m;
        const SimType *t;
        nvmlReturn_t rc = call_enter(&c, "nvmlVgpuTypeGetName", NULL);
        if (rc != NVML_SUCCESS)
                return rc;
        if (!size || sim_type_find_any(vgpuTypeId, &m, &t) < 0)
                return NVML_ERROR_INVALID_ARGUMENT;
        unsigned int need = (unsigned int)strlen(t->name) + 1;
        if (*size < need) {
                *size = need;
                return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if (!vgpuTypeName)
                return NVML_ERROR_INVALID_ARGUMENT;
        memcpy(vgpuTypeName, t->name, need);
        *size = need;
        return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlVgpuTypeGetFramebufferSize(nvmlVgpuTypeId_t vgpuTypeId,
                                                        unsigned long long *fbSize)
{
        _cleanup_(call_end) Call c = {};
        const SimGpuModel *m;
        const SimType *t;
        nvmlReturn_t rc = call_enter(&c, "nvmlVgpuTypeGetFramebufferSize", NULL);
        if (rc != NVML_SUCCESS)
                return rc;
        if (!fbSize || sim_type_find_any(vgpuTypeId, &m, &t) < 0)
                return NVML_ERROR_INVALID_ARGUMENT;
        *fbSize = (unsigned long long)t->size << 30;
        return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlVgpuTypeGetMaxInstances(nvmlDevice_t device,
                                                     nvmlVgpuTypeId_t vgpuTypeId,
                                                     unsigned int *vgpuInstanceCount)
{
        _cleanup_(call_end) Call c = {};
        const SimGpu *g;
        nvmlReturn_t rc = device_enter(&c, "nvmlVgpuTypeGetMaxInstances", device, &g);
        if (rc != NVML_SUCCESS)
                return rc;
        const SimType *t = sim_gpu_model_find_type(g->model, vgpuTypeId);
        if (!vgpuInstanceCount || !t)
                return NVML_ERROR_INVALID_ARGUMENT;
        *vgpuInstanceCount = sim_type_max_instances(g->model, t);
        return NVML_SUCCESS;
}

NVML_EXPORT nvmlReturn_t nvmlDeviceGetVgpuTypeCreatablePlacements(
    nvmlDevice_t device, nvmlVgpuTypeId_t vgpuTypeId, nvmlVgpuPlacementList_t *pPlacementList)
{
        _cleanup_(call_end) Call c = {};
        const SimGpu *g;
        nvmlReturn_t rc = device_enter(&c, "nvmlDeviceGetVgpuTypeCreatablePlacements", device, &g);
        if (rc != NVML_SUCCESS)
                return rc;
        const SimType *t = sim_gpu_model_find_type(g->model, vgpuTypeId);
        if (!pPlacementList || !t)
                return NVML_ERROR_INVALID_ARGUMENT;

        /*
         * The version word decides which struct the caller passed (SIM-13, NVML-3a): v1 ends
         * before `mode`, so nothing past its version is read until the word is known. The host
         * file's nvml_struct_versions says which this library knows: an R550/R560 library
         * answers ARGUMENT_VERSION_MISMATCH to v2, as it would to any word it was built without.
         */
        unsigned int version = pPlacementList->version, ver = 0;
        unsigned int *placement_size = NULL, *count = NULL, *ids = NULL;
        if (version == nvmlVgpuPlacementList_v2) {
                ver = 2;
                placement_size = &pPlacementList->placementSize;
                count = &pPlacementList->count;
                ids = pPlacementList->placementIds;
        } else if (version == nvmlVgpuPlacementList_v1) {
                nvmlVgpuPlacementList_v1_t *v1 = (nvmlVgpuPlacementList_v1_t *)pPlacementList;
                ver = 1;
                placement_size = &v1->placementSize;
                count = &v1->count;
                ids = v1->placementIds;
        }
        if (ver == 0 || !(c.host->nvml_struct_versions & (1u << ver)))
                return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        /* Only heterogeneous placements are modelled; the homogeneous query is a caller bug. */
        if (ver == 2 && pPlacementList->mode != NVML_VGPU_PGPU_HETEROGENEOUS_MODE)
                return NVML_ERROR_INVALID_ARGUMENT;

        uint32_t starts[64];
        size_t n;
        if (sim_gpu_placements(g, t, starts, ELEMENTSOF(starts), &n) < 0)
                return NVML_ERROR_NOT_SUPPORTED; /* equal-size (SIM-13); v1 lists only mixed */
        *placement_size = t->size;
        if (*count < n) {
                *count = (unsigned int)n;
                return NVML_ERROR_INSUFFICIENT_SIZE;
        }
        if (n > 0 && !ids)
                return NVML_ERROR_INVALID_ARGUMENT;
        for (size_t i = 0; i < n; i++)
                ids[i] = starts[i];
        *count = (unsigned int)n;
        return NVML_SUCCESS;
}
