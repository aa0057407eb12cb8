#!/bin/bash
# reliability_short.sh — the soak (tests/soak.sh) cut to fit `make test`:
# 4 client processes for 50 s against a master and 3 nodes while every fault
# this machine can inject runs (node kill -9 + restart, a client killed
# mid-put, node SIGSTOP past client_ttl, master kill -9 + restart, a network
# partition of the namespaced node (three times), /dev/shm full, spill
# filesystem full).
# Then the pool must recover and pass a strict clean run. Fails on any wrong
# byte, any operation past its timeout, any daemon or client crash.
# Exit 0 pass, 1 fail, 77 skip (binaries not built).
# run.sh: alone — its faults partition a namespace with nftables and fail any
# operation past its timeout.
root=$(cd "$(dirname "$0")/../.." && pwd)
export SOAK_SECONDS=${SOAK_SECONDS:-50}
export SOAK_CLIENTS=${SOAK_CLIENTS:-4}
export SOAK_GAP=${SOAK_GAP:-1.5}
export SOAK_SETTLE=${SOAK_SETTLE:-8}
export SOAK_CHECK_SECONDS=${SOAK_CHECK_SECONDS:-4}
# Every fault, the partition three times: a transfer cut mid-payload once
# left a TCP read spinning past its timeout (fixed in src/lib/xp_tcp.c).
export SOAK_FAULTS=${SOAK_FAULTS:-partition,node_kill,client_kill,partition,node_stop,master_kill,partition,shm_full,spill_full}
exec bash "$root/tests/soak.sh" "${KVP_BUILD:-$root/build}"
