#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-instances-matrix.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# The instance lifecycle matrix of SPEC §6 and §7 against the real vgpud on a mounted vgpu-sim
# with fake-qemu as its VMM, in run-sim-test.sh's private PID namespace (SIM-21): each reachable
# row of INST-8's table, INST-9's busy refusal, every admission message of INST-10 and INST-11,
# INST-13's failed identity save, INST-14 and INST-17's rollbacks with a VMM provably gone and
# with one that may be alive, failed record writes and failed releases, VMM-5/10/12/13 with
# fake-qemu's flags, a VMM that cannot be spawned, INST-6's confinement, and API-21's mapping
# route by route. Restarts are test-instances-restart.py's. MATRIX_GROUPS="rows busy ..." runs
# only the named groups (for a quick local rerun).
#
# On a host file without GPUs (tests/api/host-none.yaml) only INST-10's "no GPU" case runs.
#
# A VMM that survives SIGKILL: the termination ladder's failure (VMM-10, VMM-11, INST-16) needs a
# process that SIGKILL cannot end. fake-qemu writes one console line for every QMP command and
# every signal, and its console.log lies on the simulator's data/ (SIM-12). With SIM-14's
# `fault write <console.log> hang` that write is held by the FUSE server; a SIGKILL then leaves
# the process in uninterruptible sleep (state D, the kernel waits for the FUSE reply of a request
# already sent) for as long as the fault stays, which is exactly how a real QEMU outlives
# SIGKILL in a wedged VFIO driver. The process is real, in our PID namespace, and neither a
# zombie nor someone else's child; clear-faults lets it die of the pending SIGKILL.
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
from vgpud_test import (  # noqa: E402 (after the path)
    MNT, configure, configure_held, eq, error_of, exit_status, gpu_body, ok, poll, read_creatable,
    run_group, sim_ctl, sim_state, start, stop, write_secret)
from vgpud_instances import (  # noqa: E402
    EQUAL_PF, FAKE_QEMU, IMAGES, INSTANCES, KERNEL, MIXED_PF, PROFILE, GuestWatch, QmpHold, alive,
    check_claims, console_file, create, create_running, current_type, delete, delete_all,
    delete_when_idle, finish_run, forced_kills, get, guest_pids, log_has, make_images, persisted,
    pid_of, post, proc_state, record, runtime_dir, vf_of, vmm_config, wait_exited, wait_state,
    local_images, unless_busy)

LADDER_FAILED = r"hypervisor pid \d+ did not exit after SIGKILL"


def busy_text(iid, op):
    return "instance %s is busy: %s in progress" % (iid, op)


def group_end(c, label):
    left = delete_all(c)
    ok(not left, "%s: every instance deletes at the end" % label, left)


# ---- INST-8's rows ---------------------------------------------------------------------------


def check_rows(c, d, work):
    # INST-8 Running → stop → Stopped; Stopped → delete (INST-18): 204 and nothing left.
    a = create_running(c, "row-a", PROFILE)
    vf = vf_of(a)
    st, s = post(c, a["id"], "stop")
    ok(st == 200 and s["state"] == "Stopped" and "device_path" not in s["gpu"],
       "INST-8, INST-15: Running → stop → Stopped, claim cleared", (st, s))
    eq(delete(c, a["id"])[0], 204, "INST-8, INST-18: delete of a Stopped instance is 204")
    ok(record(a["id"]) is None and not os.path.exists(os.path.join(INSTANCES, a["id"])),
       "INST-20: the deleted instance's directory is gone")
    ok(current_type(vf) == "0", "INST-15: the Stopped instance's VF was released")

    # INST-8, INST-19: Running → the VMM exits unrequested with status 0 (a guest power-off,
    # here fake-qemu's SIGTERM exit) → Stopped without error, VF released.
    b = create_running(c, "row-b", PROFILE)
    os.kill(pid_of(b["id"]), signal.SIGTERM)
    ok(wait_state(c, b["id"], "Stopped"), "INST-19: an exit with status 0 → Stopped", get(c, b["id"]))
    # The state shows at once; the claim clears when the release (DEV-10's retries) is done.
    poll(lambda: sorted(get(c, b["id"])["gpu"]) == ["profile"], 15)
    s = get(c, b["id"])
    ok("error" not in s and sorted(s["gpu"]) == ["profile"],
       "INST-19, INST-15: no error and the claim cleared after an exit with status 0", s)
    ok(poll(lambda: current_type(vf_of(b)) == "0", 15), "INST-19: the VF is released")
    ok(not os.path.exists(os.path.join(runtime_dir(work, b["id"]), "qmp.sock")),
       "VMM-15: the sockets are removed after an unrequested exit")

    # INST-8, INST-19: Running → the VMM exits with status 1 (exit-early after readiness) →
    # Failed with the error.
    sim_ctl("qemu row-c exit-early:1500")
    cc = create_running(c, "row-c", PROFILE)
    ok(wait_exited(c, cc["id"], "Failed"), "INST-19: an exit with status 1 → Failed",
       get(c, cc["id"]))
    s = get(c, cc["id"])
    eq(s.get("error"), "qemu exited with status 1", "INST-19: the Failed instance says why")
    ok(poll(lambda: current_type(vf_of(cc)) == "0", 15) and
       sorted(get(c, cc["id"])["gpu"]) == ["profile"],
       "INST-19: the Failed instance's VF is released and its claim cleared")
    eq(persisted(cc["id"], lambda r: r.get("state") == "Failed").get("state"), "Failed",
       "INST-8: the Failed state is persisted")

    # INST-8, INST-17: Failed → start → Running, with a new claim, error cleared. (Flags are
    # per name: this VMM exits after 1.5 s too, after the start has answered.)
    st, s = unless_busy(lambda: post(c, cc["id"], "start"))
    ok(st == 200 and s["state"] == "Running" and "error" not in s and
       s["gpu"].get("claimed_at") not in (None, cc["gpu"]["claimed_at"]),
       "INST-8, INST-17: Failed → start → Running with a new claim and no error", (st, s))

    # INST-8, INST-25: Failed → stop → Stopped (the termination and release steps only).
    dd = create_running(c, "row-d", PROFILE)
    os.kill(pid_of(dd["id"]), signal.SIGKILL)
    ok(wait_exited(c, dd["id"], "Failed"), "row-d is Failed after a SIGKILL")
    st, s = unless_busy(lambda: post(c, dd["id"], "stop"))
    ok(st == 200 and s["state"] == "Stopped" and sorted(s["gpu"]) == ["profile"],
       "INST-8, INST-25: Failed → stop → Stopped, no claim", (st, s))
    ok("qmp command system_powerdown" not in console_file(dd["id"]),
       "INST-25: the stop of a Failed instance sends no system_powerdown")

    # INST-8, INST-18: delete of a Failed instance, no operation running.
    e = create_running(c, "row-e", PROFILE)
    os.kill(pid_of(e["id"]), signal.SIGKILL)
    ok(wait_exited(c, e["id"], "Failed"), "row-e is Failed after a SIGKILL")
    eq(delete_when_idle(c, e["id"])[0], 204,
       "INST-8, INST-18: delete of a Failed instance is 204")
    eq(get(c, e["id"]), None, "INST-18: the Failed instance is gone")

    # INST-8: delete of a Running instance (INST-18, graceful) was test-instances.py's; a
    # GPU-less Running one here, with the VMM gone afterwards.
    f = create_running(c, "row-f")
    pid = pid_of(f["id"])
    eq(delete(c, f["id"])[0], 204, "INST-8, INST-18: delete of a Running instance is 204")
    ok(not alive(pid) and not os.path.exists(runtime_dir(work, f["id"])),
       "INST-18, INST-20: its VMM has exited and its runtime directory is gone")
    group_end(c, "rows")
    check_claims(c, "rows: no VF leaked or claimed twice")


# ---- INST-9 ----------------------------------------------------------------------------------


def check_busy(c, d, work):
    # INST-9: while a create waits on a hung QMP (hang-qmp, vmm.boot_timeout 2 s), every other
    # operation on the instance is 409 busy.
    sim_ctl("qemu busy-01 hang-qmp")
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("r", create(c, "busy-01")))
    t.start()
    try:
        def listed():
            m = [i for i in c.get("/instances").json() if i["name"] == "busy-01"]
            return m[0] if m else None
        inst = poll(listed, 5, 0.02)
        if ok(inst is not None, "INST-9: the create in progress is listed", inst):
            iid = inst["id"]
            eq(inst["state"], "Creating", "INST-8: the instance is Creating during its create")
            for what in ("start", "stop"):
                eq(post(c, iid, what), (409, {"code": "busy", "message": busy_text(iid, "create")}),
                   "INST-9, API-21: %s during a create is 409 busy" % what)
            r = c.request("DELETE", "/instances/" + iid)
            eq(error_of(r), (409, {"code": "busy", "message": busy_text(iid, "create")}),
               "INST-9, API-21: delete during a create is 409 busy")
            eq(create(c, "busy-01")[1].get("code"), "already_exists",
               "INST-4: the name of a create in progress is taken")
    finally:
        t.join()
    st, b = res["r"]
    ok(st == 500 and b.get("code") == "internal" and
       b.get("message", "").startswith("QMP greeting not received within 5s"),
       "VMM-5, API-21: the hung create fails 500 internal `QMP greeting not received within "
       "5s`", (st, b))

    # INST-9: a stop whose graceful part waits (a test client holds the QMP socket, so vgpud's
    # connection gets no greeting for 5 s) makes a second stop and a delete busy.
    g = create_running(c, "busy-02")
    hold = QmpHold(work, g["id"])
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("r", post(c, g["id"], "stop")))
    t.start()
    try:
        ok(wait_state(c, g["id"], "Stopping", 5), "INST-8: Stopping is shown while the stop runs")
        eq(post(c, g["id"], "stop"), (409, {"code": "busy", "message": busy_text(g["id"], "stop")}),
           "INST-9: a second stop is 409 busy")
        eq(error_of(c.request("DELETE", "/instances/" + g["id"])),
           (409, {"code": "busy", "message": busy_text(g["id"], "stop")}),
           "INST-9: a delete during a stop is 409 busy")
        eq(post(c, g["id"], "start"),
           (409, {"code": "busy", "message": busy_text(g["id"], "stop")}),
           "INST-9: a start during a stop is 409 busy")
    finally:
        t.join()
        hold.close()
    st, s = res["r"]
    ok(st == 200 and s["state"] == "Stopped",
       "VMM-9, VMM-10: with QMP unreachable the stop goes to the ladder and ends Stopped", (st, s))

    # INST-9: a delete in progress makes a stop busy.
    h = create_running(c, "busy-03")
    hold = QmpHold(work, h["id"])
    res = {}
    t = threading.Thread(target=lambda: res.setdefault("r", delete(c, h["id"])))
    t.start()
    try:
        ok(wait_state(c, h["id"], "Deleting", 5), "INST-8: Deleting is shown while deleting")
        eq(post(c, h["id"], "stop"),
           (409, {"code": "busy", "message": busy_text(h["id"], "delete")}),
           "INST-9: a stop during a delete is 409 busy")
    finally:
        t.join()
        hold.close()
    eq(res["r"][0], 204, "INST-18: the delete ends 204")
    group_end(c, "busy")


# ---- INST-10, INST-11 --------------------------------------------------------------------------


def drain(c, pf, on=True):
    r = c.request("POST" if on else "DELETE", "/gpu/gpus/%s/drain" % pf,
                  {"reason": "matrix test"} if on else None)
    return r.status


def type_id(vf, name):
    for tid, n in read_creatable(vf):
        if n == name:
            return tid
    return None


def check_admission(c, d, work):
    # INST-10: with both GPUs drained, allocatable_slots is 0.
    eq((drain(c, MIXED_PF), drain(c, EQUAL_PF)), (200, 200), "HEALTH-26: both GPUs drain")
    poll(lambda: gpu_body(c)["allocatable_slots"] == 0, 10)
    g = gpu_body(c)
    want = ("insufficient GPU: no allocatable vgpu slots available (%d total, %d in use)" %
            (g["total_slots"], g["used_slots"]))
    eq(create(c, "adm-01", PROFILE), (409, {"code": "insufficient_resources", "message": want}),
       "INST-10, API-21: allocatable 0 is 409 insufficient_resources: " + want)
    ok(not [i for i in c.get("/instances").json() if i["name"] == "adm-01"],
       "INST-12: a refused create leaves no instance")
    st, b = create(c, "adm-plain")
    eq(st, 201, "INST-10: admission concerns vGPU instances only: a GPU-less create is 201")
    # INST-17: a start runs admission too.
    eq(drain(c, EQUAL_PF, False), 200, "HEALTH-26: undrain the equal-size GPU")
    poll(lambda: gpu_body(c)["allocatable_slots"] > 0, 10)
    s = create_running(c, "adm-02", PROFILE)
    eq(post(c, s["id"], "stop")[0], 200, "adm-02 stops")
    eq(drain(c, EQUAL_PF), 200, "HEALTH-26: drain it again")
    poll(lambda: gpu_body(c)["allocatable_slots"] == 0, 10)
    g = gpu_body(c)
    want = ("insufficient GPU: no allocatable vgpu slots available (%d total, %d in use)" %
            (g["total_slots"], g["used_slots"]))
    eq(post(c, s["id"], "start"), (409, {"code": "insufficient_resources", "message": want}),
       "INST-17, INST-10, API-21: a start with allocatable 0 is 409 insufficient_resources")
    eq(get(c, s["id"])["state"], "Stopped", "INST-17: the refused start leaves it Stopped")

    # INST-10's third message: one allocatable VF (the equal-size GPU drained, 31 of the mixed
    # GPU's 32 VFs configured by hand with 1Q and held open, so that REC-6 leaves them dirty)
    # and one create admitted but not yet reserved (its Creating record's rename delayed,
    # SIM-14): a second create sees k = 1 - 1 = 0.
    eq(drain(c, MIXED_PF, False), 200, "HEALTH-26: undrain the mixed-size GPU")
    mixed = [v["address"] for v in sim_state()["gpus"][0]["vfs"]]
    one_q = type_id(mixed[0], "NVIDIA L40S-1Q")
    hand = mixed[:31]
    held_nodes = []
    try:
        for vf in hand:
            held_nodes.append(configure_held(vf, one_q))
        ok(poll(lambda: gpu_body(c)["allocatable_slots"] == 1, 20, 0.2),
           "PLACE-21: one allocatable VF left", gpu_body(c))
        sim_ctl("fault rename data/instances/*/instance.json delay:3000 count=1")
        res = {}
        t = threading.Thread(target=lambda: res.setdefault("r", create(c, "adm-03", PROFILE)))
        t.start()
        try:
            held = poll(lambda: sim_state()["operations_delayed"] >= 1, 5, 0.02)
            ok(held, "SIM-14: the first create's Creating record write is held")
            want = "insufficient GPU: requested 1 vgpu slot(s), but only 0 available"
            eq(create(c, "adm-04", PROFILE),
               (409, {"code": "insufficient_resources", "message": want}),
               "INST-10, INST-11: a create while the only allocatable VF is admitted but not "
               "reserved: " + want)
        finally:
            t.join()
        st, b = res["r"]
        eq(st, 201, "INST-11: the admitted create goes on and claims the VF")
        g = gpu_body(c)
        want = ("insufficient GPU: no allocatable vgpu slots available (%d total, %d in use)" %
                (g["total_slots"], g["used_slots"]))
        eq(create(c, "adm-05", PROFILE)[1].get("message"), want,
           "INST-10: once reserved and claimed, allocatable is 0: " + want)
        check_claims(c, "admission: the claim is the one VF, no leak", dirty=hand)
        group_end(c, "admission")
    finally:
        sim_ctl("clear-faults")
        for node in held_nodes:
            node.close()
        for vf in hand:
            configure(vf, 0)
        drain(c, MIXED_PF, False)
        drain(c, EQUAL_PF, False)
    ok(poll(lambda: gpu_body(c)["allocatable_slots"] == 64, 20, 0.2),
       "PLACE-21: all 64 VFs allocatable again", gpu_body(c))


def check_placement_disabled(c, d, work):
    # INST-11, API-21: while placement is disabled (discovery fails, DISC-7), a vGPU create and
    # a vGPU start are 503 placement_disabled with the reason; a GPU-less create goes on.
    s = create_running(c, "pd-01", PROFILE)
    eq(post(c, s["id"], "stop")[0], 200, "pd-01 stops")
    try:
        sim_ctl("fault read sys/devices/*/*/nvidia/current_vgpu_type EIO")
        g = poll(lambda: (lambda g: g.get("placement_disabled_reason") and g)(gpu_body(c)), 20,
                 0.2)
        if ok(bool(g), "DISC-7: a failed discovery disables placement", gpu_body(c)):
            want = "insufficient GPU: vGPU placement is disabled: " + g["placement_disabled_reason"]
            eq(create(c, "pd-02", PROFILE),
               (503, {"code": "placement_disabled", "message": want}),
               "INST-11, API-21: create while placement is disabled is 503: " + want)
            eq(post(c, s["id"], "start"), (503, {"code": "placement_disabled", "message": want}),
               "INST-11, INST-17, API-21: start while placement is disabled is 503")
            eq(create(c, "pd-03")[0], 201, "INST-11: a GPU-less create is 201 meanwhile")
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: "placement_disabled_reason" not in gpu_body(c), 20, 0.2),
       "DISC-7: placement comes back after the fault")
    st, b = post(c, s["id"], "start")
    eq(st, 200, "INST-17: the start succeeds once placement is back")
    group_end(c, "placement")


def check_no_gpu(c):
    # INST-10, API-4, API-21: a host without a framework.
    res = c.get("/resources").json()
    eq((res.get("gpu", "absent"), sorted(res)), (None, ["gpu", "storage"]),
       "API-4, DISK-10: /resources is {\"gpu\": null} and the storage figures")
    eq(create(c, "nogpu-01", PROFILE),
       (409, {"code": "insufficient_resources",
              "message": "insufficient GPU: no GPU available on this host"}),
       "INST-10, API-21: no framework is 409 `insufficient GPU: no GPU available on this host`")
    st, b = create(c, "nogpu-02")
    eq((st, b.get("state")), (201, "Running"), "INST-12: a GPU-less create is 201 without GPUs")
    group_end(c, "no-gpu")


# ---- INST-13 ----------------------------------------------------------------------------------


def check_identity_save(c, d, work):
    # INST-13: the record writes of a create are Creating, (the claim,) the socket paths (before
    # the spawn, so that a VMM outliving a killed daemon can be found by its socket), the
    # identity (pid, start_time, boot_id), Running. The identity's rename fails: the spawned VMM
    # is terminated (VMM-10) and the create fails 500 with nothing left.
    for name, profile, before in (("ident-01", None, 2), ("ident-02", PROFILE, 3)):
        used = gpu_body(c)["used_slots"]
        # The identity's temp-file write is held 800 ms, so that the VMM it names is seen
        # running, and then its rename fails.
        sim_ctl("fault write data/instances/*/instance.json.tmp delay:1 count=%d" % before)
        sim_ctl("fault write data/instances/*/instance.json.tmp delay:800 count=1")
        sim_ctl("fault rename data/instances/*/instance.json delay:1 count=%d" % before)
        sim_ctl("fault rename data/instances/*/instance.json EIO count=1")
        watch = GuestWatch(name)
        try:
            st, b = create(c, name, profile)
        finally:
            pids = watch.stop()
            sim_ctl("clear-faults")
        what = "with a vGPU" if profile else "without a vGPU"
        ok(st == 500 and b.get("code") == "internal" and
           b.get("message", "").startswith("save VMM identity: "),
           "INST-13, API-21: a failed identity save (%s) is 500 internal `save VMM identity: "
           "...`" % what, (st, b))
        ok(len(pids) == 1, "INST-13: the VMM was spawned (%s)" % what, pids)
        ok(pids and not any(alive(p) for p in pids),
           "INST-13, VMM-14: the VMM is terminated (%s)" % what, [proc_state(p) for p in pids])
        ok(not [i for i in c.get("/instances").json() if i["name"] == name],
           "INST-13, INST-14: no instance remains (%s)" % what)
        ok(not [n for n in os.listdir(INSTANCES) if not n.startswith(".")],
           "INST-20: no instance directory remains (%s)" % what, os.listdir(INSTANCES))
        ok(not os.listdir(os.path.join(work, "run", "instances")),
           "VMM-15: no runtime directory remains (%s)" % what,
           os.listdir(os.path.join(work, "run", "instances")))
        ok(poll(lambda: gpu_body(c)["used_slots"] == used, 15),
           "INST-14: the claim is released (%s)" % what)
    check_claims(c, "identity: no VF leaked")


# ---- INST-8: a transition that cannot be persisted does not happen ------------------------


def fail_next_record(iid="*", after=0):
    """The record write after `after` more of them fails: its rename gets EIO (SIM-14)."""
    glob = "data/instances/%s/instance.json" % iid
    if after:
        sim_ctl("fault rename %s delay:1 count=%d" % (glob, after))
    sim_ctl("fault rename %s EIO count=1" % glob)


def check_record_faults(c, d, work):
    # INST-8: "each transition is persisted before the action it announces". When the write
    # fails, the action does not run and the instance stays as its record says.
    a = create_running(c, "rf-01")
    pid = pid_of(a["id"])
    for what, op in (("stop", lambda: post(c, a["id"], "stop")),
                     ("delete", lambda: delete(c, a["id"]))):
        fail_next_record(a["id"])
        try:
            st, b = op()
        finally:
            sim_ctl("clear-faults")
        ok(st == 500 and b.get("code") == "internal" and
           b.get("message", "").startswith("save instance record: "),
           "INST-8, API-21: a %s whose first record write fails is 500 internal" % what, (st, b))
        g = get(c, a["id"])
        ok(g and g["state"] == "Running" and record(a["id"])["state"] == "Running" and
           alive(pid), "INST-8: after the failed %s write the instance is Running, as its "
           "record says, and its VMM runs" % what, (g, record(a["id"])))
    eq(post(c, a["id"], "stop")[0], 200, "INST-15: a stop works afterwards")

    # A start from Failed whose Creating write fails: the start did not happen, so memory and
    # disk agree, and INST-17's failed start (VMM provably gone) ends Stopped with the error.
    b = create_running(c, "rf-02")
    os.kill(pid_of(b["id"]), signal.SIGKILL)
    ok(wait_exited(c, b["id"], "Failed"), "rf-02 is Failed")
    fail_next_record(b["id"], after=1)  # INST-17's first write clears the hypervisor fields
    try:
        st, e = unless_busy(lambda: post(c, b["id"], "start"))
    finally:
        sim_ctl("clear-faults")
    ok(st == 500 and e.get("message", "").startswith("save instance record: "),
       "INST-17, API-21: a start whose Creating write fails is 500 internal", (st, e))
    g, r = get(c, b["id"]), record(b["id"])
    ok(g and r and (g["state"], g.get("error")) == (r["state"], r.get("error")) ==
       ("Stopped", e.get("message")),
       "INST-8, INST-17: the failed start ends Stopped with its error, in memory and on disk",
       (g, r))
    ok(not guest_pids("rf-02"), "INST-17: no VMM was spawned")

    # A create whose Creating write fails leaves nothing (INST-12: a failure before the claim
    # deletes the record).
    fail_next_record()
    try:
        st, e = create(c, "rf-03", PROFILE)
    finally:
        sim_ctl("clear-faults")
    ok(st == 500 and e.get("message", "").startswith("save instance record: "),
       "INST-12, API-21: a create whose Creating write fails is 500 internal", (st, e))
    ok(not [i for i in c.get("/instances").json() if i["name"] == "rf-03"] and
       not [n for n in os.listdir(INSTANCES) if record(n) and record(n)["name"] == "rf-03"],
       "INST-12: nothing of it remains")
    group_end(c, "record-faults")
    check_claims(c, "record-faults: no VF leaked")


# ---- INST-15, INST-17, INST-18: failed releases --------------------------------------------


def check_release_faults(c, d, work):
    a = create_running(c, "rl-01", PROFILE)
    vf = vf_of(a)
    glob = "sys/*%s/nvidia/current_vgpu_type" % vf
    try:
        # INST-15: a failed release keeps the claim, visible as gpu.device_path, and the stop
        # still answers 200 (after DEV-10's retries).
        sim_ctl("fault write %s EIO" % glob)
        st, g = post(c, a["id"], "stop")
        ok(st == 200 and g["state"] == "Stopped" and
           g["gpu"].get("device_path") == a["gpu"]["device_path"],
           "INST-15: a stop whose release fails is 200 Stopped with the claim kept", (st, g))
        ok(current_type(vf) != "0", "INST-15: the VF is still configured")
        # INST-17: the start must release that claim first; when it cannot, 409 invalid_state.
        # A reconcile pass may be releasing the same stale claim (REC-4) with DEV-10's retries
        # meanwhile; the start is then 409 busy (INST-9) until that ends.
        st, e = unless_busy(lambda: post(c, a["id"], "start"), 30)
        prefix = "instance %s still holds VF %s: " % (a["id"], vf)
        ok(st == 409 and e.get("code") == "invalid_state" and
           e.get("message", "").startswith(prefix),
           "INST-17, API-21: a start whose release of the old claim fails is 409 invalid_state "
           "`%s<err>`" % prefix, (st, e))
        eq(get(c, a["id"])["state"], "Stopped", "INST-17: the refused start leaves it Stopped")
    finally:
        sim_ctl("clear-faults")
    st, g = unless_busy(lambda: post(c, a["id"], "start"), 30)
    ok(st == 200 and g["state"] == "Running", "INST-17: with the fault gone the start works",
       (st, g))
    vf = vf_of(g)
    # INST-18: a delete whose release fails removes the instance anyway (204); the VF is left
    # configured for REC-6.
    try:
        sim_ctl("fault write sys/*%s/nvidia/current_vgpu_type EIO" % vf)
        st, _ = delete(c, a["id"])
        eq(st, 204, "INST-18: a delete whose release fails is 204")
        ok(get(c, a["id"]) is None and record(a["id"]) is None,
           "INST-18: the instance is removed whatever the release did")
        shown = {v["address"]: v for gp in c.get("/gpus").json()["gpus"] for v in gp["vfs"]}
        eq(shown[vf]["state"], "dirty", "API-6, INST-18: the VF it leaves is dirty")
    finally:
        sim_ctl("clear-faults")
    # REC-6: the next pass resets the VF the failed release left.
    ok(poll(lambda: current_type(vf) == "0", 20, 0.1),
       "REC-6: a reconcile pass resets the dirty VF the delete left")
    check_claims(c, "release-faults: no VF leaked")


# ---- INST-14, INST-17: rollbacks -----------------------------------------------------------


def check_rollback_gone(c, d, work):
    # INST-14 with the VMM provably gone (exit-early:0, VMM-5): a create is deleted, its VF
    # released; a start ends Stopped with the error, its claim released.
    sim_ctl("qemu rb-01 exit-early:0")
    st, b = create(c, "rb-01", PROFILE)
    ok(st == 500 and b.get("code") == "internal" and
       b.get("message", "").startswith("qemu exited with status 1 before QMP was ready"),
       "VMM-5, API-21: a VMM exiting before QMP is 500 with QEMU's reason", (st, b))
    ok(not [n for n in os.listdir(INSTANCES) if not n.startswith(".")] and
       not os.listdir(os.path.join(work, "run", "instances")),
       "INST-8, INST-14: the failed create's record and directories are removed")
    check_claims(c, "INST-14: the failed create's VF is released")

    s = create_running(c, "rb-02", PROFILE)
    eq(post(c, s["id"], "stop")[0], 200, "rb-02 stops")
    sim_ctl("qemu rb-02 exit-early:0")
    st, b = post(c, s["id"], "start")
    ok(st == 500 and b.get("code") == "internal" and
       b.get("message", "").startswith("qemu exited with status 1 before QMP was ready"),
       "INST-17, API-21: a failed start is 500 internal", (st, b))
    g = get(c, s["id"])
    ok(g["state"] == "Stopped" and g.get("error") == b.get("message") and
       sorted(g["gpu"]) == ["profile"],
       "INST-8, INST-14, INST-17: Creating (start) with the VMM gone → Stopped with the error, "
       "claim released", g)
    eq(record(s["id"])["state"], "Stopped", "INST-8: the Stopped state is persisted")
    check_claims(c, "INST-14: the failed start's VF is released")
    group_end(c, "rollback-gone")


def hang_console(iid="*"):
    sim_ctl("fault write data/instances/%s/console.log hang" % iid)


def d_state(pid):
    return proc_state(pid) == "D"


def check_rollback_alive(c, d, work):
    # INST-14, INST-17, INST-16, INST-18, INST-25, VMM-10, VMM-11 with a VMM that may be alive:
    # one that survives SIGKILL (see the top of this file).
    kills = forced_kills(c)
    try:
        # Creating (create) → failure with the VMM alive → Failed, record and claim kept.
        hang_console()
        watch = GuestWatch("alive-01")
        try:
            st, b = create(c, "alive-01", PROFILE)
        finally:
            pids = watch.stop()
        ok(st == 500 and b.get("code") == "internal" and
           re.search(LADDER_FAILED + "$", b.get("message", "")),
           "INST-14, VMM-10, API-21: a create whose VMM survives the ladder is 500 with the "
           "ladder's error", (st, b))
        a = [i for i in c.get("/instances").json() if i["name"] == "alive-01"]
        ok(len(a) == 1 and a[0]["state"] == "Failed" and a[0]["gpu"].get("device_path") and
           a[0].get("error") == b.get("message"),
           "INST-8, INST-14, VMM-11: Creating (create) with the VMM alive → Failed, claim kept",
           a)
        ok(len(pids) == 1 and all(d_state(p) for p in pids),
           "the VMM outlived SIGKILL (state D)", [proc_state(p) for p in pids])
        aid = a[0]["id"] if a else None
        if aid:
            eq(post(c, aid, "start"),
               (409, {"code": "invalid_state",
                      "message": "instance %s VMM may still be running; stop it first" % aid}),
               "INST-17, API-21: start of a Failed instance whose VMM may be alive is 409")
            # INST-25: stop of the Failed instance: the ladder fails again, it stays Failed.
            st, b = post(c, aid, "stop")
            ok(st == 500 and b.get("code") == "internal" and
               re.fullmatch(LADDER_FAILED, b.get("message", "")),
               "INST-25, INST-16, API-21: stop of a Failed instance whose ladder fails is 500",
               (st, b))
            g = get(c, aid)
            ok(g["state"] == "Failed" and g["gpu"].get("device_path"),
               "INST-8, INST-25: Failed → stop → ladder fails → Failed with the claim", g)
            # INST-18: delete with the VMM alive: 500, the record stays Deleting with its claim.
            st, b = delete(c, aid)
            ok(st == 500 and b.get("code") == "internal" and
               re.fullmatch(LADDER_FAILED, b.get("message", "")),
               "INST-18, API-21: a delete whose ladder fails is 500 internal", (st, b))
            g = get(c, aid)
            ok(g["state"] == "Deleting" and g["gpu"].get("device_path") and
               record(aid)["state"] == "Deleting",
               "INST-18: the record stays Deleting with its claim", g)
            for what in ("start", "stop"):
                eq(post(c, aid, what),
                   (409, {"code": "invalid_state", "message": "instance %s is Deleting" % aid}),
                   "INST-25, API-21: %s of a Deleting instance (no operation) is 409 "
                   "invalid_state" % what)
        fk = forced_kills(c)
        eq(fk[0] - kills[0], 6, "VMM-12: each ladder counts its two SIGKILLs (process, group)")
        kills = fk
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: not any(alive(p) for p in pids), 10),
       "the VMM dies of the pending SIGKILL once the fault is cleared")
    if aid:
        # REC-10: a reconcile pass may resume the delete first, once the VMM is gone: while it
        # runs the delete is 409 busy (INST-9), and after it the record is gone already and the
        # delete finds nothing.
        st, _ = delete_when_idle(c, aid)
        ok(st in (204, 404) and get(c, aid) is None,
           "INST-8, INST-18: a later delete resumes and completes (VMM gone)", st)
    check_claims(c, "rollback-alive: the kept claim is released by the delete")

    # Creating (start) → failure with the VMM alive → Failed.
    s = create_running(c, "alive-02", PROFILE)
    eq(post(c, s["id"], "stop")[0], 200, "alive-02 stops")
    try:
        hang_console(s["id"])
        st, b = post(c, s["id"], "start")
        ok(st == 500 and re.search(LADDER_FAILED + "$", b.get("message", "")),
           "INST-17, API-21: a start whose VMM survives the ladder is 500", (st, b))
        g = get(c, s["id"])
        ok(g["state"] == "Failed" and g["gpu"].get("device_path") and
           g.get("error") == b.get("message"),
           "INST-8, INST-14, INST-17: Creating (start) with the VMM alive → Failed, claim kept", g)
        pid = pid_of(s["id"])
        ok(d_state(pid), "the started VMM is in state D", proc_state(pid))
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: not alive(pid), 10), "it dies once the fault is cleared")
    # The VMM's exit starts a release of its own (DEV-10); the stop is busy until it ends.
    st, g = unless_busy(lambda: post(c, s["id"], "stop"), 30)
    ok(st == 200 and g["state"] == "Stopped" and sorted(g["gpu"]) == ["profile"],
       "INST-25: stop of the Failed instance with its VMM gone releases and ends Stopped",
       (st, g))

    # Running → stop → the ladder fails → Failed (INST-16), then Failed → start → Running.
    r = create_running(c, "alive-03", PROFILE)
    pid = pid_of(r["id"])
    try:
        hang_console(r["id"])
        st, b = post(c, r["id"], "stop")
        ok(st == 500 and b.get("code") == "internal" and
           re.fullmatch(LADDER_FAILED, b.get("message", "")),
           "INST-16, API-21: a stop whose ladder fails is 500 internal with the ladder's error",
           (st, b))
        g = get(c, r["id"])
        ok(g["state"] == "Failed" and g["gpu"].get("device_path") == r["gpu"]["device_path"],
           "INST-8, INST-16: Stopping → ladder fails → Failed with its claim", g)
        eq(record(r["id"])["state"], "Failed", "INST-8: Failed is persisted")
        ok(d_state(pid), "the VMM is in state D", proc_state(pid))
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: not alive(pid), 10), "it dies once the fault is cleared")
    ok(poll(lambda: (get(c, r["id"]) or {}).get("state") == "Failed", 5),
       "INST-19: the late exit of a Failed instance's VMM leaves it Failed")
    st, g = unless_busy(lambda: post(c, r["id"], "start"), 30)
    ok(st == 200 and g["state"] == "Running",
       "INST-8, INST-17: Failed → start (VMM gone, old claim released) → Running", (st, g))
    group_end(c, "rollback-alive")
    check_claims(c, "rollback-alive: no VF leaked or claimed twice")


# ---- VMM-5, VMM-10, VMM-12, VMM-13 -----------------------------------------------------------


def check_vmm_flags(c, d, work):
    # VMM-13: a SIGKILL vgpud did not send, inside the init window: the warning, no count.
    kills = forced_kills(c)
    k = create_running(c, "kill-01", PROFILE)
    os.kill(pid_of(k["id"]), signal.SIGKILL)
    ok(wait_exited(c, k["id"], "Failed"), "INST-19: a VMM killed from outside → Failed")
    eq(get(c, k["id"]).get("error"), "qemu was killed by signal SIGKILL",
       "INST-19: the error names the signal")
    pat = (r"^<4>VMM killed; VF may wedge instance_id=%s device_path=%s in_grace=true$" %
           (k["id"], re.escape(k["gpu"]["device_path"])))
    ok(poll(lambda: log_has(d, pat), 5), "VMM-13, OPS-12: the outside SIGKILL is logged with "
       "the warning, device_path and in_grace=true")
    eq(forced_kills(c), kills, "VMM-12: a SIGKILL vgpud did not send is not counted")

    # VMM-10, VMM-12: ignore-sigterm: the stop's ladder (QMP held by the test, so the graceful
    # part cannot run) sends SIGTERM, waits vfio_term_grace, then SIGKILL: one count in_grace.
    sim_ctl("qemu stub-01 ignore-sigterm")
    s = create_running(c, "stub-01", PROFILE)
    hold = QmpHold(work, s["id"])
    try:
        st, g = post(c, s["id"], "stop")
    finally:
        hold.close()
    ok(st == 200 and g["state"] == "Stopped", "VMM-10: the ladder ends the stubborn VMM", (st, g))
    ok(re.search(r"fake-qemu: signal SIGTERM pid=\d+ action=ignore", console_file(s["id"])),
       "VMM-10: SIGTERM came first and was ignored")
    pat = (r"^<4>VMM killed; VF may wedge instance_id=%s device_path=%s in_grace=true$" %
           (s["id"], re.escape(s["gpu"]["device_path"])))
    ok(log_has(d, pat), "VMM-12: the ladder's SIGKILL logs the warning with device_path and "
       "in_grace=true")
    eq(forced_kills(c), (kills[0] + 1, kills[1]),
       "VMM-12, VMM-13: the one SIGKILL counts in_grace=true")

    # VMM-10: a VMM without a VFIO device starts at SIGKILL (no SIGTERM, no count).
    sim_ctl("qemu stub-02 ignore-sigterm")
    p = create_running(c, "stub-02")
    hold = QmpHold(work, p["id"])
    try:
        st, g = post(c, p["id"], "stop")
    finally:
        hold.close()
    ok(st == 200 and "signal SIGTERM" not in console_file(p["id"]),
       "VMM-10: without VFIO the ladder starts at SIGKILL", console_file(p["id"])[-500:])
    eq(forced_kills(c), (kills[0] + 1, kills[1]), "VMM-12: a GPU-less kill is not counted")
    group_end(c, "vmm-flags")


def check_out_of_window(work, config, secret, sock, daemons):
    # VMM-13: with gpu.vfio_init_window 0s every ladder SIGKILL is in_grace=false.
    d, c = start(work, "window-0", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    sim_ctl("qemu late-01 ignore-sigterm")
    sim_ctl("qemu late-01 hang-qmp")
    st, b = create(c, "late-01", PROFILE)
    ok(st == 500 and b.get("message", "").startswith("QMP"),
       "VMM-5, VMM-14: the hung create fails after the ladder", (st, b))
    eq(forced_kills(c), (0, 1), "VMM-13: with vfio_init_window 0s the SIGKILL is in_grace=false")
    ok(log_has(d, r"^<4>VMM killed; VF may wedge instance_id=[a-z0-9]{20} device_path=\S+ "
                  r"in_grace=false$"), "VMM-12: the warning says in_grace=false")
    check_claims(c, "window: the failed create's VF is released")
    stop(d, " (window 0s)")


def check_spawn_failure(work, config, secret, sock, daemons):
    # API-21: a spawn failure (qemu_binary cannot be executed) is 500 internal, and the create
    # rolls back with nothing spawned (INST-14: VMM never started).
    d, c = start(work, "bad-qemu", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    st, b = create(c, "spawn-01", PROFILE)
    ok(st == 500 and b.get("code") == "internal" and
       b.get("message", "").startswith("spawn VMM: spawn %s: " % os.path.join(work, "no-qemu")),
       "API-21, INST-14: a VMM that cannot be spawned is 500 internal `spawn VMM: spawn ...`",
       (st, b))
    ok(not c.get("/instances").json(), "INST-14: the failed create leaves no instance")
    check_claims(c, "INST-14: and no claim")
    stop(d, " (bad qemu_binary)")


# ---- INST-6 ------------------------------------------------------------------------------------


def check_confinement(c, d, work):
    # INST-6, INST-7: beyond test-instances.py's relative path, `..`, file outside and symlink
    # out: every boot field, `.` components, symlinked directories, relative links, a sibling
    # directory sharing the prefix, non-regular files (a FIFO must not block the check), links
    # that stay inside, and a dangling link.
    data = os.path.join(MNT, "data")
    outside = os.path.join(data, "outside")
    evil = IMAGES + "-evil"
    os.makedirs(outside, exist_ok=True)
    os.makedirs(evil, exist_ok=True)
    os.makedirs(os.path.join(IMAGES, "sub"), exist_ok=True)
    for p in (os.path.join(outside, "k"), os.path.join(evil, "k"),
              os.path.join(IMAGES, "sub", "k")):
        with open(p, "w") as f:
            f.write("kernel\n")
    links = {"dirlink": outside, "rel-out": "../outside/k", "rel-in": "sub/../vmlinuz",
             "in": KERNEL, "dangling": os.path.join(IMAGES, "missing")}
    for name, target in links.items():
        os.symlink(target, os.path.join(IMAGES, name))
    fifo = os.path.join(local_images(work), "fifo")
    os.makedirs(local_images(work), exist_ok=True)
    os.mkfifo(fifo)
    try:
        refused = [
            ("kernel", IMAGES + "/./vmlinuz", "a . component"),
            ("kernel", IMAGES + "/sub/../vmlinuz", "a .. component inside image_dirs"),
            ("initrd", IMAGES + "/../images/vmlinuz", "a .. component in initrd"),
            ("disk", IMAGES + "/../images/vmlinuz", "a .. component in disk"),
            ("kernel", IMAGES + "/dirlink/k", "a path through a symlinked directory out"),
            ("kernel", IMAGES + "/rel-out", "a relative symlink out"),
            ("initrd", IMAGES + "/rel-out", "an initrd symlinked out"),
            ("disk", os.path.join(outside, "k"), "a disk outside image_dirs"),
            ("kernel", os.path.join(evil, "k"), "a sibling directory sharing the prefix"),
            ("kernel", IMAGES + "/sub", "a directory"),
            ("kernel", fifo, "a FIFO"),
            ("kernel", IMAGES + "/dangling", "a dangling symlink"),
            ("kernel", IMAGES + "/nonexistent", "a missing file"),
            ("kernel", IMAGES + "/" + "x" * 4100, "a path over 4096 bytes"),
        ]
        for field, path, what in refused:
            b = {"kernel": KERNEL}
            b[field] = path
            t0 = time.monotonic()
            st, e = create(c, "conf", boot=b)
            ok(st == 400 and e.get("code") == "invalid_request" and
               ("boot." + field) in e.get("message", ""),
               "INST-6, INST-7, API-21: %s is 400 invalid_request naming boot.%s" % (what, field),
               (st, e, time.monotonic() - t0))
        ok(not [n for n in os.listdir(INSTANCES) if not n.startswith(".")],
           "INST-12: refused creates leave no directory", os.listdir(INSTANCES))
        for name, what in (("in", "an absolute symlink inside image_dirs"),
                           ("rel-in", "a relative symlink that resolves inside")):
            st, b = create(c, "conf-" + name, boot={"kernel": os.path.join(IMAGES, name)})
            eq((st, b.get("state")), (201, "Running"),
               "INST-6: %s is accepted (its real path lies under image_dirs)" % what)
    finally:
        group_end(c, "confinement")
        for name in links:
            os.unlink(os.path.join(IMAGES, name))
        os.unlink(fifo)
        shutil.rmtree(os.path.join(IMAGES, "sub"), ignore_errors=True)
        shutil.rmtree(outside, ignore_errors=True)
        shutil.rmtree(evil, ignore_errors=True)


# ---- API-21, route by route ------------------------------------------------------------------


def check_routes(c, d, work):
    # The route's own refusals (API-21 lists the lifecycle ones; the rest are API-3/11's).
    unknown = "a" * 20
    for method, path in (("POST", "/instances/%s/start"), ("POST", "/instances/%s/stop"),
                         ("DELETE", "/instances/%s"), ("GET", "/instances/%s"),
                         ("GET", "/instances/%s/console"), ("POST", "/instances/%s/standby"),
                         ("POST", "/instances/%s/snapshot"), ("POST", "/instances/%s/fork")):
        r = c.request(method, path % unknown)
        eq(error_of(r), (404, {"code": "not_found", "message": "instance %s not found" % unknown}),
           "API-2, API-11: %s %s of an unknown id is 404 not_found" % (method, path % "<id>"))
        r = c.request(method, path % "Bad-Id")
        eq(error_of(r)[:1] + (error_of(r)[1].get("code"),), (400, "invalid_id"),
           "INST-3: %s %s with a malformed id is 400 invalid_id" % (method, path % "<id>"))
    # POST /instances: validation 400, unknown profile 400, name taken 409.
    eq(error_of(c.request("POST", "/instances", b"{"))[1].get("code"), "invalid_request",
       "API-9, API-21: malformed JSON is 400 invalid_request")
    st, b = create(c, "rt-profile", "NVIDIA L40S-99Q")
    eq((st, b.get("code")), (400, "unknown_profile"),
       "PLACE-18, API-21: a profile unknown to NVML's catalogs is 400 unknown_profile")
    ok(not [i for i in c.get("/instances").json() if i["name"] == "rt-profile"],
       "INST-12: the unknown-profile create leaves nothing")
    g = create_running(c, "rt-gpu", PROFILE)
    p = create_running(c, "rt-plain")
    eq(create(c, "rt-gpu")[0], 409, "INST-4, API-21: a taken name is 409 already_exists")
    # start of Running is invalid_state; standby of each kind.
    eq(post(c, g["id"], "start"),
       (409, {"code": "invalid_state", "message": "instance %s is Running" % g["id"]}),
       "INST-25, API-21: start of a Running instance is 409 invalid_state")
    for op in ("standby", "snapshot", "fork"):
        eq(post(c, g["id"], op),
           (409, {"code": "invalid_state", "message": "%s is not supported for instances with "
                  "vGPU attached (driver limitation)" % op}),
           "INST-24, API-21: %s of a vGPU instance is 409 invalid_state" % op)
        eq(post(c, p["id"], op)[0], 501, "INST-24: %s of a GPU-less instance is 501" % op)
    # console: tail_bytes out of range.
    for q in ("0", "1048577", "x"):
        eq(error_of(c.get("/instances/%s/console?tail_bytes=%s" % (g["id"], q)))[1].get("code"),
           "invalid_request", "API-2: console tail_bytes=%s is 400 invalid_request" % q)
    # stop of a Stopped instance is 200 unchanged, twice.
    eq(post(c, p["id"], "stop")[0], 200, "INST-15: stop")
    st, s = post(c, p["id"], "stop")
    eq((st, s["state"]), (200, "Stopped"), "INST-25: stop of a Stopped instance is 200")
    group_end(c, "routes")


# ---- main -----------------------------------------------------------------------------------


def main():
    work = tempfile.mkdtemp(prefix="vgpud-matrix-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        sock = os.path.join(work, "api.sock")
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work)
        d, c = start(work, "main", config, secret, sock)
        daemons.append(d)
        if c and not sim_state()["gpus"]:
            run_group("no-gpu", lambda: check_no_gpu(c))
            stop(d)
        elif c:
            only = os.environ.get("MATRIX_GROUPS", "").split()  # for a quick local rerun
            for name, fn in (("rows", check_rows), ("busy", check_busy),
                             ("admission", check_admission),
                             ("placement", check_placement_disabled),
                             ("identity", check_identity_save),
                             ("record-faults", check_record_faults),
                             ("release-faults", check_release_faults),
                             ("rollback-gone", check_rollback_gone),
                             ("rollback-alive", check_rollback_alive),
                             ("vmm-flags", check_vmm_flags),
                             ("confinement", check_confinement), ("routes", check_routes)):
                if not only or name in only:
                    run_group(name, lambda: fn(c, d, work))
                sim_ctl("clear-faults")
            stop(d)
            window = vmm_config(os.path.join(work, "window.yaml"), work, init_window="0s")
            if not only or "spawn" in only:
                bad = vmm_config(os.path.join(work, "bad.yaml"), work)
                with open(bad) as f:
                    text = f.read().replace(FAKE_QEMU, os.path.join(work, "no-qemu"))
                with open(bad, "w") as f:
                    f.write(text)
                run_group("spawn", lambda: check_spawn_failure(work, bad, secret, sock, daemons))
            if not only or "window" in only:
                run_group("window",
                          lambda: check_out_of_window(work, window, secret, sock, daemons))
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
