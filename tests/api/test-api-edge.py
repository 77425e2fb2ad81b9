#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-api-edge.py VGPUD OPENAPI_YAML FAKE_NVML
#
# The HTTP edge of the real vgpud under hostile clients (issue 10 items 4, 5, 7): bodies sent to
# routes that take none (API-15, REL-7), REL-8's slow senders and partial connections, and
# SIGTERM while mutations wait on a hung fsync (OPS-3). Run by tests/sim/run-sim-test.sh like
# test-api.py, with which it shares tests/lib/vgpud_test.py. Loopback only; every loop of
# requests is bounded in count and in time. Output is TAP; each check names the SPEC
# requirements it covers, and the REL-8 figures are printed as TAP comments.
import json
import os
import select
import signal
import socket
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    Client, eq, exit_status, finish, free_port, gpu_body, ok, poll, run_group, sim_ctl, sim_state,
    start, write_config, write_secret)

CONNECTIONS_MAX = 64  # per listener (API-1)


def note(text):
    print("# " + text)
    sys.stdout.flush()


def vm_kib(pid, field):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def connect(port=None, path=None, timeout=5.0):
    if path:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(path)
    else:
        s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    return s


def read_status(s):
    """The status of the first response on s, or 0 when the connection ends without one."""
    data = b""
    try:
        while b"\r\n" not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError:
        pass
    try:
        return int(data.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return 0


def healthz_seconds(port=None, path=None, timeout=5.0):
    """Seconds until /healthz answered 200, or None."""
    t = time.monotonic()
    try:
        s = connect(port, path, timeout)
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            status = read_status(s)
        finally:
            s.close()
    except OSError:
        return None
    return time.monotonic() - t if status == 200 else None


def held_tcp(pid, port):
    """TCP connections of port that the daemon has accepted (its socket fds)."""
    inodes = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    n = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    local_port = int(fields[1].split(":")[1], 16)
                    if local_port == port and fields[3] != "0A" and fields[9] in inodes:
                        n += 1
        except OSError:
            pass
    return n


# ---- API-15, REL-7: no body is buffered for a route that takes none -------------------------


def check_bodies(c, d, port, sock):
    pid = d.proc.pid
    before = vm_kib(pid, "VmRSS")
    body = b" " * (1024 * 1024 - 4096)
    statuses = []
    lock = threading.Lock()

    def sender(i):
        head = ("GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\n\r\n" % len(body)).encode()
        status = 0
        try:
            s = connect(port if i % 2 else None, None if i % 2 else sock, timeout=10)
            try:
                s.sendall(head)
                try:
                    s.sendall(body)
                except OSError:
                    pass  # answered and closed before the body: what we want
                status = read_status(s)
            finally:
                s.close()
        except OSError:
            pass
        with lock:
            statuses.append(status)

    # 128 connections, each about 1 MiB, over both listeners; /readyz meanwhile.
    threads = [threading.Thread(target=sender, args=(i,)) for i in range(128)]
    for t in threads:
        t.start()
    slowest = 0.0
    deadline = time.monotonic() + 20
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        t0 = time.monotonic()
        r = Client(sock, port, None).get("/readyz", token=None)
        slowest = max(slowest, time.monotonic() - t0 if r.status == 200 else 99)
        time.sleep(0.05)
    for t in threads:
        t.join(20)
    peak = vm_kib(pid, "VmHWM")
    after = vm_kib(pid, "VmRSS")
    note("128 bodies of 1 MiB to /healthz: RSS %d kB before, %d kB after, peak %d kB; "
         "slowest /readyz %.3f s" % (before, after, peak, slowest))
    eq(sorted(set(statuses)), [413],
       "API-15: every body sent to /healthz is refused with 413 before it is read")
    ok(peak - before < 32 * 1024,
       "API-15, REL-7: 128 unread bodies of 1 MiB grow the daemon's RSS by under 32 MiB",
       "before %d kB, peak %d kB" % (before, peak))
    ok(slowest < 1.0, "API-17: /readyz answers within 1 s during the flood",
       "slowest %.3f s" % slowest)
    r = c.request("POST", "/gpu/vfs/0000:e3:00.4/quarantine", body={"reason": "x" * 100},
                  via="tcp", token="Bearer nope")
    eq(r.status, 401, "API-12: an authenticated route's body is refused before it is read")


# ---- REL-8: slow senders and partial connections ---------------------------------------------


def check_rel8(c, d, port, sock):
    pid = d.proc.pid
    senders = []
    for _ in range(CONNECTIONS_MAX):
        try:
            s = connect(port, timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            senders.append(s)
        except OSError:
            pass
    eq(len(senders), CONNECTIONS_MAX, "REL-8: 64 slow senders connect")

    # 1,000 further attempts, each a partial request and a close; the loop stays responsive.
    attempts = connected = 0
    unix_slowest = 0.0
    started = time.monotonic()
    while attempts < 1000 and time.monotonic() - started < 60:
        attempts += 1
        try:
            s = socket.socket()
            s.settimeout(2)
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /healthz HTTP/1.1\r\nHo")
            connected += 1
            s.close()
        except OSError:
            s.close()
        if attempts % 100 == 0:
            # The slow senders send one more byte of a header now and then (well within 10 s).
            for x in senders:
                try:
                    x.sendall(b"X")
                except OSError:
                    pass
            t = healthz_seconds(path=sock, timeout=5)
            unix_slowest = max(unix_slowest, t if t is not None else 99)
    held = held_tcp(pid, port)
    for _ in range(5):
        t = healthz_seconds(path=sock, timeout=5)
        unix_slowest = max(unix_slowest, t if t is not None else 99)
    held = max(held, held_tcp(pid, port))
    note("REL-8: %d attempts (%d connected) in %.1f s; vgpud holds %d TCP connections; slowest "
         "/healthz over the Unix socket %.3f s" % (attempts, connected, time.monotonic() - started,
                                                   held, unix_slowest))
    ok(held <= CONNECTIONS_MAX, "REL-8: vgpud holds at most 64 TCP connections", held)
    ok(unix_slowest < 1.0, "REL-8: /healthz over the Unix socket answers within 1 s",
       "%.3f s" % unix_slowest)

    # The senders stop: each is closed by vgpud when idle, and TCP answers again in time.
    stopped = time.monotonic()
    closed_after = []

    def watch():
        pending = list(senders)
        while pending and time.monotonic() - stopped < 20:
            readable, _, _ = select.select(pending, [], [], 0.5)
            for x in readable:
                try:
                    data = x.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    closed_after.append(time.monotonic() - stopped)
                    pending.remove(x)

    watcher = threading.Thread(target=watch)
    watcher.start()
    recovered = None
    while time.monotonic() - stopped < 25:
        if healthz_seconds(port=port, timeout=3) is not None:
            recovered = time.monotonic() - stopped
            break
        time.sleep(0.2)
    watcher.join(25)
    for x in senders:
        x.close()
    unix_after = healthz_seconds(path=sock, timeout=5)
    note("REL-8: idle senders closed within %.1f s of their last byte (%d of %d); /healthz over "
         "TCP answered %s s after the senders stopped; over the Unix socket %s s" %
         (max(closed_after or [99]), len(closed_after), len(senders),
          "%.1f" % recovered if recovered is not None else "never",
          "%.3f" % unix_after if unix_after is not None else "never"))
    ok(len(closed_after) == len(senders) and max(closed_after or [99]) < 11,
       "REL-8: vgpud closes each idle sender within 11 s", closed_after)
    ok(recovered is not None and recovered < 12,
       "REL-8: /healthz over TCP answers within 12 s of the senders stopping", recovered)
    ok(unix_after is not None and unix_after < 1.0,
       "REL-8: and over the Unix socket within 1 s", unix_after)

    # The same on the Unix socket: 400 partial requests closed while queued behind 64 held ones.
    held_unix = []
    for _ in range(CONNECTIONS_MAX):
        try:
            s = connect(path=sock, timeout=5)
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            held_unix.append(s)
        except OSError:
            pass
    sent = 0
    for _ in range(400):
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect(sock)
            s.sendall(b"GET /readyz HTTP/1.1\r\nHo")
            sent += 1
        except OSError:
            pass
        s.close()
    for x in held_unix:
        x.close()
    t0 = time.monotonic()
    ready = None
    while time.monotonic() - t0 < 15:
        r = healthz_seconds(path=sock, timeout=3)
        if r is not None:
            ready = time.monotonic() - t0
            break
    note("REL-8: %d held and %d partial-and-closed Unix connections; /healthz answered %s s "
         "after the held ones closed" % (len(held_unix), sent,
                                         "%.3f" % ready if ready is not None else "never"))
    ok(ready is not None and ready < 1.0,
       "REL-8: partial requests closed while queued on the Unix socket free it within 1 s",
       ready)


# ---- OPS-3: SIGTERM answers the mutations waiting on a hung fsync ---------------------------


def check_shutdown(c, d, sock):
    answers = []
    lock = threading.Lock()

    def quarantine(vf):
        # Our own request: the shutdown grace (10 s) is longer than Client's timeout.
        body = json.dumps({"reason": "edge test"}).encode()
        result = (0, None)
        try:
            s = connect(path=sock, timeout=30)
            try:
                s.sendall(("POST /gpu/vfs/%s/quarantine HTTP/1.1\r\nHost: x\r\n"
                           "Authorization: Bearer %s\r\nContent-Type: application/json\r\n"
                           "Content-Length: %d\r\nConnection: close\r\n\r\n" %
                           (vf, c.token, len(body))).encode() + body)
                data = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            finally:
                s.close()
            head, _, payload = data.partition(b"\r\n\r\n")
            result = (int(head.split(b" ", 2)[1]), json.loads(payload).get("code"))
        except (OSError, ValueError, IndexError) as e:
            result = (0, type(e).__name__)
        with lock:
            answers.append(result)

    before = gpu_body(c)["quarantined_slots"]
    sim_ctl("fault fsync data/* hang")
    try:
        vfs = ["0000:e3:00.%d" % (4 + i) for i in range(4)] + ["0000:e3:01.0"]
        threads = [threading.Thread(target=quarantine, args=(vf,)) for vf in vfs]
        for t in threads:
            t.start()
        held = poll(lambda: sim_state()["operations_delayed"] >= 1, 10, 0.1)
        ok(bool(held), "OPS-3: a quarantine's write hangs in fsync")
        # HEALTH-20: placement sees a quarantine the moment it is accepted, before it is durable.
        ok(poll(lambda: gpu_body(c)["quarantined_slots"] >= before + len(vfs), 10, 0.05),
           "OPS-3: the daemon holds all five quarantines, waiting on the hung write")
        d.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(25)
    finally:
        sim_ctl("clear-faults")
    rc = d.stop(timeout=30)
    eq(sorted(answers), [(503, "not_ready")] * 5,
       "OPS-3: SIGTERM answers each of five mutations hung on fsync 503 not_ready")
    eq(rc, 0, "OPS-3: and exits 0")
    log = d.log_text()
    ok("waking it failed" not in log, "OPS-3: no listener wake-up fails at shutdown",
       [line for line in log.splitlines() if "waking it failed" in line][:5])


def main():
    work = tempfile.mkdtemp(prefix="vgpud-edge.", dir=os.environ.get("TMPDIR", "/tmp"))
    daemons = []
    try:
        secret = write_secret(work)
        port = free_port()
        sock = os.path.join(work, "api.sock")
        config = os.path.join(work, "edge.yaml")
        write_config(config, work, listen="127.0.0.1:%d" % port)
        d, c = start(work, "edge", config, secret, sock)
        daemons.append(d)
        if c:
            c.port = port
            run_group("bodies", lambda: check_bodies(c, d, port, sock))
            run_group("rel8", lambda: check_rel8(c, d, port, sock))
            run_group("shutdown", lambda: check_shutdown(c, d, sock))
            daemons.remove(d)
    finally:
        try:
            sim_ctl("clear-faults")
        except OSError:
            pass
        finish(daemons, work)


if __name__ == "__main__":
    main()
    sys.exit(exit_status())
