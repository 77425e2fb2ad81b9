#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-journal.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# OPS-13: started as systemd starts it (JOURNAL_STREAM naming its stderr), vgpud logs through
# the journal's native protocol with each line's VF, GPU and instance as fields. The journal is
# the test's own: run-sim-test.sh's private mount namespace (SIM-21) gets a tmpfs on /run and a
# datagram socket at /run/systemd/journal/socket, so no host journal is touched. Every datagram
# is parsed (both encodings of the protocol) and checked; with the socket gone, lines fall back
# to stderr.
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    eq, exit_status, ok, poll, run_group, start, stop, write_secret)
from vgpud_instances import (  # noqa: E402
    PROFILE, create, delete, finish_run, make_images, vf_of, vmm_config)

JOURNAL_SOCKET = "/run/systemd/journal/socket"
FIELDS = {"MESSAGE", "PRIORITY", "SYSLOG_IDENTIFIER", "ERRNO", "VGPUD_INSTANCE", "VGPUD_VF",
          "VGPUD_GPU"}


def parse_datagram(data):
    """{field: value} of one native-protocol datagram: FIELD=value lines, or FIELD, a newline,
    a little-endian 64-bit length and that many bytes, then a newline."""
    out, i = {}, 0
    while i < len(data):
        nl = data.index(b"\n", i)
        eq_at = data.find(b"=", i, nl)
        if eq_at >= 0:
            out[data[i:eq_at].decode()] = data[eq_at + 1:nl].decode()
            i = nl + 1
        else:
            n = struct.unpack("<Q", data[nl + 1:nl + 9])[0]
            out[data[i:nl].decode()] = data[nl + 9:nl + 9 + n].decode()
            if data[nl + 9 + n:nl + 10 + n] != b"\n":
                raise ValueError("binary field without its newline: %r" % data)
            i = nl + 10 + n
    return out


class Journal:
    """The test's journal: a socket read by a thread of its own, as journald reads, so that vgpud
    never finds it full (vgpud's socket does not block: a full one sends lines to stderr)."""

    def __init__(self):
        os.makedirs(os.path.dirname(JOURNAL_SOCKET))
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(JOURNAL_SOCKET)
        self.sock.settimeout(0.05)
        self.entries, self.errors = [], []
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            try:
                self.entries.append(parse_datagram(data))
            except (ValueError, UnicodeDecodeError, struct.error) as e:
                self.errors.append((e, data))

    def close(self):
        if not self.done.is_set():
            self.done.set()
            self.thread.join()
            self.sock.close()
            os.unlink(JOURNAL_SOCKET)


def check(c, d, journal, stderr_path):
    entries = journal.entries

    def placed():
        return [e for e in entries if e.get("MESSAGE", "").startswith("placed vGPU claim ")]

    st, inst = create(c, "journal-01", PROFILE)
    if not ok(st == 201, "INST-12: create a vGPU instance", (st, inst)):
        return
    ok(poll(lambda: placed(), 10), "OPS-13: the claim's line reaches the journal socket")
    e = (placed() or [{}])[0]
    vf = vf_of(inst)
    gpu = [g["address"] for g in c.get("/gpus").json()["gpus"]
           if any(v["address"] == vf for v in g["vfs"])]
    eq({k: e.get(k) for k in ("PRIORITY", "SYSLOG_IDENTIFIER", "VGPUD_INSTANCE", "VGPUD_VF",
                              "VGPUD_GPU")},
       {"PRIORITY": "6", "SYSLOG_IDENTIFIER": "vgpud", "VGPUD_INSTANCE": inst["id"],
        "VGPUD_VF": vf, "VGPUD_GPU": gpu[0] if gpu else None},
       "OPS-13: the claim's datagram carries PRIORITY, the identifier and VGPUD_INSTANCE, "
       "VGPUD_VF, VGPUD_GPU")
    ok(" instance_id=%s " % inst["id"] in e.get("MESSAGE", "") + " ",
       "OPS-13: MESSAGE is the line stderr would show, pairs and all", e.get("MESSAGE"))
    eq(journal.errors, [], "OPS-13: every datagram parses")
    ok(entries and all("MESSAGE" in x and x.get("PRIORITY", "") in "34567" and
                       set(x) <= FIELDS for x in entries),
       "OPS-13: every datagram has a MESSAGE and a priority, and only the fields vgpud sends",
       [x for x in entries if not set(x) <= FIELDS][:3])
    with open(stderr_path) as f:
        eq(f.read(), "", "OPS-13: nothing went to stderr meanwhile")

    # Without the journal the lines are not lost: they go to stderr.
    journal.close()
    eq(delete(c, inst["id"])[0], 204, "INST-18: delete it")
    with open(stderr_path) as f:
        text = f.read()
    ok(poll(lambda: open(stderr_path).read() != "", 10) and
       all(line.startswith("<") for line in open(stderr_path).read().splitlines()),
       "OPS-13: with the journal socket gone, lines fall back to stderr", text[-500:])


def main():
    work = tempfile.mkdtemp(prefix="vgpud-journal-")
    daemons = []
    journal = None
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work)
        # A journal of the test's own, in this mount namespace only.
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
        journal = Journal()
        # systemd's JOURNAL_STREAM: the device and inode of the stream stderr is. The daemon's
        # log file is that stream; opening it again for writing keeps its inode.
        stderr_path = os.path.join(work, "journal.log")
        open(stderr_path, "w").close()
        st = os.stat(stderr_path)
        d, c = start(work, "journal", config, secret, os.path.join(work, "api.sock"),
                     extra_env={"JOURNAL_STREAM": "%d:%d" % (st.st_dev, st.st_ino)})
        daemons.append(d)
        if c:
            run_group("journal", lambda: check(c, d, journal, stderr_path))
            stop(d)
    finally:
        if journal:
            journal.close()
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
