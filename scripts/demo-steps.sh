#!/bin/sh
# The demo's steps, run by demo.sh inside a private PID namespace with a mounted simulator at
# $VGPU_SIM_MOUNT (SIM-21, OPS-11). Usage: demo-steps.sh BUILD [GUEST_DIR QEMU]
#
# With GUEST_DIR (tests/e2e/build-guest.sh's tiny guest) and QEMU, a first vgpud runs the real
# QEMU under TCG and boots one VM without a GPU: its console, an ACPI stop, a delete that leaves
# nothing. Then a vgpud with fake-qemu as its VMM (the simulator's VFs cannot go to a real
# QEMU) places vGPU instances on the simulated host, and the operator side follows: the
# driver driven directly, quarantine, drain, metrics, restore. Every step prints the command it
# runs, so the demo doubles as a tour of the API. Whatever happens, vgpud and every VM are
# stopped and the work directory removed.
set -eu
build=$1
guest=${2:-}
qemu=${3:-}
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

if [ -n "$guest" ]; then
        say "A real VM first: vgpud runs QEMU (TCG) with a Debian kernel and a busybox initramfs"
        echo "image_dirs: $guest (INST-6: boot files must lie there); data and sockets under $work"
        write_config vm "$work/vm-data" "$qemu" "$guest"
        start_vgpud vm
        show "export VGPUD_TOKEN=\$(vgpuctl token mint --secret-file $work/jwt.secret --sub demo)"
        VGPUD_TOKEN=$(vgpuctl token mint --secret-file "$work/jwt.secret" --sub demo)
        export VGPUD_TOKEN
        echo "(a bearer token, HS256, valid 1h; vgpuctl reads it from VGPUD_TOKEN)"

        t0=$(date +%s%N)
        create --name tiny-vm --vcpus 1 --memory-mb 256 --kernel "$guest/vmlinuz" \
                --initrd "$guest/initramfs.cpio.gz" --cmdline "console=ttyS0"
        echo "(201 once QMP answers; the guest boots on: polling its console, 90 s at most)"
        i=0
        # Unanchored: a kernel message may cut into a line of the guest's init on the console.
        until vgpuctl --unix "$sock" instances console "$id" | grep -q 'vgpud-guest: ready'; do
                if [ "$i" -ge 450 ]; then
                        echo "the guest did not reach its init's ready line:" >&2
                        vgpuctl --unix "$sock" instances console "$id" | tail -n 20 >&2
                        exit 1
                fi
                sleep 0.2
                i=$((i + 1))
        done
        ms=$((($(date +%s%N) - t0) / 1000000))
        printf 'the guest reached its init %d.%d s after the create\n' $((ms / 1000)) \
                $((ms % 1000 / 100))
        ctl instances console "$id" | tr -d '\r' | sed -n '1,3p' | cut -c1-110
        echo "..."
        ctl instances console "$id" | tr -d '\r' | grep -E 'Run /init|vgpud-guest:'

        say "Stop it: QMP system_powerdown, the guest's acpid powers it off (no kill)"
        ctl instances stop "$id" | grep -E '^(id|name|state) '
        ctl instances console "$id" | tr -d '\r' | grep -E 'power button|reboot: Power down'

        say "Delete it: the record, its files, its sockets and its QEMU are gone"
        ctl instances delete "$id"
        ctl instances list
        run ls -A "$work/vm-data/instances" "$work/vm-run/instances"
        printf 'left behind: %s instance directories, %s runtime directories, %s qemu processes\n' \
                "$(count "$work/vm-data/instances")" "$(count "$work/vm-run/instances")" \
                "$(vmm_pids | wc -l)"
        stop_vgpud
fi

say "Start vgpud against the simulated host, fake-qemu as its VMM"
echo "(fake-qemu answers QMP like a VM that boots at once; a VF of the simulator cannot go to"
echo " a real QEMU)"
mkdir -p "$work/images"
echo "fake-qemu never reads this kernel" >"$work/images/vmlinuz"
write_config sim "$mnt/data" "$fake_qemu" "$work/images"
start_vgpud sim
if [ -z "${VGPUD_TOKEN:-}" ]; then
        show "export VGPUD_TOKEN=\$(vgpuctl token mint --secret-file $work/jwt.secret --sub demo)"
        VGPUD_TOKEN=$(vgpuctl token mint --secret-file "$work/jwt.secret" --sub demo)
        export VGPUD_TOKEN
fi

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
