/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "sim-test.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <inttypes.h>

uint64_t st_now_ms(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

bool st_poll(bool (*cond)(const SimTest *t, const void *arg), const SimTest *t, const void *arg,
             unsigned timeout_ms)
{
        uint64_t deadline = st_now_ms() + timeout_ms;
        for (;;) {
                if (cond(t, arg))
                        return true;
                if (st_now_ms() >= deadline)
                        return false;
                struct timespec ts = {.tv_nsec = 10 * 1000000};
                nanosleep(&ts, NULL);
        }
}

char *st_path(const SimTest *t, const char *fmt, ...)
{
        _cleanup_free_ char *rel = NULL;
        char *path = NULL;
        va_list ap;

        va_start(ap, fmt);
        int k = vasprintf(&rel, fmt, ap);
        va_end(ap);
        assert_true(k >= 0);
        assert_int_equal(strprintf(&path, "%s/%s", t->mnt, rel), 0);
        return path;
}

char *st_vf_attr(const SimTest *t, const char *vf, const char *attr)
{
        return st_path(t, "sys/bus/pci/devices/%s/nvidia/%s", vf, attr);
}

void st_vf_address(const char *pf, unsigned i, char ret[static PCI_ADDRESS_STRLEN])
{
        PciAddress a;
        assert_int_equal(parse_pci_address(pf, &a), 0);
        a.device = (uint8_t)((4 + i) >> 3);
        a.function = (uint8_t)((4 + i) & 7);
        pci_address_format(&a, ret);
}

int st_write(const char *path, const char *value)
{
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
        if (fd < 0)
                return negative_errno();
        ssize_t n = write(fd, value, strlen(value));
        if (n < 0)
                return negative_errno();
        return n == (ssize_t)strlen(value) ? 0 : -EIO;
}

int st_try_read(const char *path, char **ret)
{
        return read_file_at(AT_FDCWD, path, 1 << 22, ret, NULL);
}

char *st_read(const char *path)
{
        char *s = NULL;
        int r = st_try_read(path, &s);
        if (r < 0)
                fail_msg("read %s: %s", path, strerror(-r));
        return s;
}

int st_ctl(const SimTest *t, const char *fmt, ...)
{
        _cleanup_free_ char *command = NULL, *path = st_path(t, ".sim/ctl");
        va_list ap;

        va_start(ap, fmt);
        int k = vasprintf(&command, fmt, ap);
        va_end(ap);
        assert_true(k >= 0);
        return st_write(path, command);
}

char *st_ctl_result(const SimTest *t)
{
        _cleanup_free_ char *path = st_path(t, ".sim/ctl");
        return st_read(path);
}

json_t *st_state(const SimTest *t)
{
        _cleanup_free_ char *path = st_path(t, ".sim/state.json"), *text = st_read(path);
        json_error_t err;
        json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &err);
        if (!j)
                fail_msg("state.json: %s", err.text);
        return j;
}

json_t *st_state_vf(json_t *state, const char *vf)
{
        size_t i, k;
        json_t *gpu, *v;

        json_array_foreach (json_object_get(state, "gpus"), i, gpu) {
                json_array_foreach (json_object_get(gpu, "vfs"), k, v) {
                        if (streq(json_string_value(json_object_get(v, "address")), vf))
                                return v;
                }
        }
        fail_msg("VF %s not in state.json", vf);
        return NULL;
}

json_int_t st_state_vf_int(const SimTest *t, const char *vf, const char *key)
{
        json_auto_t *s = st_state(t);
        json_t *v = json_object_get(st_state_vf(s, vf), key);
        if (!json_is_integer(v))
                fail_msg("%s of VF %s is not an integer", key, vf);
        return json_integer_value(v);
}

int st_set_type(const SimTest *t, const char *vf, uint32_t type)
{
        _cleanup_free_ char *path = st_vf_attr(t, vf, "current_vgpu_type");
        char value[16];
        snprintf(value, sizeof(value), "%" PRIu32, type);
        return st_write(path, value);
}

static bool release_done(const SimTest *t, const void *arg)
{
        return st_set_type(t, arg, 0) == 0;
}

int st_release(const SimTest *t, const char *vf)
{
        return st_poll(release_done, t, vf, 5000) ? 0 : -EBUSY;
}

int st_reset(void **state)
{
        SimTest *t = *state;
        json_auto_t *s = NULL;
        size_t i, k;
        json_t *gpu, *vf;

        assert_int_equal(st_ctl(t, "clear-faults"), 0);
        assert_int_equal(st_ctl(t, "nvml clear"), 0);
        s = st_state(t);
        json_array_foreach (json_object_get(s, "gpus"), i, gpu) {
                json_array_foreach (json_object_get(gpu, "vfs"), k, vf) {
                        const char *address = json_string_value(json_object_get(vf, "address"));
                        json_t *mdev = json_object_get(vf, "mdev");
                        assert_int_equal(st_ctl(t, "release-lag %s 0", address), 0);
                        if (json_is_object(mdev)) {
                                _cleanup_free_ char *remove =
                                    st_path(t, "sys/bus/mdev/devices/%s/remove",
                                            json_string_value(json_object_get(mdev, "uuid")));
                                assert_int_equal(st_write(remove, "1"), 0);
                        } else if (json_integer_value(json_object_get(vf, "type")) != 0)
                                assert_int_equal(st_release(t, address), 0);
                }
        }
        return 0;
}

int st_group_setup(void **state)
{
        const char *mnt = getenv("VGPU_SIM_MOUNT"), *lib = getenv("VGPU_SIM_NVML");
        SimTest *t = calloc(1, sizeof(SimTest));
        static const struct {
                const char *name;
                size_t offset;
        } functions[] = {
#define FN(f) {"nvml" #f, offsetof(Nvml, f)}
            FN(Init_v2),
            FN(Shutdown),
            FN(ErrorString),
            FN(SystemGetDriverVersion),
            FN(DeviceGetHandleByPciBusId_v2),
            FN(DeviceGetName),
            FN(DeviceGetVgpuHeterogeneousMode),
            FN(DeviceGetSupportedVgpus),
            FN(VgpuTypeGetName),
            FN(VgpuTypeGetFramebufferSize),
            FN(VgpuTypeGetMaxInstances),
            FN(DeviceGetVgpuTypeCreatablePlacements),
#undef FN
        };

        if (!t || !mnt || !lib) {
                fprintf(stderr, "# VGPU_SIM_MOUNT and VGPU_SIM_NVML must be set\n");
                free(t);
                return -1;
        }
        t->mnt = strdup(mnt);
        /* As vgpud loads the real library (NVML-1). */
        t->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!t->mnt || !t->dl) {
                fprintf(stderr, "# dlopen %s: %s\n", lib, dlerror());
                free(t->mnt);
                free(t);
                return -1;
        }
        for (size_t i = 0; i < ELEMENTSOF(functions); i++) {
                void *f = dlsym(t->dl, functions[i].name);
                if (!f) {
                        fprintf(stderr, "# %s missing from %s\n", functions[i].name, lib);
                        return -1;
                }
                memcpy((char *)&t->nvml + functions[i].offset, &f, sizeof(f));
        }
        *state = t;
        return 0;
}

int st_group_teardown(void **state)
{
        SimTest *t = *state;
        if (!t)
                return 0;
        if (t->dl)
                dlclose(t->dl);
        free(t->mnt);
        free(t);
        return 0;
}

void st_nvml_init(SimTest *t)
{
        _cleanup_free_ char *control = st_path(t, ".sim");
        assert_int_equal(setenv("VGPU_SIM_CONTROL", control, 1), 0);
        assert_int_equal(t->nvml.Init_v2(), NVML_SUCCESS);
}

nvmlDevice_t st_nvml_device(const SimTest *t, const char *pf)
{
        nvmlDevice_t d = NULL;
        nvmlReturn_t rc = t->nvml.DeviceGetHandleByPciBusId_v2(pf, &d);
        if (rc != NVML_SUCCESS)
                fail_msg("handle of %s: %s", pf, t->nvml.ErrorString(rc));
        assert_non_null(d);
        return d;
}
