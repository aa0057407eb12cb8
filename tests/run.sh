#!/bin/bash
# tests/run.sh BUILD [NAME...] — runs every test: the unit programs
# (BUILD/tests/t_*), the end-to-end scripts (tests/e2e/*.sh), every
# benchmark in its smoke mode (tests/bench/*.sh with BENCH_SMOKE=1, named
# bench:NAME: seconds each, so a benchmark that broke fails here instead of
# rotting) and, when built, each fuzz target for a few seconds (through
# tests/fuzz/run.sh, the runner `make fuzz-run` uses; FUZZ_JOBS at a time,
# default the CPUs up to 2, after the rest). One line per
# test, then "N passed, N failed, N skipped". Exit 0 pass, 77 skip, else fail.
# Env: TEST_TIMEOUT (default 300 s per test), FUZZ_SECONDS (default 10; 0:
# no fuzz targets), FUZZ_JOBS, KVP_TEST_MASTER_CHECK (default 1: every kvpool-master
# the tests start checks its table's invariants each tick and aborts when
# one breaks; empty: off).
set -u
build=${1:-build}
shift || true
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
export KVP_BUILD="$root/$build"
KVP_TEST_MASTER_CHECK=${KVP_TEST_MASTER_CHECK-1}
if [ -n "$KVP_TEST_MASTER_CHECK" ]; then export KVP_TEST_MASTER_CHECK; else unset KVP_TEST_MASTER_CHECK; fi
logdir="$root/$build/test-logs"
mkdir -p "$logdir"
timeout_s=${TEST_TIMEOUT:-300}
fuzz_s=${FUZZ_SECONDS:-10}

tests=()
for t in "$build"/tests/t_*; do [ -x "$t" ] && tests+=("$t"); done
for t in tests/e2e/*.sh; do
	case "$(basename "$t")" in lib*.sh) continue ;; esac	# helpers, not tests
	[ -f "$t" ] && tests+=("$t")
done
for t in tests/bench/*.sh; do [ -f "$t" ] && tests+=("bench:$t"); done
if [ -d build-fuzz/fuzz ] && [ "$fuzz_s" != 0 ]; then
	for t in build-fuzz/fuzz/fuzz_*; do [ -x "$t" ] && tests+=("fuzz:$t"); done
fi
if [ $# -gt 0 ]; then
	sel=()
	for t in "${tests[@]}"; do
		for n in "$@"; do case "$t" in *"$n"*) sel+=("$t"); break ;; esac; done
	done
	tests=("${sel[@]}")
fi

pass=0 fail=0 skip=0 failed=()

# report NAME RC SECS LOG: the test's line, and the counts
report() {
	local name=$1 rc=$2 secs=$3 log=$4 why
	case $rc in
	0) pass=$((pass + 1)); echo "PASS  $name (${secs}s)" ;;
	77) skip=$((skip + 1)); echo "SKIP  $name: $(tail -n 1 "$log")" ;;
	*)
		fail=$((fail + 1)); failed+=("$name")
		[ "$rc" = 124 ] && why="timeout after ${timeout_s}s" || why="exit $rc"
		echo "FAIL  $name ($why, ${secs}s) — last lines of $log:"
		tail -n 25 "$log" | sed 's/^/    /'
		;;
	esac
}

since() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.1f", (b - a) / 1e9 }'; }

# The fuzz targets (single-threaded, a fixed time each) run FUZZ_JOBS at a
# time (default: the CPUs, at most 2): half the first pass's fuzz minutes.
fuzz_jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$fuzz_jobs" -gt 2 ] 2>/dev/null && fuzz_jobs=2
[ "$fuzz_jobs" -ge 1 ] 2>/dev/null || fuzz_jobs=1
fuzz=()
for t in "${tests[@]}"; do
	case "$t" in
	fuzz:*) fuzz+=("${t#fuzz:}"); continue ;;
	bench:*) name=bench:$(basename "$t" .sh) ;;
	*) name=$(basename "$t") ;;
	esac
	log="$logdir/$name.log"
	start=$(date +%s%N)
	case "$t" in
	bench:*)
		if [ "$(basename "$build")" = build-san ]; then
			# the first pass runs every smoke mode; the ASan pass
			# (make SANITIZE=1 test) would repeat them slowly
			echo "skip: not in the ASan pass: the first pass runs the benchmarks' smoke modes" >"$log"
			rc=77
		else
			BENCH_SMOKE=1 timeout -k 10 "$timeout_s" bash "${t#bench:}" >"$log" 2>&1
			rc=$?
		fi
		;;
	*.sh) timeout -k 10 "$timeout_s" bash "$t" >"$log" 2>&1; rc=$? ;;
	*) timeout -k 10 "$timeout_s" "$t" >"$log" 2>&1; rc=$? ;;
	esac
	report "$name" "$rc" "$(since "$start")" "$log"
done
for ((i = 0; i < ${#fuzz[@]}; i += fuzz_jobs)); do
	group=("${fuzz[@]:i:fuzz_jobs}")
	pids=() starts=()
	for f in "${group[@]}"; do
		name=$(basename "$f")
		starts+=("$(date +%s%N)")
		# a failing input and the target's log go to $logdir/fuzz-artifacts/NAME/
		FUZZ_ARTIFACTS="$logdir/fuzz-artifacts" FUZZ_MERGE= \
			tests/fuzz/run.sh "$(dirname "$f")" "$fuzz_s" "$name" >"$logdir/$name.log" 2>&1 &
		pids+=($!)
	done
	for k in "${!group[@]}"; do
		name=$(basename "${group[k]}")
		wait "${pids[k]}"
		rc=$?
		report "$name" "$rc" "$(since "${starts[k]}")" "$logdir/$name.log"
	done
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
