#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# fetch-xterm.sh: refreshes src/api/ui/vendor/xterm/ from the npm registry (CONS-5). The version
# and the tarball's sha256 are pinned here and in the directory's PROVENANCE; a tarball that does
# not match is refused. Run it by hand after changing both, then review the diff.
set -eu

VERSION=6.0.0
SHA256=908e66e04af6c8dc6b00dd3b54de088e2e81e5ed866284fd6c2fb3c2d1c7a3f6

top=$(cd "$(dirname "$0")/.." && pwd)
dest="$top/src/api/ui/vendor/xterm"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

(cd "$tmp" && npm pack --silent "@xterm/xterm@$VERSION" >/dev/null)
tarball="$tmp/xterm-xterm-$VERSION.tgz"
echo "$SHA256  $tarball" | sha256sum -c --quiet - || {
        echo "fetch-xterm: $tarball does not have the pinned sha256" >&2
        exit 1
}
tar -xzf "$tarball" -C "$tmp"
cp "$tmp/package/lib/xterm.js" "$tmp/package/css/xterm.css" "$tmp/package/LICENSE" "$dest/"
echo "fetch-xterm: @xterm/xterm $VERSION in $dest"
