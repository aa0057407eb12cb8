/* t_numa: NUMA placement. The auto choice against a fake sysfs tree (the
 * RDMA device's node wins, then the CPU's, then 0; one node is always 0;
 * no NUMA is "none"), the device auto placement looks at, and on this host
 * (one node is enough) a real segment bound to node 0 with mbind — policy
 * and page location read back — and the calling thread bound to it.
 */
#include <numa.h>
#include <numaif.h>
#include <sched.h>

/* testlib's CHECK(cond) with no message is an empty format string. */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

#include "testlib.h"
#include "numa_util.h"
#include "segment.h"

static void fake_dev(const char *root, const char *dev, const char *node)
{
	char path[512];

	tl_fmt(path, sizeof(path), "%s/class/infiniband/%s/device", root, dev);
	char cmd[600];

	tl_fmt(cmd, sizeof(cmd), "mkdir -p '%s'", path);
	REQUIRE(system(cmd) == 0);
	tl_fmt(path, sizeof(path), "%s/class/infiniband/%s/device/numa_node", root, dev);
	tl_write_file(path, node);
}

static void t_auto(void)
{
	const char *root = tl_tmpdir("numa");
	char why[128];

	fake_dev(root, "mlx5_0", "1\n");
	fake_dev(root, "mlx5_1", "-1\n");
	fake_dev(root, "mlx5_2", "7\n");
	fake_dev(root, "mlx5_3", "garbage\n");

	CHECK_EQ(numa_util_auto(root, "mlx5_0", 0, 2, why, sizeof(why)), 1);
	CHECK(strstr(why, "RDMA device mlx5_0") != NULL, "%s", why);
	/* a device with no NUMA affinity (-1): the CPU's node */
	CHECK_EQ(numa_util_auto(root, "mlx5_1", 1, 2, why, sizeof(why)), 1);
	CHECK(strstr(why, "CPU") != NULL, "%s", why);
	CHECK_EQ(numa_util_auto(root, "mlx5_1", 0, 2, why, sizeof(why)), 0);
	/* a node that does not exist here, an unreadable file, no device */
	CHECK_EQ(numa_util_auto(root, "mlx5_2", 1, 2, why, sizeof(why)), 1);
	CHECK_EQ(numa_util_auto(root, "mlx5_3", 1, 4, why, sizeof(why)), 1);
	CHECK_EQ(numa_util_auto(root, "nosuch", 3, 4, why, sizeof(why)), 3);
	CHECK_EQ(numa_util_auto(root, NULL, 2, 4, why, sizeof(why)), 2);
	CHECK_EQ(numa_util_auto(root, "", -1, 4, why, sizeof(why)), 0);
	CHECK(strstr(why, "node 0") != NULL, "%s", why);
	/* one node: 0 whatever else is known, even with the device on it */
	CHECK_EQ(numa_util_auto(root, "mlx5_2", 5, 1, why, sizeof(why)), 0);
	CHECK(strstr(why, "only node") != NULL, "%s", why);
	CHECK_EQ(numa_util_auto(root, "mlx5_0", 0, 1, why, sizeof(why)), 0);
	/* no NUMA at all */
	CHECK_EQ(numa_util_auto(root, "mlx5_0", 0, 0, why, sizeof(why)), -1);
	CHECK(strstr(why, "no NUMA") != NULL, "%s", why);
	CHECK_EQ(numa_util_auto(root, "mlx5_0", 0, 2, NULL, 0), 1);

	char dev[64];

	numa_util_rdma_dev("mlx5_3, mlx5_4", dev, sizeof(dev));
	CHECK(!strcmp(dev, "mlx5_3"), "%s", dev);
	numa_util_rdma_dev(" ,rxe0", dev, sizeof(dev));
	CHECK(!strcmp(dev, "rxe0"), "%s", dev);

	char d[64];

	numa_util_describe(-1, NULL, d, sizeof(d));
	CHECK(!strcmp(d, "none"));
	numa_util_describe(1, "", d, sizeof(d));
	CHECK(!strcmp(d, "1"));
	numa_util_describe(1, "the node of RDMA device mlx5_0", d, sizeof(d));
	CHECK(!strcmp(d, "1 (auto: the node of RDMA device mlx5_0)"), "%s", d);
}

static void t_bind(void)
{
	int nn = numa_util_nodes();
	char name[64], err[256];
	struct segment seg;
	int mode, node;

	if (nn < 1) {
		printf("no NUMA support here: binding not checked\n");
		return;
	}
	CHECK(numa_util_cpu_node() >= 0 && numa_util_cpu_node() < nn);
	tl_fmt(name, sizeof(name), "kvpool-t_numa-%d", (int)getpid());
	struct segment_opts so = {
		.name = name, .size = 8u << 20, .align = 4096, .mode = 0600, .gid = (gid_t)-1,
		.numa_node = 0,
	};
	REQUIRE(segment_open(&seg, &so, true, err, sizeof(err)) == 0, "%s", err);
	uint8_t *p = (uint8_t *)seg.base + seg.data_off;

	memset(p, 1, 1 << 20);
	CHECK_EQ(numa_util_policy(p, &mode, &node), 0);
	CHECK_EQ(mode, MPOL_BIND);
	CHECK_EQ(node, 0);
	CHECK_EQ(numa_util_page_node(p), 0);
	CHECK_EQ(numa_util_page_node(p + (1 << 20) - 1), 0);
	segment_unlink(&seg);

	/* an unbound mapping reads as the default policy */
	uint8_t *q = malloc(1 << 16);

	memset(q, 0, 1 << 16);
	CHECK_EQ(numa_util_policy(q, &mode, &node), 0);
	CHECK(mode == MPOL_DEFAULT || mode == MPOL_PREFERRED || mode == MPOL_LOCAL, "mode %d", mode);
	free(q);

	/* the thread runs on node 0's CPUs only */
	struct bitmask *cpus = numa_allocate_cpumask();
	cpu_set_t set;

	REQUIRE(numa_node_to_cpus(0, cpus) == 0);
	CHECK_EQ(numa_util_bind_thread(0), 0);
	REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
	for (int c = 0; c < CPU_SETSIZE && c < (int)numa_num_possible_cpus(); c++)
		CHECK(!CPU_ISSET(c, &set) || numa_bitmask_isbitset(cpus, (unsigned)c),
		      "cpu %d outside node 0", c);
	CHECK(CPU_COUNT(&set) >= 1);
	numa_free_cpumask(cpus);
	CHECK_EQ(numa_util_bind_thread(nn), -EINVAL);
	CHECK_EQ(numa_util_bind_thread(-1), -EINVAL);
}

int main(void)
{
	tl_arm_cleanup();
	t_auto();
	t_bind();
	return tl_done();
}
