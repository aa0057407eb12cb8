#!/bin/bash
# ha_tls.sh — master HA through an etcd that speaks only TLS (docs/ha.md
# "etcd over TLS"): a one-member etcd on https with --client-cert-auth and a
# throw-away CA made here with openssl(1); the pool has [tls] enabled, its
# masters ha_endpoints = https://..., nodes and clients cluster.master =
# etcd://https://...
#  1. two masters elect a leader over https (their [tls] cert/key are the
#     client certificate etcd asks for); a node mounts, a client puts, gets;
#  2. kill -9 of the leader: the other takes over and serves the old key;
#  3. a master with a plain http:// endpoint under [tls] enabled refuses to
#     start, naming the endpoint;
#  4. a master whose [tls] ca is not etcd's CA cannot reach etcd and says
#     why (a TLS certificate failure), and never leads.
# Exit 0 pass, 1 fail, 77 without etcd (apt-get install etcd-server).
. "$(dirname "$0")/lib.sh"
e2e_init ha_tls
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" etcd curl openssl

pki=$E2E_TMP/pki
mkdir -p "$pki"
tls_ca ca
tls_ca other
tls_cert etcd ca "IP:127.0.0.1,DNS:localhost"
tls_cert kvpool ca

# ---- etcd on https only, client certificates required ----
ETCD_DIR=$(mktemp -d "/dev/shm/kvpt-etcd-$E2E_NAME-$$.XXXXXX") || fail "mktemp /dev/shm"
on_cleanup "rm -rf '$ETCD_DIR'"
read -r CPORT PPORT <<<"$(free_ports 2)"
EP=127.0.0.1:$CPORT
spawn etcd etcd --name m0 --data-dir "$ETCD_DIR/m0.data" \
	--listen-client-urls "https://$EP" --advertise-client-urls "https://$EP" \
	--listen-peer-urls "http://127.0.0.1:$PPORT" --initial-advertise-peer-urls "http://127.0.0.1:$PPORT" \
	--initial-cluster "m0=http://127.0.0.1:$PPORT" --initial-cluster-state new \
	--initial-cluster-token "kvpt-$$" --heartbeat-interval 100 --election-timeout 1000 \
	--cert-file "$pki/etcd.crt" --key-file "$pki/etcd.key" \
	--trusted-ca-file "$pki/ca.crt" --client-cert-auth --logger zap
etcd_ok() {
	curl -sf -m 2 --cacert "$pki/ca.crt" --cert "$pki/kvpool.crt" --key "$pki/kvpool.key" \
		"https://$EP/health" 2>/dev/null | grep -q '"health":"true"'
}
waitfor 30 etcd_ok || fail "etcd on https://$EP did not become healthy: $(tail -n 5 "$E2E_TMP/etcd.log")"
curl -s -m 2 -o /dev/null "http://$EP/health" && fail "etcd answers plain http"
ok "etcd on https://$EP (client certificates required)"

POOL_INI=$E2E_TMP/pool.ini
{
	printf '[cluster]\nmaster = etcd://https://%s\n' "$EP"
	printf '[master]\nha = etcd\nha_endpoints = https://%s\ncluster_id = %s-%s\nha_lease_ttl = 2s\n' \
		"$EP" "$E2E_NAME" "$$"
	printf '[node]\nheartbeat_interval = 500ms\nsegment_size = 64M\n'
	printf '[client]\ntimeout = 5s\nprotocol = tcp\n[log]\nlevel = info\n'
	printf '[tls]\nenabled = true\ncert = %s\nkey = %s\nca = %s\n' \
		"$pki/kvpool.crt" "$pki/kvpool.key" "$pki/ca.crt"
} >"$POOL_INI"

# leading NAME: master NAME's log says it was elected (N times, default 1)
elected() { grep -c "ha: elected leader" "$E2E_TMP/$1.log" 2>/dev/null; }
leading() { [ "$(elected "$1")" -ge "${2:-1}" ]; }
one_leads() { leading A || leading B; }

ha_master A
ha_master B
waitfor 15 one_leads || fail "no leader elected over https: $(tail -n 5 "$E2E_TMP/A.log")"
if leading A; then L=A; else L=B; fi
S=$(ha_other "$L")
waitfor 10 grep -q "ha: leader is" "$E2E_TMP/$S.log" || fail "$S does not see the leader: $(tail -n 5 "$E2E_TMP/$S.log")"
ok "master $L leads through https etcd, $S stands by"

pool_node n1
run_node n1
wait_nodes "n1" 30 || fail "the node did not mount at the leader: $(tail -n 5 "$E2E_TMP/n1.log")"
head -c 100000 /dev/urandom >"$E2E_TMP/v1"
expect 0 kv put hatls/first "$E2E_TMP/v1"
expect 0 kv get hatls/first "$E2E_TMP/v1.back"
cmp -s "$E2E_TMP/v1" "$E2E_TMP/v1.back" || fail "hatls/first read back differs"
ok "a node and a client follow etcd://https://; put and get"

# ---- kill -9 of the leader ----
stop_pid "${HA_PID[$L]}" KILL
waitfor 15 leading "$S" || fail "$S did not take over after kill -9 of $L: $(tail -n 5 "$E2E_TMP/$S.log")"
wait_nodes "n1" 30 || fail "the node did not re-mount at the new leader"
expect 0 kv get hatls/first "$E2E_TMP/v1.back"
cmp -s "$E2E_TMP/v1" "$E2E_TMP/v1.back" || fail "hatls/first differs after the failover"
ok "kill -9 $L: $S leads and serves the old key"

# ---- plain http:// under [tls] enabled: refused at start ----
read -r p h <<<"$(free_ports 2)"
printf '[master]\nlisten = 127.0.0.1:%s\nhttp_listen = 127.0.0.1:%s\nha_endpoints = http://%s\n' \
	"$p" "$h" "$EP" >"$E2E_TMP/plain.ini"
timeout 10 "$B/kvpool-master" -c "$POOL_INI" -c "$E2E_TMP/plain.ini" >"$E2E_TMP/plain.log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || fail "a master with an http:// etcd endpoint under [tls] started (rc $rc)"
grep -q "http://$EP is not TLS.*https://$EP" "$E2E_TMP/plain.log" ||
	fail "the refusal does not say why: $(cat "$E2E_TMP/plain.log")"
ok "http:// etcd under [tls] enabled: refused ($(grep -o "etcd endpoint.*" "$E2E_TMP/plain.log" | head -1))"

# ---- a CA that is not etcd's: a clear TLS failure, never the lead ----
tls_cert stray other
read -r p h <<<"$(free_ports 2)"
printf '[master]\nlisten = 127.0.0.1:%s\nhttp_listen = 127.0.0.1:%s\n[tls]\nca = %s\n' \
	"$p" "$h" "$pki/other.crt" >"$E2E_TMP/C.ini"
spawn C "$B/kvpool-master" -c "$POOL_INI" -c "$E2E_TMP/C.ini"
C_PID=$SPAWN_PID
waitfor 10 grep -q "TLS: .*certificate" "$E2E_TMP/C.log" ||
	fail "a master with the wrong CA does not say why: $(tail -n 5 "$E2E_TMP/C.log")"
leading C && fail "the master with the wrong CA leads"
leading "$S" 2 && fail "$S was elected twice"
ok "a CA that is not etcd's: $(grep -o "TLS: .*" "$E2E_TMP/C.log" | head -1)"
stop_pid "$C_PID"
stop_pid "$NODE_PID" || fail "the node exited $?"
stop_pid "${HA_PID[$S]}" || fail "master $S exited $?"
ok "done"
