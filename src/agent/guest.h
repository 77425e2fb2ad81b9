/* SPDX-License-Identifier: GPL-2.0-or-later */
#pragma once

/*
 * guest: what the agent looks up in the guest's sysfs, under the --pci-root it was given
 * (GEN-1: no literal /sys here).
 *
 * Promises: bounded, strict reads of single-value sysfs files; nothing is written.
 */

#include "base/base.h"

#define AGENT_PORT_NAME "org.vgpud.agent.0"
#define NVIDIA_VENDOR "0x10de"

/*
 * AGENT-1's lookup without udev: the entry of <pci_root>/class/virtio-ports whose name file
 * reads AGENT_PORT_NAME (e.g. "vport0p1"), the alphabetically first if several do. *ret is
 * malloc'd. -ENOENT when there is none (or no virtio-ports directory yet), -ENOMEM.
 */
int guest_find_port_entry(const char *pci_root, char **ret);

/*
 * AGENT-3: 1 when some <pci_root>/bus/pci/devices/<dev>/vendor reads NVIDIA_VENDOR, 0 when
 * none does, -errno when the directory cannot be read.
 */
int guest_has_nvidia_device(const char *pci_root);
