#!/bin/sh
# ini2man.sh conf/kvpool.ini > man/kvpool.ini.5 — the kvpool.ini(5) man page
# is generated from the example INI (itself generated from the config table),
# so the three never drift.
set -eu
ini=${1:-conf/kvpool.ini}
cat <<'HDR'
.TH KVPOOL.INI 5 "" "kvpool" "File Formats"
.SH NAME
kvpool.ini \- configuration of the kvpool KV-cache pool
.SH DESCRIPTION
One INI file configures \fBkvpool-master\fR(8), \fBkvpool-node\fR(8), \fBkvpool\fR(1)
and libkvpool. Values are read in this order, later wins: built-in defaults,
the file (\fB\-c\fR FILE, else /etc/kvpool/kvpool.ini if it exists), the
environment (Mooncake's \fBMOONCAKE_*\fR variables, then
\fBKVPOOL_\fISECTION\fB_\fIKEY\fR), then command-line overrides
(\fB\-o\fR section.key=value). An unknown section or key, a bad value or a
duplicate key stops start-up with \fIFILE\fR:\fILINE\fR: [section] key: message.
.PP
Sizes take K, M, G, T suffixes (powers of 1024); durations take ms, s, m, h
(a bare number is milliseconds); booleans are true/false, yes/no, on/off, 1/0.
.SH KEYS
HDR
awk '
/^\[.*\]$/ { sec=substr($0,2,length($0)-2); print ".SS [" sec "]"; help=""; desc=1; next }
/^# [a-z_]+ = / { line=substr($0,3); split(line, kv, " = "); key=kv[1]; def=substr(line, length(key)+4);
	print ".TP"; print "\\fB" key "\\fR = " def; print help; help=""; next }
/^#/ { if (sec == "") next; t=substr($0,3); if (t == "") next; gsub(/\\/, "\\\\", t);
	help = (help == "" ? t : help "\n" t); next }
/^$/ { if (desc && help != "") { print help; help="" } desc=0; next }
' "$ini"
cat <<'TAIL'
.SH FILES
/etc/kvpool/kvpool.ini
.SH SEE ALSO
kvpool(1), kvpool-master(8), kvpool-node(8)
TAIL
