#include "backends/pool.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "absl/strings/match.h"
#include "backends/dns_resolver.h"
#include "common/clock.h"
#include "common/metrics.h"

namespace infergate::backends {

std::string_view sharedMemoryKindName(SharedMemoryKind k) {
  switch (k) {
    case SharedMemoryKind::kNone:
      return "none";
    case SharedMemoryKind::kSystem:
      return "system";
    case SharedMemoryKind::kCuda:
      return "cuda";
  }
  return "none";
}

std::string_view Pool::stateName(State s) {
  switch (s) {
    case State::kUnknown:
      return "unknown";
    case State::kHealthy:
      return "healthy";
    case State::kUnhealthy:
      return "unhealthy";
    case State::kEjected:
      return "ejected";
  }
  return "unknown";
}

struct Pool::Endpoint {
  // {model, endpoint}: the series below leave the registry with the last claim on them (the
  // client holds one too). First member: dropped after the client and the metric pointers.
  common::SeriesClaim claim;
  uint64_t id = 0;
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
  uint64_t depth_value = 0;  // the server's queue depth at depth_at_ns
  uint64_t depth_at_ns = 0;  // 0: no reading
  uint64_t scrape_errors = 0;
  bool scrape_failing = false;  // last scrape failed (logged once per episode)
  bool depth_missing_logged = false;
  bool gpu_degraded = false;  // setEndpointDegraded
  common::Gauge* degraded_gauge = nullptr;
  common::Gauge* depth_gauge = nullptr;  // -1 when there is no fresh reading
  common::Counter* scrape_errors_counter = nullptr;
  // Set changes (guarded by mu_).
  bool draining = false;   // removed: no new batches, closed by reap() once idle
  uint32_t active = 0;     // batches sent and not yet through onDone (reap() waits for 0)
  uint32_t sequences = 0;  // bindings to this endpoint
};

namespace {

// Pools alive per (registry, model). A model that a reload rebuilt has two for a while (the new
// one serving, the old one draining) and their model-level gauges are the same series: the
// retiring pool zeroes them only when it is the last pool of its model.
std::mutex g_live_pools_mu;
std::map<std::pair<const common::MetricsRegistry*, std::string>, int> g_live_pools;

void joinLivePools(const common::MetricsRegistry* r, const std::string& model) {
  std::lock_guard<std::mutex> lock(g_live_pools_mu);
  ++g_live_pools[{r, model}];
}

// The pools of `model` left alive after this one.
int leaveLivePools(const common::MetricsRegistry* r, const std::string& model) {
  std::lock_guard<std::mutex> lock(g_live_pools_mu);
  auto it = g_live_pools.find({r, model});
  if (it == g_live_pools.end()) return 0;
  const int left = --it->second;
  if (left <= 0) g_live_pools.erase(it);
  return std::max(left, 0);
}

}  // namespace

std::shared_ptr<Pool::Endpoint> Pool::makeEndpoint(std::unique_ptr<EndpointClient> client) {
  auto e = std::make_shared<Endpoint>();
  e->client = std::move(client);
  if (metrics_ != nullptr) {
    const common::Labels l = {{"model", model_}, {"endpoint", e->client->address()}};
    e->claim = common::SeriesClaim(metrics_, l);
    e->inflight_gauge = &metrics_->gauge("infergate_backend_inflight",
                                         "Batches in flight at a backend endpoint", l);
    e->health_gauge = &metrics_->gauge(
        "infergate_backend_healthy",
        "Endpoint health: 1 healthy, 0 unhealthy or not probed yet, -1 ejected", l);
    e->health_gauge->set(0);
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
  return e;
}

Pool::Pool(std::string model, std::string kind, RemoteBackendConfig config,
           std::vector<std::unique_ptr<EndpointClient>> clients, common::MetricsRegistry* metrics,
           std::vector<std::unique_ptr<QueueDepthSource>> queue_depth)
    : model_(std::move(model)),
      kind_(std::move(kind)),
      config_(std::move(config)),
      metrics_(metrics) {
  config_.metrics_interval_ms = std::max<uint64_t>(config_.metrics_interval_ms, 10);
  if (metrics_ != nullptr) {
    joinLivePools(metrics_, model_);
    live_ = true;
  }
  for (auto& c : clients) {
    auto e = makeEndpoint(std::move(c));
    e->id = next_id_++;
    endpoints_.push_back(std::move(e));
  }
  for (const std::string& entry : config_.endpoints) {
    absl::StatusOr<DnsTargetSpec> spec = parseDnsEntry(entry);
    if (spec.ok()) {
      DnsTarget t;
      t.entry = entry;
      t.name = spec->name;
      t.port = spec->port;
      dns_.push_back(std::move(t));
    } else {
      static_.push_back(entry);  // a malformed dns entry was refused by the config loader
    }
  }
  has_dns_ = !dns_.empty();
  if (queue_depth.empty()) {
    // Triton's pending-request gauge for the backend's name of the model.
    const std::string backend_model = config_.model_name.empty() ? model_ : config_.model_name;
    const uint64_t timeout_ms = std::max<uint64_t>(
        std::min(config_.metrics_interval_ms, config_.health_check_timeout_ms), 1);
    // metrics_urls is parallel to config.endpoints, whose dns:/// entries have no client.
    for (size_t i = 0; i < config_.endpoints.size() && i < config_.metrics_urls.size(); ++i) {
      if (config_.metrics_urls[i].empty()) continue;
      Endpoint* target = nullptr;
      for (auto& e : endpoints_) {
        if (e->client->address() == config_.endpoints[i]) target = e.get();
      }
      if (target == nullptr) continue;
      absl::StatusOr<HttpUrl> url = parseHttpUrl(config_.metrics_urls[i]);
      if (!url.ok()) {  // the config loader validates URLs: only a hand-built config gets here
        spdlog::error("model '{}': ignoring the metrics URL of {} endpoint {}: {}", model_, kind_,
                      target->client->address(), std::string(url.status().message()));
        continue;
      }
      target->depth = makeTritonQueueDepthSource(*std::move(url), backend_model,
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
    no_endpoint_ =
        &metrics_->counter("infergate_backend_unavailable_total",
                           "Batches answered UNAVAILABLE because no endpoint was healthy", l);
    endpoints_gauge_ = &metrics_->gauge(
        "infergate_backend_endpoints",
        "Endpoints in the model's pool (static and DNS-discovered; draining ones excluded)", l);
    endpoints_gauge_->set(static_cast<int64_t>(endpoints_.size()));
    if (!dns_.empty()) {
      dns_resolutions_ = &metrics_->counter(
          "infergate_backend_dns_resolutions_total",
          "Resolutions of the model's dns:/// endpoint entries (each entry counts)", l);
      dns_failures_ = &metrics_->counter(
          "infergate_backend_dns_failures_total",
          "Failed resolutions (timeout, refused, server failure): the last good set is kept", l);
      dns_empty_ = &metrics_->counter(
          "infergate_backend_dns_empty_total",
          "Resolutions answering NXDOMAIN or no A/AAAA record: the last good set is kept", l);
    }
    seq_gauge_ = &metrics_->gauge("infergate_backend_sequences",
                                  "Sequences bound to an endpoint of the model's pool", l);
    seq_refused_full_ =
        &metrics_->counter("infergate_backend_sequence_refused_total",
                           "Sequence starts refused because sequence_max bindings exist", l);
    seq_broken_ = &metrics_->counter(
        "infergate_backend_sequence_broken_total",
        "Sequence requests refused because the bound endpoint failed or left", l);
    seq_expired_ = &metrics_->counter(
        "infergate_backend_sequence_expired_total",
        "Sequence bindings removed after sequence_idle_timeout_ms without a request", l);
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
  resolver_cv_.notify_all();
  for (Pending& p : refused) {
    p.done(absl::UnavailableError(fmt::format("model '{}' is shutting down", model_)));
  }
  if (health_.joinable()) health_.join();
  if (live_) leaveLivePools(metrics_, model_);
  if (metrics_thread_.joinable()) metrics_thread_.join();
  std::thread resolver;
  {
    std::lock_guard<std::mutex> set_lock(set_mu_);  // setEndpoints may start the resolver
    resolver = std::move(resolver_thread_);
  }
  if (resolver.joinable()) resolver.join();
  {
    std::unique_lock<std::mutex> lock(mu_);
    drained_.wait(lock, [this] { return inflight_ == 0; });
  }
  for (auto& e : endpoints_) e->client->shutdown();
}

absl::Status Pool::prepare(const std::vector<SharedBuffer>& buffers) {
  {
    std::lock_guard<std::mutex> set_lock(set_mu_);
    buffers_ = buffers;  // for clients added later (setEndpoints, DNS)
  }
  for (auto& e : endpoints_) e->client->attachBuffers(buffers);
  if (started_) return absl::OkStatus();
  return start(true);
}

absl::Status Pool::start(bool require_ready) {
  started_ = true;
  if (!dns_.empty()) {
    if (!factory_) {
      return absl::FailedPreconditionError(fmt::format(
          "model '{}': dns:/// endpoints need a client factory (internal error)", model_));
    }
    resolveAll();  // the first resolution, on the starting thread
  }
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
      problems +=
          fmt::format("{}{}: {}", problems.empty() ? "" : "; ", e->client->address(), e->reason);
    }
  }
  if (problems.empty() && !any) {
    problems = dns_.empty() ? "no endpoints"
                            : "no endpoints: the dns:/// entries resolved to nothing (see the log)";
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
  {
    std::lock_guard<std::mutex> set_lock(set_mu_);
    if (!dns_.empty() && !resolver_thread_.joinable()) {
      resolver_thread_ = std::thread([this] { resolverLoop(); });
    }
  }
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
  if (s != State::kHealthy && e.sequences > 0) {
    breakBindingsLocked(e, fmt::format("{} endpoint {} is {}: {}", kind_, e.client->address(),
                                       stateName(s), reason));
  }
  if (s == State::kUnhealthy && e.state == State::kHealthy && has_dns_) {
    resolve_now_ = true;  // the endpoint may have left: ask DNS at once
    resolver_cv_.notify_all();
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
    // Ejected while the probe ran (its answer predates the failures): the ejection holds.
    if (e.state == State::kEjected && common::monotonicNs() < e.ejected_until_ns) return;
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
  std::vector<std::shared_ptr<Endpoint>> snap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : endpoints_) {
      if (!e->draining) snap.push_back(e);
    }
  }
  for (auto& e : snap) probeOne(*e);
}

void Pool::healthLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    if (retired_) {
      retiredLoop(lock);
      return;
    }
    // New endpoints (probe_now_) are probed at once: they take batches after a passing probe.
    cv_.wait_for(
        lock, std::chrono::milliseconds(std::max<uint64_t>(config_.health_check_interval_ms, 10)),
        [this] { return stopping_ || probe_now_ || retired_; });
    if (stopping_) break;
    if (retired_) continue;
    probe_now_ = false;
    lock.unlock();
    probeAll();
    reap();
    lock.lock();
  }
}

void Pool::retire(std::function<bool()> upstream_idle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (retired_) return;
    retired_ = true;
    upstream_idle_ = std::move(upstream_idle);
  }
  spdlog::info(
      "model '{}': retired (no longer served): {} endpoints stop being probed and close "
      "once its in-flight batches complete",
      model_, kind_);
  cv_.notify_all();
  resolver_cv_.notify_all();
}

bool Pool::retiredAndClosed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shut_down_;
}

void Pool::retiredLoop(std::unique_lock<std::mutex>& lock) {
  // No probes from here on. Wait until nothing is queued or in flight here and upstream (the
  // batcher) for kRetireGraceMs: a request that found the model just before its removal still
  // gets its batch served by the endpoints' last known state.
  constexpr auto kPoll = std::chrono::milliseconds(20);
  const std::function<bool()> upstream_idle = upstream_idle_;
  uint64_t idle_since = 0;
  while (!stopping_ && !closed_) {
    const bool busy_here = inflight_ > 0 || !queue_.empty();
    lock.unlock();
    const bool busy = busy_here || (upstream_idle && !upstream_idle());
    lock.lock();
    const uint64_t now = common::monotonicNs();
    if (busy) {
      idle_since = 0;
    } else if (idle_since == 0) {
      idle_since = now;
    } else if (now - idle_since >= kRetireGraceMs * 1'000'000) {
      closed_ = true;  // applySetLocked adds nothing from now on
      for (auto& e : endpoints_) {
        e->draining = true;
        e->sequences = 0;
      }
      sequences_.clear();
      sequence_owners_.clear();
      // The model's gauges go to 0, unless a pool that replaced this one (a reload rebuilt the
      // model) shares them: they are its figures.
      if (live_) {
        live_ = false;
        if (leaveLivePools(metrics_, model_) == 0) {
          if (seq_gauge_ != nullptr) seq_gauge_->set(0);
          if (endpoints_gauge_ != nullptr) endpoints_gauge_->set(0);
        }
      }
      break;
    }
    cv_.wait_for(lock, kPoll, [this] { return stopping_; });
  }
  // Close every endpoint as soon as nothing holds it (a batch still completing, a scrape that
  // was running when the metrics thread saw the retirement).
  while (!stopping_ && !endpoints_.empty()) {
    lock.unlock();
    reap();
    lock.lock();
    if (endpoints_.empty()) break;
    cv_.wait_for(lock, kPoll, [this] { return stopping_; });
  }
  if (closed_ && endpoints_.empty()) {
    // Only now: reap() erased the endpoints under the lock but called their shutdown() after
    // releasing it, so "endpoints_ is empty" alone was true before the last one was closed.
    shut_down_ = true;
    spdlog::info("model '{}': retired: every {} endpoint closed, background threads stopped",
                 model_, kind_);
  }
}

Pool::Endpoint* Pool::findLocked(uint64_t id) const {
  for (auto& e : endpoints_) {
    if (e->id == id) return e.get();
  }
  return nullptr;
}

void Pool::breakBindingsLocked(const Endpoint& e, const std::string& why) {
  for (auto& [key, b] : sequences_) {
    if (b.endpoint == e.id && b.broken.empty()) b.broken = why;
  }
}

size_t Pool::sequenceCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return sequences_.size();
}

void Pool::reap() {
  // Held to the end: a second round (the health thread's, a test's) waits for this one's
  // shutdown() and release, rather than finding the endpoint already gone from the set while it
  // is still being closed.
  std::lock_guard<std::mutex> reap_lock(reap_mu_);
  std::vector<std::shared_ptr<Endpoint>> closed;
  const uint64_t now = common::monotonicNs();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t idle_ns = config_.sequence_idle_timeout_ms * 1'000'000;
    for (auto it = sequences_.begin(); it != sequences_.end();) {
      if (now > it->second.last_ns && now - it->second.last_ns > idle_ns) {
        if (Endpoint* b = findLocked(it->second.endpoint); b != nullptr && b->sequences > 0) {
          --b->sequences;
        }
        if (seq_expired_ != nullptr) seq_expired_->inc();
        releaseOwnerLocked(it->second.owner);
        it = sequences_.erase(it);
      } else {
        ++it;
      }
    }
    if (seq_gauge_ != nullptr) seq_gauge_->set(static_cast<int64_t>(sequences_.size()));
    // While no endpoint of the current set is healthy, the drained ones still serve (pickLocked)
    // and stay open, unless the pool is retired and closing.
    const bool use_draining = useDrainingLocked();
    for (auto it = endpoints_.begin(); it != endpoints_.end();) {
      Endpoint& e = **it;
      // Closed once nothing runs there: no batch in flight, no completion running, no bound
      // sequence, and no probe or scrape holding it (the snapshot's reference).
      if (e.draining && !use_draining && e.active == 0 && e.inflight == 0 && e.sequences == 0 &&
          it->use_count() == 1) {
        closed.push_back(std::move(*it));
        it = endpoints_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& e : closed) {
    e->client->shutdown();
    spdlog::info("model '{}': {} endpoint {} drained and closed ({} batches)", model_, kind_,
                 e->client->address(), e->batches);
  }
  // The clients are destroyed here, off the lock and off their own threads; with the last claim
  // on an address (another pool of the same model may hold one: a model replaced by a reload),
  // its series leave the registry.
  closed.clear();
}

void Pool::setClientFactory(ClientFactory factory) { factory_ = std::move(factory); }

absl::Status Pool::parseEntries(const std::vector<std::string>& configured,
                                std::vector<std::string>* statics,
                                std::vector<DnsTarget>* targets) const {
  for (const std::string& entry : configured) {
    if (isDnsEntry(entry)) {
      absl::StatusOr<DnsTargetSpec> spec = parseDnsEntry(entry);
      if (!spec.ok()) return spec.status();
      DnsTarget t;
      t.entry = entry;
      t.name = spec->name;
      t.port = spec->port;
      targets->push_back(std::move(t));
      continue;
    }
    const size_t colon = entry.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == entry.size()) {
      return absl::InvalidArgumentError(
          fmt::format("model '{}': invalid endpoint '{}' (expected host:port or dns:///name:port)",
                      model_, entry));
    }
    statics->push_back(entry);
  }
  if (configured.empty()) {
    return absl::InvalidArgumentError(fmt::format("model '{}': no endpoints", model_));
  }
  if (!factory_) {
    return absl::FailedPreconditionError(fmt::format(
        "model '{}': this pool cannot change its endpoints (no client factory)", model_));
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (retired_) {
    return absl::FailedPreconditionError(
        fmt::format("model '{}' is retired (no longer served): its endpoints are closing", model_));
  }
  return absl::OkStatus();
}

absl::Status Pool::checkEndpoints(const std::vector<std::string>& configured) const {
  std::vector<std::string> statics;
  std::vector<DnsTarget> targets;
  return parseEntries(configured, &statics, &targets);
}

absl::Status Pool::setEndpoints(const std::vector<std::string>& configured) {
  std::vector<std::string> statics;
  std::vector<DnsTarget> targets;
  if (absl::Status st = parseEntries(configured, &statics, &targets); !st.ok()) return st;
  std::unique_lock<std::mutex> set_lock(set_mu_);
  bool resolve = false;
  for (DnsTarget& t : targets) {
    for (const DnsTarget& old : dns_) {
      if (old.entry == t.entry) t = old;  // keep its last good set
    }
    resolve = resolve || !t.resolved;
  }
  static_ = std::move(statics);
  dns_ = std::move(targets);
  {
    std::lock_guard<std::mutex> lock(mu_);
    has_dns_ = !dns_.empty();
  }
  config_.endpoints = configured;
  applySetLocked(set_lock);
  if (!dns_.empty() && started_ && !resolver_thread_.joinable()) {
    resolver_thread_ = std::thread([this] { resolverLoop(); });
  }
  if (resolve) {
    std::lock_guard<std::mutex> lock(mu_);
    resolve_now_ = true;
    resolver_cv_.notify_all();
  }
  return absl::OkStatus();
}

void Pool::applySetLocked(std::unique_lock<std::mutex>& set_lock) {
  (void)set_lock;
  std::vector<std::string> desired = static_;
  for (const DnsTarget& t : dns_) {
    for (const std::string& ip : t.addresses) desired.push_back(joinHostPort(ip, t.port));
  }
  std::sort(desired.begin(), desired.end());
  desired.erase(std::unique(desired.begin(), desired.end()), desired.end());
  std::vector<std::string> add;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;  // retired and closing: the set no longer changes
    for (auto& e : endpoints_) {
      const bool want = std::binary_search(desired.begin(), desired.end(), e->client->address());
      if (!want && !e->draining) {
        e->draining = true;
        spdlog::info(
            "model '{}': {} endpoint {} removed from the set: draining ({} in flight, "
            "{} bound sequences)",
            model_, kind_, e->client->address(), e->inflight, e->sequences);
      } else if (want && e->draining) {
        e->draining = false;  // back before it was closed
        spdlog::info("model '{}': {} endpoint {} back in the set", model_, kind_,
                     e->client->address());
      }
    }
    for (const std::string& a : desired) {
      bool have = false;
      for (auto& e : endpoints_) have = have || e->client->address() == a;
      if (!have) add.push_back(a);
    }
  }
  std::vector<std::shared_ptr<Endpoint>> made;
  for (const std::string& a : add) {
    std::unique_ptr<EndpointClient> c = factory_(a);
    if (c == nullptr) continue;
    c->attachBuffers(buffers_);  // the batcher's shared-memory buffers, as prepare() gave them
    made.push_back(makeEndpoint(std::move(c)));
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (closed_) {
    lock.unlock();  // retired meanwhile: nothing joins (the clients are destroyed off the lock)
    return;
  }
  for (auto& e : made) {
    e->id = next_id_++;
    spdlog::info("model '{}': {} endpoint {} added: takes batches after its first passing probe",
                 model_, kind_, e->client->address());
    endpoints_.push_back(std::move(e));
  }
  size_t live = 0;
  for (auto& e : endpoints_) live += e->draining ? 0 : 1;
  if (endpoints_gauge_ != nullptr) endpoints_gauge_->set(static_cast<int64_t>(live));
  if (!made.empty()) {
    probe_now_ = true;
    cv_.notify_all();
  }
}

void Pool::resolveAll() {
  std::vector<std::string> names;
  std::vector<std::string> entries;
  {
    std::lock_guard<std::mutex> set_lock(set_mu_);
    for (const DnsTarget& t : dns_) {
      names.push_back(t.name);
      entries.push_back(t.entry);
    }
  }
  if (names.empty()) return;
  // One resolution at a time (start(), the resolver thread, tests): resolver_ is single-threaded.
  std::lock_guard<std::mutex> resolving(resolve_mu_);
  if (resolver_ == nullptr) {
    DnsResolver::Options o;
    o.server = config_.dns_server;
    o.timeout_ms = std::max<uint64_t>(config_.dns_timeout_ms, 1);
    absl::StatusOr<std::unique_ptr<DnsResolver>> r = DnsResolver::create(o);
    if (!r.ok()) {
      spdlog::error("model '{}': cannot resolve dns:/// endpoints: {}", model_,
                    std::string(r.status().message()));
      if (dns_failures_ != nullptr) dns_failures_->inc(names.size());
      return;
    }
    resolver_ = *std::move(r);
  }
  std::vector<DnsResolver::Answer> answers = resolver_->resolve(names);  // blocking, no lock
  std::unique_lock<std::mutex> set_lock(set_mu_);
  bool changed = false;
  for (size_t i = 0; i < entries.size(); ++i) {
    DnsTarget* t = nullptr;
    for (DnsTarget& x : dns_) {
      if (x.entry == entries[i]) t = &x;
    }
    if (t == nullptr) continue;  // removed meanwhile
    const DnsResolver::Answer& a = answers[i];
    if (dns_resolutions_ != nullptr) dns_resolutions_->inc();
    const uint64_t now = common::monotonicNs();
    if (!a.status.ok()) {
      // Keep the last good set: a DNS outage or an empty answer during a rollout must not
      // empty the pool; the endpoints' own health decides meanwhile.
      const bool empty = a.status.code() == absl::StatusCode::kNotFound;
      common::Counter* c = empty ? dns_empty_ : dns_failures_;
      if (c != nullptr) c->inc();
      spdlog::warn(
          "model '{}': {}: {}; keeping the last good set ({} addresses), retrying in "
          "{} ms",
          model_, t->entry, std::string(a.status.message()), t->addresses.size(),
          config_.dns_min_refresh_ms);
      t->next_ns = now + config_.dns_min_refresh_ms * 1'000'000;
      continue;
    }
    std::vector<std::string> addrs = a.addresses;
    if (config_.dns_max_endpoints > 0 && addrs.size() > config_.dns_max_endpoints) {
      spdlog::warn("model '{}': {} has {} addresses; using the first {} (dns_max_endpoints)",
                   model_, t->entry, addrs.size(), config_.dns_max_endpoints);
      addrs.resize(config_.dns_max_endpoints);
    }
    uint64_t next_ms = config_.dns_refresh_ms;
    if (a.min_ttl_s > 0) next_ms = std::min<uint64_t>(next_ms, uint64_t{a.min_ttl_s} * 1000);
    next_ms = std::max(next_ms, config_.dns_min_refresh_ms);
    t->next_ns = now + next_ms * 1'000'000;
    if (!t->resolved || addrs != t->addresses) {
      spdlog::info("model '{}': {} resolves to {} address(es)", model_, t->entry, addrs.size());
      t->addresses = std::move(addrs);
      changed = true;
    }
    t->resolved = true;
  }
  if (changed) applySetLocked(set_lock);
}

void Pool::resolverLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    uint64_t next = UINT64_MAX;
    {
      lock.unlock();
      {
        std::lock_guard<std::mutex> set_lock(set_mu_);
        for (const DnsTarget& t : dns_) next = std::min(next, t.next_ns);
      }
      lock.lock();
    }
    const uint64_t now = common::monotonicNs();
    const uint64_t wait_ms =
        next == UINT64_MAX ? config_.dns_refresh_ms : (next > now ? (next - now) / 1'000'000 : 0);
    resolver_cv_.wait_for(lock, std::chrono::milliseconds(wait_ms),
                          [this] { return stopping_ || retired_ || resolve_now_; });
    if (stopping_ || retired_) break;
    resolve_now_ = false;
    lock.unlock();
    resolveAll();
    // At most one round per dns_min_refresh_ms, whatever asks for it.
    lock.lock();
    resolver_cv_.wait_for(lock, std::chrono::milliseconds(config_.dns_min_refresh_ms),
                          [this] { return stopping_ || retired_; });
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
        spdlog::warn(
            "model '{}': {} has no {} sample for the model; {} endpoint {} is picked on "
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
  std::vector<std::shared_ptr<Endpoint>> snap;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& e : endpoints_) {
      if (e->depth != nullptr && !e->draining) snap.push_back(e);
    }
  }
  for (auto& e : snap) scrapeOne(*e);
}

void Pool::metricsLoop() {
  const auto interval = std::chrono::milliseconds(config_.metrics_interval_ms);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ && !retired_) {
    const auto next = std::chrono::steady_clock::now() + interval;
    lock.unlock();
    scrapeAll();
    lock.lock();
    cv_.wait_until(lock, next, [this] { return stopping_ || retired_; });
  }
}

bool Pool::useDrainingLocked() const {
  if (closed_) return false;
  for (auto& e : endpoints_) {
    if (e->state == State::kHealthy && !e->draining) return false;
  }
  return true;
}

Pool::Endpoint* Pool::pickLocked(const Pending& p, bool* all_busy) {
  *all_busy = false;
  // GPU health: while some healthy endpoint is not marked degraded, only those are candidates.
  bool skip_degraded = false;
  for (auto& e : endpoints_) {
    if (e->state == State::kHealthy && !e->gpu_degraded) skip_degraded = true;
  }
  const bool use_draining = useDrainingLocked();
  // Candidates: healthy, untried, below the concurrency limit.
  Endpoint* cand[2] = {nullptr, nullptr};
  uint32_t seen = 0;
  for (auto& e : endpoints_) {
    if (e->state != State::kHealthy || (e->draining && !use_draining) || p.triedContains(e->id))
      continue;
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
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::string> out;
  for (auto& e : endpoints_) {
    if (!e->draining) out.push_back(e->client->address());
  }
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
  Pending p{&batch, std::move(done), {}};
  dispatch(std::move(p));
}

void Pool::drainPendingLocked(std::vector<Pending>& ready) {
  // Hand queued batches to endpoints with free slots (the caller dispatches them unlocked).
  size_t free_slots = 0;
  const bool use_draining = useDrainingLocked();
  for (auto& e : endpoints_) {
    // A draining endpoint still serves its bound sequences (their batches may be queued), and
    // every batch while it is a fallback (useDrainingLocked).
    if (e->state != State::kHealthy || (e->draining && e->sequences == 0 && !use_draining))
      continue;
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
  if (batch.cancel != nullptr && batch.cancel->cancelled()) {
    // Every client of the batch went away before it was sent (docs/BATCHING.md "Cancellation").
    p.done(absl::CancelledError("Request cancelled"));
    return;
  }
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

  const Affinity aff = affinityOf(batch);
  Endpoint* e = nullptr;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) {
      lock.unlock();
      p.done(absl::UnavailableError(fmt::format("model '{}' is shutting down", model_)));
      return;
    }
    auto refuse = [&](absl::Status s, common::Counter* c) {
      lock.unlock();
      if (c != nullptr) c->inc();
      p.done(std::move(s));
    };
    auto bound = aff.key.empty() ? sequences_.end() : sequences_.find(aff.key);
    auto unbind = [&](std::unordered_map<std::string, Binding>::iterator it) {
      if (Endpoint* b = findLocked(it->second.endpoint); b != nullptr && b->sequences > 0) {
        --b->sequences;
      }
      releaseOwnerLocked(it->second.owner);
      sequences_.erase(it);
      if (seq_gauge_ != nullptr) seq_gauge_->set(static_cast<int64_t>(sequences_.size()));
    };
    if (!aff.key.empty() && aff.key[0] == '!') {
      refuse(
          absl::FailedPreconditionError(fmt::format(
              "model '{}': a batch mixes a sequence request with others (internal error)", model_)),
          nullptr);
      return;
    }
    if (!aff.key.empty() && !aff.start) {
      // A request inside a sequence: its endpoint or a clear error, never another endpoint.
      if (bound == sequences_.end()) {
        refuse(absl::FailedPreconditionError(fmt::format(
                   "model '{}': sequence {} is not bound to an endpoint (its first request needs "
                   "sequence_start; or it ended, or was idle for more than {} ms)",
                   model_, aff.key.substr(2), config_.sequence_idle_timeout_ms)),
               seq_broken_);
        return;
      }
      Endpoint* b = findLocked(bound->second.endpoint);
      std::string why = bound->second.broken;
      if (why.empty() && (b == nullptr || b->state != State::kHealthy)) {
        why = b == nullptr ? "its endpoint left the pool"
                           : fmt::format("{} endpoint {} is {}: {}", kind_, b->client->address(),
                                         stateName(b->state), b->reason);
      }
      if (!why.empty()) {
        unbind(bound);
        refuse(absl::FailedPreconditionError(fmt::format(
                   "model '{}': sequence {} ended: {} (a sequence is not moved to another "
                   "endpoint; start it again with sequence_start)",
                   model_, aff.key.substr(2), why)),
               seq_broken_);
        return;
      }
      if (config_.max_concurrency > 0 && b->inflight >= config_.max_concurrency) {
        queue_.push_back(std::move(p));  // waits for a slot at its own endpoint
        return;
      }
      e = b;
      bound->second.last_ns = now;
      if (aff.end) unbind(bound);
    } else {
      if (bound != sequences_.end()) unbind(bound);  // a new start of a known id: rebind
      if (!aff.key.empty() && !aff.end && config_.sequence_max > 0 &&
          sequences_.size() >= config_.sequence_max) {
        refuse(absl::ResourceExhaustedError(fmt::format(
                   "model '{}': {} sequences are bound already (sequence_max); sequence {} "
                   "refused",
                   model_, sequences_.size(), aff.key.substr(2))),
               seq_refused_full_);
        return;
      }
      if (!aff.key.empty() && !aff.end && !aff.owner.empty() &&
          config_.sequence_max_per_client > 0) {
        auto held = sequence_owners_.find(aff.owner);
        if (held != sequence_owners_.end() && held->second >= config_.sequence_max_per_client) {
          refuse(absl::ResourceExhaustedError(fmt::format(
                     "model '{}': client {} holds {} sequences already "
                     "(sequence_max_per_client); sequence {} refused",
                     model_, aff.owner, held->second, aff.key.substr(2))),
                 seq_refused_full_);
          return;
        }
      }
      bool all_busy = false;
      e = pickLocked(p, &all_busy);
      if (e == nullptr && all_busy) {
        queue_.push_back(std::move(p));  // dispatched when a slot frees up
        return;
      }
      if (e == nullptr) {
        std::string msg = unavailableMessageLocked();
        refuse(absl::UnavailableError(msg), no_endpoint_);
        return;
      }
      if (!aff.key.empty() && !aff.end) {
        sequences_[aff.key] = Binding{e->id, now, {}, aff.owner};
        if (!aff.owner.empty()) ++sequence_owners_[aff.owner];
        ++e->sequences;
        if (seq_gauge_ != nullptr) seq_gauge_->set(static_cast<int64_t>(sequences_.size()));
      }
    }
    ++e->inflight;
    ++e->active;
    ++inflight_;
    if (e->inflight_gauge != nullptr) e->inflight_gauge->add(1);
    p.tried.push_back(e->id);
  }
  // The Pending moves into the completion; `batch` stays valid until done is called.
  auto shared = std::make_shared<Pending>(std::move(p));
  const uint64_t start = common::monotonicNs();
  e->client->send(
      batch, opt, [this, e, shared, start, deadline_bound](BatchOutputs out, bool not_sent) {
        if (!out.ok() && deadline_bound &&
            out.status().code() == absl::StatusCode::kDeadlineExceeded) {
          out = absl::UnavailableError(fmt::format("Request timeout expired (at {} endpoint {})",
                                                   kind_, e->client->address()));
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
    const Affinity aff = affinityOf(*p.batch);
    if (!out.ok() && !aff.key.empty() && !not_sent &&
        out.status().code() != absl::StatusCode::kInvalidArgument) {
      // The sequence's state at the server is unknown now: its next request is refused (a
      // request the server refused as invalid left the sequence as it was).
      auto it = sequences_.find(aff.key);
      if (it != sequences_.end() && it->second.endpoint == e->id && it->second.broken.empty()) {
        it->second.broken = fmt::format("a request failed at {} endpoint {}: {}", kind_,
                                        e->client->address(), std::string(out.status().message()));
      }
    }
    if (out.ok()) {
      e->consecutive_failures = 0;
      if (e->ok != nullptr) e->ok->inc();
      if (e->latency != nullptr) e->latency->record((now - start_ns) / 1000);
    } else if (out.status().code() == absl::StatusCode::kCancelled && p.batch->cancel != nullptr &&
               p.batch->cancel->cancelled()) {
      // Cancelled by us (every client gone, Batch::cancel): not the endpoint's failure.
      if (metrics_ != nullptr) {
        metrics_
            ->counter("infergate_backend_cancelled_total",
                      "Backend calls cancelled because every client of the batch went away",
                      {{"model", model_}, {"endpoint", e->client->address()}})
            .inc();
      }
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
        const bool endpoint_fault =
            c == absl::StatusCode::kUnavailable || c == absl::StatusCode::kDeadlineExceeded ||
            c == absl::StatusCode::kInternal || c == absl::StatusCode::kUnknown;
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
    if (s.code() == absl::StatusCode::kInvalidArgument ||
        absl::StartsWith(s.message(), "Request timeout")) {
      answer = s;  // the request's own fault / its deadline: pass through
    } else {
      answer = absl::UnavailableError(
          fmt::format("{} endpoint {} failed for model '{}': {}: {}", kind_, e->client->address(),
                      model_, absl::StatusCodeToString(s.code()), std::string(s.message())));
    }
    p.done(std::move(answer));
  }
  for (Pending& r : ready) dispatch(std::move(r));
  // Last: the destructor waits for inflight_ == 0 before tearing the pool down. Only then is
  // anyone woken: a wake-up per completion of the health and metrics threads (which shared one
  // condition variable with the drain) cost ~5 futex calls per request.
  std::lock_guard<std::mutex> lock(mu_);
  --e->active;  // after this, reap() may close `e`
  if (--inflight_ == 0 && stopping_) drained_.notify_all();
}

Pool::Affinity Pool::affinityOf(const Batch& batch) const {
  Affinity a;
  const QueuedRequest* seq = nullptr;
  for (const auto& r : batch.requests) {
    if (r->request.sequence.active()) seq = r.get();
  }
  if (seq == nullptr) return a;
  if (batch.requests.size() != 1) {
    a.key = "!";
    return a;
  }
  const SequenceParams& sp = seq->request.sequence;
  a.key = (sp.id_is_string ? "s:" : "i:") + sp.id;
  a.start = sp.start;
  a.end = sp.end;
  a.owner = sp.owner;
  return a;
}

void Pool::releaseOwnerLocked(const std::string& owner) {
  if (owner.empty()) return;
  auto it = sequence_owners_.find(owner);
  if (it == sequence_owners_.end()) return;
  if (--it->second == 0) sequence_owners_.erase(it);
}

std::vector<Pool::EndpointStatus> Pool::status() const {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t now = common::monotonicNs();
  std::vector<EndpointStatus> out;
  for (auto& e : endpoints_) {
    out.push_back({e->client->address(), e->state, e->inflight, e->batches, e->failures, e->reason,
                   freshLocked(*e, now) ? static_cast<int64_t>(e->depth_value) : -1,
                   e->scrape_errors, e->gpu_degraded, e->draining, e->sequences});
  }
  return out;
}

}  // namespace infergate::backends
