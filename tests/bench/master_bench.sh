#!/bin/bash
# master_bench.sh [BUILD] — kvpool-master benchmark: pipelined throughput
# next to redis-benchmark measured in the same run (one connection, -P 64,
# -r over the same number of random keys the master's run uses: the fair
# comparison; without -r redis-benchmark hits one key), memory per object at
# 1M objects, p99 GET latency idle / under load / while eviction runs.
# b_master starts (and stops) its own masters and redis-server on private
# loopback ports. About a minute on a 2-core machine.
# Env: OPS (default 1000000), OBJECTS (1000000), SAMPLES (20000).
set -u
cd "$(dirname "$0")/../.." || exit 1
build=${1:-build}
export KVP_BUILD=$PWD/$build
[ -x "$build/bench/b_master" ] && [ -x "$build/kvpool-master" ] ||
	make -j2 "$build/bench/b_master" "$build/kvpool-master" >/dev/null || exit 1
command -v redis-server >/dev/null || echo "note: redis-server not installed (tools/deps.sh bench): no ratios"
exec timeout -k 5 170 "$build/bench/b_master" -n "${OPS:-1000000}" -m "${OBJECTS:-1000000}" \
	-l "${SAMPLES:-20000}"
