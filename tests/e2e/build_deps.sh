#!/bin/bash
# build_deps.sh — a plain `make` has no side effects: a missing build
# dependency stops it, even as root, with the exact apt-get line and the
# pkg-config module names, and nothing is installed (apt-get is never run)
# or compiled; `tools/deps.sh GROUP` (make deps / make test) still installs.
# Shims on PATH stand in for dpkg-query (one package "missing") and apt-get
# (records that it was called); the real packages are not touched.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init builddeps
need make pkg-config
cd "$E2E_ROOT" || fail "cd $E2E_ROOT"
shim=$E2E_TMP/shim
mkdir -p "$shim"
cat >"$shim/dpkg-query" <<'SH'
#!/bin/sh
# every package installed but libinih-dev
for a; do p=$a; done
[ "$p" = libinih-dev ] && { echo "dpkg-query: no packages found matching $p" >&2; exit 1; }
printf 'install ok installed'
SH
cat >"$shim/apt-get" <<SH
#!/bin/sh
echo "apt-get \$*" >>"$E2E_TMP/apt-called"
exit 0
SH
chmod +x "$shim/dpkg-query" "$shim/apt-get"

# 1. deps.sh --check: the line and the pkg-config name, no apt-get, as root too
PATH="$shim:$PATH" tools/deps.sh --check build >"$E2E_TMP/out" 2>&1 && fail "deps.sh --check passed with libinih-dev missing"
grep -qx "  apt-get install -y libinih-dev" "$E2E_TMP/out" || { cat "$E2E_TMP/out"; fail "no exact apt-get line"; }
grep -q "pkg-config modules: inih" "$E2E_TMP/out" || { cat "$E2E_TMP/out"; fail "no pkg-config name"; }
[ ! -e "$E2E_TMP/apt-called" ] || fail "deps.sh --check ran apt-get: $(cat "$E2E_TMP/apt-called")"
ok "deps.sh --check: '$(grep apt-get "$E2E_TMP/out" | sed 's/^ *//')', pkg-config name, apt-get not run"

# 2. a plain make in a fresh build directory stops before compiling anything
PATH="$shim:$PATH" make --no-print-directory BUILD="$E2E_TMP/b" >"$E2E_TMP/make.out" 2>&1 &&
	fail "make built with libinih-dev missing"
grep -qx "  apt-get install -y libinih-dev" "$E2E_TMP/make.out" || { cat "$E2E_TMP/make.out"; fail "make does not print the apt-get line"; }
[ ! -e "$E2E_TMP/apt-called" ] || fail "a plain make ran apt-get (uid $(id -u)): $(cat "$E2E_TMP/apt-called")"
[ -z "$(find "$E2E_TMP/b" -name '*.o' 2>/dev/null)" ] || fail "make compiled objects without its dependencies"
[ ! -e "$E2E_TMP/b/config.mk" ] || fail "make wrote config.mk without its dependencies"
ok "plain make (uid $(id -u)) stops with the apt-get line, installs and compiles nothing"

# 3. the installing form still installs (as root; the shim records it)
if [ "$(id -u)" = 0 ]; then
	PATH="$shim:$PATH" tools/deps.sh build >"$E2E_TMP/out" 2>&1 || { cat "$E2E_TMP/out"; fail "deps.sh build (root)"; }
	grep -q "install.*libinih-dev" "$E2E_TMP/apt-called" 2>/dev/null || fail "deps.sh build did not run apt-get install libinih-dev"
	ok "deps.sh build (make deps, make test) installs the missing package as root"
fi

# 4. without dpkg (another distribution): checked by pkg-config module
nodeb=$E2E_TMP/nodeb
mkdir -p "$nodeb"
for c in sh id cat gcc make; do p=$(command -v "$c") && ln -s "$p" "$nodeb/$c"; done
cat >"$nodeb/pkg-config" <<SH
#!/bin/sh
[ "\$2" = inih ] && exit 1
exec $(command -v pkg-config) "\$@"
SH
chmod +x "$nodeb/pkg-config"
PATH="$nodeb" sh tools/deps.sh --check build >"$E2E_TMP/out" 2>&1 && fail "deps.sh without dpkg passed with inih missing"
grep -q "pkg-config modules: inih$" "$E2E_TMP/out" || { cat "$E2E_TMP/out"; fail "without dpkg: no pkg-config name"; }
ok "without dpkg-query: '$(tail -1 "$E2E_TMP/out" | sed 's/^ *//')'"

# 5. with everything installed the check passes silently
tools/deps.sh --check build >"$E2E_TMP/out" 2>&1 || { cat "$E2E_TMP/out"; fail "deps.sh --check build on this machine"; }
[ ! -s "$E2E_TMP/out" ] || fail "deps.sh --check printed '$(cat "$E2E_TMP/out")' with everything installed"
ok "deps.sh --check build passes quietly here"
e2e_finish
