#!/bin/bash
# python_interp.sh — `make python` follows PYTHON: the extension's objects
# are rebuilt when PYTHON names an interpreter with other headers or another
# ABI tag (a pyenv python3 first on PATH, then Debian's /usr/bin/python3),
# and left alone for the same one. Compiles one object of the extension in
# a private build directory (the tree's own config.mk), nothing else; then
# the same through a venv of $b (no python-config there: sysconfig it is).
# Exit 0 pass, 1 fail, 77 skip (no second interpreter with headers).
. "$(dirname "$0")/lib.sh"
cd "$E2E_ROOT" || exit 1
[ -f "$B/config.mk" ] || skip "$B/config.mk is not there (make first)"
a=$(command -v python3)
b=/usr/bin/python3
inc() { "$1" -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null; }
[ -n "$a" ] && [ -x "$b" ] || skip "needs python3 on PATH and $b"
ia=$(inc "$a")
ib=$(inc "$b")
for p in "$a" "$b"; do
	i=$(inc "$p")
	[ -n "$i" ] && [ -f "$i/Python.h" ] || skip "$p: no Python headers"
done
[ "$ia" != "$ib" ] || skip "python3 on PATH has $b's headers: one interpreter"
e2e_init pyinterp

bd=$E2E_TMP/build
mkdir -p "$bd"
cp "$B/config.mk" "$bd/config.mk"	# newer than tools/: not remade
obj=$bd/python/pymodule.o
mk() {	# PYTHON: make the object; its output in $E2E_TMP/out
	make --no-print-directory -C "$E2E_ROOT" BUILD="$bd" PYTHON="$1" "$obj" \
		>"$E2E_TMP/out" 2>&1 || fail "make PYTHON=$1: $(tail -n 5 "$E2E_TMP/out")"
}
built() { grep -q 'pymodule' "$E2E_TMP/out"; }

mk "$a"
built || fail "first build with $a compiled nothing: $(cat "$E2E_TMP/out")"
grep -qF -- "-I$ia" "$bd/python/interpreter" || fail "stamp does not name $ia: $(cat "$bd/python/interpreter")"
mk "$a"
built && fail "the same interpreter rebuilt: $(cat "$E2E_TMP/out")"
mk "$b"
built || fail "PYTHON=$b after $a did not rebuild"
grep -qF -- "-I$ib" "$bd/python/interpreter" || fail "stamp does not name $ib: $(cat "$bd/python/interpreter")"
mk "$b"
built && fail "PYTHON=$b twice rebuilt: $(cat "$E2E_TMP/out")"
mk "$a"
built || fail "back to $a did not rebuild"
echo "ok: $a ($ia) and $b ($ib) each rebuild the extension, the same one does not"
# A venv's interpreter has no python-config; its headers are its base's.
"$b" -m venv --without-pip "$E2E_TMP/venv" || fail "$b -m venv"
[ ! -e "$E2E_TMP/venv/bin/python-config" ] || fail "the venv has a python-config: not the case tested"
mk "$E2E_TMP/venv/bin/python"
built || fail "a venv of $b after $a did not rebuild"
grep -qF -- "-I$ib" "$bd/python/interpreter" || fail "venv: stamp does not name $ib: $(cat "$bd/python/interpreter")"
mk "$b"
built && fail "$b after its venv rebuilt: $(cat "$E2E_TMP/out")"
echo "ok: a venv of $b (no python-config) builds with $b's headers, as $b itself"
exit 0
