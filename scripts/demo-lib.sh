#!/bin/sh
# The demo's shared steps, sourced by demo-steps.sh and demo-wedge.sh inside demo.sh's private
# PID namespace with a mounted simulator at $VGPU_SIM_MOUNT (SIM-21, OPS-11); $build must be
# set. It makes the work directory, stops vgpud and every VM of the demo on exit, and gives
# the helpers that print each command before running it, so that the demo doubles as a tour of
# the API.
# shellcheck disable=SC2034,SC2154 # the sourcing script sets $build and uses these
mnt=$VGPU_SIM_MOUNT
sys=$mnt/sys
fake_qemu=$build/sim/fake-qemu
nvml=$(find "$build/sim" -maxdepth 1 -name 'libnvidia-ml.so*' | head -n 1)
# vgpud and vgpuctl by name, as an operator would type them.
PATH=$build/src/daemon:$build/src/ctl:$PATH
export PATH

work=$(mktemp -d "${TMPDIR:-/tmp}/vgpud-demo.XXXXXX")
vgpud_pid=
cleanup() {
        status=$?
        if [ -n "$vgpud_pid" ]; then
                kill -TERM "$vgpud_pid" 2>/dev/null || true
                wait "$vgpud_pid" 2>/dev/null || true
        fi
        # A vgpud stopped by SIGTERM leaves its VMs running (OPS-3): end those of this demo.
        for pid in $(vmm_pids); do
                kill -KILL "$pid" 2>/dev/null || true
        done
        rm -rf "$work"
        exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bold=$(printf '\033[1m') plain=$(printf '\033[0m')
say() { printf '\n%s== %s%s\n' "$bold" "$*" "$plain"; }
# Words as a shell reads them back: those with blanks or shell characters in single quotes.
quote() {
        q=
        for w in "$@"; do
                case $w in
                "" | *[!A-Za-z0-9_./:=@%+,-]*)
                        w="'$(printf '%s' "$w" | sed "s/'/'\\\\''/g")'"
                        ;;
                esac
                q="$q${q:+ }$w"
        done
        printf '%s' "$q"
}
# The command goes to the terminal (fd 3) before it runs, so a pipe after it filters only
# its output.
exec 3>&1
show() { printf '$ %s\n' "$*" >&3; }
run() {
        show "$(quote "$@")"
        "$@"
}
ctl() { run vgpuctl --unix "$sock" "$@"; }

# The pids of the VMMs (QEMU or fake-qemu) whose argv names this demo's work directory.
vmm_pids() {
        for f in /proc/[0-9]*/cmdline; do
                exe=$(tr '\0' '\n' <"$f" 2>/dev/null | head -n 1)
                case ${exe##*/} in
                qemu-system-* | fake-qemu) ;;
                *) continue ;;
                esac
                tr '\0' '\n' <"$f" 2>/dev/null | grep -qF "$work/" || continue
                pid=${f#/proc/}
                echo "${pid%/cmdline}"
        done
}

# start_vgpud NAME: vgpud with $work/NAME.yaml on $work/NAME.sock, then a bounded wait (20 s)
# until its first reconcile pass is done (/readyz answers 200).
start_vgpud() {
        sock=$work/$1.sock
        show "vgpud --config $work/$1.yaml &"
        VGPU_SIM_CONTROL=$VGPU_SIM_CONTROL vgpud --config "$work/$1.yaml" 2>"$work/$1.log" &
        vgpud_pid=$!
        i=0
        until curl -sf --unix-socket "$sock" http://vgpud/readyz >/dev/null 2>&1; do
                if [ "$i" -ge 400 ] || ! kill -0 "$vgpud_pid" 2>/dev/null; then
                        echo "vgpud did not become ready:" >&2
                        cat "$work/$1.log" >&2
                        exit 1
                fi
                sleep 0.05
                i=$((i + 1))
        done
        run curl -s --unix-socket "$sock" http://vgpud/readyz
        echo
}

stop_vgpud() {
        show "kill -TERM $vgpud_pid"
        kill -TERM "$vgpud_pid"
        wait "$vgpud_pid" && echo "vgpud exited 0"
        vgpud_pid=
}

# write_config NAME DATA_DIR QEMU_BINARY IMAGE_DIR...; $gpu_extra, if set, is more YAML lines
# of the gpu section, each indented by two spaces.
write_config() {
        name=$1 data=$2 binary=$3
        shift 3
        mkdir -p "$work/$name-run" "$data"
        {
                cat <<YAML
listen: ""
unix_socket: "$work/$name.sock"
jwt_secret_file: "$work/jwt.secret"
data_dir: "$data"
runtime_dir: "$work/$name-run"
sysfs_root: "$sys"
dev_root: "$mnt/dev"
nvml_library: "$nvml"
log_level: notice
qemu_binary: "$binary"
qemu_accel: tcg
image_dirs:
YAML
                for d in "$@"; do
                        printf '  - "%s"\n' "$d"
                done
                cat <<YAML
vmm:
  boot_timeout: 30s
  stop_timeout: 30s
gpu:
  reconcile_interval: 5s
YAML
                printf '%s' "${gpu_extra:-}"
        } >"$work/$name.yaml"
}

# create ARGS...: vgpuctl instances create ARGS, the rows of its answer that match
# $create_rows shown, the new id in $id.
create_rows=.
create() {
        ctl instances create "$@" >"$work/created"
        grep -E "$create_rows" "$work/created"
        id=$(awk '$1 == "id" { print $2 }' "$work/created")
        [ -n "$id" ] || { echo "no id in vgpuctl's answer" >&2; exit 1; }
}

json_field() { # EXPR [ARG]: evaluates EXPR on the JSON document on stdin (as j; ARG is sys.argv[2])
        python3 -c 'import json, sys; j = json.load(sys.stdin); print(eval(sys.argv[1]))' "$@"
}
used_slots() {
        vgpuctl --unix "$sock" --json resources | json_field 'j["gpu"]["used_slots"]'
}
# "<used slots> <available of PROFILE>", as /resources has them now.
figures() {
        vgpuctl --unix "$sock" --json resources | json_field '"%d %d" % (j["gpu"]["used_slots"],
                [p["available"] for p in j["gpu"]["profiles"] if p["name"] == sys.argv[2]][0])' "$1"
}
# wait_for TRIES WHY COMMAND...: runs COMMAND every 50 ms until it succeeds, TRIES times at
# most; then WHY goes to stderr and the demo ends with status 1.
wait_for() {
        tries=$1 why=$2
        shift 2
        i=0
        until "$@"; do
                [ "$i" -lt "$tries" ] || { echo "$why" >&2; exit 1; }
                sleep 0.05
                i=$((i + 1))
        done
}
used_slots_are() { [ "$(used_slots)" = "$1" ]; }
figures_are() { [ "$(figures "$1")" = "$2" ]; }
# wait_figures PROFILE FIGURES: a bounded wait (15 s, three reconcile passes) until figures
# reads FIGURES. vgpud re-reads a VF and refreshes NVML's placements after each release; the
# answer to the stop or delete does not wait for that.
wait_figures() {
        wait_for 300 "/resources did not come back to $2" figures_are "$1" "$2"
}
claimed_vfs() {
        vgpuctl --unix "$sock" --json gpus |
                json_field 'sum(v["state"] == "claimed" for g in j["gpus"] for v in g["vfs"])'
}
count() { # DIR: its entries
        if [ -d "$1" ]; then find "$1" -mindepth 1 -maxdepth 1 | wc -l; else echo 0; fi
}
