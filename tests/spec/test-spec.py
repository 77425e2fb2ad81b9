#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The requirements travel with the code: docs/SPEC.md is the specification that tests and code
# cite by ID, so a reader who meets `INST-15` in a test finds it in the tree. Prints TAP.
#
#  - docs/SPEC.md defines each requirement ID once;
#  - every ID cited in the tree (src/, tests/, fuzz/, sim/, docs/, api/, packaging/, scripts/,
#    bench/, README.md) with a prefix the specification uses is one it defines, so a citation
#    cannot name a requirement that does not exist (or no longer does);
#  - where the specification's working copy sits beside the checkout (../shared/SPEC.md, absent
#    in a clean clone), docs/SPEC.md is byte for byte that file.
#
# Usage: test-spec.py SOURCE_ROOT
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from vgpud_test import eq, exit_status, ok, plan, skip  # noqa: E402

if len(sys.argv) != 2:
    sys.exit("usage: test-spec.py SOURCE_ROOT")
ROOT = os.path.abspath(sys.argv[1])
SPEC = os.path.join(ROOT, "docs", "SPEC.md")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "SPEC.md")

SCANNED = ["src", "tests", "fuzz", "sim", "docs", "api", "packaging", "scripts", "bench",
           "README.md"]
TEXT_SUFFIXES = (".c", ".h", ".py", ".sh", ".md", ".yaml", ".yml", ".build", ".txt", ".json",
                 ".1", ".5", ".8", ".js", ".html", ".css", ".map", ".txt", ".in")
# "- **INST-2** ..." as a list item, or "  **NVML-3a** ..." as a paragraph under one.
DEFINED_RE = re.compile(r"^\s*(?:- )?\*\*([A-Z][A-Z0-9]*-[0-9]+[a-z]?)\*\*", re.M)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def cited_files():
    for top in SCANNED:
        path = os.path.join(ROOT, top)
        if os.path.isfile(path):
            yield path
            continue
        for d, dirs, files in os.walk(path):
            dirs[:] = [x for x in dirs if not x.startswith(".")]
            for name in files:
                p = os.path.join(d, name)
                if p != SPEC and name.endswith(TEXT_SUFFIXES):
                    yield p


spec = read(SPEC).decode("utf-8")
defined = DEFINED_RE.findall(spec)
repeated = sorted({i for i in defined if defined.count(i) > 1})
eq(repeated, [], "docs/SPEC.md defines each requirement ID once")
ok(len(defined) > 100, "docs/SPEC.md defines the requirements (%d IDs)" % len(defined))

# Only the prefixes the specification uses are IDs: UTF-8, SHA-256 and RFC 6455 are not.
prefixes = sorted({i.split("-")[0] for i in defined})
# A ticket number in an example ("ticket OPS-1234") has the same form and is no citation.
cited_re = re.compile(r"(?<![A-Za-z0-9_])(?<!ticket )(%s)-([0-9]+[a-z]?)(?![A-Za-z0-9_])"
                      % "|".join(prefixes))
unknown = {}
for path in cited_files():
    text = read(path).decode("utf-8", "replace")
    for m in cited_re.finditer(text):
        ident = "%s-%s" % m.groups()
        if ident not in defined:
            unknown.setdefault(ident, os.path.relpath(path, ROOT))
eq(sorted("%s (%s)" % kv for kv in unknown.items()), [],
   "every requirement ID cited in the tree is defined in docs/SPEC.md")

if os.path.exists(SHARED):
    same = read(SHARED) == read(SPEC)
    ok(same, "docs/SPEC.md is ../shared/SPEC.md",
       None if same else "they differ; sync with: cp ../shared/SPEC.md docs/SPEC.md")
else:
    skip("docs/SPEC.md is ../shared/SPEC.md", "no ../shared/SPEC.md beside this checkout")

plan()
sys.exit(exit_status())
