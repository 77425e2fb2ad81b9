/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "sim-test.h"

#include <dlfcn.h>

uint64_t st_now_ms(void)
{
        return test_now() / NSEC_PER_MSEC;
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
        va_list ap;
        va_start(ap, fmt);
        char *path = test_sim_vpath(t->sim, fmt, ap);
        va_end(ap);
        assert_non_null(path);
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
        return test_write_once(path, value);
}

int st_try_read(const char *path, char **ret)
{
        return test_read_file(path, ret);
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
        va_list ap;
        va_start(ap, fmt);
        int r = test_sim_vctl(t->sim, fmt, ap);
        va_end(ap);
        return r;
}

void st_command(const SimTest *t, const char *fmt, ...)
{
        _cleanup_free_ char *command = NULL;
        va_list ap;
        va_start(ap, fmt);
        int k = vasprintf(&command, fmt, ap);
        va_end(ap);
        assert_true(k >= 0);
        int r = test_sim_ctl(t->sim, "%s", command);
        if (r < 0)
                fail_msg(".sim/ctl \"%s\": %s", command, strerror(-r));
}

char *st_ctl_result(const SimTest *t)
{
        char *s = NULL;
        int r = test_sim_ctl_result(t->sim, &s);
        if (r < 0)
                fail_msg("read .sim/ctl: %s", strerror(-r));
        return s;
}

json_t *st_state(const SimTest *t)
{
        json_t *j = NULL;
        int r = test_sim_state(t->sim, &j);
        if (r < 0)
                fail_msg("state.json: %s", strerror(-r));
        return j;
}

json_t *st_state_vf(json_t *state, const char *vf)
{
        json_t *v = test_sim_state_vf(state, vf);
        if (!v)
                fail_msg("VF %s not in state.json", vf);
        return v;
}

json_int_t st_state_vf_int(const SimTest *t, const char *vf, const char *key)
{
        json_int_t v = 0;
        int r = test_sim_vf_int(t->sim, vf, key, &v);
        if (r < 0)
                fail_msg("%s of VF %s: %s", key, vf, strerror(-r));
        return v;
}

void st_vf_mdev(const SimTest *t, const char *vf, char ret[static 37])
{
        int r = test_sim_vf_mdev(t->sim, vf, ret);
        if (r < 0)
                fail_msg("mdev of VF %s: %s", vf, strerror(-r));
}

int st_set_type(const SimTest *t, const char *vf, uint32_t type)
{
        return test_sim_set_type(t->sim, vf, type);
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
                        assert_int_equal(st_ctl(t, "release-lag %s 0", address), 0);
                }
        }
        assert_int_equal(test_sim_release_all(t->sim, 5 * NSEC_PER_SEC), 0);
        return 0;
}

SimTest *st_open(void)
{
        SimTest *t = calloc(1, sizeof(SimTest));
        assert_non_null(t);
        if (test_sim_open(&t->sim) < 0)
                fail_msg("VGPU_SIM_MOUNT is not set: run this through run-with-sim.sh");
        return t;
}

SimTest *st_close(SimTest *t)
{
        if (t) {
                if (t->dl)
                        dlclose(t->dl);
                test_sim_free(t->sim);
                free(t);
        }
        return NULL;
}

int st_group_setup(void **state)
{
        const char *lib = getenv("VGPU_SIM_NVML");
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

        if (!t || !lib || test_sim_open(&t->sim) < 0) {
                fprintf(stderr, "# VGPU_SIM_MOUNT and VGPU_SIM_NVML must be set\n");
                free(t);
                return -1;
        }
        /* As vgpud loads the real library (NVML-1). */
        t->dl = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
        if (!t->dl) {
                fprintf(stderr, "# dlopen %s: %s\n", lib, dlerror());
                test_sim_free(t->sim);
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
        st_close(*state);
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
