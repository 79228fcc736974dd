#pragma once
// A Model that batches: requests go through a Batcher (priorities, deadlines, dynamic
// batching) and whole batches run on a BatchBackend. The identity model's batch backend lives
// in backends/identity_model.h; the Triton / TF Serving adapters implement BatchBackend too.
//
// Threading: infer()/submit()/cancel() from any thread (reactors). Who dispatches
// (docs/BATCHING.md "Who dispatches"): a reactor that enqueued requests dispatches the due
// batches itself at the end of its loop iteration (net/burst.h), so a burst of requests
// becomes one batch with no thread hop; a backend that completes on its own thread starts the
// next due batch there before answering the finished one; the model's dispatcher thread only
// handles what is due later (max_queue_delay_us, deadlines) and enqueues from non-reactor
// threads. Results are answered from whichever thread the backend completes on
// (InferCallback may run on any thread).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "backends/batcher.h"
#include "backends/model.h"
#include "net/burst.h"

namespace infergate::backends {

// Completion of a batch: outputs (views that must stay valid until the call returns), or an
// error every request of the batch gets. Exactly once, from any thread.
using BatchDone = std::function<void(BatchOutputs)>;

class BatchBackend {
 public:
  virtual ~BatchBackend() = default;
  // Runs `batch` (inputs contiguous in batch.inputs; with max_batch_size > 0 their leading
  // dimension is batch.size) and calls `done` exactly once. `batch` stays valid until `done`
  // returns. The destructor must complete (call `done` for) every batch it accepted.
  virtual void execute(const Batch& batch, BatchDone done) = 0;
  // Called once by BatchedModel::create, after the batcher exists and before the first
  // execute(), with the batcher's input buffers that live in shared memory (empty: none). A
  // remote backend starts here (start-up probes, shared memory registration); an error fails
  // the model's creation.
  virtual absl::Status prepare(const std::vector<SharedBuffer>& buffers) {
    (void)buffers;
    return absl::OkStatus();
  }
  // GPU health (docs/GPU.md "Closing the loop"): the endpoints (host:port) the backend sends
  // to (empty: in-process), and a mark on those whose GPU process is unhealthy, which a pool
  // picks only when no unmarked endpoint is healthy. Any thread.
  virtual std::vector<std::string> endpoints() const { return {}; }
  virtual void setEndpointDegraded(const std::string& address, bool degraded) {
    (void)address;
    (void)degraded;
  }
  // Live endpoint change (Model::checkEndpoints / setEndpoints): default UNIMPLEMENTED (an
  // in-process backend has none). Any thread.
  virtual absl::Status checkEndpoints(const std::vector<std::string>& endpoints) const {
    (void)endpoints;
    return absl::UnimplementedError("this backend has no endpoints to change");
  }
  virtual absl::Status setEndpoints(const std::vector<std::string>& endpoints) {
    (void)endpoints;
    return absl::UnimplementedError("this backend has no endpoints to change");
  }
  // The model is no longer served (Model::retire): once `upstream_idle()` (the batcher holds
  // nothing queued) and the backend has nothing in flight, stop background threads and close
  // connections. Must not block. `upstream_idle` stays valid for the backend's lifetime.
  // Default: nothing to stop.
  virtual void retire(std::function<bool()> upstream_idle) { (void)upstream_idle; }
};

class BatchedModel : public Model {
 public:
  // `metrics`: nullptr for none (tests); normally &common::MetricsRegistry::global().
  // `pinned`: nullptr for plain pageable batch buffers. `clock`: nullptr for the steady clock.
  static absl::StatusOr<std::unique_ptr<BatchedModel>> create(ModelConfig config,
                                                              BatchingConfig batching,
                                                              std::unique_ptr<BatchBackend> backend,
                                                              common::MetricsRegistry* metrics,
                                                              const PinnedOptions* pinned,
                                                              common::Clock* clock = nullptr);
  ~BatchedModel() override;

  const ModelConfig& config() const override { return batcher_->model(); }
  bool ready() const override { return true; }
  // Registers request.cancel (when set) to cancel the request's ticket (Batcher::cancel): a
  // queued request leaves at once; a batch whose every request is cancelled has its backend
  // call cancelled (Batch::cancel; a batch cancelled before it reached the backend is answered
  // CANCELLED without being sent).
  void infer(InferRequest request, InferCallback done) override;
  // Slots in the batch buffers (Batcher::placeInputs).
  bool placeInputs(InferRequest& request) override { return batcher_->placeInputs(request); }
  // Refuse before copying (Batcher::admission).
  absl::Status admission(int64_t priority) override { return batcher_->admission(priority); }

  // As infer(), returning the ticket cancel() takes (0: already answered).
  uint64_t submit(InferRequest request, InferCallback done);
  // The client went away; see Batcher::cancel.
  bool cancel(uint64_t ticket);

  // Overload publishing (Model::setOverloadListener): the batcher's overload level
  // (Batcher::setOverloadListener). Cleared by the destructor.
  void setOverloadListener(OverloadListener listener) override {
    batcher_->setOverloadListener(std::move(listener));
  }
  // GPU health: Batcher::setExternalOverload and the backend's endpoints.
  void setExternalOverload(int level) override { batcher_->setExternalOverload(level); }
  std::vector<std::string> backendEndpoints() const override { return backend_->endpoints(); }
  void setEndpointDegraded(const std::string& address, bool degraded) override {
    backend_->setEndpointDegraded(address, degraded);
  }
  // Live endpoint change and retirement: forwarded to the backend (BatchBackend); retire()
  // passes "the batcher has nothing queued" as the backend's upstream_idle. Retirement also
  // ends the dispatcher thread: it keeps dispatching (due batches, delays, deadlines) until
  // nothing has been queued and nothing has woken it for kRetireGraceMs (a request that found
  // the model just before its removal is still served), then closes the batcher (later
  // requests: UNAVAILABLE "Model was removed by a configuration reload") and exits; batches in
  // flight complete on their backend's threads. A request is either queued before the close,
  // and served, or refused after it.
  static constexpr uint64_t kRetireGraceMs = 200;
  absl::Status checkEndpoints(const std::vector<std::string>& endpoints) const override {
    return backend_->checkEndpoints(endpoints);
  }
  absl::Status setEndpoints(const std::vector<std::string>& endpoints) override {
    return backend_->setEndpoints(endpoints);
  }
  void retire() override;
  // The dispatcher thread has exited after retire() (tests). Any thread.
  bool dispatcherStopped() const { return dispatcher_stopped_.load(std::memory_order_acquire); }
  // The batching config's priority_levels (1 = highest .. N).
  uint32_t priorityLevels() const override { return batcher_->config().priority_levels; }

  Batcher& batcher() { return *batcher_; }
  const Batcher& batcher() const { return *batcher_; }

 private:
  // The model's end-of-burst task; `model` is cleared (under `mu`) by the destructor, so a
  // reactor holding the task after the model is gone does nothing.
  struct BurstDispatch : net::BurstTask {
    void runAtBurstEnd() override;
    std::mutex mu;
    BatchedModel* model = nullptr;
  };

  BatchedModel(std::unique_ptr<Batcher> batcher, std::unique_ptr<BatchBackend> backend,
               common::Clock* clock);
  void dispatchLoop();
  // The batcher's notify: something may be due. Deferred to the end of the burst on a reactor,
  // nothing inside dispatchDue() on this thread (its loop polls again), the dispatcher
  // thread's wake-up otherwise.
  void onNotify();
  // Polls and executes every due batch on the calling thread; returns when poll() has
  // something to do next (UINT64_MAX: nothing). Re-entry on the same thread (a backend that
  // completes inline) returns UINT64_MAX at once.
  uint64_t dispatchDue();
  // dispatchDue(), then the dispatcher armed for what is due later (a reactor's burst end, a
  // completing backend thread).
  void dispatchDueAndArm();
  void execute(std::unique_ptr<Batch> batch);
  // Makes sure the dispatcher thread polls by `wake_ns`.
  void armDispatcher(uint64_t wake_ns);
  void wakeDispatcher();

  std::unique_ptr<Batcher> batcher_;
  std::unique_ptr<BatchBackend> backend_;
  common::Clock* clock_;
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t wakeups_ = 0;  // guarded by mu_; bumped by the batcher's notify
  bool stopping_ = false;
  // retire() was called: the dispatcher exits once the batcher is drained (closeIfDrained);
  // store in retire(), load in dispatchLoop() and dispatchDueAndArm().
  std::atomic<bool> retired_{false};
  std::atomic<bool> dispatcher_stopped_{false};  // store at the dispatcher's exit
  // When the sleeping dispatcher wakes on its own (UINT64_MAX: only when woken); 0 while it
  // is awake (it polls again before sleeping).
  std::atomic<uint64_t> dispatcher_sleep_until_{0};
  std::shared_ptr<BurstDispatch> burst_;
  // What the requests' cancel tokens reach the batcher through: the tokens live with the
  // connections and may outlive the model; the destructor clears `batcher` (under `mu`, so it
  // waits for a canceller running). Recursive: a canceller's answers may cancel again inline.
  struct Lifeline {
    std::recursive_mutex mu;
    Batcher* batcher = nullptr;
  };
  std::shared_ptr<Lifeline> lifeline_;
  std::thread dispatcher_;
};

}  // namespace infergate::backends
