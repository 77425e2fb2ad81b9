#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# PERF-8: image import. A 2 GiB qcow2 holding 1 GiB of data goes through POST /images to
# `ready` (DISK-2, DISK-3: qemu-img info, then qemu-img convert with the source's sha256 read
# alongside, fsync, rename, image.json), against `qemu-img convert -f qcow2 -O qcow2` of the same
# file alone (the limit), side by side in this run; and /healthz's p99 while vgpud imports.
#
#   tests/sim/run-sim-test.sh BUILD/sim/vgpu-sim bench/host-sim20.yaml \
#           python3 bench/perf8-import.py BUILD_DIR
#
# vgpud's data_dir and the baseline's target are one directory of this run's work tree, on one
# filesystem, so both write to the same disk; the source sits beside them (image_dirs). Each
# repetition runs the baseline, then the import (their order alternates, so that neither always
# finds the other's pages in the cache), and deletes what it made. While vgpud imports, a
# thread asks /healthz every 10 ms; the p99 is over every repetition's requests. One warm-up,
# then PERF8_REPS (default 3); throughputs are the medians, in MB/s of the source's virtual
# size. Prints bench/run rows on stdout, details on stderr.
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vgpud_bench import (  # noqa: E402 (after the path)
    Client, Vgpud, log, median, mint, percentile, poll, row, run_main, write_config,
    write_secret)

QEMU_IMG = "/usr/bin/qemu-img"
VIRTUAL = 2 << 30
DATA = 1 << 30


def tag(msg):
    log("perf8", msg)


def make_source(path):
    """2 GiB virtual, 1 GiB of data in 64 MiB runs with holes between, not all one byte."""
    subprocess.run([QEMU_IMG, "create", "-q", "-f", "qcow2", path, str(VIRTUAL)], check=True)
    cmds = []
    for k in range(DATA // (64 << 20)):
        cmds += ["-c", "write -P 0x%02x %d 64M" % (0x11 + k, k * (128 << 20))]
    subprocess.run(["qemu-io", "-f", "qcow2"] + cmds + [path], check=True,
                   stdout=subprocess.DEVNULL)


def baseline(source, target):
    """qemu-img convert alone (the limit), and the same plus the fsync DISK-3 asks of vgpud (an
    info figure: where vgpud's time goes)."""
    t0 = time.monotonic()
    subprocess.run([QEMU_IMG, "convert", "-p", "-f", "qcow2", "-O", "qcow2", source, target],
                   check=True, stdout=subprocess.DEVNULL)
    seconds = time.monotonic() - t0
    fd = os.open(target, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    synced = time.monotonic() - t0
    os.unlink(target)
    return seconds, synced


class Prober:
    """GET /healthz every 10 ms until stopped; keeps each latency in ms."""

    def __init__(self, c):
        self.c, self.latencies, self.done = c, [], threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while not self.done.is_set():
            t0 = time.monotonic()
            r = self.c.get("/healthz")
            if r.status != 200:
                raise RuntimeError("/healthz answered %r" % r)
            self.latencies.append((time.monotonic() - t0) * 1000)
            self.done.wait(0.01)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.latencies


def import_once(c, source, name):
    prober = Prober(c)
    t0 = time.monotonic()
    try:
        r = c.request("POST", "/images", {"name": name, "source": source})
        if r.status != 202:
            raise RuntimeError("POST /images answered %r" % r)
        if not poll(lambda: c.get("/images/" + name).json().get("state") != "importing", 600,
                    0.01):
            raise RuntimeError("the import did not end in 600 s")
        seconds = time.monotonic() - t0
    finally:
        latencies = prober.stop()
    image = c.get("/images/" + name).json()
    if image.get("state") != "ready":
        raise RuntimeError("the import ended %r" % image)
    r = c.request("DELETE", "/images/" + name)
    if r.status != 204:
        raise RuntimeError("DELETE /images/%s answered %r" % (name, r))
    return seconds, latencies


def main():
    build = os.path.abspath(sys.argv[1])
    reps = int(os.environ.get("PERF8_REPS", "3"))
    vgpud = os.path.join(build, "src/daemon/vgpud")
    nvml = os.path.join(build, "sim/libnvidia-ml.so.1")
    # The build directory's filesystem, as bench/run's scratch: a real disk, not tmpfs.
    work = tempfile.mkdtemp(prefix="vgpud-perf8.", dir=os.path.join(build, "bench-tmp")
                            if os.path.isdir(os.path.join(build, "bench-tmp")) else None)
    d = None
    try:
        imports = os.path.join(work, "import")
        data = os.path.join(work, "data")
        os.mkdir(imports, 0o755)
        os.mkdir(data, 0o700)
        source = os.path.join(imports, "source.qcow2")
        make_source(source)
        secret = write_secret(work)
        config = write_config(work, nvml, data_dir=data,
                              extra='image_dirs: ["%s"]\n' % imports)
        d = Vgpud(vgpud, config, work, "perf8")
        d.wait_ready()
        c = Client(os.path.join(work, "api.sock"), mint(secret))
        if not poll(lambda: c.get("/readyz").status == 200, 30, 0.05):
            raise RuntimeError("/readyz is not 200 after READY=1")

        # /healthz with nothing to import, for comparison: the machine's own noise.
        idle = Prober(c)
        time.sleep(2)  # a measurement window, not a wait for anything
        idle_latencies = idle.stop()
        target = os.path.join(data, "baseline.qcow2")
        ours, theirs, synced, latencies = [], [], [], []
        for i in range(reps + 1):
            if i % 2:
                s, lat = import_once(c, source, "perf8-%d" % i)
                b, bs = baseline(source, target)
            else:
                b, bs = baseline(source, target)
                s, lat = import_once(c, source, "perf8-%d" % i)
            tag("%s: vgpud %.2f s, qemu-img convert %.2f s (%.2f s with fsync), /healthz p99 "
                "%.2f ms over %d" % ("warm-up" if i == 0 else "rep %d" % i, s, b, bs,
                                     percentile(lat, 99), len(lat)))
            if i == 0:
                continue
            ours.append(VIRTUAL / s / 1e6)
            theirs.append(VIRTUAL / b / 1e6)
            synced.append(VIRTUAL / bs / 1e6)
            latencies += lat
    finally:
        if d:
            d.stop()
            if os.environ.get("PERF8_KEEP_LOG"):
                shutil.copy(d.log_path, os.environ["PERF8_KEEP_LOG"])
        shutil.rmtree(work, ignore_errors=True)

    o, t = median(ours), median(theirs)
    ratio = o / t
    row("PERF-8", "import 2 GiB qcow2 (1 GiB data) to ready vs qemu-img convert alone (MB/s)",
        "%.0f" % o, "%.0f" % t, "%.2f" % ratio, ">= 0.90", "pass" if ratio >= 0.9 else "FAIL")
    row("PERF-8", "the same vs qemu-img convert then fsync of its output (MB/s)", "%.0f" % o,
        "%.0f" % median(synced), "%.2f" % (o / median(synced)), "-", "info")
    p99 = percentile(latencies, 99)
    row("PERF-8", "GET /healthz p99 during the import vs with nothing to import (ms, %d "
        "requests)" % len(latencies),
        "%.2f" % p99, "%.2f" % percentile(idle_latencies, 99), "-", "<= 5",
        "pass" if p99 <= 5 else "FAIL")
    return 0


if __name__ == "__main__":
    run_main(main, "perf8")
