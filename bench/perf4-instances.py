#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# PERF-4 through the API: 20 simultaneous `POST /instances` of `NVIDIA L40S-2Q` on a mixed-size
# 2xL40S simulated host with a fake NVML latency of 20 ms per call, fake-qemu as the VMM.
#
#   tests/sim/run-sim-test.sh BUILD/sim/vgpu-sim bench/host-perf4.yaml \
#           python3 bench/perf4-instances.py BUILD_DIR
#
# Each repetition is a fresh vgpud (log_level info). After READY=1 the script sets the NVML
# latency, releases 20 client threads from a barrier, each sending one create over its own
# Unix-socket connection, and times each from the request to its answer (201 with the instance
# Running: INST-12's whole path, claim, configure, spawn, QMP readiness). The burst's nvml_ms
# figures are read from the log lines PLACE-22 writes for its 20 instances. Then the latency
# goes back to 0, every instance is deleted, the script waits until /resources and the
# simulator both show an empty host, and stops vgpud. One warm-up, then PERF4_REPS (default 5);
# each row is the median over the repetitions (p50 and p99 are per repetition first).
# PERF4_LOG_LEVEL sets vgpud's log level, PERF4_KEEP_LOGS=DIR keeps its logs (with the time
# of each line, see vgpud_bench.Vgpud). Prints bench/run rows on stdout, details on stderr.
import os
import re
import shutil
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vgpud_bench import (  # noqa: E402 (after the path)
    MNT, Client, Vgpud, log, median, mint, percentile, poll, row, run_main, sim_ctl, sim_state,
    write_config, write_secret)

CREATES = 20
PROFILE = "NVIDIA L40S-2Q"
NVML_LATENCY_MS = 20
UPSTREAM_MS = 400
TARGET_MS = 100
PLACED = re.compile(r'placed vGPU claim.*\binstance_id=(\w+).*\bnvml_ms=(\d+)')


def tag(msg):
    log("perf4", msg)


def empty_host(c):
    """Nothing claimed, by vgpud's count and by the simulator's model."""
    r = c.get("/resources")
    if r.status != 200 or r.json()["gpu"]["used_slots"] != 0:
        return False
    return all(v["type"] == 0 for g in sim_state()["gpus"] for v in g["vfs"])


def burst(c, d, kernel, label):
    """One burst of creates; returns (largest nvml_ms, [latency s per create])."""
    log_offset = len(d.log_text())
    results = [None] * CREATES
    barrier = threading.Barrier(CREATES)

    def create(k):
        body = {"name": "perf4-%02d" % k, "vcpus": 1, "memory_mb": 256,
                "boot": {"kernel": kernel, "cmdline": "console=ttyS0"},
                "gpu": {"profile": PROFILE}}
        barrier.wait()
        t0 = time.monotonic()
        try:
            r = c.request("POST", "/instances", body)
        except OSError as e:
            r = e
        results[k] = (r, time.monotonic() - t0)

    threads = [threading.Thread(target=create, args=(k,)) for k in range(CREATES)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0

    created = set()
    failed = []
    for k, (r, _) in enumerate(results):
        if getattr(r, "status", None) == 201 and r.json().get("state") == "Running":
            created.add(r.json()["id"])
        else:
            failed.append("create %d: %r" % (k, r))
    nvml = {}
    for line in d.log_text()[log_offset:].splitlines():
        m = PLACED.search(line)
        if m and m.group(1) in created:
            nvml[m.group(1)] = int(m.group(2))
    if failed:
        raise RuntimeError("%s: %s" % (label, "; ".join(failed[:5])))
    if len(nvml) != CREATES:
        raise RuntimeError("%s: %d of %d creates logged 'placed vGPU claim'" %
                           (label, len(nvml), CREATES))

    lat = [t for _, t in results]
    tag("%s: wall %.0f ms; nvml_ms sorted %s; create ms sorted %s" %
        (label, wall * 1000, sorted(nvml.values()), [round(t * 1000) for t in sorted(lat)]))
    return max(nvml.values()), lat


def delete_all(c):
    """Deletes every instance and waits, bounded, for an empty host."""
    failed = []
    for i in c.get("/instances").json():
        r = c.request("DELETE", "/instances/" + i["id"])
        if r.status != 204:
            failed.append("delete %s: %r" % (i["id"], r))
    if not poll(lambda: empty_host(c), 60, 0.05):
        failed.append("the host is not empty 60 s after the deletes")
    if failed:
        raise RuntimeError("; ".join(failed[:5]))


def repetition(vgpud, config, work, secret, kernel, label):
    """A fresh daemon, one burst, every instance deleted, the daemon stopped. The latency is
    set after READY=1 and lifted before the deletes: each release asks for an NVML cache
    refresh (NVML-14), and at 20 ms per call those would still be running when the next
    repetition starts."""
    d = Vgpud(vgpud, config, work, label)
    try:
        d.wait_ready()
        c = Client(os.path.join(work, "api.sock"), mint(secret))
        if not poll(lambda: c.get("/readyz").status == 200, 30, 0.05):
            raise RuntimeError("%s: /readyz is not 200 after READY=1" % label)
        if not empty_host(c):
            raise RuntimeError("%s: the host is not empty at the start" % label)
        sim_ctl("nvml latency %d" % NVML_LATENCY_MS)
        try:
            return burst(c, d, kernel, label)
        finally:
            sim_ctl("nvml latency 0")
            delete_all(c)
    finally:
        d.stop()
        keep = os.environ.get("PERF4_KEEP_LOGS")
        if keep:
            shutil.copy(d.log_path, keep)


def main():
    build = os.path.abspath(sys.argv[1])
    reps = int(os.environ.get("PERF4_REPS", "5"))
    vgpud = os.path.join(build, "src/daemon/vgpud")
    nvml = os.path.join(build, "sim/libnvidia-ml.so.1")
    fake_qemu = os.path.join(build, "sim/fake-qemu")

    work = tempfile.mkdtemp(prefix="vgpud-perf4.")
    images = os.path.join(MNT, "data", "images")
    try:
        os.makedirs(images, exist_ok=True)
        kernel = os.path.join(images, "vmlinuz")
        with open(kernel, "w") as f:
            f.write("a kernel for fake-qemu\n")
        secret = write_secret(work)
        config = write_config(work, nvml, extra='qemu_binary: "%s"\nqemu_accel: tcg\n' %
                              fake_qemu, log_level=os.environ.get("PERF4_LOG_LEVEL", "info"))
        repetition(vgpud, config, work, secret, kernel, "warm-up")
        worst, p50, p99 = [], [], []
        for i in range(1, reps + 1):
            w, lat = repetition(vgpud, config, work, secret, kernel, "rep %d" % i)
            worst.append(w)
            p50.append(percentile(lat, 50) * 1000)
            p99.append(percentile(lat, 99) * 1000)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(images, ignore_errors=True)

    m = median(worst)
    what = "20 concurrent POST /instances L40S-2Q, NVML latency 20 ms"
    row("PERF-4", what + ": largest nvml_ms vs upstream", "%d" % m, "%d" % UPSTREAM_MS,
        "%.2f" % (m / UPSTREAM_MS), "<= %d ms" % TARGET_MS, "pass" if m <= TARGET_MS else "FAIL")
    row("PERF-4", what + ": create-to-201 p50 (ms, fake-qemu)", "%.0f" % median(p50))
    row("PERF-4", what + ": create-to-201 p99 (ms, fake-qemu)", "%.0f" % median(p99))
    return 0


if __name__ == "__main__":
    run_main(main, "perf4")
