#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-instances-restart.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# Daemon restarts during each lifecycle operation (REL-4) and the start-up recovery of INST-20,
# INST-21, INST-22
# against the real vgpud on a mounted vgpu-sim with fake-qemu, in run-sim-test.sh's private PID
# namespace (SIM-21).
#
# One daemon (A) is SIGKILLed while it holds, all at once: two creates mid-readiness (hang-qmp),
# two stops and two deletes mid-ladder (ignore-sigterm, a test client holding the QMP socket so
# the graceful part cannot run, and gpu.vfio_term_grace 30s so the ladder waits after SIGTERM),
# and running VMs. While no daemon runs, half of those VMMs are killed (the "provably gone"
# column of INST-21) and three records are edited by hand for the rows no operation leaves
# behind (a Creating record whose VMM is ready, Stopped and Failed records whose VMM runs). The
# next daemon (B) must classify every record per INST-21, and no VF may be leaked (configured
# without a claim) or claimed twice: /gpus, state.json and every instance.json agree.
#
# INST-21's "ambiguous" column needs an unreadable or malformed /proc/net/unix or an incomplete
# fd scan of the real /proc; test-liveness-ambiguous.py covers it with a fixture proc_root.
#
# The claims INST-21 leaves to REC-4 (release_stale) are released by the reconcile passes, the
# first of which runs before readiness: a check right after readiness may find them gone.
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    MNT, eq, exit_status, gpu_body, ok, poll, run_group, sim_ctl, start, stop, write_secret)
from vgpud_instances import (  # noqa: E402
    INSTANCES, PROFILE, QmpHold, alive, check_claims, claim_picture, console_file, create,
    create_running, current_type, delete, delete_all, disk_claims, finish_run, get, log_has,
    make_images, persisted, pid_of, post, record, runtime_dir, unless_busy, vf_of, vmm_config)


def write_record(iid, rec):
    """A hand edit of instance.json while no daemon runs (set-up only): the same crash-safe
    steps vgpud takes (INST-1), so the file is never seen half written."""
    path = os.path.join(INSTANCES, iid, "instance.json")
    with open(path + ".tmp", "w") as f:
        json.dump(rec, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)


def in_flight(c, fn, *args):
    """Runs a request that the daemon's death will cut off; its answer does not matter."""
    def run():
        try:
            fn(c, *args)
        except Exception:  # the connection dies with the daemon
            pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def kill_vmm(pid):
    """SIGKILL to a VMM that must be running; False when it was not."""
    if not alive(pid):
        return False
    os.kill(pid, signal.SIGKILL)
    return poll(lambda: not alive(pid), 5, 0.02)


def check_operations(work, slow, fast, secret, sock, daemons):
    # The test's QMP clients stay connected until the end: fake-qemu exits 1 ("serve clients:
    # Broken pipe") when the next client it accepts has already hung up, as vgpud's queued
    # connection has by then, so closing them early would end the VMMs behind vgpud's back.
    holds = []
    try:
        check_operations_held(work, slow, fast, secret, sock, daemons, holds)
    finally:
        for h in holds:
            h.close()


def check_operations_held(work, slow, fast, secret, sock, daemons, holds):
    d, c = start(work, "a", slow, secret, sock)
    daemons.append(d)
    if not c:
        return
    names = ["ready", "stop", "stop-gone", "del", "del-gone", "stopped", "failed", "run-gone"]
    for n in ("stop", "stop-gone", "del", "del-gone"):
        sim_ctl("qemu r-%s ignore-sigterm" % n)
    for n in ("hang", "hang-gone"):
        sim_ctl("qemu r-%s hang-qmp" % n)
    inst = {n: create_running(c, "r-" + n, None if n == "stopped" else PROFILE) for n in names}
    pid = {n: pid_of(i["id"]) for n, i in inst.items()}

    # Stops and deletes mid-ladder: SIGTERM sent and ignored, vfio_term_grace (30 s) running.
    threads = []
    for n, op in (("stop", "stop"), ("stop-gone", "stop"), ("del", "delete"),
                  ("del-gone", "delete")):
        holds.append(QmpHold(work, inst[n]["id"]))
        if op == "stop":
            threads.append(in_flight(c, post, inst[n]["id"], "stop"))
        else:
            threads.append(in_flight(c, delete, inst[n]["id"]))
    sigterm = r"fake-qemu: signal SIGTERM pid=\d+ action=ignore"
    for n, state in (("stop", "Stopping"), ("stop-gone", "Stopping"), ("del", "Deleting"),
                     ("del-gone", "Deleting")):
        iid = inst[n]["id"]
        ok(poll(lambda: re.search(sigterm, console_file(iid)), 12, 0.05) and
           record(iid)["state"] == state,
           "REL-4: r-%s is mid-ladder (SIGTERM ignored), recorded %s" % (n, state))

    # Creates mid-readiness: the record holds the VMM's identity, QMP says nothing.
    for n in ("hang", "hang-gone"):
        threads.append(in_flight(c, create, "r-" + n, PROFILE))
    for n in ("hang", "hang-gone"):
        def creating(n=n):
            m = [x for x in c.get("/instances").json() if x["name"] == "r-" + n]
            r = record(m[0]["id"]) if m else None
            return r and r["state"] == "Creating" and r.get("hypervisor", {}).get("pid") and \
                r.get("gpu", {}).get("device_path") and m[0]
        got = poll(creating, 4, 0.02)
        if ok(bool(got), "REL-4: r-%s is mid-readiness with its identity and claim saved" % n):
            inst[n] = got
            pid[n] = record(got["id"])["hypervisor"]["pid"]
    d.stop(signal.SIGKILL)
    for t in threads:
        t.join(5)

    # Provably gone: the VMMs of the *-gone instances end while no daemon runs.
    for n in ("hang-gone", "stop-gone", "del-gone", "run-gone"):
        if n in pid:
            ok(kill_vmm(pid[n]), "the VMM of r-%s is killed while vgpud is down" % n)
    # Hand edits for the rows no operation leaves: a Creating record whose VMM is ready (a
    # daemon killed between readiness and the Running write), Stopped and Failed records whose
    # VMM still runs.
    for n, state in (("ready", "Creating"), ("stopped", "Stopped"), ("failed", "Failed")):
        rec = record(inst[n]["id"])
        rec["state"] = state
        write_record(inst[n]["id"], rec)

    d, c = start(work, "b", fast, secret, sock)
    daemons.append(d)
    if not c:
        return
    ids = {n: i["id"] for n, i in inst.items()}
    # INST-21: waiting actions run after READY=1 as operations that mark the instance busy.
    if "hang" in ids:
        busy = "instance %s is busy: recovery in progress" % ids["hang"]
        ok(poll(lambda: post(c, ids["hang"], "start") ==
                (409, {"code": "busy", "message": busy}), 3, 0.05),
           "INST-21, INST-9: the resumed readiness wait makes its instance busy: " + busy)

    def final(n, state, timeout=25):
        return poll(lambda: (get(c, ids[n]) or {}).get("state") == state, timeout, 0.1) and \
            get(c, ids[n])

    # Creating + alive + QMP ready → Running, the VMM adopted (same pid, same claim).
    g = final("ready", "Running")
    ok(g and g["gpu"]["device_path"] == inst["ready"]["gpu"]["device_path"] and
       pid_of(ids["ready"]) == pid["ready"] and alive(pid["ready"]),
       "INST-21: Creating with its VMM alive and QMP ready → Running, adopted", g)
    eq(persisted(ids["ready"], lambda r: r.get("state") == "Running").get("state"), "Running",
       "INST-21: Running is persisted")
    # Creating + alive, QMP not ready → terminated → Failed, claim kept.
    if "hang" in ids:
        g = final("hang", "Failed")
        # The Failed write keeps the claim. The VMM being provably gone, the next pass may
        # already have released it (INST-14, REC-4); its line follows the record write.
        kept = g and (g["gpu"].get("device_path") or poll(lambda: log_has(
            d, r"released stale vGPU assignment instance_id=%s" % ids["hang"]), 10, 0.05))
        rec = persisted(ids["hang"], lambda r: r.get("state") == "Failed")
        ok(g and g.get("error", "").startswith("QMP greeting not received within 5s") and
           kept and not alive(pid["hang"]) and "hypervisor" not in rec,
           "INST-21: Creating with its VMM alive but QMP silent → terminated (VMM-10) → Failed, "
           "claim kept", (g, rec))
    # Creating + gone → Failed, "interrupted by daemon restart".
    if "hang-gone" in ids:
        g = final("hang-gone", "Failed")
        ok(g and g.get("error") == "interrupted by daemon restart",
           "INST-21: Creating with its VMM gone → Failed `interrupted by daemon restart`", g)
    # Stopping + alive → the stop resumes (QMP is still held: the ladder again, now with B's
    # 1 s grace) → Stopped, released.
    g = final("stop", "Stopped")
    ok(g and sorted(g["gpu"]) == ["profile"] and not alive(pid["stop"]) and
       len(re.findall(r"signal SIGTERM pid=\d+", console_file(ids["stop"]))) == 2,
       "INST-21: Stopping with its VMM alive → the stop resumes → Stopped, VF released", g)
    # Stopping + gone → Stopped (the claim is REC-4's).
    g = final("stop-gone", "Stopped")
    ok(bool(g), "INST-21: Stopping with its VMM gone → Stopped", g)
    # Deleting + alive → the delete resumes; Deleting + gone → the delete completes.
    for n, what in (("del", "alive → the delete resumes"), ("del-gone", "gone → it completes")):
        ok(poll(lambda: get(c, ids[n]) is None, 25) and
           not os.path.exists(os.path.join(INSTANCES, ids[n])) and
           not os.path.exists(runtime_dir(work, ids[n])),
           "INST-21, INST-20: Deleting with its VMM %s, record and directories removed" % what)
        ok(poll(lambda: current_type(vf_of(inst[n])) == "0", 15),
           "INST-18: the deleted r-%s's VF is released" % n)
    ok(not alive(pid["del"]), "INST-18: the resumed delete stopped the VMM")
    # Stopped + alive → terminated, Stopped; Failed + alive → terminated, Failed.
    g = final("stopped", "Stopped")
    ok(g and poll(lambda: not alive(pid["stopped"]), 10) and
       poll(lambda: "hypervisor" not in record(ids["stopped"]), 5),
       "INST-21: a Stopped record with a live VMM → the VMM is terminated (VMM-10), Stopped",
       record(ids["stopped"]))
    g = final("failed", "Failed")
    ok(g and poll(lambda: not alive(pid["failed"]), 10),
       "INST-21: a Failed record with a live VMM → terminated, Failed", g)
    # Running + gone → Stopped (the claim is REC-4's).
    g = final("run-gone", "Stopped")
    rec = persisted(ids["run-gone"], lambda r: r.get("state") == "Stopped")
    ok(g and "hypervisor" not in rec,
       "INST-21: Running with its VMM gone → Stopped, hypervisor cleared", rec)

    check_claims(c, "INST-21: after recovery no VF is leaked or claimed twice")
    kept = [n for n in ("hang-gone", "stop-gone", "run-gone", "failed", "hang") if n in ids]
    # The answer drops a claim when the release is done, the record a moment later (INST-18).
    released = poll(lambda: all("device_path" not in get(c, ids[n])["gpu"] and
                                "device_path" not in (record(ids[n]) or {}).get("gpu", {})
                                for n in kept), 12, 0.5)
    ok(released, "INST-21, REC-4: the claims left by gone VMMs are released by the next "
       "reconcile passes (%s)" % ", ".join(kept),
       {n: get(c, ids[n])["gpu"] for n in kept})

    # No double claim: a new create gets a VF no record holds.
    held = set(disk_claims())
    n = create_running(c, "r-new", PROFILE)
    ok(vf_of(n) not in held, "PLACE-1: a create after recovery avoids every VF a record claims",
       (vf_of(n), sorted(held)))
    # The kept claims: a stop of a Failed instance (INST-25) and a start of a Stopped one
    # (INST-17) release them.
    for nm in ("hang", "hang-gone", "failed"):
        if nm in ids:
            st, g = unless_busy(lambda: post(c, ids[nm], "stop"))
            ok(st == 200 and g["state"] == "Stopped" and sorted(g["gpu"]) == ["profile"],
               "INST-25: stop of the recovered Failed r-%s releases its claim" % nm, (st, g))
    for nm in ("stop-gone", "run-gone"):
        st, g = unless_busy(lambda: post(c, ids[nm], "start"))
        ok(st == 200 and g["state"] == "Running",
           "INST-17: start of the recovered Stopped r-%s (its old claim released first)" % nm,
           (st, g))
    check_claims(c, "after the kept claims are used: no VF leaked or claimed twice")
    left = delete_all(c)
    ok(not left, "every instance deletes", left)
    check_claims(c, "at the end: no VF configured")
    stop(d, " (b)")


# ---- INST-20, INST-22 ------------------------------------------------------------------------


def check_leftovers(work, fast, secret, sock, daemons):
    ids = {k: (k * 20)[:20] for k in "bcdef"}
    os.makedirs(os.path.join(INSTANCES, ".deleted-" + ids["b"], "deep"))
    with open(os.path.join(INSTANCES, ".deleted-" + ids["b"], "deep", "console.log"), "w") as f:
        f.write("left by a removal cut short\n")
    os.makedirs(os.path.join(INSTANCES, ids["c"]))
    with open(os.path.join(INSTANCES, ids["c"], "console.log"), "w") as f:
        f.write("a create interrupted before its first write\n")
    with open(os.path.join(INSTANCES, "notes"), "w") as f:
        f.write("not vgpud's\n")
    # INST-22: a record that does not load.
    os.makedirs(os.path.join(INSTANCES, ids["f"]))
    with open(os.path.join(INSTANCES, ids["f"], "instance.json"), "w") as f:
        f.write('{"version": 1, "id": "%s"' % ids["f"])
    run = os.path.join(work, "run", "instances")
    os.makedirs(os.path.join(run, ids["d"]), exist_ok=True)
    with open(os.path.join(run, ids["d"], "qmp.sock"), "w") as f:
        f.write("a stale socket file\n")
    os.makedirs(os.path.join(run, ids["e"]), exist_ok=True)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(os.path.join(run, ids["e"], "qmp.sock"))
    listener.listen(1)
    try:
        d, c = start(work, "c", fast, secret, sock)
        daemons.append(d)
        if not c:
            return
        ok(not os.path.exists(os.path.join(INSTANCES, ".deleted-" + ids["b"])),
           "INST-20: a leftover .deleted-* tree is deleted at start-up")
        ok(not os.path.exists(os.path.join(INSTANCES, ids["c"])),
           "INST-20: an instance directory without instance.json is deleted at start-up")
        ok(os.path.exists(os.path.join(INSTANCES, "notes")) and
           log_has(d, r"^<4>unexpected entry in instances directory name=notes$"),
           "INST-20: anything else is logged and left")
        ok(not os.path.exists(os.path.join(run, ids["d"])),
           "INST-20: the runtime directory of a vanished instance is removed")
        ok(os.path.exists(os.path.join(run, ids["e"], "qmp.sock")) and
           log_has(d, r"^<4>runtime directory of a removed instance is still listened on "
                      r"path=%s$" % re.escape(os.path.join(run, ids["e"]))),
           "INST-20, VMM-17: one a process listens in is logged and left")

        g = gpu_body(c)
        reason = g.get("placement_disabled_reason", "")
        prefix = "instance record %s/instances/%s unreadable: " % (
            os.path.join(MNT, "data"), ids["f"])
        ok(reason.startswith(prefix) and len(reason) > len(prefix),
           "INST-22: placement_disabled_reason names the unreadable record: " + prefix + "<err>",
           reason)
        eq(g["allocatable_slots"], 0, "API-5: allocatable 0 while a record is unreadable")
        eq(create(c, "u-gpu", PROFILE),
           (503, {"code": "placement_disabled",
                  "message": "insufficient GPU: vGPU placement is disabled: " + reason}),
           "INST-22, INST-11, API-21: a vGPU create is 503 placement_disabled")
        eq(create(c, "u-plain")[0], 201, "INST-22: a GPU-less create still works")
        eq([i["name"] for i in c.get("/instances").json()], ["u-plain"],
           "INST-22: the unreadable record is not listed")
        eq(delete_all(c), [], "the GPU-less instance deletes")
        stop(d, " (c)")
    finally:
        listener.close()

    shutil.rmtree(os.path.join(INSTANCES, ids["f"]))
    d, c = start(work, "d", fast, secret, sock)
    daemons.append(d)
    if not c:
        return
    ok("placement_disabled_reason" not in gpu_body(c),
       "INST-22: once the record is removed, the next start has placement enabled", gpu_body(c))
    st, b = create(c, "u-gpu2", PROFILE)
    eq(st, 201, "INST-22: a vGPU create works again")
    eq(delete_all(c), [], "it deletes")
    ok(claim_picture(c) is None, "no VF left configured", claim_picture(c))
    stop(d, " (d)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-restart-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        sock = os.path.join(work, "api.sock")
        slow = vmm_config(os.path.join(work, "slow.yaml"), work, term_grace="30s")
        fast = vmm_config(os.path.join(work, "fast.yaml"), work)
        run_group("operations", lambda: check_operations(work, slow, fast, secret, sock,
                                                         daemons))
        for d in daemons:
            d.stop(signal.SIGKILL)
        run_group("leftovers", lambda: check_leftovers(work, fast, secret, sock, daemons))
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
