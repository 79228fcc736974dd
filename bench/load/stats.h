#pragma once
// What one load run measured: latency histograms (log-linear, bounded relative error: see
// common/metrics.h), per priority level, over time, errors by kind, malformed-request outcomes,
// and the generator's own lateness. Each client thread fills its own RunStats; they are merged.
//
// Latencies are in nanoseconds. In open-loop runs a latency runs from the request's INTENDED
// send time (its slot in the arrival schedule) to the end of its response, so time spent
// waiting for a free connection behind a stalled server counts (coordinated-omission safe);
// in closed-loop runs it runs from the actual send.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/metrics.h"

namespace infergate::bench {

using common::LogLinearHistogram;

struct LevelStats {
  LogLinearHistogram latency;  // successful responses
  uint64_t ok = 0;
  uint64_t errors = 0;
};

struct RunStats {
  LogLinearHistogram latency;            // every successful response
  std::map<int, LevelStats> by_priority; // key: the priority sent (-1: none)
  std::map<std::string, uint64_t> errors;  // kind -> count ("timeout", "http_503", "grpc_8", ...)
  // Malformed requests: how they were answered ("<kind> <outcome>" -> count) and how fast.
  std::map<std::string, uint64_t> malformed;
  LogLinearHistogram malformed_latency;
  // Generator lateness: for every send, how long after it was due (or, when it had to wait for
  // a free connection, after that connection became free) it actually went out.
  LogLinearHistogram send_lag;
  uint64_t late_sends = 0;       // sends with a lag above the threshold
  uint64_t queued_sends = 0;     // open loop: sends that waited for a free connection
  uint64_t max_backlog = 0;
  uint64_t connect_errors = 0;   // failed connection attempts (not requests)      // open loop: most requests due and not yet sent, at once
  uint64_t sent = 0;             // requests sent in the measured window (by intended time)
  uint64_t ok = 0;               // successful responses to them
  uint64_t completed_in_window = 0;  // responses (any outcome) that ended inside the window
  // Per timeline interval (by intended time since the window's start): latency of successes,
  // and responses completed in the interval (by completion time).
  std::vector<LogLinearHistogram> timeline;
  std::vector<uint64_t> timeline_completions;

  uint64_t errorCount() const;
  void merge(const RunStats& other);
  void clear() { *this = RunStats(); }
  // Records a success at `interval` (grows the timeline as needed).
  void recordOk(int priority, uint64_t latency_ns, size_t interval);
  void recordError(int priority, const std::string& kind);
  void recordCompletion(size_t interval);
};

}  // namespace infergate::bench
