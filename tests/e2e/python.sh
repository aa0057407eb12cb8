#!/bin/bash
# python.sh — builds the Python module (make python) and runs its unittest
# suite (python/tests) against real kvpool-master / kvpool-node processes that
# the tests start on private ports and stop themselves. Exit 0 pass, 1 fail,
# 77 skip (no Python headers, daemons not built, ThreadSanitizer build).
# run.sh: alone — test_embedded kills a store and checks that its orphaned
# segment is still there, then that the next store removes it: any node
# another test starts would remove it first.
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-python3}
cd "$E2E_ROOT" || exit 1

need "$B/kvpool-master" "$B/kvpool-node"
e2e_init python
py_build "$PY"
preload=("${PY_RUN[@]}")

export KVP_BUILD="$B"
# The suite's daemons live under a private TMPDIR: if the interpreter dies
# without running its own cleanup (a sanitizer abort), stop them and remove
# their segments here.
export TMPDIR=$E2E_TMP
on_cleanup "pkill -TERM -f -- '$E2E_TMP'; sleep 1; pkill -KILL -f -- '$E2E_TMP';
	for s in \$(sed -n 's/^segment = //p' '$E2E_TMP'/*/*.ini 2>/dev/null); do rm -f \"/dev/shm/\$s\"; done"
export PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}"
"${preload[@]}" "$PY" -m unittest discover -s python/tests -t python/tests -v
rc=$?
# The tensor tests (and the SGLang backend's with torch index tensors and
# bf16 pages) need torch. When $PY has none but the system interpreter
# of the same version has Debian's python3-torch (a pyenv python3 first on
# PATH), they run there too: the module's ABI is the same.
sys_py=/usr/bin/python3
# Not in the ASan pass (build-san): torch under the ASan runtime takes minutes
# and the first pass runs them against the same C code.
if [ $rc = 0 ] && [ "$(basename "$B")" != build-san ] &&
	! "$PY" -c 'import torch' 2>/dev/null && [ -x $sys_py ] &&
	[ "$("$PY" -c 'import sys; print(sys.version_info[:2])')" = \
	  "$($sys_py -c 'import sys; print(sys.version_info[:2])')" ] &&
	$sys_py -c 'import torch' 2>/dev/null; then
	echo "tensor tests and the SGLang backend's with $sys_py (torch)"
	(cd python/tests && "${preload[@]}" $sys_py -m unittest -v test_tensor test_sglang_backend) || rc=1
fi
[ $rc = 0 ] && exit 0
exit 1
