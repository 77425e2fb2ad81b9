/* SPDX-License-Identifier: GPL-2.0-or-later */
#include "tree.h"

#include <ctype.h>
#include <inttypes.h>

/* The major number of VFIO character devices is dynamic; this one is only for show. */
#define VFIO_MAJOR 511

typedef struct Builder {
        SimNode *nodes;
        size_t n, cap;
} Builder;

/* What a node belongs to. */
typedef struct Ref {
        size_t gpu, vf;
        const SimType *type;
        const char *uuid;
} Ref;

static const Ref NO_REF = {SIZE_MAX, SIZE_MAX, NULL, NULL};

static void builder_clear(Builder *b)
{
        for (size_t i = 0; i < b->n; i++)
                sim_node_clear(&b->nodes[i]);
        free(b->nodes);
}

#define MAX_COMPONENTS 32

/* Splits a path in place at '/'; -E2BIG beyond MAX_COMPONENTS components. */
static int split_path(char *s, char *parts[static MAX_COMPONENTS], size_t *ret_n)
{
        char *save = NULL;
        size_t n = 0;

        for (char *p = strtok_r(s, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
                if (n == MAX_COMPONENTS)
                        return -E2BIG;
                parts[n++] = p;
        }
        *ret_n = n;
        return 0;
}

/* The target of a link at link_path, relative to the link's directory (sysfs links are). */
static int relative_target(const char *link_path, const char *target, char **ret)
{
        const char *slash = strrchr(link_path, '/');
        _cleanup_free_ char *dir = strndup(link_path, slash ? (size_t)(slash - link_path) : 0);
        _cleanup_free_ char *to = strdup(target);
        _cleanup_free_ char *result = NULL;
        char *dir_parts[MAX_COMPONENTS], *to_parts[MAX_COMPONENTS];
        size_t n_dir, n_to, common = 0;
        int r;

        if (!dir || !to)
                return -ENOMEM;
        if ((r = split_path(dir, dir_parts, &n_dir)) < 0 ||
            (r = split_path(to, to_parts, &n_to)) < 0)
                return r;
        while (common < n_dir && common < n_to && streq(dir_parts[common], to_parts[common]))
                common++;
        for (size_t i = common; i < n_dir; i++)
                if ((r = strextend(&result, "../")) < 0)
                        return r;
        for (size_t i = common; i < n_to; i++)
                if ((r = strextend(&result, "%s%s", to_parts[i], i + 1 < n_to ? "/" : "")) < 0)
                        return r;
        if (!result)
                return -EINVAL; /* a link to its own directory */
        *ret = TAKE_PTR(result);
        return 0;
}

static int add_node(Builder *b, SimNodeKind kind, SimAttr attr, mode_t mode, Ref ref,
                    const char *target, char *path)
{
        _cleanup_free_ char *owned = path;
        if (!owned)
                return -ENOMEM;
        if (b->n == b->cap) {
                size_t cap = b->cap ? b->cap * 2 : 256;
                SimNode *grown = realloc(b->nodes, cap * sizeof(SimNode));
                if (!grown)
                        return -ENOMEM;
                b->nodes = grown;
                b->cap = cap;
        }
        SimNode n = {
            .kind = kind,
            .attr = attr,
            .mode = mode,
            .gpu = ref.gpu,
            .vf = ref.vf,
            .type = ref.type,
        };
        if (ref.uuid)
                memcpy(n.uuid, ref.uuid, SIM_UUID_STRLEN);
        if (target) {
                int r = relative_target(owned, target, &n.target);
                if (r < 0)
                        return r;
        }
        n.path = TAKE_PTR(owned);
        b->nodes[b->n++] = n;
        return 0;
}

static char *fmt_path(const char *fmt, ...) _printf_(1, 2);
static char *fmt_path(const char *fmt, ...)
{
        char *s;
        va_list ap;

        va_start(ap, fmt);
        int k = vasprintf(&s, fmt, ap);
        va_end(ap);
        return k < 0 ? NULL : s;
}

#define ADD_DIR(b, ...) \
        add_node(b, SIM_NODE_DIR, SIM_ATTR_NONE, 0755, NO_REF, NULL, fmt_path(__VA_ARGS__))
#define ADD_FILE(b, attr, mode, ref, ...) \
        add_node(b, SIM_NODE_FILE, attr, mode, ref, NULL, fmt_path(__VA_ARGS__))
#define ADD_LINK(b, target, ...) \
        add_node(b, SIM_NODE_LINK, SIM_ATTR_NONE, 0777, NO_REF, target, fmt_path(__VA_ARGS__))
/* Directories and links that belong to an mdev, so they carry its creation time (SIM-6). */
#define ADD_DIR_OF(b, ref, ...) \
        add_node(b, SIM_NODE_DIR, SIM_ATTR_NONE, 0755, ref, NULL, fmt_path(__VA_ARGS__))
#define ADD_LINK_OF(b, ref, target, ...) \
        add_node(b, SIM_NODE_LINK, SIM_ATTR_NONE, 0777, ref, target, fmt_path(__VA_ARGS__))

/* "sys/devices/pci0000:e3/0000:e3:00.4": PF and VFs sit side by side under one host bridge. */
static int device_dir(const char *address, char **ret)
{
        return strprintf(ret, "sys/devices/pci%.7s/%s", address, address);
}

static int add_pci_common(Builder *b, Ref ref, const char *address)
{
        _cleanup_free_ char *dir = NULL;
        int r = device_dir(address, &dir);
        if (r < 0)
                return r;
        if ((r = ADD_DIR(b, "%s", dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_VENDOR, 0444, ref, "%s/vendor", dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_DEVICE, 0444, ref, "%s/device", dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_CLASS, 0444, ref, "%s/class", dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_DRIVER_OVERRIDE, 0644, ref, "%s/driver_override", dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_PCI_REMOVE, 0200, ref, "%s/remove", dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_PCI_RESET, 0200, ref, "%s/reset", dir)) < 0 ||
            (r = ADD_LINK(b, "sys/bus/pci/drivers/nvidia", "%s/driver", dir)) < 0 ||
            (r = ADD_LINK(b, dir, "sys/bus/pci/devices/%s", address)) < 0 ||
            (r = ADD_LINK(b, dir, "sys/bus/pci/drivers/nvidia/%s", address)) < 0)
                return r;
        return 0;
}

static int add_mdev_types(Builder *b, const SimGpu *g, size_t gi, size_t vi, const char *dir)
{
        int r = ADD_DIR(b, "%s/mdev_supported_types", dir);
        for (size_t i = 0; r >= 0 && i < g->model->n_types; i++) {
                const SimType *t = &g->model->types[i];
                Ref ref = {gi, vi, t, NULL};
                if ((r = ADD_DIR(b, "%s/mdev_supported_types/%s", dir, t->mdev_type)) < 0 ||
                    (r = ADD_DIR(b, "%s/mdev_supported_types/%s/devices", dir, t->mdev_type)) < 0 ||
                    (r = ADD_FILE(b, SIM_ATTR_MDEV_NAME, 0444, ref,
                                  "%s/mdev_supported_types/%s/name", dir, t->mdev_type)) < 0 ||
                    (r = ADD_FILE(b, SIM_ATTR_MDEV_DESCRIPTION, 0444, ref,
                                  "%s/mdev_supported_types/%s/description", dir, t->mdev_type)) <
                        0 ||
                    (r = ADD_FILE(b, SIM_ATTR_MDEV_AVAILABLE, 0444, ref,
                                  "%s/mdev_supported_types/%s/available_instances", dir,
                                  t->mdev_type)) < 0 ||
                    (r = ADD_FILE(b, SIM_ATTR_MDEV_DEVICE_API, 0444, ref,
                                  "%s/mdev_supported_types/%s/device_api", dir, t->mdev_type)) <
                        0 ||
                    (r = ADD_FILE(b, SIM_ATTR_MDEV_CREATE, 0200, ref,
                                  "%s/mdev_supported_types/%s/create", dir, t->mdev_type)) < 0)
                        return r;
        }
        return r;
}

static int add_mdev(Builder *b, const SimGpu *g, size_t gi, size_t vi, const char *vf_dir)
{
        const SimVf *vf = &g->vfs[vi];
        const SimType *t = sim_gpu_model_find_type(g->model, vf->type);
        Ref ref = {gi, vi, t, vf->mdev_uuid};
        _cleanup_free_ char *dir = NULL, *type_dir = NULL, *group = NULL;
        int r;

        if (!t)
                return -EINVAL;
        if ((r = strprintf(&dir, "%s/%s", vf_dir, vf->mdev_uuid)) < 0 ||
            (r = strprintf(&type_dir, "%s/mdev_supported_types/%s", vf_dir, t->mdev_type)) < 0 ||
            (r = strprintf(&group, "sys/kernel/iommu_groups/%" PRIu32, vf->mdev_group)) < 0)
                return r;
        if ((r = ADD_DIR_OF(b, ref, "%s", dir)) < 0 ||
            (r = ADD_LINK_OF(b, ref, type_dir, "%s/mdev_type", dir)) < 0 ||
            (r = ADD_LINK_OF(b, ref, group, "%s/iommu_group", dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_MDEV_REMOVE, 0200, ref, "%s/remove", dir)) < 0 ||
            (r = ADD_LINK_OF(b, ref, dir, "%s/devices/%s", type_dir, vf->mdev_uuid)) < 0 ||
            (r = ADD_LINK_OF(b, ref, dir, "sys/bus/mdev/devices/%s", vf->mdev_uuid)) < 0 ||
            (r = ADD_DIR_OF(b, ref, "%s", group)) < 0 ||
            (r = ADD_DIR_OF(b, ref, "%s/devices", group)) < 0 ||
            (r = ADD_LINK_OF(b, ref, dir, "%s/devices/%s", group, vf->mdev_uuid)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_VFIO_NODE, 0666, ref, "dev/vfio/%" PRIu32, vf->mdev_group)) <
                0)
                return r;
        return 0;
}

static int add_vf(Builder *b, const SimGpu *g, size_t gi, size_t vi)
{
        const SimVf *vf = &g->vfs[vi];
        Ref ref = {gi, vi, NULL, NULL};
        _cleanup_free_ char *dir = NULL, *pf_dir = NULL, *group = NULL;
        int r;

        if ((r = device_dir(vf->address, &dir)) < 0 || (r = device_dir(g->address, &pf_dir)) < 0 ||
            (r = strprintf(&group, "sys/kernel/iommu_groups/%" PRIu32, vf->iommu_group)) < 0)
                return r;
        if ((r = add_pci_common(b, ref, vf->address)) < 0 ||
            (r = ADD_LINK(b, pf_dir, "%s/physfn", dir)) < 0 ||
            (r = ADD_LINK(b, dir, "%s/virtfn%zu", pf_dir, vi)) < 0 ||
            (r = ADD_LINK(b, group, "%s/iommu_group", dir)) < 0 ||
            (r = ADD_DIR(b, "%s", group)) < 0 || (r = ADD_DIR(b, "%s/devices", group)) < 0 ||
            (r = ADD_LINK(b, dir, "%s/devices/%s", group, vf->address)) < 0)
                return r;

        if (g->model->mdev) {
                if ((r = ADD_LINK(b, dir, "sys/class/mdev_bus/%s", vf->address)) < 0 ||
                    (r = add_mdev_types(b, g, gi, vi, dir)) < 0)
                        return r;
                return vf->mdev_uuid[0] ? add_mdev(b, g, gi, vi, dir) : 0;
        }

        if ((r = ADD_DIR(b, "%s/nvidia", dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_CREATABLE_TYPES, 0444, ref, "%s/nvidia/creatable_vgpu_types",
                          dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_CURRENT_TYPE, 0644, ref, "%s/nvidia/current_vgpu_type",
                          dir)) < 0 ||
            (r = ADD_DIR(b, "%s/vfio-dev", dir)) < 0 ||
            (r = ADD_DIR(b, "%s/vfio-dev/vfio%" PRId32, dir, vf->vfio)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_VFIO_DEV, 0444, ref, "%s/vfio-dev/vfio%" PRId32 "/dev", dir,
                          vf->vfio)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_VFIO_NODE, 0666, ref, "dev/vfio/%" PRIu32, vf->iommu_group)) <
                0 ||
            (r = ADD_FILE(b, SIM_ATTR_VFIO_NODE, 0666, ref, "dev/vfio/devices/vfio%" PRId32,
                          vf->vfio)) < 0)
                return r;
        return 0;
}

static int add_gpu(Builder *b, const SimGpu *g, size_t gi)
{
        Ref ref = {gi, SIZE_MAX, NULL, NULL};
        _cleanup_free_ char *dir = NULL;
        int r;

        if ((r = device_dir(g->address, &dir)) < 0)
                return r;
        if ((r = ADD_DIR(b, "sys/devices/pci%.7s", g->address)) < 0 ||
            (r = add_pci_common(b, ref, g->address)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_SRIOV_TOTALVFS, 0444, ref, "%s/sriov_totalvfs", dir)) < 0 ||
            (r = ADD_FILE(b, SIM_ATTR_SRIOV_NUMVFS, 0644, ref, "%s/sriov_numvfs", dir)) < 0)
                return r;
        for (size_t v = 0; v < g->n_vfs; v++)
                if ((r = add_vf(b, g, gi, v)) < 0)
                        return r;
        return 0;
}

static int node_compare(const void *a, const void *b)
{
        return strcmp(((const SimNode *)a)->path, ((const SimNode *)b)->path);
}

int sim_tree_build(const SimHost *h, SimTree **ret)
{
        _cleanup_(builder_clear) Builder b = {};
        static const char *const dirs[] = {
            "sys",
            "sys/bus",
            "sys/bus/pci",
            "sys/bus/pci/devices",
            "sys/bus/pci/drivers",
            "sys/bus/pci/drivers/nvidia",
            "sys/bus/mdev",
            "sys/bus/mdev/devices",
            "sys/class",
            "sys/class/mdev_bus",
            "sys/devices",
            "sys/kernel",
            "sys/kernel/iommu_groups",
            "sys/module",
            "sys/module/nvidia",
            /* Loaded on every VFIO host; the simulator has nothing to say about them. */
            "sys/module/vfio",
            "sys/module/vfio_pci_core",
            "dev",
            "dev/net",
            "dev/vfio",
            "dev/vfio/devices",
        };
        int r;

        for (size_t i = 0; i < ELEMENTSOF(dirs); i++)
                if ((r = ADD_DIR(&b, "%s", dirs[i])) < 0)
                        return r;
        if ((r = ADD_FILE(&b, SIM_ATTR_DRIVER_BIND, 0200, NO_REF,
                          "sys/bus/pci/drivers/nvidia/bind")) < 0 ||
            (r = ADD_FILE(&b, SIM_ATTR_DRIVER_UNBIND, 0200, NO_REF,
                          "sys/bus/pci/drivers/nvidia/unbind")) < 0 ||
            (r = ADD_FILE(&b, SIM_ATTR_DRIVER_VERSION, 0444, NO_REF, "sys/module/nvidia/version")) <
                0 ||
            (r = ADD_FILE(&b, SIM_ATTR_VFIO_CONTAINER, 0666, NO_REF, "dev/vfio/vfio")) < 0 ||
            (r = ADD_FILE(&b, SIM_ATTR_HOST_DEVICE, 0666, NO_REF, "dev/kvm")) < 0 ||
            (r = ADD_FILE(&b, SIM_ATTR_HOST_DEVICE, 0666, NO_REF, "dev/net/tun")) < 0)
                return r;
        for (size_t i = 0; i < h->n_gpus; i++)
                if ((r = add_gpu(&b, &h->gpus[i], i)) < 0)
                        return r;
        for (size_t i = 0; i < b.n; i++)
                if (b.nodes[i].gpu != SIZE_MAX)
                        b.nodes[i].sriov_cycle = h->gpus[b.nodes[i].gpu].sriov_cycles;

        qsort(b.nodes, b.n, sizeof(SimNode), node_compare);
        for (size_t i = 1; i < b.n; i++)
                if (streq(b.nodes[i - 1].path, b.nodes[i].path))
                        return -EEXIST; /* a layout bug, e.g. two PFs on one bus */

        SimTree *t = calloc(1, sizeof(SimTree));
        if (!t)
                return -ENOMEM;
        t->nodes = TAKE_PTR(b.nodes);
        t->n = b.n;
        t->layout_generation = h->layout_generation;
        b.n = 0;
        *ret = t;
        return 0;
}

SimTree *sim_tree_free(SimTree *t)
{
        if (!t)
                return NULL;
        for (size_t i = 0; i < t->n; i++)
                sim_node_clear(&t->nodes[i]);
        free(t->nodes);
        free(t);
        return NULL;
}

/* Index of the first node whose path is >= key. */
static size_t lower_bound(const SimTree *t, const char *key)
{
        size_t lo = 0, hi = t->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (strcmp(t->nodes[mid].path, key) < 0)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

const SimNode *sim_tree_lookup(const SimTree *t, const char *path)
{
        size_t i = lower_bound(t, path);
        return i < t->n && streq(t->nodes[i].path, path) ? &t->nodes[i] : NULL;
}

int sim_tree_list(const SimTree *t, const char *dir, char ***ret)
{
        _cleanup_strv_free_ char **names = NULL;
        _cleanup_free_ char *prefix = NULL;
        const SimNode *d = sim_tree_lookup(t, dir);

        if (!d)
                return -ENOENT;
        if (d->kind != SIM_NODE_DIR)
                return -ENOTDIR;
        int r = strprintf(&prefix, "%s/", dir);
        if (r < 0)
                return r;
        /* Everything below dir is contiguous in path order; keep the direct children. */
        for (size_t i = lower_bound(t, prefix); i < t->n; i++) {
                const char *rest = startswith(t->nodes[i].path, prefix);
                if (!rest)
                        break;
                if (strchr(rest, '/'))
                        continue;
                if ((r = strv_push(&names, rest)) < 0)
                        return r;
        }
        if (!names) {
                /* An empty vector, not NULL, for an empty directory. */
                names = calloc(1, sizeof(char *));
                if (!names)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(names);
        return 0;
}

int sim_node_copy(const SimNode *n, SimNode *ret)
{
        SimNode c = *n;
        c.path = strdup(n->path);
        c.target = n->target ? strdup(n->target) : NULL;
        if (!c.path || (n->target && !c.target)) {
                sim_node_clear(&c);
                return -ENOMEM;
        }
        *ret = c;
        return 0;
}

void sim_node_clear(SimNode *n)
{
        free(n->path);
        free(n->target);
        n->path = n->target = NULL;
}

bool sim_attr_readable(SimAttr a)
{
        switch (a) {
        case SIM_ATTR_NONE:
        case SIM_ATTR_PCI_REMOVE:
        case SIM_ATTR_PCI_RESET:
        case SIM_ATTR_DRIVER_BIND:
        case SIM_ATTR_DRIVER_UNBIND:
        case SIM_ATTR_MDEV_CREATE:
        case SIM_ATTR_MDEV_REMOVE:
                return false;
        default:
                return true;
        }
}

bool sim_attr_writable(SimAttr a)
{
        switch (a) {
        case SIM_ATTR_SRIOV_NUMVFS:
        case SIM_ATTR_DRIVER_OVERRIDE:
        case SIM_ATTR_PCI_REMOVE:
        case SIM_ATTR_PCI_RESET:
        case SIM_ATTR_DRIVER_BIND:
        case SIM_ATTR_DRIVER_UNBIND:
        case SIM_ATTR_CURRENT_TYPE:
        case SIM_ATTR_MDEV_CREATE:
        case SIM_ATTR_MDEV_REMOVE:
        case SIM_ATTR_VFIO_NODE:
        case SIM_ATTR_VFIO_CONTAINER:
        case SIM_ATTR_HOST_DEVICE:
                return true;
        default:
                return false;
        }
}

bool sim_node_vf_gone(const SimHost *h, const SimNode *n)
{
        if (n->gpu == SIZE_MAX || n->vf == SIZE_MAX)
                return false;
        const SimGpu *g = &h->gpus[n->gpu];
        /* An `on` brings new devices back, not the ones an open handle still points at. */
        return n->vf >= g->n_vfs || n->sriov_cycle != g->sriov_cycles;
}

int sim_node_read(const SimHost *h, const SimNode *n, char **ret)
{
        const SimGpu *g = n->gpu != SIZE_MAX ? &h->gpus[n->gpu] : NULL;
        const SimVf *vf = g && n->vf != SIZE_MAX ? &g->vfs[n->vf] : NULL;

        if (sim_node_vf_gone(h, n))
                return -ENODEV;

        switch (n->attr) {
        case SIM_ATTR_VENDOR:
                return strprintf(ret, "0x10de\n");
        case SIM_ATTR_DEVICE:
                return strprintf(ret, "0x%04x\n", g->model->device_id);
        case SIM_ATTR_CLASS:
                return strprintf(ret, "0x030200\n"); /* 3D controller */
        case SIM_ATTR_SRIOV_TOTALVFS:
                return strprintf(ret, "%" PRIu32 "\n", g->model->max_vfs);
        case SIM_ATTR_SRIOV_NUMVFS:
                return strprintf(ret, "%zu\n", g->n_vfs);
        case SIM_ATTR_DRIVER_OVERRIDE:
                return strprintf(ret, "(null)\n");
        case SIM_ATTR_CREATABLE_TYPES:
                return sim_vf_format_creatable(g, n->vf, ret);
        case SIM_ATTR_CURRENT_TYPE:
                return strprintf(ret, "%" PRIu32 "\n", vf->type);
        case SIM_ATTR_VFIO_DEV:
                return strprintf(ret, "%d:%" PRId32 "\n", VFIO_MAJOR, vf->vfio);
        case SIM_ATTR_MDEV_NAME:
                return strprintf(ret, "%s\n", n->type->name);
        case SIM_ATTR_MDEV_DESCRIPTION:
                return strprintf(ret,
                                 "num_heads=4, frl_config=60, framebuffer=%" PRIu32
                                 "M, max_resolution=5120x2880, max_instance=%" PRIu32 "\n",
                                 n->type->size * 1024, sim_type_max_instances(g->model, n->type));
        case SIM_ATTR_MDEV_AVAILABLE:
                return strprintf(ret, "%" PRIu32 "\n", sim_mdev_available(g, n->vf, n->type));
        case SIM_ATTR_MDEV_DEVICE_API:
                return strprintf(ret, "vfio-pci\n");
        case SIM_ATTR_DRIVER_VERSION:
                return strprintf(ret, "%s\n", h->driver_version);
        case SIM_ATTR_VFIO_NODE:
        case SIM_ATTR_VFIO_CONTAINER:
        case SIM_ATTR_HOST_DEVICE:
                return strprintf(ret, "%s", "");
        default:
                return -EACCES;
        }
}

int sim_node_vf(const SimHost *h, const SimNode *n, size_t *ret_gpu, size_t *ret_vf)
{
        switch (n->attr) {
        case SIM_ATTR_CURRENT_TYPE:
        case SIM_ATTR_MDEV_CREATE:
        case SIM_ATTR_MDEV_REMOVE:
        case SIM_ATTR_VFIO_NODE:
                break;
        default:
                return -ENOENT;
        }
        if (sim_node_vf_gone(h, n))
                return -ENODEV;
        /* Nodes of an mdev outlive it in open handles; the VF may carry another by now. */
        if (n->uuid[0] && !streq(h->gpus[n->gpu].vfs[n->vf].mdev_uuid, n->uuid))
                return -ENODEV;
        *ret_gpu = n->gpu;
        *ret_vf = n->vf;
        return 0;
}

int sim_node_write(SimHost *h, const SimNode *n, const char *buf, size_t size, uint64_t now_ms)
{
        size_t g, v;
        int r;

        if (sim_node_vf_gone(h, n))
                return -ENODEV;
        switch (n->attr) {
        case SIM_ATTR_SRIOV_NUMVFS:
        case SIM_ATTR_DRIVER_OVERRIDE:
        case SIM_ATTR_PCI_REMOVE:
        case SIM_ATTR_PCI_RESET:
        case SIM_ATTR_DRIVER_BIND:
        case SIM_ATTR_DRIVER_UNBIND:
                /* SIM-16: vgpud must never do these; the write is refused and remembered. */
                r = sim_host_record_forbidden(h, n->path);
                return r < 0 ? r : -EPERM;
        case SIM_ATTR_CURRENT_TYPE:
                return sim_vf_store_type(h, n->gpu, n->vf, buf, size, now_ms);
        case SIM_ATTR_MDEV_CREATE:
                return sim_mdev_store_create(h, n->gpu, n->vf, n->type, buf, size, now_ms);
        case SIM_ATTR_MDEV_REMOVE:
                if ((r = sim_node_vf(h, n, &g, &v)) < 0)
                        return r;
                return sim_mdev_store_remove(h, g, v, buf, size, now_ms);
        case SIM_ATTR_VFIO_NODE:
        case SIM_ATTR_VFIO_CONTAINER:
        case SIM_ATTR_HOST_DEVICE:
                return -EINVAL;
        default:
                return -EACCES;
        }
}

int sim_path_aliases(const char *path, char ***ret)
{
        _cleanup_strv_free_ char **aliases = NULL;
        _cleanup_free_ char *alias = NULL;
        int r;

        /* sys/devices/pci<dddd:bb>/<addr>[/<rest>] */
        const char *p = startswith(path, "sys/devices/pci");
        p = p ? strchr(p, '/') : NULL;
        if (p) {
                const char *addr = p + 1;
                const char *rest = strchr(addr, '/');
                size_t addr_len = rest ? (size_t)(rest - addr) : strlen(addr);
                if (!rest)
                        rest = "";
                if ((r = strprintf(&alias, "sys/bus/pci/devices/%.*s%s", (int)addr_len, addr,
                                   rest)) < 0 ||
                    (r = strv_push(&aliases, alias)) < 0)
                        return r;
                free(alias);
                alias = NULL;
                if ((r = strprintf(&alias, "sys/class/mdev_bus/%.*s%s", (int)addr_len, addr,
                                   rest)) < 0 ||
                    (r = strv_push(&aliases, alias)) < 0)
                        return r;
                const char *uuid = *rest ? rest + 1 : "";
                const char *after = strchr(uuid, '/');
                size_t uuid_len = after ? (size_t)(after - uuid) : strlen(uuid);
                if (uuid_text_is_valid(uuid, uuid_len, false)) {
                        free(alias);
                        alias = NULL;
                        if ((r = strprintf(&alias, "sys/bus/mdev/devices/%s", uuid)) < 0 ||
                            (r = strv_push(&aliases, alias)) < 0)
                                return r;
                }
        }
        if (!aliases) {
                aliases = calloc(1, sizeof(char *));
                if (!aliases)
                        return -ENOMEM;
        }
        *ret = TAKE_PTR(aliases);
        return 0;
}
