#!/bin/bash
# node_daemon.sh — kvpool-node against a real kvpool-master on private
# loopback ports, driven with raw wire frames (an embedded Python driver, so
# the node is tested without libkvpool):
#  1. the node mounts (SEGMENTS lists it with its endpoint); objects put with
#     PUT_START / WRITE (with the master's grant) / PUT_END read back with
#     GET + READ, bytes compared;
#  2. forged grant, out-of-range offset, oversized payload: refused with
#     EGRANT, out-of-range READ refused, and the node keeps serving; a
#     connection that never completes its HELLO is closed (slow loris);
#  3. REMOVE at the master: the node tombstones the extent (a scan of the
#     segment file no longer lists it);
#  4. SIGHUP reloads (log level applied live);
#  5. SIGTERM: exit 0, the master shows the segment draining or gone, the file
#     stays; restart: every object readable again; same after kill -9;
#  6. kill -9 + restart of the master: the node re-mounts and re-reports;
#     objects readable again;
#  7. heartbeats keep the segment past client_ttl; SIGSTOP longer than
#     client_ttl: the master drops it; SIGCONT: the node notices, re-mounts,
#     objects readable again;
#  8. remove_segment_on_exit removes the file; config errors exit 1 with
#     FILE:LINE; --help / --version / --print-config.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init node
need "$B/kvpool-master" "$B/kvpool-node" python3
python3 -c 'import ctypes; ctypes.CDLL("libxxhash.so.0")' 2>/dev/null || skip "libxxhash.so.0 missing"
NODE=$B/kvpool-node

# ---- the wire driver ----
cat >"$E2E_TMP/wire.py" <<'PYEOF'
import ctypes, json, mmap, os, random, socket, struct, sys, time

MAGIC, VERSION, F_REPLY = 0x3150564b, 1, 1
OP = dict(HELLO=1, SEGMENTS=7, PUT_START=16, PUT_END=17, GET=19, REMOVE=22, READ=48, WRITE=49)
ROLE_CLIENT = 1
EXT_MAGIC, EXT_TOMB = 0x5850564b, 0x5450564b
E = dict(ENOTFOUND=-1, EINVAL=-4, ENOSEG=-8, EAUTH=-11, ENOTSUP=-16, EGRANT=-20)
HDR = struct.Struct('<IBBHiIQQ')
xx = ctypes.CDLL('libxxhash.so.0')
xx.XXH3_64bits.restype = ctypes.c_uint64
xx.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
def xxh3(b): return xx.XXH3_64bits(bytes(b), len(b))

class R:
    def __init__(s, b): s.b, s.p = b, 0
    def take(s, n):
        if s.p + n > len(s.b): raise ValueError('short body')
        v = s.b[s.p:s.p + n]; s.p += n; return v
    def u(s, fmt): return struct.unpack('<' + fmt, s.take(struct.calcsize('<' + fmt)))[0]
    def str(s): return s.take(s.u('H'))
    def blob(s): return s.take(s.u('I'))

def pstr(b): return struct.pack('<H', len(b)) + b

class Conn:
    def __init__(s, hp, token):
        h, p = hp.rsplit(':', 1)
        s.sk = socket.create_connection((h, int(p)), timeout=10)
        s.reqid = 0
        st, b, _ = s.call(OP['HELLO'], struct.pack('<H', ROLE_CLIENT) + pstr(token) +
                          pstr(b'wire.py') + pstr(b'host-wire'))
        if st: raise SystemExit('HELLO to %s: status %d' % (hp, st))
        s.epoch = struct.unpack('<Q', b[:8])[0]  # a master's: its grants carry it
    def recvn(s, n):
        out = bytearray()
        while len(out) < n:
            c = s.sk.recv(min(n - len(out), 1 << 20))
            if not c: raise EOFError
            out += c
        return bytes(out)
    def send(s, op, body=b'', payload=b'', plen=None):
        s.reqid += 1
        plen = len(payload) if plen is None else plen
        s.sk.sendall(HDR.pack(MAGIC, VERSION, 0, op, 0, len(body), s.reqid, plen) + body + payload)
        return s.reqid
    def reply(s):
        m, v, f, op, st, bl, rq, pl = HDR.unpack(s.recvn(32))
        assert m == MAGIC and f & F_REPLY
        return st, s.recvn(bl), s.recvn(pl)
    def call(s, op, body=b'', payload=b'', plen=None):
        s.send(op, body, payload, plen)
        return s.reply()

def segments(mc):
    st, b, _ = mc.call(OP['SEGMENTS'])
    assert st == 0
    r, out = R(b), []
    for _ in range(r.u('I')):
        d = dict(id=r.u('I'), name=r.str().decode(), host_id=r.str().decode(),
                 shm_path=r.str().decode(), dev=r.u('Q'), ino=r.u('Q'), size=r.u('Q'),
                 uuid=r.u('Q'), endpoint=r.str().decode())
        r.blob()
        d.update(draining=r.u('B'), used=r.u('Q'), objects=r.u('Q'))
        r.u('Q'); r.u('Q'); r.u('i')
        out.append(d)
    return out

def value(key, size, seed):
    return random.Random('%s/%d/%d' % (key, size, seed)).randbytes(size)

def image(key, val, gen, uuid):
    h = bytearray(struct.pack('<IHHIIQQQQQ', EXT_MAGIC, 1, 0, len(key), 0, len(val),
                              xxh3(val), gen, uuid, time.time_ns()))
    h += struct.pack('<Q', xxh3(bytes(h) + key))
    return bytes(h) + key + val

def put_start(mc, key, size):
    st, b, _ = mc.call(OP['PUT_START'], struct.pack('<BIIQ', 1, 0, 0, 0) + struct.pack('<I', 1) +
                       pstr(key) + struct.pack('<Q', size))
    assert st == 0, st
    r = R(b)
    assert r.u('I') == 1
    ist, gen, nrep = r.u('i'), r.u('Q'), r.u('B')
    reps = [dict(seg=r.u('I'), off=r.u('Q'), alloc_len=r.u('Q'), grant=r.take(16),
                 epoch=mc.epoch) for _ in range(nrep)]
    return ist, gen, reps

def put_end(mc, key, gen, csum):
    st, b, _ = mc.call(OP['PUT_END'], struct.pack('<I', 1) + pstr(key) + struct.pack('<QQ', gen, csum))
    assert st == 0
    r = R(b); r.u('I')
    return r.u('i')

def write(nc, rep, gen, img, off=None, alloc_len=None, grant=None, seg=None):
    body = struct.pack('<IQQQQ', rep['seg'] if seg is None else seg, gen,
                       rep['off'] if off is None else off,
                       rep['alloc_len'] if alloc_len is None else alloc_len, rep['epoch']) + \
        (rep['grant'] if grant is None else grant)
    st, _, _ = nc.call(OP['WRITE'], body, img)
    return st

def read(nc, off, ln, tier=0):
    st, _, pay = nc.call(OP['READ'], struct.pack('<BQQ', tier, off, ln))
    return st, pay

def node_conn(mc, segid, token):
    for s in segments(mc):
        if s['id'] == segid:
            return Conn(s['endpoint'], token), s
    raise SystemExit('segment %d not in SEGMENTS' % segid)

def do_put(mc, token, key, size, seed):
    val = value(key, size, seed)
    ist, gen, reps = put_start(mc, key, size)
    if ist: raise SystemExit('PUT_START %s: %d' % (key, ist))
    for rep in reps:
        nc, s = node_conn(mc, rep['seg'], token)
        st = write(nc, rep, gen, image(key, val, gen, s['uuid']))
        if st: raise SystemExit('WRITE %s: %d' % (key, st))
    st = put_end(mc, key, gen, xxh3(val))
    if st: raise SystemExit('PUT_END %s: %d' % (key, st))

def do_get(mc, token, key, size, seed):
    st, b, _ = mc.call(OP['GET'], struct.pack('<I', 1) + pstr(key))
    assert st == 0
    r = R(b); r.u('I')
    ist, vlen, gen, csum, lease, nrep = r.u('i'), r.u('Q'), r.u('Q'), r.u('Q'), r.u('Q'), r.u('B')
    if ist: return ist
    reps = [dict(seg=r.u('I'), tier=r.u('B'), off=r.u('Q'), alloc_len=r.u('Q')) for _ in range(nrep)]
    want = image(key, value(key, size, seed), gen, 0)
    for rep in reps:
        nc, s = node_conn(mc, rep['seg'], token)
        st, pay = read(nc, rep['off'], len(want), rep['tier'])
        if st: raise SystemExit('READ %s: %d' % (key, st))
        # the header differs in uuid/time/checksum only; key and value must match
        if pay[64:] != want[64:] or struct.unpack_from('<Q', pay, 32)[0] != gen or \
           struct.unpack_from('<Q', pay, 40)[0] != s['uuid']:
            raise SystemExit('READ %s: wrong bytes' % key)
    return 0

def scan(path):
    """Live keys in a segment file (header walk like ext_scan, no value check)."""
    out = []
    with open(path, 'rb') as f:
        m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
        size, align = struct.unpack_from('<Q', m, 8)[0], struct.unpack_from('<I', m, 24)[0]
        off = 4096
        while off + 64 <= size:
            magic, ver, fl, klen, res, vlen = struct.unpack_from('<IHHIIQ', m, off)
            ok = magic in (EXT_MAGIC, EXT_TOMB) and ver == 1 and 0 < klen <= 1024 and \
                off + 64 + klen + vlen <= size
            if ok:
                hdr = bytearray(m[off:off + 56]); hdr[0:4] = struct.pack('<I', EXT_MAGIC)
                ok = xxh3(bytes(hdr) + m[off + 64:off + 64 + klen]) == struct.unpack_from('<Q', m, off + 56)[0]
            if not ok:
                off += align
                continue
            if magic == EXT_MAGIC:
                out.append(m[off + 64:off + 64 + klen].decode())
            off += (64 + klen + vlen + align - 1) // align * align
        m.close()
    return out

def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == 'scan':
        print(json.dumps(scan(a[0]))); return 0
    master, token = a[0], open(a[1], 'rb').read().split(b'\n')[0] if a[1] != '-' else b''
    mc = Conn(master, token)
    if cmd == 'segments':
        print(json.dumps(segments(mc))); return 0
    if cmd == 'put':
        for spec in a[2:]:
            k, sz, seed = spec.split(':'); do_put(mc, token, k.encode(), int(sz), int(seed))
        return 0
    if cmd == 'get':	# exit 0 all match, 3 if one is not found
        for spec in a[2:]:
            k, sz, seed = spec.split(':')
            st = do_get(mc, token, k.encode(), int(sz), int(seed))
            if st: print('%s: status %d' % (k, st)); return 3
        return 0
    if cmd == 'remove':
        st, b, _ = mc.call(OP['REMOVE'], struct.pack('<BI', 1, 1) + pstr(a[2].encode()))
        r = R(b); r.u('I'); return 0 if r.u('i') == 0 else 1
    if cmd == 'refused':
        key = b'refused-key'; size = 70000
        val = value(key, size, 1)
        ist, gen, reps = put_start(mc, key, size)
        assert ist == 0 and len(reps) == 1
        rep = reps[0]
        nc, s = node_conn(mc, rep['seg'], token)
        img = image(key, val, gen, s['uuid'])
        forged = bytes([rep['grant'][0] ^ 1]) + rep['grant'][1:]
        res = {}
        res['forged'] = write(nc, rep, gen, img, grant=forged)
        res['other_off'] = write(nc, rep, gen, img, off=rep['off'] + rep['alloc_len'])
        res['past_end'] = write(nc, rep, gen, img, off=s['size'] + 4096)
        res['other_gen'] = write(nc, rep, gen + 1, img)
        res['oversized'] = write(nc, rep, gen, img + bytes(rep['alloc_len']))
        res['read_past_end'] = read(nc, s['size'] + 4096 * 2, 100)[0]
        res['read_header'] = read(nc, 0, 100)[0]
        res['read_disk'] = read(nc, rep['off'], 100, tier=1)[0]
        res['read_len0'] = read(nc, rep['off'], 0)[0]
        # the node still serves, on the same connection and a new one
        res['good_write'] = write(nc, rep, gen, img)
        res['put_end'] = put_end(mc, key, gen, xxh3(val))
        res['get'] = do_get(mc, token, key, size, 1)
        print(json.dumps(res))
        want = dict(forged=E['EGRANT'], other_off=E['EGRANT'], past_end=E['EGRANT'],
                    other_gen=E['EGRANT'], oversized=E['EGRANT'], read_past_end=E['EINVAL'],
                    read_header=E['EINVAL'], read_disk=E['ENOTSUP'], read_len0=E['EINVAL'],
                    good_write=0, put_end=0, get=0)
        return 0 if res == want else 1
    if cmd == 'loris':	# half a frame header, then silence: the node must hang up
        s = segments(mc)[0]
        h, p = s['endpoint'].rsplit(':', 1)
        sk = socket.create_connection((h, int(p)), timeout=30)
        sk.sendall(HDR.pack(MAGIC, VERSION, 0, OP['HELLO'], 0, 10, 1, 0)[:10])
        t0 = time.time()
        try:
            closed = sk.recv(100) == b''
        except ConnectionResetError:
            closed = True
        except socket.timeout:
            closed = False
        print('closed' if closed else 'still open', 'after %.1f s' % (time.time() - t0))
        return 0 if closed else 1
    if cmd == 'badtoken':	# a data connection with a wrong token is refused
        s = segments(mc)[0]
        try:
            Conn(s['endpoint'], b'not-the-token')
        except SystemExit as e:
            print(e); return 0 if 'status -11' in str(e) else 1
        return 1
    raise SystemExit('unknown command ' + cmd)

sys.exit(main())
PYEOF
W() { python3 "$E2E_TMP/wire.py" "$@"; }

# ---- configuration ----
tok=$E2E_TMP/token
printf 'e2e-node-token-%s\n' "$$" >"$tok"
chmod 600 "$tok"
pool_ini "client_ttl = 1500ms" "put_timeout = 3s" "lease_ttl = 1s" "[cluster]" "token_file = $tok" \
	"[client]" "timeout = 1s" "[node]" "segment_size = 64M" "heartbeat_interval = 200ms" \
	"[log]" "level = info"
pool_node e2enode
dport=$NODE_PORT hport=$NODE_HTTP_PORT
segfile=/dev/shm/$NODE_SEG
M=$MASTER_ADDR

start_master() {
	run_master
	waitfor 5 W segments "$M" "$tok" >/dev/null 2>&1 || fail "master did not come up"
}
start_node() {
	run_node e2enode "$@"
	npid=$NODE_PID
	wait_mounted || fail "node did not mount"
}
# The node's segment is listed by SEGMENTS (and not draining).
mounted() {
	W segments "$M" "$tok" >"$E2E_TMP/segs" 2>/dev/null || return 1
	python3 -c "
import json, sys
s = [x for x in json.load(open(sys.argv[1])) if x['name'] == 'e2enode']
sys.exit(0 if s and not s[0]['draining'] and s[0]['endpoint'] == sys.argv[2] else 1)" \
		"$E2E_TMP/segs" "127.0.0.1:$dport"
}
wait_mounted() { waitfor 10 mounted; }
nmetric() { metric "$1" "$hport"; }	# the node's value
objs="one-byte:1:1 small:4096:2 medium:100000:3 large:3000000:4 odd/key@x:12345:5 gone:5000:6"
kept="one-byte:1:1 small:4096:2 medium:100000:3 large:3000000:4 odd/key@x:12345:5"
all_readable() {	# within a few seconds (the node may still be re-reporting)
	waitfor 10 W get "$M" "$tok" $kept >"$E2E_TMP/get.out" 2>&1 && return 0
	cat "$E2E_TMP/get.out"
	return 1
}

# ---- 1. mount, put, read back ----
start_master
start_node
ok "node mounted (SEGMENTS lists e2enode at 127.0.0.1:$dport)"
http_get "http://127.0.0.1:$hport/health" | grep -q '"master":"up"' || fail "/health does not say master up"
W put "$M" "$tok" $objs || fail "put via PUT_START/WRITE/PUT_END"
W get "$M" "$tok" $objs || fail "GET + READ of what was put"
ok "6 objects put with grants and read back byte for byte"
[ "$(nmetric kvpool_node_written_bytes_total)" -gt 3000000 ] || fail "written bytes metric"
[ "$(nmetric kvpool_node_master_up)" = 1 ] || fail "master_up metric"

# ---- 2. refused writes and reads ----
W refused "$M" "$tok" || fail "refused WRITE/READ checks"
W badtoken "$M" "$tok" >/dev/null || fail "wrong token not refused"
W loris "$M" "$tok" >"$E2E_TMP/loris" || fail "slow loris: $(cat "$E2E_TMP/loris")"
[ "$(nmetric kvpool_node_connections_timed_out_total)" -ge 1 ] || fail "timed-out metric"
W get "$M" "$tok" $objs || fail "objects after refused writes"
kill -0 "$npid" || fail "node died"
ok "forged/misplaced/oversized WRITEs refused (EGRANT), bad READs refused, node keeps serving"
ok "a connection without HELLO is closed ($(cat "$E2E_TMP/loris"))"

# ---- 3. FREE tombstones ----
W scan "$segfile" | grep -q '"gone"' || fail "scan does not list 'gone' before remove"
W remove "$M" "$tok" gone || fail "remove"
for _ in $(seq 50); do
	W scan "$segfile" | grep -q '"gone"' || break
	sleep 0.1
done
W scan "$segfile" >"$E2E_TMP/scan"
grep -q '"gone"' "$E2E_TMP/scan" && fail "scan still lists 'gone' after REMOVE"
grep -q '"medium"' "$E2E_TMP/scan" || fail "scan lost 'medium'"
[ "$(nmetric kvpool_node_freed_extents_total)" -ge 1 ] || fail "freed metric"
ok "REMOVE at the master: the node tombstoned the extent"

# ---- 4. SIGHUP ----
sed -i 's/^level = info/level = debug/' "$E2E_TMP/pool.ini"
kill -HUP "$npid"
for _ in $(seq 50); do grep -q "configuration reloaded" "$E2E_TMP/e2enode.log" && break; sleep 0.1; done
grep -q "log.level = debug" "$E2E_TMP/e2enode.log" || fail "SIGHUP did not apply log.level"
sed -i 's/^level = debug/level = info/' "$E2E_TMP/pool.ini"
sed -i "s/^segment_size = 64M/segment_size = 32M/" "$E2E_TMP/pool.ini"
kill -HUP "$npid"
for _ in $(seq 50); do grep -q "segment_size changed" "$E2E_TMP/e2enode.log" && break; sleep 0.1; done
grep -q "segment_size changed.*needs a restart" "$E2E_TMP/e2enode.log" || fail "restart-only key not reported"
sed -i "s/^segment_size = 32M/segment_size = 64M/" "$E2E_TMP/pool.ini"
kill -HUP "$npid"
W get "$M" "$tok" $kept || fail "objects after SIGHUP"
ok "SIGHUP: live key applied, restart-only key reported"

# ---- 5. SIGTERM, restart, kill -9, restart ----
stop_pid "$npid"
rc=$?
[ $rc = 0 ] || fail "SIGTERM: exit $rc"
grep -q "segment [0-9]* (e2enode): draining" "$E2E_TMP/master.log" || fail "master did not see UNMOUNT drain"
mounted && fail "segment still mounted and not draining after SIGTERM"
[ -f "$segfile" ] || fail "segment file removed on SIGTERM"
ok "SIGTERM: exit 0, segment draining at the master, file kept"
start_node
all_readable || fail "objects after a SIGTERM restart"
[ "$(nmetric kvpool_node_reported_extents_total)" -ge 5 ] || fail "reported extents metric"
ok "restart after SIGTERM: every object readable again"
stop_pid "$npid" KILL
start_node
all_readable || fail "objects after kill -9 + restart"
ok "restart after kill -9: every object readable again"

# ---- 6. master restart ----
stop_pid "$MASTER_PID" KILL
start_master
wait_mounted || fail "node did not re-mount at the restarted master"
all_readable || fail "objects after the master restart"
[ "$(nmetric kvpool_node_remounts_total)" -ge 1 ] || fail "remounts metric"
ok "master kill -9 + restart: the node re-mounted and re-reported; objects readable"

# ---- 7. liveness ----
sleep 3	# two client_ttl
mounted || fail "segment dropped despite heartbeats"
W get "$M" "$tok" $kept || fail "objects after 2 x client_ttl"
ok "heartbeats keep the segment past client_ttl"
before=$(nmetric kvpool_node_mounts_total)
kill -STOP "$npid"
for _ in $(seq 100); do
	mounted || break
	sleep 0.1
done
mounted && fail "the master kept a stopped node's segment"
grep -q "node silent for node_ttl" "$E2E_TMP/master.log" || fail "no node_ttl drop in the master log"
kill -CONT "$npid"
wait_mounted || fail "node did not re-mount after SIGCONT"
all_readable || fail "objects after SIGSTOP/SIGCONT"
[ "$(nmetric kvpool_node_mounts_total)" -gt "$before" ] || fail "mounts metric did not grow"
ok "SIGSTOP past client_ttl: dropped; SIGCONT: re-mounted with its objects"

# ---- 8. remove_segment_on_exit, command line ----
stop_pid "$npid"
start_node -o node.remove_segment_on_exit=true
stop_pid "$npid"
rc=$?
[ $rc = 0 ] || fail "exit $rc with remove_segment_on_exit"
[ -e "$segfile" ] && fail "remove_segment_on_exit left $segfile"
ok "remove_segment_on_exit removes the file"

printf '[node]\nname = x\nheartbeat_interval = soon\n' >"$E2E_TMP/bad.ini"
"$NODE" -c "$E2E_TMP/bad.ini" >"$E2E_TMP/out" 2>&1
rc=$?
[ $rc = 1 ] || fail "bad config: exit $rc"
grep -q "bad.ini:3:" "$E2E_TMP/out" || fail "bad config message lacks FILE:LINE: $(cat "$E2E_TMP/out")"
"$NODE" -c "$E2E_TMP/nonexistent.ini" >/dev/null 2>&1 && fail "missing -c file accepted"
"$NODE" -o node.nokey=1 >/dev/null 2>&1 && fail "unknown key accepted"
"$NODE" --version | grep -q "kvpool-node" || fail "--version"
"$NODE" --help | grep -q "segment_size" || fail "--help lacks the [node] keys"
"$NODE" -c "$E2E_TMP/pool.ini" -o node.name=printed --print-config >"$E2E_TMP/out" || fail "--print-config"
grep -q "node.name = printed" "$E2E_TMP/out" || fail "--print-config lacks the override"
printf '[node]\nname = layered\n' >"$E2E_TMP/layer.ini"
"$NODE" -c "$E2E_TMP/pool.ini" -c "$E2E_TMP/layer.ini" --print-config >"$E2E_TMP/out" || fail "two -c"
grep -q "node.name = layered" "$E2E_TMP/out" || fail "second -c file not layered"
grep -q "node.heartbeat_interval = 200ms" "$E2E_TMP/out" || fail "first -c file lost"
ok "command line: config errors exit 1 with FILE:LINE, --help, --version, --print-config, -c layering"
echo "node_daemon: all passed"
