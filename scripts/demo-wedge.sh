#!/bin/sh
# The demo's sentinel story, run by demo.sh inside a private PID namespace with a mounted
# simulator at $VGPU_SIM_MOUNT (SIM-21, OPS-11) on sim/hosts/demo-wedge.yaml: one L40S with a
# single VF enabled, so every VM lands on that VF. Usage: demo-wedge.sh BUILD
#
# The VF wedges. A first VM's guest agent reports the driver's init failure: one failure,
# below the threshold. The VM goes, a second one lands on the same VF and fails too: the
# sentinel quarantines the VF, placement drops it, the running VM is left alone. The VF is
# repaired, the VM deleted, the operator clears the record, and the slot is back.
set -eu
build=$1
# shellcheck source=scripts/demo-lib.sh
. "$(dirname "$0")/demo-lib.sh"

vf=0000:e3:00.4
profile="NVIDIA L40S-2Q"
log=$work/wedge.log

# sim_ctl COMMAND: the simulator's control file (SIM-14), shown as an operator types it.
sim_ctl() {
        show "echo '$1' > $VGPU_SIM_CONTROL/ctl"
        printf '%s' "$1" >"$VGPU_SIM_CONTROL/ctl"
}
# The sentinel's report lines, as vgpud logged them (log_level notice shows warnings and up).
sentinel_lines() { grep -E 'vGPU VF (init failure|quarantine)|wedged vGPU VF' "$log" || true; }
reports_are() { [ "$(sentinel_lines | wc -l)" -ge "$1" ]; }
vf_state() {
        vgpuctl --unix "$sock" --json gpus |
                json_field '[v["state"] for g in j["gpus"] for v in g["vfs"] if v["address"] == sys.argv[2]][0]' "$vf"
}
vf_state_is() { [ "$(vf_state)" = "$1" ]; }
show_reports() {
        show "grep -E 'vGPU VF (init failure|quarantine)|wedged vGPU VF' $log"
        sentinel_lines
}

say "A host with one VF enabled, and vgpud's sentinel asking every guest's agent each second"
run vgpud inventory --sysfs-root "$sys" | sed -n '1,4p' | cut -c1-100
head -c 48 /dev/urandom >"$work/jwt.secret"
chmod 600 "$work/jwt.secret"
VGPUD_TOKEN=$(vgpuctl token mint --secret-file "$work/jwt.secret" --sub demo)
export VGPUD_TOKEN
mkdir -p "$work/images"
echo "fake-qemu never reads this kernel" >"$work/images/vmlinuz"
gpu_extra='  sentinel_interval: 1s
'
write_config wedge "$mnt/data" "$fake_qemu" "$work/images"
grep -E '^  sentinel_' "$work/wedge.yaml"
start_vgpud wedge

say "The VF wedges: the driver inside the next guest on it fails to initialise"
sim_ctl "wedge $vf"
echo "(fake-qemu's guest agent answers guest-gpu-init-status from the simulator's wedged flag;"
echo " a real guest's vgpu-agent reads the kernel log for NVRM's RmInitAdapter failure)"

say "A first VM lands on it: its agent reports the failure, recorded below the threshold"
create_rows='^(id|name|state|device path) '
create --name wedged-1 --vcpus 2 --memory-mb 4096 --kernel "$work/images/vmlinuz" \
        --profile "$profile"
wait_for 300 "the sentinel recorded no failure" reports_are 1
show_reports
ctl health list

say "It goes; a second VM gets the same VF, and fails the same way: the VF is quarantined"
ctl instances delete "$id"
create --name wedged-2 --vcpus 2 --memory-mb 4096 --kernel "$work/images/vmlinuz" \
        --profile "$profile"
wait_for 300 "the sentinel did not quarantine the VF" vf_state_is quarantined
show_reports
ctl health list
echo "The VF has left placement; the VM on it keeps running (vgpud never tears a vGPU out):"
ctl resources | grep -E "slots|$profile"
ctl instances list
show "vgpuctl --unix $sock instances create --name refused-1 ... --profile '$profile'"
if vgpuctl --unix "$sock" instances create --name refused-1 --vcpus 2 --memory-mb 4096 \
        --kernel "$work/images/vmlinuz" --profile "$profile"; then
        echo "a create was placed on the quarantined host" >&2
        exit 1
fi

say "Repair: the VF is fixed, its VM deleted, the operator clears the record"
sim_ctl "unwedge $vf"
ctl instances delete "$id"
ctl health clear "$vf"
wait_for 300 "the VF did not come back to placement" vf_state_is free
ctl resources | grep -E "slots|$profile"
show "curl -s --unix-socket $sock -H 'Authorization: Bearer \$VGPUD_TOKEN' http://vgpud/metrics"
curl -s --unix-socket "$sock" -H "Authorization: Bearer $VGPUD_TOKEN" http://vgpud/metrics |
        grep -E '^vgpud_instances_vgpu_sentinel_(init_failures|quarantines)_total'
stop_vgpud
