#!/bin/bash
# shipped_symbols.sh — what the built libkvpool ships: the shared library
# exports kvp_* alone (src/lib/libkvpool.map), and neither it nor
# libkvpool.a holds fuzz code (the harnesses are tests/fuzz/ programs that
# link the archives). The symbol table is read whole (nm, not only nm -D):
# a hidden function still ships. The check itself must find a fuzz symbol
# in a fuzz target, so that a build without symbols cannot pass it.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh" || exit 1
e2e_init shipped_symbols
need nm
[ -f "$B/libkvpool.so" ] && [ -f "$B/libkvpool.a" ] || skip "libkvpool is not built"

so=$(readlink -f "$B/libkvpool.so")
nm "$so" >"$E2E_TMP/so.syms" 2>"$E2E_TMP/nm.err" || fail "nm $so: $(cat "$E2E_TMP/nm.err")"
[ -s "$E2E_TMP/so.syms" ] || skip "$so has no symbol table (stripped)"
# fuzz_*, *_fuzz_*, LLVMFuzzer*: the names harness code takes
fuzzy='(^|_)fuzz(_|$)|LLVMFuzzer'
bad=$(awk '{ print $NF }' "$E2E_TMP/so.syms" | grep -iE "$fuzzy" | head -5)
[ -z "$bad" ] || fail "libkvpool.so holds fuzz code: $bad"
bad=$(nm -D "$so" | awk '{ print $NF }' | grep -iE "$fuzzy" | head -5)
[ -z "$bad" ] || fail "libkvpool.so exports fuzz symbols: $bad"
extra=$(nm -D --defined-only "$so" | awk '$2 ~ /[TDBRVW]/ && $3 !~ /^kvp_/ { print $3 }' |
	grep -v '^KVPOOL_0$' | head -5)
[ -z "$extra" ] || fail "libkvpool.so exports more than kvp_*: $extra"
bad=$(nm "$B/libkvpool.a" 2>/dev/null | awk 'NF >= 2 { print $NF }' | grep -iE "$fuzzy" | head -5)
[ -z "$bad" ] || fail "libkvpool.a holds fuzz code: $bad"
ok "libkvpool.so exports kvp_* alone; no fuzz symbol in it or in libkvpool.a"

# the pattern finds what it looks for: a fuzz target's own symbols, where
# a fuzz build is there (build-fuzz/), else a program built here
t=$E2E_ROOT/build-fuzz/fuzz/fuzz_client
if [ ! -x "$t" ]; then
	need cc
	printf 'int LLVMFuzzerTestOneInput(const char *p, unsigned long n);\n%s\n%s\n' \
		'static int fuzz_one(const char *p) { return p != 0; }' \
		'int LLVMFuzzerTestOneInput(const char *p, unsigned long n) { return fuzz_one(p) + (int)n; }' \
		>"$E2E_TMP/f.c"
	cc -g -O0 -shared -fPIC -o "$E2E_TMP/f.so" "$E2E_TMP/f.c" || fail "cc f.c"
	t=$E2E_TMP/f.so
fi
nm "$t" | awk '{ print $NF }' | grep -qiE "$fuzzy" || fail "the check finds no fuzz symbol in $t"
ok "the check finds the fuzz symbols of $(basename "$t")"
