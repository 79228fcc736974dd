#pragma once
// Dynamic batching configuration of one model (Triton's ModelDynamicBatching semantics, see
// docs/BATCHING.md). Plain values, no dependencies, so backends/model.h and config/ can hold
// it. Threading: read-only after start-up.

#include <cstdint>
#include <map>
#include <vector>

namespace infergate::backends {

enum class TimeoutAction : uint8_t {
  kReject,  // an expired queued request is answered UNAVAILABLE "Request timeout expired"
  kDelay,   // an expired request is moved behind every unexpired request of its level and above
};

// Requests a priority level queues by default. Triton's default is unbounded; ours is finite
// so that clients faster than the backend cannot grow the queues (and the request memory they
// hold) without limit: beyond it requests are refused at once with the overload status
// (503 UNAVAILABLE, or 429 RESOURCE_EXHAUSTED with overload_status: 429). 0 in the config
// still means unbounded, as an explicit choice.
inline constexpr uint64_t kDefaultMaxQueueSize = 1024;

// Triton's ModelQueuePolicy.
struct QueuePolicy {
  uint64_t max_queue_size = kDefaultMaxQueueSize;  // requests queued at this level; 0 = unbounded
  uint64_t default_timeout_us = 0;    // 0 = no timeout
  // A request's own timeout (KServe "timeout", µs) is honoured when true; it may only shorten a
  // non-zero default. (Triton's default is false; ours is true so the KServe parameter works
  // out of the box.)
  bool allow_timeout_override = true;
  TimeoutAction timeout_action = TimeoutAction::kReject;
};

struct BatchingConfig {
  bool enabled = true;
  // Batch sizes to aim for (each in 1..max_batch_size); empty = send the largest batch
  // available.
  std::vector<int> preferred_batch_sizes;
  // How long the oldest queued request may wait for a batch to fill (Triton's
  // max_queue_delay_microseconds); 0 = dispatch as soon as the backend can take a batch.
  uint64_t max_queue_delay_us = 0;
  // Levels 1..priority_levels, 1 the highest; 0 is treated as 1 level.
  uint32_t priority_levels = 1;
  // Level of requests with priority 0 (or out of range); 0 = the lowest level
  // (priority_levels), so unmarked traffic is shed first.
  uint32_t default_priority_level = 0;
  QueuePolicy default_queue_policy;
  std::map<uint32_t, QueuePolicy> priority_queue_policy;  // level -> policy
  // Requests queued across all levels of the model; 0 = unbounded. When reached, a request is
  // admitted only by shedding the newest request of a lower level (numerically greater);
  // otherwise it is refused.
  uint64_t max_total_queue_size = 0;
  // Status of queue-full / overload refusals: 503 (UNAVAILABLE) or 429 (RESOURCE_EXHAUSTED).
  // Timeouts are always 503.
  int overload_status = 503;
  // Batches dispatched and not yet completed (one per execution stream; also the number of
  // pinned batch buffers per input). At the limit, requests wait in their queues.
  uint32_t max_inflight_batches = 1;
  // Pinned batch buffer per input for inputs whose row size is not fixed (variable dimensions,
  // BYTES); fixed inputs get max_batch_size x row bytes.
  uint64_t variable_input_buffer_bytes = 1 << 20;
};

}  // namespace infergate::backends
