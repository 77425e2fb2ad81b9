/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The mounted simulator on an A40-mdev host (SIM-5, SIM-6, SIM-14). Run by run-sim-test.sh. */
#include "sim-test.h"

#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/stat.h>
#include <time.h>

#define PF "0000:41:00.0"
#define VF0 "0000:41:00.4"
#define VF1 "0000:41:00.5"
#define UUID "7b5c2e8a-1f3d-4c6b-9a0e-2d4f6b8c0a1e"

static char *type_attr(const SimTest *t, const char *vf, const char *type, const char *attr)
{
        return st_path(t, "sys/class/mdev_bus/%s/mdev_supported_types/%s/%s", vf, type, attr);
}

static size_t count_entries(const char *path)
{
        _cleanup_closedir_ DIR *d = opendir(path);
        size_t n = 0;
        if (!d)
                fail_msg("opendir %s: %m", path);
        for (struct dirent *de; (de = readdir(d));)
                if (de->d_name[0] != '.')
                        n++;
        return n;
}

static char *link_target(const char *path)
{
        char buf[512];
        ssize_t n = readlink(path, buf, sizeof(buf) - 1);
        if (n < 0)
                fail_msg("readlink %s: %m", path);
        buf[n] = 0;
        return strdup(buf);
}

static void test_mdev_tree(void **state)
{
        /* SIM-5, DISC-2 */
        SimTest *t = *state;
        _cleanup_free_ char *bus = st_path(t, "sys/class/mdev_bus");
        _cleanup_free_ char *types = st_path(t, "sys/class/mdev_bus/%s/mdev_supported_types", VF0);
        _cleanup_free_ char *name = type_attr(t, VF0, "nvidia-905", "name");
        _cleanup_free_ char *description = type_attr(t, VF0, "nvidia-905", "description");
        _cleanup_free_ char *api = type_attr(t, VF0, "nvidia-905", "device_api");
        _cleanup_free_ char *device = st_path(t, "sys/bus/pci/devices/%s/device", PF);
        _cleanup_free_ char *nvidia = st_path(t, "sys/bus/pci/devices/%s/nvidia", VF0);
        _cleanup_free_ char *mdevs = st_path(t, "sys/bus/mdev/devices");
        struct stat st;

        assert_int_equal(count_entries(bus), 8);
        assert_int_equal(count_entries(types), 10);
        assert_int_equal(count_entries(mdevs), 0);
        _cleanup_free_ char *n = st_read(name), *d = st_read(description), *a = st_read(api),
                            *dev = st_read(device);
        assert_string_equal(n, "NVIDIA A40-8Q\n");
        assert_string_equal(d, "num_heads=4, frl_config=60, framebuffer=8192M, "
                               "max_resolution=5120x2880, max_instance=6\n");
        assert_string_equal(a, "vfio-pci\n");
        assert_string_equal(dev, "0x2235\n");
        /* An mdev host has no vendor-VFIO attributes. */
        assert_int_equal(stat(nvidia, &st), -1);
        assert_int_equal(errno, ENOENT);
}

static void test_mdev_create_remove(void **state)
{
        /* SIM-6, SIM-11, DEV-16, DEV-17 */
        SimTest *t = *state;
        _cleanup_free_ char *create = type_attr(t, VF1, "nvidia-903", "create");
        _cleanup_free_ char *avail = type_attr(t, VF1, "nvidia-903", "available_instances");
        _cleanup_free_ char *avail_other = type_attr(t, VF0, "nvidia-903", "available_instances");
        _cleanup_free_ char *avail_2q = type_attr(t, VF0, "nvidia-901", "available_instances");
        _cleanup_free_ char *device = st_path(t, "sys/bus/mdev/devices/" UUID);
        _cleanup_free_ char *mdev_type = st_path(t, "sys/bus/mdev/devices/" UUID "/mdev_type");
        _cleanup_free_ char *group = st_path(t, "sys/bus/mdev/devices/" UUID "/iommu_group");
        _cleanup_free_ char *remove = st_path(t, "sys/bus/mdev/devices/" UUID "/remove");
        _cleanup_free_ char *under_vf = st_path(t, "sys/bus/pci/devices/%s/" UUID, VF1);
        struct stat st;

        _cleanup_free_ char *before = st_read(avail);
        assert_string_equal(before, "1\n");
        assert_int_equal(st_write(create, "not-a-uuid"), -EINVAL);
        assert_int_equal(st_write(create, UUID), 0);

        /* The mdev shows up on the bus and under its VF, linked as DISC-9 reads it. */
        assert_int_equal(stat(device, &st), 0);
        assert_int_equal(stat(under_vf, &st), 0);
        _cleanup_free_ char *dev_link = link_target(device), *type_link = link_target(mdev_type),
                            *group_link = link_target(group);
        assert_string_equal(dev_link, "../../../devices/pci0000:41/0000:41:00.5/" UUID);
        assert_string_equal(strrchr(type_link, '/') + 1, "nvidia-903");
        assert_string_equal(group_link, "../../../../kernel/iommu_groups/8");
        _cleanup_free_ char *node = st_path(t, "dev/vfio/8");
        assert_int_equal(stat(node, &st), 0);
        assert_int_equal(st_state_vf_int(t, VF1, "type"), 903);

        /* One mdev per VF; other VFs keep the size class. */
        _cleanup_free_ char *after = st_read(avail), *other = st_read(avail_other),
                            *other_2q = st_read(avail_2q);
        assert_string_equal(after, "0\n");
        assert_string_equal(other, "1\n");
        assert_string_equal(other_2q, "0\n");
        assert_int_equal(st_write(create, "11111111-2222-3333-4444-555555555555"), -EBUSY);
        _cleanup_free_ char *create_2q = type_attr(t, VF0, "nvidia-901", "create");
        assert_int_equal(st_write(create_2q, "11111111-2222-3333-4444-555555555555"), -EINVAL);

        /* Remove is refused while the mdev's VFIO node is open. */
        int fd = open(node, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(st_state_vf_int(t, VF1, "open_handles"), 1);
        assert_int_equal(st_write(remove, "1"), -EBUSY);
        close(fd);
        uint64_t deadline = st_now_ms() + 5000;
        int r;
        while ((r = st_write(remove, "1")) == -EBUSY && st_now_ms() < deadline) {
                struct timespec ts = {.tv_nsec = 10 * 1000000};
                nanosleep(&ts, NULL);
        }
        assert_int_equal(r, 0);
        assert_int_equal(stat(device, &st), -1);
        assert_int_equal(errno, ENOENT);
        assert_int_equal(stat(node, &st), -1);
        _cleanup_free_ char *again = st_read(avail);
        assert_string_equal(again, "1\n");
        /* A second mdev gets a new IOMMU group. */
        assert_int_equal(st_write(create, UUID), 0);
        _cleanup_free_ char *group_link2 = link_target(group);
        assert_string_equal(group_link2, "../../../../kernel/iommu_groups/9");
}

static void test_mdev_forbidden(void **state)
{
        /* SIM-16 */
        SimTest *t = *state;
        _cleanup_free_ char *unbind = st_path(t, "sys/class/mdev_bus/%s/driver/unbind", VF0);
        _cleanup_free_ char *log = st_path(t, ".sim/forbidden-writes");

        assert_int_equal(st_write(unbind, VF0), -EPERM);
        _cleanup_free_ char *text = st_read(log);
        assert_string_equal(text, "sys/bus/pci/drivers/nvidia/unbind\n");
}

static void test_mdev_nvml(void **state)
{
        /* SIM-13, NVML-7 */
        SimTest *t = *state;
        unsigned count = 64, ids[8];
        nvmlVgpuTypeId_t types[64];
        char name[NVML_DEVICE_NAME_BUFFER_SIZE];

        st_nvml_init(t);
        nvmlDevice_t d = st_nvml_device(t, PF);
        assert_int_equal(t->nvml.DeviceGetName(d, name, sizeof(name)), NVML_SUCCESS);
        assert_string_equal(name, "NVIDIA A40");
        nvmlVgpuHeterogeneousMode_t mode = {.version = nvmlVgpuHeterogeneousMode_v1};
        assert_int_equal(t->nvml.DeviceGetVgpuHeterogeneousMode(d, &mode),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(t->nvml.DeviceGetSupportedVgpus(d, &count, types), NVML_SUCCESS);
        assert_int_equal(count, 10);
        assert_int_equal(types[0], 900);
        unsigned size = sizeof(name);
        assert_int_equal(t->nvml.VgpuTypeGetName(909, name, &size), NVML_SUCCESS);
        assert_string_equal(name, "NVIDIA A40-48Q");
        nvmlVgpuPlacementList_t list = {
            .version = nvmlVgpuPlacementList_v2, .count = 8, .placementIds = ids};
        assert_int_equal(t->nvml.DeviceGetVgpuTypeCreatablePlacements(d, 903, &list),
                         NVML_ERROR_NOT_SUPPORTED);
        assert_int_equal(t->nvml.Shutdown(), NVML_SUCCESS);
}

/* st_mtime through stat() (follow links) or lstat(); fails the test when it is missing. */
static time_t mtime_of(const char *path, bool follow)
{
        struct stat st;
        if ((follow ? stat(path, &st) : lstat(path, &st)) < 0)
                fail_msg("stat %s: %m", path);
        return st.st_mtime;
}

/* Within a few seconds of when: the test and the simulator read the clock at different times. */
static void assert_near(time_t got, time_t when)
{
        if (got < when - 5 || got > when + 5)
                fail_msg("time %lld is not near %lld", (long long)got, (long long)when);
}

static void test_mdev_age(void **state)
{
        /* SIM-6, SIM-14: an mdev directory's mtime is its creation time; `age` moves it back */
        SimTest *t = *state;
        _cleanup_free_ char *create = type_attr(t, VF0, "nvidia-901", "create");
        _cleanup_free_ char *bus = st_path(t, "sys/bus/mdev/devices/" UUID);
        _cleanup_free_ char *under_vf = st_path(t, "sys/bus/pci/devices/%s/" UUID, VF0);
        _cleanup_free_ char *canonical = st_path(t, "sys/devices/pci0000:41/%s/" UUID, VF0);
        _cleanup_free_ char *remove = st_path(t, "sys/bus/mdev/devices/" UUID "/remove");
        _cleanup_free_ char *vf = st_path(t, "sys/devices/pci0000:41/%s", VF0);
        const char *const paths[] = {bus, under_vf, canonical};
        char mdev[37];

        time_t vf_time = mtime_of(vf, true);
        assert_int_equal(st_write(create, UUID), 0);
        time_t created = time(NULL);
        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                assert_near(mtime_of(paths[i], true), created);
                assert_near(mtime_of(paths[i], false), created); /* the link itself too */
        }
        assert_near(mtime_of(remove, true), created);

        assert_int_equal(st_ctl(t, "age %s 600", UUID), 0);
        for (size_t i = 0; i < ELEMENTSOF(paths); i++) {
                assert_near(mtime_of(paths[i], true), created - 600);
                assert_near(mtime_of(paths[i], false), created - 600);
        }
        /* Ages add up; the mdev's VF keeps its own time. */
        assert_int_equal(st_ctl(t, "age %s 3600", UUID), 0);
        time_t aged = mtime_of(bus, true);
        assert_near(aged, created - 4200);
        assert_int_equal(mtime_of(vf, true), vf_time);

        json_auto_t *s = st_state(t);
        json_t *m = json_object_get(st_state_vf(s, VF0), "mdev");
        assert_int_equal(json_integer_value(json_object_get(m, "aged_s")), 4200);
        assert_true(json_is_integer(json_object_get(m, "created_ms")));

        /* Refusals, with a message, and no change. */
        assert_int_equal(st_ctl(t, "age 11111111-2222-3333-4444-555555555555 60"), -ENOENT);
        _cleanup_free_ char *unknown = st_ctl_result(t);
        assert_string_equal(unknown,
                            "ENOENT: unknown mdev \"11111111-2222-3333-4444-555555555555\"\n");
        assert_int_equal(st_ctl(t, "age %s soon", UUID), -EINVAL);
        _cleanup_free_ char *usage = st_ctl_result(t);
        assert_string_equal(usage,
                            "EINVAL: usage: age <uuid> <seconds> (seconds at most 315360000)\n");
        assert_int_equal(st_ctl(t, "age %s 315360000", UUID), -EINVAL);
        assert_int_equal(mtime_of(bus, true), aged);

        /* A new mdev under the same UUID is young again. */
        assert_int_equal(st_write(remove, "1"), 0);
        st_vf_mdev(t, VF0, mdev);
        assert_string_equal(mdev, "");
        assert_int_equal(st_ctl(t, "age %s 60", UUID), -ENOENT);
        assert_int_equal(st_write(create, UUID), 0);
        assert_near(mtime_of(bus, true), time(NULL));
}

static bool vf_closed(const SimTest *t, const void *vf)
{
        return st_state_vf_int(t, vf, "open_handles") == 0;
}

static int sriov_teardown(void **state)
{
        SimTest *t = *state;
        assert_int_equal(st_ctl(t, "sriov %s on", PF), 0);
        return st_reset(state);
}

static void test_mdev_sriov_cycle(void **state)
{
        /* SIM-14, SIM-6: an SR-IOV cycle takes the VFs' mdevs and their VFIO nodes with it */
        SimTest *t = *state;
        _cleanup_free_ char *create = type_attr(t, VF1, "nvidia-903", "create");
        _cleanup_free_ char *avail = type_attr(t, VF1, "nvidia-903", "available_instances");
        _cleanup_free_ char *parents = st_path(t, "sys/class/mdev_bus");
        _cleanup_free_ char *mdevs = st_path(t, "sys/bus/mdev/devices");
        _cleanup_free_ char *device = st_path(t, "sys/bus/mdev/devices/" UUID);
        _cleanup_free_ char *groups = st_path(t, "sys/kernel/iommu_groups");
        _cleanup_free_ char *vfio = st_path(t, "dev/vfio");
        _cleanup_free_ char *numvfs = st_path(t, "sys/bus/pci/devices/%s/sriov_numvfs", PF);
        char mdev[37];
        struct stat st;

        assert_int_equal(st_write(create, UUID), 0);
        json_auto_t *before = st_state(t);
        json_int_t group = json_integer_value(
            json_object_get(json_object_get(st_state_vf(before, VF1), "mdev"), "iommu_group"));
        _cleanup_free_ char *node = st_path(t, "dev/vfio/%" JSON_INTEGER_FORMAT, group);

        /* The mdev's node held open: EBUSY, and the mdev stays. */
        int fd = open(node, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(st_ctl(t, "sriov %s off", PF), -EBUSY);
        _cleanup_free_ char *busy = st_ctl_result(t);
        assert_string_equal(busy, "EBUSY: GPU 0000:41:00.0: a VFIO node of VF 0000:41:00.5 is "
                                  "open (1 handle(s))\n");
        assert_int_equal(stat(device, &st), 0);
        close(fd);
        assert_true(st_poll(vf_closed, t, VF1, 5000));

        assert_int_equal(st_ctl(t, "sriov %s off", PF), 0);
        assert_int_equal(count_entries(parents), 0);
        assert_int_equal(count_entries(mdevs), 0);
        assert_int_equal(count_entries(groups), 0);
        assert_int_equal(count_entries(vfio), 2); /* the container and devices/ */
        assert_int_equal(stat(device, &st), -1);
        assert_int_equal(errno, ENOENT);
        assert_int_equal(stat(node, &st), -1);
        assert_int_equal(errno, ENOENT);
        assert_int_equal(stat(create, &st), -1);
        assert_int_equal(errno, ENOENT);
        _cleanup_free_ char *zero = st_read(numvfs);
        assert_string_equal(zero, "0\n");
        assert_int_equal(st_ctl(t, "age %s 60", UUID), -ENOENT);

        /* Back, with no mdev, and ready for one. */
        assert_int_equal(st_ctl(t, "sriov %s on", PF), 0);
        assert_int_equal(count_entries(parents), 8);
        assert_int_equal(count_entries(mdevs), 0);
        st_vf_mdev(t, VF1, mdev);
        assert_string_equal(mdev, "");
        _cleanup_free_ char *one = st_read(avail);
        assert_string_equal(one, "1\n");
        assert_int_equal(st_write(create, UUID), 0);
        assert_int_equal(stat(device, &st), 0);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_teardown(test_mdev_tree, st_reset),
            cmocka_unit_test_teardown(test_mdev_create_remove, st_reset),
            cmocka_unit_test_teardown(test_mdev_forbidden, st_reset),
            cmocka_unit_test_teardown(test_mdev_nvml, st_reset),
            cmocka_unit_test_teardown(test_mdev_age, st_reset),
            cmocka_unit_test_teardown(test_mdev_sriov_cycle, sriov_teardown),
        };
        return cmocka_run_group_tests(tests, st_group_setup, st_group_teardown);
}
