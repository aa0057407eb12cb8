#!/bin/bash
# security.sh — what the cluster token and the grants protect, checked with
# real daemons on private ports (DESIGN: Safety; threat model in
# docs/reliability.md):
#  1. token: a HELLO with a missing, wrong, truncated or extended token is
#     refused (KVP_EAUTH, connection closed) on the master RPC port and the
#     node data port, and every request before HELLO too; the CLI and a node
#     with the wrong token are refused; the token is not in /metrics; a
#     token file readable by others stops start-up;
#  2. grants: a client that holds the token cannot WRITE into an extent it
#     was not granted: a random grant, a grant computed with a guessed
#     secret, its own grant moved to another offset, length or generation,
#     a payload over alloc_len — all KVP_EGRANT and the target object keeps
#     its bytes; a grant replayed after its put ended, or after the space
#     went to another object, must not change what readers get; a crafted
#     write with a valid grant works (so the refusals are not vacuous);
#  3. files: the segment (and spill file, when the node creates one) is mode
#     0600 and user nobody cannot read it; with node.shm_group it is 0660
#     and readable by that group (the check can tell);
#  4. no token: master and node listeners configured on 0.0.0.0 / [::]
#     bind 127.0.0.1 only (ss -ltn), and the host's other address refuses;
#     with a token the same configuration does listen on 0.0.0.0.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init sec
KVP=$B/kvpool MASTER=$B/kvpool-master NODE=$B/kvpool-node
need "$KVP" "$MASTER" "$NODE" python3 ss
python3 -c 'import ctypes; ctypes.CDLL("libxxhash.so.0").XXH3_64bits' 2>/dev/null ||
	skip "libxxhash.so.0 (XXH3_64bits) not loadable from python"

tmp=$E2E_TMP
chmod 711 "$tmp"	# others may traverse (to reach the spill dir), not list
tag=kvpt-sec-$$
on_cleanup "rm -f /dev/shm/'$tag'-*"
declare -A pid=()

stop() {	# stop NAME: SIGTERM, wait
	[ -n "${pid[$1]:-}" ] || return 0
	stop_pid "${pid[$1]}"
	unset "pid[$1]"
}
node_count() {	# node_count INI COUNT: until the master lists COUNT nodes (30 s)
	for _ in $(seq 150); do
		"$KVP" -c "$1" info 2>/dev/null | grep -q "^nodes: *$2\$" && return 0
		sleep 0.2
	done
	return 1
}

read -r mport mhttp dport dhttp <<<"$(free_ports 4)"
mkdir -p "$tmp/spill"
chmod 755 "$tmp/spill"
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/token"
echo >>"$tmp/token"
chmod 600 "$tmp/token"
token=$(head -n 1 "$tmp/token")
cat >"$tmp/pool.ini" <<EOF
[cluster]
master = 127.0.0.1:$mport
token_file = $tmp/token
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
metadata_server = false
[client]
timeout = 5s
[log]
level = info
EOF
node_ini() {	# node_ini TOKEN_FILE [EXTRA]
	sed "s|^token_file = .*|token_file = $1|" "$tmp/pool.ini"
	cat <<EOF
[node]
name = sn
listen = 127.0.0.1:$dport
http_listen = 127.0.0.1:$dhttp
segment = $tag-sn
segment_size = 32M
heartbeat_interval = 300ms
${2:-}
[spill]
path = $tmp/spill/$tag-sn.spill
size = 16M
EOF
}
node_ini "$tmp/token" >"$tmp/node.ini"
kv() { "$KVP" -c "$tmp/pool.ini" "$@"; }

spawn master "$MASTER" -c "$tmp/pool.ini"
pid[master]=$SPAWN_PID
spawn node "$NODE" -c "$tmp/node.ini"
pid[node]=$SPAWN_PID
node_count "$tmp/pool.ini" 1 || fail "master and node did not come up"
ok "master (rpc $mport) and node (data $dport) up with a cluster token"

# ---- the wire helper -----------------------------------------------------------
cat >"$tmp/sec.py" <<'EOF'
# Speaks src/common/wire.h directly. Subcommands:
#   auth PORT TOKEN          HELLOs with bad tokens and requests before HELLO
#   grants MPORT TOKEN KVP INI  the grant checks (see security.sh)
import ctypes, hmac, hashlib, json, os, socket, struct, subprocess, sys, time

MAGIC, VER, HDR = 0x3150564B, 1, 32
EAUTH, EGRANT = -11, -20
xxh = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
xxh.restype = ctypes.c_uint64
xxh.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
failures = 0

def check(name, cond, detail=""):
    global failures
    print("%s - %s%s" % ("ok" if cond else "FAIL", name, (": " + detail) if detail else ""), flush=True)
    if not cond:
        failures += 1

def s16(b): return struct.pack("<H", len(b)) + b

def frame(op, body=b"", reqid=1, plen=0):
    return struct.pack("<IBBHiIQQ", MAGIC, VER, 0, op, 0, len(body), reqid, plen) + body

class Conn:
    def __init__(self, port, host="127.0.0.1"):
        self.s = socket.create_connection((host, port), timeout=5)
    def send(self, b): self.s.sendall(b)
    def recv_exact(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c: raise EOFError
            b += c
        return b
    def reply(self):
        h = self.recv_exact(HDR)
        m, v, f, op, st, bl, rq, pl = struct.unpack("<IBBHiIQQ", h)
        body = self.recv_exact(bl) if bl else b""
        payload = self.recv_exact(pl) if pl else b""
        return st, body, payload
    def closed(self):
        try:
            self.s.settimeout(3)
            return self.s.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
    def hello(self, token, role=1):
        self.send(frame(1, struct.pack("<H", role) + s16(token) + s16(b"sec") + s16(b"sec-host")))
        st, body, _ = self.reply()
        # a master's epoch: its grants carry it, and so must a WRITE
        self.epoch = struct.unpack_from("<Q", body)[0] if not st and len(body) >= 8 else 0
        return st
    def close(self): self.s.close()

def cmd_auth(port, token):
    t = token.encode()
    bad = {"missing": b"", "wrong": bytes(len(t)), "truncated": t[:-1], "extended": t + b"0",
           "upper-case": t.upper() if t.upper() != t else t[:-1] + b"X", "one bit off": bytes([t[0] ^ 1]) + t[1:]}
    for name, tok in bad.items():
        for role in (1, 2, 3):
            c = Conn(port)
            st = c.hello(tok, role)
            closed = c.closed()
            check("port %d: HELLO role %d with a %s token refused and closed" % (port, role, name),
                  st == EAUTH and closed, "status %d, closed %s" % (st, closed))
            c.close()
    for op, body in [(19, struct.pack("<I", 1) + s16(b"k")), (27, b""), (7, b""), (2, b"x" * 40),
                     (48, struct.pack("<BQQ", 0, 0, 4096)), (49, b"\0" * 45), (24, b"\0" * 11)]:
        c = Conn(port)
        c.send(frame(op, body))
        try:
            st = c.reply()[0]
        except (EOFError, OSError):
            st = "closed"
        closed = c.closed()
        check("port %d: opcode %d before HELLO refused and closed" % (port, op),
              st == EAUTH and closed, "status %s, closed %s" % (st, closed))
        c.close()
    c = Conn(port)
    st = c.hello(t)
    check("port %d: HELLO with the right token accepted" % port, st == 0, "status %d" % st)
    c.close()

def image(key, value, gen, uuid):
    h = struct.pack("<IHHIIQQQQQ", 0x5850564B, 1, 0, len(key), 0, len(value), xxh(value, len(value)),
                    gen, uuid, time.time_ns())
    hc = xxh(h + key, len(h) + len(key))
    return h + struct.pack("<Q", hc) + key + value

def segments(m):
    m.send(frame(7))
    st, body, _ = m.reply()
    assert st == 0, st
    segs, p = {}, 4
    n = struct.unpack_from("<I", body)[0]
    def rstr():
        nonlocal p
        l = struct.unpack_from("<H", body, p)[0]; p += 2
        v = body[p:p + l]; p += l
        return v
    for _ in range(n):
        sid = struct.unpack_from("<I", body, p)[0]; p += 4
        rstr(); rstr(); rstr()
        p += 8 + 8 + 8
        uuid = struct.unpack_from("<Q", body, p)[0]; p += 8
        ep = rstr().decode()
        bl = struct.unpack_from("<I", body, p)[0]; p += 4 + bl
        p += 1 + 8 + 8 + 8 + 8 + 4
        segs[sid] = (uuid, ep)
    return segs

def put_start(m, key, n):
    m.send(frame(16, struct.pack("<BIIQI", 1, 0, 0, 0, 1) + s16(key) + struct.pack("<Q", n)))
    st, body, _ = m.reply()
    cnt, ist, gen, nrep = struct.unpack_from("<IiQB", body)
    if st or ist or nrep != 1:
        return None
    sid, off, alloc = struct.unpack_from("<IQQ", body, 17)
    grant = body[17 + 20:17 + 36]
    return dict(gen=gen, sid=sid, off=off, alloc=alloc, grant=grant)

def put_end(m, key, gen, value):
    m.send(frame(17, struct.pack("<I", 1) + s16(key) + struct.pack("<QQ", gen, xxh(value, len(value)))))
    st, body, _ = m.reply()
    return st or struct.unpack_from("<Ii", body)[1]

def write(ep, token, sid, gen, off, alloc, grant, payload):
    host, port = ep.rsplit(":", 1)
    d = Conn(int(port), host)
    assert d.hello(token) == 0
    d.send(frame(49, struct.pack("<IQQQQ", sid, gen, off, alloc, EPOCH) + grant, 5, len(payload)) +
           payload)
    try:
        st = d.reply()[0]
    except (EOFError, OSError):
        st = "closed"
    d.close()
    return st

def cli_get(kvp, ini, key):
    r = subprocess.run([kvp, "-c", ini, "get", key], capture_output=True)
    return r.returncode, r.stdout, r.stderr.decode(errors="replace").strip()

def cli_stat(kvp, ini, key):
    r = subprocess.run([kvp, "-c", ini, "stat", "--json", key], capture_output=True, text=True)
    return json.loads(r.stdout) if r.returncode == 0 else None

EPOCH = 0  # the master's (cmd_grants)

def cmd_grants(mport, token, kvp, ini, victim_file):
    global EPOCH
    t = token.encode()
    m = Conn(mport)
    assert m.hello(t) == 0
    EPOCH = m.epoch
    segs = segments(m)
    victim = open(victim_file, "rb").read()
    st = cli_stat(kvp, ini, "sec/victim")
    rep = st["replicas"][0]
    sid, off, alloc, gen = rep["segment_id"], rep["offset"], rep["alloc_len"], st["generation"]
    uuid, ep = segs[sid]
    evil = image(b"sec/victim", os.urandom(len(victim)), gen, uuid)
    guess = hmac.new(os.urandom(32), struct.pack("<IQQQQ", sid, gen, off, alloc, EPOCH),
                     hashlib.sha256).digest()[:16]
    for name, grant in [("random grant", os.urandom(16)), ("grant from a guessed secret", guess),
                        ("all-zero grant", bytes(16))]:
        r = write(ep, t, sid, gen, off, alloc, grant, evil)
        check("WRITE over another client's object with a %s refused" % name, r == EGRANT, "status %s" % r)
    rc, out, err = cli_get(kvp, ini, "sec/victim")
    check("the victim object still has its own bytes", rc == 0 and out == victim, err)

    # Our own put: its grant must not stretch to anything else.
    key = b"sec/mine"
    value = os.urandom(100000)
    g = put_start(m, key, len(value))
    check("PUT_START of our own object", g is not None)
    img = image(key, value, g["gen"], uuid)
    G = (g["sid"], g["gen"], g["off"], g["alloc"])
    for name, (s_, gen_, off_, alloc_) in [
            ("at the victim's offset", (G[0], G[1], off, G[3])),
            ("at the next aligned offset", (G[0], G[1], G[2] + 4096, G[3])),
            ("with a larger alloc_len", (G[0], G[1], G[2], G[3] + 4096)),
            ("with another generation", (G[0], G[1] + 1, G[2], G[3])),
            ("for another segment id", (G[0] + 1000, G[1], G[2], G[3]))]:
        r = write(ep, t, s_, gen_, off_, alloc_, g["grant"], img)
        check("our grant used %s refused" % name, r == EGRANT, "status %s" % r)
    r = write(ep, t, *G, g["grant"], img + os.urandom(G[3] - len(img) + 1))
    check("a payload larger than alloc_len refused", r == EGRANT, "status %s" % r)
    rc, out, err = cli_get(kvp, ini, "sec/victim")
    check("the victim object still has its own bytes", rc == 0 and out == victim, err)
    r = write(ep, t, *G, g["grant"], img)
    check("WRITE with our valid grant accepted (the refusals above are not vacuous)", r == 0, "status %s" % r)
    r = put_end(m, key, g["gen"], value)
    check("PUT_END of our object", r == 0, "status %s" % r)
    rc, out, err = cli_get(kvp, ini, key.decode())
    check("our crafted object reads back", rc == 0 and out == value, err)

    # Replay after the put ended: values are immutable.
    other = os.urandom(len(value))
    r = write(ep, t, *G, g["grant"], image(key, other, g["gen"], uuid))
    rc, out, err = cli_get(kvp, ini, key.decode())
    check("a grant replayed after PUT_END does not change the object (node said %s)" % r,
          rc == 0 and out == value,
          "" if rc == 0 and out == value else
          "get exit %d, %s" % (rc, "the REPLAYED bytes" if out == other else err or "other bytes"))

    # Replay after the space went to another object.
    subprocess.run([kvp, "-c", ini, "rm", "--force", key.decode()], capture_output=True)
    z = None
    for i in range(50):
        zk = b"sec/reuse-%d" % i
        zg = put_start(m, zk, len(value))
        if zg and zg["sid"] == G[0] and zg["off"] == G[2]:
            z = (zk, zg)
            break
        if zg:   # not the same place: give it back
            m.send(frame(18, struct.pack("<I", 1) + s16(zk) + struct.pack("<Q", zg["gen"])))
            m.reply()
    if z is None:
        print("note - the allocator did not reuse the freed extent in 50 tries; reuse replay not checked")
    else:
        zk, zg = z
        zval = os.urandom(len(value))
        assert write(ep, t, zg["sid"], zg["gen"], zg["off"], zg["alloc"], zg["grant"],
                     image(zk, zval, zg["gen"], uuid)) == 0
        assert put_end(m, zk, zg["gen"], zval) == 0
        r = write(ep, t, *G, g["grant"], image(key, other, g["gen"], uuid))
        rc, out, err = cli_get(kvp, ini, zk.decode())
        check("an old grant replayed after its extent was reused for another object is refused "
              "and that object keeps its bytes (node said %s)" % r,
              rc == 0 and out == zval,
              "" if rc == 0 and out == zval else
              "get exit %d: %s" % (rc, "the REPLAYED bytes" if out == other else err or "other bytes"))
    m.close()

if sys.argv[1] == "auth":
    cmd_auth(int(sys.argv[2]), sys.argv[3])
elif sys.argv[1] == "grants":
    cmd_grants(int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6])
sys.exit(1 if failures else 0)
EOF

# ---- 1. the token ------------------------------------------------------------------
for port in "$mport" "$dport"; do
	timeout 120 python3 "$tmp/sec.py" auth "$port" "$token" >"$tmp/auth.out" 2>&1
	rc=$?
	grep -v "^ok" "$tmp/auth.out"
	[ $rc = 0 ] || bad "token checks on port $port (see above)"
	echo "ok - port $port: $(grep -c '^ok' "$tmp/auth.out") token checks"
done

printf 'not-the-token-%s\n' "$$" >"$tmp/wrong.token"
chmod 600 "$tmp/wrong.token"
sed "s|^token_file = .*|token_file = $tmp/wrong.token|" "$tmp/pool.ini" >"$tmp/wrong.ini"
"$KVP" -c "$tmp/wrong.ini" info >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc != 0 ] && grep -q "KVP_EAUTH" "$tmp/err"; then
	ok "the CLI with a wrong token is refused: $(head -n 1 "$tmp/err")"
else
	bad "CLI with a wrong token: exit $rc, $(head -n 2 "$tmp/err")"
fi
node_ini "$tmp/wrong.token" | sed "s|^name = sn|name = intruder|; s|^segment = .*|segment = $tag-intruder|; s|^listen = .*|listen = 127.0.0.1:0|; s|^http_listen = .*|http_listen = 127.0.0.1:0|; s|^path = .*|path = |; s|^size = 16M|size = 0|" \
	>"$tmp/intruder.ini"
spawn intruder "$NODE" -c "$tmp/intruder.ini"
pid[intruder]=$SPAWN_PID
sleep 2
if kv info --json | python3 -c 'import json,sys; sys.exit(0 if [n["name"] for n in json.load(sys.stdin)["nodes"]] == ["sn"] else 1)'; then
	ok "a node with the wrong token does not join the pool"
else
	bad "a node with the wrong token joined: $(kv info 2>&1 | head -n 3)"
fi
stop intruder
for port in "$mhttp" "$dhttp"; do
	python3 -c '
import sys, urllib.request
sys.stdout.write(urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode())' \
		"$port" >"$tmp/metrics" 2>&1
	if [ -s "$tmp/metrics" ] && ! grep -qF "$token" "$tmp/metrics"; then
		ok "/metrics on port $port does not show the token"
	else
		bad "/metrics on port $port: empty or shows the token"
	fi
done
cp "$tmp/token" "$tmp/open.token"
chmod 644 "$tmp/open.token"
sed "s|^token_file = .*|token_file = $tmp/open.token|; s|^listen = .*|listen = 127.0.0.1:0|; s|^http_listen = .*|http_listen = 127.0.0.1:0|" \
	"$tmp/pool.ini" >"$tmp/open.ini"
timeout 10 "$MASTER" -c "$tmp/open.ini" >"$tmp/open.log" 2>&1
rc=$?
if [ $rc != 0 ] && [ $rc != 124 ] && grep -qi "token" "$tmp/open.log"; then
	ok "a token file readable by others stops start-up: $(grep -i token "$tmp/open.log" | head -n 1)"
else
	bad "master with a 0644 token file: exit $rc, $(head -n 2 "$tmp/open.log")"
fi

# ---- 2. grants --------------------------------------------------------------------
head -c 200000 /dev/urandom >"$tmp/victim.bin"
kv -o client.protocol=tcp put sec/victim "$tmp/victim.bin" || fail "put sec/victim"
timeout 120 python3 "$tmp/sec.py" grants "$mport" "$token" "$KVP" "$tmp/pool.ini" "$tmp/victim.bin" \
	>"$tmp/grants.out" 2>&1
rc=$?
cat "$tmp/grants.out"
[ $rc = 0 ] || bad "grant checks (see above)"

# ---- 3. file modes ------------------------------------------------------------------
seg=/dev/shm/$tag-sn
mode=$(stat -c %a "$seg")
[ "$mode" = 600 ] && ok "segment $seg is mode 0600" || bad "segment $seg is mode $mode"
if command -v runuser >/dev/null && id nobody >/dev/null 2>&1; then
	if runuser -u nobody -- head -c 4096 "$seg" >/dev/null 2>&1; then
		bad "user nobody can read the segment"
	else
		ok "user nobody cannot read the segment"
	fi
	spill=$tmp/spill/$tag-sn.spill
	if [ -e "$spill" ]; then
		mode=$(stat -c %a "$spill")
		[ "$mode" = 600 ] && ok "spill file is mode 0600" || bad "spill file is mode $mode"
		runuser -u nobody -- head -c 4096 "$spill" >/dev/null 2>&1 &&
			bad "user nobody can read the spill file" || ok "user nobody cannot read the spill file"
	else
		echo "note - the node did not create its spill file ($spill); spill mode not checked"
	fi
	# With shm_group the segment is 0660 and the group can read it: the
	# check above would notice a readable file.
	stop node
	rm -f "$seg"
	node_count "$tmp/pool.ini" 0 || fail "the master still lists the stopped node"
	node_ini "$tmp/token" "shm_group = $(id -gn nobody)" >"$tmp/node-g.ini"
	spawn node-g "$NODE" -c "$tmp/node-g.ini"
	pid[node]=$SPAWN_PID
	node_count "$tmp/pool.ini" 1 || fail "node with shm_group did not come up"
	mode=$(stat -c %a "$seg")
	grp=$(stat -c %G "$seg")
	if [ "$mode" = 660 ] && [ "$grp" = "$(id -gn nobody)" ] &&
		runuser -u nobody -- head -c 4096 "$seg" >/dev/null 2>&1; then
		ok "with shm_group the segment is 0660, group $grp, and readable by it (positive control)"
	else
		bad "with shm_group = $(id -gn nobody): mode $mode group $grp, readable by nobody: $(
			runuser -u nobody -- head -c 1 "$seg" >/dev/null 2>&1 && echo yes || echo no)"
	fi
else
	echo "note - runuser or user nobody missing: readability by other users not checked"
fi
stop node
stop master

# ---- 4. no token: loopback only ---------------------------------------------------------
read -r p1 p2 p3 p4 p5 <<<"$(free_ports 5)"
wild() {	# wild TOKEN_LINE
	cat <<EOF
[cluster]
master = 127.0.0.1:$p1
$1
[master]
listen = 0.0.0.0:$p1
http_listen = 0.0.0.0:$p2
metadata_server = true
metadata_listen = [::]:$p3
[node]
name = wn
listen = 0.0.0.0:$p4
http_listen = [::]:$p5
advertise = 127.0.0.1:$p4
segment = $tag-wn
segment_size = 16M
[log]
level = notice
EOF
}
listeners() {	# local addresses listening on our five ports
	ss -ltnH | awk -v ports=" $p1 $p2 $p3 $p4 $p5 " '{
		n = split($4, a, ":"); if (index(ports, " " a[n] " ")) print $4 }' | sort
}
other_ip=$(hostname -I 2>/dev/null | tr ' ' '\n' | grep -v '^127\.' | grep -v ':' | head -n 1)
for mode in none token; do
	if [ $mode = none ]; then wild "" >"$tmp/wild.ini"; else wild "token_file = $tmp/token" >"$tmp/wild.ini"; fi
	spawn "wild-master-$mode" "$MASTER" -c "$tmp/wild.ini"
	pid[wmaster]=$SPAWN_PID
	spawn "wild-node-$mode" "$NODE" -c "$tmp/wild.ini"
	pid[wnode]=$SPAWN_PID
	for _ in $(seq 100); do [ "$(listeners | wc -l)" -ge 5 ] && break; sleep 0.1; done
	got=$(listeners | tr '\n' ' ')
	if [ $mode = none ]; then
		if [ "$(listeners | wc -l)" = 5 ] && ! listeners | grep -qv '^127\.0\.0\.1:'; then
			ok "no token: all five listeners configured on 0.0.0.0 / [::] bound to 127.0.0.1 ($got)"
		else
			bad "no token: listeners are: $got (expected five on 127.0.0.1)"
		fi
		if [ -n "$other_ip" ]; then
			if python3 -c 'import socket, sys; socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)' \
				"$other_ip" "$p1" 2>/dev/null; then
				bad "no token: the master RPC port answers on $other_ip"
			else
				ok "no token: the master RPC port refuses connections on $other_ip"
			fi
		fi
		grep -qi "loopback\|127.0.0.1" "$tmp/wild-master-$mode.log" ||
			bad "no token: the master does not say it narrowed its listeners"
		for d in master node; do
			grep -q "kvpool token new" "$tmp/wild-$d-$mode.log" &&
				grep -q "$tmp/wild.ini" "$tmp/wild-$d-$mode.log" ||
				bad "no token: the $d does not say how to serve other hosts (token new, the INI it read)"
		done
	else
		if listeners | grep -q "^0\.0\.0\.0:$p1\$" && listeners | grep -q "^0\.0\.0\.0:$p4\$"; then
			ok "with a token the same configuration listens on 0.0.0.0 ($got)"
		else
			bad "with a token: listeners are $got"
		fi
	fi
	stop wnode
	stop wmaster
	rm -f /dev/shm/"$tag"-wn
done

e2e_finish
