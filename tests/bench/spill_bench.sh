#!/bin/bash
# tests/bench/spill_bench.sh [DIR [TOTAL_MIB [QUEUE_DEPTH [ROUNDS]]]] — the
# spill tier against fio on the same filesystem (DIR, default /var/tmp),
# in one run (run it from the top of the tree):
#   module (build/bench/b_spill, queue_depth in flight, fio at the same
#   --iodepth and amount of data):
#     demotion write  vs  fio --ioengine=io_uring --rw=write --bs=1M
#     spill read      vs  fio --ioengine=io_uring --rw=read  --bs=1M
#   end to end (a real master and node, a 32 MiB segment, TOTAL_MIB of
#   1 MiB objects, almost all demoted; a local client, GET_THREADS callers):
#     disk-tier get   vs  fio --rw=read --bs=1M --iodepth=GET_THREADS
#   and the same gets from memory over TCP, the transport's own ceiling.
# All with --direct=1 where the filesystem takes O_DIRECT (else buffered for
# both). Best of ROUNDS (default 2) per side; prints the ratios (target
# >= 0.8). Never fails on a number: exit 0 when it ran, 77 without fio or
# the binaries, 1 when a run or a check failed. Everything it starts or
# writes (daemons, spill and fio files in DIR, /dev/shm segments) is
# removed at exit, also on failure.
# Env: KVP_BUILD (default build), GET_THREADS (default 4), SKIP_GET=1,
# SKIP_MODULE=1, BENCH_SMOKE=1 (seconds: 48 MiB, a 16 MiB segment, one
# round).
. "$(dirname "$0")/bench_lib.inc" || exit 1
e2e_init spill_bench
dir=${1:-/var/tmp}
total=${2:-$(pick 48 1024)}
qd=${3:-32}
rounds=${4:-$(pick 1 2)}
threads=${GET_THREADS:-4}
segsize=$(pick 16M 32M)
bench=$B/bench/b_spill
need "$bench" "$B/kvpool" "$B/kvpool-master" "$B/kvpool-node" fio python3
[ -d "$dir" ] && [ -w "$dir" ] || fail "$dir is not a writable directory"
fiofile=$dir/kvp-spill-bench-fio-$$
work=$(mktemp -d "$dir/kvp-spill-bench-$$.XXXXXX") || fail "mktemp in $dir"
on_cleanup "rm -rf '$work'; rm -f '$fiofile' '$dir'/kvp-b_spill-*"

# O_DIRECT on this filesystem? Probe with fio itself.
direct=1
if ! fio --name=probe --filename="$fiofile" --ioengine=io_uring --rw=write --bs=1M \
	--size=1M --direct=1 >/dev/null 2>&1; then
	direct=0
fi
rm -f "$fiofile"

# fio_bw VAR RW IODEPTH: VAR = bytes/s of one fio run
fio_bw() {
	fio --name="$2" --filename="$fiofile" --ioengine=io_uring --rw="$2" --bs=1M \
		--direct=$direct --size="${total}M" --iodepth="$3" --output-format=json \
		>"$work/fio.json" 2>"$work/fio.log" || fail "fio --rw=$2: $(tail -n 3 "$work/fio.log")"
	printf -v "$1" '%s' "$(python3 -c "import json,sys; j=json.load(open(sys.argv[1]))['jobs'][0]; print(j['$2']['bw_bytes'])" "$work/fio.json")"
	positive "fio --rw=$2" "${!1}"
}
best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }
show() {	# name ours fio
	local x
	ratio x "$2" "$3"
	awk -v n="$1" -v a="$2" -v b="$3" -v x="$x" 'BEGIN {
		printf "  %-16s %8.0f MB/s   fio %8.0f MB/s   ratio %s %s\n", n, a / 1e6, b / 1e6,
			x, ((x >= 0.8) ? "(target 0.8 met)" : "(BELOW target 0.8)")
	}'
}

# ---- the module ----------------------------------------------------------------
fw=0 fr=0 sw=0 sr=0 mode=?
for ((i = 0; i < rounds; i++)); do
	[ "${SKIP_MODULE:-0}" = 1 ] && continue
	rm -f "$fiofile"
	fio_bw w write "$qd"
	fio_bw r read "$qd"
	rm -f "$fiofile"
	"$bench" "$dir" "$total" "$qd" "$direct" >"$work/b_spill.out" 2>"$work/b_spill.log" ||
		fail "b_spill: $(tail -n 5 "$work/b_spill.log")"
	dw=$(awk '/^demote_bytes_per_s/ { print $2 }' "$work/b_spill.out")
	dr=$(awk '/^read_bytes_per_s/ { print $2 }' "$work/b_spill.out")
	mode=$(awk '/^mode/ { print $2 }' "$work/b_spill.out")
	positive "b_spill's demotion" "$dw"
	positive "b_spill's read" "$dr"
	fw=$(best "$fw" "$w"); fr=$(best "$fr" "$r")
	sw=$(best "$sw" "$dw"); sr=$(best "$sr" "$dr")
done
echo "spill bench on $dir: $total MiB of 1 MiB values, fio direct=$direct, spill $mode I/O$([ $SMOKE = 1 ] && echo ' (SMOKE run: the numbers mean nothing)')"
if [ "${SKIP_MODULE:-0}" != 1 ]; then
	echo " module, queue depth $qd:"
	show "demotion write" "$sw" "$fw"
	show "spill read" "$sr" "$fr"
fi
[ "${SKIP_GET:-0}" = 1 ] && exit 0

# ---- end to end: gets of disk-tier replicas through the node --------------------
pool_ini "lease_ttl = 1s" "eviction_high_watermark = 0.9" "eviction_ratio = 0.1" \
	"metadata_server = false" "[client]" "timeout = 30s" "[log]" "level = warning"
pool_node bench "segment_size = $segsize" "[spill]" "path = $work/spill" \
	"size = $((total * 3 / 2 + 64))M" "queue_depth = $qd" \
	"direct_io = $([ $direct = 1 ] && echo true || echo false)"
run_master
run_node bench
wait_nodes bench 30 || fail "the node did not mount"
# getjson FILE WHAT: checks a `kvpool bench --json` result (every op ok,
# no wrong values) and sets rate (bytes/s) and tcp_share from it.
getjson() {
	python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
if not (r["ok"] == r["ops"] == r["count"] and r["errors"] == 0 and r["mismatches"] == 0):
    sys.exit(1)
print(r["gb_per_s"] * 1e9, r["tcp_bytes"] / max(r["bytes"], 1))' "$1" >"$work/vals" ||
		fail "$2: not every operation succeeded and verified: $(cat "$1")"
	read -r rate tcp_share <"$work/vals"
	positive "$2" "$rate"
}
kv bench --op put --prefix g/ --size 1M --count "$total" --threads 2 --keep --json \
	>"$work/put.json" 2>"$work/put.err" || fail "put: $(cat "$work/put.json" "$work/put.err")"
getjson "$work/put.json" "the put"
# fio's file next to the spill file; each round reads with fio, then gets
gb=0 share=0 fg=0
rm -f "$fiofile"
fio --name=write --filename="$fiofile" --ioengine=io_uring --rw=write --bs=1M --direct=$direct \
	--size="${total}M" --iodepth="$qd" >"$work/fio.log" 2>&1 || fail "fio: $(tail -n 3 "$work/fio.log")"
for ((i = 0; i < rounds; i++)); do
	fio_bw g read "$threads"
	fg=$(best "$fg" "$g")
	kv bench --op get --existing --keep --prefix g/ --size 1M --count "$total" \
		--threads "$threads" --json >"$work/get.json" 2>"$work/get.err" ||
		fail "get: $(cat "$work/get.json" "$work/get.err")"
	getjson "$work/get.json" "the disk-tier get"
	gb=$(best "$gb" "$rate")
	share=$tcp_share
done
awk -v s="$share" -v t="$threads" 'BEGIN {
	printf " end to end, kvpool bench --op get, %d threads, %.0f%% of the bytes from disk:\n",
		t, s * 100 }'
show "disk-tier get" "$gb" "$fg"

# The transport's own ceiling: the same gets from memory over TCP (a node
# whose segment holds everything), so a low ratio above can be told apart
# from the spill tier's own cost.
stop_pid "$NODE_PID" || fail "kvpool-node exit status $?"
# Room for all of it below eviction_high_watermark (0.9): no evictions.
pool_node mem "segment_size = $((total * 5 / 4 + 64))M"
run_node mem
# The stopped node stays listed, draining (no new puts), until client_ttl.
listed() { case " $(pool_nodes) " in *" $1 "*) return 0 ;; esac; return 1; }
waitfor 30 listed mem || fail "the memory node did not mount"
kv bench --op put --prefix m/ --size 1M --count "$total" --threads 2 --keep --json \
	>"$work/put.json" 2>"$work/put.err" || fail "memory put: $(cat "$work/put.json" "$work/put.err")"
getjson "$work/put.json" "the memory-tier put"
mg=0
for ((i = 0; i < rounds; i++)); do
	kv bench --op get --existing --keep --prefix m/ --size 1M --count "$total" \
		--threads "$threads" --path tcp --json >"$work/get.json" 2>"$work/get.err" ||
		fail "memory get: $(cat "$work/get.json" "$work/get.err")"
	getjson "$work/get.json" "the memory-tier get"
	mg=$(best "$mg" "$rate")
done
ratio dm "$gb" "$mg"
awk -v m="$mg" -v x="$dm" 'BEGIN {
	printf "  (memory-tier get over TCP, same client and threads: %.0f MB/s; disk-tier/memory %s)\n",
		m / 1e6, x }'
