/* fuzz_frames.h — the peer end of a fuzzed framed connection, for the
 * targets that feed a socketpair to a server (fuzz_evconn, fuzz_node): a
 * parser that aborts unless every byte the server sends belongs to a
 * well-formed wire.h frame, and the reader that drains the socket into it.
 * Header-only; runs on the target's loop thread.
 */
#ifndef KVP_FUZZ_FRAMES_H
#define KVP_FUZZ_FRAMES_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "wire.h"

struct fz_frames {
	const char *who;		/* "fuzz_x: the server", for messages */
	bool replies_only;		/* every frame must be a reply */
	uint8_t rh[WIRE_HDR_SIZE];	/* the header being received */
	size_t rh_len;
	uint64_t skip;			/* body + payload of the current frame */
};

static inline void fz_frames_fail(const struct fz_frames *s, const char *what)
{
	fprintf(stderr, "%s sent %s\n", s->who, what);
	abort();
}

/* The next n bytes of the stream. */
static inline void fz_frames_feed(struct fz_frames *s, const uint8_t *p, size_t n)
{
	while (n) {
		if (s->skip) {
			size_t t = s->skip < n ? (size_t)s->skip : n;
			s->skip -= t;
			p += t;
			n -= t;
			continue;
		}
		size_t t = WIRE_HDR_SIZE - s->rh_len;
		t = t < n ? t : n;
		memcpy(s->rh + s->rh_len, p, t);
		s->rh_len += t;
		p += t;
		n -= t;
		if (s->rh_len < WIRE_HDR_SIZE)
			break;
		struct wire_hdr h;
		if (wire_hdr_decode(s->rh, &h, UINT32_MAX, UINT64_MAX) != 0)
			fz_frames_fail(s, "a malformed frame");
		if (s->replies_only && !(h.flags & WIRE_F_REPLY))
			fz_frames_fail(s, "a frame that is not a reply");
		s->rh_len = 0;
		s->skip = h.body_len + h.payload_len;
	}
}

/* Feeds what fd has now: true once the server closed (or on an error),
 * false when nothing more is there yet. */
static inline bool fz_frames_drain(struct fz_frames *s, int fd)
{
	uint8_t buf[65536];

	for (;;) {
		ssize_t r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (r > 0) {
			fz_frames_feed(s, buf, (size_t)r);
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		return !(r < 0 && errno == EAGAIN);
	}
}

#endif
