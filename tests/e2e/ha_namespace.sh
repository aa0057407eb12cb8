#!/bin/bash
# ha_namespace.sh — namespaces across a failover (docs/client.md
# "Namespaces"): namespaces live in the leader's memory only; a Python
# client that declared one keeps working after kill -9 of the leader,
# because its library declares again on its new connection, and the new
# leader then refuses another model under that namespace.
# Exit 0 pass, 1 fail, 77 without etcd or Python headers.
. "$(dirname "$0")/lib.sh"
e2e_init hans
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" curl python3
py_build
export PYTHONPATH="$B/python${PYTHONPATH:+:$PYTHONPATH}"
ha_pool_up
pool_node n1
run_node n1
wait_nodes "n1" 30 || fail "the node did not mount at the leader"

# A client that stays: one command per line on stdin, one answer per line.
cat >"$E2E_TMP/client.py" <<'PY'
import sys
import kvpool
s = kvpool.DistributedStore()
rc = s.setup({"master_server_addr": sys.argv[1], "protocol": "tcp", "config_file": sys.argv[2],
              "local_hostname": "localhost", "log.level": "warning"})
assert rc == 0, (rc, s.last_error())
LLAMA = dict(model="meta-llama/Llama-3.1-8B", dtype="bfloat16", page_size=16, layout="NHD", tp=1)
QWEN = dict(model="Qwen/Qwen2-7B", dtype="bfloat16", page_size=16, layout="NHD", tp=1)
for line in sys.stdin:
    cmd = line.split()
    try:
        if cmd[0] == "declare":
            s.declare_namespace("llama", **(LLAMA if cmd[1] == "llama" else QWEN))
            out = "declared"
        elif cmd[0] == "put":
            out = "put %d" % s.put(cmd[1], cmd[2].encode())
        elif cmd[0] == "get":
            out = "get %s" % s.get(cmd[1]).decode()
    except kvpool.NamespaceMismatchError as e:
        out = "mismatch " + str(e)
    print(out, flush=True)
PY
coproc CL { "${PY_RUN[@]}" python3 "$E2E_TMP/client.py" "$ETCD_URL" "$POOL_INI" 2>"$E2E_TMP/client.err"; }
clpid=$CL_PID	# bash unsets CL_PID once the coprocess is gone
adopt "$clpid"
ask() {
	echo "$1" >&"${CL[1]}"
	read -r -t 60 answer <&"${CL[0]}" || fail "the client did not answer '$1': $(cat "$E2E_TMP/client.err")"
	echo "$answer"
}
[ "$(ask "declare llama")" = declared ] || fail "declare"
[ "$(ask "put llama/blk-0 kv0")" = "put 0" ] || fail "put under the namespace"
ok "a client declared llama at leader $L and put under it"

stop_pid "${HA_PID[$L]}" KILL
waitfor 15 ha_is_leader "$S" || fail "$S did not take over after kill -9 of $L"
wait_nodes "n1" 30 || fail "the node did not re-mount at the new leader"
# a put needs the master (a get may be served from a location the client
# knows): its new connection to the new leader declares llama again
a=""
for _ in $(seq 50); do
	a=$(ask "put llama/blk-1 kv1")
	[ "$a" = "put 0" ] && break
	sleep 0.2
done
[ "$a" = "put 0" ] || fail "the client's namespaced put after the failover: '$a'"
[ "$(ask "get llama/blk-0")" = "get kv0" ] || fail "the client's namespaced get after the failover"
[ "$(ask "get llama/blk-1")" = "get kv1" ] || fail "the client's new key after the failover"
ok "after kill -9 of $L the client puts and reads under its namespace at $S"

expect 0 kv ns
grep -q "^llama .*meta-llama/Llama-3.1-8B" "$E2E_TMP/out" ||
	fail "the new leader does not list the re-declared namespace: $(cat "$E2E_TMP/out")"
"${PY_RUN[@]}" python3 - "$ETCD_URL" "$POOL_INI" <<'PY' || fail "a second model was not refused by the new leader"
import sys
import kvpool
s = kvpool.DistributedStore()
assert s.setup({"master_server_addr": sys.argv[1], "protocol": "tcp", "config_file": sys.argv[2],
                "local_hostname": "localhost", "log.level": "warning"}) == 0
try:
    s.declare_namespace("llama", model="Qwen/Qwen2-7B", dtype="bfloat16", page_size=16,
                        layout="NHD", tp=1)
    sys.exit("declared")
except kvpool.NamespaceMismatchError as e:
    assert "meta-llama/Llama-3.1-8B" in str(e), e
assert s.get("llama/blk-0") == b""
s.close()
PY
ok "the new leader knows the namespace: kvpool ns lists it, another model is refused"
eval "exec ${CL[1]}>&-"	# end of its input: the client exits
wait "$clpid" || fail "the client exited $?: $(cat "$E2E_TMP/client.err")"
forget "$clpid"
