#!/bin/sh
# install.sh [--uninstall] DESTDIR PREFIX BUILD VERSION — called by
# `make install` / `make uninstall`. Never overwrites an existing
# /etc/kvpool/kvpool.ini.
set -eu
uninstall=0
if [ "${1:-}" = "--uninstall" ]; then uninstall=1; shift; fi
destdir=$1 prefix=$2 build=$3 version=$4
bindir=${BINDIR:-$prefix/bin}
libdir=${LIBDIR:-$prefix/lib}
incdir=${INCLUDEDIR:-$prefix/include}
mandir=${MANDIR:-$prefix/share/man}
sysconfdir=${SYSCONFDIR:-/etc}
unitdir=${SYSTEMDDIR:-$prefix/lib/systemd/system}
sysusersdir=${SYSUSERSDIR:-$prefix/lib/sysusers.d}
tmpfilesdir=${TMPFILESDIR:-$prefix/lib/tmpfiles.d}
sbindir=${MOUNTHELPERDIR:-/sbin}
D=$destdir

files="
$bindir/kvpool
$bindir/kvpool-master
$bindir/kvpool-node
$libdir/libkvpool.so.$version
$libdir/libkvpool.so.0
$libdir/libkvpool.so
$libdir/libkvpool.a
$libdir/pkgconfig/kvpool.pc
$incdir/kvpool.h
$unitdir/kvpool-master.service
$unitdir/kvpool-node.service
$unitdir/kvpool-node@.service
$sysusersdir/kvpool.conf
$tmpfilesdir/kvpool.conf
$mandir/man1/kvpool.1
$mandir/man8/kvpool-master.8
$mandir/man8/kvpool-node.8
$mandir/man5/kvpool.ini.5
$sbindir/mount.kvpool
"

if [ $uninstall = 1 ]; then
	for f in $files; do rm -f "$D$f"; done
	echo "uninstalled (kept $sysconfdir/kvpool/kvpool.ini and /var/lib/kvpool)"
	exit 0
fi

inst() { # inst MODE SRC DST
	[ -e "$2" ] || { echo "install: $2 missing (run make first)" >&2; exit 1; }
	mkdir -p "$(dirname "$D$3")"
	install -m "$1" "$2" "$D$3"
}
subst() {
	sed -e "s|@BINDIR@|$bindir|g" -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" \
		-e "s|@INCLUDEDIR@|$incdir|g" -e "s|@VERSION@|$version|g" "$1"
}

for b in kvpool kvpool-master kvpool-node; do inst 0755 "$build/$b" "$bindir/$b"; done
inst 0755 "$build/libkvpool.so.$version" "$libdir/libkvpool.so.$version"
ln -sf "libkvpool.so.$version" "$D$libdir/libkvpool.so.0"
ln -sf "libkvpool.so.$version" "$D$libdir/libkvpool.so"
inst 0644 "$build/libkvpool.a" "$libdir/libkvpool.a"
inst 0644 src/kvpool.h "$incdir/kvpool.h"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
subst src/kvpool.pc.in >"$tmp"; inst 0644 "$tmp" "$libdir/pkgconfig/kvpool.pc"
for u in kvpool-master.service kvpool-node.service kvpool-node@.service; do
	subst "systemd/$u" >"$tmp"; inst 0644 "$tmp" "$unitdir/$u"
done
inst 0644 systemd/kvpool.sysusers "$sysusersdir/kvpool.conf"
inst 0644 systemd/kvpool.tmpfiles "$tmpfilesdir/kvpool.conf"
tools/ini2man.sh conf/kvpool.ini >"$tmp"; inst 0644 "$tmp" "$mandir/man5/kvpool.ini.5"
for m in man/*.[18]; do
	[ -f "$m" ] || continue
	sec=${m##*.}
	inst 0644 "$m" "$mandir/man$sec/$(basename "$m")"
done
[ -f tools/mount.kvpool ] && inst 0755 tools/mount.kvpool "$sbindir/mount.kvpool"
if [ -e "$D$sysconfdir/kvpool/kvpool.ini" ]; then
	echo "install: keeping existing $D$sysconfdir/kvpool/kvpool.ini"
else
	inst 0644 conf/kvpool.ini "$sysconfdir/kvpool/kvpool.ini"
fi
if [ -z "$D" ] && [ "$(id -u)" = 0 ]; then
	command -v ldconfig >/dev/null && ldconfig || true
	command -v systemd-sysusers >/dev/null && systemd-sysusers "$sysusersdir/kvpool.conf" 2>/dev/null || true
	command -v systemd-tmpfiles >/dev/null && systemd-tmpfiles --create "$tmpfilesdir/kvpool.conf" 2>/dev/null || true
fi
echo "installed into ${D:-/}$prefix"
