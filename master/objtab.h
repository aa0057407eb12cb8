/* objtab: the master's object table — every object (complete or pending)
 * in one block of a slab (fixed fields, key, replica array), found by key
 * through an open-addressing hash table of tagged pointers and walked in
 * byte order through a B+tree of object pointers (keyidx.h: LIST,
 * REMOVE_PREFIX).
 * Runs on the master's loop thread only; no locks.
 */
#ifndef KVP_OBJTAB_H
#define KVP_OBJTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "keyidx.h"
#include "kvpool.h"

#define OBJ_NOSLOT UINT32_MAX

enum obj_flag {
	OBJ_COMPLETE = 1,	/* PUT_END seen (or adopted): visible */
	OBJ_UPSERT = 2,		/* pending: its PUT_END replaces the key's value */
	OBJ_VERSION = 4,	/* not in the table: a version in the master's mver map */
	OBJ_PINNED = 8,		/* a soft pin expiry in the table's side map (obj_pin_s) */
	OBJ_RESWAIT = 16,	/* a REPL ADD's extent waited in mrepl.c's batch (it may still) */
	OBJ_KXWAIT = 32,	/* not in the key index yet: in the table's pending (objtab_kx_defer) */
};

/* Replica offsets and lengths are kept in units of 64 bytes (every
 * segment alignment is a multiple of 64): 16 bytes per replica. Limits:
 * segments up to 16 TiB, extents up to 2 TiB, 4M segment ids, 512M
 * replicas per segment (checked at MOUNT / REPORT). */
#define REP_UNIT_SHIFT 6
#define REP_MAX_OFF (1ull << (38 + REP_UNIT_SHIFT))
#define REP_MAX_LEN (1ull << (35 + REP_UNIT_SHIFT))
#define REP_MAX_SEG ((1u << 22) - 1)

/* sidx: this object's index in its segment's replica array (segreg), so a
 * replica leaves that array in O(1). demoting: a DEMOTE of this (memory)
 * replica is on its way to the node (evict.c). promoting: a PROMOTE of
 * this (disk) replica is on its way to the node (mtier.c). */
struct rep {
	uint64_t offu : 38, seg : 22, tier : 2, demoting : 1, promoting : 1;
	uint64_t lenu : 35, sidx : 29;
};

static inline uint64_t rep_off(const struct rep *r)
{
	return (uint64_t)r->offu << REP_UNIT_SHIFT;
}

static inline uint64_t rep_len(const struct rep *r)
{
	return (uint64_t)r->lenu << REP_UNIT_SHIFT;
}

/* off and len must be multiples of 64 within the limits above. */
static inline struct rep rep_make(uint32_t seg, uint8_t tier, uint64_t off, uint64_t len)
{
	return (struct rep){ .offu = off >> REP_UNIT_SHIFT, .seg = seg, .tier = tier,
			     .lenu = len >> REP_UNIT_SHIFT };
}

/* 52 bytes of fields, the key right after them (its first 4 bytes in
 * key_head), then rep[cap_rep] at the next 8-byte boundary (obj_rep): with
 * one replica and a key of 13 to 20 bytes an object takes an 88-byte slab
 * block, 96 when the replicas came before the key (docs/ha.md, memory per
 * object). put_ms is the put time in ms since 1970 (42 bits: until 2109);
 * it goes out as ns, whole ms. value_len fits 41 bits: cluster.max_object_size is
 * at most 1 TiB, checked wherever a length comes in (PUT_START, REPORT,
 * REPL). Times are milliseconds since
 * the master started, in 32 bits that wrap: ages are (now - atime) mod
 * 2^32, and deadline is only meaningful while the object sits in the
 * master's lease (complete) or pending array, which a sweep empties long
 * before a wrap.
 * Chains (mchain.h): an object put as extending another (a batch put's
 * previous key, or its pred) names it by its key's hash and generation
 * (phash, pgen: no pointer, which a move or a removal would leave
 * dangling) and is counted in its nchild (and nchild_mem while it has a
 * memory replica): eviction takes an object only when nothing that
 * extends it is kept. Those four fields are rare, so they live in the
 * table's side map (struct obj_links, objtab_links), present only while
 * the object is chained or extended (the linked bit); so does a soft pin's
 * expiry (OBJ_PINNED, obj_pin_s), rare as well. */
struct obj {
	union {
		struct obj *hnext;	/* a version's chain (mver.c): not in the table */
		struct {
			uint32_t hash;	/* in the table: objtab_hash of the key */
			uint32_t pkey;	/* reuse priority (mpolicy.h); set again at a version's commit */
		};
	};
	uint64_t value_len : 42;
	uint64_t key_len : 11;		/* key <= KVP_MAX_KEY */
	uint64_t chained : 1;		/* counted in the nchild of (phash, pgen) */
	uint64_t counted_mem : 1;	/* ... and in its nchild_mem */
	uint64_t linked : 1;		/* has an entry in the table's link map */
	uint64_t nrep : 4, cap_rep : 4;	/* <= KVP_MAX_REPLICAS */
	uint64_t generation;
	uint64_t checksum;
	uint64_t put_ms : 42;		/* CLOCK_REALTIME of PUT_END / adoption, ms */
	uint64_t leases : 16;		/* read leases not released (mlease.c); OBJ_LEASES_MAX sticks */
	uint64_t flags : 6;		/* OBJ_COMPLETE ... */
	uint32_t atime;			/* last access (GET, EXISTS, put) */
	uint32_t deadline;		/* complete: lease expiry; pending: put deadline */
	uint32_t slot;			/* index in the master's lease or pending array */
	uint8_t key_head[4];		/* the key begins here and goes on past the struct */
};

#define OBJ_LEASES_MAX UINT16_MAX
#define OBJ_KEY_OFF offsetof(struct obj, key_head)
_Static_assert(sizeof(struct obj) == 56 && OBJ_KEY_OFF == 52, "struct obj: 52 bytes of fields");
_Static_assert(OBJ_COMPLETE < 64 && OBJ_UPSERT < 64 && OBJ_VERSION < 64 && OBJ_PINNED < 64 &&
	       OBJ_RESWAIT < 64 && OBJ_KXWAIT < 64,
	       "the flags fit their 6 bits");

/* Where an object's replicas start: the first 8-byte boundary past its key. */
static inline size_t obj_rep_off(size_t key_len)
{
	return (OBJ_KEY_OFF + key_len + 7) & ~(size_t)7;
}

static inline struct rep *obj_rep(const struct obj *o)
{
	return (struct rep *)((uintptr_t)o + obj_rep_off(o->key_len));
}

/* The put time as it goes out (STAT, LIST, the table file, REPL): ns. */
static inline uint64_t obj_put_ns(const struct obj *o)
{
	return (uint64_t)o->put_ms * 1000000u;
}

static inline void obj_set_put_ns(struct obj *o, uint64_t ns)
{
	uint64_t ms = ns / 1000000u;

	o->put_ms = ms < (1ull << 42) ? ms : (1ull << 42) - 1;
}

/* An object's chain links (mchain.h) and soft pin, kept aside. */
struct obj_links {
	uint32_t phash, pgen;		/* with chained: the object this one extends */
	uint32_t nchild;		/* objects counted as extending this one */
	uint32_t nchild_mem;		/* ... of which have a memory replica */
	uint32_t pin_s;			/* soft pin expiry, s since start (rounded up); 0 none */
};

/* The link map: object address -> links, open addressing with linear
 * probing, at most half full; objtab_regrow re-keys an entry and
 * objtab_remove drops one. */
struct objlinks {
	struct objlink_ent {
		const struct obj *o;
		struct obj_links l;
	} *v;
	size_t cap;			/* power of two, or 0 */
	size_t n;
};
_Static_assert(KVP_MAX_KEY < 2048 && KVP_MAX_REPLICAS < 16,
	       "struct obj's bit fields hold the limits");

/* Objects live in slabs, one free list and one chunk being carved per size
 * class (sizes rounded up to 8 bytes): no malloc header, no rounding to 16
 * (88 bytes for one replica and a 20-byte key, a 112-byte malloc chunk
 * before). A class's chunks grow from 4 KiB to 32 MiB (transparent huge pages
 * from 2 MiB: a large table faults 2 MiB at a time); they go back to the
 * system only with the table, a freed block waits for the next object of
 * its class. */
#define OBJ_MAX_SIZE (OBJ_KEY_OFF + KVP_MAX_KEY + 7 + KVP_MAX_REPLICAS * sizeof(struct rep))
#define OBJSLAB_NCLASS ((OBJ_MAX_SIZE + 7) / 8 + 1)

struct objslab {
	struct objslab_class {
		void *free;		/* freed blocks, linked through their first word */
		char *cur, *end;	/* the rest of the chunk being carved */
		uint8_t chunk_shift;	/* log2 of the class's next chunk */
	} cls[OBJSLAB_NCLASS];
	void *chunks;			/* every chunk, linked through its first word */
	size_t chunk_bytes;
	struct prefault *pf;		/* a bulk load's region (objtab_prefault_begin), or NULL */
};

/* A slot holds an object's address in its low 48 bits (user-space
 * addresses on x86-64 and arm64 Linux; objtab_new refuses any other) and a
 * 16-bit tag of its hash above: a probe compares tags in the slot array and
 * reads an object only when its tag matches, so a key that is absent costs
 * one cache line of slots and no object. 0 is an empty slot. */
#define OBJTAB_SLOT_PTR ((1ull << 48) - 1)

/* An object waiting for the key index, and (while sorted) its key's 8
 * bytes past the prefix they all share. */
struct objtab_kxp {
	uint64_t k;
	struct obj *o;
};

struct objtab {
	uint64_t *slots;		/* linear probing from the hash's home (objtab_home) */
	size_t nslots;			/* at most 3/4 full; grows by 1.5x, not a power of two */
	size_t count;			/* objects, complete or not */
	struct keyidx idx;		/* the same objects in key order (but kxp's) */
	bool kx_defer;			/* objtab_kx_defer: keys out of order wait in kxp */
	struct objtab_kxp *kxp;		/* OBJ_KXWAIT objects, in insert order */
	size_t nkxp, capkxp;
	size_t kxp_lcp;			/* a prefix they all share (taken at each push) */
	struct objlinks links;		/* chain links of the few objects with any */
	struct objslab slab;		/* every object's memory, the versions' too */
};

static inline const uint8_t *obj_key(const struct obj *o)
{
	return (const uint8_t *)o + OBJ_KEY_OFF;
}

extern const struct obj_links objtab_nolinks;

struct obj_links *objtab_links_find(const struct objlinks *lm, const struct obj *o);

/* o's links: all zero when it has none. */
static inline const struct obj_links *objtab_links(const struct objtab *t, const struct obj *o)
{
	return o->linked ? objtab_links_find(&t->links, o) : &objtab_nolinks;
}

/* o's links, made (zeroed) if it has none; NULL out of memory. */
struct obj_links *objtab_links_get(struct objtab *t, struct obj *o);
/* Forgets o's chain links (it has none left); its pin stays. Freeing o
 * forgets both. */
void objtab_links_drop(struct objtab *t, struct obj *o);

/* o's soft pin expiry (s since start, rounded up), 0 when none. */
static inline uint32_t obj_pin_s(const struct objtab *t, const struct obj *o)
{
	return (o->flags & OBJ_PINNED) ? objtab_links_find(&t->links, o)->pin_s : 0;
}

/* Sets it (0: unpins): 0, or -ENOMEM (o keeps its pin as it was). */
int objtab_set_pin(struct objtab *t, struct obj *o, uint32_t pin_s);

static inline bool obj_complete(const struct obj *o)
{
	return o->flags & OBJ_COMPLETE;
}

/* size bytes (zeroed if zero) for a large array of the table's (its
 * slots, slab chunks, a re-mount's replica array): from 2 MiB on, in
 * transparent huge pages where the kernel allows (the common madvise
 * mode): millions of objects then fault 2 MiB at a time, not 4 KiB, and a
 * fault costs ~20 us on a VM (docs/ha.md "Lone restart"). free() frees
 * it; NULL without memory. */
void *objtab_big_alloc(size_t size, bool zero);

int objtab_init(struct objtab *t);
/* Frees every object, linked or not (the master's versions too). */
void objtab_destroy(struct objtab *t);
uint32_t objtab_hash(const uint8_t *key, size_t n);
struct obj *objtab_find(const struct objtab *t, const uint8_t *key, size_t n);
/* The same with the key's hash already computed (objtab_hash). */
struct obj *objtab_find_hash(const struct objtab *t, const uint8_t *key, size_t n, uint32_t h);
/* True when key sorts after every key in the table (absent, then: a
 * snapshot in key order skips the find's cache miss per object). */
bool objtab_past_last(const struct objtab *t, const uint8_t *key, size_t n);
/* The object whose key hashes to h and whose generation's low 32 bits are
 * gen32 (generations are unique: the chain link of mchain.h), or NULL. */
struct obj *objtab_find_hg(const struct objtab *t, uint32_t h, uint32_t gen32);

/* A hash's home among nb slots: its fraction of 2^32 scaled to nb (a
 * multiply and a shift, "fastrange"), for any nb up to 2^32. Homes keep
 * the hashes' order, so a resize writes the new array front to back. */
static inline size_t objtab_slot_home(size_t nb, uint32_t h)
{
	return (size_t)(((uint64_t)h * nb) >> 32);
}

static inline size_t objtab_home(const struct objtab *t, uint32_t h)
{
	return objtab_slot_home(t->nslots, h);
}

/* The tag of a hash: its own 16 bits, mixed from all 32 (the slot index
 * already tells apart hashes that differ in the high bits). */
static inline uint64_t objtab_slot_tag(uint32_t h)
{
	return ((uint64_t)h * 0x9e3779b97f4a7c15ull) & ~OBJTAB_SLOT_PTR;
}

/* Batch lookups are bound by memory latency: prefetch every key's slots,
 * then every likely match, before looking any up. */
static inline void objtab_prefetch_bucket(const struct objtab *t, uint32_t h)
{
	__builtin_prefetch(&t->slots[objtab_home(t, h)]);
}

/* The first object whose tag matches, its first three cache lines: fields,
 * replica, key. A few slots only: long runs are rare at 3/4 full. */
static inline void objtab_prefetch_head(const struct objtab *t, uint32_t h)
{
	uint64_t tag = objtab_slot_tag(h);

	for (size_t i = objtab_home(t, h), k = 0; k < 8; i = i + 1 == t->nslots ? 0 : i + 1, k++) {
		uint64_t s = t->slots[i];
		if (!s)
			return;
		if ((s & ~OBJTAB_SLOT_PTR) == tag) {
			const char *o = (const char *)(uintptr_t)(s & OBJTAB_SLOT_PTR);
			__builtin_prefetch(o);
			__builtin_prefetch(o + 64);
			__builtin_prefetch(o + 128);
			return;
		}
	}
}
/* Creates an object with room for cap_rep replicas (nrep = 0, fields zero,
 * slot = OBJ_NOSLOT) without linking it: objtab_link() later, or objtab_free().
 * NULL on OOM. */
struct obj *objtab_new(struct objtab *t, const uint8_t *key, size_t n, unsigned cap_rep);
/* The same with the key's hash already computed (objtab_hash): a put hashes
 * its key once for the lookup, the tag and the slot. */
struct obj *objtab_new_hash(struct objtab *t, const uint8_t *key, size_t n, uint32_t h,
			    unsigned cap_rep);
/* Makes room to link one more object (a slot, spare key-index nodes): 0,
 * or -ENOMEM when there is none to be had (objtab_insert does this itself). */
int objtab_reserve(struct objtab *t);
/* Sizes the slots for n objects at once (a table file's load): the size
 * the inserts would have grown to, in one step, and an empty table's slots written once now, so that probes
 * do not read zero pages that each write then copies. 0 or -ENOMEM. */
int objtab_presize(struct objtab *t, size_t n);
/* A bulk load (a table file: its snapshot in key order, then changes in
 * any): on, an insert whose key is not past the index's last waits
 * (OBJ_KXWAIT) instead of descending the index at a random point (a few
 * cache misses each: 1.3M changes of hashed keys took 1.7 s of a 3M load);
 * off, they are sorted by key and go in in one ordered pass
 * (objtab_kx_settle: merged with the leaves, kx_merge, when they are a
 * sixteenth of the index or more; else an insert each). Lookups by key
 * (the slots) see them all along; an unlink or move of a waiting object,
 * a seek and a next settle first.
 * Turning it off: 0, or -ENOMEM with some still waiting. */
int objtab_kx_defer(struct objtab *t, bool on);
/* Puts the waiting objects into the key index in key order: 0, or
 * -ENOMEM (those not inserted wait on; a merge without memory leaves the
 * index as it was and inserts them one by one). */
int objtab_kx_settle(struct objtab *t);
/* A bulk load of about bytes of objects starts: the slab's large chunks
 * come from a region a helper thread faults in ahead (prefault.h), once per
 * table; objtab_prefault_end when the load is over. */
void objtab_prefault_begin(struct objtab *t, size_t bytes);
void objtab_prefault_end(struct objtab *t);
/* Links an object made by objtab_new or unlinked before, after an
 * objtab_reserve() that succeeded (room in the slots, spare nodes for the
 * key index's splits; an unlink does not make the latter); its key must not
 * be present. */
void objtab_link(struct objtab *t, struct obj *o);
/* Unlinks o without freeing it (it may be linked again). */
void objtab_unlink(struct objtab *t, struct obj *o);
/* Creates and links an object with room for cap_rep replicas (nrep = 0,
 * fields zero, slot = OBJ_NOSLOT). The key must not be present. NULL on OOM. */
struct obj *objtab_insert(struct objtab *t, const uint8_t *key, size_t n, unsigned cap_rep);
/* The same with the key's hash already computed (objtab_hash). */
struct obj *objtab_insert_hash(struct objtab *t, const uint8_t *key, size_t n, uint32_t h,
			       unsigned cap_rep);
/* Frees an object that is not linked (objtab_new, objtab_unlink), and its
 * side map entry. */
void objtab_free(struct objtab *t, struct obj *o);
/* Unlinks and frees. */
void objtab_remove(struct objtab *t, struct obj *o);
/* Moves o into a new allocation with room for cap_rep replicas and links it
 * in o's place; returns the new object (o is freed) or NULL on OOM (o kept).
 * The caller re-points what else refers to it (segment arrays, slots). */
struct obj *objtab_regrow(struct objtab *t, struct obj *o, unsigned cap_rep);
/* First object whose key is >= key (or > key when after), in byte order;
 * NULL at the end. key may be empty (n = 0): the first object. */
struct obj *objtab_seek(struct objtab *t, const uint8_t *key, size_t n, bool after);
/* The object after o (linked) in key order; NULL after the last. One step
 * when it follows the last seek or next, else a descent. */
struct obj *objtab_next(struct objtab *t, const struct obj *o);
/* Byte-order comparison of two keys (shorter first on a common prefix). */
int objtab_keycmp(const uint8_t *a, size_t an, const uint8_t *b, size_t bn);

#endif
