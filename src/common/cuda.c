/* cuda: dlopen()ed CUDA runtime (see cuda.h). The few runtime entry points
 * kvpool uses are declared here with the ABI of CUDA 10 and later, so the
 * build needs no CUDA headers. Loaded once under pthread_once; read-only
 * afterwards, so every thread may call.
 */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stddef.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda.h"
#include "log.h"

/* cudaError_t values we tell apart. */
#define CUDA_SUCCESS_ 0
#define CUDA_ERR_INVALID_VALUE 1
#define CUDA_ERR_MEMORY_ALLOCATION 2
#define CUDA_ERR_HOST_ALREADY_REGISTERED 712
#define CUDA_ERR_HOST_NOT_REGISTERED 713

#define CUDA_MEMCPY_DEFAULT 4
#define CUDA_HOST_REGISTER_PORTABLE 1

/* struct cudaPointerAttributes since CUDA 10 (reserved[] since 12). */
struct cuda_ptr_attr {
	int type;		/* 0 unregistered, 1 host, 2 device, 3 managed */
	int device;
	void *device_ptr;
	void *host_ptr;
	long reserved[8];
};

struct cuda_rt {
	void *lib, *drv;
	char libname[64];
	int (*GetDeviceCount)(int *);
	int (*PointerGetAttributes)(struct cuda_ptr_attr *, const void *);
	int (*Memcpy)(void *, const void *, size_t, int);
	int (*Memset)(void *, int, size_t);
	int (*HostRegister)(void *, size_t, unsigned);
	int (*HostUnregister)(void *);
	int (*MallocHost)(void **, size_t);
	int (*FreeHost)(void *);
	int (*Malloc)(void **, size_t);
	int (*Free)(void *);
	int (*DeviceSynchronize)(void);
	int (*SetDevice)(int);
	int (*GetLastError)(void);
	int (*RuntimeGetVersion)(int *);
	int (*DriverGetVersion)(int *);
	const char *(*GetErrorString)(int);
	/* driver API, for recognising device pointers without the runtime */
	int (*cuInit)(unsigned);
	int (*cuPointerGetAttribute)(void *, int, unsigned long long);
	bool drv_ok;
	int ndev;
	bool ok;
	char status[256];
};

static struct cuda_rt rt;
static pthread_once_t rt_once = PTHREAD_ONCE_INIT;

static const char *const rt_names[] = {
	"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
	"libcudart.so.11", "libcudart.so.10.2", "libcudart.so.10.1", "libcudart.so.10.0",
};

#define SYM(field, name)						\
	do {								\
		*(void **)&rt.field = dlsym(rt.lib, name);		\
		if (!rt.field)						\
			missing = name;					\
	} while (0)

/* The driver's pointer query: device pointers made by another copy of the
 * runtime (a framework's bundled libcudart) are still recognised, and
 * refused, when ours cannot load. */
static void load_driver(void)
{
	rt.drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!rt.drv)
		return;
	*(void **)&rt.cuInit = dlsym(rt.drv, "cuInit");
	*(void **)&rt.cuPointerGetAttribute = dlsym(rt.drv, "cuPointerGetAttribute");
	if (rt.cuInit && rt.cuPointerGetAttribute && rt.cuInit(0) == 0)
		rt.drv_ok = true;
}

static void load_once(void)
{
	const char *env = getenv("KVP_CUDA_LIB");
	const char *missing = NULL;
	char tried[160] = "";
	int rc, rv = 0, dv = 0;

	if (env && !strcmp(env, "none")) {
		snprintf(rt.status, sizeof(rt.status), "CUDA disabled (KVP_CUDA_LIB=none)");
		return;
	}
	if (env && *env) {
		rt.lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
		snprintf(rt.libname, sizeof(rt.libname), "%s", env);
		snprintf(tried, sizeof(tried), "%s", env);
	} else {
		for (size_t i = 0; i < sizeof(rt_names) / sizeof(rt_names[0]) && !rt.lib; i++) {
			rt.lib = dlopen(rt_names[i], RTLD_NOW | RTLD_LOCAL);
			snprintf(rt.libname, sizeof(rt.libname), "%s", rt_names[i]);
		}
		snprintf(tried, sizeof(tried), "libcudart.so, .so.13 ... .so.10.0");
	}
	if (!rt.lib) {
		load_driver();
		snprintf(rt.status, sizeof(rt.status), "libcudart not found (tried %s)%s", tried,
			 rt.drv_ok ? "; the CUDA driver is present: device pointers are refused"
				   : "");
		return;
	}
	SYM(GetDeviceCount, "cudaGetDeviceCount");
	SYM(PointerGetAttributes, "cudaPointerGetAttributes");
	SYM(Memcpy, "cudaMemcpy");
	SYM(Memset, "cudaMemset");
	SYM(HostRegister, "cudaHostRegister");
	SYM(HostUnregister, "cudaHostUnregister");
	SYM(MallocHost, "cudaMallocHost");
	SYM(FreeHost, "cudaFreeHost");
	SYM(Malloc, "cudaMalloc");
	SYM(Free, "cudaFree");
	SYM(DeviceSynchronize, "cudaDeviceSynchronize");
	SYM(SetDevice, "cudaSetDevice");
	SYM(GetLastError, "cudaGetLastError");
	SYM(RuntimeGetVersion, "cudaRuntimeGetVersion");
	SYM(DriverGetVersion, "cudaDriverGetVersion");
	SYM(GetErrorString, "cudaGetErrorString");
	if (missing) {
		snprintf(rt.status, sizeof(rt.status), "%s lacks %s", rt.libname, missing);
		goto out_close;
	}
	rt.RuntimeGetVersion(&rv);
	rt.DriverGetVersion(&dv);
	rc = rt.GetDeviceCount(&rt.ndev);
	if (rc != CUDA_SUCCESS_) {
		snprintf(rt.status, sizeof(rt.status), "%s loaded (runtime %d) but no CUDA driver "
			 "or device: %s", rt.libname, rv, rt.GetErrorString(rc));
		rt.GetLastError();
		rt.ndev = 0;
		goto out_close;
	}
	if (rt.ndev < 1) {
		snprintf(rt.status, sizeof(rt.status), "%s loaded but no CUDA device", rt.libname);
		goto out_close;
	}
	snprintf(rt.status, sizeof(rt.status), "%s: %d device%s, runtime %d, driver %d",
		 rt.libname, rt.ndev, rt.ndev == 1 ? "" : "s", rv, dv);
	rt.ok = true;
	return;

out_close:
	/* The library stays mapped (its exit handlers may already be
	 * registered) but unused: rt.ok is false, so every call says
	 * -ENOTSUP. */
	rt.ndev = 0;
}

int cuda_load(void)
{
	pthread_once(&rt_once, load_once);
	return rt.ok ? 0 : -ENOTSUP;
}

bool cuda_available(void)
{
	return cuda_load() == 0;
}

const char *cuda_status(void)
{
	cuda_load();
	return rt.status;
}

const char *cuda_kind_name(enum cuda_kind k)
{
	switch (k) {
	case CUDA_HOST: return "host";
	case CUDA_DEVICE: return "device";
	case CUDA_MANAGED: return "managed";
	default: return "unknown";
	}
}

static int adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
		*(unsigned long long *)arg = info->dlpi_adds;
	return 1;	/* the counter is the same in every entry: stop */
}

static int find_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
	const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;

	(void)size;
	base = base ? base + 1 : info->dlpi_name;
	if (base && !strncmp(base, "libcuda.so", 10)) {
		*(bool *)arg = true;
		return 1;
	}
	return 0;
}

/* True once the process itself uses CUDA (the driver library is mapped).
 * Until then no device pointer can exist, and loading the runtime here
 * would initialise the driver behind the application's back (a CUDA
 * process that forks later could no longer use CUDA in the children).
 * Cheap on the hot path: the list of loaded objects is scanned again only
 * when the loader's count of loads changed since the last look. */
static bool driver_in_process(void)
{
	static atomic_bool seen;
	static atomic_ullong looked_at = ULLONG_MAX;
	unsigned long long adds = 0;
	bool found = false;

	if (atomic_load_explicit(&seen, memory_order_relaxed))
		return true;
	dl_iterate_phdr(adds_cb, &adds);
	if (adds && adds == atomic_load_explicit(&looked_at, memory_order_relaxed))
		return false;
	dl_iterate_phdr(find_cb, &found);
	atomic_store_explicit(&looked_at, adds, memory_order_relaxed);
	if (found)
		atomic_store(&seen, true);
	return found;
}

enum cuda_kind cuda_ptr_kind(const void *p, int *device)
{
	if (device)
		*device = -1;
	if (!p)
		return CUDA_UNKNOWN;
	if (!driver_in_process())
		return CUDA_HOST;
	cuda_load();
	if (rt.ok) {
		struct cuda_ptr_attr a;

		memset(&a, 0, sizeof(a));
		if (rt.PointerGetAttributes(&a, p) != CUDA_SUCCESS_) {
			/* Before CUDA 11 plain host memory was an error. */
			rt.GetLastError();
			return CUDA_HOST;
		}
		switch (a.type) {
		case 2:
			if (device)
				*device = a.device;
			return CUDA_DEVICE;
		case 3:
			if (device)
				*device = a.device;
			return CUDA_MANAGED;
		default:
			return CUDA_HOST;
		}
	}
	if (rt.drv_ok) {
		unsigned int t = 0;

		/* CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2; CU_MEMORYTYPE_DEVICE = 2. */
		if (rt.cuPointerGetAttribute(&t, 2, (unsigned long long)(uintptr_t)p) == 0 &&
		    t == 2)
			return CUDA_DEVICE;
	}
	return CUDA_HOST;
}

bool cuda_driver_loaded(void)
{
	return driver_in_process();
}

bool cuda_is_device(const void *p)
{
	return cuda_ptr_kind(p, NULL) == CUDA_DEVICE;
}

static int cerr(int rc, const char *what)
{
	if (rc == CUDA_SUCCESS_)
		return 0;
	log_err("cuda: %s: %s", what, rt.GetErrorString(rc));
	rt.GetLastError();
	if (rc == CUDA_ERR_MEMORY_ALLOCATION)
		return -ENOMEM;
	if (rc == CUDA_ERR_INVALID_VALUE)
		return -EINVAL;
	return -EIO;
}

int cuda_memcpy(void *dst, const void *src, size_t n)
{
	if (cuda_load() < 0)
		return -ENOTSUP;
	if (!n)
		return 0;
	if (!dst || !src)
		return -EINVAL;
	return cerr(rt.Memcpy(dst, src, n, CUDA_MEMCPY_DEFAULT), "cudaMemcpy");
}

int cuda_host_register(void *p, size_t n)
{
	int rc;

	if (cuda_load() < 0)
		return -ENOTSUP;
	rc = rt.HostRegister(p, n, CUDA_HOST_REGISTER_PORTABLE);
	if (rc == CUDA_ERR_HOST_ALREADY_REGISTERED) {
		rt.GetLastError();
		return 0;
	}
	return cerr(rc, "cudaHostRegister");
}

int cuda_host_unregister(void *p)
{
	int rc;

	if (cuda_load() < 0)
		return -ENOTSUP;
	rc = rt.HostUnregister(p);
	if (rc == CUDA_ERR_HOST_NOT_REGISTERED) {
		rt.GetLastError();
		return -ENOENT;
	}
	return cerr(rc, "cudaHostUnregister");
}

int cuda_malloc_host(void **p, size_t n)
{
	if (cuda_load() < 0)
		return -ENOTSUP;
	return cerr(rt.MallocHost(p, n), "cudaMallocHost");
}

int cuda_free_host(void *p)
{
	if (cuda_load() < 0)
		return -ENOTSUP;
	return cerr(rt.FreeHost(p), "cudaFreeHost");
}

int cuda_malloc(void **p, size_t n)
{
	if (cuda_load() < 0)
		return -ENOTSUP;
	return cerr(rt.Malloc(p, n), "cudaMalloc");
}

int cuda_free(void *p)
{
	if (cuda_load() < 0)
		return -ENOTSUP;
	return cerr(rt.Free(p), "cudaFree");
}

int cuda_memset(void *p, int v, size_t n)
{
	if (cuda_load() < 0)
		return -ENOTSUP;
	return cerr(rt.Memset(p, v, n), "cudaMemset");
}

int cuda_sync(void)
{
	if (cuda_load() < 0)
		return -ENOTSUP;
	return cerr(rt.DeviceSynchronize(), "cudaDeviceSynchronize");
}

int cuda_set_device(int dev)
{
	if (cuda_load() < 0)
		return -ENOTSUP;
	return cerr(rt.SetDevice(dev), "cudaSetDevice");
}

int cuda_device_count(void)
{
	return cuda_load() == 0 ? rt.ndev : 0;
}
