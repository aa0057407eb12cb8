/* ha: kvpool-master's leader election through etcd (docs/ha.md). A thread
 * of its own campaigns for the key kvpool/<cluster_id>/leader (an etcd txn
 * that creates it under a lease only if it does not exist), renews the
 * lease while it leads and watches the key while it stands by. The loop
 * thread asks ha_serving() before it answers anything, which is true only
 * while this master leads and its lease is surely still held: the deadline
 * is taken from the moment each renewal was *sent*, minus a margin, so a
 * leader cut off from etcd (or stopped, or paused) stops serving before
 * etcd can let the lease lapse and another master win. A lapsed
 * leadership is never extended: the master steps down and campaigns
 * afresh, under a new epoch (the create revision of its new key).
 *
 * ha_serving(), ha_epoch() and ha_lapsed() are lock-free and may be called
 * from any thread; the rest take h->lock briefly. Role changes are
 * signalled on ha_fd() (an eventfd) for the owner's event loop.
 */
#ifndef KVP_HA_H
#define KVP_HA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "leader.h"

struct ha;

struct ha_conf {
	char endpoints[CONF_STR];		/* etcd h:p;h:p, https://h:p */
	/* [tls] towards etcd (struct etcd_tls), copied: ha_stop reads them too */
	bool tls_required;
	char tls_ca[CONF_STR], tls_cert[CONF_STR], tls_key[CONF_STR];
	char cluster_id[LEADER_ID_MAX + 1];
	uint64_t ttl_ms;			/* asked for; etcd may grant more */
	/* published; an rpc or http host of "" or a wildcard is replaced by
	 * this host's address on its connection to etcd */
	struct leader_rec rec;
};

struct ha_status {
	bool leader;			/* and ha_serving() was true when read */
	uint64_t epoch;			/* this leader's, or the last leader seen */
	bool leader_known;		/* rec below names the current leader */
	struct leader_rec rec;
	uint64_t elections;		/* won by this master */
	uint64_t stepdowns;
	uint64_t last_change_ns;	/* CLOCK_REALTIME of the last new leader seen */
	uint64_t lease_ttl_ms;		/* granted to this master when it last won */
	uint64_t etcd_errors;
	bool etcd_ok;			/* the last etcd call was answered */
	char etcd_error[160];		/* the last failure */
};

/* Fills c from the [master] keys (ha_endpoints, cluster_id, ha_lease_ttl,
 * advertise) and the listen addresses; 0 or -1 with a message in err. */
int ha_conf_from(struct ha_conf *c, const struct kvp_conf *conf, const char *rpc_listen,
		 const char *http_listen, char *err, size_t errlen);

/* Starts the election thread (standby until it wins). NULL with a message. */
struct ha *ha_start(const struct ha_conf *c, char *err, size_t errlen);
/* A leader gives the key up (delete + revoke) so that a standby wins at
 * once; then the thread ends. */
void ha_stop(struct ha *h);

int ha_fd(const struct ha *h);
void ha_ack(struct ha *h);

/* Leader, with the lease surely held now. */
bool ha_serving(const struct ha *h);
/* The epoch while leader (0 otherwise). */
uint64_t ha_epoch(const struct ha *h);
/* The owner saw ha_serving() turn false while it led and dropped its state:
 * the thread steps down (it would not extend a lapsed lease anyway). */
void ha_lapsed(struct ha *h);
/* Steps down voluntarily (key deleted, lease revoked) and stands by. */
void ha_resign(struct ha *h);
void ha_get_status(struct ha *h, struct ha_status *st);

/* What the recovering new leader waits for: the leader records the set of
 * segments it has mounted in kvpool/<cluster_id>/segments (written by the
 * thread, coalesced, guarded by the leader key); a new leader reads it when
 * it wins. ha_set_segments() takes a text (one segment uuid in hex per
 * line) and copies it. ha_expected() copies what the last election read
 * into buf (NUL-terminated; "" when none) and returns its length. */
void ha_set_segments(struct ha *h, const char *text, size_t n);
size_t ha_expected(struct ha *h, char *buf, size_t cap);

#endif
