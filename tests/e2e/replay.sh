#!/bin/bash
# replay.sh — `kvpool replay` (docs/replay.md) against a private pool, on
# the committed production trace (tests/data/conversation_trace.jsonl.gz):
#  - 300 requests, --json: every value verified (0 wrong), 0 failed puts,
#    the simulations present and ordered unlimited >= optimum >= LRU, the
#    model of kvpool's policy present and no higher than unlimited, the
#    live hit rate no higher than unlimited capacity's, the capacity taken
#    from the pool, and the run's keys removed afterwards;
#  - two client processes with --keep, then a second run over the kept
#    keys: it hits and verifies them; a run with another --seed over the
#    same keys finds every value wrong and exits 1 (the check works);
#  - a pool with a spill tier: hits from disk counted apart;
#  - --timestamps --speed; --sim-only on a plain copy = on the .gz;
#  - a bad trace: FILE:LINE and exit 1; a missing one, usage errors (2);
#  - --sweep of two small capacities against private pools it starts
#    itself: exact capacities, a valid SVG plot, nothing left behind, also
#    after a Ctrl-C in the middle; --master eviction_policy=lru reaches their
#    master (the live rate is exact LRU's) and the model (its LRU mode),
#    --sim-only --master sets the model alone, bad --master keys exit 2.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh" || exit 1
e2e_init replay
need "$B/kvpool" "$B/kvpool-master" "$B/kvpool-node" python3
trace=$E2E_ROOT/tests/data/conversation_trace.jsonl.gz
[ -f "$trace" ] || fail "$trace is missing"

pool_ini "[log]" "level = warning"
pool_node n1 "segment_size = 64M" "remove_segment_on_exit = true"
run_master
run_node n1
wait_nodes n1 20 || fail "the node did not come up"

# ---- one run, JSON -----------------------------------------------------
expect 0 kv replay --limit 300 --block-bytes 16K --json "$trace"
cp "$E2E_TMP/out" "$E2E_TMP/run1.json"
pyjson "$E2E_TMP/run1.json" 'r["requests"] == 300 and r["trace_requests"] == 12031' ||
	fail "request counts: $(cat "$E2E_TMP/run1.json")"
pyjson "$E2E_TMP/run1.json" 'r["wrong_values"] == 0 and r["failed_puts"] == 0 and
	r["get_errors"] == 0 and r["exists_errors"] == 0 and r["client_failures"] == 0 and
	not r["interrupted"]' || fail "errors in the run: $(cat "$E2E_TMP/run1.json")"
pyjson "$E2E_TMP/run1.json" 'all(k in r["sim"] for k in ("unlimited", "lru", "optimum", "policy")) and
	r["sim"]["unlimited"] >= r["sim"]["optimum"] >= r["sim"]["lru"] and r["sim"]["unlimited"] > 0 and
	0 <= r["sim"]["policy"] <= r["sim"]["unlimited"]' ||
	fail "simulations: $(cat "$E2E_TMP/run1.json")"
pyjson "$E2E_TMP/run1.json" '0 <= r["hit_rate"] <= r["sim"]["unlimited"] + 1e-9 and
	abs(r["hit_rate_mem"] + r["hit_rate_disk"] - r["hit_rate"]) < 1e-5 and
	r["hit_blocks_mem"] + r["hit_blocks_disk"] == r["hit_blocks"] and
	r["hit_tokens"] <= r["input_tokens"]' || fail "hit rates: $(cat "$E2E_TMP/run1.json")"
pyjson "$E2E_TMP/run1.json" 'r["capacity_source"] == "stat" and r["block_alloc_bytes"] >= 16384 and
	r["capacity_blocks"] == r["capacity_bytes"] // (r["block_alloc_bytes"] * r["replicas"]) and
	r["capacity_blocks"] > 1000' || fail "capacity: $(cat "$E2E_TMP/run1.json")"
pyjson "$E2E_TMP/run1.json" 'r["puts"] > 0 and r["lookup_blocks"] == 8490 and
	r["bytes_written"] == r["puts"] * 16384 and r["requests_per_s"] > 0 and
	r["lat_ms"]["p50"] <= r["lat_ms"]["p99"] and (r["ratio_lru"] is None or r["ratio_lru"] >= 0)' ||
	fail "counters: $(cat "$E2E_TMP/run1.json")"
prefix=$(jval "$E2E_TMP/run1.json" 'r["key_prefix"]')
case $prefix in replay-*-*-) ;; *) fail "default key prefix '$prefix'" ;; esac
expect 0 kv ls "$prefix"
[ ! -s "$E2E_TMP/out" ] || fail "the run's keys are still there: $(head -n 3 "$E2E_TMP/out")"
ok "300 requests: every value verified, sims ordered, capacity from the pool, keys removed"

expect 0 kv replay --limit 60 --block-bytes 16K "$trace"
for w in "hit rate" "reference    unlimited" "model        kvpool's policy simulated" "vs LRU" \
	"req/s" "p50" "disk hits" "0 wrong values, 0 failed puts"; do
	grep -q "$w" "$E2E_TMP/out" || fail "text report lacks '$w': $(cat "$E2E_TMP/out")"
done
ok "text report"

# ---- several clients, kept keys, verification ---------------------------
# 50 requests, about 1,500 blocks: they all fit, so a second pass hits all
expect 0 kv replay --limit 50 --block-bytes 16K --clients 2 --key-prefix "e2e-keep/" --keep --json "$trace"
pyjson "$E2E_TMP/out" 'r["clients"] == 2 and r["requests"] == 50 and r["wrong_values"] == 0 and
	r["failed_puts"] == 0 and r["puts"] > 0' || fail "2 clients: $(cat "$E2E_TMP/out")"
expect 0 kv replay --limit 50 --block-bytes 16K --key-prefix "e2e-keep/" --keep --json "$trace"
pyjson "$E2E_TMP/out" 'r["wrong_values"] == 0 and r["hit_rate"] > 0.9 and r["hit_rate"] > r["sim"]["unlimited"]' ||
	fail "a second pass over kept keys: $(cat "$E2E_TMP/out")"
expect 1 kv replay --limit 20 --block-bytes 16K --key-prefix "e2e-keep/" --seed 2 --json "$trace"
pyjson "$E2E_TMP/out" 'r["wrong_values"] > 0 and r["hit_rate"] == 0' ||
	fail "values of another seed were not caught: $(cat "$E2E_TMP/out")"
grep -q "WRONG BYTES" "$E2E_TMP/err" || fail "no WRONG BYTES line: $(head -n 3 "$E2E_TMP/err")"
ok "2 clients; kept keys hit and verify; values of another seed caught (exit 1)"

expect 0 kv replay --limit 30 --block-bytes 16K --timestamps --speed 200 --json "$trace"
pyjson "$E2E_TMP/out" 'r["requests"] == 30 and r["seconds"] >= 9.0 / 200' ||
	fail "--timestamps: $(cat "$E2E_TMP/out")"
ok "--timestamps --speed"

# ---- a spill tier: hits from disk counted apart --------------------------
stop_pid "$NODE_PID" || fail "kvpool-node exited $?"
stop_master || fail "kvpool-master exited $?"
pool_ini "[log]" "level = warning"
pool_node n2 "segment_size = 16M" "remove_segment_on_exit = true" \
	"[spill]" "path = $E2E_TMP/spill.bin" "size = 256M"
run_master
run_node n2
wait_nodes n2 20 || fail "the node with a spill tier did not come up"
expect 0 kv replay --limit 600 --block-bytes 16K --json "$trace"
pyjson "$E2E_TMP/out" 'r["wrong_values"] == 0 and r["failed_puts"] == 0 and
	r["hit_blocks_disk"] > 0 and r["requests_disk_hit"] > 0 and r["hit_rate_disk"] > 0 and
	r["mean_ms_disk_hit"] is not None and r["capacity_blocks"] < 1000 and
	abs(r["hit_rate_mem"] + r["hit_rate_disk"] - r["hit_rate"]) < 1e-5' ||
	fail "spill tier: $(cat "$E2E_TMP/out")"
ok "spill tier: $(jval "$E2E_TMP/out" 'r["hit_blocks_disk"]') blocks read from disk, counted apart"

# ---- simulations only; plain and gzip ----------------------------------
gzip -dc "$trace" | head -n 500 >"$E2E_TMP/plain.jsonl"
expect 0 "$B/kvpool" replay --sim-only --capacity 1000 --json "$E2E_TMP/plain.jsonl"
cp "$E2E_TMP/out" "$E2E_TMP/plain.json"
expect 0 "$B/kvpool" replay --sim-only --capacity 1000 --limit 500 --json "$trace"
python3 - "$E2E_TMP/out" "$E2E_TMP/plain.json" <<'PY' || fail "plain and gzip differ"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
sys.exit(0 if a["sim"] == b["sim"] and a["requests"] == 500 else 1)
PY
ok "--sim-only: a plain copy and the .gz agree"

# ---- bad input ----------------------------------------------------------
gzip -dc "$trace" | head -n 2 >"$E2E_TMP/bad.jsonl"
echo '{"timestamp": 5, "input_length": 9000, "hash_ids": [1, 2]}' >>"$E2E_TMP/bad.jsonl"
expect 1 kv replay "$E2E_TMP/bad.jsonl"
grep -q "bad.jsonl:3: input_length 9000 does not fit 2 blocks of 512 tokens" "$E2E_TMP/err" ||
	fail "bad line: $(cat "$E2E_TMP/err")"
printf '{"timestamp": 0, "input_length": 5, "hash_ids": [1' >"$E2E_TMP/cut.jsonl"
expect 1 kv replay "$E2E_TMP/cut.jsonl"
grep -q "cut.jsonl:1: not a JSON document" "$E2E_TMP/err" || fail "cut line: $(cat "$E2E_TMP/err")"
head -c 2000 "$trace" >"$E2E_TMP/cut.jsonl.gz"
expect 1 kv replay "$E2E_TMP/cut.jsonl.gz"
grep -q "cut.jsonl.gz" "$E2E_TMP/err" || fail "truncated gzip: $(cat "$E2E_TMP/err")"
expect 1 kv replay "$E2E_TMP/missing.jsonl"
grep -q "missing.jsonl: No such file" "$E2E_TMP/err" || fail "missing: $(cat "$E2E_TMP/err")"
expect 2 kv replay
expect 2 kv replay --plot x.svg "$trace"
expect 2 kv replay --block-bytes 1K --bytes-per-token 2 "$trace"
expect 2 kv replay --sweep 0 "$trace"
ok "bad traces: FILE:LINE, exit 1; usage errors: exit 2"

# ---- --sweep: private pools, exact capacities, the plot -------------------
"$B/kvpool" replay --sweep 600,300 --limit 100 --block-bytes 4K --plot "$E2E_TMP/p.svg" --json \
	"$trace" >"$E2E_TMP/sweep.json" 2>"$E2E_TMP/sweep.err" &
spid=$!
wait $spid || fail "--sweep exited $?: $(cat "$E2E_TMP/sweep.err")"
pyjson "$E2E_TMP/sweep.json" '[x["requested_capacity"] for x in r["runs"]] == [300, 600] and
	all(x["capacity_blocks"] == x["requested_capacity"] and x["wrong_values"] == 0 and
	    x["failed_puts"] == 0 and x["requests"] == 100 and
	    x["sim"]["unlimited"] >= x["sim"]["optimum"] >= x["sim"]["lru"] for x in r["runs"]) and
	len(r["grid"]) > 20 and r["plot"].endswith("p.svg") and
	all(0 <= g["policy"] <= r["unlimited"] for g in r["grid"])' ||
	fail "--sweep JSON: $(cat "$E2E_TMP/sweep.json")"
python3 - "$E2E_TMP/p.svg" <<'PY' || fail "the plot is not a valid SVG chart"
import sys, xml.etree.ElementTree as ET
ns = "{http://www.w3.org/2000/svg}"
root = ET.parse(sys.argv[1]).getroot()
assert root.tag == ns + "svg", root.tag
texts = " ".join(t.text or "" for t in root.iter(ns + "text"))
for w in ("exact LRU", "offline optimum", "kvpool (live)", "kvpool's policy, simulated",
          "unlimited", "token hit rate", "capacity (blocks of 512 tokens)"):
    assert w in texts, w
assert len(list(root.iter(ns + "polyline"))) == 5
assert len(list(root.iter(ns + "circle"))) >= 2
PY
ls /dev/shm/kvpool-replay-$spid-* /tmp/kvpool-replay-$spid-* >/dev/null 2>&1 &&
	fail "--sweep left files behind: $(ls -d /dev/shm/kvpool-replay-$spid-* /tmp/kvpool-replay-$spid-* 2>&1)"
ok "--sweep 300,600: exact capacities, a valid SVG, nothing left behind"

# --master KEY=VALUE reaches the private pools' master: with
# eviction_policy = lru the live pool keeps what an exact LRU keeps (the
# default policy keeps 0.0425 here against LRU's 0.0379).
kv replay --sweep 300 --limit 1500 --block-bytes 4K --master eviction_policy=lru --json \
	"$trace" >"$E2E_TMP/lru.json" 2>"$E2E_TMP/lru.err" || fail "--master: $(cat "$E2E_TMP/lru.err")"
pyjson "$E2E_TMP/lru.json" 'r["master"] == ["eviction_policy=lru"] and
	abs(r["runs"][0]["hit_rate"] - r["runs"][0]["sim"]["lru"]) <= 0.002 and
	abs(r["runs"][0]["sim"]["policy"] - r["runs"][0]["sim"]["lru"]) <= 0.002 and
	r["runs"][0]["wrong_values"] == 0 and r["runs"][0]["failed_puts"] == 0' ||
	fail "--master eviction_policy=lru: $(cat "$E2E_TMP/lru.json")"
# --sim-only: the key sets the model alone (0.0379 in LRU mode, 0.0468 by default)
expect 0 kv replay --sim-only --capacity 300 --limit 1500 --master eviction_policy=lru --json "$trace"
cp "$E2E_TMP/out" "$E2E_TMP/simlru.json"
expect 0 kv replay --sim-only --capacity 300 --limit 1500 --json "$trace"
python3 - "$E2E_TMP/simlru.json" "$E2E_TMP/out" <<'PY' || fail "--sim-only --master: $(cat "$E2E_TMP/simlru.json" "$E2E_TMP/out")"
import json, sys
a, b = (json.load(open(f))["sim"] for f in sys.argv[1:])
sys.exit(0 if abs(a["policy"] - a["lru"]) <= 0.002 and b["policy"] > a["policy"] + 0.004 else 1)
PY
expect 2 kv replay --sweep 300 --master nokey=1 "$trace"
grep -q "has no such key" "$E2E_TMP/err" || fail "--master nokey: $(cat "$E2E_TMP/err")"
expect 2 kv replay --sweep 300 --master eviction_policy=bogus "$trace"
grep -q "bad value" "$E2E_TMP/err" || fail "--master bad value: $(cat "$E2E_TMP/err")"
expect 2 kv replay --sweep 300 --master listen=127.0.0.1:1 "$trace"
expect 2 kv replay --sweep 300 --master eviction_ratio=0.01 --master eviction_ratio=0.02 "$trace"
expect 2 kv replay --master eviction_policy=lru "$trace"
ok "--sweep --master eviction_policy=lru: the pool and the model match exact LRU; bad keys and values: exit 2"

# Ctrl-C in the middle of a sweep: its pool goes too.
"$B/kvpool" replay --sweep 3000,4000 --block-bytes 4K "$trace" >"$E2E_TMP/int.out" 2>"$E2E_TMP/int.err" &
spid=$!
E2E_PIDS+=("$spid")
waitfor 30 sh -c "ls /dev/shm/kvpool-replay-$spid-* >/dev/null 2>&1" ||
	fail "no private pool appeared: $(cat "$E2E_TMP/int.err")"
sleep 0.5
kill -INT "$spid"
rc=0
wait "$spid" || rc=$?
forget "$spid"
[ "$rc" = 1 ] || fail "an interrupted sweep exited $rc: $(tail -n 3 "$E2E_TMP/int.err")"
ls /dev/shm/kvpool-replay-$spid-* /tmp/kvpool-replay-$spid-* >/dev/null 2>&1 &&
	fail "an interrupted sweep left files behind"
pgrep -f "/tmp/kvpool-replay-$spid-" >/dev/null && fail "an interrupted sweep left daemons running"
ok "Ctrl-C during --sweep: exit 1, pools stopped and removed"
