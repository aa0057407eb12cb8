/* cli_bench: `kvpool bench` — put/get/exists/mixed workloads against a pool
 * through one libkvpool handle shared by T worker threads. Values are
 * windows of one seeded random pattern chosen by a hash of the key (and, in
 * mixed, of the key's put count), so every get is verified without storing
 * the values. Worker threads own their key ranges; the main thread prints
 * progress and the report. No locks: per-thread counters, atomics for progress.
 */
#ifndef KVP_CLI_BENCH_H
#define KVP_CLI_BENCH_H

#include "conf.h"
#include "kvpool.h"

/* argv[0] is "bench"; getopt state must be reset by the caller. Returns an
 * exit code (0 ok, 1 errors or wrong values, 2 usage). */
int cli_bench_main(const struct kvp_conf *conf, int argc, char **argv);

#endif
