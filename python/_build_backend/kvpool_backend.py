"""PEP 517 backend of the kvpool package, stdlib only: a fresh venv (pip,
setuptools, no `wheel`, no network) builds it offline.

    pip install --no-build-isolation ./python      (or pip wheel ...)

build_wheel runs the tree's Makefile for the extension with PYTHON set to
the interpreter that runs pip (its headers and ABI tag come from its
sysconfig), linking kvpool's static archives as `make python` does, then
writes the wheel itself: kvpool/*.py, kvpool/_kvpool<EXT_SUFFIX>, the
.dist-info. build_sdist packs the sources the Makefile needs, so the sdist
builds again the same way.

Where it builds: the archives in the tree's build/ (KVPOOL_BUILD to choose
another), shared with the developer's `make`: the same sources and flags,
and a fresh clone would otherwise compile everything twice. The
extension's objects go to build/pip/<ABI>-<hash of the headers>/, one
directory per interpreter, so a pip build for a venv never switches the
interpreter of build/python (the developer's `make python`) back and forth.
"""
import glob
import hashlib
import os
import subprocess
import sys
import sysconfig

HERE = os.path.dirname(os.path.abspath(__file__))
# The one wheel writer lives in the shim's tree (see kvp_dist's header).
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "mooncake_shim", "_pep517"))
import kvp_dist  # noqa: E402

NAME = "kvpool"
SUMMARY = ("kvpool's Python client: Mooncake Store's Python API over a kvpool pool "
           "(a C extension with libkvpool linked in)")
DESCRIPTION = """\
`kvpool.MooncakeDistributedStore` has Mooncake Store's Python API on a
kvpool pool (kvpool-master and kvpool-nodes). The extension links kvpool's
static archives and exports only `PyInit__kvpool`. The `mooncake.store`
import hook is a separate package, kvpool-mooncake (python/mooncake_shim).
See docs/python.md in the kvpool tree.
"""
# What build_sdist packs: everything the Makefile needs to build the extension.
SDIST = ("Makefile", "README.md", "src", "shm", "master", "fuse", "tools", "python")


def _root():
    root = kvp_dist.find_root(HERE)
    if not root:
        raise RuntimeError("kvpool: no kvpool source tree (Makefile, src/lib/kvpool.h) above " + HERE)
    return root


def _meta():
    ver = kvp_dist.version(_root())
    return ver, kvp_dist.metadata(NAME, ver, SUMMARY, description=DESCRIPTION)


def _tag():
    """cpXY-cpXY-PLATFORM for the interpreter that runs pip."""
    ver = "%d%d" % sys.version_info[:2]
    soabi = (sysconfig.get_config_var("SOABI") or "").split("-")
    if sys.implementation.name == "cpython":
        interp = "cp" + ver
        # cpython-311-x86_64-linux-gnu: cp311 (311d for a debug build, 313t free-threaded)
        abi = "cp" + soabi[1] if len(soabi) > 1 and soabi[0] == "cpython" else interp
    else:
        interp = {"pypy": "pp"}.get(sys.implementation.name, sys.implementation.name) + ver
        abi = "_".join(soabi[:2]).replace(".", "_") or "none"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return "%s-%s-%s" % (interp, abi, plat)


def _py_build(build):
    """build/pip/<ABI>-<hash>: one directory per set of headers and ABI tag
    (what the Makefile's interpreter stamp records)."""
    p = sysconfig.get_paths()
    ident = "%s %s %s" % (p["include"], p["platinclude"], sysconfig.get_config_var("EXT_SUFFIX"))
    h = hashlib.sha256(ident.encode()).hexdigest()[:8]
    return os.path.join(build, "pip", "%s-%s" % (sysconfig.get_config_var("SOABI") or "py", h))


def _make_extension(root):
    """Builds the extension for sys.executable; returns its path."""
    build = os.environ.get("KVPOOL_BUILD", "build")
    pyb = _py_build(build)
    make = os.environ.get("MAKE", "make")
    cmd = [make, "-C", root, "--no-print-directory", "BUILD=" + build, "PY_BUILD=" + pyb,
           "PYTHON=" + sys.executable, "python-ext"]
    if "-j" not in os.environ.get("MAKEFLAGS", ""):
        cmd.insert(1, "-j%d" % (os.cpu_count() or 1))
    print("kvpool: building the extension for %s: %s" % (sys.executable, " ".join(cmd)), flush=True)
    try:
        rc = subprocess.call(cmd, stdout=sys.stdout, stderr=sys.stderr)
    except OSError as e:
        rc = "%s (%s)" % (type(e).__name__, e)
    # SystemExit: pip shows this message under the output, without a traceback.
    if rc != 0:
        raise SystemExit(
            "kvpool: `%s` failed: %s (its output is above). The build needs make, gcc, the "
            "Debian packages of `tools/deps.sh build` and the Python headers of %s "
            "(python3-dev for Debian's python3)." % (" ".join(cmd),
                                                     "exit %d" % rc if isinstance(rc, int) else rc,
                                                     sys.executable))
    ext = os.path.join(root, pyb, "kvpool", "_kvpool" + sysconfig.get_config_var("EXT_SUFFIX"))
    if not os.path.isfile(ext):
        raise SystemExit("kvpool: make succeeded but %s is not there" % ext)
    return ext


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    ver, meta = _meta()
    return kvp_dist.write_metadata_dir(metadata_directory, NAME, ver, meta)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    root = _root()
    ver, meta = _meta()
    ext = _make_extension(root)
    files = [("kvpool/" + os.path.basename(p), p)
             for p in sorted(glob.glob(os.path.join(root, "python", "kvpool", "*.py")))]
    files.append(("kvpool/" + os.path.basename(ext), ext))
    whl = kvp_dist.write_wheel(wheel_directory, NAME, ver, _tag(), False, files, meta)
    print("kvpool: wrote %s" % whl, flush=True)
    return whl


def build_sdist(sdist_directory, config_settings=None):
    root = _root()
    ver, meta = _meta()
    files = []
    for top in SDIST:
        files += kvp_dist.walk(root, top)
    # At the sdist's top, pyproject.toml names the backend from there.
    with open(os.path.join(root, "python", "pyproject.toml")) as f:
        pyproject = f.read()
    old = 'backend-path = ["_build_backend"]'
    if old not in pyproject:
        raise RuntimeError("kvpool: python/pyproject.toml has no '%s'" % old)
    pyproject = pyproject.replace(old, 'backend-path = ["python/_build_backend"]')
    return kvp_dist.write_sdist(sdist_directory, NAME, ver, files,
                                [("pyproject.toml", pyproject)], meta)
