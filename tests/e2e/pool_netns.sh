#!/bin/bash
# pool_netns.sh — the TCP path across a real interface. A network namespace
# created here holds the second node and a client; a veth pair with
# addresses picked here (10.x.y.1 in the root namespace, 10.x.y.2 inside)
# joins it to the master and the first node, which listen on 10.x.y.1. All
# clients use client.protocol=tcp and a cluster token (required off loopback).
#  - files put on one side come back byte-identical on the other;
#  - 2,000 objects of 1 byte .. 8 MiB (most small, ten large) put on each side
#    are read and verified on the other; the veth counters show the bytes
#    really crossed;
#  - 8 concurrent clients (4 per side) mix put/get/exists/remove with every
#    value verified.
# Needs root and `ip netns`; exit 77 otherwise. Exit 0 pass, 1 fail.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${KVP_BUILD:-$root/build}
KVP=$B/kvpool MASTER=$B/kvpool-master NODE=$B/kvpool-node
for b in "$KVP" "$MASTER" "$NODE"; do
	[ -x "$b" ] || { echo "skip: $b is not built"; exit 77; }
done
command -v python3 >/dev/null || { echo "skip: python3 missing"; exit 77; }
command -v ip >/dev/null || { echo "skip: iproute2 (ip) missing"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "skip: needs root for network namespaces"; exit 77; }

tmp=$(mktemp -d /tmp/kvp-netns.XXXXXX)
tag=kvpt-ns-$$
ns=kvpns$$
va=kva$$ vb=kvb$$
pids=()

cleanup() {
	local rc=$?
	trap - EXIT
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 30); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ $rc != 0 ] && [ $rc != 77 ]; then
		for l in "$tmp"/*.log; do
			[ -f "$l" ] || continue
			echo "--- last lines of $(basename "$l")"
			tail -n 15 "$l"
		done
	fi
	ip link del "$va" 2>/dev/null
	ip netns del "$ns" 2>/dev/null
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
pyjson() {	# pyjson FILE EXPR [ARGS]: r is the JSON document in FILE
	local f=$1 expr=$2
	shift 2
	python3 -c "
import json, sys
r = json.load(open(sys.argv[1]))
args = sys.argv[2:]
sys.exit(0 if ($expr) else 1)" "$f" "$@"
}

# ---- the namespace and the veth pair (only these addresses are used) --------
ip netns add "$ns" 2>"$tmp/err" || { echo "skip: cannot create a network namespace: $(cat "$tmp/err")"; exit 77; }
sub="10.$((200 + ($$ >> 8) % 50)).$(($$ % 256))"
ip -4 addr show | grep -q " $sub\." && fail "subnet $sub.0/24 is already in use here"
ip link add "$va" type veth peer name "$vb" || fail "cannot create a veth pair"
ip link set "$vb" netns "$ns" || fail "cannot move $vb into $ns"
ip addr add "$sub.1/24" dev "$va"
ip link set "$va" up
ip -n "$ns" addr add "$sub.2/24" dev "$vb"
ip -n "$ns" link set "$vb" up
ip -n "$ns" link set lo up
for _ in $(seq 50); do
	ip netns exec "$ns" ping -c 1 -W 1 "$sub.1" >/dev/null 2>&1 && break
	sleep 0.1
done
ok "namespace $ns, veth $va ($sub.1) <-> $vb ($sub.2)"

read -r mport mhttp d1 h1 d2 h2 <<<"$(free_ports 6)"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
echo >>"$tmp/token"
chmod 600 "$tmp/token"
common() {	# common HOST_ID
	cat <<EOF
[cluster]
master = $sub.1:$mport
token_file = $tmp/token
max_object_size = 16M
[master]
listen = $sub.1:$mport
http_listen = 127.0.0.1:$mhttp
metadata_server = false
[client]
protocol = tcp
timeout = 20s
replicas = 1
host_id = $1
[log]
level = info
EOF
}
node_conf() {	# name host_id listen_ip data_port http_port
	common "$2"
	cat <<EOF
[node]
name = $1
listen = $3:$4
advertise = $3:$4
http_listen = 127.0.0.1:$5
segment = $tag-$1
segment_size = 320M
remove_segment_on_exit = true
heartbeat_interval = 500ms
EOF
}
common "side-a-$$" >"$tmp/a.ini"
common "side-b-$$" >"$tmp/b.ini"
node_conf na "side-a-$$" "$sub.1" "$d1" "$h1" >"$tmp/na.ini"
node_conf nb "side-b-$$" "$sub.2" "$d2" "$h2" >"$tmp/nb.ini"
kva() { "$KVP" -c "$tmp/a.ini" "$@"; }
kvb() { ip netns exec "$ns" "$KVP" -c "$tmp/b.ini" "$@"; }

"$MASTER" -c "$tmp/a.ini" >"$tmp/master.log" 2>&1 &
pids+=($!)
"$NODE" -c "$tmp/na.ini" >"$tmp/na.log" 2>&1 &
pids+=($!)
ip netns exec "$ns" "$NODE" -c "$tmp/nb.ini" >"$tmp/nb.log" 2>&1 &
pids+=($!)
up=0
for _ in $(seq 150); do
	if kvb info --json >"$tmp/info" 2>/dev/null &&
		pyjson "$tmp/info" 'sorted(n["name"] for n in r["nodes"]) == ["na", "nb"]' 2>/dev/null; then
		up=1
		break
	fi
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "a daemon exited during start-up"; done
	sleep 0.2
done
[ $up = 1 ] || fail "both nodes did not mount at the master within 30 s"
pyjson "$tmp/info" '[n["endpoint"] for n in sorted(r["nodes"], key=lambda n: n["name"])] == args' \
	"$sub.1:$d1" "$sub.2:$d2" || fail "node endpoints: $(cat "$tmp/info")"
ok "master and node na on $sub.1, node nb inside $ns on $sub.2"

# Without the token the master refuses the namespace's client.
grep -v "^token_file" "$tmp/b.ini" >"$tmp/notoken.ini"
expect 1 ip netns exec "$ns" "$KVP" -c "$tmp/notoken.ini" info
ok "a client without the cluster token is refused"

veth_bytes() {
	echo $(($(cat /sys/class/net/"$va"/statistics/rx_bytes) + $(cat /sys/class/net/"$va"/statistics/tx_bytes)))
}
crossed0=$(veth_bytes)

# ---- files across the interface ------------------------------------------------
head -c 5000001 /dev/urandom >"$tmp/f5m.bin"
printf 'Z' >"$tmp/f1.bin"
expect 0 kva put file/a5m "$tmp/f5m.bin"
expect 0 kva put file/a1 "$tmp/f1.bin"
expect 0 kvb put file/b5m "$tmp/f5m.bin"
expect 0 kvb get file/a5m "$tmp/a5m.got"
cmp -s "$tmp/a5m.got" "$tmp/f5m.bin" || fail "file put in the root namespace differs in $ns"
expect 0 kvb get file/a1
cmp -s "$tmp/out" "$tmp/f1.bin" || fail "1-byte value differs across"
expect 0 kva get file/b5m
cmp -s "$tmp/out" "$tmp/f5m.bin" || fail "file put in $ns differs in the root namespace"
expect 3 kvb get file/none
ok "files put on one side are byte-identical on the other"

# ---- 2,000 objects each way: 1,990 of 1 B..64 KiB, 10 of 1..8 MiB --------------------
moved=0
put_get() {	# put_get PUTTER GETTER PREFIX SIZE COUNT
	local putter=$1 getter=$2 prefix=$3 size=$4 count=$5
	expect 0 "$putter" bench --op put --prefix "$prefix" --size "$size" --count "$count" \
		--threads 4 --keep --json
	pyjson "$tmp/out" 'r["ok"] == int(args[0]) and r["errors"] == 0 and r["local_bytes"] == 0 and r["tcp_bytes"] >= r["bytes"]' \
		"$count" || fail "put $prefix: $(cat "$tmp/out")"
	moved=$((moved + $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes"])' "$tmp/out")))
	expect 0 "$getter" bench --op get --existing --keep --prefix "$prefix" --size "$size" \
		--count "$count" --threads 4 --json
	pyjson "$tmp/out" 'r["ok"] == int(args[0]) and r["mismatches"] == 0 and r["missing"] == 0 and r["tcp_bytes"] >= r["bytes"]' \
		"$count" || fail "get $prefix on the other side: $(cat "$tmp/out")"
}
put_get kva kvb ab/small/ 1-64K 1990
put_get kva kvb ab/large/ 1M-8M 10
put_get kvb kva ba/small/ 1-64K 1990
put_get kvb kva ba/large/ 1M-8M 10
expect 0 kva info --json
pyjson "$tmp/out" 'all(n["objects"] > 0 for n in r["nodes"]) and r["keys"] >= 4003' ||
	fail "objects did not spread over both nodes: $(cat "$tmp/out")"
crossed=$(($(veth_bytes) - crossed0))
echo "   values moved: $moved bytes; veth $va carried $crossed bytes"
# Every object is on one node and was put or read from the other side, so at
# least its bytes crossed the veth once.
[ "$crossed" -ge "$moved" ] || fail "only $crossed bytes crossed the veth for $moved bytes of values"
ok "8,000 verified transfers of 4,000 objects (1 B..8 MiB) across the interface"

# ---- 8 concurrent clients, 4 per side, mixed operations --------------------------------
cpids=()
for i in 1 2 3 4; do
	kva bench --op mixed --prefix "mix/a$i/" --size 1-256K --count 400 --keys 16 --json \
		>"$tmp/mix-a$i.json" 2>"$tmp/mix-a$i.log" &
	cpids+=($!)
	kvb bench --op mixed --prefix "mix/b$i/" --size 1-256K --count 400 --keys 16 --json \
		>"$tmp/mix-b$i.json" 2>"$tmp/mix-b$i.log" &
	cpids+=($!)
done
pids+=("${cpids[@]}")
bad=0
for p in "${cpids[@]}"; do wait "$p" || bad=1; done
for f in "$tmp"/mix-*.json; do
	pyjson "$f" 'r["ok"] == 400 and r["errors"] == 0 and r["mismatches"] == 0 and r["missing"] == 0' ||
		{ echo "mixed client $(basename "$f"): $(cat "$f") $(cat "${f%.json}.log")"; bad=1; }
done
[ $bad = 0 ] || fail "a mixed client saw errors or wrong values"
ok "8 concurrent mixed clients, every value verified"

expect 0 kvb rm --all --force
expect 0 kva info --json
pyjson "$tmp/out" 'r["keys"] == 0' || fail "keys left after rm --all: $(cat "$tmp/out")"
echo "PASS pool_netns.sh"
