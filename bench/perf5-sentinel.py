#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# PERF-5: the sentinel's tick at scale. 1,000 targets, 100 of which accept the agent connection
# and never answer, gpu.sentinel_concurrency 128, on a 32-GPU simulated host (1,024 VFs).
#
#   tests/sim/run-sim-test.sh BUILD/sim/vgpu-sim bench/host-perf5.yaml \
#           python3 bench/perf5-sentinel.py BUILD_DIR
#
# Runs inside run-sim-test.sh's private PID namespace (SIM-21). Set-up, once:
#  - record k (0..999) claims VF k of the host's 1,024 (sorted by address), configured in the
#    simulator as NVIDIA L40S-1Q through its sysfs (equal-size cards take 32, one per VF), so
#    that every claim names a VF that holds the vGPU the record says;
#  - one harness process (bench/perf5-agents.py) listens on every record's
#    <runtime_dir>/instances/<id>/agent.sock (INST-1): on 900 it answers guest-gpu-init-status
#    with state ok, on the 100 records with k % 10 == 0 it accepts and never answers. Ids are
#    random, so the silent ones fall anywhere in vgpud's list;
#  - every record is Running, with the claim (framework, device_path, claimed_at) and the
#    hypervisor fields of INST-2: pid and start_time (field 22 of its stat) of the harness, the
#    boot id, and the QMP and agent socket paths. Nothing listens on the QMP paths: a Running
#    record whose stored pid is alive and runs qemu_binary (set to the harness's interpreter) is
#    adopted on the pid alone (VMM-16, INST-21), and nothing
#    in a sentinel tick talks QMP.
#
# Then one vgpud (log_level debug, for the sentinel's round line; no NVML library, as in
# bench/reconcile-pass.py: the fake one re-reads the 420 KB state.json on every call, and 32 GPUs
# run its start-up refresh past gpu.nvml_timeout) with gpu.sentinel_concurrency 128,
# gpu.sentinel_timeout 5s (the default, set explicitly), gpu.sentinel_interval 8s and
# gpu.reconcile_interval 1h. The interval is not the default 5 s because a round with an
# unresponsive target lasts at least one timeout: at interval = timeout the next tick fires
# while the silent checks are still open, closes the round as unfinished and skips them
# (SENT-5), so no tick would check all 1,000 (PERF5_INTERVAL=5 shows it). The hour keeps
# periodic reconcile passes out of the measured ticks. The benchmark checks that start-up
# adopted all 1,000 records as Running, then reads each "vGPU sentinel round done
# duration=... targets=N" line as it appears, and at once the vgpud main thread's utime+stime
# (/proc/<pid>/task/<pid>/stat), the harness's, and /metrics'
# vgpud_instances_vgpu_sentinel_checks_total{result}. The first round is the warm-up; the next
# PERF5_TICKS (default 5) are measured:
#  - tick duration: the median of the round lines' durations, against the upstream model
#    ceil(100 / 64) x 5 s = 10 s (upstream's concurrency 64); target <= timeout + 0.5 s;
#  - CPU per tick: the main thread's utime+stime over the measured rounds / their number,
#    read on both sides of each /metrics scrape (the loop serves the API too) so that the
#    scrapes are left out; the idle time between rounds stays in. Target <= 50 ms. Its
#    schedstat runtime (ns, where utime+stime count 10 ms ticks) is logged beside it, and a
#    scrape's own cost is an info row;
#  - every measured round must say targets=1000 with nothing unfinished, and add exactly 900
#    ok and 100 rpc_error checks and nothing else (SENT-5, SENT-6); otherwise the rows FAIL;
#  - from the harness's own record of each connection (CLOCK_MONOTONIC, shared): per round,
#    the first connect to the last ok reply and to the last silent connect (info rows, where
#    a round's time goes: the last silent connect plus one timeout is the round).
# Prints bench/run rows on stdout, details on stderr; BENCH_LOG_DIR=DIR keeps vgpud's log.
import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vgpud_bench import (  # noqa: E402 (after the path)
    MNT, Client, Vgpud, duration_seconds, log, median, mint, poll, row, run_main, write_config,
    write_secret)
from vgpud_test import configure, metric, parse_metrics, read_creatable  # noqa: E402

RECORDS = 1000
SILENT_EVERY = 10  # record k is silent when k % 10 == 0: 100 of them
PROFILE = "NVIDIA L40S-1Q"
VFS_WANTED = 1024
CONCURRENCY = 128
TIMEOUT_S = 5.0  # gpu.sentinel_timeout, SPEC's default
INTERVAL_S = int(os.environ.get("PERF5_INTERVAL", "8"))  # gpu.sentinel_interval, seconds
UPSTREAM_S = -(-(RECORDS // SILENT_EVERY) // 64) * 5.0  # ceil(100 / 64) x 5 s
TARGET_S = TIMEOUT_S + 0.5
CPU_TARGET_MS = 50.0
RESULTS = ("ok", "failed", "unknown", "rpc_error", "unsupported_agent", "list_error")
# Bodies whose first request is a render over every claim and VF (instance_manager_find_claim()).
RENDERED = ("/resources", "/gpus")
ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
ROUND_RE = re.compile(r"<7>vGPU sentinel round done duration=(\S+) targets=(\d+)"
                      r"(?: unfinished=(\d+))?$")
CLK_TCK = os.sysconf("SC_CLK_TCK")

SYS_DEVICES = os.path.join(MNT, "sys", "bus", "pci", "devices")
INSTANCES = os.path.join(MNT, "data", "instances")
IMAGES = os.path.join(MNT, "data", "images")
AGENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "perf5-agents.py")


def tag(msg):
    log("perf5", msg)


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_seconds(pid, tid=None):
    """utime + stime of one thread (tid) or of the whole process, in seconds."""
    path = "/proc/%d/task/%d/stat" % (pid, tid) if tid else "/proc/%d/stat" % pid
    with open(path) as f:
        text = f.read()
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # fields 14 and 15 of stat(5)


def run_seconds(pid, tid):
    """The thread's time on a CPU in ns resolution (schedstat's first field), in seconds: a
    cross-check of utime+stime, whose unit is a clock tick (10 ms)."""
    with open("/proc/%d/task/%d/schedstat" % (pid, tid)) as f:
        return int(f.read().split()[0]) / 1e9


def start_time_of(pid):
    """Field 22 of /proc/<pid>/stat (VMM-16)."""
    with open("/proc/%d/stat" % pid) as f:
        text = f.read()
    return int(text[text.rindex(")") + 2:].split()[19])


def record_id(k):
    raw = os.urandom(16)
    return "".join(ID_ALPHABET[b % len(ID_ALPHABET)] for b in raw) + "%04d" % k


def host_vfs():
    vfs = sorted(d for d in os.listdir(SYS_DEVICES)
                 if os.path.islink(os.path.join(SYS_DEVICES, d, "physfn")))
    if len(vfs) != VFS_WANTED:
        raise RuntimeError("the host has %d VFs, not %d (bench/host-perf5.yaml?)" %
                           (len(vfs), VFS_WANTED))
    return vfs


def silent(k):
    return k % SILENT_EVERY == 0


class Harness:
    """bench/perf5-agents.py: every target's VMM and agent, in one process."""

    def __init__(self, spec):
        self.proc = subprocess.Popen([sys.executable, AGENTS, spec], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE)
        self.pid = self.proc.pid
        line = self.read_line(60)
        if line != "ready %d" % RECORDS:
            raise RuntimeError("the harness did not come up: %r (exit status %s)" %
                               (line, self.proc.poll()))

    def read_line(self, timeout):
        deadline = time.monotonic() + timeout
        buf = b""
        fd = self.proc.stdout.fileno()
        while not buf.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise RuntimeError("the harness said nothing within %.0f s" % timeout)
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            buf += chunk
        return buf.decode().strip()

    def dump(self):
        self.proc.stdin.write(b"dump\n")
        self.proc.stdin.flush()
        return json.loads(self.read_line(60))

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()  # EOF ends it
            except OSError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


def set_up(work, kernel):
    """Configures the VFs, writes the harness's spec and starts it, writes the records.
    Returns (harness, ids)."""
    vfs = host_vfs()
    types = [t for t, name in read_creatable(vfs[0]) if name == PROFILE]
    if not types:
        raise RuntimeError("%s does not list %s" % (vfs[0], PROFILE))
    type_id = types[0]
    t0 = time.monotonic()
    for k in range(RECORDS):
        configure(vfs[k], type_id)
    tag("configured %d VFs as %s (type %d) in %.1f s" %
        (RECORDS, PROFILE, type_id, time.monotonic() - t0))

    os.makedirs(INSTANCES, mode=0o700, exist_ok=True)
    if os.listdir(INSTANCES):
        raise RuntimeError("%s is not empty at the start" % INSTANCES)
    ids = [record_id(k) for k in range(RECORDS)]
    spec = os.path.join(work, "agents.spec")
    with open(spec, "w") as f:
        for k, rid in enumerate(ids):
            rt = os.path.join(work, "run", "instances", rid)
            os.makedirs(rt, mode=0o700)
            f.write("%s %s\n" % ("silent" if silent(k) else "ok", os.path.join(rt, "agent.sock")))
    harness = Harness(spec)
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot_id = f.read().strip()
        start_time = start_time_of(harness.pid)
        t0 = time.monotonic()
        for k, rid in enumerate(ids):
            rt = os.path.join(work, "run", "instances", rid)
            stamp = "2026-09-02T20:%02d:%02d" % (k // 60 % 60, k % 60)
            rec = {"version": 1, "id": rid, "name": "perf5-%04d" % k, "state": "Running",
                   "created_at": stamp + "Z",
                   "boot": {"kernel": kernel, "cmdline": "console=ttyS0"},
                   "vcpus": 1, "memory_mb": 256,
                   "gpu": {"profile": PROFILE, "framework": "vendor-vfio",
                           "device_path": os.path.join(SYS_DEVICES, vfs[k]),
                           "claimed_at": stamp + ".5Z"},
                   "hypervisor": {"pid": harness.pid, "start_time": start_time,
                                  "boot_id": boot_id,
                                  "qmp_socket": os.path.join(rt, "qmp.sock"),
                                  "agent_socket": os.path.join(rt, "agent.sock")}}
            d = os.path.join(INSTANCES, rid)
            os.mkdir(d, 0o700)
            fd = os.open(os.path.join(d, "instance.json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                         0o600)
            try:
                os.write(fd, json.dumps(rec, separators=(",", ":")).encode())
            finally:
                os.close(fd)
        tag("harness pid %d listens on %d agent sockets; wrote %d records in %.1f s" %
            (harness.pid, RECORDS, RECORDS, time.monotonic() - t0))
    except BaseException:
        harness.stop()
        raise
    return harness, ids


def checks(c):
    fams = parse_metrics(c.get("/metrics").body.decode())
    return {r: metric(fams, "vgpud_instances_vgpu_sentinel_checks_total", result=r) or 0
            for r in RESULTS}


def rounds_in(d):
    """The round lines so far: (stamp s since spawn, duration s, targets, unfinished)."""
    out = []
    for line in d.log_text().splitlines():
        ms, _, text = line.strip().partition(" ")
        m = ROUND_RE.search(text)
        if m:
            out.append((float(ms) / 1000, duration_seconds(m.group(1)), int(m.group(2)),
                        int(m.group(3) or 0)))
    return out


def check_adopted(c, ids):
    """INST-21: every record Running with its claim, and the sentinel will find it watched."""
    listed = c.get("/instances").json()
    states = {}
    for i in listed:
        states[i["state"]] = states.get(i["state"], 0) + 1
    running = {i["id"] for i in listed if i["state"] == "Running"}
    if len(listed) != RECORDS or running != set(ids):
        raise RuntimeError("after start-up: %d instances listed, by state %s; want %d Running" %
                           (len(listed), states, RECORDS))


def per_round_harness(conns, ends):
    """From the harness's connections, per measured round (the connections accepted after the
    previous round's end and up to this one's): (ok, silent, first connect to last ok reply,
    first connect to last silent connect), seconds."""
    out = []
    for prev, end in zip(ends, ends[1:]):
        mine = [c for c in conns if prev < c[1] <= end]
        oks = [c for c in mine if c[0] == "ok"]
        quiet = [c for c in mine if c[0] == "silent"]
        if not oks or not quiet or any(c[2] is None for c in oks):
            out.append((len(oks), len(quiet), None, None))
            continue
        first = min(c[1] for c in mine)
        out.append((len(oks), len(quiet), max(c[2] for c in oks) - first,
                    max(c[1] for c in quiet) - first))
    return out


def measure(vgpud, config, work, secret, ids, harness, ticks):
    d = Vgpud(vgpud, config, work, "perf5")
    try:
        ready_s = d.wait_ready(timeout=300)
        c = Client(os.path.join(work, "api.sock"), mint(secret))
        check_adopted(c, ids)
        tag("READY=1 after %.0f ms; %d records adopted as Running; load %s" %
            (ready_s * 1000, RECORDS, loadavg()))
        # The first request of each renders its body (nothing asked for it before): the loop's
        # CPU for a whole render over 1,000 claims and 1,024 VFs, each VF asking which claim
        # holds it (instance_manager_find_claim()).
        renders = {}
        for path in RENDERED:
            before = run_seconds(d.pid, d.pid)
            if c.get(path).status != 200:
                raise RuntimeError("GET %s failed" % path)
            renders[path] = run_seconds(d.pid, d.pid) - before

        samples = []  # per round: (round line, loop cpu s, harness cpu s, checks, monotonic)
        wanted = ticks + 1
        while len(samples) < wanted:
            seen = len(samples)

            def next_round():
                if d.proc.poll() is not None:
                    raise RuntimeError("vgpud exited (status %s)" % d.proc.returncode)
                got = rounds_in(d)
                return got[seen] if len(got) > seen else None
            line = poll(next_round, INTERVAL_S + TIMEOUT_S + 120, 0.02)
            if not line:
                raise RuntimeError("no sentinel round line %d within %.0f s; log tail:\n%s" %
                                   (seen + 1, INTERVAL_S + TIMEOUT_S + 120,
                                    d.log_text()[-2000:]))
            now = time.monotonic()
            # The loop's CPU on both sides of the /metrics scrape, which the loop serves too:
            # the scrape is the benchmark's, not the tick's, so its share is taken out.
            before = (cpu_seconds(d.pid, d.pid), run_seconds(d.pid, d.pid))
            harness_cpu = cpu_seconds(harness.pid)
            counts = checks(c)
            after = (cpu_seconds(d.pid, d.pid), run_seconds(d.pid, d.pid))
            samples.append((line, before, after, harness_cpu, counts, now))
            tag("round %d: duration %.3f s, targets %d, unfinished %d; load %s" %
                (seen, line[1], line[2], line[3], loadavg()))
        return samples, harness.dump(), renders
    finally:
        d.stop()
        keep = os.environ.get("BENCH_LOG_DIR")
        if keep:
            os.makedirs(keep, exist_ok=True)
            shutil.copy(d.log_path, os.path.join(keep, "perf5-vgpud.log"))


def main():
    build = os.path.abspath(sys.argv[1])
    ticks = int(os.environ.get("PERF5_TICKS", "5"))
    vgpud = os.path.join(build, "src/daemon/vgpud")
    # VMM-16 adopts a stored pid only when the process runs qemu_binary: here the harness,
    # which is the Python interpreter. Nothing in a sentinel tick starts a QEMU.
    harness_exe = os.path.realpath(sys.executable)

    work = tempfile.mkdtemp(prefix="vgpud-perf5.")
    harness = None
    load_start = loadavg()
    try:
        os.makedirs(IMAGES, exist_ok=True)
        kernel = os.path.join(IMAGES, "vmlinuz")
        with open(kernel, "w") as f:
            f.write("a kernel for fake-qemu\n")
        secret = write_secret(work)
        config = write_config(work, "", log_level="debug", extra="""qemu_binary: "%s"
qemu_accel: tcg
image_dirs:
  - "%s"
gpu:
  reconcile_interval: 1h
  sentinel_interval: %ds
  sentinel_timeout: %ds
  sentinel_concurrency: %d
""" % (harness_exe, IMAGES, INTERVAL_S, TIMEOUT_S, CONCURRENCY))
        harness, ids = set_up(work, kernel)
        samples, dump, renders = measure(vgpud, config, work, secret, ids, harness, ticks)
    finally:
        if harness:
            harness.stop()
        if os.path.isdir(INSTANCES):
            for name in os.listdir(INSTANCES):
                shutil.rmtree(os.path.join(INSTANCES, name), ignore_errors=True)
        shutil.rmtree(IMAGES, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    load_end = loadavg()

    measured = samples[1:]
    durations = [s[0][1] for s in measured]
    # Every measured round: all 1,000 listed and ended, 900 ok and 100 rpc_error added.
    want = {r: 0 for r in RESULTS}
    want["ok"] = RECORDS - RECORDS // SILENT_EVERY
    want["rpc_error"] = RECORDS // SILENT_EVERY
    complete = 0
    for prev, cur in zip(samples, samples[1:]):
        added = {r: cur[4][r] - prev[4][r] for r in RESULTS}
        good = cur[0][2] == RECORDS and cur[0][3] == 0 and added == want
        complete += good
        if not good:
            tag("round of %.3f s incomplete: targets %d, unfinished %d, checks added %s" %
                (cur[0][1], cur[0][2], cur[0][3], added))
    all_checked = complete == len(measured)

    # From after the warm-up round's scrape to before the last round's, less the scrapes
    # between: utime+stime (the row) and schedstat's runtime (the log's cross-check).
    loop = [0.0, 0.0]
    scrape = [[], []]
    for which in (0, 1):
        loop[which] = samples[-1][1][which] - samples[0][2][which]
        for s in samples[1:-1]:
            loop[which] -= s[2][which] - s[1][which]
        scrape[which] = [s[2][which] - s[1][which] for s in samples]
    loop_ms = loop[0] / len(measured) * 1000
    harness_ms = (samples[-1][3] - samples[0][3]) / len(measured) * 1000
    tag("loop CPU per tick, /metrics scrapes excluded: %.1f ms (utime+stime), %.1f ms "
        "(schedstat); one scrape: %s ms (schedstat)" %
        (loop_ms, loop[1] / len(measured) * 1000,
         ", ".join("%.1f" % (x * 1000) for x in scrape[1])))
    conns = [tuple(x) for x in dump["ended"] + dump["open"]]
    per = per_round_harness(conns, [s[5] for s in samples])
    for k, p in enumerate(per, 1):
        tag("round %d, harness side: %d ok and %d silent connections; last ok reply %s, last "
            "silent connect %s after the first connect" %
            (k, p[0], p[1], "%.0f ms" % (p[2] * 1000) if p[2] is not None else "-",
             "%.0f ms" % (p[3] * 1000) if p[3] is not None else "-"))
    tag("tick durations %s s; loop CPU %.1f ms per tick (scrapes excluded); load %s at the "
        "start, %s at the end" %
        (", ".join("%.3f" % x for x in durations), loop_ms, load_start, load_end))

    dur = median(durations)
    what = "1,000 targets (100 silent), concurrency 128, timeout 5 s"
    ok_dur = dur <= TARGET_S and all_checked
    row("PERF-5", "sentinel tick, %s: duration (s) vs upstream ceil(100/64) x 5 s" % what,
        "%.3f" % dur, "%.2f" % UPSTREAM_S, "%.2f" % (dur / UPSTREAM_S), "<= %.1f s" % TARGET_S,
        "pass" if ok_dur else "FAIL")
    row("PERF-5", "  ticks that checked all 1,000 (900 ok + 100 rpc_error, SENT-5)",
        "%d/%d" % (complete, len(measured)), "-", "-", "all", "pass" if all_checked else "FAIL")
    row("PERF-5", "  vgpud main thread CPU per tick (ms, utime+stime, /metrics scrapes excluded)",
        "%.1f" % loop_ms, "-",
        "-", "<= %.0f ms" % CPU_TARGET_MS,
        "pass" if loop_ms <= CPU_TARGET_MS and all_checked else "FAIL")
    last_ok = [p[2] for p in per if p[2] is not None]
    last_silent = [p[3] for p in per if p[3] is not None]
    if last_ok and last_silent:
        row("PERF-5", "  harness: first connect to last ok reply / to last silent connect (ms)",
            "%.0f / %.0f" % (median(last_ok) * 1000, median(last_silent) * 1000))
    row("PERF-5", "  vgpud main thread CPU of one GET /metrics, 1,000 claims (ms, schedstat)",
        "%.1f" % (median(scrape[1]) * 1000))
    for path in RENDERED:
        row("PERF-5", "  vgpud main thread CPU of the first GET %s, 1,000 claims (ms, schedstat)"
            % path, "%.1f" % (renders[path] * 1000))
    row("PERF-5", "  harness CPU per tick (ms, all 1,000 agents in one process)",
        "%.1f" % harness_ms)
    row("PERF-5", "  load average (1/5/15 min) at the start / the end", "%s / %s" %
        (load_start.replace(" ", "/"), load_end.replace(" ", "/")))
    return 0


if __name__ == "__main__":
    run_main(main, "perf5")
