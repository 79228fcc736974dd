#pragma once
// What the GPU monitor (gpu_monitor.h) publishes after each poll, and its two renderings: the
// `infergate gpu` table (text) and JSON (/admin/gpu?format=json). Plain values, copied out
// of the monitor; the render functions are pure.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "gpu/gpu_source.h"
#include "gpu/process_info.h"

namespace infergate::gpu {

// One live allocation listed for a leak candidate.
struct AllocView {
  uint64_t ptr = 0;
  uint64_t bytes = 0;
  uint64_t age_ms = 0;
  int kind = 0;  // enum ig_gpu_mem_kind (memKindName)
};

struct ProcessView {
  uint32_t tgid = 0;
  std::string comm;
  ContainerInfo container;
  uint64_t cgroup_id = 0;
  int64_t device_bytes = 0;        // live bytes of the device kinds
  int64_t host_bytes = 0;          // live pinned host bytes
  double device_bytes_per_s = 0;   // Δ over the last interval (0 on the first)
  double launches_per_s = 0, graph_launches_per_s = 0;
  uint64_t launches_total = 0, alloc_failures_total = 0;
  uint64_t sync_p50_ns = 0, sync_p99_ns = 0;  // over the last interval's histogram delta (0 when none)
  double sync_mean_ns = 0;  // the last interval's mean launch->sync time (0 when none)
  double baseline_ns = 0;   // the anomaly detector's baseline (0 before one exists)
  bool leak_suspect = false, anomaly = false, over_quota = false;
  std::vector<AllocView> leak_allocs;  // when leak_suspect: oldest live allocations first
};

struct ContainerView {
  std::string label;  // ContainerInfo::label()
  ContainerInfo container;
  uint64_t cgroup_id = 0;
  int64_t device_bytes = 0;
  uint64_t quota_bytes = 0;  // 0 = none
  bool over_quota = false;
  double launches_per_s = 0;
  size_t processes = 0;  // processes of this cgroup in the view
};

struct GpuView {
  uint64_t taken_ns = 0;  // the tick's time (CLOCK_MONOTONIC); 0 before the first tick
  AttachReport probes;
  std::vector<ProcessView> processes;    // by device bytes, largest first (then by pid)
  std::vector<ContainerView> containers; // by device bytes, largest first (then by cgroup id)
  ProbeStats stats;
  uint64_t leak_detections_total = 0, anomaly_detections_total = 0,
           over_quota_detections_total = 0, events_total = 0;
  std::vector<GpuEvent> recent_events;  // the last kRecentEvents rare events, oldest first
  static constexpr size_t kRecentEvents = 32;
};

struct ProcessHealth {
  bool known = false;  // the process is in the latest view
  bool over_quota = false;  // its cgroup is over its quota
  bool anomaly = false;
  bool leak_suspect = false;
};

// The `infergate gpu` table: a header line (probe state, library, symbols attached/missing),
// one row per process (at most `max_rows`, 0 = all): PID COMM CONTAINER DEVICE-MEM ΔMEM/s
// LAUNCH/s GRAPH/s SYNC-P50 SYNC-P99 FLAGS (LEAK, 3X, QUOTA); a container section; the leak
// candidates with their oldest allocations (size, age, kind); the recent rare events. When the
// probes are off: one line saying so and why. Names from processes are shown with control
// characters replaced by '?', so a process cannot write escape sequences to the terminal.
std::string renderGpuText(const GpuView& view, size_t max_rows);

// The same data as one JSON object (valid UTF-8: invalid bytes become U+FFFD).
std::string renderGpuJson(const GpuView& view);

// Human units used by the table: "512 B", "1.5 KiB", "2.0 MiB", "3.25 GiB" (binary units, one
// decimal below 1 TiB... see the implementation for the exact rules), and times: "850ns",
// "12.3µs", "1.50ms", "2.00s"; 0 ns is "-".
std::string formatBytes(int64_t bytes);
std::string formatNs(uint64_t ns);
// A JSON string literal (quotes included).
std::string jsonString(std::string_view s);
// `s` with each byte that is not part of valid UTF-8 replaced by U+FFFD (for metric labels).
std::string validUtf8(std::string_view s);

}  // namespace infergate::gpu
