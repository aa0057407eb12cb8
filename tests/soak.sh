#!/bin/bash
# tests/soak.sh [BUILD] — `make soak`: the workload driver
# (BUILD/soak/kvp-soak-driver) against a private pool (a master and
# SOAK_NODES nodes, token, spill tier) while tests/soak/faults.sh breaks it
# on a schedule; then the pool must recover: every node back at the master
# and a clean --strict run with only the results racing clients may see.
#
# Pass: no wrong byte, no operation past its timeout, no daemon crash (an
# exit the schedule did not cause, a non-zero exit at shutdown: sanitizer
# reports count), no client crash, full recovery. Exit 0 pass, 1 fail, 77 skip.
#
# As root it runs in a private mount namespace with its own tmpfs on
# /dev/shm and for the spill files (so filling them touches nobody else)
# and puts the last node in a network namespace of its own (partition).
# Without root those faults are left out (and said so).
#
# Env (defaults in brackets):
#   SOAK_SECONDS [300]  driver run time; faults stop SOAK_SETTLE [10] s before the end
#   SOAK_CLIENTS [8]    client processes (half of them over TCP: SOAK_TCP)
#   SOAK_FAULTS [all]   comma-separated: node_kill client_kill node_stop master_kill
#                       partition shm_full spill_full; "none" for a clean run
#   SOAK_GAP [2]        seconds between two faults
#   SOAK_KEYS [2048] SOAK_SIZE [1-1M] SOAK_BATCH [8]   workload shape (the
#                       defaults overfill the pool: eviction runs all along)
#   SOAK_NODES [3] SOAK_SEGMENT [32M] SOAK_SPILL [32M] SOAK_TIMEOUT [3s]
#   SOAK_CLIENT_TTL [2] SOAK_DOWN [1.5] SOAK_HOLD [3]  (see faults.sh)
#   SOAK_CHECK_SECONDS [5]  the strict run after recovery
#   SOAK_JSON           copy the driver's JSON summary here
#   SOAK_KEEP=1         keep the work directory (logs, configs)
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${KVP_BUILD:-build}}
case $build in /*) B=$build ;; *) B=$root/$build ;; esac
DRIVER=$B/soak/kvp-soak-driver
for b in "$B/kvpool" "$B/kvpool-master" "$B/kvpool-node" "$DRIVER"; do
	[ -x "$b" ] || { echo "skip: $b is not built (make all)"; exit 77; }
done
command -v python3 >/dev/null || { echo "skip: python3 missing"; exit 77; }

# As root: re-run inside a private mount namespace (private /dev/shm).
if [ "$(id -u)" = 0 ] && [ -z "${KVP_SOAK_MNTNS:-}" ] && command -v unshare >/dev/null &&
	unshare -m --propagation private true 2>/dev/null; then
	export KVP_SOAK_MNTNS=1
	exec unshare -m --propagation private bash "$0" "$@"
fi

: "${SOAK_SECONDS:=300}"
: "${SOAK_CLIENTS:=8}"
: "${SOAK_TCP:=$((SOAK_CLIENTS / 2))}"
: "${SOAK_FAULTS:=all}"
: "${SOAK_GAP:=2}"
: "${SOAK_SETTLE:=10}"
: "${SOAK_KEYS:=2048}"
: "${SOAK_SIZE:=1-1M}"
: "${SOAK_BATCH:=8}"
: "${SOAK_CHECK_SECONDS:=5}"

tmp=$(mktemp -d /tmp/kvp-soak.XXXXXX)
tag=kvpsoak-$$
driver_pid=""
# shellcheck source=tests/soak/faults.sh
. "$root/tests/soak/faults.sh"

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	pool_cleanup
	if [ "${SOAK_KEEP:-}" = 1 ]; then
		echo "soak: work directory kept: $tmp"
	else
		rm -rf "$tmp"
	fi
	exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

fail() { echo "FAIL: $*"; exit 1; }

pool_setup
avail=$(faults_available)
if [ "$SOAK_FAULTS" = all ]; then
	sched=$avail
elif [ "$SOAK_FAULTS" = none ]; then
	sched=""
else
	sched=""
	for f in ${SOAK_FAULTS//,/ }; do
		case " $avail " in
		*" $f "*) sched="$sched $f" ;;
		*) echo "soak: fault $f is not available here (root, netns, nft needed); left out" ;;
		esac
	done
fi
for f in node_kill client_kill node_stop master_kill partition shm_full spill_full; do
	case " $avail " in *" $f "*) ;; *) echo "soak: fault $f unavailable on this machine" ;; esac
done
echo "soak: ${SOAK_SECONDS}s, $SOAK_CLIENTS clients, $SOAK_NODES nodes${netns_node:+ ($netns_node in netns $ns)}," \
	"faults: ${sched:-none}"

pool_start || fail "the pool did not come up"

"$DRIVER" -c "$tmp/pool.ini" --clients "$SOAK_CLIENTS" --tcp "$SOAK_TCP" --seconds "$SOAK_SECONDS" \
	--keys "$SOAK_KEYS" --size "$SOAK_SIZE" --batch "$SOAK_BATCH" --state "$state" \
	--prefix "soak/run/" --json "$tmp/driver.json" >"$tmp/driver.out" 2>"$tmp/driver.err" &
driver_pid=$!
event "driver started (its times count from here)"
start=$SECONDS
nfaults=0
read -r -a order <<<"$sched"
soak_sleep "$SOAK_GAP"	# warm-up: the pool fills before the first fault
while kill -0 "$driver_pid" 2>/dev/null && [ $((SECONDS - start)) -lt $((SOAK_SECONDS - SOAK_SETTLE)) ]; do
	if [ ${#order[@]} -gt 0 ]; then
		f=${order[$((nfaults % ${#order[@]}))]}
		"fault_$f"
		nfaults=$((nfaults + 1))
	fi
	soak_sleep "$SOAK_GAP"
done
faults_heal
event "faults over ($nfaults injected); waiting for the driver"
while kill -0 "$driver_pid" 2>/dev/null; do soak_sleep 0.5; done
wait "$driver_pid"
drc=$?
driver_pid=""
cat "$tmp/driver.out"
if [ $drc = 0 ]; then
	grep -E "WRONG|HANG|CRASH|unexpected" "$tmp/driver.err" | head -n 20
else	# everything it said: hung clients' stacks, wrong bytes, crashes
	grep -v "^soak: [0-9]* s: [0-9]* ops" "$tmp/driver.err" | head -n 300
fi
[ -n "${SOAK_JSON:-}" ] && cp "$tmp/driver.json" "$SOAK_JSON"

# Recovery: every node back, then a clean run with strict expectations.
rec=0
if pool_wait_all 60; then
	event "recovered: every node is back at the master"
	"$DRIVER" -c "$tmp/pool.ini" --clients 2 --tcp 1 --seconds "$SOAK_CHECK_SECONDS" --keys 64 \
		--size "$SOAK_SIZE" --prefix "soak/check/" --strict --quiet \
		--state "$state" >"$tmp/check.out" 2>"$tmp/check.err"
	crc=$?
	if [ $crc = 0 ]; then
		rec=1
	else
		echo "soak: the strict run after recovery failed:"
		cat "$tmp/check.out" "$tmp/check.err" | head -n 40
	fi
else
	echo "soak: the pool did not recover: $(node_names)"
fi
kv info 2>/dev/null | head -n 12
pool_stop
crashes=$(grep -c . "$state/crashes")
echo "faults injected: $nfaults ($sched)"
echo "daemon crashes (schedule + shutdown): $crashes"
[ "$crashes" = 0 ] || sed 's/^/  /' "$state/crashes"
if [ $drc = 0 ] && [ $rec = 1 ] && [ "$crashes" = 0 ]; then
	echo "SOAK PASS"
	exit 0
fi
echo "SOAK FAIL (driver exit $drc, recovered $rec, crashes $crashes)"
exit 1
