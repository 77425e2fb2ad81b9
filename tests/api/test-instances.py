#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-instances.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# The instance lifecycle through the real vgpud on a mounted vgpu-sim (SIM-20's host) with
# fake-qemu as its VMM (SIM-15), in run-sim-test.sh's private PID namespace (SIM-21): create,
# start, stop and delete with and without a vGPU, the refusals of INST-3, INST-4, INST-5, INST-6,
# INST-7, INST-8, INST-9, INST-10, INST-11 and API-21, the
# failures of VMM-5 and VMM-10, an unrequested exit (INST-19), a daemon killed and restarted
# under running VMs (INST-21), and 20 concurrent creates (PLACE-2). Output is TAP; every check
# names the requirements it covers.
import os
import re
import signal
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    MNT, error_of, eq, exit_status, gpu_body, log_count, metric, ok, parse_metrics, poll,
    run_group, sim_ctl, start, stop, write_config, write_secret)
from vgpud_instances import (  # noqa: E402
    FAKE_QEMU, IMAGES, INSTANCES, PROFILE, alive, body, console_text, current_type, delete,
    delete_when_idle, finish_run, make_images, pid_of, post, runtime_dir, unless_busy, vf_of)


# ---- the checks -----------------------------------------------------------------------------


def check_validation(c):
    # INST-4, INST-5, INST-7, API-9: each field's violation is 400 invalid_request naming it.
    cases = [
        ("INST-4: a name with upper case", body("Bad"), "name"),
        ("INST-5: vcpus 0", body("v0", vcpus=0), "vcpus"),
        ("INST-5: memory_mb 64", body("m64", memory_mb=64), "memory_mb"),
        ("INST-5: neither kernel nor disk", dict(body("nb"), boot={}), "boot"),
        ("API-9: an unknown key", dict(body("uk"), colour="blue"), "colour"),
        ("INST-6: a relative kernel path", dict(body("rel"), boot={"kernel": "vmlinuz"}),
         "boot.kernel"),
        ("INST-6: a kernel path with ..",
         dict(body("dots"), boot={"kernel": IMAGES + "/../images/vmlinuz"}), "boot.kernel"),
    ]
    for name, b, field in cases:
        r = c.request("POST", "/instances", b)
        e = error_of(r)
        ok(r.status == 400 and e[1].get("code") == "invalid_request" and
           field in e[1].get("message", ""), name + " is 400 invalid_request naming " + field, e)

    # INST-6: a file outside image_dirs, and a symlink inside that points out, are refused.
    outside = os.path.join(MNT, "data", "outside-kernel")
    with open(outside, "w") as f:
        f.write("not a kernel\n")
    link = os.path.join(IMAGES, "escape")
    os.symlink(outside, link)
    for name, path in (("a file outside image_dirs", outside), ("a symlink out of them", link)):
        r = c.request("POST", "/instances", dict(body("esc"), boot={"kernel": path}))
        e = error_of(r)
        ok(r.status == 400 and "boot.kernel" in e[1].get("message", ""),
           "INST-6: %s is 400 invalid_request" % name, e)
    os.unlink(link)

    # INST-3: a malformed id is 400 invalid_id before any file is touched; a well-formed
    # unknown one is 404.
    for bad in ("short", "A" * 20, "..", "abc%2Fdefghijklmnopq"):
        r = c.get("/instances/" + bad)
        ok(r.status in (400,) and error_of(r)[1].get("code") in ("invalid_id", "invalid_request"),
           "INST-3: GET /instances/%s is 400" % bad, error_of(r))
    eq(error_of(c.get("/instances/" + "a" * 20))[0], 404, "API-2: an unknown id is 404")


def check_gpu_less(c, work):
    # INST-12, API-2, API-7: a GPU-less VM boots in fake-qemu and answers 201 Running.
    r = c.request("POST", "/instances", body("plain-01"))
    ok(r.status == 201, "INST-12: create without a vGPU answers 201", error_of(r))
    inst = r.json()
    eq(inst["state"], "Running", "INST-8: the created instance is Running")
    eq(sorted(inst), sorted(["id", "name", "state", "created_at", "vcpus", "memory_mb", "boot",
                             "network"]),
       "API-7, API-8: no gpu and no error keys for a GPU-less instance")
    eq(inst["network"]["mode"], "nat", "NET-1: a body without network gets network.default_mode")
    ok(re.fullmatch(r"[a-z0-9]{20}", inst["id"]) is not None, "INST-3: the id is 20 [a-z0-9]")
    iid = inst["id"]
    pid = pid_of(iid)
    ok(pid and alive(pid), "INST-12, VMM-4: the recorded VMM pid runs", pid)
    eq(c.get("/instances/" + iid).json(), inst, "API-2: GET returns the instance")
    eq([i["id"] for i in c.get("/instances").json()], [iid], "API-2: the list has it")
    ok("fake-qemu: started name=plain-01" in console_text(c, iid),
       "API-2: the console route returns console.log")
    ok(len(c.get("/instances/%s/console?tail_bytes=10" % iid).body) == 10,
       "API-2: tail_bytes=10 returns 10 bytes")
    eq(error_of(c.get("/instances/%s/console?tail_bytes=0" % iid))[0], 400,
       "API-2: tail_bytes 0 is 400")

    # INST-4: a second instance with the name is 409 already_exists.
    eq(error_of(c.request("POST", "/instances", body("plain-01")))[1].get("code"),
       "already_exists", "INST-4: a duplicate name is 409 already_exists")
    # INST-25: start of a Running instance is 409 invalid_state.
    e = error_of(c.request("POST", "/instances/%s/start" % iid))
    eq(e, (409, {"code": "invalid_state", "message": "instance %s is Running" % iid}),
       "INST-25: start of a Running instance is 409 invalid_state")
    # INST-24: standby of a GPU-less instance is 501.
    eq(error_of(c.request("POST", "/instances/%s/standby" % iid))[1].get("code"),
       "not_implemented", "INST-24: standby without a vGPU is 501 not_implemented")

    # INST-15: stop powers the guest down (VMM-9) and answers 200 Stopped.
    r = c.request("POST", "/instances/%s/stop" % iid)
    ok(r.status == 200 and r.json()["state"] == "Stopped", "INST-15: stop answers 200 Stopped",
       error_of(r))
    ok(not alive(pid), "VMM-9: the VMM has exited after the stop")
    ok("qmp command system_powerdown" in console_text(c, iid),
       "VMM-9: the stop asked for system_powerdown")
    rt = runtime_dir(work, iid)
    ok(not os.path.exists(os.path.join(rt, "qmp.sock")), "VMM-15: the sockets are removed")
    # INST-25: stop of a Stopped instance is 200 unchanged.
    r = c.request("POST", "/instances/%s/stop" % iid)
    ok(r.status == 200 and r.json()["state"] == "Stopped",
       "INST-25: stop of a Stopped instance is 200, unchanged")

    # INST-17: start again.
    r = c.request("POST", "/instances/%s/start" % iid)
    ok(r.status == 200 and r.json()["state"] == "Running", "INST-17: start answers 200 Running",
       error_of(r))

    # INST-18: delete answers 204 and leaves nothing.
    pid = pid_of(iid)
    r = c.request("DELETE", "/instances/" + iid)
    eq(r.status, 204, "INST-18: delete answers 204")
    eq(error_of(c.get("/instances/" + iid))[0], 404, "INST-18: the instance is gone")
    ok(pid and not alive(pid), "INST-18: its VMM has exited")
    ok(not os.path.exists(os.path.join(INSTANCES, iid)),
       "INST-20: its data directory is removed")
    ok(not os.path.exists(rt), "INST-20: its runtime directory is removed")


def check_vgpu(c, work):
    before = gpu_body(c)
    r = c.request("POST", "/instances", body("gpu-01", PROFILE))
    ok(r.status == 201, "INST-12: create with %s answers 201" % PROFILE, error_of(r))
    inst = r.json()
    g = inst.get("gpu", {})
    ok(g.get("profile") == PROFILE and g.get("device_path", "").startswith(MNT + "/sys/") and
       re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", g.get("claimed_at", "")),
       "API-8: gpu carries profile, device_path and claimed_at while claimed", g)
    vf = vf_of(inst)
    ok(current_type(vf) != "0", "INST-12: the claimed VF is configured", current_type(vf))
    ok("vf=%s" % vf in console_text(c, inst["id"]),
       "VMM-1: fake-qemu was given the VF as vfio-pci sysfsdev")
    after = gpu_body(c)
    eq(after["used_slots"], before["used_slots"] + 1, "API-5: used_slots counts the claim")
    gvf = [v for gp in c.get("/gpus").json()["gpus"] for v in gp["vfs"] if v["address"] == vf]
    ok(gvf and gvf[0]["state"] == "claimed" and gvf[0].get("instance_id") == inst["id"],
       "API-6: /gpus shows the VF claimed by the instance", gvf)

    def vf_profile():
        v = [v for gp in c.get("/gpus").json()["gpus"] for v in gp["vfs"] if v["address"] == vf]
        return v and v[0].get("profile")
    # DISC-20: the configure makes the Claimer's owner re-read the VF, long before a pass.
    eq(poll(vf_profile, 2, 0.05), PROFILE, "DISC-20: /gpus shows the new claim's profile")
    e = error_of(c.request("POST", "/instances/%s/snapshot" % inst["id"]))
    eq(e, (409, {"code": "invalid_state", "message": "snapshot is not supported for instances "
                 "with vGPU attached (driver limitation)"}),
       "INST-24: snapshot of a vGPU instance is 409 invalid_state")

    # INST-15: stop releases the VF (DEV-10 retries cover the simulator's release) and clears
    # the claim.
    r = c.request("POST", "/instances/%s/stop" % inst["id"])
    s = r.json() if r.status == 200 else {}
    ok(r.status == 200 and s.get("state") == "Stopped" and
       sorted(s.get("gpu", {})) == ["profile"],
       "INST-15: stop answers 200 Stopped with the claim cleared", error_of(r))
    eq(current_type(vf), "0", "INST-15: the VF is released when the stop answers")
    # MET-4, DISC-20: the answer waits for the host's re-read, so reads agree with it at once.
    eq(gpu_body(c)["used_slots"], before["used_slots"],
       "DISC-20: /resources shows the release as soon as the stop has answered")

    # INST-17: a new start claims again, with a new claimed_at.
    r = c.request("POST", "/instances/%s/start" % inst["id"])
    s = r.json() if r.status == 200 else {}
    ok(r.status == 200 and s.get("gpu", {}).get("claimed_at") not in (None, g["claimed_at"]),
       "INST-17: start makes a new claim with a new claimed_at", error_of(r))
    r = c.request("DELETE", "/instances/" + inst["id"])
    eq(r.status, 204, "INST-18: delete of a vGPU instance answers 204")
    nvf = vf_of(s) if s.get("gpu", {}).get("device_path") else vf
    ok(poll(lambda: current_type(nvf) == "0", 10), "INST-18: delete releases the VF")
    ok(poll(lambda: gpu_body(c)["used_slots"] == before["used_slots"], 10),
       "API-5: used_slots is back")


def check_failures(c, d, work):
    # VMM-5: a VMM that exits before QMP is ready fails the create with QEMU's last line, and
    # INST-14 rolls back: no record, the VF released.
    sim_ctl("qemu early-01 exit-early:0")
    r = c.request("POST", "/instances", body("early-01", PROFILE))
    e = error_of(r)
    ok(r.status == 500 and e[1].get("code") == "internal" and
       "before QMP was ready" in e[1].get("message", ""),
       "VMM-5: exit before QMP readiness is 500 internal with the reason", e)
    ok(not [i for i in c.get("/instances").json() if i["name"] == "early-01"],
       "INST-14: the failed create leaves no record")
    ok(poll(lambda: gpu_body(c)["used_slots"] == 0, 10),
       "INST-14: the failed create leaves no claim")

    # VMM-5: a VMM whose QMP hangs fails after vmm.boot_timeout.
    sim_ctl("qemu hang-01 hang-qmp")
    r = c.request("POST", "/instances", body("hang-01"))
    e = error_of(r)
    ok(r.status == 500 and "QMP" in e[1].get("message", ""),
       "VMM-5: a hung QMP fails the create with 500", e)

    # VMM-10, VMM-12, VMM-14: a VMM that never gets ready and ignores SIGTERM is killed by the
    # ladder before the rollback; the kill inside the init window counts in_grace=true.
    sim_ctl("qemu stubborn-01 ignore-sigterm")
    sim_ctl("qemu stubborn-01 hang-qmp")
    signalled = r'<5>signalled VMM instance_id=\S+ pid=\d+ signal=%s reason="%s"'
    term = signalled % ("SIGTERM", "termination requested")
    kill = signalled % ("SIGKILL", "no exit within gpu.vfio_term_grace of SIGTERM")
    before = (log_count(d, term), log_count(d, kill))
    r = c.request("POST", "/instances", body("stubborn-01", PROFILE))
    e = error_of(r)
    ok(r.status == 500 and "QMP" in e[1].get("message", ""),
       "VMM-14: a failed start of a stubborn VMM is 500", e)
    fams = parse_metrics(c.get("/metrics").body.decode())
    eq(metric(fams, "vgpud_instances_vmm_forced_kills_total", in_grace="true"), 1,
       "VMM-12, VMM-13: the SIGKILL inside the init window counts in_grace=true")
    eq((log_count(d, term) - before[0], log_count(d, kill) - before[1]), (1, 1),
       "VMM-16: the ladder's SIGTERM and SIGKILL are each logged with why (notice)")
    ok(not [i for i in c.get("/instances").json() if i["name"] == "stubborn-01"],
       "INST-14: the VMM provably gone after SIGKILL, the record is removed")
    ok(poll(lambda: gpu_body(c)["used_slots"] == 0, 10), "INST-14: and its VF released")


def check_unrequested_exit(c, work):
    # INST-19: a VMM killed behind vgpud's back leaves the instance Failed, the VF released.
    r = c.request("POST", "/instances", body("crash-01", PROFILE))
    ok(r.status == 201, "crash VM created", error_of(r))
    inst = r.json()
    os.kill(pid_of(inst["id"]), signal.SIGKILL)
    got = poll(lambda: c.get("/instances/" + inst["id"]).json()["state"] == "Failed", 10)
    s = c.get("/instances/" + inst["id"]).json()
    ok(got and "SIGKILL" in s.get("error", ""),
       "INST-19: a VMM killed by a signal leaves the instance Failed with the error", s)
    ok(poll(lambda: current_type(vf_of(inst)) == "0", 10), "INST-19: the VF is released")
    eq(delete_when_idle(c, inst["id"])[0], 204, "INST-8: the Failed instance is deleted")


def check_concurrent(c, work):
    # PLACE-2, INST-10: 20 concurrent creates of one profile never share a VF.
    def available():
        return [p["available"] for p in gpu_body(c)["profiles"] if p["name"] == PROFILE][0]
    start_available = available()
    results = [None] * 20

    took = [0.0] * 20

    def create(k):
        t0 = time.monotonic()
        results[k] = c.request("POST", "/instances", body("many-%02d" % k, PROFILE))
        took[k] = time.monotonic() - t0

    threads = [threading.Thread(target=create, args=(k,)) for k in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("# slowest of 20 concurrent creates: %.2f s" % max(took))
    good = [r.json() for r in results if r and r.status == 201]
    eq(len(good), 20, "PLACE-2: 20 concurrent creates all succeed")
    vfs = [vf_of(i) for i in good]
    eq(len(set(vfs)), len(vfs), "PLACE-2: no two instances share a VF")
    fams = parse_metrics(c.get("/metrics").body.decode())
    eq(metric(fams, "vgpud_instances", state="Running"), 20,
       "MET-2: vgpud_instances{state=Running} counts them")
    for i in good:
        c.request("DELETE", "/instances/" + i["id"])
    eq(c.get("/instances").json(), [], "every concurrent instance is deleted")
    # NVML-14, NVML-15: the releases' cache refreshes bring the profile's availability back
    # without waiting for a reconcile pass. At least back: the figure before may still have
    # lagged the previous group's release on a loaded machine; a leak would show as less.
    t0 = time.monotonic()
    back = poll(lambda: available() >= start_available, 10, 0.02)
    print("# %s availability back after %.2f s" % (PROFILE, time.monotonic() - t0))
    ok(back, "NVML-14: availability returns to at least %d after the deletes" % start_available,
       available())


def check_operator_routes(c):
    # API-18: a drain answers the instances still running on the PF's VFs.
    r = c.request("POST", "/instances", body("drained-01", PROFILE))
    ok(r.status == 201, "drained VM created", error_of(r))
    inst = r.json()
    vf = vf_of(inst)
    pf = [g["address"] for g in c.get("/gpus").json()["gpus"]
          if any(v["address"] == vf for v in g["vfs"])][0]
    r = c.request("POST", "/gpu/gpus/%s/drain" % pf, {"reason": "maintenance"})
    ok(r.status == 200 and {"id": inst["id"], "vf": vf} in r.json()["running_instances"],
       "API-18: the drain lists the instance still running on the GPU", error_of(r))
    r = c.request("DELETE", "/gpu/gpus/%s/drain" % pf)
    eq(r.status, 200, "API-18: undrain")
    c.request("DELETE", "/instances/" + inst["id"])


def check_sysfs_stuck(c):
    # GEN-4: with every sysfs call hung, instance records still reach disk (their own pool),
    # so a GPU-less VM is created, stopped and deleted, while a vGPU create is refused with
    # INST-11's 503 once the hung discovery has disabled placement.
    try:
        sim_ctl("fault read sys/* hang")
        sim_ctl("fault write sys/* hang")
        g = poll(lambda: (lambda g: "placement_disabled_reason" in g and g)(gpu_body(c)), 30)
        ok(bool(g), "GEN-4: a hung discovery disables placement", gpu_body(c))
        reason = g.get("placement_disabled_reason", "") if g else ""
        e = error_of(c.request("POST", "/instances", body("refused-01", PROFILE)))
        eq(e, (503, {"code": "placement_disabled",
                     "message": "insufficient GPU: vGPU placement is disabled: " + reason}),
           "INST-11: a vGPU create while placement is disabled is 503 placement_disabled")
        r = c.request("POST", "/instances", body("stuck-01"))
        ok(r.status == 201, "GEN-4: a GPU-less create completes with sysfs hung", error_of(r))
        if r.status == 201:
            iid = r.json()["id"]
            r = c.request("POST", "/instances/%s/stop" % iid)
            ok(r.status == 200, "GEN-4: its stop completes with sysfs hung", error_of(r))
            eq(c.request("DELETE", "/instances/" + iid).status, 204,
               "GEN-4: its delete completes with sysfs hung")
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: "placement_disabled_reason" not in gpu_body(c), 40),
       "GEN-4: placement comes back once sysfs answers", gpu_body(c))


def check_restart(work, config, secret, sock, daemons):
    # INST-21: SIGKILL the daemon under a running VM; the next start adopts it (pidfd, IO
    # source), and a stop of the adopted VMM works with its exit status unknown.
    d, c = start(work, "restart-a", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    r = c.request("POST", "/instances", body("survivor-01", PROFILE))
    ok(r.status == 201, "survivor created", error_of(r))
    inst = r.json()
    pid = pid_of(inst["id"])
    d.stop(signal.SIGKILL)
    ok(alive(pid), "OPS-3: the VM outlives the daemon")
    d2, c2 = start(work, "restart-b", config, secret, sock)
    daemons.append(d2)
    if not c2:
        return
    s = c2.get("/instances/" + inst["id"]).json()
    eq((s["state"], s["gpu"].get("device_path")), ("Running", inst["gpu"]["device_path"]),
       "INST-21: a Running record with a live VMM stays Running with its claim")
    r = c2.request("POST", "/instances/%s/stop" % inst["id"])
    ok(r.status == 200 and r.json()["state"] == "Stopped", "INST-21: the adopted VMM stops",
       error_of(r))
    ok(not alive(pid), "VMM-4: the adopted VMM has exited")
    c2.request("DELETE", "/instances/" + inst["id"])
    stop(d2, " (restarted)")


def check_shutdown_mid_create(work, config, secret, sock, daemons):
    # OPS-3: SIGTERM while a create waits for QMP answers that request 503 and exits 0; the
    # VMM keeps running; the next start finds the Creating record with its VMM alive (INST-21),
    # gets no QMP readiness from it, terminates it and records Failed with the claim kept.
    # A long vmm.boot_timeout leaves the create waiting for the greeting (VMM-5's 5 s) while
    # SIGTERM comes, even on a loaded machine.
    with open(config) as f:
        text = f.read()
    config = os.path.join(work, "vgpud-long-boot.yaml")
    with open(config, "w") as f:
        f.write(text.replace("boot_timeout: 3s", "boot_timeout: 60s"))
    d, c = start(work, "shutdown-a", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    sim_ctl("qemu late-01 hang-qmp")
    answer = {}
    t = threading.Thread(target=lambda: answer.setdefault(
        "r", c.request("POST", "/instances", body("late-01", PROFILE))))
    t.start()

    def creating():
        lst = c.get("/instances").json()
        return lst and lst[0]["state"] == "Creating" and pid_of(lst[0]["id"]) and lst[0]
    inst = poll(creating, 10)
    ok(bool(inst), "INST-12: the create waits for readiness with its VMM spawned")
    pid = pid_of(inst["id"]) if inst else None
    eq(d.stop(), 0, "OPS-3: SIGTERM during a create exits 0")
    t.join(10)
    r = answer.get("r")
    eq(error_of(r) if r else None,
       (503, {"code": "not_ready", "message": "vgpud is shutting down"}),
       "OPS-3: the waiting create is answered 503 not_ready")
    ok(pid and alive(pid), "OPS-3: the VMM outlives the daemon")
    d2, c2 = start(work, "shutdown-b", config, secret, sock)
    daemons.append(d2)
    if not c2 or not inst:
        return
    s = poll(lambda: (lambda j: j["state"] == "Failed" and j)(
        c2.get("/instances/" + inst["id"]).json()), 20)
    # Kept when it became Failed: the first answer that shows Failed still has it, unless a
    # reconcile pass came in between and released it as stale (REC-4), which it does only to
    # a claim that was there. The answer drops the claim at the release, the pass logs the line
    # once the record is written, a moment later.
    released = "released stale vGPU assignment instance_id=%s" % inst["id"]
    ok(s and (s["gpu"].get("device_path") == inst["gpu"]["device_path"] or
              poll(lambda: released in d2.log_text(), 10)),
       "INST-21: Creating with a live VMM that never gets ready is terminated and Failed, "
       "claim kept", s)
    ok(not alive(pid), "INST-21, VMM-10: the VMM was terminated")
    # The INST-21 recovery's last steps, or a pass's release of the claim (REC-4), may still be
    # running: INST-9's 409 busy until they end.
    st, b = unless_busy(lambda: post(c2, inst["id"], "stop"), 30)
    ok(st == 200 and b["state"] == "Stopped" and "device_path" not in b["gpu"],
       "INST-25: stop of the Failed instance releases the claim and ends Stopped", (st, b))
    eq(unless_busy(lambda: delete(c2, inst["id"]), 30)[0], 204, "and it is deleted")
    stop(d2, " (after the shutdown)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-instances-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        config = os.path.join(work, "vgpud.yaml")
        write_config(config, work, extra_gpu="""  vfio_term_grace: 1s
  sysfs_timeout: 2s
""", extra_top="""qemu_binary: "%s"
qemu_accel: tcg
vmm:
  boot_timeout: 3s
  stop_timeout: 3s
""" % FAKE_QEMU)
        sock = os.path.join(work, "api.sock")
        d, c = start(work, "main", config, secret, sock)
        daemons.append(d)
        if c:
            run_group("validation", lambda: check_validation(c))
            run_group("gpu-less", lambda: check_gpu_less(c, work))
            run_group("vgpu", lambda: check_vgpu(c, work))
            run_group("failures", lambda: check_failures(c, d, work))
            run_group("exit", lambda: check_unrequested_exit(c, work))
            run_group("concurrent", lambda: check_concurrent(c, work))
            run_group("operator", lambda: check_operator_routes(c))
            run_group("sysfs-stuck", lambda: check_sysfs_stuck(c))
            stop(d)
        run_group("restart", lambda: check_restart(work, config, secret, sock, daemons))
        run_group("shutdown", lambda: check_shutdown_mid_create(work, config, secret, sock,
                                                                daemons))
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
