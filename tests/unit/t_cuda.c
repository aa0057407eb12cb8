/* t_cuda: the dlopen()ed CUDA runtime. Without a usable CUDA (library
 * disabled, library missing, or — as on a build box with the toolkit but no
 * driver — loaded without a device) every call must say -ENOTSUP and every
 * pointer read as host memory, so host buffers keep working. Where a GPU is
 * present the same program checks the real thing: pointer kinds of
 * cudaMalloc/cudaMallocHost/malloc memory, round trips through device
 * memory from plain, pinned and host-registered MAP_SHARED memory. And a
 * process that never loaded the CUDA driver gets host pointers classified
 * without anything being loaded. Each loader scenario runs in its own child
 * (loading happens once per process).
 */
#include <dlfcn.h>
#include <sys/mman.h>

/* testlib's CHECK(cond) with no message is an empty format string. */
#pragma GCC diagnostic ignored "-Wformat-zero-length"

#include "testlib.h"
#include "cuda.h"

static void all_refused(void)
{
	int x = 0;
	void *p = NULL;
	char host[64];

	CHECK_EQ(cuda_load(), -ENOTSUP);
	CHECK(!cuda_available());
	CHECK(cuda_status()[0] != 0);
	CHECK_EQ(cuda_device_count(), 0);
	CHECK_EQ(cuda_ptr_kind(&x, NULL), CUDA_HOST);
	p = malloc(1 << 20);
	int dev = 5;

	CHECK_EQ(cuda_ptr_kind(p, &dev), CUDA_HOST);
	CHECK_EQ(dev, -1);
	CHECK(!cuda_is_device(p));
	CHECK_EQ(cuda_ptr_kind(NULL, NULL), CUDA_UNKNOWN);
	CHECK_EQ(cuda_memcpy(host, p, sizeof(host)), -ENOTSUP);
	CHECK_EQ(cuda_host_register(p, 1 << 20), -ENOTSUP);
	CHECK_EQ(cuda_host_unregister(p), -ENOTSUP);
	void *q = NULL;

	CHECK_EQ(cuda_malloc_host(&q, 4096), -ENOTSUP);
	CHECK_EQ(cuda_malloc(&q, 4096), -ENOTSUP);
	CHECK(q == NULL);
	CHECK_EQ(cuda_free(p), -ENOTSUP);
	CHECK_EQ(cuda_free_host(p), -ENOTSUP);
	CHECK_EQ(cuda_memset(p, 0, 1), -ENOTSUP);
	CHECK_EQ(cuda_sync(), -ENOTSUP);
	CHECK_EQ(cuda_set_device(0), -ENOTSUP);
	free(p);
}

static void real_gpu(void)
{
	const size_t n = 64u << 20;
	uint8_t *h = malloc(n), *back = malloc(n), *shared;
	void *d = NULL, *pin = NULL;
	int dev = -2;

	REQUIRE(h && back);
	for (size_t i = 0; i < n; i++)
		h[i] = (uint8_t)(i * 7 + 3);
	CHECK(cuda_device_count() >= 1);
	REQUIRE(cuda_malloc(&d, n) == 0);
	REQUIRE(cuda_malloc_host(&pin, n) == 0);
	CHECK_EQ(cuda_ptr_kind(d, &dev), CUDA_DEVICE);
	CHECK(dev >= 0);
	CHECK(cuda_is_device(d));
	CHECK(cuda_is_device((uint8_t *)d + n - 1), "interior device pointer");
	CHECK_EQ(cuda_ptr_kind(pin, NULL), CUDA_HOST);
	CHECK_EQ(cuda_ptr_kind(h, NULL), CUDA_HOST);
	/* pageable -> device -> pageable */
	CHECK_EQ(cuda_memcpy(d, h, n), 0);
	memset(back, 0, n);
	CHECK_EQ(cuda_memcpy(back, d, n), 0);
	CHECK(!memcmp(h, back, n), "pageable round trip");
	/* device -> pinned */
	memset(pin, 0, n);
	CHECK_EQ(cuda_memcpy(pin, d, n), 0);
	CHECK(!memcmp(h, pin, n), "pinned copy");
	/* a MAP_SHARED mapping registered like a segment */
	shared = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	REQUIRE(shared != MAP_FAILED);
	CHECK_EQ(cuda_host_register(shared, n), 0);
	CHECK_EQ(cuda_host_register(shared, n), 0);	/* twice is fine */
	CHECK_EQ(cuda_memset(d, 0x5a, n), 0);
	CHECK_EQ(cuda_sync(), 0);
	CHECK_EQ(cuda_memcpy(shared, d, n), 0);
	CHECK(shared[0] == 0x5a && shared[n - 1] == 0x5a);
	CHECK_EQ(cuda_memcpy(d, h, n), 0);
	CHECK_EQ(cuda_memcpy(shared, d, n), 0);
	CHECK(!memcmp(shared, h, n), "registered mapping copy");
	CHECK_EQ(cuda_host_unregister(shared), 0);
	CHECK_EQ(cuda_host_unregister(shared), -ENOENT);
	munmap(shared, n);
	CHECK_EQ(cuda_free(d), 0);
	CHECK_EQ(cuda_free_host(pin), 0);
	free(h);
	free(back);
}

/* Runs fn in a child with KVP_CUDA_LIB=lib (NULL: unset). */
static void scenario(const char *name, const char *lib, void (*fn)(const char *))
{
	pid_t pid = fork();
	int st;

	REQUIRE(pid >= 0);
	if (pid == 0) {
		if (lib)
			setenv("KVP_CUDA_LIB", lib, 1);
		else
			unsetenv("KVP_CUDA_LIB");
		fn(name);
		fflush(NULL);
		_exit(tl_failures ? 1 : 0);
	}
	REQUIRE(waitpid(pid, &st, 0) == pid);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "scenario %s failed", name);
}

static void sc_disabled(const char *name)
{
	all_refused();
	CHECK(strstr(cuda_status(), "disabled") != NULL, "%s: %s", name, cuda_status());
}

static void sc_missing(const char *name)
{
	all_refused();
	CHECK(strstr(cuda_status(), "not found") != NULL, "%s: %s", name, cuda_status());
	CHECK(strstr(cuda_status(), "/nonexistent/libcudart.so.99") != NULL, "%s", cuda_status());
}

/* Asking about a host pointer in a process that never touched CUDA loads
 * nothing (no driver initialised behind the application's back). */
static void sc_lazy(const char *name)
{
	int x = 0;
	bool drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD) != NULL;

	CHECK_EQ(cuda_ptr_kind(&x, NULL), CUDA_HOST);
	CHECK(!cuda_is_device(&x));
	if (!drv)
		CHECK(dlopen("libcudart.so", RTLD_LAZY | RTLD_NOLOAD) == NULL,
		      "%s: the runtime was loaded for a host pointer", name);
}

static void sc_default(const char *name)
{
	printf("%s: %s\n", name, cuda_status());
	if (cuda_load() == 0)
		real_gpu();
	else
		all_refused();
}

int main(void)
{
	scenario("disabled", "none", sc_disabled);
	scenario("missing", "/nonexistent/libcudart.so.99", sc_missing);
	scenario("lazy", NULL, sc_lazy);
	scenario("default", NULL, sc_default);
	return tl_done();
}
