/* lns: a handle's namespace declarations (kvp_declare_namespace) — sent to
 * the master, kept in kvp->ns (guarded by kvp->lock) and sent again on
 * every new master connection before it is lent (lns_redeclare), so that
 * a restarted master or a new leader learns them. Any thread.
 */
#ifndef KVP_LNS_H
#define KVP_LNS_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

struct kvp;

struct lns_decl {
	char name[WIRE_NS_NAME_MAX + 1];
	char model[WIRE_NS_MODEL_MAX + 1];
	char dtype[WIRE_NS_FIELD_MAX + 1];
	char layout[WIRE_NS_FIELD_MAX + 1];
	uint32_t page_size, tp;
};

/* On a fresh master connection fd (after HELLO): declares every namespace
 * of the handle, pipelined. 0 with *gen = the kvp->ns_gen it declared, or
 * the KVP_E* that broke the exchange. A declaration the master refuses
 * (another process declared other fields first, after a master restart)
 * is logged and left out: that namespace's keys are then refused to the
 * handle (KVP_ENSMISMATCH per item), other keys work. */
int lns_redeclare(struct kvp *kvp, int fd, uint64_t deadline, uint64_t *gen);

/* Decoders of master replies (untrusted bytes; tests/fuzz/fuzz_client.c).
 * An NS_DECLARE reply body: its item status (KVP_EPROTO when malformed),
 * the message into msg (cap bytes; may be NULL). */
int lns_declare_parse(const uint8_t *body, size_t len, char *msg, size_t cap);
struct kvp_ns_info;
/* An NS_LIST reply body into *out (free()) and *n: 0, KVP_EPROTO, KVP_ENOMEM. */
int lns_list_parse(const uint8_t *body, size_t len, struct kvp_ns_info **out, size_t *n);

#endif
