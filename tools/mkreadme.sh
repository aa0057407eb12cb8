#!/bin/sh
# mkreadme.sh > README.md — README.md is docs/_head.md followed by the
# sections in docs/, in reading order, each file's headings one level down.
set -eu
cd "$(dirname "$0")/.."
order="quickstart config cli client master node fuse python service spill rdma-cuda-numa reliability shm internals-net"
cat docs/_head.md
echo
echo "## Contents"
echo
for d in $order; do
	[ -f "docs/$d.md" ] || continue
	title=$(sed -n 's/^# //p' "docs/$d.md" | head -n 1)
	anchor=$(printf '%s' "$title" | tr 'A-Z' 'a-z' | sed -e 's/[^a-z0-9 _-]//g' -e 's/ /-/g')
	echo "- [$title](#$anchor)"
done
for d in $order; do
	[ -f "docs/$d.md" ] || continue
	echo
	# demote headings outside code blocks: "# X" -> "## X"
	awk '/^```/ { code = !code } !code && /^#/ { print "#" $0; next } { print }' "docs/$d.md"
done
