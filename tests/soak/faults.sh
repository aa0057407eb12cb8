# tests/soak/faults.sh — a private kvpool pool and the faults the soak
# schedule injects into it. Sourced by tests/soak.sh (bash); every daemon is
# a child of that shell, so a death is seen with its exit status.
#
# The caller sets: B (build dir), tmp (work dir), tag (shm/spill name tag),
# and optionally the SOAK_* variables below, then calls pool_setup,
# pool_start, and faults by name (fault_node_kill, ...). pool_monitor
# records every daemon death the schedule did not cause in $state/crashes
# (and restarts the daemon); $state/pids/NAME holds each daemon's pid for
# the driver's memory report; $state/events logs what was done when.
#
# Faults (SOAK_FAULTS, comma-separated, "all" = every one available):
#   node_kill    kill -9 a node, restart it after SOAK_DOWN seconds
#   master_kill  kill -9 the master, restart it after SOAK_DOWN seconds
#   node_stop    SIGSTOP a node for client_ttl + 1 s, then SIGCONT
#   partition    drop every packet of the namespaced node (nftables) for
#                client_ttl + 1 s, then heal          (needs root + netns)
#   shm_full     fill /dev/shm (a private tmpfs) to the last byte for
#                SOAK_HOLD seconds, restarting a node meanwhile (needs root)
#   spill_full   fill the spill filesystem (a private tmpfs) for SOAK_HOLD
#                seconds, restarting a node meanwhile     (needs root)
#   client_kill  SIGKILL a client process while it is inside a put
#                (SIGUSR1 to the driver, which respawns it)

: "${SOAK_NODES:=3}"		# nodes (the last one in a network namespace when possible)
: "${SOAK_SEGMENT:=32M}"	# segment size per node
: "${SOAK_SPILL:=32M}"		# spill file per node (0: no spill tier)
: "${SOAK_TIMEOUT:=3s}"		# client.timeout
: "${SOAK_CLIENT_TTL:=2}"	# master.client_ttl, seconds
: "${SOAK_DOWN:=1.5}"		# seconds a killed daemon stays down
: "${SOAK_HOLD:=3}"		# seconds a full filesystem stays full
: "${SOAK_LOG_LEVEL:=notice}"

declare -A dpid=()		# daemon name -> pid (children of this shell)
declare -A ddown=()		# daemon name -> 1 while the schedule holds it down
declare -a nodes=()		# node names
has_root=0 has_netns=0 has_shmfs=0 has_spillfs=0
ns="" va="" sub="" netns_node=""
filler_shm="" filler_spill=""

soak_now() { awk -v a="$soak_t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
event() { echo "T+$(soak_now)s $*" | tee -a "$state/events" >&2; }

# Size in bytes of "48M"-like values.
to_bytes() {
	local v=${1%B} m=1
	case $v in
	*K) m=1024; v=${v%K} ;; *M) m=$((1 << 20)); v=${v%M} ;; *G) m=$((1 << 30)); v=${v%G} ;;
	esac
	echo $((v * m))
}

free_ports() { python3 "$root/tests/free_ports.py" "$1"; }

# pool_setup: private /dev/shm and spill tmpfs (in our mount namespace), the
# network namespace, the token and every INI file.
pool_setup() {
	soak_t0=$(date +%s.%N)
	state=$tmp/state
	mkdir -p "$state/pids"
	: >"$state/crashes"
	: >"$state/events"
	[ "$(id -u)" = 0 ] && has_root=1
	local seg spill shm_bytes
	seg=$(to_bytes "$SOAK_SEGMENT")
	spill=$(to_bytes "$SOAK_SPILL")
	if [ $has_root = 1 ] && [ "${KVP_SOAK_MNTNS:-}" = 1 ]; then
		# Room for the segments plus 16 MiB: the rest is what shm_full fills.
		shm_bytes=$((SOAK_NODES * seg + (16 << 20)))
		if mount -t tmpfs -o "size=$shm_bytes,mode=1777" "kvpsoak-shm" /dev/shm; then
			has_shmfs=1
		fi
		mkdir -p "$tmp/spill"
		if [ "$spill" -gt 0 ] &&
			mount -t tmpfs -o "size=$((SOAK_NODES * spill + (8 << 20)))" "kvpsoak-spill" "$tmp/spill"; then
			has_spillfs=1
		fi
	fi
	mkdir -p "$tmp/spill"
	if [ $has_root = 1 ] && command -v ip >/dev/null && command -v nft >/dev/null &&
		[ "$SOAK_NODES" -ge 2 ] && ip netns add "kvpsoak$$" 2>/dev/null; then
		ns=kvpsoak$$
		va=kvs$$a
		sub="10.$((150 + ($$ >> 8) % 50)).$(($$ % 256))"
		if ip -4 addr show | grep -q " $sub\." ||
			! ip link add "$va" type veth peer name "kvs$$b" ||
			! ip link set "kvs$$b" netns "$ns"; then
			ip netns del "$ns" 2>/dev/null
			ns=""
		else
			ip addr add "$sub.1/24" dev "$va"
			ip link set "$va" up
			ip -n "$ns" addr add "$sub.2/24" dev "kvs$$b"
			ip -n "$ns" link set "kvs$$b" up
			ip -n "$ns" link set lo up
			has_netns=1
		fi
	fi

	head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
	echo >>"$tmp/token"
	chmod 600 "$tmp/token"
	local mhost=127.0.0.1 ports i
	[ $has_netns = 1 ] && mhost=$sub.1
	read -r -a ports <<<"$(free_ports $((2 + 2 * SOAK_NODES)))"
	mport=${ports[0]}
	common() {	# common HOST_ID
		cat <<EOF
[cluster]
master = $mhost:$mport
token_file = $tmp/token
[master]
listen = $mhost:$mport
http_listen = 127.0.0.1:${ports[1]}
metadata_server = false
client_ttl = ${SOAK_CLIENT_TTL}s
put_timeout = 3s
lease_ttl = 500ms
[client]
timeout = $SOAK_TIMEOUT
host_id = $1
[log]
level = $SOAK_LOG_LEVEL
EOF
	}
	common "soak-local-$$" >"$tmp/pool.ini"
	for i in $(seq 1 "$SOAK_NODES"); do
		local name=n$i host=127.0.0.1 hid="soak-local-$$"
		local d=${ports[$((2 + 2 * (i - 1)))]} h=${ports[$((3 + 2 * (i - 1)))]}
		if [ $has_netns = 1 ] && [ "$i" = "$SOAK_NODES" ]; then
			host=$sub.2 hid="soak-remote-$$" netns_node=$name
		fi
		nodes+=("$name")
		{
			common "$hid"
			cat <<EOF
[node]
name = $name
listen = $host:$d
advertise = $host:$d
http_listen = 127.0.0.1:$h
segment = $tag-$name
segment_size = $SOAK_SEGMENT
heartbeat_interval = 300ms
remove_segment_on_exit = false
EOF
			if [ "$spill" -gt 0 ]; then
				printf '[spill]\npath = %s\nsize = %s\n' "$tmp/spill/$tag-$name.spill" "$SOAK_SPILL"
			fi
		} >"$tmp/$name.ini"
	done
}

kv() { "$B/kvpool" -c "$tmp/pool.ini" "$@"; }

daemon_start() {	# daemon_start NAME
	local name=$1
	if [ "$name" = master ]; then
		"$B/kvpool-master" -c "$tmp/pool.ini" >>"$tmp/master.log" 2>&1 &
	elif [ "$name" = "$netns_node" ]; then
		nsenter --net="/run/netns/$ns" -- "$B/kvpool-node" -c "$tmp/$name.ini" >>"$tmp/$name.log" 2>&1 &
	else
		"$B/kvpool-node" -c "$tmp/$name.ini" >>"$tmp/$name.log" 2>&1 &
	fi
	dpid[$name]=$!
	echo "${dpid[$name]}" >"$state/pids/$name"
	unset "ddown[$name]"
}

# daemon_kill NAME SIGNAL: the schedule's own kill (not a crash); reaps it.
daemon_kill() {
	local name=$1 sig=$2 p=${dpid[$1]:-}
	[ -n "$p" ] || return 0
	ddown[$name]=1
	kill -"$sig" "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	unset "dpid[$name]"
}

node_names() {
	kv info --json 2>/dev/null | python3 -c '
import json, sys
print(" ".join(sorted(n["name"] for n in json.load(sys.stdin)["nodes"])))' 2>/dev/null
}

# pool_wait_all SECONDS: until the master lists every node.
pool_wait_all() {
	local want limit=$1 start=$SECONDS
	want=$(printf '%s\n' "${nodes[@]}" | sort | tr '\n' ' ')
	want=${want% }
	while [ $((SECONDS - start)) -lt "$limit" ]; do
		[ "$(node_names)" = "$want" ] && return 0
		pool_monitor
		sleep 0.2
	done
	echo "master lists '$(node_names)', expected '$want' after ${limit}s" >&2
	return 1
}

pool_start() {
	daemon_start master
	for n in "${nodes[@]}"; do daemon_start "$n"; done
	pool_wait_all 30
}

# A daemon that died while the schedule did not hold it down is a crash:
# record it (name, status, time, last log lines) and restart it.
pool_monitor() {
	local name p rc
	for name in "${!dpid[@]}"; do
		p=${dpid[$name]}
		kill -0 "$p" 2>/dev/null && continue
		wait "$p" 2>/dev/null
		rc=$?
		echo "$name exit $rc at T+$(soak_now)s" >>"$state/crashes"
		event "CRASH: $name (pid $p) exited with status $rc; last log lines:"
		tail -n 20 "$tmp/$name.log" | sed 's/^/    /' >&2
		unset "dpid[$name]"
		daemon_start "$name"
	done
}

# Sleeps SECONDS (fractions allowed) while watching the daemons.
soak_sleep() {
	local until
	until=$(awk -v a="$(date +%s.%N)" -v d="$1" 'BEGIN { printf "%.3f", a + d }')
	while awk -v a="$(date +%s.%N)" -v u="$until" 'BEGIN { exit !(a < u) }'; do
		pool_monitor
		sleep 0.1
	done
}

pick_node() { echo "${nodes[$((RANDOM % ${#nodes[@]}))]}"; }

fault_node_kill() {
	local n
	n=$(pick_node)
	event "node_kill: kill -9 $n"
	daemon_kill "$n" KILL
	soak_sleep "$SOAK_DOWN"
	event "node_kill: restart $n"
	daemon_start "$n"
}

fault_master_kill() {
	event "master_kill: kill -9 master"
	daemon_kill master KILL
	soak_sleep "$SOAK_DOWN"
	event "master_kill: restart master"
	daemon_start master
}

fault_node_stop() {
	local n p
	n=$(pick_node)
	p=${dpid[$n]:-}
	[ -n "$p" ] || return 0
	event "node_stop: SIGSTOP $n for $((SOAK_CLIENT_TTL + 1)) s (client_ttl ${SOAK_CLIENT_TTL}s)"
	kill -STOP "$p"
	soak_sleep $((SOAK_CLIENT_TTL + 1))
	kill -CONT "$p"
	event "node_stop: SIGCONT $n"
}

fault_partition() {
	[ $has_netns = 1 ] || return 0
	event "partition: drop all traffic of $netns_node ($sub.2) for $((SOAK_CLIENT_TTL + 1)) s"
	ip netns exec "$ns" nft -f - <<'EOF'
table inet kvpsoak {
	chain in { type filter hook input priority 0; policy drop; iif "lo" accept; }
	chain out { type filter hook output priority 0; policy drop; oif "lo" accept; }
}
EOF
	soak_sleep $((SOAK_CLIENT_TTL + 1))
	ip netns exec "$ns" nft delete table inet kvpsoak
	event "partition: healed"
}

# fill PATH: takes every free byte of PATH's filesystem.
fill_fs() {
	local f=$1 avail
	avail=$(df -B1 --output=avail "$(dirname "$f")" | tail -n 1 | tr -d ' ')
	fallocate -l "$avail" "$f" 2>/dev/null || head -c "$avail" /dev/zero >"$f" 2>/dev/null
	# Whatever fallocate left (rounding), dd takes.
	dd if=/dev/zero of="$f.2" bs=4k 2>/dev/null
	true
}

fault_shm_full() {
	[ $has_shmfs = 1 ] || return 0
	local n
	filler_shm=/dev/shm/$tag-filler
	fill_fs "$filler_shm"
	event "shm_full: /dev/shm full ($(df -h --output=avail /dev/shm | tail -n 1 | tr -d ' ') free)"
	n=$(pick_node)
	event "shm_full: kill -9 and restart $n while /dev/shm is full"
	daemon_kill "$n" KILL
	daemon_start "$n"
	soak_sleep "$SOAK_HOLD"
	rm -f "$filler_shm" "$filler_shm.2"
	filler_shm=""
	event "shm_full: space freed"
}

fault_spill_full() {
	[ $has_spillfs = 1 ] || return 0
	local n
	filler_spill=$tmp/spill/filler
	fill_fs "$filler_spill"
	event "spill_full: spill filesystem full ($(df -h --output=avail "$tmp/spill" | tail -n 1 | tr -d ' ') free)"
	n=$(pick_node)
	event "spill_full: kill -9 and restart $n while the spill filesystem is full"
	daemon_kill "$n" KILL
	daemon_start "$n"
	soak_sleep "$SOAK_HOLD"
	rm -f "$filler_spill" "$filler_spill.2"
	filler_spill=""
	event "spill_full: space freed"
}

fault_client_kill() {
	[ -n "${driver_pid:-}" ] || return 0
	event "client_kill: SIGKILL a client inside a put"
	kill -USR1 "$driver_pid" 2>/dev/null
	soak_sleep 0.5
}

# Faults this machine can inject, in schedule order.
faults_available() {
	local f out=()
	for f in node_kill client_kill node_stop master_kill partition shm_full spill_full; do
		case $f in
		partition) [ $has_netns = 1 ] || continue ;;
		shm_full) [ $has_shmfs = 1 ] || continue ;;
		spill_full) [ $has_spillfs = 1 ] || continue ;;
		esac
		out+=("$f")
	done
	echo "${out[*]}"
}

# Undoes whatever a fault left behind (partition, full filesystems, a
# stopped or killed daemon) so the pool can recover.
faults_heal() {
	[ -n "$ns" ] && ip netns exec "$ns" nft delete table inet kvpsoak 2>/dev/null
	[ -n "$filler_shm" ] && rm -f "$filler_shm" "$filler_shm.2"
	[ -n "$filler_spill" ] && rm -f "$filler_spill" "$filler_spill.2"
	local name
	for name in "${!dpid[@]}"; do kill -CONT "${dpid[$name]}" 2>/dev/null; done
	for name in master "${nodes[@]}"; do
		[ -n "${dpid[$name]:-}" ] || daemon_start "$name"
	done
}

# Stops every daemon with SIGTERM; one that does not exit 0 is a crash
# (ASan/UBSan reports and leaks make the exit status non-zero).
pool_stop() {
	local name p rc
	for name in "${!dpid[@]}"; do kill -CONT "${dpid[$name]}" 2>/dev/null; kill -TERM "${dpid[$name]}" 2>/dev/null; done
	for name in "${!dpid[@]}"; do
		p=${dpid[$name]}
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$p" 2>/dev/null; then
			echo "$name did not exit 10 s after SIGTERM" >>"$state/crashes"
			event "CRASH: $name did not exit 10 s after SIGTERM"
			kill -KILL "$p" 2>/dev/null
		fi
		wait "$p" 2>/dev/null
		rc=$?
		if [ $rc != 0 ] && [ $rc != 143 ]; then
			echo "$name exit $rc at shutdown" >>"$state/crashes"
			event "CRASH: $name exited with status $rc at shutdown; last log lines:"
			tail -n 20 "$tmp/$name.log" | sed 's/^/    /' >&2
		fi
		unset "dpid[$name]"
	done
}

# Cleanup for traps: kills what is left, removes namespace, mounts, files.
pool_cleanup() {
	local name
	for name in "${!dpid[@]}"; do kill -CONT "${dpid[$name]}" 2>/dev/null; kill -KILL "${dpid[$name]}" 2>/dev/null; done
	[ -n "${driver_pid:-}" ] && kill -TERM "$driver_pid" 2>/dev/null
	wait 2>/dev/null
	[ -n "$va" ] && ip link del "$va" 2>/dev/null
	[ -n "$ns" ] && ip netns del "$ns" 2>/dev/null
	[ $has_spillfs = 1 ] && umount "$tmp/spill" 2>/dev/null
	rm -f /dev/shm/"$tag"-* 2>/dev/null
	[ $has_shmfs = 1 ] && umount /dev/shm 2>/dev/null
	true
}
