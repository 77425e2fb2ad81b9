#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# PERF-7: create with everything, vgpud's own share, against a shell recipe doing the same host
# steps with the usual tools.
#
#   tests/sim/run-sim-test.sh BUILD/sim/vgpu-sim bench/host-perf4.yaml \
#           python3 bench/perf7-create.py BUILD_DIR
#
# run-sim-test.sh gives it a private PID, mount and network namespace (REL-9, NET-11) with the
# host's /dev/net/tun bound into the simulator's dev/ (as root), so every TAP, bridge and
# nftables table below, vgpud's and the recipe's, lives in that namespace only.
#
# One vgpud on a 2xL40S mixed-size simulated host, fake-qemu as the VMM, data_dir the
# simulator's data/ (SIM-15), where the recipe writes its files too. Untimed set-up: an image imported from a qcow2 of
# 1 GiB (DISK-2) and one volume per instance (DISK-7). A create is `POST /instances` with the
# image, an `NVIDIA L40S-4Q` vGPU, a `nat` NIC with a port forward to guest port 22 and the
# volume; it is timed from the request to its 201 (Running). vgpud's share is that time minus
# the VMM's own: `vmm_ready_ms` of its `instance running` line, from the spawn to QMP readiness
# as vgpud's loop saw them. The seed (SEED-2) is part of both sides once vgpud makes one (a
# seed.iso in the instance directory); without it, neither side makes one, and a row says so.
#
# The recipe, per instance, in one `sh -c` as Proxmox's and hypeman's tools run them: `qemu-img
# create -f qcow2 -b` the same image, (`xorriso` for a NoCloud seed when vgpud makes one), `ip
# tuntap add` + `ip link set master` + `ip link set up` on a bridge of its own, and `nft add
# rule` for the port forward's DNAT in a table of its own. Nothing of the GPU: the recipe's
# share has no claim at all, so the comparison flatters it.
#
# Each repetition: 20 creates in a row, every instance deleted, 20 at once (one thread and one
# connection each), every instance deleted; then the recipe the same way. One warm-up, then
# PERF7_REPS (default 5); each figure is the median over the repetitions of that repetition's
# p50 (or p99). Prints bench/run rows on stdout, details on stderr.
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vgpud_bench import (  # noqa: E402 (after the path)
    MNT, Client, Vgpud, log, median, mint, percentile, poll, row, run_main, write_config,
    write_secret)

N = 20
PROFILE = "NVIDIA L40S-4Q"
PORT_BASE = 20000
TARGET_RATIO = 0.5
TARGET_MS = 60.0
QEMU_IMG = "/usr/bin/qemu-img"
RUNNING = re.compile(r"instance running .*\binstance_id=(\w+).*\bvmm_ready_ms=(\d+)")

RECIPE_SETUP = """
ip link add rbr0 type bridge
ip addr add 10.99.0.1/24 dev rbr0
ip link set rbr0 up
nft add table inet recipe
nft add chain inet recipe prerouting '{ type nat hook prerouting priority dstnat; }'
"""

# $1 the scratch directory, $2 the number of instances
RECIPE_TEARDOWN = """
k=0
while [ "$k" -lt "$2" ]; do
        ip link del "rtap$k" 2>/dev/null || true
        k=$((k + 1))
done
ip link del rbr0 2>/dev/null || true
nft delete table inet recipe 2>/dev/null || true
rm -f "$1"/root-*.qcow2 "$1"/seed-*.iso
"""

# $1 the image, $2 the scratch directory, $3 the instance number, $4 the host port, $5 seed: yes|no
RECIPE_ONE = """
set -e
qemu-img create -q -f qcow2 -b "$1" -F qcow2 "$2/root-$3.qcow2"
if [ "$5" = yes ]; then
        d=$(mktemp -d "$2/seed-$3.XXXXXX")
        printf 'instance-id: r%s\\nlocal-hostname: r%s\\n' "$3" "$3" > "$d/meta-data"
        printf '#cloud-config\\nssh_authorized_keys: [ssh-ed25519 AAAA r]\\n' > "$d/user-data"
        printf 'version: 2\\nethernets: {eth0: {dhcp4: true}}\\n' > "$d/network-config"
        xorriso -as mkisofs -quiet -output "$2/seed-$3.iso" -volid cidata -joliet -rock \\
                "$d/meta-data" "$d/user-data" "$d/network-config" 2>/dev/null
        rm -rf "$d"
fi
ip tuntap add dev "rtap$3" mode tap
ip link set "rtap$3" master rbr0
ip link set "rtap$3" up
nft add rule inet recipe prerouting tcp dport "$4" dnat ip to "10.99.0.$(( $3 + 2 ))":22
"""


def tag(msg):
    log("perf7", msg)


def sh(script, *args):
    p = subprocess.run(["sh", "-c", script, "recipe"] + [str(a) for a in args],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError("recipe: %s" % (p.stderr.strip() or "exit %d" % p.returncode))


# ---- vgpud ----------------------------------------------------------------------------------


def body(k, rep):
    return {"name": "perf7-%s-%02d" % (rep, k), "vcpus": 1, "memory_mb": 256, "image": "base",
            "gpu": {"profile": PROFILE},
            "network": {"mode": "nat",
                        "ports": [{"host": PORT_BASE + k, "guest": 22, "protocol": "tcp"}]},
            "volumes": [{"volume": "perf7-v%02d" % k}]}


def create_one(c, k, rep, results):
    t0 = time.monotonic()
    try:
        r = c.request("POST", "/instances", body(k, rep))
    except OSError as e:
        r = e
    results[k] = (r, time.monotonic() - t0)


def vgpud_round(c, d, rep, concurrent):
    """N creates, one after another or all at once; [(create s, vmm_ready s)], and whether the
    instances got a seed."""
    offset = len(d.log_text())
    results = [None] * N
    if concurrent:
        barrier = threading.Barrier(N)

        def run(k):
            barrier.wait()
            create_one(c, k, rep, results)
        threads = [threading.Thread(target=run, args=(k,)) for k in range(N)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for k in range(N):
            create_one(c, k, rep, results)
    ids = {}
    for k, (r, _) in enumerate(results):
        if getattr(r, "status", None) != 201 or r.json().get("state") != "Running":
            raise RuntimeError("%s: create %d: %r" % (rep, k, r))
        ids[r.json()["id"]] = k
    # The `instance running` line is written before the 201 leaves, so it is in the log now.
    ready = {}

    def read_log():
        for m in RUNNING.finditer(d.log_text()[offset:]):
            if m.group(1) in ids:
                ready[m.group(1)] = int(m.group(2))
        return len(ready) == N
    if not poll(read_log, 5, 0.05):
        raise RuntimeError("%s: %d of %d creates logged vmm_ready_ms" % (rep, len(ready), N))
    seeded = all(os.path.exists(os.path.join(d.data_dir, "instances", i, "seed.iso"))
                 for i in ids)
    out = [(results[k][1], ready[i] / 1000.0) for i, k in ids.items()]
    return out, seeded


def delete_all(c):
    for i in c.get("/instances").json():
        r = c.request("DELETE", "/instances/" + i["id"])
        if r.status != 204:
            raise RuntimeError("delete %s: %r" % (i["id"], r))
    if not poll(lambda: c.get("/resources").json()["gpu"]["used_slots"] == 0, 60, 0.05):
        raise RuntimeError("vGPU slots still used 60 s after the deletes")


# ---- the recipe -----------------------------------------------------------------------------


def recipe_round(image, scratch, seed, concurrent):
    sh(RECIPE_SETUP)
    try:
        times = [None] * N

        def one(k):
            t0 = time.monotonic()
            sh(RECIPE_ONE, image, scratch, k, PORT_BASE + k, "yes" if seed else "no")
            times[k] = time.monotonic() - t0
        if concurrent:
            errors = []

            def run(k):
                try:
                    one(k)
                except RuntimeError as e:
                    errors.append(e)
            threads = [threading.Thread(target=run, args=(k,)) for k in range(N)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
        else:
            for k in range(N):
                one(k)
        return times
    finally:
        sh(RECIPE_TEARDOWN, scratch, N)


# ---- the run --------------------------------------------------------------------------------


def main():
    build = os.path.abspath(sys.argv[1])
    reps = int(os.environ.get("PERF7_REPS", "5"))
    vgpud = os.path.join(build, "src/daemon/vgpud")
    nvml = os.path.join(build, "sim/libnvidia-ml.so.1")
    fake_qemu = os.path.join(build, "sim/fake-qemu")
    if os.geteuid() != 0 or not os.path.exists(os.path.join(MNT, "dev", "net", "tun")):
        raise RuntimeError("needs root and the simulator's dev/net/tun (run-sim-test.sh as root)")

    work = tempfile.mkdtemp(prefix="vgpud-perf7.")
    os.chmod(work, 0o755)  # dnsmasq reads its hosts files as nobody
    # data_dir is the simulator's (fake-qemu finds the simulated host from it, SIM-15); the
    # recipe writes its overlays there too, so both pay the same file system.
    data = os.path.join(MNT, "data")
    images = os.path.join(work, "images")
    scratch = os.path.join(data, "perf7-recipe")
    for p in (images, scratch):
        os.makedirs(p)
    d = None
    try:
        source = os.path.join(images, "base.qcow2")
        subprocess.run([QEMU_IMG, "create", "-q", "-f", "qcow2", source, "1G"], check=True)
        secret = write_secret(work)
        config = write_config(work, nvml, extra="""qemu_binary: "%s"
qemu_accel: tcg
image_dirs: ["%s"]
storage:
  min_free: 0%%
""" % (fake_qemu, images))
        d = Vgpud(vgpud, config, work, "perf7")
        d.data_dir = data
        d.wait_ready()
        c = Client(os.path.join(work, "api.sock"), mint(secret))
        if not poll(lambda: c.get("/readyz").status == 200, 30, 0.05):
            raise RuntimeError("/readyz is not 200 after READY=1")
        r = c.request("POST", "/images", {"name": "base", "source": source})
        if r.status != 202 or not poll(
                lambda: c.get("/images/base").json().get("state") == "ready", 120, 0.05):
            raise RuntimeError("import of the image: %r, %r" % (r, c.get("/images/base").json()))
        image = os.path.join(data, "images", "base", "disk.qcow2")
        for k in range(N):
            r = c.request("POST", "/volumes", {"name": "perf7-v%02d" % k, "size_gb": 1})
            if r.status != 201:
                raise RuntimeError("volume %d: %r" % (k, r))

        figures = {m: {"share": [], "share99": [], "create": [], "ready": [], "recipe": [],
                       "recipe99": []} for m in ("row", "conc")}
        seeded = None
        for rep in ["warm-up"] + ["rep%d" % i for i in range(1, reps + 1)]:
            for mode in ("row", "conc"):
                got, seeded = vgpud_round(c, d, "%s-%s" % (rep, mode), mode == "conc")
                delete_all(c)
                recipe = recipe_round(image, scratch, seeded, mode == "conc")
                share = [t - ready for t, ready in got]
                tag("%s %s: share ms %s; create ms %s; vmm_ready ms %s; recipe ms %s" % (
                    rep, mode, sorted(round(s * 1000) for s in share),
                    sorted(round(t * 1000) for t, _ in got),
                    sorted(round(r * 1000) for _, r in got),
                    sorted(round(t * 1000) for t in recipe)))
                if rep == "warm-up":
                    continue
                f = figures[mode]
                f["share"].append(percentile(share, 50) * 1000)
                f["share99"].append(percentile(share, 99) * 1000)
                f["create"].append(percentile([t for t, _ in got], 50) * 1000)
                f["ready"].append(percentile([r for _, r in got], 50) * 1000)
                f["recipe"].append(percentile(recipe, 50) * 1000)
                f["recipe99"].append(percentile(recipe, 99) * 1000)
    finally:
        if d:
            d.stop()
            keep = os.environ.get("PERF7_KEEP_LOGS")
            if keep:
                shutil.copy(d.log_path, keep)
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)

    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    what = "create with everything (image, 4Q, nat NIC + forward, volume%s)" % (
        ", seed" if seeded else "; no seed yet")
    for mode, label in (("row", "20 in a row"), ("conc", "20 at once")):
        f = figures[mode]
        ours, theirs = median(f["share"]), median(f["recipe"])
        ratio = ours / theirs if theirs else 0
        good = ratio <= TARGET_RATIO and ours <= TARGET_MS
        row("PERF-7", "%s, %s: vgpud's share p50 (ms) vs shell recipe" % (what, label),
            "%.1f" % ours, "%.1f" % theirs, "%.2f" % ratio,
            "<= %.2f and <= %d ms" % (TARGET_RATIO, TARGET_MS), "pass" if good else "FAIL")
        row("PERF-7", "%s: vgpud's share p99 / recipe p99 (ms)" % label,
            "%.1f" % median(f["share99"]), "%.1f" % median(f["recipe99"]))
        row("PERF-7", "%s: request to 201 p50 / VMM spawn to QMP ready p50 (ms, fake-qemu)" %
            label, "%.1f" % median(f["create"]), "%.1f" % median(f["ready"]))
    row("PERF-7", "load average during the run (1, 5, 15 min)", load)
    return 0


if __name__ == "__main__":
    run_main(main, "perf7")
