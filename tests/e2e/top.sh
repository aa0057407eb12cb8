#!/bin/bash
# top: `kvpool top` in a terminal (tmux: new-session, capture-pane,
# send-keys) against a pool of a master and two nodes with keys in it: the
# screen shows the figures `kvpool info --json` prints (keys, nodes, their
# objects), redraws every second, and q quits; --once prints one plain
# report for scripts, and --http to a node shows the node's own view.
# Skips (77) without tmux.
. "$(dirname "$0")/lib.sh"
e2e_init top
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" tmux python3

pool_ini
pool_node n1 "segment_size = 32M"
N1_HTTP=$NODE_HTTP_PORT
pool_node n2 "segment_size = 32M"
run_master
run_node n1
run_node n2
wait_nodes "n1 n2" 30 || fail "nodes did not mount"
expect 0 kv bench --op put --size 4K --count 50 --keep --prefix top/ --wait 10s
kv info --json >"$E2E_TMP/info.json" || fail "kvpool info --json"
KEYS=$(jval "$E2E_TMP/info.json" 'r["keys"]')
[ "$KEYS" = 50 ] || fail "kvpool info says $KEYS keys"

# --once: one plain report
expect 0 kv top --once
grep -q "^keys $KEYS " "$E2E_TMP/out" || fail "top --once: no 'keys $KEYS': $(cat "$E2E_TMP/out")"
grep -q "^bytes/s by path: local .* TCP .* RDMA .* disk " "$E2E_TMP/out" &&
	grep -q "^prefix hit rate " "$E2E_TMP/out" ||
	fail "top --once: no bytes by path or prefix hit rate: $(cat "$E2E_TMP/out")"
ok "top --once shows the keys, bytes by path and the prefix hit rate"

# A private tmux server (its own socket), in the foreground (-D: tmux's
# daemon() refuses a /dev/null that is not a character device, as in some
# containers), stopped at exit.
T=(tmux -L "kvpt-top-$$")
touch "$E2E_TMP/tmux.conf"
spawn tmux "${T[@]}" -f "$E2E_TMP/tmux.conf" -D
on_cleanup "${T[*]} kill-server"
waitfor 5 test -S "${TMUX_TMPDIR:-/tmp}/tmux-$(id -u)/kvpt-top-$$" || fail "tmux server did not start"
"${T[@]}" new-session -d -s top -x 160 -y 40 \
	"'$B/kvpool' -c '$POOL_INI' top; echo top-exited-\$?; sleep 30" || fail "tmux new-session"
pane() { "${T[@]}" capture-pane -p -t top; }

waitfor 10 sh -c "$(printf '%q ' "${T[@]}") capture-pane -p -t top | grep -q '^keys $KEYS '" ||
	fail "top: no 'keys $KEYS' on the screen: $(pane)"
pane >"$E2E_TMP/screen1"
python3 - "$E2E_TMP/screen1" "$E2E_TMP/info.json" <<'PY' || fail "top's screen vs kvpool info --json"
import json, re, sys
screen, info = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))
bad = []
if not re.search(r"^nodes %d$" % len(info["nodes"]), screen, re.M):
    bad.append("nodes count")
for n in info["nodes"]:
    m = re.search(r"^\s*%d\s+%s\s+up\s+.*\s(\d+)\s+-\s*$" % (n["segment_id"], re.escape(n["name"])), screen, re.M)
    if not m or int(m.group(1)) != n["objects"]:
        bad.append("node %s: %s" % (n["name"], m.group(0) if m else "no row"))
if "role leader (no HA)  epoch %d" % info["master"]["epoch"] not in screen:
    bad.append("role/epoch")
if "hit rate" not in screen or "puts/s" not in screen:
    bad.append("rates")
if bad:
    print("\n".join(bad) + "\n" + screen)
sys.exit(1 if bad else 0)
PY
ok "top's screen shows kvpool info --json's figures"

# It redraws: the clock in the first line moves.
first=$(pane | head -1)
waitfor 5 sh -c "[ \"\$($(printf '%q ' "${T[@]}") capture-pane -p -t top | head -1)\" != '$first' ]" ||
	fail "top did not redraw in 5 s: $first"
ok "top redraws every second"

"${T[@]}" send-keys -t top q
waitfor 5 sh -c "$(printf '%q ' "${T[@]}") capture-pane -p -t top | grep -q top-exited-0" ||
	fail "q did not quit top: $(pane)"
ok "q quits"

# what is not a kvpool's status: an error, exit 1
expect 1 kv top --once --http "127.0.0.1:$MASTER_PORT"
grep -q "top: " "$E2E_TMP/err" || fail "top on the RPC port: $(cat "$E2E_TMP/err")"
ok "top on a port that is not HTTP fails ($(cat "$E2E_TMP/err"))"

expect 0 kv top --once --http "127.0.0.1:$N1_HTTP"
grep -q "^node n1  master .* (up)" "$E2E_TMP/out" || fail "top on a node: $(cat "$E2E_TMP/out")"
ok "top --http NODE shows the node's view"
e2e_finish
