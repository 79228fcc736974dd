#include "backends/batcher.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "common/checked.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "fmt/format.h"
#include "spdlog/spdlog.h"

namespace infergate::backends {

namespace {

constexpr const char* kTimeoutMessage = "Request timeout expired";
constexpr const char* kQueueFullMessage = "Exceeds maximum queue size";

// Bytes per row of `spec` when fixed (no variable dimension, not BYTES); 0 otherwise.
size_t fixedRowBytes(const TensorSpec& spec) {
  if (spec.dtype == DataType::kBytes) return 0;
  for (int64_t d : spec.shape) {
    if (d < 0) return 0;
  }
  std::optional<uint64_t> n = elementCount(spec.shape);
  if (!n) return 0;
  return static_cast<size_t>(*n) * dataTypeSize(spec.dtype);
}

}  // namespace

// Batch buffers of every input and their state. Guarded by `mu` (taken per placement, per
// dispatch and per release; never while calling out). Lock order: Batcher::mu_ -> Arena::mu
// (reservations may be dropped under the batcher's lock); the arena never takes mu_.
struct Batcher::Arena {
  struct Buffer {
    uint8_t* base = nullptr;
    size_t fill = 0;      // bytes handed out (slots are carved in order)
    uint32_t refs = 0;    // live slots + batches reading it
    bool filling = false; // the buffer new slots go to
  };
  struct Input {
    std::unique_ptr<SlabPool> pool;
    size_t slab_bytes = 0;
    std::vector<Buffer> buffers;  // acquired from the pool (a handful: linear search)
    uint8_t* filling = nullptr;
  };
  std::mutex mu;
  std::vector<Input> inputs;
  size_t live = 0;

  Buffer* find(Input& in, uint8_t* base) {
    for (Buffer& b : in.buffers) {
      if (b.base == base) return &b;
    }
    return nullptr;
  }
  // Drops a reference; the buffer goes back to its pool when unreferenced and not filling.
  void unrefLocked(size_t i, uint8_t* base) {
    Input& in = inputs[i];
    for (size_t k = 0; k < in.buffers.size(); ++k) {
      Buffer& b = in.buffers[k];
      if (b.base != base) continue;
      if (b.refs > 0) --b.refs;
      if (b.refs == 0 && b.filling) b.fill = 0;  // nothing lives in it: refill from the start
      if (b.refs == 0 && !b.filling) {
        in.pool->release(b.base);
        in.buffers[k] = in.buffers.back();
        in.buffers.pop_back();
      }
      return;
    }
  }
  // A fresh buffer held by one reference (a batch gathered into it); nullptr when none is free.
  uint8_t* acquireLocked(size_t i) {
    Input& in = inputs[i];
    uint8_t* p = in.pool->acquire();
    if (p != nullptr) in.buffers.push_back({p, 0, 1, false});
    return p;
  }
};

class Batcher::Slots : public InputSlots {
 public:
  explicit Slots(std::shared_ptr<Arena> arena, size_t n) : arena_(std::move(arena)), bases_(n) {}
  ~Slots() override {
    std::lock_guard<std::mutex> lock(arena_->mu);
    for (size_t i = 0; i < bases_.size(); ++i) {
      if (bases_[i] != nullptr) arena_->unrefLocked(i, bases_[i]);
    }
    --arena_->live;
  }
  const Arena* arena() const { return arena_.get(); }
  uint8_t* base(size_t i) const { return bases_[i]; }

 private:
  friend class Batcher;
  std::shared_ptr<Arena> arena_;
  std::vector<uint8_t*> bases_;  // per configured input: the buffer holding the slot
};

Batcher::Batcher(ModelConfig model, BatchingConfig config, common::Clock* clock)
    : model_(std::move(model)),
      config_(std::move(config)),
      clock_(clock != nullptr ? clock : &common::SteadyClock::instance()) {}

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
  std::unique_ptr<Batcher> b(new Batcher(std::move(model), std::move(config), clock));
  if (absl::Status st = b->init(metrics, pinned); !st.ok()) return st;
  return b;
}

absl::Status Batcher::init(common::MetricsRegistry* metrics, const PinnedOptions* pinned) {
  const std::string& name = model_.name;
  levels_.resize(config_.priority_levels);
  for (uint32_t l = 1; l <= config_.priority_levels; ++l) {
    Level& level = levels_[l - 1];
    auto it = config_.priority_queue_policy.find(l);
    level.policy = it != config_.priority_queue_policy.end() ? it->second
                                                            : config_.default_queue_policy;
    if (metrics != nullptr) {
      const common::Labels labels = {{"model", name}, {"level", std::to_string(l)}};
      level.depth = &metrics->gauge("infergate_batcher_queue_depth",
                                    "Requests queued in the batcher, per priority level", labels);
      level.queue_time = &metrics->histogram(
          "infergate_batcher_queue_time_seconds",
          "Time from enqueue to dispatch in a batch, per priority level", labels,
          common::latencyBucketsSeconds(), 1e6);
      level.timeouts = &metrics->counter("infergate_batcher_timeouts_total",
                                         "Queued requests whose deadline expired", labels);
      level.delayed_count = &metrics->counter(
          "infergate_batcher_delayed_total",
          "Expired requests moved behind unexpired ones (timeout_action DELAY)", labels);
      common::Labels full = labels, over = labels;
      full.push_back({"reason", "queue_full"});
      over.push_back({"reason", "overload"});
      level.rejected_full = &metrics->counter(
          "infergate_batcher_rejections_total",
          "Requests refused at enqueue (queue_full: the level's max_queue_size; overload: the "
          "model's max_total_queue_size with nothing lower to shed)",
          full);
      level.rejected_overload = &metrics->counter(
          "infergate_batcher_rejections_total",
          "Requests refused at enqueue (queue_full: the level's max_queue_size; overload: the "
          "model's max_total_queue_size with nothing lower to shed)",
          over);
      level.shed = &metrics->counter(
          "infergate_batcher_shed_total",
          "Queued requests dropped (and answered) to admit a higher-priority one under overload",
          labels);
      level.cancelled = &metrics->counter("infergate_batcher_cancellations_total",
                                          "Requests cancelled by their client", labels);
    }
  }
  if (metrics != nullptr) {
    const common::Labels labels = {{"model", name}};
    std::vector<double> size_bounds;
    const int max_batch = std::max(1, model_.max_batch_size);
    for (int s = 1; s <= max_batch; s = s < 8 ? s + 1 : s * 2) size_bounds.push_back(s);
    if (size_bounds.back() != max_batch) size_bounds.push_back(max_batch);
    batch_size_ = &metrics->histogram("infergate_batcher_batch_size",
                                      "Rows (sum of batch dimensions) per dispatched batch",
                                      labels, size_bounds, 1.0);
    std::vector<double> fill_bounds;
    for (double s : size_bounds) fill_bounds.push_back(s / max_batch);
    fill_ratio_ = &metrics->histogram("infergate_batcher_batch_fill_ratio",
                                      "Dispatched batch size / max_batch_size", labels,
                                      fill_bounds, static_cast<double>(max_batch));
    batches_ = &metrics->counter("infergate_batcher_batches_total", "Batches dispatched", labels);
    bytes_copied_ = &metrics->counter(
        "infergate_batcher_bytes_copied_total",
        "Tensor bytes written by infergate after receipt, per accepted request: the decoder's "
        "write (into a slot or a heap tensor) plus staged and compacted copies at dispatch; "
        "equal to request_bytes when every byte was copied once",
        labels);
    bytes_received_ = &metrics->counter(
        "infergate_batcher_request_bytes_total",
        "Tensor bytes of requests accepted by the batcher (as received)", labels);
    slot_bytes_ = &metrics->counter(
        "infergate_batcher_slot_bytes_total",
        "Tensor bytes decoded straight into batch buffer slots (the one copy)", labels);
    staged_bytes_ = &metrics->counter(
        "infergate_batcher_staged_bytes_total",
        "Tensor bytes copied at dispatch from a heap tensor (request without a slot)", labels);
    compacted_bytes_ = &metrics->counter(
        "infergate_batcher_compacted_bytes_total",
        "Tensor bytes moved at dispatch inside batch buffers to make a batch contiguous", labels);
    unpinned_batches_ = &metrics->counter(
        "infergate_batcher_unpinned_batches_total",
        "Batches whose input did not fit a pinned batch buffer (heap buffer used)", labels);
    backend_errors_ = &metrics->counter("infergate_batcher_backend_errors_total",
                                        "Batches the backend failed", labels);
    inflight_gauge_ = &metrics->gauge("infergate_batcher_inflight_batches",
                                      "Batches dispatched and not completed", labels);
    overloaded_ = &metrics->gauge(
        "infergate_batcher_overloaded",
        "1 while the model's queues are at max_total_queue_size (lowest levels are shed)", labels);
    overload_level_gauge_ = &metrics->gauge(
        "infergate_batcher_overload_level",
        "Overload level published for the NIC: how many of the lowest priority classes to shed",
        labels);
  }

  PinnedOptions unpinned;
  unpinned.try_cuda = unpinned.try_huge_pages = unpinned.try_mlock = false;
  const int rows = std::max(1, model_.max_batch_size);
  const size_t buffers = 2 * static_cast<size_t>(config_.max_inflight_batches) + kSpareBuffers;
  arena_ = std::make_shared<Arena>();
  for (size_t input = 0; input < model_.inputs.size(); ++input) {
    const TensorSpec& spec = model_.inputs[input];
    const size_t row = fixedRowBytes(spec);
    const size_t slab = row > 0 ? row * rows : config_.variable_input_buffer_bytes;
    PinnedOptions opts = pinned != nullptr ? *pinned : unpinned;
    if (!opts.shared_key.empty()) opts.shared_key = fmt::format("{}.in{}", opts.shared_key, input);
    opts.label = fmt::format("model '{}' input '{}' ({} x {} bytes)", name, spec.name, buffers,
                             slab);
    absl::StatusOr<std::unique_ptr<SlabPool>> pool = SlabPool::create(slab, buffers, opts);
    if (!pool.ok()) return pool.status();
    if (metrics != nullptr) {
      metrics
          ->gauge("infergate_pinned_pool_bytes", "Bytes of batch buffer pools, by memory kind",
                  {{"model", name},
                   {"input", spec.name},
                   {"kind", std::string(pinnedKindName((*pool)->kind()))}})
          .set(static_cast<int64_t>((*pool)->regionBytes()));
    }
    slab_bytes_.push_back((*pool)->slabBytes());
    Arena::Input in;
    in.slab_bytes = (*pool)->slabBytes();
    in.pool = std::move(*pool);
    arena_->inputs.push_back(std::move(in));
  }
  return absl::OkStatus();
}

const SlabPool* Batcher::pool(size_t input) const {
  return input < arena_->inputs.size() ? arena_->inputs[input].pool.get() : nullptr;
}

std::vector<SharedBuffer> Batcher::sharedBuffers() const {
  std::vector<SharedBuffer> out;
  for (size_t i = 0; i < arena_->inputs.size(); ++i) {
    const SlabPool& p = *arena_->inputs[i].pool;
    if (!p.regionKey().empty()) out.push_back({i, p.regionKey(), p.regionData(), p.regionBytes()});
  }
  return out;
}

size_t Batcher::liveSlots() const {
  std::lock_guard<std::mutex> lock(arena_->mu);
  return arena_->live;
}

bool Batcher::placeInputs(InferRequest& request) {
  const size_t n = model_.inputs.size();
  if (request.slots || request.inputs.size() != n) return false;
  // Configured input i -> request input order[i].
  std::vector<size_t> order(n, SIZE_MAX);
  for (size_t k = 0; k < n; ++k) {
    const Tensor& t = request.inputs[k];
    if (t.slot != nullptr) return false;
    size_t i = 0;
    while (i < n && model_.inputs[i].name != t.name) ++i;
    if (i == n || order[i] != SIZE_MAX) return false;
    order[i] = k;
  }
  auto slots = std::make_shared<Slots>(arena_, n);
  std::vector<size_t> offsets(n, 0);
  {
    std::lock_guard<std::mutex> lock(arena_->mu);
    size_t done = 0;
    bool ok = true;
    for (; done < n; ++done) {
      Arena::Input& in = arena_->inputs[done];
      const size_t bytes = request.inputs[order[done]].slot_bytes;
      if (bytes > in.slab_bytes) {
        ok = false;
        break;
      }
      Arena::Buffer* b = in.filling != nullptr ? arena_->find(in, in.filling) : nullptr;
      if (b == nullptr || b->fill + bytes > in.slab_bytes) {
        uint8_t* fresh = in.pool->acquire();
        if (fresh == nullptr) {
          ok = false;
          break;
        }
        if (b != nullptr) {  // seal the full one; it goes back when its last slot does
          b->filling = false;
          if (b->refs == 0) arena_->unrefLocked(done, b->base);
        }
        in.buffers.push_back({fresh, 0, 0, true});
        in.filling = fresh;
        b = &in.buffers.back();
      }
      offsets[done] = b->fill;
      b->fill += bytes;
      ++b->refs;
      slots->bases_[done] = b->base;
    }
    if (!ok) {
      // Undo this request's slots (they are the last ones carved from their buffers).
      for (size_t i = 0; i < done; ++i) {
        Arena::Buffer* b = arena_->find(arena_->inputs[i], slots->bases_[i]);
        b->fill -= request.inputs[order[i]].slot_bytes;
        --b->refs;
        slots->bases_[i] = nullptr;
      }
      ++arena_->live;  // the destructor of `slots` (nothing to release) decrements it
      return false;
    }
    ++arena_->live;
  }
  for (size_t i = 0; i < n; ++i) {
    Tensor& t = request.inputs[order[i]];
    t.slot = slots->bases_[i] + offsets[i];
    t.data.clear();
  }
  request.slots = std::move(slots);
  return true;
}

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

int shedClassesForLevel(uint32_t level, uint32_t levels) {
  int n = 0;
  for (int c = 0; c < kPriorityClasses; ++c) {
    if (levelOfPriorityClass(c, levels) >= level) ++n;
  }
  return std::clamp(n, 1, kMaxShedClasses);
}

void Batcher::setOverloadListener(std::function<void(int level)> listener) {
  std::lock_guard<std::mutex> lock(publish_mu_);
  overload_listener_ = std::move(listener);
  const int level = overload_level_.load(std::memory_order_acquire);
  published_level_.store(level, std::memory_order_release);
  if (overload_listener_ && level != 0) overload_listener_(level);
}

void Batcher::updateOverloadLocked(uint32_t refused_level) {
  const size_t limit = config_.max_total_queue_size;
  if (limit == 0) return;
  const bool full = queued_ >= limit;
  if (overloaded_ != nullptr) overloaded_->set(full ? 1 : 0);
  int level = overload_level_.load(std::memory_order_relaxed);
  if (full) level = std::max(level, shedClassesForLevel(config_.priority_levels, config_.priority_levels));
  if (refused_level != 0) {
    level = std::max(level, shedClassesForLevel(refused_level, config_.priority_levels));
  }
  // Hysteresis: stay up until the queues have drained to half the limit.
  if (level != 0 && !full && queued_ <= limit / 2) level = 0;
  if (level != overload_level_.load(std::memory_order_relaxed)) {
    overload_level_.store(level, std::memory_order_release);
    if (overload_level_gauge_ != nullptr) overload_level_gauge_->set(level);
  }
}

void Batcher::publishOverload() {
  // Fast path: nothing changed since the last publication (no lock).
  if (overload_level_.load(std::memory_order_acquire) ==
      published_level_.load(std::memory_order_acquire)) {
    return;
  }
  std::lock_guard<std::mutex> lock(publish_mu_);
  const int level = overload_level_.load(std::memory_order_acquire);
  if (level == published_level_.load(std::memory_order_relaxed)) return;
  published_level_.store(level, std::memory_order_release);
  if (overload_listener_) overload_listener_(level);
}

uint32_t Batcher::levelOf(int64_t priority) const {
  if (priority <= 0 || static_cast<uint64_t>(priority) > config_.priority_levels) {
    return config_.default_priority_level;
  }
  return static_cast<uint32_t>(priority);
}

size_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_;
}

size_t Batcher::queued(uint32_t level) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (level == 0 || level > levels_.size()) return 0;
  return levels_[level - 1].size();
}

uint32_t Batcher::inflight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return inflight_;
}

absl::Status Batcher::overloadStatus(std::string message) const {
  if (config_.overload_status == 429) return absl::ResourceExhaustedError(std::move(message));
  return absl::UnavailableError(std::move(message));
}

bool Batcher::compatible(const QueuedRequest& a, const QueuedRequest& b) const {
  const size_t skip = model_.max_batch_size > 0 ? 1 : 0;
  for (size_t i = 0; i < a.request.inputs.size(); ++i) {
    const std::vector<int64_t>& x = a.request.inputs[i].shape;
    const std::vector<int64_t>& y = b.request.inputs[i].shape;
    if (x.size() != y.size() || !std::equal(x.begin() + skip, x.end(), y.begin() + skip)) {
      return false;
    }
  }
  return true;
}

size_t Batcher::inputBytes(const QueuedRequest& r, size_t input) const {
  return r.request.inputs[input].byteSize();
}

void Batcher::flush(std::vector<Answer>& answers) {
  for (Answer& a : answers) {
    if (a.done) a.done(std::move(a.result));
  }
  answers.clear();
}

std::unique_ptr<QueuedRequest> Batcher::removeLocked(QueuedRequest* r) {
  Level& level = levels_[r->level - 1];
  auto& list = r->state == QueuedRequest::State::kDelayed ? level.delayed : level.queue;
  std::unique_ptr<QueuedRequest> up = std::move(*r->pos);
  list.erase(r->pos);
  --queued_;
  if (level.depth != nullptr) level.depth->sub(1);
  return up;
}

void Batcher::recomputeDeadlineLocked() {
  next_deadline_ns_ = UINT64_MAX;
  for (const Level& level : levels_) {
    for (const auto& r : level.queue) {
      if (r->deadline_ns != 0) next_deadline_ns_ = std::min(next_deadline_ns_, r->deadline_ns);
    }
  }
}

void Batcher::expireLocked(uint64_t now, std::vector<Answer>& answers) {
  if (now < next_deadline_ns_) return;
  for (Level& level : levels_) {
    for (auto it = level.queue.begin(); it != level.queue.end();) {
      QueuedRequest* r = it->get();
      ++it;  // before r's node moves or goes
      if (r->deadline_ns == 0 || now < r->deadline_ns) continue;
      if (level.policy.timeout_action == TimeoutAction::kDelay) {
        level.delayed.splice(level.delayed.end(), level.queue, r->pos);
        r->state = QueuedRequest::State::kDelayed;
        r->deadline_ns = 0;
        if (level.delayed_count != nullptr) level.delayed_count->inc();
        continue;
      }
      std::unique_ptr<QueuedRequest> up = removeLocked(r);
      tickets_.erase(up->ticket);
      if (level.timeouts != nullptr) level.timeouts->inc();
      answers.push_back({std::move(up->done), absl::UnavailableError(kTimeoutMessage)});
    }
  }
  recomputeDeadlineLocked();
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
  const auto* own = dynamic_cast<const Slots*>(request.slots.get());
  const bool placed = own != nullptr && own->arena() == arena_.get() && slot_bytes == bytes;

  const uint32_t level_no = levelOf(request.priority);
  auto r = std::make_unique<QueuedRequest>();
  r->level = level_no;
  r->rows = rows;
  r->enqueue_ns = now;
  r->placed = placed;
  {
    const QueuePolicy& policy = levels_[level_no - 1].policy;
    uint64_t timeout_us = policy.default_timeout_us;
    if (policy.allow_timeout_override && request.timeout_us > 0 &&
        (timeout_us == 0 || request.timeout_us < timeout_us)) {
      timeout_us = request.timeout_us;
    }
    // Saturating: a client's huge timeout means "no sooner than anything", never a wrap into
    // the past.
    r->deadline_ns =
        timeout_us > 0 ? common::saturatingAdd(now, common::saturatingMul(timeout_us, 1000)) : 0;
  }
  r->request = std::move(request);
  r->done = std::move(done);

  std::vector<Answer> answers;
  uint64_t ticket = 0;
  uint32_t refused_level = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Level& level = levels_[level_no - 1];
    if (shutdown_) {
      answers.push_back({std::move(r->done), absl::UnavailableError("Model is shutting down")});
    } else if (level.policy.max_queue_size > 0 && level.size() >= level.policy.max_queue_size) {
      if (level.rejected_full != nullptr) level.rejected_full->inc();
      answers.push_back({std::move(r->done), overloadStatus(kQueueFullMessage)});
    } else {
      bool admit = true;
      if (config_.max_total_queue_size > 0 && queued_ >= config_.max_total_queue_size) {
        // Shed the newest request of the lowest non-empty level below this one.
        admit = false;
        for (uint32_t l = config_.priority_levels; l > level_no; --l) {
          Level& low = levels_[l - 1];
          if (low.size() == 0) continue;
          QueuedRequest* victim = !low.queue.empty() ? low.queue.back().get()
                                                     : low.delayed.back().get();
          std::unique_ptr<QueuedRequest> up = removeLocked(victim);
          tickets_.erase(up->ticket);
          if (low.shed != nullptr) low.shed->inc();
          refused_level = l;
          answers.push_back({std::move(up->done),
                             overloadStatus(fmt::format(
                                 "Request shed: model overloaded, priority level {} dropped", l))});
          admit = true;
          break;
        }
        if (!admit) {
          if (level.rejected_overload != nullptr) level.rejected_overload->inc();
          refused_level = level_no;
          answers.push_back({std::move(r->done), overloadStatus(kQueueFullMessage)});
        }
      }
      if (admit) {
        ticket = next_ticket_++;
        r->ticket = ticket;
        if (r->deadline_ns != 0) next_deadline_ns_ = std::min(next_deadline_ns_, r->deadline_ns);
        QueuedRequest* raw = r.get();
        level.queue.push_back(std::move(r));
        raw->pos = std::prev(level.queue.end());
        tickets_.emplace(ticket, raw);
        ++queued_;
        if (level.depth != nullptr) level.depth->add(1);
        // The decoder wrote every received byte once (into a slot or a heap tensor); copies
        // at dispatch are added there.
        if (bytes_received_ != nullptr) bytes_received_->inc(bytes);
        if (bytes_copied_ != nullptr) bytes_copied_->inc(bytes);
        if (slot_bytes_ != nullptr && placed) slot_bytes_->inc(bytes);
      }
    }
    updateOverloadLocked(refused_level);
  }
  publishOverload();
  flush(answers);
  if (ticket != 0) notify();
  return ticket;
}

bool Batcher::cancel(uint64_t ticket) {
  std::vector<Answer> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) return false;
    QueuedRequest* r = it->second;
    if (r->state == QueuedRequest::State::kInFlight) {
      if (r->cancelled) return false;
      r->cancelled = true;
      return true;
    }
    std::unique_ptr<QueuedRequest> up = removeLocked(r);
    tickets_.erase(it);
    Level& level = levels_[up->level - 1];
    if (level.cancelled != nullptr) level.cancelled->inc();
    answers.push_back({std::move(up->done), absl::CancelledError("Request cancelled")});
    updateOverloadLocked(0);
  }
  publishOverload();
  flush(answers);
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
    expireLocked(now, answers);
    wake = next_deadline_ns_;
    if (!shutdown_ && queued_ > 0 && inflight_ < config_.max_inflight_batches) {
      // The candidate batch: requests in strict priority order (level 1 first; within a level
      // unexpired FIFO, then DELAYed FIFO), stopping at the first that cannot join.
      const size_t n_inputs = model_.inputs.size();
      const int64_t max_batch = model_.max_batch_size;
      std::vector<QueuedRequest*> pending;
      std::vector<size_t> sums(n_inputs, 0);
      int64_t rows = 0;
      bool closed = false;
      auto consider = [&](QueuedRequest* r) {
        if (!pending.empty()) {
          if (max_batch == 0 || !compatible(*pending.front(), *r) || rows + r->rows > max_batch) {
            closed = true;
            return false;
          }
          for (size_t i = 0; i < n_inputs; ++i) {
            if (sums[i] + inputBytes(*r, i) > slab_bytes_[i]) {
              closed = true;
              return false;
            }
          }
        }
        pending.push_back(r);
        rows += r->rows;
        for (size_t i = 0; i < n_inputs; ++i) sums[i] += inputBytes(*r, i);
        return true;
      };
      for (Level& level : levels_) {
        bool go = true;
        for (auto& r : level.queue) {
          if (!(go = consider(r.get()))) break;
        }
        if (!go) break;
        for (auto& r : level.delayed) {
          if (!(go = consider(r.get()))) break;
        }
        if (!go) break;
      }
      if (max_batch == 0) closed = true;

      size_t take = pending.size();
      bool due = closed || rows >= max_batch;
      if (!due && !config_.preferred_batch_sizes.empty()) {
        int best = 0;
        for (int p : config_.preferred_batch_sizes) {
          if (p <= rows) best = p;
        }
        if (best > 0) {
          int64_t cum = 0;
          take = 0;
          while (take < pending.size() && cum + pending[take]->rows <= best) {
            cum += pending[take]->rows;
            ++take;
          }
          if (take == 0) take = 1;
          due = true;
        }
      }
      if (!due && config_.max_queue_delay_us == 0) due = true;
      if (!due) {
        uint64_t oldest = UINT64_MAX;
        for (const QueuedRequest* r : pending) oldest = std::min(oldest, r->enqueue_ns);
        const uint64_t at = oldest + config_.max_queue_delay_us * 1000;
        if (now >= at) {
          due = true;
        } else {
          wake = std::min(wake, at);
        }
      }
      if (due && !pending.empty()) {
        batch = std::make_unique<Batch>();
        batch->id = next_batch_++;
        batch->dispatch_ns = now;
        for (size_t k = 0; k < take; ++k) {
          QueuedRequest* r = pending[k];
          std::unique_ptr<QueuedRequest> up = removeLocked(r);
          up->state = QueuedRequest::State::kInFlight;
          Level& level = levels_[up->level - 1];
          if (level.queue_time != nullptr) level.queue_time->record((now - up->enqueue_ns) / 1000);
          batch->size += up->rows;
          batch->requests.push_back(std::move(up));
        }
        ++inflight_;
        if (inflight_gauge_ != nullptr) inflight_gauge_->add(1);
        wake = 0;  // there may be another batch due right away
      }
    }
    updateOverloadLocked(0);
  }
  publishOverload();
  flush(answers);
  if (next_wake_ns != nullptr) *next_wake_ns = wake;
  if (!batch) return nullptr;

  // Assemble the inputs outside the lock: the requests belong to the batch now.
  const size_t n_inputs = model_.inputs.size();
  batch->slabs.assign(n_inputs, nullptr);
  batch->heap.resize(n_inputs);
  batch->inputs.resize(n_inputs);
  uint64_t staged = 0, compacted = 0;
  bool unpinned = false;
  for (size_t i = 0; i < n_inputs; ++i) {
    size_t total = 0;
    // One contiguous run of this batcher's slots in one buffer, in batch order: dispatched in
    // place (the common case: requests placed one after another and batched in that order).
    bool in_place = true;
    uint8_t* base = nullptr;
    const uint8_t* next = nullptr;
    for (const auto& r : batch->requests) {
      const Tensor& t = r->request.inputs[i];
      total += t.byteSize();
      if (!in_place) continue;
      if (!r->placed) {
        in_place = false;
        continue;
      }
      uint8_t* b = static_cast<const Slots*>(r->request.slots.get())->base(i);
      if (base == nullptr) {
        base = b;
      } else if (b != base || t.slot != next) {
        in_place = false;
        continue;
      }
      next = t.slot + t.slot_bytes;
    }
    uint8_t* dst = nullptr;
    {
      std::lock_guard<std::mutex> lock(arena_->mu);
      if (in_place) {
        Arena::Buffer* b = arena_->find(arena_->inputs[i], base);
        ++b->refs;  // the batch's reference, dropped in complete()
        batch->slabs[i] = base;
        dst = batch->requests.front()->request.inputs[i].slot;
      } else if (total <= slab_bytes_[i]) {
        dst = batch->slabs[i] = arena_->acquireLocked(i);
      }
    }
    if (dst == nullptr) {
      // Larger than a buffer (or, should never happen, no buffer left): a heap buffer keeps
      // the request served.
      batch->heap[i].resize(total);
      dst = batch->heap[i].data();
      unpinned = true;
    }
    if (!in_place) {
      size_t off = 0;
      for (const auto& r : batch->requests) {
        const Tensor& t = r->request.inputs[i];
        const size_t len = t.byteSize();
        if (len != 0) std::memmove(dst + off, t.bytes(), len);
        (r->placed ? compacted : staged) += len;
        off += len;
      }
    }
    const Tensor& first = batch->requests.front()->request.inputs[i];
    BatchTensor& bt = batch->inputs[i];
    bt.name = model_.inputs[i].name;
    bt.dtype = model_.inputs[i].dtype;
    if (model_.max_batch_size > 0) {
      bt.shape.push_back(batch->size);
      bt.shape.insert(bt.shape.end(), first.shape.begin() + 1, first.shape.end());
    } else {
      bt.shape = first.shape;
    }
    bt.data = dst;
    bt.bytes = total;
  }
  if (batches_ != nullptr) batches_->inc();
  if (batch_size_ != nullptr) batch_size_->record(static_cast<uint64_t>(batch->size));
  if (fill_ratio_ != nullptr) fill_ratio_->record(static_cast<uint64_t>(batch->size));
  if (bytes_copied_ != nullptr) bytes_copied_->inc(staged + compacted);
  if (staged_bytes_ != nullptr) staged_bytes_->inc(staged);
  if (compacted_bytes_ != nullptr) compacted_bytes_->inc(compacted);
  if (unpinned && unpinned_batches_ != nullptr) unpinned_batches_->inc();
  return batch;
}

void Batcher::complete(std::unique_ptr<Batch> batch, BatchOutputs outputs) {
  const size_t n = batch->requests.size();
  std::vector<absl::StatusOr<InferResponse>> results;
  results.reserve(n);
  absl::Status error = outputs.ok() ? absl::OkStatus() : outputs.status();
  std::vector<std::vector<Tensor>> sliced(n);
  if (error.ok()) {
    for (const BatchTensor& o : *outputs) {
      const bool batched = model_.max_batch_size > 0;
      if (batched && (o.shape.empty() || o.shape[0] != batch->size)) {
        error = absl::InternalError(fmt::format(
            "backend output '{}' has shape {}, expected batch dimension {}", o.name,
            shapeToString(o.shape), batch->size));
        break;
      }
      std::vector<int64_t> rest(o.shape.begin() + (batched ? 1 : 0), o.shape.end());
      const std::optional<uint64_t> per_row = elementCount(rest);
      if (!per_row) {
        error = absl::InternalError(fmt::format("backend output '{}' has an invalid shape {}",
                                                o.name, shapeToString(o.shape)));
        break;
      }
      size_t off = 0;
      for (size_t k = 0; k < n && error.ok(); ++k) {
        const int64_t rows = batched ? batch->requests[k]->rows : 1;
        const uint64_t elems = *per_row * static_cast<uint64_t>(rows);
        size_t len = 0;
        if (o.dtype == DataType::kBytes) {
          for (uint64_t e = 0; e < elems; ++e) {
            uint32_t l = 0;
            if (off + len + 4 > o.bytes) break;
            std::memcpy(&l, o.data + off + len, 4);
            len += 4 + l;
          }
        } else {
          len = static_cast<size_t>(elems) * dataTypeSize(o.dtype);
        }
        if (off + len > o.bytes) {
          error = absl::InternalError(
              fmt::format("backend output '{}' is shorter than its shape says", o.name));
          break;
        }
        Tensor t;
        t.name = o.name;
        t.dtype = o.dtype;
        if (batched) t.shape.push_back(rows);
        t.shape.insert(t.shape.end(), rest.begin(), rest.end());
        t.data.assign(o.data + off, o.data + off + len);
        off += len;
        sliced[k].push_back(std::move(t));
      }
      if (!error.ok()) break;
    }
  }
  // Outputs are copied out (they may be views into the batch buffers): free the buffers.
  {
    std::lock_guard<std::mutex> lock(arena_->mu);
    for (size_t i = 0; i < batch->slabs.size(); ++i) {
      if (batch->slabs[i] != nullptr) arena_->unrefLocked(i, batch->slabs[i]);
    }
  }
  batch->slabs.clear();
  batch->heap.clear();

  std::vector<char> cancelled(n, 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    --inflight_;
    if (inflight_gauge_ != nullptr) inflight_gauge_->sub(1);
    for (size_t k = 0; k < n; ++k) {
      QueuedRequest& r = *batch->requests[k];
      cancelled[k] = r.cancelled;
      tickets_.erase(r.ticket);
      if (r.cancelled && levels_[r.level - 1].cancelled != nullptr) {
        levels_[r.level - 1].cancelled->inc();
      }
    }
  }
  if (!error.ok() && backend_errors_ != nullptr) backend_errors_->inc();
  for (size_t k = 0; k < n; ++k) {
    QueuedRequest& r = *batch->requests[k];
    if (cancelled[k]) {
      r.done(absl::CancelledError("Request cancelled"));
      continue;
    }
    if (!error.ok()) {
      r.done(error);
      continue;
    }
    InferResponse resp;
    resp.model_name = model_.name;
    resp.model_version = model_.version;
    resp.id = std::move(r.request.id);
    resp.requested = std::move(r.request.outputs);
    resp.binary_data_output = r.request.binary_data_output;
    resp.outputs = std::move(sliced[k]);
    r.done(std::move(resp));
  }
  notify();
}

void Batcher::shutdown() {
  std::vector<Answer> answers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_ = true;
    for (Level& level : levels_) {
      for (auto* list : {&level.queue, &level.delayed}) {
        for (auto& r : *list) {
          tickets_.erase(r->ticket);
          answers.push_back({std::move(r->done), absl::UnavailableError("Model is shutting down")});
        }
        if (level.depth != nullptr) level.depth->sub(static_cast<int64_t>(list->size()));
        queued_ -= list->size();
        list->clear();
      }
    }
    updateOverloadLocked(0);
  }
  publishOverload();
  flush(answers);
}

}  // namespace infergate::backends
