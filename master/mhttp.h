/* mhttp: the master's HTTP endpoints on its ev loop — /metrics (Prometheus
 * text) and Mooncake's admin endpoints (/health, /get_all_segments, ...:
 * madmin.c) on master.http_listen, and, with master.metadata_server, a
 * Mooncake-compatible metadata store (GET/PUT/DELETE /metadata?key=K) on
 * master.metadata_listen (the same server when both addresses are equal).
 * Loop thread only (http.c runs handlers there); no locks.
 */
#ifndef KVP_MHTTP_H
#define KVP_MHTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ev_loop;
struct ha;
struct http_tls;
struct master;
struct mhttp;
struct sbuf;

#define MHTTP_MD_MAX_VALUE (4u << 20)		/* bytes per metadata value */
#define MHTTP_MD_MAX_KEYS 65536
#define MHTTP_MD_MAX_TOTAL (256ull << 20)	/* bytes of all values */

/* metadata_listen NULL: no metadata store. NULL with a message in err. */
/* tls not NULL: both listeners serve HTTPS ([tls] http). */
struct mhttp *mhttp_start(struct ev_loop *loop, struct master *m, const char *http_listen,
			  const char *metadata_listen, const struct http_tls *tls, char *err,
			  size_t errlen);
void mhttp_stop(struct mhttp *h);
/* What /health, /role, /ha_status, /leader and /metrics/summary report
 * (a leader election sets it; the default is a serving leader with no
 * view): role "leader"/"standby", state "serving", "standby", ...;
 * !service_ready makes the key and segment endpoints answer 503. */
void mhttp_set_ha(struct mhttp *h, const char *role, const char *state, bool service_ready,
		  const char *leader, uint64_t view_version);
/* The state the endpoints show (an HA role change replaces it). */
void mhttp_set_master(struct mhttp *h, struct master *m);
/* ha = etcd: the election behind the view above (refreshed at each
 * request), /metrics's HA samples, and /health/leader (200 only on the
 * leader, for load balancers). */
void mhttp_set_election(struct mhttp *h, struct ha *ha);
int mhttp_port(const struct mhttp *h);
int mhttp_metadata_port(const struct mhttp *h);	/* -1 without the store */

/* The Prometheus text of the master's state (also used by tests). */
void mhttp_metrics(struct master *m, struct sbuf *b);

#endif
