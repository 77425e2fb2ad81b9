#!/bin/sh
# The shipped systemd unit (SPEC OPS-1). Prints TAP.
# Usage: test-unit-file.sh UNIT [EXAMPLE_CONFIG]
set -u
unit=$1
config=${2:-}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test-unit-file-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

n=0
failed=0
result() {
        n=$((n + 1))
        if [ "$1" = 0 ]; then
                echo "ok $n - $2"
        else
                echo "not ok $n - $2"
                failed=$((failed + 1))
        fi
}

# "Section/Key=value" for every active setting, so that a key is checked in its own section.
awk '/^\[/ { section = substr($0, 2, length($0) - 2); next }
     /^[A-Za-z]/ { print section "/" $0 }' "$unit" >"$tmp/settings"

# has SETTING: the setting is there exactly once (OPS-1 lists each key once).
has() {
        count=$(grep -cxF -- "$1" "$tmp/settings")
        [ "$count" = 1 ]
        result $? "OPS-1: $1"
        [ "$count" = 1 ] || echo "# found $count times"
}

has "Service/Type=notify"
has "Service/NotifyAccess=main"
has "Service/KillMode=process"
has "Service/Restart=on-failure"
has "Service/RuntimeDirectory=vgpud"
has "Service/RuntimeDirectoryPreserve=yes"
has "Service/StateDirectory=vgpud"
has "Service/LimitNOFILE=65536"
has "Service/ExecStart=/usr/sbin/vgpud --config /etc/vgpud/vgpud.yaml"
has "Unit/After=nvidia-vgpu-mgr.service"

# The watchdog is offered, commented out, and not enabled.
grep -qxF "#WatchdogSec=30" "$unit" && ! grep -q "^Service/WatchdogSec=" "$tmp/settings"
result $? "OPS-1: WatchdogSec=30 present and commented out"

# After= and Wants= name the same host-preparation unit, and it is the example config's.
prep=$(sed -n 's|^Unit/Wants=||p' "$tmp/settings")
[ -n "$prep" ] && [ "$(echo "$prep" | wc -l)" = 1 ] && grep -qxF "Unit/After=$prep" "$tmp/settings"
result $? "OPS-1: After= and Wants= the host-preparation unit ($prep)"
if [ -n "$config" ] && [ -f "$config" ]; then
        grep -qF -- "$prep" "$config"
        result $? "OPS-1: the example configuration names $prep"
fi

# systemd's own parser: no unknown keys, no bad values. ExecStart points at a stand-in
# executable, since vgpud need not be installed where the test runs.
if command -v systemd-analyze >/dev/null 2>&1; then
        printf '#!/bin/sh\nexit 0\n' >"$tmp/vgpud"
        chmod 755 "$tmp/vgpud"
        sed "s|^ExecStart=/usr/sbin/vgpud |ExecStart=$tmp/vgpud |" "$unit" >"$tmp/vgpud.service"
        # --man=no: the man page named by Documentation= need not be installed here either.
        out=$(systemd-analyze verify --man=no "$tmp/vgpud.service" 2>&1)
        status=$?
        [ "$status" = 0 ] && [ -z "$out" ]
        result $? "systemd-analyze verify is silent"
        [ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/# /'
else
        n=$((n + 1))
        echo "ok $n - systemd-analyze verify # SKIP systemd-analyze not installed"
fi

echo "1..$n"
[ "$failed" = 0 ]
