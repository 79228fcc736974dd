#pragma once
// The dynamic batcher of one model: priority levels with per-level queue policies, deadlines,
// overload shedding, and batch formation with Triton's dynamic-batching semantics (max batch
// size, preferred batch sizes, max queue delay). Rules in docs/BATCHING.md.
//
// The Batcher is a clock-driven state machine with no thread of its own: producers call
// enqueue()/cancel() from any thread; one dispatcher calls poll() to expire requests and take
// the next due batch, hands the batch to a BatchBackend, and calls complete() with its
// outputs, which slices them back per request and answers each request exactly once.
// BatchedModel (backends/batched_model.h) is that dispatcher; tests drive poll() directly
// with a ManualClock.
//
// Threading: every public method is safe from any thread (one mutex per model, held for
// queue bookkeeping only). Callbacks (InferCallback) are always invoked with the lock
// released: inline from enqueue() for refusals, from poll() for expiries, from cancel() for
// queued cancellations, from complete() for results.

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/batching_config.h"
#include "backends/model.h"
#include "backends/pinned_memory.h"
#include "backends/tensor.h"
#include "common/clock.h"
#include "common/priority.h"

namespace infergate::common {
class MetricsRegistry;
class Counter;
class Gauge;
class Histogram;
}  // namespace infergate::common

namespace infergate::backends {

// infergate's priority classes (the XDP program's tag): 0 (high), 1 (normal), 2 (low),
// 3 (background). See docs/BATCHING.md "Priority" for the mapping to Triton levels.
inline constexpr int kPriorityClasses = common::kPriorityClasses;
// The most classes the overload level sheds at the NIC: class 0 is never shed there.
inline constexpr int kMaxShedClasses = kPriorityClasses - 1;

// levelOfPriorityClass (a class's Triton level) is in backends/model.h.
// The overload level (how many of the lowest classes the NIC sheds) that stops every class
// whose Triton level is `level` or lower priority: the count of classes c with
// levelOfPriorityClass(c, levels) >= level, clamped to 1..kMaxShedClasses.
int shedClassesForLevel(uint32_t level, uint32_t levels);

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

// An input's batch buffer pool in POSIX shared memory: a co-located server that maps `key`
// reads a batch's input i at offset (inputs[i].data - base) when the data lies within it.
struct SharedBuffer {
  size_t input;
  std::string key;
  const uint8_t* base;
  size_t bytes;
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
};

// Backend outputs of a batch (views valid until complete() returns), or an error every
// request of the batch gets.
using BatchOutputs = absl::StatusOr<std::vector<BatchTensor>>;

class Batcher {
 public:
  // `clock` must outlive the batcher (nullptr: common::SteadyClock). `metrics` nullptr: no
  // metrics. `pinned` false: batch buffers in plain heap memory (tests). INVALID_ARGUMENT for
  // an inconsistent config (preferred size out of range, default level out of range, ...).
  static absl::StatusOr<std::unique_ptr<Batcher>> create(ModelConfig model, BatchingConfig config,
                                                         common::Clock* clock,
                                                         common::MetricsRegistry* metrics,
                                                         const PinnedOptions* pinned);
  ~Batcher();

  // Queues `request` (already validated against the model) and returns its ticket (> 0), or
  // answers it at once (UNAVAILABLE / RESOURCE_EXHAUSTED "Exceeds maximum queue size",
  // INVALID_ARGUMENT for a request the batcher cannot place) and returns 0. May also answer a
  // lower-priority queued request that it sheds to make room.
  uint64_t enqueue(InferRequest request, InferCallback done);

  // One-copy placement (Model::placeInputs): reserves, for every input of `request` (a decoded
  // header: name, dtype, shape and Tensor::slot_bytes set, no data), a slot in the batch buffer
  // that is filling for that input, sets Tensor::slot and request.slots, and returns true.
  // Slots are handed out in order, so requests placed one after another are contiguous and a
  // batch of them is dispatched from where they were decoded, with no further copy. False
  // (nothing placed) when the inputs do not match the model's, a slot would not fit a buffer,
  // or no buffer is free; the decoder then fills Tensor::data and the batcher copies it at
  // dispatch (counted as staged). Dropping the request releases its slots. Any thread.
  bool placeInputs(InferRequest& request);

  // Client gone: a queued request is removed and answered CANCELLED "Request cancelled" now;
  // one already in a batch is answered CANCELLED when the batch completes (its result slice is
  // dropped; neighbours are untouched). False when the ticket is unknown (already answered).
  bool cancel(uint64_t ticket);

  // Expires due requests, then takes the next batch if one is due and an in-flight slot (and
  // its batch buffers) is free; nullptr otherwise. `next_wake_ns` (optional) receives the
  // absolute time at which poll() has something to do even if nothing is enqueued or
  // completed meanwhile (UINT64_MAX: nothing).
  std::unique_ptr<Batch> poll(uint64_t* next_wake_ns = nullptr);

  // The backend finished `batch`: slices outputs per request and answers every request, frees
  // the batch buffers and the in-flight slot.
  void complete(std::unique_ptr<Batch> batch, BatchOutputs outputs);

  // Answers every queued request UNAVAILABLE "Model is shutting down" (in-flight batches are
  // still completed normally). Later enqueues are refused the same way.
  void shutdown();

  // Called (lock released, from the caller's thread) after anything that may make poll()
  // return a batch sooner: enqueue, cancel, complete, shutdown.
  void setNotify(std::function<void()> notify);

  // Overload publishing (docs/BATCHING.md "Overload level"): `listener(level)` is called,
  // lock released, whenever the overload level changes: 0 = not overloaded, k = shed the k
  // lowest priority classes (3 = background, 2 = low, 1 = normal). It rises when the model's
  // queues reach max_total_queue_size (to the classes of the lowest level) and further when a
  // higher level is refused or shed; it returns to 0 once the queues have drained to half of
  // max_total_queue_size (hysteresis). Never called without max_total_queue_size. Calls are
  // serialised and always carry the latest level. The listener is called once at once with the
  // current level when it is not 0.
  void setOverloadListener(std::function<void(int level)> listener);
  int overloadLevel() const { return overload_level_.load(std::memory_order_acquire); }

  // The level (1..levels) of a KServe priority: 0, negative or > levels -> default level
  // (Triton's rule).
  uint32_t levelOf(int64_t priority) const;
  size_t queued() const;
  size_t queued(uint32_t level) const;
  uint32_t inflight() const;
  const ModelConfig& model() const { return model_; }
  const BatchingConfig& config() const { return config_; }
  // Batch buffer pool of input i (pinned unless created with `pinned` nullptr).
  const SlabPool* pool(size_t input) const;
  // The input buffer pools that live in POSIX shared memory (`pinned->shared_key` set).
  std::vector<SharedBuffer> sharedBuffers() const;
  // One-copy reservations alive (placed requests not yet answered or dropped).
  size_t liveSlots() const;
  // Batch buffers per input: 2 x max_inflight_batches + kSpareBuffers (slots of queued
  // requests fill buffers while earlier batches run).
  static constexpr size_t kSpareBuffers = 6;

 private:
  struct Level {
    QueuePolicy policy;
    std::list<std::unique_ptr<QueuedRequest>> queue;    // unexpired, FIFO
    std::list<std::unique_ptr<QueuedRequest>> delayed;  // expired with DELAY, FIFO
    common::Gauge* depth = nullptr;
    common::Histogram* queue_time = nullptr;
    common::Counter* timeouts = nullptr;
    common::Counter* delayed_count = nullptr;
    common::Counter* rejected_full = nullptr;
    common::Counter* rejected_overload = nullptr;
    common::Counter* shed = nullptr;
    common::Counter* cancelled = nullptr;
    size_t size() const { return queue.size() + delayed.size(); }
  };
  struct Arena;
  class Slots;
  struct Answer {
    InferCallback done;
    absl::StatusOr<InferResponse> result;
  };

  Batcher(ModelConfig model, BatchingConfig config, common::Clock* clock);
  absl::Status init(common::MetricsRegistry* metrics, const PinnedOptions* pinned);
  absl::Status overloadStatus(std::string message) const;
  bool compatible(const QueuedRequest& a, const QueuedRequest& b) const;
  size_t inputBytes(const QueuedRequest& r, size_t input) const;
  void expireLocked(uint64_t now, std::vector<Answer>& answers);
  void recomputeDeadlineLocked();
  std::unique_ptr<QueuedRequest> removeLocked(QueuedRequest* r);
  void flush(std::vector<Answer>& answers);
  void notify();
  // Recomputes the overload level (and the overloaded gauge) after a change of queued_;
  // `refused_level`: the level of a request just refused or shed for overload (0: none).
  void updateOverloadLocked(uint32_t refused_level);
  void publishOverload();

  ModelConfig model_;
  BatchingConfig config_;
  common::Clock* clock_;
  std::function<void()> notify_;

  mutable std::mutex mu_;
  std::vector<Level> levels_;  // index level-1
  std::unordered_map<uint64_t, QueuedRequest*> tickets_;
  size_t queued_ = 0;
  uint32_t inflight_ = 0;
  uint64_t next_ticket_ = 1;
  uint64_t next_batch_ = 1;
  uint64_t next_deadline_ns_ = UINT64_MAX;
  bool shutdown_ = false;

  // Per input: the slab size; the buffers (pools, filling state, reference counts) live in the
  // arena, shared with the reservations so a reservation never outlives its memory.
  std::vector<size_t> slab_bytes_;
  std::shared_ptr<Arena> arena_;

  // Model-wide metrics (nullptr when none).
  common::Histogram* batch_size_ = nullptr;
  common::Histogram* fill_ratio_ = nullptr;
  common::Counter* batches_ = nullptr;
  common::Counter* bytes_copied_ = nullptr;
  common::Counter* bytes_received_ = nullptr;
  common::Counter* slot_bytes_ = nullptr;
  common::Counter* staged_bytes_ = nullptr;
  common::Counter* compacted_bytes_ = nullptr;
  common::Counter* unpinned_batches_ = nullptr;
  common::Counter* backend_errors_ = nullptr;
  common::Gauge* inflight_gauge_ = nullptr;
  common::Gauge* overloaded_ = nullptr;
  common::Gauge* overload_level_gauge_ = nullptr;

  // Overload level: written under mu_, published under publish_mu_.
  std::atomic<int> overload_level_{0};
  std::atomic<int> published_level_{0};
  std::mutex publish_mu_;
  std::function<void(int)> overload_listener_;  // guarded by publish_mu_
};

}  // namespace infergate::backends
