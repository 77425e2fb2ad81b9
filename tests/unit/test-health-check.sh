#!/bin/sh
# `vgpud health-check FILE [--threshold N]` (HEALTH-5, HEALTH-8, HEALTH-9): offline validation of
# a VF health file. Prints TAP. Usage: test-health-check.sh VGPUD DATA_DIR
set -u
vgpud=$1
data=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-health-check-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

n=0
failed=0

# check NAME STATUS OUTPUT ARGS...: runs vgpud health-check ARGS, compares status and output.
check() {
        name=$1 want_status=$2 want_output=$3
        shift 3
        n=$((n + 1))
        got_output=$("$vgpud" health-check "$@" 2>&1)
        got_status=$?
        if [ "$got_status" = "$want_status" ] && [ "$got_output" = "$want_output" ]; then
                echo "ok $n - $name"
        else
                echo "not ok $n - $name"
                echo "# status: got $got_status, want $want_status"
                printf '%s\n' "$got_output" | sed 's/^/# got:  /'
                printf '%s\n' "$want_output" | sed 's/^/# want: /'
                failed=$((failed + 1))
        fi
}

# unchanged NAME FILE SUM: the checker never writes (no re-evaluation write, no temp file).
unchanged() {
        n=$((n + 1))
        if [ "$(cksum < "$2")" = "$3" ] && [ ! -e "$2.tmp" ]; then
                echo "ok $n - $1"
        else
                echo "not ok $n - $1"
                failed=$((failed + 1))
        fi
}

usage="usage: vgpud health-check FILE [--threshold N]"

echo "1..12"
cp "$data/example.json" "$data/upstream.json" "$data/bad-version.json" "$data/drains.json" "$tmp/"
sum=$(cksum < "$tmp/upstream.json")

check "HEALTH-1 the SPEC example is valid" 0 "ok: 1 records, 1 quarantined" "$tmp/example.json"
check "HEALTH-3 an upstream file is valid" 0 "ok: 3 records, 2 quarantined" "$tmp/upstream.json"
check "HEALTH-3, HEALTH-26 a file with drains is valid" 0 "ok: 1 records, 1 quarantined" \
        "$tmp/drains.json"
check "HEALTH-8 re-evaluation with a lower threshold is counted" 0 \
        "ok: 3 records, 3 quarantined" "$tmp/upstream.json" --threshold 1
unchanged "HEALTH-8 the checker does not write the re-evaluation" "$tmp/upstream.json" "$sum"
check "HEALTH-9 no re-evaluation while the breaker is open" 0 \
        "ok: 1 records, 1 quarantined" --threshold=1 "$tmp/example.json"
check "HEALTH-5 invalid version" 1 "validate VF health state: unsupported version 2" \
        "$tmp/bad-version.json"
check "HEALTH-5 missing file" 1 "read VF health state: No such file or directory" \
        "$tmp/missing.json"
printf '{"version": 1, "records": [' > "$tmp/truncated.json"
check "HEALTH-5 truncated JSON" 1 \
        "unmarshal VF health state: ']' expected near end of file (line 1, column 27)" \
        "$tmp/truncated.json"
check "usage: no FILE" 2 "vgpud health-check: missing FILE
$usage"
check "usage: threshold out of range (HEALTH-7)" 2 \
        "vgpud health-check: --threshold must be an integer between 1 and 64, got \"65\"
$usage" "$tmp/example.json" --threshold 65
check "usage: unknown option" 2 "vgpud health-check: unknown option --fix
$usage" --fix "$tmp/example.json"

[ "$failed" -eq 0 ]
