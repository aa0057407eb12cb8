#!/bin/bash
# tests/bench/tensor_bench.sh [BUILD] — the Python module's tensor calls
# against the zero-copy calls they sit on (run it from the top of the tree):
#   batch_put_tensor of 64 torch tensors of 1 MiB  vs  batch_put_from of the
#                                                      same registered memory
#   batch_get_tensor of the same                   vs  batch_get_into a
#                                                      registered buffer
# over the local path and over TCP (client.protocol=tcp), each pair
# alternating in one run (python/bench_tensor.py, target >= 0.9x). Builds the
# module (make python) for the tree under test; starts its own master and
# node on free loopback ports and stops them. Needs torch: the interpreter
# is $PYTHON, python3, or /usr/bin/python3 (Debian's python3-torch), the
# first that imports it. Exit 0 when it ran (missed targets are reported),
# 77 without torch or Python headers, 1 when a call or a check failed.
# Env: BENCH_SMOKE=1 (seconds: 8 tensors of 64 KiB, one round).
BENCH_BUILD=${1:-} . "$(dirname "$0")/bench_lib.inc" || exit 1
e2e_init tensor_bench
need "$B/kvpool-master" "$B/kvpool-node"
py=
for p in ${PYTHON:-} python3 /usr/bin/python3; do
	if command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null; then
		py=$p
		break
	fi
done
[ -n "$py" ] || skip "no Python with torch (apt-get install python3-torch)"
py_build "${PYTHON:-python3}"
export TMPDIR=$E2E_TMP PYTHONPATH=$B/python
on_cleanup "pkill -TERM -f -- '$E2E_TMP' 2>/dev/null; true"
args=(--count "$(pick 8 64)" --size "$(pick 65536 1048576)" --rounds "$(pick 1 5)"
	--iters "$(pick 2 5)" --build "$B")
for proto in auto tcp; do
	"${PY_RUN[@]}" "$py" "$E2E_ROOT/python/bench_tensor.py" --protocol "$proto" "${args[@]}" |
		tee "$E2E_TMP/out.$proto"
	rc=${PIPESTATUS[0]}
	[ "$rc" = 77 ] && skip "torch"
	[ "$rc" = 0 ] || fail "bench_tensor.py --protocol $proto exited $rc"
	for what in put get; do
		r=$(awk -v w="$what" '$1 == w { for (i = 1; i < NF; i++) if ($i == "ratio") print $(i + 1) }' \
			"$E2E_TMP/out.$proto")
		positive "the $what ratio over $proto" "$r"
	done
done
ok "tensor calls measured against batch_put_from / batch_get_into"
