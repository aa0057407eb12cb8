#!/bin/bash
# spill_bench.sh [DIR [TOTAL_MIB [QUEUE_DEPTH [ROUNDS]]]] — the spill tier
# against fio on the same filesystem, in one run:
#   demotion write throughput  vs  fio --ioengine=io_uring --rw=write --bs=1M
#   spill read throughput      vs  fio --ioengine=io_uring --rw=read  --bs=1M
# both with --direct=1 where the filesystem takes O_DIRECT (else buffered
# for both), the same --iodepth as the spill's queue_depth and the same
# amount of data. Best of ROUNDS (default 2) for each side; prints ratios
# (target >= 0.8). Never fails on a number; exit 1 only if something broke.
# Env: KVP_BUILD (default build).
set -u
cd "$(dirname "$0")/../.." || exit 1
dir=${1:-/var/tmp}
total=${2:-1024}
qd=${3:-32}
rounds=${4:-2}
build=${KVP_BUILD:-build}
bench="$build/bench/b_spill"
fiofile="$dir/kvp-spill-bench-fio-$$"

[ -x "$bench" ] || { echo "spill_bench: $bench not built (make benches)"; exit 1; }
command -v fio >/dev/null || { echo "spill_bench: fio not installed"; exit 77; }
trap 'rm -f "$fiofile" "$dir"/kvp-b_spill-*' EXIT

# O_DIRECT on this filesystem? Probe with fio itself.
direct=1
if ! fio --name=probe --filename="$fiofile" --ioengine=io_uring --rw=write --bs=1M \
	--size=1M --direct=1 >/dev/null 2>&1; then
	direct=0
fi
rm -f "$fiofile"

fio_bw() {	# rw -> bytes/s
	fio --name="$1" --filename="$fiofile" --ioengine=io_uring --rw="$1" --bs=1M \
		--direct=$direct --size="${total}M" --iodepth="$qd" --output-format=json 2>/dev/null |
		python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$1']['bw_bytes'])"
}

best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }

fw=0 fr=0 sw=0 sr=0
for ((i = 0; i < rounds; i++)); do
	rm -f "$fiofile"
	w=$(fio_bw write) || { echo "spill_bench: fio write failed"; exit 1; }
	r=$(fio_bw read) || { echo "spill_bench: fio read failed"; exit 1; }
	rm -f "$fiofile"
	out=$("$bench" "$dir" "$total" "$qd" "$direct") || { echo "spill_bench: b_spill failed"; exit 1; }
	dw=$(awk '/^demote_bytes_per_s/ { print $2 }' <<<"$out")
	dr=$(awk '/^read_bytes_per_s/ { print $2 }' <<<"$out")
	mode=$(awk '/^mode/ { print $2 }' <<<"$out")
	fw=$(best "$fw" "$w"); fr=$(best "$fr" "$r")
	sw=$(best "$sw" "$dw"); sr=$(best "$sr" "$dr")
done

awk -v fw="$fw" -v fr="$fr" -v sw="$sw" -v sr="$sr" -v dir="$dir" -v d="$direct" \
	-v mode="$mode" -v qd="$qd" -v total="$total" 'BEGIN {
	printf "spill bench on %s: %d MiB of 1 MiB values, queue depth %d, fio direct=%d, spill %s I/O\n",
		dir, total, qd, d, mode
	printf "  demotion write  %8.0f MB/s   fio write %8.0f MB/s   ratio %.2f %s\n",
		sw / 1e6, fw / 1e6, sw / fw, ((sw / fw >= 0.8) ? "(target 0.8 met)" : "(BELOW target 0.8)")
	printf "  spill read      %8.0f MB/s   fio read  %8.0f MB/s   ratio %.2f %s\n",
		sr / 1e6, fr / 1e6, sr / fr, ((sr / fr >= 0.8) ? "(target 0.8 met)" : "(BELOW target 0.8)")
}'
