#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-seed.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# The cloud-init seed in the lifecycle (SPEC §21) through the real vgpud on a mounted vgpu-sim
# with fake-qemu as its VMM, in run-sim-test.sh's private namespaces (the nat network is real
# and the test's own): the create body's cloud_init and its refusals, seed.iso written at create
# and again at every start, read back with isoinfo as the guest's cloud-init would find it
# (volume id cidata, Rock Ridge names), the CD-ROM in QEMU's argv, the instance JSON that shows
# fingerprints and never user data, the operator's vendor-data, and the seed gone with its
# instance. Output is TAP; every check names the requirements it covers.
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    MNT, eq, exit_status, ok, poll, run_group, start, stop, write_secret)
from vgpud_instances import (  # noqa: E402
    IMAGES, INSTANCES, delete, finish_run, guest_pids, make_images, post, record, request,
    vmm_config)

ISOINFO = shutil.which("isoinfo") or "/usr/bin/isoinfo"
STORE = os.path.join(MNT, "data", "images")


def ssh_key(work, name):
    """A fresh ed25519 key pair made by ssh-keygen; (public line, its fingerprint)."""
    path = os.path.join(work, name)
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name + "@test", "-f",
                    path], check=True)
    line = open(path + ".pub").read().strip()
    fp = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", path + ".pub"], check=True,
                        capture_output=True, text=True).stdout.split()[1]
    return line, fp


def seed_path(iid):
    return os.path.join(INSTANCES, iid, "seed.iso")


def iso_files(iid):
    """{name: text} of the seed as a NoCloud reader sees it (Rock Ridge names), and its
    volume id."""
    iso = seed_path(iid)
    info = subprocess.run([ISOINFO, "-d", "-i", iso], check=True, capture_output=True,
                          text=True).stdout
    volume = next((l.split(":", 1)[1].strip() for l in info.splitlines()
                   if l.startswith("Volume id:")), None)
    listing = subprocess.run([ISOINFO, "-R", "-f", "-i", iso], check=True, capture_output=True,
                             text=True).stdout.split()
    files = {}
    for path in listing:
        files[path.lstrip("/")] = subprocess.run([ISOINFO, "-R", "-i", iso, "-x", path],
                                                 check=True, capture_output=True).stdout.decode()
    return volume, files


def cmdline_of(name):
    pids = guest_pids(name)
    if not pids:
        return []
    with open("/proc/%d/cmdline" % pids[0], "rb") as f:
        return [a.decode() for a in f.read().split(b"\0")]


def raw_image(path, size=4 << 20):
    with open(path, "wb") as f:
        f.write(b"seed-test-image" * (size // 15))
        f.truncate(size)
    return path


def image_body(name, image="seedimg", **extra):
    return dict({"name": name, "vcpus": 1, "memory_mb": 256, "image": image}, **extra)


def import_image(c):
    st, b = request(c, "POST", "/images",
                    {"name": "seedimg", "source": raw_image(os.path.join(IMAGES, "seed.raw"))})
    ok(st == 202, "DISK-2: the test's image is importing", (st, b))
    poll(lambda: c.get("/images/seedimg").json().get("state") != "importing", 60)
    eq(c.get("/images/seedimg").json().get("state"), "ready", "DISK-2: the image is ready")


def no_instance_left(c, name):
    return not any(x["name"] == name for x in c.get("/instances").json()) and \
        not [d for d in os.listdir(INSTANCES) if not d.startswith(".")]


def check_create(c, work, vendor_file):
    key_a, fp_a = ssh_key(work, "alice")
    key_b, fp_b = ssh_key(work, "bob")
    st, a = request(c, "POST", "/instances",
                    image_body("seed-a", cloud_init={"ssh_authorized_keys": [key_a, key_b],
                                                     "hostname": "web-1"}))
    ok(st == 201 and a.get("state") == "Running",
       "SEED-1: a create with an image and cloud_init is Running", (st, a))
    if st != 201:
        return
    iid = a["id"]
    # SEED-4: fingerprints as ssh-keygen -l prints them, the comment, no user data.
    eq(a.get("cloud_init"),
       {"hostname": "web-1", "user_data": False,
        "ssh_authorized_keys": [
            {"type": "ssh-ed25519", "fingerprint": fp_a, "comment": "alice@test"},
            {"type": "ssh-ed25519", "fingerprint": fp_b, "comment": "bob@test"}]},
       "SEED-4: the instance shows the keys' fingerprints and user_data false")
    eq(c.get("/instances/" + iid).json().get("cloud_init"), a.get("cloud_init"),
       "SEED-4: GET /instances/{id} shows the same")
    # SEED-4, INST-2: the record keeps cloud_init as given.
    eq(record(iid).get("cloud_init"),
       {"ssh_authorized_keys": [key_a, key_b], "hostname": "web-1"},
       "SEED-4, INST-2: the record keeps cloud_init as given")

    # SEED-2: the ISO, as cloud-init's NoCloud source reads it.
    st_iso = os.stat(seed_path(iid))
    eq(st_iso.st_mode & 0o777, 0o600, "SEED-2: seed.iso is written 0600")
    volume, files = iso_files(iid)
    eq(volume, "cidata", "SEED-2: the seed's volume id is cidata")
    eq(sorted(files), ["meta-data", "network-config", "user-data", "vendor-data"],
       "SEED-2: the seed holds meta-data, user-data, network-config and vendor-data")
    meta = yaml.safe_load(files["meta-data"])
    eq(meta, {"instance-id": iid, "local-hostname": "web-1"},
       "SEED-2: meta-data names the instance id and cloud_init.hostname")
    ok(files["user-data"].startswith("#cloud-config\n"),
       "SEED-2: generated user-data is a #cloud-config document", files["user-data"])
    eq(yaml.safe_load(files["user-data"]),
       {"hostname": "web-1", "ssh_authorized_keys": [key_a, key_b]},
       "SEED-2: user-data carries the host name and the keys")
    net = a.get("network", {})
    eq(yaml.safe_load(files["network-config"]),
       {"version": 2, "ethernets": {"eth0": {
           "match": {"macaddress": net.get("mac")}, "set-name": "eth0",
           "addresses": ["%s/%d" % (net.get("ip"), net.get("prefix", 0))],
           "gateway4": net.get("gateway"),
           "nameservers": {"addresses": [net.get("gateway")], "search": ["vgpud.internal"]}}}},
       "SEED-3: network-config has the record's nat address, route, name server and MAC")
    eq(files["vendor-data"], open(vendor_file).read(),
       "SEED-2: vendor-data is the configured file's text")

    # VMM-1, SEED-2: the seed as a raw, read-only CD-ROM on the AHCI bus, after the root disk
    # and before the NIC.
    argv = cmdline_of("seed-a")
    blockdevs = [json.loads(argv[k + 1]) for k, x in enumerate(argv) if x == "-blockdev"]
    seed = [b for b in blockdevs if b.get("node-name") == "seed"]
    ok(len(seed) == 1 and seed[0].get("driver") == "raw" and seed[0].get("read-only") is True,
       "SEED-2, VMM-1: QEMU gets the seed as a raw read-only node", blockdevs)
    devices = [argv[k + 1] for k, x in enumerate(argv) if x == "-device"]
    ok("ide-cd,bus=ide.1,drive=seed" in devices,
       "SEED-2, VMM-1: the seed is an ide-cd on ide.1", devices)
    order = [d.split(",")[0] + ("" if "drive=" not in d else ":" + d.split("drive=")[1])
             for d in devices]
    ok(order.index("ide-cd:seed") > order.index("virtio-blk-pci:root,bootindex=1") and
       order.index("ide-cd:seed") < order.index("virtio-net-pci"),
       "VMM-1: the seed comes after the root disk and before the NIC", order)

    # SEED-2: rebuilt before every start: the operator's new vendor-data reaches the next start.
    eq(post(c, iid, "stop")[0], 200, "INST-12: the instance stops")
    with open(vendor_file, "w") as f:
        f.write("#cloud-config\nwrite_files: [{path: /etc/token, content: second}]\n")
    eq(post(c, iid, "start")[0], 200, "INST-12: and starts again")
    _, again = iso_files(iid)
    eq(again.get("vendor-data"), open(vendor_file).read(),
       "SEED-2: the seed is written again at start, with the vendor-data file as it is now")
    eq(again.get("meta-data"), files["meta-data"], "SEED-2: the rest of the seed is the same")

    # SEED-2: the seed goes with its instance.
    eq(delete(c, iid)[0], 204, "INST-20: the instance is deleted")
    ok(not os.path.exists(os.path.join(INSTANCES, iid)),
       "SEED-2, INST-20: its seed is deleted with it")


def check_user_data(c):
    secret = "#cloud-config\nchpasswd: {list: 'root:s3cret-never-shown'}\n"
    st, a = request(c, "POST", "/instances",
                    image_body("seed-ud", cloud_init={"user_data": secret}))
    ok(st == 201, "SEED-1: a create with user_data is Running", (st, a))
    if st != 201:
        return
    iid = a["id"]
    eq(a.get("cloud_init"), {"user_data": True},
       "SEED-4: the instance says user data was given")
    for label, text in (("the create's answer", json.dumps(a)),
                        ("GET /instances/{id}", c.get("/instances/" + iid).body.decode()),
                        ("GET /instances", c.get("/instances").body.decode())):
        ok("s3cret-never-shown" not in text, "SEED-4: %s never shows the user data" % label)
    _, files = iso_files(iid)
    eq(files.get("user-data"), secret, "SEED-1, SEED-2: user_data is used verbatim")
    eq(yaml.safe_load(files["meta-data"]).get("local-hostname"), "seed-ud",
       "SEED-1: the host name defaults to the instance name")
    eq(delete(c, iid)[0], 204, "INST-20: the instance is deleted")


def check_without_image(c):
    # SEED-1: an image alone gets a seed (host name and network); a kernel boot without
    # cloud_init has none.
    st, a = request(c, "POST", "/instances", image_body("seed-plain"))
    ok(st == 201 and os.path.exists(seed_path(a.get("id", "-"))),
       "SEED-1: an instance with an image gets a seed without cloud_init", (st, a))
    if st == 201:
        eq(a.get("cloud_init"), {"user_data": False},
           "SEED-4: and shows an empty cloud_init view")
        delete(c, a["id"])
    st, k = request(c, "POST", "/instances",
                    {"name": "seed-kernel", "vcpus": 1, "memory_mb": 256,
                     "boot": {"kernel": os.path.join(IMAGES, "vmlinuz")}})
    ok(st == 201 and not os.path.exists(seed_path(k.get("id", "-"))) and
       "cloud_init" not in k and not [x for x in cmdline_of("seed-kernel") if "ide-cd" in x],
       "SEED-1: a kernel boot without cloud_init has no seed", (st, k))
    if st == 201:
        delete(c, k["id"])


def check_refusals(c, work):
    key, _ = ssh_key(work, "carol")
    bad = (
        ({"ssh_authorized_keys": ["ssh-ed25519 not-base64!"]},
         "cloud_init.ssh_authorized_keys[0]: the key after the type must be base64"),
        ({"ssh_authorized_keys": [key, "ssh-dss AAAA"]},
         "cloud_init.ssh_authorized_keys[1] must start with a key type"),
        ({"ssh_authorized_keys": [key.replace("ssh-ed25519", "ssh-rsa")]},
         "cloud_init.ssh_authorized_keys[0]: the key is not a ssh-rsa key"),
        ({"ssh_authorized_keys": [key + "\nssh-ed25519 AAAA"]},
         "cloud_init.ssh_authorized_keys[0] must not contain control characters"),
        ({"ssh_authorized_keys": [key] * 65},
         "cloud_init.ssh_authorized_keys must hold at most 64 entries"),
        ({"user_data": "hello"}, "cloud_init.user_data must start with"),
        ({"user_data": "#cloud-config\n" + "x" * 65536},
         "cloud_init.user_data must be at most 65536 bytes"),
        # A NUL never reaches the seed's check: the body's JSON reader refuses it first.
        ({"user_data": "#cloud-config\n\u0000"}, "\\u0000 is not allowed"),
        ({"user_data": "#cloud-config\n", "ssh_authorized_keys": [key]},
         "cloud_init.ssh_authorized_keys must not be given with cloud_init.user_data"),
        ({"hostname": "Web_1"}, "cloud_init.hostname must match"),
        ({"hostname": 7}, "cloud_init.hostname must be a string"),
        ({"vendor_data": "x"}, "unknown key \"cloud_init.vendor_data\""),
        ("keys", "cloud_init must be an object"),
    )
    for cloud_init, text in bad:
        st, e = request(c, "POST", "/instances", image_body("seed-bad", cloud_init=cloud_init))
        ok(st == 400 and e.get("code") == "invalid_request" and text in e.get("message", ""),
           "SEED-1, INST-7: %s is 400 naming the field" % text, (st, e))
    ok(no_instance_left(c, "seed-bad"), "SEED-1: a refused create leaves nothing",
       os.listdir(INSTANCES))


def check_vendor_data_failure(c, vendor_file):
    # SEED-2: an unreadable vendor-data file fails the create with a 500 naming the key, and
    # the create is rolled back: no record, no seed, no overlay.
    saved = open(vendor_file).read()
    os.unlink(vendor_file)
    try:
        st, e = request(c, "POST", "/instances", image_body("seed-novendor"))
    finally:
        with open(vendor_file, "w") as f:
            f.write(saved)
    ok(st == 500 and "write cloud-init seed: cloud_init.vendor_data_file" in e.get("message", ""),
       "SEED-2: a missing vendor_data_file fails the create with 500 naming it", (st, e))
    ok(no_instance_left(c, "seed-novendor"), "SEED-2: and leaves nothing behind",
       os.listdir(INSTANCES))
    # Over 64 KiB.
    with open(vendor_file, "w") as f:
        f.write("#cloud-config\n" + "#" * 65536)
    try:
        st, e = request(c, "POST", "/instances", image_body("seed-bigvendor"))
    finally:
        with open(vendor_file, "w") as f:
            f.write(saved)
    ok(st == 500 and "larger than 65536 bytes" in e.get("message", ""),
       "SEED-2, CFG-3: a vendor_data_file over 64 KiB fails the create naming the cap", (st, e))
    ok(no_instance_left(c, "seed-bigvendor"), "SEED-2: and leaves nothing behind")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-seed-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        vendor_file = os.path.join(work, "vendor-data")
        with open(vendor_file, "w") as f:
            f.write("#cloud-config\nwrite_files: [{path: /etc/token, content: first}]\n")
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work)
        with open(config, "a") as f:
            f.write("cloud_init:\n  vendor_data_file: \"%s\"\n" % vendor_file)
        sock = os.path.join(work, "api.sock")
        d, c = start(work, "main", config, secret, sock)
        daemons.append(d)
        if c:
            run_group("image", lambda: import_image(c))
            run_group("create", lambda: check_create(c, work, vendor_file))
            run_group("user data", lambda: check_user_data(c))
            run_group("without", lambda: check_without_image(c))
            run_group("refusals", lambda: check_refusals(c, work))
            run_group("vendor data", lambda: check_vendor_data_failure(c, vendor_file))
            for i in c.get("/instances").json():
                delete(c, i["id"])
            request(c, "DELETE", "/images/seedimg")
            stop(d)
    finally:
        finish_run(daemons, work)
        shutil.rmtree(STORE, ignore_errors=True)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
