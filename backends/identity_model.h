#pragma once
// The in-process `identity` model: returns each input as the output at the same position
// (OUTPUTi = INPUTi, renamed), for any datatype and shape the config allows. An optional cost
// model (fixed + per-item microseconds per call, the batch size being the leading dimension
// when max_batch_size > 0) makes it behave like a device that takes time, so batching and load
// can be studied without a GPU. With a cost, calls run on one worker thread in FIFO order
// (like one GPU stream) and complete from that thread; without, they complete inline.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "backends/batched_model.h"
#include "backends/model.h"

namespace infergate::backends {

// A simulated device stream for the identity cost model: jobs run in FIFO order, each taking
// fixed_us + per_item_us x items of device time; a job's completion callback runs on the
// stream's host thread when its device time has passed. Like a GPU stream, the device works
// asynchronously to that host thread: a job queued while the host thread was still running the
// previous completion (the batcher starts the next batch before answering the last one) starts
// on the device when it was queued, not when the callback returns. With no cost there is no
// thread and jobs run inline on the caller's thread. The destructor runs every accepted job
// first.
//
// Retirement (the model left the registry): the host thread exits once it has had no job for
// kRetireGraceMs and `upstream_idle()` says nothing more is coming; a job that arrives anyway
// starts it again. A retired model keeps no idle thread for the process's life.
class SimulatedDevice {
 public:
  static constexpr uint64_t kRetireGraceMs = 200;

  SimulatedDevice(uint64_t fixed_us, uint64_t per_item_us);
  ~SimulatedDevice();
  SimulatedDevice(const SimulatedDevice&) = delete;
  SimulatedDevice& operator=(const SimulatedDevice&) = delete;

  void run(uint64_t items, std::function<void()> job);
  // Never blocks. `upstream_idle` (nullptr: always idle) must stay callable for the device's
  // lifetime; it is called without the device's lock held.
  void retire(std::function<bool()> upstream_idle);
  // The host thread is running (tests). Any thread.
  bool hostThreadRunning() const;

 private:
  struct Job {
    uint64_t items;
    std::function<void()> fn;
    std::chrono::steady_clock::time_point queued;
  };
  void loop(bool set_timer_slack);
  // With mu_ held: (re)starts the host thread if it exited after retirement.
  void ensureWorkerLocked();

  const uint64_t fixed_us_, per_item_us_;
  const bool has_cost_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  bool stopping_ = false;
  bool retired_ = false;
  bool exited_ = false;  // the host thread returned (retired and idle); joined on restart
  std::function<bool()> upstream_idle_;
  std::thread worker_;
};

class IdentityModel : public Model {
 public:
  explicit IdentityModel(ModelConfig config);
  ~IdentityModel() override;

  const ModelConfig& config() const override { return config_; }
  bool ready() const override { return true; }
  void infer(InferRequest request, InferCallback done) override;
  void retire() override { device_.retire(nullptr); }

  // The response for `request` (no cost applied). Exposed for tests.
  InferResponse compute(InferRequest&& request) const;

 private:
  ModelConfig config_;
  SimulatedDevice device_;
};

// The identity model as a batch backend: each output is the input at the same position
// (a view of the batch buffer, renamed). Cost model per batch: fixed + per_item x batch.size
// microseconds, executed FIFO on one worker thread (like one GPU stream); without a cost,
// batches complete inline on the dispatcher thread.
class IdentityBatchBackend : public BatchBackend {
 public:
  explicit IdentityBatchBackend(ModelConfig config);
  ~IdentityBatchBackend() override;  // completes every accepted batch first
  void execute(const Batch& batch, BatchDone done) override;
  // The device's host thread exits once the batcher is drained (SimulatedDevice::retire).
  void retire(std::function<bool()> upstream_idle) override {
    device_.retire(std::move(upstream_idle));
  }
  bool deviceThreadRunning() const { return device_.hostThreadRunning(); }  // tests

 private:
  BatchOutputs outputs(const Batch& batch) const;

  ModelConfig config_;
  SimulatedDevice device_;
};

// Creates the backend a config names; INVALID_ARGUMENT for an unknown backend.
absl::StatusOr<std::unique_ptr<Model>> createModel(const ModelConfig& config);

// As above; with `batching` enabled (non-null, enabled), the model is a BatchedModel over the
// backend's BatchBackend, its metrics in `metrics` (nullptr: none) and its batch buffers
// allocated per `pinned` (nullptr: pageable memory).
absl::StatusOr<std::unique_ptr<Model>> createModel(const ModelConfig& config,
                                                   const BatchingConfig* batching,
                                                   common::MetricsRegistry* metrics,
                                                   const PinnedOptions* pinned);

}  // namespace infergate::backends
