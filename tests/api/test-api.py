#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-api.py VGPUD OPENAPI_YAML FAKE_NVML
#
# The real vgpud against a mounted vgpu-sim (SIM-20's host), over 127.0.0.1 and a Unix socket,
# with the fake NVML library. Run by tests/sim/run-sim-test.sh, which mounts the simulator in a
# private PID namespace (SIM-21) and exports VGPU_SIM_MOUNT and VGPU_SIM_CONTROL; this program
# starts and stops every vgpud it needs and always stops them, whatever happens. Output is TAP.
# Each check names the SPEC requirements it covers.
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
import tempfile
import time
import traceback

VGPUD, OPENAPI, FAKE_NVML = sys.argv[1:4]
MNT = os.environ["VGPU_SIM_MOUNT"]
CTL = os.environ["VGPU_SIM_CONTROL"]
SYS = os.path.join(MNT, "sys")
HEALTH_FILE = os.path.join(MNT, "data", "gpu", "vf-health.json")
MIXED, EQUAL = "0000:e3:00.0", "0001:c8:00.0"
UNAUTHORIZED = {"code": "unauthorized", "message": "invalid or missing bearer token"}

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


# ---- the daemon -----------------------------------------------------------------------------


class Daemon:
    def __init__(self, work, name, config, extra_args=(), extra_env=None):
        self.log_path = os.path.join(work, name + ".log")
        self.notify_path = os.path.join(work, name + ".notify")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.notify.setblocking(False)
        self.messages = []
        env = dict(os.environ)
        env["VGPU_SIM_CONTROL"] = CTL
        env["NOTIFY_SOCKET"] = self.notify_path
        env.update(extra_env or {})
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([VGPUD, "--config", config] + list(extra_args),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=self.log, env=env)

    def read_notify(self):
        while True:
            try:
                self.messages.append(self.notify.recv(4096).decode())
            except BlockingIOError:
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


def write_config(path, work, port, reconcile="5s"):
    with open(path, "w") as f:
        f.write("""listen: "127.0.0.1:%d"
unix_socket: "%s/api.sock"
jwt_secret_file: "%s/jwt.secret"
data_dir: "%s/data"
runtime_dir: "%s/run"
sysfs_root: "%s/sys"
dev_root: "%s/dev"
nvml_library: "%s"
log_level: debug
gpu:
  reconcile_interval: %s
""" % (port, work, work, MNT, work, MNT, MNT, FAKE_NVML, reconcile))


# ---- the simulator's truth ------------------------------------------------------------------


def sim_state():
    with open(os.path.join(CTL, "state.json")) as f:
        return json.load(f)


def sim_ctl(command):
    with open(os.path.join(CTL, "ctl"), "w") as f:
        f.write(command)


def read_creatable(vf):
    with open(os.path.join(SYS, "bus/pci/devices", vf, "nvidia/creatable_vgpu_types")) as f:
        names = []
        for line in f.read().splitlines():
            left, sep, right = line.partition(":")
            if sep and left.strip() != "ID" and right.strip():
                names.append((int(left.strip()), right.strip()))
        return names


def configure(vf, type_id):
    with open(os.path.join(SYS, "bus/pci/devices", vf, "nvidia/current_vgpu_type"), "w") as f:
        f.write(str(type_id))


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


# ---- metrics --------------------------------------------------------------------------------

MET2 = [
    ("vgpud_resources_gpu_slots", "gauge", "kind", ["total", "used", "allocatable", "quarantined"]),
    ("vgpud_resources_gpu_profile_slots", "gauge", None, None),
    ("vgpud_resources_gpu_vfs", "gauge", "state",
     ["free", "reserved", "claimed", "dirty", "quarantined", "uncertain", "unreadable"]),
    ("vgpud_resources_gpu_placement_disabled", "gauge", None, []),
    ("vgpud_resources_gpu_nvml_fallbacks_total", "counter", "reason",
     ["equal_size", "error", "unavailable", "timeout", "stuck"]),
    ("vgpud_instances_vgpu_sentinel_checks_total", "counter", "result",
     ["ok", "failed", "unknown", "rpc_error", "unsupported_agent", "list_error"]),
    ("vgpud_instances_vgpu_sentinel_init_failures_total", "counter", None, []),
    ("vgpud_instances_vgpu_sentinel_quarantines_total", "counter", None, []),
    ("vgpud_instances_vgpu_quarantined_vfs", "gauge", None, []),
    ("vgpud_instances_vgpu_vf_health_store_unavailable", "gauge", None, []),
    ("vgpud_instances_vgpu_reconcile_failures_total", "counter", "stage",
     ["list_instances", "release_stale", "reset_unclaimed_vfs", "reconcile_devices"]),
    ("vgpud_instances_vgpu_stale_release_failures_total", "counter", None, []),
    ("vgpud_instances_vgpu_reconcile_liveness_uncertain_total", "counter", None, []),
    ("vgpud_instances", "gauge", "state",
     ["Creating", "Running", "Stopping", "Stopped", "Failed", "Deleting"]),
    ("vgpud_instances_vmm_forced_kills_total", "counter", "in_grace", ["true", "false"]),
    ("vgpud_instances_vgpu_quarantine_breaker_open", "gauge", None, []),
    ("vgpud_http_requests_total", "counter", "code", None),
    ("vgpud_build_info", "gauge", None, None),
]

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


# ---- the checks -----------------------------------------------------------------------------


def check_cli(work, config):
    # CFG-2: --version prints the version and exits.
    r = subprocess.run([VGPUD, "--version"], capture_output=True, text=True, timeout=10)
    ok(r.returncode == 0 and re.fullmatch(r"vgpud \d+\.\d+\.\d+\n", r.stdout) is not None,
       "CFG-2: --version prints the version and exits 0", r)

    # CFG-2: --check-config validates and exits 0 (printing the effective configuration).
    r = subprocess.run([VGPUD, "--config", config, "--check-config"], capture_output=True,
                       text=True, timeout=10)
    ok(r.returncode == 0 and "reconcile_interval: 5s" in r.stdout and r.stderr == "",
       "CFG-2: --check-config exits 0 for a valid configuration", r)

    # CFG-4, GEN-10: a configuration error is exit 1 and one error line.
    r = subprocess.run([VGPUD, "--config", config, "--set", "gpu.reconcile_interval=1s"],
                       capture_output=True, text=True, timeout=10)
    eq((r.returncode, r.stderr),
       (1, '<3>--set gpu.reconcile_interval=1s: gpu.reconcile_interval must be a duration '
           'between 5s and 1h0m0s, got "1s"\n'),
       "CFG-4, GEN-10: a --set error exits 1 with one error line")
    r = subprocess.run([VGPUD, "--config", config, "--check-config", "--set", "bogus=1"],
                       capture_output=True, text=True, timeout=10)
    eq((r.returncode, r.stderr), (1, '<3>--set bogus=1: unknown key "bogus"\n'),
       "CFG-2: --check-config exits 1 for an invalid configuration")
    bad = os.path.join(work, "bad.yaml")
    with open(bad, "w") as f:
        f.write("gpu:\n  sentinel_intervall: 5s\n")
    r = subprocess.run([VGPUD, "--config", bad], capture_output=True, text=True, timeout=10)
    eq((r.returncode, r.stderr), (1, '<3>%s:2:3: unknown key "gpu.sentinel_intervall"\n' % bad),
       "CFG-4: a file error names file, line and column")
    r = subprocess.run([VGPUD, "--config", os.path.join(work, "missing.yaml")],
                       capture_output=True, text=True, timeout=10)
    eq((r.returncode, r.stderr.count("\n")), (1, 1), "CFG-1: a missing explicit file exits 1")


def check_public(c, openapi):
    for via in ("unix", "tcp"):
        r = c.get("/healthz", via=via, token=None)
        eq((r.status, r.json()), (200, {"status": "ok"}), "API-17: /healthz without token (%s)" % via)
        r = c.get("/readyz", via=via, token=None)
        eq(r.status, 200, "API-17: /readyz is 200 after the first pass (%s)" % via)
    r = c.get("/openapi.yaml", token=None)
    eq((r.status, r.header("content-type"), r.body), (200, "application/yaml", openapi),
       "API-19: /openapi.yaml served verbatim as application/yaml without token")


def check_auth(c, secret):
    # API-12: every other route needs a token, on both listeners.
    routes = [("GET", "/resources"), ("GET", "/gpus"), ("GET", "/gpu/health"),
              ("GET", "/metrics"), ("DELETE", "/gpu/health/breaker"),
              ("POST", "/gpu/vfs/0000:e3:00.4/quarantine"),
              ("DELETE", "/gpu/vfs/0000:e3:00.4/quarantine"),
              ("POST", "/gpu/gpus/0000:e3:00.0/drain"), ("DELETE", "/gpu/gpus/0000:e3:00.0/drain")]
    for method, path in routes:
        for via in ("unix", "tcp"):
            r = c.request(method, path, via=via, token=None)
            eq(error_of(r), (401, UNAUTHORIZED),
               "API-12: %s %s without token is 401 (%s)" % (method, path, via))
    bad = [("Bearer " + mint(b"x" * 32), "a token signed with another secret"),
           ("Bearer " + mint(secret, exp_delta=-10), "an expired token"),
           ("Bearer " + mint(secret, alg="HS512"), "an HS512 token"),
           ("Basic Zm9vOmJhcg==", "another scheme")]
    for value, what in bad:
        r = c.get("/resources", token=value)
        eq(error_of(r), (401, UNAUTHORIZED), "API-13: %s is 401" % what)
    eq(c.get("/resources", via="tcp").status, 200, "API-12: a valid token is accepted on TCP")


def check_routing(c):
    r = c.get("/nope")
    eq((r.status, r.json()["code"]), (404, "not_found"), "API-3: unknown path is 404 not_found")
    r = c.get("/resources/")
    eq((r.status, r.json()["code"]), (404, "not_found"), "API-3: a trailing slash is not stripped")
    r = c.request("POST", "/resources")
    eq((r.status, r.json()["code"], r.header("allow")), (405, "method_not_allowed", "GET"),
       "API-3: another method is 405 with Allow")
    r = c.request("PUT", "/gpu/vfs/0000:e3:00.4/quarantine")
    eq((r.status, r.header("allow")), (405, "DELETE, POST"),
       "API-3: Allow lists every method of the path")
    r = c.get("/resources?verbose=1")
    eq((r.status, r.json()["code"]), (400, "invalid_request"),
       "API-3: an unknown query parameter is 400 invalid_request")


def check_resources_track_sim(c):
    """API-4, API-5, PLACE-21, DISC-20: /resources follows the simulator through configures."""
    r = c.get("/resources")
    body = r.json()
    g = body["gpu"]
    names = [p["name"] for p in g["profiles"]]
    ok(r.status == 200 and g["mode"] == "vgpu" and names == sorted(names) and
       set(names) == set(CATALOG) and "placement_disabled_reason" not in g,
       "API-4, API-5: /resources shape, profiles sorted by name", body)
    sizes_ok = all(p["framebuffer_mb"] == profile_gib(p["name"]) * 1024 for p in g["profiles"])
    ok(sizes_ok, "API-4: framebuffer_mb of every profile (DISC-14)")

    def matches(quarantined=()):
        def f():
            want = truth(quarantined)
            got = figures(c.get("/resources").json())
            return got == want and (got, want)
        return f

    res = poll(matches(), 30, 0.5)
    ok(bool(res), "API-5, PLACE-21: figures equal the simulator's on an empty host",
       json.dumps(figures(c.get("/resources").json())) + "\n" + json.dumps(truth()))

    q4 = CATALOG["NVIDIA L40S-4Q"]
    q1 = CATALOG["NVIDIA L40S-1Q"]
    q2 = CATALOG["NVIDIA L40S-2Q"]
    mixed_vfs = ["0000:e3:%02x.%d" % ((4 + i) // 8, (4 + i) % 8) for i in range(32)]
    equal_vfs = ["0001:c8:%02x.%d" % ((4 + i) // 8, (4 + i) % 8) for i in range(32)]

    steps = [
        ("nine 4Q on the mixed GPU and one 2Q on the equal GPU",
         [(mixed_vfs[i], q4) for i in range(9)] + [(equal_vfs[0], q2)]),
        ("two 1Q, then one more 1Q on the mixed GPU (SIM-17/18: lists hide 4Q, NVML does not)",
         [(mixed_vfs[9], q1), (mixed_vfs[10], q1), (mixed_vfs[11], q1)]),
        ("a 4Q written although no list shows it, and releases",
         [(mixed_vfs[12], q4), (mixed_vfs[0], 0), (equal_vfs[0], 0)]),
    ]
    for what, writes in steps:
        for vf, t in writes:
            configure(vf, t)
        res = poll(matches(), 40, 0.5)
        ok(bool(res), "DISC-20, PLACE-21: figures follow the simulator after %s" % what,
           json.dumps(figures(c.get("/resources").json())) + "\n" + json.dumps(truth()))
    # Leave the host as it is: a configured VF is "dirty" in /gpus (no claims in this release).
    return mixed_vfs, equal_vfs


def check_gpus(c, mixed_vfs, equal_vfs):
    r = c.get("/gpus")
    body = r.json()
    gpus = body["gpus"]
    eq([g["address"] for g in gpus], [MIXED, EQUAL], "API-6: /gpus lists both GPUs in order")
    g0, g1 = gpus
    eq((g0["model"], g0["framework"], g0["mode"], g0["nvml"]),
       ("NVIDIA L40S", "vendor-vfio", "mixed", "ok"), "API-6: the mixed GPU's fields")
    eq((g1["mode"], g1["nvml"]), ("equal", "equal_size"),
       "API-6, NVML-11: the equal-size GPU falls back alone")
    eq([v["address"] for v in g0["vfs"]], mixed_vfs, "API-6: VFs sorted by address")
    st = {v["address"]: v for v in sim_state()["gpus"][0]["vfs"]}
    want = []
    for v in g0["vfs"]:
        s = st[v["address"]]
        want.append({"address": v["address"], "parent": MIXED,
                     "state": "dirty" if s["type"] else "free", "failures": 0,
                     **({"profile": s["profile"]} if s["type"] else {})})
    eq(g0["vfs"], want, "API-6: VF states and profiles match the simulator (configured = dirty)")


def check_health_routes(c, mixed_vfs):
    vf = mixed_vfs[20]
    before = figures(c.get("/resources").json())

    # API-18 errors first.
    r = c.request("POST", "/gpu/vfs/0000:E3:00.4/quarantine", {"reason": "x"})
    eq(error_of(r)[0:1] + (r.json()["code"],), (400, "invalid_address"),
       "API-18: an uppercase address is 400 invalid_address")
    r = c.request("POST", "/gpu/vfs/nonsense/quarantine", {"reason": "x"})
    eq((r.status, r.json()["code"]), (400, "invalid_address"),
       "API-18: a malformed address is 400 invalid_address")
    r = c.request("POST", "/gpu/vfs/0000:e3:1f.7/quarantine", {"reason": "x"})
    eq(error_of(r), (404, {"code": "not_found", "message": "no VF 0000:e3:1f.7 on this host"}),
       "API-18: quarantine of an undiscovered VF is 404")
    for body, what in [({}, "a missing reason"), ({"reason": ""}, "an empty reason"),
                       ({"reason": "x" * 257}, "a 257-byte reason"),
                       ({"reason": "x", "extra": 1}, "an unknown key"),
                       ({"reason": 5}, "a number"), ("{\"reason\": ", "truncated JSON"),
                       ('{"reason": "a", "reason": "b"}', "a duplicate key")]:
        r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, body)
        eq((r.status, r.json()["code"]), (400, "invalid_request"),
           "API-9: %s is 400 invalid_request" % what)
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, "reason", content_type="text/plain")
    eq((r.status, r.json()["code"]), (415, "unsupported_media_type"),
       "API-11: a body that is not JSON is 415")
    r = c.request("POST", "/gpu/gpus/%s/drain" % mixed_vfs[0], {"reason": "x"})
    eq((r.status, r.json()["code"]), (404, "not_found"), "API-18: drain of a VF address is 404")
    r = c.request("DELETE", "/gpu/gpus/0000:99:00.0/drain")
    eq((r.status, r.json()["code"]), (404, "not_found"), "API-18: undrain of an unknown PF is 404")
    r = c.request("DELETE", "/gpu/vfs/0000:e3:1f.7/quarantine")
    eq((r.status, r.json()["code"]), (404, "not_found"),
       "API-18: clear of a VF with neither discovery nor record is 404")

    # Quarantine: durable before the answer, visible in /resources and /metrics at once.
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": "bad fan"})
    body = r.json()
    rec = body["records"][0] if body.get("records") else {}
    ok(r.status == 200 and len(body["records"]) == 1 and body["running_instances"] == [] and
       rec.get("vf_address") == vf and rec.get("source") == "operator" and
       rec.get("reason") == "bad fan" and rec.get("gpu") == MIXED and rec.get("present") is True
       and "quarantined_at" in rec,
       "API-18, HEALTH-25: quarantine answers the resulting record", body)
    with open(HEALTH_FILE) as f:
        disk = json.load(f)
    ok(any(x["vf_address"] == vf and x.get("source") == "operator" for x in disk["records"]),
       "HEALTH-25: the quarantine is on disk when the API answers", disk)
    eq(disk.get("driver_version"), sim_state()["driver_version"],
       "HEALTH-30: the host driver version is recorded in the health file")
    got = figures(c.get("/resources").json())
    eq((got["quarantined_slots"], got["allocatable_slots"]),
       (before["quarantined_slots"] + 1, before["allocatable_slots"] - 1),
       "API-5: the quarantine shows in /resources at once")
    eq(got, truth(quarantined={vf}), "PLACE-21: figures with a quarantined VF equal the model's")
    fams = parse_metrics(c.get("/metrics").body.decode())
    eq((metric(fams, "vgpud_resources_gpu_slots", kind="quarantined"),
        metric(fams, "vgpud_instances_vgpu_quarantined_vfs"),
        metric(fams, "vgpud_resources_gpu_vfs", state="quarantined")),
       (1.0, 1.0, 1.0), "MET-2: the quarantine shows in /metrics")
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % vf, {"reason": "bad fan"})
    eq((r.status, r.json()["records"][0]["reason"]), (200, "bad fan"),
       "API-18: repeating a quarantine answers the same record")
    h = c.get("/gpu/health").json()
    ok(h["available"] is True and h["threshold"] == 2 and
       [x["vf_address"] for x in h["records"]] == [vf] and h["records"][0]["present"] is True and
       h["breaker"] == {"enabled": True, "open": False, "window": "1h0m0s",
                        "max_quarantines": 4},
       "API-10: /gpu/health shows store, threshold, breaker and records", h)
    gv = [v for v in c.get("/gpus").json()["gpus"][0]["vfs"] if v["address"] == vf][0]
    eq(gv["state"], "quarantined", "API-6: a quarantined VF's state")

    # Clear.
    r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    eq((r.status, r.json()), (200, {"records": [], "running_instances": []}),
       "API-18, HEALTH-25: clear deletes the record")
    eq(figures(c.get("/resources").json()), before, "API-5: clear restores the figures")
    r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
    eq((r.status, r.json()["records"]), (200, []), "API-18: clearing again is a no-op")

    # Drain and undrain a PF.
    r = c.request("POST", "/gpu/gpus/%s/drain" % MIXED, {"reason": "maintenance"})
    body = r.json()
    ok(r.status == 200 and [x["vf_address"] for x in body["records"]] == mixed_vfs and
       all(x["reason"] == "maintenance" and x["source"] == "operator" for x in body["records"]),
       "API-18, HEALTH-26: drain quarantines every VF of the PF", r.body[:300])
    got = figures(c.get("/resources").json())
    eq(got, truth(quarantined=set(mixed_vfs)), "PLACE-21: figures of a drained GPU")
    eq(metric(parse_metrics(c.get("/metrics").body.decode()),
              "vgpud_instances_vgpu_quarantined_vfs"), 32.0, "MET-2: drained VFs in /metrics")
    r = c.request("DELETE", "/gpu/gpus/%s/drain" % MIXED)
    eq((r.status, r.json()), (200, {"records": [], "running_instances": []}),
       "API-18, HEALTH-26: undrain deletes every record of the PF")
    eq(figures(c.get("/resources").json()), before, "API-5: undrain restores the figures")

    # The breaker (HEALTH-29): closed, so closing it changes nothing.
    r = c.request("DELETE", "/gpu/health/breaker")
    eq((r.status, r.json()),
       (200, {"breaker": {"enabled": True, "open": False, "window": "1h0m0s",
                          "max_quarantines": 4}}),
       "HEALTH-29: DELETE /gpu/health/breaker answers the breaker")


def check_metrics(c):
    r = c.get("/metrics")
    eq(r.header("content-type"), "text/plain; version=0.0.4; charset=utf-8",
       "MET-1: the exposition's content type")
    text = r.body.decode()
    fams = parse_metrics(text)
    for name, typ, label, values in MET2:
        f = fams.get(name)
        if not ok(f is not None and f.get("type") == typ and f.get("help"),
                  "MET-1, MET-2: family %s has HELP and TYPE %s" % (name, typ)):
            continue
        if values is not None:
            got = [l.get(label) for _, l, _ in f["samples"]] if label else \
                [None for _ in f["samples"]]
            want = values if label else [None]
            eq(got, want, "MET-3: %s exports its fixed label values" % name)
    eq([n for n in fams], [m[0] for m in MET2], "MET-2: families in order and nothing else")
    res = c.get("/resources").json()["gpu"]
    fams = parse_metrics(c.get("/metrics").body.decode())
    got = {k: metric(fams, "vgpud_resources_gpu_slots", kind=k)
           for k in ("total", "used", "allocatable", "quarantined")}
    eq(got, {k: float(res[k + "_slots"]) for k in ("total", "used", "allocatable", "quarantined")},
       "MET-4: slot gauges equal /resources")
    prof = {l["profile"]: v for _, l, v in fams["vgpud_resources_gpu_profile_slots"]["samples"]}
    eq(prof, {p["name"]: float(p["available"]) for p in res["profiles"]},
       "MET-3, MET-4: one profile series per /resources profile")
    bi = fams["vgpud_build_info"]["samples"]
    ok(len(bi) == 1 and bi[0][2] == 1.0 and re.fullmatch(r"\d+\.\d+\.\d+", bi[0][1]["version"])
       and bi[0][1]["commit"], "MET-2: vgpud_build_info{version,commit} 1", bi)
    ok(metric(fams, "vgpud_http_requests_total", code="401") >= 1,
       "API-20: responses are counted by status")
    promtool = shutil.which("promtool")
    if promtool:
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                           text=True, timeout=30)
        ok(p.returncode == 0, "MET-5: promtool check metrics accepts /metrics", p)
    else:
        skip("MET-5: promtool check metrics accepts /metrics", "promtool absent")


def check_corrupt_store(c, daemon, mixed_vfs):
    with open(HEALTH_FILE, "rb") as f:
        good = f.read()
    with open(HEALTH_FILE, "w") as f:
        f.write("{garbage")
    daemon.proc.send_signal(signal.SIGHUP)

    def disabled():
        g = c.get("/resources").json()["gpu"]
        return g.get("placement_disabled_reason") and g
    g = poll(disabled, 10)
    ok(bool(g) and g["placement_disabled_reason"].startswith(
        "VF health state unavailable: unmarshal VF health state: "),
       "HEALTH-16, HEALTH-22: a corrupt file after SIGHUP disables placement with the reason", g)
    if g:
        ok(g["allocatable_slots"] == 0 and all(p["available"] == 0 for p in g["profiles"]),
           "API-5: allocatable and available are 0 while placement is disabled")
    fams = parse_metrics(c.get("/metrics").body.decode())
    eq((metric(fams, "vgpud_resources_gpu_placement_disabled"),
        metric(fams, "vgpud_instances_vgpu_vf_health_store_unavailable"),
        metric(fams, "vgpud_resources_gpu_slots", kind="allocatable")),
       (1.0, 1.0, 0.0), "MET-2: placement_disabled and store_unavailable gauges are 1")
    r = c.request("POST", "/gpu/vfs/%s/quarantine" % mixed_vfs[20], {"reason": "x"})
    ok(r.status == 503 and r.json()["code"] == "health_store_unavailable" and
       r.json()["message"].startswith("VF health state unavailable: "),
       "API-18, HEALTH-17: a mutation is refused 503 while the file does not load", r.body)
    h = c.get("/gpu/health").json()
    ok(h["available"] is False and h["unavailable_reason"].startswith(
        "VF health state unavailable: unmarshal VF health state: "),
       "API-10: /gpu/health shows the unavailable store", h)
    with open(HEALTH_FILE, "rb") as f:
        ok(f.read() == b"{garbage", "HEALTH-17: the operator's broken file is left untouched")

    # Repaired on disk: reads schedule the repair (HEALTH-21) and placement comes back, without
    # a restart and without another SIGHUP.
    with open(HEALTH_FILE, "wb") as f:
        f.write(good)

    def enabled():
        g = c.get("/resources").json()["gpu"]
        return "placement_disabled_reason" not in g and g
    g = poll(enabled, 15, 0.25)
    ok(bool(g) and g["allocatable_slots"] > 0,
       "HEALTH-21: placement comes back once the file is repaired", g)


def check_discovery_failure(c, mixed_vfs):
    """DISC-6, DISC-7: unreadable VFs, then a failed discovery that keeps the last table."""
    vf = mixed_vfs[30]
    try:
        sim_ctl("fault read sys/devices/pci0000:e3/%s/nvidia/current_vgpu_type EIO" % vf)

        def unreadable():
            vfs = c.get("/gpus").json()["gpus"][0]["vfs"]
            v = [x for x in vfs if x["address"] == vf]
            return v and v[0]["state"] == "unreadable" and v[0]
        v = poll(unreadable, 20, 0.5)
        ok(bool(v), "DISC-6, API-6: an unreadable VF is in /gpus with state unreadable", v)
        g = c.get("/resources").json()["gpu"]
        eq((g["total_slots"], "placement_disabled_reason" in g), (63, False),
           "DISC-6, API-5: an unreadable VF counts in no slot figure")
        fams = parse_metrics(c.get("/metrics").body.decode())
        eq(metric(fams, "vgpud_resources_gpu_vfs", state="unreadable"), 1.0,
           "MET-2: the unreadable VF in vgpud_resources_gpu_vfs")

        sim_ctl("fault read sys/devices/*/*/nvidia/current_vgpu_type EIO")

        def failed():
            g = c.get("/resources").json()["gpu"]
            return g.get("placement_disabled_reason") and g
        g = poll(failed, 20, 0.5)
        ok(bool(g) and g["placement_disabled_reason"].startswith("discover vendor VFIO VFs: ") and
           g["total_slots"] == 63 and g["allocatable_slots"] == 0,
           "DISC-7: a failed discovery keeps the last VF table and disables placement", g)
        fams = parse_metrics(c.get("/metrics").body.decode())
        eq(metric(fams, "vgpud_resources_gpu_placement_disabled"), 1.0,
           "MET-2: placement_disabled is 1 after a failed discovery")
        r = c.get("/gpus")
        eq((r.status, len(r.json()["gpus"])), (200, 2), "DISC-7: /gpus keeps the last table")
    finally:
        sim_ctl("clear-faults")

    def recovered():
        g = c.get("/resources").json()["gpu"]
        return "placement_disabled_reason" not in g and g["total_slots"] == 64 and g
    ok(bool(poll(recovered, 20, 0.5)), "DISC-7: placement comes back with a good discovery")


def check_lock(work, config):
    # CFG-9: a second daemon on the same runtime_dir exits 1 with the lock text.
    r = subprocess.run([VGPUD, "--config", config], capture_output=True, text=True, timeout=20,
                       env=dict(os.environ, VGPU_SIM_CONTROL=CTL))
    eq((r.returncode, r.stderr),
       (1, "<3>another vgpud holds %s/run/vgpud.lock\n" % work),
       "CFG-9: a second vgpud exits 1 with the lock message")


def check_listener_failure(work):
    # GEN-10: a listener that cannot bind ends start-up with status 1 and one line.
    cfg = os.path.join(work, "busy.yaml")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    other = os.path.join(work, "other")
    os.mkdir(other)
    shutil.copy(os.path.join(work, "jwt.secret"), os.path.join(other, "jwt.secret"))
    os.chmod(os.path.join(other, "jwt.secret"), 0o600)
    write_config(cfg, other, port)
    try:
        r = subprocess.run([VGPUD, "--config", cfg], capture_output=True, text=True, timeout=40,
                           env=dict(os.environ, VGPU_SIM_CONTROL=CTL))
    finally:
        busy.close()
    lines = r.stderr.splitlines()
    errors = [l for l in lines if l.startswith("<3>")]
    eq((r.returncode, errors), (1, ["<3>listen 127.0.0.1:%d: Address already in use" % port]),
       "GEN-10: a listener failure exits 1 with one error line")


def check_not_ready(work, secret):
    """API-17: /readyz and mutating routes answer 503 not_ready until the first pass ends."""
    cfg = os.path.join(work, "slow.yaml")
    slow = os.path.join(work, "slow")
    os.mkdir(slow)
    shutil.copy(os.path.join(work, "jwt.secret"), os.path.join(slow, "jwt.secret"))
    os.chmod(os.path.join(slow, "jwt.secret"), 0o600)
    write_config(cfg, slow, free_port())
    # Every discovery reads the driver version file; slowing it holds the first pass open.
    sim_ctl("fault read sys/module/nvidia/version delay:2500")
    d = Daemon(work, "slow", cfg)
    c = Client(os.path.join(slow, "api.sock"), 0, mint(secret))
    try:
        sock = os.path.join(slow, "api.sock")
        up = poll(lambda: os.path.exists(sock) or not d.alive(), 20)
        ok(up and d.alive(), "GEN-10: listeners start before the first reconcile pass")
        r = c.get("/readyz", token=None)
        eq(error_of(r)[0], 503, "API-17: /readyz is 503 before the first pass ends")
        eq(r.json()["code"], "not_ready", "API-17: the code is not_ready")
        r = c.request("POST", "/gpu/vfs/0000:e3:00.4/quarantine", {"reason": "x"})
        eq((r.status, r.json()["code"]), (503, "not_ready"),
           "API-17: mutating routes are 503 not_ready before the first pass ends")
        eq(c.get("/healthz", token=None).status, 200, "API-17: /healthz answers meanwhile")
        ready = poll(lambda: c.get("/readyz", token=None).status == 200, 30, 0.2)
        ok(ready, "API-17: /readyz turns 200 after the first pass")
        d.read_notify()
        ok(any("READY=1" in m for m in d.messages), "OPS-2: READY=1 is sent", d.messages)
    finally:
        sim_ctl("clear-faults")
        rc = d.stop()
    eq(rc, 0, "OPS-3: SIGTERM exits 0")
    ok(any("STOPPING=1" in m for m in d.messages), "OPS-2: STOPPING=1 at shutdown", d.messages)
    ok(not os.path.exists(os.path.join(slow, "api.sock")),
       "OPS-3: the Unix socket is removed at exit")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-api.", dir=os.environ.get("TMPDIR", "/tmp"))
    daemons = []
    try:
        secret = os.urandom(48)
        with open(os.path.join(work, "jwt.secret"), "wb") as f:
            f.write(secret)
        os.chmod(os.path.join(work, "jwt.secret"), 0o600)
        with open(OPENAPI, "rb") as f:
            openapi = f.read()
        for type_id, name in read_creatable("0000:e3:00.4"):
            CATALOG[name] = type_id

        port = free_port()
        config = os.path.join(work, "vgpud.yaml")
        write_config(config, work, port)

        groups = [("cli", lambda: check_cli(work, config))]
        for name, fn in groups:
            run_group(name, fn)

        # free_port() closes the port before vgpud binds it, so a parallel test may take it
        # in between: then vgpud exits with EADDRINUSE and starts again on another port.
        for attempt in range(5):
            d = Daemon(work, "main", config)
            daemons.append(d)
            c = Client(os.path.join(work, "api.sock"), port, mint(secret))
            ready = poll(lambda: not d.alive() or
                         (os.path.exists(os.path.join(work, "api.sock")) and
                          c.get("/readyz", token=None).status == 200), 30, 0.1)
            if d.alive() or "Address already in use" not in d.log_text():
                break
            d.stop()
            port = free_port()
            write_config(config, work, port)
        if not ok(ready and d.alive(), "GEN-10: vgpud becomes ready", d.log_text()[-3000:]):
            return 1
        d.read_notify()
        ok(any("READY=1" in m for m in d.messages), "OPS-2: READY=1 after the first pass",
           d.messages)

        state = {}
        run_group("public", lambda: check_public(c, openapi))
        run_group("auth", lambda: check_auth(c, secret))
        run_group("routing", lambda: check_routing(c))
        run_group("lock", lambda: check_lock(work, config))
        run_group("resources", lambda: state.update(
            zip(("mixed", "equal"), check_resources_track_sim(c))))
        mixed = state.get("mixed") or ["0000:e3:%02x.%d" % ((4 + i) // 8, (4 + i) % 8)
                                       for i in range(32)]
        equal = state.get("equal") or []
        run_group("gpus", lambda: check_gpus(c, mixed, equal))
        run_group("health", lambda: check_health_routes(c, mixed))
        run_group("metrics", lambda: check_metrics(c))
        run_group("discovery", lambda: check_discovery_failure(c, mixed))
        run_group("corrupt", lambda: check_corrupt_store(c, d, mixed))

        rc = d.stop()
        daemons.remove(d)
        if not eq(rc, 0, "OPS-3: SIGTERM exits 0") or failures:
            for line in d.log_text().splitlines()[-60:]:
                print("# log: " + line)
        ok(any("STOPPING=1" in m for m in d.messages), "OPS-2: STOPPING=1 at shutdown",
           d.messages)
        text = d.log_text()
        ok(all(re.fullmatch(r"<[3-7]>\S.*", l) for l in text.splitlines()),
           "OPS-4: every log line has a priority prefix",
           [l for l in text.splitlines() if not re.fullmatch(r"<[3-7]>\S.*", l)][:5])

        run_group("listener", lambda: check_listener_failure(work))
        run_group("not-ready", lambda: check_not_ready(work, secret))
        return 0
    finally:
        for d in daemons:
            d.stop(signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)
        print("1..%d" % counter)


def run_group(name, fn):
    try:
        fn()
    except Exception:
        ok(False, "%s: no exception" % name, traceback.format_exc())


if __name__ == "__main__":
    main()
    sys.exit(1 if failures else 0)
