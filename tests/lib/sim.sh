# SPDX-License-Identifier: GPL-2.0-or-later
#
# sim.sh: the shell side of running a program against vgpu-sim, sourced by the runner scripts
# (tests/integration/run-with-sim.sh, tests/sim/run-sim-test.sh) and by tests that drive the
# simulator themselves (tests/sim/test-sim-sigterm.sh).
#
#   sim_enter_namespace SCRIPT ARGS...  re-runs SCRIPT in a private PID namespace with its own
#                                       /proc and mount namespace (SIM-21) and network namespace
#                                       (REL-9), unless already in one; there, hides the host's
#                                       PCI devices and VFIO nodes and brings loopback up
#   sim_alive PID                       true while PID runs (a zombie has exited)
#   sim_poll COMMAND...                 runs COMMAND every 50 ms until it succeeds, 10 s at most
#   sim_mounted DIR                     true while DIR is a mount point
#   sim_start VGPU_SIM HOST DIR         mounts a fresh simulator of HOST at DIR (sim_pid) and
#                                       waits, bounded, until it answers
#   sim_stop [SIGNAL]                   SIGNAL (SIGTERM), 10 s for a clean exit, then SIGKILL;
#                                       returns the simulator's exit status
#   sim_unmount DIR                     unmounts DIR if it still is a mount point, removes it
#   sim_bind_tun DIR                    as root in the test's own network namespace, binds the
#                                       host's /dev/net/tun over the simulator's DIR/dev/net/tun,
#                                       so that vgpud's TAPs (NET-3) are real and live in that
#                                       namespace only (NET-11); a no-op otherwise
#   sim_run VGPU_SIM HOST PROGRAM...    all of it: mounts a simulator in a temporary directory,
#                                       runs PROGRAM with VGPU_SIM_MOUNT, VGPU_SIM_CONTROL and
#                                       VGPU_SIM_PID set, and always stops and unmounts it; the
#                                       status is PROGRAM's, or 1 when the simulator did not
#                                       exit cleanly (a sanitizer report counts)
#
# In the namespace, nothing started here outlives the run even if the script is killed: the
# namespace's init takes every process along, and the mount goes with the mount namespace.

sim_enter_namespace() {
        script=$1
        shift
        if [ -n "${VGPU_SIM_IN_NAMESPACE:-}" ]; then
                _sim_isolate
                return 0
        fi
        export VGPU_SIM_IN_NAMESPACE=1
        # REL-9: a network namespace of its own, loopback only, unless the caller needs the
        # host's network (VGPU_SIM_NETWORK=host: the end-to-end tests, whose first run fetches
        # the guest kernel with apt).
        _net=--net
        [ "${VGPU_SIM_NETWORK:-}" = host ] && _net=
        if [ "$(id -u)" -eq 0 ]; then
                exec unshare --pid --fork --kill-child --mount-proc $_net -- "$script" "$@"
        fi
        exec unshare --user --map-root-user --mount --pid --fork --kill-child --mount-proc \
                $_net -- "$script" "$@"
}

# REL-9, once, inside the namespace: loopback up in the private network namespace, and the
# host's real PCI devices, IOMMU groups, mdev parents and VFIO nodes hidden behind empty
# read-only tmpfs mounts of this mount namespace, so that a test that strayed from the
# simulator's roots finds nothing rather than the real hardware.
_sim_isolate() {
        [ -n "${VGPU_SIM_ISOLATED:-}" ] && return 0
        export VGPU_SIM_ISOLATED=1
        if [ "${VGPU_SIM_NETWORK:-}" != host ]; then
                ip link set lo up || {
                        echo "# REL-9: cannot bring up loopback in the test's network namespace" >&2
                        exit 1
                }
        fi
        for _d in /sys/bus/pci /sys/bus/mdev /sys/class/mdev_bus /sys/kernel/iommu_groups \
                /dev/vfio; do
                [ -d "$_d" ] || continue
                mount -t tmpfs -o ro,size=4k,mode=0555 vgpud-test-mask "$_d" || {
                        echo "# REL-9: cannot hide $_d from the test" >&2
                        exit 1
                }
        done
}

sim_alive() {
        [ -r "/proc/$1/stat" ] && ! grep -q '^[0-9]* ([^)]*) Z' "/proc/$1/stat" 2>/dev/null
}

sim_poll() {
        _i=0
        until "$@"; do
                [ "$_i" -ge 200 ] && return 1
                sleep 0.05
                _i=$((_i + 1))
        done
}

sim_mounted() {
        grep -q " $1 " /proc/self/mountinfo 2>/dev/null
}

sim_pid=

_sim_answers() { # DIR
        [ -e "$1/.sim/state.json" ] || ! sim_alive "$sim_pid"
}

sim_start() {
        "$1" --host "$2" --mount "$3" --foreground &
        sim_pid=$!
        if ! sim_poll _sim_answers "$3" || ! sim_alive "$sim_pid"; then
                echo "# vgpu-sim did not come up" >&2
                return 1
        fi
}

_sim_gone() {
        ! sim_alive "$sim_pid"
}

sim_stop() {
        [ -n "$sim_pid" ] || return 0
        kill -"${1:-TERM}" "$sim_pid" 2>/dev/null || true
        sim_poll _sim_gone || kill -KILL "$sim_pid" 2>/dev/null || true
        _st=0
        wait "$sim_pid" || _st=$?
        sim_pid=
        return "$_st"
}

_sim_tun_bound=

sim_bind_tun() {
        [ "$(id -u)" -eq 0 ] && [ "${VGPU_SIM_NETWORK:-}" != host ] && [ -c /dev/net/tun ] ||
                return 0
        mount --bind /dev/net/tun "$1/dev/net/tun" || {
                echo "# NET-11: cannot bind /dev/net/tun into the simulator's dev/" >&2
                return 1
        }
        _sim_tun_bound="$1/dev/net/tun"
}

# Before the simulator stops: a mount on top of its tree would keep it from unmounting cleanly.
_sim_unbind_tun() {
        [ -n "$_sim_tun_bound" ] || return 0
        umount "$_sim_tun_bound" 2>/dev/null || umount -l "$_sim_tun_bound" 2>/dev/null || true
        _sim_tun_bound=
}

sim_unmount() {
        _sim_unbind_tun
        if sim_mounted "$1"; then
                fusermount3 -u "$1" 2>/dev/null || umount -l "$1" 2>/dev/null || true
        fi
        rmdir "$1" 2>/dev/null || true
}

_sim_finish() {
        status=$?
        trap - EXIT INT TERM
        sim_status=0
        _sim_unbind_tun
        sim_stop || sim_status=$?
        if [ "$sim_status" -ne 0 ]; then
                echo "# vgpu-sim exited with status $sim_status" >&2
                [ "$status" -eq 0 ] && status=1
        fi
        sim_unmount "$_sim_dir"
        exit "$status"
}

sim_run() {
        if [ "$#" -lt 3 ]; then
                echo "usage: $0 VGPU_SIM HOST.yaml PROGRAM [ARGS...]" >&2
                exit 2
        fi
        _sim=$1
        _host=$2
        shift 2
        _sim_dir=$(mktemp -d "${TMPDIR:-/tmp}/vgpu-sim-test.XXXXXX")
        trap _sim_finish EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
        sim_start "$_sim" "$_host" "$_sim_dir" || exit 1
        sim_bind_tun "$_sim_dir" || exit 1
        export VGPU_SIM_MOUNT="$_sim_dir" VGPU_SIM_CONTROL="$_sim_dir/.sim" VGPU_SIM_PID="$sim_pid"
        set +e
        "$@"
        _rc=$?
        set -e
        exit "$_rc"
}
