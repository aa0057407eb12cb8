#!/bin/bash
# tests/bench/client_bench.sh [BUILD] — libkvpool throughput on this host
# (run it from the top of the tree), as ratios against references measured
# in the same run:
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
# server and redis-server on free loopback ports, and stops them (and
# removes the segment and its temp dir) at exit, also on failure.
# About 2 minutes. Env: BENCH_SECS (seconds per measurement, default 0.7),
# BENCH_ROUNDS (default 3), BENCH_SMOKE=1 (seconds: 16 objects of 1 MiB,
# a 128 MiB segment, one round, 0.05 s per measurement).
# Exit 0 when it ran (targets missed are reported, not failures), 77 when a
# tool is missing, 1 when a measurement or a check failed.
BENCH_BUILD=${1:-} . "$(dirname "$0")/bench_lib.inc" || exit 1
e2e_init client_bench
secs=${BENCH_SECS:-$(pick 0.05 0.7)}
rounds=${BENCH_ROUNDS:-$(pick 1 3)}
nbig=$(pick 16 256)		# 1 MiB objects per footprint (b_client -n)
need "$B/kvpool-master" "$B/kvpool-node" "$B/bench/b_client" iperf3 redis-server \
	redis-benchmark redis-cli python3

pool_ini "metadata_server = false" "[log]" "level = warning"
pool_node bench "segment_size = $(pick 128M 1G)" "populate = true" "remove_segment_on_exit = true"
read -r iport rport <<<"$(free_ports 2)"
run_master
run_node bench
"$B/bench/b_client" -c "$POOL_INI" -w || fail "the pool did not come up"

# Per round, iperf3 runs before and after libkvpool and the mean is the
# reference; redis follows.
spawn iperf-s iperf3 -s -B 127.0.0.1 -p "$iport"
spawn redis redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no \
	--protected-mode no --daemonize no --dir "$E2E_TMP"
waitfor 10 redis-cli -p "$rport" ping >/dev/null 2>&1 || fail "redis-server did not answer"
wait_port "$iport" 10 || fail "iperf3 -s did not listen"
# iperf3 -t takes whole seconds: a smoke run moves a fixed amount instead.
iperf_len=$(pick "-n 256M" "-t 2")
run_iperf() {
	# shellcheck disable=SC2086
	iperf3 -c 127.0.0.1 -p "$iport" -P 4 $iperf_len -J >"$E2E_TMP/iperf$1.json" 2>"$E2E_TMP/iperf.log" ||
		fail "iperf3 failed: $(tail -n 5 "$E2E_TMP/iperf.log" "$E2E_TMP/iperf$1.json")"
}
# rb OUT ARGS...: one redis-benchmark run, its CSV in OUT.
rb() {
	local out=$1
	shift
	redis-cli -p "$rport" flushall >/dev/null || fail "redis-cli flushall"
	redis-benchmark -h 127.0.0.1 -p "$rport" --csv "$@" >"$out" 2>"$E2E_TMP/rb.log" ||
		fail "redis-benchmark $*: $(tail -n 3 "$E2E_TMP/rb.log")"
}
# Key spaces as libkvpool's: nbig objects of 1 MiB, 4 x nbig of 64 KiB / 4 KiB.
n1m=$(pick 200 2000) n64k=$(pick 5000 100000) n4k=$(pick 20000 400000)
for r in $(seq "$rounds"); do
	echo "== round $r of $rounds: iperf3 -P 4, libkvpool (${secs}s per measurement), iperf3, redis"
	run_iperf "$r-1"
	"$B/bench/b_client" -c "$POOL_INI" -t "$secs" -n "$nbig" >"$E2E_TMP/kvp$r.txt" 2>"$E2E_TMP/b_client.log" ||
		fail "b_client failed: $(tail -n 5 "$E2E_TMP/b_client.log")"
	run_iperf "$r-2"
	rb "$E2E_TMP/redis-1m-$r.csv" -t set,get -d 1048576 -c 4 -n "$n1m" -r "$nbig"
	rb "$E2E_TMP/redis-64k-$r.csv" -t set,get -d 65536 -c 4 -P 64 -n "$n64k" -r $((4 * nbig))
	rb "$E2E_TMP/redis-4k-$r.csv" -t set,get -d 4096 -c 4 -P 64 -n "$n4k" -r $((4 * nbig))
done

[ $SMOKE = 1 ] && echo "SMOKE run: the numbers mean nothing"
python3 - "$E2E_TMP" "$rounds" <<'EOF' || fail "no report: a measurement is missing (above)"
import csv, json, os, statistics, sys
d, rounds = sys.argv[1], int(sys.argv[2])
med = statistics.median
R = range(1, rounds + 1)
def need(what, v):
    # a ratio only from two measurements that happened
    if not v > 0:
        sys.exit(f"no measurement of {what} (got {v!r}): no ratio from a failed run")
    return v
k = {r: {} for r in R}
for r in R:
    for line in open(os.path.join(d, f"kvp{r}.txt")):
        name, val = line.split()
        k[r][name] = float(val)
def kv(r, name):
    if name not in k[r]:
        sys.exit(f"b_client printed no {name} in round {r}")
    return k[r][name]
def iperf(r, i):
    j = json.load(open(os.path.join(d, f"iperf{r}-{i}.json")))
    return need(f"iperf3 (round {r})", j["end"]["sum_received"]["bits_per_second"] / 8)
ip = {r: (iperf(r, 1) + iperf(r, 2)) / 2 for r in R}
def redis(f):
    out = {}
    for row in csv.reader(open(os.path.join(d, f))):
        if row and row[0] in ("SET", "GET"):
            out[row[0]] = float(row[1])
    for op in ("SET", "GET"):
        need(f"redis {op} in {f}", out.get(op, 0))
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
    ratios = [need(what, val(r)) / need(refname, ref(r)) for r in R]
    show(what, med(val(r) for r in R), med(ref(r) for r in R), refname, med(ratios), target,
         unit, scale)
def paired(what, name, refname, target):
    # b_client measured it in alternating slices with its reference
    for r in R:
        need(what, kv(r, name)), need(refname, kv(r, name + "_ref")), need(what, kv(r, name + "_ratio"))
    show(what, med(k[r][name] for r in R), med(k[r][name + "_ref"] for r in R), refname,
         med(k[r][name + "_ratio"] for r in R), target, "GB/s", 1e9)
print(f"medians of {rounds} rounds")
print("local path, 1 MiB (reference: single-thread memcpy, same buffers and footprint: the same")
print("objects read or written in rotation, 1 or 16 caller buffers; interleaved slices)")
paired("get_into 1 MiB", "local_get_into_1m", "memcpy all src -> 1 dst", 0.8)
paired("batch_get_into 16 x 1 MiB", "local_batch_get_1m_x16", "memcpy all src -> 16 dst", 0.8)
paired("put_from 1 MiB", "local_put_from_1m", "memcpy 1 src -> all dst", 0.8)
paired("batch_put_from 16 x 1 MiB", "local_batch_put_1m_x16", "memcpy 16 src -> all dst", 0.8)
print("TCP loopback, 1 MiB, connections_per_node=4 (reference: iperf3 -P 4, mean of the runs before "
      "and after, " + ", ".join(f"{ip[r]/1e9:.2f}" for r in R) + " GB/s)")
for n, w in (("tcp_get_into_1m_1thr", "get_into, 1 thread"), ("tcp_batch_get_1m_x16", "batch_get_into 16, 1 thread"),
             ("tcp_get_into_1m_4thr", "get_into, 4 threads"), ("tcp_put_from_1m_1thr", "put_from, 1 thread"),
             ("tcp_batch_put_1m_x16", "batch_put_from 16, 1 thread"), ("tcp_put_from_1m_4thr", "put_from, 4 threads")):
    line(w, lambda r, n=n: kv(r, n), lambda r: ip[r], "iperf3 -P 4", 0.8)
print("TCP loopback, 1 MiB (reference: redis-benchmark -d 1MiB -c 4 -r objects)")
line("get, best of 1/4 threads, batch", lambda r: max(kv(r, "tcp_get_into_1m_4thr"), kv(r, "tcp_batch_get_1m_x16")),
     lambda r: rd[r]["1m"]["GET"] * MiB, "redis GET", 1.0)
line("put, best of 1/4 threads, batch", lambda r: max(kv(r, "tcp_put_from_1m_4thr"), kv(r, "tcp_batch_put_1m_x16")),
     lambda r: rd[r]["1m"]["SET"] * MiB, "redis SET", 1.0)
print("batches of 64, ops/s (reference: redis-benchmark -P 64 -c 4 -r 4 x objects, same value size)")
for size in ("64k", "4k"):
    for path in ("local", "tcp"):
        line(f"{path} batch_get {size} x64", lambda r: kv(r, f"{path}_batch_get_{size}_x64_ops"),
             lambda r: rd[r][size]["GET"], f"redis GET -P 64 -d {size}", 1.0, "Mops/s", 1e6)
        line(f"{path} batch_put {size} x64", lambda r: kv(r, f"{path}_batch_put_{size}_x64_ops"),
             lambda r: rd[r][size]["SET"], f"redis SET -P 64 -d {size}", 1.0, "Mops/s", 1e6)
print("checksum mismatches: local %d, tcp %d" % (sum(kv(r, "local_checksum_mismatches") for r in R),
                                                 sum(kv(r, "tcp_checksum_mismatches") for r in R)))
print(f"targets missed: {len(missed)}" + (" (" + ", ".join(missed) + ")" if missed else ""))
EOF
