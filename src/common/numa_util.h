/* numa_util: NUMA placement helpers for kvpool-node and `kvpool selftest
 * numa`: the choice behind [node] numa_node = auto (the NUMA node of the
 * RDMA device, else of the CPU we run on, else 0), binding the calling
 * thread (and so the threads it starts later), and reading back where a
 * range of memory is bound. Stateless; any thread.
 */
#ifndef KVP_NUMA_UTIL_H
#define KVP_NUMA_UTIL_H

#include <stddef.h>

/* NUMA nodes on this host (numa_max_node() + 1), 0 when the kernel has no
 * NUMA support. */
int numa_util_nodes(void);

/* The auto choice. rdma_dev: the RDMA device whose PCI node wins (NULL or
 * "": none); sysfs_root: "" for /sys (tests pass a fake tree); cpu_node:
 * the node of the CPU running (-1 unknown); nnodes: numa_util_nodes().
 * Returns the node, -1 when there is no NUMA (nnodes 0); why (may be NULL)
 * says how it was chosen. Pure apart from reading sysfs. */
int numa_util_auto(const char *sysfs_root, const char *rdma_dev, int cpu_node, int nnodes,
		   char *why, size_t whylen);
/* The RDMA device auto placement looks at: the first name in [rdma]
 * devices, else the first device ibverbs lists; "" when none. */
void numa_util_rdma_dev(const char *devices, char *out, size_t len);
/* The node of the CPU this thread runs on, -1 unknown. */
int numa_util_cpu_node(void);

/* Runs the calling thread (and threads it creates afterwards) on the CPUs
 * of node. 0, -EINVAL (no such node), -ENOTSUP (no NUMA) or -errno. */
int numa_util_bind_thread(int node);
/* The memory policy of the page at p: *mode (MPOL_*) and the lowest node in
 * its mask (-1 none). 0 or -errno. */
int numa_util_policy(const void *p, int *mode, int *node);
/* The node the page at p currently resides on (touch it first), -errno. */
int numa_util_page_node(const void *p);
/* "none", "0", "1 (auto: the node of RDMA device mlx5_0)" ... */
void numa_util_describe(int node, const char *why, char *out, size_t len);

#endif
