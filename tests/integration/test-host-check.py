#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# test-host-check.py VGPUD FAKE_NVML GOLDEN_DIR default|r535
#
# `vgpud host-check` (HOSTCHK-1, HOSTCHK-2, HOSTCHK-3) against the simulator, one broken part at
# a time. The run reads the host only through the roots the test hands it: sysfs_root and
# dev_root are the simulator's, proc_root a directory of the test's own (a cpuinfo with vmx, and
# /proc/locks), data_dir the simulator's data/, qemu_binary a stand-in script that prints a
# `-device help` list, nvml_library the fake NVML.
#
#  default  SIM-20's host: every check passes; the same with --json; then, one at a time: SR-IOV
#           off on one PF (`sriov <pf> off`), no IOMMU groups (an open fault on
#           kernel/iommu_groups), NVML missing (nvml_library names no file), a QEMU without
#           vfio-pci, an invalid configuration file (the --set roots still apply), another
#           vgpud's lock held (the test holds it), a data_dir with no file to try O_DIRECT on;
#           and the 10 s bound: a sysfs read that hangs, and NVML hung (HOSTCHK-1)
#  r535     an R535 driver on a vendor-VFIO host (GEN-11)
#
# The outputs are pinned by golden files, tests/data/golden/host-check/<case>.txt, after the
# run's own paths are replaced (@SIM@ the mount, @WORK@ the test's directory) and the two
# host-specific lines are masked: qemu-img and dnsmasq (looked for at CFG-3's paths, outside any
# root) and the free space figures. VGPUD_UPDATE_GOLDEN=1 rewrites the goldens instead.
#
# Every run must write nothing (HOSTCHK-1): the simulator's state.json (its modification time
# moves with every store under sys/) and forbidden-writes stay as they were, no VF saw a write
# descriptor, and the data and runtime directories list the same entries with the same times.
#
# Run by tests/integration/run-with-sim.sh (a private PID namespace, SIM-21). Output is TAP.
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import (  # noqa: E402 (after the path)
    eq, exit_status, ok, plan, run_group, sim_context, sim_ctl, sim_state, write_secret)

VGPUD, FAKE_NVML, GOLDEN, KIND = sys.argv[1:5]
UPDATE = os.environ.get("VGPUD_UPDATE_GOLDEN") == "1"
MNT = sim_context()["MNT"]
CTL = sim_context()["CTL"]
BOUND = 10.0  # HOSTCHK-1
SLACK = 2.0   # process start and exit around the bound, on a loaded 2-core machine
CHECKS = ["config", "secret", "cpu", "kvm", "iommu", "vfio", "framework", "sriov", "driver",
          "nvml", "qemu", "qemu-img", "dnsmasq", "tun", "data-dir", "free-space", "runtime-dir",
          "lock"]
LINE = re.compile(r"(PASS|WARN|FAIL)  (\S+) {2,}(.*?)(?:  -> (.*))?")
CPUINFO = "".join("processor\t: %d\nflags\t\t: fpu vme de pse vmx sse sse2\n\n" % i
                  for i in range(4))
DEVICES = ["vfio-pci", "virtio-net-pci", "virtio-blk-pci"]


def stand_in_qemu(path, devices):
    """A qemu_binary that knows `-device help` only, listing devices as QEMU 7.2 does."""
    lines = "".join('name "%s", bus PCI\n' % d for d in devices)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n[ \"$*\" = \"-device help\" ] || exit 1\ncat <<'EOF'\n"
                "Network devices:\n%sEOF\n" % lines)
    os.chmod(path, 0o755)


def make_work():
    work = tempfile.mkdtemp(prefix="host-check.")
    os.mkdir(os.path.join(work, "proc"))
    with open(os.path.join(work, "proc", "cpuinfo"), "w") as f:
        f.write(CPUINFO)
    os.symlink("/proc/locks", os.path.join(work, "proc", "locks"))
    os.mkdir(os.path.join(work, "run"))
    write_secret(work)
    stand_in_qemu(os.path.join(work, "qemu"), DEVICES)
    stand_in_qemu(os.path.join(work, "qemu-no-vfio"), DEVICES[1:])
    # A data directory as vgpud leaves it: the O_DIRECT probe opens a file that is there.
    os.makedirs(os.path.join(MNT, "data", "instances"), exist_ok=True)
    os.makedirs(os.path.join(MNT, "data", "gpu"), exist_ok=True)
    with open(os.path.join(MNT, "data", "gpu", "vf-health.json"), "w") as f:
        f.write('{\n  "version": 2,\n  "records": []\n}\n')
    os.makedirs(os.path.join(MNT, "data", "empty"), exist_ok=True)
    return work


def sets(work, **over):
    keys = {"sysfs_root": MNT + "/sys", "dev_root": MNT + "/dev", "proc_root": work + "/proc",
            "data_dir": MNT + "/data", "runtime_dir": work + "/run",
            "jwt_secret_file": work + "/jwt.secret", "nvml_library": FAKE_NVML,
            "qemu_binary": work + "/qemu"}
    keys.update(over)
    out = []
    for k, v in keys.items():
        out += ["--set", "%s=%s" % (k, v)]
    return out


def tree(top):
    """Every entry below top with its type, size and times: what a write would change."""
    out = []
    for root, dirs, files in os.walk(top):
        for name in sorted(dirs + files):
            st = os.lstat(os.path.join(root, name))
            out.append((os.path.relpath(os.path.join(root, name), top), st.st_mode, st.st_size,
                        st.st_mtime_ns, st.st_ctime_ns))
    return sorted(out)


def snapshot(work, with_state=True):
    snap = {"data": tree(os.path.join(MNT, "data")), "run": tree(os.path.join(work, "run"))}
    with open(os.path.join(CTL, "forbidden-writes")) as f:
        snap["forbidden"] = f.read()
    if with_state:
        snap["state_mtime"] = os.stat(os.path.join(CTL, "state.json")).st_mtime_ns
        state = sim_state()
        snap["state"] = state
        snap["writes"] = [vf["max_concurrent_writes"] for g in state["gpus"] for vf in g["vfs"]]
    return snap


def run(work, label, args, with_state=True, timeout=BOUND + 10):
    """Runs host-check; returns (exit status, stdout, stderr, seconds). Checks that it wrote
    nothing (HOSTCHK-1)."""
    before = snapshot(work, with_state)
    begun = time.monotonic()
    p = subprocess.run([VGPUD, "host-check"] + args, stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - begun
    after = snapshot(work, with_state)
    diff = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    ok(not diff, "HOSTCHK-1: %s: nothing written (sysfs, dev, data_dir, runtime_dir)" % label,
       json.dumps(diff, default=str)[:3000])
    ok(all(w == 0 for w in after.get("writes", [])),
       "HOSTCHK-1: %s: no VF attribute opened for writing" % label)
    eq(after["forbidden"], "", "SIM-16: %s: no forbidden write" % label)
    return p.returncode, p.stdout, p.stderr, took


def parse(out):
    """The lines as (status, check, evidence, remedy), or None for a line of another shape."""
    return [(m.group(1), m.group(2), m.group(3), m.group(4)) if m else None
            for m in (LINE.fullmatch(l) for l in out.splitlines())]


def check_shape(label, out):
    """HOSTCHK-1: one line per check, in order, each `STATUS  check  evidence[  -> remedy]`,
    a FAIL always with what to do."""
    lines = parse(out)
    ok(None not in lines, "HOSTCHK-1: %s: every line reads STATUS  check  evidence" % label, out)
    lines = [l for l in lines if l]
    eq([l[1] for l in lines], CHECKS, "HOSTCHK-2: %s: one line per check, in order" % label)
    ok(all(l[3] for l in lines if l[0] == "FAIL"),
       "HOSTCHK-1: %s: each FAIL says what to do" % label, out)
    return {l[1]: l for l in lines}


HELPERS = {"qemu-img": "/usr/bin/qemu-img", "dnsmasq": "/usr/sbin/dnsmasq"}


def normalise(label, out, work):
    """The output as the golden holds it: the run's paths named, host-specific parts masked."""
    out = out.replace(work, "@WORK@").replace(MNT, "@SIM@")
    lines = []
    for line in out.splitlines():
        m = LINE.fullmatch(line)
        if m and m.group(2) in HELPERS:
            # Present or not depends on the machine; either way the line has one of two forms.
            path = HELPERS[m.group(2)]
            ok(re.fullmatch(r"PASS  \S+ {2,}%s present \(for [^)]+\)" % re.escape(path), line)
               or re.fullmatch(r"WARN  \S+ {2,}%s: .*; not needed yet \(.*\)  -> install .*"
                               % re.escape(path), line),
               "HOSTCHK-2: %s: the %s line reads PASS present or WARN not needed yet"
               % (label, m.group(2)), line)
            line = "@HOST@  %-11s  (present or not on this machine)" % m.group(2)
        elif m and m.group(2) == "free-space":
            line = re.sub(r"\d+(\.\d)? (B|[KMGTP]iB) free of \d+(\.\d)? (B|[KMGTP]iB) \(\d+%",
                          "<free> free of <size> (<n>%", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


def golden(name, label, out, work):
    text = normalise(label, out, work)
    path = os.path.join(GOLDEN, name + ".txt")
    if UPDATE:
        with open(path, "w") as f:
            f.write(text)
        ok(True, "HOSTCHK-3: %s: golden %s written" % (label, os.path.basename(path)))
        return
    with open(path) as f:
        want = f.read()
    ok(text == want, "HOSTCHK-3: %s: output as in golden/host-check/%s.txt" % (label, name),
       "".join("%s\n" % l for l in _diff(want, text)))


def _diff(want, got):
    import difflib
    return list(difflib.unified_diff(want.splitlines(), got.splitlines(), "golden", "output",
                                     lineterm=""))[:60]


def case(work, name, label, args, want_rc, with_state=True):
    rc, out, err, took = run(work, label, args, with_state)
    eq(rc, want_rc, "HOSTCHK-1: %s: exit status %d" % (label, want_rc))
    ok(took < BOUND + SLACK, "HOSTCHK-1: %s: done within the 10 s bound (%.1f s)" % (label, took))
    lines = check_shape(label, out)
    if name:
        golden(name, label, out, work)
    return lines, out, err


# ---- the cases ------------------------------------------------------------------------------


def test_default(work):
    lines, out, err = case(work, "default", "SIM-20's host", sets(work), 0)
    ok(all(l[0] == "PASS" for c, l in lines.items() if c not in HELPERS),
       "HOSTCHK-2: SIM-20's host: every check passes", out)
    eq(err, "", "HOSTCHK-1: SIM-20's host: nothing on stderr")

    rc, js, _, _ = run(work, "--json", sets(work) + ["--json"])
    eq(rc, 0, "HOSTCHK-1: --json: exit status 0")
    results = json.loads(js)
    want = [{"check": l[1], "status": l[0], "evidence": l[2], "remedy": l[3]}
            for l in (lines[c] for c in CHECKS)]
    eq(results, want, "HOSTCHK-1: --json: {check, status, evidence, remedy} for each line")


def test_no_sriov(work):
    pf = "0001:c8:00.0"
    sim_ctl("sriov %s off" % pf)
    try:
        lines, _, _ = case(work, "no-sriov", "SR-IOV off on %s" % pf, sets(work), 1)
        eq([c for c, l in lines.items() if l[0] != "PASS" and c not in HELPERS], ["sriov"],
           "HOSTCHK-3: SR-IOV off: only the sriov check fails")
    finally:
        sim_ctl("sriov %s on" % pf)


def test_no_iommu(work):
    sim_ctl("fault open sys/kernel/iommu_groups ENOENT")
    try:
        lines, _, _ = case(work, "no-iommu", "no IOMMU groups", sets(work), 1)
        eq([c for c, l in lines.items() if l[0] != "PASS" and c not in HELPERS], ["iommu"],
           "HOSTCHK-3: no IOMMU groups: only the iommu check fails")
    finally:
        sim_ctl("clear-faults")


def test_nvml_missing(work):
    missing = os.path.join(work, "missing", "libnvidia-ml.so.1")
    lines, _, _ = case(work, "nvml-missing", "NVML missing", sets(work, nvml_library=missing), 1)
    eq([c for c, l in lines.items() if l[0] != "PASS" and c not in HELPERS], ["nvml"],
       "HOSTCHK-3: NVML missing: only the nvml check fails")


def test_qemu_without_vfio(work):
    lines, _, _ = case(work, "qemu-no-vfio-pci", "QEMU without vfio-pci",
                       sets(work, qemu_binary=work + "/qemu-no-vfio"), 1)
    eq([c for c, l in lines.items() if l[0] != "PASS" and c not in HELPERS], ["qemu"],
       "HOSTCHK-3: QEMU without vfio-pci: only the qemu check fails")


def test_config_invalid(work):
    bad = os.path.join(work, "bad.yaml")
    with open(bad, "w") as f:
        f.write("log_level: info\ngpu:\n  sentinel_intervall: 5s\n")
    lines, _, err = case(work, "config-invalid", "an invalid configuration",
                         ["--config", bad] + sets(work), 1)
    eq([c for c, l in lines.items() if l[0] != "PASS" and c not in HELPERS], ["config"],
       "HOSTCHK-2, CFG-4: an invalid file fails the config check alone; the --set roots apply")
    eq(err, "", "HOSTCHK-1: an invalid configuration is no usage error (nothing on stderr)")


def test_lock_held(work):
    """CFG-9: a lock holder (this test, as a second vgpud would see the first) fails the lock
    check, and host-check does not take the lock itself: the holder keeps it."""
    path = os.path.join(work, "run", "vgpud.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        lines, out, _ = case(work, None, "a vgpud holds the lock", sets(work), 1)
        want = ("FAIL", "lock", "another vgpud holds %s (pid %d): a second one would not start"
                % (path, os.getpid()))
        ok(lines["lock"][:3] == want, "CFG-9: the lock check names the lock file and its holder",
           "got:  %r\nwant: %r" % (lines["lock"][:3], want))
        eq([c for c, l in lines.items() if l[0] != "PASS" and c not in HELPERS], ["lock"],
           "HOSTCHK-3: a lock holder fails the lock check alone")
        golden("lock-held", "a vgpud holds the lock", out.replace("(pid %d)" % os.getpid(),
                                                                  "(pid @PID@)"), work)
    finally:
        os.close(fd)
    # And once it is released, nothing holds it: host-check never took it.
    lines, _, _ = case(work, None, "the lock released", sets(work), 0)
    eq(lines["lock"][0], "PASS", "CFG-9: a released lock file passes")


def test_empty_data_dir(work):
    lines, out, _ = case(work, None, "a data_dir without files",
                         sets(work, data_dir=MNT + "/data/empty"), 0)
    want = ("WARN", "data-dir", "%s/data/empty: fuse, no file in it to try O_DIRECT on and not a "
            "filesystem known to support it" % MNT)
    ok(lines["data-dir"][:3] == want,
       "HOSTCHK-2: no file to open with O_DIRECT and an unknown filesystem: a warning",
       "got:  %r\nwant: %r" % (lines["data-dir"][:3], want))


def test_bound_sysfs_hang(work):
    """HOSTCHK-1: a read that never returns (a hung driver) ends the run at 10 s: the check in
    progress fails, the ones after it are not run."""
    sim_ctl("fault open sys/kernel/iommu_groups hang")
    try:
        rc, out, _, took = run(work, "a hung sysfs read", sets(work), with_state=False)
    finally:
        sim_ctl("clear-faults")
    eq(rc, 1, "HOSTCHK-1: a hung sysfs read: exit status 1")
    ok(BOUND - 0.5 <= took < BOUND + SLACK,
       "HOSTCHK-1: a hung sysfs read: the run ends at the 10 s bound (%.1f s)" % took)
    lines = check_shape("a hung sysfs read", out)
    ok(lines["iommu"][:3] == ("FAIL", "iommu", "no answer within the 10 s bound of host-check"),
       "HOSTCHK-1: the hung check fails", out)
    after = CHECKS[CHECKS.index("iommu") + 1:]
    ok(all(lines[c][:3] == ("FAIL", c, "not run: the 10 s bound was reached") for c in after),
       "HOSTCHK-1: the checks after it are reported as not run", out)


def test_bound_nvml_hang(work):
    """HOSTCHK-1, NVML-10: NVML hung in a call: the nvml check fails within its share of the
    bound and the checks after it still run."""
    sim_ctl("nvml hang on")
    try:
        rc, out, _, took = run(work, "NVML hung", sets(work))
    finally:
        sim_ctl("nvml hang off")
    eq(rc, 1, "HOSTCHK-1: NVML hung: exit status 1")
    ok(took < BOUND, "HOSTCHK-1: NVML hung: done before the bound (%.1f s)" % took)
    lines = check_shape("NVML hung", out)
    ok(lines["nvml"][0] == "FAIL" and lines["nvml"][2].startswith("NVML did not answer: "),
       "HOSTCHK-2: NVML hung: the nvml check fails on the timeout", out)
    eq([c for c, l in lines.items() if l[0] != "PASS" and c not in HELPERS], ["nvml"],
       "HOSTCHK-1: NVML hung: the other checks still ran and passed")


def test_usage(work):
    for args, label in ((["--bogus"], "an unknown option"), (["extra"], "an argument"),
                        (["--config"], "--config without a value"),
                        (["--json=1"], "--json with a value")):
        p = subprocess.run([VGPUD, "host-check"] + args, capture_output=True, text=True,
                           timeout=BOUND)
        ok(p.returncode == 2 and p.stdout == "" and "usage: vgpud host-check" in p.stderr,
           "HOSTCHK-1: %s is a usage error (exit 2)" % label, (p.returncode, p.stdout, p.stderr))


def test_r535(work):
    lines, out, _ = case(work, "r535", "an R535 driver on vendor VFIO", sets(work), 1)
    eq([c for c, l in lines.items() if l[0] != "PASS" and c not in HELPERS], ["driver"],
       "HOSTCHK-3, GEN-11: R535 on vendor VFIO fails the driver check alone")


def main():
    work = make_work()
    try:
        if KIND == "r535":
            run_group("r535", lambda: test_r535(work))
        else:
            for name, fn in (("default", test_default), ("no-sriov", test_no_sriov),
                             ("no-iommu", test_no_iommu), ("nvml-missing", test_nvml_missing),
                             ("qemu-no-vfio-pci", test_qemu_without_vfio),
                             ("config-invalid", test_config_invalid),
                             ("lock-held", test_lock_held), ("empty-data-dir", test_empty_data_dir),
                             ("usage", test_usage), ("bound-nvml", test_bound_nvml_hang),
                             ("bound-sysfs", test_bound_sysfs_hang)):
                run_group(name, lambda fn=fn: fn(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        plan()
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
