/* SPDX-License-Identifier: Apache-2.0 */
/* The contract between the CUDA driver probes (gpu_probes.bpf.c: uprobes on libcuda.so.1) and
 * their userspace reader (gpu_probes.cc, tests). Every struct that crosses the BPF boundary is
 * defined here once: fixed-width fields, explicit padding; the C++ side checks sizes at the
 * bottom. docs/GPU.md describes what each figure means.
 *
 * One entry program and one return program serve every probed function; the attach cookie is
 * the function (enum ig_gpu_fn). Aggregation is in the kernel: per process (tgid) and per
 * cgroup id, in bounded hash maps; a ring buffer carries only rare events.
 */
#ifndef INFERGATE_GPU_GPU_SHARED_H
#define INFERGATE_GPU_GPU_SHARED_H

#include <linux/types.h>

/* The probed driver functions: the attach cookie. `_ptsz` variants (per-thread default stream)
 * share the cookie of their base function. */
enum ig_gpu_fn {
	IG_GPU_FN_MEM_ALLOC = 0,      /* cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes) */
	IG_GPU_FN_MEM_FREE,           /* cuMemFree_v2(CUdeviceptr dptr) */
	IG_GPU_FN_MEM_ALLOC_ASYNC,    /* cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream) */
	IG_GPU_FN_MEM_FREE_ASYNC,     /* cuMemFreeAsync(CUdeviceptr dptr, CUstream) */
	IG_GPU_FN_MEM_ALLOC_MANAGED,  /* cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned) */
	IG_GPU_FN_MEM_CREATE,         /* cuMemCreate(CUmemGenericAllocationHandle *h, size_t bytes, ...) */
	IG_GPU_FN_MEM_RELEASE,        /* cuMemRelease(CUmemGenericAllocationHandle h) */
	IG_GPU_FN_MEM_HOST_ALLOC,     /* cuMemHostAlloc(void **pp, size_t bytes, unsigned) */
	IG_GPU_FN_MEM_FREE_HOST,      /* cuMemFreeHost(void *p) */
	IG_GPU_FN_LAUNCH_KERNEL,      /* cuLaunchKernel(...) */
	IG_GPU_FN_LAUNCH_KERNEL_EX,   /* cuLaunchKernelEx(...) */
	IG_GPU_FN_GRAPH_LAUNCH,       /* cuGraphLaunch(CUgraphExec, CUstream) */
	IG_GPU_FN_STREAM_SYNC,        /* cuStreamSynchronize(CUstream) */
	IG_GPU_FN_CTX_SYNC,           /* cuCtxSynchronize(void) */
	IG_GPU_FN_EVENT_SYNC,         /* cuEventSynchronize(CUevent) */
	IG_GPU_FN_MAX,
};

/* Memory kinds: which allocator a byte came from. Live device bytes are the sum of the first
 * four; pinned host memory is counted apart. */
enum ig_gpu_mem_kind {
	IG_GPU_MEM_DEVICE = 0,   /* cuMemAlloc_v2 / cuMemFree_v2 */
	IG_GPU_MEM_ASYNC,        /* cuMemAllocAsync / cuMemFreeAsync (stream-ordered pools) */
	IG_GPU_MEM_MANAGED,      /* cuMemAllocManaged / cuMemFree_v2 */
	IG_GPU_MEM_VMM,          /* cuMemCreate / cuMemRelease (physical handles) */
	IG_GPU_MEM_HOST,         /* cuMemHostAlloc / cuMemFreeHost (pinned host memory) */
	IG_GPU_MEM_KINDS,
};

/* Launch -> sync time: log2 buckets of nanoseconds; bucket b counts times in [2^b, 2^(b+1))
 * (bucket 0 also holds 0 and 1 ns); the last bucket holds everything longer. */
#define IG_GPU_SYNC_BUCKETS 40

#define IG_GPU_COMM_LEN 16

/* ig_gpu_procs value, key: __u32 tgid. Fields are added to with atomic adds (several threads
 * of a process run probes at once); live_bytes wraps (read as signed). */
struct ig_gpu_proc {
	__u64 cgroup_id;          /* bpf_get_current_cgroup_id() at the first event */
	__u64 first_ns;           /* bpf_ktime_get_ns() of the first event */
	__u64 last_ns;            /* of the latest event (racy, monotone enough) */
	char comm[IG_GPU_COMM_LEN]; /* the process's comm at the first event */
	__u64 live_bytes[IG_GPU_MEM_KINDS];   /* allocated - freed (tracked frees only) */
	__u64 alloc_count[IG_GPU_MEM_KINDS];  /* successful allocations */
	__u64 alloc_bytes[IG_GPU_MEM_KINDS];
	__u64 free_count[IG_GPU_MEM_KINDS];   /* successful frees of tracked pointers */
	__u64 free_bytes[IG_GPU_MEM_KINDS];
	__u64 alloc_failures;     /* allocations that returned an error (each also a ring event) */
	__u64 untracked_allocs;   /* successful allocations not tracked: ig_gpu_allocs full */
	__u64 unknown_frees;      /* successful frees of a pointer not in ig_gpu_allocs */
	__u64 launches;           /* cuLaunchKernel + cuLaunchKernelEx calls */
	__u64 graph_launches;     /* cuGraphLaunch calls (a graph replays many kernels) */
	__u64 syncs;              /* sync calls that returned (stream, context, event) */
	__u64 timed_syncs;        /* of them, those with launches pending: in sync_hist */
	__u64 sync_ns_sum;        /* sum of the launch -> sync times in sync_hist */
	__u64 sync_hist[IG_GPU_SYNC_BUCKETS];
};

/* ig_gpu_cgroups value, key: __u64 cgroup id. The per-process figures summed per cgroup (a
 * process's events count under the cgroup it was in at each event). */
struct ig_gpu_cgroup {
	__u64 live_bytes[IG_GPU_MEM_KINDS];
	__u64 alloc_count;        /* all kinds */
	__u64 free_count;
	__u64 alloc_failures;
	__u64 launches;
	__u64 graph_launches;
	__u64 timed_syncs;
	__u64 sync_ns_sum;
};

/* ig_gpu_allocs: one entry per live allocation. The key's tgid keeps processes apart (device
 * pointers of different processes may be equal). */
struct ig_gpu_alloc_key {
	__u64 ptr;                /* device pointer, VMM handle or host pointer */
	__u32 tgid;
	__u32 kind;               /* enum ig_gpu_mem_kind */
};

struct ig_gpu_alloc {
	__u64 bytes;
	__u64 ts_ns;              /* bpf_ktime_get_ns() at the allocation's return */
	__u64 cgroup_id;
};

/* Arguments kept from entry to return, key: __u64 pid_tgid (one call in flight per thread). */
struct ig_gpu_call {
	__u64 arg0;               /* the out-pointer (allocs) or the pointer/handle (frees) */
	__u64 bytes;              /* allocs */
	__u64 ts_ns;              /* entry time */
	__u32 fn;                 /* enum ig_gpu_fn */
	__u32 pad;
};

/* Ring buffer records: rare events only. */
enum ig_gpu_event_type {
	IG_GPU_EV_ALLOC_FAILED = 1,   /* an allocation returned an error: `result` */
	IG_GPU_EV_LARGE_ALLOC = 2,    /* an allocation of at least large_alloc_bytes succeeded */
};

struct ig_gpu_event {
	__u32 type;               /* enum ig_gpu_event_type */
	__u32 fn;                 /* enum ig_gpu_fn */
	__u32 tgid;
	__u32 tid;
	__u64 cgroup_id;
	__u64 bytes;
	__u64 ptr;                /* the allocation (0 on failure) */
	__u64 ts_ns;
	__s32 result;             /* CUresult */
	__u32 pad;
	char comm[IG_GPU_COMM_LEN];
};

/* ig_gpu_stats (per-CPU array, one entry): the program's own troubles. */
struct ig_gpu_stats {
	__u64 calls[IG_GPU_FN_MAX];  /* probe hits per function (entry probes) */
	__u64 proc_map_full;      /* events of a process that found ig_gpu_procs full (dropped) */
	__u64 cgroup_map_full;    /* the same for ig_gpu_cgroups */
	__u64 alloc_map_full;     /* allocations not tracked (= sum of untracked_allocs) */
	__u64 call_map_full;      /* entries not kept for their return (the call is not counted) */
	__u64 pending_map_full;   /* launches whose sync could not be timed */
	__u64 ringbuf_full;       /* rare events lost */
	__u64 returns_unmatched;  /* return probes with no kept entry (attached mid-call) */
};

/* Map bounds (max_entries). */
#define IG_GPU_MAX_PROCS 4096
#define IG_GPU_MAX_CGROUPS 1024
#define IG_GPU_MAX_ALLOCS 262144
#define IG_GPU_MAX_CALLS 16384
#define IG_GPU_RINGBUF_BYTES (256 * 1024)

/* CUresult values the program looks at. */
#define IG_CUDA_SUCCESS 0

#if defined(__cplusplus) && !defined(__bpf__)
#include <cstddef>
static_assert(sizeof(struct ig_gpu_proc) == 3 * 8 + IG_GPU_COMM_LEN + 5 * 8 * IG_GPU_MEM_KINDS +
                                                8 * 8 + 8 * IG_GPU_SYNC_BUCKETS,
              "ig_gpu_proc layout");
static_assert(sizeof(struct ig_gpu_cgroup) == 8 * IG_GPU_MEM_KINDS + 7 * 8, "ig_gpu_cgroup layout");
static_assert(sizeof(struct ig_gpu_alloc_key) == 16, "ig_gpu_alloc_key layout");
static_assert(sizeof(struct ig_gpu_alloc) == 24, "ig_gpu_alloc layout");
static_assert(sizeof(struct ig_gpu_call) == 32, "ig_gpu_call layout");
static_assert(sizeof(struct ig_gpu_event) == 56 + IG_GPU_COMM_LEN, "ig_gpu_event layout");
static_assert(offsetof(struct ig_gpu_event, result) == 48, "ig_gpu_event layout");
static_assert(sizeof(struct ig_gpu_stats) == 8 * IG_GPU_FN_MAX + 7 * 8, "ig_gpu_stats layout");
#endif

#endif /* INFERGATE_GPU_GPU_SHARED_H */
