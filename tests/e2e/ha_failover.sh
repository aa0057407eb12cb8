#!/bin/bash
# ha_failover.sh — master high availability on a one-member etcd (docs/ha.md):
#  1. two masters elect one leader and publish it; nodes and clients follow
#     etcd:// (the CLI, the Python module's master_server_addr, the FUSE
#     view); kvpool
#     info names the leader; /health and /metrics say leader
#     or standby and the epoch; the standby refuses clients (KVP_ENOTLEADER);
#  2. kill -9 of the leader under load (kvp-ha-probe putting, the soak
#     driver racing): the standby leads with a higher epoch, puts succeed
#     again, the nodes re-mount and the earlier objects are still there;
#  3. SIGSTOP of the leader past its lease, then SIGCONT: the other master
#     took over; the resumed one steps down and serves nothing;
#  4. SIGTERM of the leader: the standby takes over at once (lease revoked);
#  5. at the end: no completed put lost, no wrong byte, every daemon exits 0;
#     the HA_FULL (10,000) objects put before the faults (the standby
#     follows them, and takes them over warm after the kill -9) all read
#     back byte for byte.
# Exit 0 pass, 1 fail, 77 without etcd (apt-get install etcd-server).
. "$(dirname "$0")/lib.sh"
e2e_init ha
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" "$B/soak/kvp-ha-probe" \
	"$B/soak/kvp-soak-driver" curl python3
start_etcd 1
ok "etcd on $ETCD_EPS"

ha_pool_ini
ha_master A
ha_master B
waitfor 10 ha_leader >/dev/null || fail "no leader elected"
L=$(ha_leader)
S=$(ha_other "$L")
ha_health "$L" | grep -q '"role":"leader","ha_state":"serving"' || fail "/health of the leader: $(ha_health "$L")"
ha_health "$L" | grep -Eq '"epoch":[1-9][0-9]*,"last_election":"20[0-9-]{8}T[0-9:]{8}Z","etcd":"up"' ||
	fail "/health's epoch, last election and etcd: $(ha_health "$L")"
ha_standby "$S" || fail "/health of the standby: $(ha_health "$S")"
e1=$(ha_metric "$L" kvpool_master_ha_epoch)
[ "$e1" -gt 0 ] && [ "$(ha_metric "$S" kvpool_master_ha_epoch)" = "$e1" ] || fail "epochs differ"
[ "$(ha_metric "$L" kvpool_master_ha_leader)" = 1 ] && [ "$(ha_metric "$S" kvpool_master_ha_leader)" = 0 ] ||
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
grep -q "^master: .*${HA_RPC[$L]} (leader .*epoch $e1, elected through etcd)" "$E2E_TMP/out" ||
	fail "kvpool info does not name the leader: $(head -1 "$E2E_TMP/out")"
# a client pointed at the standby itself is refused, with a retryable code
expect 1 "$B/kvpool" -c "$POOL_INI" -o "cluster.master=${HA_RPC[$S]}" -o client.timeout=1s get ha/first "$E2E_TMP/x"
grep -qi "leader" "$E2E_TMP/err" || fail "the standby's refusal: $(cat "$E2E_TMP/err")"
ok "nodes and clients follow etcd://; kvpool info names the leader; the standby refuses"

# The Python module with Mooncake's master_server_addr = etcd://... (in a
# subshell: without Python headers only this step skips).
(
	py_build
	PYTHONPATH="$B/python" "${PY_RUN[@]}" python3 - "$ETCD_URL" "$POOL_INI" <<'PY'
import sys
import kvpool
s = kvpool.DistributedStore()
rc = s.setup({"master_server_addr": sys.argv[1], "protocol": "tcp", "config_file": sys.argv[2],
              "local_hostname": "localhost", "log.level": "warning"})
assert rc == 0, (rc, s.last_error())
v = bytes(range(256)) * 257
assert s.put("ha/py", v) == 0, "put"
assert s.get("ha/py") == v, "get differs"
s.close()
PY
) >"$E2E_TMP/py.out" 2>&1
case $? in
0) ok "Python: master_server_addr=etcd://... puts and gets" ;;
77) echo "# Python step skipped: $(tail -n 1 "$E2E_TMP/py.out")" ;;
*) fail "Python with master_server_addr=etcd://: $(tail -n 20 "$E2E_TMP/py.out")" ;;
esac

# The FUSE view (`kvpool mount`, cluster.master = etcd://) where /dev/fuse
# is: it reads a value now and, after the failover below, one put then.
MNT=
if [ -c /dev/fuse ] && command -v fusermount3 >/dev/null; then
	MNT=$E2E_TMP/view
	mkdir -p "$MNT"
	on_cleanup "fuse_unmount '$MNT'"
	spawn view "$B/kvpool" -c "$POOL_INI" mount -f "$MNT"
	waitfor 10 grep -q " $MNT fuse.kvpool " /proc/mounts || fail "the FUSE view did not mount"
	cmp -s "$E2E_TMP/v1" "$MNT/ha/first" || fail "ha/first through the FUSE view differs"
	ok "the FUSE view reads through etcd://"
else
	echo "# FUSE step skipped: no /dev/fuse or fusermount3"
fi

# ---- a table with some weight: the standby follows it (docs/ha.md "Warm standby") ----
FULL=${HA_FULL:-10000}
expect 0 kv bench --op put --count "$FULL" --size 1K --batch 64 --prefix ha/full/ --keep
waitfor 20 grep -q "following the leader: in step" "$E2E_TMP/$S.log" || fail "the standby does not follow"
ok "$FULL objects put; the standby follows the table"

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
stop_pid "${HA_PID[$L]}" KILL
kill -USR1 "$PROBE"	# the fault happened: the probe times from here
waitfor 15 ha_is_leader "$S" || fail "$S did not take over after kill -9 of $L"
ms=$((($(date +%s%N) - t0) / 1000000))
e2=$(ha_metric "$S" kvpool_master_ha_epoch)
[ "$e2" -gt "$e1" ] || fail "epoch did not grow: $e1 -> $e2"
wait_nodes "n1 n2" 30 || fail "the nodes did not re-mount at the new leader"
expect 0 kv get ha/first "$E2E_TMP/v1.back"
cmp -s "$E2E_TMP/v1" "$E2E_TMP/v1.back" || fail "ha/first differs after the failover"
if [ -n "$MNT" ]; then
	head -c 70000 /dev/urandom >"$E2E_TMP/v2"
	expect 0 kv put ha/after "$E2E_TMP/v2"
	cmp -s "$E2E_TMP/v2" "$MNT/ha/after" || fail "the FUSE view does not follow the new leader"
fi
grep -q "took over a warm table" "$E2E_TMP/$S.log" || fail "$S did not take the table over warm"
ok "kill -9 $L: $S leads after ${ms} ms (epoch $e2), nodes re-mounted, data still there${MNT:+, the FUSE view follows}"
ha_run "$L"
waitfor 10 ha_standby "$L" || fail "restarted $L is not standing by"
L=$S
S=$(ha_other "$L")
sleep 2

# ---- SIGSTOP past the lease, then SIGCONT: the resumed master steps down ----
kill -STOP "${HA_PID[$L]}"
kill -USR1 "$PROBE"
waitfor 15 ha_is_leader "$S" || { kill -CONT "${HA_PID[$L]}"; fail "$S did not take over from the stopped $L"; }
e3=$(ha_metric "$S" kvpool_master_ha_epoch)
sleep 1
kill -CONT "${HA_PID[$L]}"
waitfor 5 ha_standby "$L" || fail "$L still leads after SIGCONT: $(ha_health "$L")"
[ "$(ha_metric "$L" kvpool_master_ha_stepdowns_total)" -ge 1 ] || fail "$L did not count a step-down"
grep -q "stepping down\|lost the lead" "$E2E_TMP/$L.log" || fail "$L did not log its step-down"
ha_is_leader "$L" && fail "two leaders"
[ "$e3" -gt "$e2" ] || fail "epoch did not grow: $e2 -> $e3"
ok "SIGSTOP $L past its lease: $S leads (epoch $e3); after SIGCONT $L steps down"
L=$S
S=$(ha_other "$L")
wait_nodes "n1 n2" 30 || fail "the nodes did not follow"
sleep 2

# ---- SIGTERM: a planned handover is immediate ----
t0=$(date +%s%N)
kill -TERM "${HA_PID[$L]}"
kill -USR1 "$PROBE"
wait "${HA_PID[$L]}" || fail "master $L exited $? on SIGTERM"
forget "${HA_PID[$L]}"
waitfor 10 ha_is_leader "$S" || fail "$S did not take over after SIGTERM of $L"
ms=$((($(date +%s%N) - t0) / 1000000))
[ "$ms" -lt 2000 ] || echo "note: handover after SIGTERM took ${ms} ms (the lease is 2 s)"
ok "SIGTERM $L: $S leads after ${ms} ms"
ha_run "$L"
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
# the table put before the faults, after three failovers: every object, byte for byte
expect 0 kv bench --op get --existing --count "$FULL" --size 1K --batch 64 --prefix ha/full/ --keep
grep -q "0 missing, 0 errors, 0 wrong values" "$E2E_TMP/out" || fail "the table put before the faults: $(grep verified "$E2E_TMP/out")"
ok "no completed put lost, no wrong byte"
for m in A B; do stop_pid "${HA_PID[$m]}" TERM || fail "master $m exited $?"; done
ok "masters exit 0"
