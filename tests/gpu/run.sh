#!/bin/bash
# tests/gpu/run.sh — every CUDA check of kvpool in one go, for a machine
# with an NVIDIA GPU (driver + libcudart.so reachable by the dynamic
# loader, e.g. LD_LIBRARY_PATH=/usr/local/cuda/lib64). Builds what it needs,
# then:
#   1. kvpool selftest cuda        1 GiB each way between device memory and a
#                                  host-registered shared mapping, next to
#                                  cudaMemcpy from pinned memory (the limit)
#   2. build/tests/t_cuda          pointer kinds and round trips on the GPU
#   3. a private pool (master + node, 3 GiB segment), then
#      kvpool selftest cuda --pool put_from/get_into of device memory on the
#                                  local path (cudaMemcpy into the segment)
#      ... with another host_id    the remote path (pinned staging + TCP)
#   4. examples/prefix_reuse.py --device cuda against that pool: a model's
#      KV pages stored from and loaded into CUDA tensors, bytes, logits
#      (fp32, 1e-4) and greedy tokens checked against a full recompute; it
#      needs a Python with torch built for CUDA (GPU_PYTHON, default
#      python3) and its development headers, and is skipped with the reason
#      when either is missing (the rest still counts); a module that does
#      not build fails
# Prints every result; exit 0 all passed, 1 a check failed, 77 no GPU.
# Usage: tests/gpu/run.sh [SIZE]   (default 1G; the pool gets 3 x SIZE)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root" || exit 1
size=${1:-1G}
B=$root/build
export KVP_BUILD=$B

make -j"$(nproc)" build/kvpool build/kvpool-master build/kvpool-node build/tests/t_cuda \
	>"/tmp/kvp-gpu-build.$$.log" 2>&1 || {
	tail -n 30 "/tmp/kvp-gpu-build.$$.log"
	echo "FAIL: build"
	exit 1
}
rm -f "/tmp/kvp-gpu-build.$$.log"

echo "== 1. kvpool selftest cuda --size $size"
"$B/kvpool" selftest cuda --size "$size"
rc=$?
if [ $rc = 77 ]; then
	echo "skip: no usable GPU here"
	exit 77
fi
[ $rc = 0 ] || { echo "FAIL: selftest cuda exited $rc"; exit 1; }

echo "== 2. t_cuda"
"$B/tests/t_cuda" || { echo "FAIL: t_cuda"; exit 1; }

echo "== 3. device memory through a pool"
tmp=$(mktemp -d /tmp/kvp-gpu.XXXXXX)
seg=kvpt-gpu-$$
pids=()
cleanup() {
	local rc=$?
	trap - EXIT
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	sleep 0.5
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	[ $rc != 0 ] && for l in "$tmp"/*.log; do echo "--- $l"; tail -n 20 "$l"; done
	rm -f "/dev/shm/$seg"
	rm -rf "$tmp"
	exit $rc
}
trap cleanup EXIT
bytes=$(python3 -c "
import sys
s = sys.argv[1]; m = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
print(int(s[:-1]) * m[s[-1].upper()] if s[-1].upper() in m else int(s))" "$size")
segsize=$(( (3 * bytes / 1048576) + 64 ))M
read -r mport mhttp dport dhttp <<<"$(python3 "$root/tests/free_ports.py" 4)"
cat >"$tmp/pool.ini" <<EOF
[cluster]
master = 127.0.0.1:$mport
max_object_size = 256M
[master]
listen = 127.0.0.1:$mport
http_listen = 127.0.0.1:$mhttp
metadata_server = false
[node]
name = gpu-$$
listen = 127.0.0.1:$dport
http_listen = 127.0.0.1:$dhttp
segment = $seg
segment_size = $segsize
remove_segment_on_exit = true
[client]
timeout = 60s
EOF
"$B/kvpool-master" -c "$tmp/pool.ini" >"$tmp/master.log" 2>&1 &
pids+=($!)
"$B/kvpool-node" -c "$tmp/pool.ini" >"$tmp/node.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
	"$B/kvpool" -c "$tmp/pool.ini" info 2>/dev/null | grep -q "gpu-$$" && break
	sleep 0.1
done
echo "-- local path (same host: cudaMemcpy between the segment and the GPU)"
"$B/kvpool" -c "$tmp/pool.ini" selftest cuda --size "$size" --pool ||
	{ echo "FAIL: device memory through the local path"; exit 1; }
echo "-- remote path (another host_id: pinned staging + TCP)"
KVPOOL_CLIENT_HOST_ID=gpu-elsewhere-$$ "$B/kvpool" -c "$tmp/pool.ini" selftest cuda \
	--size "$size" --pool ||
	{ echo "FAIL: device memory through the remote path"; exit 1; }

echo "== 4. examples/prefix_reuse.py on CUDA tensors"
py=${GPU_PYTHON:-python3}
if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
	echo "skip: $py has no torch with CUDA (GPU_PYTHON names another interpreter)"
elif ! inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])') ||
	[ ! -f "$inc/Python.h" ]; then
	echo "skip: $py has no development headers (python3-dev) to build the module with"
elif ! make -s BUILD=build PYTHON="$py" python >"$tmp/make-python.log" 2>&1; then
	tail -n 20 "$tmp/make-python.log"
	echo "FAIL: the Python module did not build"
	exit 1
else
	PYTHONPATH="$B/python" "$py" examples/prefix_reuse.py --config "$tmp/pool.ini" \
		--device cuda >"$tmp/prefix_reuse.out" 2>&1
	rc=$?
	cat "$tmp/prefix_reuse.out"
	grep -q '^\[B\] device: cuda' "$tmp/prefix_reuse.out" &&
		grep -q '^\[B\] verdict: PASS' "$tmp/prefix_reuse.out" && [ $rc = 0 ] ||
		{ echo "FAIL: prefix_reuse.py on CUDA (exit $rc)"; exit 1; }
fi
echo "gpu checks: all passed"
