#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-seed-pyyaml.py MAKE_SEED ISOINFO
#
# The seed's documents as cloud-init itself reads them: PyYAML's safe_load, a YAML 1.1 reader
# that turns a plain `null`, `yes`, `0x1f` or `1e3` into something other than the text
# (SEED-2, REL-13). make-seed writes a seed ISO with the seed module for host names and key
# comments chosen to be misread; each file is read back from the ISO with isoinfo and parsed,
# and every value must be exactly the input. Output is TAP.
import os
import shutil
import subprocess
import sys
import tempfile

import yaml

MAKE_SEED, ISOINFO = sys.argv[1:3]
KEY = ("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOepdvQSV5Q3FUcTdMcDo5Kwa+pGv93S2cXtJgEk2+fi")
HOSTNAMES = ["null", "true", "yes", "off", "123", "0x1f", "1e3", "007", "0o17", "1-2"]
COMMENTS = ["a: b", "# c", "{x: 1}", "[1, 2]", "\"q\"", "'s'", "&a", "*a", "!!binary x",
            "--- x", "...", "- i", "| b", "> f", "%TAG ! x", "@ `", "caf\u00e9 \u2713",
            "\\x0a", "null", "~"]
MAC = "52:54:00:12:34:56"

counter = 0
failures = 0


def ok(cond, name, detail=None):
    global counter, failures
    counter += 1
    print("%s %d - %s" % ("ok" if cond else "not ok", counter, name))
    if not cond:
        failures += 1
        if detail is not None:
            for line in str(detail).splitlines()[:40]:
                print("#   " + line)
    sys.stdout.flush()


def iso_file(iso, name):
    return subprocess.run([ISOINFO, "-R", "-i", iso, "-x", "/" + name], check=True,
                          stdout=subprocess.PIPE).stdout.decode()


def main():
    work = tempfile.mkdtemp(prefix="vgpud-seed-pyyaml-")
    try:
        keys = []
        for i, c in enumerate(COMMENTS):
            path = os.path.join(work, "key%d.pub" % i)
            with open(path, "w") as f:
                f.write("%s %s\n" % (KEY, c))
            keys.append(path)
        for host in HOSTNAMES:
            argv = [MAKE_SEED, work, "seed.iso", "--instance-id", host, "--hostname", host,
                    "--network", "bridge", MAC, "192.0.2.10", "24", "192.0.2.1"]
            for k in keys:
                argv += ["--ssh-key-file", k]
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            if r.returncode != 0:
                ok(False, "SEED-2: make-seed writes the seed for %r" % host, r.stdout.decode())
                continue
            iso = os.path.join(work, "seed.iso")
            meta = yaml.safe_load(iso_file(iso, "meta-data"))
            ok(meta == {"instance-id": host, "local-hostname": host},
               "SEED-2, REL-13: meta-data reads back as strings for %r" % host, meta)
            text = iso_file(iso, "user-data")
            user = yaml.safe_load(text)
            want = {"hostname": host, "ssh_authorized_keys": ["%s %s" % (KEY, c) for c in COMMENTS]}
            ok(text.startswith("#cloud-config\n") and user == want,
               "SEED-2, REL-13: user-data reads back exactly for %r" % host, text)
            net = yaml.safe_load(iso_file(iso, "network-config"))
            want_net = {"version": 2, "ethernets": {"eth0": {
                "match": {"macaddress": MAC}, "set-name": "eth0",
                "addresses": ["192.0.2.10/24"], "gateway4": "192.0.2.1"}}}
            ok(net == want_net, "SEED-3: network-config reads back as written for %r" % host, net)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("1..%d" % counter)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
