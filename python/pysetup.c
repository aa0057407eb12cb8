/* pysetup: DistributedStore.setup() in every form (pyconf.c reads them),
 * init_all, setup_dummy, close(); the one struct kvp_conf they load, which
 * the store's handles and its embedded nodes (pynode.c) all start from;
 * Mooncake's protocol names with the RDMA fallback; the cluster token from
 * Mooncake-style configuration. Setup and teardown hold store->lock for
 * writing with the GIL released.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "kvpool.h"
#include "kvpool_i.h"
#include "log.h"
#include "pyconf.h"
#include "pyconv.h"
#include "pycq.h"
#include "pynode.h"
#include "pystore.h"
#include "rdma.h"

static unsigned setup_seq;		/* protected by the GIL: node and segment names */

/* ---- embedded nodes --------------------------------------------------------- */

int setup_emb_add(struct store *s, uint64_t size, const char *segment)
{
	struct kvp_conf *nc;
	char err[512] = "";
	int rc;

	if (s->nemb == EMB_MAX) {
		snprintf(s->errmsg, sizeof(s->errmsg), "at most %d segments per store", EMB_MAX);
		return KVP_ELIMIT;
	}
	nc = malloc(sizeof(*nc));
	if (!nc)
		return KVP_ENOMEM;
	*nc = *s->conf;
	emb_conf_adjust(nc, __atomic_add_fetch(&setup_seq, 1, __ATOMIC_RELAXED));
	if (size)
		nc->node.segment_size = size;
	/* mount_segment's file is the caller's: formatted, and left in place. */
	if (segment && segment[0]) {
		snprintf(nc->node.segment, sizeof(nc->node.segment), "%s", segment);
		nc->node.remove_segment_on_exit = false;
	}
	/* Mooncake's SSD offload is the node's spill tier, one file per node. */
	if (s->ssd_dir[0]) {
		const char *lim = getenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES");
		uint64_t cap = 0;

		snprintf(nc->spill.path, sizeof(nc->spill.path), "%.180s/%.60s.spill", s->ssd_dir,
			 nc->node.segment);
		if (!lim || mc_parse_size(lim, &cap) < 0 || !cap)
			cap = 4 * nc->node.segment_size;
		nc->spill.size = cap;
	}
	s->emb[s->nemb] = emb_start(nc, err, sizeof(err), &rc);
	explicit_bzero(nc->cluster.token, sizeof(nc->cluster.token));
	free(nc);
	if (!s->emb[s->nemb]) {
		snprintf(s->errmsg, sizeof(s->errmsg), "%s", err);
		return rc;
	}
	s->nemb++;
	pthread_mutex_lock(&s->plock);
	s->nodes_known = false;
	pthread_mutex_unlock(&s->plock);
	return 0;
}

int setup_emb_del(struct store *s, const char *name)
{
	for (size_t i = 0; i < s->nemb; i++) {
		if (strcmp(s->emb[i]->name, name))
			continue;
		emb_stop(s->emb[i]);
		memmove(&s->emb[i], &s->emb[i + 1], (s->nemb - i - 1) * sizeof(s->emb[0]));
		s->emb[--s->nemb] = NULL;
		return 0;
	}
	return KVP_ENOTFOUND;
}

/* ---- teardown ------------------------------------------------------------- */

/* The configuration off the store, its token wiped. */
static void setup_conf_free(struct store *s)
{
	if (s->conf)
		explicit_bzero(s->conf->cluster.token, sizeof(s->conf->cluster.token));
	free(s->conf);
	s->conf = NULL;
}

/* Called with lock write-held, GIL released. The handle goes first, so the
 * nodes' drains do not wait for our own connections; each node unmounts at
 * the master before emb_stop returns. */
static void teardown_locked(struct store *s)
{
	pycq_store_closing(s);
	if (s->kvp)
		kvp_close(s->kvp);
	s->kvp = NULL;
	while (s->nemb)
		emb_stop(s->emb[--s->nemb]);
	memset(s->emb, 0, sizeof(s->emb));
	pthread_mutex_lock(&s->plock);
	s->nodes_known = false;
	s->local_node[0] = 0;
	pthread_mutex_unlock(&s->plock);
	setup_conf_free(s);
}

/* In a forked child the parent's handle and nodes are only forgotten
 * (closing them would talk on the parent's connections and join threads
 * that do not exist here), and the locks start afresh. */
void setup_teardown(struct store *s)
{
	if (s->owner && s->owner != getpid()) {
		s->kvp = NULL;
		memset(s->emb, 0, sizeof(s->emb));
		s->nemb = 0;
		s->cqs = NULL;	/* the parent's queues: forgotten as well */
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

/* Whether an RDMA device of @devices works here; @why says why not. */
static bool rdma_usable(const char *devices, char *why, size_t whylen)
{
	struct rdma_ctx *ctx = calloc(1, sizeof(*ctx));
	int rc;

	if (!ctx) {
		snprintf(why, whylen, "out of memory");
		return false;
	}
	rc = rdma_open(ctx, devices, why, whylen);
	if (rc == 0)
		rdma_close(ctx);
	free(ctx);
	return rc == 0;
}

/* Mooncake's "rdma" (and its other fabrics): auto with RDMA where a device
 * works (local copies through /dev/shm first, TCP for hosts RDMA cannot
 * reach); without one, auto alone with one warning, or with strict_protocol
 * kvpool's rdma, which fails the way Mooncake does (-1011). */
static int setup_fabric(struct store *s, const struct sparams *p)
{
	char why[256] = "", err[256];
	bool refined = getenv("KVPOOL_CLIENT_PROTOCOL") != NULL;

	for (size_t i = 0; i < p->extra.n; i++)
		refined |= !strncmp(p->extra.v[i], "client.protocol=", 16);
	if (p->proto != SP_PROTO_FABRIC || refined)
		return 0;
	if (rdma_usable(s->conf->rdma.devices, why, sizeof(why))) {
		s->conf->rdma.enabled = true;
		return 0;
	}
	if (p->strict > 0)
		return conf_set_override(s->conf, "client.protocol=rdma", err, sizeof(err));
	log_warn("setup: protocol \"%s\": %s; falling back to local shared memory for replicas "
		 "on this host and TCP for the others (\"strict_protocol\": true or "
		 "MOONCAKE_STRICT_PROTOCOL=1 makes this an error)", p->protocol, why);
	return 0;
}

/* get_hostname(): Mooncake reports "host:port" (its transfer engine's port);
 * here the port of this store's first embedded node, 0 for a pure client. */
static void setup_hostport(struct store *s, const struct sparams *p)
{
	const char *h = p->hostname && p->hostname[0] ? p->hostname : NULL;
	const char *colon;

	if (h)
		snprintf(s->hostname, sizeof(s->hostname), "%s", h);
	else if (gethostname(s->hostname, sizeof(s->hostname) - 1) < 0)
		snprintf(s->hostname, sizeof(s->hostname), "localhost");
	colon = strrchr(s->hostname, ':');
	if (s->dummy)
		s->hostport[0] = 0;
	else if (colon && colon[1] && strspn(colon + 1, "0123456789") == strlen(colon + 1))
		snprintf(s->hostport, sizeof(s->hostport), "%s", s->hostname);
	else
		snprintf(s->hostport, sizeof(s->hostport), "%s:%d", s->hostname,
			 s->nemb ? s->emb[0]->port : 0);
}

/* Called with lock write-held, GIL released; s holds no handle. On failure
 * the caller's teardown_locked frees what was set up. */
static int store_setup_locked(struct store *s, const struct sparams *p)
{
	struct conv_strv ov = { 0 };
	char err[512] = "";
	uint64_t seg = 0;
	int rc, lvl;

	s->errmsg[0] = 0;
	s->ssd_dir[0] = 0;
	s->tenant[0] = 0;
	if (p->tenant && p->tenant[0] && strcmp(p->tenant, "default")) {
		if (strlen(p->tenant) > 64 || strchr(p->tenant, '/')) {
			snprintf(s->errmsg, sizeof(s->errmsg), "tenant_id \"%.80s\": at most 64 "
				 "bytes, no '/'", p->tenant);
			return KVP_EINVAL;
		}
		snprintf(s->tenant, sizeof(s->tenant), "tenant=%s/", p->tenant);
	}
	rc = sp_overrides(p, &ov, err, sizeof(err));
	if (rc < 0) {
		snprintf(s->errmsg, sizeof(s->errmsg), "%s", err);
		goto out;
	}
	/* Every layer once: the file, KVPOOL_* variables, then what setup()
	 * was told (MOONCAKE_* variables included, with Mooncake's meaning).
	 * The handle and the embedded nodes, also those mounted later after the
	 * file or the variables changed, all start from it. */
	s->conf = calloc(1, sizeof(*s->conf));
	if (!s->conf) {
		rc = KVP_ENOMEM;
		goto out;
	}
	if (conf_load_no_aliases(s->conf, p->config_file, (const char *const *)ov.v, err,
				 sizeof(err)) < 0) {
		snprintf(s->errmsg, sizeof(s->errmsg), "configuration: %s", err);
		rc = KVP_EINVAL;
		goto out;
	}
	if (p->token && p->token[0]) {
		if (strlen(p->token) >= sizeof(s->conf->cluster.token)) {
			snprintf(s->errmsg, sizeof(s->errmsg), "cluster_token: longer than %zu bytes",
				 sizeof(s->conf->cluster.token) - 1);
			rc = KVP_EINVAL;
			goto out;
		}
		snprintf(s->conf->cluster.token, sizeof(s->conf->cluster.token), "%s", p->token);
	}
	/* A library should not chatter: warnings and errors unless log.level is set. */
	{
		const struct conf_key *k = conf_find("log", "level");

		lvl = k && s->conf->src[k - conf_table] != CONF_SRC_DEFAULT ?
			log_level_parse(s->conf->log.level) : LOG_WARNING;
		log_init("kvpool-py", lvl);
	}
	rc = setup_fabric(s, p);
	if (rc < 0)
		goto out;
	if (p->ssd > 0 && p->ssd_path && p->ssd_path[0])
		snprintf(s->ssd_dir, sizeof(s->ssd_dir), "%s", p->ssd_path);
	if (p->has_seg && p->seg) {
		seg = s->conf->node.segment_size;
		if (seg != p->seg)
			log_warn("setup: global_segment_size %" PRIu64 " rounded up to %" PRIu64
				   " (a segment is whole 4096-byte pages, at least 1 MiB)", p->seg, seg);
		rc = setup_emb_add(s, seg, NULL);
		if (rc < 0)
			goto out;
	} else if (p->ssd > 0) {
		log_notice("setup: enable_ssd_offload needs a global_segment_size > 0 (the spill "
			   "tier belongs to this process's segment); not enabled");
	}
	s->kvp = kvp_open_conf(s->conf, &rc);
	if (!s->kvp) {
		if (rc >= 0)
			rc = KVP_EINTERNAL;
		snprintf(s->errmsg, sizeof(s->errmsg), "cannot open a client of master %s: %s%s",
			 s->conf->cluster.master, kvp_strerror(rc), rc == KVP_ENOTSUP ?
			 " (protocol rdma without a usable RDMA device)" : "");
		goto out;
	}
	setup_hostport(s, p);
	rc = 0;
out:
	conv_strv_free(&ov);
	return rc;
}

static int store_do_setup(struct store *self, struct sparams *p)
{
	int rc;

	setup_teardown(self);
	Py_BEGIN_ALLOW_THREADS
	pthread_rwlock_wrlock(&self->lock);
	rc = store_setup_locked(self, p);
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
	struct sparams p;
	bool noargs;
	int rc = -1;

	sparams_init(&p);
	if (sp_parse_args(args, kw, &p, &noargs) == 0 && sp_finish(&p, noargs) == 0) {
		self->dummy = false;
		rc = store_do_setup(self, &p);
	}
	sparams_free(&p);
	if (PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(mc(rc));
}

/* init_all(protocol, device_name, mount_segment_size=16 MiB): setup() from
 * the environment with these three given. */
static PyObject *store_init_all(struct store *self, PyObject *args, PyObject *kw)
{
	struct sparams p;
	int rc = -1;

	sparams_init(&p);
	if (sp_parse_init_all(args, kw, &p) == 0 && sp_finish(&p, true) == 0) {
		self->dummy = false;
		rc = store_do_setup(self, &p);
	}
	sparams_free(&p);
	if (PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(mc(rc));
}

/* _setup_dummy(local_buffer_size, server_address): Mooncake's dummy client
 * borrows a co-located real client's memory; here the host's kvpool-node
 * plays that part, so it is a pure client of the pool the configuration
 * (INI, KVPOOL_*, MOONCAKE_*) names. server_address is Mooncake's real
 * client, which kvpool does not have: recorded only. The Python wrapper
 * keeps mem_pool_size for alloc_from_mem_pool. */
static PyObject *store_setup_dummy(struct store *self, PyObject *args, PyObject *kw)
{
	static char *kwlist[] = { "local_buffer_size", "server_address", NULL };
	PyObject *lbuf = NULL;
	const char *server = NULL;
	struct sparams p;
	int rc = -1;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|Oz:setup_dummy", kwlist, &lbuf, &server))
		return NULL;
	sparams_init(&p);
	p.has_seg = true;
	if (sp_size(&p, lbuf, &p.has_lbuf, &p.lbuf, "local_buffer_size") == 0 &&
	    sp_finish(&p, false) == 0) {
		p.seg = 0;
		self->dummy = true;
		rc = store_do_setup(self, &p);
	}
	sparams_free(&p);
	if (PyErr_Occurred())
		return NULL;
	return PyLong_FromLong(mc(rc));
}

static PyObject *store_close(struct store *self, PyObject *unused)
{
	setup_teardown(self);
	return PyLong_FromLong(0);
}

PyMethodDef setup_methods[] = {
	{ "setup", METH(store_setup), KW,
	  "setup(local_hostname, metadata_server, global_segment_size, local_buffer_size, "
	  "protocol, rdma_devices, master_server_addr, engine=None, enable_ssd_offload=False, "
	  "ssd_offload_path='', tenant_id='default', enable_client_http_server=False, "
	  "client_http_port=9300) | setup(config_dict) | setup() -> int\n"
	  "Connects to kvpool-master; a global_segment_size > 0 also starts an embedded node "
	  "that contributes that much of this process's memory. setup() reads "
	  "MOONCAKE_CONFIG_PATH and the MOONCAKE_* variables." },
	{ "init_all", METH(store_init_all), KW,
	  "init_all(protocol, device_name, mount_segment_size=16 MiB) -> int" },
	{ "_setup_dummy", METH(store_setup_dummy), KW,
	  "_setup_dummy(local_buffer_size, server_address) -> int (see setup_dummy)" },
	{ "close", METH(store_close), METH_NOARGS, "close() -> 0: closes the client; each "
	  "embedded node drains and unmounts its segment at the master before it returns." },
	{ NULL }
};
