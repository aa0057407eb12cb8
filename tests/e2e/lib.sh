# tests/e2e/lib.sh — helpers for end-to-end scripts; source it:
#
#   . "$(dirname "$0")/lib.sh"
#   e2e_init mytest                   # temp dir $E2E_TMP, cleanup trap, $B
#   need "$B/kvpool-master" curl      # skip (77) when something is missing
#   start_master 'lease_ttl = 2s'     # [master] lines; sets MASTER_* below
#   curl -sf "http://127.0.0.1:$MASTER_HTTP_PORT/health" || fail "health"
#   ok "health"
#
# Everything started with spawn/start_master is stopped at exit (SIGTERM,
# then SIGKILL after 3 s), on_cleanup commands run (unmounts, /dev/shm
# files), the temp dir is removed; on failure the last lines of every
# $E2E_TMP/*.log are printed. Ports are free loopback ports picked by the
# kernel. Exit codes: 0 pass, 1 fail, 77 skip.
# Other scripts' helpers go at the end of this file, one section each.

set -u

E2E_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${KVP_BUILD:-$E2E_ROOT/build}
E2E_TMP=""
E2E_PIDS=()
E2E_CLEANUP=()

fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok - $*"; }
skip() { echo "skip: $*"; exit 77; }

# need FILE|COMMAND...: skip unless each is an executable file or a command.
need() {
	local x
	for x in "$@"; do
		if [[ $x == */* ]]; then
			[ -x "$x" ] || skip "$x is not built"
		else
			command -v "$x" >/dev/null || skip "$x is not installed"
		fi
	done
}

e2e_cleanup() {
	local rc=$? p i
	trap - EXIT INT TERM
	for p in "${E2E_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
	for i in $(seq 30); do
		local alive=0
		for p in "${E2E_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive = 0 ] && break
		sleep 0.1
	done
	for p in "${E2E_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	for ((i = ${#E2E_CLEANUP[@]} - 1; i >= 0; i--)); do eval "${E2E_CLEANUP[$i]}" 2>/dev/null; done
	if [ "$rc" != 0 ] && [ "$rc" != 77 ] && [ -n "$E2E_TMP" ]; then
		for p in "$E2E_TMP"/*.log; do
			[ -f "$p" ] || continue
			echo "--- last lines of $(basename "$p")"
			tail -n 25 "$p"
		done
	fi
	[ -n "$E2E_TMP" ] && rm -rf "$E2E_TMP"
	exit "$rc"
}

# e2e_init NAME: private temp dir /tmp/kvp-e2e-NAME-PID.XXXXXX, cleanup trap.
e2e_init() {
	E2E_TMP=$(mktemp -d "/tmp/kvp-e2e-${1:-test}-$$.XXXXXX") || fail "mktemp"
	trap e2e_cleanup EXIT
	trap 'exit 1' INT TERM
}

# on_cleanup 'COMMAND': run at exit (last registered runs first).
on_cleanup() { E2E_CLEANUP+=("$1"); }

# free_ports N: N distinct free loopback ports, space-separated.
free_ports() {
	if command -v python3 >/dev/null; then
		python3 -c '
import socket, sys
ss = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))' "$1"
		return
	fi
	# Without python: random high ports nobody listens on.
	local out="" p n=0
	while [ $n -lt "$1" ]; do
		p=$((20000 + (RANDOM * 32768 + RANDOM) % 40000))
		case " $out " in *" $p "*) continue ;; esac
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && continue
		out="$out $p"
		n=$((n + 1))
	done
	echo $out
}

free_port() { free_ports 1; }

# wait_port PORT [SECONDS]: until something accepts on 127.0.0.1:PORT.
wait_port() {
	local i
	for i in $(seq $((${2:-10} * 20))); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.05
	done
	return 1
}

# spawn LOGNAME CMD...: runs CMD in the background with stdout+stderr in
# $E2E_TMP/LOGNAME.log; stopped at exit. Sets SPAWN_PID.
spawn() {
	local log=$1
	shift
	"$@" >>"$E2E_TMP/$log.log" 2>&1 &
	SPAWN_PID=$!
	E2E_PIDS+=("$SPAWN_PID")
}

# start_master [LINE...]: a kvpool-master on fresh loopback ports. The
# arguments are extra lines of its INI after the [master] keys (write
# "[section]" lines to add other sections). Sets MASTER_PID, MASTER_PORT,
# MASTER_HTTP_PORT, MASTER_MD_PORT, MASTER_ADDR (host:port), MASTER_INI,
# MASTER_LOG. Extra arguments for the binary: MASTER_ARGS (array).
start_master() {
	local ports line
	ports=$(free_ports 3) || fail "free_ports"
	read -r MASTER_PORT MASTER_HTTP_PORT MASTER_MD_PORT <<<"$ports"
	MASTER_ADDR=127.0.0.1:$MASTER_PORT
	MASTER_INI=$E2E_TMP/master.ini
	MASTER_LOG=$E2E_TMP/master.log
	{
		echo "[master]"
		echo "listen = $MASTER_ADDR"
		echo "http_listen = 127.0.0.1:$MASTER_HTTP_PORT"
		echo "metadata_listen = 127.0.0.1:$MASTER_MD_PORT"
		for line in "$@"; do echo "$line"; done
	} >"$MASTER_INI"
	spawn master "$B/kvpool-master" -c "$MASTER_INI" "${MASTER_ARGS[@]+"${MASTER_ARGS[@]}"}"
	MASTER_PID=$SPAWN_PID
	wait_port "$MASTER_PORT" 10 || fail "kvpool-master did not listen on $MASTER_ADDR"
}

# forget PID: no longer stopped at exit (it was waited for).
forget() {
	local p keep=()
	for p in "${E2E_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	E2E_PIDS=("${keep[@]+"${keep[@]}"}")
}

# stop_master [SIGNAL]: stops it (default TERM) and returns its exit status.
stop_master() {
	local rc=0
	kill -"${1:-TERM}" "$MASTER_PID" 2>/dev/null
	wait "$MASTER_PID" || rc=$?
	forget "$MASTER_PID"
	return $rc
}

# metric NAME[{labels}] [PORT]: a sample's value from /metrics (master's by default).
metric() {
	curl -sf "http://127.0.0.1:${2:-$MASTER_HTTP_PORT}/metrics" |
		awk -v n="$1" '$1 == n { print $2; exit }'
}

# Run directly (tests/run.sh runs every tests/e2e/*.sh), this file tests
# itself and a master started with it: ports, start/stop, /health, /metrics,
# SIGHUP, the cleanup trap.
e2e_lib_selftest() {
	e2e_init lib
	need "$B/kvpool-master" curl
	local a b
	read -r a b <<<"$(free_ports 2)"
	[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || fail "free_ports: '$a' '$b'"
	ok "free_ports"
	start_master "lease_ttl = 3s" "[log]" "level = info"
	curl -sf "http://127.0.0.1:$MASTER_HTTP_PORT/health" | grep -qx ok || fail "/health"
	ok "master on $MASTER_ADDR, /health"
	[ "$(metric kvpool_master_keys)" = 0 ] || fail "metric kvpool_master_keys"
	ok "metric"
	sed -i 's/^lease_ttl = 3s/lease_ttl = 4s/' "$MASTER_INI"
	kill -HUP "$MASTER_PID"
	for _ in $(seq 50); do grep -q "lease_ttl = 4s" "$MASTER_LOG" && break; sleep 0.1; done
	grep -q "lease_ttl = 4s" "$MASTER_LOG" || fail "SIGHUP reload not logged"
	ok "SIGHUP"
	on_cleanup "rm -f '$E2E_TMP/cleanup-ran'"
	stop_master || fail "kvpool-master exit status $?"
	ok "stop_master: exit 0"
	spawn sleeper sleep 60		# the trap stops it
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	e2e_lib_selftest
	exit 0
fi

# ---- helpers of other scripts below, one section each ----
