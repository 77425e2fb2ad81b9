/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * vfio: who holds VFIO nodes open (SPEC DEV-12..DEV-15).
 *
 * A VfioScan is one walk of <proc_root>/<pid>/fd/<n>. It remembers every link target below
 * "<dev_root>/vfio/" and every "socket:[<inode>]", each with the lowest pid that holds it, and
 * nothing else. The walk fails closed: it either saw every descriptor of every process that
 * still existed when it got there, or it fails with a message (DEV-14). Processes and
 * descriptors that vanish while it runs (ENOENT, ESRCH) are skipped, as they hold nothing.
 * So is a link whose path the kernel cannot print (ENAMETOOLONG, over PATH_MAX): it is longer
 * than any candidate node, and failing on it would let any user block every release. A node
 * unlinked while held ("<path> (deleted)") is kept under <path>, erring towards "in use".
 *
 * Promises:
 *  - a scan is immutable once built: a worker thread builds it and any thread may then query
 *    it, so one scan can serve every probe of a reconcile pass or release batch (DEV-15);
 *  - the walk allocates nothing per descriptor (only per kept VFIO target), reads directories
 *    with getdents64 on its own descriptors, and never moves the offset of the shared root fd;
 *  - a probe reports "in use" whenever a candidate node is open, even if reading another
 *    candidate failed; it reports an error only when nothing it could read was open (DEV-13).
 *
 * Link targets are compared as the kernel prints them, so dev_root must be the path through
 * which VMMs open the nodes (no symlinks in between).
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sysfs/sysfs.h"

typedef struct VfioScan VfioScan;

/*
 * Walks proc_root and keeps the targets below "<dev_root>/vfio/" (dev_root absolute).
 * Failures (*error gets the text):
 *   `list processes in <proc_root>: <err>`            the process list cannot be read
 *   `read process <pid> file descriptors: <err>`      an fd directory cannot be opened or read
 *   `read process <pid> file descriptor <fd>: <err>`  an fd link cannot be read or is malformed
 */
int vfio_scan(const Root *proc_root, const char *dev_root, VfioScan **ret, char **error);

/*
 * The start-up scan of DEV-14: as vfio_scan, but on failure *error is the whole
 * placement_disabled_reason, `open-handle scan failed: <err>`.
 */
int vfio_scan_startup(const Root *proc_root, const char *dev_root, VfioScan **ret, char **error);

VfioScan *vfio_scan_free(VfioScan *s);
DEFINE_TRIVIAL_CLEANUP_FUNC(VfioScan *, vfio_scan_free);
#define _cleanup_vfio_scan_ __attribute__((cleanup(vfio_scan_freep)))

/*
 * Whether the absolute path (e.g. "/dev/vfio/12") is held open: 0 and the lowest holder pid
 * in *ret_pid (may be NULL), or -ENOENT.
 */
int vfio_scan_find_node(const VfioScan *s, const char *path, pid_t *ret_pid);

/* The lowest pid holding socket inode (VMM-18): 0 and *ret_pid, or -ENOENT. */
int vfio_scan_find_socket(const VfioScan *s, uint64_t inode, pid_t *ret_pid);

/* Distinct VFIO targets and socket inodes seen; the number of processes walked. */
size_t vfio_scan_n_nodes(const VfioScan *s);
size_t vfio_scan_n_sockets(const VfioScan *s);
size_t vfio_scan_n_processes(const VfioScan *s);

/*
 * "socket:[<inode>]" → inode: decimal digits without sign or leading zero, 1..UINT64_MAX,
 * nothing after "]". -EINVAL for a target that is not a socket, -EBADMSG for a malformed one.
 */
int vfio_parse_socket_link(const char *target, uint64_t *ret);

/*
 * The in-use probe of DEV-12/13 for a VF (sysfs "bus/pci/devices/<vf>") or an mdev
 * ("bus/mdev/devices/<uuid>"). Candidates are "<dev_root>/vfio/devices/<name>" for each entry
 * of the device's vfio-dev/ and "<dev_root>/vfio/<group>" for the basename of its iommu_group
 * link; a missing vfio-dev/ or iommu_group is no candidate.
 *
 * Returns 1 (in use; *ret_holder, which may be NULL, gets the lowest holder pid), 0 (not in
 * use) or -errno with *error naming the sysfs path that could not be read, several joined by
 * "; ". Callers add the DEV-9 prefix.
 */
int vfio_probe_vf(const VfioScan *s, const Root *sysfs, const char *vf, pid_t *ret_holder,
                  char **error);
int vfio_probe_mdev(const VfioScan *s, const Root *sysfs, const char *uuid, pid_t *ret_holder,
                    char **error);
