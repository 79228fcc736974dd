// Pool (backends/pool.h) over fake endpoint clients: power-of-two-choices, concurrency limits
// with queueing, retry of batches that never left, 503 naming the endpoint for batches that
// were sent and failed (no retry), passive ejection and re-admission by probe, fast failure
// when nothing is healthy, deadlines forwarded; queue-depth aware picking over fake
// queue-depth sources (the pick follows the reported depth, stale or missing readings and failed
// scrapes fall back to in-flight batches, concurrency limits still hold).
#include "backends/pool.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <initializer_list>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "common/metrics.h"
#include "tests/unit/backends/fake_endpoint_client.h"
#include "tests/unit/backends/test_util.h"

namespace infergate::backends {
namespace {

using test_util::BatchResult;
using test_util::collect;
using test_util::FakeEndpointClient;
using test_util::FakeEndpointState;

// A queue-depth source returning what the test sets.
struct FakeDepthState {
  std::mutex mu;
  absl::StatusOr<std::optional<double>> next = std::optional<double>();
  int reads = 0;
  void set(absl::StatusOr<std::optional<double>> v) {
    std::lock_guard<std::mutex> l(mu);
    next = std::move(v);
  }
};

class FakeDepth : public QueueDepthSource {
 public:
  explicit FakeDepth(std::shared_ptr<FakeDepthState> s) : s_(std::move(s)) {}
  const std::string& url() const override { return url_; }
  absl::StatusOr<std::optional<double>> read() override {
    std::lock_guard<std::mutex> l(s_->mu);
    ++s_->reads;
    return s_->next;
  }

 private:
  std::shared_ptr<FakeDepthState> s_;
  std::string url_ = "http://fake:1/metrics";
};

struct Fixture {
  std::vector<std::shared_ptr<FakeEndpointState>> st;
  std::vector<std::shared_ptr<FakeDepthState>> depth;  // with_depth: one per endpoint
  common::MetricsRegistry metrics;  // outlives the pool: its endpoints drop their series claims
  std::unique_ptr<Pool> pool;
  Fixture(int n, RemoteBackendConfig cfg = {}, bool with_depth = false) {
    std::vector<std::unique_ptr<QueueDepthSource>> sources;
    std::vector<std::unique_ptr<EndpointClient>> clients;
    for (int i = 0; i < n; ++i) {
      st.push_back(std::make_shared<FakeEndpointState>());
      cfg.endpoints.push_back("ep" + std::to_string(i));
      clients.push_back(std::make_unique<FakeEndpointClient>("ep" + std::to_string(i), st.back()));
      if (with_depth) {
        depth.push_back(std::make_shared<FakeDepthState>());
        sources.push_back(std::make_unique<FakeDepth>(depth.back()));
      }
    }
    cfg.health_check_interval_ms = 3600 * 1000;  // probes only when the test asks
    cfg.startup_timeout_ms = 0;
    pool = std::make_unique<Pool>("m", "triton", cfg, std::move(clients), &metrics,
                                  std::move(sources));
  }
  // Answers every held call (repeatedly, until nothing is held) so the pool can be destroyed.
  void drain() {
    for (int round = 0; round < 16; ++round) {
      bool any = false;
      for (auto& s : st) {
        if (s->releaseHeld() > 0) any = true;
      }
      if (!any) return;
    }
  }
  int sends(int i) {
    std::lock_guard<std::mutex> l(st[i]->mu);
    return st[i]->sends;
  }
  // Probes every endpoint (healthy) and has them hold their calls until drain().
  void probeAndHold() {
    pool->probeAll();
    for (auto& s : st) s->hold = true;
  }
  // with_depth: endpoint i reports queue depth `d[i]` at the scrape that follows.
  void scrapeDepths(std::initializer_list<double> d) {
    size_t i = 0;
    for (double v : d) depth[i++]->set(std::optional<double>(v));
    pool->scrapeAll();
  }
};

// The value of the exposed sample of `name` carrying every label in `labels`; -1 if none.
double sample(common::MetricsRegistry& m, const std::string& name, const common::Labels& labels) {
  const std::string text = m.renderPrometheus();
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const auto& [k, v] : labels) all &= line.find(k + "=\"" + v + "\"") != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

// `n` batches whose (held) calls answer into `held` at drain().
void executeHeld(Fixture& f, const Batch& b, std::deque<BatchResult>& held, int n) {
  for (int i = 0; i < n; ++i) f.pool->execute(b, collect(held.emplace_back()));
}

TEST(Pool, StartRefusesWhenNothingIsReadyAndNamesEachEndpoint) {
  Fixture f(2);
  f.st[0]->probe = absl::UnavailableError("connection refused");
  f.st[1]->probe = absl::UnavailableError("model not ready");
  absl::Status s = f.pool->start(true);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("ep0: connection refused"), absl::string_view::npos) << s;
  EXPECT_NE(s.message().find("ep1: model not ready"), absl::string_view::npos) << s;
}

TEST(Pool, MismatchIsRefusedAtOnce) {
  Fixture f(1);
  f.st[0]->probe = absl::FailedPreconditionError("inputs[0] 'X': datatype FP32 configured");
  absl::Status s = f.pool->start(true);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("datatype FP32"), absl::string_view::npos);
}

TEST(Pool, SpreadsLoadAndRespectsConcurrencyLimit) {
  RemoteBackendConfig cfg;
  cfg.max_concurrency = 2;
  Fixture f(2, cfg);
  ASSERT_TRUE(f.pool->start(true).ok());
  for (auto& s : f.st) s->hold = true;
  Batch b;
  std::vector<BatchResult> r(6);
  for (auto& x : r) f.pool->execute(b, collect(x));
  // 2 endpoints x 2 = 4 in flight, 2 waiting; P2C on outstanding puts 2 on each.
  EXPECT_EQ(f.st[0]->sends, 2);
  EXPECT_EQ(f.st[1]->sends, 2);
  auto st = f.pool->status();
  EXPECT_EQ(st[0].inflight, 2u);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_inflight", {{"model", "m"}, {"endpoint", "ep0"}}), 2);
  // Completing one dispatches a queued batch.
  EndpointClient::SendDone d;
  {
    std::lock_guard<std::mutex> l(f.st[0]->mu);
    d = std::move(f.st[0]->held.front());
    f.st[0]->held.pop_front();
  }
  d(std::vector<BatchTensor>{}, false);
  EXPECT_EQ(f.st[0]->sends + f.st[1]->sends, 5);
  // Drain everything so the pool can be destroyed.
  for (int round = 0; round < 4; ++round) {
    for (auto& s : f.st) {
      std::deque<EndpointClient::SendDone> h;
      {
        std::lock_guard<std::mutex> l(s->mu);
        h.swap(s->held);
      }
      for (auto& x : h) x(std::vector<BatchTensor>{}, false);
    }
  }
  for (auto& x : r) EXPECT_EQ(x.calls.load(), 1);
  for (auto& x : r) EXPECT_TRUE(x.status.ok()) << x.status;
}

TEST(Pool, NeverSentIsRetriedElsewhereAndMarksUnhealthy) {
  Fixture f(2);
  ASSERT_TRUE(f.pool->start(true).ok());
  f.st[0]->result = f.st[1]->result = absl::OkStatus();
  f.st[0]->result = absl::UnavailableError("failed to connect to all addresses");
  f.st[0]->not_sent = true;
  Batch b;
  for (int i = 0; i < 4; ++i) {
    BatchResult r;
    f.pool->execute(b, collect(r));
    EXPECT_EQ(r.calls.load(), 1);
    EXPECT_TRUE(r.status.ok()) << r.status;
  }
  EXPECT_LE(f.st[0]->sends, 1);  // once unhealthy, never picked again
  EXPECT_EQ(f.pool->status()[0].state, Pool::State::kUnhealthy);
  // A passing probe re-admits it.
  f.st[0]->result = absl::OkStatus();
  f.st[0]->not_sent = false;
  const int fresh = f.st[0]->fresh_probes;
  f.pool->probeAll();
  EXPECT_EQ(f.pool->status()[0].state, Pool::State::kHealthy);
  EXPECT_EQ(f.st[0]->fresh_probes, fresh + 1);  // set-up redone after the failure
}

TEST(Pool, SentAndFailedIs503NamingEndpointWithoutRetry) {
  Fixture f(2);
  ASSERT_TRUE(f.pool->start(true).ok());
  f.st[0]->result = absl::InternalError("boom");
  f.st[1]->result = absl::InternalError("boom");
  Batch b;
  BatchResult r;
  f.pool->execute(b, collect(r));
  EXPECT_EQ(r.calls.load(), 1);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status.message().find("triton endpoint ep"), absl::string_view::npos) << r.status;
  EXPECT_NE(r.status.message().find("INTERNAL: boom"), absl::string_view::npos) << r.status;
  EXPECT_EQ(f.st[0]->sends + f.st[1]->sends, 1);
  // The request's own fault passes through unchanged.
  f.st[0]->result = f.st[1]->result = absl::InvalidArgumentError("bad shape");
  BatchResult r2;
  f.pool->execute(b, collect(r2));
  EXPECT_EQ(r2.status.code(), absl::StatusCode::kInvalidArgument);
}

TEST(Pool, EjectsAfterConsecutiveFailuresAndReadmitsAfterProbe) {
  RemoteBackendConfig cfg;
  cfg.eject_after_failures = 2;
  cfg.ejection_ms = 1;
  Fixture f(1, cfg);
  ASSERT_TRUE(f.pool->start(true).ok());
  f.st[0]->result = absl::UnavailableError("overloaded");
  Batch b;
  for (int i = 0; i < 2; ++i) {
    BatchResult r;
    f.pool->execute(b, collect(r));
  }
  EXPECT_EQ(f.pool->status()[0].state, Pool::State::kEjected);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_ejections_total", {{"model", "m"}, {"endpoint", "ep0"}}), 1);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_errors_total", {{"model", "m"}, {"endpoint", "ep0"}, {"code", "UNAVAILABLE"}}), 2);
  // Nothing healthy: fast failure, naming the endpoint and its state.
  BatchResult r;
  f.pool->execute(b, collect(r));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(r.status.message().find("no healthy triton endpoint for model 'm' (ep0 ejected"),
            absl::string_view::npos) << r.status;
  EXPECT_EQ(f.st[0]->sends, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  f.st[0]->result = absl::OkStatus();
  f.pool->probeAll();
  EXPECT_EQ(f.pool->status()[0].state, Pool::State::kHealthy);
  BatchResult ok;
  f.pool->execute(b, collect(ok));
  EXPECT_TRUE(ok.status.ok());
}

// A probe that began before the endpoint was ejected and passes after it must not re-admit it:
// the ejection holds for ejection_ms (it did not: a slow ServerReady undid ejections under load).
TEST(Pool, AProbeInFlightDuringAnEjectionDoesNotUndoIt) {
  RemoteBackendConfig cfg;
  cfg.eject_after_failures = 2;
  cfg.ejection_ms = 60000;
  Fixture f(2, cfg);
  ASSERT_TRUE(f.pool->start(true).ok());
  f.st[0]->result = absl::UnavailableError("overloaded");
  Batch b;
  f.st[0]->during_probe = [&] {
    f.st[0]->during_probe = nullptr;
    for (int i = 0; i < 16 && f.sends(0) < 2; ++i) {
      BatchResult r;
      f.pool->execute(b, collect(r));
    }
    ASSERT_EQ(f.pool->status()[0].state, Pool::State::kEjected);
  };
  f.pool->probeAll();
  EXPECT_EQ(f.st[0]->sends, 2);
  EXPECT_EQ(f.pool->status()[0].state, Pool::State::kEjected) << "the probe re-admitted it";
  for (int i = 0; i < 4; ++i) {
    BatchResult r;
    f.pool->execute(b, collect(r));
    EXPECT_TRUE(r.status.ok()) << r.status;
  }
  EXPECT_EQ(f.st[0]->sends, 2) << "an ejected endpoint got traffic";
}

TEST(Pool, DeadlinesBoundTheCallAndExpiredBatchesAreNotSent) {
  Fixture f(1);
  ASSERT_TRUE(f.pool->start(true).ok());
  Batch b;
  auto q = std::make_unique<QueuedRequest>();
  q->deadline_ns = common::monotonicNs() + 300'000'000;  // 300 ms
  q->request.priority = 2;
  b.requests.push_back(std::move(q));
  BatchResult r;
  f.pool->execute(b, collect(r));
  EXPECT_TRUE(r.status.ok());
  EXPECT_LE(f.st[0]->last.timeout_ms, 300u);
  EXPECT_GT(f.st[0]->last.timeout_ms, 200u);
  EXPECT_GT(f.st[0]->last.timeout_us, 200'000u);
  EXPECT_EQ(f.st[0]->last.priority, 2);
  b.requests[0]->deadline_ns = common::monotonicNs() - 1;
  BatchResult late;
  f.pool->execute(b, collect(late));
  EXPECT_EQ(late.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(late.status.message(), "Request timeout expired");
  EXPECT_EQ(f.st[0]->sends, 1);
}

// --- Queue-depth aware picking --------------------------------------------------------------
// These tests make endpoints healthy with probeAll() instead of start(), so no health or metrics
// thread runs: readings change only when the test calls scrapeAll().

TEST(PoolQueueDepth, PickFollowsTheReportedQueueDepth) {
  Fixture f(2, {.max_concurrency = 100}, /*with_depth=*/true);
  f.probeAndHold();
  f.scrapeDepths({5, 0});
  EXPECT_EQ(f.pool->status()[0].queue_depth, 5);
  EXPECT_EQ(f.pool->status()[1].queue_depth, 0);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_queue_depth", {{"model", "m"}, {"endpoint", "ep0"}}), 5);
  Batch b;
  std::vector<BatchResult> r(12);
  // Load = in-flight + server queue: ep1 (0+k) wins until it reaches ep0's 5.
  for (int i = 0; i < 5; ++i) f.pool->execute(b, collect(r[i]));
  EXPECT_EQ(f.sends(0), 0);
  EXPECT_EQ(f.sends(1), 5);
  // Then they alternate around equal load: 5 + 12 = 17 split 8/9 (in-flight alone: 6/6).
  for (int i = 5; i < 12; ++i) f.pool->execute(b, collect(r[i]));
  EXPECT_GE(f.sends(0), 3);
  EXPECT_LE(f.sends(0), 4);
  EXPECT_EQ(f.sends(0) + f.sends(1), 12);
  // The server's queue moves to the other endpoint: new batches follow it.
  f.scrapeDepths({0, 40});
  const int before0 = f.sends(0);
  std::deque<BatchResult> held;  // the held calls answer into these at drain()
  executeHeld(f, b, held, 10);
  EXPECT_EQ(f.sends(0), before0 + 10);
  f.drain();
  for (auto& x : r) EXPECT_TRUE(x.status.ok()) << x.status;
}

TEST(PoolQueueDepth, NeverPicksADeepQueueWhileOthersAreShallower) {
  Fixture f(3, {.max_concurrency = 1000}, /*with_depth=*/true);
  f.probeAndHold();
  f.scrapeDepths({500, 0, 3});
  Batch b;
  std::deque<BatchResult> held;  // the held calls answer into these at drain()
  executeHeld(f, b, held, 200);
  // Power of two choices: whichever pair is drawn, ep0 (500 + 0) loses to ep1/ep2 (<= 203).
  EXPECT_EQ(f.sends(0), 0);
  EXPECT_EQ(f.sends(1) + f.sends(2), 200);
  EXPECT_GT(f.sends(1), f.sends(2));
  f.drain();
}

TEST(PoolQueueDepth, ConcurrencyLimitStillHolds) {
  Fixture f(2, {.max_concurrency = 2}, /*with_depth=*/true);
  f.probeAndHold();
  f.scrapeDepths({100, 0});
  Batch b;
  std::vector<BatchResult> r(5);
  for (auto& x : r) f.pool->execute(b, collect(x));
  // ep1 fills its 2 slots, then the deep-queued ep0 is the only one with room; the 5th waits.
  EXPECT_EQ(f.sends(1), 2);
  EXPECT_EQ(f.sends(0), 2);
  EXPECT_EQ(r[4].calls.load(), 0);
  f.drain();
  for (auto& x : r) EXPECT_EQ(x.calls.load(), 1);
}

TEST(PoolQueueDepth, StaleReadingsAreIgnored) {
  RemoteBackendConfig cfg;
  cfg.max_concurrency = 100;
  cfg.metrics_interval_ms = 20;  // a reading is fresh for 60 ms
  Fixture f(2, cfg, true);
  f.probeAndHold();
  f.scrapeDepths({100, 0});
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(f.pool->status()[0].queue_depth, -1);
  Batch b;
  std::deque<BatchResult> held;  // the held calls answer into these at drain()
  executeHeld(f, b, held, 8);
  // In-flight batches alone: power of two choices over two endpoints keeps them level.
  EXPECT_EQ(f.sends(0), 4);
  EXPECT_EQ(f.sends(1), 4);
  f.drain();
}

TEST(PoolQueueDepth, NoReadingOrFailedScrapesFallBackToInFlightAndAreCounted) {
  Fixture f(2, {.max_concurrency = 100}, /*with_depth=*/true);
  f.probeAndHold();
  // A reading, then a failing scrape: the last reading stays in use while fresh.
  f.depth[0]->set(std::optional<double>(50));
  f.pool->scrapeAll();
  f.depth[0]->set(absl::UnavailableError("GET http://fake:1/metrics: connect: Connection refused"));
  f.pool->scrapeAll();
  f.pool->scrapeAll();
  EXPECT_EQ(f.pool->status()[0].scrape_errors, 2u);
  EXPECT_EQ(f.pool->status()[0].queue_depth, 50);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_metrics_scrape_errors_total", {{"model", "m"}, {"endpoint", "ep0"}}), 2);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_metrics_scrape_errors_total", {{"model", "m"}, {"endpoint", "ep1"}}), 0);
  Batch b;
  std::deque<BatchResult> held;  // the held calls answer into these at drain()
  executeHeld(f, b, held, 1);
  EXPECT_EQ(f.sends(1), 1);
  // Health stays with the probes.
  EXPECT_EQ(f.pool->status()[0].state, Pool::State::kHealthy);
  f.drain();
  // The page has no sample for the model (ep0) or the scrape fails (ep1): no reading, so
  // picking is on in-flight batches alone (level), errors counted, both endpoints healthy.
  f.depth[0]->set(std::optional<double>());
  f.depth[1]->set(absl::DeadlineExceededError("no response within 500 ms"));
  f.pool->scrapeAll();
  EXPECT_EQ(f.pool->status()[0].queue_depth, -1);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_queue_depth", {{"model", "m"}, {"endpoint", "ep0"}}), -1);
  EXPECT_EQ(f.pool->status()[1].scrape_errors, 1u);
  const int s0 = f.sends(0), s1 = f.sends(1);
  executeHeld(f, b, held, 8);
  EXPECT_EQ(f.sends(0) - s0, 4);
  EXPECT_EQ(f.sends(1) - s1, 4);
  EXPECT_EQ(f.pool->status()[0].state, Pool::State::kHealthy);
  EXPECT_EQ(f.pool->status()[1].state, Pool::State::kHealthy);
  f.drain();
}

TEST(PoolQueueDepth, WithoutMetricsURLsNothingIsScrapedOrExposed) {
  Fixture f(2);
  ASSERT_TRUE(f.pool->start(true).ok());
  f.pool->scrapeAll();
  EXPECT_EQ(f.pool->status()[0].queue_depth, -1);
  EXPECT_EQ(f.metrics.renderPrometheus().find("infergate_backend_queue_depth"), std::string::npos);
  EXPECT_EQ(f.metrics.renderPrometheus().find("scrape_errors"), std::string::npos);
}

TEST(PoolQueueDepth, MetricsThreadScrapesTheConfiguredURL) {
  // A URL nobody listens on, built into a Triton source from the config: the metrics thread
  // scrapes it every interval, counts the refusals, and the endpoint keeps serving.
  const uint16_t port = test_util::unusedLoopbackPort();
  ASSERT_NE(port, 0);
  RemoteBackendConfig cfg;
  cfg.metrics_interval_ms = 10;
  cfg.metrics_urls = {fmt::format("http://127.0.0.1:{}/metrics", port)};
  Fixture f(2, cfg);
  ASSERT_TRUE(f.pool->start(true).ok());
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (f.pool->status()[0].scrape_errors < 3 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(f.pool->status()[0].scrape_errors, 3u);
  EXPECT_EQ(f.pool->status()[1].scrape_errors, 0u);  // no URL for ep1
  EXPECT_GE(sample(f.metrics, "infergate_backend_metrics_scrape_errors_total", {{"model", "m"}, {"endpoint", "ep0"}}), 3);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_metrics_scrape_errors_total", {{"model", "m"}, {"endpoint", "ep1"}}), -1);
  EXPECT_EQ(f.pool->status()[0].state, Pool::State::kHealthy);
  Batch b;
  BatchResult x;
  f.pool->execute(b, collect(x));
  EXPECT_TRUE(x.status.ok()) << x.status;
}

}  // namespace
}  // namespace infergate::backends

namespace infergate::backends {
namespace {

// GPU health (docs/GPU.md "Closing the loop"): a degraded endpoint is not picked while an
// unmarked one is healthy, even when it is idle and the unmarked one is busy; once every
// healthy endpoint is marked, marked ones are picked again.
TEST(PoolGpuHealth, DegradedEndpointsArePickedLast) {
  Fixture f(3, {.max_concurrency = 2});
  f.probeAndHold();
  EXPECT_EQ(f.pool->endpoints(), (std::vector<std::string>{"ep0", "ep1", "ep2"}));
  f.pool->setEndpointDegraded("ep0", true);
  f.pool->setEndpointDegraded("ep2", true);
  f.pool->setEndpointDegraded("nope", true);  // unknown: ignored
  EXPECT_TRUE(f.pool->status()[0].gpu_degraded);
  EXPECT_FALSE(f.pool->status()[1].gpu_degraded);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_gpu_degraded", {{"model", "m"}, {"endpoint", "ep0"}}), 1);
  EXPECT_EQ(sample(f.metrics, "infergate_backend_gpu_degraded", {{"model", "m"}, {"endpoint", "ep1"}}), 0);
  Batch b;
  std::deque<BatchResult> held;
  executeHeld(f, b, held, 5);
  // ep1 takes its 2; the other 3 wait for it rather than go to the idle degraded endpoints.
  EXPECT_EQ(f.sends(0), 0);
  EXPECT_EQ(f.sends(1), 2);
  EXPECT_EQ(f.sends(2), 0);
  // ep1 degraded too: every healthy endpoint is marked, so the waiting batches go out.
  f.pool->setEndpointDegraded("ep1", true);
  EXPECT_EQ(f.sends(0) + f.sends(2), 3);
  // Everything answered; now only ep0 is unmarked: new batches go there alone.
  f.drain();
  f.pool->setEndpointDegraded("ep0", false);
  const int before[3] = {f.sends(0), f.sends(1), f.sends(2)};
  executeHeld(f, b, held, 2);
  EXPECT_EQ(f.sends(0), before[0] + 2);
  EXPECT_EQ(f.sends(1), before[1]);
  EXPECT_EQ(f.sends(2), before[2]);
  f.drain();
  for (auto& x : held) EXPECT_TRUE(x.status.ok()) << x.status;
}

}  // namespace
}  // namespace infergate::backends
