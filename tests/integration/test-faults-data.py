#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-faults-data.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# REL-3's fault matrix, its data-directory and NVML half (tests/integration/faults.md, "The data
# directory and NVML"): every write vgpud makes under data_dir (the health file, every
# instance.json of a create and a stop, the removal of a record, the VMM's qemu.log, the console
# route's read) and every fault the fake NVML offers (hang, latency, an error code on each call
# placement depends on), injected through SIM-14 into the real vgpud on SIM-20's host with
# fake-qemu as the VMM. Each row triggers the operation through the public API, asserts the
# error text and the metric of the requirement it exercises, clears the fault, and then checks
# that nothing was lost: the claims in the records on disk match the simulator's configured VFs,
# every quarantine acknowledged so far is in vf-health.json, and every record loads. The run
# ends with a restart (a record unreadable and NVML's init failing once on the way up), after
# which the acknowledged quarantines are still loaded.
#
# Faults are persistent where the test asserts a latched state (HEALTH-16's latch lasts while the
# disk refuses) and one-shot (count=) where one operation is meant; earlier record writes of the
# same operation are let through with `delay:1 count=<n>`, since the first matching fault wins.
#
# Run by tests/integration/run-with-sim.sh (a private PID namespace with the simulator mounted,
# SIM-21). One daemon (and its restart), rows in sequence; every fault and NVML setting is
# cleared, whatever happens. Output is TAP; each check names the SPEC requirements it covers.
import errno
import json
import os
import re
import shutil
import signal
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import vgpud_test as vt  # noqa: E402 (after the path)
from vgpud_test import (  # noqa: E402
    HEALTH_FILE, eq, error_of, exit_status, gpu_body, log_count, metric, ok, parse_metrics, poll,
    run_group, sim_ctl, sim_state, start, stop, timed_get, write_secret)
from vgpud_instances import (  # noqa: E402
    INSTANCES, PROFILE, GuestWatch, alive, check_claims, configured_vfs, create,
    create_running, delete, finish_run, get, make_images, post, record, request, vf_of,
    vmm_config)

ENOSPC, EIO = "No space left on device", "Input/output error"
ERRNO_TEXT = {"ENOSPC": ENOSPC, "EIO": EIO}
ID = r"[a-z0-9]{20}"
RECORD = "data/instances/*/instance.json"
NVML_TIMEOUT = "2s"
MIXED_PF, EQUAL_PF = "0000:e3:00.0", "0001:c8:00.0"
# Operator quarantines land on the equal-size card's last VFs, which no claim here needs.
ACKED_VF = "0001:c8:04.3"
TRY_VF = "0001:c8:04.2"

# Quarantines whose POST answered 200: each must survive every later row and the restart.
ACKED = set()


def fams(c):
    return parse_metrics(c.get("/metrics").body.decode())


def m(c, family, **labels):
    return metric(fams(c), family, **labels)


def http_500(c):
    return m(c, "vgpud_http_requests_total", code="500") or 0


def instance_gauges(c):
    """vgpud_instances by state, the states with none left out (MET-2)."""
    return {l["state"]: v for _, l, v in fams(c)["vgpud_instances"]["samples"] if v}


def used_slots(c):
    return m(c, "vgpud_resources_gpu_slots", kind="used")


def health_bytes():
    with open(HEALTH_FILE, "rb") as f:
        return f.read()


def disk_quarantines():
    with open(HEALTH_FILE) as f:
        return {r["vf_address"] for r in json.load(f)["records"] if "quarantined_at" in r}


def mem_quarantines(c):
    return {r["vf_address"] for r in c.get("/gpu/health").json()["records"]
            if "quarantined_at" in r}


def unavailable_reason(c):
    h = c.get("/gpu/health").json()
    return None if h["available"] else h.get("unavailable_reason")


def wait_available(c, timeout=20):
    # HEALTH-21: a /resources read schedules the repair that clears a write latch.
    return poll(lambda: gpu_body(c) is not None and unavailable_reason(c) is None, timeout, 0.2)


def quarantine(c, vf, reason="fault matrix"):
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": reason})
    if r.status == 200:
        ACKED.add(vf)
    return error_of(r)


def record_dirs():
    return sorted(n for n in os.listdir(INSTANCES) if re.fullmatch(ID, n))


def nothing_lost(c, label):
    """REL-3: no claim, quarantine or record lost."""
    check_claims(c, "REL-3 (%s): the claims in the records on disk match the configured VFs"
                 % label)
    q = disk_quarantines()
    ok(ACKED <= q, "REL-3 (%s): every acknowledged quarantine is in vf-health.json" % label,
       sorted(ACKED - q))
    listed = sorted(i["id"] for i in c.get("/instances").json())
    dirs = record_dirs()
    ok(listed == dirs and all(record(i) is not None for i in dirs),
       "REL-3 (%s): every record on disk loads and is listed by GET /instances" % label,
       (listed, dirs, [i for i in dirs if record(i) is None]))


def skip_then(op, glob, action, skip):
    """The first `skip` operations pass (delay:1), the next one gets action (SIM-14)."""
    if skip:
        sim_ctl("fault %s %s delay:1 count=%d" % (op, glob, skip))
    sim_ctl("fault %s %s %s count=1" % (op, glob, action))


# ---- HEALTH-16, HEALTH-17, HEALTH-18, HEALTH-19, HEALTH-20: the health file's write --------------

# (case, op, glob, errno, prefix, after_rename)
HEALTH_WRITES = [
    ("open", "data/gpu/vf-health.json.tmp", "ENOSPC", "create VF health state", False),
    ("write", "data/gpu/vf-health.json.tmp", "ENOSPC", "write VF health state", False),
    ("write", "data/gpu/vf-health.json.tmp", "EIO", "write VF health state", False),
    ("fsync", "data/gpu/vf-health.json.tmp", "ENOSPC", "sync VF health state", False),
    ("fsync", "data/gpu/vf-health.json.tmp", "EIO", "sync VF health state", False),
    ("rename", "data/gpu/vf-health.json.tmp", "ENOSPC", "rename VF health state", False),
    ("rename", "data/gpu/vf-health.json.tmp", "EIO", "rename VF health state", False),
    ("fsync", "data/gpu", "ENOSPC", "sync VF health state dir", True),
    ("fsync", "data/gpu", "EIO", "sync VF health state dir", True),
]


def check_health_write(c, op, glob, errno, prefix, after_rename, first):
    case = "fault %s %s %s" % (op, glob, errno)
    text = "%s: %s" % (prefix, ERRNO_TEXT[errno])
    latched = "VF health state unavailable: last write failed: " + text
    before = health_bytes()
    try:
        sim_ctl(case)
        got = quarantine(c, TRY_VF)
        # Before any read that schedules a repair (HEALTH-21), whose write makes a tmp of its own.
        tmp_left = os.path.exists(HEALTH_FILE + ".tmp")
        eq(got, (503, {"code": "health_store_unavailable", "message": text}),
           "HEALTH-19, API-18 (%s): the quarantine answers 503 '%s'" % (case, text))
        ACKED.discard(TRY_VF)
        ok(not tmp_left, "HEALTH-19 (%s): the failed write removed its tmp file" % case)
        eq(unavailable_reason(c), latched,
           "HEALTH-16, API-10 (%s): /gpu/health says '%s'" % (case, latched))
        eq(gpu_body(c).get("placement_disabled_reason"), latched,
           "HEALTH-16, API-5 (%s): /resources carries it as placement_disabled_reason" % case)
        f = fams(c)
        eq((metric(f, "vgpud_instances_vgpu_vf_health_store_unavailable"),
            metric(f, "vgpud_resources_gpu_placement_disabled")), (1.0, 1.0),
           "MET-2 (%s): vf_health_store_unavailable 1, placement_disabled 1" % case)
        if after_rename:
            ok(TRY_VF in disk_quarantines(),
               "HEALTH-20 (%s): a failure after the rename leaves the new file in place" % case)
        else:
            eq(health_bytes(), before,
               "HEALTH-18, HEALTH-20 (%s): the old file is intact, byte for byte" % case)
        if first:
            st, b = create(c, "hw-refused", PROFILE)
            eq((st, b), (503, {"code": "placement_disabled",
                               "message": "insufficient GPU: vGPU placement is disabled: " +
                               latched}),
               "HEALTH-16, INST-11, API-21: a create while the store is unavailable is 503")
    finally:
        sim_ctl("clear-faults")
    ok(wait_available(c), "HEALTH-21 (%s): a repair clears the latch once the disk is back"
       % case, unavailable_reason(c))
    eq(m(c, "vgpud_instances_vgpu_vf_health_store_unavailable"), 0.0,
       "MET-2 (%s): vf_health_store_unavailable back to 0" % case)
    want = after_rename
    eq((TRY_VF in mem_quarantines(c), TRY_VF in disk_quarantines()), (want, want),
       "HEALTH-20 (%s): the change is %s in memory and on disk" %
       (case, "kept" if want else "rolled back"))
    if want:
        eq(c.request("DELETE", "/gpu/vfs/%s/quarantine" % TRY_VF).status, 200,
           "API-18: the kept quarantine is cleared again")
    nothing_lost(c, case)


def check_health_clear(c):
    # The clear of an acknowledged quarantine fails before its rename: it stays quarantined.
    case = "fault write data/gpu/vf-health.json.tmp ENOSPC"
    text = "write VF health state: " + ENOSPC
    try:
        sim_ctl(case)
        eq(error_of(c.request("DELETE", "/gpu/vfs/%s/quarantine" % ACKED_VF)),
           (503, {"code": "health_store_unavailable", "message": text}),
           "HEALTH-19, API-18 (%s, a clear): 503 '%s'" % (case, text))
    finally:
        sim_ctl("clear-faults")
    ok(wait_available(c), "HEALTH-21 (%s, a clear): the latch clears" % case)
    eq((ACKED_VF in mem_quarantines(c), ACKED_VF in disk_quarantines()), (True, True),
       "HEALTH-20 (%s, a clear): the acknowledged quarantine stays, in memory and on disk" % case)
    nothing_lost(c, case + " (clear)")


def check_health_read(c, d):
    # HEALTH-5, HEALTH-17: a reload whose read fails keeps memory and refuses mutations.
    case = "fault read data/gpu/vf-health.json EIO"
    text = "VF health state unavailable: read VF health state: " + EIO
    before = health_bytes()  # read before the fault: it fails the test's reads too
    try:
        sim_ctl(case)
        d.proc.send_signal(signal.SIGHUP)
        ok(poll(lambda: unavailable_reason(c) == text, 10, 0.1),
           "HEALTH-5, HEALTH-16, CFG-8 (%s): SIGHUP's failed read latches '%s'" % (case, text),
           unavailable_reason(c))
        eq(m(c, "vgpud_instances_vgpu_vf_health_store_unavailable"), 1.0,
           "MET-2 (%s): vf_health_store_unavailable 1" % case)
        ok(ACKED <= mem_quarantines(c),
           "HEALTH-5 (%s): the previous memory state is kept" % case)
        eq(quarantine(c, TRY_VF), (503, {"code": "health_store_unavailable", "message": text}),
           "HEALTH-17, API-18 (%s): a quarantine is refused with '%s'" % (case, text))
        ACKED.discard(TRY_VF)
    finally:
        sim_ctl("clear-faults")
    eq(health_bytes(), before, "HEALTH-17 (%s): the file is not replaced" % case)
    ok(wait_available(c), "HEALTH-21 (%s): a repair loads the file again" % case,
       unavailable_reason(c))
    nothing_lost(c, case)


# ---- INST-1, INST-12, INST-13, PLACE-20: the records of a create ------------------------------

# A create with a vGPU writes its record five times (INST-12): Creating (the new directory,
# with instances/ synced), the claim (PLACE-20), the socket paths, the VMM identity (INST-13),
# Running. `skip` lets that many earlier operations of the same kind through.
# (case label, op, glob, skip, errno, message regex, whether a VMM was spawned: None when its
# life is too short to be seen reliably)
CREATE_WRITES = [
    ("Creating", "write", RECORD + ".tmp", 0, "ENOSPC",
     r"save instance record: write instances/%s/instance\.json\.tmp: " + ENOSPC, False),
    ("Creating", "fsync", RECORD + ".tmp", 0, "ENOSPC",
     r"save instance record: sync instances/%s/instance\.json\.tmp: " + ENOSPC, False),
    ("Creating", "fsync", "data/instances", 0, "EIO",
     r"save instance record: sync directory instances: " + EIO, False),
    ("claim", "write", RECORD + ".tmp", 1, "ENOSPC",
     r"save vGPU claim: write instances/%s/instance\.json\.tmp: " + ENOSPC, False),
    ("claim", "fsync", RECORD + ".tmp", 1, "EIO",
     r"save vGPU claim: sync instances/%s/instance\.json\.tmp: " + EIO, False),
    ("claim", "rename", RECORD + ".tmp", 1, "ENOSPC",
     r"save vGPU claim: rename instances/%s/instance\.json\.tmp to instance\.json: " + ENOSPC,
     False),
    ("claim", "fsync", "data/instances/" + "?" * 20, 1, "EIO",
     r"save vGPU claim: sync directory instances/%s: " + EIO, False),
    ("socket paths", "write", RECORD + ".tmp", 2, "EIO",
     r"save instance record: write instances/%s/instance\.json\.tmp: " + EIO, False),
    ("VMM identity", "fsync", RECORD + ".tmp", 3, "ENOSPC",
     r"save VMM identity: sync instances/%s/instance\.json\.tmp: " + ENOSPC, None),
    ("Running", "rename", RECORD + ".tmp", 4, "EIO",
     r"save instance record: rename instances/%s/instance\.json\.tmp to instance\.json: " + EIO,
     True),
]

ROW = [0]


def vfio_closes():
    """{vf: last_close_ms} from the simulator: a VMM that opened its VF's node and exited shows
    here however short it lived, where a process scan may miss it on a loaded machine."""
    return {v["address"]: v["last_close_ms"] for g in sim_state()["gpus"] for v in g["vfs"]}


def check_create_write(c, label, op, glob, skip, errno, pattern, spawned):
    ROW[0] += 1
    name = "cw-%02d" % ROW[0]
    case = "fault %s %s %s count=1" % (op, glob, errno)
    want = pattern.replace("%s", ID)
    used, errors = used_slots(c), http_500(c)
    closes = vfio_closes()
    watch = GuestWatch(name)
    try:
        skip_then(op, glob, errno, skip)
        st, b = create(c, name, PROFILE)
    finally:
        pids = watch.stop()
        sim_ctl("clear-faults")
    ok(st == 500 and b.get("code") == "internal" and re.fullmatch(want, b.get("message", "")),
       "INST-1, INST-14, API-21 (%s, the %s write): 500 internal '%s'" % (case, label, want),
       (st, b))
    ok(not [i for i in c.get("/instances").json() if i["name"] == name] and
       not [n for n in record_dirs() if (record(n) or {}).get("name") == name],
       "INST-12, INST-14 (%s): the create is rolled back, no record remains" % case)
    if spawned is not None:
        closed = [vf for vf, ms in vfio_closes().items() if ms != closes.get(vf)]
        eq(len(pids) > 0 or len(closed) > 0, spawned, "VMM-3 (%s): %s" % (
            case, "its VMM was spawned" if spawned else "no VMM was spawned"))
    ok(not any(alive(p) for p in pids),
       "INST-13, VMM-14 (%s): no VMM of it runs" % case, pids)
    ok(poll(lambda: used_slots(c) == used and not instance_gauges(c), 15, 0.1),
       'MET-2, INST-14, PLACE-20 (%s): vgpud_resources_gpu_slots{kind="used"} back to %d, '
       'vgpud_instances all 0' % (case, used), (used_slots(c), instance_gauges(c)))
    eq(http_500(c) - errors, 1, 'MET-2, API-20 (%s): vgpud_http_requests_total{code="500"} '
       'counts the answer' % case)
    eq(configured_vfs(), {}, "PLACE-1, DEV-8 (%s): the simulator has no VF configured" % case)
    nothing_lost(c, case)


def check_qemu_log(c):
    # VMM-3: qemu.log cannot be opened: the spawn fails, the claim is released.
    case = "fault open data/instances/*/qemu.log EIO count=1"
    used = used_slots(c)
    sim_ctl(case)
    try:
        st, b = create(c, "ql-01", PROFILE)
    finally:
        sim_ctl("clear-faults")
    want = r"spawn VMM: spawn \S+/fake-qemu: open qemu\.log: " + EIO
    ok(st == 500 and b.get("code") == "internal" and re.fullmatch(want, b.get("message", "")),
       "VMM-3, API-21 (%s): 500 internal '%s'" % (case, want), (st, b))
    eq(configured_vfs(), {}, "INST-14 (%s): the claim's VF is released" % case)
    ok(poll(lambda: used_slots(c) == used and not instance_gauges(c), 15, 0.1),
       'MET-2 (%s): vgpud_resources_gpu_slots{kind="used"} back to %d, no instance left'
       % (case, used), (used_slots(c), instance_gauges(c)))
    nothing_lost(c, case)


# ---- INST-15, INST-18, INST-20: stop and delete -----------------------------------------------


def check_stop_write(c, d):
    # INST-15: the stop's second write (Stopped, claim cleared) fails after the release.
    a = create_running(c, "st-01", PROFILE)
    case = "fault write data/instances/%s/instance.json.tmp ENOSPC count=1" % a["id"]
    errors = http_500(c)
    skip_then("write", "data/instances/%s/instance.json.tmp" % a["id"], "ENOSPC", 1)
    try:
        st, b = post(c, a["id"], "stop")
    finally:
        sim_ctl("clear-faults")
    want = "save instance record: write instances/%s/instance.json.tmp: %s" % (a["id"], ENOSPC)
    eq((st, b.get("code"), b.get("message")), (500, "internal", want),
       "INST-8, INST-15, API-21 (%s, the Stopped write): 500 '%s'" % (case, want))
    eq(http_500(c) - errors, 1, 'MET-2, API-20 (%s): vgpud_http_requests_total{code="500"} '
       'counts it' % case)
    # REL-2: the VF was released but the record on disk still claims it, so memory keeps the
    # claim too (no other create may take the VF) until a pass's release_stale saves the
    # release (REC-4).
    g = get(c, a["id"]) or {}
    ok(g.get("gpu", {}).get("device_path") == (record(a["id"]) or {}).get("gpu", {}).get(
        "device_path") is not None,
       "REL-2, REC-4 (%s): memory keeps the claim the record on disk still holds" % case, g)
    ok(any("vGPU release not recorded; the claim is kept until a reconcile pass saves it" in l
           and a["id"] in l for l in d.log_text().splitlines()),
       "REL-2 (%s): the kept claim is logged" % case)
    ok(poll(lambda: "device_path" not in (record(a["id"]) or {"gpu": {"device_path": 1}}).get(
        "gpu", {}), 30, 0.2),
       "REC-4 (%s): a pass releases the kept claim and saves the record" % case, record(a["id"]))
    nothing_lost(c, case)
    eq(delete(c, a["id"])[0], 204, "the instance is deleted")
    nothing_lost(c, case + " (after the delete)")


def check_delete_faults(c, d):
    # INST-20: the removal's rename, then the fsync of instances/ after it.
    a = create_running(c, "dl-01", PROFILE)
    case = "fault rename data/instances/%s EIO count=1" % a["id"]
    sim_ctl(case)
    try:
        st, b = delete(c, a["id"])
    finally:
        sim_ctl("clear-faults")
    eq(st, 204, "INST-18 (%s): the delete answers 204 (the VMM is gone, the VF released)" % case)
    warn = (r'<4>instance removal incomplete instance_id=%s error="rename instances/%s to '
            r'instances/\.deleted-%s: %s"' % (a["id"], a["id"], a["id"], EIO))
    eq(log_count(d, warn), 1, "INST-20 (%s): the failed removal is logged once" % case)
    ok(get(c, a["id"]) is None, "INST-18 (%s): the instance is gone from the API" % case)
    ok(poll(lambda: not os.path.exists(os.path.join(INSTANCES, a["id"])), 20, 0.2),
       "INST-20, REC-10 (%s): a pass finds the Deleting record left on disk and completes the "
       "delete" % case, os.listdir(INSTANCES))
    ok(log_count(d, r"<5>instance record found on disk instance_id=%s state=Deleting"
                 % a["id"]) >= 1, "REC-10 (%s): the pass logs the record it found" % case)
    ok(poll(lambda: not instance_gauges(c), 10, 0.2),
       "MET-2 (%s): vgpud_instances is 0 in every state once the pass is done" % case,
       instance_gauges(c))
    nothing_lost(c, case)

    a = create_running(c, "dl-02", PROFILE)
    case = "fault fsync data/instances EIO count=1"
    sim_ctl(case)
    try:
        st, b = delete(c, a["id"])
    finally:
        sim_ctl("clear-faults")
    eq(st, 204, "INST-18, INST-20 (%s): the delete answers 204" % case)
    warn = (r'<4>instance removal incomplete instance_id=%s error="remove instance %s: sync '
            r'directory instances: %s"' % (a["id"], a["id"], EIO))
    eq(log_count(d, warn), 1, "INST-20 (%s): the failed removal is logged once" % case)
    ok(get(c, a["id"]) is None, "INST-18 (%s): the instance is gone from the API" % case)
    gone = os.path.join(INSTANCES, ".deleted-" + a["id"])
    ok(poll(lambda: not os.path.exists(gone) and not os.path.exists(
        os.path.join(INSTANCES, a["id"])), 20, 0.2),
       "INST-20, REC-10 (%s): the .deleted- tree left behind is removed by a pass" % case,
       os.listdir(INSTANCES))
    nothing_lost(c, case)


def check_console_read(c):
    a = create_running(c, "cn-01")
    case = "fault read data/instances/%s/console.log EIO" % a["id"]
    errors = http_500(c)
    sim_ctl(case)
    try:
        st, b = request(c, "GET", "/instances/%s/console" % a["id"])
    finally:
        sim_ctl("clear-faults")
    want = "read console log of instance %s: %s" % (a["id"], EIO)
    eq((st, b), (500, {"code": "internal", "message": want}),
       "API-2 (%s): the console route answers 500 '%s'" % (case, want))
    eq(http_500(c) - errors, 1, 'MET-2, API-20 (%s): vgpud_http_requests_total{code="500"} '
       'counts it' % case)
    st, _ = request(c, "GET", "/instances/%s/console" % a["id"])
    eq(st, 200, "API-2: the console reads again without the fault")
    eq(delete(c, a["id"])[0], 204, "the instance is deleted")
    nothing_lost(c, case)


# ---- NVML-7, NVML-8, NVML-9, NVML-10, NVML-11, NVML-12, NVML-13, PLACE-8, GEN-4: the fake NVML


def gpu_nvml(c):
    return {g["address"]: g["nvml"] for g in c.get("/gpus").json()["gpus"]}


def fallbacks(c, reason):
    return m(c, "vgpud_resources_gpu_nvml_fallbacks_total", reason=reason) or 0


def placed_lines(d, name_id):
    return [l for l in d.log_text().splitlines()
            if l.startswith("<6>placed vGPU claim instance_id=%s " % name_id)]


# NVML as it answers on SIM-20's host: the mixed-size GPU by NVML, the equal-size one by its
# sysfs lists (NVML-11's equal_size, which is no fault).
NVML_HEALTHY = {MIXED_PF: "ok", EQUAL_PF: "equal_size"}


def nvml_ok(c):
    return poll(lambda: gpu_nvml(c) == NVML_HEALTHY, 30, 0.2)


def create_delete(c, name, label):
    """A vGPU create that must succeed; deleted again. Returns the instance."""
    st, b = create(c, name, PROFILE)
    if ok(st == 201 and b.get("state") == "Running", "%s: the create succeeds" % label, (st, b)):
        eq(delete(c, b["id"])[0], 204, "%s: deleted again" % label)
        return b
    return None


def check_nvml_latency(c, d):
    case = "nvml latency 300"
    before = {r: fallbacks(c, r) for r in ("timeout", "stuck", "error")}
    sim_ctl(case)
    try:
        st, b = create(c, "nl-01", PROFILE)
    finally:
        sim_ctl("nvml latency 0")
    ok(st == 201 and os.path.basename(b["gpu"]["device_path"]).startswith("0000:e3:"),
       "NVML-9, PLACE-4 (%s): a claim below gpu.nvml_timeout is placed by NVML on the "
       "mixed-size GPU" % case, (st, b))
    if st == 201:
        lines = placed_lines(d, b["id"])
        ms = [int(x) for l in lines for x in re.findall(r" nvml_ms=(\d+)$", l)]
        ok(ms and ms[0] >= 300, "PLACE-22 (%s): the placed line's nvml_ms counts the latency"
           % case, lines)
        eq(delete(c, b["id"])[0], 204, "nl-01 is deleted")
    eq({r: fallbacks(c, r) for r in before}, before,
       "NVML-12, MET-2 (%s): no fallback is counted" % case)
    nothing_lost(c, case)


def check_nvml_hang(c, d):
    case = "nvml hang on"
    timeouts, stucks = fallbacks(c, "timeout"), fallbacks(c, "stuck")
    round_timeout = (503, {"code": "placement_disabled",
                           "message": "vGPU placement round timed out after " + NVML_TIMEOUT})
    res, made = {}, []
    try:
        sim_ctl(case)
        t0 = time.monotonic()
        t = threading.Thread(target=lambda: res.setdefault("r", create(c, "nh-01", PROFILE)))
        t.start()
        status, took = timed_get(c, "/healthz")
        ok(status == 200 and took < 1.0,
           "GEN-2, API-16 (%s): /healthz answers (%.1f ms) while the claim waits on NVML"
           % (case, took * 1000), status)
        t.join(60)
        took = time.monotonic() - t0
        st, b = res.get("r", (None, None))
        if st == 201:
            made.append(b["id"])
        # The claim's round and the NVML request behind it share one deadline, nvml_timeout
        # (PLACE-8, NVML-9): the claim gives up on its round, or the request's timeout falls
        # the host back first (NVML-11) and the sysfs lists place the claim (PLACE-5).
        ok((st, b) == round_timeout or st == 201,
           "PLACE-8, NVML-9 (%s): the claim ends at gpu.nvml_timeout: '%s', or placed from the "
           "sysfs lists once the request timed out" % (case, round_timeout[1]["message"]),
           (st, b))
        ok(1.9 <= took < 15, "PLACE-8 (%s): the create answered after %.1fs, not before "
           "gpu.nvml_timeout and without waiting on the hang" % (case, took))
        ok(poll(lambda: fallbacks(c, "timeout") > timeouts, 10, 0.2),
           'NVML-10, NVML-12, MET-2 (%s): nvml_fallbacks_total{reason="timeout"} counts the '
           'abandoned call' % case)
        got = poll(lambda: (lambda n: set(n.values()) <= {"timeout", "stuck"} and n)(
            gpu_nvml(c)), 20, 0.2)
        ok(bool(got), "NVML-10, NVML-11, API-6 (%s): the whole host falls back" % case,
           gpu_nvml(c))
        ok(poll(lambda: fallbacks(c, "stuck") > stucks, 20, 0.2),
           'NVML-10, MET-2 (%s): a later refresh fails at once as stuck, and is counted' % case)
        # NVML-10: nothing enters the library while the call is stuck; a claim does not wait.
        st, b = create(c, "nh-02", PROFILE)
        if ok(st == 201, "NVML-10, NVML-11, PLACE-5 (%s): a claim while the call is stuck is "
              "placed from the sysfs lists" % case, (st, b)):
            made.append(b["id"])
            ms = [int(x) for l in placed_lines(d, b["id"])
                  for x in re.findall(r" nvml_ms=(\d+)$", l)]
            ok(ms and ms[0] < 2000, "NVML-10, PLACE-22 (%s): it did not wait for NVML "
               "(nvml_ms %s)" % (case, ms), placed_lines(d, b["id"]))
        status, took = timed_get(c, "/resources")
        ok(status == 200 and took < 1.0,
           "API-16 (%s): /resources answers (%.1f ms) with the NVML call stuck"
           % (case, took * 1000), status)
    finally:
        sim_ctl("nvml hang off")
    for iid in made:
        eq(delete(c, iid)[0], 204, "the instance made under the hang is deleted")
    ok(nvml_ok(c), "NVML-10, NVML-13 (%s): NVML answers again once the hang clears" % case,
       gpu_nvml(c))
    ok(log_count(d, r"<6>NVML placements recovered") >= 1,
       "NVML-13 (%s): 'NVML placements recovered' is logged" % case)
    b = create_delete(c, "nh-03", "NVML-10 (%s, cleared)" % case)
    ok(b and vf_of(b).startswith("0000:e3:"),
       "PLACE-4 (%s, cleared): the mixed-size GPU is placed by NVML again" % case, b)
    nothing_lost(c, case)


def check_nvml_version(c, d):
    # NVML-11: ARGUMENT_VERSION_MISMATCH, on v2 and (NVML-3a) v1 alike, is the whole host's.
    function = "nvmlDeviceGetVgpuTypeCreatablePlacements"
    case = "nvml error %s ARGUMENT_VERSION_MISMATCH" % function
    before = fallbacks(c, "unavailable")
    try:
        sim_ctl(case)
        got = poll(lambda: (lambda n: set(n.values()) == {"unavailable"} and n)(gpu_nvml(c)),
                   20, 0.2)
        ok(bool(got), "NVML-11, API-6 (%s): the whole host falls back as unavailable" % case,
           gpu_nvml(c))
        ok(fallbacks(c, "unavailable") > before,
           'NVML-12, MET-2 (%s): nvml_fallbacks_total{reason="unavailable"} counts it' % case)
        warn = (r'<4>NVML placements fall back to sysfs lists reason=unavailable error='
                r'"%s\(%s, type \d+\): ARGUMENT_VERSION_MISMATCH"' % (function, MIXED_PF))
        ok(log_count(d, warn) >= 1, "NVML-5, NVML-13 (%s): the warning names the call" % case,
           [l for l in d.log_text().splitlines() if "fall back" in l][-3:])
        create_delete(c, "nv-01", "PLACE-5, NVML-11 (%s): a claim uses the sysfs lists" % case)
    finally:
        sim_ctl("nvml error %s SUCCESS" % function)
    ok(nvml_ok(c), "NVML-13 (%s): the host recovers once the call succeeds" % case, gpu_nvml(c))
    nothing_lost(c, case)


# The calls a refresh and a claim make per GPU (NVML-4): (function, code, the call as the
# warning names it).
NVML_ERRORS = [
    ("nvmlDeviceGetVgpuTypeCreatablePlacements", "GPU_IS_LOST",
     r"nvmlDeviceGetVgpuTypeCreatablePlacements\(%s, type \d+\)" % MIXED_PF),
    ("nvmlDeviceGetVgpuHeterogeneousMode", "UNKNOWN",
     r"nvmlDeviceGetVgpuHeterogeneousMode\(%s\)" % MIXED_PF),
    ("nvmlDeviceGetSupportedVgpus", "NO_PERMISSION",
     r"nvmlDeviceGetSupportedVgpus\(%s\)" % MIXED_PF),
    ("nvmlVgpuTypeGetMaxInstances", "INVALID_ARGUMENT",
     r"nvmlVgpuTypeGetMaxInstances\(%s, type \d+\)" % MIXED_PF),
]


def check_nvml_error(c, d, function, code, call):
    case = "nvml error %s %s" % (function, code)
    errors = fallbacks(c, "error")
    warn = (r'<4>NVML placements fall back to sysfs lists gpu=(\S+) reason=error error="%s: %s"'
            % (call, code))
    try:
        sim_ctl(case)
        got = poll(lambda: (lambda n: n[MIXED_PF] == "error" and n)(gpu_nvml(c)), 20, 0.2)
        ok(bool(got), "NVML-11, API-6 (%s): the mixed-size GPU falls back with reason error"
           % case, gpu_nvml(c))
        ok(fallbacks(c, "error") > errors,
           'NVML-12, MET-2 (%s): nvml_fallbacks_total{reason="error"} counts it' % case)
        ok(poll(lambda: log_count(d, warn) >= 1, 10, 0.2),
           "NVML-5, NVML-13 (%s): the warning names the call and %s" % (case, code),
           [l for l in d.log_text().splitlines() if "fall back" in l][-3:])
        b = create_delete(c, "ne-%s" % code.lower().replace("_", "-")[:20],
                          "PLACE-5, NVML-11 (%s): a claim uses the sysfs lists" % case)
        if b:
            print("# placed on %s" % vf_of(b))
    finally:
        sim_ctl("nvml error %s SUCCESS" % function)
    ok(nvml_ok(c), "NVML-13 (%s): the GPU recovers once the call succeeds" % case, gpu_nvml(c))
    nothing_lost(c, case)


def check_nvml_handle(c, d):
    # NVML-6: GPU_IS_LOST drops the PF's handle, so the next query looks it up again. A one-shot
    # error on the lookup waits for that lookup (cached handles never make one), and shows.
    lookup = "nvml error nvmlDeviceGetHandleByPciBusId_v2 GPU_NOT_FOUND count=1"
    case = "nvml error nvmlDeviceGetName GPU_IS_LOST count=1"
    sim_ctl(lookup)

    def lookups_left():
        return [e["remaining"] for e in sim_state()["nvml"]["errors"]
                if e["function"] == "nvmlDeviceGetHandleByPciBusId_v2" and e["remaining"]]
    try:
        eq(lookups_left(), [1], "NVML-6: the cached handles make no lookup")
        sim_ctl(case)
        ok(poll(lambda: not lookups_left(), 30, 0.2),
           "NVML-6 (%s): after GPU_IS_LOST the handle is looked up again" % case,
           sim_state()["nvml"])
        warn = (r'<4>NVML placements fall back to sysfs lists gpu=\S+ reason=error '
                r'error="nvmlDeviceGetHandleByPciBusId_v2\(\S+\): GPU_NOT_FOUND"')
        ok(poll(lambda: log_count(d, warn) == 1, 10, 0.2),
           "NVML-6, NVML-13 (%s): the failed lookup falls that GPU back, once" % lookup)
    finally:
        sim_ctl("nvml clear")
    ok(nvml_ok(c), "NVML-6, NVML-13: the GPU answers again with a new handle", gpu_nvml(c))
    nothing_lost(c, case)


# ---- the restart: INST-22, NVML-2, and everything still there ---------------------------------


def check_restart(work, config, secret, daemons, c, d):
    keep = create_running(c, "rs-01", PROFILE)
    eq(post(c, keep["id"], "stop")[0], 200, "rs-01 stops (a record that outlives the restart)")
    nothing_lost(c, "before the restart")
    daemons.remove(d)
    stop(d, " (before the restart)")

    sock = os.path.join(work, "api.sock")
    read_fault = "fault read data/instances/%s/instance.json EIO" % keep["id"]
    sim_ctl(read_fault)
    sim_ctl("nvml error nvmlInit_v2 DRIVER_NOT_LOADED count=1")
    try:
        d, c = start(work, "restarted", config, secret, sock)
        daemons.append(d)
        if not c:
            return
        want = "instance record %s/instances/%s unreadable: read instances/%s/instance.json: %s" % (
            os.path.join(os.environ["VGPU_SIM_MOUNT"], "data"), keep["id"], keep["id"], EIO)
        eq(gpu_body(c).get("placement_disabled_reason"), want,
           "INST-22 (%s): an unreadable record disables placement: '%s'" % (read_fault, want))
        eq(m(c, "vgpud_resources_gpu_placement_disabled"), 1.0,
           "MET-2 (%s): placement_disabled 1" % read_fault)
        ok(fallbacks(c, "unavailable") >= 1,
           'NVML-2, NVML-12 (nvml error nvmlInit_v2 DRIVER_NOT_LOADED count=1): '
           'nvml_fallbacks_total{reason="unavailable"} counts the failed init')
        ok(log_count(d, r'<4>NVML placements fall back to sysfs lists reason=unavailable '
                        r'error="nvmlInit_v2: DRIVER_NOT_LOADED"') == 1,
           "NVML-2, NVML-13: the failed init is logged with its code", d.log_text()[-2000:])
    finally:
        sim_ctl("clear-faults")
        sim_ctl("nvml clear")
    ok(poll(lambda: "placement_disabled_reason" not in gpu_body(c), 20, 0.2),
       "INST-22: a pass loads the record once it reads, and placement comes back", gpu_body(c))
    ok(nvml_ok(c), "NVML-2: a later pass initialises NVML", gpu_nvml(c))
    eq(mem_quarantines(c) >= ACKED, True,
       "HEALTH-1, REL-3: every acknowledged quarantine is loaded after the restart")
    g = get(c, keep["id"])
    eq(g and g["state"], "Stopped", "INST-21: the stopped record is loaded as Stopped")
    nothing_lost(c, "after the restart")

    # INST-22, REC-3: out of descriptors is no bad record: it is said so, and a later pass loads
    # the record. The fault fails two opens: the start-up load's and the start-up pass's, both
    # before readiness (REC-1).
    daemons.remove(d)
    stop(d, " (before the second restart)")
    emfile = "fault open data/instances/%s/instance.json EMFILE count=2" % keep["id"]
    sim_ctl(emfile)
    try:
        d, c = start(work, "restarted-emfile", config, secret, sock)
        daemons.append(d)
        if not c:
            return
        want = ("instance record %s/instances/%s not loaded, retried on the next pass: read "
                "instances/%s/instance.json: %s" % (
                    os.path.join(os.environ["VGPU_SIM_MOUNT"], "data"), keep["id"], keep["id"],
                    os.strerror(errno.EMFILE)))
        eq(gpu_body(c).get("placement_disabled_reason"), want,
           "INST-22 (%s): a record not loaded for want of descriptors says so: '%s'"
           % (emfile, want))
        ok(log_count(d, r"<4>instance record not loaded for want of descriptors; retried on the "
                        r"next pass .*instance_id=%s .*" % keep["id"]) == 2 and
           log_count(d, r"<3>instance record unreadable .*") == 0,
           "INST-22 (%s): logged as a resource failure, not as an unreadable record" % emfile)
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: "placement_disabled_reason" not in gpu_body(c), 20, 0.2),
       "INST-22, REC-3 (%s): the next pass loads the record and placement comes back" % emfile,
       gpu_body(c))
    g = get(c, keep["id"])
    eq(g and g["state"], "Stopped", "INST-22: the retried record is loaded as Stopped")
    eq(delete(c, keep["id"])[0], 204, "rs-01 is deleted")
    daemons.remove(d)
    stop(d, " (restarted)")


def group(name, fn):
    # FAULTS_DATA_ONLY=<text> runs only the groups whose name contains it (for debugging).
    only = os.environ.get("FAULTS_DATA_ONLY")
    if not only or only in name:
        run_group(name, fn)


def main():
    work = tempfile.mkdtemp(prefix="vgpud-faults-data-", dir=os.environ.get("TMPDIR", "/tmp"))
    daemons = []
    t0 = time.monotonic()
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, boot="5s", reconcile="5s")
        with open(config, "a") as f:
            f.write("  nvml_timeout: %s\n" % NVML_TIMEOUT)
        d, c = start(work, "faults-data", config, secret, os.path.join(work, "api.sock"))
        daemons.append(d)
        if not c:
            return exit_status()
        ok(poll(lambda: gpu_nvml(c) == NVML_HEALTHY and
                "placement_disabled_reason" not in gpu_body(c), 20, 0.2),
           "the host is up: NVML ok and placement enabled", gpu_body(c))
        eq(quarantine(c, ACKED_VF)[0], 200,
           "API-18: an operator quarantine is acknowledged before the faults")
        ok(ACKED_VF in ACKED and ACKED_VF in disk_quarantines(),
           "HEALTH-25: it is durable when the API answers")

        for i, row in enumerate(HEALTH_WRITES):
            group("health %d" % i, lambda: check_health_write(c, *row, first=(i == 0)))
        group("health clear", lambda: check_health_clear(c))
        group("health read", lambda: check_health_read(c, d))
        for row in CREATE_WRITES:
            group("create %s" % row[0], lambda: check_create_write(c, *row))
        group("qemu.log", lambda: check_qemu_log(c))
        group("stop", lambda: check_stop_write(c, d))
        group("delete", lambda: check_delete_faults(c, d))
        group("console", lambda: check_console_read(c))
        group("nvml latency", lambda: check_nvml_latency(c, d))
        for row in NVML_ERRORS:
            group("nvml error %s" % row[0], lambda: check_nvml_error(c, d, *row))
        group("nvml handle", lambda: check_nvml_handle(c, d))
        group("nvml version", lambda: check_nvml_version(c, d))
        group("nvml hang", lambda: check_nvml_hang(c, d))
        group("restart", lambda: check_restart(work, config, secret, daemons, c, d))
    finally:
        try:
            sim_ctl("nvml clear")
        except OSError:
            pass
        print("# run time %.1fs" % (time.monotonic() - t0))
        keep = os.environ.get("VGPUD_TEST_KEEP")
        for log in os.listdir(work) if keep else ():
            if log.endswith(".log"):
                shutil.copy(os.path.join(work, log), keep)
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
