#pragma once
// The load engine: client threads, each with its own epoll loop, non-blocking connections
// (HTTP/1.1 keep-alive without pipelining, or HTTP/2 via nghttp2's client session with gRPC
// framing) and its share of the arrival schedule. No locks on the request path; each thread
// publishes its RunStats deltas a few times a second for the progress line.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/load/arrival.h"
#include "bench/load/request.h"
#include "bench/load/stats.h"

namespace infergate::bench {

enum class LoadMode { kOpen, kClosed };

struct EngineConfig {
  std::string host = "127.0.0.1";  // IPv4 or IPv6 literal, or a name resolved once
  uint16_t port = 8000;
  Protocol protocol = Protocol::kRest;
  int connections = 32;
  int threads = 1;
  double timeout_s = 10.0;             // per request; then the connection is closed
  uint64_t lag_threshold_ns = 1000000; // a send later than this counts as late
  uint64_t max_backlog = 1000000;      // per thread; beyond it due requests are dropped (counted)
  int h2_max_streams = 100;            // per connection, further capped by the server's setting
  uint64_t seed = 1;
  uint64_t interval_ns = 1000000000;   // timeline interval
  const std::vector<Variant>* variants = nullptr;
  const RequestMix* mix = nullptr;
};

struct LoadPhase {
  LoadMode mode = LoadMode::kOpen;
  Arrival arrival = Arrival::kConstant;
  double rate = 1000;       // open loop: requests per second, all threads together
  int concurrency = 32;     // closed loop: requests in flight, all threads together
  double warmup_s = 1;
  double duration_s = 10;
};

struct Progress {
  double elapsed_s = 0;     // since the start of the phase (warm-up included)
  bool warming_up = true;
  uint64_t completed = 0;   // responses in the measured window so far
  RunStats stats;           // merged so far
};

struct PhaseResult {
  RunStats stats;
  double measured_s = 0;    // length of the measured window
  double elapsed_s = 0;     // whole phase, drain included
  uint64_t unfinished = 0;  // requests still open when the drain deadline passed (also errors)
};

// Runs one phase; calls `progress` about once a second from the calling thread (may be empty).
// Fails only when the target cannot be resolved or a thread cannot start.
absl::StatusOr<PhaseResult> runPhase(const EngineConfig& cfg, const LoadPhase& phase,
                                     const std::function<void(const Progress&)>& progress);

// Monotonic clock in ns.
uint64_t nowNs();

}  // namespace infergate::bench
