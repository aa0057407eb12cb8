#!/bin/bash
# status_page_ha: the status page's HA figures (docs/monitoring.md) with
# two masters electing a leader through etcd: /api/status of each says its
# role, the epoch and the leader; the standby's names the leader's address;
# kvpool top --http shows the same, and without --http refuses an etcd://
# master with a usage error naming --http; after kill -9 of the leader the
# other one's page says it leads. With chromium, the standby's page shows
# its role in the DOM. Exit 0 pass, 1 fail, 77 without etcd.
. "$(dirname "$0")/lib.sh"
e2e_init spha
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" curl python3
ha_pool_up
pool_node n1
run_node n1
wait_nodes "n1" 30 || fail "the node did not mount at the leader"

status() { curl -sf -m 2 "http://${HA_HTTP[$1]}/api/status"; }
status "$L" >"$E2E_TMP/leader.json" || fail "leader /api/status"
status "$S" >"$E2E_TMP/standby.json" || fail "standby /api/status"
pyjson "$E2E_TMP/leader.json" 'r["ha"]["mode"] == "etcd" and r["ha"]["role"] == "leader" and
	r["ha"]["state"] == "serving" and [n["name"] for n in r["nodes"]] == ["n1"]' ||
	fail "leader: $(head -c 400 "$E2E_TMP/leader.json")"
pyjson "$E2E_TMP/standby.json" 'r["ha"]["role"] == "standby" and r["ha"]["leader"] == args[0] and
	r["epoch"] == json.load(open(args[1]))["epoch"] != "0"' "${HA_RPC[$L]}" "$E2E_TMP/leader.json" ||
	bad "standby: $(head -c 400 "$E2E_TMP/standby.json"), leader ${HA_RPC[$L]}"
ok "/api/status: $L leads, $S stands by and names ${HA_RPC[$L]} and its epoch"

expect 0 "$B/kvpool" top --once --http "${HA_HTTP[$S]}"
grep -q "^role standby/standby  epoch [0-9]*  leader ${HA_RPC[$L]}$" "$E2E_TMP/out" ||
	bad "top on the standby: $(cat "$E2E_TMP/out")"
expect 0 "$B/kvpool" top --once --http "${HA_HTTP[$L]}"
grep -q "^role leader/serving " "$E2E_TMP/out" || bad "top on the leader: $(cat "$E2E_TMP/out")"
expect 2 kv top --once
grep -q -- "--http" "$E2E_TMP/err" || bad "top with an etcd:// master: $(cat "$E2E_TMP/err")"
ok "kvpool top shows each master's role; an etcd:// master needs --http"

if command -v chromium >/dev/null; then
	timeout 60 chromium --headless=new --no-sandbox --disable-gpu --no-first-run \
		--user-data-dir="$E2E_TMP/chromium" --virtual-time-budget=3000 \
		--dump-dom "http://${HA_HTTP[$S]}/" >"$E2E_TMP/dom.html" 2>"$E2E_TMP/chromium.err" ||
		fail "chromium"
	grep -q 'id="role" data-value="standby"' "$E2E_TMP/dom.html" ||
		bad "the standby's page: $(grep -o '<b id="role"[^<]*' "$E2E_TMP/dom.html")"
	ok "the standby's page says standby"
else
	echo "(chromium not installed: the DOM check is left out)"
fi

kill -KILL "${HA_PID[$L]}"
waitfor 15 sh -c "curl -sf -m 1 'http://${HA_HTTP[$S]}/api/status' | grep -q '\"role\":\"leader\"'" ||
	fail "$S's page does not say it leads after kill -9 of $L"
ok "$S's /api/status says it leads after kill -9 of $L"
e2e_finish
