#pragma once
// Test doubles for the GPU monitor: a GpuSource whose snapshot, live allocations and events the
// test edits by hand, and a ProcessResolver answering from maps. Header-only; test support,
// not linked into infergate.
// Threading: like the interfaces, one thread at a time (the test's, or the monitor's).

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "gpu/gpu_source.h"
#include "gpu/process_info.h"

namespace infergate::gpu::testing {

class FakeGpuSource : public GpuSource {
 public:
  FakeGpuSource() {
    report_.active = true;
    report_.library = "/usr/lib/x86_64-linux-gnu/libcuda.so.1";
    report_.attached = {"cuMemAlloc_v2", "cuMemFree_v2", "cuLaunchKernel", "cuStreamSynchronize"};
  }

  // The process `tgid`, created (in cgroup `cgroup_id`, named `comm`) when absent. The
  // reference is valid until the next proc() or cgroup() call that creates an entry.
  ProcStats& proc(uint32_t tgid, uint64_t cgroup_id = 1, const std::string& comm = "proc") {
    for (ProcStats& p : snap.procs)
      if (p.tgid == tgid) return p;
    ProcStats p;
    p.tgid = tgid;
    p.cgroup_id = cgroup_id;
    p.comm = comm;
    p.first_ns = 1;
    snap.procs.push_back(p);
    std::sort(snap.procs.begin(), snap.procs.end(),
              [](const ProcStats& a, const ProcStats& b) { return a.tgid < b.tgid; });
    return proc(tgid);
  }
  CgroupStats& cgroup(uint64_t cgroup_id) {
    for (CgroupStats& c : snap.cgroups)
      if (c.cgroup_id == cgroup_id) return c;
    CgroupStats c;
    c.cgroup_id = cgroup_id;
    snap.cgroups.push_back(c);
    std::sort(snap.cgroups.begin(), snap.cgroups.end(),
              [](const CgroupStats& a, const CgroupStats& b) { return a.cgroup_id < b.cgroup_id; });
    return cgroup(cgroup_id);
  }
  // Records `n` timed syncs of `each_ns` in the process's histogram, sum and counts.
  void addSyncs(uint32_t tgid, uint64_t n, uint64_t each_ns) {
    ProcStats& p = proc(tgid);
    p.syncs += n;
    p.timed_syncs += n;
    p.sync_ns_sum += n * each_ns;
    p.sync_hist[syncBucketOf(each_ns)] += n;
  }
  void addAlloc(uint32_t tgid, uint64_t ptr, uint64_t bytes, uint64_t ts_ns,
                int kind = IG_GPU_MEM_DEVICE) {
    allocs.push_back({tgid, kind, ptr, bytes, ts_ns, 0});
  }

  GpuSnapshot snapshot() override {
    ++snapshots;
    return snap;
  }
  std::vector<LiveAlloc> liveAllocs(uint32_t tgid, size_t limit) override {
    ++live_alloc_calls;
    std::vector<LiveAlloc> out;
    for (const LiveAlloc& a : allocs)
      if (tgid == 0 || a.tgid == tgid) out.push_back(a);
    std::stable_sort(out.begin(), out.end(),
                     [](const LiveAlloc& a, const LiveAlloc& b) { return a.ts_ns < b.ts_ns; });
    if (out.size() > limit) out.resize(limit);
    return out;
  }
  std::vector<GpuEvent> drainEvents(size_t limit) override {
    std::vector<GpuEvent> out;
    while (!events.empty() && out.size() < limit) {
      out.push_back(events.front());
      events.pop_front();
    }
    return out;
  }
  void forget(uint32_t tgid) override {
    forgotten.push_back(tgid);
    std::erase_if(snap.procs, [&](const ProcStats& p) { return p.tgid == tgid; });
    std::erase_if(allocs, [&](const LiveAlloc& a) { return a.tgid == tgid; });
  }
  const AttachReport& report() const override { return report_; }

  GpuSnapshot snap;              // what snapshot() returns
  std::vector<LiveAlloc> allocs; // what liveAllocs() filters
  std::deque<GpuEvent> events;   // what drainEvents() hands out
  AttachReport report_;
  std::vector<uint32_t> forgotten;  // forget() calls, in order
  int snapshots = 0;
  int live_alloc_calls = 0;
};

class FakeResolver : public ProcessResolver {
 public:
  ContainerInfo containerOf(uint64_t cgroup_id, uint32_t /*tgid_hint*/) override {
    auto it = containers.find(cgroup_id);
    return it == containers.end() ? ContainerInfo{} : it->second;
  }
  bool alive(uint32_t tgid) override { return dead.count(tgid) == 0; }
  std::optional<uint32_t> listenerOf(uint16_t port) override {
    auto it = listeners.find(port);
    if (it == listeners.end()) return std::nullopt;
    return it->second;
  }

  std::map<uint64_t, ContainerInfo> containers;
  std::set<uint32_t> dead;
  std::map<uint16_t, uint32_t> listeners;
};

}  // namespace infergate::gpu::testing
