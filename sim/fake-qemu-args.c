/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The command line of VMM-1, read the way QEMU reads it, but refusing everything vgpud does not
 * generate: a fake that tolerated more than the daemon emits could not catch a daemon bug.
 */
#include "fake-qemu.h"

#include <fcntl.h>
#include <unistd.h>

#include <sys/un.h>

/* No option of VMM-1 has more than five elements; a few more leave room for error messages. */
#define OPT_ELEMENTS_MAX 8
#define CHARDEVS_MAX 8

typedef struct OptElements {
        const char *option; /* "-chardev", for messages */
        size_t n;
        char *key[OPT_ELEMENTS_MAX]; /* NULL for the positional first element */
        char *value[OPT_ELEMENTS_MAX];
        bool taken[OPT_ELEMENTS_MAX];
} OptElements;

static void opt_elements_done(OptElements *o)
{
        for (size_t i = 0; i < o->n; i++) {
                free(o->key[i]);
                free(o->value[i]);
        }
        o->n = 0;
}

/*
 * Splits "a,b=c,d=e,,f" into elements, undoubling commas (VMM-2). With positional, the first
 * element may lack "=" and is stored with key NULL (QEMU's implied "backend"/"driver").
 */
static int opt_elements_parse(const char *option, const char *arg, bool positional,
                              OptElements *ret, char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {.option = option};
        const char *p = arg;

        for (;;) {
                size_t len = strlen(p);
                _cleanup_free_ char *el = malloc(len + 1);
                if (!el)
                        return -ENOMEM;
                size_t n = 0;
                while (*p) {
                        if (*p == ',') {
                                if (p[1] != ',')
                                        break;
                                p++;
                        }
                        el[n++] = *p++;
                }
                el[n] = 0;

                if (n == 0)
                        return error_set(error, -EINVAL, "%s %s: empty parameter", option, arg);
                if (o.n == OPT_ELEMENTS_MAX)
                        return error_set(error, -E2BIG, "%s %s: too many parameters", option, arg);

                char *eq = strchr(el, '=');
                if (eq) {
                        *eq = 0;
                        if (el[0] == 0)
                                return error_set(error, -EINVAL, "%s %s: parameter without name",
                                                 option, arg);
                        for (size_t i = 0; i < o.n; i++)
                                if (streq_ptr(o.key[i], el))
                                        return error_set(error, -EINVAL,
                                                         "%s %s: parameter '%s' given twice",
                                                         option, arg, el);
                        o.value[o.n] = strdup(eq + 1);
                        o.key[o.n] = strdup(el);
                        if (!o.key[o.n] || !o.value[o.n]) {
                                o.n++; /* frees whichever strdup succeeded */
                                return -ENOMEM;
                        }
                } else {
                        if (!positional || o.n > 0)
                                return error_set(error, -EINVAL,
                                                 "%s %s: parameter '%s' lacks a value", option, arg,
                                                 el);
                        o.key[o.n] = NULL;
                        o.value[o.n] = TAKE_PTR(el);
                }
                o.n++;

                if (*p == 0)
                        break;
                p++; /* the separating comma */
                if (*p == 0)
                        return error_set(error, -EINVAL, "%s %s: empty parameter", option, arg);
        }

        *ret = o;
        o.n = 0;
        return 0;
}

/* The value of key (NULL: the positional element), marked as consumed; NULL when absent. */
static const char *opt_take(OptElements *o, const char *key)
{
        for (size_t i = 0; i < o->n; i++)
                if (streq_ptr(o->key[i], key)) {
                        o->taken[i] = true;
                        return o->value[i];
                }
        return NULL;
}

static int opt_take_required(OptElements *o, const char *key, const char *arg, const char **ret,
                             char **error)
{
        const char *v = opt_take(o, key);
        if (!v || v[0] == 0)
                return error_set(error, -EINVAL, "%s %s: parameter '%s' is required", o->option,
                                 arg, key);
        *ret = v;
        return 0;
}

/* For parameters whose only accepted value is fixed by VMM-1 ("server=on", "mode=control"). */
static int opt_take_fixed(OptElements *o, const char *key, const char *want, const char *arg,
                          char **error)
{
        const char *v = opt_take(o, key);
        if (!v)
                return error_set(error, -EINVAL, "%s %s: parameter '%s' is required", o->option,
                                 arg, key);
        if (!streq(v, want))
                return error_set(error, -EINVAL, "%s %s: parameter '%s' must be '%s', got '%s'",
                                 o->option, arg, key, want, v);
        return 0;
}

static int opt_check_all_taken(const OptElements *o, const char *arg, char **error)
{
        for (size_t i = 0; i < o->n; i++)
                if (!o->taken[i])
                        return error_set(error, -EINVAL, "%s %s: unexpected parameter '%s'",
                                         o->option, arg, o->key[i] ? o->key[i] : o->value[i]);
        return 0;
}

typedef enum ChardevKind {
        CHARDEV_SOCKET,
        CHARDEV_FILE,
} ChardevKind;

typedef struct Chardev {
        char *id;
        char *path;
        ChardevKind kind;
        bool used;
} Chardev;

/* One -add-fd: descriptor fd in fd set id. */
typedef struct FdSet {
        int fd, id;
} FdSet;

#define FDSETS_MAX 8

/* Everything the loop collects before the cross-references can be resolved. */
typedef struct ArgsState {
        FqArgs args;
        Chardev chardevs[CHARDEVS_MAX];
        size_t n_chardevs;
        char *mon_chardev;
        char *serial_chardev;
        char *vser_id;
        char *port_bus;
        char *port_chardev;
        FdSet fdsets[FDSETS_MAX]; /* -add-fd */
        size_t n_fdsets;
        char *blockdev_node; /* -blockdev node-name= */
        int blockdev_set;    /* the fd set its file.filename=/dev/fdset/<n> names */
        bool blockdev_readonly;
        char *blk_drive; /* -device virtio-blk-pci,drive= */
        size_t n_accel;
        bool seen_machine, seen_cpu, seen_smp, seen_m, seen_nodefaults, seen_no_user_config,
            seen_display, seen_port;
} ArgsState;

static void args_state_done(ArgsState *s)
{
        fq_args_done(&s->args);
        for (size_t i = 0; i < s->n_chardevs; i++) {
                free(s->chardevs[i].id);
                free(s->chardevs[i].path);
        }
        s->n_chardevs = 0;
        free(s->mon_chardev);
        free(s->serial_chardev);
        free(s->vser_id);
        free(s->port_bus);
        free(s->port_chardev);
        free(s->blockdev_node);
        free(s->blk_drive);
}

void fq_args_done(FqArgs *a)
{
        free(a->name);
        free(a->qmp_socket);
        free(a->agent_socket);
        free(a->console_log);
        free(a->sysfsdev);
        free(a->kernel);
        free(a->initrd);
        free(a->append);
        *a = (FqArgs){.disk_fd = -1};
}

static int set_once(char **slot, const char *option, const char *value, char **error)
{
        if (*slot)
                return error_set(error, -EINVAL, "option %s given twice", option);
        *slot = strdup(value);
        return *slot ? 0 : -ENOMEM;
}

static int flag_once(bool *seen, const char *option, char **error)
{
        if (*seen)
                return error_set(error, -EINVAL, "option %s given twice", option);
        *seen = true;
        return 0;
}

/*
 * The instance name becomes a file name under .sim/qemu/, so it must be one harmless path
 * component. vgpud passes an instance name or id (INST-3, INST-4), both far inside this set.
 */
static bool name_is_valid(const char *name)
{
        size_t n = strlen(name);
        if (n == 0 || n > 255 || name[0] == '.')
                return false;
        for (const char *c = name; *c; c++)
                if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                      (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.'))
                        return false;
        return true;
}

static int parse_name(ArgsState *s, const char *arg, char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {0};
        int r = opt_elements_parse("-name", arg, false, &o, error);
        if (r < 0)
                return r;
        const char *guest = NULL;
        r = opt_take_required(&o, "guest", arg, &guest, error);
        if (r < 0)
                return r;
        const char *dt = opt_take(&o, "debug-threads");
        if (dt && !streq(dt, "on") && !streq(dt, "off"))
                return error_set(error, -EINVAL, "-name %s: debug-threads must be on or off", arg);
        r = opt_check_all_taken(&o, arg, error);
        if (r < 0)
                return r;
        if (!name_is_valid(guest))
                return error_set(error, -EINVAL, "-name %s: invalid guest name \"%s\"", arg, guest);
        return set_once(&s->args.name, "-name", guest, error);
}

static int parse_accel(ArgsState *s, const char *arg, char **error)
{
        /* VMM-1 emits "-accel kvm", "-accel tcg", or "-accel kvm -accel tcg" (auto). */
        if (streq(arg, "kvm") && s->n_accel == 0)
                s->args.accel_kvm = true;
        else if (streq(arg, "tcg") && !s->args.accel_tcg && s->n_accel < 2)
                s->args.accel_tcg = true;
        else
                return error_set(error, -EINVAL, "-accel %s: unexpected accelerator here", arg);
        s->n_accel++;
        return 0;
}

static int parse_memory(ArgsState *s, const char *arg, char **error)
{
        size_t n = strlen(arg);
        if (n < 2 || arg[n - 1] != 'M')
                return error_set(error, -EINVAL, "-m %s: expected <MiB>M", arg);
        _cleanup_free_ char *digits = strndup(arg, n - 1);
        if (!digits)
                return -ENOMEM;
        uint64_t mb;
        int r = parse_uint64_range(digits, 1, UINT64_C(16) << 20, &mb);
        if (r < 0)
                return error_set(error, r, "-m %s: invalid memory size", arg);
        s->args.memory_mb = mb;
        return 0;
}

static int parse_chardev(ArgsState *s, const char *arg, char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {0};
        int r = opt_elements_parse("-chardev", arg, true, &o, error);
        if (r < 0)
                return r;

        const char *backend = opt_take(&o, NULL), *id = NULL, *path = NULL;
        ChardevKind kind;
        if (streq_ptr(backend, "socket")) {
                kind = CHARDEV_SOCKET;
                r = opt_take_fixed(&o, "server", "on", arg, error);
                if (r < 0)
                        return r;
                r = opt_take_fixed(&o, "wait", "off", arg, error);
                if (r < 0)
                        return r;
        } else if (streq_ptr(backend, "file")) {
                kind = CHARDEV_FILE;
                r = opt_take_fixed(&o, "append", "on", arg, error);
                if (r < 0)
                        return r;
        } else
                return error_set(error, -EINVAL, "-chardev %s: backend must be socket or file",
                                 arg);

        r = opt_take_required(&o, "id", arg, &id, error);
        if (r < 0)
                return r;
        r = opt_take_required(&o, "path", arg, &path, error);
        if (r < 0)
                return r;
        r = opt_check_all_taken(&o, arg, error);
        if (r < 0)
                return r;

        if (kind == CHARDEV_SOCKET &&
            strlen(path) >= sizeof(((struct sockaddr_un *)NULL)->sun_path))
                return error_set(error, -ENAMETOOLONG, "-chardev %s: socket path too long", arg);
        for (size_t i = 0; i < s->n_chardevs; i++)
                if (streq(s->chardevs[i].id, id))
                        return error_set(error, -EEXIST, "-chardev %s: duplicate id '%s'", arg, id);
        if (s->n_chardevs == CHARDEVS_MAX)
                return error_set(error, -E2BIG, "-chardev %s: too many chardevs", arg);

        Chardev *c = &s->chardevs[s->n_chardevs];
        c->id = strdup(id);
        c->path = strdup(path);
        c->kind = kind;
        s->n_chardevs++; /* counted even on ENOMEM so that cleanup frees the half-made entry */
        return c->id && c->path ? 0 : -ENOMEM;
}

static int parse_mon(ArgsState *s, const char *arg, char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {0};
        int r = opt_elements_parse("-mon", arg, false, &o, error);
        if (r < 0)
                return r;
        const char *chardev = NULL;
        r = opt_take_required(&o, "chardev", arg, &chardev, error);
        if (r < 0)
                return r;
        r = opt_take_fixed(&o, "mode", "control", arg, error);
        if (r < 0)
                return r;
        r = opt_check_all_taken(&o, arg, error);
        if (r < 0)
                return r;
        return set_once(&s->mon_chardev, "-mon", chardev, error);
}

static int parse_serial(ArgsState *s, const char *arg, char **error)
{
        const char *id = startswith(arg, "chardev:");
        if (!id || id[0] == 0)
                return error_set(error, -EINVAL, "-serial %s: expected chardev:<id>", arg);
        return set_once(&s->serial_chardev, "-serial", id, error);
}

/* A decimal in 0..INT_MAX, as QEMU reads fd= and set=. */
static int parse_int(const char *option, const char *arg, const char *key, const char *v, int *ret,
                     char **error)
{
        uint64_t n;
        if (parse_uint64(v, &n) < 0 || n > INT32_MAX)
                return error_set(error, -EINVAL, "%s %s: %s must be a number", option, arg, key);
        *ret = (int)n;
        return 0;
}

/* -add-fd fd=<n>,set=<n>: QEMU refuses a descriptor it did not inherit. */
static int parse_add_fd(ArgsState *s, const char *arg, char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {0};
        int r = opt_elements_parse("-add-fd", arg, false, &o, error);
        if (r < 0)
                return r;
        const char *fd = NULL, *set = NULL;
        FdSet f;
        r = opt_take_required(&o, "fd", arg, &fd, error);
        if (r >= 0)
                r = opt_take_required(&o, "set", arg, &set, error);
        if (r >= 0)
                r = opt_check_all_taken(&o, arg, error);
        if (r >= 0)
                r = parse_int("-add-fd", arg, "fd", fd, &f.fd, error);
        if (r >= 0)
                r = parse_int("-add-fd", arg, "set", set, &f.id, error);
        if (r < 0)
                return r;
        if (f.fd <= STDERR_FILENO)
                return error_set(error, -EINVAL, "-add-fd %s: fd cannot be stdin, stdout or stderr",
                                 arg);
        if (fcntl(f.fd, F_GETFD) < 0)
                return error_set(error, -EBADF, "-add-fd %s: fd %d is not open", arg, f.fd);
        if (s->n_fdsets == FDSETS_MAX)
                return error_set(error, -E2BIG, "-add-fd %s: too many descriptors", arg);
        s->fdsets[s->n_fdsets++] = f;
        return 0;
}

/*
 * -blockdev driver=raw,node-name=<n>,read-only=on,file.driver=file,file.filename=/dev/fdset/<n>:
 * the one shape VMM-1 gives boot.disk (DISK-6, DISK-9: the driver is always named).
 */
static int parse_blockdev(ArgsState *s, const char *arg, char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {0};
        int r = opt_elements_parse("-blockdev", arg, false, &o, error);
        if (r < 0)
                return r;
        const char *node = NULL, *file = NULL, *ro = opt_take(&o, "read-only");
        r = opt_take_fixed(&o, "driver", "raw", arg, error);
        if (r >= 0)
                r = opt_take_required(&o, "node-name", arg, &node, error);
        if (r >= 0)
                r = opt_take_fixed(&o, "file.driver", "file", arg, error);
        if (r >= 0)
                r = opt_take_required(&o, "file.filename", arg, &file, error);
        if (r >= 0)
                r = opt_check_all_taken(&o, arg, error);
        if (r < 0)
                return r;
        if (ro && !streq(ro, "on") && !streq(ro, "off"))
                return error_set(error, -EINVAL, "-blockdev %s: read-only must be on or off", arg);
        const char *set = startswith(file, "/dev/fdset/");
        if (!set)
                return error_set(error, -EINVAL,
                                 "-blockdev %s: file.filename must be /dev/fdset/<n> (vgpud passes "
                                 "disks by descriptor)",
                                 arg);
        r = parse_int("-blockdev", arg, "file.filename", set, &s->blockdev_set, error);
        if (r < 0)
                return r;
        s->blockdev_readonly = ro && streq(ro, "on");
        return set_once(&s->blockdev_node, "-blockdev", node, error);
}

static int parse_device(ArgsState *s, const char *arg, char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {0};
        int r = opt_elements_parse("-device", arg, true, &o, error);
        if (r < 0)
                return r;

        const char *driver = opt_take(&o, NULL), *v = NULL;
        if (streq_ptr(driver, "virtio-serial-pci")) {
                r = opt_take_required(&o, "id", arg, &v, error);
                if (r < 0)
                        return r;
                r = opt_check_all_taken(&o, arg, error);
                if (r < 0)
                        return r;
                return set_once(&s->vser_id, "-device virtio-serial-pci", v, error);
        }

        if (streq_ptr(driver, "virtserialport")) {
                const char *bus = NULL, *chardev = NULL;
                r = opt_take_required(&o, "bus", arg, &bus, error);
                if (r < 0)
                        return r;
                r = opt_take_required(&o, "chardev", arg, &chardev, error);
                if (r < 0)
                        return r;
                r = opt_take_fixed(&o, "name", FQ_AGENT_PORT_NAME, arg, error);
                if (r < 0)
                        return r;
                r = opt_check_all_taken(&o, arg, error);
                if (r < 0)
                        return r;
                r = flag_once(&s->seen_port, "-device virtserialport", error);
                if (r < 0)
                        return r;
                s->port_bus = strdup(bus);
                s->port_chardev = strdup(chardev);
                return s->port_bus && s->port_chardev ? 0 : -ENOMEM;
        }

        if (streq_ptr(driver, "virtio-blk-pci")) {
                r = opt_take_required(&o, "drive", arg, &v, error);
                if (r >= 0)
                        r = opt_check_all_taken(&o, arg, error);
                if (r < 0)
                        return r;
                return set_once(&s->blk_drive, "-device virtio-blk-pci", v, error);
        }

        if (streq_ptr(driver, "vfio-pci")) {
                r = opt_take_required(&o, "sysfsdev", arg, &v, error);
                if (r < 0)
                        return r;
                r = opt_check_all_taken(&o, arg, error);
                if (r < 0)
                        return r;
                if (v[0] != '/')
                        return error_set(error, -EINVAL,
                                         "-device %s: sysfsdev must be an absolute path", arg);
                return set_once(&s->args.sysfsdev, "-device vfio-pci", v, error);
        }

        return error_set(error, -EINVAL, "-device %s: unsupported device '%s'", arg,
                         driver ? driver : "");
}

static int parse_one(ArgsState *s, const char *option, const char *arg, char **error)
{
        int r;

        if (streq(option, "-name"))
                return parse_name(s, arg, error);
        if (streq(option, "-machine")) {
                r = flag_once(&s->seen_machine, option, error);
                if (r >= 0 && !streq(arg, "q35"))
                        r = error_set(error, -EINVAL, "-machine %s: only q35 is supported", arg);
                return r;
        }
        if (streq(option, "-accel"))
                return parse_accel(s, arg, error);
        if (streq(option, "-cpu")) {
                r = flag_once(&s->seen_cpu, option, error);
                if (r >= 0 && !streq(arg, "max"))
                        r = error_set(error, -EINVAL, "-cpu %s: only max is supported", arg);
                return r;
        }
        if (streq(option, "-smp")) {
                r = flag_once(&s->seen_smp, option, error);
                if (r < 0)
                        return r;
                uint64_t n;
                r = parse_uint64_range(arg, 1, 1024, &n);
                if (r < 0)
                        return error_set(error, r, "-smp %s: invalid vCPU count", arg);
                s->args.vcpus = (uint32_t)n;
                return 0;
        }
        if (streq(option, "-m")) {
                r = flag_once(&s->seen_m, option, error);
                return r < 0 ? r : parse_memory(s, arg, error);
        }
        if (streq(option, "-display")) {
                r = flag_once(&s->seen_display, option, error);
                if (r >= 0 && !streq(arg, "none"))
                        r = error_set(error, -EINVAL, "-display %s: only none is supported", arg);
                return r;
        }
        if (streq(option, "-chardev"))
                return parse_chardev(s, arg, error);
        if (streq(option, "-mon"))
                return parse_mon(s, arg, error);
        if (streq(option, "-device"))
                return parse_device(s, arg, error);
        if (streq(option, "-serial"))
                return parse_serial(s, arg, error);
        if (streq(option, "-kernel"))
                return set_once(&s->args.kernel, option, arg, error);
        if (streq(option, "-initrd"))
                return set_once(&s->args.initrd, option, arg, error);
        if (streq(option, "-append"))
                return set_once(&s->args.append, option, arg, error);
        if (streq(option, "-add-fd"))
                return parse_add_fd(s, arg, error);
        if (streq(option, "-blockdev"))
                return parse_blockdev(s, arg, error);

        /* option_takes_argument() lists exactly the options above. */
        return error_set(error, -EINVAL, "unknown option '%s'", option);
}

static int find_chardev(ArgsState *s, const char *id, ChardevKind kind, const char *user,
                        Chardev **ret, char **error)
{
        for (size_t i = 0; i < s->n_chardevs; i++) {
                Chardev *c = &s->chardevs[i];
                if (!streq(c->id, id))
                        continue;
                if (c->kind != kind)
                        return error_set(error, -EINVAL, "%s: chardev '%s' must be a %s chardev",
                                         user, id, kind == CHARDEV_SOCKET ? "socket" : "file");
                if (c->used)
                        return error_set(error, -EBUSY, "%s: chardev '%s' is already in use", user,
                                         id);
                c->used = true;
                *ret = c;
                return 0;
        }
        return error_set(error, -ENOENT, "%s: chardev '%s' not found", user, id);
}

/* Ties -mon, -serial and the virtio-serial port to their chardevs, as QEMU does at start. */
/* The disk: device, node and fd set must name each other, as QEMU would insist. */
static int resolve_disk(ArgsState *s, char **error)
{
        if (!s->blk_drive && !s->blockdev_node)
                return 0;
        if (!s->blk_drive)
                return error_set(error, -EINVAL, "-blockdev node-name=%s: no device uses it",
                                 s->blockdev_node);
        if (!s->blockdev_node || !streq(s->blk_drive, s->blockdev_node))
                return error_set(error, -EINVAL,
                                 "-device virtio-blk-pci,drive=%s: Cannot find device nor node "
                                 "name '%s'",
                                 s->blk_drive, s->blk_drive);
        for (size_t i = 0; i < s->n_fdsets; i++)
                if (s->fdsets[i].id == s->blockdev_set) {
                        s->args.disk_fd = s->fdsets[i].fd;
                        s->args.disk_readonly = s->blockdev_readonly;
                        return 0;
                }
        return error_set(error, -ENOENT, "-blockdev node-name=%s: Could not open '/dev/fdset/%d'",
                         s->blockdev_node, s->blockdev_set);
}

static int resolve(ArgsState *s, char **error)
{
        Chardev *c;
        int r;

        if (!s->args.name)
                return error_set(error, -EINVAL, "option -name guest=<name> is required");
        if (!s->mon_chardev)
                return error_set(error, -EINVAL,
                                 "a QMP monitor (-mon ...,mode=control) is required");
        if (!s->serial_chardev)
                return error_set(error, -EINVAL, "a console (-serial chardev:<id>) is required");
        if (!s->seen_port)
                return error_set(error, -EINVAL,
                                 "the agent port (-device virtserialport,...,name=%s) is required",
                                 FQ_AGENT_PORT_NAME);

        r = find_chardev(s, s->mon_chardev, CHARDEV_SOCKET, "-mon", &c, error);
        if (r < 0)
                return r;
        s->args.qmp_socket = TAKE_PTR(c->path);

        r = find_chardev(s, s->serial_chardev, CHARDEV_FILE, "-serial", &c, error);
        if (r < 0)
                return r;
        s->args.console_log = TAKE_PTR(c->path);

        if (!s->vser_id)
                return error_set(
                    error, -EINVAL,
                    "-device virtserialport: bus '%s' not found (no virtio-serial-pci)",
                    s->port_bus);
        _cleanup_free_ char *want_bus = NULL;
        r = strprintf(&want_bus, "%s.0", s->vser_id);
        if (r < 0)
                return r;
        if (!streq(s->port_bus, want_bus))
                return error_set(error, -EINVAL, "-device virtserialport: bus '%s' not found",
                                 s->port_bus);
        r = find_chardev(s, s->port_chardev, CHARDEV_SOCKET, "-device virtserialport", &c, error);
        if (r < 0)
                return r;
        s->args.agent_socket = TAKE_PTR(c->path);

        for (size_t i = 0; i < s->n_chardevs; i++)
                if (!s->chardevs[i].used)
                        return error_set(error, -EINVAL, "-chardev id=%s: chardev is not used",
                                         s->chardevs[i].id);

        if (s->n_accel == 0)
                return error_set(error, -EINVAL, "option -accel is required");
        if (s->args.initrd && !s->args.kernel)
                return error_set(error, -EINVAL, "-initrd cannot be used without -kernel");
        if (s->args.append && !s->args.kernel)
                return error_set(error, -EINVAL, "-append only allowed with -kernel option");
        return resolve_disk(s, error);
}

/* Options that VMM-1 passes without an argument. */
static int parse_flag_option(ArgsState *s, const char *option, bool *handled, char **error)
{
        *handled = true;
        if (streq(option, "-nodefaults"))
                return flag_once(&s->seen_nodefaults, option, error);
        if (streq(option, "-no-user-config"))
                return flag_once(&s->seen_no_user_config, option, error);
        *handled = false;
        return 0;
}

static bool option_takes_argument(const char *option)
{
        static const char *const options[] = {
            "-name",    "-machine", "-accel",  "-cpu",      "-smp",    "-m",
            "-display", "-chardev", "-mon",    "-device",   "-serial", "-kernel",
            "-initrd",  "-append",  "-add-fd", "-blockdev",
        };
        for (size_t i = 0; i < ELEMENTSOF(options); i++)
                if (streq(option, options[i]))
                        return true;
        return false;
}

int fq_args_parse(int argc, char *const *argv, FqArgs *ret, char **error)
{
        _cleanup_(args_state_done) ArgsState s = {.args = {.disk_fd = -1}};
        int r;

        for (int i = 1; i < argc; i++) {
                const char *option = argv[i];
                bool handled;

                r = parse_flag_option(&s, option, &handled, error);
                if (r < 0)
                        return r;
                if (handled)
                        continue;
                /* QEMU would take a bare word for a disk image; VMM-1 never passes one. */
                if (option[0] != '-')
                        return error_set(error, -EINVAL, "unexpected argument '%s'", option);
                if (!option_takes_argument(option))
                        return error_set(error, -EINVAL, "unknown option '%s'", option);
                if (i + 1 >= argc)
                        return error_set(error, -EINVAL, "option %s requires an argument", option);
                r = parse_one(&s, option, argv[++i], error);
                if (r < 0)
                        return r;
        }

        r = resolve(&s, error);
        if (r < 0)
                return r;

        *ret = s.args;
        s.args = (FqArgs){.disk_fd = -1};
        return 0;
}
