#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# run-sim-test.sh VGPU_SIM HOST.yaml test-inventory-vs-sim.sh VGPUD
#
# `vgpud inventory --sysfs-root DIR/sys` against a running simulator agrees with
# DIR/.sim/state.json (SIM-1, SIM-3, DISC-1..DISC-10, DISC-17). The test configures a few VFs
# by writing the simulator's own sysfs files, as the driver's users do, then compares the
# inventory with the model: the VF set, parents, current types and profiles, framework, GPU
# models, and every VF's creatable list with what its sysfs files show. It knows two hosts:
# the SIM-20 default (host-l40s.yaml, vendor VFIO) and the A40 mdev host (host-a40.yaml).
# Prints TAP. run-sim-test.sh sets VGPU_SIM_MOUNT and unmounts whatever happens here.
set -u

if [ "$#" -ne 1 ] || [ -z "${VGPU_SIM_MOUNT:-}" ]; then
        echo "usage: run-sim-test.sh VGPU_SIM HOST.yaml $0 VGPUD" >&2
        exit 2
fi
vgpud=$1
mnt=$VGPU_SIM_MOUNT
sys=$mnt/sys
devices=$sys/bus/pci/devices

if ! command -v python3 >/dev/null 2>&1; then
        echo "1..0 # SKIP python3 not found"
        exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/inventory-vs-sim.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the comparisons, in Python for its json module ---------------------------------------------
cat >"$tmp/compare.py" <<'EOF'
import json
import os
import sys

# SIM-4, SIM-5; the model name is what DISC-17 derives from the profile names without NVML.
MODELS = {
    "L40S": {"device": "0x26b9", "name": "NVIDIA L40S", "framework": "vendor-vfio"},
    "A40-mdev": {"device": "0x2235", "name": "NVIDIA A40", "framework": "mdev"},
}
TOTAL_VFS = 32

problems = []


def expect(cond, what):
    if not cond:
        problems.append(what)
    return cond


def load(path):
    with open(path) as f:
        return json.load(f)


def read(path):
    with open(path) as f:
        return f.read()


def state_vfs(state):
    return {v["address"]: (g, v) for g in state["gpus"] for v in g["vfs"]}


def inventory_vfs(inv):
    return {v["address"]: v for g in inv["gpus"] for v in g["vfs"]}


def state_framework(state):
    vfs = [v for g in state["gpus"] for v in g["vfs"]]
    if not vfs:
        return "none"
    # DISC-1: one mdev VF makes the host mdev; mdev VFs have no vfio<N> of their own.
    return "mdev" if any(v["vfio"] is None for v in vfs) else "vendor-vfio"


def creatable_ids(path):
    """The type IDs of a creatable_vgpu_types table, in file order (DISC-10)."""
    ids = []
    for line in read(path).splitlines():
        if not line.strip():
            continue
        left, _, _ = line.partition(":")
        if left.strip() != "ID":
            ids.append(int(left.strip()))
    return ids


def relative_link(path):
    target = os.readlink(path)
    expect(not target.startswith("/"), f"{path} -> {target} is not relative")
    return target


def cmd_framework(state):
    print(state_framework(load(state)))


def cmd_clean(inv):
    inv = load(inv)
    expect(inv["warnings"] == [], f"warnings: {inv['warnings']}")
    expect(inv["vfs_without_gpu"] == [], f"VFs without a GPU: {inv['vfs_without_gpu']}")


def cmd_framework_agrees(inv, state):
    inv, state = load(inv), load(state)
    want = state_framework(state)
    expect(inv["framework"] == want, f"framework {inv['framework']}, state says {want}")
    for g in state["gpus"]:
        expect(MODELS[g["model"]]["framework"] == want, f"GPU {g['address']}: {g['model']}")
    for g in inv["gpus"]:
        expect(g["framework"] == want, f"GPU {g['address']}: framework {g['framework']}")


def cmd_vf_set(inv, state):
    inv, state = load(inv), load(state)
    want_gpus = sorted(g["address"] for g in state["gpus"])
    got_gpus = sorted(g["address"] for g in inv["gpus"])
    expect(got_gpus == want_gpus, f"GPUs {got_gpus}, state has {want_gpus}")
    want = {a: g["address"] for a, (g, _) in state_vfs(state).items()}
    got = {}
    for g in inv["gpus"]:
        addresses = [v["address"] for v in g["vfs"]]
        expect(addresses == sorted(addresses), f"GPU {g['address']}: VFs not sorted (DISC-8)")
        for v in g["vfs"]:
            expect(v["parent"] == g["address"], f"VF {v['address']} under {g['address']} "
                   f"names parent {v['parent']}")
            got[v["address"]] = v["parent"]
    for a in sorted(set(want) | set(got)):
        expect(got.get(a) == want.get(a),
               f"VF {a}: parent {got.get(a)} in the inventory, {want.get(a)} in the state")
    expect(len(want) > 0, "the state lists no VF")


def cmd_models(inv, state):
    inv, state = load(inv), load(state)
    by_address = {g["address"]: g for g in inv["gpus"]}
    for g in state["gpus"]:
        m, ig = MODELS[g["model"]], by_address.get(g["address"])
        if not expect(ig is not None, f"GPU {g['address']} missing"):
            continue
        expect(ig["model"] == m["name"], f"GPU {g['address']}: model {ig['model']}, "
               f"want {m['name']} for {g['model']}")
        expect(ig["device_id"] == m["device"], f"GPU {g['address']}: device {ig['device_id']}")
        for v in g["vfs"]:
            if v["profile"] is not None:
                # DISC-17: the model is the profile name before its last "-".
                expect(v["profile"].rpartition("-")[0] == ig["model"],
                       f"VF {v['address']}: profile {v['profile']} vs model {ig['model']}")


def cmd_current(inv, state):
    inv, state = load(inv), load(state)
    framework = state_framework(state)
    got = inventory_vfs(inv)
    configured = 0
    for a, (g, sv) in sorted(state_vfs(state).items()):
        iv = got.get(a)
        if not expect(iv is not None, f"VF {a} missing"):
            continue
        configured += sv["type"] != 0
        want_state = "configured" if sv["type"] != 0 else "free"
        expect(iv["state"] == want_state, f"VF {a}: {iv['state']}, state type {sv['type']}")
        expect(iv["profile"] == sv["profile"], f"VF {a}: profile {iv['profile']}, "
               f"state {sv['profile']}")
        if framework == "vendor-vfio":
            expect(iv["type_id"] == sv["type"], f"VF {a}: type {iv['type_id']}, "
                   f"state {sv['type']}")
        else:
            want = [sv["mdev"]["uuid"]] if sv["mdev"] else []
            expect(iv["mdevs"] == want, f"VF {a}: mdevs {iv['mdevs']}, state {want}")
    expect(configured > 0, "no VF is configured: the test configured none")

    # DISC-9: the active mdevs, with their VF, type directory and profile.
    want = sorted((sv["mdev"]["uuid"], a, "nvidia-%d" % sv["type"], sv["profile"])
                  for a, (g, sv) in state_vfs(state).items() if sv["mdev"])
    have = sorted((m["uuid"], m["vf"], m["mdev_type"], m["profile"]) for m in inv["mdevs"])
    expect(have == want, f"mdevs {have}, state {want}")


def cmd_creatable(inv, state, mnt):
    inv, state = load(inv), load(state)
    sysfs = os.path.join(mnt, "sys")
    framework = state_framework(state)
    free = 0
    for a, iv in sorted(inventory_vfs(inv).items()):
        free += iv["state"] == "free"
        if framework == "vendor-vfio":
            path = os.path.join(sysfs, "bus/pci/devices", a, "nvidia/creatable_vgpu_types")
            want = creatable_ids(path)
            expect(iv["creatable_type_ids"] == want,
                   f"VF {a} ({iv['state']}): {iv['creatable_type_ids']}, the file shows {want}")
            if iv["state"] == "configured":
                expect(want == [], f"configured VF {a} lists {want} (SIM-10)")
        else:
            path = os.path.join(sysfs, "class/mdev_bus", a, "mdev_supported_types")
            want = sorted(os.listdir(path))
            expect(sorted(iv["mdev_types"]) == want,
                   f"VF {a}: {iv['mdev_types']}, the directory shows {want}")
    expect(free > 0, "no VF is free")


def cmd_layout(state, mnt):
    """SIM-3: the sysfs attributes and links agree with the model."""
    state = load(state)
    sysfs = os.path.join(mnt, "sys")
    devices = os.path.join(sysfs, "bus/pci/devices")
    version = read(os.path.join(sysfs, "module/nvidia/version")).strip()
    expect(version == state["driver_version"], f"module/nvidia/version {version!r}")
    for g in state["gpus"]:
        pf = os.path.join(devices, g["address"])
        m = MODELS[g["model"]]
        relative_link(pf)
        expect(read(os.path.join(pf, "vendor")).strip() == "0x10de", f"PF {g['address']}: vendor")
        expect(read(os.path.join(pf, "device")).strip() == m["device"], f"PF {g['address']}: device")
        expect(int(read(os.path.join(pf, "sriov_totalvfs"))) == TOTAL_VFS,
               f"PF {g['address']}: sriov_totalvfs")
        expect(int(read(os.path.join(pf, "sriov_numvfs"))) == len(g["vfs"]),
               f"PF {g['address']}: sriov_numvfs")
        for i, v in enumerate(g["vfs"]):
            a = v["address"]
            vf = os.path.join(devices, a)
            link = os.path.join(pf, "virtfn%d" % i)
            expect(os.path.realpath(os.path.join(pf, relative_link(link))) ==
                   os.path.realpath(vf), f"PF {g['address']}: virtfn{i} is not {a}")
            expect(os.path.realpath(os.path.join(vf, relative_link(os.path.join(vf, "physfn"))))
                   == os.path.realpath(pf), f"VF {a}: physfn is not {g['address']}")
            expect(read(os.path.join(vf, "vendor")).strip() == "0x10de", f"VF {a}: vendor")
            expect(read(os.path.join(vf, "device")).strip() == m["device"], f"VF {a}: device")
            group = relative_link(os.path.join(vf, "iommu_group"))
            expect(os.path.basename(group) == str(v["iommu_group"]),
                   f"VF {a}: iommu_group -> {group}, state {v['iommu_group']}")
            groups = os.path.join(sysfs, "kernel/iommu_groups", str(v["iommu_group"]))
            expect(os.path.realpath(os.path.join(vf, group)) == os.path.realpath(groups),
                   f"VF {a}: iommu_group does not lead to kernel/iommu_groups")
            expect(os.path.lexists(os.path.join(groups, "devices", a)),
                   f"kernel/iommu_groups/{v['iommu_group']}/devices/{a} missing")
            if v["vfio"] is not None:
                n = v["vfio"]
                expect(os.path.isdir(os.path.join(vf, "vfio-dev/vfio%d" % n)),
                       f"VF {a}: vfio-dev/vfio{n} missing")
                expect(os.path.exists(os.path.join(mnt, "dev/vfio/devices/vfio%d" % n)),
                       f"dev/vfio/devices/vfio{n} missing")
                current = read(os.path.join(vf, "nvidia/current_vgpu_type")).strip()
                expect(current == str(v["type"]), f"VF {a}: current_vgpu_type {current}, "
                       f"state {v['type']}")
            else:
                expect(os.path.isdir(os.path.join(sysfs, "class/mdev_bus", a)),
                       f"VF {a}: not under class/mdev_bus")
            if v["mdev"]:
                u = v["mdev"]["uuid"]
                mdev = os.path.join(sysfs, "bus/mdev/devices", u)
                t = os.path.basename(relative_link(os.path.join(mdev, "mdev_type")))
                expect(t == "nvidia-%d" % v["type"], f"mdev {u}: type {t}")
                mg = os.path.basename(relative_link(os.path.join(mdev, "iommu_group")))
                expect(mg == str(v["mdev"]["iommu_group"]), f"mdev {u}: iommu_group {mg}")


def cmd_vgpus_unchanged(before, after):
    """The vGPU part of two states: what a refused write must leave alone (SIM-11)."""
    def vgpus(s):
        return ({a: (v["type"], v["profile"], v["placement"], v["mdev"])
                 for a, (_, v) in state_vfs(s).items()},
                s["next_iommu_group"], s["layout_generation"])
    expect(vgpus(load(before)) == vgpus(load(after)), "the refused write changed the model")


def cmd_equal_size_lists(inv, pf, ids):
    """SIM-8: once an equal-size card holds a 2Q, its free VFs list exactly the 2 GiB types."""
    want = [int(i) for i in ids.split(",")]
    gpu = [g for g in load(inv)["gpus"] if g["address"] == pf]
    if expect(len(gpu) == 1, f"GPU {pf} missing"):
        free = [v for v in gpu[0]["vfs"] if v["state"] == "free"]
        expect(len(free) > 0, f"GPU {pf} has no free VF")
        for v in free:
            expect(v["creatable_type_ids"] == want,
                   f"VF {v['address']}: {v['creatable_type_ids']}, want {want}")


def cmd_placements(state, pairs):
    """SIM-9: each vGPU took the free placement with the lowest start."""
    vfs = state_vfs(load(state))
    for pair in pairs.split(","):
        a, _, slot = pair.partition("=")
        expect(vfs[a][1]["placement"] == int(slot),
               f"VF {a}: placement {vfs[a][1]['placement']}, want {slot}")


def cmd_mdev_gone(state, inv, mnt, uuid):
    """SIM-6: a removed mdev leaves the model, the tree and the inventory."""
    uuids = [v["mdev"]["uuid"] for _, v in state_vfs(load(state)).values() if v["mdev"]]
    expect(uuid not in uuids, f"mdev {uuid} still in the state")
    expect(uuid not in [m["uuid"] for m in load(inv)["mdevs"]], f"mdev {uuid} still listed")
    expect(not os.path.lexists(os.path.join(mnt, "sys/bus/mdev/devices", uuid)),
           f"bus/mdev/devices/{uuid} still exists")


def cmd_available(mnt, vf, want_type):
    """SIM-6: on a free VF, available_instances is 1 exactly for the types the card can take."""
    types = os.path.join(mnt, "sys/class/mdev_bus", vf, "mdev_supported_types")
    have = sorted(t for t in os.listdir(types)
                  if read(os.path.join(types, t, "available_instances")).strip() == "1")
    expect(have == [want_type], f"VF {vf}: available types {have}, want [{want_type}]")


COMMANDS = {
    "framework": cmd_framework,
    "clean": cmd_clean,
    "framework-agrees": cmd_framework_agrees,
    "vf-set": cmd_vf_set,
    "models": cmd_models,
    "current": cmd_current,
    "creatable": cmd_creatable,
    "layout": cmd_layout,
    "vgpus-unchanged": cmd_vgpus_unchanged,
    "equal-size-lists": cmd_equal_size_lists,
    "placements": cmd_placements,
    "mdev-gone": cmd_mdev_gone,
    "available": cmd_available,
}

try:
    COMMANDS[sys.argv[1]](*sys.argv[2:])
except Exception as e:  # a missing key or file is a failed comparison, not a crash
    problems.append(f"{type(e).__name__}: {e}")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
EOF

# ---- TAP ----------------------------------------------------------------------------------------
n=0
failed=0

# check DESCRIPTION COMMAND...: one test point from the command's status, its output as comments.
check() {
        desc=$1
        shift
        n=$((n + 1))
        if "$@" >"$tmp/out" 2>&1; then
                echo "ok $n - $desc"
        else
                echo "not ok $n - $desc"
                failed=$((failed + 1))
        fi
        sed 's/^/# /' "$tmp/out"
}

compare() {
        python3 "$tmp/compare.py" "$@"
}

# The writes a driver user makes; each one is a store into the simulator's model.
store() {
        printf '%s\n' "$2" >"$1"
}

refused() {
        if printf '%s\n' "$2" >"$1" 2>/dev/null; then
                echo "writing $2 to $1 succeeded"
                return 1
        fi
}

snapshot() {
        cat "$mnt/.sim/state.json" >"$1"
}

# SIM-20: a mixed-size and an equal-size L40S. 4Q, 1Q and 2Q on the mixed card take slots 0,
# 4 and 6 (SIM-9); a 1Q configured and released again leaves nothing behind; two 2Q fix the
# equal-size card's class, so a 4Q there is refused (SIM-7).
configure_vendor() {
        store "$devices/0000:e3:00.4/nvidia/current_vgpu_type" 1150 &&
                store "$devices/0000:e3:00.5/nvidia/current_vgpu_type" 1147 &&
                store "$devices/0000:e3:00.6/nvidia/current_vgpu_type" 1148 &&
                store "$devices/0000:e3:00.7/nvidia/current_vgpu_type" 1147 &&
                store "$devices/0000:e3:00.7/nvidia/current_vgpu_type" 0 &&
                store "$devices/0001:c8:00.4/nvidia/current_vgpu_type" 1148 &&
                store "$devices/0001:c8:00.5/nvidia/current_vgpu_type" 1148
}

refuse_vendor() {
        refused "$devices/0001:c8:00.6/nvidia/current_vgpu_type" 1150
}

# The A40 host: two 3Q mdevs (one UUID written in upper case) and a third created and removed;
# a second mdev on a VF that carries one is refused.
uuid1=6f0a4a3c-39e1-4c59-9d8a-7b7b5f0d2a11
uuid2=6f0a4a3c-39e1-4c59-9d8a-7b7b5f0d2a12
uuid3=6f0a4a3c-39e1-4c59-9d8a-7b7b5f0d2a13
mdev_bus=$sys/class/mdev_bus

configure_mdev() {
        store "$mdev_bus/0000:41:00.4/mdev_supported_types/nvidia-902/create" $uuid1 &&
                store "$devices/0000:41:00.6/mdev_supported_types/nvidia-902/create" \
                        "$(echo $uuid2 | tr a-f A-F)" &&
                store "$mdev_bus/0000:41:01.0/mdev_supported_types/nvidia-902/create" $uuid3 &&
                store "$sys/bus/mdev/devices/$uuid3/remove" 1
}

refuse_mdev() {
        refused "$mdev_bus/0000:41:00.4/mdev_supported_types/nvidia-902/create" $uuid3
}

inventory() {
        "$vgpud" inventory --sysfs-root "$sys" --json >"$tmp/inventory.json" || return 1
        snapshot "$tmp/state.json"
        compare clean "$tmp/inventory.json"
}

echo "1..11"

mounted_tree() {
        test -d "$sys" && test -d "$mnt/dev" && test -d "$mnt/data" && test -r "$mnt/.sim/state.json"
}
check "SIM-1: the mount has sys/, dev/, data/ and .sim/state.json" mounted_tree

framework=$(compare framework "$mnt/.sim/state.json")
case "$framework" in
vendor-vfio | mdev) ;;
*)
        echo "Bail out! unexpected host: framework \"$framework\""
        exit 1
        ;;
esac
kind=vendor
[ "$framework" = mdev ] && kind=mdev

check "SIM-11: $framework VFs configured through the simulator's own sysfs files" \
        "configure_$kind"
refuse() {
        snapshot "$tmp/before.json" &&
                "refuse_$kind" &&
                snapshot "$tmp/after.json" &&
                compare vgpus-unchanged "$tmp/before.json" "$tmp/after.json"
}
check "SIM-7/SIM-11: a refused write fails and leaves every vGPU as it was" refuse

check "DISC: vgpud inventory --sysfs-root DIR/sys --json succeeds, without warnings" inventory
check "DISC-1: the framework is the state's ($framework)" \
        compare framework-agrees "$tmp/inventory.json" "$tmp/state.json"
check "DISC-4/DISC-8: the same GPUs and VFs, under the same parents" \
        compare vf-set "$tmp/inventory.json" "$tmp/state.json"
check "DISC-8/DISC-17: device IDs and GPU models match the state's models" \
        compare models "$tmp/inventory.json" "$tmp/state.json"
check "DISC-5/DISC-9: current types, profiles and mdevs match the state" \
        compare current "$tmp/inventory.json" "$tmp/state.json"
check "DISC-10: every VF's creatable list is what its sysfs files show" \
        compare creatable "$tmp/inventory.json" "$tmp/state.json" "$mnt"
check "SIM-3: PF and VF attributes and links agree with the state" \
        compare layout "$tmp/state.json" "$mnt"

if [ "$kind" = vendor ]; then
        sim8_sim9() {
                compare equal-size-lists "$tmp/inventory.json" 0001:c8:00.0 1146,1148,1158 &&
                        compare placements "$tmp/state.json" \
                                0000:e3:00.4=0,0000:e3:00.5=4,0000:e3:00.6=6
        }
        check "SIM-8/SIM-9: the equal card lists only 2 GiB types; placements 0, 4, 6" sim8_sim9
else
        sim6() {
                compare mdev-gone "$tmp/state.json" "$tmp/inventory.json" "$mnt" $uuid3 &&
                        compare available "$mnt" 0000:41:00.5 nvidia-902
        }
        check "SIM-6: a removed mdev is gone; free VFs offer only the card's size class" sim6
fi

[ "$failed" -eq 0 ]
