#pragma once
// The BPF GpuSource: uprobes on the CUDA driver library (gpu_probes.bpf.c) and the reader of
// their in-kernel aggregates (gpu_shared.h). docs/GPU.md describes the figures.
//
// Ownership: GpuProbes owns the loaded program, its maps, every uprobe link and the ring buffer
// reader; destroying it detaches everything (the maps go with the last reference).
// Threading: as GpuSource, one thread at a time (the monitor's). Every method is a handful of
// bpf() system calls per map entry; none is meant for a hot path. skeleton() is for tests.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gpu/elf_symbols.h"
#include "gpu/gpu_source.h"

struct ig_gpu_probes;  // the bpftool skeleton
struct bpf_link;
struct ring_buffer;

namespace infergate::gpu {

struct GpuProbeOptions {
  std::string library;                      // path of libcuda.so.1 to probe (required)
  uint64_t large_alloc_bytes = 1ull << 30;  // ring event for allocations >= this (0: none)
  int pid = -1;                             // -1: every process mapping the library
  // (another value: with uprobe_multi links that process; with a link per probe perf's
  // per-task events, so only that thread of it. For tests.)
  // Two uprobe_multi links when the kernel has them (Linux 6.6+), else one link per probe;
  // false forces the latter (tests of the fallback).
  bool multi_link = true;
};

class GpuProbes final : public GpuSource {
 public:
  // Loads the program and attaches an entry probe to each probed driver function (and a return
  // probe where the result is needed: allocations, frees, syncs) by symbol name, the function
  // (enum ig_gpu_fn) as the attach cookie. Symbols are looked up in the library's .dynsym
  // first: missing ones go to report().missing and are not fatal; the `_ptsz` variants
  // (per-thread default stream) are attached too when present, with their base's cookie.
  // Errors, each one sentence naming the fix: the library is absent or unreadable (NotFound),
  // not an ELF64 shared object (InvalidArgument), loading or attaching is refused
  // (PermissionDenied: needs CAP_BPF + CAP_PERFMON, or root), no symbol could be attached
  // (FailedPrecondition).
  static absl::StatusOr<std::unique_ptr<GpuProbes>> attach(const GpuProbeOptions& options);

  // Detaches everything. With uprobe_multi links (Linux 6.6+) the kernel waits one grace
  // period per link (two links); on older kernels one per uprobe (~0.1 s each: seconds).
  ~GpuProbes() override;
  GpuProbes(const GpuProbes&) = delete;
  GpuProbes& operator=(const GpuProbes&) = delete;

  GpuSnapshot snapshot() override;
  std::vector<LiveAlloc> liveAllocs(uint32_t tgid, size_t limit) override;
  // Consumes the ring buffer into a bounded queue (kEventQueue; older events beyond it are
  // dropped and counted in eventsDropped()), then hands out at most `limit`, oldest first.
  std::vector<GpuEvent> drainEvents(size_t limit) override;
  // Deletes the process's entry, its live allocations, its pending launch and its threads'
  // kept calls. Its cgroup's figures (live bytes included) stay as they are.
  void forget(uint32_t tgid) override;
  const AttachReport& report() const override { return report_; }

  static constexpr size_t kEventQueue = 4096;
  uint64_t eventsDropped() const { return events_dropped_; }

  ig_gpu_probes* skeleton() { return skel_; }  // tests: direct map access

 private:
  explicit GpuProbes(GpuProbeOptions options) : options_(std::move(options)) {}
  absl::Status load(bool multi);  // multi: the programs' attach type is uprobe_multi
  absl::Status attachAll(const std::vector<std::string>& functions);  // .dynsym's functions
  // Two uprobe_multi links (entries, returns); UNIMPLEMENTED when the kernel has none.
  absl::Status attachMulti(const std::vector<ElfFunction>& functions);
  static int onEvent(void* ctx, void* data, size_t size);  // ring buffer callback, never throws

  GpuProbeOptions options_;
  AttachReport report_;
  ig_gpu_probes* skel_ = nullptr;
  std::vector<bpf_link*> links_;
  std::vector<int> multi_links_;  // uprobe_multi link fds (attachMulti)
  ring_buffer* ring_ = nullptr;
  std::deque<GpuEvent> events_;  // at most kEventQueue
  uint64_t events_dropped_ = 0;
};



}  // namespace infergate::gpu
