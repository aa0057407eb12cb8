#!/bin/sh
# build_debs.sh OUTDIR — the Debian packages of this tree, for
# tests/vm/systemd_vm.sh: `dpkg-buildpackage -us -uc -b` in a private copy
# of the tree (it writes its .debs into the parent directory), then
#   OUTDIR/1/  kvpool, libkvpool1, libkvpool-dev, python3-kvpool as built
#   OUTDIR/2/  the same packages at the next Debian revision (-N+1), repacked
#              with dpkg-deb: the upgrade test's "next build"
#   OUTDIR/lintian.txt, OUTDIR/build.log
# The -dbgsym packages are left out. The build gets a minimal environment
# (env -i, the system's PATH), as sbuild would give it. debhelper reads
# /dev/null as "no triggers yet": where /dev/null had become a regular file
# (some `rm /dev/null`, then a redirection), other programs' output landed in
# libkvpool1's DEBIAN/triggers and dpkg refused the package; hence the
# check of /dev/null first and of every triggers file after.
set -eu
[ $# = 1 ] || { echo "usage: $0 OUTDIR" >&2; exit 2; }
[ -c /dev/null ] || { echo "build_debs: /dev/null is not a character device (restore it: mknod -m 666 /dev/null c 1 3)" >&2; exit 1; }
top=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/kvpool"
(cd "$top" && { git ls-files -z -c -o --exclude-standard 2>/dev/null ||
	find . -path ./.git -prune -o -path './build*' -prune -o -type f -print0; } |
	tar --null -T - -cf -) | tar -C "$tmp/kvpool" -xf -
(cd "$tmp/kvpool" && env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME="$tmp" LANG=C.UTF-8 \
	dpkg-buildpackage -us -uc -b -j2) >"$out/build.log" 2>&1 || {
	tail -n 30 "$out/build.log" >&2; echo "build_debs: dpkg-buildpackage failed (log: $out/build.log)" >&2; exit 1; }
lintian -I --pedantic --show-overrides "$tmp"/kvpool_*.changes >"$out/lintian.txt" 2>&1 || true
rm -rf "$out/1" "$out/2"
mkdir -p "$out/1" "$out/2"
for d in "$tmp"/*.deb; do
	case $d in *-dbgsym_*) continue ;; esac
	cp "$d" "$out/1/"
done
for d in "$out"/1/*.deb; do
	dpkg-deb --ctrl-tarfile "$d" | tar -xOf - ./triggers 2>/dev/null |
		grep -Ev '^(#|$|(interest|activate)(-await|-noawait)? )' && {
		echo "build_debs: $d: DEBIAN/triggers has the lines above" >&2; exit 1; }
done
ver=$(dpkg-deb -f "$out"/1/kvpool_*.deb Version)
next=${ver%-*}-$((${ver##*-} + 1))
for d in "$out"/1/*.deb; do
	rm -rf "$tmp/x"
	dpkg-deb -R "$d" "$tmp/x"
	# the version and the = dependencies between the packages
	sed -i "s/$ver/$next/g" "$tmp/x/DEBIAN/control"
	p=$(dpkg-deb -f "$d" Package)
	dpkg-deb --root-owner-group -b "$tmp/x" "$out/2/${p}_${next}_$(dpkg-deb -f "$d" Architecture).deb" >/dev/null
done
echo "build_debs: $(cd "$out/1" && echo *.deb) ($ver) and $next in $out/2"
