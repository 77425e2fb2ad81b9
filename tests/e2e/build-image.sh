#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# build-image.sh OUTDIR VGPU_AGENT
#
# Builds the end-to-end tests' Debian 12 cloud image (SPEC SEED-6) into OUTDIR/debian-12.qcow2:
# a whole disk that QEMU's firmware (SeaBIOS) boots as it boots a downloaded cloud image, with
# no -kernel:
#
#   MBR partition table, syslinux's MBR code
#   partition 1  FAT16 "BOOT", bootable: syslinux (ldlinux.sys), syslinux.cfg, vmlinuz, initrd.img
#   partition 2  ext4 "root" (the filesystem UUID is in syslinux.cfg and /etc/fstab)
#
# The root filesystem comes from Debian packages only (mmdebstrap, --variant=apt plus the
# packages in PACKAGES below): systemd as init, cloud-init with the NoCloud data source only
# (no network probing for other clouds at boot), openssh-server, Debian's kernel,
# ifupdown as the network renderer cloud-init uses on Debian 12, and VGPU_AGENT installed as
# /usr/local/sbin/vgpu-agent with packaging/guest/'s unit (enabled) and udev rule (AGENT-1).
# The kernel is linux-image-amd64, not SEED-6's linux-image-cloud-amd64: Debian's cloud kernel
# is built without AHCI (CONFIG_SATA_AHCI unset; it has ata_piix for i440fx only), so it never
# sees the seed CD-ROM that SEED-2 attaches as ide-cd on q35's AHCI controller, and cloud-init
# falls back to its None data source.
# SSH host keys and /etc/machine-id are removed, so every instance gets its own at first boot
# (cloud-init writes the keys before sshd starts). cloud-init's default user is "debian".
#
# Unprivileged where the tools allow it: only mmdebstrap and the unpacking of its tarball run
# as root (its root mode keeps the packages' owners, which tar restores and mkfs.ext4 -d copies
# as they are; a user could unpack the tree only with its own uid on every file). The
# filesystems are made from directories (mkfs.ext4 -d, mtools), syslinux is installed into the
# FAT image file, and the disk is assembled with sfdisk and dd on regular files: no loop
# device, no mount.
#
# Cached by a hash of the inputs (this script, the packages list, the agent binary, the unit and
# the rule): when OUTDIR/image.stamp holds the current hash, nothing is done. The packages'
# tree is cached on its own, as OUTDIR/base.tar, by the hash of the block that makes it, so a
# new agent (any change to src/base or src/agent relinks it) costs an assembly of half a minute,
# not a bootstrap. A build works in OUTDIR/tmp.*, renames its results into place and writes each
# stamp last, so an interrupted build never looks complete. Concurrent runs wait for each other
# (flock). Downloaded packages are kept in OUTDIR/debs, so a rebuild downloads nothing new.
# Progress: one line per stage on stderr ("build-image: [3/7] ...").
set -eu

# resolvconf: ifupdown hands it the seed's name servers and search domain (SEED-3), which
# would otherwise stay in /etc/network/interfaces.d, unused by the guest's resolver.
PACKAGES="systemd-sysv udev dbus cloud-init openssh-server linux-image-amd64
initramfs-tools ifupdown isc-dhcp-client resolvconf iproute2 netbase e2fsprogs kmod procps"
SUITE=bookworm
STAGES=7

say() { echo "build-image: $*" >&2; }
die() {
        say "error: $*"
        exit 1
}
stage() {
        say "[$1/$STAGES] $2 ($(($(date +%s) - started))s)"
}

[ $# -eq 2 ] || {
        echo "usage: $0 OUTDIR VGPU_AGENT" >&2
        exit 2
}
started=$(date +%s)
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
guest_files=$(cd "$(dirname "$0")/../../packaging/guest" && pwd) ||
        die "packaging/guest not found beside tests/"
agent=$2
[ -x "$agent" ] || die "$agent is not an executable vgpu-agent"
mkdir -p "$1" || die "cannot create $1"
out=$(cd "$1" && pwd)

for tool in mmdebstrap mkfs.ext4 mkfs.vfat mcopy syslinux sfdisk qemu-img sha256sum flock; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done
mbr=/usr/lib/syslinux/mbr/mbr.bin
[ -r "$mbr" ] || die "$mbr missing (package syslinux-common)"

key=$({
        sha256sum <"$self"
        echo "$PACKAGES $SUITE"
        sha256sum <"$agent"
        sha256sum <"$guest_files/vgpu-agent.service"
        sha256sum <"$guest_files/60-vgpu-agent.rules"
} | sha256sum | cut -d' ' -f1)

exec 9>"$out/.lock"
flock 9 || die "cannot lock $out/.lock"
if [ -f "$out/debian-12.qcow2" ] && [ "$(cat "$out/image.stamp" 2>/dev/null)" = "$key" ]; then
        say "cached: $out/debian-12.qcow2"
        exit 0
fi
rm -f "$out/image.stamp"
rm -rf "$out"/tmp.*
tmp=$(mktemp -d "$out/tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$out/debs"

[ "$(id -u)" -eq 0 ] || die "mmdebstrap's root mode needs root (see the top of this script)"
# ---- base tree: everything but the agent, cached as base.tar by the hash of this block ----
base_key=$({
        sed -n '/^# ---- base tree/,/^# ---- end of base tree/p' "$self"
        echo "$PACKAGES $SUITE"
} | sha256sum | cut -d' ' -f1)
if [ -f "$out/base.tar" ] && [ "$(cat "$out/base.stamp" 2>/dev/null)" = "$base_key" ]; then
        stage 1 "base tree: cached ($out/base.tar)"
else
        rm -f "$out/base.stamp"
        stage 1 "mmdebstrap $SUITE: $(echo $PACKAGES | wc -w) packages and their dependencies"
        # The initramfs holds what finds the root (virtio-blk, ext4), not every storage driver:
        # initramfs-tools reads the list before the kernel's postinst builds it, which then
        # takes seconds instead of minutes. dpkg skips its fsyncs: a failed build is discarded.
        # shellcheck disable=SC2086
        mmdebstrap --quiet --variant=apt --include="$(echo $PACKAGES | tr ' ' ',')" \
                --dpkgopt=force-unsafe-io --skip=download/empty \
                --setup-hook='mkdir -p "$1/var/cache/apt/archives"' \
                --setup-hook="sync-in '$out/debs' /var/cache/apt/archives" \
                --essential-hook='mkdir -p "$1/etc/initramfs-tools/conf.d" "$1/usr/share/initramfs-tools/modules.d"; echo MODULES=list > "$1/etc/initramfs-tools/conf.d/vgpud-image"; printf "virtio_pci\nvirtio_blk\next4\n" > "$1/usr/share/initramfs-tools/modules.d/vgpud-image"' \
                --customize-hook="sync-out /var/cache/apt/archives '$out/debs'" \
                --customize-hook='printf "datasource_list: [NoCloud, None]\nlocale: C.UTF-8\n" > "$1/etc/cloud/cloud.cfg.d/90-vgpud.cfg"' \
                --customize-hook='printf "auto lo\niface lo inet loopback\n\nsource /etc/network/interfaces.d/*\n" > "$1/etc/network/interfaces"' \
                --customize-hook='for u in apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer; do ln -sf /dev/null "$1/etc/systemd/system/$u"; done' \
                --customize-hook='rm -f "$1"/etc/ssh/ssh_host_*; echo localhost > "$1/etc/hostname"; : > "$1/etc/machine-id"; rm -f "$1/var/lib/dbus/machine-id"' \
                "$SUITE" "$tmp/base.tar" >&2 || die "mmdebstrap failed"
        mv "$tmp/base.tar" "$out/base.tar"
        echo "$base_key" >"$out/base.stamp"
fi
# ---- end of base tree ----

stage 2 "root tree: the base, vgpu-agent with its unit and rule, fstab"
root_uuid=$(cat /proc/sys/kernel/random/uuid)
mkdir "$tmp/rootdir"
tar -C "$tmp/rootdir" --numeric-owner -xpf "$out/base.tar" || die "cannot unpack base.tar"
install -m 0755 "$agent" "$tmp/rootdir/usr/local/sbin/vgpu-agent"
install -m 0644 "$guest_files/vgpu-agent.service" "$tmp/rootdir/etc/systemd/system/"
install -m 0644 "$guest_files/60-vgpu-agent.rules" "$tmp/rootdir/etc/udev/rules.d/"
mkdir -p "$tmp/rootdir/etc/systemd/system/multi-user.target.wants"
ln -sf /etc/systemd/system/vgpu-agent.service \
        "$tmp/rootdir/etc/systemd/system/multi-user.target.wants/vgpu-agent.service"
echo "UUID=$root_uuid / ext4 errors=remount-ro 0 1" >"$tmp/rootdir/etc/fstab"
kernel=$(ls "$tmp"/rootdir/boot/vmlinuz-* | tail -n 1)
initrd=$(ls "$tmp"/rootdir/boot/initrd.img-* | tail -n 1)
[ -f "$kernel" ] && [ -f "$initrd" ] || die "no kernel or initrd in the image's /boot"
cp "$kernel" "$tmp/vmlinuz"
cp "$initrd" "$tmp/initrd.img"

stage 3 "root filesystem (ext4 from the tree, no mount)"
root_mib=2560
truncate -s "${root_mib}M" "$tmp/root.img"
mkfs.ext4 -q -F -L root -U "$root_uuid" -d "$tmp/rootdir" "$tmp/root.img" >&2 ||
        die "mkfs.ext4 failed"
rm -rf "$tmp/rootdir"

stage 4 "boot partition (FAT16, syslinux, kernel $(basename "$kernel"))"
boot_mib=128
truncate -s "${boot_mib}M" "$tmp/boot.img"
mkfs.vfat -F 16 -n BOOT "$tmp/boot.img" >/dev/null || die "mkfs.vfat failed"
cat >"$tmp/syslinux.cfg" <<EOF
DEFAULT debian
PROMPT 0
TIMEOUT 0
LABEL debian
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND root=UUID=$root_uuid ro console=ttyS0,115200
EOF
mcopy -i "$tmp/boot.img" "$tmp/syslinux.cfg" "$tmp/vmlinuz" "$tmp/initrd.img" ::/ ||
        die "mcopy failed"
syslinux --install "$tmp/boot.img" || die "syslinux --install failed"

stage 5 "whole disk (MBR, boot loader, two partitions)"
disk_mib=$((1 + boot_mib + root_mib))
truncate -s "${disk_mib}M" "$tmp/disk.raw"
printf 'label: dos\nstart=1MiB, size=%dMiB, type=6, bootable\nstart=%dMiB, size=%dMiB, type=83\n' \
        "$boot_mib" "$((1 + boot_mib))" "$root_mib" | sfdisk -q "$tmp/disk.raw" >&2 ||
        die "sfdisk failed"
dd if="$mbr" of="$tmp/disk.raw" bs=440 count=1 conv=notrunc status=none
dd if="$tmp/boot.img" of="$tmp/disk.raw" bs=1M seek=1 conv=notrunc,sparse status=none
dd if="$tmp/root.img" of="$tmp/disk.raw" bs=1M seek=$((1 + boot_mib)) conv=notrunc,sparse \
        status=none
rm -f "$tmp/boot.img" "$tmp/root.img"

stage 6 "qcow2"
qemu-img convert -f raw -O qcow2 "$tmp/disk.raw" "$tmp/debian-12.qcow2" || die "qemu-img failed"
{
        echo "suite $SUITE"
        echo "kernel $(basename "$kernel")"
        echo "root_uuid $root_uuid"
        echo "agent_sha256 $(sha256sum <"$agent" | cut -d' ' -f1)"
} >"$tmp/image.info"
mv "$tmp/image.info" "$out/image.info"
mv "$tmp/debian-12.qcow2" "$out/debian-12.qcow2"
sync -f "$out/debian-12.qcow2"
echo "$key" >"$out/image.stamp"
stage 7 "done: $out/debian-12.qcow2"
