/* mkeys: requests on existing keys — GET (read leases, promotion on a disk
 * hit), LEASE_RELEASE, EXISTS, SIZE, STAT, PIN, REMOVE, REPLICA_CLEAR,
 * REMOVE_PREFIX, LIST (byte-order pages with delimiter roll-up) and INFO. Incomplete puts are invisible
 * here. Loop thread only; no locks.
 */
#include "mkeys.h"

#include <stdlib.h>
#include <string.h>

#include "kvpool.h"
#include "mbatch.h"
#include "mevents.h"
#include "mlease.h"
#include "mpolicy.h"
#include "mtier.h"

#define LIST_DEFAULT 1000

/* One key of a request batch, pointing into the frame body. */
struct kref {
	const uint8_t *p;
	uint32_t len;
	uint32_t hash;
};

/* Reads a batch of n keys ("n x {str key}", shape already checked) into
 * m->kbuf, prefetching their buckets and chain heads: NULL on OOM. */
static struct kref *read_keys(struct master *m, struct rbuf *r, uint32_t n)
{
	if (m->kbuf_cap < n) {
		struct kref *k = realloc(m->kbuf, n * sizeof(*k));
		if (!k)
			return NULL;
		m->kbuf = k;
		m->kbuf_cap = n;
	}
	for (uint32_t i = 0; i < n; i++) {
		size_t len;
		struct kref *k = &m->kbuf[i];
		k->p = rb_str(r, &len);
		k->len = (uint32_t)len;
		k->hash = objtab_hash(k->p, len);
		objtab_prefetch_bucket(&m->objs, k->hash);
	}
	for (uint32_t i = 0; i < n; i++)
		objtab_prefetch_head(&m->objs, m->kbuf[i].hash);
	return m->kbuf;
}

/* A visible (complete) object: incomplete puts are invisible to readers. */
static struct obj *find_visible(struct master *m, const struct kref *k, bool write,
				int *status)
{
	if (!wire_key_ok(k->p, k->len)) {
		*status = KVP_EKEY;
		return NULL;
	}
	if ((*status = mten_check(m, m->cur, k->p, k->len, write)) != 0 ||
	    (*status = mns_check(m, m->cur, k->p, k->len, write)) != 0)
		return NULL;
	struct obj *o = objtab_find_hash(&m->objs, k->p, k->len, k->hash);
	if (!o || !obj_complete(o)) {
		*status = KVP_ENOTFOUND;
		return NULL;
	}
	*status = 0;
	return o;
}

/* Shape check + read_keys for the "n x {str key}" batches. */
static int key_batch(struct master *m, struct rbuf *r, struct wbuf *b, uint32_t *n,
		     struct kref **keys)
{
	int rc = mbatch_shape(m, r, "s", n);

	if (rc)
		return rc;
	rb_u32(r);
	*keys = read_keys(m, r, *n);
	if (!*keys)
		return KVP_ENOMEM;
	wb_u32(b, *n);
	return 0;
}

static void put_reps(struct wbuf *b, const struct obj *o)
{
	wb_u8(b, o->nrep);
	for (unsigned k = 0; k < o->nrep; k++) {
		wb_u32(b, (uint32_t)obj_rep(o)[k].seg);
		wb_u8(b, (uint8_t)obj_rep(o)[k].tier);
		wb_u64(b, rep_off(&obj_rep(o)[k]));
		wb_u64(b, rep_len(&obj_rep(o)[k]));
	}
}

/* A prefix lookup: an engine asks a request's block keys in chain order
 * and uses the leading run of present blocks. Batches of one key are not
 * counted (single reads, not lookups). */
static void prefix_count(struct master *m, const struct kref *keys, uint32_t n, uint32_t run)
{
	if (n < 2)
		return;
	m->prefix_blocks_asked += n;
	m->prefix_blocks_found += run;
	uint32_t page = mns_page_size(m, keys[0].p, keys[0].len);
	if (page) {
		m->prefix_tokens_asked += (uint64_t)n * page;
		m->prefix_tokens_found += (uint64_t)run * page;
	}
}

int mkeys_get(struct master *m, struct master_client *c, struct rbuf *r, struct wbuf *b,
	      struct op_stats *st)
{
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	uint32_t run = 0;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], false, &s);
		if (o && mlease_grant(m, o)) {
			o = NULL;
			s = KVP_ENOMEM;
		}
		if (o && run == i)
			run++;
		wb_status(b, s);
		if (!o) {
			wb_bytes(b, (const uint8_t[33]){ 0 }, 33);	/* 4 x u64 + nrep */
		} else {
			mpol_touch(&m->pol, o);
			wb_u64(b, o->value_len);
			wb_u64(b, o->generation);
			wb_u64(b, o->checksum);
			wb_u64(b, mlease_ttl(m));
			put_reps(b, o);
			if (m->conf.spill.promote_on_hit)
				mtier_promote_maybe(m, c, o);
		}
		mbatch_item(st, s);
	}
	prefix_count(m, keys, n, run);
	return 0;
}

/* EXISTS (a lookup) and TOUCH (reads done without the master: each key
 * found counts one for eviction); the same reply. */
static int exists_or_touch(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st,
			   bool read)
{
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	uint32_t run = 0;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], false, &s);
		if (o) {
			if (read)
				mpol_touch(&m->pol, o);
			s = 1;
			if (run == i)
				run++;
		} else if (s == KVP_ENOTFOUND)
			s = 0;
		wb_status(b, s);
		mbatch_item(st, s);
	}
	if (!read)	/* a report of reads, not an engine asking */
		prefix_count(m, keys, n, run);
	return 0;
}

int mkeys_exists(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	return exists_or_touch(m, r, b, st, false);
}

int mkeys_touch(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	return exists_or_touch(m, r, b, st, true);
}

int mkeys_size(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], false, &s);
		wb_status(b, s);
		wb_u64(b, o ? o->value_len : 0);
		mbatch_item(st, s);
	}
	return 0;
}

int mkeys_stat(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	uint64_t now_rt = master_clock_ns(CLOCK_REALTIME);
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], false, &s);
		wb_status(b, s);
		if (!o) {
			wb_bytes(b, (const uint8_t[57]){ 0 }, 57);	/* 7 x u64 + nrep */
		} else {
			wb_u64(b, o->value_len);
			wb_u64(b, o->generation);
			wb_u64(b, o->checksum);
			wb_u64(b, obj_put_ns(o));
			wb_u64(b, now_rt - (uint64_t)(m_now32(m) - mpol_clk_ms(m, o->atime)) * 1000000ull);
			wb_i64(b, obj_leased(m, o) ? (int32_t)(o->deadline - m_now32(m)) : 0);
			wb_i64(b, obj_pinned(m, o) ? (int64_t)obj_pin_s(&m->objs, o) * 1000 -
							   (int64_t)(m->now_ms - m->start_ms) : 0);
			put_reps(b, o);
		}
		mbatch_item(st, s);
	}
	return 0;
}

int mkeys_pin(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint64_t ttl = rb_u64(r);
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], true, &s);
		/* hard pins too: no cap */
		if (o && objtab_set_pin(&m->objs, o, mlease_pin_until(m, ttl)))
			s = KVP_ENOMEM;
		wb_status(b, s);
		mbatch_item(st, s);
	}
	return 0;
}

int mkeys_lease_release(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t n;
	int rc = mbatch_shape(m, r, "s8", &n);

	if (rc)
		return rc;
	rb_u32(r);
	wb_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		int s;
		uint64_t gen;
		struct obj *o = mobj_read_gen(m, r, &gen, &s);
		if (o && !mten_may_read(m, m->cur, obj_key(o), o->key_len))
			o = NULL;	/* not its lease to release */
		if (o && obj_complete(o))
			mlease_release(m, o);
		else if (s != KVP_EKEY)
			s = KVP_ENOTFOUND;	/* that generation is gone */
		wb_status(b, s);
		mbatch_item(st, s);
	}
	return 0;
}

/* ---- removal ---- */

int mkeys_replica_clear(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint32_t sid = rb_u32(r);
	uint8_t force = rb_u8(r);
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	if (!segreg_online(&m->segs, sid))
		return KVP_ENOSEG;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], true, &s);
		unsigned k = 0;
		while (o && k < o->nrep && (uint32_t)obj_rep(o)[k].seg != sid)
			k++;
		if (o && k < o->nrep && obj_leased(m, o) && !force)
			s = KVP_ELEASED;
		else if (o && k < o->nrep)
			mobj_drop_replica(m, o, k, true);	/* one per segment; o may go */
		wb_status(b, s);
		mbatch_item(st, s);
	}
	return 0;
}

int mkeys_remove(struct master *m, struct rbuf *r, struct wbuf *b, struct op_stats *st)
{
	uint8_t force = rb_u8(r);
	uint32_t n;
	struct kref *keys;
	int rc = key_batch(m, r, b, &n, &keys);

	if (rc)
		return rc;
	for (uint32_t i = 0; i < n; i++) {
		int s;
		struct obj *o = find_visible(m, &keys[i], true, &s);
		if (o && obj_leased(m, o) && !force)
			s = KVP_ELEASED;
		else if (o)
			mobj_destroy(m, o, true);
		wb_status(b, s);
		mbatch_item(st, s);
	}
	return 0;
}

static bool has_prefix(const struct obj *o, const uint8_t *p, size_t n)
{
	return o->key_len >= n && memcmp(obj_key(o), p, n) == 0;
}

int mkeys_remove_prefix(struct master *m, struct rbuf *r, struct wbuf *b)
{
	size_t plen;
	const uint8_t *prefix = rb_str(r, &plen);
	uint8_t force = rb_u8(r);
	int rc;

	if (!rb_ok(r))
		return KVP_EPROTO;
	if ((rc = mten_check_prefix(m, m->cur, prefix, plen, true)) != 0)
		return rc;
	/* a tenant's keys only: the others under the prefix stay */
	bool mine = tenant_covers_prefix(mten_of(m, m->cur), prefix, plen, TENANT_WRITE);
	uint64_t count = 0;
	/* Every object goes (none is leased, or force): one AllBlocksCleared
	 * says it instead of a BlockRemoved per block. */
	bool all = !plen && mine && (force || !m->leased.n);
	m->ev_mute = all;
	struct obj *o = objtab_seek(&m->objs, prefix, plen, false);
	while (o && has_prefix(o, prefix, plen)) {
		struct obj *next = objtab_next(&m->objs, o);
		if (obj_complete(o) && (force || !obj_leased(m, o)) &&
		    (mine || tenant_may(mten_of(m, m->cur), obj_key(o), o->key_len, TENANT_WRITE))) {
			mobj_destroy(m, o, true);
			count++;
		}
		o = next;
	}
	m->ev_mute = false;
	if (all && count && m->ev)
		mevents_cleared(m->ev);
	wb_u64(b, count);
	return 0;
}

/* ---- LIST ---- */

/* First object not starting with p (p[n-1] incremented, carrying). */
static struct obj *seek_past(struct master *m, const uint8_t *p, size_t n)
{
	uint8_t buf[KVP_MAX_KEY];

	memcpy(buf, p, n);
	while (n && buf[n - 1] == 0xff)
		n--;
	if (!n)
		return NULL;
	buf[n - 1]++;
	return objtab_seek(&m->objs, buf, n, false);
}

/* Length of the rolled-up common prefix of key (through the first delimiter
 * after plen), 0 if none. */
static size_t rollup(const uint8_t *key, size_t klen, size_t plen, int delim)
{
	if (delim < 0 || klen <= plen)
		return 0;
	const uint8_t *d = memchr(key + plen, delim, klen - plen);
	return d ? (size_t)(d - key) + 1 : 0;
}

int mkeys_list(struct master *m, struct rbuf *r, struct wbuf *b)
{
	size_t plen, dlen, clen;
	const uint8_t *prefix = rb_str(r, &plen);
	const uint8_t *dp = rb_str(r, &dlen);
	const uint8_t *cursor = rb_str(r, &clen);
	uint32_t limit = rb_u32(r);

	if (!rb_ok(r))
		return KVP_EPROTO;
	if (dlen > 1 || plen > KVP_MAX_KEY || clen > KVP_MAX_KEY)
		return KVP_EINVAL;
	int rc = mten_check_prefix(m, m->cur, prefix, plen, false);
	if (rc)
		return rc;
	/* a tenant sees the keys it may read, and prefixes rolled up over them */
	const struct tenant *ten = mten_of(m, m->cur);
	bool all = tenant_covers_prefix(ten, prefix, plen, TENANT_READ);
	int delim = dlen ? dp[0] : -1;
	if (!limit)
		limit = LIST_DEFAULT;
	/* Keep the reply under the frame limit, with room for the cursor. */
	size_t max_body = m->conf.cluster.max_frame > 4096 ? m->conf.cluster.max_frame - 2048 : 2048;

	struct obj *o;
	if (clen && objtab_keycmp(cursor, clen, prefix, plen) >= 0) {
		size_t cp = clen >= plen && memcmp(cursor, prefix, plen) == 0 ?
			    rollup(cursor, clen, plen, delim) : 0;
		o = cp ? seek_past(m, cursor, cp) : objtab_seek(&m->objs, cursor, clen, true);
	} else {
		o = objtab_seek(&m->objs, prefix, plen, false);
	}

	size_t count_at = b->len;
	uint32_t count = 0;
	const uint8_t *last = NULL;
	size_t last_len = 0;
	wb_u32(b, 0);
	while (o && has_prefix(o, prefix, plen)) {
		if (!obj_complete(o) ||
		    (!all && !tenant_may(ten, obj_key(o), o->key_len, TENANT_READ))) {
			o = objtab_next(&m->objs, o);
			continue;
		}
		if (count == limit || b->len + o->key_len + 32 > max_body)
			break;
		const uint8_t *key = obj_key(o);
		size_t cp = rollup(key, o->key_len, plen, delim);
		if (cp) {
			wb_u8(b, 1);
			wb_str(b, key, cp);
			wb_u64(b, 0);
			wb_u64(b, 0);
			last = key;
			last_len = cp;
			o = seek_past(m, key, cp);	/* key stays valid: nothing is freed */
		} else {
			wb_u8(b, 0);
			wb_str(b, key, o->key_len);
			wb_u64(b, o->value_len);
			wb_u64(b, obj_put_ns(o));
			last = key;
			last_len = o->key_len;
			o = objtab_next(&m->objs, o);
		}
		count++;
	}
	/* More to come if a visible key under the prefix remains. */
	while (o && has_prefix(o, prefix, plen) &&
	       (!obj_complete(o) || (!all && !tenant_may(ten, obj_key(o), o->key_len, TENANT_READ))))
		o = objtab_next(&m->objs, o);
	if (o && has_prefix(o, prefix, plen) && last)
		wb_str(b, last, last_len);
	else
		wb_str(b, "", 0);
	if (!b->oom)
		memcpy(b->p + count_at, &count, sizeof(count));
	return 0;
}

int mkeys_info(struct master *m, struct wbuf *b)
{
	uint64_t used, cap;

	segreg_usage(&m->segs, &used, &cap);
	wb_u64(b, m->keys);
	wb_u64(b, used);
	wb_u64(b, cap);
	wb_u64(b, m->evictions);
	wb_u64(b, m->demotions);
	wb_u64(b, mlease_active(m));
	return 0;
}

