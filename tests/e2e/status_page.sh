#!/bin/bash
# status_page: the status page (ui/status.html, docs/monitoring.md) in a real
# browser. A pool of a master and two nodes takes a load of puts and gets;
# Debian's headless Chromium opens the master's page, runs its JavaScript
# and dumps the DOM, which must show the figures `kvpool info --json`
# prints (keys, capacity, memory used, per node used and objects, epoch),
# plots with points, and a hit rate below 100% (misses asked); the master
# counts the TCP bytes the nodes report, and the bytes the clients report
# by path (CLIENT_STATS: local shared memory for the same-host gets, TCP
# for --path tcp), which the page shows too. Then a node
# is killed and the page must show it down within its node_ttl; a node's
# own HTTP port serves its own view. A screenshot is kept for a person to
# look at: $E2E_TMP/status-page.png, copied to BUILD/test-logs/ (the temp
# dir goes at exit). Skips (77) without chromium.
. "$(dirname "$0")/lib.sh"
skip_in_san_pass "a browser's view of the page; t_master_http runs /api/status under ASan"
e2e_init status_page
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" curl python3
command -v chromium >/dev/null || skip "chromium is not installed (apt-get install chromium)"

TTL=20
pool_ini "node_ttl = ${TTL}s" "client_ttl = ${TTL}s"
pool_node n1 "segment_size = 64M"
N1_HTTP=$NODE_HTTP_PORT
pool_node n2 "segment_size = 64M"
run_master
run_node n1
run_node n2
N2_PID=$NODE_PID
wait_nodes "n1 n2" 30 || fail "nodes did not mount"
URL="http://127.0.0.1:$MASTER_HTTP_PORT"

# A browser of its own: a private profile, no first-run work, quiet.
browse() {
	timeout 60 chromium --headless=new --no-sandbox --disable-gpu --no-first-run \
		--user-data-dir="$E2E_TMP/chromium" --disable-dev-shm-usage \
		--virtual-time-budget=5000 "$@" 2>>"$E2E_TMP/chromium.err"
}

# The load: puts, then gets by other processes (a client's own puts are
# read back from its cache of locations without asking the master, which
# counts the gets it is asked) over both paths, and gets of absent keys.
expect 0 kv bench --op put --size 16K --count 400 --keep --prefix load/ --wait 10s
expect 0 kv bench --op get --size 16K --count 400 --existing --keep --prefix load/
expect 0 kv bench --op get --size 16K --count 200 --existing --keep --prefix load/ --path tcp
for i in 1 2 3 4 5; do kv get "absent/$i" /dev/null >/dev/null 2>&1; done
sleep 3	# a few samples of the master's ring after the load

# The access rules are the other endpoints': the same server and address.
http_get "$URL/api/status" >"$E2E_TMP/status.json" || fail "/api/status"
pyjson "$E2E_TMP/status.json" 'r["kind"] == "master" and len(r["nodes"]) == 2' ||
	fail "/api/status: $(head -c 300 "$E2E_TMP/status.json")"
http_get "$URL/ui" | grep -q '<title>kvpool status</title>' || fail "/ui is not the page"
ok "/api/status and /ui served on the master's http_listen"
# the nodes' heartbeats carry their TCP bytes: the 200 gets of 16 KiB
pyjson "$E2E_TMP/status.json" 'r["counters"]["tcp_read_bytes"] >= 200 * 16384' ||
	bad "TCP bytes read: $(jval "$E2E_TMP/status.json" 'r["counters"]')"
# the clients report their bytes by path (each bench reports as it closes)
pyjson "$E2E_TMP/status.json" 'r["client_bytes"]["local"] >= 400 * 16384 and
	r["client_bytes"]["tcp"] >= 200 * 16384' ||
	bad "client bytes by path: $(jval "$E2E_TMP/status.json" 'r.get("client_bytes")')"
http_get "$URL/metrics" >"$E2E_TMP/metrics.txt" || fail "/metrics"
for path in local tcp; do
	awk -v p="kvpool_master_client_bytes_total{path=\"$path\"}" \
		'$1 == p && $2 > 0 { f = 1 } END { exit !f }' "$E2E_TMP/metrics.txt" ||
		bad "/metrics: no $path bytes: $(grep client_bytes "$E2E_TMP/metrics.txt")"
done
ok "the clients' local and TCP bytes reach the master (/api/status, /metrics)"

kv info --json >"$E2E_TMP/info.json" || fail "kvpool info --json"
browse --dump-dom "$URL/" >"$E2E_TMP/dom.html" || fail "chromium --dump-dom"
# The screenshot under a load that goes on (the rates move).
spawn load bash -c 'for i in $(seq 1000); do
	"$0" -c "$1" bench --op put --size 16K --count 100 --keep --prefix "live/$i/" || exit
	"$0" -c "$1" bench --op get --size 16K --count 400 --existing --keep --prefix load/ \
		--path tcp || exit
	"$0" -c "$1" get absent/$i /dev/null 2>/dev/null
done' "$B/kvpool" "$POOL_INI"
LOAD_PID=$SPAWN_PID
sleep 4
browse --window-size=1280,1000 --screenshot="$E2E_TMP/status-page.png" "$URL/" >/dev/null ||
	fail "chromium --screenshot"
stop_pid "$LOAD_PID" >/dev/null
[ -s "$E2E_TMP/status-page.png" ] || fail "no screenshot"
mkdir -p "$B/test-logs" && cp "$E2E_TMP/status-page.png" "$B/test-logs/status-page.png"
ok "screenshot: $B/test-logs/status-page.png"

# dom_check DOM INFO [MODE]: what the page shows against kvpool info --json.
cat >"$E2E_TMP/domcheck.py" <<'PY'
import json, re, sys
from html.parser import HTMLParser

class P(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.rows, self.svgs, self.stack, self.text = {}, [], {}, [], {}
        self.cur = None
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids[a["id"]] = a
            self.cur = a["id"]
            self.text[a["id"]] = ""
        if tag == "tr" and "data-node" in a:
            self.rows.append(a)
        if tag == "svg" and a.get("id", "").startswith("plot-"):
            self.last_svg = a["id"]
            self.svgs[a["id"]] = a
        if tag == "polyline" and getattr(self, "last_svg", None):
            self.svgs[self.last_svg]["points"] = a.get("points", "")
    def handle_data(self, d):
        if self.cur:
            self.text[self.cur] += d
    def handle_endtag(self, tag):
        self.cur = None

dom, mode = open(sys.argv[1]).read(), sys.argv[3]
info = json.load(open(sys.argv[2]))
p = P(); p.feed(dom)
bad = []
def val(i):
    return p.ids.get(i, {}).get("data-value")
if mode == "pool":
    for i, want in (("keys", info["keys"]), ("capacity", info["capacity"]),
                    ("bytes-used", info["bytes_used"]), ("nodes-count", len(info["nodes"])),
                    ("leases", info["leases"])):
        if val(i) != str(want):
            bad.append("%s: page %s, info %s" % (i, val(i), want))
    if p.text.get("epoch", "").strip() != str(info["master"]["epoch"]):
        bad.append("epoch: page %r, info %s" % (p.text.get("epoch"), info["master"]["epoch"]))
    rows = {r["data-node"]: r for r in p.rows}
    for n in info["nodes"]:
        r = rows.get(n["name"])
        if not r:
            bad.append("node %s not on the page" % n["name"]); continue
        for f in ("used", "objects", "size"):
            want = n["capacity"] if f == "size" else n[f]
            if r.get("data-" + f) != str(want):
                bad.append("node %s %s: page %s, info %s" % (n["name"], f, r.get("data-" + f), want))
        if r.get("data-state") != "up":
            bad.append("node %s: %s" % (n["name"], r.get("data-state")))
    for path in ("local", "tcp"):
        tot = p.ids.get("path-%s-rate" % path, {}).get("data-total")
        if not tot or int(tot) <= 0:
            bad.append("clients' %s bytes on the page: %r" % (path, tot))
    if val("prefix-hit-rate") is None and "prefix-hit-rate" not in p.ids:
        bad.append("no prefix hit rate card")
    hr = val("hit-rate")
    if not hr or not (0 < float(hr) < 100):
        bad.append("hit rate %r: expected between 0 and 100 (misses were asked)" % hr)
    for pid in ("plot-puts", "plot-gets", "plot-keys", "plot-used"):
        s = p.svgs.get(pid)
        pts = len(re.findall(r"[-0-9.]+,[-0-9.]+", s.get("points", ""))) if s else 0
        if pts < 2:
            bad.append("%s: %d points" % (pid, pts))
elif mode.startswith("down:"):
    name = mode[5:]
    st = {r["data-node"]: r.get("data-state") for r in p.rows}
    if st.get(name) not in ("down", "gone"):
        bad.append("node %s shows %r, not down (rows: %s)" % (name, st.get(name), st))
elif mode.startswith("node:"):
    if p.text.get("kind", "").split()[:1] != ["node"]:
        bad.append("kind %r" % p.text.get("kind"))
    if [r["data-node"] for r in p.rows] != [mode[5:]]:
        bad.append("rows %s" % [r["data-node"] for r in p.rows])
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
dom_check() {
	python3 "$E2E_TMP/domcheck.py" "$@" >"$E2E_TMP/domcheck.out" 2>&1
}

if dom_check "$E2E_TMP/dom.html" "$E2E_TMP/info.json" pool; then
	ok "the page shows kvpool info --json's figures, a hit rate, bytes by path and plots with points"
else
	bad "page vs kvpool info --json: $(cat "$E2E_TMP/domcheck.out")"
fi

browse --dump-dom "http://127.0.0.1:$N1_HTTP/ui" >"$E2E_TMP/dom-node.html" || fail "node page"
if dom_check "$E2E_TMP/dom-node.html" "$E2E_TMP/info.json" node:n1; then
	ok "a node's HTTP port serves its own view"
else
	bad "node view: $(cat "$E2E_TMP/domcheck.out")"
fi

# A node killed (no drain): down on the page well within node_ttl.
kill -KILL "$N2_PID"
t0=$SECONDS
browse --dump-dom "$URL/" >"$E2E_TMP/dom-down.html" || fail "chromium after the kill"
took=$((SECONDS - t0))
if dom_check "$E2E_TMP/dom-down.html" "$E2E_TMP/info.json" down:n2 && [ $took -lt $TTL ]; then
	ok "a killed node shows as down after ${took}s (node_ttl ${TTL}s)"
else
	bad "killed node after ${took}s: $(cat "$E2E_TMP/domcheck.out")"
fi
e2e_finish
