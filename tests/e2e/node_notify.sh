#!/bin/bash
# node_notify.sh — kvpool-node's systemd notifications, read from a private
# NOTIFY_SOCKET (no systemd needed): no READY=1 while the master is down,
# READY=1 once the segment is mounted, STATUS= lines, WATCHDOG=1 at half of
# WATCHDOG_USEC, STOPPING=1 on SIGTERM, exit 0. Exit 0 pass, 1 fail, 77 skip.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${KVP_BUILD:-$root/build}
MASTER=$B/kvpool-master NODE=$B/kvpool-node
for b in "$MASTER" "$NODE"; do
	[ -x "$b" ] || { echo "skip: $b is not built"; exit 77; }
done
command -v python3 >/dev/null || { echo "skip: python3 missing"; exit 77; }

tmp=$(mktemp -d /tmp/kvp-notify.XXXXXX)
seg=kvpt-notify-$$
mpid="" npid="" lpid=""

cleanup() {
	local rc=$?
	trap - EXIT
	for p in $npid $mpid $lpid; do kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 30); do
		local alive=0
		for p in $npid $mpid $lpid; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in $npid $mpid $lpid; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ $rc != 0 ] && [ $rc != 77 ]; then
		for l in "$tmp"/*.log "$tmp"/notify.txt; do
			[ -f "$l" ] || continue
			echo "--- last lines of $(basename "$l")"
			tail -n 20 "$l"
		done
	fi
	rm -f "/dev/shm/$seg"
	rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok - $*"; }

read -r mport dport hport <<<"$(python3 -c '
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))')"
cat >"$tmp/pool.ini" <<EOF
[cluster]
master = 127.0.0.1:$mport
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:0
metadata_server = false
[node]
name = notifynode
listen = 127.0.0.1:$dport
http_listen = 127.0.0.1:$hport
segment = $seg
segment_size = 16M
heartbeat_interval = 200ms
remove_segment_on_exit = true
[log]
level = info
EOF

# The notification socket: one line per datagram in notify.txt.
python3 -u -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a") as f:
    while True:
        m = s.recv(4096).decode(errors="replace")
        for line in m.split("\n"):
            if line: f.write(line + "\n"); f.flush()
' "$tmp/notify.sock" "$tmp/notify.txt" &
lpid=$!
for _ in $(seq 50); do [ -S "$tmp/notify.sock" ] && break; sleep 0.05; done
[ -S "$tmp/notify.sock" ] || fail "notify socket not created"
touch "$tmp/notify.txt"

NOTIFY_SOCKET=$tmp/notify.sock WATCHDOG_USEC=400000 \
	"$NODE" -c "$tmp/pool.ini" >"$tmp/node.log" 2>&1 &
npid=$!
sleep 1.5
kill -0 "$npid" || fail "node exited without a master"
grep -q "^READY=1" "$tmp/notify.txt" && fail "READY=1 before the segment was mounted"
grep -q "^STATUS=connecting to master" "$tmp/notify.txt" || fail "no STATUS while connecting"
w=$(grep -c "^WATCHDOG=1" "$tmp/notify.txt")
[ "$w" -ge 4 ] || fail "only $w WATCHDOG=1 in 1.5 s with WATCHDOG_USEC=400ms"
ok "master down: no READY, STATUS says connecting, WATCHDOG=1 every 200 ms"

"$MASTER" -c "$tmp/pool.ini" >"$tmp/master.log" 2>&1 &
mpid=$!
for _ in $(seq 100); do grep -q "^READY=1" "$tmp/notify.txt" && break; sleep 0.05; done
grep -q "^READY=1" "$tmp/notify.txt" || fail "no READY=1 after the master came up"
grep -q "^STATUS=mounted at 127.0.0.1:$mport as segment" "$tmp/notify.txt" ||
	fail "no STATUS=mounted line"
[ "$(grep -c '^READY=1' "$tmp/notify.txt")" = 1 ] || fail "READY=1 sent more than once"
ok "READY=1 once mounted at the master, with a STATUS line"

kill -TERM "$npid"
wait "$npid"
rc=$?
npid=""
[ $rc = 0 ] || fail "SIGTERM: exit $rc"
grep -q "^STOPPING=1" "$tmp/notify.txt" || fail "no STOPPING=1"
grep -q "^STATUS=draining" "$tmp/notify.txt" || fail "no STATUS=draining"
ok "SIGTERM: STOPPING=1, STATUS=draining, exit 0"
echo "node_notify: all passed"
