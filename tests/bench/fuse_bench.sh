#!/bin/bash
# fuse_bench.sh — the FUSE view against tmpfs, measured in the same run:
#   1. sequential `dd bs=1M` reads of 1, 16 and 64 MiB values through the
#      mount vs the same bytes in a /dev/shm file: cold (the mount's page
#      cache dropped first, so every byte comes through the daemon; needs
#      root, else the first read of a fresh value) and warm (page cache);
#   2. `ls` and `ls -l` of a directory of 10,000 keys vs a tmpfs directory
#      of 10,000 files.
# Prints medians and ratios (target: cold reads >= 0.5x tmpfs). Exit 0, or
# 77 when the pool or FUSE is not available.
# Env: REPS (default 5), NKEYS (default 10000).
SEG_SIZE=768M
LEASE_TTL=1s
. "$(dirname "$0")/../e2e/fuse_lib.inc"
reps=${REPS:-5}
nkeys=${NKEYS:-10000}
ref=/dev/shm/kvpool-fusebench-$$
extra_cleanup='rm -rf "$ref" "$ref.d"'

start_pool
mnt=$tmp/mnt
mount_view "$mnt"

can_drop=0
[ "$(id -u)" = 0 ] && [ -w /proc/sys/vm/drop_caches ] && can_drop=1
drop() { [ $can_drop = 1 ] && sync && echo 1 >/proc/sys/vm/drop_caches; }

# dd_secs FILE: seconds dd reports for reading FILE with bs=1M
dd_secs() {
	dd if="$1" of=/dev/null bs=1M 2>&1 | sed -n 's/.* copied, \([0-9.e-]*\) s,.*/\1/p'
}
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
gbps() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.2f", b / s / 1e9 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b / a }'; }	# time_ref / time

echo "# fuse_bench: $(nproc) CPUs, $(uname -r), reps=$reps, cold reads: $([ $can_drop = 1 ] && echo 'page cache dropped' || echo 'first read of a fresh value')"
printf '%-8s %-6s %10s %10s %8s\n' size mode "mnt GB/s" "tmpfs GB/s" ratio
for mib in 1 16 64; do
	bytes=$((mib << 20))
	head -c "$bytes" /dev/urandom >"$ref"
	cold=() warm=() tref=()
	for r in $(seq "$reps"); do
		key=bench/v$mib-$r
		kv put "$key" "$ref" >/dev/null || fail "put $key"
		drop
		cold+=("$(dd_secs "$mnt/$key")")
		warm+=("$(dd_secs "$mnt/$key")")
		tref+=("$(dd_secs "$ref")")
	done
	cmp -s "$ref" "$mnt/bench/v$mib-1" || fail "bench/v$mib-1 read back differs"
	c=$(printf '%s\n' "${cold[@]}" | median)
	w=$(printf '%s\n' "${warm[@]}" | median)
	t=$(printf '%s\n' "${tref[@]}" | median)
	printf '%-8s %-6s %10s %10s %7sx\n' "${mib}MiB" cold "$(gbps $bytes "$c")" "$(gbps $bytes "$t")" "$(ratio "$c" "$t")"
	printf '%-8s %-6s %10s %10s %7sx\n' "${mib}MiB" warm "$(gbps $bytes "$w")" "$(gbps $bytes "$t")" "$(ratio "$w" "$t")"
done
rm -f "$ref"

# ---- ls of 10,000 keys ------------------------------------------------------------
kv bench --op put --count "$nkeys" --size 64 --batch 200 --prefix many/ --keep >/dev/null 2>&1 ||
	fail "kvpool bench --op put"
mkdir -p "$ref.d"
python3 -c 'import sys
for i in range(int(sys.argv[2])): open("%s/%08d" % (sys.argv[1], i), "w").write("x" * 64)' "$ref.d" "$nkeys"
# ms CMD...: wall time of one run in milliseconds
ms() {
	local t0 t1
	t0=$(date +%s%N)
	"$@" >/dev/null 2>&1
	t1=$(date +%s%N)
	awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (b - a) / 1e6 }'
}
[ "$(ls "$mnt/many" | wc -l)" = "$nkeys" ] || fail "ls does not list $nkeys keys"
printf '%-22s %10s %10s %8s\n' "listing $nkeys" "mnt ms" "tmpfs ms" ratio
for cmd in "ls" "ls -l"; do
	m=() t=()
	for r in $(seq "$reps"); do
		sleep 1.1	# past entry/attr timeouts: every run asks the pool
		m+=("$(ms $cmd "$mnt/many")")
		t+=("$(ms $cmd "$ref.d")")
	done
	mm=$(printf '%s\n' "${m[@]}" | median)
	tt=$(printf '%s\n' "${t[@]}" | median)
	printf '%-22s %10s %10s %7sx\n' "$cmd" "$mm" "$tt" "$(ratio "$mm" "$tt")"
done
unmount_view "$mnt" "$view_pid"
