// Pool (backends/pool.h) endpoint set changes and sequence affinity, over fake endpoint
// clients made by the pool's client factory: setEndpoints() drains a removed endpoint (its
// in-flight batches complete, it takes no new batch, reap() closes it once idle) and admits an
// added one after its first passing probe; sequences stay on their endpoint from start to end,
// expire when idle, are bounded, and end with FAILED_PRECONDITION when their endpoint fails.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "backends/pool.h"
#include "common/metrics.h"
#include "tests/unit/backends/fake_endpoint_client.h"

namespace infergate::backends {
namespace {

using test_util::BatchResult;
using test_util::collect;
using test_util::FakeEndpointClient;
using test_util::FakeEndpointState;

struct Fixture {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<FakeEndpointState>> st;  // by address, made on first use
  common::MetricsRegistry metrics;
  std::unique_ptr<Pool> pool;

  std::shared_ptr<FakeEndpointState> state(const std::string& a) {
    std::lock_guard<std::mutex> l(mu);
    auto& s = st[a];
    if (!s) s = std::make_shared<FakeEndpointState>();
    return s;
  }
  explicit Fixture(std::vector<std::string> eps, RemoteBackendConfig cfg = {},
                   uint64_t health_interval_ms = 3600 * 1000) {  // default: probes on request
    cfg.endpoints = eps;
    cfg.health_check_interval_ms = health_interval_ms;
    cfg.startup_timeout_ms = 0;
    std::vector<std::unique_ptr<EndpointClient>> clients;
    for (const auto& a : eps) clients.push_back(std::make_unique<FakeEndpointClient>(a, state(a)));
    pool = std::make_unique<Pool>("m", "triton", cfg, std::move(clients), &metrics);
    pool->setClientFactory([this](const std::string& a) {
      return std::unique_ptr<EndpointClient>(std::make_unique<FakeEndpointClient>(a, state(a)));
    });
  }
  int probes(const std::string& a) {
    auto s = state(a);
    std::lock_guard<std::mutex> l(s->mu);
    return s->probes;
  }
  bool shut(const std::string& a) {
    auto s = state(a);
    std::lock_guard<std::mutex> l(s->mu);
    return s->shut;
  }
  int sends(const std::string& a) {
    auto s = state(a);
    std::lock_guard<std::mutex> l(s->mu);
    return s->sends;
  }
  void setProbe(const std::string& a, absl::Status st) {
    auto s = state(a);
    std::lock_guard<std::mutex> l(s->mu);
    s->probe = std::move(st);
  }
  void hold(const std::string& a, bool h) {
    auto s = state(a);
    std::lock_guard<std::mutex> l(s->mu);
    s->hold = h;
  }
  size_t release(const std::string& a) { return state(a)->releaseHeld(); }
  const Pool::EndpointStatus* status(const std::string& a, std::vector<Pool::EndpointStatus>& v) {
    v = pool->status();
    for (auto& s : v) {
      if (s.address == a) return &s;
    }
    return nullptr;
  }
};

std::unique_ptr<Batch> seqBatch(const std::string& id, bool start, bool end,
                                bool is_string = false) {
  auto b = std::make_unique<Batch>();
  auto q = std::make_unique<QueuedRequest>();
  q->request.sequence.id = id;
  q->request.sequence.id_is_string = is_string;
  q->request.sequence.start = start;
  q->request.sequence.end = end;
  b->requests.push_back(std::move(q));
  return b;
}

TEST(PoolEndpoints, RemovedEndpointDrainsThenCloses) {
  Fixture f({"a:1", "b:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  f.hold("a:1", true);
  f.hold("b:1", true);
  // Four batches in flight, spread over a and b.
  std::vector<std::unique_ptr<BatchResult>> rs;
  Batch b;
  for (int i = 0; i < 4; ++i) {
    rs.push_back(std::make_unique<BatchResult>());
    f.pool->execute(b, collect(*rs.back()));
  }
  const int a_before = f.sends("a:1");
  ASSERT_GT(a_before, 0);
  // c is not ready yet (the health thread probes it at once: it must fail that probe).
  f.setProbe("c:1", absl::UnavailableError("starting"));
  ASSERT_TRUE(f.pool->setEndpoints({"b:1", "c:1"}).ok());
  std::vector<Pool::EndpointStatus> v;
  ASSERT_NE(f.status("a:1", v), nullptr);
  EXPECT_TRUE(f.status("a:1", v)->draining);
  ASSERT_NE(f.status("c:1", v), nullptr);
  EXPECT_NE(f.status("c:1", v)->state, Pool::State::kHealthy);  // not before a passing probe
  EXPECT_EQ(f.pool->endpoints(), (std::vector<std::string>{"b:1", "c:1"}));
  // New batches: never a (draining), never c (not probed yet).
  BatchResult x;
  f.hold("b:1", false);
  for (int i = 0; i < 10; ++i) f.pool->execute(b, collect(x));
  EXPECT_EQ(f.sends("a:1"), a_before);
  EXPECT_EQ(f.sends("c:1"), 0);
  // reap() keeps a while its batches are in flight.
  f.pool->reap();
  ASSERT_NE(f.status("a:1", v), nullptr);
  EXPECT_FALSE(f.state("a:1")->shut);
  // Its in-flight batches complete normally.
  EXPECT_EQ(f.release("a:1"), static_cast<size_t>(a_before));
  f.release("b:1");
  for (auto& r : rs) {
    EXPECT_EQ(r->calls.load(), 1);
    EXPECT_TRUE(r->status.ok()) << r->status;
  }
  f.pool->reap();
  EXPECT_EQ(f.status("a:1", v), nullptr);
  EXPECT_TRUE(f.state("a:1")->shut);
  // c takes batches after its first passing probe.
  f.setProbe("c:1", absl::OkStatus());
  f.pool->probeAll();
  for (int i = 0; i < 20; ++i) f.pool->execute(b, collect(x));
  EXPECT_GT(f.sends("c:1"), 0);
  EXPECT_EQ(f.sends("a:1"), a_before);
}

// Waits up to 5 s for `cond`.
template <typename F>
bool eventually(F cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

// retire() (the model left the registry): probing stops at once; a batch that still arrives is
// served; the endpoints are closed only once nothing is in flight here and upstream (the
// batcher) for kRetireGraceMs; then the pool refuses set changes and answers UNAVAILABLE.
TEST(PoolEndpoints, RetiredPoolStopsProbingAndClosesOnceIdle) {
  Fixture f({"a:1", "b:1"}, {}, 10);  // the health thread probes every 10 ms
  ASSERT_TRUE(f.pool->start(true).ok());
  ASSERT_TRUE(eventually([&] { return f.probes("a:1") > 5 && f.probes("b:1") > 5; }));
  f.hold("a:1", true);
  f.hold("b:1", true);
  std::vector<std::unique_ptr<BatchResult>> rs;
  Batch b;
  for (int i = 0; i < 2; ++i) {
    rs.push_back(std::make_unique<BatchResult>());
    f.pool->execute(b, collect(*rs.back()));
  }
  std::atomic<bool> upstream_idle{false};
  f.pool->retire([&] { return upstream_idle.load(); });
  // A probe already running when retire() returned may still finish; none starts after.
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  const int pa = f.probes("a:1");
  const int pb = f.probes("b:1");
  // A batch the batcher still dispatches (a request admitted before the removal) is served.
  rs.push_back(std::make_unique<BatchResult>());
  f.pool->execute(b, collect(*rs.back()));
  EXPECT_EQ(f.sends("a:1") + f.sends("b:1"), 3);
  // Busy (3 batches in flight, the batcher not idle): nothing closes, however long.
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * Pool::kRetireGraceMs));
  EXPECT_FALSE(f.shut("a:1"));
  EXPECT_FALSE(f.shut("b:1"));
  EXPECT_FALSE(f.pool->retiredAndClosed());
  // The batcher drains; the batches are still in flight: still open.
  upstream_idle = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * Pool::kRetireGraceMs));
  EXPECT_FALSE(f.shut("a:1"));
  EXPECT_FALSE(f.shut("b:1"));
  // In-flight batches complete normally, then both endpoints close.
  f.release("a:1");
  f.release("b:1");
  for (auto& r : rs) {
    EXPECT_EQ(r->calls.load(), 1);
    EXPECT_TRUE(r->status.ok()) << r->status;
  }
  ASSERT_TRUE(eventually([&] { return f.pool->retiredAndClosed(); }));
  EXPECT_TRUE(f.shut("a:1"));
  EXPECT_TRUE(f.shut("b:1"));
  EXPECT_TRUE(f.pool->status().empty());
  // No probe since the retirement, though ~60 health intervals passed.
  EXPECT_EQ(f.probes("a:1"), pa);
  EXPECT_EQ(f.probes("b:1"), pb);
  // A retired pool refuses set changes, and a batch after the close gets UNAVAILABLE.
  EXPECT_EQ(f.pool->checkEndpoints({"c:1"}).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(f.pool->setEndpoints({"c:1"}).code(), absl::StatusCode::kFailedPrecondition);
  BatchResult late;
  f.pool->execute(b, collect(late));
  EXPECT_EQ(late.calls.load(), 1);
  EXPECT_EQ(late.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(f.sends("c:1"), 0);
}

// A set that replaces every endpoint: the drained ones serve until a new one passes its first
// probe (a reload from server A to server B fails nothing), then drain and close.
TEST(PoolEndpoints, ReplacedSetServesFromDrainedUntilNewIsReady) {
  Fixture f({"a:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  f.setProbe("b:1", absl::UnavailableError("starting"));
  ASSERT_TRUE(f.pool->setEndpoints({"b:1"}).ok());
  f.pool->probeAll();  // b fails its first probe
  Batch b;
  BatchResult r;
  for (int i = 0; i < 3; ++i) f.pool->execute(b, collect(r));
  EXPECT_EQ(r.calls.load(), 3);
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(f.sends("a:1"), 3);
  f.pool->reap();
  EXPECT_FALSE(f.shut("a:1"));  // still the fallback
  f.setProbe("b:1", absl::OkStatus());
  f.pool->probeAll();
  BatchResult r2;
  for (int i = 0; i < 3; ++i) f.pool->execute(b, collect(r2));
  EXPECT_TRUE(r2.status.ok()) << r2.status;
  EXPECT_EQ(f.sends("a:1"), 3);
  EXPECT_EQ(f.sends("b:1"), 3);
  f.pool->reap();
  EXPECT_TRUE(f.shut("a:1"));
  EXPECT_EQ(f.pool->status().size(), 1u);
}

// checkEndpoints() validates as setEndpoints() does, changing nothing.
TEST(PoolEndpoints, CheckEndpointsChangesNothing) {
  Fixture f({"a:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  EXPECT_TRUE(f.pool->checkEndpoints({"b:1", "dns:///svc.local:8001"}).ok());
  EXPECT_EQ(f.pool->checkEndpoints({"nocolon"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.pool->checkEndpoints({}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.pool->endpoints(), (std::vector<std::string>{"a:1"}));
  EXPECT_EQ(f.pool->setEndpoints({"nocolon"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.pool->endpoints(), (std::vector<std::string>{"a:1"}));
}

TEST(PoolEndpoints, ReAddedBeforeClosedIsKept) {
  Fixture f({"a:1", "b:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  f.hold("a:1", true);
  Batch b;
  BatchResult r;
  for (int i = 0; i < 6 && f.sends("a:1") == 0; ++i) f.pool->execute(b, collect(r));
  ASSERT_TRUE(f.pool->setEndpoints({"b:1"}).ok());
  ASSERT_TRUE(f.pool->setEndpoints({"a:1", "b:1"}).ok());
  std::vector<Pool::EndpointStatus> v;
  ASSERT_NE(f.status("a:1", v), nullptr);
  EXPECT_FALSE(f.status("a:1", v)->draining);
  EXPECT_EQ(v.size(), 2u);
  f.release("a:1");
}

// Endpoints that come and go (new pod addresses at each rollout, found through DNS): a closed
// endpoint's series leave the registry, so 30 replacements leave as many series as one.
TEST(PoolEndpoints, ClosedEndpointsLeaveNothingInTheRegistry) {
  Fixture f({"a:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  Batch b;
  auto replaceWith = [&](const std::string& a) {
    ASSERT_TRUE(f.pool->setEndpoints({a}).ok());
    f.pool->probeAll();
    BatchResult r;
    f.pool->execute(b, collect(r));
    EXPECT_TRUE(r.status.ok()) << r.status;
    // The previous address closes (once the health thread, which probes an added endpoint at
    // once, no longer holds it). The health thread's own round may be the one that closes it:
    // the last reap() waits for that round's shutdown and release (rounds are serialized), so
    // the series count below never sees an endpoint half closed.
    ASSERT_TRUE(eventually([&] {
      f.pool->reap();
      const bool one = f.pool->status().size() == 1;
      f.pool->reap();
      return one;
    }));
  };
  replaceWith("x0:1");
  const size_t one_set = f.metrics.seriesCount();
  for (int i = 1; i < 30; ++i) replaceWith("x" + std::to_string(i) + ":1");
  EXPECT_EQ(f.metrics.seriesCount(), one_set);
  const std::string text = f.metrics.renderPrometheus();
  EXPECT_EQ(text.find("endpoint=\"a:1\""), std::string::npos) << text;
  EXPECT_EQ(text.find("endpoint=\"x28:1\""), std::string::npos);
  EXPECT_NE(text.find("infergate_backend_batches_total{endpoint=\"x29:1\",model=\"m\"} 1"),
            std::string::npos)
      << text;
}

// A model that a reload rebuilt has a new pool on the same endpoints beside the old one until
// the old one is retired and closed: that close leaves the new pool's series (the same
// {model, endpoint}, and the model's gauges) in /metrics, counting.
TEST(PoolEndpoints, ARetiredPoolLeavesTheSeriesOfItsSuccessor) {
  Fixture f({"a:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  RemoteBackendConfig cfg;
  cfg.endpoints = {"a:1"};
  cfg.health_check_interval_ms = 3600 * 1000;
  cfg.startup_timeout_ms = 0;
  std::vector<std::unique_ptr<EndpointClient>> clients;
  clients.push_back(std::make_unique<FakeEndpointClient>("a:1", f.state("a:1")));
  Pool next("m", "triton", cfg, std::move(clients), &f.metrics);
  ASSERT_TRUE(next.start(true).ok());
  f.pool->retire(nullptr);
  ASSERT_TRUE(eventually([&] { return f.pool->retiredAndClosed(); }));
  Batch b;
  BatchResult r;
  next.execute(b, collect(r));
  ASSERT_TRUE(r.status.ok()) << r.status;
  const std::string text = f.metrics.renderPrometheus();
  EXPECT_NE(text.find("infergate_backend_healthy{endpoint=\"a:1\",model=\"m\"} 1"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("infergate_backend_batches_total{endpoint=\"a:1\",model=\"m\"} 1"),
            std::string::npos)
      << text;
  // The model-level gauges are the new pool's figures: the old one did not zero them.
  EXPECT_NE(text.find("infergate_backend_endpoints{model=\"m\"} 1"), std::string::npos) << text;
}

TEST(PoolEndpoints, MalformedListChangesNothing) {
  Fixture f({"a:1"});
  EXPECT_EQ(f.pool->setEndpoints({"b:1", "nocolon"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.pool->setEndpoints({"dns:///bad name:1"}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.pool->endpoints(), (std::vector<std::string>{"a:1"}));
}

TEST(PoolSequences, StayOnTheirEndpointFromStartToEnd) {
  Fixture f({"a:1", "b:1", "c:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  BatchResult r;
  auto start = seqBatch("7", true, false);
  f.pool->execute(*start, collect(r));
  ASSERT_TRUE(r.status.ok()) << r.status;
  std::string bound;
  for (const char* a : {"a:1", "b:1", "c:1"}) {
    if (f.sends(a) == 1) bound = a;
  }
  ASSERT_FALSE(bound.empty());
  EXPECT_EQ(f.pool->sequenceCount(), 1u);
  for (int i = 0; i < 20; ++i) {
    auto mid = seqBatch("7", false, false);
    f.pool->execute(*mid, collect(r));
    ASSERT_TRUE(r.status.ok()) << r.status;
  }
  EXPECT_EQ(f.sends(bound), 21);
  auto end = seqBatch("7", false, true);
  f.pool->execute(*end, collect(r));
  EXPECT_TRUE(r.status.ok());
  EXPECT_EQ(f.sends(bound), 22);
  EXPECT_EQ(f.pool->sequenceCount(), 0u);
  // After the end: not bound any more.
  auto after = seqBatch("7", false, false);
  f.pool->execute(*after, collect(r));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status.message().find("not bound"), std::string::npos) << r.status;
  // String and integer ids are different sequences.
  auto s = seqBatch("7", false, false, true);
  f.pool->execute(*s, collect(r));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition);
}

TEST(PoolSequences, EndpointFailureEndsTheSequenceClearly) {
  Fixture f({"a:1", "b:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  // Bind sequences until both endpoints hold one.
  std::map<std::string, std::string> where;  // id -> endpoint
  BatchResult r;
  for (int id = 1; id <= 40; ++id) {
    const int a0 = f.sends("a:1");
    auto b = seqBatch(std::to_string(id), true, false);
    f.pool->execute(*b, collect(r));
    ASSERT_TRUE(r.status.ok());
    where[std::to_string(id)] = f.sends("a:1") > a0 ? "a:1" : "b:1";
  }
  // a fails its probe: its sequences end; b's go on.
  f.setProbe("a:1", absl::UnavailableError("gone"));
  f.pool->probeAll();
  int refused = 0, ok = 0;
  for (auto& [id, ep] : where) {
    auto b = seqBatch(id, false, false);
    f.pool->execute(*b, collect(r));
    if (ep == "a:1") {
      EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition) << r.status;
      EXPECT_NE(r.status.message().find("a:1"), std::string::npos) << r.status;
      ++refused;
    } else {
      EXPECT_TRUE(r.status.ok()) << r.status;
      ++ok;
    }
  }
  EXPECT_GT(refused, 0);
  EXPECT_GT(ok, 0);
  EXPECT_EQ(f.pool->sequenceCount(), static_cast<size_t>(ok));  // the refused ones are dropped
  // Not moved: the same id, without a new start, is refused again (unbound now).
  for (auto& [id, ep] : where) {
    if (ep != "a:1") continue;
    auto b = seqBatch(id, false, false);
    f.pool->execute(*b, collect(r));
    EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition);
    // A new start binds it again, to the healthy endpoint.
    auto s = seqBatch(id, true, false);
    const int b0 = f.sends("b:1");
    f.pool->execute(*s, collect(r));
    EXPECT_TRUE(r.status.ok());
    EXPECT_EQ(f.sends("b:1"), b0 + 1);
    break;
  }
}

TEST(PoolSequences, FailedRequestBreaksTheBinding) {
  Fixture f({"a:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  BatchResult r;
  auto s = seqBatch("x", true, false, true);
  f.pool->execute(*s, collect(r));
  ASSERT_TRUE(r.status.ok());
  // A request the server refuses as invalid leaves the sequence bound.
  f.state("a:1")->result = absl::InvalidArgumentError("bad shape");
  auto bad = seqBatch("x", false, false, true);
  f.pool->execute(*bad, collect(r));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f.pool->sequenceCount(), 1u);
  f.state("a:1")->result = absl::UnavailableError("reset");  // sent, then failed
  auto m = seqBatch("x", false, false, true);
  f.pool->execute(*m, collect(r));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  f.state("a:1")->result = absl::OkStatus();
  f.pool->execute(*m, collect(r));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition) << r.status;
  EXPECT_NE(r.status.message().find("reset"), std::string::npos) << r.status;
}

TEST(PoolSequences, RemovedEndpointKeepsItsSequencesUntilTheyEnd) {
  Fixture f({"a:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  BatchResult r;
  auto s = seqBatch("1", true, false);
  f.pool->execute(*s, collect(r));
  ASSERT_TRUE(f.pool->setEndpoints({"b:1"}).ok());
  f.pool->probeAll();
  auto m = seqBatch("1", false, false);
  f.pool->execute(*m, collect(r));
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(f.sends("a:1"), 2);
  f.pool->reap();
  EXPECT_FALSE(f.state("a:1")->shut);  // a sequence is still bound there
  auto e = seqBatch("1", false, true);
  f.pool->execute(*e, collect(r));
  EXPECT_EQ(f.sends("a:1"), 3);
  f.pool->reap();
  EXPECT_TRUE(f.state("a:1")->shut);
  // New work goes to b.
  Batch b;
  f.pool->execute(b, collect(r));
  EXPECT_EQ(f.sends("b:1"), 1);
}

TEST(PoolSequences, BoundedTableAndIdleExpiry) {
  RemoteBackendConfig cfg;
  cfg.sequence_max = 2;
  cfg.sequence_idle_timeout_ms = 50;
  Fixture f({"a:1"}, cfg);
  ASSERT_TRUE(f.pool->start(true).ok());
  BatchResult r;
  for (const char* id : {"1", "2"}) {
    auto s = seqBatch(id, true, false);
    f.pool->execute(*s, collect(r));
    ASSERT_TRUE(r.status.ok());
  }
  auto third = seqBatch("3", true, false);
  f.pool->execute(*third, collect(r));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(f.sends("a:1"), 2);
  // A one-request sequence (start and end) needs no binding.
  auto once = seqBatch("4", true, true);
  f.pool->execute(*once, collect(r));
  EXPECT_TRUE(r.status.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  f.pool->reap();
  EXPECT_EQ(f.pool->sequenceCount(), 0u);
  f.pool->execute(*third, collect(r));
  EXPECT_TRUE(r.status.ok()) << r.status;
  const std::string text = f.metrics.renderPrometheus();
  EXPECT_NE(text.find("infergate_backend_sequence_refused_total{model=\"m\"} 1"),
            std::string::npos);
  EXPECT_NE(text.find("infergate_backend_sequence_expired_total{model=\"m\"} 2"),
            std::string::npos);
}

// One client cannot fill the table for everyone: its starts beyond sequence_max_per_client are
// 429 while another client's still bind; its ended sequences free its share.
TEST(PoolSequences, OneClientHoldsAtMostItsShare) {
  RemoteBackendConfig cfg;
  cfg.sequence_max = 100;
  cfg.sequence_max_per_client = 2;
  Fixture f({"a:1"}, cfg);
  ASSERT_TRUE(f.pool->start(true).ok());
  BatchResult r;
  auto owned = [](const std::string& id, bool start, bool end, const std::string& owner) {
    auto b = seqBatch(id, start, end);
    b->requests[0]->request.sequence.owner = owner;
    return b;
  };
  for (const char* id : {"1", "2"}) {
    auto s = owned(id, true, false, "source 192.0.2.7/128");
    f.pool->execute(*s, collect(r));
    ASSERT_TRUE(r.status.ok()) << r.status;
  }
  auto third = owned("3", true, false, "source 192.0.2.7/128");
  f.pool->execute(*third, collect(r));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(r.status.message().find("sequence_max_per_client"), std::string::npos) << r.status;
  auto other = owned("4", true, false, "tenant b");
  f.pool->execute(*other, collect(r));
  EXPECT_TRUE(r.status.ok()) << r.status;
  // Its sequence 1 ends: its next start binds again.
  auto end = owned("1", false, true, "source 192.0.2.7/128");
  f.pool->execute(*end, collect(r));
  ASSERT_TRUE(r.status.ok()) << r.status;
  f.pool->execute(*third, collect(r));
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(f.pool->sequenceCount(), 3u);
}

TEST(PoolSequences, NotSentStartIsRetriedElsewhereAndBoundThere) {
  Fixture f({"a:1", "b:1"});
  ASSERT_TRUE(f.pool->start(true).ok());
  f.state("a:1")->result = absl::UnavailableError("refused");
  f.state("a:1")->not_sent = true;
  f.state("b:1")->result = absl::UnavailableError("refused");
  f.state("b:1")->not_sent = true;
  BatchResult r;
  // Both refuse: the start fails UNAVAILABLE after trying both.
  auto s = seqBatch("9", true, false);
  f.pool->execute(*s, collect(r));
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable);
  f.state("b:1")->result = absl::OkStatus();
  f.state("b:1")->not_sent = false;
  f.setProbe("a:1", absl::UnavailableError("down"));
  f.pool->probeAll();
  f.pool->execute(*s, collect(r));
  EXPECT_TRUE(r.status.ok()) << r.status;
  auto m = seqBatch("9", false, false);
  f.pool->execute(*m, collect(r));
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(f.sends("b:1"), 3);  // the refused try, the start, the next request
}

}  // namespace
}  // namespace infergate::backends
