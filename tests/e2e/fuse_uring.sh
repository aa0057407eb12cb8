#!/bin/bash
# fuse_uring.sh — the FUSE view over io_uring (Linux 6.14+, the fuse
# module's enable_uring set to Y for the test and restored at exit, even on
# failure): .kvpool/stats says the requests went over the ring, and its
# count grows with them; creates, reads, ls, rename, xattrs and rm from
# both CPUs byte-exact against the pool; a 3 MB value written and read in
# 1 MiB requests; `touch f; cat f` (a lookup that waits for the release);
# [fuse] io_uring = off keeps /dev/fuse, = on fails the mount naming
# enable_uring when it is N; kill -9 of a view on the ring leaves a mount
# the next one clears; clean unmounts.
# Exit 0 pass, 1 fail, 77 skip (not root, or no FUSE over io_uring).
. "$(dirname "$0")/fuse_lib.inc"

param=/sys/module/fuse/parameters/enable_uring
[ "$(id -u)" = 0 ] || skip "needs root (writes $param)"
[ -w "$param" ] || skip "this kernel has no FUSE over io_uring ($param)"
saved=$(cat "$param")
on_cleanup "echo '$saved' >'$param'"
echo Y >"$param" || skip "cannot write $param"

start_pool
mnt=$E2E_TMP/mnt
mount_view "$mnt"

# served FILE: the ring's request count in .kvpool/stats, "" when off it
served() { sed -n 's/^view_transport io_uring (\([0-9]*\) requests)$/\1/p' "$1/.kvpool/stats"; }
n0=$(served "$mnt")
[ -n "$n0" ] || fail "not over io_uring: $(grep view_transport "$mnt/.kvpool/stats")"
grep -q "FUSE requests go over io_uring" "$E2E_TMP/mount-mnt.log" ||
	fail "the view did not log its transport"

# ---- creates, reads, ls, rm from both CPUs ------------------------------------
ncpu=$(nproc)
mkdir "$mnt/u" || fail "mkdir"
writers=()
for c in $(seq 0 $((ncpu - 1))); do
	taskset -c "$c" python3 - "$mnt/u" "$E2E_TMP" "$c" <<'EOF' &
import os, sys
d, tmp, c = sys.argv[1], sys.argv[2], sys.argv[3]
for i in range(100):
    data = os.urandom(i * 37 % 9000 + 1)
    with open("%s/c%s-%03d" % (d, c, i), "wb") as f:
        f.write(data)
    with open("%s/ref-c%s-%03d" % (tmp, c, i), "wb") as f:
        f.write(data)
    with open("%s/c%s-%03d" % (d, c, i), "rb") as f:
        if f.read() != data:
            sys.exit("c%s-%03d reads back other bytes" % (c, i))
EOF
	writers+=($!)
done
bad=0
for j in "${writers[@]}"; do wait "$j" || bad=1; done
[ "$bad" = 0 ] || fail "creates and reads from every CPU"
[ "$(ls "$mnt/u" | wc -l)" = $((ncpu * 100)) ] || fail "ls shows $(ls "$mnt/u" | wc -l) files"
sync "$mnt/u" || fail "sync"
for f in "$E2E_TMP"/ref-c*; do
	k=${f##*/ref-}
	cmp -s "$f" "$mnt/u/$k" || fail "$k differs through the mount"
	kv get "u/$k" | cmp -s "$f" - || fail "$k differs in the pool"
done
ok "$((ncpu * 100)) creates and reads from $ncpu CPUs, ls, byte-exact in the view and the pool"

head -c 3000000 /dev/urandom >"$E2E_TMP/big"
dd if="$E2E_TMP/big" of="$mnt/u/big" bs=1M status=none || fail "dd of= 1 MiB writes"
cmp "$E2E_TMP/big" "$mnt/u/big" || fail "3 MB value read back differs"
kv get u/big | cmp -s "$E2E_TMP/big" - || fail "3 MB value differs in the pool"
cmp <(dd if="$mnt/u/big" bs=1M skip=1 count=1 2>/dev/null) \
	<(dd if="$E2E_TMP/big" bs=1M skip=1 count=1 2>/dev/null) || fail "1 MiB read at 1 MiB"
ok "a 3 MB value written and read in 1 MiB requests"

touch "$mnt/u/t" && [ -z "$(cat "$mnt/u/t")" ] || fail "touch f; cat f"
echo x >"$mnt/u/r1" && mv "$mnt/u/r1" "$mnt/u/r2" || fail "rename"
[ "$(cat "$mnt/u/r2")" = x ] && [ ! -e "$mnt/u/r1" ] || fail "rename result"
[ "$(getfattr --absolute-names -n user.kvpool.size --only-values "$mnt/u/r2")" = 2 ] || fail "getxattr size"
rm -r "$mnt/u" || fail "rm -r"
[ -z "$(ls "$mnt")" ] || fail "left after rm -r: $(ls "$mnt")"
kv exists u/big -q && fail "u/big still in the pool after rm"
n1=$(served "$mnt")
[ "$n1" -gt $((n0 + ncpu * 300)) ] 2>/dev/null ||
	fail "the ring served $n0 -> $n1 requests: the work went elsewhere"
ok "touch+cat, rename, getxattr, rm -r; the ring served $((n1 - n0)) requests"

# ---- kill -9 on the ring, then a fresh mount ------------------------------------------
kill -KILL "$view_pid"
waitfor 10 gone "$view_pid" || fail "the view survived kill -9"
forget "$view_pid"
stat -f "$mnt" >/dev/null 2>&1 && fail "a killed view's mount still answers"
mount_view "$mnt"
echo again >"$mnt/again" && [ "$(cat "$mnt/again")" = again ] || fail "after kill -9 and a new mount"
[ -n "$(served "$mnt")" ] || fail "the new mount is not over io_uring"
unmount_view "$mnt" "$view_pid"
ok "kill -9 of a view on the ring: the next mount clears it and serves over the ring"

# ---- [fuse] io_uring = off / on ---------------------------------------------------------
base_ini=$POOL_INI
POOL_INI=$E2E_TMP/off.ini
{ cat "$base_ini"; printf '[fuse]\nio_uring = off\n'; } >"$POOL_INI"
mount_view "$mnt"
grep -q '^view_transport /dev/fuse$' "$mnt/.kvpool/stats" || fail "io_uring = off: $(grep view_transport "$mnt/.kvpool/stats")"
echo off >"$mnt/off" && [ "$(cat "$mnt/off")" = off ] || fail "write and read with io_uring = off"
unmount_view "$mnt" "$view_pid"
POOL_INI=$E2E_TMP/on.ini
{ cat "$base_ini"; printf '[fuse]\nio_uring = on\n'; } >"$POOL_INI"
echo N >"$param"
expect 1 "$KVP" -c "$POOL_INI" mount -f "$mnt"
grep -q "$param" "$E2E_TMP/err" || fail "io_uring = on without it: $(cat "$E2E_TMP/err")"
grep -q " $mnt " /proc/mounts && fail "io_uring = on without it left a mount"
echo Y >"$param"
mount_view "$mnt"
[ -n "$(served "$mnt")" ] || fail "io_uring = on: not over io_uring"
unmount_view "$mnt" "$view_pid"
POOL_INI=$base_ini
ok "io_uring = off keeps /dev/fuse; = on needs $param (the mount fails naming it) and uses the ring"
