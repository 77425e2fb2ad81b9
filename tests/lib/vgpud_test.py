# SPDX-License-Identifier: GPL-2.0-or-later
#
# vgpud_test: what the API test scripts (tests/api/test-api.py, tests/api/test-api-faults.py)
# share: TAP output, an HTTP client over the Unix socket and TCP, HS256 tokens, a vgpud process
# with its notify socket and log, its configuration, a process's state in /proc, the simulator's
# truth (state.json, .sim/ctl, the figures /resources must show) and a metrics parser.
#
# Both scripts run under tests/sim/run-sim-test.sh, which mounts the simulator in a private PID
# namespace (SIM-21) and exports VGPU_SIM_MOUNT and VGPU_SIM_CONTROL, and both take the same
# arguments: VGPUD OPENAPI_YAML FAKE_NVML.
#
# Those arguments and that environment are read at their first use, not at import: VGPUD,
# OPENAPI, FAKE_NVML, MNT, CTL, SYS and HEALTH_FILE are looked up on demand (PEP 562), so a
# script without the simulator (tests/e2e/e2e_guest.py) can share the TAP helpers, and one with
# the simulator but other arguments (bench/vgpud_bench.py) its helpers for the simulator.
import base64
import hashlib
import hmac
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

_sim = None
_args = None
SIM_NAMES = ("MNT", "CTL", "SYS", "HEALTH_FILE")
ARG_NAMES = ("VGPUD", "OPENAPI", "FAKE_NVML")


def sim_context():
    """{"MNT", "CTL", "SYS", "HEALTH_FILE"}: the simulator's environment, read once, at the first
    use."""
    global _sim
    if _sim is None:
        missing = [v for v in ("VGPU_SIM_MOUNT", "VGPU_SIM_CONTROL") if v not in os.environ]
        if missing:
            raise RuntimeError("vgpud_test: %s not set (run under tests/sim/run-sim-test.sh)"
                               % " and ".join(missing))
        mnt = os.environ["VGPU_SIM_MOUNT"]
        _sim = {"MNT": mnt, "CTL": os.environ["VGPU_SIM_CONTROL"],
                "SYS": os.path.join(mnt, "sys"),
                "HEALTH_FILE": os.path.join(mnt, "data", "gpu", "vf-health.json")}
    return _sim


def context():
    """{"VGPUD", "OPENAPI", "FAKE_NVML"} (the script's first three arguments) and sim_context(),
    read once, at the first use."""
    global _args
    if _args is None:
        if len(sys.argv) < 4:
            raise RuntimeError("vgpud_test: the script needs the arguments VGPUD OPENAPI_YAML "
                               "FAKE_NVML (got %r)" % (sys.argv[1:],))
        _args = {"VGPUD": sys.argv[1], "OPENAPI": sys.argv[2], "FAKE_NVML": sys.argv[3]}
    return dict(_args, **sim_context())


def __getattr__(name):
    # Module attributes not defined above: `from vgpud_test import MNT` and `vgpud_test.MNT`
    # both land here (PEP 562), so the names read as constants while staying lazy.
    if name in SIM_NAMES:
        return sim_context()[name]
    if name in ARG_NAMES:
        return context()[name]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))

# ---- TAP ------------------------------------------------------------------------------------

counter = 0
failures = 0


def ok(cond, name, detail=None):
    global counter, failures
    counter += 1
    if cond:
        print("ok %d - %s" % (counter, name))
    else:
        failures += 1
        print("not ok %d - %s" % (counter, name))
        if detail is not None:
            for line in str(detail).splitlines()[:40]:
                print("#   " + line)
    sys.stdout.flush()
    return cond


def eq(got, want, name):
    return ok(got == want, name, "got:  %r\nwant: %r" % (got, want))


def skip(name, why):
    global counter
    counter += 1
    print("ok %d - %s # SKIP %s" % (counter, name, why))


def poll(fn, timeout, interval=0.1):
    """Calls fn until it returns a true value or timeout seconds pass; returns the last value."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def run_group(name, fn):
    try:
        fn()
    except Exception:
        ok(False, "%s: no exception" % name, traceback.format_exc())


def plan():
    """The TAP plan line, printed last."""
    print("1..%d" % counter)


def finish(daemons, work):
    """The end of a run, whatever happened: kills the daemons still running, removes the work
    tree and prints the plan."""
    for d in daemons:
        d.stop(signal.SIGKILL)
    shutil.rmtree(work, ignore_errors=True)
    plan()


def exit_status():
    """The script's exit status: 1 once a check has failed."""
    return 1 if failures else 0


# ---- HTTP -----------------------------------------------------------------------------------


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def b64url(b):
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def mint(secret, exp_delta=3600, alg="HS256"):
    now = int(time.time())
    header = b64url(json.dumps({"alg": alg, "typ": "JWT"}).encode())
    payload = b64url(json.dumps({"exp": now + exp_delta, "iat": now, "sub": "test"}).encode())
    signing = (header + "." + payload).encode()
    sig = b64url(hmac.new(secret, signing, hashlib.sha256).digest())
    return header + "." + payload + "." + sig


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def header(self, name):
        return self.headers.get(name.lower())


class Client:
    def __init__(self, unix_path, port, token):
        self.unix_path, self.port, self.token = unix_path, port, token

    def request(self, method, path, body=None, via="unix", token=True, headers=None,
                content_type="application/json"):
        if via == "unix":
            conn = UnixConnection(self.unix_path)
        else:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        h = dict(headers or {})
        if token is True:
            h["Authorization"] = "Bearer " + self.token
        elif token:
            h["Authorization"] = token
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            if isinstance(data, str):
                data = data.encode()
            h["Content-Type"] = content_type
        try:
            try:
                conn.request(method, path, body=data, headers=h)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer from the headers alone (413, 415) and close before
                # the body is sent; its answer is still there to read.
                pass
            r = conn.getresponse()
            return Response(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)


def error_of(r):
    try:
        return (r.status, r.json())
    except ValueError:
        return (r.status, r.body)


def gpu_body(c):
    return c.get("/resources").json()["gpu"]


def timed_get(c, path, timeout=2.0):
    """GET with its own client timeout; returns (status or exception text, seconds)."""
    t0 = time.monotonic()
    try:
        conn = UnixConnection(c.unix_path, timeout=timeout)
        try:
            conn.request("GET", path, headers={"Authorization": "Bearer " + c.token})
            r = conn.getresponse()
            r.read()
            status = r.status
        finally:
            conn.close()
    except Exception as e:  # a timeout is the failure this measures
        status = "%s: %s" % (type(e).__name__, e)
    return status, time.monotonic() - t0


# ---- the daemon -----------------------------------------------------------------------------


class Daemon:
    """A vgpud process. Its notify socket is drained continuously by a reader thread, so a
    long test never fills its queue (OPS-2); a test that wants the socket left unread clears
    draining and sets it again when done."""

    def __init__(self, work, name, config, extra_args=(), extra_env=None):
        self.log_path = os.path.join(work, name + ".log")
        self.notify_path = os.path.join(work, name + ".notify")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.notify.setblocking(False)
        self.messages = []
        self.draining = threading.Event()
        self.draining.set()
        self.notify_lock = threading.Lock()
        self.closing = threading.Event()
        env = dict(os.environ)
        env["VGPU_SIM_CONTROL"] = context()["CTL"]
        env["NOTIFY_SOCKET"] = self.notify_path
        env.update(extra_env or {})
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([context()["VGPUD"], "--config", config] + list(extra_args),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.log, env=env)
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self):
        while not self.closing.is_set():
            if self.draining.is_set():
                self.read_notify()
            self.closing.wait(0.05)

    def read_notify(self):
        with self.notify_lock:
            while self.notify.fileno() >= 0:
                try:
                    self.messages.append(self.notify.recv(4096).decode())
                except BlockingIOError:
                    break
            return self.messages

    def alive(self):
        return self.proc.poll() is None

    def stop(self, sig=signal.SIGTERM, timeout=20):
        if self.alive():
            self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.closing.set()
        self.reader.join()
        if self.notify.fileno() >= 0:
            self.read_notify()
            self.notify.close()
        self.log.close()
        return rc

    def log_text(self):
        with open(self.log_path) as f:
            return f.read()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def write_config(path, work, listen="", reconcile="5s", extra_top="", extra_gpu=""):
    """vgpud's configuration for a daemon whose own files live under work (CFG-3: an empty
    listen disables TCP)."""
    mnt = context()["MNT"]
    with open(path, "w") as f:
        f.write("""listen: "%s"
unix_socket: "%s/api.sock"
jwt_secret_file: "%s/jwt.secret"
data_dir: "%s/data"
runtime_dir: "%s/run"
sysfs_root: "%s/sys"
dev_root: "%s/dev"
nvml_library: "%s"
log_level: debug
%sgpu:
  reconcile_interval: %s
%s""" % (listen, work, work, mnt, work, mnt, mnt, context()["FAKE_NVML"], extra_top, reconcile,
       extra_gpu))


def write_secret(work):
    """A fresh HS256 secret in <work>/jwt.secret (mode 0600); returns it."""
    secret = os.urandom(48)
    path = os.path.join(work, "jwt.secret")
    with open(path, "wb") as f:
        f.write(secret)
    os.chmod(path, 0o600)
    return secret


def copy_secret(work, other):
    """The same secret for a daemon whose files live under other."""
    shutil.copy(os.path.join(work, "jwt.secret"), os.path.join(other, "jwt.secret"))
    os.chmod(os.path.join(other, "jwt.secret"), 0o600)


def readyz(c, sock):
    """/readyz is 200. The socket file exists from bind(), a moment before vgpud listens: a
    refused connection then means not yet. A restarted vgpud first removes the file its
    predecessor left, so it may also vanish between the check and the connect."""
    try:
        return os.path.exists(sock) and c.get("/readyz", token=None).status == 200
    except (ConnectionRefusedError, FileNotFoundError):
        return False


def start(work, name, config, secret, sock, extra_env=None, timeout=40):
    """Starts a daemon and waits for /readyz; returns (daemon, client) or (daemon, None)."""
    d = Daemon(work, name, config, extra_env=extra_env)
    c = Client(sock, 0, mint(secret))
    ready = poll(lambda: not d.alive() or readyz(c, sock), timeout, 0.1)
    if not ok(ready and d.alive(), "GEN-10: vgpud (%s) becomes ready" % name,
              d.log_text()[-3000:]):
        return d, None
    return d, c


def stop(d, label=""):
    """SIGTERM: exit 0 (OPS-3), STOPPING=1 (OPS-2), a priority prefix on every log line (OPS-4).
    The log's tail goes to the TAP output when anything failed."""
    rc = d.stop()
    if not eq(rc, 0, "OPS-3: SIGTERM exits 0" + label) or failures:
        for line in d.log_text().splitlines()[-60:]:
            print("# log: " + line)
    ok(any("STOPPING=1" in m for m in d.messages), "OPS-2: STOPPING=1 at shutdown" + label,
       d.messages)
    text = d.log_text()
    ok(all(re.fullmatch(r"<[3-7]>\S.*", l) for l in text.splitlines()),
       "OPS-4: every log line has a priority prefix" + label,
       [l for l in text.splitlines() if not re.fullmatch(r"<[3-7]>\S.*", l)][:5])
    return rc


def log_count(d, pattern):
    """Log lines that match pattern in full."""
    return sum(1 for l in d.log_text().splitlines() if re.fullmatch(pattern, l))


# ---- processes ------------------------------------------------------------------------------


def proc_state(pid):
    """The state letter of /proc/<pid>/stat, or None when the process is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(") ", 1)[1][0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None


def alive(pid):
    """Whether pid runs: a zombie (or a dead task) does not; neither does pid None."""
    s = proc_state(pid) if pid else None
    return s is not None and s not in "ZX"


# ---- the simulator's truth ------------------------------------------------------------------


def sim_state():
    with open(os.path.join(sim_context()["CTL"], "state.json")) as f:
        return json.load(f)


def sim_ctl(command):
    with open(os.path.join(sim_context()["CTL"], "ctl"), "w") as f:
        f.write(command)


def read_creatable(vf):
    with open(os.path.join(sim_context()["SYS"], "bus/pci/devices", vf,
                           "nvidia/creatable_vgpu_types")) as f:
        names = []
        for line in f.read().splitlines():
            left, sep, right = line.partition(":")
            if sep and left.strip() != "ID" and right.strip():
                names.append((int(left.strip()), right.strip()))
        return names


def configure(vf, type_id):
    with open(os.path.join(sim_context()["SYS"], "bus/pci/devices", vf,
                           "nvidia/current_vgpu_type"), "w") as f:
        f.write(str(type_id))


def configure_held(vf, type_id):
    """Leaves vf as a VM that vgpud does not manage would: its VFIO group held open, then
    configured; returns the open node (the caller closes it, before writing 0: the driver
    refuses a teardown while the group is open). Held first, the VF is never dirty without the
    hold, so no reconcile pass resets it (REC-6)."""
    vf_dir = os.path.join(sim_context()["SYS"], "bus/pci/devices", vf)
    group = os.path.basename(os.readlink(os.path.join(vf_dir, "iommu_group")))
    node = open(os.path.join(sim_context()["MNT"], "dev/vfio", group), "rb")
    try:
        configure(vf, type_id)
    except BaseException:
        node.close()
        raise
    return node


def profile_gib(name):
    # DISC-14: the N of "-<N><A|B|C|Q>" at the end of the name.
    m = re.search(r"-(\d+)[ABCQ]$", name)
    return int(m.group(1)) if m else 0


CATALOG = {}  # name -> type id, read from an empty card


def truth(quarantined=()):
    """The /resources figures (API-5, PLACE-21) as the simulator's model has them now."""
    st = sim_state()
    total = used = allocatable = qslots = 0
    avail = {name: 0 for name in CATALOG}
    for gpu in st["gpus"]:
        vfs = gpu["vfs"]
        free = [v for v in vfs if v["type"] == 0 and v["address"] not in quarantined]
        total += len(vfs)
        used += sum(1 for v in vfs if v["type"] != 0)
        qslots += sum(1 for v in vfs if v["address"] in quarantined)
        allocatable += len(free)
        if gpu["mode"] == "mixed":
            # SIM-9: slots of 1 GiB, placements at multiples of the size, 32 vGPUs at most;
            # NVML's free placements, capped by the GPU's allocatable VFs.
            occupied = set()
            holding = 0
            for v in vfs:
                if v["type"]:
                    holding += 1
                    size = profile_gib(v["profile"])
                    occupied |= set(range(v["placement"], v["placement"] + size))
            for name in CATALOG:
                size = profile_gib(name)
                places = 0
                if holding < 32:
                    places = sum(1 for s in range(0, 48, size)
                                 if s + size <= 48 and not occupied & set(range(s, s + size)))
                avail[name] += min(places, len(free))
        else:
            # PLACE-5: allocatable VFs whose list names the profile.
            for v in free:
                for _, name in read_creatable(v["address"]):
                    avail[name] += 1
    return {"total_slots": total, "used_slots": used, "allocatable_slots": allocatable,
            "quarantined_slots": qslots, "available": avail}


def figures(body):
    g = body["gpu"]
    return {"total_slots": g["total_slots"], "used_slots": g["used_slots"],
            "allocatable_slots": g["allocatable_slots"],
            "quarantined_slots": g["quarantined_slots"],
            "available": {p["name"]: p["available"] for p in g["profiles"]}}


def mdev_vfs():
    return [v["address"] for v in sim_state()["gpus"][0]["vfs"]]


def read_attr(path):
    with open(os.path.join(sim_context()["SYS"], path)) as f:
        return f.read().strip()


def mdev_truth():
    """/resources per PLACE-21 for an mdev host, from the simulator's sysfs."""
    st = sim_state()
    total = used = allocatable = 0
    avail = {}
    for gpu in st["gpus"]:
        for v in gpu["vfs"]:
            total += 1
            types = os.path.join("class/mdev_bus", v["address"], "mdev_supported_types")
            busy = v["mdev"] is not None or v["type"] != 0
            used += busy
            allocatable += not busy
            for t in sorted(os.listdir(os.path.join(sim_context()["SYS"], types))):
                name = read_attr(os.path.join(types, t, "name"))
                n = 0 if busy else int(read_attr(os.path.join(types, t, "available_instances")))
                avail[name] = avail.get(name, 0) + n
    return {"total_slots": total, "used_slots": used, "allocatable_slots": allocatable,
            "quarantined_slots": 0, "available": avail}


# ---- metrics --------------------------------------------------------------------------------


SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """{family: {"help", "type", "samples": [(name, {labels}, value)]}}"""
    fams = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name = line.split(" ", 3)[2]
            fams.setdefault(name, {"samples": []})["help"] = line.split(" ", 3)[3]
        elif line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ")
            fams.setdefault(name, {"samples": []})["type"] = typ
        elif line:
            m = SAMPLE.match(line)
            if not m:
                raise ValueError("bad sample line %r" % line)
            labels = dict(LABEL.findall(m.group(3) or ""))
            fams[m.group(1)]["samples"].append((m.group(1), labels, float(m.group(4))))
    return fams


def metric(fams, family, **labels):
    for _, l, v in fams[family]["samples"]:
        if l == labels:
            return v
    return None
