#!/bin/bash
# lone_restart.sh — a lone master's table file (docs/ha.md "Lone restart"):
# one master (ha = none, master.table_file set), one node, LONE_OBJECTS
# (20,000) objects of 1 KiB.
#  1. kill -9 of the master after puts and removes, a remove and a put in
#     its last moments: the restarted master logs that it loaded the table
#     warm; the node's re-mount reconciles it; every key reads back byte for
#     byte, removed keys stay gone, the late put is there (in the file or
#     adopted from the REPORTs), `kvpool info` counts exactly the keys;
#  2. a stale file (a copy from before more puts and removes): loaded, and
#     the reconciliation settles it: the new keys are adopted, the removed
#     ones dropped as ghosts, the count exact;
#  3. a corrupt file and a foreign one (another cluster_id): refused with a
#     log line; the table is rebuilt from the reports, nothing lost;
#  4. table_file unset with STATE_DIRECTORY set (a unit's StateDirectory=):
#     the table goes to STATE_DIRECTORY/master.table and a restart loads it
#     warm; table_file = none turns it off there.
. "$(dirname "$0")/lib.sh"
e2e_init lone
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" curl python3
N=${LONE_OBJECTS:-20000}
TAB=$E2E_TMP/master.table
pool_ini "table_file = $TAB" "[node]" "heartbeat_interval = 500ms" "[client]" "timeout = 5s" \
	"[log]" "level = info"
pool_node n1
run_master
run_node n1
wait_nodes "n1" 30 || fail "the node did not mount"
mlog=$E2E_TMP/master.log

keys() {
	expect 0 kv info --json
	jval "$E2E_TMP/out" 'r["keys"]'
}
# restart_master: kill -9 (unless stopped already), started again on its
# ports (it listens before it loads its file: wait for the log's word)
restart_master() {
	alive "$MASTER_PID" && stop_pid "$MASTER_PID" KILL
	cat "$mlog" >>"$E2E_TMP/master-before.log"
	: >"$mlog"
	run_master
}
# settled WANT: the node re-mounted and reported; kvpool info counts WANT
settled() {
	waitfor 30 grep -q "segment [0-9]* mounted\|re-mounted into the warm table" \
		"$mlog" || fail "the node's reports did not arrive: $(tail -5 "$mlog")"
	waitfor 10 sh -c "[ \"\$('$B/kvpool' -c '$POOL_INI' info --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"keys\"])')\" = $1 ]" ||
		fail "kvpool info counts $(keys) keys, expected $1 (ghosts or losses)"
}
readback() {
	expect 0 kv bench --op get --existing --count "$N" --size 1K --batch 64 --prefix s/ --keep
}

# ---- 1. kill -9, restart, warm ----
expect 0 kv bench --op put --count "$N" --size 1K --batch 64 --prefix s/ --keep
head -c 5000 /dev/urandom >"$E2E_TMP/v1"
for k in r/1 r/2 r/3 r/4 r/5; do expect 0 kv put $k "$E2E_TMP/v1"; done
expect 0 kv rm r/1
expect 0 kv rm r/2
waitfor 10 test -s "$TAB" || fail "no table file: $(grep 'table file' "$mlog")"
sleep 0.3	# a few ticks: what came before is in the file
expect 0 kv rm r/3
expect 0 kv put late "$E2E_TMP/v1"
restart_master
waitfor 10 grep -q "table file $TAB: loaded warm: [0-9]* keys" "$mlog" ||
	fail "not loaded warm: $(grep 'table file' "$mlog")"
grep -q "took over a warm table" "$mlog" || fail "no warm takeover"
ok "restart after kill -9: $(grep -o 'loaded warm: [0-9]* keys in [0-9]* ms' "$mlog")"
expect 0 kv get s/00000123 "$E2E_TMP/g"
settled $((N + 3))
grep -q "reconciled with the node: [0-9]* replicas of the table checked" "$mlog" ||
	fail "no reconciliation: $(grep 'segment' "$mlog" | tail -3)"
readback
for k in r/1 r/2 r/3; do expect 3 kv get $k "$E2E_TMP/x"; done
expect 0 kv get late "$E2E_TMP/late"
cmp -s "$E2E_TMP/v1" "$E2E_TMP/late" || fail "the late put differs"
expect 0 kv get r/4 "$E2E_TMP/r4"
cmp -s "$E2E_TMP/v1" "$E2E_TMP/r4" || fail "r/4 differs"
ok "reconciled: $(grep -o 'reconciled with the node: .*' "$mlog" | tail -1); $N keys byte for byte, removed keys gone, the late put there"

# ---- 2. a stale file ----
waitfor 10 grep -q "table file $TAB: snapshot of" "$mlog" || fail "no new snapshot after the restart"
sleep 0.3
cp "$TAB" "$E2E_TMP/stale"
expect 0 kv put new/1 "$E2E_TMP/v1"
expect 0 kv put new/2 "$E2E_TMP/v1"
expect 0 kv rm r/4
expect 0 kv rm r/5
stop_pid "$MASTER_PID" KILL
cp "$E2E_TMP/stale" "$TAB"
restart_master
waitfor 10 grep -q "loaded warm" "$mlog" || fail "the stale file was not loaded: $(grep 'table file' "$mlog")"
settled $((N + 3))
for k in r/4 r/5; do expect 3 kv get $k "$E2E_TMP/x"; done
for k in new/1 new/2 late; do
	expect 0 kv get $k "$E2E_TMP/x"
	cmp -s "$E2E_TMP/v1" "$E2E_TMP/x" || fail "$k differs"
done
readback
ok "a stale file: $(grep -o 'reconciled with the node: .*' "$mlog" | tail -1); new keys adopted, removed keys gone"

# ---- 3. corrupt and foreign files: refused, rebuilt from the reports ----
waitfor 10 grep -q "table file $TAB: snapshot of" "$mlog" || fail "no snapshot"
stop_pid "$MASTER_PID" KILL
python3 - "$TAB" <<'EOF'
import sys
p = sys.argv[1]
b = bytearray(open(p, 'rb').read())
b[len(b) // 2] ^= 0x5a
open(p, 'wb').write(b)
EOF
restart_master
waitfor 5 grep -q "table file $TAB: refused" "$mlog" || fail "a corrupt file was not refused: $(grep 'table file' "$mlog")"
ok "corrupt: $(grep -o 'refused: .*' "$mlog")"
settled $((N + 3))
expect 0 kv get new/1 "$E2E_TMP/x"
waitfor 10 grep -q "table file $TAB: snapshot of" "$mlog" || fail "no snapshot"
stop_pid "$MASTER_PID" KILL
sed -i 's/^table_file = .*/&\ncluster_id = other/' "$POOL_INI"
restart_master
waitfor 5 grep -q "table file $TAB: refused: written for cluster_id 'kvpool'" "$mlog" ||
	fail "a foreign file was not refused: $(grep 'table file' "$mlog")"
ok "foreign: $(grep -o 'refused: .*' "$mlog")"
settled $((N + 3))
readback
ok "rebuilt from the reports after each refusal: every key there"

# ---- 4. no table_file under a unit with StateDirectory= (the packaged one) ----
stop_pid "$MASTER_PID" TERM
sed -i '/^table_file = /d' "$POOL_INI"
export STATE_DIRECTORY=$E2E_TMP/state
mkdir -p "$STATE_DIRECTORY"
restart_master
waitfor 5 grep -q "table_file: $STATE_DIRECTORY/master.table (the unit's state directory" "$mlog" ||
	fail "STATE_DIRECTORY/master.table not chosen: $(grep 'table' "$mlog")"
waitfor 10 grep -q "table file $STATE_DIRECTORY/master.table: snapshot of" "$mlog" || fail "no snapshot"
settled $((N + 3))
restart_master
waitfor 10 grep -q "table file $STATE_DIRECTORY/master.table: loaded warm" "$mlog" ||
	fail "not loaded from the state directory: $(grep 'table' "$mlog")"
settled $((N + 3))
ok "state directory: $(grep -o 'loaded warm: [0-9]* keys in [0-9]* ms' "$mlog")"
# table_file = none: off even there
stop_pid "$MASTER_PID" TERM
rm -f "$STATE_DIRECTORY/master.table"
sed -i 's/^\[master\]$/&\ntable_file = none/' "$POOL_INI"
grep -q '^table_file = none' "$POOL_INI" || fail "no [master] section to turn the file off in"
restart_master
settled $((N + 3))
sleep 0.3
! grep -q "table" "$mlog" || fail "table_file = none wrote or read a table: $(grep 'table' "$mlog")"
[ ! -e "$STATE_DIRECTORY/master.table" ] || fail "table_file = none: the file was written"
unset STATE_DIRECTORY
readback
ok "table_file = none: no table file, rebuilt from the reports"
e2e_finish
