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
. "$(dirname "$0")/lib.sh"
e2e_init netns
KVP=$B/kvpool
need "$KVP" "$B/kvpool-master" "$B/kvpool-node" python3 ip
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"

tag=kvpt-ns-$$
on_cleanup "rm -f /dev/shm/$tag-*"

# ---- the namespace and the veth pair (only these addresses are used) --------
netns_veth 2>"$E2E_TMP/netns.err" || skip "$(cat "$E2E_TMP/netns.err")"
ns=$NETNS va=$NETNS_VETH sub=${NETNS_HOST%.1}
ok "namespace $ns, veth $va ($sub.1) <-> ($sub.2)"

read -r mport mhttp d1 h1 d2 h2 <<<"$(free_ports 6)"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$E2E_TMP/token"
echo >>"$E2E_TMP/token"
chmod 600 "$E2E_TMP/token"
common() {	# common HOST_ID
	cat <<EOF
[cluster]
master = $sub.1:$mport
token_file = $E2E_TMP/token
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
common "side-a-$$" >"$E2E_TMP/a.ini"
common "side-b-$$" >"$E2E_TMP/b.ini"
node_conf na "side-a-$$" "$sub.1" "$d1" "$h1" >"$E2E_TMP/na.ini"
node_conf nb "side-b-$$" "$sub.2" "$d2" "$h2" >"$E2E_TMP/nb.ini"
kva() { "$KVP" -c "$E2E_TMP/a.ini" "$@"; }
kvb() { in_netns "$ns" "$KVP" -c "$E2E_TMP/b.ini" "$@"; }

spawn master "$B/kvpool-master" -c "$E2E_TMP/a.ini"
spawn na "$B/kvpool-node" -c "$E2E_TMP/na.ini"
spawn nb nsenter --net="/run/netns/$ns" -- "$B/kvpool-node" -c "$E2E_TMP/nb.ini"
up=0
for _ in $(seq 150); do
	if kvb info --json >"$E2E_TMP/info" 2>/dev/null &&
		pyjson "$E2E_TMP/info" 'sorted(n["name"] for n in r["nodes"]) == ["na", "nb"]' 2>/dev/null; then
		up=1
		break
	fi
	for p in "${E2E_PIDS[@]}"; do kill -0 "$p" 2>/dev/null || fail "a daemon exited during start-up"; done
	sleep 0.2
done
[ $up = 1 ] || fail "both nodes did not mount at the master within 30 s"
pyjson "$E2E_TMP/info" '[n["endpoint"] for n in sorted(r["nodes"], key=lambda n: n["name"])] == args' \
	"$sub.1:$d1" "$sub.2:$d2" || fail "node endpoints: $(cat "$E2E_TMP/info")"
ok "master and node na on $sub.1, node nb inside $ns on $sub.2"

# Without the token the master refuses the namespace's client.
grep -v "^token_file" "$E2E_TMP/b.ini" >"$E2E_TMP/notoken.ini"
expect 1 in_netns "$ns" "$KVP" -c "$E2E_TMP/notoken.ini" info
ok "a client without the cluster token is refused"

veth_bytes() {
	echo $(($(cat /sys/class/net/"$va"/statistics/rx_bytes) + $(cat /sys/class/net/"$va"/statistics/tx_bytes)))
}
crossed0=$(veth_bytes)

# ---- files across the interface ------------------------------------------------
head -c 5000001 /dev/urandom >"$E2E_TMP/f5m.bin"
printf 'Z' >"$E2E_TMP/f1.bin"
expect 0 kva put file/a5m "$E2E_TMP/f5m.bin"
expect 0 kva put file/a1 "$E2E_TMP/f1.bin"
expect 0 kvb put file/b5m "$E2E_TMP/f5m.bin"
expect 0 kvb get file/a5m "$E2E_TMP/a5m.got"
cmp -s "$E2E_TMP/a5m.got" "$E2E_TMP/f5m.bin" || fail "file put in the root namespace differs in $ns"
expect 0 kvb get file/a1
cmp -s "$E2E_TMP/out" "$E2E_TMP/f1.bin" || fail "1-byte value differs across"
expect 0 kva get file/b5m
cmp -s "$E2E_TMP/out" "$E2E_TMP/f5m.bin" || fail "file put in $ns differs in the root namespace"
expect 3 kvb get file/none
ok "files put on one side are byte-identical on the other"

# ---- 2,000 objects each way: 1,990 of 1 B..64 KiB, 10 of 1..8 MiB --------------------
moved=0
put_get() {	# put_get PUTTER GETTER PREFIX SIZE COUNT
	local putter=$1 getter=$2 prefix=$3 size=$4 count=$5
	expect 0 "$putter" bench --op put --prefix "$prefix" --size "$size" --count "$count" \
		--threads 4 --keep --json
	pyjson "$E2E_TMP/out" 'r["ok"] == int(args[0]) and r["errors"] == 0 and r["local_bytes"] == 0 and r["tcp_bytes"] >= r["bytes"]' \
		"$count" || fail "put $prefix: $(cat "$E2E_TMP/out")"
	moved=$((moved + $(jval "$E2E_TMP/out" 'r["bytes"]')))
	expect 0 "$getter" bench --op get --existing --keep --prefix "$prefix" --size "$size" \
		--count "$count" --threads 4 --json
	pyjson "$E2E_TMP/out" 'r["ok"] == int(args[0]) and r["mismatches"] == 0 and r["missing"] == 0 and r["tcp_bytes"] >= r["bytes"]' \
		"$count" || fail "get $prefix on the other side: $(cat "$E2E_TMP/out")"
}
put_get kva kvb ab/small/ 1-64K 1990
put_get kva kvb ab/large/ 1M-8M 10
put_get kvb kva ba/small/ 1-64K 1990
put_get kvb kva ba/large/ 1M-8M 10
expect 0 kva info --json
pyjson "$E2E_TMP/out" 'all(n["objects"] > 0 for n in r["nodes"]) and r["keys"] >= 4003' ||
	fail "objects did not spread over both nodes: $(cat "$E2E_TMP/out")"
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
		>"$E2E_TMP/mix-a$i.json" 2>"$E2E_TMP/mix-a$i.log" &
	cpids+=($!)
	kvb bench --op mixed --prefix "mix/b$i/" --size 1-256K --count 400 --keys 16 --json \
		>"$E2E_TMP/mix-b$i.json" 2>"$E2E_TMP/mix-b$i.log" &
	cpids+=($!)
done
E2E_PIDS+=("${cpids[@]}")
bad=0
for p in "${cpids[@]}"; do wait "$p" || bad=1; forget "$p"; done
for f in "$E2E_TMP"/mix-*.json; do
	pyjson "$f" 'r["ok"] == 400 and r["errors"] == 0 and r["mismatches"] == 0 and r["missing"] == 0' ||
		{ echo "mixed client $(basename "$f"): $(cat "$f") $(cat "${f%.json}.log")"; bad=1; }
done
[ $bad = 0 ] || fail "a mixed client saw errors or wrong values"
ok "8 concurrent mixed clients, every value verified"

expect 0 kvb rm --all --force
expect 0 kva info --json
pyjson "$E2E_TMP/out" 'r["keys"] == 0' || fail "keys left after rm --all: $(cat "$E2E_TMP/out")"
echo "PASS pool_netns.sh"
