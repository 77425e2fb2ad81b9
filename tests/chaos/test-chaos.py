#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-chaos.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU [--iterations N] [--seed N]
#
# Crash consistency (REL-1, REL-2): vgpud on a mounted vgpu-sim (SIM-20's host) with fake-qemu
# as its VMM, in run-sim-test.sh's private PID namespace (SIM-21). One iteration: concurrent
# clients create (mostly `NVIDIA L40S-2Q`, some other profiles, some without a GPU; half from
# an imported image on an overlay, most of those with a cloud-init seed; most with a `nat` NIC
# and a port forward; some with a volume), stop, start and delete instances, attach and detach
# volumes (REL-11, DISK-8: hot on a Running instance, in the record on a Stopped one) and
# quarantine VFs, while a few VFs are wedged so that the
# sentinel (SENT-8, once vgpud has one) quarantines some by itself (threshold 1, breaker off).
# At a random step of an operation of a randomly chosen kind (claim, configure, spawn,
# readiness, ladder, release, removal; or while idle) vgpud gets SIGKILL. The next daemon is
# started, its recovery (INST-21) is waited for and then one whole reconcile pass after
# readiness (`reconcile pass done`, REC-1, REC-11), and REL-2 is checked from the simulator's
# own state.json, the records and health file on disk and the processes in /proc, never from
# vgpud's API (chaos_truth.py). The simulator, data dir and running VMs carry over from one
# iteration to the next: the point is accumulated state. A VMM no record accounts for is
# reported, then killed, so that one leak does not pile up over the run. Before the first
# daemon, the checker is shown to report each kind of damage it looks for.
#
# Output is TAP, one test point per iteration, then a summary line
#   # chaos: <n> iterations, kills by phase: create=a stop=b start=c delete=d idle=e, violations: v
# and each violation in detail. REL-11's invariants are checked after each iteration as well: no
# address held by two records, table vgpud and the dnsmasq hosts file equal to the records,
# every TAP on a live VMM; no overlay, seed, temp file or volume directory that no record names,
# no settled record without its overlay, the image's bytes unchanged, no volume read-write twice. A violation is one problem (its kind and VF or record) from the
# iteration it first appears in until the first iteration without it.
#
# The run is seeded: random.Random(seed) chooses every iteration's kill phase and delay and
# seeds each client's choices. The seed is printed; --seed N or VGPUD_CHAOS_SEED=N replays a
# run's choices (thread timing is not replayed). --iterations N or VGPUD_CHAOS_ITERATIONS=N
# sets the count (default 50, REL-1's minimum). VGPUD_TEST_KEEP=<dir> keeps the logs of the
# daemons of every iteration with a violation.
import argparse
import itertools
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import vgpud_test as vt  # noqa: E402 (after the path)
from vgpud_test import (  # noqa: E402
    MNT, Client, Daemon, configure, eq, mint, ok, poll, read_creatable, readyz, run_group,
    sim_ctl, sim_state, write_secret)
from vgpud_instances import (  # noqa: E402
    FAKE_QEMU, IMAGES, INSTANCES, KERNEL, PROFILE, alive, body, delete, finish_run,
    make_images, post, record, request)
import chaos_truth as truth  # noqa: E402

PHASES = ("create", "stop", "start", "delete", "idle")
PHASE_WEIGHTS = (30, 20, 15, 20, 15)
PROFILES = (("NVIDIA L40S-2Q", 65), ("NVIDIA L40S-1Q", 8), ("NVIDIA L40S-4Q", 7), (None, 20))
VOLUMES = 3  # REL-11: volumes the clients attach and detach
IMAGE = "chaos-img"  # REL-11: the image creates boot from (DISK-5), imported before the load
IMAGE_SHARE = 0.5    # of the creates: from the image, most with cloud_init (SEED-1)
SSH_KEY = []  # the public key of cloud_init's creates, made by ssh-keygen at the start
FLAGS = (90, 7, 3)  # fake-qemu flags of a create (SIM-15): none, ignore-sigterm, hang-qmp
CLIENTS = 3
PORTS = itertools.count(20000)  # host ports of port forwards, one per create (NET-1)
POPULATION = 12   # instances the clients keep around: creates and deletes balance near it
WEDGED = 6        # VFs wedged per iteration, for the sentinel's quarantines (SENT-8)
RECONCILE = 5     # gpu.reconcile_interval, seconds (CFG-3's minimum)
PASS_LINE = re.compile(r"^<7>reconcile pass\b.*\bduration=")
# How long after a log line is written the harness may read it: its polling interval and the
# log pipe's delay on a loaded machine, generously.
PASS_READ_SLACK = 0.5
QUARANTINE_LINE = re.compile(r"^<3>quarantined wedged vGPU VF .*\bvf=(\S+)")
UNREADABLE_LINE = re.compile(r"^<3>instance record unreadable\b.*")


def chaos_config(path, work):
    """fake-qemu as the VMM with short timeouts; the sentinel every second, one failure
    quarantines and the breaker never suppresses, so wedged VFs give quarantines quickly."""
    vt.write_config(path, work, reconcile="%ds" % RECONCILE, extra_top="""qemu_binary: "%s"
qemu_accel: tcg
image_dirs:
  - "%s"
vmm:
  boot_timeout: 2s
  stop_timeout: 2s
""" % (FAKE_QEMU, IMAGES), extra_gpu="""  vfio_term_grace: 1s
  sentinel_interval: 1s
  vf_quarantine_threshold: 1
  breaker:
    enabled: false
""")
    return path


# ---- the load ---------------------------------------------------------------------------------


class Load:
    """CLIENTS threads doing lifecycle operations and quarantines on one daemon until stopped.
    Every operation is registered while its request is out, so the kill can be aimed at one
    and the phase it landed in recorded."""

    def __init__(self, c, iteration, seed, instances, vfs, target, volumes=()):
        self.c, self.iteration, self.target = c, iteration, target
        self.instances = instances  # {id: {"name", "state"}}, shared with the next iteration
        self.vfs = vfs
        self.volumes = list(volumes)  # REL-11: ids hot-attached and detached among the actions
        self.lock = threading.Condition()
        self.in_flight = {}         # token -> (kind, instance id or name, start)
        self.taken = set()          # instance ids a client works on
        self.acked = {}             # vf -> text, quarantines whose 200 arrived
        self.errors = []            # requests that failed while the daemon ran
        self.counts = {}            # "kind:status" -> operations answered
        self.started = {k: 0 for k in PHASES}
        self.paused = threading.Event()
        self.stopping = threading.Event()
        self.killing = threading.Event()  # set just before the SIGKILL
        self.serial = 0
        self.threads = [threading.Thread(target=self._run, args=(k, seed * 100 + k), daemon=True)
                        for k in range(CLIENTS)]
        for t in self.threads:
            t.start()

    # ---- bookkeeping

    def _begin(self, kind, subject):
        with self.lock:
            self.serial += 1
            token = self.serial
            self.in_flight[token] = (kind, subject, time.monotonic())
            self.started[kind] = self.started.get(kind, 0) + 1
            self.lock.notify_all()
            return token

    def _end(self, token, status, answer=None):
        """The operation is over; status (None: no answer) and, for a refusal, its code count
        in the iteration's report."""
        with self.lock:
            kind, _, _ = self.in_flight.pop(token)
            if status is not None:
                key = "%s:%s" % (kind, status)
                if status >= 400 and isinstance(answer, dict) and answer.get("code"):
                    key += "/" + answer["code"]
                self.counts[key] = self.counts.get(key, 0) + 1
            self.lock.notify_all()

    def _pick(self, rng, states):
        with self.lock:
            ids = sorted(i for i, s in self.instances.items()
                         if s["state"] in states and i not in self.taken)
            if not ids:
                return None
            iid = rng.choice(ids)
            self.taken.add(iid)
            return iid

    def _release(self, iid, st, b, deleted=False):
        with self.lock:
            self.taken.discard(iid)
            if deleted:
                self.instances.pop(iid, None)
            elif isinstance(b, dict) and b.get("state"):
                self.instances[iid]["state"] = b["state"]
            elif st == 404:
                self.instances.pop(iid, None)

    # ---- the clients

    def _run(self, k, seed):
        rng = random.Random(seed)
        n = 0
        while not self.stopping.is_set():
            if self.paused.is_set():
                self.stopping.wait(0.02)
                continue
            with self.lock:
                pop = len(self.instances)
                running = sum(1 for s in self.instances.values() if s["state"] == "Running")
                down = sum(1 for s in self.instances.values()
                           if s["state"] in ("Stopped", "Failed"))
            weights = {"create": 4 if pop < POPULATION else 1,
                       "delete": 3 if pop > POPULATION else 1,
                       "stop": 2 if running else 0, "start": 2 if down else 0,
                       "quarantine": 1,
                       "attach": 1 if self.volumes and (running or down) else 0,
                       "detach": 1 if self.volumes and (running or down) else 0}
            if weights.get(self.target):  # so that the kill does not wait long for one
                weights[self.target] *= 4
            kinds = sorted(weights)
            kind = rng.choices(kinds, [weights[x] for x in kinds])[0]
            try:
                if kind == "create":
                    n += 1
                    self._create(rng, "i%d-c%d-n%d" % (self.iteration, k, n))
                elif kind == "quarantine":
                    self._quarantine(rng)
                elif kind in ("attach", "detach"):
                    self._volume(rng, kind)
                else:
                    self._lifecycle(rng, kind)
            except Exception as e:  # the daemon died under the request: this client is done
                if self.killing.is_set():
                    return
                # Before the kill a failed request is worth a look: vgpud was running.
                with self.lock:
                    self.errors.append("%s request failed before the kill: %s: %s" % (
                        kind, type(e).__name__, e))
            self.stopping.wait(rng.uniform(0, 0.05))

    def _create(self, rng, name):
        profiles = [p for p, _ in PROFILES]
        profile = rng.choices(profiles, [w for _, w in PROFILES])[0]
        # A few VMMs that make the ladder run (VMM-10) or readiness time out (VMM-5), so that
        # kills land while a VMM is being terminated and INST-21 finds Creating VMMs alive.
        flag = rng.choices((None, "ignore-sigterm", "hang-qmp"), FLAGS)[0]
        if flag:
            sim_ctl("qemu %s %s" % (name, flag))
        # REL-11: most get a port forward of their own, so table vgpud has something to keep;
        # half boot the image on an overlay (some with the kernel too), most of those with a
        # seed, and some get a volume at create.
        data = body(name, profile)
        if rng.random() < 0.7:
            data["network"] = {"mode": "nat", "ports": [
                {"host": next(PORTS), "guest": 22, "protocol": "tcp"}]}
        if rng.random() < IMAGE_SHARE:
            data["image"] = IMAGE
            if rng.random() < 0.7:
                del data["boot"]
            if rng.random() < 0.8:
                data["cloud_init"] = {"ssh_authorized_keys": SSH_KEY, "hostname": name}
        if self.volumes and rng.random() < 0.3:
            data["volumes"] = [{"volume": rng.choice(self.volumes),
                                "readonly": rng.random() < 0.7}]
        token = self._begin("create", name)
        st, b = None, None
        try:
            st, b = request(self.c, "POST", "/instances", data)
        finally:
            self._end(token, st, b)
        if st == 201:
            with self.lock:
                self.instances[b["id"]] = {"name": name, "state": b["state"]}

    def _lifecycle(self, rng, kind):
        states = {"stop": ("Running",), "start": ("Stopped", "Failed"),
                  "delete": ("Running", "Stopped", "Failed")}[kind]
        iid = self._pick(rng, states)
        if not iid:
            return
        st, b = None, None
        token = self._begin(kind, iid)
        try:
            if kind == "delete":
                st, b = delete(self.c, iid)
            else:
                st, b = post(self.c, iid, kind)
        finally:
            self._end(token, st, b)
            self._release(iid, st, b, deleted=(kind == "delete" and st == 204))

    def _volume(self, rng, kind):
        """REL-11, DISK-8: a volume attached (read-only or not) or detached, Running or not;
        the daemon's refusals (a holder, not attached) are part of the game."""
        iid = self._pick(rng, ("Running", "Stopped"))
        if not iid:
            return
        vid = rng.choice(self.volumes)
        st, b = None, None
        token = self._begin(kind, iid)
        try:
            if kind == "attach":
                st, b = request(self.c, "POST", "/instances/%s/volumes" % iid,
                                {"volume": vid, "readonly": rng.random() < 0.5})
            else:
                st, b = request(self.c, "DELETE", "/instances/%s/volumes/%s" % (iid, vid))
        finally:
            self._end(token, st, b)
            # A 404 here is the volume's (not attached), not the instance's.
            self._release(iid, None if st == 404 else st, b)

    def _quarantine(self, rng):
        vf = rng.choice(self.vfs)
        reason = "chaos iteration %d" % self.iteration
        r = self.c.request("POST", "/gpu/vfs/%s/quarantine" % vf, body={"reason": reason})
        if r.status == 200:
            with self.lock:
                self.acked[vf] = "operator quarantine answered 200 in iteration %d" % \
                    self.iteration

    # ---- the main thread's side

    def wait_started(self, kind, timeout):
        """Waits until an operation of kind is in flight; whether one is."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while not any(k == kind for k, _, _ in self.in_flight.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(left)
            return True

    def quiesce(self, timeout):
        """Lets the operations in flight end and starts no more; whether none is left."""
        self.paused.set()
        deadline = time.monotonic() + timeout
        with self.lock:
            while self.in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(left)
            return True

    def first_of(self, kind):
        """(token, subject) of the earliest operation of kind in flight, or (None, None)."""
        with self.lock:
            mine = sorted((t0, token, subject) for token, (k, subject, t0)
                          in self.in_flight.items() if k == kind)
            return (mine[0][1], mine[0][2]) if mine else (None, None)

    def flying(self, token):
        with self.lock:
            return token in self.in_flight

    def snapshot(self):
        with self.lock:
            return sorted(self.in_flight.values(), key=lambda x: x[2])

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(10)
        return not any(t.is_alive() for t in self.threads)


# ---- one daemon -------------------------------------------------------------------------------


class Run:
    def __init__(self, work, seed):
        self.work, self.seed = work, seed
        self.secret = write_secret(work)
        self.sock = os.path.join(work, "api.sock")
        self.config = chaos_config(os.path.join(work, "vgpud.yaml"), work)
        self.daemons = []  # every daemon started, for finish_run's log copies
        self.kept = []     # those whose logs VGPUD_TEST_KEEP keeps
        self.n = 0

    def start(self):
        """A new daemon, ready; (daemon, client) or (daemon, None) when it is not."""
        self.n += 1
        d = Daemon(self.work, "vgpud-%03d" % self.n, self.config)
        self.daemons.append(d)
        c = Client(self.sock, 0, mint(self.secret))
        ready = poll(lambda: not d.alive() or readyz(c, self.sock), 40, 0.05)
        return d, (c if ready and d.alive() else None)


def log_lines(d):
    try:
        return d.log_text().splitlines()
    except FileNotFoundError:
        return []


def wait_recovered(timeout):
    """INST-21's waiting actions run as operations after READY=1: poll the records on disk
    until none is in a transient state. Whether that happened within timeout."""
    def settled():
        records, _, _ = truth.read_records()
        return not any(r["state"] in truth.TRANSIENT for r in records.values())
    return poll(settled, timeout, 0.1)


DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "\u00b5s": 1e-6,
                  "\\xc2\\xb5s": 1e-6, "ns": 1e-9}
DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s|us|\u00b5s|\\xc2\\xb5s|ns)")


def pass_duration(line):
    """REC-11's duration= in seconds (GEN-12's Go-style text, "\xc2\xb5s" as the log escapes it)."""
    m = re.search(r'\bduration="?([^" ]+)', line)
    return sum(float(v) * DURATION_UNITS[u] for v, u in DURATION_PART.findall(m.group(1))) if m \
        else 0.0


def wait_pass(d, timeout):
    """Waits for a reconcile pass that started after this call (REC-1, REC-11's line). A pass
    line seen at time t with duration D started before t - D (the line is read a little after
    it is written), so one whose t - D - SLACK is not after the call may have started before it
    and the next one is awaited. Returns the seconds waited, or None."""
    t0 = time.monotonic()
    seen = sum(1 for l in log_lines(d) if PASS_LINE.search(l))

    def done():
        nonlocal seen
        lines = [l for l in log_lines(d) if PASS_LINE.search(l)]
        now = time.monotonic()
        for line in lines[seen:]:
            seen += 1
            if now - pass_duration(line) - PASS_READ_SLACK > t0:
                return True
        return False
    return time.monotonic() - t0 if poll(done, timeout, 0.05) else None


def clear_quarantines(c):
    """Clears every VF record of the health file through the API, so that the last
    iteration's quarantines do not drain capacity; the answers must be 200 (HEALTH-25)."""
    bad = []
    for vf in sorted(truth.quarantined_vfs(vt.HEALTH_FILE)):
        r = c.request("DELETE", "/gpu/vfs/%s/quarantine" % vf)
        if r.status != 200:
            bad.append("clearing %s answered %d: %r" % (vf, r.status, r.body[:200]))
    return bad


def kill_orphans(pic):
    """SIGKILL to every VMM no record names, once reported, so one iteration's leak does not
    pile up VMMs over the run (REC-6 then resets the VF it held)."""
    names = {r.get("hypervisor", {}).get("pid") for r in pic.records.values()}
    for v in pic.vmms.values():
        if v.pid not in names:
            try:
                os.kill(v.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def describe_in_flight(items, at_kill):
    """'create i3-c0-n2 (record Creating, claim 0000:e3:00.5, no pid), stop <id> (...)' from
    the operations in flight and the records right after the kill."""
    by_name = {r["name"]: (i, r) for i, r in at_kill.records.items()}
    out = []
    for kind, subject, _ in items:
        iid, r = by_name.get(subject, (subject, at_kill.records.get(subject)))
        if r is None:
            what = "no record"
        else:
            gpu, hyp = r.get("gpu", {}), r.get("hypervisor", {})
            what = "record %s%s%s" % (
                r["state"],
                ", claim %s" % os.path.basename(gpu["device_path"]) if "device_path" in gpu
                else (", no claim" if "profile" in gpu else ", no GPU"),
                ", pid %s" % hyp["pid"] if "pid" in hyp else ", no pid")
        out.append("%s %s (%s)" % (kind, subject if subject == iid else "%s=%s" % (subject, iid),
                                   what))
    return "; ".join(out) or "nothing"


# ---- aiming the kill --------------------------------------------------------------------------

# Where inside an operation of each kind the kill is aimed: a milestone the record on disk (and
# the VMM) must show first, and the most the kill then waits (uniformly drawn). Creates spend most
# of their time claiming, and stops and deletes take tens of milliseconds, so aiming at the steps
# (INST-12, INST-15, INST-18) rather than at a fraction of the duration reaches each window.
MILESTONES = {
    "create": (("begin", 0.01), ("claiming", 0.3), ("claimed", 0.01), ("spawned", 0.08)),
    "start": (("begin", 0.01), ("claiming", 0.3), ("claimed", 0.01), ("spawned", 0.08)),
    "stop": (("begin", 0.005), ("stopping", 0.02), ("exited", 0.01)),
    "delete": (("begin", 0.005), ("deleting", 0.02), ("exited", 0.01), ("removing", 0.0)),
}


def find_named(name):
    for iid in (os.listdir(INSTANCES) if os.path.isdir(INSTANCES) else ()):
        r = record(iid) if truth.ID.fullmatch(iid) else None
        if r and r.get("name") == name:
            return iid
    return None


def reached(milestone, r, pid):
    """Whether record r (None once removed) and VMM pid show milestone."""
    if milestone == "begin":
        return True
    if r is None:
        return milestone == "removing"
    gpu, hyp = r.get("gpu", {}), r.get("hypervisor", {})
    if milestone == "claiming":
        return r["state"] == "Creating"
    if milestone == "claimed":
        return r["state"] == "Creating" and ("device_path" in gpu or "profile" not in gpu)
    if milestone == "spawned":
        return r["state"] == "Creating" and "pid" in hyp
    if milestone == "stopping":
        return r["state"] == "Stopping"
    if milestone == "deleting":
        return r["state"] == "Deleting"
    if milestone == "exited":
        return r["state"] in ("Stopping", "Deleting") and pid is not None and not alive(pid)
    return False


def aim(load, kind, rng):
    """Waits (bounded) for an operation of kind to start and to reach a milestone drawn by rng,
    then a drawn delay; returns the milestone aimed at."""
    milestone, jitter = rng.choice(MILESTONES[kind])
    load.wait_started(kind, 3)
    token, subject = load.first_of(kind)
    iid = None if kind == "create" else subject
    pid = None
    deadline = time.monotonic() + 3
    while token and load.flying(token) and time.monotonic() < deadline:
        if iid is None:
            iid = find_named(subject)
        r = record(iid) if iid else None
        if r:
            pid = r.get("hypervisor", {}).get("pid") or pid
        if (iid or milestone == "begin") and reached(milestone, r, pid):
            break
        time.sleep(0.002)
    time.sleep(rng.uniform(0, jitter))
    return milestone


def step_of(kind, subject, pic):
    """The step of INST-12/15/17/18 an operation of kind on subject (a name for a create) was
    in, read from the records, the model and the VMMs right after the kill."""
    by_name = {r["name"]: i for i, r in pic.records.items()}
    iid = by_name.get(subject) if kind == "create" else subject
    r = pic.records.get(iid)
    if r is None:
        return {"create": "validate", "delete": "remove"}.get(kind, "gone")
    gpu, hyp = r.get("gpu", {}), r.get("hypervisor", {})
    vf = os.path.basename(gpu.get("device_path", "")) or None
    if kind in ("create", "start"):
        if r["state"] != "Creating":
            return "validate" if r["state"] in ("Stopped", "Failed") else "done"
        if "pid" in hyp:
            return "readiness"
        files = pic.files.get(iid, [])
        if kind == "create" and "disk" in r and truth.ROOT_OVERLAY not in files:
            return "overlay"
        if "profile" in gpu and not vf:
            return "claim" if truth.SEED in files or not truth.wants_seed(r) else "seed"
        if vf and vf not in pic.configured():
            return "configure"
        return "spawn"
    live = bool(pic.vmms_of(iid))
    if r["state"] in ("Stopping", "Deleting"):
        return "ladder" if live else "release"
    return "begin" if r["state"] == "Running" or kind == "delete" else "done"


# ---- the checker checked ----------------------------------------------------------------------


def hand_record(iid, name, state, vf=None):
    """A record as INST-2 writes it, for the checker's self-test (no daemon runs)."""
    rec = {"version": 1, "id": iid, "name": name, "state": state,
           "created_at": "2026-01-01T00:00:00Z", "boot": {"kernel": KERNEL}, "vcpus": 1,
           "memory_mb": 256, "gpu": {"profile": PROFILE}}
    if vf:
        rec["gpu"].update(framework="vendor-vfio", claimed_at="2026-01-01T00:00:00Z",
                          device_path=os.path.join(MNT, "sys/bus/pci/devices", vf))
    os.makedirs(os.path.join(INSTANCES, iid))
    with open(os.path.join(INSTANCES, iid, "instance.json"), "w") as f:
        json.dump(rec, f)


def check_checker(vfs):
    """Before any daemon runs: each kind of damage REL-2 names, made by hand, is reported by
    chaos_truth.check() as exactly that, and a clean host as nothing; then it is all undone."""
    leak, double, stale = vfs[1], vfs[2], vfs[3]
    ids = {k: (k * 20) for k in "abcd"}
    deleted = os.path.join(INSTANCES, ".deleted-" + "e" * 20)
    os.makedirs(INSTANCES, mode=0o700, exist_ok=True)
    try:
        eq(truth.check(truth.Picture(FAKE_QEMU), vt.VGPUD, {}), [],
           "REL-2 checker: a clean host has no violation")
        type_2q = [t for t, n in read_creatable(leak) if n == PROFILE][0]
        configure(leak, type_2q)
        configure(double, type_2q)
        hand_record(ids["a"], "self-a", "Creating", double)
        hand_record(ids["b"], "self-b", "Stopped", double)
        hand_record(ids["c"], "self-c", "Failed", stale)
        os.makedirs(os.path.join(INSTANCES, ids["d"]))
        with open(os.path.join(INSTANCES, ids["d"], "instance.json"), "w") as f:
            f.write('{"version": 1, "id": "%s", "id": "%s"}' % (ids["d"], ids["d"]))
        os.makedirs(deleted)
        got = truth.check(truth.Picture(FAKE_QEMU), vt.VGPUD, {vfs[4]: "a test's quarantine"})
        eq(sorted((v.kind, v.subject) for v in got),
           sorted([("leak", leak), ("double-claim", double), ("stale-claim", double),
                   ("stale-claim", stale), ("record-unloadable", ids["d"]),
                   ("quarantine-lost", vfs[4]), ("leftover", os.path.basename(deleted)),
                   ("transient", ids["a"])]),
           "REL-2 checker: a leak, a double claim, stale claims, an unloadable record, a lost "
           "quarantine, a leftover tree and a transient record are each reported")
    finally:
        for iid in ids.values():
            shutil.rmtree(os.path.join(INSTANCES, iid), ignore_errors=True)
        shutil.rmtree(deleted, ignore_errors=True)
        for vf in (leak, double):
            configure(vf, 0)
    eq(truth.check(truth.Picture(FAKE_QEMU), vt.VGPUD, {}), [],
       "REL-2 checker: the host is clean again")

    # What only live VMMs can show, on a made-up reading (pids far above the namespace's).
    pic = truth.Picture(FAKE_QEMU)
    on, off, other = vfs[5], vfs[6], vfs[7]
    for vf in (on, other):
        pic.vfs[vf] = dict(pic.vfs[vf], type=1155, profile=PROFILE, open_handles=1)
    pic.vfs[off] = dict(pic.vfs[off], open_handles=1)
    pic.state = dict(pic.state, forbidden_writes=["sys/bus/pci/devices/%s/reset" % on])
    path = os.path.join(MNT, "sys/bus/pci/devices")
    pic.records = {
        ids["a"]: {"id": ids["a"], "name": "self-a", "state": "Running",
                   "gpu": {"device_path": os.path.join(path, on)},
                   "hypervisor": {"pid": 4000001, "start_time": 1}},
        ids["b"]: {"id": ids["b"], "name": "self-b", "state": "Running",
                   "gpu": {"device_path": os.path.join(path, other)},
                   "hypervisor": {"pid": 4000002, "start_time": 1}},
    }
    vmm = truth.Vmm(pid=0, id=None, name=None, vf=None, qmp=None, start_time=1)
    pic.vmms = {4000001: vmm._replace(pid=4000001, id=ids["a"], vf=on),
                4000003: vmm._replace(pid=4000003, id=ids["a"], vf=off),
                4000002: vmm._replace(pid=4000002, id=ids["b"], vf=on),
                4000004: vmm._replace(pid=4000004, id=ids["c"], vf=None)}
    got = truth.check(pic, vt.VGPUD, {})
    eq(sorted(set((v.kind, v.subject) for v in got)),
       sorted([("forbidden-write", "sys/bus/pci/devices/%s/reset" % on),
               ("open-unconfigured", off), ("vmm-twice", ids["a"]), ("vmm-vf", ids["a"]),
               ("vmm-vf", off), ("vmm-vf", ids["b"]), ("orphan-vmm", ids["c"])]),
       "REL-2 checker: a forbidden write, a VFIO node open on an unconfigured VF, two VMMs "
       "for one record, VMMs on VFs their records do not claim and a VMM without a record "
       "are each reported")

    # REL-11's network damage, on a made-up reading: one address in two records, a hosts file
    # that misses one, a table without a record's forward, a TAP of no live VMM.
    pic = truth.Picture(FAKE_QEMU)
    forward = {"host": 20000, "guest": 22, "protocol": "tcp"}
    pic.records = {
        ids["a"]: {"id": ids["a"], "name": "self-a", "state": "Running",
                   "network": {"mode": "nat", "mac": "52:54:00:00:00:01", "ip": "10.233.0.2",
                               "ports": [forward]}},
        ids["b"]: {"id": ids["b"], "name": "self-b", "state": "Stopped",
                   "network": {"mode": "nat", "mac": "52:54:00:00:00:02", "ip": "10.233.0.2"}},
    }
    pic.hosts = "10.233.0.2 self-a.vgpud.internal self-a\n"
    pic.table = "table inet vgpud {\n\tchain postrouting {\n\t\tmasquerade\n\t}\n}\n"
    tap = "vgt" + ids["c"][:12]
    pic.taps, pic.vmms = [tap], {}
    got = truth.check(pic, vt.VGPUD, {})
    eq(sorted(set((v.kind, v.subject) for v in got)),
       sorted([("address-twice", "10.233.0.2"), ("hosts-file", "hosts"), ("table", "vgpud"),
               ("tap-orphan", tap)]),
       "REL-11 checker: an address held twice, a hosts file and a table that differ from the "
       "records and a TAP of no live VMM are each reported")

    # REL-11's disk damage, on a made-up reading: a volume read-write in one record and
    # read-only in another, an intent left unsettled, volumes that do not exist.
    pic = truth.Picture(FAKE_QEMU)
    v1, v2 = "v" * 20, "w" * 20
    pic.records = {
        ids["a"]: {"id": ids["a"], "name": "self-a", "state": "Running",
                   "volumes": [{"id": v1, "readonly": False, "state": "attached"}]},
        ids["b"]: {"id": ids["b"], "name": "self-b", "state": "Stopped",
                   "volumes": [{"id": v1, "readonly": True, "state": "attached"},
                               {"id": v2, "readonly": False, "state": "attaching"}]},
    }
    pic.vmms = {}
    got = truth.check(pic, vt.VGPUD, {})
    eq(sorted(set((v.kind, v.subject) for v in got if v.kind.startswith("volume"))),
       sorted([("volume-twice", v1), ("volume-intent", ids["b"]), ("volume-missing", v1),
               ("volume-missing", v2)]),
       "REL-11 checker: a volume read-write beside another holder, an unsettled intent and a "
       "record naming a missing volume are each reported (DISK-7, DISK-8)")

    # REL-11's file damage, on a made-up reading: an overlay and a seed beside a record that
    # names no image, a seed's temp file, a settled record that lost its overlay, an image
    # whose bytes changed, and a volume directory without volume.json.
    pic = truth.Picture(FAKE_QEMU)
    pic.records = {
        ids["a"]: {"id": ids["a"], "name": "self-a", "state": "Stopped"},
        ids["b"]: {"id": ids["b"], "name": "self-b", "state": "Running",
                   "disk": {"image": "img", "size_gb": 1}},
    }
    pic.files = {ids["a"]: ["instance.json", "root.qcow2", "seed.iso"],
                 ids["b"]: ["console.log", "instance.json", "seed.iso", "seed.iso.tmp"]}
    pic.volume_files = {v1: ["volume.qcow2"], v2: ["volume.json", "volume.qcow2"]}
    pic.vmms = {}
    saved = dict(truth.IMAGE_DIGESTS)
    truth.IMAGE_DIGESTS.clear()
    truth.IMAGE_DIGESTS["img"] = "0" * 64
    pic.image_digests = {"img": "1" * 64}
    try:
        got = truth.check(pic, vt.VGPUD, {})
    finally:
        truth.IMAGE_DIGESTS.clear()
        truth.IMAGE_DIGESTS.update(saved)
    eq(sorted(set((v.kind, v.subject) for v in got if v.kind in (
        "disk-orphan", "overlay-missing", "image-changed", "volume-orphan"))),
       sorted([("disk-orphan", ids["a"] + "/root.qcow2"), ("disk-orphan", ids["a"] + "/seed.iso"),
               ("disk-orphan", ids["b"] + "/seed.iso.tmp"), ("overlay-missing", ids["b"]),
               ("image-changed", "img"), ("volume-orphan", v1)]),
       "REL-11 checker: an overlay or seed no record names, a half-written seed, a lost "
       "overlay, a changed image and a volume directory without its record are each reported "
       "(DISK-5, DISK-11, SEED-2)")


# ---- the iterations ---------------------------------------------------------------------------


class Tally:
    """Violations as runs of iterations: one problem (kind, subject) counts once from the first
    iteration that shows it until the first that does not."""

    def __init__(self):
        self.open = {}      # (kind, subject) -> the violation dict being extended
        self.all = []

    def iteration(self, i, seed, found, context):
        keys = set()
        for v in found:
            key = (v.kind, v.subject)
            if key in keys:
                continue
            keys.add(key)
            if key in self.open:
                self.open[key]["last"] = i
            else:
                entry = {"first": i, "last": i, "seed": seed, "kind": v.kind,
                         "subject": v.subject, "text": v.text, "context": context}
                self.open[key] = entry
                self.all.append(entry)
        for key in list(self.open):
            if key not in keys:
                del self.open[key]
        return [e for e in self.all if e["first"] == i]


def iteration(run, i, rng, d, c, state):
    """One kill and recovery on top of daemon d; returns (d, c, result) for the next one."""
    t_start = time.monotonic()
    iseed = rng.randrange(1 << 31)
    irng = random.Random(iseed)
    phase_target = irng.choices(PHASES, PHASE_WEIGHTS)[0]

    # Before the load: last iteration's quarantines cleared, a fresh set of VFs wedged.
    problems = clear_quarantines(c)
    for vf in state["wedged"]:
        sim_ctl("unwedge %s" % vf)
    state["wedged"] = irng.sample(state["vfs"], WEDGED)
    for vf in state["wedged"]:
        sim_ctl("wedge %s" % vf)
    log_mark = len(log_lines(d))
    state["instances"] = {x["id"]: {"name": x["name"], "state": x["state"]}
                          for x in c.get("/instances").json()}

    load = Load(c, i, iseed, state["instances"], state["vfs"], phase_target,
                state.get("volumes", []))
    aimed = None
    if phase_target == "idle":
        time.sleep(irng.uniform(0.3, 1.5))
        if not load.quiesce(45):
            problems.append("operations still in flight 45 s after the load paused")
        time.sleep(irng.uniform(0, 0.2))
    else:
        aimed = aim(load, phase_target, irng)
    load.killing.set()
    flying = load.snapshot()
    d.stop(signal.SIGKILL)
    t_kill = time.monotonic()
    kinds = [k for k, _, _ in flying]
    phase = phase_target if phase_target in kinds else (kinds[-1] if kinds else "idle")
    if not load.stop():
        problems.append("a client did not finish within 10 s of the kill")
    problems += load.errors
    at_kill = truth.Picture(FAKE_QEMU)
    step = None
    if phase != "idle":
        step = step_of(phase, [x for k, x, _ in flying if k == phase][0], at_kill)

    # Acknowledged quarantines: the 200s, and the sentinel's lines since the clears.
    acked = dict(load.acked)
    for line in log_lines(d)[log_mark:]:
        m = QUARANTINE_LINE.search(line)
        if m:
            acked.setdefault(m.group(1), "logged `quarantined wedged vGPU VF` in iteration %d" % i)

    # The next daemon: ready, recovered, and one whole pass after that.
    d, c = run.start()
    timings = {"kill_to_ready": time.monotonic() - t_kill}
    found = []
    if c is None:
        found.append(truth.Violation("not-ready", "vgpud", "GEN-10: vgpud did not become "
                                     "ready after the kill: %s" % " | ".join(log_lines(d)[-5:])))
    else:
        if not wait_recovered(20):
            problems.append("records still transient 20 s after readiness")
        waited = wait_pass(d, 2 * RECONCILE + 5)
        timings["pass_wait"] = waited
        if waited is None:
            problems.append("no `reconcile pass done` line within %d s" % (2 * RECONCILE + 5))
        for line in log_lines(d):
            m = QUARANTINE_LINE.search(line)
            if m:
                acked.setdefault(m.group(1), "logged `quarantined wedged vGPU VF` by the "
                                 "restarted daemon")
            if UNREADABLE_LINE.search(line):
                found.append(truth.Violation("record-unloadable", line.split("instance_id=")[-1]
                                             .split()[0], "REL-2, INST-22: vgpud logged: " + line))
    after = truth.Picture(FAKE_QEMU)
    found += truth.check(after, vt.VGPUD, acked)
    for p in problems:
        found.append(truth.Violation("harness", p, "harness: " + p))
    kill_orphans(after)
    result = {
        "phase": phase, "step": step, "aimed": aimed, "target": phase_target, "seed": iseed,
        "in_flight": describe_in_flight(flying, at_kill), "found": found,
        "started": dict(load.started), "answered": dict(load.counts),
        "at_kill": at_kill.summary(), "after": after.summary(),
        "seconds": time.monotonic() - t_start, "timings": timings,
        "acked": (sum(1 for t in acked.values() if t.startswith("operator")),
                  sum(1 for t in acked.values() if t.startswith("logged"))),
    }
    return d, c, result


def import_image(c, work):
    """REL-11's image and key: a small raw disk imported as IMAGE (DISK-2), its digest kept for
    the checker (an overlay must never write through to it), and an ed25519 key for the seeds.
    Whether the image became ready."""
    source = os.path.join(IMAGES, "chaos.raw")
    with open(source, "wb") as f:
        f.write(b"chaos image\n" * 4096)
        f.truncate(4 << 20)
    key = os.path.join(work, "chaos-key")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "chaos@vgpud", "-f",
                    key], check=True)
    with open(key + ".pub") as f:
        SSH_KEY[:] = [f.read().strip()]
    st, b = request(c, "POST", "/images", {"name": IMAGE, "source": source})
    if st != 202:
        print("# POST /images answered %s: %r" % (st, b))
        return False
    poll(lambda: c.get("/images/" + IMAGE).json().get("state") != "importing", 60, 0.1)
    if c.get("/images/" + IMAGE).json().get("state") != "ready":
        return False
    truth.IMAGE_DIGESTS[IMAGE] = truth.sha256_of(os.path.join(truth.IMAGES, IMAGE, "disk.qcow2"))
    return truth.IMAGE_DIGESTS[IMAGE] is not None


def arguments():
    p = argparse.ArgumentParser(description="vgpud crash-consistency chaos test (REL-1, REL-2)")
    p.add_argument("--iterations", type=int,
                   default=int(os.environ.get("VGPUD_CHAOS_ITERATIONS", "50")))
    p.add_argument("--seed", type=int, default=None)
    args = p.parse_args(sys.argv[5:])
    if args.seed is None:
        env = os.environ.get("VGPUD_CHAOS_SEED")
        args.seed = int(env) if env else random.SystemRandom().randrange(1 << 31)
    return args


def main():
    args = arguments()
    print("# chaos: seed %d, %d iterations (replay: --seed %d or VGPUD_CHAOS_SEED=%d)" % (
        args.seed, args.iterations, args.seed, args.seed))
    sys.stdout.flush()
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="vgpud-chaos-")
    # dnsmasq reads its files as nobody, as from /run/vgpud (0755).
    os.chmod(work, 0o755)
    truth.NETWORK_DIR = os.path.join(work, "run", "network")
    run = Run(work, args.seed)
    tally = Tally()
    phases = {p: 0 for p in PHASES}
    steps = {}
    seconds = []
    try:
        make_images()
        vfs = [v["address"] for g in sim_state()["gpus"] for v in g["vfs"]]
        state = {"vfs": vfs, "wedged": [], "instances": {}}
        run_group("checker", lambda: check_checker(vfs))
        d, c = run.start()
        if not ok(c is not None, "GEN-10: the first vgpud becomes ready", log_lines(d)[-20:]):
            return 1
        # REL-11: volumes for the clients to attach and detach.
        state["volumes"] = []
        for k in range(VOLUMES):
            r = c.request("POST", "/volumes", body={"name": "chaos-vol-%d" % k, "size_gb": 1})
            if ok(r.status == 201, "DISK-7: chaos volume %d is created" % k, r.body[-200:]):
                state["volumes"].append(r.json()["id"])
        if not ok(import_image(c, work), "DISK-2: image %s is imported and ready" % IMAGE):
            return 1
        for i in range(1, args.iterations + 1):
            d, c, res = iteration(run, i, rng, d, c, state)
            phases[res["phase"]] += 1
            seconds.append(res["seconds"])
            new = tally.iteration(i, res["seed"], res["found"], res["in_flight"])
            where = res["phase"] + ("/" + res["step"] if res["step"] else "")
            steps[where] = steps.get(where, 0) + 1
            label = "iteration %d (seed %d): kill during %s [in flight: %s] %.1f s" % (
                i, res["seed"], where, res["in_flight"], res["seconds"])
            detail = ["%s%s" % ("" if e in new else "(still) ", v.text)
                      for v in res["found"]
                      for e in [tally.open.get((v.kind, v.subject))]]
            detail += ["at the kill: " + res["at_kill"], "after the pass: " + res["after"],
                       "operations started %s, answered %s" % (res["started"], res["answered"]),
                       "quarantines acknowledged: %d by the API, %d by the sentinel's line; "
                       "kill to ready %.2f s, pass wait %s" % (
                           res["acked"][0], res["acked"][1], res["timings"]["kill_to_ready"],
                           "%.2f s" % res["timings"]["pass_wait"]
                           if res["timings"].get("pass_wait") is not None else "none")]
            ok(not res["found"], "REL-2: " + label, "\n".join(detail))
            if not res["found"]:
                print("#   " + "\n#   ".join(detail))
            if res["found"]:
                run.kept += run.daemons[-2:]
            if c is None:
                break
        if d.alive():
            d.stop(signal.SIGTERM)
    finally:
        for d in run.daemons:
            d.stop(signal.SIGKILL)
        for v in truth.vmm_processes(FAKE_QEMU).values():
            try:
                os.kill(v.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        print("# chaos: %d iterations, kills by phase: %s, violations: %d" % (
            len(seconds), " ".join("%s=%d" % (p, phases[p]) for p in PHASES), len(tally.all)))
        print("# chaos: kills by step: %s" % " ".join(
            "%s=%d" % kv for kv in sorted(steps.items())))
        if seconds:
            print("# chaos: %.1f s per iteration on average (min %.1f, max %.1f); seed %d" % (
                sum(seconds) / len(seconds), min(seconds), max(seconds), args.seed))
        for e in tally.all:
            span = ("iteration %d" % e["first"] if e["first"] == e["last"] else
                    "iterations %d..%d" % (e["first"], e["last"]))
            print("# violation: %s (seed %d, run seed %d): %s [%s %s]; kill during: %s" % (
                span, e["seed"], args.seed, e["text"], e["kind"], e["subject"], e["context"]))
        sys.stdout.flush()
        keep = [d for d in run.daemons if d in run.kept]
        finish_run(keep, work)
    return vt.exit_status()


if __name__ == "__main__":
    sys.exit(main())
