#!/bin/bash
# tests/bench/ha_scale_bench.sh [BUILD] — `make ha-scale`: failover and
# restart at size with the real daemons (docs/ha.md "Failover at size").
# For each count in HA_SIZES (default "100000 1000000"; BENCH_SMOKE=1:
# 2000, each figure checked to be measured): one node, HA_SIZES objects
# of 1 KiB under 20-byte keys, then
#   warm  two masters on etcd (master.ha_follow = true): kill -9 of the
#         leader once the standby holds the table;
#   cold  the same with master.ha_follow = false (the new leader rebuilds
#         from the node's reports);
#   lone  one master (ha = none): kill -9, started again at once;
#   lonetab  the same with master.table_file (docs/ha.md "Lone restart"):
#         the restart loads the table warm from the file;
# each reporting the time from the kill to the first successful get of an
# old key and to the first successful put (a fresh key), and, for lone,
# until `kvpool info` counts every key again. The leader's RSS per object
# (VmRSS after the fill minus before, divided by the count) comes with
# each size. One JSON line per measurement on stdout and in HA_SCALE_JSON
# (default BUILD/ha-scale.json). Env: HA_SIZES, HA_MODES (warm cold lone
# lonetab), HA_KEYS: hashed (default: `kvpool bench --hashed-keys`, keys in
# no order, as engines' content hashes are, so a snapshot's or a table
# file's extents come in no order either) or index (key i named by i: key
# order is put order, as the figures before 2026-12-06 were measured).
set -u
BENCH_BUILD=${1:-} . "$(dirname "$0")/bench_lib.inc" || exit 1
e2e_init hascale
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" curl
[ $SMOKE = 1 ] && echo "SMOKE run: the numbers mean nothing"
SIZES=${HA_SIZES:-$(pick 2000 "100000 1000000")}
MODES=${HA_MODES:-warm cold lone lonetab}
OUT=${HA_SCALE_JSON:-$B/ha-scale.json}
: >"$OUT"
PREFIX=bench-key-000000/	# 12 + 8 digits: 20-byte keys
KEYS=${HA_KEYS:-hashed}
case $KEYS in
index) BENCH_KEYS=() ;;
hashed) BENCH_KEYS=(--hashed-keys) ;;
*) fail "HA_KEYS: index or hashed, not '$KEYS'" ;;
esac
# old_key I: key I's name as the fill named it (cli_bench.c bench_name:
# murmur3's 32-bit finalizer for hashed keys)
old_key() {
	local h=$1
	if [ "$KEYS" = index ]; then
		printf '%s%08d' "$PREFIX" "$h"
		return
	fi
	h=$(((h ^ (h >> 16)) * 0x85ebca6b & 0xffffffff))
	h=$(((h ^ (h >> 13)) * 0xc2b2ae35 & 0xffffffff))
	printf '%s%08x' "$PREFIX" $((h ^ (h >> 16)))
}

rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# first_ok CMD...: ms from T0 until CMD succeeds (tries for 60 s), or -1;
# 20 ms between tries: back to back, the tries' process starts took one of
# this VM's two cores from the master they measure
first_ok() {
	local end=$((SECONDS + 60))
	while [ $SECONDS -lt $end ]; do
		"$@" >/dev/null 2>&1 && { echo $(($(now_ms) - T0)); return 0; }
		sleep 0.02
	done
	echo -1
}
# report JSON: one line out; a figure that was not measured (-1: the get or
# put never succeeded) fails the run
report() {
	echo "$1" | tee -a "$OUT"
	case $1 in *": -1"*) fail "not measured: $1" ;; esac
}
# keys_at_least N: kvpool info counts N keys or more (the top level's
# "keys"; parsed in the shell: a python3 start, 0.4 s with a pyenv one,
# was most of what "all keys" measured after the first get)
keys_at_least() {
	local k
	k=$("$B/kvpool" -c "$POOL_INI" info --json 2>/dev/null | grep -o '"keys": [0-9]*' | head -1)
	[ "${k##* }" -ge "$1" ] 2>/dev/null
}
fill() {
	local n=$1 before after
	before=$(rss_kb "$2")
	kv bench --op put --count "$n" --size 1K --batch 256 --prefix "$PREFIX" "${BENCH_KEYS[@]}" --keep >"$E2E_TMP/fill.out" 2>&1 ||
		fail "fill: $(tail -3 "$E2E_TMP/fill.out")"
	after=$(rss_kb "$2")
	echo $(((after - before) * 1024 / n))
}
seg_for() { echo $(($1 * 4700 / 1048576 + 64))M; }

for n in $SIZES; do
	for mode in $MODES; do
		case $mode in
		warm | cold)
			[ -n "${ETCD_EPS:-}" ] || start_etcd 1
			HA_SEGMENT=$(seg_for "$n") ha_pool_ini
			[ $mode = cold ] && printf '[master]\nha_follow = false\n' >>"$POOL_INI"
			sed -i "s/^level = info/level = ${HA_SCALE_LOG:-notice}/" "$POOL_INI"
			ha_master A
			ha_master B
			waitfor 10 ha_leader >/dev/null || fail "no leader"
			L=$(ha_leader)
			S=$(ha_other "$L")
			pool_node n1
			run_node n1
			wait_nodes n1 30 || fail "node"
			bpo=$(fill "$n" "${HA_PID[$L]}")
			if [ $mode = warm ]; then
				waitfor 120 grep -q "following the leader: in step" "$E2E_TMP/$S.log" || fail "standby not in step"
				waitfor 60 sh -c "grep -q 'has the whole table' '$E2E_TMP/$L.log'" || fail "snapshot not sent"
			fi
			sleep 1
			T0=$(now_ms)
			stop_pid "${HA_PID[$L]}" KILL
			get=$(first_ok kv -o client.timeout=2s get "$(old_key 123)" "$E2E_TMP/g")
			put=$(first_ok kv -o client.timeout=2s put "fresh/$mode-$n" "$E2E_TMP/g")
			report "{\"objects\": $n, \"mode\": \"$mode\", \"keys\": \"$KEYS\", \"leader_rss_bytes_per_object\": $bpo, \"kill_to_first_get_ms\": $get, \"kill_to_first_put_ms\": $put}"
			sleep 1
			grep -h "took over\|re-mounted\|reconciled\|recovery complete\|serving as leader" "$E2E_TMP/$S.log" | sed 's/^/# /'
			grep -h "mounted .* reporting\|scanned\|master\|leader" "$E2E_TMP/n1.log" | tail -8 | sed 's/^/# /'
			stop_pid "${HA_PID[$S]}" TERM
			stop_pid "$NODE_PID" TERM
			rm -f "/dev/shm/$NODE_SEG"
			;;
		lone | lonetab)
			margs=("[log]" "level = notice")
			rm -f "$E2E_TMP/master.table" "$E2E_TMP/master.table.new"	# not the last size's
			[ $mode = lonetab ] && margs=("table_file = $E2E_TMP/master.table" "${margs[@]}")
			start_master "${margs[@]}"
			POOL_INI=$E2E_TMP/lone.ini
			printf '[cluster]\nmaster = %s\n[node]\nsegment_size = %s\nheartbeat_interval = 500ms\n[client]\ntimeout = 5s\n' \
				"$MASTER_ADDR" "$(seg_for "$n")" >"$POOL_INI"
			pool_node n1
			run_node n1
			wait_nodes n1 30 || fail "node"
			bpo=$(fill "$n" "$MASTER_PID")
			if [ $mode = lonetab ]; then
				# a snapshot in progress (FILE.new) would leave the file's
				# changes to load: fine, but measure the common case
				waitfor 120 test ! -e "$E2E_TMP/master.table.new" || fail "snapshot not written"
				sleep 1
				ls -l "$E2E_TMP/master.table" | sed 's/^/# /'
			fi
			T0=$(now_ms)
			stop_pid "$MASTER_PID" KILL
			: >"$MASTER_LOG"
			run_master
			get=$(first_ok kv -o client.timeout=2s get "$(old_key 123)" "$E2E_TMP/g")
			all=$(first_ok keys_at_least "$n")
			put=$(first_ok kv -o client.timeout=2s put "fresh/$mode-$n" "$E2E_TMP/g")
			report "{\"objects\": $n, \"mode\": \"$mode\", \"keys\": \"$KEYS\", \"master_rss_bytes_per_object\": $bpo, \"kill_to_first_get_ms\": $get, \"kill_to_all_keys_ms\": $all, \"kill_to_first_put_ms\": $put}"
			sleep 1
			grep -h "table file\|took over\|re-mounted\|reconciled\|recovery complete\|dropped" "$MASTER_LOG" | sed 's/^/# /'
			stop_master
			stop_pid "$NODE_PID" TERM
			rm -f "/dev/shm/$NODE_SEG"
			;;
		esac
	done
done
