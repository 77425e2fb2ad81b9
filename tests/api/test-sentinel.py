#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-sentinel.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# The sentinel (SPEC §10) end to end against vgpu-sim with fake-qemu as the VMM: a wedged VF
# (SIM-14) gives the guests placed on it `failed`; the first assignment's report meets a failing
# store write (SENT-9) and is recorded below the threshold on a later tick (SENT-8), the second quarantines the VF with SENT-8's line and every field, and
# /resources, /gpus and the counters follow (MET-2); a daemon restart repeats no tally
# (SENT-11, HEALTH-11); a success from the triggering assignment rescinds (SENT-10); a VF an
# operator cleared while its failed assignment runs records that assignment again (SENT-12); a
# forged RmInitAdapter line in a guest's console.log moves nothing (SENT-11); a silent agent and
# a hung VMM are rpc_errors that do not slow the other checks (SENT-5, SENT-6). On an mdev host:
# mdev claims are targets only with gpu.sentinel_mdev, reported as their parent VF (SENT-2).
# Also: a failed discovery is list_error (SENT-3), the claim is read again before a report
# (SENT-7), and gpu.sentinel_concurrency bounds the checks open at once (SENT-5).
#
# Where fake-qemu's answer is fixed at its boot (SIM-15), the test stands in for the agent
# itself: it moves the VMM's agent.sock aside and listens at its path, so the sentinel meets a
# success, a CommandNotFound, a malformed reply, stale lines with other ids (SENT-4) and a full
# listen backlog from the same running instance. Runs under tests/sim/run-sim-test.sh.
import json
import os
import re
import signal
import socket
import sys
import tempfile
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_instances import (  # noqa: E402
    INSTANCES, PROFILE, create_running, delete, delete_all, finish_run, get, make_images, pid_of,
    post, runtime_dir, vf_of, vmm_config)
from vgpud_test import (  # noqa: E402
    eq, exit_status, gpu_body, metric, ok, parse_metrics, poll, run_group, sim_ctl, sim_state,
    start, stop, write_secret)

WEDGE_MESSAGE = "NVRM: GPU %s: RmInitAdapter failed! (0x22:0x65:884)"


def all_vfs():
    return [v["address"] for g in sim_state()["gpus"] for v in g["vfs"]]


def wedge_all(on):
    for vf in all_vfs():
        sim_ctl("%s %s" % ("wedge" if on else "unwedge", vf))


def counters(c):
    fams = parse_metrics(c.get("/metrics").body.decode())
    out = {r: metric(fams, "vgpud_instances_vgpu_sentinel_checks_total", result=r)
           for r in ("ok", "failed", "unknown", "rpc_error", "unsupported_agent", "list_error")}
    out["init_failures"] = metric(fams, "vgpud_instances_vgpu_sentinel_init_failures_total")
    out["quarantines"] = metric(fams, "vgpud_instances_vgpu_sentinel_quarantines_total")
    out["quarantined_vfs"] = metric(fams, "vgpud_instances_vgpu_quarantined_vfs")
    return out


def vf_entry(c, vf):
    for g in c.get("/gpus").json()["gpus"]:
        for v in g["vfs"]:
            if v["address"] == vf:
                return v
    return None


def health_record(c, vf):
    for r in c.get("/gpu/health").json()["records"]:
        if r["vf_address"] == vf:
            return r
    return None


def pinned_create(c, name, vf):
    """Creates name on vf: the other PF drained and the other VFs of vf's PF quarantined by an
    operator meanwhile, then all of that undone (HEALTH-25, HEALTH-26: records of their own)."""
    pf = [g for g in sim_state()["gpus"] if vf in [v["address"] for v in g["vfs"]]][0]
    others = [g["address"] for g in sim_state()["gpus"] if g["address"] != pf["address"]]
    aside = [v["address"] for v in pf["vfs"] if v["address"] != vf]
    try:
        for g in others:
            eq(c.request("POST", "/gpu/gpus/%s/drain" % g, {"reason": "pin"}).status, 200,
               "HEALTH-26: %s is drained to pin the create" % g)
        for a in aside:
            c.request("POST", "/gpu/vfs/%s/quarantine" % a, {"reason": "pin"})
        return create_running(c, name, PROFILE)
    finally:
        for a in aside:
            c.request("DELETE", "/gpu/vfs/%s/quarantine" % a)
        for g in others:
            c.request("DELETE", "/gpu/gpus/%s/drain" % g)


def log_lines(d, needle):
    return [l for l in d.log_text().splitlines() if needle in l]


def wait_ticks(c, n, timeout=30):
    """n more completed checks of any result: the sentinel has ticked past what was asked."""
    def total():
        k = counters(c)
        return sum(k[r] for r in ("ok", "failed", "unknown", "rpc_error", "unsupported_agent"))
    start_total = total()
    return poll(lambda: total() >= start_total + n, timeout, 0.1)


class FakeAgent:
    """Listens at an instance's agent.sock path while the VMM's own socket is moved aside, and
    answers each request line by mode: "ok", "command-not-found", "malformed", or "backlog"
    (never accepts, its one backlog slot already taken, so connect() fails with EAGAIN). Before
    its reply it sends a stale line with another id and the tail of an earlier reply (SENT-4)."""

    def __init__(self, work, iid, mode):
        self.path = os.path.join(runtime_dir(work, iid), "agent.sock")
        self.aside = self.path + ".vmm"
        self.mode = mode
        self.requests = []
        self.release = threading.Event()  # "hold": the reply waits for this
        os.rename(self.path, self.aside)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(self.path)
        self.filler = None
        if mode == "backlog":
            self.sock.listen(0)
            self.filler = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.filler.setblocking(False)
            try:
                self.filler.connect(self.path)
            except BlockingIOError:
                pass
            self.thread = None
            return
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _reply(self, rid):
        if self.mode == "ok":
            return {"return": {"state": "ok", "failure_message": ""}, "id": rid}
        if self.mode == "hold":
            return {"return": {"state": "failed", "failure_message": "held"}, "id": rid}
        if self.mode == "long-stale":
            return {"return": {"state": "unknown", "failure_message": ""}, "id": rid}
        if self.mode == "huge-message":
            return {"return": {"state": "failed", "failure_message": "x" * 4097}, "id": rid}
        if self.mode == "command-not-found":
            return {"error": {"class": "CommandNotFound",
                              "desc": 'command "guest-gpu-init-status" not found'}, "id": rid}
        return {"return": {"state": "fine"}, "id": rid}

    def _serve(self):
        while not self.done.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(2)
                buf = b""
                try:
                    while b"\n" not in buf:
                        chunk = conn.recv(4096)
                        if not chunk:
                            break
                        buf += chunk
                    line = buf.split(b"\n", 1)[0]
                    req = json.loads(line)
                    self.requests.append(req)
                    if self.mode == "hold":
                        self.release.wait(30)
                    stale = {"return": {"state": "failed", "failure_message": "stale"},
                             "id": req["id"] + 1000}
                    out = (b'failure_message":"x"},"id":3}\n' + json.dumps(stale).encode() +
                           b"\n")
                    if self.mode == "long-stale":
                        # A line over the sentinel's 256 KiB cap is skipped, not fatal.
                        out += b'{"junk":"' + b"y" * (300 * 1024) + b'"}\n'
                    out += json.dumps(self._reply(req["id"])).encode() + b"\n"
                    conn.sendall(out)
                    conn.recv(1)  # until the sentinel hangs up
                except (OSError, ValueError):
                    pass

    def close(self, restore=True):
        """Stops serving; restore puts the VMM's socket back (False: that VMM is gone, and
        its socket file with it, or another VMM listens at the path now)."""
        self.release.set()
        if self.thread:
            self.done.set()
            self.thread.join()
        if self.filler:
            self.filler.close()
        self.sock.close()
        if restore:
            os.unlink(self.path)
            os.rename(self.aside, self.path)
        elif os.path.exists(self.aside):
            os.unlink(self.aside)


def check_wedge(work, c, d, state):
    # SIM-14, SIM-15: every VF is wedged, so the guest placed anywhere fails its driver init.
    wedge_all(True)
    base = counters(c)
    # SENT-9: the store's next write fails once, so the first report errors; the agent still
    # answers failed, and a later tick (after HEALTH-21's repair) records it.
    try:
        sim_ctl("fault write data/gpu/vf-health.json.tmp ENOSPC count=1")
        a = create_running(c, "wedge-a", PROFILE)
        vf = vf_of(a)
        state["vf"] = vf
        line = poll(lambda: log_lines(d, "failed to record vGPU VF init failure"), 30, 0.1)
    finally:
        sim_ctl("clear-faults")
    ok(bool(line) and re.search(r"^<3>failed to record vGPU VF init failure vf=%s instance_id=%s "
                                r".*write VF health state: No space left on device" %
                                (re.escape(vf), a["id"]), line[0]) is not None,
       "SENT-9: a failure report that errors logs the error with vf, instance_id and error",
       line)
    line = poll(lambda: log_lines(d, "recorded vGPU VF init failure below quarantine threshold"),
                30, 0.1)
    ok(bool(line) and re.search(r"^<4>recorded vGPU VF init failure below quarantine threshold "
                                r"vf=%s instance_id=%s message=\"%s\" failures=1 threshold=2$" %
                                (re.escape(vf), a["id"], re.escape(WEDGE_MESSAGE % vf)),
                                line[0]) is not None,
       "SENT-8, SENT-9: the next tick records the first failed assignment below the "
       "threshold, logged as a warning with its fields", line)
    k = counters(c)
    eq(k["init_failures"] - base["init_failures"], 1, "SENT-8, MET-2: init_failures_total moves")
    ok(k["failed"] > base["failed"], "SENT-6, MET-2: checks_total{result=\"failed\"} counts")
    v = vf_entry(c, vf)
    ok(v and v["state"] == "claimed" and v["failures"] == 1,
       "HEALTH-12, API-6: the VF shows one failure and stays placeable", v)

    # HEALTH-11: ticks that see the same assignment fail again record nothing more.
    wait_ticks(c, 3)
    eq(counters(c)["init_failures"] - base["init_failures"], 1,
       "SENT-11, HEALTH-11: repeated checks of the same assignment add no tally")
    eq(len(log_lines(d, "recorded vGPU VF init failure")), 1,
       "SENT-8: unchanged logs nothing")

    # A second assignment on the same VF: the first instance goes, and the next one is pinned
    # there by taking every other VF out of placement for its create (HEALTH-25, HEALTH-26).
    eq(delete(c, a["id"])[0], 204, "the first instance is deleted")
    b = pinned_create(c, "wedge-b", vf)
    state["b"] = b
    if not eq(vf_of(b), vf, "the second instance lands on the same VF"):
        return
    line = poll(lambda: log_lines(d, "quarantined wedged vGPU VF"), 30, 0.1)
    ok(bool(line) and re.search(r"^<3>quarantined wedged vGPU VF vf=%s instance_id=%s "
                                r"message=\"%s\" failures=2 threshold=2$" %
                                (re.escape(vf), b["id"], re.escape(WEDGE_MESSAGE % vf)),
                                line[0]) is not None,
       "SENT-8: the second assignment quarantines the VF, logged as an error with vf, "
       "instance_id, message, failures and threshold", line)
    k = counters(c)
    eq((k["init_failures"] - base["init_failures"], k["quarantines"] - base["quarantines"]),
       (2, 1), "SENT-8, MET-2: init_failures_total and quarantines_total move")
    eq(k["quarantined_vfs"], 1, "MET-2: one quarantined VF in the store")
    v = vf_entry(c, vf)
    ok(v and v["state"] == "quarantined", "API-6: /gpus shows the VF quarantined", v)
    g = gpu_body(c)
    eq(g["quarantined_slots"], 1, "API-5: /resources counts it in quarantined_slots")
    rec = health_record(c, vf)
    ok(rec and rec.get("source") == "auto" and rec.get("reason") == WEDGE_MESSAGE % vf and
       [f["instance_id"] for f in rec["failures"]] == [a["id"], b["id"]],
       "HEALTH-12: the record is auto, with the guest's message and both assignments", rec)
    ok(b["id"] in json.dumps(c.get("/instances/" + b["id"]).json()) and
       c.get("/instances/" + b["id"]).json()["state"] == "Running",
       "HEALTH-24: the VM on the quarantined VF keeps running")


def check_restart(work, config, secret, sock, daemons, state):
    # SENT-11, HEALTH-11: a restarted daemon keeps no cursor; its checks see the same failed
    # assignment, which the store's dedup absorbs: no tally, no line.
    d0 = daemons[-1]
    vf = state["vf"]
    stop(d0, " (before the restart)")
    d, c = start(work, "sentinel-b", config, secret, sock)
    daemons.append(d)
    if not c:
        return None, None
    poll(lambda: counters(c)["failed"] >= 3, 30, 0.1)
    k = counters(c)
    ok(k["failed"] >= 3, "SENT-1: the restarted daemon's sentinel checks the adopted VM", k)
    eq((k["init_failures"], k["quarantines"]), (0, 0),
       "SENT-11, HEALTH-11: the restart repeats no tally")
    eq(log_lines(d, "quarantined wedged vGPU VF") + log_lines(d, "recorded vGPU VF init"), [],
       "SENT-8: ... and logs no report")
    eq(len(health_record(c, vf)["failures"]), 2, "HEALTH-11: the record still holds two failures")
    return d, c


def check_fake_agent_results(work, c, d, state):
    # SENT-4, SENT-6: stale lines (another id, an earlier reply's tail, one over the line cap)
    # are discarded; a CommandNotFound is unsupported_agent, unknown is unknown, and a bad
    # state or a failure_message over 4096 bytes (HEALTH-12) an rpc_error, none reported; a
    # full listen backlog is a connect failure at once (EAGAIN), not a check left in progress.
    b = state["b"]
    for mode, result in (("command-not-found", "unsupported_agent"), ("malformed", "rpc_error"),
                         ("long-stale", "unknown"), ("huge-message", "rpc_error")):
        base = counters(c)
        fa = FakeAgent(work, b["id"], mode)
        try:
            moved = poll(lambda: counters(c)[result] >= base[result] + 2, 20, 0.1)
        finally:
            fa.close()
        ok(bool(moved), "SENT-6: %s counts %s" % (mode, result), counters(c))
        ids = [r.get("id") for r in fa.requests]
        ok(len(ids) >= 2 and len(set(ids)) == len(ids) and all(
            r == {"execute": "guest-gpu-init-status", "id": r["id"]} for r in fa.requests),
           "SENT-4: each check sends guest-gpu-init-status with an id of its own", fa.requests)
        eq(counters(c)["init_failures"], base["init_failures"],
           "SENT-6: %s reports nothing to the store (the stale failed line is discarded)" % mode)

    base = counters(c)
    fa = FakeAgent(work, b["id"], "backlog")
    try:
        moved = poll(lambda: [l for l in log_lines(d, "vGPU sentinel check failed")
                              if b["id"] in l and "connect: Resource temporarily unavailable" in l],
                     20, 0.1)
    finally:
        fa.close()
    ok(bool(moved), "SENT-5: a full backlog is a connect failure (EAGAIN)", counters(c))
    ok(counters(c)["rpc_error"] > base["rpc_error"], "SENT-6: ... counted as rpc_error")


def check_rescind(work, c, d, state):
    # SENT-10, HEALTH-14: a success from the assignment that quarantined the VF rescinds it.
    vf, b = state["vf"], state["b"]
    recorded = counters(c)["init_failures"]
    fa = FakeAgent(work, b["id"], "ok")
    try:
        line = poll(lambda: log_lines(d, "rescinded vGPU VF quarantine after successful driver "
                                         "init from the triggering assignment"), 30, 0.1)
    finally:
        fa.close()
    ok(bool(line) and ("vf=%s" % vf) in line[0] and ("instance_id=%s" % b["id"]) in line[0],
       "SENT-10: the success from the triggering assignment rescinds, with its line", line)
    ok(health_record(c, vf) is None, "HEALTH-14: the record is deleted")
    v = vf_entry(c, vf)
    ok(v and v["state"] == "claimed" and v["failures"] == 0,
       "API-6: the VF is back, claimed by its VM", v)
    eq(gpu_body(c)["quarantined_slots"], 0, "API-5: no quarantined slot is left")
    ok(counters(c)["ok"] >= 1, "SENT-6, MET-2: checks_total{result=\"ok\"} counts")

    # The VMM's own agent answers failed again: one new tally for the same assignment. The
    # record is in the store before the loop counts the report, so wait for both.
    poll(lambda: health_record(c, vf) and counters(c)["init_failures"] == recorded + 1, 20, 0.1)
    rec = health_record(c, vf)
    ok(rec and len(rec["failures"]) == 1 and "quarantined_at" not in rec,
       "SENT-8: its failure recorded again is below the threshold", rec)

    # SENT-12: an operator clears the VF while its failed assignment still runs: the next tick
    # records that assignment once more, below the threshold.
    before = counters(c)["init_failures"]
    r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    eq(r.status, 200, "HEALTH-25: the operator clears the VF")
    ok(poll(lambda: counters(c)["init_failures"] == before + 1, 20, 0.1),
       "SENT-12: the cleared VF's running failed assignment records again, one tally",
       counters(c))
    rec = health_record(c, vf)
    ok(rec and [f["instance_id"] for f in rec["failures"]] == [b["id"]] and
       "quarantined_at" not in rec, "SENT-12: ... below the threshold", rec)


def check_console(work, c, d, state):
    # SENT-11: the serial console is never parsed. A healthy guest writes the failure line on
    # its console; nothing is tallied for its VF.
    wedge_all(False)
    h = create_running(c, "healthy-c", PROFILE)
    state["healthy"] = h
    vf = vf_of(h)
    before = counters(c)
    path = os.path.join(INSTANCES, h["id"], "console.log")
    with open(path, "a") as f:
        for _ in range(3):
            f.write("[    2.000000] " + WEDGE_MESSAGE % "0000:00:06.0" + "\n")
            f.write("<3>" + WEDGE_MESSAGE % vf + "\n")
    ok(poll(lambda: counters(c)["ok"] >= before["ok"] + 3, 20, 0.1),
       "SENT-6: the healthy guest's agent answers ok, tick after tick")
    k = counters(c)
    eq(k["init_failures"], before["init_failures"],
       "SENT-11: a forged RmInitAdapter line on the console moves no tally")
    v = vf_entry(c, vf)
    ok(v and v["failures"] == 0 and v["state"] == "claimed",
       "SENT-11: ... and the VF shows no failure", v)


def check_assignment_changed(work, c, d, state):
    # SENT-7: the claim is read again before reporting. The guest's reply is held while the
    # instance is stopped and started (a new claim): the failure is not reported.
    h = state["healthy"]
    before = counters(c)["init_failures"]
    fa = FakeAgent(work, h["id"], "hold")
    try:
        ok(poll(lambda: fa.requests, 20, 0.05), "SENT-4: the check is open, its reply held")
        eq(post(c, h["id"], "stop")[0], 200, "the instance is stopped meanwhile")
        st, b = post(c, h["id"], "start")
        ok(st == 200 and b.get("state") == "Running", "... and started again", (st, b))
    finally:
        fa.close(restore=False)
    line = poll(lambda: log_lines(d, "vGPU sentinel skipping init failure: assignment changed "
                                     "during poll"), 20, 0.1)
    ok(bool(line) and ("instance_id=%s" % h["id"]) in line[0],
       "SENT-7: a failure from the old assignment is skipped with its line", line)
    eq(counters(c)["init_failures"], before, "SENT-7: ... and nothing is recorded")

    # SENT-7: a deleted claim still reports to the assignment the check captured.
    vf = vf_of(get(c, h["id"]))
    fa = FakeAgent(work, h["id"], "hold")
    try:
        ok(poll(lambda: fa.requests, 20, 0.05), "SENT-4: a new check is open, its reply held")
        eq(delete(c, h["id"])[0], 204, "the instance is deleted meanwhile")
    finally:
        fa.close(restore=False)
    line = poll(lambda: log_lines(d, "recorded vGPU VF init failure below quarantine threshold "
                                     "vf=%s instance_id=%s" % (vf, h["id"])), 20, 0.1)
    ok(bool(line), "SENT-7: a deleted claim still reports to the captured assignment", line)
    eq(c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf).status, 200,
       "HEALTH-25: the test's record is cleared")


def check_list_error(work, c, d, state):
    # SENT-3: while discovery fails, each tick counts one list_error and checks nothing; once
    # discovery succeeds again, the checks resume.
    sim_ctl("fault read sys/bus/pci/devices EIO")
    try:
        ok(poll(lambda: "placement_disabled_reason" in gpu_body(c), 30, 0.1),
           "DISC-7: the failed discovery disables placement", gpu_body(c))
        base = counters(c)
        ok(poll(lambda: counters(c)["list_error"] >= base["list_error"] + 3, 20, 0.1),
           "SENT-3: each tick counts list_error", counters(c))
        k = counters(c)
        eq([k[r] - base[r] for r in ("ok", "failed", "unknown", "rpc_error", "unsupported_agent")],
           [0] * 5, "SENT-3: ... and the tick is skipped")
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: "placement_disabled_reason" not in gpu_body(c), 30, 0.1),
       "DISC-7: discovery succeeds again")
    base = counters(c)
    ok(poll(lambda: counters(c)["ok"] > base["ok"], 20, 0.1),
       "SENT-3: the checks resume", counters(c))
    eq(counters(c)["list_error"], base["list_error"], "SENT-3: no list_error once discovery works")


def check_unresponsive(work, c, d, state):
    # SENT-5, SENT-6: a silent agent and a VMM that is hung whole (stopped) are rpc_errors, each
    # at most once per timeout; the healthy guest's checks keep their pace meanwhile.
    sim_ctl("qemu silent-d silent-agent")
    s = create_running(c, "silent-d", PROFILE)
    e = create_running(c, "hung-e", PROFILE)
    state["silent"], state["hung"] = s, e
    pid = pid_of(e["id"])
    os.kill(pid, signal.SIGSTOP)
    try:
        base = counters(c)
        # gpu.sentinel_interval 1s, gpu.sentinel_timeout 8s: the ok checks tick every second.
        got = poll(lambda: counters(c)["ok"] >= base["ok"] + 6 and
                   counters(c)["rpc_error"] >= base["rpc_error"] + 2, 40, 0.1)
        k = counters(c)
        ok(bool(got), "SENT-6: the silent agent and the hung VMM give rpc_error", (base, k))
        timeouts = [l for l in log_lines(d, "vGPU sentinel check failed") if "timed out" in l]
        ok(any(s["id"] in l for l in timeouts) and any(e["id"] in l for l in timeouts),
           "SENT-4: both end at gpu.sentinel_timeout", timeouts[-4:])
        # SENT-5: one check per target open at a time, so each times out at most once per 8 s
        # while the healthy guest is checked about once per second.
        dt_rpc = k["rpc_error"] - base["rpc_error"]
        dt_ok = k["ok"] - base["ok"]
        ok(dt_rpc <= dt_ok, "SENT-5: a target whose check is open is skipped, the others not "
           "slowed (%d rpc_error, %d ok)" % (dt_rpc, dt_ok))
    finally:
        os.kill(pid, signal.SIGCONT)
    eq(health_record(c, vf_of(s)), None, "SENT-6: rpc_error reports nothing")


def rounds(d):
    """The sentinel's round lines so far."""
    return [l for l in d.log_text().splitlines() if l.startswith("<7>vGPU sentinel round done ")]


def check_mdev(work, config_off, config_on, secret, sock, daemons):
    # SENT-2: on an mdev host, mdev claims are targets only with gpu.sentinel_mdev.
    d, c = start(work, "mdev-off", config_off, secret, sock)
    daemons.append(d)
    if not c:
        return
    wedge_all(True)
    m = create_running(c, "wedge-m", "NVIDIA A40-2Q")
    vf = [v["address"] for g in c.get("/gpus").json()["gpus"] for v in g["vfs"]
          if v.get("instance_id") == m["id"]][0]
    seen = len(rounds(d))
    poll(lambda: len(rounds(d)) >= seen + 3, 20, 0.1)
    ok(len(rounds(d)) >= seen + 3 and all(" targets=0" in l for l in rounds(d)[seen:]),
       "SENT-2: without gpu.sentinel_mdev an mdev claim is no target", rounds(d)[-3:])
    k = counters(c)
    eq(sum(k[r] for r in ("ok", "failed", "unknown", "rpc_error", "unsupported_agent")), 0,
       "SENT-2: ... so nothing is checked")
    ok(health_record(c, vf) is None, "SENT-2: ... and nothing recorded")
    stop(d, " (sentinel_mdev off)")

    d, c = start(work, "mdev-on", config_on, secret, sock)
    daemons.append(d)
    if not c:
        return
    line = poll(lambda: log_lines(d, "recorded vGPU VF init failure below quarantine threshold"),
                30, 0.1)
    ok(bool(line) and ("vf=%s instance_id=%s " % (vf, m["id"])) in line[0],
       "SENT-2: with gpu.sentinel_mdev the mdev's parent VF is recorded", line)
    ok(any(" targets=1" in l for l in rounds(d)), "SENT-2: ... as the round's one target")
    eq(delete_all(c), [], "every instance is deleted")
    stop(d, " (sentinel_mdev on)")


def check_concurrency(work, secret, sock, daemons, state):
    # SENT-5: with gpu.sentinel_concurrency 1, two unresponsive targets are checked one after
    # the other: the round takes two timeouts (ceil(2 / 1) x 2 s), not one, plus processing.
    pid = pid_of(state["hung"]["id"])
    config = vmm_config(os.path.join(work, "vgpud-one.yaml"), work, reconcile="5s",
                        extra_gpu="  sentinel_interval: 20s\n"
                                  "  sentinel_timeout: 2s\n"
                                  "  sentinel_concurrency: 1\n")
    stop(daemons[-1], " (before the concurrency check)")
    os.kill(pid, signal.SIGSTOP)
    try:
        d, c = start(work, "sentinel-one", config, secret, sock)
        daemons.append(d)
        if not c:
            return None, None
        # The first round starts at readiness; the next one is 20 s away.
        line = poll(lambda: rounds(d), 30, 0.1)
        timeouts = [l for l in log_lines(d, "vGPU sentinel check failed") if "timed out" in l]
        m = re.search(r" duration=(\d+(?:\.\d+)?)s targets=(\d+)$", line[0]) if line else None
        took = float(m.group(1)) if m else None
        ok(took is not None and 4.0 <= took <= 5.5 and int(m.group(2)) >= 2,
           "SENT-5: at concurrency 1 a round with two unresponsive targets takes two timeouts",
           line)
        eq(sorted(state[k]["id"] in l for k in ("silent", "hung") for l in timeouts).count(True),
           2, "SENT-4: each of them timed out once in that round")
    finally:
        os.kill(pid, signal.SIGCONT)
    return d, c


def main():
    work = tempfile.mkdtemp(prefix="vgpud-sentinel-")
    daemons = []
    state = {}
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s",
                            extra_gpu="  placement_policy: pack\n"
                                      "  sentinel_interval: 1s\n"
                                      "  sentinel_timeout: 8s\n"
                                      "  breaker:\n    enabled: false\n")
        sock = os.path.join(work, "api.sock")
        if sim_state()["gpus"][0]["model"] == "A40-mdev":
            config_on = vmm_config(os.path.join(work, "vgpud-mdev.yaml"), work, reconcile="5s",
                                   extra_gpu="  sentinel_interval: 1s\n"
                                             "  sentinel_mdev: true\n")
            config_off = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s",
                                    extra_gpu="  sentinel_interval: 1s\n")
            run_group("mdev", lambda: check_mdev(work, config_off, config_on, secret, sock,
                                                 daemons))
            return exit_status()
        d, c = start(work, "sentinel-a", config, secret, sock)
        daemons.append(d)
        if not c:
            return exit_status()
        run_group("wedge", lambda: check_wedge(work, c, d, state))
        if "b" in state:
            d, c = check_restart(work, config, secret, sock, daemons, state)
            if c:
                run_group("fake-agent", lambda: check_fake_agent_results(work, c, d, state))
                run_group("rescind", lambda: check_rescind(work, c, d, state))
        if c:
            run_group("console", lambda: check_console(work, c, d, state))
            run_group("list-error", lambda: check_list_error(work, c, d, state))
            run_group("unresponsive", lambda: check_unresponsive(work, c, d, state))
            run_group("assignment", lambda: check_assignment_changed(work, c, d, state))
        if c and "hung" in state:
            d, c = check_concurrency(work, secret, sock, daemons, state)
        if c:
            eq(delete_all(c), [], "every instance is deleted")
            stop(d)
    finally:
        wedge_all(False)
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
