# SPDX-License-Identifier: GPL-2.0-or-later
#
# chaos_truth: the host as it is, read without vgpud's API, and REL-2's invariants over it.
#
# A Picture is one reading of the simulator's model (.sim/state.json: configured VFs, open VFIO
# handles, forbidden writes), every instance record on the simulator's data/ as vgpud would load
# it (INST-2), the health file (HEALTH-1, checked by `vgpud health-check`), the fake-qemu
# processes alive in the test's PID namespace (their argv names instance, QMP socket and VF,
# VMM-1) and the Unix sockets listening in /proc/net/unix (VMM-17). check() turns a Picture and
# the quarantines acknowledged before a kill into a list of Violations, each naming the
# requirement it breaks and the VF or record it concerns.
import hashlib
import json
import os
import re
import subprocess
from collections import namedtuple

import vgpud_test as vt
from vgpud_instances import INSTANCES, alive

ID = re.compile(r"[a-z0-9]{20}")
STATES = ("Creating", "Running", "Stopping", "Stopped", "Failed", "Deleting")
TRANSIENT = ("Creating", "Stopping", "Deleting")

# INST-2's keys, by object, with the JSON type each holds.
TOP_KEYS = {"version": int, "id": str, "name": str, "state": str, "created_at": str,
            "error": str, "boot": dict, "vcpus": int, "memory_mb": int, "gpu": dict,
            "placement": dict, "hypervisor": dict, "disk": dict, "volumes": list, "network": dict,
            "cloud_init": dict}
TOP_REQUIRED = ("version", "id", "name", "state", "created_at", "vcpus", "memory_mb")
BOOT_KEYS = {"kernel": str, "initrd": str, "cmdline": str, "disk": str}
GPU_KEYS = {"profile": str, "framework": str, "device_path": str, "mdev_uuid": str,
            "claimed_at": str}
HYPERVISOR_KEYS = {"pid": int, "start_time": int, "boot_id": str, "qmp_socket": str,
                   "agent_socket": str, "console_socket": str}
DISK_KEYS = {"image": str, "size_gb": int}
NETWORK_KEYS = {"mode": str, "bridge": str, "mac": str, "ip": str, "prefix": int, "gateway": str,
                "dns": list, "ports": list}

# REL-11: where the NAT network's files are (<runtime_dir>/network), set by the test; None skips
# the network's checks.
NETWORK_DIR = None
VOLUMES = os.path.join(vt.MNT, "data", "volumes")
IMAGES = os.path.join(vt.MNT, "data", "images")
# REL-11: {image name: SHA-256 of its disk.qcow2 when it became ready}, set by the test; an
# overlay's writes must never reach its backing file (DISK-5).
IMAGE_DIGESTS = {}
ROOT_OVERLAY, SEED = "root.qcow2", "seed.iso"
# What an instance directory holds besides its overlay and seed (INST-1, VMM-1, CONS-1); the
# VMM's sockets live under runtime_dir.
INSTANCE_FILES = {"instance.json", "console.log", "qemu.log"}

Violation = namedtuple("Violation", "kind subject text")
Vmm = namedtuple("Vmm", "pid id name vf qmp start_time")


class DuplicateKey(ValueError):
    pass


def _no_duplicates(pairs):
    obj = {}
    for k, v in pairs:
        if k in obj:
            raise DuplicateKey("duplicate key %r" % k)
        obj[k] = v
    return obj


def _check_object(obj, keys, scope):
    for k, v in obj.items():
        if k not in keys:
            return "unknown key %s%s" % (scope, k)
        # bool is an int in Python; INST-2 has no booleans.
        if not isinstance(v, keys[k]) or isinstance(v, bool):
            return "%s%s must be a JSON %s" % (scope, k, keys[k].__name__)
    return None


def record_error(iid, text):
    """Why instance.json text of directory iid would not load (INST-2), or None."""
    try:
        rec = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as e:
        return "not JSON: %s" % e
    if not isinstance(rec, dict):
        return "not a JSON object"
    why = _check_object(rec, TOP_KEYS, "")
    if why:
        return why
    missing = [k for k in TOP_REQUIRED if k not in rec]
    if "boot" not in rec and "disk" not in rec:
        missing.append("boot or disk")  # DISK-5: a kernel, an image, or both
    if missing:
        return "missing %s" % ", ".join(missing)
    if rec["version"] != 1:
        return "version %r" % rec["version"]
    if rec["id"] != iid:
        return "id %r in directory %s" % (rec["id"], iid)
    if rec["state"] not in STATES:
        return "state %r" % rec["state"]
    for key, keys in (("boot", BOOT_KEYS), ("gpu", GPU_KEYS), ("hypervisor", HYPERVISOR_KEYS),
                      ("disk", DISK_KEYS), ("network", NETWORK_KEYS)):
        if key in rec:
            why = _check_object(rec[key], keys, key + ".")
            if why:
                return why
    gpu = rec.get("gpu", {})
    claim = [k for k in ("framework", "device_path", "claimed_at") if k in gpu]
    if claim and len(claim) != 3:
        return "gpu claim incomplete: only %s" % ", ".join(claim)
    hyp = rec.get("hypervisor", {})
    if ("pid" in hyp) != ("start_time" in hyp):
        return "hypervisor.pid and hypervisor.start_time must be given together"
    return None


def read_records():
    """({id: record}, {id: why it does not load}, [leftover entries]) from instances/ on the
    simulator's data/. Leftovers are what INST-20 says start-up removes: .deleted-* trees and
    instance directories without instance.json."""
    records, bad, leftovers = {}, {}, []
    if not os.path.isdir(INSTANCES):  # before the first daemon creates it (CFG-5)
        return records, bad, leftovers
    for name in sorted(os.listdir(INSTANCES)):
        path = os.path.join(INSTANCES, name)
        if name.startswith(".deleted-"):
            leftovers.append(name)
            continue
        if not ID.fullmatch(name) or not os.path.isdir(path):
            continue
        try:
            with open(os.path.join(path, "instance.json")) as f:
                text = f.read()
        except FileNotFoundError:
            leftovers.append(name)
            continue
        why = record_error(name, text)
        if why:
            bad[name] = why
        else:
            records[name] = json.loads(text)
    return records, bad, leftovers


def instance_files():
    """{instance id: [file names in its directory]} for every instance directory."""
    out = {}
    if os.path.isdir(INSTANCES):
        for name in sorted(os.listdir(INSTANCES)):
            if ID.fullmatch(name) and os.path.isdir(os.path.join(INSTANCES, name)):
                out[name] = sorted(os.listdir(os.path.join(INSTANCES, name)))
    return out


def sha256_of(path):
    """The file's SHA-256 in hex, or None when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def wants_seed(rec):
    """SEED-1: an instance gets a seed when it boots an image or has cloud_init."""
    return "disk" in rec or "cloud_init" in rec


def stat_start_time(pid):
    """Field 22 of /proc/<pid>/stat (VMM-16), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return int(f.read().rsplit(") ", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def _option(argv, flag, prefix):
    """The value after flag in argv that starts with prefix (VMM-1's keyval options)."""
    for a, b in zip(argv, argv[1:]):
        if a == flag and b.startswith(prefix):
            return b
    return None


def vmm_processes(binary):
    """{pid: Vmm} for every live process running binary (fake-qemu), from its argv (VMM-1)."""
    found = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
        except OSError:
            continue
        if not argv or os.path.basename(argv[0]) != os.path.basename(binary) or \
                not alive(int(p)):
            continue
        name = _option(argv, "-name", "guest=")
        qmp = _option(argv, "-chardev", "socket,id=qmp,")
        dev = _option(argv, "-device", "vfio-pci,")
        qmp_path = re.search(r",path=([^,]*)", qmp).group(1) if qmp else None
        found[int(p)] = Vmm(
            pid=int(p),
            id=os.path.basename(os.path.dirname(qmp_path)) if qmp_path else None,
            name=name[len("guest="):].split(",")[0] if name else None,
            vf=os.path.basename(re.search(r"sysfsdev=([^,]*)", dev).group(1)) if dev else None,
            qmp=qmp_path, start_time=stat_start_time(int(p)))
    return found


def listening_sockets():
    """Paths of listening Unix sockets in /proc/net/unix (VMM-17: flags 00010000)."""
    paths = set()
    with open("/proc/net/unix") as f:
        for line in f.read().splitlines()[1:]:
            cols = line.split()
            if len(cols) >= 8 and cols[3] == "00010000":
                paths.add(cols[7])
    return paths


def network_reading():
    """(hosts file text, table vgpud text, [TAP names]) as the host holds them now; (None, None,
    []) without NETWORK_DIR."""
    if not NETWORK_DIR:
        return None, None, []
    try:
        with open(os.path.join(NETWORK_DIR, "hosts")) as f:
            hosts = f.read()
    except FileNotFoundError:
        hosts = ""
    r = subprocess.run(["nft", "list", "table", "inet", "vgpud"], capture_output=True, text=True)
    links = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, text=True)
    taps = [l["ifname"] for l in json.loads(links.stdout or "[]")
            if l["ifname"].startswith("vgt")]
    return hosts, r.stdout if r.returncode == 0 else "", taps


class Picture:
    """One reading of the host; read VMMs and sockets last, so that a VMM seen alive is never
    older than the records it is compared with."""

    def __init__(self, fake_qemu):
        self.state = vt.sim_state()
        self.records, self.bad, self.leftovers = read_records()
        self.files = instance_files()
        self.volume_files = {n: sorted(os.listdir(os.path.join(VOLUMES, n)))
                             for n in (os.listdir(VOLUMES) if os.path.isdir(VOLUMES) else [])
                             if ID.fullmatch(n)}
        self.image_digests = {n: sha256_of(os.path.join(IMAGES, n, "disk.qcow2"))
                              for n in IMAGE_DIGESTS}
        self.hosts, self.table, self.taps = network_reading()
        self.vmms = vmm_processes(fake_qemu)
        self.listening = listening_sockets()
        self.vfs = {v["address"]: v for g in self.state["gpus"] for v in g["vfs"]}

    def configured(self):
        """{vf: profile} of the VFs the model has configured (a vGPU type or an mdev)."""
        return {a: v["profile"] for a, v in self.vfs.items()
                if v["type"] != 0 or v["mdev"] is not None}

    def claims(self):
        """{vf: [record ids]} from gpu.device_path."""
        out = {}
        for iid, r in sorted(self.records.items()):
            path = r.get("gpu", {}).get("device_path")
            if path:
                out.setdefault(os.path.basename(path), []).append(iid)
        return out

    def vmms_of(self, iid):
        return [v for v in self.vmms.values() if v.id == iid]

    def vmm_alive(self, iid):
        """Whether the VMM of record iid is alive or may be alive: a fake-qemu of that instance
        runs, the recorded pid runs with the recorded start_time (VMM-16), or its recorded QMP
        socket is listened on (VMM-17)."""
        if self.vmms_of(iid):
            return True
        hyp = self.records.get(iid, {}).get("hypervisor", {})
        pid = hyp.get("pid")
        if pid and alive(pid) and stat_start_time(pid) == hyp.get("start_time"):
            return True
        return hyp.get("qmp_socket") in self.listening

    def describe(self, iid):
        r = self.records.get(iid)
        if r is None:
            return "%s (no record)" % iid
        hyp = r.get("hypervisor", {})
        return "%s %s %s%s%s" % (iid, r["name"], r["state"],
                                 " pid=%s" % hyp["pid"] if "pid" in hyp else " no-pid",
                                 " error=%r" % r["error"] if "error" in r else "")

    def summary(self):
        """A few lines for a report: records by state, configured VFs, VMMs."""
        by_state = {}
        for r in self.records.values():
            by_state[r["state"]] = by_state.get(r["state"], 0) + 1
        return "records %s, configured VFs %d, claims %d, VMMs %d" % (
            " ".join("%s=%d" % kv for kv in sorted(by_state.items())) or "none",
            len(self.configured()), sum(len(v) for v in self.claims().values()), len(self.vmms))


def health_error(vgpud, path):
    """Why the health file would not load (`vgpud health-check`), or None; a missing file is
    an empty store (HEALTH-1)."""
    if not os.path.exists(path):
        return None
    p = subprocess.run([vgpud, "health-check", path], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=30)
    return None if p.returncode == 0 else (p.stdout.decode(errors="replace").strip() or
                                           "exit status %d" % p.returncode)


def quarantined_vfs(path):
    """VF addresses with quarantined_at in the health file (HEALTH-2); {} when it is missing or
    does not parse (health_error() reports that)."""
    try:
        with open(path) as f:
            doc = json.load(f)
        return {r["vf_address"]: r for r in doc.get("records", []) if r.get("quarantined_at")}
    except (FileNotFoundError, ValueError, AttributeError, KeyError, TypeError):
        return {}


def check(pic, vgpud, acked):
    """REL-2 over a Picture taken after a restart and a reconcile pass. acked: {vf: how the
    quarantine was acknowledged before the kill}. Returns [Violation]."""
    out = []
    add = lambda kind, subject, text: out.append(Violation(kind, subject, text))  # noqa: E731
    conf, claims = pic.configured(), pic.claims()

    # Every record loads (REL-2); start-up removed what INST-20 says it removes.
    for iid, why in sorted(pic.bad.items()):
        add("record-unloadable", iid, "REL-2: instance record %s does not load: %s" % (iid, why))
    for name in pic.leftovers:
        add("leftover", name, "INST-20: %s survives a restart" % name)
    for iid, r in sorted(pic.records.items()):
        if r["state"] in TRANSIENT:
            add("transient", iid, "INST-21: %s still %s after recovery and a reconcile pass"
                % (pic.describe(iid), r["state"]))

    # No VF claimed twice.
    for vf, ids in sorted(claims.items()):
        if len(ids) > 1:
            add("double-claim", vf, "REL-2: %s claimed by %d records: %s" % (
                vf, len(ids), "; ".join(pic.describe(i) for i in ids)))

    # No VF configured without a claim whose VMM is alive or may be alive.
    for vf, profile in sorted(conf.items()):
        ids = claims.get(vf, [])
        users = [v for v in pic.vmms.values() if v.vf == vf]
        if not ids:
            add("leak", vf, "REL-2: %s configured (%s) without a claim%s" % (
                vf, profile, "; VMM pid %s of %s holds it" % (users[0].pid, users[0].id)
                if users else ", no VMM on it (REC-6 resets such a VF)"))
        elif not any(pic.vmm_alive(i) for i in ids):
            add("stale-claim", vf, "REL-2: %s configured (%s), claimed by %s whose VMM is gone "
                "(REC-4 releases such a claim)" % (vf, profile, pic.describe(ids[0])))
    # A claim on a VF the model has not configured holds capacity the same way (REC-4).
    for vf, ids in sorted(claims.items()):
        if vf not in conf and not any(pic.vmm_alive(i) for i in ids):
            add("stale-claim", vf, "REC-4: %s claimed by %s whose VMM is gone (VF not "
                "configured)" % (vf, pic.describe(ids[0])))

    # No VF released while its VFIO node was open.
    for w in pic.state.get("forbidden_writes", []):
        add("forbidden-write", w, "SIM-16: forbidden write to %s" % w)
    for vf, v in sorted(pic.vfs.items()):
        if v["open_handles"] > 0 and vf not in conf:
            add("open-unconfigured", vf, "REL-2: %s unconfigured while %d handle(s) hold its "
                "VFIO node open" % (vf, v["open_handles"]))

    # Every live VMM is one a record accounts for (OPS-3 leaves them running across a kill;
    # INST-21 adopts or terminates each), and runs on the VF its record claims.
    per_id = {}
    for v in pic.vmms.values():
        per_id.setdefault(v.id, []).append(v)
    for iid, vs in sorted(per_id.items(), key=lambda kv: str(kv[0])):
        pids = ", ".join(str(v.pid) for v in vs)
        r = pic.records.get(iid)
        if len(vs) > 1:
            add("vmm-twice", iid, "%d VMMs run for instance %s: pids %s" % (len(vs), iid, pids))
        if r is None:
            add("orphan-vmm", iid, "VMM pid %s (%s, VF %s) runs with no record" % (
                pids, vs[0].name, vs[0].vf))
            continue
        if r.get("hypervisor", {}).get("pid") not in [v.pid for v in vs]:
            add("orphan-vmm", iid, "VMM pid %s runs for %s whose record does not name it" % (
                pids, pic.describe(iid)))
        claim = os.path.basename(r.get("gpu", {}).get("device_path", "")) or None
        for v in vs:
            if v.vf and v.vf != claim:
                add("vmm-vf", iid, "REL-2: VMM pid %d of %s runs on %s but the record claims %s" %
                    (v.pid, pic.describe(iid), v.vf, claim))
            if v.vf and v.vf not in conf:
                add("vmm-vf", v.vf, "REL-2: VMM pid %d of %s runs on %s, which is not "
                    "configured" % (v.pid, iid, v.vf))

    # REL-11: no address held by two records; table vgpud and the hosts file match the records
    # exactly; every TAP belongs to a live VMM.
    if NETWORK_DIR:
        nat = {iid: r["network"] for iid, r in pic.records.items()
               if r.get("network", {}).get("mode") == "nat" and "ip" in r["network"]}
        holders = {}
        for iid, n in sorted(nat.items()):
            holders.setdefault(n["ip"], []).append(iid)
        for addr, ids in sorted(holders.items()):
            if len(ids) > 1:
                add("address-twice", addr, "REL-11: address %s held by %s" % (addr, ", ".join(ids)))
        want = sorted("%s %s.vgpud.internal %s" % (n["ip"], pic.records[i]["name"],
                                                   pic.records[i]["name"])
                      for i, n in nat.items())
        if sorted(pic.hosts.splitlines()) != want:
            add("hosts-file", "hosts", "REL-11: the hosts file %r differs from the records %r" %
                (sorted(pic.hosts.splitlines()), want))
        want_dnat = sorted("%s dport %d dnat ip to %s:%d" % (p["protocol"], p["host"], n["ip"],
                                                             p["guest"])
                           for n in nat.values() for p in n.get("ports", []))
        got_dnat = sorted(set(re.findall(r"(\w+ dport \d+ dnat ip to [\d.]+:\d+)", pic.table)))
        # No table at all is right only before any daemon made one for a nat record.
        if (pic.table or nat) and ("masquerade" not in pic.table or got_dnat != want_dnat):
            add("table", "vgpud", "REL-11: table vgpud %r does not match the records' forwards %r"
                % (got_dnat if pic.table else "missing", want_dnat))
        for tap in pic.taps:
            ids = [i for i in pic.records if i.startswith(tap[3:])]
            if not ids or not any(pic.vmm_alive(i) for i in ids):
                add("tap-orphan", tap, "REL-11: TAP %s belongs to no live VMM (%s)" % (
                    tap, ", ".join(pic.describe(i) for i in ids) or "no record"))

    # REL-11, DISK-8: no volume attached read-write to two records, nor read-write and
    # read-only at once; every attach or detach a kill cut short is settled after a pass; every
    # volume a record names exists.
    volume_holders = {}
    for iid, r in sorted(pic.records.items()):
        for v in r.get("volumes", []):
            volume_holders.setdefault(v["id"], []).append((iid, bool(v.get("readonly"))))
            if v.get("state", "attached") != "attached":
                add("volume-intent", iid, "DISK-8: %s still has volume %s %s after a pass" % (
                    pic.describe(iid), v["id"], v["state"]))
            if not os.path.exists(os.path.join(VOLUMES, v["id"], "volume.json")):
                add("volume-missing", v["id"], "DISK-7: %s names volume %s, which does not "
                    "exist" % (pic.describe(iid), v["id"]))
    for vid, names in sorted(pic.volume_files.items()):
        extra = sorted(set(names) - {"volume.json", "volume.qcow2"})
        if "volume.json" not in names or extra:
            add("volume-orphan", vid, "REL-11: volume directory %s holds %s" % (
                vid, ", ".join(names) or "nothing"))
    for vid, hs in sorted(volume_holders.items()):
        if any(not ro for _, ro in hs) and len(hs) > 1:
            add("volume-twice", vid, "REL-11: volume %s attached read-write with other "
                "holders: %s" % (vid, ", ".join("%s%s" % (i, " (ro)" if ro else "")
                                                for i, ro in hs)))

    # REL-11, DISK-5, SEED-2: no overlay or seed that its record does not name, and no file
    # half-written by a kill left beside them; a settled record with an image keeps its overlay;
    # no image's bytes changed under its overlays.
    for iid, names in sorted(pic.files.items()):
        r = pic.records.get(iid)
        if r is None:
            continue  # no instance.json: a leftover, reported above
        for name in names:
            if name == ROOT_OVERLAY and "disk" not in r or name == SEED and not wants_seed(r):
                add("disk-orphan", "%s/%s" % (iid, name), "REL-11: %s holds %s, which its "
                    "record does not name" % (pic.describe(iid), name))
            elif name not in INSTANCE_FILES | {ROOT_OVERLAY, SEED}:
                add("disk-orphan", "%s/%s" % (iid, name), "REL-11: %s holds %s, which no "
                    "record names" % (pic.describe(iid), name))
        if "disk" in r and r["state"] in ("Running", "Stopped") and ROOT_OVERLAY not in names:
            add("overlay-missing", iid, "DISK-5: %s boots image %s but has no %s" % (
                pic.describe(iid), r["disk"].get("image"), ROOT_OVERLAY))
    for name, digest in sorted(IMAGE_DIGESTS.items()):
        if pic.image_digests.get(name) != digest:
            add("image-changed", name, "DISK-5: image %s's disk.qcow2 is %s, %s when imported"
                % (name, pic.image_digests.get(name) or "unreadable", digest))

    # Every quarantine acknowledged before the kill is present; the health file loads.
    path = vt.HEALTH_FILE
    why = health_error(vgpud, path)
    if why:
        add("health-unloadable", path, "REL-2: %s does not load: %s" % (path, why))
    if os.path.exists(path + ".tmp"):
        add("leftover", "vf-health.json.tmp", "HEALTH-19: vf-health.json.tmp survives a restart")
    present = quarantined_vfs(path)
    for vf, how in sorted(acked.items()):
        if vf not in present:
            add("quarantine-lost", vf, "REL-2: quarantine of %s (%s) is not in %s" % (
                vf, how, os.path.basename(path)))
    return out
