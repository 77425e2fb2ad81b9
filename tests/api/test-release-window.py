#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-release-window.py VGPUD OPENAPI_YAML FAKE_NVML FAKE_QEMU
#
# REL-2 across a release: between the moment a stop has released its VF in hardware and the
# moment the record without the claim is on disk, the disk still says the VF is the stopped
# instance's. A create in that window must not take the VF: with its own claim written and a
# crash before the stop's record lands, two records would claim one VF. On a host with one VF
# the simulator holds the stop's Stopped write (SIM-14 `fault write … delay`), a create asks
# for the VF meanwhile and is refused, and the VF is free again once the write has landed.
# Runs under tests/sim/run-sim-test.sh (a private PID namespace with vgpu-sim mounted).
import os
import sys
import tempfile
import threading

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_instances import (  # noqa: E402 (after the path)
    PROFILE, create, create_running, current_type, delete_all, disk_claims, finish_run,
    make_images, post, record, vf_of, vmm_config)
from vgpud_test import (  # noqa: E402
    eq, exit_status, ok, poll, run_group, sim_ctl, start, stop, write_secret)

HOLD_MS = 8000  # the Stopped write's delay: far more than a create takes


def claims_on_disk(vf):
    return sorted(disk_claims().get(vf, []))


def check(c):
    a = create_running(c, "window-a", PROFILE)
    vf = vf_of(a)
    tmp = "data/instances/%s/instance.json.tmp" % a["id"]
    # The stop writes Stopping (let through), releases the VF, then writes Stopped (held).
    sim_ctl("fault write %s delay:1 count=1" % tmp)
    sim_ctl("fault write %s delay:%d count=1" % (tmp, HOLD_MS))
    answer = []
    stopper = threading.Thread(target=lambda: answer.append(post(c, a["id"], "stop")))
    stopper.start()
    try:
        released = poll(lambda: current_type(vf) == "0", 20, 0.02)
        ok(released, "INST-15: the stop releases %s in hardware" % vf)
        eq(claims_on_disk(vf), [a["id"]],
           "INST-1: while the Stopped write is held, the record on disk still claims the VF")

        # REL-2: the create comes while the disk still names the stopped instance.
        st, b = create(c, "window-b", PROFILE)
        on_disk = claims_on_disk(vf)
        ok(a["id"] in on_disk, "the Stopped write was still held when the create was answered "
           "(else this check proves nothing: raise HOLD_MS)", on_disk)
        eq(on_disk, [a["id"]], "REL-2: no second record claims the VF meanwhile")
        ok(st == 409 and b.get("code") == "insufficient_resources",
           "REL-2, PLACE-1: a create while the release is not yet recorded does not take the "
           "VF (409 insufficient_resources)", (st, b))
        eq(current_type(vf), "0", "the refused create left the VF unconfigured")
    finally:
        stopper.join(60)
    st, b = answer[0] if answer else (None, None)
    ok(st == 200 and b.get("state") == "Stopped" and "device_path" not in b.get("gpu", {}),
       "INST-15: the stop answers 200 Stopped without the claim once its write lands", (st, b))
    ok("device_path" not in (record(a["id"]) or {}).get("gpu", {}),
       "INST-1: the record on disk carries the release")

    c2 = create_running(c, "window-c", PROFILE)
    eq(vf_of(c2), vf, "PLACE-1: once the release is recorded, the VF is placeable again")
    eq(claims_on_disk(vf), [c2["id"]], "REL-2: one record claims the VF, the new instance's")


def main():
    work = tempfile.mkdtemp(prefix="vgpud-window-")
    daemons = []
    try:
        make_images()
        secret = write_secret(work)
        config = vmm_config(os.path.join(work, "vgpud.yaml"), work)
        d, c = start(work, "window", config, secret, os.path.join(work, "api.sock"))
        daemons.append(d)
        if c:
            run_group("release window", lambda: check(c))
            eq(delete_all(c), [], "every instance deletes")
            stop(d)
    finally:
        finish_run(daemons, work)
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
