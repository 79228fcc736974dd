#pragma once
// Batch formation for one model's batcher, with Triton's dynamic-batching semantics
// (docs/BATCHING.md "Batch formation", "One copy"): which queued requests make the
// next batch and when it is due (max batch size, compatible shapes, buffer room, preferred
// batch sizes, max queue delay), the batch's contiguous inputs (in place from the requests'
// slots, or gathered into a batch buffer), and the backend's outputs sliced back per request.
//
// Threading: select() runs under the batcher's mutex (it reads the queues); gather() and
// slice() run without it, on a batch that belongs to the caller. The model, config and arena
// must outlive the assembler.

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/batch.h"
#include "backends/batching_config.h"
#include "backends/model.h"
#include "backends/priority_queues.h"
#include "backends/slot_arena.h"

namespace infergate::backends {

class BatchAssembler {
 public:
  BatchAssembler(const ModelConfig& model, const BatchingConfig& config, SlotArena& arena)
      : model_(model), config_(config), arena_(arena) {}

  struct Selection {
    std::vector<QueuedRequest*> requests;  // the batch, in batch order, when due
    bool due = false;
    uint64_t wake_ns = UINT64_MAX;  // when not due: when the max queue delay makes it due
  };
  // The next batch from `queues` (not empty) at `now`: requests in strict priority order,
  // stopping at the first that cannot join (batch size, shape, a batch buffer's room); due
  // when that closes it, at max_batch_size, at the largest preferred size reached (the batch
  // cut to it), with no queue delay, or when the oldest has waited max_queue_delay_us.
  Selection select(const PriorityQueues& queues, uint64_t now) const;

  // What gather() copied: bytes from heap tensors (staged) and from slots out of place
  // (compacted); whether an input needed a heap buffer.
  struct Copies {
    uint64_t staged = 0;
    uint64_t compacted = 0;
    bool unpinned = false;
  };
  // Fills batch.inputs (and the buffers behind them: batch.slabs, batch.heap) from its
  // requests, input by input: in place when their slots are one contiguous run of one buffer,
  // else copied into a fresh batch buffer (a heap buffer when larger than one).
  Copies gather(Batch& batch) const;

  // The backend's `outputs` of `batch`, sliced per request (batch order) along the batch
  // dimension; INTERNAL for an output whose shape or size does not match the batch.
  absl::StatusOr<std::vector<std::vector<Tensor>>> slice(
      const Batch& batch, const std::vector<BatchTensor>& outputs) const;

 private:
  // Same shapes, the batch dimension aside.
  bool compatible(const QueuedRequest& a, const QueuedRequest& b) const;

  const ModelConfig& model_;
  const BatchingConfig& config_;
  SlotArena& arena_;
};

}  // namespace infergate::backends
