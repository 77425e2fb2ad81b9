/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The command line of VMM-1, read the way QEMU reads it, but refusing everything vgpud does not
 * generate: a fake that tolerated more than the daemon emits could not catch a daemon bug.
 *
 * The grammar is generic where QEMU's is: any number of -chardev, -add-fd, -blockdev (keyval or
 * JSON, flattened to the same dotted keys), -netdev and -device, each checked against a table of
 * the drivers and keys fake-qemu knows how to check; an unknown driver or key is refused by
 * name. Then the cross-references are resolved as QEMU resolves them at start: a device's
 * drive= names a node, a node's file an fd set holding a descriptor of the access mode the node
 * needs, a netdev's fd= an open descriptor, and every node, netdev and chardev has its one user.
 */
#include "fake-qemu.h"

#include <fcntl.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <sys/un.h>

/* No option of VMM-1 has more than ten elements; a few more leave room for error messages. */
#define OPT_ELEMENTS_MAX 16
#define CHARDEVS_MAX 8
#define NODES_MAX 16
#define NETDEVS_MAX 4
#define DRIVE_USERS_MAX 16
#define NETDEV_USERS_MAX 4

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

/* Every key left is one fake-qemu does not know how to check: named, never ignored. */
static int opt_check_all_taken(const OptElements *o, const char *arg, char **error)
{
        for (size_t i = 0; i < o->n; i++)
                if (!o->taken[i])
                        return error_set(error, -EINVAL, "%s %s: unknown key '%s'", o->option, arg,
                                         o->key[i] ? o->key[i] : o->value[i]);
        return 0;
}

/* An optional key whose value must be one of choices ("on|off"); *ret NULL when absent. */
static int opt_take_choice(OptElements *o, const char *key, const char *choices, const char *arg,
                           const char **ret, char **error)
{
        const char *v = opt_take(o, key);
        *ret = v;
        if (!v)
                return 0;
        size_t n = strlen(v);
        for (const char *c = choices; *c;) {
                const char *end = strchrnul(c, '|');
                if ((size_t)(end - c) == n && strncmp(c, v, n) == 0)
                        return 0;
                c = *end ? end + 1 : end;
        }
        return error_set(error, -EINVAL, "%s %s: key '%s' must be one of %s, got '%s'", o->option,
                         arg, key, choices, v);
}

/*
 * A JSON option value ({"driver": "raw", "file": {"driver": "file", ...}}) as the dotted keys
 * QEMU's keyval form would give (file.driver=file): both forms then meet the same checks.
 * Booleans read on/off, integers decimal; arrays and null are nothing vgpud passes.
 */
static int opt_flatten_json(OptElements *o, const char *prefix, json_t *obj, const char *arg,
                            char **error)
{
        const char *key;
        json_t *v;
        json_object_foreach (obj, key, v) {
                _cleanup_free_ char *name = NULL, *value = NULL;
                if (strprintf(&name, "%s%s", prefix, key) < 0)
                        return -ENOMEM;
                if (json_is_object(v)) {
                        _cleanup_free_ char *sub = NULL;
                        if (strprintf(&sub, "%s.", name) < 0)
                                return -ENOMEM;
                        int r = opt_flatten_json(o, sub, v, arg, error);
                        if (r < 0)
                                return r;
                        continue;
                }
                if (json_is_string(v))
                        value = strdup(json_string_value(v));
                else if (json_is_boolean(v))
                        value = strdup(json_is_true(v) ? "on" : "off");
                else if (json_is_integer(v)) {
                        if (strprintf(&value, "%" JSON_INTEGER_FORMAT, json_integer_value(v)) < 0)
                                value = NULL;
                } else
                        return error_set(error, -EINVAL,
                                         "%s %s: key '%s' has a value of a type "
                                         "vgpud never passes",
                                         o->option, arg, name);
                if (!value)
                        return -ENOMEM;
                if (o->n == OPT_ELEMENTS_MAX)
                        return error_set(error, -E2BIG, "%s %s: too many parameters", o->option,
                                         arg);
                o->key[o->n] = TAKE_PTR(name);
                o->value[o->n] = TAKE_PTR(value);
                o->n++;
        }
        return 0;
}

/* QEMU's JSON option syntax: one object, duplicate keys refused as QEMU refuses them. */
static int opt_elements_parse_json(const char *option, const char *arg, OptElements *ret,
                                   char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {.option = option};
        json_error_t jerr;
        json_auto_t *obj = json_loads(arg, JSON_REJECT_DUPLICATES, &jerr);
        if (!obj || !json_is_object(obj))
                return error_set(error, -EINVAL, "%s %s: invalid JSON: %s", option, arg,
                                 obj ? "not an object" : jerr.text);
        int r = opt_flatten_json(&o, "", obj, arg, error);
        if (r < 0)
                return r;
        *ret = o;
        o.n = 0;
        return 0;
}

typedef enum ChardevKind {
        CHARDEV_SOCKET,
        CHARDEV_FILE,
        CHARDEV_ANY, /* find_chardev(): either kind */
} ChardevKind;

typedef struct Chardev {
        char *id;
        char *path;
        char *logfile; /* socket: a copy of the output (CONS-1); NULL when absent */
        ChardevKind kind;
        bool used;
} Chardev;

/* One -add-fd: descriptor fd in fd set id. */
typedef struct FdSet {
        int fd, id;
} FdSet;

#define FDSETS_MAX 16

/* A -blockdev node: its file is /dev/fdset/<set>. */
typedef struct Node {
        char *name;
        int set;
        bool read_only;
        bool used;
        const char *bus; /* its device's root port (the Use's), or NULL */
} Node;

/* A -netdev tap on inherited descriptors. */
typedef struct Netdev {
        char *id;
        int fd;
        bool vhost;
        bool used;
} Netdev;

/* A device's reference to a node or netdev, resolved once everything is parsed. */
typedef struct Use {
        char *device; /* "virtio-blk-pci", for messages */
        char *name;
        char *mac; /* virtio-net-pci's mac= */
        char *bus; /* virtio-blk-pci's bus= (a pcie-root-port), or NULL */
} Use;

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
        Node nodes[NODES_MAX]; /* -blockdev */
        size_t n_nodes;
        Netdev netdevs[NETDEVS_MAX]; /* -netdev */
        size_t n_netdevs;
        Use drive_users[DRIVE_USERS_MAX]; /* -device ...,drive= */
        size_t n_drive_users;
        Use netdev_users[NETDEV_USERS_MAX]; /* -device virtio-net-pci,netdev= */
        size_t n_netdev_users;
        uint64_t bootindexes; /* bit n: bootindex n is taken */
        size_t n_accel;
        bool seen_machine, seen_cpu, seen_smp, seen_m, seen_nodefaults, seen_no_user_config,
            seen_display, seen_port;
} ArgsState;

static void uses_done(Use *u, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(u[i].device);
                free(u[i].name);
                free(u[i].mac);
                free(u[i].bus);
        }
}

static void args_state_done(ArgsState *s)
{
        fq_args_done(&s->args);
        for (size_t i = 0; i < s->n_chardevs; i++) {
                free(s->chardevs[i].id);
                free(s->chardevs[i].path);
                free(s->chardevs[i].logfile);
        }
        s->n_chardevs = 0;
        free(s->mon_chardev);
        free(s->serial_chardev);
        free(s->vser_id);
        free(s->port_bus);
        free(s->port_chardev);
        for (size_t i = 0; i < s->n_nodes; i++)
                free(s->nodes[i].name);
        for (size_t i = 0; i < s->n_netdevs; i++)
                free(s->netdevs[i].id);
        uses_done(s->drive_users, s->n_drive_users);
        uses_done(s->netdev_users, s->n_netdev_users);
}

void fq_args_done(FqArgs *a)
{
        free(a->name);
        free(a->qmp_socket);
        free(a->agent_socket);
        free(a->console_socket);
        free(a->console_log);
        free(a->sysfsdev);
        free(a->kernel);
        free(a->initrd);
        free(a->append);
        free(a->nic_mac);
        *a = (FqArgs){0};
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

        const char *backend = opt_take(&o, NULL), *id = NULL, *path = NULL, *logfile = NULL;
        ChardevKind kind;
        if (streq_ptr(backend, "socket")) {
                kind = CHARDEV_SOCKET;
                r = opt_take_fixed(&o, "server", "on", arg, error);
                if (r < 0)
                        return r;
                r = opt_take_fixed(&o, "wait", "off", arg, error);
                if (r < 0)
                        return r;
                /* CONS-1's console socket keeps a copy of the output in a log file. */
                const char *logappend = NULL;
                logfile = opt_take(&o, "logfile");
                r = opt_take_choice(&o, "logappend", "on|off", arg, &logappend, error);
                if (r < 0)
                        return r;
                if (logfile && !logfile[0])
                        return error_set(error, -EINVAL, "-chardev %s: logfile is empty", arg);
                if (logappend && !logfile)
                        return error_set(error, -EINVAL, "-chardev %s: logappend without logfile",
                                         arg);
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
        c->logfile = logfile ? strdup(logfile) : NULL;
        c->kind = kind;
        s->n_chardevs++; /* counted even on ENOMEM so that cleanup frees the half-made entry */
        return c->id && c->path && (!logfile || c->logfile) ? 0 : -ENOMEM;
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

/* A use of name by device, for resolve(). */
static int add_use(Use *uses, size_t *n, size_t max, const char *device, const char *name,
                   char **error)
{
        if (*n == max)
                return error_set(error, -E2BIG, "-device %s: too many devices", device);
        Use *u = &uses[(*n)++]; /* counted at once, so cleanup frees a half-made entry */
        u->device = strdup(device);
        u->name = strdup(name);
        return u->device && u->name ? 0 : -ENOMEM;
}

/*
 * -blockdev: a format node (raw or qcow2, always named: DISK-9 never lets QEMU probe) over a
 * file node on /dev/fdset/<n> (vgpud passes every disk by descriptor), with DISK-9's options.
 */
static int parse_blockdev(ArgsState *s, const char *arg, char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {0};
        int r = arg[0] == '{' ? opt_elements_parse_json("-blockdev", arg, &o, error)
                              : opt_elements_parse("-blockdev", arg, false, &o, error);
        if (r < 0)
                return r;
        const char *driver = NULL, *node = NULL, *file = NULL, *ro = NULL, *direct = NULL,
                   *discard = NULL, *zeroes = NULL;
        r = opt_take_required(&o, "driver", arg, &driver, error);
        if (r < 0)
                return r;
        if (!streq(driver, "raw") && !streq(driver, "qcow2"))
                return error_set(error, -EINVAL, "-blockdev %s: unknown driver '%s'", arg, driver);
        r = opt_take_required(&o, "node-name", arg, &node, error);
        if (r >= 0)
                r = opt_take_choice(&o, "read-only", "on|off", arg, &ro, error);
        if (r >= 0)
                r = opt_take_choice(&o, "cache.direct", "on|off", arg, &direct, error);
        if (r >= 0)
                r = opt_take_choice(&o, "discard", "ignore|unmap", arg, &discard, error);
        if (r >= 0)
                r = opt_take_choice(&o, "detect-zeroes", "off|on|unmap", arg, &zeroes, error);
        if (r >= 0)
                r = opt_take_required(&o, "file.driver", arg, &driver, error);
        if (r >= 0 && !streq(driver, "file"))
                r = error_set(error, -EINVAL, "-blockdev %s: unknown driver '%s' for file", arg,
                              driver);
        if (r >= 0)
                r = opt_take_required(&o, "file.filename", arg, &file, error);
        if (r >= 0)
                r = opt_check_all_taken(&o, arg, error);
        if (r < 0)
                return r;
        if (!qemu_id_is_valid(node))
                return error_set(error, -EINVAL, "-blockdev %s: invalid node name '%s'", arg, node);
        if (streq_ptr(zeroes, "unmap") && !streq_ptr(discard, "unmap"))
                return error_set(error, -EINVAL,
                                 "-blockdev %s: setting detect-zeroes to unmap is not allowed "
                                 "without setting discard operation to unmap",
                                 arg);
        const char *set = startswith(file, "/dev/fdset/");
        if (!set)
                return error_set(error, -EINVAL,
                                 "-blockdev %s: file.filename must be /dev/fdset/<n> (vgpud passes "
                                 "disks by descriptor)",
                                 arg);
        Node n = {.read_only = streq_ptr(ro, "on")};
        r = parse_int("-blockdev", arg, "file.filename", set, &n.set, error);
        if (r < 0)
                return r;
        for (size_t i = 0; i < s->n_nodes; i++)
                if (streq(s->nodes[i].name, node))
                        return error_set(error, -EEXIST, "-blockdev %s: duplicate node name '%s'",
                                         arg, node);
        if (s->n_nodes == NODES_MAX)
                return error_set(error, -E2BIG, "-blockdev %s: too many nodes", arg);
        n.name = strdup(node);
        if (!n.name)
                return -ENOMEM;
        s->nodes[s->n_nodes++] = n;
        return 0;
}

/* An inherited descriptor that is not a standard stream: QEMU would fail on anything else. */
static int parse_open_fd(const char *option, const char *arg, const char *key, const char *v,
                         int *ret, char **error)
{
        int r = parse_int(option, arg, key, v, ret, error);
        if (r < 0)
                return r;
        if (*ret <= STDERR_FILENO)
                return error_set(error, -EINVAL, "%s %s: %s cannot be stdin, stdout or stderr",
                                 option, arg, key);
        if (fcntl(*ret, F_GETFD) < 0)
                return error_set(error, -EBADF, "%s %s: %s %d is not open", option, arg, key, *ret);
        return 0;
}

/* -netdev tap,id=<id>,fd=<n>[,vhost=on,vhostfd=<n>] (NET-3): the TAP vgpud opened. */
static int parse_netdev(ArgsState *s, const char *arg, char **error)
{
        _cleanup_(opt_elements_done) OptElements o = {0};
        int r = opt_elements_parse("-netdev", arg, true, &o, error);
        if (r < 0)
                return r;
        const char *type = opt_take(&o, NULL), *id = NULL, *fd = NULL, *vhost = NULL,
                   *vhostfd = opt_take(&o, "vhostfd");
        if (!streq_ptr(type, "tap"))
                return error_set(error, -EINVAL, "-netdev %s: unknown type '%s'", arg,
                                 type ? type : "");
        r = opt_take_required(&o, "id", arg, &id, error);
        if (r >= 0)
                r = opt_take_required(&o, "fd", arg, &fd, error);
        if (r >= 0)
                r = opt_take_choice(&o, "vhost", "on|off", arg, &vhost, error);
        if (r >= 0)
                r = opt_check_all_taken(&o, arg, error);
        int n = 0, vn = 0;
        if (r >= 0)
                r = parse_open_fd("-netdev", arg, "fd", fd, &n, error);
        if (r >= 0 && vhostfd)
                r = parse_open_fd("-netdev", arg, "vhostfd", vhostfd, &vn, error);
        if (r < 0)
                return r;
        if (!!vhostfd != streq_ptr(vhost, "on"))
                return error_set(error, -EINVAL, "-netdev %s: vhostfd goes with vhost=on", arg);
        if (!qemu_id_is_valid(id))
                return error_set(error, -EINVAL, "-netdev %s: invalid id '%s'", arg, id);
        for (size_t i = 0; i < s->n_netdevs; i++)
                if (streq(s->netdevs[i].id, id))
                        return error_set(error, -EEXIST, "-netdev %s: duplicate id '%s'", arg, id);
        if (s->n_netdevs == NETDEVS_MAX)
                return error_set(error, -E2BIG, "-netdev %s: too many netdevs", arg);
        s->netdevs[s->n_netdevs] = (Netdev){.id = strdup(id), .fd = n, .vhost = !!vhostfd};
        if (!s->netdevs[s->n_netdevs].id)
                return -ENOMEM;
        s->n_netdevs++;
        return 0;
}

/* bootindex=<n>: QEMU refuses one taken twice. */
static int take_bootindex(ArgsState *s, OptElements *o, const char *arg, char **error)
{
        const char *v = opt_take(o, "bootindex");
        int n = 0;
        if (!v)
                return 0;
        int r = parse_int("-device", arg, "bootindex", v, &n, error);
        if (r < 0)
                return r;
        if (n >= 64)
                return error_set(error, -EINVAL, "-device %s: bootindex %d is out of range", arg,
                                 n);
        if (s->bootindexes & (UINT64_C(1) << n))
                return error_set(error, -EEXIST, "-device %s: bootindex %d is already used", arg,
                                 n);
        s->bootindexes |= UINT64_C(1) << n;
        return 0;
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

        /* DISK-8: q35's root bus takes no hot-plugged device; a root port does. */
        if (streq_ptr(driver, "pcie-root-port")) {
                const char *chassis = NULL;
                r = opt_take_required(&o, "id", arg, &v, error);
                if (r >= 0)
                        r = opt_take_required(&o, "chassis", arg, &chassis, error);
                if (r >= 0)
                        r = opt_check_all_taken(&o, arg, error);
                if (r < 0)
                        return r;
                if (!qemu_id_is_valid(v) || strlen(v) >= sizeof s->args.ports[0])
                        return error_set(error, -EINVAL, "-device %s: invalid id '%s'", arg, v);
                for (size_t k = 0; k < s->args.n_ports; k++)
                        if (streq(s->args.ports[k], v))
                                return error_set(error, -EEXIST, "-device %s: duplicate id '%s'",
                                                 arg, v);
                if (s->args.n_ports == FQ_ARGS_DRIVES_MAX)
                        return error_set(error, -E2BIG, "-device %s: too many root ports", arg);
                snprintf(s->args.ports[s->args.n_ports++], sizeof s->args.ports[0], "%s", v);
                return 0;
        }

        if (streq_ptr(driver, "virtio-blk-pci")) {
                const char *serial = opt_take(&o, "serial"), *bus = opt_take(&o, "bus");
                if (bus) {
                        /* QEMU resolves bus= when the device is created: the port comes first. */
                        bool known = false;
                        for (size_t k = 0; k < s->args.n_ports && !known; k++)
                                known = streq(s->args.ports[k], bus);
                        if (!known)
                                return error_set(error, -EINVAL, "-device %s: Bus '%s' not found",
                                                 arg, bus);
                        for (size_t k = 0; k < s->n_drive_users; k++)
                                if (streq_ptr(s->drive_users[k].bus, bus))
                                        return error_set(error, -EBUSY,
                                                         "-device %s: bus '%s' is occupied", arg,
                                                         bus);
                }
                r = opt_take_required(&o, "drive", arg, &v, error);
                if (r >= 0)
                        r = take_bootindex(s, &o, arg, error);
                if (r >= 0)
                        r = opt_check_all_taken(&o, arg, error);
                if (r < 0)
                        return r;
                if (serial && !serial[0])
                        return error_set(error, -EINVAL, "-device %s: serial is empty", arg);
                r = add_use(s->drive_users, &s->n_drive_users, DRIVE_USERS_MAX, driver, v, error);
                if (r >= 0 && bus && !(s->drive_users[s->n_drive_users - 1].bus = strdup(bus)))
                        r = -ENOMEM;
                return r;
        }

        /* q35's AHCI controller has six ports, ide.0 to ide.5. */
        if (streq_ptr(driver, "ide-cd")) {
                const char *bus = NULL;
                r = opt_take_required(&o, "drive", arg, &v, error);
                if (r >= 0)
                        r = opt_take_choice(&o, "bus", "ide.0|ide.1|ide.2|ide.3|ide.4|ide.5", arg,
                                            &bus, error);
                if (r >= 0 && !bus)
                        r = error_set(error, -EINVAL, "-device %s: parameter 'bus' is required",
                                      arg);
                if (r >= 0)
                        r = opt_check_all_taken(&o, arg, error);
                if (r < 0)
                        return r;
                return add_use(s->drive_users, &s->n_drive_users, DRIVE_USERS_MAX, driver, v,
                               error);
        }

        if (streq_ptr(driver, "virtio-net-pci")) {
                const char *mac = NULL;
                r = opt_take_required(&o, "netdev", arg, &v, error);
                if (r >= 0)
                        r = opt_take_required(&o, "mac", arg, &mac, error);
                if (r >= 0)
                        r = opt_check_all_taken(&o, arg, error);
                if (r < 0)
                        return r;
                if (!mac_address_is_valid(mac))
                        return error_set(error, -EINVAL, "-device %s: invalid mac '%s'", arg, mac);
                r = add_use(s->netdev_users, &s->n_netdev_users, NETDEV_USERS_MAX, driver, v,
                            error);
                if (r < 0)
                        return r;
                s->netdev_users[s->n_netdev_users - 1].mac = strdup(mac);
                return s->netdev_users[s->n_netdev_users - 1].mac ? 0 : -ENOMEM;
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
        if (streq(option, "-netdev"))
                return parse_netdev(s, arg, error);

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
                if (kind != CHARDEV_ANY && c->kind != kind)
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

/*
 * QEMU opens /dev/fdset/<n> with the access mode the node needs and takes only a descriptor of
 * that mode from the set: a read-only node needs an O_RDONLY one, a writable node an O_RDWR one.
 */
static int resolve_node_file(ArgsState *s, const Node *n, char **error)
{
        bool set_exists = false;
        int want = n->read_only ? O_RDONLY : O_RDWR;
        for (size_t i = 0; i < s->n_fdsets; i++) {
                if (s->fdsets[i].id != n->set)
                        continue;
                set_exists = true;
                int flags = fcntl(s->fdsets[i].fd, F_GETFL);
                if (flags >= 0 && (flags & O_ACCMODE) == want)
                        return 0;
        }
        if (!set_exists)
                return error_set(error, -ENOENT,
                                 "-blockdev node-name=%s: Could not open '/dev/fdset/%d'", n->name,
                                 n->set);
        return error_set(error, -EACCES,
                         "-blockdev node-name=%s: Could not dup FD for /dev/fdset/%d: its access "
                         "mode does not match read-only=%s",
                         n->name, n->set, n->read_only ? "on" : "off");
}

/* Devices, nodes and fd sets must name each other, as QEMU would insist; each node one user. */
static int resolve_drives(ArgsState *s, char **error)
{
        for (size_t i = 0; i < s->n_drive_users; i++) {
                const Use *u = &s->drive_users[i];
                Node *n = NULL;
                for (size_t k = 0; k < s->n_nodes && !n; k++)
                        if (streq(s->nodes[k].name, u->name))
                                n = &s->nodes[k];
                if (!n)
                        return error_set(error, -EINVAL,
                                         "-device %s,drive=%s: Cannot find device nor node name "
                                         "'%s'",
                                         u->device, u->name, u->name);
                if (n->used)
                        return error_set(error, -EBUSY,
                                         "-device %s,drive=%s: node is already in use", u->device,
                                         u->name);
                n->used = true;
                n->bus = u->bus;
        }
        for (size_t k = 0; k < s->n_nodes; k++) {
                const Node *n = &s->nodes[k];
                if (!n->used)
                        return error_set(error, -EINVAL,
                                         "-blockdev node-name=%s: no device uses it", n->name);
                int r = resolve_node_file(s, n, error);
                if (r < 0)
                        return r;
                if (n->read_only)
                        s->args.n_readonly_drives++;
                else
                        s->args.n_writable_drives++;
                /* For the block layer over QMP: the node, its device and its descriptor. */
                if (s->args.n_drives < FQ_ARGS_DRIVES_MAX && strlen(n->name) < 32) {
                        FqArgsDrive *d = &s->args.drives[s->args.n_drives++];
                        *d = (FqArgsDrive){.set = n->set, .fd = -1, .read_only = n->read_only};
                        snprintf(d->node, sizeof d->node, "%s", n->name);
                        snprintf(d->port, sizeof d->port, "%s", n->bus ? n->bus : "");
                        for (size_t f = 0; f < s->n_fdsets; f++)
                                if (s->fdsets[f].id == n->set)
                                        d->fd = s->fdsets[f].fd;
                }
        }
        return 0;
}

/* A tap netdev and its virtio-net-pci name each other, one to one. */
static int resolve_nics(ArgsState *s, char **error)
{
        for (size_t i = 0; i < s->n_netdev_users; i++) {
                const Use *u = &s->netdev_users[i];
                Netdev *n = NULL;
                for (size_t k = 0; k < s->n_netdevs && !n; k++)
                        if (streq(s->netdevs[k].id, u->name))
                                n = &s->netdevs[k];
                if (!n)
                        return error_set(error, -EINVAL,
                                         "-device %s,netdev=%s: netdev '%s' not found", u->device,
                                         u->name, u->name);
                if (n->used)
                        return error_set(error, -EBUSY,
                                         "-device %s,netdev=%s: netdev is already in use",
                                         u->device, u->name);
                n->used = true;
                if (i == 0) {
                        s->args.nic_fd = n->fd;
                        s->args.nic_vhost = n->vhost;
                        s->args.nic_mac = TAKE_PTR(s->netdev_users[i].mac);
                }
        }
        for (size_t k = 0; k < s->n_netdevs; k++)
                if (!s->netdevs[k].used)
                        return error_set(error, -EINVAL,
                                         "-netdev id=%s: no virtio-net-pci device uses it",
                                         s->netdevs[k].id);
        s->args.n_nics = s->n_netdevs;
        return 0;
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

        /*
         * The console is a file chardev (a VMM started before CONS-1) or a socket with a log
         * file (CONS-1); fake-qemu needs the log either way, to find the simulator (SIM-15).
         */
        r = find_chardev(s, s->serial_chardev, CHARDEV_ANY, "-serial", &c, error);
        if (r < 0)
                return r;
        if (c->kind == CHARDEV_SOCKET) {
                if (!c->logfile)
                        return error_set(error, -EINVAL,
                                         "-serial: socket chardev '%s' needs a logfile",
                                         s->serial_chardev);
                s->args.console_socket = TAKE_PTR(c->path);
                s->args.console_log = TAKE_PTR(c->logfile);
        } else
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
        r = resolve_drives(s, error);
        return r < 0 ? r : resolve_nics(s, error);
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
            "-initrd",  "-append",  "-add-fd", "-blockdev", "-netdev",
        };
        for (size_t i = 0; i < ELEMENTSOF(options); i++)
                if (streq(option, options[i]))
                        return true;
        return false;
}

int fq_check_tap(int fd, const char *qmp_socket, char ret_name[static 16], char **error)
{
        struct ifreq ifr = {0};
        if (ioctl(fd, TUNGETIFF, &ifr) < 0 || !(ifr.ifr_flags & IFF_TAP))
                return error_set(error, -EBADFD, "-netdev tap: fd=%d is not a TAP device", fd);
        /* <runtime_dir>/instances/<id>/qmp.sock: the id is the socket's directory. */
        const char *end = strrchr(qmp_socket, '/'), *start = end;
        while (start && start > qmp_socket && start[-1] != '/')
                start--;
        char want[IFNAMSIZ];
        if (!end || end - start < 12)
                return error_set(error, -EINVAL, "-netdev tap: no instance id in %s", qmp_socket);
        snprintf(want, sizeof want, "vgt%.12s", start);
        ifr.ifr_name[IFNAMSIZ - 1] = 0;
        if (!streq(ifr.ifr_name, want))
                return error_set(error, -EINVAL, "-netdev tap: fd=%d is TAP %s, expected %s", fd,
                                 ifr.ifr_name, want);
        if ((ifr.ifr_flags & (IFF_NO_PI | IFF_VNET_HDR)) != (IFF_NO_PI | IFF_VNET_HDR))
                return error_set(error, -EINVAL,
                                 "-netdev tap: TAP %s lacks IFF_NO_PI or IFF_VNET_HDR", want);
        memcpy(ret_name, want, IFNAMSIZ);
        return 0;
}

int fq_args_parse(int argc, char *const *argv, FqArgs *ret, char **error)
{
        _cleanup_(args_state_done) ArgsState s = {.args.nic_fd = -1};
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
        s.args = (FqArgs){0};
        return 0;
}
