#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-e2e-volumes.py VGPUD OPENAPI_YAML FAKE_NVML BUILD_GUEST_SH GUEST_DIR QEMU
#
# DISK-8 with the real QEMU (SIM-19): vgpud boots build-guest.sh's guest under TCG; a volume is
# hot-attached to the running VM (query-pci, add-fd, blockdev-add, device_add on a PCIe root
# port); a hook in the guest (/etc/guest-init.d/) finds the disk whose
# /sys/block/vd*/serial is the volume's id, writes a marker to it and syncs; the volume is
# detached (device_del, the guest's release, DEVICE_DELETED, blockdev-del), the guest sees the
# disk go, and the host reads the marker back from volume.qcow2 with qemu-img dd. Whatever
# happens, the daemon and every QEMU under the work tree are killed, the tree removed.
import os
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_guest import (  # noqa: E402 (after the path)
    guest_or_skip, initrd_with, note, run_with_vgpud, tail)
from vgpud_test import (  # noqa: E402 (e2e_guest put tests/lib on the path)
    MNT, eq, ok, poll, run_group)

BUILD_GUEST, GUEST_DIR, QEMU = sys.argv[4:7]

BOOT_TIMEOUT = 90  # a bound: the guest is ready in a few seconds under TCG
DISK_TIMEOUT = 60  # the hot-plugged disk's probe and the write, under TCG
QEMU_IMG = "/usr/bin/qemu-img"
INSTANCES = os.path.join(MNT, "data", "instances")
VOLUMES = os.path.join(MNT, "data", "volumes")

# Waits (in the background, so that init goes on) for the disk whose serial is the volume's id,
# writes the marker to its first sector, syncs, then waits for the disk to go.
DISK_HOOK = """(
        vid=$(cat /etc/volume-id)
        dev=
        i=0
        while [ -z "$dev" ] && [ $i -lt 3000 ]; do
                for b in /sys/block/vd*; do
                        [ "$(cat $b/serial 2>/dev/null)" = "$vid" ] && dev=${b##*/}
                done
                [ -z "$dev" ] && sleep 0.1
                i=$((i + 1))
        done
        [ -n "$dev" ] || { say "volume never came"; exit 1; }
        say "volume $vid is /dev/$dev"
        printf 'vgpud-hot-volume-%s' "$vid" | dd of=/dev/$dev bs=512 conv=sync 2>/dev/null
        sync
        say "volume written"
        i=0
        while [ -e /sys/block/$dev ] && [ $i -lt 3000 ]; do sleep 0.1; i=$((i + 1)); done
        [ -e /sys/block/$dev ] || say "volume gone"
) &
"""


def console_log(iid):
    try:
        with open(os.path.join(INSTANCES, iid, "console.log"), errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def check_hot_volume(c, d, work, images, guest):
    r = c.request("POST", "/volumes", {"name": "e2e-hot", "size_gb": 1})
    if not ok(r.status == 201, "DISK-7: the volume is created", r.body[-300:]):
        return
    vid = r.json()["id"]
    initrd = os.path.join(images, "initramfs-disk.cpio.gz")
    initrd_with(guest.initrd, {"etc/guest-init.d/hot-disk.sh": DISK_HOOK,
                               "etc/volume-id": vid + "\n"}, initrd)
    body = {"name": "e2e-volumes", "vcpus": 1, "memory_mb": 256,
            "boot": {"kernel": os.path.join(images, "vmlinuz"), "initrd": initrd,
                     "cmdline": "console=ttyS0,115200"}}
    r = c.request("POST", "/instances", body)
    if not ok(r.status == 201, "the guest is created", r.body[-300:]):
        note("vgpud log (tail):\n" + tail(d.log_text(), 30))
        return
    iid = r.json()["id"]
    if not ok(poll(lambda: "vgpud-guest: ready" in console_log(iid), BOOT_TIMEOUT, 0.2),
              "SIM-19: the guest boots", tail(console_log(iid), 20)):
        return

    r = c.request("POST", "/instances/%s/volumes" % iid, {"volume": "e2e-hot"})
    ok(r.status == 200 and r.json().get("volumes") ==
       [{"id": vid, "readonly": False, "state": "attached"}],
       "DISK-8: POST /instances/{id}/volumes hot-attaches the volume to the running QEMU",
       r.body[-400:])
    ok(poll(lambda: "vgpud-guest: volume written" in console_log(iid), DISK_TIMEOUT, 0.2),
       "DISK-8: the guest sees a virtio disk whose serial is the volume's id, and writes to it",
       tail(console_log(iid), 20))

    r = c.request("DELETE", "/instances/%s/volumes/%s" % (iid, vid))
    ok(r.status == 200 and not r.json().get("volumes"),
       "DISK-8: DELETE /instances/{id}/volumes/{volume} detaches it once the guest releases it",
       r.body[-400:])
    ok(poll(lambda: "vgpud-guest: volume gone" in console_log(iid), 30, 0.2),
       "DISK-8: the disk is gone from the guest", tail(console_log(iid), 10))

    out = os.path.join(work, "sector.raw")
    p = subprocess.run([QEMU_IMG, "dd", "-f", "qcow2", "-O", "raw", "bs=512", "count=1",
                        "if=" + os.path.join(VOLUMES, vid, "volume.qcow2"), "of=" + out],
                       capture_output=True)
    data = open(out, "rb").read() if p.returncode == 0 else p.stderr
    ok(data.startswith(("vgpud-hot-volume-" + vid).encode()),
       "DISK-8: the host reads the guest's bytes back from volume.qcow2 (qemu-img dd)", data[:64])

    eq(c.request("DELETE", "/instances/" + iid).status, 204, "the instance deletes")
    eq(c.request("DELETE", "/volumes/" + vid).status, 204, "DISK-7: the volume deletes")


def main():
    guest = guest_or_skip(BUILD_GUEST, GUEST_DIR, QEMU)
    if not guest:
        return 1
    return run_with_vgpud("vgpud-e2e-volumes-", QEMU, guest,
                          groups=lambda c, d, work, images: run_group(
                              "hot volume", lambda: check_hot_volume(c, d, work, images, guest)))


if __name__ == "__main__":
    sys.exit(main())
