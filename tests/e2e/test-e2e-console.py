#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-e2e-console.py VGPUD OPENAPI_YAML FAKE_NVML BUILD_GUEST_SH GUEST_DIR QEMU VGPUCTL
#
# The console with the real QEMU (SPEC §22, SIM-19): vgpud boots build-guest.sh's guest under
# TCG, with a hook that gives it an interactive busybox shell on its serial console
# (/etc/guest-init.d/, see build-guest.sh's contract). An operator's session is played through
# a pty: `vgpuctl instances console ID --attach` (CONS-4) over the console's WebSocket (CONS-3)
# to QEMU's console socket (CONS-1). The test types a command the shell must evaluate and reads
# its result, proves that QEMU kept the session in console.log while it streamed it (CONS-1),
# that a second attach is refused, and that Ctrl-] detaches and leaves the terminal as it was.
# Whatever happens, the daemon and every QEMU under the work tree are killed, the tree removed.
import os
import re
import signal
import subprocess
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_guest import (  # noqa: E402 (after the path)
    guest_or_skip, initrd_with, note, run_with_vgpud, tail)
from vgpud_pty import Pty  # noqa: E402 (e2e_guest put tests/lib on the path)
from vgpud_test import (  # noqa: E402
    MNT, eq, ok, poll, run_group)

BUILD_GUEST, GUEST_DIR, QEMU, VGPUCTL = sys.argv[4:8]

BOOT_TIMEOUT = 90  # a bound: the guest is ready in a few seconds under TCG
INSTANCES = os.path.join(MNT, "data", "instances")

# An interactive shell on the serial line, its own session so that the line is its terminal.
SHELL_HOOK = """(
        exec setsid sh -c 'exec sh -i </dev/ttyS0 >/dev/ttyS0 2>&1'
) &
say "console shell started"
"""


def console_log(iid):
    try:
        with open(os.path.join(INSTANCES, iid, "console.log"), errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def check_session(c, d, work, images):
    kernel = os.path.join(images, "vmlinuz")
    initrd = os.path.join(images, "initramfs-shell.cpio.gz")
    body = {"name": "e2e-console", "vcpus": 1, "memory_mb": 256,
            "boot": {"kernel": kernel, "initrd": initrd, "cmdline": "console=ttyS0,115200"}}
    r = c.request("POST", "/instances", body)
    if not ok(r.status == 201, "the guest with a console shell is created", r.body[-300:]):
        note("vgpud log (tail):\n" + tail(d.log_text(), 30))
        return
    iid = r.json()["id"]
    ready = poll(lambda: "vgpud-guest: ready" in console_log(iid), BOOT_TIMEOUT, 0.2)
    if not ok(ready and "vgpud-guest: console shell started" in console_log(iid),
              "SIM-19: the guest boots and starts a shell on its console",
              tail(console_log(iid), 20)):
        return

    sock = os.path.join(work, "api.sock")
    argv = [VGPUCTL, "--unix", sock, "--token", c.token, "instances", "console", iid, "--attach"]
    t = Pty(argv)
    try:
        ok(t.read_until(b"Ctrl-] detaches"), "CONS-4: vgpuctl attaches to the real guest's "
           "console", t.out)
        ok(t.raw_now(), "CONS-4: the operator's terminal is in raw mode while attached")
        # The shell must evaluate it: the answer is not in what was typed.
        t.type(b"\r")
        t.type(b"echo console-$((6*7))-ok\r")
        got = t.read_until(b"console-42-ok", 30)
        ok(got, "CONS-3, CONS-4: a command typed through vgpuctl runs in the guest's shell "
           "and its output comes back", t.out[-400:])
        t.type(b"uname -r\r")
        release = re.escape(open(os.path.join(GUEST_DIR, "guest.info")).read().split(
            "kernel_release=")[1].split()[0]).encode()
        deadline = time.monotonic() + 30
        while not re.search(rb"\n" + release + rb"\r?\n", t.out) and time.monotonic() < deadline:
            t.read_until(b"\x00never", 0.5)
        ok(re.search(rb"\n" + release + rb"\r?\n", t.out),
           "CONS-4: the guest answers a second command (uname -r)", t.out[-300:])
        ok(poll(lambda: "console-42-ok" in console_log(iid), 10, 0.1),
           "CONS-1: QEMU keeps the session in console.log while it streams it")

        second = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
        ok(second.returncode == 1 and b"busy" in second.stderr,
           "CONS-3: a second attach is refused 409 busy", second.stderr)

        t.type(b"\x1d")
        eq(t.wait(20), 0, "CONS-4: Ctrl-] detaches, exit 0")
        ok(t.restored(), "CONS-4: the terminal is as it was before the attach")
    finally:
        t.close()

    # The guest went on without a client: another session finds the same shell.
    t = Pty(argv)
    try:
        ok(t.read_until(b"Ctrl-] detaches"), "CONS-4: a new session attaches after a detach")
        t.type(b"echo again-$((2+3))\r")
        ok(t.read_until(b"again-5", 30), "CONS-4: and the same shell answers", t.out[-300:])
        t.p.send_signal(signal.SIGTERM)
        eq(t.wait(20), 1, "CONS-4: SIGTERM ends the session")
        ok(t.restored(), "CONS-4: the terminal is restored after SIGTERM")
    finally:
        t.close()
    eq(c.request("DELETE", "/instances/" + iid).status, 204, "the instance deletes")


def main():
    guest = guest_or_skip(BUILD_GUEST, GUEST_DIR, QEMU)
    if not guest:
        return 1

    def prepare(images):
        initrd_with(guest.initrd, {"etc/guest-init.d/console-shell.sh": SHELL_HOOK},
                    os.path.join(images, "initramfs-shell.cpio.gz"))
    return run_with_vgpud("vgpud-e2e-console-", QEMU, guest, prepare=prepare,
                          groups=lambda c, d, work, images: run_group(
                              "session", lambda: check_session(c, d, work, images)))


if __name__ == "__main__":
    sys.exit(main())
