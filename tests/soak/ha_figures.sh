#!/bin/bash
# tests/soak/ha_figures.sh [BUILD] — `make ha-figures`: the failover figures
# of docs/ha.md. A pool of two masters (ha = etcd, default timings), two
# nodes and an etcd member, kvp-ha-probe putting a fresh 4 KiB key every
# 10 ms and reading old ones, the soak driver racing on its own keys; then
# HA_ROUNDS rounds (default 5) of each fault:
#   kill9   kill -9 of the leader (restarted as a standby afterwards)
#   stop    SIGSTOP of the leader past its lease, SIGCONT 1 s later
#   term    SIGTERM of the leader (a planned handover)
#   cut     nftables drops the leader's packets to etcd (root only: the
#           masters and etcd then live in network namespaces)
# and, for comparison, the same probe against one master (ha = none) that
# kill -9 takes down and a supervisor restarts after RestartSec as
# systemd's Restart=on-failure would (systemd/kvpool-master.service says
# 1 s; HA_RESTART_SEC overrides). For each fault: the time from the fault
# to the first successful put (median, max), the longest time without a
# successful put, completed puts lost, wrong bytes. A table on stdout, JSON
# in HA_JSON (default build/ha-figures.json). Env: HA_ROUNDS, HA_FAULTS
# (default "kill9 stop term cut"), HA_RESTART_SEC, HA_GAP (s between
# rounds, 3). Exit 0 when nothing was lost or wrong, 1 otherwise.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
export KVP_BUILD=$build
. "$root/tests/e2e/lib.sh"
e2e_init hafig
need "$B/kvpool-master" "$B/kvpool-node" "$B/kvpool" "$B/soak/kvp-ha-probe" \
	"$B/soak/kvp-soak-driver" curl python3
ROUNDS=${HA_ROUNDS:-5}
FAULTS=${HA_FAULTS:-kill9 stop term cut}
RESTART_SEC=${HA_RESTART_SEC:-1}
GAP=${HA_GAP:-3}
OUT=${HA_JSON:-$B/ha-figures.json}
ROOT=0
[ "$(id -u)" = 0 ] && command -v nft >/dev/null && command -v ip >/dev/null && ROOT=1
[ $ROOT = 1 ] || FAULTS=${FAULTS//cut/}

# ---- the HA pool ----
if [ $ROOT = 1 ]; then start_etcd 1 netns; else start_etcd 1; fi
# default timings: node heartbeat 1 s, lease 2 s
HA_TOKEN=1 HA_HEARTBEAT=1s HA_SEGMENT=256M ha_pool_ini
NS=""
[ $ROOT = 1 ] && NS=netns
ha_master A $NS
ha_master B $NS
waitfor 20 ha_leader >/dev/null || fail "no leader elected"
pool_node n1
pool_node n2
run_node n1
N1=$NODE_PID
run_node n2
N2=$NODE_PID
wait_nodes "n1 n2" 30 || fail "the nodes did not mount"
echo "pool: masters A, B (ha = etcd), nodes n1, n2, etcd $ETCD_EPS; $ROUNDS rounds of: $FAULTS"

start_load() {	# start_load TAG: probe + driver
	spawn "probe-$1" "$B/soak/kvp-ha-probe" -c "$POOL_INI" --prefix "fig/$1" --interval-ms 10 \
		--size 4096 --read-ms 20 --json "$E2E_TMP/probe-$1.json"
	PROBE=$SPAWN_PID
	spawn "driver-$1" "$B/soak/kvp-soak-driver" -c "$POOL_INI" --clients 2 --seconds 3600 \
		--keys 128 --size 1K-64K --prefix "fig/drv-$1/" --json "$E2E_TMP/driver-$1.json"
	DRIVER=$SPAWN_PID
	sleep 2
}
stop_load() {	# stop_load TAG: both stopped, their verdict checked
	stop_pid "$DRIVER" TERM
	stop_pid "$PROBE" TERM
	pyjson "$E2E_TMP/driver-$1.json" 'r["wrong_bytes"] == 0 and r["wrong_meta"] == 0' ||
		fail "$1: the soak driver saw wrong bytes"
}
heal() {	# after a fault: both masters up, one leading, nodes back
	local m
	for m in A B; do alive "${HA_PID[$m]}" || ha_run "$m"; done
	waitfor 20 ha_leader >/dev/null || fail "no leader after healing"
	wait_nodes "n1 n2" 30 || fail "the nodes did not come back"
	sleep "$GAP"
}

declare -A KIND
for f in $FAULTS; do
	start_load "$f"
	for r in $(seq "$ROUNDS"); do
		L=$(ha_leader) || fail "no leader before round $r of $f"
		case $f in
		kill9) stop_pid "${HA_PID[$L]}" KILL; kill -USR1 "$PROBE" ;;
		stop)
			kill -STOP "${HA_PID[$L]}"
			kill -USR1 "$PROBE"
			waitfor 20 ha_is_leader "$(ha_other "$L")" || { kill -CONT "${HA_PID[$L]}"; fail "stop: no takeover"; }
			sleep 1
			kill -CONT "${HA_PID[$L]}"
			waitfor 10 ha_standby "$L" || fail "stop: $L did not step down after SIGCONT"
			;;
		term)
			kill -TERM "${HA_PID[$L]}"
			kill -USR1 "$PROBE"
			wait "${HA_PID[$L]}" || fail "term: master $L exited $?"
			forget "${HA_PID[$L]}"
			;;
		cut)
			in_netns "${HA_NS[$L]}" nft -f - <<EOF || fail "nft"
table inet kvpcut {
	chain out {
		type filter hook output priority 0; policy accept;
		ip daddr ${ETCD_HOST[0]} drop
	}
}
EOF
			kill -USR1 "$PROBE"
			waitfor 20 ha_is_leader "$(ha_other "$L")" || fail "cut: no takeover"
			waitfor 10 ha_standby "$L" || fail "cut: $L did not step down"
			in_netns "${HA_NS[$L]}" nft delete table inet kvpcut
			;;
		esac
		waitfor 20 ha_is_leader "$(ha_other "$L")" || fail "$f: $(ha_other "$L") did not take over"
		heal
	done
	stop_load "$f"
	KIND[$f]=$E2E_TMP/probe-$f.json
done

# ---- the baseline: one master, restarted like systemd would ----
for m in A B; do stop_pid "${HA_PID[$m]}" TERM; done
stop_pid "$N1" TERM
stop_pid "$N2" TERM
# the same pool, its master the address of A's RPC, without HA
sed -i -e "s|^master = etcd://.*|master = ${HA_RPC[A]}|" -e 's|^ha = etcd|ha = none|' "$POOL_INI"
cp "$E2E_TMP/A.ini" "$E2E_TMP/single.ini"
# the supervisor: Restart=on-failure, RestartSec=$RESTART_SEC
cat >"$E2E_TMP/supervise.sh" <<EOF
#!/bin/bash
trap 'kill -TERM \$child 2>/dev/null; wait \$child; exit 0' TERM
while :; do
	${HA_NS[A]:+nsenter --net=/run/netns/${HA_NS[A]} --} "$B/kvpool-master" -c "$POOL_INI" -c "$E2E_TMP/single.ini" &
	child=\$!
	echo \$child >"$E2E_TMP/single.pid"
	wait \$child
	rc=\$?
	[ \$rc = 0 ] && exit 0
	sleep $RESTART_SEC
done
EOF
chmod +x "$E2E_TMP/supervise.sh"
spawn single "$E2E_TMP/supervise.sh"
SUPERVISOR=$SPAWN_PID
single_up() { curl -sf -m 1 -o /dev/null "http://${HA_HTTP[A]}/health"; }
waitfor 10 single_up || fail "single master"
run_node n1
run_node n2
wait_nodes "n1 n2" 40 || fail "the nodes did not mount at the single master"
start_load single
for r in $(seq "$ROUNDS"); do
	kill -KILL "$(cat "$E2E_TMP/single.pid")"
	kill -USR1 "$PROBE"
	sleep 1
	waitfor 30 single_up || fail "no restart"
	wait_nodes "n1 n2" 40 || fail "the nodes did not come back to the single master"
	sleep "$GAP"
done
stop_load single
KIND[single]=$E2E_TMP/probe-single.json
stop_pid "$SUPERVISOR" TERM

# ---- the table ----
E2E_TMP=$E2E_TMP python3 - "$OUT" "$ROUNDS" "$RESTART_SEC" $FAULTS single <<'EOF' || exit 1
import json, os, statistics, sys
out, rounds, rsec, kinds = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
tmp = os.environ["E2E_TMP"]
names = {"kill9": "kill -9 of the leader", "stop": "SIGSTOP past the lease",
         "term": "SIGTERM (handover)", "cut": "leader cut from etcd (nft)",
         "single": "one master, kill -9, restart after %ss" % rsec}
res, bad = {}, False
print("%-38s %8s %8s %8s %8s %6s %6s %7s" % ("fault", "first", "first", "gap", "gap",
                                             "lost", "wrong", "puts"))
print("%-38s %8s %8s %8s %8s %6s %6s %7s" % ("", "median", "max", "median", "max", "", "", ""))
for k in kinds:
    r = json.load(open(os.path.join(tmp, "probe-%s.json" % k)))
    d = json.load(open(os.path.join(tmp, "driver-%s.json" % k)))
    first = [f["first_put_ms"] for f in r["faults"]]
    gap = [f["gap_ms"] for f in r["faults"]]
    res[k] = dict(rounds=len(first), first_put_ms=first, gap_ms=gap, lost=r["lost"],
                  wrong=r["wrong"] + d["wrong_bytes"], completed=r["completed"],
                  failed=r["failed"], errors=r["errors"])
    bad |= r["lost"] > 0 or r["wrong"] > 0 or d["wrong_bytes"] > 0 or min(first or [0]) < 0
    print("%-38s %7dms %7dms %7dms %7dms %6d %6d %7d" % (
        names[k], statistics.median(first), max(first), statistics.median(gap), max(gap),
        r["lost"], r["wrong"] + d["wrong_bytes"], r["completed"]))
json.dump(res, open(out, "w"), indent=1)
print("json:", out)
sys.exit(1 if bad else 0)
EOF
