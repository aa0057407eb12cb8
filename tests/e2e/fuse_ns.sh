#!/bin/bash
# fuse_ns.sh — namespaces as an operator sees them, against a real pool: a
# Python client declares a namespace and puts under it; `kvpool ns` (table
# and --json) lists its fingerprint fields and counts, the master's
# /metrics has the per-namespace gauges, and the FUSE view's directory
# carries user.kvpool.namespace (its files refuse reads: the view declared
# nothing). Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/fuse_lib.inc"
need getfattr
py_build python3
export PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}"
start_pool

"${PY_RUN[@]}" python3 - "$MASTER_ADDR" "$POOL_INI" <<'PY' || fail "python declarer"
import sys
import kvpool
s = kvpool.MooncakeDistributedStore()
rc = s.setup({"master_server_addr": sys.argv[1], "protocol": "tcp", "config_file": sys.argv[2],
              "local_hostname": "localhost", "log.level": "warning"})
assert rc == 0, s.last_error()
s.declare_namespace("llama8b", model="meta-llama/Llama-3.1-8B", dtype="bfloat16",
                    page_size=16, layout="NHD", tp=2)
assert s.put("llama8b/blk-0", b"k" * 1000) == 0
assert s.put("llama8b/blk-1", b"v" * 24) == 0
s.close()
PY
ok "a client declared llama8b and put 2 keys"

expect 0 kv ns
grep -q "llama8b .* 2 .*meta-llama/Llama-3.1-8B .*bfloat16 .* 16 .* 2  layout=NHD" "$E2E_TMP/out" ||
	fail "kvpool ns: $(cat "$E2E_TMP/out")"
expect 0 kv ns --json
python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
assert len(v) == 1, v
n = v[0]
assert (n["name"], n["model"], n["dtype"], n["page_size"], n["layout"], n["tp"], n["keys"],
        n["bytes"]) == ("llama8b", "meta-llama/Llama-3.1-8B", "bfloat16", 16, "NHD", 2, 2, 1024), n
assert len(n["fingerprint"]) == 16, n' "$E2E_TMP/out" || fail "kvpool ns --json: $(cat "$E2E_TMP/out")"
expect 0 kv ns --help
expect 0 kv info
grep -q "^llama8b .* 2 .*meta-llama/Llama-3.1-8B" "$E2E_TMP/out" || fail "kvpool info: $(cat "$E2E_TMP/out")"
expect 0 kv info --json
python3 -c '
import json, sys
v = json.load(open(sys.argv[1]))
assert [(n["name"], n["keys"], n["model"]) for n in v["namespaces"]] == \
    [("llama8b", 2, "meta-llama/Llama-3.1-8B")], v["namespaces"]' "$E2E_TMP/out" ||
	fail "kvpool info --json: $(cat "$E2E_TMP/out")"
ok "kvpool ns and kvpool info list the namespace, its fields and counts"

[ "$(metric 'kvpool_master_namespace_keys{namespace="llama8b"}')" = 2 ] ||
	fail "namespace_keys metric: $(http_get "http://127.0.0.1:$MASTER_HTTP_PORT/metrics" | grep namespace)"
[ "$(metric 'kvpool_master_namespace_bytes{namespace="llama8b"}')" = 1024 ] || fail "namespace_bytes metric"
[ "$(metric kvpool_master_namespaces)" = 1 ] || fail "namespaces metric"
http_get "http://127.0.0.1:$MASTER_HTTP_PORT/metrics" |
	grep -q '^kvpool_master_namespace_info{namespace="llama8b",fingerprint="[0-9a-f]\{16\}",model="meta-llama/Llama-3.1-8B",dtype="bfloat16",page_size="16",layout="NHD",tp="2"} 1$' ||
	fail "namespace_info metric"
ok "/metrics has the per-namespace gauges"

# a key outside the namespace, for a directory that is none
printf x | kv put other/k || fail "kvpool put other/k"
mnt=$E2E_TMP/mnt
mount_view "$mnt"
ls "$mnt/llama8b" >/dev/null || fail "ls of the namespace directory"
v=$(getfattr --only-values -n user.kvpool.namespace "$mnt/llama8b" 2>"$E2E_TMP/err") ||
	fail "getfattr user.kvpool.namespace: $(cat "$E2E_TMP/err")"
case $v in
*"model=meta-llama/Llama-3.1-8B dtype=bfloat16 page_size=16 layout=NHD tp=2 keys=2 bytes=1024"*) ;;
*) fail "user.kvpool.namespace = '$v'" ;;
esac
getfattr -d -m - "$mnt/llama8b" 2>/dev/null | grep -q "user.kvpool.namespace" ||
	fail "listxattr of the namespace directory does not name it"
getfattr -n user.kvpool.namespace "$mnt/other" >/dev/null 2>&1 &&
	fail "a directory that is no namespace has user.kvpool.namespace"
# the view declares nothing: it reads every block (to debug it), writes none
[ "$(cat "$mnt/llama8b/blk-1")" = "vvvvvvvvvvvvvvvvvvvvvvvv" ] ||
	fail "the view's read of a namespaced block"
printf y 2>"$E2E_TMP/err" >"$mnt/llama8b/blk-9" && sync "$mnt/llama8b/blk-9" 2>>"$E2E_TMP/err" &&
	[ -e "$mnt/llama8b/blk-9" ] && kv get llama8b/blk-9 >/dev/null 2>&1 &&
	fail "the view stored a block in a namespace it did not declare"
[ "$(cat "$mnt/other/k")" = x ] || fail "read outside the namespace"
ok "the FUSE view shows the namespace's fingerprint on its directory"
unmount_view "$mnt" "$view_pid"
