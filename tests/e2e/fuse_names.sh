#!/bin/bash
# fuse_names.sh — the name scheme of the FUSE view (docs/fuse.md, "Names")
# end to end: keys with spaces, newlines, '%', empty components ("a//b",
# "/x", "x/"), ".", "..", ".kvpool", UTF-8, 300- and 900-byte components
# and an object that is also a directory ("x" and "x/y") are put with the
# CLI and found at the documented paths (checked by an independent Python
# implementation of the scheme); `find` over the mount maps back to exactly
# the master's key set; names are created through the mount, bad spellings
# refused; and 10,000 keys list completely with ls, ls -l and find.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/fuse_lib.inc"

start_pool
mnt=$E2E_TMP/mnt
mount_view "$mnt"
mpid=$view_pid

python3 - "$mnt" "$KVP" "$E2E_TMP/pool.ini" <<'EOF' || fail "name scheme (see above)"
import errno, json, os, subprocess, sys

mnt, kvp, conf = sys.argv[1].encode(), sys.argv[2], sys.argv[3]
FIT = 253
SPECIAL = {b"": b"%00", b".": b"%2E", b"..": b"%2E%2E", b".kvpool": b"%2Ekvpool"}

def esc(c):
    return SPECIAL.get(c, c.replace(b"%", b"%25"))

def chain(c):
    out = []
    while len(esc(c)) > FIT:
        k = n = 0
        while k < len(c):
            u = 3 if c[k:k + 1] == b"%" else 1
            if n + u > FIT:
                break
            n, k = n + u, k + 1
        out.append(c[:k].replace(b"%", b"%25") + b"%")
        c = c[k:]
    return out + [esc(c)]

def key_to_path(k, objects=()):
    # a directory that is also an object is NAME%%
    comps, out = k.split(b"/"), []
    for i, c in enumerate(comps):
        ch = chain(c)
        if i < len(comps) - 1 and b"/".join(comps[:i + 1]) in objects:
            ch[-1] += b"%%"
        out.append(b"/".join(ch))
    return b"/".join(out)

def unesc(n):
    for raw, e in SPECIAL.items():
        if n == e:
            return raw
    return n.replace(b"%25", b"%")

def path_to_key(p):
    names, out = p.split(b"/"), b""
    for i, nm in enumerate(names):
        if nm.endswith(b"%%"):              # directory alias
            out += unesc(nm[:-2]) + b"/"
        elif nm.endswith(b"%"):             # continuation piece
            out += nm[:-1].replace(b"%25", b"%")
        else:
            out += unesc(nm) + (b"" if i == len(names) - 1 else b"/")
    return out

def kv(*args, data=None):
    return subprocess.run([kvp, "-c", conf] + list(args), input=data, capture_output=True)

def fail(msg):
    sys.exit("FAIL: " + msg)

keys = [b"sp ace", b"per%cent", b"new\nline", b"tab\there", b"a//b", b"/lead", b"trail/",
        b".", b"..", b".kvpool", b"d/.", b"d/..", b"caf\xc3\xa9/\xc3\xbc", b"end%",
        b"x", b"x/y", b"L" * 300, b"long/" + b"M" * 600, b"%" * 300, b"p/" + b"q" * 253,
        b"p/" + b"r" * 254, b"deep/" + b"s" * 250 + b"%%%%%%" + b"t"]
for k in keys:
    r = kv("put", os.fsdecode(k), "-", data=b"v:" + k)
    if r.returncode:
        fail("put %r: %s" % (k, r.stderr))

# every key is at its documented path, with its value, and every name fits
for k in keys:
    p = key_to_path(k, keys)
    if any(len(n) > 255 for n in p.split(b"/")):
        fail("name over 255 bytes for %r" % k)
    try:
        with open(mnt + b"/" + p, "rb") as f:
            v = f.read()
    except OSError as e:
        fail("open %r (key %r): %s" % (p, k, e))
    if v != b"v:" + k:
        fail("value of %r read through %r" % (k, p))

# the object x and the directory x/ side by side
ls = sorted(os.listdir(mnt))
if b"x" not in ls or b"x%%" not in ls:
    fail("x and x%%%% in the root: %r" % ls)
if not os.path.isfile(mnt + b"/x") or not os.path.isdir(mnt + b"/x%%"):
    fail("x is not the object or x%% not the directory")

# find maps back to exactly the master's key set
found = set()
for d, _, files in os.walk(mnt):
    for f in files:
        found.add(path_to_key(os.path.relpath(os.path.join(d, f), mnt)))
r = kv("ls", "--json")
listed = {e["name"].encode("utf-8", "surrogateescape") for e in json.loads(r.stdout)}
if found != listed:
    fail("find vs kvpool ls: only in find %r, only in ls %r" % (found - listed, listed - found))

# names created through the mount
def put_path(p, data, mode="wb"):
    with open(mnt + b"/" + p, mode) as f:
        f.write(data)

def settle():   # puts of small files are behind the close: fsync of a directory waits
    fd = os.open(mnt, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)

put_path(b"new%25file", b"1")
os.makedirs(mnt + b"/new dir/sub", exist_ok=True)
put_path(b"new dir/sub/line\nbreak", b"2")
longk = b"w" * 400
lp = key_to_path(longk)
os.makedirs(mnt + b"/" + lp.rsplit(b"/", 1)[0])
put_path(lp, b"3")
put_path(b"%00/lead2", b"4")
settle()
for k, v in [(b"new%file", b"1"), (b"new dir/sub/line\nbreak", b"2"), (longk, b"3"),
             (b"/lead2", b"4")]:
    r = kv("get", os.fsdecode(k))
    if r.returncode or r.stdout != v:
        fail("key %r written through the mount: %r %r" % (k, r.returncode, r.stdout))

def refused(p, want, what, mode="wb"):
    try:
        put_path(p, b"z", mode)
    except OSError as e:
        if e.errno != want:
            fail("%s: errno %d, expected %d" % (what, e.errno, want))
        return
    fail("%s was accepted" % what)

refused(b"bad%zz", errno.EINVAL, "a '%' that is not an escape")
refused(b"a%2Fb", errno.EINVAL, "a '/' written as %2F")
refused(b"lower%2e", errno.EINVAL, "lower-case hex")
refused(b"n" * 256, errno.ENAMETOOLONG, "a 256-byte name")
refused(b"short%", errno.EINVAL, "a file named like a continuation piece")
refused(b"%2E", errno.EEXIST, "O_EXCL of the existing key '.'", "xb")
print("ok - names: escapes, empty components, dot names, long chains, aliases, round trip")
EOF
ok "every key at its documented path; find maps back to the master's keys; writes and refusals"

# ---- 10,000 keys list completely ----------------------------------------------
kv bench --op put --count 10000 --size 256 --batch 200 --prefix many/ --keep >"$E2E_TMP/bench.log" 2>&1 ||
	fail "kvpool bench --op put (10,000 keys)"
kv ls many/ | sed 's|^many/||' >"$E2E_TMP/want"
[ "$(wc -l <"$E2E_TMP/want")" = 10000 ] || fail "the pool lists $(wc -l <"$E2E_TMP/want") keys under many/"
ls "$mnt/many" >"$E2E_TMP/got"
cmp "$E2E_TMP/want" "$E2E_TMP/got" || fail "ls of 10,000 keys differs from kvpool ls"
[ "$(ls -l "$mnt/many" | grep -c '^-rw')" = 10000 ] || fail "ls -l does not show 10,000 files"
[ "$(find "$mnt/many" -type f | wc -l)" = 10000 ] || fail "find does not see 10,000 files"
[ "$(ls -f "$mnt/many" | sort -u | wc -l)" = 10002 ] || fail "ls -f (unsorted, with . and ..) repeats or drops names"
python3 - "$mnt/many" <<'EOF' || fail "seekdir/telldir over the listing"
import ctypes, ctypes.util, os, sys
# a second pass from a position in the middle, as telldir/seekdir do
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
class Dirent(ctypes.Structure):
    _fields_ = [("d_ino", ctypes.c_uint64), ("d_off", ctypes.c_int64),
                ("d_reclen", ctypes.c_ushort), ("d_type", ctypes.c_ubyte),
                ("d_name", ctypes.c_char * 256)]
libc.opendir.restype = ctypes.c_void_p
libc.readdir.restype = ctypes.POINTER(Dirent)
libc.readdir.argtypes = [ctypes.c_void_p]
libc.telldir.argtypes = [ctypes.c_void_p]
libc.telldir.restype = ctypes.c_long
libc.seekdir.argtypes = [ctypes.c_void_p, ctypes.c_long]
d = libc.opendir(sys.argv[1].encode())
names, pos = [], None
while True:
    e = libc.readdir(d)
    if not e:
        break
    names.append(e.contents.d_name)
    if len(names) == 5000:
        pos = libc.telldir(d)
libc.seekdir(d, pos)
rest = []
while True:
    e = libc.readdir(d)
    if not e:
        break
    rest.append(e.contents.d_name)
if rest != names[5000:]:
    sys.exit("after seekdir: %d names, expected %d" % (len(rest), len(names) - 5000))
EOF
ok "10,000 keys: ls, ls -l, ls -f, find and seekdir agree with kvpool ls"

unmount_view "$mnt" "$mpid"
