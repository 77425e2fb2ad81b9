#!/bin/sh
# Builds the Debian package vgpud_<version>_<arch>.deb (SPEC OPS-14) with the files of OPS-5:
# a fresh release build (Debian's hardening flags, tests off) installed with meson into a
# staging root, vgpu-agent taken out (a guest artefact), binaries stripped, man pages and the
# changelog compressed, the copyright and maintainer scripts from packaging/debian/ added.
# dpkg-shlibdeps computes Depends and dpkg-gencontrol writes the control file; dpkg-deb
# packs it. Prints the package's path last.
#
# Usage: scripts/build-deb.sh [OUTDIR]   (default: the project root)
# Environment: DEB_BUILD, the build directory (default build-deb; wiped and set up afresh).
#
# Why not dpkg-buildpackage and debhelper: they want a debian/ directory at the top of the
# tree, a source package and a rules file that drives its own meson build; vgpud's package
# is the output of `meson install`, and the few dh_* steps it needs (strip, compress,
# conffiles, md5sums, shlibdeps, gencontrol) are each a line here.
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
outdir=${1:-$top}
build=${DEB_BUILD:-build-deb}
case $build in
/*) ;;
*) build=$top/$build ;;
esac
pkgdir=$top/packaging/debian

scripts/deps.sh deb

version=$(meson introspect --projectinfo meson.build 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
# A native package: the changelog's top entry carries the project version itself, so a
# version bump in meson.build without a changelog entry fails here rather than shipping a
# package whose changelog does not mention it.
changelog_version=$(dpkg-parsechangelog -l "$pkgdir/changelog" -SVersion)
if [ "$changelog_version" != "$version" ]; then
        echo "build-deb: meson.build says $version, packaging/debian/changelog says" \
                "$changelog_version; add a changelog entry" >&2
        exit 1
fi
arch=$(dpkg --print-architecture)
deb="vgpud_${version}_${arch}.deb"

# Timestamps from the changelog (gcc's __DATE__, file mtimes, the archive members), so that
# two builds of one commit give the same package.
SOURCE_DATE_EPOCH=$(dpkg-parsechangelog -l "$pkgdir/changelog" -STimestamp)
export SOURCE_DATE_EPOCH

# A fresh build directory every time, so that no option or stale output of an earlier
# configuration leaks in. Refuse to delete anything that is not a meson build directory.
if [ -e "$build" ]; then
        if [ ! -d "$build/meson-private" ]; then
                echo "build-deb: $build exists and is not a meson build directory" >&2
                exit 1
        fi
        rm -rf "$build"
fi
# Debian's compiler and linker flags with every hardening feature (bindnow, PIE, fortify,
# stack protector), as a package built by debhelper would get them. They come after meson's
# own, so -O2 stands, as in every Debian package.
(
        eval "$(DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --export=sh)"
        if ! out=$(meson setup "$build" --buildtype=release -Dtests=false --prefix=/usr \
                --sysconfdir=/etc --localstatedir=/var 2>&1); then
                echo "$out" >&2
                exit 1
        fi
)
# Quiet unless something fails; meson and ninja say why on stdout.
if ! ninja -C "$build" >"$build/build-deb.log" 2>&1; then
        cat "$build/build-deb.log" >&2
        exit 1
fi

# The layout dpkg-shlibdeps and dpkg-gencontrol expect: debian/control, debian/changelog and
# the package's root in debian/vgpud, all inside the build directory.
work=$build/deb
root=$work/debian/vgpud
mkdir -p "$work/debian"
cp "$pkgdir/control" "$pkgdir/changelog" "$work/debian/"
meson install -C "$build" --no-rebuild --destdir "$root" >/dev/null

# vgpu-agent goes into guest images (OPS-5, docs/AGENT.md), never onto the host: without
# -Dagent=true meson installs neither it nor its man page. Checked, since a package that
# carried it would put a guest binary on every host.
if [ -n "$(find "$root" -name '*vgpu-agent*')" ]; then
        echo "build-deb: vgpu-agent is still in the staging root" >&2
        exit 1
fi

# data_dir, which systemd also creates (StateDirectory=) at the first start: shipped empty so
# that `vgpud --check-config` works on the example configuration before that start. A purge
# removes it only while it is empty; instance records and the VF health store stay.
install -d -m 0755 "$root/var/lib/vgpud"

# Strip as dh_strip does: symbols the dynamic linker does not need and the compiler's notes.
elfs=""
for f in "$root"/usr/bin/* "$root"/usr/sbin/*; do
        [ -f "$f" ] || continue
        if readelf -h "$f" >/dev/null 2>&1; then
                objcopy --strip-unneeded --remove-section=.comment --remove-section=.note "$f"
                elfs="$elfs $f"
        fi
done

# Man pages and the changelog compressed without a name or timestamp (Debian policy 12.1,
# 12.7); the copyright file as it is.
if [ -d "$root/usr/share/man" ]; then
        find "$root/usr/share/man" -type f ! -name '*.gz' -exec gzip -9n {} +
fi
doc=$root/usr/share/doc/vgpud
mkdir -p "$doc"
cp "$pkgdir/copyright" "$doc/copyright"
gzip -9n -c "$pkgdir/changelog" >"$doc/changelog.gz"
if [ -f "$pkgdir/lintian-overrides" ]; then
        mkdir -p "$root/usr/share/lintian/overrides"
        cp "$pkgdir/lintian-overrides" "$root/usr/share/lintian/overrides/vgpud"
fi

# Ownership comes from --root-owner-group; modes do not depend on the builder's umask.
find "$root" -type d -exec chmod 0755 {} +
find "$root" -type f -exec chmod 0644 {} +
for f in $elfs; do
        chmod 0755 "$f"
done

mkdir -p "$root/DEBIAN"
for script in postinst prerm postrm; do
        install -m 0755 "$pkgdir/$script" "$root/DEBIAN/$script"
done
# Every file under /etc is a conffile (policy 10.7.2): an administrator's edit of the
# example configuration survives upgrades, and a purge removes it.
(cd "$root" && find etc -type f | LC_ALL=C sort | sed 's|^|/|') >"$root/DEBIAN/conffiles"
# md5sums for debsums and dpkg --verify; conffiles are tracked by dpkg itself.
(
        cd "$root"
        find . -path ./DEBIAN -prune -o -path ./etc -prune -o -type f -print |
                sed 's|^\./||' | LC_ALL=C sort | xargs -r md5sum
) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

# Depends from the libraries the binaries link, Installed-Size from the staging root.
(
        cd "$work"
        # shellcheck disable=SC2086
        dpkg-shlibdeps -Tdebian/vgpud.substvars $elfs
        dpkg-gencontrol -pvgpud -Tdebian/vgpud.substvars -Pdebian/vgpud
)

find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
mkdir -p "$outdir"
outdir=$(cd "$outdir" && pwd)
dpkg-deb --root-owner-group -Zxz --build "$root" "$outdir/$deb" >/dev/null
echo "$outdir/$deb"
