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
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${KVP_BUILD:-$root/build}
KVP=$B/kvpool MASTER=$B/kvpool-master NODE=$B/kvpool-node
for b in "$KVP" "$MASTER" "$NODE"; do
	[ -x "$b" ] || { echo "skip: $b is not built"; exit 77; }
done
command -v python3 >/dev/null || { echo "skip: python3 missing"; exit 77; }

tmp=$(mktemp -d /tmp/kvp-faults.XXXXXX)
tag=kvpt-flt-$$
declare -A pid=()

cleanup() {
	local rc=$?
	trap - EXIT
	for p in "${pid[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 30); do
		local alive=0
		for p in "${pid[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in "${pid[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ $rc != 0 ] && [ $rc != 77 ]; then
		for l in "$tmp"/*.log; do
			[ -f "$l" ] || continue
			echo "--- last lines of $(basename "$l")"
			tail -n 15 "$l"
		done
	fi
	rm -f /dev/shm/"$tag"-*
	rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT

fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok - $*"; }
expect() {
	local want=$1 rc
	shift
	"$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ "$rc" != "$want" ]; then
		echo "FAIL: '$*' exited $rc, expected $want"
		sed 's/^/  stdout: /' "$tmp/out" | head -n 10
		sed 's/^/  stderr: /' "$tmp/err" | head -n 10
		exit 1
	fi
}
free_ports() {
	python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
}
# jq-like checks on the last JSON output: pyjson 'EXPR' [ARGS...]; r is the document.
pyjson() {
	local expr=$1
	shift
	python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
args = sys.argv[2:]
sys.exit(0 if ($expr) else 1)" "$tmp/out" "$@"
}

read -r mport mhttp d1 h1 d2 h2 d3 h3 <<<"$(free_ports 8)"
client_timeout_s=3
common() {
	cat <<EOF
[cluster]
master = 127.0.0.1:$mport
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
metadata_server = false
client_ttl = 2s
put_timeout = 2s
lease_ttl = 1s
[client]
timeout = ${client_timeout_s}s
replicas = 1
[log]
level = info
EOF
}
node_conf() {	# name data_port http_port
	common
	cat <<EOF
[node]
name = $1
listen = 127.0.0.1:$2
http_listen = 127.0.0.1:$3
segment = $tag-$1
segment_size = 160M
heartbeat_interval = 300ms
remove_segment_on_exit = false
EOF
}
common >"$tmp/pool.ini"
node_conf n1 "$d1" "$h1" >"$tmp/n1.ini"
node_conf n2 "$d2" "$h2" >"$tmp/n2.ini"
node_conf n3 "$d3" "$h3" >"$tmp/n3.ini"
kv() { "$KVP" -c "$tmp/pool.ini" "$@"; }

start_master() {
	"$MASTER" -c "$tmp/pool.ini" >>"$tmp/master.log" 2>&1 &
	pid[master]=$!
}
start_node() {
	"$NODE" -c "$tmp/$1.ini" >>"$tmp/$1.log" 2>&1 &
	pid[$1]=$!
}
# Names of the nodes the master lists, sorted, space-separated.
node_names() {
	kv info --json 2>/dev/null | python3 -c '
import json, sys
print(" ".join(sorted(n["name"] for n in json.load(sys.stdin)["nodes"])))' 2>/dev/null
}
# wait_nodes "n1 n2 n3" SECONDS: until the master lists exactly these nodes.
wait_nodes() {
	local want=$1 limit=$2 start=$SECONDS
	while [ $((SECONDS - start)) -lt "$limit" ]; do
		[ "$(node_names)" = "$want" ] && return 0
		sleep 0.1
	done
	echo "master lists '$(node_names)', expected '$want' after ${limit}s"
	return 1
}
# Keys of the master's table.
pool_keys() {
	kv info --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["keys"])' 2>/dev/null
}
bytes_used() {
	kv info --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes_used"])'
}
# get_all PREFIX COUNT [any] [GLOBAL OPTIONS...]: verified gets of the objects
# an earlier bench put (JSON report in $tmp/out); exit 0 required unless "any"
# (then failed calls are allowed, but the run must finish and report).
get_all() {
	local rc
	timeout 120 "$KVP" -c "$tmp/pool.ini" "${@:4}" bench --op get --existing --keep \
		--prefix "$1" --size 1-512K --count "$2" --threads 2 --json >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ $rc != 0 ] && { [ "${3:-}" != any ] || [ $rc != 1 ]; }; then
		echo "FAIL: bench get $1 exited $rc"
		head -n 5 "$tmp/out" "$tmp/err"
		exit 1
	fi
}

start_master
for n in n1 n2 n3; do start_node $n; done
wait_nodes "n1 n2 n3" 30 || fail "nodes did not come up"
ok "master and 3 nodes up"

# ---- objects: 60 with two replicas, 60 with one ------------------------------
expect 0 kv -o client.replicas=2 bench --op put --prefix r2/ --size 1-512K --count 60 --keep --json
pyjson 'r["ok"] == 60' || fail "put r2/: $(cat "$tmp/out")"
expect 0 kv bench --op put --prefix r1/ --size 1-512K --count 60 --keep --json
pyjson 'r["ok"] == 60' || fail "put r1/: $(cat "$tmp/out")"
head -c 300000 /dev/urandom >"$tmp/file.bin"
expect 0 kv -o client.replicas=3 put file/three "$tmp/file.bin"

# Where each object lives (node names per key), one JSON line per key.
where() {
	local k
	kv ls "$1" | while IFS= read -r k; do kv stat --json "$k" || echo '{"missing": true}'; done
}
where r1/ >"$tmp/r1.where"
where r2/ >"$tmp/r2.where"
python3 - "$tmp/r2.where" <<'EOF' || fail "r2/ objects do not have 2 replicas on distinct nodes"
import json, sys
for line in open(sys.argv[1]):
    s = json.loads(line)
    nodes = [x["node"] for x in s["replicas"]]
    assert len(nodes) == 2 and len(set(nodes)) == 2, s
EOF
on_n1=$(python3 -c '
import json, sys
print(sum(1 for l in open(sys.argv[1]) if "n1" in [x["node"] for x in json.loads(l)["replicas"]]))' "$tmp/r1.where")
[ "$on_n1" -ge 1 ] || fail "no single-replica object landed on n1 (allocation did not spread)"
victim_key=$(python3 -c '
import json, sys
for l in open(sys.argv[1]):
    s = json.loads(l)
    if [x["node"] for x in s["replicas"]] == ["n1"]: print(s["key"]); break' "$tmp/r1.where")
ok "120 objects placed; $on_n1 of the single-replica ones on n1 ($victim_key)"

# ---- 1. kill -9 a node ---------------------------------------------------------
{ kill -KILL "${pid[n1]}"; wait "${pid[n1]}"; } 2>/dev/null
unset 'pid[n1]'
killed_at=$SECONDS
# Reads right away (before the master notices) must never return wrong bytes.
get_all r1/ 60 any
pyjson 'r["mismatches"] == 0' || fail "wrong bytes right after the kill: $(cat "$tmp/out")"
# Over TCP the dead node refuses connections: two-replica objects must be
# read from the surviving replica at once, before the master notices.
get_all r2/ 60 "" -o client.protocol=tcp
pyjson 'r["ok"] == 60 and r["mismatches"] == 0 and r["tcp_bytes"] > 0' ||
	fail "two-replica objects over TCP right after the kill: $(cat "$tmp/out")"
get_all r2/ 60 any
pyjson 'r["mismatches"] == 0' || fail "wrong bytes right after the kill: $(cat "$tmp/out")"
wait_nodes "n2 n3" 30 || fail "the master still lists n1"
echo "   n1 left the master after $((SECONDS - killed_at)) s (client_ttl 2 s)"
where r2/ >"$tmp/r2.after"
python3 - "$tmp/r2.after" <<'EOF' || fail "r2/ replicas still name n1 or vanished"
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
pyjson 'r["ok"] == 60 and r["missing"] == 0 and r["errors"] == 0 and r["mismatches"] == 0' ||
	fail "objects with a surviving replica are not all readable: $(cat "$tmp/out")"
get_all r1/ 60
pyjson 'r["missing"] == int(args[0]) and r["ok"] == 60 - int(args[0]) and r["errors"] == 0 and r["mismatches"] == 0' \
	"$on_n1" || fail "single-replica gets after losing n1 ($on_n1 lost): $(cat "$tmp/out")"
expect 3 timeout $((3 * client_timeout_s)) "$KVP" -c "$tmp/pool.ini" get "$victim_key"
grep -q "KVP_ENOTFOUND" "$tmp/err" || fail "lost object: $(cat "$tmp/err")"
expect 0 kv get file/three
cmp -s "$tmp/out" "$tmp/file.bin" || fail "3-replica object differs after losing n1"
ok "node killed: replicas dropped, survivors readable, lost objects not found, no wrong bytes"

# ---- 2. restart the node: its objects come back --------------------------------
start_node n1
wait_nodes "n1 n2 n3" 30 || fail "n1 did not come back"
for _ in $(seq 100); do
	kv exists -q "$victim_key" && break
	sleep 0.2
done
get_all r1/ 60
pyjson 'r["ok"] == 60 and r["mismatches"] == 0' || fail "r1/ after restarting n1: $(cat "$tmp/out")"
get_all r2/ 60
pyjson 'r["ok"] == 60 and r["mismatches"] == 0' || fail "r2/ after restarting n1: $(cat "$tmp/out")"
ok "node restarted: every object it held is readable again"

# ---- 3. restart the master ------------------------------------------------------
keys_before=$(pool_keys)
{ kill -KILL "${pid[master]}"; wait "${pid[master]}"; } 2>/dev/null
expect 1 kv info
start_master
wait_nodes "n1 n2 n3" 30 || fail "nodes did not re-mount at the restarted master"
for _ in $(seq 150); do
	[ "$(pool_keys)" = "$keys_before" ] && break
	sleep 0.2
done
[ "$(pool_keys)" = "$keys_before" ] || fail "master rebuilt $(pool_keys) keys, had $keys_before"
get_all r1/ 60
pyjson 'r["ok"] == 60 and r["mismatches"] == 0' || fail "r1/ after the master restart: $(cat "$tmp/out")"
get_all r2/ 60
pyjson 'r["ok"] == 60 and r["mismatches"] == 0' || fail "r2/ after the master restart: $(cat "$tmp/out")"
expect 0 kv get file/three
cmp -s "$tmp/out" "$tmp/file.bin" || fail "file/three after the master restart"
ok "master restarted: $keys_before keys rebuilt from the nodes' reports, all readable"

# ---- 4. a client dies mid-put ------------------------------------------------------
cat >"$tmp/putstart.py" <<'EOF'
# HELLO + PUT_START of one key (src/wire.h), then wait to be killed.
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
s.sendall(frame(16, struct.pack("<BII", 1, 0, 1) + s16(key) + struct.pack("<Q", size), 2))
status, body = recv_frame(s)
n, st = struct.unpack_from("<Ii", body)
if status or n != 1 or st: raise SystemExit("PUT_START failed: %d %d" % (status, st))
print("started", flush=True)
time.sleep(3600)
EOF
used0=$(bytes_used)
python3 "$tmp/putstart.py" "127.0.0.1:$mport" dead/put $((32 << 20)) >"$tmp/putstart.log" 2>&1 &
pid[putstart]=$!
for _ in $(seq 100); do
	grep -q started "$tmp/putstart.log" && break
	kill -0 "${pid[putstart]}" 2>/dev/null || fail "PUT_START driver: $(cat "$tmp/putstart.log")"
	sleep 0.1
done
grep -q started "$tmp/putstart.log" || fail "PUT_START driver did not start the put"
{ kill -KILL "${pid[putstart]}"; wait "${pid[putstart]}"; } 2>/dev/null
unset 'pid[putstart]'
head -c $((32 << 20)) /dev/urandom >"$tmp/32m.bin"
expect 1 kv put dead/put "$tmp/32m.bin"
grep -Eq "KVP_EEXIST|KVP_EBUSY" "$tmp/err" || fail "put during the dead put: $(cat "$tmp/err")"
expect 3 kv exists -q dead/put
put_ok=0
for _ in $(seq 150); do
	if kv put dead/put "$tmp/32m.bin" 2>"$tmp/err"; then put_ok=1; break; fi
	grep -Eq "KVP_EEXIST|KVP_EBUSY" "$tmp/err" || fail "retry put: $(cat "$tmp/err")"
	sleep 0.2
done
[ $put_ok = 1 ] || fail "dead/put could not be put again within 30 s (put_timeout 2 s)"
expect 0 kv get dead/put
cmp -s "$tmp/out" "$tmp/32m.bin" || fail "dead/put value differs"
used1=$(bytes_used)
# The dead put's 32 MiB went back to the pool: usage grew by one object only.
[ $((used1 - used0)) -lt $((48 << 20)) ] ||
	fail "space not reclaimed: used grew by $((used1 - used0)) bytes for one 32 MiB object"
ok "client killed after PUT_START: space reclaimed, key put again"

# A `kvpool put` killed while it transfers (it may also have finished).
head -c $((64 << 20)) /dev/urandom >"$tmp/64m.bin"
"$KVP" -c "$tmp/pool.ini" -o client.protocol=tcp put dead/cli "$tmp/64m.bin" 2>"$tmp/cliput.log" &
cli_pid=$!
pid[cliput]=$cli_pid
sleep 0.3
{ kill -KILL $cli_pid; wait $cli_pid; } 2>/dev/null
unset 'pid[cliput]'
done_ok=0
for _ in $(seq 150); do
	if kv get dead/cli "$tmp/cli.got" 2>/dev/null; then
		cmp -s "$tmp/cli.got" "$tmp/64m.bin" || fail "dead/cli exists with wrong bytes"
		done_ok=1
		break
	fi
	if kv put dead/cli "$tmp/64m.bin" 2>/dev/null; then done_ok=1; break; fi
	sleep 0.2
done
[ $done_ok = 1 ] || fail "dead/cli neither readable nor puttable within 30 s"
expect 0 kv get dead/cli
cmp -s "$tmp/out" "$tmp/64m.bin" || fail "dead/cli value differs"
ok "kvpool put killed mid-transfer: the key is whole or can be put again"
echo "PASS pool_faults.sh"
