#!/bin/bash
# tests/bench/ha_meta_bench.sh [BUILD] — the master's side of failover and
# restart at size, metadata only (build/bench/b_ha_meta: one process, a
# node's segment simulated by its REPORTs; docs/ha.md "Failover at size"):
# per size, a cold rebuild (a lone master's restart, a new leader without a
# standby), a standby's snapshot, the takeover to the first GET, the
# reconciliation, RSS per object, and a lone restart from its table file
# (written, loaded, taken over, re-mounted, reconciled: the tabfile_* and
# lone_* fields). One JSON line per size and key order: keys in the
# extents' order, then out of it as a pool's hashed keys are (-r: the
# snapshot and the table file come in key order).
# Env: HA_META_SIZES (default "1000000 10000000"), HA_META_COLD_ONLY
# (sizes measured cold only: one table; default "50000000"),
# BENCH_SMOKE=1 (20,000 objects).
BENCH_BUILD=${1:-} . "$(dirname "$0")/bench_lib.inc" || exit 1
e2e_init ha_meta_bench
need "$B/bench/b_ha_meta"
[ $SMOKE = 1 ] && echo "SMOKE run: the numbers mean nothing"
for n in ${HA_META_SIZES:-$(pick 20000 "1000000 10000000")}; do
	"$B/bench/b_ha_meta" -n "$n" || fail "b_ha_meta -n $n failed"
	"$B/bench/b_ha_meta" -r -n "$n" || fail "b_ha_meta -r -n $n failed"
done
[ $SMOKE = 1 ] && exit 0
for n in ${HA_META_COLD_ONLY-50000000}; do
	"$B/bench/b_ha_meta" -c -n "$n" || fail "b_ha_meta -c -n $n failed"
done
