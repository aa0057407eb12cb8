#!/bin/sh
# install.sh [--uninstall] DESTDIR PREFIX BUILD VERSION [SOVERSION] — called by
# `make install` / `make uninstall`: binaries, libkvpool (.so, .a, header,
# kvpool.pc), man pages (kvpool.ini(5) generated from conf/kvpool.ini), the
# systemd units, sysusers.d and tmpfiles.d entries, and conf/kvpool.ini as
# SYSCONFDIR/kvpool/kvpool.ini — never overwriting an existing one.
# Uninstall removes what install put there, except a kvpool.ini that was
# edited (kept, and said so) and the state in /var/lib/kvpool.
# Directories: BINDIR LIBDIR INCLUDEDIR MANDIR SYSCONFDIR SYSTEMDDIR
# SYSUSERSDIR TMPFILESDIR MOUNTHELPERDIR from the environment (make passes
# its command-line variables on), else derived from PREFIX.
set -eu
uninstall=0
if [ "${1:-}" = "--uninstall" ]; then uninstall=1; shift; fi
[ $# = 4 ] || [ $# = 5 ] ||
	{ echo "usage: $0 [--uninstall] DESTDIR PREFIX BUILD VERSION [SOVERSION]" >&2; exit 2; }
destdir=$1 prefix=$2 build=$3 version=$4
# paths below (src/, systemd/, conf/, a relative BUILD) are the repository's
cd "$(dirname "$0")/.."
soversion=${5:-$(sed -n 's/^SOVERSION := //p' Makefile)}
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
units="kvpool-master.service kvpool-node.service kvpool-node@.service kvpool-fuse@.service"
conf=$sysconfdir/kvpool/kvpool.ini

files="
$bindir/kvpool
$bindir/kvpool-master
$bindir/kvpool-node
$libdir/libkvpool.so.$version
$libdir/libkvpool.so.$soversion
$libdir/libkvpool.so
$libdir/libkvpool.a
$libdir/pkgconfig/kvpool.pc
$incdir/kvpool.h
$sysusersdir/kvpool.conf
$tmpfilesdir/kvpool.conf
$mandir/man1/kvpool.1
$mandir/man8/kvpool-master.8
$mandir/man8/kvpool-node.8
$mandir/man5/kvpool.ini.5
$sbindir/mount.kvpool
"
for u in $units; do files="$files $unitdir/$u"; done

systemd_running() { [ -z "$D" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; }

# Removes DIR and its parents while they are empty, stopping at $D. Only
# inside a DESTDIR: a real uninstall leaves /usr/... directories alone.
prune() {
	[ -n "$D" ] || return 0
	d=$1
	while [ "$d" != "/" ] && [ "$d" != "." ] && [ -d "$D$d" ]; do
		rmdir "$D$d" 2>/dev/null || return 0
		d=$(dirname "$d")
	done
}

if [ $uninstall = 1 ]; then
	for f in $files; do
		if [ -e "$D$f" ] || [ -L "$D$f" ]; then
			rm -f "$D$f"
			prune "$(dirname "$f")"
		fi
	done
	if [ -f "$D$conf" ]; then
		if cmp -s conf/kvpool.ini "$D$conf"; then
			rm -f "$D$conf"
			prune "$(dirname "$conf")"
		else
			echo "uninstall: keeping $D$conf (edited)"
		fi
	fi
	if systemd_running; then systemctl daemon-reload || true; fi
	echo "uninstalled from ${D:-/}$prefix (kept /var/lib/kvpool and the kvpool user)"
	exit 0
fi

inst() { # inst MODE SRC DST
	[ -e "$2" ] || { echo "install: $2 missing (run make first)" >&2; exit 1; }
	mkdir -p "$(dirname "$D$3")"
	install -m "$1" "$2" "$D$3"
}
subst() {
	sed -e "s|@BINDIR@|$bindir|g" -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" \
		-e "s|@INCLUDEDIR@|$incdir|g" -e "s|@VERSION@|$version|g" \
		-e "s|@SYSCONFDIR@|$sysconfdir|g" -e "s|@UNITDIR@|$unitdir|g" "$1"
}

for b in kvpool kvpool-master kvpool-node; do inst 0755 "$build/$b" "$bindir/$b"; done
inst 0755 "$build/libkvpool.so.$version" "$libdir/libkvpool.so.$version"
ln -sf "libkvpool.so.$version" "$D$libdir/libkvpool.so.$soversion"
ln -sf "libkvpool.so.$version" "$D$libdir/libkvpool.so"
inst 0644 "$build/libkvpool.a" "$libdir/libkvpool.a"
inst 0644 src/lib/kvpool.h "$incdir/kvpool.h"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
subst src/lib/kvpool.pc.in >"$tmp"; inst 0644 "$tmp" "$libdir/pkgconfig/kvpool.pc"
for u in $units; do
	subst "systemd/$u" >"$tmp"; inst 0644 "$tmp" "$unitdir/$u"
done
inst 0644 systemd/kvpool.sysusers "$sysusersdir/kvpool.conf"
inst 0644 systemd/kvpool.tmpfiles "$tmpfilesdir/kvpool.conf"
tools/ini2man.sh conf/kvpool.ini "$version" >"$tmp"; inst 0644 "$tmp" "$mandir/man5/kvpool.ini.5"
for m in man/*.[18]; do
	[ -f "$m" ] || continue
	sec=${m##*.}
	subst "$m" >"$tmp"; inst 0644 "$tmp" "$mandir/man$sec/$(basename "$m")"
done
if [ -f tools/mount.kvpool ]; then inst 0755 tools/mount.kvpool "$sbindir/mount.kvpool"; fi
if [ -e "$D$conf" ]; then
	echo "install: keeping existing $D$conf"
else
	inst 0644 conf/kvpool.ini "$conf"
fi
if [ -z "$D" ] && [ "$(id -u)" = 0 ]; then
	if command -v ldconfig >/dev/null; then ldconfig || true; fi
	if command -v systemd-sysusers >/dev/null; then
		systemd-sysusers "$sysusersdir/kvpool.conf" || true
	fi
	if command -v systemd-tmpfiles >/dev/null; then
		systemd-tmpfiles --create "$tmpfilesdir/kvpool.conf" || true
	fi
	if systemd_running; then systemctl daemon-reload || true; fi
fi
echo "installed into ${D:-/}$prefix"
