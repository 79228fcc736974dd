#pragma once
// What a connection may hold for a peer that does not read: the send timeout (minimum drain
// rate) and the output memory budgets, per connection and per process. Both transports apply
// the same rules (socket mode to its userspace write queue, afxdp mode to the TCP stack's send
// buffer); see docs/OPERATIONS.md ("Slow readers and output memory").
//
// - Send timeout: while a connection has bytes queued, it must drain at least
//   `min_drain_bytes` every `send_timeout_ns` (to the kernel in socket mode, acknowledged by
//   the peer in afxdp mode); otherwise it is closed (RST) and counted (send_timeouts).
// - Per connection: reading pauses (no new requests are parsed or dispatched) while the queue
//   holds `max_bytes_per_connection / 2` or more, and resumes when it drains below that. A
//   send() that would take a non-empty queue past `max_bytes_per_connection` closes the
//   connection (RST) and is counted with the bytes it discards. One response larger than the
//   limit is still accepted onto an empty queue (the client asked for it and is reading).
// - Per process: `used` counts the bytes queued by every reactor (the infergate_output_bytes
//   gauge). While it is at or over `max_bytes / 2`, connections with anything queued pause
//   reading; a send() that would take it past `max_bytes` onto a non-empty queue closes that
//   connection (counted). Connections whose queue is empty keep being served.
//
// Threading: the struct is read-only after start-up; `used` is updated by every reactor
// (a relaxed atomic: it is a budget, not a synchronisation point).

#include <cstdint>

#include "common/metrics.h"

namespace infergate::dataplane {

// Why a transport closed a connection for its output.
enum class OutputCloseReason : uint8_t {
  kNone,
  kSendTimeout,      // less than min_drain_bytes drained in send_timeout_ns
  kConnectionLimit,  // max_bytes_per_connection
  kProcessLimit,     // max_bytes
};

struct OutputLimits {
  uint64_t send_timeout_ns = 30'000'000'000ull;  // 0: no send timeout
  uint64_t min_drain_bytes = 16 * 1024;          // progress needed per send_timeout_ns
  uint64_t max_bytes_per_connection = 64ull << 20;  // 0: unlimited
  uint64_t max_bytes = 1ull << 30;               // per process; 0: unlimited
  common::Gauge* used = nullptr;                 // process-wide queued bytes; nullptr: not
                                                 // counted, no process budget (admin listener)

  // Reading pauses for a connection holding this much (0: never for its own queue).
  uint64_t pauseBytes() const { return max_bytes_per_connection / 2; }
  int64_t usedNow() const { return used != nullptr ? used->value() : 0; }
  // The process is at half its budget: connections with output queued pause reading.
  bool globalPause() const {
    return used != nullptr && max_bytes != 0 && usedNow() >= static_cast<int64_t>(max_bytes / 2);
  }
  // Queuing `extra` more bytes would take the process past its budget.
  bool globalOver(uint64_t extra) const {
    return used != nullptr && max_bytes != 0 &&
           usedNow() + static_cast<int64_t>(extra) > static_cast<int64_t>(max_bytes);
  }
  // Queuing `len` bytes onto a queue holding `pending` is refused (the connection is closed).
  OutputCloseReason refuse(uint64_t pending, uint64_t len) const;
};

// The process-wide gauge for OutputLimits::used: infergate_output_bytes in `registry`.
common::Gauge& outputBytesGauge(common::MetricsRegistry& registry);

inline OutputCloseReason OutputLimits::refuse(uint64_t pending, uint64_t len) const {
  if (pending == 0) return OutputCloseReason::kNone;  // one response onto an empty queue
  if (max_bytes_per_connection != 0 && pending + len > max_bytes_per_connection) {
    return OutputCloseReason::kConnectionLimit;
  }
  if (globalOver(len)) return OutputCloseReason::kProcessLimit;
  return OutputCloseReason::kNone;
}

}  // namespace infergate::dataplane
