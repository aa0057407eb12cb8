#!/bin/bash
# kvpool-vm-agent — runs inside the test VM as root (kvpool-vm-agent.service)
# and executes what tests/vm/systemd_vm.sh sends over the virtio-serial port
# org.kvpool.vm.agent. One request a line, one answer a line:
#   host:  RUN ID TIMEOUT USER BASE64-SCRIPT
#   guest: DONE ID RC BASE64-OUTPUT   (stdout and stderr together)
# and, once per boot, HELLO BOOT-ID so that the host knows a (re)boot is done.
# USER is root or another account (run through runuser); TIMEOUT bounds the
# script (rc 124 when it ran out). Scripts run with stdin from /dev/null and
# output to a file, so a daemon they start cannot hold the answer back.
set -u
port=/dev/virtio-ports/org.kvpool.vm.agent
dir=/run/kvpool-vm-agent
for _ in $(seq 600); do [ -c "$port" ] && break; sleep 0.1; done
[ -c "$port" ] || { echo "agent: $port missing" >&2; exit 1; }
mkdir -p -m 0755 "$dir"
exec 3<>"$port"
printf 'HELLO %s\n' "$(cat /proc/sys/kernel/random/boot_id)" >&3
while read -r tag id tmo user b64 <&3; do
	[ "$tag" = RUN ] || continue
	script=$dir/$id.sh out=$dir/$id.out
	printf '%s' "$b64" | base64 -d >"$script" 2>/dev/null
	chmod 0644 "$script"
	if [ "$user" = root ]; then
		timeout -k 10 "$tmo" bash "$script" </dev/null >"$out" 2>&1
	else
		timeout -k 10 "$tmo" runuser -u "$user" -- bash "$script" </dev/null >"$out" 2>&1
	fi
	rc=$?
	printf 'DONE %s %s %s\n' "$id" "$rc" "$(base64 -w0 <"$out")" >&3
	rm -f "$script" "$out"
done
