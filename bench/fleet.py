#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# FLEET-8's figures (issue 17, information rows): the time from a quarantine on a host to the
# changed VGPU `reserved` in Placement, and `vgpuctl fleet create` of 40 VMs of mixed sizes on
# two hosts, wall time and reschedules.
#
#   tests/sim/run-sim-test.sh BUILD/sim/vgpu-sim tests/fleet/host-fleet-a.yaml \
#           python3 bench/fleet.py BUILD_DIR
#
# The fleet of tests/fleet/test-fleet-two-hosts.py (tests/fleet/two_hosts.py): a real
# placement-api (sqlite, noauth2) on loopback, the runner's simulator as fleet-a (one mixed-size
# L40S) and a second vgpu-sim as fleet-b (SIM-20's two L40S), a vgpud on each with fake-qemu.
# One warm-up, then FLEET_BENCH_REPS (default 5) repetitions; each row is the median. Between
# repetitions every instance is deleted through the API and the fleet's allocations are checked
# gone (any left by vgpud are deleted, and counted on stderr). Prints bench/run rows on stdout,
# details on stderr; skips (exit 0, a "skipped" row) without python3-placement.
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests", "fleet"))
from vgpud_bench import log, poll, row, run_main  # noqa: E402 (after the path)

REPS = int(os.environ.get("FLEET_BENCH_REPS", "5"))
BATCHES = (("NVIDIA L40S-1Q", 16), ("NVIDIA L40S-2Q", 12), ("NVIDIA L40S-4Q", 8),
           ("NVIDIA L40S-8Q", 4))
QUARANTINE = "quarantine to changed VGPU reserved in Placement (s)"
CREATE = "vgpuctl fleet create of 40 mixed-size VMs on two hosts, wall time (s)"
RESCHEDULES = "reschedules in the 40-VM fleet create (median; total over the runs)"


def main():
    build = os.path.abspath(sys.argv[1])
    top = os.path.join(HERE, "..")
    # The shared helpers read vgpud's, the API document's and the fake NVML's paths from argv,
    # as the tests pass them.
    sys.argv = [sys.argv[0], os.path.join(build, "src/daemon/vgpud"),
                os.path.join(top, "api/openapi.yaml"),
                os.path.join(build, "sim/libnvidia-ml.so.1")]
    if not shutil.which("placement-api"):
        for what in (QUARANTINE, CREATE, RESCHEDULES):
            row("FLEET-8", what, "-", result="skipped: python3-placement is not installed")
        return 0
    import placement_api
    import two_hosts
    import vgpud_test
    from vgpud_test import CTL, MNT

    out = sys.stdout
    sys.stdout = sys.stderr  # the helpers' TAP lines go to the log, rows to bench/run
    work = tempfile.mkdtemp(prefix="vgpud-fleet-bench-")
    p, sim_b, hosts = None, None, []
    try:
        p = placement_api.Placement(work)
        if not p.db_sync()[0] or not p.start():
            raise RuntimeError("placement-api does not start")
        sim_b = two_hosts.Simulator(os.path.join(build, "sim/vgpu-sim"),
                                    os.path.join(top, "tests/api/host-l40s.yaml"), work, "b")
        if not sim_b.wait():
            raise RuntimeError("the second vgpu-sim does not mount")
        hosts = [two_hosts.Host(work, "fleet-a", MNT, CTL),
                 two_hosts.Host(work, "fleet-b", sim_b.mnt, sim_b.ctl_dir, sim_b)]
        images = os.path.join(work, "images")
        kernel = two_hosts.make_kernel(images)
        for h in hosts:
            h.write_config(p.url, os.path.join(build, "sim/libnvidia-ml.so.1"),
                           os.path.join(build, "sim/fake-qemu"), images)
            if not h.start(h.name)[1]:
                raise RuntimeError("vgpud %s does not become ready" % h.name)
        hosts_file = os.path.join(work, "hosts.json")
        two_hosts.write_hosts_file(hosts_file, hosts)
        fc = two_hosts.Fleetctl(os.path.join(build, "src/ctl/vgpuctl"), p.url, hosts_file,
                                kernel)
        pf_uuids = [two_hosts.pf_uuid(h.name, pf) for h in hosts for pf in h.pfs()]
        if not poll(lambda: all(p.inventories(u) for u in pf_uuids), 60, 0.2):
            raise RuntimeError("the providers do not reach Placement")

        quarantine, wall, resched = [], [], []
        for rep in range(REPS + 1):
            quarantine.append(time_quarantine(p, hosts[1]))
            t, n = create_forty(fc)
            wall.append(t)
            resched.append(n)
            log("fleet", "rep %d: quarantine %.3f s, 40 VMs %.1f s, %d reschedules"
                % (rep, quarantine[-1], t, n))
            clear(p, hosts, pf_uuids)
        quarantine, wall, resched = quarantine[1:], wall[1:], resched[1:]
        sys.stdout = out
        row("FLEET-8", QUARANTINE, "%.2f" % statistics.median(quarantine))
        row("FLEET-8", CREATE, "%.1f" % statistics.median(wall))
        row("FLEET-8", RESCHEDULES, "%g; %d" % (statistics.median(resched), sum(resched)))
        return 0
    finally:
        sys.stdout = out
        for h in hosts:
            if h.daemon:
                h.daemon.stop()
        if p:
            p.stop()
        if sim_b:
            sim_b.stop()
        shutil.rmtree(work, ignore_errors=True)
        vgpud_test.counter = 0


def time_quarantine(p, b):
    pf, vfs = sorted(b.pfs().items())[0]
    uuid = __import__("two_hosts").pf_uuid(b.name, pf)
    before = p.inventories(uuid)["VGPU"]["reserved"]
    r = b.client.request("POST", "/gpu/vfs/%s/quarantine" % vfs[-1], {"reason": "bench"})
    t0 = time.monotonic()
    if r.status != 200:
        raise RuntimeError("quarantine: HTTP %d" % r.status)
    if not poll(lambda: p.inventories(uuid)["VGPU"]["reserved"] == before + 1, 60, 0.01):
        raise RuntimeError("the quarantine does not reach Placement")
    took = time.monotonic() - t0
    b.client.request("DELETE", "/gpu/vfs/%s/quarantine" % vfs[-1])
    if not poll(lambda: p.inventories(uuid)["VGPU"]["reserved"] == before, 60, 0.05):
        raise RuntimeError("the cleared quarantine does not reach Placement")
    return took


def create_forty(fc):
    t0 = time.monotonic()
    n = 0
    for profile, count in BATCHES:
        rc, out, err, _ = fc.create("vm-%s" % profile[-2:].lower(), profile, count)
        if rc != 0:
            raise RuntimeError("fleet create %s: exit %d: %s" % (profile, rc, err.strip()))
        n += out["reschedules"]
    return time.monotonic() - t0, n


def clear(p, hosts, pf_uuids):
    """Every instance deleted through the API; then no allocation may stay."""
    for h in hosts:
        for i in h.instances():
            r = h.client.request("DELETE", "/instances/" + i["id"])
            if r.status != 204:
                raise RuntimeError("delete %s on %s: HTTP %d" % (i["id"], h.name, r.status))

    def left():
        return {c for u in pf_uuids
                for c in (p.get("/resource_providers/%s/allocations" % u) or
                          {"allocations": {}})["allocations"]}
    if not poll(lambda: not left(), 10, 0.2):
        stale = left()
        log("fleet", "%d allocations left after the deletes (FLEET-6); deleting them" % len(stale))
        for c in stale:
            p.call("DELETE", "/allocations/" + c)


if __name__ == "__main__":
    run_main(main, "fleet")
