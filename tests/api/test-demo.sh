#!/bin/sh
# OPS-11: `make demo` works: scripts/demo.sh runs to the end against the simulator, and each of
# its steps shows what it promises. Usage: test-demo.sh SOURCE_ROOT BUILD_ROOT
set -u
out=$(sh "$1/scripts/demo.sh" "$2" 2>&1)
rc=$?
n=0
fail=0
check() { # DESCRIPTION PATTERN
        n=$((n + 1))
        if printf '%s\n' "$out" | grep -qE -- "$2"; then
                echo "ok $n - $1"
        else
                echo "not ok $n - $1"
                fail=1
        fi
}
n=$((n + 1))
if [ "$rc" -eq 0 ]; then echo "ok $n - OPS-11: the demo exits 0"; else
        echo "not ok $n - OPS-11: the demo exits $rc"
        fail=1
fi
check "OPS-11: vgpud becomes ready" '"status":"ready"'
check "OPS-11: vgpuctl resources shows the 64 slots" 'total slots +64'
check "OPS-11: the four driver-made vGPUs show as dirty VFs" '0001:c8:00\.4 +dirty +NVIDIA L40S-4Q'
check "OPS-11: a drained GPU's VFs are quarantined slots" 'quarantined slots +32'
check "OPS-11, HEALTH-26: metrics count the one quarantined record, not the drain" 'vgpud_instances_vgpu_quarantined_vfs 1$'
check "OPS-11, HEALTH-26: vgpuctl gpus shows the drain" 'drained since .*: maintenance: SR-IOV cycle'
check "OPS-11, HEALTH-25, HEALTH-26: the drain leaves the VF's own quarantine and reason" 'after the drain, 0000:e3:00.4 keeps: .*operator.*guest reported RmInitAdapter failed'
check "OPS-11, HEALTH-26: clear-gpu deletes the GPU's VF records" 'cleared the VF records of GPU 0000:e3:00.0'
check "OPS-11, HEALTH-26: undrain lifts the mark" 'undrained GPU 0000:e3:00.0'
check "OPS-11: restoring leaves no health record" 'no health records'
check "OPS-11: vgpud exits 0 on SIGTERM" 'vgpud exited 0'
check "OPS-11: the mdev host is discovered" 'framework: mdev'
echo "1..$n"
[ "$fail" -eq 0 ] || printf '%s\n' "$out" | sed 's/^/# /'
exit $fail
