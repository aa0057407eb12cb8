#!/bin/bash
# python.sh — builds the Python module (make python) and runs its unittest
# suite (python/tests) against real kvpool-master / kvpool-node processes that
# the tests start on private ports and stop themselves. Exit 0 pass, 1 fail,
# 77 skip (no Python headers, daemons not built, ThreadSanitizer build).
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
B=${KVP_BUILD:-$root/build}
PY=${PYTHON:-python3}
cd "$root" || exit 1

command -v "$PY" >/dev/null || { echo "skip: $PY not found"; exit 77; }
inc=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
if [ -z "$inc" ] || [ ! -f "$inc/Python.h" ] || ! command -v "$PY-config" >/dev/null; then
	echo "skip: Python development headers missing (apt-get install python3-dev)"
	exit 77
fi
for b in kvpool-master kvpool-node; do
	[ -x "$B/$b" ] || { echo "skip: $B/$b is not built"; exit 77; }
done

# The module is built with the flags of the tree under test.
flags=()
preload=()
case $(basename "$B") in
build-tsan)
	echo "skip: the Python module is not tested under ThreadSanitizer"
	exit 77
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
mb=${B#"$root"/}
if ! make --no-print-directory -s -C "$root" BUILD="$mb" PYTHON="$PY" "${flags[@]}" python; then
	echo "FAIL: make python"
	exit 1
fi

export KVP_BUILD="$B"
export PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}"
"${preload[@]}" "$PY" -m unittest discover -s python/tests -t python/tests -v
rc=$?
[ $rc = 0 ] && exit 0
exit 1
