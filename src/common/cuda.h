/* cuda: the CUDA runtime, loaded at run time with dlopen so one binary runs
 * with or without a GPU. Owns the function pointers into libcudart (tried as
 * $KVP_CUDA_LIB, libcudart.so, then versioned names) and, to recognise
 * device pointers even when libcudart is missing, libcuda.so.1's
 * cuPointerGetAttribute. Loading happens once (pthread_once), from any
 * thread; afterwards everything is read-only. Without the library, a driver
 * or a device every call returns -ENOTSUP and pointers read as host memory.
 */
#ifndef KVP_CUDA_H
#define KVP_CUDA_H

#include <stdbool.h>
#include <stddef.h>

enum cuda_kind {
	CUDA_HOST,		/* plain or pinned host memory: memcpy works */
	CUDA_DEVICE,		/* device memory: only cudaMemcpy (or GPUDirect) */
	CUDA_MANAGED,		/* unified memory: the CPU may touch it */
	CUDA_UNKNOWN,
};

/* Loads the runtime (once). 0 when a device is usable, else -ENOTSUP;
 * cuda_status() says why. $KVP_CUDA_LIB names the library to load
 * ("none" disables CUDA, the driver probe included). */
int cuda_load(void);
bool cuda_available(void);
/* One line: "libcudart.so.12: 2 devices, runtime 12040, driver 12050" or
 * why CUDA is off ("libcudart not found (tried ...)", "no CUDA driver: ..."). */
const char *cuda_status(void);
const char *cuda_kind_name(enum cuda_kind k);

/* What p points to. Host while the process has not loaded the CUDA
 * driver itself (nothing is loaded or initialised then: no device pointer
 * can exist), or when CUDA is absent, unless the driver alone recognises p
 * as device memory. device (may be NULL) gets the owning device, -1 for
 * host memory. */
enum cuda_kind cuda_ptr_kind(const void *p, int *device);
/* True when p needs cudaMemcpy (CUDA_DEVICE). */
bool cuda_is_device(const void *p);
/* False while the process has not loaded the CUDA driver: then no pointer
 * is a device pointer. A batch asks once, then cuda_is_device per buffer
 * only if true (each call looks at the loader's list). */
bool cuda_driver_loaded(void);

/* cudaMemcpy with cudaMemcpyDefault (unified addressing picks the
 * direction). 0, -ENOTSUP, -EINVAL or -EIO (logged with the CUDA message). */
int cuda_memcpy(void *dst, const void *src, size_t n);
/* Page-locks an existing host range (cudaHostRegisterPortable), so copies
 * between it and device memory are DMA. Already registered counts as 0. */
int cuda_host_register(void *p, size_t n);
int cuda_host_unregister(void *p);
int cuda_malloc_host(void **p, size_t n);
int cuda_free_host(void *p);
int cuda_malloc(void **p, size_t n);
int cuda_free(void *p);
int cuda_memset(void *p, int v, size_t n);
int cuda_sync(void);
int cuda_set_device(int dev);
/* Devices visible, 0 when CUDA is off. */
int cuda_device_count(void);

#endif
