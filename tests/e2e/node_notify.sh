#!/bin/bash
# node_notify.sh — kvpool-node's systemd notifications, read from a private
# NOTIFY_SOCKET (no systemd needed): no READY=1 while the master is down,
# READY=1 once the segment is mounted, STATUS= lines, WATCHDOG=1 at half of
# WATCHDOG_USEC, STOPPING=1 on SIGTERM, exit 0. Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init notify
need "$B/kvpool-master" "$B/kvpool-node" python3
E2E_LOGS+=(notify.txt)

pool_ini "[node]" "segment_size = 16M" "heartbeat_interval = 200ms" "remove_segment_on_exit = true" \
	"[log]" "level = info"
pool_node notifynode

# The notification socket: one line per datagram in notify.txt.
spawn listener python3 -u -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a") as f:
    while True:
        m = s.recv(4096).decode(errors="replace")
        for line in m.split("\n"):
            if line: f.write(line + "\n"); f.flush()
' "$E2E_TMP/notify.sock" "$E2E_TMP/notify.txt"
waitfor 5 test -S "$E2E_TMP/notify.sock" || fail "notify socket not created"
touch "$E2E_TMP/notify.txt"

NOTIFY_SOCKET=$E2E_TMP/notify.sock WATCHDOG_USEC=400000 run_node notifynode
npid=$NODE_PID
sleep 1.5
kill -0 "$npid" || fail "node exited without a master"
grep -q "^READY=1" "$E2E_TMP/notify.txt" && fail "READY=1 before the segment was mounted"
grep -q "^STATUS=connecting to master" "$E2E_TMP/notify.txt" || fail "no STATUS while connecting"
w=$(grep -c "^WATCHDOG=1" "$E2E_TMP/notify.txt")
[ "$w" -ge 4 ] || fail "only $w WATCHDOG=1 in 1.5 s with WATCHDOG_USEC=400ms"
ok "master down: no READY, STATUS says connecting, WATCHDOG=1 every 200 ms"

run_master
waitfor 10 grep -q "^READY=1" "$E2E_TMP/notify.txt" || fail "no READY=1 after the master came up"
grep -q "^STATUS=mounted at $MASTER_ADDR as segment" "$E2E_TMP/notify.txt" ||
	fail "no STATUS=mounted line"
[ "$(grep -c '^READY=1' "$E2E_TMP/notify.txt")" = 1 ] || fail "READY=1 sent more than once"
ok "READY=1 once mounted at the master, with a STATUS line"

stop_pid "$npid"
rc=$?
[ $rc = 0 ] || fail "SIGTERM: exit $rc"
grep -q "^STOPPING=1" "$E2E_TMP/notify.txt" || fail "no STOPPING=1"
grep -q "^STATUS=draining" "$E2E_TMP/notify.txt" || fail "no STATUS=draining"
ok "SIGTERM: STOPPING=1, STATUS=draining, exit 0"
echo "node_notify: all passed"
