#!/bin/bash
# tests/fuzz/run.sh [DIR] [SECONDS] [NAME...] — the one fuzz runner, for
# `make fuzz-run` and for tests/run.sh (each built target as a test, a few
# seconds each): runs every libFuzzer target in DIR (default
# build-fuzz/fuzz), or those NAME selects (a target's exact name, else any
# whose name contains NAME), for SECONDS each (default 60), one after the
# other, starting from its seed corpus
# tests/fuzz/corpus/<NAME without fuzz_>. The seed corpus is not modified:
# each run works on a copy; FUZZ_MERGE=1 merges the new inputs that add
# coverage back into it (-merge=1, minimised). A crash, leak, timeout or
# sanitizer report fails the target; its input is kept under
# $FUZZ_ARTIFACTS/NAME/ (default DIR/../artifacts/NAME/) and named in the
# report, with the target's log.
# Prints one line per target (runs, coverage, corpus growth) and
# "N passed, N failed". Exit 0 when every target passed, 1 otherwise, 77
# when there is no target. Env: FUZZ_ARGS (extra libFuzzer flags),
# FUZZ_RSS_MB (default 2048), FUZZ_TIMEOUT (per-input seconds, default 30:
# an input that runs that long is reported with its stack and saved, not
# just killed by the outer limit of SECONDS + 120), FUZZ_ARTIFACTS.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-build-fuzz/fuzz}
secs=${2:-60}
shift 2 2>/dev/null || shift $#
cd "$root" || exit 1
case $secs in '' | *[!0-9]*) echo "usage: $0 DIR SECONDS [NAME...]"; exit 2 ;; esac

targets=()
for t in "$dir"/fuzz_*; do
	[ -x "$t" ] && [ -f "$t" ] || continue
	if [ $# -gt 0 ]; then
		sel=0
		for n in "$@"; do
			if [ -x "$dir/$n" ]; then	# an exact name: that target alone
				[ "$(basename "$t")" = "$n" ] && sel=1
			else
				case $(basename "$t") in *"$n"*) sel=1 ;; esac
			fi
		done
		[ $sel = 1 ] || continue
	fi
	targets+=("$t")
done
[ ${#targets[@]} -gt 0 ] || { echo "no fuzz targets in $dir (make fuzz)"; exit 77; }

art_root=${FUZZ_ARTIFACTS:-$(cd "$dir/.." && pwd)/artifacts}
work_root=$(mktemp -d /tmp/kvp-fuzzrun.XXXXXX)
trap 'rm -rf "$work_root"' EXIT
pass=0 fail=0 failed=()
printf '%-22s %-6s %10s %8s %8s %9s  %s\n' target result runs cov ft corpus note
for t in "${targets[@]}"; do
	name=$(basename "$t")
	seeds=tests/fuzz/corpus/${name#fuzz_}
	work=$work_root/$name
	art=$art_root/$name
	log=$work_root/$name.log
	mkdir -p "$work" "$art"
	nseed=0
	if [ -d "$seeds" ]; then
		cp -r "$seeds"/. "$work"/ 2>/dev/null
		nseed=$(find "$seeds" -type f | wc -l)
	fi
	# shellcheck disable=SC2086
	timeout -k 10 $((secs + 120)) "$t" -max_total_time="$secs" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
		-timeout="${FUZZ_TIMEOUT:-30}" -print_final_stats=1 -artifact_prefix="$art/" \
		${FUZZ_ARGS:-} "$work" >"$log" 2>&1
	rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | awk '{print $2}')
	ft=$(grep -o 'ft: [0-9]*' "$log" | tail -n 1 | awk '{print $2}')
	ncorp=$(find "$work" -type f | wc -l)
	note=""
	if [ $rc = 0 ]; then
		pass=$((pass + 1))
		res=ok
		if [ "${FUZZ_MERGE:-}" = 1 ]; then
			mkdir -p "$seeds"
			before=$(find "$seeds" -type f | wc -l)
			"$t" -merge=1 -rss_limit_mb="${FUZZ_RSS_MB:-2048}" "$seeds" "$work" >>"$log" 2>&1
			note="merged $(($(find "$seeds" -type f | wc -l) - before)) into $seeds"
		fi
	else
		fail=$((fail + 1))
		failed+=("$name")
		res=FAIL
		[ $rc = 124 ] && note="hung past ${secs}s + 120s; "
		a=$(grep -o "Test unit written to [^ ]*" "$log" | tail -n 1 | sed 's/Test unit written to //')
		note="${note}exit $rc${a:+, input $a}"
	fi
	printf '%-22s %-6s %10s %8s %8s %9s  %s\n' "$name" "$res" "${runs:--}" "${cov:--}" "${ft:--}" \
		"$nseed->$ncorp" "$note"
	if [ $rc != 0 ]; then
		grep -E "ERROR: |SUMMARY: |runtime error|Assertion|#[0-9]+ 0x" "$log" | head -n 25 | sed 's/^/    /'
		cp "$log" "$art/last.log" 2>/dev/null && echo "    full log: $art/last.log"
	fi
done
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed"
[ $fail = 0 ]
