#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# inventory-cli.sh VGPUD — the failure paths of `vgpud inventory` itself: usage errors exit 2
# with one message and the usage line, an unusable root or output exits 1 with one error line.
set -eu

[ $# -eq 1 ] || {
	echo "usage: $0 VGPUD" >&2
	exit 2
}
vgpud=$1
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vgpud-cli.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' INT TERM

failed=0
usage="usage: vgpud inventory [--sysfs-root DIR] [--json]"

# expect RC STDERR ARGS... — runs inventory and checks its exit status and whole stderr.
expect() {
	want_rc=$1
	want_err=$2
	shift 2
	rc=0
	"$vgpud" inventory "$@" >"$tmp/out" 2>"$tmp/err" || rc=$?
	printf '%s\n' "$want_err" >"$tmp/want"
	if [ "$rc" -ne "$want_rc" ] || ! diff -u "$tmp/want" "$tmp/err"; then
		echo "FAIL: inventory $* exited $rc (want $want_rc)" >&2
		failed=1
	fi
}

expect 2 "vgpud inventory: unknown option --bogus
$usage" --bogus
expect 2 "vgpud inventory: unknown option -x
$usage" -x
expect 2 "vgpud inventory: option --sysfs-root needs a value
$usage" --sysfs-root
expect 2 "vgpud inventory: option --json=yes takes no value
$usage" --json=yes
expect 2 "vgpud inventory: unexpected argument \"extra\"
$usage" --json extra
expect 2 "vgpud inventory: --sysfs-root must be an absolute path, not \"sys\"
$usage" --sysfs-root sys
expect 1 "vgpud inventory: open sysfs root $tmp/missing: No such file or directory" \
	--sysfs-root "$tmp/missing"

# --help prints the usage on stdout and succeeds.
rc=0
"$vgpud" inventory --help >"$tmp/out" 2>"$tmp/err" || rc=$?
if [ "$rc" -ne 0 ] || [ "$(cat "$tmp/out")" != "$usage" ] || [ -s "$tmp/err" ]; then
	echo "FAIL: inventory --help" >&2
	failed=1
fi

# Output that cannot be written is a failure, not a silent success.
sh "$here/mkhost.sh" "$tmp/sys" domain-0001
for mode in --json ""; do
	rc=0
	# shellcheck disable=SC2086 # an empty mode is no argument
	"$vgpud" inventory --sysfs-root "$tmp/sys" $mode >/dev/full 2>"$tmp/err" || rc=$?
	if [ "$rc" -ne 1 ] ||
		[ "$(cat "$tmp/err")" != "vgpud inventory: write output: No space left on device" ]; then
		echo "FAIL: inventory $mode to a full device exited $rc:" >&2
		cat "$tmp/err" >&2
		failed=1
	fi
done

exit "$failed"
