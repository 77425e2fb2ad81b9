#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The reconcile pass at scale (issue 12's benchmark, information rows): one pass of vgpud on a
# 32-GPU simulated host (1,024 VFs) with 1,000 instance records holding claims, half of them
# naming a live VMM and half a dead one; REC-11's duration and the fd scan's share of it.
#
#   tests/sim/run-sim-test.sh BUILD/sim/vgpu-sim bench/host-rec32.yaml \
#           python3 bench/reconcile-pass.py BUILD_DIR
#
# Runs inside run-sim-test.sh's private PID namespace (SIM-21), so /proc, which the pass walks,
# holds the benchmark's processes only. Set-up, once:
#  - record k (0..999) claims VF k of the host's 1,024 (sorted by address), configured in the
#    simulator as NVIDIA L40S-1Q (equal-size cards take 32 of them, one per VF);
#  - the even records are live: a fake-qemu (SIM-15) runs for each with VMM-1's argv, as vgpud
#    would have spawned it (its own session, stdout and stderr in qemu.log, the VF's VFIO group
#    node held open, QMP and agent sockets listening in <runtime_dir>/instances/<id>/), and the
#    record names its pid, start_time (field 22 of its stat) and the boot id (VMM-16 finds it
#    alive);
#  - the odd records are dead: their pid names no process (the benchmark checks), and their QMP
#    socket file is left behind with nothing listening on it, as a killed QEMU leaves it, so
#    VMM-16 discards the pid and VMM-17 finds no listener: provably gone.
# Every record is Running, with the claim (framework, device_path, claimed_at) and the
# hypervisor fields of INST-2, written as INST-1 lays it out before vgpud starts.
#
# A repetition restores that state (the 500 released VFs configured again, every record
# written again; the live VMMs keep running across repetitions, since stopping vgpud leaves
# VMs alone, OPS-3), starts a fresh vgpud (log_level debug for REC-11's line, no NVML library,
# gpu.reconcile_interval 5s, the minimum) and reads from its log:
#  (a) the first pass, which GEN-10 runs before READY=1: start-up has loaded and classified the
#      records (INST-21: the dead half Stopped, claims kept), and this pass releases the 500
#      stale claims (REC-4); the benchmark checks released=500 failed=0, then that the disk and
#      the simulator agree (500 VFs at type 0, 500 still configured and claimed);
#      From the helper's timestamps it also splits that pass: until the first release (the
#      pass's discovery and fd scan, the liveness probes), the releases from the first DEV-19
#      line to the last (each release waits for a host re-read, DISC-20, before its record is
#      written), the wait from the last release to the first record written, and the record
#      writes up to REC-11's line;
#  (b) the next pass with nothing to repair (released, reset, removed and failed all 0), the
#      steady state of a host whose VMMs all run;
# then the peer: bench/rec-fd-walk, in the same namespace between two passes, times a bare walk
# of /proc/*/fd (opendir, readdir, readlinkat) and vgpud's vfio_scan() alone over the same
# processes, so the in-pass scan can be read against both.
#
# No NVML library: the fake one re-reads the simulator's state.json (420 KB here) on every call,
# and its start-up refresh of 32 GPUs runs past gpu.nvml_timeout, so vgpud starts in NVML
# fallback anyway (reason=timeout, then stuck); without it the passes show vgpud's own work,
# as PERF-6's reading explains. A real driver answers NVML from memory.
#
# One warm-up, then REC_REPS (default 5) repetitions; each row is the median. Prints bench/run
# rows on stdout, details on stderr; BENCH_LOG_DIR=DIR keeps each vgpud's log there.
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vgpud_bench import (  # noqa: E402 (after the path)
    MNT, Vgpud, duration_seconds, log, median, poll, row, run_main, write_config, write_secret)
from vgpud_test import configure, read_creatable  # noqa: E402 (vgpud_bench put it on the path)

RECORDS = 1000
PROFILE = "NVIDIA L40S-1Q"
VFS_WANTED = 1024
ID_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"
DEAD_PID_BASE = 30000  # far above anything the namespace allocates in a run (checked)
PASS_RE = re.compile(r"<7>reconcile pass done duration=(\S+) released=(\d+) reset=(\d+) "
                     r"removed=(\d+) failed=(\d+) scan=(\S+)$")

SYS_DEVICES = os.path.join(MNT, "sys", "bus", "pci", "devices")
INSTANCES = os.path.join(MNT, "data", "instances")
IMAGES = os.path.join(MNT, "data", "images")


def tag(msg):
    log("reconcile-pass", msg)


def passes(d):
    """REC-11's lines so far: (duration s, released, reset, removed, failed, scan s)."""
    out = []
    for line in d.log_text().splitlines():
        m = PASS_RE.search(line)
        if m:
            out.append((duration_seconds(m.group(1)), int(m.group(2)), int(m.group(3)),
                        int(m.group(4)), int(m.group(5)), duration_seconds(m.group(6))))
    return out


def stamps(d, pattern):
    """The helper's milliseconds since spawn of each log line matching pattern."""
    out = []
    for line in d.log_text().splitlines():
        ms, _, text = line.strip().partition(" ")
        if re.search(pattern, text):
            out.append(float(ms))
    return out


def first_pass_phases(d):
    """Where the first pass's time went, from the stamped log: (observe, releases, re-read,
    record writes) in seconds. The pass starts right after the listeners (GEN-10), the DEV-19
    lines mark each release, REC-5's success lines each persisted record."""
    start = stamps(d, r"^<6>listening ")[0]
    end = stamps(d, r"^<7>reconcile pass done ")[0]
    rel = stamps(d, r"^<6>release vGPU .* outcome=released")
    done = stamps(d, r"^<6>released stale vGPU assignment ")
    if not rel or not done:
        raise RuntimeError("no release lines in the first pass")
    return ((rel[0] - start) / 1000, (rel[-1] - rel[0]) / 1000, (done[0] - rel[-1]) / 1000,
            (end - done[0]) / 1000)


def record_id(k):
    raw = os.urandom(16)
    return "".join(ID_ALPHABET[b % len(ID_ALPHABET)] for b in raw) + "%04d" % k


def start_time_of(pid):
    """Field 22 of /proc/<pid>/stat (VMM-16), read after the comm field's closing parenthesis."""
    with open("/proc/%d/stat" % pid) as f:
        text = f.read()
    return int(text[text.rindex(")") + 2:].split()[19])


def host_vfs():
    vfs = sorted(d for d in os.listdir(SYS_DEVICES)
                 if os.path.islink(os.path.join(SYS_DEVICES, d, "physfn")))
    if len(vfs) != VFS_WANTED:
        raise RuntimeError("the host has %d VFs, not %d (bench/host-rec32.yaml?)" %
                           (len(vfs), VFS_WANTED))
    return vfs


def current_type(vf):
    with open(os.path.join(SYS_DEVICES, vf, "nvidia", "current_vgpu_type")) as f:
        return f.read().strip()


class Host:
    """The 1,000 records, their VFs and the 500 live fake-qemu processes."""

    def __init__(self, fake_qemu, work, kernel):
        self.fake_qemu, self.work, self.kernel = fake_qemu, work, kernel
        with open("/proc/sys/kernel/random/boot_id") as f:
            self.boot_id = f.read().strip()
        self.vfs = host_vfs()
        types = [t for t, name in read_creatable(self.vfs[0]) if name == PROFILE]
        if not types:
            raise RuntimeError("%s does not list %s" % (self.vfs[0], PROFILE))
        self.type_id = types[0]
        self.ids = [record_id(k) for k in range(RECORDS)]
        self.vmms = {}  # k -> Popen, the live half
        self.identity = {}  # k -> (pid, start_time)

    def live(self, k):
        return k % 2 == 0

    def runtime(self, k):
        return os.path.join(self.work, "run", "instances", self.ids[k])

    def data(self, k):
        return os.path.join(INSTANCES, self.ids[k])

    def configure_vfs(self):
        """Each record's VF configured as the claim says; returns how many were written."""
        n = 0
        for k in range(RECORDS):
            if current_type(self.vfs[k]) != str(self.type_id):
                configure(self.vfs[k], self.type_id)
                n += 1
        return n

    def argv(self, k):
        """VMM-1's command line for record k, as vgpud builds it (qemu_accel tcg)."""
        rt, data = self.runtime(k), self.data(k)
        return [self.fake_qemu, "-name", "guest=rec-%04d,debug-threads=on" % k,
                "-machine", "q35", "-accel", "tcg", "-cpu", "max", "-smp", "1", "-m", "256M",
                "-nodefaults", "-no-user-config", "-display", "none",
                "-chardev", "socket,id=qmp,path=%s/qmp.sock,server=on,wait=off" % rt,
                "-mon", "chardev=qmp,mode=control",
                "-chardev", "socket,id=agent0,path=%s/agent.sock,server=on,wait=off" % rt,
                "-device", "virtio-serial-pci,id=vser0",
                "-device", "virtserialport,bus=vser0.0,chardev=agent0,name=org.vgpud.agent.0",
                "-chardev", "file,id=console0,path=%s/console.log,append=on" % data,
                "-serial", "chardev:console0",
                "-kernel", self.kernel, "-append", "console=ttyS0",
                "-device", "vfio-pci,sysfsdev=%s" % os.path.join(SYS_DEVICES, self.vfs[k])]

    def set_up(self):
        os.makedirs(INSTANCES, mode=0o700, exist_ok=True)
        if os.listdir(INSTANCES):
            raise RuntimeError("%s is not empty at the start" % INSTANCES)
        t0 = time.monotonic()
        n = self.configure_vfs()
        tag("configured %d VFs as %s (type %d) in %.1f s" %
            (n, PROFILE, self.type_id, time.monotonic() - t0))
        for k in range(RECORDS):
            os.makedirs(self.data(k), mode=0o700)
            os.makedirs(self.runtime(k), mode=0o700)

        t0 = time.monotonic()
        for k in range(RECORDS):
            if self.live(k):
                log_fd = os.open(os.path.join(self.data(k), "qemu.log"),
                                 os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
                try:
                    self.vmms[k] = subprocess.Popen(
                        self.argv(k), stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd,
                        start_new_session=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
                finally:
                    os.close(log_fd)
            else:
                # What a killed QEMU leaves: the socket files, with nothing listening.
                for name in ("qmp.sock", "agent.sock"):
                    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                    s.bind(os.path.join(self.runtime(k), name))
                    s.close()

        def all_listening():
            for k, p in self.vmms.items():
                if p.poll() is not None:
                    raise RuntimeError("fake-qemu of record %d exited with %s; %s/qemu.log" %
                                       (k, p.returncode, self.data(k)))
                if not os.path.exists(os.path.join(self.runtime(k), "agent.sock")):
                    return False
            return True
        if not poll(all_listening, 180, 0.2):
            raise RuntimeError("the fake-qemu processes did not all listen within 180 s")
        for k, p in self.vmms.items():
            self.identity[k] = (p.pid, start_time_of(p.pid))
        for k in range(RECORDS):
            if not self.live(k):
                pid = DEAD_PID_BASE + k
                if os.path.exists("/proc/%d" % pid):
                    raise RuntimeError("pid %d, meant to name no process, exists" % pid)
                self.identity[k] = (pid, 1000 + k)
        tag("started %d fake-qemu processes in %.1f s" % (len(self.vmms), time.monotonic() - t0))

    def record(self, k):
        pid, start_time = self.identity[k]
        rt = self.runtime(k)
        return {"version": 1, "id": self.ids[k], "name": "rec-%04d" % k, "state": "Running",
                "created_at": "2026-09-02T20:%02d:%02dZ" % (k // 60 % 60, k % 60),
                "boot": {"kernel": self.kernel, "cmdline": "console=ttyS0"},
                "vcpus": 1, "memory_mb": 256,
                "gpu": {"profile": PROFILE, "framework": "vendor-vfio",
                        "device_path": os.path.join(SYS_DEVICES, self.vfs[k]),
                        "claimed_at": "2026-09-02T20:%02d:%02d.5Z" % (k // 60 % 60, k % 60)},
                "hypervisor": {"pid": pid, "start_time": start_time, "boot_id": self.boot_id,
                               "qmp_socket": os.path.join(rt, "qmp.sock"),
                               "agent_socket": os.path.join(rt, "agent.sock")}}

    def restore(self):
        """The state before a repetition: every VF configured, every record as written first."""
        for k, p in self.vmms.items():
            if p.poll() is not None:
                raise RuntimeError("fake-qemu of record %d exited with %s" % (k, p.returncode))
        n = self.configure_vfs()
        for k in range(RECORDS):
            path = os.path.join(self.data(k), "instance.json")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                os.write(fd, json.dumps(self.record(k), separators=(",", ":")).encode())
            finally:
                os.close(fd)
        return n

    def check_after_first_pass(self):
        """REC-4 done: the dead half Stopped without a claim and its VFs at 0; the live half
        Running, claimed, configured."""
        wrong = []
        for k in range(RECORDS):
            with open(os.path.join(self.data(k), "instance.json")) as f:
                rec = json.load(f)
            claimed = "device_path" in rec.get("gpu", {})
            want = ("Running", True, str(self.type_id)) if self.live(k) else ("Stopped", False, "0")
            got = (rec["state"], claimed, current_type(self.vfs[k]))
            if got != want:
                wrong.append("record %d: %s, want %s" % (k, got, want))
        if wrong:
            raise RuntimeError("after the first pass: %d records wrong, e.g. %s" %
                               (len(wrong), "; ".join(wrong[:3])))

    def stop_vmms(self):
        for p in self.vmms.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.vmms.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass


def fd_walk(walker):
    out = subprocess.run([walker, "--dev-root", os.path.join(MNT, "dev")], check=True,
                         capture_output=True, text=True, timeout=120)
    for line in out.stderr.splitlines():
        tag(line)
    _, procs, fds, bare, ours = out.stdout.split()
    return int(procs), int(fds), float(bare) / 1000, float(ours) / 1000


def one_run(host, vgpud, config, work, walker, label):
    """The first pass and the first steady pass (REC-11 tuples), start-up s, the walk, and the
    first pass's phases."""
    t0 = time.monotonic()
    n = host.restore()
    tag("%s: restored %d VFs and %d records in %.1f s" %
        (label, n, RECORDS, time.monotonic() - t0))
    d = Vgpud(vgpud, config, work, label)
    try:
        start_s = d.wait_ready(timeout=300)
        # The line precedes READY=1, but the helper's copy of the log may lag the notify socket.
        poll(lambda: passes(d), 10, 0.05)
        got = passes(d)
        if len(got) != 1:
            raise RuntimeError("%s: %d REC-11 lines at READY=1, want 1" % (label, len(got)))
        first = got[0]
        if first[1:5] != (RECORDS // 2, 0, 0, 0):
            raise RuntimeError("%s: first pass released=%d reset=%d removed=%d failed=%d, want "
                               "released=%d and nothing else" % ((label,) + first[1:5] +
                                                                 (RECORDS // 2,)))
        host.check_after_first_pass()
        phases = first_pass_phases(d)

        def steady():
            for p in passes(d)[1:]:
                if p[1:5] == (0, 0, 0, 0):
                    return p
            if d.proc.poll() is not None:
                raise RuntimeError("%s: vgpud exited" % label)
            return None
        quiet = poll(steady, 120, 0.1)
        if not quiet:
            raise RuntimeError("%s: no pass with nothing to repair within 120 s: %s" %
                               (label, passes(d)))
        walk = fd_walk(walker)
        tag("%s: READY=1 after %.0f ms; first pass %.0f ms (scan %.1f ms; until the first "
            "release %.0f ms, releases %.0f ms, then the re-read %.0f ms, record writes %.0f ms), "
            "steady pass %.0f ms (scan %.1f ms); walk of %d processes, %d fds: bare %.1f ms, "
            "vfio_scan %.1f ms" %
            ((label, start_s * 1000, first[0] * 1000, first[5] * 1000) +
             tuple(x * 1000 for x in phases) +
             (quiet[0] * 1000, quiet[5] * 1000, walk[0], walk[1], walk[2] * 1000,
              walk[3] * 1000)))
        return first, quiet, start_s, walk, phases
    finally:
        d.stop()


def main():
    build = os.path.abspath(sys.argv[1])
    reps = int(os.environ.get("REC_REPS", "5"))
    vgpud = os.path.join(build, "src/daemon/vgpud")
    fake_qemu = os.path.join(build, "sim/fake-qemu")
    walker = os.path.join(build, "bench/rec-fd-walk")

    work = tempfile.mkdtemp(prefix="vgpud-rec.")
    host = None
    results = []
    try:
        os.makedirs(IMAGES, exist_ok=True)
        kernel = os.path.join(IMAGES, "vmlinuz")
        with open(kernel, "w") as f:
            f.write("a kernel for fake-qemu\n")
        write_secret(work)
        config = write_config(work, "", log_level="debug", extra="""qemu_binary: "%s"
qemu_accel: tcg
image_dirs:
  - "%s"
gpu:
  reconcile_interval: 5s
""" % (fake_qemu, IMAGES))
        host = Host(fake_qemu, work, kernel)
        host.set_up()
        one_run(host, vgpud, config, work, walker, "warm-up")
        for i in range(1, reps + 1):
            results.append(one_run(host, vgpud, config, work, walker, "rep %d" % i))
    finally:
        if host:
            host.stop_vmms()
        if os.path.isdir(INSTANCES):
            for name in os.listdir(INSTANCES):
                shutil.rmtree(os.path.join(INSTANCES, name), ignore_errors=True)
        shutil.rmtree(IMAGES, ignore_errors=True)
        keep = os.environ.get("BENCH_LOG_DIR")
        if keep:  # vgpud's own logs, with the helper's timestamps, for reading the figures
            os.makedirs(keep, exist_ok=True)
            for name in os.listdir(work):
                if name.startswith("vgpud-") and name.endswith(".log"):
                    shutil.copy(os.path.join(work, name), os.path.join(keep, "rec-" + name))
        shutil.rmtree(work, ignore_errors=True)

    first_ms = median([r[0][0] for r in results]) * 1000
    first_scan = median([r[0][5] for r in results]) * 1000
    quiet_ms = median([r[1][0] for r in results]) * 1000
    quiet_scan = median([r[1][5] for r in results]) * 1000
    start_ms = median([r[2] for r in results]) * 1000
    procs = median([r[3][0] for r in results])
    fds = median([r[3][1] for r in results])
    bare = median([r[3][2] for r in results]) * 1000
    alone = median([r[3][3] for r in results]) * 1000
    what = "1,024 VFs, 1,000 claimed records"
    row("REC-11", "reconcile pass, %s: first pass, releases 500 stale claims (ms)" % what,
        "%.0f" % first_ms)
    row("REC-11", "  its fd scan (ms) vs the whole pass (ms)", "%.1f" % first_scan,
        "%.0f" % first_ms, "%.3f" % (first_scan / first_ms))
    releases = median([r[4][1] for r in results]) * 1000
    row("REC-11", "  its 500 releases, first DEV-19 line to last (ms) vs the whole pass (ms)",
        "%.0f" % releases, "%.0f" % first_ms, "%.3f" % (releases / first_ms))
    row("REC-11", "reconcile pass, %s: steady state, nothing to repair (ms)" % what,
        "%.0f" % quiet_ms)
    row("REC-11", "  its fd scan (ms) vs the whole pass (ms)", "%.1f" % quiet_scan,
        "%.0f" % quiet_ms, "%.3f" % (quiet_scan / quiet_ms))
    row("REC-11", "steady pass's fd scan vs a bare /proc/*/fd walk, %d procs, %d fds (ms)" %
        (procs, fds), "%.1f" % quiet_scan, "%.1f" % bare, "%.2f" % (quiet_scan / bare))
    row("REC-11", "vfio_scan() alone vs the bare walk, same processes (ms)", "%.1f" % alone,
        "%.1f" % bare, "%.2f" % (alone / bare))
    row("GEN-10", "start-up to READY=1, %s, 500 live VMMs (ms)" % what, "%.0f" % start_ms)
    return 0


if __name__ == "__main__":
    run_main(main, "reconcile-pass")
