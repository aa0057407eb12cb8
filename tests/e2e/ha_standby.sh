#!/bin/bash
# ha_standby.sh — the warm standby (docs/ha.md "Warm standby"): two masters
# on a one-member etcd, one node, HA_OBJECTS (20,000) objects of 1 KiB.
#  1. the standby follows the leader: it logs that it holds the whole table,
#     and later puts and removes reach it as they happen;
#  2. kill -9 of the leader: the standby takes the table over (it logs a warm
#     takeover with every key) and serves a get of an old key and a put;
#     the node's scan is slowed (KVP_TEST_SCAN_DELAY_MS) and the put must
#     succeed before its REPORTs: the MOUNT's commit map opened the
#     segment around holds (docs/ha.md "a put right after the takeover");
#  3. the node re-mounts; its REPORTs confirm the table: no replica dropped
#     as a ghost, every key reads back byte for byte (0 lost, 0 wrong), the
#     removed key stays removed and `kvpool info` counts exactly the keys;
#  4. the restarted old leader follows the new one;
#  5. the node's re-reports are exactly its objects: after the kill -9 it
#     reported N + 1 extents (its scan came after the put) without touching a header page for the first time
#     (its warmer had read them), and after its own kill -9 and restart
#     (a fresh mapping: every header read) it reports N + 1 and the master
#     counts N + 1 keys, with no ghost, every key readable.
# Exit 0 pass, 1 fail, 77 without etcd (apt-get install etcd-server).
# run.sh: alone — step 4 fails a put that comes more than 2 s after the first get.
. "$(dirname "$0")/lib.sh"
e2e_init has
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" curl python3
N=${HA_OBJECTS:-20000}
ha_pool_up
pool_node n1
# the re-mount's scan waits this long: a put must not wait for it
export KVP_TEST_SCAN_DELAY_MS=${HA_SCAN_DELAY_MS:-4000}
run_node n1
wait_nodes "n1" 30 || fail "the node did not mount at the leader"

# ---- 1. the standby follows ----
# half before the standby (restarted) follows: the snapshot; half after: the stream
expect 0 kv bench --op put --count $((N / 2)) --size 1K --batch 64 --prefix s/ --keep
stop_pid "${HA_PID[$S]}" TERM
: >"$E2E_TMP/$S.log"
ha_run "$S"
waitfor 20 grep -q "following the leader: in step" "$E2E_TMP/$S.log" ||
	fail "the standby did not get the table: $(grep 'ha:' "$E2E_TMP/$S.log" | tail -5)"
[ "$(ha_metric "$S" kvpool_master_ha_standby_in_step)" = 1 ] || fail "kvpool_master_ha_standby_in_step on $S"
ok "standby $S follows leader $L: $(grep -o 'in step, [0-9]* keys' "$E2E_TMP/$S.log" | tail -1)"
expect 0 kv bench --op put --count $((N / 2)) --size 1K --batch 64 --prefix s/h2/ --keep
head -c 5000 /dev/urandom >"$E2E_TMP/v1"
expect 0 kv put s/late "$E2E_TMP/v1"
expect 0 kv rm s/00000007
sleep 0.5	# the stream is asynchronous (sent before the reply, applied a little later)

# ---- 2. kill -9 of the leader ----
node_mounts() { grep -c 'reporting [0-9]* extents' "$E2E_TMP/n1.log"; }
mounts=$(node_mounts)
t0=$(date +%s%N)
stop_pid "${HA_PID[$L]}" KILL
got=""
end=$((SECONDS + 20))
while [ $SECONDS -lt $end ]; do
	if kv -o client.timeout=1s get s/00000123 "$E2E_TMP/g" >/dev/null 2>&1; then
		got=$((($(date +%s%N) - t0) / 1000000))
		break
	fi
done
[ -n "$got" ] || fail "no get of an old key within 20 s of kill -9"
t1=$(date +%s%N)
expect 0 kv put s/after "$E2E_TMP/v1"
put_ms=$((($(date +%s%N) - t0) / 1000000))
# the put went in before the node's REPORTs (its scan still waits)
[ "$(node_mounts)" = "$mounts" ] && ! grep -q "reconciled with the node" "$E2E_TMP/$S.log" ||
	fail "the put waited for the node's REPORTs: $(grep -E 'reporting|commit map' "$E2E_TMP/n1.log" | tail -2)"
grep -q "commit map of [0-9]* pages: .* puts go in now" "$E2E_TMP/$S.log" ||
	fail "no holds from the commit map: $(grep 'segment 1' "$E2E_TMP/$S.log" | tail -3)"
grep -q "with its commit map; reporting after the scan" "$E2E_TMP/n1.log" ||
	fail "the node did not mount with its map"
# no hold (the standby was in step): the recovery window closed at the MOUNT
grep -q "recovery complete after" "$E2E_TMP/$S.log" ||
	fail "the recovery window waited for the REPORTs: $(grep recovery "$E2E_TMP/$S.log")"
[ "$put_ms" -lt "$((got + 2000))" ] || fail "the put came ${put_ms} ms after the kill, the get after ${got} ms"
ok "a put accepted before the node's REPORTs: $(grep -o 'commit map of [0-9]* pages: [0-9]* holds, [0-9]* bytes' "$E2E_TMP/$S.log" | tail -1)"
grep -q "took over a warm table: $N keys" "$E2E_TMP/$S.log" ||
	fail "no warm takeover with $N keys: $(grep 'ha:' "$E2E_TMP/$S.log" | tail -5)"
ok "kill -9 $L: $S took the table over warm; first get of an old key after ${got} ms, a put done ${put_ms} ms after the kill"

# ---- 3. reconciliation: no ghosts, nothing lost ----
waitfor 30 grep -q "reconciled with the node" "$E2E_TMP/$S.log" || fail "the node's reports did not reconcile"
grep -q "reconciled with the node: [0-9]* replicas of the table checked, 0 not held" "$E2E_TMP/$S.log" ||
	fail "ghosts: $(grep reconciled "$E2E_TMP/$S.log")"
expect 0 kv get s/late "$E2E_TMP/v1.back"
cmp -s "$E2E_TMP/v1" "$E2E_TMP/v1.back" || fail "s/late differs"
expect 3 kv get s/00000007 "$E2E_TMP/x"
expect 0 kv info --json
keys=$(jval "$E2E_TMP/out" 'r["keys"]' 2>/dev/null || jval "$E2E_TMP/out" 'r["objects"]')
[ "$keys" = $((N + 1)) ] || fail "kvpool info counts $keys keys, expected $((N + 1)) (ghosts or losses)"
[ "$(ha_metric "$S" kvpool_master_ha_warm_takeover)" = 1 ] || fail "kvpool_master_ha_warm_takeover"
[ "$(ha_metric "$S" kvpool_master_ha_ghosts_dropped_total)" = 0 ] || fail "ghosts dropped: $(ha_metric "$S" kvpool_master_ha_ghosts_dropped_total)"
[ "$(ha_metric "$S" kvpool_master_ha_reconciled_replicas_total)" -ge "$N" ] ||
	fail "replicas confirmed: $(ha_metric "$S" kvpool_master_ha_reconciled_replicas_total)"
ok "the node's reports confirm the table: no ghost, $keys keys, the removed key stays removed"
# every old key, byte for byte (the bench verifies what it reads)
expect 0 kv bench --op get --existing --count $((N / 2)) --size 1K --batch 64 --prefix s/h2/ --keep
ok "the $((N / 2)) keys put while the standby followed read back and verified"

# ---- 4. the old leader comes back as a follower ----
ha_run "$L"
waitfor 15 grep -q "following the leader: in step" "$E2E_TMP/$L.log" ||
	fail "the restarted $L does not follow: $(grep 'ha:' "$E2E_TMP/$L.log" | tail -5)"
ok "restarted $L follows $S"

# ---- 5. the node's re-reports: exactly its objects ----
# its scan ran after the put of s/after (the master knew that one: rejected)
rep=$(grep -o 'reporting [0-9]* extents' "$E2E_TMP/n1.log" | tail -1 | grep -o '[0-9]*')
[ "$rep" = $((N + 1)) ] || fail "the node re-reported $rep extents to $S, it holds $((N + 1))"
warmed=$(metric kvpool_node_segment_warmed_pages_total "$NODE_HTTP_PORT")
[ "${warmed:-0}" -ge "$N" ] || fail "the node's warmer read ${warmed:-0} header pages, $N committed"
ok "after the kill -9 of $L the node re-reported its $rep extents ($warmed header pages read ahead by its warmer)"
stop_pid "$NODE_PID" KILL
unset KVP_TEST_SCAN_DELAY_MS
mounted_again() { [ "$(node_mounts)" -gt "$mounts" ]; }
mounts=$(node_mounts)
run_node n1
waitfor 30 mounted_again ||
	fail "the restarted node did not mount: $(tail -3 "$E2E_TMP/n1.log")"
rep=$(grep -o 'reporting [0-9]* extents' "$E2E_TMP/n1.log" | tail -1 | grep -o '[0-9]*')
[ "$rep" = $((N + 1)) ] || fail "the restarted node reported $rep extents, it holds $((N + 1))"
waitfor 10 kv put s/after-restart "$E2E_TMP/v1" || fail "no put after the node's restart"
expect 0 kv info --json
keys=$(jval "$E2E_TMP/out" 'r["keys"]' 2>/dev/null || jval "$E2E_TMP/out" 'r["objects"]')
[ "$keys" = $((N + 2)) ] || fail "kvpool info counts $keys keys after the node's restart, expected $((N + 2))"
[ "$(ha_metric "$S" kvpool_master_ha_ghosts_dropped_total)" = 0 ] || fail "ghosts dropped after the node's restart"
expect 0 kv bench --op get --existing --count $((N / 2)) --size 1K --batch 64 --prefix s/h2/ --keep
ok "node kill -9 and restart: it reported its $rep extents, the master counts $keys keys, no ghost"
e2e_finish
