#!/bin/sh
# The runbook covers what OPS-9 and OPS-10 require of it, and every vgpuctl command it shows
# is one vgpuctl accepts (so the runbook cannot drift from the client).
# Usage: test-runbook.sh RUNBOOK.md VGPUCTL
set -u
runbook=$1
vgpuctl=$2
n=0
fail=0

check() { # DESCRIPTION FIXED-STRING
        n=$((n + 1))
        if grep -qF -- "$2" "$runbook"; then
                echo "ok $n - $1"
        else
                echo "not ok $n - $1: no \"$2\""
                fail=1
        fi
}

check "OPS-9: confirming a wedge by booting the profile on another VF" "another VF"
check "OPS-9: draining a GPU" "vgpuctl health drain"
check "OPS-9: recovery stops DCGM and vgpud first" "systemctl stop nvidia-dcgm-exporter nvidia-dcgm vgpud"
check "OPS-9: recovery stops nvidia-persistenced where present" "nvidia-persistenced"
check "OPS-9: SR-IOV disable" "sriov-manage -d"
check "OPS-9: SR-IOV enable" "sriov-manage -e"
check "OPS-9: mixed-size mode re-enabled before vgpud starts" "nvidia-smi vgpu -shm 1"
check "OPS-9: clearing a recovered GPU's records" "vgpuctl health clear-gpu"
check "OPS-9, HEALTH-26: then lifting the drain" "vgpuctl health undrain"
check "OPS-9: handling an open breaker" "vgpuctl health breaker-reset"
check "OPS-9: alerting on the init-failure counter" "vgpud_instances_vgpu_sentinel_init_failures_total"
check "OPS-9: alerting on the breaker gauge" "vgpud_instances_vgpu_quarantine_breaker_open"
check "OPS-10: NVML sessions block sriov-manage" "Cannot obtain unbindLock"
check "OPS-10: never unbind a VF" "unbind"
check "OPS-10: TLS proxy or loopback for listen" "TLS"
check "OPS-10: image_dirs owned by root" "image_dirs"

# Every "vgpuctl <command>" line in a code block must parse: vgpuctl --help lists the commands.
help=$("$vgpuctl" --help 2>&1)
for cmd in $(grep -oE 'vgpuctl (health [a-z-]+|resources|gpus|token mint)' "$runbook" | sort -u |
        sed 's/^vgpuctl //; s/ /_/g'); do
        words=$(echo "$cmd" | tr '_' ' ')
        n=$((n + 1))
        if printf '%s\n' "$help" | grep -qF -- "$words"; then
                echo "ok $n - OPS-7: runbook command \"vgpuctl $words\" exists"
        else
                echo "not ok $n - OPS-7: runbook shows \"vgpuctl $words\", which vgpuctl does not have"
                fail=1
        fi
done
echo "1..$n"
exit $fail
