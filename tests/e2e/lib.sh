# tests/e2e/lib.sh — helpers for end-to-end scripts; source it:
#
#   . "$(dirname "$0")/lib.sh"
#   e2e_init mytest                   # temp dir $E2E_TMP, cleanup trap, $B
#   need "$B/kvpool-master" curl      # skip (77) when something is missing
#   start_master 'lease_ttl = 2s'     # [master] lines; sets MASTER_* below
#   curl -sf "http://127.0.0.1:$MASTER_HTTP_PORT/health" || fail "health"
#   ok "health"
#
# A whole pool shares one INI and each node adds its own layer:
#
#   pool_ini "[client]" "timeout = 5s"   # [cluster] + [master] + these lines
#   pool_node n1 "segment_size = 64M"    # $E2E_TMP/n1.ini: [node] of n1
#   run_master; run_node n1; wait_nodes n1 20
#   expect 0 kv put k1 /etc/hostname    # exit status checked, output in
#                                       # $E2E_TMP/out and $E2E_TMP/err
#
# Everything started with spawn/run_master/run_node is stopped at exit
# (SIGTERM, then SIGKILL after 3 s), on_cleanup commands run (unmounts,
# /dev/shm files), the temp dir is removed; on failure the last lines of
# every $E2E_TMP/*.log (and of files matching E2E_LOGS) are printed;
# E2E_KEEP=1 keeps the temp dir for a look afterwards. Ports are free
# loopback ports picked by the kernel. Exit codes: 0 pass, 1 fail, 77 skip.
# A script that goes on after a failed check says `bad MESSAGE` and ends
# with e2e_finish. Run directly, this file tests itself.

set -u

E2E_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
B=${KVP_BUILD:-$E2E_ROOT/build}
E2E_TMP=""
E2E_NAME=test
E2E_PIDS=()
E2E_CLEANUP=()
E2E_LOGS=("*.log")	# shown on failure; a script may add patterns
E2E_PROBLEMS=()

fail() { echo "FAIL: $*"; exit 1; }
ok() { echo "ok - $*"; }
skip() { echo "skip: $*"; exit 77; }
# skip_in_san_pass WHY: a test whose C code the first pass and the unit tests
# already run, and which the ASan pass (make SANITIZE=1 test, build-san) would
# only repeat slowly (a browser, a Prometheus, torch under the ASan runtime).
# A test PKI under $pki (the caller sets it, e.g. $E2E_TMP/pki), openssl's
# messages in $pki/openssl.log. tls_ca NAME: a self-signed CA;
# tls_cert NAME CA [SAN]: a key and certificate signed by CA, for the names
# a client checks (default: localhost and 127.0.0.1).
tls_ca() {
	mkdir -p "$pki"
	openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
		-subj "/CN=kvpool test $1" -keyout "$pki/$1.key" -out "$pki/$1.crt" \
		2>>"$pki/openssl.log" || fail "openssl: CA $1"
}
tls_cert() {
	printf 'subjectAltName = %s\n' "${3:-DNS:localhost, IP:127.0.0.1}" >"$pki/$1.ext"
	openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
		-keyout "$pki/$1.key" -out "$pki/$1.csr" 2>>"$pki/openssl.log" &&
	openssl x509 -req -in "$pki/$1.csr" -CA "$pki/$2.crt" -CAkey "$pki/$2.key" \
		-CAcreateserial -days 2 -extfile "$pki/$1.ext" -out "$pki/$1.crt" \
		2>>"$pki/openssl.log" || fail "openssl: certificate $1"
}
skip_in_san_pass() { [ "$(basename "$B")" = build-san ] && skip "not in the ASan pass: $*"; return 0; }
# bad MESSAGE: a failed check that does not stop the others (e2e_finish).
bad() { echo "FAIL: $*"; E2E_PROBLEMS+=("$*"); }

# e2e_finish: exits 1 listing every bad check, else says PASS.
e2e_finish() {
	if [ ${#E2E_PROBLEMS[@]} -gt 0 ]; then
		echo "FAIL: ${#E2E_PROBLEMS[@]} problem(s):"
		printf '  - %s\n' "${E2E_PROBLEMS[@]}"
		exit 1
	fi
	echo "PASS $(basename "$0")"
}

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
	local rc=$? p i pat
	trap - EXIT
	trap '' PIPE	# a closed stdout must not cut the cleanup short
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
		for pat in "${E2E_LOGS[@]}"; do
			for p in "$E2E_TMP"/$pat; do
				[ -f "$p" ] || continue
				echo "--- last lines of $(basename "$p")"
				tail -n 25 "$p"
			done
		done
	fi
	if [ -n "${E2E_KEEP:-}" ] && [ -n "$E2E_TMP" ]; then
		echo "kept $E2E_TMP (E2E_KEEP)"
	elif [ -n "$E2E_TMP" ]; then
		rm -rf "$E2E_TMP"
	fi
	exit "$rc"
}

# e2e_init NAME: private temp dir /tmp/kvp-e2e-NAME-PID.XXXXXX, cleanup trap.
e2e_init() {
	E2E_NAME=${1:-test}
	E2E_TMP=$(mktemp -d "/tmp/kvp-e2e-$E2E_NAME-$$.XXXXXX") || fail "mktemp"
	trap e2e_cleanup EXIT
	trap 'exit 1' HUP INT TERM PIPE	# through the cleanup, too
}

# on_cleanup 'COMMAND': run at exit (last registered runs first).
on_cleanup() { E2E_CLEANUP+=("$1"); }

# free_ports N: N distinct free loopback ports, space-separated, below the
# kernel's ephemeral range (tests/free_ports.py says why).
free_ports() {
	if command -v python3 >/dev/null; then
		python3 "$E2E_ROOT/tests/free_ports.py" "$1"
		return
	fi
	# Without python: random ports nobody listens on, below the
	# usual ephemeral range (32768-60999)
	local out="" p n=0
	while [ $n -lt "$1" ]; do
		p=$((10000 + (RANDOM * 32768 + RANDOM) % 22000))
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

# waitfor SECONDS CMD...: polls CMD every 50 ms until it succeeds; 1 if it
# did not within SECONDS (a bound for liveness, not a measurement: a slow
# machine only makes the test slower).
waitfor() {
	local end=$((SECONDS + $1))
	shift
	while :; do
		"$@" && return 0
		[ $SECONDS -lt $end ] || return 1
		sleep 0.05
	done
}

# alive PID: the process runs. gone PID: it does not (waitfor 5 gone PID).
alive() { kill -0 "$1" 2>/dev/null; }
gone() { ! kill -0 "$1" 2>/dev/null; }

# spawn LOGNAME CMD...: runs CMD in the background with stdout+stderr in
# $E2E_TMP/LOGNAME.log; stopped at exit. Sets SPAWN_PID.
spawn() {
	local log=$1
	shift
	"$@" >>"$E2E_TMP/$log.log" 2>&1 &
	SPAWN_PID=$!
	E2E_PIDS+=("$SPAWN_PID")
}

# adopt PID: a process started here otherwise (CMD & with redirections of
# its own) is stopped at exit too.
adopt() { E2E_PIDS+=("$1"); }

# forget PID: no longer stopped at exit (it was waited for).
forget() {
	local p keep=()
	for p in "${E2E_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	E2E_PIDS=("${keep[@]+"${keep[@]}"}")
}

# stop_pid PID [SIGNAL]: sends SIGNAL (default TERM), waits for the process
# and returns its exit status; it is no longer stopped at exit.
stop_pid() {
	local rc=0
	kill -"${2:-TERM}" "$1" 2>/dev/null
	wait "$1" 2>/dev/null || rc=$?
	forget "$1"
	return $rc
}

# expect RC CMD...: runs CMD with stdout in $E2E_TMP/out and stderr in
# $E2E_TMP/err; fails (showing both) unless it exits RC.
expect() {
	local want=$1 rc
	shift
	"$@" >"$E2E_TMP/out" 2>"$E2E_TMP/err"
	rc=$?
	if [ "$rc" != "$want" ]; then
		echo "FAIL: '$*' exited $rc, expected $want"
		sed 's/^/  stdout: /' "$E2E_TMP/out" | head -n 10
		sed 's/^/  stderr: /' "$E2E_TMP/err" | head -n 10
		exit 1
	fi
}

# pyjson FILE EXPR [ARG...]: true if the Python expression EXPR holds for the
# JSON document r in FILE ("-": stdin); the ARGs are the list args.
pyjson() {
	local f=$1 expr=$2
	shift 2
	python3 -c "
import json, sys
r = json.load(sys.stdin if sys.argv[1] == '-' else open(sys.argv[1]))
args = sys.argv[2:]
sys.exit(0 if ($expr) else 1)" "$f" "$@"
}

# jval FILE EXPR: prints the Python expression EXPR over the JSON document r
# in FILE ("-": stdin).
jval() {
	python3 -c "
import json, sys
r = json.load(sys.stdin if sys.argv[1] == '-' else open(sys.argv[1]))
print($2)" "$1"
}

# http_get URL: the body (curl, or python3 where curl is missing); non-zero
# on a connection or HTTP error.
http_get() {
	if command -v curl >/dev/null; then
		curl -sf "$1"
		return
	fi
	python3 -c '
import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1" 2>/dev/null
}

# metric NAME[{labels}] [PORT]: a sample's value from /metrics (master's by default).
metric() {
	http_get "http://127.0.0.1:${2:-$MASTER_HTTP_PORT}/metrics" |
		awk -v n="$1" '$1 == n { print $2; exit }'
}

# fuse_unmount DIR: unmounts the FUSE file system at DIR, if one is there
# (lazily when it is busy or its daemon is gone).
fuse_unmount() {
	grep -q " $1 fuse" /proc/mounts 2>/dev/null || return 0
	fusermount3 -u "$1" 2>/dev/null || fusermount3 -u -z "$1" 2>/dev/null || umount -l "$1" 2>/dev/null
}

# ---- the master ----

# master_ini [LINE...]: picks fresh loopback ports for a kvpool-master and
# writes its INI: [master] listen, http_listen and metadata_listen, then the
# LINEs (write "[section]" lines to add other sections; a section may
# repeat, a key may not). Sets MASTER_PORT, MASTER_HTTP_PORT,
# MASTER_MD_PORT, MASTER_ADDR (host:port), MASTER_INI (default
# $E2E_TMP/master.ini; set it first to write elsewhere), MASTER_LOG.
master_ini() {
	local ports line
	ports=$(free_ports 3) || fail "free_ports"
	read -r MASTER_PORT MASTER_HTTP_PORT MASTER_MD_PORT <<<"$ports"
	MASTER_ADDR=127.0.0.1:$MASTER_PORT
	MASTER_INI=${MASTER_INI:-$E2E_TMP/master.ini}
	MASTER_LOG=$E2E_TMP/master.log
	{
		echo "[master]"
		echo "listen = $MASTER_ADDR"
		echo "http_listen = 127.0.0.1:$MASTER_HTTP_PORT"
		echo "metadata_listen = 127.0.0.1:$MASTER_MD_PORT"
		for line in "$@"; do echo "$line"; done
	} >"$MASTER_INI"
}

# run_master: starts kvpool-master -c MASTER_INI (after a stop: on the same
# ports again), logging to MASTER_LOG, and waits until it listens. Sets
# MASTER_PID. Extra arguments for the binary: MASTER_ARGS (array).
run_master() {
	spawn master "$B/kvpool-master" -c "$MASTER_INI" "${MASTER_ARGS[@]+"${MASTER_ARGS[@]}"}"
	MASTER_PID=$SPAWN_PID
	wait_port "$MASTER_PORT" 10 || fail "kvpool-master did not listen on $MASTER_ADDR"
}

# start_master [LINE...]: master_ini LINE..., then run_master.
start_master() {
	master_ini "$@"
	run_master
}

# stop_master [SIGNAL]: stops it (default TERM) and returns its exit status.
stop_master() { stop_pid "$MASTER_PID" "${1:-TERM}"; }

# in_netns NS CMD...: runs CMD in network namespace NS (made with `ip netns
# add`) without `ip netns exec`'s private mount namespace: a long-lived
# process there would hold a copy of every mount made meanwhile (a FUSE view
# of another test stays alive after its unmount), and nothing here needs
# the namespace's own /sys.
in_netns() {
	local ns=$1
	shift
	nsenter --net="/run/netns/$ns" -- "$@"
}

# ---- a pool: master, nodes and clients of one INI ----

# pool_ini [LINE...]: writes POOL_INI ($E2E_TMP/pool.ini), the configuration
# that the master, the nodes and the clients (kv) of a private pool share:
# [cluster] master = MASTER_ADDR, then what master_ini writes, LINEs
# included. Start the master with run_master.
pool_ini() {
	POOL_INI=$E2E_TMP/pool.ini
	MASTER_INI=$POOL_INI
	master_ini "$@"
	{
		printf '[cluster]\nmaster = %s\n' "$MASTER_ADDR"
		cat "$POOL_INI"
	} >"$POOL_INI.new" && mv "$POOL_INI.new" "$POOL_INI"
}

# pool_node NAME [LINE...]: writes $E2E_TMP/NAME.ini, node NAME's layer on
# POOL_INI: [node] name = NAME, listen and http_listen on fresh loopback
# ports, segment kvpt-TEST-PID-NAME (its /dev/shm file is removed at exit),
# then the LINEs (more [node] keys, or other sections). Sets NODE_PORT,
# NODE_HTTP_PORT, NODE_SEG (the segment's name) for this node.
pool_node() {
	local name=$1 ports line
	shift
	ports=$(free_ports 2) || fail "free_ports"
	read -r NODE_PORT NODE_HTTP_PORT <<<"$ports"
	NODE_SEG=kvpt-$E2E_NAME-$$-$name
	on_cleanup "rm -f '/dev/shm/$NODE_SEG'"
	{
		echo "[node]"
		echo "name = $name"
		echo "listen = 127.0.0.1:$NODE_PORT"
		echo "http_listen = 127.0.0.1:$NODE_HTTP_PORT"
		echo "segment = $NODE_SEG"
		for line in "$@"; do echo "$line"; done
	} >"$E2E_TMP/$name.ini"
}

# run_node NAME [ARG...]: starts kvpool-node -c POOL_INI -c NAME.ini ARG...,
# logging to $E2E_TMP/NAME.log. Sets NODE_PID.
run_node() {
	local name=$1
	shift
	spawn "$name" "$B/kvpool-node" -c "$POOL_INI" -c "$E2E_TMP/$name.ini" "$@"
	NODE_PID=$SPAWN_PID
}

# netns_veth: a network namespace joined to this one by a veth pair, both
# removed at exit, with addresses picked here (10.x.y.1 this side, 10.x.y.2
# inside). Sets NETNS (its name, for `ip netns exec`), NETNS_HOST and
# NETNS_PEER (the two addresses) and NETNS_VETH (this side's interface).
# Returns 1, saying why on stderr, where it cannot (not root, no `ip`, no
# namespaces, the subnet taken): the caller decides whether that is a skip.
netns_veth() {
	local vb=kvb$$ sub i
	[ "$(id -u)" = 0 ] || { echo "needs root for network namespaces" >&2; return 1; }
	command -v ip >/dev/null || { echo "ip (iproute2) is not installed" >&2; return 1; }
	NETNS=kvpns$$
	NETNS_VETH=kva$$
	ip netns add "$NETNS" 2>"$E2E_TMP/netns-add.err" ||
		{ echo "cannot create a network namespace: $(cat "$E2E_TMP/netns-add.err")" >&2; return 1; }
	on_cleanup "ip netns del $NETNS"
	sub="10.$((200 + ($$ >> 8) % 50)).$(($$ % 256))"
	if ip -4 addr show | grep -q " $sub\."; then
		echo "subnet $sub.0/24 is already in use here" >&2
		return 1
	fi
	ip link add "$NETNS_VETH" type veth peer name "$vb" || { echo "cannot create a veth pair" >&2; return 1; }
	on_cleanup "ip link del $NETNS_VETH"
	ip link set "$vb" netns "$NETNS" || { echo "cannot move $vb into $NETNS" >&2; return 1; }
	NETNS_HOST=$sub.1
	NETNS_PEER=$sub.2
	ip addr add "$NETNS_HOST/24" dev "$NETNS_VETH"
	ip link set "$NETNS_VETH" up
	ip -n "$NETNS" addr add "$NETNS_PEER/24" dev "$vb"
	ip -n "$NETNS" link set "$vb" up
	ip -n "$NETNS" link set lo up
	# Without ping the first connection across tells.
	command -v ping >/dev/null || return 0
	for i in $(seq 50); do
		in_netns "$NETNS" ping -c 1 -W 1 "$NETNS_HOST" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$NETNS_PEER cannot reach $NETNS_HOST over the veth pair" >&2
	return 1
}

# kv ARG...: the kvpool CLI with the pool's configuration.
kv() { "$B/kvpool" -c "$POOL_INI" "$@"; }

# py_build [PYTHON] — builds the Python module for the tree under test
# ($B) and sets PY_RUN, the prefix that runs an interpreter with it: under
# build-san the extension is ASan-instrumented and the runtime must be
# loaded first (the interpreter is not instrumented and keeps memory at
# exit); under build-tsan it skips. Skips without Python headers; fails when
# the module does not build.
PY_RUN=()
py_build() {
	local py=${1:-${PYTHON:-python3}} inc flags=()
	inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
	if [ -z "$inc" ] || [ ! -f "$inc/Python.h" ]; then
		skip "Python development headers missing (apt-get install python3-dev)"
	fi
	PY_RUN=()
	case $(basename "$B") in
	build-tsan) skip "the Python module is not tested under ThreadSanitizer" ;;
	build-san)
		flags=(SANITIZE=1)
		PY_RUN=(env "LD_PRELOAD=$(${CC:-cc} -print-file-name=libasan.so)"
			"ASAN_OPTIONS=detect_leaks=0:${ASAN_OPTIONS:-}")
		;;
	esac
	# BUILD as the Makefile spells it (relative), so its dependency files apply.
	make --no-print-directory -s -C "$E2E_ROOT" BUILD="${B#"$E2E_ROOT"/}" PYTHON="$py" \
		"${flags[@]}" python >"$E2E_TMP/make-python.log" 2>&1 ||
		fail "make python: $(tail -n 5 "$E2E_TMP/make-python.log")"
}

# hold_lease KEY...: a reader that dies in the middle of its reads: HELLO
# and GET of the KEYs on a raw connection to MASTER_ADDR (token from the
# file E2E_TOKEN_FILE names, if set), then exit without LEASE_RELEASE, so
# each key keeps a read lease for the master's lease_ttl. Fails unless
# every GET succeeded.
hold_lease() {
	python3 - "$MASTER_ADDR" "${E2E_TOKEN_FILE:-}" "$@" <<'PY' || fail "hold_lease $*"
import socket, struct, sys
host, port = sys.argv[1].rsplit(":", 1)
tok = open(sys.argv[2]).readline().strip().encode() if sys.argv[2] else b""
s = socket.create_connection((host, int(port)), timeout=10)
def st(b): return struct.pack("<H", len(b)) + b
def call(op, body, reqid):
    s.sendall(struct.pack("<IBBHiIQQ", 0x3150564b, 1, 0, op, 0, len(body), reqid, 0) + body)
    h = b""
    while len(h) < 32: h += s.recv(32 - len(h))
    _, _, _, _, status, blen, _, _ = struct.unpack("<IBBHiIQQ", h)
    b = b""
    while len(b) < blen: b += s.recv(blen - len(b))
    return status, b
status, _ = call(1, struct.pack("<H", 1) + st(tok) + st(b"hold_lease") + st(b"e2e"), 1)
if status: sys.exit("HELLO: %d" % status)
keys = [k.encode() for k in sys.argv[3:]]
status, b = call(19, struct.pack("<I", len(keys)) + b"".join(st(k) for k in keys), 2)
if status: sys.exit("GET: %d" % status)
off = 4
for k in keys:
    item, nrep = struct.unpack_from("<i32xB", b, off)
    if item: sys.exit("GET %s: %d" % (k.decode(), item))
    off += 37 + 21 * nrep
s.close()
PY
}

# pool_nodes: the names of the nodes the master lists, sorted, one line.
pool_nodes() {
	kv info --json 2>/dev/null | jval - '" ".join(sorted(n["name"] for n in r["nodes"]))' 2>/dev/null
}

# wait_nodes "NAME..." [SECONDS]: until the master lists exactly these nodes
# (default 30 s); 1, saying what it lists, if not. Fails at once if a
# process started here exited meanwhile.
wait_nodes() {
	local want=$1 end=$((SECONDS + ${2:-30})) p
	while [ $SECONDS -lt $end ]; do
		[ "$(pool_nodes)" = "$want" ] && return 0
		for p in "${E2E_PIDS[@]}"; do
			kill -0 "$p" 2>/dev/null || fail "process $p exited while waiting for nodes '$want'"
		done
		sleep 0.1
	done
	echo "master lists '$(pool_nodes)', expected '$want' after ${2:-30}s"
	return 1
}

# ---- network namespaces ----

# netns_add NAME: a network namespace NAME joined to this one by a veth
# pair on a /30 of its own (10.X.Y.1 here, 10.X.Y.2 inside, the default
# route), removed at exit; namespaces reach each other through this one
# (ip_forward on while the test runs). Sets NETNS_IP (inside) and NETNS_GW
# (here). Skips (77) without root or `ip netns`.
NETNS_SEQ=0
netns_add() {
	local ns=$1 a="kvh$$n$NETNS_SEQ" b="kvi$$n$NETNS_SEQ" i
	need ip
	[ "$(id -u)" = 0 ] || skip "needs root for network namespaces"
	# 10.(100..199).(0..249).(4k..4k+3): from the pid, one /30 per call
	local base="10.$((100 + $$ % 100)).$((($$ >> 7) % 250))" last=$((NETNS_SEQ * 4))
	[ "$NETNS_SEQ" -lt 63 ] || fail "netns_add: too many namespaces"
	ip -4 addr show | grep -q " $base\.$((last + 1))/" && fail "$base.$((last + 1)) is in use here"
	NETNS_GW=$base.$((last + 1))
	NETNS_IP=$base.$((last + 2))
	NETNS_SEQ=$((NETNS_SEQ + 1))
	ip netns add "$ns" 2>"$E2E_TMP/netns.err" ||
		skip "cannot create a network namespace: $(cat "$E2E_TMP/netns.err")"
	on_cleanup "ip netns del '$ns'"
	ip link add "$a" type veth peer name "$b" || fail "cannot create a veth pair"
	on_cleanup "ip link del '$a'"
	ip link set "$b" netns "$ns" || fail "cannot move $b into $ns"
	ip addr add "$NETNS_GW/30" dev "$a"
	ip link set "$a" up
	ip -n "$ns" addr add "$NETNS_IP/30" dev "$b"
	ip -n "$ns" link set "$b" up
	ip -n "$ns" link set lo up
	ip -n "$ns" route add default via "$NETNS_GW"
	# namespaces reach each other through this one (restored at exit)
	if [ "$NETNS_SEQ" = 1 ]; then
		on_cleanup "sysctl -qw net.ipv4.ip_forward=$(sysctl -n net.ipv4.ip_forward)"
		sysctl -qw net.ipv4.ip_forward=1
	fi
	command -v ping >/dev/null || return 0	# (iputils-ping is not a dependency)
	for i in $(seq 50); do
		in_netns "$ns" ping -c 1 -W 1 "$NETNS_GW" >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	fail "namespace $ns: $NETNS_GW does not answer"
}

# ---- etcd (high availability, docs/ha.md) ----

# start_etcd [MEMBERS] [netns]: a private etcd (Debian's etcd-server) of
# MEMBERS members (default 1), its data and logs on /dev/shm (tmpfs: no
# fsync stalls on a busy disk), everything stopped and removed at exit.
# Members listen on fresh loopback ports, or with "netns" (root only) each
# in a network namespace of its own (netns_add), so that one can be cut off
# with nftables. Sets ETCD_EPS ("h:p;h:p"), ETCD_URL ("etcd://h:p;h:p"),
# ETCD_EP[i] ("h:p"), ETCD_NS[i] ("" or the namespace). Skips (77) without
# etcd.
start_etcd() {
	local n=${1:-1} mode=${2:-} i cluster="" ports
	need etcd curl
	ETCD_DIR=$(mktemp -d "/dev/shm/kvpt-etcd-$E2E_NAME-$$.XXXXXX") || fail "mktemp /dev/shm"
	on_cleanup "rm -rf '$ETCD_DIR'"
	ports=($(free_ports $((2 * n)))) || fail "free_ports"
	ETCD_N=$n
	ETCD_EPS=""
	for ((i = 0; i < n; i++)); do
		ETCD_NS[i]=""
		ETCD_HOST[i]=127.0.0.1
		if [ "$mode" = netns ]; then
			ETCD_NS[i]=kvpe$$m$i
			netns_add "${ETCD_NS[i]}"
			ETCD_HOST[i]=$NETNS_IP
		fi
		ETCD_CPORT[i]=${ports[2 * i]}
		ETCD_PPORT[i]=${ports[2 * i + 1]}
		ETCD_EP[i]=${ETCD_HOST[i]}:${ETCD_CPORT[i]}
		cluster="$cluster${cluster:+,}m$i=http://${ETCD_HOST[i]}:${ETCD_PPORT[i]}"
		ETCD_EPS="$ETCD_EPS${ETCD_EPS:+;}${ETCD_EP[i]}"
	done
	ETCD_CLUSTER=$cluster
	ETCD_URL="etcd://$ETCD_EPS"
	for ((i = 0; i < n; i++)); do etcd_run "$i"; done
	for ((i = 0; i < n; i++)); do
		waitfor 30 etcd_ok "$i" || fail "etcd member $i did not become healthy"
	done
}

# etcd_run I: starts member I (again, on its ports and data).
etcd_run() {
	local i=$1 url=http://${ETCD_HOST[$1]}
	local cmd=(etcd --name "m$i" --data-dir "$ETCD_DIR/m$i.data"
		--listen-client-urls "$url:${ETCD_CPORT[i]}" --advertise-client-urls "$url:${ETCD_CPORT[i]}"
		--listen-peer-urls "$url:${ETCD_PPORT[i]}" --initial-advertise-peer-urls "$url:${ETCD_PPORT[i]}"
		--initial-cluster "$ETCD_CLUSTER" --initial-cluster-state new
		--initial-cluster-token "kvpt-$$" --heartbeat-interval 100 --election-timeout 1000
		--logger zap)
	# nsenter itself, not in_netns: spawn's pid must be the daemon's
	if [ -n "${ETCD_NS[i]}" ]; then
		spawn "etcd-m$i" nsenter --net="/run/netns/${ETCD_NS[i]}" -- "${cmd[@]}"
	else
		spawn "etcd-m$i" "${cmd[@]}"
	fi
	ETCD_PID[i]=$SPAWN_PID
}

# etcd_ok I: member I answers /health as part of a cluster with a leader.
etcd_ok() { curl -sf -m 2 "http://${ETCD_EP[$1]}/health" 2>/dev/null | grep -q '"health":"true"'; }

# etcd_kill I [SIGNAL]: signals member I (default KILL; then it is reaped).
etcd_kill() {
	local sig=${2:-KILL}
	if [ "$sig" = KILL ]; then stop_pid "${ETCD_PID[$1]}" KILL; else kill -"$sig" "${ETCD_PID[$1]}"; fi
}

# ---- masters with high availability (docs/ha.md) ----

# ha_pool_ini: POOL_INI for a pool whose masters elect a leader through the
# etcd of start_etcd and whose nodes and clients follow it: [cluster]
# master = ETCD_URL (and a fresh token_file when HA_TOKEN=1: masters in
# namespaces listen off loopback), [master] ha = etcd on ETCD_EPS with a
# cluster_id of this test, lease 2s, [node] heartbeat_interval =
# HA_HEARTBEAT (500ms) and segment_size = HA_SEGMENT (128M), client
# timeout 5s, log level info.
ha_pool_ini() {
	POOL_INI=$E2E_TMP/pool.ini
	if [ "${HA_TOKEN:-0}" = 1 ]; then
		head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$E2E_TMP/token"
		echo >>"$E2E_TMP/token"
		chmod 600 "$E2E_TMP/token"
	fi
	{
		printf '[cluster]\nmaster = %s\n' "$ETCD_URL"
		[ "${HA_TOKEN:-0}" = 1 ] && printf 'token_file = %s\n' "$E2E_TMP/token"
		printf '[master]\nha = etcd\nha_endpoints = %s\ncluster_id = %s-%s\nha_lease_ttl = 2s\n' \
			"$ETCD_EPS" "$E2E_NAME" "$$"
		printf '[node]\nheartbeat_interval = %s\nsegment_size = %s\n' "${HA_HEARTBEAT:-500ms}" \
			"${HA_SEGMENT:-128M}"
		printf '[client]\ntimeout = 5s\n[log]\nlevel = info\n'
	} >"$POOL_INI"
}

# ha_master NAME [netns]: master NAME's layer on POOL_INI (listen and
# http_listen on fresh ports; with "netns", root only, in a network
# namespace of its own, reached through its veth) and a start. Sets
# HA_PID[NAME], HA_RPC[NAME] (host:port), HA_HTTP[NAME] (host:port),
# HA_NS[NAME] ("" or the namespace). ha_run NAME starts it again.
declare -A HA_PID HA_RPC HA_HTTP HA_NS
ha_master() {
	local ip=127.0.0.1 p h
	HA_NS[$1]=""
	if [ "${2:-}" = netns ]; then
		HA_NS[$1]=kvpm$$$1
		netns_add "${HA_NS[$1]}"
		ip=$NETNS_IP
	fi
	read -r p h <<<"$(free_ports 2)"
	HA_RPC[$1]=$ip:$p
	HA_HTTP[$1]=$ip:$h
	printf '[master]\nlisten = %s\nhttp_listen = %s\n' "${HA_RPC[$1]}" "${HA_HTTP[$1]}" \
		>"$E2E_TMP/$1.ini"
	ha_run "$1"
}
ha_run() {
	if [ -n "${HA_NS[$1]}" ]; then	# (nsenter: see etcd_run)
		spawn "$1" nsenter --net="/run/netns/${HA_NS[$1]}" -- "$B/kvpool-master" -c "$POOL_INI" -c "$E2E_TMP/$1.ini"
	else
		spawn "$1" "$B/kvpool-master" -c "$POOL_INI" -c "$E2E_TMP/$1.ini"
	fi
	HA_PID[$1]=$SPAWN_PID
}

# ha_health NAME: master NAME's /health text. ha_is_leader NAME: it leads
# (/health/leader is 200). ha_standby NAME: it says it stands by.
# ha_leader: the name (of A and B) of the one leading, else 1. ha_other
# NAME: the other of A and B. ha_metric NAME SAMPLE: a /metrics value.
ha_health() { curl -sf -m 1 "http://${HA_HTTP[$1]}/health" 2>/dev/null; }
ha_is_leader() { curl -sf -m 1 -o /dev/null "http://${HA_HTTP[$1]}/health/leader"; }
ha_standby() { ha_health "$1" | grep -q '"role":"standby"'; }
ha_leader() { local m; for m in A B; do ha_is_leader "$m" && { echo "$m"; return 0; }; done; return 1; }
ha_other() { [ "$1" = A ] && echo B || echo A; }
ha_metric() { curl -sf -m 1 "http://${HA_HTTP[$1]}/metrics" | awk -v n="$2" '$1 == n { print $2 }'; }

# ha_pool_up [LINE...]: the usual HA pool — one etcd, ha_pool_ini LINE...,
# masters A and B, a leader elected; sets L (the leader) and S (the
# standby). Nodes are the caller's.
ha_pool_up() {
	start_etcd 1
	ha_pool_ini "$@"
	ha_master A
	ha_master B
	waitfor 10 ha_leader >/dev/null || fail "no leader elected"
	L=$(ha_leader)
	S=$(ha_other "$L")
}

# ---- self-test ----

# Run directly (tests/run.sh runs every tests/e2e/*.sh), this file tests
# itself and a master started with it: ports, start/stop, /health, /metrics,
# SIGHUP, expect, the JSON helpers, waitfor, the cleanup trap.
e2e_lib_selftest() {
	e2e_init lib
	need "$B/kvpool-master" curl python3
	local a b
	read -r a b <<<"$(free_ports 2)"
	[ -n "$a" ] && [ -n "$b" ] && [ "$a" != "$b" ] || fail "free_ports: '$a' '$b'"
	ok "free_ports"
	start_master "lease_ttl = 3s" "[log]" "level = info"
	curl -sf "http://127.0.0.1:$MASTER_HTTP_PORT/health" >/dev/null || fail "/health"
	ok "master on $MASTER_ADDR, /health"
	[ "$(metric kvpool_master_keys)" = 0 ] || fail "metric kvpool_master_keys"
	ok "metric"
	sed -i 's/^lease_ttl = 3s/lease_ttl = 4s/' "$MASTER_INI"
	kill -HUP "$MASTER_PID"
	waitfor 5 grep -q "lease_ttl = 4s" "$MASTER_LOG" || fail "SIGHUP reload not logged"
	ok "SIGHUP, waitfor"
	(expect 0 false) >"$E2E_TMP/expect.txt" && fail "expect 0 false passed"
	grep -q "exited 1, expected 0" "$E2E_TMP/expect.txt" || fail "expect's message: $(cat "$E2E_TMP/expect.txt")"
	expect 3 sh -c 'echo out; echo err >&2; exit 3'
	[ "$(cat "$E2E_TMP/out") $(cat "$E2E_TMP/err")" = "out err" ] || fail "expect's output files"
	echo '{"a": [1, 2], "b": "x"}' >"$E2E_TMP/j.json"
	pyjson "$E2E_TMP/j.json" 'r["a"] == [1, 2] and r["b"] == args[0]' x || fail "pyjson true"
	pyjson "$E2E_TMP/j.json" 'r["b"] == args[0]' y && fail "pyjson false"
	[ "$(jval - 'sum(r["a"])' <"$E2E_TMP/j.json")" = 3 ] || fail "jval"
	ok "expect, pyjson, jval"
	(bad "a check"; e2e_finish) >"$E2E_TMP/finish.txt" && fail "e2e_finish passed after bad"
	grep -q "^FAIL: 1 problem" "$E2E_TMP/finish.txt" || fail "e2e_finish's message: $(cat "$E2E_TMP/finish.txt")"
	ok "bad, e2e_finish"
	on_cleanup "rm -f '$E2E_TMP/cleanup-ran'"
	stop_master || fail "kvpool-master exit status $?"
	ok "stop_master: exit 0"
	spawn sleeper sleep 60		# the trap stops it
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	e2e_lib_selftest
	exit 0
fi
