/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The QEMU command line (SPEC VMM-1, VMM-2) from the command as data. A pure function: the same
 * VmmCommand always gives the same argv, which the golden files under tests/data/golden/vmm/ pin
 * (from records through instances/, and from hand-built commands for the parts no record makes
 * yet).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <unistd.h>

#include <jansson.h>

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

/* ---- building ------------------------------------------------------------------------------ */

VmmCommand vmm_command_init(void)
{
        return (VmmCommand){.machine = "q35", .cpu = "max", .kernel_fd = -1, .initrd_fd = -1};
}

int vmm_command_add_chardev(VmmCommand *c, const VmmChardev *chardev)
{
        if (c->n_chardevs == VMM_CHARDEVS_MAX)
                return -E2BIG;
        c->chardevs[c->n_chardevs++] = *chardev;
        return 0;
}

int vmm_command_add_drive(VmmCommand *c, const VmmDrive *drive)
{
        if (c->n_drives == VMM_DRIVES_MAX)
                return -E2BIG;
        c->drives[c->n_drives++] = *drive;
        return 0;
}

int vmm_command_add_nic(VmmCommand *c, const VmmNic *nic)
{
        if (c->n_nics == VMM_NICS_MAX)
                return -E2BIG;
        c->nics[c->n_nics++] = *nic;
        return 0;
}

int vmm_command_set_channels(VmmCommand *c, const char *qmp_socket, const char *agent_socket,
                             const char *console_socket, const char *console_log)
{
        VmmChardev console = console_socket ? (VmmChardev){.id = VMM_CHARDEV_CONSOLE,
                                                           .kind = VMM_CHARDEV_SOCKET,
                                                           .path = console_socket,
                                                           .server = true,
                                                           .logfile = console_log}
                                            : (VmmChardev){.id = VMM_CHARDEV_CONSOLE,
                                                           .kind = VMM_CHARDEV_FILE,
                                                           .path = console_log,
                                                           .append = true};
        const VmmChardev parts[] = {
            {.id = VMM_CHARDEV_QMP, .kind = VMM_CHARDEV_SOCKET, .path = qmp_socket, .server = true},
            {.id = VMM_CHARDEV_AGENT,
             .kind = VMM_CHARDEV_SOCKET,
             .path = agent_socket,
             .server = true},
            console,
        };
        if (c->n_chardevs + ELEMENTSOF(parts) > VMM_CHARDEVS_MAX)
                return -E2BIG;
        for (size_t i = 0; i < ELEMENTSOF(parts); i++)
                c->chardevs[c->n_chardevs++] = parts[i];
        c->monitor_chardev = VMM_CHARDEV_QMP;
        c->agent_chardev = VMM_CHARDEV_AGENT;
        c->serial_chardev = VMM_CHARDEV_CONSOLE;
        return 0;
}

/* ---- descriptor numbers (VMM-3) ------------------------------------------------------------ */

/* Where each passed descriptor lands in QEMU: NICs first, so that one NIC's TAP is 3, vhost 4. */
typedef struct FdNumbers {
        int tap[VMM_NICS_MAX], vhost[VMM_NICS_MAX];
        int kernel, initrd;
        int drive[VMM_DRIVES_MAX];
        int fds[VMM_PASSED_FDS_MAX]; /* vgpud's descriptors, in that order */
        size_t n;
} FdNumbers;

static int number_fd(FdNumbers *f, int fd)
{
        if (fd < 0)
                return -1;
        f->fds[f->n] = fd;
        return VMM_PASSED_FD_FIRST + (int)f->n++;
}

static void number_fds(const VmmCommand *c, FdNumbers *ret)
{
        FdNumbers f = {.n = 0};
        size_t n_nics = c->n_nics < VMM_NICS_MAX ? c->n_nics : VMM_NICS_MAX;
        size_t n_drives = c->n_drives < VMM_DRIVES_MAX ? c->n_drives : VMM_DRIVES_MAX;
        for (size_t i = 0; i < n_nics; i++) {
                f.tap[i] = number_fd(&f, c->nics[i].tap_fd);
                f.vhost[i] = number_fd(&f, c->nics[i].vhost_fd);
        }
        f.kernel = number_fd(&f, c->kernel_fd);
        f.initrd = number_fd(&f, c->kernel_fd >= 0 ? c->initrd_fd : -1);
        for (size_t i = 0; i < n_drives; i++)
                f.drive[i] = number_fd(&f, c->drives[i].fd);
        *ret = f;
}

size_t vmm_command_passed_fds(const VmmCommand *c, int fds[static VMM_PASSED_FDS_MAX])
{
        FdNumbers f;
        number_fds(c, &f);
        memcpy(fds, f.fds, f.n * sizeof(int));
        return f.n;
}

/* ---- checks -------------------------------------------------------------------------------- */

#define PREFIX "QEMU command line"

/* 0..2 are QEMU's standard streams: a zeroed field is a mistake, not a file. */
static int check_fd(int fd, bool required, const char *what, size_t index, char **error)
{
        if (fd < 0 && required)
                return error_set(error, -EINVAL, PREFIX ": %s %zu has no descriptor", what, index);
        if (fd >= 0 && fd <= STDERR_FILENO)
                return error_set(error, -EINVAL, PREFIX ": %s %d is a standard stream", what, fd);
        return 0;
}

static int check_required(const VmmCommand *c, char **error)
{
        const struct {
                const char *field;
                const char *value;
        } required[] = {
            {"qemu_binary", c->qemu_binary},
            {"name", c->name},
            {"machine", c->machine},
            {"cpu", c->cpu},
        };
        for (size_t i = 0; i < ELEMENTSOF(required); i++)
                if (missing(required[i].value))
                        return error_set(error, -EINVAL, PREFIX ": %s is missing",
                                         required[i].field);
        if (c->accel != CONFIG_QEMU_ACCEL_AUTO && c->accel != CONFIG_QEMU_ACCEL_KVM &&
            c->accel != CONFIG_QEMU_ACCEL_TCG)
                return error_set(error, -EINVAL, PREFIX ": accel %d is not auto, kvm or tcg",
                                 (int)c->accel);
        if (c->vcpus == 0)
                return error_set(error, -EINVAL, PREFIX ": vcpus is missing");
        if (c->memory_mb == 0)
                return error_set(error, -EINVAL, PREFIX ": memory_mb is missing");
        if (c->n_chardevs > VMM_CHARDEVS_MAX || c->n_drives > VMM_DRIVES_MAX ||
            c->n_nics > VMM_NICS_MAX)
                return error_set(error, -EINVAL, PREFIX ": too many parts");

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
                        return error_set(error, -EINVAL, PREFIX ": %s is empty", optional[i].field);
        return 0;
}

static int check_chardevs(const VmmCommand *c, char **error)
{
        const struct {
                const char *consumer;
                const char *id;
        } consumers[] = {
            {"monitor", c->monitor_chardev},
            {"agent port", c->agent_chardev},
            {"serial", c->serial_chardev},
        };
        for (size_t i = 0; i < ELEMENTSOF(consumers); i++)
                if (missing(consumers[i].id))
                        return error_set(error, -EINVAL, PREFIX ": the %s chardev is missing",
                                         consumers[i].consumer);

        for (size_t k = 0; k < ELEMENTSOF(consumers); k++) {
                bool found = false;
                for (size_t i = 0; i < c->n_chardevs; i++)
                        found = found || streq(c->chardevs[i].id, consumers[k].id);
                if (!found)
                        return error_set(error, -EINVAL, PREFIX ": the %s's chardev %s is unknown",
                                         consumers[k].consumer, consumers[k].id);
        }
        for (size_t i = 0; i < c->n_chardevs; i++) {
                const VmmChardev *d = &c->chardevs[i];
                if (!qemu_id_is_valid(d->id))
                        return error_set(error, -EINVAL, PREFIX ": chardev %zu has an invalid id",
                                         i);
                if (missing(d->path))
                        return error_set(error, -EINVAL, PREFIX ": chardev %s: path is missing",
                                         d->id);
                if (d->kind == VMM_CHARDEV_FILE && (d->server || d->logfile))
                        return error_set(error, -EINVAL,
                                         PREFIX ": chardev %s: a file takes no server or logfile",
                                         d->id);
                if (d->kind == VMM_CHARDEV_SOCKET && d->append)
                        return error_set(error, -EINVAL,
                                         PREFIX ": chardev %s: a socket is not appended to", d->id);
                if (d->logfile && !*d->logfile)
                        return error_set(error, -EINVAL, PREFIX ": chardev %s: logfile is empty",
                                         d->id);
                size_t users = 0;
                for (size_t k = 0; k < ELEMENTSOF(consumers); k++)
                        users += streq(consumers[k].id, d->id);
                for (size_t k = 0; k < i; k++)
                        if (streq(c->chardevs[k].id, d->id))
                                return error_set(error, -EINVAL,
                                                 PREFIX ": chardev %s is given twice", d->id);
                /* QEMU would start with an unused chardev; vgpud never means to make one. */
                if (users != 1)
                        return error_set(error, -EINVAL, PREFIX ": chardev %s has %zu consumers",
                                         d->id, users);
        }
        /* The monitor and the agent are sockets vgpud connects to. */
        for (size_t i = 0; i < c->n_chardevs; i++) {
                const VmmChardev *d = &c->chardevs[i];
                if ((streq(d->id, c->monitor_chardev) || streq(d->id, c->agent_chardev)) &&
                    (d->kind != VMM_CHARDEV_SOCKET || !d->server))
                        return error_set(error, -EINVAL,
                                         PREFIX ": chardev %s must be a listening socket", d->id);
        }
        return 0;
}

const char *vmm_hotplug_port(size_t index)
{
        static const char *const ports[VMM_HOTPLUG_PORTS_MAX] = {"hp0", "hp1", "hp2", "hp3",
                                                                 "hp4", "hp5", "hp6", "hp7"};
        return index < VMM_HOTPLUG_PORTS_MAX ? ports[index] : NULL;
}

/* A virtio-blk's bus: one of the command's hotplug ports, each taken once. */
static int check_port(const VmmCommand *c, size_t i, char **error)
{
        const VmmDrive *d = &c->drives[i];
        bool known = false;
        for (size_t k = 0; k < c->n_hotplug_ports && !known; k++)
                known = streq(d->bus, vmm_hotplug_port(k));
        if (!known)
                return error_set(error, -EINVAL, PREFIX ": drive %s: bus %s is no hotplug port",
                                 d->node_name, d->bus);
        for (size_t k = 0; k < i; k++)
                if (streq_ptr(c->drives[k].bus, d->bus))
                        return error_set(error, -EINVAL, PREFIX ": drive %s: bus %s is taken",
                                         d->node_name, d->bus);
        return 0;
}

static int check_drives(const VmmCommand *c, char **error)
{
        if (c->n_hotplug_ports > VMM_HOTPLUG_PORTS_MAX)
                return error_set(error, -EINVAL, PREFIX ": more than %d hotplug ports",
                                 VMM_HOTPLUG_PORTS_MAX);
        for (size_t i = 0; i < c->n_drives; i++) {
                const VmmDrive *d = &c->drives[i];
                int r = check_fd(d->fd, true, "drive", i, error);
                if (r < 0)
                        return r;
                if (!qemu_id_is_valid(d->node_name))
                        return error_set(error, -EINVAL,
                                         PREFIX ": drive %zu has an invalid node name", i);
                for (size_t k = 0; k < i; k++)
                        if (streq(c->drives[k].node_name, d->node_name))
                                return error_set(error, -EINVAL, PREFIX ": drive %s is given twice",
                                                 d->node_name);
                if (d->format != VMM_DRIVE_RAW && d->format != VMM_DRIVE_QCOW2)
                        return error_set(error, -EINVAL, PREFIX ": drive %s: unknown format",
                                         d->node_name);
                /* QEMU refuses detect-zeroes=unmap without discard=unmap. */
                if (d->detect_zeroes_unmap && !d->discard_unmap)
                        return error_set(error, -EINVAL,
                                         PREFIX ": drive %s: detect-zeroes unmap needs discard "
                                                "unmap",
                                         d->node_name);
                if (d->serial && !*d->serial)
                        return error_set(error, -EINVAL, PREFIX ": drive %s: serial is empty",
                                         d->node_name);
                switch (d->device) {
                case VMM_DRIVE_VIRTIO_BLK:
                        if (d->bus && (r = check_port(c, i, error)) < 0)
                                return r;
                        break;
                case VMM_DRIVE_IDE_CD:
                        if (missing(d->bus) || d->serial || d->bootindex || !d->read_only)
                                return error_set(error, -EINVAL,
                                                 PREFIX ": drive %s: a cdrom is read-only, on a "
                                                        "bus, without serial or bootindex",
                                                 d->node_name);
                        break;
                default:
                        return error_set(error, -EINVAL, PREFIX ": drive %s: unknown device",
                                         d->node_name);
                }
        }
        return 0;
}

static int check_nics(const VmmCommand *c, char **error)
{
        for (size_t i = 0; i < c->n_nics; i++) {
                const VmmNic *n = &c->nics[i];
                int r = check_fd(n->tap_fd, true, "nic", i, error);
                if (r >= 0)
                        r = check_fd(n->vhost_fd, false, "vhost", i, error);
                if (r < 0)
                        return r;
                if (!qemu_id_is_valid(n->id))
                        return error_set(error, -EINVAL, PREFIX ": nic %zu has an invalid id", i);
                for (size_t k = 0; k < i; k++)
                        if (streq(c->nics[k].id, n->id))
                                return error_set(error, -EINVAL, PREFIX ": nic %s is given twice",
                                                 n->id);
                if (!mac_address_is_valid(n->mac))
                        return error_set(error, -EINVAL,
                                         PREFIX ": nic %s: mac must be 6 lowercase hex pairs",
                                         n->id);
        }
        return 0;
}

static int check_command(const VmmCommand *c, char **error)
{
        int r = check_required(c, error);
        if (r >= 0)
                r = check_chardevs(c, error);
        if (r >= 0)
                r = check_fd(c->kernel_fd, false, "kernel_fd", 0, error);
        if (r >= 0)
                r = check_fd(c->initrd_fd, false, "initrd_fd", 0, error);
        if (r >= 0)
                r = check_drives(c, error);
        if (r >= 0)
                r = check_nics(c, error);
        if (r < 0)
                return r;

        bool kernel = c->kernel_fd >= 0;
        if (!kernel && c->initrd_fd >= 0)
                return error_set(error, -EINVAL, PREFIX ": initrd is given without a kernel");
        if (!kernel && c->cmdline)
                return error_set(error, -EINVAL, PREFIX ": cmdline is given without a kernel");
        if (!kernel && c->n_drives == 0)
                return error_set(error, -EINVAL, PREFIX ": neither kernel nor disk is given");
        return 0;
}

/* ---- rendering ----------------------------------------------------------------------------- */

static const VmmChardev *find_chardev(const VmmCommand *c, const char *id)
{
        for (size_t i = 0; i < c->n_chardevs; i++)
                if (streq(c->chardevs[i].id, id))
                        return &c->chardevs[i];
        return NULL;
}

/* Escapes value for a keyval option (VMM-2); NULL stays NULL, a failure marks b. */
static char *escaped(ArgvBuilder *b, const char *value)
{
        if (!value || b->r < 0)
                return NULL;
        char *e = vmm_keyval_escape(value);
        if (!e)
                b->r = -ENOMEM;
        return e;
}

/* Ids and node names are checked to be free of commas; paths and serials are escaped. */
static void add_chardev(ArgvBuilder *b, const VmmChardev *d)
{
        _cleanup_free_ char *path = escaped(b, d->path), *log = escaped(b, d->logfile);
        add(b, "-chardev");
        if (d->kind == VMM_CHARDEV_FILE)
                addf(b, "file,id=%s,path=%s%s", d->id, path, d->append ? ",append=on" : "");
        else
                addf(b, "socket,id=%s,path=%s%s%s%s%s", d->id, path,
                     d->server ? ",server=on,wait=off" : "", log ? ",logfile=" : "", log ? log : "",
                     log ? ",logappend=on" : "");
}

static const char *format_driver(VmmDriveFormat f)
{
        return f == VMM_DRIVE_QCOW2 ? "qcow2" : "raw";
}

/*
 * The -blockdev node as QEMU's JSON: a format node over a file node on /dev/fdset/<n>. cache is
 * set on the format node only; its file child inherits it. JSON needs no comma doubling, and
 * jansson keeps the keys in the order they are set, so the text is stable for the goldens.
 */
int vmm_drive_blockdev_json(const VmmDrive *d, int set, json_t **ret)
{
        _cleanup_free_ char *filename = NULL;
        if (strprintf(&filename, "/dev/fdset/%d", set) < 0)
                return -ENOMEM;
        json_auto_t *node = json_object(),
                    *file = json_pack("{s:s, s:s}", "driver", "file", "filename", filename);
        int k = node && file ? 0 : -1;
        if (k == 0)
                k = json_object_set_new(node, "driver", json_string(format_driver(d->format)));
        if (k == 0)
                k = json_object_set_new(node, "node-name", json_string(d->node_name));
        if (k == 0 && d->read_only)
                k = json_object_set_new(node, "read-only", json_true());
        if (k == 0 && d->cache_direct)
                k = json_object_set_new(node, "cache", json_pack("{s:b}", "direct", 1));
        if (k == 0 && d->discard_unmap)
                k = json_object_set_new(node, "discard", json_string("unmap"));
        if (k == 0 && d->detect_zeroes_unmap)
                k = json_object_set_new(node, "detect-zeroes", json_string("unmap"));
        if (k == 0)
                k = json_object_set(node, "file", file);
        if (k < 0)
                return -ENOMEM;
        *ret = TAKE_PTR(node);
        return 0;
}

static void add_blockdev(ArgvBuilder *b, const VmmDrive *d, int set)
{
        if (b->r < 0)
                return;
        json_auto_t *node = NULL;
        _cleanup_free_ char *text = NULL;
        if (vmm_drive_blockdev_json(d, set, &node) >= 0)
                text = json_dumps(node, JSON_COMPACT | JSON_PRESERVE_ORDER);
        if (!text) {
                b->r = -ENOMEM;
                return;
        }
        add(b, "-blockdev");
        add(b, text);
}

/* DISK-9: the descriptor in a set named by its own number, so every file has a set of its own. */
static void add_drive(ArgvBuilder *b, const VmmDrive *d, int n)
{
        add(b, "-add-fd");
        addf(b, "fd=%d,set=%d", n, n);
        add_blockdev(b, d, n);
        add(b, "-device");
        if (d->device == VMM_DRIVE_IDE_CD) {
                _cleanup_free_ char *bus = escaped(b, d->bus);
                addf(b, "ide-cd,bus=%s,drive=%s", bus, d->node_name);
                return;
        }
        _cleanup_free_ char *serial = escaped(b, d->serial), *boot = NULL;
        if (d->bootindex > 0 && strprintf(&boot, ",bootindex=%" PRIu32, d->bootindex) < 0)
                b->r = -ENOMEM;
        addf(b, "virtio-blk-pci,%s%s%sdrive=%s%s%s%s", d->bus ? "bus=" : "", d->bus ? d->bus : "",
             d->bus ? "," : "", d->node_name, boot ? boot : "", serial ? ",serial=" : "",
             serial ? serial : "");
}

/* NET-3: the TAP (and vhost-net) by descriptor, a virtio-net-pci device on it. */
static void add_nic(ArgvBuilder *b, const VmmNic *n, int tap, int vhost)
{
        add(b, "-netdev");
        if (vhost >= 0)
                addf(b, "tap,id=%s,fd=%d,vhost=on,vhostfd=%d", n->id, tap, vhost);
        else
                addf(b, "tap,id=%s,fd=%d", n->id, tap);
        add(b, "-device");
        addf(b, "virtio-net-pci,netdev=%s,mac=%s", n->id, n->mac);
}

int vmm_command_argv(const VmmCommand *c, char ***ret, char **error)
{
        int r = check_command(c, error);
        if (r < 0)
                return r;

        FdNumbers fds;
        number_fds(c, &fds);
        ArgvBuilder b = {.argv = NULL, .r = 0};

        add(&b, c->qemu_binary);
        add(&b, "-name");
        add_keyval(&b, "guest=", c->name, ",debug-threads=on");
        add(&b, "-machine");
        add_keyval(&b, "", c->machine, "");

        /* auto tries kvm first and lets QEMU fall back to tcg (VMM-1). */
        add(&b, "-accel");
        add(&b, c->accel == CONFIG_QEMU_ACCEL_TCG ? "tcg" : "kvm");
        if (c->accel == CONFIG_QEMU_ACCEL_AUTO) {
                add(&b, "-accel");
                add(&b, "tcg");
        }

        add(&b, "-cpu");
        add_keyval(&b, "", c->cpu, "");
        add(&b, "-smp");
        addf(&b, "%" PRIu32, c->vcpus);
        add(&b, "-m");
        addf(&b, "%" PRIu64 "M", c->memory_mb);
        add(&b, "-nodefaults");
        add(&b, "-no-user-config");
        add(&b, "-display");
        add(&b, "none");

        /* Each chardev right before its one consumer, as VMM-1 lists them. */
        add_chardev(&b, find_chardev(c, c->monitor_chardev));
        add(&b, "-mon");
        addf(&b, "chardev=%s,mode=control", c->monitor_chardev);

        add_chardev(&b, find_chardev(c, c->agent_chardev));
        add(&b, "-device");
        add(&b, "virtio-serial-pci,id=vser0");
        add(&b, "-device");
        addf(&b, "virtserialport,bus=vser0.0,chardev=%s,name=" VMM_AGENT_PORT_NAME,
             c->agent_chardev);

        add_chardev(&b, find_chardev(c, c->serial_chardev));
        add(&b, "-serial");
        addf(&b, "chardev:%s", c->serial_chardev);

        /*
         * INST-6: the files vgpud opened, by descriptor; QEMU opens /proc/self/fd/<n>, which is
         * the file checked whatever happened to its path since. The cmdline is taken raw (VMM-2).
         */
        if (c->kernel_fd >= 0) {
                add(&b, "-kernel");
                addf(&b, "/proc/self/fd/%d", fds.kernel);
                if (c->initrd_fd >= 0) {
                        add(&b, "-initrd");
                        addf(&b, "/proc/self/fd/%d", fds.initrd);
                }
                if (c->cmdline) {
                        add(&b, "-append");
                        add(&b, c->cmdline);
                }
        }

        /* DISK-8: the ports come first, so that a drive's device can name one. */
        for (uint32_t k = 0; k < c->n_hotplug_ports && k < VMM_HOTPLUG_PORTS_MAX; k++) {
                add(&b, "-device");
                addf(&b, "pcie-root-port,id=%s,chassis=%" PRIu32, vmm_hotplug_port(k), k + 1);
        }
        for (size_t i = 0; i < c->n_drives; i++)
                add_drive(&b, &c->drives[i], fds.drive[i]);
        for (size_t i = 0; i < c->n_nics; i++)
                add_nic(&b, &c->nics[i], fds.tap[i], fds.vhost[i]);

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
