#!/bin/bash
# spill_tier.sh — the io_uring spill tier with a real master and node on
# private loopback ports; the node has a 16 MiB segment and a 96 MiB spill
# file in the test's temp dir (O_DIRECT where that filesystem allows it).
#  1. put 3x the memory capacity: every object stays readable with the right
#     bytes, many of them from the spill file (stat shows tier disk), the
#     node and the master count demotions;
#  2. reads racing demotions: a reader verifies older objects over and over
#     while new puts push them to disk: no wrong bytes, nothing missing;
#  3. SIGTERM + restart of the node: the spilled objects are back (the node
#     scanned its spill file and re-reported them), all readable; the same
#     after kill -9;
#  4. removing a spilled object tombstones it in the spill file (the spill
#     extent count drops) and it stays gone after another restart.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init spill
KVP=$B/kvpool NODE=$B/kvpool-node
need "$B/kvpool-master" "$NODE" "$KVP" curl python3

seg=kvpt-spill-$$
on_cleanup "rm -f /dev/shm/$seg"

start_master "lease_ttl = 1s" "eviction_high_watermark = 0.9" "eviction_ratio = 0.1" \
	"client_ttl = 3s" "put_timeout = 5s" "[log]" "level = info"
. "$(dirname "$0")/spill_lib.inc"
spill_node sn1 96M
# bench_get PREFIX COUNT: verified gets; the JSON report in $E2E_TMP/out.
bench_get() {
	timeout 120 "$KVP" -c "$E2E_TMP/pool.ini" bench --op get --existing --keep --prefix "$1" \
		--size 512K --count "$2" --json >"$E2E_TMP/out" 2>"$E2E_TMP/err"
}
report() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($1)" "$E2E_TMP/out"; }
# tiers PREFIX: "mem disk" counts of the objects under PREFIX
tiers() {
	kv ls "$1" | while IFS= read -r k; do kv stat --json "$k"; done | python3 -c '
import json, sys
m = d = 0
for l in sys.stdin:
    for r in json.loads(l)["replicas"]:
        if r["tier"] == "disk": d += 1
        else: m += 1
print(m, d)'
}

start_node
grep -q "spill file $spill" "$E2E_TMP/node.log" || fail "the node did not open its spill file"
cap=$(nmetric kvpool_node_spill_capacity_bytes)
[ "${cap:-0}" -gt $((90 << 20)) ] || fail "spill capacity metric: '$cap'"
ok "node up with a $((cap >> 20)) MiB spill tier ($(grep -o '[a-z]* I/O' "$E2E_TMP/node.log" | head -n 1))"

# ---- 1. three times the memory capacity -----------------------------------------
timeout 120 "$KVP" -c "$E2E_TMP/pool.ini" bench --op put --prefix a/ --size 512K --count 96 \
	--keep --json >"$E2E_TMP/out" 2>"$E2E_TMP/err" || fail "put a/: $(cat "$E2E_TMP/out" "$E2E_TMP/err")"
[ "$(report 'r["ok"]')" = 96 ] || fail "put a/: $(cat "$E2E_TMP/out")"
bench_get a/ 96 || fail "get a/ exited $?: $(cat "$E2E_TMP/out" "$E2E_TMP/err")"
[ "$(report 'r["ok"] == 96 and r["missing"] == 0 and r["mismatches"] == 0')" = True ] ||
	fail "not every object readable: $(cat "$E2E_TMP/out")"
read -r mem disk <<<"$(tiers a/)"
[ "$disk" -ge 32 ] || fail "only $disk of 96 objects on disk ($mem in memory)"
dem=$(nmetric kvpool_node_spill_demotions_total)
[ "${dem:-0}" -ge "$disk" ] || fail "node demotions metric '$dem' < $disk disk replicas"
[ "$(metric kvpool_master_demotions_total)" -ge "$disk" ] || fail "master demotions metric"
ok "48 MiB in a 16 MiB segment: all 96 objects readable, $disk from disk, $mem in memory"
# the spill file has the segment layout: kvpool scan lists it offline
"$KVP" scan "$spill" --json >"$E2E_TMP/scan.json" || fail "kvpool scan of the spill file"
listed=$(python3 -c 'import json,sys; print(sum(1 for e in json.load(open(sys.argv[1])) if e["key"].startswith("a/")))' "$E2E_TMP/scan.json")
[ "$listed" -ge "$disk" ] || fail "kvpool scan lists $listed a/ extents in the spill file, $disk on disk"
ok "kvpool scan lists the spill file ($listed a/ extents)"

# ---- 2. reads racing demotions ------------------------------------------------------
(
	for i in 1 2 3 4 5 6; do
		timeout 120 "$KVP" -c "$E2E_TMP/pool.ini" bench --op get --existing --keep --prefix a/ \
			--size 512K --count 96 --json >"$E2E_TMP/race-$i.json" 2>&1 || echo "exit $?" >>"$E2E_TMP/race-$i.json"
	done
) &
reader=$!
timeout 120 "$KVP" -c "$E2E_TMP/pool.ini" bench --op put --prefix b/ --size 512K --count 48 \
	--keep --json >"$E2E_TMP/out" 2>"$E2E_TMP/err" || fail "put b/: $(cat "$E2E_TMP/out" "$E2E_TMP/err")"
wait "$reader"
for f in "$E2E_TMP"/race-*.json; do
	python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if r["ok"] == 96 and r["missing"] == 0 and r["mismatches"] == 0 and r["errors"] == 0 else 1)' "$f" ||
		fail "a read racing demotions went wrong: $(cat "$f")"
done
bench_get b/ 48 && [ "$(report 'r["ok"] == 48 and r["mismatches"] == 0')" = True ] ||
	fail "b/ not readable: $(cat "$E2E_TMP/out")"
ok "6 verifying passes over a/ while b/ pushed them to disk: no wrong or missing bytes"

# ---- 3. restarts keep the spilled objects ---------------------------------------------
spilled=$(nmetric kvpool_node_spill_extents)
[ "${spilled:-0}" -ge 32 ] || fail "spill extents metric '$spilled'"
for sig in TERM KILL; do
	stop_node $sig
	start_node
	for _ in $(seq 100); do
		[ "$(metric kvpool_master_keys)" = 144 ] && break
		sleep 0.1
	done
	[ "$(metric kvpool_master_keys)" = 144 ] || fail "after SIGTERM restart the master has $(metric kvpool_master_keys) keys"
	bench_get a/ 96 && [ "$(report 'r["ok"] == 96 and r["mismatches"] == 0')" = True ] ||
		fail "a/ after a $sig restart: $(cat "$E2E_TMP/out")"
	bench_get b/ 48 && [ "$(report 'r["ok"] == 48 and r["mismatches"] == 0')" = True ] ||
		fail "b/ after a $sig restart: $(cat "$E2E_TMP/out")"
	[ "$(nmetric kvpool_node_spill_extents)" -ge "$spilled" ] ||
		fail "spill extents after restart: $(nmetric kvpool_node_spill_extents) < $spilled"
	read -r mem disk <<<"$(tiers a/)"
	[ "$disk" -ge 1 ] || fail "no disk replicas after the restart"
	ok "node restarted after SIG$sig: $spilled spilled objects scanned back, all 144 readable ($disk of a/ on disk)"
done

# ---- 4. removing a spilled object ------------------------------------------------------
victim=$(kv ls a/ | while IFS= read -r k; do
	kv stat --json "$k" | grep -q '"tier": *"disk"' && { echo "$k"; break; }
done)
[ -n "$victim" ] || fail "no spilled object to remove"
before=$(nmetric kvpool_node_spill_extents)
kv rm "$victim" || fail "rm $victim"
for _ in $(seq 50); do
	[ "$(nmetric kvpool_node_spill_extents)" -lt "$before" ] && break
	sleep 0.1
done
[ "$(nmetric kvpool_node_spill_extents)" -lt "$before" ] || fail "spill extent not freed"
[ "$(nmetric kvpool_node_spill_frees_total)" -ge 1 ] || fail "frees metric"
stop_node TERM
start_node
sleep 1
kv get "$victim" >/dev/null 2>&1 && fail "$victim came back after a restart"
ok "a removed spilled object is tombstoned and stays gone across a restart"
