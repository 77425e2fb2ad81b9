#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-e2e-qemu-boot.py BUILD_GUEST_SH GUEST_DIR QEMU
#
# The end-to-end bench itself (SPEC SIM-19): builds (or reuses) the guest of build-guest.sh in
# GUEST_DIR and boots it with the real QEMU under TCG, with VMM-1's argv for a GPU-less VM
# started as VMM-3 says, without vgpud. Checks QMP readiness (VMM-5, VMM-20), the kernel and
# init lines on the console, the virtio-serial agent port from both ends, a graceful ACPI
# powerdown that ends QEMU by itself with status 0 and without its sockets (VMM-9, VMM-15);
# then, with an overlay archive, the init's agent hook and QMP quit. Every QEMU started here
# is killed (by process group id) whatever happens; the work tree is removed. Output is TAP;
# timings go to TAP comments.
import os
import shutil
import socket
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_guest import (  # noqa: E402 (after the path)
    Qemu, Qmp, eq, exit_status, guest_or_skip, initrd_with, note, ok, plan, qemu_argv, read_text,
    run_group, tail, wait_console)

BUILD_GUEST, GUEST_DIR, QEMU = sys.argv[1:4]

# Bounds, not waits: a boot under TCG takes about 2.5 s here; the machine may be loaded by the
# rest of the suite.
BOOT_TIMEOUT = 60
QMP_TIMEOUT = 30  # vmm.boot_timeout's default (VMM-5)
POWERDOWN_TIMEOUT = 30
QUIT_TIMEOUT = 5  # VMM-9
CMDLINE = "console=ttyS0"
PORT_LINE = r"^vgpud-guest: agent port (vport\d+p\d+) \(org\.vgpud\.agent\.0\)$"

vms = []


class Instance:
    """An instance's files laid out as INST-1 does: sockets under run/, logs under data/."""

    def __init__(self, work, name):
        self.name = name
        run = os.path.join(work, "run", "instances", name)
        data = os.path.join(work, "data", "instances", name)
        os.makedirs(run, mode=0o700)
        os.makedirs(data, mode=0o700)
        self.qmp_socket = os.path.join(run, "qmp.sock")
        self.agent_socket = os.path.join(run, "agent.sock")
        self.console_log = os.path.join(data, "console.log")
        self.qemu_log = os.path.join(data, "qemu.log")

    def start(self, guest, initrd=None):
        argv = qemu_argv(QEMU, self.name, self.qmp_socket, self.agent_socket, self.console_log,
                         kernel=True, initrd=True, append=CMDLINE, vcpus=1, memory_mb=256,
                         accel="tcg")
        vm = Qemu(argv, self.qemu_log, passed=[guest.kernel, initrd or guest.initrd])
        vms.append(vm)
        return vm

    def console(self):
        return read_text(self.console_log)

    def diagnostics(self, vm):
        rc = vm.proc.poll()
        state = "running" if rc is None else "exited with status %d" % rc
        return "qemu %s; qemu.log:\n%s\nconsole.log (tail):\n%s" % (
            state, tail(vm.log_text(), 20), tail(self.console(), 40))

    def sockets_left(self):
        return [p for p in (self.qmp_socket, self.agent_socket) if os.path.exists(p)]


def ready(inst, vm):
    """VMM-5 and VMM-20: connect with 50 ms polling, greeting, qmp_capabilities, query-status
    running. Returns the client, or None after reporting the failure."""
    t0 = time.monotonic()
    try:
        qmp = Qmp.connect(inst.qmp_socket, QMP_TIMEOUT, vm.alive)
    except OSError as e:
        ok(False, "VMM-5: QMP socket accepts a connection within %d s" % QMP_TIMEOUT,
           "%s\n%s" % (e, inst.diagnostics(vm)))
        return None
    ok(True, "VMM-5: QMP socket accepts a connection within %d s" % QMP_TIMEOUT)
    note("%s: QMP connected %.2f s after spawn" % (inst.name, time.monotonic() - t0))
    g = qmp.greeting(5)
    ok("version" in g["QMP"], "VMM-20: the greeting is {\"QMP\": {\"version\": ...}}", g)
    if not eq(qmp.command("qmp_capabilities"), {"return": {}}, "VMM-20: qmp_capabilities"):
        return None
    st = qmp.command("query-status").get("return", {})
    if not ok(st.get("status") == "running" and st.get("running") is True,
              "VMM-5: query-status reports running", st):
        return None
    return qmp


def agent_echo(inst, timeout=10):
    """Sends one line on agent.sock and returns what comes back before the newline."""
    token = "vgpud-e2e-%d" % os.getpid()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        s.connect(inst.agent_socket)
        s.sendall((token + "\n").encode())
        deadline = time.monotonic() + timeout
        buf = b""
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                chunk = s.recv(4096)
            except socket.timeout:
                break
            if not chunk:
                break
            buf += chunk
        return token, buf.partition(b"\n")[0].decode(errors="replace")
    finally:
        s.close()


def test_boot_and_powerdown(guest, work):
    """SIM-19's guest boots with VMM-1's argv and powers off through QMP (VMM-9)."""
    inst = Instance(work, "e2e-boot")
    vm = inst.start(guest)
    qmp = ready(inst, vm)
    if not qmp:
        return
    try:
        m = wait_console(inst.console_log, r"^\[ *[0-9.]+\] Linux version \S+", BOOT_TIMEOUT,
                         vm.alive)
        if not ok(m, "SIM-19: the kernel boots (console.log shows 'Linux version')",
                  inst.diagnostics(vm)):
            return
        note("guest kernel: " + m.group(0).split("] ", 1)[1])
        m = wait_console(inst.console_log, r"^vgpud-guest: init reached$", BOOT_TIMEOUT,
                         vm.alive)
        boot_seconds = time.monotonic() - vm.started
        if not ok(m, "SIM-19: the initramfs reaches init within %d s" % BOOT_TIMEOUT,
                  inst.diagnostics(vm)):
            return
        run_init = wait_console(inst.console_log, r"^\[ *([0-9.]+)\] Run /init as init", 1)
        note("boot to init marker: %.2f s from spawn (the kernel ran /init at %s s of its clock)"
             % (boot_seconds, run_init.group(1) if run_init else "?"))

        m = wait_console(inst.console_log, r"^vgpud-guest: (ready|agent port .* not found)$",
                         BOOT_TIMEOUT, vm.alive)
        ok(m and m.group(1) == "ready", "SIM-19: init finishes its start-up ('ready')",
           inst.diagnostics(vm))
        text = inst.console()
        ok("vgpud-guest: insmod" not in text,
           "SIM-19: every module loads (virtio_console and its dependencies, evdev, button)",
           [l for l in text.splitlines() if "insmod" in l or "Unknown symbol" in l])
        port = wait_console(inst.console_log, PORT_LINE, 1)
        ok(port, "SIM-19: the guest sees the virtio-serial port org.vgpud.agent.0 (VMM-1)",
           inst.diagnostics(vm))
        ok(port and "vgpud-guest: echoing %s" % port.group(1) in text,
           "init echoes the port when there is no /bin/vgpu-agent", tail(text, 10))

        sent, got = agent_echo(inst)
        eq(got, sent, "SIM-19: a line written to agent.sock comes back through the guest's port")

        # VMM-9: the graceful stop. The guest's acpid powers it off; QEMU exits by itself.
        t0 = time.monotonic()
        eq(qmp.command("system_powerdown"), {"return": {}}, "VMM-20: system_powerdown")
        try:
            ev = qmp.wait_event("SHUTDOWN", POWERDOWN_TIMEOUT)
        except Exception as e:  # a closed connection or no event in time
            ev = {"error": str(e)}
        ok(ev.get("data", {}).get("guest") is True
           and ev.get("data", {}).get("reason") == "guest-shutdown",
           "VMM-20: a SHUTDOWN event from the guest follows", ev)
        rc = vm.wait(POWERDOWN_TIMEOUT)
        down_seconds = time.monotonic() - t0
        if not ok(rc is not None,
                  "VMM-9: QEMU exits by itself within %d s of system_powerdown"
                  % POWERDOWN_TIMEOUT, inst.diagnostics(vm)):
            return
        note("powerdown to exit: %.2f s" % down_seconds)
        eq(rc, 0, "VMM-9: QEMU exits with status 0 after a guest powerdown")
        ok("vgpud-guest: power button, powering off" in inst.console(),
           "SIM-19: the guest's acpid ran its PWRF action", tail(inst.console(), 10))
        eq(inst.sockets_left(), [],
           "VMM-15: QEMU itself removes qmp.sock and agent.sock when the guest powers off")
    finally:
        qmp.close()


# The stand-in agent prints its arguments and exits 3, so the hook's contract shows on the
# console: the port found by name, the words of /etc/vgpu-agent.args, the exit status.
STAND_IN_AGENT = """#!/bin/sh
echo "stand-in agent: $*"
exit 3
"""
HOOK = """say "hook ran"
: >/tmp/kmsg
"""


def test_agent_hook(guest, work):
    """The init contract of build-guest.sh that the daemon tests build on: an overlay archive
    adds a vgpu-agent, its arguments and a hook; then QMP quit (VMM-9's second step)."""
    inst = Instance(work, "e2e-hook")
    initrd = initrd_with(guest.initrd, {
        "/bin/vgpu-agent": (STAND_IN_AGENT, 0o755),
        "/etc/vgpu-agent.args": "--gpu-watch on --kmsg /tmp/kmsg\n",
        "/etc/guest-init.d/50-e2e.sh": HOOK,
    }, os.path.join(work, "initrd-hook.cpio.gz"))
    vm = inst.start(guest, initrd)
    qmp = ready(inst, vm)
    if not qmp:
        return
    try:
        m = wait_console(inst.console_log, r"^vgpud-guest: agent exited with status (\d+)$",
                         BOOT_TIMEOUT, vm.alive)
        if not ok(m, "the agent hook runs /bin/vgpu-agent and reports its exit",
                  inst.diagnostics(vm)):
            return
        eq(m.group(1), "3", "the hook reports the agent's exit status")
        text = inst.console()
        port = wait_console(inst.console_log, PORT_LINE, 1)
        want = "stand-in agent: --serial /dev/%s --gpu-watch on --kmsg /tmp/kmsg" % (
            port.group(1) if port else "?")
        ok(want in text.splitlines(),
           "the agent gets --serial /dev/<port> and the words of /etc/vgpu-agent.args",
           tail(text, 12))
        lines = text.splitlines()
        hook = "vgpud-guest: hook ran"
        ok(hook in lines and want in lines and lines.index(hook) < lines.index(want),
           "/etc/guest-init.d/*.sh run before the agent starts", tail(text, 12))
        ok(not any(l.startswith("vgpud-guest: echoing") for l in lines),
           "no echo on the port when an agent is present", tail(text, 12))

        eq(qmp.command("quit"), {"return": {}}, "VMM-9: quit")
        rc = vm.wait(QUIT_TIMEOUT)
        eq(rc, 0, "VMM-9: QEMU exits with status 0 within %d s of quit" % QUIT_TIMEOUT)
        if rc is not None:
            eq(inst.sockets_left(), [], "VMM-15: QEMU itself removes its sockets on quit")
    finally:
        qmp.close()


def main():
    guest = guest_or_skip(BUILD_GUEST, GUEST_DIR, QEMU)
    if not guest:
        return 1

    work = tempfile.mkdtemp(prefix="vgpud-e2e-")
    try:
        run_group("boot and powerdown", lambda: test_boot_and_powerdown(guest, work))
        run_group("agent hook", lambda: test_agent_hook(guest, work))
    finally:
        for vm in vms:
            vm.kill()
        shutil.rmtree(work, ignore_errors=True)
        plan()
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
