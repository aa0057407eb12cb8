/* replay: `kvpool replay` — replays a request trace (trace.h) against a
 * pool exactly as an engine's prefix cache does (batch_exists of a
 * request's block keys, batch_get_into of the leading run that is there,
 * every value verified, batch_put of the rest as a chain), and computes in
 * the same run what unlimited capacity, exact LRU and the offline optimum
 * would have hit at the pool's capacity. --sweep does it once per capacity
 * against private pools (localpool.h) and plots the curves (svgplot.h).
 * The tool's main thread forks the client processes, draws the progress
 * bar and writes the report; each client owns its counters in a shared
 * mapping, so there are no locks.
 */
#ifndef KVP_REPLAY_H
#define KVP_REPLAY_H

#include "conf.h"

/* argv[0] is "replay"; getopt state must be reset by the caller. Returns
 * an exit code: 0 ok, 1 wrong values, failed puts, other errors or an
 * interrupted run, 2 usage (an unreadable or bad trace is 1). */
int replay_main(const struct kvp_conf *conf, int argc, char **argv);

#endif
