/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * tree: the sysfs and /dev layout of a simulated host (SIM-3, SIM-5, SIM-6, SIM-12), as a
 * sorted table of paths relative to the mount point ("sys/bus/pci/devices/0000:e3:00.4",
 * "dev/vfio/3"). Each file node names the attribute it shows and the GPU, VF, type or mdev it
 * belongs to; reads and writes of a node go to the model. Pure: no FUSE and no I/O.
 *
 * Promises: link targets are relative, as in sysfs; a tree is rebuilt whenever the host's
 * layout_generation changes (an mdev appeared or vanished, an SR-IOV cycle took VFs away or
 * brought them back), and nodes are plain values that callers may copy (sim_node_copy) to
 * outlive the tree. A copied node of a VF that an SR-IOV cycle removed stays gone, even once
 * the VF is back: like an open sysfs file of a removed device, reads and writes fail ENODEV.
 */

#include "model.h"

#include <sys/types.h>

typedef enum SimNodeKind {
        SIM_NODE_DIR,
        SIM_NODE_FILE,
        SIM_NODE_LINK,
} SimNodeKind;

typedef enum SimAttr {
        SIM_ATTR_NONE,
        SIM_ATTR_VENDOR,
        SIM_ATTR_DEVICE,
        SIM_ATTR_CLASS,
        SIM_ATTR_SRIOV_TOTALVFS,
        SIM_ATTR_SRIOV_NUMVFS,
        SIM_ATTR_DRIVER_OVERRIDE,
        SIM_ATTR_PCI_REMOVE,
        SIM_ATTR_PCI_RESET,
        SIM_ATTR_DRIVER_BIND,
        SIM_ATTR_DRIVER_UNBIND,
        SIM_ATTR_CREATABLE_TYPES,
        SIM_ATTR_CURRENT_TYPE,
        SIM_ATTR_VFIO_DEV,
        SIM_ATTR_MDEV_NAME,
        SIM_ATTR_MDEV_DESCRIPTION,
        SIM_ATTR_MDEV_AVAILABLE,
        SIM_ATTR_MDEV_DEVICE_API,
        SIM_ATTR_MDEV_CREATE,
        SIM_ATTR_MDEV_REMOVE,
        SIM_ATTR_DRIVER_VERSION,
        SIM_ATTR_VFIO_NODE,      /* dev/vfio/<group>, dev/vfio/devices/vfio<n>: counted opens */
        SIM_ATTR_VFIO_CONTAINER, /* dev/vfio/vfio */
        SIM_ATTR_HOST_DEVICE,    /* dev/kvm, dev/net/tun: open and close only */
} SimAttr;

typedef struct SimNode {
        char *path;
        SimNodeKind kind;
        SimAttr attr;
        mode_t mode;  /* permission bits */
        char *target; /* links: relative target */
        size_t gpu;   /* SIZE_MAX when the node belongs to no GPU */
        size_t vf;    /* SIZE_MAX when the node belongs to no VF */
        const SimType *type;
        char uuid[SIM_UUID_STRLEN]; /* nodes of one mdev; their times are its creation (SIM-6) */
        uint64_t sriov_cycle;       /* the GPU's sriov_cycles when the tree was built */
} SimNode;

typedef struct SimTree {
        SimNode *nodes; /* sorted by path */
        size_t n;
        uint64_t layout_generation; /* of the host it was built from */
} SimTree;

int sim_tree_build(const SimHost *h, SimTree **ret);
SimTree *sim_tree_free(SimTree *t);
DEFINE_TRIVIAL_CLEANUP_FUNC(SimTree *, sim_tree_free);
#define _cleanup_sim_tree_ _cleanup_(sim_tree_freep)

const SimNode *sim_tree_lookup(const SimTree *t, const char *path);

/* Names of the entries of directory `dir` ("sys", "sys/bus"), in path order. */
int sim_tree_list(const SimTree *t, const char *dir, char ***ret);

int sim_node_copy(const SimNode *n, SimNode *ret);
void sim_node_clear(SimNode *n);

bool sim_attr_readable(SimAttr a);
bool sim_attr_writable(SimAttr a);

/* Whether the node's VF went away in an SR-IOV cycle after the node was built (SIM-14). */
bool sim_node_vf_gone(const SimHost *h, const SimNode *n);

/* The attribute's contents now, as the driver would print them; -ENODEV for a gone VF. */
int sim_node_read(const SimHost *h, const SimNode *n, char **ret);

/*
 * One store into an attribute. Forbidden attributes (SIM-16) are recorded under path and
 * refused with -EPERM; attributes without a store method give -EACCES; a gone VF's -ENODEV.
 * now_ms is the monotonic clock (release lag, an mdev's creation time).
 */
int sim_node_write(SimHost *h, const SimNode *n, const char *buf, size_t size, uint64_t now_ms);

/*
 * The VF whose write spans or open handles the node counts towards (current_vgpu_type, mdev
 * create and remove, VFIO nodes); -ENOENT for other nodes, -ENODEV for a vanished mdev or a
 * VF gone in an SR-IOV cycle.
 */
int sim_node_vf(const SimHost *h, const SimNode *n, size_t *ret_gpu, size_t *ret_vf);

/*
 * Other names of a canonical sys path for fault globs: sys/bus/pci/devices/<addr>/...,
 * sys/class/mdev_bus/<addr>/... and sys/bus/mdev/devices/<uuid>/... A NULL-terminated vector,
 * empty for paths outside sys/devices.
 */
int sim_path_aliases(const char *path, char ***ret);
