#!/bin/sh
# The demo's steps, run by demo.sh with a mounted simulator at $VGPU_SIM_MOUNT.
set -eu
build=$1
mnt=$VGPU_SIM_MOUNT
sys=$mnt/sys
vgpud=$build/src/daemon/vgpud

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
run() { printf '$ %s\n' "$*"; "$@"; }

say "A simulated host: two NVIDIA L40S (vgpu-sim, a FUSE model of the driver's sysfs)"
printf '$ ls %s\n' "$sys/bus/pci/devices"
ls "$sys/bus/pci/devices" | head -n 4
echo "... ($(ls "$sys/bus/pci/devices" | wc -l) PCI functions)"

say "What discovery sees (vgpud inventory)"
printf '$ vgpud inventory --sysfs-root %s\n' "$sys"
"$vgpud" inventory --sysfs-root "$sys" | cut -c1-100 | sed -n '1,6p'
echo "..."

say "Configure one VF with NVIDIA L40S-4Q (type 1150) the way the driver is driven"
vf=0001:c8:00.4
run sh -c "echo 1150 > $sys/bus/pci/devices/$vf/nvidia/current_vgpu_type"
run cat "$sys/bus/pci/devices/$vf/nvidia/current_vgpu_type"
echo "Equal-size card: the other VFs now list only the 4 GiB types:"
run cat "$sys/bus/pci/devices/0001:c8:00.5/nvidia/creatable_vgpu_types"

say "The driver refuses a second size on an equal-size card (EINVAL)"
run sh -c "/bin/echo 1148 > $sys/bus/pci/devices/0001:c8:00.5/nvidia/current_vgpu_type" 2>&1 ||
        true

say "Release it again (write 0)"
run sh -c "echo 0 > $sys/bus/pci/devices/$vf/nvidia/current_vgpu_type"
printf '$ vgpud inventory --sysfs-root %s --json | (summary)\n' "$sys"
"$vgpud" inventory --sysfs-root "$sys" --json | python3 -c '
import json, sys
inv = json.load(sys.stdin)
for g in inv["gpus"]:
    configured = [v["address"] for v in g["vfs"] if v["state"] != "free"]
    print(g["address"], g["model"], len(g["vfs"]), "VFs,", len(configured), "configured")
'
