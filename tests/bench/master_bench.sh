#!/bin/bash
# tests/bench/master_bench.sh [BUILD] — kvpool-master benchmark (run it
# from the top of the tree, after make): pipelined throughput next to
# redis-benchmark measured in the same run (one connection, -P 64, -r over
# the same number of random keys the master's run uses: the fair
# comparison; without -r redis-benchmark hits one key), memory per object
# at 1M objects, p99 GET latency idle / under load / while eviction runs.
# build/bench/b_master starts (and stops) its own masters and redis-server
# on private loopback ports and temp dirs. About a minute on a 2-core
# machine. Exit 0 when it ran (missed targets are reported, not failures),
# 77 without redis-server/redis-benchmark or the binaries, 1 when a
# measurement failed.
# Env: OPS (default 1000000), OBJECTS (1000000), SAMPLES (20000),
# BENCH_SMOKE=1 (seconds: 3000 ops, 2000 objects, 200 samples).
BENCH_BUILD=${1:-} . "$(dirname "$0")/bench_lib.inc" || exit 1
e2e_init master_bench
need "$B/bench/b_master" "$B/kvpool-master" redis-server redis-benchmark
[ $SMOKE = 1 ] && echo "SMOKE run: the numbers mean nothing"
# b_master cleans up after itself (its children and temp dirs, also when a
# check fails); the timeout bounds a hang, it is not a measurement.
timeout -k 5 170 "$B/bench/b_master" -n "${OPS:-$(pick 3000 1000000)}" \
	-m "${OBJECTS:-$(pick 2000 1000000)}" -l "${SAMPLES:-$(pick 200 20000)}"
rc=$?
case $rc in
0) ;;
77) exit 77 ;;
124) fail "b_master did not finish within 170 s" ;;
*) fail "b_master exited $rc" ;;
esac
