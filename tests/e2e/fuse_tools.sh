#!/bin/bash
# fuse_tools.sh — the tools people write with, on a real mount, each
# byte-compared with its source and its exit code checked: rsync -a (twice,
# the second a no-op), tar xf, cp -a, mv (also over a file, and of a
# directory), sed -i, append, truncate, O_TRUNC rewrites, ln -s (refused),
# shared mmap (Python and a C reader; local and remote values; a mapped
# object removed and its space reused: its bytes or SIGBUS, never others;
# writable shared maps stored at the last close or msync, also numpy's w+
# that closes before the first write, or ENODEV on old kernels),
# nested empty directories until rmdir, rm right after a get, write-behind
# and `sync`, and readers of a key while it is renamed over or rewritten:
# whole old or whole new bytes.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/fuse_lib.inc"
need rsync tar sed cc sha256sum

LEASE_TTL=5s start_pool	# the default lease: rm after get must not wait for it
mnt=$E2E_TMP/mnt
mount_view "$mnt"
cd "$E2E_TMP" || fail "cd"

# A source tree with what trees have: empty files, nested and empty
# directories, spaces, sizes around page and request boundaries, old
# mtimes; modes are the mount's (0644 files, 0755 directories).
python3 - src <<'EOF' || fail "making the source tree"
import os, random, sys
r = random.Random(17)
root = sys.argv[1]
dirs = ["", "a", "a/b", "a/b/c", "with space", "z", "empty/deeper"]
for d in dirs:
    os.makedirs(os.path.join(root, d), exist_ok=True)
for i in range(120):
    d = dirs[i % 6]
    p = os.path.join(root, d, "f%03d%s" % (i, " s" if i % 11 == 0 else ""))
    with open(p, "wb") as f:
        f.write(os.urandom(r.choice([0, 1, 17, 4095, 4096, 65537, 300000, 1048577])))
    os.chmod(p, 0o644)
    os.utime(p, (1500000000 + i * 7, 1500000000 + i * 7))
for d in dirs + ["empty"]:
    os.chmod(os.path.join(root, d), 0o755)
EOF
# same_tree A B: same names, bytes and file mtimes (to the second)
same_tree() {
	diff -r "$1" "$2" >"$E2E_TMP/diff" 2>&1 || fail "$3: trees differ: $(head -5 "$E2E_TMP/diff")"
	(cd "$1" && find . -type f -printf '%p %T@\n' | sed 's/\.[0-9]*$//' | sort) >"$E2E_TMP/t1"
	(cd "$2" && find . -type f -printf '%p %T@\n' | sed 's/\.[0-9]*$//' | sort) >"$E2E_TMP/t2"
	cmp -s "$E2E_TMP/t1" "$E2E_TMP/t2" || fail "$3: file times differ: $(diff "$E2E_TMP/t1" "$E2E_TMP/t2" | head -4)"
}

# ---- rsync -a, twice ----------------------------------------------------------
rsync -a src/ "$mnt/rs/" >"$E2E_TMP/rs1" 2>&1 || fail "rsync -a exit $?: $(tail -5 "$E2E_TMP/rs1")"
same_tree src "$mnt/rs" "rsync -a"
rsync -a --itemize-changes --stats src/ "$mnt/rs/" >"$E2E_TMP/rs2" 2>&1 ||
	fail "second rsync -a exit $?: $(tail -5 "$E2E_TMP/rs2")"
grep -q "Number of regular files transferred: 0" "$E2E_TMP/rs2" ||
	fail "the second rsync -a transferred files: $(grep -E '^[<>c.]f' "$E2E_TMP/rs2" | head -5)"
grep -E '^[<>ch.*][fL]' "$E2E_TMP/rs2" && fail "the second rsync -a changed files"
# a changed source file: rsync replaces it (temp file, then rename over it)
head -c 5000 /dev/urandom >src/a/f001
touch -d @1600000000 src/a/f001
rsync -a src/ "$mnt/rs/" || fail "rsync -a of a changed file"
same_tree src "$mnt/rs" "rsync -a after a change"
ok "rsync -a: exit 0, equal tree and times; the second run transfers nothing; a change replaces"

# ---- tar xf and cp -a ---------------------------------------------------------------
tar cf x.tar -C src . || fail "tar cf"
mkdir "$mnt/tx" || fail "mkdir tx"
tar xf x.tar -C "$mnt/tx" 2>"$E2E_TMP/tar.err" || fail "tar xf exit $?: $(head -5 "$E2E_TMP/tar.err")"
same_tree src "$mnt/tx" "tar xf"
tar xf x.tar -C "$mnt/tx" 2>"$E2E_TMP/tar.err" || fail "tar xf over itself exit $?: $(head -5 "$E2E_TMP/tar.err")"
same_tree src "$mnt/tx" "tar xf over the same files"
cp -a src "$mnt/ca" 2>"$E2E_TMP/cp.err" || fail "cp -a exit $?: $(head -5 "$E2E_TMP/cp.err")"
same_tree src "$mnt/ca" "cp -a"
[ -d "$mnt/ca/empty/deeper" ] || fail "cp -a: the empty directory is missing"
ok "tar xf (twice) and cp -a: exit 0, equal trees, times kept, empty directories"

# ---- metadata: what changes nothing succeeds, a real change is EPERM -----------------
chmod 0644 "$mnt/ca/a/f001" || fail "chmod to the current mode"
chown "$(id -u):$(id -g)" "$mnt/ca/a/f001" || fail "chown to the current owner"
touch -d @1400000000 "$mnt/ca/a/f001" || fail "touch -d"
[ "$(stat -c %Y "$mnt/ca/a/f001")" = 1400000000 ] || fail "mtime set by touch -d not shown"
expect_errno "Operation not permitted" chmod 0600 "$mnt/ca/a/f001"
expect_errno "Operation not permitted" chown 12345 "$mnt/ca/a/f001"
[ "$(stat -c %a "$mnt/ca/a")" = 755 ] || fail "directory mode"
chmod 0755 "$mnt/ca/a" || fail "chmod of a directory to its mode"
ok "chmod/chown to the current values and utimes succeed; other modes and owners are EPERM"

# ---- mv, sed -i, append, truncate, O_TRUNC rewrites --------------------------------
printf 'one\ntwo\nthree\n' >"$mnt/ed"
mv "$mnt/ed" "$mnt/ed2" || fail "mv to a new name"
[ ! -e "$mnt/ed" ] && [ "$(cat "$mnt/ed2")" = "$(printf 'one\ntwo\nthree')" ] || fail "mv: contents"
mv "$mnt/ed2" "$mnt/a-dir-name" && mkdir -p "$mnt/deep/er" && mv "$mnt/a-dir-name" "$mnt/deep/er/ed" ||
	fail "mv across directories"
sync "$mnt"
kv exists a-dir-name -q && fail "mv left the old key"
[ "$(kv get deep/er/ed | wc -l)" = 3 ] || fail "mv across directories: the pool's value"
sed -i 's/two/TWO/' "$mnt/deep/er/ed" || fail "sed -i"
[ "$(sed -n 2p "$mnt/deep/er/ed")" = TWO ] || fail "sed -i: contents $(cat "$mnt/deep/er/ed")"
ls -a "$mnt/deep/er" | grep -q '^sed' && fail "sed -i left its temp file"
echo four >>"$mnt/deep/er/ed" || fail "append"
[ "$(tail -1 "$mnt/deep/er/ed")" = four ] && [ "$(wc -l <"$mnt/deep/er/ed")" = 4 ] ||
	fail "append: $(cat "$mnt/deep/er/ed")"
sync "$mnt/deep/er/ed" && [ "$(kv get deep/er/ed | sed -n 2p)" = TWO ] || fail "the pool after sed -i and append"
cp "$mnt/rs/a/f001" over && cp over "$mnt/deep/er/ed" || fail "cp over an existing file"
cmp over "$mnt/deep/er/ed" || fail "cp over an existing file: contents"
echo short >"$mnt/deep/er/ed" && [ "$(cat "$mnt/deep/er/ed")" = short ] || fail "> over an existing file"
mv "$mnt/rs/a/f001" "$mnt/deep/er/ed" || fail "mv over an existing file"
cmp src/a/f001 "$mnt/deep/er/ed" && [ ! -e "$mnt/rs/a/f001" ] || fail "mv over an existing file: contents"
truncate -s 100 "$mnt/deep/er/ed" && cmp <(head -c 100 src/a/f001) "$mnt/deep/er/ed" || fail "truncate -s 100"
truncate -s 300 "$mnt/deep/er/ed" && [ "$(stat -c %s "$mnt/deep/er/ed")" = 300 ] &&
	cmp <(head -c 100 src/a/f001; head -c 200 /dev/zero) "$mnt/deep/er/ed" || fail "truncate -s 300 (zeros)"
truncate -s 0 "$mnt/deep/er/ed" || fail "truncate -s 0"
[ -f "$mnt/deep/er/ed" ] && [ "$(stat -c %s "$mnt/deep/er/ed")" = 0 ] || fail "truncate -s 0: not an empty file"
sync "$mnt"
kv exists deep/er/ed -q && fail "an emptied file still has a value in the pool"
echo again >>"$mnt/deep/er/ed" && [ "$(cat "$mnt/deep/er/ed")" = again ] || fail "append to an emptied file: $(od -c "$mnt/deep/er/ed" | head -3; stat "$mnt/deep/er/ed")"
: >"$mnt/deep/er/ed" && [ "$(stat -c %s "$mnt/deep/er/ed")" = 0 ] || fail ": > FILE"
touch "$mnt/new-empty" && [ -f "$mnt/new-empty" ] || fail "touch of a new file"
for i in 1 2 3 4 5; do		# the release that stores a closed file comes after close
	touch "$mnt/t$i" && cat "$mnt/t$i" && echo x >>"$mnt/t$i" && [ "$(cat "$mnt/t$i")" = x ] ||
		fail "touch, then cat and >> at once"
done
python3 -c 'import os, sys; os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_EXCL)' "$mnt/deep/er/ed" \
	2>"$E2E_TMP/err" && fail "O_EXCL create of an existing file succeeded"
grep -q FileExistsError "$E2E_TMP/err" || fail "O_EXCL: $(tail -1 "$E2E_TMP/err")"
mkdir -p "$mnt/dm/x" && echo in >"$mnt/dm/x/f" && mv "$mnt/dm" "$mnt/dm2" || fail "mv of a directory"
[ "$(cat "$mnt/dm2/x/f")" = in ] && [ ! -e "$mnt/dm" ] || fail "mv of a directory: contents"
expect_errno "Operation not permitted" ln -s target "$mnt/link"
expect_errno "Operation not permitted" ln "$mnt/dm2/x/f" "$mnt/hard"
ok "mv (new name, across directories, over a file, a directory), sed -i, >>, truncate, : >, O_EXCL, ln refused"

# ---- shared mmap ---------------------------------------------------------------------
cat >mapread.c <<'EOF'
/* mapread FILE OUT: copies FILE through a shared read-only mapping */
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	struct stat st;
	int fd = open(argv[1], O_RDONLY);
	FILE *o = fopen(argv[2], "wb");
	if (fd < 0 || !o || fstat(fd, &st) < 0) { perror(argv[1]); return 2; }
	const char *p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) { perror("mmap"); return 3; }
	if (fwrite(p, 1, st.st_size, o) != (size_t)st.st_size) return 4;
	return fclose(o) ? 5 : 0;
}
EOF
cc -O2 -o mapread mapread.c || fail "cc mapread.c"
head -c 9437185 /dev/urandom >blk	# 9 MiB + 1: not a multiple of pages
kv put blocks/b0 blk || fail "put blocks/b0"
./mapread "$mnt/blocks/b0" got && cmp blk got || fail "C reader: MAP_SHARED read differs"
head -c 1000003 blk >blk-small	# small local values are read through the page cache
kv put blocks/small blk-small || fail "put blocks/small"
./mapread "$mnt/blocks/small" got && cmp blk-small got || fail "C reader: MAP_SHARED of a small value differs"
python3 - "$mnt/blocks/b0" blk <<'EOF' || fail "Python mmap(ACCESS_READ)"
import mmap, sys
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "rb") as g:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)   # MAP_SHARED, as numpy.memmap does
    want = g.read()
    assert len(m) == len(want) and m[:] == want and m[4096:8192] == want[4096:8192]
EOF
# the same through a view that is on "another host": values come over TCP
# into the page cache
mkdir -p "$E2E_TMP/mnt2"
KVPOOL_CLIENT_HOST_ID=elsewhere mount_view "$E2E_TMP/mnt2"
./mapread "$E2E_TMP/mnt2/blocks/b0" got2 && cmp blk got2 || fail "C reader through the remote view"
ok "MAP_SHARED reads: C and Python, local segment and remote page cache, byte-exact"

# A mapped object removed, its space reused by other objects, its pages
# dropped: the mapping shows its own bytes or raises SIGBUS, never others.
head -c 4194304 /dev/zero | tr '\0' M >mapped
kv put blocks/m mapped || fail "put blocks/m"
python3 - "$mnt/blocks/m" "$B/kvpool" "$POOL_INI" <<'EOF' >"$E2E_TMP/mmap.out" 2>&1
import mmap, os, signal, subprocess, sys
path, kvp, ini = sys.argv[1:4]
f = open(path, "rb")
m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
assert m[:4] == b"MMMM"
subprocess.run([kvp, "-c", ini, "rm", "-f", "blocks/m"], check=True)
for i in range(24):             # reuse the freed extent with other bytes
    subprocess.run([kvp, "-c", ini, "put", "blocks/o%d" % i, "-"], input=b"O" * 1048576, check=True)
m.close()
os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)   # unmapped pages can go now
pid = os.fork()
if pid == 0:
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    data = m[:]                 # its own bytes, or SIGBUS
    os._exit(0 if data == b"M" * len(data) else 7)
_, st = os.waitpid(pid, 0)
if os.WIFSIGNALED(st):
    print("SIGBUS" if os.WTERMSIG(st) == signal.SIGBUS else "signal %d" % os.WTERMSIG(st))
    sys.exit(0 if os.WTERMSIG(st) == signal.SIGBUS else 1)
print("own bytes" if os.WEXITSTATUS(st) == 0 else "OTHER BYTES")
sys.exit(os.WEXITSTATUS(st))
EOF
rc=$?
[ $rc = 0 ] || fail "a mapping of a removed object showed other bytes: $(cat "$E2E_TMP/mmap.out")"
ok "a mapped object removed and reused: $(tail -1 "$E2E_TMP/mmap.out"), never other bytes"

# Writable MAP_SHARED (numpy.memmap mode "w+" and "r+"): where the kernel
# lets a direct-I/O file be mapped (FUSE_DIRECT_IO_ALLOW_MMAP, Linux 6.6+)
# the dirty pages go into the write buffer and the last close stores
# them; on older kernels the mmap is ENODEV. Never a silent loss.
kmaj=$(uname -r | cut -d. -f1) kmin=$(uname -r | cut -d. -f2)
wmap=works
[ "$kmaj" -lt 6 ] || { [ "$kmaj" = 6 ] && [ "${kmin%%[!0-9]*}" -lt 6 ]; } && wmap=ENODEV
python3 - "$mnt/wmap" "$wmap" <<'EOF' || fail "writable MAP_SHARED (expected: $wmap)"
import errno, mmap, sys
p, expect = sys.argv[1], sys.argv[2]
N = 3000001
want = bytes(range(251)) * (N // 251) + bytes(N % 251)
f = open(p, "w+b")                  # numpy.memmap(mode="w+") does this
f.seek(N - 1); f.write(b"\0"); f.flush()
try:
    m = mmap.mmap(f.fileno(), N, access=mmap.ACCESS_WRITE)
except OSError as e:
    f.close()
    sys.exit(0 if expect == "ENODEV" and e.errno == errno.ENODEV else "mmap: %r" % e)
assert expect == "works", "mmap worked where ENODEV was expected"
m[:] = want
f.close()                           # the mapping outlives the descriptor
m[0:3] = b"XYZ"                     # written after the close, before munmap
m.close()
want = b"XYZ" + want[3:]
assert open(p, "rb").read() == want, "w+: the view's bytes"
f = open(p, "r+b")                  # mode "r+": edit in place
m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_WRITE)
assert m[:] == want
m[N - 2:N] = b"!!"
m.flush(); m.close(); f.close()
want = want[:N - 2] + b"!!"
assert open(p, "rb").read() == want, "r+: the view's bytes"
open("wmap.want", "wb").write(want)          # in $E2E_TMP, for the pool check
EOF
if [ "$wmap" = works ]; then
	sync "$mnt/wmap" && kv get wmap >got && cmp got wmap.want || fail "writable MAP_SHARED: the pool's value"
	rm -f "$mnt/wmap"
fi
ok "writable MAP_SHARED (w+ and r+, written after the close too): $wmap"

# numpy.memmap(mode="w+") on a new file: create, one byte at size-1, map
# MAP_SHARED, close the descriptor, then the first write through the map
# faults a page in from a handle whose close stored the file (SIGBUS once).
# A C writer does the same (for hosts without numpy); msync stores the
# value at once, a munmap without it at the release that follows. Both
# read back through the mount (a C mmap reader) and from the pool.
cat >mapwrite.c <<'EOF'
/* mapwrite FILE SIZE SYNC: creates FILE as numpy.memmap(mode="w+") does,
 * closes it, writes i*7+1 (mod 256) at every byte through the mapping,
 * then msync (SYNC=1) and munmap. Exit 10: mmap ENODEV. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
int main(int argc, char **argv)
{
	size_t n = strtoul(argv[2], NULL, 0);
	int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || pwrite(fd, "", 1, n - 1) != 1) { perror(argv[1]); return 2; }
	unsigned char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) { perror("mmap"); return errno == ENODEV ? 10 : 3; }
	if (close(fd)) { perror("close"); return 4; }
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 7 + 1);
	if (atoi(argv[3]) && msync(p, n, MS_SYNC)) { perror("msync"); return 5; }
	return munmap(p, n) ? 6 : 0;
}
EOF
cc -O2 -o mapwrite mapwrite.c || fail "cc mapwrite.c"
# same_value NAME WANT: the mount's bytes (read through a mapping) and the pool's
same_value() { ./mapread "$mnt/$1" got.m && cmp -s got.m "$2" && kv get "$1" >got.p && cmp -s got.p "$2"; }
python3 -c 'import sys; n = int(sys.argv[1]); sys.stdout.buffer.write(bytes((i * 7 + 1) % 256 for i in range(n)))' \
	3000001 >mw.want
head -c 4000 mw.want >mw-small.want
mkdir -p "$mnt/mw" "$mnt/np" || fail "mkdir mw np"
if [ "$wmap" = works ]; then
	./mapwrite "$mnt/mw/small" 4000 1 || fail "C writer (4000 bytes, msync): exit $?"
	sync "$mnt" && same_value mw/small mw-small.want || fail "C writer, msync: the value read back differs"
	./mapwrite "$mnt/mw/big" 3000001 1 || fail "C writer (3000001 bytes, msync): exit $?"
	same_value mw/big mw.want || fail "C writer, 3 MB, msync: the value read back differs"
	./mapwrite "$mnt/mw/nosync" 4000 0 || fail "C writer (munmap, no msync): exit $?"
	waitfor 30 same_value mw/nosync mw-small.want || fail "C writer, munmap: the value was not stored"
	rm -f "$mnt/mw/small" "$mnt/mw/big" "$mnt/mw/nosync"
else
	./mapwrite "$mnt/mw/small" 4000 1
	[ $? = 10 ] || fail "C writer: expected mmap ENODEV on this kernel"
fi
np=skipped
if [ "$wmap" = works ] && [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import numpy' 2>/dev/null; then
	/usr/bin/python3 - "$mnt" <<'EOF' || fail "numpy.memmap(mode=\"w+\") on a new file"
import numpy as np, sys
mnt = sys.argv[1]
for name, shape in (("np/w2.bin", (1000,)), ("np/big.bin", (750001,))):
    w = np.memmap(mnt + "/" + name, dtype=np.float32, mode="w+", shape=shape)
    w[0] = 7                            # SIGBUS here once
    w[-1] = 11
    w.flush()                           # msync: stored now
    del w
    want = np.zeros(shape, dtype=np.float32)
    want[0], want[-1] = 7, 11
    open(name.replace("/", "-") + ".want", "wb").write(want.tobytes())
    r = np.memmap(mnt + "/" + name, dtype=np.float32, mode="r")
    assert r.shape == shape and r[0] == 7 and r[-1] == 11 and not r[1:-1].any(), name
    del r
w = np.memmap(mnt + "/np/nosync.bin", dtype=np.float32, mode="w+", shape=(1000,))
w[3] = 5
del w                                   # no flush: stored at the release
want = np.zeros(1000, dtype=np.float32)
want[3] = 5
open("np-nosync.bin.want", "wb").write(want.tobytes())
EOF
	sync "$mnt" && same_value np/w2.bin np-w2.bin.want && same_value np/big.bin np-big.bin.want ||
		fail "numpy.memmap w+ with flush: the value read back differs"
	waitfor 30 same_value np/nosync.bin np-nosync.bin.want || fail "numpy.memmap w+ without flush: not stored"
	rm -f "$mnt"/np/*.bin
	np=checked
fi
ok "writable MAP_SHARED of a new file closed before the first write (C, numpy $np): stored, read back"

# ---- emptied directories stay at every level until rmdir ------------------------------
mkdir -p "$mnt/n1/n2/n3" && cp blk "$mnt/n1/n2/n3/k" && rm "$mnt/n1/n2/n3/k" || fail "mkdir -p, cp, rm"
sleep 1.5	# past the entry and attribute timeouts: the kernel asks again
[ -d "$mnt/n1" ] && [ -d "$mnt/n1/n2" ] && [ -d "$mnt/n1/n2/n3" ] || fail "an emptied directory vanished"
[ "$(ls "$mnt/n1")" = n2 ] || fail "ls n1: $(ls "$mnt/n1")"
expect_errno "Directory not empty" rmdir "$mnt/n1"
rmdir -p "$mnt/n1/n2/n3" 2>/dev/null	# ends with the mount root, which is not empty
[ -e "$mnt/n1" ] && fail "rmdir -p left n1"
ok "mkdir -p a/b/c, cp, rm: every level stays until rmdir, ENOTEMPTY above"

# ---- rm right after a get ------------------------------------------------------------
printf v >one && kv put one one || fail "put one"
kv get one >/dev/null && rm "$mnt/one" 2>"$E2E_TMP/err" || fail "rm right after kvpool get: $(cat "$E2E_TMP/err")"
kv exists one -q && fail "the removed key is still in the pool"
cat "$mnt/blocks/b0" >/dev/null && rm "$mnt/blocks/b0" || fail "rm right after a read through the view"
ok "kvpool get k && rm MNT/k, and a read through the view then rm: no EBUSY, no wait"

# ---- write-behind: small files are stored by `sync` at the latest ---------------------
mkdir "$mnt/wb" || fail "mkdir wb"
python3 - "$mnt/wb" <<'EOF' || fail "creating 300 small files"
import os, sys
for i in range(300):
    with open(os.path.join(sys.argv[1], "s%03d" % i), "wb") as f:
        f.write(b"%d" % i)
EOF
[ "$(cat "$mnt/wb/s123")" = 123 ] || fail "a file just written, read back through the view"
sync "$mnt" || fail "sync MNT"
[ "$(kv ls wb/ | wc -l)" = 300 ] || fail "after sync MNT the pool has $(kv ls wb/ | wc -l) of 300 keys"
[ "$(kv get wb/s299)" = 299 ] || fail "wb/s299 in the pool"
read -r stored batches <<<"$(sed -n 's/^view_stored *\([0-9]*\) (in \([0-9]*\) batches)$/\1 \2/p' "$mnt/.kvpool/stats")"
[ "${stored:-0}" -ge 300 ] && [ "${batches:-0}" -gt 0 ] && [ "$batches" -lt "$stored" ] ||
	fail ".kvpool/stats: $stored values stored behind closes in $batches batches"
ok "300 small files: read back at once through the view, all in the pool after sync MNT ($stored puts in $batches batches)"

# ---- readers while a key is renamed over and rewritten ----------------------------------
head -c 3145728 /dev/urandom >VA
head -c 2097152 /dev/urandom >VB
cp VA "$mnt/hot" && sync "$mnt/hot" || fail "cp VA hot"
# a writer: the rename idiom through this mount, an in-place rewrite
# (O_TRUNC) through the other one; 3 readers through this mount check each
# whole read: the old value or the new one, or an error (a reader that was
# still reading the value that got replaced), never other bytes
(
	for i in $(seq 12); do
		cp VB "$mnt/hot.tmp" && mv "$mnt/hot.tmp" "$mnt/hot" || exit 1
		cp VA "$E2E_TMP/mnt2/hot" || exit 1
	done
) &
writer=$!
readers=()
for r in 1 2 3; do
	python3 - "$mnt/hot" VA VB $writer >"$E2E_TMP/reader$r" 2>&1 <<'EOF' &
import hashlib, os, sys
p, a, b, writer = sys.argv[1], open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read(), int(sys.argv[4])
whole = errors = 0
why = {}
def alive():
    try:
        os.kill(writer, 0)
        return True
    except OSError:
        return False
while alive():
    try:
        with open(p, "rb") as f:
            data = f.read()
    except OSError as e:
        errors += 1
        why[e.strerror] = why.get(e.strerror, 0) + 1
        continue
    if data != a and data != b:
        sys.exit("MIXED: %d bytes, neither value" % len(data))
    whole += 1
print("whole %d errors %d %s" % (whole, errors, why))
EOF
	readers+=($!)
done
wait $writer || fail "the writer (cp, mv over, cp over through the other mount) failed"
wait "${readers[@]}"	# not a bare wait: the pool's daemons are children too
grep -h MIXED "$E2E_TMP"/reader* && fail "a reader saw bytes that are neither the old nor the new value"
whole=$(awk '/^whole/ { s += $2 } END { print s + 0 }' "$E2E_TMP"/reader*)
errs=$(awk '/^whole/ { s += $4 } END { print s + 0 }' "$E2E_TMP"/reader*)
[ "$whole" -gt 0 ] || fail "no reader finished a read: $(cat "$E2E_TMP"/reader*)"
sync "$E2E_TMP/mnt2/hot"
cmp VA "$mnt/hot" || fail "the last value"
ok "3 readers while hot was renamed over and rewritten 24 times: $whole whole reads (old or new), $errs failed reads, no mix ($(cat "$E2E_TMP"/reader* | tr "\n" " "))"

# a reader that opens while this mount rewrites the file in place reads the
# stored value whole; after the close, the new one
python3 - "$mnt/hot" VA VB <<'EOF' || fail "a reader during an in-place rewrite"
import sys
p, a, b = sys.argv[1], open(sys.argv[2], "rb").read(), open(sys.argv[3], "rb").read()
w = open(p, "r+b")
w.truncate(0)
w.write(b[:1000000])
w.flush()
with open(p, "rb") as r:
    got = r.read()
assert got == a, "during the rewrite: %d bytes, not the old value" % len(got)
w.write(b[1000000:])
w.close()
with open(p, "rb") as r:
    assert r.read() == b, "after the close: not the new value"
EOF
ok "an in-place rewrite through this mount: new readers see the old value whole until the close"
