/* pynode: the embedded kvpool-nodes of a store — the one setup() starts
 * for a global_segment_size > 0 and those allocate_and_mount_segment /
 * mount_segment add. Each runs node_run on its own pthread (all signals
 * blocked there); start returns once the segment is mounted at the master,
 * stop once it has drained and unmounted (bounded by the node: transfers
 * 10 s, UNMOUNT 2 s), so close() leaves no segment of ours behind at the
 * master. Called without the GIL, with store->lock write-held.
 */
#ifndef KVP_PYNODE_H
#define KVP_PYNODE_H

#include <pthread.h>
#include <stdint.h>

#include "conf.h"

#define EMB_MAX 16		/* embedded nodes per store */

struct node;

enum emb_state { EMB_STARTING, EMB_READY, EMB_EXITED };

struct emb {
	struct node *node;
	pthread_t thr;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	enum emb_state state;		/* protected by lock */
	int rc;				/* node_run's result; protected by lock */
	char name[64];			/* node name: the segment name users see */
	char segment[CONF_STR];		/* /dev/shm file */
	uint64_t size;
	int port;			/* data port */
};

/* Gives @c (a copy of the store's configuration) this process's own node
 * identity: name <host>-py-<pid>-<seq>, segment kvpool-py-<pid>-<seq>, a
 * free port, no HTTP, FUSE or spill, the segment removed on exit — unless
 * setup() named the key explicitly ("section.key"). */
void emb_conf_adjust(struct kvp_conf *c, unsigned seq);
/* Starts a node from @c and waits (client.timeout) until it is mounted.
 * NULL with a message in @err and the KVP_E* code in *rc. */
struct emb *emb_start(const struct kvp_conf *c, char *err, size_t errlen, int *rc);
/* Stops (drain, UNMOUNT), joins and frees; NULL is fine. */
void emb_stop(struct emb *e);

#endif
