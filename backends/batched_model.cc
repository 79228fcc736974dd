#include "backends/batched_model.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "backends/pool.h"
#include "spdlog/spdlog.h"

namespace infergate::backends {
namespace {

// The model whose dispatchDue() runs on this thread (re-entry guard).
thread_local const BatchedModel* t_dispatching = nullptr;

}  // namespace

absl::StatusOr<std::unique_ptr<BatchedModel>> BatchedModel::create(
    ModelConfig config, BatchingConfig batching, std::unique_ptr<BatchBackend> backend,
    common::MetricsRegistry* metrics, const PinnedOptions* pinned, common::Clock* clock) {
  if (clock == nullptr) clock = &common::SteadyClock::instance();
  if (config.remote != nullptr &&
      !(config.remote->endpoints.empty() && config.remote->metrics_urls.empty())) {
    // The endpoint set belongs to the backend (Pool::setEndpoints, DNS re-resolution change it
    // at run time): the model's config() keeps no copy of the list to go stale. The backend and
    // its clients keep the object they were built with (this makes a new one).
    auto own = std::make_shared<RemoteBackendConfig>(*config.remote);
    own->endpoints.clear();
    own->metrics_urls.clear();  // parallel to endpoints
    config.remote = std::move(own);
  }
  absl::StatusOr<std::unique_ptr<Batcher>> b =
      Batcher::create(std::move(config), std::move(batching), clock, metrics, pinned);
  if (!b.ok()) return b.status();
  absl::Status prepared = backend->prepare((*b)->sharedBuffers());
  if (!prepared.ok()) return prepared;
  return std::unique_ptr<BatchedModel>(new BatchedModel(std::move(*b), std::move(backend), clock));
}

BatchedModel::BatchedModel(std::unique_ptr<Batcher> batcher, std::unique_ptr<BatchBackend> backend,
                           common::Clock* clock)
    : batcher_(std::move(batcher)),
      backend_(std::move(backend)),
      clock_(clock),
      burst_(std::make_shared<BurstDispatch>()),
      lifeline_(std::make_shared<Lifeline>()) {
  burst_->model = this;
  lifeline_->batcher = batcher_.get();
  batcher_->setNotify([this] { onNotify(); });
  dispatcher_ = std::thread([this] { dispatchLoop(); });
}

BatchedModel::~BatchedModel() {
  {
    std::lock_guard<std::recursive_mutex> lock(lifeline_->mu);  // waits for a canceller running
    lifeline_->batcher = nullptr;
  }
  batcher_->setOverloadListener(nullptr);  // the listener's target may be gone first
  {
    std::lock_guard<std::mutex> lock(burst_->mu);  // waits for a reactor dispatching now
    burst_->model = nullptr;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (dispatcher_.joinable()) dispatcher_.join();
  batcher_->shutdown();  // queued requests: UNAVAILABLE
  backend_.reset();      // completes every batch it accepted
  batcher_->setNotify(nullptr);
}

void BatchedModel::retire() {
  // The dispatcher finishes what is queued, then closes the batcher and exits (dispatchLoop).
  retired_.store(true, std::memory_order_release);  // pairs with the loads in dispatchLoop
  wakeDispatcher();
  // The backend is destroyed before the batcher (~BatchedModel), so the batcher outlives every
  // call of the predicate.
  const Batcher* batcher = batcher_.get();
  backend_->retire([batcher] { return batcher->queued() == 0; });
}

void BatchedModel::BurstDispatch::runAtBurstEnd() {
  std::lock_guard<std::mutex> lock(mu);
  if (model == nullptr) return;
  model->dispatchDueAndArm();
}

void BatchedModel::infer(InferRequest request, InferCallback done) {
  submit(std::move(request), std::move(done));
}

uint64_t BatchedModel::submit(InferRequest request, InferCallback done) {
  std::shared_ptr<net::CancelToken> token = request.cancel;
  const uint64_t ticket = batcher_->enqueue(std::move(request), std::move(done));
  // Registered after enqueue: a cancel in between finds the token cancelled and runs the
  // canceller now; one after the answer finds the ticket gone (a no-op). The token lives with
  // the connection, which may outlive this model (removed by a reload): the canceller reaches
  // the batcher through the lifeline, which the destructor cuts.
  if (ticket != 0 && token) {
    token->onCancel([life = lifeline_, ticket]() noexcept {
      // Runs inside a session's close path (an nghttp2 callback for RST_STREAM): nothing may
      // escape. Out of memory here leaves the request to run to its (dropped) answer.
      try {
        std::lock_guard<std::recursive_mutex> lock(life->mu);
        if (life->batcher != nullptr) life->batcher->cancel(ticket);
      } catch (...) {
        static std::atomic<bool> logged{false};
        if (!logged.exchange(true)) {
          spdlog::warn("cancelling a request failed (out of memory?); it runs to its answer");
        }
      }
    });
  }
  return ticket;
}

bool BatchedModel::cancel(uint64_t ticket) { return batcher_->cancel(ticket); }

void BatchedModel::onNotify() {
  if (t_dispatching == this) return;  // the dispatching loop on this thread polls again
  if (net::deferToBurstEnd(burst_)) return;
  wakeDispatcher();
}

uint64_t BatchedModel::dispatchDue() {
  if (t_dispatching == this) return UINT64_MAX;
  const BatchedModel* outer = t_dispatching;
  t_dispatching = this;
  uint64_t wake = UINT64_MAX;
  while (std::unique_ptr<Batch> batch = batcher_->poll(&wake)) execute(std::move(batch));
  t_dispatching = outer;
  return wake;
}

void BatchedModel::execute(std::unique_ptr<Batch> batch) {
  if (batch->cancel != nullptr && batch->cancel->cancelled()) {
    // Every client went away between poll() and here: never sent.
    batcher_->complete(std::move(batch), absl::CancelledError("Request cancelled"));
    return;
  }
  Batch* raw = batch.release();
  backend_->execute(*raw, [this, raw](BatchOutputs outputs) {
    // The next due batch starts on the completing thread before this one's answers go out.
    batcher_->complete(std::unique_ptr<Batch>(raw), std::move(outputs),
                       [this] { dispatchDueAndArm(); });
  });
}

void BatchedModel::dispatchDueAndArm() {
  const uint64_t wake = dispatchDue();
  if (wake != UINT64_MAX) {
    armDispatcher(wake);
  } else if (retired_.load(std::memory_order_acquire)) {
    // Retired: activity here (a reactor's burst, a completing backend thread) restarts the
    // dispatcher's grace before it closes the batcher and exits.
    wakeDispatcher();
  }
}

void BatchedModel::armDispatcher(uint64_t wake_ns) {
  // Asleep until no later than wake_ns: it polls in time. Awake (0): it may have polled before
  // our change and be about to sleep, so it is woken.
  const uint64_t until = dispatcher_sleep_until_.load();
  if (until != 0 && until <= wake_ns) return;
  wakeDispatcher();
}

void BatchedModel::wakeDispatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wakeups_;
  }
  cv_.notify_one();
}

void BatchedModel::dispatchLoop() {
  // Timed waits (max_queue_delay_us, deadlines) end within microseconds, not the default
  // 50 us of timer slack.
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  {
    // Nothing can be due before the first wake-up (the queues start empty): sleep until then
    // rather than poll, so a reactor's first requests are not raced by this thread's start
    // (who dispatches stays deterministic). A wake-up before this point is not missed:
    // wakeups_ is already past 0.
    std::unique_lock<std::mutex> lock(mu_);
    dispatcher_sleep_until_.store(UINT64_MAX);
    cv_.wait(lock, [this] { return stopping_ || wakeups_ != 0; });
    dispatcher_sleep_until_.store(0);
  }
  // Retired: the time and wake-up count at which the dispatcher last saw activity.
  uint64_t idle_since_ns = 0;
  uint64_t idle_seen = UINT64_MAX;
  for (;;) {
    uint64_t seen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      seen = wakeups_;
    }
    uint64_t wake = dispatchDue();
    if (retired_.load(std::memory_order_acquire)) {  // pairs with retire()'s store
      // Once nothing has been queued and nothing has woken us for kRetireGraceMs, close the
      // batcher (later requests are refused, so nothing can become due again) and exit;
      // batches in flight complete on their backend's threads. The grace serves a request
      // that found the model just before its removal and reaches enqueue just after.
      const uint64_t now = clock_->nowNs();
      const uint64_t grace_ns = kRetireGraceMs * 1000000;
      bool active = seen != idle_seen || batcher_->queued() > 0;
      if (!active && now - idle_since_ns >= grace_ns) {
        if (batcher_->closeIfDrained("Model was removed by a configuration reload")) {
          dispatcher_sleep_until_.store(UINT64_MAX);
          dispatcher_stopped_.store(true, std::memory_order_release);
          spdlog::debug("model '{}': retired: dispatcher thread exits", batcher_->model().name);
          return;
        }
        active = true;  // enqueued meanwhile
      }
      if (active) {
        idle_since_ns = now;
        idle_seen = seen;
      }
      wake = std::min(wake, idle_since_ns + grace_ns);
    }
    std::unique_lock<std::mutex> lock(mu_);
    auto woken = [&] { return stopping_ || wakeups_ != seen; };
    if (woken()) continue;
    if (wake == UINT64_MAX) {
      dispatcher_sleep_until_.store(UINT64_MAX);
      cv_.wait(lock, woken);
    } else {
      const uint64_t now = clock_->nowNs();
      if (wake <= now) continue;
      dispatcher_sleep_until_.store(wake);
      cv_.wait_for(lock, std::chrono::nanoseconds(wake - now), woken);
    }
    dispatcher_sleep_until_.store(0);
  }
}

}  // namespace infergate::backends
