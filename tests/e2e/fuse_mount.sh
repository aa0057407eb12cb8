#!/bin/bash
# fuse_mount.sh — the ways the FUSE view is mounted and unmounted: inside
# kvpool-node ([fuse] mountpoint; stopping the node unmounts), `kvpool
# mount` detached (SIGTERM unmounts), a stale mount left by a killed
# daemon is cleared at the next mount, a second mount on a live view is
# refused, -o ro refuses every change with EROFS, and an /etc/fstab-style
# `mount -t fuse.kvpool` through tools/mount.kvpool. No mount is left.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/fuse_lib.inc"

nmnt=$E2E_TMP/nmnt
mkdir -p "$nmnt"
mounted_at "$nmnt"
start_pool "$(printf '[fuse]\nmountpoint = %s' "$nmnt")"
wait_mounted "$nmnt" "$NODE_PID"
printf 'in the node' | kv put nodekey || fail "put"
[ "$(cat "$nmnt/nodekey")" = "in the node" ] || fail "read through the node's view"
printf 'written' >"$nmnt/fromfs" || fail "write through the node's view"
[ "$(kv get fromfs)" = written ] || fail "value written through the node's view"
ok "kvpool-node mounts [fuse] mountpoint: reads and writes"

# ---- kvpool mount, detached; SIGTERM unmounts ----------------------------------
dmnt=$E2E_TMP/dmnt
mkdir -p "$dmnt"
mounted_at "$dmnt"
kv mount "$dmnt" >"$E2E_TMP/daemon.log" 2>&1 || fail "kvpool mount (detached) failed: $(cat "$E2E_TMP/daemon.log")"
grep -q " $dmnt fuse.kvpool " /proc/mounts || fail "kvpool mount returned before mounting"
[ "$(cat "$dmnt/nodekey")" = "in the node" ] || fail "read through the detached view"
dpid=$(pgrep -f -- "mount $dmnt\$" | head -n 1)
[ -n "$dpid" ] || fail "no daemon process for $dmnt"
E2E_PIDS+=("$dpid")
kill -TERM "$dpid"
waitfor 10 gone "$dpid" || fail "the daemon did not exit on SIGTERM"
forget "$dpid"
grep -q " $dmnt " /proc/mounts && fail "SIGTERM left $dmnt mounted"
ok "kvpool mount detaches once mounted; SIGTERM unmounts and exits"

# ---- a stale mount is cleared ---------------------------------------------------
smnt=$E2E_TMP/smnt
mount_view "$smnt"
stop_pid "$view_pid" KILL
stat -f "$smnt" >/dev/null 2>"$E2E_TMP/err" && fail "a killed daemon's mount still answers"
# over io_uring, ECONNABORTED while the kernel tears the dead daemon's rings down
grep -Eq "not connected|connection abort" "$E2E_TMP/err" || fail "stale mount: $(cat "$E2E_TMP/err")"
mount_view "$smnt"
[ "$(cat "$smnt/nodekey")" = "in the node" ] || fail "read after clearing the stale mount"
[ "$(grep -c " $smnt " /proc/mounts)" = 1 ] || fail "stale mount still stacked under the new one"
ok "a stale mount (ENOTCONN) is detached and mounted again"

expect_errno "already mounted" kv mount -f "$smnt"
unmount_view "$smnt" "$view_pid"
ok "a second mount on a live view is refused"

# ---- read-only --------------------------------------------------------------------
rmnt=$E2E_TMP/rmnt
mount_view "$rmnt" -o ro
grep -q " $rmnt fuse.kvpool ro," /proc/mounts || fail "-o ro: not a read-only mount"
[ "$(cat "$rmnt/nodekey")" = "in the node" ] || fail "read through the ro view"
expect_errno "Read-only file system" cp /etc/hostname "$rmnt/newkey"
expect_errno "Read-only file system" rm "$rmnt/nodekey"
expect_errno "Read-only file system" mkdir "$rmnt/newdir"
expect_errno "Read-only file system" bash -c "echo x > '$rmnt/nodekey'"
kv exists nodekey -q || fail "ro view removed a key"
kv exists newkey -q && fail "ro view stored a key"
[ "$(stat -c %a "$rmnt/nodekey")" = 444 ] || fail "ro view shows mode $(stat -c %a "$rmnt/nodekey")"
unmount_view "$rmnt" "$view_pid"
ok "-o ro: cp, rm, mkdir, > refused with EROFS; mode without write bits"

# ---- fstab: mount -t fuse.kvpool through tools/mount.kvpool ---------------------
fmnt=$E2E_TMP/fmnt
mkdir -p "$fmnt"
mounted_at "$fmnt"
helper=$E2E_ROOT/tools/mount.kvpool
MOUNT_KVPOOL_BIN=$KVP "$helper" kvpool "$fmnt" -o "defaults,_netdev,nofail,config=$E2E_TMP/pool.ini,ro" ||
	fail "mount.kvpool (run directly) failed"
grep -q " $fmnt fuse.kvpool ro," /proc/mounts || fail "mount.kvpool: not mounted read-only"
[ "$(cat "$fmnt/nodekey")" = "in the node" ] || fail "read through the helper's mount"
fusermount3 -u "$fmnt" || fail "unmount the helper's mount"
if [ "$(id -u)" = 0 ] && [ ! -e /sbin/mount.fuse.kvpool ] && [ -w /sbin ]; then
	ln -s "$helper" /sbin/mount.fuse.kvpool || fail "install /sbin/mount.fuse.kvpool"
	extra_cleanup='rm -f /sbin/mount.fuse.kvpool'
	MOUNT_KVPOOL_BIN=$KVP mount -t fuse.kvpool kvpool "$fmnt" \
		-o "defaults,_netdev,config=$E2E_TMP/pool.ini" 2>"$E2E_TMP/err" || fail "mount -t fuse.kvpool: $(cat "$E2E_TMP/err")"
	grep -q " $fmnt fuse.kvpool " /proc/mounts || fail "mount(8) did not mount"
	[ "$(cat "$fmnt/nodekey")" = "in the node" ] || fail "read through mount(8)'s mount"
	printf via-fstab >"$fmnt/fstabkey" || fail "write through mount(8)'s mount"
	[ "$(kv get fstabkey)" = via-fstab ] || fail "value written through mount(8)'s mount"
	umount "$fmnt" || fail "umount"
	grep -q " $fmnt " /proc/mounts && fail "umount left $fmnt mounted"
	rm -f /sbin/mount.fuse.kvpool
	extra_cleanup=
	ok "mount -t fuse.kvpool kvpool DIR -o _netdev,config=... (fstab line) and umount"
else
	echo "note: /sbin/mount.fuse.kvpool exists or /sbin is not writable: mount(8) path not tested"
fi

# ---- stopping the node unmounts its view -----------------------------------------
kill -TERM "$NODE_PID"
waitfor 10 gone "$NODE_PID" || fail "kvpool-node did not exit"
grep -q " $nmnt " /proc/mounts && fail "the node left its view mounted"
grep -q "fuse.kvpool" /proc/mounts && grep " $E2E_TMP" /proc/mounts && fail "mounts left under $E2E_TMP"
ok "stopping kvpool-node unmounts its view; no mount left"
