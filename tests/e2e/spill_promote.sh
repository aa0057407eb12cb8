#!/bin/bash
# spill_promote.sh — [spill] promote_on_hit with a real master and node on
# private loopback ports (16 MiB segment, 64 MiB spill file in the test's
# temp dir; the key is set in the master's INI, which reads it):
#  1. objects put first are pushed to disk by later puts; memory is made
#     room for by removing the objects still in memory;
#  2. a get of a disk object returns the right bytes and promotes it: the
#     next get is served from memory (kvpool stat shows tier mem), the same
#     bytes; the master and node count the promotion, and the spill copy is
#     FREEd once the first get's lease (1 s) is over;
#  3. gets racing promotions: 4 concurrent gets of each disk object, and 3
#     concurrent verifying bench passes over objects on disk: every byte
#     right, nothing missing, objects promoted meanwhile;
#  4. a node restart right after promotions (spill copies not yet FREEd):
#     every object is back, byte-exact.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init spillpromote
KVP=$B/kvpool NODE=$B/kvpool-node
need "$B/kvpool-master" "$NODE" "$KVP" curl python3 cmp

seg=kvpt-spillp-$$
on_cleanup "rm -f /dev/shm/$seg"

start_master "lease_ttl = 1s" "eviction_high_watermark = 0.9" "eviction_ratio = 0.1" \
	"client_ttl = 3s" "put_timeout = 5s" "[spill]" "promote_on_hit = true" \
	"[log]" "level = info"
. "$(dirname "$0")/spill_lib.inc"
spill_node pn1 64M
tier() { kv stat --json "$1" | python3 -c 'import json,sys; print(",".join(r["tier"] for r in json.load(sys.stdin)["replicas"]))'; }
# wait_tier KEY TIER: until its replicas are exactly TIER (5 s at most)
wait_tier() {
	local i
	for i in $(seq 50); do
		[ "$(tier "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	return 1
}
# check_p KEY: get it and compare with the file it was put from
check_p() {
	local f=${1#p/}
	kv get "$1" "$E2E_TMP/got-$f" 2>"$E2E_TMP/err-$f" || fail "get $1: $(cat "$E2E_TMP/err-$f")"
	cmp -s "$E2E_TMP/got-$f" "$E2E_TMP/v$f" || fail "$1: wrong bytes"
}
bench() {	# OP PREFIX COUNT OUT
	timeout 120 "$KVP" -c "$E2E_TMP/pool.ini" bench --op "$1" --existing --keep --prefix "$2" \
		--size 512K --count "$3" --json >"$4" 2>&1
}
report() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"; }

start_node
grep -q "spill file $spill" "$E2E_TMP/node.log" || fail "the node did not open its spill file"

# ---- 1. objects on disk, memory made room for ------------------------------------------
np=8
for i in $(seq 1 $np); do
	head -c $((512 * 1024 - i)) /dev/urandom >"$E2E_TMP/v$i"
	kv put "p/$i" "$E2E_TMP/v$i" 2>"$E2E_TMP/err" || fail "put p/$i: $(cat "$E2E_TMP/err")"
done
timeout 120 "$KVP" -c "$E2E_TMP/pool.ini" bench --op put --prefix a/ --size 512K --count 40 \
	--keep --json >"$E2E_TMP/out" 2>&1 || fail "put a/: $(cat "$E2E_TMP/out")"
disk_p=()
for i in $(seq 1 $np); do
	[ "$(tier "p/$i")" = disk ] && disk_p+=("p/$i")
done
[ ${#disk_p[@]} -ge 4 ] || fail "only ${#disk_p[@]} of $np early objects on disk"
removed=0
for k in $(kv ls a/); do
	[ "$(tier "$k")" = mem ] || continue
	kv rm --force "$k" || fail "rm $k"
	removed=$((removed + 1))
done
left=$((40 - removed))
[ "$(metric kvpool_master_promotions_total)" = 0 ] || fail "promotions before any get"
ok "${#disk_p[@]} of p/ on disk; $removed a/ objects removed from memory, $left a/ on disk"

# ---- 2. get twice: the second from memory ---------------------------------------------------
d=${disk_p[0]}
frees0=$(nmetric kvpool_node_spill_frees_total)
ext0=$(nmetric kvpool_node_spill_extents)
check_p "$d"
wait_tier "$d" mem || fail "$d not promoted: tier $(tier "$d")"
check_p "$d"
[ "$(tier "$d")" = mem ] || fail "$d: tier $(tier "$d") after the second get"
[ "$(metric kvpool_master_promotions_total)" -ge 1 ] || fail "master promotions metric"
[ "$(nmetric kvpool_node_spill_promotions_total)" -ge 1 ] || fail "node promotions metric"
ok "$d: first get from disk, promoted, second get from memory, same bytes"
for _ in $(seq 100); do
	[ "$(nmetric kvpool_node_spill_frees_total)" -gt "$frees0" ] && break
	sleep 0.1
done
[ "$(nmetric kvpool_node_spill_frees_total)" -gt "$frees0" ] || fail "spill copy of $d never FREEd"
[ "$(nmetric kvpool_node_spill_extents)" -lt "$ext0" ] || fail "spill extents did not drop"
check_p "$d"
ok "the spill copy of $d FREEd after the lease; still byte-exact"

# ---- 3. gets racing promotions -----------------------------------------------------------
for k in "${disk_p[@]:1}"; do
	f=${k#p/}
	pids=()
	for j in 1 2 3 4; do
		kv get "$k" "$E2E_TMP/race-$f-$j" 2>"$E2E_TMP/race-$f-$j.err" &
		pids+=($!)
	done
	for j in 1 2 3 4; do
		wait "${pids[$((j - 1))]}" || fail "get $k (racer $j): $(cat "$E2E_TMP/race-$f-$j.err")"
		cmp -s "$E2E_TMP/race-$f-$j" "$E2E_TMP/v$f" || fail "$k (racer $j): wrong bytes"
	done
done
promoted=0
for k in "${disk_p[@]:1}"; do
	wait_tier "$k" mem && promoted=$((promoted + 1))
	check_p "$k"
done
[ "$promoted" -ge 1 ] || fail "none of ${disk_p[*]:1} promoted"
ok "4 concurrent gets of each of $((${#disk_p[@]} - 1)) disk objects: right bytes; $promoted promoted"
before=$(metric kvpool_master_promotions_total)
for j in 1 2 3; do
	bench get a/ 40 "$E2E_TMP/bench-$j.json" &
	pids[$j]=$!
done
for j in 1 2 3; do
	wait "${pids[$j]}" || fail "bench get (pass $j) exited $?: $(cat "$E2E_TMP/bench-$j.json")"
	[ "$(report "$E2E_TMP/bench-$j.json" "r['ok'] == $left and r['missing'] == $removed and r['mismatches'] == 0 and r['errors'] == 0")" = True ] ||
		fail "bench get (pass $j): $(cat "$E2E_TMP/bench-$j.json")"
done
after=$(metric kvpool_master_promotions_total)
[ "$after" -gt "$before" ] || fail "no a/ object promoted while read ($before -> $after)"
bench get a/ 40 "$E2E_TMP/out" || fail "bench get after the race: $(cat "$E2E_TMP/out")"
[ "$(report "$E2E_TMP/out" "r['ok'] == $left and r['mismatches'] == 0")" = True ] ||
	fail "a/ after the race: $(cat "$E2E_TMP/out")"
ok "3 concurrent verifying passes over $left a/ objects while $((after - before)) were promoted: no wrong or missing bytes"
[ "$(metric kvpool_master_promote_failures_total)" = 0 ] || fail "promote failures: $(metric kvpool_master_promote_failures_total)"

# ---- 4. restart with spill copies not yet FREEd ------------------------------------------------
# c/ pushes p/ back to disk; p/ is promoted again by gets, and the node is
# killed at once (the spill copies wait for the 1 s lease): after the
# restart it reports both copies of those objects, the master keeps one
timeout 60 "$KVP" -c "$E2E_TMP/pool.ini" bench --op put --prefix c/ --size 512K --count 24 \
	--keep --json >"$E2E_TMP/out" 2>&1 || fail "put c/: $(cat "$E2E_TMP/out")"
kv rm --prefix a/ --force >/dev/null || fail "rm --prefix a/"
before=$(metric kvpool_master_promotions_total)
for i in $(seq 1 $np); do check_p "p/$i"; done
for _ in $(seq 50); do
	[ "$(metric kvpool_master_promotions_total)" -gt "$before" ] && break
	sleep 0.1
done
after=$(metric kvpool_master_promotions_total)
[ "$after" -gt "$before" ] || fail "p/ not promoted again"
keys=$(metric kvpool_master_keys)
stop_node KILL
start_node
for _ in $(seq 100); do
	[ "$(metric kvpool_master_keys)" = "$keys" ] && break
	sleep 0.1
done
[ "$(metric kvpool_master_keys)" = "$keys" ] || fail "after the restart the master has $(metric kvpool_master_keys) keys, not $keys"
for i in $(seq 1 $np); do check_p "p/$i"; done
bench get c/ 24 "$E2E_TMP/out" && [ "$(report "$E2E_TMP/out" "r['ok'] == 24 and r['mismatches'] == 0")" = True ] ||
	fail "c/ after the restart: $(cat "$E2E_TMP/out")"
ok "node killed right after $((after - before)) promotions: all $keys objects back, byte-exact"
