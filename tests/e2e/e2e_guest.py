# SPDX-License-Identifier: GPL-2.0-or-later
#
# e2e_guest: what the end-to-end tests (tests/e2e/test-*.py, SPEC SIM-19) share: TAP output, the
# guest image of build-guest.sh (built once per build directory, cached), initramfs overlays
# (extra files such as a static vgpu-agent without rebuilding the image), VMM-1's argv for a
# GPU-less VM, a QEMU process started as VMM-3 says, a QMP client (VMM-5, VMM-6, VMM-20) and
# console polling.
#
# The TAP helpers (ok, eq, plan, exit_status, poll, run_group) are tests/lib/vgpud_test.py's, one
# counter for every check of a script; that module reads the simulator's arguments only when a test
# asks for them, so tests that run without the simulator import it too.
import fcntl
import gzip
import json
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import eq, exit_status, ok, plan, poll, run_group  # noqa: E402,F401 (re-exported)
from vgpud_test import finish, proc_state, start, stop, write_config, write_secret  # noqa: E402

# ---- TAP, beyond vgpud_test's ----------------------------------------------------------------


def note(text):
    for line in str(text).splitlines():
        print("# " + line)
    sys.stdout.flush()


def skip_all(why):
    print("1..0 # SKIP " + why)
    sys.exit(0)


# ---- the guest image ------------------------------------------------------------------------


class Guest:
    def __init__(self, outdir, seconds, log):
        self.dir = outdir
        self.kernel = os.path.join(outdir, "vmlinuz")
        self.initrd = os.path.join(outdir, "initramfs.cpio.gz")
        self.seconds = seconds  # what build-guest.sh took, cached or not
        self.log = log  # its messages
        self.info = {}
        with open(os.path.join(outdir, "guest.info")) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                self.info[k] = v

    def cached(self):
        return "build-guest: cached:" in self.log


def ensure_guest(build_script, outdir, timeout=900):
    """Runs build-guest.sh OUTDIR (a no-op when its cache is valid); returns a Guest, or raises
    RuntimeError with the script's messages."""
    t0 = time.monotonic()
    p = subprocess.run([build_script, outdir], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    out = p.stdout.decode(errors="replace")
    if p.returncode != 0:
        raise RuntimeError("%s %s exited with status %d:\n%s"
                           % (build_script, outdir, p.returncode, out))
    return Guest(outdir, time.monotonic() - t0, out)


def guest_or_skip(build_script, outdir, qemu):
    """The start of every e2e script: the whole script skipped when qemu is not an executable,
    else SIM-19's first check, that build-guest.sh builds the guest; returns the Guest, or None
    once that check has failed (the plan printed: the script has nothing left to run)."""
    if not qemu or not os.access(qemu, os.X_OK):
        skip_all("qemu-system-x86_64 not found (scripts/deps.sh installs qemu-system-x86)")
    try:
        guest = ensure_guest(build_script, outdir)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as e:
        ok(False, "SIM-19: build-guest.sh builds the guest", e)
        plan()
        return None
    ok(True, "SIM-19: build-guest.sh builds the guest")
    note("guest %s: %s %s (kernel %s), %.1f s" % (
        "reused from the cache" if guest.cached() else "built", guest.info["kernel_package"],
        guest.info["kernel_version"], guest.info["kernel_release"], guest.seconds))
    return guest


def _newc_entry(name, mode, data, ino):
    fields = (ino, mode, 0, 0, 2 if stat.S_ISDIR(mode) else 1, 0, len(data), 0, 0, 0, 0,
              len(name) + 1, 0)
    head = b"070701" + b"".join(b"%08X" % v for v in fields) + name.encode() + b"\0"
    head += b"\0" * (-len(head) % 4)
    return head + data + b"\0" * (-len(data) % 4)


def initrd_with(base, files, out):
    """Writes to out the base initramfs followed by a gzip'd newc archive of files, a dict
    {guest path: bytes | str (file contents) | ("file", host path) | ("symlink", target)},
    each optionally as (content, mode). Parent directories are added; the kernel unpacks the
    archives in order, so these files win over the base's."""
    entries = []
    dirs = set()
    for path in sorted(files):
        spec = files[path]
        mode = None
        if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], int):
            spec, mode = spec
        rel = path.strip("/")
        parts = rel.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
        if isinstance(spec, tuple) and spec[0] == "symlink":
            entries.append((rel, stat.S_IFLNK | 0o777, spec[1].encode()))
            continue
        if isinstance(spec, tuple) and spec[0] == "file":
            with open(spec[1], "rb") as f:
                data = f.read()
            if mode is None:
                mode = os.stat(spec[1]).st_mode & 0o7777
        else:
            data = spec.encode() if isinstance(spec, str) else spec
        entries.append((rel, stat.S_IFREG | (0o644 if mode is None else mode), data))
    archive = b""
    ino = 1 << 20  # away from the base archive's inode numbers (hard links match on them)
    for d in sorted(dirs):
        archive += _newc_entry(d, stat.S_IFDIR | 0o755, b"", ino)
        ino += 1
    for rel, mode, data in entries:
        archive += _newc_entry(rel, mode, data, ino)
        ino += 1
    archive += _newc_entry("TRAILER!!!", 0, b"", 0)
    tmp = out + ".tmp"
    with open(tmp, "wb") as f:
        with open(base, "rb") as b:
            shutil.copyfileobj(b, f)
        f.write(gzip.compress(archive, mtime=0))
    os.rename(tmp, out)
    return out


# ---- QEMU -----------------------------------------------------------------------------------


def keyval(value):
    """VMM-2: commas doubled inside a keyval option's value."""
    return value.replace(",", ",,")


def qemu_argv(qemu, name, qmp_socket, agent_socket, console_log, kernel=False, initrd=False,
              append=None, vcpus=1, memory_mb=256, accel="tcg"):
    """VMM-1's argv for a VM without a GPU or disk (accel: "tcg" or "kvm"; "auto" is
    ["kvm", "tcg"] as a list). With kernel (and initrd) true, QEMU reads them from descriptors 3
    (and 4), as vgpud passes them (INST-6): start it with Qemu(..., passed=[kernel, initrd])."""
    accels = accel if isinstance(accel, list) else [accel]
    argv = [qemu, "-name", "guest=%s,debug-threads=on" % keyval(name), "-machine", "q35"]
    for a in accels:
        argv += ["-accel", a]
    argv += ["-cpu", "max", "-smp", str(vcpus), "-m", "%dM" % memory_mb, "-nodefaults",
             "-no-user-config", "-display", "none",
             "-chardev", "socket,id=qmp,path=%s,server=on,wait=off" % keyval(qmp_socket),
             "-mon", "chardev=qmp,mode=control",
             "-chardev", "socket,id=agent0,path=%s,server=on,wait=off" % keyval(agent_socket),
             "-device", "virtio-serial-pci,id=vser0",
             "-device", "virtserialport,bus=vser0.0,chardev=agent0,name=org.vgpud.agent.0",
             "-chardev", "file,id=console0,path=%s,append=on" % keyval(console_log),
             "-serial", "chardev:console0"]
    if kernel:
        argv += ["-kernel", "/proc/self/fd/3"]
        if initrd:
            argv += ["-initrd", "/proc/self/fd/4"]
        if append:
            argv += ["-append", append]
    return argv


class Qemu:
    """A QEMU process started as VMM-3 starts it: PATH only, its own session, stdin /dev/null,
    stdout and stderr appended to qemu_log, the passed files (paths, opened read-only, or open
    descriptors) at descriptors 3, 4, ..., nothing else. kill() signals its process group by
    id."""

    def __init__(self, argv, qemu_log, passed=()):
        self.argv = argv
        self.qemu_log = qemu_log
        opened = [os.open(p, os.O_RDONLY | os.O_CLOEXEC) for p in passed if isinstance(p, str)]
        it = iter(opened)
        fds = [p if isinstance(p, int) else next(it) for p in passed]
        targets = tuple(range(3, 3 + len(fds)))

        def place():
            # Every source above every target first, so that no dup2 overwrites one still due.
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 3 + len(fds)) for fd in fds]
            for target, fd in zip(targets, high):
                os.dup2(fd, target)

        try:
            with open(qemu_log, "ab") as log:
                self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=log,
                                             env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                                             start_new_session=True, close_fds=True,
                                             pass_fds=targets, preexec_fn=place if fds else None)
        finally:
            for fd in opened:
                os.close(fd)
        self.started = time.monotonic()

    @property
    def pid(self):
        return self.proc.pid

    def alive(self):
        return self.proc.poll() is None

    def wait(self, timeout):
        """The exit status, or None if it is still running after timeout seconds."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def kill(self):
        """SIGKILL to the process group (its own, from setsid), then reaps."""
        if self.proc.returncode is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait()

    def log_text(self):
        with open(self.qemu_log, errors="replace") as f:
            return f.read()


class QmpError(Exception):
    pass


class Qmp:
    """A QMP client: newline-delimited objects, events set aside (VMM-6)."""

    def __init__(self, sock):
        self.sock = sock
        self.buf = b""
        self.events = []

    @classmethod
    def connect(cls, path, timeout, alive=lambda: True):
        """Connects every 50 ms until timeout (VMM-5) or until alive() turns false."""
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
            try:
                s.connect(path)
                return cls(s)
            except (FileNotFoundError, ConnectionRefusedError):
                s.close()
                if time.monotonic() >= deadline or not alive():
                    raise
            time.sleep(0.05)

    def close(self):
        self.sock.close()

    def read_object(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise QmpError("no QMP object within %.1f s" % timeout)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                raise QmpError("QMP connection closed")
            self.buf += chunk
            if len(self.buf) > 1 << 20:
                raise QmpError("QMP object over 1 MiB")
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)

    def greeting(self, timeout=5):
        g = self.read_object(timeout)
        if not isinstance(g, dict) or "QMP" not in g:
            raise QmpError("not a QMP greeting: %r" % (g,))
        return g

    def command(self, name, arguments=None, timeout=10):
        """The reply object ({"return": ...} or {"error": ...}) to one command."""
        req = {"execute": name}
        if arguments is not None:
            req["arguments"] = arguments
        self.sock.sendall(json.dumps(req).encode() + b"\n")
        deadline = time.monotonic() + timeout
        while True:
            obj = self.read_object(max(0.0, deadline - time.monotonic()))
            if isinstance(obj, dict) and "event" in obj:
                self.events.append(obj)
                continue
            return obj

    def wait_event(self, name, timeout):
        """The first event called name (already received or arriving within timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            for e in self.events:
                if e.get("event") == name:
                    return e
            obj = self.read_object(max(0.0, deadline - time.monotonic()))
            if isinstance(obj, dict) and "event" in obj:
                self.events.append(obj)


# ---- the guest agent ------------------------------------------------------------------------


def agent_call(path, request, timeout):
    """One request line to a guest agent's socket (vgpud's agent.sock or QEMU's) and its
    reply, or None after timeout seconds of retrying (the agent starts with the guest)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
                c.settimeout(5)
                c.connect(path)
                c.sendall(json.dumps(request).encode() + b"\n")
                buf = b""
                while b"\n" not in buf:
                    chunk = c.recv(4096)
                    if not chunk:
                        break
                    buf += chunk
                if b"\n" in buf:
                    return json.loads(buf.split(b"\n", 1)[0])
        except (OSError, ValueError):
            pass
        time.sleep(1)
    return None


# ---- the console ----------------------------------------------------------------------------


def read_text(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def complete_lines(text):
    """text up to its last newline: a console's last line may still be being written, and a
    pattern such as "mac \\S+" would match the part of it that is there."""
    return text[:text.rfind("\n") + 1]


def wait_console(path, pattern, timeout, alive=lambda: True):
    """The first match of the regular expression pattern in the complete lines of the console
    log within timeout seconds (None if there is none, or once alive() is false and the log has
    no match; then its last line counts too, as nothing more will be written)."""
    rx = re.compile(pattern, re.M)
    deadline = time.monotonic() + timeout
    while True:
        running = alive()  # before the read, so the last read sees everything it wrote
        text = read_text(path)
        m = rx.search(complete_lines(text) if running else text)
        if m or not running or time.monotonic() >= deadline:
            return m
        time.sleep(0.05)


def vgpud_config(path, work, qemu, images, guest, boot_timeout, stop_timeout, nat=False):
    """vgpud's configuration on the simulator with the real QEMU under TCG, and boot files from
    images and the guest's own directory (INST-6's image_dirs). REL-9: these tests share the
    host's network namespace (their first run fetches the guest kernel), where no bridge, table
    or TAP may be made, so there is no NAT network and guests get no NIC; nat=True is for a test
    that has moved into a network namespace of its own (NET-11): the NAT network is there, and
    a create asks for it."""
    write_config(path, work, extra_top="""qemu_binary: "%s"
qemu_accel: tcg
image_dirs:
  - "%s"
  - "%s"
vmm:
  boot_timeout: %ds
  stop_timeout: %ds
network:
  default_mode: none
  nat:
    enabled: %s
""" % (qemu, images, os.path.realpath(guest.dir), boot_timeout, stop_timeout,
       "true" if nat else "false"))
    return path


def run_with_vgpud(prefix, qemu, guest, groups, prepare=None, boot_timeout=30, stop_timeout=30,
                   nat=False):
    """The frame of an e2e test against vgpud with the real QEMU: a work tree; its images
    directory holding the guest's kernel as vmlinuz (prepare(images) adds more); vgpud started
    (nat as vgpud_config() takes it); groups(c, d, work, images) runs the checks; what a failed
    check left (instances, volumes) is deleted before the daemon stops; and whatever happens, the
    daemons and every QEMU under the tree are killed and the tree removed. Returns the exit
    status."""
    work = tempfile.mkdtemp(prefix=prefix)
    if nat:
        os.chmod(work, 0o755)  # dnsmasq reads its files as nobody, as from /run/vgpud
    daemons = []
    links = set(os.listdir("/sys/class/net"))
    try:
        images = os.path.join(work, "images")
        os.mkdir(images)
        os.symlink(os.path.realpath(guest.kernel), os.path.join(images, "vmlinuz"))
        if prepare:
            prepare(images)
        secret = write_secret(work)
        config = vgpud_config(os.path.join(work, "vgpud.yaml"), work, qemu, images, guest,
                              boot_timeout, stop_timeout, nat)
        d, c = start(work, "e2e", config, secret, os.path.join(work, "api.sock"))
        daemons.append(d)
        if c:
            groups(c, d, work, images)
            for i in c.get("/instances").json():
                c.request("DELETE", "/instances/" + i["id"])
            for v in c.get("/volumes").json():
                c.request("DELETE", "/volumes/" + v["id"])
            stop(d)
        # REL-9: the host's network namespace is shared here, and left as it was found.
        eq(sorted(set(os.listdir("/sys/class/net")) - links), [],
           "REL-9: vgpud made no network device in the host's namespace")
    finally:
        for d in daemons:
            d.stop(signal.SIGKILL)
        kill_qemus(work)
        finish(daemons, work)
    return exit_status()


def tail(text, lines=40):
    return "\n".join(text.splitlines()[-lines:])


# ---- the run's QEMUs -------------------------------------------------------------------------


def qemu_processes():
    """{pid: argv} of every qemu-system process in /proc, zombies included (their argv is
    empty: the comm and state stand in). The PID namespace (SIM-21) has its own /proc, so
    these are this test's."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % name, "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0")[:-1]]
            if not argv:
                with open("/proc/%s/comm" % name) as f:
                    argv = ["%s (state %s)" % (f.read().strip(), proc_state(int(name)) or "?")]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if os.path.basename(argv[0]).startswith("qemu-system"):
            found[int(name)] = argv
    return found


def kill_qemus(work):
    """SIGKILL, by pid, every QEMU whose argv names a path under work: the VMMs of this test's
    daemon, should it leave any (a daemon stopped with SIGTERM leaves VMs running, OPS-3)."""
    for pid, argv in qemu_processes().items():
        if any(work in a for a in argv):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
