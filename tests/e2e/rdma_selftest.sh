#!/bin/bash
# rdma_selftest.sh — RDMA on this machine. `kvpool selftest rdma` must say
# "no RDMA device" and exit 77 where there is none (the test then skips).
# Where there is one, the selftest must verify a loopback WRITE/READ, and a
# real pool (master + node with [rdma] enabled) must move values over RDMA:
# a client that is "elsewhere" (its own host_id, so no shared memory) puts
# and gets with client.protocol = rdma, the bytes come back intact, and the
# node's counters show RDMA_CONNECT accepted and no TCP WRITE/READ payload.
# Exit 0 pass, 1 fail, 77 skip.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${KVP_BUILD:-$root/build}
KVP=$B/kvpool MASTER=$B/kvpool-master NODE=$B/kvpool-node
for b in "$KVP" "$MASTER" "$NODE"; do
	[ -x "$b" ] || { echo "skip: $b is not built"; exit 77; }
done

tmp=$(mktemp -d /tmp/kvp-rdma.XXXXXX)
seg=kvpt-rdma-$$
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
			[ -f "$l" ] && { echo "--- $(basename "$l")"; tail -n 20 "$l"; }
		done
	fi
	rm -f "/dev/shm/$seg"
	rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$KVP" selftest rdma --size 16M --iters 4 >"$tmp/selftest.out" 2>&1
rc=$?
cat "$tmp/selftest.out"
if [ $rc = 77 ]; then
	grep -q "no RDMA device" "$tmp/selftest.out" ||
		fail "exit 77 without saying 'no RDMA device'"
	echo "skip: no RDMA device"
	exit 77
fi
[ $rc = 0 ] || fail "kvpool selftest rdma exited $rc"
grep -q "data verified" "$tmp/selftest.out" || fail "selftest did not verify data"

# ---- a pool over RDMA -------------------------------------------------------
read -r mport mhttp dport dhttp <<<"$(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
cat >"$tmp/pool.ini" <<EOF
[cluster]
master = 127.0.0.1:$mport
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
metadata_server = false
[node]
name = rdma-$$
listen = 127.0.0.1:$dport
http_listen = 127.0.0.1:$dhttp
segment = $seg
segment_size = 256M
remove_segment_on_exit = true
heartbeat_interval = 300ms
numa_node = auto
[rdma]
enabled = true
[log]
level = info
EOF
"$MASTER" -c "$tmp/pool.ini" >"$tmp/master.log" 2>&1 &
pids+=($!)
"$NODE" -c "$tmp/pool.ini" >"$tmp/node.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	"$KVP" -c "$tmp/pool.ini" info 2>/dev/null | grep -q "rdma-$$" && break
	sleep 0.1
done
grep -q "rdma: segment registered" "$tmp/node.log" || fail "the node did not register its segment"
kv() { "$KVP" -c "$tmp/pool.ini" -o client.protocol=rdma -o client.host_id=elsewhere-$$ "$@"; }
head -c $((48 << 20)) /dev/urandom >"$tmp/big"
head -c 1000 /dev/urandom >"$tmp/small"
kv put big "$tmp/big" || fail "put over RDMA"
kv put small "$tmp/small" || fail "small put over RDMA"
kv get big "$tmp/big.back" || fail "get over RDMA"
kv get small "$tmp/small.back" || fail "small get over RDMA"
cmp "$tmp/big" "$tmp/big.back" || fail "48 MiB value differs after the RDMA round trip"
cmp "$tmp/small" "$tmp/small.back" || fail "small value differs"
m=$(curl -s "http://127.0.0.1:$dhttp/metrics" 2>/dev/null || python3 -c "
import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$dhttp/metrics').read().decode())")
echo "$m" | grep -E "^kvpool_node_rdma_connects_total [1-9]" || fail "no RDMA_CONNECT accepted"
echo "$m" | grep -E "^kvpool_node_written_bytes_total 0$" || fail "bytes went over TCP WRITE"
echo "$m" | grep -E "^kvpool_node_read_bytes_total 0$" || fail "bytes went over TCP READ"
echo "ok - 48 MiB and 1000 B over RDMA, verified"
