#!/bin/sh
# SEED-8, OPS-11: `make demo` works: scripts/demo.sh runs to the end, and each of its steps
# shows what it promises: a real VM from the Debian image booted by QEMU under vgpud and reached
# by SSH, vGPU instances on the simulated host, the operator's tools, and nothing left behind.
# When the demo says it had no real VM (no QEMU or ssh, not root, no packages for the image),
# the real VM's checks are skipped.
# Usage: test-demo.sh SOURCE_ROOT BUILD_ROOT
set -u
out=$(sh "$1/scripts/demo.sh" "$2" 2>&1)
rc=$?
n=0
fail=0
no_vm=$(printf '%s\n' "$out" | sed -n 's/^(no real VM in this demo: \(.*\))$/\1/p' | head -n 1)
result() { # OK DESCRIPTION
        n=$((n + 1))
        if [ "$1" -eq 0 ]; then
                echo "ok $n - $2"
        else
                echo "not ok $n - $2"
                fail=1
        fi
}
check() { # DESCRIPTION PATTERN
        printf '%s\n' "$out" | grep -qE -- "$2"
        result $? "$1"
}
check_count() { # DESCRIPTION COUNT PATTERN: exactly COUNT lines match
        [ "$(printf '%s\n' "$out" | grep -cE -- "$3")" -eq "$2" ]
        result $? "$1"
}
check_vm() { # DESCRIPTION PATTERN: a check of the real VM, skipped when the demo had none
        if [ -n "$no_vm" ]; then
                n=$((n + 1))
                echo "ok $n - $1 # SKIP no real VM: $no_vm"
        else
                check "$1" "$2"
        fi
}
result "$rc" "OPS-11: the demo exits 0 (it exited $rc)"

check_vm "SEED-8: the image is built with a progress line, or reused" \
        '^build-image: (cached|\[1/[0-9]+\])'
check_vm "SEED-8: the image's time is printed" '^.*\[image: [0-9]+ s\]'
check_vm "SEED-8, OPS-11: a vgpud with the real QEMU as its VMM starts" '^\$ vgpud --config .*/vm\.yaml &$'
check_vm "SEED-8, DISK-2: the image is imported through the API" '^image debian-12: ready, [0-9]+ MiB virtual$'
check_vm "SEED-8, SEED-1: the VM is created Running in nat mode with the demo's key" \
        '^instance [a-z0-9]{20} debian-vm: Running, 10\.233\.0\.[0-9]+ on nat, seed with 1 key\(s\)$'
check_vm "SEED-8: the time to SSH is printed" '\[boot to SSH: [0-9]+\.[0-9] s\]'
check_vm "SEED-8, SEED-2: uname -a runs in the guest, whose host name is the instance's" \
        '^Linux debian-vm [0-9]+\.[0-9]+'
check_vm "SEED-8, DISK-5: lsblk in the guest shows the root disk" '^vda +[0-9]+:[0-9]+ '
check_vm "SEED-8, SEED-2: lsblk in the guest shows the seed's CD-ROM" '^sr0 +[0-9]+:[0-9]+ '
check_vm "SEED-8: each step's time is printed" '\[delete: [0-9]+\.[0-9] s\]'
check_vm "SEED-8, INST-20, DISK-4: the deletes leave no directory, image or qemu" \
        '^left behind: 0 instance directories, 0 images, 0 qemu processes$'

check "OPS-11: vgpud (fake-qemu) becomes ready" '"status":"ready"'
check "OPS-11: vgpuctl resources shows the 64 slots" 'total slots +64'
check "OPS-11: every command is printed, quoted as a shell reads it" \
        "^\\\$ vgpuctl .* instances create --name render-01 .* --profile 'NVIDIA L40S-2Q'\$"
check_count "OPS-11, INST-12: three vGPU instances are listed Running with their VFs" 3 \
        '^[a-z0-9]{20} +render-0[1-3] +Running +4 +8192 MiB +NVIDIA L40S-2Q +[0-9a-f]{4}:'
check_count "OPS-11, API-6: vgpuctl gpus shows their VFs claimed" 3 \
        '^  [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] +claimed +.* [a-z0-9]{20} '
check "OPS-11, API-5: /resources counts the three claims" '^used slots +3$'
check "OPS-11, INST-15: a stopped instance gives its slot back" '^used slots +2$'
check "OPS-11, INST-18: after the deletes no instance is listed" '^no instances$'
check "SEED-8: the whole demo's time is printed" '\[the whole demo: [0-9]+ s\]'
check "OPS-11, INST-18: nothing is left: no record, no claimed VF, no fake-qemu" \
        '^left behind: 0 instances, 0 claimed VFs, 0 fake-qemu processes$'

check "OPS-11: the four driver-made vGPUs show as dirty VFs" '0001:c8:00\.4 +dirty +NVIDIA L40S-4Q'
check "OPS-11: a drained GPU's VFs are quarantined slots" 'quarantined slots +32'
check "OPS-11, HEALTH-26: metrics count the one quarantined record, not the drain" 'vgpud_instances_vgpu_quarantined_vfs 1$'
check "OPS-11, HEALTH-26: vgpuctl gpus shows the drain" 'drained since .*: maintenance: SR-IOV cycle'
check "OPS-11, HEALTH-25, HEALTH-26: the drain leaves the VF's own quarantine and reason" 'after the drain, 0000:e3:00.4 keeps: .*operator.*guest reported RmInitAdapter failed'
check "OPS-11, HEALTH-26: clear-gpu deletes the GPU's VF records" 'cleared the VF records of GPU 0000:e3:00.0'
check "OPS-11, HEALTH-26: undrain lifts the mark" 'undrained GPU 0000:e3:00.0'
check "OPS-11: restoring leaves no health record" 'no health records'
# The sentinel's story on the one-VF host (SENT-8, HEALTH-12, SENT-11: only the agent counts).
check "OPS-11, SENT-8: the first VM's failure is recorded below the threshold" \
        '^<4>recorded vGPU VF init failure below quarantine threshold vf=0000:e3:00\.4 .*failures=1 threshold=2$'
check "OPS-11, SENT-8, HEALTH-12: the second VM on the VF quarantines it" \
        '^<3>quarantined wedged vGPU VF vf=0000:e3:00\.4 instance_id=[a-z0-9]{20} message="NVRM: GPU 0000:e3:00\.4: RmInitAdapter failed! .*" failures=2 threshold=2$'
check "OPS-11, HEALTH-12: vgpuctl health list shows the automatic quarantine" \
        '^0000:e3:00\.4 +0000:e3:00\.0 +yes +2 +[0-9T:.-]+Z +auto +NVRM: GPU 0000:e3:00\.4: RmInitAdapter failed!'
check "OPS-11, API-5: /resources counts the quarantined VF, nothing is allocatable" \
        '^allocatable slots +0$'
check "OPS-11, HEALTH-24: the VM on the quarantined VF keeps running" \
        '^[a-z0-9]{20} +wedged-2 +Running '
check "OPS-11, PLACE-3: a create while the only VF is quarantined is refused 409" \
        '^error: insufficient_resources: .*\(HTTP 409\)$'
check "OPS-11, HEALTH-25: once cleared, the VF is allocatable again" '^allocatable slots +1$'
check "OPS-11, MET-2: the sentinel counts two init failures" \
        '^vgpud_instances_vgpu_sentinel_init_failures_total 2$'
check "OPS-11, MET-2: ... and one quarantine" '^vgpud_instances_vgpu_sentinel_quarantines_total 1$'
check_count "OPS-11: each vgpud exits 0 on SIGTERM" "$([ -n "$no_vm" ] && echo 2 || echo 3)" \
        '^vgpud exited 0$'
check "OPS-11: the mdev host is discovered" 'framework: mdev'

# The work directory the demo named is gone (the simulators' mounts go with their namespaces).
work=$(printf '%s\n' "$out" | sed -n 's/^\$ vgpud --config \(.*\)\/sim\.yaml &$/\1/p' | head -n 1)
[ -n "$work" ] && [ ! -e "$work" ]
result $? "OPS-11: the demo removes its work directory (${work:-not named})"

echo "1..$n"
[ "$fail" -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
exit $fail
