/* pyconf: setup()'s arguments in Mooncake's forms into struct sparams, and
 * from there into kvpool configuration overrides (see pyconf.h). Called
 * with the GIL held (sp_overrides needs no Python).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kvpool.h"
#include "log.h"
#include "pyconf.h"
#include "pyconv.h"

#define KiB 1024ull
#define MiB (1024 * KiB)
#define MC_MIN_SEGMENT 1024ull			/* Mooncake's MIN_SEGMENT_SIZE */
#define MC_MAX_BUFFER (1024ull * 1024 * MiB)	/* Mooncake's MAX_SEGMENT_SIZE, 1 TiB */
#define SEG_MIN MiB				/* [node] segment_size's minimum */
#define SEG_MAX (16ull * 1024 * 1024 * MiB)	/* and its maximum, 16 TiB */
#define SEG_PAGE 4096ull			/* a segment is whole pages */

void sparams_init(struct sparams *p)
{
	memset(p, 0, sizeof(*p));
	p->strict = p->ssd = p->http = -1;
}

void sparams_free(struct sparams *p)
{
	char **strs[] = { &p->hostname, &p->metadata, &p->protocol, &p->rdma, &p->master,
			  &p->config_file, &p->token, &p->token_file, &p->tenant, &p->ssd_path };

	for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
		if (*strs[i] && strs[i] == &p->token)
			explicit_bzero(*strs[i], strlen(*strs[i]));
		free(*strs[i]);
	}
	conv_strv_free(&p->extra);
	sparams_init(p);
}

static void sp_bad(struct sparams *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sp_bad(struct sparams *p, const char *fmt, ...)
{
	va_list ap;

	if (p->bad[0])
		return;
	va_start(ap, fmt);
	vsnprintf(p->bad, sizeof(p->bad), fmt, ap);
	va_end(ap);
}

/* ---- values ---------------------------------------------------------------- */

int mc_parse_size(const char *s, uint64_t *out)
{
	static const struct {
		const char *unit;
		uint64_t mult;
	} units[] = {
		{ "", 1 }, { "B", 1 }, { "K", KiB }, { "KB", KiB }, { "M", MiB }, { "MB", MiB },
		{ "G", 1024 * MiB }, { "GB", 1024 * MiB }, { "T", 1024 * 1024 * MiB },
		{ "TB", 1024 * 1024 * MiB },
	};
	char unit[8];
	size_t n = 0;
	char *end;
	double v;

	while (isspace((unsigned char)*s))
		s++;
	if (!strcmp(s, "infinite")) {
		*out = UINT64_MAX;
		return 0;
	}
	/* stod's grammar, without inf/nan/hex floats. */
	if (!isdigit((unsigned char)*s) && !((*s == '.' || *s == '+') && s[1]))
		return KVP_EINVAL;
	v = strtod(s, &end);
	if (end == s || !isfinite(v) || v < 0 || (s[0] == '0' && (s[1] == 'x' || s[1] == 'X')))
		return KVP_EINVAL;
	while (isspace((unsigned char)*end))
		end++;
	while (*end && !isspace((unsigned char)*end) && n + 1 < sizeof(unit))
		unit[n++] = (char)toupper((unsigned char)*end++);
	unit[n] = 0;
	while (isspace((unsigned char)*end))
		end++;
	if (*end)
		return KVP_EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(unit, units[i].unit))
			continue;
		if (v * (double)units[i].mult >= 18446744073709551615.0)
			return KVP_EINVAL;
		*out = (uint64_t)(v * (double)units[i].mult);
		return 0;
	}
	return KVP_EINVAL;
}

/* Mooncake's TryParseBool. */
static int mc_parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "true", "1", "yes", "on", "enable" };
	static const char *const no[] = { "false", "0", "no", "off", "disable", "" };

	while (isspace((unsigned char)*s))
		s++;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!strcasecmp(s, yes[i]))
			return *out = true, 0;
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (!strcasecmp(s, no[i]))
			return *out = false, 0;
	return KVP_EINVAL;
}

/* str(o) as UTF-8 into a new malloc'd string; NULL with an exception. */
static char *py_text(PyObject *o)
{
	PyObject *so = PyUnicode_Check(o) ? Py_NewRef(o) : PyObject_Str(o);
	const char *s;
	char *r = NULL;

	if (!so)
		return NULL;
	s = PyUnicode_AsUTF8(so);
	if (s && !(r = strdup(s)))
		PyErr_NoMemory();
	Py_DECREF(so);
	return r;
}

/* A str (None = leave unset) into *dst. -1 with an exception. */
static int sp_str(PyObject *o, char **dst, const char *what)
{
	if (!o || o == Py_None)
		return 0;
	if (!PyUnicode_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be a str, not %.80s", what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	free(*dst);
	*dst = py_text(o);
	return *dst ? 0 : -1;
}

/* A str from a dict or the JSON: numbers and booleans as their text, the
 * way Mooncake's dict form sees every value (py::str). */
static int sp_text(PyObject *o, char **dst)
{
	if (!o || o == Py_None)
		return 0;
	free(*dst);
	*dst = py_text(o);
	return *dst ? 0 : -1;
}

int sp_size(struct sparams *p, PyObject *o, bool *has, uint64_t *dst, const char *what)
{
	char *s;

	if (!o || o == Py_None)
		return 0;
	if (PyBool_Check(o)) {
		sp_bad(p, "%s: %s is not a size", what, o == Py_True ? "True" : "False");
		return 0;
	}
	if (PyLong_Check(o)) {
		int over = 0;
		long long v = PyLong_AsLongLongAndOverflow(o, &over);

		if (v == -1 && PyErr_Occurred())
			return -1;
		if (over > 0) {
			unsigned long long u = PyLong_AsUnsignedLongLong(o);

			if (u == (unsigned long long)-1 && PyErr_Occurred()) {
				PyErr_Clear();
				sp_bad(p, "%s: too large", what);
				return 0;
			}
			*dst = u;
		} else if (over < 0 || v < 0) {
			sp_bad(p, "%s: a size cannot be negative", what);
			return 0;
		} else {
			*dst = (uint64_t)v;
		}
		*has = true;
		return 0;
	}
	if (PyFloat_Check(o)) {
		double d = PyFloat_AS_DOUBLE(o);

		if (!isfinite(d) || d < 0 || d >= 18446744073709551615.0) {
			sp_bad(p, "%s: %g is not a size", what, d);
			return 0;
		}
		*dst = (uint64_t)d;
		*has = true;
		return 0;
	}
	if (!PyUnicode_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be an int or a str, not %.80s", what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	s = py_text(o);
	if (!s)
		return -1;
	if (mc_parse_size(s, dst) < 0)
		sp_bad(p, "%s: cannot parse \"%s\" as a size (a byte count, or a number with "
		       "K, KB, M, MB, G, GB, T or TB)", what, s);
	else
		*has = true;
	free(s);
	return 0;
}

/* A boolean from a dict, the JSON or the environment: bool, int, or text. */
static int sp_bool_text(struct sparams *p, const char *s, int *dst, const char *what)
{
	bool b;

	if (mc_parse_bool(s, &b) < 0) {
		sp_bad(p, "%s: \"%s\" is not a boolean (true/false, 1/0, yes/no, on/off)", what, s);
		return 0;
	}
	*dst = b;
	return 0;
}

static int sp_bool(struct sparams *p, PyObject *o, int *dst, const char *what)
{
	char *s;
	int rc;

	if (!o || o == Py_None)
		return 0;
	if (PyBool_Check(o) || PyLong_Check(o)) {
		rc = PyObject_IsTrue(o);
		if (rc < 0)
			return -1;
		*dst = rc;
		return 0;
	}
	s = py_text(o);
	if (!s)
		return -1;
	rc = sp_bool_text(p, s, dst, what);
	free(s);
	return rc;
}

/* An int (or numeric text) in [lo, hi] into *dst. */
static int sp_int(struct sparams *p, PyObject *o, int *dst, long lo, long hi, const char *what)
{
	char *s, *end;
	long v;

	if (!o || o == Py_None)
		return 0;
	if (PyLong_Check(o) && !PyBool_Check(o)) {
		v = PyLong_AsLong(o);
		if (v == -1 && PyErr_Occurred()) {
			PyErr_Clear();
			v = hi + 1;
		}
	} else {
		s = py_text(o);
		if (!s)
			return -1;
		v = strtol(s, &end, 10);
		while (isspace((unsigned char)*end))
			end++;
		if (end == s || *end)
			v = hi + 1;
		free(s);
	}
	if (v < lo || v > hi) {
		sp_bad(p, "%s: not an integer in %ld..%ld", what, lo, hi);
		return 0;
	}
	*dst = (int)v;
	return 0;
}

/* ---- dict, JSON ---------------------------------------------------------- */

/* Keys engines' JSON files carry that have no meaning here, accepted quietly. */
static const char *const quiet_keys[] = {
	"transfer_timeout", "mode", "storage_root_dir", "use_exists_sync", "check_server",
	"ipc_socket_path", "standalone_storage", "save_chunk_meta", "te_meta_data_server",
};

/* One entry of setup(dict) / the MOONCAKE_CONFIG_PATH JSON. */
static int sp_dict_item(struct sparams *p, PyObject *k, PyObject *v)
{
	const char *key;

	if (!PyUnicode_Check(k)) {
		PyErr_SetString(PyExc_TypeError, "configuration keys must be str");
		return -1;
	}
	key = PyUnicode_AsUTF8(k);
	if (!key)
		return -1;
	if (!strcmp(key, "local_hostname"))
		return sp_text(v, &p->hostname);
	if (!strcmp(key, "metadata_server"))
		return sp_text(v, &p->metadata);
	if (!strcmp(key, "protocol"))
		return sp_text(v, &p->protocol);
	if (!strcmp(key, "device_name") || !strcmp(key, "rdma_devices"))
		return sp_text(v, &p->rdma);
	if (!strcmp(key, "master_server_address") || !strcmp(key, "master_server_addr"))
		return sp_text(v, &p->master);
	if (!strcmp(key, "config_file"))
		return sp_text(v, &p->config_file);
	if (!strcmp(key, "cluster_token_file"))
		return sp_text(v, &p->token_file);
	if (!strcmp(key, "cluster_token"))
		return sp_text(v, &p->token);
	if (!strcmp(key, "tenant_id"))
		return sp_text(v, &p->tenant);
	if (!strcmp(key, "ssd_offload_path"))
		return sp_text(v, &p->ssd_path);
	if (!strcmp(key, "global_segment_size"))
		return sp_size(p, v, &p->has_seg, &p->seg, key);
	if (!strcmp(key, "local_buffer_size"))
		return sp_size(p, v, &p->has_lbuf, &p->lbuf, key);
	if (!strcmp(key, "replica_num"))
		return sp_int(p, v, &p->replicas, 1, KVP_MAX_REPLICAS, key);
	if (!strcmp(key, "client_http_port"))
		return sp_int(p, v, &p->http_port, 1, 65535, key);
	if (!strcmp(key, "enable_ssd_offload"))
		return sp_bool(p, v, &p->ssd, key);
	if (!strcmp(key, "enable_client_http_server"))
		return sp_bool(p, v, &p->http, key);
	if (!strcmp(key, "strict_protocol"))
		return sp_bool(p, v, &p->strict, key);
	if (strchr(key, '.')) {
		PyObject *sv;
		const char *s;
		int rc;

		if (PyBool_Check(v))
			sv = PyUnicode_FromString(v == Py_True ? "true" : "false");
		else
			sv = PyObject_Str(v);
		if (!sv)
			return -1;
		s = PyUnicode_AsUTF8(sv);
		rc = s ? conv_strv_addf(&p->extra, "%s=%s", key, s) : -1;
		Py_DECREF(sv);
		if (rc < 0 && !PyErr_Occurred())
			PyErr_Format(PyExc_ValueError, "%s: value too long", key);
		return rc;
	}
	for (size_t i = 0; i < sizeof(quiet_keys) / sizeof(quiet_keys[0]); i++)
		if (!strcmp(key, quiet_keys[i]))
			return 0;
	log_warn("setup: ignoring configuration key \"%s\" (not one of Mooncake's or "
		 "kvpool's; kvpool keys are \"section.key\")", key);
	return 0;
}

static int sp_dict(struct sparams *p, PyObject *d)
{
	PyObject *k, *v;
	Py_ssize_t pos = 0;

	if (!PyDict_Check(d)) {
		PyErr_SetString(PyExc_TypeError, "the configuration must be a dict");
		return -1;
	}
	while (PyDict_Next(d, &pos, &k, &v))
		if (sp_dict_item(p, k, v) < 0)
			return -1;
	return 0;
}

/* The JSON file, parsed by Python's json; only keys not given yet apply. */
static int sp_json_file(struct sparams *p, const char *path)
{
	PyObject *io = NULL, *f = NULL, *json = NULL, *d = NULL, *r;
	struct sparams j;
	int rc = -1;

	sparams_init(&j);
	io = PyImport_ImportModule("io");
	json = io ? PyImport_ImportModule("json") : NULL;
	f = json ? PyObject_CallMethod(io, "open", "ss", path, "rb") : NULL;
	if (!f)
		goto out;
	d = PyObject_CallMethod(json, "load", "O", f);
	r = PyObject_CallMethod(f, "close", NULL);
	Py_XDECREF(r);
	if (!d) {
		/* Name the file in the message. */
		PyObject *t, *val, *tb;

		PyErr_Fetch(&t, &val, &tb);
		PyErr_Format(PyExc_ValueError, "MOONCAKE_CONFIG_PATH %s: %S", path,
			     val ? val : Py_None);
		Py_XDECREF(t);
		Py_XDECREF(val);
		Py_XDECREF(tb);
		goto out;
	}
	if (sp_dict(&j, d) < 0)
		goto out;
#define TAKE(field) do { if (!p->field) { p->field = j.field; j.field = NULL; } } while (0)
	TAKE(hostname); TAKE(metadata); TAKE(protocol); TAKE(rdma); TAKE(master);
	TAKE(config_file); TAKE(token); TAKE(token_file); TAKE(tenant); TAKE(ssd_path);
#undef TAKE
	if (!p->has_seg && j.has_seg) {
		p->has_seg = true;
		p->seg = j.seg;
	}
	if (!p->has_lbuf && j.has_lbuf) {
		p->has_lbuf = true;
		p->lbuf = j.lbuf;
	}
	if (!p->replicas)
		p->replicas = j.replicas;
	if (!p->http_port)
		p->http_port = j.http_port;
	if (p->strict < 0)
		p->strict = j.strict;
	if (p->ssd < 0)
		p->ssd = j.ssd;
	if (p->http < 0)
		p->http = j.http;
	for (size_t i = 0; i < j.extra.n; i++)
		if (conv_strv_add(&p->extra, j.extra.v[i]) < 0) {
			PyErr_NoMemory();
			goto out;
		}
	if (j.bad[0])
		sp_bad(p, "MOONCAKE_CONFIG_PATH %s: %s", path, j.bad);
	rc = 0;
out:
	sparams_free(&j);
	Py_XDECREF(d);
	Py_XDECREF(f);
	Py_XDECREF(json);
	Py_XDECREF(io);
	return rc;
}

/* ---- environment ------------------------------------------------------ */

/* The first of @names that is set and not empty. */
static const char *env_any(const char *const *names)
{
	for (; *names; names++) {
		const char *v = getenv(*names);

		if (v && v[0])
			return v;
	}
	return NULL;
}

static int env_str(char **dst, const char *const *names)
{
	const char *v = env_any(names);

	if (*dst || !v)
		return 0;
	*dst = strdup(v);
	if (!*dst) {
		PyErr_NoMemory();
		return -1;
	}
	return 0;
}

static void env_size(struct sparams *p, bool *has, uint64_t *dst, const char *name)
{
	const char *v = getenv(name);

	if (*has || !v || !v[0])
		return;
	if (mc_parse_size(v, dst) < 0)
		sp_bad(p, "%s: cannot parse \"%s\" as a size", name, v);
	else
		*has = true;
}

static void env_bool(struct sparams *p, int *dst, const char *name)
{
	const char *v = getenv(name);

	if (*dst < 0 && v && v[0])
		sp_bool_text(p, v, dst, name);
}

/* Mooncake's variables (its mooncake_config.py and engines' env mode) for
 * whatever the call and the JSON left open. */
static int sp_env(struct sparams *p)
{
#define NAMES(...) ((const char *const[]){ __VA_ARGS__, NULL })
	if (env_str(&p->master, NAMES("MOONCAKE_MASTER_SERVER_ADDR", "MOONCAKE_MASTER")) < 0 ||
	    env_str(&p->metadata, NAMES("MOONCAKE_METADATA_SERVER",
					"MOONCAKE_TE_META_DATA_SERVER")) < 0 ||
	    env_str(&p->protocol, NAMES("MOONCAKE_PROTOCOL")) < 0 ||
	    env_str(&p->rdma, NAMES("MOONCAKE_RDMA_DEVICES", "MOONCAKE_DEVICE")) < 0 ||
	    env_str(&p->hostname, NAMES("MOONCAKE_LOCAL_HOSTNAME")) < 0 ||
	    env_str(&p->tenant, NAMES("MOONCAKE_TENANT_ID")) < 0 ||
	    env_str(&p->ssd_path, NAMES("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH")) < 0 ||
	    env_str(&p->token_file, NAMES("MOONCAKE_CLUSTER_TOKEN_FILE")) < 0 ||
	    env_str(&p->token, NAMES("MOONCAKE_CLUSTER_TOKEN")) < 0)
		return -1;
#undef NAMES
	env_size(p, &p->has_seg, &p->seg, "MOONCAKE_GLOBAL_SEGMENT_SIZE");
	env_size(p, &p->has_lbuf, &p->lbuf, "MOONCAKE_LOCAL_BUFFER_SIZE");
	env_bool(p, &p->ssd, "MOONCAKE_OFFLOAD_ENABLED");
	env_bool(p, &p->http, "MOONCAKE_ENABLE_CLIENT_HTTP_SERVER");
	env_bool(p, &p->strict, "MOONCAKE_STRICT_PROTOCOL");
	if (!p->http_port && getenv("MOONCAKE_CLIENT_HTTP_PORT")) {
		PyObject *s = PyUnicode_FromString(getenv("MOONCAKE_CLIENT_HTTP_PORT"));

		if (!s || sp_int(p, s, &p->http_port, 1, 65535, "MOONCAKE_CLIENT_HTTP_PORT") < 0) {
			Py_XDECREF(s);
			return -1;
		}
		Py_DECREF(s);
	}
	return 0;
}

/* Mooncake's protocol names: "tcp" names the transport between hosts (kvpool's
 * auto still copies through /dev/shm on one host); RDMA and the other
 * fabrics Mooncake knows become auto with RDMA where a device works. */
static void sp_classify(struct sparams *p)
{
	static const char *const fabrics[] = {
		"rdma", "efa", "nvmeof", "nvlink", "nvlink_intra", "musa", "hip", "barex", "cxl",
		"ascend", "ub", "ubshmem", "maca", "sunrise_link",
	};
	const char *s = p->protocol;

	p->proto = SP_PROTO_NONE;
	if (!s)
		return;
	while (isspace((unsigned char)*s))
		s++;
	if (!*s)
		return;
	if (!strcasecmp(s, "tcp") || !strcasecmp(s, "auto") || !strcasecmp(s, "rpc_only")) {
		p->proto = SP_PROTO_AUTO;
		return;
	}
	if (!strcasecmp(s, "local")) {
		p->proto = SP_PROTO_LOCAL;
		return;
	}
	for (size_t i = 0; i < sizeof(fabrics) / sizeof(fabrics[0]); i++)
		if (!strcasecmp(s, fabrics[i])) {
			p->proto = SP_PROTO_FABRIC;
			return;
		}
	sp_bad(p, "protocol \"%s\" is unknown (tcp, rdma, or kvpool's auto, local)", s);
}

int sp_finish(struct sparams *p, bool json)
{
	const char *path = getenv("MOONCAKE_CONFIG_PATH");

	if (json && path && path[0] && sp_json_file(p, path) < 0)
		return -1;
	if (sp_env(p) < 0)
		return -1;
	sp_classify(p);
	return 0;
}

/* ---- arguments ------------------------------------------------------------ */

int sp_parse_args(PyObject *args, PyObject *kw, struct sparams *p, bool *noargs)
{
	static char *kwlist[] = { "local_hostname", "metadata_server", "global_segment_size",
				  "local_buffer_size", "protocol", "rdma_devices",
				  "master_server_addr", "engine", "enable_ssd_offload",
				  "ssd_offload_path", "tenant_id", "enable_client_http_server",
				  "client_http_port", "transfer_engine", "config", NULL };
	PyObject *a[15] = { NULL };
	Py_ssize_t nargs = PyTuple_GET_SIZE(args);

	*noargs = !nargs && (!kw || !PyDict_Size(kw));
	if (*noargs)
		return 0;
	/* setup(dict) */
	if (nargs == 1 && (!kw || !PyDict_Size(kw)) && PyDict_Check(PyTuple_GET_ITEM(args, 0)))
		return sp_dict(p, PyTuple_GET_ITEM(args, 0));
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOOOOOOOOOOOOO:setup", kwlist, &a[0], &a[1],
					 &a[2], &a[3], &a[4], &a[5], &a[6], &a[7], &a[8], &a[9],
					 &a[10], &a[11], &a[12], &a[13], &a[14]))
		return -1;
	/* setup(config=dict), alone or with other keywords on top */
	if (a[14] && a[14] != Py_None && sp_dict(p, a[14]) < 0)
		return -1;
	if (sp_str(a[0], &p->hostname, "local_hostname") < 0 ||
	    sp_str(a[1], &p->metadata, "metadata_server") < 0 ||
	    sp_size(p, a[2], &p->has_seg, &p->seg, "global_segment_size") < 0 ||
	    sp_size(p, a[3], &p->has_lbuf, &p->lbuf, "local_buffer_size") < 0 ||
	    sp_str(a[4], &p->protocol, "protocol") < 0 ||
	    sp_str(a[5], &p->rdma, "rdma_devices") < 0 ||
	    sp_str(a[6], &p->master, "master_server_addr") < 0 ||
	    sp_bool(p, a[8], &p->ssd, "enable_ssd_offload") < 0 ||
	    sp_str(a[9], &p->ssd_path, "ssd_offload_path") < 0 ||
	    sp_str(a[10], &p->tenant, "tenant_id") < 0 ||
	    sp_bool(p, a[11], &p->http, "enable_client_http_server") < 0 ||
	    sp_int(p, a[12], &p->http_port, 1, 65535, "client_http_port") < 0)
		return -1;
	/* a[7], a[13]: a Mooncake TransferEngine to share; kvpool moves bytes
	 * itself, so it is accepted and not used. */
	return 0;
}

int sp_parse_init_all(PyObject *args, PyObject *kw, struct sparams *p)
{
	static char *kwlist[] = { "protocol", "device_name", "mount_segment_size", NULL };
	PyObject *proto = NULL, *dev = NULL, *size = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOO:init_all", kwlist, &proto, &dev, &size))
		return -1;
	if (sp_str(proto, &p->protocol, "protocol") < 0 || sp_str(dev, &p->rdma, "device_name") < 0)
		return -1;
	if (!size) {
		p->has_seg = true;
		p->seg = 16 * MiB;
		return 0;
	}
	return sp_size(p, size, &p->has_seg, &p->seg, "mount_segment_size");
}

/* ---- overrides ------------------------------------------------------------ */

/* The embedded node's segment: whole pages, at least SEG_MIN. */
static int seg_round(uint64_t want, uint64_t *out, char *err, size_t errlen)
{
	uint64_t v;

	if (want < MC_MIN_SEGMENT || want > SEG_MAX) {
		snprintf(err, errlen, "global_segment_size %" PRIu64 " is out of range (0, or "
			 "%llu .. %llu bytes)", want, MC_MIN_SEGMENT, SEG_MAX);
		return KVP_EINVAL;
	}
	v = (want + SEG_PAGE - 1) / SEG_PAGE * SEG_PAGE;
	*out = v < SEG_MIN ? SEG_MIN : v;
	return 0;
}

int sp_overrides(const struct sparams *p, struct conv_strv *ov, char *err, size_t errlen)
{
	bool explicit_proto = getenv("KVPOOL_CLIENT_PROTOCOL") != NULL;
	uint64_t seg = 0;
	int rc = 0;

	if (p->bad[0]) {
		snprintf(err, errlen, "%s", p->bad);
		return KVP_EINVAL;
	}
	if (p->has_lbuf && p->lbuf && (p->lbuf < MC_MIN_SEGMENT || p->lbuf > MC_MAX_BUFFER)) {
		snprintf(err, errlen, "local_buffer_size %" PRIu64 " is out of range (0, or "
			 "%llu .. %llu bytes)", p->lbuf, MC_MIN_SEGMENT, MC_MAX_BUFFER);
		return KVP_EINVAL;
	}
	if (p->has_seg && p->seg) {
		rc = seg_round(p->seg, &seg, err, errlen);
		if (rc < 0)
			return rc;
	}
	for (size_t i = 0; i < p->extra.n; i++)
		if (!strncmp(p->extra.v[i], "client.protocol=", 16))
			explicit_proto = true;
	if (p->master && p->master[0])
		rc |= conv_strv_addf(ov, "cluster.master=%s", p->master);
	if (p->metadata)
		rc |= conv_strv_addf(ov, "cluster.metadata_server=%s", p->metadata);
	if (p->token_file && p->token_file[0])
		rc |= conv_strv_addf(ov, "cluster.token_file=%s", p->token_file);
	if (p->has_lbuf)
		rc |= conv_strv_addf(ov, "client.local_buffer_size=%" PRIu64, p->lbuf);
	/* KVPOOL_CLIENT_PROTOCOL or "client.protocol" refine Mooncake's name
	 * (e.g. tcp even on one host); pysetup.c applies the rest. */
	if (!explicit_proto && p->proto == SP_PROTO_LOCAL)
		rc |= conv_strv_add(ov, "client.protocol=local");
	else if (!explicit_proto && p->proto != SP_PROTO_NONE)
		rc |= conv_strv_add(ov, "client.protocol=auto");
	if (p->rdma && p->rdma[0] && strcmp(p->rdma, "auto-discovery"))
		rc |= conv_strv_addf(ov, "rdma.devices=%s", p->rdma);
	if (p->replicas)
		rc |= conv_strv_addf(ov, "client.replicas=%d", p->replicas);
	if (seg)
		rc |= conv_strv_addf(ov, "node.segment_size=%" PRIu64, seg);
	/* Mooncake's client HTTP server is the embedded node's /metrics. */
	if (seg && p->http > 0)
		rc |= conv_strv_addf(ov, "node.http_listen=0.0.0.0:%d",
				     p->http_port ? p->http_port : 9300);
	for (size_t i = 0; i < p->extra.n; i++)
		rc |= conv_strv_add(ov, p->extra.v[i]);
	if (rc) {
		snprintf(err, errlen, "out of memory");
		return KVP_ENOMEM;
	}
	return 0;
}
