#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# build-guest.sh OUTDIR
#
# Builds the tiny Linux guest of the end-to-end tests (SPEC SIM-19) into OUTDIR:
#
#   OUTDIR/vmlinuz              the kernel of Debian's current linux-image-*-cloud-amd64,
#                               fetched with `apt-get download` and unpacked with `dpkg-deb -x`
#                               (never installed: its postinst needs initramfs-tools)
#   OUTDIR/initramfs.cpio.gz    busybox-static with a symlink per applet, the kernel modules
#                               below (plain .ko, decompressed if the package compresses them)
#                               and the /init described below
#   OUTDIR/guest.info           kernel package, version and release, busybox version, modules
#   OUTDIR/guest.stamp          written last: the cache key of a complete result
#
# The result is cached: when guest.stamp matches the kernel package version apt would fetch now,
# the busybox version and this script's own checksum, nothing is done. A build works in a
# temporary directory inside OUTDIR and renames its results into place, the stamp last, so an
# interrupted build never leaves a result that looks complete. Concurrent runs on the same
# OUTDIR wait for each other (flock), so several tests may call this script.
# VGPUD_GUEST_KERNEL_DEB=/path/to/linux-image-*.deb uses that package instead of fetching one.
#
# The guest's init contract (console lines, all starting with "vgpud-guest: "):
#   - mounts proc, sysfs and devtmpfs, then prints "vgpud-guest: init reached" on /dev/ttyS0
#     (stdout and stderr of everything init starts go there too, hence to QEMU's console.log);
#   - insmods virtio_ring, virtio, virtio_pci_legacy_dev, virtio_pci_modern_dev, virtio_pci,
#     virtio_console, virtio_blk, failover, net_failover, virtio_net, evdev, button (those the
#     kernel builds in are skipped at build time; virtio_blk gives a boot.disk its /dev/vda,
#     virtio_net a NIC its eth0), and
#     prints "vgpud-guest: insmod <name> failed" for one that fails;
#   - starts busybox acpid; its PWRF (power button) action prints
#     "vgpud-guest: power button, powering off" and runs `poweroff -f`, so QMP
#     system_powerdown ends QEMU by itself (VMM-9);
#   - waits up to 10 s for the virtio-serial port named org.vgpud.agent.0 and prints
#     "vgpud-guest: agent port <dev> (org.vgpud.agent.0)", e.g. vport0p1 (its node is /dev/<dev>),
#     or "vgpud-guest: agent port org.vgpud.agent.0 not found";
#   - sources every /etc/guest-init.d/*.sh (none here; a test adds them, see below);
#   - the agent hook: if /bin/vgpu-agent exists it runs
#     `/bin/vgpu-agent --serial /dev/<dev> <words of /etc/vgpu-agent.args>` in the background,
#     prints "vgpud-guest: agent started (pid N)" and, when it ends,
#     "vgpud-guest: agent exited with status N". Without an agent, init echoes the port instead:
#     whatever a host client writes to agent.sock comes back ("vgpud-guest: echoing <dev>");
#   - prints "vgpud-guest: ready" and stays alive.
# A test adds files (a static vgpu-agent, /etc/vgpu-agent.args, hooks, stand-ins) without
# rebuilding this image by appending a second gzip'd newc cpio archive to a copy of
# initramfs.cpio.gz (the kernel unpacks concatenated archives in order; later files win), see
# tests/e2e/e2e_guest.py: initrd_with().
set -eu

# The load order matters: each module's dependencies come before it (checked below).
MODULES="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci virtio_console
virtio_blk failover net_failover virtio_net evdev button"
META=linux-image-cloud-amd64

say() { echo "build-guest: $*" >&2; }
die() {
        say "error: $*"
        exit 1
}

[ $# -eq 1 ] || {
        echo "usage: $0 OUTDIR" >&2
        exit 2
}
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
mkdir -p "$1" || die "cannot create $1"
out=$(cd "$1" && pwd)

for tool in apt-cache apt-get dpkg-deb dpkg-query cpio gzip flock sha256sum; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool not found (scripts/deps.sh installs it)"
done
busybox=/bin/busybox
bbver=$(dpkg-query -W -f='${Version}' busybox-static 2>/dev/null) ||
        die "busybox-static is not installed (scripts/deps.sh installs it): the guest needs it"
[ -x "$busybox" ] || die "$busybox missing although busybox-static is installed"

exec 9>"$out/.lock"
flock 9 || die "cannot lock $out/.lock"

stamp_ok() {
        [ -f "$out/guest.stamp" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initramfs.cpio.gz" ]
}

# Which kernel package apt would fetch now: the candidate meta package's dependency.
if [ -n "${VGPUD_GUEST_KERNEL_DEB:-}" ]; then
        pkg=$(dpkg-deb -f "$VGPUD_GUEST_KERNEL_DEB" Package) ||
                die "cannot read $VGPUD_GUEST_KERNEL_DEB"
        ver=$(dpkg-deb -f "$VGPUD_GUEST_KERNEL_DEB" Version)
else
        resolve() {
                # The meta package pins its kernel: "Depends: linux-image-<abi>-cloud-amd64 (= V)".
                dep=$(apt-cache show --no-all-versions "$META" 2>/dev/null |
                        sed -n 's/^Depends: //p' | tr ',' '\n' |
                        grep -m 1 '^ *linux-image-[0-9][^ ]*-cloud-amd64') || return 1
                pkg=$(echo "$dep" | sed 's/^ *\([^ ]*\).*/\1/')
                ver=$(echo "$dep" | sed -n 's/.*(= \([^)]*\)).*/\1/p')
                [ -n "$ver" ] || ver=$(apt-cache show --no-all-versions "$pkg" 2>/dev/null |
                        sed -n 's/^Version: //p' | head -n 1)
                [ -n "$pkg" ] && [ -n "$ver" ]
        }
        if ! resolve; then
                if stamp_ok; then
                        say "apt knows no $META (no package lists?); keeping the cached guest"
                        exit 0
                fi
                [ "$(id -u)" -eq 0 ] || die "apt knows no $META: run 'apt-get update' as root first"
                say "apt knows no $META; running apt-get update"
                apt-get update -qq >/dev/null || die "apt-get update failed"
                resolve || die "apt knows no $META even after apt-get update"
        fi
fi

key="kernel=$pkg=$ver busybox=$bbver script=$(sha256sum <"$self" | cut -d' ' -f1)"
if stamp_ok && [ "$(cat "$out/guest.stamp")" = "$key" ]; then
        say "cached: $pkg $ver in $out"
        exit 0
fi

start=$(date +%s)
# Under the lock, a leftover build directory is a killed build's.
rm -rf "$out"/.build.*
tmp=$(mktemp -d "$out/.build.XXXXXX") || die "cannot create a temporary directory in $out"
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM HUP

# ---- the kernel package --------------------------------------------------------------------
mkdir "$tmp/deb"
if [ -n "${VGPUD_GUEST_KERNEL_DEB:-}" ]; then
        say "using $VGPUD_GUEST_KERNEL_DEB"
        cp "$VGPUD_GUEST_KERNEL_DEB" "$tmp/deb/" || die "cannot copy $VGPUD_GUEST_KERNEL_DEB"
else
        say "fetching $pkg $ver"
        # As root, apt would hand the download to its _apt user, which cannot write here.
        sandbox=APT::Sandbox::User=_apt
        [ "$(id -u)" -ne 0 ] || sandbox=APT::Sandbox::User=root
        fetch() {
                (cd "$tmp/deb" && apt-get download -qq -o "$sandbox" "$pkg=$ver") \
                        >"$tmp/apt.log" 2>&1
        }
        if ! fetch; then
                if [ "$(id -u)" -eq 0 ]; then
                        say "apt-get download failed; running apt-get update and retrying"
                        apt-get update -qq >/dev/null 2>&1 || true
                        fetch || {
                                cat "$tmp/apt.log" >&2
                                die "cannot download $pkg $ver"
                        }
                else
                        cat "$tmp/apt.log" >&2
                        die "cannot download $pkg $ver (stale lists? run 'apt-get update' as root)"
                fi
        fi
fi
deb=""
for f in "$tmp"/deb/*.deb; do
        [ -f "$f" ] && deb=$f
done
[ -n "$deb" ] || die "no .deb after the download of $pkg"
dpkg-deb -x "$deb" "$tmp/kernel" || die "cannot unpack $deb"
rm -f "$deb"

release=""
for d in "$tmp"/kernel/lib/modules/*; do
        [ -d "$d" ] && release=${d##*/}
done
[ -n "$release" ] || die "$pkg has no lib/modules/<release>"
mods="$tmp/kernel/lib/modules/$release"
[ -f "$tmp/kernel/boot/vmlinuz-$release" ] || die "$pkg has no boot/vmlinuz-$release"

# ---- the initramfs tree --------------------------------------------------------------------
root="$tmp/root"
mkdir -p "$root/bin" "$root/dev" "$root/proc" "$root/sys" "$root/tmp" "$root/run" \
        "$root/root" "$root/etc/acpi" "$root/etc/guest-init.d" "$root/lib/modules" "$root/var/log"
ln -s bin "$root/sbin"
mkdir "$root/usr"
ln -s ../bin "$root/usr/bin"
ln -s ../bin "$root/usr/sbin"
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
        [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
done

# Modules by path: the package has no modules.dep (depmod runs at install), so each module's
# .modinfo "depends=" is checked against the modules loaded before it.
loaded=" "
: >"$root/etc/modules.list"
for m in $MODULES; do
        file=$(find "$mods/kernel" \( -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" \
                -o -name "$m.ko.gz" \) | head -n 1)
        if [ -z "$file" ]; then
                if grep -q "/$m\.ko\$" "$mods/modules.builtin" 2>/dev/null; then
                        say "module $m is built into $release"
                        loaded="$loaded$m "
                        continue
                fi
                die "module $m is neither in $pkg nor built into $release"
        fi
        dest="$root/lib/modules/$m.ko"
        case "$file" in
        *.ko) cp "$file" "$dest" ;;
        *.xz) xz -dc "$file" >"$dest" || die "cannot decompress $file (xz-utils)" ;;
        *.zst) zstd -qdc "$file" >"$dest" || die "cannot decompress $file (zstd)" ;;
        *.gz) gzip -dc "$file" >"$dest" || die "cannot decompress $file" ;;
        esac
        deps=$(tr '\0' '\n' <"$dest" | sed -n 's/^depends=//p' | head -n 1 | tr ',-' ' _')
        for d in $deps; do
                case "$loaded" in
                *" $d "*) ;;
                *) die "module $m needs $d, which is not loaded before it (fix MODULES in $0)" ;;
                esac
        done
        loaded="$loaded$m "
        echo "$m" >>"$root/etc/modules.list"
done

# busybox acpid: the power button's event ("button/power PWRF ...") maps to the action file
# /etc/acpi/power (acpid runs actions relative to its config directory).
echo "PWRF power" >"$root/etc/acpid.conf"
cat >"$root/etc/acpi/power" <<'EOF'
#!/bin/sh
echo "vgpud-guest: power button, powering off" >/dev/ttyS0
exec poweroff -f
EOF
chmod 0755 "$root/etc/acpi/power"

cat >"$root/init" <<'EOF'
#!/bin/sh
# The vgpud end-to-end guest's init (written by tests/e2e/build-guest.sh, which documents the
# contract). PID 1: it must never exit, or the kernel panics.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
# Without devtmpfs there is no /dev/ttyS0 to write to.
mount -t devtmpfs devtmpfs /dev
exec </dev/null >/dev/ttyS0 2>&1
say() { echo "vgpud-guest: $*"; }
say "init reached"

for m in $(cat /etc/modules.list); do
        insmod "/lib/modules/$m.ko" || say "insmod $m failed"
done

# acpid opens the /dev/input/event* that exist when it starts: after evdev and button.
acpid -d -c /etc/acpi -a /etc/acpid.conf &
say "acpid started"

# virtio_console adds its ports asynchronously, after the host's control messages.
port=""
i=0
while [ $i -lt 100 ]; do
        for f in /sys/class/virtio-ports/*/name; do
                [ -r "$f" ] || continue
                if [ "$(cat "$f")" = org.vgpud.agent.0 ]; then
                        port=${f%/name}
                        port=${port##*/}
                fi
        done
        [ -n "$port" ] && [ -c "/dev/$port" ] && break
        sleep 0.1
        i=$((i + 1))
done
if [ -n "$port" ]; then
        say "agent port $port (org.vgpud.agent.0)"
else
        say "agent port org.vgpud.agent.0 not found"
fi

for hook in /etc/guest-init.d/*.sh; do
        [ -r "$hook" ] && . "$hook"
done

# ---- the agent hook ----
if [ -x /bin/vgpu-agent ]; then
        args=""
        [ -r /etc/vgpu-agent.args ] && args=$(cat /etc/vgpu-agent.args)
        serial=""
        [ -n "$port" ] && serial="--serial /dev/$port"
        (
                # Unquoted on purpose: the arguments are words.
                /bin/vgpu-agent $serial $args
                say "agent exited with status $?"
        ) &
        say "agent started (pid $!)"
elif [ -n "$port" ]; then
        # No agent: echo the port, so a test sees bytes go both ways. A read returns 0 while no
        # host client is connected; the port allows one open, hence the one descriptor.
        (
                exec 3<>"/dev/$port" || exit 1
                while :; do
                        cat <&3 >&3
                        sleep 0.25
                done
        ) &
        say "echoing $port"
fi

say "ready"
while :; do
        sleep 3600 &
        wait
done
EOF
chmod 0755 "$root/init"

say "packing the initramfs ($(wc -l <"$root/etc/modules.list") modules from $release)"
# -R 0:0 stores root ownership whoever runs this, so no fakeroot is needed.
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) | gzip -9n \
        >"$tmp/initramfs.cpio.gz" || die "cannot pack the initramfs"
cp "$tmp/kernel/boot/vmlinuz-$release" "$tmp/vmlinuz"
{
        echo "kernel_package=$pkg"
        echo "kernel_version=$ver"
        echo "kernel_release=$release"
        echo "busybox_version=$bbver"
        echo "modules=$(tr '\n' ' ' <"$root/etc/modules.list" | sed 's/ $//')"
} >"$tmp/guest.info"
printf '%s\n' "$key" >"$tmp/guest.stamp"

# Into place, the stamp last: until then an older stamp is gone, so nothing looks complete.
rm -f "$out/guest.stamp"
mv -f "$tmp/vmlinuz" "$out/vmlinuz"
mv -f "$tmp/initramfs.cpio.gz" "$out/initramfs.cpio.gz"
mv -f "$tmp/guest.info" "$out/guest.info"
mv -f "$tmp/guest.stamp" "$out/guest.stamp"
size=$(du -k "$out/initramfs.cpio.gz" | cut -f1)
say "built $out (kernel $release, $size KiB initramfs) in $(($(date +%s) - start)) s"
