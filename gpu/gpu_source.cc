#include "gpu/gpu_source.h"

namespace infergate::gpu {

const char* memKindName(int kind) {
  static_assert(IG_GPU_MEM_KINDS == 5, "memKindName table out of date");
  static const char* const kNames[] = {"device", "async", "managed", "vmm", "host"};
  return kind >= 0 && kind < IG_GPU_MEM_KINDS ? kNames[kind] : "unknown";
}

const char* fnName(int fn) {
  static_assert(IG_GPU_FN_MAX == 15, "fnName table out of date");
  static const char* const kNames[] = {
      "cuMemAlloc_v2",  "cuMemFree_v2",      "cuMemAllocAsync", "cuMemFreeAsync",
      "cuMemAllocManaged", "cuMemCreate",    "cuMemRelease",    "cuMemHostAlloc",
      "cuMemFreeHost",  "cuLaunchKernel",    "cuLaunchKernelEx", "cuGraphLaunch",
      "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize"};
  return fn >= 0 && fn < IG_GPU_FN_MAX ? kNames[fn] : "unknown";
}

int64_t ProcStats::deviceBytes() const {
  int64_t sum = 0;
  for (int k = 0; k < kDeviceKinds; ++k) sum += live_bytes[k];
  return sum;
}

int64_t CgroupStats::deviceBytes() const {
  int64_t sum = 0;
  for (int k = 0; k < kDeviceKinds; ++k) sum += live_bytes[k];
  return sum;
}

int syncBucketOf(uint64_t ns) {
  if (ns < 2) return 0;
  const int b = 63 - __builtin_clzll(ns);
  return b < kSyncBuckets ? b : kSyncBuckets - 1;
}

uint64_t syncQuantileNs(const std::array<uint64_t, kSyncBuckets>& hist, double q) {
  uint64_t total = 0;
  for (uint64_t c : hist) total += c;
  if (total == 0) return 0;
  if (q < 0) q = 0;
  if (q > 1) q = 1;
  // The rank of the quantile, 1-based: ceil(q * total), at least 1.
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total));
  if (static_cast<double>(rank) < q * static_cast<double>(total)) ++rank;
  if (rank == 0) rank = 1;
  uint64_t seen = 0;
  for (int b = 0; b < kSyncBuckets; ++b) {
    seen += hist[b];
    if (seen >= rank) return (uint64_t{2} << b) - 1;
  }
  return (uint64_t{2} << (kSyncBuckets - 1)) - 1;
}

}  // namespace infergate::gpu
