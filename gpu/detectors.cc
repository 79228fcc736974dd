#include "gpu/detectors.h"

#include <algorithm>
#include <string_view>

namespace infergate::gpu {

Transition LeakDetector::update(uint64_t now_ns, int64_t bytes,
                                const std::function<bool()>& has_old_allocs) {
  if (!have_run_ || (!samples_.empty() && bytes < samples_.back().bytes)) {
    run_start_ns_ = now_ns;  // a decrease (or the first sample) starts a new monotonic run
    have_run_ = true;
  }
  samples_.push_back({now_ns, bytes});
  // Keep the newest sample that is at least a window old as the window's start (and always
  // two samples, so a zero window still compares two).
  while (samples_.size() > 2 && samples_[1].ns + window_ns_ <= now_ns) samples_.pop_front();
  const Sample& start = samples_.front();
  window_grew_ = samples_.size() >= 2 && start.ns + window_ns_ <= now_ns &&
                 start.ns >= run_start_ns_ && bytes > start.bytes;

  if (suspect_) {
    if (bytes < entry_start_bytes_) {
      suspect_ = false;
      entry_start_bytes_ = 0;
      entry_span_ns_ = 0;
      return Transition::kCleared;
    }
    return Transition::kNone;
  }
  if (window_grew_ && has_old_allocs && has_old_allocs()) {
    suspect_ = true;
    entry_start_bytes_ = start.bytes;
    entry_span_ns_ = now_ns - start.ns;
    return Transition::kEntered;
  }
  return Transition::kNone;
}

AnomalyDetector::AnomalyDetector(AnomalyOptions options) : options_(options) {
  if (options_.baseline_windows == 0) options_.baseline_windows = 1;
  alpha_ = 1.0 / static_cast<double>(options_.baseline_windows);
}

Transition AnomalyDetector::update(uint64_t sync_ns_delta, uint64_t timed_syncs_delta) {
  if (timed_syncs_delta == 0 || timed_syncs_delta < options_.min_syncs) return Transition::kNone;
  const double mean = static_cast<double>(sync_ns_delta) / static_cast<double>(timed_syncs_delta);
  last_mean_ns_ = mean;
  Transition t = Transition::kNone;
  if (hasBaseline()) {
    const bool high = mean > options_.factor * baseline_ns_;
    if (anomalous_) {
      if (high) return Transition::kNone;  // the baseline stays frozen
      anomalous_ = false;
      t = Transition::kCleared;
    } else if (high) {
      anomalous_ = true;
      return Transition::kEntered;
    }
  }
  baseline_ns_ = windows_ == 0 ? mean : baseline_ns_ + alpha_ * (mean - baseline_ns_);
  ++windows_;
  return t;
}

Transition QuotaDetector::update(int64_t bytes, uint64_t quota_bytes) {
  const bool over = quota_bytes > 0 && bytes > 0 && static_cast<uint64_t>(bytes) > quota_bytes;
  if (over == over_) return Transition::kNone;
  over_ = over;
  return over ? Transition::kEntered : Transition::kCleared;
}

namespace {

bool isHex(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
  });
}

bool equalsIgnoreCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

}  // namespace

bool quotaRuleMatches(const QuotaRule& rule, const ContainerInfo& c) {
  const std::string& m = rule.match;
  if (m.empty()) return false;
  if (m[0] == '/') return c.cgroup_path.compare(0, m.size(), m) == 0;
  if (m == c.label() || (!c.pod_name.empty() && m == c.pod_name)) return true;
  if (!c.pod_uid.empty() && equalsIgnoreCase(m, c.pod_uid)) return true;
  if (m.size() >= 4 && isHex(m) && c.container_id.size() >= m.size() &&
      equalsIgnoreCase(m, std::string_view(c.container_id).substr(0, m.size())))
    return true;
  return false;
}

uint64_t quotaFor(const ContainerInfo& container, const std::vector<QuotaRule>& rules,
                  uint64_t default_bytes) {
  for (const QuotaRule& r : rules)
    if (quotaRuleMatches(r, container)) return r.max_device_bytes;
  return default_bytes;
}

bool LogRateLimiter::allow(const std::string& key, uint64_t now_ns, uint64_t* suppressed) {
  auto it = keys_.find(key);
  if (it == keys_.end()) {
    if (keys_.size() >= max_keys_ && max_keys_ > 0) {
      auto stalest = keys_.begin();
      for (auto i = keys_.begin(); i != keys_.end(); ++i)
        if (i->second.last_ns < stalest->second.last_ns) stalest = i;
      keys_.erase(stalest);
    }
    keys_.emplace(key, Entry{now_ns, 0});
    if (suppressed) *suppressed = 0;
    return true;
  }
  Entry& e = it->second;
  if (now_ns >= e.last_ns + interval_ns_) {
    if (suppressed) *suppressed = e.suppressed;
    e.suppressed = 0;
    e.last_ns = now_ns;
    return true;
  }
  ++e.suppressed;
  return false;
}

}  // namespace infergate::gpu
