#!/bin/bash
# ha_failover.sh — master high availability on a one-member etcd (docs/ha.md):
#  1. two masters elect one leader and publish it; nodes and clients follow
#     etcd://; kvpool info names the leader; /health and /metrics say leader
#     or standby and the epoch; the standby refuses clients (KVP_ENOTLEADER);
#  2. kill -9 of the leader under load (kvp-ha-probe putting, the soak
#     driver racing): the standby leads with a higher epoch, puts succeed
#     again, the nodes re-mount and the earlier objects are still there;
#  3. SIGSTOP of the leader past its lease, then SIGCONT: the other master
#     took over; the resumed one steps down and serves nothing;
#  4. SIGTERM of the leader: the standby takes over at once (lease revoked);
#  5. at the end: no completed put lost, no wrong byte, every daemon exits 0.
# Exit 0 pass, 1 fail, 77 without etcd (apt-get install etcd-server).
. "$(dirname "$0")/lib.sh"
e2e_init ha
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" "$B/soak/kvp-ha-probe" \
	"$B/soak/kvp-soak-driver" curl python3
start_etcd 1
ok "etcd on $ETCD_EPS"

POOL_INI=$E2E_TMP/pool.ini
cat >"$POOL_INI" <<EOF
[cluster]
master = $ETCD_URL
[master]
ha = etcd
ha_endpoints = $ETCD_EPS
cluster_id = e2e-ha-$$
ha_lease_ttl = 2s
[node]
heartbeat_interval = 500ms
segment_size = 128M
[client]
timeout = 5s
[log]
level = info
EOF

# master NAME: its layer (listen ports) and a start; M_PID[NAME], M_HTTP[NAME].
declare -A M_PID M_HTTP M_RPC
master_layer() {
	local p h
	read -r p h <<<"$(free_ports 2)"
	M_RPC[$1]=127.0.0.1:$p
	M_HTTP[$1]=$h
	printf '[master]\nlisten = 127.0.0.1:%s\nhttp_listen = 127.0.0.1:%s\n' "$p" "$h" >"$E2E_TMP/$1.ini"
}
run_m() {
	spawn "$1" "$B/kvpool-master" -c "$POOL_INI" -c "$E2E_TMP/$1.ini"
	M_PID[$1]=$SPAWN_PID
	wait_port "${M_RPC[$1]#*:}" 10 || fail "master $1 did not listen"
}
health() { curl -sf -m 2 "http://127.0.0.1:${M_HTTP[$1]}/health" 2>/dev/null; }
is_leader() { curl -sf -m 2 -o /dev/null "http://127.0.0.1:${M_HTTP[$1]}/health/leader"; }
mval() { curl -sf -m 2 "http://127.0.0.1:${M_HTTP[$1]}/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }
leader() { local m; for m in A B; do is_leader "$m" && { echo "$m"; return 0; }; done; return 1; }
other() { [ "$1" = A ] && echo B || echo A; }

master_layer A
master_layer B
run_m A
run_m B
waitfor 10 leader >/dev/null || fail "no leader elected"
L=$(leader)
S=$(other "$L")
health "$L" | grep -qx "role leader" || fail "/health of the leader: $(health "$L")"
health "$S" | grep -qx "role standby" || fail "/health of the standby: $(health "$S")"
e1=$(mval "$L" kvpool_master_ha_epoch)
[ "$e1" -gt 0 ] && [ "$(mval "$S" kvpool_master_ha_epoch)" = "$e1" ] || fail "epochs differ"
[ "$(mval "$L" kvpool_master_ha_leader)" = 1 ] && [ "$(mval "$S" kvpool_master_ha_leader)" = 0 ] ||
	fail "kvpool_master_ha_leader"
ok "master $L leads (epoch $e1), $S stands by"

pool_node n1
pool_node n2
run_node n1
run_node n2
wait_nodes "n1 n2" 30 || fail "the nodes did not mount at the leader"
head -c 100000 /dev/urandom >"$E2E_TMP/v1"
expect 0 kv put ha/first "$E2E_TMP/v1"
expect 0 kv get ha/first "$E2E_TMP/v1.back"
cmp -s "$E2E_TMP/v1" "$E2E_TMP/v1.back" || fail "ha/first read back differs"
expect 0 kv info
grep -q "^master: .*${M_RPC[$L]} (leader .*epoch $e1, elected through etcd)" "$E2E_TMP/out" ||
	fail "kvpool info does not name the leader: $(head -1 "$E2E_TMP/out")"
# a client pointed at the standby itself is refused, with a retryable code
expect 1 "$B/kvpool" -c "$POOL_INI" -o "cluster.master=${M_RPC[$S]}" -o client.timeout=1s get ha/first "$E2E_TMP/x"
grep -qi "leader" "$E2E_TMP/err" || fail "the standby's refusal: $(cat "$E2E_TMP/err")"
ok "nodes and clients follow etcd://; kvpool info names the leader; the standby refuses"

# ---- load for the rest: the probe puts fresh keys, the driver races ----
spawn probe "$B/soak/kvp-ha-probe" -c "$POOL_INI" --prefix "ha/probe" --interval-ms 10 \
	--size 4096 --read-ms 50 --json "$E2E_TMP/probe.json"
PROBE=$SPAWN_PID
spawn driver "$B/soak/kvp-soak-driver" -c "$POOL_INI" --clients 3 --seconds 600 --keys 128 \
	--size 1K-64K --prefix "ha/drv/" --json "$E2E_TMP/driver.json"
DRIVER=$SPAWN_PID
sleep 2

# ---- kill -9 of the leader ----
t0=$(date +%s%N)
stop_pid "${M_PID[$L]}" KILL
kill -USR1 "$PROBE"	# the fault happened: the probe times from here
waitfor 15 is_leader "$S" || fail "$S did not take over after kill -9 of $L"
ms=$((($(date +%s%N) - t0) / 1000000))
e2=$(mval "$S" kvpool_master_ha_epoch)
[ "$e2" -gt "$e1" ] || fail "epoch did not grow: $e1 -> $e2"
wait_nodes "n1 n2" 30 || fail "the nodes did not re-mount at the new leader"
expect 0 kv get ha/first "$E2E_TMP/v1.back"
cmp -s "$E2E_TMP/v1" "$E2E_TMP/v1.back" || fail "ha/first differs after the failover"
ok "kill -9 $L: $S leads after ${ms} ms (epoch $e2), nodes re-mounted, data still there"
run_m "$L"
waitfor 10 sh -c "curl -sf 'http://127.0.0.1:${M_HTTP[$L]}/health' | grep -qx 'role standby'" ||
	fail "restarted $L is not standing by"
L=$S
S=$(other "$L")
sleep 2

# ---- SIGSTOP past the lease, then SIGCONT: the resumed master steps down ----
kill -STOP "${M_PID[$L]}"
kill -USR1 "$PROBE"
waitfor 15 is_leader "$S" || { kill -CONT "${M_PID[$L]}"; fail "$S did not take over from the stopped $L"; }
e3=$(mval "$S" kvpool_master_ha_epoch)
sleep 1
kill -CONT "${M_PID[$L]}"
waitfor 5 sh -c "curl -sf 'http://127.0.0.1:${M_HTTP[$L]}/health' | grep -qx 'role standby'" ||
	fail "$L still leads after SIGCONT: $(health "$L")"
[ "$(mval "$L" kvpool_master_ha_stepdowns_total)" -ge 1 ] || fail "$L did not count a step-down"
grep -q "stepping down\|lost the lead" "$E2E_TMP/$L.log" || fail "$L did not log its step-down"
is_leader "$L" && fail "two leaders"
[ "$e3" -gt "$e2" ] || fail "epoch did not grow: $e2 -> $e3"
ok "SIGSTOP $L past its lease: $S leads (epoch $e3); after SIGCONT $L steps down"
L=$S
S=$(other "$L")
wait_nodes "n1 n2" 30 || fail "the nodes did not follow"
sleep 2

# ---- SIGTERM: a planned handover is immediate ----
t0=$(date +%s%N)
kill -TERM "${M_PID[$L]}"
kill -USR1 "$PROBE"
wait "${M_PID[$L]}" || fail "master $L exited $? on SIGTERM"
forget "${M_PID[$L]}"
waitfor 10 is_leader "$S" || fail "$S did not take over after SIGTERM of $L"
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$ms" -lt 2000 ] || echo "note: handover after SIGTERM took ${ms} ms (the lease is 2 s)"
ok "SIGTERM $L: $S leads after ${ms} ms"
run_m "$L"
wait_nodes "n1 n2" 30 || fail "the nodes did not follow"
sleep 2

# ---- verdict ----
stop_pid "$DRIVER" TERM
drc=$?
stop_pid "$PROBE" TERM
prc=$?
cat "$E2E_TMP/probe.json"
pyjson "$E2E_TMP/probe.json" 'r["completed"] > 100 and r["lost"] == 0 and r["wrong"] == 0' ||
	fail "the probe lost or got wrong puts (exit $prc)"
pyjson "$E2E_TMP/probe.json" 'len(r["faults"]) == 3 and all(f["first_put_ms"] >= 0 for f in r["faults"])' ||
	fail "a fault without a successful put after it"
pyjson "$E2E_TMP/driver.json" 'r["wrong_bytes"] == 0 and r["wrong_meta"] == 0' ||
	fail "the soak driver saw wrong bytes (exit $drc)"
echo "kill -9, SIGSTOP, SIGTERM: first put after (ms): $(jval "$E2E_TMP/probe.json" '" ".join(str(f["first_put_ms"]) for f in r["faults"])'), longest gap (ms): $(jval "$E2E_TMP/probe.json" '" ".join(str(f["gap_ms"]) for f in r["faults"])')"
ok "no completed put lost, no wrong byte"
for m in A B; do stop_pid "${M_PID[$m]}" TERM || fail "master $m exited $?"; done
ok "masters exit 0"
