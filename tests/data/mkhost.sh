#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# mkhost.sh OUTDIR KIND — writes a fixture sysfs tree for discovery tests into OUTDIR (which is
# created; it must not exist yet or be empty). OUTDIR then stands for /sys: pass it as
# --sysfs-root. The shapes follow SPEC SIM-2..SIM-6; links are relative, no root is needed.
#
# Kinds:
#   l40s-vfio           two L40S (0000:e3:00.0, 0000:e4:00.0) x 32 VFs, vendor VFIO; the first
#                       card holds three NVIDIA L40S-2Q (equal-size), the second is empty
#   vfio-typeless-mdev  a vendor VFIO host whose class/mdev_bus holds only typeless entries
#   mdev                an A40 mdev host with 4 VFs and one active mdev
#   domain-0001         a vendor VFIO host in PCI domain 0001
#   unreadable-vf       a vendor VFIO host with one garbage current_vgpu_type and one that is a
#                       directory
#   vfs-unreadable      a vendor VFIO host where no VF can be read (discovery fails)
#   mdev-bus-error      class/mdev_bus is a regular file (discovery fails)
#   no-gpu              a PCI tree without NVIDIA vGPU
set -eu

usage() {
	echo "usage: $0 OUTDIR KIND" >&2
	exit 2
}

[ $# -eq 2 ] || usage
out=$1
kind=$2

# The helpers avoid command substitution and external tools where they can: a tree has
# thousands of entries, and every fork costs.

# parent_dir PATH — creates the directory part of PATH below OUTDIR.
parent_dir() {
	[ -d "$out/${1%/*}" ] || mkdir -p "$out/${1%/*}"
}

# put FILE CONTENT — writes CONTENT (no newline added) below OUTDIR.
put() {
	parent_dir "$1"
	printf '%s' "$2" >"$out/$1"
}

# link TARGET NAME — a relative symbolic link NAME below OUTDIR.
link() {
	parent_dir "$2"
	ln -s "$1" "$out/$2"
}

# devdir ADDRESS — sets $dir to the device's directory, devices/pci<domain>:<bus>/<address>.
devdir() {
	dir="devices/pci${1%:*.*}/$1"
}

# vf_address PF I — sets $addr to VF i of a PF at dddd:bb:00.0, which has devfn 4 + i on the
# same bus (SIM-2).
vf_address() {
	devfn=$((4 + $2))
	hex=$((devfn / 8))
	[ "$hex" -lt 10 ] && hex="0$hex" || hex=$(printf '%02x' "$hex")
	addr="${1%:*.*}:$hex.$((devfn % 8))"
}

group=0
vfio=0

# bus/pci/devices links are named after their targets, so one ln at the end makes them all.
bus_links=

# pci_device ADDRESS VENDOR DEVICE — a plain PCI device, listed under bus/pci/devices.
pci_device() {
	devdir "$1"
	d=$dir
	put "$d/vendor" "$2
"
	put "$d/device" "$3
"
	bus_links="$bus_links ../../../$d"
}

finish() {
	mkdir -p "$out/bus/pci/devices"
	# shellcheck disable=SC2086 # the list is split on purpose; no entry holds a space
	[ -z "$bus_links" ] || ln -s $bus_links "$out/bus/pci/devices/"
}

# pf ADDRESS DEVICE NUMVFS — an NVIDIA PF with its virtfn links. PFs carry an nvidia/ directory
# too, as some drivers give them one (DISC-4 ignores it: there is no physfn).
pf() {
	pci_device "$1" 0x10de "$2"
	devdir "$1"
	d=$dir
	put "$d/sriov_totalvfs" "32
"
	put "$d/sriov_numvfs" "$3
"
	put "$d/nvidia/creatable_vgpu_types" "ID    : vGPU Name
"
	i=0
	while [ "$i" -lt "$3" ]; do
		vf_address "$1" "$i"
		link "../$addr" "$d/virtfn$i"
		i=$((i + 1))
	done
}

# vf PF I DEVICE [SUBDIR] — the framework-neutral part of a VF: physfn, IOMMU group, VFIO node,
# and SUBDIR when given.
vf() {
	vf_address "$1" "$2"
	a=$addr
	devdir "$a"
	d=$dir
	# One mkdir for every directory the VF needs, made before anything is written into them.
	mkdir -p "$out/kernel/iommu_groups/$group/devices" "$out/$d/vfio-dev/vfio$vfio" \
		"$out/$d/${4:-}"
	pci_device "$a" 0x10de "$3"
	ln -s "../$1" "$out/$d/physfn"
	ln -s "../../../kernel/iommu_groups/$group" "$out/$d/iommu_group"
	group=$((group + 1))
	vfio=$((vfio + 1))
}

# The L40S types (SIM-4): 1145 1B, 1146 2B, 1147..1156 Q, 1157..1166 A.
l40s_sizes="1 2 3 4 6 8 12 16 24 48"

# l40s_table SIZE... — the driver's creatable table listing the types of the given sizes in GiB
# ("all" for every type, nothing for a header-only table).
l40s_table() {
	printf 'ID    : vGPU Name\n'
	[ $# -gt 0 ] || return 0
	want=" $* "
	all=false
	[ "$1" = all ] && all=true
	for s in 1 2; do
		if $all || [ "${want#* "$s" }" != "$want" ]; then
			printf '%-6s: NVIDIA L40S-%sB\n' $((1144 + s)) "$s"
		fi
	done
	for series in Q A; do
		id=1147
		[ $series = A ] && id=1157
		for s in $l40s_sizes; do
			if $all || [ "${want#* "$s" }" != "$want" ]; then
				printf '%-6s: NVIDIA L40S-%s%s\n' "$id" "$s" "$series"
			fi
			id=$((id + 1))
		done
	done
}

# vendor_vf PF I CURRENT TABLE — a vendor VFIO VF of an L40S.
vendor_vf() {
	vf "$1" "$2" 0x26b9 nvidia
	put "$d/nvidia/current_vgpu_type" "$3
"
	put "$d/nvidia/creatable_vgpu_types" "$4"
}

# l40s PF NUMVFS CONFIGURED FREE_SIZES — an equal-size L40S whose first CONFIGURED VFs hold type
# 1148 (2Q); the free VFs then list the 2 GiB types, or every type on an empty card.
l40s() {
	pf "$1" 0x26b9 "$2"
	free_table=$(l40s_table all)
	[ "$3" -gt 0 ] && free_table=$(l40s_table 2)
	full_table=$(l40s_table)
	i=0
	while [ "$i" -lt "$2" ]; do
		if [ "$i" -lt "$3" ]; then
			vendor_vf "$1" "$i" 1148 "$full_table
"
		else
			vendor_vf "$1" "$i" 0 "$free_table
"
		fi
		i=$((i + 1))
	done
}

# The A40 mdev types (SIM-5): nvidia-900 upwards, one per size, maxima min(32, 48 / size).
a40_mdev_vf() {
	vf "$1" "$2" 0x2235 mdev_supported_types
	(cd "$out/$d/mdev_supported_types" && mkdir nvidia-900 nvidia-901 nvidia-902 nvidia-903 \
		nvidia-904 nvidia-905 nvidia-906 nvidia-907 nvidia-908 nvidia-909)
	n=900
	for s in $l40s_sizes; do
		t="$d/mdev_supported_types/nvidia-$n"
		max=$((48 / s))
		[ "$max" -gt 32 ] && max=32
		put "$t/name" "NVIDIA A40-${s}Q
"
		put "$t/description" "num_heads=4, frl_config=60, framebuffer=$((s * 1024))M, max_resolution=5120x2880, max_instance=$max
"
		avail=1
		[ "$3" = busy ] && avail=0
		[ "$3" = free-2q ] && [ "$s" -ne 2 ] && avail=0
		put "$t/available_instances" "$avail
"
		put "$t/device_api" "vfio-pci
"
		put "$t/create" ""
		n=$((n + 1))
	done
	link "../../$d" "class/mdev_bus/$a"
}

# active_mdev VF UUID TYPE — an mdev created on VF.
active_mdev() {
	devdir "$1"
	m="$dir/$2"
	link "../mdev_supported_types/$3" "$m/mdev_type"
	mkdir -p "$out/kernel/iommu_groups/$group/devices"
	link "../../../../kernel/iommu_groups/$group" "$m/iommu_group"
	group=$((group + 1))
	put "$m/remove" ""
	link "../../../$m" "bus/mdev/devices/$2"
}

# Devices every host has: a host bridge and an NVMe disk, which discovery must pass over.
common() {
	pci_device 0000:00:00.0 0x8086 0x09a2
	pci_device 0000:01:00.0 0x144d 0xa80a
	put "module/nvidia/version" "580.159.01
"
}

if [ -e "$out" ] && [ -n "$(ls -A "$out")" ]; then
	echo "$0: $out is not empty" >&2
	exit 1
fi
mkdir -p "$out"

case $kind in
l40s-vfio)
	common
	mkdir -p "$out/class/mdev_bus" "$out/bus/mdev/devices"
	l40s 0000:e3:00.0 32 3
	l40s 0000:e4:00.0 32 0
	;;
vfio-typeless-mdev)
	common
	l40s 0000:c1:00.0 4 0
	# One entry with an empty types directory, one without any.
	for i in 0 1; do
		vf_address 0000:c1:00.0 "$i"
		devdir "$addr"
		link "../../$dir" "class/mdev_bus/$addr"
	done
	devdir 0000:c1:00.4
	mkdir -p "$out/$dir/mdev_supported_types"
	;;
mdev)
	common
	pf 0000:41:00.0 0x2235 4
	a40_mdev_vf 0000:41:00.0 0 free-2q
	a40_mdev_vf 0000:41:00.0 1 busy
	a40_mdev_vf 0000:41:00.0 2 free-2q
	a40_mdev_vf 0000:41:00.0 3 free-2q
	active_mdev 0000:41:00.5 3b0c2f4e-8d1a-4c6b-9e2f-5a7d1c3e9b40 nvidia-901
	;;
domain-0001)
	common
	mkdir -p "$out/class/mdev_bus"
	pf 0001:c8:00.0 0x26b9 4
	vendor_vf 0001:c8:00.0 0 1157 "$(l40s_table)
"
	for i in 1 2 3; do
		vendor_vf 0001:c8:00.0 "$i" 0 "$(l40s_table 1)
"
	done
	;;
unreadable-vf)
	common
	l40s 0000:e3:00.0 4 0
	devdir 0000:e3:00.5
	put "$dir/nvidia/current_vgpu_type" "garbage
"
	devdir 0000:e3:00.6
	rm "$out/$dir/nvidia/current_vgpu_type"
	mkdir "$out/$dir/nvidia/current_vgpu_type"
	;;
vfs-unreadable)
	common
	l40s 0000:e3:00.0 2 0
	devdir 0000:e3:00.4
	put "$dir/nvidia/current_vgpu_type" "garbage
"
	devdir 0000:e3:00.5
	put "$dir/nvidia/creatable_vgpu_types" "ID    : vGPU Name
NVIDIA L40S-1B : 1145
"
	;;
mdev-bus-error)
	common
	l40s 0000:e3:00.0 2 0
	put "class/mdev_bus" ""
	;;
no-gpu)
	common
	# An NVIDIA GPU without SR-IOV or vGPU support.
	pci_device 0000:65:00.0 0x10de 0x2236
	;;
*)
	echo "$0: unknown kind \"$kind\"" >&2
	exit 2
	;;
esac
finish
