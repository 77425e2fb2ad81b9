#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-nvml-branches.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU r570|r550|none
#
# The real vgpud against the fake NVML library of each driver branch (NVML-3a, SIM-13), on a
# mixed-size and an equal-size L40S: the host file's nvml_struct_versions makes the library an
# R570+ one ([1, 2]: the v2 placement list works), an R550/R560 one ([1]: v2 answers
# ARGUMENT_VERSION_MISMATCH, v1 works) or one that refuses both ([]).
#
#  - r570, r550: the mixed-size GPU places from NVML (`nvml` `ok`) and the equal-size one falls
#    back alone (`equal_size`, NVML-11); the working list version is logged exactly once over
#    several refreshes (`NVML placement list v<n> (driver <version>)`), the other never; nothing
#    is counted as `unavailable`; a claim lands on the mixed-size GPU and is released.
#  - none: the whole host falls back as `unavailable` (NVML-11) with one warning naming the call
#    and both versions (NVML-13), counted on every refresh (NVML-12); no version line; NVML
#    still counts as initialised (NVML-2); a claim uses the sysfs lists (PLACE-5).
#
# Run by tests/integration/run-with-sim.sh (a private PID namespace, SIM-21). Every daemon is
# stopped whatever happens. Output is TAP; each check names the SPEC requirements it covers.
import os
import re
import sys
import tempfile

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    eq, exit_status, log_count, metric, ok, parse_metrics, poll, run_group, sim_state, start,
    stop, write_secret)
from vgpud_instances import (  # noqa: E402
    MIXED_PF, EQUAL_PF, create, delete_when_idle, finish_run, make_images, vf_of, vmm_config)

BRANCH = sys.argv[5] if len(sys.argv) > 5 else ""
# What the host file of each branch makes of the library (SIM-13): its list versions.
VERSIONS = {"r570": [1, 2], "r550": [1], "none": []}
PROFILE_4Q = "NVIDIA L40S-4Q"
# Reconcile passes (each a refresh, NVML-14; 5 s apart, the least CFG allows) to see before
# counting log lines: "logged once" must survive repeats.
PASSES = 2
WARN = (r'<4>NVML placements fall back to sysfs lists reason=unavailable error='
        r'"nvmlDeviceGetVgpuTypeCreatablePlacements\(%s, type \d+\): ARGUMENT_VERSION_MISMATCH '
        r'\(placement list v2 and v1\)"' % re.escape(MIXED_PF))


def gpus(c):
    """/gpus by PF address (API-6)."""
    return {g["address"]: g for g in c.get("/gpus").json()["gpus"]}


def unavailable_total(c):
    fams = parse_metrics(c.get("/metrics").body.decode())
    return metric(fams, "vgpud_resources_gpu_nvml_fallbacks_total", reason="unavailable") or 0


def passes(d):
    return log_count(d, r"<7>reconcile pass done.*")


def claim_and_release(c, label, want_pf):
    st, inst = create(c, "nb-01", PROFILE_4Q)
    if not ok(st == 201, "%s: a %s claim is created" % (label, PROFILE_4Q), (st, inst)):
        return
    vf = vf_of(inst)
    ok(vf.startswith(want_pf[:8]), "%s: it lands on GPU %s (VF %s)" % (label, want_pf, vf), inst)
    eq(delete_when_idle(c, inst["id"])[0], 204, "%s: the instance is deleted" % label)


def check_library(c, d):
    versions = sim_state()["nvml"]["struct_versions"]
    if not eq(versions, VERSIONS[BRANCH], "SIM-13: the fake NVML is the %s library %s"
              % (BRANCH, VERSIONS[BRANCH])):
        return
    driver = sim_state()["driver_version"]
    # Several refreshes (NVML-14: one per reconcile pass) before anything is counted.
    ok(poll(lambda: passes(d) >= PASSES, 60, 0.2),
       "NVML-14: %d reconcile passes, each refreshing NVML" % PASSES, passes(d))
    ok(log_count(d, r"<6>NVML initialised driver_version=%s" % re.escape(driver)) == 1,
       "NVML-2: 'NVML initialised' is logged once with the driver version")

    if BRANCH == "none":
        got = poll(lambda: (lambda g: {p: x["nvml"] for p, x in g.items()} ==
                            {MIXED_PF: "unavailable", EQUAL_PF: "unavailable"} and g)(gpus(c)),
                   20, 0.2)
        ok(bool(got), "NVML-3a, NVML-11, API-6: a library that refuses v2 and v1 falls the whole "
           "host back as unavailable", gpus(c))
        eq(log_count(d, WARN), 1, "NVML-3a, NVML-13: the warning names the call and both "
           "versions, once")
        ok(unavailable_total(c) >= PASSES,
           'NVML-12, MET-2: nvml_fallbacks_total{reason="unavailable"} counts every refresh',
           unavailable_total(c))
        eq(log_count(d, r".*NVML placement list v.*"), 0,
           "NVML-3a: no placement list version is logged when none worked")
        claim_and_release(c, "PLACE-5, NVML-11 (both refused): sysfs lists", MIXED_PF)
        return

    want = 1 if BRANCH == "r550" else 2
    other = 3 - want
    got = poll(lambda: (lambda g: g[MIXED_PF]["nvml"] == "ok" and
                        g[MIXED_PF].get("mode") == "mixed" and
                        g[EQUAL_PF]["nvml"] == "equal_size" and g)(gpus(c)), 20, 0.2)
    ok(bool(got), "NVML-3a, NVML-11, API-6 (%s): the mixed-size GPU places from NVML, the "
       "equal-size one falls back alone" % BRANCH, gpus(c))
    line = r"<6>NVML placement list v%d \(driver %s\)" % (want, re.escape(driver))
    eq(log_count(d, line), 1, "NVML-3a (%s): 'NVML placement list v%d (driver %s)' is logged "
       "once over %d refreshes" % (BRANCH, want, driver, PASSES))
    eq(log_count(d, r".*NVML placement list v%d.*" % other), 0,
       "NVML-3a (%s): v%d is never logged" % (BRANCH, other))
    eq(unavailable_total(c), 0,
       'NVML-3a, NVML-12 (%s): nothing counted as unavailable' % BRANCH)
    eq(log_count(d, r".*reason=unavailable.*"), 0,
       "NVML-3a, NVML-13 (%s): no fallback warning for the host" % BRANCH)
    claim_and_release(c, "PLACE-4 (%s)" % BRANCH, MIXED_PF)
    eq(log_count(d, line), 1, "NVML-3a (%s): still one version line after a claim" % BRANCH)


def main():
    if BRANCH not in VERSIONS:
        print("usage: %s VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU r570|r550|none" % sys.argv[0],
              file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="vgpud-nvml-%s-" % BRANCH, dir=os.environ.get("TMPDIR", "/tmp"))
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work, reconcile="5s")
        d, c = start(work, BRANCH, config, secret, os.path.join(work, "api.sock"))
        daemons.append(d)
        if c:
            run_group("nvml-" + BRANCH, lambda: check_library(c, d))
            daemons.remove(d)
            stop(d, " (%s)" % BRANCH)
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
