#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-faults-sysfs.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# The sysfs half of REL-3's fault matrix (tests/integration/faults.md, section "sysfs reads and
# writes, hung writes, release lag"): every sysfs read and write vgpud performs gets EIO through
# the simulator (SIM-14), a configure and a release write hang past gpu.sysfs_timeout (GEN-4),
# and a release lag is retried (DEV-10) or outlasts the retries (REC-5). Each row injects its
# fault, drives the operation through the public API (POST /instances with fake-qemu as the
# VMM, a stop or delete, or a reconcile pass or discovery), asserts the error text and the
# metric its requirement names, clears the fault whatever happened, and then checks that
# nothing was lost: the claims on disk match the simulator's configured VFs, the quarantine
# made at the start is still in vf-health.json, every record on disk is listed by
# GET /instances, and the instance created at the start still runs with its claim.
#
# Which rows run follows the host the simulator models: SIM-20's vendor-VFIO host
# (tests/api/host-l40s.yaml) or the A40 mdev host (tests/sim/host-a40.yaml). One daemon per
# host, rows in sequence. Cases already tested in tests/api/test-api-faults.py and
# tests/integration/test-vf-hang.py are not repeated here; faults.md names those tests.
#
# Run by tests/integration/run-with-sim.sh (a private PID namespace with the simulator mounted,
# SIM-21). Output is TAP; each check names the SPEC requirements it covers.
import json
import os
import re
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import vgpud_test as vt  # noqa: E402 (after the path)
from vgpud_test import (  # noqa: E402
    HEALTH_FILE, MNT, configure, eq, exit_status, gpu_body, metric, ok, parse_metrics, poll,
    read_creatable, run_group, sim_ctl, sim_state, start, stop, write_secret)
from vgpud_instances import (  # noqa: E402
    INSTANCES, PROFILE, check_claims, create, current_type, delete_when_idle, finish_run, get,
    make_images, post, record, vf_of, vmm_config)

# GEN-4's deadline. A healthy read of one VF never comes near it; 2 s keeps the hang rows short.
SYSFS_TIMEOUT = "2s"
EIO = "Input/output error"
EBUSY = "Device or resource busy"
MDEV_PROFILE = "NVIDIA A40-2Q"
PCI = "sys/bus/pci/devices/%s"
MDEV_BUS = "sys/class/mdev_bus/%s"


# ---- what every row shares -------------------------------------------------------------------


class Host:
    """The daemon under test and what must survive every row."""

    def __init__(self, d, c, profile):
        self.d, self.c, self.profile = d, c, profile
        self.quarantined = None  # the VF quarantined at the start
        self.keeper = None  # the instance created at the start, Running throughout
        self.mdev = profile == MDEV_PROFILE


def metrics(c):
    return parse_metrics(c.get("/metrics").body.decode())


def value(c, family, **labels):
    return metric(metrics(c), family, **labels) or 0


def vf_gauges(c):
    """vgpud_resources_gpu_vfs by state (MET-2)."""
    return {l["state"]: v for _, l, v in metrics(c)["vgpud_resources_gpu_vfs"]["samples"]}


def shown_vfs(c):
    return {v["address"]: v for g in c.get("/gpus").json()["gpus"] for v in g["vfs"]}


def log_mark(d):
    return len(d.log_text())


def log_after(d, mark):
    return d.log_text()[mark:].splitlines()


def logged(d, mark, pattern, timeout=20):
    """The first line logged after mark that matches pattern (re.search), polled for."""
    def find():
        return next((l for l in log_after(d, mark) if re.search(pattern, l)), None)
    return poll(find, timeout, 0.1)


def passes_after(d, mark):
    return sum(1 for l in log_after(d, mark) if l.startswith("<7>reconcile pass done"))


def wait_passes(d, n, timeout=30):
    """Waits for n reconcile passes (REC-1) to end from now on."""
    mark = log_mark(d)
    return poll(lambda: passes_after(d, mark) >= n, timeout, 0.1)


def placement_on(c):
    return "placement_disabled_reason" not in gpu_body(c)


def records_on_disk():
    return sorted(n for n in os.listdir(INSTANCES) if re.fullmatch(r"[a-z0-9]{20}", n))


def mdev_claim_picture(c):
    """claim_picture() for an mdev host, where a claim names its mdev (INST-2's gpu.mdev_uuid):
    None when every mdev the simulator carries is claimed by exactly one record, every claim
    names an mdev the simulator carries, and /gpus shows each claim's VF as claimed by its
    instance and no other VF as claimed; else what is wrong."""
    carried = {v["mdev"]["uuid"]: v["address"] for g in sim_state()["gpus"] for v in g["vfs"]
               if v["mdev"]}
    claims = {}
    for iid in records_on_disk():
        u = ((record(iid) or {}).get("gpu") or {}).get("mdev_uuid")
        if u:
            claims.setdefault(u, []).append(iid)
    shown = shown_vfs(c)
    wrong = []
    for u, ids in sorted(claims.items()):
        if len(ids) > 1:
            wrong.append("mdev %s claimed by %s" % (u, ids))
        vf = carried.get(u)
        if not vf:
            wrong.append("mdev %s claimed by %s but not on any VF" % (u, ids))
        elif (shown.get(vf, {}).get("state"), shown.get(vf, {}).get("instance_id")) != \
                ("claimed", ids[0]):
            wrong.append("%s: /gpus shows %r for the claim of %s" % (vf, shown.get(vf), ids))
    for u, vf in sorted(carried.items()):
        if u not in claims:
            wrong.append("mdev %s on %s without a claim" % (u, vf))
    claimed_vfs = {carried.get(u) for u in claims}
    for vf, v in sorted(shown.items()):
        if v["state"] == "claimed" and vf not in claimed_vfs:
            wrong.append("%s shown claimed by %s without a record" % (vf, v.get("instance_id")))
    return "\n".join(wrong) or None


def check_mdev_claims(c, label, timeout=10):
    poll(lambda: mdev_claim_picture(c) is None, timeout, 0.2)
    wrong = mdev_claim_picture(c)
    return ok(wrong is None, label, wrong)


def nothing_lost(h, label, dirty=(), timeout=20):
    """REL-3's closing checks after a row."""
    c = h.c
    what = "REL-3 (%s): the claims on disk match the simulator's configured VFs" % label
    if h.mdev:
        check_mdev_claims(c, what, timeout)
    else:
        check_claims(c, what, dirty, timeout)
    with open(HEALTH_FILE) as f:
        recs = {r["vf_address"]: r for r in json.load(f)["records"]}
    ok("quarantined_at" in recs.get(h.quarantined, {}),
       "REL-3 (%s): the quarantine of %s is still in vf-health.json" % (label, h.quarantined),
       recs)
    listed = sorted(i["id"] for i in c.get("/instances").json())
    eq(listed, records_on_disk(), "REL-3 (%s): GET /instances lists every record on disk" % label)
    k = get(c, h.keeper["id"]) or {}
    ok(k.get("state") == "Running" and
       (k.get("gpu") or {}).get("device_path") == h.keeper["gpu"]["device_path"] and
       ((record(h.keeper["id"]) or {}).get("gpu") or {}).get("device_path") ==
       h.keeper["gpu"]["device_path"],
       "REL-3 (%s): the first instance still runs and holds its claim" % label, k)


def row(h, label, faults, body, dirty=()):
    """Injects faults, runs body, always clears the faults, then checks nothing was lost.
    dirty (or what it returns, when callable) names VFs the row may leave configured without a
    claim for REC-6 to reset."""
    try:
        for f in faults:
            sim_ctl(f)
        body()
    finally:
        sim_ctl("clear-faults")
    nothing_lost(h, label, dirty() if callable(dirty) else dirty)


def held_write():
    """The VF whose write a delay or hang fault holds (SIM-14: writes_in_flight counts from
    open() to close()), polled for; None if none shows."""
    def find():
        st = sim_state()
        for g in st["gpus"]:
            for v in g["vfs"]:
                if v["writes_in_flight"] > 0:
                    return v["address"]
        return None
    return poll(find, 10, 0.01)


class Background:
    """A request run on a thread, for rows that act while it waits on a held write."""

    def __init__(self, fn):
        self.result = None
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn):
        try:
            self.result = fn()
        except Exception as e:  # noqa: BLE001 (reported by the caller)
            self.result = ("exception", repr(e))

    def join(self, timeout=60):
        self.thread.join(timeout)
        return self.result


def failed_create(h, name, st_body, want_status, want_code, pattern, label):
    st, b = st_body
    msg = b.get("message", "") if isinstance(b, dict) else ""
    ok(st == want_status and isinstance(b, dict) and b.get("code") == want_code and
       re.search(pattern, msg), label, (st, b))
    ok(not [i for i in h.c.get("/instances").json() if i["name"] == name],
       "INST-14: the failed create of %s leaves no record" % name)


# ---- vendor VFIO: discovery (DISC-1, DISC-4..DISC-8, HEALTH-30) ------------------------------


def vfio_listing(h):
    c, d = h.c, h.d
    for glob, text in (("sys/class/mdev_bus", "discover mdev VFs: list class/mdev_bus: " + EIO),
                       ("sys/bus/pci/devices",
                        "discover vendor VFIO VFs: list bus/pci/devices: " + EIO)):
        mark = log_mark(d)

        def body():
            g = poll(lambda: (lambda g: g.get("placement_disabled_reason") == text and g)(
                gpu_body(c)), 20, 0.1)
            ok(bool(g), "DISC-1, DISC-4, DISC-7: EIO listing %s disables placement with '%s'"
               % (glob, text), gpu_body(c))
            eq(value(c, "vgpud_resources_gpu_placement_disabled"), 1,
               "MET-2: vgpud_resources_gpu_placement_disabled is 1 (%s)" % glob)
            ok(logged(d, mark, r'^<3>GPU discovery failed; keeping the last VF table '
                               r'error="%s"$' % re.escape(text), 5),
               "DISC-7: the failed discovery is logged with its error (%s)" % glob)
            eq(gpu_body(c)["total_slots"], 64, "DISC-7: the last VF table is kept (%s)" % glob)
        row(h, "EIO listing " + glob, ["fault read %s EIO" % glob], body)
        ok(poll(lambda: placement_on(c), 20, 0.1),
           "DISC-7: placement comes back with the next good discovery (%s)" % glob, gpu_body(c))


def vfio_vf_reads(h, physfn_vf, type_vf, creatable_vf, pf):
    c, d = h.c, h.d
    mark = log_mark(d)
    with open(HEALTH_FILE) as f:
        version_before = json.load(f).get("driver_version")

    def body():
        got = poll(lambda: (lambda g: g.get("unreadable") == 3 and g)(vf_gauges(c)), 20, 0.1)
        ok(bool(got), 'DISC-6, MET-2: vgpud_resources_gpu_vfs{state="unreadable"} counts the '
           'three VFs', vf_gauges(c))
        line = logged(d, mark, r"^<4>skipping unreadable vendor VFIO VFs ", 5) or ""
        for vf, what in ((physfn_vf, "read physfn link"), (type_vf, "read current vGPU type"),
                         (creatable_vf, "read creatable vGPU types")):
            ok("VF %s: %s: %s" % (vf, what, EIO) in line,
               "DISC-6: EIO on %s: 'VF <vf>: %s: %s' in the warning" % (what, what, EIO), line)
        shown = shown_vfs(c)
        eq((shown.get(type_vf, {}).get("state"), shown.get(creatable_vf, {}).get("state"),
            physfn_vf in shown), ("unreadable", "unreadable", False),
           "DISC-6, API-6: /gpus shows them unreadable (the one without a parent under no GPU)")
        g = gpu_body(c)
        ok("placement_disabled_reason" not in g and g["total_slots"] == 61,
           "DISC-6: the other VFs are read; unreadable VFs count in no slot figure", g)
        ok(logged(d, mark, r'^<4>unknown device ID of GPU gpu=%s error="%s"$'
                  % (re.escape(pf), EIO), 5),
           "DISC-8, DISC-17: EIO on the PF's device file is the warning 'unknown device ID of "
           "GPU' and the discovery goes on")
        eq(value(c, "vgpud_resources_gpu_placement_disabled"), 0,
           "MET-2: placement stays enabled with the PF's device ID and the driver version "
           "unreadable")
        with open(HEALTH_FILE) as f:
            eq(json.load(f).get("driver_version"), version_before,
               "HEALTH-30: EIO on module/nvidia/version keeps the recorded driver version")
        eq([l for l in log_after(d, mark) if "host driver version changed" in l], [],
           "HEALTH-30: an unreadable version is no change of version")
        eq(len([l for l in log_after(d, mark)
                if "host driver version unreadable; keeping the last one" in l and
                "Input/output error" in l]), 1,
           "HEALTH-30, GEN-7: the unreadable version is logged once, with its cause")

    row(h, "EIO on each VF read", [
        "fault read %s/physfn EIO" % (PCI % physfn_vf),
        "fault read %s/nvidia/current_vgpu_type EIO" % (PCI % type_vf),
        "fault read %s/nvidia/creatable_vgpu_types EIO" % (PCI % creatable_vf),
        "fault read %s/device EIO" % (PCI % pf),
        "fault read sys/module/nvidia/version EIO",
    ], body)
    ok(poll(lambda: vf_gauges(c).get("unreadable") == 0 and gpu_body(c)["total_slots"] == 64,
            20, 0.1), "DISC-6: the VFs are read again once the faults are cleared", vf_gauges(c))


# ---- vendor VFIO: REC-6's resets (DEV-9, DEV-12, REC-7) -------------------------------------


def group_node(vf):
    for g in sim_state()["gpus"]:
        for v in g["vfs"]:
            if v["address"] == vf:
                return os.path.join(MNT, "dev", "vfio", str(v["iommu_group"]))
    raise RuntimeError("no VF %s" % vf)


def vfio_resets(h, write_vf, cdev_vf, group_vf):
    c, d = h.c, h.d
    vfs = (write_vf, cdev_vf, group_vf)
    type_id = dict((n, i) for i, n in read_creatable(write_vf))[PROFILE]
    # Held open while they are configured and the faults go in, so that no pass resets them
    # early (REC-6 leaves a VF held open); released once the faults are in place.
    held = [open(group_node(vf)) for vf in vfs]
    try:
        for vf in vfs:
            configure(vf, type_id)
    except Exception:
        for f in held:
            f.close()
        raise
    before = value(c, "vgpud_instances_vgpu_reconcile_failures_total",
                   stage="reset_unclaimed_vfs")
    mark = log_mark(d)

    def body():
        for f in held:
            f.close()
        base = MNT + "/sys/bus/pci/devices/"
        want = {
            write_vf: "destroy vGPU on VF %s: %s" % (write_vf, EIO),
            cdev_vf: "check vendor VFIO vGPU usage for VF %s: list %s%s/vfio-dev: %s"
                     % (cdev_vf, base, cdev_vf, EIO),
            group_vf: "check vendor VFIO vGPU usage for VF %s: read link %s%s/iommu_group: %s"
                      % (group_vf, base, group_vf, EIO),
        }
        for (vf, text), shown in zip(want.items(), (
                "destroy vGPU on VF <vf>: " + EIO,
                "check vendor VFIO vGPU usage for VF <vf>: list <sysfs_root>/bus/pci/devices/"
                "<vf>/vfio-dev: " + EIO,
                "check vendor VFIO vGPU usage for VF <vf>: read link <sysfs_root>/bus/pci/"
                "devices/<vf>/iommu_group: " + EIO)):
            ok(logged(d, mark, r'^<3>reconcile stage failed stage=reset_unclaimed_vfs what=%s '
                               r'error="%s"$' % (re.escape(vf), re.escape(text)), 25),
               "REC-6, REC-7: the reset of a dirty VF fails: '%s'" % shown, text)
        ok(value(c, "vgpud_instances_vgpu_reconcile_failures_total",
                 stage="reset_unclaimed_vfs") >= before + 3,
           'REC-7, MET-2: vgpud_instances_vgpu_reconcile_failures_total'
           '{stage="reset_unclaimed_vfs"} counts the three failures')
        eq([current_type(vf) for vf in vfs], [str(type_id)] * 3,
           "REC-7: the VFs keep their types while the resets fail")

    row(h, "EIO on a reset's write and probe", [
        "fault write %s/nvidia/current_vgpu_type EIO" % (PCI % write_vf),
        "fault read %s/vfio-dev EIO" % (PCI % cdev_vf),
        "fault read %s/iommu_group EIO" % (PCI % group_vf),
    ], body, dirty=vfs)
    ok(poll(lambda: [current_type(vf) for vf in vfs] == ["0"] * 3, 25, 0.2),
       "REC-7: the next pass resets the three VFs once the faults are cleared",
       [current_type(vf) for vf in vfs])
    nothing_lost(h, "after the resets")


# ---- vendor VFIO: configure (DEV-6, DEV-7, PLACE-17) ------------------------------------------


def vfio_configure_refused(h):
    c, d = h.c, h.d
    glob = "sys/bus/pci/devices/*/nvidia/current_vgpu_type"
    mark = log_mark(d)
    made = []

    def once():
        claimed = vf_gauges(c).get("claimed", 0)
        st, inst = create(c, "refused-once", PROFILE)
        if st == 201:
            made.append(inst)
        ok(st == 201, "DEV-7, PLACE-17: one refused type write is retried on another VF", inst)
        line = logged(d, mark, r"^<6>configure vGPU .*outcome=failed error=\"driver refused "
                               r"vGPU type \d+ on VF \S+: %s\"" % EIO, 5)
        ok(bool(line), "DEV-7, DEV-19: the refusal is logged as 'driver refused vGPU type <id> "
           "on VF <vf>: %s'" % EIO)
        if st == 201 and line:
            refused = re.search(r" vf=(\S+)", line).group(1)
            ok(refused != vf_of(inst), "PLACE-17: the retry excludes the refusing VF",
               (refused, vf_of(inst)))
        eq(vf_gauges(c).get("claimed", 0), claimed + (st == 201),
           'MET-2: vgpud_resources_gpu_vfs{state="claimed"} counts the new claim')
    row(h, "EIO on one configure write", ["fault write %s EIO count=1" % glob], once)
    for inst in made:
        eq(delete_when_idle(c, inst["id"])[0], 204, "the instance is deleted")

    def always():
        before = value(c, "vgpud_http_requests_total", code="409")
        r = create(c, "refused-twice", PROFILE)
        failed_create(h, "refused-twice", r, 409, "insufficient_resources",
                      r"^driver refused vGPU type \d+ on VF \S+: %s$" % EIO,
                      "DEV-7, PLACE-17: a second refused write is 409 insufficient_resources "
                      "with the driver's text")
        eq(value(c, "vgpud_http_requests_total", code="409"), before + 1,
           'MET-2: vgpud_http_requests_total{code="409"} counts the refusal')
    row(h, "EIO on every configure write", ["fault write %s EIO" % glob], always)


def vfio_configure_unverified(h):
    c, d = h.c, h.d
    glob = "sys/bus/pci/devices/*/nvidia/current_vgpu_type"
    for label, extra, suffix in (
            ("EIO on the read-back", [], ""),
            ("EIO on the read-back and the rollback", ["write"], "; rollback: " + EIO)):
        name = "unverified-%d" % len(extra)
        state = {}

        def body():
            before = value(c, "vgpud_http_requests_total", code="500")
            bg = Background(lambda: create(c, name, PROFILE))
            vf = held_write()
            if not ok(bool(vf), "SIM-14: the configure write is held (%s)" % label):
                bg.join()
                return
            state["vf"] = vf
            # The read-back runs in the same job, after the held write: one use hits it.
            path = "%s/nvidia/current_vgpu_type" % (PCI % vf)
            sim_ctl("fault read %s EIO count=1" % path)
            if extra:
                sim_ctl("fault write %s EIO count=1" % path)
            text = "verify vGPU on VF %s: read current vGPU type for VF %s: %s%s" % (
                vf, vf, EIO, suffix)
            failed_create(h, name, bg.join(), 500, "internal", "^%s$" % re.escape(text),
                          "DEV-6: %s fails the create with 500: '%s'"
                          % (label, text.replace(vf, "<vf>")))
            eq(value(c, "vgpud_http_requests_total", code="500"), before + 1,
               'MET-2: vgpud_http_requests_total{code="500"} counts it (%s)' % label)
            eq(current_type(vf) != "0", bool(extra),
               "DEV-6: the VF is %s" % ("left configured when the rollback fails" if extra
                                        else "rolled back to 0"))

        row(h, label, ["fault write %s delay:1500 count=1" % glob], body,
            dirty=lambda: [state["vf"]] if extra and "vf" in state else [])
        if extra and "vf" in state:
            ok(poll(lambda: current_type(state["vf"]) == "0", 25, 0.2),
               "DEV-6, REC-6: the VF the failed rollback left is reset by a pass")
            nothing_lost(h, "after the failed rollback")


# ---- vendor VFIO: releases (DEV-10, REC-4, REC-5, INST-15, INST-18) -------------------------


def vfio_release_refused(h):
    c, d = h.c, h.d
    st, inst = create(c, "release-eio", PROFILE)
    if not ok(st == 201, "release-eio is created", inst):
        return
    vf = vf_of(inst)
    mark = log_mark(d)

    def body():
        eq(delete_when_idle(c, inst["id"])[0], 204,
           "DEV-10, INST-18: the delete answers 204 after a refused release write")
        line = logged(d, mark, r"^<6>release vGPU vf=%s .*outcome=released attempts=(\d+)$"
                      % re.escape(vf), 10)
        n = int(re.search(r"attempts=(\d+)$", line).group(1)) if line else 0
        print("# release after a refused write: attempts=%d" % n)
        ok(n >= 2, "DEV-10, DEV-19: the release succeeds on a retry (attempts >= 2)", line)
        eq(current_type(vf), "0", "DEV-9: the VF is free")
        eq(value(c, "vgpud_instances_vgpu_stale_release_failures_total"), h.stale_failures,
           "MET-2: no stale release failure is counted")
    row(h, "EIO on one release write",
        ["fault write %s/nvidia/current_vgpu_type EIO count=1" % (PCI % vf)], body)


def vfio_release_lag(h):
    c, d = h.c, h.d
    st, inst = create(c, "lag-short", PROFILE)
    if not ok(st == 201, "lag-short is created", inst):
        return
    vf = vf_of(inst)
    mark = log_mark(d)

    def body():
        sim_ctl("release-lag %s 2500" % vf)
        t0 = time.monotonic()
        eq(delete_when_idle(c, inst["id"])[0], 204, "DEV-10: the delete answers 204")
        took = time.monotonic() - t0
        line = logged(d, mark, r"^<6>release vGPU vf=%s .*outcome=released attempts=(\d+)$"
                      % re.escape(vf), 10)
        n = int(re.search(r"attempts=(\d+)$", line).group(1)) if line else 0
        print("# 2.5 s release lag: attempts=%d, delete took %.1f s" % (n, took))
        ok(n >= 2, "DEV-10, SIM-14: a 2.5 s release lag is outlasted by the retries "
           "(attempts >= 2)", line)
        eq(current_type(vf), "0", "DEV-10: the VF is free after the lag")
        eq(value(c, "vgpud_instances_vgpu_stale_release_failures_total"), h.stale_failures,
           "MET-2: no stale release failure is counted for a lag the retries outlast")
    try:
        row(h, "release lag within the retries", [], body)
    finally:
        sim_ctl("release-lag %s 0" % vf)

    st, inst = create(c, "lag-long", PROFILE)
    if not ok(st == 201, "lag-long is created", inst):
        return
    vf = vf_of(inst)
    iid = inst["id"]
    text = "destroy vGPU on VF %s: %s" % (vf, EBUSY)

    def long_body():
        sim_ctl("release-lag %s 3600000" % vf)
        mark = log_mark(d)
        before = (value(c, "vgpud_instances_vgpu_stale_release_failures_total"),
                  value(c, "vgpud_instances_vgpu_reconcile_failures_total",
                        stage="release_stale"))
        st, b = post(c, iid, "stop")
        ok(st == 200 and b.get("state") == "Stopped" and "device_path" in b.get("gpu", {}),
           "INST-15: a stop whose release outlasts DEV-10's retries answers 200 with the claim "
           "kept", (st, b))
        ok(logged(d, mark, r'^<6>release vGPU vf=%s .*outcome=failed attempts=10 error="%s"$'
                  % (re.escape(vf), re.escape(text)), 5),
           "DEV-10, DEV-19: the release gives up after 10 attempts: 'destroy vGPU on VF <vf>: "
           "%s'" % EBUSY)
        ok(poll(lambda: value(c, "vgpud_instances_vgpu_stale_release_failures_total") >
                before[0], 40, 0.2),
           "REC-5, MET-2: vgpud_instances_vgpu_stale_release_failures_total counts a pass's "
           "failed release of the stale claim")
        ok(poll(lambda: value(c, "vgpud_instances_vgpu_reconcile_failures_total",
                              stage="release_stale") > before[1], 20, 0.2),
           'REC-5, MET-2: and so does reconcile_failures_total{stage="release_stale"}')
        ok(logged(d, mark, r'^<4>failed to release stale vGPU assignment; retrying on the next '
                           r'reconcile pass instance_id=%s device_path=\S+ error="%s"$'
                  % (iid, re.escape(text)), 5),
           "REC-5: the failure is logged with REC-5's text")
        r = record(iid) or {}
        ok("device_path" in r.get("gpu", {}) and current_type(vf) != "0",
           "REC-5: the claim is kept on disk and the VF stays configured", r)
        mark = log_mark(d)
        sim_ctl("release-lag %s 0" % vf)
        ok(logged(d, mark, r"^<6>released stale vGPU assignment instance_id=%s$" % iid, 40),
           "REC-4, REC-5: once the lag ends a pass releases the stale claim")
        ok(poll(lambda: "device_path" not in (record(iid) or {}).get("gpu", {}), 10, 0.1),
           "REC-4: the claim is cleared on disk", record(iid))
    try:
        row(h, "release lag beyond the retries", [], long_body)
    finally:
        sim_ctl("release-lag %s 0" % vf)
    eq(delete_when_idle(c, iid)[0], 204, "the stopped instance is deleted")


# ---- vendor VFIO: hung writes (GEN-4) -----------------------------------------------------------


def vfio_hung_configure(h):
    c, d = h.c, h.d
    glob = "sys/bus/pci/devices/*/nvidia/current_vgpu_type"
    state = {}

    def body():
        bg = Background(lambda: create(c, "hung-configure", PROFILE))
        vf = held_write()
        if not ok(bool(vf), "SIM-14: the configure write hangs"):
            return
        state["vf"] = vf
        status, took = vt.timed_get(c, "/resources")
        print("# GET /resources with the configure write hung: %.1f ms" % (took * 1000))
        ok(status == 200 and took < 1.0,
           "GEN-4, API-16: GET /resources answers within 1 s while the configure write hangs",
           status)
        res = bg.join()
        print("# hung configure: %r" % (res,))
        failed_create(h, "hung-configure", res, 500, "internal",
                      r"configure vGPU on VF %s: timed out after %s$" % (re.escape(vf),
                                                                        SYSFS_TIMEOUT),
                      "GEN-4, GEN-7, GEN-12: the create fails once the write is abandoned: "
                      "'configure vGPU on VF <vf>: timed out after %s'" % SYSFS_TIMEOUT)
        v = shown_vfs(c).get(vf, {})
        ok(v.get("uncertain") is True, "GEN-4, API-6: the VF is uncertain in /gpus", v)
        eq(vf_gauges(c).get("uncertain"), 1,
           'GEN-4, MET-2: vgpud_resources_gpu_vfs{state="uncertain"} is 1')
        st, inst = create(c, "beside-hung", PROFILE)
        ok(st == 201 and vf_of(inst) != vf,
           "GEN-4: a claim while the VF is uncertain lands on another VF", (st, inst))
        if st == 201:
            eq(delete_when_idle(c, inst["id"])[0], 204, "that instance is deleted")
    row(h, "hung configure write", ["fault write %s hang count=1" % glob], body,
        dirty=lambda: [state["vf"]] if "vf" in state else [])
    if "vf" in state:
        vf = state["vf"]
        ok(poll(lambda: not shown_vfs(c).get(vf, {}).get("uncertain") and
                current_type(vf) == "0", 25, 0.2),
           "GEN-4, REC-6: once the write returns, the VF is certain and a pass resets what it "
           "wrote", (shown_vfs(c).get(vf), current_type(vf)))
        eq(vf_gauges(c).get("uncertain"), 0, "MET-2: nothing is uncertain afterwards")
        nothing_lost(h, "after the hung configure")


def vfio_hung_release(h):
    c, d = h.c, h.d
    st, inst = create(c, "hung-release", PROFILE)
    if not ok(st == 201, "hung-release is created", inst):
        return
    vf = vf_of(inst)
    mark = log_mark(d)

    def body():
        st = delete_when_idle(c, inst["id"])[0]
        eq(st, 204, "GEN-4, INST-18: a delete whose release write hangs still answers 204")
        ok(logged(d, mark, r'^<6>release vGPU vf=%s .*outcome=failed .*error="timed out after '
                           r'%s"$' % (re.escape(vf), SYSFS_TIMEOUT), 5),
           "GEN-4, GEN-12, DEV-19: the release is abandoned: 'timed out after %s'"
           % SYSFS_TIMEOUT)
        v = shown_vfs(c).get(vf, {})
        ok(v.get("uncertain") is True and v.get("state") == "dirty",
           "GEN-4, API-6: the VF is dirty and uncertain in /gpus", v)
        eq(vf_gauges(c).get("uncertain"), 1,
           'GEN-4, MET-2: vgpud_resources_gpu_vfs{state="uncertain"} is 1')
        eq(current_type(vf) != "0", True, "GEN-4: the VF still holds its type meanwhile")
    row(h, "hung release write",
        ["fault write %s/nvidia/current_vgpu_type hang" % (PCI % vf)], body, dirty=[vf])
    ok(poll(lambda: current_type(vf) == "0" and not shown_vfs(c).get(vf, {}).get("uncertain"),
            25, 0.2), "GEN-4: once the write returns, the VF is free and certain",
       shown_vfs(c).get(vf))
    nothing_lost(h, "after the hung release")


# ---- mdev host -----------------------------------------------------------------------------------


def mdev_listing(h):
    c, d = h.c, h.d
    text = "discover mdev VFs: list bus/mdev/devices: " + EIO

    def body():
        g = poll(lambda: (lambda g: g.get("placement_disabled_reason") == text and g)(
            gpu_body(c)), 20, 0.1)
        ok(bool(g), "DISC-9, DISC-7: EIO listing bus/mdev/devices disables placement with "
           "'%s'" % text, gpu_body(c))
        eq(value(c, "vgpud_resources_gpu_placement_disabled"), 1,
           "MET-2: vgpud_resources_gpu_placement_disabled is 1")
    row(h, "EIO listing bus/mdev/devices", ["fault read sys/bus/mdev/devices EIO"], body)
    ok(poll(lambda: placement_on(c), 20, 0.1),
       "DISC-7: placement comes back with the next good discovery", gpu_body(c))


def mdev_vf_reads(h, types_vf, name_vf, desc_vf, avail_vf, physfn_vf):
    c, d = h.c, h.d
    mark = log_mark(d)
    keeper_uuid = h.keeper["gpu"]["mdev_uuid"]
    avail_before = {p["name"]: p["available"] for p in gpu_body(c)["profiles"]}

    def body():
        want = {
            types_vf: "list mdev_supported_types: " + EIO,
            name_vf: "read mdev type nvidia-\\d+ name: " + EIO,
            desc_vf: "read mdev type nvidia-\\d+ description: " + EIO,
            physfn_vf: "read physfn link: " + EIO,
        }

        def line():
            l = logged(d, mark, r"^<4>skipping unreadable mdev parents ", 0) or ""
            return l if all(re.search(r"VF %s: %s" % (re.escape(vf), t), l)
                            for vf, t in want.items()) else None
        got = poll(line, 20, 0.2)
        for vf, t in want.items():
            shown = t.replace("\\d+", "<n>")
            ok(bool(got) and re.search(r"VF %s: %s" % (re.escape(vf), t), got),
               "DISC-3: EIO on %s skips the parent: 'VF <vf>: %s'"
               % (shown.rsplit(":", 1)[0], shown),
               logged(d, mark, r"^<4>skipping unreadable mdev parents ", 0))
        g = gpu_body(c)
        ok("placement_disabled_reason" not in g and g["total_slots"] == 4,
           "DISC-3: the four unreadable parents leave the table; the other four stay", g)
        eq(value(c, "vgpud_resources_gpu_slots", kind="total"), 4,
           'MET-2: vgpud_resources_gpu_slots{kind="total"} counts the four readable VFs')
        avail = {p["name"]: p["available"] for p in g["profiles"]}
        eq(avail.get(h.profile), avail_before.get(h.profile, 0) - 5,
           "PLACE-6, PLACE-21, MET-2: EIO on available_instances counts that VF as 0 "
           "(fail closed), with the four skipped ones")
        eq(value(c, "vgpud_resources_gpu_profile_slots", profile=h.profile, kind="available"),
           avail.get(h.profile), "MET-2: vgpud_resources_gpu_profile_slots agrees")
        ok(logged(d, mark, r'^<4>skipping unreadable mdev mdev=%s error="%s"'
                  % (keeper_uuid, EIO), 5),
           "DISC-9: EIO on an active mdev's device link skips it with a warning")

    row(h, "EIO on each mdev VF read", [
        "fault read %s/mdev_supported_types EIO" % (MDEV_BUS % types_vf),
        "fault read %s/mdev_supported_types/*/name EIO" % (MDEV_BUS % name_vf),
        "fault read %s/mdev_supported_types/*/description EIO" % (MDEV_BUS % desc_vf),
        "fault read %s/mdev_supported_types/*/available_instances EIO" % (MDEV_BUS % avail_vf),
        "fault read %s/physfn EIO" % (MDEV_BUS % physfn_vf),
        "fault read sys/bus/mdev/devices/%s EIO" % keeper_uuid,
    ], body)
    ok(poll(lambda: {p["name"]: p["available"] for p in gpu_body(c)["profiles"]} ==
            avail_before and gpu_body(c)["total_slots"] == 8, 20, 0.2),
       "DISC-3: every parent is read again once the faults are cleared", gpu_body(c))


def mdev_create_refused(h):
    c, d = h.c, h.d
    glob = "sys/class/mdev_bus/*/mdev_supported_types/*/create"
    mark = log_mark(d)
    made = []

    def body():
        st, inst = create(c, "mdev-refused", h.profile)
        if st == 201:
            made.append(inst)
        ok(st == 201, "DEV-16, PLACE-17: one refused mdev create is retried on another VF", inst)
        ok(logged(d, mark, r'^<6>configure vGPU vf=\S+ .*outcome=failed error="create mdev on '
                           r'VF \S+: %s"' % EIO, 5),
           "DEV-16, DEV-19: the refusal is logged as 'create mdev on VF <vf>: %s'" % EIO)
        eq(vf_gauges(c).get("claimed"), 2,
           'MET-2: vgpud_resources_gpu_vfs{state="claimed"} counts the new claim')
    row(h, "EIO on one mdev create", ["fault write %s EIO count=1" % glob], body)
    return made


def mdev_create_unverified(h):
    c, d = h.c, h.d
    glob = "sys/class/mdev_bus/*/mdev_supported_types/*/create"

    def body():
        bg = Background(lambda: create(c, "mdev-unverified", h.profile))
        vf = held_write()
        if not ok(bool(vf), "SIM-14: the mdev create write is held"):
            bg.join()
            return
        uuid = None
        for iid in records_on_disk():
            r = record(iid) or {}
            if r.get("name") == "mdev-unverified":
                uuid = r.get("gpu", {}).get("mdev_uuid")
        if not ok(bool(uuid), "PLACE-1: the claim with its mdev UUID is on disk before the "
                  "write"):
            bg.join()
            return
        before = value(c, "vgpud_http_requests_total", code="500")
        sim_ctl("fault read sys/bus/mdev/devices/%s/mdev_type EIO count=1" % uuid)
        text = "create mdev on VF %s: read type of mdev %s: %s" % (vf, uuid, EIO)
        failed_create(h, "mdev-unverified", bg.join(), 500, "internal", "^%s$" % re.escape(text),
                      "DEV-16: EIO on the created mdev's mdev_type link fails the create with "
                      "500: 'create mdev on VF <vf>: read type of mdev <uuid>: %s'" % EIO)
        ok(not os.path.exists(os.path.join(MNT, "sys/bus/mdev/devices", uuid)),
           "DEV-16: the unverified mdev is removed")
        eq(value(c, "vgpud_http_requests_total", code="500"), before + 1,
           'MET-2: vgpud_http_requests_total{code="500"} counts it')
    row(h, "EIO on the mdev read-back", ["fault write %s delay:1500 count=1" % glob], body)


def mdev_remove_refused(h, inst):
    c, d = h.c, h.d
    uuid = inst["gpu"]["mdev_uuid"]
    mark = log_mark(d)

    def body():
        eq(delete_when_idle(c, inst["id"], timeout=40)[0], 204,
           "DEV-17, INST-18: the delete answers 204 after a refused remove")
        line = logged(d, mark, r"^<6>release vGPU .*mdev_uuid=%s .*outcome=released "
                               r"attempts=(\d+)$" % uuid, 5)
        n = int(re.search(r"attempts=(\d+)$", line).group(1)) if line else 0
        print("# mdev remove after a refused write: attempts=%d" % n)
        ok(n >= 2, "DEV-10, DEV-17: the remove succeeds on a retry (attempts >= 2)", line)
        ok(not os.path.exists(os.path.join(MNT, "sys/bus/mdev/devices", uuid)),
           "DEV-17: the mdev is gone")
    row(h, "EIO on one mdev remove",
        ["fault write sys/bus/mdev/devices/%s/remove EIO count=1" % uuid], body)


def mdev_probe_refused(h, inst):
    c, d = h.c, h.d
    uuid = inst["gpu"]["mdev_uuid"]
    mark = log_mark(d)

    def body():
        # INST-18: the instance goes whatever the release's result; the mdev is left to REC-8.
        eq(delete_when_idle(c, inst["id"], timeout=40)[0], 204,
           "DEV-12, INST-18: the delete answers 204 after an in-use probe that failed")
        line = logged(d, mark, r'^<6>release vGPU .*mdev_uuid=%s .*outcome=failed .*error="'
                               r'check mdev %s usage: [^"]*Input/output error"$' % (uuid, uuid), 5)
        ok(bool(line), "DEV-9, DEV-12: the release fails with the probe's error: 'check mdev "
           "<uuid> usage: …Input/output error'", log_after(d, mark)[-5:])
        ok(os.path.exists(os.path.join(MNT, "sys/bus/mdev/devices", uuid)),
           "DEV-12: an mdev whose probe failed is not removed")
    # Not a row(): the instance deleted is the first one, whose claim row() checks for.
    try:
        sim_ctl("fault read sys/*%s/iommu_group EIO count=1" % uuid)
        body()
    finally:
        sim_ctl("clear-faults")
    # REC-8: once the orphan is over five minutes old, a pass removes it.
    sim_ctl("age %s 301" % uuid)
    ok(poll(lambda: not os.path.exists(os.path.join(MNT, "sys/bus/mdev/devices", uuid)), 30, 0.1),
       "REC-8: the mdev the delete left is removed by a pass once over 5 minutes old")


# ---- main ---------------------------------------------------------------------------------------


def setup_host(c, d, profile, quarantine_vf):
    h = Host(d, c, profile)
    h.quarantined = quarantine_vf
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % quarantine_vf, {"reason": "REL-3 witness"})
    ok(r.status == 200, "HEALTH-25: the witness quarantine of %s is made" % quarantine_vf,
       vt.error_of(r))
    st, inst = create(c, "keeper", profile)
    if not ok(st == 201, "the first instance is created and runs", (st, inst)):
        return None
    h.keeper = inst
    h.stale_failures = value(c, "vgpud_instances_vgpu_stale_release_failures_total")
    nothing_lost(h, "start")
    return h


def run_vfio(c, d):
    ok(poll(lambda: placement_on(c) and gpu_body(c)["total_slots"] == 64, 20, 0.1),
       "the 64 VFs are discovered", gpu_body(c))
    # The witness on the equal-size card ranks it last (PLACE-13), so claims land on the mixed
    # card and the equal-size card's VFs are free for the discovery and reset rows.
    h = setup_host(c, d, PROFILE, "0001:c8:00.4")
    if not h:
        return
    equal = ["0001:c8:%02x.%d" % ((4 + i) // 8, (4 + i) % 8) for i in range(32)]
    run_group("vfio-listing", lambda: vfio_listing(h))
    run_group("vfio-vf-reads", lambda: vfio_vf_reads(h, equal[1], equal[2], equal[3],
                                                 "0001:c8:00.0"))
    run_group("vfio-resets", lambda: vfio_resets(h, equal[4], equal[5], equal[6]))
    run_group("vfio-configure-refused", lambda: vfio_configure_refused(h))
    run_group("vfio-configure-unverified", lambda: vfio_configure_unverified(h))
    run_group("vfio-release-refused", lambda: vfio_release_refused(h))
    run_group("vfio-hung-configure", lambda: vfio_hung_configure(h))
    run_group("vfio-hung-release", lambda: vfio_hung_release(h))
    run_group("vfio-release-lag", lambda: vfio_release_lag(h))
    eq(delete_when_idle(c, h.keeper["id"])[0], 204, "the first instance is deleted")
    check_claims(c, "REL-3: no claim and no configured VF is left")


def run_mdev(c, d):
    vfs = [v["address"] for v in sim_state()["gpus"][0]["vfs"]]
    ok(poll(lambda: placement_on(c) and gpu_body(c)["total_slots"] == len(vfs), 20, 0.1),
       "the mdev VFs are discovered", gpu_body(c))
    h = setup_host(c, d, MDEV_PROFILE, vfs[0])
    if not h:
        return
    free = [v for v in vfs[1:] if v != vf_of_mdev(h.keeper)]
    run_group("mdev-listing", lambda: mdev_listing(h))
    run_group("mdev-vf-reads", lambda: mdev_vf_reads(h, *free[:5]))
    made = []
    run_group("mdev-create-refused", lambda: made.extend(mdev_create_refused(h)))
    run_group("mdev-create-unverified", lambda: mdev_create_unverified(h))
    for inst in made:
        run_group("mdev-remove-refused", lambda: mdev_remove_refused(h, inst))
    run_group("mdev-probe-refused", lambda: mdev_probe_refused(h, h.keeper))
    check_mdev_claims(c, "REL-3: no claim and no mdev is left")


def vf_of_mdev(inst):
    """The parent VF of an mdev instance, from the simulator."""
    uuid = inst["gpu"]["mdev_uuid"]
    for g in sim_state()["gpus"]:
        for v in g["vfs"]:
            if (v.get("mdev") or {}).get("uuid") == uuid:
                return v["address"]
    return None


def main():
    work = tempfile.mkdtemp(prefix="vgpud-faults-sysfs-", dir=os.environ.get("TMPDIR", "/tmp"))
    daemons = []
    t0 = time.monotonic()
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, boot="3s", stop="3s",
                            extra_gpu="  sysfs_timeout: %s\n" % SYSFS_TIMEOUT)
        mdev = sim_state()["gpus"][0]["model"] == "A40-mdev"
        d, c = start(work, "mdev" if mdev else "vfio", config, secret,
                     os.path.join(work, "api.sock"))
        daemons.append(d)
        if c:
            if mdev:
                run_mdev(c, d)
            else:
                run_vfio(c, d)
            eq(sim_state()["forbidden_writes"], [], "SIM-16, DEV-18: no forbidden write")
            daemons.remove(d)
            stop(d)
    finally:
        print("# run time %.1f s" % (time.monotonic() - t0))
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
