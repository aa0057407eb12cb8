#!/bin/bash
# tests/bench/client_bench.sh [BUILD] — libkvpool throughput on this host
# (run it from the top of the tree), as ratios against references measured
# in the same run:
#   local path, 1 MiB get_into / put_from   vs single-thread memcpy  (gets >= 0.9x,
#                                                                      puts >= 0.8x)
#   TCP, 1 MiB, 4 connections               vs iperf3 -P 4           (batch_get_into 16 on
#                                                                      one thread >= 0.9x, else 0.8x)
#                                           vs redis-benchmark -d 1MiB -c 4 GET/SET (>= 1.0x)
#   64 KiB and 4 KiB, batches of 64, ops/s  vs redis-benchmark -P 64 -c 4 (>= 1.5x), from
#                                           one thread and (TCP) from 4, redis's concurrency
#   local 4 KiB get_into, batch_exists 64   vs the same calls without optimistic
#                                           reads, i.e. via the master (>= 5x; p50 <= 5 us)
# Two topologies, each with its own pool, iperf3 server and redis-server:
#   loopback  everything on 127.0.0.1 (the local-path rows too);
#   netns     the master, the node and the servers in this network namespace,
#             the clients (b_client, iperf3 -c, redis-benchmark) in another
#             one joined by a veth pair, with a host id of their own: the TCP
#             rows over a real interface, not loopback-only. Needs root and
#             `ip netns`; BENCH_NETNS=0 leaves it out, =1 makes its absence
#             a failure (default: run it where possible, say so where not).
# Where the system's congestion control is BBR, iperf3 runs with -C reno in
# both topologies, as kvpool's own connections do by default ([cluster]
# tcp_congestion = auto, src/common/net.c: BBR paces a reply burst); the
# wire reference and kvpool then use one algorithm. redis-server keeps the
# system's.
# The one-thread 16 x 1 MiB batch get also prints the CPU seconds per GB it
# cost the client and the node together against iperf3's two ends (its JSON
# cpu_utilization_percent): CPU per byte moves far less with the load of a
# shared machine than throughput does (informational, no target).
# redis-benchmark runs with -r over as many keys as libkvpool's runs use
# (without -r it hits one key, which stays in cache). In each topology the
# whole sequence (iperf3, libkvpool, iperf3, redis) runs BENCH_ROUNDS times
# and every ratio printed is the median of its per-round ratios: the load of
# a shared machine drifts between one measurement and the next.
# Everything started here (kvpool-master, one kvpool-node with a 1 GiB
# segment, iperf3 -s, redis-server per topology; the namespace and the veth
# pair) is stopped and removed at exit, also on failure. About 3 minutes.
# Env: BENCH_SECS (seconds per measurement, default 0.7), BENCH_ROUNDS
# (default 3), BENCH_SMOKE=1 (seconds: 16 objects of 1 MiB, a 128 MiB
# segment, one round, 0.05 s per measurement), BENCH_NETNS (above).
# TLS ([tls], a CA made here with openssl): in each topology, after the
# rounds above, the batch rows (1 MiB x16, 64 KiB and 4 KiB x64, one and
# four threads) on plain TCP, then on the same pool restarted with TLS, per
# round; printed as TLS/plain ratios (1 MiB target >= 0.8x) with what kTLS
# did. Next to them, the floor from the same round (b_tlsfloor: this CPU's
# AES-128-GCM encrypt/decrypt on one core and plain loopback TCP's CPU per
# byte on each end, both ends sharing the cores): the best TLS/plain ratio
# user-space TLS can reach here. BENCH_TLS=0 leaves them out.
# Exit 0 when it ran (targets missed are reported, not failures), 77 when a
# tool is missing, 1 when a measurement or a check failed.
BENCH_BUILD=${1:-} . "$(dirname "$0")/bench_lib.inc" || exit 1
e2e_init client_bench
secs=${BENCH_SECS:-$(pick 0.05 0.7)}
rounds=${BENCH_ROUNDS:-$(pick 1 3)}
nbig=$(pick 16 256)		# 1 MiB objects per footprint (b_client -n)
need "$B/kvpool-master" "$B/kvpool-node" "$B/bench/b_client" "$B/bench/b_tlsfloor" iperf3 redis-server \
	redis-benchmark redis-cli python3

# Key spaces as libkvpool's: nbig objects of 1 MiB, 4 x nbig of 64 KiB / 4 KiB.
n1m=$(pick 200 2000) n64k=$(pick 5000 100000) n4k=$(pick 20000 400000)
# iperf3 -t takes whole seconds: a smoke run moves a fixed amount instead.
iperf_len=$(pick "-n 256M" "-t 2")

# reachable ADDR PORT: something accepts there.
reachable() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }

# topology TOPO ADDR TOKEN_FILE [CLIENT_PREFIX...]: starts a pool (master
# and node on ADDR), an iperf3 server and a redis-server on ADDR, runs the
# rounds with every client command prefixed by CLIENT_PREFIX (nothing, or
# `in_netns NS`), leaves the results in $E2E_TMP/TOPO/ and stops what
# it started.
topology() {
	local topo=$1 addr=$2 token=${3:-} d=$E2E_TMP/$1 mport mhttp dport dhttp iport rport r
	shift 3
	local run=("$@") bopt=()
	mkdir -p "$d"
	read -r mport mhttp dport dhttp iport rport <<<"$(free_ports 6)"
	[ ${#run[@]} -gt 0 ] && bopt=(-T -o "client.host_id=client-bench-$topo-$$")
	{
		printf '[cluster]\nmaster = %s:%s\n' "$addr" "$mport"
		[ -n "$token" ] && echo "token_file = $token"
		printf '[master]\nlisten = %s:%s\nhttp_listen = 127.0.0.1:%s\nmetadata_server = false\n' \
			"$addr" "$mport" "$mhttp"
		printf '[log]\nlevel = warning\n'
	} >"$d/pool.ini"
	local seg=kvpt-client_bench-$$-$topo
	on_cleanup "rm -f '/dev/shm/$seg'"
	printf '[node]\nname = bench-%s\nlisten = %s:%s\nadvertise = %s:%s\nhttp_listen = 127.0.0.1:%s\nsegment = %s\nsegment_size = %s\npopulate = true\nremove_segment_on_exit = true\n' \
		"$topo" "$addr" "$dport" "$addr" "$dport" "$dhttp" "$seg" "$(pick 128M 1G)" >"$d/node.ini"
	local mpid npid
	# pool_up INI: the master and the node of INI (pool.ini, or tls.ini)
	pool_up() {
		spawn "$topo-master" "$B/kvpool-master" -c "$d/$1"
		mpid=$SPAWN_PID
		waitfor 10 reachable "$addr" "$mport" || fail "$topo: kvpool-master did not listen on $addr:$mport"
		spawn "$topo-node" "$B/kvpool-node" -c "$d/$1" -c "$d/node.ini"
		npid=$SPAWN_PID
		"${run[@]}" "$B/bench/b_client" -c "$d/$1" -w || fail "$topo: the pool did not come up"
	}
	pool_up pool.ini
	spawn "$topo-iperf-s" iperf3 -s -B "$addr" -p "$iport"
	local ipid=$SPAWN_PID
	spawn "$topo-redis" redis-server --port "$rport" --bind "$addr" --save "" --appendonly no \
		--protected-mode no --daemonize no --dir "$d"
	local rpid=$SPAWN_PID
	waitfor 10 "${run[@]}" redis-cli -h "$addr" -p "$rport" ping >/dev/null 2>&1 ||
		fail "$topo: redis-server did not answer"
	waitfor 10 reachable "$addr" "$iport" || fail "$topo: iperf3 -s did not listen"
	# kvpool's connections do not pace (tcp_congestion = auto: BBR gives
	# way to reno); iperf3, the wire reference, runs with the same
	# congestion control. redis cannot choose.
	local cc=()
	case "$(cat /proc/sys/net/ipv4/tcp_congestion_control 2>/dev/null)" in
		bbr*) cc=(-C reno) ;;
	esac
	run_iperf() {
		# shellcheck disable=SC2086
		"${run[@]}" iperf3 -c "$addr" -p "$iport" -P 4 "${cc[@]}" $iperf_len -J >"$d/iperf$1.json" \
			2>"$d/iperf.log" ||
			fail "$topo: iperf3 failed: $(tail -n 5 "$d/iperf.log" "$d/iperf$1.json")"
	}
	# rb OUT ARGS...: one redis-benchmark run, its CSV in OUT.
	rb() {
		local out=$1
		shift
		"${run[@]}" redis-cli -h "$addr" -p "$rport" flushall >/dev/null || fail "redis-cli flushall"
		"${run[@]}" redis-benchmark -h "$addr" -p "$rport" --csv "$@" >"$out" 2>"$d/rb.log" ||
			fail "$topo: redis-benchmark $*: $(tail -n 3 "$d/rb.log")"
	}
	for r in $(seq "$rounds"); do
		echo "== $topo, round $r of $rounds: iperf3 -P 4, libkvpool (${secs}s per measurement), iperf3, redis"
		run_iperf "$r-1"
		"${run[@]}" "$B/bench/b_client" -c "$d/pool.ini" -t "$secs" -n "$nbig" -p "$npid" "${bopt[@]}" \
			>"$d/kvp$r.txt" 2>"$d/b_client.log" ||
			fail "$topo: b_client failed: $(tail -n 5 "$d/b_client.log")"
		run_iperf "$r-2"
		rb "$d/redis-1m-$r.csv" -t set,get -d 1048576 -c 4 -n "$n1m" -r "$nbig"
		rb "$d/redis-64k-$r.csv" -t set,get -d 65536 -c 4 -P 64 -n "$n64k" -r $((4 * nbig))
		rb "$d/redis-4k-$r.csv" -t set,get -d 4096 -c 4 -P 64 -n "$n4k" -r $((4 * nbig))
	done
	stop_pid "$rpid"
	stop_pid "$ipid"
	# TLS against plain TCP, same pool and ports, one after the other in
	# each round: the batch rows only (tls.ini = pool.ini + [tls])
	if [ "$tls_ok" = 1 ]; then
		# (log level notice: the line that says what kTLS did)
		{ sed 's/^level = warning$/level = notice/' "$d/pool.ini"; printf '[tls]\nenabled = true\ncert = %s\nkey = %s\nca = %s\n' \
			"$pki/server.crt" "$pki/server.key" "$pki/ca.crt"; } >"$d/tls.ini"
		for r in $(seq "$rounds"); do
			echo "== $topo, round $r of $rounds: batches, plain TCP then TLS"
			[ "$r" = 1 ] || pool_up pool.ini
			"${run[@]}" "$B/bench/b_client" -c "$d/pool.ini" -t "$secs" -n "$nbig" -T -x tcp_batch_ \
				"${bopt[@]}" >"$d/plain$r.txt" 2>"$d/b_client.log" ||
				fail "$topo: b_client (plain) failed: $(tail -n 5 "$d/b_client.log")"
			stop_pid "$npid"
			stop_pid "$mpid"
			pool_up tls.ini
			"${run[@]}" "$B/bench/b_client" -c "$d/tls.ini" -t "$secs" -n "$nbig" -T -x tcp_batch_ \
				"${bopt[@]}" >"$d/tls$r.txt" 2>"$d/b_client.log" ||
				fail "$topo: b_client (TLS) failed: $(tail -n 5 "$d/b_client.log")"
			grep -h "tls: kernel TLS" "$E2E_TMP/$topo-master.log" | tail -n 1 | sed 's/.*tls: /  /' \
				>"$d/ktls.txt"
			stop_pid "$npid"
			stop_pid "$mpid"
			# the floor, measured now, under the same load
			"$B/bench/b_tlsfloor" -t "$secs" >"$d/floor$r.txt" 2>"$d/b_tlsfloor.log" ||
				fail "b_tlsfloor failed: $(tail -n 5 "$d/b_tlsfloor.log")"
		done
	else
		stop_pid "$npid"
		stop_pid "$mpid"
	fi
}

# TLS rows: a throw-away CA and server certificate (no names are checked)
pki=$E2E_TMP/pki tls_ok=0
if [ "${BENCH_TLS:-1}" != 0 ] && command -v openssl >/dev/null; then
	mkdir -p "$pki"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj "/CN=bench CA" \
		-keyout "$pki/ca.key" -out "$pki/ca.crt" 2>"$pki/log" &&
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=bench" \
		-keyout "$pki/server.key" -out "$pki/server.csr" 2>>"$pki/log" &&
	openssl x509 -req -in "$pki/server.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
		-days 2 -out "$pki/server.crt" 2>>"$pki/log" && tls_ok=1 ||
		echo "TLS rows: not run (openssl failed: $(tail -n 2 "$pki/log"))"
else
	echo "TLS rows: not run (BENCH_TLS=0 or no openssl)"
fi

topology loopback 127.0.0.1 ""

# The namespace and the veth pair, if this machine lets us make them.
netns_ok=0
if [ "${BENCH_NETNS:-auto}" != 0 ]; then
	if netns_veth 2>"$E2E_TMP/netns.err"; then
		netns_ok=1
		head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$E2E_TMP/token"
		echo >>"$E2E_TMP/token"
		chmod 600 "$E2E_TMP/token"
		topology netns "$NETNS_HOST" "$E2E_TMP/token" in_netns "$NETNS"
	elif [ "${BENCH_NETNS:-auto}" = 1 ]; then
		fail "BENCH_NETNS=1 but no namespace: $(cat "$E2E_TMP/netns.err")"
	else
		echo "netns: not run ($(cat "$E2E_TMP/netns.err")); the TCP rows are loopback only"
	fi
fi

[ $SMOKE = 1 ] && echo "SMOKE run: the numbers mean nothing"
python3 - "$E2E_TMP" "$rounds" "$netns_ok" "$tls_ok" <<'EOF' || fail "no report: a measurement is missing (above)"
import csv, json, os, statistics, sys
top, rounds, netns, tls = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
med = statistics.median
R = range(1, rounds + 1)
MiB = 1 << 20
missed = []
def need(what, v):
    # a ratio only from two measurements that happened
    if not v > 0:
        sys.exit(f"no measurement of {what} (got {v!r}): no ratio from a failed run")
    return v
def show(what, val, ref, refname, ratio, target, unit, scale):
    ok = ratio >= target
    if not ok:
        missed.append(what)
    print(f"  {what:40s} {val/scale:9.2f} {unit}  vs {refname:28s} {ref/scale:9.2f} {unit}"
          f"  = {ratio:5.2f}x (target {target}x){'' if ok else '  MISSED'}")
def report(topo):
    d = os.path.join(top, topo)
    k = {r: {} for r in R}
    for r in R:
        for line in open(os.path.join(d, f"kvp{r}.txt")):
            name, val = line.split()
            k[r][name] = float(val)
    def kv(r, name):
        if name not in k[r]:
            sys.exit(f"b_client printed no {name} in round {r} ({topo})")
        return k[r][name]
    def iperf(r, i):
        j = json.load(open(os.path.join(d, f"iperf{r}-{i}.json")))
        return need(f"iperf3 (round {r}, {topo})", j["end"]["sum_received"]["bits_per_second"] / 8)
    ip = {r: (iperf(r, 1) + iperf(r, 2)) / 2 for r in R}
    def iperf_cpu(r, i):
        # CPU seconds of both iperf3 ends per GB moved
        j = json.load(open(os.path.join(d, f"iperf{r}-{i}.json")))["end"]
        c, secs = j["cpu_utilization_percent"], j["sum_received"]["seconds"]
        return need(f"iperf3 CPU (round {r}, {topo})",
                    (c["host_total"] + c["remote_total"]) / 100 * secs / (j["sum_received"]["bytes"] / 1e9))
    def redis(f):
        out = {}
        for row in csv.reader(open(os.path.join(d, f))):
            if row and row[0] in ("SET", "GET"):
                out[row[0]] = float(row[1])
        for op in ("SET", "GET"):
            need(f"redis {op} in {f} ({topo})", out.get(op, 0))
        return out
    rd = {r: {"1m": redis(f"redis-1m-{r}.csv"), "64k": redis(f"redis-64k-{r}.csv"),
              "4k": redis(f"redis-4k-{r}.csv")} for r in R}
    def line(what, val, ref, refname, target, unit="GB/s", scale=1e9):
        # val(r), ref(r): per-round values; medians of each and of the ratios
        ratios = [need(what, val(r)) / need(refname, ref(r)) for r in R]
        show(f"{topo}: {what}" if topo != "loopback" else what, med(val(r) for r in R),
             med(ref(r) for r in R), refname, med(ratios), target, unit, scale)
    def paired(what, name, refname, target):
        # b_client measured it in alternating slices with its reference
        for r in R:
            need(what, kv(r, name)), need(refname, kv(r, name + "_ref")), need(what, kv(r, name + "_ratio"))
        show(what, med(k[r][name] for r in R), med(k[r][name + "_ref"] for r in R), refname,
             med(k[r][name + "_ratio"] for r in R), target, "GB/s", 1e9)
    print(f"== {topo}: medians of {rounds} rounds")
    paths = ("tcp",)
    if topo == "loopback":
        paths = ("local", "tcp")
        print("local path, 1 MiB (reference: single-thread memcpy, same buffers and footprint: the same")
        print("objects read or written in rotation, 1 or 16 caller buffers; interleaved slices)")
        paired("get_into 1 MiB", "local_get_into_1m", "memcpy all src -> 1 dst", 0.9)
        paired("batch_get_into 16 x 1 MiB", "local_batch_get_1m_x16", "memcpy all src -> 16 dst", 0.9)
        paired("put_from 1 MiB", "local_put_from_1m", "memcpy 1 src -> all dst", 0.8)
        paired("batch_put_from 16 x 1 MiB", "local_batch_put_1m_x16", "memcpy 16 src -> all dst", 0.8)
    where = "loopback" if topo == "loopback" else "across the veth pair"
    print(f"TCP {where}, 1 MiB, connections_per_node=4 (reference: iperf3 -P 4 over the same path, mean "
          "of the runs before and after, " + ", ".join(f"{ip[r]/1e9:.2f}" for r in R) + " GB/s)")
    for n, w, t in (("tcp_get_into_1m_1thr", "get_into, 1 thread", 0.8),
                    ("tcp_batch_get_1m_x16", "batch_get_into 16, 1 thread", 0.9),
                    ("tcp_get_into_1m_4thr", "get_into, 4 threads", 0.8),
                    ("tcp_put_from_1m_1thr", "put_from, 1 thread", 0.8),
                    ("tcp_batch_put_1m_x16", "batch_put_from 16, 1 thread", 0.8),
                    ("tcp_put_from_1m_4thr", "put_from, 4 threads", 0.8)):
        line(w, lambda r, n=n: kv(r, n), lambda r: ip[r], "iperf3 -P 4", t)
    # CPU per byte on both ends: what the load moves less than throughput
    n = "tcp_batch_get_1m_x16"
    kc = [(kv(r, n + "_cpu_client") + kv(r, n + "_cpu_node")) / (need(n, kv(r, n + "_bytes")) / 1e9) for r in R]
    ic = [(iperf_cpu(r, 1) + iperf_cpu(r, 2)) / 2 for r in R]
    print(f"  {'batch_get_into 16, CPU s per GB':40s} {med(kc):9.3f} s/GB  vs {'iperf3 -P 4, both ends':28s} "
          f"{med(ic):9.3f} s/GB  = {med(k / i for i, k in zip(ic, kc)):5.2f}x its CPU per byte "
          f"(client {med(kv(r, n + '_cpu_client') / kv(r, n + '_bytes') * 1e9 for r in R):.3f}, "
          f"node {med(kv(r, n + '_cpu_node') / kv(r, n + '_bytes') * 1e9 for r in R):.3f})")
    print(f"TCP {where}, 1 MiB (reference: redis-benchmark -d 1MiB -c 4 -r objects)")
    line("get, best of 1/4 threads, batch", lambda r: max(kv(r, "tcp_get_into_1m_4thr"), kv(r, "tcp_batch_get_1m_x16")),
         lambda r: rd[r]["1m"]["GET"] * MiB, "redis GET", 1.0)
    line("put, best of 1/4 threads, batch", lambda r: max(kv(r, "tcp_put_from_1m_4thr"), kv(r, "tcp_batch_put_1m_x16")),
         lambda r: rd[r]["1m"]["SET"] * MiB, "redis SET", 1.0)
    print("batches of 64, ops/s (reference: redis-benchmark -P 64 -c 4 -r 4 x objects, same value size)")
    for size in ("64k", "4k"):
        for path in paths:
            target = 1.5 if path == "tcp" else 1.0
            line(f"{path} batch_get {size} x64", lambda r: kv(r, f"{path}_batch_get_{size}_x64_ops"),
                 lambda r: rd[r][size]["GET"], f"redis GET -P 64 -d {size}", target, "Mops/s", 1e6)
            line(f"{path} batch_put {size} x64", lambda r: kv(r, f"{path}_batch_put_{size}_x64_ops"),
                 lambda r: rd[r][size]["SET"], f"redis SET -P 64 -d {size}", target, "Mops/s", 1e6)
    # the same batches from 4 threads: as many calls in flight as redis-benchmark -c 4 has
    # connections (the rows above are one thread against its 4)
    for size in ("64k", "4k"):
        line(f"tcp batch_get {size} x64, 4 threads", lambda r: kv(r, f"tcp_batch_get_{size}_x64_4thr_ops"),
             lambda r: rd[r][size]["GET"], f"redis GET -P 64 -d {size}", 1.5, "Mops/s", 1e6)
        line(f"tcp batch_put {size} x64, 4 threads", lambda r: kv(r, f"tcp_batch_put_{size}_x64_4thr_ops"),
             lambda r: rd[r][size]["SET"], f"redis SET -P 64 -d {size}", 1.5, "Mops/s", 1e6)
    if topo == "loopback":
        print("small local reads without the master (reference: the same calls on a handle with "
              "optimistic_reads = false, interleaved slices)")
        for n, w, u in (("local_get_4k_opt_ops", "get_into 4 KiB, 1 key per call", "Mops/s"),
                        ("local_exists_x64_opt_keys", "batch_exists 64 keys (keys/s)", "Mkeys/s")):
            for r in R:
                need(w, kv(r, n)), need(w, kv(r, n + "_ref")), need(w, kv(r, n + "_ratio"))
            show(w, med(k[r][n] for r in R), med(k[r][n + "_ref"] for r in R), "master path",
                 med(k[r][n + "_ratio"] for r in R), 5.0, u, 1e6)
        p50 = med(kv(r, "local_get_4k_opt_p50_us") for r in R)
        p50m = med(kv(r, "local_get_4k_master_p50_us") for r in R)
        ok = p50 <= 5.0
        if not ok:
            missed.append("get_into 4 KiB p50")
        print(f"  {'get_into 4 KiB p50':40s} {p50:9.2f} us     vs {'master path':28s} {p50m:9.2f} us"
              f"     (target <= 5 us){'' if ok else '  MISSED'}")
    print("checksum mismatches: " + ", ".join(
        f"{p} %d" % sum(kv(r, f"{p}_checksum_mismatches") for r in R) for p in paths))
def tls_report(topo):
    # TLS / plain TCP, the same batch calls on the same pool, per round
    d = os.path.join(top, topo)
    def load(kind, r):
        out = {}
        for line in open(os.path.join(d, f"{kind}{r}.txt")):
            name, val = line.split()
            out[name] = float(val)
        return out
    p = {r: load("plain", r) for r in R}
    t = {r: load("tls", r) for r in R}
    where = "loopback" if topo == "loopback" else "across the veth pair"
    ktls = open(os.path.join(d, "ktls.txt")).read().strip()
    print(f"TLS vs plain TCP, {where}, connections_per_node=4, one thread ({ktls})")
    f = {r: load("floor", r) for r in R}
    fm = lambda n: med(f[r][n] for r in R)
    print(f"  floor (same rounds, b_tlsfloor): AES-128-GCM {fm('aes128gcm_encrypt_gbps'):.2f} GB/s "
          f"encrypt, {fm('aes128gcm_decrypt_gbps'):.2f} GB/s decrypt per core; plain loopback TCP "
          f"{fm('tcp_loopback_gbps'):.2f} GB/s (CPU per end: send {fm('tcp_send_cpu_gbps'):.2f}, "
          f"receive {fm('tcp_recv_cpu_gbps'):.2f} GB/s); best TLS/plain on {fm('cores'):.0f} cores "
          f"= {fm('tls_floor_ratio'):.2f}x")
    for n, w, target, unit, scale in (
            ("tcp_batch_get_1m_x16", "batch_get_into 16 x 1 MiB", 0.8, "GB/s", 1e9),
            ("tcp_batch_put_1m_x16", "batch_put_from 16 x 1 MiB", 0.8, "GB/s", 1e9),
            ("tcp_batch_get_4k_x64_ops", "batch_get 4 KiB x64", 0.0, "Mops/s", 1e6),
            ("tcp_batch_put_4k_x64_ops", "batch_put 4 KiB x64", 0.0, "Mops/s", 1e6)):
        for r in R:
            if not (n in p[r] and n in t[r]):
                sys.exit(f"b_client printed no {n} in round {r} ({topo}, TLS rows)")
        ratios = [need(n, t[r][n]) / need(n, p[r][n]) for r in R]
        if target:
            show(f"{topo}: TLS {w}" if topo != "loopback" else f"TLS {w}", med(t[r][n] for r in R),
                 med(p[r][n] for r in R), "plain TCP", med(ratios), target, unit, scale)
            print(f"  {'':40s} measured {med(ratios):.2f}x, floor {fm('tls_floor_ratio'):.2f}x "
                  f"({med(ratios) / fm('tls_floor_ratio'):.0%} of the floor)")
        else:
            label = ("TLS " if topo == "loopback" else f"{topo}: TLS ") + w
            print(f"  {label:40s} {med(t[r][n] for r in R)/scale:9.2f} {unit}  vs {'plain TCP':28s} "
                  f"{med(p[r][n] for r in R)/scale:9.2f} {unit}  = {med(ratios):5.2f}x (no target)")
report("loopback")
if tls:
    tls_report("loopback")
if netns:
    report("netns")
    if tls:
        tls_report("netns")
print(f"targets missed: {len(missed)}" + (" (" + ", ".join(missed) + ")" if missed else ""))
EOF
