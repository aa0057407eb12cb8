#!/bin/bash
# node_fuse.sh — the FUSE view inside kvpool-node ([fuse] mountpoint): the
# view is mounted before the node says ready, a file copied in is an object
# whose extent lies in the node's segment (kvpool scan lists it) and reads
# back byte for byte, ls lists it, and SIGTERM unmounts the view and exits 0.
# A mount point that cannot be mounted makes the node exit 1.
# Exit 0 pass, 1 fail, 77 skip (no /dev/fuse or fusermount3).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${KVP_BUILD:-$root/build}
MASTER=$B/kvpool-master NODE=$B/kvpool-node KVP=$B/kvpool
for b in "$MASTER" "$NODE" "$KVP"; do
	[ -x "$b" ] || { echo "skip: $b is not built"; exit 77; }
done
[ -c /dev/fuse ] || { echo "skip: no /dev/fuse"; exit 77; }
command -v fusermount3 >/dev/null || { echo "skip: fusermount3 missing"; exit 77; }
command -v python3 >/dev/null || { echo "skip: python3 missing"; exit 77; }

tmp=$(mktemp -d /tmp/kvp-nfuse.XXXXXX)
seg=kvpt-nfuse-$$
mnt=$tmp/mnt
mkdir -p "$mnt"
mpid="" npid=""

cleanup() {
	local rc=$?
	trap - EXIT
	for p in $npid $mpid; do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 50); do
		local alive=0
		for p in $npid $mpid; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in $npid $mpid; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	if mountpoint -q "$mnt" 2>/dev/null; then
		fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
	fi
	if [ $rc != 0 ] && [ $rc != 77 ]; then
		for l in "$tmp"/*.log; do
			[ -f "$l" ] || continue
			echo "--- last lines of $(basename "$l")"
			tail -n 20 "$l"
		done
	fi
	rm -f "/dev/shm/$seg"
	rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok - $*"; }

read -r mport dport hport <<<"$(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
cat >"$tmp/pool.ini" <<EOF
[cluster]
master = 127.0.0.1:$mport
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:0
metadata_server = false
[node]
name = fusenode
listen = 127.0.0.1:$dport
http_listen = 127.0.0.1:$hport
segment = $seg
segment_size = 64M
heartbeat_interval = 200ms
[client]
timeout = 5s
[fuse]
mountpoint = $mnt
[log]
level = info
EOF

"$MASTER" -c "$tmp/pool.ini" >"$tmp/master.log" 2>&1 &
mpid=$!
"$NODE" -c "$tmp/pool.ini" >"$tmp/node.log" 2>&1 &
npid=$!
for _ in $(seq 100); do grep -q "ready: data port" "$tmp/node.log" && break; sleep 0.05; done
if ! grep -q "ready: data port" "$tmp/node.log"; then
	# A container without the right to mount FUSE is not a node failure.
	if grep -qi "fuse.*\(permission\|not permitted\|operation not\)" "$tmp/node.log"; then
		echo "skip: cannot mount FUSE here"
		exit 77
	fi
	fail "node not ready with a FUSE view"
fi
mountpoint -q "$mnt" || fail "$mnt is not a mount point after READY"
fl=$(grep -n "FUSE view mounted" "$tmp/node.log" | head -1 | cut -d: -f1)
rl=$(grep -n "ready: data port" "$tmp/node.log" | head -1 | cut -d: -f1)
[ -n "$fl" ] && [ "$fl" -lt "$rl" ] || fail "ready before the FUSE view was mounted"
ok "FUSE view mounted at $mnt before the node reported ready"

head -c 300000 /dev/urandom >"$tmp/blob"
cp "$tmp/blob" "$mnt/fuse-blob" || fail "cp into the view"
cmp "$tmp/blob" "$mnt/fuse-blob" || fail "read back through the view differs"
ls "$mnt" | grep -qx "fuse-blob" || fail "ls does not list the file"
"$KVP" scan "$seg" >"$tmp/scan" 2>&1 || fail "kvpool scan: $(cat "$tmp/scan")"
grep -q "fuse-blob" "$tmp/scan" || fail "the node's segment does not hold fuse-blob"
ok "a file copied into the view is an object in the node's segment, reads back equal"

kill -TERM "$npid"
wait "$npid"
rc=$?
npid=""
[ $rc = 0 ] || fail "SIGTERM: exit $rc"
mountpoint -q "$mnt" && fail "view still mounted after the node exited"
ok "SIGTERM: view unmounted, exit 0"

# A mount point that does not exist: start-up fails, exit 1.
"$NODE" -c "$tmp/pool.ini" -o "fuse.mountpoint=$tmp/nonexistent" >"$tmp/bad.log" 2>&1 &
bpid=$!
for _ in $(seq 100); do kill -0 "$bpid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$bpid" 2>/dev/null; then
	kill -KILL "$bpid"
	fail "node kept running with an unmountable FUSE view"
fi
wait "$bpid"
rc=$?
[ $rc = 1 ] || fail "unmountable view: exit $rc"
ok "unmountable view: the node exits 1"
echo "node_fuse: all passed"
