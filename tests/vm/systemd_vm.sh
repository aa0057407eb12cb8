#!/bin/bash
# tests/vm/systemd_vm.sh — kvpool run as systemd units, for real: a
# throw-away Debian VM (tests/vm/vm.inc) with systemd as PID 1, nothing
# faked. `make test-vm` runs it (as root, after installing the vm group of
# tools/deps.sh); exit 0 pass, 1 fail, 77 skip (no root, qemu, debootstrap
# or mirror).
#
# 1. The README's "Run as a service" block (the first ```sh block after
#    that heading, the same as docs/service.md's, which is checked; or
#    KVPOOL_VM_DOC=FILE's) runs command by command in the guest, as an
#    ordinary user with sudo, after the install the README names above it:
#    `make` and `sudo make install` in a copy of this tree that was built
#    here. Every command must exit 0.
# 2. Then, with systemctl and the journal: readiness is READY=1 (a node
#    stays "activating" while the master is down), the install's user and
#    state directory, the segment's owner and mode, the sandbox really
#    applied (own mount namespace, read-only /usr, private /tmp, no
#    capabilities, seccomp), journald priorities, the live reload, kill -9
#    and Restart= with the objects still readable from the reopened
#    segment, kill -9 of the master restarted warm from its table file in
#    the state directory, SIGSTOP and the watchdog, the FUSE view from outside the
#    unit, a reboot that brings the pool and the view back; the block's
#    `systemctl stop` (and the reboot's shutdown) unmount the view, drain
#    the node and unmount it at the master before the master goes.
# 3. The Debian packages (tests/vm/build_debs.sh, built here): the source
#    install is removed, `sudo apt install ./*.deb` installs them (nothing
#    enabled or started), the block runs again against the packaged files;
#    an upgrade to the next build keeps the edited kvpool.ini and restarts
#    the running pool, whose objects are still there; `apt purge` removes
#    the units, the user, /etc/kvpool, /var/lib/kvpool and the segment, and
#    says so. On the host, before the VM: docs/client.md's program builds
#    with pkg-config against libkvpool1 + libkvpool-dev unpacked, and runs.
. "$(dirname "$0")/../e2e/lib.sh"
. "$(dirname "$0")/vm.inc"

T0=$SECONDS
e2e_init vm
vm_need
DOC=${KVPOOL_VM_DOC:-$VM_TOP/README.md}
[[ $DOC == /* ]] || DOC=$VM_TOP/$DOC
NODE=$VM_HOST			# [node] name defaults to the host name
SEG=/dev/shm/kvpool-$NODE	# [node] segment defaults to kvpool-NAME
MNT=/mnt/kvpool
FUSE_UNIT=kvpool-fuse@mnt-kvpool.service
UNITS="kvpool-master.service kvpool-node.service $FUSE_UNIT"
PASSED=0
VM_PRELUDE+="NODE=$NODE SEG=$SEG MNT=$MNT FUSE_UNIT=$FUSE_UNIT UNITS='$UNITS'
"
ok() { PASSED=$((PASSED + 1)); echo "ok - $*"; }

# block_cmds FILE: the commands of the first ```sh block after a heading
# "Run as a service", one a line (continuation lines joined), blank and
# comment-only lines dropped.
block_cmds() {
	awk '
		/^#+ +Run as a service *$/ { h = 1; next }
		h && !inb && /^```sh *$/ { inb = 1; next }
		inb && /^```/ { exit }
		inb {
			line = cont $0; cont = ""
			if (line ~ /\\$/) { sub(/\\$/, "", line); cont = line; next }
			if (line ~ /^[ \t]*(#.*)?$/) next
			print line
		}' "$1"
}

mapfile -t CMDS < <(block_cmds "$DOC")
# the README's block and docs/service.md's are one text
[ "$(block_cmds "$VM_TOP/README.md")" = "$(block_cmds "$VM_TOP/docs/service.md")" ] ||
	fail "the service blocks of README.md and docs/service.md differ"
[ ${#CMDS[@]} -ge 5 ] || fail "no \`\`\`sh block of at least 5 commands under \"Run as a service\" in $DOC"
printf '%s\n' "${CMDS[@]}" | grep -q 'systemctl enable --now' || fail "$DOC's block enables nothing"
# the section names both installs the test does before the block
for i in 'make && sudo make install' 'sudo apt install ./kvpool_'; do
	awk '/^#+ +Run as a service *$/ { h = 1; next } h && /^```sh/ { exit } h' "$DOC" | grep -qF "$i" ||
		fail "$DOC's service section does not say \`$i\`"
done
vm_log "running the ${#CMDS[@]} commands of the block in ${DOC#"$VM_TOP"/}"

vm_base
# The guest gets this tree built: make here, just before the copy, so that
# `make` there (which has no compiler) finds nothing to do.
make -C "$VM_TOP" -j2 all >"$E2E_TMP/make.log" 2>&1 || { tail -n 20 "$E2E_TMP/make.log"; fail "make all"; }
"$VM_DIR/build_debs.sh" "$E2E_TMP/debs" || fail "building the Debian packages"
vm_log "lintian on the build: $(grep -c "^[EW]:" "$E2E_TMP/debs/lintian.txt") errors and warnings, $(grep -c "^O:" "$E2E_TMP/debs/lintian.txt") overridden"
# A C user's path from the packages, here on the host: libkvpool1 and
# libkvpool-dev unpacked into a root, pkg-config through its sysroot,
# docs/client.md's program (examples/kvpool_hello.c) built against them and
# run against a pool of this build.
dev_pkg_check() {
	local R=$E2E_TMP/devroot pc flags out
	mkdir -p "$R"
	for d in "$E2E_TMP"/debs/1/libkvpool1_*.deb "$E2E_TMP"/debs/1/libkvpool-dev_*.deb; do
		dpkg-deb -x "$d" "$R" || fail "dpkg-deb -x $d"
	done
	pc=$(dirname "$(find "$R" -name kvpool.pc | head -1)")
	[ -f "$pc/kvpool.pc" ] || fail "libkvpool-dev has no kvpool.pc"
	flags=$(PKG_CONFIG_PATH="" PKG_CONFIG_LIBDIR="$pc" PKG_CONFIG_SYSROOT_DIR="$R" pkg-config --cflags --libs kvpool) ||
		fail "pkg-config --cflags --libs kvpool from libkvpool-dev"
	# shellcheck disable=SC2086
	cc -std=c99 -Wall -Werror -o "$E2E_TMP/hello-deb" "$VM_TOP/examples/kvpool_hello.c" $flags ||
		fail "examples/kvpool_hello.c does not build against libkvpool-dev ($flags)"
	pool_ini
	run_master
	pool_node devcheck "segment_size = 16M"
	run_node devcheck
	wait_nodes devcheck 20 || fail "the host pool for the -dev check did not come up"
	out=$(LD_LIBRARY_PATH="$(dirname "$pc")" "$E2E_TMP/hello-deb" "$MASTER_ADDR" 2>&1) ||
		fail "kvpool_hello built from libkvpool-dev: $out"
	[ "$out" = "hello-from-c = hello, pool" ] || fail "kvpool_hello built from libkvpool-dev printed '$out'"
	LD_LIBRARY_PATH="$(dirname "$pc")" ldd "$E2E_TMP/hello-deb" | grep -q "$R/.*libkvpool.so.1" ||
		fail "kvpool_hello did not load libkvpool1's library"
	stop_pid "$NODE_PID"; stop_master
	ok "libkvpool-dev: pkg-config $flags; docs/client.md's program builds and round-trips a value with libkvpool1's library"
}
dev_pkg_check
vm_root
mkdir -p "$VM_ROOT/home/$VM_USER/debs"
cp -r "$E2E_TMP/debs/1" "$E2E_TMP/debs/2" "$VM_ROOT/home/$VM_USER/debs/"
vm_copy_tree "/home/$VM_USER/kvpool"
vm_image
vm_boot
VM_TIMEOUT=600 vm_ok "systemd is PID 1 and the boot finished" '
	[ "$(cat /proc/1/comm)" = systemd ]
	systemctl is-system-running --wait || { systemctl --failed --no-legend; true; }
	systemd-analyze'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'
T_BOOTED=$SECONDS

# stop_order JOURNALCTL-ARGS...: in the kvpool units' journal so selected,
# the view stopped, then the node drained, unmounted at the master and
# stopped, then the master stopped.
VM_PRELUDE+='stop_order() {
	journalctl "$@" -o cat -u kvpool-master -u kvpool-node -u $FUSE_UNIT >/root/stop.log
	line() { grep -n -m1 -- "$1" /root/stop.log | cut -d: -f1; }
	local f d u n m
	f=$(line "Stopped $FUSE_UNIT") d=$(line "stopping: draining transfers, then unmounting")
	u=$(line "unmounted segment .* at master") n=$(line "Stopped kvpool-node.service")
	m=$(line "Stopped kvpool-master.service")
	echo "journal lines: view stopped $f, node draining $d, unmounted at the master $u, node stopped $n, master stopped $m"
	[ -n "$f" ] && [ -n "$d" ] && [ -n "$u" ] && [ -n "$n" ] && [ -n "$m" ] || { cat /root/stop.log; return 1; }
	[ $f -lt $d ] && [ $d -lt $u ] && [ $u -lt $n ] && [ $n -lt $m ] || { cat /root/stop.log; return 1; }
}
'

# run_block DIR: the block's commands, as the guest's ordinary user in DIR,
# then what their outputs must show, the documented stop's order, and a
# start that brings the pool back.
run_block() {
local dir=$1 c
declare -gA OUT=()
STOP_CURSOR=""
for c in "${CMDS[@]}"; do
	echo "  \$ $c"
	if [[ $c == *"systemctl stop"* ]]; then
		vm_sh 'journalctl -n 0 --show-cursor | sed -n "s/^-- cursor: //p"'
		STOP_CURSOR=$VM_OUT
	fi
	vm_sh -u "$VM_USER" -t 600 "cd $dir && set -o pipefail
$c"
	OUT[$c]=$VM_OUT
	printf '%s\n' "$VM_OUT" | tail -n 15 | sed 's/^/    /'
	[ "$VM_RC" = 0 ] || vm_fail "the documented command failed (exit $VM_RC): $c"
done
ok "the ${#CMDS[@]} commands of the block ran, each exit 0"
# outputs the block's own commands must show
for c in "${CMDS[@]}"; do
	case $c in
	"kvpool info"*)
		grep -q " $NODE .* up" <<<"${OUT[$c]}" || fail "kvpool info does not show node $NODE up"
		ok "kvpool info sees node $NODE" ;;
	*"cat $MNT/greeting"*)
		[ "$(head -n 1 <<<"${OUT[$c]}")" = "hello, pool" ] || fail "the view served: ${OUT[$c]}"
		ok "the FUSE view serves the object put through the CLI" ;;
	"journalctl -u kvpool-node -p warning"*)
		grep -q 'no \[cluster\] token_file' <<<"${OUT[$c]}" ||
			fail "journalctl -p warning shows no warning of the node"
		! grep -q 'notice' <<<"${OUT[$c]}" || fail "notice lines under -p warning"
		ok "journalctl -u kvpool-node -p warning shows the node's warnings" ;;
	esac
done
[ -n "$STOP_CURSOR" ] || fail "the block does not stop the units"
vm_ok "systemctl stop as documented: the view, then the node (drained, unmounted at the master), then the master" "
	cur='$STOP_CURSOR'"'
	for u in $UNITS; do
		echo "$u: $(prop $u ActiveState), result $(prop $u Result), exit status $(prop $u ExecMainStatus)"
		[ "$(prop $u ActiveState)/$(prop $u Result)" = inactive/success ]
	done
	not findmnt $MNT
	[ -e $SEG ]
	stop_order --after-cursor "$cur"'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'
vm_ok "systemctl start brings them back" '
	systemctl start $UNITS
	for u in $UNITS; do [ "$(prop $u ActiveState)" = active ]; done
	runuser -u kvpool -- cat $MNT/greeting | grep -qx "hello, pool"'
}

# --- 1. the source install the README names, then the documented commands
for c in make "sudo make install"; do
	echo "  \$ $c"
	vm_sh -u "$VM_USER" -t 600 "cd ~/kvpool && $c"
	printf '%s\n' "$VM_OUT" | tail -n 5 | sed 's/^/    /'
	[ "$VM_RC" = 0 ] || vm_fail "the documented install failed (exit $VM_RC): $c"
done
run_block "~/kvpool"
T_BLOCK=$SECONDS

# --- 2. the installed pieces
vm_ok "make install made the sysusers user and the tmpfiles directory" '
	IFS=: read -r _ _ uid _ _ home shell < <(getent passwd kvpool)
	echo "kvpool: uid $uid home $home shell $shell"
	[ "$uid" -lt 1000 ]
	[ "$home" = /var/lib/kvpool ]
	[ "$(stat -c "%U:%G %a" /var/lib/kvpool)" = "kvpool:kvpool 750" ]
	ls /usr/lib/sysusers.d/kvpool.conf /usr/local/lib/sysusers.d/kvpool.conf 2>/dev/null | grep -q .
	ls /usr/lib/tmpfiles.d/kvpool.conf /usr/local/lib/tmpfiles.d/kvpool.conf 2>/dev/null | grep -q .
	for b in kvpool kvpool-master kvpool-node; do
		echo "$b: $(command -v $b)"
		not sh -c "ldd $(command -v $b) | grep \"not found\""
	done'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'
vm_ok "the segment $SEG belongs to kvpool, mode 0600 (docs/node.md)" '
	ls -l $SEG
	[ "$(stat -c "%U:%G %a" $SEG)" = "kvpool:kvpool 600" ]'
vm_ok "Type=notify: both active after enable --now, their STATUS= reached systemd" '
	for u in kvpool-master kvpool-node; do
		[ "$(prop $u Type)/$(prop $u NotifyAccess)/$(prop $u ActiveState)" = notify/main/active ]
		echo "$u: $(prop $u StatusText)"
		[ -n "$(prop $u StatusText)" ]
	done'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'

# The installed units are the tree's, hardening and all, and it is in
# force: own mount namespace (ProtectSystem=, PrivateTmp=), no privileges.
vm_ok "the installed units keep every hardening line of systemd/*.service, no drop-ins" '
	dir=$(dirname "$(prop kvpool-node FragmentPath)")
	echo "units in $dir"
	for f in ~'"$VM_USER"'/kvpool/systemd/*.service; do
		u=$dir/${f##*/}
		grep -E "^(NoNewPrivileges|CapabilityBoundingSet|AmbientCapabilities|Protect|Private|Restrict|ReadWritePaths|StateDirectory|LockPersonality|MemoryDenyWriteExecute|SystemCall|Device|RemoveIPC|User|Group)" "$f" >/root/hardening
		while IFS= read -r l; do grep -qxF -- "$l" "$u" || { echo "$u lacks: $l"; exit 1; }; done </root/hardening
	done
	for u in $UNITS; do [ -z "$(prop $u DropInPaths)" ]; done'
vm_ok "the sandbox is real: own mount namespace, / read-only, private /tmp, no caps, seccomp" '
	for u in kvpool-master kvpool-node; do
		pid=$(prop $u MainPID)
		[ "$(readlink /proc/$pid/ns/mnt)" != "$(readlink /proc/1/ns/mnt)" ]
		nsenter -t $pid -m findmnt -n -o OPTIONS -T /usr | grep -q "^ro"
		ls -d /tmp/systemd-private-*-$u.service-* >/dev/null
		echo "$u: $(grep -E "^(NoNewPrivs|CapEff|CapBnd|Seccomp):" /proc/$pid/status | tr -s "\t\n" "  ")"
		grep -q "^NoNewPrivs:.*1$" /proc/$pid/status
		grep -q "^CapEff:.*0000000000000000$" /proc/$pid/status
		grep -q "^Seccomp:.*2$" /proc/$pid/status
	done
	# the node writes the host s /dev/shm; the view runs in the host s namespace
	nsenter -t $(prop kvpool-node MainPID) -m findmnt -n -o OPTIONS -T /dev/shm | grep -q "^rw"
	[ "$(readlink /proc/$(prop $FUSE_UNIT MainPID)/ns/mnt)" = "$(readlink /proc/1/ns/mnt)" ]
	systemd-analyze security --no-pager $UNITS 2>/dev/null | grep "Overall exposure" || true'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'

vm_ok "journald keeps the daemons' levels: a warning at 4, notices at 5, no <N> in the text" '
	journalctl -b -u kvpool-node -p warning..warning -o cat | grep -q "no \[cluster\] token_file, listening on 127.0.0.1"
	journalctl -b -u kvpool-node -p notice..notice -o cat | grep -q "mounted .* at master .* as segment"
	not sh -c "journalctl -b -u kvpool-node -p warning -o cat | grep -q \"mounted .* at master\""
	not sh -c "journalctl -b -u kvpool-node -u kvpool-master -o cat | grep -q \"^<[0-7]>\""
	journalctl -b -u kvpool-master -p warning..warning -o cat | grep -q "no cluster token: master.listen .* serves 127.0.0.1:.* only"'
reloaded() { journalctl -b -u kvpool-node -o cat | grep -qF "config: log.level = info (was notice)"; }
vm_ok "systemctl reload applied the live key log.level" "
	$(declare -f reloaded)"'
	waitfor 60 reloaded
	[ "$(prop kvpool-node ActiveState)" = active ]
	# info lines are logged now, at priority 6
	journalctl -b -u kvpool-node -p info..info -o cat | grep -q .'

vm_ok "kvpool-fuse@ mounted the view, visible outside the unit; ls and cat work" '
	[ "$(prop $FUSE_UNIT ActiveState)" = active ]
	findmnt -n -o SOURCE,FSTYPE,OPTIONS $MNT
	findmnt -n -o FSTYPE $MNT | grep -q "^fuse"
	kvpool put blob "$(command -v kvpool-node)"
	runuser -u kvpool -- ls -l $MNT
	runuser -u kvpool -- ls $MNT | grep -qx greeting
	runuser -u kvpool -- cmp $MNT/blob "$(command -v kvpool-node)"'
printf '%s\n' "$VM_OUT" | head -n 1 | sed 's/^/    /'

# --- 3. readiness is READY=1: no master, no ready node
vm_ok "a node whose master is down stays activating; ready once the master is" '
	starting() { [ "$(prop kvpool-node SubState)" = start ]; }
	active() { [ "$(prop kvpool-node ActiveState)" = active ]; }
	systemctl stop kvpool-master
	systemctl restart --no-block kvpool-node
	waitfor 60 starting
	sleep 5
	echo "while the master is down: $(prop kvpool-node ActiveState), $(prop kvpool-node StatusText)"
	[ "$(prop kvpool-node ActiveState)" = activating ]
	systemctl start kvpool-master
	# start returned, so the master sent READY=1: it accepts now
	bash -c "</dev/tcp/127.0.0.1/15001"
	waitfor 120 active
	kvpool info | grep -q " $NODE .* up"
	kvpool get greeting - | grep -qx "hello, pool"'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'

# --- 4. kill -9: Restart= brings the node back on the same segment
vm_ok "objects put for the restarts" '
	mkdir -p /root/objs
	for i in $(seq 1 12); do
		head -c $((i * 37 * 1024 + i)) /dev/urandom >/root/objs/k$i
		kvpool put keep-$i /root/objs/k$i
	done'
VM_PRELUDE+='restarted() { [ "$(prop kvpool-node MainPID)" != "$old" ] && [ "$(prop kvpool-node ActiveState)" = active ]; }
check_objs() { for i in $(seq 1 12); do kvpool get keep-$i - | cmp - /root/objs/k$i; done; }
'
vm_ok "kill -9 of the node: Restart= restarts it, the objects are read from the reopened segment" '
	old=$(prop kvpool-node MainPID) n0=$(prop kvpool-node NRestarts) ino=$(stat -c %i $SEG)
	kill -9 $old
	waitfor 120 restarted
	echo "pid $old -> $(prop kvpool-node MainPID), restarts $n0 -> $(prop kvpool-node NRestarts)"
	[ $(prop kvpool-node NRestarts) -eq $((n0 + 1)) ]
	[ "$(stat -c %i $SEG)" = "$ino" ]
	echo "status: $(prop kvpool-node StatusText)"
	prop kvpool-node StatusText | grep -q "^mounted at .* as segment [0-9]*, 1[0-9] extents"
	check_objs'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'

# --- 4b. kill -9 of the master: Restart= brings it back warm from its table
# file in the unit's state directory (StateDirectory=kvpool)
vm_ok "kill -9 of the master: restarted, the table loaded from /var/lib/kvpool/master.table" '
	date +"start %T.%N"
	old=$(prop kvpool-master MainPID) n0=$(prop kvpool-master NRestarts)
	stat -c "%U:%G %a %n" /var/lib/kvpool/master.table
	[ "$(stat -c %U /var/lib/kvpool/master.table)" = kvpool ]
	mrestarted() { [ "$(prop kvpool-master MainPID)" != "$old" ] && [ "$(prop kvpool-master ActiveState)" = active ]; }
	cur=$(cursor)
	kill -9 $old
	waitfor 120 mrestarted
	[ $(prop kvpool-master NRestarts) -eq $((n0 + 1)) ]
	waitfor 30 sh -c "journalctl -u kvpool-master --after-cursor \"$cur\" -o cat | grep -q \"loaded warm\""
	journalctl -u kvpool-master --after-cursor "$cur" -o cat | grep "table" | cut -c1-160
	waitfor 60 check_objs
	date +"objects read back %T.%N"'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'

# --- 5. SIGSTOP: no WATCHDOG=1 any more, systemd kills and restarts it
vm_ok "SIGSTOP of the node: the watchdog kills it, Restart= brings it back" '
	old=$(prop kvpool-node MainPID) n0=$(prop kvpool-node NRestarts) wd=$(prop kvpool-node WatchdogUSec)
	# counted over the boot: one run missed the line with --after-cursor
	# (the cursor taken just before the kill -STOP), though the journal had it
	timeouts() { journalctl -b -u kvpool-node -o cat | grep -c "Watchdog timeout" || true; }
	w0=$(timeouts)
	cur=$(cursor)
	t0=$(date +%s.%N)
	kill -STOP $old
	waitfor 240 restarted || true
	t1=$(date +%s.%N)
	journalctl -u kvpool-node --after-cursor "$cur" -o short-monotonic | cut -c1-160
	more_timeouts() { [ "$(timeouts)" -gt "$w0" ]; }
	waitfor 10 more_timeouts
	restarted
	[ $(prop kvpool-node NRestarts) -eq $((n0 + 1)) ]
	awk -v a=$t0 -v b=$t1 -v w="$wd" "BEGIN { printf \"stopped to running again: %.1f s (WatchdogSec=%s)\\n\", b - a, w }"
	check_objs'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'
T_CHECKS=$SECONDS

# --- 6. a reboot brings the enabled pool and view back by themselves; the
# shutdown stopped them in order
vm_sh 'journalctl -n 0 --show-cursor | sed -n "s/^-- cursor: //p"'
REBOOT_CURSOR=$VM_OUT
vm_reboot
VM_TIMEOUT=600 vm_ok "after a reboot: master, node and view are up by themselves" '
	systemctl is-system-running --wait || systemctl --failed --no-legend
	for u in $UNITS; do echo "$u: $(prop $u ActiveState)"; [ "$(prop $u ActiveState)" = active ]; done
	kvpool info | grep -q " $NODE .* up"
	echo rebooted | kvpool put after-reboot
	findmnt -n -o FSTYPE $MNT | grep -q "^fuse"
	[ "$(runuser -u kvpool -- cat $MNT/after-reboot)" = rebooted ]'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'
vm_ok "the reboot's shutdown stopped the view, the node (drained, unmounted), the master, in order" "
	stop_order --after-cursor '$REBOOT_CURSOR' -b -1"
printf '%s\n' "$VM_OUT" | sed 's/^/    /'

T_REBOOTED=$SECONDS

# --- 7. the Debian packages, on a host without the source install
VM_PRELUDE+='DEBS=/home/'"$VM_USER"'/debs
'
vm_ok "the source install and all it made are gone (make uninstall, user, state, segment)" '
	systemctl disable --now $UNITS
	cd ~'"$VM_USER"'/kvpool && runuser -u '"$VM_USER"' -- sudo make uninstall | tail -n 1
	rm -rf /etc/kvpool /var/lib/kvpool $SEG
	userdel kvpool
	systemctl daemon-reload
	not command -v kvpool
	[ -z "$(systemctl list-unit-files --no-legend "kvpool-master*" "kvpool-node*" "kvpool-fuse*")" ]'
vm_ok "sudo apt install ./*.deb (0.2.0-1): installed, the user and state made, nothing enabled or started" '
	cd $DEBS/1
	ls -l *.deb
	runuser -u '"$VM_USER"' -- sudo apt install -y ./*.deb >/root/apt.log 2>&1 || { tail -n 40 /root/apt.log; exit 1; }
	tail -n 25 /root/apt.log
	dpkg-query -W -f="\${Package} \${Version} \${db:Status-Abbrev}\n" kvpool libkvpool1 libkvpool-dev python3-kvpool
	[ "$(command -v kvpool)" = /usr/bin/kvpool ]
	[ "$(getent passwd kvpool | cut -d: -f6)" = /var/lib/kvpool ]
	[ "$(stat -c "%U:%G %a" /var/lib/kvpool)" = "kvpool:kvpool 750" ]
	dpkg-query -W -f="\${Conffiles}\n" kvpool | grep -q "^ /etc/kvpool/kvpool.ini "
	for u in kvpool-master kvpool-node; do
		echo "$u: $(systemctl is-enabled $u || true), $(prop $u ActiveState), $(prop $u FragmentPath)"
		[ "$(prop $u ActiveState)" = inactive ]
		[ "$(systemctl is-enabled $u || true)" = disabled ]
	done
	grep "^Version: " /usr/lib/*/pkgconfig/kvpool.pc
	ls -l /usr/lib/*/libkvpool.so*
	python3 -c "import kvpool; print(\"python3-kvpool:\", kvpool.__file__)"'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'
run_block "~/debs"
vm_ok "the block ran the packaged programs and units" '
	for u in $UNITS; do echo "$u: $(prop $u FragmentPath)"; prop $u FragmentPath | grep -Eq "^(/usr)?/lib/systemd/system/"; done
	[ "$(readlink /proc/$(prop kvpool-node MainPID)/exe)" = /usr/bin/kvpool-node ]'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'

vm_ok "upgrade to 0.2.0-2 with apt: the edited kvpool.ini kept, the pool restarted with its objects" '
	echo "# edited before the upgrade" >>/etc/kvpool/kvpool.ini
	sum=$(sha256sum </etc/kvpool/kvpool.ini)
	echo "kept across the upgrade" | kvpool put before-upgrade
	m0=$(prop kvpool-master MainPID) n0=$(prop kvpool-node MainPID)
	cd $DEBS/2
	runuser -u '"$VM_USER"' -- sudo apt install -y ./*.deb >/root/apt.log 2>&1 || { tail -n 40 /root/apt.log; exit 1; }
	tail -n 12 /root/apt.log
	dpkg-query -W -f="\${Package} \${Version}\n" kvpool libkvpool1 libkvpool-dev python3-kvpool
	[ "$(dpkg-query -W -f="\${Version}" kvpool)" = 0.2.0-2 ]
	[ "$(sha256sum </etc/kvpool/kvpool.ini)" = "$sum" ]
	grep -q "^level = info$" /etc/kvpool/kvpool.ini
	not ls /etc/kvpool/kvpool.ini.dpkg-* 2>/dev/null
	echo "master pid $m0 -> $(prop kvpool-master MainPID), node pid $n0 -> $(prop kvpool-node MainPID)"
	for u in kvpool-master kvpool-node; do [ "$(prop $u ActiveState)" = active ]; done
	[ "$(prop kvpool-master MainPID)" != "$m0" ] && [ "$(prop kvpool-node MainPID)" != "$n0" ]
	[ "$(kvpool get before-upgrade -)" = "kept across the upgrade" ]
	kvpool get greeting - | grep -qx "hello, pool"
	echo "view (not restarted: an instance of a template): $(prop $FUSE_UNIT ActiveState)"'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'

vm_ok "apt purge: units, user, /etc/kvpool, /var/lib/kvpool and the segment gone, and said so" '
	runuser -u '"$VM_USER"' -- sudo apt purge -y kvpool libkvpool1 libkvpool-dev python3-kvpool >/root/purge.log 2>&1 ||
		{ tail -n 40 /root/purge.log; exit 1; }
	grep "^kvpool:" /root/purge.log
	grep -q "^kvpool: removing segment $SEG " /root/purge.log
	not dpkg -s kvpool >/dev/null 2>&1
	not ls /lib/systemd/system/kvpool* /usr/lib/systemd/system/kvpool* 2>/dev/null
	[ -z "$(systemctl list-unit-files --no-legend "kvpool-master*" "kvpool-node*" "kvpool-fuse*")" ]
	not ls /etc/systemd/system/*.wants/kvpool-[mnf]* 2>/dev/null
	for u in $UNITS; do [ "$(prop $u ActiveState)" = inactive ]; done
	not findmnt $MNT
	not getent passwd kvpool
	not getent group kvpool
	not ls -d /etc/kvpool /var/lib/kvpool $SEG 2>/dev/null
	not ls /usr/lib/*/libkvpool* /usr/include/kvpool.h /usr/lib/python3/dist-packages/kvpool 2>/dev/null
	not pgrep -f "^/usr/bin/kvpool"'
printf '%s\n' "$VM_OUT" | sed 's/^/    /'
T_DEBS=$SECONDS

vm_poweroff
T_END=$SECONDS
vm_log "times: boot ${VM_BOOT_S} s ($VM_ACCEL${VM_KVM_NOTE:+; $VM_KVM_NOTE}), block $((T_BLOCK - T_BOOTED)) s," \
	"checks $((T_CHECKS - T_BLOCK)) s, reboot ${VM_REBOOT_S} s, packages $((T_DEBS - T_REBOOTED)) s, total $((T_END - T0)) s"
echo "systemd_vm: $PASSED passed, 0 failed"
