/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * From an instance record to the QEMU command as data (decision 12, VMM-1). Pure: no file is
 * opened and nothing is allocated, so the golden tests (tests/data/golden/vmm/<case>.json ->
 * <case>.txt) pin exactly what a start spawns: the drives, the seed and the NIC come from what
 * the record says the instance owns.
 */
#include "instances/instance-internal.h"

/* The boot file a record names must be the one this operation opened (INST-6), and only it. */
static int check_boot_file(const char *field, const char *path, int fd, char **error)
{
        if (path && fd < 0)
                return error_set(error, -EINVAL, "QEMU command line: %s is not open", field);
        if (!path && fd >= 0)
                return error_set(error, -EINVAL,
                                 "QEMU command line: %s is open but not in the record", field);
        return 0;
}

/* NET-3: a nat or bridge record has exactly one NIC, on the TAP its start opened. */
static int add_nic(VmmCommand *c, const InstanceRecord *rec, const InstanceNicFiles *nic,
                   char **error)
{
        bool wanted = rec->network.mode == INSTANCE_NETWORK_NAT ||
                      rec->network.mode == INSTANCE_NETWORK_BRIDGE;
        bool open = nic && nic->tap >= 0;
        if (!wanted && open)
                return error_set(error, -EINVAL,
                                 "QEMU command line: a TAP is open but the record has no NIC");
        if (!wanted)
                return 0;
        if (!open)
                return error_set(error, -EINVAL, "QEMU command line: network: TAP is not open");
        if (!rec->network.mac)
                return error_set(error, -EINVAL, "QEMU command line: network.mac is missing");
        int r = vmm_command_add_nic(c, &(VmmNic){.id = "net0",
                                                 .tap_fd = nic->tap,
                                                 .vhost_fd = nic->vhost,
                                                 .mac = rec->network.mac});
        if (r < 0)
                return error_set(error, r, "QEMU command line: %s", strerror(-r));
        return 0;
}

VmmDrive instance_volume_drive(const InstanceVolume *v, const char *node, int fd, bool direct)
{
        return (VmmDrive){.node_name = node,
                          .format = VMM_DRIVE_QCOW2,
                          .read_only = v->readonly,
                          .fd = fd,
                          .cache_direct = direct,
                          .discard_unmap = !v->readonly,
                          .detect_zeroes_unmap = !v->readonly,
                          .device = VMM_DRIVE_VIRTIO_BLK,
                          .serial = v->id};
}

int instance_command_build(const InstanceRecord *rec, const Config *config,
                           const InstanceCommandPaths *paths, const InstanceBootFiles *files,
                           const InstanceNicFiles *nic, VmmCommand *ret, char **error)
{
        int r = check_boot_file("boot.kernel", rec->boot.kernel, files->kernel, error);
        if (r >= 0)
                r = check_boot_file("boot.initrd", rec->boot.initrd, files->initrd, error);
        if (r >= 0)
                r = check_boot_file("boot.disk", rec->boot.disk, files->disk, error);
        if (r < 0)
                return r;

        VmmCommand c = vmm_command_init();
        c.qemu_binary = config->qemu_binary;
        c.accel = config->qemu_accel;
        c.name = rec->name;
        c.vcpus = rec->vcpus;
        c.memory_mb = rec->memory_mb;
        /* DISK-8: a port for every volume the instance may come to hold while it runs. */
        _Static_assert(INSTANCE_VOLUMES_MAX <= VMM_HOTPLUG_PORTS_MAX, "a port per volume");
        c.n_hotplug_ports = INSTANCE_VOLUMES_MAX;
        r = vmm_command_set_channels(&c, paths->qmp_socket, paths->agent_socket,
                                     paths->console_socket, paths->console_log);
        if (r < 0)
                return error_set(error, r, "QEMU command line: %s", strerror(-r));

        c.kernel_fd = files->kernel;
        c.initrd_fd = files->initrd;
        c.cmdline = rec->boot.cmdline;

        /* DISK-5, DISK-9: the root overlay, qcow2 over its descriptor, the first boot device. */
        if (rec->disk.image && files->root < 0)
                return error_set(error, -EINVAL, "QEMU command line: the root disk is not open");
        if (rec->disk.image) {
                r = vmm_command_add_drive(&c, &(VmmDrive){.node_name = "root",
                                                          .format = VMM_DRIVE_QCOW2,
                                                          .fd = files->root,
                                                          .cache_direct = files->root_direct,
                                                          .discard_unmap = true,
                                                          .detect_zeroes_unmap = true,
                                                          .device = VMM_DRIVE_VIRTIO_BLK,
                                                          .bootindex = 1});
                if (r < 0)
                        return error_set(error, r, "QEMU command line: %s", strerror(-r));
        }

        /* DISK-8, DISK-9: each attached volume, qcow2 over its descriptor, its id as serial. */
        if (files->n_volumes != rec->n_volumes)
                return error_set(error, -EINVAL,
                                 "QEMU command line: %zu volumes open, %zu in the record",
                                 files->n_volumes, rec->n_volumes);
        for (size_t k = 0; k < rec->n_volumes; k++) {
                const InstanceVolume *v = &rec->volumes[k];
                const char *node = files->volume_nodes[k];
                if (!startswith(node, "vol-") || !streq(node + 4, v->id))
                        return error_set(error, -EINVAL,
                                         "QEMU command line: volume %s is not the one open", v->id);
                VmmDrive d =
                    instance_volume_drive(v, node, files->volumes[k], files->volumes_direct);
                /* DISK-8: on a port of its own, so that a running VM can let it go. */
                d.bus = vmm_hotplug_port(k);
                r = vmm_command_add_drive(&c, &d);
                if (r < 0)
                        return error_set(error, r, "QEMU command line: %s", strerror(-r));
        }

        /* DISK-6: boot.disk raw and read-only, shared by every VM that names it. */
        if (files->disk >= 0) {
                r = vmm_command_add_drive(&c, &(VmmDrive){.node_name = "bootdisk",
                                                          .format = VMM_DRIVE_RAW,
                                                          .read_only = true,
                                                          .fd = files->disk,
                                                          .device = VMM_DRIVE_VIRTIO_BLK});
                if (r < 0)
                        return error_set(error, r, "QEMU command line: %s", strerror(-r));
        }

        /* SEED-2: the NoCloud seed, raw and read-only, on the AHCI bus as a CD-ROM, so that
         * Linux and Windows guests find it. */
        bool seed = instance_record_wants_seed(rec);
        if (seed && files->seed < 0)
                return error_set(error, -EINVAL, "QEMU command line: the seed is not open");
        if (!seed && files->seed >= 0)
                return error_set(error, -EINVAL,
                                 "QEMU command line: a seed is open but the record wants none");
        if (seed) {
                r = vmm_command_add_drive(&c, &(VmmDrive){.node_name = "seed",
                                                          .format = VMM_DRIVE_RAW,
                                                          .read_only = true,
                                                          .fd = files->seed,
                                                          .device = VMM_DRIVE_IDE_CD,
                                                          .bus = "ide.1"});
                if (r < 0)
                        return error_set(error, r, "QEMU command line: %s", strerror(-r));
        }

        r = add_nic(&c, rec, nic, error);
        if (r < 0)
                return r;

        c.vfio_sysfsdev = rec->gpu.device_path;
        *ret = c;
        return 0;
}
