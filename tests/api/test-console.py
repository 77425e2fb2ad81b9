#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-console.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# The serial console (SPEC §22) against the real vgpud on a mounted vgpu-sim with fake-qemu as
# the VMM, in run-sim-test.sh's private PID namespace (SIM-21). fake-qemu's console socket
# echoes what is typed into it and logs it, as a guest's tty with echo on does (SIM-15), so a
# test can type and read back.
#
#  - console: CONS-1's socket chardev with console.log as its logfile; a record from before the
#    change (no hypervisor.console_socket) still loads, its running VMM, whose console is a plain
#    file, is adopted, and the next start makes the console a socket.
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    eq, exit_status, ok, poll, run_group, start, stop, write_secret)
from vgpud_instances import (  # noqa: E402
    INSTANCES, alive, console_file, console_text, create_running, delete_all, finish_run, get,
    make_images, persisted, pid_of, post, record, runtime_dir, vmm_config, wait_state)


def console_socket(work, iid):
    return os.path.join(runtime_dir(work, iid), "console.sock")


def type_and_read(path, text, want, timeout=5):
    """Connects to a console socket, types text and reads until want has come back."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    try:
        s.connect(path)
        s.sendall(text)
        got = b""
        while want not in got:
            chunk = s.recv(4096)
            if not chunk:
                break
            got += chunk
        return got
    finally:
        s.close()


def write_record(iid, rec):
    """A hand edit of instance.json while no daemon runs: vgpud's own crash-safe steps."""
    path = os.path.join(INSTANCES, iid, "instance.json")
    with open(path + ".tmp", "w") as f:
        json.dump(rec, f)
        f.flush()
        os.fsync(f.fileno())
    os.rename(path + ".tmp", path)


def start_time_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def old_vmm(work, iid, argv):
    """The VMM a vgpud from before CONS-1 started: the same command with the console as a file
    chardev, started as vgpud starts QEMU (own session, stdin /dev/null, output to qemu.log,
    the kernel at descriptor 3 as INST-6 passes it)."""
    log = os.path.join(INSTANCES, iid, "console.log")
    old = [("file,id=console0,path=%s,append=on" % log.replace(",", ",,"))
           if a.startswith("socket,id=console0,") else a for a in argv]
    ok(old != argv, "the VMM's command had CONS-1's console socket", argv)
    with open(os.path.join(INSTANCES, iid, "qemu.log"), "ab") as out:
        p = subprocess.Popen(["sh", "-c", 'exec 3<"$0" && exec "$@"', record(iid)["boot"]["kernel"]]
                             + old, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                             start_new_session=True, close_fds=True)
    # Up once its QMP socket listens again (it replaces the one its predecessor left).
    qmp = os.path.join(runtime_dir(work, iid), "qmp.sock")

    def listening():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(qmp)
            return True
        except OSError:
            return False
        finally:
            s.close()
    ok(poll(listening, 10, 0.05), "the old-shape VMM listens on its QMP socket")
    return p


def check_console_socket(work, config, secret, sock, daemons):
    d, c = start(work, "a", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    inst = create_running(c, "con-a")
    iid = inst["id"]
    rec = record(iid)
    # CONS-1, INST-2a: the record names the socket, under runtime_dir beside the others.
    eq(rec["hypervisor"].get("console_socket"), console_socket(work, iid),
       "CONS-1, INST-2a: the record keeps hypervisor.console_socket")
    pid = pid_of(iid)
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0")[:-1]]
    want = ("socket,id=console0,path=%s,server=on,wait=off,logfile=%s,logappend=on" %
            (console_socket(work, iid), os.path.join(INSTANCES, iid, "console.log")))
    ok(want in argv and argv[argv.index(want) + 1:argv.index(want) + 3] ==
       ["-serial", "chardev:console0"],
       "CONS-1, VMM-1: the console is a socket chardev with console.log as its logfile", argv)
    got = type_and_read(console_socket(work, iid), b"uname -a\n", b"uname -a\n")
    ok(b"uname -a\n" in got, "CONS-1: what is typed on the console socket reaches the guest",
       got)
    ok(poll(lambda: "uname -a\n" in console_file(iid), 5, 0.05),
       "CONS-1: the guest's output is kept in console.log", console_file(iid)[-500:])
    ok("uname -a" in console_text(c, iid), "API-2: the console route still reads the log")
    stop(d, " (a)")

    # A vgpud from before CONS-1 left this VMM and record: the console a file, no socket named.
    os.kill(pid, signal.SIGKILL)
    ok(poll(lambda: not alive(pid), 5, 0.02), "the socket-console VMM is gone")
    vmm = old_vmm(work, iid, argv)
    try:
        rec = record(iid)
        del rec["hypervisor"]["console_socket"]
        rec["hypervisor"]["pid"] = vmm.pid
        rec["hypervisor"]["start_time"] = start_time_of(vmm.pid)
        write_record(iid, rec)
        if os.path.exists(console_socket(work, iid)):
            os.unlink(console_socket(work, iid))

        d, c = start(work, "b", config, secret, sock)
        daemons.append(d)
        if not c:
            return
        g = get(c, iid) or {}
        eq(g.get("state"), "Running",
           "CONS-1, INST-21: a record from before the console socket loads and its VMM is "
           "adopted")
        eq(pid_of(iid), vmm.pid, "CONS-1: the adopted VMM is the old one")
        ok("console_socket" not in record(iid)["hypervisor"] and
           not os.path.exists(console_socket(work, iid)),
           "CONS-1: its console stays a plain file until the next start", record(iid))
        ok("fake-qemu: started name=con-a" in console_text(c, iid),
           "CONS-1: the plain-file console is still served by the console route")

        eq(post(c, iid, "stop")[0], 200, "the old-shape instance stops")
        vmm.wait(10)
        st, b = post(c, iid, "start")
        eq((st, b.get("state")), (200, "Running"), "and starts again")
        r = persisted(iid, lambda r: r.get("hypervisor", {}).get("console_socket"))
        eq(r.get("hypervisor", {}).get("console_socket"), console_socket(work, iid),
           "CONS-1: the next start makes the console a socket")
        got = type_and_read(console_socket(work, iid), b"echo again\n", b"echo again\n")
        ok(b"echo again\n" in got, "CONS-1: and its socket echoes", got)
        eq(delete_all(c), [], "the instance deletes")
        ok(not os.path.exists(runtime_dir(work, iid)),
           "INST-20: deleting removes the console socket with the runtime directory")
        stop(d, " (b)")
    finally:
        if vmm.poll() is None:
            vmm.kill()
            vmm.wait()


def main():
    work = tempfile.mkdtemp(prefix="vgpud-console-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work)
        sock = os.path.join(work, "api.sock")
        run_group("console", lambda: check_console_socket(work, config, secret, sock, daemons))
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
