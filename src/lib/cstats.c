/* cstats: CLIENT_STATS reports (see cstats.h). */
#include "cstats.h"

#include <stdlib.h>

#include "client_i.h"
#include "clock.h"
#include "mcall.h"
#include "sock.h"

void cstats_init(struct cstats *s)
{
	atomic_store(&s->due_ms, clock_now_ms() + CSTATS_MS);
	pthread_mutex_init(&s->lock, NULL);
}

void cstats_destroy(struct cstats *s)
{
	pthread_mutex_destroy(&s->lock);
}

/* The caller holds s->lock. */
static void send_locked(struct kvp *kvp, struct cstats *s)
{
	uint64_t cur[WIRE_CSTAT_N], d[WIRE_CSTAT_N];
	bool moved = false;
	struct mcall *c;

	cur[WIRE_CSTAT_LOCAL] = atomic_load_explicit(&kvp->st.local_bytes, memory_order_relaxed);
	cur[WIRE_CSTAT_TCP] = atomic_load_explicit(&kvp->st.tcp_bytes, memory_order_relaxed);
	cur[WIRE_CSTAT_RDMA] = atomic_load_explicit(&kvp->st.rdma_bytes, memory_order_relaxed);
	cur[WIRE_CSTAT_DISK] = atomic_load_explicit(&kvp->st.disk_bytes, memory_order_relaxed);
	for (int i = 0; i < WIRE_CSTAT_N; i++) {
		d[i] = cur[i] - s->sent[i];
		moved |= d[i] != 0;
	}
	if (!moved || atomic_load_explicit(&s->due_ms, memory_order_relaxed) == CSTATS_OFF)
		return;
	if (!(c = calloc(1, sizeof(*c))))
		return;
	c->op = WIRE_OP_CLIENT_STATS;
	wb_init(&c->body);
	wb_u32(&c->body, WIRE_CSTAT_N);
	for (int i = 0; i < WIRE_CSTAT_N; i++)
		wb_u64(&c->body, d[i]);
	if (!c->body.oom && mc_post(kvp, c, 1, sock_deadline(kvp)) == 0)
		for (int i = 0; i < WIRE_CSTAT_N; i++)
			s->sent[i] = cur[i];	/* else the next report carries them */
	mc_free(c, 1);
}

void cstats_poll(struct kvp *kvp)
{
	struct cstats *s = &kvp->cs;
	uint64_t due = atomic_load_explicit(&s->due_ms, memory_order_relaxed);

	/* CSTATS_OFF is never reached by the clock */
	if (due == CSTATS_OFF || clock_now_ms() < due)
		return;
	if (pthread_mutex_trylock(&s->lock))
		return;			/* another thread reports */
	due = atomic_load_explicit(&s->due_ms, memory_order_relaxed);
	uint64_t now = clock_now_ms();
	if (due != CSTATS_OFF && now >= due) {
		atomic_store_explicit(&s->due_ms, now + CSTATS_MS, memory_order_relaxed);
		send_locked(kvp, s);
	}
	pthread_mutex_unlock(&s->lock);
}

void cstats_flush(struct kvp *kvp)
{
	struct cstats *s = &kvp->cs;

	pthread_mutex_lock(&s->lock);
	send_locked(kvp, s);
	pthread_mutex_unlock(&s->lock);
}

void cstats_refused(struct kvp *kvp)
{
	atomic_store(&kvp->cs.due_ms, CSTATS_OFF);
}

void cstats_answered(struct kvp *kvp)
{
	atomic_store(&kvp->cs.lost, 0);
}

void cstats_lost(struct kvp *kvp)
{
	if (atomic_fetch_add(&kvp->cs.lost, 1) + 1 >= CSTATS_STRIKES)
		cstats_refused(kvp);
}
