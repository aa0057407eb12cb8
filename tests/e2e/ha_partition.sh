#!/bin/bash
# ha_partition.sh — master high availability against network faults
# (docs/ha.md): a three-member etcd, each member in a network namespace of
# its own, two masters each in one too (nodes and clients stay here and
# reach them through veth pairs), a cluster token (the masters listen off
# loopback), and kvp-ha-probe putting fresh keys and reading old ones all
# along while a sampler asks both masters every 50 ms whether they lead:
#  1. nftables cuts the leader off from etcd (it still reaches its nodes and
#     clients): it stops leading before the standby takes over — never two
#     leaders at one sample — and after the heal it stands by;
#  2. one etcd member killed: the pool goes on;
#  3. the etcd majority killed: nobody leads, puts fail with a retryable
#     error, gets of keys read before go on from their last location;
#     with the majority back, a leader again and puts go on;
#  4. no completed put lost, no wrong byte; the HA_FULL (10,000) objects put
#     first (taken over warm after the cut) all read back byte for byte;
#  5. the standby's connects to the leader dropped (SYNs lost): each try
#     gives up after 1 s, it stands by, and takes over at the leader's kill.
# Needs root, `ip netns`, nft and etcd; exit 77 otherwise. Exit 0 pass, 1 fail.
# run.sh: alone — it turns net.ipv4.ip_forward on for the whole machine.
. "$(dirname "$0")/lib.sh"
e2e_init hapart
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" "$B/soak/kvp-ha-probe" curl python3 nft
[ "$(id -u)" = 0 ] || skip "needs root for network namespaces and nftables"
start_etcd 3 netns
ok "etcd of three members in namespaces: $ETCD_EPS"

HA_TOKEN=1 ha_pool_ini
ha_master A netns
ha_master B netns
waitfor 15 ha_leader >/dev/null || fail "no leader elected"
pool_node n1
pool_node n2
run_node n1
run_node n2
wait_nodes "n1 n2" 30 || fail "the nodes did not mount"
ok "master $(ha_leader) leads; nodes mounted across the namespaces"
# a table with some weight, which the standby follows (docs/ha.md "Warm standby")
FULL=${HA_FULL:-10000}
expect 0 kv bench --op put --count "$FULL" --size 1K --batch 64 --prefix ha/full/ --keep
ok "$FULL objects put"

# both masters' view every 50 ms: a line "A B" of 1/0 per sample
(
	while :; do
		a=0 b=0
		ha_is_leader A && a=1
		ha_is_leader B && b=1
		echo "$a $b"
		sleep 0.05
	done
) >"$E2E_TMP/samples" 2>/dev/null &
SAMPLER=$!
E2E_PIDS+=("$SAMPLER")
spawn probe "$B/soak/kvp-ha-probe" -c "$POOL_INI" --prefix ha/part --interval-ms 20 \
	--size 4096 --read-ms 20 --json "$E2E_TMP/probe.json"
PROBE=$SPAWN_PID
sleep 2

# ---- 1. the leader cut off from etcd ----
L=$(ha_leader)
S=$(ha_other "$L")
in_netns "${HA_NS[$L]}" nft -f - <<EOF || fail "nft"
table inet kvpcut {
	chain out {
		type filter hook output priority 0; policy accept;
		ip daddr { ${ETCD_HOST[0]}, ${ETCD_HOST[1]}, ${ETCD_HOST[2]} } drop
	}
}
EOF
kill -USR1 "$PROBE"
t0=$(date +%s%N)
waitfor 15 ha_is_leader "$S" || fail "$S did not take over from $L cut off from etcd"
ms=$((($(date +%s%N) - t0) / 1000000))
ha_standby "$L" || fail "the cut-off $L still says: $(ha_health "$L")"
in_netns "${HA_NS[$L]}" nft delete table inet kvpcut
etcd_up() { ha_health "$1" | grep -q '"etcd":"up"'; }
waitfor 10 etcd_up "$L" || fail "$L does not reach etcd again"
ha_is_leader "$L" && fail "$L leads again next to $S"
grep -q "took over a warm table" "$E2E_TMP/$S.log" || fail "$S did not take the table over warm"
ok "nftables cut $L off etcd: it stood down, $S leads after ${ms} ms; healed, $L stands by"
wait_nodes "n1 n2" 30 || fail "the nodes did not follow"
sleep 1

# ---- 2. one etcd member gone: nothing to see ----
etcd_kill 0
sleep 3
ha_leader >/dev/null || waitfor 10 ha_leader >/dev/null || fail "no leader with two of three etcd members"
expect 0 kv put ha/one-member-down "$POOL_INI"
ok "one etcd member down: $(ha_leader) leads, puts work"
etcd_run 0
waitfor 30 etcd_ok 0 || fail "etcd member 0 did not come back"
sleep 1

# ---- 3. the etcd majority gone ----
etcd_kill 1
etcd_kill 2
kill -USR1 "$PROBE"
t0=$(date +%s%N)
no_leader() { ! ha_leader >/dev/null; }
waitfor 10 no_leader || fail "a master still leads without an etcd majority"
ms=$((($(date +%s%N) - t0) / 1000000))
sleep 3
ha_leader >/dev/null && fail "a leader without an etcd majority"
expect 1 kv -o client.timeout=1s put ha/no-majority "$POOL_INI"
ok "etcd majority gone: no leader after ${ms} ms, puts refused"
etcd_run 1
etcd_run 2
waitfor 30 ha_leader >/dev/null || fail "no leader with the majority back"
wait_nodes "n1 n2" 30 || fail "the nodes did not follow"
expect 0 kv put ha/majority-back "$POOL_INI"
ok "the majority back: $(ha_leader) leads, puts work"
sleep 1

# ---- verdict ----
# stopped and forgotten: wait_nodes below fails on any process of E2E_PIDS
# that has exited (it checks them only when the nodes are not listed at once)
stop_pid "$SAMPLER" TERM
stop_pid "$PROBE" TERM
cat "$E2E_TMP/probe.json"
both=$(grep -c '^1 1$' "$E2E_TMP/samples")
[ "$both" = 0 ] || fail "$both samples saw two leaders"
pyjson "$E2E_TMP/probe.json" 'r["completed"] > 50 and r["lost"] == 0 and r["wrong"] == 0' ||
	fail "the probe lost or got wrong puts"
pyjson "$E2E_TMP/probe.json" 'len(r["faults"]) == 2 and r["faults"][1]["reads_ok"] > 0' ||
	fail "no read of a known key worked while etcd had no majority"
echo "longest time without a put: cut $(jval "$E2E_TMP/probe.json" 'r["faults"][0]["gap_ms"]') ms;" \
	"gets served while puts were down without an etcd majority: $(jval "$E2E_TMP/probe.json" 'r["faults"][1]["reads_ok"]')"
expect 0 kv bench --op get --existing --count "$FULL" --size 1K --batch 64 --prefix ha/full/ --keep
grep -q "0 missing, 0 errors, 0 wrong values" "$E2E_TMP/out" || fail "the table put before the faults: $(grep verified "$E2E_TMP/out")"
ok "never two leaders ($(wc -l <"$E2E_TMP/samples") samples), no completed put lost, no wrong byte"

# ---- 5. the leader's host drops the standby's connects: it does not stall ----
# (the standby connects from its event loop without waiting: docs/ha.md)
L=$(ha_leader)
S=$(ha_other "$L")
stop_pid "${HA_PID[$S]}" TERM || fail "master $S exited $?"
in_netns "${HA_NS[$S]}" nft -f - <<EOF || fail "nft"
table inet kvpsyn {
	chain out {
		type filter hook output priority 0; policy accept;
		ip daddr ${HA_RPC[$L]%:*} tcp dport ${HA_RPC[$L]##*:} drop
	}
}
EOF
: >"$E2E_TMP/$S.log"
ha_run "$S"
silent() { grep -q "cannot follow the leader at ${HA_RPC[$L]}: no answer within 1 s" "$E2E_TMP/$S.log"; }
waitfor 20 silent || fail "$S did not give up on a leader that does not answer"
ha_standby "$S" || fail "$S does not stand by: $(ha_health "$S")"
stop_pid "${HA_PID[$L]}" KILL
waitfor 15 ha_is_leader "$S" || fail "$S did not take over while its connects to $L hung"
in_netns "${HA_NS[$S]}" nft delete table inet kvpsyn
ha_run "$L"
following() { grep -q "following the leader at ${HA_RPC[$S]}" "$E2E_TMP/$L.log"; }
waitfor 15 following || fail "$L does not follow $S"
wait_nodes "n1 n2" 30 || fail "the nodes did not follow $S"
expect 0 kv put ha/after-syn-drop "$POOL_INI"
ok "$S, its connects to $L dropped, stood by, gave up each try and took over at $L's kill -9"

for m in A B; do stop_pid "${HA_PID[$m]}" TERM || fail "master $m exited $?"; done
ok "masters exit 0"
