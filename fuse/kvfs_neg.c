/* kvfs_neg: directory listings kept for negative lookups (kvfs_neg.h):
 * a sorted array of the raw names under the directory's prefix.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvfs_neg.h"
#include "kvfs_node.h"
#include "net.h"

#define NEG_GROW_MAX (4 * KVFS_NEG_MAX)	/* names added here before it is dropped */

struct kvfs_neg {
	uint64_t until;			/* ms (monotonic): valid before */
	bool big;			/* too many entries: not kept until `until` */
	size_t n, cap;
	char **names;			/* sorted by strcmp */
};

void kvfs_neg_free(struct kvfs_neg *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->names[i]);
	free(l->names);
	free(l);
}

/* Index of name, or where it would go (*found false). */
static size_t find(const struct kvfs_neg *l, const char *name, bool *found)
{
	size_t lo = 0, hi = l->n;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(l->names[mid], name);

		if (c == 0) {
			*found = true;
			return mid;
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*found = false;
	return lo;
}

static int insert(struct kvfs_neg *l, const char *name, size_t len)
{
	bool found;
	size_t at = find(l, name, &found);
	char *s;

	if (found)
		return 0;
	if (l->n >= NEG_GROW_MAX)
		return -ENOSPC;
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 16;
		char **v = realloc(l->names, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->names = v;
		l->cap = cap;
	}
	s = malloc(len + 1);
	if (!s)
		return -ENOMEM;
	memcpy(s, name, len);
	s[len] = 0;
	memmove(l->names + at + 1, l->names + at, (l->n - at) * sizeof(*l->names));
	l->names[at] = s;
	l->n++;
	return 0;
}

static bool usable(const struct kvfs_node *d)
{
	/* chain pieces split names across directories: not kept */
	return d->kind == KN_DIR && d->neg && !d->neg->big && d->neg->until > net_now_ms();
}

/* fs->lock held, usable(d). */
static bool absent_locked(const struct kvfs_node *d, const char *raw, size_t len)
{
	char buf[KVP_MAX_KEY + 2];
	bool found;

	if (len > KVP_MAX_KEY)
		return false;
	find(d->neg, raw, &found);
	if (found)
		return false;
	memcpy(buf, raw, len);
	buf[len] = '/';
	buf[len + 1] = 0;
	find(d->neg, buf, &found);
	return !found;
}

bool kvfs_neg_absent(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len)
{
	bool r;

	pthread_mutex_lock(&fs->lock);
	r = usable(d) && absent_locked(d, raw, len);
	pthread_mutex_unlock(&fs->lock);
	return r;
}

/* Lists d's prefix (one page of up to KVFS_NEG_MAX + 1 entries) into a
 * new listing; NULL with *err. */
static struct kvfs_neg *fetch(struct kvfs *fs, const char *prefix, uint64_t until, int *err)
{
	struct kvfs_neg *l = calloc(1, sizeof(*l));
	struct kvp_list ls;
	struct kvp *k;
	int rc, e = 0;

	if (!l) {
		*err = KVP_ENOMEM;
		return NULL;
	}
	l->until = until;
	k = kvfs_kvp(fs, &e);
	rc = k ? kvp_list(k, prefix, '/', NULL, KVFS_NEG_MAX + 1, &ls) : e;
	if (rc < 0) {
		free(l);
		*err = rc;
		return NULL;
	}
	if (ls.n > KVFS_NEG_MAX || (ls.next && ls.next[0])) {
		l->big = true;
	} else {
		l->names = calloc(ls.n ? ls.n : 1, sizeof(*l->names));
		l->cap = ls.n;
		for (size_t i = 0; l->names && i < ls.n; i++) {
			l->names[i] = strdup(ls.entries[i].name);
			if (!l->names[i])
				break;
			l->n++;
		}
		if (!l->names || l->n != ls.n)
			l->big = true;	/* out of memory: not kept */
	}
	kvp_list_free(&ls);
	return l;
}

int kvfs_neg_lookup(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len)
{
	struct kvfs_neg *l;
	uint64_t ttl = (uint64_t)(fs->entry_timeout * 1000);
	char prefix[KVP_MAX_KEY + 2];
	int r, err = 0;

	if (d->kind != KN_DIR || ttl == 0)
		return 0;
	pthread_mutex_lock(&fs->lock);
	if (d->neg && d->neg->until > net_now_ms()) {
		r = usable(d) && absent_locked(d, raw, len);
		pthread_mutex_unlock(&fs->lock);
		return r;
	}
	snprintf(prefix, sizeof(prefix), "%s", d->raw);
	pthread_mutex_unlock(&fs->lock);
	l = fetch(fs, prefix, net_now_ms() + ttl, &err);
	if (!l)
		return err;
	pthread_mutex_lock(&fs->lock);
	/* names this view created went into the old listing, also while the
	 * new one was fetched (their puts may not have landed): keep them */
	for (size_t i = 0; d->neg && !l->big && i < d->neg->n; i++)
		if (insert(l, d->neg->names[i], strlen(d->neg->names[i])) < 0)
			l->big = true;
	kvfs_neg_free(d->neg);
	d->neg = l;
	l = NULL;
	r = usable(d) && absent_locked(d, raw, len);
	pthread_mutex_unlock(&fs->lock);
	kvfs_neg_free(l);
	return r;
}

void kvfs_neg_add(struct kvfs *fs, struct kvfs_node *d, const char *raw, size_t len)
{
	if (d->kind != KN_DIR)
		return;
	pthread_mutex_lock(&fs->lock);
	/* an expired listing still collects names: the next fetch keeps them */
	if (!d->neg)
		d->neg = calloc(1, sizeof(*d->neg));
	if (d->neg && !d->neg->big && insert(d->neg, raw, len) < 0)
		d->neg->big = true;	/* cannot tell any more: ask the pool */
	pthread_mutex_unlock(&fs->lock);
}

void kvfs_neg_empty(struct kvfs *fs, struct kvfs_node *d)
{
	uint64_t ttl = (uint64_t)(fs->entry_timeout * 1000);
	struct kvfs_neg *l;

	if (d->kind != KN_DIR || ttl == 0)
		return;
	l = calloc(1, sizeof(*l));
	if (!l)
		return;
	l->until = net_now_ms() + ttl;
	pthread_mutex_lock(&fs->lock);
	for (size_t i = 0; d->neg && !l->big && i < d->neg->n; i++)
		if (insert(l, d->neg->names[i], strlen(d->neg->names[i])) < 0)
			l->big = true;
	kvfs_neg_free(d->neg);
	d->neg = l;
	pthread_mutex_unlock(&fs->lock);
}
