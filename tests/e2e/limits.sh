#!/bin/bash
# limits.sh — the resource bounds are configurable, enforced by the daemons
# (not only by well-behaved clients) and fail with clear errors. A master and
# a node with small limits: cluster.max_object_size = 1M, cluster.max_frame =
# 8K, cluster.max_batch = 16, master.max_connections = 8,
# node.max_connections = 8.
#  - object size: exactly 1 MiB works; 1 MiB + 1 is refused by the CLI, and
#    by the master when the client believes a larger limit (KVP_ETOOBIG);
#    PUT_START of 0 bytes or over the limit is refused on the wire;
#  - frame size: a frame over max_frame is refused (KVP_ETOOBIG) by master
#    and node and the daemon keeps serving; libkvpool splits batches whose
#    keys would exceed it (16 keys of ~900 bytes each > 8K);
#  - batch: 17 keys in one frame are refused (KVP_ELIMIT); a client that
#    believes a larger max_batch gets that error, clearly; libkvpool splits
#    batches larger than max_batch (the soak driver, --batch 32, --strict);
#  - connections: over master.max_connections / node.max_connections a
#    connection gets one KVP_ELIMIT frame and is closed; the CLI says
#    "resource limit"; once connections close, service resumes; peers that
#    connect and never say HELLO are closed within 12 s, so they cannot hold
#    the limit.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init limits
KVP=$B/kvpool MASTER=$B/kvpool-master NODE=$B/kvpool-node DRIVER=$B/soak/kvp-soak-driver
need "$KVP" "$MASTER" "$NODE" "$DRIVER" python3

tmp=$E2E_TMP
tag=kvpt-lim-$$
on_cleanup "rm -f /dev/shm/'$tag'-*"
declare -A pid=()

# expect_fail PATTERN WHAT CMD...: CMD must exit non-zero with PATTERN (ERE) in stderr.
expect_fail() {
	local pat=$1 what=$2 rc
	shift 2
	timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ $rc != 0 ] && [ $rc != 124 ] && grep -Eq "$pat" "$tmp/err"; then
		ok "$what: $(head -n 1 "$tmp/err")"
	else
		bad "$what: exit $rc, stderr: $(head -n 2 "$tmp/err")"
	fi
}

read -r mport mhttp dport dhttp <<<"$(free_ports 4)"
cat >"$tmp/pool.ini" <<EOF
[cluster]
master = 127.0.0.1:$mport
max_object_size = 1M
max_frame = 8K
max_batch = 16
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
metadata_server = false
max_connections = 8
lease_ttl = 500ms
[node]
name = ln
listen = 127.0.0.1:$dport
http_listen = 127.0.0.1:$dhttp
segment = $tag-ln
segment_size = 64M
heartbeat_interval = 300ms
max_connections = 8
[client]
timeout = 5s
connections_per_node = 2
[log]
level = info
EOF
kv() { "$KVP" -c "$tmp/pool.ini" "$@"; }
spawn master "$MASTER" -c "$tmp/pool.ini"
pid[master]=$SPAWN_PID
spawn node "$NODE" -c "$tmp/pool.ini"
pid[node]=$SPAWN_PID
up=0
for _ in $(seq 150); do
	kv info 2>/dev/null | grep -q "^nodes: *1" && { up=1; break; }
	sleep 0.2
done
[ $up = 1 ] || fail "master and node did not come up"
ok "master and node up with small limits"

cat >"$tmp/lim.py" <<'EOF'
# Raw frames against one port (src/common/wire.h). Subcommands print one result.
import socket, struct, sys, time
MAGIC, VER, HDR = 0x3150564B, 1, 32
def s16(b): return struct.pack("<H", len(b)) + b
def frame(op, body=b"", reqid=1, plen=0, blen=None):
    return struct.pack("<IBBHiIQQ", MAGIC, VER, 0, op, 0, len(body) if blen is None else blen, reqid, plen) + body
def conn(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    return s
def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise EOFError
        b += c
    return b
def reply(s):
    m, v, f, op, st, bl, rq, pl = struct.unpack("<IBBHiIQQ", recv_exact(s, HDR))
    body = recv_exact(s, bl) if bl else b""
    if pl: recv_exact(s, pl)
    return st, body
def hello(s):
    s.sendall(frame(1, struct.pack("<H", 1) + s16(b"") + s16(b"lim") + s16(b"lim-host")))
    return reply(s)[0]
def closed(s):
    try:
        s.settimeout(3)
        return s.recv(1) == b""
    except OSError:
        return True
cmd, port = sys.argv[1], int(sys.argv[2])
if cmd == "putstart":            # putstart PORT LEN -> item status
    s = conn(port); assert hello(s) == 0
    s.sendall(frame(16, struct.pack("<BIIQI", 1, 0, 0, 0, 1) + s16(b"lim/raw") + struct.pack("<Q", int(sys.argv[3]))))
    st, body = reply(s)
    print(st if st else struct.unpack_from("<Ii", body)[1])
elif cmd == "bigframe":          # bigframe PORT OP BODYLEN -> status, closed
    s = conn(port); assert hello(s) == 0
    n = int(sys.argv[4])
    s.sendall(frame(int(sys.argv[3]), b"\0" * n))
    try:
        st = reply(s)[0]
    except (EOFError, OSError):
        st = "closed"
    print(st, "closed" if closed(s) else "open")
elif cmd == "batch":             # batch PORT N -> frame status / first item status
    s = conn(port); assert hello(s) == 0
    n = int(sys.argv[3])
    body = struct.pack("<I", n) + b"".join(s16(b"lim/k%d" % i) for i in range(n))
    s.sendall(frame(20, body))
    st, rb = reply(s)
    print(st if st else ("items " + " ".join(str(x) for x in struct.unpack_from("<I%di" % n, rb)[1:])))
elif cmd == "hold":              # hold PORT N SECS [hello]: opens N, prints what each got
    n, secs, auth = int(sys.argv[3]), float(sys.argv[4]), len(sys.argv) > 5
    held, refused = [], 0
    for i in range(n):
        s = conn(port)
        if auth:
            try:
                st = hello(s)
            except (EOFError, OSError):
                st = "closed"
            if st != 0:
                refused += 1
                s.close()
                continue
        held.append(s)
    if not auth:                 # unauthenticated: see which the server refused
        time.sleep(0.5)
        for s in list(held):
            s.setblocking(False)
            try:
                d = s.recv(64)
                if len(d) >= HDR and struct.unpack_from("<i", d, 8)[0] == -21 or d == b"":
                    refused += 1
                    held.remove(s)
            except BlockingIOError:
                pass
            except OSError:
                refused += 1
                held.remove(s)
    print("held %d refused %d" % (len(held), refused), flush=True)
    t0 = time.time()
    while time.time() - t0 < secs:
        time.sleep(0.2)
    gone = 0
    for s in held:
        s.setblocking(False)
        try:
            if s.recv(64) == b"":
                gone += 1
        except BlockingIOError:
            pass
        except OSError:
            gone += 1
    print("closed by the server after %.0f s: %d of %d" % (secs, gone, len(held)), flush=True)
EOF
lim() { timeout 60 python3 "$tmp/lim.py" "$@"; }

# ---- object size -------------------------------------------------------------------
head -c $((1 << 20)) /dev/urandom >"$tmp/1m"
head -c $(((1 << 20) + 1)) /dev/urandom >"$tmp/1m1"
kv put lim/exact "$tmp/1m" && kv get lim/exact "$tmp/1m.got" && cmp -s "$tmp/1m" "$tmp/1m.got" &&
	ok "an object of exactly max_object_size (1 MiB) is stored and read back" ||
	bad "an object of exactly max_object_size"
expect_fail "KVP_ETOOBIG" "the CLI refuses max_object_size + 1" "$KVP" -c "$tmp/pool.ini" put lim/over "$tmp/1m1"
expect_fail "KVP_ETOOBIG" "the master refuses max_object_size + 1 from a client that believes 1G" \
	"$KVP" -c "$tmp/pool.ini" -o cluster.max_object_size=1G put lim/over "$tmp/1m1"
r=$(lim putstart "$mport" $(((1 << 20) + 1)))
[ "$r" = -18 ] && ok "PUT_START of 1 MiB + 1 on the wire: KVP_ETOOBIG" || bad "PUT_START of 1 MiB + 1: $r"
r=$(lim putstart "$mport" 0)
[ -n "$r" ] && [ "$r" -lt 0 ] && ok "PUT_START of 0 bytes on the wire: refused ($r)" || bad "PUT_START of 0 bytes: $r"
kv exists -q lim/over && bad "lim/over exists after the refusals"

# ---- frame size ----------------------------------------------------------------------
r=$(lim bigframe "$mport" 20 $((8192 + 1)))
case $r in -18*) ok "master: a body of max_frame + 1 is refused: $r" ;; *) bad "master, body of max_frame + 1: $r" ;; esac
r=$(lim bigframe "$dport" 48 $((65536 + 1)))
case $r in -18*) ok "node: a body over its limit is refused: $r" ;; *) bad "node, oversized body: $r" ;; esac
kv info >/dev/null || bad "the master stopped serving after the oversized frame"
long=$(printf 'lim/long/%0880d/' 0)
timeout 60 "$KVP" -c "$tmp/pool.ini" bench --op put --prefix "$long" --size 1-1K --count 32 --batch 16 \
	--keep --json >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ] && python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["ok"] == 32 and r["errors"] == 0 else 1)' "$tmp/out"; then
	ok "libkvpool splits batches of 16 keys x ~900 bytes to fit max_frame 8K"
else
	bad "batches of 16 keys of ~900 bytes under max_frame 8K: exit $rc, $(grep -c . "$tmp/err") errors, the first:" \
		"$(head -n 1 "$tmp/err" | sed 's/\(lim\/long\/0\{8\}\)0*/\1.../')"
fi

# ---- keys per batch --------------------------------------------------------------------
r=$(lim batch "$mport" 16)
case $r in "items "*) ok "16 keys in one EXISTS: answered" ;; *) bad "16 keys in one EXISTS: $r" ;; esac
r=$(lim batch "$mport" 17)
[ "$r" = -21 ] && ok "17 keys in one EXISTS (max_batch 16): KVP_ELIMIT" || bad "17 keys in one EXISTS: $r"
timeout 60 "$KVP" -c "$tmp/pool.ini" -o cluster.max_batch=64 bench --op put --prefix lim/b64/ --size 1-1K \
	--count 64 --batch 64 --json >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc != 0 ] && grep -q "KVP_ELIMIT" "$tmp/out" "$tmp/err"; then
	ok "a client that believes max_batch 64 gets KVP_ELIMIT from the master"
else
	bad "client with max_batch 64 against a master with 16: exit $rc $(head -c 300 "$tmp/out") $(head -n 3 "$tmp/err")"
fi
timeout 60 "$DRIVER" -c "$tmp/pool.ini" --clients 2 --tcp 1 --seconds 3 --keys 64 --size 1-64K --batch 32 \
	--prefix lim/drv/ --strict --quiet >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc = 0 ] && grep -Eq "batch_(get|put) +calls [1-9]" "$tmp/out"; then
	ok "libkvpool splits batches of up to 32 keys (max_batch 16): strict workload clean"
else
	bad "batches over max_batch through libkvpool: exit $rc"
	head -n 20 "$tmp/out" "$tmp/err"
fi

# ---- connections ------------------------------------------------------------------------
for which in master node; do
	if [ $which = master ]; then port=$mport; else port=$dport; fi
	lim hold "$port" 12 4 hello >"$tmp/hold.out" 2>&1 &
	hp=$!
	for _ in $(seq 50); do grep -q "^held" "$tmp/hold.out" && break; sleep 0.1; done
	read -r _ held _ refused <<<"$(head -n 1 "$tmp/hold.out")"
	if [ -n "$refused" ] && [ "$refused" -ge 4 ] && [ "$held" -le 8 ]; then
		ok "$which: 12 connections against max_connections 8: $held held, $refused refused"
	else
		bad "$which: 12 connections against max_connections 8: $(head -n 1 "$tmp/hold.out")"
	fi
	if [ $which = master ]; then
		expect_fail "KVP_ELIMIT|limit" "master full: the CLI says so" "$KVP" -c "$tmp/pool.ini" info
	else
		expect_fail "KVP_ELIMIT|limit" "node full: a TCP get says so" \
			"$KVP" -c "$tmp/pool.ini" -o client.protocol=tcp get lim/exact
	fi
	wait $hp
	back=0
	for _ in $(seq 50); do
		if [ $which = master ]; then kv info >/dev/null 2>&1 && back=1; else
			kv -o client.protocol=tcp get lim/exact "$tmp/back" 2>/dev/null && cmp -s "$tmp/back" "$tmp/1m" && back=1
		fi
		[ $back = 1 ] && break
		sleep 0.2
	done
	[ $back = 1 ] && ok "$which: service resumes once the connections close" ||
		bad "$which: still refusing after the connections closed"
	# Peers that never say HELLO must not keep the limit: the node closes
	# them after 5 s, the master after 10 s; wait 12 s.
	lim hold "$port" 12 12 >"$tmp/hold.out" 2>&1
	echo "   $which, 12 connections without HELLO: $(tr '\n' ';' <"$tmp/hold.out")"
	gone=$(sed -n 's/^closed by the server after [0-9]* s: \([0-9]*\) of \([0-9]*\)/\1 \2/p' "$tmp/hold.out")
	read -r g n <<<"$gone"
	if [ -n "$g" ] && [ "$g" = "$n" ]; then
		ok "$which: connections that never send HELLO are closed (they cannot hold max_connections)"
	else
		bad "$which: connections that never send HELLO stay open (${g:-?} of ${n:-?} closed after 12 s):" \
			"anyone who can connect can hold max_connections and lock out clients"
	fi
done

# the daemons logged the refusals, naming the limit
grep -q "max_connections" "$tmp/master.log" && ok "master log names max_connections" ||
	bad "master log does not mention max_connections"
for p in node master; do
	kill -0 "${pid[$p]}" 2>/dev/null || bad "$p died"
done

e2e_finish
