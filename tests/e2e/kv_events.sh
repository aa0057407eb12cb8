#!/bin/bash
# kv_events.sh — the master's KV events (docs/master.md "KV events") read by
# a Python subscriber (examples/kv_events_subscriber.py, Debian's python3
# with python3-zmq and python3-msgpack): with events off the master does not
# map libzmq; on, a chain put in one batch arrives as BlockStored events with
# the keys' hashes and parent links in seq order, a remove and an eviction
# as BlockRemoved, a late subscriber replays every batch from seq 0 (the
# first: AllBlocksCleared) through the ROUTER socket, a malformed replay
# request is refused and counted; Mooncake's flags turn events on in vLLM's
# legacy array layout, and a restarted master announces AllBlocksCleared
# and then the blocks its nodes re-report; a demotion to a node's spill
# tier stores the block on DISK and removes it from CPU; clearing the pool
# (rm --all) sends one AllBlocksCleared. Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
cd "$E2E_ROOT" || exit 1

need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool"
[ -x "$PY" ] || skip "$PY is not installed"
"$PY" -c 'import zmq, msgpack' 2>/dev/null ||
	skip "$PY lacks zmq or msgpack (apt-get install python3-zmq python3-msgpack)"
e2e_init kv_events
py_build "$PY"
export PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}"
for v in $(env | sed -n 's/^\(\(MOONCAKE\|KVPOOL\)_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
PYX=(${PY_RUN[@]+"${PY_RUN[@]}"} "$PY")	# what imports kvpool (ASan first under build-san)
SUB=("${PYX[@]}" examples/kv_events_subscriber.py)

read -r EVP RPP MCP <<<"$(free_ports 3)"
pool_ini "kv_events_endpoint = tcp://127.0.0.1:$EVP" \
	"kv_events_replay_endpoint = tcp://127.0.0.1:$RPP" \
	"kv_events_object_key = true" "kv_events_backend_id = e2e" "kv_events_block_size = 16" \
	"[client]" "timeout = 10s" "[log]" "level = info"
pool_node n1 "segment_size = 16M" "heartbeat_interval = 300ms"

maps_zmq() { grep -q 'libzmq' "/proc/$1/maps"; }

# ---- off: no libzmq in the master ----
MASTER_ARGS=(-o master.kv_events_endpoint=)
run_master
run_node n1
wait_nodes n1 20 || fail "node n1 did not join"
echo hello | kv put off-key - >/dev/null || fail "put with events off"
maps_zmq "$MASTER_PID" && fail "the master mapped libzmq with kv_events_endpoint empty"
ok "events off: the master does not load libzmq"
stop_master || fail "master exit status $?"

# ---- on ----
MASTER_ARGS=()
run_master
maps_zmq "$MASTER_PID" || fail "the master did not load libzmq with events on"
wait_nodes n1 20 || fail "node n1 did not rejoin"
LIVE=$E2E_TMP/live.jsonl
spawn sub "${SUB[@]}" sub "tcp://127.0.0.1:$EVP" --out "$LIVE"

# A PUB socket drops what it publishes before a subscriber's connection is
# up: put probes until the subscriber has seen one.
seen_key() { grep -q "\"object_key\": \"$1\"" "$LIVE" 2>/dev/null; }
probe() { echo p | kv put "$1" - --upsert >/dev/null 2>&1; seen_key "$1"; }
waitfor 20 probe probe-1 || fail "the subscriber saw no event (master log: $MASTER_LOG)"
ok "a subscriber receives events"

# a chain of five blocks in one batch put: keys are decimal u64, their hashes
"${PYX[@]}" - "$POOL_INI" <<'PY' || fail "python chain put"
import sys, kvpool
s = kvpool.DistributedStore()
assert s.setup(dict(config_file=sys.argv[1])) == 0, s.last_error()
keys = [str(1001 + i) for i in range(5)]
assert s.put_batch(keys, [bytes([i]) * 4096 for i in range(5)]) == 0
assert s.put_batch(["0x10", "tail-x"], [b"a" * 100, b"b" * 100], pred="1005") == 0
PY
kv rm 1003 >/dev/null || fail "rm 1003"
waitfor 20 probe probe-2 || fail "probe-2 not seen"

# Eviction: 30 MiB into a 16 MiB segment.
"${PYX[@]}" - "$POOL_INI" <<'PY' || fail "python eviction puts"
import sys, kvpool
s = kvpool.DistributedStore()
assert s.setup(dict(config_file=sys.argv[1])) == 0, s.last_error()
for i in range(30):
    r = s.put("ev-%02d" % i, b"e" * (1 << 20))
    assert r == 0, (i, r)
PY
[ "$(metric kvpool_master_evictions_total)" -gt 0 ] || fail "no eviction happened"
waitfor 20 probe probe-3 || fail "probe-3 not seen"
for i in $(seq -w 0 29); do
	if kv exists "ev-$i" -q; then echo "ev-$i"; fi
done >"$E2E_TMP/present"

"$PY" - "$LIVE" "$E2E_TMP/present" <<'PY' || fail "live stream check"
import json, sys
def fnv(k):
    h = 0xcbf29ce484222325
    for c in k.encode():
        h = ((h ^ c) * 0x100000001b3) & (2**64 - 1)
    return h
rows = [json.loads(l) for l in open(sys.argv[1])]
seqs = [r["seq"] for r in rows]
assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "seqs not contiguous: %r" % seqs
ev = []
for r in rows:
    b = r["batch"]
    assert set(b) == {"ts", "events", "data_parallel_rank"}, b
    assert isinstance(b["ts"], float) and b["data_parallel_rank"] == 0
    ev += b["events"]
stored = [e for e in ev if e["type"] == "BlockStored"]
removed = [e for e in ev if e["type"] == "BlockRemoved"]
for e in stored:
    assert list(e)[:8] == ["type", "block_hashes", "parent_block_hash", "token_ids",
                           "block_size", "lora_id", "medium", "lora_name"], list(e)
    assert e["token_ids"] == [] and e["block_size"] == 16 and e["lora_id"] is None
    assert e["backend_id"] == "e2e" and e["medium"] == "CPU", e
chain = [e for e in stored if e["object_key"] in ("1001", "1002", "1003", "1004", "1005",
                                                  "0x10", "tail-x")]
got = [(e["object_key"], e["block_hashes"], e["parent_block_hash"]) for e in chain]
want = [("1001", [1001], None), ("1002", [1002], 1001), ("1003", [1003], 1002),
        ("1004", [1004], 1003), ("1005", [1005], 1004), ("0x10", [16], 1005),
        ("tail-x", [fnv("tail-x")], 16)]
assert got == want, got
rm = [e for e in removed if e["object_key"] == "1003"]
assert len(rm) == 1 and rm[0]["block_hashes"] == [1003] and rm[0]["medium"] == "CPU", rm
present = set(open(sys.argv[2]).read().split())
gone = {e["object_key"] for e in removed if e["object_key"].startswith("ev-")}
evs = {"ev-%02d" % i for i in range(30)}
assert gone, "no BlockRemoved for an evicted block"
assert gone == evs - present, (sorted(gone), sorted(present))
print("live: %d batches, %d stored, %d removed (%d evicted)" %
      (len(rows), len(stored), len(removed), len(gone)))
PY
ok "BlockStored with hashes and parents in seq order; BlockRemoved on rm and on eviction"

# ---- a late subscriber replays from seq 0 ----
REP=$E2E_TMP/replay.jsonl
"${SUB[@]}" replay "tcp://127.0.0.1:$RPP" --from 0 --out "$REP" || fail "replay"
"$PY" - "$LIVE" "$REP" <<'PY' || fail "replay check"
import json, sys
live = {r["seq"]: r["batch"] for r in map(json.loads, open(sys.argv[1]))}
rep = [json.loads(l) for l in open(sys.argv[2])]
seqs = [r["seq"] for r in rep]
assert seqs and seqs[0] == 0 and seqs == list(range(len(seqs))), seqs
assert rep[0]["batch"]["events"][0] == {"type": "AllBlocksCleared", "backend_id": "e2e"}, rep[0]
common = [r for r in rep if r["seq"] in live]
assert common and all(r["batch"] == live[r["seq"]] for r in common)
assert max(seqs) >= max(live)
PY
"$PY" - "tcp://127.0.0.1:$RPP" <<'PY' || fail "replay from a later seq"
import sys, zmq
s = zmq.Context.instance().socket(zmq.DEALER)
s.connect(sys.argv[1])
s.send_multipart([b"", (3).to_bytes(8, "big")])
first = None
while True:
    assert s.poll(10000)
    f = s.recv_multipart()
    seq = int.from_bytes(f[1], "big", signed=True)
    if seq == -1:
        break
    first = seq if first is None else first
assert first == 3, first
# malformed: a 3-byte seq, then too many frames; both refused, counted
s.send_multipart([b"", b"abc"])
s.send_multipart([b"", b"\0" * 8, b"x"])
assert not s.poll(500)
PY
waitfor 10 test "$(metric kvpool_master_kv_events_bad_requests_total)" = 2 ||
	fail "bad replay requests not counted: $(metric kvpool_master_kv_events_bad_requests_total)"
alive "$MASTER_PID" || fail "the master died"
[ "$(metric kvpool_master_kv_events_replays_total)" -ge 2 ] || fail "replays not counted"
[ "$(metric kvpool_master_kv_events_dropped_total)" = 0 ] || fail "events dropped"
ok "a late subscriber replays every batch from seq 0; malformed requests are refused"
stop_pid "$SPAWN_PID"
for k in 1001 1002 1004 1005; do kv exists "$k" -q && echo "$k"; done >"$E2E_TMP/chain_left"
stop_master || fail "master exit status $?"

# ---- Mooncake's flags, legacy layout; a restart re-announces ----
MASTER_ARGS=(--enable_kv_events=true "--kv_events_bind_endpoint=tcp://127.0.0.1:$MCP"
	--kv_events_backend_id=mc --kv_events_emit_legacy_compat=true
	--kv_events_emit_object_key=false)
run_master
maps_zmq "$MASTER_PID" || fail "--enable_kv_events: the master did not load libzmq"
wait_nodes n1 20 || fail "node n1 did not rejoin"
LEG=$E2E_TMP/legacy.jsonl
spawn sub2 "${SUB[@]}" sub "tcp://127.0.0.1:$MCP" --out "$LEG"
seen_leg() { grep -q "\"BlockStored\", \\[$1\\]" "$LEG" 2>/dev/null; }
n=0
lprobe() { n=$((n + 1)); echo p | kv put "$((900000 + n))" - >/dev/null 2>&1; seen_leg "$((900000 + n))"; }
waitfor 30 lprobe || fail "no legacy-layout event on the Mooncake flags' endpoint"
legacy_ok() {
	"${SUB[@]}" replay "tcp://127.0.0.1:$RPP" --from 0 --out "$E2E_TMP/replay2.jsonl" &&
	"$PY" - "$E2E_TMP/replay2.jsonl" "$E2E_TMP/chain_left" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
b0 = rows[0]["batch"]
assert isinstance(b0, list) and len(b0) == 3 and b0[2] == 0, b0
assert b0[1][0] == ["AllBlocksCleared"], b0
ev = [e for r in rows for e in r["batch"][1]]
stored = {e[1][0]: e for e in ev if e[0] == "BlockStored"}
left = {int(k) for k in open(sys.argv[2]).read().split()}
# the blocks the node re-reported to the new master, in the array layout
assert left <= set(stored) and 1003 not in stored, (sorted(stored), left)
for e in stored.values():
    assert len(e) == 7 and e[3] == [] and e[4] == 16 and e[5] is None and e[6] == "CPU", e
PY
}
waitfor 20 legacy_ok || fail "legacy layout check (see above)"
ok "Mooncake's --enable_kv_events flags: vLLM's array layout; a restart sends AllBlocksCleared, then the re-reported blocks"
stop_pid "$SPAWN_PID"
stop_master || fail "master exit status $?"

# ---- the spill tier: a demotion stores the block on DISK, removes it from CPU ----
stop_pid "$NODE_PID" || fail "node n1 exit status $?"
pool_node n2 "segment_size = 16M" "heartbeat_interval = 300ms" \
	"[spill]" "path = $E2E_TMP/spill.dat" "size = 64M"
MASTER_ARGS=()
run_master
run_node n2
wait_nodes n2 20 || fail "node n2 did not join"
LIVE=$E2E_TMP/spill.jsonl
spawn sub3 "${SUB[@]}" sub "tcp://127.0.0.1:$EVP" --out "$LIVE"
waitfor 20 probe probe-4 || fail "probe-4 not seen"
"${PYX[@]}" - "$POOL_INI" <<'PY' || fail "python spill puts"
import sys, kvpool
s = kvpool.DistributedStore()
assert s.setup(dict(config_file=sys.argv[1])) == 0, s.last_error()
for i in range(30):
    assert s.put("sp-%02d" % i, b"s" * (1 << 20)) == 0, i
PY
[ "$(metric kvpool_master_demotions_total)" -gt 0 ] || fail "no demotion happened"
waitfor 20 probe probe-5 || fail "probe-5 not seen"
"$PY" - "$LIVE" "$(metric kvpool_master_demotions_total)" <<'PY' || fail "spill events check"
import json, sys
ev = [e for l in open(sys.argv[1]) for e in json.loads(l)["batch"]["events"]]
ev = [e for e in ev if e.get("object_key", "").startswith("sp-")]
order = [(e["type"], e["medium"], e["object_key"]) for e in ev]
disk = [k for t, m, k in order if t == "BlockStored" and m == "DISK"]
assert disk and len(disk) == len(set(disk)) <= int(sys.argv[2]), (disk, sys.argv[2])
for k in disk:
    i = order.index(("BlockStored", "DISK", k))
    assert order.index(("BlockStored", "CPU", k)) < i < order.index(("BlockRemoved", "CPU", k)), k
assert not [o for o in order if o[0] == "BlockRemoved" and o[1] == "DISK"], order
print("spill: %d blocks demoted: stored on DISK, then removed from CPU" % len(disk))
PY
ok "a demotion to the spill tier: BlockStored DISK, then BlockRemoved CPU"

# the pool cleared: one AllBlocksCleared, no BlockRemoved per block
kv rm --all --force >/dev/null || fail "rm --all"
waitfor 20 probe probe-6 || fail "probe-6 not seen"
"$PY" - "$LIVE" <<'PY' || fail "rm --all events check"
import json, sys
ev = [e for l in open(sys.argv[1]) for e in json.loads(l)["batch"]["events"]]
last_sp = max(i for i, e in enumerate(ev) if e.get("object_key", "").startswith("sp-"))
tail = ev[last_sp + 1:]
types = [e["type"] for e in tail]
assert types.count("AllBlocksCleared") == 1 and "BlockRemoved" not in types, types
i = types.index("AllBlocksCleared")
assert tail[i + 1]["object_key"] == "probe-6" and tail[i + 1]["type"] == "BlockStored", tail
PY
ok "rm --all: one AllBlocksCleared instead of a BlockRemoved per block"
stop_master || fail "master exit status $?"
echo "PASS kv_events.sh"
