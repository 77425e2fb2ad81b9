# SPDX-License-Identifier: GPL-2.0-or-later
#
# vgpud_bench: what the Python benchmarks (bench/perf4-instances.py, bench/perf6-footprint.py,
# bench/qemu-lifecycle.py) share: bench/run's row format and a benchmark's failure line, medians
# and percentiles, an HTTP client over vgpud's Unix socket, vgpud's configuration, and a vgpud
# process whose start-up is timed to READY=1 on a notify socket of ours (OPS-2).
#
# They run under tests/sim/run-sim-test.sh, which mounts a fresh vgpu-sim in a private PID
# namespace (SIM-21) and exports VGPU_SIM_MOUNT and VGPU_SIM_CONTROL. What the API tests have
# too comes from tests/lib/vgpud_test, re-exported: the mount and the simulator's control files,
# HS256 tokens, the Unix-socket connection, the JWT secret, /proc states and bounded polling.
# Only those: its TAP checks print on stdout, where bench/run reads rows, and its Daemon and
# write_config are a test's (debug log, no READY=1 timing). It reads the simulator's
# environment lazily and its argv (the tests' VGPUD ...) only for what the benchmarks do not use.
import json
import os
import re
import select
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))
import vgpud_test  # noqa: E402 (after the path)
from vgpud_test import (  # noqa: E402,F401 (re-exported)
    MNT, alive, mint, poll, sim_ctl, sim_state, write_secret)


def log(tag, msg):
    """Details go to stderr (bench/run keeps them in its log); stdout carries rows only."""
    print("%s: %s" % (tag, msg), file=sys.stderr, flush=True)


def row(ident, measurement, ours, baseline="-", ratio="-", target="-", result="info"):
    print("row\t%s\t%s\t%s\t%s\t%s\t%s\t%s" % (ident, measurement, ours, baseline, ratio,
                                               target, result), flush=True)


def median(values):
    return statistics.median(values)


def percentile(values, p):
    """The nearest-rank percentile: the smallest value with at least p % of them at or below."""
    s = sorted(values)
    k = max(1, -(-len(s) * p // 100))  # ceil(n * p / 100), at least the first
    return s[int(k) - 1]


_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def duration_seconds(text, what="a log line"):
    """A duration in format_duration()'s form as logged (GEN-12: "us", once "\\xc2\\xb5s"), in
    seconds."""
    t = text.strip('"').replace("\\xc2\\xb5", "u").replace("\u00b5", "u")
    if t == "0s":
        return 0.0
    if not re.fullmatch(r"(\d+(\.\d+)?(h|ms|us|ns|m|s))+", t):
        raise RuntimeError("unreadable duration %r in %s" % (text, what))
    return sum(float(n) * _UNITS[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(h|ms|us|ns|m|s)", t))


def run_main(main, name):
    """sys.exit(main()); an exception ends the benchmark with status 1 and one line "NAME:
    failed: ..." for bench/run's log, not a traceback."""
    try:
        sys.exit(main())
    except Exception as e:
        log(name, "failed: %s" % e)
        sys.exit(1)


# ---- HTTP -----------------------------------------------------------------------------------


class Response:
    def __init__(self, status, body):
        self.status, self.body = status, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "%d %s" % (self.status, self.body[:400].decode(errors="replace"))


class Client:
    """One connection per request, as the API tests do: no keep-alive to skew latency."""

    def __init__(self, unix_path, token, timeout=120):
        self.unix_path, self.token, self.timeout = unix_path, token, timeout

    def request(self, method, path, body=None):
        conn = vgpud_test.UnixConnection(self.unix_path, self.timeout)
        headers = {"Authorization": "Bearer " + self.token}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=data, headers=headers)
            r = conn.getresponse()
            return Response(r.status, r.read())
        finally:
            conn.close()

    def get(self, path):
        return self.request("GET", path)


# ---- the daemon -----------------------------------------------------------------------------


def write_config(work, nvml, listen="", unix_socket=True, extra="", log_level="info",
                 data_dir=None):
    """vgpud's configuration on the mounted simulator, its own files under work; log_level info,
    the level of PLACE-22's line (debug would add a line per request to every figure). data_dir
    defaults to the simulator's data/; a benchmark of disk throughput gives a real one."""
    path = os.path.join(work, "vgpud.yaml")
    os.makedirs(os.path.join(work, "run"), exist_ok=True)
    with open(path, "w") as f:
        f.write('listen: "%s"\n' % listen)
        f.write('unix_socket: "%s"\n' % (os.path.join(work, "api.sock") if unix_socket else ""))
        f.write('jwt_secret_file: "%s/jwt.secret"\n' % work)
        f.write('data_dir: "%s"\n' % (data_dir or os.path.join(MNT, "data")))
        f.write('runtime_dir: "%s/run"\n' % work)
        f.write('sysfs_root: "%s/sys"\n' % MNT)
        f.write('dev_root: "%s/dev"\n' % MNT)
        f.write('nvml_library: "%s"\n' % nvml)
        f.write("log_level: %s\n" % log_level)
        f.write(extra)
    return path


class Vgpud:
    """A vgpud process with NOTIFY_SOCKET on a datagram socket of ours. wait_ready() returns the
    seconds from spawn to READY=1 (OPS-2)."""

    def __init__(self, vgpud, config, work, label):
        self.label = label
        self.notify_path = os.path.join(work, "notify")
        if os.path.exists(self.notify_path):
            os.unlink(self.notify_path)
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.log_path = os.path.join(work, "vgpud-%s.log" % label.replace(" ", "-"))
        env = dict(os.environ, NOTIFY_SOCKET=self.notify_path)
        self.log_file = open(self.log_path, "w")
        self.spawned = time.monotonic()
        self.proc = subprocess.Popen([vgpud, "--config", config], stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        self.pid = self.proc.pid
        self.stamper = threading.Thread(target=self._stamp, daemon=True)
        self.stamper.start()

    def _stamp(self):
        """Copies vgpud's log, each line prefixed with the ms since spawn at which it was read
        (vgpud's lines carry no time), so a log says where a run's time went."""
        for line in self.proc.stderr:
            self.log_file.write("%9.1f %s" % ((time.monotonic() - self.spawned) * 1000,
                                               line.decode(errors="replace")))
            self.log_file.flush()

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_ready(self, timeout=60.0):
        deadline = self.spawned + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                raise RuntimeError("%s: vgpud sent no READY=1 (exit status %s); log:\n%s" %
                                   (self.label, self.proc.poll(), self.log_text()[-2000:]))
            readable, _, _ = select.select([self.notify], [], [], min(left, 0.5))
            if readable:
                message = self.notify.recv(4096).decode(errors="replace")
                if "READY=1" in message.split("\n"):
                    return time.monotonic() - self.spawned

    def stop(self):
        """SIGTERM, 30 s, then SIGKILL; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        # Bounded: a child that kept vgpud's stderr open would keep the pipe from ending.
        self.stamper.join(5)
        if not self.stamper.is_alive():
            self.log_file.close()
        self.notify.close()
        if rc != 0:
            log("bench", "%s: vgpud exited with status %d on SIGTERM" % (self.label, rc))
        return rc


def status_fields(pid, names):
    """Values in kB (or counts) of the named fields of /proc/<pid>/status."""
    out = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in names:
                out[key] = int(value.split()[0])
    return out
