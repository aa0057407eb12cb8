#!/bin/sh
# ini2man.sh [conf/kvpool.ini [VERSION]] > kvpool.ini.5 — the kvpool.ini(5)
# man page is generated from the example INI (itself generated from the
# config table in src/common/conf_table.c), so the three never drift.
# tools/install.sh runs it at install time.
set -eu
ini=${1:-conf/kvpool.ini}
version=${2:-}
cat <<HDR
.TH KVPOOL.INI 5 "" "kvpool $version" "File Formats"
HDR
cat <<'HDR'
.SH NAME
kvpool.ini \- configuration of the kvpool KV-cache pool
.SH SYNOPSIS
.B /etc/kvpool/kvpool.ini
.br
.B /etc/kvpool/node\-\fINAME\fB.ini
.SH DESCRIPTION
One INI file configures \fBkvpool\-master\fR(8), \fBkvpool\-node\fR(8),
\fBkvpool\fR(1) and libkvpool. Values are read in this order, later wins:
built-in defaults; the files (\fB\-c\fR\~\fIFILE\fR, repeatable where the
program allows it, each later file on top of the earlier ones; without
\fB\-c\fR, /etc/kvpool/kvpool.ini if it exists); the environment (Mooncake's
\fBMOONCAKE_*\fR variables, then \fBKVPOOL_\fISECTION\fB_\fIKEY\fR in upper
case); then command-line overrides (\fB\-o\fR\~\fIsection.key=value\fR).
.PP
An unknown section or key, a bad value, or the same key twice in one file
stops start-up with \fIFILE\fR:\fILINE\fR: [\fIsection\fR] \fIkey\fR:
\fImessage\fR. The same key in two layered files is fine: the later file
wins. This is how \fBkvpool\-node@\fINAME\fB.service\fR runs several nodes
on one host: /etc/kvpool/kvpool.ini holds what they share, and
/etc/kvpool/node\-\fINAME\fR.ini each node's [node] name, segment, listen,
http_listen and spill path.
.PP
Sizes take K, M, G, T suffixes (powers of 1024); durations take ms, s, m, h
(a bare number is milliseconds); ratios are 0..1 or a percentage; booleans
are true/false, yes/no, on/off, 1/0. Strings may be quoted ("") to be empty
or to keep surrounding spaces. Comments are lines starting with # or ;.
.PP
Keys marked \fBlive\fR are applied on SIGHUP (\fBsystemctl reload\fR); a
changed key that is not live is logged as needing a restart.
.SH KEYS
HDR
# Each key of the example is: help lines, a type line, "# key = default".
# roff: a backslash is doubled; a line must not start with . or '.
awk '
function esc(t) { gsub(/\\/, "\\e", t); gsub(/-/, "\\-", t); if (t ~ /^[.\047]/) t = "\\&" t; return t }
/^\[.*\]$/ { sec=substr($0,2,length($0)-2); print ".SS [" sec "]"; help=""; desc=1; next }
/^# [a-z_]+ = / { line=substr($0,3); split(line, kv, " = "); key=kv[1]; def=substr(line, length(key)+4);
	print ".TP"; print "\\fB" esc(key) "\\fR = " esc(def); print help; help=""; next }
/^#/ { if (sec == "") next; t=substr($0,3); if (t == "") next;
	help = (help == "" ? esc(t) : help "\n" esc(t)); next }
/^$/ { if (desc && help != "") { print help; help="" } desc=0; next }
' "$ini"
cat <<'TAIL'
.SH ENVIRONMENT
.TP
\fBKVPOOL_\fISECTION\fB_\fIKEY\fR
Sets one key, e.g. \fBKVPOOL_NODE_SEGMENT_SIZE=64G\fR. A variable that names
a known section but no key of it is an error.
.TP
\fBMOONCAKE_MASTER_SERVER_ADDR\fR, \fBMOONCAKE_GLOBAL_SEGMENT_SIZE\fR, \fBMOONCAKE_LOCAL_BUFFER_SIZE\fR, \fBMOONCAKE_PROTOCOL\fR, \fBMOONCAKE_RDMA_DEVICES\fR, \fBMOONCAKE_METADATA_SERVER\fR
Mooncake's spellings of cluster.master, node.segment_size,
client.local_buffer_size, client.protocol, rdma.devices and
cluster.metadata_server; the KVPOOL_* variables win over them.
.SH FILES
.TP
.I /etc/kvpool/kvpool.ini
The configuration the systemd units pass with \fB\-c\fR, and the default
of every program.
.TP
.I /etc/kvpool/node\-NAME.ini
Per-instance settings of \fBkvpool\-node@\fINAME\fB.service\fR.
.SH SEE ALSO
.BR kvpool (1),
.BR kvpool\-master (8),
.BR kvpool\-node (8),
.BR systemd.service (5)
TAIL
