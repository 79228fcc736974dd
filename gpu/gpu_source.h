#pragma once
// What the GPU monitor reads: a snapshot of the probes' in-kernel aggregates (gpu_shared.h),
// converted to plain C++ values, behind an interface so the monitor, the detectors and the
// views are tested with a fake source and run on the BPF probes (gpu_probes.h) in production.
//
// Threading: a GpuSource is used by one thread at a time (the monitor's); implementations need
// no locks.

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpu/gpu_shared.h"

namespace infergate::gpu {

inline constexpr int kMemKinds = IG_GPU_MEM_KINDS;
inline constexpr int kDeviceKinds = IG_GPU_MEM_HOST;  // the kinds that are device memory
inline constexpr int kSyncBuckets = IG_GPU_SYNC_BUCKETS;

const char* memKindName(int kind);  // "device", "async", "managed", "vmm", "host"
const char* fnName(int fn);         // "cuMemAlloc_v2", ... (the base symbol of enum ig_gpu_fn)

// One process as the probes saw it (ig_gpu_proc).
struct ProcStats {
  uint32_t tgid = 0;
  uint64_t cgroup_id = 0;
  std::string comm;
  uint64_t first_ns = 0, last_ns = 0;  // CLOCK_MONOTONIC (bpf_ktime_get_ns)
  std::array<int64_t, kMemKinds> live_bytes{};
  std::array<uint64_t, kMemKinds> alloc_count{}, alloc_bytes{}, free_count{}, free_bytes{};
  uint64_t alloc_failures = 0, untracked_allocs = 0, unknown_frees = 0;
  uint64_t launches = 0, graph_launches = 0;
  uint64_t syncs = 0, timed_syncs = 0, sync_ns_sum = 0;
  std::array<uint64_t, kSyncBuckets> sync_hist{};

  int64_t deviceBytes() const;  // live bytes of the device kinds (not host)
};

// One cgroup (ig_gpu_cgroup).
struct CgroupStats {
  uint64_t cgroup_id = 0;
  std::array<int64_t, kMemKinds> live_bytes{};
  uint64_t alloc_count = 0, free_count = 0, alloc_failures = 0;
  uint64_t launches = 0, graph_launches = 0, timed_syncs = 0, sync_ns_sum = 0;

  int64_t deviceBytes() const;
};

// One live allocation (ig_gpu_allocs).
struct LiveAlloc {
  uint32_t tgid = 0;
  int kind = IG_GPU_MEM_DEVICE;
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC at the allocation
  uint64_t cgroup_id = 0;
};

// A rare event from the ring buffer (ig_gpu_event).
struct GpuEvent {
  int type = 0;  // enum ig_gpu_event_type
  int fn = 0;    // enum ig_gpu_fn
  uint32_t tgid = 0, tid = 0;
  uint64_t cgroup_id = 0;
  uint64_t bytes = 0, ptr = 0, ts_ns = 0;
  int32_t result = 0;  // CUresult
  std::string comm;
};

// The program's own counters (ig_gpu_stats summed over CPUs).
struct ProbeStats {
  std::array<uint64_t, IG_GPU_FN_MAX> calls{};
  uint64_t proc_map_full = 0, cgroup_map_full = 0, alloc_map_full = 0, call_map_full = 0;
  uint64_t pending_map_full = 0, ringbuf_full = 0, returns_unmatched = 0;
};

struct GpuSnapshot {
  uint64_t taken_ns = 0;  // CLOCK_MONOTONIC when read
  std::vector<ProcStats> procs;      // sorted by tgid
  std::vector<CgroupStats> cgroups;  // sorted by cgroup id
  ProbeStats stats;
};

// Where the probes are attached and what is missing (for logs, /metrics and `infergate gpu`).
struct AttachReport {
  bool active = false;            // at least one probe attached
  std::string library;            // the libcuda.so.1 path probed ("" when none was found)
  std::string reason;             // why inactive ("" when active)
  std::vector<std::string> attached;  // symbol names attached (entry and/or return)
  std::vector<std::string> missing;   // symbols not found in the library (not fatal)
};

class GpuSource {
 public:
  virtual ~GpuSource() = default;
  // The aggregates now.
  virtual GpuSnapshot snapshot() = 0;
  // Live allocations, oldest first, at most `limit` (the map holds up to IG_GPU_MAX_ALLOCS).
  // `tgid` 0: every process.
  virtual std::vector<LiveAlloc> liveAllocs(uint32_t tgid, size_t limit) = 0;
  // Rare events since the last call, oldest first, at most `limit`.
  virtual std::vector<GpuEvent> drainEvents(size_t limit) = 0;
  // A process that exited: its entries (ig_gpu_procs, ig_gpu_allocs, pending state) go away
  // so the bounded maps do not fill with the dead. Its cgroup's figures stay.
  virtual void forget(uint32_t tgid) = 0;
  virtual const AttachReport& report() const = 0;
};

// Quantile (0..1) of a log2 launch->sync histogram, in nanoseconds: the upper bound of the
// bucket holding it (2^(b+1)-1); 0 when empty.
uint64_t syncQuantileNs(const std::array<uint64_t, kSyncBuckets>& hist, double q);
// The bucket of a time in ns (what the BPF program computes; host copy for tests).
int syncBucketOf(uint64_t ns);

}  // namespace infergate::gpu
