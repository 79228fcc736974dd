#include "backends/pool.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "absl/strings/match.h"
#include "common/clock.h"
#include "common/metrics.h"

namespace infergate::backends {

std::string_view sharedMemoryKindName(SharedMemoryKind k) {
  switch (k) {
    case SharedMemoryKind::kNone: return "none";
    case SharedMemoryKind::kSystem: return "system";
    case SharedMemoryKind::kCuda: return "cuda";
  }
  return "none";
}

std::string_view Pool::stateName(State s) {
  switch (s) {
    case State::kUnknown: return "unknown";
    case State::kHealthy: return "healthy";
    case State::kUnhealthy: return "unhealthy";
    case State::kEjected: return "ejected";
  }
  return "unknown";
}

struct Pool::Endpoint {
  size_t index = 0;
  std::unique_ptr<EndpointClient> client;
  State state = State::kUnknown;
  std::string reason = "not probed yet";
  absl::StatusCode last_code = absl::StatusCode::kOk;  // of the last probe
  uint32_t inflight = 0;
  uint32_t consecutive_failures = 0;
  uint64_t ejected_until_ns = 0;
  uint64_t batches = 0;
  uint64_t failures = 0;
  // Metrics (nullptr when none).
  common::Gauge* inflight_gauge = nullptr;
  common::Gauge* health_gauge = nullptr;  // 1 healthy, 0 unhealthy/unknown, -1 ejected
  common::Histogram* latency = nullptr;
  common::Counter* ejections = nullptr;
  common::Counter* ok = nullptr;
  std::map<int, common::Counter*> errors;  // by gRPC code; registered on first use (error path)
  // Queue depth (nullptr source: no metrics URL). The reading is written by the metrics thread
  // and read by pickLocked(), both under mu_.
  std::unique_ptr<QueueDepthSource> depth;
  uint64_t depth_value = 0;     // the server's queue depth at depth_at_ns
  uint64_t depth_at_ns = 0;     // 0: no reading
  uint64_t scrape_errors = 0;
  bool scrape_failing = false;  // last scrape failed (logged once per episode)
  bool depth_missing_logged = false;
  bool gpu_degraded = false;  // setEndpointDegraded
  common::Gauge* degraded_gauge = nullptr;
  common::Gauge* depth_gauge = nullptr;  // -1 when there is no fresh reading
  common::Counter* scrape_errors_counter = nullptr;
};

Pool::Pool(std::string model, std::string kind, RemoteBackendConfig config,
           std::vector<std::unique_ptr<EndpointClient>> clients, common::MetricsRegistry* metrics,
           std::vector<std::unique_ptr<QueueDepthSource>> queue_depth)
    : model_(std::move(model)), kind_(std::move(kind)), config_(std::move(config)),
      metrics_(metrics) {
  config_.metrics_interval_ms = std::max<uint64_t>(config_.metrics_interval_ms, 10);
  for (size_t i = 0; i < clients.size(); ++i) {
    auto e = std::make_unique<Endpoint>();
    e->index = i;
    e->client = std::move(clients[i]);
    if (metrics_ != nullptr) {
      const common::Labels l = {{"model", model_}, {"endpoint", e->client->address()}};
      e->inflight_gauge = &metrics_->gauge("infergate_backend_inflight",
                                           "Batches in flight at a backend endpoint", l);
      e->health_gauge = &metrics_->gauge(
          "infergate_backend_healthy",
          "Endpoint health: 1 healthy, 0 unhealthy or not probed yet, -1 ejected", l);
      e->degraded_gauge = &metrics_->gauge(
          "infergate_backend_gpu_degraded",
          "1 while the endpoint's GPU process is over its quota or in a latency anomaly "
          "(docs/GPU.md): picked only when no other healthy endpoint is unmarked",
          l);
      e->latency = &metrics_->histogram("infergate_backend_request_duration_seconds",
                                        "Batch round trip to a backend endpoint", l,
                                        common::latencyBucketsSeconds(), 1e6);
      e->ejections = &metrics_->counter("infergate_backend_ejections_total",
                                        "Passive outlier ejections of an endpoint", l);
      e->ok = &metrics_->counter("infergate_backend_batches_total",
                                 "Batches a backend endpoint answered successfully", l);
    }
    endpoints_.push_back(std::move(e));
  }
  if (queue_depth.empty()) {
    // Triton's pending-request gauge for the backend's name of the model.
    const std::string backend_model = config_.model_name.empty() ? model_ : config_.model_name;
    const uint64_t timeout_ms = std::max<uint64_t>(
        std::min(config_.metrics_interval_ms, config_.health_check_timeout_ms), 1);
    for (size_t i = 0; i < endpoints_.size() && i < config_.metrics_urls.size(); ++i) {
      if (config_.metrics_urls[i].empty()) continue;
      absl::StatusOr<HttpUrl> url = parseHttpUrl(config_.metrics_urls[i]);
      if (!url.ok()) {  // the config loader validates URLs: only a hand-built config gets here
        spdlog::error("model '{}': ignoring the metrics URL of {} endpoint {}: {}", model_, kind_,
                      endpoints_[i]->client->address(), std::string(url.status().message()));
        continue;
      }
      endpoints_[i]->depth = makeTritonQueueDepthSource(*std::move(url), backend_model,
                                                        config_.model_version, timeout_ms);
    }
  } else {
    for (size_t i = 0; i < endpoints_.size() && i < queue_depth.size(); ++i) {
      endpoints_[i]->depth = std::move(queue_depth[i]);
    }
  }
  for (auto& e : endpoints_) {
    if (e->depth == nullptr) continue;
    has_queue_depth_ = true;
    if (metrics_ != nullptr) {
      const common::Labels l = {{"model", model_}, {"endpoint", e->client->address()}};
      e->depth_gauge = &metrics_->gauge(
          "infergate_backend_queue_depth",
          "The server's own queue depth at the endpoint (pending requests for the model, from "
          "its metrics); -1 when there is no fresh reading",
          l);
      e->depth_gauge->set(-1);
      e->scrape_errors_counter = &metrics_->counter(
          "infergate_backend_metrics_scrape_errors_total",
          "Failed scrapes of an endpoint's metrics URL (refused, timeout, HTTP status, "
          "unparsable)",
          l);
    }
  }
  if (metrics_ != nullptr) {
    const common::Labels l = {{"model", model_}};
    retries_ = &metrics_->counter("infergate_backend_retries_total",
                                  "Batches moved to another endpoint because they never left", l);
    no_endpoint_ = &metrics_->counter(
        "infergate_backend_unavailable_total",
        "Batches answered UNAVAILABLE because no endpoint was healthy", l);
  }
}

Pool::~Pool() {
  std::vector<Pending> refused;
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    while (!queue_.empty()) {
      refused.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
  }
  cv_.notify_all();
  for (Pending& p : refused) {
    p.done(absl::UnavailableError(fmt::format("model '{}' is shutting down", model_)));
  }
  if (health_.joinable()) health_.join();
  if (metrics_thread_.joinable()) metrics_thread_.join();
  {
    std::unique_lock<std::mutex> lock(mu_);
    drained_.wait(lock, [this] { return inflight_ == 0; });
  }
  for (auto& e : endpoints_) e->client->shutdown();
}

absl::Status Pool::prepare(const std::vector<SharedBuffer>& buffers) {
  for (auto& e : endpoints_) e->client->attachBuffers(buffers);
  if (started_) return absl::OkStatus();
  return start(true);
}

absl::Status Pool::start(bool require_ready) {
  started_ = true;
  const uint64_t until = common::monotonicNs() + config_.startup_timeout_ms * 1'000'000;
  for (;;) {
    probeAll();
    bool any = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& e : endpoints_) {
        any = any || e->state == State::kHealthy;
        // A configuration mismatch does not go away by waiting: refuse now.
        if (e->last_code == absl::StatusCode::kFailedPrecondition) {
          return absl::FailedPreconditionError(e->reason);
        }
      }
    }
    if (any || common::monotonicNs() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::string problems;
  bool any = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : endpoints_) {
      if (e->state == State::kHealthy) {
        any = true;
        continue;
      }
      problems += fmt::format("{}{}: {}", problems.empty() ? "" : "; ", e->client->address(),
                              e->reason);
    }
  }
  if (!any && require_ready) {
    return absl::UnavailableError(fmt::format(
        "model '{}': no {} endpoint became ready within {} ms ({}); start the backend or fix "
        "the model's endpoints / startup_timeout_ms",
        model_, kind_, config_.startup_timeout_ms, problems));
  }
  if (!problems.empty()) {
    spdlog::warn("model '{}': {} endpoint(s) not ready at start-up: {}", model_, kind_, problems);
  }
  health_ = std::thread([this] { healthLoop(); });
  if (has_queue_depth_) metrics_thread_ = std::thread([this] { metricsLoop(); });
  return absl::OkStatus();
}

void Pool::setStateLocked(Endpoint& e, State s, std::string reason) {
  if (e.state != s) {
    if (s == State::kHealthy) {
      spdlog::info("model '{}': {} endpoint {} is healthy{}", model_, kind_, e.client->address(),
                   e.state == State::kUnknown ? "" : " again (re-admitted)");
    } else {
      spdlog::warn("model '{}': {} endpoint {} is {}: {}", model_, kind_, e.client->address(),
                   stateName(s), reason);
    }
  }
  e.state = s;
  e.reason = std::move(reason);
  if (e.health_gauge != nullptr) {
    e.health_gauge->set(s == State::kHealthy ? 1 : s == State::kEjected ? -1 : 0);
  }
}

void Pool::probeOne(Endpoint& e) {
  bool fresh;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (e.state == State::kEjected && common::monotonicNs() < e.ejected_until_ns) return;
    fresh = e.state != State::kHealthy;
  }
  absl::Status s = e.client->probe(fresh);
  std::vector<Pending> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    e.last_code = s.code();
    if (s.ok()) {
      if (e.state != State::kHealthy) e.consecutive_failures = 0;
      setStateLocked(e, State::kHealthy, "");
      drainPendingLocked(ready);
    } else {
      setStateLocked(e, State::kUnhealthy, std::string(s.message()));
    }
  }
  for (Pending& p : ready) dispatch(std::move(p));
}

void Pool::probeAll() {
  for (auto& e : endpoints_) probeOne(*e);
}

void Pool::healthLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait_for(lock, std::chrono::milliseconds(std::max<uint64_t>(config_.health_check_interval_ms, 10)),
                 [this] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    probeAll();
    lock.lock();
  }
}

bool Pool::freshLocked(const Endpoint& e, uint64_t now_ns) const {
  return e.depth_at_ns != 0 && now_ns >= e.depth_at_ns &&
         now_ns - e.depth_at_ns <= 3 * config_.metrics_interval_ms * 1'000'000;
}

uint64_t Pool::loadLocked(const Endpoint& e, uint64_t now_ns) const {
  return e.inflight + (freshLocked(e, now_ns) ? e.depth_value : 0);
}

void Pool::scrapeOne(Endpoint& e) {
  if (e.depth == nullptr) return;
  absl::StatusOr<std::optional<double>> r = e.depth->read();  // blocking, without the lock
  const uint64_t now = common::monotonicNs();
  std::lock_guard<std::mutex> lock(mu_);
  if (!r.ok()) {
    ++e.scrape_errors;
    if (e.scrape_errors_counter != nullptr) e.scrape_errors_counter->inc();
    if (!e.scrape_failing) {
      spdlog::warn(
          "model '{}': cannot read the queue depth of {} endpoint {} from {}: {} (picking uses "
          "in-flight batches only once the last reading is stale; health is unaffected)",
          model_, kind_, e.client->address(), e.depth->url(), std::string(r.status().message()));
    }
    e.scrape_failing = true;
  } else {
    if (e.scrape_failing) {
      spdlog::info("model '{}': queue depth of {} endpoint {} readable again from {}", model_,
                   kind_, e.client->address(), e.depth->url());
    }
    e.scrape_failing = false;
    if (!r->has_value()) {
      e.depth_at_ns = 0;  // no reading: in-flight batches only
      if (!e.depth_missing_logged) {
        spdlog::warn("model '{}': {} has no {} sample for the model; {} endpoint {} is picked on "
                     "in-flight batches only",
                     model_, e.depth->url(), kTritonPendingMetric, kind_, e.client->address());
        e.depth_missing_logged = true;
      }
    } else {
      e.depth_missing_logged = false;
      // Negative, NaN (not returned) or absurd values are clamped: the value is untrusted.
      const double v = **r;
      e.depth_value = v > 0 ? static_cast<uint64_t>(std::min(v, 1e9) + 0.5) : 0;
      e.depth_at_ns = now;
    }
  }
  if (e.depth_gauge != nullptr) {
    e.depth_gauge->set(freshLocked(e, now) ? static_cast<int64_t>(e.depth_value) : -1);
  }
}

void Pool::scrapeAll() {
  for (auto& e : endpoints_) scrapeOne(*e);
}

void Pool::metricsLoop() {
  const auto interval = std::chrono::milliseconds(config_.metrics_interval_ms);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const auto next = std::chrono::steady_clock::now() + interval;
    lock.unlock();
    scrapeAll();
    lock.lock();
    cv_.wait_until(lock, next, [this] { return stopping_; });
  }
}

Pool::Endpoint* Pool::pickLocked(const Pending& p, bool* all_busy) {
  *all_busy = false;
  // GPU health: while some healthy endpoint is not marked degraded, only those are candidates.
  bool skip_degraded = false;
  for (auto& e : endpoints_) {
    if (e->state == State::kHealthy && !e->gpu_degraded) skip_degraded = true;
  }
  // Candidates: healthy, untried, below the concurrency limit.
  Endpoint* cand[2] = {nullptr, nullptr};
  uint32_t seen = 0;
  for (auto& e : endpoints_) {
    if (e->state != State::kHealthy || p.tried[e->index]) continue;
    if (skip_degraded && e->gpu_degraded) continue;
    if (config_.max_concurrency > 0 && e->inflight >= config_.max_concurrency) {
      *all_busy = true;
      continue;
    }
    // Reservoir-sample two distinct candidates (power of two choices).
    ++seen;
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    if (seen <= 2) {
      cand[seen - 1] = e.get();
    } else {
      uint64_t r = rng_ % seen;
      if (r < 2) cand[r] = e.get();
    }
  }
  if (cand[0] == nullptr) return nullptr;
  *all_busy = false;
  if (cand[1] == nullptr) return cand[0];
  // Load: our in-flight batches, plus the server's queue depth where a fresh reading exists.
  const uint64_t now = has_queue_depth_ ? common::monotonicNs() : 0;
  const uint64_t l0 = loadLocked(*cand[0], now);
  const uint64_t l1 = loadLocked(*cand[1], now);
  if (l0 != l1) return l0 < l1 ? cand[0] : cand[1];
  return (rng_ & 1) ? cand[0] : cand[1];
}

std::vector<std::string> Pool::endpoints() const {
  std::vector<std::string> out;
  for (auto& e : endpoints_) out.push_back(e->client->address());
  return out;
}

void Pool::setEndpointDegraded(const std::string& address, bool degraded) {
  std::vector<Pending> ready;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : endpoints_) {
      if (e->client->address() != address || e->gpu_degraded == degraded) continue;
      e->gpu_degraded = degraded;
      if (e->degraded_gauge) e->degraded_gauge->set(degraded ? 1 : 0);
      spdlog::info("model '{}': {} endpoint {} {} (GPU health)", model_, kind_, address,
                   degraded ? "marked degraded: picked last" : "no longer degraded");
    }
    // A batch waiting for a busy unmarked endpoint may go to one whose mark was just cleared.
    drainPendingLocked(ready);
  }
  for (Pending& p : ready) dispatch(std::move(p));
}

std::string Pool::unavailableMessageLocked() const {
  std::string why;
  for (auto& e : endpoints_) {
    why += fmt::format("{}{} {}{}{}", why.empty() ? "" : "; ", e->client->address(),
                       stateName(e->state), e->reason.empty() ? "" : ": ", e->reason);
  }
  return fmt::format("no healthy {} endpoint for model '{}' ({})", kind_, model_, why);
}

void Pool::execute(const Batch& batch, BatchDone done) {
  Pending p{&batch, std::move(done), std::vector<bool>(endpoints_.size(), false)};
  dispatch(std::move(p));
}

void Pool::drainPendingLocked(std::vector<Pending>& ready) {
  // Hand queued batches to endpoints with free slots (the caller dispatches them unlocked).
  size_t free_slots = 0;
  for (auto& e : endpoints_) {
    if (e->state != State::kHealthy) continue;
    if (config_.max_concurrency == 0) {
      free_slots = queue_.size();
      break;
    }
    free_slots += e->inflight < config_.max_concurrency ? config_.max_concurrency - e->inflight : 0;
  }
  while (!queue_.empty() && free_slots > 0) {
    ready.push_back(std::move(queue_.front()));
    queue_.pop_front();
    --free_slots;
  }
}

void Pool::dispatch(Pending p) {
  const Batch& batch = *p.batch;
  const uint64_t now = common::monotonicNs();
  SendOptions opt;
  opt.timeout_ms = config_.request_timeout_ms;
  bool all_deadlines = !batch.requests.empty();
  uint64_t latest = 0;
  for (const auto& r : batch.requests) {
    if (r->deadline_ns == 0) all_deadlines = false;
    latest = std::max(latest, r->deadline_ns);
    const int64_t prio = r->request.priority;
    if (prio > 0 && (opt.priority == 0 || prio < opt.priority)) opt.priority = prio;
  }
  bool deadline_bound = false;
  if (all_deadlines) {
    if (latest <= now) {
      p.done(absl::UnavailableError("Request timeout expired"));
      return;
    }
    const uint64_t left_us = (latest - now) / 1000;
    const uint64_t left_ms = std::max<uint64_t>((left_us + 999) / 1000, 1);
    opt.timeout_us = left_us;
    if (opt.timeout_ms == 0 || left_ms < opt.timeout_ms) {
      opt.timeout_ms = left_ms;
      deadline_bound = true;
    }
  }

  Endpoint* e = nullptr;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) {
      lock.unlock();
      p.done(absl::UnavailableError(fmt::format("model '{}' is shutting down", model_)));
      return;
    }
    bool all_busy = false;
    e = pickLocked(p, &all_busy);
    if (e == nullptr && all_busy) {
      queue_.push_back(std::move(p));  // dispatched when a slot frees up
      return;
    }
    if (e == nullptr) {
      std::string msg = unavailableMessageLocked();
      lock.unlock();
      if (no_endpoint_ != nullptr) no_endpoint_->inc();
      p.done(absl::UnavailableError(msg));
      return;
    }
    ++e->inflight;
    ++inflight_;
    if (e->inflight_gauge != nullptr) e->inflight_gauge->add(1);
    p.tried[e->index] = true;
  }
  // The Pending moves into the completion; `batch` stays valid until done is called.
  auto shared = std::make_shared<Pending>(std::move(p));
  const uint64_t start = common::monotonicNs();
  e->client->send(batch, opt,
                  [this, e, shared, start, deadline_bound](BatchOutputs out, bool not_sent) {
                    if (!out.ok() && deadline_bound &&
                        out.status().code() == absl::StatusCode::kDeadlineExceeded) {
                      out = absl::UnavailableError(fmt::format(
                          "Request timeout expired (at {} endpoint {})", kind_,
                          e->client->address()));
                    }
                    onDone(e, std::move(*shared), start, std::move(out), not_sent);
                  });
}

void Pool::onDone(Endpoint* e, Pending p, uint64_t start_ns, BatchOutputs out, bool not_sent) {
  const uint64_t now = common::monotonicNs();
  std::vector<Pending> ready;
  bool retry = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --e->inflight;
    if (e->inflight_gauge != nullptr) e->inflight_gauge->sub(1);
    ++e->batches;
    if (out.ok()) {
      e->consecutive_failures = 0;
      if (e->ok != nullptr) e->ok->inc();
      if (e->latency != nullptr) e->latency->record((now - start_ns) / 1000);
    } else {
      ++e->failures;
      const int code = static_cast<int>(out.status().code());
      if (metrics_ != nullptr) {
        auto it = e->errors.find(code);
        if (it == e->errors.end()) {
          it = e->errors
                   .emplace(code, &metrics_->counter(
                                      "infergate_backend_errors_total",
                                      "Failed batches by gRPC status code",
                                      {{"model", model_},
                                       {"endpoint", e->client->address()},
                                       {"code", absl::StatusCodeToString(out.status().code())}}))
                   .first;
        }
        it->second->inc();
      }
      if (not_sent) {
        // Nobody listens there: out of rotation until a probe passes; try elsewhere.
        setStateLocked(*e, State::kUnhealthy, std::string(out.status().message()));
        retry = !stopping_;
      } else {
        const absl::StatusCode c = out.status().code();
        const bool endpoint_fault = c == absl::StatusCode::kUnavailable ||
                                    c == absl::StatusCode::kDeadlineExceeded ||
                                    c == absl::StatusCode::kInternal ||
                                    c == absl::StatusCode::kUnknown;
        if (endpoint_fault && config_.eject_after_failures > 0 &&
            ++e->consecutive_failures >= config_.eject_after_failures &&
            e->state == State::kHealthy) {
          e->ejected_until_ns = now + config_.ejection_ms * 1'000'000;
          if (e->ejections != nullptr) e->ejections->inc();
          setStateLocked(*e, State::kEjected,
                         fmt::format("{} consecutive failures, ejected for {} ms",
                                     e->consecutive_failures, config_.ejection_ms));
        }
      }
    }
    if (!stopping_) drainPendingLocked(ready);
  }
  if (retry) {
    if (retries_ != nullptr) retries_->inc();
    ready.insert(ready.begin(), std::move(p));
  } else if (out.ok()) {
    p.done(std::move(out));
  } else {
    const absl::Status& s = out.status();
    absl::Status answer;
    if (s.code() == absl::StatusCode::kInvalidArgument || absl::StartsWith(s.message(), "Request timeout")) {
      answer = s;  // the request's own fault / its deadline: pass through
    } else {
      answer = absl::UnavailableError(fmt::format("{} endpoint {} failed for model '{}': {}: {}",
                                                  kind_, e->client->address(), model_,
                                                  absl::StatusCodeToString(s.code()),
                                                  std::string(s.message())));
    }
    p.done(std::move(answer));
  }
  for (Pending& r : ready) dispatch(std::move(r));
  // Last: the destructor waits for inflight_ == 0 before tearing the pool down. Only then is
  // anyone woken: a wake-up per completion of the health and metrics threads (which shared one
  // condition variable with the drain) cost ~5 futex calls per request.
  std::lock_guard<std::mutex> lock(mu_);
  if (--inflight_ == 0 && stopping_) drained_.notify_all();
}

std::vector<Pool::EndpointStatus> Pool::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t now = common::monotonicNs();
  std::vector<EndpointStatus> out;
  for (auto& e : endpoints_) {
    out.push_back({e->client->address(), e->state, e->inflight, e->batches, e->failures,
                   e->reason,
                   freshLocked(*e, now) ? static_cast<int64_t>(e->depth_value) : -1,
                   e->scrape_errors, e->gpu_degraded});
  }
  return out;
}

}  // namespace infergate::backends
