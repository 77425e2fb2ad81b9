# SPDX-License-Identifier: GPL-2.0-or-later
#
# vgpud_instances: what the instance lifecycle scripts (tests/api/test-instances.py,
# tests/api/test-instances-matrix.py, tests/api/test-instances-restart.py) share on top of
# vgpud_test: create bodies, the records on the simulator's data/ (INST-1), fake-qemu processes
# (SIM-15), a test-held QMP connection, the claim invariants between /gpus, state.json and every
# instance.json, bounded waits, and the end of a run.
#
# The scripts take the arguments VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU, and run under
# tests/sim/run-sim-test.sh.
import json
import os
import re
import shutil
import socket
import sys
import threading

import vgpud_test as vt
from vgpud_test import (  # noqa: F401 (alive and proc_state are re-exported)
    MNT, alive, error_of, finish, ok, poll, proc_state, sim_ctl, sim_state)

FAKE_QEMU = sys.argv[4]
IMAGES = os.path.join(MNT, "data", "import")
KERNEL = os.path.join(IMAGES, "vmlinuz")
INSTANCES = os.path.join(MNT, "data", "instances")
PROFILE = "NVIDIA L40S-2Q"
MIXED_PF, EQUAL_PF = "0000:e3:00.0", "0001:c8:00.0"


def body(name, profile=None, **extra):
    b = {"name": name, "vcpus": 1, "memory_mb": 256,
         "boot": {"kernel": KERNEL, "cmdline": "console=ttyS0"}}
    if profile:
        b["gpu"] = {"profile": profile}
    b.update(extra)
    return b


def make_images():
    os.makedirs(IMAGES, exist_ok=True)
    with open(KERNEL, "w") as f:
        f.write("a kernel for fake-qemu\n")


def local_images(work):
    return os.path.join(work, "images")


def vmm_config(path, work, boot="2s", stop="2s", term_grace="1s", init_window=None,
               reconcile="5s", extra_gpu="", extra_vmm="", extra_top=""):
    """vgpud's configuration with fake-qemu as its VMM (SIM-15) and short VMM timeouts;
    extra_gpu and extra_vmm are more indented lines for those sections, extra_top whole
    top-level sections."""
    gpu = "  vfio_term_grace: %s\n" % term_grace + extra_gpu
    if init_window is not None:
        gpu += "  vfio_init_window: %s\n" % init_window
    # A second image directory off the simulator, for what FUSE's data/ cannot hold (a FIFO).
    vt.write_config(path, work, reconcile=reconcile, extra_top="""qemu_binary: "%s"
qemu_accel: tcg
image_dirs:
  - "%s"
  - "%s"
vmm:
  boot_timeout: %s
  stop_timeout: %s
%s%s""" % (FAKE_QEMU, IMAGES, local_images(work), boot, stop, extra_vmm, extra_top),
                    extra_gpu=gpu)
    return path


def vf_of(inst):
    return os.path.basename(inst["gpu"]["device_path"])


def record(iid):
    """instance.json as it is on disk, or None (also for a file that does not parse: vgpud
    renames a whole record into place, INST-1, so only a hand-written one can be partial)."""
    try:
        with open(os.path.join(INSTANCES, iid, "instance.json")) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def persisted(iid, holds, timeout=5):
    """instance.json once holds(record) is true, within timeout, else as last read. What the API
    shows after a change it made on its own (a recovery, a VMM's exit, a pass) is the state in
    memory; vgpud's disk worker writes the record a moment later (INST-1)."""
    poll(lambda: holds(record(iid) or {}), timeout, 0.02)
    return record(iid) or {}


def pid_of(iid):
    r = record(iid)
    return r.get("hypervisor", {}).get("pid") if r else None


def guest_pids(name):
    """fake-qemu processes of instance name (VMM-1: -name guest=<name>,debug-threads=on). A
    sanitizer build's exit-time leak check runs in a task of its own that shares the process's
    memory, and so its command line: a match whose parent matches too is that task, not a VMM."""
    want = ("guest=%s,debug-threads=on" % name).encode()
    found = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                args = f.read().split(b"\0")
            with open("/proc/%s/stat" % p) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if want in args and alive(int(p)):
            found[int(p)] = ppid
    return [pid for pid, ppid in found.items() if ppid not in found]


class GuestWatch:
    """Remembers every fake-qemu process of one instance name seen while it runs, so that a test
    can prove a VMM was spawned even when its record is gone by the time the request answers."""

    def __init__(self, name):
        self.name, self.pids = name, set()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            self.pids.update(guest_pids(self.name))
            self.done.wait(0.02)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.pids


def console_file(iid):
    try:
        with open(os.path.join(INSTANCES, iid, "console.log"), errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def console_text(c, iid):
    """The console route's text (API-2), "" when it does not answer 200."""
    r = c.get("/instances/%s/console" % iid)
    return r.body.decode(errors="replace") if r.status == 200 else ""


def runtime_dir(work, iid):
    return os.path.join(work, "run", "instances", iid)


def get(c, iid):
    r = c.get("/instances/" + iid)
    return r.json() if r.status == 200 else None


def wait_state(c, iid, state, timeout=15):
    return poll(lambda: (get(c, iid) or {}).get("state") == state, timeout)


# A lifecycle request may wait on a readiness bound (5 s for the greeting) and a whole ladder
# (vfio_term_grace + 2 s + 2 s): longer than vgpud_test.Client's 10 s.
LIFECYCLE_TIMEOUT = 40


def request(c, method, path, data=None):
    """c.request() with LIFECYCLE_TIMEOUT; (status, body) with the body parsed when JSON."""
    conn = vt.UnixConnection(c.unix_path, LIFECYCLE_TIMEOUT)
    h = {"Authorization": "Bearer " + c.token}
    payload = None
    if data is not None:
        payload = data if isinstance(data, bytes) else json.dumps(data).encode()
        h["Content-Type"] = "application/json"
    try:
        conn.request(method, path, body=payload, headers=h)
        r = conn.getresponse()
        return error_of(vt.Response(r.status, {k.lower(): v for k, v in r.getheaders()},
                                    r.read()))
    finally:
        conn.close()


def wait_exited(c, iid, state, timeout=20):
    """An unrequested exit (INST-19) is handled: the state shows at once, the claim clears
    after the release (DEV-10's retries), and the record with both is written last."""
    def done():
        g, r = get(c, iid) or {}, record(iid) or {}
        return all(x.get("state") == state and "device_path" not in x.get("gpu", {})
                   for x in (g, r)) and "hypervisor" not in r
    return poll(done, timeout)


def unless_busy(fn, timeout=10):
    """fn() -> (status, body), again while it is 409 busy (INST-9: the exit operation of
    INST-19 ends a moment after its record is written); the last answer."""
    res = []
    poll(lambda: res.append(fn()) or not (res[-1][0] == 409 and isinstance(res[-1][1], dict) and
                                         res[-1][1].get("code") == "busy"), timeout, 0.05)
    return res[-1]


def create(c, name, profile=None, **extra):
    """POST /instances; (status, body)."""
    return request(c, "POST", "/instances", body(name, profile, **extra))


def create_running(c, name, profile=None):
    st, b = create(c, name, profile)
    if not ok(st == 201 and b.get("state") == "Running", "%s is created and Running" % name,
              (st, b)):
        raise RuntimeError("cannot create %s" % name)
    return b


def post(c, iid, what):
    return request(c, "POST", "/instances/%s/%s" % (iid, what))


def delete(c, iid):
    """(status, body); the body is b"" after a 204."""
    return request(c, "DELETE", "/instances/" + iid)


def delete_when_idle(c, iid, timeout=20):
    """DELETE, again while another operation on the instance runs (INST-9's 409 busy, such as
    the exit operation of INST-19); (status, body) of the last answer."""
    return unless_busy(lambda: delete(c, iid), timeout)


def delete_all(c):
    """Deletes every instance; a test group's clean end. Returns the ones that would not go."""
    left = []
    for i in c.get("/instances").json():
        st = delete_when_idle(c, i["id"])[0]
        if st != 204:
            left.append((i["id"], i["name"], st))
    return left


def current_type(vf):
    with open(os.path.join(MNT, "sys/bus/pci/devices", vf, "nvidia/current_vgpu_type")) as f:
        return f.read().strip()


def configured_vfs():
    """The simulator's configured VFs: {vf: profile}."""
    return {v["address"]: v["profile"] for g in sim_state()["gpus"] for v in g["vfs"]
            if v["type"] != 0 or v["mdev"] is not None}


def disk_claims():
    """{vf: [instance ids]} from every instance.json on disk (INST-2's gpu.device_path)."""
    claims = {}
    for name in sorted(os.listdir(INSTANCES)):
        if not re.fullmatch(r"[a-z0-9]{20}", name):
            continue
        r = record(name)
        path = (r or {}).get("gpu", {}).get("device_path")
        if path:
            claims.setdefault(os.path.basename(path), []).append(name)
    return claims


def claim_picture(c, dirty=()):
    """None when the host is in order, else what is wrong: every configured VF is claimed by
    exactly one record on disk (no leak; dirty names VFs a test configured by hand), no VF is
    claimed twice, every claim names a configured VF, and /gpus shows each claim as claimed by
    its instance and nothing else as claimed."""
    conf, claims = configured_vfs(), disk_claims()
    shown = {v["address"]: v for g in c.get("/gpus").json()["gpus"] for v in g["vfs"]}
    wrong = []
    for vf, ids in sorted(claims.items()):
        if len(ids) > 1:
            wrong.append("%s claimed by %s" % (vf, ids))
        if vf not in conf:
            wrong.append("%s claimed by %s but not configured" % (vf, ids))
        s = shown.get(vf, {})
        if s.get("state") != "claimed" or s.get("instance_id") != ids[0]:
            wrong.append("%s: /gpus shows %r for the claim of %s" % (vf, s, ids))
    for vf in sorted(conf):
        if vf not in claims and vf not in dirty:
            wrong.append("%s configured (%s) without a claim" % (vf, conf[vf]))
    for vf, s in sorted(shown.items()):
        if s["state"] == "claimed" and vf not in claims:
            wrong.append("%s shown claimed by %s without a record" % (vf, s.get("instance_id")))
    return "\n".join(wrong) or None


def check_claims(c, label, dirty=(), timeout=10):
    """claim_picture() settles to None (a release is seen on the next re-read, DEV-10)."""
    poll(lambda: claim_picture(c, dirty) is None, timeout, 0.2)
    wrong = claim_picture(c, dirty)
    return ok(wrong is None, label, wrong)


class QmpHold:
    """A test client on an instance's QMP socket. fake-qemu, like QEMU's socket chardevs, serves
    one client at a time, so while this is connected vgpud's own connection waits in the listen
    backlog and gets no greeting (VMM-5's 5 s greeting bound; VMM-9: QMP unreachable)."""

    def __init__(self, work, iid):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(5)
        self.sock.connect(os.path.join(runtime_dir(work, iid), "qmp.sock"))
        self.greeting = b""
        while b"\n" not in self.greeting:
            chunk = self.sock.recv(4096)
            if not chunk:
                break
            self.greeting += chunk

    def close(self):
        self.sock.close()


def log_has(d, pattern):
    """Whether a line of the daemon's log matches pattern (re.search)."""
    return any(re.search(pattern, line) for line in d.log_text().splitlines())


def forced_kills(c):
    fams = vt.parse_metrics(c.get("/metrics").body.decode())
    return (vt.metric(fams, "vgpud_instances_vmm_forced_kills_total", in_grace="true") or 0,
            vt.metric(fams, "vgpud_instances_vmm_forced_kills_total", in_grace="false") or 0)


def finish_run(daemons, work):
    """The end of a lifecycle script's run, whatever happened: the simulator's faults cleared,
    every daemon's log copied to $VGPUD_TEST_KEEP when that is set, then vgpud_test.finish()
    (daemons killed, work removed, the plan) and the images removed."""
    sim_ctl("clear-faults")
    keep = os.environ.get("VGPUD_TEST_KEEP")
    if keep:
        for d in daemons:
            shutil.copy(d.log_path, keep)
    finish(daemons, work)
    shutil.rmtree(IMAGES, ignore_errors=True)
