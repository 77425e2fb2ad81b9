#!/bin/sh
# The demo's steps, run by demo.sh inside a private PID namespace with a mounted simulator at
# $VGPU_SIM_MOUNT (SIM-21, OPS-11). Usage: demo-steps.sh BUILD
#
# After the real VM of demo-vm.sh (SEED-8), a vgpud with fake-qemu as its VMM (the simulator's
# VFs cannot go to a real QEMU) places vGPU instances on the simulated host, and the operator
# side follows: the driver driven directly, quarantine, drain, metrics, restore. Every step prints the command it
# runs, so the demo doubles as a tour of the API. Whatever happens, vgpud and every VM are
# stopped and the work directory removed.
set -eu
build=$1
# shellcheck source=scripts/demo-lib.sh
. "$(dirname "$0")/demo-lib.sh"

# hold_nodes / drop_nodes: descriptors 5..8 on the four VFs' VFIO group nodes, as a VMM that
# vgpud does not manage would hold them; vgpud's reconcile pass leaves a dirty VF that is held
# open alone (REC-6) and resets one that is not.
hold_nodes() {
        show "exec 5<$mnt/dev/vfio/<group of 0001:c8:00.4> ... 8<...   # held by a VMM of someone else"
        n=5
        for vf in 0001:c8:00.4 0001:c8:00.5 0001:c8:00.6 0001:c8:00.7; do
                group=$(basename "$(readlink "$sys/bus/pci/devices/$vf/iommu_group")")
                eval "exec $n<\"\$mnt/dev/vfio/\$group\""
                n=$((n + 1))
        done
}
drop_nodes() {
        show "exec 5<&- 6<&- 7<&- 8<&-"
        exec 5<&- 6<&- 7<&- 8<&-
}
# set_types TYPE: the driver's own interface, behind vgpud's back: TYPE into current_vgpu_type
# of four VFs of the equal-size card (0 releases them).
set_types() {
        show "for vf in 0001:c8:00.4 0001:c8:00.5 0001:c8:00.6 0001:c8:00.7; do" \
                "echo $1 > $sys/bus/pci/devices/\$vf/nvidia/current_vgpu_type; done"
        for vf in 0001:c8:00.4 0001:c8:00.5 0001:c8:00.6 0001:c8:00.7; do
                echo "$1" >"$sys/bus/pci/devices/$vf/nvidia/current_vgpu_type"
        done
}

say "A simulated host: two NVIDIA L40S, 0000:e3:00.0 in mixed-size mode, 0001:c8:00.0 equal-size"
echo "vgpu-sim mounts a model of the driver's sysfs, /dev/vfio and a fake libnvidia-ml at $mnt"
echo "(vgpud and vgpuctl are the ones in $build, on PATH)"
run vgpud inventory --sysfs-root "$sys" | cut -c1-100 | sed -n '1,4p'
echo "..."

head -c 48 /dev/urandom >"$work/jwt.secret"
chmod 600 "$work/jwt.secret"

say "Start vgpud against the simulated host, fake-qemu as its VMM"
echo "(fake-qemu answers QMP like a VM that boots at once; a VF of the simulator cannot go to"
echo " a real QEMU)"
mkdir -p "$work/images"
echo "fake-qemu never reads this kernel" >"$work/images/vmlinuz"
write_config sim "$mnt/data" "$fake_qemu" "$work/images"
start_vgpud sim
show "export VGPUD_TOKEN=\$(vgpuctl token mint --secret-file $work/jwt.secret --sub demo)"
VGPUD_TOKEN=$(vgpuctl token mint --secret-file "$work/jwt.secret" --sub demo)
export VGPUD_TOKEN

say "Capacity: every profile and how many vGPUs of it the host can place now"
ctl resources | sed -n '1,12p'
echo "..."

profile="NVIDIA L40S-2Q"
ctl resources | grep -E "^used slots|$profile"
initial=$(figures "$profile")

say "Three vGPU instances: vgpud claims a VF for each, configures it and starts the VMM"
ids=
create_rows='^(id|name|state|profile|device path) '
for n in 1 2 3; do
        create --name "render-0$n" --vcpus 4 --memory-mb 8192 --kernel "$work/images/vmlinuz" \
                --profile "$profile"
        ids="$ids $id"
done
ctl instances list
ctl gpus | grep -E '^GPU|claimed'
echo "Three slots fewer:"
ctl resources | grep -E "slots|$profile"

# shellcheck disable=SC2086 # the ids are words
set -- $ids
say "Stop one: its VF is released (the instance stays, Stopped)"
ctl instances stop "$1" | grep -E '^(id|name|state|profile|device path) '
wait_for 200 "the stopped instance's slot did not come back" used_slots_are 2
ctl resources | grep -E "^used slots|$profile"

say "Delete all three"
for id in $ids; do
        ctl instances delete "$id"
done
ctl instances list
wait_figures "$profile" "$initial"
ctl resources | grep -E "^used slots|$profile"
printf 'left behind: %s instances, %s claimed VFs, %s fake-qemu processes\n' \
        "$(count "$mnt/data/instances")" "$(claimed_vfs)" "$(vmm_pids | wc -l)"

say "The driver is driven directly: four 4Q vGPUs on the equal-size card, held by a VMM vgpud does not run"
hold_nodes
set_types 1150
echo "(vgpud sees them at its next pass: dirty VFs, held open, so it leaves them alone)"
wait_for 300 "vgpud did not pick up the change" used_slots_are 4
ctl gpus | grep -E '^GPU|0001:c8:00\.[4-7]' | head -n 8

say "An operator quarantines a VF that keeps failing, and drains a whole GPU"
ctl health quarantine 0000:e3:00.4 --reason "guest reported RmInitAdapter failed"
ctl health drain 0000:e3:00.0 --reason "maintenance: SR-IOV cycle" | head -n 6
echo "... (the GPU is drained: all its VFs leave placement, their records stay as they were)"
ctl gpus | grep -E '^GPU 0000:e3|drained since'
printf 'after the drain, 0000:e3:00.4 keeps: %s\n' "$(ctl health list | grep '^0000:e3:00\.4')"
echo "Only the equal-size card remains; it holds 4 GiB vGPUs, so only 4 GiB profiles fit:"
ctl resources | grep -E 'slots|PROFILE|L40S-4[QA]'

say "The same facts in Prometheus metrics"
show "curl -s --unix-socket $sock -H 'Authorization: Bearer \$VGPUD_TOKEN' http://vgpud/metrics"
curl -s --unix-socket "$sock" -H "Authorization: Bearer $VGPUD_TOKEN" \
        http://vgpud/metrics | grep -E '^vgpud_(resources_gpu_slots|instances_vgpu_quarantined_vfs)'

say "Restore: after a recovery, clear the GPU's VF records, undrain it; the four vGPUs' VMM goes away"
ctl health clear-gpu 0000:e3:00.0
ctl health undrain 0000:e3:00.0
drop_nodes
echo "(nothing holds the four dirty VFs now: vgpud's next reconcile pass resets them)"
wait_for 300 "vgpud did not reset the dirty VFs" used_slots_are 0
ctl health list

say "Stop vgpud (SIGTERM): it exits 0 and leaves running VMs alone"
stop_vgpud
