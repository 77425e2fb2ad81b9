/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The mounted simulator on the default host (SIM-20: a mixed-size and an equal-size L40S),
 * through its files and through the fake NVML library. Run by run-sim-test.sh.
 */
#include "sim-test.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#define MIXED_PF "0000:e3:00.0"
#define EQUAL_PF "0001:c8:00.0"

static char *vf_of(const char *pf, unsigned i)
{
        char a[PCI_ADDRESS_STRLEN];
        st_vf_address(pf, i, a);
        return strdup(a);
}

static char *creatable(const SimTest *t, const char *vf)
{
        _cleanup_free_ char *path = st_vf_attr(t, vf, "creatable_vgpu_types");
        return st_read(path);
}

/* ---- the tree (SIM-1, SIM-3, SIM-12) -----------------------------------------------------------
 */

static void test_tree(void **state)
{
        /* SIM-1, SIM-3, SIM-12 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(MIXED_PF, 5);
        _cleanup_free_ char *attr = st_vf_attr(t, vf, "current_vgpu_type");
        _cleanup_free_ char *physfn = st_path(t, "sys/bus/pci/devices/%s/physfn", vf);
        _cleanup_free_ char *group = st_path(t, "sys/bus/pci/devices/%s/iommu_group", vf);
        _cleanup_free_ char *version = st_path(t, "sys/module/nvidia/version");
        _cleanup_free_ char *total = st_path(t, "sys/bus/pci/devices/%s/sriov_totalvfs", MIXED_PF);
        _cleanup_free_ char *vendor = st_path(t, "sys/bus/pci/devices/%s/vendor", vf);
        _cleanup_free_ char *node = st_path(t, "dev/vfio/5");
        _cleanup_free_ char *cdev = st_path(t, "dev/vfio/devices/vfio5");
        _cleanup_free_ char *vfio_dev = st_path(t, "sys/bus/pci/devices/%s/vfio-dev/vfio5", vf);
        _cleanup_free_ char *mdev_bus = st_path(t, "sys/class/mdev_bus");
        _cleanup_free_ char *data = st_path(t, "data");
        char target[256];
        struct stat st;

        assert_int_equal(stat(attr, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_size, 4096);
        ssize_t n = readlink(physfn, target, sizeof(target) - 1);
        assert_true(n > 0);
        target[n] = 0;
        assert_string_equal(target, "../0000:e3:00.0");
        n = readlink(group, target, sizeof(target) - 1);
        assert_true(n > 0);
        target[n] = 0;
        assert_string_equal(target, "../../../kernel/iommu_groups/5");

        _cleanup_free_ char *v = st_read(version), *tv = st_read(total), *ve = st_read(vendor);
        assert_string_equal(v, "580.159.01\n");
        assert_string_equal(tv, "32\n");
        assert_string_equal(ve, "0x10de\n");

        assert_int_equal(stat(node, &st), 0);
        assert_true(S_ISREG(st.st_mode));
        assert_int_equal(st.st_mode & 0777, 0666);
        assert_int_equal(stat(cdev, &st), 0);
        assert_int_equal(stat(vfio_dev, &st), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(stat(mdev_bus, &st), 0);
        assert_int_equal(stat(data, &st), 0);
        assert_true(S_ISDIR(st.st_mode));

        /* Read-only attributes refuse writers, even root. */
        _cleanup_free_ char *types = st_vf_attr(t, vf, "creatable_vgpu_types");
        assert_int_equal(st_write(types, "1"), -EACCES);
}

/* ---- equal-size (SIM-7, SIM-8) -----------------------------------------------------------------
 */

static void test_equal_size_lists(void **state)
{
        /* SIM-7, SIM-8 */
        SimTest *t = *state;
        _cleanup_free_ char *vf0 = vf_of(EQUAL_PF, 0), *vf1 = vf_of(EQUAL_PF, 1),
                            *vf9 = vf_of(EQUAL_PF, 9);
        _cleanup_free_ char *all = creatable(t, vf1);

        assert_non_null(strstr(all, "1166  : NVIDIA L40S-48A\n"));
        assert_int_equal(st_set_type(t, vf0, 1148), 0); /* 2Q */
        _cleanup_free_ char *after_2q = creatable(t, vf1), *after_2q_far = creatable(t, vf9);
        static const char only_2gib[] = "ID    : vGPU Name\n"
                                        "1146  : NVIDIA L40S-2B\n"
                                        "1148  : NVIDIA L40S-2Q\n"
                                        "1158  : NVIDIA L40S-2A\n";
        assert_string_equal(after_2q, only_2gib);
        assert_string_equal(after_2q_far, only_2gib);
        _cleanup_free_ char *configured = creatable(t, vf0);
        assert_string_equal(configured, "ID    : vGPU Name\n");

        assert_int_equal(st_release(t, vf0), 0);
        assert_int_equal(st_set_type(t, vf0, 1156), 0); /* 48Q */
        for (unsigned i = 1; i < 32; i++) {
                _cleanup_free_ char *vf = vf_of(EQUAL_PF, i);
                _cleanup_free_ char *list = creatable(t, vf);
                assert_string_equal(list, "ID    : vGPU Name\n");
        }
        assert_int_equal(st_release(t, vf0), 0);
        _cleanup_free_ char *restored = creatable(t, vf1);
        assert_string_equal(restored, all);
}

/* ---- mixed-size, through the files and the fake NVML (SIM-17, SIM-18) --------------------------
 */

static size_t nvml_4q_placements(const SimTest *t, nvmlDevice_t d, unsigned *ids)
{
        unsigned max = 0;
        assert_int_equal(t->nvml.VgpuTypeGetMaxInstances(d, 1150, &max), NVML_SUCCESS);
        assert_int_equal(max, 12);
        nvmlVgpuPlacementList_t list = {
            .version = nvmlVgpuPlacementList_v2,
            .count = max,
            .placementIds = ids,
            .mode = NVML_VGPU_PGPU_HETEROGENEOUS_MODE,
        };
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(d, 1150, &list),
                         NVML_SUCCESS);
        assert_int_equal(list.placementSize, 4);
        return list.count;
}

static unsigned free_vfs_listing_4q(const SimTest *t, unsigned first_free)
{
        unsigned n = 0;
        for (unsigned i = first_free; i < 32; i++) {
                _cleanup_free_ char *vf = vf_of(MIXED_PF, i);
                _cleanup_free_ char *list = creatable(t, vf);
                if (strstr(list, "1150  : NVIDIA L40S-4Q\n"))
                        n++;
        }
        return n;
}

static void test_mixed_sequence(void **state)
{
        /* SIM-17, SIM-18, SIM-13 */
        SimTest *t = *state;
        unsigned next = 0, ids[64];

        st_nvml_init(t);
        nvmlDevice_t d = st_nvml_device(t, MIXED_PF);
        nvmlVgpuHeterogeneousMode_t mode = {.version = nvmlVgpuHeterogeneousMode_v1};
        assert_int_equal(t->nvml.DeviceGetVgpuHeterogeneousMode(d, &mode), NVML_SUCCESS);
        assert_int_equal(mode.mode, 1);

        for (int i = 0; i < 9; i++) {
                _cleanup_free_ char *vf = vf_of(MIXED_PF, next++);
                assert_int_equal(st_set_type(t, vf, 1150), 0);
                assert_int_equal(st_state_vf_int(t, vf, "placement"), i * 4);
        }
        static const struct {
                uint32_t type, slot;
                size_t free_4q;
                unsigned first_id;
                bool sysfs_lists_4q;
        } steps[] = {
            {1147, 36, 2, 40, true},  /* 10 vGPUs: not one of the checked steps */
            {1147, 37, 2, 40, true},  /* 11 */
            {1147, 38, 2, 40, false}, /* 12: sysfs hides 4Q, NVML still has two */
            {1150, 40, 1, 44, false}, /* 13 */
            {1150, 44, 0, 0, false},  /* 14 */
        };
        for (size_t s = 0; s < ELEMENTSOF(steps); s++) {
                _cleanup_free_ char *vf = vf_of(MIXED_PF, next++);
                /* The 4Q writes at 12 → 13 and 13 → 14 go through although no VF lists 4Q. */
                assert_int_equal(st_set_type(t, vf, steps[s].type), 0);
                assert_int_equal(st_state_vf_int(t, vf, "placement"), steps[s].slot);
                size_t n = nvml_4q_placements(t, d, ids);
                assert_int_equal(n, steps[s].free_4q);
                if (n > 0)
                        assert_int_equal(ids[0], steps[s].first_id);
                assert_int_equal(free_vfs_listing_4q(t, next),
                                 steps[s].sysfs_lists_4q ? 32 - next : 0);
        }
        _cleanup_free_ char *vf = vf_of(MIXED_PF, next);
        assert_int_equal(st_set_type(t, vf, 1150), -ENOSPC);

        /* No query overlapped a write: every call above ran between writes (PLACE-9). */
        json_auto_t *s = st_state(t);
        assert_int_equal(
            json_integer_value(json_object_get(json_array_get(json_object_get(s, "gpus"), 0),
                                               "query_write_overlaps")),
            0);
        assert_int_equal(t->nvml.Shutdown(), NVML_SUCCESS);
}

static void test_nvml_answers(void **state)
{
        /* SIM-13, NVML-3, NVML-8 */
        SimTest *t = *state;
        char name[NVML_DEVICE_NAME_BUFFER_SIZE];
        unsigned count = 0, ids[64];
        nvmlVgpuTypeId_t types[64];

        assert_int_equal(t->nvml.DeviceGetName(NULL, name, sizeof(name)), NVML_ERROR_UNINITIALIZED);
        assert_int_equal(unsetenv("VGPU_SIM_CONTROL"), 0);
        assert_int_equal(t->nvml.Init_v2(), NVML_ERROR_DRIVER_NOT_LOADED);
        st_nvml_init(t);

        char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
        assert_int_equal(t->nvml.SystemGetDriverVersion(version, sizeof(version)), NVML_SUCCESS);
        assert_string_equal(version, "580.159.01");
        assert_int_equal(t->nvml.SystemGetDriverVersion(version, 4), NVML_ERROR_INSUFFICIENT_SIZE);

        /* NVML's own spelling of the bus ID works too; a VF is no NVML device. */
        nvmlDevice_t d = st_nvml_device(t, MIXED_PF), same = NULL, vf = NULL;
        assert_int_equal(t->nvml.DeviceGetHandleByPciBusId_v2("00000000:E3:00.0", &same),
                         NVML_SUCCESS);
        assert_ptr_equal(d, same);
        assert_int_equal(t->nvml.DeviceGetHandleByPciBusId_v2("0000:e3:00.4", &vf),
                         NVML_ERROR_NOT_FOUND);
        assert_int_equal(t->nvml.DeviceGetHandleByPciBusId_v2("e3:00.0", &vf),
                         NVML_ERROR_INVALID_ARGUMENT);
        assert_int_equal(t->nvml.DeviceGetName(d, name, sizeof(name)), NVML_SUCCESS);
        assert_string_equal(name, "NVIDIA L40S");

        /* Supported types: size first, then the list. */
        assert_int_equal(t->nvml.DeviceGetSupportedVgpus(d, &count, NULL),
                         NVML_ERROR_INSUFFICIENT_SIZE);
        assert_int_equal(count, 22);
        assert_int_equal(t->nvml.DeviceGetSupportedVgpus(d, &count, types), NVML_SUCCESS);
        assert_int_equal(types[0], 1145);
        assert_int_equal(types[21], 1166);
        unsigned size = 4;
        assert_int_equal(t->nvml.VgpuTypeGetName(1150, name, &size), NVML_ERROR_INSUFFICIENT_SIZE);
        size = sizeof(name);
        assert_int_equal(t->nvml.VgpuTypeGetName(1150, name, &size), NVML_SUCCESS);
        assert_string_equal(name, "NVIDIA L40S-4Q");
        unsigned long long fb = 0;
        assert_int_equal(t->nvml.VgpuTypeGetFramebufferSize(1156, &fb), NVML_SUCCESS);
        assert_int_equal(fb, 48ULL << 30);
        assert_int_equal(t->nvml.VgpuTypeGetFramebufferSize(77, &fb), NVML_ERROR_INVALID_ARGUMENT);

        /* 1Q has 48 placements but at most 32 instances: the buffer is too small once. */
        unsigned max = 0;
        assert_int_equal(t->nvml.VgpuTypeGetMaxInstances(d, 1147, &max), NVML_SUCCESS);
        assert_int_equal(max, 32);
        nvmlVgpuPlacementList_t list = {
            .version = nvmlVgpuPlacementList_v2, .count = max, .placementIds = ids};
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(d, 1147, &list),
                         NVML_ERROR_INSUFFICIENT_SIZE);
        assert_int_equal(list.count, 48);
        assert_int_equal(list.placementSize, 1);
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(d, 1147, &list),
                         NVML_SUCCESS);
        assert_int_equal(ids[47], 47);

        /* Wrong version words and the homogeneous constant are refused. */
        list = (nvmlVgpuPlacementList_t){.version = 0x01000020, .count = 64, .placementIds = ids};
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(d, 1147, &list),
                         NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
        list = (nvmlVgpuPlacementList_t){.version = nvmlVgpuPlacementList_v2,
                                         .count = 64,
                                         .placementIds = ids,
                                         .mode = NVML_VGPU_PGPU_HOMOGENEOUS_MODE};
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(d, 1147, &list),
                         NVML_ERROR_INVALID_ARGUMENT);
        nvmlVgpuHeterogeneousMode_t mode = {.version = 8};
        assert_int_equal(t->nvml.DeviceGetVgpuHeterogeneousMode(d, &mode),
                         NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

        /* An equal-size card: mode 0, and no placements (SIM-13). */
        nvmlDevice_t e = st_nvml_device(t, EQUAL_PF);
        mode = (nvmlVgpuHeterogeneousMode_t){.version = nvmlVgpuHeterogeneousMode_v1, .mode = 7};
        assert_int_equal(t->nvml.DeviceGetVgpuHeterogeneousMode(e, &mode), NVML_SUCCESS);
        assert_int_equal(mode.mode, 0);
        list = (nvmlVgpuPlacementList_t){
            .version = nvmlVgpuPlacementList_v2, .count = 64, .placementIds = ids};
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(e, 1150, &list),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_string_equal(t->nvml.ErrorString(NVML_ERROR_NOT_SUPPORTED), "Not Supported");

        assert_int_equal(t->nvml.Shutdown(), NVML_SUCCESS);
        assert_int_equal(t->nvml.DeviceGetName(d, name, sizeof(name)), NVML_ERROR_UNINITIALIZED);
}

/* ---- NVML control: errors, latency, hang (SIM-14) ---------------------------------------------
 */

typedef struct NvmlCall {
        const SimTest *t;
        nvmlDevice_t d;
        atomic_bool done;
        nvmlReturn_t rc;
} NvmlCall;

static void *call_get_name(void *arg)
{
        NvmlCall *c = arg;
        char name[NVML_DEVICE_NAME_BUFFER_SIZE];
        c->rc = c->t->nvml.DeviceGetName(c->d, name, sizeof(name));
        atomic_store(&c->done, true);
        return NULL;
}

static bool call_finished(const SimTest *t, const void *arg)
{
        return atomic_load(&((const NvmlCall *)arg)->done);
}

static bool query_in_flight(const SimTest *t, const void *pf)
{
        json_auto_t *s = st_state(t);
        size_t i;
        json_t *gpu;
        json_array_foreach (json_object_get(s, "gpus"), i, gpu) {
                if (streq(json_string_value(json_object_get(gpu, "address")), pf))
                        return json_array_size(json_object_get(gpu, "queries_in_flight")) > 0;
        }
        return false;
}

static void test_nvml_control(void **state)
{
        /* SIM-13, SIM-14 */
        SimTest *t = *state;
        char name[NVML_DEVICE_NAME_BUFFER_SIZE];

        st_nvml_init(t);
        nvmlDevice_t d = st_nvml_device(t, MIXED_PF);

        /* A counted error is used up; an unlimited one stays until cleared. */
        assert_int_equal(st_ctl(t, "nvml error nvmlDeviceGetName GPU_IS_LOST count=2"), 0);
        assert_int_equal(t->nvml.DeviceGetName(d, name, sizeof(name)), NVML_ERROR_GPU_IS_LOST);
        assert_int_equal(t->nvml.DeviceGetName(d, name, sizeof(name)), NVML_ERROR_GPU_IS_LOST);
        assert_int_equal(t->nvml.DeviceGetName(d, name, sizeof(name)), NVML_SUCCESS);
        assert_int_equal(st_ctl(t, "nvml error nvmlDeviceGetVgpuTypeCreatablePlacements 999"), 0);
        nvmlVgpuPlacementList_t list = {.version = nvmlVgpuPlacementList_v2};
        for (int i = 0; i < 3; i++)
                assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(d, 1150, &list),
                                 NVML_ERROR_UNKNOWN);
        assert_int_equal(st_ctl(t, "nvml error nvmlDeviceGetVgpuTypeCreatablePlacements 0"), 0);
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(d, 1150, &list),
                         NVML_ERROR_INSUFFICIENT_SIZE);

        /* Latency applies to every call. */
        assert_int_equal(st_ctl(t, "nvml latency 150"), 0);
        uint64_t start = st_now_ms();
        assert_int_equal(t->nvml.DeviceGetName(d, name, sizeof(name)), NVML_SUCCESS);
        assert_true(st_now_ms() - start >= 150);
        assert_int_equal(st_ctl(t, "nvml latency 0"), 0);

        /* A hang holds the call until `nvml hang off`, and nothing else. */
        assert_int_equal(st_ctl(t, "nvml hang on"), 0);
        NvmlCall call = {.t = t, .d = d};
        pthread_t thread;
        assert_int_equal(pthread_create(&thread, NULL, call_get_name, &call), 0);
        /* The call announces itself to the simulator before it starts waiting. */
        assert_true(st_poll(query_in_flight, t, MIXED_PF, 5000));
        assert_false(atomic_load(&call.done));
        _cleanup_free_ char *current = st_vf_attr(t, "0000:e3:00.4", "current_vgpu_type");
        _cleanup_free_ char *value = st_read(current);
        assert_string_equal(value, "0\n");
        assert_int_equal(st_ctl(t, "nvml hang off"), 0);
        assert_true(st_poll(call_finished, t, &call, 5000));
        pthread_join(thread, NULL);
        assert_int_equal(call.rc, NVML_SUCCESS);
        assert_false(query_in_flight(t, MIXED_PF));

        /* An error on nvmlInit_v2 fails initialisation itself (NVML-2). */
        assert_int_equal(t->nvml.Shutdown(), NVML_SUCCESS);
        assert_int_equal(st_ctl(t, "nvml error nvmlInit_v2 LIB_RM_VERSION_MISMATCH count=1"), 0);
        assert_int_equal(t->nvml.Init_v2(), NVML_ERROR_LIB_RM_VERSION_MISMATCH);
        assert_int_equal(t->nvml.Init_v2(), NVML_SUCCESS);
        assert_int_equal(t->nvml.Shutdown(), NVML_SUCCESS);
}

static struct timespec state_mtime(const SimTest *t)
{
        _cleanup_free_ char *path = st_path(t, ".sim/state.json");
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        return st.st_mtim;
}

static bool mtime_equal(struct timespec a, struct timespec b)
{
        return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

static bool mtime_later(struct timespec a, struct timespec b)
{
        return a.tv_sec > b.tv_sec || (a.tv_sec == b.tv_sec && a.tv_nsec > b.tv_nsec);
}

static void test_state_mtime(void **state)
{
        /* SIM-13, SIM-14: what lets the fake NVML keep its parsed model between calls */
        SimTest *t = *state;
        const char *vf = "0000:e3:00.4";

        /* The query markers move nothing; every other command and every store does. */
        struct timespec before = state_mtime(t);
        assert_int_equal(st_ctl(t, "nvml query-begin %s mtime-1", MIXED_PF), 0);
        assert_int_equal(st_ctl(t, "nvml query-end %s mtime-1", MIXED_PF), 0);
        assert_true(mtime_equal(state_mtime(t), before));
        assert_int_equal(st_ctl(t, "nvml latency 0"), 0);
        struct timespec after_ctl = state_mtime(t);
        assert_true(mtime_later(after_ctl, before));
        _cleanup_free_ char *current = st_vf_attr(t, vf, "current_vgpu_type");
        assert_int_equal(st_write(current, "1150"), 0);
        struct timespec after_store = state_mtime(t);
        assert_true(mtime_later(after_store, after_ctl));

        /* The library's answers follow each change at once: a store, then a mode switch. */
        st_nvml_init(t);
        nvmlDevice_t d = st_nvml_device(t, EQUAL_PF);
        nvmlVgpuHeterogeneousMode_t mode = {.version = nvmlVgpuHeterogeneousMode_v1};
        assert_int_equal(t->nvml.DeviceGetVgpuHeterogeneousMode(d, &mode), NVML_SUCCESS);
        assert_int_equal(mode.mode, 0);
        assert_int_equal(st_ctl(t, "mode %s mixed", EQUAL_PF), 0);
        assert_int_equal(t->nvml.DeviceGetVgpuHeterogeneousMode(d, &mode), NVML_SUCCESS);
        assert_int_equal(mode.mode, 1);
        nvmlDevice_t m = st_nvml_device(t, MIXED_PF);
        unsigned ids[64];
        nvmlVgpuPlacementList_t list = {.version = nvmlVgpuPlacementList_v2,
                                        .count = 64,
                                        .placementIds = ids,
                                        .mode = NVML_VGPU_PGPU_HETEROGENEOUS_MODE};
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(m, 1150, &list),
                         NVML_SUCCESS);
        unsigned with_one = list.count;
        assert_int_equal(st_write(current, "0"), 0);
        list.count = 64;
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(m, 1150, &list),
                         NVML_SUCCESS);
        assert_int_equal(list.count, with_one + 1);
        assert_int_equal(st_ctl(t, "mode %s equal", EQUAL_PF), 0);
        assert_int_equal(t->nvml.Shutdown(), NVML_SUCCESS);
}

/* ---- refused writes (SIM-11) -------------------------------------------------------------------
 */

static void test_refused_writes(void **state)
{
        /* SIM-11 */
        SimTest *t = *state;
        _cleanup_free_ char *vf0 = vf_of(EQUAL_PF, 0), *vf1 = vf_of(EQUAL_PF, 1);
        _cleanup_free_ char *path = st_vf_attr(t, vf0, "current_vgpu_type");

        assert_int_equal(st_write(path, "abc"), -EINVAL);
        assert_int_equal(st_write(path, "12a"), -EINVAL);
        assert_int_equal(st_write(path, "9999"), -EINVAL); /* not an L40S type */
        assert_int_equal(st_write(path, "0"), 0);          /* 0 on a free VF */

        /* As a shell does it: O_TRUNC, then a value with a newline. */
        _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "1156\n", 5), 5);
        close(TAKE_FD(fd));
        _cleanup_free_ char *value = st_read(path);
        assert_string_equal(value, "1156\n");

        assert_int_equal(st_write(path, "1156"), 0);          /* the same again */
        assert_int_equal(st_set_type(t, vf0, 1150), -EBUSY);  /* another type */
        assert_int_equal(st_set_type(t, vf1, 1156), -ENOSPC); /* 48Q: the one is taken */
        assert_int_equal(st_set_type(t, vf1, 1150), -EINVAL); /* another size */
        assert_int_equal(st_release(t, vf0), 0);
        for (unsigned i = 0; i < 12; i++) {
                _cleanup_free_ char *vf = vf_of(EQUAL_PF, i);
                assert_int_equal(st_set_type(t, vf, 1160), 0); /* 4A, maximum 12 */
        }
        _cleanup_free_ char *vf12 = vf_of(EQUAL_PF, 12);
        assert_int_equal(st_set_type(t, vf12, 1150), -ENOSPC);
}

/* ---- forbidden writes (SIM-16) -----------------------------------------------------------------
 */

static void test_forbidden_writes(void **state)
{
        /* SIM-16 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(MIXED_PF, 3);
        char *paths[] = {
            st_path(t, "sys/bus/pci/devices/%s/sriov_numvfs", MIXED_PF),
            st_path(t, "sys/bus/pci/devices/%s/driver/unbind", vf),
            st_path(t, "sys/bus/pci/devices/%s/driver_override", vf),
            st_path(t, "sys/bus/pci/devices/%s/remove", vf),
            st_path(t, "sys/bus/pci/devices/%s/reset", MIXED_PF),
        };
        _cleanup_free_ char *log = st_path(t, ".sim/forbidden-writes");
        _cleanup_free_ char *before = st_read(log);

        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                assert_int_equal(st_write(paths[i], "1"), -EPERM);
                free(paths[i]);
        }
        _cleanup_free_ char *after = st_read(log), *expected = NULL;
        assert_int_equal(strprintf(&expected,
                                   "%ssys/devices/pci0000:e3/0000:e3:00.0/sriov_numvfs\n"
                                   "sys/bus/pci/drivers/nvidia/unbind\n"
                                   "sys/devices/pci0000:e3/%s/driver_override\n"
                                   "sys/devices/pci0000:e3/%s/remove\n"
                                   "sys/devices/pci0000:e3/0000:e3:00.0/reset\n",
                                   before, vf, vf),
                         0);
        assert_string_equal(after, expected);
        json_auto_t *s = st_state(t);
        size_t lines = 0;
        for (const char *c = after; *c; c++)
                lines += *c == '\n';
        assert_int_equal(json_array_size(json_object_get(s, "forbidden_writes")), lines);
}

/* ---- VFIO handles and release lag (SIM-11, SIM-12, SIM-14) -------------------------------------
 */

static bool open_handles_zero(const SimTest *t, const void *vf)
{
        return st_state_vf_int(t, vf, "open_handles") == 0;
}

static void test_vfio_open_counting(void **state)
{
        /* SIM-11, SIM-12, DEV-12 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(MIXED_PF, 7);
        json_int_t group = st_state_vf_int(t, vf, "iommu_group");
        json_int_t vfio = st_state_vf_int(t, vf, "vfio");
        _cleanup_free_ char *group_node = st_path(t, "dev/vfio/%" JSON_INTEGER_FORMAT, group);
        _cleanup_free_ char *cdev = st_path(t, "dev/vfio/devices/vfio%" JSON_INTEGER_FORMAT, vfio);

        assert_int_equal(st_set_type(t, vf, 1148), 0);
        int a = open(group_node, O_RDWR | O_CLOEXEC);
        int b = open(cdev, O_RDWR | O_CLOEXEC);
        assert_true(a >= 0 && b >= 0);
        assert_int_equal(st_state_vf_int(t, vf, "open_handles"), 2);
        assert_int_equal(st_set_type(t, vf, 0), -EBUSY);
        close(a);
        /* Still refused with the other node open. */
        assert_int_equal(st_set_type(t, vf, 0), -EBUSY);
        close(b);
        assert_true(st_poll(open_handles_zero, t, vf, 5000));
        assert_int_equal(st_set_type(t, vf, 0), 0);
}

static void test_release_lag(void **state)
{
        /* SIM-14 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(MIXED_PF, 8);
        _cleanup_free_ char *node =
            st_path(t, "dev/vfio/%" JSON_INTEGER_FORMAT, st_state_vf_int(t, vf, "iommu_group"));

        assert_int_equal(st_ctl(t, "release-lag %s 1500", vf), 0);
        assert_int_equal(st_set_type(t, vf, 1148), 0);
        /* Without a close there is no lag. */
        int fd = open(node, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        close(fd);
        assert_true(st_poll(open_handles_zero, t, vf, 5000));
        uint64_t closed = st_now_ms();
        assert_int_equal(st_set_type(t, vf, 0), -EBUSY);
        assert_int_equal(st_release(t, vf), 0);
        assert_true(st_now_ms() - closed >= 1000);
}

/* ---- faults (SIM-14) ---------------------------------------------------------------------------
 */

typedef struct Writer {
        char *path;
        const char *value;
        atomic_bool done;
        int r;
} Writer;

static void *do_write(void *arg)
{
        Writer *w = arg;
        w->r = st_write(w->path, w->value);
        atomic_store(&w->done, true);
        return NULL;
}

static bool writer_done(const SimTest *t, const void *arg)
{
        return atomic_load(&((const Writer *)arg)->done);
}

static void test_fault_errno_and_count(void **state)
{
        /* SIM-14 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(MIXED_PF, 9);
        _cleanup_free_ char *path = st_vf_attr(t, vf, "current_vgpu_type");
        char *s = NULL;

        assert_int_equal(st_ctl(t,
                                "fault read sys/bus/pci/devices/%s/nvidia/current_vgpu_type "
                                "EIO count=2",
                                vf),
                         0);
        assert_int_equal(st_try_read(path, &s), -EIO);
        assert_int_equal(st_try_read(path, &s), -EIO);
        _cleanup_free_ char *ok = st_read(path);
        assert_string_equal(ok, "0\n");

        /* A failed write leaves the model alone. */
        assert_int_equal(st_ctl(t, "fault write */%s/nvidia/* ENOSPC", vf), 0);
        assert_int_equal(st_set_type(t, vf, 1148), -ENOSPC);
        assert_int_equal(st_set_type(t, vf, 1148), -ENOSPC);
        assert_int_equal(st_state_vf_int(t, vf, "type"), 0);
        /* Opens and directory listings fail too. */
        assert_int_equal(
            st_ctl(t, "fault open sys/bus/pci/devices/%s/nvidia/creatable* EACCES", vf), 0);
        _cleanup_free_ char *types = st_vf_attr(t, vf, "creatable_vgpu_types");
        assert_int_equal(st_try_read(types, &s), -EACCES);
        assert_int_equal(st_ctl(t, "clear-faults"), 0);
        assert_int_equal(st_set_type(t, vf, 1148), 0);
        json_auto_t *state_json = st_state(t);
        assert_int_equal(json_array_size(json_object_get(state_json, "faults")), 0);
}

static void test_fault_delay(void **state)
{
        /* SIM-14 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(MIXED_PF, 10);
        _cleanup_free_ char *path = st_vf_attr(t, vf, "current_vgpu_type");

        assert_int_equal(st_ctl(t, "fault write sys/bus/pci/devices/%s/* delay:300 count=1", vf),
                         0);
        uint64_t start = st_now_ms();
        assert_int_equal(st_write(path, "1148"), 0);
        assert_true(st_now_ms() - start >= 300);
        assert_int_equal(st_state_vf_int(t, vf, "type"), 1148);
        start = st_now_ms();
        assert_int_equal(st_release(t, vf), 0);
        assert_true(st_now_ms() - start < 300);
}

static bool one_operation_delayed(const SimTest *t, const void *arg)
{
        json_auto_t *s = st_state(t);
        return json_integer_value(json_object_get(s, "operations_delayed")) == 1;
}

static void test_fault_hang(void **state)
{
        /* SIM-14, DEV-11 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(MIXED_PF, 11), *other = vf_of(MIXED_PF, 12);
        Writer w = {.path = st_vf_attr(t, vf, "current_vgpu_type"), .value = "1148"};
        pthread_t thread;

        assert_int_equal(st_ctl(t, "fault write sys/bus/pci/devices/%s/nvidia/* hang", vf), 0);
        assert_int_equal(pthread_create(&thread, NULL, do_write, &w), 0);
        assert_true(st_poll(one_operation_delayed, t, NULL, 5000));
        assert_false(atomic_load(&w.done));
        /* Other files still work while one write hangs. */
        assert_int_equal(st_set_type(t, other, 1148), 0);
        assert_int_equal(st_state_vf_int(t, vf, "writes_in_flight"), 1);
        assert_int_equal(st_state_vf_int(t, vf, "type"), 0);
        assert_int_equal(st_ctl(t, "clear-faults"), 0);
        assert_true(st_poll(writer_done, t, &w, 5000));
        pthread_join(thread, NULL);
        assert_int_equal(w.r, 0); /* the hung call returns and does its work */
        assert_int_equal(st_state_vf_int(t, vf, "type"), 1148);
        assert_int_equal(st_state_vf_int(t, vf, "writes_in_flight"), 0);
        assert_int_equal(st_state_vf_int(t, vf, "max_concurrent_writes"), 1);
        free(w.path);
}

static void test_fault_data(void **state)
{
        /* SIM-12, SIM-14, REL-3 */
        SimTest *t = *state;
        _cleanup_free_ char *dir = st_path(t, "data/gpu");
        WriteStep step;

        assert_true(mkdir(dir, 0755) == 0 || errno == EEXIST);
        _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(dfd >= 0);

        /* The crash-safe write of STYLE rule 12 works on data/. */
        assert_int_equal(write_file_atomic_at(dfd, "state.json", "{}\n", 3, 0644, &step), 0);
        _cleanup_free_ char *file = st_path(t, "data/gpu/state.json"), *text = st_read(file);
        assert_string_equal(text, "{}\n");
        struct stat st;
        assert_int_equal(stat(file, &st), 0);
        assert_int_equal(st.st_mode & 0777, 0644);

        static const struct {
                const char *fault;
                WriteStep step;
                int error;
        } cases[] = {
            {"fault open data/gpu/*.tmp EACCES count=1", WRITE_STEP_CREATE, -EACCES},
            {"fault write data/gpu/* ENOSPC count=1", WRITE_STEP_WRITE, -ENOSPC},
            {"fault fsync data/gpu/state.json.tmp EIO count=1", WRITE_STEP_SYNC, -EIO},
            {"fault rename data/gpu/state.json EIO count=1", WRITE_STEP_RENAME, -EIO},
            {"fault fsync data/gpu EIO count=1", WRITE_STEP_SYNC_DIR, -EIO},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                assert_int_equal(st_ctl(t, "%s", cases[i].fault), 0);
                assert_int_equal(write_file_atomic_at(dfd, "state.json", "[]\n", 3, 0644, &step),
                                 cases[i].error);
                assert_int_equal(step, cases[i].step);
        }
        /* Only the last failure came after the rename, so only it replaced the file. */
        _cleanup_free_ char *kept = st_read(file);
        assert_string_equal(kept, "[]\n");
        _cleanup_free_ char *tmp = st_path(t, "data/gpu/state.json.tmp");
        assert_int_equal(access(tmp, F_OK), -1);
        assert_int_equal(unlink(file), 0);
        assert_int_equal(rmdir(dir), 0);
}

/* A data/ file replaced while open: libfuse passes no path for it (hard_remove). */
static void test_data_replaced_while_open(void **state)
{
        /* SIM-12, SIM-14: the read is answered from the handle, and no fault glob names it */
        SimTest *t = *state;
        _cleanup_free_ char *dir = st_path(t, "data/gpu");
        _cleanup_free_ char *file = st_path(t, "data/gpu/open.json");
        _cleanup_free_ char *next = st_path(t, "data/gpu/open.json.next");
        assert_true(mkdir(dir, 0755) == 0 || errno == EEXIST);
        _cleanup_close_ int w = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(w >= 0);
        assert_int_equal(write(w, "old\n", 4), 4);
        _cleanup_close_ int fd = open(file, O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        _cleanup_close_ int w2 = open(next, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        assert_true(w2 >= 0);
        assert_int_equal(write(w2, "new\n", 4), 4);
        assert_int_equal(rename(next, file), 0);

        assert_int_equal(st_ctl(t, "fault read data/* EIO"), 0);
        char buf[8] = {0};
        assert_int_equal(pread(fd, buf, sizeof buf - 1, 0), 4); /* no path, so no fault */
        assert_string_equal(buf, "old\n");
        assert_int_equal(st_ctl(t, "clear-faults"), 0);
        assert_int_equal(unlink(file), 0);
        assert_int_equal(rmdir(dir), 0);
}

/* ---- control (SIM-14) --------------------------------------------------------------------------
 */

static void test_mode_switch(void **state)
{
        /* SIM-14 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(EQUAL_PF, 4);

        assert_int_equal(st_set_type(t, vf, 1150), 0);
        assert_int_equal(st_ctl(t, "mode %s mixed", EQUAL_PF), -EBUSY);
        _cleanup_free_ char *result = st_ctl_result(t);
        assert_string_equal(result, "EBUSY: GPU 0001:c8:00.0 holds 1 vGPU(s)\n");
        assert_int_equal(st_release(t, vf), 0);
        assert_int_equal(st_ctl(t, "mode %s mixed", EQUAL_PF), 0);
        _cleanup_free_ char *ok = st_ctl_result(t);
        assert_string_equal(ok, "ok\n");

        st_nvml_init(t);
        nvmlDevice_t d = st_nvml_device(t, EQUAL_PF);
        nvmlVgpuHeterogeneousMode_t mode = {.version = nvmlVgpuHeterogeneousMode_v1};
        assert_int_equal(t->nvml.DeviceGetVgpuHeterogeneousMode(d, &mode), NVML_SUCCESS);
        assert_int_equal(mode.mode, 1);
        assert_int_equal(t->nvml.Shutdown(), NVML_SUCCESS);
        assert_int_equal(st_ctl(t, "mode %s equal", EQUAL_PF), 0);
}

static void test_ctl_errors_and_qemu(void **state)
{
        /* SIM-14, SIM-15 */
        SimTest *t = *state;
        _cleanup_free_ char *ctl = st_path(t, ".sim/ctl");

        assert_int_equal(st_ctl(t, "frobnicate"), -EINVAL);
        _cleanup_free_ char *result = st_ctl_result(t);
        assert_string_equal(result, "EINVAL: unknown command \"frobnicate\"\n");
        assert_int_equal(st_ctl(t, "wedge 0000:e3:09.9"), -ENOENT);
        assert_int_equal(st_ctl(t, "clear-faults\nclear-faults"), -EINVAL);

        /* A handle reads back the result of its own command. */
        _cleanup_close_ int fd = open(ctl, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, "wedge 0000:e3:00.4", 18), 18);
        char buf[64] = {};
        assert_true(pread(fd, buf, sizeof(buf) - 1, 0) > 0);
        assert_string_equal(buf, "ok\n");
        json_auto_t *s = st_state(t);
        assert_true(json_is_true(json_object_get(st_state_vf(s, "0000:e3:00.4"), "wedged")));
        assert_int_equal(st_ctl(t, "unwedge 0000:e3:00.4"), 0);

        assert_int_equal(st_ctl(t, "qemu render-01 ignore-sigterm"), 0);
        assert_int_equal(st_ctl(t, "qemu render-01 exit-early:250"), 0);
        _cleanup_free_ char *flags_path = st_path(t, ".sim/qemu/render-01");
        _cleanup_free_ char *flags = st_read(flags_path);
        assert_string_equal(flags, "ignore-sigterm\nexit-early:250\n");
        _cleanup_free_ char *missing = st_path(t, ".sim/qemu/nobody");
        char *m = NULL;
        assert_int_equal(st_try_read(missing, &m), -ENOENT);
}

static void test_state_matches_sysfs(void **state)
{
        /* SIM-14 */
        SimTest *t = *state;
        _cleanup_free_ char *a = vf_of(MIXED_PF, 13), *b = vf_of(EQUAL_PF, 20);
        json_auto_t *s = NULL;
        size_t i, k;
        json_t *gpu, *vf;
        char target[256];

        assert_int_equal(st_set_type(t, a, 1152), 0);
        assert_int_equal(st_set_type(t, b, 1146), 0);
        s = st_state(t);
        assert_int_equal(json_array_size(json_object_get(s, "gpus")), 2);
        json_array_foreach (json_object_get(s, "gpus"), i, gpu) {
                json_array_foreach (json_object_get(gpu, "vfs"), k, vf) {
                        const char *address = json_string_value(json_object_get(vf, "address"));
                        _cleanup_free_ char *cur = st_vf_attr(t, address, "current_vgpu_type");
                        _cleanup_free_ char *value = st_read(cur), *expected = NULL;
                        assert_int_equal(strprintf(&expected, "%" JSON_INTEGER_FORMAT "\n",
                                                   json_integer_value(json_object_get(vf, "type"))),
                                         0);
                        assert_string_equal(value, expected);
                        _cleanup_free_ char *link =
                            st_path(t, "sys/bus/pci/devices/%s/iommu_group", address);
                        ssize_t n = readlink(link, target, sizeof(target) - 1);
                        assert_true(n > 0);
                        target[n] = 0;
                        assert_int_equal(strtol(strrchr(target, '/') + 1, NULL, 10),
                                         json_integer_value(json_object_get(vf, "iommu_group")));
                }
        }
        json_t *va = st_state_vf(s, a);
        assert_string_equal(json_string_value(json_object_get(va, "profile")), "NVIDIA L40S-8Q");
}

static void test_concurrent_writes_recorded(void **state)
{
        /* DEV-11 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(MIXED_PF, 14);
        _cleanup_free_ char *path = st_vf_attr(t, vf, "current_vgpu_type");

        assert_int_equal(st_set_type(t, vf, 1148), 0);
        assert_int_equal(st_release(t, vf), 0);
        assert_int_equal(st_state_vf_int(t, vf, "max_concurrent_writes"), 1);
        /* Two writers open at once are what DEV-11 forbids; the simulator must see them. */
        int a = open(path, O_WRONLY | O_CLOEXEC), b = open(path, O_WRONLY | O_CLOEXEC);
        assert_true(a >= 0 && b >= 0);
        assert_int_equal(st_state_vf_int(t, vf, "writes_in_flight"), 2);
        close(a);
        close(b);
        assert_int_equal(st_state_vf_int(t, vf, "writes_in_flight"), 0);
        assert_int_equal(st_state_vf_int(t, vf, "max_concurrent_writes"), 2);
}

static json_int_t overlaps(const SimTest *t, const char *pf)
{
        json_auto_t *s = st_state(t);
        size_t i;
        json_t *gpu;
        json_array_foreach (json_object_get(s, "gpus"), i, gpu) {
                if (streq(json_string_value(json_object_get(gpu, "address")), pf))
                        return json_integer_value(json_object_get(gpu, "query_write_overlaps"));
        }
        fail_msg("no GPU %s", pf);
        return -1;
}

static void test_query_write_overlap(void **state)
{
        /* PLACE-9 */
        SimTest *t = *state;
        _cleanup_free_ char *vf = vf_of(MIXED_PF, 15);
        Writer w = {.path = st_vf_attr(t, vf, "current_vgpu_type"), .value = "1148"};
        char name[NVML_DEVICE_NAME_BUFFER_SIZE];
        pthread_t thread;

        st_nvml_init(t);
        nvmlDevice_t mixed = st_nvml_device(t, MIXED_PF), equal = st_nvml_device(t, EQUAL_PF);
        json_int_t before = overlaps(t, MIXED_PF), before_equal = overlaps(t, EQUAL_PF);

        /* A query between writes does not count. */
        assert_int_equal(st_set_type(t, vf, 1148), 0);
        assert_int_equal(t->nvml.DeviceGetName(mixed, name, sizeof(name)), NVML_SUCCESS);
        assert_int_equal(st_release(t, vf), 0);
        assert_int_equal(overlaps(t, MIXED_PF), before);

        /* A query while a write to one of the GPU's VFs is held open counts once. */
        assert_int_equal(st_ctl(t, "fault write sys/bus/pci/devices/%s/nvidia/* hang", vf), 0);
        assert_int_equal(pthread_create(&thread, NULL, do_write, &w), 0);
        assert_true(st_poll(one_operation_delayed, t, NULL, 5000));
        assert_int_equal(t->nvml.DeviceGetName(mixed, name, sizeof(name)), NVML_SUCCESS);
        assert_int_equal(t->nvml.DeviceGetName(equal, name, sizeof(name)), NVML_SUCCESS);
        assert_int_equal(st_ctl(t, "clear-faults"), 0);
        assert_true(st_poll(writer_done, t, &w, 5000));
        pthread_join(thread, NULL);
        assert_int_equal(w.r, 0);
        assert_int_equal(overlaps(t, MIXED_PF), before + 1);
        assert_int_equal(overlaps(t, EQUAL_PF), before_equal);
        assert_int_equal(t->nvml.Shutdown(), NVML_SUCCESS);
        free(w.path);
}

/* ---- SR-IOV cycles (SIM-14) --------------------------------------------------------------------
 */

/* Entries of a directory, without "." and ".."; fails the test when it cannot be listed. */
static size_t count_entries(const char *path)
{
        _cleanup_closedir_ DIR *d = opendir(path);
        size_t n = 0;
        if (!d)
                fail_msg("opendir %s: %m", path);
        for (struct dirent *de; (de = readdir(d));)
                if (!streq(de->d_name, ".") && !streq(de->d_name, ".."))
                        n++;
        return n;
}

static bool has_entry(const char *dir, const char *prefix)
{
        _cleanup_closedir_ DIR *d = opendir(dir);
        if (!d)
                fail_msg("opendir %s: %m", dir);
        for (struct dirent *de; (de = readdir(d));)
                if (startswith(de->d_name, prefix))
                        return true;
        return false;
}

static void assert_gone(const char *path)
{
        struct stat st;
        if (lstat(path, &st) == 0 || errno != ENOENT)
                fail_msg("%s is still there (%m)", path);
}

/* The PF's entry in state.json (borrowed from state). */
static json_t *state_gpu(json_t *state, const char *pf)
{
        size_t i;
        json_t *gpu;
        json_array_foreach (json_object_get(state, "gpus"), i, gpu) {
                if (streq(json_string_value(json_object_get(gpu, "address")), pf))
                        return gpu;
        }
        fail_msg("no GPU %s in state.json", pf);
        return NULL;
}

static int nvml_mode(const SimTest *t, nvmlDevice_t d)
{
        nvmlVgpuHeterogeneousMode_t mode = {.version = nvmlVgpuHeterogeneousMode_v1, .mode = 7};
        assert_int_equal(t->nvml.DeviceGetVgpuHeterogeneousMode(d, &mode), NVML_SUCCESS);
        return (int)mode.mode;
}

/* Brings every PF's VFs back and the SIM-20 modes with them, whatever the test left. */
static int sriov_teardown(void **state)
{
        SimTest *t = *state;
        assert_int_equal(st_ctl(t, "sriov %s on", MIXED_PF), 0);
        assert_int_equal(st_ctl(t, "sriov %s on", EQUAL_PF), 0);
        st_reset(state);
        assert_int_equal(st_ctl(t, "mode %s mixed", MIXED_PF), 0);
        assert_int_equal(st_ctl(t, "mode %s equal", EQUAL_PF), 0);
        return 0;
}

static void test_sriov_cycle(void **state)
{
        /* SIM-14, SIM-3, SIM-13: `sriov <pf> off|on` as the FUSE tree and the fake NVML show it */
        SimTest *t = *state;
        _cleanup_free_ char *vf0 = vf_of(MIXED_PF, 0), *vf2 = vf_of(MIXED_PF, 2),
                            *vf3 = vf_of(MIXED_PF, 3), *last = vf_of(MIXED_PF, 31);
        _cleanup_free_ char *devices = st_path(t, "sys/bus/pci/devices");
        _cleanup_free_ char *pf_dir = st_path(t, "sys/bus/pci/devices/%s/", MIXED_PF);
        _cleanup_free_ char *numvfs = st_path(t, "sys/bus/pci/devices/%s/sriov_numvfs", MIXED_PF);
        _cleanup_free_ char *vf_dir = st_path(t, "sys/devices/pci0000:e3/%s", vf2);
        _cleanup_free_ char *vf_link = st_path(t, "sys/bus/pci/devices/%s", vf2);
        _cleanup_free_ char *group_link = st_path(t, "sys/bus/pci/devices/%s/iommu_group", vf2);
        _cleanup_free_ char *group_dir = st_path(t, "sys/kernel/iommu_groups/2");
        _cleanup_free_ char *group_node = st_path(t, "dev/vfio/2");
        _cleanup_free_ char *cdev = st_path(t, "dev/vfio/devices/vfio2");
        _cleanup_free_ char *vfio_dev = st_path(t, "sys/bus/pci/devices/%s/vfio-dev/vfio2", vf2);
        _cleanup_free_ char *cur3 = st_vf_attr(t, vf3, "current_vgpu_type");
        _cleanup_free_ char *virtfn = st_path(t, "sys/devices/pci0000:e3/%s/virtfn31", MIXED_PF);
        char target[256];
        struct stat st;

        assert_int_equal(st_state_vf_int(t, vf2, "iommu_group"), 2);
        assert_int_equal(st_state_vf_int(t, vf2, "vfio"), 2);
        assert_int_equal(st_set_type(t, vf0, 1150), 0);
        st_nvml_init(t);
        nvmlDevice_t d = st_nvml_device(t, MIXED_PF);
        assert_int_equal(nvml_mode(t, d), 1);

        /* EBUSY while a VFIO node of one of its VFs is open, and nothing changes. */
        int held = open(group_node, O_RDWR | O_CLOEXEC);
        assert_true(held >= 0);
        assert_int_equal(st_ctl(t, "sriov %s off", MIXED_PF), -EBUSY);
        _cleanup_free_ char *busy = st_ctl_result(t);
        assert_string_equal(busy, "EBUSY: GPU 0000:e3:00.0: a VFIO node of VF 0000:e3:00.6 is "
                                  "open (1 handle(s))\n");
        assert_int_equal(stat(vf_dir, &st), 0);
        assert_int_equal(st_state_vf_int(t, vf0, "type"), 1150);
        assert_int_equal(nvml_mode(t, d), 1);
        close(held);
        assert_true(st_poll(open_handles_zero, t, vf2, 5000));

        /* A write descriptor opened before the cycle; it will point at a removed device. */
        _cleanup_close_ int stale = open(cur3, O_WRONLY | O_CLOEXEC);
        assert_true(stale >= 0);
        assert_int_equal(st_state_vf_int(t, vf3, "writes_in_flight"), 1);

        assert_int_equal(st_ctl(t, "sriov %s off", MIXED_PF), 0);
        _cleanup_free_ char *n0 = st_read(numvfs);
        assert_string_equal(n0, "0\n");
        assert_int_equal(count_entries(devices), 34);
        assert_false(has_entry(pf_dir, "virtfn"));
        assert_gone(virtfn);
        assert_gone(vf_dir);
        assert_gone(vf_link);
        assert_gone(group_dir);
        assert_gone(group_node);
        assert_gone(cdev);
        _cleanup_free_ char *cur0 = st_vf_attr(t, vf0, "current_vgpu_type");
        assert_gone(cur0);
        /* The other PF keeps its VFs, groups 32..63 and nodes. */
        _cleanup_free_ char *other = st_path(t, "dev/vfio/32");
        assert_int_equal(stat(other, &st), 0);

        json_auto_t *s_off = st_state(t);
        json_t *g_off = state_gpu(s_off, MIXED_PF);
        assert_int_equal(json_array_size(json_object_get(g_off, "vfs")), 0);
        assert_string_equal(json_string_value(json_object_get(g_off, "mode")), "equal");
        json_t *sriov = json_object_get(g_off, "sriov");
        assert_true(json_is_false(json_object_get(sriov, "enabled")));
        assert_int_equal(json_integer_value(json_object_get(sriov, "vfs")), 32);
        assert_int_equal(json_integer_value(json_object_get(sriov, "cycles")), 1);
        /* NVML sees the card in equal-size mode, so without placements (SIM-13). */
        assert_int_equal(nvml_mode(t, d), 0);
        unsigned ids[64];
        nvmlVgpuPlacementList_t list = {
            .version = nvmlVgpuPlacementList_v2, .count = 64, .placementIds = ids};
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(d, 1150, &list),
                         NVML_ERROR_NOT_SUPPORTED);

        /* The held descriptor finds its device gone, as an open sysfs file would. */
        assert_int_equal(write(stale, "1150", 4), -1);
        assert_int_equal(errno, ENODEV);
        /* A VF that is not there cannot be wedged; `off` again succeeds and changes nothing. */
        assert_int_equal(st_ctl(t, "wedge %s", vf2), -ENOENT);
        assert_int_equal(st_ctl(t, "sriov %s off", MIXED_PF), 0);
        json_auto_t *s_again = st_state(t);
        assert_int_equal(json_integer_value(json_object_get(
                             json_object_get(state_gpu(s_again, MIXED_PF), "sriov"), "cycles")),
                         1);

        /* on: the same addresses, groups and vfio numbers, unconfigured; the mode stays. */
        assert_int_equal(st_ctl(t, "sriov %s on", MIXED_PF), 0);
        _cleanup_free_ char *n32 = st_read(numvfs);
        assert_string_equal(n32, "32\n");
        assert_int_equal(count_entries(devices), 66);
        assert_int_equal(lstat(virtfn, &st), 0);
        ssize_t n = readlink(virtfn, target, sizeof(target) - 1);
        assert_true(n > 0);
        target[n] = 0;
        assert_string_equal(target, "../0000:e3:04.3");
        assert_int_equal(stat(vf_dir, &st), 0);
        n = readlink(group_link, target, sizeof(target) - 1);
        assert_true(n > 0);
        target[n] = 0;
        assert_string_equal(target, "../../../kernel/iommu_groups/2");
        assert_int_equal(stat(group_node, &st), 0);
        assert_int_equal(stat(cdev, &st), 0);
        assert_int_equal(stat(vfio_dev, &st), 0);
        assert_int_equal(st_state_vf_int(t, vf2, "iommu_group"), 2);
        assert_int_equal(st_state_vf_int(t, vf2, "vfio"), 2);
        assert_int_equal(st_state_vf_int(t, last, "iommu_group"), 31);
        _cleanup_free_ char *cur = st_read(cur0);
        assert_string_equal(cur, "0\n");
        assert_int_equal(st_state_vf_int(t, vf0, "type"), 0);
        _cleanup_free_ char *list_all = creatable(t, vf0);
        assert_non_null(strstr(list_all, "1166  : NVIDIA L40S-48A\n"));
        assert_int_equal(nvml_mode(t, d), 0);

        /* The old descriptor stays gone; its close does not end a span of the new VF. */
        assert_int_equal(write(stale, "1150", 4), -1);
        assert_int_equal(errno, ENODEV);
        int fresh = open(cur3, O_WRONLY | O_CLOEXEC);
        assert_true(fresh >= 0);
        assert_int_equal(st_state_vf_int(t, vf3, "writes_in_flight"), 1);
        close(TAKE_FD(stale));
        assert_int_equal(st_state_vf_int(t, vf3, "writes_in_flight"), 1);
        assert_int_equal(write(fresh, "1150", 4), 4);
        close(fresh);
        assert_int_equal(st_state_vf_int(t, vf3, "writes_in_flight"), 0);
        assert_int_equal(st_state_vf_int(t, vf3, "type"), 1150);

        /* `on` again succeeds and changes nothing. */
        assert_int_equal(st_ctl(t, "sriov %s on", MIXED_PF), 0);
        assert_int_equal(st_state_vf_int(t, vf3, "type"), 1150);
        assert_int_equal(st_ctl(t, "sriov %s", MIXED_PF), -EINVAL);
        _cleanup_free_ char *usage = st_ctl_result(t);
        assert_string_equal(usage, "EINVAL: usage: sriov <pf> off|on\n");
        assert_int_equal(st_ctl(t, "sriov %s off", vf0), -ENOENT);
        assert_int_equal(t->nvml.Shutdown(), NVML_SUCCESS);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_teardown(test_tree, st_reset),
            cmocka_unit_test_teardown(test_equal_size_lists, st_reset),
            cmocka_unit_test_teardown(test_mixed_sequence, st_reset),
            cmocka_unit_test_teardown(test_nvml_answers, st_reset),
            cmocka_unit_test_teardown(test_nvml_control, st_reset),
            cmocka_unit_test_teardown(test_state_mtime, st_reset),
            cmocka_unit_test_teardown(test_refused_writes, st_reset),
            cmocka_unit_test_teardown(test_forbidden_writes, st_reset),
            cmocka_unit_test_teardown(test_vfio_open_counting, st_reset),
            cmocka_unit_test_teardown(test_release_lag, st_reset),
            cmocka_unit_test_teardown(test_fault_errno_and_count, st_reset),
            cmocka_unit_test_teardown(test_fault_delay, st_reset),
            cmocka_unit_test_teardown(test_fault_hang, st_reset),
            cmocka_unit_test_teardown(test_fault_data, st_reset),
            cmocka_unit_test_teardown(test_data_replaced_while_open, st_reset),
            cmocka_unit_test_teardown(test_mode_switch, st_reset),
            cmocka_unit_test_teardown(test_ctl_errors_and_qemu, st_reset),
            cmocka_unit_test_teardown(test_state_matches_sysfs, st_reset),
            cmocka_unit_test_teardown(test_concurrent_writes_recorded, st_reset),
            cmocka_unit_test_teardown(test_query_write_overlap, st_reset),
            cmocka_unit_test_teardown(test_sriov_cycle, sriov_teardown),
        };
        return cmocka_run_group_tests(tests, st_group_setup, st_group_teardown);
}
