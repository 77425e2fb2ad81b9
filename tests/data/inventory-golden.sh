#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# inventory-golden.sh VGPUD KIND — builds the fixture host KIND with mkhost.sh in a temporary
# directory, runs `VGPUD inventory` on it and compares with the goldens in golden/:
#   KIND.json  stdout of `inventory --json`; the run must exit 0
#   KIND.txt   stdout of `inventory` (text); the run must exit 0
#   KIND.err   stderr of `inventory --json` (log lines, the error line); without it stderr must
#              be empty. Without KIND.json and KIND.txt the run must exit 1 with empty stdout.
# VGPUD_UPDATE_GOLDEN=1 rewrites the goldens that exist (and KIND.json / KIND.err as needed)
# instead of comparing. The temporary directory is removed on exit.
set -eu

[ $# -eq 2 ] || {
	echo "usage: $0 VGPUD KIND" >&2
	exit 2
}
vgpud=$1
kind=$2
here=$(cd "$(dirname "$0")" && pwd)
golden=$here/golden
update=${VGPUD_UPDATE_GOLDEN:-0}

tmp=$(mktemp -d "${TMPDIR:-/tmp}/vgpud-golden.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

sh "$here/mkhost.sh" "$tmp/sys" "$kind"

failed=0

# compare GOLDEN ACTUAL — diffs, or copies ACTUAL over GOLDEN in update mode.
compare() {
	if [ "$update" = 1 ]; then
		cp "$2" "$1"
	elif ! diff -u "$1" "$2"; then
		echo "FAIL: output differs from ${1#"$here"/}" >&2
		failed=1
	fi
}

# run NAME ARGS... — runs inventory, leaving $tmp/NAME.{out,err} and $rc.
run() {
	name=$1
	shift
	rc=0
	"$vgpud" inventory --sysfs-root "$tmp/sys" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
}

run json --json
if [ -f "$golden/$kind.json" ] || { [ "$update" = 1 ] && [ "$rc" -eq 0 ]; }; then
	[ "$rc" -eq 0 ] || {
		echo "FAIL: inventory --json exited $rc, want 0" >&2
		failed=1
	}
	compare "$golden/$kind.json" "$tmp/json.out"
elif [ ! -f "$golden/$kind.txt" ]; then
	# A failing host: exit 1, nothing on stdout, the error line on stderr.
	[ "$rc" -eq 1 ] || {
		echo "FAIL: inventory --json exited $rc, want 1" >&2
		failed=1
	}
	[ ! -s "$tmp/json.out" ] || {
		echo "FAIL: a failed inventory printed to stdout:" >&2
		cat "$tmp/json.out" >&2
		failed=1
	}
fi

if [ -f "$golden/$kind.err" ] || { [ "$update" = 1 ] && [ -s "$tmp/json.err" ]; }; then
	compare "$golden/$kind.err" "$tmp/json.err"
elif [ -s "$tmp/json.err" ]; then
	echo "FAIL: unexpected stderr:" >&2
	cat "$tmp/json.err" >&2
	failed=1
fi

if [ -f "$golden/$kind.txt" ]; then
	run text
	[ "$rc" -eq 0 ] || {
		echo "FAIL: inventory exited $rc, want 0" >&2
		failed=1
	}
	compare "$golden/$kind.txt" "$tmp/text.out"
fi

exit "$failed"
