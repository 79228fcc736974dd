#include "gpu/gpu_monitor.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <map>
#include <sstream>
#include <thread>

#include "common/metrics.h"
#include "gpu/testing/fake_source.h"
#include "tests/unit/gpu/http_test_server.h"
#include "tests/unit/gpu/json_lite.h"

namespace infergate::gpu {
namespace {

using testing::FakeGpuSource;
using testing::FakeResolver;
using testing::HttpTestServer;
using testing::Json;
using testing::JsonParser;

constexpr uint64_t kSec = 1'000'000'000;
constexpr uint64_t kT0 = 1000 * kSec;  // the fake clock's start
constexpr int64_t kMiB = 1 << 20;

// Prometheus text -> {"name{labels}": value}; every sample line must parse, and every name
// must have had a # TYPE line.
std::map<std::string, double> parseExposition(const std::string& text) {
  std::map<std::string, double> out;
  std::set<std::string> typed;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) {
      typed.insert(line.substr(7, line.find(' ', 7) - 7));
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    EXPECT_NE(sp, std::string::npos) << line;
    const std::string series = line.substr(0, sp);
    std::string name = series.substr(0, series.find('{'));
    for (const char* suffix : {"_bucket", "_sum", "_count"})
      if (!typed.count(name) && name.size() > strlen(suffix) &&
          name.compare(name.size() - strlen(suffix), std::string::npos, suffix) == 0)
        name = name.substr(0, name.size() - strlen(suffix));
    EXPECT_TRUE(typed.count(name)) << "no # TYPE for " << line;
    EXPECT_EQ(out.count(series), 0u) << "duplicate series " << series;
    out[series] = std::stod(line.substr(sp + 1));
  }
  return out;
}

class GpuMonitorTest : public ::testing::Test {
 protected:
  GpuMonitorTest() {
    options_.interval_ms = 1000;
    options_.leak_window_ms = 10'000;
    options_.leak_min_age_ms = 5'000;
    options_.leak_list_max = 2;
    options_.anomaly_min_syncs = 20;
    options_.baseline_windows = 5;
    options_.log_interval_ms = 60'000;
    ContainerInfo triton;
    triton.cgroup_path = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-"
                         "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789.scope";
    triton.runtime = "containerd";
    triton.container_id = "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
    triton.pod_name = "triton-0";
    triton.pod_namespace = "ml";
    triton.pod_uid = "1b2c3d4e-0000-1111-2222-333344445555";
    res_.containers[7] = triton;
  }

  GpuMonitor& monitor() {
    if (!monitor_) monitor_ = std::make_unique<GpuMonitor>(src_, res_, options_, &registry_);
    return *monitor_;
  }
  std::map<std::string, double> metrics() { return parseExposition(registry_.renderPrometheus()); }

  common::MetricsRegistry registry_;  // outlives the monitor
  FakeGpuSource src_;
  FakeResolver res_;
  GpuMonitorOptions options_;
  std::unique_ptr<GpuMonitor> monitor_;
};

const ProcessView* find(const GpuView& v, uint32_t tgid) {
  for (const ProcessView& p : v.processes)
    if (p.tgid == tgid) return &p;
  return nullptr;
}

TEST_F(GpuMonitorTest, RatesPerSecondAndIntervalQuantiles) {
  ProcStats& p = src_.proc(10, 7, "tritonserver");
  p.live_bytes[IG_GPU_MEM_DEVICE] = 64 * kMiB;
  p.launches = 1000;
  src_.addSyncs(10, 1000, 5'000'000);  // history before the first tick: not in the interval
  monitor().tick(kT0);
  GpuView v = monitor().view();
  ASSERT_EQ(v.processes.size(), 1u);
  EXPECT_EQ(v.processes[0].launches_per_s, 0.0);  // no interval yet
  EXPECT_EQ(v.processes[0].sync_p50_ns, 0u);

  ProcStats& q = src_.proc(10);
  q.live_bytes[IG_GPU_MEM_DEVICE] += 2 * kMiB;
  q.live_bytes[IG_GPU_MEM_HOST] = 4096;
  q.launches += 500;
  q.graph_launches += 20;
  src_.addSyncs(10, 98, 1000);       // bucket 9: upper bound 1023 ns
  src_.addSyncs(10, 2, 1'000'000);   // bucket 19: upper bound 2^20-1 ns
  monitor().tick(kT0 + 2 * kSec);
  v = monitor().view();
  const ProcessView& pv = v.processes[0];
  EXPECT_EQ(pv.tgid, 10u);
  EXPECT_EQ(pv.comm, "tritonserver");
  EXPECT_EQ(pv.container.pod_name, "triton-0");
  EXPECT_EQ(pv.device_bytes, 66 * kMiB);
  EXPECT_EQ(pv.host_bytes, 4096);
  EXPECT_DOUBLE_EQ(pv.device_bytes_per_s, 1.0 * kMiB);
  EXPECT_DOUBLE_EQ(pv.launches_per_s, 250.0);
  EXPECT_DOUBLE_EQ(pv.graph_launches_per_s, 10.0);
  EXPECT_EQ(pv.launches_total, 1500u);
  EXPECT_EQ(pv.sync_p50_ns, 1023u);
  EXPECT_EQ(pv.sync_p99_ns, (uint64_t{1} << 20) - 1);
  EXPECT_DOUBLE_EQ(pv.sync_mean_ns, (98 * 1000.0 + 2 * 1e6) / 100);
  EXPECT_EQ(v.taken_ns, kT0 + 2 * kSec);
}

TEST_F(GpuMonitorTest, LeakSuspectWithItsOldestAllocationsThenClears) {
  src_.proc(42, 7, "leaky");
  // Three old allocations (the list shows the 2 oldest) and a young one.
  src_.addAlloc(42, 0x7000, 1 * kMiB, kT0 - 30 * kSec);
  src_.addAlloc(42, 0x8000, 2 * kMiB, kT0 - 20 * kSec, IG_GPU_MEM_ASYNC);
  src_.addAlloc(42, 0x9000, 3 * kMiB, kT0 - 10 * kSec);
  for (int t = 0; t < 10; ++t) {
    src_.proc(42).live_bytes[IG_GPU_MEM_DEVICE] = (100 + t) * kMiB;
    src_.addAlloc(42, 0x100000 + t, kMiB, kT0 + t * kSec);
    monitor().tick(kT0 + t * kSec);
    EXPECT_FALSE(monitor().healthOf(42).leak_suspect) << t;
  }
  src_.proc(42).live_bytes[IG_GPU_MEM_DEVICE] = 110 * kMiB;
  monitor().tick(kT0 + 10 * kSec);
  GpuView v = monitor().view();
  const ProcessView* p = find(v, 42);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->leak_suspect);
  ASSERT_EQ(p->leak_allocs.size(), 2u);
  EXPECT_EQ(p->leak_allocs[0].ptr, 0x7000u);
  EXPECT_EQ(p->leak_allocs[0].bytes, uint64_t{kMiB});
  EXPECT_EQ(p->leak_allocs[0].age_ms, 40'000u);
  EXPECT_EQ(p->leak_allocs[1].ptr, 0x8000u);
  EXPECT_EQ(p->leak_allocs[1].kind, IG_GPU_MEM_ASYNC);
  EXPECT_EQ(p->leak_allocs[1].age_ms, 30'000u);
  EXPECT_EQ(v.leak_detections_total, 1u);
  ProcessHealth h = monitor().healthOf(42);
  EXPECT_TRUE(h.known);
  EXPECT_TRUE(h.leak_suspect);
  EXPECT_FALSE(h.anomaly);
  auto m = metrics();
  EXPECT_EQ(m["infergate_gpu_leak_detections_total"], 1);
  EXPECT_EQ(m["infergate_gpu_leak_suspects"], 1);

  // Freed back to 105 MiB: still above the window's start (100 MiB).
  src_.proc(42).live_bytes[IG_GPU_MEM_DEVICE] = 105 * kMiB;
  monitor().tick(kT0 + 11 * kSec);
  EXPECT_TRUE(monitor().healthOf(42).leak_suspect);
  src_.proc(42).live_bytes[IG_GPU_MEM_DEVICE] = 99 * kMiB;
  monitor().tick(kT0 + 12 * kSec);
  EXPECT_FALSE(monitor().healthOf(42).leak_suspect);
  v = monitor().view();
  EXPECT_TRUE(find(v, 42)->leak_allocs.empty());
  EXPECT_EQ(v.leak_detections_total, 1u);
  m = metrics();
  EXPECT_EQ(m["infergate_gpu_leak_detections_total"], 1);
  EXPECT_EQ(m["infergate_gpu_leak_suspects"], 0);
}

TEST_F(GpuMonitorTest, GrowthWithoutOldAllocationsIsNoLeak) {
  src_.proc(42, 7, "grower");
  for (int t = 0; t <= 20; ++t) {
    src_.proc(42).live_bytes[IG_GPU_MEM_DEVICE] = (100 + t) * kMiB;
    // Every allocation is freed within 3 s (younger than leak_min_age: 5 s).
    std::erase_if(src_.allocs, [&](const LiveAlloc& a) { return a.ts_ns + 3 * kSec <= kT0 + t * kSec; });
    src_.addAlloc(42, 0x1000 + t, kMiB, kT0 + t * kSec);
    monitor().tick(kT0 + t * kSec);
  }
  EXPECT_FALSE(monitor().healthOf(42).leak_suspect);
  EXPECT_EQ(monitor().view().leak_detections_total, 0u);
  // Looked at from t = 10 s on, no sooner, and once per leak_check_interval (10 s): 10, 20.
  EXPECT_EQ(src_.live_alloc_calls, 2);
}

TEST_F(GpuMonitorTest, TheAllocationMapIsWalkedAtMostOncePerCheckInterval) {
  options_.leak_check_interval_ms = 3000;
  src_.proc(42, 7, "late");
  for (int t = 0; t <= 12; ++t) {
    src_.proc(42).live_bytes[IG_GPU_MEM_DEVICE] = (100 + t) * kMiB;
    // The first allocation old enough (5 s) appears at t = 11 s.
    if (t == 6) src_.addAlloc(42, 0x6000, kMiB, kT0 + 6 * kSec);
    monitor().tick(kT0 + t * kSec);
    // Checks at 10 s (nothing old: the 6 s allocation is 4 s old) and 13 s, not 11 or 12.
    EXPECT_FALSE(monitor().healthOf(42).leak_suspect) << t;
  }
  EXPECT_EQ(src_.live_alloc_calls, 1);
  src_.proc(42).live_bytes[IG_GPU_MEM_DEVICE] = 113 * kMiB;
  monitor().tick(kT0 + 13 * kSec);
  EXPECT_TRUE(monitor().healthOf(42).leak_suspect);
  EXPECT_EQ(src_.live_alloc_calls, 2);
  ASSERT_EQ(find(monitor().view(), 42)->leak_allocs.size(), 1u);
  EXPECT_EQ(find(monitor().view(), 42)->leak_allocs[0].age_ms, 7000u);
  // The list is refreshed at the same pace: 14 and 15 s keep it, 16 s looks again.
  src_.addAlloc(42, 0x5000, kMiB, kT0 - 100 * kSec);
  for (int t = 14; t <= 15; ++t) {
    monitor().tick(kT0 + t * kSec);
    EXPECT_EQ(find(monitor().view(), 42)->leak_allocs.size(), 1u) << t;
  }
  monitor().tick(kT0 + 16 * kSec);
  EXPECT_EQ(src_.live_alloc_calls, 3);
  ASSERT_EQ(find(monitor().view(), 42)->leak_allocs.size(), 2u);
  EXPECT_EQ(find(monitor().view(), 42)->leak_allocs[0].ptr, 0x5000u);
}

// 100 syncs per tick of `ns` each.
void syncWindow(FakeGpuSource& src, uint32_t tgid, uint64_t n, uint64_t ns) { src.addSyncs(tgid, n, ns); }

TEST_F(GpuMonitorTest, AnomalyAgainstItsBaselineThenClears) {
  src_.proc(9, 7, "slow");
  uint64_t t = kT0;
  monitor().tick(t);
  for (int i = 0; i < 5; ++i) {
    syncWindow(src_, 9, 100, 1'000'000);
    monitor().tick(t += kSec);
  }
  GpuView v = monitor().view();
  EXPECT_DOUBLE_EQ(find(v, 9)->baseline_ns, 1e6);
  EXPECT_FALSE(find(v, 9)->anomaly);
  // Too few syncs (10 < 20) at 10 ms: ignored.
  syncWindow(src_, 9, 10, 10'000'000);
  monitor().tick(t += kSec);
  EXPECT_FALSE(monitor().healthOf(9).anomaly);
  syncWindow(src_, 9, 100, 3'500'000);
  monitor().tick(t += kSec);
  v = monitor().view();
  EXPECT_TRUE(find(v, 9)->anomaly);
  EXPECT_DOUBLE_EQ(find(v, 9)->sync_mean_ns, 3.5e6);
  EXPECT_DOUBLE_EQ(find(v, 9)->baseline_ns, 1e6);
  EXPECT_TRUE(monitor().healthOf(9).anomaly);
  EXPECT_EQ(v.anomaly_detections_total, 1u);
  auto m = metrics();
  EXPECT_EQ(m["infergate_gpu_anomaly_detections_total"], 1);
  EXPECT_EQ(m["infergate_gpu_anomalous_processes"], 1);
  syncWindow(src_, 9, 100, 3'500'000);
  monitor().tick(t += kSec);
  EXPECT_EQ(monitor().view().anomaly_detections_total, 1u);  // a transition counts once
  syncWindow(src_, 9, 100, 1'000'000);
  monitor().tick(t += kSec);
  EXPECT_FALSE(monitor().healthOf(9).anomaly);
  m = metrics();
  EXPECT_EQ(m["infergate_gpu_anomaly_detections_total"], 1);
  EXPECT_EQ(m["infergate_gpu_anomalous_processes"], 0);
}

TEST_F(GpuMonitorTest, QuotaDefaultAndRule) {
  options_.default_quota_bytes = 1024 * kMiB;
  ContainerInfo other;
  other.cgroup_path = "/system.slice/docker-1111222233334444555566667777888899990000aaaabbbbccccddddeeeeffff.scope";
  other.runtime = "docker";
  other.container_id = "1111222233334444555566667777888899990000aaaabbbbccccddddeeeeffff";
  res_.containers[8] = other;
  options_.quotas = {{"triton-0", 2048 * kMiB}};
  src_.proc(10, 7, "triton").live_bytes[IG_GPU_MEM_DEVICE] = 1536 * kMiB;
  src_.cgroup(7).live_bytes[IG_GPU_MEM_DEVICE] = 1536 * kMiB;
  src_.proc(20, 8, "other").live_bytes[IG_GPU_MEM_DEVICE] = 1536 * kMiB;
  src_.cgroup(8).live_bytes[IG_GPU_MEM_DEVICE] = 1536 * kMiB;
  monitor().tick(kT0);
  GpuView v = monitor().view();
  ASSERT_EQ(v.containers.size(), 2u);
  std::map<uint64_t, ContainerView> by_id;
  for (const auto& c : v.containers) by_id[c.cgroup_id] = c;
  EXPECT_EQ(by_id[7].label, "triton-0");
  EXPECT_EQ(by_id[7].quota_bytes, uint64_t{2048 * kMiB});  // the rule
  EXPECT_FALSE(by_id[7].over_quota);
  EXPECT_EQ(by_id[8].label, "111122223333");
  EXPECT_EQ(by_id[8].quota_bytes, uint64_t{1024 * kMiB});  // the default
  EXPECT_TRUE(by_id[8].over_quota);
  EXPECT_EQ(by_id[8].processes, 1u);
  EXPECT_TRUE(monitor().healthOf(20).over_quota);
  EXPECT_FALSE(monitor().healthOf(10).over_quota);
  EXPECT_TRUE(find(v, 20)->over_quota);
  EXPECT_EQ(v.over_quota_detections_total, 1u);
  auto m = metrics();
  EXPECT_EQ(m["infergate_gpu_over_quota_detections_total"], 1);
  EXPECT_EQ(m["infergate_gpu_over_quota_containers"], 1);
  EXPECT_EQ(m["infergate_gpu_container_quota_bytes{container=\"triton-0\",pod=\"triton-0\",namespace=\"ml\"}"],
            2048.0 * kMiB);
  EXPECT_EQ(m["infergate_gpu_container_device_bytes{container=\"111122223333\",pod=\"\",namespace=\"\"}"],
            1536.0 * kMiB);
  // Back under: clears; over again: a second detection.
  src_.cgroup(8).live_bytes[IG_GPU_MEM_DEVICE] = 1000 * kMiB;
  monitor().tick(kT0 + kSec);
  EXPECT_FALSE(monitor().healthOf(20).over_quota);
  src_.cgroup(8).live_bytes[IG_GPU_MEM_DEVICE] = 1025 * kMiB;
  monitor().tick(kT0 + 2 * kSec);
  EXPECT_TRUE(monitor().healthOf(20).over_quota);
  EXPECT_EQ(monitor().view().over_quota_detections_total, 2u);
}

TEST_F(GpuMonitorTest, ForgetsTheDeadAndKeepsTheirTotals) {
  ProcStats& a = src_.proc(5, 7, "short");
  a.alloc_count[IG_GPU_MEM_DEVICE] = 10;
  a.free_count[IG_GPU_MEM_DEVICE] = 4;
  a.alloc_count[IG_GPU_MEM_HOST] = 3;
  a.live_bytes[IG_GPU_MEM_DEVICE] = 6 * kMiB;
  ProcStats& b = src_.proc(6, 7, "long");
  b.alloc_count[IG_GPU_MEM_DEVICE] = 1;
  b.live_bytes[IG_GPU_MEM_DEVICE] = kMiB;
  monitor().tick(kT0);
  auto m = metrics();
  EXPECT_EQ(m["infergate_gpu_allocations_total{kind=\"device\"}"], 11);
  EXPECT_EQ(m["infergate_gpu_live_bytes{kind=\"device\"}"], 7.0 * kMiB);
  EXPECT_TRUE(monitor().healthOf(5).known);

  res_.dead.insert(5);
  src_.proc(5).alloc_count[IG_GPU_MEM_DEVICE] = 12;  // its last counts before it went
  monitor().tick(kT0 + kSec);
  ASSERT_EQ(src_.forgotten, std::vector<uint32_t>{5});
  GpuView v = monitor().view();
  ASSERT_EQ(v.processes.size(), 1u);
  EXPECT_EQ(v.processes[0].tgid, 6u);
  EXPECT_FALSE(monitor().healthOf(5).known);
  m = metrics();
  EXPECT_EQ(m["infergate_gpu_allocations_total{kind=\"device\"}"], 13);
  EXPECT_EQ(m["infergate_gpu_frees_total{kind=\"device\"}"], 4);
  EXPECT_EQ(m["infergate_gpu_allocations_total{kind=\"host\"}"], 3);
  EXPECT_EQ(m["infergate_gpu_live_bytes{kind=\"device\"}"], 1.0 * kMiB);
  EXPECT_EQ(m["infergate_gpu_processes"], 1);
  EXPECT_EQ(m.count("infergate_gpu_process_device_bytes{pid=\"5\",comm=\"short\",container=\"triton-0\"}"), 0u);

  // Later ticks do not count it again.
  monitor().tick(kT0 + 2 * kSec);
  EXPECT_EQ(metrics()["infergate_gpu_allocations_total{kind=\"device\"}"], 13);
  EXPECT_EQ(src_.forgotten.size(), 1u);
}

TEST_F(GpuMonitorTest, ACgroupDropsTheMemoryOfItsExitedProcesses) {
  options_.default_quota_bytes = 100;
  src_.proc(31, 7, "big").live_bytes[IG_GPU_MEM_DEVICE] = 150;
  src_.proc(32, 7, "small").live_bytes[IG_GPU_MEM_DEVICE] = 40;
  src_.cgroup(7).live_bytes[IG_GPU_MEM_DEVICE] = 190;
  monitor().tick(kT0);
  ASSERT_EQ(monitor().view().containers.size(), 1u);
  EXPECT_EQ(monitor().view().containers[0].device_bytes, 190);
  EXPECT_TRUE(monitor().healthOf(32).over_quota);
  // pid 31 exits without freeing: the driver releases its memory; the cgroup's figures in the
  // map stay (forget() leaves them), so the monitor takes its 150 bytes off.
  res_.dead.insert(31);
  monitor().tick(kT0 + kSec);
  GpuView v = monitor().view();
  ASSERT_EQ(v.containers.size(), 1u);
  EXPECT_EQ(v.containers[0].device_bytes, 40);
  EXPECT_EQ(v.containers[0].processes, 1u);
  EXPECT_FALSE(v.containers[0].over_quota);
  EXPECT_FALSE(monitor().healthOf(32).over_quota);
  EXPECT_EQ(metrics()["infergate_gpu_container_device_bytes{container=\"triton-0\",pod=\"triton-0\",namespace=\"ml\"}"], 40);
  // pid 32 frees its 40 bytes and exits: an empty cgroup is not shown.
  src_.proc(32).live_bytes[IG_GPU_MEM_DEVICE] = 0;
  src_.cgroup(7).live_bytes[IG_GPU_MEM_DEVICE] = 150;
  res_.dead.insert(32);
  monitor().tick(kT0 + 2 * kSec);
  EXPECT_TRUE(monitor().view().containers.empty());
  EXPECT_EQ(monitor().view().over_quota_detections_total, 1u);
}

TEST_F(GpuMonitorTest, ATgidReusedByANewProcessKeepsTheOldTotals) {
  ProcStats& a = src_.proc(5, 7, "first");
  a.alloc_count[IG_GPU_MEM_DEVICE] = 10;
  a.first_ns = 100;
  monitor().tick(kT0);
  ProcStats& b = src_.proc(5);
  b = ProcStats{};
  b.tgid = 5;
  b.cgroup_id = 7;
  b.comm = "second";
  b.first_ns = 200;
  b.alloc_count[IG_GPU_MEM_DEVICE] = 2;
  monitor().tick(kT0 + kSec);
  EXPECT_EQ(metrics()["infergate_gpu_allocations_total{kind=\"device\"}"], 12);
  EXPECT_EQ(find(monitor().view(), 5)->comm, "second");
}

TEST_F(GpuMonitorTest, MaxSeriesSumsTheRestUnderOther) {
  options_.max_series = 2;
  const int64_t sizes[] = {100, 400, 200, 300};
  for (uint32_t i = 0; i < 4; ++i) {
    ProcStats& p = src_.proc(100 + i, 7, "w" + std::to_string(i));
    p.live_bytes[IG_GPU_MEM_DEVICE] = sizes[i];
    p.launches = i + 1;
    p.graph_launches = 10 * (i + 1);
    p.alloc_failures = i;
  }
  src_.addSyncs(100, 3, 1000);  // in "other"
  src_.addSyncs(102, 1, 1000);  // in "other"
  src_.addSyncs(101, 5, 2);     // in its own series (bucket 1)
  monitor().tick(kT0);
  GpuView v = monitor().view();
  ASSERT_EQ(v.processes.size(), 4u);
  EXPECT_EQ(v.processes[0].tgid, 101u);  // largest first
  EXPECT_EQ(v.processes[3].tgid, 100u);
  auto m = metrics();
  const std::string l101 = "{pid=\"101\",comm=\"w1\",container=\"triton-0\"}";
  const std::string l103 = "{pid=\"103\",comm=\"w3\",container=\"triton-0\"}";
  const std::string other = "{pid=\"other\",comm=\"\",container=\"\"}";
  EXPECT_EQ(m["infergate_gpu_process_device_bytes" + l101], 400);
  EXPECT_EQ(m["infergate_gpu_process_device_bytes" + l103], 300);
  EXPECT_EQ(m["infergate_gpu_process_device_bytes" + other], 300);
  EXPECT_EQ(m["infergate_gpu_process_launches_total" + other], 1 + 3);
  EXPECT_EQ(m["infergate_gpu_process_graph_launches_total" + other], 10 + 30);
  EXPECT_EQ(m["infergate_gpu_process_alloc_failures_total" + other], 0 + 2);
  size_t series = 0;
  for (const auto& [k, val] : m)
    if (k.rfind("infergate_gpu_process_device_bytes{", 0) == 0) ++series;
  EXPECT_EQ(series, 3u);
  // The histogram: le = (2^(b+1)-1) ns in seconds, cumulative; the last bucket is +Inf.
  const std::string o = "pid=\"other\",comm=\"\",container=\"\"";
  EXPECT_EQ(m["infergate_gpu_process_sync_seconds_bucket{" + o + ",le=\"1e-09\"}"], 0);
  EXPECT_EQ(m["infergate_gpu_process_sync_seconds_bucket{" + o + ",le=\"5.11e-07\"}"], 0);
  EXPECT_EQ(m["infergate_gpu_process_sync_seconds_bucket{" + o + ",le=\"1.023e-06\"}"], 4);
  EXPECT_EQ(m["infergate_gpu_process_sync_seconds_bucket{" + o + ",le=\"+Inf\"}"], 4);
  EXPECT_EQ(m["infergate_gpu_process_sync_seconds_count{" + o + "}"], 4);
  EXPECT_DOUBLE_EQ(m["infergate_gpu_process_sync_seconds_sum{" + o + "}"], 4e-6);
  const std::string s1 = "pid=\"101\",comm=\"w1\",container=\"triton-0\"";
  EXPECT_EQ(m["infergate_gpu_process_sync_seconds_bucket{" + s1 + ",le=\"1e-09\"}"], 0);
  EXPECT_EQ(m["infergate_gpu_process_sync_seconds_bucket{" + s1 + ",le=\"3e-09\"}"], 5);
  size_t buckets = 0;
  for (const auto& [k, val] : m)
    if (k.rfind("infergate_gpu_process_sync_seconds_bucket{" + s1, 0) == 0) ++buckets;
  EXPECT_EQ(buckets, size_t{kSyncBuckets});  // 39 finite bounds and +Inf
}

TEST_F(GpuMonitorTest, MetricsExpositionValues) {
  src_.report_.missing = {"cuMemAllocAsync", "cuGraphLaunch"};
  src_.snap.stats.calls[IG_GPU_FN_LAUNCH_KERNEL] = 77;
  src_.snap.stats.alloc_map_full = 3;
  src_.snap.stats.ringbuf_full = 2;
  src_.proc(12, 7, "bad\xffutf8").live_bytes[IG_GPU_MEM_DEVICE] = 1;
  ProcStats& p = src_.proc(11, 7, "we\"ird\\name\n");
  p.live_bytes[IG_GPU_MEM_MANAGED] = 5000;
  p.live_bytes[IG_GPU_MEM_HOST] = 7000;
  p.alloc_count[IG_GPU_MEM_VMM] = 2;
  GpuEvent e;
  e.type = IG_GPU_EV_ALLOC_FAILED;
  e.fn = IG_GPU_FN_MEM_ALLOC;
  e.tgid = 11;
  e.bytes = 1 << 30;
  e.result = 2;
  src_.events.push_back(e);
  e.type = IG_GPU_EV_LARGE_ALLOC;
  src_.events.push_back(e);
  src_.events.push_back(e);
  auto m0 = parseExposition(monitor().renderMetrics());  // before any tick: the attach state
  EXPECT_EQ(m0["infergate_gpu_probes_active"], 1);
  EXPECT_EQ(m0["infergate_gpu_probe_symbols{state=\"missing\"}"], 2);
  monitor().tick(kT0);
  auto m = metrics();
  EXPECT_EQ(m["infergate_gpu_probes_active"], 1);
  EXPECT_EQ(m["infergate_gpu_probe_symbols{state=\"attached\"}"], 4);
  EXPECT_EQ(m["infergate_gpu_probe_symbols{state=\"missing\"}"], 2);
  EXPECT_EQ(m["infergate_gpu_probe_calls_total{fn=\"cuLaunchKernel\"}"], 77);
  EXPECT_EQ(m["infergate_gpu_probe_drops_total{reason=\"alloc_map_full\"}"], 3);
  EXPECT_EQ(m["infergate_gpu_probe_drops_total{reason=\"ringbuf_full\"}"], 2);
  EXPECT_EQ(m["infergate_gpu_probe_drops_total{reason=\"proc_map_full\"}"], 0);
  EXPECT_EQ(m["infergate_gpu_events_total{type=\"alloc_failed\"}"], 1);
  EXPECT_EQ(m["infergate_gpu_events_total{type=\"large_alloc\"}"], 2);
  EXPECT_EQ(m["infergate_gpu_live_bytes{kind=\"managed\"}"], 5000);
  EXPECT_EQ(m["infergate_gpu_live_bytes{kind=\"host\"}"], 7000);
  EXPECT_EQ(m["infergate_gpu_allocations_total{kind=\"vmm\"}"], 2);
  // Label values escaped by the exposition rules.
  EXPECT_EQ(m["infergate_gpu_process_device_bytes{pid=\"11\",comm=\"we\\\"ird\\\\name\\n\",container=\"triton-0\"}"],
            5000);
  EXPECT_EQ(m["infergate_gpu_process_device_bytes{pid=\"12\",comm=\"bad\xef\xbf\xbdutf8\",container=\"triton-0\"}"], 1);
  EXPECT_EQ(m["infergate_gpu_webhook_sent_total"], 0);
  EXPECT_EQ(m["infergate_gpu_webhook_failed_total"], 0);
  EXPECT_EQ(m["infergate_gpu_webhook_dropped_total"], 0);
  GpuView v = monitor().view();
  EXPECT_EQ(v.events_total, 3u);
  ASSERT_EQ(v.recent_events.size(), 3u);
  EXPECT_EQ(v.recent_events[0].type, IG_GPU_EV_ALLOC_FAILED);

  // Only the last 32 rare events are kept.
  for (int i = 0; i < 40; ++i) {
    e.bytes = i;
    src_.events.push_back(e);
  }
  monitor().tick(kT0 + kSec);
  v = monitor().view();
  EXPECT_EQ(v.events_total, 43u);
  ASSERT_EQ(v.recent_events.size(), 32u);
  EXPECT_EQ(v.recent_events.back().bytes, 39u);
  EXPECT_EQ(v.recent_events.front().bytes, 8u);
}

TEST_F(GpuMonitorTest, ProbesOffSaysSoInMetrics) {
  src_.report_ = AttachReport{};
  src_.report_.reason = "no libcuda.so.1 found";
  monitor().tick(kT0);
  auto m = metrics();
  EXPECT_EQ(m["infergate_gpu_probes_active"], 0);
  EXPECT_EQ(m["infergate_gpu_probe_symbols{state=\"attached\"}"], 0);
  EXPECT_EQ(monitor().view().probes.reason, "no libcuda.so.1 found");
}

TEST_F(GpuMonitorTest, TheCollectorOutlivesTheMonitor) {
  monitor().tick(kT0);
  EXPECT_NE(registry_.renderPrometheus().find("infergate_gpu_probes_active"), std::string::npos);
  monitor_.reset();
  EXPECT_EQ(registry_.renderPrometheus().find("infergate_gpu_"), std::string::npos);
}

// Log lines through a ring-buffer sink on the default logger, restored after.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000)) {
    saved_ = spdlog::default_logger();
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::trace);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(saved_); }
  std::vector<std::string> lines(spdlog::level::level_enum level) {
    std::vector<std::string> out;
    for (const auto& msg : sink_->last_raw())
      if (msg.level == level) out.emplace_back(msg.payload.begin(), msg.payload.end());
    return out;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_;
  std::shared_ptr<spdlog::logger> saved_;
};

TEST_F(GpuMonitorTest, LogLinesAreRateLimitedPerDetectorAndSubject) {
  LogCapture capture;
  options_.baseline_windows = 1;
  src_.proc(9, 7, "flappy");
  src_.proc(10, 7, "steady");
  uint64_t t = kT0;
  monitor().tick(t);
  syncWindow(src_, 9, 100, 1'000'000);
  syncWindow(src_, 10, 100, 1'000'000);
  monitor().tick(t += kSec);  // baselines: 1 ms
  // pid 9 flaps: anomaly, clear, anomaly, clear, anomaly within 60 s.
  for (int i = 0; i < 5; ++i) {
    syncWindow(src_, 9, 100, i % 2 == 0 ? 4'000'000 : 1'000'000);
    monitor().tick(t += kSec);
  }
  EXPECT_EQ(monitor().view().anomaly_detections_total, 3u);
  auto warns = capture.lines(spdlog::level::warn);
  ASSERT_EQ(warns.size(), 1u);
  EXPECT_NE(warns[0].find("launch->sync anomaly: pid 9 (flappy) in triton-0"), std::string::npos) << warns[0];
  EXPECT_EQ(warns[0].find("suppressed"), std::string::npos);
  // Another subject is not held back by pid 9's limit.
  syncWindow(src_, 10, 100, 4'000'000);
  syncWindow(src_, 9, 100, 1'000'000);
  monitor().tick(t += kSec);
  warns = capture.lines(spdlog::level::warn);
  ASSERT_EQ(warns.size(), 2u);
  EXPECT_NE(warns[1].find("pid 10 (steady)"), std::string::npos) << warns[1];
  // 60 s after pid 9's first line: allowed again, saying how many were held back.
  t = kT0 + 2 * kSec + 60 * kSec;
  syncWindow(src_, 9, 100, 4'000'000);
  syncWindow(src_, 10, 100, 4'000'000);
  monitor().tick(t);
  warns = capture.lines(spdlog::level::warn);
  ASSERT_EQ(warns.size(), 3u);
  EXPECT_NE(warns[2].find("pid 9 (flappy)"), std::string::npos) << warns[2];
  EXPECT_NE(warns[2].find("(2 similar lines suppressed)"), std::string::npos) << warns[2];
  EXPECT_EQ(monitor().view().anomaly_detections_total, 5u);
}

TEST_F(GpuMonitorTest, WebhookCarriesTheDetection) {
  HttpTestServer server(200);
  options_.webhook_url = server.url("/alerts");
  options_.default_quota_bytes = 100;
  src_.proc(31, 7, "big").live_bytes[IG_GPU_MEM_DEVICE] = 150;
  src_.proc(32, 7, "small").live_bytes[IG_GPU_MEM_DEVICE] = 50;
  src_.cgroup(7).live_bytes[IG_GPU_MEM_DEVICE] = 200;
  monitor().tick(kT0);
  ASSERT_TRUE(monitor().waitWebhookIdle(5000));
  EXPECT_EQ(monitor().webhookSent(), 1u);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].head.substr(0, reqs[0].head.find("\r\n")), "POST /alerts HTTP/1.1");
  std::string err;
  auto body = JsonParser::parse(reqs[0].body, &err);
  ASSERT_TRUE(body) << err << ": " << reqs[0].body;
  EXPECT_EQ((*body)["detector"].str, "over_quota");
  EXPECT_EQ((*body)["pid"].num, 31);  // the container's largest process
  EXPECT_EQ((*body)["comm"].str, "big");
  EXPECT_EQ((*body)["container"].str, "triton-0");
  EXPECT_EQ((*body)["pod"].str, "triton-0");
  EXPECT_EQ((*body)["namespace"].str, "ml");
  EXPECT_EQ((*body)["device_bytes"].num, 200);
  EXPECT_EQ((*body)["quota_bytes"].num, 100);
  EXPECT_EQ((*body)["cgroup_id"].num, 7);
  EXPECT_NE((*body)["detail"].str.find("quota"), std::string::npos);
  EXPECT_EQ(metrics()["infergate_gpu_webhook_sent_total"], 1);
}

TEST_F(GpuMonitorTest, LeakAndAnomalyWebhooksAndLogLines) {
  LogCapture capture;
  HttpTestServer server(204);
  options_.webhook_url = server.url();
  options_.leak_list_max = 0;  // no list, but the evidence still counts
  options_.baseline_windows = 1;
  src_.proc(42, 7, "leaky");
  src_.addAlloc(42, 0x7000, 4096, kT0 - 60 * kSec);
  for (int t = 0; t <= 10; ++t) {
    src_.proc(42).live_bytes[IG_GPU_MEM_DEVICE] = (100 + t) * kMiB;
    src_.addSyncs(42, 50, t < 10 ? 1'000'000 : 5'000'000);
    monitor().tick(kT0 + t * kSec);
  }
  ASSERT_TRUE(monitor().waitWebhookIdle(5000));
  EXPECT_EQ(monitor().webhookSent(), 2u);
  const GpuView view = monitor().view();
  const ProcessView* p = find(view, 42);
  ASSERT_NE(p, nullptr);
  EXPECT_TRUE(p->leak_suspect);
  EXPECT_TRUE(p->leak_allocs.empty());
  EXPECT_TRUE(p->anomaly);
  auto reqs = server.requests();
  ASSERT_EQ(reqs.size(), 2u);
  std::map<std::string, Json> by_detector;
  for (const auto& r : reqs) {
    auto body = JsonParser::parse(r.body);
    ASSERT_TRUE(body) << r.body;
    by_detector[(*body)["detector"].str] = *body;
  }
  ASSERT_EQ(by_detector.count("leak"), 1u);
  ASSERT_EQ(by_detector.count("anomaly"), 1u);
  const Json& leak = by_detector["leak"];
  EXPECT_EQ(leak["pid"].num, 42);
  EXPECT_EQ(leak["comm"].str, "leaky");
  EXPECT_EQ(leak["container"].str, "triton-0");
  EXPECT_EQ(leak["container_id"].str.substr(0, 12), "abcdef012345");
  EXPECT_EQ(leak["device_bytes"].num, 110.0 * kMiB);
  EXPECT_FALSE(leak.has("quota_bytes"));
  EXPECT_EQ(leak["detail"].str,
            "device memory grew from 100.0 MiB to 110.0 MiB without a decrease over 10 s; at "
            "least 0 live allocations older than 5 s");
  EXPECT_EQ(by_detector["anomaly"]["detail"].str,
            "launch->sync mean 5.00 ms over the last interval > 3 x baseline 1.00 ms");
  auto warns = capture.lines(spdlog::level::warn);
  ASSERT_EQ(warns.size(), 2u);
  EXPECT_NE(warns[0].find("pid 42 (leaky) in triton-0"), std::string::npos);
}

TEST_F(GpuMonitorTest, WebhookFailureIsCounted) {
  HttpTestServer server(500);
  options_.webhook_url = server.url();
  options_.default_quota_bytes = 100;
  src_.proc(31, 7, "big").live_bytes[IG_GPU_MEM_DEVICE] = 150;
  src_.cgroup(7).live_bytes[IG_GPU_MEM_DEVICE] = 150;
  monitor().tick(kT0);
  ASSERT_TRUE(monitor().waitWebhookIdle(5000));
  EXPECT_EQ(monitor().webhookFailed(), 1u);
  EXPECT_EQ(monitor().webhookSent(), 0u);
  auto m = metrics();
  EXPECT_EQ(m["infergate_gpu_webhook_failed_total"], 1);
  EXPECT_EQ(m["infergate_gpu_webhook_sent_total"], 0);
}

TEST_F(GpuMonitorTest, ABadWebhookUrlIsReportedAndOff) {
  options_.webhook_url = "https://secure.example/x";
  EXPECT_EQ(GpuMonitor::validate(options_).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(monitor().webhookError().find("https"), std::string::npos);
  options_.webhook_url = "";
  EXPECT_TRUE(GpuMonitor::validate(options_).ok());
  options_.anomaly_factor = 0.5;
  EXPECT_FALSE(GpuMonitor::validate(options_).ok());
}

TEST_F(GpuMonitorTest, TheThreadTicksAndCallsTheListener) {
  options_.interval_ms = 5;
  src_.proc(1, 7, "x");
  std::atomic<int> calls{0};
  std::atomic<size_t> procs{0};
  monitor().setListener([&](const GpuView& v) {
    procs = v.processes.size();
    ++calls;
  });
  monitor().start();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (calls.load() < 3 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  monitor().stop();
  EXPECT_GE(calls.load(), 3);
  EXPECT_EQ(procs.load(), 1u);
  const int after_stop = calls.load();
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(calls.load(), after_stop);
  EXPECT_GE(src_.snapshots, 3);
}

}  // namespace
}  // namespace infergate::gpu
