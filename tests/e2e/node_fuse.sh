#!/bin/bash
# node_fuse.sh — the FUSE view inside kvpool-node ([fuse] mountpoint): the
# view is mounted before the node says ready, a file copied in is an object
# whose extent lies in the node's segment (kvpool scan lists it) and reads
# back byte for byte, ls lists it, and SIGTERM unmounts the view and exits 0.
# A mount point that cannot be mounted makes the node exit 1.
# Exit 0 pass, 1 fail, 77 skip (no /dev/fuse or fusermount3).
. "$(dirname "$0")/lib.sh"
e2e_init nfuse
KVP=$B/kvpool
need "$B/kvpool-master" "$B/kvpool-node" "$KVP" fusermount3 python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
mnt=$E2E_TMP/mnt
mkdir -p "$mnt"
on_cleanup "fuse_unmount '$mnt'"

pool_ini "[node]" "segment_size = 64M" "heartbeat_interval = 200ms" "[client]" "timeout = 5s" \
	"[fuse]" "mountpoint = $mnt" "[log]" "level = info"
pool_node fusenode
log=$E2E_TMP/fusenode.log

run_master
run_node fusenode
npid=$NODE_PID
if ! waitfor 10 grep -q "ready: data port" "$log"; then
	# A container without the right to mount FUSE is not a node failure.
	if grep -qi "fuse.*\(permission\|not permitted\|operation not\)" "$log"; then
		skip "cannot mount FUSE here"
	fi
	fail "node not ready with a FUSE view"
fi
mountpoint -q "$mnt" || fail "$mnt is not a mount point after READY"
fl=$(grep -n "FUSE view mounted" "$log" | head -1 | cut -d: -f1)
rl=$(grep -n "ready: data port" "$log" | head -1 | cut -d: -f1)
[ -n "$fl" ] && [ "$fl" -lt "$rl" ] || fail "ready before the FUSE view was mounted"
ok "FUSE view mounted at $mnt before the node reported ready"

head -c 300000 /dev/urandom >"$E2E_TMP/blob"
cp "$E2E_TMP/blob" "$mnt/fuse-blob" || fail "cp into the view"
cmp "$E2E_TMP/blob" "$mnt/fuse-blob" || fail "read back through the view differs"
ls "$mnt" | grep -qx "fuse-blob" || fail "ls does not list the file"
"$KVP" scan "$NODE_SEG" >"$E2E_TMP/scan" 2>&1 || fail "kvpool scan: $(cat "$E2E_TMP/scan")"
grep -q "fuse-blob" "$E2E_TMP/scan" || fail "the node's segment does not hold fuse-blob"
ok "a file copied into the view is an object in the node's segment, reads back equal"

stop_pid "$npid"
rc=$?
[ $rc = 0 ] || fail "SIGTERM: exit $rc"
mountpoint -q "$mnt" && fail "view still mounted after the node exited"
ok "SIGTERM: view unmounted, exit 0"

# A mount point that does not exist: start-up fails, exit 1.
spawn bad "$B/kvpool-node" -c "$POOL_INI" -c "$E2E_TMP/fusenode.ini" -o "fuse.mountpoint=$E2E_TMP/nonexistent"
bpid=$SPAWN_PID
for _ in $(seq 100); do kill -0 "$bpid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$bpid" 2>/dev/null; then
	kill -KILL "$bpid"
	fail "node kept running with an unmountable FUSE view"
fi
wait "$bpid"
rc=$?
forget "$bpid"
[ $rc = 1 ] || fail "unmountable view: exit $rc"
ok "unmountable view: the node exits 1"
echo "node_fuse: all passed"
