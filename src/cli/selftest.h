/* selftest: `kvpool selftest rdma|cuda|numa` — checks the hardware paths
 * on the machine it runs on and prints what they achieve. rdma: a loopback
 * WRITE/READ between two registered buffers through the RC queue pairs and
 * the transfer engine kvpool uses, with bandwidth per device. cuda: copies
 * between device memory and a host-registered shared mapping (what the
 * local path does with a segment), next to plain cudaMemcpy from pinned
 * memory (the limit), and with --pool the same through put_from/get_into.
 * numa: the auto choice, a segment bound with mbind, thread binding. Runs on
 * the calling thread; no global state.
 */
#ifndef KVP_SELFTEST_H
#define KVP_SELFTEST_H

#include "conf.h"

/* argv[0] is "selftest", argv[1] the check. Returns the process exit code:
 * 0 passed, 1 failed, 2 usage, 77 the hardware is not here ("no RDMA
 * device", "no CUDA device", "no NUMA support" on stderr). */
int selftest_main(const struct kvp_conf *conf, int argc, char **argv);

#endif
