#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-liveness-ambiguous.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# INST-21's "ambiguous" column: vgpud starts on records whose VMMs it cannot classify. Its
# proc_root is a fixture tree (GEN-1: every root is configurable) with the current boot id, no
# process directories and a /proc/net/unix that is not the kernel's table, so every recorded
# pid is missing (VMM-16) and the socket step cannot tell (VMM-17, VMM-18): ambiguous. Each
# record must land in INST-21's state with its claim kept, count in VMM-19's counter, and refuse
# every teardown (VMM-11). Runs under tests/sim/run-sim-test.sh like the other API tests.
import json
import os
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import vgpud_test as vt  # noqa: E402 (after the path)
from vgpud_instances import (  # noqa: E402
    INSTANCES, KERNEL, make_images, vmm_config)
from vgpud_test import (  # noqa: E402
    MNT, eq, error_of, exit_status, finish, log_count, metric, ok, parse_metrics, poll, run_group,
    start, stop, write_secret)

VF_BASE = MNT + "/sys/bus/pci/devices/"
# (state, VF of its claim or None)
RECORDS = {
    "creating000000000001": ("Creating", "0000:e3:00.4"),
    "running0000000000002": ("Running", "0000:e3:00.5"),
    "stopping000000000003": ("Stopping", "0000:e3:00.6"),
    "deleting000000000004": ("Deleting", "0000:e3:00.7"),
    "stopped0000000000005": ("Stopped", None),
}


def write_records(work):
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot_id = f.read().strip()
    for k, (iid, (state, vf)) in enumerate(sorted(RECORDS.items())):
        rec = {"version": 1, "id": iid, "name": "amb-%d" % k, "state": state,
               "created_at": "2026-09-02T20:08:0%dZ" % k,
               "boot": {"kernel": KERNEL}, "vcpus": 1, "memory_mb": 256,
               "gpu": {"profile": "NVIDIA L40S-2Q"},
               "hypervisor": {"pid": 4242 + k, "start_time": 1000 + k, "boot_id": boot_id,
                              "qmp_socket": "%s/run/instances/%s/qmp.sock" % (work, iid),
                              "agent_socket": "%s/run/instances/%s/agent.sock" % (work, iid)}}
        if vf:
            rec["gpu"].update({"framework": "vendor-vfio", "device_path": VF_BASE + vf,
                               "claimed_at": "2026-09-02T20:08:04.5974Z"})
        d = os.path.join(INSTANCES, iid)
        os.makedirs(d, mode=0o700)
        with open(os.path.join(d, "instance.json"), "w") as f:
            json.dump(rec, f)
    return boot_id


def fixture_proc(work, boot_id):
    proc = os.path.join(work, "proc")
    os.makedirs(os.path.join(proc, "sys/kernel/random"))
    os.makedirs(os.path.join(proc, "net"))
    with open(os.path.join(proc, "sys/kernel/random/boot_id"), "w") as f:
        f.write(boot_id + "\n")
    with open(os.path.join(proc, "net/unix"), "w") as f:
        f.write("this is not the kernel's socket table\n")
    return proc


def check(c, d):
    def get(iid):
        return c.get("/instances/" + iid).json()

    # INST-21's ambiguous column, row by row; VMM-19: every claim is kept.
    want = {"creating000000000001": "Failed", "running0000000000002": "Running",
            "stopping000000000003": "Failed", "deleting000000000004": "Deleting",
            "stopped0000000000005": "Stopped"}
    for iid, state in sorted(want.items()):
        s = get(iid)
        vf = RECORDS[iid][1]
        ok(s["state"] == state and
           (s["gpu"].get("device_path") == (VF_BASE + vf if vf else None)),
           "INST-21: ambiguous %s is %s%s" % (RECORDS[iid][0], state,
                                              ", claim kept" if vf else ""), s)
    eq(log_count(d, r"<4>VMM liveness is ambiguous instance_id=running0000000000002 .*"), 1,
       "INST-21, VMM-19: the ambiguous Running record logs one warning")
    # VMM-19: each ambiguous verdict that keeps a claim counts: the four at start-up, and four
    # more at every reconcile pass, which resolves them again (REC-4).
    def uncertain():
        return metric(parse_metrics(c.get("/metrics").body.decode()),
                      "vgpud_instances_vgpu_reconcile_liveness_uncertain_total")
    first = uncertain()
    ok(first >= 8 and first % 4 == 0,
       "VMM-19: the verdicts of start-up and the first pass are counted (%s)" % first)
    ok(poll(lambda: uncertain() >= first + 4, 20, 0.1),
       "VMM-19, REC-4: the next pass resolves the kept claims again and counts them")

    # VMM-11, VMM-19: ambiguous counts as alive for every teardown decision.
    gvfs = {v["address"]: v for g in c.get("/gpus").json()["gpus"] for v in g["vfs"]}
    ok(all(gvfs[vf]["state"] == "claimed" and gvfs[vf].get("instance_id") == iid
           for iid, (_, vf) in RECORDS.items() if vf),
       "API-6: the kept claims hold their VFs out of placement",
       {vf: gvfs[vf] for _, vf in RECORDS.values() if vf})
    e = error_of(c.request("POST", "/instances/creating000000000001/start"))
    eq(e, (409, {"code": "invalid_state", "message": "instance creating000000000001 VMM may "
                 "still be running; stop it first"}),
       "INST-17: start of a Failed instance whose VMM may be alive is 409")
    e = error_of(c.request("DELETE", "/instances/deleting000000000004"))
    ok(e[0] == 500 and get("deleting000000000004")["state"] == "Deleting" and
       get("deleting000000000004")["gpu"].get("device_path"),
       "INST-18: a delete whose VMM may be alive answers 500 and keeps Deleting with its claim",
       e)
    e = error_of(c.request("POST", "/instances/running0000000000002/stop"))
    s = get("running0000000000002")
    ok(e[0] == 500 and s["state"] == "Failed" and s["gpu"].get("device_path"),
       "INST-16: a stop that cannot prove the VMM gone answers 500 and leaves Failed with the "
       "claim", (e, s))
    e = error_of(c.request("DELETE", "/instances/stopped0000000000005"))
    ok(e[0] == 500 and get("stopped0000000000005")["state"] == "Deleting",
       "INST-18: a Stopped record whose VMM may be alive is not removed: 500, Deleting", e)


def main():
    work = tempfile.mkdtemp(prefix="vgpud-ambiguous-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        boot_id = write_records(work)
        proc = fixture_proc(work, boot_id)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work)
        with open(config, "a") as f:
            f.write('proc_root: "%s"\n' % proc)
        d, c = start(work, "ambiguous", config, secret, os.path.join(work, "api.sock"))
        daemons.append(d)
        if c:
            run_group("ambiguous", lambda: check(c, d))
            stop(d)
    finally:
        finish(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
