#!/bin/bash
# tests/run.sh BUILD [NAME...] — runs every test: the unit programs
# (BUILD/tests/t_*), the end-to-end scripts (tests/e2e/*.sh), every
# benchmark in its smoke mode (tests/bench/*.sh with BENCH_SMOKE=1, named
# bench:NAME: seconds each, so a benchmark that broke fails here instead of
# rotting) and, when built, each fuzz target for a few seconds (through
# tests/fuzz/run.sh, the runner `make fuzz-run` uses; FUZZ_JOBS at a time,
# default the CPUs up to 2, after the rest). One line per
# test as it ends, then "N passed, N failed, N skipped". Exit 0 pass, 77
# skip, else fail.
# Env: TEST_JOBS (tests at a time, default the CPUs up to 4; 1: one after
# the other), TEST_RERUN (default 1: a test that failed beside others runs
# again alone; 0: not), TEST_TIMEOUT (default 300 s per test), FUZZ_SECONDS (default 10; 0:
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
rm -f "$logdir"/*.beside.log
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

# The unit programs and end-to-end scripts run TEST_JOBS at a time (default:
# the CPUs, at most 4): each has its own ports, shm names, mount points and
# temp dirs, and most of their time is spent waiting on daemons, so two at a
# time take about half as long on two cores, sanitized or not. A script with
# a line "# run.sh: alone" (and why) runs by itself after them: the ones
# that change what the whole machine shares or check a time. The benchmarks
# come last, one at a time (their ratios are against references measured
# in the same run), then the fuzz targets.
test_jobs=${TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
[ "$test_jobs" -gt 4 ] 2>/dev/null && test_jobs=4
[ "$test_jobs" -ge 1 ] 2>/dev/null || test_jobs=1
# wait -n -p (which job ended) is bash 5.1's
if [ "${BASH_VERSINFO[0]}" -lt 5 ] || { [ "${BASH_VERSINFO[0]}" = 5 ] && [ "${BASH_VERSINFO[1]}" -lt 1 ]; }; then
	test_jobs=1
fi
fuzz=() shared=() alone=() benches=()
for t in "${tests[@]}"; do
	case "$t" in
	fuzz:*) fuzz+=("${t#fuzz:}") ;;
	bench:*) benches+=("$t") ;;
	*.sh) if grep -q '^# run.sh: alone' "$t"; then alone+=("$t"); else shared+=("$t"); fi ;;
	*) shared+=("$t") ;;
	esac
done
# the scripts first: they are the long ones; the unit programs fill the end
ordered=()
for t in "${shared[@]}"; do case "$t" in *.sh) ordered+=("$t") ;; esac; done
for t in "${shared[@]}"; do case "$t" in *.sh) ;; *) ordered+=("$t") ;; esac; done

test_name() {
	case "$1" in
	bench:*) echo "bench:$(basename "$1" .sh)" ;;
	*) basename "$1" ;;
	esac
}

# run_test TEST LOG: runs one test (not a fuzz target) to its end; its exit
# status is the test's
run_test() {
	case "$1" in
	bench:*)
		if [ "$(basename "$build")" = build-san ]; then
			# the first pass runs every smoke mode; the ASan pass
			# (make SANITIZE=1 test) would repeat them slowly
			echo "skip: not in the ASan pass: the first pass runs the benchmarks' smoke modes" >"$2"
			return 77
		fi
		BENCH_SMOKE=1 timeout -k 10 "$timeout_s" bash "${1#bench:}" >"$2" 2>&1 </dev/null
		;;
	*.sh) timeout -k 10 "$timeout_s" bash "$1" >"$2" 2>&1 </dev/null ;;
	*) timeout -k 10 "$timeout_s" "$1" >"$2" 2>&1 </dev/null ;;
	esac
}

declare -A job_name=() job_start=() job_test=()	# by the pid of each test running
# Interrupted: the tests still running get SIGTERM (through the timeout(1)
# each job runs, which passes it on; each test stops and removes what it
# started), and are waited for.
stop_jobs() {
	local p
	trap - INT TERM
	for p in "${!job_name[@]}"; do pkill -TERM -P "$p"; done 2>/dev/null
	wait
	echo "interrupted"
	exit 130
}
trap stop_jobs INT TERM
# A test that fails beside another is run again by itself once the others
# are done (TEST_RERUN=0: not): a failure it repeats alone is a failure; one
# it does not is counted as a pass, named in the summary as failing only
# beside others, its first log kept as NAME.beside.log — a race between
# tests (something host-wide, see "alone" above) or in the product that
# only load brings out, to look into, not to hide: both were found so.
rerun=() beside=()
# reap: waits for one running test to end and reports it
reap() {
	local pid rc name
	wait -n -p pid
	rc=$?
	name=${job_name[$pid]}
	if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ "$test_jobs" -gt 1 ] && [ "${TEST_RERUN:-1}" != 0 ]; then
		mv "$logdir/$name.log" "$logdir/$name.beside.log"
		echo "RERUN $name (failed beside others: exit $rc, $(since "${job_start[$pid]}")s; runs again alone at the end) — last lines of $logdir/$name.beside.log:"
		tail -n 25 "$logdir/$name.beside.log" | sed 's/^/    /'
		rerun+=("${job_test[$pid]}")
	else
		report "$name" "$rc" "$(since "${job_start[$pid]}")" "$logdir/$name.log"
	fi
	unset "job_name[$pid]" "job_start[$pid]" "job_test[$pid]"
}
for t in "${ordered[@]}"; do
	[ ${#job_name[@]} -lt "$test_jobs" ] || reap
	name=$(test_name "$t")
	run_test "$t" "$logdir/$name.log" &
	job_name[$!]=$name
	job_start[$!]=$(date +%s%N)
	job_test[$!]=$t
done
while [ ${#job_name[@]} -gt 0 ]; do reap; done
trap - INT TERM
for t in "${rerun[@]}"; do
	name=$(test_name "$t")
	start=$(date +%s%N)
	run_test "$t" "$logdir/$name.log"
	rc=$?
	report "$name" "$rc" "$(since "$start")" "$logdir/$name.log"
	[ "$rc" = 0 ] && beside+=("$name")
done
for t in "${alone[@]}" "${benches[@]}"; do
	name=$(test_name "$t")
	start=$(date +%s%N)
	run_test "$t" "$logdir/$name.log"
	report "$name" "$?" "$(since "$start")" "$logdir/$name.log"
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
[ ${#beside[@]} -gt 0 ] &&
	echo "failed only beside others (passed alone; first log NAME.beside.log): ${beside[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
