#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# A GPU-less VM's lifecycle through vgpud with the real QEMU under TCG (info rows, no SPEC
# target): create to 201 Running (INST-12), create to the guest's "ready" line, and stop to
# 200 Stopped (INST-15, a graceful ACPI powerdown, VMM-9).
#
#   tests/sim/run-sim-test.sh BUILD/sim/vgpu-sim bench/host-sim20.yaml \
#           python3 bench/qemu-lifecycle.py BUILD_DIR GUEST_DIR QEMU
#
# GUEST_DIR holds tests/e2e/build-guest.sh's guest (vmlinuz, initramfs.cpio.gz; its header
# gives the init contract). vgpud runs on the mounted simulator in run-sim-test.sh's private
# PID namespace (SIM-21) with `qemu_binary: QEMU`, `qemu_accel: tcg` and image_dirs on a copy
# of the guest in a work directory of ours.
#
# One vgpud serves every repetition. A repetition creates the VM (1 vCPU, 256 MiB, the guest's
# kernel and initramfs, console=ttyS0) and times the POST to its 201 Running, which vgpud
# answers once QMP is ready (VMM-5), before the guest kernel has run; it then polls the console
# route until init prints "vgpud-guest: ready" (acpid runs by then, so the powerdown is heard;
# a stop before it would wait out vmm.stop_timeout and measure the termination ladder
# instead), times the POST .../stop to its 200 Stopped, checks that the VMM has exited, and
# deletes the instance. One warm-up, then QEMU_REPS (default 5); each row is the median.
# Prints bench/run rows on stdout, details on stderr.
import json
import os
import shutil
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vgpud_bench import (  # noqa: E402 (after the path)
    MNT, Client, Vgpud, alive, log, median, mint, poll, row, run_main, write_config,
    write_secret)

READY_LINE = "vgpud-guest: ready"
GUEST_TIMEOUT = 120  # a bound, not a wait: a boot under TCG takes a few seconds here


def tag(msg):
    log("qemu", msg)


def vmm_pid(iid):
    with open(os.path.join(MNT, "data/instances", iid, "instance.json")) as f:
        return json.load(f).get("hypervisor", {}).get("pid")


def console(c, iid):
    r = c.get("/instances/%s/console" % iid)
    return r.body.decode(errors="replace") if r.status == 200 else ""


def one_vm(c, images, label):
    """Returns (create s, create-to-guest-ready s, stop s)."""
    body = {"name": "bench-qemu", "vcpus": 1, "memory_mb": 256,
            "boot": {"kernel": os.path.join(images, "vmlinuz"),
                     "initrd": os.path.join(images, "initramfs.cpio.gz"),
                     "cmdline": "console=ttyS0"}}
    t0 = time.monotonic()
    r = c.request("POST", "/instances", body)
    create_s = time.monotonic() - t0
    if r.status != 201 or r.json().get("state") != "Running":
        raise RuntimeError("%s: create answered %r" % (label, r))
    iid = r.json()["id"]
    try:
        pid = vmm_pid(iid)
        if not poll(lambda: READY_LINE in console(c, iid), GUEST_TIMEOUT, 0.02):
            raise RuntimeError("%s: no %r on the console after %d s; console tail:\n%s" %
                               (label, READY_LINE, GUEST_TIMEOUT, console(c, iid)[-1500:]))
        ready_s = time.monotonic() - t0

        t1 = time.monotonic()
        r = c.request("POST", "/instances/%s/stop" % iid)
        stop_s = time.monotonic() - t1
        if r.status != 200 or r.json().get("state") != "Stopped":
            raise RuntimeError("%s: stop answered %r" % (label, r))
        if pid and alive(pid):
            raise RuntimeError("%s: QEMU (pid %d) still runs after the stop" % (label, pid))
        if "powering off" not in console(c, iid):
            raise RuntimeError("%s: the guest did not power off by itself (VMM-9)" % label)
    finally:
        r = c.request("DELETE", "/instances/" + iid)
        if r.status != 204:
            raise RuntimeError("%s: delete answered %r" % (label, r))
    tag("%s: create %.0f ms, guest ready %.0f ms after the POST, stop %.0f ms" %
        (label, create_s * 1000, ready_s * 1000, stop_s * 1000))
    return create_s, ready_s, stop_s


def main():
    build, guest, qemu = (os.path.abspath(a) for a in sys.argv[1:4])
    reps = int(os.environ.get("QEMU_REPS", "5"))
    vgpud = os.path.join(build, "src/daemon/vgpud")
    nvml = os.path.join(build, "sim/libnvidia-ml.so.1")

    work = tempfile.mkdtemp(prefix="vgpud-qemu.")
    d = None
    try:
        # A directory of ours, root's and not writable by others, as INST-6 asks of image_dirs.
        images = os.path.join(work, "images")
        os.mkdir(images, 0o755)
        for name in ("vmlinuz", "initramfs.cpio.gz"):
            shutil.copy(os.path.join(guest, name), images)
        secret = write_secret(work)
        config = write_config(work, nvml, extra='qemu_binary: "%s"\nqemu_accel: tcg\n'
                              'image_dirs: ["%s"]\n' % (qemu, images))
        d = Vgpud(vgpud, config, work, "qemu")
        d.wait_ready()
        c = Client(os.path.join(work, "api.sock"), mint(secret))
        if not poll(lambda: c.get("/readyz").status == 200, 30, 0.05):
            raise RuntimeError("/readyz is not 200 after READY=1")

        one_vm(c, images, "warm-up")
        creates, readies, stops = [], [], []
        for i in range(1, reps + 1):
            cr, rd, st = one_vm(c, images, "rep %d" % i)
            creates.append(cr * 1000)
            readies.append(rd * 1000)
            stops.append(st * 1000)
    finally:
        if d:
            d.stop()
            if os.environ.get("QEMU_KEEP_LOG"):
                shutil.copy(d.log_path, os.environ["QEMU_KEEP_LOG"])
        shutil.rmtree(work, ignore_errors=True)

    what = "GPU-less VM, real QEMU, tcg, 1 vCPU 256 MiB"
    row("INST-12", what + ": create to 201 Running (ms)", "%.0f" % median(creates))
    row("INST-12", what + ": create to the guest's ready line (ms)", "%.0f" % median(readies))
    row("INST-15", what + ": stop to 200 Stopped, ACPI powerdown (ms)", "%.0f" % median(stops))
    return 0


if __name__ == "__main__":
    run_main(main, "qemu")
