#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-vf-hang.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# One hung VF on SIM-20's host (GEN-4): a `hang` fault on one VF's current_vgpu_type read makes
# that VF uncertain alone. Discovery reads each VF in a job of its own keyed by the VF's address,
# so the discovery still succeeds (no DISC-7 failure, placement stays enabled), the VF keeps its
# state from the last table with `"uncertain": true` in /gpus (API-6), the uncertain gauge counts
# it (MET-2), the figures leave it out of allocatable_slots (API-5), a claim lands on another VF
# (PLACE), and later passes do not wait on it again. After clear-faults the call returns and the
# VF is read and placeable again. The same hang at start-up, before any table exists, leaves the
# new VF unreadable and uncertain (DISC-6) while the other 63 are placeable.
#
# Run by tests/integration/run-with-sim.sh (mounts the simulator in a private PID namespace,
# SIM-21) against the real vgpud with the fake NVML and fake-qemu (SIM-15). Every daemon is
# stopped and every fault cleared, whatever happens. Output is TAP; each check names the SPEC
# requirements it covers.
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    eq, exit_status, gpu_body, log_count, metric, ok, parse_metrics, poll, run_group, sim_ctl,
    sim_state, start, stop, write_secret)
from vgpud_instances import (  # noqa: E402
    PROFILE, check_claims, create, current_type, delete_when_idle, finish_run, make_images,
    vf_of, vmm_config)

# GEN-4's deadline (gpu.sysfs_timeout). Each VF read has its own, so a healthy read of one VF
# never comes near it even on a loaded machine; 2 s keeps the wait for the hang short.
SYSFS_TIMEOUT = "2s"
TIMEOUT_SECONDS = 2.0
HANG = "fault read sys/bus/pci/devices/%s/nvidia/current_vgpu_type hang"


def shown_vfs(c):
    """/gpus' VFs by address (API-6)."""
    return {v["address"]: v for g in c.get("/gpus").json()["gpus"] for v in g["vfs"]}


def vf_gauges(c):
    """vgpud_resources_gpu_vfs by state (MET-2)."""
    fams = parse_metrics(c.get("/metrics").body.decode())
    return {l["state"]: v for _, l, v in fams["vgpud_resources_gpu_vfs"]["samples"]}


def pass_seconds(d):
    """The durations of the reconcile passes logged so far (REC-11), in seconds."""
    out = []
    for line in d.log_text().splitlines():
        if not line.startswith("<7>reconcile pass done"):
            continue
        m = re.search(r" duration=(?:(\d+)m)?([0-9.]+)(ms|s)\b", line)
        if not m:
            out.append(0.0)  # µs or ns: far below anything checked here
            continue
        v = float(m.group(2)) / (1000.0 if m.group(3) == "ms" else 1.0)
        out.append(v + 60.0 * int(m.group(1) or 0))
    return out


def settled(c, baseline):
    """The figures of the host before the hang, again: nothing uncertain, placement on."""
    g = gpu_body(c)
    return ("placement_disabled_reason" not in g and
            g["total_slots"] == baseline["total_slots"] and
            g["allocatable_slots"] == baseline["allocatable_slots"] and
            not any(v.get("uncertain") for v in shown_vfs(c).values()) and g)


# ---- a VF that hangs under a running daemon ---------------------------------------------------


def check_hang_running(c, d):
    baseline = poll(lambda: (lambda g: "placement_disabled_reason" not in g and g)(gpu_body(c)),
                    20, 0.25)
    if not ok(bool(baseline) and baseline["allocatable_slots"] == baseline["total_slots"] == 64,
              "API-5: the empty host's 64 VFs are all allocatable before the hang", gpu_body(c)):
        return

    # The VF a claim picks on this host: the one to hang, so that the claim must go elsewhere.
    st, inst = create(c, "probe-01", PROFILE)
    if not ok(st == 201, "a vGPU instance is created before the hang", (st, inst)):
        return
    vf = vf_of(inst)
    eq(delete_when_idle(c, inst["id"])[0], 204, "the probe instance is deleted")
    check_claims(c, "DEV-10: the probe's VF is released")
    ok(bool(poll(lambda: settled(c, baseline), 20, 0.25)),
       "API-5: the figures return to the empty host's", gpu_body(c))

    try:
        sim_ctl(HANG % vf)
        # The next pass's read of vf hangs, and is abandoned at gpu.sysfs_timeout.
        got = poll(lambda: shown_vfs(c)[vf].get("uncertain") and shown_vfs(c), 30, 0.2)
        if not ok(bool(got), "GEN-4, API-6: %s is uncertain in /gpus after gpu.sysfs_timeout"
                  % vf, shown_vfs(c)[vf]):
            return
        eq(got[vf]["state"], "free",
           "GEN-4: an uncertain VF keeps its state from the last table")
        eq(sorted(a for a, v in got.items() if v.get("uncertain")), [vf],
           "GEN-4: no other VF is uncertain")
        eq(sorted(a for a, v in got.items() if v["state"] != "free"), [],
           "DISC-6: every other VF was read (none unreadable)")
        eq(log_count(d, r'<4>VF read abandoned; the VF is uncertain until it returns vf=%s '
                        r'error="timed out after %s"' % (re.escape(vf), SYSFS_TIMEOUT)), 1,
           "GEN-4, GEN-12: the abandoned read is logged once, timed out after %s"
           % SYSFS_TIMEOUT)

        g = gpu_body(c)
        ok("placement_disabled_reason" not in g,
           "DISC-7: the discovery as a whole succeeded: placement stays enabled", g)
        eq((g["total_slots"], g["allocatable_slots"]),
           (baseline["total_slots"], baseline["allocatable_slots"] - 1),
           "API-5, GEN-4: allocatable_slots is the total minus the uncertain VF")
        gauges = vf_gauges(c)
        eq((gauges.get("uncertain"), gauges.get("free"), gauges.get("unreadable")), (1, 63, 0),
           'MET-2: vgpud_resources_gpu_vfs{state="uncertain"} counts it, and only there')
        eq(sim_state()["operations_delayed"], 1, "SIM-14: the one read is held")

        # A claim while vf is uncertain: placed elsewhere (GEN-4: never placed while
        # uncertain), and answered without waiting on the stuck read.
        st, inst = create(c, "hang-01", PROFILE)
        ok(st == 201 and vf_of(inst) != vf,
           "GEN-4, PLACE-1: a claim while %s is uncertain lands on another VF" % vf, (st, inst))
        if st == 201:
            eq(current_type(vf_of(inst)) != "0", True,
               "DEV-1: the other VF is configured in the simulator")
            eq(delete_when_idle(c, inst["id"])[0], 204, "the instance is deleted")
            check_claims(c, "DEV-10: its VF is released with %s still hung" % vf)

        # Later passes skip the uncertain VF instead of queueing behind its stuck call.
        n = len(pass_seconds(d))
        poll(lambda: len(pass_seconds(d)) >= n + 2, 20, 0.2)
        later = pass_seconds(d)[n:]
        ok(len(later) >= 2 and all(s < TIMEOUT_SECONDS for s in later),
           "GEN-4: later passes do not wait out the deadline on the uncertain VF", later)
        eq(sim_state()["operations_delayed"], 1,
           "GEN-4: the uncertain VF is not read again while its call is stuck")
        eq(shown_vfs(c)[vf].get("uncertain"), True, "GEN-4: it stays uncertain meanwhile")
    finally:
        sim_ctl("clear-faults")

    ok(bool(poll(lambda: sim_state()["operations_delayed"] == 0, 10, 0.05)),
       "SIM-14: clear-faults releases the hung read")
    back = poll(lambda: settled(c, baseline), 30, 0.25)
    ok(bool(back), "GEN-4: once the call returns, the VF is certain and placeable again",
       (gpu_body(c), shown_vfs(c)[vf]))
    gauges = vf_gauges(c)
    eq((gauges.get("uncertain"), gauges.get("free")), (0, 64),
       "MET-2: nothing is counted uncertain after clear-faults")


# ---- a VF that hangs before the first table ---------------------------------------------------


def check_hang_at_start(work, config, secret, daemons, vf):
    sock = os.path.join(work, "api.sock")
    try:
        sim_ctl(HANG % vf)
        d, c = start(work, "start-hung", config, secret, sock)
        daemons.append(d)
        if not c:
            return
        # Its physfn was to be read by the job that hangs, so the table has no parent for it,
        # and /gpus, which lists VFs under their GPU, cannot show it (API-6); the gauges and the
        # log still name it.
        gauges = poll(lambda: (lambda g: g.get("uncertain") == 1 and g)(vf_gauges(c)), 20, 0.2)
        eq(((gauges or {}).get("uncertain"), (gauges or {}).get("unreadable"),
            (gauges or {}).get("free")), (1, 0, 63),
           "MET-2, GEN-4: a VF hung before any table is counted once, as uncertain")
        shown = shown_vfs(c)
        eq((vf in shown, len(shown), sorted(v["state"] for v in shown.values()) == ["free"] * 63),
           (False, 63, True), "DISC-6: it is unreadable without a parent; the other 63 are free")
        g = gpu_body(c)
        ok("placement_disabled_reason" not in g,
           "DISC-7: the start-up discovery succeeded with the other 63 VFs", g)
        eq((g["total_slots"], g["allocatable_slots"]), (63, 63),
           "DISC-6, API-5: the unreadable VF is counted in no slot figure")
        # Every discovery while it stays so says it again, as for any unreadable VF.
        ok(log_count(d, r'<4>skipping unreadable vendor VFIO VFs vfs=%s error="VF %s: timed '
                        r'out after %s"' % (re.escape(vf), re.escape(vf), SYSFS_TIMEOUT)) >= 1,
           "DISC-6: the VF is skipped with the warning, timed out after %s" % SYSFS_TIMEOUT)
    finally:
        sim_ctl("clear-faults")
    back = poll(lambda: (lambda v: v.get("state") == "free" and not v.get("uncertain") and v)(
        shown_vfs(c).get(vf, {})), 30, 0.25)
    ok(bool(back), "GEN-4, DISC-6: once its call returns, the VF is read and free",
       shown_vfs(c).get(vf))
    g = gpu_body(c)
    eq((g["total_slots"], g["allocatable_slots"]), (64, 64),
       "API-5: all 64 VFs are allocatable again")
    daemons.remove(d)
    stop(d, " (start-hung)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-vf-hang-", dir=os.environ.get("TMPDIR", "/tmp"))
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, boot="3s", stop="3s",
                            extra_gpu="  sysfs_timeout: %s\n" % SYSFS_TIMEOUT)
        d, c = start(work, "running", config, secret, os.path.join(work, "api.sock"))
        daemons.append(d)
        hung = []
        if c:
            run_group("hang-running", lambda: check_hang_running(c, d))
            hung = [a for a in shown_vfs(c)]
            daemons.remove(d)
            stop(d, " (running)")
        if hung:
            # The last VF of the equal-size card: not the one a claim picks first.
            run_group("hang-at-start",
                      lambda: check_hang_at_start(work, config, secret, daemons, hung[-1]))
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
