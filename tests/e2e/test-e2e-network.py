#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-e2e-network.py VGPUD OPENAPI_YAML FAKE_NVML BUILD_GUEST_SH GUEST_DIR QEMU
#
# A real guest on vgpud's NAT network (SPEC §20, NET-11): under tests/sim/run-sim-test.sh with
# the host's network (the guest's first build fetches its kernel with apt), the test then moves
# itself into a network namespace of its own and binds the tun device over the simulator's
# dev/net/tun, so vgpud's bridge, TAP, table and dnsmasq exist there only (REL-9). vgpud boots
# build-guest.sh's guest in the real QEMU (TCG) with a nat NIC; the guest's hook asks for an
# address by DHCP (busybox udhcpc against vgpud's dnsmasq) and prints it; the host pings the
# guest on the bridge. Whatever happens, the daemon and any QEMU started under this test's work
# tree are killed, the tree removed (run_with_vgpud); the namespace goes with the process.
import ctypes
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_guest import (  # noqa: E402 (after the path)
    guest_or_skip, initrd_with, note, run_with_vgpud, tail, wait_console)
from vgpud_test import (  # noqa: E402 (e2e_guest put tests/lib on the path)
    MNT, error_of, eq, ok, poll, run_group)

BUILD_GUEST, GUEST_DIR, QEMU = sys.argv[4:7]
BOOT_TIMEOUT = 90
CLONE_NEWNET = 0x40000000
TUN = os.path.join(MNT, "dev", "net", "tun")

# The guest's side: eth0 up, an address from DHCP, then a line the test waits for.
UDHCPC_SCRIPT = """#!/bin/sh
case "$1" in
bound|renew) ifconfig "$interface" "$ip" netmask "$subnet" up && echo "$ip" >/tmp/dhcp-ip ;;
esac
exit 0
"""
NET_HOOK = """
i=0
while [ ! -e /sys/class/net/eth0 ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
ifconfig lo up
ifconfig eth0 up
if udhcpc -i eth0 -n -q -t 20 -T 1 -s /etc/udhcpc.sh >/dev/null 2>&1; then
        say "dhcp address $(cat /tmp/dhcp-ip) mac $(cat /sys/class/net/eth0/address)"
else
        say "dhcp failed"
fi
"""


def enter_network_namespace():
    """This process (and so the daemon it starts) leaves the host's network namespace."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        return "unshare(CLONE_NEWNET): %s" % os.strerror(ctypes.get_errno())
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(["mount", "--bind", "/dev/net/tun", TUN], check=True)
    return None


def check_guest_on_nat(c, d, images, guest, work):
    initrd = os.path.join(images, "initramfs-net.cpio.gz")
    initrd_with(guest.initrd, {"/etc/guest-init.d/net.sh": NET_HOOK,
                               "/etc/udhcpc.sh": (UDHCPC_SCRIPT, 0o755)}, initrd)
    b = {"name": "e2e-net", "vcpus": 1, "memory_mb": 256, "network": {"mode": "nat"},
         "boot": {"kernel": os.path.join(images, "vmlinuz"), "initrd": initrd,
                  "cmdline": "console=ttyS0"}}
    r = c.request("POST", "/instances", b)
    if not ok(r.status == 201, "NET-1, NET-3: the nat instance is created in the real QEMU",
              (error_of(r), tail(d.log_text(), 20))):
        return
    inst = r.json()
    iid, net = inst["id"], inst["network"]
    console = os.path.join(MNT, "data", "instances", iid, "console.log")
    m = wait_console(console, r"vgpud-guest: dhcp (address \S+ mac \S+|failed)", BOOT_TIMEOUT)
    eq(m.group(0) if m else tail(open(console).read() if os.path.exists(console) else "", 20), "vgpud-guest: dhcp address %s mac %s" % (net["ip"], net["mac"]),
       "NET-2, NET-3, NET-6: the guest's NIC has vgpud's MAC and gets its address by DHCP")
    got = []
    ok(poll(lambda: got.append(subprocess.run(
        ["busybox", "ping", "-c", "1", "-W", "1", net["ip"]], capture_output=True,
        text=True)) or got[-1].returncode == 0, 30),
       "NET-3, NET-4: the guest answers a ping from the bridge", got[-1].stdout if got else None)
    r = c.request("DELETE", "/instances/" + iid)
    eq(r.status, 204, "the instance is deleted")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    ok("vgt" + iid[:12] not in links, "decision 14: its TAP went with its QEMU")


def main():
    guest = guest_or_skip(BUILD_GUEST, GUEST_DIR, QEMU)
    if not guest:
        return 1
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun"):
        print("1..0 # SKIP NET-11: needs root and /dev/net/tun")
        return 0
    why = enter_network_namespace()
    if why:
        print("1..0 # SKIP NET-11: %s" % why)
        return 0
    try:
        status = run_with_vgpud(
            "vgpud-e2e-network-", QEMU, guest, nat=True,
            groups=lambda c, d, work, images: run_group(
                "nat guest", lambda: check_guest_on_nat(c, d, images, guest, work)))
        note("the guest booted under TCG in this test's own network namespace")
        return status
    finally:
        subprocess.run(["umount", TUN], capture_output=True)


if __name__ == "__main__":
    sys.exit(main())
