#!/bin/bash
# systemd_units.sh — `make install DESTDIR=... PREFIX=/usr` and what it puts
# there, checked with the tools that will read it:
#  1. every file is installed; no @PLACEHOLDER@ is left in the units, man
#     pages and kvpool.pc; conf/kvpool.ini became etc/kvpool/kvpool.ini;
#     each man page renders without a groff warning;
#  2. systemd-sysusers and systemd-tmpfiles (--root) accept the sysusers.d
#     and tmpfiles.d entries: user kvpool, /var/lib/kvpool 0750 kvpool;
#  3. `systemd-analyze verify --root` passes, with no warning at all, on the
#     installed units (kvpool-master, kvpool-node, kvpool-node@a,
#     kvpool-fuse@mnt-kvpool): it checks every key, that each Exec* binary
#     exists and that each Documentation=man: page is installed. (A broken
#     copy is verified first, to show that a warning is noticed.)
#     `systemd-analyze security --offline` must rate master and node at
#     exposure 3.0 or better; the master unit with the HA drop-in
#     (systemd/kvpool-master-ha.conf.example) verifies clean too;
#  4. pkg-config with PKG_CONFIG_SYSROOT_DIR finds the DESTDIR kvpool.pc; a
#     small program compiles against the installed kvpool.h and links and
#     runs against the installed libkvpool.so (and statically against
#     libkvpool.a with --static); the .so exports only kvp_* symbols;
#     docs/client.md's example (examples/kvpool_hello.c) builds the same
#     ways and puts, reads and removes a value in a real pool;
#  5. a second `make install` keeps an edited kvpool.ini;
#  6. `make uninstall DESTDIR=...` removes everything but the edited
#     kvpool.ini; with the file unedited, it leaves DESTDIR empty.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init units
need systemd-analyze systemd-sysusers systemd-tmpfiles pkg-config cc make groff man \
	"$B/kvpool" "$B/kvpool-master" "$B/kvpool-node"
[ -e "$B/libkvpool.a" ] || skip "$B/libkvpool.a is not built"
D=$E2E_TMP/dest
V=$E2E_TMP/vroot

# The build tree (and flavour) the test runner uses; -o all: install what is
# built (the runner built it) instead of rebuilding the world mid-test.
mkargs=(--no-print-directory -C "$E2E_ROOT" -o all DESTDIR="$D" PREFIX=/usr BUILD="$B")
san=()	# a sanitized libkvpool needs its runtime in the test programs too
case $(basename "$B") in
build-san) mkargs+=(SANITIZE=1); san=("-fsanitize=address,undefined") ;;
build-tsan) mkargs+=(TSAN=1); san=(-fsanitize=thread) ;;
esac
make "${mkargs[@]}" install >"$E2E_TMP/install.log" 2>&1 || { cat "$E2E_TMP/install.log"; fail "make install"; }

# ---- 1. files ----
units="kvpool-master.service kvpool-node.service kvpool-node@.service kvpool-fuse@.service"
want="usr/bin/kvpool usr/bin/kvpool-master usr/bin/kvpool-node
usr/lib/libkvpool.so usr/lib/libkvpool.so.1 usr/lib/libkvpool.a usr/lib/pkgconfig/kvpool.pc
usr/include/kvpool.h usr/lib/sysusers.d/kvpool.conf usr/lib/tmpfiles.d/kvpool.conf
usr/share/man/man1/kvpool.1 usr/share/man/man5/kvpool.ini.5
usr/share/man/man8/kvpool-master.8 usr/share/man/man8/kvpool-node.8 etc/kvpool/kvpool.ini"
for u in $units; do want="$want usr/lib/systemd/system/$u"; done
for f in $want; do
	[ -e "$D/$f" ] || fail "make install did not install /$f"
done
for b in kvpool kvpool-master kvpool-node; do
	[ -x "$D/usr/bin/$b" ] || fail "/usr/bin/$b is not executable"
done
cmp -s "$E2E_ROOT/conf/kvpool.ini" "$D/etc/kvpool/kvpool.ini" || fail "etc/kvpool/kvpool.ini is not conf/kvpool.ini"
left=$(grep -l '@[A-Z]*@' "$D"/usr/lib/systemd/system/* "$D"/usr/share/man/man*/* \
	"$D"/usr/lib/pkgconfig/kvpool.pc 2>/dev/null)
[ -z "$left" ] || fail "placeholders left in: $left"
grep -q '^ExecStart=/usr/bin/kvpool-node -c /etc/kvpool/kvpool.ini -c /etc/kvpool/node-%i.ini$' \
	"$D/usr/lib/systemd/system/kvpool-node@.service" || fail "kvpool-node@.service ExecStart"
for m in "$D"/usr/share/man/man*/*; do
	w=$(groff -man -ww -z "$m" 2>&1)
	[ -z "$w" ] || fail "groff warns about $(basename "$m"): $w"
	MANWIDTH=80 man -l "$m" 2>/dev/null | grep -q "^NAME" || fail "$(basename "$m") does not render"
done
grep -q "lease_ttl" "$D/usr/share/man/man5/kvpool.ini.5" || fail "kvpool.ini(5) lacks the keys"
ok "make install DESTDIR: $(find "$D" -type f | wc -l) files, man pages render"

# ---- 2. sysusers.d, tmpfiles.d ----
# A root for the offline tools: the installed tree, plus what verify needs
# of the host (its units for sysinit.target & co., the helpers the units
# name: /bin/kill, /bin/mkdir, /bin/fusermount3).
mkdir -p "$V"
cp -a "$D"/. "$V"/
mkdir -p "$V/usr/lib/systemd/system" "$V/usr/bin" "$V/etc"
for u in /usr/lib/systemd/system/*; do
	[ -e "$V/usr/lib/systemd/system/$(basename "$u")" ] || cp -a "$u" "$V/usr/lib/systemd/system/"
done
ln -s usr/bin "$V/bin"
ln -s usr/sbin "$V/sbin" 2>/dev/null || true
for h in kill mkdir fusermount3; do
	p=$(command -v "$h") || p=/bin/$h
	if [ -x "$p" ]; then cp "$p" "$V/usr/bin/$h"; else printf '#!/bin/sh\n' >"$V/usr/bin/$h"; chmod 755 "$V/usr/bin/$h"; fi
done
systemd-sysusers --root="$V" "$V/usr/lib/sysusers.d/kvpool.conf" >"$E2E_TMP/sysusers.log" 2>&1 ||
	{ cat "$E2E_TMP/sysusers.log"; fail "systemd-sysusers rejects kvpool.conf"; }
uid=$(awk -F: '$1 == "kvpool" { print $3 }' "$V/etc/passwd")
gid=$(awk -F: '$1 == "kvpool" { print $3 }' "$V/etc/group")
[ -n "$uid" ] && [ -n "$gid" ] || fail "sysusers did not create user and group kvpool"
systemd-tmpfiles --root="$V" --create "$V/usr/lib/tmpfiles.d/kvpool.conf" >"$E2E_TMP/tmpfiles.log" 2>&1 ||
	{ cat "$E2E_TMP/tmpfiles.log"; fail "systemd-tmpfiles rejects kvpool.conf"; }
[ "$(stat -c '%a %u %g' "$V/var/lib/kvpool")" = "750 $uid $gid" ] ||
	fail "/var/lib/kvpool is $(stat -c '%a %u %g' "$V/var/lib/kvpool"), want 750 $uid $gid"
ok "sysusers.d creates kvpool ($uid:$gid), tmpfiles.d creates /var/lib/kvpool 0750"

# ---- 3. systemd-analyze verify ----
verify() {	# verify UNIT...: output in $E2E_TMP/verify.log, exit status
	(cd "$V" && MANPATH="$V/usr/share/man" SYSTEMD_LOG_COLOR=0 \
		systemd-analyze verify --root="$V" "$@") >"$E2E_TMP/verify.log" 2>&1
}
# a unit with a bad key and a missing binary must be noticed
sed -e 's|^LockPersonality=yes|LockPersonality=yes\nNoSuchKey=1|' \
	-e 's|^ExecStart=/usr/bin/kvpool-master|ExecStart=/usr/bin/kvpool-nonexistent|' \
	"$V/usr/lib/systemd/system/kvpool-master.service" >"$V/usr/lib/systemd/system/kvpt-broken.service"
verify kvpt-broken.service
grep -q "NoSuchKey" "$E2E_TMP/verify.log" && grep -q "kvpool-nonexistent" "$E2E_TMP/verify.log" ||
	{ cat "$E2E_TMP/verify.log"; fail "verify did not notice a broken unit: the check below would be void"; }
rm "$V/usr/lib/systemd/system/kvpt-broken.service"

vunits="kvpool-master.service kvpool-node.service kvpool-node@a.service kvpool-fuse@mnt-kvpool.service"
# shellcheck disable=SC2086
verify $vunits
vrc=$?
if [ $vrc != 0 ] || [ -s "$E2E_TMP/verify.log" ]; then
	cat "$E2E_TMP/verify.log"
	fail "systemd-analyze verify: exit $vrc, $(wc -l <"$E2E_TMP/verify.log") lines of complaints"
fi
ok "systemd-analyze verify: $vunits clean"

# The HA drop-in (docs/ha.md) on the master unit: a broken copy is noticed,
# the shipped one is clean.
dd="$V/etc/systemd/system/kvpool-master.service.d"
mkdir -p "$dd"
sed 's|^RestartSec=1s|RestartSec=1s\nNoSuchHAKey=1|' "$E2E_ROOT/systemd/kvpool-master-ha.conf.example" >"$dd/ha.conf"
verify kvpool-master.service
grep -q "NoSuchHAKey" "$E2E_TMP/verify.log" ||
	{ cat "$E2E_TMP/verify.log"; fail "verify did not read the drop-in: the check below would be void"; }
cp "$E2E_ROOT/systemd/kvpool-master-ha.conf.example" "$dd/ha.conf"
verify kvpool-master.service
vrc=$?
if [ $vrc != 0 ] || [ -s "$E2E_TMP/verify.log" ]; then
	cat "$E2E_TMP/verify.log"
	fail "systemd-analyze verify with the HA drop-in: exit $vrc"
fi
rm -r "$dd"
ok "systemd-analyze verify: kvpool-master.service with kvpool-master-ha.conf.example clean"

for u in kvpool-master.service kvpool-node.service kvpool-fuse@mnt-kvpool.service; do
	thr=30
	[ "$u" = kvpool-fuse@mnt-kvpool.service ] && thr=50	# needs CAP_SYS_ADMIN, no namespaces
	(cd "$V" && systemd-analyze security --offline=true --root="$V" --threshold=$thr "$u") \
		>"$E2E_TMP/security.log" 2>&1
	src=$?
	score=$(grep -o "Overall exposure level for $u: [0-9.]*" "$E2E_TMP/security.log" | awk '{print $NF}')
	[ -n "$score" ] || { tail -n 5 "$E2E_TMP/security.log"; fail "systemd-analyze security gave no score for $u"; }
	[ $src = 0 ] || fail "$u: exposure $score is above $((thr / 10)).$((thr % 10))"
	echo "    $u: exposure $score"
done
ok "systemd-analyze security: master and node at 3.0 or better"

# ---- 4. pkg-config, headers, the shared and static library ----
export PKG_CONFIG_PATH="" PKG_CONFIG_LIBDIR="$D/usr/lib/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$D"
flags=$(pkg-config --cflags --libs kvpool) || fail "pkg-config --cflags --libs kvpool"
for f in "-I$D/usr/include" "-L$D/usr/lib" -lkvpool; do
	case " $flags " in *" $f "*) ;; *) fail "pkg-config gives '$flags', no $f" ;; esac
done
[ "$(pkg-config --modversion kvpool)" = "$(sed -n 's/^VERSION := //p' "$E2E_ROOT/Makefile")" ] ||
	fail "kvpool.pc version $(pkg-config --modversion kvpool)"
cat >"$E2E_TMP/t.c" <<'EOF'
#include <kvpool.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
	const char *ov[] = { "client.timeout=2s", NULL };
	struct kvp_open_opts o = { .master = "127.0.0.1:1", .overrides = ov };
	int err = 0;
	struct kvp *k = kvp_open(&o, &err);

	if (k || err != KVP_ECONN) {
		printf("kvp_open of a closed port: %p %d\n", (void *)k, err);
		return 1;
	}
	printf("%s|%s\n", kvp_errname(err), kvp_strerror(KVP_ENOTFOUND));
	return 0;
}
EOF
# shellcheck disable=SC2046
cc "${san[@]}" -std=c99 -Wall -Werror -o "$E2E_TMP/t" "$E2E_TMP/t.c" $(pkg-config --cflags --libs kvpool) 2>"$E2E_TMP/cc.log" ||
	{ cat "$E2E_TMP/cc.log"; fail "a program does not compile and link with pkg-config's flags"; }
readelf -d "$E2E_TMP/t" | grep -q 'NEEDED.*\[libkvpool.so.1\]' || fail "the program does not need libkvpool.so.1"
out=$(LD_LIBRARY_PATH="$D/usr/lib" "$E2E_TMP/t") || fail "the program fails: $out"
[ "$out" = "KVP_ECONN|object not found" ] || fail "the program printed '$out'"
LD_LIBRARY_PATH="$D/usr/lib" ldd "$E2E_TMP/t" | grep -q "$D/usr/lib/libkvpool.so.1" ||
	fail "the program did not load the installed libkvpool.so.1"
# shellcheck disable=SC2046
cc "${san[@]}" -o "$E2E_TMP/ts" "$E2E_TMP/t.c" $(pkg-config --cflags kvpool) -Wl,-Bstatic -lkvpool -Wl,-Bdynamic \
	$(pkg-config --static --libs kvpool | sed 's/ -lkvpool / /') 2>"$E2E_TMP/cc.log" ||
	{ cat "$E2E_TMP/cc.log"; fail "static link against libkvpool.a with pkg-config --static"; }
[ "$("$E2E_TMP/ts")" = "KVP_ECONN|object not found" ] || fail "the static program"
extra=$(nm -D --defined-only "$D/usr/lib/libkvpool.so" | awk '$2 ~ /[TDBRVW]/ && $3 !~ /^kvp_/ { print $3 }' |
	grep -v '^KVPOOL_1$' | head -5)
[ -z "$extra" ] || fail "libkvpool.so exports more than kvp_*: $extra"
ok "pkg-config (sysroot): shared and static programs build and run; only kvp_* exported"

# docs/client.md's first program is examples/kvpool_hello.c, word for word;
# built with pkg-config against the installed files, shared and static, it
# puts, reads back and removes a value in a real pool.
doc_c=$(awk '/^## Building against it/ { h = 1; next } h && /^```c$/ { inb = 1; next }
	inb && /^```/ { exit } inb' "$E2E_ROOT/docs/client.md")
[ "$doc_c" = "$(cat "$E2E_ROOT/examples/kvpool_hello.c")" ] ||
	fail "docs/client.md's program differs from examples/kvpool_hello.c"
[ "$(printf '%s\n' "$doc_c" | wc -l)" -le 32 ] || fail "docs/client.md's first program is over 30 lines"
# shellcheck disable=SC2046
cc "${san[@]}" -std=c99 -Wall -Wextra -Werror -o "$E2E_TMP/hello" "$E2E_ROOT/examples/kvpool_hello.c" \
	$(pkg-config --cflags --libs kvpool) 2>"$E2E_TMP/cc.log" ||
	{ cat "$E2E_TMP/cc.log"; fail "examples/kvpool_hello.c does not build with pkg-config's flags"; }
# shellcheck disable=SC2046
cc "${san[@]}" -std=c99 -o "$E2E_TMP/hello-static" "$E2E_ROOT/examples/kvpool_hello.c" \
	$(pkg-config --cflags kvpool) -Wl,-Bstatic $(pkg-config --libs kvpool) \
	-Wl,-Bdynamic $(pkg-config --static --libs-only-l kvpool | sed 's/-lkvpool//') 2>"$E2E_TMP/cc.log" ||
	{ cat "$E2E_TMP/cc.log"; fail "examples/kvpool_hello.c does not link statically as docs/client.md says"; }
pool_ini
run_master
pool_node n1 "segment_size = 16M"
run_node n1
wait_nodes n1 20 || fail "the node did not mount"
for prog in hello hello-static; do
	out=$(LD_LIBRARY_PATH="$D/usr/lib" "$E2E_TMP/$prog" "$MASTER_ADDR" 2>&1) ||
		fail "examples/kvpool_hello.c ($prog) against the pool: $out"
	[ "$out" = "hello-from-c = hello, pool" ] || fail "$prog printed '$out'"
done
kv get hello-from-c >/dev/null 2>&1 && fail "the example's value is still in the pool after its remove"
ok "docs/client.md's program (examples/kvpool_hello.c) builds with pkg-config, shared and static, and round-trips a value"
unset PKG_CONFIG_PATH PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR

# ---- 5. reinstall keeps an edited configuration ----
printf '\n# edited by systemd_units.sh\n[log]\nlevel = info\n' >>"$D/etc/kvpool/kvpool.ini"
make "${mkargs[@]}" install >"$E2E_TMP/install2.log" 2>&1 || { cat "$E2E_TMP/install2.log"; fail "second make install"; }
grep -q "edited by systemd_units.sh" "$D/etc/kvpool/kvpool.ini" || fail "a second install overwrote kvpool.ini"
grep -q "keeping existing" "$E2E_TMP/install2.log" || fail "a second install does not say it keeps kvpool.ini"
ok "a second make install keeps the edited kvpool.ini"

# ---- 6. uninstall ----
make "${mkargs[@]}" uninstall >"$E2E_TMP/uninstall.log" 2>&1 || { cat "$E2E_TMP/uninstall.log"; fail "make uninstall"; }
rest=$(cd "$D" && find . ! -type d ! -path ./etc/kvpool/kvpool.ini | sort)
[ -z "$rest" ] || fail "make uninstall leaves what make install put there: $rest"
[ -f "$D/etc/kvpool/kvpool.ini" ] || fail "make uninstall removed the edited kvpool.ini"
grep -q "keeping .*kvpool.ini (edited)" "$E2E_TMP/uninstall.log" || fail "uninstall does not say it keeps kvpool.ini"
cp "$E2E_ROOT/conf/kvpool.ini" "$D/etc/kvpool/kvpool.ini"
make "${mkargs[@]}" uninstall >"$E2E_TMP/uninstall.log" 2>&1 || { cat "$E2E_TMP/uninstall.log"; fail "make uninstall"; }
rest=$(cd "$D" && find . -mindepth 1 | sort)
[ -z "$rest" ] || fail "after uninstall of an unedited install, left: $rest"
ok "make uninstall removes everything (an edited kvpool.ini stays)"
echo "PASS"
