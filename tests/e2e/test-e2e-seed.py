#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-e2e-seed.py VGPUD OPENAPI_YAML FAKE_NVML BUILD_IMAGE_SH IMAGE_DIR VGPU_AGENT QEMU
#
# SEED-7 end to end: vgpud runs the Debian 12 cloud image of build-image.sh (SEED-6) in the real
# QEMU under TCG, with its own seeds, disks and NAT network, and the test uses the VMs as an
# operator would, by `ssh` with a key it made. Under tests/sim/run-sim-test.sh with the host's
# network (a first build of the image fetches Debian packages); once the image is built the test
# moves itself into a network namespace of its own and binds the tun device over the
# simulator's dev/net/tun, so vgpud's bridge, TAPs, nftables table and dnsmasq exist there only
# (REL-9). data_dir is a plain directory of the work tree (the images are large).
#
# The steps: import the image through POST /images; create two instances from it in nat mode
# with an SSH key and a port forward (booting together); SSH into each by address and through
# its port forward, check the host name, the address and vgpud.internal resolution of the
# other; a file written on one root disk is absent from the other; the image's digest is
# unchanged; the agent answers guest-gpu-init-status through vgpud's agent socket; a volume
# hot-attached to the first while it runs gets data and is detached, and after that instance's
# delete is attached at the creation of a third, which reads it back; stop and start of the second (booting beside the
# third) keep address, disk contents and keys; kill -9 of vgpud and a restart while both run
# leave SSH answering; then everything is deleted and no TAP,
# address, nftables rule, dnsmasq host line or file is left.
# Whatever happens, the daemon and every QEMU under the work tree are killed and the tree
# removed; the namespace goes with the process. Output is TAP; timings go to comments.
import ctypes
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_guest import (  # noqa: E402 (after the path)
    agent_call, kill_qemus, note, skip_all, tail)
from vgpud_test import (  # noqa: E402 (e2e_guest put tests/lib on the path)
    MNT, context, eq, error_of, exit_status, finish, ok, poll, run_group, start, stop,
    write_secret)

BUILD_IMAGE, IMAGE_DIR, AGENT, QEMU = sys.argv[4:8]
CLONE_NEWNET = 0x40000000
TUN = os.path.join(MNT, "dev", "net", "tun")
GATEWAY = "10.233.0.1"  # network.nat.subnet's first address, the bridge's
IMAGE = "debian-12"
# Bounds, not waits. Measured here: the image answers SSH about 40-70 s after QEMU starts under
# TCG, two at once on 2 cores somewhat later; the machine may be loaded by other suites.
IMAGE_TIMEOUT = 900
IMPORT_TIMEOUT = 300
SSH_TIMEOUT = 420
LIFECYCLE_TIMEOUT = 120
AGENT_TIMEOUT = 60
PORTS = {"seed-a": 20022, "seed-b": 20023, "seed-c": 20024}
T0 = time.monotonic()


def elapsed():
    return time.monotonic() - T0


# ---- the host side --------------------------------------------------------------------------


def build_image():
    t0 = time.monotonic()
    p = subprocess.run([BUILD_IMAGE, IMAGE_DIR, AGENT], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=IMAGE_TIMEOUT)
    return p.returncode, p.stdout.decode(errors="replace"), time.monotonic() - t0


def enter_network_namespace():
    """This process (and so the daemon it starts) leaves the host's network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        return "unshare(CLONE_NEWNET): %s" % os.strerror(ctypes.get_errno())
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["mount", "--bind", "/dev/net/tun", TUN], check=True)
    return None


def write_config(path, work):
    """vgpud on the simulator's sysfs and dev, the real QEMU under TCG, data and runtime
    directories of the work tree, the image directory as the import source, nat by default."""
    with open(path, "w") as f:
        f.write("""listen: ""
unix_socket: "%(work)s/api.sock"
jwt_secret_file: "%(work)s/jwt.secret"
data_dir: "%(work)s/data"
runtime_dir: "%(work)s/run"
sysfs_root: "%(mnt)s/sys"
dev_root: "%(mnt)s/dev"
nvml_library: "%(nvml)s"
qemu_binary: "%(qemu)s"
qemu_accel: tcg
image_dirs:
  - "%(images)s"
log_level: debug
vmm:
  boot_timeout: 60s
  stop_timeout: 90s
network:
  default_mode: nat
""" % {"work": work, "mnt": MNT, "nvml": context()["FAKE_NVML"], "qemu": QEMU,
           "images": os.path.realpath(IMAGE_DIR)})
    return path


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def taps():
    out = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return re.findall(r"^\d+: (vgt[^:@]*)", out, re.M)


def nft_table():
    return subprocess.run(["nft", "list", "table", "inet", "vgpud"], capture_output=True,
                          text=True).stdout


# ---- the guest side -------------------------------------------------------------------------


class Key:
    def __init__(self, work):
        self.path = os.path.join(work, "id_ed25519")
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "seed-e2e@host",
                        "-f", self.path], check=True)
        self.public = open(self.path + ".pub").read().strip()


def ssh(key, host, command, port=22, user="debian", timeout=30):
    """`ssh` as an operator runs it; (exit status, stdout stripped, stderr)."""
    argv = ["ssh", "-i", key.path, "-p", str(port), "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", "%s@%s" % (user, host), command]
    try:
        p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return -1, "", "timed out"
    return p.returncode, p.stdout.decode(errors="replace").strip(), \
        p.stderr.decode(errors="replace")


def wait_ssh(key, host, port=22, user="debian", timeout=SSH_TIMEOUT, alive=lambda: True):
    """Seconds until ssh answered, or None."""
    t0 = time.monotonic()
    if poll(lambda: not alive() or ssh(key, host, "true", port, user)[0] == 0, timeout, 2) \
            and alive():
        return time.monotonic() - t0
    return None


# ---- the API --------------------------------------------------------------------------------


class Api:
    """The client of the daemon running now, and how to reach it."""

    def __init__(self, work, config, secret):
        self.work, self.config, self.secret = work, config, secret
        self.sock = os.path.join(work, "api.sock")
        self.daemons = []
        self.d = self.c = None

    def start(self, name):
        self.d, self.c = start(self.work, name, self.config, self.secret, self.sock)
        self.daemons.append(self.d)
        return self.c is not None

    def request(self, method, path, data=None, timeout=LIFECYCLE_TIMEOUT):
        from vgpud_test import Response, UnixConnection
        conn = UnixConnection(self.sock, timeout)
        h = {"Authorization": "Bearer " + self.c.token}
        payload = None
        if data is not None:
            payload = json.dumps(data).encode()
            h["Content-Type"] = "application/json"
        try:
            conn.request(method, path, body=payload, headers=h)
            r = conn.getresponse()
            return error_of(Response(r.status, {k.lower(): v for k, v in r.getheaders()},
                                     r.read()))
        finally:
            conn.close()

    def get(self, path):
        return self.request("GET", path)[1]


def create_body(name, key, volumes=(), root_login=False):
    """A create from the image in nat mode with a port forward to sshd. root_login: the key in
    user data that also lets root in (cloud-init's disable_root), for a guest that must write a
    block device (the image has no sudo); otherwise the key as ssh_authorized_keys."""
    if root_login:
        cloud_init = {"user_data": "#cloud-config\ndisable_root: false\n"
                                   "ssh_authorized_keys:\n  - %s\n" % key.public}
    else:
        cloud_init = {"ssh_authorized_keys": [key.public]}
    b = {"name": name, "vcpus": 1, "memory_mb": 1024, "image": IMAGE,
         "network": {"mode": "nat",
                     "ports": [{"host": PORTS[name], "guest": 22, "protocol": "tcp"}]},
         "cloud_init": cloud_init}
    if volumes:
        b["volumes"] = [{"volume": v} for v in volumes]
    return b


def qemu_alive(api, iid):
    rec = api.get("/instances/" + iid) or {}
    return rec.get("state") == "Running"


# ---- the steps ------------------------------------------------------------------------------


class State:
    def __init__(self):
        self.vms = {}  # name -> instance JSON at create
        self.volume = None
        self.image_digest = None


def check_import(api, st):
    t0 = time.monotonic()
    source = os.path.join(os.path.realpath(IMAGE_DIR), "debian-12.qcow2")
    status, b = api.request("POST", "/images", {"name": IMAGE, "source": source})
    if not ok(status == 202, "DISK-2, SEED-7: the image is imported through POST /images",
              (status, b)):
        return False
    done = poll(lambda: (api.get("/images/" + IMAGE) or {}).get("state") != "importing",
                IMPORT_TIMEOUT, 1)
    img = api.get("/images/" + IMAGE) or {}
    if not ok(done and img.get("state") == "ready", "DISK-2: the image is ready", img):
        return False
    note("import: %.1f s" % (time.monotonic() - t0))
    st.image_digest = sha256_of(os.path.join(api.work, "data", "images", IMAGE, "disk.qcow2"))
    return True


def check_two_instances(api, key, st):
    status, vol = api.request("POST", "/volumes", {"name": "data-1", "size_gb": 1})
    if not ok(status == 201, "DISK-7: a volume is created", (status, vol)):
        return False
    st.volume = vol
    t0 = time.monotonic()
    # SEED-7: two instances from the image; they boot together (the create answers once QEMU
    # is ready, the guest boots on).
    for name, body in (("seed-a", create_body("seed-a", key, root_login=True)),
                       ("seed-b", create_body("seed-b", key))):
        status, b = api.request("POST", "/instances", body)
        if not ok(status == 201 and b.get("state") == "Running",
                  "SEED-7: %s is created from the image in nat mode" % name,
                  (status, b, tail(api.d.log_text(), 20))):
            return False
        st.vms[name] = b
    waits = {}

    def wait(name, user):
        vm = st.vms[name]
        waits[name] = wait_ssh(key, vm["network"]["ip"], user=user,
                               alive=lambda: qemu_alive(api, vm["id"]))
    threads = [threading.Thread(target=wait, args=("seed-a", "root")),
               threading.Thread(target=wait, args=("seed-b", "debian"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in ("seed-a", "seed-b"):
        if not ok(waits.get(name) is not None,
                  "SEED-7: %s answers ssh at its address with the test's key" % name,
                  tail(open(os.path.join(api.work, "data", "instances", st.vms[name]["id"],
                                         "console.log"), errors="replace").read(), 40)):
            return False
    note("two instances, create to both answering SSH: %.1f s" % (time.monotonic() - t0))
    return True


def check_guests(api, key, st):
    a, b = st.vms["seed-a"], st.vms["seed-b"]
    for vm, user in ((a, "root"), (b, "debian")):
        name, ip = vm["name"], vm["network"]["ip"]
        rc, out, err = ssh(key, ip, "hostname", user=user)
        eq((rc, out), (0, name), "SEED-1, SEED-7: %s's host name is its instance name" % name)
        rc, out, err = ssh(key, ip, "ip -4 -o addr show dev eth0; cat /sys/class/net/eth0/address",
                           user=user)
        ok(rc == 0 and "%s/24" % ip in out and vm["network"]["mac"] in out,
           "SEED-3, SEED-7: %s's eth0 has its address and MAC" % name, out + err)
        rc, out, err = ssh(key, GATEWAY, "hostname", port=PORTS[name], user=user)
        eq((rc, out), (0, name),
           "NET-1, SEED-7: ssh through %s's port forward reaches it" % name)
    rc, out, err = ssh(key, a["network"]["ip"], "getent hosts seed-b.vgpud.internal", user="root")
    ok(rc == 0 and out.split()[:1] == [b["network"]["ip"]],
       "NET-6, SEED-3, SEED-7: seed-a resolves seed-b.vgpud.internal to its address", out + err)
    rc, out, err = ssh(key, b["network"]["ip"], "getent hosts seed-a")
    ok(rc == 0 and out.split()[:1] == [a["network"]["ip"]],
       "SEED-3, SEED-7: seed-b resolves seed-a through the search domain", out + err)

    # SEED-7, DISK-5: each root disk is the instance's own.
    rc, out, err = ssh(key, a["network"]["ip"], "echo only-on-a > /root/probe && sync && "
                       "cat /root/probe", user="root")
    eq((rc, out), (0, "only-on-a"), "DISK-5: a file is written on seed-a's root disk")
    rc, out, err = ssh(key, b["network"]["ip"], "test -e /root/probe; echo $?; "
                       "ls /home/debian")
    ok(rc == 0 and out.splitlines()[:1] == ["1"],
       "DISK-5, SEED-7: the file is absent from seed-b's root disk", out + err)
    eq(sha256_of(os.path.join(api.work, "data", "images", IMAGE, "disk.qcow2")), st.image_digest,
       "DISK-5, SEED-7: the image's digest is unchanged while both run")

    # SEED-7, AGENT-1: the guest's vgpu-agent under systemd answers through vgpud's socket.
    rec = api.get("/instances/" + b["id"]) or {}
    path = os.path.join(api.work, "run", "instances", b["id"], "agent.sock")
    rc, out, err = ssh(key, b["network"]["ip"], "systemctl is-active vgpu-agent.service")
    eq((rc, out), (0, "active"), "SEED-7: vgpu-agent runs under systemd")
    reply = agent_call(path, {"execute": "guest-gpu-init-status", "id": "e2e-seed"},
                       AGENT_TIMEOUT)
    ok(reply is not None and reply.get("id") == "e2e-seed" and
       (reply.get("return") or {}).get("state") == "unknown",
       "SEED-7: the agent answers guest-gpu-init-status through vgpud's agent socket "
       "(unknown without a GPU)", (reply, rec.get("state")))


def volume_device(vol):
    return "/dev/disk/by-id/virtio-" + vol["id"][:20]


PAYLOAD = "vgpud-volume-payload"


def check_volume_write(api, key, st):
    # DISK-8: the volume hot-attached to seed-a is written from the guest, once the guest's udev
    # has named the new disk (bounded: 10 s).
    a = st.vms["seed-a"]
    dev = volume_device(st.volume)
    rc, out, err = ssh(key, a["network"]["ip"],
                       "for i in $(seq 100); do [ -e %s ] && break; sleep 0.1; done; "
                       "printf %s | dd of=%s bs=512 count=1 conv=sync,fsync status=none && "
                       "head -c %d %s" % (dev, PAYLOAD, dev, len(PAYLOAD), dev), user="root")
    eq((rc, out, err), (0, PAYLOAD, ""), "DISK-8, SEED-7: the hot-attached volume is written")


def check_hot_attach(api, key, st):
    """DISK-8 on a running VM (SEED-7's first volume step): attach to seed-a while it runs,
    write, detach."""
    a = st.vms["seed-a"]
    status, b = api.request("POST", "/instances/%s/volumes" % a["id"],
                            {"volume": st.volume["id"]})
    ok(status == 200, "DISK-8: the volume is attached to the running seed-a", (status, b))
    check_volume_write(api, key, st)
    status, b = api.request("DELETE", "/instances/%s/volumes/%s" % (a["id"], st.volume["id"]))
    ok(status == 200, "DISK-8: and detached again while seed-a runs", (status, b))
    rc, out, err = ssh(key, a["network"]["ip"], "test -e %s && echo present || echo gone" %
                       volume_device(st.volume), user="root")
    eq(out.strip(), "gone", "DISK-8: the guest no longer has the disk")


def check_second_round(api, key, st):
    """seed-a goes and seed-c comes with its volume while seed-b stops and starts: the two boots
    overlap, as the first two did."""
    a, b = st.vms.pop("seed-a"), st.vms["seed-b"]
    ip_b = b["network"]["ip"]
    rc, before, err = ssh(key, ip_b, "echo kept-on-b > ~/kept && sync && "
                          "sha256sum ~/.ssh/authorized_keys")
    ok(rc == 0, "a file is written on seed-b before its stop", err)
    t0 = time.monotonic()
    # DISK-8: the volume leaves with seed-a and is attached at the creation of a third.
    status, _ = api.request("DELETE", "/instances/" + a["id"])
    if not eq(status, 204, "INST-20: seed-a is deleted"):
        return False
    status, c = api.request("POST", "/instances",
                            create_body("seed-c", key, [st.volume["id"]], root_login=True))
    if not ok(status == 201, "DISK-8: seed-c is created with the volume", (status, c)):
        return False
    st.vms["seed-c"] = c
    # SEED-7: stop and start keep address, disk contents and keys.
    status, r = api.request("POST", "/instances/%s/stop" % b["id"])
    if not ok(status == 200 and r.get("state") == "Stopped", "INST-12: seed-b stops", (status, r)):
        return False
    status, r = api.request("POST", "/instances/%s/start" % b["id"])
    if not ok(status == 200 and r.get("state") == "Running", "INST-12: seed-b starts again",
              (status, r)):
        return False
    eq(r.get("network", {}).get("ip"), ip_b, "NET-5, SEED-7: the start keeps its address")
    waits = {}

    def wait(vm, user):
        waits[vm["name"]] = wait_ssh(key, vm["network"]["ip"], user=user,
                                     alive=lambda: qemu_alive(api, vm["id"]))
    threads = [threading.Thread(target=wait, args=(c, "root")),
               threading.Thread(target=wait, args=(b, "debian"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if not ok(waits.get("seed-b") is not None and waits.get("seed-c") is not None,
              "SEED-7: seed-b after its start and the new seed-c answer ssh", waits):
        return False
    note("seed-b's stop and start with seed-c's create, to both answering SSH: %.1f s" %
         (time.monotonic() - t0))
    rc, after, err = ssh(key, ip_b, "cat ~/kept; sha256sum ~/.ssh/authorized_keys")
    eq(after.splitlines(), ["kept-on-b"] + before.splitlines(),
       "SEED-7: disk contents and keys are unchanged by stop and start")
    rc, out, err = ssh(key, c["network"]["ip"], "hostname; head -c %d %s" % (
        len(PAYLOAD), volume_device(st.volume)), user="root")
    eq((rc, out.splitlines()), (0, ["seed-c", PAYLOAD]),
       "DISK-8, SEED-7: seed-c reads back what seed-a wrote on the volume")
    rc, out, err = ssh(key, c["network"]["ip"], "test -e /root/probe; echo $?", user="root")
    eq(out, "1", "DISK-5: seed-c's root disk is its own, not seed-a's")
    return True


def check_daemon_crash(api, key, st):
    # SEED-7, INST-21: kill -9 vgpud while both run; a new one adopts them and SSH answers on.
    users = {"seed-b": "debian", "seed-c": "root"}
    api.d.stop(signal.SIGKILL)
    for name, vm in st.vms.items():
        rc, out, err = ssh(key, vm["network"]["ip"], "hostname", user=users[name])
        eq((rc, out), (0, name), "SEED-7: %s answers ssh while vgpud is down" % name)
    if not api.start("restarted"):
        return
    for name, vm in st.vms.items():
        got = api.get("/instances/" + vm["id"]) or {}
        eq(got.get("state"), "Running", "INST-21: the restarted vgpud shows %s Running" % name)
        rc, out, err = ssh(key, GATEWAY, "hostname", port=PORTS[name], user=users[name])
        eq((rc, out), (0, name),
           "SEED-7: %s answers ssh through its port forward after the restart" % name)


def check_nothing_left(api, st):
    names = list(st.vms)
    macs = [vm["network"]["mac"] for vm in st.vms.values()]
    for name, vm in list(st.vms.items()):
        status, _ = api.request("DELETE", "/instances/" + vm["id"])
        eq(status, 204, "INST-20: %s is deleted" % name)
    if st.volume:
        eq(api.request("DELETE", "/volumes/" + st.volume["id"])[0], 204, "DISK-7: the volume is "
           "deleted")
    if st.image_digest:
        eq(sha256_of(os.path.join(api.work, "data", "images", IMAGE, "disk.qcow2")),
           st.image_digest, "DISK-5, SEED-7: the image's digest is unchanged after every VM ran")
    eq(api.request("DELETE", "/images/" + IMAGE)[0], 204, "DISK-4: the image is deleted")
    eq(taps(), [], "SEED-7, NET-3: no TAP is left")
    net = api.get("/network") or {}
    eq((net.get("nat", {}).get("in_use"), net.get("nat", {}).get("port_forwards")), ([], []),
       "SEED-7, NET-5: no address and no port forward is left")
    ok(poll(lambda: "dnat ip to" not in nft_table() and "dport" not in nft_table(), 10),
       "SEED-7, NET-4: no nftables rule of an instance is left", nft_table())
    hosts = os.path.join(api.work, "run", "network")

    def host_lines():
        return "".join(open(os.path.join(hosts, f)).read() for f in ("hosts", "dhcp-hosts")
                       if os.path.exists(os.path.join(hosts, f)))
    ok(poll(lambda: not any(n in host_lines() or m in host_lines() for n in names for m in macs),
            10), "SEED-7, NET-6: no dnsmasq host line is left", host_lines())
    left = []
    for sub in ("instances", "volumes", "images"):
        d = os.path.join(api.work, "data", sub)
        left += [os.path.join(sub, x) for x in (os.listdir(d) if os.path.isdir(d) else [])]
    d = os.path.join(api.work, "run", "instances")
    left += [os.path.join("run", x) for x in (os.listdir(d) if os.path.isdir(d) else [])]
    eq(left, [], "SEED-7: no instance, volume, image or runtime file is left")


def run(api, key):
    st = State()
    if not api.start("e2e-seed"):
        return
    if not check_import(api, st):
        return
    try:
        if not check_two_instances(api, key, st):
            return
        check_guests(api, key, st)
        check_hot_attach(api, key, st)
        if check_second_round(api, key, st):
            check_daemon_crash(api, key, st)
    finally:
        if api.c:
            check_nothing_left(api, st)
            stop(api.d)


def main():
    if not QEMU or not os.access(QEMU, os.X_OK):
        skip_all("qemu-system-x86_64 not found (scripts/deps.sh installs qemu-system-x86)")
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        skip_all("ssh not found (scripts/deps.sh installs openssh-client)")
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        skip_all("SEED-7: needs root and /dev/net/tun")
    try:
        rc, log, seconds = build_image()
    except (subprocess.TimeoutExpired, OSError) as e:
        rc, log, seconds = -1, str(e), 0
    if not ok(rc == 0, "SEED-6: build-image.sh builds the image", log):
        finish([], tempfile.mkdtemp())
        return exit_status()
    note("image %s in %.1f s" % ("reused" if "build-image: cached:" in log else "built", seconds))
    why = enter_network_namespace()
    if why:
        print("1..0 # SKIP SEED-7: %s" % why)
        return 0
    work = tempfile.mkdtemp(prefix="vgpud-e2e-seed-")
    os.chmod(work, 0o755)  # dnsmasq reads its files as nobody, as from /run/vgpud
    os.makedirs(os.path.join(work, "data"))
    secret = write_secret(work)
    api = Api(work, write_config(os.path.join(work, "vgpud.yaml"), work), secret)
    try:
        run_group("e2e-seed", lambda: run(api, Key(work)))
        note("SEED-7 in %.1f s" % elapsed())
    finally:
        for d in api.daemons:
            d.stop(signal.SIGKILL)
        kill_qemus(work)
        finish(api.daemons, work)
        subprocess.run(["umount", TUN], capture_output=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
