#!/bin/bash
# pool_faults.sh — the pool under failures, with real processes on private
# loopback ports: a master and three nodes (client_ttl 2 s, put_timeout 2 s).
#  1. kill -9 a node: its replicas leave the master; objects with a replica
#     elsewhere (replicas=2) stay readable, the others are "not found" — never
#     wrong bytes, never a hang past client.timeout;
#  2. restart that node: every object it held is readable again;
#  3. kill -9 and restart the master: every object is readable again once the
#     nodes have re-reported;
#  4. a client dies between PUT_START and PUT_END (a wire-level driver killed
#     with -9, and a `kvpool put` killed mid-transfer): the space is reclaimed
#     after put_timeout and the key can be put again.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init faults
KVP=$B/kvpool
need "$KVP" "$B/kvpool-master" "$B/kvpool-node" python3

client_timeout_s=3
pool_ini "client_ttl = 2s" "put_timeout = 2s" "lease_ttl = 1s" \
	"[client]" "timeout = ${client_timeout_s}s" "replicas = 1" "[log]" "level = info"
for n in n1 n2 n3; do
	pool_node $n "segment_size = 160M" "heartbeat_interval = 300ms" "remove_segment_on_exit = false"
done
declare -A npid=()
start_node() {
	run_node "$1"
	npid[$1]=$NODE_PID
}
# Keys of the master's table.
pool_keys() {
	kv info --json 2>/dev/null | jval - 'r["keys"]' 2>/dev/null
}
bytes_used() {
	kv info --json | jval - 'r["bytes_used"]'
}
# get_all PREFIX COUNT [any] [GLOBAL OPTIONS...]: verified gets of the objects
# an earlier bench put (JSON report in $E2E_TMP/out); exit 0 required unless "any"
# (then failed calls are allowed, but the run must finish and report).
get_all() {
	local rc
	timeout 120 "$KVP" -c "$POOL_INI" "${@:4}" bench --op get --existing --keep \
		--prefix "$1" --size 1-512K --count "$2" --threads 2 --json >"$E2E_TMP/out" 2>"$E2E_TMP/err"
	rc=$?
	if [ $rc != 0 ] && { [ "${3:-}" != any ] || [ $rc != 1 ]; }; then
		echo "FAIL: bench get $1 exited $rc"
		head -n 5 "$E2E_TMP/out" "$E2E_TMP/err"
		exit 1
	fi
}

run_master
for n in n1 n2 n3; do start_node $n; done
wait_nodes "n1 n2 n3" 30 || fail "nodes did not come up"
ok "master and 3 nodes up"

# ---- objects: 60 with two replicas, 60 with one ------------------------------
expect 0 kv -o client.replicas=2 bench --op put --prefix r2/ --size 1-512K --count 60 --keep --json
pyjson "$E2E_TMP/out" 'r["ok"] == 60' || fail "put r2/: $(cat "$E2E_TMP/out")"
expect 0 kv bench --op put --prefix r1/ --size 1-512K --count 60 --keep --json
pyjson "$E2E_TMP/out" 'r["ok"] == 60' || fail "put r1/: $(cat "$E2E_TMP/out")"
head -c 300000 /dev/urandom >"$E2E_TMP/file.bin"
expect 0 kv -o client.replicas=3 put file/three "$E2E_TMP/file.bin"

# Where each object lives (node names per key), one JSON line per key.
where() {
	local k
	kv ls "$1" | while IFS= read -r k; do kv stat --json "$k" || echo '{"missing": true}'; done
}
where r1/ >"$E2E_TMP/r1.where"
where r2/ >"$E2E_TMP/r2.where"
python3 - "$E2E_TMP/r2.where" <<'EOF' || fail "r2/ objects do not have 2 replicas on distinct nodes"
import json, sys
for line in open(sys.argv[1]):
    s = json.loads(line)
    nodes = [x["node"] for x in s["replicas"]]
    assert len(nodes) == 2 and len(set(nodes)) == 2, s
EOF
on_n1=$(python3 -c '
import json, sys
print(sum(1 for l in open(sys.argv[1]) if "n1" in [x["node"] for x in json.loads(l)["replicas"]]))' "$E2E_TMP/r1.where")
[ "$on_n1" -ge 1 ] || fail "no single-replica object landed on n1 (allocation did not spread)"
victim_key=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    s = json.loads(l)
    if [x["node"] for x in s["replicas"]] == ["n1"]: print(s["key"]); break' "$E2E_TMP/r1.where")
ok "120 objects placed; $on_n1 of the single-replica ones on n1 ($victim_key)"

# ---- 1. kill -9 a node ---------------------------------------------------------
stop_pid "${npid[n1]}" KILL
killed_at=$SECONDS
# Reads right away (before the master notices) must never return wrong bytes.
get_all r1/ 60 any
pyjson "$E2E_TMP/out" 'r["mismatches"] == 0' || fail "wrong bytes right after the kill: $(cat "$E2E_TMP/out")"
# Over TCP the dead node refuses connections: two-replica objects must be
# read from the surviving replica at once, before the master notices.
get_all r2/ 60 "" -o client.protocol=tcp
pyjson "$E2E_TMP/out" 'r["ok"] == 60 and r["mismatches"] == 0 and r["tcp_bytes"] > 0' ||
	fail "two-replica objects over TCP right after the kill: $(cat "$E2E_TMP/out")"
get_all r2/ 60 any
pyjson "$E2E_TMP/out" 'r["mismatches"] == 0' || fail "wrong bytes right after the kill: $(cat "$E2E_TMP/out")"
wait_nodes "n2 n3" 30 || fail "the master still lists n1"
echo "   n1 left the master after $((SECONDS - killed_at)) s (client_ttl 2 s)"
where r2/ >"$E2E_TMP/r2.after"
python3 - "$E2E_TMP/r2.after" <<'EOF' || fail "r2/ replicas still name n1 or vanished"
import json, sys
n = 0
for line in open(sys.argv[1]):
    s = json.loads(line)
    nodes = [x["node"] for x in s["replicas"]]
    assert "n1" not in nodes and len(nodes) >= 1, s
    n += 1
assert n == 60, n
EOF
get_all r2/ 60
pyjson "$E2E_TMP/out" 'r["ok"] == 60 and r["missing"] == 0 and r["errors"] == 0 and r["mismatches"] == 0' ||
	fail "objects with a surviving replica are not all readable: $(cat "$E2E_TMP/out")"
get_all r1/ 60
pyjson "$E2E_TMP/out" 'r["missing"] == int(args[0]) and r["ok"] == 60 - int(args[0]) and r["errors"] == 0 and r["mismatches"] == 0' \
	"$on_n1" || fail "single-replica gets after losing n1 ($on_n1 lost): $(cat "$E2E_TMP/out")"
expect 3 timeout $((3 * client_timeout_s)) "$KVP" -c "$POOL_INI" get "$victim_key"
grep -q "KVP_ENOTFOUND" "$E2E_TMP/err" || fail "lost object: $(cat "$E2E_TMP/err")"
expect 0 kv get file/three
cmp -s "$E2E_TMP/out" "$E2E_TMP/file.bin" || fail "3-replica object differs after losing n1"
ok "node killed: replicas dropped, survivors readable, lost objects not found, no wrong bytes"

# ---- 2. restart the node: its objects come back --------------------------------
start_node n1
wait_nodes "n1 n2 n3" 30 || fail "n1 did not come back"
for _ in $(seq 100); do
	kv exists -q "$victim_key" && break
	sleep 0.2
done
get_all r1/ 60
pyjson "$E2E_TMP/out" 'r["ok"] == 60 and r["mismatches"] == 0' || fail "r1/ after restarting n1: $(cat "$E2E_TMP/out")"
get_all r2/ 60
pyjson "$E2E_TMP/out" 'r["ok"] == 60 and r["mismatches"] == 0' || fail "r2/ after restarting n1: $(cat "$E2E_TMP/out")"
ok "node restarted: every object it held is readable again"

# ---- 3. restart the master ------------------------------------------------------
keys_before=$(pool_keys)
stop_pid "$MASTER_PID" KILL
expect 1 kv info
run_master
wait_nodes "n1 n2 n3" 30 || fail "nodes did not re-mount at the restarted master"
for _ in $(seq 150); do
	[ "$(pool_keys)" = "$keys_before" ] && break
	sleep 0.2
done
[ "$(pool_keys)" = "$keys_before" ] || fail "master rebuilt $(pool_keys) keys, had $keys_before"
get_all r1/ 60
pyjson "$E2E_TMP/out" 'r["ok"] == 60 and r["mismatches"] == 0' || fail "r1/ after the master restart: $(cat "$E2E_TMP/out")"
get_all r2/ 60
pyjson "$E2E_TMP/out" 'r["ok"] == 60 and r["mismatches"] == 0' || fail "r2/ after the master restart: $(cat "$E2E_TMP/out")"
expect 0 kv get file/three
cmp -s "$E2E_TMP/out" "$E2E_TMP/file.bin" || fail "file/three after the master restart"
ok "master restarted: $keys_before keys rebuilt from the nodes' reports, all readable"

# ---- 4. a client dies mid-put ------------------------------------------------------
cat >"$E2E_TMP/putstart.py" <<'EOF'
# HELLO + PUT_START of one key (src/common/wire.h), then wait to be killed.
import socket, struct, sys, time
host, port = sys.argv[1].rsplit(":", 1)
key, size = sys.argv[2].encode(), int(sys.argv[3])
MAGIC, VER = 0x3150564B, 1
def s16(b): return struct.pack("<H", len(b)) + b
def frame(op, body, reqid):
    return struct.pack("<IBBHiIQQ", MAGIC, VER, 0, op, 0, len(body), reqid, 0) + body
def recv_frame(s):
    hdr = b""
    while len(hdr) < 32:
        c = s.recv(32 - len(hdr))
        if not c: raise SystemExit("connection closed")
        hdr += c
    magic, ver, flags, op, status, blen, reqid, plen = struct.unpack("<IBBHiIQQ", hdr)
    body = b""
    while len(body) < blen:
        c = s.recv(blen - len(body))
        if not c: raise SystemExit("connection closed")
        body += c
    return status, body
s = socket.create_connection((host, int(port)))
s.sendall(frame(1, struct.pack("<H", 1) + s16(b"") + s16(b"deadput") + s16(b"deadput-host"), 1))
status, _ = recv_frame(s)
if status: raise SystemExit("HELLO failed: %d" % status)
s.sendall(frame(16, struct.pack("<BIIQI", 1, 0, 0, 0, 1) + s16(key) + struct.pack("<Q", size), 2))
status, body = recv_frame(s)
n, st = struct.unpack_from("<Ii", body)
if status or n != 1 or st: raise SystemExit("PUT_START failed: %d %d" % (status, st))
print("started", flush=True)
time.sleep(3600)
EOF
used0=$(bytes_used)
spawn putstart python3 "$E2E_TMP/putstart.py" "$MASTER_ADDR" dead/put $((32 << 20))
putstart=$SPAWN_PID
for _ in $(seq 100); do
	grep -q started "$E2E_TMP/putstart.log" && break
	kill -0 "$putstart" 2>/dev/null || fail "PUT_START driver: $(cat "$E2E_TMP/putstart.log")"
	sleep 0.1
done
grep -q started "$E2E_TMP/putstart.log" || fail "PUT_START driver did not start the put"
stop_pid "$putstart" KILL
head -c $((32 << 20)) /dev/urandom >"$E2E_TMP/32m.bin"
expect 1 kv put dead/put "$E2E_TMP/32m.bin"
grep -Eq "KVP_EEXIST|KVP_EBUSY" "$E2E_TMP/err" || fail "put during the dead put: $(cat "$E2E_TMP/err")"
expect 3 kv exists -q dead/put
put_ok=0
for _ in $(seq 150); do
	if kv put dead/put "$E2E_TMP/32m.bin" 2>"$E2E_TMP/err"; then put_ok=1; break; fi
	grep -Eq "KVP_EEXIST|KVP_EBUSY" "$E2E_TMP/err" || fail "retry put: $(cat "$E2E_TMP/err")"
	sleep 0.2
done
[ $put_ok = 1 ] || fail "dead/put could not be put again within 30 s (put_timeout 2 s)"
expect 0 kv get dead/put
cmp -s "$E2E_TMP/out" "$E2E_TMP/32m.bin" || fail "dead/put value differs"
used1=$(bytes_used)
# The dead put's 32 MiB went back to the pool: usage grew by one object only.
[ $((used1 - used0)) -lt $((48 << 20)) ] ||
	fail "space not reclaimed: used grew by $((used1 - used0)) bytes for one 32 MiB object"
ok "client killed after PUT_START: space reclaimed, key put again"

# A `kvpool put` killed while it transfers (it may also have finished).
head -c $((64 << 20)) /dev/urandom >"$E2E_TMP/64m.bin"
spawn cliput "$KVP" -c "$POOL_INI" -o client.protocol=tcp put dead/cli "$E2E_TMP/64m.bin"
sleep 0.3
stop_pid "$SPAWN_PID" KILL
done_ok=0
for _ in $(seq 150); do
	if kv get dead/cli "$E2E_TMP/cli.got" 2>/dev/null; then
		cmp -s "$E2E_TMP/cli.got" "$E2E_TMP/64m.bin" || fail "dead/cli exists with wrong bytes"
		done_ok=1
		break
	fi
	if kv put dead/cli "$E2E_TMP/64m.bin" 2>/dev/null; then done_ok=1; break; fi
	sleep 0.2
done
[ $done_ok = 1 ] || fail "dead/cli neither readable nor puttable within 30 s"
expect 0 kv get dead/cli
cmp -s "$E2E_TMP/out" "$E2E_TMP/64m.bin" || fail "dead/cli value differs"
ok "kvpool put killed mid-transfer: the key is whole or can be put again"
echo "PASS pool_faults.sh"
