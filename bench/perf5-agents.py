#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# PERF-5's harness: one process that stands in as the VMM and the guest agent of every target
# (bench/perf5-sentinel.py starts it and writes its pid into every record's hypervisor.pid).
#
#   perf5-agents.py SPEC
#
# SPEC has one line per target, "ok PATH" or "silent PATH": the harness listens on each PATH (an
# instance's <runtime_dir>/instances/<id>/agent.sock, INST-1). On an "ok" socket every request
# line gets the agent's answer to guest-gpu-init-status for a guest whose driver came up, with
# the request's id echoed (docs/AGENT.md, as sim/fake-qemu-proto.c answers):
#   {"return":{"state":"ok"},"id":<n>}
# A "silent" socket accepts, reads and discards, and never answers (SENT-5's unresponsive
# target). A connection ends when vgpud closes it.
#
# One thread, one epoll selector over the 1,000 listeners, the open connections and stdin, which
# is the control channel: "dump" prints a JSON line with every connection seen so far (kind,
# accept time, reply time, both CLOCK_MONOTONIC seconds, shared with the benchmark); EOF on stdin
# ends the harness. "ready <n>" on stdout says that every socket listens.
import json
import os
import re
import selectors
import signal
import socket
import sys
import time

ID_RE = re.compile(rb'"id"\s*:\s*(\d+)')


class Conn:
    __slots__ = ("sock", "kind", "buf", "accepted", "replied", "requests")

    def __init__(self, sock, kind, accepted):
        self.sock, self.kind, self.accepted = sock, kind, accepted
        self.buf = b""
        self.replied = None
        self.requests = 0


def main():
    targets = []
    with open(sys.argv[1]) as f:
        for line in f:
            kind, _, path = line.rstrip("\n").partition(" ")
            if kind not in ("ok", "silent") or not path:
                raise SystemExit("perf5-agents: bad line %r" % line)
            targets.append((kind, path))

    sel = selectors.DefaultSelector()
    listeners = []
    for kind, path in targets:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)
        s.bind(path)
        s.listen(16)
        listeners.append(s)
        sel.register(s, selectors.EVENT_READ, ("listen", kind))
    os.set_blocking(0, False)
    sel.register(0, selectors.EVENT_READ, ("control", None))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready %d" % len(listeners), flush=True)

    seen = []  # (kind, accepted, replied or None, requests) of every connection that ended
    conns = {}
    control = b""
    while True:
        for key, _ in sel.select():
            what, kind = key.data
            if what == "listen":
                while True:
                    try:
                        c, _ = key.fileobj.accept()
                    except BlockingIOError:
                        break
                    c.setblocking(False)
                    conn = Conn(c, kind, time.monotonic())
                    conns[c.fileno()] = conn
                    sel.register(c, selectors.EVENT_READ, ("conn", conn))
            elif what == "conn":
                conn = kind
                try:
                    data = conn.sock.recv(4096)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    sel.unregister(conn.sock)
                    del conns[conn.sock.fileno()]
                    conn.sock.close()
                    seen.append((conn.kind, conn.accepted, conn.replied, conn.requests))
                    continue
                if conn.kind == "silent":
                    conn.requests += data.count(b"\n")
                    continue
                conn.buf += data
                while b"\n" in conn.buf:
                    line, _, conn.buf = conn.buf.partition(b"\n")
                    conn.requests += 1
                    m = ID_RE.search(line)
                    reply = b'{"return":{"state":"ok"}%s}\n' % (
                        b',"id":' + m.group(1) if m else b"")
                    try:
                        conn.sock.send(reply)
                    except OSError:
                        pass  # vgpud gave up on it already; its EOF follows
                    if conn.replied is None:
                        conn.replied = time.monotonic()
            else:
                try:
                    data = os.read(0, 4096)
                except BlockingIOError:
                    continue
                if not data:
                    return 0
                control += data
                while b"\n" in control:
                    cmd, _, control = control.partition(b"\n")
                    if cmd.strip() == b"dump":
                        now = [(c.kind, c.accepted, c.replied, c.requests)
                               for c in conns.values()]
                        print(json.dumps({"ended": seen, "open": now}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
