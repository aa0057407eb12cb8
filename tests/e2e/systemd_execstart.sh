#!/bin/bash
# systemd_execstart.sh — the installed units' command lines, run as written,
# start working daemons. After an install into a DESTDIR (tools/install.sh,
# what `make install` runs; systemd_units.sh covers make itself), the
# ExecStart=, ExecStartPre=, ExecReload= and ExecStopPost= lines are read
# from the installed unit files, their specifiers expanded as systemd does
# (%i, %I, %f, %%, $MAINPID), and /etc and /usr paths pointed into DESTDIR.
# Each runs
# under an emulation of the unit's execution settings:
#   User=/Group=        a private numeric uid/gid (setpriv; no kvpool user
#                       is needed on this machine)
#   NoNewPrivileges=, CapabilityBoundingSet=, AmbientCapabilities=  setpriv
#   LimitMEMLOCK=, LimitNOFILE=                                      prlimit
#   ProtectSystem=strict  a private mount namespace where every mount but
#                       /dev, /proc and /sys is read-only
#   "+" prefix          root, no sandbox
# Ports and shm names stay private through KVPOOL_* variables (or, for
# kvpool-node@a, through the instance file node-a.ini the unit layers on
# kvpool.ini).
#  1. kvpool-master.service, kvpool-node.service and kvpool-node@a.service
#     start; both nodes mount; a put with 2 replicas and a get through
#     build/kvpool round-trip the bytes, one replica on each node;
#  2. ExecReload= as written makes each daemon re-read its configuration
#     (and, nothing having changed, report no change); kvpool-node.service
#     with [fuse] mountpoint set fails plainly instead of running viewless;
#  3. kvpool-fuse@<dir>.service (Type=forking: ExecStart returns once
#     mounted) serves the value as a file to another user (allow_other),
#     unmounts on SIGTERM; ExecStopPost= is harmless afterwards. Needs
#     /dev/fuse (a private 0666 node is bind-mounted where /dev/fuse is
#     root-only, as in containers); skipped without it;
#  4. SIGTERM (KillSignal=): every daemon exits 0;
#  5. every syscall master and node make (strace, same work again) is in
#     their unit's SystemCallFilter= (expanded by systemd-analyze).
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init execstart
KVP=$B/kvpool
need "$KVP" "$B/kvpool-master" "$B/kvpool-node" python3 setpriv prlimit unshare make curl
[ "$(id -u)" = 0 ] || skip "needs root (setpriv to another user, mount namespaces)"

# A uid/gid that no account uses stands in for User=kvpool.
uid=$((61000 + $$ % 3000))
while getent passwd "$uid" >/dev/null || getent group "$uid" >/dev/null; do uid=$((uid + 1)); done
chmod 755 "$E2E_TMP"	# the daemons run as another user and read DESTDIR
D=$E2E_TMP/dest
UD=$D/usr/lib/systemd/system
tag=kvpt-exec-$$
host_ns=$(readlink /proc/self/ns/mnt)
on_cleanup "rm -f /dev/shm/$tag-*"
# what the units forked (the FUSE view), recognised by this run's uid
kill_uid() {
	local p
	for p in /proc/[0-9]*; do
		[ "$(stat -c %u "$p" 2>/dev/null)" = "$uid" ] && kill -KILL "${p#/proc/}" 2>/dev/null
	done
	return 0
}
on_cleanup kill_uid

# What `make install` runs for the units and binaries (systemd_units.sh
# tests `make install` itself); the built tree as it is, nothing rebuilt.
version=$(sed -n 's/^VERSION := //p' "$E2E_ROOT/Makefile")
"$E2E_ROOT/tools/install.sh" "$D" /usr "$B" "$version" >"$E2E_TMP/install.log" 2>&1 ||
	{ cat "$E2E_TMP/install.log"; fail "tools/install.sh"; }

# ---- reading units ----
# unit_lines FILE KEY: every value of KEY= in [Service]/[Unit], in order
unit_lines() { sed -n "s/^$2=//p" "$1"; }
unit_one() { unit_lines "$1" "$2" | tail -n 1; }
# expand LINE INSTANCE MAINPID: systemd's specifiers and $MAINPID; fails on
# anything this emulation does not know (so it never runs a wrong line).
expand() {
	local line=$1 inst=$2 mainpid=$3 out="" c fpath
	fpath=$(systemd-escape --unescape --path "$inst" 2>/dev/null) || fpath=/$inst
	while [ -n "$line" ]; do
		c=${line:0:1}
		if [ "$c" = "%" ]; then
			case ${line:1:1} in
			i) out+=$inst ;;
			I) out+=$(systemd-escape --unescape "$inst") ;;
			f) out+=$fpath ;;
			%) out+=% ;;
			*) echo "unsupported specifier %${line:1:1}" >&2; return 1 ;;
			esac
			line=${line:2}
		else
			out+=$c
			line=${line:1}
		fi
	done
	out=${out//\$\{MAINPID\}/$mainpid}
	out=${out//\$MAINPID/$mainpid}
	case $out in *\"*|*\'*|*\\*|*\$*) echo "quoting/variables not emulated: $out" >&2; return 1 ;; esac
	printf '%s\n' "$out"
}
# argv_of LINE: the words of an expanded command line, each /etc or /usr
# path pointed into DESTDIR; the Exec prefixes (-@:+!) in $xprefix.
argv_of() {
	local w first=1
	argv=()
	xprefix=""
	for w in $1; do
		if [ $first = 1 ]; then
			while [[ $w == [-@:+!]* ]]; do xprefix+=${w:0:1}; w=${w:1}; done
			first=0
		fi
		case $w in /etc/*|/usr/*) w=$D$w ;; esac
		argv+=("$w")
	done
}
# sandbox UNIT-FILE PLUS: the command prefix emulating the unit's settings
# (root and no sandbox when PLUS is "+").
sandbox() {
	local u=$1 plus=$2 v caps="" bset
	sb=()
	[ "$plus" = "+" ] && return 0
	v=$(unit_one "$u" ProtectSystem)
	if [ "$v" = strict ] || [ "$v" = yes ] || [ "$v" = full ] || [ "$v" = true ]; then
		sb+=(unshare -m --propagation private -- bash "$E2E_TMP/ro.sh" "$host_ns")
	elif [ -n "$v" ] && [ "$v" != no ]; then
		echo "ProtectSystem=$v not emulated" >&2
		return 1
	fi
	sb+=(prlimit)
	v=$(unit_one "$u" LimitMEMLOCK)
	[ -n "$v" ] && { [ "$v" = infinity ] && v=unlimited; limit memlock "$v"; }
	v=$(unit_one "$u" LimitNOFILE)
	[ -n "$v" ] && limit nofile "$v"
	sb+=(--)
	[ -n "$(unit_one "$u" User)" ] || return 0
	sb+=(setpriv "--reuid=$uid" "--regid=$uid" --clear-groups)
	[ "$(unit_one "$u" NoNewPrivileges)" = yes ] && sb+=(--no-new-privs)
	for v in $(unit_lines "$u" AmbientCapabilities); do
		v=$(echo "${v#CAP_}" | tr 'A-Z' 'a-z')
		caps+="${caps:+,}+$v"
	done
	[ -n "$caps" ] && sb+=("--inh-caps=$caps" "--ambient-caps=$caps")
	if grep -q '^CapabilityBoundingSet=' "$u"; then
		bset=-all
		for v in $(unit_lines "$u" CapabilityBoundingSet); do
			bset+=",+$(echo "${v#CAP_}" | tr 'A-Z' 'a-z')"
		done
		sb+=("--bounding-set=$bset")
	fi
	sb+=(--)
}
# limit RESOURCE VALUE: adds the prlimit option where this machine lets
# root raise the limit that far (systemd, as PID 1, could); containers often
# cap hard limits, and then the inherited limit stays (noted in notes.log).
limit() {
	if prlimit "--$1=$2:$2" true 2>/dev/null; then
		sb+=("--$1=$2:$2")
	else
		echo "$1=$2 not settable here; keeping $(prlimit --noheadings -o HARD "--$1")" >>"$E2E_TMP/notes.log"
	fi
}
# ProtectSystem=strict, roughly: a private mount namespace (checked: never
# the host's) in which every mount except the API file systems is read-only.
cat >"$E2E_TMP/ro.sh" <<'EOF'
host_ns=$1
shift
[ "$(readlink /proc/self/ns/mnt)" != "$host_ns" ] || { echo "ro.sh: not in a private mount namespace" >&2; exit 99; }
for m in $(awk '{ print $5 }' /proc/self/mountinfo | sort -u); do
	case $m in /dev|/dev/*|/proc|/proc/*|/sys|/sys/*|*\\*) continue ;; esac
	mount -o remount,bind,ro "$m" 2>/dev/null
done
exec "$@"
EOF
# start NAME UNIT INSTANCE ENV...: runs the unit's ExecStart in the
# background as systemd would for Type=notify/simple; pid in $started
start() {
	local name=$1 unit=$2 inst=$3 line
	shift 3
	line=$(expand "$(unit_one "$UD/$unit" ExecStart)" "$inst" "") || fail "$unit: ExecStart"
	argv_of "$line"
	sandbox "$UD/$unit" "$xprefix" || fail "$unit: settings not emulated"
	echo "$name: ${sb[*]} ${argv[*]}" >>"$E2E_TMP/commands.log"
	spawn "$name" env "$@" "${sb[@]}" "${argv[@]}"
	started=$SPAWN_PID
}
# run_line UNIT KEY INSTANCE MAINPID ENV...: runs each KEY= line to the end
run_lines() {
	local unit=$1 key=$2 inst=$3 mainpid=$4 l line rc
	shift 4
	while IFS= read -r l; do
		[ -n "$l" ] || continue
		line=$(expand "$l" "$inst" "$mainpid") || fail "$unit: $key"
		argv_of "$line"
		sandbox "$UD/$unit" "${xprefix//[^+]/}" || fail "$unit: settings not emulated"
		echo "$unit $key: ${sb[*]} ${argv[*]}" >>"$E2E_TMP/commands.log"
		env "$@" "${sb[@]}" "${argv[@]}" >>"$E2E_TMP/$key.log" 2>&1
		rc=$?
		if [ $rc != 0 ] && [[ $xprefix != *-* ]]; then
			fail "$unit: $key=$l exited $rc"
		fi
	done < <(unit_lines "$UD/$unit" "$key")
}
segments() { curl -s "http://127.0.0.1:$mhttp/metrics" | awk '$1 == "kvpool_master_segments" { print $2 }'; }
has_segments() { [ "$(segments)" = "$1" ]; }

read -r mport mhttp dport nhttp aport ahttp < <(free_ports 6)
common=(KVPOOL_CLUSTER_MASTER="127.0.0.1:$mport")

# ---- 1. master, node, node@a ----
for u in kvpool-master.service kvpool-node.service kvpool-node@.service kvpool-fuse@.service; do
	[ -f "$UD/$u" ] || fail "$u not installed"
done
start master kvpool-master.service "" "${common[@]}" \
	KVPOOL_MASTER_LISTEN="127.0.0.1:$mport" KVPOOL_MASTER_HTTP_LISTEN="127.0.0.1:$mhttp"
mpid=$started
waitfor 20 has_segments 0 || fail "kvpool-master.service's ExecStart did not come up"
[ "$(stat -c %u "/proc/$mpid")" = "$uid" ] || fail "the master does not run as User= (uid $uid)"
grep -q "^NoNewPrivs:[[:space:]]*1" "/proc/$mpid/status" || fail "the master runs without NoNewPrivileges"
ok "kvpool-master.service: ExecStart serves (uid $uid, no new privileges)"

start node kvpool-node.service "" "${common[@]}" \
	KVPOOL_NODE_NAME="$tag-n" KVPOOL_NODE_SEGMENT="$tag-n" KVPOOL_NODE_SEGMENT_SIZE=16M \
	KVPOOL_NODE_LISTEN="127.0.0.1:$dport" KVPOOL_NODE_HTTP_LISTEN="127.0.0.1:$nhttp"
npid=$started

# kvpool-node@a: its own settings in node-a.ini, on top of kvpool.ini
assert=$(expand "$(unit_one "$UD/kvpool-node@.service" AssertPathExists)" a "") || fail "AssertPathExists"
[ "$assert" = /etc/kvpool/node-a.ini ] || fail "kvpool-node@a asserts '$assert'"
cat >"$D/etc/kvpool/node-a.ini" <<EOF
[node]
name = $tag-a
segment = $tag-a
segment_size = 16M
listen = 127.0.0.1:$aport
http_listen = 127.0.0.1:$ahttp
EOF
start node-a kvpool-node@.service a "${common[@]}"
apid=$started
waitfor 30 has_segments 2 || fail "the nodes did not mount (master counts $(segments) segments)"
[ -f "/dev/shm/$tag-n" ] && [ -f "/dev/shm/$tag-a" ] || fail "segment files missing"
[ "$(stat -c %u "/dev/shm/$tag-a")" = "$uid" ] || fail "node@a's segment is not owned by User="
if prlimit --memlock=unlimited:unlimited true 2>/dev/null; then
	grep -q "^Max locked memory[[:space:]]*unlimited" "/proc/$npid/limits" || fail "node: LimitMEMLOCK not applied"
fi
ok "kvpool-node.service and kvpool-node@a.service: both mounted"

head -c 300000 /dev/urandom >"$E2E_TMP/value"
K=(env "${common[@]}" "$KVP")
"${K[@]}" put "$tag/key" "$E2E_TMP/value" --replicas 2 >"$E2E_TMP/put.log" 2>&1 || fail "kvpool put: $(cat "$E2E_TMP/put.log")"
"${K[@]}" get "$tag/key" "$E2E_TMP/back" 2>"$E2E_TMP/get.log" || fail "kvpool get: $(cat "$E2E_TMP/get.log")"
cmp -s "$E2E_TMP/value" "$E2E_TMP/back" || fail "get returned other bytes"
"${K[@]}" stat "$tag/key" >"$E2E_TMP/stat.log" 2>&1 || fail "kvpool stat"
grep -q "$tag-n" "$E2E_TMP/stat.log" && grep -q "$tag-a" "$E2E_TMP/stat.log" ||
	fail "the two replicas are not on the two nodes: $(cat "$E2E_TMP/stat.log")"
ok "put (2 replicas) / get through build/kvpool: bytes equal, one replica per node"

# ---- 2. ExecReload ----
run_lines kvpool-master.service ExecReload "" "$mpid"
run_lines kvpool-node.service ExecReload "" "$npid"
run_lines kvpool-node@.service ExecReload a "$apid"
waitfor 20 grep -qi "reload" "$E2E_TMP/master.log" || fail "master: ExecReload had no effect"
waitfor 20 grep -qi "reload" "$E2E_TMP/node.log" || fail "node: ExecReload had no effect"
waitfor 20 grep -qi "reload" "$E2E_TMP/node-a.log" || fail "node@a: ExecReload had no effect"
for p in "$mpid" "$npid" "$apid"; do kill -0 "$p" 2>/dev/null || fail "a daemon died on reload"; done
# nothing changed: a key reported as changed would mean the reload layers
# files, environment and options differently from the start
for l in master node node-a; do
	grep -q "needs a restart$\|but needs a restart" "$E2E_TMP/$l.log" &&
		fail "$l: an unchanged configuration reloads with changes: $(grep "changed" "$E2E_TMP/$l.log")"
done
ok "ExecReload= re-reads the configuration of each daemon (nothing reported changed)"

# kvpool-node.service with [fuse] mountpoint set: the sandboxed node cannot
# mount (and a mount in its namespace would be invisible): it must fail
# plainly rather than run without the view (docs/service.md).
mkdir -p "$E2E_TMP/nodeview"
start node-fuse kvpool-node.service "" "${common[@]}" \
	KVPOOL_NODE_NAME="$tag-f" KVPOOL_NODE_SEGMENT="$tag-f" KVPOOL_NODE_SEGMENT_SIZE=16M \
	KVPOOL_NODE_LISTEN=127.0.0.1:0 KVPOOL_NODE_HTTP_LISTEN=127.0.0.1:0 \
	KVPOOL_FUSE_MOUNTPOINT="$E2E_TMP/nodeview"
fnpid=$started
waitfor 30 gone "$fnpid" || fail "kvpool-node.service with fuse.mountpoint keeps running"
wait "$fnpid"
rc=$?
forget "$fnpid"
[ $rc != 0 ] || fail "kvpool-node.service with fuse.mountpoint exited 0"
grep -qi "fuse" "$E2E_TMP/node-fuse.log" || fail "the node's failure does not name the FUSE view"
mountpoint -q "$E2E_TMP/nodeview" && fail "a FUSE view got mounted by the sandboxed node"
ok "kvpool-node.service with [fuse] mountpoint fails plainly (exit $rc): $(grep -i fuse "$E2E_TMP/node-fuse.log" | tail -n 1 | sed 's/.*: FUSE/FUSE/')"

# ---- 3. the FUSE view unit ----
fuse_skip=""
if [ ! -c /dev/fuse ]; then
	fuse_skip="no /dev/fuse"
elif ! command -v fusermount3 >/dev/null || ! command -v systemd-escape >/dev/null; then
	fuse_skip="fusermount3 or systemd-escape missing"
fi
if [ -z "$fuse_skip" ]; then
	mnt=$E2E_TMP/view
	inst=$(systemd-escape --path "$mnt")
	# Runs in a mount namespace of its own so that a private 0666 /dev/fuse
	# can stand in where the real one is root-only (containers); the unit
	# itself has no namespace, and the mount shows in this one.
	cat >"$E2E_TMP/fuse.sh" <<EOF
set -u
[ "\$(readlink /proc/self/ns/mnt)" != "$host_ns" ] || exit 99
if [ "\$(stat -c %a /dev/fuse)" != 666 ]; then
	mknod "$E2E_TMP/fusedev" c \$((16#\$(stat -c %t /dev/fuse))) \$((16#\$(stat -c %T /dev/fuse))) 2>/dev/null &&
		chmod 666 "$E2E_TMP/fusedev" && mount --bind "$E2E_TMP/fusedev" /dev/fuse || { echo "SKIP cannot provide a user-accessible /dev/fuse"; exit 77; }
fi
. "$E2E_TMP/fusefns.sh"
run_lines kvpool-fuse@.service ExecStartPre "$inst" ""
run_lines kvpool-fuse@.service ExecStart "$inst" "" ${common[*]} KVPOOL_FUSE_ALLOW_OTHER=true
mountpoint -q "$mnt" || fail "kvpool-fuse@: ExecStart returned but $mnt is not mounted"
cmp -s "$E2E_TMP/value" "$mnt/$tag/key" || fail "kvpool-fuse@: $mnt/$tag/key differs from the value"
fpid=""
for p in /proc/[0-9]*; do
	[ "\$(stat -c %u "\$p" 2>/dev/null)" = "$uid" ] || continue
	[ "\$(readlink "\$p/exe")" = "$D/usr/bin/kvpool" ] && fpid=\${p#/proc/}
done
[ -n "\$fpid" ] || fail "kvpool-fuse@: no daemon left running after ExecStart"
grep -q "^CapAmb:[[:space:]]*0*200000\$" "/proc/\$fpid/status" || fail "kvpool-fuse@: ambient caps \$(grep CapAmb /proc/\$fpid/status)"
kill -TERM "\$fpid"
for _ in \$(seq 100); do kill -0 "\$fpid" 2>/dev/null || break; sleep 0.05; done
kill -0 "\$fpid" 2>/dev/null && fail "kvpool-fuse@: still running after SIGTERM"
mountpoint -q "$mnt" && fail "kvpool-fuse@: still mounted after SIGTERM"
run_lines kvpool-fuse@.service ExecStopPost "$inst" ""
echo "FUSEOK"
EOF
	# the helpers the namespace script needs
	{
		declare -f fail ok expand argv_of sandbox limit unit_lines unit_one run_lines
		declare -p D UD uid E2E_TMP host_ns
	} >"$E2E_TMP/fusefns.sh"
	unshare -m --propagation private -- bash "$E2E_TMP/fuse.sh" >"$E2E_TMP/fuse.log" 2>&1
	frc=$?
	if [ $frc = 77 ]; then
		fuse_skip=$(grep SKIP "$E2E_TMP/fuse.log")
	elif [ $frc != 0 ] || ! grep -q FUSEOK "$E2E_TMP/fuse.log"; then
		cat "$E2E_TMP/fuse.log"
		fail "kvpool-fuse@.service (exit $frc)"
	else
		ok "kvpool-fuse@$inst.service: mounted at $mnt as uid $uid with CAP_SYS_ADMIN, the value reads back as a file, SIGTERM unmounts"
	fi
fi
[ -n "$fuse_skip" ] && echo "ok - kvpool-fuse@ part skipped: $fuse_skip"

# ---- 4. stop ----
for p in "$apid" "$npid" "$mpid"; do
	stop_pid "$p"
	rc=$?
	[ $rc = 0 ] || fail "a daemon (pid $p) exited $rc after SIGTERM"
done
ok "SIGTERM: every daemon exits 0"

# ---- 5. SystemCallFilter= ----
# The units allow only @system-service; a syscall outside it would fail
# with EPERM under systemd. Run master and node again under strace through
# the same work (start, mount, put, get, reload, stop) and compare every
# syscall they made with the unit's list, expanded by systemd-analyze.
allowed() {	# allowed UNIT-FILE: one syscall name per line
	local g
	# shellcheck disable=SC2046
	for g in $(unit_lines "$1" SystemCallFilter); do
		case $g in ~*) echo "deny lists are not emulated: $g" >&2; return 1 ;; esac
		expand_group "$g"
	done | sort -u
}
expand_group() {
	case $1 in
	@*) systemd-analyze syscall-filter "$1" | awk 'NR > 1 && $1 !~ /^#/ && NF { print $1 }' |
		while read -r x; do expand_group "$x"; done ;;
	*) echo "$1" ;;
	esac
}
child_of() { cat "/proc/$1/task/$1/children" 2>/dev/null | awk '{ print $1 }'; }
if command -v strace >/dev/null && strace -f -qq -o /dev/null true 2>/dev/null; then
	# LeakSanitizer cannot run under ptrace (sanitizer builds)
	export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
	read -r mport mhttp dport nhttp < <(free_ports 4)
	common=(KVPOOL_CLUSTER_MASTER="127.0.0.1:$mport")
	K=(env "${common[@]}" "$KVP")
	# traced NAME SEGMENTS ENV...: kvpool-NAME.service's ExecStart under
	# strace (its syscalls in strace.NAME) until the master counts SEGMENTS
	# segments; the daemon's pid in $traced, strace's in $tracer.
	traced() {
		local name=$1 want=$2 line
		shift 2
		line=$(expand "$(unit_one "$UD/kvpool-$name.service" ExecStart)" "" "") && argv_of "$line"
		spawn "strace-$name" env "${common[@]}" "$@" \
			strace -f -qq -o "$E2E_TMP/strace.$name" -- "${argv[@]}"
		tracer=$SPAWN_PID
		waitfor 30 has_segments "$want" || fail "strace: $name did not come up"
		traced=$(child_of "$tracer")
		[ -n "$traced" ] || fail "strace: no traced $name"
		E2E_PIDS+=("$traced")	# strace ignores SIGTERM: the cleanup stops the daemon itself
	}
	traced master 0 KVPOOL_MASTER_LISTEN="127.0.0.1:$mport" KVPOOL_MASTER_HTTP_LISTEN="127.0.0.1:$mhttp"
	smpid=$tracer m=$traced
	traced node 1 KVPOOL_NODE_NAME="$tag-s" KVPOOL_NODE_SEGMENT="$tag-s" KVPOOL_NODE_SEGMENT_SIZE=16M \
		KVPOOL_NODE_LISTEN="127.0.0.1:$dport" KVPOOL_NODE_HTTP_LISTEN="127.0.0.1:$nhttp"
	snpid=$tracer n=$traced
	"${K[@]}" put "$tag/s" "$E2E_TMP/value" >/dev/null 2>&1 || fail "strace: put"
	"${K[@]}" get "$tag/s" "$E2E_TMP/back2" 2>/dev/null && cmp -s "$E2E_TMP/value" "$E2E_TMP/back2" || fail "strace: get"
	kill -HUP "$m" "$n"
	waitfor 20 grep -qi reload "$E2E_TMP/strace-master.log" || fail "strace: master reload"
	waitfor 20 grep -qi reload "$E2E_TMP/strace-node.log" || fail "strace: node reload"
	kill -TERM "$n"
	wait "$snpid" || fail "strace: node exit"
	kill -TERM "$m"
	wait "$smpid" || fail "strace: master exit"
	for p in "$smpid" "$m" "$snpid" "$n"; do forget "$p"; done
	for d in master node; do
		allowed "$UD/kvpool-$d.service" >"$E2E_TMP/allowed.$d" || fail "kvpool-$d.service: SystemCallFilter="
		[ -s "$E2E_TMP/allowed.$d" ] || fail "kvpool-$d.service: no SystemCallFilter="
		sed -nE 's/^[0-9]+ +(<\.\.\. )?([a-z0-9_]+)[( ].*/\2/p' "$E2E_TMP/strace.$d" | sort -u >"$E2E_TMP/used.$d"
		[ "$(wc -l <"$E2E_TMP/used.$d")" -gt 20 ] || fail "strace.$d: too few syscalls parsed"
		outside=$(comm -23 "$E2E_TMP/used.$d" "$E2E_TMP/allowed.$d" | tr '\n' ' ')
		[ -z "$outside" ] || fail "kvpool-$d made syscalls its unit's SystemCallFilter= forbids: $outside"
	done
	ok "SystemCallFilter=: master ($(wc -l <"$E2E_TMP/used.master") syscalls) and node ($(wc -l <"$E2E_TMP/used.node")) stay inside @system-service"
else
	echo "ok - SystemCallFilter part skipped: no usable strace"
fi
if [ -f "$E2E_TMP/notes.log" ]; then sort -u "$E2E_TMP/notes.log" | sed 's/^/note: /'; fi
echo "PASS"
