/* localpool: a private pool for one run of the kvpool tool (replay
 * --sweep): a kvpool-master and one kvpool-node found next to the running
 * binary, on free loopback ports, with a private segment name and a
 * generated INI in a temp dir. The daemons run in a process group of their
 * own (a Ctrl-C reaches the tool, which stops them in order) and are killed
 * if the tool dies (PR_SET_PDEATHSIG). localpool_stop() always leaves
 * nothing behind: processes, segment file, INI and logs. Main thread only.
 */
#ifndef KVP_LOCALPOOL_H
#define KVP_LOCALPOOL_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "conf.h"

struct localpool {
	char dir[128];			/* temp dir: pool.ini, master.log, node.log */
	char ini[192];			/* the INI every process of the pool reads */
	char segment[96];		/* name of the node's segment in /dev/shm */
	char master_addr[64];		/* 127.0.0.1:port */
	uint64_t segment_size;
	const char *master_extra;	/* more [master] lines ("key = value\n"), or NULL */
	pid_t master, node;		/* 0: not running */
	const volatile sig_atomic_t *stop;	/* set: give up waiting (may be NULL) */
};

/* Starts the pool with a segment of segment_size bytes (4 KiB alignment)
 * (p->stop and p->master_extra as the caller set them; the rest is
 * cleared) and waits until the node's segment is mounted at the master. tag names
 * the node and the segment (with the pid). 0, or -1 with err set (and
 * nothing left running); call localpool_stop() after a 0. */
int localpool_start(struct localpool *p, const char *tag, uint64_t segment_size,
		    char *err, size_t errlen);
/* The configuration clients of the pool use (loaded from p->ini). */
int localpool_conf(const struct localpool *p, struct kvp_conf *conf, char *err, size_t errlen);
/* Stops the daemons (SIGTERM, SIGKILL after 5 s), removes the segment
 * file, the INI, the logs and the temp dir. Safe to call twice. */
void localpool_stop(struct localpool *p);
/* The smallest segment size (a multiple of 4 KiB, at least the node's
 * minimum of 1 MiB) whose capacity holds nblocks extents of alloc bytes. */
uint64_t localpool_segment_size(uint64_t nblocks, uint64_t alloc);

#endif
