#!/bin/bash
# link_boundary.sh — libkvpool.so links only what the library uses (issue
# #13): inih, xxhash, ibverbs, numa, libc's parts and OpenSSL (libssl and
# libcrypto: the client speaks TLS to a cluster with [tls] enabled, #38).
# FUSE, io_uring, microhttpd and systemd belong to the daemons; libcurl (etcd://)
# and the CUDA runtime are loaded with dlopen when first needed, so no
# program or library names them. Exit 0 pass, 1 fail, 77 without readelf.
. "$(dirname "$0")/lib.sh"
need readelf "$B/libkvpool.so" "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool"

needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
allowed=" libinih.so.1 libxxhash.so.0 libssl.so.3 libcrypto.so.3 libibverbs.so.1 libnuma.so.1 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 libasan.so.8 libubsan.so.1 libtsan.so.2 "	# + the sanitizer runtimes
bad=""
for l in $(needed "$B/libkvpool.so"); do
	case $allowed in *" $l "*) ;; *) bad="$bad $l" ;; esac
done
[ -z "$bad" ] || fail "libkvpool.so needs more than the library uses:$bad"
ok "libkvpool.so needs $(needed "$B/libkvpool.so" | tr '\n' ' ')"
for p in libkvpool.so kvpool-master kvpool-node kvpool; do
	if needed "$B/$p" | grep -E '^lib(curl|cuda|cudart)'; then
		fail "$p links what it should dlopen"
	fi
done
ok "no program links libcurl or the CUDA runtime (both dlopen()ed)"
