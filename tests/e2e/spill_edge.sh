#!/bin/bash
# spill_edge.sh — the spill tier's edges, real master + node on private
# loopback ports, 16 MiB segment:
#  1. no [spill]: putting 3x the memory capacity evicts; the oldest objects
#     return "not found" (exit 3), the newest read back byte-exact, and no get
#     ever returns wrong bytes;
#  2. the spill file on a full filesystem (an 8 MiB tmpfs mounted for the
#     test; root only, else this part is skipped): the node logs a clear
#     error naming the free space and runs memory-only (spill capacity 0 at
#     the master), puts and gets work.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init spilledge
KVP=$B/kvpool NODE=$B/kvpool-node
need "$B/kvpool-master" "$NODE" "$KVP" curl python3

read -r nport nhttp <<<"$(free_ports 2)"
seg=kvpt-spille-$$
on_cleanup "rm -f /dev/shm/$seg"

start_master "lease_ttl = 1s" "eviction_high_watermark = 0.9" "eviction_ratio = 0.1" \
	"[log]" "level = info"
cat >"$E2E_TMP/pool.ini" <<EOF
[cluster]
master = $MASTER_ADDR
[client]
timeout = 10s
replicas = 1
EOF
node_ini() {	# extra lines
	cat <<EOF
[cluster]
master = $MASTER_ADDR
[node]
name = en1
listen = 127.0.0.1:$nport
http_listen = 127.0.0.1:$nhttp
segment = $seg
segment_size = 16M
heartbeat_interval = 300ms
[log]
level = info
EOF
	local l
	for l in "$@"; do echo "$l"; done
}
kv() { "$KVP" -c "$E2E_TMP/pool.ini" "$@"; }
start_node() {
	spawn node "$NODE" -c "$E2E_TMP/node.ini"
	NODE_PID=$SPAWN_PID
	local i
	for i in $(seq 150); do
		# this process mounted (the master may still list an earlier one)
		curl -sf "http://127.0.0.1:$nhttp/health" 2>/dev/null | grep -q '"master":"up"' &&
			return 0
		sleep 0.1
	done
	fail "the node did not mount"
}
stop_node() {
	kill -TERM "$NODE_PID" 2>/dev/null
	wait "$NODE_PID" 2>/dev/null
	forget "$NODE_PID"
}

# ---- 1. no spill tier: eviction -------------------------------------------------------
node_ini >"$E2E_TMP/node.ini"
start_node
n=96
for i in $(seq 1 $n); do
	head -c $((512 * 1024 - i)) /dev/urandom >"$E2E_TMP/v$i"
	kv put "k/$i" "$E2E_TMP/v$i" 2>"$E2E_TMP/err" || fail "put k/$i: $(cat "$E2E_TMP/err")"
done
found=0 missing=0 first_missing=0
for i in $(seq 1 $n); do
	kv get "k/$i" "$E2E_TMP/got" 2>"$E2E_TMP/err"
	rc=$?
	if [ $rc = 0 ]; then
		cmp -s "$E2E_TMP/got" "$E2E_TMP/v$i" || fail "k/$i: wrong bytes"
		found=$((found + 1))
	elif [ $rc = 3 ]; then
		grep -q KVP_ENOTFOUND "$E2E_TMP/err" || fail "k/$i: $(cat "$E2E_TMP/err")"
		missing=$((missing + 1))
		[ $first_missing = 0 ] && first_missing=$i
	else
		fail "get k/$i exited $rc: $(cat "$E2E_TMP/err")"
	fi
done
[ $missing -ge 48 ] || fail "only $missing of $n objects evicted from a 16 MiB segment"
[ "$first_missing" = 1 ] || fail "the oldest object survived (first missing: k/$first_missing)"
for i in $(seq $((n - 7)) $n); do
	kv get "k/$i" "$E2E_TMP/got" 2>/dev/null && cmp -s "$E2E_TMP/got" "$E2E_TMP/v$i" ||
		fail "a newest object (k/$i) is not readable"
done
[ "$(metric kvpool_master_demotions_total)" = 0 ] || fail "demotions without a spill tier"
ok "no spill: $missing oldest of $n evicted (not found), $found read back exactly"
stop_node

# ---- 2. spill file on a full filesystem ---------------------------------------------------
[ "$(id -u)" = 0 ] || { ok "full filesystem case skipped: not root"; exit 0; }
mnt=$E2E_TMP/full
mkdir -p "$mnt"
mount -t tmpfs -o size=8M "kvpt-spill-$$" "$mnt" 2>"$E2E_TMP/err" ||
	{ ok "full filesystem case skipped: $(cat "$E2E_TMP/err")"; exit 0; }
on_cleanup "umount -l '$mnt'"
kv rm --all --force >/dev/null 2>&1
rm -f "/dev/shm/$seg"
node_ini "[spill]" "path = $mnt/spill" "size = 64M" >"$E2E_TMP/node.ini"
start_node
grep -q "cannot reserve 64.0 MiB: No space left on device" "$E2E_TMP/node.log" ||
	fail "no clear ENOSPC message: $(grep -i spill "$E2E_TMP/node.log")"
grep -q "memory-only" "$E2E_TMP/node.log" || fail "the node does not say it runs memory-only"
[ ! -e "$mnt/spill" ] || fail "a partial spill file was left on the full filesystem"
kv info --json >"$E2E_TMP/info.json"
python3 -c '
import json, sys
n = [x for x in json.load(open(sys.argv[1]))["nodes"] if x["name"] == "en1"]
sys.exit(0 if n and all(x["spill_capacity"] == 0 for x in n) else 1)' "$E2E_TMP/info.json" ||
	fail "master shows a spill capacity: $(cat "$E2E_TMP/info.json")"
head -c 300000 /dev/urandom >"$E2E_TMP/x"
kv put full/x "$E2E_TMP/x" || fail "put with a failed spill tier"
kv get full/x "$E2E_TMP/got" && cmp -s "$E2E_TMP/got" "$E2E_TMP/x" || fail "get with a failed spill tier"
ok "spill file on a full 8 MiB tmpfs: '$(grep -o 'spill file .*free)' "$E2E_TMP/node.log" | head -n 1)'; memory-only, put/get work"
