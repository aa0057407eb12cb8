/* mchain: chain links, child counts and eviction regions; see mchain.h. */
#include "mchain.h"

#include "master_i.h"

/* A memory replica on its way to the spill tier (DEMOTE queued) counts as
 * gone already: what o extends may follow it in the same round. */
static bool has_mem(const struct obj *o)
{
	const struct rep *r = obj_rep(o);

	for (unsigned k = 0; k < o->nrep; k++)
		if (r[k].tier == 0 && !r[k].demoting)
			return true;
	return false;
}

/* The object o extends, if it is still there (the same generation). */
static struct obj *parent_of(const struct master *m, const struct obj *o)
{
	if (!o->chained)
		return NULL;
	const struct obj_links *l = objtab_links(&m->objs, o);

	return objtab_find_hg(&m->objs, l->phash, l->pgen);
}

/* p counts one child fewer; its links go when nothing is left in them. */
static void child_gone(struct master *m, struct obj *p, bool mem)
{
	struct obj_links *l = objtab_links_find(&m->objs.links, p);

	l->nchild--;
	if (mem)
		l->nchild_mem--;
	if (!l->nchild && !p->chained)
		objtab_links_drop(&m->objs, p);
}

/* Puts each replica of o in the region its counts call for. */
static void place(struct master *m, struct obj *o)
{
	for (unsigned k = 0; k < o->nrep; k++) {
		struct seg *s = segreg_online(&m->segs, (uint32_t)obj_rep(o)[k].seg);

		if (s)
			seg_place(s, o, k, mchain_rgn(&m->objs, o, k));
	}
}

void mchain_link(struct master *m, struct obj *o, struct obj *parent)
{
	/* A version is not in the table, where the link is looked up. */
	if (!parent || parent == o || (parent->flags & OBJ_VERSION))
		return;
	struct obj_links *pl = objtab_links_get(&m->objs, parent);

	if (!pl)
		return;
	struct obj_links *ol = objtab_links_get(&m->objs, o);	/* may move pl */

	if (!ol) {
		if (!pl->nchild && !parent->chained)
			objtab_links_drop(&m->objs, parent);
		return;
	}
	ol->phash = parent->hash;
	ol->pgen = (uint32_t)parent->generation;
	o->chained = 1;
	pl = objtab_links_find(&m->objs.links, parent);
	pl->nchild++;
	if (has_mem(o)) {
		o->counted_mem = 1;
		pl->nchild_mem++;
	}
	place(m, parent);
}

void mchain_changed(struct master *m, struct obj *o)
{
	bool mem = has_mem(o);

	if (o->chained && mem != o->counted_mem) {
		struct obj *p = parent_of(m, o);

		if (p) {
			struct obj_links *pl = objtab_links_find(&m->objs.links, p);

			if (mem)
				pl->nchild_mem++;
			else
				pl->nchild_mem--;
			place(m, p);
		}
		o->counted_mem = mem;
	}
	place(m, o);
}

void mchain_unlink(struct master *m, struct obj *o)
{
	if (o->chained) {
		struct obj *p = parent_of(m, o);

		if (p) {
			child_gone(m, p, o->counted_mem);
			place(m, p);
		}
		o->chained = o->counted_mem = 0;
	}
	m->orphaned += objtab_links(&m->objs, o)->nchild;
	objtab_links_drop(&m->objs, o);
}

void mchain_detach_key(struct master *m, const struct obj *o)
{
	m->orphaned += objtab_links(&m->objs, o)->nchild;
}

bool mchain_orphan(const struct master *m, const struct obj *o)
{
	return m->orphaned && o->chained && !parent_of(m, o);
}

bool mchain_check(const struct master *m)
{
	for (size_t i = 1; i < m->segs.n; i++) {
		const struct seg *s = m->segs.v[i];

		if (!s || !s->online)
			continue;
		if (s->rend[0] > s->rend[1] || s->rend[1] > s->nobjs || !seg_ptag_check(s))
			return false;
		for (size_t j = 0; j < s->nobjs; j++) {
			const struct obj *o = s->objs[j];
			unsigned k = 0;

			while (k < o->nrep && obj_rep(o)[k].seg != s->id)
				k++;
			if (k == o->nrep || obj_rep(o)[k].sidx != j)
				return false;
			size_t lo, hi;
			seg_rgn_range(s, mchain_rgn(&m->objs, o, k), &lo, &hi);
			if (j < lo || j >= hi)
				return false;
		}
	}
	return true;
}
