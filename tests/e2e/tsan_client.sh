#!/bin/bash
# tsan_client.sh — libkvpool's multi-threaded tests (tests/unit/t_client_threads.c:
# one handle, 8 threads, mixed single and batch calls over shared keys, on
# the local path and over TCP; t_client_cq.c: the completion queue's workers,
# submitters and drains) built with ThreadSanitizer
# (make TSAN=1 -> build-tsan/) and run against real daemons (the test starts
# them from $KVP_BUILD). Any TSAN report fails it.
# Exit 0 pass, 1 fail, 77 skip (no such test yet, or no TSAN runtime).
# run.sh: alone — it compiles the library with ThreadSanitizer first (both cores).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
# Its own TSan build: the same run in the ASan pass (build-san) would repeat it.
case ${KVP_BUILD:-} in */build-san) echo "skip: not in the ASan pass: it builds and runs its own build-tsan"; exit 77 ;; esac
cc=${CC:-cc}
probe=$(mktemp -d /tmp/kvp-tsan.XXXXXX)
trap 'rm -rf "$probe"' EXIT
echo 'int main(void) { return 0; }' >"$probe/p.c"
"$cc" -fsanitize=thread -o "$probe/p" "$probe/p.c" 2>/dev/null && "$probe/p" ||
	{ echo "skip: $cc cannot build or run a -fsanitize=thread program"; exit 77; }

export KVP_BUILD=${KVP_BUILD:-$root/build}

# One test: 0 pass, 77 skip, else fail.
one() {
	local name=$1 rc
	[ -f "tests/unit/$name.c" ] || { echo "skip: tests/unit/$name.c does not exist yet"; return 77; }
	# A clean make: the outer `make [SANITIZE=1] test` must not leak its
	# variables (SANITIZE=1 and TSAN=1 do not mix). No -Werror: gcc warns that
	# TSAN does not model atomic_thread_fence (-Wtsan), which is not an error
	# of ours; the -Werror build is `make test`'s own.
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u SANITIZE -u FUZZ make -j2 TSAN=1 \
		"build-tsan/tests/$name" >"$probe/build.log" 2>&1 ||
		{ tail -n 30 "$probe/build.log"; echo "FAIL: make TSAN=1 build-tsan/tests/$name"; return 1; }
	echo "ok - built build-tsan/tests/$name with -fsanitize=thread"

	run() {
		TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
			timeout 240 "$@" "build-tsan/tests/$name" >"$probe/run.log" 2>&1
	}
	pre=()
	run
	rc=$?
	# Kernels with high mmap entropy break TSAN's memory layout: retry without ASLR.
	if [ $rc != 0 ] && grep -q "unexpected memory mapping" "$probe/run.log" && command -v setarch >/dev/null; then
		pre=(setarch "$(uname -m)" -R)
		run "${pre[@]}"
		rc=$?
	fi
	# Under TSAN everything runs 5-15x slower, so the test's timing-bound
	# expectations (150 ms leases) can fail on their own: a failure without a
	# TSAN report is tried once more (the plain build runs it as $name).
	if [ $rc != 0 ] && [ $rc != 77 ] && ! grep -q "WARNING: ThreadSanitizer" "$probe/run.log"; then
		echo "first run exited $rc without a ThreadSanitizer report; its complaints:"
		grep -E "unexpected|CHECK|REQUIRE" "$probe/run.log" | head -n 10 | sed 's/^/    /'
		run "${pre[@]}"
		rc=$?
	fi
	cat "$probe/run.log"
	if grep -q "WARNING: ThreadSanitizer" "$probe/run.log"; then
		echo "FAIL: ThreadSanitizer reports (above)"
		return 1
	fi
	case $rc in
	0) echo "PASS tsan_client.sh: $name clean under ThreadSanitizer" ;;
	77) echo "skip: $name skipped: $(tail -n 1 "$probe/run.log")" ;;
	*) echo "FAIL: $name exited $rc under ThreadSanitizer" ;;
	esac
	return $rc
}

status=0 passed=0
for t in t_client_threads t_client_cq; do
	one $t
	case $? in
	0) passed=$((passed + 1)) ;;
	77) ;;
	*) status=1 ;;
	esac
done
[ $status = 0 ] && [ $passed = 0 ] && exit 77
exit $status
