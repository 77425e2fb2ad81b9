#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-isolation.py, run by run-sim-test.sh like every test of vgpud against the simulator:
# what a test sees of the host there (REL-9). Its network namespace has loopback only, up, so
# an address outside loopback is unreachable and loopback works; the host's PCI devices, IOMMU
# groups, mdev parents and VFIO nodes are hidden, so a path that strayed from the simulator's
# roots finds nothing; and the simulator itself is where its roots say.
import errno
import os
import socket
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import eq, exit_status, ok, plan, sim_context  # noqa: E402


def main():
    # From the kernel, not /sys/class/net: that shows the network namespace of whoever
    # mounted /sys.
    links = sorted(name for _, name in socket.if_nameindex())
    eq(links, ["lo"], "REL-9: the test's network namespace has loopback only")

    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737)
        got = "connected"
    except OSError as e:
        got = errno.errorcode.get(e.errno, str(e))
    finally:
        s.close()
    eq(got, "ENETUNREACH", "REL-9: an address outside loopback is unreachable at once")

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        with socket.create_connection(listener.getsockname(), timeout=5) as c:
            with listener.accept()[0] as peer:
                c.sendall(b"x")
                eq(peer.recv(1), b"x", "REL-9: loopback is up and carries a connection")

    for d in ("/sys/bus/pci", "/sys/kernel/iommu_groups", "/sys/bus/mdev",
              "/sys/class/mdev_bus", "/dev/vfio"):
        ok(not os.path.exists(d) or os.listdir(d) == [],
           "REL-9: the host's %s is hidden (absent or empty)" % d)

    sysfs = sim_context()["SYS"]
    ok(os.listdir(os.path.join(sysfs, "bus/pci/devices")) != [],
       "REL-9: the simulator's own bus/pci/devices is there, under its mount")


if __name__ == "__main__":
    try:
        main()
    finally:
        plan()
    sys.exit(exit_status())
