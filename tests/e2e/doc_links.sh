#!/bin/bash
# doc_links.sh — the documentation cannot point nowhere: every relative
# link in README.md and docs/*.md resolves to a file and, with a #fragment,
# to a heading of it (tools/checklinks.sh); every docs/*.md is linked from
# README.md and from docs/index.md; and the checker itself finds a broken
# file link, a broken anchor and a link hidden in code (which is not one),
# and computes GitHub's anchors for repeated and punctuated headings.
# Exit 0 pass, 1 fail, 77 skip.
. "$(dirname "$0")/lib.sh" || exit 1
e2e_init doc_links
need python3
cd "$E2E_ROOT" || fail "cd $E2E_ROOT"
check=tools/checklinks.sh

"$check" >"$E2E_TMP/out" 2>&1 || fail "broken links:
$(cat "$E2E_TMP/out")"
ok "every relative link in README.md and docs/*.md resolves"

for d in docs/*.md; do
	f=${d#docs/}
	[ "$f" = index.md ] && continue
	grep -q "](docs/$f\(#[^)]*\)\?)" README.md || fail "README.md does not link $d"
	grep -q "]($f\(#[^)]*\)\?)" docs/index.md || fail "docs/index.md does not link $d"
done
grep -q "](docs/index.md)" README.md || fail "README.md does not link docs/index.md"
ok "README.md and docs/index.md link every docs/*.md"

# The checker on documents with known faults: it must report each broken
# link (and nothing that is not one).
t=$E2E_TMP/t
mkdir -p "$t/sub"
cat >"$t/a.md" <<'EOF'
# Title with `code`, punctuation: and (parens)
## Again
## Again
See [b](sub/b.md#the-end), [self](#title-with-code-punctuation-and-parens),
[the second Again](#again-1), [web](https://example.com/x.md) and
[a folder](sub/).
Broken: [gone](missing.md), [no anchor](sub/b.md#nowhere), [bad self](#again-2).
`[not a link](nothere.md)` and a span over
two lines: `[still code](
nothere.md)`.
```
[in a block](nothere.md)
```
[ref]: sub/missing-too.md
EOF
printf '# The end\n' >"$t/sub/b.md"
"$check" "$t/a.md" >"$E2E_TMP/out" 2>&1 && fail "a document with broken links passed: $(cat "$E2E_TMP/out")"
for want in "\[gone\](missing.md)" "\[no anchor\](sub/b.md#nowhere)" "\[bad self\](#again-2)" \
	"\[ref\](sub/missing-too.md)"; do
	grep -q "$want" "$E2E_TMP/out" || fail "not reported: $want; got: $(cat "$E2E_TMP/out")"
done
[ "$(wc -l <"$E2E_TMP/out")" = 4 ] || fail "reported more than the 4 broken links: $(cat "$E2E_TMP/out")"
grep -q ":7: \[gone\]" "$E2E_TMP/out" || fail "wrong line number: $(cat "$E2E_TMP/out")"
ok "the checker reports broken files, anchors and references, not code or URLs"
