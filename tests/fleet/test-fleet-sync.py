#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-fleet-sync.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# FLEET-8's sync half: vgpud on SIM-20's host (a mixed-size and an equal-size L40S) against a
# real placement-api (python3-placement, sqlite, noauth2) on loopback, checked from Placement's
# own API: the provider tree and its uuids (FLEET-2), the inventories of both cards fresh and
# with vGPUs on them (FLEET-3), the traits (FLEET-4), a quarantine and a drain reflected within
# one sync, placement disabled, a generation conflict survived, an outage that never blocks a
# local create or delete, and a restart that keeps every uuid (FLEET-5). Runs under
# tests/sim/run-sim-test.sh; everything it starts it stops by pid.
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import placement_api  # noqa: E402
from vgpud_instances import (  # noqa: E402
    EQUAL_PF, IMAGES, MIXED_PF, create_running, delete, make_images, vf_of, vmm_config)
from vgpud_test import (  # noqa: E402
    eq, exit_status, finish, metric, ok, parse_metrics, poll, run_group, sim_ctl,
    skip, start, stop, write_secret)

HOST = "fleet-host-1"
ROOT_UUID = str(uuid.uuid5(uuid.NAMESPACE_URL, "vgpud:" + HOST))
SIZES = {1: 32, 2: 24, 3: 16, 4: 12, 6: 8, 8: 6, 12: 4, 16: 3, 24: 2, 48: 1}  # SIM-4's maxima
SYNC = 40  # seconds a change may take to show: generous, the machine is shared


def pf_uuid(pf):
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "vgpud:%s:%s" % (HOST, pf)))


def pf_name(pf):
    return HOST + "_pci_" + pf.replace(":", "_").replace(".", "_")


class Placement(placement_api.Placement):
    """The helper's client, with this host's uuids."""

    def tree(self):
        return super().tree(ROOT_UUID)

    def inventories(self, pf):
        return super().inventories(pf_uuid(pf))

    def traits(self, pf):
        return super().traits(pf_uuid(pf))


def inv(total, reserved, max_unit):
    return {"total": total, "reserved": reserved, "max_unit": max_unit, "min_unit": 1,
            "step_size": 1, "allocation_ratio": 1.0}


def fresh_card():
    """FLEET-3 for an empty 48 GiB L40S with 32 VFs: nothing reserved anywhere."""
    want = {"VGPU": inv(32, 0, 1), "CUSTOM_VGPU_FB_GIB": inv(48, 0, 48)}
    for s, m in SIZES.items():
        want["CUSTOM_VGPU_PLACE_%dG" % s] = inv(m, 0, m)
    return want


def converges(p, pf, want, timeout=SYNC):
    return poll(lambda: p.inventories(pf) == want, timeout, 0.2)


def profile_traits(c):
    """FLEET-4's trait of every profile /resources lists (both cards are L40S with NVML's full
    catalog, so each card's catalog is the whole list)."""
    return {"CUSTOM_VGPU_PROFILE_" + "".join(ch if ch.isalnum() else "_" for ch in
                                             p["name"].replace("NVIDIA ", "", 1).upper())
            for p in c.get("/resources").json()["gpu"]["profiles"]}


def fleet_metrics(c):
    return parse_metrics(c.get("/metrics").body.decode())


def check_tree(c, p):
    # FLEET-2: the root and one child per PF of /gpus, with the uuids a restart keeps.
    pfs = sorted(g["address"] for g in c.get("/gpus").json()["gpus"])
    eq(pfs, sorted([MIXED_PF, EQUAL_PF]), "SIM-20: the host has two L40S")
    ok(poll(lambda: len(p.tree()) == 3, SYNC, 0.2), "FLEET-2: the root and two PF providers",
       p.tree())
    got = {(x["name"], x["uuid"], x["parent_provider_uuid"]) for x in p.tree()}
    want = {(HOST, ROOT_UUID, None)} | {(pf_name(pf), pf_uuid(pf), ROOT_UUID) for pf in pfs}
    eq(got, want, "FLEET-2: names, UUIDv5 uuids and parents as the SPEC derives them")


def check_fresh(c, p):
    # FLEET-3 on an empty mixed-size and an empty equal-size card.
    for pf in (MIXED_PF, EQUAL_PF):
        ok(converges(p, pf, fresh_card()), "FLEET-3: %s's inventories on an empty card" % pf,
           p.inventories(pf))
    # FLEET-4: a trait per catalog profile and the mode trait, nothing drained.
    for pf, mode in ((MIXED_PF, "CUSTOM_VGPUD_MIXED_SIZE"), (EQUAL_PF, "CUSTOM_VGPUD_EQUAL_SIZE")):
        want = profile_traits(c) | {mode}
        ok(poll(lambda: p.traits(pf) == want, SYNC, 0.2),
           "FLEET-4: %s has its profile traits and %s" % (pf, mode), p.traits(pf) ^ want)
    ok("CUSTOM_VGPU_PROFILE_L40S_4Q" in p.traits(MIXED_PF),
       "FLEET-4: the SPEC's example trait CUSTOM_VGPU_PROFILE_L40S_4Q")


def check_images(c, p):
    # DISK-12: every PF provider carries CUSTOM_VGPUD_IMAGE_<NAME> for each ready image, and
    # loses it with the image.
    source = os.path.join(IMAGES, "fleet-img.raw")
    with open(source, "wb") as f:
        f.write(b"\0" * (1 << 20))
    r = c.request("POST", "/images", {"name": "fleet-img-1", "source": source})
    eq(r.status, 202, "DISK-2: an image is imported")
    ok(poll(lambda: c.get("/images/fleet-img-1").json().get("state") == "ready", 60, 0.1),
       "DISK-2: and ready", c.get("/images/fleet-img-1").json())
    trait = "CUSTOM_VGPUD_IMAGE_FLEET_IMG_1"
    for pf in (MIXED_PF, EQUAL_PF):
        ok(poll(lambda: trait in p.traits(pf), SYNC, 0.2),
           "DISK-12: %s carries %s for the ready image" % (pf, trait), p.traits(pf))
    ok(not [t for t in placement_api.Placement.traits(p, ROOT_UUID) or ()
            if t.startswith("CUSTOM_VGPUD_IMAGE_")], "DISK-12: the root provider carries none")
    eq(c.request("DELETE", "/images/fleet-img-1").status, 204, "DISK-4: the image is deleted")
    for pf in (MIXED_PF, EQUAL_PF):
        ok(poll(lambda: trait not in p.traits(pf), SYNC, 0.2),
           "DISK-12: %s loses the trait with the image" % pf, p.traits(pf))
    os.unlink(source)


def check_occupied(c, p):
    # FLEET-3 with vGPUs on both cards: a 24Q lands on the mixed card (spread: lower address at
    # equal load), then a 2Q on the now less loaded equal-size card.
    big = create_running(c, "fleet-24q", "NVIDIA L40S-24Q")
    small = create_running(c, "fleet-2q", "NVIDIA L40S-2Q")
    try:
        eq((vf_of(big).startswith("0000:e3:"), vf_of(small).startswith("0001:c8:")), (True, True),
           "PLACE-13: the 24Q is on the mixed card, the 2Q on the equal-size one")
        # Mixed (SIM-9: a 24 GiB vGPU holds slots 0..23): free placements per size are those
        # starting at a multiple of the size in 24..47; 1Q is capped by the 31 free VFs.
        free = {s: len([k for k in range(0, 48, s) if k >= 24 and k + s <= 48]) for s in SIZES}
        free[1] = min(free[1], 31)
        want = {"VGPU": inv(32, 1, 1), "CUSTOM_VGPU_FB_GIB": inv(48, 24, 24)}
        for s, m in SIZES.items():
            want["CUSTOM_VGPU_PLACE_%dG" % s] = inv(m, m - min(free[s], m - (s == 24)), m)
        ok(converges(p, MIXED_PF, want),
           "FLEET-3: mixed card with a 24Q: VGPU reserved 1, FB max_unit 24, per-size "
           "reserved = total - free placements", [p.inventories(MIXED_PF), want])
        # Equal-size: the first 2Q fixes the size class; 23 more 2Q fit, nothing else.
        want = {"VGPU": inv(32, 1, 1), "CUSTOM_VGPU_FB_GIB": inv(48, 2, 2)}
        for s, m in SIZES.items():
            want["CUSTOM_VGPU_PLACE_%dG" % s] = inv(m, 1 if s == 2 else m, m)
        ok(converges(p, EQUAL_PF, want),
           "FLEET-3: equal-size card with a 2Q: only 2G placements left, capped by the "
           "maximum less what the card holds", [p.inventories(EQUAL_PF), want])
    finally:
        for i in (big, small):
            delete(c, i["id"])
    for pf in (MIXED_PF, EQUAL_PF):
        ok(converges(p, pf, fresh_card()), "FLEET-3: %s is empty again after the deletes" % pf,
           p.inventories(pf))


def check_quarantine(c, p):
    vf = [v for g in c.get("/gpus").json()["gpus"] if g["address"] == MIXED_PF
          for v in g["vfs"]][5]["address"]
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": "fleet test"})
    eq(r.status, 200, "API-2: quarantine a VF")
    t0 = time.monotonic()
    ok(poll(lambda: (p.inventories(MIXED_PF) or {}).get("VGPU", {}).get("reserved") == 1,
            SYNC, 0.1), "FLEET-3, FLEET-8: a quarantine raises VGPU reserved within one sync")
    print("# quarantine to reserved in Placement: %.2f s" % (time.monotonic() - t0))
    c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    ok(converges(p, MIXED_PF, fresh_card()), "FLEET-3: clearing it gives the VF back")


def check_drain(c, p):
    r = c.request("POST", "/gpu/gpus/%s/drain" % EQUAL_PF, {"reason": "fleet test"})
    eq(r.status, 200, "HEALTH-26: drain the equal-size card")
    ok(poll(lambda: "CUSTOM_VGPUD_DRAINED" in (p.traits(EQUAL_PF) or ()), SYNC, 0.1),
       "FLEET-4: a drained PF carries CUSTOM_VGPUD_DRAINED")
    ok(poll(lambda: (p.inventories(EQUAL_PF) or {}).get("VGPU", {}).get("reserved") == 32,
            SYNC, 0.1), "FLEET-3: ... and its VFs are reserved")
    ok("CUSTOM_VGPUD_DRAINED" not in p.traits(MIXED_PF), "FLEET-4: the other PF is not drained")
    c.request("DELETE", "/gpu/gpus/%s/drain" % EQUAL_PF)
    ok(poll(lambda: "CUSTOM_VGPUD_DRAINED" not in (p.traits(EQUAL_PF) or {"x"}), SYNC, 0.1),
       "FLEET-4: undrain removes the trait")
    ok(converges(p, EQUAL_PF, fresh_card()), "FLEET-3: ... and the reservation")


def check_conflict(c, p):
    # FLEET-5: a writer behind vgpud's back bumps the generation; vgpud's next PUT meets a 409,
    # re-reads and converges.
    # (Placement bumps the generation only for a real change: an identical PUT is a no-op.)
    # A full run (every sync_interval) that starts between the foreign PUT and vgpud's PUT
    # re-reads the provider first and meets no conflict; that is right too, so the scenario is
    # repeated (a few times at most) until one PUT of vgpud's lands on the stale generation.
    before = metric(fleet_metrics(c), "vgpud_placement_sync_total", result="conflict")
    vf = [v for g in c.get("/gpus").json()["gpus"] if g["address"] == MIXED_PF
          for v in g["vfs"]][7]["address"]
    p.call("PUT", "/traits/CUSTOM_FLEET_TEST_FOREIGN")
    after, attempts = before, 0
    while after <= before and attempts < 4:
        attempts += 1
        b = p.get("/resource_providers/%s/traits" % pf_uuid(MIXED_PF))
        st, after_put = p.call("PUT", "/resource_providers/%s/traits" % pf_uuid(MIXED_PF),
                               {"traits": b["traits"] + ["CUSTOM_FLEET_TEST_FOREIGN"],
                                "resource_provider_generation":
                                    b["resource_provider_generation"]})
        eq((st, (after_put or {}).get("resource_provider_generation")),
           (200, b["resource_provider_generation"] + 1),
           "FLEET-5: a direct PUT bumps the provider's generation")
        c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": "fleet conflict"})
        try:
            ok(poll(lambda: (p.inventories(MIXED_PF) or {}).get("VGPU", {}).get("reserved")
                    == 1, SYNC, 0.1), "FLEET-5: the state converges after the conflict")
            after = metric(fleet_metrics(c), "vgpud_placement_sync_total", result="conflict")
        finally:
            c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
        ok(converges(p, MIXED_PF, fresh_card()), "FLEET-5: ... and follows the next change")
    ok(after > before, "FLEET-5: vgpud_placement_sync_total{result=\"conflict\"} grows",
       (before, after, attempts))
    ok(poll(lambda: "CUSTOM_FLEET_TEST_FOREIGN" not in (p.traits(MIXED_PF) or {"x"}), SYNC, 0.2),
       "FLEET-4, FLEET-5: the full check puts the PF's traits back as vgpud computes them")


def check_disabled(c, p):
    # FLEET-3: while placement is disabled (DISC-7: a failed discovery), every reserved is its
    # total, and every PF is drained (FLEET-4).
    sim_ctl("fault read sys/bus/pci/devices EIO")
    try:
        ok(poll(lambda: "placement_disabled_reason" in c.get("/resources").json()["gpu"], 30,
                0.1), "DISC-7: the failed discovery disables placement")
        for pf in (MIXED_PF, EQUAL_PF):
            ok(poll(lambda: all(x["reserved"] == x["total"]
                                for x in (p.inventories(pf) or {"x": {"reserved": 0,
                                                                      "total": 1}}).values()),
                    SYNC, 0.2), "FLEET-3: placement disabled: every reserved of %s is its total"
               % pf, p.inventories(pf))
            # The sync puts a provider's inventories, then its traits: the trait may follow.
            ok(poll(lambda: "CUSTOM_VGPUD_DRAINED" in (p.traits(pf) or ()), SYNC, 0.2),
               "FLEET-4: placement disabled: %s carries CUSTOM_VGPUD_DRAINED" % pf, p.traits(pf))
    finally:
        sim_ctl("clear-faults")
    for pf in (MIXED_PF, EQUAL_PF):
        ok(converges(p, pf, fresh_card(), 60), "FLEET-3: %s recovers with discovery" % pf,
           p.inventories(pf))


def check_outage(c, p):
    # FLEET-5: a Placement outage never blocks a local operation.
    p.stop()
    ok(poll(lambda: metric(fleet_metrics(c), "vgpud_placement_up") == 0, SYNC, 0.2),
       "FLEET-5: vgpud_placement_up is 0 while placement-api is down")
    t0 = time.monotonic()
    inst = create_running(c, "fleet-outage", "NVIDIA L40S-4Q")
    st, _ = delete(c, inst["id"])
    ok(st in (202, 204), "FLEET-5: a local create and delete work during the outage", st)
    print("# create + delete during the outage: %.2f s" % (time.monotonic() - t0))
    before = metric(fleet_metrics(c), "vgpud_placement_sync_total", result="error")
    ok(before >= 1, "FLEET-5: the failed runs count as result=\"error\"", before)
    ok(p.start(), "placement-api starts again")
    ok(poll(lambda: metric(fleet_metrics(c), "vgpud_placement_up") == 1, SYNC, 0.2),
       "FLEET-5: vgpud_placement_up is 1 once placement-api is back")
    for pf in (MIXED_PF, EQUAL_PF):
        ok(converges(p, pf, fresh_card()), "FLEET-5: %s is in step again" % pf,
           p.inventories(pf))
    fams = fleet_metrics(c)
    ok(metric(fams, "vgpud_placement_last_sync_timestamp_seconds") > time.time() - 120,
       "FLEET-5: vgpud_placement_last_sync_timestamp_seconds is recent")


def check_metrics_families(c):
    fams = fleet_metrics(c)
    f = fams.get("vgpud_placement_sync_total")
    eq(sorted(l["result"] for _, l, _ in f["samples"]) if f else None,
       ["conflict", "error", "ok"], "MET-3: vgpud_placement_sync_total exports every result")
    for name in ("vgpud_placement_last_sync_timestamp_seconds", "vgpud_placement_up"):
        ok(name in fams and fams[name].get("type") == "gauge", "MET-2: %s is a gauge" % name)
    promtool = shutil.which("promtool")
    if promtool:
        text = c.get("/metrics").body.decode()
        r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True)
        ok(r.returncode == 0, "MET-5: promtool accepts /metrics with the placement families",
           r.stdout + r.stderr)
    else:
        skip("MET-5: promtool accepts /metrics with the placement families", "promtool absent")


def check_restart(work, config, secret, sock, daemons, p):
    d = daemons[-1]
    before = {x["uuid"] for x in p.tree()}
    stop(d)
    for pf in (MIXED_PF, EQUAL_PF):
        ok("CUSTOM_VGPUD_DRAINED" in (p.traits(pf) or ()),
           "FLEET-4: %s carries CUSTOM_VGPUD_DRAINED once vgpud has stopped" % pf)
    d, c = start(work, "restarted", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    ok(poll(lambda: all("CUSTOM_VGPUD_DRAINED" not in (p.traits(pf) or {"x"})
                        for pf in (MIXED_PF, EQUAL_PF)), SYNC, 0.2),
       "FLEET-4: the restarted vgpud lifts the drain")
    after = p.get("/resource_providers")["resource_providers"]
    eq({x["uuid"] for x in after}, before,
       "FLEET-2, FLEET-8: a restart changes no uuid and creates no provider")
    stop(d, " (restarted)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-fleet-")
    daemons = []
    p = None
    try:
        p, ready = placement_api.start_checked(work, Placement)
        if not ready:
            return exit_status()
        ok(p.root()["versions"][0]["max_version"] >= "1.39", "FLEET-1: placement offers 1.39")
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s")
        with open(config, "a") as f:
            f.write("placement:\n  url: \"%s\"\n  host_name: %s\n  sync_interval: 5s\n"
                    % (p.url, HOST))
        sock = os.path.join(work, "api.sock")
        d, c = start(work, "main", config, secret, sock)
        daemons.append(d)
        if c:
            run_group("tree", lambda: check_tree(c, p))
            run_group("fresh", lambda: check_fresh(c, p))
            run_group("images", lambda: check_images(c, p))
            run_group("occupied", lambda: check_occupied(c, p))
            run_group("quarantine", lambda: check_quarantine(c, p))
            run_group("drain", lambda: check_drain(c, p))
            run_group("conflict", lambda: check_conflict(c, p))
            run_group("disabled", lambda: check_disabled(c, p))
            run_group("outage", lambda: check_outage(c, p))
            run_group("metrics", lambda: check_metrics_families(c))
            run_group("restart", lambda: check_restart(work, config, secret, sock, daemons, p))
    finally:
        if p:
            p.stop()
        keep = os.environ.get("VGPUD_TEST_KEEP")
        if keep and p:
            shutil.copytree(p.dir, os.path.join(keep, "placement"), dirs_exist_ok=True)
        finish(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
