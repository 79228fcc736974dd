#include "backends/identity_model.h"

#include <fmt/format.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "backends/pool.h"
#include "backends/tfserving_backend.h"
#include "backends/triton_backend.h"

namespace infergate::backends {

IdentityModel::IdentityModel(ModelConfig config)
    : config_(std::move(config)), device_(config_.cost_fixed_us, config_.cost_per_item_us) {}

IdentityModel::~IdentityModel() = default;

InferResponse IdentityModel::compute(InferRequest&& request) const {
  InferResponse resp;
  resp.model_name = config_.name;
  resp.model_version = config_.version;
  resp.id = std::move(request.id);
  resp.requested = std::move(request.outputs);
  resp.binary_data_output = request.binary_data_output;
  resp.outputs.reserve(config_.outputs.size());
  for (size_t i = 0; i < config_.outputs.size() && i < config_.inputs.size(); ++i) {
    for (Tensor& in : request.inputs) {
      if (in.name != config_.inputs[i].name) continue;
      Tensor out = std::move(in);
      out.name = config_.outputs[i].name;
      resp.outputs.push_back(std::move(out));
      break;
    }
  }
  return resp;
}

namespace {

// Waits until `until` like a host thread waiting for a device: it sleeps (a device does not
// burn a host core), then spins only the last stretch. With 1 ns of timer slack (set by the
// worker) a sleep ends within ~10 us here (p50 7 us, p90 12 us); with the default 50 us slack it
// overshot by 60-140 us, which every batch cycle used to pay.
void waitUntil(std::chrono::steady_clock::time_point until) {
  using Clock = std::chrono::steady_clock;
  constexpr auto kSpin = std::chrono::microseconds(15);
  if (until - Clock::now() > 2 * kSpin) std::this_thread::sleep_until(until - kSpin);
  while (Clock::now() < until) {
  }
}

}  // namespace

SimulatedDevice::SimulatedDevice(uint64_t fixed_us, uint64_t per_item_us)
    : fixed_us_(fixed_us), per_item_us_(per_item_us), has_cost_(fixed_us + per_item_us > 0) {
  if (has_cost_) worker_ = std::thread([this] { loop(/*set_timer_slack=*/true); });
}

SimulatedDevice::~SimulatedDevice() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void SimulatedDevice::ensureWorkerLocked() {
  if (!exited_) return;
  // The thread set exited_ under mu_ and returned without taking it again: the join is short.
  worker_.join();
  exited_ = false;
  // No prctl on this thread: it may start after the seccomp filter is in force (its kill
  // action would end the process); a late job to a retired model runs with the default slack.
  worker_ = std::thread([this] { loop(/*set_timer_slack=*/false); });
}

void SimulatedDevice::run(uint64_t items, std::function<void()> job) {
  if (!has_cost_) {
    job();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ensureWorkerLocked();
    jobs_.push_back(Job{items, std::move(job), std::chrono::steady_clock::now()});
  }
  cv_.notify_one();
}

void SimulatedDevice::retire(std::function<bool()> upstream_idle) {
  if (!has_cost_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    retired_ = true;
    upstream_idle_ = std::move(upstream_idle);
  }
  cv_.notify_all();
}

bool SimulatedDevice::hostThreadRunning() const {
  if (!has_cost_) return false;
  std::lock_guard<std::mutex> lock(mu_);
  return !exited_;
}

void SimulatedDevice::loop(bool set_timer_slack) {
  if (set_timer_slack) prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);  // see waitUntil
  // When the device finishes the job before (it is busy until then).
  std::chrono::steady_clock::time_point device_free{};
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mu_);
      const auto has_work = [this] { return stopping_ || !jobs_.empty(); };
      if (retired_) {
        // Retired: wait for a job at most the grace, then leave if nothing more is coming.
        if (!cv_.wait_for(lock, std::chrono::milliseconds(kRetireGraceMs), has_work)) {
          std::function<bool()> idle = upstream_idle_;
          lock.unlock();  // the predicate may take the batcher's locks
          const bool upstream_idle = !idle || idle();
          lock.lock();
          if (upstream_idle && jobs_.empty() && !stopping_) {
            exited_ = true;
            return;
          }
          continue;
        }
      } else {
        cv_.wait(lock, [&] { return has_work() || retired_; });
        if (jobs_.empty() && !stopping_) continue;  // retired: wait with the grace above
      }
      if (jobs_.empty()) return;  // stopping and drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    // The device starts the job when it was queued or when it finished the previous one,
    // whichever is later, whatever this host thread was doing meanwhile.
    const auto start = std::max(job.queued, device_free);
    device_free = start + std::chrono::microseconds(fixed_us_ + per_item_us_ * job.items);
    waitUntil(device_free);
    job.fn();
  }
}

void IdentityModel::infer(InferRequest request, InferCallback done) {
  uint64_t items = 1;
  if (config_.max_batch_size > 0 && !request.inputs.empty() && !request.inputs[0].shape.empty()) {
    items = static_cast<uint64_t>(request.inputs[0].shape[0]);
  }
  if (config_.cost_fixed_us + config_.cost_per_item_us == 0) {
    done(compute(std::move(request)));  // no device time: answered inline, nothing allocated
    return;
  }
  // The job owns the request until the device runs it (std::function needs a copyable
  // callable, hence the shared_ptr).
  auto req = std::make_shared<InferRequest>(std::move(request));
  device_.run(items, [this, req, done = std::move(done)] { done(compute(std::move(*req))); });
}

IdentityBatchBackend::IdentityBatchBackend(ModelConfig config)
    : config_(std::move(config)), device_(config_.cost_fixed_us, config_.cost_per_item_us) {}

IdentityBatchBackend::~IdentityBatchBackend() = default;

BatchOutputs IdentityBatchBackend::outputs(const Batch& batch) const {
  std::vector<BatchTensor> out;
  out.reserve(batch.inputs.size());
  for (size_t i = 0; i < batch.inputs.size() && i < config_.outputs.size(); ++i) {
    BatchTensor t = batch.inputs[i];
    t.name = config_.outputs[i].name;
    out.push_back(std::move(t));
  }
  return out;
}

void IdentityBatchBackend::execute(const Batch& batch, BatchDone done) {
  const uint64_t items = static_cast<uint64_t>(std::max<int64_t>(batch.size, 1));
  device_.run(items, [this, &batch, done = std::move(done)] { done(outputs(batch)); });
}

namespace {

// Remote backends always run behind a batcher (with max_batch_size 0: one request per batch),
// which gives them priorities, deadlines and queue limits; without a dynamic_batching section,
// as many batches may be in flight as the pool takes (endpoints x max_concurrency).
absl::StatusOr<std::unique_ptr<Model>> createRemoteModel(const ModelConfig& config,
                                                         const BatchingConfig* batching,
                                                         common::MetricsRegistry* metrics,
                                                         const PinnedOptions* pinned) {
  if (config.remote == nullptr) {
    return absl::InvalidArgumentError("model '" + config.name + "': backend '" + config.backend +
                                      "' needs its endpoints (models[]." + config.backend +
                                      ".endpoints)");
  }
  BatchingConfig bc;
  if (batching != nullptr && batching->enabled) {
    bc = *batching;
  } else {
    bc.max_inflight_batches = static_cast<uint32_t>(std::max<size_t>(
        1,
        config.remote->endpoints.size() * std::max<uint32_t>(config.remote->max_concurrency, 1)));
  }
  absl::StatusOr<std::unique_ptr<BatchBackend>> backend =
      config.backend == "triton" ? createTritonBackend(config, bc.max_inflight_batches, metrics)
                                 : createTfServingBackend(config, metrics);
  if (!backend.ok()) return backend.status();
  // With Triton system shared memory, the batch buffers themselves are the shared regions
  // (registered with the endpoints by the pool): a batch's inputs reach Triton with no copy.
  PinnedOptions shared;
  if (config.backend == "triton" && config.remote->shared_memory == SharedMemoryKind::kSystem) {
    if (pinned != nullptr) {
      shared = *pinned;
    } else {
      shared.try_cuda = shared.try_huge_pages = shared.try_mlock = false;
    }
    static std::atomic<uint32_t> counter{0};
    shared.shared_key =
        fmt::format("/infergate.{}.{}.buf{}", ::getpid(), config.name, counter.fetch_add(1));
    pinned = &shared;
  }
  absl::StatusOr<std::unique_ptr<BatchedModel>> m =
      BatchedModel::create(config, bc, std::move(*backend), metrics, pinned);
  if (!m.ok()) return m.status();
  return std::unique_ptr<Model>(std::move(*m));
}

bool isRemote(const ModelConfig& config) {
  return config.backend == "triton" || config.backend == "tfserving";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> createModel(const ModelConfig& config) {
  if (config.backend == "identity") return std::unique_ptr<Model>(new IdentityModel(config));
  if (isRemote(config)) return createRemoteModel(config, nullptr, nullptr, nullptr);
  return absl::InvalidArgumentError("model '" + config.name + "': unknown backend '" +
                                    config.backend + "' (available: identity, triton, tfserving)");
}

absl::StatusOr<std::unique_ptr<Model>> createModel(const ModelConfig& config,
                                                   const BatchingConfig* batching,
                                                   common::MetricsRegistry* metrics,
                                                   const PinnedOptions* pinned) {
  if (isRemote(config)) return createRemoteModel(config, batching, metrics, pinned);
  if (batching == nullptr || !batching->enabled) return createModel(config);
  if (config.backend != "identity") return createModel(config);  // the unknown-backend error
  absl::StatusOr<std::unique_ptr<BatchedModel>> m = BatchedModel::create(
      config, *batching, std::make_unique<IdentityBatchBackend>(config), metrics, pinned);
  if (!m.ok()) return m.status();
  return std::unique_ptr<Model>(std::move(*m));
}

}  // namespace infergate::backends
