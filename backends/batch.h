#pragma once
// A batch as the batcher hands it to a BatchBackend (backends/batched_model.h), and the queued
// request it is made of. Built by BatchAssembler (backends/batch_assembler.h) from the requests
// PriorityQueues (backends/priority_queues.h) held; rules in docs/BATCHING.md.
//
// Threading: a Batch belongs to one thread at a time (the dispatcher, then the backend until
// its completion); QueuedRequest::cancelled and Batch::cancelled are guarded by the batcher's
// mutex; Batch::cancel is a thread-safe token (any thread).

#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/model.h"
#include "backends/tensor.h"
#include "net/cancel_token.h"

namespace infergate::backends {

// A view of one tensor of a whole batch: `data` points into a pinned batch buffer (inputs) or
// into memory the backend owns (outputs). With max_batch_size > 0 the leading dimension is the
// batch size.
struct BatchTensor {
  std::string name;
  DataType dtype = DataType::kFp32;
  std::vector<int64_t> shape;
  uint8_t* data = nullptr;
  size_t bytes = 0;
};

// One request inside the batcher. Owned by the batcher while queued, by its Batch once
// dispatched.
struct QueuedRequest {
  enum class State : uint8_t { kQueued, kDelayed, kInFlight };
  InferRequest request;  // inputs in the model's configured order
  InferCallback done;
  uint64_t ticket = 0;
  uint32_t level = 1;
  uint64_t enqueue_ns = 0;
  uint64_t deadline_ns = 0;  // 0 = none
  int64_t rows = 1;          // leading (batch) dimension; 1 when max_batch_size == 0
  State state = State::kQueued;
  bool cancelled = false;    // guarded by the batcher's mutex
  bool placed = false;       // request.slots is this batcher's reservation (one-copy path)
  std::list<std::unique_ptr<QueuedRequest>>::iterator pos;
};

// A batch handed to a backend. The backend reads inputs (and may read the requests, e.g. to
// forward ids); everything else is the batcher's.
struct Batch {
  uint64_t id = 0;
  int64_t size = 0;                // rows: sum of the requests' leading dimensions
  std::vector<BatchTensor> inputs; // in the model's configured input order, contiguous
  std::vector<std::unique_ptr<QueuedRequest>> requests;  // batch order
  // Buffers: per input, the pinned slab the batch holds a reference on (inputs[i].data points
  // into it: the requests' own slots when they are one contiguous run, else a slab the batch
  // was gathered into), or nullptr with a heap buffer when the batch is larger than a slab
  // (counted as unpinned).
  std::vector<uint8_t*> slabs;
  std::vector<std::vector<uint8_t>> heap;
  uint64_t dispatch_ns = 0;
  // Cancellation of the backend call (docs/BATCHING.md "Cancellation"): the batcher cancels
  // this token once every request of the batch is cancelled (all their clients went away); a
  // backend registers on it what cancelling its call means (Triton / TF Serving: the gRPC
  // call's RST_STREAM CANCEL, GrpcEndpoint::call) and then answers the batch CANCELLED. A batch
  // with a live request is never cancelled: it runs, and the cancelled requests' slices are
  // dropped. Set by Batcher::poll (never null for its batches); null: not cancellable.
  std::shared_ptr<net::CancelToken> cancel;
  uint32_t cancelled = 0;  // requests marked cancelled in flight; guarded by the batcher's mutex
};

// Backend outputs of a batch (views valid until complete() returns), or an error every
// request of the batch gets.
using BatchOutputs = absl::StatusOr<std::vector<BatchTensor>>;

}  // namespace infergate::backends
