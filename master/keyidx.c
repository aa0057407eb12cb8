/* keyidx: a B+tree of the master's objects in key order; see keyidx.h. */
#include "keyidx.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objtab.h"

#ifndef KX_LEAF			/* (t_keyidx builds a tree of tiny nodes) */
#define KX_LEAF 128		/* objects per leaf */
#define KX_FAN 64		/* children per inner node */
#endif

struct kx_node {
	uint16_t n;			/* leaf: objects; inner: children */
	uint16_t pfx;			/* the byte heads (inner) or hints (leaf) are taken at */
	bool leaf;
	struct kx_node *prev, *next;	/* leaves, in key order */
};

/* hint[i]: byte pfx of object i's key (0 past its end): where two hints
 * differ, the keys do, in the same order (as heads, below), and a search
 * reads an object's key only where its hint ties. */
struct kx_leaf {
	struct kx_node h;
	struct obj *obj[KX_LEAF];
	uint8_t hint[KX_LEAF];
};

/* sep[j], j >= 1: the least key child j may hold (child j - 1 holds only
 * keys below it); head[j]: its 8 bytes from pfx, big-endian, zero past its
 * end. Every key routed here lies between the node's fences, so it shares
 * their first pfx bytes with every separator: where two heads differ, so
 * do the keys, in the same order. */
struct kx_inner {
	struct kx_node h;
	uint64_t head[KX_FAN];
	struct kx_node *kid[KX_FAN];
	uint8_t *sep[KX_FAN];
	uint16_t slen[KX_FAN];
};

/* A key as bytes and length (a fence: NULL bytes means none, the open end). */
struct kx_key {
	const uint8_t *p;
	size_t n;
};

static struct kx_leaf *L(struct kx_node *n)
{
	return (struct kx_leaf *)n;
}

static struct kx_inner *I(struct kx_node *n)
{
	return (struct kx_inner *)n;
}

static const struct kx_leaf *CL(const struct kx_node *n)
{
	return (const struct kx_leaf *)n;
}

static const struct kx_inner *CI(const struct kx_node *n)
{
	return (const struct kx_inner *)n;
}

static size_t lcp(struct kx_key a, struct kx_key b)
{
	size_t m = a.n < b.n ? a.n : b.n, i = 0;

	if (!a.p || !b.p)
		return 0;
	while (i < m && a.p[i] == b.p[i])
		i++;
	return i;
}

/* The common prefix of a node's fences, as far as a head can use it. */
static uint16_t fence_pfx(struct kx_key lo, struct kx_key hi)
{
	size_t l = lcp(lo, hi);

	return (uint16_t)(l > UINT16_MAX ? UINT16_MAX : l);
}

static uint8_t hint_at(const uint8_t *k, size_t n, size_t pfx)
{
	return pfx < n ? k[pfx] : 0;
}

static uint8_t obj_hint(const struct obj *o, size_t pfx)
{
	return hint_at(obj_key(o), o->key_len, pfx);
}

/* A leaf's hints taken at pfx (each object's key is read: a split or a
 * wider range, not every insert). */
static void set_hints(struct kx_leaf *lf, uint16_t pfx)
{
	lf->h.pfx = pfx;
	for (unsigned i = 0; i < lf->h.n; i++)
		__builtin_prefetch((const char *)lf->obj[i] + 64);
	for (unsigned i = 0; i < lf->h.n; i++)
		lf->hint[i] = obj_hint(lf->obj[i], pfx);
}

static void set_heads(struct kx_inner *in, uint16_t pfx)
{
	in->h.pfx = pfx;
	for (unsigned j = 1; j < in->h.n; j++)
		in->head[j] = kx_head_at(in->sep[j], in->slen[j], pfx);
}

/* The lines of o a compare reads, at once (objtab.h's layout). */
static void obj_prefetch(const struct obj *o)
{
	__builtin_prefetch(o);
	__builtin_prefetch((const char *)o + 64);
	__builtin_prefetch((const char *)o + 128);
}

static int cmp_obj(const struct obj *o, const uint8_t *key, size_t n)
{
	return objtab_keycmp(obj_key(o), o->key_len, key, n);
}

/* Inner node: the child a key goes to (the last j whose sep[j] <= key). */
static unsigned inner_find(const struct kx_inner *in, const uint8_t *key, size_t n)
{
	uint64_t hk = kx_head_at(key, n, in->h.pfx);
	unsigned lo = 1, hi = in->h.n;	/* answer in [lo - 1, hi - 1] */

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		int c;

		if (hk != in->head[mid])
			c = hk < in->head[mid] ? -1 : 1;
		else
			c = objtab_keycmp(key, n, in->sep[mid], in->slen[mid]);
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo - 1;
}

/* Leaf: the first index whose key is >= key (> key when after). The two
 * objects the next step may compare are fetched while this one compares. */
static unsigned leaf_find(const struct kx_leaf *lf, const uint8_t *key, size_t n, bool after)
{
	unsigned lo = 0, hi = lf->h.n;
	uint8_t hk = hint_at(key, n, lf->h.pfx);

	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		int c;

		if (lf->hint[mid] != hk) {
			c = lf->hint[mid] < hk ? -1 : 1;
		} else {
			if (lo < mid)
				obj_prefetch(lf->obj[lo + (mid - lo) / 2]);
			if (mid + 1 < hi)
				obj_prefetch(lf->obj[mid + 1 + (hi - mid - 1) / 2]);
			c = cmp_obj(lf->obj[mid], key, n);
		}
		if (c > 0 || (c == 0 && !after))
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* The way down to key's leaf: per inner level the node and the child
 * taken, and the fences of each node on the way. */
struct kx_path {
	struct kx_inner *node[KX_MAX_HEIGHT];
	unsigned idx[KX_MAX_HEIGHT];
	struct kx_key lo[KX_MAX_HEIGHT], hi[KX_MAX_HEIGHT];	/* of node[d] */
	struct kx_key llo, lhi;		/* of the leaf */
	int depth;			/* inner levels */
};

static struct kx_leaf *descend(const struct keyidx *x, const uint8_t *key, size_t n,
			       struct kx_path *pa)
{
	struct kx_node *nd = x->root;
	struct kx_key lo = { NULL, 0 }, hi = { NULL, 0 };
	int d = 0;

	while (!nd->leaf) {
		struct kx_inner *in = I(nd);
		unsigned j;

		for (int i = 0; i < 8; i++)
			__builtin_prefetch((const char *)in->head + 64 * i);
		j = inner_find(in, key, n);
		if (pa) {
			pa->node[d] = in;
			pa->idx[d] = j;
			pa->lo[d] = lo;
			pa->hi[d] = hi;
		}
		if (j >= 1)
			lo = (struct kx_key){ in->sep[j], in->slen[j] };
		if (j + 1 < in->h.n)
			hi = (struct kx_key){ in->sep[j + 1], in->slen[j + 1] };
		nd = in->kid[j];
		d++;
	}
	if (pa) {
		pa->depth = d;
		pa->llo = lo;
		pa->lhi = hi;
	}
	return L(nd);
}

/* ---- spares ---- */

static struct kx_node *new_leaf(void)
{
	struct kx_leaf *lf = malloc(sizeof(*lf));

	if (lf)
		memset(&lf->h, 0, sizeof(lf->h));
	if (lf)
		lf->h.leaf = true;
	return lf ? &lf->h : NULL;
}

static struct kx_node *new_inner(void)
{
	struct kx_inner *in = malloc(sizeof(*in));

	if (!in)
		return NULL;
	memset(&in->h, 0, sizeof(in->h));
	in->sep[0] = NULL;	/* child 0 has no separator */
	in->slen[0] = 0;
	in->head[0] = 0;
	return &in->h;
}

int kx_init(struct keyidx *x)
{
	memset(x, 0, sizeof(*x));
	x->root = new_leaf();
	if (!x->root)
		return -ENOMEM;
	x->last = x->root;
	x->height = 1;
	return 0;
}

static void free_tree(struct kx_node *nd)
{
	if (!nd->leaf) {
		struct kx_inner *in = I(nd);
		for (unsigned j = 0; j < nd->n; j++) {
			free_tree(in->kid[j]);
			if (j)
				free(in->sep[j]);
		}
	}
	free(nd);
}

void kx_destroy(struct keyidx *x)
{
	if (x->root)
		free_tree(x->root);
	free(x->spare_leaf);
	for (int i = 0; i < x->nspare_inner; i++)
		free(x->spare_inner[i]);
	free(x->spare_sep);
	memset(x, 0, sizeof(*x));
}

/* One insert splits at most its leaf and every inner node above it, and
 * then adds a root: a leaf, height inner nodes and height separators. */
int kx_reserve(struct keyidx *x)
{
	if (!x->spare_leaf && !(x->spare_leaf = new_leaf()))
		return -ENOMEM;
	while (x->nspare_inner < x->height) {
		struct kx_node *in = new_inner();
		if (!in)
			return -ENOMEM;
		x->spare_inner[x->nspare_inner++] = in;
	}
	if (!x->spare_sep && !(x->spare_sep = malloc(KVP_MAX_KEY)))
		return -ENOMEM;
	return 0;
}

/* The spares an insert takes. Without kx_reserve() first (a caller's bug)
 * they are allocated here, and an insert that cannot go on stops the
 * process rather than lose its object from the order. */
static struct kx_node *take_leaf(struct keyidx *x)
{
	struct kx_node *nd = x->spare_leaf ? x->spare_leaf : new_leaf();

	x->spare_leaf = NULL;
	if (!nd)
		abort();
	return nd;
}

static struct kx_inner *take_inner(struct keyidx *x)
{
	struct kx_node *nd = x->nspare_inner ? x->spare_inner[--x->nspare_inner] : new_inner();

	if (!nd)
		abort();
	return I(nd);
}

/* A separator's own copy of key (n bytes): an allocation of its size, or
 * the spare buffer when there is none to be had. */
static uint8_t *sep_dup(const uint8_t *key, size_t n)
{
	uint8_t *b = malloc(n ? n : 1);

	if (b)
		memcpy(b, key, n);
	return b;
}

static uint8_t *take_sep(struct keyidx *x, const uint8_t *key, size_t n)
{
	uint8_t *b = sep_dup(key, n);

	if (!b && x->spare_sep) {
		b = x->spare_sep;
		x->spare_sep = NULL;
		memcpy(b, key, n);
	}
	if (!b)
		abort();
	return b;
}

/* ---- insert ---- */

/* Adds (sep, kid) to path level d's node as child index at (after the child
 * the path took), splitting it, and so on up, when it is full. */
static void add_child(struct keyidx *x, struct kx_path *pa, int d, uint8_t *sep, uint16_t slen,
		      struct kx_node *kid)
{
	if (d < 0) {	/* a new root above the old one */
		struct kx_inner *r = take_inner(x);
		r->h.n = 2;
		r->kid[0] = x->root;
		r->kid[1] = kid;
		r->sep[1] = sep;
		r->slen[1] = slen;
		set_heads(r, 0);
		x->root = &r->h;
		x->height++;
		return;
	}
	struct kx_inner *in = pa->node[d];
	unsigned at = pa->idx[d] + 1;

	if (in->h.n < KX_FAN) {
		unsigned m = in->h.n - at;
		memmove(&in->kid[at + 1], &in->kid[at], m * sizeof(in->kid[0]));
		memmove(&in->sep[at + 1], &in->sep[at], m * sizeof(in->sep[0]));
		memmove(&in->slen[at + 1], &in->slen[at], m * sizeof(in->slen[0]));
		memmove(&in->head[at + 1], &in->head[at], m * sizeof(in->head[0]));
		in->kid[at] = kid;
		in->sep[at] = sep;
		in->slen[at] = slen;
		in->head[at] = kx_head_at(sep, slen, in->h.pfx);
		in->h.n++;
		return;
	}
	/* full: KX_FAN + 1 children, the first half stays, the separator
	 * between the halves goes up */
	struct kx_node *kids[KX_FAN + 1];
	uint8_t *seps[KX_FAN + 1];
	uint16_t slens[KX_FAN + 1];
	unsigned n = 0;

	for (unsigned j = 0; j <= KX_FAN; j++) {
		if (j == at) {
			kids[j] = kid;
			seps[j] = sep;
			slens[j] = slen;
		} else {
			kids[j] = in->kid[n];
			seps[j] = in->sep[n];
			slens[j] = in->slen[n];
			n++;
		}
	}
	unsigned half = (KX_FAN + 1) / 2;
	struct kx_inner *r = take_inner(x);
	uint8_t *up = seps[half];
	uint16_t uplen = slens[half];

	in->h.n = (uint16_t)half;
	for (unsigned j = 0; j < half; j++) {
		in->kid[j] = kids[j];
		in->sep[j] = j ? seps[j] : NULL;
		in->slen[j] = j ? slens[j] : 0;
	}
	r->h.n = (uint16_t)(KX_FAN + 1 - half);
	for (unsigned j = 0; j < r->h.n; j++) {
		r->kid[j] = kids[half + j];
		r->sep[j] = j ? seps[half + j] : NULL;
		r->slen[j] = j ? slens[half + j] : 0;
	}
	struct kx_key upk = { up, uplen };
	set_heads(in, fence_pfx(pa->lo[d], upk));
	set_heads(r, fence_pfx(upk, pa->hi[d]));
	add_child(x, pa, d - 1, up, uplen, &r->h);
}

void kx_insert(struct keyidx *x, struct obj *o)
{
	const uint8_t *key = obj_key(o);
	size_t n = o->key_len;
	struct kx_path pa;
	struct kx_leaf *lf = L(x->last);
	unsigned pos;

	x->count++;
	/* past every key (counters, times, a fresh run of numbered keys):
	 * one compare with the last key, no descent, while its leaf has room */
	if (lf->h.n && lf->h.n < KX_LEAF && cmp_obj(lf->obj[lf->h.n - 1], key, n) < 0) {
		lf->hint[lf->h.n] = hint_at(key, n, lf->h.pfx);
		lf->obj[lf->h.n++] = o;
		return;
	}
	lf = descend(x, key, n, &pa);
	pos = leaf_find(lf, key, n, false);
	if (x->it_leaf == &lf->h && x->it_idx >= pos)
		x->it_idx++;	/* the walk's place moves with its object */
	if (lf->h.n < KX_LEAF) {
		memmove(&lf->obj[pos + 1], &lf->obj[pos], (lf->h.n - pos) * sizeof(lf->obj[0]));
		memmove(&lf->hint[pos + 1], &lf->hint[pos], lf->h.n - pos);
		lf->obj[pos] = o;
		lf->hint[pos] = hint_at(key, n, lf->h.pfx);
		lf->h.n++;
		return;
	}
	/* full. A key past the leaf's last one starts a leaf of its own
	 * (ascending keys fill leaves whole); elsewhere the halves part. */
	struct kx_leaf *r = L(take_leaf(x));
	r->h.pfx = lf->h.pfx;
	if (pos == KX_LEAF) {
		r->obj[0] = o;
		r->hint[0] = hint_at(key, n, r->h.pfx);
		r->h.n = 1;
	} else {
		unsigned half = KX_LEAF / 2;
		memcpy(r->obj, &lf->obj[half], (KX_LEAF - half) * sizeof(lf->obj[0]));
		memcpy(r->hint, &lf->hint[half], KX_LEAF - half);
		r->h.n = (uint16_t)(KX_LEAF - half);
		lf->h.n = (uint16_t)half;
		struct kx_leaf *t = pos <= half ? lf : r;
		unsigned p = pos <= half ? pos : pos - half;
		memmove(&t->obj[p + 1], &t->obj[p], (t->h.n - p) * sizeof(t->obj[0]));
		memmove(&t->hint[p + 1], &t->hint[p], t->h.n - p);
		t->obj[p] = o;
		t->hint[p] = hint_at(key, n, t->h.pfx);
		t->h.n++;
	}
	r->h.next = lf->h.next;
	r->h.prev = &lf->h;
	if (lf->h.next)
		lf->h.next->prev = &r->h;
	lf->h.next = &r->h;
	if (x->last == &lf->h)
		x->last = &r->h;
	if (x->it_leaf == &lf->h)
		x->it_leaf = NULL;	/* its objects moved */
	const struct obj *first = r->obj[0];
	uint8_t *sep = take_sep(x, obj_key(first), first->key_len);
	struct kx_key sk = { sep, first->key_len };
	/* the halves' narrower ranges may share a longer prefix: hints that
	 * tell more apart (the last leaf's range is open: 0) */
	uint16_t lp = fence_pfx(pa.llo, sk), rp = fence_pfx(sk, pa.lhi);
	if (lp != lf->h.pfx)
		set_hints(lf, lp);
	if (rp != r->h.pfx)
		set_hints(r, rp);
	add_child(x, &pa, pa.depth - 1, sep, first->key_len, &r->h);
}

/* ---- bulk merge ---- */

/* A bulk build fills nodes to 7/8: room for a few inserts before a split. */
#define KX_BULK_LEAF (KX_LEAF - KX_LEAF / 8)
#define KX_BULK_FAN (KX_FAN - KX_FAN / 8)
#define KX_MERGE_AHEAD 8	/* merged objects prefetched ahead (they lie anywhere) */

/* One level of a tree being built, in key order: its nodes, each a whole
 * subtree, and the least key under each (none for the first), which the
 * level above keeps as a separator. */
struct kx_level {
	struct kx_node **nd;
	uint8_t **sep;
	uint16_t *slen;
	size_t n;
};

/* The merge's two inputs: the tree's leaves and the sorted array. */
struct kx_src {
	const struct kx_leaf *lf;	/* NULL past the tree's last */
	unsigned i;
	const char *objs;
	size_t n, j, stride;
};

static struct obj *src_obj(const struct kx_src *s, size_t j)
{
	return *(struct obj *const *)(s->objs + j * s->stride);
}

/* The lesser of the two inputs' next objects, taken. */
static struct obj *src_take(struct kx_src *s)
{
	while (s->lf && s->i == s->lf->h.n) {	/* (an empty root leaf, too) */
		s->lf = s->lf->h.next ? CL(s->lf->h.next) : NULL;
		s->i = 0;
	}
	struct obj *a = s->lf ? s->lf->obj[s->i] : NULL;
	struct obj *b = s->j < s->n ? src_obj(s, s->j) : NULL;

	if (a && (!b || objtab_keycmp(obj_key(a), a->key_len, obj_key(b), b->key_len) < 0)) {
		s->i++;
		return a;
	}
	if (s->j + KX_MERGE_AHEAD < s->n)
		obj_prefetch(src_obj(s, s->j + KX_MERGE_AHEAD));
	s->j++;
	return b;
}

/* Frees what a failed merge built: each node a whole subtree. */
static void level_free(struct kx_level *lv)
{
	for (size_t i = 0; i < lv->n; i++) {
		free_tree(lv->nd[i]);
		if (i)
			free(lv->sep[i]);
	}
	free(lv->nd);
	free(lv->sep);
	free(lv->slen);
}

/* The leaves of the merged tree, linked, each with its hints: those of
 * leaf l are taken once leaf l + 1's first key (its upper fence) is known,
 * while its objects are still in cache. */
static int merge_leaves(struct kx_src *s, size_t total, struct kx_level *lv,
			struct kx_node **last)
{
	size_t nl = lv->n;	/* the leaves to fill */
	struct kx_leaf *prev = NULL;

	lv->n = 0;
	for (size_t l = 0; l < nl; l++) {
		struct kx_node *nd = new_leaf();
		unsigned fill = (unsigned)(total / nl + (l < total % nl));

		if (!nd)
			return -ENOMEM;
		lv->nd[lv->n] = nd;
		lv->sep[lv->n] = NULL;
		lv->slen[lv->n++] = 0;
		struct kx_leaf *lf = L(nd);
		for (unsigned i = 0; i < fill; i++)
			lf->obj[i] = src_take(s);
		lf->h.n = (uint16_t)fill;
		if (l) {
			const struct obj *f = lf->obj[0];
			uint8_t *sep = sep_dup(obj_key(f), f->key_len);
			if (!sep)
				return -ENOMEM;
			lv->sep[l] = sep;
			lv->slen[l] = f->key_len;
			prev->h.next = nd;
			nd->prev = &prev->h;
			struct kx_key lo = { lv->sep[l - 1], lv->slen[l - 1] }, hi = { sep, f->key_len };
			set_hints(prev, fence_pfx(lo, hi));
		}
		prev = lf;
	}
	set_hints(prev, 0);	/* the last leaf's range is open */
	*last = &prev->h;
	return 0;
}

/* The level above lv's nodes, in place: node p takes the children
 * [a, b) and keeps child a's least key as its own. */
static int merge_up(struct kx_level *lv)
{
	size_t m = lv->n, k = (m + KX_BULK_FAN - 1) / KX_BULK_FAN;
	struct kx_node **up = malloc(k * sizeof(*up));
	size_t got = 0;

	while (up && got < k && (up[got] = new_inner()))
		got++;
	if (got < k) {
		while (got)
			free(up[--got]);
		free(up);
		return -ENOMEM;
	}
	for (size_t p = 0, a = 0; p < k; p++) {
		size_t c = m / k + (p < m % k), b = a + c;
		struct kx_inner *in = I(up[p]);

		in->h.n = (uint16_t)c;
		for (size_t j = 0; j < c; j++) {
			in->kid[j] = lv->nd[a + j];
			in->sep[j] = j ? lv->sep[a + j] : NULL;
			in->slen[j] = j ? lv->slen[a + j] : 0;
		}
		struct kx_key lo = { lv->sep[a], lv->slen[a] };
		struct kx_key hi = { b < m ? lv->sep[b] : NULL, b < m ? lv->slen[b] : 0 };
		set_heads(in, fence_pfx(lo, hi));
		lv->nd[p] = &in->h;	/* p <= a: what is written was read */
		lv->sep[p] = lv->sep[a];
		lv->slen[p] = lv->slen[a];
		a = b;
	}
	lv->n = k;
	free(up);
	return 0;
}

int kx_merge(struct keyidx *x, const void *objs, size_t n, size_t stride)
{
	size_t total = x->count + n, nl = (total + KX_BULK_LEAF - 1) / KX_BULK_LEAF;
	struct kx_node *first = x->root;
	struct kx_level lv = { 0 };
	struct kx_node *last = NULL;
	int height = 1;

	if (!n)
		return 0;
	while (!first->leaf)
		first = I(first)->kid[0];
	struct kx_src s = { CL(first), 0, objs, n, 0, stride };

	lv.nd = malloc(nl * sizeof(*lv.nd));
	lv.sep = malloc(nl * sizeof(*lv.sep));
	lv.slen = malloc(nl * sizeof(*lv.slen));
	lv.n = nl;
	if (!lv.nd || !lv.sep || !lv.slen) {
		lv.n = 0;
		goto fail;
	}
	for (size_t j = 0; j < n && j < KX_MERGE_AHEAD; j++)
		obj_prefetch(src_obj(&s, j));
	if (merge_leaves(&s, total, &lv, &last))
		goto fail;
	for (; lv.n > 1; height++)
		if (merge_up(&lv))
			goto fail;
	free_tree(x->root);
	x->root = lv.nd[0];
	x->height = height;
	x->last = last;
	x->count = total;
	x->gen++;		/* every leaf is new */
	x->it_leaf = NULL;
	free(lv.nd);
	free(lv.sep);
	free(lv.slen);
	return 0;
fail:
	level_free(&lv);
	return -ENOMEM;
}

/* ---- remove ---- */

/* The fences of child j of path level d's node. */
static void kid_fences(const struct kx_path *pa, int d, unsigned j, struct kx_key *lo,
		       struct kx_key *hi)
{
	const struct kx_inner *in = pa->node[d];

	*lo = j ? (struct kx_key){ in->sep[j], in->slen[j] } : pa->lo[d];
	*hi = j + 1 < in->h.n ? (struct kx_key){ in->sep[j + 1], in->slen[j + 1] } : pa->hi[d];
}

/* Node k's range grew to [lo, hi) on one side (right: its upper end): it
 * and every node down its edge on that side, whose ranges grew with it,
 * take heads or hints at a prefix their new fences still share. */
static void widen(struct kx_node *k, struct kx_key lo, struct kx_key hi, bool right)
{
	for (;;) {
		uint16_t p = fence_pfx(lo, hi);

		if (k->leaf) {
			if (p < k->pfx)
				set_hints(L(k), p);
			return;
		}
		struct kx_inner *in = I(k);
		if (p < k->pfx)
			set_heads(in, p);
		unsigned j = right ? in->h.n - 1 : 0;
		if (j >= 1)
			lo = (struct kx_key){ in->sep[j], in->slen[j] };
		if (j + 1 < in->h.n)
			hi = (struct kx_key){ in->sep[j + 1], in->slen[j + 1] };
		k = in->kid[j];
	}
}

/* Drops the (empty) child the path took at level d; the neighbour that
 * takes over its range, and its edge below, get heads and hints for their
 * wider fences. */
static void drop_child(struct keyidx *x, struct kx_path *pa, int d)
{
	struct kx_inner *in = pa->node[d];
	unsigned j = pa->idx[d];

	free(in->kid[j]);
	if (j == 0) {
		/* child 1 becomes child 0: its separator goes */
		if (in->h.n > 1)
			free(in->sep[1]);
		memmove(&in->kid[0], &in->kid[1], (in->h.n - 1) * sizeof(in->kid[0]));
		memmove(&in->sep[1], &in->sep[2], (in->h.n > 2 ? in->h.n - 2 : 0) * sizeof(in->sep[0]));
		memmove(&in->slen[1], &in->slen[2],
			(in->h.n > 2 ? in->h.n - 2 : 0) * sizeof(in->slen[0]));
		memmove(&in->head[1], &in->head[2],
			(in->h.n > 2 ? in->h.n - 2 : 0) * sizeof(in->head[0]));
	} else {
		free(in->sep[j]);
		unsigned m = in->h.n - j - 1;
		memmove(&in->kid[j], &in->kid[j + 1], m * sizeof(in->kid[0]));
		memmove(&in->sep[j], &in->sep[j + 1], m * sizeof(in->sep[0]));
		memmove(&in->slen[j], &in->slen[j + 1], m * sizeof(in->slen[0]));
		memmove(&in->head[j], &in->head[j + 1], m * sizeof(in->head[0]));
	}
	in->h.n--;
	if (in->h.n == 0) {
		if (d == 0) {	/* the root lost its last child: an empty leaf again
				 * (not reached: a root of one child hands over) */
			free(in);
			x->root = take_leaf(x);
			x->root->n = 0;
			x->height = 1;
			x->last = x->root;
		} else {
			drop_child(x, pa, d - 1);
		}
		return;
	}
	unsigned nb = j ? j - 1 : 0;	/* the neighbour that took the range */
	struct kx_key lo, hi;
	kid_fences(pa, d, nb, &lo, &hi);
	widen(in->kid[nb], lo, hi, j != 0);
}

struct obj *kx_last(const struct keyidx *x)
{
	const struct kx_leaf *lf = (const struct kx_leaf *)x->last;	/* empty: an empty tree */

	return lf->h.n ? lf->obj[lf->h.n - 1] : NULL;
}

void kx_remove(struct keyidx *x, const struct obj *o)
{
	const uint8_t *key = obj_key(o);
	size_t n = o->key_len;
	struct kx_path pa;
	struct kx_leaf *lf = descend(x, key, n, &pa);
	unsigned pos = leaf_find(lf, key, n, false);

	if (pos >= lf->h.n || lf->obj[pos] != o)
		return;		/* not here: a caller's bug, nothing to undo */
	x->count--;
	memmove(&lf->obj[pos], &lf->obj[pos + 1], (lf->h.n - pos - 1) * sizeof(lf->obj[0]));
	memmove(&lf->hint[pos], &lf->hint[pos + 1], lf->h.n - pos - 1);
	lf->h.n--;
	if (x->it_leaf == &lf->h && x->it_idx > pos)
		x->it_idx--;	/* the walk's place moves with its object */
	if (lf->h.n || x->height == 1)
		return;
	if (lf->h.prev)
		lf->h.prev->next = lf->h.next;
	if (lf->h.next)
		lf->h.next->prev = lf->h.prev;
	if (x->last == &lf->h)
		x->last = lf->h.prev;
	x->gen++;
	drop_child(x, &pa, pa.depth - 1);
	/* a root with one child hands over to it */
	while (x->height > 1 && x->root->n == 1) {
		struct kx_inner *r = I(x->root);
		x->root = r->kid[0];
		free(r);
		x->height--;
		if (!x->root->leaf)
			set_heads(I(x->root), 0);
		else if (x->root->pfx)
			set_hints(L(x->root), 0);
	}
}

void kx_replace(struct keyidx *x, const struct obj *o, struct obj *repl)
{
	struct kx_leaf *lf = descend(x, obj_key(o), o->key_len, NULL);
	unsigned pos = leaf_find(lf, obj_key(o), o->key_len, false);

	if (pos < lf->h.n && lf->obj[pos] == o)
		lf->obj[pos] = repl;
	if (x->it_leaf == &lf->h && x->it_idx == pos)
		x->it_leaf = NULL;
}

/* ---- walking ---- */

static struct obj *at(struct keyidx *x, struct kx_leaf *lf, unsigned pos)
{
	if (pos >= lf->h.n) {
		lf = lf->h.next ? L(lf->h.next) : NULL;
		pos = 0;
	}
	if (!lf || !lf->h.n) {
		x->it_leaf = NULL;
		return NULL;
	}
	x->it_leaf = &lf->h;
	x->it_idx = pos;
	x->it_gen = x->gen;
	return lf->obj[pos];
}

struct obj *kx_seek(struct keyidx *x, const uint8_t *key, size_t n, bool after)
{
	struct kx_leaf *lf = descend(x, key, n, NULL);

	return at(x, lf, leaf_find(lf, key, n, after));
}

struct obj *kx_next(struct keyidx *x, const struct obj *o)
{
	if (x->it_leaf && x->it_gen == x->gen && x->it_idx < x->it_leaf->n &&
	    L(x->it_leaf)->obj[x->it_idx] == o)
		return at(x, L(x->it_leaf), x->it_idx + 1);
	return kx_seek(x, obj_key(o), o->key_len, true);
}

/* ---- checks ---- */

static int check_node(const struct keyidx *x, const struct kx_node *nd, int depth,
		      struct kx_key lo, struct kx_key hi, const struct kx_node **prev_leaf,
		      size_t *count, char *err, size_t errlen)
{
	if (nd->leaf != (depth == x->height - 1)) {
		snprintf(err, errlen, "leaf at depth %d of height %d", depth, x->height);
		return -1;
	}
	if (nd->leaf) {
		const struct kx_leaf *lf = CL(nd);
		if (!lf->h.n && x->height > 1) {
			snprintf(err, errlen, "empty leaf below the root");
			return -1;
		}
		if (lf->h.prev != *prev_leaf || (*prev_leaf && (*prev_leaf)->next != nd)) {
			snprintf(err, errlen, "leaf chain broken");
			return -1;
		}
		for (unsigned i = 0; i < lf->h.n; i++) {
			const struct obj *o = lf->obj[i];
			if ((lo.p && objtab_keycmp(obj_key(o), o->key_len, lo.p, lo.n) < 0) ||
			    (hi.p && objtab_keycmp(obj_key(o), o->key_len, hi.p, hi.n) >= 0) ||
			    (i && objtab_keycmp(obj_key(lf->obj[i - 1]), lf->obj[i - 1]->key_len,
						obj_key(o), o->key_len) >= 0)) {
				snprintf(err, errlen, "key '%.*s' out of order or fences",
					 (int)o->key_len, (const char *)obj_key(o));
				return -1;
			}
		}
		if (lf->h.pfx > fence_pfx(lo, hi)) {
			snprintf(err, errlen, "leaf pfx %u > fences' %u", lf->h.pfx, fence_pfx(lo, hi));
			return -1;
		}
		for (unsigned i = 0; i < lf->h.n; i++)
			if (lf->hint[i] != obj_hint(lf->obj[i], lf->h.pfx)) {
				snprintf(err, errlen, "stale hint");
				return -1;
			}
		*count += lf->h.n;
		*prev_leaf = nd;
		return 0;
	}
	const struct kx_inner *in = CI(nd);
	if (!in->h.n || in->h.pfx > fence_pfx(lo, hi)) {
		snprintf(err, errlen, "inner node: %u children, pfx %u > fences' %u", in->h.n,
			 in->h.pfx, fence_pfx(lo, hi));
		return -1;
	}
	for (unsigned j = 0; j < in->h.n; j++) {
		struct kx_key clo = j ? (struct kx_key){ in->sep[j], in->slen[j] } : lo;
		struct kx_key chi = j + 1 < in->h.n ? (struct kx_key){ in->sep[j + 1], in->slen[j + 1] }
						    : hi;
		if (j && in->head[j] != kx_head_at(in->sep[j], in->slen[j], in->h.pfx)) {
			snprintf(err, errlen, "stale head");
			return -1;
		}
		if (j && ((lo.p && objtab_keycmp(clo.p, clo.n, lo.p, lo.n) <= 0) ||
			  (hi.p && objtab_keycmp(clo.p, clo.n, hi.p, hi.n) >= 0) ||
			  (chi.p && objtab_keycmp(clo.p, clo.n, chi.p, chi.n) >= 0))) {
			snprintf(err, errlen, "separators out of order");
			return -1;
		}
		if (check_node(x, in->kid[j], depth + 1, clo, chi, prev_leaf, count, err, errlen))
			return -1;
	}
	return 0;
}

int kx_check(const struct keyidx *x, char *err, size_t errlen)
{
	const struct kx_node *prev = NULL;
	size_t count = 0;
	struct kx_key none = { NULL, 0 };

	if (check_node(x, x->root, 0, none, none, &prev, &count, err, errlen))
		return -1;
	if (prev && prev->next) {
		snprintf(err, errlen, "last leaf has a next");
		return -1;
	}
	if (x->last != prev) {
		snprintf(err, errlen, "the last leaf is not the one kept as last");
		return -1;
	}
	if (count != x->count) {
		snprintf(err, errlen, "%zu objects in leaves, count %zu", count, x->count);
		return -1;
	}
	return 0;
}
