#!/bin/bash
# tests/bench/trace_bench.sh [BUILD] — what the pool keeps, measured on a
# production trace (Mooncake's FAST'25 conversation trace, committed as
# tests/data/conversation_trace.jsonl.gz; run it from the top of the tree):
# at 2,000 blocks (1M tokens), 6,000 (3M tokens) and 12,000 blocks of 512
# tokens (64 KiB values), the token hit rate of kvpool live
#   - through the C client: `kvpool replay --sweep`, which starts a private
#     master and node per capacity with a segment of exactly that many
#     blocks, and computes from the same requests the hit rates of
#     unlimited capacity, exact LRU, the offline optimum and kvpool's own
#     policy (its model, src/cli/polsim.c) at it;
#   - through Mooncake's Python API (tests/bench/trace_mooncake.py:
#     batch_is_exist, batch_get_into, batch_put_from with pred=), against a
#     private master and node started here with the segment size the tool
#     used for the same capacity;
# and prints one table: capacity, both live hit rates, the model, unlimited /
# LRU / optimum, kvpool/LRU, the fraction of the way from LRU to the optimum,
# failed puts, wrong values, req/s. The plot of the sweep is kept as
# $TRACE_BENCH_PLOT when set. Every value read is verified by both.
# BENCH_SMOKE=1 (make test): 300 requests at 400 blocks of 16 KiB, seconds.
# Exit 0 when it ran (hit rates and speeds are figures, never failures), 1
# on a functional error (a wrong value, a failed put, a crash), 77 when a
# tool is missing. About 3 minutes.
BENCH_BUILD=${1:-} . "$(dirname "$0")/bench_lib.inc" || exit 1
e2e_init trace_bench
need "$B/kvpool" "$B/kvpool-master" "$B/kvpool-node" python3
trace=$E2E_ROOT/tests/data/conversation_trace.jsonl.gz
[ -f "$trace" ] || fail "$trace is missing"
caps=$(pick 400 2000,6000,12000)
block=$(pick 16K 64K)
limit=()
[ $SMOKE = 1 ] && limit=(--limit 300)
py_build "${PYTHON:-python3}"
export PYTHONPATH=$B/python

# ---- kvpool replay: the C client, the references ----------------------
echo "== kvpool replay --sweep $caps (${limit[*]:-all requests}), blocks of $block"
"$B/kvpool" replay --sweep "$caps" --block-bytes "$block" "${limit[@]}" \
	--plot "$E2E_TMP/plot.svg" --json "$trace" >"$E2E_TMP/sweep.json" 2>"$E2E_TMP/sweep.err"
rc=$?
cat "$E2E_TMP/sweep.err"
[ -s "$E2E_TMP/sweep.json" ] || fail "kvpool replay --sweep exited $rc without a result"
pyjson "$E2E_TMP/sweep.json" 'all(x.get("ran", True) for x in r["runs"])' ||
	fail "kvpool replay --sweep: a pool did not start: $(cat "$E2E_TMP/sweep.err")"
pyjson "$E2E_TMP/sweep.json" 'all(x["wrong_values"] == 0 and x["failed_puts"] == 0 and
	x["client_failures"] == 0 and x["get_errors"] == 0 for x in r["runs"])' ||
	fail "kvpool replay: functional errors: $(cat "$E2E_TMP/sweep.json")"
[ $rc = 0 ] || fail "kvpool replay --sweep exited $rc"
[ -n "${TRACE_BENCH_PLOT:-}" ] && cp "$E2E_TMP/plot.svg" "$TRACE_BENCH_PLOT"

# ---- the Mooncake API against pools of the same size ----------------------
for cap in ${caps//,/ }; do
	seg=$(jval "$E2E_TMP/sweep.json" "[x['segment_size'] for x in r['runs'] if x['requested_capacity'] == $cap][0]")
	echo "== Mooncake API: $cap blocks (segment of $seg bytes)"
	pool_ini "[log]" "level = warning"
	pool_node "c$cap" "segment_size = $seg" "remove_segment_on_exit = true"
	run_master
	run_node "c$cap"
	wait_nodes "c$cap" 30 || fail "the node of $cap blocks did not come up"
	"${PY_RUN[@]}" python3 "$E2E_ROOT/tests/bench/trace_mooncake.py" --config "$POOL_INI" \
		--block-bytes "$block" "${limit[@]}" "$trace" >"$E2E_TMP/py-$cap.json" 2>"$E2E_TMP/py-$cap.err"
	rc=$?
	cat "$E2E_TMP/py-$cap.err"
	[ -s "$E2E_TMP/py-$cap.json" ] || fail "trace_mooncake.py exited $rc without a result"
	pyjson "$E2E_TMP/py-$cap.json" 'r["wrong_values"] == 0 and r["failed_puts"] == 0 and
		r["get_errors"] == 0 and r["exists_errors"] == 0' ||
		fail "Mooncake API at $cap blocks: functional errors: $(cat "$E2E_TMP/py-$cap.json")"
	[ $rc = 0 ] || fail "trace_mooncake.py exited $rc"
	stop_pid "$NODE_PID" || fail "kvpool-node exited $?"
	stop_master || fail "kvpool-master exited $?"
done

# ---- the table -----------------------------------------------------------
python3 - "$E2E_TMP" "$caps" <<'PY'
import json, sys
d, caps = sys.argv[1], [int(c) for c in sys.argv[2].split(",")]
sw = json.load(open(d + "/sweep.json"))
runs = {x["requested_capacity"]: x for x in sw["runs"]}
def f(v, fmt="%.4f"):
    return "-" if v is None else fmt % v
print("\n%s, %d requests, blocks of %d tokens / %d bytes; unlimited capacity %.4f"
      % (sw["trace"].rsplit("/", 1)[-1], sw["requests"], sw["tokens_per_block"],
         sw["block_bytes"], sw["unlimited"]))
print("%8s %8s %8s %8s %8s %8s %8s %7s %7s %8s %8s %7s %6s %8s %8s" % (
    "CAPACITY", "KV(C)", "KV(API)", "MODEL", "UNLIM", "LRU", "OPTIMUM", "C/LRU", "API/LRU", "FRAC(C)",
    "FRAC(API)", "FAILED", "WRONG", "REQ/S(C)", "REQ/S(PY)"))
for c in caps:
    x, p = runs[c], json.load(open("%s/py-%d.json" % (d, c)))
    s = x["sim"]
    span = s["optimum"] - s["lru"]
    print("%8d %8.4f %8.4f %8.4f %8.4f %8.4f %8.4f %7s %7s %8s %8s %7d %6d %8.1f %8.1f" % (
        x["capacity_blocks"], x["hit_rate"], p["hit_rate"], s["policy"], s["unlimited"], s["lru"], s["optimum"],
        f(x["hit_rate"] / s["lru"] if s["lru"] else None, "%.2f"),
        f(p["hit_rate"] / s["lru"] if s["lru"] else None, "%.2f"),
        f((x["hit_rate"] - s["lru"]) / span if span else None, "%.2f"),
        f((p["hit_rate"] - s["lru"]) / span if span else None, "%.2f"),
        x["failed_puts"] + p["failed_puts"], x["wrong_values"] + p["wrong_values"],
        x["requests_per_s"], p["requests_per_s"]))
print("C: kvpool replay (libkvpool); API: MooncakeDistributedStore from Python, pred= %s;"
      % ("passed" if all(json.load(open("%s/py-%d.json" % (d, c)))["pred"] for c in caps)
         else "not taken by this module"))
print("MODEL: kvpool's policy simulated on the same requests; FRAC: (kvpool - LRU) / (optimum - LRU);")
print("FAILED and WRONG: both clients together.")
PY
[ $SMOKE = 1 ] && echo "SMOKE run: the numbers mean nothing"
ok "trace replayed through the C client and the Mooncake API; every value verified"
