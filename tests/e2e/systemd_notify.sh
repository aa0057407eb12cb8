#!/bin/bash
# systemd_notify.sh — what Type=notify, WatchdogSec=, ExecReload= and
# NotifyAccess=main rely on, checked without systemd: each daemon runs with
# NOTIFY_SOCKET pointing at a datagram socket of this test (a Python
# stand-in for systemd that reads the sender's pid with SO_PASSCRED), and
# WATCHDOG_USEC / WATCHDOG_PID set as systemd sets them.
#  master (abstract socket "@...", as systemd uses):
#   1. READY=1 comes from the main pid, and at that moment the RPC and HTTP
#      ports accept connections;
#   2. WATCHDOG=1 keeps coming (every WATCHDOG_USEC/2);
#   3. SIGHUP after the INI changed: log.level=debug applies live (debug
#      lines appear in stderr afterwards, none before), a live key is
#      applied, a non-live key is reported as needing a restart; a broken
#      INI on SIGHUP keeps the running configuration and the daemon;
#   4. SIGTERM: STOPPING=1, exit 0.
#  node (socket path):
#   5. no READY=1 while the master is down; once the master is up, READY=1
#      arrives and at that moment the data and HTTP ports accept and the
#      master counts the segment as mounted (and, when FUSE works here, the
#      configured FUSE view is mounted);
#   6. WATCHDOG=1, SIGHUP (log level live, segment_size needs a restart;
#      STATUS= still says "mounted at ..." with the FUSE view, then the
#      reload's outcome), SIGTERM: STOPPING=1, exit 0.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init sdnotify
MASTER=$B/kvpool-master NODE=$B/kvpool-node
need "$MASTER" "$NODE" python3
E2E_LOGS=("*.err" "*.events" "*.log")
seg=kvpt-sdnotify-$$
mnt=$E2E_TMP/mnt
on_cleanup "rm -f '/dev/shm/$seg'"
on_cleanup "fuse_unmount '$mnt'"
mpid="" npid=""	# set by start_notified

# count FILE PATTERN: lines of FILE matching the extended regex
count() { grep -cE -- "$2" "$1" 2>/dev/null || true; }
atleast() { [ "$(count "$1" "$2")" -ge "$3" ]; }
# connect+close to a port: the daemon's event loop logs "peer closed" at debug
poke() { python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1]))).close()' "$1"; }

# ---- the stand-in for systemd's notification socket ----
cat >"$E2E_TMP/listener.py" <<'PYEOF'
# listener.py SOCKET EVENTS [--check HOST:PORT]... [--metric URL NAME]... [--mount DIR]...
# Binds SOCKET ("@name" = abstract) with SO_PASSCRED and appends to EVENTS:
#   LISTENING, then "MSG <sender pid> <field>" per notification field.
# The moment READY=1 arrives, before the next datagram is read, it records
# the state the daemon promised: "CHECK <hp> accept|refused" (TCP connect),
# "METRIC <name> <value|none>" (a gauge from a Prometheus URL),
# "MOUNT <dir> yes <fstype>|no", then "READYCHECK done".
import socket, struct, sys, urllib.request

def check_port(hp):
    host, port = hp.rsplit(":", 1)
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, int(port)))
        return "accept"
    except OSError:
        return "refused"
    finally:
        s.close()

def read_metric(url, name):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            for line in r.read().decode().splitlines():
                p = line.split()
                if len(p) == 2 and p[0] == name:
                    return p[1]
    except OSError:
        pass
    return "none"

def mount_state(d):
    with open("/proc/self/mountinfo") as f:
        for line in f:
            p = line.split()
            if p[4] == d:
                return "yes " + p[p.index("-") + 1]
    return "no"

args = sys.argv[1:]
path, events = args[0], args[1]
checks, metrics, mounts = [], [], []
i = 2
while i < len(args):
    if args[i] == "--check":
        checks.append(args[i + 1]); i += 2
    elif args[i] == "--metric":
        metrics.append((args[i + 1], args[i + 2])); i += 3
    elif args[i] == "--mount":
        mounts.append(args[i + 1]); i += 2
    else:
        sys.exit("listener: unknown argument " + args[i])

s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
s.bind("\0" + path[1:] if path.startswith("@") else path)
out = open(events, "a", buffering=1)
out.write("LISTENING\n")
clen = socket.CMSG_LEN(struct.calcsize("3i"))
while True:
    data, anc, _, _ = s.recvmsg(4096, clen)
    pid = -1
    for level, typ, c in anc:
        if level == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS:
            pid = struct.unpack("3i", c[:12])[0]
    fields = data.decode(errors="replace").split("\n")
    for f in fields:
        if f:
            out.write("MSG %d %s\n" % (pid, f))
    if "READY=1" in fields:
        for hp in checks:
            out.write("CHECK %s %s\n" % (hp, check_port(hp)))
        for url, name in metrics:
            out.write("METRIC %s %s\n" % (name, read_metric(url, name)))
        for d in mounts:
            out.write("MOUNT %s %s\n" % (d, mount_state(d)))
        out.write("READYCHECK done\n")
PYEOF

# listen NAME SOCKET ARGS...: starts a listener writing $E2E_TMP/NAME.events
listen() {
	local name=$1 sock=$2
	shift 2
	spawn "listener-$name" python3 "$E2E_TMP/listener.py" "$sock" "$E2E_TMP/$name.events" "$@"
	waitfor 10 grep -qs LISTENING "$E2E_TMP/$name.events" || fail "$name: listener did not start"
}
# start_notified VAR EVENTS-NAME SOCKET LOG CMD...: runs CMD as systemd
# would for Type=notify + WatchdogSec=: NOTIFY_SOCKET, WATCHDOG_USEC, and
# WATCHDOG_PID = the daemon's own pid (the subshell's pid, kept by exec).
start_notified() {
	local var=$1 sock=$3 log=$4
	shift 4
	(
		export NOTIFY_SOCKET=$sock WATCHDOG_USEC=400000 WATCHDOG_PID=$BASHPID
		exec "$@"
	) 2>>"$log" &
	E2E_PIDS+=($!)
	printf -v "$var" %s $!
}
# msgs EVENTS PID FIELD: count of FIELD sent by PID
msgs() { count "$1" "^MSG $2 $3\$"; }

read -r mport mhttp dport nhttp < <(free_ports 4)

# ================================ master =================================
cat >"$E2E_TMP/master.ini" <<EOF
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
lease_ttl = 5s
[log]
level = notice
EOF
msock="@kvpt-sdnotify-$$-master"
listen master "$msock" --check "127.0.0.1:$mport" --check "127.0.0.1:$mhttp"
start_notified mpid master "$msock" "$E2E_TMP/master.err" "$MASTER" -c "$E2E_TMP/master.ini"
ev=$E2E_TMP/master.events

# 1. READY=1 from the main pid, ports accepting at that moment
waitfor 20 grep -q "READYCHECK done" "$ev" || fail "master: no READY=1"
[ "$(msgs "$ev" "$mpid" READY=1)" = 1 ] || fail "master: READY=1 not sent by the main pid $mpid: $(grep READY "$ev")"
grep -q "^CHECK 127.0.0.1:$mport accept$" "$ev" || fail "master: RPC port not accepting at READY=1"
grep -q "^CHECK 127.0.0.1:$mhttp accept$" "$ev" || fail "master: HTTP port not accepting at READY=1"
[ "$(count "$ev" "^MSG -?[0-9]+ READY=1$")" = 1 ] || fail "master: READY=1 sent more than once"
grep -qE "^MSG $mpid STATUS=.+" "$ev" || fail "master: no STATUS= line"
ok "master: READY=1 from pid $mpid once RPC and HTTP ports accept"

# 2. watchdog
waitfor 20 atleast "$ev" "^MSG $mpid WATCHDOG=1$" 3 || fail "master: WATCHDOG=1 does not keep coming"
ok "master: WATCHDOG=1 keeps coming ($(msgs "$ev" "$mpid" WATCHDOG=1) so far)"

# 3. reload
poke "$mport"
sleep 0.3	# give a (wrong) debug line the time to show up
grep -q " debug: " "$E2E_TMP/master.err" && fail "master: debug line at level notice"
cat >"$E2E_TMP/master.ini" <<EOF
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
lease_ttl = 9s
max_connections = 100
[log]
level = debug
EOF
kill -HUP "$mpid"
waitfor 20 grep -q "master.max_connections changed .* needs a restart" "$E2E_TMP/master.err" ||
	fail "master: changed non-live key not reported as needing a restart"
grep -q "master.lease_ttl = 9s (was 5s)" "$E2E_TMP/master.err" || fail "master: live key lease_ttl not applied"
grep -q "log.level = debug (was notice)" "$E2E_TMP/master.err" || fail "master: log.level not applied"
poke "$mport"
waitfor 20 grep -q " debug: " "$E2E_TMP/master.err" || fail "master: no debug line after SIGHUP to level debug"
ok "master: SIGHUP applies log.level and lease_ttl live, reports max_connections"

printf '[master]\nno_such_key = 1\n' >"$E2E_TMP/master.ini"
wd=$(msgs "$ev" "$mpid" WATCHDOG=1)
kill -HUP "$mpid"
waitfor 20 grep -q "keeping the running configuration" "$E2E_TMP/master.err" ||
	fail "master: broken INI on SIGHUP not reported"
grep -q "master.ini:2: \[master\] no_such_key: unknown key" "$E2E_TMP/master.err" ||
	fail "master: the reload error does not name FILE:LINE"
waitfor 20 atleast "$ev" "^MSG $mpid WATCHDOG=1$" $((wd + 2)) || fail "master: watchdog stopped after a failed reload"
alive "$mpid" || fail "master died on a broken INI"
poke "$mport"	# still serving, still at debug level
ok "master: a broken INI on SIGHUP keeps the running configuration"

# 4. stop
stop_pid "$mpid"
rc=$?
[ $rc = 0 ] || fail "master: exit $rc after SIGTERM"
[ "$(msgs "$ev" "$mpid" STOPPING=1)" = 1 ] || fail "master: no STOPPING=1"
ok "master: SIGTERM -> STOPPING=1, exit 0"

# ================================= node ==================================
# A plain master (no notification socket) for the node.
cat >"$E2E_TMP/pool.ini" <<EOF
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
[log]
level = notice
EOF
fuse_ok=0
if [ -c /dev/fuse ] && command -v fusermount3 >/dev/null && [ "$(id -u)" = 0 ]; then
	fuse_ok=1
fi
mkdir -p "$mnt"
write_node_ini() {	# write_node_ini LEVEL SEGMENT_SIZE
	cat >"$E2E_TMP/node.ini" <<EOF
[cluster]
master = 127.0.0.1:$mport
[node]
name = sdnotify
listen = 127.0.0.1:$dport
http_listen = 127.0.0.1:$nhttp
segment = $seg
segment_size = $2
heartbeat_interval = 200ms
[log]
level = $1
EOF
	[ $fuse_ok = 1 ] && printf '[fuse]\nmountpoint = %s\n' "$mnt" >>"$E2E_TMP/node.ini"
	return 0
}
write_node_ini notice 16M
nsock=$E2E_TMP/node.sock
margs=(--check "127.0.0.1:$dport" --check "127.0.0.1:$nhttp"
       --metric "http://127.0.0.1:$mhttp/metrics" kvpool_master_segments)
[ $fuse_ok = 1 ] && margs+=(--mount "$mnt")
listen node "$nsock" "${margs[@]}"
ev=$E2E_TMP/node.events

# 5. the master is down: the node talks (STATUS=) but is not ready
start_notified npid node "$nsock" "$E2E_TMP/node.err" "$NODE" -c "$E2E_TMP/node.ini"
waitfor 20 grep -qE "^MSG $npid STATUS=" "$ev" || fail "node: no STATUS= while waiting for the master"
sleep 1
alive "$npid" || fail "node exited while the master is down"
grep -q "READY=1" "$ev" && fail "node: READY=1 before it was mounted at a master"
ok "node: no READY=1 while the master is down"

spawn pool-master "$MASTER" -c "$E2E_TMP/pool.ini"
waitfor 30 grep -q "READYCHECK done" "$ev" || fail "node: no READY=1 once the master is up"
[ "$(msgs "$ev" "$npid" READY=1)" = 1 ] || fail "node: READY=1 not from the main pid $npid"
grep -q "^CHECK 127.0.0.1:$dport accept$" "$ev" || fail "node: data port not accepting at READY=1"
grep -q "^CHECK 127.0.0.1:$nhttp accept$" "$ev" || fail "node: HTTP port not accepting at READY=1"
grep -q "^METRIC kvpool_master_segments 1$" "$ev" ||
	fail "node: segment not mounted at the master at READY=1: $(grep METRIC "$ev")"
[ -f "/dev/shm/$seg" ] || fail "node: segment file missing at READY=1"
if [ $fuse_ok = 1 ]; then
	if grep -q "^MOUNT $mnt yes fuse" "$ev"; then
		ok "node: FUSE view mounted at READY=1"
	elif grep -qiE "fuse|mount" "$E2E_TMP/node.err" && ! alive "$npid"; then
		fail "node: FUSE view configured but the node failed: $(tail -n 3 "$E2E_TMP/node.err")"
	else
		fail "node: FUSE view configured but not mounted at READY=1: $(grep MOUNT "$ev")"
	fi
fi
ok "node: READY=1 from pid $npid after ports accept and the segment is mounted"

# 6. watchdog, reload, stop
waitfor 20 atleast "$ev" "^MSG $npid WATCHDOG=1$" 3 || fail "node: WATCHDOG=1 does not keep coming"
ok "node: WATCHDOG=1 keeps coming"
poke "$dport"
sleep 0.3
grep -q " debug: " "$E2E_TMP/node.err" && fail "node: debug line at level notice"
write_node_ini debug 32M
kill -HUP "$npid"
waitfor 20 grep -q "node.segment_size changed .* needs a restart" "$E2E_TMP/node.err" ||
	fail "node: changed segment_size not reported as needing a restart"
grep -q "log.level = debug (was notice)" "$E2E_TMP/node.err" || fail "node: log.level not applied"
poke "$dport"
waitfor 20 grep -q " debug: " "$E2E_TMP/node.err" || fail "node: no debug line after SIGHUP to level debug"
alive "$npid" || fail "node died on SIGHUP"
ok "node: SIGHUP applies log.level live, reports segment_size"
# The STATUS= line after the reload still says the node is mounted (and
# where its FUSE view is), with the reload's outcome after it.
want="^MSG $npid STATUS=mounted at 127\\.0\\.0\\.1:$mport as segment [0-9]+, "
[ $fuse_ok = 1 ] && want+=".*, FUSE view mounted at $mnt"
want+=".*; reloaded, [0-9]+ changed keys need a restart\$"
waitfor 20 grep -qE "$want" "$ev" ||
	fail "node: STATUS= after SIGHUP lost the mount: $(grep "^MSG $npid STATUS=" "$ev" | tail -n 2)"
if [ $fuse_ok = 1 ] && ! grep -qE "^MSG $npid STATUS=mounted at .*, FUSE view mounted at $mnt\$" "$ev"; then
	fail "node: no STATUS= naming the FUSE view before SIGHUP"
fi
ok "node: STATUS= after SIGHUP keeps 'mounted at' (FUSE view: $([ $fuse_ok = 1 ] && echo "$mnt" || echo none))"

stop_pid "$npid"
rc=$?
[ $rc = 0 ] || fail "node: exit $rc after SIGTERM"
[ "$(msgs "$ev" "$npid" STOPPING=1)" = 1 ] || fail "node: no STOPPING=1"
if [ $fuse_ok = 1 ]; then
	mountpoint -q "$mnt" && fail "node: FUSE view still mounted after exit"
fi
ok "node: SIGTERM -> STOPPING=1, exit 0"
echo "PASS"
