#!/bin/bash
# startup.sh — a node's start and restart with real daemons:
#  - a fresh segment is not scanned (nothing read), and a 16 GiB one with
#    reserve = none holds only its header and commit map once ready;
#  - kill -9 of the node and of a local writer while puts stream in, then a
#    restart whose scan is held past the master link's idle limit
#    (KVP_TEST_SCAN_DELAY_MS): the link survives (keepalive heartbeats,
#    one connection), the scan reads the commit map, every extent it
#    reports verifies (kvpool scan exits 0), every value the pool lists
#    reads back right (kvpool bench --existing verifies each);
#  - a node with remove_segment_on_exit killed -9 leaves an orphan that
#    kvpool scan lists as such and the next node on the host removes.
# Exit 0 pass, 1 fail, 77 skip.
# run.sh: alone — it checks that its killed node's orphaned segment survives
# until its next node removes it: any node another test starts would remove it.
. "$(dirname "$0")/lib.sh"
e2e_init startup
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" python3 curl

pool_ini "client_ttl = 3s" "[client]" "timeout = 10s" "replicas = 1" "[log]" "level = info"
pool_node n1 "segment_size = 512M" "heartbeat_interval = 300ms"
seg1=$NODE_SEG http1=$NODE_HTTP_PORT
run_master
run_node n1
n1=$NODE_PID
wait_nodes n1 20 || fail "n1 did not mount"
grep -q "created empty: nothing to scan" "$E2E_TMP/n1.log" || fail "a fresh segment was scanned"
ok "fresh segment: mounted without a scan"

# ---- kill -9 of the node and of a writer while puts stream in ----
prefix=startup/k/
spawn writer "$B/kvpool" -c "$POOL_INI" bench --op put --size 64K-512K --count 100000 \
	--threads 2 --prefix "$prefix" --keep --path local
writer=$SPAWN_PID
listed_at_least() { [ "$(kv ls --limit "$1" "$prefix" 2>/dev/null | wc -l)" -ge "$1" ]; }
waitfor 30 listed_at_least 200 || fail "the writer did not get going"
kill -KILL "$n1"
sleep 0.3	# the writer keeps writing into the dead node's segment
kill -KILL "$writer"
wait "$n1" "$writer" 2>/dev/null
forget "$n1"
forget "$writer"
ok "node and writer killed with puts in flight"

# ---- restart: the scan is held past the link's idle limit (5 s) ----
KVP_TEST_SCAN_DELAY_MS=6500 run_node n1
n1=$NODE_PID
readies() { [ "$(grep -c "notice: ready" "$E2E_TMP/$1.log")" -ge "$2" ]; }
waitfor 40 readies n1 2 || fail "n1 not ready after its restart"
wait_nodes n1 20 || fail "n1 did not come back"
grep -q "idle for" "$E2E_TMP/n1.log" && fail "the master link was closed as idle during the scan"
conns=$(curl -s "http://127.0.0.1:$http1/metrics" | sed -n 's/^kvpool_node_master_connects_total //p')
[ "$conns" = 1 ] || fail "the link was re-made during the scan ($conns connections)"
grep -Eq "scanned /dev/shm/$seg1: [0-9]+ extents, .* KiB of commit map read" "$E2E_TMP/n1.log" ||
	fail "the restart did not scan the commit map: $(grep scanned "$E2E_TMP/n1.log")"
reported=$(sed -n "s|.*scanned /dev/shm/$seg1: \([0-9]*\) extents.*|\1|p" "$E2E_TMP/n1.log" | tail -1)
ok "restart: link kept through a 6.5 s scan (one connection), $reported extents from the map"

expect 0 kv scan "$seg1"
listed=$(grep -vc '^#' "$E2E_TMP/out")
[ "$listed" -ge "$reported" ] || fail "kvpool scan lists $listed, the node reported $reported"
grep -q " BAD " "$E2E_TMP/out" && fail "a torn extent is committed: $(grep ' BAD ' "$E2E_TMP/out" | head -3)"
n=$(kv ls --limit 100000 "$prefix" | wc -l)
[ "$n" -gt 0 ] || fail "nothing survived the restart"
# every value the pool lists reads back as written (verified per key)
expect 0 kv bench --op get --existing --size 64K-512K --count "$n" --prefix "$prefix" \
	--path local --json
python3 - "$E2E_TMP/out" "$n" <<'EOF' || fail "values after the restart: $(cat "$E2E_TMP/out")"
import json, sys
r = json.load(open(sys.argv[1]))
sys.exit(0 if r["errors"] == 0 and r["mismatches"] == 0 and r["ok"] > 0 else 1)
EOF
ok "every committed extent verifies ($listed); $n listed values read back right"

# ---- an orphan: a node that removes its segment on exit, killed -9 ----
pool_node n3 "segment_size = 64M" "remove_segment_on_exit = true"
seg3=$NODE_SEG
run_node n3
n3=$NODE_PID
wait_nodes "n1 n3" 20 || fail "n3 did not mount"
kill -KILL "$n3"
wait "$n3" 2>/dev/null
forget "$n3"
[ -f "/dev/shm/$seg3" ] || fail "the killed node's segment is already gone"
expect 0 kv scan
grep -Eq "^orphan .* kvpool-node pid $n3 \(removes it on exit\), orphan  /dev/shm/$seg3$" \
	"$E2E_TMP/out" || fail "kvpool scan does not show the orphan: $(cat "$E2E_TMP/out")"
ok "kill -9 of an ephemeral node: kvpool scan lists its segment as an orphan"

# ---- the next node on the host removes it; a fresh 16 GiB segment ----
pool_node n2 "segment_size = 16G" "reserve = none"
seg2=$NODE_SEG
run_node n2
waitfor 20 grep -q "notice: ready" "$E2E_TMP/n2.log" || fail "n2 not ready"
[ -f "/dev/shm/$seg3" ] && fail "the orphan survived the next node's start"
grep -q "removed orphaned segment /dev/shm/$seg3" "$E2E_TMP/n2.log" || fail "removal not logged"
held=$(stat -c %b "/dev/shm/$seg2")
held=$((held * 512))
[ "$held" -le $((5 << 20)) ] || fail "a fresh 16 GiB segment holds $held bytes once ready"
ok "the next node removed the orphan; fresh 16 GiB segment holds $((held >> 10)) KiB when ready"
