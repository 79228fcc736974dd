// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/* infergate's CUDA driver probes: uprobes on libcuda.so.1 that aggregate, in the kernel, what
 * the processes on this node do with the GPU (gpu_shared.h is the contract, docs/GPU.md the
 * user's view).
 *
 * One entry program (ig_gpu_enter) and one return program (ig_gpu_exit) serve every probed
 * function; the attach cookie says which (enum ig_gpu_fn). The loader (gpu_probes.cc) attaches
 * an entry probe to each function and a return probe where the result is needed:
 *   - allocations: the entry keeps (out-pointer, bytes) per thread in ig_gpu_calls; the return
 *     reads the pointer the driver wrote, records it in ig_gpu_allocs and adds the bytes to the
 *     process and its cgroup; a failure counts and goes to the ring buffer;
 *   - frees: the entry keeps the pointer; a successful return removes the allocation and
 *     subtracts its bytes (from the cgroup it was allocated in);
 *   - launches (entry only): counted; the first launch since the process's last sync leaves its
 *     time in ig_gpu_pending;
 *   - syncs: the return counts and, when a launch is pending, puts launch -> sync time into the
 *     process's log2 histogram.
 * Maps are bounded; whatever does not fit is counted (ig_gpu_stats), never silently lost.
 * Counters in shared map values are atomic adds: several threads of a process run probes at
 * once.
 */
#include <linux/bpf.h>
#include <linux/ptrace.h>
#include <linux/types.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "gpu_shared.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Load-time knob: allocations of at least this many bytes raise IG_GPU_EV_LARGE_ALLOC (0: no
 * such events). */
const volatile __u64 large_alloc_bytes = 0;

/* A new process's entry starts as this (then cgroup_id, first_ns and comm are filled in): the
 * value is too large for the BPF stack. */
const struct ig_gpu_proc ig_gpu_zero_proc = {};

#define IG_E2BIG 7
#define IG_EEXIST 17

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IG_GPU_MAX_PROCS);
	__type(key, __u32);
	__type(value, struct ig_gpu_proc);
} ig_gpu_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IG_GPU_MAX_CGROUPS);
	__type(key, __u64);
	__type(value, struct ig_gpu_cgroup);
} ig_gpu_cgroups SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IG_GPU_MAX_ALLOCS);
	__type(key, struct ig_gpu_alloc_key);
	__type(value, struct ig_gpu_alloc);
} ig_gpu_allocs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IG_GPU_MAX_CALLS);
	__type(key, __u64);
	__type(value, struct ig_gpu_call);
} ig_gpu_calls SEC(".maps");

/* tgid -> bpf_ktime_get_ns() of the first launch since the process's last sync. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, IG_GPU_MAX_PROCS);
	__type(key, __u32);
	__type(value, __u64);
} ig_gpu_pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, IG_GPU_RINGBUF_BYTES);
} ig_gpu_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ig_gpu_stats);
} ig_gpu_stats SEC(".maps");

/* The counters of this CPU (never NULL in practice: a one-entry array). */
static __always_inline struct ig_gpu_stats *ig_stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&ig_gpu_stats, &zero);
}

#define IG_STAT_INC(field)                                    \
	do {                                                  \
		struct ig_gpu_stats *__s = ig_stats();        \
		if (__s)                                      \
			__sync_fetch_and_add(&__s->field, 1); \
	} while (0)

/* floor(log2(v)) for v > 0, without loops. */
static __always_inline __u32 ig_log2(__u64 v)
{
	__u32 r = 0;

	if (v >> 32) {
		v >>= 32;
		r += 32;
	}
	if (v >> 16) {
		v >>= 16;
		r += 16;
	}
	if (v >> 8) {
		v >>= 8;
		r += 8;
	}
	if (v >> 4) {
		v >>= 4;
		r += 4;
	}
	if (v >> 2) {
		v >>= 2;
		r += 2;
	}
	if (v >> 1)
		r += 1;
	return r;
}

/* The histogram bucket of a launch -> sync time (host copy: gpu::syncBucketOf). */
static __always_inline __u64 ig_sync_bucket(__u64 ns)
{
	__u64 b;

	if (ns < 2)
		return 0;
	b = ig_log2(ns);
	return b < IG_GPU_SYNC_BUCKETS ? b : IG_GPU_SYNC_BUCKETS - 1;
}

/* The entry of process `tgid`, created on its first event; NULL when ig_gpu_procs is full
 * (counted: the event is not accounted to the process). */
static __always_inline struct ig_gpu_proc *ig_proc(__u32 tgid, __u64 cgid, __u64 now)
{
	struct ig_gpu_proc *p = bpf_map_lookup_elem(&ig_gpu_procs, &tgid);

	if (!p) {
		if (bpf_map_update_elem(&ig_gpu_procs, &tgid, &ig_gpu_zero_proc, BPF_NOEXIST) == 0) {
			p = bpf_map_lookup_elem(&ig_gpu_procs, &tgid);
			if (p) {
				/* ours: another thread that lost the race finds it a moment later */
				p->cgroup_id = cgid;
				p->first_ns = now;
				bpf_get_current_comm(p->comm, sizeof(p->comm));
			}
		} else {
			p = bpf_map_lookup_elem(&ig_gpu_procs, &tgid);
		}
		if (!p) {
			IG_STAT_INC(proc_map_full);
			return NULL;
		}
	}
	p->last_ns = now;
	return p;
}

/* The entry of cgroup `cgid`, created on its first event; NULL when ig_gpu_cgroups is full. */
static __always_inline struct ig_gpu_cgroup *ig_cgroup(__u64 cgid)
{
	struct ig_gpu_cgroup *c = bpf_map_lookup_elem(&ig_gpu_cgroups, &cgid);

	if (!c) {
		struct ig_gpu_cgroup zero = {};

		bpf_map_update_elem(&ig_gpu_cgroups, &cgid, &zero, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&ig_gpu_cgroups, &cgid);
		if (!c)
			IG_STAT_INC(cgroup_map_full);
	}
	return c;
}

/* Which allocator an allocating function belongs to; IG_GPU_MEM_KINDS for other functions. */
static __always_inline __u64 ig_alloc_kind(__u64 fn)
{
	switch (fn) {
	case IG_GPU_FN_MEM_ALLOC:
		return IG_GPU_MEM_DEVICE;
	case IG_GPU_FN_MEM_ALLOC_ASYNC:
		return IG_GPU_MEM_ASYNC;
	case IG_GPU_FN_MEM_ALLOC_MANAGED:
		return IG_GPU_MEM_MANAGED;
	case IG_GPU_FN_MEM_CREATE:
		return IG_GPU_MEM_VMM;
	case IG_GPU_FN_MEM_HOST_ALLOC:
		return IG_GPU_MEM_HOST;
	}
	return IG_GPU_MEM_KINDS;
}

static __always_inline int ig_is_free(__u64 fn)
{
	return fn == IG_GPU_FN_MEM_FREE || fn == IG_GPU_FN_MEM_FREE_ASYNC ||
	       fn == IG_GPU_FN_MEM_RELEASE || fn == IG_GPU_FN_MEM_FREE_HOST;
}

/* A rare event to the ring buffer (counted when it is full). */
static __always_inline void ig_event(__u32 type, __u32 fn, __u64 pid_tgid, __u64 cgid, __u64 bytes,
				     __u64 ptr, __s32 result, __u64 now)
{
	struct ig_gpu_event *e = bpf_ringbuf_reserve(&ig_gpu_events, sizeof(*e), 0);

	if (!e) {
		IG_STAT_INC(ringbuf_full);
		return;
	}
	e->type = type;
	e->fn = fn;
	e->tgid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->cgroup_id = cgid;
	e->bytes = bytes;
	e->ptr = ptr;
	e->ts_ns = now;
	e->result = result;
	e->pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_ringbuf_submit(e, 0);
}

/* Adds `bytes` (two's complement for a subtraction) to a process's and a cgroup's live bytes of
 * `kind`. */
static __always_inline void ig_live_add(struct ig_gpu_proc *p, struct ig_gpu_cgroup *c, __u64 kind,
					__u64 bytes)
{
	if (kind >= IG_GPU_MEM_KINDS)
		return;
	if (p)
		__sync_fetch_and_add(&p->live_bytes[kind], bytes);
	if (c)
		__sync_fetch_and_add(&c->live_bytes[kind], bytes);
}

/* The return of an allocation: `call` is what its entry kept. */
static __always_inline void ig_alloc_return(__u64 fn, const struct ig_gpu_call *call, __s32 rc,
					    __u64 pid_tgid)
{
	__u64 kind = ig_alloc_kind(fn);
	__u32 tgid = pid_tgid >> 32;
	__u64 cgid = bpf_get_current_cgroup_id();
	__u64 now = bpf_ktime_get_ns();
	struct ig_gpu_proc *p = ig_proc(tgid, cgid, now);
	struct ig_gpu_cgroup *c = ig_cgroup(cgid);
	struct ig_gpu_alloc_key key = {};
	struct ig_gpu_alloc val = {};
	__u64 ptr = 0;
	long err;

	if (kind >= IG_GPU_MEM_KINDS)
		return;
	if (rc != IG_CUDA_SUCCESS) {
		if (p)
			__sync_fetch_and_add(&p->alloc_failures, 1);
		if (c)
			__sync_fetch_and_add(&c->alloc_failures, 1);
		ig_event(IG_GPU_EV_ALLOC_FAILED, fn, pid_tgid, cgid, call->bytes, 0, rc, now);
		return;
	}
	if (p) {
		__sync_fetch_and_add(&p->alloc_count[kind], 1);
		__sync_fetch_and_add(&p->alloc_bytes[kind], call->bytes);
	}
	if (c)
		__sync_fetch_and_add(&c->alloc_count, 1);
	/* the pointer (or handle) the driver wrote through the out-pointer */
	if (!call->arg0 || bpf_probe_read_user(&ptr, sizeof(ptr), (const void *)call->arg0))
		ptr = 0;
	if (large_alloc_bytes && call->bytes >= large_alloc_bytes)
		ig_event(IG_GPU_EV_LARGE_ALLOC, fn, pid_tgid, cgid, call->bytes, ptr, rc, now);
	if (!ptr) {
		/* no pointer to track it by: its bytes stay out of live_bytes */
		if (p)
			__sync_fetch_and_add(&p->untracked_allocs, 1);
		IG_STAT_INC(alloc_map_full);
		return;
	}
	key.ptr = ptr;
	key.tgid = tgid;
	key.kind = kind;
	val.bytes = call->bytes;
	val.ts_ns = now;
	val.cgroup_id = cgid;
	err = bpf_map_update_elem(&ig_gpu_allocs, &key, &val, BPF_NOEXIST);
	if (err == -IG_EEXIST) {
		/* The pointer is live already: its free was not seen (a free whose entry could not
		 * be kept). The driver handed it out again, so the old allocation is gone: take its
		 * bytes out before the new one replaces it. */
		struct ig_gpu_alloc *old = bpf_map_lookup_elem(&ig_gpu_allocs, &key);

		if (old) {
			__u64 old_bytes = old->bytes;
			struct ig_gpu_cgroup *oc = old->cgroup_id == cgid ? c : ig_cgroup(old->cgroup_id);

			ig_live_add(p, oc, kind, -old_bytes);
		}
		err = bpf_map_update_elem(&ig_gpu_allocs, &key, &val, BPF_ANY);
	}
	if (err) {
		if (p)
			__sync_fetch_and_add(&p->untracked_allocs, 1);
		IG_STAT_INC(alloc_map_full);
		return;
	}
	ig_live_add(p, c, kind, call->bytes);
}

/* Removes the allocation (ptr, tgid, kind) into *out: 1 when it was tracked, else 0. */
static __always_inline int ig_take_alloc(__u64 ptr, __u32 tgid, __u32 kind, struct ig_gpu_alloc *out)
{
	struct ig_gpu_alloc_key key = {};
	struct ig_gpu_alloc *a;

	key.ptr = ptr;
	key.tgid = tgid;
	key.kind = kind;
	a = bpf_map_lookup_elem(&ig_gpu_allocs, &key);
	if (!a)
		return 0;
	*out = *a;
	/* another thread freeing the same pointer at once (a bug in the process) loses here */
	return bpf_map_delete_elem(&ig_gpu_allocs, &key) == 0;
}

/* The return of a free: `call` is what its entry kept. */
static __always_inline void ig_free_return(__u64 fn, const struct ig_gpu_call *call, __s32 rc,
					   __u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;
	__u64 cgid = bpf_get_current_cgroup_id();
	__u64 now = bpf_ktime_get_ns();
	struct ig_gpu_alloc a = {};
	struct ig_gpu_proc *p;
	struct ig_gpu_cgroup *c;
	__u64 kind;
	int found = 0;

	if (rc != IG_CUDA_SUCCESS || !call->arg0)
		return; /* nothing was freed (freeing NULL is a no-op) */
	switch (fn) {
	case IG_GPU_FN_MEM_FREE: /* device or managed memory, or pool memory freed synchronously */
		kind = IG_GPU_MEM_DEVICE;
		found = ig_take_alloc(call->arg0, tgid, kind, &a);
		if (!found) {
			kind = IG_GPU_MEM_MANAGED;
			found = ig_take_alloc(call->arg0, tgid, kind, &a);
		}
		if (!found) {
			kind = IG_GPU_MEM_ASYNC;
			found = ig_take_alloc(call->arg0, tgid, kind, &a);
		}
		break;
	case IG_GPU_FN_MEM_FREE_ASYNC: /* pool memory, or cuMemAlloc memory freed stream-ordered */
		kind = IG_GPU_MEM_ASYNC;
		found = ig_take_alloc(call->arg0, tgid, kind, &a);
		if (!found) {
			kind = IG_GPU_MEM_DEVICE;
			found = ig_take_alloc(call->arg0, tgid, kind, &a);
		}
		break;
	case IG_GPU_FN_MEM_RELEASE:
		kind = IG_GPU_MEM_VMM;
		found = ig_take_alloc(call->arg0, tgid, kind, &a);
		break;
	case IG_GPU_FN_MEM_FREE_HOST:
		kind = IG_GPU_MEM_HOST;
		found = ig_take_alloc(call->arg0, tgid, kind, &a);
		break;
	default:
		return;
	}
	p = ig_proc(tgid, cgid, now);
	if (!found) {
		if (p)
			__sync_fetch_and_add(&p->unknown_frees, 1);
		return;
	}
	/* the bytes leave the cgroup they were allocated in */
	c = ig_cgroup(a.cgroup_id);
	ig_live_add(p, c, kind, -a.bytes);
	if (kind >= IG_GPU_MEM_KINDS)
		return;
	if (p) {
		__sync_fetch_and_add(&p->free_count[kind], 1);
		__sync_fetch_and_add(&p->free_bytes[kind], a.bytes);
	}
	if (c)
		__sync_fetch_and_add(&c->free_count, 1);
}

/* A kernel launch or graph launch (entry). */
static __always_inline void ig_launch(__u64 fn, __u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;
	__u64 cgid = bpf_get_current_cgroup_id();
	__u64 now = bpf_ktime_get_ns();
	struct ig_gpu_proc *p = ig_proc(tgid, cgid, now);
	struct ig_gpu_cgroup *c = ig_cgroup(cgid);
	long err;

	if (fn == IG_GPU_FN_GRAPH_LAUNCH) {
		if (p)
			__sync_fetch_and_add(&p->graph_launches, 1);
		if (c)
			__sync_fetch_and_add(&c->graph_launches, 1);
	} else {
		if (p)
			__sync_fetch_and_add(&p->launches, 1);
		if (c)
			__sync_fetch_and_add(&c->launches, 1);
	}
	/* the first launch since the last sync starts the launch -> sync time (a lookup first: the
	 * common case, a launch after launches, then costs no bucket lock) */
	if (bpf_map_lookup_elem(&ig_gpu_pending, &tgid))
		return;
	err = bpf_map_update_elem(&ig_gpu_pending, &tgid, &now, BPF_NOEXIST);
	if (err && err != -IG_EEXIST)
		IG_STAT_INC(pending_map_full);
}

/* The return of a sync. */
static __always_inline void ig_sync_return(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;
	__u64 cgid = bpf_get_current_cgroup_id();
	__u64 now = bpf_ktime_get_ns();
	struct ig_gpu_proc *p = ig_proc(tgid, cgid, now);
	struct ig_gpu_cgroup *c;
	__u64 *pending, delta, b;

	if (p)
		__sync_fetch_and_add(&p->syncs, 1);
	pending = bpf_map_lookup_elem(&ig_gpu_pending, &tgid);
	if (!pending)
		return;
	delta = now > *pending ? now - *pending : 0;
	/* a launch racing in after this delete starts the next interval */
	if (bpf_map_delete_elem(&ig_gpu_pending, &tgid))
		return; /* another thread's sync took it */
	b = ig_sync_bucket(delta);
	if (p && b < IG_GPU_SYNC_BUCKETS) {
		__sync_fetch_and_add(&p->timed_syncs, 1);
		__sync_fetch_and_add(&p->sync_ns_sum, delta);
		__sync_fetch_and_add(&p->sync_hist[b], 1);
	}
	c = ig_cgroup(cgid);
	if (c) {
		__sync_fetch_and_add(&c->timed_syncs, 1);
		__sync_fetch_and_add(&c->sync_ns_sum, delta);
	}
}

SEC("uprobe")
int ig_gpu_enter(struct pt_regs *ctx)
{
	/* 64-bit: the bounds check must hold for the register that indexes calls[] */
	__u64 fn = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct ig_gpu_stats *s = ig_stats();

	if (fn >= IG_GPU_FN_MAX)
		return 0;
	if (s)
		__sync_fetch_and_add(&s->calls[fn], 1);
	if (ig_alloc_kind(fn) < IG_GPU_MEM_KINDS || ig_is_free(fn)) {
		struct ig_gpu_call call = {};

		call.arg0 = PT_REGS_PARM1(ctx);
		call.bytes = ig_is_free(fn) ? 0 : PT_REGS_PARM2(ctx);
		call.ts_ns = bpf_ktime_get_ns();
		call.fn = fn;
		if (bpf_map_update_elem(&ig_gpu_calls, &pid_tgid, &call, BPF_ANY))
			IG_STAT_INC(call_map_full);
		return 0;
	}
	if (fn == IG_GPU_FN_LAUNCH_KERNEL || fn == IG_GPU_FN_LAUNCH_KERNEL_EX ||
	    fn == IG_GPU_FN_GRAPH_LAUNCH)
		ig_launch(fn, pid_tgid);
	/* syncs: everything happens at the return */
	return 0;
}

SEC("uretprobe")
int ig_gpu_exit(struct pt_regs *ctx)
{
	__u64 fn = bpf_get_attach_cookie(ctx);
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__s32 rc = (__s32)PT_REGS_RC(ctx);
	struct ig_gpu_call call, *kept;

	if (fn == IG_GPU_FN_STREAM_SYNC || fn == IG_GPU_FN_CTX_SYNC || fn == IG_GPU_FN_EVENT_SYNC) {
		ig_sync_return(pid_tgid);
		return 0;
	}
	kept = bpf_map_lookup_elem(&ig_gpu_calls, &pid_tgid);
	if (!kept) {
		IG_STAT_INC(returns_unmatched);
		return 0;
	}
	call = *kept;
	bpf_map_delete_elem(&ig_gpu_calls, &pid_tgid);
	if (call.fn != fn) {
		/* the return of another call than the one kept (a probed function calling
		 * another): not counted */
		IG_STAT_INC(returns_unmatched);
		return 0;
	}
	if (ig_alloc_kind(fn) < IG_GPU_MEM_KINDS)
		ig_alloc_return(fn, &call, rc, pid_tgid);
	else
		ig_free_return(fn, &call, rc, pid_tgid);
	return 0;
}
