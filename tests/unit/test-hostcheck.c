/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The readers of `vgpud host-check` (HOSTCHK-2): /proc/cpuinfo, the driver branch (GEN-11),
 * QEMU's device list and /proc/locks (CFG-9 without taking the lock). The helper runner it uses
 * is worker/'s spawn primitive, tested in test-worker.c. The checks themselves run against the
 * simulator in tests/integration/test-host-check.py.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>

#include "base/base.h"
#include "hostcheck/hostcheck.h"
#include "testlib.h"

static void test_cpuinfo(void **state)
{
        const char *flag = NULL;
        unsigned with = 0, cpus = 0;

        assert_int_equal(host_check_parse_cpuinfo("processor\t: 0\n"
                                                  "flags\t\t: fpu vme vmx sse\n"
                                                  "vmx flags\t: vnmi preemption_timer\n"
                                                  "\n"
                                                  "processor\t: 1\n"
                                                  "flags\t\t: fpu vme vmx sse\n",
                                                  &flag, &with, &cpus),
                         0);
        assert_string_equal(flag, "vmx");
        assert_int_equal(with, 2);
        assert_int_equal(cpus, 2); /* "vmx flags" is no CPU of its own */

        assert_int_equal(
            host_check_parse_cpuinfo("flags : svm fpu\nflags : fpu\n", &flag, &with, &cpus), 0);
        assert_string_equal(flag, "svm");
        assert_int_equal(with, 1);
        assert_int_equal(cpus, 2);

        /* A flag inside another word does not count; no flags line at all is another failure. */
        assert_int_equal(host_check_parse_cpuinfo("flags\t: vmxx xsvm fpu\n", &flag, &with, &cpus),
                         -ENXIO);
        assert_int_equal(
            host_check_parse_cpuinfo("processor : 0\nFeatures : fp asimd\n", &flag, &with, &cpus),
            -ENOENT);
        assert_int_equal(host_check_parse_cpuinfo("", &flag, &with, &cpus), -ENOENT);
}

static void test_driver_branch(void **state)
{
        unsigned branch = 0;

        assert_int_equal(host_check_parse_driver_branch("580.159.01", &branch), 0);
        assert_int_equal(branch, 580);
        assert_int_equal(host_check_parse_driver_branch("535.183.04", &branch), 0);
        assert_true(branch < HOST_CHECK_VENDOR_VFIO_MIN_BRANCH);
        assert_int_equal(host_check_parse_driver_branch("550.54", &branch), 0);
        assert_int_equal(branch, HOST_CHECK_VENDOR_VFIO_MIN_BRANCH);

        static const char *const bad[] = {"", "580", "580.", ".159", "R580.1", "58000.1", "x.1"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(host_check_parse_driver_branch(bad[i], &branch), -EINVAL);
}

static void test_qemu_devices(void **state)
{
        const char *help = "Controller/Bridge/Hub devices:\n"
                           "name \"pci-bridge\", bus PCI, desc \"Standard PCI Bridge\"\n"
                           "\n"
                           "Misc devices:\n"
                           "name \"vfio-pci\", bus PCI, desc \"VFIO-based PCI device assignment\"\n"
                           "name \"virtio-net-pci-non-transitional\", bus PCI\n"
                           "name \"virtio-blk-pci\"\n";

        assert_true(host_check_qemu_lists_device(help, "vfio-pci"));
        assert_true(host_check_qemu_lists_device(help, "virtio-blk-pci"));
        /* A longer name that starts with it is another device. */
        assert_false(host_check_qemu_lists_device(help, "virtio-net-pci"));
        assert_false(host_check_qemu_lists_device(help, "vfio"));
        assert_false(host_check_qemu_lists_device("desc \"name \\\"vfio-pci\\\"\"\n", "vfio-pci"));
        assert_false(host_check_qemu_lists_device("", "vfio-pci"));
}

static void test_locks(void **state)
{
        const dev_t dev = makedev(0xfe, 0x01);
        const char *locks = "1: POSIX  ADVISORY  WRITE 300 fe:01:4242 0 EOF\n"
                            "2: FLOCK  ADVISORY  READ 301 fe:01:4242 0 EOF\n"
                            "3: FLOCK  ADVISORY  WRITE 302 fe:02:4242 0 EOF\n"
                            "4: FLOCK  ADVISORY  WRITE 303 fe:01:4243 0 EOF\n"
                            "4: -> FLOCK  ADVISORY  WRITE 304 fe:01:4242 0 EOF\n";
        pid_t pid = -1;

        /* Another class, a shared lock, another device, another inode, a waiter: none holds it. */
        assert_int_equal(host_check_find_flock(locks, dev, 4242, &pid), 0);
        assert_int_equal(pid, -1);

        assert_int_equal(host_check_find_flock("5: FLOCK  ADVISORY  WRITE 4711 fe:01:4242 0 EOF\n",
                                               dev, 4242, &pid),
                         1);
        assert_int_equal(pid, 4711);

        /* A holder outside the reader's PID namespace shows as pid 0. */
        assert_int_equal(host_check_find_flock("6: FLOCK ADVISORY WRITE 0 103:1a:99 0 EOF",
                                               makedev(0x103, 0x1a), 99, &pid),
                         1);
        assert_int_equal(pid, 0);

        assert_int_equal(host_check_find_flock("7: FLOCK  ADVISORY  WRITE x fe:01:4242 0 EOF\n"
                                               "garbage\n\n",
                                               dev, 4242, &pid),
                         0);
}

/* A real lock on a real file shows in the real /proc/locks, and is not taken by looking. */
static void test_locks_live(void **state)
{
        _cleanup_test_tree_ TestTree *tree = NULL;
        _cleanup_free_ char *path = NULL, *locks = NULL;
        struct stat st;
        pid_t pid = -1;

        assert_int_equal(test_tree_new("hostcheck", &tree), 0);
        assert_int_equal(test_tree_put(tree, "", "vgpud.lock"), 0);
        assert_non_null(path = test_tree_path(tree, "vgpud.lock"));
        _cleanup_close_ int fd = open(path, O_RDWR | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(fstat(fd, &st), 0);

        assert_int_equal(read_file_at(AT_FDCWD, "/proc/locks", 4 << 20, &locks, NULL), 0);
        assert_int_equal(host_check_find_flock(locks, st.st_dev, st.st_ino, &pid), 0);
        free(locks);
        locks = NULL;

        assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
        assert_int_equal(read_file_at(AT_FDCWD, "/proc/locks", 4 << 20, &locks, NULL), 0);
        assert_int_equal(host_check_find_flock(locks, st.st_dev, st.st_ino, &pid), 1);
        assert_int_equal(pid, getpid());
}

static void test_names(void **state)
{
        /* One name a check, unique, and the status words of HOSTCHK-1. */
        for (size_t i = 0; i < HOST_CHECK_COUNT; i++) {
                assert_non_null(host_check_names[i]);
                for (size_t k = 0; k < i; k++)
                        assert_string_not_equal(host_check_names[i], host_check_names[k]);
        }
        assert_string_equal(host_check_status_to_string(HOST_CHECK_PASS), "PASS");
        assert_string_equal(host_check_status_to_string(HOST_CHECK_WARN), "WARN");
        assert_string_equal(host_check_status_to_string(HOST_CHECK_FAIL), "FAIL");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_cpuinfo),      cmocka_unit_test(test_driver_branch),
            cmocka_unit_test(test_qemu_devices), cmocka_unit_test(test_locks),
            cmocka_unit_test(test_locks_live),   cmocka_unit_test(test_names),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
