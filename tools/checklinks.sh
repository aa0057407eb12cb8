#!/bin/sh
# checklinks.sh [FILE.md...] — every relative link in the Markdown files
# (default: README.md and docs/*.md) must point at a file or folder that
# exists, and a #fragment at a heading of the target (GitHub's anchors:
# lower case, punctuation dropped, spaces to '-', "-1", "-2"... for repeats).
# Links inside code blocks and `code spans` are not links; http(s):,
# mailto: and other schemes are not checked (no network). Prints one
# "FILE:LINE: [text](target): why" per broken link; exit 0 when there is
# none, 1 otherwise. tests/e2e/doc_links.sh runs it.
cd "$(dirname "$0")/.." || exit 1
[ $# -gt 0 ] || set -- README.md docs/*.md
exec python3 - "$@" <<'EOF'
import os, re, sys

def prose(text):
    """text without fenced code blocks and `code spans` (which may span
    lines), newlines kept so that line numbers stay right."""
    out, fenced = [], False
    for line in text.split("\n"):
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    keep_lines = lambda m: "\n" * m.group(0).count("\n")
    # a code span ends at its paragraph at the latest
    return re.sub(r"(`+)((?:(?!\n[ \t]*\n).)+?)\1", keep_lines, "\n".join(out), flags=re.S)

def slug(heading):
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)   # \w keeps letters, digits, '_'
    return text.replace(" ", "-")

anchors_of = {}
def anchors(path):
    if path not in anchors_of:
        seen, out, state = {}, set(), [False]
        for line in open(path, encoding="utf-8"):
            if re.match(r"^\s*(```|~~~)", line):
                state[0] = not state[0]
                continue
            m = None if state[0] else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
        for a in re.findall(r'<a\s+(?:name|id)="([^"]+)"', open(path, encoding="utf-8").read()):
            out.add(a)
        anchors_of[path] = out
    return anchors_of[path]

link = re.compile(r"!?\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
refdef = re.compile(r"^\s{0,3}\[([^\]]+)\]:\s*<?(\S+?)>?(?:\s+.*)?$")
bad = 0
for md in sys.argv[1:]:
    if not os.path.isfile(md):
        print(f"{md}: no such file")
        bad += 1
        continue
    for no, line in enumerate(prose(open(md, encoding="utf-8").read()).split("\n"), 1):
        found = [(m.group(1), m.group(2)) for m in link.finditer(line)]
        m = refdef.match(line)
        if m:
            found.append((m.group(1), m.group(2)))
        for text, target in found:
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue    # http:, https:, mailto:, ...
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            why = None
            if not os.path.exists(dest):
                why = f"{dest} does not exist"
            elif frag and dest.endswith(".md") and frag not in anchors(dest):
                why = f"no heading #{frag} in {dest}"
            elif frag and not dest.endswith(".md"):
                why = f"#{frag}: anchors are checked in .md files only"
            if why:
                print(f"{md}:{no}: [{text}]({target}): {why}")
                bad += 1
sys.exit(1 if bad else 0)
EOF
