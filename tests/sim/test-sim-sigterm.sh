#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-sim-sigterm.sh VGPU_SIM HOST.yaml
#
# SIM-1: vgpu-sim unmounts cleanly and exits 0 on SIGTERM, even while a client holds a VFIO
# node open and another is stuck in a hung operation; and on SIGINT, although a shell starts
# background jobs with SIGINT ignored. Prints TAP. Runs in a private PID and
# mount namespace (SIM-21), so nothing outlives it.
set -eu
. "$(dirname "$0")/../lib/sim.sh"
sim_enter_namespace "$0" "$@"

sim=$1
host=$2
mnt=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-sim-sigterm.XXXXXX")
sim_pid=
reader_pid=

cleanup() {
        status=$?
        trap - EXIT
        exec 3<&- 2>/dev/null || true
        [ -n "$sim_pid" ] && kill -KILL "$sim_pid" 2>/dev/null || true
        [ -n "$reader_pid" ] && kill -KILL "$reader_pid" 2>/dev/null || true
        sim_unmount "$mnt"
        exit "$status"
}
trap cleanup EXIT

echo "1..7"
"$sim" --host "$host" --mount "$mnt" --foreground &
sim_pid=$!
if sim_poll test -e "$mnt/.sim/state.json"; then echo "ok 1 - mounted"; else echo "not ok 1 - mounted"; exit 1; fi

# A held VFIO node and a read that hangs until clear-faults, which never comes.
exec 3<"$mnt/dev/vfio/0"
printf 'fault read sys/module/nvidia/version hang' >"$mnt/.sim/ctl"
cat "$mnt/sys/module/nvidia/version" >/dev/null 2>&1 &
reader_pid=$!
hung() { grep -q '"operations_delayed": 1,' "$mnt/.sim/state.json"; }
if sim_poll hung; then echo "ok 2 - a read hangs"; else echo "not ok 2 - a read hangs"; fi

st=0
sim_stop TERM || st=$?
if [ "$st" -eq 0 ]; then echo "ok 3 - SIGTERM exits 0"; else echo "not ok 3 - SIGTERM exits 0 (status $st)"; fi
if ! sim_mounted "$mnt"; then echo "ok 4 - unmounted"; else echo "not ok 4 - unmounted"; fi
if sim_poll sh -c "! kill -0 $reader_pid 2>/dev/null || grep -q '^[0-9]* ([^)]*) Z' /proc/$reader_pid/stat"; then
        echo "ok 5 - the hung reader returned"
else
        echo "not ok 5 - the hung reader returned"
fi

# SIGINT, from a shell that starts its background jobs with SIGINT ignored.
"$sim" --host "$host" --mount "$mnt" --foreground &
sim_pid=$!
sim_poll test -e "$mnt/.sim/state.json" || true
st=0
sim_stop INT || st=$?
if [ "$st" -eq 0 ]; then echo "ok 6 - SIGINT exits 0"; else echo "not ok 6 - SIGINT exits 0 (status $st)"; fi
if ! sim_mounted "$mnt"; then echo "ok 7 - unmounted after SIGINT"; else echo "not ok 7 - unmounted after SIGINT"; fi
