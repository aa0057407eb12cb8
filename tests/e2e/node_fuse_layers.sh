#!/bin/bash
# node_fuse_layers.sh — the FUSE view inside kvpool-node gets the node's
# whole configuration as loaded, not a re-read of its first file: a node
# run with `-c pool.ini -c node.ini` where the cluster token (token_file)
# and [fuse] mountpoint are only in node.ini authenticates, and so does its
# view (ls, cp, cat work). The master reads the token from its own layer.
# Then the CLI with the same two layers (and -o) reaches the pool too.
# Exit 0 pass, 1 fail, 77 skip (no /dev/fuse or fusermount3).
. "$(dirname "$0")/lib.sh"
e2e_init nfl
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" fusermount3
[ -c /dev/fuse ] || skip "no /dev/fuse"
mnt=$E2E_TMP/mnt
mkdir -p "$mnt"
on_cleanup "fuse_unmount '$mnt'"
tok=$E2E_TMP/token
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$tok"
chmod 600 "$tok"

pool_ini "[node]" "segment_size = 64M" "heartbeat_interval = 200ms" "[client]" "timeout = 5s" \
	"[log]" "level = info"
# The master's own layer holds the token; pool.ini (the clients' file) does not.
printf '[cluster]\ntoken_file = %s\n' "$tok" >"$E2E_TMP/master-token.ini"
MASTER_ARGS=(-c "$E2E_TMP/master-token.ini")
pool_node n1 "[cluster]" "token_file = $tok" "[fuse]" "mountpoint = $mnt"
log=$E2E_TMP/n1.log

run_master
run_node n1
waitfor 15 grep -q "ready: data port" "$log" || {
	grep -qi "fuse.*\(permission\|not permitted\|operation not\)" "$log" && skip "cannot mount FUSE here"
	fail "node with token and view in its second layer not ready"
}
grep -q "authentication failed" "$log" && fail "the view did not get the token of the second layer"
ok "node and its view authenticate with a token from the second -c layer"

head -c 100000 /dev/urandom >"$E2E_TMP/blob"
cp "$E2E_TMP/blob" "$mnt/layered" || fail "cp into the view"
ls "$mnt" >"$E2E_TMP/ls" 2>&1 || fail "ls on the mount: $(cat "$E2E_TMP/ls")"
grep -qx layered "$E2E_TMP/ls" || fail "ls does not list the file"
cmp "$E2E_TMP/blob" "$mnt/layered" || fail "read back through the view differs"
ok "ls, cp and cat through the view"

# The CLI: without the token it is refused; with the node's layer, or with
# -o cluster.token_file, it reads the object back.
"$B/kvpool" -c "$POOL_INI" get layered >/dev/null 2>"$E2E_TMP/err" &&
	fail "a client without the token was served"
"$B/kvpool" -c "$POOL_INI" -c "$E2E_TMP/n1.ini" get layered >"$E2E_TMP/got" 2>"$E2E_TMP/err" ||
	fail "CLI with two -c layers: $(cat "$E2E_TMP/err")"
cmp -s "$E2E_TMP/blob" "$E2E_TMP/got" || fail "CLI with two -c layers read other bytes"
"$B/kvpool" -c "$POOL_INI" -o "cluster.token_file=$tok" get layered >"$E2E_TMP/got" 2>"$E2E_TMP/err" ||
	fail "CLI with -o cluster.token_file: $(cat "$E2E_TMP/err")"
cmp -s "$E2E_TMP/blob" "$E2E_TMP/got" || fail "CLI with -o read other bytes"
ok "the CLI honours every -c layer and -o"
