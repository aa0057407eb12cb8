#!/bin/bash
# client_bench.sh [BUILD] — libkvpool throughput on this host, as ratios
# against references measured in the same run:
#   local path, 1 MiB get_into / put_from   vs single-thread memcpy  (>= 0.8x)
#   TCP loopback, 1 MiB, 4 connections      vs iperf3 -P 4           (>= 0.8x)
#                                           vs redis-benchmark -d 1MiB -c 4 GET/SET (>= 1.0x)
#   64 KiB and 4 KiB, batches of 64, ops/s  vs redis-benchmark -P 64 -c 4 (>= 1.0x)
# redis-benchmark runs with -r over as many keys as libkvpool's runs use
# (without -r it hits one key, which stays in cache). The whole sequence
# (iperf3, libkvpool, iperf3, redis) runs BENCH_ROUNDS times and every
# ratio printed is the median of its per-round ratios: the load of a
# shared machine drifts between one measurement and the next.
# Starts its own kvpool-master, one kvpool-node (1 GiB segment), iperf3
# server and redis-server on free loopback ports, and stops them on exit.
# About 2 minutes. Env: BENCH_SECS (seconds per measurement, default 0.7),
# BENCH_ROUNDS (default 3).
# Exit 0 when it ran (targets missed are reported, not failures), 77 when a
# tool is missing, 1 on an error.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${1:-${KVP_BUILD:-$root/build}}
case "$B" in /*) ;; *) B=$root/$B ;; esac
secs=${BENCH_SECS:-0.7}
rounds=${BENCH_ROUNDS:-3}
for b in "$B/kvpool-master" "$B/kvpool-node" "$B/bench/b_client"; do
	[ -x "$b" ] || { echo "skip: $b is not built"; exit 77; }
done
for t in iperf3 redis-server redis-benchmark python3; do
	command -v $t >/dev/null || { echo "skip: $t is not installed"; exit 77; }
done

tmp=$(mktemp -d /tmp/kvp-cbench.XXXXXX)
tag=kvpt-cb-$$
pids=()
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 30); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ $rc != 0 ] && [ $rc != 77 ]; then
		for l in "$tmp"/*.log; do [ -f "$l" ] && { echo "--- $l"; tail -n 10 "$l"; }; done
	fi
	rm -f /dev/shm/"$tag"-*
	rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT
trap 'exit 1' INT TERM

read -r mport mhttp dport hport iport rport <<<"$(python3 -c '
import socket
ss = [socket.socket() for _ in range(6)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"

cat >"$tmp/pool.ini" <<EOF
[cluster]
master = 127.0.0.1:$mport
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
metadata_server = false
[node]
name = bench
listen = 127.0.0.1:$dport
http_listen = 127.0.0.1:$hport
segment = $tag-n0
segment_size = 1G
populate = true
remove_segment_on_exit = true
[log]
level = warning
EOF

"$B/kvpool-master" -c "$tmp/pool.ini" >"$tmp/master.log" 2>&1 &
pids+=($!)
"$B/kvpool-node" -c "$tmp/pool.ini" >"$tmp/node.log" 2>&1 &
pids+=($!)
"$B/bench/b_client" -c "$tmp/pool.ini" -w || { echo "pool did not come up"; exit 1; }

# Per round, iperf3 runs before and after libkvpool and the mean is the
# reference; redis follows.
iperf3 -s -B 127.0.0.1 -p "$iport" >"$tmp/iperf-s.log" 2>&1 &
pids+=($!)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
	--protected-mode no --daemonize no >"$tmp/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
sleep 0.3
run_iperf() {
	iperf3 -c 127.0.0.1 -p "$iport" -P 4 -t 2 -J >"$tmp/iperf$1.json" 2>"$tmp/iperf.log" ||
		{ echo "iperf3 failed"; cat "$tmp/iperf.log"; exit 1; }
}
rb() { redis-benchmark -h 127.0.0.1 -p "$rport" --csv "$@" 2>/dev/null; }
for r in $(seq "$rounds"); do
	echo "== round $r of $rounds: iperf3 -P 4, libkvpool (${secs}s per measurement), iperf3, redis"
	run_iperf "$r-1"
	"$B/bench/b_client" -c "$tmp/pool.ini" -t "$secs" >"$tmp/kvp$r.txt" 2>"$tmp/b_client.log" ||
		{ cat "$tmp/b_client.log"; echo "b_client failed"; exit 1; }
	run_iperf "$r-2"
	# Key spaces as libkvpool's: 256 objects of 1 MiB, 1024 of 64 KiB / 4 KiB.
	redis-cli -p "$rport" flushall >/dev/null
	rb -t set,get -d 1048576 -c 4 -n 2000 -r 256 >"$tmp/redis-1m-$r.csv"
	redis-cli -p "$rport" flushall >/dev/null
	rb -t set,get -d 65536 -c 4 -P 64 -n 100000 -r 1024 >"$tmp/redis-64k-$r.csv"
	redis-cli -p "$rport" flushall >/dev/null
	rb -t set,get -d 4096 -c 4 -P 64 -n 400000 -r 1024 >"$tmp/redis-4k-$r.csv"
done

python3 - "$tmp" "$rounds" <<'EOF'
import csv, json, os, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
R = range(1, rounds + 1)
k = {r: {} for r in R}
for r in R:
    for line in open(os.path.join(d, f"kvp{r}.txt")):
        name, val = line.split()
        k[r][name] = float(val)
def iperf(r, i):
    return json.load(open(os.path.join(d, f"iperf{r}-{i}.json")))["end"]["sum_received"]["bits_per_second"] / 8
ip = {r: (iperf(r, 1) + iperf(r, 2)) / 2 for r in R}
def redis(f):
    out = {}
    for row in csv.reader(open(os.path.join(d, f))):
        if row and row[0] in ("SET", "GET"):
            out[row[0]] = float(row[1])
    return out
rd = {r: {"1m": redis(f"redis-1m-{r}.csv"), "64k": redis(f"redis-64k-{r}.csv"),
          "4k": redis(f"redis-4k-{r}.csv")} for r in R}
MiB = 1 << 20
missed = []
def show(what, val, ref, refname, ratio, target, unit, scale):
    ok = ratio >= target
    if not ok:
        missed.append(what)
    print(f"  {what:40s} {val/scale:9.2f} {unit}  vs {refname:28s} {ref/scale:9.2f} {unit}"
          f"  = {ratio:5.2f}x (target {target}x){'' if ok else '  MISSED'}")
def line(what, val, ref, refname, target, unit="GB/s", scale=1e9):
    # val(r), ref(r): per-round values; medians of each and of the ratios
    ratios = [val(r) / ref(r) if ref(r) else 0 for r in R]
    show(what, med(val(r) for r in R), med(ref(r) for r in R), refname, med(ratios), target,
         unit, scale)
def paired(what, name, refname, target):
    # b_client measured it in alternating slices with its reference
    show(what, med(k[r][name] for r in R), med(k[r][name + "_ref"] for r in R), refname,
         med(k[r][name + "_ratio"] for r in R), target, "GB/s", 1e9)
print(f"medians of {rounds} rounds")
print("local path, 1 MiB (reference: single-thread memcpy, same buffers and footprint: 256 MiB read or")
print("written in rotation, 1 or 16 caller buffers; interleaved slices)")
paired("get_into 1 MiB", "local_get_into_1m", "memcpy 256 src -> 1 dst", 0.8)
paired("batch_get_into 16 x 1 MiB", "local_batch_get_1m_x16", "memcpy 256 src -> 16 dst", 0.8)
paired("put_from 1 MiB", "local_put_from_1m", "memcpy 1 src -> 256 dst", 0.8)
paired("batch_put_from 16 x 1 MiB", "local_batch_put_1m_x16", "memcpy 16 src -> 256 dst", 0.8)
print("TCP loopback, 1 MiB, connections_per_node=4 (reference: iperf3 -P 4, mean of the runs before "
      "and after, " + ", ".join(f"{ip[r]/1e9:.2f}" for r in R) + " GB/s)")
for n, w in (("tcp_get_into_1m_1thr", "get_into, 1 thread"), ("tcp_batch_get_1m_x16", "batch_get_into 16, 1 thread"),
             ("tcp_get_into_1m_4thr", "get_into, 4 threads"), ("tcp_put_from_1m_1thr", "put_from, 1 thread"),
             ("tcp_batch_put_1m_x16", "batch_put_from 16, 1 thread"), ("tcp_put_from_1m_4thr", "put_from, 4 threads")):
    line(w, lambda r, n=n: k[r][n], lambda r: ip[r], "iperf3 -P 4", 0.8)
print("TCP loopback, 1 MiB (reference: redis-benchmark -d 1MiB -c 4 -r 256)")
line("get, best of 1/4 threads, batch", lambda r: max(k[r]["tcp_get_into_1m_4thr"], k[r]["tcp_batch_get_1m_x16"]),
     lambda r: rd[r]["1m"].get("GET", 0) * MiB, "redis GET", 1.0)
line("put, best of 1/4 threads, batch", lambda r: max(k[r]["tcp_put_from_1m_4thr"], k[r]["tcp_batch_put_1m_x16"]),
     lambda r: rd[r]["1m"].get("SET", 0) * MiB, "redis SET", 1.0)
print("batches of 64, ops/s (reference: redis-benchmark -P 64 -c 4 -r 1024, same value size)")
for size in ("64k", "4k"):
    for path in ("local", "tcp"):
        line(f"{path} batch_get {size} x64", lambda r: k[r][f"{path}_batch_get_{size}_x64_ops"],
             lambda r: rd[r][size].get("GET", 0), f"redis GET -P 64 -d {size}", 1.0, "Mops/s", 1e6)
        line(f"{path} batch_put {size} x64", lambda r: k[r][f"{path}_batch_put_{size}_x64_ops"],
             lambda r: rd[r][size].get("SET", 0), f"redis SET -P 64 -d {size}", 1.0, "Mops/s", 1e6)
print("checksum mismatches: local %d, tcp %d" % (sum(k[r]["local_checksum_mismatches"] for r in R),
                                                 sum(k[r]["tcp_checksum_mismatches"] for r in R)))
print(f"targets missed: {len(missed)}" + (" (" + ", ".join(missed) + ")" if missed else ""))
EOF
