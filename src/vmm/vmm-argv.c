/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The QEMU command line (SPEC VMM-1, VMM-2). A pure function: the same VmmCommand always gives
 * the same argv, which the golden files under tests/data/golden/vmm/ pin.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <unistd.h>

#include "vmm/vmm.h"

char *vmm_keyval_escape(const char *value)
{
        size_t n = 0;
        for (const char *p = value; *p; p++)
                n += *p == ',' ? 2 : 1;

        char *out = malloc(n + 1);
        if (!out)
                return NULL;
        char *q = out;
        for (const char *p = value; *p; p++) {
                *q++ = *p;
                if (*p == ',')
                        *q++ = ',';
        }
        *q = '\0';
        return out;
}

static bool missing(const char *s)
{
        return !s || !*s;
}

/* Appends one argument; every call after a failure is a no-op, so a caller checks once. */
typedef struct ArgvBuilder {
        char **argv;
        int r;
} ArgvBuilder;

static void add(ArgvBuilder *b, const char *arg)
{
        if (b->r >= 0)
                b->r = strv_push(&b->argv, arg);
}

/* Appends a formatted argument; outside values in it are the caller's to escape. */
static void addf(ArgvBuilder *b, const char *fmt, ...) _printf_(2, 3);
static void addf(ArgvBuilder *b, const char *fmt, ...)
{
        if (b->r < 0)
                return;
        _cleanup_free_ char *s = NULL;
        va_list ap;
        va_start(ap, fmt);
        int n = vasprintf(&s, fmt, ap);
        va_end(ap);
        if (n < 0) {
                s = NULL;
                b->r = -ENOMEM;
                return;
        }
        add(b, s);
}

/* "<prefix><value, commas doubled><suffix>": one keyval argument with one outside value. */
static void add_keyval(ArgvBuilder *b, const char *prefix, const char *value, const char *suffix)
{
        if (b->r < 0)
                return;
        _cleanup_free_ char *escaped = vmm_keyval_escape(value);
        if (!escaped) {
                b->r = -ENOMEM;
                return;
        }
        addf(b, "%s%s%s", prefix, escaped, suffix);
}

static int check_command(const VmmCommand *c, char **error)
{
        static const char prefix[] = "QEMU command line";
        const struct {
                const char *field;
                const char *value;
        } required[] = {
            {"qemu_binary", c->qemu_binary}, {"name", c->name},
            {"qmp_socket", c->qmp_socket},   {"agent_socket", c->agent_socket},
            {"console_log", c->console_log},
        };

        for (size_t i = 0; i < ELEMENTSOF(required); i++)
                if (missing(required[i].value))
                        return error_set(error, -EINVAL, "%s: %s is missing", prefix,
                                         required[i].field);
        if (c->accel != CONFIG_QEMU_ACCEL_AUTO && c->accel != CONFIG_QEMU_ACCEL_KVM &&
            c->accel != CONFIG_QEMU_ACCEL_TCG)
                return error_set(error, -EINVAL, "%s: accel %d is not auto, kvm or tcg", prefix,
                                 (int)c->accel);
        if (c->vcpus == 0)
                return error_set(error, -EINVAL, "%s: vcpus is missing", prefix);
        if (c->memory_mb == 0)
                return error_set(error, -EINVAL, "%s: memory_mb is missing", prefix);

        /* An empty string is as absent as NULL for the optional parts, but then it is a
         * mistake of the caller: QEMU would get "-append ''". */
        const struct {
                const char *field;
                const char *value;
        } optional[] = {
            {"cmdline", c->cmdline},
            {"vfio_sysfsdev", c->vfio_sysfsdev},
        };
        for (size_t i = 0; i < ELEMENTSOF(optional); i++)
                if (optional[i].value && !*optional[i].value)
                        return error_set(error, -EINVAL, "%s: %s is empty", prefix,
                                         optional[i].field);

        /* 0..2 are QEMU's standard streams: a zeroed field is a mistake, not a file. */
        const struct {
                const char *field;
                int fd;
        } fds[] = {
            {"kernel_fd", c->kernel_fd}, {"initrd_fd", c->initrd_fd}, {"disk_fd", c->disk_fd}};
        for (size_t i = 0; i < ELEMENTSOF(fds); i++)
                if (fds[i].fd >= 0 && fds[i].fd <= STDERR_FILENO)
                        return error_set(error, -EINVAL, "%s: %s %d is a standard stream", prefix,
                                         fds[i].field, fds[i].fd);

        bool kernel = c->kernel_fd >= 0;
        if (!kernel && c->initrd_fd >= 0)
                return error_set(error, -EINVAL, "%s: initrd is given without a kernel", prefix);
        if (!kernel && c->cmdline)
                return error_set(error, -EINVAL, "%s: cmdline is given without a kernel", prefix);
        if (!kernel && c->disk_fd < 0)
                return error_set(error, -EINVAL, "%s: neither kernel nor disk is given", prefix);
        return 0;
}

/* The passed descriptors in the order of their numbers in QEMU: kernel, initrd, disk. */
size_t vmm_command_passed_fds(const VmmCommand *c, int fds[static VMM_PASSED_FDS_MAX])
{
        size_t n = 0;
        const int all[] = {c->kernel_fd, c->initrd_fd, c->disk_fd};
        for (size_t i = 0; i < ELEMENTSOF(all); i++)
                if (all[i] >= 0)
                        fds[n++] = all[i];
        return n;
}

/* The number QEMU finds fd at: its place among the passed descriptors. */
static int child_fd(const VmmCommand *c, int fd)
{
        int fds[VMM_PASSED_FDS_MAX];
        size_t n = vmm_command_passed_fds(c, fds);
        for (size_t i = 0; i < n; i++)
                if (fds[i] == fd)
                        return VMM_PASSED_FD_FIRST + (int)i;
        return -1;
}

int vmm_command_argv(const VmmCommand *c, char ***ret, char **error)
{
        int r = check_command(c, error);
        if (r < 0)
                return r;

        ArgvBuilder b = {.argv = NULL, .r = 0};

        add(&b, c->qemu_binary);
        add(&b, "-name");
        add_keyval(&b, "guest=", c->name, ",debug-threads=on");
        add(&b, "-machine");
        add(&b, "q35");

        /* auto tries kvm first and lets QEMU fall back to tcg (VMM-1). */
        add(&b, "-accel");
        add(&b, c->accel == CONFIG_QEMU_ACCEL_TCG ? "tcg" : "kvm");
        if (c->accel == CONFIG_QEMU_ACCEL_AUTO) {
                add(&b, "-accel");
                add(&b, "tcg");
        }

        add(&b, "-cpu");
        add(&b, "max");
        add(&b, "-smp");
        addf(&b, "%" PRIu32, c->vcpus);
        add(&b, "-m");
        addf(&b, "%" PRIu64 "M", c->memory_mb);
        add(&b, "-nodefaults");
        add(&b, "-no-user-config");
        add(&b, "-display");
        add(&b, "none");

        add(&b, "-chardev");
        add_keyval(&b, "socket,id=qmp,path=", c->qmp_socket, ",server=on,wait=off");
        add(&b, "-mon");
        add(&b, "chardev=qmp,mode=control");

        add(&b, "-chardev");
        add_keyval(&b, "socket,id=agent0,path=", c->agent_socket, ",server=on,wait=off");
        add(&b, "-device");
        add(&b, "virtio-serial-pci,id=vser0");
        add(&b, "-device");
        add(&b, "virtserialport,bus=vser0.0,chardev=agent0,name=" VMM_AGENT_PORT_NAME);

        add(&b, "-chardev");
        add_keyval(&b, "file,id=console0,path=", c->console_log, ",append=on");
        add(&b, "-serial");
        add(&b, "chardev:console0");

        /*
         * INST-6: the files vgpud opened, by descriptor; QEMU opens /proc/self/fd/<n>, which is
         * the file checked whatever happened to its path since. The cmdline is taken raw (VMM-2).
         */
        if (c->kernel_fd >= 0) {
                add(&b, "-kernel");
                addf(&b, "/proc/self/fd/%d", child_fd(c, c->kernel_fd));
                if (c->initrd_fd >= 0) {
                        add(&b, "-initrd");
                        addf(&b, "/proc/self/fd/%d", child_fd(c, c->initrd_fd));
                }
                if (c->cmdline) {
                        add(&b, "-append");
                        add(&b, c->cmdline);
                }
        }

        /*
         * DISK-6: boot.disk read-only, raw (never probed, DISK-9). The descriptor goes into an
         * fd set named by its own number, so that every passed file has a set of its own.
         */
        if (c->disk_fd >= 0) {
                int n = child_fd(c, c->disk_fd);
                add(&b, "-add-fd");
                addf(&b, "fd=%d,set=%d", n, n);
                add(&b, "-blockdev");
                addf(&b,
                     "driver=raw,node-name=bootdisk,read-only=on,file.driver=file,"
                     "file.filename=/dev/fdset/%d",
                     n);
                add(&b, "-device");
                add(&b, "virtio-blk-pci,drive=bootdisk");
        }

        if (c->vfio_sysfsdev) {
                add(&b, "-device");
                add_keyval(&b, "vfio-pci,sysfsdev=", c->vfio_sysfsdev, "");
        }

        _cleanup_strv_free_ char **argv = b.argv;
        if (b.r < 0)
                return error_set_oom(error);
        *ret = TAKE_PTR(argv);
        return 0;
}
