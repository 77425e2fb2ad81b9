#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-console.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU VGPUCTL
#
# The serial console (SPEC §22) against the real vgpud on a mounted vgpu-sim with fake-qemu as
# the VMM, in run-sim-test.sh's private PID namespace (SIM-21). fake-qemu's console socket
# echoes what is typed into it and logs it, as a guest's tty with echo on does (SIM-15), so a
# test can type and read back.
#
#  - console: CONS-1's socket chardev with console.log as its logfile; a record from before the
#    change (no hypervisor.console_socket) still loads, its running VMM, whose console is a plain
#    file, is adopted, and the next start makes the console a socket.
#  - follow: CONS-2's streamed console: the tail, then what is typed, as it is written; 16
#    followers and a 17th refused 409 busy; a follower that hangs up frees its place; the
#    loop answers meanwhile; VMM-8's truncation followed; the end when the VMM exits; a stopped
#    instance's follow is its tail.
#  - attach: CONS-3's WebSocket: the handshake, typing and reading back, one client (409 busy),
#    the token in the Authorization header or offered as a subprotocol (never echoed, never
#    logged), the handshake's refusals, every protocol violation closed with its status code,
#    pings past the HTTP idle timeout, a client that never reads dropped while the loop and the
#    others go on, the close when the VMM exits.
#  - shutdown: vgpud stops (OPS-3) while a follower and an attached client are connected.
#  - vgpuctl: CONS-4's `instances console ID --follow` and `--attach`, the latter driven through a
#    pty: raw mode while attached, typing and reading back, Ctrl-] detaching, and the terminal
#    restored after a detach, a SIGTERM and a dropped connection.
import http.client
import threading
import time
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
    UnixConnection, eq, exit_status, ok, poll, run_group, start, stop, timed_get, write_secret)
from vgpud_pty import Pty  # noqa: E402
from vgpud_ws import WebSocket  # noqa: E402
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
        w = attach(c, iid)
        eq((w.status, json.loads(w.body or b"{}").get("code")), (409, "invalid_state"),
           "CONS-1, CONS-3: attaching to a plain-file console is 409 invalid_state")
        w.close()

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


class Follower:
    """GET /instances/{id}/console?follow=true, read as it streams (chunked)."""

    def __init__(self, c, iid, query="follow=true", timeout=10):
        self.conn = UnixConnection(c.unix_path, timeout)
        self.conn.request("GET", "/instances/%s/console?%s" % (iid, query),
                          headers={"Authorization": "Bearer " + c.token})
        self.r = self.conn.getresponse()
        self.got = b""

    def until(self, want, timeout=10):
        """Reads until want has arrived (True), or the body ends or timeout passes (False)."""
        self.conn.sock.settimeout(timeout)
        try:
            while want not in self.got:
                chunk = self.r.read1(65536)
                if not chunk:
                    return False
                self.got += chunk
        except (TimeoutError, OSError, http.client.HTTPException):
            return False
        return True

    def ends(self, timeout=10):
        """Reads to the body's end: True when it ends (a complete chunked body) in time."""
        self.conn.sock.settimeout(timeout)
        try:
            while True:
                chunk = self.r.read1(65536)
                if not chunk:
                    return True
                self.got += chunk
        except (TimeoutError, OSError, http.client.HTTPException) as e:
            self.error = repr(e)
            return False

    def let_go(self, timeout=10):
        """True once the body ends or the connection closes; False if it still waits."""
        if self.ends(timeout):
            return True
        return "timed out" not in getattr(self, "error", "timed out")

    def close(self):
        self.conn.close()


def check_follow(work, config, secret, sock, daemons):
    d, c = start(work, "f", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    iid = create_running(c, "con-f")["id"]
    sock_path = console_socket(work, iid)
    type_and_read(sock_path, b"before-follow\n", b"before-follow\n")

    f = Follower(c, iid, "follow=true&tail_bytes=14")
    eq((f.r.status, f.r.getheader("Content-Type"), f.r.getheader("Transfer-Encoding")),
       (200, "text/plain; charset=utf-8", "chunked"),
       "CONS-2, API-2: a follow answers 200 text/plain, chunked")
    ok(f.until(b"before-follow\n") and f.got == b"before-follow\n",
       "CONS-2: the follow starts with the last tail_bytes of the log", f.got)
    type_and_read(sock_path, b"typed-while-following\n", b"typed-while-following\n")
    ok(f.until(b"typed-while-following\n"),
       "CONS-2: what the guest writes streams to the follower as it is written", f.got)

    others = []
    try:
        for k in range(15):
            others.append(Follower(c, iid, "follow=true&tail_bytes=1"))
        eq([o.r.status for o in others], [200] * 15, "CONS-2: 16 followers are served")
        extra = Follower(c, iid)
        body = extra.r.read()
        extra.close()
        eq((extra.r.status, json.loads(body).get("code")), (409, "busy"),
           "CONS-2, API-11: a 17th follower is refused 409 busy")
        st, took = timed_get(c, "/healthz", 2.0)
        ok(st == 200 and took < 1.0,
           "CONS-2, GEN-2: the loop answers while 16 followers wait", (st, took))
        others.pop().close()

        def seventeenth():
            x = Follower(c, iid, "follow=true&tail_bytes=1")
            if x.r.status == 200:
                others.append(x)
                return True
            x.r.read()
            x.close()
            return False
        ok(poll(seventeenth, 5, 0.1), "CONS-2: a follower that hangs up frees its place")
        type_and_read(sock_path, b"to-all\n", b"to-all\n")
        ok(all(o.until(b"to-all\n", 5) for o in others),
           "CONS-2: every follower sees the output")
    finally:
        for o in others:
            o.close()

    # VMM-8 stays: a log past vmm.console_max_bytes is truncated by the next pass, with its
    # marker; the follower goes on from the log's new start.
    big = b"x" * 1023 + b"\n"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(sock_path)
    try:
        for _ in range(80):
            s.sendall(big)
        ok(poll(lambda: "[vgpud: console log truncated]" in console_file(iid), 15, 0.1),
           "VMM-8: the reconcile pass truncates an oversized console log with its marker")
        ok(f.until(b"[vgpud: console log truncated]\n"),
           "CONS-2, VMM-8: the follower sees the truncation marker", f.got[-200:])
        s.sendall(b"after-truncation\n")
        ok(f.until(b"after-truncation\n"),
           "CONS-2, VMM-8: and what comes after it", f.got[-200:])
    finally:
        s.close()

    eq(post(c, iid, "stop")[0], 200, "the followed instance stops")
    ok(f.ends(), "CONS-2: the follow ends when the VMM exits", getattr(f, "error", None))
    ok(b"fake-qemu: exit status=0" in f.got,
       "CONS-2: the VMM's last words reach the follower before the end", f.got[-300:])
    f.close()

    g = Follower(c, iid, "follow=true&tail_bytes=200")
    ok(g.r.status == 200 and g.ends() and b"fake-qemu: exit status=0" in g.got,
       "CONS-2: following a stopped instance gives its tail and ends", g.got)
    g.close()

    r = c.get("/instances/%s/console?follow=yes" % iid)
    eq((r.status, r.json().get("code")), (400, "invalid_request"),
       "API-3: follow other than true or false is 400 invalid_request")
    r = c.get("/instances/%s/console?follow=true" % ("z" * 20))
    eq(r.status, 404, "CONS-2: following an unknown instance is 404")
    eq(delete_all(c), [], "the instance deletes")
    stop(d, " (f)")


def attach(c, iid, **kw):
    kw.setdefault("token", c.token)
    return WebSocket("/instances/%s/console/attach" % iid, unix_path=c.unix_path, **kw)


def wait_attachable(c, iid, timeout=5):
    """A new attach once the last one's end has freed the place; None when it never does."""
    found = []

    def once():
        w = attach(c, iid)
        if w.ok:
            found.append(w)
            return True
        w.close()
        return False
    poll(once, timeout, 0.05)
    return found[0] if found else None


def violation(c, iid, raw):
    """Attaches, sends raw bytes, and returns the close code the server answers with."""
    w = wait_attachable(c, iid)
    if not w:
        return "no attach"
    try:
        w.send_raw(raw)
        return w.close_code()
    finally:
        w.close()


def check_attach(work, config, secret, sock, daemons):
    from vgpud_ws import frame, OP_BINARY, OP_TEXT, OP_PING, Closed
    d, c = start(work, "w", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    iid = create_running(c, "con-w")["id"]

    w = attach(c, iid)
    eq((w.status, w.headers.get("upgrade", "").lower(), w.headers.get("sec-websocket-protocol")),
       (101, "websocket", "vgpud.console.v1"),
       "CONS-3: the upgrade answers 101 with the subprotocol vgpud.console.v1")
    ok(w.accept_ok(), "CONS-3: Sec-WebSocket-Accept is RFC 6455's hash of the key")
    w.send(b"echo attached\n")
    got = w.read_until(b"echo attached\n")
    ok(b"echo attached\n" in got, "CONS-3: typed bytes reach the console and its output comes "
       "back as binary frames", got)
    ok(poll(lambda: "echo attached" in console_file(iid), 5, 0.05),
       "CONS-3, CONS-1: the session is in console.log too")

    second = attach(c, iid)
    eq((second.status, json.loads(second.body or b"{}").get("code")), (409, "busy"),
       "CONS-3, API-11: a second attach is 409 busy")
    second.close()
    f = Follower(c, iid, "follow=true&tail_bytes=1")
    w.send(b"seen by followers\n")
    ok(f.until(b"seen by followers\n"), "CONS-2, CONS-3: followers see the attached session")
    f.close()
    w.close()

    # The token (API-12): checked before the upgrade, as a header or a subprotocol.
    x = wait_attachable(c, iid)
    ok(x is not None, "CONS-3: a client that hangs up frees the place")
    if x:
        x.close()
    x = WebSocket("/instances/%s/console/attach" % iid, unix_path=c.unix_path)
    eq(x.status, 401, "CONS-3, API-12: an attach without a token is 401")
    x.close()
    x = attach(c, iid, token=None, protocols=("vgpud.console.v1", "bearer." + c.token[:-2] + "xx"))
    eq(x.status, 401, "CONS-3, API-12: a wrongly signed token offered as a subprotocol is 401")
    x.close()

    def by_protocol():
        y = attach(c, iid, token=None, protocols=("vgpud.console.v1", "bearer." + c.token))
        if y.ok:
            return y
        y.close()
        return None
    y = poll(by_protocol, 5, 0.05)
    ok(y is not None and y.headers.get("sec-websocket-protocol") == "vgpud.console.v1",
       "CONS-3: a browser's token offered as subprotocol bearer.<JWT> is accepted, and only "
       "vgpud.console.v1 is answered", y and y.headers)
    if y:
        y.send(b"via protocol\n")
        ok(b"via protocol\n" in y.read_until(b"via protocol\n"),
           "CONS-3: the session by subprotocol token works")
        y.close()
    ok(c.token not in d.log_text() and c.token.split(".")[2] not in d.log_text(),
       "CONS-3, API-20: the token is never logged")

    # The handshake's refusals (RFC 6455 4.2.1).
    x = attach(c, iid, protocols=("chat",))
    eq((x.status, json.loads(x.body or b"{}").get("message")),
       (400, "Sec-WebSocket-Protocol must offer vgpud.console.v1"),
       "CONS-3: an attach not offering vgpud.console.v1 is 400")
    x.close()
    x = attach(c, iid, version="8")
    eq((x.status, x.headers.get("sec-websocket-version")), (400, "13"),
       "CONS-3: another WebSocket version is 400 naming version 13")
    x.close()
    r = c.get("/instances/%s/console/attach" % iid)
    eq((r.status, r.json().get("code")), (400, "invalid_request"),
       "CONS-3: a plain GET of the attach route is 400")

    # Every violation closes with RFC 6455's status code.
    eq(violation(c, iid, frame(OP_TEXT, b"ls\n")), 1003, "CONS-3: a text frame is closed 1003")
    eq(violation(c, iid, frame(OP_BINARY, b"ls\n", mask=False)), 1002,
       "CONS-3: an unmasked frame is closed 1002")
    eq(violation(c, iid, frame(3, b"")), 1002, "CONS-3: opcode 3 is closed 1002")
    eq(violation(c, iid, frame(OP_BINARY, b"", rsv=4)), 1002,
       "CONS-3: a reserved bit is closed 1002")
    eq(violation(c, iid, frame(OP_BINARY, b"", length=65537)), 1009,
       "CONS-3: a frame over 64 KiB is closed 1009, from its header")
    eq(violation(c, iid, frame(OP_PING, b"x" * 126)), 1002,
       "CONS-3: a control frame over 125 bytes is closed 1002")

    # Pings keep it alive past the HTTP idle timeout (10 s).
    w = wait_attachable(c, iid)
    pings = 0
    if w:
        deadline = time.monotonic() + 12
        w.sock.settimeout(1)
        while time.monotonic() < deadline:
            try:
                op, payload = w.recv_frame()
            except (TimeoutError, OSError):
                continue
            if op == OP_PING:
                pings += 1
                w.send(payload, opcode=10)
        w.sock.settimeout(10)
        w.send(b"still here\n")
        try:
            alive = b"still here\n" in w.read_until(b"still here\n")
        except (Closed, OSError):
            alive = False
        ok(pings >= 2 and alive,
           "CONS-3: vgpud pings every 5 s and the session outlives the 10 s idle timeout",
           pings)
        w.close()

    # A client that never reads: its queue fills, it is dropped; the loop never waits on it.
    w = wait_attachable(c, iid)
    if w:
        w.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        w.sock.settimeout(20)
        done = []

        def flood():
            try:
                for _ in range(200):
                    w.send(b"y" * 65536)
            except OSError as e:
                done.append(e)
            done.append("sent")
        t = threading.Thread(target=flood, daemon=True)
        t.start()
        worst = 0.0
        for _ in range(20):
            st, took = timed_get(c, "/healthz", 2.0)
            worst = max(worst, took if st == 200 else 99)
            time.sleep(0.05)
        t.join(30)
        ok(worst < 1.0, "CONS-3, GEN-2: the loop answers while a client does not read", worst)
        x = wait_attachable(c, iid, 20)
        ok(x is not None, "CONS-3: a client that never reads is dropped (bounded queue), and "
           "the console is free again", done)
        if x:
            x.close()
        w.close()

    # The VMM exits: the session closes normally.
    w = wait_attachable(c, iid)
    if w:
        eq(post(c, iid, "stop")[0], 200, "the attached instance stops")
        eq(w.close_code(), 1000, "CONS-3: the VMM's exit closes the session with 1000")
        w.close()
    x = attach(c, iid)
    eq((x.status, json.loads(x.body or b"{}").get("code")), (409, "invalid_state"),
       "CONS-3: attaching to a stopped instance is 409 invalid_state")
    x.close()
    x = attach(c, "z" * 20)
    eq(x.status, 404, "CONS-3: attaching to an unknown instance is 404")
    x.close()
    eq(delete_all(c), [], "the instance deletes")
    stop(d, " (w)")


VGPUCTL = sys.argv[5] if len(sys.argv) > 5 else None


def check_vgpuctl(work, config, secret, sock, daemons):
    if not VGPUCTL:
        ok(False, "vgpuctl given as the fifth argument")
        return
    d, c = start(work, "v", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    iid = create_running(c, "con-v")["id"]
    base = ["--unix", sock, "--token", c.token, "instances", "console", iid]

    # --follow: the tail, then the output as it comes, until the VMM exits.
    type_and_read(console_socket(work, iid), b"before-ctl-follow\n", b"before-ctl-follow\n")
    f = subprocess.Popen([VGPUCTL] + base + ["--follow", "--tail-bytes", "18"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        got = b""
        os.set_blocking(f.stdout.fileno(), False)

        def more(want):
            nonlocal got
            while True:
                try:
                    chunk = f.stdout.read()
                except (BlockingIOError, TypeError):
                    chunk = None
                if not chunk:
                    return want in got
                got += chunk
        ok(poll(lambda: more(b"before-ctl-follow\n"), 10, 0.05),
           "CONS-4, CONS-2: vgpuctl --follow prints the tail", got)
        type_and_read(console_socket(work, iid), b"during-ctl-follow\n",
                      b"during-ctl-follow\n")
        ok(poll(lambda: more(b"during-ctl-follow\n"), 10, 0.05),
           "CONS-4, CONS-2: and the output as it comes", got)
        eq(post(c, iid, "stop")[0], 200, "the followed instance stops")
        try:
            rc = f.wait(10)
        except subprocess.TimeoutExpired:
            rc = None
        eq(rc, 0, "CONS-4: vgpuctl --follow ends with the VMM, exit 0")
    finally:
        if f.poll() is None:
            f.kill()
        f.wait()
    eq(post(c, iid, "start")[1].get("state"), "Running", "the instance starts again")

    # --attach through a pty: raw mode, type and read back, Ctrl-] detaches.
    t = Pty([VGPUCTL] + base + ["--attach"])
    try:
        ok(t.read_until(b"Ctrl-] detaches"), "CONS-4: vgpuctl --attach attaches", t.out)
        ok(t.raw_now(), "CONS-4: the terminal is in raw mode while attached")
        t.type(b"echo through-the-pty\r")
        ok(t.read_until(b"echo through-the-pty\r"),
           "CONS-4: what is typed reaches the guest and its output comes back", t.out)
        t.type(b"\x1d")
        eq(t.wait(), 0, "CONS-4: Ctrl-] detaches, exit 0")
        ok(t.restored(), "CONS-4: the terminal is restored after a detach")
        ok(t.read_until(b"vgpuctl: detached", 5), "CONS-4: vgpuctl says it detached",
           t.out[-200:])
    finally:
        t.close()

    t = Pty([VGPUCTL] + base + ["--attach"])
    try:
        ok(t.read_until(b"Ctrl-] detaches"), "a second vgpuctl attaches once the first is gone",
           t.out)
        second = subprocess.run([VGPUCTL] + base + ["--attach"], stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=20)
        ok(second.returncode == 1 and b"error: busy:" in second.stderr,
           "CONS-4, CONS-3: another attach meanwhile is refused 409 busy, exit 1",
           (second.returncode, second.stderr))
        t.p.send_signal(signal.SIGTERM)
        eq(t.wait(), 1, "CONS-4: SIGTERM ends the attach, exit 1")
        ok(t.restored(), "CONS-4: the terminal is restored after SIGTERM")
    finally:
        t.close()

    bad = subprocess.run([VGPUCTL] + base + ["--attach", "--follow"], capture_output=True,
                         timeout=20)
    eq(bad.returncode, 2, "CONS-4, OPS-8: --attach with --follow is a usage error")

    t = Pty([VGPUCTL] + base + ["--attach"])
    try:
        ok(t.read_until(b"Ctrl-] detaches"), "vgpuctl attaches again", t.out)
        d.stop(signal.SIGKILL)  # the connection drops under it
        eq(t.wait(), 3, "CONS-4, OPS-8: a dropped connection ends the attach, exit 3")
        ok(t.restored(), "CONS-4: the terminal is restored after a dropped connection")
    finally:
        t.close()


def check_shutdown(work, config, secret, sock, daemons):
    # OPS-3 with the console in use: vgpud stops on SIGTERM while a follower and an attached
    # client are connected; both end, and the VM runs on to be adopted by the next vgpud.
    d, c = start(work, "s", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    iid = create_running(c, "con-s")["id"]
    pid = pid_of(iid)
    f = Follower(c, iid, "follow=true&tail_bytes=1")
    w = attach(c, iid)
    ok(f.r.status == 200 and w.ok, "a follower and an attached client are connected")
    t0 = time.monotonic()
    stop(d, " (s, with the console in use)")
    ok(time.monotonic() - t0 < 10, "OPS-3: the console's clients do not hold the shutdown",
       time.monotonic() - t0)
    ok(f.let_go(5), "CONS-2: the follower is let go when vgpud stops (its body ends or its "
       "connection closes)", getattr(f, "error", None))
    ok(w.close_code() in (1000, 1001, None), "CONS-3: the attached client is let go")
    f.close()
    w.close()
    ok(alive(pid), "OPS-3: the VM keeps running")
    d, c = start(work, "s2", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    eq((get(c, iid) or {}).get("state"), "Running", "INST-21: the next vgpud adopts it")
    w = wait_attachable(c, iid)
    ok(w is not None, "CONS-3: and its console attaches again")
    if w:
        w.close()
    eq(delete_all(c), [], "the instance deletes")
    stop(d, " (s2)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-console-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        # The console needs no NIC; the old-shape VMM of check_console_socket is started by hand
        # with only the kernel's descriptor.
        no_nic = "network:\n  default_mode: none\n"
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, extra_top=no_nic)
        sock = os.path.join(work, "api.sock")
        run_group("console", lambda: check_console_socket(work, config, secret, sock, daemons))
        follow = vmm_config(os.path.join(work, "follow.yaml"), work, reconcile="5s",
                            extra_vmm="  console_max_bytes: 65536\n", extra_top=no_nic)
        run_group("follow", lambda: check_follow(work, follow, secret, sock, daemons))
        run_group("attach", lambda: check_attach(work, config, secret, sock, daemons))
        run_group("shutdown", lambda: check_shutdown(work, config, secret, sock, daemons))
        run_group("vgpuctl", lambda: check_vgpuctl(work, config, secret, sock, daemons))
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
