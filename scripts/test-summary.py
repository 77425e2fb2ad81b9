#!/usr/bin/env python3
"""Prints "N passed, N failed, N skipped" over the meson test logs of the given build dirs.

meson writes one JSON object per test to meson-logs/testlog.json. A TAP test counts once, by
its overall result. A build dir without a log counts as one failure: its suite never ran.
Exit status 1 when anything failed.
"""
import json
import os
import sys

passed = failed = skipped = 0
for build in sys.argv[1:]:
    log = os.path.join(build, "meson-logs", "testlog.json")
    if not os.path.exists(log):
        print(f"{build}: no test log", file=sys.stderr)
        failed += 1
        continue
    with open(log) as f:
        for line in f:
            if not line.strip():
                continue
            result = json.loads(line).get("result")
            if result in ("OK", "EXPECTEDFAIL"):
                passed += 1
            elif result == "SKIP":
                skipped += 1
            else:
                failed += 1
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
