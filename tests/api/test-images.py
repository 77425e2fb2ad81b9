#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-images.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# The image store, root disks and volumes through the real vgpud on a mounted vgpu-sim, whose
# data/ holds data_dir, with fake-qemu as VMM (SPEC §19): POST /images to `ready`, the reads,
# DELETE, every refusal of the routes, root overlays and volumes attached at create, REL-12's
# hostile images (built here with the real qemu-img), faults on data_dir through the
# simulator's fault mechanism (ENOSPC and EIO), a crashing qemu-img, and a restart during an
# import. Output is TAP; every check names the requirements it covers.
import hashlib
import json
import os
import re
import signal
import stat
import subprocess
import sys
import shutil
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    MNT, eq, error_of, exit_status, metric, ok, parse_metrics, poll, run_group, sim_ctl, start,
    stop, write_secret)
from vgpud_instances import (  # noqa: E402
    IMAGES, INSTANCES, delete, finish_run, guest_pids, local_images, make_images, post, request,
    vmm_config)

QEMU_IMG = "/usr/bin/qemu-img"
STORE = os.path.join(MNT, "data", "images")
MAX_IMAGE_SIZE = 1 << 30  # storage.max_image_size in this run
MAX_DISK_GB = 8  # storage.max_disk_gb in this run


def qemu_img(*args):
    # LUKS times its key derivation by CPU usage, which a loaded machine can fail to measure
    # ("Unable to get accurate CPU usage"): such a create is tried again, a few times at most.
    for _ in range(5):
        p = subprocess.run((QEMU_IMG,) + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if p.returncode == 0:
            return
        if b"accurate CPU usage" not in p.stdout:
            break
    raise RuntimeError("qemu-img %s: %s" % (" ".join(args), p.stdout.decode(errors="replace")))


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def raw_image(path, size=4 << 20, fill=b"vgpud-image-data"):
    with open(path, "wb") as f:
        f.write((fill * (size // len(fill) + 1))[:size])
    return path


def import_image(c, name, source, **extra):
    r = c.request("POST", "/images", dict({"name": name, "source": source}, **extra))
    return r, (r.json() if r.status == 202 else error_of(r)[1])


def settled(c, name, timeout=60):
    """The image once it is no longer importing (or as last read)."""
    def now():
        r = c.get("/images/" + name)
        return r.json() if r.status == 200 else {}
    poll(lambda: now().get("state") not in (None, "importing"), timeout, 0.05)
    return now()


def delete_image(c, name):
    return c.request("DELETE", "/images/" + name)


# ---- the checks -----------------------------------------------------------------------------


def check_routes(c):
    # API-2, DISK-2: an empty store lists nothing.
    eq(c.get("/images").json(), [], "DISK-2: GET /images of an empty store is []")

    source = raw_image(os.path.join(IMAGES, "base.raw"))
    digest = sha256_of(source)
    r, b = import_image(c, "base", source, sha256=digest)
    ok(r.status == 202 and b.get("state") == "importing" and b.get("name") == "base",
       "DISK-2: POST /images answers 202 with the image importing", b)
    ok(isinstance(b.get("progress"), (int, float)) and 0 <= b["progress"] <= 1,
       "DISK-2: an importing image shows progress in 0..1", b)
    on_disk = json.load(open(os.path.join(STORE, "base", "image.json")))
    ok(on_disk.get("state") in ("importing", "ready"),
       "DISK-1: image.json exists when the 202 is sent", on_disk)

    i = settled(c, "base")
    eq(i.get("state"), "ready", "DISK-2, DISK-3: the import ends ready")
    eq(i.get("format"), "raw", "DISK-2: format is the source's")
    eq(i.get("sha256"), digest, "DISK-2, DISK-3: sha256 is the source's as read")
    eq(i.get("virtual_size_bytes"), 4 << 20, "DISK-2: virtual_size_bytes")
    ok(i.get("actual_size_bytes", 0) > 0, "DISK-2: actual_size_bytes", i)
    eq(i.get("instances"), 0, "DISK-2: no instance uses it")
    ok("progress" not in i and "error" not in i, "DISK-2: no progress or error once ready", i)

    disk = os.path.join(STORE, "base", "disk.qcow2")
    st = os.stat(disk)
    eq(stat.S_IMODE(st.st_mode), 0o444, "DISK-1: disk.qcow2 is mode 0444 once ready")
    info = json.loads(subprocess.run([QEMU_IMG, "info", "--output=json", "-f", "qcow2", disk],
                                     check=True, capture_output=True).stdout)
    ok(info["format"] == "qcow2" and "backing-filename" not in info,
       "DISK-3: the store holds a qcow2 without a backing file", info)
    same = subprocess.run([QEMU_IMG, "compare", "-q", "-f", "raw", "-F", "qcow2", source, disk])
    eq(same.returncode, 0, "DISK-3: the converted image holds the source's bytes")
    disk_record = json.load(open(os.path.join(STORE, "base", "image.json")))
    eq(disk_record.get("state"), "ready", "DISK-1: image.json says ready")

    # A qcow2 source, listed sorted by name.
    q = os.path.join(IMAGES, "alpha.qcow2")
    qemu_img("create", "-q", "-f", "qcow2", q, "8M")
    r, _ = import_image(c, "alpha", q)
    eq(settled(c, "alpha").get("format"), "qcow2", "DISK-3: a qcow2 source imports")
    eq([x["name"] for x in c.get("/images").json()], ["alpha", "base"],
       "DISK-2: GET /images is sorted by name")

    # API-2, DISK-4: delete through .deleted-<name>.
    eq(delete_image(c, "alpha").status, 204, "DISK-4: DELETE /images/{name} answers 204")
    ok(not os.path.exists(os.path.join(STORE, "alpha")) and
       not any(n.startswith(".deleted-") for n in os.listdir(STORE)),
       "DISK-4: the image's directory is gone", os.listdir(STORE))
    eq(c.get("/images/alpha").status, 404, "DISK-4: a deleted image is 404")


def check_refusals(c):
    source = raw_image(os.path.join(IMAGES, "r.raw"))
    cases = [
        ("INST-4: a name with upper case", {"name": "Bad", "source": source}, "name"),
        ("DISK-2: a relative source", {"name": "rel", "source": "r.raw"}, "source"),
        ("DISK-2: a source with ..", {"name": "dots", "source": IMAGES + "/../import/r.raw"},
         "source"),
        ("DISK-2: a short sha256", {"name": "sha", "source": source, "sha256": "abc"}, "sha256"),
        ("DISK-2: an upper-case sha256", {"name": "sha", "source": source, "sha256": "A" * 64},
         "sha256"),
        ("API-9: an unknown key", {"name": "uk", "source": source, "colour": "blue"}, "colour"),
        ("DISK-2: no source", {"name": "nosrc"}, "source"),
        ("DISK-2: a numeric name", {"name": 7, "source": source}, "name"),
    ]
    for label, body, field in cases:
        r = c.request("POST", "/images", body)
        e = error_of(r)
        ok(r.status == 400 and e[1].get("code") == "invalid_request" and
           field in e[1].get("message", ""), label + " is 400 invalid_request naming " + field, e)
        ok(not os.path.exists(os.path.join(STORE, str(body.get("name")))),
           label + ": nothing is written", os.listdir(STORE))

    for path, status in (("/images/NOPE", 400), ("/images/nope", 404)):
        eq(c.get(path).status, status, "API-2: GET %s is %d" % (path, status))
        eq(delete_image(c, path.split("/")[-1]).status, status,
           "API-2: DELETE %s is %d" % (path, status))
    eq(c.request("PUT", "/images").status, 405, "API-3: PUT /images is 405")

    # DISK-2: the name is unique.
    import_image(c, "taken", source)
    settled(c, "taken")
    r, e = import_image(c, "taken", source)
    ok(r.status == 409 and e.get("code") == "already_exists",
       "DISK-2: a second import of a name is 409 already_exists", e)

    # DISK-2, DISK-4: while an import runs (its write held by the simulator), the name is busy
    # and the image cannot be deleted; once released the import completes.
    sim_ctl("fault write data/images/held/disk.qcow2.tmp hang")
    try:
        r, b = import_image(c, "held", source)
        eq(r.status, 202, "DISK-2: the held import is accepted")
        r, e = import_image(c, "held", source)
        ok(r.status == 409 and e.get("code") == "busy" and "being imported" in e["message"],
           "DISK-2: an import of a name being imported is 409 busy", e)
        r = delete_image(c, "held")
        e = error_of(r)[1]
        ok(r.status == 409 and e.get("code") == "invalid_state",
           "DISK-4: DELETE of an importing image is 409 invalid_state", e)
    finally:
        sim_ctl("clear-faults")
    eq(settled(c, "held").get("state"), "ready", "DISK-2: the held import then completes")
    for name in ("taken", "held"):
        delete_image(c, name)


HOST_SECRET = b"HOST-SECRET-" + os.urandom(12).hex().encode() + b"-END"


def hostile_sources(work):
    """REL-12's images, built with the real qemu-img: (name, path, reason in the error)."""
    local = local_images(work)
    host_file = os.path.join(work, "host-secret.raw")
    with open(host_file, "wb") as f:
        f.write(HOST_SECRET * 4096)
    out = []

    def qcow2(name, *opts, size="4M"):
        path = os.path.join(IMAGES, name)
        qemu_img("create", "-q", "-f", "qcow2", *opts, path, size)
        return path

    out.append(("backing-abs", qcow2("abs.qcow2", "-b", host_file, "-F", "raw"),
                'image has a backing file "%s"' % host_file))
    shutil_copy = os.path.join(IMAGES, "host-secret.raw")
    raw_image(shutil_copy, 4096)
    out.append(("backing-rel", qcow2("rel.qcow2", "-b", "host-secret.raw", "-F", "raw"),
                'image has a backing file "host-secret.raw"'))
    js = 'json:{"driver": "raw", "file": {"driver": "file", "filename": "%s"}}' % host_file
    out.append(("backing-json", qcow2("json.qcow2", "-u", "-b", js, "-F", "raw"),
                "image has a backing file \"json:"))
    out.append(("data-file", qcow2("df.qcow2", "-o", "data_file=%s,data_file_raw=on" % host_file),
                'image has an external data file "%s"' % host_file))
    out.append(("encrypted", qcow2("enc.qcow2", "--object", "secret,id=s0,data=pw", "-o",
                                   "encrypt.format=luks,encrypt.key-secret=s0"),
                "image is encrypted"))
    out.append(("oversize", qcow2("big.qcow2", size="2G"),
                "image virtual size 2147483648 bytes exceeds storage.max_image_size"))
    for fmt in ("vmdk", "vpc"):
        path = os.path.join(IMAGES, "a." + fmt)
        qemu_img("create", "-q", "-f", fmt, path, "4M")
        out.append((fmt, path, "image format %s is not accepted: only raw and qcow2" % fmt))
    luks = os.path.join(IMAGES, "a.luks")
    qemu_img("create", "-q", "-f", "luks", "--object", "secret,id=s0,data=pw", "-o",
             "key-secret=s0", luks, "4M")
    out.append(("luks", luks, "image format luks is not accepted: only raw and qcow2"))
    cut = os.path.join(IMAGES, "cut.qcow2")
    with open(qcow2("whole.qcow2"), "rb") as f:
        head = f.read(100)
    with open(cut, "wb") as f:
        f.write(head)
    out.append(("truncated", cut, "qemu-img info exited with status 1"))
    fifo = os.path.join(local, "fifo")
    os.mkfifo(fifo)
    out.append(("fifo", fifo, "source %s: not a regular file" % fifo))
    link = os.path.join(IMAGES, "link")
    os.symlink(host_file, link)
    out.append(("symlink", link, "source %s: not under image_dirs" % link))
    out.append(("outside", host_file, "source %s: not under image_dirs" % host_file))
    return out


def check_hostile(c, work):
    # REL-12, DISK-3: each hostile image is refused with a message naming why.
    for name, path, why in hostile_sources(work):
        r, b = import_image(c, name, path)
        eq(r.status, 202, "REL-12: %s is accepted for import" % name)
        i = settled(c, name)
        ok(i.get("state") == "failed" and why in i.get("error", ""),
           "REL-12, DISK-3: %s is refused: %s" % (name, why), i)
        d = os.path.join(STORE, name)
        ok(not os.path.exists(os.path.join(d, "disk.qcow2")) and
           not os.path.exists(os.path.join(d, "disk.qcow2.tmp")),
           "DISK-3: %s leaves no disk file" % name, os.listdir(d) if os.path.isdir(d) else d)

    # DISK-3: a sha256 mismatch fails the import and deletes the partial file.
    source = raw_image(os.path.join(IMAGES, "sha.raw"))
    r, b = import_image(c, "mismatch", source, sha256="0" * 64)
    i = settled(c, "mismatch")
    ok(i.get("state") == "failed" and i.get("error", "").startswith(
        "sha256 mismatch: expected " + "0" * 64 + ", source has " + sha256_of(source)),
       "REL-12, DISK-3: a sha256 mismatch fails the import", i)
    ok(not os.path.exists(os.path.join(STORE, "mismatch", "disk.qcow2")),
       "DISK-3: the mismatch leaves no disk file")

    # REL-12: the host file's bytes appear nowhere under data_dir.
    found = []
    for root, _, files in os.walk(os.path.join(MNT, "data")):
        for f in files:
            p = os.path.join(root, f)
            if os.path.islink(p) or not os.path.isfile(p):
                continue
            with open(p, "rb") as fh:
                if HOST_SECRET in fh.read():
                    found.append(p)
    found = [p for p in found if not p.startswith(IMAGES)]  # the relative backing's own copy
    eq(found, [], "REL-12: the host file's bytes appear nowhere under data_dir")

    # DISK-4: failed images are deleted like any other.
    for name, _, _ in hostile_sources_names():
        delete_image(c, name)
    delete_image(c, "mismatch")


def hostile_sources_names():
    return [(n, None, None) for n in ("backing-abs", "backing-rel", "backing-json", "data-file",
                                      "encrypted", "oversize", "vmdk", "vpc", "luks",
                                      "truncated", "fifo", "symlink", "outside")]


def check_faults(c):
    source = raw_image(os.path.join(IMAGES, "f.raw"))
    # DISK-3, DISK-10: ENOSPC while qemu-img writes the store fails the import, without a file.
    sim_ctl("fault write data/images/full/disk.qcow2.tmp ENOSPC")
    try:
        r, _ = import_image(c, "full", source)
        i = settled(c, "full")
    finally:
        sim_ctl("clear-faults")
    ok(i.get("state") == "failed" and "No space left on device" in i.get("error", ""),
       "DISK-3, DISK-10: ENOSPC on the store fails the import with the reason", i)
    ok(not os.path.exists(os.path.join(STORE, "full", "disk.qcow2.tmp")),
       "DISK-3: ENOSPC leaves no partial file")
    delete_image(c, "full")

    # DISK-1: EIO writing image.json answers 500 and keeps nothing.
    sim_ctl("fault write data/images/eio/image.json.tmp EIO count=1")
    try:
        r, e = import_image(c, "eio", source)
    finally:
        sim_ctl("clear-faults")
    ok(r.status == 500 and "image.json" in e.get("message", ""),
       "DISK-1: EIO on image.json is 500 naming the file", e)
    ok(not os.path.exists(os.path.join(STORE, "eio")) and c.get("/images/eio").status == 404,
       "DISK-1: the failed import leaves no directory and no image")

    # DISK-3: EIO on the fsync of the converted file fails the import.
    sim_ctl("fault fsync data/images/sync/disk.qcow2.tmp EIO")
    try:
        r, _ = import_image(c, "sync", source)
        i = settled(c, "sync")
    finally:
        sim_ctl("clear-faults")
    ok(i.get("state") == "failed" and "disk.qcow2.tmp" in i.get("error", ""),
       "DISK-3: EIO on the fsync of the converted file fails the import", i)
    ok(not os.path.exists(os.path.join(STORE, "sync", "disk.qcow2")) and
       not os.path.exists(os.path.join(STORE, "sync", "disk.qcow2.tmp")),
       "DISK-3: and leaves no disk file")
    delete_image(c, "sync")


def image_body(name, image, **extra):
    return dict({"name": name, "vcpus": 1, "memory_mb": 256, "image": image}, **extra)


def overlay_of(iid):
    return os.path.join(INSTANCES, iid, "root.qcow2")


def cmdline_of(name):
    pids = guest_pids(name)
    if not pids:
        return []
    with open("/proc/%d/cmdline" % pids[0], "rb") as f:
        return [a.decode() for a in f.read().split(b"\0")]


def check_root_disks(c, d):
    source = raw_image(os.path.join(IMAGES, "root.raw"))
    import_image(c, "root", source)
    eq(settled(c, "root").get("state"), "ready", "DISK-5: the image is ready")
    disk = os.path.join(STORE, "root", "disk.qcow2")
    before = sha256_of(disk)

    # DISK-5, INST-12: a create with an image gets its own overlay and boots from it.
    st, a = request(c, "POST", "/instances", image_body("disk-a", "root"))
    ok(st == 201 and a.get("state") == "Running", "DISK-5: a create with an image is Running",
       (st, a))
    if st != 201:
        return
    eq(a.get("disk"), {"image": "root", "size_gb": 1},
       "DISK-5, API-7: the instance shows its root disk, the image's size rounded up to 1 GiB")
    info = json.loads(subprocess.run([QEMU_IMG, "info", "--output=json", "-f", "qcow2",
                                      overlay_of(a["id"])], check=True,
                                     capture_output=True).stdout)
    ok(info.get("full-backing-filename") == disk and info.get("backing-filename-format") == "qcow2"
       and info.get("virtual-size") == 1 << 30,
       "DISK-5: root.qcow2 backs onto the image by absolute path with its format named", info)
    argv = cmdline_of("disk-a")
    blockdevs = [json.loads(argv[k + 1]) for k, x in enumerate(argv) if x == "-blockdev"]
    ok(any(b.get("node-name") == "root" and b.get("driver") == "qcow2" and
           b.get("discard") == "unmap" for b in blockdevs) and
       "virtio-blk-pci,drive=root,bootindex=1" in argv,
       "DISK-9, VMM-1: the VMM gets the overlay as a qcow2 node, boot index 1", argv)
    rec = json.load(open(os.path.join(INSTANCES, a["id"], "instance.json")))
    eq(rec.get("disk"), {"image": "root", "size_gb": 1}, "INST-2: the record keeps disk")
    ok("boot" not in rec, "DISK-5: an instance with an image needs no boot", rec)

    # DISK-5: a second instance has an overlay of its own; the image is never written.
    st, b = request(c, "POST", "/instances", image_body("disk-b", "root", disk_gb=2))
    ok(st == 201 and b.get("disk", {}).get("size_gb") == 2, "DISK-5: disk_gb sizes the overlay",
       (st, b))
    ok(os.path.exists(overlay_of(a["id"])) and os.path.exists(overlay_of(b["id"])) and
       not os.path.samefile(overlay_of(a["id"]), overlay_of(b["id"])),
       "DISK-5: two instances from one image have separate overlays")
    # DISK-5, PERF-7: the first overlay of a size left a template beside the image; an overlay
    # copied from it is byte for byte what qemu-img makes, and qemu-img finds it sound.
    template = os.path.join(STORE, "root", "overlay-%d.qcow2" % (1 << 30))
    ok(os.path.isfile(template) and os.path.isfile(
        os.path.join(STORE, "root", "overlay-%d.qcow2" % (2 << 30))),
       "DISK-5: each size's first overlay is kept as a template beside the image",
       os.listdir(os.path.join(STORE, "root")))
    st, k = request(c, "POST", "/instances", image_body("disk-c", "root"))
    ok(st == 201 and k.get("state") == "Running", "DISK-5: a create from the template is Running",
       (st, k))
    fresh = os.path.join(IMAGES, "fresh.qcow2")
    subprocess.run([QEMU_IMG, "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", disk, fresh,
                    str(1 << 30)], check=True)
    try:
        with open(fresh, "rb") as f, open(overlay_of(k["id"]), "rb") as g:
            ok(f.read() == g.read(), "DISK-5: the copied overlay equals qemu-img create's output")
    finally:
        os.unlink(fresh)
    eq(subprocess.run([QEMU_IMG, "check", "-q", "-f", "qcow2", overlay_of(k["id"])]).returncode,
       0, "DISK-5: qemu-img check finds the copied overlay sound")
    eq(c.get("/images/root").json().get("instances"), 3, "DISK-2: instances counts its users")

    # DISK-4: the image cannot go while a record uses it.
    r = delete_image(c, "root")
    e = error_of(r)[1]
    ok(r.status == 409 and e.get("code") == "invalid_state" and
       "root disk of 3 instances" in e.get("message", ""),
       "DISK-4: DELETE of an image in use is 409 invalid_state", e)

    # DISK-5: stop and start keep the overlay.
    inode = os.stat(overlay_of(a["id"])).st_ino
    eq(post(c, a["id"], "stop")[0], 200, "INST-12: the instance stops")
    eq(post(c, a["id"], "start")[0], 200, "INST-12: and starts again")
    eq(os.stat(overlay_of(a["id"])).st_ino, inode, "DISK-5: the overlay survives stop and start")

    # The `instance running` line names each step's time, the overlay's among them.
    line = [l for l in d.log_text().splitlines()
            if "instance running" in l and "instance_id=" + a["id"] in l]
    step = r"=\d+(\.\d+)?(ns|us|ms|s) "
    ok(line and re.search(r'steps="[^"]*\bwrite_creating' + step + "root_overlay" + step +
                          "seed" + step + "claim" + step + "tap" + step + "spawn" + step +
                          r'wait_ready=\d+(\.\d+)?(ns|us|ms|s)"', line[-1]),
       "OPS-4, GEN-12: `instance running` logs each step's time in order", line)

    # DISK-5, INST-21: a record whose overlay was never made (a create cut short by a crash
    # between its record and its overlay ends Failed without one) gets it at its next start.
    eq(post(c, a["id"], "stop")[0], 200, "INST-12: the instance stops again")
    os.unlink(overlay_of(a["id"]))
    st, again = post(c, a["id"], "start")
    ok(st == 200 and again.get("state") == "Running" and os.path.isfile(overlay_of(a["id"])),
       "DISK-5: a start without root.qcow2 makes it from the image and runs", (st, again))
    ok(poll(lambda: "root disk missing at start; made a new one instance_id=" + a["id"] in
            d.log_text(), 5), "DISK-5: and says so in the log", d.log_text()[-600:])

    # DISK-5: refusals of a create.
    for label, body, code, text in (
            ("an unknown image", image_body("bad-1", "nope"), 400, "image nope not found"),
            ("disk_gb over storage.max_disk_gb", image_body("bad-2", "root", disk_gb=9), 400,
             "disk_gb must be 1..%d" % MAX_DISK_GB)):
        st, e = request(c, "POST", "/instances", body)
        ok(st == code and text in e.get("message", ""), "DISK-5: %s is %d" % (label, code),
           (st, e))

    # DISK-5: the overlay goes with the instance; then the image may go.
    for i in (a, b, k):
        eq(delete(c, i["id"])[0], 204, "INST-20: the instance is deleted")
        ok(not os.path.exists(os.path.join(INSTANCES, i["id"])),
           "DISK-5: its overlay is deleted with it")
    eq(sha256_of(disk), before, "DISK-5: the image's digest is unchanged after both ran")
    eq(c.get("/images/root").json().get("instances"), 0, "DISK-2: no users left")

    # DISK-5, INST-12, DISK-10: ENOSPC or EIO making the overlay fails the create before the
    # claim, and the record and every file go.
    for fault, what in (("write data/instances/*/root.qcow2.tmp ENOSPC", "ENOSPC in qemu-img"),
                        ("write data/instances/*/root.qcow2.tmp ENOSPC", "ENOSPC in a copy"),
                        ("fsync data/instances/*/root.qcow2.tmp EIO", "EIO on its fsync")):
        sim_ctl("fault " + fault)
        if "qemu-img" in what:  # no template: qemu-img writes the overlay
            os.rename(template, template + ".away")
        try:
            st, e = request(c, "POST", "/instances", image_body("faulty", "root"))
        finally:
            sim_ctl("clear-faults")
            if "qemu-img" in what:
                os.rename(template + ".away", template)
        ok(st == 500 and "create root disk" in e.get("message", ""),
           "DISK-5: %s on the overlay fails the create with 500" % what, (st, e))
        ok(not any(x["name"] == "faulty" for x in c.get("/instances").json()) and
           not [d for d in os.listdir(INSTANCES) if not d.startswith(".")],
           "INST-12: and leaves no record and no overlay", os.listdir(INSTANCES))
    eq(delete_image(c, "root").status, 204, "DISK-4: an image no record uses is deleted")


def create_volume(c, name, size_gb=1):
    r = c.request("POST", "/volumes", {"name": name, "size_gb": size_gb})
    return r.status, (r.json() if r.status == 201 else error_of(r)[1])


def volume_file(vid):
    return os.path.join(MNT, "data", "volumes", vid, "volume.qcow2")


def check_volumes(c):
    # DISK-7: create, list, get.
    eq(c.get("/volumes").json(), [], "DISK-7: GET /volumes of none is []")
    st, v = create_volume(c, "data-1", 2)
    ok(st == 201 and v.get("name") == "data-1" and v.get("size_gb") == 2 and
       v.get("attachments") == [] and len(v.get("id", "")) == 20,
       "DISK-7: POST /volumes answers 201 with the volume", (st, v))
    if st != 201:
        return
    vid = v["id"]
    info = json.loads(subprocess.run([QEMU_IMG, "info", "--output=json", "-f", "qcow2",
                                      volume_file(vid)], check=True,
                                     capture_output=True).stdout)
    eq(info.get("virtual-size"), 2 << 30, "DISK-7: volume.qcow2 is a qcow2 of size_gb GiB")
    rec = json.load(open(os.path.join(MNT, "data", "volumes", vid, "volume.json")))
    eq((rec.get("id"), rec.get("name"), rec.get("size_gb")), (vid, "data-1", 2),
       "DISK-7: volume.json holds it")
    eq(c.get("/volumes/" + vid).json().get("name"), "data-1", "DISK-7: GET /volumes/{id}")
    eq([x["id"] for x in c.get("/volumes").json()], [vid], "DISK-7: GET /volumes lists it")

    # DISK-7: refusals.
    for label, body, status, code in (
            ("a duplicate name", {"name": "data-1", "size_gb": 1}, 409, "already_exists"),
            ("size_gb 0", {"name": "z", "size_gb": 0}, 400, "invalid_request"),
            ("size_gb over storage.max_disk_gb", {"name": "z", "size_gb": MAX_DISK_GB + 1}, 400,
             "invalid_request"),
            ("a bad name", {"name": "Z", "size_gb": 1}, 400, "invalid_request"),
            ("an unknown key", {"name": "z", "size_gb": 1, "x": 1}, 400, "invalid_request")):
        r = c.request("POST", "/volumes", body)
        e = error_of(r)[1]
        ok(r.status == status and e.get("code") == code,
           "DISK-7: %s is %d %s" % (label, status, code), e)
    eq(c.get("/volumes/short").status, 400, "INST-3: a malformed volume id is 400")
    eq(c.get("/volumes/" + "a" * 20).status, 404, "DISK-7: an unknown volume id is 404")

    # DISK-8: attach at create, read-write; a second read-write or read-only holder is 409.
    source = raw_image(os.path.join(IMAGES, "vol-root.raw"))
    import_image(c, "volroot", source)
    settled(c, "volroot")
    st, a = request(c, "POST", "/instances",
                    image_body("vol-a", "volroot", volumes=[{"volume": "data-1"}]))
    ok(st == 201 and a.get("volumes") == [{"id": vid, "readonly": False, "state": "attached"}],
       "DISK-8, API-7: a create attaches a volume by name, read-write", (st, a))
    if st != 201:
        return
    argv = cmdline_of("vol-a")
    ok("virtio-blk-pci,bus=hp0,drive=vol-%s,serial=%s" % (vid, vid) in argv,
       "DISK-8: the VMM gets the volume as a virtio disk with its id as serial, on hotplug "
       "port hp0", argv)
    eq(c.get("/volumes/" + vid).json().get("attachments"),
       [{"instance": a["id"], "readonly": False}], "DISK-7: attachments come from the records")
    fams = parse_metrics(c.get("/metrics").body.decode())
    eq((metric(fams, "vgpud_volumes", attached="true"), metric(fams, "vgpud_volumes",
                                                              attached="false")), (1.0, 0.0),
       "DISK-10: vgpud_volumes counts the volume as attached")
    eq(metric(fams, "vgpud_images", state="ready"),
       float(len([i for i in c.get("/images").json() if i["state"] == "ready"])),
       "DISK-10: vgpud_images counts the ready images")
    ok((metric(fams, "vgpud_storage_free_bytes") or 0) > 0,
       "DISK-10: vgpud_storage_free_bytes is data_dir's free space",
       metric(fams, "vgpud_storage_free_bytes"))
    for label, ro in (("read-write", False), ("read-only", True)):
        st, e = request(c, "POST", "/instances",
                        image_body("vol-b", "volroot", volumes=[{"volume": vid, "readonly": ro}]))
        ok(st == 409 and e.get("code") == "invalid_state" and a["id"] in e.get("message", ""),
           "DISK-8: a second %s holder is 409 invalid_state naming the holder" % label, (st, e))
    r = c.request("DELETE", "/volumes/" + vid)
    e = error_of(r)[1]
    ok(r.status == 409 and e.get("code") == "invalid_state" and a["id"] in e.get("message", ""),
       "DISK-7: DELETE of an attached volume is 409 invalid_state naming the instance", e)
    for label, vols, text in (("an unknown volume", [{"volume": "nope"}], "volume nope not found"),
                              ("nine volumes", [{"volume": "v%d" % k} for k in range(9)],
                               "volumes must hold at most 8")):
        st, e = request(c, "POST", "/instances", image_body("vol-c", "volroot", volumes=vols))
        ok(st == 400 and text in e.get("message", ""), "DISK-8: %s is 400" % label, (st, e))

    # DISK-7: the volume survives its instance and goes to another one, read-only by many.
    eq(delete(c, a["id"])[0], 204, "INST-20: the instance is deleted")
    ok(os.path.exists(volume_file(vid)), "DISK-7: the volume survives its instance's deletion")
    ids = []
    for k in range(2):
        st, b = request(c, "POST", "/instances",
                        image_body("vol-ro-%d" % k, "volroot",
                                   volumes=[{"volume": vid, "readonly": True}]))
        ok(st == 201, "DISK-8: read-only holder %d is created" % k, (st, b))
        if st == 201:
            ids.append(b["id"])
            argv = cmdline_of("vol-ro-%d" % k)
            node = [json.loads(argv[i + 1]) for i, x in enumerate(argv) if x == "-blockdev"]
            ok(any(n.get("node-name") == "vol-" + vid and n.get("read-only") for n in node),
               "DISK-8: a read-only attachment is a read-only node", node)
    st, e = request(c, "POST", "/instances",
                    image_body("vol-rw", "volroot", volumes=[{"volume": vid}]))
    ok(st == 409 and e.get("code") == "invalid_state",
       "DISK-8: read-write while read-only holders exist is 409", (st, e))
    for iid in ids:
        delete(c, iid)
    eq(c.request("DELETE", "/volumes/" + vid).status, 204, "DISK-7: DELETE /volumes/{id} is 204")
    ok(not os.path.exists(os.path.join(MNT, "data", "volumes", vid)),
       "DISK-7: the volume's directory is gone")

    # DISK-7, DISK-10: ENOSPC creating the file answers 500 and keeps nothing.
    sim_ctl("fault write data/volumes/*/volume.qcow2 ENOSPC")
    try:
        st, e = create_volume(c, "full", 1)
    finally:
        sim_ctl("clear-faults")
    ok(st == 500 and "No space left on device" in e.get("message", ""),
       "DISK-7, DISK-10: ENOSPC creating a volume is 500 with the reason", (st, e))
    eq([d for d in os.listdir(os.path.join(MNT, "data", "volumes"))], [],
       "DISK-7: and leaves no directory")
    delete_image(c, "volroot")


def storage_failures(c):
    fams = parse_metrics(c.get("/metrics").body.decode())
    return metric(fams, "vgpud_instances_vgpu_reconcile_failures_total", stage="storage") or 0


def check_storage_stage(c, d):
    # DISK-11: a volume directory without volume.json (a create a crash cut short) goes once it
    # is 5 minutes old; a younger one may be a create in flight and stays; a directory the stage
    # cannot delete counts against stage="storage".
    volumes = os.path.join(MNT, "data", "volumes")
    old, young, stuck = "o" * 20, "y" * 20, "s" * 20
    for name in (old, young, stuck):
        os.makedirs(os.path.join(volumes, name), exist_ok=True)
        with open(os.path.join(volumes, name, "volume.qcow2"), "w") as f:
            f.write("half-made")
    ten_minutes_ago = time.time() - 600
    for name in (old, stuck):
        os.utime(os.path.join(volumes, name), (ten_minutes_ago, ten_minutes_ago))
    before = storage_failures(c)
    sim_ctl("fault open data/volumes/%s EIO" % stuck)
    try:
        ok(poll(lambda: not os.path.exists(os.path.join(volumes, old)), 30, 0.2),
           "DISK-11: a volume directory no record names, 5 minutes old, is removed by a pass")
        ok(poll(lambda: storage_failures(c) > before, 30, 0.2),
           "DISK-11, MET-2: a directory the stage cannot delete counts against "
           "stage=\"storage\"", storage_failures(c))
        ok("reconcile stage failed stage=storage" in d.log_text(),
           "DISK-11: and logs the stage's failure")
    finally:
        sim_ctl("clear-faults")
    ok(os.path.exists(os.path.join(volumes, young)),
       "DISK-11: a younger one may be a create in flight and stays")
    ok(poll(lambda: not os.path.exists(os.path.join(volumes, stuck)), 30, 0.2),
       "DISK-11: the failed one goes on a later pass")
    shutil.rmtree(os.path.join(volumes, young))


def check_crashing_qemu_img(work, secret, sock, daemons):
    # DISK-3: a qemu-img that crashes fails the import and names the signal
    # (storage.qemu_img_binary points at it).
    script = os.path.join(work, "qemu-img-crash")
    with open(script, "w") as f:
        f.write("#!/bin/sh\nkill -SEGV $$\n")
    os.chmod(script, 0o755)
    config = vmm_config(os.path.join(work, "crash.yaml"), work,
                        extra_vmm="storage:\n  qemu_img_binary: \"%s\"\n" % script)
    d, c = start(work, "crash", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    source = raw_image(os.path.join(IMAGES, "c.raw"))
    import_image(c, "crashes", source)
    i = settled(c, "crashes")
    ok(i.get("state") == "failed" and i.get("error") == "qemu-img info killed by signal 11",
       "DISK-3: a crashing qemu-img fails the import naming the signal", i)
    delete_image(c, "crashes")
    stop(d, " (crashing qemu-img)")


def check_space_floor(work, secret, sock, daemons):
    # DISK-10: with storage.min_free above what the filesystem has free, an import, a volume
    # create and a create with an image are refused 409 insufficient_resources, and nothing is
    # written. A ready image is put in the store by hand for the create to name.
    d = os.path.join(STORE, "floor")
    os.makedirs(d)
    qemu_img("create", "-q", "-f", "qcow2", os.path.join(d, "disk.qcow2"), "4M")
    with open(os.path.join(d, "image.json"), "w") as f:
        json.dump({"version": 1, "name": "floor", "state": "ready", "source": "/srv/floor.raw",
                   "format": "raw", "created_at": "2026-01-02T03:04:05Z",
                   "virtual_size_bytes": 4 << 20, "actual_size_bytes": 4096}, f)
    config = vmm_config(os.path.join(work, "floor.yaml"), work,
                        extra_vmm="storage:\n  min_free: 99%\n")
    dm, c = start(work, "floor", config, secret, sock)
    daemons.append(dm)
    if not c:
        return
    eq(c.get("/images/floor").json().get("state"), "ready", "DISK-1: the image loads")
    source = raw_image(os.path.join(IMAGES, "floor.raw"))
    for label, path, body in (
            ("an import", "/images", {"name": "nofit", "source": source}),
            ("a volume create", "/volumes", {"name": "nofit", "size_gb": 1}),
            ("a create with an image", "/instances", image_body("nofit", "floor"))):
        r = c.request("POST", path, body)
        e = error_of(r)[1]
        ok(r.status == 409 and e.get("code") == "insufficient_resources" and
           re.fullmatch(r"insufficient storage: \d+ free, \d+ needed", e.get("message", "")),
           "DISK-10: %s below storage.min_free is 409 insufficient_resources" % label, e)
    ok(not os.path.exists(os.path.join(STORE, "nofit")) and
       os.listdir(os.path.join(MNT, "data", "volumes")) == [] and
       c.get("/instances").json() == [], "DISK-10: and nothing is written")
    eq(c.request("DELETE", "/images/floor").status, 204, "DISK-4: the image is deleted")
    stop(dm, " (storage.min_free)")


def qemu_img_pids():
    pids = []
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    if f.read().split(b"\0")[0] == QEMU_IMG.encode():
                        pids.append(int(p))
            except OSError:
                pass
    return pids


def check_restart(work, config, secret, sock, daemons):
    # DISK-11, REL-12: a restart during an import fails it with `interrupted by daemon restart`
    # and removes the partial file.
    d, c = start(work, "restart-1", config, secret, sock)
    daemons.append(d)
    if not c:
        return
    source = raw_image(os.path.join(IMAGES, "cut.raw"))
    sim_ctl("fault write data/images/cut/disk.qcow2.tmp hang")
    try:
        r, _ = import_image(c, "cut", source)
        eq(r.status, 202, "DISK-2: the import is accepted")
        ok(poll(lambda: os.path.exists(os.path.join(STORE, "cut", "disk.qcow2.tmp")), 10),
           "DISK-3: qemu-img writes disk.qcow2.tmp")
        d.stop(signal.SIGKILL)
        for pid in qemu_img_pids():
            os.kill(pid, signal.SIGKILL)
    finally:
        sim_ctl("clear-faults")
    # DISK-5: and an overlay template a crash left half-written goes too.
    half = os.path.join(STORE, "cut", "overlay-%d.qcow2.4242.tmp" % (1 << 30))
    with open(half, "wb") as f:
        f.write(b"QFI\xfb half")
    d2, c2 = start(work, "restart-2", config, secret, sock)
    daemons.append(d2)
    if not c2:
        return
    i = c2.get("/images/cut").json()
    ok(i.get("state") == "failed" and i.get("error") == "interrupted by daemon restart",
       "DISK-11, REL-12: after a restart the import is failed: interrupted by daemon restart", i)
    ok(not os.path.exists(os.path.join(STORE, "cut", "disk.qcow2.tmp")),
       "DISK-11: the partial file is removed at start-up")
    ok(not os.path.exists(half), "DISK-5: a template's temp file is removed at start-up")
    eq(json.load(open(os.path.join(STORE, "cut", "image.json"))).get("state"), "failed",
       "DISK-11: image.json says failed")
    eq(delete_image(c2, "cut").status, 204, "DISK-4: the failed image is deleted")
    stop(d2, " (after the restart)")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-images-")
    daemons = []
    try:
        make_images()
        os.makedirs(local_images(work), exist_ok=True)
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work,
                            extra_vmm="storage:\n  max_image_size: %d\n  max_disk_gb: %d\n" %
                            (MAX_IMAGE_SIZE, MAX_DISK_GB))
        sock = os.path.join(work, "api.sock")
        d, c = start(work, "main", config, secret, sock)
        daemons.append(d)
        if c:
            run_group("routes", lambda: check_routes(c))
            run_group("refusals", lambda: check_refusals(c))
            run_group("hostile", lambda: check_hostile(c, work))
            run_group("faults", lambda: check_faults(c))
            run_group("root disks", lambda: check_root_disks(c, d))
            run_group("volumes", lambda: check_volumes(c))
            run_group("storage stage", lambda: check_storage_stage(c, d))
            for name in [x["name"] for x in c.get("/images").json()]:
                delete_image(c, name)
            stop(d)
        run_group("crash", lambda: check_crashing_qemu_img(work, secret, sock, daemons))
        run_group("space floor", lambda: check_space_floor(work, secret, sock, daemons))
        run_group("restart", lambda: check_restart(work, config, secret, sock, daemons))
    finally:
        for pid in qemu_img_pids():
            os.kill(pid, signal.SIGKILL)
        finish_run(daemons, work)
        shutil.rmtree(STORE, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
