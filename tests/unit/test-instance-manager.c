/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The InstanceManager driven directly (SPEC §6, §7), without the daemon around it: its own loop,
 * pools, DeviceOps, host tracker and write gate, as the Manager wires them, and fake-qemu as the
 * VMM. Each operation's step list runs to its end, and each failing step rolls back what the
 * steps before it made. fake-qemu's flags come from <tree>/.sim/qemu/<name>, which it finds
 * beside the data dir; the file calls go through tests/lib/fault-wrap.h.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "claim/write-gate.h"
#include "config/config.h"
#include "device/device.h"
#include "gpu/gpu.h"
#include "instances/instances.h"
#include "sysfs/sysfs.h"
#include "fault-wrap.h"
#include "testlib.h"

#define OP_LIMIT (60 * NSEC_PER_SEC)

typedef struct Fixture {
        TestTree *tree;
        Config config;
        sd_event *event;
        Root *sys, *proc;
        WorkerPool *workers, *disk, *helper;
        DeviceOps *ops;
        GpuTracker *tracker;
        WriteGate *gate;
        InstanceManager *m;
        int instances_dirfd;
        char *kernel;
} Fixture;

/* One operation's answer, kept past its callback. */
typedef struct Outcome {
        bool done;
        int r;
        InstanceFailure failure;
        char *error;
        bool has_record;
        InstanceState state;
        char id[INSTANCE_ID_LEN + 1];
        pid_t pid;
} Outcome;

static void on_done(const InstanceOutcome *o, void *userdata)
{
        Outcome *out = userdata;
        out->done = true;
        out->r = o->r;
        out->failure = o->failure;
        out->error = o->error ? strdup(o->error) : NULL;
        out->has_record = o->record != NULL;
        if (o->record) {
                out->state = o->record->state;
                snprintf(out->id, sizeof out->id, "%s", o->record->id);
                out->pid = o->record->hypervisor.pid;
        }
}

static void outcome_clear(Outcome *o)
{
        free(o->error);
        *o = (Outcome){};
}

static void config_put(Fixture *f, const char *fmt, ...) _printf_(2, 3);
static void config_put(Fixture *f, const char *fmt, ...)
{
        _cleanup_free_ char *assignment = NULL, *error = NULL;
        va_list ap;
        va_start(ap, fmt);
        assert_true(vasprintf(&assignment, fmt, ap) >= 0);
        va_end(ap);
        if (config_set(&f->config, assignment, &error) < 0)
                fail_msg("--set %s: %s", assignment, error);
}

static int setup(void **state)
{
        Fixture *f = calloc(1, sizeof *f);
        assert_non_null(f);
        assert_int_equal(test_tree_new("test-instance-manager", &f->tree), 0);
        TestTree *t = f->tree;
        assert_int_equal(test_mkdirs_at(t->fd, "data/instances"), 0);
        assert_int_equal(test_mkdirs_at(t->fd, "run"), 0);
        assert_int_equal(test_mkdirs_at(t->fd, "sys/bus/pci/devices"), 0);
        assert_int_equal(test_mkdirs_at(t->fd, "dev"), 0);
        assert_int_equal(test_mkdirs_at(t->fd, ".sim/qemu"), 0);
        assert_int_equal(test_tree_put(t, "a kernel for fake-qemu\n", "images/vmlinuz"), 0);
        f->kernel = test_tree_path(t, "images/vmlinuz");

        assert_int_equal(config_init_defaults(&f->config), 0);
        config_put(f, "data_dir=%s/data", t->dir);
        config_put(f, "runtime_dir=%s/run", t->dir);
        config_put(f, "sysfs_root=%s/sys", t->dir);
        config_put(f, "dev_root=%s/dev", t->dir);
        config_put(f, "image_dirs=[%s/images]", t->dir);
        config_put(f, "qemu_binary=%s", getenv("FAKE_QEMU"));
        config_put(f, "qemu_accel=tcg");
        config_put(f, "vmm.boot_timeout=2s");
        config_put(f, "vmm.stop_timeout=2s");
        /* No NIC: the harness runs outside a network namespace of its own (NET-11). */
        config_put(f, "network.default_mode=none");

        assert_int_equal(sd_event_new(&f->event), 0);
        assert_int_equal(root_open(f->config.sysfs_root, &f->sys), 0);
        assert_int_equal(root_open("/proc", &f->proc), 0);
        assert_int_equal(worker_pool_new(&WORKER_POOL_CONFIG_SYSFS, &f->workers), 0);
        assert_int_equal(worker_pool_new(&WORKER_POOL_CONFIG_DISK, &f->disk), 0);
        assert_int_equal(worker_pool_new(&WORKER_POOL_CONFIG_HELPER, &f->helper), 0);
        WorkerPool *pools[] = {f->workers, f->disk, f->helper};
        for (size_t i = 0; i < ELEMENTSOF(pools); i++)
                assert_int_equal(worker_pool_attach_event(pools[i], f->event), 0);
        DeviceOpsConfig dc = {
            .roots = {.sysfs = f->sys, .proc = f->proc, .dev_root = f->config.dev_root},
            .pool = f->workers,
        };
        assert_int_equal(device_ops_new(&dc, &f->ops), 0);
        assert_int_equal(device_ops_attach_event(f->ops, f->event), 0);
        GpuTrackerConfig tc = {.sysfs = f->sys, .pool = f->workers};
        assert_int_equal(gpu_tracker_new(&tc, &f->tracker), 0);
        assert_int_equal(write_gate_new(f->tracker, &f->gate), 0);

        f->instances_dirfd = openat(t->fd, "data/instances", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(f->instances_dirfd >= 0);
        InstanceManagerConfig ic = {
            .config = &f->config,
            .instances_dirfd = f->instances_dirfd,
            .proc = f->proc,
            .dev_root = f->config.dev_root,
            .sysfs_path = f->config.sysfs_root,
            .disk_pool = f->disk,
            .helper_pool = f->helper,
            .ops = f->ops,
            .claimer = {.sysfs = f->sys,
                        .tracker = f->tracker,
                        .proc = f->proc,
                        .dev_root = f->config.dev_root,
                        .pool = f->workers,
                        .ops = f->ops,
                        .gate = f->gate},
        };
        _cleanup_free_ char *error = NULL;
        if (instance_manager_new(&ic, &f->m, &error) < 0)
                fail_msg("instance_manager_new: %s", error);
        assert_int_equal(instance_manager_attach_event(f->m, f->event), 0);
        if (instance_manager_load(f->m, &error) < 0)
                fail_msg("instance_manager_load: %s", error);
        fault_disarm();
        *state = f;
        return 0;
}

/* Every VMM still listed is killed, so that no fake-qemu outlives a failed test. */
static void kill_leftovers(Fixture *f)
{
        const InstanceRecord *const *list;
        size_t n = instance_manager_list(f->m, &list);
        for (size_t i = 0; i < n; i++)
                if (list[i]->hypervisor.pid > 0)
                        (void)kill(list[i]->hypervisor.pid, SIGKILL);
}

static int teardown(void **state)
{
        Fixture *f = *state;
        fault_disarm();
        if (f->m)
                kill_leftovers(f);
        WorkerPool *pools[] = {f->workers, f->disk, f->helper};
        for (size_t i = 0; i < ELEMENTSOF(pools); i++)
                if (pools[i]) {
                        (void)worker_pool_wait_idle(pools[i], 30 * NSEC_PER_SEC);
                        worker_pool_free(pools[i]);
                }
        instance_manager_free(f->m);
        device_ops_free(f->ops);
        write_gate_free(f->gate);
        gpu_tracker_free(f->tracker);
        closep(&f->instances_dirfd);
        root_free(f->sys);
        root_free(f->proc);
        sd_event_unref(f->event);
        config_done(&f->config);
        free(f->kernel);
        test_tree_free(f->tree);
        free(f);
        return 0;
}

/* ---- driving the operations ----------------------------------------------------------------- */

typedef int (*OpFunc)(InstanceManager *m, const char *id, InstanceDoneFunc done, void *userdata,
                      InstanceFailure *ret_failure, char **ret_error);

static void wait_done(Fixture *f, Outcome *o)
{
        TEST_WAIT_UNTIL_LIMIT(f->event, OP_LIMIT, o->done);
}

/* POST /instances as the API makes it, for a GPU-less VM booting fake-qemu's kernel. */
static void create(Fixture *f, const char *name, Outcome *o)
{
        _cleanup_free_ char *body = NULL, *error = NULL;
        assert_true(asprintf(&body,
                             "{\"name\": \"%s\", \"vcpus\": 1, \"memory_mb\": 256, "
                             "\"boot\": {\"kernel\": \"%s\"}}",
                             name, f->kernel) >= 0);
        InstanceSpec spec = {};
        if (instance_spec_from_json(body, strlen(body), &spec, &error) < 0)
                fail_msg("create body: %s", error);
        InstanceFailure failure = INSTANCE_FAILURE_NONE;
        int r = instance_manager_create(f->m, &spec, on_done, o, &failure, &error);
        instance_spec_done(&spec);
        if (r < 0)
                fail_msg("create %s refused at once: %s", name, error);
        wait_done(f, o);
}

static void operate(Fixture *f, OpFunc op, const char *id, Outcome *o)
{
        _cleanup_free_ char *error = NULL;
        InstanceFailure failure = INSTANCE_FAILURE_NONE;
        if (op(f->m, id, on_done, o, &failure, &error) < 0)
                fail_msg("operation on %s refused at once: %s", id, error);
        wait_done(f, o);
}

static size_t listed(Fixture *f)
{
        const InstanceRecord *const *list;
        return instance_manager_list(f->m, &list);
}

static bool instance_dir_exists(Fixture *f, const char *id)
{
        return faccessat(f->instances_dirfd, id, F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

static bool pid_gone(pid_t pid)
{
        return kill(pid, 0) < 0 && errno == ESRCH;
}

static void set_qemu_flags(Fixture *f, const char *name, const char *flags)
{
        assert_int_equal(test_tree_put(f->tree, flags, ".sim/qemu/%s", name), 0);
}

/* ---- the tests ------------------------------------------------------------------------------ */

static void test_lifecycle(void **state) /* INST-12, INST-15, INST-16, INST-18, VMM-5 */
{
        Fixture *f = *state;
        Outcome o = {};

        create(f, "vm1", &o);
        assert_int_equal(o.r, 0);
        assert_true(o.has_record);
        assert_int_equal(o.state, INSTANCE_RUNNING);
        assert_true(o.pid > 0);
        char id[INSTANCE_ID_LEN + 1];
        snprintf(id, sizeof id, "%s", o.id);
        pid_t first = o.pid;
        assert_true(instance_dir_exists(f, id));
        outcome_clear(&o);

        operate(f, instance_manager_stop, id, &o);
        assert_int_equal(o.r, 0);
        assert_int_equal(o.state, INSTANCE_STOPPED);
        assert_int_equal(o.pid, 0);
        TEST_WAIT_UNTIL(f->event, pid_gone(first));
        outcome_clear(&o);

        operate(f, instance_manager_start, id, &o);
        assert_int_equal(o.r, 0);
        assert_int_equal(o.state, INSTANCE_RUNNING);
        assert_true(o.pid > 0 && o.pid != first);
        pid_t second = o.pid;
        outcome_clear(&o);

        operate(f, instance_manager_delete, id, &o);
        assert_int_equal(o.r, 0);
        assert_false(o.has_record);
        assert_int_equal(listed(f), 0);
        assert_false(instance_dir_exists(f, id));
        TEST_WAIT_UNTIL(f->event, pid_gone(second));
        outcome_clear(&o);
}

static void test_create_rolls_back_when_qemu_exits(void **state) /* VMM-5, INST-12 */
{
        Fixture *f = *state;
        Outcome o = {};

        /* QEMU dies before QMP is ready: the create fails with QEMU's last line, and nothing of
         * the instance is left: no record, no directory. */
        set_qemu_flags(f, "early", "exit-early:0\n");
        create(f, "early", &o);
        assert_true(o.r < 0);
        assert_false(o.has_record);
        assert_non_null(strstr(o.error, "qemu exited"));
        assert_int_equal(listed(f), 0);
        assert_int_equal(test_tree_put(f->tree, "", ".sim/qemu/early"), 0);
        outcome_clear(&o);

        /* The name is free again. */
        create(f, "early", &o);
        assert_int_equal(o.r, 0);
        assert_int_equal(o.state, INSTANCE_RUNNING);
        outcome_clear(&o);
}

static void test_create_rolls_back_when_qmp_hangs(void **state) /* VMM-5, VMM-10, INST-12 */
{
        Fixture *f = *state;
        Outcome o = {};

        /* No QMP answer within vmm.boot_timeout (2 s here): the VMM is ended and the create
         * rolled back, the record and its directory removed. */
        set_qemu_flags(f, "hung", "hang-qmp\n");
        create(f, "hung", &o);
        assert_true(o.r < 0);
        assert_false(o.has_record);
        assert_int_equal(listed(f), 0);
        outcome_clear(&o);
}

static void test_create_fails_at_the_record_write(void **state) /* INST-1, INST-12 */
{
        Fixture *f = *state;
        Outcome o = {};

        /* The first record write (Creating) cannot be made durable: no VMM starts, nothing is
         * left, and the error names the record. */
        fault_arm(FAULT_RENAMEAT, "instance.json.tmp", EIO, 1);
        create(f, "nodisk", &o);
        assert_int_equal(fault_hits(), 1);
        assert_true(o.r < 0);
        assert_false(o.has_record);
        assert_non_null(strstr(o.error, "record"));
        assert_int_equal(listed(f), 0);
        outcome_clear(&o);
}

static void test_operations_refused_at_once(void **state) /* INST-9, INST-23 */
{
        Fixture *f = *state;
        Outcome o = {};
        _cleanup_free_ char *error = NULL;
        InstanceFailure failure = INSTANCE_FAILURE_NONE;

        assert_true(instance_manager_stop(f->m, "00000000-0000-4000-8000-000000000000", on_done, &o,
                                          &failure, &error) < 0);
        assert_int_equal(failure, INSTANCE_FAILURE_NOT_FOUND);
        assert_false(o.done);

        create(f, "vm2", &o);
        assert_int_equal(o.r, 0);
        char id[INSTANCE_ID_LEN + 1];
        snprintf(id, sizeof id, "%s", o.id);
        outcome_clear(&o);
        /* Starting a Running instance is an invalid state, answered at once. */
        free(error);
        error = NULL;
        assert_true(instance_manager_start(f->m, id, on_done, &o, &failure, &error) < 0);
        assert_int_equal(failure, INSTANCE_FAILURE_INVALID_STATE);
        assert_false(o.done);
}

int main(void)
{
        if (!getenv("FAKE_QEMU")) {
                fprintf(stderr, "FAKE_QEMU is not set\n");
                return 1;
        }
        /* VMM-4: SIGCHLD is blocked before any thread starts, as vgpud's main() does, so that
         * the loop can watch its VMMs' exits. */
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        if (sigprocmask(SIG_BLOCK, &chld, NULL) < 0)
                return 1;
        const struct CMUnitTest tests[] = {
            cmocka_unit_test_setup_teardown(test_lifecycle, setup, teardown),
            cmocka_unit_test_setup_teardown(test_create_rolls_back_when_qemu_exits, setup,
                                            teardown),
            cmocka_unit_test_setup_teardown(test_create_rolls_back_when_qmp_hangs, setup, teardown),
            cmocka_unit_test_setup_teardown(test_create_fails_at_the_record_write, setup, teardown),
            cmocka_unit_test_setup_teardown(test_operations_refused_at_once, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
