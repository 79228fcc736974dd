#include "backends/batch_metrics.h"

#include <algorithm>

namespace infergate::backends {

namespace {

constexpr const char* kRejectionsHelp =
    "Requests refused at enqueue (queue_full: the level's max_queue_size; overload: the "
    "model's max_total_queue_size with nothing lower to shed; gpu_unhealthy: a level the "
    "external overload level sheds, docs/GPU.md)";

common::Labels withReason(common::Labels labels, const char* reason) {
  labels.push_back({"reason", reason});
  return labels;
}

// Batch size buckets: 1..8, then powers of 2, up to max_batch_size (included).
std::vector<double> sizeBounds(int max_batch) {
  std::vector<double> bounds;
  for (int s = 1; s <= max_batch; s = s < 8 ? s + 1 : s * 2) bounds.push_back(s);
  if (bounds.back() != max_batch) bounds.push_back(max_batch);
  return bounds;
}

std::vector<double> fillBounds(int max_batch) {
  std::vector<double> bounds = sizeBounds(max_batch);
  for (double& b : bounds) b /= max_batch;
  return bounds;
}

}  // namespace

LevelMetrics::LevelMetrics(common::MetricsRegistry& r, const std::string& model, uint32_t level)
    : LevelMetrics(r, common::Labels{{"model", model}, {"level", std::to_string(level)}}) {}

LevelMetrics::LevelMetrics(common::MetricsRegistry& r, const common::Labels& labels)
    : depth(r.gauge("infergate_batcher_queue_depth",
                    "Requests queued in the batcher, per priority level", labels)),
      queue_time(r.histogram("infergate_batcher_queue_time_seconds",
                             "Time from enqueue to dispatch in a batch, per priority level",
                             labels, common::latencyBucketsSeconds(), 1e6)),
      timeouts(r.counter("infergate_batcher_timeouts_total",
                         "Queued requests whose deadline expired", labels)),
      delayed(r.counter("infergate_batcher_delayed_total",
                        "Expired requests moved behind unexpired ones (timeout_action DELAY)",
                        labels)),
      rejected_full(r.counter("infergate_batcher_rejections_total", kRejectionsHelp,
                              withReason(labels, "queue_full"))),
      rejected_overload(r.counter("infergate_batcher_rejections_total", kRejectionsHelp,
                                  withReason(labels, "overload"))),
      rejected_external(r.counter("infergate_batcher_rejections_total", kRejectionsHelp,
                                  withReason(labels, "gpu_unhealthy"))),
      shed(r.counter(
          "infergate_batcher_shed_total",
          "Queued requests dropped (and answered) to admit a higher-priority one under overload",
          labels)),
      cancelled(r.counter("infergate_batcher_cancellations_total",
                          "Requests cancelled by their client", labels)) {}

BatchMetrics::BatchMetrics(common::MetricsRegistry& r, const ModelConfig& m, uint32_t n_levels)
    : BatchMetrics(r, m, n_levels, common::Labels{{"model", m.name}},
                   std::max(1, m.max_batch_size)) {}

BatchMetrics::BatchMetrics(common::MetricsRegistry& r, const ModelConfig& m, uint32_t n_levels,
                           const common::Labels& labels, int max_batch)
    : registry(r),
      model(m.name),
      batch_size(r.histogram("infergate_batcher_batch_size",
                             "Rows (sum of batch dimensions) per dispatched batch", labels,
                             sizeBounds(max_batch), 1.0)),
      fill_ratio(r.histogram("infergate_batcher_batch_fill_ratio",
                             "Dispatched batch size / max_batch_size", labels,
                             fillBounds(max_batch), static_cast<double>(max_batch))),
      batches(r.counter("infergate_batcher_batches_total", "Batches dispatched", labels)),
      bytes_copied(r.counter(
          "infergate_batcher_bytes_copied_total",
          "Tensor bytes written by infergate after receipt, per accepted request: the decoder's "
          "write (into a slot or a heap tensor) plus staged and compacted copies at dispatch; "
          "equal to request_bytes when every byte was copied once",
          labels)),
      bytes_received(r.counter("infergate_batcher_request_bytes_total",
                               "Tensor bytes of requests accepted by the batcher (as received)",
                               labels)),
      slot_bytes(r.counter("infergate_batcher_slot_bytes_total",
                           "Tensor bytes decoded straight into batch buffer slots (the one copy)",
                           labels)),
      staged_bytes(r.counter(
          "infergate_batcher_staged_bytes_total",
          "Tensor bytes copied at dispatch from a heap tensor (request without a slot)", labels)),
      compacted_bytes(r.counter(
          "infergate_batcher_compacted_bytes_total",
          "Tensor bytes moved at dispatch inside batch buffers to make a batch contiguous",
          labels)),
      received_copy_bytes(r.counter(
          "infergate_batcher_received_copy_bytes_total",
          "Tensor bytes of accepted requests copied in userspace before the decoder's write "
          "(HTTP/1.1 body assembly, TCP receive buffer, gRPC gather); included in bytes_copied",
          labels)),
      refused_before_copy(r.counter(
          "infergate_batcher_refused_before_copy_total",
          "Requests refused by the queue policy once their headers were parsed, before any "
          "tensor byte was copied (their bodies are discarded unread)",
          labels)),
      unpinned_batches(r.counter(
          "infergate_batcher_unpinned_batches_total",
          "Batches whose input did not fit a pinned batch buffer (heap buffer used)", labels)),
      backend_errors(r.counter("infergate_batcher_backend_errors_total",
                               "Batches the backend failed", labels)),
      inflight(r.gauge("infergate_batcher_inflight_batches",
                       "Batches dispatched and not completed", labels)),
      overloaded(r.gauge(
          "infergate_batcher_overloaded",
          "1 while the model's queues are at max_total_queue_size (lowest levels are shed)",
          labels)),
      overload_level(r.gauge(
          "infergate_batcher_overload_level",
          "Overload level published for the NIC: how many of the lowest priority classes to shed",
          labels)),
      external_overload_level(r.gauge(
          "infergate_batcher_external_overload_level",
          "Overload level set from outside the queues (the GPU processes behind the model are "
          "over quota or in an anomaly, docs/GPU.md); the published level is the higher of the two",
          labels)) {
  levels.reserve(n_levels);
  for (uint32_t l = 1; l <= n_levels; ++l) levels.emplace_back(r, m.name, l);
}

void BatchMetrics::poolBytes(const std::string& input, PinnedKind kind, size_t bytes) {
  registry
      .gauge("infergate_pinned_pool_bytes", "Bytes of batch buffer pools, by memory kind",
             {{"model", model}, {"input", input}, {"kind", std::string(pinnedKindName(kind))}})
      .set(static_cast<int64_t>(bytes));
}

}  // namespace infergate::backends
