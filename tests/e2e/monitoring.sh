#!/bin/bash
# monitoring.sh — conf/monitoring/ as an operator uses it:
#  1. promtool: the scrape configuration and the rules check clean, and the
#     unit test of every alert (kvpool.rules.test.yml) passes;
#  2. the Grafana dashboard is JSON with what Grafana needs (uid, title,
#     schemaVersion, panels with unique ids, a type, a title, a gridPos
#     inside 24 columns, targets with a refId and an expr, the datasource
#     variable they use), and every kvpool series that the rules and the
#     dashboard name is one that the master or a node exports;
#  3. a real Prometheus (Debian's) runs this prometheus.yml, its targets
#     pointed at a running master and node: both are up, its API returns
#     kvpool's series (keys equal `kvpool info --json`'s), the rules load
#     and evaluate with health "ok", the recording rules have values, and
#     a killed node turns up=0 and KvpoolNodeDown pending.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
skip_in_san_pass "Prometheus's config and rules; t_master_http runs /metrics under ASan"
e2e_init monitoring
need promtool prometheus python3 curl "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool"
M=$E2E_ROOT/conf/monitoring
cd "$E2E_TMP" || fail "cd"
cp "$M/prometheus.yml" "$M/kvpool.rules.yml" "$M/kvpool.rules.test.yml" .

# ---- 1. promtool ----
promtool check rules kvpool.rules.yml >check.log 2>&1 || { cat check.log; fail "promtool check rules"; }
nrules=$(sed -n 's/.*SUCCESS: \([0-9]*\) rules found.*/\1/p' check.log)
promtool check config prometheus.yml >check.log 2>&1 || { cat check.log; fail "promtool check config"; }
promtool test rules kvpool.rules.test.yml >test.log 2>&1 || { cat test.log; fail "promtool test rules"; }
nalerts=$(grep -c '^      - alert:' kvpool.rules.yml)
for a in $(sed -n 's/^      - alert: //p' kvpool.rules.yml); do
	grep -q "alertname: $a$" kvpool.rules.test.yml || fail "alert $a has no unit test in kvpool.rules.test.yml"
done
ok "promtool: config and $nrules rules check clean; the unit test of all $nalerts alerts passes"

# ---- 2. the dashboard, and the series everything names ----
pool_ini
run_master
pool_node n1 "segment_size = 16M" "[spill]" "path = $E2E_TMP/n1.spill" "size = 16M"
run_node n1
N1_HTTP=$NODE_HTTP_PORT N1_PID=$NODE_PID
wait_nodes n1 20 || fail "the node did not mount"
for i in $(seq 30); do
	echo "value $i" | kv put "mon-$i" - >/dev/null || fail "kv put mon-$i"
	kv get "mon-$i" >/dev/null || fail "kv get mon-$i"
done
kv get mon-missing >/dev/null 2>&1
http_get "http://127.0.0.1:$MASTER_HTTP_PORT/metrics" >exported || fail "master /metrics"
http_get "http://127.0.0.1:$N1_HTTP/metrics" >>exported || fail "node /metrics"
# HA series are exported only with [master] ha = etcd: those must be in the source.
grep -rhoE '"kvpool_master_ha_[a-z_]+' "$E2E_ROOT/master" | tr -d '"' >ha_series
python3 - "$M/grafana-dashboard.json" kvpool.rules.yml exported ha_series <<'PY' || fail "the Grafana dashboard or the series it names"
import json, re, sys
dash, rules, exported, ha = sys.argv[1:5]
d = json.load(open(dash))
def need(c, what):
    if not c:
        print("FAIL:", what); sys.exit(1)
for k in ("uid", "title", "schemaVersion", "panels", "templating"):
    need(k in d, "dashboard has no " + k)
need(isinstance(d["schemaVersion"], int) and d["schemaVersion"] >= 30, "schemaVersion")
vars_ = {v["name"] for v in d["templating"]["list"]}
ids, exprs = set(), []
for p in d["panels"]:
    for k in ("id", "type", "title", "gridPos", "targets", "datasource"):
        need(k in p, "panel %r has no %s" % (p.get("title"), k))
    need(p["id"] not in ids, "panel id %d twice" % p["id"]); ids.add(p["id"])
    need(p["type"] in ("stat", "gauge", "bargauge", "timeseries", "table", "text"), "panel type " + p["type"])
    g = p["gridPos"]
    need(all(isinstance(g[k], int) for k in "xywh") and g["x"] + g["w"] <= 24 and g["w"] > 0 and g["h"] > 0,
         "gridPos of %r" % p["title"])
    uid = p["datasource"]["uid"]
    need(uid.startswith("${") and uid[2:-1] in vars_, "panel %r uses datasource %s, not a variable" % (p["title"], uid))
    need(p["targets"], "panel %r has no targets" % p["title"])
    for t in p["targets"]:
        need(t.get("refId") and t.get("expr"), "a target of %r" % p["title"])
        exprs.append(t["expr"])
exprs += [l.split(":", 1)[1] for l in open(rules) if l.strip().startswith("expr:")]
text = "\n".join(exprs) + open(rules).read()
named = set(re.findall(r"(?<![:\w])(kvpool_[a-z_]+)", text))
have = set()
for l in open(exported):
    if l.startswith("# TYPE kvpool_"):	# a family with no sample yet (no namespace declared)
        have.add(l.split()[2])
    elif l.startswith("kvpool_"):
        n = re.match(r"kvpool_[a-z_]+", l).group(0)
        have.add(n)
        have.add(re.sub(r"_(bucket|sum|count)$", "", n))
have |= {l.strip() for l in open(ha)}
missing = sorted(named - have)
need(not missing, "named but not exported: %s" % missing)
print("%d panels, %d series named, all exported" % (len(d["panels"]), len(named)))
PY
ok "Grafana dashboard: $(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['panels']))" "$M/grafana-dashboard.json") panels valid; every series it and the rules name is exported"

# ---- 3. a real Prometheus scraping the pool ----
read -r PPORT <<<"$(free_ports 1)" || fail "free_ports"
sed -i -e "s/scrape_interval: 15s/scrape_interval: 1s/" -e "s/evaluation_interval: 15s/evaluation_interval: 1s/" \
	-e "s/'127.0.0.1:15003'/'127.0.0.1:$MASTER_HTTP_PORT'/" -e "s/'127.0.0.1:15011'/'127.0.0.1:$N1_HTTP'/" prometheus.yml
grep -q "127.0.0.1:$N1_HTTP" prometheus.yml || fail "could not point prometheus.yml at the node"
spawn prometheus prometheus --config.file=prometheus.yml --storage.tsdb.path="$E2E_TMP/tsdb" \
	--web.listen-address="127.0.0.1:$PPORT" --log.level=warn
P="http://127.0.0.1:$PPORT"
waitfor 30 curl -sf "$P/-/ready" -o /dev/null || fail "prometheus did not get ready"
q() { curl -sf --get "$P/api/v1/query" --data-urlencode "query=$1"; }
val() { q "$1" | jval - 'r["data"]["result"][0]["value"][1] if r["data"]["result"] else ""'; }
keys=$(kv info --json | jval - 'r["keys"]') || fail "kvpool info --json"
end=$((SECONDS + 20))
while [ $SECONDS -lt $end ]; do
	[ "$(val 'kvpool_master_keys')" = "$keys" ] && [ "$(val 'up{job="kvpool-node"}')" = 1 ] && break
	sleep 0.5
done
[ "$(val 'kvpool_master_keys')" = "$keys" ] || fail "Prometheus has kvpool_master_keys '$(val kvpool_master_keys)', kvpool info says $keys"
[ "$(val 'up{job="kvpool-master"}')" = 1 ] || fail "the master's target is not up"
[ "$(val 'up{job="kvpool-node"}')" = 1 ] || fail "the node's target is not up"
ok "Prometheus scrapes master and node: kvpool_master_keys = $keys (= kvpool info --json)"
end=$((SECONDS + 20))
while [ $SECONDS -lt $end ]; do
	curl -sf "$P/api/v1/rules" >rules.json || fail "api/v1/rules"
	pyjson rules.json 'all(x["health"] == "ok" for g in r["data"]["groups"] for x in g["rules"])' && break
	sleep 0.5
done
pyjson rules.json "sum(len(g['rules']) for g in r['data']['groups']) == $nrules" ||
	fail "Prometheus loaded $(jval rules.json 'sum(len(g["rules"]) for g in r["data"]["groups"])') rules, not $nrules"
pyjson rules.json 'all(x["health"] == "ok" for g in r["data"]["groups"] for x in g["rules"])' ||
	fail "rules not healthy: $(jval rules.json '[(x["name"], x.get("lastError")) for g in r["data"]["groups"] for x in g["rules"] if x["health"] != "ok"]')"
use=$(val 'kvpool:segment_use:ratio')
[ -n "$use" ] && python3 -c "import sys; sys.exit(0 if 0 < float('$use') < 1 else 1)" ||
	fail "recording rule kvpool:segment_use:ratio = '$use'"
ok "Prometheus loaded all $nrules rules, healthy; kvpool:segment_use:ratio = $use"

kill -KILL "$N1_PID"
end=$((SECONDS + 20)) st=""
while [ $SECONDS -lt $end ]; do
	st=$(curl -sf "$P/api/v1/alerts" | jval - '[a["state"] for a in r["data"]["alerts"] if a["labels"]["alertname"] == "KvpoolNodeDown"]')
	[ "$st" = "['pending']" ] || [ "$st" = "['firing']" ] && break
	sleep 0.5
done
[ "$(val 'up{job="kvpool-node"}')" = 0 ] || fail "the killed node's target is still up"
[ "$st" = "['pending']" ] || [ "$st" = "['firing']" ] || fail "KvpoolNodeDown is '$st' after the node was killed"
ok "a killed node: up = 0, KvpoolNodeDown ${st//[\'\[\]]/}"
e2e_finish
