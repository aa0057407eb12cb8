#!/bin/bash
# pip_install.sh — the kvpool package as pip builds it, offline
# (PIP_NO_INDEX=1, --no-build-isolation): in a fresh venv of Debian's
# python3, `pip install ./python` and `pip wheel ./python` (the wheel's tag
# and RECORD checked), import from site-packages, put/get against a real
# master and node, `pip show -f`; kvpool-mooncake (python/mooncake_shim)
# makes `import mooncake.store` resolve to kvpool only once installed, and
# KVPOOL_MOONCAKE_STORE=0 still turns it off; `pip uninstall -y` of both
# leaves site-packages as it was; `make PYTHON=<venv python> install-python`
# works too (pip does not see it). Then install, import, put/get and
# uninstall again in a venv of a second interpreter (python3 on PATH, a
# pyenv one) when that is not /usr/bin/python3 and has headers.
# Exit 0 pass, 1 fail, 77 skip (sanitizer builds, no venv module).
. "$(dirname "$0")/lib.sh"
cd "$E2E_ROOT" || exit 1
sys_py=/usr/bin/python3

case $(basename "$B") in
build-san | build-tsan)
	skip "pip builds a plain extension (not instrumented like $(basename "$B")) that a plain interpreter loads; python.sh covers the sanitizer build"
	;;
esac
need "$B/kvpool-master" "$B/kvpool-node"
[ -x $sys_py ] || skip "$sys_py is not installed"
$sys_py -c 'import venv, ensurepip' 2>/dev/null || skip "$sys_py has no venv/ensurepip (apt-get install python3-venv)"
e2e_init pip

# Offline, nothing in the user's pip cache, no outer make's flags or jobserver.
export PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CACHE_DIR=$E2E_TMP/pip-cache
unset MAKEFLAGS MFLAGS MAKELEVEL PYTHONPATH
# The archives of the tree under test, as the Makefile spells BUILD (relative).
export KVPOOL_BUILD=${B#"$E2E_ROOT"/}

pool_ini
pool_node n1 "segment_size = 64M"
run_master
run_node n1
wait_nodes n1 20 || fail "the node did not register"

# venv PY NAME: a fresh venv of PY; sets VPY (its python) and SITE (its
# site-packages) and writes SITE's listing to $E2E_TMP/NAME.before.
venv() {
	"$1" -m venv "$E2E_TMP/$2" >"$E2E_TMP/$2-venv.log" 2>&1 ||
		fail "$1 -m venv: $(tail -n 5 "$E2E_TMP/$2-venv.log")"
	VPY=$E2E_TMP/$2/bin/python
	SITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
	[ "$SITE" = "$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')" ] ||
		fail "$2: purelib and platlib differ: the listing would miss one"
	(cd "$SITE" && find . | sort) >"$E2E_TMP/$2.before"
}

# vpip NAME ARG...: VPY -m pip ARG..., output in $E2E_TMP/NAME-pip.log.
vpip() {
	local n=$1
	shift
	(cd "$E2E_ROOT" && "$VPY" -m pip "$@") >"$E2E_TMP/$n-pip.log" 2>&1 ||
		fail "pip $*: $(tail -n 15 "$E2E_TMP/$n-pip.log")"
}

# putget NAME: import kvpool outside the tree, put and get a value.
putget() {
	(cd "$E2E_TMP" && "$VPY" - "$MASTER_ADDR" "$1" "$SITE") >"$E2E_TMP/$1-putget.log" 2>&1 <<'PY' ||
import sys, kvpool
master, name, site = sys.argv[1:]
assert kvpool.__file__.startswith(site + "/kvpool/"), kvpool.__file__
assert kvpool._kvpool.__file__.startswith(site + "/kvpool/_kvpool."), kvpool._kvpool.__file__
store = kvpool.MooncakeDistributedStore()
rc = store.setup("localhost", "http://127.0.0.1:1/metadata", 0, 16 << 20, "tcp", "", master)
assert rc == 0, rc
key, val = "pip/" + name, b"pip-installed " * 4096
assert store.put(key, val) == 0
assert store.get(key) == val, "get returned other bytes"
store.close()
print("ok", kvpool._kvpool.__file__)
PY
		fail "$1: import/put/get: $(tail -n 15 "$E2E_TMP/$1-putget.log")"
}

# uninstall NAME DIST...: pip uninstall -y, then SITE is as it was.
uninstall() {
	local n=$1
	shift
	vpip "$n-uninstall" uninstall -y "$@"
	(cd "$SITE" && find . | sort) >"$E2E_TMP/$n.after"
	diff "$E2E_TMP/$n.before" "$E2E_TMP/$n.after" >"$E2E_TMP/$n.diff" ||
		fail "$n: site-packages after pip uninstall differs: $(head -n 20 "$E2E_TMP/$n.diff")"
}

# ---- Debian's python3 ----
t0=$SECONDS
venv "$sys_py" deb
"$VPY" -c 'import wheel' 2>/dev/null && echo "note: this venv has the wheel package (not needed)"
vpip deb install --no-build-isolation ./python
ok "pip install --no-build-isolation ./python in a venv of $sys_py ($((SECONDS - t0)) s)"
putget deb
ok "import kvpool from $SITE, put/get against $MASTER_ADDR"

vpip deb-show show -f kvpool
grep -q "^Location: $SITE\$" "$E2E_TMP/deb-show-pip.log" || fail "pip show: $(cat "$E2E_TMP/deb-show-pip.log")"
ext=$("$VPY" -c 'import sysconfig; print("_kvpool" + sysconfig.get_config_var("EXT_SUFFIX"))')
grep -qx "  kvpool/$ext" "$E2E_TMP/deb-show-pip.log" || fail "pip show -f lists no kvpool/$ext"
ok "pip show -f kvpool: $(grep -c '^  ' "$E2E_TMP/deb-show-pip.log") files, $ext among them"

mkdir -p "$E2E_TMP/wheels"
vpip deb-wheel wheel --no-build-isolation --no-deps -w "$E2E_TMP/wheels" ./python
tag=$("$VPY" -c 'import sys, sysconfig; v = "cp%d%d" % sys.version_info[:2]
print("%s-%s-%s" % (v, v, sysconfig.get_platform().replace("-", "_").replace(".", "_")))')
whl=$E2E_TMP/wheels/kvpool-$(sed -n 's/^VERSION := //p' Makefile)-$tag.whl
[ -f "$whl" ] || fail "pip wheel: no $(basename "$whl"): $(ls "$E2E_TMP/wheels")"
"$VPY" - "$whl" "$tag" "$ext" >"$E2E_TMP/record.log" 2>&1 <<'PY' || fail "the wheel: $(tail -n 5 "$E2E_TMP/record.log")"
import base64, hashlib, sys, zipfile
whl, tag, ext = sys.argv[1:]
z = zipfile.ZipFile(whl)
names = set(z.namelist())
di = {n.split("/")[0] for n in names if ".dist-info/" in n}
assert len(di) == 1, di
di = di.pop()
wheel = z.read(di + "/WHEEL").decode()
assert "Tag: %s\n" % tag in wheel and "Root-Is-Purelib: false" in wheel, wheel
assert "kvpool/" + ext in names and "kvpool/__init__.py" in names, sorted(names)
listed = set()
for line in z.read(di + "/RECORD").decode().splitlines():
    path, digest, size = line.rsplit(",", 2)
    listed.add(path)
    if path == di + "/RECORD":
        assert digest == size == "", line
        continue
    data = z.read(path)
    want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    assert digest == "sha256=" + want and int(size) == len(data), line
assert listed == names, listed ^ names
print(len(names), "files")
PY
ok "pip wheel: $(basename "$whl") ($(stat -c %s "$whl") bytes), RECORD checks ($(cat "$E2E_TMP/record.log"))"

# The hook: mooncake.store is nothing without kvpool-mooncake, kvpool's with it.
hook() {	# prints the module mooncake.store resolves to, or the error
	(cd "$E2E_TMP" && env "$@" "$VPY" -c '
try:
    import mooncake.store as m
    print(m.__name__)
except ImportError as e:
    print(type(e).__name__)')
}
[ "$(hook)" = ModuleNotFoundError ] || fail "mooncake.store resolves before kvpool-mooncake is installed: $(hook)"
vpip deb-shim install --no-build-isolation ./python/mooncake_shim
[ "$(hook)" = kvpool.mooncake_store ] || fail "mooncake.store with kvpool-mooncake installed: $(hook)"
[ "$(hook KVPOOL_MOONCAKE_STORE=0)" = ModuleNotFoundError ] ||
	fail "KVPOOL_MOONCAKE_STORE=0: mooncake.store is $(hook KVPOOL_MOONCAKE_STORE=0)"
ok "kvpool-mooncake: mooncake.store is kvpool.mooncake_store only once installed; KVPOOL_MOONCAKE_STORE=0 turns it off"

uninstall deb kvpool-mooncake kvpool
ok "pip uninstall -y kvpool-mooncake kvpool: site-packages as before ($((SECONDS - t0)) s for $sys_py)"

# make install-python with the venv's interpreter (no python-config there):
# it works, and pip does not see it (no .dist-info); make uninstall-python
# removes it. Its objects in a private PY_BUILD: build/python stays as it is.
mk() {
	make --no-print-directory -s -C "$E2E_ROOT" BUILD="$KVPOOL_BUILD" PY_BUILD="$E2E_TMP/make-py" \
		PYTHON="$VPY" "$@" >"$E2E_TMP/make.log" 2>&1 || fail "make $*: $(tail -n 10 "$E2E_TMP/make.log")"
}
mk install-python
(cd "$E2E_TMP" && "$VPY" -c 'import kvpool, sys; assert kvpool.__file__.startswith(sys.argv[1]), kvpool.__file__' "$SITE") ||
	fail "make install-python: kvpool does not import from $SITE"
"$VPY" -m pip show -q kvpool >/dev/null 2>&1 && fail "pip sees make install-python's kvpool"
mk uninstall-python
(cd "$SITE" && find . | sort) >"$E2E_TMP/deb.after-make"
diff "$E2E_TMP/deb.before" "$E2E_TMP/deb.after-make" >"$E2E_TMP/deb.diff" ||
	fail "site-packages after make uninstall-python differs: $(head -n 20 "$E2E_TMP/deb.diff")"
ok "make PYTHON=<venv>/bin/python install-python: imports, invisible to pip, make uninstall-python removes it"

# ---- a second interpreter ----
# second: sets SECOND to a second interpreter's executable, or NO_SECOND
# to why there is none.
SECOND="" NO_SECOND=""
second() {
	local a real_a real_b inc
	a=$(command -v python3) || { NO_SECOND="no python3 on PATH"; return; }
	real_a=$("$a" -c 'import os, sys; print(os.path.realpath(sys.executable))' 2>/dev/null)
	real_b=$($sys_py -c 'import os, sys; print(os.path.realpath(sys.executable))')
	[ -n "$real_a" ] || { NO_SECOND="python3 on PATH ($a) does not run"; return; }
	[ "$real_a" != "$real_b" ] || { NO_SECOND="python3 on PATH is $sys_py"; return; }
	inc=$("$a" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
	[ -f "$inc/Python.h" ] || { NO_SECOND="$real_a has no headers ($inc/Python.h)"; return; }
	"$a" -c 'import venv, ensurepip' 2>/dev/null || { NO_SECOND="$real_a has no venv/ensurepip"; return; }
	SECOND=$real_a
}
second
if [ -z "$SECOND" ]; then
	echo "skip (second interpreter): $NO_SECOND"
else
	t0=$SECONDS
	venv "$SECOND" alt
	vpip alt install --no-build-isolation ./python
	putget alt
	uninstall alt kvpool
	ok "$SECOND ($("$VPY" -V 2>&1)): pip install, import, put/get, pip uninstall ($((SECONDS - t0)) s)"
fi
echo "PASS pip_install.sh"
