/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests of the instance records (SPEC §6: INST-1, INST-2, INST-3, INST-4, INST-5, INST-6,
 * INST-7, INST-20; API-9; GEN-5, GEN-6, GEN-8, GEN-9): instance.json, the create body, boot-path
 * confinement and the instances/ layout.
 *
 * Syscall failures are injected through the linker (-Wl,--wrap, tests/unit/meson.build), only
 * on the calls a test arms; the same wrappers log the file operations in order, so that the
 * crash-safety sequence (temp, fsync, rename, fsync the directory) can be asserted. getrandom()
 * is wrapped too, to hand instance_id_generate() chosen bytes. Every test runs in a fresh
 * temporary tree that teardown removes, with the faults disarmed first.
 */
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/random.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "instances/instance-internal.h"
#include "instances/instances.h"
#include "fault-wrap.h"
#include "testlib.h"

/* ---- syscall wrappers ---------------------------------------------------------------------- */

/* The file operations in order, as "<call> <path suffix>;" (only while io_logging). */
static bool io_logging;
static char io_log[16384];

static struct {
        const uint8_t *bytes; /* NULL: the real getrandom() */
        size_t size, pos;
        size_t chunk;   /* at most this many bytes per call */
        int error;      /* fail every call with it */
        unsigned eintr; /* calls that fail with EINTR first */
        unsigned calls;
} rnd;

int __real_openat_beneath(int dirfd, const char *path, int flags);
int __wrap_openat_beneath(int dirfd, const char *path, int flags);
ssize_t __real_getrandom(void *buf, size_t n, unsigned flags);
ssize_t __wrap_getrandom(void *buf, size_t n, unsigned flags);

/* Logs the file steps a test follows: mkdir, fsync, rename and unlink (the observer). */
static void observe_io(FaultCall call, const char *path, int flags)
{
        static const char *const names[] = {[FAULT_MKDIRAT] = "mkdir",
                                            [FAULT_FSYNC] = "fsync",
                                            [FAULT_RENAMEAT] = "rename",
                                            [FAULT_UNLINKAT] = "unlink"};
        if (!io_logging || !path || (size_t)call >= ELEMENTSOF(names) || !names[call])
                return;
        /* The last component is enough to tell the steps apart, and stable across trees. */
        const char *slash = strrchr(path, '/');
        size_t used = strlen(io_log);
        snprintf(io_log + used, sizeof io_log - used, "%s %s;", names[call],
                 slash ? slash + 1 : path);
}

/* Runs once, right before the next openat_beneath(): a swap after the check (INST-6). */
static void (*before_open_beneath)(void);

int __wrap_openat_beneath(int dirfd, const char *path, int flags)
{
        if (before_open_beneath) {
                void (*hook)(void) = before_open_beneath;
                before_open_beneath = NULL;
                hook();
        }
        if (fault_hit(FAULT_OPEN_BENEATH, path))
                return -errno;
        return __real_openat_beneath(dirfd, path, flags);
}

ssize_t __wrap_getrandom(void *buf, size_t n, unsigned flags)
{
        if (!rnd.bytes && !rnd.error && !rnd.eintr)
                return __real_getrandom(buf, n, flags);
        rnd.calls++;
        if (rnd.eintr > 0) {
                rnd.eintr--;
                errno = EINTR;
                return -1;
        }
        if (rnd.error) {
                errno = rnd.error;
                return -1;
        }
        size_t k = rnd.size - rnd.pos;
        if (k > n)
                k = n;
        if (rnd.chunk && k > rnd.chunk)
                k = rnd.chunk;
        if (k == 0) {
                /* A script that ran out would make the generator spin: fail instead. */
                errno = EIO;
                return -1;
        }
        memcpy(buf, rnd.bytes + rnd.pos, k);
        rnd.pos += k;
        return (ssize_t)k;
}

/* ---- fixture ------------------------------------------------------------------------------- */

typedef struct Fixture {
        TestTree *tree;
        int instances; /* <tree>/instances */
} Fixture;

static int setup(void **state)
{
        Fixture *fx = calloc(1, sizeof *fx);
        assert_non_null(fx);
        assert_int_equal(test_tree_new("test-instances", &fx->tree), 0);
        assert_int_equal(mkdirat(fx->tree->fd, "instances", 0700), 0);
        fx->instances = openat(fx->tree->fd, "instances", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(fx->instances >= 0);
        fault_disarm();
        fault_observe(observe_io);
        io_logging = false;
        io_log[0] = 0;
        rnd = (typeof(rnd)){0};
        *state = fx;
        return 0;
}

static int teardown(void **state)
{
        Fixture *fx = *state;
        fault_disarm();
        fault_observe(NULL);
        io_logging = false;
        rnd = (typeof(rnd)){0};
        close(fx->instances);
        test_tree_free(fx->tree);
        free(fx);
        return 0;
}

static void io_start(void)
{
        io_log[0] = 0;
        io_logging = true;
}

/* INST-2's normative example, as SPEC writes it (line breaks included). */
static const char example[] =
    "{\"version\": 1, \"id\": \"k3x9q2m8v1c4z7n5b0wd\", \"name\": \"render-01\", \"state\": "
    "\"Running\", \"created_at\": \"2026-09-02T20:08:03Z\",\n"
    " \"boot\": {\"kernel\": \"/var/lib/vgpud/images/vmlinuz\", \"cmdline\": \"console=ttyS0\"}, "
    "\"vcpus\": 4, \"memory_mb\": 8192,\n"
    " \"gpu\": {\"profile\": \"NVIDIA L40S-2Q\", \"framework\": \"vendor-vfio\", \"device_path\": "
    "\"/sys/bus/pci/devices/0000:e3:00.6\", \"claimed_at\": \"2026-09-02T20:08:04.5974Z\"},\n"
    " \"hypervisor\": {\"pid\": 4242, \"start_time\": 1234567, \"boot_id\": \"<uuid>\", "
    "\"qmp_socket\": \"/run/vgpud/instances/<id>/qmp.sock\", \"agent_socket\": "
    "\"/run/vgpud/instances/<id>/agent.sock\"}}";

#define EXAMPLE_ID "k3x9q2m8v1c4z7n5b0wd"
#define MDEV_UUID "2b7a3c4d-5e6f-4a1b-9c2d-3e4f5a6b7c8d"
/* FLEET-6: a Placement consumer, lower case as Placement prints it. */
#define CONSUMER "5d0a7f3e-2b1c-4e8f-9a6d-0c3b2e1f4a57"

/* The example on one line, which is how vgpud writes it (with a final newline). */
static char *example_one_line(void)
{
        char *s = strdup(example);
        assert_non_null(s);
        char *w = s;
        for (const char *p = s; *p; p++)
                if (*p != '\n')
                        *w++ = *p;
        *w = 0;
        return s;
}

static Timestamp ts(const char *s)
{
        Timestamp t;
        assert_int_equal(parse_timestamp(s, &t), 0);
        return t;
}

/* base with the first occurrence of from replaced by to; from must be there. */
static char *mutate(const char *base, const char *from, const char *to)
{
        const char *at = strstr(base, from);
        if (!at)
                fail_msg("\"%s\" not in the base record", from);
        char *s = NULL;
        assert_int_equal(strprintf(&s, "%.*s%s%s", (int)(at - base), base, to, at + strlen(from)),
                         0);
        return s;
}

static void parse_ok(const char *text, InstanceRecord *ret)
{
        _cleanup_free_ char *error = NULL;
        int r = instance_record_from_json(text, strlen(text), ret, &error);
        if (r < 0)
                fail_msg("record refused: %s\n%s", error, text);
}

static char *encode(const InstanceRecord *r)
{
        char *out = NULL;
        size_t n = 0;
        assert_int_equal(instance_record_to_json(r, &out, &n), 0);
        assert_int_equal(n, strlen(out));
        return out;
}

/* A record built by hand, as the manager builds one on create. */
static void make_record(InstanceRecord *r, const char *id)
{
        *r = (InstanceRecord){0};
        snprintf(r->id, sizeof r->id, "%s", id);
        r->name = strdup("render-01");
        r->state = INSTANCE_CREATING;
        r->created_at = ts("2026-09-02T20:08:03Z");
        r->boot.kernel = strdup("/var/lib/vgpud/images/vmlinuz");
        r->vcpus = 2;
        r->memory_mb = 1024;
        assert_non_null(r->name);
        assert_non_null(r->boot.kernel);
}

/* ---- instance.json (INST-2) ---------------------------------------------------------------- */

/* INST-2: the normative example loads, and writes back as itself, on one line, stably. */
static void test_example_round_trip(void **state)
{
        _cleanup_(instance_record_done) InstanceRecord rec = {0}, again = {0};
        parse_ok(example, &rec);

        assert_string_equal(rec.id, EXAMPLE_ID);
        assert_string_equal(rec.name, "render-01");
        assert_int_equal(rec.state, INSTANCE_RUNNING);
        assert_int_equal(timestamp_compare(rec.created_at, ts("2026-09-02T20:08:03Z")), 0);
        assert_null(rec.error);
        assert_string_equal(rec.boot.kernel, "/var/lib/vgpud/images/vmlinuz");
        assert_null(rec.boot.initrd);
        assert_string_equal(rec.boot.cmdline, "console=ttyS0");
        assert_null(rec.boot.disk);
        assert_int_equal(rec.vcpus, 4);
        assert_int_equal(rec.memory_mb, 8192);
        assert_string_equal(rec.gpu.profile, "NVIDIA L40S-2Q");
        assert_string_equal(rec.gpu.framework, "vendor-vfio");
        assert_string_equal(rec.gpu.device_path, "/sys/bus/pci/devices/0000:e3:00.6");
        assert_null(rec.gpu.mdev_uuid);
        assert_int_equal(timestamp_compare(rec.gpu.claimed_at, ts("2026-09-02T20:08:04.5974Z")), 0);
        assert_true(instance_record_is_claimed(&rec));
        assert_int_equal(rec.hypervisor.pid, 4242);
        assert_int_equal(rec.hypervisor.start_time, 1234567);
        assert_string_equal(rec.hypervisor.boot_id, "<uuid>");
        assert_string_equal(rec.hypervisor.qmp_socket, "/run/vgpud/instances/<id>/qmp.sock");
        assert_string_equal(rec.hypervisor.agent_socket, "/run/vgpud/instances/<id>/agent.sock");

        _cleanup_free_ char *line = example_one_line(), *want = NULL;
        assert_int_equal(strprintf(&want, "%s\n", line), 0);
        _cleanup_free_ char *out = encode(&rec);
        assert_string_equal(out, want);

        parse_ok(out, &again);
        _cleanup_free_ char *out2 = encode(&again);
        assert_string_equal(out2, out);
}

/* INST-2: an mdev claim, an error, a disk-only boot; empty objects and absent values omitted. */
static void test_other_records_round_trip(void **state)
{
        static const char *const records[] = {
            "{\"version\": 1, \"id\": \"a0000000000000000000\", \"name\": \"m\", \"state\": "
            "\"Failed\", \"created_at\": \"2026-09-02T20:08:03.1Z\", \"error\": \"guest GPU init "
            "failed\", \"boot\": {\"kernel\": \"/i/k\", \"initrd\": \"/i/r\", \"cmdline\": \"\", "
            "\"disk\": \"/i/d\"}, \"vcpus\": 256, \"memory_mb\": 1048576, \"gpu\": {\"profile\": "
            "\"GRID A100-4C\", \"framework\": \"mdev\", \"device_path\": "
            "\"/srv/sim/bus/mdev/devices/" MDEV_UUID "\", \"mdev_uuid\": \"" MDEV_UUID
            "\", \"claimed_at\": \"2026-09-02T20:08:04.000000001Z\"}}\n",
            "{\"version\": 1, \"id\": \"zzzzzzzzzzzzzzzzzzzz\", \"name\": \"disk-only\", "
            "\"state\": \"Stopped\", \"created_at\": \"2026-09-02T20:08:03Z\", \"boot\": "
            "{\"disk\": \"/var/lib/vgpud/images/disk.raw\"}, \"vcpus\": 1, \"memory_mb\": 128}\n",
            "{\"version\": 1, \"id\": \"0123456789abcdefghij\", \"name\": \"unclaimed\", "
            "\"state\": \"Creating\", \"created_at\": \"2026-09-02T20:08:03Z\", \"boot\": "
            "{\"kernel\": \"/k\"}, \"vcpus\": 1, \"memory_mb\": 128, \"gpu\": {\"profile\": "
            "\"NVIDIA "
            "L40S-2Q\"}, \"hypervisor\": {\"qmp_socket\": \"/run/q.sock\"}}\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(records); i++) {
                _cleanup_(instance_record_done) InstanceRecord rec = {0};
                parse_ok(records[i], &rec);
                _cleanup_free_ char *out = encode(&rec);
                assert_string_equal(out, records[i]);
        }

        /* GEN-9 on read, GEN-8 on write: an offset reads, and is written back in UTC. */
        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        _cleanup_free_ char *offset = mutate(records[1], "20:08:03Z", "22:08:03.500+02:00");
        parse_ok(offset, &rec);
        _cleanup_free_ char *out = encode(&rec);
        assert_non_null(strstr(out, "\"created_at\": \"2026-09-02T20:08:03.5Z\""));

        /* An unclaimed record with a profile: gpu holds the profile alone. */
        _cleanup_(instance_record_done) InstanceRecord unclaimed = {0};
        parse_ok(records[2], &unclaimed);
        assert_false(instance_record_is_claimed(&unclaimed));
        assert_true(timestamp_is_zero(unclaimed.gpu.claimed_at));
        assert_int_equal(unclaimed.hypervisor.pid, 0);

        /* An empty hypervisor object is accepted and omitted on write (INST-2). */
        _cleanup_(instance_record_done) InstanceRecord empty = {0};
        _cleanup_free_ char *with_empty =
            mutate(records[1], "\"memory_mb\": 128}", "\"memory_mb\": 128, \"hypervisor\": {}}");
        parse_ok(with_empty, &empty);
        _cleanup_free_ char *out_empty = encode(&empty);
        assert_string_equal(out_empty, records[1]);
}

typedef struct Refusal {
        const char *from, *to; /* the change to the base record */
        const char *message;   /* a part of the message */
} Refusal;

static void assert_record_refused(const char *text, size_t size, const char *message)
{
        _cleanup_free_ char *error = NULL;
        InstanceRecord rec = {.name = (char *)"untouched"};
        int r = instance_record_from_json(text, size, &rec, &error);
        if (r != -EBADMSG)
                fail_msg("%.*s: %d (%s), expected -EBADMSG", (int)size, text, r,
                         error ? error : "(no message)");
        assert_non_null(error);
        if (!strstr(error, message))
                fail_msg("%.*s:\n  message \"%s\"\n  lacks \"%s\"", (int)size, text, error,
                         message);
        assert_null(strchr(error, '\n'));
        assert_string_equal(rec.name, "untouched"); /* written only on success */
}

/* INST-2, INST-3, INST-4, INST-5, GEN-6, GEN-8, GEN-9: every refusal of instance.json names the
 * key. */
static void test_record_refusals(void **state)
{
        static const Refusal refusals[] = {
            /* version */
            {"\"version\": 1", "\"version\": 2", "version 2 is not supported"},
            {"\"version\": 1", "\"version\": \"1\"", "version must be an integer"},
            {"\"version\": 1, ", "", "version is required"},
            /* unknown keys at every level */
            {"\"vcpus\": 4", "\"vcpus\": 4, \"extra\": 1", "unknown key \"extra\""},
            {"\"cmdline\": \"console=ttyS0\"", "\"cmdline\": \"console=ttyS0\", \"append\": \"\"",
             "unknown key \"boot.append\""},
            {"\"profile\": \"NVIDIA L40S-2Q\"", "\"profile\": \"NVIDIA L40S-2Q\", \"vf\": 1",
             "unknown key \"gpu.vf\""},
            {"\"pid\": 4242", "\"pid\": 4242, \"pidfd\": 3", "unknown key \"hypervisor.pidfd\""},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"placement\": {\"consumer\": \"" CONSUMER
             "\", \"gpu\": \"0000:e3:00.0\", \"x\": 1}",
             "unknown key \"placement.x\""},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"\\u001b[2J\": 1", "unknown key \"\\x1b[2J\""},
            /* wrong types, quoted integers */
            {"\"id\": \"" EXAMPLE_ID "\"", "\"id\": 7", "id must be a string"},
            {"\"name\": \"render-01\"", "\"name\": true", "name must be a string"},
            {"\"vcpus\": 4", "\"vcpus\": \"4\"", "vcpus must be an integer"},
            {"\"vcpus\": 4", "\"vcpus\": 4.0", "vcpus must be an integer"},
            {"\"memory_mb\": 8192", "\"memory_mb\": \"8192\"", "memory_mb must be an integer"},
            {"\"memory_mb\": 8192", "\"memory_mb\": null", "memory_mb must be an integer"},
            {"\"pid\": 4242", "\"pid\": \"4242\"", "hypervisor.pid must be an integer"},
            {"\"start_time\": 1234567", "\"start_time\": \"1234567\"",
             "hypervisor.start_time must be an integer"},
            {"\"boot\": {\"kernel\": \"/var/lib/vgpud/images/vmlinuz\", \"cmdline\": "
             "\"console=ttyS0\"}",
             "\"boot\": [\"/vmlinuz\"]", "boot must be an object"},
            {"{\"profile\": \"NVIDIA L40S-2Q\", \"framework\": \"vendor-vfio\", \"device_path\": "
             "\"/sys/bus/pci/devices/0000:e3:00.6\", \"claimed_at\": "
             "\"2026-09-02T20:08:04.5974Z\"}",
             "\"NVIDIA L40S-2Q\"", "gpu must be an object"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"error\": null", "error must be a string"},
            {"\"cmdline\": \"console=ttyS0\"", "\"cmdline\": 1", "boot.cmdline must be a string"},
            {"\"boot_id\": \"<uuid>\"", "\"boot_id\": 1", "hypervisor.boot_id must be a string"},
            /* ranges (INST-5) */
            {"\"vcpus\": 4", "\"vcpus\": 0", "vcpus must be 1..256"},
            {"\"vcpus\": 4", "\"vcpus\": 257", "vcpus must be 1..256"},
            {"\"vcpus\": 4", "\"vcpus\": -4", "vcpus must be 1..256"},
            {"\"vcpus\": 4", "\"vcpus\": 4294967297", "vcpus must be 1..256"},
            {"\"memory_mb\": 8192", "\"memory_mb\": 127", "memory_mb must be 128..1048576"},
            {"\"memory_mb\": 8192", "\"memory_mb\": 1048577", "memory_mb must be 128..1048576"},
            {"\"memory_mb\": 8192", "\"memory_mb\": 99999999999999999999", "malformed JSON"},
            /* id (INST-3) and name (INST-4) */
            {EXAMPLE_ID, "K3X9Q2M8V1C4Z7N5B0WD", "id must be 20 characters of [a-z0-9]"},
            {EXAMPLE_ID, "k3x9q2m8v1c4z7n5b0w", "id must be 20 characters"},
            {EXAMPLE_ID, "k3x9q2m8v1c4z7n5b0wdx", "id must be 20 characters"},
            {EXAMPLE_ID, "k3x9q2m8v1c4z7n5b0w-", "id must be 20 characters"},
            {EXAMPLE_ID, "../../../etc/passwd0", "id must be 20 characters"},
            {"render-01", "-render", "name must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            {"render-01", "render-", "name must match"},
            {"render-01", "Render-01", "name must match"},
            {"render-01", "render_01", "name must match"},
            {"\"name\": \"render-01\"", "\"name\": \"\"", "name must match"},
            {"render-01", "a123456789012345678901234567890123456789012345678901234567890123",
             "name must match"},
            /* state */
            {"\"Running\"", "\"running\"", "state must be Creating, Running, Stopping"},
            /* timestamps (GEN-8, GEN-9) */
            {"2026-09-02T20:08:03Z", "yesterday", "created_at must be an RFC 3339 timestamp"},
            {"2026-09-02T20:08:03Z", "2026-09-02 20:08:03Z", "created_at must be an RFC 3339"},
            {"2026-09-02T20:08:03Z", "0001-01-01T00:00:00Z",
             "created_at must not be the zero time"},
            {"2026-09-02T20:08:03Z", "9999-12-31T23:59:59-01:00", "created_at must be an RFC 3339"},
            {"2026-09-02T20:08:04.5974Z", "2026-09-02T20:08:04.597400Z",
             "gpu.claimed_at must be written 2026-09-02T20:08:04.5974Z (GEN-8)"},
            {"2026-09-02T20:08:04.5974Z", "2026-09-02T22:08:04.5974+02:00",
             "gpu.claimed_at must be written 2026-09-02T20:08:04.5974Z"},
            {"2026-09-02T20:08:04.5974Z", "0001-01-01T00:00:00Z",
             "gpu.claimed_at must not be the zero time"},
            {"2026-09-02T20:08:04.5974Z", "now", "gpu.claimed_at must be an RFC 3339 timestamp"},
            /* half claims */
            {"\"framework\": \"vendor-vfio\", ", "",
             "gpu.framework, gpu.device_path and gpu.claimed_at must be given together"},
            {"\"device_path\": \"/sys/bus/pci/devices/0000:e3:00.6\", ", "",
             "must be given together"},
            {", \"claimed_at\": \"2026-09-02T20:08:04.5974Z\"", "", "must be given together"},
            {"\"profile\": \"NVIDIA L40S-2Q\", ", "", "gpu.profile is required"},
            {"\"vendor-vfio\"", "\"nvidia\"", "gpu.framework must be vendor-vfio or mdev"},
            {"\"framework\": \"vendor-vfio\"",
             "\"framework\": \"vendor-vfio\", \"mdev_uuid\": \"" MDEV_UUID "\"",
             "gpu.mdev_uuid must be given exactly when gpu.framework is mdev"},
            {"/sys/bus/pci/devices/0000:e3:00.6", "/etc/passwd",
             "gpu.device_path must end in /bus/pci/devices/<VF address>"},
            {"0000:e3:00.6", "0000:E3:00.6", "gpu.device_path must end in"},
            {"/sys/bus/pci/devices/0000:e3:00.6", "sys/bus/pci/devices/0000:e3:00.6",
             "gpu.device_path must end in"},
            {"\"profile\": \"NVIDIA L40S-2Q\"", "\"profile\": \"\"",
             "gpu.profile must be 1..256 printable ASCII characters"},
            {"\"profile\": \"NVIDIA L40S-2Q\"", "\"profile\": \"NVIDIA\\nL40S-2Q\"",
             "gpu.profile must be 1..256 printable ASCII characters"},
            /* the VMM's identity */
            {", \"boot_id\": \"<uuid>\"", "",
             "hypervisor.pid, hypervisor.start_time and hypervisor.boot_id must be given "
             "together"},
            {"\"pid\": 4242, ", "", "must be given together"},
            {"\"pid\": 4242", "\"pid\": 0", "hypervisor.pid must be 1..2147483647"},
            {"\"pid\": 4242", "\"pid\": -1", "hypervisor.pid must be 1..2147483647"},
            {"\"pid\": 4242", "\"pid\": 2147483648", "hypervisor.pid must be 1..2147483647"},
            {"\"start_time\": 1234567", "\"start_time\": -1",
             "hypervisor.start_time must not be negative"},
            {"\"<uuid>\"", "\"\"", "hypervisor.boot_id must be 1..64 printable ASCII"},
            {"\"/run/vgpud/instances/<id>/qmp.sock\"", "\"qmp.sock\"",
             "hypervisor.qmp_socket must be an absolute path without . or .. components"},
            /* boot (INST-5, INST-6's form) */
            {"\"/var/lib/vgpud/images/vmlinuz\"", "\"vmlinuz\"",
             "boot.kernel must be an absolute path without . or .. components"},
            {"/var/lib/vgpud/images/vmlinuz", "/var/lib/vgpud/../../etc/shadow",
             "boot.kernel must be an absolute path without . or .. components"},
            {"\"console=ttyS0\"", "\"console=ttyS0\\ninit=/bin/sh\"",
             "boot.cmdline must not contain a newline"},
            {"\"kernel\": \"/var/lib/vgpud/images/vmlinuz\", ", "",
             "boot needs boot.kernel or boot.disk"},
            {"\"kernel\": \"/var/lib/vgpud/images/vmlinuz\", ",
             "\"disk\": \"/var/lib/vgpud/images/disk.raw\", ", "boot.cmdline needs boot.kernel"},
            /* error */
            {"\"vcpus\": 4", "\"vcpus\": 4, \"error\": \"\"", "error must not be empty"},
            /* JSON itself (GEN-6) */
            {"\"vcpus\": 4", "\"vcpus\": 4, \"vcpus\": 4", "malformed JSON: duplicate object key"},
            {"render-01", "render\\u0000-01", "malformed JSON"},
            {"\"name\": \"render-01\"", "'name': 'render-01'", "malformed JSON"},
            {"}}", "}} x", "malformed JSON"},
        };

        _cleanup_free_ char *base = example_one_line();
        for (size_t i = 0; i < ELEMENTSOF(refusals); i++) {
                _cleanup_free_ char *text = mutate(base, refusals[i].from, refusals[i].to);
                assert_record_refused(text, strlen(text), refusals[i].message);
        }

        /* mdev claims: the UUID goes with mdev, is a UUID, and is the device path's end. */
        static const char mdev[] =
            "{\"version\": 1, \"id\": \"a0000000000000000000\", \"name\": \"m\", \"state\": "
            "\"Running\", \"created_at\": \"2026-09-02T20:08:03Z\", \"boot\": {\"kernel\": "
            "\"/k\"}, \"vcpus\": 1, \"memory_mb\": 128, \"gpu\": {\"profile\": \"GRID A100-4C\", "
            "\"framework\": \"mdev\", \"device_path\": \"/sys/bus/mdev/devices/" MDEV_UUID
            "\", \"mdev_uuid\": \"" MDEV_UUID "\", \"claimed_at\": \"2026-09-02T20:08:04Z\"}}";
        static const Refusal mdev_refusals[] = {
            {", \"mdev_uuid\": \"" MDEV_UUID "\"", "",
             "gpu.mdev_uuid must be given exactly when gpu.framework is mdev"},
            {"\"mdev_uuid\": \"" MDEV_UUID "\"",
             "\"mdev_uuid\": \"2B7A3C4D-5E6F-4A1B-9C2D-3E4F5A6B7C8D\"",
             "gpu.mdev_uuid must be a lowercase UUID"},
            {"\"mdev_uuid\": \"" MDEV_UUID "\"", "\"mdev_uuid\": \"../../../../etc\"",
             "gpu.mdev_uuid must be a lowercase UUID"},
            {"devices/" MDEV_UUID, "devices/00000000-0000-4000-8000-000000000000",
             "gpu.device_path must end in /bus/mdev/devices/<gpu.mdev_uuid>"},
            {"/bus/mdev/devices/", "/bus/pci/devices/", "gpu.device_path must end in"},
            {"\"framework\": \"mdev\", \"device_path\": \"/sys/bus/mdev/devices/" MDEV_UUID "\", ",
             "", "must be given together"},
            {"\"framework\": \"mdev\", \"device_path\": \"/sys/bus/mdev/devices/" MDEV_UUID
             "\", \"mdev_uuid\": \"" MDEV_UUID "\", \"claimed_at\": \"2026-09-02T20:08:04Z\"",
             "\"mdev_uuid\": \"" MDEV_UUID "\"",
             "gpu.mdev_uuid must be given exactly when gpu.framework is mdev"},
        };
        _cleanup_(instance_record_done) InstanceRecord ok = {0};
        parse_ok(mdev, &ok);
        for (size_t i = 0; i < ELEMENTSOF(mdev_refusals); i++) {
                _cleanup_free_ char *text =
                    mutate(mdev, mdev_refusals[i].from, mdev_refusals[i].to);
                assert_record_refused(text, strlen(text), mdev_refusals[i].message);
        }

        /* Whole documents that are no record at all. */
        assert_record_refused("", 0, "malformed JSON");
        assert_record_refused("[]", 2, "expected a JSON object");
        assert_record_refused("null", 4, "malformed JSON");
        assert_record_refused(base, strlen(base) / 2, "malformed JSON"); /* truncated */
        assert_record_refused("{}", 2, "version is required");

        /* GEN-6: 17 levels are refused before the parser sees them, 16 get as far as the keys. */
        char deep[64] = "";
        for (int i = 0; i < 17; i++)
                strcat(deep, "[");
        assert_record_refused(deep, strlen(deep), "JSON nested deeper than 16 levels");
        _cleanup_free_ char *sixteen =
            mutate(base, "\"vcpus\": 4", "\"vcpus\": 4, \"x\": [[[[[[[[[[[[[[[]]]]]]]]]]]]]]]");
        assert_record_refused(sixteen, strlen(sixteen), "unknown key \"x\"");
}

/* A valid record padded with blanks before its last brace to exactly size bytes. */
static char *padded_record(size_t size)
{
        _cleanup_free_ char *base = example_one_line();
        size_t n = strlen(base);
        assert_true(size > n);
        char *big = malloc(size + 1);
        assert_non_null(big);
        memcpy(big, base, n - 1);
        memset(big + n - 1, ' ', size - n);
        big[size - 1] = '}';
        big[size] = 0;
        return big;
}

/* GEN-5: a record past INSTANCE_RECORD_MAX is refused, never truncated. */
static void test_record_oversize(void **state)
{
        _cleanup_free_ char *over = padded_record(INSTANCE_RECORD_MAX + 1),
                            *at = padded_record(INSTANCE_RECORD_MAX);
        assert_record_refused(over, strlen(over), "larger than 3145728 bytes");

        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(instance_record_from_json(at, strlen(at), &rec, &error), 0);
}

/* The text of a file under tests/data, malloc'd. */
static char *data_file(const char *rel)
{
        const char *data = getenv("VGPUD_TEST_DATA");
        _cleanup_free_ char *path = NULL;
        char *text = NULL;
        assert_non_null(data);
        assert_int_equal(strprintf(&path, "%s/%s", data, rel), 0);
        assert_int_equal(read_file_at(AT_FDCWD, path, INSTANCE_RECORD_MAX, &text, NULL), 0);
        return text;
}

/* Loads text, encodes it, and checks that the encoding loads and encodes to the same bytes,
 * and that a copy does too; returns the first encoding. */
static char *round_trip(const char *text)
{
        _cleanup_(instance_record_done) InstanceRecord rec = {0}, again = {0}, copy = {0};
        parse_ok(text, &rec);
        char *out = encode(&rec);
        parse_ok(out, &again);
        _cleanup_free_ char *out2 = encode(&again);
        assert_string_equal(out2, out);
        assert_int_equal(instance_record_copy(&rec, &copy), 0);
        _cleanup_free_ char *out3 = encode(&copy);
        assert_string_equal(out3, out);
        return out;
}

/*
 * INST-2: records of every earlier shape load unchanged. tests/data/records holds one written
 * by the record code as it stood before the device fields (every field it knew), and the shapes
 * the daemon tests write by hand (test-hostile.py, test-liveness-ambiguous.py, test-chaos.py);
 * the fuzz corpus's records that loaded then load now.
 */
static void test_earlier_shapes_load(void **state)
{
        static const char *const files[] = {
            "records/written-by-v1.json",
            "records/hostile-shape.json",
            "records/liveness-shape.json",
            "records/chaos-shape.json",
            "../../fuzz/corpus/instance-json/disk-only-offset.json",
            "../../fuzz/corpus/instance-json/mdev-failed.json",
            "../../fuzz/corpus/instance-json/placement.json",
            "../../fuzz/corpus/instance-json/spec-example-one-line.json",
            "../../fuzz/corpus/instance-json/spec-example.json",
            "../../fuzz/corpus/instance-json/unclaimed-compact.json",
        };
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                _cleanup_free_ char *text = data_file(files[i]);
                _cleanup_free_ char *out = round_trip(text);
                /* INST-2: a record vgpud wrote is written again byte for byte. */
                if (i == 0)
                        assert_string_equal(out, text);
        }
}

/* INST-2, DISK-5, DISK-8, NET-1, NET-2, NET-5, SEED-1: the device fields are kept as written. */
static void test_device_fields_round_trip(void **state)
{
        static const char *const files[] = {
            "records/devices.json",
            "records/devices-user-data.json",
        };
        for (size_t i = 0; i < ELEMENTSOF(files); i++) {
                _cleanup_free_ char *text = data_file(files[i]);
                _cleanup_free_ char *out = round_trip(text);
                assert_string_equal(out, text);
        }

        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        _cleanup_free_ char *text = data_file("records/devices.json");
        parse_ok(text, &rec);
        assert_string_equal(rec.disk.image, "debian-12");
        assert_int_equal(rec.disk.size_gb, 20);
        assert_int_equal(rec.n_volumes, 3);
        assert_string_equal(rec.volumes[1].id, "v0lume0000000000000b");
        assert_true(rec.volumes[1].readonly);
        assert_int_equal(rec.volumes[2].state, INSTANCE_VOLUME_DETACHING);
        assert_int_equal(rec.network.mode, INSTANCE_NETWORK_NAT);
        assert_int_equal(rec.network.prefix, 24);
        assert_int_equal(strv_length(rec.network.dns), 2);
        assert_int_equal(rec.network.n_ports, 2);
        assert_true(rec.network.ports[1].udp);
        assert_int_equal(rec.network.ports[1].guest, 53);
        assert_int_equal(strv_length(rec.cloud_init.ssh_authorized_keys), 2);
        assert_string_equal(rec.cloud_init.hostname, "render-01");

        /* INST-2: a record without them has none, and writes none. */
        _cleanup_(instance_record_done) InstanceRecord plain = {0};
        parse_ok(example, &plain);
        assert_null(plain.disk.image);
        assert_int_equal(plain.n_volumes, 0);
        assert_int_equal(plain.network.mode, INSTANCE_NETWORK_ABSENT);
        assert_null(plain.cloud_init.ssh_authorized_keys);
        /* An empty array or object is no value (INST-2), and is not written. */
        _cleanup_free_ char *one = example_one_line();
        _cleanup_free_ char *empty =
            mutate(one, "\"vcpus\": 4", "\"vcpus\": 4, \"volumes\": [], \"cloud_init\": {}");
        _cleanup_free_ char *out = round_trip(empty);
        _cleanup_free_ char *expected = NULL;
        assert_int_equal(strprintf(&expected, "%s\n", one), 0);
        assert_string_equal(out, expected);
}

/* A cloud_init of n keys of key_size bytes each, in the base record. */
static char *with_keys(size_t n, size_t key_size)
{
        _cleanup_free_ char *key = malloc(key_size + 1), *list = NULL, *one = example_one_line();
        assert_non_null(key);
        memset(key, 'A', key_size);
        key[key_size] = 0;
        for (size_t i = 0; i < n; i++)
                assert_int_equal(strextend(&list, "%s\"%s\"", i ? ", " : "", key), 0);
        _cleanup_free_ char *to = NULL;
        assert_int_equal(strprintf(&to,
                                   "\"vcpus\": 4, \"cloud_init\": {\"ssh_authorized_keys\": [%s]}",
                                   list ? list : ""),
                         0);
        return mutate(one, "\"vcpus\": 4", to);
}

/* INST-2, DISK-8, NET-1, SEED-1, GEN-5: the device fields' shapes, each refusal naming its path. */
static void test_device_fields_refused(void **state)
{
        static const Refusal cases[] = {
            /* types and required keys, by path */
            {"\"vcpus\": 4", "\"vcpus\": 4, \"volumes\": {}", "volumes must be an array"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"volumes\": [1]", "volumes[0] must be an object"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"volumes\": [{\"id\": \"aaaaaaaaaaaaaaaaaaaa\", \"readonly\": true, "
             "\"state\": \"attached\"}, {\"readonly\": true, \"state\": \"attached\"}]",
             "volumes[1].id is required"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"volumes\": [{\"id\": \"aaaaaaaaaaaaaaaaaaaa\", \"readonly\": 0, "
             "\"state\": \"attached\"}]",
             "volumes[0].readonly must be a boolean"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"volumes\": [{\"id\": \"aaaaaaaaaaaaaaaaaaaa\", \"readonly\": true, "
             "\"state\": \"attached\", \"colour\": 1}]",
             "unknown key \"volumes[0].colour\""},
            /* enumerations and forms */
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"volumes\": [{\"id\": \"aaaaaaaaaaaaaaaaaaaa\", \"readonly\": true, "
             "\"state\": \"gone\"}]",
             "volumes[0].state must be attached, attaching or detaching"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"volumes\": [{\"id\": \"AAAA\", \"readonly\": true, "
             "\"state\": \"attached\"}]",
             "volumes[0].id must be 20 characters of [a-z0-9]"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"volumes\": [{\"id\": \"aaaaaaaaaaaaaaaaaaaa\", \"readonly\": true, "
             "\"state\": \"attached\"}, {\"id\": \"aaaaaaaaaaaaaaaaaaaa\", \"readonly\": false, "
             "\"state\": \"attached\"}]",
             "volumes[1].id repeats volumes[0]"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"disk\": {\"image\": \"debian-12\"}",
             "disk.size_gb is required"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"disk\": {\"image\": \"Debian\", \"size_gb\": 2}",
             "disk.image must match"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"disk\": {\"image\": \"debian\", \"size_gb\": 0}",
             "disk.size_gb must be 1..1048576"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"network\": {\"bridge\": \"br0\"}",
             "network.mode is required"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"network\": {\"mode\": \"host\"}",
             "network.mode must be nat, bridge or none"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"network\": {\"mode\": \"bridge\", \"bridge\": \"a/b\"}",
             "network.bridge must be an interface name"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"network\": {\"mode\": \"bridge\", \"bridge\": \"sixteen-bytes-xx\"}",
             "network.bridge must be at most 15 bytes"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"network\": {\"mode\": \"nat\", \"mac\": \"52:54:00:AA:00:01\"}",
             "network.mac must be six lowercase hex pairs"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"network\": {\"mode\": \"nat\", \"ip\": \"10.0.0.01\"}",
             "network.ip must be an IPv4 address"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"network\": {\"mode\": \"nat\", \"prefix\": 33}",
             "network.prefix must be 1..32"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"network\": {\"mode\": \"nat\", \"dns\": [\"::1\"]}",
             "network.dns[0] must be an IPv4 address"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"network\": {\"mode\": \"nat\", \"ports\": [{\"host\": 20022, "
             "\"guest\": 22, \"protocol\": \"sctp\"}]}",
             "network.ports[0].protocol must be tcp or udp"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"network\": {\"mode\": \"nat\", \"ports\": [{\"host\": 65536, "
             "\"guest\": 22, \"protocol\": \"tcp\"}]}",
             "network.ports[0].host must be 1..65535"},
            {"\"vcpus\": 4",
             "\"vcpus\": 4, \"cloud_init\": {\"ssh_authorized_keys\": \"ssh-ed25519 A\"}",
             "cloud_init.ssh_authorized_keys must be an array"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"cloud_init\": {\"ssh_authorized_keys\": [\"a\\nb\"]}",
             "cloud_init.ssh_authorized_keys[0] must not contain control characters"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"cloud_init\": {\"ssh_authorized_keys\": [\"\"]}",
             "cloud_init.ssh_authorized_keys[0] must not be empty"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"cloud_init\": {\"hostname\": \"-x\"}",
             "cloud_init.hostname must match"},
            {"\"vcpus\": 4", "\"vcpus\": 4, \"cloud_init\": {\"vendor_data\": \"x\"}",
             "unknown key \"cloud_init.vendor_data\""},
        };
        _cleanup_free_ char *base = example_one_line();
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *text = mutate(base, cases[i].from, cases[i].to);
                assert_record_refused(text, strlen(text), cases[i].message);
        }

        /* Counts (DISK-8: 8 volumes; NET-1: 16 ports; SEED-1: 64 keys of 16 KiB). */
        _cleanup_free_ char *vols = NULL;
        for (size_t i = 0; i < INSTANCE_VOLUMES_MAX + 1; i++)
                assert_int_equal(strextend(&vols,
                                           "%s{\"id\": \"aaaaaaaaaaaaaaaaaa%02zu\", \"readonly\": "
                                           "true, \"state\": \"attached\"}",
                                           i ? ", " : "", i),
                                 0);
        _cleanup_free_ char *to = NULL;
        assert_int_equal(strprintf(&to, "\"vcpus\": 4, \"volumes\": [%s]", vols), 0);
        _cleanup_free_ char *nine = mutate(base, "\"vcpus\": 4", to);
        assert_record_refused(nine, strlen(nine), "volumes must hold at most 8 entries");

        _cleanup_free_ char *too_many = with_keys(SEED_SSH_KEYS_MAX + 1, 16);
        assert_record_refused(too_many, strlen(too_many),
                              "cloud_init.ssh_authorized_keys must hold at most 64 entries");
        _cleanup_free_ char *too_long = with_keys(1, SEED_SSH_KEY_MAX + 1);
        assert_record_refused(too_long, strlen(too_long),
                              "cloud_init.ssh_authorized_keys[0] must be at most 16384 bytes");
}

/* GEN-5: the largest record the device fields allow fits INSTANCE_RECORD_MAX, with room. */
static void test_record_max_fits(void **state)
{
        /* Keys whose comment fills the line with quotes, each written escaped: the worst a key
         * that passes SEED-1 can cost as JSON. */
        static const char head[] =
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAID0oh26XIkYjYeeyjD0ClpU85ChzV0DKTzSjh4oVXB8V ";
        _cleanup_free_ char *key = malloc(SEED_SSH_KEY_MAX + 1);
        assert_non_null(key);
        memcpy(key, head, sizeof head - 1);
        memset(key + sizeof head - 1, '"', SEED_SSH_KEY_MAX - (sizeof head - 1));
        key[SEED_SSH_KEY_MAX] = 0;
        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        parse_ok(example, &rec);
        for (size_t i = 0; i < SEED_SSH_KEYS_MAX; i++)
                assert_int_equal(strv_push(&rec.cloud_init.ssh_authorized_keys, key), 0);
        /* user_data of control bytes after its first line, each written as \u00XX. A record
         * keeps keys and user data apart (SEED-1), so the two are measured one at a time. */
        _cleanup_free_ char *user_data = malloc(SEED_USER_DATA_MAX + 1);
        assert_non_null(user_data);
        memset(user_data, 0x01, SEED_USER_DATA_MAX);
        memcpy(user_data, "#cloud-config\n", strlen("#cloud-config\n"));
        user_data[SEED_USER_DATA_MAX] = 0;
        rec.volumes = calloc(INSTANCE_VOLUMES_MAX, sizeof *rec.volumes);
        assert_non_null(rec.volumes);
        for (size_t i = 0; i < INSTANCE_VOLUMES_MAX; i++) {
                snprintf(rec.volumes[i].id, sizeof rec.volumes[i].id, "aaaaaaaaaaaaaaaaaa%02zu", i);
                rec.volumes[i].state = INSTANCE_VOLUME_DETACHING;
        }
        rec.n_volumes = INSTANCE_VOLUMES_MAX;

        _cleanup_free_ char *out = encode(&rec);
        size_t n = strlen(out);
        assert_true(n <= INSTANCE_RECORD_MAX);
        /* The margin the cap's comment promises: more than a tenth is left. */
        assert_true(n < INSTANCE_RECORD_MAX - INSTANCE_RECORD_MAX / 10);

        strv_free(TAKE_PTR(rec.cloud_init.ssh_authorized_keys));
        rec.cloud_init.user_data = TAKE_PTR(user_data);
        _cleanup_free_ char *out_ud = encode(&rec);
        assert_true(strlen(out_ud) < INSTANCE_RECORD_MAX - INSTANCE_RECORD_MAX / 10);
}

typedef enum BadRecord {
        BAD_STATE,
        BAD_NAME,
        BAD_NO_NAME,
        BAD_CREATED_AT,
        BAD_VCPUS,
        BAD_MEMORY,
        BAD_ID,
        BAD_NO_BOOT,
        BAD_CLAIM_WITHOUT_PROFILE,
        BAD_CLAIM_WITHOUT_CLAIMED_AT,
        BAD_FRAMEWORK_ALONE,
        BAD_PID_WITHOUT_BOOT_ID,
        BAD_NEGATIVE_PID,
        BAD_NOT_UTF8,
        _BAD_MAX,
} BadRecord;

static void spoil(InstanceRecord *r, BadRecord how)
{
        switch (how) {
        case BAD_STATE:
                r->state = _INSTANCE_STATE_MAX;
                break;
        case BAD_NAME:
                free(r->name);
                r->name = strdup("Bad Name");
                break;
        case BAD_NO_NAME:
                free(r->name);
                r->name = NULL;
                break;
        case BAD_CREATED_AT:
                r->created_at = (Timestamp){.sec = TIMESTAMP_ZERO_SEC};
                break;
        case BAD_VCPUS:
                r->vcpus = 0;
                break;
        case BAD_MEMORY:
                r->memory_mb = INSTANCE_MEMORY_MB_MAX + 1;
                break;
        case BAD_ID:
                r->id[3] = 'Q';
                break;
        case BAD_NO_BOOT:
                free(r->boot.kernel);
                r->boot.kernel = NULL;
                break;
        case BAD_CLAIM_WITHOUT_PROFILE:
                r->gpu.framework = strdup("vendor-vfio");
                r->gpu.device_path = strdup("/sys/bus/pci/devices/0000:e3:00.6");
                r->gpu.claimed_at = ts("2026-09-02T20:08:04Z");
                break;
        case BAD_CLAIM_WITHOUT_CLAIMED_AT:
                r->gpu.profile = strdup("NVIDIA L40S-2Q");
                r->gpu.framework = strdup("vendor-vfio");
                r->gpu.device_path = strdup("/sys/bus/pci/devices/0000:e3:00.6");
                r->gpu.claimed_at = (Timestamp){.sec = TIMESTAMP_ZERO_SEC};
                break;
        case BAD_FRAMEWORK_ALONE:
                r->gpu.profile = strdup("NVIDIA L40S-2Q");
                r->gpu.framework = strdup("mdev");
                r->gpu.claimed_at = ts("2026-09-02T20:08:04Z");
                break;
        case BAD_PID_WITHOUT_BOOT_ID:
                r->hypervisor.pid = 7;
                r->hypervisor.start_time = 9;
                break;
        case BAD_NEGATIVE_PID:
                r->hypervisor.pid = -7;
                r->hypervisor.boot_id = strdup("b");
                break;
        case BAD_NOT_UTF8:
                r->error = strdup("bad \xff byte");
                break;
        case _BAD_MAX:
                break;
        }
}

/* INST-1, INST-2: the writer refuses a record it could not load again (no half claim on disk). */
static void test_to_json_refuses_bad_records(void **state)
{
        static const char sentinel[] = "untouched";
        for (BadRecord how = 0; how < _BAD_MAX; how++) {
                _cleanup_(instance_record_done) InstanceRecord r;
                make_record(&r, "a0000000000000000000");
                spoil(&r, how);
                char *out = (char *)sentinel;
                size_t n = 77;
                int k = instance_record_to_json(&r, &out, &n);
                if (k != -EINVAL)
                        fail_msg("case %d: %d, expected -EINVAL", how, k);
                assert_ptr_equal(out, sentinel);
                assert_int_equal(n, 77);
        }

        /* The zeroed claimed_at of a fresh record is no claim and is not written. */
        _cleanup_(instance_record_done) InstanceRecord fresh;
        make_record(&fresh, "a0000000000000000000");
        fresh.gpu.profile = strdup("NVIDIA L40S-2Q");
        _cleanup_free_ char *out = encode(&fresh);
        assert_non_null(strstr(out, "\"gpu\": {\"profile\": \"NVIDIA L40S-2Q\"}"));
        assert_null(strstr(out, "claimed_at"));
        assert_null(strstr(out, "hypervisor"));
}

/* The record helpers: a deep copy, claim and hypervisor clearing. */
static void test_copy_and_clear(void **state)
{
        _cleanup_(instance_record_done) InstanceRecord rec = {0}, copy = {0};
        parse_ok(example, &rec);
        rec.error = strdup("an error");
        assert_int_equal(instance_record_copy(&rec, &copy), 0);
        _cleanup_free_ char *a = encode(&rec), *b = encode(&copy);
        assert_string_equal(a, b);
        assert_ptr_not_equal(rec.name, copy.name);
        assert_ptr_not_equal(rec.gpu.device_path, copy.gpu.device_path);

        instance_record_clear_claim(&copy);
        assert_false(instance_record_is_claimed(&copy));
        assert_string_equal(copy.gpu.profile, "NVIDIA L40S-2Q");
        assert_null(copy.gpu.framework);
        assert_null(copy.gpu.mdev_uuid);
        assert_true(timestamp_is_zero(copy.gpu.claimed_at));
        instance_record_clear_hypervisor(&copy);
        assert_int_equal(copy.hypervisor.pid, 0);
        assert_int_equal(copy.hypervisor.start_time, 0);
        assert_null(copy.hypervisor.boot_id);
        assert_null(copy.hypervisor.qmp_socket);
        _cleanup_free_ char *c = encode(&copy);
        assert_non_null(strstr(c, "\"gpu\": {\"profile\": \"NVIDIA L40S-2Q\"}}\n"));
        assert_null(strstr(c, "hypervisor"));

        /* The original is untouched by what was done to the copy. */
        assert_true(instance_record_is_claimed(&rec));
        instance_record_done(&rec);
        assert_null(rec.name);
        instance_record_done(&rec); /* twice is harmless */
}

/* ---- identity (INST-3, INST-4) and states -------------------------------------------------- */

/* INST-3: 20 characters of [a-z0-9] from getrandom(), each equally likely. */
static void test_id_generate(void **state)
{
        char id[INSTANCE_ID_LEN + 1];
        assert_int_equal(instance_id_generate(id), 0);
        assert_true(instance_id_is_valid(id));

        /*
         * Chosen bytes, a few per call: 252..255 are dropped (rejection, not modulo: 252 would
         * be 'a' again and favour the first characters); the rest map by byte % 36.
         */
        static const uint8_t bytes[] = {255, 252, 0, 25, 26, 35, 36, 251, 254, 71,
                                        72,  253, 1, 1,  1,  1,  1,  1,   1,   1,
                                        1,   1,   1, 1,  1,  1,  1,  1,   1,   1};
        rnd = (typeof(rnd)){.bytes = bytes, .size = sizeof bytes, .chunk = 5, .eintr = 2};
        assert_int_equal(instance_id_generate(id), 0);
        assert_string_equal(id, "az09a99abbbbbbbbbbbb");
        assert_true(rnd.calls >= 2 + 4); /* the EINTRs were retried, several reads were needed */

        /* A failing getrandom() fails the call and leaves ret alone. */
        memcpy(id, "untouched", 10);
        rnd = (typeof(rnd)){.error = ENOSYS};
        assert_int_equal(instance_id_generate(id), -ENOSYS);
        assert_string_equal(id, "untouched");
        rnd = (typeof(rnd)){0};

        /* Uniform over the alphabet: 40,000 characters, each expected 1111 times (sd ~33). */
        unsigned counts[36] = {0};
        for (int i = 0; i < 2000; i++) {
                assert_int_equal(instance_id_generate(id), 0);
                for (int j = 0; j < INSTANCE_ID_LEN; j++) {
                        char c = id[j];
                        counts[c >= 'a' ? c - 'a' : 26 + c - '0']++;
                }
        }
        for (int i = 0; i < 36; i++)
                if (counts[i] < 900 || counts[i] > 1330)
                        fail_msg("character %d drawn %u times of 40000", i, counts[i]);
}

/* INST-3, INST-4: the id and name forms. */
static void test_id_and_name_forms(void **state)
{
        assert_true(instance_id_is_valid("k3x9q2m8v1c4z7n5b0wd"));
        assert_true(instance_id_is_valid("00000000000000000000"));
        assert_false(instance_id_is_valid(NULL));
        assert_false(instance_id_is_valid(""));
        assert_false(instance_id_is_valid("k3x9q2m8v1c4z7n5b0w"));
        assert_false(instance_id_is_valid("k3x9q2m8v1c4z7n5b0wdd"));
        assert_false(instance_id_is_valid("K3x9q2m8v1c4z7n5b0wd"));
        assert_false(instance_id_is_valid("..x9q2m8v1c4z7n5b0wd"));
        assert_false(instance_id_is_valid("k3x9q2m8v1c4z7n5b0w/"));
        assert_false(instance_id_is_valid(".deleted-k3x9q2m8v1c"));

        static const char *const good[] = {
            "a",   "0",    "render-01",
            "a-b", "a--b", "a12345678901234567890123456789012345678901234567890123456789012"};
        static const char *const bad[] = {
            "",
            "-",
            "-a",
            "a-",
            "A",
            "a_b",
            "a.b",
            "a b",
            "render-01\n",
            "é",
            "a123456789012345678901234567890123456789012345678901234567890123"};
        for (size_t i = 0; i < ELEMENTSOF(good); i++)
                if (!instance_name_is_valid(good[i]))
                        fail_msg("\"%s\" refused", good[i]);
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                if (instance_name_is_valid(bad[i]))
                        fail_msg("\"%s\" accepted", bad[i]);
        assert_false(instance_name_is_valid(NULL));
}

/* INST-8: the state names as records and the API spell them. */
static void test_state_strings(void **state)
{
        static const char *const names[] = {"Creating", "Running", "Stopping",
                                            "Stopped",  "Failed",  "Deleting"};
        assert_int_equal(ELEMENTSOF(names), _INSTANCE_STATE_MAX);
        for (InstanceState s = 0; s < _INSTANCE_STATE_MAX; s++) {
                assert_string_equal(instance_state_to_string(s), names[s]);
                InstanceState back = _INSTANCE_STATE_MAX;
                assert_int_equal(instance_state_from_string(names[s], &back), 0);
                assert_int_equal(back, s);
        }
        assert_null(instance_state_to_string(_INSTANCE_STATE_MAX));
        assert_null(instance_state_to_string((InstanceState)-1));
        InstanceState back = INSTANCE_FAILED;
        assert_int_equal(instance_state_from_string("running", &back), -EINVAL);
        assert_int_equal(instance_state_from_string("", &back), -EINVAL);
        assert_int_equal(instance_state_from_string(NULL, &back), -EINVAL);
        assert_int_equal(back, INSTANCE_FAILED);
}

/* ---- the create body (API-9, INST-4, INST-5, INST-6, INST-7) -------------------------------- */

static const char spec_full[] =
    "{\"name\": \"render-01\", \"vcpus\": 4, \"memory_mb\": 8192, \"boot\": {\"kernel\": "
    "\"/var/lib/vgpud/images/vmlinuz\", \"initrd\": \"/var/lib/vgpud/images/initrd.img\", "
    "\"cmdline\": \"console=ttyS0\", \"disk\": \"/var/lib/vgpud/images/disk.raw\"}, \"gpu\": "
    "{\"profile\": \"NVIDIA L40S-2Q\"}}";

/* API-9: a create body with every key, and one with the fewest. */
static void test_spec_accepted(void **state)
{
        _cleanup_(instance_spec_done) InstanceSpec s = {0}, min = {0};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(instance_spec_from_json(spec_full, strlen(spec_full), &s, &error), 0);
        assert_string_equal(s.name, "render-01");
        assert_int_equal(s.vcpus, 4);
        assert_int_equal(s.memory_mb, 8192);
        assert_string_equal(s.boot.kernel, "/var/lib/vgpud/images/vmlinuz");
        assert_string_equal(s.boot.initrd, "/var/lib/vgpud/images/initrd.img");
        assert_string_equal(s.boot.cmdline, "console=ttyS0");
        assert_string_equal(s.boot.disk, "/var/lib/vgpud/images/disk.raw");
        assert_string_equal(s.profile, "NVIDIA L40S-2Q");

        static const char minimal[] = "{\"boot\": {\"disk\": \"/d\"}, \"memory_mb\": 128, "
                                      "\"vcpus\": 1, \"name\": \"a\"}";
        assert_int_equal(instance_spec_from_json(minimal, strlen(minimal), &min, &error), 0);
        assert_null(min.profile);
        assert_null(min.boot.kernel);
        assert_string_equal(min.boot.disk, "/d");

        /* The limits themselves are inside them (INST-5, INST-6). */
        _cleanup_free_ char *path = malloc(INSTANCE_PATH_MAX + 1),
                            *cmdline = malloc(INSTANCE_CMDLINE_MAX + 1);
        memset(path, 'p', INSTANCE_PATH_MAX);
        path[0] = '/';
        path[INSTANCE_PATH_MAX] = 0;
        memset(cmdline, 'c', INSTANCE_CMDLINE_MAX);
        cmdline[INSTANCE_CMDLINE_MAX] = 0;
        _cleanup_free_ char *body = NULL;
        assert_int_equal(
            strprintf(
                &body,
                "{\"name\": \"a12345678901234567890123456789012345678901234567890123456789012\", "
                "\"vcpus\": 256, \"memory_mb\": 1048576, \"boot\": {\"kernel\": \"%s\", "
                "\"cmdline\": \"%s\"}, \"gpu\": {\"profile\": \"%0256d\"}}",
                path, cmdline, 0),
            0);
        _cleanup_(instance_spec_done) InstanceSpec big = {0};
        int r = instance_spec_from_json(body, strlen(body), &big, &error);
        if (r < 0)
                fail_msg("%s", error);
        assert_int_equal(strlen(big.boot.kernel), INSTANCE_PATH_MAX);
        assert_int_equal(strlen(big.profile), 256);
}

static void assert_spec_refused(const char *body, size_t size, const char *message)
{
        _cleanup_free_ char *error = NULL;
        InstanceSpec s = {.name = (char *)"untouched"};
        int r = instance_spec_from_json(body, size, &s, &error);
        if (r != -EINVAL)
                fail_msg("%.*s: %d (%s), expected -EINVAL", (int)size, body, r,
                         error ? error : "(no message)");
        assert_non_null(error);
        if (!startswith(error, message))
                fail_msg("%.*s:\n  message \"%s\"\n  is not \"%s\"", (int)size, body, error,
                         message);
        assert_null(strchr(error, '\n'));
        assert_string_equal(s.name, "untouched");
}

/* API-9, INST-4, INST-5, INST-6, INST-7, GEN-6, REL-7: every refusal is -EINVAL with a message
 * naming the field. */
static void test_spec_refusals(void **state)
{
        static const Refusal refusals[] = {
            /* name (INST-4) */
            {"\"name\": \"render-01\", ", "", "name is required"},
            {"\"render-01\"", "7", "name must be a string"},
            {"\"render-01\"", "null", "name must be a string"},
            {"render-01", "Render-01", "name must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            {"render-01", "-render", "name must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            {"\"render-01\"", "\"\"", "name must match"},
            /* sizes (INST-5) */
            {"\"vcpus\": 4, ", "", "vcpus is required"},
            {"\"vcpus\": 4", "\"vcpus\": \"4\"", "vcpus must be an integer"},
            {"\"vcpus\": 4", "\"vcpus\": 4.5", "vcpus must be an integer"},
            {"\"vcpus\": 4", "\"vcpus\": true", "vcpus must be an integer"},
            {"\"vcpus\": 4", "\"vcpus\": 0", "vcpus must be 1..256"},
            {"\"vcpus\": 4", "\"vcpus\": 257", "vcpus must be 1..256"},
            {"\"vcpus\": 4", "\"vcpus\": -1", "vcpus must be 1..256"},
            {"\"memory_mb\": 8192", "\"memory_mb\": \"8192\"", "memory_mb must be an integer"},
            {"\"memory_mb\": 8192", "\"memory_mb\": 127", "memory_mb must be 128..1048576"},
            {"\"memory_mb\": 8192", "\"memory_mb\": 1048577", "memory_mb must be 128..1048576"},
            {"\"memory_mb\": 8192", "\"memory_mb\": 9223372036854775807",
             "memory_mb must be 128..1048576"},
            /* boot (INST-5, INST-6's form) */
            {"\"boot\": {", "\"x\": {", "unknown key \"x\""},
            {"\"initrd\": ", "\"append\": ", "unknown key \"boot.append\""},
            {"\"/var/lib/vgpud/images/vmlinuz\"", "1", "boot.kernel must be a string"},
            {"\"/var/lib/vgpud/images/vmlinuz\"", "\"vmlinuz\"",
             "boot.kernel must be an absolute path without . or .. components"},
            {"/var/lib/vgpud/images/vmlinuz", "/var/lib/vgpud/images/../../../etc/shadow",
             "boot.kernel must be an absolute path without . or .. components"},
            {"/var/lib/vgpud/images/vmlinuz", "/var/lib/vgpud/images/./vmlinuz",
             "boot.kernel must be an absolute path without . or .. components"},
            {"/var/lib/vgpud/images/vmlinuz", "/var/lib/vgpud/images/..",
             "boot.kernel must be an absolute path without . or .. components"},
            {"\"/var/lib/vgpud/images/initrd.img\"", "\"initrd.img\"",
             "boot.initrd must be an absolute path without . or .. components"},
            {"\"/var/lib/vgpud/images/disk.raw\"", "\"\"",
             "boot.disk must be an absolute path without . or .. components"},
            {"\"/var/lib/vgpud/images/disk.raw\"", "\"/x/../disk.raw\"",
             "boot.disk must be an absolute path without . or .. components"},
            {"\"console=ttyS0\"", "[]", "boot.cmdline must be a string"},
            {"\"console=ttyS0\"", "\"console=ttyS0\\ninit=/bin/sh\"",
             "boot.cmdline must not contain a newline"},
            {"\"console=ttyS0\"", "\"console=\\u0000\"", "malformed JSON"},
            {"\"kernel\": \"/var/lib/vgpud/images/vmlinuz\", \"initrd\": "
             "\"/var/lib/vgpud/images/initrd.img\", \"cmdline\": \"console=ttyS0\", \"disk\": "
             "\"/var/lib/vgpud/images/disk.raw\"",
             "", "boot needs boot.kernel or boot.disk"},
            {"\"kernel\": \"/var/lib/vgpud/images/vmlinuz\", ", "",
             "boot.initrd needs boot.kernel"},
            {"\"kernel\": \"/var/lib/vgpud/images/vmlinuz\", \"initrd\": "
             "\"/var/lib/vgpud/images/initrd.img\", ",
             "", "boot.cmdline needs boot.kernel"},
            {"\"boot\": {\"kernel\": \"/var/lib/vgpud/images/vmlinuz\", \"initrd\": "
             "\"/var/lib/vgpud/images/initrd.img\", \"cmdline\": \"console=ttyS0\", \"disk\": "
             "\"/var/lib/vgpud/images/disk.raw\"}, ",
             "", "boot is required"},
            /* gpu */
            {"{\"profile\": \"NVIDIA L40S-2Q\"}", "\"NVIDIA L40S-2Q\"", "gpu must be an object"},
            {"{\"profile\": \"NVIDIA L40S-2Q\"}", "null", "gpu must be an object"},
            {"{\"profile\": \"NVIDIA L40S-2Q\"}", "{}", "gpu.profile is required"},
            {"\"profile\": \"NVIDIA L40S-2Q\"", "\"profile\": \"NVIDIA L40S-2Q\", \"count\": 1",
             "unknown key \"gpu.count\""},
            {"\"NVIDIA L40S-2Q\"", "2", "gpu.profile must be a string"},
            {"\"NVIDIA L40S-2Q\"", "\"\"", "gpu.profile must be 1..256 printable ASCII characters"},
            {"\"NVIDIA L40S-2Q\"", "\"NVIDIA\\tL40S-2Q\"",
             "gpu.profile must be 1..256 printable ASCII characters"},
            {"\"NVIDIA L40S-2Q\"", "\"NVIDIA L40S-2Q\\u00e9\"",
             "gpu.profile must be 1..256 printable ASCII characters"},
            /* other keys (API-9) */
            {"\"vcpus\": 4", "\"vcpus\": 4, \"id\": \"k3x9q2m8v1c4z7n5b0wd\"",
             "unknown key \"id\""},
            /* JSON (GEN-6, REL-7) */
            {"\"vcpus\": 4", "\"vcpus\": 4, \"vcpus\": 4", "malformed JSON: duplicate object key"},
            {"\"name\": \"render-01\"", "name: \"render-01\"", "malformed JSON"},
            {"}}", "}}}", "malformed JSON"},
        };
        for (size_t i = 0; i < ELEMENTSOF(refusals); i++) {
                _cleanup_free_ char *text = mutate(spec_full, refusals[i].from, refusals[i].to);
                assert_spec_refused(text, strlen(text), refusals[i].message);
        }

        /* Lengths (INST-5, INST-6): one byte over each limit. */
        _cleanup_free_ char *path = malloc(INSTANCE_PATH_MAX + 2),
                            *cmdline = malloc(INSTANCE_CMDLINE_MAX + 2);
        memset(path, 'p', INSTANCE_PATH_MAX + 1);
        path[0] = '/';
        path[INSTANCE_PATH_MAX + 1] = 0;
        memset(cmdline, 'c', INSTANCE_CMDLINE_MAX + 1);
        cmdline[INSTANCE_CMDLINE_MAX + 1] = 0;
        _cleanup_free_ char *long_disk = mutate(spec_full, "/var/lib/vgpud/images/disk.raw", path);
        assert_spec_refused(long_disk, strlen(long_disk), "boot.disk must be at most 4096 bytes");
        _cleanup_free_ char *long_cmdline = mutate(spec_full, "console=ttyS0", cmdline);
        assert_spec_refused(long_cmdline, strlen(long_cmdline),
                            "boot.cmdline must be at most 4096 bytes");
        char profile[300];
        memset(profile, 'P', 257);
        profile[257] = 0;
        _cleanup_free_ char *long_profile = mutate(spec_full, "NVIDIA L40S-2Q", profile);
        assert_spec_refused(long_profile, strlen(long_profile),
                            "gpu.profile must be 1..256 printable ASCII characters");

        static const char boot_array[] = "{\"name\": \"a\", \"vcpus\": 1, \"memory_mb\": 128, "
                                         "\"boot\": [\"/vmlinuz\"]}";
        assert_spec_refused(boot_array, strlen(boot_array), "boot must be an object");

        /* Whole bodies that are no create body (REL-7). */
        assert_spec_refused("", 0, "malformed JSON");
        assert_spec_refused("[]", 2, "expected a JSON object");
        assert_spec_refused("\"name\"", 6, "malformed JSON");
        assert_spec_refused(spec_full, strlen(spec_full) - 3, "malformed JSON"); /* truncated */
        assert_spec_refused("{}", 2, "name is required");
        char deep[64] = "{\"name\": ";
        for (int i = 0; i < 16; i++)
                strcat(deep, "[");
        assert_spec_refused(deep, strlen(deep), "JSON nested deeper than 16 levels");
}

/* ---- DISK-5: a root disk from an image in the create body and the record -------------------- */

/* API-9, DISK-5: image and disk_gb; boot is optional with an image, required without. */
static void test_spec_image(void **state)
{
        static const char image_only[] =
            "{\"name\": \"web-1\", \"vcpus\": 1, \"memory_mb\": 512, \"image\": \"noble\"}";
        _cleanup_(instance_spec_done) InstanceSpec s = {0};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(instance_spec_from_json(image_only, strlen(image_only), &s, &error), 0);
        assert_string_equal(s.disk.image, "noble");
        assert_int_equal(s.disk.size_gb, 0);
        assert_null(s.boot.kernel);

        static const char with_kernel[] =
            "{\"name\": \"web-1\", \"vcpus\": 1, \"memory_mb\": 512, \"image\": \"noble\", "
            "\"disk_gb\": 40, \"boot\": {\"kernel\": \"/srv/vmlinuz\", \"cmdline\": "
            "\"root=/dev/vda\"}}";
        _cleanup_(instance_spec_done) InstanceSpec k = {0};
        assert_int_equal(instance_spec_from_json(with_kernel, strlen(with_kernel), &k, &error), 0);
        assert_int_equal(k.disk.size_gb, 40);
        assert_string_equal(k.boot.kernel, "/srv/vmlinuz");

        static const Refusal refusals[] = {
            {"\"image\": \"noble\"", "\"image\": \"Noble\"",
             "image must match ^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"},
            {"\"image\": \"noble\"", "\"image\": 7", "image must be a string"},
            {"\"image\": \"noble\"", "\"image\": \"noble\", \"disk_gb\": 0", "disk_gb must be 1.."},
            {"\"image\": \"noble\"", "\"image\": \"noble\", \"disk_gb\": -2",
             "disk_gb must be 1.."},
            {"\"image\": \"noble\"", "\"image\": \"noble\", \"disk_gb\": \"2\"",
             "disk_gb must be an integer"},
            {"\"image\": \"noble\"", "\"disk_gb\": 4", "disk_gb needs image"},
            {"\"image\": \"noble\"", "\"boot\": {}", "boot needs boot.kernel or boot.disk"},
            {", \"image\": \"noble\"", "", "boot is required"},
            {"\"image\": \"noble\"", "\"image\": \"noble\", \"boot\": {\"cmdline\": \"x\"}",
             "boot.cmdline needs boot.kernel"},
        };
        for (size_t i = 0; i < ELEMENTSOF(refusals); i++) {
                _cleanup_free_ char *text = mutate(image_only, refusals[i].from, refusals[i].to);
                assert_spec_refused(text, strlen(text), refusals[i].message);
        }
}

/* INST-2, DISK-5: a record with a root disk needs no boot, and round-trips. */
static void test_record_image_without_boot(void **state)
{
        static const char rec[] =
            "{\"version\": 1, \"id\": \"k3x9q2m8v1c4z7n5b0wd\", \"name\": \"web-1\", \"state\": "
            "\"Stopped\", \"created_at\": \"2026-09-02T20:08:03Z\", \"vcpus\": 1, \"memory_mb\": "
            "512, \"disk\": {\"image\": \"noble\", \"size_gb\": 3}}\n";
        _cleanup_(instance_record_done) InstanceRecord r = {0};
        _cleanup_free_ char *error = NULL, *out = NULL;
        size_t n = 0;
        if (instance_record_from_json(rec, strlen(rec), &r, &error) < 0)
                fail_msg("%s", error);
        assert_string_equal(r.disk.image, "noble");
        assert_int_equal(r.disk.size_gb, 3);
        assert_int_equal(instance_record_to_json(&r, &out, &n), 0);
        assert_string_equal(out, rec);

        _cleanup_free_ char *no_disk =
            mutate(rec, ", \"disk\": {\"image\": \"noble\", \"size_gb\": 3}", "");
        InstanceRecord bad = {0};
        assert_int_equal(instance_record_from_json(no_disk, strlen(no_disk), &bad, &error),
                         -EBADMSG);
        assert_string_equal(error, "boot is required");
}

/* ---- FLEET-6: the Placement consumer in the record and the create body -------------------- */

static const char spec_placement[] =
    "{\"name\": \"render-01\", \"vcpus\": 4, \"memory_mb\": 8192, \"boot\": {\"kernel\": "
    "\"/var/lib/vgpud/images/vmlinuz\"}, \"gpu\": {\"profile\": \"NVIDIA L40S-2Q\"}, "
    "\"placement\": {\"consumer\": \"" CONSUMER "\", \"gpu\": \"0000:e3:00.0\"}}";

/* FLEET-6, API-9: the create key is taken, both of its keys kept. */
/* SEED-1: the body's cloud_init, read by the seed module's validator, naming the field */
static void test_spec_cloud_init(void **state)
{
        static const char body[] =
            "{\"name\": \"web-1\", \"vcpus\": 1, \"memory_mb\": 512, \"image\": \"noble\", "
            "\"cloud_init\": {\"ssh_authorized_keys\": [\"ssh-ed25519 "
            "AAAAC3NzaC1lZDI1NTE5AAAAID0oh26XIkYjYeeyjD0ClpU85ChzV0DKTzSjh4oVXB8V ops\"], "
            "\"hostname\": \"web\"}}";
        _cleanup_(instance_spec_done) InstanceSpec s = {0};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(instance_spec_from_json(body, strlen(body), &s, &error), 0);
        assert_int_equal(strv_length(s.cloud_init.ssh_authorized_keys), 1);
        assert_string_equal(s.cloud_init.hostname, "web");
        assert_null(s.cloud_init.user_data);

        static const Refusal refusals[] = {
            {"\"hostname\": \"web\"", "\"hostname\": \"Web\"", "cloud_init.hostname must match"},
            {"\"hostname\": \"web\"", "\"hostname\": \"web\", \"user_data\": \"#!/bin/sh\"",
             "cloud_init.ssh_authorized_keys must not be given with cloud_init.user_data"},
            {" ops\"]", " ops\", \"ssh-rsa AAAA\"]",
             "cloud_init.ssh_authorized_keys[1]: the key is not a ssh-rsa key"},
            {"\"hostname\": \"web\"", "\"colour\": \"red\"", "unknown key \"cloud_init.colour\""},
        };
        for (size_t i = 0; i < ELEMENTSOF(refusals); i++) {
                _cleanup_free_ char *text = mutate(body, refusals[i].from, refusals[i].to);
                assert_spec_refused(text, strlen(text), refusals[i].message);
        }
}

static void test_spec_placement(void **state)
{
        _cleanup_(instance_spec_done) InstanceSpec s = {0};
        _cleanup_free_ char *error = NULL;
        int r = instance_spec_from_json(spec_placement, strlen(spec_placement), &s, &error);
        if (r < 0)
                fail_msg("%s", error);
        assert_string_equal(s.placement.consumer, CONSUMER);
        assert_string_equal(s.placement.gpu, "0000:e3:00.0");
        assert_string_equal(s.profile, "NVIDIA L40S-2Q");

        /* Without the key, both stay NULL. */
        _cleanup_(instance_spec_done) InstanceSpec plain = {0};
        assert_int_equal(instance_spec_from_json(spec_full, strlen(spec_full), &plain, &error), 0);
        assert_null(plain.placement.consumer);
        assert_null(plain.placement.gpu);
}

/* FLEET-6, INST-7: every malformed placement key is a 400 naming the field. */
static void test_spec_placement_refusals(void **state)
{
        static const Refusal refusals[] = {
            {"{\"consumer\": \"" CONSUMER "\", \"gpu\": \"0000:e3:00.0\"}", "\"" CONSUMER "\"",
             "placement must be an object"},
            {"{\"consumer\": \"" CONSUMER "\", \"gpu\": \"0000:e3:00.0\"}", "null",
             "placement must be an object"},
            {"{\"consumer\": \"" CONSUMER "\", \"gpu\": \"0000:e3:00.0\"}", "{}",
             "placement.consumer is required"},
            {"\"consumer\": \"" CONSUMER "\", ", "", "placement.consumer is required"},
            {", \"gpu\": \"0000:e3:00.0\"", "", "placement.gpu is required"},
            {"\"gpu\": \"0000:e3:00.0\"", "\"gpu\": \"0000:e3:00.0\", \"vf\": \"0000:e3:00.4\"",
             "unknown key \"placement.vf\""},
            {"\"" CONSUMER "\"", "7", "placement.consumer must be a string"},
            {"\"0000:e3:00.0\"", "[]", "placement.gpu must be a string"},
            /* canonical forms only */
            {CONSUMER, "5D0A7F3E-2B1C-4E8F-9A6D-0C3B2E1F4A57",
             "placement.consumer must be a lowercase UUID"},
            {CONSUMER, "5d0a7f3e2b1c4e8f9a6d0c3b2e1f4a57",
             "placement.consumer must be a lowercase UUID"},
            {CONSUMER, "{5d0a7f3e-2b1c-4e8f-9a6d-0c3b2e1f4a57}",
             "placement.consumer must be a lowercase UUID"},
            {CONSUMER, "5d0a7f3e-2b1c-4e8f-9a6d-0c3b2e1f4a5",
             "placement.consumer must be a "
             "lowercase UUID"},
            {CONSUMER, "5d0a7f3e-2b1c-4e8f-9a6d-0c3b2e1f4a577",
             "placement.consumer must be a lowercase UUID"},
            {CONSUMER, "", "placement.consumer must be a lowercase UUID"},
            {"0000:e3:00.0", "0000:E3:00.0", "placement.gpu must be a PF's PCI address"},
            {"0000:e3:00.0", "e3:00.0", "placement.gpu must be a PF's PCI address"},
            {"0000:e3:00.0", "0000:e3:00.8", "placement.gpu must be a PF's PCI address"},
            {"0000:e3:00.0", "0000:e3:00.0/../..", "placement.gpu must be a PF's PCI address"},
            {"0000:e3:00.0", "", "placement.gpu must be a PF's PCI address"},
            /* an allocation is for a vGPU */
            {"\"gpu\": {\"profile\": \"NVIDIA L40S-2Q\"}, ", "", "placement needs gpu.profile"},
            {"\"placement\": {", "\"placement\": {\"consumer\": \"" CONSUMER "\", ",
             "malformed JSON: duplicate object key"},
        };
        for (size_t i = 0; i < ELEMENTSOF(refusals); i++) {
                _cleanup_free_ char *text =
                    mutate(spec_placement, refusals[i].from, refusals[i].to);
                assert_spec_refused(text, strlen(text), refusals[i].message);
        }
}

/* FLEET-6, INST-2: placement.consumer and placement.gpu round-trip in instance.json; a record
 * without them (every record written before FLEET-6) still loads; a damaged one is refused. */
static void test_record_placement(void **state)
{
        static const char with[] =
            "{\"version\": 1, \"id\": \"" EXAMPLE_ID "\", \"name\": \"render-01\", \"state\": "
            "\"Running\", \"created_at\": \"2026-09-02T20:08:03Z\", \"boot\": {\"kernel\": "
            "\"/k\"}, \"vcpus\": 4, \"memory_mb\": 8192, \"gpu\": {\"profile\": \"NVIDIA "
            "L40S-2Q\"}, \"placement\": {\"consumer\": \"" CONSUMER "\", \"gpu\": "
            "\"0000:e3:00.0\"}}\n";
        _cleanup_(instance_record_done) InstanceRecord rec = {0}, copy = {0}, old = {0};
        parse_ok(with, &rec);
        assert_string_equal(rec.placement.consumer, CONSUMER);
        assert_string_equal(rec.placement.gpu, "0000:e3:00.0");
        _cleanup_free_ char *out = encode(&rec);
        assert_string_equal(out, with);

        assert_int_equal(instance_record_copy(&rec, &copy), 0);
        assert_string_equal(copy.placement.consumer, CONSUMER);
        assert_string_equal(copy.placement.gpu, "0000:e3:00.0");
        assert_ptr_not_equal(copy.placement.consumer, rec.placement.consumer);
        /* Clearing a claim keeps the consumer: a Stopped instance keeps its allocation. */
        instance_record_clear_claim(&copy);
        assert_string_equal(copy.placement.consumer, CONSUMER);

        /* The normative example has no placement: nothing is written for it. */
        parse_ok(example, &old);
        assert_null(old.placement.consumer);
        _cleanup_free_ char *old_out = encode(&old);
        assert_null(strstr(old_out, "placement"));

        static const Refusal refusals[] = {
            {"\"gpu\": {\"profile\": \"NVIDIA L40S-2Q\"}, ", "", "placement needs gpu"},
            {"\"consumer\": \"" CONSUMER "\", ", "", "placement.consumer is required"},
            {", \"gpu\": \"0000:e3:00.0\"", "", "placement.gpu is required"},
            {CONSUMER, "not-a-uuid", "placement.consumer must be a lowercase UUID"},
            {"\"0000:e3:00.0\"", "\"0000:e3:00\"", "placement.gpu must be a PF's PCI address"},
            {"\"0000:e3:00.0\"", "1", "placement.gpu must be a string"},
            {"{\"consumer\"", "[{\"consumer\"", "malformed JSON"},
        };
        for (size_t i = 0; i < ELEMENTSOF(refusals); i++) {
                _cleanup_free_ char *text = mutate(with, refusals[i].from, refusals[i].to);
                assert_record_refused(text, strlen(text), refusals[i].message);
        }

        /* A record that would not load again is never written. */
        free(rec.placement.gpu);
        rec.placement.gpu = strdup("bogus");
        _cleanup_free_ char *bad = NULL;
        assert_int_equal(instance_record_to_json(&rec, &bad, NULL), -EINVAL);
        assert_null(bad);
}

/* ---- boot paths (INST-6) ------------------------------------------------------------------- */

/* INST-6's check: the files open, then closed again. */
static int check_boot(const InstanceBoot *boot, char *const *image_dirs, char **error)
{
        InstanceBootFiles files = INSTANCE_BOOT_FILES_NONE;
        int r = instance_boot_files_open(boot, image_dirs, &files, error);
        if (r >= 0) {
                assert_true((files.kernel >= 0) == !!boot->kernel);
                assert_true((files.initrd >= 0) == !!boot->initrd);
                assert_true((files.disk >= 0) == !!boot->disk);
        } else
                assert_true(files.kernel == -1 && files.initrd == -1 && files.disk == -1);
        instance_boot_files_close(&files);
        return r;
}

static int check_kernel(const char *path, char *const *image_dirs, char **error)
{
        InstanceBoot boot = {.kernel = (char *)path};
        free(*error);
        *error = NULL;
        return check_boot(&boot, image_dirs, error);
}

static void assert_path_refused(const char *path, char *const *image_dirs, const char *why)
{
        _cleanup_free_ char *error = NULL, *want = NULL;
        assert_int_equal(check_kernel(path, image_dirs, &error), -EINVAL);
        assert_int_equal(strprintf(&want, "boot.kernel %s: %s", path, why), 0);
        assert_string_equal(error, want);
}

/* INST-6: the real path of a readable regular file, strictly below an image dir. */
static void test_boot_paths(void **state)
{
        Fixture *fx = *state;
        TestTree *t = fx->tree;
        assert_int_equal(test_tree_put(t, "kernel", "images/vmlinuz"), 0);
        assert_int_equal(test_tree_put(t, "initrd", "images/nested/initrd.img"), 0);
        assert_int_equal(test_tree_put(t, "disk", "more-images/disk.raw"), 0);
        assert_int_equal(test_tree_put(t, "secret", "outside/secret"), 0);
        assert_int_equal(test_tree_put(t, "lookalike", "images-evil/vmlinuz"), 0);
        assert_int_equal(test_mkdirs_at(t->fd, "images/dir"), 0);
        assert_int_equal(mkfifoat(t->fd, "images/fifo", 0600), 0);
        assert_int_equal(test_tree_link(t, "vmlinuz", "images/link-in"), 0);
        assert_int_equal(test_tree_link(t, "../outside/secret", "images/link-out"), 0);
        assert_int_equal(test_tree_link(t, "../outside/missing", "images/link-dangling"), 0);
        assert_int_equal(test_tree_link(t, "../outside", "images/outside-dir"), 0);
        assert_int_equal(test_tree_link(t, "images", "images-link"), 0);

        _cleanup_free_ char *images = test_tree_path(t, "images"),
                            *more = test_tree_path(t, "more-images/"),
                            *images_link = test_tree_path(t, "images-link"),
                            *missing_dir = test_tree_path(t, "no-such-dir");
        char *dirs[] = {missing_dir, images, more, NULL};

        /* Accepted: each field, a symlink that stays inside, a trailing-slash image dir. */
        _cleanup_free_ char *kernel = test_tree_path(t, "images/vmlinuz"),
                            *initrd = test_tree_path(t, "images/nested/initrd.img"),
                            *disk = test_tree_path(t, "more-images/disk.raw"),
                            *link_in = test_tree_path(t, "images/link-in"), *error = NULL;
        InstanceBoot boot = {
            .kernel = kernel, .initrd = initrd, .cmdline = "console=ttyS0", .disk = disk};
        int r = check_boot(&boot, dirs, &error);
        if (r < 0)
                fail_msg("%s", error);
        assert_int_equal(check_kernel(link_in, dirs, &error), 0);

        /*
         * An image dir that is itself a symlink is resolved for the real path; the typed path
         * must still be below it as written (INST-6, revised).
         */
        char *linked[] = {images_link, NULL};
        _cleanup_free_ char *via_link = test_tree_path(t, "images-link/vmlinuz");
        assert_int_equal(check_kernel(via_link, linked, &error), 0);
        assert_path_refused(kernel, linked, "not under image_dirs");

        /* Refused. */
        _cleanup_free_ char *link_out = test_tree_path(t, "images/link-out"),
                            *dangling = test_tree_path(t, "images/link-dangling"),
                            *through = test_tree_path(t, "images/outside-dir/secret"),
                            *secret = test_tree_path(t, "outside/secret"),
                            *dir = test_tree_path(t, "images/dir"),
                            *fifo = test_tree_path(t, "images/fifo"),
                            *absent = test_tree_path(t, "images/absent"),
                            *absent_outside = test_tree_path(t, "outside/absent"),
                            *lookalike = test_tree_path(t, "images-evil/vmlinuz"),
                            *dotdot = test_tree_path(t, "images/../outside/secret"),
                            *dot = test_tree_path(t, "images/./vmlinuz");
        assert_path_refused(link_out, dirs, "not under image_dirs");
        assert_path_refused(through, dirs, "not under image_dirs");
        assert_path_refused(secret, dirs, "not under image_dirs");
        assert_path_refused(lookalike, dirs, "not under image_dirs"); /* a prefix is not a dir */
        assert_path_refused(images, dirs, "not under image_dirs");    /* the dir itself */
        assert_path_refused(dir, dirs, "not a regular file");
        assert_path_refused(fifo, dirs, "not a regular file"); /* and it did not block */
        assert_path_refused(absent, dirs, "No such file or directory");
        assert_path_refused(dangling, dirs, "No such file or directory");
        /* Outside the image dirs, absence reads as any refusal: no probing of host files. */
        assert_path_refused(absent_outside, dirs, "not under image_dirs");
        assert_path_refused(dotdot, dirs, "must be an absolute path without . or .. components");
        assert_path_refused(dot, dirs, "must be an absolute path without . or .. components");
        assert_path_refused("vmlinuz", dirs, "must be an absolute path without . or .. components");

        /* No image dirs (or none that exists) confine everything away. */
        char *none[] = {NULL};
        char *only_missing[] = {missing_dir, NULL};
        assert_path_refused(kernel, none, "not under image_dirs");
        assert_path_refused(kernel, only_missing, "not under image_dirs");
        assert_int_equal(check_kernel(kernel, NULL, &error), -EINVAL);

        /* The field is named: initrd and disk as well as kernel. */
        InstanceBoot bad = {.kernel = kernel, .initrd = secret};
        assert_int_equal(check_boot(&bad, dirs, &error), -EINVAL);
        assert_non_null(startswith(error, "boot.initrd "));
        free(error);
        error = NULL;
        bad = (InstanceBoot){.disk = dir};
        assert_int_equal(check_boot(&bad, dirs, &error), -EINVAL);
        assert_non_null(startswith(error, "boot.disk "));

        /* A path from outside is shown escaped in the message. */
        _cleanup_free_ char *odd = test_tree_path(t, "outside/a\nb");
        _cleanup_free_ char *msg = NULL;
        assert_int_equal(check_kernel(odd, dirs, &msg), -EINVAL);
        assert_null(strchr(msg, '\n'));
        assert_non_null(strstr(msg, "a\\x0ab: not under image_dirs"));
}

/* INST-6: readable, by opening it (root passes access(), so the open is what tells). */
static void test_boot_path_unreadable(void **state)
{
        Fixture *fx = *state;
        assert_int_equal(test_tree_put(fx->tree, "kernel", "images/vmlinuz"), 0);
        _cleanup_free_ char *images = test_tree_path(fx->tree, "images"),
                            *kernel = test_tree_path(fx->tree, "images/vmlinuz");
        char *dirs[] = {images, NULL};
        fault_arm(FAULT_OPEN_BENEATH, "vmlinuz", EACCES, -1);
        assert_path_refused(kernel, dirs, "cannot be read: Permission denied");
        assert_true(fault_hits() >= 1);
}

/*
 * INST-6 (revised): a typed path outside image_dirs that links to a file inside is refused as
 * written, though its real path would pass.
 */
static void test_boot_path_link_from_outside(void **state)
{
        Fixture *fx = *state;
        TestTree *t = fx->tree;
        assert_int_equal(test_tree_put(t, "kernel", "images/vmlinuz"), 0);
        assert_int_equal(test_mkdirs_at(t->fd, "tmp/x"), 0);
        _cleanup_free_ char *images = test_tree_path(t, "images"),
                            *kernel = test_tree_path(t, "images/vmlinuz"),
                            *outside = test_tree_path(t, "tmp/x/k");
        assert_int_equal(symlink(kernel, outside), 0);
        char *dirs[] = {images, NULL};
        assert_path_refused(outside, dirs, "not under image_dirs");
}

static TestTree *swap_tree;

/* The kernel's directory becomes a link to one outside, between realpath() and the open. */
static void swap_nested_dir(void)
{
        assert_int_equal(renameat(swap_tree->fd, "images/nested", swap_tree->fd, "images/was"), 0);
        assert_int_equal(test_tree_link(swap_tree, "../outside", "images/nested"), 0);
}

/* The kernel file itself is replaced by a link to a file outside. */
static void swap_file(void)
{
        assert_int_equal(unlinkat(swap_tree->fd, "images/vmlinuz", 0), 0);
        assert_int_equal(test_tree_link(swap_tree, "../outside/vmlinuz", "images/vmlinuz"), 0);
}

static char *fd_contents(int fd)
{
        char buf[64];
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        assert_true(n >= 0);
        buf[n] = 0;
        return strdup(buf);
}

/*
 * INST-6: no path is resolved twice. A link or directory swapped in after the check makes the
 * open fail rather than follow it; a swap after the open changes nothing the descriptor reads.
 */
static void test_boot_files_swapped(void **state)
{
        Fixture *fx = *state;
        TestTree *t = swap_tree = fx->tree;
        assert_int_equal(test_tree_put(t, "kernel", "images/vmlinuz"), 0);
        assert_int_equal(test_tree_put(t, "nested kernel", "images/nested/vmlinuz"), 0);
        assert_int_equal(test_tree_put(t, "secret", "outside/vmlinuz"), 0);
        _cleanup_free_ char *images = test_tree_path(t, "images"),
                            *kernel = test_tree_path(t, "images/vmlinuz"),
                            *nested = test_tree_path(t, "images/nested/vmlinuz"), *error = NULL;
        char *dirs[] = {images, NULL};

        /* Swapped between the check and the open: refused, nothing outside is opened. */
        before_open_beneath = swap_nested_dir;
        InstanceBootFiles files = INSTANCE_BOOT_FILES_NONE;
        assert_int_equal(
            instance_boot_files_open(&(InstanceBoot){.kernel = nested}, dirs, &files, &error),
            -EINVAL);
        assert_null(before_open_beneath);
        _cleanup_free_ char *want = NULL;
        assert_int_equal(
            strprintf(&want, "boot.kernel %s: cannot be read: %s", nested, strerror(ELOOP)), 0);
        assert_string_equal(error, want);
        assert_int_equal(files.kernel, -1);

        /* Swapped after the open: the descriptor still reads the file that was checked. */
        free(error);
        error = NULL;
        assert_int_equal(
            instance_boot_files_open(&(InstanceBoot){.kernel = kernel}, dirs, &files, &error), 0);
        assert_true(files.kernel >= 0);
        assert_int_equal(files.initrd, -1);
        assert_int_equal(files.disk, -1);
        swap_file();
        _cleanup_free_ char *read = fd_contents(files.kernel);
        assert_string_equal(read, "kernel");
        int flags = fcntl(files.kernel, F_GETFL);
        assert_int_equal(flags & O_ACCMODE, O_RDONLY);
        assert_false(flags & O_NONBLOCK);
        assert_true(fcntl(files.kernel, F_GETFD) & FD_CLOEXEC);
        instance_boot_files_close(&files);
        assert_int_equal(files.kernel, -1);

        /* And the link now in place is refused at the next start's open. */
        assert_int_equal(
            instance_boot_files_open(&(InstanceBoot){.kernel = kernel}, dirs, &files, &error),
            -EINVAL);
        assert_non_null(strstr(error, ": not under image_dirs"));
}

/* ---- instance.json on disk (INST-1) -------------------------------------------------------- */

#define ID1 "a1b2c3d4e5f6g7h8i9j0"
#define RUNTIME_INSTANCES "/run/vgpud/instances"
#define ID2 "zzzzzzzzzzzzzzzzzzz2"
#define RECORD_PATH ID1 "/instance.json"

static char *read_rel(int dirfd, const char *rel)
{
        char *buf = NULL;
        int r = read_file_at(dirfd, rel, 1 << 20, &buf, NULL);
        if (r < 0)
                fail_msg("read %s: %s", rel, strerror(-r));
        return buf;
}

static bool exists_at(int dirfd, const char *rel)
{
        struct stat st;
        return fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) >= 0;
}

static void save_ok(Fixture *fx, const InstanceRecord *r)
{
        _cleanup_free_ char *error = NULL;
        int k = instance_record_save_at(fx->instances, r, &error);
        if (k < 0)
                fail_msg("save: %s", error);
}

/* INST-1: the directory 0700, the file 0600, crash-safe steps in order, instances/ synced once. */
static void test_save_and_load(void **state)
{
        Fixture *fx = *state;
        _cleanup_(instance_record_done) InstanceRecord rec, loaded = {0};
        make_record(&rec, ID1);

        mode_t old_umask = umask(0077 | 0200); /* a umask must not change the modes */
        io_start();
        save_ok(fx, &rec);
        io_logging = false;
        umask(old_umask);
        assert_string_equal(io_log, "mkdir " ID1 ";fsync instances;fsync instance.json.tmp;"
                                    "rename instance.json.tmp;fsync " ID1 ";");

        struct stat st;
        assert_int_equal(fstatat(fx->instances, ID1, &st, AT_SYMLINK_NOFOLLOW), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_mode & 07777, 0700);
        assert_int_equal(fstatat(fx->instances, RECORD_PATH, &st, AT_SYMLINK_NOFOLLOW), 0);
        assert_int_equal(st.st_mode & 07777, 0600);
        assert_false(exists_at(fx->instances, RECORD_PATH ".tmp"));

        _cleanup_free_ char *on_disk = read_rel(fx->instances, RECORD_PATH), *want = encode(&rec);
        assert_string_equal(on_disk, want);

        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &loaded, &error), 0);
        _cleanup_free_ char *again = encode(&loaded);
        assert_string_equal(again, want);

        /* A later save replaces the file; instances/ needs no sync then. */
        rec.state = INSTANCE_RUNNING;
        io_start();
        save_ok(fx, &rec);
        io_logging = false;
        assert_string_equal(io_log, "mkdir " ID1 ";fsync instance.json.tmp;"
                                    "rename instance.json.tmp;fsync " ID1 ";");
        _cleanup_free_ char *second = read_rel(fx->instances, RECORD_PATH);
        assert_non_null(strstr(second, "\"state\": \"Running\""));

        /* An invalid record or id writes nothing. */
        rec.vcpus = 0;
        assert_int_equal(instance_record_save_at(fx->instances, &rec, &error), -EINVAL);
        assert_non_null(strstr(error, "vcpus must be 1..256"));
        _cleanup_free_ char *third = read_rel(fx->instances, RECORD_PATH);
        assert_string_equal(third, second);
        rec.vcpus = 2;
        memcpy(rec.id, "../../../../tmp/xxxx", sizeof rec.id);
        io_start();
        assert_int_equal(instance_record_save_at(fx->instances, &rec, &error), -EINVAL);
        assert_string_equal(io_log, "");
}

typedef struct StepCase {
        FaultCall call;
        const char *match;
        const char *message; /* the whole message, with %s for the id */
        bool renamed;        /* the new record is in place despite the failure */
} StepCase;

/* INST-1: a failure at each step keeps the old record whole and leaves no temp file. */
static void test_save_step_failures(void **state)
{
        Fixture *fx = *state;
        static const StepCase cases[] = {
            {FAULT_OPENAT, "instance.json.tmp",
             "create instances/" ID1 "/instance.json.tmp: No space left on device", false},
            {FAULT_WRITE, "instance.json.tmp",
             "write instances/" ID1 "/instance.json.tmp: No space left on device", false},
            {FAULT_FSYNC, "instance.json.tmp",
             "sync instances/" ID1 "/instance.json.tmp: No space left on device", false},
            {FAULT_RENAMEAT, "instance.json.tmp",
             "rename instances/" ID1 "/instance.json.tmp to instance.json: No space left on "
             "device",
             false},
            {FAULT_FSYNC, "/" ID1, "sync directory instances/" ID1 ": No space left on device",
             true},
        };

        _cleanup_(instance_record_done) InstanceRecord rec;
        make_record(&rec, ID1);
        save_ok(fx, &rec);
        _cleanup_free_ char *old = read_rel(fx->instances, RECORD_PATH);

        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                rec.state = INSTANCE_STOPPING;
                _cleanup_free_ char *error = NULL;
                fault_arm(cases[i].call, cases[i].match, ENOSPC, 1);
                assert_int_equal(instance_record_save_at(fx->instances, &rec, &error), -ENOSPC);
                fault_disarm();
                assert_int_equal(fault_hits(), 1);
                assert_string_equal(error, cases[i].message);
                assert_false(exists_at(fx->instances, RECORD_PATH ".tmp"));

                _cleanup_free_ char *now = read_rel(fx->instances, RECORD_PATH);
                if (cases[i].renamed) {
                        assert_non_null(strstr(now, "\"state\": \"Stopping\""));
                } else
                        assert_string_equal(now, old);

                /* And whatever is there loads. */
                _cleanup_(instance_record_done) InstanceRecord loaded = {0};
                assert_int_equal(
                    instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &loaded, NULL),
                    0);

                rec.state = INSTANCE_CREATING;
                save_ok(fx, &rec);
        }
}

/* INST-20, REL-11: loading a record removes what a kill left half-written beside it: the
 * temp files of the record, the seed (SEED-2) and the root overlay (DISK-5). */
static void test_load_removes_temp_files(void **state)
{
        Fixture *fx = *state;
        _cleanup_(instance_record_done) InstanceRecord rec, loaded = {0};
        make_record(&rec, ID1);
        save_ok(fx, &rec);
        const char *temps[] = {RECORD_PATH ".tmp", ID1 "/" INSTANCE_SEED_FILE ".tmp",
                               ID1 "/" INSTANCE_ROOT_OVERLAY ".tmp"};
        for (size_t i = 0; i < ELEMENTSOF(temps); i++) {
                _cleanup_close_ int fd =
                    openat(fx->instances, temps[i], O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
                assert_true(fd >= 0);
                assert_int_equal(write(fd, "half", 4), 4);
        }
        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &loaded, &error), 0);
        for (size_t i = 0; i < ELEMENTSOF(temps); i++)
                assert_false(exists_at(fx->instances, temps[i]));
        assert_string_equal(loaded.id, ID1);
}

/* INST-1: a failed sync of instances/ on creation leaves no directory, so a retry syncs again. */
static void test_save_creation_failures(void **state)
{
        Fixture *fx = *state;
        _cleanup_(instance_record_done) InstanceRecord rec;
        make_record(&rec, ID1);
        _cleanup_free_ char *error = NULL;

        fault_arm(FAULT_FSYNC, "/instances", EIO, 1);
        assert_int_equal(instance_record_save_at(fx->instances, &rec, &error), -EIO);
        fault_disarm();
        assert_string_equal(error, "sync directory instances: Input/output error");
        assert_false(exists_at(fx->instances, ID1));

        io_start();
        save_ok(fx, &rec);
        io_logging = false;
        assert_non_null(strstr(io_log, "fsync instances;"));

        free(error);
        error = NULL;
        instance_record_done(&rec);
        make_record(&rec, ID2);
        fault_arm(FAULT_MKDIRAT, ID2, EROFS, 1);
        assert_int_equal(instance_record_save_at(fx->instances, &rec, &error), -EROFS);
        assert_string_equal(error, "create directory instances/" ID2 ": Read-only file system");

        /* <id> that is not a directory (or a symlink to one) is not written through. */
        free(error);
        error = NULL;
        fault_disarm();
        assert_int_equal(symlinkat("..", fx->instances, ID2), 0);
        /* (O_NOFOLLOW with O_DIRECTORY: Linux says ENOTDIR for a link) */
        assert_int_equal(instance_record_save_at(fx->instances, &rec, &error), -ENOTDIR);
        assert_non_null(startswith(error, "open directory instances/" ID2 ": "));
        assert_false(exists_at(fx->tree->fd, "instance.json"));
}

/* INST-1, INST-3, GEN-5: loading; a leftover temp removed; damage named with the file. */
static void test_load(void **state)
{
        Fixture *fx = *state;
        _cleanup_(instance_record_done) InstanceRecord rec, loaded = {0};
        make_record(&rec, ID1);
        _cleanup_free_ char *error = NULL;

        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &loaded, &error),
            -ENOENT);
        assert_non_null(error);
        assert_int_equal(mkdirat(fx->instances, ID1, 0700), 0);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &loaded, &error),
            -ENOENT);

        save_ok(fx, &rec);
        assert_int_equal(test_put_at(fx->instances, "{\"half", RECORD_PATH ".tmp"), 0);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &loaded, &error), 0);
        assert_false(exists_at(fx->instances, RECORD_PATH ".tmp"));
        assert_string_equal(loaded.id, ID1);
        instance_record_done(&loaded);

        /* Damage is -EBADMSG, named with the file; ret stays untouched. */
        InstanceRecord untouched = {.name = (char *)"untouched"};
        assert_int_equal(test_put_at(fx->instances, "{\"version\": 1}", RECORD_PATH), 0);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &untouched, &error),
            -EBADMSG);
        assert_string_equal(error, "instances/" ID1 "/instance.json: id is required");
        assert_string_equal(untouched.name, "untouched");

        /* A record in another id's directory. */
        _cleanup_(instance_record_done) InstanceRecord other;
        make_record(&other, ID2);
        _cleanup_free_ char *text = encode(&other);
        assert_int_equal(test_put_at(fx->instances, text, RECORD_PATH), 0);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &untouched, &error),
            -EBADMSG);
        assert_string_equal(error,
                            "instances/" ID1 "/instance.json: id " ID2 " is not its directory's");

        /* Oversize (GEN-5): refused, not truncated. */
        _cleanup_free_ char *big = malloc(INSTANCE_RECORD_MAX + 2);
        memset(big, ' ', INSTANCE_RECORD_MAX + 1);
        big[INSTANCE_RECORD_MAX + 1] = 0;
        assert_int_equal(test_put_at(fx->instances, big, RECORD_PATH), 0);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &untouched, &error),
            -EBADMSG);
        assert_string_equal(error, "instances/" ID1 "/instance.json: larger than 3145728 bytes");

        /* Not a regular file. */
        assert_int_equal(unlinkat(fx->instances, RECORD_PATH, 0), 0);
        assert_int_equal(mkdirat(fx->instances, RECORD_PATH, 0700), 0);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &untouched, &error),
            -EISDIR);
        assert_non_null(startswith(error, "read instances/" ID1 "/instance.json: "));

        /* INST-3, REL-7: an id that is not one touches no file. */
        static const char *const bad_ids[] = {"..",    "../instances/" ID1,   "%2e%2e", "",
                                              ID1 "/", "A1B2C3D4E5F6G7H8I9J0"};
        for (size_t i = 0; i < ELEMENTSOF(bad_ids); i++) {
                io_start();
                assert_int_equal(instance_record_load_at(fx->instances, RUNTIME_INSTANCES,
                                                         bad_ids[i], &untouched, &error),
                                 -EINVAL);
                assert_non_null(startswith(error, "invalid instance id \""));
                assert_string_equal(io_log, "");
        }
        io_logging = false;

        /* A symlinked instance directory is not followed. */
        assert_int_equal(symlinkat(ID1, fx->instances, ID2), 0);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID2, &untouched, &error),
            -ENOTDIR);
}

/*
 * INST-2a: instance.json as a FIFO, a link or a device fails that one load at once with a
 * message (a FIFO used to block the disk worker reading it), and ret stays untouched.
 */
static void test_record_load_not_regular(void **state)
{
        Fixture *fx = *state;
        _cleanup_(instance_record_done) InstanceRecord rec;
        make_record(&rec, ID1);
        save_ok(fx, &rec);
        _cleanup_free_ char *text = encode(&rec), *error = NULL;
        assert_int_equal(test_put_at(fx->instances, text, ID1 "/real.json"), 0);

        InstanceRecord untouched = {.name = (char *)"untouched"};
        assert_int_equal(unlinkat(fx->instances, RECORD_PATH, 0), 0);
        assert_int_equal(mkfifoat(fx->instances, RECORD_PATH, 0600), 0);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &untouched, &error),
            -EBADFD);
        assert_string_equal(error, "read instances/" ID1 "/instance.json: not a regular file");
        assert_string_equal(untouched.name, "untouched");

        /* A link to a good record is refused too: nothing under data_dir is followed. */
        assert_int_equal(unlinkat(fx->instances, RECORD_PATH, 0), 0);
        assert_int_equal(symlinkat("real.json", fx->instances, RECORD_PATH), 0);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &untouched, &error),
            -EBADFD);
        assert_string_equal(error, "read instances/" ID1 "/instance.json: not a regular file");
}

/*
 * INST-2a: the socket paths of a record are the ones derived for its id under runtime_dir; a
 * record naming any other listener is unreadable (INST-22), so liveness never looks at it.
 */
static void test_record_load_socket_paths(void **state)
{
        Fixture *fx = *state;
        _cleanup_(instance_record_done) InstanceRecord rec, loaded = {0};
        make_record(&rec, ID1);
        rec.state = INSTANCE_STOPPED;
        rec.hypervisor.qmp_socket = strdup(RUNTIME_INSTANCES "/" ID1 "/qmp.sock");
        rec.hypervisor.agent_socket = strdup(RUNTIME_INSTANCES "/" ID1 "/agent.sock");
        save_ok(fx, &rec);
        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &loaded, &error), 0);
        assert_string_equal(loaded.hypervisor.qmp_socket, rec.hypervisor.qmp_socket);

        static const struct {
                const char *qmp, *agent, *want;
        } cases[] = {
            {"/tmp/listener.sock", RUNTIME_INSTANCES "/" ID1 "/agent.sock",
             "hypervisor.qmp_socket /tmp/listener.sock is not " RUNTIME_INSTANCES "/" ID1
             "/qmp.sock"},
            /* Another instance's socket is not this one's. */
            {RUNTIME_INSTANCES "/" ID2 "/qmp.sock", NULL,
             "hypervisor.qmp_socket " RUNTIME_INSTANCES "/" ID2
             "/qmp.sock is not " RUNTIME_INSTANCES "/" ID1 "/qmp.sock"},
            {RUNTIME_INSTANCES "/" ID1 "/qmp.sock", RUNTIME_INSTANCES "/" ID1 "/qmp.sock",
             "hypervisor.agent_socket " RUNTIME_INSTANCES "/" ID1
             "/qmp.sock is not " RUNTIME_INSTANCES "/" ID1 "/agent.sock"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                free(rec.hypervisor.qmp_socket);
                free(rec.hypervisor.agent_socket);
                rec.hypervisor.qmp_socket = strdup(cases[i].qmp);
                rec.hypervisor.agent_socket = cases[i].agent ? strdup(cases[i].agent) : NULL;
                save_ok(fx, &rec);
                InstanceRecord untouched = {.name = (char *)"untouched"};
                assert_int_equal(instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1,
                                                         &untouched, &error),
                                 -EBADMSG);
                _cleanup_free_ char *want = NULL;
                assert_int_equal(
                    strprintf(&want, "instances/" ID1 "/instance.json: %s", cases[i].want), 0);
                assert_string_equal(error, want);
                assert_string_equal(untouched.name, "untouched");
        }
}

/*
 * CONS-1, INST-2a: the console socket is saved and loaded with the other sockets, must be the one
 * derived for the id, and is optional: a record written before it existed loads without it.
 */
static void test_record_console_socket(void **state)
{
        Fixture *fx = *state;
        _cleanup_(instance_record_done) InstanceRecord rec, loaded = {0}, old = {0};
        make_record(&rec, ID1);
        rec.state = INSTANCE_STOPPED;
        rec.hypervisor.qmp_socket = strdup(RUNTIME_INSTANCES "/" ID1 "/qmp.sock");
        rec.hypervisor.agent_socket = strdup(RUNTIME_INSTANCES "/" ID1 "/agent.sock");
        save_ok(fx, &rec);
        _cleanup_free_ char *error = NULL;
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &old, &error), 0);
        assert_null(old.hypervisor.console_socket);

        rec.hypervisor.console_socket = strdup(RUNTIME_INSTANCES "/" ID1 "/console.sock");
        save_ok(fx, &rec);
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &loaded, &error), 0);
        assert_string_equal(loaded.hypervisor.console_socket,
                            RUNTIME_INSTANCES "/" ID1 "/console.sock");
        _cleanup_free_ char *text = encode(&loaded);
        assert_non_null(
            strstr(text, "\"console_socket\": \"" RUNTIME_INSTANCES "/" ID1 "/console.sock\""));

        free(rec.hypervisor.console_socket);
        rec.hypervisor.console_socket = strdup(RUNTIME_INSTANCES "/" ID1 "/agent.sock");
        save_ok(fx, &rec);
        InstanceRecord untouched = {.name = (char *)"untouched"};
        assert_int_equal(
            instance_record_load_at(fx->instances, RUNTIME_INSTANCES, ID1, &untouched, &error),
            -EBADMSG);
        assert_string_equal(
            error, "instances/" ID1 "/instance.json: hypervisor.console_socket " RUNTIME_INSTANCES
                   "/" ID1 "/agent.sock is not " RUNTIME_INSTANCES "/" ID1 "/console.sock");
        assert_string_equal(untouched.name, "untouched");
}

/* ---- removal and listing (INST-20) --------------------------------------------------------- */

/* A record with the files a VMM leaves, and links that point out of the tree. */
static void make_instance_tree(Fixture *fx, const char *id)
{
        _cleanup_(instance_record_done) InstanceRecord rec;
        make_record(&rec, id);
        save_ok(fx, &rec);
        char rel[256];
        snprintf(rel, sizeof rel, "%s/console.log", id);
        assert_int_equal(test_put_at(fx->instances, "boot\n", rel), 0);
        snprintf(rel, sizeof rel, "%s/qemu.log", id);
        assert_int_equal(test_put_at(fx->instances, "qemu\n", rel), 0);
        snprintf(rel, sizeof rel, "%s/deeper/still/file", id);
        assert_int_equal(test_put_at(fx->instances, "x", rel), 0);
        _cleanup_free_ char *outside_file = test_tree_path(fx->tree, "outside/keep"),
                            *outside_dir = test_tree_path(fx->tree, "outside");
        snprintf(rel, sizeof rel, "%s/link-to-file", id);
        assert_int_equal(symlinkat(outside_file, fx->instances, rel), 0);
        snprintf(rel, sizeof rel, "%s/deeper/link-to-dir", id);
        assert_int_equal(symlinkat(outside_dir, fx->instances, rel), 0);
}

static void assert_outside_intact(Fixture *fx)
{
        _cleanup_free_ char *keep = read_rel(fx->tree->fd, "outside/keep");
        assert_string_equal(keep, "keep me");
        assert_true(exists_at(fx->tree->fd, "outside/sub/also"));
}

/* INST-20: rename to .deleted-<id>, sync instances/, delete the tree without following links. */
static void test_remove(void **state)
{
        Fixture *fx = *state;
        assert_int_equal(test_tree_put(fx->tree, "keep me", "outside/keep"), 0);
        assert_int_equal(test_tree_put(fx->tree, "also", "outside/sub/also"), 0);
        make_instance_tree(fx, ID1);
        make_instance_tree(fx, ID2);

        _cleanup_free_ char *error = NULL;
        io_start();
        assert_int_equal(instance_remove_at(fx->instances, ID1, &error), 0);
        io_logging = false;
        assert_false(exists_at(fx->instances, ID1));
        assert_false(exists_at(fx->instances, ".deleted-" ID1));
        assert_true(exists_at(fx->instances, ID2 "/instance.json"));
        assert_outside_intact(fx);

        /* The order INST-20 asks for: the rename is durable before anything is deleted. */
        const char *rename = strstr(io_log, "rename " ID1 ";"),
                   *sync = strstr(io_log, "fsync instances;"), *unlink = strstr(io_log, "unlink ");
        assert_non_null(rename);
        assert_non_null(sync);
        assert_non_null(unlink);
        assert_true(rename < sync && sync < unlink);
        assert_non_null(strstr(io_log, "unlink .deleted-" ID1 ";")); /* the tree's root last */
        assert_non_null(strstr(io_log, "unlink link-to-file;"));

        /* Removing what is gone is done already; an id that is not one touches nothing. */
        assert_int_equal(instance_remove_at(fx->instances, ID1, &error), 0);
        io_start();
        assert_int_equal(instance_remove_at(fx->instances, "../outside", &error), -EINVAL);
        assert_string_equal(io_log, "");
        io_logging = false;
        assert_outside_intact(fx);
}

/* INST-20: each failing step; after the rename, the .deleted-<id> tree stays for a retry. */
static void test_remove_failures(void **state)
{
        Fixture *fx = *state;
        assert_int_equal(test_tree_put(fx->tree, "keep me", "outside/keep"), 0);
        assert_int_equal(test_tree_put(fx->tree, "also", "outside/sub/also"), 0);
        make_instance_tree(fx, ID1);
        _cleanup_free_ char *error = NULL;

        /* The rename fails: nothing moved. */
        fault_arm(FAULT_RENAMEAT, ID1, EIO, 1);
        assert_int_equal(instance_remove_at(fx->instances, ID1, &error), -EIO);
        assert_string_equal(error, "rename instances/" ID1 " to instances/.deleted-" ID1
                                   ": Input/output error");
        assert_true(exists_at(fx->instances, ID1 "/instance.json"));
        assert_false(exists_at(fx->instances, ".deleted-" ID1));

        /* The sync fails: the tree waits under its .deleted- name, and nothing is deleted. */
        fault_arm(FAULT_FSYNC, "/instances", EIO, 1);
        assert_int_equal(instance_remove_at(fx->instances, ID1, &error), -EIO);
        assert_string_equal(error, "remove instance " ID1
                                   ": sync directory instances: Input/output error");
        assert_false(exists_at(fx->instances, ID1));
        assert_true(exists_at(fx->instances, ".deleted-" ID1 "/instance.json"));

        /* A retry of the removal finds it there and finishes. */
        fault_disarm();
        assert_int_equal(instance_remove_at(fx->instances, ID1, &error), 0);
        assert_false(exists_at(fx->instances, ".deleted-" ID1));

        /* The delete fails half-way: the rest of the tree is left, listed as .deleted-*. */
        make_instance_tree(fx, ID1);
        fault_arm(FAULT_UNLINKAT, "qemu.log", EIO, -1);
        assert_int_equal(instance_remove_at(fx->instances, ID1, &error), -EIO);
        assert_string_equal(error, "remove instance " ID1 ": delete .deleted-" ID1
                                   "/qemu.log: Input/output error");
        assert_false(exists_at(fx->instances, ID1));
        assert_true(exists_at(fx->instances, ".deleted-" ID1 "/qemu.log"));

        _cleanup_(instance_dir_list_done) InstanceDirList l = {0};
        assert_int_equal(instance_dir_list_at(fx->instances, &l, &error), 0);
        assert_int_equal(strv_length(l.deleted), 1);
        assert_string_equal(l.deleted[0], ".deleted-" ID1);
        assert_int_equal(strv_length(l.ids), 0);

        /* The next pass's retry (REC-10) deletes it. */
        assert_int_equal(instance_tree_delete_at(fx->instances, l.deleted[0], &error), -EIO);
        fault_disarm();
        assert_int_equal(instance_tree_delete_at(fx->instances, l.deleted[0], &error), 0);
        assert_false(exists_at(fx->instances, ".deleted-" ID1));
        assert_outside_intact(fx);

        /* A stale .deleted-<id> in the way of the rename is deleted first. */
        make_instance_tree(fx, ID1);
        assert_int_equal(test_put_at(fx->instances, "old", ".deleted-" ID1 "/left-over"), 0);
        assert_int_equal(instance_remove_at(fx->instances, ID1, &error), 0);
        assert_false(exists_at(fx->instances, ID1));
        assert_false(exists_at(fx->instances, ".deleted-" ID1));
        assert_outside_intact(fx);
}

/* INST-20, REC-3: listing sorts ids, .deleted-* trees, orphans and everything else apart. */
static void test_list(void **state)
{
        Fixture *fx = *state;
        _cleanup_(instance_record_done) InstanceRecord rec;
        make_record(&rec, ID2);
        save_ok(fx, &rec);
        instance_record_done(&rec);
        make_record(&rec, ID1);
        save_ok(fx, &rec);
        /* A record that does not load is still a record, never an orphan. */
        assert_int_equal(
            test_put_at(fx->instances, "garbage", "00000000000000000000/instance.json"), 0);
        /* Orphans: an empty directory, and one whose first write never got renamed. */
        assert_int_equal(mkdirat(fx->instances, "orphan0orphan0orphan", 0700), 0);
        assert_int_equal(test_put_at(fx->instances, "{", "aaaaaaaaaaaaaaaaaaaa/instance.json.tmp"),
                         0);
        assert_int_equal(mkdirat(fx->instances, ".deleted-" ID1, 0700), 0);
        assert_int_equal(test_put_at(fx->instances, "", ".deleted-x"), 0);
        /* Unknown: never an instance of ours, never touched. */
        assert_int_equal(mkdirat(fx->instances, "lost+found", 0700), 0);
        assert_int_equal(test_put_at(fx->instances, "", "bbbbbbbbbbbbbbbbbbbb"), 0);
        assert_int_equal(symlinkat(ID1, fx->instances, "cccccccccccccccccccc"), 0);
        assert_int_equal(test_put_at(fx->instances, "", ID1 ".tmp"), 0);
        assert_int_equal(test_put_at(fx->instances, "", ".deleted-"), 0);
        assert_int_equal(mkdirat(fx->instances, "Aaaaaaaaaaaaaaaaaaaa", 0700), 0);

        _cleanup_(instance_dir_list_done) InstanceDirList l = {0};
        _cleanup_free_ char *error = NULL;
        assert_int_equal(instance_dir_list_at(fx->instances, &l, &error), 0);

        const char *ids[] = {"00000000000000000000", ID1, ID2, NULL};
        const char *deleted[] = {".deleted-" ID1, ".deleted-x", NULL};
        const char *orphans[] = {"aaaaaaaaaaaaaaaaaaaa", "orphan0orphan0orphan", NULL};
        const char *unknown[] = {".deleted-",
                                 "Aaaaaaaaaaaaaaaaaaaa",
                                 ID1 ".tmp",
                                 "bbbbbbbbbbbbbbbbbbbb",
                                 "cccccccccccccccccccc",
                                 "lost+found",
                                 NULL};
        struct {
                char **got;
                const char **want;
        } lists[] = {
            {l.ids, ids}, {l.deleted, deleted}, {l.orphans, orphans}, {l.unknown, unknown}};
        for (size_t i = 0; i < ELEMENTSOF(lists); i++) {
                size_t n = 0;
                while (lists[i].want[n])
                        n++;
                assert_int_equal(strv_length(lists[i].got), n);
                for (size_t j = 0; j < n; j++)
                        assert_string_equal(lists[i].got[j], lists[i].want[j]);
        }

        /* Orphans are deleted; the link named like an id was not followed into ID1. */
        for (char **o = l.orphans; *o; o++)
                assert_int_equal(instance_tree_delete_at(fx->instances, *o, &error), 0);
        assert_int_equal(instance_tree_delete_at(fx->instances, "cccccccccccccccccccc", &error), 0);
        assert_true(exists_at(fx->instances, ID1 "/instance.json"));
        instance_dir_list_done(&l);

        /* An empty directory lists as empty lists, not NULL ones. */
        assert_int_equal(mkdirat(fx->tree->fd, "empty", 0700), 0);
        int empty = openat(fx->tree->fd, "empty", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        assert_true(empty >= 0);
        assert_int_equal(instance_dir_list_at(empty, &l, &error), 0);
        close(empty);
        assert_non_null(l.ids);
        assert_null(l.ids[0]);
        assert_non_null(l.deleted);
        assert_non_null(l.orphans);
        assert_non_null(l.unknown);
}

/* INST-20: the tree deletion removes links as links, refuses odd names and runaway depth. */
static void test_tree_delete(void **state)
{
        Fixture *fx = *state;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(test_tree_put(fx->tree, "keep me", "outside/keep"), 0);
        assert_int_equal(test_tree_put(fx->tree, "also", "outside/sub/also"), 0);

        /* The tree itself a symlink: only the link goes. */
        _cleanup_free_ char *outside = test_tree_path(fx->tree, "outside");
        assert_int_equal(symlinkat(outside, fx->instances, ".deleted-link"), 0);
        assert_int_equal(instance_tree_delete_at(fx->instances, ".deleted-link", &error), 0);
        assert_false(exists_at(fx->instances, ".deleted-link"));
        assert_outside_intact(fx);

        /* Missing is deleted already. */
        assert_int_equal(instance_tree_delete_at(fx->instances, ".deleted-none", &error), 0);

        /* Names that are not one entry of the directory. */
        static const char *const bad[] = {"", ".", "..", "a/b", "../outside"};
        for (size_t i = 0; i < ELEMENTSOF(bad); i++)
                assert_int_equal(instance_tree_delete_at(fx->instances, bad[i], &error), -EINVAL);
        assert_outside_intact(fx);

        /* A FIFO is unlinked, never opened. */
        assert_int_equal(mkdirat(fx->instances, ".deleted-special", 0700), 0);
        assert_int_equal(mkfifoat(fx->instances, ".deleted-special/fifo", 0600), 0);
        assert_int_equal(instance_tree_delete_at(fx->instances, ".deleted-special", &error), 0);
        assert_false(exists_at(fx->instances, ".deleted-special"));

        /* Runaway depth is refused rather than recursed into. */
        char rel[4096] = ".deleted-deep";
        assert_int_equal(mkdirat(fx->instances, rel, 0700), 0);
        for (int i = 0; i < 40; i++) {
                strcat(rel, "/d");
                assert_int_equal(mkdirat(fx->instances, rel, 0700), 0);
        }
        assert_int_equal(instance_tree_delete_at(fx->instances, ".deleted-deep", &error), -ELOOP);
        assert_non_null(strstr(error, "nested deeper than 32 directories"));
        /* (teardown removes it with the test tree) */
}

/* ---- record -> QEMU command (VMM-1, VMM-2; instance-command.c) ----------------------------- */

/*
 * Golden pairs: tests/data/golden/vmm/<case>.json is an instance record, <case>.txt the argv its
 * start renders, one argument per line. VGPUD_UPDATE_GOLDEN=1 in the environment rewrites the
 * .txt files from what the code renders now; review the change with git diff before committing.
 */

/* Descriptors of vgpud's own (INST-6): any numbers; QEMU gets them from 3 on (VMM-3). */
#define KERNEL_FD 17
#define INITRD_FD 12
#define DISK_FD 40
#define ROOT_FD 23
#define VOLUME_FD 50 /* and on */
#define TAP_FD 21
#define VHOST_FD 22
#define SEED_FD 31

static void load_golden_record(const char *name, InstanceRecord *ret)
{
        _cleanup_free_ char *path = NULL, *text = NULL, *error = NULL;
        size_t size;
        assert_int_equal(strprintf(&path, "%s/golden/vmm/%s.json", getenv("VGPUD_TEST_DATA"), name),
                         0);
        assert_int_equal(read_file_at(AT_FDCWD, path, INSTANCE_RECORD_MAX, &text, &size), 0);
        if (instance_record_from_json(text, size, ret, &error) < 0)
                fail_msg("%s: %s", path, error);
}

/* The boot files a start of rec would have opened: one descriptor per path it names. */
static InstanceBootFiles golden_boot_files(const InstanceRecord *rec)
{
        InstanceBootFiles f = INSTANCE_BOOT_FILES_NONE;
        if (rec->boot.kernel)
                f.kernel = KERNEL_FD;
        if (rec->boot.initrd)
                f.initrd = INITRD_FD;
        if (rec->boot.disk)
                f.disk = DISK_FD;
        if (rec->disk.image)
                f.root = ROOT_FD;
        for (size_t k = 0; k < rec->n_volumes; k++)
                assert_int_equal(
                    instance_boot_files_add_volume(&f, rec->volumes[k].id, VOLUME_FD + (int)k), 0);
        if (instance_record_wants_seed(rec))
                f.seed = SEED_FD;
        return f;
}

/* The TAP (and vhost-net) a start of rec would have opened (NET-3): none without a NIC. */
static InstanceNicFiles golden_nic_files(const InstanceRecord *rec, bool vhost)
{
        InstanceNicFiles f = INSTANCE_NIC_FILES_NONE;
        if (rec->network.mode == INSTANCE_NETWORK_NAT ||
            rec->network.mode == INSTANCE_NETWORK_BRIDGE) {
                f.tap = TAP_FD;
                f.vhost = vhost ? VHOST_FD : -1;
        }
        return f;
}

static void assert_record_golden_nic(const char *name, ConfigQemuAccel accel, const char *data_dir,
                                     bool vhost)
{
        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        _cleanup_free_ char *console = NULL, *error = NULL, *rel = NULL, *mismatch = NULL;
        _cleanup_strv_free_ char **argv = NULL;
        load_golden_record(name, &rec);
        assert_int_equal(strprintf(&console, "%s/instances/%s/console.log", data_dir, rec.id), 0);
        const Config config = {.qemu_binary = (char *)"/usr/bin/qemu-system-x86_64",
                               .qemu_accel = accel,
                               .data_dir = (char *)data_dir};
        const InstanceCommandPaths paths = {.qmp_socket = rec.hypervisor.qmp_socket,
                                            .agent_socket = rec.hypervisor.agent_socket,
                                            .console_socket = rec.hypervisor.console_socket,
                                            .console_log = console};
        const InstanceBootFiles files = golden_boot_files(&rec);
        const InstanceNicFiles nic = golden_nic_files(&rec, vhost);
        VmmCommand cmd;
        if (instance_command_build(&rec, &config, &paths, &files, &nic, &cmd, &error) < 0 ||
            vmm_command_argv(&cmd, &argv, &error) < 0)
                fail_msg("%s: %s", name, error);
        assert_int_equal(strprintf(&rel, "golden/vmm/%s.txt", name), 0);
        mismatch = test_golden_argv_mismatch(rel, argv);
        if (mismatch)
                fail_msg("%s", mismatch);
}

static void assert_record_golden(const char *name, ConfigQemuAccel accel, const char *data_dir)
{
        assert_record_golden_nic(name, accel, data_dir, false);
}

#define DATA_DIR "/var/lib/vgpud"

/* VMM-1, VMM-2, NET-3: nat mode, the NIC on fd 3 before the vGPU; no vhost-net on the host */
static void test_command_nic_nat(void **state)
{
        assert_record_golden("nic-nat", CONFIG_QEMU_ACCEL_TCG, DATA_DIR);
}

/* VMM-1, VMM-2, NET-3: bridge mode with vhost-net, TAP on fd 3 and vhost on fd 4 */
static void test_command_nic_bridge(void **state)
{
        assert_record_golden_nic("nic-bridge", CONFIG_QEMU_ACCEL_TCG, DATA_DIR, true);
}

/* VMM-1, VMM-2, NET-1: mode none has no NIC at all */
static void test_command_nic_none(void **state)
{
        assert_record_golden("nic-none", CONFIG_QEMU_ACCEL_TCG, DATA_DIR);
}

/* NET-3: the TAP is exactly the record's NIC: missing, or open without a NIC, is refused */
static void test_command_nic_match(void **state)
{
        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        load_golden_record("nic-nat", &rec);
        const Config config = {.qemu_binary = (char *)"/usr/bin/qemu-system-x86_64"};
        const InstanceCommandPaths paths = {.qmp_socket = rec.hypervisor.qmp_socket,
                                            .agent_socket = rec.hypervisor.agent_socket,
                                            .console_log = "/c.log"};
        const InstanceBootFiles files = golden_boot_files(&rec);
        VmmCommand cmd;
        _cleanup_free_ char *e1 = NULL, *e2 = NULL, *e3 = NULL;
        assert_int_equal(instance_command_build(&rec, &config, &paths, &files, NULL, &cmd, &e1),
                         -EINVAL);
        assert_string_equal(e1, "QEMU command line: network: TAP is not open");
        const InstanceNicFiles nic = {.tap = TAP_FD, .vhost = -1};
        rec.network.mode = INSTANCE_NETWORK_NONE;
        assert_int_equal(instance_command_build(&rec, &config, &paths, &files, &nic, &cmd, &e2),
                         -EINVAL);
        assert_string_equal(e2, "QEMU command line: a TAP is open but the record has no NIC");
        rec.network.mode = INSTANCE_NETWORK_BRIDGE;
        free(rec.network.mac);
        rec.network.mac = NULL;
        assert_int_equal(instance_command_build(&rec, &config, &paths, &files, &nic, &cmd, &e3),
                         -EINVAL);
        assert_string_equal(e3, "QEMU command line: network.mac is missing");
}

/* VMM-1, VMM-2: a VM without a vGPU */
static void test_command_no_gpu(void **state)
{
        assert_record_golden("no-gpu", CONFIG_QEMU_ACCEL_AUTO, DATA_DIR);
}

/* VMM-1, VMM-2: vendor-VFIO passes the whole VF by its sysfs device */
static void test_command_vendor_vfio(void **state)
{
        assert_record_golden("vendor-vfio", CONFIG_QEMU_ACCEL_AUTO, DATA_DIR);
}

/* VMM-1, VMM-2: an mdev is passed by its sysfs device under the mdev bus */
static void test_command_mdev(void **state)
{
        assert_record_golden("mdev", CONFIG_QEMU_ACCEL_AUTO, DATA_DIR);
}

/* VMM-1, VMM-2: a kernel alone boots */
static void test_command_kernel_only(void **state)
{
        assert_record_golden("kernel-only", CONFIG_QEMU_ACCEL_AUTO, DATA_DIR);
}

/* VMM-1, VMM-2, DISK-6: a disk alone boots, read-only, its descriptor in an -add-fd set */
static void test_command_disk_only(void **state)
{
        assert_record_golden("disk-only", CONFIG_QEMU_ACCEL_AUTO, DATA_DIR);
}

/* VMM-1, VMM-2, DISK-5, DISK-9: an image's root overlay alone: qcow2 over its descriptor,
 * discard and detect-zeroes unmap, the first boot device */
static void test_command_image_root(void **state)
{
        assert_record_golden("image-root", CONFIG_QEMU_ACCEL_TCG, DATA_DIR);
}

/* VMM-1, VMM-2, DISK-8, DISK-9, SEED-2: the root overlay, then each volume in the record's order,
 * qcow2 with its id as serial, read-only as attached, then the image's seed */
static void test_command_image_volumes(void **state)
{
        assert_record_golden("image-volumes", CONFIG_QEMU_ACCEL_TCG, DATA_DIR);
}

/* VMM-1, VMM-2, SEED-2, NET-3: root, volumes, then the seed as a read-only raw CD-ROM on
 * ide.1, then the NIC */
static void test_command_seed_nic(void **state)
{
        assert_record_golden("image-seed-nat", CONFIG_QEMU_ACCEL_TCG, DATA_DIR);
}

/* VMM-1, SEED-1, SEED-2: a kernel boot with cloud_init gets a seed too, after boot.disk */
static void test_command_seed_kernel(void **state)
{
        assert_record_golden("kernel-cloud-init", CONFIG_QEMU_ACCEL_TCG, DATA_DIR);
}

/* SEED-2: the seed's descriptor is exactly the record's want: missing, or open without one */
static void test_command_seed_match(void **state)
{
        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        load_golden_record("image-root", &rec);
        const Config config = {.qemu_binary = (char *)"/usr/bin/qemu-system-x86_64"};
        const InstanceCommandPaths paths = {.qmp_socket = rec.hypervisor.qmp_socket,
                                            .agent_socket = rec.hypervisor.agent_socket,
                                            .console_log = "/c.log"};
        InstanceBootFiles files = golden_boot_files(&rec);
        files.seed = -1;
        VmmCommand cmd;
        _cleanup_free_ char *e1 = NULL, *e2 = NULL;
        assert_int_equal(instance_command_build(&rec, &config, &paths, &files, NULL, &cmd, &e1),
                         -EINVAL);
        assert_string_equal(e1, "QEMU command line: the seed is not open");

        _cleanup_(instance_record_done) InstanceRecord plain = {0};
        load_golden_record("kernel-only", &plain);
        files = golden_boot_files(&plain);
        files.seed = SEED_FD;
        assert_int_equal(instance_command_build(&plain, &config, &paths, &files, NULL, &cmd, &e2),
                         -EINVAL);
        assert_string_equal(e2, "QEMU command line: a seed is open but the record wants none");
}

/* VMM-1, DISK-5, DISK-6: direct kernel boot with the image as root disk, and a read-only
 * boot.disk after it */
static void test_command_image_kernel_disk(void **state)
{
        assert_record_golden("image-kernel-disk", CONFIG_QEMU_ACCEL_TCG, DATA_DIR);
}

/* VMM-1, INST-6: -kernel, -initrd, -append, then the disk, in this order, by descriptor */
static void test_command_kernel_initrd_cmdline_disk(void **state)
{
        assert_record_golden("kernel-initrd-cmdline-disk", CONFIG_QEMU_ACCEL_AUTO, DATA_DIR);
}

/* VMM-1, VMM-2: auto is "-accel kvm -accel tcg", kvm and tcg one -accel each */
static void test_command_accel(void **state)
{
        assert_record_golden("accel-auto", CONFIG_QEMU_ACCEL_AUTO, DATA_DIR);
        assert_record_golden("accel-kvm", CONFIG_QEMU_ACCEL_KVM, DATA_DIR);
        assert_record_golden("accel-tcg", CONFIG_QEMU_ACCEL_TCG, DATA_DIR);
}

/*
 * VMM-2: commas are doubled in the keyval values (sockets, console, device path) and kept as
 * they are in -append; the boot files are descriptors (INST-6), so their paths' commas never
 * reach QEMU.
 */
static void test_command_commas(void **state)
{
        assert_record_golden("commas", CONFIG_QEMU_ACCEL_TCG, "/srv/data,b");
}

/* CONS-1: a record from before the console socket renders the console as a file chardev */
static void test_command_console_file(void **state)
{
        assert_record_golden("console-file", CONFIG_QEMU_ACCEL_AUTO, DATA_DIR);
}

/* INST-6: the descriptors must be exactly the files the record names */
static void test_command_boot_files_match(void **state)
{
        _cleanup_(instance_record_done) InstanceRecord rec = {0};
        load_golden_record("kernel-initrd-cmdline-disk", &rec);
        const Config config = {.qemu_binary = (char *)"/usr/bin/qemu-system-x86_64"};
        const InstanceCommandPaths paths = {.qmp_socket = rec.hypervisor.qmp_socket,
                                            .agent_socket = rec.hypervisor.agent_socket,
                                            .console_log = "/c.log"};
        static const char *const missing[] = {"boot.kernel is not open", "boot.initrd is not open",
                                              "boot.disk is not open"};
        for (size_t i = 0; i < ELEMENTSOF(missing); i++) {
                InstanceBootFiles files = golden_boot_files(&rec);
                int *fd = i == 0 ? &files.kernel : i == 1 ? &files.initrd : &files.disk;
                *fd = -1;
                _cleanup_free_ char *error = NULL;
                VmmCommand cmd;
                assert_int_equal(
                    instance_command_build(&rec, &config, &paths, &files, NULL, &cmd, &error),
                    -EINVAL);
                if (!strstr(error, missing[i]))
                        fail_msg("\"%s\" does not say \"%s\"", error, missing[i]);
        }
        free(rec.boot.disk);
        rec.boot.disk = NULL;
        InstanceBootFiles files = golden_boot_files(&rec);
        files.disk = DISK_FD;
        _cleanup_free_ char *error = NULL;
        VmmCommand cmd;
        assert_int_equal(instance_command_build(&rec, &config, &paths, &files, NULL, &cmd, &error),
                         -EINVAL);
        assert_non_null(strstr(error, "boot.disk is open but not in the record"));
}

/* ---- the step engine (INST-14) ------------------------------------------------------------- */

/* What the fake steps did, as "run <name>;" and "undo <name>;", in order. */
static char step_trace[256];
static const char *step_failing; /* the name of the step whose run fails, or NULL */
static InstanceOutcome step_outcome;
static char step_outcome_error[64];
static unsigned step_outcomes;

static void trace_step(const char *what, const char *name)
{
        size_t n = strlen(step_trace);
        snprintf(step_trace + n, sizeof step_trace - n, "%s %s;", what, name);
}

static void fake_run(Op *op)
{
        const char *name = op->steps[op->at]->name;
        trace_step("run", name);
        if (step_failing && streq(name, step_failing))
                step_done(op, -EIO, INSTANCE_FAILURE_INVALID_REQUEST, "the step's own text");
        else
                step_done(op, 0, INSTANCE_FAILURE_NONE, NULL);
}

static void fake_undo(Op *op)
{
        trace_step("undo", op->steps[op->at]->name);
        step_undone(op);
}

static void fake_done(const InstanceOutcome *o, void *userdata)
{
        (void)userdata;
        step_outcome = *o;
        snprintf(step_outcome_error, sizeof step_outcome_error, "%s", o->error ? o->error : "");
        step_outcomes++;
}

static const Step fake_a = {.name = "a", .run = fake_run, .undo = fake_undo};
static const Step fake_b = {.name = "b", .run = fake_run}; /* nothing to take back */
static const Step fake_c = {.name = "c", .run = fake_run, .undo = fake_undo};
static const Step fake_d = {.name = "d", .run = fake_run, .undo = fake_undo, .undo_failed = true};
static const Step *const fake_steps[] = {&fake_a, &fake_b, &fake_c, &fake_d, NULL};

/* Runs fake_steps on a bare instance with step failing (NULL: none) and returns the trace. */
static const char *run_fake_steps(const char *failing)
{
        InstanceManager m = {0};
        Instance i = {.m = &m};
        snprintf(i.rec.id, sizeof i.rec.id, "%s", "abcdefghijklmnopqrst");
        step_trace[0] = 0;
        step_failing = failing;
        step_outcomes = 0;
        Op *op = op_new(&m, &i, OP_CREATE, fake_done, NULL);
        assert_non_null(op);
        op_run(op, fake_steps);
        assert_int_equal(step_outcomes, 1);
        assert_null(i.op);
        return step_trace;
}

/* INST-14: the steps run in order, and a failure takes back the completed ones in reverse. */
static void test_steps_order_and_undo(void **state)
{
        (void)state;
        assert_string_equal(run_fake_steps(NULL), "run a;run b;run c;run d;");
        assert_int_equal(step_outcome.r, 0);
        assert_int_equal(step_outcome.failure, INSTANCE_FAILURE_NONE);

        /* The failing step's own undo does not run; b has none; the answer is c's text. */
        assert_string_equal(run_fake_steps("c"), "run a;run b;run c;undo a;");
        assert_true(step_outcome.r < 0);
        assert_int_equal(step_outcome.failure, INSTANCE_FAILURE_INVALID_REQUEST);
        assert_string_equal(step_outcome_error, "the step's own text");

        /* A step that can fail half done undoes itself first (a record write, a claim). */
        assert_string_equal(run_fake_steps("d"), "run a;run b;run c;run d;undo d;undo c;undo a;");
        assert_string_equal(run_fake_steps("a"), "run a;");
        assert_string_equal(step_outcome_error, "the step's own text");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
            T(test_example_round_trip),
            T(test_other_records_round_trip),
            T(test_record_refusals),
            T(test_record_oversize),
            T(test_earlier_shapes_load),
            T(test_device_fields_round_trip),
            T(test_device_fields_refused),
            T(test_record_max_fits),
            T(test_to_json_refuses_bad_records),
            T(test_copy_and_clear),
            T(test_id_generate),
            T(test_id_and_name_forms),
            T(test_state_strings),
            T(test_spec_accepted),
            T(test_spec_refusals),
            T(test_spec_placement),
            T(test_spec_placement_refusals),
            T(test_record_placement),
            T(test_boot_paths),
            T(test_boot_path_unreadable),
            T(test_boot_path_link_from_outside),
            T(test_boot_files_swapped),
            T(test_save_and_load),
            T(test_save_step_failures),
            T(test_save_creation_failures),
            T(test_load_removes_temp_files),
            T(test_load),
            T(test_record_load_not_regular),
            T(test_record_load_socket_paths),
            T(test_record_console_socket),
            T(test_remove),
            T(test_remove_failures),
            T(test_list),
            T(test_tree_delete),
            T(test_command_no_gpu),
            T(test_command_vendor_vfio),
            T(test_command_mdev),
            T(test_command_kernel_only),
            T(test_command_disk_only),
            T(test_command_image_root),
            T(test_command_image_volumes),
            T(test_spec_image),
            T(test_spec_cloud_init),
            T(test_record_image_without_boot),
            T(test_command_image_kernel_disk),
            T(test_command_seed_nic),
            T(test_command_seed_kernel),
            T(test_command_seed_match),
            T(test_command_kernel_initrd_cmdline_disk),
            T(test_command_accel),
            T(test_command_commas),
            T(test_command_console_file),
            T(test_command_boot_files_match),
            T(test_command_nic_nat),
            T(test_command_nic_bridge),
            T(test_command_nic_none),
            T(test_command_nic_match),
            T(test_steps_order_and_undo),
#undef T
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
