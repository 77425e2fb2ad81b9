#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-e2e-agent.py VGPUD OPENAPI_YAML FAKE_NVML BUILD_GUEST_SH GUEST_DIR QEMU AGENT VERSION
#                   static|dynamic
#
# The guest agent in a real Linux guest (SPEC SIM-19, §9 AGENT-1..19): vgpud, on the simulated
# host of tests/sim/run-sim-test.sh (SIM-21), creates GPU-less instances that boot
# build-guest.sh's guest under TCG with the real QEMU (VMM-1). Each guest's initramfs carries an
# overlay (e2e_guest.initrd_with): the static vgpu-agent AGENT, a stand-in nvidia-smi whose
# exit status per attempt the test writes into the overlay, a stand-in kmsg (a file written
# before the agent starts, or a FIFO held open by a guest-side writer) and helpers that print
# what the host cannot see to the console (the agent's CPU time from /proc/<pid>/stat, the
# stand-in's invocations). The test talks to the agent only over the instance's
# <runtime_dir>/instances/<id>/agent.sock (INST-1), the host end of the virtio-serial port.
#
# Three guests, one after the other:
#   idle    --gpu-watch on, an idle FIFO kmsg, a probe that keeps failing: the protocol
#           (AGENT-14..18), state unknown (AGENT-4, AGENT-11), AGENT-19's 100 connect/request/
#           disconnect cycles and the agent's CPU time over a 30 s idle period;
#   failed  --gpu-watch auto on a --pci-root that shows an NVIDIA device (AGENT-3), no
#           --serial (the port found through <pci-root>/class/virtio-ports, AGENT-1), a
#           pre-written kmsg file whose two matching records are mixed with records that must
#           not match (AGENT-6): failed with the latest message (AGENT-5), the probe gives up
#           (AGENT-11);
#   ok      --gpu-watch on, a FIFO kmsg with one failure record, a probe that fails once and
#           then succeeds: failed, then ok; a failure record written after the successful
#           probe was reaped leaves it ok with an empty message (AGENT-4: ok is terminal).
# The boot-to-first-answer time (POST /instances to the first guest-ping reply) and the
# measured idle CPU go to TAP comments. Whatever happens, every QEMU and the daemon are killed
# and the work tree removed.
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_guest import (  # noqa: E402 (after the path)
    guest_or_skip, initrd_with, note, tail, vgpud_config)
from vgpud_test import (  # noqa: E402 (e2e_guest put tests/lib on the path)
    error_of, eq, exit_status, finish, ok, poll, run_group, skip, start, stop,
    write_secret)

BUILD_GUEST, GUEST_DIR, QEMU, AGENT, VERSION, LINKAGE = sys.argv[4:10]

# Bounds, not waits: a guest reaches init in 2.5 to 7 s here under TCG, more when the rest of
# the suite loads the machine.
BOOT_TIMEOUT = 120  # create to the first answer
VMM_BOOT_TIMEOUT = 30  # vmm.boot_timeout (VMM-5)
STOP_TIMEOUT = 30  # vmm.stop_timeout (VMM-9)
REPLY_TIMEOUT = 10  # one request's reply, AGENT-19's bound for a cycle
STATE_TIMEOUT = 60  # a state change the guest's helpers drive
IDLE_SECONDS = 30  # AGENT-19's idle period, in guest time
IDLE_CPU_LIMIT = 1.0  # seconds of CPU over it (AGENT-19)
CYCLES = 100  # AGENT-19
USER_HZ = 100  # /proc/<pid>/stat's clock ticks: USER_HZ is 100 on x86 whatever CONFIG_HZ is
LINE_LIMIT = 65536  # AGENT-17
CMDLINE = "console=ttyS0 quiet"
COMMANDS = ["guest-gpu-init-status", "guest-info", "guest-ping"]  # AGENT-15, sorted

# The kmsg records (AGENT-6). A kernel failure in two severities and forms (the second with a
# caller= field), and what must never match: a user-space facility, a continuation line, a
# message that only mentions NVRM, a priority of more than 10 digits.
FAIL_1 = "NVRM: GPU 0000:00:06.0: RmInitAdapter failed! (0x22:0x65:884)"
FAIL_2 = "NVRM: GPU 0000:00:07.0: RmInitAdapter failed! (0x25:0x40:1234)"
LATE = "NVRM: GPU 0000:00:08.0: RmInitAdapter failed! (0x26:0x11:42)"
NOT_MATCHING = [
    "14,300,3000000,-;NVRM: GPU 0000:00:09.0: RmInitAdapter failed! (user facility 1)",
    " NVRM: GPU 0000:00:0a.0: RmInitAdapter failed! (a continuation line)",
    "6,301,3100000,-;nvidia-modeset: NVRM: GPU 0000:00:0b.0: RmInitAdapter failed! (mention)",
    "00000000003,302,3200000,-;NVRM: GPU 0000:00:0c.0: RmInitAdapter failed! (11 digits)",
    "8,303,3300000,-;NVRM: GPU 0000:00:0d.0: RmInitAdapter failed! (facility 1, prio 0)",
    "3,304,3400000,-;NVRM: GPU 0000:00:0e.0: RmInitAdapter succeeded (other text)",
]
KMSG_FAILED = "\n".join([
    "6,100,1000000,-;Linux version 6.1.0 (a kernel record that is no failure)",
    "3,200,2000000,-;" + FAIL_1,
    " SUBSYSTEM=pci",
    " DEVICE=+pci:0000:00:06.0",
    "4,201,2100000,-,caller=T42;" + FAIL_2,
] + NOT_MATCHING) + "\n"

# ---- the guest's side -----------------------------------------------------------------------

# Sourced by the guest's init before it starts the agent (build-guest.sh's hook contract).
HOOK = r"""# tests/e2e/test-e2e-agent.py: the agent's world of stand-ins.
mkdir -p /run/e2e
if [ -r /etc/e2e/kmsg-fifo ]; then
        mkfifo /run/e2e/kmsg
        /bin/e2e-kmsg-writer </dev/null &
        # The writer must hold the FIFO before the agent opens it: a reader of a FIFO without
        # a writer reads EOF, and EOF ends the watch (AGENT-8).
        i=0
        while [ ! -e /run/e2e/kmsg.held ] && [ $i -lt 200 ]; do
                sleep 0.1
                i=$((i + 1))
        done
        [ -e /run/e2e/kmsg.held ] || say "e2e: the kmsg writer did not start"
fi
if [ -r /etc/e2e/cpu-report ]; then
        /bin/e2e-cpu-report </dev/null &
fi
"""

# Holds the FIFO open for writing (read-write, so the open does not wait for a reader) and
# writes /etc/e2e/kmsg-early at once. With /etc/e2e/kmsg-late it waits for the stand-in
# nvidia-smi's successful attempt to be reaped (its /proc entry goes only then), writes the late
# records, closes the FIFO and waits for the agent to close its end (EOF ends the watch,
# AGENT-8), so the host knows the agent has read them. Without it the writer idles.
KMSG_WRITER = r"""#!/bin/sh
exec 3<>/run/e2e/kmsg
: >/run/e2e/kmsg.held
[ -r /etc/e2e/kmsg-early ] && cat /etc/e2e/kmsg-early >&3
if [ ! -r /etc/e2e/kmsg-late ]; then
        exec sleep 2147483647
fi
while [ ! -s /run/e2e/smi-ok.pid ]; do
        sleep 0.1
done
pid=$(cat /run/e2e/smi-ok.pid)
while [ -d "/proc/$pid" ]; do
        sleep 0.1
done
echo "vgpud-e2e: kmsg: nvidia-smi (pid $pid) reaped, writing the late record"
cat /etc/e2e/kmsg-late >&3
exec 3>&-
i=0
while [ $i -lt 600 ]; do
        agent=$(pidof vgpu-agent)
        held=""
        for fd in /proc/$agent/fd/*; do
                [ "$(readlink "$fd")" = /run/e2e/kmsg ] && held=yes
        done
        if [ -n "$agent" ] && [ -z "$held" ]; then
                echo "vgpud-e2e: kmsg: the agent closed it after the late record"
                exit 0
        fi
        sleep 0.1
        i=$((i + 1))
done
echo "vgpud-e2e: kmsg: the agent still holds it 60 s after the late record"
"""

# Attempt N exits with the N-th word of /etc/e2e/smi-plan (the last word repeats). Its console
# line shows how the agent ran it (AGENT-9, AGENT-10); its stdout is the agent's to capture.
NVIDIA_SMI = r"""#!/bin/sh
n=$(($(cat /run/e2e/smi-count 2>/dev/null || echo 0) + 1))
echo "$n" >/run/e2e/smi-count
status=0
i=0
for s in $(cat /etc/e2e/smi-plan); do
        i=$((i + 1))
        status=$s
        [ $i -ge $n ] && break
done
stdin=$(readlink /proc/$$/fd/0)
stdout=$(readlink /proc/$$/fd/1 | cut -d: -f1)
echo "vgpud-e2e: nvidia-smi attempt $n args=[$*] stdin=$stdin stdout=$stdout status=$status" \
        >/dev/ttyS0
if [ "$status" = 0 ]; then
        echo "GPU 0: NVIDIA L40S-8Q (UUID: GPU-00000000-0000-0000-0000-000000000000)"
        echo $$ >/run/e2e/smi-ok.tmp && mv /run/e2e/smi-ok.tmp /run/e2e/smi-ok.pid
else
        echo "e2e-captured-output-of-attempt-$n"
fi
exit "$status"
"""

# The agent's own CPU time every 2 s: utime and stime (fields 14 and 15 of /proc/<pid>/stat,
# USER_HZ ticks; the comm "vgpu-agent" has no space) with the guest's uptime, the agent's
# voluntary context switches (its wake-ups) and how many of its descriptors are sockets.
CPU_REPORT = r"""#!/bin/sh
while :; do
        pid=$(pidof vgpu-agent)
        if [ -n "$pid" ] && read -r st </proc/$pid/stat; then
                set -- $st
                up=$(cut -d' ' -f1 /proc/uptime)
                sw=$(sed -n 's/^voluntary_ctxt_switches:[^0-9]*//p' /proc/$pid/status)
                so=$(ls -l /proc/$pid/fd | grep -c 'socket:')
                echo "vgpud-e2e: cpu pid=$pid utime=${14} stime=${15} uptime=$up wakeups=$sw" \
                        "sockets=$so"
        fi
        sleep 2
done
"""

# Drops init's --serial, so the agent finds its port as in a guest without udev (AGENT-1).
NO_SERIAL = r"""#!/bin/sh
[ "$1" = --serial ] && shift 2
if [ -e /dev/virtio-ports/org.vgpud.agent.0 ]; then d=present; else d=absent; fi
echo "vgpud-e2e: agent without --serial ($d default path): $*"
exec /bin/vgpu-agent.bin "$@"
"""

CPU_LINE = re.compile(r"vgpud-e2e: cpu pid=(\d+) utime=(\d+) stime=(\d+) uptime=([0-9.]+) "
                      r"wakeups=(\d*) sockets=(\d+)")


def elf_interpreter(path):
    """The PT_INTERP of a 64-bit little-endian ELF file, or None for a static one."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("%s is not a 64-bit little-endian ELF file" % path)
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    phnum = int.from_bytes(data[56:58], "little")
    for i in range(phnum):
        ph = data[phoff + i * phentsize:phoff + (i + 1) * phentsize]
        if int.from_bytes(ph[0:4], "little") == 3:  # PT_INTERP
            off = int.from_bytes(ph[8:16], "little")
            size = int.from_bytes(ph[32:40], "little")
            return data[off:off + size].rstrip(b"\0").decode()
    return None


def agent_libraries():
    """{guest path: host file} of what a dynamically linked agent (a sanitizer build) needs in
    the guest: ldd's libraries and the ELF interpreter, at the paths the loader looks for."""
    out = subprocess.run(["ldd", AGENT], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, timeout=30).stdout.decode(errors="replace")
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$", line)
        if m:
            libs[m.group(1)] = (("file", m.group(1)), 0o755)
    return libs


def agent_files(guest_path):
    """The overlay entries for the agent at guest_path (and its libraries, if it has any)."""
    files = {guest_path: (("file", AGENT), 0o755)}
    if LINKAGE == "dynamic":
        files.update(agent_libraries())
    return files


def overlay(guest, work, name, args, files):
    """An initramfs for one guest: the base, the agent's world, the words of args."""
    entries = {
        "/etc/guest-init.d/50-e2e-agent.sh": HOOK,
        "/bin/e2e-kmsg-writer": (KMSG_WRITER, 0o755),
        "/bin/e2e-cpu-report": (CPU_REPORT, 0o755),
        "/bin/e2e-nvidia-smi": (NVIDIA_SMI, 0o755),
        "/etc/vgpu-agent.args": " ".join(args) + "\n",
    }
    entries.update(agent_files("/bin/vgpu-agent"))
    entries.update(files)
    return initrd_with(guest.initrd, entries, os.path.join(work, "images", name + ".cpio.gz"))


# ---- the host's side of the port ------------------------------------------------------------


class AgentError(Exception):
    pass


class AgentConn:
    """One client of agent.sock. QEMU's chardev serves one client at a time; a second connect
    waits in the listen backlog, so the test never holds two."""

    def __init__(self, path, timeout=REPLY_TIMEOUT):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data)

    def line(self, timeout=REPLY_TIMEOUT):
        """The next reply line (without its newline), or AgentError after timeout."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AgentError("no reply line within %.1f s (have %r)" % (timeout,
                                                                           self.buf[:200]))
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            if not chunk:
                raise AgentError("agent.sock closed (have %r)" % self.buf[:200])
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        return line

    def reply(self, timeout=REPLY_TIMEOUT):
        line = self.line(timeout)
        try:
            return json.loads(line)
        except ValueError:
            raise AgentError("reply is not JSON: %r" % line[:300])

    def call(self, request, timeout=REPLY_TIMEOUT):
        """Sends one request (an object, or bytes sent as they are plus a newline) and returns
        the parsed reply."""
        data = request if isinstance(request, bytes) else json.dumps(
            request, separators=(",", ":")).encode()
        self.send(data + b"\n")
        return self.reply(timeout)


def first_answer(path, t0, timeout=BOOT_TIMEOUT):
    """Connects and pings until the agent answers: pings wait in QEMU's socket until the guest
    opens the port, and one is sent again every 5 s in case the agent dropped one at its start.
    Then a last ping with its own id drains the answers to the earlier ones. Returns (seconds
    from t0 to the first reply, AgentConn)."""
    deadline = t0 + timeout
    c = None
    while c is None:
        try:
            c = AgentConn(path)
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.05)
    try:
        n = 0
        while True:
            n += 1
            c.send(json.dumps({"execute": "guest-ping", "id": "boot-%d" % n}).encode() + b"\n")
            try:
                r = c.reply(min(5.0, max(0.1, deadline - time.monotonic())))
                break
            except AgentError:
                if time.monotonic() >= deadline:
                    raise
        seconds = time.monotonic() - t0
        if r.get("return") != {} or not str(r.get("id", "")).startswith("boot-"):
            raise AgentError("the first reply is not a ping's: %r" % (r,))
        c.send(b'{"execute":"guest-ping","id":"sync"}\n')
        while r.get("id") != "sync":
            r = c.reply()
        return seconds, c
    except Exception:
        c.close()
        raise


# ---- vgpud and its instances ----------------------------------------------------------------


class Setup:
    def __init__(self, work, guest, c, d):
        self.work, self.guest, self.c, self.d = work, guest, c, d
        self.first_answers = {}

    def console(self, iid):
        r = self.c.get("/instances/%s/console?tail_bytes=1048576" % iid)
        return r.body.decode(errors="replace").replace("\r\n", "\n") if r.status == 200 else ""

    def wait_console(self, iid, pattern, timeout=STATE_TIMEOUT):
        rx = re.compile(pattern, re.M)
        return poll(lambda: rx.search(self.console(iid)), timeout, 0.2)

    def diagnostics(self, iid):
        return "console (tail):\n%s\nvgpud log (tail):\n%s" % (
            tail(self.console(iid), 30), tail(self.d.log_text(), 10))

    def boot(self, name, initrd):
        """Creates and boots an instance; returns (id, AgentConn after the first answer), or
        (id or None, None) after reporting why not."""
        body = {"name": name, "vcpus": 1, "memory_mb": 256,
                "boot": {"kernel": os.path.join(self.work, "images", "vmlinuz"),
                         "initrd": initrd, "cmdline": CMDLINE}}
        t0 = time.monotonic()
        r = self.c.request("POST", "/instances", body)
        inst = r.json() if r.status == 201 else {}
        if not ok(r.status == 201 and inst.get("state") == "Running",
                  "INST-12: %s: create answers 201 Running" % name,
                  "%s\n%s" % (error_of(r), tail(self.d.log_text(), 20))):
            return None, None
        iid = inst["id"]
        sock = os.path.join(self.work, "run", "instances", iid, "agent.sock")
        ok(os.path.exists(sock), "INST-1: %s: agent.sock is <runtime_dir>/instances/<id>/"
           "agent.sock" % name, sock)
        try:
            seconds, conn = first_answer(sock, t0)
        except (OSError, AgentError) as e:
            ok(False, "SIM-19: %s: the agent answers guest-ping on agent.sock" % name,
               "%s\n%s" % (e, self.diagnostics(iid)))
            return iid, None
        ok(True, "SIM-19: %s: the agent answers guest-ping on agent.sock" % name)
        self.first_answers[name] = seconds
        note("%s: boot to first answer (POST /instances to the first guest-ping reply): %.2f s"
             % (name, seconds))
        return iid, conn

    def delete(self, iid):
        r = self.c.request("DELETE", "/instances/" + iid)
        eq(r.status, 204, "INST-18: delete answers 204")


def status(conn, rid):
    r = conn.call({"execute": "guest-gpu-init-status", "id": rid})
    return r


def poll_status(conn, want, timeout=STATE_TIMEOUT):
    """Asks for the status every 0.25 s until it equals want (bounded); returns the last."""
    last = [None]
    n = [0]

    def check():
        n[0] += 1
        last[0] = status(conn, "poll-%d" % n[0])
        return last[0] == {"return": want, "id": "poll-%d" % n[0]}

    poll(check, timeout, 0.25)
    return last[0].get("return") if isinstance(last[0], dict) else last[0]


# ---- guest 1: the protocol, unknown, AGENT-19 -----------------------------------------------


def check_protocol(conn):
    eq(conn.call({"execute": "guest-ping", "id": 1}), {"return": {}, "id": 1},
       "AGENT-14, AGENT-15: guest-ping returns {} and echoes the id")
    eq(conn.call({"execute": "guest-ping"}), {"return": {}},
       "AGENT-14: a request without an id gets a reply without one")
    eq(conn.call({"execute": "guest-ping", "arguments": {}, "id": {"a": [1, "x"]}}),
       {"return": {}, "id": {"a": [1, "x"]}},
       "AGENT-14: an object id and empty arguments are accepted, the id echoed as it was")
    r = conn.call(b'{"execute":"guest-ping","id":"compact"}')
    raw = json.dumps(r, separators=(",", ":"))
    eq(raw, '{"return":{},"id":"compact"}', "AGENT-14: the reply line is compact JSON")

    info = conn.call({"execute": "guest-info", "id": "info"})
    ret = info.get("return", {})
    eq(ret.get("version"), VERSION, "AGENT-15: guest-info's version is the agent's (%s)"
       % VERSION)
    cmds = ret.get("supported_commands")
    ok(isinstance(cmds, list) and all(isinstance(x, dict) and set(x) == {"name", "enabled"}
                                      and x["enabled"] is True for x in cmds),
       "AGENT-15: supported_commands are {name, enabled: true} objects", info)
    eq(sorted(x.get("name") for x in cmds or [] if isinstance(x, dict)), COMMANDS,
       "AGENT-15: supported_commands name guest-ping, guest-info and guest-gpu-init-status")
    eq(info.get("id"), "info", "AGENT-14: guest-info echoes the id")

    # AGENT-16, AGENT-18: the exact texts; the connection stays open after each error.
    eq(conn.call({"execute": "guest-reboot"}),
       {"error": {"class": "CommandNotFound", "desc": 'command "guest-reboot" not found'}},
       "AGENT-16, AGENT-18: an unknown command gets CommandNotFound, "
       "'command \"guest-reboot\" not found'")
    eq(conn.call({"execute": "guest-exec", "arguments": {"path": "/bin/sh"}, "id": 3}),
       {"error": {"class": "CommandNotFound", "desc": 'command "guest-exec" not found'},
        "id": 3}, "AGENT-16: CommandNotFound echoes the id")
    for raw, what in ((b'{"execute":', "invalid JSON"),
                      (b'[{"execute":"guest-ping"}]', "a non-object"),
                      (b'"guest-ping"', "a JSON string"),
                      (b'{"arguments":{}}', "a missing execute"),
                      (b'{"execute":42}', "a non-string execute"),
                      (b'{"execute":"guest-ping","arguments":[1]}', "non-object arguments"),
                      (b'\xff\xfe{"execute":"guest-ping"}', "bytes that are not UTF-8")):
        r = conn.call(raw)
        ok(isinstance(r, dict) and set(r) == {"error"} and
           r["error"].get("class") == "GenericError" and
           isinstance(r["error"].get("desc"), str) and r["error"]["desc"],
           "AGENT-16: %s gets GenericError with a text" % what, r)
    r = conn.call(b'{"execute":null,"id":5}')
    eq((r.get("error", {}).get("class"), r.get("id")), ("GenericError", 5),
       "AGENT-14, AGENT-16: a GenericError for an object with an id echoes it")
    eq(conn.call({"execute": "guest-ping", "id": 6}), {"return": {}, "id": 6},
       "AGENT-16: the connection stays open after the errors")

    conn.send(b'\n\n{"execute":"guest-ping","id":7}\n')
    eq(conn.reply(), {"return": {}, "id": 7}, "AGENT-14: empty lines are ignored (no reply)")
    # Two requests in one write are answered in order.
    conn.send(b'{"execute":"guest-ping","id":"a"}\n{"execute":"guest-info","id":"b"}\n')
    eq([conn.reply().get("id"), conn.reply().get("id")], ["a", "b"],
       "AGENT-14: pipelined requests get one reply each, in order")

    # AGENT-17: a long line within the limit is a request like any other; one over it gets
    # the exact text, its bytes up to the newline are discarded (the tail below would be a
    # request of its own otherwise), and the next line is answered.
    pad = "x" * (LINE_LIMIT - 100)
    eq(conn.call({"execute": "guest-ping", "id": pad}), {"return": {}, "id": pad},
       "AGENT-17: a %d-byte request line is answered" % (LINE_LIMIT - 100 + 38))
    long_line = b"A" * (LINE_LIMIT + 4096) + b'{"execute":"guest-ping","id":"tail"}\n'
    conn.send(long_line + b'{"execute":"guest-ping","id":9}\n')
    eq(conn.reply(), {"error": {"class": "GenericError",
                                "desc": "request line exceeds 65536 bytes"}},
       "AGENT-17: a line of %d bytes gets GenericError 'request line exceeds 65536 bytes'"
       % (len(long_line) - 1))
    eq(conn.reply(), {"return": {}, "id": 9},
       "AGENT-17: the rest of the long line is discarded and the next request answered")
    # The limit again, the long line sent in pieces as a slow writer would.
    for i in range(0, 3 * LINE_LIMIT, 16384):
        conn.send(b"B" * 16384)
    conn.send(b'\n{"execute":"guest-ping","id":10}\n')
    r1, r2 = conn.reply(), conn.reply()
    eq((r1.get("error", {}).get("desc"), r2), ("request line exceeds 65536 bytes",
                                               {"return": {}, "id": 10}),
       "AGENT-17: a %d-byte line sent in pieces gets one error; the next request is answered"
       % (3 * LINE_LIMIT))


# The guest's virtio_console may hand over a new host's request before the control message the
# previous host left queued; the reply then meets a port that is not writable and a POLLHUP. The
# agent keeps that reply (AGENT-19 drops only a partial request line; AGENT-17 gives it 5 s), so
# every cycle must be answered: once in about 300 cycles this is the case that checks it.

def check_cycles(setup, sock):
    """AGENT-19: 100 connect/request/disconnect cycles, each answered within 10 s. A cycle that
    connects at once finds the port still in the agent's poll set; one that connects a little
    later, after the guest saw the hang-up, sends its request while the agent has taken the
    port out of the poll set for 250 ms: the gaps between the cycles (0 to 90 ms, the stimulus,
    not a wait for anything) make both kinds."""
    worst, answered, failed, paused = 0.0, 0, [], 0
    t0 = time.monotonic()
    for i in range(CYCLES):
        time.sleep(0.03 * (i % 4))
        c0 = time.monotonic()
        try:
            conn = AgentConn(sock)
            try:
                r = conn.call({"execute": "guest-gpu-init-status", "id": i},
                              REPLY_TIMEOUT - (time.monotonic() - c0))
            finally:
                conn.close()
            if r.get("id") == i and r.get("return", {}).get("state") == "unknown":
                answered += 1
            else:
                failed.append((i, r))
        except (OSError, AgentError) as e:
            failed.append((i, str(e)))
        seconds = time.monotonic() - c0
        worst = max(worst, seconds)
        paused += seconds >= 0.1
        if len(failed) >= 3:
            break
    total = time.monotonic() - t0
    eq(answered, CYCLES, "AGENT-19: %d connect/request/disconnect cycles on agent.sock each "
       "get their reply within %d s" % (CYCLES, REPLY_TIMEOUT))
    if failed:
        note("failed cycles: %r" % (failed[:3],))
    ok(worst < REPLY_TIMEOUT, "AGENT-19: the slowest cycle took %.2f s (< %d s)"
       % (worst, REPLY_TIMEOUT))
    note("%d cycles in %.1f s (%.0f ms each on average, slowest %.0f ms; %d took 100 ms or more, "
         "waiting for the port's return to the poll set)"
         % (CYCLES, total, 1000 * total / CYCLES, 1000 * worst, paused))
    ok(paused > 0, "AGENT-19: some cycles met the agent's 250 ms pause after a hang-up and were "
       "still answered (%d)" % paused)


def check_write_timeout(setup, iid, sock):
    """AGENT-17, AGENT-19: a host that stops reading. Requests whose replies echo a 60 KB id
    fill everything between the agent and this socket (its buffer, QEMU's, the port's
    virtqueue); a sender thread goes on while nothing is read, until the agent logs that a
    reply was not written within 5 s. Then every line is read: some replies are missing, and
    the agent answers the next request."""
    conn = AgentConn(sock)
    pad = "y" * 60000
    count = 150  # 9 MB of replies, about twice what the path between them holds
    sent = [0]

    def sender():
        try:
            for i in range(count):
                conn.sock.sendall(json.dumps({"execute": "guest-ping", "id": "stall-%d-%s" % (
                    i, pad)}, separators=(",", ":")).encode() + b"\n")
                sent[0] += 1
        except OSError:
            pass

    conn.sock.settimeout(None)
    t = threading.Thread(target=sender, daemon=True)
    t0 = time.monotonic()
    t.start()
    try:
        m = setup.wait_console(iid, r"reply not written to the virtio-serial port within (\S+); "
                               r"dropped, connection buffers reset")
        ok(m and m.group(1) == "5s", "AGENT-17: a reply the port does not take within 5 s is "
           "dropped and the buffers reset (logged)", setup.diagnostics(iid))
        note("host stopped reading: the agent's write timeout logged %.1f s later"
             % (time.monotonic() - t0))
        # Read everything, then one more request: its reply must come.
        buf = bytearray()
        replies = set()
        deadline = time.monotonic() + STATE_TIMEOUT
        asked = False
        conn.sock.settimeout(0.5)
        while time.monotonic() < deadline:
            if not t.is_alive() and not asked:
                conn.sock.sendall(b'{"execute":"guest-ping","id":"after-stall"}\n')
                asked = True
            try:
                chunk = conn.sock.recv(1 << 20)
            except socket.timeout:
                continue
            if not chunk:
                break
            buf += chunk
            *lines, rest = bytes(buf).split(b"\n")
            buf = bytearray(rest)
            for line in lines:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue  # the tail of a reply cut by the reset
                rid = r.get("id") if isinstance(r, dict) else None
                if isinstance(rid, str):
                    replies.add(rid.split("-%s" % pad[:10])[0] if rid.startswith("stall-")
                                else rid)
            if "after-stall" in replies:
                break
        stalled = len([r for r in replies if r.startswith("stall-")])
        note("%d requests sent, %d of their replies arrived whole" % (sent[0], stalled))
        ok(stalled < sent[0], "AGENT-17: replies were dropped (%d of %d arrived)"
           % (stalled, sent[0]))
        ok("after-stall" in replies, "AGENT-17: the agent answers the next request after the "
           "reset", (sent[0], stalled, t.is_alive()))
    finally:
        conn.close()
        t.join(REPLY_TIMEOUT)


def cpu_samples(text):
    return [(int(m.group(1)), int(m.group(2)) + int(m.group(3)), float(m.group(4)),
             int(m.group(5)) if m.group(5) else None) for m in CPU_LINE.finditer(text)]


def check_idle_cpu(setup, iid):
    """AGENT-19: the agent's own CPU time over a 30 s idle period (no host client), from the
    guest's /proc/<pid>/stat as the guest-side reporter prints it."""
    n0 = len(cpu_samples(setup.console(iid)))
    # The first sample printed after the last client left opens the window.
    first = poll(lambda: cpu_samples(setup.console(iid))[n0:n0 + 1], STATE_TIMEOUT, 0.5)
    if not ok(first, "the guest prints the agent's CPU time", setup.diagnostics(iid)):
        return
    pid0, ticks0, up0, wake0 = first[0]

    def window():
        later = [s for s in cpu_samples(setup.console(iid)) if s[2] >= up0 + IDLE_SECONDS]
        return later[:1]

    last = poll(window, IDLE_SECONDS * 4 + STATE_TIMEOUT, 0.5)
    if not ok(last, "the guest's clock covers a %d s idle period" % IDLE_SECONDS,
              setup.diagnostics(iid)):
        return
    pid1, ticks1, up1, wake1 = last[0]
    eq(pid1, pid0, "AGENT-19: the same agent process throughout the idle period")
    sockets = [int(m.group(6)) for m in CPU_LINE.finditer(setup.console(iid))]
    eq(max(sockets), 0, "AGENT-13: the agent holds no socket (no vsock, no network), only its "
       "port, its kmsg and its probe's pipe")
    cpu = (ticks1 - ticks0) / USER_HZ
    span = up1 - up0
    wakeups = "" if wake0 is None or wake1 is None else ", %d wake-ups (%.1f/s)" % (
        wake1 - wake0, (wake1 - wake0) / span)
    note("idle CPU: %.2f s of the agent's utime+stime over %.1f s of guest time with no host "
         "client%s" % (cpu, span, wakeups))
    ok(cpu < IDLE_CPU_LIMIT, "AGENT-19: the agent's CPU time stays under %.0f s over a %d s "
       "idle period (%.2f s over %.1f s)" % (IDLE_CPU_LIMIT, IDLE_SECONDS, cpu, span))


def check_idle_guest(setup):
    name = "e2e-agent-idle"
    initrd = overlay(setup.guest, setup.work, name, [
        "--gpu-watch", "on", "--kmsg", "/run/e2e/kmsg", "--nvidia-smi", "/bin/e2e-nvidia-smi",
        "--probe-retry-after", "10s"], {
        "/etc/e2e/kmsg-fifo": "",
        "/etc/e2e/cpu-report": "",
        "/etc/e2e/smi-plan": "1\n",
    })
    iid, conn = setup.boot(name, initrd)
    if not conn:
        return iid
    sock = os.path.join(setup.work, "run", "instances", iid, "agent.sock")
    try:
        eq(status(conn, "s1"), {"return": {"state": "unknown", "failure_message": ""},
                                "id": "s1"},
           "AGENT-4, AGENT-15: guest-gpu-init-status starts unknown with an empty message")
        check_protocol(conn)
        # AGENT-11: a failed probe never sets failed; it is retried.
        m = setup.wait_console(iid, r"vgpud-e2e: nvidia-smi attempt 2 ")
        ok(m, "AGENT-11: a failed probe is retried (--probe-retry-after 10s)",
           setup.diagnostics(iid))
        eq(status(conn, "s2"), {"return": {"state": "unknown", "failure_message": ""},
                                "id": "s2"},
           "AGENT-11: failed probes leave the state unknown")
    finally:
        conn.close()
    check_write_timeout(setup, iid, sock)
    check_cycles(setup, sock)
    check_idle_cpu(setup, iid)
    try:
        t0 = time.monotonic()
        conn = AgentConn(sock)
        try:
            eq(conn.call({"execute": "guest-ping", "id": "after"}), {"return": {}, "id": "after"},
               "AGENT-19: the agent answers after the idle period")
        finally:
            conn.close()
        note("first answer after the idle period: %.2f s" % (time.monotonic() - t0))
    except (OSError, AgentError) as e:
        ok(False, "AGENT-19: the agent answers after the idle period", e)
    text = setup.console(iid)
    ok(not re.search(r"agent exited with status", text),
       "AGENT-12: the agent ran throughout", setup.diagnostics(iid))
    return iid


# ---- guest 2: failed, the latest message ----------------------------------------------------


def check_failed_guest(setup):
    name = "e2e-agent-failed"
    initrd = overlay(setup.guest, setup.work, name, [
        "--gpu-watch", "auto", "--pci-root", "/e2e/pci", "--kmsg", "/etc/e2e/kmsg.txt",
        "--nvidia-smi", "/bin/e2e-nvidia-smi", "--probe-retry-after", "1s",
        "--probe-give-up-after", "3s"], {
        "/bin/vgpu-agent": (NO_SERIAL, 0o755),
        "/bin/vgpu-agent.bin": agent_files("/bin/vgpu-agent.bin")["/bin/vgpu-agent.bin"],
        "/etc/e2e/kmsg.txt": KMSG_FAILED,
        "/etc/e2e/smi-plan": "1\n",
        # A --pci-root whose PCI devices include an NVIDIA one (AGENT-3), and whose
        # class/virtio-ports is the guest's (AGENT-1's port lookup).
        "/e2e/pci/bus/pci/devices/0000:00:05.0/vendor": "0x8086\n",
        "/e2e/pci/bus/pci/devices/0000:00:06.0/vendor": "0x10de\n",
        "/e2e/pci/class": ("symlink", "/sys/class"),
    })
    iid, conn = setup.boot(name, initrd)
    if not conn:
        return iid
    try:
        text = setup.console(iid)
        ok("vgpud-e2e: agent without --serial (absent default path): --gpu-watch auto" in text,
           "AGENT-1: without --serial and without /dev/virtio-ports/ (no udev), the agent "
           "found its port through <pci-root>/class/virtio-ports/*/name",
           setup.diagnostics(iid))
        got = poll_status(conn, {"state": "failed", "failure_message": FAIL_2})
        eq(got, {"state": "failed", "failure_message": FAIL_2},
           "AGENT-4, AGENT-5, AGENT-6: --gpu-watch auto with an NVIDIA device watches; two "
           "failure records give failed with the latest message")
        m = setup.wait_console(iid, r"GPU init probe gave up after (\S+)")
        ok(m and m.group(1) == "3s", "AGENT-11: the probe gives up after "
           "--probe-give-up-after, logged as 'GPU init probe gave up after 3s' (GEN-12)",
           setup.diagnostics(iid))
        text = setup.console(iid)
        detected = re.findall(r"GPU init failure detected: (.*)$", text, re.M)
        eq(detected, [FAIL_1], "AGENT-5: only the first match logs 'GPU init failure detected: "
           "<msg>'")
        attempts = len(re.findall(r"vgpud-e2e: nvidia-smi attempt \d+ ", text))
        ok(attempts >= 2, "AGENT-9, AGENT-11: the probe ran and was retried before it gave "
           "up (%d attempts)" % attempts, setup.diagnostics(iid))
        eq(status(conn, "after"), {"return": {"state": "failed", "failure_message": FAIL_2},
                                   "id": "after"},
           "AGENT-11: a probe that gave up leaves failed with the latest message")
        ok("GPU driver initialized" not in text, "AGENT-5: no success is logged",
           setup.diagnostics(iid))
        eq(len(re.findall(r"vgpud-e2e: nvidia-smi attempt \d+ ", setup.console(iid))), attempts,
           "AGENT-11: no attempt after the probe gave up")
    finally:
        conn.close()
    return iid


# ---- guest 3: ok, terminal ------------------------------------------------------------------


def check_ok_guest(setup):
    name = "e2e-agent-ok"
    initrd = overlay(setup.guest, setup.work, name, [
        "--gpu-watch", "on", "--kmsg", "/run/e2e/kmsg", "--nvidia-smi", "/bin/e2e-nvidia-smi",
        "--probe-retry-after", "1s"], {
        "/etc/e2e/kmsg-fifo": "",
        "/etc/e2e/kmsg-early": "3,500,5000000,-;" + FAIL_1 + "\n",
        "/etc/e2e/kmsg-late": "3,501,9000000,-;" + LATE + "\n",
        "/etc/e2e/smi-plan": "1 0\n",
    })
    iid, conn = setup.boot(name, initrd)
    if not conn:
        return iid
    try:
        got = poll_status(conn, {"state": "ok", "failure_message": ""})
        eq(got, {"state": "ok", "failure_message": ""},
           "AGENT-4, AGENT-11: a successful probe after a failure record sets ok with an empty "
           "message")
        text = setup.console(iid)
        attempts = re.findall(r"vgpud-e2e: nvidia-smi attempt (\d+) args=\[(.*?)\] "
                              r"stdin=(\S*) stdout=(\S*) status=(\d+)", text)
        eq([a[0] for a in attempts], ["1", "2"], "AGENT-11: one retry, then no more attempts")
        eq({a[1:4] for a in attempts}, {("-L", "/dev/null", "pipe")},
           "AGENT-9, AGENT-10: the probe runs 'nvidia-smi -L' with stdin /dev/null and its "
           "output captured")
        ok(re.search(r"e2e-captured-output-of-attempt-1", text),
           "AGENT-10: the failed attempt's captured output is logged", setup.diagnostics(iid))
        ok(not re.search(r"e2e-captured-output-of-attempt-2|GPU 0: NVIDIA", text),
           "AGENT-10: a successful attempt's output is not logged", setup.diagnostics(iid))
        lines = text.splitlines()
        det = [i for i, l in enumerate(lines) if "GPU init failure detected: " + FAIL_1 in l]
        init = [i for i, l in enumerate(lines) if "GPU driver initialized" in l]
        ok(det and init and det[0] < init[0],
           "AGENT-4, AGENT-5: failed ('GPU init failure detected: <msg>') then ok ('GPU driver "
           "initialized')", setup.diagnostics(iid))

        m = setup.wait_console(iid, r"vgpud-e2e: kmsg: the agent (closed it|still holds it)")
        ok(m and m.group(1) == "closed it",
           "AGENT-8: the agent read the late failure record and closed the FIFO at its EOF",
           setup.diagnostics(iid))
        eq(status(conn, "late"), {"return": {"state": "ok", "failure_message": ""},
                                  "id": "late"},
           "AGENT-4: ok is terminal: a failure record after the success leaves ok, message "
           "empty")
        text = setup.console(iid)
        ok(LATE not in text and len(re.findall(r"GPU init failure detected", text)) == 1,
           "AGENT-4: the late match is ignored, not logged", setup.diagnostics(iid))
    finally:
        conn.close()
    return iid


# ---- main -----------------------------------------------------------------------------------


def kill_qemus(work):
    """SIGKILL, by pid, every QEMU whose argv names a path under work (the run's PID namespace
    has its own /proc, so these are this test's)."""
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = f.read().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if argv and os.path.basename(argv[0]).startswith(b"qemu-system") and \
                any(work.encode() in a for a in argv):
            try:
                os.kill(int(name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def main():
    guest = guest_or_skip(BUILD_GUEST, GUEST_DIR, QEMU)
    if not guest:
        return 1
    interp = elf_interpreter(AGENT)
    if LINKAGE == "static":
        if not ok(interp is None, "AGENT-1: vgpu-agent is statically linked", interp):
            note(subprocess.run(["file", AGENT], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT).stdout.decode(errors="replace"))
    else:
        skip("AGENT-1: vgpu-agent is statically linked",
             "a sanitizer or fuzzing build links it dynamically; its libraries go into the guest")
    note("vgpu-agent: %d bytes" % os.path.getsize(AGENT))

    t_start = time.monotonic()
    work = tempfile.mkdtemp(prefix="vgpud-e2e-agent-")
    daemons = []
    try:
        images = os.path.join(work, "images")
        os.mkdir(images)
        os.symlink(os.path.realpath(guest.kernel), os.path.join(images, "vmlinuz"))
        secret = write_secret(work)
        config = vgpud_config(os.path.join(work, "vgpud.yaml"), work, QEMU, images, guest,
                              VMM_BOOT_TIMEOUT, STOP_TIMEOUT)
        sock = os.path.join(work, "api.sock")
        d, c = start(work, "e2e-agent", config, secret, sock)
        daemons.append(d)
        if c:
            setup = Setup(work, guest, c, d)
            for label, fn in (("idle guest", check_idle_guest),
                              ("failed guest", check_failed_guest),
                              ("ok guest", check_ok_guest)):
                box = []
                run_group(label, lambda: box.append(fn(setup)))
                if box and box[0]:
                    setup.delete(box[0])
            for i in c.get("/instances").json():
                c.request("DELETE", "/instances/" + i["id"])
            if setup.first_answers:
                note("boot to first answer: " + ", ".join(
                    "%s %.2f s" % kv for kv in setup.first_answers.items()))
            stop(d)
    finally:
        for d in daemons:
            d.stop(signal.SIGKILL)
        kill_qemus(work)
        note("run time %.1f s" % (time.monotonic() - t_start))
        finish(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
