"""kvp_dist: the wheel and sdist writer of kvpool's two pip packages, stdlib
only (a fresh venv has pip and setuptools but no `wheel`, and no network).

Used by kvpool's backend (python/_build_backend/kvpool_backend.py) and by
kvpool-mooncake's (shim_backend.py, next to this file). It lives in the
shim's tree because pip loads a backend only from inside the project's own
directory: python/mooncake_shim/ is inside python/, not the other way round.
"""
import base64
import hashlib
import io
import os
import re
import tarfile
import time
import zipfile


def find_root(start):
    """The kvpool source tree above START (Makefile and src/lib/kvpool.h), or None."""
    d = os.path.abspath(start)
    while True:
        if os.path.isfile(os.path.join(d, "Makefile")) and \
                os.path.isfile(os.path.join(d, "src", "lib", "kvpool.h")):
            return d
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def version(srcdir):
    """VERSION := from the top Makefile, else Version: from an sdist's PKG-INFO."""
    root = find_root(srcdir)
    if root:
        with open(os.path.join(root, "Makefile")) as f:
            m = re.search(r"^VERSION\s*:?=\s*(\S+)", f.read(), re.M)
        if m:
            return m.group(1)
    pkg_info = os.path.join(srcdir, "PKG-INFO")
    if os.path.isfile(pkg_info):
        with open(pkg_info) as f:
            m = re.search(r"^Version:\s*(\S+)", f.read(), re.M)
        if m:
            return m.group(1)
    raise RuntimeError("kvpool: no version: neither a kvpool Makefile above %s nor a "
                       "PKG-INFO in it" % srcdir)


def normalize(name):
    """A distribution name as file names spell it (PEP 503, then '_')."""
    return re.sub(r"[-_.]+", "_", name).lower()


def metadata(name, ver, summary, requires=(), description=""):
    lines = ["Metadata-Version: 2.1", "Name: " + name, "Version: " + ver,
             "Summary: " + summary, "Requires-Python: >=3.8"]
    lines += ["Requires-Dist: " + r for r in requires]
    text = "\n".join(lines) + "\n"
    if description:
        text += "Description-Content-Type: text/markdown\n\n" + description
    return text


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return "%s,sha256=%s,%d" % (arcname, digest.decode(), len(data))


def dist_info(name, ver):
    return "%s-%s.dist-info" % (normalize(name), ver)


def write_metadata_dir(outdir, name, ver, meta):
    """prepare_metadata_for_build_wheel: the .dist-info with METADATA."""
    di = dist_info(name, ver)
    os.makedirs(os.path.join(outdir, di), exist_ok=True)
    with open(os.path.join(outdir, di, "METADATA"), "w") as f:
        f.write(meta)
    return di


def write_wheel(outdir, name, ver, tag, purelib, files, meta):
    """Writes NAME-VER-TAG.whl into OUTDIR and returns its file name. FILES:
    (name in the wheel, path on disk) pairs; the .dist-info (METADATA, WHEEL,
    RECORD with sha256 and sizes) is added here."""
    whl = "%s-%s-%s.whl" % (normalize(name), ver, tag)
    di = dist_info(name, ver)
    wheel_text = ("Wheel-Version: 1.0\nGenerator: kvp_dist (kvpool)\n"
                  "Root-Is-Purelib: %s\nTag: %s\n" % ("true" if purelib else "false", tag))
    record = []
    # Fixed times and modes: the same inputs give the same wheel.
    stamp = time.gmtime(int(os.environ.get("SOURCE_DATE_EPOCH", 315532800)))[:6]
    with zipfile.ZipFile(os.path.join(outdir, whl), "w", zipfile.ZIP_DEFLATED) as z:
        def add(arcname, data, mode=0o644):
            zi = zipfile.ZipInfo(arcname, stamp)
            zi.external_attr = (0o100000 | mode) << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
            record.append(_record_line(arcname, data))
        for arcname, path in sorted(files):
            with open(path, "rb") as f:
                add(arcname, f.read(), 0o755 if os.access(path, os.X_OK) else 0o644)
        add(di + "/METADATA", meta.encode())
        add(di + "/WHEEL", wheel_text.encode())
        record.append(di + "/RECORD,,")
        rec = ("\n".join(record) + "\n").encode()
        zi = zipfile.ZipInfo(di + "/RECORD", stamp)
        zi.external_attr = 0o100644 << 16
        z.writestr(zi, rec, zipfile.ZIP_DEFLATED)
    return whl


def _skip(name):
    return name == "__pycache__" or name.startswith(".") or name.endswith((".pyc", ".o", ".d"))


def walk(top, rel=""):
    """(relative path, absolute path) of the files under TOP/REL, sorted,
    without caches, objects or hidden files."""
    out = []
    base = os.path.join(top, rel)
    if os.path.isfile(base):
        return [(rel, base)]
    for d, dirs, files in os.walk(base):
        dirs[:] = sorted(x for x in dirs if not _skip(x))
        for fn in sorted(files):
            if not _skip(fn):
                p = os.path.join(d, fn)
                out.append((os.path.relpath(p, top), p))
    return out


def write_sdist(outdir, name, ver, files, extra, meta):
    """Writes NAME-VER.tar.gz: FILES as (relative path, path on disk) and
    EXTRA as (relative path, text) under NAME-VER/, plus PKG-INFO."""
    base = "%s-%s" % (normalize(name), ver)
    sd = base + ".tar.gz"
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", 315532800))
    with tarfile.open(os.path.join(outdir, sd), "w:gz", format=tarfile.PAX_FORMAT) as t:
        def add(rel, data, mode):
            ti = tarfile.TarInfo(base + "/" + rel)
            ti.size, ti.mode, ti.mtime = len(data), mode, mtime
            t.addfile(ti, io.BytesIO(data))
        for rel, path in sorted(files):
            with open(path, "rb") as f:
                add(rel, f.read(), 0o755 if os.access(path, os.X_OK) else 0o644)
        for rel, text in extra:
            add(rel, text.encode(), 0o644)
        add("PKG-INFO", meta.encode(), 0o644)
    return sd
