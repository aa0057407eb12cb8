/* fuzz_node: hostile bytes into kvpool-node's real handlers (src/node/node_*.c).
 * One node (a 1 MiB segment, no master) lives for the whole run; each input
 * is written into one end of a socketpair whose other end the node adopts
 * either as a data-server connection (byte 0 even: HELLO/READ/WRITE) or as
 * its master link, mounted as segment 7 (byte 0 odd: FREE and replies). So
 * that the fuzzer gets past the HMAC and the segment uuid, a WRITE frame
 * whose reqid has bit 0 set gets the correct grant patched in, and with bit 1
 * its payload gets the segment's uuid and a recomputed header checksum.
 * Checks besides the sanitizers: every byte the node sends parses as reply
 * frames, the node closes the connection after the input ends (no hang),
 * and no connection, write or zero-copy send is left behind.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../../src/node/node_i.h"
#include "conf.h"
#include "ev.h"
#include "extent.h"
#include "fuzz_frames.h"
#include "grant.h"
#include "kvpool.h"
#include "log.h"
#include "node.h"
#include "wire.h"

#define FAIL(why) do { fprintf(stderr, "fuzz_node: %s\n", why); abort(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const uint8_t secret[WIRE_SECRET_LEN] = "fuzz-node-secret-32-bytes-long!";
static struct node *node;

struct feed {
	int peer;
	const uint8_t *in;
	size_t len, off;
	bool shut, eof;
	uint64_t timer;
	struct fz_frames out;		/* what the node sends */
};

static void cleanup(void)
{
	if (node)
		node_destroy(node);	/* remove_segment_on_exit */
	node = NULL;
}

static void init(void)
{
	struct kvp_conf c;
	char err[512], seg[64];

	log_init("fuzz_node", getenv("FUZZ_DEBUG") ? LOG_DEBUG : LOG_CRIT);
	conf_defaults(&c);
	snprintf(seg, sizeof(seg), "kvpt-fuzz-node-%d", (int)getpid());
	const char *const ov[] = {
		"node.listen=127.0.0.1:0", "node.segment_size=1M", "node.align=4K",
		"node.remove_segment_on_exit=true", "cluster.master=127.0.0.1:1",
		NULL,
	};
	for (const char *const *o = ov; *o; o++)
		if (conf_set_override(&c, *o, err, sizeof(err)))
			FAIL(err);
	if (conf_set(&c, "node", "segment", seg, CONF_SRC_CMDLINE, err, sizeof(err)))
		FAIL(err);
	c.node.http_listen[0] = '\0';
	node = node_create(&c, err, sizeof(err));
	if (!node)
		FAIL(err);
	/* As if mounted as segment 7 (node_master_adopt sets the same). */
	node_data_set_grant(node->data, 7, secret, 0);	/* epoch 0, as adopted */
	atexit(cleanup);
}

/* See the header: make some WRITEs carry a valid grant and image uuid. */
static void patch(uint8_t *p, size_t len)
{
	size_t off = 0;
	struct wire_hdr h;

	while (len - off >= WIRE_HDR_SIZE) {
		if (wire_hdr_decode(p + off, &h, UINT32_MAX, UINT64_MAX) != 0)
			return;
		uint8_t *body = p + off + WIRE_HDR_SIZE;
		size_t avail = len - off - WIRE_HDR_SIZE;
		if (h.opcode == WIRE_OP_WRITE && h.body_len == 4 + 4 * 8 + WIRE_GRANT_LEN &&
		    avail >= h.body_len) {
			uint32_t sid;
			uint64_t gen, eoff, alen;
			memcpy(&sid, body, 4);
			memcpy(&gen, body + 4, 8);
			memcpy(&eoff, body + 12, 8);
			memcpy(&alen, body + 20, 8);
			if (h.reqid & 1) {
				/* the adopted link's epoch is 0 (node_master_adopt) */
				memset(body + 28, 0, 8);
				grant_make(secret, sid, gen, eoff, alen, 0, body + 36);
			}
			uint8_t *pay = body + h.body_len;
			size_t pavail = avail - h.body_len;
			if ((h.reqid & 2) && pavail >= EXT_HDR_SIZE && h.payload_len >= EXT_HDR_SIZE) {
				struct ext_hdr e = { 0 };
				memcpy(&e.key_len, pay + 8, 4);
				memcpy(&e.value_len, pay + 16, 8);
				memcpy(&e.value_checksum, pay + 24, 8);
				memcpy(&e.generation, pay + 32, 8);
				memcpy(&e.put_time_ns, pay + 48, 8);
				e.seg_uuid = node->x.seg.uuid;
				if (e.key_len >= 1 && e.key_len <= KVP_MAX_KEY &&
				    e.key_len <= pavail - EXT_HDR_SIZE)
					ext_encode(pay, &e, pay + EXT_HDR_SIZE);
			}
		}
		/* no sum that wraps: a payload_len near 2^64 made the step
		 * 0 and this loop endless (the fuzzer found it) */
		if (h.body_len > avail || h.payload_len > avail - h.body_len)
			return;
		off += WIRE_HDR_SIZE + h.body_len + (size_t)h.payload_len;
	}
}

static void on_peer(struct ev_loop *loop, int fd, uint32_t events, void *arg)
{
	struct feed *f = arg;

	if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR)) && fz_frames_drain(&f->out, fd)) {
		f->eof = true;
		ev_stop(loop);
	}
	if (f->eof)
		return;
	while (f->off < f->len) {
		ssize_t w = send(fd, f->in + f->off, f->len - f->off, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w <= 0)
			break;
		f->off += (size_t)w;
	}
	if (f->off == f->len && !f->shut) {
		shutdown(fd, SHUT_WR);
		f->shut = true;
		ev_mod_fd(loop, fd, EPOLLIN);
	}
}

static void on_timeout(struct ev_loop *loop, void *arg)
{
	FAIL("the node did not close the connection after the input ended");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int sv[2];

	if (!node)
		init();
	if (size < 1 || size > (1u << 20))
		return 0;
	bool master = data[0] & 1;
	uint8_t *in = malloc(size - 1 + 1);
	if (!in)
		return 0;
	memcpy(in, data + 1, size - 1);
	patch(in, size - 1);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0)
		FAIL("socketpair");

	struct feed f = {
		.peer = sv[1], .in = in, .len = size - 1,
		.out = { .who = "fuzz_node: the node" },
	};
	struct ev_loop *loop = node->x.loop;
	int r = master ? node_master_adopt(node->ml, sv[0], 7, secret) :
			 node_data_adopt(node->data, sv[0]);
	if (r < 0)
		FAIL("adopt");
	ev_add_fd(loop, sv[1], EPOLLIN | EPOLLOUT, on_peer, &f);
	f.timer = ev_timer_add(loop, 5000, false, on_timeout, &f);
	ev_run(loop);
	ev_timer_del(loop, f.timer);
	ev_del_fd(loop, sv[1]);
	close(sv[1]);
	if (master)
		node_master_close(node->ml);	/* no reconnect to 127.0.0.1:1 */
	if (node_data_conns(node->data) || node_data_writing(node->data) ||
	    node_data_sends(node->data))
		FAIL("a connection, write or send outlived its connection");
	free(in);
	return 0;
}
