/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The device module against a mounted vgpu-sim (SPEC DEV-2..DEV-18, GEN-4, SIM-11, SIM-12,
 * SIM-14, SIM-16). run-with-sim.sh mounts the simulator in a private PID namespace and sets
 * VGPU_SIM_MOUNT; the first argument picks the host the group expects: "vfio" (host-l40s.yaml)
 * or "mdev" (host-a40.yaml).
 *
 * Everything goes through the asynchronous layer on a real worker pool and the real clock,
 * attached to an sd-event loop the way the daemon attaches them; a test runs the loop until what
 * it waits for has happened (bounded). After every test the simulator must show
 * no forbidden write (DEV-18, SIM-16) and no VF with more than one write open at once (DEV-11).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

#include <inttypes.h>
#include <jansson.h>
#include <signal.h>

#include "device/device.h"
#include "device-done.h"
#include "sim-test.h"

/* The mixed-size and the equal-size L40S of host-l40s.yaml, and the A40 of host-a40.yaml. */
#define MIXED_VF0 "0000:e3:00.4"
#define MIXED_VF1 "0000:e3:00.5"
#define EQUAL_VF0 "0001:c8:00.4"
#define EQUAL_VF1 "0001:c8:00.5"
#define A40_VF0 "0000:41:00.4"
#define A40_VF1 "0000:41:00.5"

#define TYPE_2Q "1148"
#define TYPE_4Q "1150"
#define TYPE_48Q "1156"

#define UUID_A "6f1d3c2b-8a4e-4b7f-9c1d-2e3f4a5b6c7d"
#define UUID_B "0a1b2c3d-4e5f-4a6b-8c7d-8e9f0a1b2c3d"

typedef struct Sim {
        SimTest *st;
        Root *sys, *proc;
        char *dev;
        DeviceRoots roots;
        sd_event *event;
        WorkerPool *pool;
        DeviceOps *ops;
        TestHolder children[4];
} Sim;

/* ---- the simulator ------------------------------------------------------------------------- */

/* The VFIO node QEMU would open for vf: the legacy group node (GEN-11). */
static char *group_node(const Sim *s, const char *dir)
{
        _cleanup_free_ char *rel = NULL, *group = NULL;
        assert_int_equal(strprintf(&rel, "%s/iommu_group", dir), 0);
        assert_int_equal(root_readlink_basename(s->sys, rel, &group), 0);
        return st_path(s->st, "dev/vfio/%s", group);
}

/* ---- children holding nodes (a stand-in VMM) ----------------------------------------------- */

static void hold_node(Sim *s, size_t slot, const char *node)
{
        assert_int_equal(test_holder_start(node, &s->children[slot]), 0);
}

/* The VMM exits: its descriptors close, and it is reaped. */
static void end_child(Sim *s, size_t slot)
{
        test_holder_end(&s->children[slot]);
}

/* ---- the loop ------------------------------------------------------------------------------ */

static nsec_t now(void)
{
        return test_now();
}

/* Runs the loop until pred holds, for at most 30 s. */
static void run_until(Sim *s, bool (*pred)(Sim *s, const void *arg), const void *arg)
{
        TEST_WAIT_UNTIL(s->event, pred(s, arg));
}

static bool is_done(Sim *s, const void *arg)
{
        (void)s;
        return ((const DeviceDone *)arg)->called;
}

static bool is_certain(Sim *s, const void *arg)
{
        return !worker_pool_key_is_uncertain(s->pool, arg);
}

static void start_ops(Sim *s, nsec_t timeout, nsec_t retry_interval)
{
        WorkerPoolConfig pc = WORKER_POOL_CONFIG_SYSFS;
        assert_int_equal(worker_pool_new(&pc, &s->pool), 0);
        DeviceOpsConfig c = {
            .roots = s->roots,
            .pool = s->pool,
            .sysfs_timeout = timeout,
            .retry_interval = retry_interval,
        };
        assert_int_equal(device_ops_new(&c, &s->ops), 0);
        assert_int_equal(worker_pool_attach_event(s->pool, s->event), 0);
        assert_int_equal(device_ops_attach_event(s->ops, s->event), 0);
}

static void stop_ops(Sim *s)
{
        if (s->pool) {
                (void)worker_pool_wait_idle(s->pool, 30 * NSEC_PER_SEC);
                s->pool = worker_pool_free(s->pool);
        }
        s->ops = device_ops_free(s->ops);
}

/* Runs one operation to its end. */
static void configure(Sim *s, const char *vf, const char *type, DeviceDone *d)
{
        _cleanup_free_ char *e = NULL;
        if (device_ops_configure(s->ops, vf, type, "k3x9q2m8v1c4z7n5b0wd", device_done_record, d,
                                 &e) < 0)
                fail_msg("configure %s: %s", vf, e);
        run_until(s, is_done, d);
}

static void release(Sim *s, const char *framework, const char *vf, const char *uuid,
                    bool after_exit, DeviceDone *d)
{
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req = {
            .claim = {.framework = framework, .vf = vf, .mdev_uuid = uuid},
            .instance_id = "k3x9q2m8v1c4z7n5b0wd",
            .after_vmm_exit = after_exit,
        };
        if (device_ops_release(s->ops, &req, device_done_record, d, &e) < 0)
                fail_msg("release %s: %s", vf ? vf : uuid, e);
        run_until(s, is_done, d);
}

static void assert_ok(const DeviceDone *d, DeviceOutcome outcome)
{
        if (d->r < 0)
                fail_msg("operation failed: %s", d->error);
        assert_int_equal(d->outcome, outcome);
}

static void assert_failed(const DeviceDone *d, int r, DeviceFailureKind kind, const char *message)
{
        assert_true(d->called);
        assert_int_equal(d->r, r);
        assert_int_equal(d->kind, kind);
        assert_string_equal(d->error, message);
}

/* ---- set-up and the checks after every test ------------------------------------------------ */

static int group_setup(void **state)
{
        Sim *s = calloc(1, sizeof *s);
        assert_non_null(s);
        s->st = st_open();
        assert_int_equal(sd_event_new(&s->event), 0);
        _cleanup_free_ char *sys = st_path(s->st, "sys");
        s->dev = st_path(s->st, "dev");
        assert_int_equal(root_open(sys, &s->sys), 0);
        /* SIM-21: /proc is the namespace's own, listing only the test's processes. */
        assert_int_equal(root_open("/proc", &s->proc), 0);
        s->roots = (DeviceRoots){.sysfs = s->sys, .proc = s->proc, .dev_root = s->dev};
        for (size_t i = 0; i < ELEMENTSOF(s->children); i++)
                s->children[i] = TEST_HOLDER_NULL;
        log_set_max_level(LOG_LEVEL_WARNING); /* DEV-19 lines are the unit tests' business */
        *state = s;
        return 0;
}

static int group_teardown(void **state)
{
        Sim *s = *state;
        root_free(s->sys);
        root_free(s->proc);
        free(s->dev);
        sd_event_unref(s->event);
        st_close(s->st);
        free(s);
        return 0;
}

static int setup(void **state)
{
        Sim *s = *state;
        start_ops(s, 0, 100 * NSEC_PER_MSEC);
        return 0;
}

/* Leaves the simulator as it found it, and checks DEV-11 and DEV-18 on the way. */
static int teardown(void **state)
{
        Sim *s = *state;

        for (size_t i = 0; i < ELEMENTSOF(s->children); i++)
                if (s->children[i].pid > 0) {
                        kill(s->children[i].pid, SIGKILL);
                        end_child(s, i);
                }
        st_command(s->st, "clear-faults");
        stop_ops(s);

        json_auto_t *st = st_state(s->st);
        size_t i, k;
        json_t *gpu, *vf;
        json_array_foreach (json_object_get(st, "gpus"), i, gpu) {
                json_array_foreach (json_object_get(gpu, "vfs"), k, vf) {
                        const char *address = json_string_value(json_object_get(vf, "address"));
                        json_int_t maxw =
                            json_integer_value(json_object_get(vf, "max_concurrent_writes"));
                        if (maxw > 1) /* DEV-11 */
                                fail_msg("VF %s saw %" JSON_INTEGER_FORMAT " concurrent writes",
                                         address, maxw);
                        st_command(s->st, "release-lag %s 0", address);
                }
        }

        /* Release what a test left, through the module itself. */
        start_ops(s, 0, 100 * NSEC_PER_MSEC);
        json_array_foreach (json_object_get(st, "gpus"), i, gpu) {
                json_array_foreach (json_object_get(gpu, "vfs"), k, vf) {
                        const char *address = json_string_value(json_object_get(vf, "address"));
                        json_t *mdev = json_object_get(vf, "mdev");
                        DeviceDone d = {};
                        if (json_is_object(mdev))
                                release(s, "mdev", address,
                                        json_string_value(json_object_get(mdev, "uuid")), true, &d);
                        else if (json_integer_value(json_object_get(vf, "type")) != 0)
                                release(s, "vendor-vfio", address, NULL, true, &d);
                        else
                                continue;
                        assert_ok(&d, DEVICE_OUTCOME_RELEASED);
                        device_done_clear(&d);
                }
        }
        stop_ops(s);

        /* DEV-18, SIM-16: nothing forbidden was ever attempted. */
        _cleanup_free_ char *text = NULL;
        assert_int_equal(test_sim_forbidden_writes(s->st->sim, &text), 0);
        assert_string_equal(text, "");
        return 0;
}

/* ---- vendor VFIO --------------------------------------------------------------------------- */

static void test_configure_and_release(void **state) /* DEV-3, DEV-5, DEV-8, DEV-9 */
{
        Sim *s = *state;
        DeviceDone d = {};

        configure(s, MIXED_VF0, TYPE_4Q, &d);
        assert_ok(&d, DEVICE_OUTCOME_CONFIGURED);
        assert_int_equal(st_state_vf_int(s->st, MIXED_VF0, "type"), 1150);
        device_done_clear(&d);

        configure(s, MIXED_VF0, TYPE_4Q, &d);
        assert_ok(&d, DEVICE_OUTCOME_UNCHANGED);
        device_done_clear(&d);

        /* Another type: reset first (DEV-4), then the new one. */
        configure(s, MIXED_VF0, TYPE_2Q, &d);
        assert_ok(&d, DEVICE_OUTCOME_CONFIGURED);
        assert_int_equal(st_state_vf_int(s->st, MIXED_VF0, "type"), 1148);
        device_done_clear(&d);

        release(s, "vendor-vfio", MIXED_VF0, NULL, false, &d);
        assert_ok(&d, DEVICE_OUTCOME_RELEASED);
        assert_int_equal(st_state_vf_int(s->st, MIXED_VF0, "type"), 0);
        device_done_clear(&d);

        release(s, "vendor-vfio", MIXED_VF0, NULL, false, &d);
        assert_ok(&d, DEVICE_OUTCOME_NOT_CONFIGURED);
        device_done_clear(&d);
}

static void test_driver_refusals(void **state) /* DEV-7, SIM-11 */
{
        Sim *s = *state;
        DeviceDone d = {};

        /* Equal-size: the first vGPU fixes the size; another size is EINVAL. */
        configure(s, EQUAL_VF0, TYPE_2Q, &d);
        assert_ok(&d, DEVICE_OUTCOME_CONFIGURED);
        device_done_clear(&d);
        configure(s, EQUAL_VF1, TYPE_4Q, &d);
        assert_failed(&d, -EINVAL, DEVICE_FAILURE_CAPACITY,
                      "driver refused vGPU type 1150 on VF " EQUAL_VF1 ": Invalid argument");
        assert_int_equal(st_state_vf_int(s->st, EQUAL_VF1, "type"), 0);
        device_done_clear(&d);

        /* Beyond the maximum: ENOSPC. */
        release(s, "vendor-vfio", EQUAL_VF0, NULL, false, &d);
        device_done_clear(&d);
        configure(s, EQUAL_VF0, TYPE_48Q, &d);
        assert_ok(&d, DEVICE_OUTCOME_CONFIGURED);
        device_done_clear(&d);
        configure(s, EQUAL_VF1, TYPE_48Q, &d);
        assert_failed(&d, -ENOSPC, DEVICE_FAILURE_CAPACITY,
                      "driver refused vGPU type 1156 on VF " EQUAL_VF1 ": No space left on device");
        device_done_clear(&d);

        /* A 0 refused while the driver still tears down (release lag): EBUSY, in a release and
         * in the reset half of a configure, and never a capacity refusal. */
        _cleanup_free_ char *node = group_node(s, "bus/pci/devices/" EQUAL_VF0);
        st_command(s->st, "release-lag " EQUAL_VF0 " 60000");
        hold_node(s, 0, node);
        end_child(s, 0);
        release(s, "vendor-vfio", EQUAL_VF0, NULL, false, &d);
        assert_failed(&d, -EBUSY, DEVICE_FAILURE_REFUSED,
                      "destroy vGPU on VF " EQUAL_VF0 ": Device or resource busy");
        device_done_clear(&d);
        configure(s, EQUAL_VF0, TYPE_2Q, &d);
        assert_failed(&d, -EBUSY, DEVICE_FAILURE_REFUSED,
                      "destroy vGPU on VF " EQUAL_VF0 ": Device or resource busy");
        assert_int_equal(st_state_vf_int(s->st, EQUAL_VF0, "type"), 1156);
        device_done_clear(&d);

        /* Injected EIO on the store of a type: still the driver's refusal (DEV-7). */
        st_command(s->st, "fault write sys/bus/pci/devices/" MIXED_VF1
                          "/nvidia/current_vgpu_type EIO count=1");
        configure(s, MIXED_VF1, TYPE_4Q, &d);
        assert_failed(&d, -EIO, DEVICE_FAILURE_CAPACITY,
                      "driver refused vGPU type 1150 on VF " MIXED_VF1 ": Input/output error");
        device_done_clear(&d);

        /* And EIO on the read (DEV-8). */
        st_command(s->st, "fault read sys/bus/pci/devices/" MIXED_VF1
                          "/nvidia/current_vgpu_type EIO count=1");
        release(s, "vendor-vfio", MIXED_VF1, NULL, false, &d);
        assert_failed(&d, -EIO, DEVICE_FAILURE_ERROR,
                      "read current vGPU type for VF " MIXED_VF1 ": Input/output error");
        device_done_clear(&d);
}

typedef struct Batch {
        DeviceDone *done;
        size_t n;
} Batch;

static bool batch_done(Sim *s, const void *arg)
{
        (void)s;
        const Batch *b = arg;
        for (size_t i = 0; i < b->n; i++)
                if (!b->done[i].called)
                        return false;
        return true;
}

static void test_one_vf_never_overlaps(void **state) /* DEV-11 */
{
        Sim *s = *state;
        enum { N = 40 };
        DeviceDone d[N] = {};
        static const char *const types[] = {TYPE_2Q, TYPE_4Q, "1147", "1152"};
        _cleanup_free_ char *e = NULL;

        /* Everything at once: configures of several types and releases, on one VF, with a
         * neighbour VF busy in parallel. */
        for (size_t i = 0; i < N; i++) {
                const char *vf = i % 5 == 4 ? MIXED_VF1 : MIXED_VF0;
                if (i % 3 == 2) {
                        DeviceReleaseRequest req = {
                            .claim = {.framework = "vendor-vfio", .vf = vf},
                            .instance_id = "k3x9q2m8v1c4z7n5b0wd",
                        };
                        assert_int_equal(
                            device_ops_release(s->ops, &req, device_done_record, &d[i], &e), 0);
                } else
                        assert_int_equal(device_ops_configure(s->ops, vf, types[i % 4], NULL,
                                                              device_done_record, &d[i], &e),
                                         0);
        }
        Batch b = {d, N};
        run_until(s, batch_done, &b);
        for (size_t i = 0; i < N; i++) {
                if (d[i].r < 0)
                        fail_msg("operation %zu failed: %s", i, d[i].error);
                device_done_clear(&d[i]);
        }
        json_int_t maxw = st_state_vf_int(s->st, MIXED_VF0, "max_concurrent_writes");
        assert_true(maxw == 1);
        assert_true(st_state_vf_int(s->st, MIXED_VF1, "max_concurrent_writes") == 1);
}

static void test_vf_held_open_is_never_touched(void **state) /* DEV-4, DEV-9, DEV-12, DEV-13 */
{
        Sim *s = *state;
        DeviceDone d = {};

        configure(s, MIXED_VF0, TYPE_4Q, &d);
        assert_ok(&d, DEVICE_OUTCOME_CONFIGURED);
        device_done_clear(&d);

        /* A VMM holds the legacy group node. */
        _cleanup_free_ char *node = group_node(s, "bus/pci/devices/" MIXED_VF0);
        hold_node(s, 0, node);

        release(s, "vendor-vfio", MIXED_VF0, NULL, false, &d);
        assert_failed(&d, -EBUSY, DEVICE_FAILURE_IN_USE,
                      "vendor VFIO vGPU on VF " MIXED_VF0 " is still in use");
        device_done_clear(&d);

        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest reset = {.claim = {.framework = "vendor-vfio", .vf = MIXED_VF0}};
        assert_int_equal(device_ops_release(s->ops, &reset, device_done_record, &d, &e), 0);
        run_until(s, is_done, &d);
        assert_int_equal(d.kind, DEVICE_FAILURE_IN_USE);
        device_done_clear(&d);

        configure(s, MIXED_VF0, TYPE_2Q, &d);
        assert_failed(&d, -EBUSY, DEVICE_FAILURE_IN_USE,
                      "vendor VFIO vGPU on VF " MIXED_VF0 " is still in use");
        device_done_clear(&d);
        /* Even after a VMM exit is claimed, a live holder stops the retries at once. */
        release(s, "vendor-vfio", MIXED_VF0, NULL, true, &d);
        assert_int_equal(d.kind, DEVICE_FAILURE_IN_USE);
        assert_int_equal(d.attempts, 1);
        device_done_clear(&d);
        assert_int_equal(st_state_vf_int(s->st, MIXED_VF0, "type"), 1150);

        /* The iommufd cdev counts the same. */
        end_child(s, 0);
        char cdev[64];
        snprintf(cdev, sizeof cdev, "dev/vfio/devices/vfio%" JSON_INTEGER_FORMAT,
                 st_state_vf_int(s->st, MIXED_VF0, "vfio"));
        _cleanup_free_ char *cdev_path = st_path(s->st, "%s", cdev);
        hold_node(s, 1, cdev_path);
        release(s, "vendor-vfio", MIXED_VF0, NULL, false, &d);
        assert_int_equal(d.kind, DEVICE_FAILURE_IN_USE);
        device_done_clear(&d);
        assert_int_equal(st_state_vf_int(s->st, MIXED_VF0, "type"), 1150);

        /* The VMM exits: the release goes through (retrying while the driver lags). */
        end_child(s, 1);
        release(s, "vendor-vfio", MIXED_VF0, NULL, true, &d);
        assert_ok(&d, DEVICE_OUTCOME_RELEASED);
        assert_int_equal(st_state_vf_int(s->st, MIXED_VF0, "type"), 0);
        device_done_clear(&d);
}

static void test_release_lag_is_retried(void **state) /* DEV-10, SIM-12 */
{
        Sim *s = *state;
        DeviceDone d = {};

        /* The real interval this time: one second apart. */
        stop_ops(s);
        start_ops(s, 0, 0);

        configure(s, MIXED_VF1, TYPE_4Q, &d);
        assert_ok(&d, DEVICE_OUTCOME_CONFIGURED);
        device_done_clear(&d);

        st_command(s->st, "release-lag " MIXED_VF1 " 1500");
        _cleanup_free_ char *node = group_node(s, "bus/pci/devices/" MIXED_VF1);
        hold_node(s, 0, node);
        end_child(s, 0);

        nsec_t start = now();
        release(s, "vendor-vfio", MIXED_VF1, NULL, true, &d);
        assert_ok(&d, DEVICE_OUTCOME_RELEASED);
        assert_true(d.attempts >= 2 && d.attempts <= 4);
        /* Attempts a second apart: at least one interval passed per retry. */
        assert_true(now() - start >= (nsec_t)(d.attempts - 1) * NSEC_PER_SEC);
        assert_int_equal(st_state_vf_int(s->st, MIXED_VF1, "type"), 0);
        device_done_clear(&d);
}

static void test_hung_write_makes_vf_uncertain(void **state) /* GEN-4, GEN-12, SIM-14 */
{
        Sim *s = *state;
        DeviceDone d = {};
        _cleanup_free_ char *e = NULL;

        stop_ops(s);
        start_ops(s, 300 * NSEC_PER_MSEC, 0);

        st_command(s->st,
                   "fault write sys/bus/pci/devices/" MIXED_VF1 "/nvidia/current_vgpu_type hang");
        configure(s, MIXED_VF1, TYPE_4Q, &d);
        assert_failed(&d, -ETIMEDOUT, DEVICE_FAILURE_TIMEOUT, "timed out after 300ms");
        device_done_clear(&d);
        assert_true(worker_pool_key_is_uncertain(s->pool, MIXED_VF1));

        /* Neither reset nor released while the call is out. */
        DeviceReleaseRequest req = {.claim = {.framework = "vendor-vfio", .vf = MIXED_VF1}};
        assert_int_equal(device_ops_release(s->ops, &req, device_done_record, &d, &e), -EAGAIN);
        assert_string_equal(e, "VF " MIXED_VF1
                               " is uncertain: an earlier sysfs call on it has not returned");
        assert_false(d.called);
        /* Other VFs carry on. */
        configure(s, MIXED_VF0, TYPE_2Q, &d);
        assert_ok(&d, DEVICE_OUTCOME_CONFIGURED);
        device_done_clear(&d);

        /* clear-faults lets the held store finish: the VF is certain again. */
        st_command(s->st, "clear-faults");
        run_until(s, is_certain, MIXED_VF1);
        assert_int_equal(st_state_vf_int(s->st, MIXED_VF1, "type"), 1150);
        release(s, "vendor-vfio", MIXED_VF1, NULL, false, &d);
        assert_ok(&d, DEVICE_OUTCOME_RELEASED);
        device_done_clear(&d);
}

/* ---- mdev ---------------------------------------------------------------------------------- */

static void create(Sim *s, const char *vf, const char *profile, const char *uuid, DeviceDone *d)
{
        _cleanup_free_ char *e = NULL;
        if (device_ops_mdev_create(s->ops, vf, profile, uuid, "k3x9q2m8v1c4z7n5b0wd",
                                   device_done_record, d, &e) < 0)
                fail_msg("create on %s: %s", vf, e);
        run_until(s, is_done, d);
}

static void test_mdev_create_and_remove(void **state) /* DEV-16, DEV-17 */
{
        Sim *s = *state;
        DeviceDone d = {};
        char uuid[37];

        create(s, A40_VF0, "NVIDIA A40-2Q", UUID_A, &d);
        assert_ok(&d, DEVICE_OUTCOME_CONFIGURED);
        device_done_clear(&d);
        st_vf_mdev(s->st, A40_VF0, uuid);
        assert_string_equal(uuid, UUID_A);
        _cleanup_free_ char *type = NULL;
        assert_int_equal(
            root_readlink_basename(s->sys, "bus/mdev/devices/" UUID_A "/mdev_type", &type), 0);
        assert_string_equal(type, "nvidia-901");

        /* A name no type carries. */
        create(s, A40_VF1, "NVIDIA A40-5Q", UUID_B, &d);
        assert_failed(&d, -ENOENT, DEVICE_FAILURE_ERROR,
                      "create mdev on VF " A40_VF1 ": no mdev type named \"NVIDIA A40-5Q\"");
        device_done_clear(&d);

        /* The driver refuses another size on an equal-size card: a capacity refusal. */
        create(s, A40_VF1, "NVIDIA A40-4Q", UUID_B, &d);
        assert_failed(&d, -EINVAL, DEVICE_FAILURE_CAPACITY,
                      "create mdev on VF " A40_VF1 ": Invalid argument");
        device_done_clear(&d);
        /* ... or a VF that carries an mdev already. */
        create(s, A40_VF0, "NVIDIA A40-2Q", UUID_B, &d);
        assert_failed(&d, -EBUSY, DEVICE_FAILURE_CAPACITY,
                      "create mdev on VF " A40_VF0 ": Device or resource busy");
        device_done_clear(&d);

        /* A reset removes it at once. */
        _cleanup_free_ char *e = NULL;
        DeviceReleaseRequest req = {
            .claim = {.framework = "mdev", .vf = A40_VF0, .mdev_uuid = UUID_A}};
        assert_int_equal(device_ops_release(s->ops, &req, device_done_record, &d, &e), 0);
        run_until(s, is_done, &d);
        assert_ok(&d, DEVICE_OUTCOME_RELEASED);
        device_done_clear(&d);
        st_vf_mdev(s->st, A40_VF0, uuid);
        assert_string_equal(uuid, "");

        release(s, "mdev", A40_VF0, UUID_A, false, &d);
        assert_ok(&d, DEVICE_OUTCOME_NOT_CONFIGURED);
        device_done_clear(&d);
}

static void test_mdev_in_use_then_released(void **state) /* DEV-17, DEV-10, DEV-12 */
{
        Sim *s = *state;
        DeviceDone d = {};
        char uuid[37];

        create(s, A40_VF1, "NVIDIA A40-2Q", UUID_B, &d);
        assert_ok(&d, DEVICE_OUTCOME_CONFIGURED);
        device_done_clear(&d);

        _cleanup_free_ char *node = group_node(s, "bus/mdev/devices/" UUID_B);
        hold_node(s, 0, node);
        release(s, "mdev", A40_VF1, UUID_B, false, &d);
        assert_failed(&d, -EBUSY, DEVICE_FAILURE_IN_USE, "mdev " UUID_B " is still in use");
        device_done_clear(&d);
        st_vf_mdev(s->st, A40_VF1, uuid);
        assert_string_equal(uuid, UUID_B);

        /* The VMM exits, the driver lags: DEV-17 waits its polls (100 ms apart here), then
         * removes, retrying through the lag. */
        st_command(s->st, "release-lag " A40_VF1 " 1500");
        end_child(s, 0);
        nsec_t start = now();
        release(s, "mdev", A40_VF1, UUID_B, true, &d);
        assert_ok(&d, DEVICE_OUTCOME_RELEASED);
        assert_true(now() - start >= 10 * 100 * NSEC_PER_MSEC);
        st_vf_mdev(s->st, A40_VF1, uuid);
        assert_string_equal(uuid, "");
        device_done_clear(&d);
}

int main(int argc, char **argv)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        const struct CMUnitTest vfio[] = {
            T(test_configure_and_release),  T(test_driver_refusals),
            T(test_one_vf_never_overlaps),  T(test_vf_held_open_is_never_touched),
            T(test_release_lag_is_retried), T(test_hung_write_makes_vf_uncertain),
        };
        const struct CMUnitTest mdev[] = {
            T(test_mdev_create_and_remove),
            T(test_mdev_in_use_then_released),
        };

        /* A child killed mid-test must not take the runner down with SIGPIPE. */
        signal(SIGPIPE, SIG_IGN);
        if (argc == 2 && streq(argv[1], "vfio"))
                return cmocka_run_group_tests(vfio, group_setup, group_teardown);
        if (argc == 2 && streq(argv[1], "mdev"))
                return cmocka_run_group_tests(mdev, group_setup, group_teardown);
        fprintf(stderr, "usage: %s vfio|mdev\n", argv[0]);
        return 2;
}
