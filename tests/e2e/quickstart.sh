#!/bin/bash
# quickstart.sh — tools/quickstart.sh as a user runs it: started in a
# terminal's process group, Ctrl-C sent to that whole group (as the
# terminal does). The stop goes in the documented order (mount, node,
# master) with no "master closed before answering UNMOUNT", the mount point
# it made and its logs are gone, --keep keeps the segment and says how to
# drop it, and the next --keep run says how many objects came back.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init quickstart
need "$B/kvpool" "$B/kvpool-master" "$B/kvpool-node" setsid fusermount3 python3
[ -c /dev/fuse ] || skip "no /dev/fuse"
# the script builds with `make progs` into build/: only for that tree
[ "$B" = "$E2E_ROOT/build" ] || skip "runs against build/ only (KVP_BUILD=$B)"

# five ports BASE+1, +2, +3, +10, +11, below the kernel's ephemeral range
# (where the other tests' kernel-picked ports are): retried until a base
# has them free
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null)
[ "${lo:-0}" -gt 21100 ] 2>/dev/null || lo=32768
base=""
for _ in $(seq 20); do
	b=$(( (RANDOM % ((lo - 20000 - 16) / 16)) * 16 + 20000 ))
	ok_all=1
	for o in 1 2 3 10 11; do port_free $((b + o)) || ok_all=0; done
	[ $ok_all = 1 ] && { base=$b; break; }
done
[ -n "$base" ] || skip "no free port range"
seg=/dev/shm/kvpool-quickstart-$base
on_cleanup "rm -f '$seg'"
mnt=$E2E_TMP/qs-mnt		# does not exist: the script makes it and removes it
logs=$E2E_TMP/qs-logs
kvq() { "$B/kvpool" --master "127.0.0.1:$((base + 1))" "$@"; }
tmp_before=$(ls -d /tmp/kvpool-quickstart.* 2>/dev/null | sort)

# run_qs OUT ARGS...: the script in a process group of its own (a terminal
# session's foreground group) with SIGINT at its default, as a terminal
# starts it (a background job of this script would ignore it); sets
# QS_PID, the group's id.
run_qs() {
	local out=$1
	shift
	python3 -c 'import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_DFL)
os.setsid()
os.execvp(sys.argv[1], sys.argv[1:])' bash "$E2E_ROOT/tools/quickstart.sh" -p "$base" -s 64M \
		-m "$mnt" "$@" >"$out" 2>&1 &
	QS_PID=$!
	E2E_PIDS+=("$QS_PID")
	waitfor 120 grep -q "Press Ctrl-C" "$out" || fail "the quick start did not come up: $(tail -20 "$out")"
}
# ctrl_c OUT: SIGINT to the whole group, then the script must exit 0.
ctrl_c() {
	kill -INT -- -"$QS_PID" || fail "kill -INT -$QS_PID"
	waitfor 60 gone "$QS_PID" || fail "the quick start did not stop: $(tail -20 "$1")"
	wait "$QS_PID"
	[ $? = 0 ] || fail "the quick start exited $?: $(tail -20 "$1")"
}

# ---- first run: --keep, logs kept in a directory of ours -----------------------
run_qs "$E2E_TMP/run1.out" --keep --logs "$logs"
grep -q "will stay\|stays after Ctrl-C" "$E2E_TMP/run1.out" || fail "--keep is not announced"
mountpoint -q "$mnt" || fail "the view is not mounted at $mnt"
for i in 1 2 3; do echo "value $i" | kvq put "k$i" || fail "put k$i"; done
echo "through the view" >"$mnt/viewed" && sync "$mnt/viewed" || fail "write through the view"
[ "$(kvq get viewed)" = "through the view" ] || fail "the value written through the view"
ctrl_c "$E2E_TMP/run1.out"
out=$(cat "$E2E_TMP/run1.out")
# the documented order: mount, node, master
order=$(grep -o "quickstart: [a-z]* stopped$" "$E2E_TMP/run1.out" | awk '{ print $2 }' | tr '\n' ' ')
[ "$order" = "mount node master " ] || fail "stop order '$order', expected 'mount node master': $out"
grep -q "master closed before answering" "$logs/node.log" && fail "the node lost its master while stopping: $(tail -5 "$logs/node.log")"
grep -q "exiting (clean)" "$logs/node.log" || fail "the node did not exit cleanly: $(tail -5 "$logs/node.log")"
grep -q "rm $seg" "$E2E_TMP/run1.out" || fail "the way to drop the kept segment is not said: $out"
[ -e "$seg" ] || fail "--keep did not keep $seg"
[ -e "$mnt" ] && fail "the mount point the script made is still there"
[ -f "$logs/master.log" ] || fail "--logs DIR: the logs are gone"
ok "Ctrl-C to the terminal's group: mount, node, master stop in that order; --keep keeps $seg"

# ---- second run: --keep finds the objects; no logs left behind ------------------
run_qs "$E2E_TMP/run2.out" --keep
grep -q "4 objects came back" "$E2E_TMP/run2.out" || fail "the kept objects are not counted: $(cat "$E2E_TMP/run2.out")"
[ "$(kvq get k2)" = "value 2" ] || fail "k2 after the restart"
ctrl_c "$E2E_TMP/run2.out"
[ "$(ls -d /tmp/kvpool-quickstart.* 2>/dev/null | sort)" = "$tmp_before" ] ||
	fail "logs left in /tmp: $(ls -d /tmp/kvpool-quickstart.*)"
[ -e "$mnt" ] && fail "the mount point is still there after the second run"
ok "--keep again: 4 objects came back; no logs or mount point left in /tmp"

# ---- without --keep the segment goes ------------------------------------------
run_qs "$E2E_TMP/run3.out" --no-mount
ctrl_c "$E2E_TMP/run3.out"
[ -e "$seg" ] && fail "$seg stayed without --keep"
ok "without --keep the segment is removed"
