#!/bin/bash
# rdma_selftest.sh — RDMA on this machine. `kvpool selftest rdma` must say
# "no RDMA device" and exit 77 where there is none (the test then skips).
# Where there is one, the selftest must verify a loopback WRITE/READ, and a
# real pool (master + node with [rdma] enabled) must move values over RDMA:
# a client that is "elsewhere" (its own host_id, so no shared memory) puts
# and gets with client.protocol = rdma, the bytes come back intact, and the
# node's counters show RDMA_CONNECT accepted and no TCP WRITE/READ payload.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init rdma
KVP=$B/kvpool
need "$KVP" "$B/kvpool-master" "$B/kvpool-node"

"$KVP" selftest rdma --size 16M --iters 4 >"$E2E_TMP/selftest.out" 2>&1
rc=$?
cat "$E2E_TMP/selftest.out"
if [ $rc = 77 ]; then
	grep -q "no RDMA device" "$E2E_TMP/selftest.out" ||
		fail "exit 77 without saying 'no RDMA device'"
	skip "no RDMA device"
fi
[ $rc = 0 ] || fail "kvpool selftest rdma exited $rc"
grep -q "data verified" "$E2E_TMP/selftest.out" || fail "selftest did not verify data"

# ---- a pool over RDMA -------------------------------------------------------
pool_ini "[node]" "segment_size = 256M" "remove_segment_on_exit = true" "heartbeat_interval = 300ms" \
	"numa_node = auto" "[rdma]" "enabled = true" "[log]" "level = info"
pool_node "rdma-$$"
run_master
run_node "rdma-$$"
wait_nodes "rdma-$$" 10
grep -q "rdma: segment registered" "$E2E_TMP/rdma-$$.log" || fail "the node did not register its segment"
kv() { "$KVP" -c "$POOL_INI" -o client.protocol=rdma -o client.host_id=elsewhere-$$ "$@"; }
head -c $((48 << 20)) /dev/urandom >"$E2E_TMP/big"
head -c 1000 /dev/urandom >"$E2E_TMP/small"
kv put big "$E2E_TMP/big" || fail "put over RDMA"
kv put small "$E2E_TMP/small" || fail "small put over RDMA"
kv get big "$E2E_TMP/big.back" || fail "get over RDMA"
kv get small "$E2E_TMP/small.back" || fail "small get over RDMA"
cmp "$E2E_TMP/big" "$E2E_TMP/big.back" || fail "48 MiB value differs after the RDMA round trip"
cmp "$E2E_TMP/small" "$E2E_TMP/small.back" || fail "small value differs"
m=$(http_get "http://127.0.0.1:$NODE_HTTP_PORT/metrics")
echo "$m" | grep -E "^kvpool_node_rdma_connects_total [1-9]" || fail "no RDMA_CONNECT accepted"
echo "$m" | grep -E "^kvpool_node_written_bytes_total 0$" || fail "bytes went over TCP WRITE"
echo "$m" | grep -E "^kvpool_node_read_bytes_total 0$" || fail "bytes went over TCP READ"
echo "ok - 48 MiB and 1000 B over RDMA, verified"
