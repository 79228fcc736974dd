/* SPDX-License-Identifier: Apache-2.0 */
/* A stub CUDA driver library (libcuda.so.1) for the GPU probe tests: the real driver's C ABI and
 * symbol names, no GPU. Allocations hand out fake, unique, 256-aligned device pointers; VMM
 * handles come from a counter; pinned host memory is real malloc'd memory. Sync calls sleep a
 * settable delay, so a test can make launch -> sync time grow. A few ig* control functions let
 * the driver program (cuda_driver.c) script the stub.
 *
 * Every exported function is noinline and has a body of its own (it bumps its own counter):
 * the probes attach to these functions by symbol, and two functions folded into one address
 * (gcc's identical code folding) would make a uprobe on one fire for the other. The build adds
 * -fno-ipa-icf -fno-inline as well.
 *
 * Built twice: the full stub, and with IG_STUB_MINIMAL a driver without cuLaunchKernelEx(_ptsz),
 * cuMemCreate and cuMemRelease (an older driver: the probes must report those as missing).
 *
 * Threading: counters and the pointer/handle counters are atomics; the delay is an atomic; the
 * fail-next flag is an atomic exchanged by the next allocation (any thread).
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUgraphExec_st *CUgraphExec;
typedef struct CUfunc_st *CUfunction;
typedef struct CUlaunchConfig_st CUlaunchConfig;      /* only passed by pointer */
typedef struct CUmemAllocationProp_st CUmemAllocationProp; /* only passed by pointer */

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_OUT_OF_MEMORY 2

#define IG_EXPORT __attribute__((noinline, used, visibility("default")))

/* Call counters, one per exported CUDA function (igStubCalls(which)). The order is the stub's
 * own, documented in cuda_driver.c's `calls` command; IG_STUB_FN_MAX bounds it. */
enum ig_stub_fn {
	IG_STUB_CU_INIT = 0,
	IG_STUB_CU_DRIVER_GET_VERSION,
	IG_STUB_CU_DEVICE_GET_COUNT,
	IG_STUB_CU_DEVICE_GET,
	IG_STUB_CU_CTX_CREATE,
	IG_STUB_CU_CTX_DESTROY,
	IG_STUB_CU_MEM_ALLOC,
	IG_STUB_CU_MEM_FREE,
	IG_STUB_CU_MEM_ALLOC_ASYNC,
	IG_STUB_CU_MEM_ALLOC_ASYNC_PTSZ,
	IG_STUB_CU_MEM_FREE_ASYNC,
	IG_STUB_CU_MEM_FREE_ASYNC_PTSZ,
	IG_STUB_CU_MEM_ALLOC_MANAGED,
	IG_STUB_CU_MEM_CREATE,
	IG_STUB_CU_MEM_RELEASE,
	IG_STUB_CU_MEM_HOST_ALLOC,
	IG_STUB_CU_MEM_FREE_HOST,
	IG_STUB_CU_LAUNCH_KERNEL,
	IG_STUB_CU_LAUNCH_KERNEL_PTSZ,
	IG_STUB_CU_LAUNCH_KERNEL_EX,
	IG_STUB_CU_LAUNCH_KERNEL_EX_PTSZ,
	IG_STUB_CU_GRAPH_LAUNCH,
	IG_STUB_CU_GRAPH_LAUNCH_PTSZ,
	IG_STUB_CU_STREAM_SYNC,
	IG_STUB_CU_STREAM_SYNC_PTSZ,
	IG_STUB_CU_CTX_SYNC,
	IG_STUB_CU_EVENT_SYNC,
	IG_STUB_FN_MAX,
};

static atomic_ullong calls[IG_STUB_FN_MAX];
static atomic_ullong next_ptr = 0x700000000000ULL;
#ifndef IG_STUB_MINIMAL
static atomic_ullong next_handle = 1;
#endif
static atomic_ullong sync_delay_ns;
static atomic_int fail_next;

static void bump(enum ig_stub_fn fn)
{
	atomic_fetch_add_explicit(&calls[fn], 1, memory_order_relaxed);
}

/* The allocation every allocator shares: 0 and the next fake pointer, or the injected failure. */
static CUresult fake_alloc(CUdeviceptr *dptr, size_t bytes)
{
	if (atomic_exchange(&fail_next, 0))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	size_t rounded = (bytes + 255) & ~(size_t)255;
	if (rounded == 0)
		rounded = 256;
	*dptr = atomic_fetch_add(&next_ptr, rounded);
	return CUDA_SUCCESS;
}

static void sync_sleep(void)
{
	unsigned long long ns = atomic_load(&sync_delay_ns);
	if (!ns)
		return;
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000ULL),
			       .tv_nsec = (long)(ns % 1000000000ULL) };
	while (nanosleep(&ts, &ts) != 0)
		; /* EINTR: sleep the rest */
}

/* ---- control functions (not part of the CUDA ABI) ---- */

IG_EXPORT void igStubSetSyncDelayNs(unsigned long long ns)
{
	atomic_store(&sync_delay_ns, ns);
}

IG_EXPORT void igStubFailNextAlloc(void)
{
	atomic_store(&fail_next, 1);
}

/* Calls of function `which` (enum ig_stub_fn) so far; -1 when out of range. */
IG_EXPORT long long igStubCalls(int which)
{
	if (which < 0 || which >= IG_STUB_FN_MAX)
		return -1;
	return (long long)atomic_load(&calls[which]);
}

/* ---- initialisation and context ---- */

IG_EXPORT CUresult cuInit(unsigned int flags)
{
	bump(IG_STUB_CU_INIT);
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuDriverGetVersion(int *version)
{
	bump(IG_STUB_CU_DRIVER_GET_VERSION);
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 12040;
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuDeviceGetCount(int *count)
{
	bump(IG_STUB_CU_DEVICE_GET_COUNT);
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = 1;
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	bump(IG_STUB_CU_DEVICE_GET);
	if (!device || ordinal != 0)
		return CUDA_ERROR_INVALID_VALUE;
	*device = 0;
	return CUDA_SUCCESS;
}

static char fake_context;

IG_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	bump(IG_STUB_CU_CTX_CREATE);
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = (CUcontext)(void *)&fake_context;
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	bump(IG_STUB_CU_CTX_DESTROY);
	return CUDA_SUCCESS;
}

/* ---- memory ---- */

IG_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
	bump(IG_STUB_CU_MEM_ALLOC);
	return fake_alloc(dptr, bytes);
}

IG_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	bump(IG_STUB_CU_MEM_FREE);
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
	bump(IG_STUB_CU_MEM_ALLOC_ASYNC);
	return fake_alloc(dptr, bytes);
}

IG_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
	bump(IG_STUB_CU_MEM_ALLOC_ASYNC_PTSZ);
	return fake_alloc(dptr, bytes);
}

IG_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream stream)
{
	bump(IG_STUB_CU_MEM_FREE_ASYNC);
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream stream)
{
	bump(IG_STUB_CU_MEM_FREE_ASYNC_PTSZ);
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
	bump(IG_STUB_CU_MEM_ALLOC_MANAGED);
	return fake_alloc(dptr, bytes);
}

#ifndef IG_STUB_MINIMAL
IG_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
			       const CUmemAllocationProp *prop, unsigned long long flags)
{
	bump(IG_STUB_CU_MEM_CREATE);
	if (atomic_exchange(&fail_next, 0))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	*handle = atomic_fetch_add(&next_handle, 1);
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	bump(IG_STUB_CU_MEM_RELEASE);
	return CUDA_SUCCESS;
}
#endif

IG_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
	bump(IG_STUB_CU_MEM_HOST_ALLOC);
	if (atomic_exchange(&fail_next, 0))
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!pp)
		return CUDA_ERROR_INVALID_VALUE;
	void *p = malloc(bytes ? bytes : 1);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*pp = p;
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuMemFreeHost(void *p)
{
	bump(IG_STUB_CU_MEM_FREE_HOST);
	free(p);
	return CUDA_SUCCESS;
}

/* ---- launches ---- */

IG_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
				  unsigned int gridDimZ, unsigned int blockDimX,
				  unsigned int blockDimY, unsigned int blockDimZ,
				  unsigned int sharedMemBytes, CUstream hStream,
				  void **kernelParams, void **extra)
{
	bump(IG_STUB_CU_LAUNCH_KERNEL);
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX,
				       unsigned int gridDimY, unsigned int gridDimZ,
				       unsigned int blockDimX, unsigned int blockDimY,
				       unsigned int blockDimZ, unsigned int sharedMemBytes,
				       CUstream hStream, void **kernelParams, void **extra)
{
	bump(IG_STUB_CU_LAUNCH_KERNEL_PTSZ);
	return CUDA_SUCCESS;
}

#ifndef IG_STUB_MINIMAL
IG_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f,
				    void **kernelParams, void **extra)
{
	bump(IG_STUB_CU_LAUNCH_KERNEL_EX);
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
					 void **kernelParams, void **extra)
{
	bump(IG_STUB_CU_LAUNCH_KERNEL_EX_PTSZ);
	return CUDA_SUCCESS;
}
#endif

IG_EXPORT CUresult cuGraphLaunch(CUgraphExec graph, CUstream stream)
{
	bump(IG_STUB_CU_GRAPH_LAUNCH);
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuGraphLaunch_ptsz(CUgraphExec graph, CUstream stream)
{
	bump(IG_STUB_CU_GRAPH_LAUNCH_PTSZ);
	return CUDA_SUCCESS;
}

/* ---- synchronisation ---- */

IG_EXPORT CUresult cuStreamSynchronize(CUstream stream)
{
	bump(IG_STUB_CU_STREAM_SYNC);
	sync_sleep();
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream stream)
{
	bump(IG_STUB_CU_STREAM_SYNC_PTSZ);
	sync_sleep();
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuCtxSynchronize(void)
{
	bump(IG_STUB_CU_CTX_SYNC);
	sync_sleep();
	return CUDA_SUCCESS;
}

IG_EXPORT CUresult cuEventSynchronize(CUevent event)
{
	bump(IG_STUB_CU_EVENT_SYNC);
	sync_sleep();
	return CUDA_SUCCESS;
}
