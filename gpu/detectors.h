#pragma once
// The GPU detectors as pure classes over one subject's sample series (a process or a cgroup),
// fed once per monitor interval; GpuMonitor (gpu_monitor.h) owns one of each per subject and
// turns their transitions into counters, log lines and webhooks. No I/O, no clock of their own:
// the caller passes the time, so each is unit-tested alone.
//
// Threading: none; an instance is used by one thread (the monitor's).

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpu/process_info.h"

namespace infergate::gpu {

// What one update did to a detector's state.
enum class Transition { kNone, kEntered, kCleared };

// Leak candidate: live device bytes never decreased across a window of samples spanning at
// least `window_ns`, grew over it, and the caller has evidence of allocations that are never
// freed (live allocations older than a minimum age). It clears when the bytes drop below the
// window's start (the first sample of the window that raised it).
class LeakDetector {
 public:
  explicit LeakDetector(uint64_t window_ns) : window_ns_(window_ns) {}

  // One sample. `has_old_allocs` is asked only when the window condition holds and the
  // subject is not already a suspect (it may be costly: a walk of the allocation map).
  Transition update(uint64_t now_ns, int64_t bytes, const std::function<bool()>& has_old_allocs);

  bool suspect() const { return suspect_; }
  // The bytes at the start of the window that raised the suspicion (0 when not a suspect).
  int64_t windowStartBytes() const { return suspect_ ? entry_start_bytes_ : 0; }
  // The span of that window in ns (0 when not a suspect).
  uint64_t windowSpanNs() const { return suspect_ ? entry_span_ns_ : 0; }
  // Whether the latest sample completes a monotonic growing window (for tests and views).
  bool windowGrew() const { return window_grew_; }

 private:
  struct Sample {
    uint64_t ns;
    int64_t bytes;
  };
  uint64_t window_ns_;
  std::deque<Sample> samples_;  // back to the newest sample at least window_ns_ old
  uint64_t run_start_ns_ = 0;   // start of the current non-decreasing run
  bool have_run_ = false;
  bool window_grew_ = false;
  bool suspect_ = false;
  int64_t entry_start_bytes_ = 0;
  uint64_t entry_span_ns_ = 0;
};

struct AnomalyOptions {
  double factor = 3.0;            // window mean > factor x baseline
  uint64_t min_syncs = 20;        // timed syncs in a window for it to count
  uint32_t baseline_windows = 10; // qualifying windows before a baseline exists; alpha = 1/this
};

// Launch->sync anomaly (the "3x" detector): each qualifying window (at least min_syncs timed
// syncs) has a mean; the baseline is an EWMA (alpha = 1/baseline_windows) over the
// non-anomalous qualifying windows, seeded by the first; it exists after baseline_windows of
// them. A window whose mean exceeds factor x baseline enters the anomaly (the baseline is
// frozen meanwhile); a qualifying window at or under factor x baseline clears it (and feeds
// the baseline). Windows with too few syncs change nothing.
class AnomalyDetector {
 public:
  explicit AnomalyDetector(AnomalyOptions options);

  // One interval's deltas of sync_ns_sum and timed_syncs.
  Transition update(uint64_t sync_ns_delta, uint64_t timed_syncs_delta);

  bool anomalous() const { return anomalous_; }
  bool hasBaseline() const { return windows_ >= options_.baseline_windows && windows_ > 0; }
  double baselineNs() const { return hasBaseline() ? baseline_ns_ : 0.0; }
  // The mean of the latest qualifying window (0 before any).
  double lastMeanNs() const { return last_mean_ns_; }

 private:
  AnomalyOptions options_;
  double alpha_;
  double baseline_ns_ = 0;
  uint64_t windows_ = 0;  // non-anomalous qualifying windows folded into the baseline
  double last_mean_ns_ = 0;
  bool anomalous_ = false;
};

// Over quota: a cgroup's live device bytes above its quota (0 = none).
class QuotaDetector {
 public:
  Transition update(int64_t bytes, uint64_t quota_bytes);
  bool over() const { return over_; }

 private:
  bool over_ = false;
};

struct QuotaRule {
  std::string match;  // container label, pod name, pod uid, container id prefix, or cgroup path prefix
  uint64_t max_device_bytes = 0;
};

// The quota of a container: the first rule that matches (exactly the label, the pod name or
// the pod uid; a prefix of the container id of at least 4 hex digits; a prefix of the cgroup
// path when the match starts with '/'), else `default_bytes`. An empty match never matches.
uint64_t quotaFor(const ContainerInfo& container, const std::vector<QuotaRule>& rules,
                  uint64_t default_bytes);
bool quotaRuleMatches(const QuotaRule& rule, const ContainerInfo& container);

// At most one log line per key per interval; the lines held back are counted and the next
// line allowed says how many. Bounded: at most `max_keys` keys (the stalest is dropped).
class LogRateLimiter {
 public:
  explicit LogRateLimiter(uint64_t interval_ns, size_t max_keys = 4096)
      : interval_ns_(interval_ns), max_keys_(max_keys) {}
  // True when a line for `key` may be written now; `*suppressed` is then the count of lines
  // held back for it since the previous one written.
  bool allow(const std::string& key, uint64_t now_ns, uint64_t* suppressed);
  size_t size() const { return keys_.size(); }

 private:
  struct Entry {
    uint64_t last_ns = 0;
    uint64_t suppressed = 0;
  };
  uint64_t interval_ns_;
  size_t max_keys_;
  std::unordered_map<std::string, Entry> keys_;
};

}  // namespace infergate::gpu
