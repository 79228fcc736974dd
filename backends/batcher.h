#pragma once
// The dynamic batcher of one model: priority levels with per-level queue policies, deadlines,
// overload shedding, and batch formation with Triton's dynamic-batching semantics (max batch
// size, preferred batch sizes, max queue delay). Rules in docs/BATCHING.md.
//
// The Batcher is a clock-driven state machine with no thread of its own: producers call
// enqueue()/cancel() from any thread; one dispatcher calls poll() to expire requests and take
// the next due batch, hands the batch to a BatchBackend, and calls complete() with its
// outputs, which slices them back per request and answers each request exactly once.
// The parts: PriorityQueues (backends/priority_queues.h: levels, policies, deadlines, shedding,
// the overload level), SlotArena (backends/slot_arena.h: the batch buffers and one-copy slots),
// BatchAssembler (backends/batch_assembler.h: forming a batch, its inputs, slicing its outputs)
// and BatchMetrics (backends/batch_metrics.h); the Batcher holds the lock and answers requests.
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
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/batch.h"
#include "backends/batch_assembler.h"
#include "backends/batch_metrics.h"
#include "backends/batching_config.h"
#include "backends/model.h"
#include "backends/pinned_memory.h"
#include "backends/priority_queues.h"
#include "backends/slot_arena.h"
#include "common/clock.h"

namespace infergate::backends {

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
  // Refuse before copying (Model::admission): the status enqueue() would refuse a request of
  // `priority` with now — shutting down (UNAVAILABLE), its level at max_queue_size, or the model
  // at max_total_queue_size with no lower level queued to shed (overload_status) — counted like
  // an enqueue refusal plus refused_before_copy; OK otherwise (nothing is reserved). Any thread.
  absl::Status admission(int64_t priority);

  // Client gone: a queued request is removed and answered CANCELLED "Request cancelled" now;
  // one already in a batch is answered CANCELLED when the batch completes (its result slice is
  // dropped; neighbours are untouched), and when it was the batch's last live request the
  // batch's token (Batch::cancel) is cancelled, lock released, so the backend cancels its call.
  // Counted in infergate_requests_cancelled_total{stage="queued"|"in_flight"} and
  // infergate_batcher_batches_cancelled_total. False when the ticket is unknown (already
  // answered).
  bool cancel(uint64_t ticket);

  // Expires due requests, then takes the next batch if one is due and an in-flight slot (and
  // its batch buffers) is free; nullptr otherwise. `next_wake_ns` (optional) receives the
  // absolute time at which poll() has something to do even if nothing is enqueued or
  // completed meanwhile (UINT64_MAX: nothing).
  std::unique_ptr<Batch> poll(uint64_t* next_wake_ns = nullptr);

  // The backend finished `batch`: slices outputs per request and answers every request, frees
  // the batch buffers and the in-flight slot. `before_answers` (optional) runs once the
  // in-flight slot and the buffers are free and before any request is answered: the
  // dispatcher starts the next batch there, so the device is not idle while this batch's
  // answers go out; with it, complete() does not call the notify callback (the caller has
  // just polled).
  void complete(std::unique_ptr<Batch> batch, BatchOutputs outputs,
                const std::function<void()>& before_answers = nullptr);

  // Answers every queued request UNAVAILABLE "Model is shutting down" (in-flight batches are
  // still completed normally). Later enqueues are refused the same way.
  void shutdown();
  // Retirement (BatchedModel::retire): when nothing is queued, closes the batcher as shutdown()
  // does, with `message` for later refusals (enqueue, admission: UNAVAILABLE), and returns
  // true; false, nothing changed, while a request is queued (it is still dispatched). In-flight
  // batches complete normally either way. Atomic with enqueue(): a request is either queued
  // before the close (and served) or refused after it, never dropped.
  bool closeIfDrained(std::string message);

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

  // Closing the GPU loop (docs/GPU.md "Closing the loop"): an overload level from outside the
  // queues (0 .. kMaxShedClasses; the app sets it while the GPU processes behind the model are
  // over their memory quota or in a latency anomaly). The published level (the listener's: the
  // NIC's) is the higher of the queues' and this one. While it is n > 0, requests of a level
  // that only the n shed classes map to (shedClassesForLevel(level) <= n) are refused with the
  // overload status, before copying (admission) and at enqueue, counted as
  // rejections{reason="gpu_unhealthy"}. Any thread.
  void setExternalOverload(int level);
  int externalOverload() const { return external_level_.load(std::memory_order_acquire); }
  // The level published to the listener: max(overloadLevel(), externalOverload()).
  int publishedLevel() const;

  // The level (1..levels) of a KServe priority: 0, negative or > levels -> default level
  // (Triton's rule).
  uint32_t levelOf(int64_t priority) const;
  // The Retry-After hint (seconds, 1..60; docs/ERRORS.md "Retry-After") a refusal of a request
  // of `priority` would carry now: the time for the requests queued at its level and above to
  // be served, at the measured service time per batch (every completed batch's dispatch ->
  // complete time: the first replaces the configured cost_fixed_us + cost_per_item_us x
  // max_batch_size, later ones are averaged in with weight 1/4), max_batch_size requests per
  // batch and max_inflight_batches batches at once. Queue refusals and sheds carry it.
  uint32_t retryAfterSeconds(int64_t priority) const;
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
  Batcher(ModelConfig model, BatchingConfig config, common::Clock* clock,
          std::unique_ptr<common::MetricsRegistry> own_registry,
          std::unique_ptr<BatchMetrics> metrics, std::shared_ptr<SlotArena> arena);
  void notify();
  // Recomputes the overload level (and the overloaded gauges) after a change of the queues;
  // `refused_level`: the level of a request just refused or shed for overload (0: none).
  void updateOverloadLocked(uint32_t refused_level);
  void publishOverload();
  // A batch took `batch_ns` from dispatch to complete: the Retry-After service estimate.
  void updateServiceEstimateLocked(uint64_t batch_ns);
  // The external level refuses requests of `level` (called under mu_).
  bool externallyShed(uint32_t level) const;

  const ModelConfig model_;
  const BatchingConfig config_;
  common::Clock* clock_;
  std::function<void()> notify_;  // guarded by mu_

  std::unique_ptr<common::MetricsRegistry> own_registry_;  // when created without one
  std::unique_ptr<BatchMetrics> metrics_;
  // Shared with the reservations, so a reservation never outlives its memory.
  std::shared_ptr<SlotArena> arena_;
  BatchAssembler assembler_;

  mutable std::mutex mu_;
  PriorityQueues queues_;  // guarded by mu_
  uint32_t inflight_ = 0;
  uint64_t measured_batches_ = 0;  // guarded by mu_; batches measured for the service estimate
  std::vector<Batch*> inflight_batches_;  // guarded by mu_; poll() adds, complete() removes
  uint64_t next_batch_ = 1;
  // Cancellation counters (cancel()); set by create().
  common::Counter* cancelled_queued_ = nullptr;
  common::Counter* cancelled_inflight_ = nullptr;
  common::Counter* batches_cancelled_ = nullptr;
  bool shutdown_ = false;
  std::string shutdown_message_ = "Model is shutting down";  // guarded by mu_

  // Overload level: written under mu_, published under publish_mu_.
  std::atomic<int> overload_level_{0};
  std::atomic<int> external_level_{0};  // setExternalOverload; read by publishOverload, admission
  std::atomic<int> published_level_{0};
  std::mutex publish_mu_;
  std::function<void(int)> overload_listener_;  // guarded by publish_mu_
};

}  // namespace infergate::backends
