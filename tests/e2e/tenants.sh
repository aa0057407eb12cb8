#!/bin/bash
# tenants.sh — several tokens with rights over key prefixes (docs/config.md
# "Tenants", threat model in docs/reliability.md), hostile clients against
# real daemons on private ports:
#  1. a wrong-tenant client: get, exists, stat, ls, rm, rm --prefix and put
#     on another tenant's keys are refused (KVP_EPERM, "not permitted"), its
#     own keys and what it may read work, ls shows only its keys, nothing is
#     stored or removed (read back as the owner);
#  2. the node data path: a raw READ at the offset of another tenant's
#     object is refused with no payload (and works for its own), a WRITE
#     whose image names a key of another tenant under its own grant is
#     refused and tombstoned, RDMA_CONNECT by a tenant not rdma=trusted is refused;
#  3. quotas: a tenant's put over its quota evicts its own objects first,
#     fails with KVP_ENOSPC when it cannot fit, and never touches another's;
#  4. a tenant token may not connect as a node;
#  5. reload (SIGHUP): a connection of a removed token is refused at its
#     next request on master and node, a new token works, others keep on;
#  6. per-tenant metrics; the daemons keep serving throughout;
#  7. HTTP: the metadata store and the admin queries need a Bearer token
#     (401 without, 403 for a tenant on admin endpoints), /metrics and
#     /health stay open.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init tenants
need "$B/kvpool" "$B/kvpool-master" "$B/kvpool-node" python3
python3 -c 'import ctypes; ctypes.CDLL("libxxhash.so.0").XXH3_64bits' 2>/dev/null ||
	skip "libxxhash.so.0 (XXH3_64bits) not loadable from python"

T=$E2E_TMP
mktok() {	# mktok NAME: a random token in $T/NAME.tok (0600), printed
	head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$T/$1.tok"
	chmod 600 "$T/$1.tok"
	cat "$T/$1.tok"
}
ADMIN=$(mktok admin) ALICE=$(mktok alice) BOB=$(mktok bob) CAROL=$(mktok carol)
cat >"$T/tenants" <<EOF
# name  token  rights
alice token=$ALICE write=alice/ read=shared/ quota_bytes=64K
bob   token=$BOB write=bob/,shared/ rdma=trusted
EOF
chmod 600 "$T/tenants"

pool_ini "metadata_server = true" "[cluster]" "token_file = $T/admin.tok" "tenants_file = $T/tenants" \
	"[client]" "protocol = tcp" "timeout = 5s" "[log]" "level = info"
run_master
pool_node n1 "segment_size = 16M" "heartbeat_interval = 300ms"
run_node n1
N1_PORT=$NODE_PORT
wait_nodes n1 || fail "node n1 did not mount"
ok "master and node up with a tenants file"

as() {	# as TENANT ARG...: the CLI with that tenant's token
	local t=$1
	shift
	"$B/kvpool" -c "$POOL_INI" -o "cluster.token_file=$T/$t.tok" "$@"
}
refused() {	# refused WHAT CMD...: fails with a "not permitted" message
	local what=$1 out
	shift
	if out=$("$@" 2>&1); then
		bad "$what: succeeded: $out"
	elif ! grep -qi "not permitted\|KVP_EPERM" <<<"$out"; then
		bad "$what: no clear error: $out"
	else
		ok "$what refused: $(head -n 1 <<<"$out")"
	fi
}

# ---- 1. wrong tenant ----
head -c 3000 /dev/urandom >"$T/bobval"
head -c 2000 /dev/urandom >"$T/alival"
as bob put bob/secret "$T/bobval" >/dev/null || fail "bob's put"
as bob put shared/readme "$T/bobval" >/dev/null || fail "bob's shared put"
as alice put alice/a "$T/alival" >/dev/null || fail "alice's put of her own key"
as alice get shared/readme "$T/got" >/dev/null && cmp -s "$T/got" "$T/bobval" ||
	bad "alice cannot read shared/ (read=shared/)"

refused "alice get bob/secret" as alice get bob/secret "$T/x"
refused "alice exists bob/secret" as alice exists bob/secret
refused "alice stat bob/secret" as alice stat bob/secret
refused "alice ls bob/" as alice ls bob/
refused "alice rm bob/secret" as alice rm bob/secret
refused "alice rm --prefix bob/" as alice rm --prefix bob/
refused "alice put bob/evil" as alice put bob/evil "$T/alival"
refused "alice put shared/evil (read-only)" as alice put shared/evil "$T/alival"
listing=$(as alice ls)
grep -q "bob/" <<<"$listing" && bad "alice's ls shows bob's keys: $listing"
grep -q "alice/a" <<<"$listing" && grep -q "shared/readme" <<<"$listing" ||
	bad "alice's ls lacks her keys: $listing"
ok "alice's ls shows only what she may read"
# rm --prefix over everything removes only her own keys
as alice put alice/b "$T/alival" >/dev/null || fail "alice's second put"
# (it exits 1: shared/readme, which she may read, remains)
out=$(as alice rm --all 2>&1)
grep -q "removed 2 objects" <<<"$out" || bad "alice rm --all: $out"
as alice exists alice/b >/dev/null 2>&1 && bad "alice rm --all left her alice/b"
as bob get bob/secret "$T/got" >/dev/null && cmp -s "$T/got" "$T/bobval" ||
	bad "bob's object changed after alice's attempts"
as bob get shared/readme "$T/got" >/dev/null || bad "shared/readme went with alice's rm --prefix"
as admin exists bob/evil >/dev/null 2>&1 && bad "bob/evil was stored"
as admin exists shared/evil >/dev/null 2>&1 && bad "shared/evil was stored"
ok "bob's objects intact, nothing of alice's stored under his prefixes"
as alice put alice/a "$T/alival" >/dev/null || fail "alice's put again"

# ---- 2. the node data path (raw frames) ----
cat >"$T/raw.py" <<'EOF'
# raw.py CMD ...: speaks src/common/wire.h to a node or the master.
import ctypes, json, socket, struct, sys, time
MAGIC, VER, HDR = 0x3150564B, 1, 32
EPERM, EAUTH = -25, -11
def s16(b): return struct.pack("<H", len(b)) + b
class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=5)
        self.rq = 0
    def call(self, op, body=b"", payload=b""):
        self.rq += 1
        self.s.sendall(struct.pack("<IBBHiIQQ", MAGIC, VER, 0, op, 0, len(body), self.rq,
                                   len(payload)) + body + payload)
        h = self.exact(HDR)
        _, _, _, _, st, bl, _, pl = struct.unpack("<IBBHiIQQ", h)
        return st, self.exact(bl), self.exact(pl)
    def exact(self, n):
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            if not c: raise EOFError
            b += c
        return b
    def hello(self, tok, role=1):
        return self.call(1, struct.pack("<H", role) + s16(tok.encode()) + s16(b"raw") + s16(b"e2e"))[0]
    def closed(self):
        try:
            self.s.settimeout(3)
            return self.s.recv(1) == b""
        except (ConnectionResetError, BrokenPipeError):
            return True
xxh = ctypes.CDLL("libxxhash.so.0").XXH3_64bits
xxh.restype = ctypes.c_uint64
xxh.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
def image(key, value, gen, uuid):
    h = struct.pack("<IHHIIQQQQQ", 0x5850564B, 1, 0, len(key), 0, len(value), xxh(value, len(value)),
                    gen, uuid, time.time_ns())
    return h + struct.pack("<Q", xxh(h + key, len(h) + len(key))) + key + value
def seg_uuid(m):
    st, body, _ = m.call(7)
    p = 4 + 4
    for _ in range(3):
        p += 2 + struct.unpack_from("<H", body, p)[0]
    return struct.unpack_from("<Q", body, p + 24)[0]
cmd = sys.argv[1]
if cmd == "forge":	# forge MPORT NPORT TOKEN: WRITE statuses of a forged and an honest image
    m, n = Conn(int(sys.argv[2])), Conn(int(sys.argv[3]))
    tok = sys.argv[4]
    st, body, _ = m.call(1, struct.pack("<H", 1) + s16(tok.encode()) + s16(b"raw") + s16(b"e2e"))
    epoch = struct.unpack_from("<Q", body)[0]
    if st or n.hello(tok): sys.exit("HELLO refused")
    uuid = seg_uuid(m)
    value = b"v" * 1000
    out = []
    for key, wkey in ((b"alice/f1", b"bob/forged"), (b"alice/f2", b"alice/f2")):
        st, body, _ = m.call(16, struct.pack("<BIIQI", 1, 0, 0, 0, 1) + s16(key) + struct.pack("<Q", len(value)))
        _, ist, gen, nrep = struct.unpack_from("<IiQB", body)
        if st or ist or nrep != 1: sys.exit("PUT_START %s: %d %d" % (key, st, ist))
        sid, off, alloc = struct.unpack_from("<IQQ", body, 17)
        grant = body[17 + 20:17 + 36]
        img = image(wkey, value, gen, uuid)
        wst, _, _ = n.call(49, struct.pack("<IQQQQ", sid, gen, off, alloc, epoch) + grant, img)
        out.append(wst)
        if wst == 0:
            m.call(17, struct.pack("<I", 1) + s16(key) + struct.pack("<QQ", gen, xxh(value, len(value))))
        else:
            m.call(18, struct.pack("<I", 1) + s16(key) + struct.pack("<Q", gen))
    print(*out)
elif cmd == "read":	# read PORT TOKEN OFF LEN: status and payload length
    c = Conn(int(sys.argv[2]))
    if c.hello(sys.argv[3]): sys.exit("HELLO refused")
    st, _, p = c.call(48, struct.pack("<BQQ", 0, int(sys.argv[4]), int(sys.argv[5])))
    print(st, len(p))
elif cmd == "rdma":	# rdma PORT TOKEN: RDMA_CONNECT's status
    c = Conn(int(sys.argv[2]))
    if c.hello(sys.argv[3]): sys.exit("HELLO refused")
    print(c.call(52, b"\0" * 64)[0])
elif cmd == "role":	# role PORT TOKEN ROLE: HELLO status, then closed?
    c = Conn(int(sys.argv[2]))
    st = c.hello(sys.argv[3], int(sys.argv[4]))
    print(st, c.closed())
elif cmd == "hold":	# hold MPORT NPORT TOKEN FIFO: HELLO both, wait for a line, then
    m, n = Conn(int(sys.argv[2])), Conn(int(sys.argv[3]))	# a GET and a READ
    if m.hello(sys.argv[4]) or n.hello(sys.argv[4]): sys.exit("HELLO refused")
    st, _, _ = m.call(19, struct.pack("<I", 1) + s16(b"bob/secret"))
    if st: sys.exit("GET before the reload: %d" % st)
    print("ready", flush=True)
    open(sys.argv[5]).readline()
    gst, _, _ = m.call(19, struct.pack("<I", 1) + s16(b"bob/secret"))
    rst, _, _ = n.call(48, struct.pack("<BQQ", 0, 0, 64))
    print(gst, m.closed(), rst, n.closed())
EOF
raw() { python3 "$T/raw.py" "$@"; }
st=$(as admin stat bob/secret --json) || fail "admin stat bob/secret"
boff=$(jval - 'r["replicas"][0]["offset"]' <<<"$st") blen=$((64 + 10 + 3000))
st=$(as admin stat alice/a --json) || fail "admin stat alice/a"
aoff=$(jval - 'r["replicas"][0]["offset"]' <<<"$st") alen=$((64 + 7 + 2000))
got=$(raw read "$N1_PORT" "$ALICE" "$boff" "$blen")
[ "$got" = "-25 0" ] && ok "node: alice's READ of bob's extent refused (KVP_EPERM, no bytes)" ||
	bad "node: alice's READ of bob's extent: $got"
got=$(raw read "$N1_PORT" "$ALICE" "$aoff" "$alen")
[ "$got" = "0 $alen" ] && ok "node: alice's READ of her own extent works" ||
	bad "node: alice's READ of her own extent: $got"
got=$(raw read "$N1_PORT" "$ALICE" "$((aoff + 64))" 64)
[ "${got%% *}" != 0 ] && ok "node: alice's READ inside her extent (not at a header) refused" ||
	bad "node: alice's READ at a non-header offset: $got"
got=$(raw read "$N1_PORT" "$ALICE" "$aoff" $((alen + 4096)))
[ "${got%% *}" != 0 ] && ok "node: alice's READ past her extent refused" ||
	bad "node: alice's READ past her extent: $got"
got=$(raw read "$N1_PORT" "$ADMIN" "$boff" "$blen")
[ "$got" = "0 $blen" ] || bad "node: the admin's READ of bob's extent: $got"
got=$(raw forge "$MASTER_PORT" "$N1_PORT" "$ALICE")
[ "$got" = "-25 0" ] &&
	ok "node: alice's WRITE of an image naming bob/forged under her own grant refused (KVP_EPERM)" ||
	bad "node: forged WRITE image: $got"
as admin exists bob/forged >/dev/null 2>&1 && bad "bob/forged exists"
as alice rm alice/f2 >/dev/null || bad "alice's honest crafted write alice/f2 missing"
got=$(raw rdma "$N1_PORT" "$ALICE")
[ "$got" = -25 ] && ok "node: RDMA_CONNECT by alice (not rdma=trusted) refused" ||
	bad "node: alice's RDMA_CONNECT: $got"
got=$(raw rdma "$N1_PORT" "$BOB")
[ "$got" != -25 ] && ok "node: bob (rdma=trusted) passes the tenant check ($got without a NIC)" ||
	bad "node: bob's RDMA_CONNECT refused for his tenant"

# ---- 3. quotas ----
head -c 40000 /dev/urandom >"$T/q1"
head -c 40000 /dev/urandom >"$T/q2"
head -c 70000 /dev/urandom >"$T/big"
as alice rm alice/a >/dev/null
as alice put alice/q1 "$T/q1" >/dev/null || bad "alice's put under her quota"
as alice put alice/q2 "$T/q2" >/dev/null || bad "alice's put over her quota (own eviction)"
as alice exists alice/q1 >/dev/null 2>&1 && bad "alice/q1 was not evicted for alice/q2"
as alice get alice/q2 "$T/got" >/dev/null && cmp -s "$T/got" "$T/q2" || bad "alice/q2 lost"
ok "a put over alice's quota evicted her own older object"
if out=$(as alice put alice/big "$T/big" 2>&1); then
	bad "a put larger than the quota succeeded"
else
	grep -qi "no space\|ENOSPC" <<<"$out" && ok "put larger than the quota refused: $out" ||
		bad "quota refusal unclear: $out"
fi
as alice exists alice/big >/dev/null 2>&1 && bad "alice/big stored"
as bob get bob/secret "$T/got" >/dev/null && cmp -s "$T/got" "$T/bobval" ||
	bad "bob's object went for alice's quota"
ok "bob's objects untouched by alice's quota"

# ---- 4. roles ----
got=$(raw role "$MASTER_PORT" "$ALICE" 2)
[ "$got" = "-25 True" ] && ok "a tenant token may not HELLO as a node" ||
	bad "HELLO as a node with alice's token: $got"

# ---- 6. metrics (before the reload renames things) ----
m=$(http_get "http://127.0.0.1:$MASTER_HTTP_PORT/metrics")
r=$(awk '$1 == "kvpool_master_tenant_refused_total{tenant=\"alice\"}" { print $2 }' <<<"$m")
[ "${r:-0}" -gt 0 ] && ok "metrics: alice refused $r times" || bad "no refusals counted for alice"
o=$(awk '$1 == "kvpool_master_tenant_objects{tenant=\"bob\"}" { print $2 }' <<<"$m")
[ "$o" = 2 ] && ok "metrics: bob owns 2 objects" || bad "metrics: bob owns '$o' objects"
grep -q "$ALICE\|$BOB" <<<"$m" && bad "a token appears in /metrics"

# ---- 7. HTTP ----
code() {	# code METHOD URL [TOKEN]: the HTTP status (curl)
	local h=()
	[ -n "${3:-}" ] && h=(-H "Authorization: Bearer $3")
	curl -s -o "$T/body" -w '%{http_code}' -X "$1" "${h[@]}" --data-binary x "$2"
}
if command -v curl >/dev/null; then
	md=http://127.0.0.1:$MASTER_MD_PORT/metadata?key=k1
	adm=http://127.0.0.1:$MASTER_HTTP_PORT
	[ "$(code PUT "$md")" = 401 ] && grep -q "Bearer" "$T/body" &&
		ok "metadata store: a PUT without a token is 401: $(cat "$T/body")" ||
		bad "metadata store PUT without a token: $(cat "$T/body")"
	[ "$(code PUT "$md" wrong)" = 401 ] || bad "metadata store PUT with a wrong token not 401"
	[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ADMIN" "$md")" = 404 ] ||
		bad "the unauthorized PUT stored k1"
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$md")" = 401 ] || bad "metadata GET without a token"
	[ "$(code PUT "$md" "$ALICE")" = 200 ] || bad "metadata PUT with alice's token: $(cat "$T/body")"
	[ "$(curl -s -o /dev/null -w '%{http_code}' "$adm/get_all_keys")" = 401 ] ||
		bad "/get_all_keys without a token"
	[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ALICE" \
		"$adm/get_all_keys")" = 403 ] || bad "/get_all_keys with a tenant's token"
	[ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $ADMIN" \
		"$adm/get_all_keys")" = 200 ] || bad "/get_all_keys with the cluster token"
	for p in /metrics /health /api/status /get_all_segments; do
		[ "$(curl -s -o /dev/null -w '%{http_code}' "$adm$p")" = 200 ] || bad "$p not open"
	done
	ok "HTTP: data and admin endpoints need a Bearer token, status endpoints open"
fi

# ---- 8. the FUSE view as a tenant (libkvpool: the master's checks) ----
if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null; then
	mnt=$T/mnt
	mkdir -p "$mnt"
	on_cleanup "fuse_unmount '$mnt'"
	spawn mount-alice "$B/kvpool" -c "$POOL_INI" -o "cluster.token_file=$T/alice.tok" \
		mount -f "$mnt"
	vpid=$SPAWN_PID
	waitfor 10 grep -q " $mnt fuse" /proc/mounts || fail "alice's FUSE view did not mount"
	top=$(ls "$mnt")
	grep -qx bob <<<"$top" && bad "alice's FUSE view lists bob/: $top"
	grep -qx alice <<<"$top" || bad "alice's FUSE view lacks alice/: $top"
	cmp -s "$mnt/alice/q2" "$T/q2" || bad "alice cannot read her own file in the view"
	if cat "$mnt/bob/secret" >/dev/null 2>"$T/err"; then
		bad "alice read bob/secret through the FUSE view"
	fi
	grep -qi "permission denied\|no such file" "$T/err" || bad "FUSE view error: $(cat "$T/err")"
	if cp "$T/alival" "$mnt/bob/evil" 2>"$T/err"; then bad "alice wrote bob/evil through the view"; fi
	as admin exists bob/evil >/dev/null 2>&1 && bad "bob/evil stored through the view"
	fusermount3 -u "$mnt"
	waitfor 10 gone "$vpid" || bad "alice's FUSE view did not exit"
	ok "FUSE view as alice: her keys only, bob's refused ($(head -c 80 "$T/err"))"
fi

# ---- 5. reload: bob's token goes, carol's comes ----
mkfifo "$T/go"
raw hold "$MASTER_PORT" "$N1_PORT" "$BOB" "$T/go" >"$T/hold.out" 2>&1 &
holder=$!
adopt $holder
waitfor 10 grep -q ready "$T/hold.out" || fail "holder: $(cat "$T/hold.out")"
cat >"$T/tenants" <<EOF
alice token=$ALICE write=alice/ read=shared/ quota_bytes=64K
carol token=$CAROL write=carol/ read=bob/
EOF
kill -HUP "$MASTER_PID" "$NODE_PID"
waitfor 10 grep -q "tenants: reloaded" "$MASTER_LOG" || fail "master did not reload the tenants"
waitfor 10 grep -q "tenants: reloaded" "$E2E_TMP/n1.log" || fail "node did not reload the tenants"
echo go >"$T/go"
wait $holder
got=$(tail -n 1 "$T/hold.out")
[ "$got" = "-11 True -11 True" ] &&
	ok "bob's open connections refused (KVP_EAUTH) and closed after the reload" ||
	bad "bob's connections after the reload: $got"
as bob ls >/dev/null 2>&1 && bad "bob's token still works after the reload"
as carol get bob/secret "$T/got" >/dev/null && cmp -s "$T/got" "$T/bobval" ||
	bad "carol's new token (read=bob/) does not read bob/secret"
refused "carol put bob/x" as carol put bob/x "$T/alival"
as alice get alice/q2 "$T/got" >/dev/null || bad "alice lost her rights in the reload"
ok "new token works, unchanged tenants keep working"

alive "$MASTER_PID" && alive "$NODE_PID" || fail "a daemon died"
as admin get bob/secret "$T/got" >/dev/null && cmp -s "$T/got" "$T/bobval" ||
	bad "bob/secret changed"
ok "daemons serving, owner's data intact"
e2e_finish
