#pragma once
// The metrics of one model's batcher (docs/BATCHING.md "Metrics"): registered once when the
// batcher is created, recorded by the batcher, its queues and its assembler with relaxed adds.
// A batcher created without a registry records into a private one nobody reads.

#include <cstdint>
#include <string>
#include <vector>

#include "backends/model.h"
#include "backends/pinned_memory.h"
#include "common/metrics.h"

namespace infergate::backends {

// Per priority level (labels model, level).
struct LevelMetrics {
  LevelMetrics(common::MetricsRegistry& registry, const std::string& model, uint32_t level);

  common::Gauge& depth;            // requests queued
  common::Histogram& queue_time;   // enqueue -> dispatch, µs recorded in seconds
  common::Counter& timeouts;       // expired with REJECT
  common::Counter& delayed;        // expired with DELAY
  common::Counter& rejected_full;      // refused: the level's max_queue_size
  common::Counter& rejected_overload;  // refused: max_total_queue_size, nothing lower to shed
  common::Counter& rejected_external;  // refused: shed by the external overload level (GPU health)
  common::Counter& shed;           // queued, dropped for a higher level
  common::Counter& cancelled;      // cancelled by the client

 private:
  LevelMetrics(common::MetricsRegistry& registry, const common::Labels& labels);
};

// Per model (label model).
struct BatchMetrics {
  // `levels`: the model's priority levels (1..levels).
  BatchMetrics(common::MetricsRegistry& registry, const ModelConfig& model, uint32_t levels);

  // Level `level` (1..levels).
  LevelMetrics& level(uint32_t level) { return levels[level - 1]; }
  // infergate_pinned_pool_bytes of input `input`'s batch buffer pool.
  void poolBytes(const std::string& input, PinnedKind kind, size_t bytes);

  common::MetricsRegistry& registry;
  const std::string model;
  std::vector<LevelMetrics> levels;  // index level-1
  common::Histogram& batch_size;     // rows per dispatched batch
  common::Histogram& fill_ratio;     // rows / max_batch_size
  common::Counter& batches;
  // One copy accounting (docs/BATCHING.md "One copy").
  common::Counter& bytes_copied;
  common::Counter& bytes_received;
  common::Counter& slot_bytes;
  common::Counter& staged_bytes;
  common::Counter& compacted_bytes;
  common::Counter& received_copy_bytes;  // InferRequest::received_copy_bytes of accepted requests
  common::Counter& refused_before_copy;  // Batcher::admission refusals
  common::Counter& unpinned_batches;
  common::Counter& backend_errors;
  common::Gauge& inflight;
  common::Gauge& overloaded;
  common::Gauge& overload_level;
  common::Gauge& external_overload_level;

 private:
  BatchMetrics(common::MetricsRegistry& registry, const ModelConfig& model, uint32_t levels,
               const common::Labels& labels, int max_batch);
};

}  // namespace infergate::backends
