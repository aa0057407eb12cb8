#!/bin/bash
# tests/bench/fuse_bench.sh — the FUSE view against tmpfs, measured in the
# same run (run it from the top of the tree):
#   1. sequential `dd bs=1M` reads of 1, 16 and 64 MiB values through the
#      mount vs the same bytes in a /dev/shm file: cold (the page cache
#      dropped first, so every byte comes through the daemon; needs root,
#      else the first read of a fresh value) and warm (page cache);
#   2. `ls` and `ls -l` of a directory of 10,000 keys vs a tmpfs directory
#      of 10,000 files;
#   3. creating 2,000 small files (100 bytes each, Python open/write/close
#      in a fresh directory) vs the same in a tmpfs directory; and, for the
#      mount, the time until `sync MNT` says every put behind the closes
#      is done;
#   4. the floor under 3: one FUSE request the view answers without the
#      pool (getxattr of a name outside user.*) vs the same call on tmpfs.
# As root where the kernel has FUSE over io_uring, the fuse module's
# enable_uring is set to Y for the run (restored at exit) and the header
# says which transport the view used; 3 and 4 are then measured once more
# on a second mount with [fuse] io_uring = off (/dev/fuse).
# Starts its own master, node and mount (tests/e2e/fuse_lib.inc) and
# removes all of it at exit. Prints medians and ratios; the targets
# (docs/fuse.md): reads of 1 and 64 MiB >= 0.8x, ls -l >= 0.5x, creating
# >= 0.25x. Exit 0 when it ran (a missed target is reported, not a
# failure), 77 without the binaries, /dev/fuse or fusermount3, 1 when a
# read, a listing or a check failed.
# Env: REPS (default 5), NKEYS (default 10000), NFILES (default 2000),
# BENCH_SMOKE=1 (seconds: 1 and 4 MiB values, one rep, 200 keys and
# files; never drops the page cache).
[ "${BENCH_SMOKE:-0}" = 1 ] && SEG_SIZE=64M || SEG_SIZE=768M
LEASE_TTL=1s
. "$(dirname "$0")/../e2e/fuse_lib.inc" || exit 1
. "$(dirname "$0")/bench_lib.inc" || exit 1
reps=${REPS:-$(pick 1 5)}
nkeys=${NKEYS:-$(pick 200 10000)}
nfiles=${NFILES:-$(pick 200 2000)}
sizes=$(pick "1 4" "1 16 64")
ref=/dev/shm/kvpool-fusebench-$$
on_cleanup "rm -rf '$ref' '$ref.d' '$ref'.mk*"

uparam=/sys/module/fuse/parameters/enable_uring
if [ "$(id -u)" = 0 ] && [ -w $uparam ]; then
	on_cleanup "echo '$(cat $uparam)' >$uparam"
	echo Y >$uparam
fi
start_pool
mnt=$E2E_TMP/mnt
mount_view "$mnt"
transport=$(sed -n 's/^view_transport \([^ ]*\).*/\1/p' "$mnt/.kvpool/stats")

can_drop=0
[ $SMOKE = 0 ] && [ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/drop_caches ] && can_drop=1
drop() { [ $can_drop = 0 ] || { sync && echo 1 >/proc/sys/vm/drop_caches; } || fail "drop_caches"; }

# dd_secs VAR FILE: VAR = seconds dd reports for reading FILE with bs=1M.
dd_secs() {
	local out
	out=$(dd if="$2" of=/dev/null bs=1M 2>&1) || fail "dd of $2: $out"
	printf -v "$1" '%s' "$(sed -n 's/.* copied, \([0-9.e-]*\) s,.*/\1/p' <<<"$out")"
	positive "dd's time for $2" "${!1}"
}
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
gbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }

echo "# fuse_bench: $(nproc) CPUs, $(uname -r), FUSE transport ${transport:-unknown}, reps=$reps, cold reads: $([ $can_drop = 1 ] && echo 'page cache dropped' || echo 'first read of a fresh value')$([ $SMOKE = 1 ] && echo ', SMOKE run: the numbers mean nothing')"
printf '%-8s %-6s %10s %10s %8s\n' size mode "mnt GB/s" "tmpfs GB/s" ratio
for mib in $sizes; do
	bytes=$((mib << 20))
	head -c "$bytes" /dev/urandom >"$ref" || fail "writing $ref"
	cold=() warm=() tref=()
	for r in $(seq "$reps"); do
		key=bench/v$mib-$r
		kv put "$key" "$ref" >/dev/null || fail "put $key"
		drop
		dd_secs s "$mnt/$key"; cold+=("$s")
		dd_secs s "$mnt/$key"; warm+=("$s")
		dd_secs s "$ref"; tref+=("$s")
	done
	cmp -s "$ref" "$mnt/bench/v$mib-1" || fail "bench/v$mib-1 read back differs"
	c=$(printf '%s\n' "${cold[@]}" | median)
	w=$(printf '%s\n' "${warm[@]}" | median)
	t=$(printf '%s\n' "${tref[@]}" | median)
	ratio rc "$t" "$c"	# time_ref / time = rate / rate_ref
	ratio rw "$t" "$w"
	printf '%-8s %-6s %10s %10s %7sx\n' "${mib}MiB" cold "$(gbps $bytes "$c")" "$(gbps $bytes "$t")" "$rc"
	printf '%-8s %-6s %10s %10s %7sx\n' "${mib}MiB" warm "$(gbps $bytes "$w")" "$(gbps $bytes "$t")" "$rw"
done
rm -f "$ref"

# ---- ls of NKEYS keys ------------------------------------------------------------
kv bench --op put --count "$nkeys" --size 64 --batch 200 --prefix many/ --keep >"$E2E_TMP/put.log" 2>&1 ||
	fail "kvpool bench --op put: $(tail -n 5 "$E2E_TMP/put.log")"
mkdir -p "$ref.d"
python3 -c 'import sys
for i in range(int(sys.argv[2])): open("%s/%08d" % (sys.argv[1], i), "w").write("x" * 64)' "$ref.d" "$nkeys" ||
	fail "creating $nkeys files in $ref.d"
# ms VAR CMD...: VAR = wall time of one successful run of CMD in milliseconds
ms() {
	local var=$1 t0 t1
	shift
	t0=$(date +%s%N)
	"$@" >/dev/null 2>"$E2E_TMP/ms.err" || fail "'$*' failed: $(head -c 300 "$E2E_TMP/ms.err")"
	t1=$(date +%s%N)
	printf -v "$var" '%s' "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e6 }')"
}
[ "$(ls "$mnt/many" | wc -l)" = "$nkeys" ] || fail "ls does not list $nkeys keys"
printf '%-22s %10s %10s %8s\n' "listing $nkeys" "mnt ms" "tmpfs ms" ratio
for cmd in "ls" "ls -l"; do
	m=() t=()
	for r in $(seq "$reps"); do
		sleep 1.1	# past entry/attr timeouts: every run asks the pool
		# shellcheck disable=SC2086
		ms x $cmd "$mnt/many"; m+=("$x")
		# shellcheck disable=SC2086
		ms x $cmd "$ref.d"; t+=("$x")
	done
	mm=$(printf '%s\n' "${m[@]}" | median)
	tt=$(printf '%s\n' "${t[@]}" | median)
	ratio rl "$tt" "$mm"
	printf '%-22s %10s %10s %7sx\n' "$cmd" "$mm" "$tt" "$rl"
done

# ---- creating NFILES small files ---------------------------------------------
# mk_secs VAR DIR: VAR = seconds to create nfiles files of 100 bytes in DIR
mk_secs() {
	local out
	out=$(python3 - "$2" "$nfiles" <<'EOF'
import os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
os.mkdir(d)
t = time.perf_counter()
for i in range(n):
    with open(os.path.join(d, "f%06d" % i), "wb") as f:
        f.write(b"x" * 100)
print("%.6f" % (time.perf_counter() - t))
EOF
) || fail "creating $nfiles files in $2: $out"
	printf -v "$1" '%s' "$out"
	positive "creating files in $2" "${!1}"
}
# creates DIR TAG: medians over reps of creating nfiles in DIR/mkTAG$r
# (mm, and mms with the sync) and in tmpfs (tt)
creates() {
	local m=() t=() ms=() r x t0
	for r in $(seq "$reps"); do
		mk_secs x "$1/mk$2$r"; m+=("$x")
		t0=$(date +%s%N)
		sync "$1" || fail "sync $1"
		# the puts behind the closes: creation plus what sync waited for
		ms+=("$(awk -v x="$x" -v a="$t0" -v b="$(date +%s%N)" 'BEGIN { printf "%.6f", x + (b - a) / 1e9 }')")
		mk_secs x "$ref.mk$2$r"; t+=("$x")
	done
	[ "$(kv ls "mk$2""1/" | wc -l)" = "$nfiles" ] || fail "the pool holds $(kv ls "mk$2""1/" | wc -l) of $nfiles created files"
	cmp -s <(printf 'x%.0s' $(seq 100)) "$1/mk$2""1/f000000" || fail "a created file reads back wrong"
	mm=$(printf '%s\n' "${m[@]}" | median)
	mms=$(printf '%s\n' "${ms[@]}" | median)
	tt=$(printf '%s\n' "${t[@]}" | median)
	rm -rf "$ref".mk*
}
creates "$mnt" ""
ratio rc "$tt" "$mm"
ratio rs "$tt" "$mms"
printf '%-22s %10s %10s %8s\n' "create $nfiles files" "mnt ms" "tmpfs ms" ratio
printf '%-22s %10.1f %10.1f %7sx\n' "open/write/close" "$(awk -v s="$mm" 'BEGIN { print s * 1000 }')" \
	"$(awk -v s="$tt" 'BEGIN { print s * 1000 }')" "$rc"
printf '%-22s %10.1f %10.1f %7sx\n' "... and sync MNT" "$(awk -v s="$mms" 'BEGIN { print s * 1000 }')" \
	"$(awk -v s="$tt" 'BEGIN { print s * 1000 }')" "$rs"

# ---- the floor under a create ----------------------------------------------------
# One FUSE request the view answers at once, without the pool: getxattr of
# a name outside user.* (ENOTSUP, which the kernel does not remember). A
# create through FUSE is 7 requests (getattr of the directory, lookup,
# create, the ioctl behind Python's isatty, write, flush, release) plus
# one master round trip for the lookup; tmpfs makes none.
rt_us() {
	python3 - "$1" "$nfiles" <<'EOF'
import os, sys, time
p, n = sys.argv[1], int(sys.argv[2])
t = time.perf_counter()
for _ in range(n):
    try:
        os.getxattr(p, "security.kvpool-bench")
    except OSError:
        pass
print("%.2f" % ((time.perf_counter() - t) / n * 1e6))
EOF
}
printf x >"$ref" || fail "writing $ref"
kv put bench/rt "$ref" >/dev/null || fail "put bench/rt"
rtm=$(rt_us "$mnt/bench/rt") && rtt=$(rt_us "$ref") || fail "timing getxattr"
positive "a getxattr through the mount" "$rtm"
rm -f "$ref"
printf '%-22s %10s %10s\n' "one request" "mnt us" "tmpfs us"
printf '%-22s %10s %10s   (a create: 7 requests + 1 master round trip; a tmpfs create: %.1f us)\n' \
	"getxattr (ENOTSUP)" "$rtm" "$rtt" "$(awk -v s="$tt" -v n="$nfiles" 'BEGIN { print s / n * 1e6 }')"
unmount_view "$mnt" "$view_pid"

# ---- the same two over /dev/fuse, when the ring was used -------------------------------
if [ "$transport" = io_uring ]; then
	{ cat "$POOL_INI"; printf '[fuse]\nio_uring = off\n'; } >"$E2E_TMP/off.ini"
	POOL_INI=$E2E_TMP/off.ini mount_view "$mnt"
	grep -q '^view_transport /dev/fuse$' "$mnt/.kvpool/stats" || fail "io_uring = off did not take"
	ring_mm=$mm ring_rt=$rtm
	creates "$mnt" d
	rtd=$(rt_us "$mnt/bench/rt") || fail "timing getxattr"
	positive "a getxattr through /dev/fuse" "$rtd"
	ratio rr "$mm" "$ring_mm"
	printf '%-22s %10s %10s %8s\n' "transport" "io_uring" "/dev/fuse" speedup
	printf '%-22s %10s %10s %7sx\n' "getxattr us" "$ring_rt" "$rtd" "$(awk -v a="$ring_rt" -v b="$rtd" 'BEGIN { printf "%.2f", b / a }')"
	printf '%-22s %10.1f %10.1f %7sx\n' "create $nfiles ms" "$(awk -v s="$ring_mm" 'BEGIN { print s * 1000 }')" \
		"$(awk -v s="$mm" 'BEGIN { print s * 1000 }')" "$rr"
	unmount_view "$mnt" "$view_pid"
fi
