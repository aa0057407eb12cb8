/* pysetup: DistributedStore.setup() in its forms (Mooncake's arguments, a
 * dict, setup() from MOONCAKE_CONFIG_PATH and the MOONCAKE_* variables,
 * init_all), loaded once into one struct kvp_conf that the store's handles
 * and the embedded node (setup with global_segment_size > 0, its ev loop on
 * its own pthread) both start from; close() and the teardown. Setup and
 * teardown hold store->lock for writing with the GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "kvpool.h"
#include "kvpool_i.h"
#include "log.h"
#include "node.h"
#include "pyconv.h"
#include "pystore.h"

static unsigned setup_seq;		/* protected by the GIL: segment names */

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- embedded node ------------------------------------------------------- */

static void emb_ready_cb(void *arg)
{
	struct store *s = arg;

	pthread_mutex_lock(&s->nlock);
	if (s->nstate == NODE_STARTING)
		s->nstate = NODE_READY;
	pthread_cond_broadcast(&s->ncond);
	pthread_mutex_unlock(&s->nlock);
}

static void *emb_thread(void *arg)
{
	struct store *s = arg;
	int rc = node_run(s->node);

	pthread_mutex_lock(&s->nlock);
	s->nstate = NODE_EXITED;
	s->node_rc = rc;
	pthread_cond_broadcast(&s->ncond);
	pthread_mutex_unlock(&s->nlock);
	return NULL;
}

static bool is_explicit(const struct kvp_conf *c, const char *sec, const char *key)
{
	const struct conf_key *k = conf_find(sec, key);

	return k && c->src[k - conf_table] == CONF_SRC_CMDLINE;
}

/* The embedded node's identity must be this process's own: the values for a
 * host's kvpool-node daemon (from /etc/kvpool/kvpool.ini or the environment)
 * would collide with it. Only "section.key" entries given to setup() win. */
static void emb_conf_adjust(struct store *s, struct kvp_conf *c, unsigned seq)
{
	char host[64];
	bool token = c->cluster.token[0] != 0;

	if (gethostname(host, sizeof(host)) < 0 || !host[0])
		snprintf(host, sizeof(host), "host");
	host[sizeof(host) - 1] = 0;
	if (!is_explicit(c, "node", "name"))
		snprintf(c->node.name, CONF_STR, "%.60s-py-%d-%u", host, (int)getpid(), seq);
	if (!is_explicit(c, "node", "segment"))
		snprintf(c->node.segment, CONF_STR, "kvpool-py-%d-%u", (int)getpid(), seq);
	/* Any free port: several processes on one host each embed a node. */
	if (!is_explicit(c, "node", "listen"))
		snprintf(c->node.listen, CONF_STR, "%s", token ? "0.0.0.0:0" : "127.0.0.1:0");
	if (!is_explicit(c, "node", "advertise"))
		c->node.advertise[0] = 0;
	if (!is_explicit(c, "node", "http_listen"))
		c->node.http_listen[0] = 0;
	/* The memory leaves with the process, as Mooncake's embedded segment does. */
	if (!is_explicit(c, "node", "remove_segment_on_exit"))
		c->node.remove_segment_on_exit = true;
	/* Memory is committed as it is used (an engine's RSS and cgroup see
	 * what the store holds, not what it may hold), unless populate asks
	 * for all of it now. Local puts prefault, so a full /dev/shm fails a
	 * put instead of raising SIGBUS in the engine (docs/python.md). */
	if (!is_explicit(c, "node", "reserve"))
		snprintf(c->node.reserve, CONF_STR, "%s", c->node.populate ? "upfront" : "none");
	if (!is_explicit(c, "fuse", "mountpoint"))
		c->fuse.mountpoint[0] = 0;
	if (!is_explicit(c, "spill", "path") && !is_explicit(c, "spill", "size")) {
		c->spill.path[0] = 0;
		c->spill.size = 0;
	}
	snprintf(s->node_segment, sizeof(s->node_segment), "%s", c->node.segment);
}

static void emb_stop(struct store *s)
{
	if (!s->node)
		return;
	node_stop(s->node);
	pthread_join(s->node_thr, NULL);
	node_destroy(s->node);
	s->node = NULL;
}

/* Called with lock write-held, GIL released. */
static int emb_start(struct store *s, const struct kvp_conf *c)
{
	char err[512] = "";
	sigset_t all, old;
	uint64_t deadline;
	int rc;

	s->node = node_create(c, err, sizeof(err));
	if (!s->node) {
		snprintf(s->errmsg, sizeof(s->errmsg), "embedded node: %s", err);
		return KVP_EINVAL;
	}
	s->nstate = NODE_STARTING;
	s->node_rc = 0;
	node_on_ready(s->node, emb_ready_cb, s);
	/* Signals stay with Python's threads. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&s->node_thr, NULL, emb_thread, s);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (rc) {
		snprintf(s->errmsg, sizeof(s->errmsg), "embedded node: pthread_create: %s",
			 strerror(rc));
		node_destroy(s->node);
		s->node = NULL;
		return KVP_EINTERNAL;
	}
	/* Wait until it is mounted at the master, as Mooncake's setup does. */
	deadline = mono_ms() + (c->client.timeout ? c->client.timeout : 10000);
	pthread_mutex_lock(&s->nlock);
	while (s->nstate == NODE_STARTING) {
		uint64_t now = mono_ms();
		struct timespec ts;

		if (now >= deadline)
			break;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_sec += (time_t)((deadline - now) / 1000);
		ts.tv_nsec += (long)((deadline - now) % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&s->ncond, &s->nlock, &ts);
	}
	enum node_state st = s->nstate;
	int nrc = s->node_rc;
	pthread_mutex_unlock(&s->nlock);
	if (st == NODE_READY)
		return 0;
	if (st == NODE_STARTING) {
		snprintf(s->errmsg, sizeof(s->errmsg),
			 "embedded node: not mounted at master %s within %llu ms",
			 c->cluster.master, (unsigned long long)(c->client.timeout));
		rc = KVP_ETIMEDOUT;
	} else {
		snprintf(s->errmsg, sizeof(s->errmsg), "embedded node stopped during start-up "
			 "(%s)", kvp_errname(nrc < 0 ? nrc : KVP_EINTERNAL));
		rc = nrc < 0 && nrc >= KVP_ERR_MIN ? nrc : KVP_EINTERNAL;
	}
	emb_stop(s);
	return rc;
}

/* The configuration off the store, its token wiped. */
static void setup_conf_free(struct store *s)
{
	if (s->conf)
		explicit_bzero(s->conf->cluster.token, sizeof(s->conf->cluster.token));
	free(s->conf);
	s->conf = NULL;
}

/* Called with lock write-held, GIL released. */
static void teardown_locked(struct store *s)
{
	if (s->kvp)
		kvp_close(s->kvp);
	s->kvp = NULL;
	pthread_mutex_lock(&s->hlock);
	for (int i = 0; i <= KVP_MAX_REPLICAS; i++) {
		if (s->rep[i])
			kvp_close(s->rep[i]);
		s->rep[i] = NULL;
	}
	free(s->regs);
	s->regs = NULL;
	s->nregs = s->capregs = 0;
	pthread_mutex_unlock(&s->hlock);
	emb_stop(s);
	setup_conf_free(s);
}

/* In a forked child the parent's handles and node are only forgotten
 * (closing them would talk on the parent's connections and join a thread
 * that does not exist here), and the locks start afresh. */
void setup_teardown(struct store *s)
{
	if (s->owner && s->owner != getpid()) {
		s->kvp = NULL;
		memset(s->rep, 0, sizeof(s->rep));
		s->node = NULL;
		free(s->regs);
		s->regs = NULL;
		s->nregs = s->capregs = 0;
		setup_conf_free(s);
		s->owner = 0;
		store_locks_init(s);
		return;
	}
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_wrlock(&s->lock);
	teardown_locked(s);
	s->owner = 0;
	pthread_rwlock_unlock(&s->lock);
	Py_END_ALLOW_THREADS
}

/* ---- setup ------------------------------------------------------------------ */

/* What setup() was told, in any of its forms. */
struct sparams {
	char *hostname, *metadata, *protocol, *rdma, *master, *config_file;
	bool has_seg, has_lbuf;
	uint64_t seg, lbuf;
	int replicas;
	struct conv_strv extra;		/* "section.key=value" */
};

static void sparams_free(struct sparams *p)
{
	free(p->hostname);
	free(p->metadata);
	free(p->protocol);
	free(p->rdma);
	free(p->master);
	free(p->config_file);
	conv_strv_free(&p->extra);
	memset(p, 0, sizeof(*p));
}

/* str (or None = leave unset) into *dst. -1 with an exception. */
static int sp_str(PyObject *o, char **dst, const char *what)
{
	const char *s;

	if (!o || o == Py_None)
		return 0;
	if (!PyUnicode_Check(o)) {
		PyErr_Format(PyExc_TypeError, "%s must be a str, not %.80s", what,
			     Py_TYPE(o)->tp_name);
		return -1;
	}
	s = PyUnicode_AsUTF8(o);
	if (!s)
		return -1;
	free(*dst);
	*dst = strdup(s);
	if (!*dst) {
		PyErr_NoMemory();
		return -1;
	}
	return 0;
}

/* A size: int, or a str with K/M/G suffix ("3.125GB"). */
static int sp_size(PyObject *o, bool *has, uint64_t *dst, const char *what)
{
	if (!o || o == Py_None)
		return 0;
	if (PyUnicode_Check(o)) {
		const char *s = PyUnicode_AsUTF8(o);

		if (!s)
			return -1;
		if (conf_parse_size(s, dst) < 0) {
			PyErr_Format(PyExc_ValueError, "%s: cannot parse size \"%s\"", what, s);
			return -1;
		}
	} else if (conv_u64(o, dst, what) < 0) {
		return -1;
	}
	*has = true;
	return 0;
}

/* One dictionary entry of setup(dict) / the MOONCAKE_CONFIG_PATH JSON. Keys
 * with a dot are kvpool "section.key" overrides; Mooncake's other keys
 * (transfer_timeout, mode, ...) are ignored. */
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
		return sp_str(v, &p->hostname, key);
	if (!strcmp(key, "metadata_server"))
		return sp_str(v, &p->metadata, key);
	if (!strcmp(key, "protocol"))
		return sp_str(v, &p->protocol, key);
	if (!strcmp(key, "device_name") || !strcmp(key, "rdma_devices"))
		return sp_str(v, &p->rdma, key);
	if (!strcmp(key, "master_server_address") || !strcmp(key, "master_server_addr"))
		return sp_str(v, &p->master, key);
	if (!strcmp(key, "config_file"))
		return sp_str(v, &p->config_file, key);
	if (!strcmp(key, "global_segment_size"))
		return sp_size(v, &p->has_seg, &p->seg, key);
	if (!strcmp(key, "local_buffer_size"))
		return sp_size(v, &p->has_lbuf, &p->lbuf, key);
	if (!strcmp(key, "replica_num")) {
		long n = PyLong_AsLong(v);

		if (n == -1 && PyErr_Occurred())
			return -1;
		p->replicas = (int)n;
		return 0;
	}
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

/* MOONCAKE_CONFIG_PATH: Mooncake's deployment JSON, parsed by Python's json. */
static int sp_json_file(struct sparams *p, const char *path)
{
	PyObject *json = NULL, *text = NULL, *d = NULL;
	FILE *f;
	char *buf = NULL;
	size_t n = 0, cap = 0;
	int rc = -1;

	f = fopen(path, "rb");
	if (!f) {
		PyErr_SetFromErrnoWithFilename(PyExc_OSError, path);
		return -1;
	}
	for (;;) {
		if (n == cap) {
			char *nb;

			cap = cap ? cap * 2 : 4096;
			if (cap > (64u << 20)) {
				PyErr_Format(PyExc_ValueError, "%s: too large", path);
				goto out;
			}
			nb = realloc(buf, cap);
			if (!nb) {
				PyErr_NoMemory();
				goto out;
			}
			buf = nb;
		}
		size_t r = fread(buf + n, 1, cap - n, f);

		n += r;
		if (r == 0)
			break;
	}
	if (ferror(f)) {
		PyErr_Format(PyExc_OSError, "%s: read error", path);
		goto out;
	}
	json = PyImport_ImportModule("json");
	if (!json)
		goto out;
	text = PyBytes_FromStringAndSize(buf, (Py_ssize_t)n);
	if (!text)
		goto out;
	d = PyObject_CallMethod(json, "loads", "O", text);
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
	rc = sp_dict(p, d);
out:
	Py_XDECREF(d);
	Py_XDECREF(text);
	Py_XDECREF(json);
	free(buf);
	fclose(f);
	return rc;
}

/* Mooncake's protocol names mean "the transport between hosts": "tcp" is
 * kvpool's auto (memcpy through /dev/shm for same-host replicas, TCP for the
 * others); kvpool's own names pass through and are checked by conf. */
static const char *proto_map(const char *p)
{
	if (!strcasecmp(p, "tcp"))
		return "auto";
	return p;
}

/* What setup() was told as "section.key=value" overrides, the last layer
 * of the configuration (on top of the file and the environment). */
static int sp_overrides(const struct sparams *p, struct conv_strv *ov)
{
	const char *proto = p->protocol ? p->protocol : getenv("MOONCAKE_PROTOCOL");
	int rc = 0;

	if (p->master && p->master[0])
		rc |= conv_strv_addf(ov, "cluster.master=%s", p->master);
	if (p->metadata)
		rc |= conv_strv_addf(ov, "cluster.metadata_server=%s", p->metadata);
	if (p->has_lbuf)
		rc |= conv_strv_addf(ov, "client.local_buffer_size=%" PRIu64, p->lbuf);
	/* An explicit KVPOOL_CLIENT_PROTOCOL beats Mooncake's spelling. */
	if (proto && proto[0] && !getenv("KVPOOL_CLIENT_PROTOCOL"))
		rc |= conv_strv_addf(ov, "client.protocol=%s", proto_map(proto));
	if (p->rdma && p->rdma[0])
		rc |= conv_strv_addf(ov, "rdma.devices=%s", p->rdma);
	if (p->replicas)
		rc |= conv_strv_addf(ov, "client.replicas=%d", p->replicas);
	/* Mooncake takes any byte count (3.2 GB, 1e9); a segment is whole
	 * 4 KiB pages: the rest is not used. */
	if (p->has_seg && p->seg)
		rc |= conv_strv_addf(ov, "node.segment_size=%" PRIu64,
				     p->seg >= 4096 ? p->seg & ~(uint64_t)4095 : p->seg);
	for (size_t i = 0; i < p->extra.n; i++)
		rc |= conv_strv_add(ov, p->extra.v[i]);
	return rc ? KVP_ENOMEM : 0;
}

/* Called with lock write-held, GIL released; s holds no handle. On failure
 * the caller's teardown_locked frees what was set up. */
static int store_setup_locked(struct store *s, const struct sparams *p, unsigned seq)
{
	struct conv_strv ov = { 0 };
	struct kvp_conf *nc = NULL;
	char err[512] = "";
	int rc, lvl;

	s->errmsg[0] = 0;
	rc = sp_overrides(p, &ov);
	if (rc < 0)
		goto out;
	snprintf(s->hostname, sizeof(s->hostname), "%s", p->hostname ? p->hostname : "");
	if (!s->hostname[0] && gethostname(s->hostname, sizeof(s->hostname) - 1) < 0)
		snprintf(s->hostname, sizeof(s->hostname), "localhost");

	/* Every layer once: the file, the environment, then what setup() was
	 * told. The handles (also those opened later, after the file or the
	 * variables changed) and the embedded node all start from it. */
	s->conf = calloc(1, sizeof(*s->conf));
	if (!s->conf) {
		rc = KVP_ENOMEM;
		goto out;
	}
	if (conf_load(s->conf, p->config_file, (const char *const *)ov.v, err, sizeof(err)) < 0) {
		snprintf(s->errmsg, sizeof(s->errmsg), "configuration: %s", err);
		rc = KVP_EINVAL;
		goto out;
	}
	/* A library should not chatter: warnings and errors unless log.level is set. */
	{
		const struct conf_key *k = conf_find("log", "level");

		lvl = k && s->conf->src[k - conf_table] != CONF_SRC_DEFAULT ?
			log_level_parse(s->conf->log.level) : LOG_WARNING;
		log_init("kvpool-py", lvl);
	}
	s->def_replicas = (int)s->conf->client.replicas;
	if (p->has_seg && p->seg) {
		/* The node's copy gets this process's own identity; the handles
		 * keep the configuration as loaded. */
		nc = malloc(sizeof(*nc));
		if (!nc) {
			rc = KVP_ENOMEM;
			goto out;
		}
		*nc = *s->conf;
		emb_conf_adjust(s, nc, seq);
		rc = emb_start(s, nc);
		if (rc < 0)
			goto out;
	}
	s->kvp = kvp_open_conf(s->conf, &rc);
	if (!s->kvp) {
		if (rc >= 0)
			rc = KVP_EINTERNAL;
		snprintf(s->errmsg, sizeof(s->errmsg), "cannot open a client of master %s: %s",
			 s->conf->cluster.master, kvp_strerror(rc));
		emb_stop(s);
		goto out;
	}
	rc = 0;
out:
	if (nc)
		explicit_bzero(nc->cluster.token, sizeof(nc->cluster.token));
	free(nc);
	conv_strv_free(&ov);
	return rc;
}

static int store_parse_setup(PyObject *args, PyObject *kw, struct sparams *p, bool *from_env)
{
	static char *kwlist[] = { "local_hostname", "metadata_server", "global_segment_size",
				  "local_buffer_size", "protocol", "rdma_devices",
				  "master_server_addr", "engine", NULL };
	PyObject *a[8] = { NULL };
	Py_ssize_t nargs = PyTuple_GET_SIZE(args);
	Py_ssize_t nkw = kw ? PyDict_Size(kw) : 0;

	*from_env = false;
	/* setup(dict) / setup(config=dict) */
	if (nargs == 1 && !nkw && PyDict_Check(PyTuple_GET_ITEM(args, 0)))
		return sp_dict(p, PyTuple_GET_ITEM(args, 0));
	if (!nargs && nkw == 1 && PyDict_GetItemString(kw, "config"))
		return sp_dict(p, PyDict_GetItemString(kw, "config"));
	/* setup(): what engines' wrappers do — MOONCAKE_CONFIG_PATH, then the
	 * MOONCAKE_* variables (read by conf as aliases). */
	if (!nargs && !nkw) {
		const char *path = getenv("MOONCAKE_CONFIG_PATH");
		const char *seg = getenv("MOONCAKE_GLOBAL_SEGMENT_SIZE");

		*from_env = true;
		if (path && path[0] && sp_json_file(p, path) < 0)
			return -1;
		if (!p->has_seg && seg && seg[0]) {
			if (conf_parse_size(seg, &p->seg) < 0) {
				PyErr_Format(PyExc_ValueError,
					     "MOONCAKE_GLOBAL_SEGMENT_SIZE: cannot parse \"%s\"", seg);
				return -1;
			}
			p->has_seg = true;
		}
		if (!p->hostname && getenv("MOONCAKE_LOCAL_HOSTNAME") &&
		    !(p->hostname = strdup(getenv("MOONCAKE_LOCAL_HOSTNAME")))) {
			PyErr_NoMemory();
			return -1;
		}
		return 0;
	}
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOOOOOOO:setup", kwlist, &a[0], &a[1], &a[2],
					 &a[3], &a[4], &a[5], &a[6], &a[7]))
		return -1;
	if (sp_str(a[0], &p->hostname, "local_hostname") < 0 ||
	    sp_str(a[1], &p->metadata, "metadata_server") < 0 ||
	    sp_size(a[2], &p->has_seg, &p->seg, "global_segment_size") < 0 ||
	    sp_size(a[3], &p->has_lbuf, &p->lbuf, "local_buffer_size") < 0 ||
	    sp_str(a[4], &p->protocol, "protocol") < 0 ||
	    sp_str(a[5], &p->rdma, "rdma_devices") < 0 ||
	    sp_str(a[6], &p->master, "master_server_addr") < 0)
		return -1;
	/* a[7], a TransferEngine to share: kvpool has none; ignored. */
	return 0;
}

static int store_do_setup(struct store *self, struct sparams *p)
{
	unsigned seq = ++setup_seq;
	int rc;

	setup_teardown(self);
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_wrlock(&self->lock);
	rc = store_setup_locked(self, p, seq);
	if (rc < 0)
		teardown_locked(self);
	else
		self->owner = getpid();
	pthread_rwlock_unlock(&self->lock);
	Py_END_ALLOW_THREADS
	if (rc < 0 && self->errmsg[0])
		log_err("setup: %s", self->errmsg);
	return rc;
}

static PyObject *store_setup(struct store *self, PyObject *args, PyObject *kw)
{
	struct sparams p = { 0 };
	bool from_env;
	int rc;

	if (store_parse_setup(args, kw, &p, &from_env) < 0) {
		sparams_free(&p);
		return NULL;
	}
	rc = store_do_setup(self, &p);
	sparams_free(&p);
	return PyLong_FromLong(mc(rc));
}

/* init_all(protocol, device_name, mount_segment_size=16 MiB): setup() from the
 * environment with these three given. */
static PyObject *store_init_all(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "protocol", "device_name", "mount_segment_size", NULL };
	struct sparams p = { 0 };
	PyObject *proto = NULL, *dev = NULL, *size = NULL, *none = NULL;
	bool from_env;
	int rc;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OOO:init_all", kwlist, &proto, &dev, &size))
		return NULL;
	none = PyTuple_New(0);
	if (!none)
		return NULL;
	rc = store_parse_setup(none, NULL, &p, &from_env);
	Py_DECREF(none);
	if (rc < 0 || sp_str(proto, &p.protocol, "protocol") < 0 ||
	    sp_str(dev, &p.rdma, "device_name") < 0)
		goto out_err;
	if (!size) {
		p.has_seg = true;
		p.seg = 16u << 20;
	} else if (sp_size(size, &p.has_seg, &p.seg, "mount_segment_size") < 0) {
		goto out_err;
	}
	rc = store_do_setup(self, &p);
	sparams_free(&p);
	return PyLong_FromLong(mc(rc));
out_err:
	sparams_free(&p);
	return NULL;
}

static PyObject *store_close(struct store *self, PyObject *unused)
{
	setup_teardown(self);
	return PyLong_FromLong(0);
}

PyMethodDef setup_methods[] = {
	{ "setup", METH(store_setup), KW,
	  "setup(local_hostname, metadata_server, global_segment_size, local_buffer_size, "
	  "protocol, rdma_devices, master_server_addr) | setup(config_dict) | setup() -> int\n"
	  "Connects to kvpool-master; a global_segment_size > 0 also starts an embedded node "
	  "that contributes that much of this process's memory. setup() reads "
	  "MOONCAKE_CONFIG_PATH and the MOONCAKE_* variables." },
	{ "init_all", METH(store_init_all), KW,
	  "init_all(protocol, device_name, mount_segment_size=16 MiB) -> int" },
	{ "close", METH(store_close), METH_NOARGS, "close() -> 0: closes the client, stops the "
	  "embedded node." },
	{ NULL }
};
