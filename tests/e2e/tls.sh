#!/bin/bash
# tls.sh — [tls] on every TCP connection, with real daemons on private
# ports and a throw-away CA made here with openssl(1):
#  1. a master, a node and the kvpool CLI with TLS (mutual: verify_peer):
#     put/get/ls round trip byte for byte (1 MiB random, 4 KiB, many keys
#     in one batch through the data port); the node mounted over TLS; the
#     FUSE view (kvpool mount) reading a file;
#  2. a plain-TCP client (TLS off) is refused with "TLS required" on both
#     sides, a raw plain HELLO on the RPC and data ports gets KVP_EAUTH, and
#     the daemons keep serving;
#  3. a client whose certificate comes from another CA is refused (mutual
#     TLS), and so is a client that does not trust the server's CA;
#  4. replay: the bytes a TLS client sent (captured by a relay) re-sent on a
#     fresh connection are refused and store nothing;
#  5. a peer that opens a connection and says nothing is dropped after the
#     handshake timeout, and the loop serves others meanwhile;
#  6. each daemon logs once whether kernel TLS was used;
#  7. [tls] http: the master's and the node's HTTP ports serve HTTPS with
#     the same certificate (curl --cacert): /metrics, /health and the
#     metadata store with a Bearer token, kvpool top; plain HTTP to them gets no answer
#     and the daemons keep serving.
# The standby masters' FOLLOW stream is covered by ha_standby.sh run with
# the [tls] keys in the environment (KVPOOL_TLS_ENABLED=true and
# KVPOOL_TLS_CERT/KEY/CA/VERIFY_PEER: every process then speaks TLS).
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init tls
need "$B/kvpool" "$B/kvpool-master" "$B/kvpool-node" openssl python3 cmp curl

tmp=$E2E_TMP
pki=$tmp/pki
mkdir -p "$pki"

tls_ca ca
tls_ca evil
tls_cert server ca
tls_cert client ca
tls_cert mallory evil

# the cluster token guards the metadata store (section 7)
head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tmp/admin.tok"
chmod 600 "$tmp/admin.tok"
TOKEN=$(cat "$tmp/admin.tok")
pool_ini "metadata_server = true" "[cluster]" "token_file = $tmp/admin.tok" \
	"[client]" "protocol = tcp" "[tls]" "enabled = true" "cert = $pki/server.crt" "key = $pki/server.key" \
	"ca = $pki/ca.crt" "verify_peer = true" "http = true"
pool_node n1 "segment_size = 64M"
# clients: the pool's configuration with the client's own certificate
client_ini() {	# client_ini FILE CERT CA [enabled]
	sed -e "/^cert = /c cert = $pki/$2.crt" -e "/^key = /c key = $pki/$2.key" \
	    -e "/^ca = /c ca = $pki/$3.crt" -e "/^enabled = /c enabled = ${4:-true}" \
	    "$POOL_INI" >"$1"
}
client_ini "$tmp/client.ini" client ca
client_ini "$tmp/plain.ini" client ca false
client_ini "$tmp/mallory.ini" mallory ca	# trusts us; its certificate is not ours
client_ini "$tmp/naive.ini" client evil	# does not trust the server's CA
C="$tmp/client.ini"

run_master
run_node n1
wait_nodes n1 20 || fail "the node did not mount over TLS"
ok "node mounted over TLS (master RPC)"

# 1. round trips
head -c 1048576 /dev/urandom >"$tmp/big"
head -c 4096 /dev/urandom >"$tmp/small"
expect 0 "$B/kvpool" -c "$C" put tls/big "$tmp/big"
expect 0 "$B/kvpool" -c "$C" put tls/small "$tmp/small"
expect 0 "$B/kvpool" -c "$C" get tls/big "$tmp/big.out"
expect 0 "$B/kvpool" -c "$C" get tls/small "$tmp/small.out"
cmp -s "$tmp/big" "$tmp/big.out" || fail "1 MiB value differs after a TLS round trip"
cmp -s "$tmp/small" "$tmp/small.out" || fail "4 KiB value differs after a TLS round trip"
expect 0 "$B/kvpool" -c "$C" ls tls/
grep -q "tls/big" "$tmp/out" && grep -q "tls/small" "$tmp/out" || fail "ls misses keys: $(cat "$tmp/out")"
ok "put/get/ls over TLS, byte for byte (1 MiB, 4 KiB)"

# the FUSE view (kvpool mount: libkvpool inside) reads through TLS too
if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null; then
	mnt=$tmp/mnt
	mkdir "$mnt"
	on_cleanup "fuse_unmount '$mnt'"
	spawn mount "$B/kvpool" -c "$C" mount -f "$mnt"
	mpid=$SPAWN_PID
	waitfor 10 mountpoint -q "$mnt" || fail "kvpool mount (TLS) did not mount within 10 s"
	cmp -s "$mnt/tls/big" "$tmp/big" || fail "MNT/tls/big differs (FUSE over TLS)"
	fusermount3 -u "$mnt" || fail "fusermount3 -u"
	waitfor 5 gone "$mpid" || fail "kvpool mount did not exit after unmount"
	wait "$mpid"
	forget "$mpid"
	ok "the FUSE view reads a 1 MiB file over TLS, byte for byte"
else
	echo "note: /dev/fuse or fusermount3 missing, the FUSE view not tested"
fi

# a batch through the data port: many values, pipelined frames on one connection
for i in $(seq 1 40); do head -c $((4096 + i * 1000)) /dev/urandom >"$tmp/v$i"; done
for i in $(seq 1 40); do echo "tls/b$i $tmp/v$i"; done >"$tmp/list"
while read -r k f; do "$B/kvpool" -c "$C" put "$k" "$f" >/dev/null 2>>"$tmp/err" || fail "put $k"; done <"$tmp/list"
while read -r k f; do
	"$B/kvpool" -c "$C" get "$k" "$f.out" >/dev/null 2>>"$tmp/err" || fail "get $k"
	cmp -s "$f" "$f.out" || fail "$k differs"
done <"$tmp/list"
expect 0 "$B/kvpool" -c "$C" bench --op put --size 4K --count 256 --batch 32 --path tcp
expect 0 "$B/kvpool" -c "$C" bench --op get --size 4K --count 256 --batch 32 --path tcp
ok "40 values of 5-44 KiB round trip over TLS; 4 KiB batches of 32 (bench, data port)"

# 2. plain TCP against the TLS cluster
expect_fail_with() {	# expect_fail_with PATTERN CMD...: non-zero exit, PATTERN on stderr
	local pat=$1
	shift
	"$@" >"$tmp/out" 2>"$tmp/err" && fail "$* succeeded"
	grep -qi -- "$pat" "$tmp/err" || fail "$*: no '$pat' in: $(head -c 600 "$tmp/err")"
}
expect_fail_with "TLS required" "$B/kvpool" -c "$tmp/plain.ini" get tls/small "$tmp/x"
grep -q "plain TCP connection refused: TLS required" "$MASTER_LOG" ||
	fail "the master did not log the plain connection"
# raw HELLO frames on both ports: the answer is a plain KVP_EAUTH frame
raw_hello() {	# raw_hello PORT: prints the reply's status
	python3 - "$1" <<'EOF'
import socket, struct, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
body = struct.pack("<H", 1) + bytes(6)
# a kvpool HELLO header (wire.h: magic "KVP1", version 1, opcode HELLO)
hdr = struct.pack("<IBBHiIQQ", 0x3150564B, 1, 0, 1, 0, len(body), 7, 0)
s.sendall(hdr + body)
data = b""
try:
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
except OSError:
    pass
print(len(data), b"TLS required" in data)
EOF
}
for p in "$MASTER_PORT" "$NODE_PORT"; do
	r=$(raw_hello "$p")
	case "$r" in *True) ;; *) fail "port $p: a plain HELLO got: $r" ;; esac
done
expect 0 "$B/kvpool" -c "$C" get tls/small "$tmp/small.out2"
cmp -s "$tmp/small" "$tmp/small.out2" || fail "served wrong bytes after the plain peers"
ok "plain TCP refused (TLS required on both sides); the daemons keep serving"

# 3. wrong CA
expect_fail_with "." "$B/kvpool" -c "$tmp/mallory.ini" get tls/small "$tmp/x"
grep -qi "certificate" "$MASTER_LOG" || fail "the master did not log the refused certificate"
expect_fail_with "certificate" "$B/kvpool" -c "$tmp/naive.ini" get tls/small "$tmp/x"
expect 0 "$B/kvpool" -c "$C" get tls/small "$tmp/small.out3"
ok "a client certificate of another CA is refused; so is a client that does not trust ours"

# 4. replay: a relay records what a client sends, then re-sends it
rport=$(free_port)
python3 - "$rport" "$MASTER_PORT" "$tmp/capture" <<'EOF' &
import socket, sys, threading
lp, mp, cap = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", lp)); ls.listen(8)
def pipe(a, b, out):
    try:
        while True:
            d = a.recv(65536)
            if not d: break
            if out: out.write(d); out.flush()
            b.sendall(d)
    except OSError: pass
    for s in (a, b):
        try: s.shutdown(socket.SHUT_RDWR)
        except OSError: pass
n = 0
while True:
    c, _ = ls.accept()
    m = socket.create_connection(("127.0.0.1", mp))
    out = open("%s.%d" % (cap, n), "wb"); n += 1
    threading.Thread(target=pipe, args=(m, c, None), daemon=True).start()
    threading.Thread(target=pipe, args=(c, m, out), daemon=True).start()
EOF
relay=$!
adopt $relay
wait_port "$rport" 5 || fail "relay did not listen"
sed -e "s/^master = .*/master = 127.0.0.1:$rport/" "$C" >"$tmp/relay.ini"
# the put's data goes to the node directly; the master RPC carries its
# metadata (the recorded bytes include the ALLOC of tls/replayed)
expect 0 "$B/kvpool" -c "$tmp/relay.ini" put tls/replayed "$tmp/small"
expect 0 "$B/kvpool" -c "$C" rm tls/replayed
stop_pid $relay
ls "$tmp"/capture.* >/dev/null 2>&1 || fail "the relay captured nothing"
n0=$(grep -c "TLS handshake:" "$MASTER_LOG")
for f in "$tmp"/capture.*; do
	python3 - "$MASTER_PORT" "$f" <<'EOF' >>"$tmp/replay.out"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
data = open(sys.argv[2], "rb").read()
got = b""
try:
    s.sendall(data)
    while True:
        d = s.recv(65536)
        if not d: break
        got += d
except OSError:
    pass
print("sent", len(data), "replied", len(got))
EOF
done
"$B/kvpool" -c "$C" get tls/replayed "$tmp/x" >/dev/null 2>&1 && fail "the replayed put stored tls/replayed"
waitfor 5 test "$(grep -c "TLS handshake:" "$MASTER_LOG")" -gt "$n0" ||
	fail "the master did not log the replayed handshake"
expect 0 "$B/kvpool" -c "$C" get tls/small "$tmp/small.out4"
ok "replayed TLS bytes refused on fresh connections, nothing stored ($(tr '\n' ' ' <"$tmp/replay.out"))"

# 5. a silent peer: dropped after the handshake timeout; others served meanwhile
exec {silent}<>/dev/tcp/127.0.0.1/"$MASTER_PORT"
expect 0 "$B/kvpool" -c "$C" get tls/small "$tmp/small.out5"
waitfor 10 grep -q "no TLS handshake within" "$MASTER_LOG" || fail "the silent peer was not dropped"
exec {silent}>&-
ok "a silent peer is dropped after the handshake timeout; the loop kept serving"

# 6. kTLS said once per process
for l in "$MASTER_LOG" "$tmp/n1.log"; do
	n=$(grep -c "tls: kernel TLS" "$l")
	[ "$n" = 1 ] || fail "$l: kTLS logged $n times"
done
ok "kTLS use logged once per daemon: $(grep -h -o 'tls: kernel TLS[^;(]*' "$MASTER_LOG")"

# 7. HTTPS on the HTTP ports ([tls] http)
https() {	# https PORT PATH [CURL ARG...]: the body; non-zero on any failure
	local port=$1 path=$2
	shift 2
	curl -sf -m 5 --cacert "$pki/ca.crt" "$@" "https://127.0.0.1:$port$path"
}
https "$MASTER_HTTP_PORT" /metrics >"$tmp/m.txt" || fail "master /metrics over HTTPS"
grep -q "^kvpool_" "$tmp/m.txt" || fail "master /metrics over HTTPS: $(head -c 300 "$tmp/m.txt")"
https "$NODE_HTTP_PORT" /metrics >"$tmp/nm.txt" || fail "node /metrics over HTTPS"
grep -q "^kvpool_" "$tmp/nm.txt" || fail "node /metrics over HTTPS: $(head -c 300 "$tmp/nm.txt")"
https "$MASTER_HTTP_PORT" /health >/dev/null || fail "master /health over HTTPS"
# the HTTPS certificate is checked: a client that trusts another CA fails
curl -sf -m 5 --cacert "$pki/evil.crt" "https://127.0.0.1:$MASTER_HTTP_PORT/health" \
	>/dev/null 2>&1 && fail "curl trusting another CA accepted the HTTPS port"
md=/metadata?key=tls-md
printf 'meta-value' >"$tmp/md.in"
c=$(curl -s -m 5 --cacert "$pki/ca.crt" -o /dev/null -w '%{http_code}' -X PUT \
	--data-binary @"$tmp/md.in" "https://127.0.0.1:$MASTER_MD_PORT$md")
[ "$c" = 401 ] || fail "metadata PUT over HTTPS without a token: $c"
https "$MASTER_MD_PORT" "$md" -X PUT -H "Authorization: Bearer $TOKEN" \
	--data-binary @"$tmp/md.in" >/dev/null || fail "metadata PUT over HTTPS with the token"
[ "$(https "$MASTER_MD_PORT" "$md" -H "Authorization: Bearer $TOKEN")" = meta-value ] ||
	fail "metadata GET over HTTPS with the token"
# kvpool top reads the master's /api/status over HTTPS with [tls] http
expect 0 "$B/kvpool" -c "$C" top --once
grep -q "^keys " "$tmp/out" || fail "kvpool top over HTTPS: $(head -c 300 "$tmp/out")"
ok "HTTPS on the HTTP ports: /metrics (master, node), /health, the metadata store with a Bearer token (401 without), kvpool top"
for p in "$MASTER_HTTP_PORT" "$MASTER_MD_PORT" "$NODE_HTTP_PORT"; do
	curl -s -m 5 "http://127.0.0.1:$p/health" >"$tmp/plain.out" 2>&1
	r=$?
	[ $r != 0 ] || fail "plain HTTP to the HTTPS port $p succeeded: $(head -c 200 "$tmp/plain.out")"
done
https "$MASTER_HTTP_PORT" /health >/dev/null || fail "master /health after plain HTTP"
https "$NODE_HTTP_PORT" /health >/dev/null || fail "node /health after plain HTTP"
expect 0 "$B/kvpool" -c "$C" get tls/small "$tmp/small.out7"
ok "plain HTTP to the HTTPS ports fails (curl exit $r); the daemons keep serving"

alive "$MASTER_PID" && alive "$NODE_PID" || fail "a daemon died"
e2e_finish
