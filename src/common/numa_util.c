/* numa_util: NUMA placement helpers (see numa_util.h), on libnuma and the
 * get_mempolicy/numa_run_on_node system interfaces. Stateless.
 */
#include <errno.h>
#include <numa.h>
#include <numaif.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "numa_util.h"
#include "rdma.h"

int numa_util_nodes(void)
{
	if (numa_available() < 0)
		return 0;
	return numa_max_node() + 1;
}

int numa_util_auto(const char *sysfs_root, const char *rdma_dev, int cpu_node, int nnodes,
		   char *why, size_t whylen)
{
	char tmp[8];

	if (!why) {
		why = tmp;
		whylen = sizeof(tmp);
	}
	if (nnodes < 1) {
		snprintf(why, whylen, "no NUMA support");
		return -1;
	}
	/* RDMA moves segment bytes between the NIC and memory: the NIC's own
	 * node saves every transfer a trip over the socket interconnect. */
	if (rdma_dev && *rdma_dev) {
		int n = rdma_dev_numa_node(sysfs_root, rdma_dev);

		if (n >= 0 && n < nnodes) {
			snprintf(why, whylen, "the node of RDMA device %s", rdma_dev);
			return n;
		}
	}
	if (nnodes == 1) {
		snprintf(why, whylen, "the only node");
		return 0;
	}
	if (cpu_node >= 0 && cpu_node < nnodes) {
		snprintf(why, whylen, "the node of the CPU it started on");
		return cpu_node;
	}
	snprintf(why, whylen, "node 0 (nothing better known)");
	return 0;
}

void numa_util_rdma_dev(const char *devices, char *out, size_t len)
{
	const char *p = devices ? devices : "";
	char all[256];
	size_t n;

	if (!len)
		return;
	out[0] = 0;
	p += strspn(p, ", \t");
	n = strcspn(p, ", \t");
	if (n) {
		snprintf(out, len, "%.*s", (int)n, p);
		return;
	}
	if (rdma_list_devices(all, sizeof(all)) > 0)
		snprintf(out, len, "%.*s", (int)strcspn(all, ","), all);
}

int numa_util_cpu_node(void)
{
	int cpu = sched_getcpu();

	if (cpu < 0 || numa_available() < 0)
		return -1;
	return numa_node_of_cpu(cpu);
}

int numa_util_bind_thread(int node)
{
	if (numa_available() < 0)
		return -ENOTSUP;
	if (node < 0 || node > numa_max_node())
		return -EINVAL;
	if (numa_run_on_node(node) < 0)
		return -errno;
	return 0;
}

int numa_util_policy(const void *p, int *mode, int *node)
{
	unsigned long mask[16];

	memset(mask, 0, sizeof(mask));
	*mode = -1;
	*node = -1;
	if (get_mempolicy(mode, mask, sizeof(mask) * 8, (void *)p, MPOL_F_ADDR) < 0)
		return -errno;
	for (unsigned i = 0; i < sizeof(mask) * 8; i++) {
		if (mask[i / (8 * sizeof(long))] & (1ul << (i % (8 * sizeof(long))))) {
			*node = (int)i;
			break;
		}
	}
	return 0;
}

int numa_util_page_node(const void *p)
{
	int node = -1;

	if (get_mempolicy(&node, NULL, 0, (void *)p, MPOL_F_NODE | MPOL_F_ADDR) < 0)
		return -errno;
	return node;
}

void numa_util_describe(int node, const char *why, char *out, size_t len)
{
	if (node < 0)
		snprintf(out, len, "none");
	else if (why && *why)
		snprintf(out, len, "%d (auto: %s)", node, why);
	else
		snprintf(out, len, "%d", node);
}
