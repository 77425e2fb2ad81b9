#!/usr/bin/env python3
"""Prints "N passed, N failed, N skipped" over the meson test logs of the given build dirs.

meson writes one JSON object per test to meson-logs/testlog.json. A TAP test counts once, by
its overall result. A build dir without a log counts as one failure: its suite never ran.
An argument ending in .tap is the saved output of one TAP script run outside meson
(tests/deb/test-deb.sh), counted once too: failed on a "not ok" without TODO, a "Bail out!",
no plan or a plan that does not match, skipped on "1..0", passed otherwise; a missing file
is a failure. Exit status 1 when anything failed.

Above the count, each failed test is named with its failed TAP points and the diagnostics
after them, so the tail of a CI log says what failed without the whole log.
"""
import json
import os
import re
import sys


def tap_result(path):
    with open(path, errors="replace") as f:
        lines = f.read().splitlines()
    plan = None
    points = 0
    for line in lines:
        if line.startswith("Bail out!"):
            return "FAIL"
        m = re.match(r"1\.\.(\d+)", line)
        if m:
            plan = int(m.group(1))
        elif re.match(r"(not )?ok\b", line):
            points += 1
            if line.startswith("not ok") and "# TODO" not in line:
                return "FAIL"
    if plan == 0:
        return "SKIP"
    return "OK" if plan == points else "FAIL"


def failed_points(output, limit=40):
    """The "not ok" lines of a TAP output with the "#" lines after each, at most limit."""
    out = []
    keep = False
    for line in output.splitlines():
        if re.match(r"(not )?ok\b", line):
            keep = line.startswith("not ok") and "# TODO" not in line
        elif not line.startswith("#"):
            keep = False
        if keep and len(out) < limit:
            out.append("    " + line[:300])
    return out


passed = failed = skipped = 0
for build in sys.argv[1:]:
    if build.endswith(".tap"):
        if not os.path.exists(build):
            print(f"{build}: no TAP output", file=sys.stderr)
            failed += 1
            continue
        result = tap_result(build)
        passed += result == "OK"
        skipped += result == "SKIP"
        failed += result == "FAIL"
        continue
    log = os.path.join(build, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        print(f"{build}: no test log", file=sys.stderr)
        failed += 1
        continue
    with open(log) as f:
        for line in f:
            if not line.strip():
                continue
            test = json.loads(line)
            result = test.get("result")
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
                print(f"{build}: {test.get('name')}: {result}")
                for point in failed_points(test.get("stdout") or ""):
                    print(point)
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
