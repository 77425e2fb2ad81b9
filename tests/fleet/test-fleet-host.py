#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-fleet-host.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# FLEET-6, the host side of a Placement allocation: vgpud on SIM-20's host (a mixed-size and an
# equal-size L40S) against a real placement-api (python3-placement, sqlite, noauth2) on
# loopback. The test writes allocations as a scheduler would (FLEET-3's classes in one request,
# PUT /allocations/{consumer}) and checks: a create with the placement key lands on that PF and
# shows the consumer (API-7, INST-2), VGPU reserved does not count it twice (FLEET-3); a create
# naming an unknown or full PF is 409 with the PF named and the allocation left for the
# scheduler; a delete, and a create rolled back after vgpud took it on (INST-14), delete the
# allocation within one sync; the orphan audit deletes an allocation no record names once
# placement.orphan_grace has passed and never one younger or one a record names (Stopped
# included); a restart keeps a Running instance's allocation; a host without placement.url
# refuses the key. Runs under tests/sim/run-sim-test.sh; everything it starts it stops by pid.
import json
import os
import shutil
import sys
import tempfile
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import placement_api  # noqa: E402
from vgpud_instances import (  # noqa: E402
    EQUAL_PF, INSTANCES, MIXED_PF, body, delete, make_images, post, request, vf_of, vmm_config,
    wait_state)
from vgpud_test import (  # noqa: E402
    eq, exit_status, finish, metric, ok, parse_metrics, poll, run_group, sim_ctl, start, stop,
    write_secret)

HOST = "fleet-host-6"
SYNC = 40          # seconds a change may take to reach Placement: generous, the machine is shared
GRACE = 15         # placement.orphan_grace, three sync intervals
INTERVAL = 5       # placement.sync_interval (its minimum)
PROFILE_2Q = "NVIDIA L40S-2Q"
PROJECT = "5e1c1f0a-6a8b-4e3c-9d52-7f0d3c1b2a10"
USER = "5e1c1f0a-6a8b-4e3c-9d52-7f0d3c1b2a11"


def pf_uuid(pf):
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "vgpud:%s:%s" % (HOST, pf)))


class Placement(placement_api.Placement):
    """The helper's client, with a scheduler's allocation calls."""

    def allocate(self, consumer, pf, gib=2):
        """FLEET-3's request for one vGPU of gib GiB, written as a scheduler does before it
        calls the host; the status (204 when written)."""
        st, b = self.call("PUT", "/allocations/" + consumer, {
            "allocations": {pf_uuid(pf): {"resources": {
                "VGPU": 1, "CUSTOM_VGPU_FB_GIB": gib, "CUSTOM_VGPU_PLACE_%dG" % gib: 1}}},
            "project_id": PROJECT, "user_id": USER, "consumer_generation": None,
            "consumer_type": "INSTANCE"})
        return st, b

    def allocations(self, consumer):
        """The consumer's allocations by provider uuid ({} when it has none)."""
        b = self.get("/allocations/" + consumer)
        return b.get("allocations", {}) if b is not None else None

    def has(self, consumer):
        return bool(self.allocations(consumer))

    def forget(self, consumer):
        self.call("DELETE", "/allocations/" + consumer)

    def usage(self, pf, rc="VGPU"):
        b = self.get("/resource_providers/%s/usages" % pf_uuid(pf))
        return b["usages"].get(rc, 0) if b else None

    def reserved(self, pf, rc="VGPU"):
        return ((self.inventories(pf_uuid(pf)) or {}).get(rc) or {}).get("reserved")


def consumer():
    return str(uuid.uuid4())


def placed_body(name, cons, pf, profile=PROFILE_2Q):
    return body(name, profile, placement={"consumer": cons, "gpu": pf})


def create(c, name, cons, pf, profile=PROFILE_2Q):
    return request(c, "POST", "/instances", placed_body(name, cons, pf, profile))


def disk_record(iid):
    try:
        with open(os.path.join(INSTANCES, iid, "instance.json")) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def fleet_metrics(c):
    return parse_metrics(c.get("/metrics").body.decode())


def wait_ready_providers(p):
    """Both PF providers exist with their inventories (the first full sync has run)."""
    return poll(lambda: all(p.reserved(pf) is not None for pf in (MIXED_PF, EQUAL_PF)), SYNC, 0.2)


# ---- FLEET-6: the create key, the record, API-7, FLEET-3's reserved ---------------------------


def check_create(c, p, state):
    ok(wait_ready_providers(p), "FLEET-2: both PF providers are in Placement")
    cons = consumer()
    st, _ = p.allocate(cons, MIXED_PF)
    eq(st, 204, "FLEET-6: the scheduler's allocation against the mixed PF is written")
    st, b = create(c, "placed-01", cons, MIXED_PF)
    ok(st == 201 and b.get("state") == "Running", "FLEET-6: a create with the placement key is "
       "201 Running", (st, b))
    if st != 201:
        return
    state["running"] = (b["id"], cons)
    eq(b.get("placement"), {"consumer": cons, "gpu": MIXED_PF},
       "FLEET-6, API-7: the instance JSON shows placement.consumer and placement.gpu")
    ok(vf_of(b).startswith("0000:e3:"), "FLEET-6: the claim is on the allocation's PF", vf_of(b))
    eq((disk_record(b["id"]) or {}).get("placement"), {"consumer": cons, "gpu": MIXED_PF},
       "FLEET-6, INST-2: instance.json holds placement.consumer and placement.gpu")
    listed = [i for i in c.get("/instances").json() if i["id"] == b["id"]]
    eq(listed and listed[0].get("placement"), {"consumer": cons, "gpu": MIXED_PF},
       "API-7: GET /instances shows the consumer too")

    # spread would put this 2Q on the equal-size card (the mixed one carries a 2Q now); the
    # allocation says mixed, so it goes there.
    cons2 = consumer()
    p.allocate(cons2, MIXED_PF)
    st, b2 = create(c, "placed-02", cons2, MIXED_PF)
    ok(st == 201 and vf_of(b2).startswith("0000:e3:"),
       "FLEET-6: the claim considers only the named PF, whatever the ranking prefers",
       (st, b2.get("gpu")))
    if st == 201:
        delete(c, b2["id"])
        ok(poll(lambda: not p.has(cons2), SYNC, 0.2),
           "FLEET-6, INST-14: deleting it deletes its allocation within one sync")

    # FLEET-3: a VF held for a consumer is in Placement's usage, not in reserved as well; a
    # plain local instance on the same PF is reserved.
    ok(poll(lambda: p.usage(MIXED_PF) == 1, SYNC, 0.2), "FLEET-3: VGPU usage 1 on the PF",
       p.usage(MIXED_PF))
    # (spread would take the idle equal-size card for it: drained, it cannot.)
    r = c.request("POST", "/gpu/gpus/%s/drain" % EQUAL_PF, {"reason": "fleet-6 local 2Q"})
    eq(r.status, 200, "HEALTH-26: drain the equal-size card for a moment")
    try:
        st, local = request(c, "POST", "/instances", body("local-01", PROFILE_2Q))
    finally:
        c.request("DELETE", "/gpu/gpus/%s/drain" % EQUAL_PF)
    ok(st == 201 and vf_of(local).startswith("0000:e3:"), "a plain 2Q on the mixed card", local)
    try:
        ok(poll(lambda: p.reserved(MIXED_PF) == 1, SYNC, 0.2),
           "FLEET-3: with a consumer's vGPU and a local one on the PF, VGPU reserved is 1, not 2",
           p.inventories(pf_uuid(MIXED_PF)))
    finally:
        if st == 201:
            delete(c, local["id"])
    ok(poll(lambda: p.reserved(MIXED_PF) == 0, SYNC, 0.2),
       "FLEET-3: the consumer's vGPU alone reserves nothing", p.reserved(MIXED_PF))


def check_refusals(c, p):
    cons = consumer()
    p.allocate(cons, MIXED_PF)
    try:
        # A PF this host does not have.
        st, b = create(c, "placed-nopf", cons, "0000:99:00.0")
        ok(st == 409 and b.get("code") == "insufficient_resources" and
           "0000:99:00.0" in b.get("message", ""),
           "FLEET-6: a PF the host lacks is 409 insufficient_resources naming it", (st, b))
        # A PF with no room: drained, none of its VFs is allocatable.
        r = c.request("POST", "/gpu/gpus/%s/drain" % EQUAL_PF, {"reason": "fleet-6 full PF"})
        eq(r.status, 200, "HEALTH-26: drain the equal-size card")
        try:
            st, b = create(c, "placed-full", cons, EQUAL_PF)
            ok(st == 409 and b.get("code") == "insufficient_resources" and
               EQUAL_PF in b.get("message", ""),
               "FLEET-6: a PF without room is 409 insufficient_resources naming it", (st, b))
        finally:
            c.request("DELETE", "/gpu/gpus/%s/drain" % EQUAL_PF)
        ok(not [i for i in c.get("/instances").json() if i["name"].startswith("placed-")
                and i["name"] in ("placed-nopf", "placed-full")],
           "INST-12: the refused creates leave no record")
        ok(p.has(cons), "FLEET-6: a refused create leaves the allocation to the scheduler "
           "(FLEET-7 moves it)", p.allocations(cons))

        # The strict body (API-9, INST-7).
        for bad, why in (({"consumer": cons.upper(), "gpu": MIXED_PF}, "placement.consumer"),
                         ({"consumer": cons}, "placement.gpu is required"),
                         ({"consumer": cons, "gpu": "e3:00.0"}, "placement.gpu"),
                         ({"consumer": cons, "gpu": MIXED_PF, "vf": "x"}, "placement.vf")):
            st, b = request(c, "POST", "/instances", body("placed-bad", PROFILE_2Q,
                                                          placement=bad))
            ok(st == 400 and b.get("code") == "invalid_request" and why in b.get("message", ""),
               "FLEET-6, INST-7: %s is 400 invalid_request naming %s" % (json.dumps(bad), why),
               (st, b))
        st, b = request(c, "POST", "/instances", body("placed-bad", None,
                                                      placement={"consumer": cons,
                                                                 "gpu": MIXED_PF}))
        ok(st == 400 and "placement needs gpu.profile" in b.get("message", ""),
           "FLEET-6: placement without gpu is 400", (st, b))
    finally:
        p.forget(cons)


def check_duplicate(c, p, state):
    if "running" not in state:
        ok(False, "FLEET-6: a consumer is held once (no running instance to test with)")
        return
    _, cons = state["running"]
    st, b = create(c, "placed-twice", cons, MIXED_PF)
    ok(st == 409 and b.get("code") == "already_exists" and cons in b.get("message", ""),
       "FLEET-6: a second create for a consumer an instance holds is 409 already_exists",
       (st, b))
    ok(p.has(cons), "FLEET-6: ... and the allocation stays the first instance's")


# ---- INST-14: rollbacks --------------------------------------------------------------------


def check_rollback(c, p):
    # A create vgpud took on and then failed (the VMM exits before QMP is ready: 500): the
    # allocation goes with it.
    cons = consumer()
    p.allocate(cons, EQUAL_PF)
    sim_ctl("qemu placed-early exit-early:0")
    try:
        st, b = create(c, "placed-early", cons, EQUAL_PF)
    finally:
        sim_ctl("clear-faults")
    ok(st == 500 and b.get("code") == "internal", "VMM-5: the create fails with 500", (st, b))
    ok(poll(lambda: not p.has(cons), SYNC, 0.2),
       "FLEET-6, INST-14: the rolled-back create's allocation is deleted within one sync",
       p.allocations(cons))

    # A create refused after its claim (both type writes fail: PLACE-17's 409) is a refusal:
    # the allocation stays for the scheduler to move.
    cons = consumer()
    p.allocate(cons, EQUAL_PF)
    sim_ctl("fault write sys/bus/pci/devices/0001:c8:*/nvidia/current_vgpu_type EIO")
    try:
        st, b = create(c, "placed-refused", cons, EQUAL_PF)
    finally:
        sim_ctl("clear-faults")
    try:
        ok(st == 409 and b.get("code") == "insufficient_resources",
           "PLACE-17: two refused type writes are 409 insufficient_resources", (st, b))
        # One more sync must not take it: wait for the next full run's end.
        runs = metric(fleet_metrics(c), "vgpud_placement_sync_total", result="ok")
        poll(lambda: metric(fleet_metrics(c), "vgpud_placement_sync_total", result="ok")
             >= runs + 2, SYNC, 0.2)
        ok(p.has(cons), "FLEET-6: after a 409 the allocation is left to the scheduler",
           p.allocations(cons))
    finally:
        p.forget(cons)


# ---- the orphan audit ----------------------------------------------------------------------


def check_audit(c, p, state):
    # A Stopped instance holds its consumer too: the audit must keep its allocation.
    stopped = consumer()
    p.allocate(stopped, EQUAL_PF)
    st, b = create(c, "placed-stopped", stopped, EQUAL_PF)
    ok(st == 201, "a consumer's instance to stop", (st, b))
    if st == 201:
        st, _ = post(c, b["id"], "stop")
        ok(st == 200 and wait_state(c, b["id"], "Stopped"), "INST-15: it stops", st)
        state["stopped"] = (b["id"], stopped)

    before = metric(fleet_metrics(c), "vgpud_placement_orphan_allocations_deleted_total")
    orphan = consumer()
    st, _ = p.allocate(orphan, MIXED_PF)
    eq(st, 204, "FLEET-6: an allocation no local record names is written")
    t0 = time.monotonic()
    last_seen = [t0]

    def gone():
        if p.has(orphan):
            last_seen[0] = time.monotonic()
            return False
        return True

    ok(poll(gone, GRACE + 3 * INTERVAL + SYNC, 0.25),
       "FLEET-6: the orphan audit deletes an allocation no record names")
    young = last_seen[0] - t0
    print("# orphan allocation kept %.1f s, placement.orphan_grace %d s" % (young, GRACE))
    ok(young >= GRACE - 1.5, "FLEET-6: ... and not before placement.orphan_grace (it outlived "
       "at least two full syncs while younger)", young)
    ok(metric(fleet_metrics(c), "vgpud_placement_orphan_allocations_deleted_total") >= before + 1,
       "FLEET-6: vgpud_placement_orphan_allocations_deleted_total counts it")
    ok(p.has(stopped), "FLEET-6: a Stopped instance's allocation is never an orphan",
       p.allocations(stopped))
    if "running" in state:
        ok(p.has(state["running"][1]), "FLEET-6: nor a Running instance's")


def check_metric_family(c):
    fams = fleet_metrics(c)
    f = fams.get("vgpud_placement_orphan_allocations_deleted_total")
    ok(f is not None and f.get("type") == "counter",
       "MET-2: vgpud_placement_orphan_allocations_deleted_total is a counter", f)


# ---- restart and a host outside the fleet --------------------------------------------------


def check_restart(work, config, plain, secret, sock, daemons, p, state):
    d = daemons[-1]
    stop(d)
    # vgpud without placement.url: the key is refused with a 409 that says why.
    d, c = start(work, "no-fleet", plain, secret, sock)
    daemons.append(d)
    if c:
        st, b = create(c, "placed-outside", consumer(), MIXED_PF)
        ok(st == 409 and b.get("code") == "invalid_state" and "placement.url" in
           b.get("message", ""), "FLEET-6: a host without placement.url refuses the key with 409 "
           "invalid_state naming placement.url", (st, b))
        stop(d, " (no fleet)")
    d, c = start(work, "restarted", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    t0 = time.monotonic()
    # A positive control: an orphan written now is deleted inside the window watched below.
    orphan = consumer()
    p.allocate(orphan, MIXED_PF)
    held = [x for x in (state.get("running"), state.get("stopped")) if x]
    kept = [cons for _, cons in held]

    def watch():
        if not all(p.has(k) for k in kept):
            return True
        return not p.has(orphan) and time.monotonic() - t0 > GRACE + 2 * INTERVAL

    poll(watch, GRACE + 3 * INTERVAL + SYNC, 0.25)
    ok(not p.has(orphan), "FLEET-6: after the restart the audit runs (a new orphan is deleted)")
    for k in kept:
        ok(p.has(k), "FLEET-6: a restart keeps the allocation of a consumer's instance", k)
    # The end: deleting both instances deletes both allocations.
    for iid, cons in held:
        st, _ = delete(c, iid)
        eq(st, 204, "INST-18: delete the consumer's instance")
        ok(poll(lambda: not p.has(cons), SYNC, 0.2),
           "FLEET-6: the deleted instance's allocation is gone within one sync")
    stop(d, " (restarted)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-fleet-host-")
    daemons = []
    p = None
    try:
        p, ready = placement_api.start_checked(work, Placement)
        if not ready:
            return exit_status()
        make_images()
        secret = write_secret(work)
        plain = vmm_config(os.path.join(work, "plain.yaml"), work, reconcile="5s")
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s")
        with open(config, "a") as f:
            f.write("placement:\n  url: \"%s\"\n  host_name: %s\n  sync_interval: %ds\n"
                    "  orphan_grace: %ds\n" % (p.url, HOST, INTERVAL, GRACE))
        sock = os.path.join(work, "api.sock")
        d, c = start(work, "main", config, secret, sock)
        daemons.append(d)
        state = {}
        if c:
            run_group("create", lambda: check_create(c, p, state))
            run_group("refusals", lambda: check_refusals(c, p))
            run_group("duplicate", lambda: check_duplicate(c, p, state))
            run_group("rollback", lambda: check_rollback(c, p))
            run_group("audit", lambda: check_audit(c, p, state))
            run_group("metrics", lambda: check_metric_family(c))
            run_group("restart", lambda: check_restart(work, config, plain, secret, sock, daemons,
                                                       p, state))
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
