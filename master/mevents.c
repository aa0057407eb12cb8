/* mevents: KV events in vLLM's format over ZMQ; see mevents.h and
 * docs/master.md ("KV events"). The format follows
 * vllm-project/vllm vllm/distributed/kv_events.py at 0181ea3173e5:
 * frames [topic, seq (8 bytes big-endian), msgpack(EventBatch)], the
 * batch a map {ts, events, data_parallel_rank}, each event a map tagged by
 * "type" (msgspec tag=True, omit_defaults=True). libzmq is dlopen()ed;
 * msgpack-c's packers are header-inline (nothing to link).
 */
#include "mevents.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <msgpack/pack.h>
#include <zmq.h>

#include "clock.h"
#include "log.h"
#include "master_i.h"

#define MEV_BATCH_MAX 64		/* events per published batch */
#define MEV_REPLAY_BYTES (64u << 20)	/* bound on the replay buffer's payloads */
#define MEV_PUB_HWM 100000		/* vLLM's default hwm */
#define MEV_IDENTITY_MAX 255		/* ZMQ routing ids are 1..255 bytes */

/* The libzmq entry points used; the header gives only types and constants. */
struct zmq_api {
	void *lib;
	void *(*ctx_new)(void);
	int (*ctx_term)(void *);
	void *(*socket)(void *, int);
	int (*close)(void *);
	int (*setsockopt)(void *, int, const void *, size_t);
	int (*getsockopt)(void *, int, void *, size_t *);
	int (*bind)(void *, const char *);
	int (*send)(void *, const void *, size_t, int);
	int (*recv)(void *, void *, size_t, int);
	int (*poll)(zmq_pollitem_t *, int, long);
	int (*errnum)(void);
	const char *(*strerror)(int);
};

struct replay_ent {
	uint64_t seq;
	uint8_t *p;		/* owned */
	size_t n;
};

struct mevents {
	struct zmq_api z;
	void *ctx, *pub, *router;
	int efd;		/* eventfd: the queue became non-empty, or stop */
	pthread_t thr;
	struct mev_fmt fmt;
	char backend_id[CONF_STR];
	char topic[CONF_STR];
	bool object_key;

	pthread_mutex_t lock;
	struct mev_item *q;	/* ring, protected by lock */
	size_t qcap, qhead, qn;	/* protected by lock */
	bool stop;		/* protected by lock */

	/* publisher thread only */
	struct replay_ent *rb;
	size_t rbcap, rbhead, rbn, rbbytes;
	uint64_t seq;		/* the next batch's */

	_Atomic uint64_t events, batches, dropped, replays, bad;
};

/* ---- the encoder ---- */

struct obuf {
	uint8_t *p;
	size_t n, cap;
	bool oom;
};

static int obuf_write(void *data, const char *buf, size_t len)
{
	struct obuf *b = data;

	if (b->oom)
		return -1;
	if (b->n + len > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + len)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return -1;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, buf, len);
	b->n += len;
	return 0;
}

static void pk_str(msgpack_packer *pk, const char *s)
{
	size_t n = strlen(s);

	msgpack_pack_str(pk, n);
	msgpack_pack_str_body(pk, s, n);
}

static void pk_opt_medium(msgpack_packer *pk, uint8_t medium)
{
	if (medium == MEV_MEDIUM_CPU)
		pk_str(pk, "CPU");
	else if (medium == MEV_MEDIUM_DISK)
		pk_str(pk, "DISK");
	else
		msgpack_pack_nil(pk);
}

static const char *const type_names[] = { "BlockStored", "BlockRemoved", "AllBlocksCleared" };

/* vLLM's older layout (array_like=True): positional, the tag first. */
static void pack_legacy(const struct mev_fmt *f, msgpack_packer *pk, const struct mev_item *e)
{
	switch (e->type) {
	case 0:
		msgpack_pack_array(pk, 7);
		pk_str(pk, type_names[0]);
		msgpack_pack_array(pk, 1);
		msgpack_pack_uint64(pk, e->hash);
		if (e->has_parent)
			msgpack_pack_uint64(pk, e->parent);
		else
			msgpack_pack_nil(pk);
		msgpack_pack_array(pk, 0);
		msgpack_pack_uint64(pk, f->block_size);
		msgpack_pack_nil(pk);
		pk_opt_medium(pk, e->medium);
		break;
	case 1:
		msgpack_pack_array(pk, 3);
		pk_str(pk, type_names[1]);
		msgpack_pack_array(pk, 1);
		msgpack_pack_uint64(pk, e->hash);
		pk_opt_medium(pk, e->medium);
		break;
	default:
		msgpack_pack_array(pk, 1);
		pk_str(pk, type_names[2]);
		break;
	}
}

/* The newest layout: a map per event, "type" first, the fields without a
 * default always present (msgspec omit_defaults), extras after them
 * (msgspec ignores fields it does not know). */
static void pack_map(const struct mev_fmt *f, msgpack_packer *pk, const struct mev_item *e)
{
	bool bid = f->backend_id && *f->backend_id;
	bool okey = e->key && e->type != 2;
	uint32_t n = (e->type == 0 ? 8 : e->type == 1 ? 3 : 1) + bid + okey;

	msgpack_pack_map(pk, n);
	pk_str(pk, "type");
	pk_str(pk, type_names[e->type <= 2 ? e->type : 2]);
	if (e->type <= 1) {
		pk_str(pk, "block_hashes");
		msgpack_pack_array(pk, 1);
		msgpack_pack_uint64(pk, e->hash);
	}
	if (e->type == 0) {
		pk_str(pk, "parent_block_hash");
		if (e->has_parent)
			msgpack_pack_uint64(pk, e->parent);
		else
			msgpack_pack_nil(pk);
		pk_str(pk, "token_ids");
		msgpack_pack_array(pk, 0);
		pk_str(pk, "block_size");
		msgpack_pack_uint64(pk, f->block_size);
		pk_str(pk, "lora_id");
		msgpack_pack_nil(pk);
	}
	if (e->type <= 1) {
		pk_str(pk, "medium");
		pk_opt_medium(pk, e->medium);
	}
	if (e->type == 0) {
		pk_str(pk, "lora_name");
		msgpack_pack_nil(pk);
	}
	if (okey) {
		pk_str(pk, "object_key");
		pk_str(pk, e->key);
	}
	if (bid) {
		pk_str(pk, "backend_id");
		pk_str(pk, f->backend_id);
	}
}

int mevents_encode(const struct mev_fmt *f, double ts, const struct mev_item *it, size_t n,
		   uint8_t **out, size_t *outlen)
{
	struct obuf b = { 0 };
	msgpack_packer pk;

	msgpack_packer_init(&pk, &b, obuf_write);
	if (f->legacy) {
		msgpack_pack_array(&pk, 3);
		msgpack_pack_double(&pk, ts);
	} else {
		msgpack_pack_map(&pk, 3);
		pk_str(&pk, "ts");
		msgpack_pack_double(&pk, ts);
		pk_str(&pk, "events");
	}
	msgpack_pack_array(&pk, n);
	for (size_t i = 0; i < n; i++) {
		if (f->legacy)
			pack_legacy(f, &pk, &it[i]);
		else
			pack_map(f, &pk, &it[i]);
	}
	if (!f->legacy)
		pk_str(&pk, "data_parallel_rank");
	msgpack_pack_uint64(&pk, 0);	/* one master: rank 0 */
	if (b.oom) {
		free(b.p);
		return -ENOMEM;
	}
	*out = b.p;
	*outlen = b.n;
	return 0;
}

/* ---- keys and the replay request ---- */

uint64_t mevents_block_hash(const uint8_t *key, size_t klen)
{
	bool hex = klen > 2 && key[0] == '0' && (key[1] == 'x' || key[1] == 'X');
	size_t i = hex ? 2 : 0;
	uint64_t v = 0;
	bool ok = klen > i && klen - i <= (hex ? 16u : 20u);

	for (; ok && i < klen; i++) {
		unsigned d;
		uint8_t c = key[i];
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (hex && c >= 'a' && c <= 'f')
			d = c - 'a' + 10u;
		else if (hex && c >= 'A' && c <= 'F')
			d = c - 'A' + 10u;
		else
			break;
		if (!hex && v > (UINT64_MAX - d) / 10)
			break;		/* more than a u64 */
		v = hex ? v << 4 | d : v * 10 + d;
	}
	if (ok && i == klen)
		return v;
	uint64_t h = 0xcbf29ce484222325ull;	/* FNV-1a 64 */
	for (i = 0; i < klen; i++) {
		h ^= key[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

int mevents_parse_replay(const uint8_t *const *frame, const size_t *len, size_t n,
			 uint64_t *start)
{
	if (n != 3 || len[0] < 1 || len[0] > MEV_IDENTITY_MAX || len[1] != 0 || len[2] != 8)
		return -EINVAL;
	uint64_t v = 0;
	for (size_t i = 0; i < 8; i++)
		v = v << 8 | frame[2][i];
	*start = v;
	return 0;
}

/* ---- the publisher thread ---- */

static void item_free(struct mev_item *e)
{
	free(e->key);
	e->key = NULL;
}

static void be64(uint8_t *p, uint64_t v)
{
	for (int i = 7; i >= 0; i--, v >>= 8)
		p[i] = (uint8_t)v;
}

/* Keeps payload p (taking ownership) for replay: the oldest go first
 * when the count or the byte bound is reached. */
static void replay_keep(struct mevents *ev, uint64_t seq, uint8_t *p, size_t n)
{
	if (!ev->rbcap || n > MEV_REPLAY_BYTES) {
		free(p);
		return;
	}
	while (ev->rbn && (ev->rbn == ev->rbcap || ev->rbbytes + n > MEV_REPLAY_BYTES)) {
		struct replay_ent *o = &ev->rb[ev->rbhead];
		ev->rbbytes -= o->n;
		free(o->p);
		ev->rbhead = (ev->rbhead + 1) % ev->rbcap;
		ev->rbn--;
	}
	ev->rb[(ev->rbhead + ev->rbn) % ev->rbcap] = (struct replay_ent){ seq, p, n };
	ev->rbn++;
	ev->rbbytes += n;
}

static void publish(struct mevents *ev, struct mev_item *it, size_t n)
{
	uint8_t *p;
	size_t len;
	uint8_t seqb[8];
	double ts = (double)clock_realtime_ns() / 1e9;

	if (mevents_encode(&ev->fmt, ts, it, n, &p, &len)) {
		atomic_fetch_add(&ev->dropped, n);
		return;
	}
	uint64_t seq = ev->seq++;
	be64(seqb, seq);
	/* A PUB socket never blocks: past its high-water mark it drops. */
	if (ev->z.send(ev->pub, ev->topic, strlen(ev->topic), ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    ev->z.send(ev->pub, seqb, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	    ev->z.send(ev->pub, p, len, ZMQ_DONTWAIT) < 0)
		atomic_fetch_add(&ev->dropped, n);
	else
		atomic_fetch_add(&ev->events, n);
	atomic_fetch_add(&ev->batches, 1);
	replay_keep(ev, seq, p, len);
}

/* Publishes what is queued, MEV_BATCH_MAX events a batch. True when the
 * queue is empty and stop was asked. */
static bool drain(struct mevents *ev)
{
	struct mev_item batch[MEV_BATCH_MAX];

	for (;;) {
		size_t n = 0;
		pthread_mutex_lock(&ev->lock);
		while (ev->qn && n < MEV_BATCH_MAX) {
			batch[n++] = ev->q[ev->qhead];
			ev->qhead = (ev->qhead + 1) % ev->qcap;
			ev->qn--;
		}
		bool stop = ev->stop && !n;
		pthread_mutex_unlock(&ev->lock);
		if (!n)
			return stop;
		publish(ev, batch, n);
		for (size_t i = 0; i < n; i++)
			item_free(&batch[i]);
	}
}

/* Receives one message of the ROUTER socket (the first frames into f,
 * their sizes in len; longer frames are cut, their size kept). The number
 * of frames, or -1 when nothing is waiting. */
static int recv_request(struct mevents *ev, uint8_t f[4][MEV_IDENTITY_MAX + 1], size_t *len)
{
	int n = 0, more = 1;
	uint8_t sink[64];

	while (more) {
		int r = ev->z.recv(ev->router, n < 4 ? f[n] : sink, n < 4 ? MEV_IDENTITY_MAX + 1 :
				   sizeof(sink), n ? 0 : ZMQ_DONTWAIT);
		if (r < 0)
			return n ? n : -1;
		if (n < 4)
			len[n] = (size_t)r;
		n++;
		size_t sz = sizeof(more);
		if (ev->z.getsockopt(ev->router, ZMQ_RCVMORE, &more, &sz) < 0)
			more = 0;
	}
	return n;
}

/* vLLM's replay protocol: every kept batch from the asked seq on as
 * [identity, "", seq, payload], then [identity, "", -1, ""]. A ROUTER
 * socket drops what a slow peer cannot take: this never blocks. */
static void serve_replay(struct mevents *ev)
{
	uint8_t f[4][MEV_IDENTITY_MAX + 1];
	size_t len[4];
	int n;

	while ((n = recv_request(ev, f, len)) >= 0) {
		const uint8_t *fp[4] = { f[0], f[1], f[2], f[3] };
		uint64_t start;
		if (mevents_parse_replay(fp, len, (size_t)n, &start)) {
			atomic_fetch_add(&ev->bad, 1);
			log_info("kv events: malformed replay request (%d frames) ignored", n);
			continue;
		}
		atomic_fetch_add(&ev->replays, 1);
		uint8_t seqb[8];
		const int more = ZMQ_SNDMORE | ZMQ_DONTWAIT;
		for (size_t i = 0; i < ev->rbn; i++) {
			const struct replay_ent *e = &ev->rb[(ev->rbhead + i) % ev->rbcap];
			if (e->seq < start)
				continue;
			be64(seqb, e->seq);
			if (ev->z.send(ev->router, f[0], len[0], more) < 0 ||
			    ev->z.send(ev->router, "", 0, more) < 0 ||
			    ev->z.send(ev->router, seqb, 8, more) < 0 ||
			    ev->z.send(ev->router, e->p, e->n, ZMQ_DONTWAIT) < 0)
				break;
		}
		memset(seqb, 0xff, sizeof(seqb));
		if (ev->z.send(ev->router, f[0], len[0], more) >= 0 &&
		    ev->z.send(ev->router, "", 0, more) >= 0 &&
		    ev->z.send(ev->router, seqb, 8, more) >= 0)
			ev->z.send(ev->router, "", 0, ZMQ_DONTWAIT);
	}
}

static void *pub_thread(void *arg)
{
	struct mevents *ev = arg;
	zmq_pollitem_t it[2] = {
		{ .socket = NULL, .fd = ev->efd, .events = ZMQ_POLLIN },
		{ .socket = ev->router, .events = ZMQ_POLLIN },
	};
	int nit = ev->router ? 2 : 1;

	for (;;) {
		if (ev->z.poll(it, nit, -1) < 0 && ev->z.errnum() != EINTR) {
			log_err("kv events: zmq_poll: %s", ev->z.strerror(ev->z.errnum()));
			usleep(100000);
		}
		if (nit == 2 && (it[1].revents & ZMQ_POLLIN))
			serve_replay(ev);
		if (it[0].revents & ZMQ_POLLIN) {
			uint64_t v;
			if (read(ev->efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				log_err("kv events: eventfd: %s", strerror(errno));
		}
		if (drain(ev))
			break;
	}
	return NULL;
}

/* ---- the loop thread's side ---- */

static void wake(struct mevents *ev)
{
	uint64_t one = 1;

	if (write(ev->efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_err("kv events: eventfd: %s", strerror(errno));
}

/* Takes ownership of e->key. */
static void enqueue(struct mevents *ev, struct mev_item *e)
{
	bool first;

	pthread_mutex_lock(&ev->lock);
	if (ev->qn == ev->qcap || ev->stop) {
		pthread_mutex_unlock(&ev->lock);
		item_free(e);
		atomic_fetch_add(&ev->dropped, 1);
		return;
	}
	ev->q[(ev->qhead + ev->qn) % ev->qcap] = *e;
	first = ev->qn++ == 0;
	pthread_mutex_unlock(&ev->lock);
	if (first)	/* the thread drains until empty: one wake-up per burst */
		wake(ev);
}

static char *key_copy(struct mevents *ev, const uint8_t *key, size_t klen)
{
	char *s;

	if (!ev->object_key || !(s = malloc(klen + 1)))
		return NULL;
	memcpy(s, key, klen);
	s[klen] = '\0';
	return s;
}

void mevents_stored(struct mevents *ev, const uint8_t *key, size_t klen, const uint8_t *pkey,
		    size_t pklen, enum mev_medium medium)
{
	struct mev_item e = { .type = 0, .medium = (uint8_t)medium, .has_parent = pkey != NULL,
			      .hash = mevents_block_hash(key, klen),
			      .parent = pkey ? mevents_block_hash(pkey, pklen) : 0,
			      .key = key_copy(ev, key, klen) };

	enqueue(ev, &e);
}

void mevents_removed(struct mevents *ev, const uint8_t *key, size_t klen, enum mev_medium medium)
{
	struct mev_item e = { .type = 1, .medium = (uint8_t)medium,
			      .hash = mevents_block_hash(key, klen),
			      .key = key_copy(ev, key, klen) };

	enqueue(ev, &e);
}

void mevents_cleared(struct mevents *ev)
{
	struct mev_item e = { .type = 2 };

	enqueue(ev, &e);
}

void mevents_stats(struct mevents *ev, struct mevents_stats *st)
{
	st->events = atomic_load(&ev->events);
	st->batches = atomic_load(&ev->batches);
	st->dropped = atomic_load(&ev->dropped);
	st->replays = atomic_load(&ev->replays);
	st->bad_requests = atomic_load(&ev->bad);
}

bool mevents_obj_has_tier(const struct obj *o, unsigned tier, int skip)
{
	for (unsigned k = 0; k < o->nrep; k++)
		if ((int)k != skip && obj_rep(o)[k].tier == tier)
			return true;
	return false;
}

static bool announced(const struct obj *o)
{
	return obj_complete(o) && !(o->flags & OBJ_VERSION);
}

static enum mev_medium tier_medium(unsigned tier)
{
	return tier == KVP_TIER_MEM ? MEV_MEDIUM_CPU : MEV_MEDIUM_DISK;
}

void mevents_obj_stored(struct master *m, const struct obj *o, unsigned tier)
{
	if (!m->ev || !announced(o))
		return;
	const struct obj_links *l = objtab_links(&m->objs, o);
	const struct obj *p = o->chained ? objtab_find_hg(&m->objs, l->phash, l->pgen) : NULL;

	mevents_stored(m->ev, obj_key(o), o->key_len, p ? obj_key(p) : NULL, p ? p->key_len : 0,
		       tier_medium(tier));
}

void mevents_obj_removed(struct master *m, const struct obj *o, unsigned tier)
{
	if (m->ev && !m->ev_mute && announced(o))
		mevents_removed(m->ev, obj_key(o), o->key_len, tier_medium(tier));
}

/* ---- set-up ---- */

#define ZSYM(field, name)						\
	do {								\
		*(void **)&z->field = dlsym(z->lib, name);		\
		if (!z->field)						\
			missing = name;					\
	} while (0)

static int zmq_load(struct zmq_api *z, char *err, size_t errlen)
{
	const char *missing = NULL;

	z->lib = dlopen("libzmq.so.5", RTLD_NOW | RTLD_LOCAL);
	if (!z->lib) {
		log_seterr(err, errlen, "kv events need libzmq.so.5 (apt-get install libzmq5): %s",
			   dlerror());
		return -ENOENT;
	}
	ZSYM(ctx_new, "zmq_ctx_new");
	ZSYM(ctx_term, "zmq_ctx_term");
	ZSYM(socket, "zmq_socket");
	ZSYM(close, "zmq_close");
	ZSYM(setsockopt, "zmq_setsockopt");
	ZSYM(getsockopt, "zmq_getsockopt");
	ZSYM(bind, "zmq_bind");
	ZSYM(send, "zmq_send");
	ZSYM(recv, "zmq_recv");
	ZSYM(poll, "zmq_poll");
	ZSYM(errnum, "zmq_errno");
	ZSYM(strerror, "zmq_strerror");
	if (missing) {
		log_seterr(err, errlen, "libzmq.so.5 lacks %s", missing);
		dlclose(z->lib);
		z->lib = NULL;
		return -ENOENT;
	}
	return 0;
}

/* A socket of type bound to endpoint; NULL with the reason in err. */
static void *zsock(struct mevents *ev, int type, const char *endpoint, int linger_ms,
		   char *err, size_t errlen)
{
	void *s = ev->z.socket(ev->ctx, type);
	int hwm = MEV_PUB_HWM;

	if (!s) {
		log_seterr(err, errlen, "zmq_socket: %s", ev->z.strerror(ev->z.errnum()));
		return NULL;
	}
	ev->z.setsockopt(s, ZMQ_LINGER, &linger_ms, sizeof(linger_ms));
	ev->z.setsockopt(s, ZMQ_SNDHWM, &hwm, sizeof(hwm));
	if (ev->z.bind(s, endpoint) < 0) {
		log_seterr(err, errlen, "kv events: cannot bind %s: %s", endpoint,
			   ev->z.strerror(ev->z.errnum()));
		ev->z.close(s);
		return NULL;
	}
	return s;
}

struct mevents *mevents_create(const struct kvp_conf *c, char *err, size_t errlen)
{
	struct mevents *ev;

	log_seterr(err, errlen, "%s", "");
	if (!*c->master.kv_events_endpoint)
		return NULL;
	ev = calloc(1, sizeof(*ev));
	if (!ev) {
		log_seterr(err, errlen, "kv events: out of memory");
		return NULL;
	}
	ev->efd = -1;
	snprintf(ev->backend_id, sizeof(ev->backend_id), "%s", c->master.kv_events_backend_id);
	snprintf(ev->topic, sizeof(ev->topic), "%s", c->master.kv_events_topic);
	ev->fmt = (struct mev_fmt){ .legacy = c->master.kv_events_legacy_compat,
				    .block_size = (uint64_t)c->master.kv_events_block_size,
				    .backend_id = ev->backend_id };
	ev->object_key = c->master.kv_events_object_key;
	ev->qcap = (size_t)c->master.kv_events_queue;
	ev->rbcap = (size_t)c->master.kv_events_buffer;
	ev->q = calloc(ev->qcap, sizeof(*ev->q));
	ev->rb = ev->rbcap ? calloc(ev->rbcap, sizeof(*ev->rb)) : NULL;
	if (!ev->q || (ev->rbcap && !ev->rb)) {
		log_seterr(err, errlen, "kv events: out of memory for the queue");
		goto out_free;
	}
	if (zmq_load(&ev->z, err, errlen))
		goto out_free;
	ev->ctx = ev->z.ctx_new();
	if (!ev->ctx) {
		log_seterr(err, errlen, "zmq_ctx_new: %s", ev->z.strerror(ev->z.errnum()));
		goto out_dlclose;
	}
	/* a short linger lets the last batches leave at shutdown */
	ev->pub = zsock(ev, ZMQ_PUB, c->master.kv_events_endpoint, 200, err, errlen);
	if (!ev->pub)
		goto out_term;
	if (*c->master.kv_events_replay_endpoint) {
		ev->router = zsock(ev, ZMQ_ROUTER, c->master.kv_events_replay_endpoint, 0, err,
				   errlen);
		if (!ev->router)
			goto out_close_pub;
	}
	ev->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ev->efd < 0) {
		log_seterr(err, errlen, "eventfd: %s", strerror(errno));
		goto out_close_router;
	}
	pthread_mutex_init(&ev->lock, NULL);
	int rc = pthread_create(&ev->thr, NULL, pub_thread, ev);
	if (rc) {
		log_seterr(err, errlen, "kv events: pthread_create: %s", strerror(rc));
		goto out_mutex;
	}
	pthread_setname_np(ev->thr, "kvp-events");
	log_notice("kv events: publishing on %s%s%s (%s layout)", c->master.kv_events_endpoint,
		   ev->router ? ", replay on " : "", c->master.kv_events_replay_endpoint,
		   ev->fmt.legacy ? "vLLM array" : "vLLM map");
	return ev;

out_mutex:
	pthread_mutex_destroy(&ev->lock);
	close(ev->efd);
out_close_router:
	if (ev->router)
		ev->z.close(ev->router);
out_close_pub:
	ev->z.close(ev->pub);
out_term:
	ev->z.ctx_term(ev->ctx);
out_dlclose:
	dlclose(ev->z.lib);
out_free:
	free(ev->rb);
	free(ev->q);
	free(ev);
	return NULL;
}

void mevents_destroy(struct mevents *ev)
{
	if (!ev)
		return;
	pthread_mutex_lock(&ev->lock);
	ev->stop = true;
	pthread_mutex_unlock(&ev->lock);
	wake(ev);
	pthread_join(ev->thr, NULL);
	pthread_mutex_destroy(&ev->lock);
	close(ev->efd);
	if (ev->router)
		ev->z.close(ev->router);
	ev->z.close(ev->pub);
	ev->z.ctx_term(ev->ctx);
	/* libzmq stays mapped: its context threads are gone, dlclose gains nothing */
	for (size_t i = 0; i < ev->rbn; i++)
		free(ev->rb[(ev->rbhead + i) % ev->rbcap].p);
	free(ev->rb);
	free(ev->q);
	free(ev);
}
