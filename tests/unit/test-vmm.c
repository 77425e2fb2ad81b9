/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * Unit tests for src/vmm, the pure part: the QEMU command line (VMM-1, VMM-2) against golden
 * files in tests/data/golden/vmm/ (one argument per line; VGPUD_UPDATE_GOLDEN=1 in the
 * environment rewrites them), and the strict parsers of
 * /proc/<pid>/stat (VMM-16), /proc/net/unix (VMM-17, VMM-18) and QMP messages (VMM-5, VMM-6,
 * VMM-20; GEN-5, GEN-6). The real-kernel tests read this process's own /proc/self/stat and
 * /proc/net/unix with a listening socket the test binds in a temporary directory.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <cmocka.h>

#include "base/base.h"
#include "testlib.h"
#include "vmm/vmm.h"

/* ---- the command line ---------------------------------------------------------------------- */

/*
 * The renderer from hand-built commands: the parts no record makes yet (NICs, a cdrom seed, DISK-9
 * drives), the descriptor numbering and the refusals. The record -> argv goldens of VMM-2's cases
 * are in test-instances.c, since instances/ builds those commands. VGPUD_UPDATE_GOLDEN=1 in the
 * environment rewrites the golden files from what the code renders now (review with git diff).
 */

#define ID "01hzxk3v9q8r7m6n5p4t"

/* Descriptors of vgpud's own (INST-6): any numbers; QEMU gets them from 3 on (VMM-3). */
#define KERNEL_FD 17
#define INITRD_FD 12
#define DISK_FD 40
#define TAP_FD 21
#define VHOST_FD 22
#define ROOT_FD 30
#define VOLUME_FD 31
#define SEED_FD 32

/* The fields every case shares: a kernel to boot and VMM-1's three channels. */
static VmmCommand base_command(void)
{
        VmmCommand c = vmm_command_init();
        c.qemu_binary = "/usr/bin/qemu-system-x86_64";
        c.accel = CONFIG_QEMU_ACCEL_TCG;
        c.name = "vm-1";
        c.vcpus = 2;
        c.memory_mb = 2048;
        c.kernel_fd = KERNEL_FD;
        assert_int_equal(vmm_command_set_channels(&c, "/run/vgpud/instances/" ID "/qmp.sock",
                                                  "/run/vgpud/instances/" ID "/agent.sock", NULL,
                                                  "/var/lib/vgpud/instances/" ID "/console.log"),
                         0);
        return c;
}

static const VmmNic nic = {
    .id = "net0", .tap_fd = TAP_FD, .vhost_fd = VHOST_FD, .mac = "52:54:00:12:ab:cd"};

/* DISK-9's writable drives and SEED-2's cdrom. */
static const VmmDrive root_drive = {.node_name = "root",
                                    .format = VMM_DRIVE_QCOW2,
                                    .fd = ROOT_FD,
                                    .cache_direct = true,
                                    .discard_unmap = true,
                                    .detect_zeroes_unmap = true,
                                    .device = VMM_DRIVE_VIRTIO_BLK,
                                    .bootindex = 1};
static const VmmDrive volume_drive = {.node_name = "vol-v0a1b2c3",
                                      .format = VMM_DRIVE_QCOW2,
                                      .fd = VOLUME_FD,
                                      .discard_unmap = true,
                                      .detect_zeroes_unmap = true,
                                      .device = VMM_DRIVE_VIRTIO_BLK,
                                      .serial = "v0a1b2c3"};
static const VmmDrive seed_drive = {.node_name = "seed",
                                    .format = VMM_DRIVE_RAW,
                                    .read_only = true,
                                    .fd = SEED_FD,
                                    .device = VMM_DRIVE_IDE_CD,
                                    .bus = "ide.1"};

static char **render(const VmmCommand *c)
{
        _cleanup_free_ char *error = NULL;
        char **argv = NULL;
        if (vmm_command_argv(c, &argv, &error) < 0)
                fail_msg("vmm_command_argv: %s", error);
        assert_null(error);
        return argv;
}

/* The argv of c equals tests/data/golden/vmm/<name>.txt, one argument per line. */
static void assert_golden(const VmmCommand *c, const char *name)
{
        _cleanup_strv_free_ char **argv = render(c);
        _cleanup_free_ char *rel = NULL, *mismatch = NULL;
        assert_int_equal(strprintf(&rel, "golden/vmm/%s.txt", name), 0);
        mismatch = test_golden_argv_mismatch(rel, argv);
        if (mismatch)
                fail_msg("%s", mismatch);
}

/* The index of the first argument equal to s at or after from. */
static size_t find_arg(char **argv, size_t from, const char *s)
{
        for (size_t i = from; argv[i]; i++)
                if (streq(argv[i], s))
                        return i;
        fail_msg("%s not in argv", s);
        return 0;
}

/* VMM-1, VMM-3, NET-3: the TAP at 3, vhost-net at 4, before every file */
static void test_argv_nic(void **state)
{
        VmmCommand c = base_command();
        assert_int_equal(vmm_command_add_nic(&c, &nic), 0);
        assert_golden(&c, "nic-tap-vhost");

        int fds[VMM_PASSED_FDS_MAX];
        assert_int_equal(vmm_command_passed_fds(&c, fds), 3);
        assert_int_equal(fds[0], TAP_FD);
        assert_int_equal(fds[1], VHOST_FD);
        assert_int_equal(fds[2], KERNEL_FD);
}

/* NET-3: without vhost-net the netdev names the TAP alone */
static void test_argv_nic_without_vhost(void **state)
{
        VmmCommand c = base_command();
        VmmNic n = nic;
        n.vhost_fd = -1;
        assert_int_equal(vmm_command_add_nic(&c, &n), 0);
        _cleanup_strv_free_ char **argv = render(&c);
        size_t k = find_arg(argv, 0, "-netdev");
        assert_string_equal(argv[k + 1], "tap,id=net0,fd=3");
        assert_string_equal(argv[k + 3], "virtio-net-pci,netdev=net0,mac=52:54:00:12:ab:cd");
        k = find_arg(argv, 0, "-kernel");
        assert_string_equal(argv[k + 1], "/proc/self/fd/4");
}

/* VMM-1, DISK-9, SEED-2: root, a volume and the seed cdrom as -blockdev JSON, in list order */
static void test_argv_cdrom_seed(void **state)
{
        VmmCommand c = base_command();
        assert_int_equal(vmm_command_add_drive(&c, &root_drive), 0);
        assert_int_equal(vmm_command_add_drive(&c, &volume_drive), 0);
        assert_int_equal(vmm_command_add_drive(&c, &seed_drive), 0);
        assert_golden(&c, "cdrom-seed");
}

/* VMM-1, DISK-9: every -blockdev is one JSON object naming its drivers, its file an fd set */
static void test_argv_blockdev_json(void **state)
{
        VmmCommand c = base_command();
        assert_int_equal(vmm_command_add_drive(&c, &root_drive), 0);
        _cleanup_strv_free_ char **argv = render(&c);
        size_t k = find_arg(argv, 0, "-add-fd");
        assert_string_equal(argv[k + 1], "fd=4,set=4");
        assert_string_equal(argv[k + 2], "-blockdev");
        json_error_t jerr;
        json_auto_t *node = json_loads(argv[k + 3], JSON_REJECT_DUPLICATES, &jerr);
        if (!node)
                fail_msg("-blockdev %s: %s", argv[k + 3], jerr.text);
        json_auto_t *want =
            json_pack("{s:s, s:s, s:{s:b}, s:s, s:s, s:{s:s, s:s}}", "driver", "qcow2", "node-name",
                      "root", "cache", "direct", 1, "discard", "unmap", "detect-zeroes", "unmap",
                      "file", "driver", "file", "filename", "/dev/fdset/4");
        assert_true(json_equal(node, want));
        assert_string_equal(argv[k + 5], "virtio-blk-pci,drive=root,bootindex=1");
}

/* VMM-3, INST-6: NICs, then kernel, initrd and the drives in order, numbered from 3 */
static void test_passed_fds(void **state)
{
        VmmCommand c = base_command();
        c.initrd_fd = INITRD_FD;
        c.cmdline = "console=ttyS0";
        assert_int_equal(vmm_command_add_drive(&c, &root_drive), 0);
        assert_int_equal(vmm_command_add_drive(&c, &seed_drive), 0);
        assert_int_equal(vmm_command_add_nic(&c, &nic), 0);

        int fds[VMM_PASSED_FDS_MAX];
        const int want[] = {TAP_FD, VHOST_FD, KERNEL_FD, INITRD_FD, ROOT_FD, SEED_FD};
        assert_int_equal(vmm_command_passed_fds(&c, fds), ELEMENTSOF(want));
        for (size_t i = 0; i < ELEMENTSOF(want); i++)
                assert_int_equal(fds[i], want[i]);

        _cleanup_strv_free_ char **argv = render(&c);
        size_t k = find_arg(argv, 0, "-kernel");
        assert_string_equal(argv[k + 1], "/proc/self/fd/5");
        assert_string_equal(argv[k + 3], "/proc/self/fd/6");
        k = find_arg(argv, k, "-add-fd");
        assert_string_equal(argv[k + 1], "fd=7,set=7");
        k = find_arg(argv, k + 1, "-add-fd");
        assert_string_equal(argv[k + 1], "fd=8,set=8");
        k = find_arg(argv, k, "-netdev");
        assert_string_equal(argv[k + 1], "tap,id=net0,fd=3,vhost=on,vhostfd=4");
}

/* VMM-1: each chardev lands right before its consumer, whatever order it was added in */
static void test_argv_chardev_order(void **state)
{
        VmmCommand c = base_command();
        VmmChardev reversed[VMM_CHARDEVS_MAX];
        size_t n = c.n_chardevs;
        for (size_t i = 0; i < n; i++)
                reversed[i] = c.chardevs[n - 1 - i];
        memcpy(c.chardevs, reversed, n * sizeof(reversed[0]));
        VmmCommand plain = base_command();
        _cleanup_strv_free_ char **want = render(&plain), **got = render(&c);
        assert_int_equal(strv_length(got), strv_length(want));
        for (size_t i = 0; want[i]; i++)
                assert_string_equal(got[i], want[i]);
}

/* VMM-1, CONS-1: a console socket keeps console.log as its logfile */
static void test_argv_console_socket(void **state)
{
        VmmCommand c = vmm_command_init();
        c.qemu_binary = "/usr/bin/qemu-system-x86_64";
        c.name = "vm-1";
        c.vcpus = 1;
        c.memory_mb = 512;
        c.kernel_fd = KERNEL_FD;
        assert_int_equal(vmm_command_set_channels(&c, "/run/q,mp.sock", "/run/agent.sock",
                                                  "/run/con,sole.sock", "/var/con,sole.log"),
                         0);
        _cleanup_strv_free_ char **argv = render(&c);
        size_t k = find_arg(argv, 0, "-serial");
        assert_string_equal(argv[k - 1], "socket,id=console0,path=/run/con,,sole.sock,server=on,"
                                         "wait=off,logfile=/var/con,,sole.log,logappend=on");
        assert_string_equal(argv[k + 1], "chardev:console0");
}

/* VMM-2: -name is a keyval option too, although INST-4 keeps commas out of names */
static void test_argv_name_is_escaped(void **state)
{
        VmmCommand c = base_command();
        c.name = "a,b";
        _cleanup_strv_free_ char **argv = render(&c);
        assert_string_equal(argv[1], "-name");
        assert_string_equal(argv[2], "guest=a,,b,debug-threads=on");
}

/* VMM-2: a serial with a comma is doubled; JSON -blockdev values are not */
static void test_argv_serial_is_escaped(void **state)
{
        VmmCommand c = base_command();
        VmmDrive d = volume_drive;
        d.serial = "a,b";
        assert_int_equal(vmm_command_add_drive(&c, &d), 0);
        _cleanup_strv_free_ char **argv = render(&c);
        size_t k = find_arg(argv, 0, "-add-fd");
        assert_string_equal(argv[k + 5], "virtio-blk-pci,drive=vol-v0a1b2c3,serial=a,,b");
}

/* VMM-2 */
static void test_keyval_escape(void **state)
{
        static const char *const cases[][2] = {
            {"", ""},
            {"a", "a"},
            {",", ",,"},
            {",,", ",,,,"},
            {"a,b,c", "a,,b,,c"},
            {",a,", ",,a,,"},
            {"no comma", "no comma"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *s = vmm_keyval_escape(cases[i][0]);
                assert_non_null(s);
                assert_string_equal(s, cases[i][1]);
        }
}

/* The refusal of c names field; the out-parameter stays untouched. */
static void assert_argv_refused(const VmmCommand *c, const char *field)
{
        char **sentinel = (char **)&sentinel;
        char **argv = sentinel;
        _cleanup_free_ char *error = NULL;

        assert_int_equal(vmm_command_argv(c, &argv, &error), -EINVAL);
        assert_ptr_equal(argv, sentinel);
        assert_non_null(error);
        if (!strstr(error, field))
                fail_msg("error \"%s\" does not name %s", error, field);
}

/* VMM-1: a command line without its required parts, or with parts QEMU would refuse */
static void test_argv_missing_fields(void **state)
{
        VmmCommand c;

#define REFUSED(field, change)                  \
        do {                                    \
                c = base_command();             \
                change;                         \
                assert_argv_refused(&c, field); \
        } while (0)

        REFUSED("qemu_binary", c.qemu_binary = NULL);
        REFUSED("qemu_binary", c.qemu_binary = "");
        REFUSED("name", c.name = NULL);
        REFUSED("name", c.name = "");
        REFUSED("machine", c.machine = NULL);
        REFUSED("vcpus", c.vcpus = 0);
        REFUSED("memory_mb", c.memory_mb = 0);
        REFUSED("chardev qmp: path", c.chardevs[0].path = NULL);
        REFUSED("chardev agent0: path", c.chardevs[1].path = "");
        REFUSED("monitor chardev", c.monitor_chardev = NULL);
        REFUSED("monitor's chardev nope", c.monitor_chardev = "nope");
        REFUSED("chardev qmp has 0 consumers", c.monitor_chardev = "console0");
        REFUSED("chardev qmp must be a listening socket", c.chardevs[0].server = false);
        REFUSED("chardev qmp is given twice", vmm_command_add_chardev(&c, &c.chardevs[0]));
        REFUSED("chardev 1 has an invalid id", c.chardevs[1].id = c.agent_chardev = "a,b");
        REFUSED("accel", c.accel = (ConfigQemuAccel)7);
        REFUSED("kernel", c.kernel_fd = -1);
        REFUSED("kernel_fd 0 is a standard stream", c.kernel_fd = 0);
        REFUSED("vfio_sysfsdev", c.vfio_sysfsdev = "");
        REFUSED("cmdline", c.cmdline = "");
        REFUSED("initrd", (c.kernel_fd = -1, c.initrd_fd = INITRD_FD));
        REFUSED("cmdline", (c.kernel_fd = -1, c.cmdline = "console=ttyS0"));
        REFUSED("initrd_fd 1", c.initrd_fd = 1);
        REFUSED("drive 0 has no descriptor",
                (vmm_command_add_drive(&c, &root_drive), c.drives[0].fd = -1));
        REFUSED("drive 2 is a standard stream",
                (vmm_command_add_drive(&c, &root_drive), c.drives[0].fd = 2));
        REFUSED("drive 0 has an invalid node name",
                (vmm_command_add_drive(&c, &root_drive), c.drives[0].node_name = "0root"));
        REFUSED("drive root is given twice",
                (vmm_command_add_drive(&c, &root_drive), vmm_command_add_drive(&c, &root_drive)));
        REFUSED("detect-zeroes unmap needs discard unmap",
                (vmm_command_add_drive(&c, &root_drive), c.drives[0].discard_unmap = false));
        REFUSED("a cdrom is read-only",
                (vmm_command_add_drive(&c, &seed_drive), c.drives[0].read_only = false));
        REFUSED("a cdrom is read-only",
                (vmm_command_add_drive(&c, &seed_drive), c.drives[0].bus = NULL));
        /* DISK-8 */
        REFUSED("bus ide.1 is no hotplug port",
                (vmm_command_add_drive(&c, &root_drive), c.drives[0].bus = "ide.1"));
        REFUSED("bus hp0 is taken",
                (c.n_hotplug_ports = 1, vmm_command_add_drive(&c, &root_drive),
                 c.drives[0].bus = "hp0", vmm_command_add_drive(&c, &seed_drive),
                 c.drives[1].device = VMM_DRIVE_VIRTIO_BLK, c.drives[1].read_only = true,
                 c.drives[1].bus = "hp0"));
        REFUSED("mac must be",
                (vmm_command_add_nic(&c, &nic), c.nics[0].mac = "52:54:00:12:AB:CD"));
        REFUSED("nic 0 has no descriptor", (vmm_command_add_nic(&c, &nic), c.nics[0].tap_fd = -1));
        REFUSED("nic 0 has an invalid id", (vmm_command_add_nic(&c, &nic), c.nics[0].id = ""));
#undef REFUSED

        /* NULL error is allowed */
        c = base_command();
        c.kernel_fd = -1;
        char **argv = NULL;
        assert_int_equal(vmm_command_argv(&c, &argv, NULL), -EINVAL);
        assert_null(argv);
}

/* The tables are bounded: the one past the end is refused, not written. */
static void test_command_tables_full(void **state)
{
        VmmCommand c = base_command();
        for (size_t i = 0; i < VMM_DRIVES_MAX; i++)
                assert_int_equal(vmm_command_add_drive(&c, &seed_drive), 0);
        assert_int_equal(vmm_command_add_drive(&c, &seed_drive), -E2BIG);
        for (size_t i = 0; i < VMM_NICS_MAX; i++)
                assert_int_equal(vmm_command_add_nic(&c, &nic), 0);
        assert_int_equal(vmm_command_add_nic(&c, &nic), -E2BIG);
        while (c.n_chardevs < VMM_CHARDEVS_MAX)
                assert_int_equal(vmm_command_add_chardev(&c, &c.chardevs[0]), 0);
        assert_int_equal(vmm_command_add_chardev(&c, &c.chardevs[0]), -E2BIG);
        assert_int_equal(vmm_command_set_channels(&c, "/q", "/a", NULL, "/c"), -E2BIG);
}

/* ---- /proc/<pid>/stat ---------------------------------------------------------------------- */

/* Fields 3..52 of a real stat (kernel 6.1), field 22 (start_time) being 987654. */
static const char *const stat_tail[] = {
    "S",
    "1",
    "4242",
    "4242",
    "0",
    "-1",
    "4194560",
    "101",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "20",
    "0",
    "1",
    "0",
    "987654",
    "3133440",
    "394",
    "18446744073709551615",
    "93840167419904",
    "93840167439785",
    "140734967330560",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "17",
    "0",
    "0",
    "0",
    "0",
    "0",
    "0",
    "93840167455792",
    "93840167457408",
    "93840546344960",
    "140734967335563",
    "140734967335583",
    "140734967335583",
    "140734967336939",
    "0",
};

/*
 * "4242 (<comm>) <fields 3..last>\n" with field `field` replaced by value (0: none), or, with
 * value NULL, removed.
 */
static char *stat_text(const char *comm, unsigned last, unsigned field, const char *value)
{
        char *s = NULL;
        assert_int_equal(strprintf(&s, "4242 (%s)", comm), 0);
        for (unsigned f = 3; f <= last; f++) {
                const char *v = f == field ? value : stat_tail[f - 3];
                if (v)
                        assert_int_equal(strextend(&s, " %s", v), 0);
        }
        assert_int_equal(strextend(&s, "\n"), 0);
        return s;
}

static VmmProcStat parse_stat_ok(const char *text)
{
        VmmProcStat st;
        _cleanup_free_ char *error = NULL;
        int r = vmm_parse_proc_stat(text, strlen(text), &st, &error);
        if (r < 0)
                fail_msg("\"%s\" refused: %s", text, error);
        assert_null(error);
        return st;
}

/* The stat text is refused with EBADMSG (or r), the message contains what, ret is untouched. */
static void assert_stat_refused_r(const char *text, size_t size, int r, const char *what)
{
        VmmProcStat st = {.pid = -7, .state = '?'};
        _cleanup_free_ char *error = NULL;
        int got = vmm_parse_proc_stat(text, size, &st, &error);
        if (got != r)
                fail_msg("\"%.*s\": got %d, want %d (%s)", (int)size, text, got, r,
                         error ? error : "no message");
        assert_int_equal(st.pid, -7);
        assert_int_equal(st.state, '?');
        assert_non_null(error);
        assert_null(strchr(error, '\n'));
        if (what && !strstr(error, what))
                fail_msg("\"%.*s\": error \"%s\" lacks \"%s\"", (int)size, text, error, what);
}

static void assert_stat_refused(const char *text, const char *what)
{
        assert_stat_refused_r(text, strlen(text), -EBADMSG, what);
}

/* VMM-16: the fields liveness needs, from a real-looking stat */
static void test_stat_parse(void **state)
{
        _cleanup_free_ char *t = stat_text("qemu-system-x86", 52, 0, NULL);
        VmmProcStat st = parse_stat_ok(t);
        assert_int_equal(st.pid, 4242);
        assert_int_equal(st.state, 'S');
        assert_int_equal(st.ppid, 1);
        assert_int_equal(st.pgrp, 4242);
        assert_int_equal(st.session, 4242);
        assert_int_equal(st.start_time, 987654);

        /* without the trailing newline, and with only the 22 fields the header promises */
        t[strlen(t) - 1] = '\0';
        assert_int_equal(parse_stat_ok(t).start_time, 987654);
        _cleanup_free_ char *short22 = stat_text("a", 22, 0, NULL);
        assert_int_equal(parse_stat_ok(short22).start_time, 987654);

        /* every state the kernel prints */
        for (const char *s = "RSDZTtXxKWPI"; *s; s++) {
                char state_[2] = {*s, 0};
                _cleanup_free_ char *u = stat_text("a", 52, 3, state_);
                assert_int_equal(parse_stat_ok(u).state, *s);
        }

        /* extremes: start_time UINT64_MAX, pid-like fields INT32_MAX and 0 */
        _cleanup_free_ char *big = stat_text("a", 52, 22, "18446744073709551615");
        assert_true(parse_stat_ok(big).start_time == UINT64_MAX);
        _cleanup_free_ char *ppid = stat_text("a", 52, 4, "2147483647");
        assert_int_equal(parse_stat_ok(ppid).ppid, INT32_MAX);
        _cleanup_free_ char *zero = stat_text("a", 52, 6, "0");
        assert_int_equal(parse_stat_ok(zero).session, 0);
        /* signed fields the kernel prints with a sign: priority and nice of an RT task */
        _cleanup_free_ char *rt = stat_text("a", 52, 18, "-100");
        assert_int_equal(parse_stat_ok(rt).start_time, 987654);
        _cleanup_free_ char *min = stat_text("a", 52, 19, "-9223372036854775808");
        assert_int_equal(parse_stat_ok(min).start_time, 987654);
}

/* VMM-16: comm is everything up to the LAST ")", spaces and parentheses included */
static void test_stat_comm(void **state)
{
        static const char *const comms[] = {
            "Web Content",
            "x) (y",
            ") (",
            "((()))",
            "a)",
            "(",
            ")",
            "",
            "a\nb",
            "  ",
            /* a process that names itself like the rest of a stat line */
            "x) R 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0",
        };
        for (size_t i = 0; i < ELEMENTSOF(comms); i++) {
                _cleanup_free_ char *t = stat_text(comms[i], 52, 0, NULL);
                VmmProcStat st = parse_stat_ok(t);
                assert_int_equal(st.pid, 4242);
                assert_int_equal(st.state, 'S');
                assert_int_equal(st.ppid, 1);
                assert_int_equal(st.start_time, 987654);
        }

        /* a ") (" after the comm that is not followed by fields makes the stat malformed */
        _cleanup_free_ char *t = stat_text("a", 52, 0, NULL);
        _cleanup_free_ char *u = NULL;
        t[strlen(t) - 1] = '\0';
        assert_int_equal(strprintf(&u, "%s) (", t), 0);
        assert_stat_refused(u, "field 3");
}

/* VMM-16, GEN-5: truncated texts are refused */
static void test_stat_truncated(void **state)
{
        _cleanup_free_ char *t = stat_text("qemu", 52, 0, NULL);
        /* Cut anywhere before field 22 begins: never accepted. */
        const char *f22 = strstr(t, " 987654 ");
        assert_non_null(f22);
        for (size_t n = 0; n <= (size_t)(f22 - t) + 1; n++)
                assert_stat_refused_r(t, n, -EBADMSG, NULL);

        assert_stat_refused("", "empty");
        assert_stat_refused("\n", "empty");
        assert_stat_refused("4242", "field 2");
        assert_stat_refused("4242 (qemu", "field 2");
        assert_stat_refused("4242 (qemu)", "field 3");
        assert_stat_refused("4242 (qemu) ", "field 3");
        assert_stat_refused("4242 (qemu) S", "fewer than 22");
}

/* VMM-16: fewer than 22 fields, or a field left out, is refused */
static void test_stat_missing_fields(void **state)
{
        for (unsigned last = 3; last < 22; last++) {
                _cleanup_free_ char *t = stat_text("a", last, 0, NULL);
                assert_stat_refused(t, "fewer than 22");
        }
        /* without the state, a number moves into field 3 */
        _cleanup_free_ char *nostate = stat_text("a", 52, 3, NULL);
        assert_stat_refused(nostate, "field 3");
        _cleanup_free_ char *nopid = strdup("(a) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5\n");
        assert_stat_refused(nopid, "field 2");
        assert_stat_refused(" (a) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5", "field");
}

/* VMM-16: start_time and the pid-like fields are plain decimals */
static void test_stat_bad_numbers(void **state)
{
        static const struct {
                unsigned field;
                const char *value;
                const char *what;
        } cases[] = {
            {22, "abc", "field 22 (start_time): not a decimal"},
            {22, "12a", "field 22 (start_time): not a decimal"},
            {22, "-5", "field 22 (start_time): not a decimal"},
            {22, "+5", "field 22 (start_time): not a decimal"},
            {22, "0x10", "field 22 (start_time): not a decimal"},
            {22, "007", "field 22 (start_time): not a decimal"},
            {22, "18446744073709551616", "field 22 (start_time): out of range"},
            {22, "99999999999999999999999", "field 22 (start_time): out of range"},
            {4, "-1", "field 4 (ppid)"},
            {4, "2147483648", "field 4 (ppid): out of range"},
            {5, "x", "field 5 (pgrp)"},
            {6, "4294967296", "field 6 (session): out of range"},
            {3, "Q", "field 3 (state)"},
            {3, "SS", "field 3 (state)"},
            {3, "1", "field 3 (state)"},
            {8, "--1", "field 8: not a decimal"},
            {8, "-0", "field 8: not a decimal"},
            {8, "-", "field 8: not a decimal"},
            {9, "1.5", "field 9: not a decimal"},
            {19, "-9223372036854775809", "field 19: out of range"},
            {25, "18446744073709551616", "field 25: out of range"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++) {
                _cleanup_free_ char *t = stat_text("a", 52, cases[i].field, cases[i].value);
                assert_stat_refused(t, cases[i].what);
        }

        /* field 1 */
        assert_stat_refused("0 (a) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5\n", "field 1 (pid)");
        assert_stat_refused("-1 (a) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5\n", "field 1 (pid)");
        assert_stat_refused("2147483648 (a) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5\n",
                            "field 1 (pid): out of range");
        assert_stat_refused("x1 (a) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5\n", "field 1");
        assert_stat_refused("1  (a) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5\n", "field 1");
}

/* GEN-5: nothing but one trailing newline after the last field; one space between fields */
static void test_stat_trailing_garbage(void **state)
{
        _cleanup_free_ char *base = stat_text("a", 52, 0, NULL);
        base[strlen(base) - 1] = '\0';
        static const char *const tails[] = {
            " ", "\n\n", " x", "x", "\t", " \n", "\r\n", "\0", "\n0",
        };
        for (size_t i = 0; i < ELEMENTSOF(tails); i++) {
                size_t tail_len = streq(tails[i], "") ? 1 : strlen(tails[i]);
                size_t n = strlen(base) + tail_len;
                _cleanup_free_ char *t = malloc(n);
                assert_non_null(t);
                memcpy(t, base, strlen(base));
                memcpy(t + strlen(base), tails[i], tail_len);
                assert_stat_refused_r(t, n, -EBADMSG, "field");
        }

        /* two spaces, a tab */
        _cleanup_free_ char *two = stat_text("a", 52, 10, " 5");
        assert_stat_refused(two, "field 10");
        _cleanup_free_ char *tab = stat_text("a", 52, 10, "5\t6");
        assert_stat_refused(tab, "field 10");
        /* a newline inside the fields */
        _cleanup_free_ char *nl = stat_text("a", 52, 10, "5\n6");
        assert_stat_refused(nl, "field 10");
}

/* GEN-5: a stat longer than VMM_PROC_STAT_MAX is refused, not cut */
static void test_stat_oversized(void **state)
{
        _cleanup_free_ char *t = stat_text("a", 52, 0, NULL);
        size_t n = VMM_PROC_STAT_MAX + 1;
        _cleanup_free_ char *big = malloc(n);
        assert_non_null(big);
        memset(big, '1', n);
        memcpy(big, t, strlen(t) - 1);
        assert_stat_refused_r(big, n, -EFBIG, "longer than 4096");

        /* exactly the bound is read: a long comm */
        _cleanup_free_ char *comm = malloc(VMM_PROC_STAT_MAX);
        assert_non_null(comm);
        size_t rest = strlen(t) - strlen("4242 (a)");
        memset(comm, 'c', VMM_PROC_STAT_MAX - rest - strlen("4242 ()"));
        comm[VMM_PROC_STAT_MAX - rest - strlen("4242 ()")] = '\0';
        _cleanup_free_ char *exact = stat_text(comm, 52, 0, NULL);
        assert_int_equal(strlen(exact), VMM_PROC_STAT_MAX);
        assert_int_equal(parse_stat_ok(exact).start_time, 987654);
}

/* VMM-16: this very process, as the kernel prints it */
static void test_stat_real_process(void **state)
{
        _cleanup_free_ char *buf = NULL;
        size_t size;
        assert_int_equal(read_file_at(AT_FDCWD, "/proc/self/stat", VMM_PROC_STAT_MAX, &buf, &size),
                         0);
        VmmProcStat st;
        _cleanup_free_ char *error = NULL;
        int r = vmm_parse_proc_stat(buf, size, &st, &error);
        if (r < 0)
                fail_msg("/proc/self/stat refused: %s\n%s", error, buf);
        assert_int_equal(st.pid, getpid());
        assert_int_equal(st.state, 'R');
        assert_int_equal(st.ppid, getppid());
        assert_int_equal(st.pgrp, getpgrp());
        assert_int_equal(st.session, getsid(0));
        assert_true(st.start_time > 0);
}

/* ---- /proc/net/unix ------------------------------------------------------------------------ */

#define UNIX_HEADER "Num       RefCount Protocol Flags    Type St Inode Path\n"
#define QMP "/run/vgpud/instances/" ID "/qmp.sock"

typedef struct UnixResult {
        int r;
        size_t n;
        uint64_t inodes[4];
        char *error;
} UnixResult;

static UnixResult find_listening(const char *text, size_t size, const char *path, size_t max)
{
        UnixResult u = {.n = 99, .inodes = {7, 7, 7, 7}};
        u.r = vmm_net_unix_find_listening(text, size, path, max ? u.inodes : NULL, max, &u.n,
                                          &u.error);
        return u;
}

static void assert_unix_found(const char *body, size_t n, uint64_t first)
{
        _cleanup_free_ char *text = NULL;
        assert_int_equal(strprintf(&text, UNIX_HEADER "%s", body), 0);
        UnixResult u = find_listening(text, strlen(text), QMP, 4);
        if (u.r < 0)
                fail_msg("refused: %s\n%s", u.error, text);
        assert_null(u.error);
        assert_int_equal(u.n, n);
        if (n > 0)
                assert_int_equal(u.inodes[0], first);
}

static void assert_unix_refused(const char *body, size_t size, const char *what)
{
        _cleanup_free_ char *text = malloc(strlen(UNIX_HEADER) + size + 1);
        assert_non_null(text);
        memcpy(text, UNIX_HEADER, strlen(UNIX_HEADER));
        memcpy(text + strlen(UNIX_HEADER), body, size);
        UnixResult u = find_listening(text, strlen(UNIX_HEADER) + size, QMP, 4);
        _cleanup_free_ char *error = u.error;
        if (u.r != -EBADMSG)
                fail_msg("\"%.*s\": got %d (%s)", (int)size, body, u.r, error ? error : "-");
        /* out-parameters untouched */
        assert_int_equal(u.n, 99);
        for (size_t i = 0; i < 4; i++)
                assert_int_equal(u.inodes[i], 7);
        assert_non_null(error);
        assert_null(strchr(error, '\n'));
        if (!strstr(error, what))
                fail_msg("\"%.*s\": error \"%s\" lacks \"%s\"", (int)size, body, error, what);
}

#define LISTEN_LINE(inode, path) \
        "00000000fb208a61: 00000002 00000000 00010000 0001 01 " inode " " path "\n"

/* VMM-17: a listening entry of the path, among the other kinds of entries */
static void test_unix_find(void **state)
{
        /* the header alone: no socket */
        assert_unix_found("", 0, 0);

        assert_unix_found("00000000fb208a61: 00000003 00000000 00000000 0001 03  1453\n"
                          "000000002a4bbc6e: 00000002 00000000 00010000 0005 01 23456 "
                          "@/org/kernel/abstract\n"
                          "0000000000000000: 00000002 00000000 00010000 0001 01 123456 " QMP "\n"
                          "0000000000000000: 00000003 00000000 00000000 0001 03 123457 " QMP "\n"
                          "0000000000000000: 0000000A 00000000 00000000 0002 01     7\n"
                          "00000000: 00000002 00000000 00010000 0001 01    99 /run/other.sock\n",
                          1, 123456);

        /* "%5lu": the inode is right-aligned in five columns */
        assert_unix_found("0000000000000000: 00000002 00000000 00010000 0001 01     1 " QMP "\n", 1,
                          1);
        assert_unix_found("0000000000000000: 00000002 00000000 00010000 0001 01    12 " QMP "\n", 1,
                          12);
        assert_unix_found("0000000000000000: 00000002 00000000 00010000 0001 01 12345 " QMP "\n", 1,
                          12345);
        assert_unix_found("0000000000000000: 00000002 00000000 00010000 0001 01 "
                          "18446744073709551615 " QMP "\n",
                          1, UINT64_MAX);
}

/* VMM-17: a connected or bound-only socket of the path is no listener */
static void test_unix_non_listening(void **state)
{
        assert_unix_found("0000000000000000: 00000003 00000000 00000000 0001 03 123457 " QMP "\n"
                          "0000000000000000: 00000002 00000000 00000000 0001 01 123458 " QMP "\n",
                          0, 0);
}

/* VMM-17, VMM-18: every listener of the path counts; only max inodes are stored */
static void test_unix_multiple_listeners(void **state)
{
        static const char text[] = UNIX_HEADER LISTEN_LINE("10001", QMP)
            LISTEN_LINE("10002", "/run/other") LISTEN_LINE("10003", QMP) LISTEN_LINE("10004", QMP);

        UnixResult u = find_listening(text, strlen(text), QMP, 4);
        assert_int_equal(u.r, 0);
        assert_int_equal(u.n, 3);
        assert_int_equal(u.inodes[0], 10001);
        assert_int_equal(u.inodes[1], 10003);
        assert_int_equal(u.inodes[2], 10004);
        assert_int_equal(u.inodes[3], 7);

        u = find_listening(text, strlen(text), QMP, 2);
        assert_int_equal(u.r, 0);
        assert_int_equal(u.n, 3);
        assert_int_equal(u.inodes[0], 10001);
        assert_int_equal(u.inodes[1], 10003);
        assert_int_equal(u.inodes[2], 7);

        u = find_listening(text, strlen(text), QMP, 0);
        assert_int_equal(u.r, 0);
        assert_int_equal(u.n, 3);
}

/* VMM-17: the path must equal byte for byte; prefixes and extensions of it do not match */
static void test_unix_prefix_paths(void **state)
{
        assert_unix_found(LISTEN_LINE("51001", QMP ".old")
                              LISTEN_LINE("51002", "/run/vgpud/instances/" ID "/qmp.soc")
                                  LISTEN_LINE("51003", QMP " ") LISTEN_LINE("51004", "@" QMP)
                                      LISTEN_LINE("51005", "/run/vgpud/instances/" ID)
                                          LISTEN_LINE("51006", "x" QMP),
                          0, 0);
        static const char text[] = UNIX_HEADER LISTEN_LINE("51001", "/a/qmp.sock.old")
            LISTEN_LINE("51002", "/a/qmp.sock") LISTEN_LINE("51003", "/a/qmp.so");
        for (const char *const *p =
                 (const char *const[]){"/a/qmp.sock", "/a/qmp.so", "/a/qmp.sock.old", NULL};
             *p; p++) {
                UnixResult u = find_listening(text, strlen(text), *p, 4);
                assert_int_equal(u.r, 0);
                assert_int_equal(u.n, 1);
                assert_int_equal(u.inodes[0], streq(*p, "/a/qmp.sock") ? 51002
                                              : streq(*p, "/a/qmp.so") ? 51003
                                                                       : 51001);
        }
        /* a path with a space is found whole (paths are raw) */
        static const char spaced[] = UNIX_HEADER LISTEN_LINE("51007", "/a/b c");
        UnixResult u = find_listening(spaced, strlen(spaced), "/a/b c", 4);
        assert_int_equal(u.r, 0);
        assert_int_equal(u.n, 1);
        assert_int_equal(u.inodes[0], 51007);
}

/* VMM-18: anything but the kernel's header is malformed */
static void test_unix_bad_header(void **state)
{
        static const char *const texts[] = {
            "",
            "Num       RefCount Protocol Flags    Type St Inode Path",
            "Num RefCount Protocol Flags Type St Inode Path\n",
            "Num       RefCount Protocol Flags    Type St Inode Path \n",
            "num       RefCount Protocol Flags    Type St Inode Path\n",
            "Num       RefCount Protocol Flags    Type St Inode\n",
            "\n",
            "0000000000000000: 00000002 00000000 00010000 0001 01 123456 /a\n",
        };
        for (size_t i = 0; i < ELEMENTSOF(texts); i++) {
                UnixResult u = find_listening(texts[i], strlen(texts[i]), QMP, 4);
                _cleanup_free_ char *error = u.error;
                assert_int_equal(u.r, -EBADMSG);
                assert_int_equal(u.n, 99);
                assert_non_null(strstr(error, "line 1"));
        }
}

/* VMM-18: a line without every column of the kernel's format is malformed */
static void test_unix_bad_lines(void **state)
{
        static const struct {
                const char *line;
                const char *what;
        } cases[] = {
            /* short lines */
            {"0000000000000000: 00000002 00000000 00010000 0001 01\n", "line 2: RefCount"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01 \n", "line 2: Inode"},
            {"0000000000000000: 00000002 00000000 00010000\n", "line 2: RefCount"},
            {"0000000000000000:\n", "line 2"},
            {"\n", "line 2"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01 123456 ", "no newline"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01 123456 " QMP,
             "line 2: no newline"},
            /* bad hex */
            {"0000000000000000: 0000000a 00000000 00010000 0001 01 123456 /a\n", "RefCount"},
            {"0000000000000000: 0000000G 00000000 00010000 0001 01 123456 /a\n", "RefCount"},
            {"0000000000000000: 0000002 00000000 00010000 0001 01 123456 /a\n", "RefCount"},
            {"0000000000000000: 000000002 00000000 00010000 0001 01 123456 /a\n", "RefCount"},
            {"0000000000000000: 00000002 00000000 0001000 0001 01 123456 /a\n", "RefCount"},
            {"0000000000000000: 00000002 00000000 00010000 001 01 123456 /a\n", "RefCount"},
            {"0000000000000000: 00000002 00000000 00010000 0001 1 123456 /a\n", "RefCount"},
            {"0000000000000000: 00000002 00000000 -0010000 0001 01 123456 /a\n", "RefCount"},
            {"00000000FB208A61: 00000002 00000000 00010000 0001 01 123456 /a\n", "address"},
            {"0000fb208a61: 00000002 00000000 00010000 0001 01 123456 /a\n", "address"},
            {"00000000fb208a61 00000002 00000000 00010000 0001 01 123456 /a\n", "address"},
            {"00000000fb208a61:00000002 00000000 00010000 0001 01 123456 /a\n", "address"},
            {" 0000000000000000: 00000002 00000000 00010000 0001 01 123456 /a\n", "address"},
            /* the inode column */
            {"0000000000000000: 00000002 00000000 00010000 0001 01 1453 /a\n", "Inode"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01  123456 /a\n", "Inode"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01 01234 /a\n", "Inode"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01 12x45 /a\n", "Inode"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01 -1234 /a\n", "Inode"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01 18446744073709551616 /a\n",
             "Inode"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01 123456\t/a\n", "path"},
            {"0000000000000000: 00000002 00000000 00010000 0001 01 123456 \n", "path"},
        };
        for (size_t i = 0; i < ELEMENTSOF(cases); i++)
                assert_unix_refused(cases[i].line, strlen(cases[i].line), cases[i].what);

        /* a NUL byte, and a bad line after good ones (nothing is stored) */
        static const char nul[] =
            "0000000000000000: 00000002 00000000 00010000 0001 01 123456 /a\0b\n";
        assert_unix_refused(nul, sizeof(nul) - 1, "line 2: contains a NUL");
        static const char late[] = LISTEN_LINE("10001", QMP) LISTEN_LINE("10002", QMP) "garbage\n";
        assert_unix_refused(late, strlen(late), "line 4");
}

/* GEN-5: a /proc/net/unix past VMM_NET_UNIX_MAX is refused (liveness is then ambiguous) */
static void test_unix_oversized(void **state)
{
        size_t n = VMM_NET_UNIX_MAX + 1;
        _cleanup_free_ char *big = calloc(1, n);
        assert_non_null(big);
        memcpy(big, UNIX_HEADER, strlen(UNIX_HEADER));
        size_t found = 99;
        _cleanup_free_ char *error = NULL;
        assert_int_equal(vmm_net_unix_find_listening(big, n, QMP, NULL, 0, &found, &error), -EFBIG);
        assert_int_equal(found, 99);
        assert_non_null(error);
}

/* VMM-17: the kernel's own file, with a socket this test listens on */
static void test_unix_real_socket(void **state)
{
        _cleanup_(test_tree_freep) TestTree *tree = NULL;
        assert_int_equal(test_tree_new("test-vmm-unix", &tree), 0);
        _cleanup_free_ char *listening = test_tree_path(tree, "qmp.sock");
        _cleanup_free_ char *bound = test_tree_path(tree, "bound.sock");
        assert_non_null(listening);
        assert_non_null(bound);
        if (strlen(listening) >= sizeof(((struct sockaddr_un *)NULL)->sun_path) ||
            strpbrk(listening, " \t\n")) {
                print_message("# temporary directory unsuitable for a socket path: %s\n",
                              listening);
                return;
        }

        _cleanup_close_ int l = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        _cleanup_close_ int b = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        assert_true(l >= 0 && b >= 0);
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        strcpy(a.sun_path, listening);
        assert_int_equal(bind(l, (struct sockaddr *)&a, sizeof a), 0);
        assert_int_equal(listen(l, 1), 0);
        strcpy(a.sun_path, bound);
        assert_int_equal(bind(b, (struct sockaddr *)&a, sizeof a), 0);
        struct stat st;
        assert_int_equal(fstat(l, &st), 0);

        _cleanup_free_ char *text = NULL, *error = NULL;
        size_t size, n = 0;
        uint64_t inodes[2] = {0, 0};
        assert_int_equal(read_file_at(AT_FDCWD, "/proc/net/unix", VMM_NET_UNIX_MAX, &text, &size),
                         0);
        int r = vmm_net_unix_find_listening(text, size, listening, inodes, 2, &n, &error);
        if (r < 0)
                fail_msg("/proc/net/unix refused: %s", error);
        assert_int_equal(n, 1);
        assert_int_equal(inodes[0], st.st_ino);

        /* bound but not listening */
        assert_int_equal(vmm_net_unix_find_listening(text, size, bound, inodes, 2, &n, &error), 0);
        assert_int_equal(n, 0);
}

/* ---- QMP messages -------------------------------------------------------------------------- */

static VmmQmpMessage qmp_ok(const char *line)
{
        VmmQmpMessage m;
        _cleanup_free_ char *error = NULL;
        int r = vmm_qmp_message_parse(line, strlen(line), &m, &error);
        if (r < 0)
                fail_msg("'%s' refused: %s", line, error);
        assert_null(error);
        return m;
}

static void assert_qmp_refused_r(const char *line, size_t size, int r, const char *what)
{
        VmmQmpMessage m = {.kind = (VmmQmpKind)42};
        _cleanup_free_ char *error = NULL;
        int got = vmm_qmp_message_parse(line, size, &m, &error);
        if (got != r)
                fail_msg("'%.*s': got %d, want %d (%s)", (int)(size > 200 ? 200 : size), line, got,
                         r, error ? error : "-");
        assert_int_equal(m.kind, 42);
        assert_null(m.value);
        assert_non_null(error);
        /* one printable line */
        for (const char *p = error; *p; p++)
                assert_true(*p >= 0x20 && *p < 0x7f);
        if (what && !strstr(error, what))
                fail_msg("'%.*s': error \"%s\" lacks \"%s\"", (int)(size > 200 ? 200 : size), line,
                         error, what);
}

static void assert_qmp_refused(const char *line, const char *what)
{
        assert_qmp_refused_r(line, strlen(line), -EBADMSG, what);
}

/* VMM-5, VMM-20: the greeting, as QEMU 7.2 sends it (with its "\r") */
static void test_qmp_greeting(void **state)
{
        _cleanup_(vmm_qmp_message_done) VmmQmpMessage m = qmp_ok(
            "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, \"major\": 7}, "
            "\"package\": \"Debian 1:7.2+dfsg-7+deb12u6\"}, \"capabilities\": [\"oob\"]}}\r");
        assert_int_equal(m.kind, VMM_QMP_GREETING);
        assert_true(json_is_object(m.value));
        assert_non_null(json_object_get(m.value, "version"));
        assert_null(m.event);
        assert_null(m.error_class);

        assert_qmp_refused("{\"QMP\": []}", "\"QMP\" is not an object");
        assert_qmp_refused("{\"QMP\": {}, \"id\": 1}", "unknown key \"id\"");
}

/* VMM-5, VMM-6, VMM-20: replies, with and without an id */
static void test_qmp_return(void **state)
{
        {
                _cleanup_(vmm_qmp_message_done) VmmQmpMessage m = qmp_ok("{\"return\": {}}\r");
                assert_int_equal(m.kind, VMM_QMP_RETURN);
                assert_true(json_is_object(m.value));
                assert_int_equal(json_object_size(m.value), 0);
        }
        {
                _cleanup_(vmm_qmp_message_done) VmmQmpMessage m =
                    qmp_ok("{\"return\": {\"status\": \"running\", \"singlestep\": false, "
                           "\"running\": true}}");
                assert_string_equal(json_string_value(json_object_get(m.value, "status")),
                                    "running");
        }
        {
                _cleanup_(vmm_qmp_message_done) VmmQmpMessage m =
                    qmp_ok("{\"return\": [1, 2], \"id\": \"c1\"}");
                assert_int_equal(m.kind, VMM_QMP_RETURN);
                assert_int_equal(json_array_size(m.value), 2);
        }
        {
                _cleanup_(vmm_qmp_message_done) VmmQmpMessage m = qmp_ok("{\"return\": null}");
                assert_true(json_is_null(m.value));
        }
        assert_qmp_refused("{\"return\": {}, \"foo\": 1}", "unknown key \"foo\"");
}

/* VMM-6: error replies become class and desc */
static void test_qmp_error(void **state)
{
        _cleanup_(vmm_qmp_message_done) VmmQmpMessage m = qmp_ok(
            "{\"error\": {\"class\": \"GenericError\", \"desc\": \"Parameter 'x' is missing\"}, "
            "\"id\": 3}\r");
        assert_int_equal(m.kind, VMM_QMP_ERROR);
        assert_string_equal(m.error_class, "GenericError");
        assert_string_equal(m.error_desc, "Parameter 'x' is missing");
        assert_null(m.value);

        assert_qmp_refused("{\"error\": {\"class\": \"GenericError\"}}", "no string \"desc\"");
        assert_qmp_refused("{\"error\": {\"desc\": \"x\"}}", "no string \"class\"");
        assert_qmp_refused("{\"error\": {\"class\": \"GenericError\", \"desc\": 5}}",
                           "no string \"desc\"");
        assert_qmp_refused("{\"error\": {\"class\": \"A\", \"desc\": \"b\", \"x\": 1}}",
                           "unknown key \"x\"");
        assert_qmp_refused("{\"error\": \"GenericError\"}", "not an object");
        assert_qmp_refused("{\"error\": {\"class\": \"A\", \"desc\": \"b\"}, \"data\": 1}",
                           "unknown key \"data\"");
}

/* VMM-6, VMM-20: events carry a name, a timestamp and maybe data */
static void test_qmp_event(void **state)
{
        {
                _cleanup_(vmm_qmp_message_done) VmmQmpMessage m =
                    qmp_ok("{\"timestamp\": {\"seconds\": 1788379200, \"microseconds\": 597400}, "
                           "\"event\": \"SHUTDOWN\", \"data\": {\"guest\": true, \"reason\": "
                           "\"guest-shutdown\"}}\r");
                assert_int_equal(m.kind, VMM_QMP_EVENT);
                assert_string_equal(m.event, "SHUTDOWN");
                assert_true(json_is_true(json_object_get(m.value, "guest")));
        }
        {
                _cleanup_(vmm_qmp_message_done) VmmQmpMessage m =
                    qmp_ok("{\"event\": \"POWERDOWN\", \"timestamp\": {\"seconds\": 1, "
                           "\"microseconds\": 2}}");
                assert_string_equal(m.event, "POWERDOWN");
                assert_null(m.value);
        }

        /* without a name */
        assert_qmp_refused(
            "{\"event\": \"\", \"timestamp\": {\"seconds\": 1, \"microseconds\": 2}}",
            "\"event\" is not a name");
        assert_qmp_refused(
            "{\"event\": null, \"timestamp\": {\"seconds\": 1, \"microseconds\": 2}}",
            "\"event\" is not a name");
        assert_qmp_refused("{\"event\": {}, \"timestamp\": {\"seconds\": 1, \"microseconds\": 2}}",
                           "\"event\" is not a name");
        /* a bad timestamp or data */
        assert_qmp_refused("{\"event\": \"STOP\"}", "no \"timestamp\"");
        assert_qmp_refused("{\"event\": \"STOP\", \"timestamp\": 5}", "no \"timestamp\"");
        assert_qmp_refused("{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1}}",
                           "lacks integer");
        assert_qmp_refused("{\"event\": \"STOP\", \"timestamp\": {\"seconds\": \"1\", "
                           "\"microseconds\": 2}}",
                           "lacks integer");
        assert_qmp_refused("{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1, "
                           "\"microseconds\": 2, \"nanoseconds\": 3}}",
                           "unknown key \"nanoseconds\"");
        assert_qmp_refused("{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1, "
                           "\"microseconds\": 2}, \"data\": []}",
                           "\"data\" is not an object");
        assert_qmp_refused("{\"event\": \"STOP\", \"timestamp\": {\"seconds\": 1, "
                           "\"microseconds\": 2}, \"id\": 1}",
                           "unknown key \"id\"");
}

/* GEN-6: duplicate keys are refused, at the top and nested */
static void test_qmp_duplicate_keys(void **state)
{
        assert_qmp_refused("{\"return\": {}, \"return\": {}}", "duplicate");
        assert_qmp_refused("{\"return\": {\"a\": 1, \"a\": 2}}", "duplicate");
        assert_qmp_refused("{\"error\": {\"class\": \"A\", \"desc\": \"b\", \"desc\": \"c\"}}",
                           "duplicate");
}

/* VMM-6: exactly one of QMP, return, error, event */
static void test_qmp_kinds(void **state)
{
        assert_qmp_refused("{\"return\": {}, \"error\": {\"class\": \"A\", \"desc\": \"b\"}}",
                           "both \"return\" and \"error\"");
        assert_qmp_refused("{\"QMP\": {}, \"event\": \"X\"}", "both \"QMP\" and \"event\"");
        assert_qmp_refused("{\"QMP\": {}, \"return\": {}}", "both");
        assert_qmp_refused("{}", "none of");
        assert_qmp_refused("{\"id\": 1}", "none of");
        assert_qmp_refused("{\"execute\": \"quit\"}", "none of");
}

/* VMM-6, GEN-5: anything but one JSON object is refused */
static void test_qmp_not_object(void **state)
{
        static const char *const lines[] = {
            "",
            "\r",
            " ",
            "[]",
            "[{\"return\": {}}]",
            "\"return\"",
            "1",
            "null",
            "true",
            "{\"return\": {}} x",
            "{\"return\": {}}{}",
            "{\"return\": {}",
            "{'return': {}}",
            "{\"return\": 01}",
            "\xff{\"return\": {}}",
        };
        for (size_t i = 0; i < ELEMENTSOF(lines); i++)
                assert_qmp_refused(lines[i], "invalid QMP message");

        /* a NUL byte inside the line */
        static const char nul[] = "{\"return\": {}}\0";
        assert_qmp_refused_r(nul, sizeof(nul) - 1, -EBADMSG, "invalid QMP message");
        /* control bytes quoted by jansson stay out of the message */
        assert_qmp_refused("{\"return\": \x1b[31m}", "invalid QMP message");
}

/* GEN-6: nesting deeper than 16 levels is refused before jansson sees it */
static void test_qmp_too_deep(void **state)
{
        for (unsigned depth = 14; depth <= 17; depth++) {
                /* {"return": [[...]]}: the object is level 1, then depth - 1 arrays */
                _cleanup_free_ char *line = NULL;
                assert_int_equal(strextend(&line, "{\"return\": "), 0);
                for (unsigned i = 1; i < depth; i++)
                        assert_int_equal(strextend(&line, "["), 0);
                for (unsigned i = 1; i < depth; i++)
                        assert_int_equal(strextend(&line, "]"), 0);
                assert_int_equal(strextend(&line, "}"), 0);
                if (depth <= JSON_DEPTH_MAX) {
                        _cleanup_(vmm_qmp_message_done) VmmQmpMessage m = qmp_ok(line);
                        assert_int_equal(m.kind, VMM_QMP_RETURN);
                } else
                        assert_qmp_refused(line, "nested deeper than 16");
        }
}

/* VMM-6: a line of at most 1 MiB (its "\r" excluded) is read; a longer one is E2BIG */
static void test_qmp_too_long(void **state)
{
        size_t max = VMM_QMP_LINE_MAX;
        _cleanup_free_ char *line = malloc(max + 2);
        assert_non_null(line);
        static const char head[] = "{\"return\": \"";
        memcpy(line, head, strlen(head));
        memset(line + strlen(head), 'a', max - strlen(head) - 2);
        memcpy(line + max - 2, "\"}", 2);
        line[max] = '\r';

        VmmQmpMessage m;
        assert_int_equal(vmm_qmp_message_parse(line, max, &m, NULL), 0);
        assert_int_equal(json_string_length(m.value), max - strlen(head) - 2);
        vmm_qmp_message_done(&m);
        assert_int_equal(vmm_qmp_message_parse(line, max + 1, &m, NULL), 0);
        vmm_qmp_message_done(&m);

        line[max] = ' ';
        assert_qmp_refused_r(line, max + 1, -E2BIG, "longer than 1048576");
        line[max + 1] = '\r';
        assert_qmp_refused_r(line, max + 2, -E2BIG, "longer than 1048576");
}

/* VMM-6: QEMU's "\r" before the newline is accepted, once */
static void test_qmp_trailing_cr(void **state)
{
        _cleanup_(vmm_qmp_message_done) VmmQmpMessage a = qmp_ok("{\"return\": {}}");
        _cleanup_(vmm_qmp_message_done) VmmQmpMessage b = qmp_ok("{\"return\": {}}\r");
        assert_int_equal(a.kind, b.kind);
        assert_true(json_equal(a.value, b.value));
        assert_qmp_refused("{\"return\": {}}\rx", "invalid QMP message");
}

/* vmm_qmp_message_done() accepts NULL and a message twice */
static void test_qmp_done(void **state)
{
        vmm_qmp_message_done(NULL);
        VmmQmpMessage m = qmp_ok("{\"error\": {\"class\": \"A\", \"desc\": \"b\"}}");
        vmm_qmp_message_done(&m);
        assert_null(m.error_class);
        vmm_qmp_message_done(&m);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
            cmocka_unit_test(test_argv_nic),
            cmocka_unit_test(test_argv_nic_without_vhost),
            cmocka_unit_test(test_argv_cdrom_seed),
            cmocka_unit_test(test_argv_blockdev_json),
            cmocka_unit_test(test_passed_fds),
            cmocka_unit_test(test_argv_chardev_order),
            cmocka_unit_test(test_argv_console_socket),
            cmocka_unit_test(test_argv_name_is_escaped),
            cmocka_unit_test(test_argv_serial_is_escaped),
            cmocka_unit_test(test_keyval_escape),
            cmocka_unit_test(test_argv_missing_fields),
            cmocka_unit_test(test_command_tables_full),
            cmocka_unit_test(test_stat_parse),
            cmocka_unit_test(test_stat_comm),
            cmocka_unit_test(test_stat_truncated),
            cmocka_unit_test(test_stat_missing_fields),
            cmocka_unit_test(test_stat_bad_numbers),
            cmocka_unit_test(test_stat_trailing_garbage),
            cmocka_unit_test(test_stat_oversized),
            cmocka_unit_test(test_stat_real_process),
            cmocka_unit_test(test_unix_find),
            cmocka_unit_test(test_unix_non_listening),
            cmocka_unit_test(test_unix_multiple_listeners),
            cmocka_unit_test(test_unix_prefix_paths),
            cmocka_unit_test(test_unix_bad_header),
            cmocka_unit_test(test_unix_bad_lines),
            cmocka_unit_test(test_unix_oversized),
            cmocka_unit_test(test_unix_real_socket),
            cmocka_unit_test(test_qmp_greeting),
            cmocka_unit_test(test_qmp_return),
            cmocka_unit_test(test_qmp_error),
            cmocka_unit_test(test_qmp_event),
            cmocka_unit_test(test_qmp_duplicate_keys),
            cmocka_unit_test(test_qmp_kinds),
            cmocka_unit_test(test_qmp_not_object),
            cmocka_unit_test(test_qmp_too_deep),
            cmocka_unit_test(test_qmp_too_long),
            cmocka_unit_test(test_qmp_trailing_cr),
            cmocka_unit_test(test_qmp_done),
        };
        return cmocka_run_group_tests_name("vmm", tests, NULL, NULL);
}
