#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-fleet-two-hosts.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU VGPUCTL VGPU_SIM HOST_B.yaml
#
# FLEET-8: `vgpuctl fleet` (FLEET-7) places vGPU VMs across two simulated hosts through a real
# placement-api (python3-placement, sqlite, noauth2) on loopback. Host fleet-a is the runner's
# simulator (one mixed-size L40S, tests/fleet/host-fleet-a.yaml); host fleet-b is a second
# vgpu-sim this script mounts in the same PID namespace (SIM-20's mixed and equal-size L40S).
# Checked: the provider tree against each host's /gpus; the fragmentation case that Placement
# admits refused by the host and rescheduled to the other; 40 VMs of mixed sizes across both
# hosts; Placement's usages against the records; a quarantine in `reserved` within one sync;
# placement disabled; a restart that changes no uuid and leaks no allocation; and nothing left
# once everything is deleted. Runs under tests/sim/run-sim-test.sh; everything it starts it
# stops by pid.
import os
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import placement_api  # noqa: E402
import two_hosts  # noqa: E402
from two_hosts import pf_name, pf_uuid, profile_gib, root_uuid  # noqa: E402
from vgpud_test import (  # noqa: E402
    CTL, MNT, eq, exit_status, finish, ok, poll, run_group, stop)

FAKE_QEMU, VGPUCTL, VGPU_SIM, HOST_B_YAML = sys.argv[4:8]
A, B = "fleet-a", "fleet-b"
A_PF = "0000:41:00.0"  # host-fleet-a.yaml
SYNC = 40  # seconds a change may take to reach Placement: generous, the machine is shared
# The 40 VMs: mixed sizes, 104 GiB of the fleet's 144 (one L40S on fleet-a, two on fleet-b).
BATCHES = (("NVIDIA L40S-1Q", 16), ("NVIDIA L40S-2Q", 12), ("NVIDIA L40S-4Q", 8),
           ("NVIDIA L40S-8Q", 4))


def allocation_gone(p, consumer, name):
    """FLEET-6: vgpud deletes a deleted instance's allocation within one sync."""
    ok(poll(lambda: allocations_of(p, consumer) == {}, SYNC, 0.2),
       "FLEET-6: the deleted %s's allocation is gone" % name, allocations_of(p, consumer))


def usages(p, uuid):
    b = p.get("/resource_providers/%s/usages" % uuid)
    return b["usages"] if b else None


def allocations_of(p, consumer):
    b = p.get("/allocations/" + consumer)
    return b["allocations"] if b else None


def provider_allocations(p, uuid):
    b = p.get("/resource_providers/%s/allocations" % uuid)
    return b["allocations"] if b else None


def fleet_pf_uuids(hosts):
    return {pf_uuid(h.name, pf): (h, pf) for h in hosts for pf in h.pfs()}


def check_tree(p, hosts, fc):
    # FLEET-2 on each host: the root and one child per PF of /gpus, named and derived as the
    # SPEC says.
    for h in hosts:
        pfs = sorted(h.pfs())
        want = {(h.name, root_uuid(h.name), None)} | {
            (pf_name(h.name, pf), pf_uuid(h.name, pf), root_uuid(h.name)) for pf in pfs}
        ok(poll(lambda: len(p.tree(root_uuid(h.name))) == len(want), SYNC, 0.2),
           "FLEET-2: %s's root and its %d PF providers are in Placement" % (h.name, len(pfs)))
        got = {(x["name"], x["uuid"], x["parent_provider_uuid"]) for x in p.tree(root_uuid(h.name))}
        eq(got, want, "FLEET-8: %s's provider tree matches its /gpus" % h.name)
    # FLEET-7: `fleet hosts` sees both, `fleet resources` every PF with its 32 VFs.
    rc, out, err = fc.json("hosts")
    eq((rc, [(x["name"], x["in_placement"], x["ready"]) for x in (out or {}).get("hosts", [])]),
       (0, [(A, True, True), (B, True, True)]),
       "FLEET-7: fleet hosts lists both hosts, in Placement and ready")
    ok(poll(lambda: all(x["inventories"].get("VGPU", {}).get("total") == 32
                        for x in fc.json("resources")[1]["hosts"][1]["providers"]), SYNC, 0.5),
       "FLEET-3: fleet-b's inventories are in Placement")
    rc, out, err = fc.json("resources")
    got = {(x["name"], y["pf"]) for x in (out or {}).get("hosts", []) for y in x["providers"]}
    want = {(h.name, pf) for h in hosts for pf in h.pfs()}
    eq((rc, got), (0, want), "FLEET-7: fleet resources shows every PF provider of both hosts")
    rc, text, err = fc.run("resources")
    ok(rc == 0 and "FREE PLACEMENTS" in text and A_PF in text,
       "FLEET-7: fleet resources prints a table", text + err)


def inventories(p, uuid):
    b = p.get("/resource_providers/%s/inventories" % uuid)
    return b if b else None


def restore_place_class(p, uuid, rc_name):
    """Puts a per-size class back to no reservation and the framebuffer's max_unit to the card,
    as Placement held them before the host's sync caught up with its last two vGPUs: the window
    in which FLEET-3 over-admits."""
    for _ in range(20):
        b = inventories(p, uuid)
        inv = b["inventories"]
        inv[rc_name]["reserved"] = 0
        inv["CUSTOM_VGPU_FB_GIB"]["max_unit"] = inv["CUSTOM_VGPU_FB_GIB"]["total"]
        st, _ = p.call("PUT", "/resource_providers/%s/inventories" % uuid,
                       {"resource_provider_generation": b["resource_provider_generation"],
                        "inventories": inv})
        if st == 200:
            return True
        time.sleep(0.1)  # vgpud wrote in between: read again
    return False


def check_fragmentation(p, hosts, fc, reschedules):
    a, b = hosts
    # The packing order puts both on fleet-a's only PF (fewest free VGPU, then the hosts file's
    # order): a 1Q at slot 0, then a 24Q at slot 24 (SIM-9), which leaves no 16 GiB placement.
    rc, one, err, _ = fc.create("frag-1q", "NVIDIA L40S-1Q")
    rc2, big, err2, _ = fc.create("frag-24q", "NVIDIA L40S-24Q")
    placed = [x for r in (one, big) for x in (r or {}).get("instances", [])]
    if not eq((rc, rc2, [(x["host"], x["pf"], x["reschedules"]) for x in placed]),
              (0, 0, [(A, A_PF, 0), (A, A_PF, 0)]),
              "FLEET-7: a 1Q and a 24Q land on fleet-a's PF"):
        print("# " + (err + err2).replace("\n", "\n# "))
    slots = {v["address"]: v.get("placement") for g in a.state()["gpus"] for v in g["vfs"]}
    eq([slots.get(x["vf"]) for x in placed], [0, 24], "SIM-9: the 1Q is at slot 0, the 24Q at 24")

    # Once the sync has caught up, Placement refuses a 16Q on that PF by itself (FLEET-3).
    uuid = pf_uuid(A, A_PF)
    ok(poll(lambda: (inventories(p, uuid) or {"inventories": {}})["inventories"].get(
        "CUSTOM_VGPU_PLACE_16G", {}).get("reserved") == 3, SYNC, 0.2),
       "FLEET-3: fleet-a's 16G class is fully reserved once synced")
    # FLEET-8's case is the window before that sync (two vGPUs allocated and not yet reported):
    # Placement's view as it was then admits a 16Q, and the host has the last word.
    ok(restore_place_class(p, uuid, "CUSTOM_VGPU_PLACE_16G"),
       "Placement's view of fleet-a as before the sync (16G reserved 0, FB max_unit 48)")
    rc, out, err, _ = fc.create("frag-16q", "NVIDIA L40S-16Q")
    got = (out or {}).get("instances", [{}])[0] if out and out.get("instances") else {}
    eq((rc, got.get("host"), got.get("reschedules")), (0, B, 1),
       "FLEET-8: the 16Q that Placement admits on fleet-a is refused there and lands on fleet-b")
    refusals = got.get("refusals", [])
    ok(len(refusals) == 1 and refusals[0].startswith(A + ": insufficient_resources: "),
       "FLEET-6, FLEET-7: the move is for fleet-a's 409 insufficient_resources", refusals)
    eq((out or {}).get("reschedules"), 1, "FLEET-7: the reschedule is counted")
    reschedules.append(("fragmentation", (out or {}).get("reschedules")))
    if got:
        eq(set(allocations_of(p, got["consumer"]) or {}), {pf_uuid(B, got["pf"])},
           "FLEET-7: the 16Q's allocation moved to fleet-b's PF, nothing stays on fleet-a")
    eq(sorted(i["name"] for i in a.instances()), ["frag-1q", "frag-24q"],
       "FLEET-6: fleet-a did not keep the refused 16Q")

    # The text form says where it landed and after how many refusals.
    for x in placed + ([got] if got else []):
        host = x["host"]
        rc, text, err = fc.delete(x["instance"]["id"], host)
        eq((rc, text.strip()), (0, "deleted instance %s on %s" % (x["instance"]["id"], host)),
           "FLEET-7: fleet delete %s on %s" % (x["instance"]["name"], host))
        allocation_gone(p, x["consumer"], x["instance"]["name"])


def check_forty(p, hosts, fc, reschedules, timing):
    t0 = time.monotonic()
    results = []
    for profile, count in BATCHES:
        name = "vm-%dq" % profile_gib(profile)
        rc, out, err, _ = fc.create(name, profile, count)
        got = (out or {}).get("instances", [])
        if not eq((rc, len(got)), (0, count), "FLEET-7: fleet create --count %d of %s"
                  % (count, profile)):
            print("# " + err.replace("\n", "\n# "))
        results += got
        reschedules.append((profile, (out or {}).get("reschedules")))
    wall = time.monotonic() - t0
    timing["forty"] = wall
    total = sum(r or 0 for _, r in reschedules if _ != "fragmentation")
    timing["forty_reschedules"] = total
    print("# fleet create of 40 VMs on two hosts: %.1f s wall, %d reschedules" % (wall, total))
    eq(len(results), 40, "FLEET-8: 40 VMs created")
    by_host = {h.name: sum(1 for x in results if x["host"] == h.name) for h in hosts}
    ok(all(n > 0 for n in by_host.values()), "FLEET-8: the 40 VMs span both hosts", by_host)
    eq(sum(len(h.instances()) for h in hosts), 40, "FLEET-8: the hosts hold 40 instances")
    return results


def expected_allocations(hosts):
    """{consumer: {provider uuid: resources}} as the records say (FLEET-6's consumer, the PF of
    the claimed VF, the profile's size)."""
    want = {}
    for h in hosts:
        vf_pf = {vf: pf for pf, vfs in h.pfs().items() for vf in vfs}
        for i in h.instances():
            s = profile_gib(i["gpu"]["profile"])
            pf = vf_pf.get(os.path.basename(i["gpu"].get("device_path", "")))
            consumer = (i.get("placement") or {}).get("consumer")
            want[consumer] = {pf_uuid(h.name, pf) if pf else None: {
                "VGPU": 1, "CUSTOM_VGPU_FB_GIB": s, "CUSTOM_VGPU_PLACE_%dG" % s: 1}}
    return want


def placement_allocations(p, hosts):
    """{consumer: {provider uuid: resources}} over every PF provider of the fleet."""
    got = {}
    for uuid in fleet_pf_uuids(hosts):
        for consumer, a in (provider_allocations(p, uuid) or {}).items():
            got.setdefault(consumer, {})[uuid] = a["resources"]
    return got


def check_usages(p, hosts):
    want = expected_allocations(hosts)
    ok(None not in want and all(None not in v for v in want.values()),
       "FLEET-6: every instance has a consumer and a claimed VF", want)
    eq(placement_allocations(p, hosts), want,
       "FLEET-8: Placement's allocations are the records' (each consumer on its VF's PF)")
    # Usages per provider are the sum of those allocations.
    for uuid, (h, pf) in fleet_pf_uuids(hosts).items():
        n = sum(1 for a in want.values() if uuid in a)
        fb = sum(a[uuid]["CUSTOM_VGPU_FB_GIB"] for a in want.values() if uuid in a)
        u = usages(p, uuid) or {}
        eq((u.get("VGPU"), u.get("CUSTOM_VGPU_FB_GIB")), (n, fb),
           "FLEET-8: %s %s: VGPU and FB usage match its %d instances" % (h.name, pf, n))


def check_quarantine(p, hosts, timing):
    b = hosts[1]
    busy = {os.path.basename(i["gpu"].get("device_path", "")) for i in b.instances()}
    pf, vfs = sorted(b.pfs().items())[0]
    vf = [v for v in vfs if v not in busy][0]
    uuid = pf_uuid(B, pf)
    before = inventories(p, uuid)["inventories"]["VGPU"]["reserved"]
    st = b.client.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": "fleet test"}).status
    t0 = time.monotonic()
    eq(st, 200, "API-2: quarantine a free VF of fleet-b")
    ok(poll(lambda: inventories(p, uuid)["inventories"]["VGPU"]["reserved"] == before + 1, SYNC,
            0.05), "FLEET-3, FLEET-8: the quarantine raises fleet-b's VGPU reserved within one "
       "sync")
    timing["quarantine"] = time.monotonic() - t0
    print("# quarantine to reserved in Placement: %.2f s" % timing["quarantine"])
    b.client.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    ok(poll(lambda: inventories(p, uuid)["inventories"]["VGPU"]["reserved"] == before, SYNC,
            0.1), "FLEET-3: clearing it gives the VF back")


def all_reserved(p, uuid):
    inv = (inventories(p, uuid) or {}).get("inventories", {})
    return bool(inv) and all(x["reserved"] == x["total"] for x in inv.values())


def check_disabled(p, hosts):
    a = hosts[0]
    uuid = pf_uuid(A, A_PF)
    a.ctl("fault read sys/bus/pci/devices EIO")
    try:
        ok(poll(lambda: "placement_disabled_reason" in a.client.get("/resources").json()["gpu"],
                30, 0.1), "DISC-7: a failed discovery disables fleet-a's placement")
        ok(poll(lambda: all_reserved(p, uuid), SYNC, 0.2),
           "FLEET-3, FLEET-8: placement disabled: every reserved of fleet-a's PF is its total",
           inventories(p, uuid))
        # The sync puts a provider's inventories, then its traits: the trait may follow.
        ok(poll(lambda: "CUSTOM_VGPUD_DRAINED" in p.traits(uuid), SYNC, 0.2),
           "FLEET-4: placement disabled: fleet-a's PF carries CUSTOM_VGPUD_DRAINED",
           p.traits(uuid))
        # fleet-b is not touched.
        ok(not any(all_reserved(p, u) for u in fleet_pf_uuids([hosts[1]])),
           "FLEET-3: fleet-b's PFs keep their capacity")
    finally:
        a.ctl("clear-faults")
    ok(poll(lambda: not all_reserved(p, uuid) and
            "CUSTOM_VGPUD_DRAINED" not in (p.traits(uuid) or {"x"}), 60, 0.2),
       "FLEET-3, FLEET-4: fleet-a's PF recovers with discovery")


def check_restart(p, hosts, daemons):
    b = hosts[1]
    uuids = {x["uuid"] for x in p.get("/resource_providers")["resource_providers"]}
    before = placement_allocations(p, hosts)
    stop(b.daemon, " (fleet-b)")
    d, c = b.start("fleet-b-restarted")
    daemons.append(d)
    if not c:
        return
    ok(poll(lambda: all("CUSTOM_VGPUD_DRAINED" not in (p.traits(u) or {"x"})
                        for u in fleet_pf_uuids([b])), SYNC, 0.2),
       "FLEET-4: the restarted fleet-b lifts its stopping drain")
    after = {x["uuid"] for x in p.get("/resource_providers")["resource_providers"]}
    eq(after, uuids, "FLEET-2, FLEET-8: a restart of fleet-b changes no provider uuid")
    eq(placement_allocations(p, hosts), before,
       "FLEET-8: the restart leaks no allocation and loses none")
    eq(placement_allocations(p, hosts), expected_allocations(hosts),
       "FLEET-8: ... and they still are the records'")


def check_delete_all(p, hosts, fc):
    failed = []
    for h in hosts:
        for i in h.instances():
            rc, text, err = fc.delete(i["id"], h.name)
            if rc != 0:
                failed.append((h.name, i["id"], rc, err))
    eq(failed, [], "FLEET-7: fleet delete of every instance")
    eq([i["name"] for h in hosts for i in h.instances()], [], "the hosts hold no instance")
    ok(poll(lambda: placement_allocations(p, hosts) == {}, SYNC, 0.5),
       "FLEET-8: deleting everything leaves no allocation in Placement",
       placement_allocations(p, hosts))
    ok(all(not any((usages(p, u) or {"x": 1}).values()) for u in fleet_pf_uuids(hosts)),
       "FLEET-8: every usage is 0")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-fleet2-")
    daemons, sims = [], []
    p = None
    reschedules, timing = [], {}
    try:
        p, ready = placement_api.start_checked(work)
        if not ready:
            return exit_status()
        sim_b = two_hosts.Simulator(VGPU_SIM, HOST_B_YAML, work, B)
        sims.append(sim_b)
        if not ok(sim_b.wait(), "SIM-21: a second vgpu-sim mounts in the same namespace"):
            return exit_status()
        hosts = [two_hosts.Host(work, A, MNT, CTL), two_hosts.Host(work, B, sim_b.mnt,
                                                                   sim_b.ctl_dir, sim_b)]
        images = os.path.join(work, "images")
        kernel = two_hosts.make_kernel(images)
        for h in hosts:
            h.write_config(p.url, sys.argv[3], FAKE_QEMU, images)
            d, c = h.start(h.name)
            daemons.append(d)
            if not c:
                return exit_status()
        hosts_file = os.path.join(work, "hosts.json")
        two_hosts.write_hosts_file(hosts_file, hosts)
        fc = two_hosts.Fleetctl(VGPUCTL, p.url, hosts_file, kernel)

        run_group("tree", lambda: check_tree(p, hosts, fc))
        run_group("fragmentation", lambda: check_fragmentation(p, hosts, fc, reschedules))
        run_group("forty", lambda: check_forty(p, hosts, fc, reschedules, timing))
        ok(poll(lambda: placement_allocations(p, hosts) == expected_allocations(hosts), SYNC,
                0.5), "FLEET-6: Placement's allocations settle on the records")
        run_group("usages", lambda: check_usages(p, hosts))
        run_group("quarantine", lambda: check_quarantine(p, hosts, timing))
        run_group("disabled", lambda: check_disabled(p, hosts))
        run_group("restart", lambda: check_restart(p, hosts, daemons))
        run_group("delete", lambda: check_delete_all(p, hosts, fc))
        for d in daemons:
            if d.alive():
                stop(d)
    finally:
        for d in daemons:
            d.stop()
        if p:
            p.stop()
        keep = os.environ.get("VGPUD_TEST_KEEP")
        if keep:
            os.makedirs(keep, exist_ok=True)
            for n in os.listdir(work):
                src = os.path.join(work, n)
                if n.endswith(".log"):
                    shutil.copy(src, keep)
            if p:
                shutil.copytree(p.dir, os.path.join(keep, "placement"), dirs_exist_ok=True)
            for h in ("fleet-a", "fleet-b"):
                src = os.path.join(work, h)
                if os.path.isdir(src):
                    for n in os.listdir(src):
                        if n.endswith(".log"):
                            shutil.copy(os.path.join(src, n), keep)
        for s in sims:
            rc = s.stop()
            ok(rc == 0, "SIM-21: the second vgpu-sim exits cleanly", rc)
        finish(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
