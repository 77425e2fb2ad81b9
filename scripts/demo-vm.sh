#!/bin/sh
# The demo's first part (SEED-8, OPS-11): the product's main job as an operator sees it. Run by
# demo.sh inside a private PID, mount and network namespace with a mounted simulator at
# $VGPU_SIM_MOUNT (SIM-21), so vgpud's bridge, TAP, nftables table and dnsmasq live and die
# there. Usage: demo-vm.sh BUILD IMAGE_DIR QEMU
#
# vgpud runs the real QEMU under TCG: the Debian 12 cloud image of build-image.sh is imported
# through the API, a VM is created from it with an SSH key made here, the test waits for sshd,
# runs `uname -a` and `lsblk` in the guest, and deletes the VM and the image. Each step prints
# its command and its time. Whatever happens, vgpud and the VM are stopped and the work
# directory removed (demo-lib.sh).
set -eu
build=$1
image_dir=$2
qemu=$3
# shellcheck source=scripts/demo-lib.sh
. "$(dirname "$0")/demo-lib.sh"

# sim_run bound the tun device over the simulator's (vgpud opens <dev_root>/net/tun).
# timed TITLE COMMAND...: runs COMMAND, then prints how long it took.
timed() {
        title=$1
        shift
        t0=$(date +%s%N)
        "$@"
        ms=$((($(date +%s%N) - t0) / 1000000))
        printf '%s[%s: %d.%d s]%s\n' "$bold" "$title" $((ms / 1000)) $((ms % 1000 / 100)) "$plain"
}
api() { # METHOD PATH [BODY]: the API through curl, as a script would call it; shown but GETs
        if [ $# -ge 3 ]; then
                show "$(quote curl -sS --unix-socket "$sock" -H "Authorization: Bearer \$VGPUD_TOKEN" \
                        -H "Content-Type: application/json" -X "$1" -d "$3" "http://vgpud$2")"
                curl -sS --unix-socket "$sock" -H "Authorization: Bearer $VGPUD_TOKEN" \
                        -H "Content-Type: application/json" -X "$1" -d "$3" "http://vgpud$2"
        else
                [ "$1" = GET ] || show "$(quote curl -sS --unix-socket "$sock" \
                        -H "Authorization: Bearer \$VGPUD_TOKEN" -X "$1" "http://vgpud$2")"
                curl -sS --unix-socket "$sock" -H "Authorization: Bearer $VGPUD_TOKEN" \
                        -X "$1" "http://vgpud$2"
        fi
}
ssh_vm() { # COMMAND: in the guest, as its default user, with the demo's key
        ssh -i "$work/id_ed25519" -o BatchMode=yes -o StrictHostKeyChecking=no \
                -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 -o LogLevel=ERROR \
                "debian@$ip" "$@"
}

say "A real VM: the Debian 12 cloud image, booted by QEMU (TCG) under vgpud, reached by SSH"
head -c 48 /dev/urandom >"$work/jwt.secret"
chmod 600 "$work/jwt.secret"
write_config vm "$work/vm-data" "$qemu" "$image_dir"
echo "(the NAT network, its bridge, TAPs and dnsmasq exist in this demo's network namespace only)"
start_vgpud vm
show "export VGPUD_TOKEN=\$(vgpuctl token mint --secret-file $work/jwt.secret --sub demo)"
VGPUD_TOKEN=$(vgpuctl token mint --secret-file "$work/jwt.secret" --sub demo)
export VGPUD_TOKEN

import_image() {
        api POST /images "{\"name\": \"debian-12\", \"source\": \"$image_dir/debian-12.qcow2\"}" \
                >"$work/answer"
        json_field '("image %s: %s" % (j["name"], j["state"]) if "state" in j else
                "refused: %s" % j)' <"$work/answer"
        grep -q '"state"' "$work/answer" || exit 1
        i=0
        until [ "$(api GET /images/debian-12 | json_field 'j["state"]')" != importing ]; do
                [ "$i" -lt 3000 ] || { echo "the import did not end in 300 s" >&2; exit 1; }
                sleep 0.1
                i=$((i + 1))
        done
        api GET /images/debian-12 | json_field '"image %s: %s, %d MiB virtual" % (
                j["name"], j["state"], j["virtual_size_bytes"] >> 20)'
}
timed "import" import_image

create_vm() {
        run ssh-keygen -q -t ed25519 -N "" -C demo@vgpud -f "$work/id_ed25519"
        body=$(python3 -c 'import json, sys; print(json.dumps({"name": "debian-vm", "vcpus": 2,
                "memory_mb": 1024, "image": "debian-12", "network": {"mode": "nat"},
                "cloud_init": {"ssh_authorized_keys": [open(sys.argv[1]).read().strip()]}}))' \
                "$work/id_ed25519.pub")
        api POST /instances "$body" >"$work/created"
        grep -q '"state"' "$work/created" || { cat "$work/created"; echo; exit 1; }
        json_field '"instance %s %s: %s, %s on %s, seed with %d key(s)" % (j["id"], j["name"],
                j["state"], j["network"]["ip"], j["network"]["mode"],
                len(j["cloud_init"]["ssh_authorized_keys"]))' <"$work/created"
        id=$(json_field 'j["id"]' <"$work/created")
        ip=$(json_field 'j["network"]["ip"]' <"$work/created")
}
timed "create (QEMU ready)" create_vm

wait_ssh() {
        echo "(the guest boots, cloud-init reads its seed, sshd starts: polling ssh, 300 s at most)"
        i=0
        until ssh_vm true 2>/dev/null; do
                [ "$i" -lt 150 ] || {
                        echo "the guest did not answer ssh:" >&2
                        vgpuctl --unix "$sock" instances console "$id" | tail -n 20 >&2
                        exit 1
                }
                sleep 2
                i=$((i + 1))
        done
}
timed "boot to SSH" wait_ssh

in_guest() {
        show "ssh -i $work/id_ed25519 debian@$ip uname -a"
        ssh_vm uname -a
        show "ssh -i $work/id_ed25519 debian@$ip lsblk"
        ssh_vm lsblk
}
timed "SSH in" in_guest

delete_all() {
        ctl instances delete "$id"
        api DELETE /images/debian-12
        printf 'left behind: %s instance directories, %s images, %s qemu processes\n' \
                "$(count "$work/vm-data/instances")" "$(count "$work/vm-data/images")" \
                "$(vmm_pids | wc -l)"
}
timed "delete" delete_all
stop_vgpud
