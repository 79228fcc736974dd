#include "backends/batched_model.h"

#include <chrono>
#include <utility>

namespace infergate::backends {

absl::StatusOr<std::unique_ptr<BatchedModel>> BatchedModel::create(
    ModelConfig config, BatchingConfig batching, std::unique_ptr<BatchBackend> backend,
    common::MetricsRegistry* metrics, const PinnedOptions* pinned, common::Clock* clock) {
  if (clock == nullptr) clock = &common::SteadyClock::instance();
  absl::StatusOr<std::unique_ptr<Batcher>> b =
      Batcher::create(std::move(config), std::move(batching), clock, metrics, pinned);
  if (!b.ok()) return b.status();
  absl::Status prepared = backend->prepare((*b)->sharedBuffers());
  if (!prepared.ok()) return prepared;
  return std::unique_ptr<BatchedModel>(
      new BatchedModel(std::move(*b), std::move(backend), clock));
}

BatchedModel::BatchedModel(std::unique_ptr<Batcher> batcher, std::unique_ptr<BatchBackend> backend,
                           common::Clock* clock)
    : batcher_(std::move(batcher)), backend_(std::move(backend)), clock_(clock) {
  batcher_->setNotify([this] {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++wakeups_;
    }
    cv_.notify_one();
  });
  dispatcher_ = std::thread([this] { dispatchLoop(); });
}

BatchedModel::~BatchedModel() {
  batcher_->setOverloadListener(nullptr);  // the listener's target may be gone first
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (dispatcher_.joinable()) dispatcher_.join();
  batcher_->shutdown();            // queued requests: UNAVAILABLE
  backend_.reset();                // completes every batch it accepted
  batcher_->setNotify(nullptr);
}

void BatchedModel::infer(InferRequest request, InferCallback done) {
  submit(std::move(request), std::move(done));
}

uint64_t BatchedModel::submit(InferRequest request, InferCallback done) {
  std::shared_ptr<net::CancelToken> token = request.cancel;
  const uint64_t ticket = batcher_->enqueue(std::move(request), std::move(done));
  // Registered after enqueue: a cancel in between finds the token cancelled and runs the
  // canceller now; one after the answer finds the ticket gone (a no-op).
  if (ticket != 0 && token) {
    Batcher* b = batcher_.get();
    token->onCancel([b, ticket] { b->cancel(ticket); });
  }
  return ticket;
}

bool BatchedModel::cancel(uint64_t ticket) { return batcher_->cancel(ticket); }

void BatchedModel::dispatchLoop() {
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      seen = wakeups_;
    }
    uint64_t wake = UINT64_MAX;
    std::unique_ptr<Batch> batch = batcher_->poll(&wake);
    if (batch) {
      Batch* raw = batch.release();
      backend_->execute(*raw, [this, raw](BatchOutputs outputs) {
        batcher_->complete(std::unique_ptr<Batch>(raw), std::move(outputs));
      });
      continue;
    }
    std::unique_lock<std::mutex> lock(mu_);
    auto woken = [&] { return stopping_ || wakeups_ != seen; };
    if (wake == UINT64_MAX) {
      cv_.wait(lock, woken);
    } else {
      const uint64_t now = clock_->nowNs();
      if (wake <= now) continue;
      cv_.wait_for(lock, std::chrono::nanoseconds(wake - now), woken);
    }
  }
}

}  // namespace infergate::backends
