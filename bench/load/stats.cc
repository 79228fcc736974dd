#include "bench/load/stats.h"

#include <algorithm>

namespace infergate::bench {

uint64_t RunStats::errorCount() const {
  uint64_t n = 0;
  for (const auto& [k, v] : errors) n += v;
  return n;
}

void RunStats::merge(const RunStats& o) {
  latency.merge(o.latency);
  for (const auto& [p, l] : o.by_priority) {
    LevelStats& mine = by_priority[p];
    mine.latency.merge(l.latency);
    mine.ok += l.ok;
    mine.errors += l.errors;
  }
  for (const auto& [k, v] : o.errors) errors[k] += v;
  for (const auto& [k, v] : o.malformed) malformed[k] += v;
  malformed_latency.merge(o.malformed_latency);
  send_lag.merge(o.send_lag);
  late_sends += o.late_sends;
  queued_sends += o.queued_sends;
  max_backlog = std::max(max_backlog, o.max_backlog);
  connect_errors += o.connect_errors;
  sent += o.sent;
  ok += o.ok;
  completed_in_window += o.completed_in_window;
  if (timeline.size() < o.timeline.size()) timeline.resize(o.timeline.size());
  for (size_t i = 0; i < o.timeline.size(); ++i) timeline[i].merge(o.timeline[i]);
  if (timeline_completions.size() < o.timeline_completions.size()) {
    timeline_completions.resize(o.timeline_completions.size());
  }
  for (size_t i = 0; i < o.timeline_completions.size(); ++i) {
    timeline_completions[i] += o.timeline_completions[i];
  }
}

void RunStats::recordOk(int priority, uint64_t latency_ns, size_t interval) {
  latency.record(latency_ns);
  LevelStats& l = by_priority[priority];
  l.latency.record(latency_ns);
  ++l.ok;
  ++ok;
  if (interval >= timeline.size()) timeline.resize(interval + 1);
  timeline[interval].record(latency_ns);
}

void RunStats::recordError(int priority, const std::string& kind) {
  ++errors[kind];
  ++by_priority[priority].errors;
}

void RunStats::recordCompletion(size_t interval) {
  ++completed_in_window;
  if (interval >= timeline_completions.size()) timeline_completions.resize(interval + 1);
  ++timeline_completions[interval];
}

}  // namespace infergate::bench
