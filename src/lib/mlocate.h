/* mlocate: where a handle's master is (docs/ha.md). A host:port in
 * cluster.master is used as it is; etcd://h:p;h:p names etcd endpoints and
 * the address is the leader record of master.cluster_id there, looked up
 * when first needed, kept until a connection to it fails or a master there
 * says it does not lead, then looked up again. Any thread: loc->lock guards
 * the cached leader and is never held across I/O; loc->lookup serialises
 * the etcd requests of one handle (taken before loc->lock, never together
 * with kvp->lock).
 */
#ifndef KVP_MLOCATE_H
#define KVP_MLOCATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct kvp;
struct kvp_master;

/* 0, or KVP_EINVAL (a bad master.cluster_id) / KVP_ENOMEM. */
int mlocate_open(struct kvp *kvp);
void mlocate_close(struct kvp *kvp);
/* True when the master is found through etcd. */
bool mlocate_ha(const struct kvp *kvp);
/* The address to connect to now: 0, KVP_ENOTLEADER (etcd names no leader:
 * an election is due or running), KVP_ECONN (no etcd endpoint answers). */
int mlocate_get(struct kvp *kvp, char *addr, size_t cap, uint64_t deadline);
/* addr did not answer as the leader (refused, gone, not leading): look up
 * again next time. */
void mlocate_bad(struct kvp *kvp, const char *addr);
/* A HELLO from addr said epoch: false if a newer leader has been seen (a
 * deposed master answered); else records it. */
bool mlocate_epoch_ok(struct kvp *kvp, const char *addr, uint64_t epoch);
/* While a reply is awaited from addr (HELLO epoch): true if etcd names
 * another leader now (a failover happened under the call, e.g. the master
 * was stopped); the caller gives that connection up and goes there. */
bool mlocate_moved(struct kvp *kvp, const char *addr, uint64_t epoch, uint64_t deadline);
/* For kvp_master(): the address, the leader's name and epoch as known. */
void mlocate_describe(struct kvp *kvp, struct kvp_master *out);

#endif
