#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-e2e-image.py BUILD_IMAGE_SH IMAGE_DIR VGPU_AGENT MAKE_SEED QEMU
#
# The Debian 12 cloud image of build-image.sh (SEED-6) with a seed of the seed module (SEED-1,
# SEED-2, SEED-3), without vgpud: builds or reuses the image, makes an SSH key, writes the seed
# with make-seed (host name, the key, a static address in nat mode's shape), and boots the image
# with the real QEMU under TCG as a downloaded cloud image boots (SeaBIOS and the image's own
# boot loader, no -kernel) on a qcow2 overlay, the seed attached as SEED-2 says (raw, read-only,
# ide-cd on q35's AHCI bus). QEMU's user-mode network forwards a loopback port to the guest's
# sshd (this test only; vgpud's own NICs are NET-*'s). Then `ssh` with the test's key: the host
# name, the address on eth0 matched by MAC, the NoCloud data source, vgpu-agent active under
# systemd and answering guest-gpu-init-status over virtio-serial. QEMU is killed by process
# group and the work tree removed whatever happens. Output is TAP; timings go to comments.
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_guest import (  # noqa: E402 (after the path)
    Qemu, agent_call, eq, exit_status, keyval, note, ok, plan, poll, read_text, run_group,
    skip_all, tail)

BUILD_IMAGE, IMAGE_DIR, AGENT, MAKE_SEED, QEMU = sys.argv[1:6]

# Bounds, not waits. Measured here: the guest answers SSH about 40-70 s after QEMU starts
# under TCG (SEED-7 says about 40 s); the machine may be loaded by other suites.
IMAGE_TIMEOUT = 900
SSH_TIMEOUT = 300
AGENT_TIMEOUT = 60
HOSTNAME = "seed-e2e-1"
MAC = "52:54:00:5e:ed:01"
# QEMU's user-mode network is 10.0.2.0/24 with its router at .2. The static address is not
# the .15 its DHCP server hands out, so an answer at it proves network-config was applied.
GUEST_IP, PREFIX, GATEWAY = "10.0.2.20", 24, "10.0.2.2"

vms = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_image():
    t0 = time.monotonic()
    p = subprocess.run([BUILD_IMAGE, IMAGE_DIR, AGENT], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=IMAGE_TIMEOUT)
    return p.returncode, p.stdout.decode(errors="replace"), time.monotonic() - t0


def ssh_argv(key, port, command):
    return ["ssh", "-i", key, "-p", str(port), "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", "debian@127.0.0.1", command]


def ssh(key, port, command, timeout=30):
    p = subprocess.run(ssh_argv(key, port, command), stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace").strip(), p.stderr.decode(errors="replace")


def run(work):
    key = os.path.join(work, "id_ed25519")
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "seed-e2e@host",
                    "-f", key], check=True)
    r = subprocess.run([MAKE_SEED, work, "seed.iso", "--instance-id", "e2eimage0000000000001",
                        "--hostname", HOSTNAME, "--ssh-key-file", key + ".pub",
                        "--network", "nat", MAC, GUEST_IP, str(PREFIX), GATEWAY],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if not ok(r.returncode == 0, "SEED-2: make-seed writes the seed ISO", r.stdout.decode()):
        return
    image = os.path.join(IMAGE_DIR, "debian-12.qcow2")
    root = os.path.join(work, "root.qcow2")
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", image, root],
                   check=True)
    digest_before = subprocess.run(["sha256sum", image], stdout=subprocess.PIPE,
                                   check=True).stdout.split()[0]

    port = free_port()
    agent_sock = os.path.join(work, "agent.sock")
    console = os.path.join(work, "console.log")
    argv = [QEMU, "-name", "guest=seed-e2e,debug-threads=on", "-machine", "q35",
            "-accel", "tcg", "-cpu", "max", "-smp", "2", "-m", "1024M", "-nodefaults",
            "-no-user-config", "-display", "none",
            "-chardev", "socket,id=agent0,path=%s,server=on,wait=off" % keyval(agent_sock),
            "-device", "virtio-serial-pci,id=vser0",
            "-device", "virtserialport,bus=vser0.0,chardev=agent0,name=org.vgpud.agent.0",
            "-chardev", "file,id=console0,path=%s,append=on" % keyval(console),
            "-serial", "chardev:console0",
            "-blockdev", json.dumps({"driver": "qcow2", "node-name": "root",
                                     "file": {"driver": "file", "filename": root}}),
            "-device", "virtio-blk-pci,drive=root,bootindex=1",
            # SEED-2: raw, read-only, a CD-ROM on the q35 AHCI bus.
            "-blockdev", json.dumps({"driver": "raw", "node-name": "seed", "read-only": True,
                                     "file": {"driver": "file", "read-only": True,
                                              "filename": os.path.join(work, "seed.iso")}}),
            "-device", "ide-cd,bus=ide.1,drive=seed",
            "-netdev", "user,id=net0,hostfwd=tcp:127.0.0.1:%d-%s:22" % (port, GUEST_IP),
            "-device", "virtio-net-pci,netdev=net0,mac=%s" % MAC]
    vm = Qemu(argv, os.path.join(work, "qemu.log"))
    vms.append(vm)

    answered = poll(lambda: not vm.alive() or ssh(key, port, "true")[0] == 0, SSH_TIMEOUT,
                    interval=2)
    seconds = time.monotonic() - vm.started
    if not ok(answered and vm.alive(), "SEED-6: the image boots from its own boot loader and "
              "answers ssh with the seed's key",
              "QEMU log:\n%s\nconsole:\n%s" % (vm.log_text(), tail(read_text(console), 60))):
        return
    note("boot to SSH: %.1f s (QEMU start to the first ssh answer, TCG)" % seconds)

    rc, out, err = ssh(key, port, "hostname")
    eq((rc, out), (0, HOSTNAME), "SEED-2: the guest's host name is the seed's")
    rc, out, err = ssh(key, port, "ip -4 -o addr show dev eth0; ip route show default; "
                                  "cat /sys/class/net/eth0/address")
    ok(rc == 0 and "%s/%d" % (GUEST_IP, PREFIX) in out and "default via %s" % GATEWAY in out
       and MAC in out, "SEED-3: eth0 (matched by MAC) has the static address and default route",
       out + err)
    rc, out, err = ssh(key, port, "cat /etc/resolv.conf")
    ok(re.search(r"^search .*vgpud\.internal", out, re.M) and
       re.search(r"^nameserver %s$" % re.escape(GATEWAY), out, re.M),
       "SEED-3: the guest's resolver uses the gateway and the search domain vgpud.internal",
       out + err)
    # cloud-init's last stage may still run after sshd answers: wait for it (bounded).
    rc, out, err = ssh(key, port, "timeout 120 cloud-init status --wait --long", timeout=150)
    ok("status: done" in out and "DataSourceNoCloud" in out and "/dev/sr0" in out,
       "SEED-2: cloud-init read the seed from the CD-ROM (NoCloud) and finished", out + err)
    rc, out, err = ssh(key, port, "systemctl is-active vgpu-agent.service; "
                                  "readlink /dev/virtio-ports/org.vgpud.agent.0")
    ok(rc == 0 and out.splitlines()[:1] == ["active"] and "vport" in out,
       "SEED-6: vgpu-agent runs under systemd and its port has AGENT-1's name", out + err)
    reply = agent_call(agent_sock, {"execute": "guest-gpu-init-status", "id": "seed-e2e"},
                       AGENT_TIMEOUT)
    ok(reply is not None and reply.get("id") == "seed-e2e"
       and (reply.get("return") or {}).get("state") == "unknown",
       "SEED-6: the agent answers guest-gpu-init-status (unknown without a GPU)", reply)
    rc, out, err = ssh(key, port, "echo written > ~/probe && sync && cat ~/probe")
    eq(out.splitlines()[-1:], ["written"], "SEED-6: the root disk is writable (the overlay)")
    digest_after = subprocess.run(["sha256sum", image], stdout=subprocess.PIPE,
                                  check=True).stdout.split()[0]
    eq(digest_after, digest_before, "SEED-6: the image itself is unchanged by the guest")


def main():
    if not QEMU or not os.access(QEMU, os.X_OK):
        skip_all("qemu-system-x86_64 not found (scripts/deps.sh installs qemu-system-x86)")
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        skip_all("ssh not found (scripts/deps.sh installs openssh-client)")
    try:
        rc, log, seconds = build_image()
    except (subprocess.TimeoutExpired, OSError) as e:
        rc, log, seconds = -1, str(e), 0
    if not ok(rc == 0, "SEED-6: build-image.sh builds the image", log):
        plan()
        return
    note("image %s in %.1f s" % ("reused" if "build-image: cached:" in log else "built", seconds))
    for line in log.splitlines():
        if re.match(r"build-image: \[\d/\d\]", line):
            note(line)
    work = tempfile.mkdtemp(prefix="vgpud-e2e-image-")
    try:
        run_group("e2e-image", lambda: run(work))
    finally:
        for vm in vms:
            vm.kill()
        shutil.rmtree(work, ignore_errors=True)
        plan()


if __name__ == "__main__":
    main()
    sys.exit(exit_status())
