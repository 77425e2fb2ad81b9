#!/bin/sh
# The Debian package's test (SPEC OPS-14, OPS-5, OPS-1), in TAP: `make deb`, the package's
# contents and control data, lintian, then a real install from the package with apt, the
# installed daemon and unit, and a purge that leaves nothing behind. Runs as root on the
# machine itself (CI's fresh Debian 12), since installing is the point; it refuses to run
# where vgpud, or any file of its package, is already installed, so that its purge never
# removes somebody's install.
# Usage: tests/deb/test-deb.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
export DEBIAN_FRONTEND=noninteractive LC_ALL=C

n=0
failed=0
ok() {
        n=$((n + 1))
        echo "ok $n - $1"
}
not_ok() {
        n=$((n + 1))
        failed=$((failed + 1))
        echo "not ok $n - $1"
}
# check DESCRIPTION COMMAND...: one test point from a command's exit status.
check() {
        desc=$1
        shift
        if "$@"; then ok "$desc"; else not_ok "$desc"; fi
}
comment() {
        sed 's/^/# /'
}
bail() {
        echo "Bail out! $*"
        exit 1
}

if [ "$(id -u)" -ne 0 ]; then
        bail "test-deb.sh installs and purges a package: run it as root"
fi
status=$(dpkg-query -W -f='${db:Status-Abbrev}' vgpud 2>/dev/null || true)
if [ -n "$status" ] && [ "$status" != "un " ]; then
        bail "vgpud is already known to dpkg here (status '$status'); this test purges what it" \
                "installs, so it leaves that install alone: remove it first"
fi

tmp=$(mktemp -d /tmp/test-deb.XXXXXX)
# apt reads a local package as its unprivileged _apt user.
chmod 0755 "$tmp"
installed=0
cleanup() {
        # A test that stopped half-way still leaves nothing behind.
        if [ "$installed" = 1 ]; then
                apt-get purge -y -qq vgpud >/dev/null 2>&1 || true
        fi
        rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP

version=$(meson introspect --projectinfo meson.build 2>/dev/null |
        python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
deb=$tmp/vgpud_${version}_$(dpkg --print-architecture).deb

# --- the build -------------------------------------------------------------------------

# The plan comes last (TAP allows it), after every test point has been counted.
if make -s deb DEBDIR="$tmp" >"$tmp/make.log" 2>&1 && [ -f "$deb" ]; then
        ok "make deb builds $(basename "$deb")"
else
        not_ok "make deb builds $(basename "$deb")"
        comment <"$tmp/make.log"
        echo "1..$n"
        exit 1
fi
tail -n 1 "$tmp/make.log" | comment

# --- contents (OPS-5) ------------------------------------------------------------------

# Every path in the package, without the leading "." (directories end in /).
dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|' >"$tmp/contents"
files="$tmp/files"
grep -v '/$' "$tmp/contents" >"$files"
comment <"$files"

for path in \
        /usr/sbin/vgpud \
        /usr/bin/vgpuctl \
        /usr/lib/systemd/system/vgpud.service \
        /etc/vgpud/vgpud.yaml \
        /usr/share/man/man1/vgpuctl.1.gz \
        /usr/share/man/man5/vgpud.yaml.5.gz \
        /usr/share/man/man8/vgpud.8.gz \
        /usr/share/vgpud/grafana/vgpud.json \
        /usr/share/vgpud/prometheus/vgpud-alerts.yaml \
        /usr/share/doc/vgpud/copyright \
        /usr/share/doc/vgpud/changelog.gz \
        /usr/share/doc/vgpud/RUNBOOK.md; do
        check "the package has $path" grep -qx "$path" "$files"
done
check "the package has the empty data_dir /var/lib/vgpud/" \
        grep -qx /var/lib/vgpud/ "$tmp/contents"

# vgpu-agent is a guest artefact (OPS-5); the simulator, fake-qemu, the fake NVML and the
# test, fuzz and bench programs never leave the source tree.
if grep -E 'vgpu-agent|vgpu-sim|fake-|nvidia-ml|/test-|fuzz|perf[0-9]|testlib' "$files" \
        >"$tmp/leaked"; then
        not_ok "no vgpu-agent, simulator, test or bench file in the package"
        comment <"$tmp/leaked"
else
        ok "no vgpu-agent, simulator, test or bench file in the package"
fi

# The only programs are vgpud and vgpuctl, stripped (no symbol table left).
mkdir "$tmp/x"
dpkg-deb -x "$deb" "$tmp/x"
: >"$tmp/elfs"
: >"$tmp/unstripped"
while read -r path; do
        if readelf -h "$tmp/x$path" >/dev/null 2>&1; then
                echo "$path" >>"$tmp/elfs"
                if readelf -S "$tmp/x$path" | grep -q '\.symtab'; then
                        echo "$path" >>"$tmp/unstripped"
                fi
        fi
done <"$files"
check "the package's only ELF files are /usr/bin/vgpuctl and /usr/sbin/vgpud" \
        test "$(sort "$tmp/elfs" | tr '\n' ' ')" = "/usr/bin/vgpuctl /usr/sbin/vgpud "
check "vgpud and vgpuctl are stripped" test ! -s "$tmp/unstripped"

# --- control data ----------------------------------------------------------------------

dpkg-deb -I "$deb" >"$tmp/info"
comment <"$tmp/info"
check "dpkg-deb -I lists /etc/vgpud/vgpud.yaml as a conffile" \
        sh -c "dpkg-deb -I '$deb' conffiles | grep -qx /etc/vgpud/vgpud.yaml"
check "the control file says Version: $version" \
        test "$(dpkg-deb -f "$deb" Version)" = "$version"
# dpkg-shlibdeps' Depends names each library package the binaries link, with a minimum
# version where the library's symbols file gives one (libc6's always does).
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends" | comment
shlibdeps_ok() {
        echo "$depends" | tr ',' '\n' | grep -Eq '^ *libc6 \(>= [0-9.]+\)$' || return 1
        for lib in libjansson4 libyaml-0-2 libsystemd0 libcurl4 libmicrohttpd12 libjwt0; do
                echo "$depends" | tr ',' '\n' | grep -Eq "^ *$lib( |\$)" || return 1
        done
}
check "Depends comes from dpkg-shlibdeps (libc6, libjansson4, libyaml, libsystemd0, ...)" \
        shlibdeps_ok

# --- lintian ---------------------------------------------------------------------------

# Errors fail the test; warnings, pedantic and informational tags are listed for the record.
# lintian unpacks what it checks and says root should not; nobody can read the package.
lintian_as=""
if command -v runuser >/dev/null 2>&1 && id nobody >/dev/null 2>&1; then
        lintian_as="runuser -u nobody -- env HOME=$tmp"
fi
$lintian_as lintian --pedantic --display-info "$deb" >"$tmp/lintian" 2>&1
comment <"$tmp/lintian"
if grep -q '^E: ' "$tmp/lintian"; then
        not_ok "lintian reports no errors"
else
        ok "lintian reports no errors"
fi

# --- install ---------------------------------------------------------------------------

# Nothing of the package may be there before it is installed: a file of an unpackaged
# `meson install` would be overwritten, and then purged. Directories that are already there
# are remembered; the purge must remove every other one.
: >"$tmp/present"
while read -r path; do
        if [ -e "$path" ] || [ -L "$path" ]; then
                echo "$path" >>"$tmp/present"
        fi
done <"$files"
if [ -s "$tmp/present" ]; then
        comment <"$tmp/present"
        bail "files of the package are already on this machine (listed above); not installing"
fi
: >"$tmp/dirs-before"
grep '/$' "$tmp/contents" | sed 's|/$||' | grep -v '^$' | while read -r dir; do
        if [ -d "$dir" ]; then
                echo "$dir" >>"$tmp/dirs-before"
        fi
done

installed=1
if apt-get install -y -q -o Dpkg::Use-Pty=0 "$deb" >"$tmp/apt.log" 2>&1; then
        ok "apt-get install $(basename "$deb")"
else
        not_ok "apt-get install $(basename "$deb")"
fi
comment <"$tmp/apt.log"
check "dpkg says vgpud $version is installed" \
        test "$(dpkg-query -W -f='${Status} ${Version}' vgpud 2>/dev/null)" = \
        "install ok installed $version"

: >"$tmp/missing"
while read -r path; do
        [ -e "$path" ] || echo "$path" >>"$tmp/missing"
done <"$files"
check "every file of the package is installed" test ! -s "$tmp/missing"
comment <"$tmp/missing"

out=$(/usr/sbin/vgpud --version 2>&1)
check "vgpud --version prints 'vgpud $version'" test "$out" = "vgpud $version"
out=$(/usr/bin/vgpuctl --version 2>&1)
check "vgpuctl --version prints 'vgpuctl $version'" test "$out" = "vgpuctl $version"
# The installed example configuration is valid as shipped, given what only a site provides:
# the token secret. data_dir (/var/lib/vgpud) comes with the package.
head -c 48 /dev/urandom | base64 >"$tmp/jwt.secret"
chmod 0600 "$tmp/jwt.secret"
out=$(/usr/sbin/vgpud --check-config --config /etc/vgpud/vgpud.yaml \
        --set jwt_secret_file="$tmp/jwt.secret" 2>&1)
st=$?
check "vgpud --check-config accepts the installed /etc/vgpud/vgpud.yaml" test "$st" -eq 0
[ "$st" -eq 0 ] || echo "$out" | comment

# The package installs the unit but neither enables nor starts it (OPS-14).
check "the package does not enable vgpud.service" \
        sh -c '! ls /etc/systemd/system/*.wants/vgpud.service >/dev/null 2>&1'

# systemd-analyze verify loads the unit as systemd would and checks that ExecStart= and
# ExecReload= are executable and that the Documentation= man page exists. The units it names
# that a test machine lacks need no stand-in: After= only orders, and a Wants= on a missing
# unit is no error to systemd (only Requires= and the like would be, and the shipped unit has
# none). Verify exits 0 even for unknown keys or bad values, which it only prints, so every
# line it prints about vgpud.service fails the test too. Without man-db the man page check is
# left out.
man_opt=--man=yes
command -v man >/dev/null 2>&1 || man_opt=--man=no
unit=/usr/lib/systemd/system/vgpud.service
systemd-analyze verify "$man_opt" "$unit" >"$tmp/verify" 2>&1
st=$?
check "systemd-analyze verify $man_opt $unit passes" \
        sh -c "[ $st -eq 0 ] && ! grep -q 'vgpud' '$tmp/verify'"
comment <"$tmp/verify"

if command -v man >/dev/null 2>&1; then
        for page in vgpud vgpuctl vgpud.yaml; do
                where=$(man -w "$page" 2>/dev/null)
                check "man -w $page finds $where" sh -c "echo '$where' | grep -q '^/usr/share/man/'"
        done
else
        ok "man -w vgpud # SKIP man-db is not installed"
fi

# --- remove, then purge -----------------------------------------------------------------

# A conffile outlives a remove, with the administrator's edit in it, and goes with the purge.
echo "# a local edit" >>/etc/vgpud/vgpud.yaml
if apt-get remove -y -q -o Dpkg::Use-Pty=0 vgpud >"$tmp/remove.log" 2>&1; then
        ok "apt-get remove vgpud"
else
        not_ok "apt-get remove vgpud"
        comment <"$tmp/remove.log"
fi
check "after the remove, dpkg keeps vgpud's config files only" \
        test "$(dpkg-query -W -f='${Status}' vgpud 2>/dev/null)" = "deinstall ok config-files"
check "after the remove, /usr/sbin/vgpud is gone" test ! -e /usr/sbin/vgpud
check "after the remove, /etc/vgpud/vgpud.yaml is still there with the local edit" \
        grep -qx "# a local edit" /etc/vgpud/vgpud.yaml

if apt-get purge -y -q -o Dpkg::Use-Pty=0 vgpud >"$tmp/purge.log" 2>&1; then
        ok "apt-get purge vgpud"
        installed=0
else
        not_ok "apt-get purge vgpud"
fi
comment <"$tmp/purge.log"
check "dpkg -l no longer lists vgpud as installed or with config files" \
        sh -c "! dpkg -l vgpud 2>/dev/null | grep -Eq '^(ii|rc|iU|iF|iH)'"

: >"$tmp/left"
while read -r path; do
        if [ -e "$path" ] || [ -L "$path" ]; then
                echo "$path" >>"$tmp/left"
        fi
done <"$files"
grep '/$' "$tmp/contents" | sed 's|/$||' | grep -v '^$' | while read -r dir; do
        if [ -d "$dir" ] && ! grep -qx "$dir" "$tmp/dirs-before"; then
                echo "$dir/" >>"$tmp/left"
        fi
done
check "the purge removed every file and every directory the package created" \
        test ! -s "$tmp/left"
comment <"$tmp/left"
check "/etc/vgpud is gone after the purge" test ! -e /etc/vgpud

echo "1..$n"
[ "$failed" -eq 0 ]
