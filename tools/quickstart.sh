#!/bin/bash
# quickstart.sh — one command to try kvpool on this machine: installs missing
# Debian packages (as root; otherwise prints the apt-get line), builds, starts
# a master and a node on loopback with conf/kvpool.ini plus small-machine
# overrides, mounts the FUSE view, prints what to type, and runs in the
# foreground until Ctrl-C, then stops what it started in order (the mount,
# the node, the master) and removes what it made in /tmp.
#
#   tools/quickstart.sh [-p PORT_BASE] [-s SEGMENT_SIZE] [-m DIR | --no-mount] [--keep]
#                       [--logs DIR]
set -u
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
BUILD=${BUILD:-build}

base=15000
segsize=256M
mnt=/tmp/kvpool-mnt
mount_view=1
keep=0
logdir=""
usage() {
	cat <<EOF
Usage: tools/quickstart.sh [OPTIONS]

Builds kvpool if needed, starts kvpool-master and one kvpool-node on
127.0.0.1 and mounts the FUSE view; Ctrl-C stops everything.

  -p, --port-base N     ports N+1 (master RPC), N+2 (metadata), N+3 (master
                        HTTP), N+10 (node data), N+11 (node HTTP); default 15000
  -s, --segment-size S  memory the node contributes (default 256M)
  -m, --mount DIR       where to mount the FUSE view (default /tmp/kvpool-mnt)
      --no-mount        do not mount the FUSE view
      --keep            keep the node's /dev/shm segment (and its objects)
                        after stopping; the next --keep run serves them again
      --logs DIR        keep the daemons' logs in DIR (default: a temporary
                        directory, removed at exit unless something failed)
  -h, --help            this text
EOF
}
while [ $# -gt 0 ]; do
	case "$1" in
	-p | --port-base) base=${2:?}; shift 2 ;;
	-s | --segment-size) segsize=${2:?}; shift 2 ;;
	-m | --mount) mnt=${2:?}; shift 2 ;;
	--no-mount) mount_view=0; shift ;;
	--keep) keep=1; shift ;;
	--logs) logdir=${2:?}; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "quickstart: unknown option '$1'" >&2; usage >&2; exit 2 ;;
	esac
done
case "$base" in
'' | *[!0-9]*) echo "quickstart: --port-base needs a number" >&2; exit 2 ;;
esac
if [ "$base" -lt 1024 ] || [ "$base" -gt 65000 ]; then
	echo "quickstart: --port-base must be 1024..65000" >&2
	exit 2
fi

# ---- packages and build ---------------------------------------------------
# deps.sh installs what is missing when root, else prints the apt-get line.
tools/deps.sh build test || exit 1
# Logs go to a private directory that goes at exit, unless --logs names one
# or something failed (then it stays, and its path is printed).
keep_logs=0
if [ -n "$logdir" ]; then
	mkdir -p "$logdir" || exit 1
	keep_logs=1
else
	logdir=$(mktemp -d /tmp/kvpool-quickstart.XXXXXX) || exit 1
fi
state=$logdir
drop_logs() { [ $keep_logs = 1 ] || rm -rf "$state"; }
echo "quickstart: building (make progs)..."
if ! make -j"$(nproc)" progs >"$state/make.log" 2>&1; then
	tail -n 30 "$state/make.log" >&2
	echo "quickstart: the build failed; full log: $state/make.log" >&2
	exit 1
fi
KVP=$root/$BUILD/kvpool MASTER=$root/$BUILD/kvpool-master NODE=$root/$BUILD/kvpool-node
for b in "$KVP" "$MASTER" "$NODE"; do
	[ -x "$b" ] || { echo "quickstart: $b was not built" >&2; exit 1; }
done

# ---- refuse ports in use ------------------------------------------------------
mport=$((base + 1)) metaport=$((base + 2)) mhttp=$((base + 3))
dport=$((base + 10)) dhttp=$((base + 11))
port_busy() {
	if command -v ss >/dev/null; then
		[ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]
	else
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
	fi
}
busy=""
for p in $mport $metaport $mhttp $dport $dhttp; do
	port_busy "$p" && busy="$busy $p"
done
if [ -n "$busy" ]; then
	echo "quickstart: port(s)$busy already in use (another kvpool running?)." >&2
	echo "  Stop it, or pick other ports: tools/quickstart.sh --port-base 25000" >&2
	drop_logs
	exit 1
fi

conf=conf/kvpool.ini
[ -f "$conf" ] || { echo "quickstart: $conf is missing" >&2; exit 1; }
node=quickstart-$base
seg=kvpool-$node
# The example file keeps the defaults; these fit a small machine on loopback.
common=(-c "$root/$conf"
	-o "cluster.master=127.0.0.1:$mport"
	-o "master.listen=127.0.0.1:$mport"
	-o "master.http_listen=127.0.0.1:$mhttp"
	-o "master.metadata_listen=127.0.0.1:$metaport")
node_opts=(-o "node.name=$node"
	-o "node.listen=127.0.0.1:$dport"
	-o "node.http_listen=127.0.0.1:$dhttp"
	-o "node.segment=$seg"
	-o "node.segment_size=$segsize")
[ $keep = 1 ] || node_opts+=(-o "node.remove_segment_on_exit=true")

kept_before=0
[ $keep = 1 ] && [ -e "/dev/shm/$seg" ] && kept_before=1

pids=()
names=()
mounted=0
made_mnt=0
stopping=0
failed=0
# The daemons run in sessions of their own (setsid), so the terminal's
# Ctrl-C reaches this script alone and the stop goes in order: the mount,
# then the node (drains and leaves the master), then the master.
stop_all() {
	[ $stopping = 1 ] && return
	stopping=1
	trap - INT TERM EXIT
	echo
	echo "quickstart: stopping..."
	if [ $mounted = 1 ] && mountpoint -q "$mnt" 2>/dev/null; then
		fusermount3 -u "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null
	fi
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		local p=${pids[i]}
		# (the mount process may have ended with its unmount already)
		kill -TERM "$p" 2>/dev/null
		for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$p" 2>/dev/null; then
			echo "quickstart: ${names[i]} did not stop within 10 s; killing it" >&2
			kill -KILL "$p" 2>/dev/null
			failed=1
		else
			echo "quickstart: ${names[i]} stopped"
		fi
	done
	wait 2>/dev/null
	[ $made_mnt = 1 ] && rmdir "$mnt" 2>/dev/null
	if [ $keep = 0 ]; then
		rm -f "/dev/shm/$seg"
	else
		echo "quickstart: kept /dev/shm/$seg: the next 'tools/quickstart.sh --keep' serves its"
		echo "  objects again; to drop them: rm /dev/shm/$seg"
	fi
	if [ $failed = 1 ] || [ $keep_logs = 1 ]; then
		echo "quickstart: stopped. Logs: $state/"
	else
		drop_logs
		echo "quickstart: stopped."
	fi
}
trap 'stop_all; exit 0' INT TERM
trap 'stop_all' EXIT

die() {
	echo "quickstart: $*" >&2
	for l in "$state"/*.log; do
		[ -f "$l" ] || continue
		echo "--- $l" >&2
		tail -n 10 "$l" >&2
	done
	failed=1
	exit 1
}

# start NAME LOG CMD...: CMD in a session of its own, logging to LOG.
start() {
	local name=$1 log=$2
	shift 2
	: >"$log"
	setsid "$@" >>"$log" 2>&1 </dev/null &
	pids+=($!)
	names+=("$name")
}

start master "$state/master.log" "$MASTER" "${common[@]}"
start node "$state/node.log" "$NODE" "${common[@]}" "${node_opts[@]}"
kv=("$KVP" -c "$root/$conf" -o "cluster.master=127.0.0.1:$mport")
up=0
for _ in $(seq 100); do
	if "${kv[@]}" info 2>/dev/null | grep -q "^nodes: *1$"; then
		up=1
		break
	fi
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || die "a daemon exited during start-up"; done
	sleep 0.2
done
[ $up = 1 ] || die "the node did not join the master within 20 s"
if [ $keep = 1 ]; then
	if [ $kept_before = 1 ]; then
		# the node reported what its segment still holds as it joined
		objs=$("${kv[@]}" info 2>/dev/null | sed -n 's/^keys: *//p')
		echo "quickstart: /dev/shm/$seg was kept by an earlier run: ${objs:-0} objects came back"
	else
		echo "quickstart: --keep: /dev/shm/$seg stays after Ctrl-C"
	fi
fi

if [ $mount_view = 1 ]; then
	if [ ! -e /dev/fuse ] || ! command -v fusermount3 >/dev/null; then
		echo "quickstart: no /dev/fuse or fusermount3: the FUSE view is not mounted"
		mount_view=0
	else
		if [ ! -e "$mnt" ]; then
			mkdir -p "$mnt" && made_mnt=1
		fi
		if mountpoint -q "$mnt"; then
			fusermount3 -u "$mnt" 2>/dev/null
			mountpoint -q "$mnt" && die "$mnt is already a mount point; pick another with -m DIR"
		fi
		start mount "$state/mount.log" "${kv[@]}" mount -f "$mnt"
		mounted=1
		for _ in $(seq 50); do
			mountpoint -q "$mnt" && break
			kill -0 "${pids[-1]}" 2>/dev/null || break
			sleep 0.2
		done
		if ! mountpoint -q "$mnt"; then
			echo "quickstart: the FUSE view did not mount (see $state/mount.log); going on without it"
			kill -TERM "${pids[-1]}" 2>/dev/null
			unset 'pids[-1]' 'names[-1]'
			mounted=0
			mount_view=0
		fi
	fi
fi

# What to type: the binary's full path; --master only when not the default.
cli="$KVP"
[ "$mport" != 15001 ] && cli="$KVP --master 127.0.0.1:$mport"
cat <<EOF

kvpool is running on this machine:
  master   127.0.0.1:$mport (metrics: http://127.0.0.1:$mhttp/metrics)
  node     $node, $segsize in /dev/shm/$seg, data on 127.0.0.1:$dport
EOF
[ $mount_view = 1 ] && echo "  view     $mnt (FUSE: every key is a file)"
cat <<EOF

Try, in another terminal:
  echo 'hello, pool' | $cli put greeting
  $cli get greeting
  $cli put blobs/big /etc/services
  $cli get blobs/big /tmp/services.copy && cmp /etc/services /tmp/services.copy
  $cli ls -l
  $cli stat blobs/big
  $cli info
  $cli bench --op get --size 1M --count 200 --threads 2
EOF
if [ $mount_view = 1 ]; then
	cat <<EOF
  ls -l $mnt $mnt/blobs
  cat $mnt/greeting
  cp /etc/hosts $mnt/hosts && sync $mnt/hosts && $cli get hosts
  rsync -a $root/docs/ $mnt/docs/ && diff -r $root/docs $mnt/docs
EOF
fi
cat <<EOF

Logs: $state/$([ $keep_logs = 1 ] || echo " (removed at exit)"). Press Ctrl-C to stop everything.
EOF

# Stay in the foreground; stop when Ctrl-C comes or a daemon dies.
while :; do
	for p in "${pids[@]}"; do
		if ! kill -0 "$p" 2>/dev/null; then
			echo "quickstart: a process exited unexpectedly; stopping" >&2
			for l in "$state"/*.log; do echo "--- $l" >&2; tail -n 10 "$l" >&2; done
			failed=1
			stop_all
			exit 1
		fi
	done
	sleep 1
done
