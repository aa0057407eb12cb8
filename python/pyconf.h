/* pyconf: what setup() was told, in every form Mooncake accepts —
 * positional and keyword arguments, a dict, the MOONCAKE_CONFIG_PATH JSON,
 * the MOONCAKE_* variables — with Mooncake's meaning: sizes as byte counts,
 * numeric strings or human forms ("4gb", "16 MB", "1.5G", "1e9"), booleans
 * as "true"/"1"/"yes"/"on", an explicit argument beating the JSON, the JSON
 * beating the environment. The result becomes "section.key=value" overrides
 * on top of kvpool's own configuration (pysetup.c loads it). A value
 * Mooncake would refuse is recorded in sparams.bad and setup() returns
 * INVALID_PARAMS; exceptions are for Python type errors (an unknown keyword,
 * a list where a str goes). GIL held, except sp_overrides.
 */
#ifndef KVP_PYCONF_H
#define KVP_PYCONF_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdbool.h>
#include <stdint.h>

#include "pyconv.h"

/* How setup() named the transport. */
enum sp_proto {
	SP_PROTO_NONE,			/* not given: kvpool's [client] protocol */
	SP_PROTO_AUTO,			/* "tcp" (Mooncake's default), "auto" */
	SP_PROTO_FABRIC,		/* "rdma" and Mooncake's other fabrics (efa, nvlink, ...) */
	SP_PROTO_LOCAL,			/* kvpool's "local" */
};

struct sparams {
	char *hostname, *metadata, *protocol, *rdma, *master, *config_file;
	char *token, *token_file, *tenant, *ssd_path;
	bool has_seg, has_lbuf;
	uint64_t seg, lbuf;
	int replicas;			/* 0: not given */
	int strict;			/* strict_protocol: -1 not given */
	int ssd;			/* enable_ssd_offload: -1 not given */
	int http;			/* enable_client_http_server: -1 not given */
	int http_port;			/* 0: not given */
	enum sp_proto proto;		/* from protocol, by sp_finish */
	struct conv_strv extra;		/* "section.key=value" given in a dict */
	char bad[512];			/* first value Mooncake would refuse, "" none */
};

void sparams_init(struct sparams *p);
void sparams_free(struct sparams *p);

/* setup()'s arguments in any form into @p; *noargs when it got none (then
 * MOONCAKE_CONFIG_PATH applies). -1 with an exception. */
int sp_parse_args(PyObject *args, PyObject *kw, struct sparams *p, bool *noargs);
/* init_all(protocol, device_name, mount_segment_size=16 MiB). */
int sp_parse_init_all(PyObject *args, PyObject *kw, struct sparams *p);
/* One size argument (int, float, numeric or human str); *has set. A bad
 * value goes to p->bad. -1 with an exception (a type that is no size). */
int sp_size(struct sparams *p, PyObject *o, bool *has, uint64_t *dst, const char *what);
/* What the call left open, from MOONCAKE_CONFIG_PATH (@json, the no-argument
 * forms only) and then the MOONCAKE_* variables; classifies the protocol.
 * -1 with an exception (an unreadable or malformed JSON file). */
int sp_finish(struct sparams *p, bool json);
/* The "section.key=value" overrides for kvpool's configuration (NULL-
 * terminated in ov->v); 0 or KVP_EINVAL/KVP_ENOMEM with a message. The
 * embedded node's segment size is rounded up to whole pages here (logged). */
int sp_overrides(const struct sparams *p, struct conv_strv *ov, char *err, size_t errlen);

/* Mooncake's byte sizes (utils.h try_string_to_byte_size): a number, then
 * optional spaces and K/KB/M/MB/G/GB/T/TB/B in any case, or "infinite".
 * 0 or KVP_EINVAL. */
int mc_parse_size(const char *s, uint64_t *out);

#endif
