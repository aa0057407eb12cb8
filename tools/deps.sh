#!/bin/sh
# deps.sh [--check] GROUP... — make sure the Debian packages of each group are
# installed. As root, missing ones are installed with apt-get (`make deps`,
# `make test`, tools/quickstart.sh); otherwise, and always with --check (what
# a plain `make` runs: a build has no side effects), the exact apt-get line
# is printed and the script fails. For the build group it also names the
# pkg-config modules, for systems without Debian's packages (there the
# modules are checked with pkg-config instead of dpkg).
set -u
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi
build="gcc make pkg-config libfuse3-dev liburing-dev libibverbs-dev librdmacm-dev libnuma-dev libinih-dev libmicrohttpd-dev libsystemd-dev libxxhash-dev libssl-dev libcurl4-openssl-dev zlib1g-dev libzmq3-dev libmsgpack-dev"
# the pkg-config module of each -dev package of the build group
pcname() {
	case "$1" in
	libfuse3-dev) echo fuse3 ;; liburing-dev) echo liburing ;;
	libibverbs-dev) echo libibverbs ;; librdmacm-dev) echo librdmacm ;;
	libnuma-dev) echo numa ;; libinih-dev) echo inih ;;
	libmicrohttpd-dev) echo libmicrohttpd ;; libsystemd-dev) echo libsystemd ;;
	libxxhash-dev) echo libxxhash ;; libssl-dev) echo libcrypto ;;
	libcurl4-openssl-dev) echo libcurl ;; zlib1g-dev) echo zlib ;;
	libzmq3-dev) echo libzmq ;; libmsgpack-dev) echo msgpack ;;
	esac
}
test="fuse3 attr rsync iproute2 nftables procps psmisc curl tmux chromium python3 python3-dev python3-venv python3-numpy python3-torch clang etcd-server python3-zmq python3-msgpack prometheus"
bench="redis-server redis-tools iperf3 fio memcached"
# tests/vm/: debootstrap a Debian root, mkfs.ext4 -d it, boot it in qemu;
# build the Debian packages it installs (tests/vm/build_debs.sh)
vm="debootstrap qemu-system-x86 e2fsprogs debhelper dh-python dpkg-dev fakeroot lintian"
want=""
for g in "$@"; do
	case "$g" in
	build) want="$want $build" ;;
	test) want="$want $test" ;;
	bench) want="$want $bench" ;;
	vm) want="$want $vm" ;;
	*) echo "deps.sh: unknown group '$g' (build, test, bench, vm)" >&2; exit 2 ;;
	esac
done
missing=""
if command -v dpkg-query >/dev/null; then
	for p in $want; do
		s=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
		case "$s" in *" installed") ;; *) missing="$missing $p" ;; esac
	done
else	# not Debian: what the build needs, by pkg-config module and command
	for p in $want; do
		m=$(pcname "$p")
		if [ -n "$m" ]; then
			pkg-config --exists "$m" 2>/dev/null || missing="$missing $p"
		elif [ "$p" = gcc ] || [ "$p" = make ] || [ "$p" = pkg-config ]; then
			command -v "$p" >/dev/null || missing="$missing $p"
		fi
	done
	[ -z "$missing" ] && exit 0
	echo "kvpool needs (Debian names):$missing" >&2
	mods=""
	for p in $missing; do m=$(pcname "$p"); [ -z "$m" ] || mods="$mods $m"; done
	[ -z "$mods" ] || echo "  the pkg-config modules:$mods" >&2
	exit 1
fi
[ -z "$missing" ] && exit 0
if [ $check = 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
	echo "deps: installing$missing"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -q --no-install-recommends $missing >/tmp/kvpool-apt.log 2>&1; then
		apt-get update -q >/tmp/kvpool-apt.log 2>&1
		apt-get install -y -q --no-install-recommends $missing >>/tmp/kvpool-apt.log 2>&1 || {
			echo "deps: apt-get failed, see /tmp/kvpool-apt.log" >&2; tail -5 /tmp/kvpool-apt.log >&2; exit 1; }
	fi
	# Debian starts these services on install; benchmarks start their own.
	for s in redis-server memcached; do
		case "$missing" in *"$s"*) (systemctl stop "$s" || service "$s" stop || pkill -x "$s") >/dev/null 2>&1 ;; esac
	done
	# etcd: the tests start their own on private ports; the packaged
	# service is stopped by name only (never pkill: tests may run etcds).
	case "$missing" in *etcd-server*) (systemctl stop etcd || service etcd stop) >/dev/null 2>&1 ;; esac
	# prometheus: tests/e2e/monitoring.sh runs its own on a private port.
	case "$missing" in *prometheus*) (systemctl stop prometheus || service prometheus stop) >/dev/null 2>&1 ;; esac
	exit 0
fi
echo "kvpool needs these Debian packages; run as root:" >&2
echo "  apt-get install -y$missing" >&2
mods=""
for p in $missing; do m=$(pcname "$p"); [ -z "$m" ] || mods="$mods $m"; done
[ -z "$mods" ] || echo "  (or \`make deps\` as root; on other systems the pkg-config modules:$mods)" >&2
exit 1
