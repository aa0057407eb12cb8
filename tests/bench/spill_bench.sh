#!/bin/bash
# spill_bench.sh [DIR [TOTAL_MIB [QUEUE_DEPTH [ROUNDS]]]] — the spill tier
# against fio on the same filesystem (DIR, default /var/tmp), in one run:
#   module (build/bench/b_spill, queue_depth in flight, fio at the same
#   --iodepth and amount of data):
#     demotion write  vs  fio --ioengine=io_uring --rw=write --bs=1M
#     spill read      vs  fio --ioengine=io_uring --rw=read  --bs=1M
#   end to end (a real master and node, a 32 MiB segment, TOTAL_MIB of
#   1 MiB objects, almost all demoted; a local client, GET_THREADS callers):
#     disk-tier get   vs  fio --rw=read --bs=1M --iodepth=GET_THREADS
# All with --direct=1 where the filesystem takes O_DIRECT (else buffered for
# both). Best of ROUNDS (default 2) per side; prints the ratios (target
# >= 0.8). Never fails on a number; exit 1 only if something broke.
# Env: KVP_BUILD (default build), GET_THREADS (default 4), SKIP_GET=1,
# SKIP_MODULE=1.
set -u
cd "$(dirname "$0")/../.." || exit 1
dir=${1:-/var/tmp}
total=${2:-1024}
qd=${3:-32}
rounds=${4:-2}
build=${KVP_BUILD:-build}
threads=${GET_THREADS:-4}
bench="$build/bench/b_spill"
fiofile="$dir/kvp-spill-bench-fio-$$"
work="" mpid="" npid="" seg=kvpb-spill-$$

[ -x "$bench" ] || { echo "spill_bench: $bench not built (make benches)"; exit 1; }
command -v fio >/dev/null || { echo "spill_bench: fio not installed"; exit 77; }
cleanup() {
	for p in $npid $mpid; do kill -TERM "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -f "$fiofile" "$dir"/kvp-b_spill-* "/dev/shm/$seg"
	[ -n "$work" ] && rm -rf "$work"
}
trap cleanup EXIT

# O_DIRECT on this filesystem? Probe with fio itself.
direct=1
if ! fio --name=probe --filename="$fiofile" --ioengine=io_uring --rw=write --bs=1M \
	--size=1M --direct=1 >/dev/null 2>&1; then
	direct=0
fi
rm -f "$fiofile"

fio_bw() {	# rw iodepth -> bytes/s
	fio --name="$1" --filename="$fiofile" --ioengine=io_uring --rw="$1" --bs=1M \
		--direct=$direct --size="${total}M" --iodepth="$2" --output-format=json 2>/dev/null |
		python3 -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$1']['bw_bytes'])"
}

best() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }
ratio() {	# name ours fio
	awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN {
		printf "  %-16s %8.0f MB/s   fio %8.0f MB/s   ratio %.2f %s\n", n, a / 1e6, b / 1e6,
			a / b, ((a / b >= 0.8) ? "(target 0.8 met)" : "(BELOW target 0.8)")
	}'
}

# ---- the module ----------------------------------------------------------------
fw=0 fr=0 sw=0 sr=0 mode=?
for ((i = 0; i < rounds; i++)); do
	[ "${SKIP_MODULE:-0}" = 1 ] && continue
	rm -f "$fiofile"
	w=$(fio_bw write "$qd") || { echo "spill_bench: fio write failed"; exit 1; }
	r=$(fio_bw read "$qd") || { echo "spill_bench: fio read failed"; exit 1; }
	rm -f "$fiofile"
	out=$("$bench" "$dir" "$total" "$qd" "$direct") || { echo "spill_bench: b_spill failed"; exit 1; }
	dw=$(awk '/^demote_bytes_per_s/ { print $2 }' <<<"$out")
	dr=$(awk '/^read_bytes_per_s/ { print $2 }' <<<"$out")
	mode=$(awk '/^mode/ { print $2 }' <<<"$out")
	fw=$(best "$fw" "$w"); fr=$(best "$fr" "$r")
	sw=$(best "$sw" "$dw"); sr=$(best "$sr" "$dr")
done
echo "spill bench on $dir: $total MiB of 1 MiB values, fio direct=$direct, spill $mode I/O"
if [ "${SKIP_MODULE:-0}" != 1 ]; then
	echo " module, queue depth $qd:"
	ratio "demotion write" "$sw" "$fw"
	ratio "spill read" "$sr" "$fr"
fi
[ "${SKIP_GET:-0}" = 1 ] && exit 0

# ---- end to end: gets of disk-tier replicas through the node --------------------
for b in kvpool kvpool-master kvpool-node; do
	[ -x "$build/$b" ] || { echo "spill_bench: $build/$b not built"; exit 1; }
done
work=$(mktemp -d "$dir/kvp-spill-bench-$$.XXXXXX") || exit 1
read -r mport nport mhttp nhttp <<<"$(python3 -c '
import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
cat >"$work/pool.ini" <<EOF
[cluster]
master = 127.0.0.1:$mport
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
metadata_server = false
lease_ttl = 1s
eviction_high_watermark = 0.9
eviction_ratio = 0.1
[node]
name = bench
listen = 127.0.0.1:$nport
http_listen = 127.0.0.1:$nhttp
segment = $seg
segment_size = 32M
[spill]
path = $work/spill
size = $((total * 3 / 2 + 64))M
queue_depth = $qd
direct_io = $([ $direct = 1 ] && echo true || echo false)
[log]
level = warning
EOF
"$build/kvpool-master" -c "$work/pool.ini" >"$work/master.log" 2>&1 &
mpid=$!
"$build/kvpool-node" -c "$work/pool.ini" >"$work/node.log" 2>&1 &
npid=$!
kv() { "$build/kvpool" -c "$work/pool.ini" "$@"; }
for _ in $(seq 100); do kv info --json 2>/dev/null | grep -q '"bench"' && break; sleep 0.1; done
kv bench --op put --prefix g/ --size 1M --count "$total" --threads 2 --keep --json \
	>"$work/put.json" 2>&1 ||
	{ echo "spill_bench: put failed: $(cat "$work/put.json")"; tail "$work/node.log"; exit 1; }
# fio's file next to the spill file; each round reads with fio, then gets
gb=0 share=0 fg=0
rm -f "$fiofile"
fio --name=write --filename="$fiofile" --ioengine=io_uring --rw=write --bs=1M --direct=$direct \
	--size="${total}M" --iodepth="$qd" >/dev/null 2>&1 || { echo "spill_bench: fio failed"; exit 1; }
for ((i = 0; i < rounds; i++)); do
	g=$(fio_bw read "$threads") || { echo "spill_bench: fio read failed"; exit 1; }
	fg=$(best "$fg" "$g")
	kv bench --op get --existing --keep --prefix g/ --size 1M --count "$total" \
		--threads "$threads" --json >"$work/get.json" 2>&1 ||
		{ echo "spill_bench: get failed: $(cat "$work/get.json")"; exit 1; }
	read -r g s ok <<<"$(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print(r["gb_per_s"] * 1e9, r["tcp_bytes"] / max(r["bytes"], 1),
      r["ok"] == r["ops"] and r["mismatches"] == 0)' "$work/get.json")"
	[ "$ok" = True ] || { echo "spill_bench: gets not all right: $(cat "$work/get.json")"; exit 1; }
	gb=$(best "$gb" "$g")
	share=$s
done
awk -v s="$share" -v t="$threads" 'BEGIN {
	printf " end to end, kvpool bench --op get, %d threads, %.0f%% of the bytes from disk:\n",
		t, s * 100 }'
ratio "disk-tier get" "$gb" "$fg"

# The transport's own ceiling: the same gets from memory over TCP (a node
# whose segment holds everything), so a low ratio above can be told apart
# from the spill tier's own cost.
kill -TERM "$npid" 2>/dev/null
wait "$npid" 2>/dev/null
npid=""
rm -f "/dev/shm/$seg"
sed -i -e "s/^segment_size = .*/segment_size = $((total + 64))M/" -e 's/^path = .*/path =/' \
	"$work/pool.ini"
"$build/kvpool-node" -c "$work/pool.ini" >>"$work/node.log" 2>&1 &
npid=$!
for _ in $(seq 300); do
	kv bench --op put --prefix probe/ --size 1M --count 1 --json >/dev/null 2>&1 && break
	sleep 0.1
done
kv bench --op put --prefix m/ --size 1M --count "$total" --threads 2 --keep --json \
	>"$work/put.json" 2>&1 || { echo "spill_bench: memory put failed: $(cat "$work/put.json")"; exit 1; }
mg=0
for ((i = 0; i < rounds; i++)); do
	kv bench --op get --existing --keep --prefix m/ --size 1M --count "$total" \
		--threads "$threads" --path tcp --json >"$work/get.json" 2>&1 ||
		{ echo "spill_bench: memory get failed: $(cat "$work/get.json")"; exit 1; }
	g=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["gb_per_s"] * 1e9)' \
		"$work/get.json")
	mg=$(best "$mg" "$g")
done
awk -v g="$gb" -v m="$mg" 'BEGIN {
	printf "  (memory-tier get over TCP, same client and threads: %.0f MB/s; disk-tier/memory %.2f)\n",
		m / 1e6, g / m }'
