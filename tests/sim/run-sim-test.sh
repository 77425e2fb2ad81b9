#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# run-sim-test.sh VGPU_SIM HOST.yaml PROGRAM [ARGS...]
#
# Mounts a fresh vgpu-sim for HOST.yaml in a temporary directory, runs PROGRAM against it with
# VGPU_SIM_MOUNT, VGPU_SIM_CONTROL and VGPU_SIM_PID set, and always stops the simulator and
# unmounts it, whatever PROGRAM does. Everything runs in a private PID namespace with its own
# /proc and mount namespace (SIM-21), so nothing outlives the test even if this script is
# killed: the namespace's init takes every process with it, and the mount goes with the
# namespace. PROGRAM's exit status is the script's.
set -eu

if [ "$#" -lt 3 ]; then
        echo "usage: $0 VGPU_SIM HOST.yaml PROGRAM [ARGS...]" >&2
        exit 2
fi

if [ -z "${VGPU_SIM_IN_NAMESPACE:-}" ]; then
        export VGPU_SIM_IN_NAMESPACE=1
        if [ "$(id -u)" -eq 0 ]; then
                exec unshare --pid --fork --kill-child --mount-proc -- "$0" "$@"
        fi
        exec unshare --user --map-root-user --mount --pid --fork --kill-child --mount-proc -- "$0" "$@"
fi

sim=$1
host=$2
shift 2

mnt=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-sim-test.XXXXXX")
sim_pid=

# True while the process runs (a zombie has exited; kill -0 would still succeed on it).
sim_alive() {
        [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null
}

# Sends SIGTERM and waits for the simulator; a watchdog kills it after 10 s. Returns its
# exit status.
stop_sim() {
        kill -TERM "$1" 2>/dev/null || true
        (
                i=0
                while sim_alive "$1" && [ "$i" -lt 200 ]; do
                        sleep 0.05
                        i=$((i + 1))
                done
                kill -KILL "$1" 2>/dev/null
        ) &
        watchdog=$!
        set +e
        wait "$1"
        st=$?
        set -e
        kill "$watchdog" 2>/dev/null || true
        wait "$watchdog" 2>/dev/null || true
        return "$st"
}

cleanup() {
        status=$?
        trap - EXIT INT TERM
        if [ -n "$sim_pid" ]; then
                # A simulator that does not stop cleanly (or that a sanitizer flagged) fails
                # the test even when every check passed.
                sim_status=0
                stop_sim "$sim_pid" || sim_status=$?
                if [ "$sim_status" -ne 0 ]; then
                        echo "# vgpu-sim exited with status $sim_status" >&2
                        [ "$status" -eq 0 ] && status=1
                fi
        fi
        if grep -q " $mnt " /proc/self/mountinfo 2>/dev/null; then
                fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
        fi
        rmdir "$mnt" 2>/dev/null || true
        exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$sim" --host "$host" --mount "$mnt" --foreground &
sim_pid=$!

# Bounded wait for the mount: up to 10 s.
i=0
until [ -e "$mnt/.sim/state.json" ]; do
        if ! sim_alive "$sim_pid" || [ "$i" -ge 200 ]; then
                echo "# vgpu-sim did not come up" >&2
                exit 1
        fi
        sleep 0.05
        i=$((i + 1))
done

export VGPU_SIM_MOUNT="$mnt" VGPU_SIM_CONTROL="$mnt/.sim" VGPU_SIM_PID="$sim_pid"
set +e
"$@"
rc=$?
set -e
exit "$rc"
