#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-volumes-hot.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU VGPUCTL
#
# DISK-8's attach and detach after create, through the real vgpud on a mounted vgpu-sim with
# fake-qemu as VMM: on a Stopped instance (the record only) and a Running one (QMP add-fd,
# blockdev-add, device_add on a free root port; device_del, DEVICE_DELETED, blockdev-del), every
# refusal of the two routes, a blockdev-add that QEMU refuses (rolled back), a device_add that
# QEMU refuses (its node taken back with blockdev-del), a guest that keeps the device (409
# busy, the attachment stays), and a restart with `attaching` and `detaching` intents in the
# records, settled both ways from query-block. Then OPS-7's disk commands of vgpuctl against
# the same daemon: an import followed to its end, volumes, attach-volume and detach-volume.
# Output is TAP; every check names the requirements it covers.
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    MNT, eq, error_of, exit_status, ok, poll, run_group, sim_ctl, start, stop, write_secret)
from vgpud_instances import (  # noqa: E402
    INSTANCES, QmpHold, body, console_text, create, delete, finish_run, guest_pids, local_images,
    make_images, post, record, request, vmm_config)

VOLUMES = os.path.join(MNT, "data", "volumes")
IMPORT = os.path.join(MNT, "data", "import")
VGPUCTL = sys.argv[5]


def volume_file(vid):
    return os.path.join(VOLUMES, vid, "volume.qcow2")


def create_volume(c, name, size_gb=1):
    st, v = request(c, "POST", "/volumes", {"name": name, "size_gb": size_gb})
    if not ok(st == 201, "DISK-7: volume %s is created" % name, (st, v)):
        raise RuntimeError("cannot create volume %s" % name)
    return v["id"]


def attach(c, iid, volume, **extra):
    return request(c, "POST", "/instances/%s/volumes" % iid, dict({"volume": volume}, **extra))


def detach(c, iid, volume):
    return request(c, "DELETE", "/instances/%s/volumes/%s" % (iid, volume))


def holds_file(name, path):
    """Whether the VMM of instance `name` holds path open."""
    for pid in guest_pids(name):
        try:
            for fd in os.listdir("/proc/%d/fd" % pid):
                try:
                    if os.readlink("/proc/%d/fd/%s" % (pid, fd)) == path:
                        return True
                except OSError:
                    pass
        except OSError:
            pass
    return False


def qmp_commands(c, iid):
    return re.findall(r"fake-qemu: qmp command (\S+)", console_text(c, iid))


def running(c, name):
    st, b = create(c, name)
    if not ok(st == 201 and b.get("state") == "Running", "%s is created and Running" % name,
              (st, b)):
        raise RuntimeError("cannot create %s" % name)
    return b["id"]


class Qmp(QmpHold):
    """The test's own QMP client, for what another QEMU user might do to the VM."""

    def command(self, execute, arguments=None):
        msg = {"execute": execute}
        if arguments is not None:
            msg["arguments"] = arguments
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        buf = b""
        while True:
            while b"\n" not in buf:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise RuntimeError("QMP closed")
                buf += chunk
            line, buf = buf.split(b"\n", 1)
            reply = json.loads(line)
            if "event" not in reply:
                return reply


def qmp_session(work, iid):
    q = Qmp(work, iid)
    q.command("qmp_capabilities")
    return q


# ---- the checks -----------------------------------------------------------------------------


def check_stopped(c):
    # DISK-8: on a Stopped instance the record is the attachment; the next start brings it.
    vid = create_volume(c, "cold-1")
    iid = running(c, "cold-a")
    eq(post(c, iid, "stop")[0], 200, "INST-15: the instance stops")
    st, b = attach(c, iid, "cold-1")
    ok(st == 200 and b.get("state") == "Stopped" and
       b.get("volumes") == [{"id": vid, "readonly": False, "state": "attached"}],
       "DISK-8, API-7: POST /instances/{id}/volumes on a Stopped instance attaches by name", (st, b))
    eq(record(iid).get("volumes"), b.get("volumes"), "DISK-8, INST-1: and the record says so")
    st, b = post(c, iid, "start")
    ok(st == 200 and holds_file("cold-a", volume_file(vid)),
       "DISK-8: the start gives the VMM the volume", (st, b))
    eq(post(c, iid, "stop")[0], 200, "INST-15: the instance stops again")
    st, b = detach(c, iid, vid)
    ok(st == 200 and b.get("volumes") in (None, []),
       "DISK-8: DELETE /instances/{id}/volumes/{volume} on a Stopped instance detaches", (st, b))
    ok(not record(iid).get("volumes"), "DISK-8, INST-1: and the record no longer names it",
       record(iid))
    delete(c, iid)
    eq(c.request("DELETE", "/volumes/" + vid).status, 204, "DISK-7: the volume is deleted")


def check_running(c, work):
    vid = create_volume(c, "hot-1")
    iid = running(c, "hot-a")
    st, b = attach(c, iid, "hot-1")
    ok(st == 200 and b.get("volumes") == [{"id": vid, "readonly": False, "state": "attached"}],
       "DISK-8, API-7: POST /instances/{id}/volumes on a Running instance attaches", (st, b))
    eq(record(iid).get("volumes"), [{"id": vid, "readonly": False, "state": "attached"}],
       "DISK-8, INST-1: the record says attached")
    cmds = qmp_commands(c, iid)
    eq([x for x in cmds if x in ("query-pci", "add-fd", "blockdev-add", "device_add")][-4:],
       ["query-pci", "add-fd", "blockdev-add", "device_add"],
       "DISK-8: the attach is query-pci, add-fd, blockdev-add, device_add on a free port")
    ok(holds_file("hot-a", volume_file(vid)), "DISK-8: the VMM holds the volume's file")
    q = qmp_session(work, iid)
    try:
        blocks = q.command("query-block")["return"]
    finally:
        q.close()
    mine = [x for x in blocks if x["inserted"]["node-name"] == "vol-" + vid]
    ok(len(mine) == 1 and mine[0]["qdev"] == "/machine/peripheral/vol-%s/virtio-backend" % vid
       and not mine[0]["inserted"]["ro"],
       "DISK-8, DISK-9: QEMU shows the node read-write under the device vol-<id>", blocks)
    eq(c.get("/volumes/" + vid).json().get("attachments"), [{"instance": iid, "readonly": False}],
       "DISK-7: attachments come from the records")

    # Refusals of the two routes.
    st, e = attach(c, iid, vid)
    ok(st == 409 and e.get("code") == "invalid_state" and "already attached" in e.get("message"),
       "DISK-8: attaching a volume twice is 409 invalid_state", (st, e))
    other = running(c, "hot-b")
    for ro in (False, True):
        st, e = attach(c, other, vid, readonly=ro)
        ok(st == 409 and e.get("code") == "invalid_state" and iid in e.get("message", ""),
           "DISK-8: a second holder (readonly=%s) is 409 invalid_state naming the holder" % ro,
           (st, e))
    st, e = attach(c, other, "nope")
    ok(st == 404 and e.get("code") == "not_found" and "volume nope not found" in e["message"],
       "DISK-8: an unknown volume is 404 not_found", (st, e))
    st, e = attach(c, "a" * 20, vid)
    ok(st == 404 and e.get("code") == "not_found", "DISK-8: an unknown instance is 404", (st, e))
    st, e = attach(c, "short", vid)
    ok(st == 400 and e.get("code") == "invalid_id", "INST-3: a malformed instance id is 400",
       (st, e))
    for label, bad in (("a missing volume", {}), ("an unknown key", {"volume": vid, "x": 1}),
                       ("a readonly that is no boolean", {"volume": vid, "readonly": "yes"}),
                       ("a volume that is no string", {"volume": 7})):
        st, e = request(c, "POST", "/instances/%s/volumes" % other, bad)
        ok(st == 400 and e.get("code") == "invalid_request",
           "DISK-8, API-9: %s is 400 invalid_request" % label, (st, e))
    st, e = detach(c, other, vid)
    ok(st == 404 and e.get("code") == "not_found" and "not attached" in e.get("message", ""),
       "DISK-8: detaching a volume that is not attached is 404", (st, e))
    st, e = detach(c, other, "nope")
    ok(st == 404 and e.get("code") == "not_found", "DISK-8: detaching an unknown volume is 404",
       (st, e))
    r = c.request("DELETE", "/volumes/" + vid)
    ok(r.status == 409 and iid in error_of(r)[1].get("message", ""),
       "DISK-7: a hot-attached volume cannot be deleted", error_of(r))

    # Read-only holders may be many.
    ro = create_volume(c, "hot-ro")
    for k in (iid, other):
        st, b = attach(c, k, ro, readonly=True)
        ok(st == 200 and {"id": ro, "readonly": True, "state": "attached"} in b.get("volumes"),
           "DISK-8: a read-only attachment, one of many", (st, b))
    q = qmp_session(work, other)
    try:
        blocks = q.command("query-block")["return"]
    finally:
        q.close()
    ok(any(x["inserted"]["node-name"] == "vol-" + ro and x["inserted"]["ro"] for x in blocks),
       "DISK-8, DISK-9: a read-only attachment is a read-only node", blocks)

    # Detach, by id and by name.
    st, b = detach(c, iid, vid)
    ok(st == 200 and b.get("volumes") == [{"id": ro, "readonly": True, "state": "attached"}],
       "DISK-8: DELETE /instances/{id}/volumes/{volume} on a Running instance detaches", (st, b))
    cmds = [x for x in qmp_commands(c, iid)
            if x in ("query-block", "device_del", "blockdev-del")][-3:]
    eq(cmds, ["query-block", "device_del", "blockdev-del"],
       "DISK-8: the detach is query-block, device_del, DEVICE_DELETED, blockdev-del")
    ok(poll(lambda: not holds_file("hot-a", volume_file(vid)), 5),
       "DISK-8: the VMM no longer holds the volume's file")
    eq(attach(c, other, vid)[0], 200, "DISK-8: the volume goes to another running instance")
    st, b = detach(c, other, "hot-1")
    eq(st, 200, "DISK-8: a detach names the volume by name too")
    for k in (iid, other):
        eq(detach(c, k, ro)[0], 200, "DISK-8: a read-only attachment is detached")

    # A QEMU that refuses blockdev-add: nothing is attached, the record has no trace.
    path = volume_file(vid)
    with open(path, "r+b") as f:
        magic = f.read(4)
        f.seek(0)
        f.write(b"XXXX")
    try:
        st, e = attach(c, iid, vid)
    finally:
        with open(path, "r+b") as f:
            f.write(magic)
    ok(st == 500 and "qmp blockdev-add: GenericError: Image is not in qcow2 format" in
       e.get("message", ""), "DISK-8: a blockdev-add QEMU refuses fails the attach", (st, e))
    ok(not record(iid).get("volumes") and not c.get("/instances/" + iid).json().get("volumes"),
       "DISK-8, INST-14: and the attaching intent is rolled back", record(iid))

    # A device_add QEMU refuses: a device of that id exists already (another QMP user put it
    # there). blockdev-del takes the node back, and the record keeps nothing.
    eq(attach(c, iid, ro, readonly=True)[0], 200, "DISK-8: a volume to borrow an fd set from")
    q = qmp_session(work, iid)
    try:
        fdset = [x["inserted"]["file"] for x in q.command("query-block")["return"]
                 if x["inserted"]["node-name"] == "vol-" + ro]
        added = q.command("blockdev-add", {
            "driver": "raw", "node-name": "decoy", "read-only": True,
            "file": {"driver": "file", "filename": fdset[0]}})
        dev = q.command("device_add", {"driver": "virtio-blk-pci", "bus": "hp7",
                                       "id": "vol-" + vid, "drive": "decoy"})
    finally:
        q.close()
    ok("return" in added and "return" in dev, "a decoy device takes the id vol-<id>",
       (added, dev))
    st, e = attach(c, iid, vid)
    ok(st == 500 and "qmp device_add: GenericError: Duplicate device ID" in e.get("message", ""),
       "DISK-8: a device_add QEMU refuses fails the attach", (st, e))
    cmds = [x for x in qmp_commands(c, iid) if x in ("device_add", "blockdev-del")][-2:]
    eq(cmds, ["device_add", "blockdev-del"], "DISK-8: and blockdev-del takes the node back")
    eq(record(iid).get("volumes"), [{"id": ro, "readonly": True, "state": "attached"}],
       "DISK-8, INST-14: the record keeps no trace of it")
    q = qmp_session(work, iid)
    try:
        gone = q.command("blockdev-del", {"node-name": "vol-" + vid})
    finally:
        q.close()
    ok("error" in gone and "Failed to find node" in gone["error"]["desc"],
       "DISK-8: QEMU holds no vol-<id> node", gone)
    delete(c, iid)
    delete(c, other)

    # A QMP session that fails (another client holds QEMU's one QMP connection, so vgpud's gets
    # no greeting): what QEMU did is unknown, so the record keeps the intent, which holds the
    # volume, until a reconcile pass settles it from query-block.
    iid = running(c, "hot-q")
    hold = QmpHold(work, iid)
    try:
        st, e = attach(c, iid, vid)
    finally:
        hold.close()
    ok(st == 500 and "QMP greeting not received" in e.get("message", ""),
       "DISK-8: an attach whose QMP session fails is 500 with the reason", (st, e))
    eq(record(iid).get("volumes"), [{"id": vid, "readonly": False, "state": "attaching"}],
       "DISK-8: and the attaching intent stays in the record")
    ok(poll(lambda: not c.get("/instances/" + iid).json().get("volumes"), 20, 0.2),
       "DISK-8: a reconcile pass settles it: no device in QEMU, so the intent goes",
       c.get("/instances/" + iid).json())
    ok(poll(lambda: not record(iid).get("volumes"), 5), "DISK-8, INST-1: on disk too",
       record(iid))
    delete(c, iid)

    # A guest that keeps the device: 409 busy after vmm.device_release_timeout (1s here), the
    # attachment stays.
    iid = running(c, "hot-c")
    eq(attach(c, iid, vid)[0], 200, "DISK-8: attached for the busy detach")
    sim_ctl("qemu hot-c hold-devices")
    st, e = detach(c, iid, vid)
    ok(st == 409 and e.get("code") == "busy" and
       "the guest did not release the device within 1s" in e.get("message", ""),
       "DISK-8: a guest that does not release the device is 409 busy with the reason", (st, e))
    eq(record(iid).get("volumes"), [{"id": vid, "readonly": False, "state": "attached"}],
       "DISK-8: and the attachment stays, in the record")
    eq(c.get("/instances/" + iid).json().get("volumes"),
       [{"id": vid, "readonly": False, "state": "attached"}], "DISK-8, API-7: and in the API")
    delete(c, iid)
    eq(c.request("DELETE", "/volumes/" + vid).status, 204, "DISK-7: the volume is deleted")
    eq(c.request("DELETE", "/volumes/" + ro).status, 204, "DISK-7: the other volume is deleted")


def check_resources(c):
    # DISK-10: /resources says what data_dir holds: the stores' counts as they are, the byte
    # figures as the storage stage sampled them.
    vid = create_volume(c, "counted")
    iid = running(c, "counted-a")
    s = c.get("/resources").json().get("storage", {})
    eq(sorted(s), ["data_dir_free_bytes", "images", "instances_disk_bytes", "volumes"],
       "DISK-10: GET /resources has storage with its four figures")
    eq((s.get("images"), s.get("volumes")),
       (len(c.get("/images").json()), len(c.get("/volumes").json())),
       "DISK-10: storage.images and storage.volumes count the stores")
    free = os.statvfs(os.path.join(MNT, "data"))
    ok(isinstance(s.get("data_dir_free_bytes"), int) and s["data_dir_free_bytes"] > 0 and
       abs(s["data_dir_free_bytes"] - free.f_bavail * free.f_frsize) < (1 << 30),
       "DISK-10: storage.data_dir_free_bytes is data_dir's free space", (s, free))
    # The console log of the running instance is among its files; a pass (5 s) samples it.
    ok(poll(lambda: (c.get("/resources").json()["storage"].get("instances_disk_bytes") or 0) > 0,
            15), "DISK-10: storage.instances_disk_bytes counts the instances' files",
       c.get("/resources").json())
    delete(c, iid)
    eq(c.request("DELETE", "/volumes/" + vid).status, 204, "DISK-7: the volume is deleted")
    eq(c.get("/resources").json()["storage"].get("volumes"), len(c.get("/volumes").json()),
       "DISK-10: storage.volumes follows a delete at once")


def vgpuctl(work, c, *args):
    p = subprocess.run([VGPUCTL, "--unix", os.path.join(work, "api.sock"), "--token", c.token]
                       + list(args), capture_output=True, text=True, timeout=120)
    return p.returncode, p.stdout, p.stderr


def check_vgpuctl(c, work):
    # OPS-7: the disk commands against the real daemon.
    source = os.path.join(IMPORT, "ctl.raw")
    with open(source, "wb") as f:
        f.write(b"vgpuctl-image" * (1 << 18))
    rc, out, err = vgpuctl(work, c, "images", "import", "ctl-img", "--source", source)
    ok(rc == 0 and re.search(r"^state +ready$", out, re.M),
       "OPS-7, DISK-2: vgpuctl images import follows the import to ready", (rc, out, err))
    ok(all(re.fullmatch(r"importing ctl-img: \d+%", x) for x in out.splitlines()
           if x.startswith("importing")),
       "OPS-7: off a terminal, progress comes as plain lines", out)
    rc, out, _ = vgpuctl(work, c, "images", "list")
    ok(rc == 0 and re.search(r"^ctl-img +ready +raw ", out, re.M),
       "OPS-7: vgpuctl images list shows it", out)
    rc, out, err = vgpuctl(work, c, "images", "import", "ctl-img", "--source", source)
    ok(rc == 1 and "error: " in err and "(HTTP 409)" in err,
       "OPS-7, OPS-8: a second import of the name is an API error, exit 1", (rc, err))
    rc, out, err = vgpuctl(work, c, "images", "import", "ctl-bad", "--source", "/nope/x.raw")
    ok(rc == 1 and "error: import failed: source /nope/x.raw: not under image_dirs" in err,
       "OPS-7, OPS-8: an import that fails is exit 1 with the reason", (rc, err))
    vgpuctl(work, c, "images", "delete", "ctl-bad")
    rc, out, err = vgpuctl(work, c, "volumes", "create", "--name", "ctl-vol", "--size-gb", "1")
    m = re.search(r"^id +([a-z0-9]{20})$", out, re.M)
    ok(rc == 0 and m, "OPS-7, DISK-7: vgpuctl volumes create", (rc, out, err))
    if not m:
        return
    vid = m.group(1)
    iid = running(c, "ctl-a")
    rc, out, err = vgpuctl(work, c, "instances", "attach-volume", iid, "--volume", "ctl-vol")
    ok(rc == 0 and record(iid).get("volumes") ==
       [{"id": vid, "readonly": False, "state": "attached"}],
       "OPS-7, DISK-8: vgpuctl instances attach-volume", (rc, out, err))
    rc, out, _ = vgpuctl(work, c, "volumes", "list")
    ok(rc == 0 and re.search(r"^%s +ctl-vol +1 GiB +%s " % (vid, iid), out, re.M),
       "OPS-7: vgpuctl volumes list names the holder", out)
    rc, out, err = vgpuctl(work, c, "volumes", "delete", vid)
    ok(rc == 1 and "invalid_state" in err, "OPS-8: deleting a held volume is exit 1", err)
    rc, out, err = vgpuctl(work, c, "instances", "detach-volume", iid, "--volume", vid)
    ok(rc == 0 and not record(iid).get("volumes"), "OPS-7, DISK-8: vgpuctl instances "
       "detach-volume", (rc, out, err))
    delete(c, iid)
    rc, out, err = vgpuctl(work, c, "volumes", "delete", vid)
    eq((rc, out), (0, "deleted volume %s\n" % vid), "OPS-7: vgpuctl volumes delete")
    rc, out, err = vgpuctl(work, c, "images", "delete", "ctl-img")
    eq((rc, out), (0, "deleted image ctl-img\n"), "OPS-7: vgpuctl images delete")


def edit_volumes(iid, volumes):
    path = os.path.join(INSTANCES, iid, "instance.json")
    rec = record(iid)
    rec["volumes"] = volumes
    with open(path + ".new", "w") as f:
        json.dump(rec, f)
    os.rename(path + ".new", path)


def check_restart(work, config, secret, sock, daemons):
    # DISK-8: intents a crash left in the record are settled at start-up from query-block: a
    # node a guest device holds is attached, whatever the intent; one it does not is dropped.
    d, c = start(work, "restart-1", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    vids = [create_volume(c, "cut-%d" % k) for k in range(4)]
    iid = running(c, "cut-a")
    for v in vids[:2]:
        eq(attach(c, iid, v)[0], 200, "DISK-8: attached before the crash")
    d.stop(signal.SIGKILL)
    # attaching and detaching with a device in QEMU; attaching and detaching without one.
    edit_volumes(iid, [{"id": vids[0], "readonly": False, "state": "attaching"},
                       {"id": vids[1], "readonly": False, "state": "detaching"},
                       {"id": vids[2], "readonly": False, "state": "attaching"},
                       {"id": vids[3], "readonly": False, "state": "detaching"}])
    d2, c2 = start(work, "restart-2", config, secret, sock)
    daemons.append(d2)
    if not c2:
        return
    want = [{"id": v, "readonly": False, "state": "attached"} for v in vids[:2]]
    ok(poll(lambda: c2.get("/instances/" + iid).json().get("volumes") == want, 10),
       "DISK-8: after a restart, intents with a device in QEMU settle as attached, the others go",
       c2.get("/instances/" + iid).json())
    ok(poll(lambda: record(iid).get("volumes") == want, 5),
       "DISK-8, INST-1: and the record says so", record(iid))
    eq(detach(c2, iid, vids[0])[0], 200, "DISK-8: a settled volume detaches")
    eq(attach(c2, iid, vids[2])[0], 200, "DISK-8: a dropped one attaches again")
    delete(c2, iid)
    for v in vids:
        c2.request("DELETE", "/volumes/" + v)
    stop(d2, " (after the restart)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-volumes-")
    daemons = []
    try:
        make_images()
        os.makedirs(local_images(work), exist_ok=True)
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work,
                            extra_vmm="  device_release_timeout: 1s\n")
        sock = os.path.join(work, "api.sock")
        d, c = start(work, "main", config, secret, sock)
        daemons.append(d)
        if c:
            run_group("stopped", lambda: check_stopped(c))
            run_group("running", lambda: check_running(c, work))
            run_group("resources", lambda: check_resources(c))
            run_group("vgpuctl", lambda: check_vgpuctl(c, work))
            stop(d)
        run_group("restart", lambda: check_restart(work, config, secret, sock, daemons))
    finally:
        finish_run(daemons, work)
        shutil.rmtree(VOLUMES, ignore_errors=True)
        os.makedirs(VOLUMES, exist_ok=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
