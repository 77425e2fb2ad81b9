#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-reconcile.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# The reconcile pass's repair stages against vgpu-sim with fake-qemu as the VMM. On SIM-20's
# vendor-VFIO host: a dirty VF no claim owns is reset (REC-6), one held open is left alone and
# logged once (REC-6), a failed discovery skips that stage while the others run (REC-2), a claim
# whose VMM died while vgpud was down is released by the first pass (REC-4), and each pass logs
# REC-11's line; the stage counters are exported (MET-2). On an mdev host: REC-8's sweep of
# orphaned mdevs, with each of its conditions. Runs under tests/sim/run-sim-test.sh.
import os
import re
import signal
import sys
import tempfile
import uuid

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_instances import (  # noqa: E402
    KERNEL, MNT, PROFILE, create_running, current_type, delete, get, make_images, pid_of, record, vf_of,
    vmm_config)
from vgpud_test import (  # noqa: E402
    SYS, alive, configure, configure_held, eq, exit_status, finish, gpu_body, metric, ok,
    parse_metrics, poll, run_group, sim_ctl, sim_state, start, stop, write_secret)

FREE_VF = "0000:e3:01.0"  # a VF of the mixed-size L40S that nothing claims
TYPE_2Q = 1148


def passes(d):
    """REC-11's lines so far."""
    return [l for l in d.log_text().splitlines()
            if l.startswith("<7>reconcile pass done ")]


def next_pass(d, timeout=20):
    """Waits for one more complete reconcile pass (gpu.reconcile_interval is 2s here)."""
    seen = len(passes(d))
    return poll(lambda: len(passes(d)) > seen and passes(d)[-1], timeout, 0.05)


def vf_state(c, vf):
    return [v for g in c.get("/gpus").json()["gpus"] for v in g["vfs"]
            if v["address"] == vf][0]["state"]


def check_reset(c, d):
    # REC-6: a VF configured behind vgpud's back (a crash after configure, a hand write) is
    # dirty; the next pass writes 0.
    configure(FREE_VF, TYPE_2Q)
    # The pass that finds it resets it within milliseconds; held back 1.5 s, the reset leaves
    # the dirty state in /gpus long enough for a poll to see it.
    sim_ctl("fault write sys/bus/pci/devices/%s/nvidia/current_vgpu_type delay:1500 count=1"
            % FREE_VF)
    ok(poll(lambda: vf_state(c, FREE_VF) == "dirty", 20, 0.05),
       "API-6: a configured VF without a claim is dirty")
    line = poll(lambda: current_type(FREE_VF) == "0" and next_pass(d), 30, 0.05)
    ok(current_type(FREE_VF) == "0", "REC-6: the pass resets the dirty VF")
    ok(poll(lambda: vf_state(c, FREE_VF) == "free", 10, 0.05),
       "REC-6, DISC-20: the VF is free again in /gpus")
    ok(any(re.search(r" reset=[1-9]", l) for l in passes(d)),
       "REC-11: the pass line counts the reset", passes(d)[-3:])
    ok(bool(line) and re.fullmatch(r"<7>reconcile pass done duration=\S+ released=\d+ "
                                   r"reset=\d+ removed=\d+ failed=\d+ scan=\S+", line) is not None,
       "REC-11: one debug line per pass with duration and per-stage counts", line)

    # REC-6: a dirty VF held open by a process without a claim is left alone, logged once.
    node = configure_held(FREE_VF, TYPE_2Q)
    try:
        next_pass(d)
        next_pass(d)
        eq(current_type(FREE_VF), str(TYPE_2Q), "REC-6: a VF held open is not reset")
        eq(len([l for l in d.log_text().splitlines()
                if "dirty VF held open without a claim" in l and FREE_VF in l]), 1,
           "REC-6: ... and logged once, not on every pass")
    finally:
        node.close()
    ok(poll(lambda: current_type(FREE_VF) == "0", 30, 0.1),
       "REC-6: once closed, a later pass resets it")
    fams = parse_metrics(c.get("/metrics").body.decode())
    eq(metric(fams, "vgpud_instances_vgpu_reconcile_failures_total", stage="reset_unclaimed_vfs"),
       0, "REC-7: a VF left because it is held open is no stage failure")


def check_failed_discovery(c, d):
    # REC-2: while discovery fails, the GPU stage is skipped (a dirty VF stays as it is), and
    # the instance stages and REC-10 still run (a leftover .deleted-* tree goes).
    sim_ctl("fault read sys/bus/pci/devices EIO")
    try:
        ok(poll(lambda: "placement_disabled_reason" in gpu_body(c), 20, 0.1),
           "DISC-7: the failed discovery disables placement", gpu_body(c))
        configure(FREE_VF, TYPE_2Q)
        left = os.path.join(MNT, "data/instances", ".deleted-" + "d" * 20)
        os.makedirs(left)
        next_pass(d)
        next_pass(d)
        eq(current_type(FREE_VF), str(TYPE_2Q),
           "REC-2: with discovery failing, reset_unclaimed_vfs is skipped")
        ok(not os.path.exists(left), "REC-2, REC-10: ... while REC-10's housekeeping still runs")
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: current_type(FREE_VF) == "0", 30, 0.1),
       "REC-2: once discovery succeeds again, the GPU stage resets the VF")


def mdev_group(vf):
    """The IOMMU group of the mdev on vf, from the simulator's state."""
    for g in sim_state()["gpus"]:
        for v in g["vfs"]:
            if v["address"] == vf and v["mdev"]:
                return v["mdev"]["iommu_group"]
    return None


def mdev_exists(u):
    return os.path.exists(os.path.join(SYS, "bus/mdev/devices", u))


def make_mdev(vf):
    """An mdev created behind vgpud's back, as a crash between create and record would leave."""
    u = str(uuid.uuid4())
    with open(os.path.join(SYS, "class/mdev_bus", vf, "mdev_supported_types/nvidia-901/create"),
              "w") as f:
        f.write(u)
    return u


def devices_failures(c):
    fams = parse_metrics(c.get("/metrics").body.decode())
    return metric(fams, "vgpud_instances_vgpu_reconcile_failures_total", stage="reconcile_devices")


def check_mdev_sweep(c, d):
    vfs = [v["address"] for v in sim_state()["gpus"][0]["vfs"]]
    # REC-8: an unnamed mdev younger than 5 minutes may be a create in flight: it stays ...
    u = make_mdev(vfs[1])
    next_pass(d)
    next_pass(d)
    ok(mdev_exists(u), "REC-8: an orphaned mdev under 5 minutes old is left")
    # ... and once its directory is older, the next pass removes it.
    sim_ctl("age %s 301" % u)
    ok(poll(lambda: not mdev_exists(u), 30, 0.1), "REC-8, SIM-6: once over 5 minutes old, it is "
       "removed")
    ok(poll(lambda: any(re.search(r" removed=[1-9]", l) for l in passes(d)), 20, 0.1),
       "REC-11: the pass line counts the removal", passes(d)[-3:])
    ok(any("removed orphaned mdev" in l and u in l for l in d.log_text().splitlines()),
       "REC-8: the removal is logged with the mdev's UUID")

    # REC-8: one whose /dev/vfio/<group> is held open is left, logged once; closed, it goes.
    u = make_mdev(vfs[2])
    sim_ctl("age %s 3600" % u)
    node = open(os.path.join(MNT, "dev/vfio", str(mdev_group(vfs[2]))), "rb")
    try:
        next_pass(d)
        next_pass(d)
        ok(mdev_exists(u), "REC-8: an old orphan whose group node is open is left")
        eq(len([l for l in d.log_text().splitlines()
                if "orphaned mdev held open; left" in l]), 1,
           "REC-8: ... and logged once, not on every pass")
    finally:
        node.close()
    ok(poll(lambda: not mdev_exists(u), 30, 0.1), "REC-8: once closed, a later pass removes it")
    eq(devices_failures(c), 0, "REC-8: an mdev left because it is held open is no stage failure")

    # REC-8: an IOMMU group that cannot be resolved keeps the mdev and counts a stage failure.
    u = make_mdev(vfs[3])
    sim_ctl("age %s 3600" % u)
    sim_ctl("fault read sys/*%s/iommu_group EIO" % u)
    try:
        want = "check orphaned mdev %s: read IOMMU group: Input/output error" % u
        ok(poll(lambda: devices_failures(c) >= 1, 30, 0.1),
           "REC-8, MET-2: an unreadable IOMMU group counts a reconcile_devices failure")
        ok(mdev_exists(u), "REC-8: ... and the mdev is left")
        ok(any("reconcile stage failed" in l and want in l for l in d.log_text().splitlines()),
           "REC-8: the failure is logged with its text", want)
    finally:
        sim_ctl("clear-faults")
    ok(poll(lambda: not mdev_exists(u), 30, 0.1),
       "REC-8: the fault cleared, the next pass removes it")


def check_mdev_named(c, d):
    # REC-8 (decision): an mdev a record names stays however old it is, while its VM runs.
    failures = devices_failures(c)
    inst = create_running(c, "mdev-named", "NVIDIA A40-2Q")
    u = inst["gpu"]["mdev_uuid"]
    sim_ctl("age %s 3600" % u)
    next_pass(d)
    next_pass(d)
    ok(mdev_exists(u), "REC-8: an old mdev named by a Running record is left")
    eq(get(c, inst["id"])["state"], "Running", "REC-8: ... and its VM runs on")
    eq(delete(c, inst["id"])[0], 204, "INST-17: the instance is deleted")
    ok(not mdev_exists(u), "INST-17, DEV-17: the delete removes the mdev itself")
    eq(devices_failures(c), failures, "REC-8: no reconcile_devices failure along the way")


def check_console(c, d):
    # VMM-8: a console over vmm.console_max_bytes (65536 here) starts again with the marker at
    # the next pass; QEMU appends after it.
    inst = create_running(c, "chatty-01")
    path = os.path.join(MNT, "data/instances", inst["id"], "console.log")
    with open(path, "a") as f:
        f.write("x" * 70000 + "\n")
    mark = "[vgpud: console log truncated]\n"

    def truncated():
        with open(path) as f:
            return f.read().startswith(mark)
    ok(poll(truncated, 20, 0.1), "VMM-8: the pass truncates the console and appends the marker")
    ok(os.path.getsize(path) < 65536, "VMM-8: the console is small again")
    c.request("DELETE", "/instances/" + inst["id"])


def check_list(c, d):
    # REC-3, INST-22: a record that appears unreadable stops the pass and disables placement
    # (it may hold a claim); once it is gone, the next pass enables placement again.
    bad = os.path.join(MNT, "data/instances", "b" * 20)
    os.makedirs(bad)
    with open(os.path.join(bad, "instance.json"), "w") as f:
        f.write('{"version": 1, "id": ')
    want = "instance record %s/data/instances/%s unreadable: " % (MNT, "b" * 20)
    g = poll(lambda: (lambda g: g.get("placement_disabled_reason", "").startswith(want) and g)(
        gpu_body(c)), 20, 0.1)
    ok(bool(g), "REC-3, INST-22: an unreadable record disables placement", gpu_body(c))
    fams = parse_metrics(c.get("/metrics").body.decode())
    ok(metric(fams, "vgpud_instances_vgpu_reconcile_failures_total", stage="list_instances") >= 1,
       "REC-3, MET-2: the list_instances stage failure is counted")
    r = c.request("POST", "/instances", {"name": "refused-02", "vcpus": 1, "memory_mb": 256,
                                          "boot": {"kernel": KERNEL}, "gpu": {"profile": PROFILE}})
    eq(r.status, 503, "INST-22, INST-11: a vGPU create is refused meanwhile")
    os.unlink(os.path.join(bad, "instance.json"))
    os.rmdir(bad)
    ok(poll(lambda: "placement_disabled_reason" not in gpu_body(c), 20, 0.1),
       "INST-22: placement comes back once the record is removed")

    # REC-10, INST-20: a .deleted-* tree left behind is deleted by a pass.
    left = os.path.join(MNT, "data/instances", ".deleted-" + "c" * 20)
    os.makedirs(os.path.join(left, "sub"))
    with open(os.path.join(left, "sub", "console.log"), "w") as f:
        f.write("old\n")
    ok(poll(lambda: not os.path.exists(left), 20, 0.1),
       "REC-10: a leftover .deleted-* tree is deleted by the next pass")


def check_stale(work, config, secret, sock, daemons):
    # REC-4: the daemon dies, then the VMM; the next start finds the Running record with its
    # VMM gone (INST-21: Stopped) and the first pass releases the claim before readiness.
    d, c = start(work, "stale-a", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    inst = create_running(c, "stale-01", PROFILE)
    if not inst:
        return
    vf = vf_of(inst)
    pid = pid_of(inst["id"])
    d.stop(signal.SIGKILL)
    os.kill(pid, signal.SIGKILL)
    ok(poll(lambda: not alive(pid), 10, 0.02), "the VMM is dead before vgpud starts again")
    d2, c2 = start(work, "stale-b", config, secret, sock)
    daemons.append(d2)
    if not c2:
        return
    rec = record(inst["id"])
    ok(rec and rec["state"] == "Stopped" and "device_path" not in rec.get("gpu", {}),
       "REC-4: the stale claim is released and the record written, Stopped", rec)
    ok(poll(lambda: current_type(vf) == "0", 10), "REC-4: the VF is released")
    # Logged when the loop takes the write's completion, a moment after the file is in place.
    ok(poll(lambda: any("released stale vGPU assignment" in l and inst["id"] in l
                        for l in d2.log_text().splitlines()), 10), "REC-5: the release is logged")
    fams = parse_metrics(c2.get("/metrics").body.decode())
    eq(metric(fams, "vgpud_instances_vgpu_stale_release_failures_total"), 0,
       "REC-5, MET-2: no stale release failed")
    eq(gpu_body(c2)["used_slots"], 0, "API-5: nothing is left in use")
    c2.request("DELETE", "/instances/" + inst["id"])
    stop(d2, " (after the stale release)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-reconcile-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s",
                            extra_vmm="  console_max_bytes: 65536\n")
        sock = os.path.join(work, "api.sock")
        d, c = start(work, "main", config, secret, sock)
        daemons.append(d)
        mdev = bool(c) and c.get("/gpus").json()["gpus"][0]["framework"] == "mdev"
        if c and mdev:
            run_group("mdev-sweep", lambda: check_mdev_sweep(c, d))
            run_group("mdev-named", lambda: check_mdev_named(c, d))
            stop(d)
        elif c:
            run_group("reset", lambda: check_reset(c, d))
            run_group("failed-discovery", lambda: check_failed_discovery(c, d))
            run_group("console", lambda: check_console(c, d))
            run_group("list", lambda: check_list(c, d))
            stop(d)
        if not mdev:
            run_group("stale", lambda: check_stale(work, config, secret, sock, daemons))
    finally:
        finish(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
