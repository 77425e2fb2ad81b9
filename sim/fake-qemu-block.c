/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * fake-qemu's block layer over QMP (SIM-15, DISK-8): fd sets, -blockdev nodes and the
 * virtio-blk devices on them, changed by add-fd, blockdev-add, device_add, device_del and
 * blockdev-del and shown by query-block, with QEMU 7.2's argument checks and error texts.
 * Pure apart from the descriptors it is handed: one command in, one reply (and the events to
 * send after it) out.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fake-qemu.h"

static json_t *error_reply(const char *klass, const char *fmt, ...) _printf_(2, 3);
static json_t *error_reply(const char *klass, const char *fmt, ...)
{
        _cleanup_free_ char *desc = NULL;
        va_list ap;
        va_start(ap, fmt);
        if (vasprintf(&desc, fmt, ap) < 0)
                desc = NULL;
        va_end(ap);
        if (!desc)
                return NULL;
        return json_pack("{s:{s:s,s:s}}", "error", "class", klass, "desc", desc);
}

static json_t *unexpected(const json_t *args, const char *const *allowed)
{
        for (void *it = json_object_iter((json_t *)args); it;
             it = json_object_iter_next((json_t *)args, it)) {
                const char *key = json_object_iter_key(it);
                bool ok = false;
                for (const char *const *a = allowed; *a && !ok; a++)
                        ok = streq(*a, key);
                if (!ok)
                        return error_reply("GenericError", "Parameter '%s' is unexpected", key);
        }
        return NULL;
}

static const char *string_arg(const json_t *args, const char *key)
{
        return json_string_value(json_object_get(args, key));
}

static bool node_name_is_valid(const char *s)
{
        size_t n = strlen(s);
        if (n == 0 || n >= 32 || !((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z')))
                return false;
        for (size_t k = 0; k < n; k++)
                if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
                            s[k]))
                        return false;
        return true;
}

static FqBlockNode *find_node(FqBlock *b, const char *name)
{
        for (size_t k = 0; k < b->n_nodes; k++)
                if (streq(b->nodes[k].name, name))
                        return &b->nodes[k];
        return NULL;
}

/* By id, or by QOM path, as device_del takes either. */
static FqBlockNode *find_device(FqBlock *b, const char *id)
{
        for (size_t k = 0; k < b->n_nodes; k++) {
                FqBlockNode *n = &b->nodes[k];
                if (n->has_device && (streq(n->device_id, id) || streq(n->device_path, id)))
                        return n;
        }
        return NULL;
}

static FqFdSet *find_set(FqBlock *b, int id)
{
        for (size_t k = 0; k < b->n_sets; k++)
                if (b->sets[k].id == id)
                        return &b->sets[k];
        return NULL;
}

int fq_block_add_port(FqBlock *b, const char *id)
{
        if (b->n_ports == FQ_ARGS_DRIVES_MAX)
                return -E2BIG;
        snprintf(b->ports[b->n_ports++], sizeof b->ports[0], "%s", id);
        return 0;
}

static bool port_is_known(const FqBlock *b, const char *id)
{
        for (size_t k = 0; k < b->n_ports; k++)
                if (streq(b->ports[k], id))
                        return true;
        return false;
}

static const FqBlockNode *port_holder(const FqBlock *b, const char *id)
{
        for (size_t k = 0; k < b->n_nodes; k++)
                if (b->nodes[k].has_device && streq(b->nodes[k].port, id))
                        return &b->nodes[k];
        return NULL;
}

int fq_block_add_boot_drive(FqBlock *b, const char *node, const char *port, int set, int fd,
                            bool read_only)
{
        if (b->n_nodes == FQ_BLOCK_NODES_MAX || b->n_sets == FQ_BLOCK_NODES_MAX)
                return -E2BIG;
        FqBlockNode *n = &b->nodes[b->n_nodes];
        *n = (FqBlockNode){.set = set, .read_only = read_only, .has_device = true};
        snprintf(n->name, sizeof n->name, "%s", node);
        snprintf(n->port, sizeof n->port, "%s", port);
        /* Devices of the command line have no id: QEMU names them by their place. */
        snprintf(n->device_path, sizeof n->device_path, "/machine/peripheral-anon/device[%zu]",
                 b->n_anon++);
        b->n_nodes++;
        if (!find_set(b, set))
                b->sets[b->n_sets++] = (FqFdSet){.id = set, .fd = fd, .from_argv = true};
        if (b->next_set <= set)
                b->next_set = set + 1;
        return 0;
}

void fq_block_done(FqBlock *b)
{
        for (size_t k = 0; k < b->n_sets; k++)
                if (!b->sets[k].from_argv)
                        closep(&b->sets[k].fd);
        closep(&b->received_fd);
        b->received_fd = -1;
}

static json_t *add_fd(FqBlock *b, const json_t *args)
{
        static const char *const allowed[] = {"fdset-id", "opaque", NULL};
        json_t *bad = unexpected(args, allowed);
        if (bad)
                return bad;
        if (b->received_fd < 0)
                return error_reply("GenericError", "No file descriptor supplied via SCM_RIGHTS");
        json_t *want = json_object_get(args, "fdset-id");
        int id = b->next_set;
        if (want) {
                if (!json_is_integer(want) || json_integer_value(want) < 0 ||
                    json_integer_value(want) > 1000000)
                        return error_reply("GenericError",
                                           "Invalid parameter type for 'fdset-id', expected: "
                                           "integer");
                id = (int)json_integer_value(want);
                if (find_set(b, id))
                        return error_reply("GenericError", "fdset-id %d is in use", id);
        }
        if (b->n_sets == FQ_BLOCK_NODES_MAX)
                return error_reply("GenericError", "too many fd sets");
        int fd = TAKE_FD(b->received_fd);
        b->received_fd = -1;
        b->sets[b->n_sets++] = (FqFdSet){.id = id, .fd = fd};
        if (b->next_set <= id)
                b->next_set = id + 1;
        return json_pack("{s:{s:i,s:i}}", "return", "fdset-id", id, "fd", fd);
}

static json_t *blockdev_add(FqBlock *b, const json_t *args)
{
        static const char *const allowed[] = {"driver",  "node-name", "read-only",     "cache",
                                              "discard", "file",      "detect-zeroes", NULL};
        json_t *bad = unexpected(args, allowed);
        if (bad)
                return bad;
        const char *driver = string_arg(args, "driver"), *name = string_arg(args, "node-name");
        if (!driver)
                return error_reply("GenericError", "Parameter 'driver' is missing");
        /* DISK-9: vgpud names the format of every disk; these are the two it uses. */
        if (!streq(driver, "qcow2") && !streq(driver, "raw"))
                return error_reply("GenericError", "Invalid parameter '%s'", driver);
        if (!name)
                return error_reply("GenericError",
                                   "'node-name' must be specified for the root node");
        if (!node_name_is_valid(name))
                return error_reply("GenericError", "Invalid node-name: '%s'", name);
        if (find_node(b, name))
                return error_reply("GenericError", "Duplicate nodes with node-name='%s'", name);
        json_t *ro = json_object_get(args, "read-only");
        if (ro && !json_is_boolean(ro))
                return error_reply("GenericError",
                                   "Invalid parameter type for 'read-only', expected: boolean");
        bool read_only = ro && json_is_true(ro);
        const char *discard = string_arg(args, "discard"),
                   *zeroes = string_arg(args, "detect-zeroes");
        if (zeroes && streq(zeroes, "unmap") && !(discard && streq(discard, "unmap")))
                return error_reply("GenericError", "setting detect-zeroes to unmap is not allowed "
                                                   "without setting discard operation to unmap");
        json_t *file = json_object_get(args, "file");
        const char *fdriver = string_arg(file, "driver"), *filename = string_arg(file, "filename");
        if (!json_is_object(file) || !fdriver || !filename)
                return error_reply("GenericError", "A block device must be specified for \"file\"");
        if (!streq(fdriver, "file"))
                return error_reply("GenericError", "Unknown driver '%s' for file", fdriver);
        const char *num = startswith(filename, "/dev/fdset/");
        int set = -1;
        char *end = NULL;
        if (num && *num)
                set = (int)strtol(num, &end, 10);
        FqFdSet *s = num && end && !*end ? find_set(b, set) : NULL;
        if (!s)
                return error_reply("GenericError", "Could not open '%s': No such file or directory",
                                   filename);
        int mode = fcntl(s->fd, F_GETFL);
        if (mode < 0 || (!read_only && (mode & O_ACCMODE) != O_RDWR))
                return error_reply("GenericError", "Could not open '%s': Invalid argument",
                                   filename);
        if (streq(driver, "qcow2")) {
                char magic[4] = {0};
                if (pread(s->fd, magic, sizeof magic, 0) != (ssize_t)sizeof magic ||
                    memcmp(magic, "QFI\xfb", 4) != 0)
                        return error_reply("GenericError", "Image is not in qcow2 format");
        }
        if (b->n_nodes == FQ_BLOCK_NODES_MAX)
                return error_reply("GenericError", "too many nodes");
        FqBlockNode *n = &b->nodes[b->n_nodes++];
        *n = (FqBlockNode){.set = set, .read_only = read_only};
        snprintf(n->name, sizeof n->name, "%s", name);
        return json_pack("{s:{}}", "return");
}

static json_t *device_add(FqBlock *b, const json_t *args)
{
        static const char *const allowed[] = {"driver", "id", "drive", "serial", "bus", NULL};
        const char *driver = string_arg(args, "driver"), *id = string_arg(args, "id"),
                   *drive = string_arg(args, "drive"), *serial = string_arg(args, "serial"),
                   *bus = string_arg(args, "bus");
        if (!driver)
                return error_reply("GenericError", "Parameter 'driver' is missing");
        if (!streq(driver, "virtio-blk-pci"))
                return error_reply("GenericError", "'%s' is not a valid device model name", driver);
        json_t *bad = unexpected(args, allowed);
        if (bad)
                return bad;
        /* q35: the root bus takes no hot-plugged device; a free root port does. */
        if (!bus || streq(bus, "pcie.0"))
                return error_reply("GenericError", "Bus 'pcie.0' does not support hotplugging");
        if (!port_is_known(b, bus))
                return error_reply("GenericError", "Bus '%s' not found", bus);
        const FqBlockNode *holder = port_holder(b, bus);
        if (holder)
                return error_reply(
                    "GenericError", "PCI: slot 0 function 0 not available for %s, in use by %s",
                    driver, holder->device_id[0] ? holder->device_id : "virtio-blk-pci");
        if (!drive)
                return error_reply("GenericError", "drive: Drive property not set");
        FqBlockNode *n = find_node(b, drive);
        if (!n)
                return error_reply("GenericError",
                                   "Property 'virtio-blk-device.drive' can't find value '%s'",
                                   drive);
        if (n->has_device)
                return error_reply("GenericError",
                                   "Property 'virtio-blk-device.drive' can't take value '%s', "
                                   "it's in use",
                                   drive);
        if (id && (!node_name_is_valid(id) || strlen(id) >= sizeof n->device_id))
                return error_reply("GenericError", "Parameter 'id' expects an identifier");
        if (id && find_device(b, id))
                return error_reply("GenericError", "Duplicate device ID '%s'", id);
        if (serial && strlen(serial) >= sizeof n->serial)
                return error_reply("GenericError", "serial is too long");
        n->has_device = true;
        n->unplugging = false;
        snprintf(n->port, sizeof n->port, "%s", bus);
        snprintf(n->device_id, sizeof n->device_id, "%s", id ? id : "");
        snprintf(n->serial, sizeof n->serial, "%s", serial ? serial : "");
        if (id)
                snprintf(n->device_path, sizeof n->device_path, "/machine/peripheral/%s", id);
        else
                snprintf(n->device_path, sizeof n->device_path,
                         "/machine/peripheral-anon/device[%zu]", b->n_anon++);
        return json_pack("{s:{}}", "return");
}

static json_t *device_deleted_event(const FqBlockNode *n, bool backend)
{
        _cleanup_free_ char *path = NULL;
        if (asprintf(&path, "%s%s", n->device_path, backend ? "/virtio-backend" : "") < 0)
                return NULL;
        json_t *data = backend || !n->device_id[0]
                           ? json_pack("{s:s}", "path", path)
                           : json_pack("{s:s,s:s}", "device", n->device_id, "path", path);
        return fq_qmp_event("DEVICE_DELETED", data);
}

static json_t *device_del(FqBlock *b, const json_t *args, bool hold, json_t *events)
{
        static const char *const allowed[] = {"id", NULL};
        json_t *bad = unexpected(args, allowed);
        if (bad)
                return bad;
        const char *id = string_arg(args, "id");
        if (!id)
                return error_reply("GenericError", "Parameter 'id' is missing");
        FqBlockNode *n = find_device(b, id);
        if (!n)
                return error_reply("DeviceNotFound", "Device '%s' not found", id);
        if (n->unplugging)
                return error_reply("GenericError",
                                   "Device '%s' is already in the process of unplug", id);
        n->unplugging = true;
        if (hold)
                return json_pack("{s:{}}", "return"); /* the guest never answers */
        /* The guest acknowledges at once: the backend goes first, then the proxy. */
        if (json_array_append_new(events, device_deleted_event(n, true)) < 0 ||
            json_array_append_new(events, device_deleted_event(n, false)) < 0)
                return NULL;
        n->has_device = false;
        n->unplugging = false;
        n->device_id[0] = n->device_path[0] = n->serial[0] = n->port[0] = 0;
        return json_pack("{s:{}}", "return");
}

static json_t *blockdev_del(FqBlock *b, const json_t *args)
{
        static const char *const allowed[] = {"node-name", NULL};
        json_t *bad = unexpected(args, allowed);
        if (bad)
                return bad;
        const char *name = string_arg(args, "node-name");
        if (!name)
                return error_reply("GenericError", "Parameter 'node-name' is missing");
        FqBlockNode *n = find_node(b, name);
        if (!n)
                return error_reply("GenericError", "Failed to find node with node-name='%s'", name);
        if (n->has_device)
                return error_reply("GenericError", "Node %s is in use", name);
        /* Its fd set closes with it: no other node of vgpud's shares one. */
        FqFdSet *s = find_set(b, n->set);
        if (s) {
                if (!s->from_argv)
                        closep(&s->fd);
                *s = b->sets[--b->n_sets];
        }
        *n = b->nodes[--b->n_nodes];
        return json_pack("{s:{}}", "return");
}

static json_t *query_block(FqBlock *b, const json_t *args)
{
        static const char *const allowed[] = {NULL};
        json_t *bad = unexpected(args, allowed);
        if (bad)
                return bad;
        json_auto_t *list = json_array();
        if (!list)
                return NULL;
        for (size_t k = 0; k < b->n_nodes; k++) {
                const FqBlockNode *n = &b->nodes[k];
                if (!n->has_device)
                        continue; /* QEMU lists block backends: a node without a device has none */
                _cleanup_free_ char *qdev = NULL, *file = NULL;
                if (asprintf(&qdev, "%s/virtio-backend", n->device_path) < 0 ||
                    asprintf(&file, "/dev/fdset/%d", n->set) < 0)
                        return NULL;
                json_t *e = json_pack("{s:s,s:s,s:b,s:b,s:s,s:{s:s,s:b,s:s,s:s}}", "device", "",
                                      "qdev", qdev, "locked", 0, "removable", 0, "type", "unknown",
                                      "inserted", "node-name", n->name, "ro", n->read_only, "drv",
                                      "qcow2", "file", file);
                if (json_array_append_new(list, e) < 0)
                        return NULL;
        }
        return json_pack("{s:O}", "return", list);
}

/* q35's bus 0 as query-pci shows it, reduced to the root ports and what is behind them. */
static json_t *query_pci(FqBlock *b, const json_t *args)
{
        static const char *const allowed[] = {NULL};
        json_t *bad = unexpected(args, allowed);
        if (bad)
                return bad;
        json_auto_t *devices = json_array();
        if (!devices)
                return NULL;
        for (size_t k = 0; k < b->n_ports; k++) {
                const FqBlockNode *n = port_holder(b, b->ports[k]);
                json_t *behind =
                    n ? json_pack("[{s:i,s:i,s:i,s:s,s:{s:i,s:s}}]", "bus", (int)k + 1, "slot", 0,
                                  "function", 0, "qdev_id", n->device_id, "class_info", "class",
                                  256, "desc", "SCSI controller")
                      : json_array();
                json_t *port = json_pack(
                    "{s:i,s:i,s:i,s:s,s:{s:i,s:s},s:{s:{s:i,s:i,s:i},s:o}}", "bus", 0, "slot",
                    2 + (int)k, "function", 0, "qdev_id", b->ports[k], "class_info", "class", 1540,
                    "desc", "PCI bridge", "pci_bridge", "bus", "number", 0, "secondary", (int)k + 1,
                    "subordinate", (int)k + 1, "devices", behind);
                if (json_array_append_new(devices, port) < 0)
                        return NULL;
        }
        return json_pack("{s:[{s:i,s:O}]}", "return", "bus", 0, "devices", devices);
}

bool fq_block_handles(const char *command)
{
        static const char *const commands[] = {
            "add-fd",       "blockdev-add", "device_add", "device_del",
            "blockdev-del", "query-block",  "query-pci",  NULL};
        for (const char *const *c = commands; *c; c++)
                if (streq(*c, command))
                        return true;
        return false;
}

json_t *fq_block_answer(FqBlock *b, const char *command, const json_t *args, bool hold_devices,
                        json_t *events)
{
        json_auto_t *empty = args ? NULL : json_object();
        if (!args)
                args = empty;
        if (streq(command, "add-fd"))
                return add_fd(b, args);
        if (streq(command, "blockdev-add"))
                return blockdev_add(b, args);
        if (streq(command, "device_add"))
                return device_add(b, args);
        if (streq(command, "device_del"))
                return device_del(b, args, hold_devices, events);
        if (streq(command, "blockdev-del"))
                return blockdev_del(b, args);
        if (streq(command, "query-pci"))
                return query_pci(b, args);
        return query_block(b, args);
}
