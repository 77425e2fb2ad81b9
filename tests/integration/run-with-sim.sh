#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# run-with-sim.sh VGPU_SIM HOST.yaml PROGRAM [ARGS...]
#
# Runs PROGRAM against a freshly mounted vgpu-sim of HOST.yaml, with VGPU_SIM_MOUNT and
# VGPU_SIM_CONTROL set, and exits with PROGRAM's status. The script first re-runs itself in a
# private PID namespace with its own /proc and mount namespace (SIM-21), so the test sees only
# its own processes in /proc, and whatever happens, nothing it started outlives it: the
# namespace's init takes every process along, and the mount goes with the mount namespace. On
# the normal path it still stops the simulator and unmounts by itself, and a simulator that
# does not exit cleanly fails the run.
set -eu

if [ "$#" -lt 3 ]; then
        echo "usage: $0 VGPU_SIM HOST.yaml PROGRAM [ARGS...]" >&2
        exit 2
fi

if [ "${VGPU_RUN_WITH_SIM_INSIDE:-}" != 1 ]; then
        export VGPU_RUN_WITH_SIM_INSIDE=1
        if [ "$(id -u)" -eq 0 ]; then
                exec unshare --pid --fork --kill-child --mount-proc -- "$0" "$@"
        fi
        exec unshare --user --map-root-user --mount --pid --fork --kill-child --mount-proc \
                -- "$0" "$@"
fi

sim=$1
host=$2
shift 2

dir=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-device-test.XXXXXX")
sim_pid=

running() {
        # A zombie has exited even though kill -0 still reaches it.
        [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat"
}

finish() {
        status=$?
        trap - EXIT INT TERM
        if [ -n "$sim_pid" ]; then
                kill -TERM "$sim_pid" 2>/dev/null || true
                # Bounded: 10 s for a clean unmount, then SIGKILL.
                n=0
                while running "$sim_pid" && [ "$n" -lt 200 ]; do
                        sleep 0.05
                        n=$((n + 1))
                done
                running "$sim_pid" && kill -KILL "$sim_pid" 2>/dev/null
                sim_status=0
                wait "$sim_pid" || sim_status=$?
                if [ "$sim_status" -ne 0 ]; then
                        echo "# vgpu-sim exited with status $sim_status" >&2
                        [ "$status" -eq 0 ] && status=1
                fi
        fi
        if grep -q " $dir " /proc/self/mountinfo 2>/dev/null; then
                fusermount3 -u "$dir" 2>/dev/null || umount -l "$dir" 2>/dev/null || true
        fi
        rmdir "$dir" 2>/dev/null || true
        exit "$status"
}
trap finish EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$sim" --host "$host" --mount "$dir" --foreground &
sim_pid=$!

# Bounded wait for the mount to answer: 10 s.
n=0
while [ ! -e "$dir/.sim/state.json" ]; do
        if ! running "$sim_pid" || [ "$n" -ge 200 ]; then
                echo "# vgpu-sim did not come up" >&2
                exit 1
        fi
        sleep 0.05
        n=$((n + 1))
done

export VGPU_SIM_MOUNT="$dir" VGPU_SIM_CONTROL="$dir/.sim"
set +e
"$@"
rc=$?
set -e
exit "$rc"
