#!/bin/bash
# prefix_reuse.sh — examples/prefix_reuse.py against a private master and
# node: instance A (one process) prefills a prompt and stores its KV pages,
# instance B (another process) reuses the shared prefix and checks the bytes
# against A's manifest, its logits and greedy tokens against a full
# recompute; a B with another model (--layers) finds nothing; a page
# changed in the pool makes B fail; the default mode runs A and B itself.
# Needs torch in /usr/bin/python3 (Debian's python3-torch; PREFIX_REUSE_PYTHON
# names another). Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
skip_in_san_pass "torch under the ASan runtime takes minutes; python.sh runs the instrumented extension"
PY=${PREFIX_REUSE_PYTHON:-/usr/bin/python3}
cd "$E2E_ROOT" || exit 1

need "$B/kvpool-master" "$B/kvpool-node"
[ -x "$PY" ] || skip "$PY is not installed"
"$PY" -c 'import torch' 2>/dev/null || skip "$PY has no torch (apt-get install python3-torch)"
e2e_init prefix_reuse
py_build "$PY"
export PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}"
for v in $(env | sed -n 's/^\(\(MOONCAKE\|KVPOOL\)_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done

pool_ini "[client]" "timeout = 10s" "[log]" "level = warning"
pool_node n1 "segment_size = 128M" "heartbeat_interval = 300ms"
run_master
run_node n1
wait_nodes n1 20 || fail "node n1 did not join"

EX=(${PY_RUN[@]+"${PY_RUN[@]}"} "$PY" examples/prefix_reuse.py --config "$POOL_INI")
# Small enough for 2 cores; the prefix is not a whole number of pages, so
# the page where A and B part is recomputed: 62 pages = 992 tokens reused.
SIZE=(--prefix-tokens 1000 --suffix-tokens 128 --page-tokens 16 --generate 8 --repeat 1)
out=$E2E_TMP/out

expect 0 "${EX[@]}" --role a "${SIZE[@]}"
cp "$out" "$E2E_TMP/a.txt"
cat "$out"
grep -q '^\[A\] device: cpu' "$out" || fail "A does not say its device"
grep -q '^\[A\] stored 70 pages' "$out" || fail "A did not store its 70 pages"
manifest=$(sed -n 's/^\[A\] manifest: \([^ ]*\) .*/\1/p' "$out")
[ -n "$manifest" ] || fail "A printed no manifest key"
ok "A: prefilled 1128 tokens, stored 70 pages and a manifest"

expect 0 "${EX[@]}" --role b "${SIZE[@]}" --repeat 2 --manifest "$manifest"
cp "$out" "$E2E_TMP/b.txt"
cat "$out"
for l in 'pool: 62 of 70 pages cached, 62 loaded: reusing 992 tokens, computing 136' \
	'check kv bytes: ok (62 pages bitwise as A stored them)' \
	'check logits: ok ' 'check greedy tokens: ok (8 generated, identical)' \
	'ttft with the pool: ' 'ttft without the pool: ' 'reused 992 of 1128 prompt tokens' \
	'stored its 8 new pages; pred: ' 'verdict: PASS'; do
	grep -qF "[B] $l" "$out" || fail "B did not print '$l'"
done
# Best of two rounds each: TTFT with 136 tokens to compute is well below
# TTFT with 1128, even on a busy machine.
tp=$(sed -n 's/^\[B\] ttft with the pool: \([0-9.]*\) s.*/\1/p' "$out")
tf=$(sed -n 's/^\[B\] ttft without the pool: \([0-9.]*\) s.*/\1/p' "$out")
awk -v p="$tp" -v f="$tf" 'BEGIN { exit !(p > 0 && p < f) }' ||
	fail "TTFT with the pool ($tp s) is not below TTFT without ($tf s)"
ok "B: reused 992 tokens, bytes as A stored them, logits and tokens as a full recompute; TTFT $tp s vs $tf s"

# Another model (one layer less): another fingerprint, so no page is found.
expect 0 "${EX[@]}" --role b "${SIZE[@]}" --layers 3 --manifest "$manifest" --json
cp "$out" "$E2E_TMP/b3.json"
pyjson "$out" 'r["reused_tokens"] == 0 and r["cached_pages"] == 0 and r["ok"]' ||
	fail "B with 3 layers: $(cat "$out")"
pyjson "$out" 'args[0] and not r["fingerprint"].startswith(args[0])' \
	"$(sed -n 's/.*fingerprint \([0-9a-f]*\)$/\1/p' "$E2E_TMP/a.txt")" ||
	fail "B with 3 layers has A's fingerprint"
ok "B with another model: 0 pages cached, 0 tokens reused"

# A page of A's changed in the pool (same size, one bit): B's byte check
# must catch it. The page's key is the manifest's sixth entry.
${PY_RUN[@]+"${PY_RUN[@]}"} "$PY" - "$POOL_INI" "$manifest" <<'PY' || fail "could not change page 5"
import json, sys, kvpool
s = kvpool.MooncakeDistributedStore()
assert s.setup({"config_file": sys.argv[1]}) == 0, s.last_error()
key = json.loads(s.get(sys.argv[2]))["pages"][5][0]
v = bytearray(s.get(key))
assert len(v) == 65536, len(v)
v[100] ^= 1
assert s.upsert(key, bytes(v)) == 0, s.last_error()
s.close()
PY
expect 1 "${EX[@]}" --role b "${SIZE[@]}" --manifest "$manifest"
grep -qF '[B] check kv bytes: FAIL (page 5 ' "$out" || fail "B missed the changed page: $(cat "$out")"
grep -qF '[B] verdict: FAIL' "$out" || fail "B's verdict is not FAIL"
ok "B fails when a page is not what A stored"

# The default mode: A and B as two processes of the script itself (small
# sizes, another seed: a model of its own, nothing cached yet).
expect 0 "${EX[@]}" --prefix-tokens 200 --suffix-tokens 40 --generate 4 --seed 7 --json
pyjson "$out" 'r["ok"] and r["a"]["stored_pages"] == 15 and r["b"]["reused_tokens"] == 192 and
	r["b"]["kv_check"] == "ok" and r["b"]["tokens_ok"]' || fail "default mode: $(cat "$out")"
grep -qF '[B] verdict: PASS' "$E2E_TMP/err" || fail "default mode: B's lines did not reach stderr"
ok "default mode: A then B, 192 of 240 tokens reused"
