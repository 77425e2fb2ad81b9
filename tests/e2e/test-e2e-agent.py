#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-e2e-agent.py VGPUD OPENAPI_YAML FAKE_NVML BUILD_GUEST_SH GUEST_DIR QEMU AGENT VERSION
#                   static|dynamic
#
# The guest agent in a real Linux guest (SPEC SIM-19, §9 AGENT-1, AGENT-2, AGENT-3, AGENT-4,
# AGENT-5, AGENT-6, AGENT-7, AGENT-8, AGENT-9, AGENT-10, AGENT-11, AGENT-12, AGENT-13, AGENT-14,
# AGENT-15, AGENT-16, AGENT-17, AGENT-18, AGENT-19): vgpud, on the simulated
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
#           (AGENT-14, AGENT-15, AGENT-16, AGENT-17, AGENT-18), state unknown (AGENT-4, AGENT-11),
#           AGENT-19's 100 connect/request/
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
import socket
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e2e_guest import (  # noqa: E402 (after the path)
    Qemu, complete_lines, guest_or_skip, initrd_with, keyval, note, qemu_processes, read_text,
    run_with_vgpud, tail, wait_console)
import vgpud_test  # noqa: E402 (e2e_guest put tests/lib on the path)
from vgpud_test import (  # noqa: E402
    error_of, eq, ok, poll, run_group, sim_state, skip)

BUILD_GUEST, GUEST_DIR, QEMU, AGENT, VERSION, LINKAGE, FAKE_QEMU = sys.argv[4:11]
FAKES = []  # every fake-qemu started (parity checks), killed at the end whatever happens

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
        return poll(lambda: rx.search(complete_lines(self.console(iid))), timeout, 0.2)

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


# ---- parity: fake-qemu's agent channel against the real agent ------------------------------
#
# Every test outside this suite meets sim/fake-qemu where production meets vgpu-agent: it
# answers the agent protocol on agent.sock itself (SIM-15), and the sentinel (SENT-1, SENT-2,
# SENT-3, SENT-4, SENT-5, SENT-6, SENT-7, SENT-8, SENT-9, SENT-10, SENT-11, SENT-12) is
# tested against it. Here the same request lines go to the real agent in the guest and to a
# fake-qemu started with the very argv vgpud gave that guest's QEMU (read from /proc; only its
# three chardev paths are moved into a directory of the test's), and the replies are compared:
# byte for byte where the content is fixed, key by key and type by type where it is not. A
# mismatch fails the check named "parity: ..."; where SPEC §9 says the real agent is the one
# that is wrong, the check is a TAP TODO with the reason (none is, as of this writing).

SENTINEL_MESSAGE_MAX = 4096  # SENT-6, HEALTH-12
AGENT6_FORM = re.compile(r"^NVRM:.*RmInitAdapter failed!")


def todo(cond, name, why, detail=None):
    """A check whose failure is a known fault outside this test's reach (TAP TODO)."""
    vgpud_test.counter += 1
    print("%s %d - %s # TODO %s" % ("ok" if cond else "not ok", vgpud_test.counter, name, why))
    if not cond and detail is not None:
        for line in str(detail).splitlines()[:40]:
            print("#   " + line)
    sys.stdout.flush()
    return cond


def keyval_split(value):
    """A keyval option's elements, ",," read as a literal comma (VMM-2)."""
    parts, cur, i = [], [], 0
    while i < len(value):
        if value[i] == "," and value[i + 1:i + 2] == ",":
            cur.append(",")
            i += 2
        elif value[i] == ",":
            parts.append("".join(cur))
            cur = []
            i += 1
        else:
            cur.append(value[i])
            i += 1
    parts.append("".join(cur))
    return parts


def keyval_join(parts):
    return ",".join(keyval(p) for p in parts)


def passed_count(argv):
    """How many descriptors VMM-3 passed, numbered from 3: one per file the argv names by
    descriptor (INST-6), -kernel's and -initrd's /proc/self/fd/<n> and each -add-fd."""
    return sum(1 for prev, a in zip(argv, argv[1:])
               if (prev in ("-kernel", "-initrd") and a.startswith("/proc/self/fd/")) or
               prev == "-add-fd")


def vmm_pid(iid):
    """The pid of the QEMU vgpud runs for instance iid, or None."""
    needle = "/instances/%s/agent.sock" % iid
    for pid, argv in qemu_processes().items():
        if any(needle in a for a in argv):
            return pid
    return None


def vmm_argv(iid):
    """The argv of the QEMU vgpud runs for instance iid, or None."""
    pid = vmm_pid(iid)
    return qemu_processes().get(pid) if pid else None


class FakeVmm:
    """sim/fake-qemu run with a guest's VMM-1 argv. Its directory DIR stands in for the
    simulator mount SIM-15 looks for above the console log: DIR/data/instances/<label>/
    console.log, and, for a wedged VF, DIR/.sim/state.json (the simulator's own state.json with
    one VF's "wedged" set), DIR/sys/... as the VF's sysfsdev and DIR/dev/vfio/<group>."""

    GROUP = 7

    def __init__(self, setup, iid, label, wedged=False):
        self.dir = os.path.join(setup.work, "fake-qemu", label)
        self.console_log = os.path.join(self.dir, "data", "instances", label, "console.log")
        self.agent_sock = os.path.join(self.dir, "run", "agent.sock")
        self.qmp_sock = os.path.join(self.dir, "run", "qmp.sock")
        self.console_sock = os.path.join(self.dir, "run", "console.sock")
        self.vf = None
        self.proc = None
        os.makedirs(os.path.dirname(self.console_log))
        os.makedirs(os.path.dirname(self.agent_sock))
        argv = vmm_argv(iid)
        if argv is None:
            raise AgentError("no QEMU process of instance %s in /proc" % iid)
        moved = set()
        out = [FAKE_QEMU]
        for prev, arg in zip(argv, argv[1:]):
            if prev == "-chardev":
                parts = keyval_split(arg)
                ident = [p for p in parts if p.startswith("id=")]
                # CONS-1: the console is a socket whose logfile is console.log (or, from an
                # older vgpud, console.log itself as a file chardev).
                socket_console = parts[:1] == ["socket"] and any(
                    p.startswith("logfile=") for p in parts)
                console = self.console_sock if socket_console else self.console_log
                target = {"id=qmp": self.qmp_sock, "id=agent0": self.agent_sock,
                          "id=console0": console}.get(ident[0] if ident else None)
                if target:
                    parts = [("path=" + target) if p.startswith("path=") else
                             ("logfile=" + self.console_log) if p.startswith("logfile=") else p
                             for p in parts]
                    moved.add(ident[0])
                    arg = keyval_join(parts)
            out.append(arg)
        if moved != {"id=qmp", "id=agent0", "id=console0"}:
            raise AgentError("vgpud's QEMU argv lacks a chardev (found %s): %r"
                             % (sorted(moved), argv))
        if "vfio-pci" in " ".join(argv):
            raise AgentError("the e2e guests are GPU-less, yet the argv has a VFIO device")
        if wedged:
            out += ["-device", "vfio-pci,sysfsdev=" + keyval(self._wedged_vf())]
        self.argv = out
        # INST-6: the boot files vgpud passed that QEMU, passed to fake-qemu at the same numbers.
        pid = vmm_pid(iid)
        passed = ["/proc/%d/fd/%d" % (pid, n) for n in range(3, 3 + passed_count(argv))]
        self.proc = Qemu(out, os.path.join(self.dir, "qemu.log"), passed=passed)
        FAKES.append(self)

    def _wedged_vf(self):
        """SIM-14/15: a VF wedged at the VMM's start, in the simulator's own state.json form."""
        state = sim_state()
        vf = state["gpus"][0]["vfs"][0]
        vf["wedged"] = True
        self.vf = vf["address"]
        os.makedirs(os.path.join(self.dir, ".sim"))
        with open(os.path.join(self.dir, ".sim", "state.json"), "w") as f:
            json.dump(state, f)
        dev = os.path.join(self.dir, "sys", "bus", "pci", "devices", self.vf)
        os.makedirs(dev)
        os.symlink("../../../../kernel/iommu_groups/%d" % self.GROUP,
                   os.path.join(dev, "iommu_group"))
        os.makedirs(os.path.join(self.dir, "dev", "vfio"))
        open(os.path.join(self.dir, "dev", "vfio", str(self.GROUP)), "w").close()
        return dev

    def console(self):
        return read_text(self.console_log) + read_text(os.path.join(self.dir, "qemu.log"))

    def connect(self, timeout=STATE_TIMEOUT):
        """An AgentConn once fake-qemu listens (bounded; AgentError if it exits first)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return AgentConn(self.agent_sock)
            except (FileNotFoundError, ConnectionRefusedError):
                if not self.proc.alive() or time.monotonic() >= deadline:
                    raise AgentError("fake-qemu does not listen on %s:\n%s"
                                     % (self.agent_sock, tail(self.console(), 20)))
                time.sleep(0.05)

    def stop(self):
        if self.proc:
            self.proc.kill()


def brief(value, limit=300):
    """A request or replies for a diagnostic: each line cut to limit bytes."""
    if isinstance(value, bytes):
        return repr(value[:limit]) + (" (%d bytes)" % len(value) if len(value) > limit else "")
    if isinstance(value, list):
        return "[%s]" % ", ".join(brief(v, limit) for v in value)
    return repr(value)


def exchange(conn, data, count, timeout=REPLY_TIMEOUT):
    """Sends data and returns the next count reply lines as bytes, or an AgentError's text."""
    try:
        conn.send(data)
        return [conn.line(timeout) for _ in range(count)]
    except (OSError, AgentError) as e:
        return "no reply: %s" % e


def shape(value):
    """A JSON value's structure: object keys in order, every other value reduced to its type."""
    if isinstance(value, dict):
        return [(k, shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [shape(v) for v in value]
    return type(value).__name__


def sentinel_classify(line, rid):
    """sentinel_parse_reply() (SENT-4, SENT-6) in Python: the result the sentinel would take
    from a reply line to its request with id rid ("discarded" for a line it skips)."""
    try:
        v = json.loads(line)
    except ValueError:
        return "discarded"
    if not isinstance(v, dict) or type(v.get("id")) is not int or v["id"] != rid:
        return "discarded"
    ret, err = v.get("return"), v.get("error")
    if ret is not None and err is None and isinstance(ret, dict):
        state, msg = ret.get("state"), ret.get("failure_message", "")
        if not isinstance(state, str) or not isinstance(msg, str) or \
                len(msg.encode()) > SENTINEL_MESSAGE_MAX:
            return "rpc_error"
        return state if state in ("ok", "failed", "unknown") else "rpc_error"
    if err is not None and ret is None and isinstance(err, dict) and \
            err.get("class") == "CommandNotFound":
        return "unsupported_agent"
    return "rpc_error"


def padded_ping(total, rid):
    """A guest-ping request line of exactly total bytes (newline excluded): its id is padded."""
    head, tail_ = b'{"execute":"guest-ping","id":"%s-' % rid.encode(), b'"}'
    return head + b"p" * (total - len(head) - len(tail_)) + tail_


# The requests the test sends to both sides. Each: (name, SPEC IDs, bytes sent, reply lines).
# The replies' content is fixed by the request alone, so both sides must send the same bytes.
def parity_requests():
    deep = b'{"execute":"guest-ping","id":' + b"[" * 20 + b"]" * 20 + b"}\n"
    return [
        ("guest-ping, integer id", "AGENT-14, AGENT-15",
         b'{"execute":"guest-ping","id":1}\n', 1),
        ("guest-ping without an id", "AGENT-14", b'{"execute":"guest-ping"}\n', 1),
        ("guest-ping, empty arguments, string id", "AGENT-14",
         b'{"execute":"guest-ping","arguments":{},"id":"s-1"}\n', 1),
        ("id: an object with an array and null", "AGENT-14",
         b'{"execute":"guest-ping","id":{"a":[1,"x"],"b":null}}\n', 1),
        ("id: null", "AGENT-14", b'{"execute":"guest-ping","id":null}\n', 1),
        ("id: false", "AGENT-14", b'{"execute":"guest-ping","id":false}\n', 1),
        ("id: a real, re-serialised by jansson", "AGENT-14",
         b'{"execute":"guest-ping","id":1.5e3}\n', 1),
        ("id: a negative integer", "AGENT-14", b'{"execute":"guest-ping","id":-7}\n', 1),
        ("id: an integer beyond 2^53", "AGENT-14",
         b'{"execute":"guest-ping","id":9007199254740993}\n', 1),
        ("id: an integer beyond int64 (invalid JSON for jansson)", "AGENT-14, AGENT-16",
         b'{"execute":"guest-ping","id":18446744073709551616}\n', 1),
        ("id: escapes and non-ASCII text", "AGENT-14",
         b'{"execute":"guest-ping","id":"q\\"\\n\\u00e9\\u2603/\\/"}\n', 1),
        ("id: white space in the request, compact in the reply", "AGENT-14",
         b'{ "execute" : "guest-ping" ,\t"id" : [ 1 , { "k" : "v" } ] }\n', 1),
        ("id before execute: echoed after return", "AGENT-14",
         b'{"id":"first","execute":"guest-ping"}\n', 1),
        ("a CRLF line end", "AGENT-14", b'{"execute":"guest-ping","id":"crlf"}\r\n', 1),
        ("blank lines get no reply", "AGENT-14",
         b'\n \t\r\n{"execute":"guest-ping","id":"after-blank"}\n', 1),
        ("guest-info", "AGENT-15", b'{"execute":"guest-info","id":"info"}\n', 1),
        ("guest-info without an id", "AGENT-15", b'{"execute":"guest-info"}\n', 1),
        ("unknown command", "AGENT-16, AGENT-18, SENT-6",
         b'{"execute":"guest-reboot"}\n', 1),
        ("unknown command with arguments and an id", "AGENT-16, SENT-6",
         b'{"execute":"guest-exec","arguments":{"path":"/bin/sh"},"id":3}\n', 1),
        ("unknown command whose name needs escaping", "AGENT-16",
         b'{"execute":"guest-\\u0001\\"x\\u00e9","id":4}\n', 1),
        ("invalid JSON (cut short)", "AGENT-16", b'{"execute":\n', 1),
        ("invalid JSON (trailing text)", "AGENT-16",
         b'{"execute":"guest-ping","id":5} x\n', 1),
        ("invalid JSON (a bare word)", "AGENT-16", b'guest-ping\n', 1),
        ("invalid JSON (duplicate keys)", "AGENT-16",
         b'{"execute":"guest-ping","execute":"guest-info","id":6}\n', 1),
        ("invalid JSON (bytes that are not UTF-8)", "AGENT-16",
         b'\xff\xfe{"execute":"guest-ping"}\n', 1),
        ("invalid JSON (a NUL byte)", "AGENT-16", b'{"execute":"guest-ping"}\x00\n', 1),
        ("invalid JSON (nesting over JSON_DEPTH_MAX)", "AGENT-16", deep, 1),
        ("a non-object: an array", "AGENT-16", b'[{"execute":"guest-ping"}]\n', 1),
        ("a non-object: a string", "AGENT-16", b'"guest-ping"\n', 1),
        ("a non-object: a number", "AGENT-16", b'42\n', 1),
        ("a non-object: null", "AGENT-16", b'null\n', 1),
        ("no execute", "AGENT-16", b'{"arguments":{}}\n', 1),
        ("no execute, with an id", "AGENT-14, AGENT-16", b'{"id":7}\n', 1),
        ("an empty object", "AGENT-16", b'{}\n', 1),
        ("a non-string execute", "AGENT-16", b'{"execute":42,"id":8}\n', 1),
        ("a null execute", "AGENT-16", b'{"execute":null,"id":9}\n', 1),
        ("non-object arguments", "AGENT-16",
         b'{"execute":"guest-ping","arguments":[1],"id":10}\n', 1),
        ("an unknown key", "AGENT-14, AGENT-16",
         b'{"execute":"guest-ping","extra":true,"id":11}\n', 1),
        ("the connection stays open after the errors", "AGENT-16",
         b'{"execute":"guest-ping","id":"still-open"}\n', 1),
        ("a line of exactly 65536 bytes is answered", "AGENT-17",
         padded_ping(LINE_LIMIT, "limit") + b"\n", 1),
        ("a line of 65537 bytes gets the error; the next line is answered", "AGENT-17",
         padded_ping(LINE_LIMIT + 1, "over") + b'\n{"execute":"guest-ping","id":"next"}\n', 2),
        ("an over-long line's tail is discarded up to its newline", "AGENT-17",
         b"A" * (LINE_LIMIT + 4096) + b'{"execute":"guest-ping","id":"tail"}\n'
         b'{"execute":"guest-ping","id":"after-tail"}\n', 2),
    ]


def parity_status_request(rid):
    """SENT-4: the sentinel's request, byte for byte as sentinel_format_request() writes it."""
    return b'{"execute":"guest-gpu-init-status","id":%d}\n' % rid


def masked(line, key):
    """line with the string value of key (inside "return") replaced by "*"; None when the line
    is not such a reply or the text does not occur exactly once."""
    try:
        v = json.loads(line)
        value = v["return"][key]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(value, str):
        return None
    text = b'"%s":%s' % (key.encode(), json.dumps(value, ensure_ascii=False).encode())
    if line.count(text) != 1:
        return None
    return line.replace(text, b'"%s":"*"' % key.encode())


def compare_requests(real, fake, requests, label):
    """Each request to both sides, one at a time: the same reply bytes (AGENT-14, AGENT-15,
    AGENT-16, AGENT-17)."""
    for name, ids, data, count in requests:
        got_real = exchange(real, data, count)
        got_fake = exchange(fake, data, count)
        ok(isinstance(got_real, list) and got_real == got_fake,
           "parity (%s): %s: fake-qemu sends the real agent's bytes (%s)" % (label, name, ids),
           "request: %s\nagent:     %s\nfake-qemu: %s" % (brief(data), brief(got_real), brief(got_fake)))


def compare_pipelined(real, fake, requests, label):
    """All short requests in one write: the same lines in the same order (AGENT-14)."""
    short = [r for r in requests if len(r[2]) < 4096]
    data = b"".join(r[2] for r in short)
    count = sum(r[3] for r in short)
    got_real = exchange(real, data, count)
    got_fake = exchange(fake, data, count)
    ok(isinstance(got_real, list) and got_real == got_fake,
       "parity (%s): %d requests in one write get the same %d lines in the same order "
       "(AGENT-14)" % (label, len(short), count),
       "agent:     %s\nfake-qemu: %s" % (brief(got_real), brief(got_fake)))
    # The limit once more, sent in 16 KiB pieces as a slow writer would.
    for conn in (real, fake):
        for _ in range(0, 3 * LINE_LIMIT, 16384):
            conn.send(b"B" * 16384)
    got_real = exchange(real, b'\n{"execute":"guest-ping","id":"pieces"}\n', 2)
    got_fake = exchange(fake, b'\n{"execute":"guest-ping","id":"pieces"}\n', 2)
    ok(isinstance(got_real, list) and got_real == got_fake,
       "parity (%s): a %d-byte line sent in pieces gets the same single error, then the same "
       "reply (AGENT-17)" % (label, 3 * LINE_LIMIT),
       "agent:     %s\nfake-qemu: %s" % (brief(got_real), brief(got_fake)))


def compare_status(real, fake, label, want_real, want_fake, why=None):
    """SENT-4's request to both sides. want_*: the state each side must be in. Equal states must
    give equal bytes, except failure_message (a message of each side's own failure, compared as
    AGENT-6's form); different states (SIM-15 knows no "unknown") the same keys and types and
    the same bytes with the state masked."""
    rid = 4242
    data = parity_status_request(rid)
    got_real, got_fake = exchange(real, data, 1), exchange(fake, data, 1)
    if not (isinstance(got_real, list) and isinstance(got_fake, list)):
        ok(False, "parity (%s): guest-gpu-init-status answered on both sides" % label,
           "agent: %r\nfake-qemu: %r" % (got_real, got_fake))
        return
    r, f = got_real[0], got_fake[0]
    jr, jf = json.loads(r), json.loads(f)
    eq((sentinel_classify(r, rid), sentinel_classify(f, rid)), (want_real, want_fake),
       "parity (%s): the sentinel classifies the agent's reply %s and fake-qemu's %s "
       "(SENT-4, SENT-6)" % (label, want_real, want_fake))
    eq(shape(jr), shape(jf), "parity (%s): guest-gpu-init-status: the same keys in the same "
       "order and the same JSON types (AGENT-15)" % label)
    if want_real == want_fake == "failed":
        mr, mf = jr["return"]["failure_message"], jf["return"]["failure_message"]
        ok(AGENT6_FORM.match(mr) and AGENT6_FORM.match(mf) and
           max(len(mr.encode()), len(mf.encode())) <= SENTINEL_MESSAGE_MAX,
           "parity (%s): both failure_messages are kmsg failure texts (AGENT-6) within SENT-6's "
           "4096 bytes" % label, "agent: %r\nfake-qemu: %r" % (mr, mf))
        r, f = masked(r, "failure_message"), masked(f, "failure_message")
        what = "the same bytes but for failure_message"
    elif want_real == want_fake:
        what = "the same bytes"
    else:
        r, f = masked(r, "state"), masked(f, "state")
        what = "the same bytes but for state"
    ok(r is not None and r == f, "parity (%s): guest-gpu-init-status (SENT-4's request): %s "
       "(AGENT-14, AGENT-15)" % (label, what), "agent:     %r\nfake-qemu: %r" % (r, f))
    if why:
        note("parity (%s): %s" % (label, why))
    # Without an id, as a host other than the sentinel might ask.
    got_real = exchange(real, b'{"execute":"guest-gpu-init-status"}\n', 1)
    got_fake = exchange(fake, b'{"execute":"guest-gpu-init-status"}\n', 1)
    if want_real == want_fake == "failed":
        got_real = [masked(x, "failure_message") for x in got_real] \
            if isinstance(got_real, list) else got_real
        got_fake = [masked(x, "failure_message") for x in got_fake] \
            if isinstance(got_fake, list) else got_fake
    elif want_real != want_fake:
        got_real = [masked(x, "state") for x in got_real] \
            if isinstance(got_real, list) else got_real
        got_fake = [masked(x, "state") for x in got_fake] \
            if isinstance(got_fake, list) else got_fake
    ok(isinstance(got_real, list) and got_real == got_fake,
       "parity (%s): guest-gpu-init-status without an id: %s (AGENT-14)" % (label, what),
       "agent:     %s\nfake-qemu: %s" % (brief(got_real), brief(got_fake)))


def hangup_sequence(path):
    """SENT-4's other-id lines: a client that hangs up before its reply was written. The
    channel is held by a first client, so the second waits in the listen backlog, sends its
    request and hangs up before the VMM has even accepted it; a third waits behind it. When the
    first leaves, the VMM (QEMU or fake-qemu) takes the second's request and hang-up, and the
    reply can only go to the third. Returns the third's first two lines, or an error text.
    The holder's own ping first makes sure the VMM has accepted it: QEMU listens with a backlog
    of one, so a third connection would be refused while two wait."""
    try:
        holder = AgentConn(path)
        try:
            r = holder.call({"execute": "guest-ping", "id": "holder"})
            if r != {"return": {}, "id": "holder"}:
                raise AgentError("the holder's ping got %r" % (r,))
            gone = AgentConn(path)
            gone.send(b'{"execute":"guest-ping","id":100}\n')
            gone.close()
            third = AgentConn(path)
        finally:
            holder.close()
        try:
            return exchange(third, b'{"execute":"guest-ping","id":200}\n', 2)
        finally:
            third.close()
    except (OSError, AgentError) as e:
        return "no reply: %s" % e


def check_parity_hangup(setup, iid, sock):
    """AGENT-19, AGENT-17: a reply the host did not take waits (up to 5 s) and goes to the
    next host, ahead of that host's own reply; SENT-4 discards it by its id."""
    fake = None
    try:
        fake = FakeVmm(setup, iid, "hangup")
        fake.connect().close()
        got_fake = hangup_sequence(fake.agent_sock)
    except (OSError, AgentError) as e:
        got_fake = "fake-qemu: %s" % e
    finally:
        if fake:
            fake.stop()
    got_real = hangup_sequence(sock)
    want = [b'{"return":{},"id":100}', b'{"return":{},"id":200}']
    eq(got_real, want, "AGENT-19: the agent's reply to a host that hung up before it was "
       "written goes to the next host, ahead of that host's own (SENT-4's other-id line)")
    ok(isinstance(got_real, list) and got_real == got_fake,
       "parity (hang-up): fake-qemu hands the next client the reply a client left behind, "
       "as the agent does (AGENT-17, AGENT-19, SENT-4)",
       "agent:     %s\nfake-qemu: %s" % (brief(got_real), brief(got_fake)))


def start_fake(setup, iid, label, wedged=False):
    """A FakeVmm for instance iid and a connection to it, or (None, None) after a failed
    check."""
    try:
        fake = FakeVmm(setup, iid, label, wedged)
        conn = fake.connect()
    except (OSError, AgentError, KeyError, IndexError) as e:
        ok(False, "parity (%s): fake-qemu starts with vgpud's argv for the guest" % label, e)
        return None, None
    # fake-qemu listens before it writes its "started" line: wait for the line.
    gpu = "wedged" if wedged else "none"
    started = r"fake-qemu: started name=\S+ pid=\d+ vf=%s flags=none gpu=%s$" % (
        re.escape(fake.vf) if wedged else "none", gpu)
    wait_console(fake.console_log, r"^fake-qemu: started ", STATE_TIMEOUT, fake.proc.alive)
    text = fake.console()
    ok(re.search(started, text, re.M),
       "parity (%s): fake-qemu runs with vgpud's argv for the guest (VMM-1, SIM-15; gpu=%s)"
       % (label, gpu), tail(text, 10))
    return fake, conn


def check_parity(setup, iid, conn, label, want_real, want_fake, wedged=False, protocol=False,
                 why=None):
    """The parity checks for one guest: the protocol's fixed replies (protocol=True) and
    guest-gpu-init-status, against a fake-qemu given the guest's argv (wedged: with a VF that
    the simulator's state marks wedged, SIM-15's failed)."""
    fake, fconn = start_fake(setup, iid, label, wedged)
    if not fake:
        return
    try:
        if protocol:
            requests = parity_requests()
            compare_requests(conn, fconn, requests, label)
            compare_pipelined(conn, fconn, requests, label)
        compare_status(conn, fconn, label, want_real, want_fake, why)
    finally:
        fconn.close()
        fake.stop()


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
        # SIM-15 gives a GPU-less fake-qemu ok and has no unknown: the states differ here by
        # the SPEC, the rest of the reply must not.
        check_parity(setup, iid, conn, "idle", "unknown", "ok", protocol=True,
                     why="fake-qemu answers ok where this guest's agent answers unknown: SIM-15 "
                     "has no unknown (ok unless the VF was wedged at boot); SENT-6 reports "
                     "nothing for unknown, so a sentinel test of unknown needs the real agent")
        # AGENT-11: a failed probe never sets failed; it is retried.
        m = setup.wait_console(iid, r"vgpud-e2e: nvidia-smi attempt 2 ")
        ok(m, "AGENT-11: a failed probe is retried (--probe-retry-after 10s)",
           setup.diagnostics(iid))
        eq(status(conn, "s2"), {"return": {"state": "unknown", "failure_message": ""},
                                "id": "s2"},
           "AGENT-11: failed probes leave the state unknown")
    finally:
        conn.close()
    check_parity_hangup(setup, iid, sock)
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
        check_parity(setup, iid, conn, "failed", "failed", "failed", wedged=True)
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
        check_parity(setup, iid, conn, "ok", "ok", "ok")
        text = setup.console(iid)
        ok(LATE not in text and len(re.findall(r"GPU init failure detected", text)) == 1,
           "AGENT-4: the late match is ignored, not logged", setup.diagnostics(iid))
    finally:
        conn.close()
    return iid


# ---- main -----------------------------------------------------------------------------------


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

    def groups(c, d, work, images):
        setup = Setup(work, guest, c, d)
        for label, fn in (("idle guest", check_idle_guest),
                          ("failed guest", check_failed_guest),
                          ("ok guest", check_ok_guest)):
            box = []
            run_group(label, lambda: box.append(fn(setup)))
            if box and box[0]:
                setup.delete(box[0])
        if setup.first_answers:
            note("boot to first answer: " + ", ".join(
                "%s %.2f s" % kv for kv in setup.first_answers.items()))
    try:
        return run_with_vgpud("vgpud-e2e-agent-", QEMU, guest, groups,
                              boot_timeout=VMM_BOOT_TIMEOUT, stop_timeout=STOP_TIMEOUT)
    finally:
        for f in FAKES:
            f.stop()
        note("run time %.1f s" % (time.monotonic() - t_start))

if __name__ == "__main__":
    sys.exit(main())
