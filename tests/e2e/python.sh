#!/bin/bash
# python.sh — builds the Python module (make python) and runs its unittest
# suite (python/tests) against real kvpool-master / kvpool-node processes that
# the tests start on private ports and stop themselves. Exit 0 pass, 1 fail,
# 77 skip (no Python headers, daemons not built, ThreadSanitizer build).
. "$(dirname "$0")/lib.sh"
PY=${PYTHON:-python3}
cd "$E2E_ROOT" || exit 1

need "$PY"
inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
if [ -z "$inc" ] || [ ! -f "$inc/Python.h" ] || ! command -v "$PY-config" >/dev/null; then
	skip "Python development headers missing (apt-get install python3-dev)"
fi
need "$B/kvpool-master" "$B/kvpool-node"

# The module is built with the flags of the tree under test.
flags=()
preload=()
case $(basename "$B") in
build-tsan)
	skip "the Python module is not tested under ThreadSanitizer"
	;;
build-san)
	flags=(SANITIZE=1)
	# An ASan-instrumented extension needs the runtime loaded first; the
	# interpreter itself is not instrumented and keeps memory at exit.
	preload=(env "LD_PRELOAD=$(${CC:-cc} -print-file-name=libasan.so)"
		"ASAN_OPTIONS=detect_leaks=0:${ASAN_OPTIONS:-}")
	;;
esac
# BUILD as the Makefile spells it (relative), so its dependency files apply.
mb=${B#"$E2E_ROOT"/}
make --no-print-directory -s -C "$E2E_ROOT" BUILD="$mb" PYTHON="$PY" "${flags[@]}" python ||
	fail "make python"

export KVP_BUILD="$B"
# The suite's daemons live under a private TMPDIR: if the interpreter dies
# without running its own cleanup (a sanitizer abort), stop them and remove
# their segments here.
e2e_init python
export TMPDIR=$E2E_TMP
on_cleanup "pkill -TERM -f -- '$E2E_TMP'; sleep 1; pkill -KILL -f -- '$E2E_TMP';
	for s in \$(sed -n 's/^segment = //p' '$E2E_TMP'/*/*.ini 2>/dev/null); do rm -f \"/dev/shm/\$s\"; done"
export PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}"
"${preload[@]}" "$PY" -m unittest discover -s python/tests -t python/tests -v
rc=$?
# The tensor tests need torch. When $PY has none but the system interpreter
# of the same version has Debian's python3-torch (a pyenv python3 first on
# PATH), they run there too: the module's ABI is the same.
sys_py=/usr/bin/python3
if [ $rc = 0 ] && ! "$PY" -c 'import torch' 2>/dev/null && [ -x $sys_py ] &&
	[ "$("$PY" -c 'import sys; print(sys.version_info[:2])')" = \
	  "$($sys_py -c 'import sys; print(sys.version_info[:2])')" ] &&
	$sys_py -c 'import torch' 2>/dev/null; then
	echo "tensor tests with $sys_py (torch)"
	(cd python/tests && "${preload[@]}" $sys_py -m unittest -v test_tensor) || rc=1
fi
[ $rc = 0 ] && exit 0
exit 1
