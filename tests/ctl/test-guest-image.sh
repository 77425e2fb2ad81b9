#!/bin/sh
# SEED-5: docs/GUEST-IMAGE.md says how to make a GPU guest image that works with vgpud, the
# README and the runbook lead to it, and every file of the repository it tells the reader to
# copy into an image exists (so the guide cannot drift from packaging/guest/).
# Usage: test-guest-image.sh SOURCE_ROOT
set -u
top=$1
doc=$top/docs/GUEST-IMAGE.md
n=0
fail=0

result() { # OK DESCRIPTION
        n=$((n + 1))
        if [ "$1" = 0 ]; then
                echo "ok $n - $2"
        else
                echo "not ok $n - $2"
                fail=1
        fi
}

has() { # DESCRIPTION FILE FIXED-STRING
        grep -qF -- "$3" "$2"
        result $? "$1"
}

has "SEED-5: the guide starts from a cloud image" "$doc" "cloud image"
has "SEED-5: the guest driver of the host's branch" "$doc" "guest driver of the host's branch"
has "SEED-5: the licence token's directory" "$doc" "/etc/nvidia/ClientConfigToken/"
has "SEED-5: the token delivered by vendor-data" "$doc" "cloud_init.vendor_data_file"
has "SEED-5: vgpu-agent as a systemd unit" "$doc" "vgpu-agent.service"
has "SEED-5, AGENT-1: the agent's udev rule" "$doc" "60-vgpu-agent.rules"
has "SEED-5: which steps the project's own test image performs" "$doc" "tests/e2e/build-image.sh"
has "SEED-5: the README links the guide" "$top/README.md" "docs/GUEST-IMAGE.md"
has "SEED-5: the runbook links the guide" "$top/docs/RUNBOOK.md" "docs/GUEST-IMAGE.md"

# Every packaging/guest/ file the guide uploads into an image is in the repository.
for f in $(grep -oE 'packaging/guest/[A-Za-z0-9._-]+' "$doc" | sort -u); do
        [ -f "$top/$f" ]
        result $? "SEED-5: $f, named by the guide, exists"
done

echo "1..$n"
exit $fail
