#!/bin/bash
# cli.sh — every `kvpool` command and its exit codes against a real master
# and node on private loopback ports: put/get round trips (stdin, files,
# binary, 1-byte), ls (-l, -d, --limit, --json, paging), rm, stat, exists,
# pin, info, scan of the node's segment, mount, bench (waiting for a node,
# failed puts as errors), --help of every command, usage errors (exit 2)
# and missing keys (exit 3).
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh"
e2e_init cli
KVP=$B/kvpool
need "$KVP" "$B/kvpool-master" "$B/kvpool-node" python3
mnt=$E2E_TMP/mnt
on_cleanup "fuse_unmount '$mnt'"

pool_ini "[client]" "timeout = 10s" "replicas = 1" "[log]" "level = info"
pool_node "cli-$$" "segment_size = 128M" "remove_segment_on_exit = true" "heartbeat_interval = 500ms"
seg=$NODE_SEG

# ---- offline: help, version, usage errors (no daemons needed) ----------
expect 0 "$KVP" --help
grep -q "Usage: kvpool" "$E2E_TMP/out" || fail "--help has no usage line"
expect 0 "$KVP" --version
grep -q "^kvpool [0-9]" "$E2E_TMP/out" || fail "--version: $(cat "$E2E_TMP/out")"
for c in put get ls rm stat exists info ns pin scan mount bench replay; do
	expect 0 "$KVP" "$c" --help
	grep -q "Usage: kvpool .*$c" "$E2E_TMP/out" || fail "$c --help prints no usage"
	expect 0 "$KVP" help "$c"
done
ok "--help of the tool and of every command"
expect 2 "$KVP"
expect 2 "$KVP" frobnicate
grep -q "unknown command 'frobnicate'" "$E2E_TMP/err" || fail "unknown command message: $(cat "$E2E_TMP/err")"
expect 2 "$KVP" --bogus-option info
expect 2 kv put
expect 2 kv put a b c
expect 2 kv get
expect 2 kv ls --bogus
expect 2 kv ls a b
expect 2 kv ls -d ab
expect 2 kv rm
expect 2 kv rm --all somekey
expect 2 kv rm --prefix a --all
expect 2 kv stat
expect 2 kv info extra
expect 2 kv pin k1
expect 2 kv pin k1 soon
expect 2 kv exists
expect 2 kv scan a b
expect 2 kv bench --op frob
expect 2 kv bench --size 0
expect 2 kv bench --op mixed --batch 4
expect 2 kv put --replicas 0 k1
expect 2 "$KVP" -c "$E2E_TMP/pool.ini" -o no.such=1 info
grep -q "config" "$E2E_TMP/err" || fail "bad -o gives no config message"
expect 2 "$KVP" -c "$E2E_TMP/does-not-exist.ini" info
ok "usage and configuration errors exit 2"
expect 0 kv --print-config
grep -q "$MASTER_ADDR" "$E2E_TMP/out" || fail "--print-config lacks the master address"
expect 0 kv -o client.replicas=3 --print-config
grep -Eq "client\.replicas *= *3" "$E2E_TMP/out" || fail "-o not in --print-config"
expect 0 "$KVP" --master 127.0.0.1:1 --print-config
grep -q "127.0.0.1:1" "$E2E_TMP/out" || fail "--master not in --print-config"
ok "--print-config, -o, --master"

# No master yet: a clear connection error, exit 1.
expect 1 kv get k1
grep -q "^kvpool: get: .*(KVP_E" "$E2E_TMP/err" || fail "no-master error format: $(cat "$E2E_TMP/err")"
ok "unreachable master: exit 1 with a KVP_E code"

# ---- start the pool ------------------------------------------------------
run_master
# A master without nodes: bench waits (--wait, bounded) for a segment to put
# into, then stops before the timed part and says why, instead of timing
# puts that all fail or reporting their keys as missing.
for op in get put; do
	expect 1 kv bench --op $op --size 4K --count 10 --wait 1s
	grep -q "no capacity in the pool after 1.0 s: no node has mounted a segment" "$E2E_TMP/err" ||
		fail "bench --op $op without a node: $(cat "$E2E_TMP/err")"
	grep -q "throughput" "$E2E_TMP/out" && fail "bench --op $op without a node printed a report"
done
ok "bench without a node: exit 1, 'no capacity ... no node has mounted a segment'"
run_node "cli-$$"
# Started while the node may still be mounting: it waits for the segment.
expect 0 kv bench --op get --size 4K --count 20 --wait 20s --json
pyjson "$E2E_TMP/out" 'r["ok"] == 20 and r["errors"] == 0 and r["missing"] == 0' ||
	fail "bench right after the node started: $(cat "$E2E_TMP/out")"
wait_nodes "cli-$$" 20 || fail "the node did not mount at the master within 20 s"
ok "master and node up; bench waited for the node's segment"

# ---- put / get -------------------------------------------------------------
expect 0 kv put k1 < <(printf 'hello')
expect 0 kv get k1
[ "$(cat "$E2E_TMP/out")" = hello ] || fail "get k1 returned '$(cat "$E2E_TMP/out")'"
expect 0 kv put k2 - < <(printf 'world')
expect 0 kv get k2 -
[ "$(cat "$E2E_TMP/out")" = world ] || fail "get k2 - returned '$(cat "$E2E_TMP/out")'"
ok "stdin round trip"

head -c 3145731 /dev/urandom >"$E2E_TMP/big.bin"
expect 0 kv put bin/big "$E2E_TMP/big.bin"
expect 0 kv get bin/big
cmp -s "$E2E_TMP/out" "$E2E_TMP/big.bin" || fail "3 MiB binary value differs (stdout)"
mkdir "$E2E_TMP/dl"
expect 0 kv get bin/big "$E2E_TMP/dl/big.copy"
cmp -s "$E2E_TMP/dl/big.copy" "$E2E_TMP/big.bin" || fail "3 MiB binary value differs (file)"
[ "$(ls -A "$E2E_TMP/dl")" = big.copy ] || fail "get FILE left temporary files: $(ls -A "$E2E_TMP/dl")"
printf 'X' >"$E2E_TMP/dl/big.copy"
expect 0 kv get bin/big "$E2E_TMP/dl/big.copy"
cmp -s "$E2E_TMP/dl/big.copy" "$E2E_TMP/big.bin" || fail "get FILE did not replace an existing file"
ok "binary file round trip, atomic get to a file"

printf '\0' >"$E2E_TMP/one.bin"
expect 0 kv put bin/one "$E2E_TMP/one.bin"
expect 0 kv get bin/one
cmp -s "$E2E_TMP/out" "$E2E_TMP/one.bin" || fail "1-byte NUL value differs"
expect 0 kv put bin/nuls < <(printf 'a\0b\0\377\n')
expect 0 kv get bin/nuls
printf 'a\0b\0\377\n' | cmp -s - "$E2E_TMP/out" || fail "value with NUL bytes differs"
expect 0 kv put -- -dash < <(printf 'dash')
expect 0 kv get -- -dash
[ "$(cat "$E2E_TMP/out")" = dash ] || fail "get -- -dash"
expect 0 kv rm --force -- -dash
ok "1-byte and NUL-holding values, a key starting with -"

expect 1 kv put empty </dev/null
grep -q "KVP_EINVAL" "$E2E_TMP/err" || fail "empty value message: $(cat "$E2E_TMP/err")"
expect 1 kv put k1 < <(printf 'again')
grep -q "^kvpool: put: k1: .*(KVP_EEXIST)$" "$E2E_TMP/err" || fail "EEXIST message: $(cat "$E2E_TMP/err")"
expect 0 kv put --exist-ok k1 < <(printf 'again')
expect 0 kv get k1
[ "$(cat "$E2E_TMP/out")" = hello ] || fail "--exist-ok changed the value"
head -c 2097152 /dev/zero >"$E2E_TMP/2m.bin"
expect 1 kv -o cluster.max_object_size=1M put toobig "$E2E_TMP/2m.bin"
grep -q "KVP_ETOOBIG" "$E2E_TMP/err" || fail "too-big message: $(cat "$E2E_TMP/err")"
expect 1 kv -o cluster.max_object_size=1M put toobig <"$E2E_TMP/2m.bin"
grep -q "KVP_ETOOBIG" "$E2E_TMP/err" || fail "too-big stdin message: $(cat "$E2E_TMP/err")"
expect 1 kv put nofile "$E2E_TMP/no-such-file"
expect 3 kv get no/such/key
[ "$(cat "$E2E_TMP/err")" = "kvpool: get: no/such/key: object not found (KVP_ENOTFOUND)" ] ||
	fail "not-found message: $(cat "$E2E_TMP/err")"
expect 3 kv get no/such/key "$E2E_TMP/dl/nothing"
[ -e "$E2E_TMP/dl/nothing" ] && fail "a failed get created its FILE"
ok "put errors exit 1, missing key exits 3 with the documented message"

# ---- ls -------------------------------------------------------------------
weird=$'we\001ird\377\nkey\xc3\xa9'
expect 0 kv put "$weird" < <(printf 'w')
for k in dir/a dir/b dir/sub/c other; do expect 0 kv put "$k" < <(printf '%s' "$k"); done
expect 0 kv ls dir/
[ "$(cat "$E2E_TMP/out")" = "$(printf 'dir/a\ndir/b\ndir/sub/c')" ] || fail "ls dir/: $(cat "$E2E_TMP/out")"
expect 0 kv ls dir/ -d /
[ "$(cat "$E2E_TMP/out")" = "$(printf 'dir/a\ndir/b\ndir/sub/')" ] || fail "ls -d /: $(cat "$E2E_TMP/out")"
expect 0 kv ls --limit 2
[ "$(wc -l <"$E2E_TMP/out")" = 2 ] || fail "ls --limit 2 printed $(wc -l <"$E2E_TMP/out") lines"
expect 0 kv ls -l dir/
grep -Eq '^ +5 +[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8} +1  dir/a$' "$E2E_TMP/out" || fail "ls -l: $(cat "$E2E_TMP/out")"
expect 0 kv ls -l -d / dir/
grep -Eq '^ +PRE .*dir/sub/$' "$E2E_TMP/out" || fail "ls -l -d: $(cat "$E2E_TMP/out")"
expect 0 kv ls --json -l
python3 - "$E2E_TMP/out" "$weird" <<'EOF' || fail "ls --json: $(head -c 600 "$E2E_TMP/out")"
import json, sys
entries = json.load(open(sys.argv[1], encoding="utf-8"))
names = [e["name"] for e in entries]
# The expected JSON decoding of the weird key: valid UTF-8 stays, other bytes
# become the code point of the same value.
raw = sys.argv[2].encode("utf-8", "surrogateescape")
want = ""
i = 0
while i < len(raw):
    for n in (4, 3, 2, 1):
        try:
            ch = raw[i:i + n].decode("utf-8")
            if len(ch) == 1:
                want += ch; i += n; break
        except UnicodeDecodeError:
            pass
    else:
        want += chr(raw[i]); i += 1
assert want in names, (want, names)
for k in ("k1", "k2", "bin/big", "bin/one", "dir/a", "dir/sub/c", "other"):
    assert k in names, k
big = [e for e in entries if e["name"] == "bin/big"][0]
assert big["size"] == 3145731 and big["prefix"] is False and big["replicas"] == 1, big
assert big["put_time_ns"] > 1600000000 * 10**9, big
EOF
expect 0 kv ls --json -d / dir/
python3 -c '
import json, sys
e = json.load(open(sys.argv[1]))
assert [x["name"] for x in e] == ["dir/a", "dir/b", "dir/sub/"], e
assert e[2]["prefix"] is True' "$E2E_TMP/out" || fail "ls --json -d: $(cat "$E2E_TMP/out")"
expect 0 kv ls --json nothing-here/
python3 -c 'import json,sys; assert json.load(open(sys.argv[1])) == []' "$E2E_TMP/out" || fail "empty ls --json"
ok "ls: prefix, -d, --limit, -l, --json with control bytes and invalid UTF-8"

# Paging: more keys than one page (1000).
expect 0 kv bench --op put --size 1 --count 1234 --prefix page/ --keep --json
expect 0 kv ls page/
[ "$(wc -l <"$E2E_TMP/out")" = 1234 ] || fail "ls page/ printed $(wc -l <"$E2E_TMP/out") keys, want 1234"
sort -c "$E2E_TMP/out" 2>/dev/null || LC_ALL=C sort -c "$E2E_TMP/out" || fail "ls output not in byte order"
expect 0 kv ls page/ --limit 1100 --json
python3 -c 'import json,sys; assert len(json.load(open(sys.argv[1]))) == 1100' "$E2E_TMP/out" ||
	fail "ls --limit 1100 --json"
ok "ls pages through 1234 keys"

# ---- stat / exists / pin ---------------------------------------------------
expect 0 kv stat bin/big
grep -Eq '^size: +3145731 ' "$E2E_TMP/out" || fail "stat: $(cat "$E2E_TMP/out")"
grep -Eq "^  cli-$$:mem:[0-9]+ " "$E2E_TMP/out" || fail "stat replica line: $(cat "$E2E_TMP/out")"
expect 0 kv stat --json bin/big
python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
assert s["key"] == "bin/big" and s["size"] == 3145731, s
assert len(s["replicas"]) == 1 and s["replicas"][0]["node"] == sys.argv[2], s
assert s["replicas"][0]["tier"] == "mem" and s["replicas"][0]["alloc_len"] >= 3145731, s
assert len(s["checksum"]) == 16 and s["generation"] > 0 and s["put_time_ns"] > 0, s' \
	"$E2E_TMP/out" "cli-$$" || fail "stat --json: $(cat "$E2E_TMP/out")"
expect 3 kv stat no/such/key
grep -q "KVP_ENOTFOUND" "$E2E_TMP/err" || fail "stat not-found message"
expect 0 kv exists k1
[ "$(cat "$E2E_TMP/out")" = yes ] || fail "exists k1 printed $(cat "$E2E_TMP/out")"
expect 3 kv exists no/such/key
expect 3 kv exists -q no/such/key
[ -s "$E2E_TMP/out" ] && fail "exists -q printed something"
expect 0 kv pin k1 1h
expect 0 kv stat --json k1   # the master keeps pins in whole seconds, rounded up
python3 -c 'import json,sys; p = json.load(open(sys.argv[1]))["pin_ms"]; assert 3500000 < p <= 3601000, p' \
	"$E2E_TMP/out" || fail "pin not visible in stat: $(cat "$E2E_TMP/out")"
expect 0 kv pin k1 0
expect 3 kv pin no/such/key 10s
ok "stat, exists, pin"

# ---- info -----------------------------------------------------------------
expect 0 kv info
grep -q "^nodes: *1$" "$E2E_TMP/out" || fail "info: $(cat "$E2E_TMP/out")"
grep -q "cli-$$" "$E2E_TMP/out" || fail "info lacks the node line"
expect 0 kv info --json
python3 -c '
import json, sys
i = json.load(open(sys.argv[1]))
assert len(i["nodes"]) == 1 and i["nodes"][0]["name"] == sys.argv[2], i
assert i["keys"] >= 1240, i
assert i["capacity"] >= 100 << 20 and 3145731 <= i["bytes_used"] <= i["capacity"], i
for k in ("evictions", "demotions", "leases"): assert isinstance(i[k], int), k' \
	"$E2E_TMP/out" "cli-$$" || fail "info --json: $(cat "$E2E_TMP/out")"
ok "info"

# ---- scan (offline, straight from the segment file) ------------------------
expect 0 kv scan "$seg"
grep -q "bin/big" "$E2E_TMP/out" || fail "scan does not list bin/big"
expect 0 "$KVP" scan "/dev/shm/$seg" --no-verify
grep -q "dir/sub/c" "$E2E_TMP/out" || fail "scan --no-verify does not list dir/sub/c"
# without a segment: the host's segments, this node's one live
expect 0 kv scan
grep -Eq "^live .*/dev/shm/$seg$" "$E2E_TMP/out" || fail "scan lists no live $seg: $(cat "$E2E_TMP/out")"
expect 0 kv scan --json "$seg"
python3 -c 'import json,sys; d = json.load(open(sys.argv[1])); assert "bin/big" in json.dumps(d)' "$E2E_TMP/out" ||
	fail "scan --json is not JSON or lacks bin/big"
expect 1 kv scan "$E2E_TMP/no-such-segment"
grep -q "^kvpool: scan: " "$E2E_TMP/err" || fail "scan error format: $(cat "$E2E_TMP/err")"
head -c 8192 /dev/urandom >"$E2E_TMP/garbage"
expect 1 kv scan "$E2E_TMP/garbage"
ok "scan"

# ---- rm -------------------------------------------------------------------
# A finished get releases its lease: get && rm works at once.
expect 0 kv put lease/read < <(printf 'r')
kv get lease/read >/dev/null && kv rm lease/read || fail "get && rm of a just-read key"
expect 3 kv exists lease/read
# A reader that died mid-read holds its lease (master.lease_ttl, 5 s) from
# right here, however slowly the checks above ran (sanitizer builds).
hold_lease k2
expect 1 kv rm k2
grep -q "^kvpool: rm: k2: .*--force.*(KVP_ELEASED)$" "$E2E_TMP/err" || fail "leased rm message: $(cat "$E2E_TMP/err")"
expect 0 kv rm --force k2
expect 3 kv get k2
expect 3 kv rm k2
grep -q "^kvpool: rm: k2: .*(KVP_ENOTFOUND)$" "$E2E_TMP/err" || fail "rm not-found message"
expect 3 kv rm other no/such/key
expect 3 kv get other
expect 0 kv rm --prefix dir/
[ "$(cat "$E2E_TMP/out")" = "removed 3 objects" ] || fail "rm --prefix printed: $(cat "$E2E_TMP/out")"
expect 0 kv ls dir/
[ -s "$E2E_TMP/out" ] && fail "keys left after rm --prefix dir/"
expect 0 kv rm --force "$weird"
# A leased object survives rm --prefix without --force, and that is an error.
expect 0 kv put lease/x < <(printf 'x')
hold_lease lease/x
expect 1 kv rm --prefix lease/
grep -q "remain.*--force.*(KVP_ELEASED)" "$E2E_TMP/err" || fail "rm --prefix of a leased object: $(cat "$E2E_TMP/err")"
expect 0 kv exists lease/x
expect 0 kv rm --prefix lease/ --force
[ "$(cat "$E2E_TMP/out")" = "removed 1 object" ] || fail "rm --prefix --force printed: $(cat "$E2E_TMP/out")"
expect 3 kv exists lease/x
ok "rm keys, rm --prefix, leases and --force"

# ---- bench ----------------------------------------------------------------
for args in "--op put --size 4K --count 200 --threads 2" \
	"--op get --size 64K --count 100 --threads 2 --batch 8" \
	"--op exists --size 1K --count 100 --batch 16" \
	"--op get --size 1-256K --count 60 --path tcp" \
	"--op get --size 128K --count 40 --path local" \
	"--op mixed --size 1-64K --count 400 --threads 4 --keys 8"; do
	# shellcheck disable=SC2086
	expect 0 kv bench $args --json
	python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["errors"] == 0 and r["mismatches"] == 0 and r["missing"] == 0, r
n = r["count"]
assert r["ok"] == n, r
assert r["ops_per_s"] > 0 and r["lat_us"]["p50"] <= r["lat_us"]["p99"] <= r["lat_us"]["p999"], r
if r["op"] in ("put", "get"): assert r["bytes"] >= n * r["size_min"] and r["gb_per_s"] > 0, r
# The library reports which path moved the bytes.
if r["path"] == "tcp": assert r["tcp_bytes"] >= r["bytes"] and r["local_bytes"] == 0, r
if r["path"] == "local": assert r["local_bytes"] >= r["bytes"] and r["tcp_bytes"] == 0, r' \
		"$E2E_TMP/out" || fail "bench $args: $(cat "$E2E_TMP/out")"
done
expect 0 kv bench --op put --size 4K --count 50
grep -q "throughput" "$E2E_TMP/out" && grep -q "p999" "$E2E_TMP/out" || fail "bench text report: $(cat "$E2E_TMP/out")"
expect 0 kv ls bench/
[ -s "$E2E_TMP/out" ] && fail "bench left keys behind: $(head -n 3 "$E2E_TMP/out")"
ok "bench put/get/exists/mixed, batch, local and tcp paths, verified"
# --hashed-keys: key i is named by a bijective hash of i (the same names
# for a later --existing get), so the keys' order is not the put order
expect 0 kv bench --op put --size 1K --count 300 --batch 16 --hashed-keys --prefix hk/ --keep --json
pyjson "$E2E_TMP/out" 'r["hashed_keys"] is True and r["ok"] == 300 and r["errors"] == 0' ||
	fail "bench --hashed-keys put: $(cat "$E2E_TMP/out")"
expect 0 kv bench --op get --size 1K --count 300 --hashed-keys --prefix hk/ --existing --keep --json
pyjson "$E2E_TMP/out" 'r["ok"] == 300 and r["missing"] == 0 and r["mismatches"] == 0' ||
	fail "bench --hashed-keys get --existing: $(cat "$E2E_TMP/out")"
expect 0 kv ls hk/
python3 -c '
import sys
def fmix(h):
    h ^= h >> 16; h = h * 0x85ebca6b & 0xffffffff; h ^= h >> 13
    h = h * 0xc2b2ae35 & 0xffffffff; return h ^ h >> 16
want = ["hk/%08x" % fmix(i) for i in range(300)]
got = open(sys.argv[1]).read().split()
assert sorted(got) == sorted(want), (got[:3], want[:3])
assert got != want, "in put order"' "$E2E_TMP/out" || fail "bench --hashed-keys names: $(head -n 3 "$E2E_TMP/out")"
expect 0 kv bench --op exists --size 1K --count 300 --hashed-keys --prefix hk/ --existing
expect 0 kv ls hk/
[ -s "$E2E_TMP/out" ] && fail "bench --hashed-keys left keys behind: $(head -n 3 "$E2E_TMP/out")"
expect 2 kv bench --hashed-keys --count 4294967297
ok "bench --hashed-keys: names by a hash of the index, found again by --existing, removed"
# Values larger than the node's segment: every untimed put fails. Their keys
# count as errors (put_failed), not as missing objects, and the run fails.
for op in get exists; do
	expect 1 kv bench --op $op --size 129M --count 2 --json
	pyjson "$E2E_TMP/out" 'r["errors"] == 2 and r["put_failed"] == 2 and r["missing"] == 0 and r["ok"] == 0' ||
		fail "bench --op $op with failing puts: $(cat "$E2E_TMP/out")"
	grep -q "KVP_ENOSPC" "$E2E_TMP/err" || fail "bench --op $op: put errors not shown: $(cat "$E2E_TMP/err")"
done
ok "bench: failed untimed puts are errors, not missing keys"

# ---- mount (FUSE view) ------------------------------------------------------
if [ -e /dev/fuse ] && command -v fusermount3 >/dev/null; then
	mkdir "$mnt"
	spawn mount "$KVP" -c "$POOL_INI" mount -f "$mnt"
	mpid=$SPAWN_PID
	for _ in $(seq 50); do
		mountpoint -q "$mnt" && break
		kill -0 $mpid 2>/dev/null || break
		sleep 0.2
	done
	mountpoint -q "$mnt" || fail "kvpool mount did not mount within 10 s"
	[ "$(cat "$mnt/k1")" = hello ] || fail "cat MNT/k1 through the mount"
	cmp -s "$mnt/bin/big" "$E2E_TMP/big.bin" || fail "MNT/bin/big differs"
	fusermount3 -u "$mnt" || fail "fusermount3 -u"
	for _ in $(seq 50); do kill -0 $mpid 2>/dev/null || break; sleep 0.1; done
	kill -0 $mpid 2>/dev/null && fail "kvpool mount did not exit after unmount"
	wait $mpid
	forget $mpid
	ok "mount: cat through the FUSE view, unmount"
	expect 2 kv mount
else
	echo "note: /dev/fuse or fusermount3 missing, mount not tested"
fi

expect 0 kv rm --all --force
grep -Eq "^removed [0-9]+ objects?$" "$E2E_TMP/out" || fail "rm --all printed: $(cat "$E2E_TMP/out")"
expect 0 kv ls
[ -s "$E2E_TMP/out" ] && fail "keys left after rm --all"
ok "rm --all"
echo "PASS cli.sh"
