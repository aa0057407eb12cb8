#!/bin/bash
# fuse_auth.sh — a pool that refuses the mount's requests half-way answers
# EACCES, also to a rename. The node has a cluster token, the master and the
# mount have none (the master then checks no token): the mount's master
# calls succeed and its data transfers to the node fail with KVP_EAUTH
# (TCP: the clients say they are on another host, so neither the library
# nor the view reads the segment's mapping). So `mv` of a stored file passes lookup and the stat of
# the source and fails at the read of the value: it must say "Permission
# denied" (EACCES), not "Device or resource busy" — with the KVP_E* codes
# -1..-23 of before 0.2.0, KVP_EAUTH (-11) was -EAGAIN to the rename's
# retry loop (docs/client.md, "Errors"). Neither name changes. A second
# mount with the token renames the same file.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/fuse_lib.inc"

head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$E2E_TMP/token"
echo >>"$E2E_TMP/token"
chmod 600 "$E2E_TMP/token"
printf '[cluster]\ntoken_file = %s\n' "$E2E_TMP/token" >"$E2E_TMP/tok.ini"

# the clients' layer: another host, so data goes over TCP to the node
printf '[client]\nprotocol = tcp\nhost_id = elsewhere-%s\n' $$ >"$E2E_TMP/client.ini"
start_pool "[cluster]" "token_file = $E2E_TMP/token"
kv() { "$KVP" -c "$POOL_INI" -c "$E2E_TMP/client.ini" -c "$E2E_TMP/tok.ini" "$@"; }
# mount_at DIR [INI...]: a foreground mount with these layers on the pool's
mount_at() {
	local d=$1 a=()
	shift
	for i in "$@"; do a+=(-c "$i"); done
	mkdir -p "$d"
	mounted_at "$d"
	spawn "mount-$(basename "$d")" "$KVP" -c "$POOL_INI" -c "$E2E_TMP/client.ini" "${a[@]}" mount -f "$d"
	wait_mounted "$d" "$SPAWN_PID"
}

head -c 100000 /dev/urandom >"$E2E_TMP/v"
kv put k1 "$E2E_TMP/v" || fail "put with the token"
kv get k1 "$E2E_TMP/got" && cmp -s "$E2E_TMP/v" "$E2E_TMP/got" || fail "get with the token"
expect 1 "$KVP" -c "$POOL_INI" -c "$E2E_TMP/client.ini" get k1 "$E2E_TMP/got"
grep -q "KVP_EAUTH" "$E2E_TMP/err" || fail "get without the token: $(cat "$E2E_TMP/err")"
ok "the node serves clients with the token only"

mnt=$E2E_TMP/mnt
mount_at "$mnt"
[ "$(stat -c %s "$mnt/k1")" = 100000 ] || fail "stat through the mount without the token (master calls)"
expect_errno "Permission denied" cat "$mnt/k1"
ok "a read the node refuses: EACCES"
expect_errno "Permission denied" mv "$mnt/k1" "$mnt/k2"
ok "a rename whose read the node refuses: EACCES, not EBUSY"
kv get k1 "$E2E_TMP/got" && cmp -s "$E2E_TMP/v" "$E2E_TMP/got" || fail "k1 changed after the refused rename"
kv stat k2 >/dev/null 2>&1 && fail "k2 exists after the refused rename"
ok "the refused rename changed nothing"

mnt2=$E2E_TMP/mnt2
mount_at "$mnt2" "$E2E_TMP/tok.ini"
mv "$mnt2/k1" "$mnt2/k2" || fail "rename through the mount with the token"
kv get k2 "$E2E_TMP/got" && cmp -s "$E2E_TMP/v" "$E2E_TMP/got" || fail "k2 after the rename"
kv stat k1 >/dev/null 2>&1 && fail "k1 still there after the rename"
ok "with the token the same rename works"
exit 0
