// Cancellation reaching the backend (docs/BATCHING.md "Cancellation"): the batcher removes a
// queued request and counts it once; a batch in flight whose every request is cancelled has
// its token (Batch::cancel) cancelled exactly once, a batch with a live request never; the pool
// never sends a cancelled batch and counts a cancelled call apart from failures; the gRPC
// client turns the token into RST_STREAM CANCEL that the server sees; tokens that outlive the
// model or the endpoint are harmless.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/batched_model.h"
#include "backends/batcher.h"
#include "backends/grpc_client.h"
#include "backends/pool.h"
#include "common/clock.h"
#include "common/metrics.h"
#include "tests/unit/backends/fake_grpc_server.h"

namespace infergate::backends {
namespace {

using namespace std::chrono_literals;

ModelConfig modelConfig(int max_batch) {
  ModelConfig c;
  c.name = "m";
  c.version = "1";
  c.max_batch_size = max_batch;
  c.inputs = {{"IN", DataType::kFp32, {4}}};
  c.outputs = {{"OUT", DataType::kFp32, {4}}};
  return c;
}

InferRequest request(const std::string& id, float base) {
  InferRequest r;
  r.model_name = "m";
  r.id = id;
  Tensor t{"IN", DataType::kFp32, {1, 4}, {}};
  t.data.resize(16);
  for (int i = 0; i < 4; ++i) {
    const float f = base + static_cast<float>(i);
    std::memcpy(t.data.data() + 4 * i, &f, 4);
  }
  r.inputs.push_back(std::move(t));
  return r;
}

// The value of the exposition line `series` ("name{labels}" as rendered), -1 when absent.
double sample(const common::MetricsRegistry& m, const std::string& series) {
  const std::string text = "\n" + m.renderPrometheus();
  const std::string key = "\n" + series + " ";
  const size_t p = text.find(key);
  if (p == std::string::npos) return -1;
  return std::stod(text.substr(p + key.size(), text.find('\n', p + 1) - p - key.size()));
}

template <typename F>
bool waitFor(F pred, std::chrono::milliseconds limit = 3000ms) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

// --- Batcher ------------------------------------------------------------------------------------

struct Outcome {
  int calls = 0;
  std::optional<absl::StatusOr<InferResponse>> result;
};

class BatcherCancelTest : public ::testing::Test {
 protected:
  void make(BatchingConfig cfg = {}) {
    auto b = Batcher::create(modelConfig(8), std::move(cfg), &clock_, &metrics_, nullptr);
    ASSERT_TRUE(b.ok()) << b.status();
    batcher_ = std::move(*b);
  }
  uint64_t enqueue(const std::string& id, float base) {
    outcomes_[id];
    return batcher_->enqueue(request(id, base), [this, id](absl::StatusOr<InferResponse> r) {
      ++outcomes_[id].calls;
      outcomes_[id].result = std::move(r);
    });
  }
  void completeEcho(std::unique_ptr<Batch> b) {
    std::vector<BatchTensor> out = b->inputs;
    for (BatchTensor& t : out) t.name = "OUT";
    batcher_->complete(std::move(b), std::move(out));
  }
  absl::StatusCode codeOf(const std::string& id) {
    const Outcome& o = outcomes_[id];
    EXPECT_EQ(o.calls, 1) << id;
    return o.result ? o.result->status().code() : absl::StatusCode::kUnknown;
  }
  double queued() {
    return sample(metrics_, "infergate_requests_cancelled_total{model=\"m\",stage=\"queued\"}");
  }
  double inFlight() {
    return sample(metrics_, "infergate_requests_cancelled_total{model=\"m\",stage=\"in_flight\"}");
  }
  double batchesCancelled() {
    return sample(metrics_, "infergate_batcher_batches_cancelled_total{model=\"m\"}");
  }

  common::ManualClock clock_;
  common::MetricsRegistry metrics_;
  std::map<std::string, Outcome> outcomes_;
  std::unique_ptr<Batcher> batcher_;
};

TEST_F(BatcherCancelTest, QueuedRequestIsRemovedNeverSentAndCountedOnce) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1000;
  make(cfg);
  enqueue("a", 0);
  const uint64_t tb = enqueue("b", 10);
  enqueue("c", 20);
  EXPECT_TRUE(batcher_->cancel(tb));
  EXPECT_FALSE(batcher_->cancel(tb));  // answered: unknown now
  EXPECT_EQ(codeOf("b"), absl::StatusCode::kCancelled);
  EXPECT_EQ(batcher_->queued(), 2u);
  clock_.advanceUs(1000);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->requests.size(), 2u);  // b is not in the batch
  EXPECT_EQ(b->requests[0]->request.id, "a");
  EXPECT_EQ(b->requests[1]->request.id, "c");
  ASSERT_NE(b->cancel, nullptr);
  EXPECT_FALSE(b->cancel->cancelled());
  completeEcho(std::move(b));
  EXPECT_EQ(codeOf("a"), absl::StatusCode::kOk);
  EXPECT_EQ(codeOf("c"), absl::StatusCode::kOk);
  EXPECT_EQ(outcomes_["b"].calls, 1);
  EXPECT_EQ(queued(), 1);
  EXPECT_EQ(inFlight(), 0);
  EXPECT_EQ(batchesCancelled(), 0);
}

TEST_F(BatcherCancelTest, PartlyCancelledBatchKeepsRunningAndDropsOnlyTheCancelledSlice) {
  make();
  enqueue("a", 0);
  const uint64_t tb = enqueue("b", 10);
  enqueue("c", 20);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->requests.size(), 3u);
  int fired = 0;
  b->cancel->onCancel([&fired] { ++fired; });
  EXPECT_TRUE(batcher_->cancel(tb));
  EXPECT_FALSE(batcher_->cancel(tb));  // marked once, counted once
  EXPECT_EQ(fired, 0);                 // a and c still wait for their answers
  EXPECT_FALSE(b->cancel->cancelled());
  EXPECT_EQ(outcomes_["b"].calls, 0);
  completeEcho(std::move(b));
  EXPECT_EQ(codeOf("b"), absl::StatusCode::kCancelled);
  ASSERT_EQ(codeOf("c"), absl::StatusCode::kOk);
  float f;
  std::memcpy(&f, outcomes_["c"].result->value().outputs[0].data.data(), 4);
  EXPECT_EQ(f, 20.0f);
  EXPECT_EQ(codeOf("a"), absl::StatusCode::kOk);
  EXPECT_EQ(inFlight(), 1);
  EXPECT_EQ(queued(), 0);
  EXPECT_EQ(batchesCancelled(), 0);
  EXPECT_EQ(fired, 0);
}

TEST_F(BatcherCancelTest, AllCancelledBatchCancelsItsTokenExactlyOnce) {
  make();
  const uint64_t ta = enqueue("a", 0);
  const uint64_t tb = enqueue("b", 10);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  ASSERT_EQ(b->requests.size(), 2u);
  int fired = 0;
  b->cancel->onCancel([&fired] { ++fired; });
  EXPECT_TRUE(batcher_->cancel(ta));
  EXPECT_EQ(fired, 0);
  EXPECT_TRUE(batcher_->cancel(tb));
  EXPECT_EQ(fired, 1);
  EXPECT_TRUE(b->cancel->cancelled());
  EXPECT_FALSE(batcher_->cancel(tb));
  EXPECT_FALSE(batcher_->cancel(ta));
  EXPECT_EQ(fired, 1);
  EXPECT_EQ(batcher_->inflight(), 1u);  // the slot is the backend's until it answers
  batcher_->complete(std::move(b), absl::CancelledError("cancelled at the backend"));
  EXPECT_EQ(codeOf("a"), absl::StatusCode::kCancelled);
  EXPECT_EQ(codeOf("b"), absl::StatusCode::kCancelled);
  EXPECT_EQ(batcher_->inflight(), 0u);
  EXPECT_FALSE(batcher_->cancel(ta));  // after the answer: a no-op
  EXPECT_EQ(inFlight(), 2);
  EXPECT_EQ(batchesCancelled(), 1);
  EXPECT_EQ(sample(metrics_, "infergate_batcher_cancellations_total{level=\"1\",model=\"m\"}"), 2);
  // The next batch is independent.
  enqueue("d", 30);
  std::unique_ptr<Batch> next = batcher_->poll();
  ASSERT_NE(next, nullptr);
  EXPECT_FALSE(next->cancel->cancelled());
  completeEcho(std::move(next));
  EXPECT_EQ(codeOf("d"), absl::StatusCode::kOk);
}

TEST_F(BatcherCancelTest, PlacedSlotsAreReleasedOnceWhateverTheStage) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1000;
  make(cfg);
  std::vector<uint64_t> tickets;
  for (int k = 0; k < 3; ++k) {
    InferRequest r = request(std::string(1, static_cast<char>('a' + k)), 10.0f * k);
    std::vector<uint8_t> src = std::move(r.inputs[0].data);
    r.inputs[0].data.clear();
    r.inputs[0].slot_bytes = src.size();
    ASSERT_TRUE(batcher_->placeInputs(r));
    std::memcpy(r.inputs[0].slot, src.data(), src.size());
    const std::string id = r.id;
    outcomes_[id];
    tickets.push_back(batcher_->enqueue(std::move(r), [this, id](absl::StatusOr<InferResponse> x) {
      ++outcomes_[id].calls;
      outcomes_[id].result = std::move(x);
    }));
  }
  EXPECT_EQ(batcher_->liveSlots(), 3u);
  EXPECT_TRUE(batcher_->cancel(tickets[0]));  // queued: its slot goes now
  EXPECT_EQ(batcher_->liveSlots(), 2u);
  clock_.advanceUs(1000);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_TRUE(batcher_->cancel(tickets[1]));
  EXPECT_TRUE(batcher_->cancel(tickets[2]));  // all in flight cancelled
  EXPECT_TRUE(b->cancel->cancelled());
  batcher_->complete(std::move(b), absl::CancelledError("x"));
  EXPECT_EQ(batcher_->liveSlots(), 0u);
  EXPECT_EQ(batcher_->pool(0)->available(), batcher_->pool(0)->slabCount() - 1);  // filling
  for (const char* id : {"a", "b", "c"}) EXPECT_EQ(codeOf(id), absl::StatusCode::kCancelled);
  EXPECT_EQ(queued(), 1);
  EXPECT_EQ(inFlight(), 2);
}

// --- BatchedModel ------------------------------------------------------------------------------

// Holds every batch until the test releases it (echo) or its token is cancelled (answered
// CANCELLED from the backend's own thread, as the gRPC client does). The destructor answers
// what it still holds.
class HoldingBackend : public BatchBackend {
 public:
  struct Held {
    const Batch* batch;
    BatchDone done;
  };
  ~HoldingBackend() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    for (auto& [id, h] : held_) h.done(absl::UnavailableError("backend gone"));
  }
  void execute(const Batch& batch, BatchDone done) override {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++executed_;
      held_.emplace(batch.id, Held{&batch, std::move(done)});
      if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    }
    cv_.notify_all();
    const uint64_t id = batch.id;
    batch.cancel->onCancel([this, id] {
      std::lock_guard<std::mutex> l(mu_);
      cancel_requests_.push_back(id);
      cv_.notify_all();
    });
  }
  // Echoes the oldest held batch; false when none.
  bool release() {
    Held h;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (held_.empty()) return false;
      auto it = held_.begin();
      h = std::move(it->second);
      held_.erase(it);
    }
    std::vector<BatchTensor> out = h.batch->inputs;
    for (BatchTensor& t : out) t.name = "OUT";
    h.done(std::move(out));
    return true;
  }
  int executed() {
    std::lock_guard<std::mutex> l(mu_);
    return executed_;
  }
  int cancelled() {
    std::lock_guard<std::mutex> l(mu_);
    return cancelled_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    while (!stop_) {
      cv_.wait(l, [this] { return stop_ || !cancel_requests_.empty(); });
      std::vector<uint64_t> ids;
      ids.swap(cancel_requests_);
      for (uint64_t id : ids) {
        auto it = held_.find(id);
        if (it == held_.end()) continue;
        Held h = std::move(it->second);
        held_.erase(it);
        ++cancelled_;
        l.unlock();
        h.done(absl::CancelledError("cancelled at the backend"));
        l.lock();
      }
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Held> held_;
  std::vector<uint64_t> cancel_requests_;
  int executed_ = 0;
  int cancelled_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

struct ModelFixture {
  explicit ModelFixture(int max_batch = 2) {
    auto b = std::make_unique<HoldingBackend>();
    backend = b.get();
    BatchingConfig cfg;
    cfg.max_queue_delay_us = 10'000'000;  // batches form at max_batch_size
    auto m = BatchedModel::create(modelConfig(max_batch), cfg, std::move(b), &metrics, nullptr);
    EXPECT_TRUE(m.ok()) << m.status();
    model = std::move(*m);
  }
  std::shared_ptr<net::CancelToken> submit(const std::string& id, float base) {
    auto token = std::make_shared<net::CancelToken>();
    InferRequest r = request(id, base);
    r.cancel = token;
    {
      std::lock_guard<std::mutex> l(mu);
      calls[id] = 0;
    }
    model->infer(std::move(r), [this, id](absl::StatusOr<InferResponse> res) {
      std::lock_guard<std::mutex> l(mu);
      ++calls[id];
      codes[id] = res.status().code();
    });
    return token;
  }
  int callsOf(const std::string& id) {
    std::lock_guard<std::mutex> l(mu);
    return calls[id];
  }
  absl::StatusCode codeOf(const std::string& id) {
    std::lock_guard<std::mutex> l(mu);
    return codes.count(id) ? codes[id] : absl::StatusCode::kUnknown;
  }

  common::MetricsRegistry metrics;
  std::mutex mu;
  std::map<std::string, int> calls;
  std::map<std::string, absl::StatusCode> codes;
  HoldingBackend* backend = nullptr;
  std::unique_ptr<BatchedModel> model;
};

TEST(BatchedModelCancel, EveryClientGoneCancelsTheBackendCall) {
  ModelFixture f;
  auto ta = f.submit("a", 0);
  auto tb = f.submit("b", 10);
  ASSERT_TRUE(waitFor([&] { return f.backend->executed() == 1; }));
  ta->cancel();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(f.backend->cancelled(), 0);  // b is still waiting
  EXPECT_EQ(f.callsOf("a"), 0);
  tb->cancel();
  ASSERT_TRUE(waitFor([&] { return f.callsOf("a") == 1 && f.callsOf("b") == 1; }));
  EXPECT_EQ(f.backend->cancelled(), 1);
  EXPECT_EQ(f.codeOf("a"), absl::StatusCode::kCancelled);
  EXPECT_EQ(f.codeOf("b"), absl::StatusCode::kCancelled);
  EXPECT_FALSE(f.backend->release());  // nothing left held
  tb->cancel();                        // again: nothing
  EXPECT_EQ(f.backend->cancelled(), 1);
  EXPECT_EQ(sample(f.metrics, "infergate_batcher_batches_cancelled_total{model=\"m\"}"), 1);
  EXPECT_EQ(f.model->batcher().inflight(), 0u);
  // The model goes on: a fresh batch is answered.
  f.submit("c", 20);
  f.submit("d", 30);
  ASSERT_TRUE(waitFor([&] { return f.backend->executed() == 2; }));
  EXPECT_TRUE(f.backend->release());
  ASSERT_TRUE(waitFor([&] { return f.callsOf("d") == 1; }));
  EXPECT_EQ(f.codeOf("c"), absl::StatusCode::kOk);
  EXPECT_EQ(f.callsOf("a"), 1);
  EXPECT_EQ(f.callsOf("b"), 1);
}

TEST(BatchedModelCancel, ALiveRequestKeepsTheBackendCall) {
  ModelFixture f;
  auto ta = f.submit("a", 0);
  f.submit("b", 10);
  ASSERT_TRUE(waitFor([&] { return f.backend->executed() == 1; }));
  ta->cancel();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(f.backend->cancelled(), 0);
  EXPECT_TRUE(f.backend->release());
  ASSERT_TRUE(waitFor([&] { return f.callsOf("a") == 1 && f.callsOf("b") == 1; }));
  EXPECT_EQ(f.codeOf("a"), absl::StatusCode::kCancelled);
  EXPECT_EQ(f.codeOf("b"), absl::StatusCode::kOk);
  EXPECT_EQ(sample(f.metrics, "infergate_batcher_batches_cancelled_total{model=\"m\"}"), 0);
  EXPECT_EQ(
      sample(f.metrics, "infergate_requests_cancelled_total{model=\"m\",stage=\"in_flight\"}"), 1);
}

TEST(BatchedModelCancel, TokensThatOutliveTheModelAreHarmless) {
  std::shared_ptr<net::CancelToken> ta, tb;
  {
    ModelFixture f;
    ta = f.submit("a", 0);
    tb = f.submit("b", 10);
    ASSERT_TRUE(waitFor([&] { return f.backend->executed() == 1; }));
    f.model.reset();  // the backend answers what it holds
    EXPECT_EQ(f.callsOf("a"), 1);
    EXPECT_EQ(f.callsOf("b"), 1);
  }
  ta->cancel();  // the model is gone: the canceller finds no batcher
  tb->cancel();
  SUCCEED();
}

// --- Pool -------------------------------------------------------------------------------------

// Sends are held; a held call whose batch token is cancelled answers CANCELLED (not_sent
// false), as the gRPC client does.
class CancellableClient : public EndpointClient {
 public:
  const std::string& address() const override { return addr_; }
  absl::Status probe(bool) override { return absl::OkStatus(); }
  void send(const Batch& batch, const SendOptions&, SendDone done) override {
    auto shared = std::make_shared<SendDone>(std::move(done));
    {
      std::lock_guard<std::mutex> l(mu);
      ++sends;
      held.push_back(shared);
    }
    batch.cancel->onCancel([this, shared] {
      {
        std::lock_guard<std::mutex> l(mu);
        auto it = std::find(held.begin(), held.end(), shared);
        if (it == held.end()) return;
        held.erase(it);
      }
      (*shared)(absl::CancelledError("Cancelled: every client of the call went away"), false);
    });
  }
  void answerAll() {
    std::vector<std::shared_ptr<SendDone>> h;
    {
      std::lock_guard<std::mutex> l(mu);
      h.swap(held);
    }
    for (auto& d : h) (*d)(std::vector<BatchTensor>{}, false);
  }
  std::mutex mu;
  int sends = 0;
  std::vector<std::shared_ptr<SendDone>> held;

 private:
  std::string addr_ = "ep0";
};

TEST(PoolCancel, CancelledCallIsCountedApartFromFailuresAndACancelledBatchIsNeverSent) {
  common::MetricsRegistry metrics;
  RemoteBackendConfig cfg;
  cfg.endpoints = {"ep0"};
  cfg.max_concurrency = 1;
  cfg.health_check_interval_ms = 3600 * 1000;
  cfg.startup_timeout_ms = 0;
  auto client = std::make_unique<CancellableClient>();
  CancellableClient* c = client.get();
  std::vector<std::unique_ptr<EndpointClient>> clients;
  clients.push_back(std::move(client));
  Pool pool("m", "triton", cfg, std::move(clients), &metrics);
  ASSERT_TRUE(pool.start(true).ok());

  Batch sent, waiting;
  sent.cancel = std::make_shared<net::CancelToken>();
  waiting.cancel = std::make_shared<net::CancelToken>();
  std::atomic<int> sent_calls{0}, waiting_calls{0};
  absl::Status sent_status, waiting_status;
  pool.execute(sent, [&](BatchOutputs o) {
    sent_status = o.status();
    sent_calls.fetch_add(1);
  });
  pool.execute(waiting, [&](BatchOutputs o) {  // queued: the only slot is taken
    waiting_status = o.status();
    waiting_calls.fetch_add(1);
  });
  EXPECT_EQ(c->sends, 1);
  waiting.cancel->cancel();  // cancelled while waiting for a slot
  sent.cancel->cancel();     // the call in flight: answered CANCELLED, the slot frees
  EXPECT_EQ(sent_calls.load(), 1);
  EXPECT_FALSE(sent_status.ok());
  EXPECT_EQ(waiting_calls.load(), 1);
  EXPECT_EQ(waiting_status.code(), absl::StatusCode::kCancelled) << waiting_status;
  EXPECT_EQ(c->sends, 1);  // the waiting batch never left
  EXPECT_EQ(sample(metrics, "infergate_backend_cancelled_total{endpoint=\"ep0\",model=\"m\"}"), 1);
  EXPECT_EQ(
      sample(metrics,
             "infergate_backend_errors_total{code=\"CANCELLED\",endpoint=\"ep0\",model=\"m\"}"),
      -1);
  EXPECT_EQ(pool.status()[0].failures, 0u);
  EXPECT_EQ(pool.status()[0].inflight, 0u);
  c->answerAll();
}

// --- GrpcEndpoint -------------------------------------------------------------------------------

using test_util::FakeGrpcServer;

TEST(GrpcEndpointCancel, TokenResetsTheStreamAndTheServerSeesTheCancel) {
  FakeGrpcServer server;
  GrpcEndpoint ep(server.address(), 1, 64 << 20);
  ASSERT_TRUE(ep.callSync("/t/Echo", "warm", 5000).status.ok());  // connected
  auto token = std::make_shared<net::CancelToken>();
  std::promise<GrpcResult> p;
  ep.call(
      "/t/Slow", "x", 30000, [&p](GrpcResult r) { p.set_value(std::move(r)); }, token);
  ASSERT_TRUE(waitFor([&] { return server.service().started.load() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  token->cancel();
  std::future<GrpcResult> f = p.get_future();
  ASSERT_EQ(f.wait_for(2s), std::future_status::ready);
  GrpcResult r = f.get();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  EXPECT_EQ(r.status.code(), absl::StatusCode::kCancelled) << r.status;
  EXPECT_FALSE(r.not_sent);  // never retried elsewhere
  ASSERT_TRUE(waitFor([&] { return server.service().cancelled.load() == 1; }));
  token->cancel();                                              // again: nothing
  EXPECT_TRUE(ep.callSync("/t/Echo", "ok", 5000).status.ok());  // the connection still serves
  EXPECT_EQ(server.service().cancelled.load(), 1);
}

TEST(GrpcEndpointCancel, TokenCancelledBeforeTheCallIsNeverSent) {
  FakeGrpcServer server;
  GrpcEndpoint ep(server.address(), 1, 64 << 20);
  auto token = std::make_shared<net::CancelToken>();
  token->cancel();
  int calls = 0;
  absl::Status st;
  ep.call(
      "/t/Slow", "x", 30000,
      [&](GrpcResult r) {
        ++calls;
        st = r.status;
      },
      token);
  EXPECT_EQ(calls, 1);  // answered inline
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(server.service().started.load(), 0);
}

TEST(GrpcEndpointCancel, CancelAfterTheAnswerOrAfterTheEndpointIsGoneIsANoOp) {
  FakeGrpcServer server;
  auto done_token = std::make_shared<net::CancelToken>();
  auto late_token = std::make_shared<net::CancelToken>();
  std::promise<GrpcResult> slow;
  {
    GrpcEndpoint ep(server.address(), 1, 64 << 20);
    std::promise<GrpcResult> echo;
    ep.call(
        "/t/Echo", "e", 5000, [&](GrpcResult r) { echo.set_value(std::move(r)); }, done_token);
    GrpcResult e = echo.get_future().get();
    EXPECT_TRUE(e.status.ok()) << e.status;
    done_token->cancel();  // the call has ended: nothing happens
    EXPECT_TRUE(ep.callSync("/t/Echo", "ok", 5000).status.ok());
    ep.call(
        "/t/Slow", "x", 30000, [&](GrpcResult r) { slow.set_value(std::move(r)); }, late_token);
    ASSERT_TRUE(waitFor([&] { return server.service().started.load() == 1; }));
  }  // the endpoint fails what is still open
  GrpcResult r = slow.get_future().get();
  EXPECT_EQ(r.status.code(), absl::StatusCode::kUnavailable) << r.status;
  late_token->cancel();  // the endpoint is gone: the lifeline is cut
  SUCCEED();
}

}  // namespace
}  // namespace infergate::backends
