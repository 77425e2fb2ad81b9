#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# PERF-6: vgpud's footprint. Idle RSS (VmRSS from /proc/<pid>/status, 10 s after READY=1) and
# the time from spawn to READY=1, on SIM-20's 64-VF host, without instance records and with
# 1,000 of them.
#
#   tests/sim/run-sim-test.sh BUILD/sim/vgpu-sim bench/host-sim20.yaml \
#           python3 bench/perf6-footprint.py BUILD_DIR
#
# Runs inside run-sim-test.sh's private PID namespace (SIM-21). Each repetition spawns a fresh
# vgpud (log_level info, the fake NVML library) with NOTIFY_SOCKET pointing at a datagram
# socket of ours, takes the time from spawn to READY=1 as the start-up figure, checks that
# /readyz then answers 200, reads VmRSS 10 s after READY=1 (the 10 s are the measurement's
# definition, not a wait for anything), and stops vgpud with SIGTERM. With records, it checks
# after the RSS reading (so that the listing's allocations do not count) that GET /instances
# lists all 1,000 and that placement is not disabled (INST-22 would say a record did not load).
#
# The records are written before the daemon starts, under <data_dir>/instances/<id>/
# instance.json as INST-1 lays them out (directory 0700, file 0600), in INST-2's form: state
# Stopped, no claim and no hypervisor fields, every other one with gpu.profile. Stopped records
# without claims are what a host keeps for VMs that are powered off; records with claims would
# need a configured VF each, and SIM-20's host has 64 VFs, not 1,000.
#
# One warm-up, then PERF6_REPS (default 5) repetitions per variant; each row is the median.
# PERF6_NVML_LIBRARY replaces BUILD/sim/libnvidia-ml.so.1 (another build of the fake library, to
# compare its share of start-up in the same conditions). Prints bench/run rows on stdout,
# details on stderr.
import json
import os
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vgpud_bench import (  # noqa: E402 (after the path)
    MNT, Client, Vgpud, log, median, mint, row, run_main, status_fields, write_config,
    write_secret)

IDLE_AFTER_READY = 10.0  # seconds, by PERF-6's definition
RECORDS = 1000
PROFILE = "NVIDIA L40S-2Q"
ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
# (RSS MiB, start-up ms) targets without and with records.
TARGETS = {False: (8, 200), True: (40, 2000)}


def tag(msg):
    log("perf6", msg)


def record_id(k):
    """A well-formed INST-3 id: 20 characters of [a-z0-9], distinct per k, from urandom."""
    raw = os.urandom(20)
    head = "".join(ID_ALPHABET[b % len(ID_ALPHABET)] for b in raw[:16])
    return head + "%04d" % k


def write_records(instances, kernel):
    """RECORDS Stopped records, crash-safe layout aside (nothing runs yet). Returns the ids."""
    os.makedirs(instances, mode=0o700, exist_ok=True)
    ids = []
    for k in range(RECORDS):
        rid = record_id(k)
        rec = {"version": 1, "id": rid, "name": "perf6-%04d" % k, "state": "Stopped",
               "created_at": "2026-09-02T20:%02d:%02dZ" % (k // 60 % 60, k % 60),
               "boot": {"kernel": kernel, "cmdline": "console=ttyS0 perf6=%d" % k},
               "vcpus": 1 + k % 8, "memory_mb": 256 * (1 + k % 16)}
        if k % 2 == 0:
            rec["gpu"] = {"profile": PROFILE}
        d = os.path.join(instances, rid)
        os.mkdir(d, 0o700)
        fd = os.open(os.path.join(d, "instance.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                     0o600)
        os.write(fd, json.dumps(rec, separators=(",", ":")).encode())
        os.close(fd)
        ids.append(rid)
    return ids


def one_run(vgpud, config, work, secret, label, n_records):
    """Returns (seconds from spawn to READY=1, VmRSS in KiB 10 s later)."""
    d = Vgpud(vgpud, config, work, label)
    try:
        start_s = d.wait_ready()
        ready_at = d.spawned + start_s
        c = Client(os.path.join(work, "api.sock"), mint(secret))
        r = c.get("/readyz")
        if r.status != 200:
            raise RuntimeError("%s: READY=1 was sent but /readyz answers %r" % (label, r))

        time.sleep(max(0.0, ready_at + IDLE_AFTER_READY - time.monotonic()))
        if d.proc.poll() is not None:
            raise RuntimeError("%s: vgpud exited while idle" % label)
        f = status_fields(d.pid, ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads"))
        tag("%s: READY=1 after %.1f ms; VmRSS %d KiB (anon %d, file %d, shmem %d), "
            "VmHWM %d KiB, %d threads" %
            (label, start_s * 1000, f["VmRSS"], f["RssAnon"], f["RssFile"], f["RssShmem"],
             f["VmHWM"], f["Threads"]))

        # After the reading: the listing allocates.
        listed = c.get("/instances").json()
        if len(listed) != n_records:
            raise RuntimeError("%s: GET /instances lists %d instances, not %d" %
                               (label, len(listed), n_records))
        disabled = c.get("/resources").json()["gpu"].get("placement_disabled_reason")
        if disabled:
            raise RuntimeError("%s: placement is disabled: %s" % (label, disabled))
        return start_s, f["VmRSS"]
    finally:
        d.stop()


def variant(vgpud, config, work, secret, reps, n_records):
    name = "%d records" % n_records if n_records else "no records"
    one_run(vgpud, config, work, secret, "%s warm-up" % name, n_records)
    starts, rsss = [], []
    for i in range(1, reps + 1):
        s, rss = one_run(vgpud, config, work, secret, "%s rep %d" % (name, i), n_records)
        starts.append(s)
        rsss.append(rss)
    return median(starts) * 1000, median(rsss) / 1024


def main():
    build = os.path.abspath(sys.argv[1])
    reps = int(os.environ.get("PERF6_REPS", "5"))
    vgpud = os.path.join(build, "src/daemon/vgpud")
    nvml = os.environ.get("PERF6_NVML_LIBRARY") or os.path.join(build, "sim/libnvidia-ml.so.1")

    work = tempfile.mkdtemp(prefix="vgpud-perf6.")
    instances = os.path.join(MNT, "data", "instances")
    images = os.path.join(MNT, "data", "images")
    results = {}
    try:
        secret = write_secret(work)
        config = write_config(work, nvml)
        os.makedirs(images, exist_ok=True)
        kernel = os.path.join(images, "vmlinuz")
        with open(kernel, "w") as f:
            f.write("a kernel that no record boots here\n")
        if os.path.isdir(instances) and os.listdir(instances):
            raise RuntimeError("%s is not empty at the start" % instances)

        results[False] = variant(vgpud, config, work, secret, reps, 0)
        t0 = time.monotonic()
        write_records(instances, kernel)
        tag("wrote %d records in %.1f s" % (RECORDS, time.monotonic() - t0))
        results[True] = variant(vgpud, config, work, secret, reps, RECORDS)
    finally:
        if os.path.isdir(instances):
            for name in os.listdir(instances):
                shutil.rmtree(os.path.join(instances, name), ignore_errors=True)
        shutil.rmtree(images, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)

    for with_records in (False, True):
        start_ms, rss_mib = results[with_records]
        rss_target, start_target = TARGETS[with_records]
        what = "1,000 Stopped records" if with_records else "no records"
        row("PERF-6", "idle RSS 10 s after READY=1, %s (MiB)" % what, "%.1f" % rss_mib,
            target="<= %d MiB" % rss_target, result="pass" if rss_mib <= rss_target else "FAIL")
        row("PERF-6", "start-up to READY=1, 64-VF host, %s (ms)" % what, "%.0f" % start_ms,
            target="<= %s" % ("%d ms" % start_target if start_target < 1000 else
                              "%d s" % (start_target // 1000)),
            result="pass" if start_ms <= start_target else "FAIL")
    return 0


if __name__ == "__main__":
    run_main(main, "perf6")
