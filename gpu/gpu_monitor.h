#pragma once
// The GPU monitor: polls a GpuSource every interval, turns the cumulative aggregates into rates
// and interval figures, runs the detectors (detectors.h: leak candidate, launch->sync anomaly,
// container over quota), forgets processes that exited, and publishes a GpuView (gpu_view.h),
// per-process health (for admission), `infergate_gpu_*` metrics, rate-limited log lines and
// webhook POSTs (webhook.h).
//
// Ownership: `source` and `resolver` belong to the caller and must outlive the monitor; the
// monitor owns its thread and its webhook sender. The metrics collector it adds to `registry`
// stays registered after the monitor is gone (the registry cannot remove it) and then renders
// nothing.
// Threading: tick() runs on the monitor thread (start()) or on the caller's (tests), one at a
// time (serialized); it alone touches the source and the resolver. view(), healthOf(),
// setListener(), the metrics collector and the counters may be called from any thread.

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "common/metrics.h"
#include "gpu/detectors.h"
#include "gpu/gpu_source.h"
#include "gpu/gpu_view.h"
#include "gpu/process_info.h"

namespace infergate::gpu {

class WebhookSender;

struct GpuMonitorOptions {
  uint64_t interval_ms = 1000;       // poll period
  uint64_t leak_window_ms = 300000;  // live device bytes grew monotonically across this window
  uint64_t leak_min_age_ms = 300000; // and allocations older than this are still live
  size_t leak_list_max = 16;         // oldest live allocations listed per leak candidate
  // At most one look at a process's live allocations (a walk of the probes' allocation map)
  // per this period, both for the evidence and to refresh a candidate's list.
  uint64_t leak_check_interval_ms = 10000;
  double anomaly_factor = 3.0;       // window mean launch->sync time > factor x baseline
  uint64_t anomaly_min_syncs = 20;   // timed syncs in a window for it to count (either way)
  uint32_t baseline_windows = 10;    // windows before a baseline exists; EWMA alpha = 1/this
  uint64_t default_quota_bytes = 0;  // per cgroup (container), 0 = none
  std::vector<QuotaRule> quotas;     // first match wins over the default
  uint64_t log_interval_ms = 60000;  // at most one log line per (detector, subject) per interval
  std::string webhook_url;           // "" none; http://host:port/path only (no TLS), POSTed JSON
  uint64_t webhook_timeout_ms = 1000;
  size_t max_series = 32;  // per-process (and per-container) metric series, largest device
                           // memory first; the rest summed under pid="other" (container="other")
};

class GpuMonitor {
 public:
  // What the lead's config validation may call first: INVALID_ARGUMENT naming the key.
  static absl::Status validate(const GpuMonitorOptions& options);

  // `source` and `resolver` must outlive the monitor. `registry` may be null (no metrics).
  // A webhook URL that does not parse is logged (error) and the webhook is off; validate()
  // reports it beforehand.
  GpuMonitor(GpuSource& source, ProcessResolver& resolver, GpuMonitorOptions options,
             common::MetricsRegistry* registry);
  ~GpuMonitor();  // stop()s
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  void start();  // the monitor thread: tick(monotonicNs()) every interval_ms
  void stop();

  // One poll at `now_ns` (CLOCK_MONOTONIC, the probes' clock): snapshot, deltas, detectors,
  // forget the dead (resolver.alive false -> source.forget), events, logs, webhook, then the
  // listener (on the calling thread). Tests call it directly with a fake clock.
  void tick(uint64_t now_ns);

  GpuView view() const;  // the latest, a copy
  ProcessHealth healthOf(uint32_t tgid) const;
  void setListener(std::function<void(const GpuView&)> after_tick);

  // The `infergate_gpu_*` exposition lines (what the registry's collector appends).
  std::string renderMetrics() const;

  // The webhook's counters (0 without one) and, for tests, a wait until its queue is empty.
  uint64_t webhookSent() const;
  uint64_t webhookFailed() const;
  uint64_t webhookDropped() const;
  bool waitWebhookIdle(uint64_t timeout_ms) const;
  const std::string& webhookError() const { return webhook_error_; }  // why it is off, or ""

 private:
  struct ProcState;
  struct CgroupState;
  struct Series;           // one per-process metric series
  struct ContainerSeries;  // one per-container metric series
  struct MetricsData;
  struct CollectorLink;

  void detected(const char* detector, const std::string& subject, uint64_t now_ns,
                const ProcessView* proc, const ContainerView* container, int64_t device_bytes,
                const std::string& detail);
  void cleared(const char* detector, const std::string& subject, uint64_t now_ns,
               const std::string& what);
  void foldForgotten(const ProcStats& p);
  void handleEvents(uint64_t now_ns, GpuView& view);
  void run();

  GpuSource& source_;
  ProcessResolver& resolver_;
  const GpuMonitorOptions options_;
  std::unique_ptr<WebhookSender> webhook_;
  std::string webhook_error_;

  // Monitor-thread state (tick_mu_).
  std::mutex tick_mu_;
  std::unordered_map<uint32_t, std::unique_ptr<ProcState>> procs_;
  std::unordered_map<uint64_t, std::unique_ptr<CgroupState>> cgroups_;
  std::array<uint64_t, kMemKinds> forgotten_allocs_{}, forgotten_frees_{};
  // Device bytes still live in a cgroup's figures from processes that exited (the driver
  // released them; the probes saw no free, and forget() leaves the cgroup's figures as they
  // are): subtracted from the cgroup's live device bytes. Erased with the cgroup.
  std::unordered_map<uint64_t, int64_t> cgroup_released_;
  std::deque<GpuEvent> recent_events_;
  std::array<uint64_t, 3> events_by_type_{};  // [1] alloc_failed, [2] large_alloc
  uint64_t events_total_ = 0;
  uint64_t leak_total_ = 0, anomaly_total_ = 0, quota_total_ = 0;
  LogRateLimiter log_limiter_;
  uint64_t last_tick_ns_ = 0;

  // Published (mu_).
  mutable std::mutex mu_;
  GpuView view_;
  std::unordered_map<uint32_t, ProcessHealth> health_;
  std::unique_ptr<MetricsData> metrics_;

  std::mutex listener_mu_;
  std::function<void(const GpuView&)> listener_;

  std::shared_ptr<CollectorLink> link_;  // shared with the registry's collector

  std::mutex thread_mu_;  // start()/stop()
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;  // stop_ set (the thread waits between ticks)
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace infergate::gpu
