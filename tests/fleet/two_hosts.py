# SPDX-License-Identifier: GPL-2.0-or-later
#
# two_hosts: what FLEET-8's test (tests/fleet/test-fleet-two-hosts.py) and its benchmark
# (bench/fleet.py) share: a fleet of two simulated vgpud hosts in one PID namespace against one
# real placement-api, and `vgpuctl fleet` run against them.
#
# tests/sim/run-sim-test.sh mounts the first simulator (VGPU_SIM_MOUNT); the second is started
# here on a mount point of its own inside the same namespace, with its own host file, and is
# stopped by pid and unmounted at the end. Each vgpud has its own work directory (socket, runtime
# dir, secret, token), data dir (its simulator's data/), TCP port and placement.host_name; both
# read the kernel image from one shared directory, since `vgpuctl fleet create` sends the same
# body to whichever host Placement chooses.
import json
import os
import signal
import subprocess
import time
import uuid

import vgpud_test as vt
from vgpud_test import free_port, mint, poll, write_secret


def root_uuid(host):
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "vgpud:" + host))


def pf_uuid(host, pf):
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "vgpud:%s:%s" % (host, pf)))


def pf_name(host, pf):
    return host + "_pci_" + pf.replace(":", "_").replace(".", "_")


def profile_gib(name):
    return vt.profile_gib(name)



def sim_state_of(ctl_dir):
    """A simulator's state.json (SIM-14), by its control directory."""
    with open(os.path.join(ctl_dir, "state.json")) as f:
        return json.load(f)


def sim_ctl_of(ctl_dir, command):
    """One command to a simulator's ctl file (SIM-14), by its control directory."""
    with open(os.path.join(ctl_dir, "ctl"), "w") as f:
        f.write(command)

class Simulator:
    """A second vgpu-sim, mounted at <work>/<name>-sim until stop()."""

    def __init__(self, vgpu_sim, host_yaml, work, name):
        self.mnt = os.path.join(work, name + "-sim")
        self.ctl_dir = os.path.join(self.mnt, ".sim")
        os.makedirs(self.mnt)
        self.log = open(os.path.join(work, name + "-sim.log"), "w")
        self.proc = subprocess.Popen([vgpu_sim, "--host", host_yaml, "--mount", self.mnt,
                                      "--foreground"], stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=subprocess.STDOUT)

    def wait(self, timeout=20):
        return poll(lambda: self.proc.poll() is not None or
                    os.path.exists(os.path.join(self.ctl_dir, "state.json")), timeout, 0.05) \
            and self.proc.poll() is None

    def state(self):
        return sim_state_of(self.ctl_dir)

    def ctl(self, command):
        sim_ctl_of(self.ctl_dir, command)

    def stop(self):
        """SIGTERM (a clean unmount), 10 s, then SIGKILL and a lazy unmount; the exit status."""
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait()
        with open("/proc/self/mountinfo") as f:
            mounted = (" %s " % self.mnt) in f.read()
        if mounted:
            subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
            subprocess.run(["umount", "-l", self.mnt], capture_output=True)
        try:
            os.rmdir(self.mnt)
        except OSError:
            pass
        self.log.close()
        return rc


class Host:
    """One vgpud of the fleet: its simulator's mount and control directory, its files, its TCP
    port and token, and (once started) its Daemon and API client."""

    def __init__(self, work, name, mnt, ctl_dir, sim=None):
        self.name, self.mnt, self.ctl_dir, self.sim = name, mnt, ctl_dir, sim
        self.work = os.path.join(work, name)
        os.makedirs(self.work, exist_ok=True)
        self.sock = os.path.join(self.work, "api.sock")
        self.config = os.path.join(self.work, "vgpud.yaml")
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.secret = write_secret(self.work)
        self.token_file = os.path.join(self.work, "token")
        with open(self.token_file, "w") as f:
            f.write(mint(self.secret, exp_delta=6 * 3600) + "\n")
        os.chmod(self.token_file, 0o600)
        self.daemon = self.client = None

    def write_config(self, placement_url, fake_nvml, fake_qemu, images, sync_interval="10m"):
        with open(self.config, "w") as f:
            f.write("""listen: "127.0.0.1:%d"
unix_socket: "%s"
jwt_secret_file: "%s/jwt.secret"
data_dir: "%s/data"
runtime_dir: "%s/run"
sysfs_root: "%s/sys"
dev_root: "%s/dev"
nvml_library: "%s"
log_level: info
qemu_binary: "%s"
qemu_accel: tcg
image_dirs:
  - "%s"
vmm:
  boot_timeout: 10s
  stop_timeout: 2s
network:
  # Two hosts in one network namespace would share one NAT bridge and subnet: the fleet's VMs
  # get no NIC (the network has its own tests, tests/api/test-network.py).
  default_mode: none
gpu:
  reconcile_interval: 5s
  vfio_term_grace: 1s
placement:
  url: "%s"
  host_name: %s
  sync_interval: %s
""" % (self.port, self.sock, self.work, self.mnt, self.work, self.mnt, self.mnt, fake_nvml,
                fake_qemu, images, placement_url, self.name, sync_interval))

    def start(self, label):
        """Starts vgpud against this host's simulator; (daemon, client or None)."""
        self.daemon, self.client = vt.start(self.work, label, self.config, self.secret,
                                            self.sock, extra_env={"VGPU_SIM_CONTROL":
                                                                  self.ctl_dir}, timeout=60)
        return self.daemon, self.client

    def state(self):
        return sim_state_of(self.ctl_dir)

    def ctl(self, command):
        sim_ctl_of(self.ctl_dir, command)

    def pfs(self):
        """{pf: [vf addresses]} from /gpus."""
        return {g["address"]: [v["address"] for v in g["vfs"]]
                for g in self.client.get("/gpus").json()["gpus"]}

    def instances(self):
        return self.client.get("/instances").json()


def write_hosts_file(path, hosts):
    """The hosts file of vgpuctl(1), with token files relative to it where they can be."""
    base = os.path.dirname(path)
    with open(path, "w") as f:
        json.dump({"hosts": [{"name": h.name, "url": h.url,
                              "token_file": os.path.relpath(h.token_file, base)}
                             for h in hosts]}, f, indent=2)


def make_kernel(images):
    os.makedirs(images, exist_ok=True)
    kernel = os.path.join(images, "vmlinuz")
    with open(kernel, "w") as f:
        f.write("a kernel for fake-qemu\n")
    return kernel


class Fleetctl:
    """`vgpuctl fleet ...` against one Placement and one hosts file."""

    def __init__(self, vgpuctl, placement_url, hosts_file, kernel):
        self.vgpuctl, self.placement_url, self.hosts_file = vgpuctl, placement_url, hosts_file
        self.kernel = kernel

    def run(self, *args, timeout=900):
        """(exit status, stdout, stderr) of `vgpuctl fleet ARGS --placement P --hosts F`."""
        p = subprocess.run([self.vgpuctl, "fleet"] + list(args) +
                           ["--placement", self.placement_url, "--hosts", self.hosts_file],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=timeout, env={k: v for k, v in os.environ.items()
                                                 if not k.startswith("VGPUD_")})
        return p.returncode, p.stdout, p.stderr

    def json(self, *args, **kw):
        """(exit status, parsed --json output or None, stderr)."""
        rc, out, err = self.run(*(list(args) + ["--json"]), **kw)
        try:
            return rc, json.loads(out), err
        except ValueError:
            return rc, None, err + out

    def create(self, name, profile, count=1):
        """(exit status, {"instances", "reschedules"} or None, stderr, wall seconds)."""
        t0 = time.monotonic()
        rc, out, err = self.json("create", "--profile", profile, "--name", name, "--vcpus", "1",
                                 "--memory-mb", "256", "--kernel", self.kernel, "--cmdline",
                                 "console=ttyS0", "--count", str(count))
        return rc, out, err, time.monotonic() - t0

    def delete(self, iid, host):
        return self.run("delete", iid, "--host", host)
