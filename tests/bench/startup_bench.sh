#!/bin/bash
# tests/bench/startup_bench.sh [BUILD] — how long a node takes from exec to
# ready (mounted at the master, every REPORT answered: "ready" in its log),
# and the embedded store's setup():
#   fresh segments of 1, 8 and 64 GiB (64 GiB sparse, reserve = none: it
#     does not fit this VM's /dev/shm; the others reserve in the background
#     after ready, the default)                          goal: 64 GiB < 1 s
#   restart of a segment holding 10k and 100k objects (1000-byte values,
#     written as local clients write them), plus the scan alone
#     (b_startup scan) and, for the 1 GiB segment, what a format 1
#     page-by-page scan of the same empty file costs       goal: 100k < 2 s
#   setup(global_segment_size = 0.1, 1, 3.2 GB) in a fresh interpreter
#                                                      goal: 3.2 GB < 0.5 s
# and prints ms per GiB and per object. Starts its own kvpool-master and
# nodes on free loopback ports; every segment goes at exit.
# Exit 0 when it ran (a missed goal is reported, not a failure), 77 when a
# tool or the Python module is missing, 1 when a measurement failed.
# Env: BENCH_SMOKE=1 (seconds: 1 GiB fresh, 1000 objects, 0.1 GB setup).
BENCH_BUILD=${1:-} . "$(dirname "$0")/bench_lib.inc" || exit 1
e2e_init startup_bench
need "$B/kvpool-master" "$B/kvpool-node" "$B/bench/b_startup" python3
fresh_sizes=$(pick "1" "1 8 64")
restart_counts=$(pick "1000" "10000 100000")
setup_sizes=$(pick "0.1" "0.1 1 3.2")
[ $SMOKE = 1 ] && echo "SMOKE run: the numbers mean nothing"

pool_ini "client_ttl = 30s" "[client]" "timeout = 30s" "[log]" "level = info"
run_master

# ready_ms NAME: starts node NAME (its INI from pool_node), prints the ms
# from exec to its "ready" line, stops it (SIGTERM) and waits for it.
ready_ms() {
	python3 - "$B/kvpool-node" "$POOL_INI" "$E2E_TMP/$1.ini" "$E2E_TMP/$1.log" <<'EOF'
import subprocess, sys, time
node, pool, ini, log = sys.argv[1:5]
out = open(log, "ab")
t0 = time.monotonic()
p = subprocess.Popen([node, "-c", pool, "-c", ini], stdout=out, stderr=subprocess.STDOUT)
ms = None
with open(log, "rb") as f:
    while time.monotonic() - t0 < 120 and p.poll() is None:
        if b"notice: ready" in f.read():
            ms = (time.monotonic() - t0) * 1000
            break
        f.seek(0)
        time.sleep(0.002)
p.terminate()
p.wait(timeout=30)
if ms is None:
    sys.exit("node did not get ready: see " + log)
print("%.1f" % ms)
EOF
}

per() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }
us_per() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a * 1000 / b }'; }
goal() { awk -v v="$1" -v g="$2" 'BEGIN { print (v < g ? "met" : "MISSED") }'; }

echo "== fresh segment, exec to ready"
for g in $fresh_sizes; do
	reserve=background
	[ "$g" -gt 16 ] && reserve=none	# sparse: larger than this VM's /dev/shm
	pool_node "f$g" "segment_size = ${g}G" "reserve = $reserve" "remove_segment_on_exit = true"
	ms=$(ready_ms "f$g") || fail "fresh ${g} GiB: $ms"
	positive "fresh $g GiB" "$ms"
	printf "fresh %3s GiB (reserve = %-10s): ready in %8.1f ms = %7s ms/GiB\n" "$g" \
		"$reserve" "$ms" "$(per "$ms" "$g")"
	[ "$g" = 64 ] && echo "   goal < 1000 ms: $(goal "$ms" 1000)"
done
# What format 1 cost: the same empty file probed page by page.
v1=$(pick 64M 1G)
pool_node v1 "segment_size = $v1" "remove_segment_on_exit = true"
"$B/bench/b_startup" fill "$NODE_SEG" "$v1" 0 >/dev/null || fail "b_startup fill"
"$B/bench/b_startup" scan "$NODE_SEG" --pages >"$E2E_TMP/v1.out" || fail "b_startup scan"
map=$(awk '/^map-scan/ { print $4 }' "$E2E_TMP/v1.out")
pages=$(awk '/^page-scan/ { print $4 }' "$E2E_TMP/v1.out")
printf "empty %s, scan of the commit map: %.2f ms; format 1 page-by-page scan: %.0f ms\n" \
	"$v1" "$map" "$pages"
positive "the page-by-page scan" "$pages"

echo "== restart of a segment holding N objects (1000-byte values), exec to ready"
for n in $restart_counts; do
	size=$(( (n * 4096 / 1048576 + 64) ))M
	pool_node "r$n" "segment_size = $size" "remove_segment_on_exit = true"
	"$B/bench/b_startup" fill "$NODE_SEG" "$size" "$n" 1000 >"$E2E_TMP/fill.out" ||
		fail "b_startup fill: $(cat "$E2E_TMP/fill.out")"
	"$B/bench/b_startup" scan "$NODE_SEG" >"$E2E_TMP/scan.out" || fail "b_startup scan"
	[ "$(awk '/^map-scan/ { print $2 }' "$E2E_TMP/scan.out")" = "$n" ] ||
		fail "the scan found $(cat "$E2E_TMP/scan.out"), $n written"
	scan_ms=$(awk '/^map-scan/ { print $4 }' "$E2E_TMP/scan.out")
	ms=$(ready_ms "r$n") || fail "restart $n: $ms"
	positive "restart with $n objects" "$ms"
	grep -Eq "scanned /dev/shm/$NODE_SEG: $n extents" "$E2E_TMP/r$n.log" ||
		fail "the node did not report $n extents: $(grep scanned "$E2E_TMP/r$n.log")"
	printf "restart %6s objects (%5s): ready in %8.1f ms = %6s us/object (scan alone %6.1f ms = %s us/object)\n" \
		"$n" "$size" "$ms" "$(us_per "$ms" "$n")" "$scan_ms" "$(us_per "$scan_ms" "$n")"
	[ "$n" = 100000 ] && echo "   goal < 2000 ms: $(goal "$ms" 2000)"
done

echo "== embedded store: setup(global_segment_size) in a fresh interpreter"
py_build python3
for gb in $setup_sizes; do
	out=$(PYTHONPATH="$B/python" "${PY_RUN[@]}" python3 - "$MASTER_ADDR" "$POOL_INI" "$gb" <<'EOF'
import os, sys, time
import kvpool
master, ini, gb = sys.argv[1], sys.argv[2], float(sys.argv[3])
s = kvpool.DistributedStore()
t0 = time.monotonic()
rc = s.setup({"master_server_addr": master, "config_file": ini, "protocol": "tcp",
              "local_hostname": "localhost", "global_segment_size": int(gb * 1e9),
              "log.level": "warning"})
ms = (time.monotonic() - t0) * 1000
if rc != 0:
    sys.exit("setup: %d %s" % (rc, s.last_error()))
held = os.stat("/dev/shm/" + s.segment_name()).st_blocks * 512
s.close()
print("%.1f %d" % (ms, held))
EOF
	) || fail "setup $gb GB: $out"
	read -r ms held <<<"$out"
	positive "setup $gb GB" "$ms"
	printf "setup %4s GB: %7.1f ms = %7s ms/GiB; the segment holds %s KiB after setup\n" \
		"$gb" "$ms" "$(per "$ms" "$(awk -v g="$gb" 'BEGIN { print g * 1e9 / 1073741824 }')")" \
		"$((held >> 10))"
	[ "$gb" = 3.2 ] && echo "   goal < 500 ms: $(goal "$ms" 500)"
done
exit 0
