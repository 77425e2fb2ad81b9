#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-hostile.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# What an attacker with an API token and a local shell tries, against the real vgpud on a
# mounted vgpu-sim (SIM-20's host) with fake-qemu as its VMM (SIM-15), in run-sim-test.sh's
# private PID namespace (SIM-21):
#  - boot paths (INST-6): a typed path outside image_dirs that links in; a link swapped for one
#    that points out while the create waits on a slow configure; the VMM must hold the file that
#    was checked and nothing outside image_dirs (its /proc/<pid>/fd), and the next start refuses
#    the link;
#  - boot.disk (DISK-6): QEMU's descriptor of it is read-only (/proc/<pid>/fdinfo);
#  - records that name other processes (VMM-16, INST-2a): a Stopped and a Deleting record whose
#    pid, start time and boot id are an unrelated live process's (a sleep of the test), and a
#    record whose QMP socket is a listener the test owns; vgpud must signal, adopt and connect
#    to none of them;
#  - FIFOs in place of files vgpud reads (INST-2a): console.log, qemu.log and instance.json;
#    each read fails at once with a message, and /healthz, creates and reconcile passes go on.
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    MNT, eq, error_of, exit_status, log_count, ok, poll, run_group, sim_ctl, sim_state, start,
    stop, timed_get, write_secret)
from vgpud_instances import (  # noqa: E402
    INSTANCES, PROFILE, body, create, delete, delete_all, finish_run, local_images, make_images,
    pid_of, post, record, request, vmm_config)

GOOD = "the kernel that was checked\n"
SECRET = "a host file no guest may read\n"


def proc_fds(pid):
    """{fd number: link target} of a process."""
    out = {}
    d = "/proc/%d/fd" % pid
    for n in os.listdir(d):
        try:
            out[int(n)] = os.readlink(os.path.join(d, n))
        except OSError:
            pass
    return out


def fd_flags(pid, fd):
    with open("/proc/%d/fdinfo/%d" % (pid, fd)) as f:
        for line in f:
            if line.startswith("flags:"):
                return int(line.split()[1], 8)
    return None


def proc_start_time(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(") ", 1)[1].split()[19])


def boot_id():
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


# ---- boot paths (INST-6) and boot.disk (DISK-6) ---------------------------------------------


def check_typed_path(c, work):
    # INST-6 (revised): the path as written must lie under image_dirs; a link from outside that
    # resolves inside used to pass.
    outside = os.path.join(work, "x")
    os.makedirs(outside, exist_ok=True)
    link = os.path.join(outside, "k")
    os.symlink(os.path.join(local_images(work), "vmlinuz-good"), link)
    st, b = create(c, "link-in", boot={"kernel": link})
    ok(st == 400 and b.get("code") == "invalid_request" and
       b.get("message") == "boot.kernel %s: not under image_dirs" % link,
       "INST-6: a typed path outside image_dirs that links in is 400", (st, b))


def check_swap_after_validation(c, work, d):
    # INST-6: the check opens the files and QEMU gets those descriptors. A configure held by
    # the simulator leaves a wide window after the check; the link is swapped to a host file
    # in it. The VMM must hold the file that was checked, and nothing outside image_dirs.
    images = local_images(work)
    link = os.path.join(images, "swap-me")
    secret = os.path.join(work, "secret")
    with open(secret, "w") as f:
        f.write(SECRET)
    os.symlink(os.path.join(images, "vmlinuz-good"), link)
    sim_ctl("fault write sys/*/nvidia/current_vgpu_type delay:3000 count=1")
    res = {}
    t = threading.Thread(target=lambda: res.update(
        r=create(c, "swapped", PROFILE, boot={"kernel": link, "cmdline": "console=ttyS0"},
                 # No NIC: the kernel is then the first passed descriptor (NET-3 takes 3).
                 network={"mode": "none"})))
    t.start()
    held = poll(lambda: sim_state()["operations_delayed"] >= 1, 15, 0.02)
    ok(held, "SIM: the configure write is held (the window after the check)")
    os.unlink(link)
    os.symlink(secret, link)
    t.join(60)
    st, b = res.get("r", (None, None))
    if not ok(st == 201 and b.get("state") == "Running",
              "INST-6: the create with the swapped link still completes", (st, b)):
        return
    iid = b["id"]
    pid = pid_of(iid)
    fds = proc_fds(pid) if pid else {}
    eq(fds.get(3), os.path.realpath(os.path.join(images, "vmlinuz-good")),
       "INST-6, VMM-3: the VMM holds the checked kernel at descriptor 3")
    eq([p for p in fds.values() if p.startswith(os.path.realpath(work)) and
         not p.startswith(os.path.realpath(images)) and "/data/" not in p and "/run/" not in p],
       [], "INST-6: the VMM holds no file outside image_dirs (%s)" % sorted(fds.items()))
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        argv = f.read().split(b"\0")
    ok(b"/proc/self/fd/3" in argv and link.encode() not in argv,
       "INST-6, VMM-1: QEMU is given /proc/self/fd/3, never the path", argv)

    # Every start has the same race: the start's own check now sees the link point out.
    st, _ = post(c, iid, "stop")
    eq(st, 200, "INST-15: stop the swapped instance")
    st, b = post(c, iid, "start")
    ok(st == 400 and b.get("message") == "boot.kernel %s: not under image_dirs" % link,
       "INST-6: the next start refuses the link that now points out", (st, b))
    eq(delete(c, iid)[0], 204, "INST-18: delete it")
    os.unlink(link)


def check_disk_read_only(c, work):
    # DISK-6: boot.disk goes to QEMU read-only, by descriptor, in an -add-fd set.
    disk = os.path.join(local_images(work), "disk.raw")
    with open(disk, "wb") as f:
        f.truncate(1 << 20)
    st, b = create(c, "ro-disk", boot={"kernel": os.path.join(local_images(work), "vmlinuz-good"),
                                       "disk": disk})
    if not ok(st == 201, "DISK-6: create with boot.disk", (st, b)):
        return
    pid = pid_of(b["id"])
    fds = proc_fds(pid)
    n = [k for k, p in fds.items() if p == os.path.realpath(disk)]
    ok(n and all(fd_flags(pid, k) & 3 == os.O_RDONLY for k in n),
       "DISK-6: the VMM's descriptor of boot.disk is O_RDONLY",
       {k: oct(fd_flags(pid, k)) for k in n})
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        argv = [a.decode() for a in f.read().split(b"\0")]
    # The -blockdev is QEMU's JSON form; its file is the fd set -add-fd fills.
    nodes = [json.loads(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a == "-blockdev"]
    sets = ["/dev/fdset/" + argv[i + 1].split("set=")[1] for i, a in enumerate(argv[:-1])
            if a == "-add-fd"]
    ok(len(nodes) == 1 and nodes[0].get("read-only") is True
       and nodes[0].get("file", {}).get("filename") in sets,
       "DISK-6, VMM-1: an -add-fd set and a read-only -blockdev", argv)
    eq(delete(c, b["id"])[0], 204, "INST-18: delete it")


# ---- records that name other processes (VMM-16, INST-2a) -------------------------------------


def write_record(work, iid, name, state, hypervisor):
    d = os.path.join(INSTANCES, iid)
    os.makedirs(d, mode=0o700)
    rec = {"version": 1, "id": iid, "name": name, "state": state,
           "created_at": "2026-09-02T20:08:03Z",
           "boot": {"kernel": os.path.join(local_images(work), "vmlinuz-good")},
           "vcpus": 1, "memory_mb": 256, "hypervisor": hypervisor}
    with open(os.path.join(d, "instance.json"), "w") as f:
        json.dump(rec, f)


def sockets(work, iid):
    base = os.path.join(work, "run", "instances", iid)
    return {"qmp_socket": base + "/qmp.sock", "agent_socket": base + "/agent.sock"}


STOPPED_OTHER = "hostilestopped000001"
DELETING_OTHER = "hostiledeleting00002"
LISTENER = "hostilelistener00003"


def plant_records(work, sleeps, listener_path):
    bid = boot_id()
    for iid, name, state, p in ((STOPPED_OTHER, "other-stopped", "Stopped", sleeps[0]),
                                (DELETING_OTHER, "other-deleting", "Deleting", sleeps[1])):
        hv = {"pid": p.pid, "start_time": proc_start_time(p.pid), "boot_id": bid}
        hv.update(sockets(work, iid))
        write_record(work, iid, name, state, hv)
    hv = sockets(work, LISTENER)
    hv["qmp_socket"] = listener_path
    write_record(work, LISTENER, "other-listener", "Running", hv)


def check_other_processes(c, d, work, sleeps, listener):
    # VMM-16: the pid, start time and boot id match, the executable is not qemu_binary: the pid
    # names no VMM of ours. Nothing listens on the derived socket: provably gone.
    for p in sleeps:
        ok(p.poll() is None, "VMM-16: the unrelated process %d is alive after start-up" % p.pid)
    eq(log_count(d, r"<5>signalled VMM .*"), 0, "VMM-16: vgpud signalled no process")
    s = c.get("/instances/" + STOPPED_OTHER).json()
    ok(s["state"] == "Stopped" and "hypervisor" not in (record(STOPPED_OTHER) or {}),
       "VMM-16, INST-21: the Stopped record is handled as provably gone (hypervisor cleared)",
       (s, record(STOPPED_OTHER)))
    ok(poll(lambda: c.get("/instances/" + DELETING_OTHER).status == 404, 15),
       "VMM-16, INST-21: the Deleting record's delete completes as provably gone")
    ok(log_count(d, r"<[4-7]>.*pid %d is another program.*" % sleeps[0].pid) >= 1,
       "VMM-16: the log says why the pid was discarded")

    # INST-2a: a socket path that is not the derived one makes the record unreadable (INST-22);
    # the listener is neither adopted, connected to, nor signalled.
    reason = c.get("/resources").json()["gpu"].get("placement_disabled_reason", "")
    ok(re.search(r"instance record \S+/instances/%s unreadable: .*hypervisor\.qmp_socket .* is "
                 r"not " % LISTENER, reason),
       "INST-2a, INST-22: the record naming another listener is unreadable", reason)
    eq(c.get("/instances/" + LISTENER).status, 404, "INST-22: and is no instance")
    listener.settimeout(0.2)
    try:
        conn, _ = listener.accept()
        conn.close()
        connected = True
    except socket.timeout:
        connected = False
    ok(not connected, "INST-2a: vgpud never connected to the test's listener")
    for p in sleeps:
        ok(p.poll() is None, "VMM-16: the unrelated process %d survives the passes" % p.pid)


# ---- FIFOs where vgpud reads (INST-2a) ---------------------------------------------------------


def fifo_in_place(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.mkfifo(path, 0o600)


def passes(d):
    """Reconcile passes finished so far (REC-1), aborted ones included."""
    return log_count(d, r"<7>reconcile pass done .*")


def check_fifos(c, d, work, data):
    instances = os.path.join(data, "instances")
    kernel = os.path.join(local_images(work), "vmlinuz-good")
    st, b = create(c, "fifo-console", boot={"kernel": kernel})
    if not ok(st == 201, "INST-12: create an instance for the FIFO checks", (st, b)):
        return
    iid = b["id"]

    # console.log: six reads, each answered at once, none holding a disk worker.
    fifo_in_place(os.path.join(instances, iid, "console.log"))
    answers = [timed_get(c, "/instances/%s/console" % iid, 5) for _ in range(6)]
    # Bounded by the client's timeout, not timed: a read stuck on the FIFO never answers.
    ok(all(a[0] == 500 for a in answers),
       "INST-2a: a FIFO console.log fails each read at once (500)", answers)
    r = c.get("/instances/%s/console" % iid)
    eq(error_of(r)[1].get("message"),
       "open console log of instance %s: not a regular file" % iid,
       "INST-2a: the message says what is wrong")
    eq(c.get("/healthz", token=None).status, 200, "INST-2a: /healthz answers meanwhile")
    st, other = create(c, "fifo-bystander", boot={"kernel": kernel})
    eq(st, 201, "INST-2a: creates go on meanwhile")

    # qemu.log: the spawn's append-open of a FIFO fails the start at once, not a worker's life.
    eq(post(c, iid, "stop")[0], 200, "INST-15: stop it")
    fifo_in_place(os.path.join(instances, iid, "qemu.log"))
    st, b = post(c, iid, "start")
    ok(st == 500 and b.get("message", "").endswith("open qemu.log: not a regular file"),
       "INST-2a: a FIFO qemu.log fails the start with a message", (st, b))
    eq(c.get("/instances/" + iid).json()["state"], "Stopped", "INST-17: the start ends Stopped")

    # instance.json: the pass that finds it says so, the next passes still run.
    fid = "fifo0000000000000009"
    os.makedirs(os.path.join(instances, fid), mode=0o700)
    before = passes(d)
    fifo_in_place(os.path.join(instances, fid, "instance.json"))
    ok(poll(lambda: "%s unreadable: read instances/%s/instance.json: not a regular file"
            % (fid, fid) in c.get("/resources").json()["gpu"].get(
                "placement_disabled_reason", ""), 20),
       "INST-2a, INST-22: a FIFO instance.json is an unreadable record with a message")
    ok(poll(lambda: passes(d) >= before + 2, 30),
       "INST-2a, REC-1: reconcile passes go on (two more ran)")
    eq(c.get("/healthz", token=None).status, 200, "INST-2a: /healthz answers")
    os.unlink(os.path.join(instances, fid, "instance.json"))
    os.rmdir(os.path.join(instances, fid))
    ok(poll(lambda: "placement_disabled_reason" not in c.get("/resources").json()["gpu"], 30),
       "INST-22: placement comes back once the FIFO is gone")
    for i in (iid, other.get("id")):
        if i:
            delete(c, i)


def main():
    work = tempfile.mkdtemp(prefix="vgpud-hostile-")
    daemons, sleeps = [], []
    listener = None
    try:
        make_images()
        images = local_images(work)
        os.makedirs(images)
        with open(os.path.join(images, "vmlinuz-good"), "w") as f:
            f.write(GOOD)
        secret = write_secret(work)
        sock = os.path.join(work, "api.sock")
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work)

        # Records planted before the daemon starts, as a local user with write access would.
        sleeps = [subprocess.Popen(["sleep", "1000"]) for _ in range(2)]
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener_path = os.path.join(work, "listener.sock")
        listener.bind(listener_path)
        listener.listen(4)
        plant_records(work, sleeps, listener_path)

        d, c = start(work, "hostile", config, secret, sock)
        daemons.append(d)
        if c:
            run_group("records naming other processes",
                      lambda: check_other_processes(c, d, work, sleeps, listener))
            # The unreadable record is the test's to remove (INST-22); placement comes back.
            shutil.rmtree(os.path.join(INSTANCES, LISTENER))
            ok(poll(lambda: "placement_disabled_reason" not in gpu_of(c), 30),
               "INST-22: placement comes back once the record is removed")
            run_group("typed path", lambda: check_typed_path(c, work))
            run_group("swap after validation", lambda: check_swap_after_validation(c, work, d))
            run_group("boot.disk read-only", lambda: check_disk_read_only(c, work))
            eq(delete_all(c), [], "INST-18: nothing is left")
            stop(d)

        # FIFOs: the simulator's data/ cannot hold one, so this daemon keeps its data locally.
        data = os.path.join(work, "local-data")
        os.makedirs(data)
        config2 = os.path.join(work, "vgpud-local.yaml")
        with open(config) as f:
            text = f.read()
        with open(config2, "w") as f:
            f.write(re.sub(r'(?m)^data_dir: .*$', 'data_dir: "%s"' % data, text))
        d2, c2 = start(work, "hostile-fifo", config2, secret, sock)
        daemons.append(d2)
        if c2:
            run_group("FIFOs", lambda: check_fifos(c2, d2, work, data))
            eq(delete_all(c2), [], "INST-18: nothing is left")
            stop(d2)
    finally:
        for p in sleeps:
            p.kill()
            p.wait()
        if listener:
            listener.close()
        finish_run(daemons, work)
    return exit_status()


def gpu_of(c):
    return c.get("/resources").json()["gpu"]


if __name__ == "__main__":
    sys.exit(main())
