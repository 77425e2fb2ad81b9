#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-e2e-vgpud.py VGPUD OPENAPI_YAML FAKE_NVML BUILD_GUEST_SH GUEST_DIR QEMU
#
# vgpud runs the real QEMU (SPEC SIM-19, §6, §7): under tests/sim/run-sim-test.sh (a mounted
# vgpu-sim in a private PID namespace, SIM-21, so vgpud has a GPU host), a daemon with
# qemu_binary the real qemu-system-x86_64 and qemu_accel tcg boots build-guest.sh's guest
# without a GPU. Through the public API only: create answers 201 Running (INST-12), the
# console route shows the kernel's and the init's lines (API-2), stop powers the guest off
# through ACPI without a forced kill (INST-15, VMM-9), start boots it again (INST-17), delete
# leaves no process, socket or directory (INST-18, INST-20, VMM-15); and a kernel that QEMU
# cannot load fails the create with QEMU's own last line (VMM-5) and leaves no record
# (INST-14); QEMU gets the kernel and initrd by descriptor (INST-6); two VMs boot at once from
# one boot.disk, which QEMU holds read-only and neither guest can write (DISK-6); two VMs boot
# with an imported image as root disk and write to overlays of their own (DISK-5); a volume one
# VM wrote is read back by another after the first is deleted (DISK-7, DISK-8). The files the
# API does not show (instance.json's pid, /proc, the directories) are read only to prove that
# nothing is left. Timings go to TAP comments. Whatever happens, the daemon and any QEMU started
# under this test's work tree are killed, the tree removed.
import json
import os
import re
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_guest import (  # noqa: E402 (after the path)
    guest_or_skip, initrd_with, note, qemu_processes, run_with_vgpud, tail)
from vgpud_test import (  # noqa: E402 (e2e_guest put tests/lib on the path)
    MNT, error_of, eq, metric, ok, parse_metrics, poll, run_group)

BUILD_GUEST, GUEST_DIR, QEMU = sys.argv[4:7]

# Bounds, not waits: the guest reaches init in 2.5 to 7 s here under TCG, more when the rest
# of the suite loads the machine.
BOOT_TIMEOUT = 90
VMM_BOOT_TIMEOUT = 30  # vmm.boot_timeout: QMP readiness (VMM-5)
STOP_TIMEOUT = 30  # vmm.stop_timeout: the graceful stop's bound (VMM-9)
# VMM-2: -append is passed as it is, commas and all; the kernel echoes it ("Command line:").
CMDLINE = "console=ttyS0,115200 vgpud.e2e=raw,commas"
KERNEL_LINE = r"^\[ *[0-9.]+\] Linux version \S+"
# The guest's lines are matched anywhere: the kernel's printk may land in the middle of a line
# that init is writing to the same serial port ("vgpud-guest: init reached[    2.31] tsc: ...").
INIT_LINE = r"vgpud-guest: init reached"
READY_LINE = r"vgpud-guest: ready"
POWER_LINE = "vgpud-guest: power button, powering off"
INSTANCES = os.path.join(MNT, "data", "instances")


# ---- what the API does not show -------------------------------------------------------------


def proc_stat(pid):
    """(state, start_time) of /proc/<pid>/stat, or None when there is no such process."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(") ", 1)[1].split()
        return fields[0], int(fields[19])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def record(iid):
    with open(os.path.join(INSTANCES, iid, "instance.json")) as f:
        return json.load(f)


def instance_dirs():
    try:
        return sorted(os.listdir(INSTANCES))
    except FileNotFoundError:
        return []


# ---- through the API ------------------------------------------------------------------------


def console(c, iid):
    """The console route's text; the guest's tty ends its lines with CR LF."""
    r = c.get("/instances/%s/console?tail_bytes=1048576" % iid)
    return r.body.decode(errors="replace").replace("\r\n", "\n") if r.status == 200 else ""


def wait_lines(c, iid, pattern, count, timeout):
    """Polls the console route until pattern matches count lines (bounded); returns the
    number of matching lines seen last."""
    rx = re.compile(pattern, re.M)
    seen = [0]

    def enough():
        seen[0] = len(rx.findall(console(c, iid)))
        return seen[0] >= count

    poll(enough, timeout, 0.1)
    return seen[0]


def forced_kills(c):
    fams = parse_metrics(c.get("/metrics").body.decode())
    return sum(metric(fams, "vgpud_instances_vmm_forced_kills_total", in_grace=g) or 0
               for g in ("true", "false"))


def timed(fn):
    t0 = time.monotonic()
    v = fn()
    return v, time.monotonic() - t0


def diagnostics(c, d, iid):
    return "console (tail):\n%s\nvgpud log (tail):\n%s" % (
        tail(console(c, iid), 25), tail(d.log_text(), 25))


def check_boot(c, d, iid, boot, label):
    """The kernel's banner and the init's marker on the console route, the n-th time (boot)."""
    t0 = time.monotonic()
    n = wait_lines(c, iid, KERNEL_LINE, boot, BOOT_TIMEOUT)
    if not ok(n >= boot, "API-2: the console route shows the kernel's 'Linux version' line%s"
              % label, diagnostics(c, d, iid)):
        return False
    n = wait_lines(c, iid, INIT_LINE, boot, BOOT_TIMEOUT)
    if not ok(n >= boot, "SIM-19: the console route shows the guest's init marker%s" % label,
              diagnostics(c, d, iid)):
        return False
    note("Running to init marker%s: %.1f s" % (label, time.monotonic() - t0))
    # acpid must run before a stop, or the power button goes unheard (VMM-9's quit follows).
    n = wait_lines(c, iid, READY_LINE, boot, BOOT_TIMEOUT)
    return ok(n >= boot, "SIM-19: the guest's init is ready (acpid runs)%s" % label,
              diagnostics(c, d, iid))


def check_stopped(c, d, iid, r, seconds, kills_before):
    s = r.json() if r.status == 200 else {}
    ok(r.status == 200 and s.get("state") == "Stopped" and "error" not in s,
       "INST-15: stop answers 200 Stopped, no error", error_of(r))
    note("stop %.2f s" % seconds)
    ok(POWER_LINE in console(c, iid),
       "VMM-9: the guest powered itself off through ACPI (acpid's PWRF action ran)",
       diagnostics(c, d, iid))
    # A guest that ignored system_powerdown would hold the stop for the whole stop timeout
    # before VMM-9's quit or VMM-10's ladder; GPU-less VMMs are SIGKILLed without counting.
    ok(seconds < STOP_TIMEOUT,
       "VMM-9: the VMM exited within vmm.stop_timeout (%d s): neither quit nor the ladder ran"
       % STOP_TIMEOUT, "%.1f s" % seconds)
    eq(forced_kills(c), kills_before,
       "VMM-12: vgpud_instances_vmm_forced_kills_total does not move")


def check_lifecycle(c, d, work, images):
    kernel = os.path.join(images, "vmlinuz")
    initrd = os.path.join(images, "initramfs.cpio.gz")
    body = {"name": "e2e-guest-01", "vcpus": 1, "memory_mb": 256,
            "boot": {"kernel": kernel, "initrd": initrd, "cmdline": CMDLINE}}
    kills = forced_kills(c)
    eq(kills, 0, "VMM-12: vgpud_instances_vmm_forced_kills_total starts at 0")

    # INST-12: 201 Running once QMP is ready; the guest boots on after that.
    r, seconds = timed(lambda: c.request("POST", "/instances", body))
    inst = r.json() if r.status == 201 else {}
    if not ok(r.status == 201 and inst.get("state") == "Running",
              "INST-12: create with the real QEMU answers 201 Running", error_of(r)):
        note("vgpud log (tail):\n" + tail(d.log_text(), 30))
        return
    note("create-to-Running %.2f s" % seconds)
    iid = inst["id"]
    eq(inst["boot"], body["boot"], "API-7: the instance shows its boot paths as given")
    hv = record(iid).get("hypervisor", {})
    pid = hv.get("pid")
    argv = qemu_processes().get(pid, [])
    ok(argv[argv.index("-kernel") + 1:][:1] == ["/proc/self/fd/3"] and
       argv[argv.index("-initrd") + 1:][:1] == ["/proc/self/fd/4"] if "-kernel" in argv and
       "-initrd" in argv else False,
       "INST-6: the real QEMU boots the kernel and initrd it got by descriptor", argv)
    st = proc_stat(pid) if pid else None
    ok(st and st[0] != "Z" and st[1] == hv.get("start_time") and
       os.path.basename(qemu_processes().get(pid, ["?"])[0]) == os.path.basename(QEMU),
       "INST-12, VMM-4: instance.json's pid and start_time are the running qemu's",
       (hv, st, qemu_processes()))
    rt = os.path.join(work, "run", "instances", iid)
    ok(os.path.exists(os.path.join(rt, "qmp.sock")) and
       os.path.exists(os.path.join(rt, "agent.sock")),
       "INST-1: qmp.sock and agent.sock are in <runtime_dir>/instances/<id>/")
    if not check_boot(c, d, iid, 1, ""):
        return
    text = console(c, iid)
    m = re.search(KERNEL_LINE, text, re.M)
    note("guest: " + m.group(0).split("] ", 1)[1])
    ok(re.search(r"^\[ *[0-9.]+\] Command line: %s$" % re.escape(CMDLINE), text, re.M),
       "VMM-1, VMM-2: the guest kernel got the cmdline as given, commas undoubled",
       [l for l in text.splitlines() if "Command line" in l])
    ok(len(c.get("/instances/%s/console?tail_bytes=64" % iid).body) == 64,
       "API-2: tail_bytes=64 returns the console's last 64 bytes")

    # INST-15, VMM-9: the graceful stop.
    r, seconds = timed(lambda: c.request("POST", "/instances/%s/stop" % iid))
    check_stopped(c, d, iid, r, seconds, kills)
    ok(proc_stat(pid) is None, "VMM-4: the VMM is gone and reaped (no zombie)", proc_stat(pid))
    eq([p for p in ("qmp.sock", "agent.sock") if os.path.exists(os.path.join(rt, p))], [],
       "VMM-15: no socket is left after the stop")
    rec = record(iid)
    ok("hypervisor" not in rec and rec.get("state") == "Stopped",
       "INST-15: the record is Stopped without hypervisor fields", rec)

    # INST-17: start again; the same disk-less guest boots a second time.
    r, seconds = timed(lambda: c.request("POST", "/instances/%s/start" % iid))
    s = r.json() if r.status == 200 else {}
    if not ok(r.status == 200 and s.get("state") == "Running",
              "INST-17: start answers 200 Running", error_of(r)):
        return
    note("start-to-Running %.2f s" % seconds)
    pid2 = record(iid).get("hypervisor", {}).get("pid")
    ok(pid2 and pid2 != pid and proc_stat(pid2), "INST-17: a new VMM runs", (pid, pid2))
    if not check_boot(c, d, iid, 2, " (second boot)"):
        return
    r, seconds = timed(lambda: c.request("POST", "/instances/%s/stop" % iid))
    check_stopped(c, d, iid, r, seconds, kills)
    eq(console(c, iid).count(POWER_LINE), 2, "VMM-9: the second stop is the guest's too")

    # INST-17 again, then INST-18: a delete of a Running instance stops it and removes all.
    r = c.request("POST", "/instances/%s/start" % iid)
    if not ok(r.status == 200, "INST-17: start a third time", error_of(r)):
        return
    pid3 = record(iid).get("hypervisor", {}).get("pid")
    start_time3 = record(iid).get("hypervisor", {}).get("start_time")
    check_boot(c, d, iid, 3, " (third boot)")
    r, seconds = timed(lambda: c.request("DELETE", "/instances/" + iid))
    eq(r.status, 204, "INST-18: delete of the Running instance answers 204")
    note("delete %.2f s" % seconds)
    eq(error_of(c.get("/instances/" + iid))[0], 404, "API-2: the instance is gone")
    eq(c.get("/instances").json(), [], "API-2: the list is empty")
    st = proc_stat(pid3) if pid3 else ("?", None)
    ok(st is None or st[1] != start_time3, "INST-18: the VMM recorded in instance.json is gone",
       st)
    eq(qemu_processes(), {}, "INST-18: no qemu-system process is left")
    ok(not os.path.exists(rt), "INST-20: the runtime directory is removed", rt)
    eq(instance_dirs(), [], "INST-20: <data_dir>/instances/ holds nothing (no data directory, "
       "no .deleted-*)")
    eq(forced_kills(c), kills, "VMM-12: no forced kill in the whole lifecycle")


DISK_MARKER = "vgpud-e2e-boot-disk"
# The guest reads its virtio disk and tries to write it (a hook of build-guest.sh's init).
DISK_HOOK = """i=0
while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
echo "vgpud-guest: disk says $(head -c %d /dev/vda)"
if echo x | dd of=/dev/vda bs=1 count=1 conv=notrunc 2>/dev/null; then
        echo "vgpud-guest: disk write accepted"
else
        echo "vgpud-guest: disk write refused"
fi
""" % len(DISK_MARKER)


def disk_fds(pid, disk):
    """{fd: flags} of pid's descriptors of the file disk."""
    want, out = os.path.realpath(disk), {}
    for n in os.listdir("/proc/%d/fd" % pid):
        try:
            if os.readlink("/proc/%d/fd/%s" % (pid, n)) != want:
                continue
            with open("/proc/%d/fdinfo/%s" % (pid, n)) as f:
                out[int(n)] = next(int(l.split()[1], 8) for l in f if l.startswith("flags:"))
        except (OSError, StopIteration):
            pass
    return out


def check_shared_disk(c, d, images, guest):
    # DISK-6: boot.disk is attached read-only; two VMs boot from one file at once (a writable
    # disk would fail the second QEMU on its image lock), and neither can change it.
    disk = os.path.join(images, "shared.raw")
    with open(disk, "wb") as f:
        f.write(DISK_MARKER.encode())
        f.truncate(1 << 20)
    with open(disk, "rb") as f:
        before = f.read()
    initrd = os.path.join(images, "initramfs-disk.cpio.gz")
    initrd_with(guest.initrd, {"/etc/guest-init.d/disk.sh": DISK_HOOK}, initrd)
    ids = []
    for k in range(2):
        b = {"name": "e2e-disk-%d" % k, "vcpus": 1, "memory_mb": 256,
             "boot": {"kernel": os.path.join(images, "vmlinuz"), "initrd": initrd,
                      "cmdline": "console=ttyS0", "disk": disk}}
        r = c.request("POST", "/instances", b)
        if not ok(r.status == 201, "DISK-6: VM %d with the shared boot.disk is created" % k,
                  (error_of(r), tail(d.log_text(), 20))):
            return
        ids.append(r.json()["id"])
    for k, iid in enumerate(ids):
        n = wait_lines(c, iid, r"vgpud-guest: disk says %s" % DISK_MARKER, 1, BOOT_TIMEOUT)
        ok(n == 1, "DISK-6: VM %d reads the shared disk" % k, diagnostics(c, d, iid))
        n = wait_lines(c, iid, r"vgpud-guest: disk write refused", 1, BOOT_TIMEOUT)
        ok(n == 1, "DISK-6: VM %d cannot write it (the guest sees a read-only disk)" % k,
           diagnostics(c, d, iid))
        pid = record(iid).get("hypervisor", {}).get("pid")
        fds = disk_fds(pid, disk) if pid else {}
        ok(fds and all(fl & 3 == os.O_RDONLY for fl in fds.values()),
           "DISK-6: QEMU %d holds boot.disk read-only (/proc/<pid>/fdinfo)" % k,
           {fd: oct(fl) for fd, fl in fds.items()})
    with open(disk, "rb") as f:
        eq(f.read() == before, True, "DISK-6: the file under image_dirs is unchanged")
    for iid in ids:
        eq(c.request("DELETE", "/instances/" + iid).status, 204, "INST-18: delete it")


IMAGE_MARKER = "vgpud-e2e-image-root"
# The guest reads its root disk, then writes a line of its own 2 MiB in, past the image's data.
ROOT_HOOK = """i=0
while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
echo "vgpud-guest: root says $(head -c %d /dev/vda)"
if echo "written-by-$(hostname)-$(cat /proc/sys/kernel/random/boot_id | head -c 8)" |
        dd of=/dev/vda bs=512 seek=4096 conv=notrunc 2>/dev/null && sync; then
        echo "vgpud-guest: root write done"
else
        echo "vgpud-guest: root write failed"
fi
""" % len(IMAGE_MARKER)


def overlay_bytes(work, overlay, offset, size):
    """size bytes at offset of what the guest saw on its root disk, read on the host from the
    qcow2 overlay (and its backing image) with qemu-img dd."""
    out = os.path.join(work, "overlay-read.raw")
    # qemu-img dd's count includes the skipped blocks.
    subprocess.run(["qemu-img", "dd", "-f", "qcow2", "-O", "raw", "bs=512",
                    "skip=%d" % (offset // 512), "count=%d" % ((offset + size + 511) // 512),
                    "if=" + overlay, "of=" + out], check=True, stdout=subprocess.DEVNULL)
    with open(out, "rb") as f:
        return f.read()[:size]


def check_image_root(c, d, work, images, guest):
    # DISK-2, DISK-5, DISK-9: an image imported through the API is the root disk of two VMs
    # booted with a direct kernel; each guest sees the image on its virtio disk, writes to it,
    # and the writes land in its own overlay; the image itself never changes.
    source = os.path.join(images, "root.raw")  # under image_dirs
    with open(source, "wb") as f:
        f.write(IMAGE_MARKER.encode())
        f.truncate(1 << 20)
    r = c.request("POST", "/images", {"name": "e2e-root", "source": source})
    if not ok(r.status == 202, "DISK-2: the image is accepted for import", error_of(r)):
        return
    poll(lambda: c.get("/images/e2e-root").json().get("state") != "importing", 60, 0.1)
    img = c.get("/images/e2e-root").json()
    if not ok(img.get("state") == "ready", "DISK-2: the image is ready", img):
        return
    disk = os.path.join(MNT, "data", "images", "e2e-root", "disk.qcow2")
    digest = subprocess.run(["sha256sum", disk], check=True,
                            capture_output=True).stdout.split()[0]
    initrd = os.path.join(images, "initramfs-root.cpio.gz")
    initrd_with(guest.initrd, {"/etc/guest-init.d/root.sh": ROOT_HOOK}, initrd)
    ids = []
    for k in range(2):
        b = {"name": "e2e-root-%d" % k, "vcpus": 1, "memory_mb": 256, "image": "e2e-root",
             "boot": {"kernel": os.path.join(images, "vmlinuz"), "initrd": initrd,
                      "cmdline": "console=ttyS0"}}
        r = c.request("POST", "/instances", b)
        if not ok(r.status == 201, "DISK-5: VM %d with the image as root disk is created" % k,
                  (error_of(r), tail(d.log_text(), 20))):
            return
        ids.append(r.json()["id"])
    for k, iid in enumerate(ids):
        n = wait_lines(c, iid, r"vgpud-guest: root says %s" % IMAGE_MARKER, 1, BOOT_TIMEOUT)
        ok(n == 1, "DISK-5, DISK-9: VM %d sees the image on its virtio disk" % k,
           diagnostics(c, d, iid))
        n = wait_lines(c, iid, r"vgpud-guest: root write done", 1, BOOT_TIMEOUT)
        ok(n == 1, "DISK-5: VM %d writes its root disk" % k, diagnostics(c, d, iid))
    written = []
    for k, iid in enumerate(ids):
        r = c.request("POST", "/instances/%s/stop" % iid)
        eq(r.status, 200, "INST-15: VM %d stops" % k)
        overlay = os.path.join(INSTANCES, iid, "root.qcow2")
        got = overlay_bytes(work, overlay, 4096 * 512, 64).split(b"\n")[0]
        written.append(got)
        ok(got.startswith(b"written-by-"), "DISK-5: VM %d's write is in its own overlay" % k,
           got)
        eq(overlay_bytes(work, overlay, 0, len(IMAGE_MARKER)), IMAGE_MARKER.encode(),
           "DISK-5: VM %d's overlay reads the image beneath its writes" % k)
    ok(len(set(written)) == 2, "DISK-5: the two overlays hold different writes", written)
    eq(subprocess.run(["sha256sum", disk], check=True, capture_output=True).stdout.split()[0],
       digest, "DISK-5: the image's digest is unchanged after both wrote")
    for iid in ids:
        eq(c.request("DELETE", "/instances/" + iid).status, 204, "INST-18: delete it")
    eq(c.request("DELETE", "/images/e2e-root").status, 204, "DISK-4: then the image")


# Without udev there is no /dev/disk/by-id: the serial is read from sysfs.
VOLUME_HOOK = """i=0
while [ ! -b /dev/vdb ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
[ -e /sys/block/vdb/serial ] && echo "vgpud-guest: vdb serial $(cat /sys/block/vdb/serial)"
echo "vgpud-guest: volume says $(head -c 25 /dev/vdb)"
if [ -e /etc/write-volume ]; then
        printf 'volume-data-from-first-vm' | dd of=/dev/vdb conv=notrunc 2>/dev/null && sync &&
                echo "vgpud-guest: volume write done"
fi
"""


def check_volume_outlives(c, d, work, images, guest):
    # DISK-7, DISK-8: a volume written by one VM outlives it and is read back by another; on
    # the host, qemu-img reads the same bytes.
    source = os.path.join(images, "vol-root.raw")
    with open(source, "wb") as f:
        f.write(IMAGE_MARKER.encode())
        f.truncate(1 << 20)
    r = c.request("POST", "/images", {"name": "e2e-vol-root", "source": source})
    poll(lambda: c.get("/images/e2e-vol-root").json().get("state") != "importing", 60, 0.1)
    r = c.request("POST", "/volumes", {"name": "e2e-data", "size_gb": 1})
    if not ok(r.status == 201, "DISK-7: the volume is created", error_of(r)):
        return
    vid = r.json()["id"]
    hook = VOLUME_HOOK
    writer = os.path.join(images, "initramfs-vol-w.cpio.gz")
    reader = os.path.join(images, "initramfs-vol-r.cpio.gz")
    initrd_with(guest.initrd, {"/etc/guest-init.d/volume.sh": hook, "/etc/write-volume": "1"},
                writer)
    initrd_with(guest.initrd, {"/etc/guest-init.d/volume.sh": hook}, reader)

    def boot(name, initrd, readonly):
        b = {"name": name, "vcpus": 1, "memory_mb": 256, "image": "e2e-vol-root",
             "volumes": [{"volume": "e2e-data", "readonly": readonly}],
             "boot": {"kernel": os.path.join(images, "vmlinuz"), "initrd": initrd,
                      "cmdline": "console=ttyS0"}}
        r = c.request("POST", "/instances", b)
        ok(r.status == 201, "DISK-8: %s with the volume attached is created" % name,
           (error_of(r), tail(d.log_text(), 20)))
        return r.json()["id"] if r.status == 201 else None

    first = boot("e2e-vol-w", writer, False)
    if not first:
        return
    n = wait_lines(c, first, r"vgpud-guest: vdb serial %s" % vid, 1, BOOT_TIMEOUT)
    ok(n == 1, "DISK-8: the guest sees the volume's id as its disk serial",
       diagnostics(c, d, first))
    n = wait_lines(c, first, r"vgpud-guest: volume write done", 1, BOOT_TIMEOUT)
    ok(n == 1, "DISK-8: the first VM writes the volume", diagnostics(c, d, first))
    eq(c.request("DELETE", "/instances/" + first).status, 204, "INST-18: the first VM is deleted")
    volume = os.path.join(MNT, "data", "volumes", vid, "volume.qcow2")
    eq(overlay_bytes(work, volume, 0, 25), b"volume-data-from-first-vm",
       "DISK-7: on the host, qemu-img reads the VM's bytes from the volume")
    second = boot("e2e-vol-r", reader, True)
    if not second:
        return
    n = wait_lines(c, second, r"vgpud-guest: volume says volume-data-from-first-vm", 1,
                   BOOT_TIMEOUT)
    ok(n == 1, "DISK-7, DISK-8: a second VM reads back what the first wrote",
       diagnostics(c, d, second))
    eq(c.request("DELETE", "/instances/" + second).status, 204, "INST-18: the second VM too")
    eq(c.request("DELETE", "/volumes/" + vid).status, 204, "DISK-7: then the volume")
    eq(c.request("DELETE", "/images/e2e-vol-root").status, 204, "DISK-4: and the image")


def qemu_own_error(kernel, initrd):
    """The last non-empty line QEMU itself prints for this kernel and initrd, run directly (the
    oracle for VMM-5's message)."""
    p = subprocess.run([QEMU, "-machine", "q35", "-accel", "tcg", "-nodefaults",
                        "-no-user-config", "-display", "none", "-m", "256M",
                        "-kernel", kernel, "-initrd", initrd, "-append", CMDLINE],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60,
                       env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    lines = [l for l in p.stdout.decode(errors="replace").splitlines() if l.strip()]
    return p.returncode, (lines[-1] if lines else "")


def check_bad_kernel(c, d, images):
    # VMM-5: QEMU refuses a kernel that is not one and exits at once; the create fails with
    # QEMU's own last line of qemu.log, and INST-14 leaves no record.
    bogus = os.path.join(images, "not-a-kernel")
    initrd = os.path.join(images, "initramfs.cpio.gz")
    dirs_before, qemus_before = instance_dirs(), qemu_processes()
    rc, want = qemu_own_error(bogus, initrd)
    if not ok(rc != 0 and want.startswith("qemu"),
              "QEMU itself refuses a text file as a kernel", (rc, want)):
        return
    note("QEMU's own error: " + want)
    body = {"name": "e2e-bad-kernel", "vcpus": 1, "memory_mb": 256,
            "boot": {"kernel": bogus, "initrd": initrd, "cmdline": CMDLINE}}
    r, seconds = timed(lambda: c.request("POST", "/instances", body))
    e = error_of(r)
    msg = e[1].get("message", "") if isinstance(e[1], dict) else ""
    ok(r.status == 500 and e[1].get("code") == "internal",
       "VMM-5: a kernel QEMU cannot load fails the create with 500 internal", e)
    ok(msg.endswith(": " + want), "VMM-5: the message ends with QEMU's own line from qemu.log",
       "got:  %r\nwant: ...: %r" % (msg, want))
    ok(re.match(r"qemu (exited with status \d+|was killed by signal \S+|exited) ", msg) or
       "QMP" in msg, "VMM-5: the message says QEMU ended before QMP was ready", msg)
    note("failed create answered in %.2f s: %s" % (seconds, msg))
    eq([i for i in c.get("/instances").json() if i.get("name") == body["name"]], [],
       "INST-14: the failed create leaves no record")
    eq(instance_dirs(), dirs_before, "INST-14, INST-20: and no instance directory")
    eq(qemu_processes(), qemus_before, "VMM-14: and no QEMU")


def main():
    guest = guest_or_skip(BUILD_GUEST, GUEST_DIR, QEMU)
    if not guest:
        return 1

    def prepare(images):
        # image_dirs: INST-6 resolves real paths, so the images directory holds symlinks into
        # the guest's cache and the cache itself is listed too; a text file stands in for a
        # broken kernel.
        os.symlink(os.path.realpath(guest.initrd), os.path.join(images, "initramfs.cpio.gz"))
        with open(os.path.join(images, "not-a-kernel"), "w") as f:
            f.write("this text file is not a Linux kernel\n")

    def groups(c, d, work, images):
        run_group("lifecycle", lambda: check_lifecycle(c, d, work, images))
        run_group("bad kernel", lambda: check_bad_kernel(c, d, images))
        run_group("shared boot disk", lambda: check_shared_disk(c, d, images, guest))
        run_group("image root disk", lambda: check_image_root(c, d, work, images, guest))
        run_group("volume", lambda: check_volume_outlives(c, d, work, images, guest))
    return run_with_vgpud("vgpud-e2e-vgpud-", QEMU, guest, groups, prepare=prepare,
                          boot_timeout=VMM_BOOT_TIMEOUT, stop_timeout=STOP_TIMEOUT)


if __name__ == "__main__":
    sys.exit(main())
