#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-api-cache.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# PERF-1's kept bodies: /resources, /gpus and the resource gauges of /metrics are rendered once
# per change of what they show and served from memory, so each kind of change must show in the
# very next read. For each, the change is made, its acknowledgement awaited (the API's answer,
# or a bounded wait for the daemon's own log line that the change was taken in, or a bounded
# poll on one route), and then the three bodies are read at once, with no poll, and must show
# it (API-4, API-5, API-6, API-22, MET-2, MET-4):
#   - an operator quarantine and its clear (API-18);
#   - a drain and its undrain (HEALTH-26);
#   - a create whose configure is held back: the claim shows while the VF is still unconfigured
#     (the claim flow's and the instance records' overlays, not a discovery), then the VM runs,
#     then the delete (INST-12, INST-17);
#   - an NVML refresh that falls back and then recovers (NVML-11, NVML-13, PLACE-21);
#   - a discovery change: a VF configured behind vgpud's back and held open, which a pass finds
#     dirty and leaves (REC-6), then resets once it is closed;
#   - a discovery failure (DISC-7): placement_disabled_reason, and its end.
# Runs under tests/sim/run-sim-test.sh on SIM-20's host, with fake-qemu as the VMM.
import json
import os
import sys
import tempfile
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_instances import (  # noqa: E402
    PROFILE, create, current_type, delete, make_images, vf_of, vmm_config)
from vgpud_test import (  # noqa: E402
    CATALOG, configure, configure_held, eq, exit_status, figures, finish, log_count, metric, ok,
    parse_metrics, poll, read_creatable, run_group, sim_ctl, sim_state, start, stop, truth,
    write_secret)

MIXED_PF = "0000:e3:00.0"
EQUAL_PF = "0001:c8:00.0"
FREE_VF = "0000:e3:01.0"  # a VF of the mixed-size L40S that nothing else here claims
TYPE_2Q = 1148
KINDS = ("total", "used", "allocatable", "quarantined")
STATES = ("free", "reserved", "claimed", "dirty", "quarantined", "uncertain", "unreadable")


def bodies(c):
    """The three bodies, read one right after the other: (/resources' gpu, /gpus' gpus, the
    parsed /metrics)."""
    r = c.get("/resources")
    g = c.get("/gpus")
    m = c.get("/metrics")
    eq((r.status, g.status, m.status), (200, 200, 200), "API-2: the three reads answer 200")
    return r.json()["gpu"], g.json()["gpus"], parse_metrics(m.body.decode())


def vf_entry(gpus, vf):
    return [v for g in gpus for v in g["vfs"] if v["address"] == vf][0]


def gpu_entry(gpus, pf):
    return [g for g in gpus if g["address"] == pf][0]


def settled(c):
    """The three bodies read with no change in between: /resources read again after them
    answers the same bytes (a refresh or a pass may land between two reads)."""
    def once():
        first = c.get("/resources").body
        g, m = c.get("/gpus"), c.get("/metrics")
        if c.get("/resources").body != first:
            return None
        return (json.loads(first)["gpu"], g.json()["gpus"], parse_metrics(m.body.decode()))
    return poll(once, 20, 0.05)


def agree(c, res, gpus, fams, label):
    """MET-4: the gauges say what /resources and /gpus say, read together with no change. The
    bodies read at once after a change are taken as they are unless /resources moved since;
    then a settled set is read."""
    if c.get("/resources").json()["gpu"] != res:
        got = settled(c)
        if not ok(bool(got), "MET-4 (%s): the state settles for a joint read" % label):
            return
        res, gpus, fams = got
    got = {k: metric(fams, "vgpud_resources_gpu_slots", kind=k) for k in KINDS}
    want = {k: float(res[k + "_slots"]) for k in KINDS}
    eq(got, want, "MET-4 (%s): vgpud_resources_gpu_slots are /resources' slots" % label)
    got = {l["profile"]: v for _, l, v in fams["vgpud_resources_gpu_profile_slots"]["samples"]}
    want = {p["name"]: float(p["available"]) for p in res["profiles"]}
    eq(got, want, "MET-4 (%s): vgpud_resources_gpu_profile_slots are /resources' profiles" % label)
    counts = {s: 0.0 for s in STATES}
    for g in gpus:
        for v in g["vfs"]:
            counts["uncertain" if v.get("uncertain") else v["state"]] += 1
    eq({s: metric(fams, "vgpud_resources_gpu_vfs", state=s) for s in STATES}, counts,
       "MET-4 (%s): vgpud_resources_gpu_vfs counts /gpus' VF states" % label)
    eq(metric(fams, "vgpud_resources_gpu_placement_disabled"),
       1.0 if "placement_disabled_reason" in res else 0.0,
       "MET-2 (%s): the placement_disabled gauge follows /resources" % label)


def slots(res):
    return {k: res[k + "_slots"] for k in KINDS}


def prime(c):
    """Reads the three bodies, so that each is kept for the state as it is now: a change that
    moved no counter would then be served stale by the next read, which the checks catch."""
    for path in ("/resources", "/gpus", "/metrics"):
        c.get(path)


def log_line_after(c, d, pattern, seen, timeout=40):
    """Waits (bounded) until pattern matches more log lines than seen: the daemon's own word
    that the change was taken in, written in the loop turn that made it. The bodies are read
    all along (prime())."""
    return poll(lambda: prime(c) or log_count(d, pattern) > seen, timeout, 0.02)


def check_quarantine(c, d, base):
    # API-18: the 200 means the quarantine is applied (and durable); the next reads show it.
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % FREE_VF, {"reason": "kept bodies"})
    eq(r.status, 200, "API-18: the operator quarantine is acknowledged")
    res, gpus, fams = bodies(c)
    eq(vf_entry(gpus, FREE_VF)["state"], "quarantined",
       "API-6, PERF-1: /gpus shows the quarantine at once")
    eq(slots(res), dict(base, quarantined=base["quarantined"] + 1,
                        allocatable=base["allocatable"] - 1),
       "API-5, PERF-1: /resources counts it at once")
    agree(c, res, gpus, fams, "quarantined")

    r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % FREE_VF)
    eq(r.status, 200, "API-18: the clear is acknowledged")
    res, gpus, fams = bodies(c)
    eq(vf_entry(gpus, FREE_VF)["state"], "free", "API-6, PERF-1: /gpus shows the clear at once")
    eq(slots(res), base, "API-5, PERF-1: /resources is back at once")
    agree(c, res, gpus, fams, "cleared")


def check_drain(c, d, base):
    # HEALTH-26: a drain marks the PF; its VFs show as quarantined.
    r = c.request("POST", "/gpu/gpus/%s/drain" % EQUAL_PF, {"reason": "kept bodies"})
    eq(r.status, 200, "API-18: the drain is acknowledged")
    res, gpus, fams = bodies(c)
    g = gpu_entry(gpus, EQUAL_PF)
    eq(g.get("drained", {}).get("reason"), "kept bodies",
       "HEALTH-26, PERF-1: /gpus shows the drain mark at once")
    eq({v["state"] for v in g["vfs"]}, {"quarantined"},
       "HEALTH-26, PERF-1: ... and every VF of the PF as quarantined")
    n = len(g["vfs"])
    eq(slots(res), dict(base, quarantined=base["quarantined"] + n,
                        allocatable=base["allocatable"] - n),
       "API-5, PERF-1: /resources counts the drained PF's VFs at once")
    agree(c, res, gpus, fams, "drained")

    r = c.request("DELETE", "/gpu/gpus/%s/drain" % EQUAL_PF)
    eq(r.status, 200, "API-18: the undrain is acknowledged")
    res, gpus, fams = bodies(c)
    g = gpu_entry(gpus, EQUAL_PF)
    ok("drained" not in g and {v["state"] for v in g["vfs"]} == {"free"},
       "HEALTH-26, PERF-1: /gpus shows the undrain at once", g)
    eq(slots(res), base, "API-5, PERF-1: /resources is back at once")
    agree(c, res, gpus, fams, "undrained")


def listed(c, name):
    for i in c.get("/instances").json():
        if i["name"] == name:
            return i
    return None


def check_create_delete(c, d, base):
    # INST-12: the claim is saved before the VF is configured. With the configure write held
    # back, the claim shows in /gpus and /resources while sysfs still reads 0: the claim flow's
    # and the records' overlays, which no discovery reports.
    sim_ctl("fault write sys/*/nvidia/current_vgpu_type delay:6000 count=1")
    answer = []
    t = threading.Thread(target=lambda: answer.append(create(c, "kept-01", PROFILE)))
    t.start()
    try:
        inst = poll(lambda: prime(c) or (
            lambda i: i and "device_path" in i.get("gpu", {}) and i)(listed(c, "kept-01")),
            30, 0.02)
        ok(bool(inst), "INST-12, API-8: GET /instances shows the saved claim", inst)
        if inst:
            vf = vf_of(inst)
            res, gpus, fams = bodies(c)
            configured = current_type(vf)
            v = vf_entry(gpus, vf)
            eq((v["state"], v.get("instance_id")), ("claimed", inst["id"]),
               "API-6, PERF-1: /gpus shows the claim with its instance at once")
            eq(res["used_slots"], base["used"] + 1, "API-5, PERF-1: /resources counts it at once")
            eq(configured, "0", "INST-12: ... while the VF is not configured yet (so no "
               "discovery can have shown it)")
            agree(c, res, gpus, fams, "claimed")
    finally:
        t.join(60)
    st, b = answer[0] if answer else (None, None)
    ok(st == 201 and b.get("state") == "Running", "INST-12: the create completes, Running",
       (st, b))
    if st != 201:
        return
    vf = vf_of(b)
    res, gpus, fams = bodies(c)
    eq(vf_entry(gpus, vf)["state"], "claimed", "API-6: the running VM's VF is claimed")
    agree(c, res, gpus, fams, "running")

    st, _ = delete(c, b["id"])
    eq(st, 204, "INST-17: the delete is acknowledged")
    res, gpus, fams = bodies(c)
    v = vf_entry(gpus, vf)
    ok(v["state"] == "free" and "instance_id" not in v,
       "API-6, PERF-1: /gpus shows the released VF free at once", v)
    eq(slots(res), base, "API-5, PERF-1: /resources' slots are back at once")
    agree(c, res, gpus, fams, "deleted")


def passes(d):
    return log_count(d, r"<7>reconcile pass done .*")


def sysfs_availability():
    """PLACE-21 with every GPU on its sysfs lists: free VFs whose list names P."""
    avail = {name: 0 for name in CATALOG}
    for gpu in sim_state()["gpus"]:
        for v in gpu["vfs"]:
            if v["type"] == 0:
                for _, name in read_creatable(v["address"]):
                    avail[name] = avail.get(name, 0) + 1
    return avail


def check_nvml(c, d, base):
    # Two full passes first, so the tracker's sysfs lists are the simulator's (the release
    # above re-read only the types, DISC-20).
    seen = passes(d)
    ok(poll(lambda: passes(d) >= seen + 2, 40, 0.05), "two reconcile passes run")
    before, _, _ = bodies(c)
    warn = (r'<4>NVML placements fall back to sysfs lists gpu=%s reason=error .*' % MIXED_PF)
    recovered = r'<6>NVML placements recovered gpu=%s' % MIXED_PF
    seen_warn, seen_recovered = log_count(d, warn), log_count(d, recovered)
    sim_ctl("nvml error nvmlDeviceGetVgpuTypeCreatablePlacements GPU_IS_LOST")
    try:
        ok(log_line_after(c, d, warn, seen_warn),
           "NVML-13: a refresh falls back with reason error, and says so")
        res, gpus, fams = bodies(c)
        eq(gpu_entry(gpus, MIXED_PF)["nvml"], "error",
           "API-6, PERF-1: /gpus shows the fallback at once")
        eq(figures({"gpu": res})["available"], sysfs_availability(),
           "PLACE-21, PERF-1: /resources' availability follows the sysfs lists at once")
        ok(figures({"gpu": res})["available"] != figures({"gpu": before})["available"],
           "PLACE-21: ... which differ from NVML's placements")
        agree(c, res, gpus, fams, "NVML fallback")
    finally:
        sim_ctl("nvml error nvmlDeviceGetVgpuTypeCreatablePlacements SUCCESS")
    ok(log_line_after(c, d, recovered, seen_recovered),
       "NVML-13: the next refresh recovers, and says so")
    res, gpus, fams = bodies(c)
    eq(gpu_entry(gpus, MIXED_PF)["nvml"], "ok", "API-6, PERF-1: /gpus shows the recovery at once")
    eq(figures({"gpu": res}), truth(), "PLACE-21, PERF-1: /resources is NVML's figures at once")
    agree(c, res, gpus, fams, "NVML recovered")


def check_discovery(c, d, base):
    # REC-6: a VF configured behind vgpud's back and held open is found dirty and left; the
    # pass logs it after its discovery has been folded in.
    held = r'<4>dirty VF held open without a claim; left.* vf=%s.*' % FREE_VF
    seen = log_count(d, held)
    node = configure_held(FREE_VF, TYPE_2Q)
    try:
        ok(log_line_after(c, d, held, seen), "REC-6: the pass finds the dirty VF held open",
           [l for l in d.log_text().splitlines() if "held open" in l][-3:])
        res, gpus, fams = bodies(c)
        v = vf_entry(gpus, FREE_VF)
        eq((v["state"], v.get("profile")), ("dirty", PROFILE),
           "API-6, PERF-1: /gpus shows the discovered type at once")
        eq(slots(res), dict(base, used=base["used"] + 1, allocatable=base["allocatable"] - 1),
           "API-5, PERF-1: /resources counts the dirty VF at once")
        agree(c, res, gpus, fams, "dirty")
    finally:
        node.close()
    # Closed, a later pass resets it (REC-6), then re-reads the host (DISC-20): one route
    # polled, the other two read right after it.
    ok(poll(lambda: c.get("/resources").json()["gpu"]["used_slots"] == base["used"], 40, 0.02),
       "REC-6: once closed, a pass resets the VF")
    res, gpus, fams = bodies(c)
    eq(vf_entry(gpus, FREE_VF)["state"], "free", "API-6, PERF-1: /gpus agrees at once")
    eq(slots(res), base, "API-5: /resources is back")
    agree(c, res, gpus, fams, "reset")


def check_discovery_failure(c, d, base):
    # DISC-7: a failed discovery keeps the last table and disables placement, with its text.
    failed = r"<3>GPU discovery failed; keeping the last VF table .*"
    again = r"<6>GPU discovery succeeded again"
    seen_failed, seen_again = log_count(d, failed), log_count(d, again)
    sim_ctl("fault read sys/bus/pci/devices EIO")
    try:
        ok(log_line_after(c, d, failed, seen_failed), "DISC-7: a pass's discovery fails, logged")
        res, gpus, fams = bodies(c)
        ok(bool(res.get("placement_disabled_reason")),
           "API-5, PERF-1: /resources has the placement_disabled_reason at once", res)
        eq((res["allocatable_slots"], {p["available"] for p in res["profiles"]}), (0, {0}),
           "API-5, PERF-1: ... with nothing allocatable")
        agree(c, res, gpus, fams, "discovery failed")
    finally:
        sim_ctl("clear-faults")
    ok(log_line_after(c, d, again, seen_again), "DISC-7: the next discovery succeeds, logged")
    res, gpus, fams = bodies(c)
    ok("placement_disabled_reason" not in res and slots(res) == base,
       "API-5, PERF-1: /resources is enabled again at once", res)
    agree(c, res, gpus, fams, "discovery back")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-api-cache-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s")
        d, c = start(work, "main", config, secret, os.path.join(work, "api.sock"))
        daemons.append(d)
        if not c:
            return exit_status()
        # The catalog truth() counts over, read from the empty host.
        for type_id, name in read_creatable(FREE_VF):
            CATALOG[name] = type_id
        res, gpus, fams = bodies(c)
        base = slots(res)
        eq(figures({"gpu": res}), truth(), "API-5: /resources is the simulator's host")
        agree(c, res, gpus, fams, "start")
        again = [c.get(p).body for p in ("/resources", "/gpus")]
        eq(again, [c.get(p).body for p in ("/resources", "/gpus")],
           "PERF-1: with no change, the same bytes again")

        run_group("quarantine", lambda: check_quarantine(c, d, base))
        run_group("drain", lambda: check_drain(c, d, base))
        run_group("create-delete", lambda: check_create_delete(c, d, base))
        run_group("nvml", lambda: check_nvml(c, d, base))
        run_group("discovery", lambda: check_discovery(c, d, base))
        run_group("discovery-failure", lambda: check_discovery_failure(c, d, base))
        stop(d)
    finally:
        finish(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
