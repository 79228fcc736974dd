#include "backends/batcher.h"

#include <algorithm>
#include <utility>

#include "common/checked.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "fmt/format.h"

namespace infergate::backends {

namespace {
constexpr const char* kGpuShedMessage =
    "Model is shedding low priority: its GPU backend is unhealthy (over quota or slow)";
}  // namespace

Batcher::Batcher(ModelConfig model, BatchingConfig config, common::Clock* clock,
                 std::unique_ptr<common::MetricsRegistry> own_registry,
                 std::unique_ptr<BatchMetrics> metrics, std::shared_ptr<SlotArena> arena)
    : model_(std::move(model)),
      config_(std::move(config)),
      clock_(clock != nullptr ? clock : &common::SteadyClock::instance()),
      own_registry_(std::move(own_registry)),
      metrics_(std::move(metrics)),
      arena_(std::move(arena)),
      assembler_(model_, config_, *arena_),
      queues_(config_, *metrics_) {
  // Retry-After hints before the first batch is measured: the configured cost model (the
  // identity backend's; 0 for remote backends, whose hints stay at the minimum until measured).
  const uint64_t batch_requests = model_.max_batch_size > 0 ? model_.max_batch_size : 1;
  const uint64_t cost_us = common::saturatingAdd(
      model_.cost_fixed_us, common::saturatingMul(model_.cost_per_item_us, batch_requests));
  queues_.setServiceEstimate(common::saturatingMul(cost_us, 1000), batch_requests);
}

Batcher::~Batcher() { shutdown(); }

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::create(ModelConfig model, BatchingConfig config,
                                                         common::Clock* clock,
                                                         common::MetricsRegistry* metrics,
                                                         const PinnedOptions* pinned) {
  const std::string prefix = fmt::format("model '{}': dynamic_batching: ", model.name);
  if (config.priority_levels == 0) config.priority_levels = 1;
  if (config.default_priority_level == 0) config.default_priority_level = config.priority_levels;
  if (config.default_priority_level > config.priority_levels) {
    return absl::InvalidArgumentError(
        prefix + fmt::format("default_priority_level {} is outside 1..{} (priority_levels)",
                             config.default_priority_level, config.priority_levels));
  }
  for (const auto& [level, policy] : config.priority_queue_policy) {
    if (level == 0 || level > config.priority_levels) {
      return absl::InvalidArgumentError(
          prefix + fmt::format("priority_queue_policy level {} is outside 1..{}", level,
                               config.priority_levels));
    }
  }
  for (int p : config.preferred_batch_sizes) {
    if (p < 1 || (model.max_batch_size > 0 && p > model.max_batch_size) ||
        model.max_batch_size == 0) {
      return absl::InvalidArgumentError(
          prefix + fmt::format("preferred_batch_sizes entry {} is outside 1..{} (max_batch_size)",
                               p, model.max_batch_size));
    }
  }
  if (config.overload_status != 503 && config.overload_status != 429) {
    return absl::InvalidArgumentError(
        prefix + fmt::format("overload_status must be 503 or 429, got {}", config.overload_status));
  }
  if (config.max_inflight_batches == 0) config.max_inflight_batches = 1;
  std::sort(config.preferred_batch_sizes.begin(), config.preferred_batch_sizes.end());

  // Without a registry the metrics go to a private one nobody reads.
  std::unique_ptr<common::MetricsRegistry> own_registry;
  if (metrics == nullptr) {
    own_registry = std::make_unique<common::MetricsRegistry>();
    metrics = own_registry.get();
  }
  auto batch_metrics = std::make_unique<BatchMetrics>(*metrics, model, config.priority_levels);
  const size_t buffers = 2 * static_cast<size_t>(config.max_inflight_batches) + kSpareBuffers;
  absl::StatusOr<std::shared_ptr<SlotArena>> arena =
      SlotArena::create(model, config.variable_input_buffer_bytes, buffers, pinned);
  if (!arena.ok()) return arena.status();
  for (size_t input = 0; input < model.inputs.size(); ++input) {
    const SlabPool& pool = *(*arena)->pool(input);
    batch_metrics->poolBytes(model.inputs[input].name, pool.kind(), pool.regionBytes());
  }
  const common::Labels queued = {{"model", model.name}, {"stage", "queued"}};
  const common::Labels in_flight = {{"model", model.name}, {"stage", "in_flight"}};
  const common::Labels labels = {{"model", model.name}};
  std::unique_ptr<Batcher> b(new Batcher(std::move(model), std::move(config), clock,
                                         std::move(own_registry), std::move(batch_metrics),
                                         std::move(*arena)));
  constexpr const char* kCancelledHelp =
      "Requests cancelled by their client, by stage: queued (removed, never sent) or in_flight "
      "(in a batch at the backend: its slice is dropped)";
  b->cancelled_queued_ =
      &metrics->counter("infergate_requests_cancelled_total", kCancelledHelp, queued);
  b->cancelled_inflight_ =
      &metrics->counter("infergate_requests_cancelled_total", kCancelledHelp, in_flight);
  b->batches_cancelled_ = &metrics->counter(
      "infergate_batcher_batches_cancelled_total",
      "Batches in flight whose every request was cancelled: the backend call is cancelled", labels);
  return b;
}

const SlabPool* Batcher::pool(size_t input) const { return arena_->pool(input); }

std::vector<SharedBuffer> Batcher::sharedBuffers() const { return arena_->sharedBuffers(); }

size_t Batcher::liveSlots() const { return arena_->live(); }

bool Batcher::placeInputs(InferRequest& request) { return arena_->place(model_.inputs, request); }

void Batcher::setNotify(std::function<void()> notify) {
  std::lock_guard<std::mutex> lock(mu_);
  notify_ = std::move(notify);
}

void Batcher::notify() {
  std::function<void()> n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    n = notify_;
  }
  if (n) n();
}

void Batcher::setOverloadListener(std::function<void(int level)> listener) {
  std::lock_guard<std::mutex> lock(publish_mu_);
  overload_listener_ = std::move(listener);
  const int level = publishedLevel();
  published_level_.store(level, std::memory_order_release);
  if (overload_listener_ && level != 0) overload_listener_(level);
}

void Batcher::updateOverloadLocked(uint32_t refused_level) {
  if (config_.max_total_queue_size == 0) return;
  metrics_->overloaded.set(queues_.full() ? 1 : 0);
  const int current = overload_level_.load(std::memory_order_relaxed);
  const int level = queues_.overloadLevel(current, refused_level);
  if (level != current) {
    overload_level_.store(level, std::memory_order_release);
    metrics_->overload_level.set(level);
  }
}

int Batcher::publishedLevel() const {
  return std::max(overload_level_.load(std::memory_order_acquire),
                  external_level_.load(std::memory_order_acquire));
}

void Batcher::setExternalOverload(int level) {
  level = std::clamp(level, 0, kMaxShedClasses);
  if (external_level_.exchange(level, std::memory_order_acq_rel) == level) return;
  metrics_->external_overload_level.set(level);
  publishOverload();
}

bool Batcher::externallyShed(uint32_t level) const {
  const int ext = external_level_.load(std::memory_order_acquire);
  return ext > 0 && shedClassesForLevel(level, config_.priority_levels) <= ext;
}

void Batcher::publishOverload() {
  // Fast path: nothing changed since the last publication (no lock).
  if (publishedLevel() == published_level_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> lock(publish_mu_);
  const int level = publishedLevel();
  if (level == published_level_.load(std::memory_order_relaxed)) return;
  published_level_.store(level, std::memory_order_release);
  if (overload_listener_) overload_listener_(level);
}

uint32_t Batcher::levelOf(int64_t priority) const { return queues_.levelOf(priority); }

size_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queues_.size();
}

size_t Batcher::queued(uint32_t level) const {
  std::lock_guard<std::mutex> lock(mu_);
  return queues_.size(level);
}

uint32_t Batcher::inflight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inflight_;
}

uint64_t Batcher::enqueue(InferRequest request, InferCallback done) {
  const uint64_t now = clock_->nowNs();
  auto refuse = [&](absl::Status st) {
    done(std::move(st));
    return uint64_t{0};
  };
  // Inputs in the configured order, so batches are assembled input by input.
  if (request.inputs.size() != model_.inputs.size()) {
    return refuse(absl::InvalidArgumentError(
        fmt::format("model '{}' expects {} input(s), got {}", model_.name, model_.inputs.size(),
                    request.inputs.size())));
  }
  // Already in order (the usual case: one input, or a client that follows the model's
  // order): nothing to move.
  bool in_order = true;
  for (size_t i = 0; i < model_.inputs.size() && in_order; ++i) {
    in_order = request.inputs[i].name == model_.inputs[i].name;
  }
  if (!in_order) {
    std::vector<Tensor> ordered;
    ordered.reserve(model_.inputs.size());
    for (const TensorSpec& spec : model_.inputs) {
      auto it = std::find_if(request.inputs.begin(), request.inputs.end(),
                             [&](const Tensor& t) { return t.name == spec.name; });
      if (it == request.inputs.end()) {
        return refuse(absl::InvalidArgumentError(
            fmt::format("expected input '{}' for model '{}'", spec.name, model_.name)));
      }
      ordered.push_back(std::move(*it));
    }
    request.inputs = std::move(ordered);
  }
  int64_t rows = 1;
  if (model_.max_batch_size > 0) {
    rows = -1;
    for (const Tensor& t : request.inputs) {
      const int64_t r = t.shape.empty() ? -1 : t.shape[0];
      if (r < 1 || r > model_.max_batch_size || (rows >= 0 && r != rows)) {
        return refuse(absl::InvalidArgumentError(fmt::format(
            "input '{}' has batch size {}, model '{}' needs 1..{} and the same for every input",
            t.name, r, model_.name, model_.max_batch_size)));
      }
      rows = r;
    }
  }
  size_t bytes = 0, slot_bytes = 0;
  for (const Tensor& t : request.inputs) {
    bytes += t.byteSize();
    if (t.slot != nullptr) slot_bytes += t.slot_bytes;
  }
  const bool placed = arena_->owns(request.slots.get()) && slot_bytes == bytes;
  const uint64_t pre_copied = request.received_copy_bytes;

  auto r = std::make_unique<QueuedRequest>();
  r->level = queues_.levelOf(request.priority);
  r->rows = rows;
  r->enqueue_ns = now;
  r->placed = placed;
  r->deadline_ns = queues_.deadline(r->level, request.timeout_us, now);
  r->request = std::move(request);
  r->done = std::move(done);

  std::vector<Answer> answers;
  uint64_t ticket = 0;
  uint32_t refused_level = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) {
      answers.push_back({std::move(r->done), absl::UnavailableError(shutdown_message_)});
    } else if (externallyShed(r->level)) {
      metrics_->levels[r->level - 1].rejected_external.inc();
      answers.push_back({std::move(r->done), queues_.overloadStatus(kGpuShedMessage, r->level)});
    } else {
      ticket = queues_.push(std::move(r), answers, refused_level);
    }
    if (ticket != 0) {
      // The decoder wrote every received byte once (into a slot or a heap tensor); copies
      // at dispatch are added there.
      metrics_->bytes_received.inc(bytes);
      metrics_->bytes_copied.inc(bytes + pre_copied);
      metrics_->received_copy_bytes.inc(pre_copied);
      if (placed) metrics_->slot_bytes.inc(bytes);
    }
    updateOverloadLocked(refused_level);
  }
  publishOverload();
  flushAnswers(answers);
  if (ticket != 0) notify();
  return ticket;
}

absl::Status Batcher::admission(int64_t priority) {
  absl::Status st;
  uint32_t refused_level = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutdown_) return absl::UnavailableError(shutdown_message_);
    const uint32_t level = queues_.levelOf(priority);
    if (externallyShed(level)) {
      metrics_->refused_before_copy.inc();
      metrics_->levels[level - 1].rejected_external.inc();
      return queues_.overloadStatus(kGpuShedMessage, level);
    }
    st = queues_.admission(level);
    if (st.ok()) return st;
    metrics_->refused_before_copy.inc();
    if (config_.max_total_queue_size > 0 && queues_.size() >= config_.max_total_queue_size) {
      refused_level = level;
    }
    updateOverloadLocked(refused_level);
  }
  publishOverload();
  return st;
}

bool Batcher::cancel(uint64_t ticket) {
  std::vector<Answer> answers;
  {
    std::shared_ptr<net::CancelToken> batch_cancel;  // the batch's last live request went
    {
      std::lock_guard<std::mutex> lock(mu_);
      switch (queues_.cancel(ticket, answers)) {
        case PriorityQueues::Cancelled::kUnknown:
          return false;
        case PriorityQueues::Cancelled::kInFlight:
          // Answered CANCELLED when its batch completes; the backend call is cancelled when no
          // request of the batch is left to answer.
          cancelled_inflight_->inc();
          for (Batch* b : inflight_batches_) {
            auto it = std::find_if(b->requests.begin(), b->requests.end(),
                                   [&](const auto& r) { return r->ticket == ticket; });
            if (it == b->requests.end()) continue;
            if (++b->cancelled == b->requests.size() && b->cancel) {
              batch_cancel = b->cancel;
              batches_cancelled_->inc();
            }
            break;
          }
          break;
        case PriorityQueues::Cancelled::kAnswered:
          cancelled_queued_->inc();
          updateOverloadLocked(0);
          break;
      }
    }
    if (answers.empty()) {
      // In flight: the token's cancellers run here, lock released (the backend posts its
      // cancel to its own thread; a batch not yet sent is answered when the pool reaches it).
      if (batch_cancel) batch_cancel->cancel();
      return true;
    }
  }
  publishOverload();
  flushAnswers(answers);
  notify();
  return true;
}

std::unique_ptr<Batch> Batcher::poll(uint64_t* next_wake_ns) {
  std::vector<Answer> answers;
  std::unique_ptr<Batch> batch;
  uint64_t wake = UINT64_MAX;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t now = clock_->nowNs();
    queues_.expire(now, answers);
    wake = queues_.nextDeadline();
    if (!shutdown_ && queues_.size() > 0 && inflight_ < config_.max_inflight_batches) {
      BatchAssembler::Selection next = assembler_.select(queues_, now);
      wake = std::min(wake, next.wake_ns);
      if (next.due && !next.requests.empty()) {
        batch = std::make_unique<Batch>();
        batch->id = next_batch_++;
        batch->dispatch_ns = now;
        batch->cancel = std::make_shared<net::CancelToken>();
        inflight_batches_.push_back(batch.get());
        for (QueuedRequest* r : next.requests) {
          std::unique_ptr<QueuedRequest> up = queues_.take(r, now);
          batch->size += up->rows;
          batch->requests.push_back(std::move(up));
        }
        ++inflight_;
        metrics_->inflight.add(1);
        wake = 0;  // there may be another batch due right away
      }
    }
    updateOverloadLocked(0);
  }
  publishOverload();
  flushAnswers(answers);
  if (next_wake_ns != nullptr) *next_wake_ns = wake;
  if (!batch) return nullptr;

  // Assemble the inputs outside the lock: the requests belong to the batch now.
  const BatchAssembler::Copies copies = assembler_.gather(*batch);
  metrics_->batches.inc();
  metrics_->batch_size.record(static_cast<uint64_t>(batch->size));
  metrics_->fill_ratio.record(static_cast<uint64_t>(batch->size));
  metrics_->bytes_copied.inc(copies.staged + copies.compacted);
  metrics_->staged_bytes.inc(copies.staged);
  metrics_->compacted_bytes.inc(copies.compacted);
  if (copies.unpinned) metrics_->unpinned_batches.inc();
  return batch;
}

void Batcher::complete(std::unique_ptr<Batch> batch, BatchOutputs outputs,
                       const std::function<void()>& before_answers) {
  const size_t n = batch->requests.size();
  absl::StatusOr<std::vector<std::vector<Tensor>>> sliced =
      outputs.ok() ? assembler_.slice(*batch, *outputs) : outputs.status();
  // Outputs are copied out (they may be views into the batch buffers): free the buffers.
  arena_->release(batch->slabs);
  batch->slabs.clear();
  batch->heap.clear();

  std::vector<char> cancelled(n, 0);
  const uint64_t now = clock_->nowNs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    --inflight_;
    metrics_->inflight.sub(1);
    updateServiceEstimateLocked(now > batch->dispatch_ns ? now - batch->dispatch_ns : 0);
    auto it = std::find(inflight_batches_.begin(), inflight_batches_.end(), batch.get());
    if (it != inflight_batches_.end()) inflight_batches_.erase(it);
    for (size_t k = 0; k < n; ++k) {
      const QueuedRequest& r = *batch->requests[k];
      cancelled[k] = r.cancelled;
      queues_.finish(r);
    }
  }
  if (!sliced.ok()) metrics_->backend_errors.inc();
  if (before_answers) before_answers();
  for (size_t k = 0; k < n; ++k) {
    QueuedRequest& r = *batch->requests[k];
    if (cancelled[k]) {
      r.done(absl::CancelledError("Request cancelled"));
      continue;
    }
    if (!sliced.ok()) {
      r.done(sliced.status());
      continue;
    }
    InferResponse resp;
    resp.model_name = model_.name;
    resp.model_version = model_.version;
    resp.id = std::move(r.request.id);
    resp.requested = std::move(r.request.outputs);
    resp.binary_data_output = r.request.binary_data_output;
    resp.outputs = std::move((*sliced)[k]);
    r.done(std::move(resp));
  }
  if (!before_answers) notify();
}

void Batcher::updateServiceEstimateLocked(uint64_t batch_ns) {
  // The first measurement replaces the configured cost; then an average with weight 1/4 for
  // the newest batch, so one slow batch moves the hint but does not make it.
  const uint64_t prev = queues_.batchNsEstimate();
  const uint64_t est = measured_batches_++ == 0 ? batch_ns : prev - prev / 4 + batch_ns / 4;
  const uint64_t batch_requests = model_.max_batch_size > 0 ? model_.max_batch_size : 1;
  queues_.setServiceEstimate(est, batch_requests);
}

uint32_t Batcher::retryAfterSeconds(int64_t priority) const {
  std::lock_guard<std::mutex> lock(mu_);
  return queues_.retryAfterSeconds(queues_.levelOf(priority));
}

bool Batcher::closeIfDrained(std::string message) {
  std::lock_guard<std::mutex> lock(mu_);
  if (shutdown_) return true;
  if (queues_.size() > 0) return false;
  shutdown_ = true;
  shutdown_message_ = std::move(message);
  return true;
}

void Batcher::shutdown() {
  std::vector<Answer> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    queues_.drain(absl::UnavailableError("Model is shutting down"), answers);
    updateOverloadLocked(0);
  }
  publishOverload();
  flushAnswers(answers);
}

}  // namespace infergate::backends
