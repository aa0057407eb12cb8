/* vheap: a binary min-heap of (key, slot) with marks and a parking list;
 * see vheap.h. */
#include "vheap.h"

#include <errno.h>
#include <stdlib.h>

/* v (capacity *cap, n used, elements of sz bytes) with room for one
 * more: v itself, or a larger copy; NULL (v kept) without memory. */
static void *grow(void *v, size_t *cap, size_t n, size_t sz)
{
	if (n < *cap)
		return v;
	size_t c = *cap ? *cap * 2 : 256;
	void *p = realloc(v, c * sz);

	if (p)
		*cap = c;
	return p;
}

void vheap_clear(struct vheap *h)
{
	h->n = h->nmark = h->npark = 0;
	h->picks = 0;
	h->on = false;
}

void vheap_free(struct vheap *h)
{
	free(h->v);
	free(h->mark);
	free(h->park);
	*h = (struct vheap){ 0 };
}

void vheap_mark(struct vheap *h, size_t slot, size_t limit)
{
	if (!h->on)
		return;
	uint32_t *mk = h->nmark < limit ? grow(h->mark, &h->capmark, h->nmark, sizeof(*mk)) : NULL;

	if (!mk) {
		vheap_clear(h);
		return;
	}
	h->mark = mk;
	h->mark[h->nmark++] = (uint32_t)slot;
}

static void sift_down(struct vheap *h, size_t i)
{
	struct vheap_ent e = h->v[i];

	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && h->v[c + 1].key < h->v[c].key)
			c++;
		if (h->v[c].key >= e.key)
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	h->v[i] = e;
}

int vheap_append(struct vheap *h, int32_t key, uint32_t slot)
{
	struct vheap_ent *v = grow(h->v, &h->cap, h->n, sizeof(*v));

	if (!v)
		return -ENOMEM;
	h->v = v;
	h->v[h->n++] = (struct vheap_ent){ .key = key, .slot = slot };
	return 0;
}

void vheap_heapify(struct vheap *h)
{
	for (size_t i = h->n / 2; i-- > 0;)
		sift_down(h, i);
}

int vheap_push(struct vheap *h, int32_t key, uint32_t slot)
{
	if (vheap_append(h, key, slot))
		return -ENOMEM;
	size_t i = h->n - 1;
	struct vheap_ent e = h->v[i];

	while (i > 0 && h->v[(i - 1) / 2].key > e.key) {
		h->v[i] = h->v[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h->v[i] = e;
	return 0;
}

void vheap_pop(struct vheap *h)
{
	if (!h->n)
		return;
	h->v[0] = h->v[--h->n];
	if (h->n)
		sift_down(h, 0);
}

void vheap_raise_top(struct vheap *h, int32_t key)
{
	h->v[0].key = key;
	sift_down(h, 0);
}

int vheap_park(struct vheap *h, struct vheap_ent e)
{
	struct vheap_ent *pk = grow(h->park, &h->cappark, h->npark, sizeof(*pk));

	if (!pk)
		return -ENOMEM;
	h->park = pk;
	h->park[h->npark++] = e;
	return 0;
}
