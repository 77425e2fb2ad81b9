#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-scenarios.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# REL-4's scenario tests against the real vgpud on a mounted vgpu-sim (SIM-20's host) with
# fake-qemu as the VMM, in run-sim-test.sh's private PID namespace (SIM-21). One daemon serves
# five groups, each of which leaves the host as it found it:
#
#  - sriov: an SR-IOV cycle (SIM-14 `sriov <pf> off|on`) of the equal-size L40S while two
#    Stopped instances hold claims on it and a third instance runs on the other GPU. A stop
#    releases its VF (INST-15), so a Stopped instance holds a claim only when the driver refused
#    the release: the simulator's release lag makes it refuse. While the VFs are there, REC-4
#    cannot release those claims either (REC-5) and no create gets their VFs; once they are gone,
#    a release reads the missing current_vgpu_type as released (DEV-8, DISC-21), so a pass clears
#    the claims and the records stay Stopped; after `on` each start takes a new claim
#    (INST-17). The running instance on the other GPU is untouched throughout;
#  - sriov-mode: `sriov off` resets the card to equal-size (SIM-14): vgpud follows the mode
#    change and back (NVML-7, NVML-13);
#  - corrupt: the health file overwritten with garbage behind vgpud's back, noticed by the 5 s
#    poll (HEALTH-32) or by the next mutation (HEALTH-22, HEALTH-23), never rewritten by vgpud
#    (HEALTH-17), and repaired by the operator, which HEALTH-21's repair loads without a restart;
#  - hand-edit: a hand edit of the health file followed at once by an API mutation, which is
#    written on top of the edit, not over it (HEALTH-22), with HEALTH-8's re-evaluation;
#  - nvml-hang: `nvml hang on` during 20 concurrent claims on the mixed-size L40S (PLACE-8,
#    NVML-9, NVML-10, NVML-11, NVML-12, NVML-13, API-16), then `nvml hang off`.
#
# After each group no VF is configured without a claim, none is claimed twice and /gpus agrees
# (vgpud_instances.check_claims), and the simulator saw no forbidden write (DEV-18), no
# overlapping writes on a VF (DEV-11) and, without an NVML hang, no NVML query overlapping a
# write to its GPU (PLACE-9). The other two REL-4 scenarios, a VMM that ignores SIGTERM and a
# daemon restart during each lifecycle operation, are test-instances-matrix.py's and
# test-instances-restart.py's.
import errno
import json
import os
import re
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    HEALTH_FILE, eq, exit_status, gpu_body, metric, ok, parse_metrics, poll, run_group, sim_state,
    start, stop, timed_get, write_secret)
from vgpud_instances import (  # noqa: E402
    EQUAL_PF, MIXED_PF, PROFILE, alive, check_claims, configured_vfs, create, create_running,
    current_type, delete, delete_all, disk_claims, finish_run, get, log_has, make_images, pid_of,
    post, record, vf_of, vmm_config)

# gpu.nvml_timeout: small, so a hung NVML call costs the claims little, yet above what a whole
# cache refresh of the fake NVML takes on a loaded 2-core machine (1s was seen to time out).
NVML_TIMEOUT = "2s"


def ctl(command):
    """One .sim/ctl command (SIM-14); 0 or the errno the simulator refused it with."""
    fd = os.open(os.path.join(os.environ["VGPU_SIM_CONTROL"], "ctl"), os.O_WRONLY)
    try:
        os.write(fd, command.encode())
        return 0
    except OSError as e:
        return e.errno
    finally:
        os.close(fd)


def passes(d):
    """REC-11's lines so far."""
    return [l for l in d.log_text().splitlines() if l.startswith("<7>reconcile pass done ")]


def next_pass(d, timeout=30):
    """Waits until one more reconcile pass has completed (gpu.reconcile_interval is 5s)."""
    seen = len(passes(d))
    return poll(lambda: len(passes(d)) > seen, timeout, 0.05)


def gpus(c):
    return {g["address"]: g for g in c.get("/gpus").json()["gpus"]}


def vf_states(c):
    return {v["address"]: v for g in c.get("/gpus").json()["gpus"] for v in g["vfs"]}


def sim_vfs(pf):
    return [v for g in sim_state()["gpus"] if g["address"] == pf for v in g["vfs"]]


def health_records(c):
    return {r["vf_address"]: r for r in c.get("/gpu/health").json()["records"]}


def disk_records():
    with open(HEALTH_FILE) as f:
        return {r["vf_address"]: r for r in json.load(f)["records"]}


def metrics(c):
    return parse_metrics(c.get("/metrics").body.decode())


def drain(c, pf, reason="scenario placement"):
    r = c.request("POST", "/gpu/gpus/%s/drain" % pf, {"reason": reason})
    if r.status != 200:
        raise RuntimeError("drain %s: %d %s" % (pf, r.status, r.body))


def undrain(c, pf):
    r = c.request("DELETE", "/gpu/gpus/%s/drain" % pf)
    if r.status != 200:
        raise RuntimeError("undrain %s: %d %s" % (pf, r.status, r.body))


def in_parallel(fns):
    """Runs each fn in its own thread; their results, in order."""
    results = [None] * len(fns)

    def run(i, fn):
        try:
            results[i] = fn()
        except Exception as e:  # the failure is the result the caller looks at
            results[i] = ("exception", repr(e))
    threads = [threading.Thread(target=run, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# ---- 1. an SR-IOV cycle with Stopped instances holding claims ----------------------------------


def check_sriov(c, d):
    # Placement is steered with drains (HEALTH-26): the two instances that will be stopped land
    # on the equal-size GPU, the one that keeps running on the mixed-size one.
    drain(c, MIXED_PF)
    try:
        a = create_running(c, "cycle-a", PROFILE)
        b = create_running(c, "cycle-b", PROFILE)
    finally:
        undrain(c, MIXED_PF)
    drain(c, EQUAL_PF)
    try:
        run = create_running(c, "cycle-run", PROFILE)
    finally:
        undrain(c, EQUAL_PF)
    equal_vfs = [v["address"] for v in sim_vfs(EQUAL_PF)]
    va, vb, vr = vf_of(a), vf_of(b), vf_of(run)
    ok(va in equal_vfs and vb in equal_vfs and vr not in equal_vfs,
       "set-up: two instances on %s, one on %s" % (EQUAL_PF, MIXED_PF), (va, vb, vr))

    # A health record of an equal-size VF no instance uses: kept while the VF is absent
    # (DISC-21), shown with present false (API-10).
    marked = [v for v in equal_vfs if v not in (va, vb)][5]
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % marked, {"reason": "scenario mark"})
    eq(r.status, 200, "HEALTH-25: an operator quarantine of %s" % marked)

    # SIM-14: the simulator refuses the cycle while a VMM holds a VFIO node of the PF.
    eq(ctl("sriov %s off" % EQUAL_PF), errno.EBUSY,
       "SIM-14: sriov off is refused EBUSY while a VMM holds a VFIO node on the PF")
    eq((get(c, a["id"]) or {}).get("state"), "Running",
       "SIM-14: the refused cycle leaves the instance on the PF running")

    try:
        stopped_cycle(c, d, a, b, run, va, vb, vr, equal_vfs, marked)
    finally:
        # Whatever failed: the PF is on, no release lag is left, the mark is gone.
        ctl("sriov %s on" % EQUAL_PF)
        for vf in (va, vb):
            ctl("release-lag %s 0" % vf)
        c.request("DELETE", "/gpu/vfs/%s/quarantine" % marked)
    left = delete_all(c)
    eq(left, [], "the group's instances are deleted")
    check_claims(c, "REL-4: the host is clean after the SR-IOV cycle")
    check_sim_invariants("the SR-IOV cycle", overlaps=True)


def stopped_cycle(c, d, a, b, run, va, vb, vr, equal_vfs, marked):
    run_pid = pid_of(run["id"])
    # INST-15, DEV-10: the driver refuses the release (writes of 0 fail EBUSY for 10 min after
    # the last close): the stop still answers 200, Stopped, and the claim stays.
    for vf in (va, vb):
        eq(ctl("release-lag %s 600000" % vf), 0, "SIM-14: release lag on %s" % vf)
    res = in_parallel([lambda i=i: post(c, i["id"], "stop") for i in (a, b)])
    for inst, (st, bd) in zip((a, b), res):
        ok(st == 200 and bd.get("state") == "Stopped" and
           bd.get("gpu", {}).get("device_path") == a["gpu"]["device_path"].replace(
               vf_of(a), vf_of(inst)),
           "INST-15, DEV-10: a stop whose release the driver refuses answers 200, Stopped, "
           "the claim kept (%s)" % inst["name"], (st, bd))
    claims = disk_claims()
    eq((claims.get(va), claims.get(vb)), ([a["id"]], [b["id"]]),
       "INST-15: the kept claims are in the records on disk")

    # REC-4, REC-5: a pass cannot release them either; it keeps them and counts the failure.
    fails0 = metric(metrics(c), "vgpud_instances_vgpu_stale_release_failures_total")
    ok(poll(lambda: metric(metrics(c), "vgpud_instances_vgpu_stale_release_failures_total") >
            fails0, 40, 0.2),
       "REC-5, MET-2: the failed stale release is counted")
    ok(log_has(d, r"failed to release stale vGPU assignment; retrying on the next reconcile "
                  r"pass"), "REC-5: the failed stale release is logged")
    claims = disk_claims()
    eq((claims.get(va), claims.get(vb)), ([a["id"]], [b["id"]]),
       "REC-5: the claims survive the failed release")
    st = vf_states(c)
    eq([(st[v]["state"], st[v].get("instance_id")) for v in (va, vb)],
       [("claimed", a["id"]), ("claimed", b["id"])],
       "API-6: the Stopped instances' VFs show claimed by them")
    # PLACE-3: a create on that GPU meanwhile is not handed either claimed VF.
    drain(c, MIXED_PF)
    try:
        st, probe = create(c, "cycle-probe", PROFILE)
    finally:
        undrain(c, MIXED_PF)
    ok(st == 201 and vf_of(probe) in equal_vfs and vf_of(probe) not in (va, vb),
       "PLACE-3: a create meanwhile gets another VF of the GPU, not a Stopped instance's",
       (st, probe))
    check_claims(c, "REL-4: nothing double-claimed while the Stopped instances hold claims")
    if st == 201:
        eq(delete(c, probe["id"])[0], 204, "the probe instance is deleted")

    # The VMMs are gone and nothing holds a node: the cycle goes through (the FUSE release of
    # the last handle may trail the exit by a moment).
    ok(poll(lambda: ctl("sriov %s off" % EQUAL_PF) == 0, 20, 0.2),
       "SIM-14: sriov off once no VFIO node of the PF is open")
    try:
        # DISC-20, DISC-21: the next discovery (every pass) drops the PF's VFs from the table.
        ok(poll(lambda: EQUAL_PF not in gpus(c) and gpu_body(c)["total_slots"] == 32, 30, 0.2),
           "DISC-20, DISC-21: discovery drops the vanished VFs (32 slots left)", gpu_body(c))
        g = gpu_body(c)
        ok("placement_disabled_reason" not in g,
           "DISC-7: VFs that vanish are no discovery error; placement stays enabled", g)
        eq(metric(metrics(c), "vgpud_resources_gpu_slots", kind="total"), 32.0,
           "MET-2, MET-4: the total slot gauge follows the table")
        # DISC-21, DEV-8: a claim naming a VF that is gone stays until released; release reads
        # the missing current_vgpu_type as released, so REC-4 clears it and logs it.
        ok(poll(lambda: not ({va, vb} & set(disk_claims())), 40, 0.2),
           "DISC-21, DEV-8, REC-4: the claims on vanished VFs are released by a pass",
           disk_claims())
        for inst in (a, b):
            rec = record(inst["id"]) or {}
            ok(rec.get("state") == "Stopped" and rec.get("gpu", {}).get("profile") == PROFILE,
               "REC-4: %s stays Stopped and keeps its profile" % inst["name"], rec)
            ok(poll(lambda: log_has(d, r"released stale vGPU assignment.*%s" % inst["id"]), 10),
               "REC-5: the release of %s's claim is logged" % inst["name"])
        # The instance on the other GPU is untouched.
        gr = get(c, run["id"]) or {}
        ok(gr.get("state") == "Running" and alive(run_pid) and current_type(vr) != "0" and
           vf_states(c).get(vr, {}).get("instance_id") == run["id"],
           "DISC-21: the instance on the other GPU is still Running with its VF configured "
           "and its VMM alive", gr)
        # DISC-21: the health record of the absent VF is kept.
        h = health_records(c).get(marked, {})
        ok(h.get("present") is False and "quarantined_at" in h,
           "DISC-21, API-10: the quarantine of an absent VF is kept, present false", h)
        # A create meanwhile lands on a VF that exists.
        st, nb = create(c, "cycle-new", PROFILE)
        ok(st == 201 and nb.get("state") == "Running" and
           vf_of(nb) in [v["address"] for v in sim_vfs(MIXED_PF)],
           "DISC-20, PLACE-3: a create while the VFs are gone lands on the other GPU", (st, nb))
        check_claims(c, "REL-4, DISC-21: nothing leaked or double-claimed while the VFs are gone")
    finally:
        eq(ctl("sriov %s on" % EQUAL_PF), 0, "SIM-14: sriov on")

    # SIM-14: the VFs come back unconfigured; discovery finds all 64 again.
    ok(all(v["type"] == 0 for v in sim_vfs(EQUAL_PF)) and len(sim_vfs(EQUAL_PF)) == 32,
       "SIM-14: sriov on brings the VFs back unconfigured")
    ok(poll(lambda: gpu_body(c)["total_slots"] == 64 and
            all(vf_states(c).get(v, {}).get("state") in ("free", "quarantined")
                for v in equal_vfs), 30, 0.2),
       "DISC-20: discovery finds the VFs again, free", gpu_body(c))
    h = health_records(c).get(marked, {})
    ok(h.get("present") is True and vf_states(c).get(marked, {}).get("state") == "quarantined",
       "DISC-21, PLACE-3: the kept quarantine applies again to the returned VF", h)

    # INST-17: a start takes a new claim with a new claimed_at and runs.
    res = in_parallel([lambda i=i: post(c, i["id"], "start") for i in (a, b)])
    for inst, (st, bd) in zip((a, b), res):
        ok(st == 200 and bd.get("state") == "Running" and bd.get("gpu", {}).get("device_path")
           and bd["gpu"].get("claimed_at") != inst["gpu"]["claimed_at"] and
           "error" not in bd,
           "INST-17: %s starts after the cycle with a new claim" % inst["name"], (st, bd))
    ok(next_pass(d), "a reconcile pass after the starts")
    check_claims(c, "REL-4, REC-6: after a pass no VF is configured without a claim, none "
                    "claimed twice")
    eq(configured_vfs().get(marked), None, "PLACE-3: nothing was placed on the quarantined VF")


def check_sim_invariants(label, overlaps):
    """What the simulator saw: vgpud never touched sriov_numvfs or another forbidden attribute
    (DEV-18, SIM-16), never overlapped two writes on one VF (DEV-11) and, without an NVML hang,
    never queried NVML about a GPU while writing to it (PLACE-9)."""
    st = sim_state()
    eq(st["forbidden_writes"], [], "DEV-18, SIM-16: no forbidden write during %s" % label)
    eq([v["address"] for g in st["gpus"] for v in g["vfs"] if v["max_concurrent_writes"] > 1],
       [], "DEV-11: no two writes overlapped on one VF during %s" % label)
    if overlaps:
        eq({g["address"]: g["query_write_overlaps"] for g in st["gpus"]},
           {g["address"]: 0 for g in st["gpus"]},
           "PLACE-9: no NVML query overlapped a write to its GPU during %s" % label)


def check_sriov_mode(c, d):
    # SIM-14: `sriov off` also resets the card to equal-size, as sriov-manage does (OPS-9's
    # runbook re-enables mixed-size mode afterwards). vgpud re-queries the mode on every
    # refresh (NVML-7) and follows the card: equal-size (sysfs lists), then mixed again.
    eq(ctl("sriov %s off" % MIXED_PF), 0, "SIM-14: sriov off on the mixed-size GPU")
    try:
        ok(poll(lambda: MIXED_PF not in gpus(c) and gpu_body(c)["total_slots"] == 32, 30, 0.2),
           "DISC-20: discovery drops the mixed-size GPU's VFs", gpu_body(c))
    finally:
        eq(ctl("sriov %s on" % MIXED_PF), 0, "SIM-14: sriov on")
    ok(poll(lambda: (lambda g: g.get("mode") == "equal" and g.get("nvml") == "equal_size")(
        gpus(c).get(MIXED_PF, {})), 30, 0.2),
       "NVML-7, NVML-11, API-6: the GPU is back equal-size, placed from the sysfs lists",
       gpus(c).get(MIXED_PF))
    st, inst = create(c, "mode-equal", PROFILE)
    ok(st == 201 and inst.get("state") == "Running", "PLACE-5: a create while it is equal-size",
       (st, inst))
    if st == 201:
        delete(c, inst["id"])
    ok(poll(lambda: ctl("mode %s mixed" % MIXED_PF) == 0, 20, 0.2),
       "SIM-14: the operator sets mixed-size mode again (the card is empty)")
    ok(poll(lambda: (lambda g: g.get("mode") == "mixed" and g.get("nvml") == "ok")(
        gpus(c).get(MIXED_PF, {})), 30, 0.2),
       "NVML-7, NVML-13: the next refresh places through NVML again", gpus(c).get(MIXED_PF))
    ok(log_has(d, r"^<4>vGPU mode of GPU %s changed from \S+ to \S+" % re.escape(MIXED_PF)),
       "NVML-13: the mode change is logged")
    check_claims(c, "REL-4: the host is clean after the mode cycle")
    check_sim_invariants("the mode cycle", overlaps=True)


# ---- 2. the health file corrupted and repaired at run time ------------------------------------

GARBAGE = b'{"version": 1, "records": [{"vf_address": \x00\xff garbage'
UNMARSHAL = "unmarshal VF health state: "
UNAVAILABLE = "VF health state unavailable: " + UNMARSHAL


def write_in_place(data):
    """An operator's editor writing the file over itself (same inode)."""
    with open(HEALTH_FILE, "wb") as f:
        f.write(data)


def write_renamed(data):
    """An operator's editor writing a new file and renaming it over the old one."""
    with open(HEALTH_FILE + ".hand", "wb") as f:
        f.write(data)
    os.replace(HEALTH_FILE + ".hand", HEALTH_FILE)


def file_bytes():
    with open(HEALTH_FILE, "rb") as f:
        return f.read()


def store_gauges(c):
    fams = metrics(c)
    return (metric(fams, "vgpud_instances_vgpu_vf_health_store_unavailable"),
            metric(fams, "vgpud_resources_gpu_placement_disabled"),
            metric(fams, "vgpud_instances_vgpu_quarantined_vfs"))


def disabled_reason(c):
    return gpu_body(c).get("placement_disabled_reason", "")


def check_while_corrupt(c, d, q1, run, label):
    """What HEALTH-5 and HEALTH-16 promise while the file does not load."""
    g = gpu_body(c)
    ok(g.get("placement_disabled_reason", "").startswith(UNAVAILABLE) and
       g["allocatable_slots"] == 0,
       "HEALTH-16, API-5 (%s): placement disabled with '%s...'" % (label, UNAVAILABLE), g)
    eq(store_gauges(c), (1.0, 1.0, 1.0),
       "HEALTH-16, MET-2 (%s): store_unavailable 1, placement_disabled 1, the quarantine still "
       "counted" % label)
    h = c.get("/gpu/health").json()
    ok(h["available"] is False and h.get("unavailable_reason", "").startswith(UNAVAILABLE) and
       "quarantined_at" in {r["vf_address"]: r for r in h["records"]}.get(q1, {}),
       "HEALTH-5, API-10 (%s): the store is unavailable and memory keeps the quarantine" % label,
       h)
    eq((vf_states(c).get(q1, {}).get("state"), g["quarantined_slots"]), ("quarantined", 1),
       "HEALTH-5, API-6 (%s): the quarantined VF stays out of placement" % label)
    st, bd = create(c, "corrupt-refused", PROFILE)
    ok(st == 503 and bd.get("code") == "placement_disabled" and bd.get("message", "").startswith(
        "insufficient GPU: vGPU placement is disabled: " + UNAVAILABLE),
       "INST-11, HEALTH-16 (%s): a vGPU create is refused 503 placement_disabled" % label,
       (st, bd))
    gr = get(c, run["id"]) or {}
    ok(gr.get("state") == "Running" and alive(pid_of(run["id"])) and
       gr.get("gpu", {}).get("device_path") == run["gpu"]["device_path"],
       "HEALTH-24 (%s): the running vGPU instance keeps running with its claim" % label, gr)


def repair(c, d, good, q1, label):
    """The operator puts a valid file back; HEALTH-21's repair loads it without a restart."""
    write_in_place(good)
    ok(poll(lambda: disabled_reason(c) == "", 20, 0.2),
       "HEALTH-21 (%s): placement comes back once the file is repaired, without SIGHUP or "
       "restart" % label, gpu_body(c))
    eq(store_gauges(c), (0.0, 0.0, 1.0),
       "HEALTH-21, MET-2 (%s): store_unavailable and placement_disabled back to 0" % label)
    h = c.get("/gpu/health").json()
    ok(h["available"] is True and "unavailable_reason" not in h and
       list({r["vf_address"] for r in h["records"]}) == [q1],
       "HEALTH-21, API-10 (%s): the store is available with the quarantine" % label, h)
    ok(log_has(d, r"^<5>VF health state loaded again"),
       "HEALTH-21 (%s): the repair is logged" % label)
    eq(file_bytes(), good, "HEALTH-17 (%s): vgpud loads the repaired file without rewriting it"
       % label)


def check_corrupt(c, d):
    mixed = [v["address"] for v in sim_vfs(MIXED_PF)]
    q1, q2 = mixed[20], mixed[21]
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % q1, {"reason": "before the corruption"})
    eq(r.status, 200, "HEALTH-25: an operator quarantine before the corruption")
    run = create_running(c, "corrupt-run", PROFILE)
    good = file_bytes()
    try:
        corrupt_and_repair(c, d, good, q1, q2, run)
    finally:
        if file_bytes() != good and disabled_reason(c).startswith(UNAVAILABLE):
            write_in_place(good)  # a failed check must not leave the file broken
            poll(lambda: disabled_reason(c) == "", 20, 0.2)
    for vf in (q1, q2):
        c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    eq(delete_all(c), [], "the group's instances are deleted")
    check_claims(c, "REL-4: no claim lost or leaked across the corruption")


def corrupt_and_repair(c, d, good, q1, q2, run):

    # (a) Nothing mutates: the 5 s poll (HEALTH-32) notices the edit and the load fails.
    write_renamed(GARBAGE)
    ok(poll(lambda: disabled_reason(c).startswith(UNAVAILABLE), 15, 0.2),
       "HEALTH-32, HEALTH-5: the poll notices the corrupt file within 5 s", gpu_body(c))
    ok(log_has(d, r'^<3>VF health state changed on disk and is invalid error="VF health state '
                  r'changed on disk and is invalid: ' + UNMARSHAL),
       "HEALTH-22: the failed reload is logged with the load error")
    check_while_corrupt(c, d, q1, run, "poll")
    # HEALTH-21: passes and sentinel ticks retry the load; HEALTH-17: the file is never
    # replaced by the memory state, whatever they do.
    ok(next_pass(d) and next_pass(d), "two reconcile passes while the file is corrupt")
    ok(log_has(d, r'^<7>VF health state repair failed .*error="' + UNAVAILABLE),
       "HEALTH-21: the repair retries the load and fails")
    eq(file_bytes(), GARBAGE, "HEALTH-17: the corrupt file is left untouched")
    st, bd = create(c, "corrupt-nogpu")
    ok(st == 201 and bd.get("state") == "Running",
       "INST-10: an instance without a profile is created while placement is disabled",
       (st, bd))
    if st == 201:
        delete(c, bd["id"])
    repair(c, d, good, q1, "poll")

    # (b) A mutation right after the corruption: the write sees the changed file, reloads it
    # first (HEALTH-22), the reload fails and the mutation is refused (HEALTH-23); or, had the
    # 5 s poll come in between, the mutation retries the load and is refused (HEALTH-17).
    write_in_place(GARBAGE)
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % q2, {"reason": "after the corruption"})
    msg = r.json().get("message", "") if r.status != 200 else ""
    ok(r.status == 503 and r.json().get("code") == "health_store_unavailable" and
       (msg.startswith("VF health state changed on disk and is invalid: " + UNMARSHAL) or
        msg.startswith(UNAVAILABLE)),
       "HEALTH-23, HEALTH-17, API-18: a mutation just after the corruption is refused 503",
       r.body)
    print("# the refusal: %s" % msg)
    eq(file_bytes(), GARBAGE, "HEALTH-23: the operator's file is left untouched")
    ok(poll(lambda: disabled_reason(c).startswith(UNAVAILABLE), 10, 0.2),
       "HEALTH-23, HEALTH-16: the store is unavailable", gpu_body(c))
    check_while_corrupt(c, d, q1, run, "mutation")
    ok(q2 not in health_records(c), "HEALTH-23: the refused quarantine is not in memory")
    # A delete needs no health store: the VMM stops and the VF is released (INST-18).
    st, _ = delete(c, run["id"])
    ok(st == 204 and current_type(vf_of(run)) == "0",
       "INST-18, HEALTH-16: a vGPU instance is deleted and its VF released while the store is "
       "unavailable", st)
    repair(c, d, good, q1, "mutation")

    # Mutations are accepted again and written on top of the repaired file.
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % q2, {"reason": "after the repair"})
    eq(r.status, 200, "HEALTH-21: a mutation after the repair is accepted")
    eq(sorted(disk_records()), sorted([q1, q2]), "HEALTH-18: the file holds both quarantines")


# ---- 3. a hand edit followed at once by a mutation ---------------------------------------------


def hand_file(records):
    return (json.dumps({"version": 1, "records": sorted(records, key=lambda r: r["vf_address"])},
                       indent=2) + "\n").encode()


def check_hand_edit(c, d):
    mixed = [v["address"] for v in sim_vfs(MIXED_PF)]
    h1, h2, h3, h4, h5 = mixed[24:29]
    when = "2026-09-02T20:08:04Z"
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % h1, {"reason": "by the API"})
    eq(r.status, 200, "HEALTH-25: an operator quarantine through the API")

    # (a) Added by hand (in place), then at once a quarantine through the API.
    recs = list(disk_records().values())
    recs.append({"vf_address": h2, "quarantined_at": when, "reason": "added by hand",
                 "source": "operator"})
    write_in_place(hand_file(recs))
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % h3, {"reason": "right after the edit"})
    eq(r.status, 200, "HEALTH-22: the quarantine right after the hand edit is accepted")
    mem, disk = health_records(c), disk_records()
    eq((sorted(mem), sorted(disk)), (sorted([h1, h2, h3]), sorted([h1, h2, h3])),
       "HEALTH-22, REL-4: the hand-added quarantine and the API's both survive, in memory and "
       "on disk")
    eq((mem.get(h2, {}).get("reason"), disk.get(h2, {}).get("reason"),
        disk.get(h2, {}).get("quarantined_at")), ("added by hand", "added by hand", when),
       "HEALTH-22: the hand-added record is kept as written")
    eq(vf_states(c).get(h2, {}).get("state"), "quarantined",
       "HEALTH-22, PLACE-3: the hand-added quarantine keeps its VF out of placement")

    # (b) Removed by hand (a new file renamed over), then at once a clear through the API.
    recs = [x for x in disk_records().values() if x["vf_address"] != h1]
    write_renamed(hand_file(recs))
    r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % h3)
    eq(r.status, 200, "HEALTH-25: the clear right after the hand edit is accepted")
    mem, disk = health_records(c), disk_records()
    eq((sorted(mem), sorted(disk)), ([h2], [h2]),
       "HEALTH-22, REL-4: the hand removal and the API's clear both hold, in memory and on disk")
    eq(vf_states(c).get(h1, {}).get("state"), "free",
       "HEALTH-22: the VF whose quarantine was removed by hand is free again")

    # (c) A tally and a record at the threshold added by hand, then at once an operator
    # quarantine of the tallied VF: the write lands on the reloaded file (HEALTH-25 keeps the
    # tally), and the load re-evaluates the other record (HEALTH-8).
    recs = list(disk_records().values())
    recs.append({"vf_address": h4, "failures": [
        {"instance_id": "hand0000000000000001", "assigned_at": when, "reported_at": when}]})
    recs.append({"vf_address": h5, "failures": [
        {"instance_id": "hand0000000000000002", "assigned_at": when, "reported_at": when},
        {"instance_id": "hand0000000000000003", "assigned_at": when, "reported_at": when}]})
    write_in_place(hand_file(recs))
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % h4, {"reason": "tallied, then quarantined"})
    eq(r.status, 200, "HEALTH-25: the quarantine of the hand-tallied VF is accepted")
    rec4 = (r.json().get("records") or [{}])[0] if r.status == 200 else {}
    ok(rec4.get("source") == "operator" and len(rec4.get("failures", [])) == 1,
       "HEALTH-22, HEALTH-25, API-18: the answer shows the hand tally kept under the operator "
       "quarantine", rec4)
    reeval = "re-evaluated at load: 2 failures, threshold 2"
    ok(poll(lambda: disk_records().get(h5, {}).get("reason") == reeval, 10, 0.1),
       "HEALTH-8: the hand record at the threshold is quarantined at load and re-persisted",
       disk_records().get(h5))
    mem, disk = health_records(c), disk_records()
    eq((sorted(mem), sorted(disk)), (sorted([h2, h4, h5]), sorted([h2, h4, h5])),
       "HEALTH-22, REL-4: every hand record and the API's change hold, in memory and on disk")
    eq((len(disk[h4].get("failures", [])), disk[h4].get("source"), mem[h5].get("source"),
        mem[h5].get("reason")), (1, "operator", "auto", reeval),
       "HEALTH-8, HEALTH-25: the tally under the operator quarantine, and the re-evaluated "
       "record, as memory and file have them")
    eq(gpu_body(c)["quarantined_slots"], 3, "API-5: three quarantined slots")
    for vf in (h2, h4, h5):
        r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
        eq(r.status, 200, "HEALTH-25: clearing %s" % vf)
    eq(disk_records(), {}, "HEALTH-25: the file is empty of records again")


# ---- 4. an NVML hang during 20 concurrent claims -----------------------------------------------


def check_nvml_hang(c, d):
    g = gpus(c).get(MIXED_PF, {})
    eq((g.get("mode"), g.get("nvml")), ("mixed", "ok"),
       "NVML-7: the mixed-size GPU places through NVML before the hang")
    drain(c, EQUAL_PF)  # every claim goes to the mixed-size GPU
    timeouts0 = metric(metrics(c), "vgpud_resources_gpu_nvml_fallbacks_total", reason="timeout")
    n = 20
    results = []
    worst = [0.0, None]
    try:
        eq(ctl("nvml hang on"), 0, "SIM-14: nvml hang on")
        done = threading.Event()

        def watch():
            while not done.is_set():
                status, took = timed_get(c, "/healthz", 5.0)
                if took > worst[0] or status != 200:
                    worst[0], worst[1] = max(worst[0], took), status
                done.wait(0.05)
        w = threading.Thread(target=watch)
        w.start()
        try:
            results = in_parallel([lambda i=i: create(c, "hang-%02d" % i, PROFILE)
                                   for i in range(n)])
        finally:
            done.set()
            w.join()
    finally:
        hang_off = ctl("nvml hang off")
    eq(hang_off, 0, "SIM-14: nvml hang off")
    made = [bd for st, bd in results if st == 201]
    refused = [(st, bd) for st, bd in results if st != 201]
    print("# %d of %d creates succeeded during the hang" % (len(made), n))
    for st, bd in refused[:3]:
        print("# refused: %d %s" % (st, bd))
    ok(all(bd.get("state") == "Running" for bd in made),
       "REL-4: every create that succeeded during the hang is Running", made)
    # A create admitted before the hang whose claim outwaits its round fails with PLACE-8's own
    # text; INST-11's "insufficient GPU: vGPU placement is disabled: " prefix is admission's,
    # and a round timeout does not disable admission. On a quick host every create is placed
    # from the sysfs lists (NVML-10) and none fails; on a slow disk some do.
    timeout_text = "vGPU placement round timed out after " + NVML_TIMEOUT
    ok(all(st == 503 and isinstance(bd, dict) and bd.get("code") == "placement_disabled" and
           bd.get("message") == timeout_text for st, bd in refused),
       "PLACE-8, API-21, GEN-12: every create that failed is 503 placement_disabled '%s'"
       % timeout_text, refused)
    ok(worst[0] < 1.0 and worst[1] in (None, 200),
       "API-16, GEN-3: /healthz kept answering during the hang (slowest %.0f ms)"
       % (worst[0] * 1000), worst)
    ok(metric(metrics(c), "vgpud_resources_gpu_nvml_fallbacks_total", reason="timeout") >
       timeouts0, "NVML-10, NVML-12, MET-2: the abandoned NVML call is counted as a timeout")
    eq(sorted(i["name"] for i in c.get("/instances").json()),
       sorted(bd["name"] for bd in made),
       "INST-12: a failed create leaves no record")
    ok(all(vf_of(bd) in [v["address"] for v in sim_vfs(MIXED_PF)] for bd in made),
       "PLACE-3: the claims landed on the mixed-size GPU (the other one is drained)")
    check_claims(c, "REL-4: no claim leaked or doubled by the hang (claims on disk = the "
                    "simulator's configured VFs)")

    # The hung call returns; NVML placements come back and creates succeed again.
    ok(poll(lambda: gpus(c).get(MIXED_PF, {}).get("nvml") == "ok", 30, 0.2),
       "NVML-13: the GPU returns to NVML placement after the hang",
       gpus(c).get(MIXED_PF, {}).get("nvml"))
    ok(log_has(d, r"^<6>NVML placements recovered"), "NVML-13: the recovery is logged once")
    after = in_parallel([lambda i=i: create(c, "after-%02d" % i, PROFILE) for i in range(2)])
    ok(all(st == 201 and bd.get("state") == "Running" for st, bd in after),
       "NVML-10: creates succeed again after nvml hang off", after)
    check_claims(c, "REL-4: the claims after the hang are in order")
    undrain(c, EQUAL_PF)
    left = in_parallel([lambda i=i: delete(c, i["id"]) for i in c.get("/instances").json()])
    ok(all(st == 204 for st, _ in left), "the group's instances are deleted", left)
    check_claims(c, "REL-4: the host is clean after the NVML hang")
    check_sim_invariants("the NVML hang", overlaps=False)


# ---- main -------------------------------------------------------------------------------------


def main():
    work = tempfile.mkdtemp(prefix="vgpud-scenarios-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s",
                            extra_gpu="  nvml_timeout: %s\n" % NVML_TIMEOUT)
        sock = os.path.join(work, "api.sock")
        d, c = start(work, "scenarios", config, secret, sock)
        daemons.append(d)
        if c:
            t0 = time.monotonic()
            for name, fn in (("sriov", check_sriov), ("sriov-mode", check_sriov_mode),
                             ("corrupt", check_corrupt),
                             ("hand-edit", check_hand_edit), ("nvml-hang", check_nvml_hang)):
                t = time.monotonic()
                run_group(name, lambda: fn(c, d))
                print("# group %s: %.1f s" % (name, time.monotonic() - t))
            print("# all groups: %.1f s" % (time.monotonic() - t0))
            stop(d)
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
