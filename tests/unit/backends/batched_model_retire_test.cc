// A retired BatchedModel (Model::retire, ModelRegistry::update) finishes what it accepted and
// then its dispatcher thread exits: requests queued at retirement are all served (due at once,
// after a queue delay, or behind a full in-flight limit), later ones are refused with a clear
// UNAVAILABLE, and the process has one thread fewer (and none of an identity model's simulated
// device once it is idle).
#include <dirent.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/batched_model.h"
#include "backends/identity_model.h"
#include "net/burst.h"
#include "tests/unit/backends/tiny_model.h"

namespace infergate::backends {
namespace {

// The threads of this process (/proc/self/task).
int threadCount() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

// Completes each batch on its own worker thread (echoing the inputs), holding them while held.
class HeldBackend : public BatchBackend {
 public:
  HeldBackend() : worker_([this] { loop(); }) {}
  ~HeldBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      held_ = false;
    }
    cv_.notify_all();
    worker_.join();
  }
  void execute(const Batch& batch, BatchDone done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++batches_;
      jobs_.push_back([&batch, done = std::move(done)] {
        std::vector<BatchTensor> out = batch.inputs;
        for (BatchTensor& t : out) t.name = "OUT";
        done(std::move(out));
      });
    }
    cv_.notify_all();
  }
  void hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  int batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return (stopping_ && jobs_.empty()) || (!jobs_.empty() && !held_); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  int batches_ = 0;
  bool held_ = false;
  bool stopping_ = false;
  std::thread worker_;  // last: started once the rest exists
};

struct Fixture {
  Fixture(int max_batch, BatchingConfig cfg) {
    auto b = std::make_unique<HeldBackend>();
    backend = b.get();
    auto m = BatchedModel::create(test_util::tinyModelConfig(max_batch), cfg, std::move(b), nullptr,
                                  nullptr);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) model = std::move(*m);
    threads_with_model = threadCount();  // the backend's worker and the dispatcher included
  }
  void submit() {
    model->infer(test_util::tinyRequest(), [this](absl::StatusOr<InferResponse> res) {
      std::lock_guard<std::mutex> lock(mu);
      if (res.ok()) {
        ++ok;
      } else {
        errors.push_back(res.status());
      }
      ++answered;
    });
  }
  int answeredNow() {
    std::lock_guard<std::mutex> lock(mu);
    return answered;
  }
  bool waitFor(const std::function<bool()>& cond) {
    for (int i = 0; i < 5000; ++i) {
      if (cond()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return cond();
  }
  int threads_with_model = 0;
  HeldBackend* backend = nullptr;
  std::unique_ptr<BatchedModel> model;
  std::mutex mu;
  int ok = 0, answered = 0;
  std::vector<absl::Status> errors;
};

// Requests queued behind a held in-flight batch when the model is retired are all served; the
// dispatcher stays while they are queued, then exits (one thread fewer), and a late request is
// refused with a clear error.
TEST(BatchedModelRetire, QueuedRequestsAreServedThenTheDispatcherExits) {
  Fixture f(1, BatchingConfig{});  // batches of one, max_inflight_batches 1
  f.backend->hold();
  for (int i = 0; i < 5; ++i) f.submit();  // not a reactor: the dispatcher thread dispatches
  ASSERT_TRUE(f.waitFor([&] { return f.backend->batches() == 1; }));
  ASSERT_EQ(f.model->batcher().queued(), 4u);

  f.model->retire();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(f.model->dispatcherStopped());  // four requests are still queued
  EXPECT_EQ(f.answeredNow(), 0);

  f.backend->release();
  ASSERT_TRUE(f.waitFor([&] { return f.answeredNow() == 5; }));
  {
    std::lock_guard<std::mutex> lock(f.mu);
    EXPECT_EQ(f.ok, 5);
    EXPECT_TRUE(f.errors.empty());
  }
  EXPECT_EQ(f.backend->batches(), 5);
  ASSERT_TRUE(f.waitFor([&] { return f.model->dispatcherStopped(); }));
  ASSERT_TRUE(f.waitFor([&] { return threadCount() == f.threads_with_model - 1; }))
      << threadCount() << " threads, expected " << f.threads_with_model - 1;

  // After the drain: refused before copying and at enqueue, with the reason.
  const absl::Status adm = f.model->admission(0);
  EXPECT_EQ(adm.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(adm.message(), "Model was removed by a configuration reload");
  f.submit();
  std::lock_guard<std::mutex> lock(f.mu);
  EXPECT_EQ(f.answered, 6);
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(f.errors[0].message(), "Model was removed by a configuration reload");
}

// A request waiting out max_queue_delay_us at retirement is dispatched when its delay runs out
// (the dispatcher's timer), not dropped and not early; then the dispatcher exits.
TEST(BatchedModelRetire, ARequestWaitingForItsQueueDelayIsServed) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 100000;
  Fixture f(8, cfg);
  f.submit();
  f.model->retire();
  EXPECT_EQ(f.model->batcher().queued(), 1u);
  ASSERT_TRUE(f.waitFor([&] { return f.answeredNow() == 1; }));
  {
    std::lock_guard<std::mutex> lock(f.mu);
    EXPECT_EQ(f.ok, 1);
  }
  ASSERT_TRUE(f.waitFor([&] { return f.model->dispatcherStopped(); }));
  ASSERT_TRUE(f.waitFor([&] { return threadCount() == f.threads_with_model - 1; }));
}

// A request that found the model before its removal and reaches enqueue just after it (within
// kRetireGraceMs) is served; once the model has been idle for the grace, the dispatcher exits
// and a request is refused, answered at once (here on a reactor, at enqueue).
TEST(BatchedModelRetire, ALateRequestIsServedWithinTheGraceAndRefusedAfterIt) {
  Fixture f(4, BatchingConfig{});
  const auto retired_at = std::chrono::steady_clock::now();
  f.model->retire();  // nothing queued
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(f.model->dispatcherStopped());
  ASSERT_TRUE(f.model->admission(0).ok());
  f.submit();  // not a reactor: the dispatcher thread dispatches it
  ASSERT_TRUE(f.waitFor([&] { return f.answeredNow() == 1; }));
  {
    std::lock_guard<std::mutex> lock(f.mu);
    EXPECT_EQ(f.ok, 1);
  }
  ASSERT_TRUE(f.waitFor([&] { return f.model->dispatcherStopped(); }));
  EXPECT_GE(std::chrono::steady_clock::now() - retired_at,
            std::chrono::milliseconds(BatchedModel::kRetireGraceMs));
  ASSERT_TRUE(f.waitFor([&] { return threadCount() == f.threads_with_model - 1; }));
  std::thread reactor([&] {
    net::markBurstThread();
    f.submit();
    net::runBurstEnd();
  });
  reactor.join();
  std::lock_guard<std::mutex> lock(f.mu);
  EXPECT_EQ(f.answered, 2);
  ASSERT_EQ(f.errors.size(), 1u);
  EXPECT_EQ(f.errors[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(f.errors[0].message(), "Model was removed by a configuration reload");
}

// Requests a reactor enqueued before retirement and dispatches at the end of its burst (after
// retire()) are served, the last ones by the completing backend thread; then the dispatcher
// exits.
TEST(BatchedModelRetire, ABurstQueuedBeforeRetirementIsServed) {
  Fixture f(2, BatchingConfig{});
  f.backend->hold();
  std::thread reactor([&] {
    net::markBurstThread();
    for (int i = 0; i < 6; ++i) f.submit();
    f.model->retire();
    net::runBurstEnd();  // batch 1 (2 requests) in flight, 4 queued
  });
  reactor.join();
  EXPECT_EQ(f.model->batcher().queued(), 4u);
  EXPECT_FALSE(f.model->dispatcherStopped());
  f.backend->release();
  ASSERT_TRUE(f.waitFor([&] { return f.answeredNow() == 6; }));
  {
    std::lock_guard<std::mutex> lock(f.mu);
    EXPECT_EQ(f.ok, 6);
  }
  EXPECT_EQ(f.backend->batches(), 3);
  ASSERT_TRUE(f.waitFor([&] { return f.model->dispatcherStopped(); }));
}

// Waits up to 5 s for `cond`.
bool eventually(const std::function<bool()>& cond) {
  for (int i = 0; i < 5000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return cond();
}

// A retired simulated device keeps its host thread while its upstream says more may come, lets
// it go once the upstream is idle and it has had no job for the grace, and starts it again for
// a job that arrives after that (served, not dropped), then lets it go again.
TEST(SimulatedDeviceRetire, TheHostThreadExitsOnceIdleAndComesBackForALateJob) {
  SimulatedDevice device(1000, 0);
  std::atomic<int> done{0};
  device.run(1, [&] { done.fetch_add(1); });
  ASSERT_TRUE(eventually([&] { return done.load() == 1; }));
  const int threads = threadCount();
  ASSERT_TRUE(device.hostThreadRunning());

  std::atomic<bool> upstream_idle{false};
  device.retire([&] { return upstream_idle.load(); });
  std::this_thread::sleep_for(std::chrono::milliseconds(3 * SimulatedDevice::kRetireGraceMs));
  EXPECT_TRUE(device.hostThreadRunning()) << "left while its upstream still had work";

  upstream_idle.store(true);
  ASSERT_TRUE(eventually([&] { return !device.hostThreadRunning(); }));
  ASSERT_TRUE(eventually([&] { return threadCount() == threads - 1; }))
      << threadCount() << " threads, expected " << threads - 1;

  device.run(1, [&] { done.fetch_add(1); });  // late: the thread comes back for it
  ASSERT_TRUE(eventually([&] { return done.load() == 2; }));
  ASSERT_TRUE(eventually([&] { return !device.hostThreadRunning(); }));
  ASSERT_TRUE(eventually([&] { return threadCount() == threads - 1; }));
}

// The identity model with a cost, batched (IdentityBatchBackend) and not (IdentityModel): once
// retired and drained, the process has neither its dispatcher nor its device thread; what was
// queued at retirement is served first.
TEST(SimulatedDeviceRetire, ARetiredIdentityModelLeavesNoThreadBehind) {
  ModelConfig config = test_util::tinyModelConfig(4);
  config.backend = "identity";
  config.cost_fixed_us = 20000;
  const int before = threadCount();
  BatchingConfig batching;
  auto batched = createModel(config, &batching, nullptr, nullptr);
  ASSERT_TRUE(batched.ok()) << batched.status();
  auto plain = createModel(config);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(threadCount(), before + 3);  // dispatcher + two devices

  std::atomic<int> ok{0};
  for (Model* m : {batched->get(), plain->get()}) {
    for (int i = 0; i < 3; ++i) {
      m->infer(test_util::tinyRequest(), [&](absl::StatusOr<InferResponse> r) {
        if (r.ok()) ok.fetch_add(1);
      });
    }
  }
  (*batched)->retire();
  (*plain)->retire();
  ASSERT_TRUE(eventually([&] { return ok.load() == 6; }));
  ASSERT_TRUE(eventually([&] { return threadCount() == before; }))
      << threadCount() << " threads, expected " << before;
}

}  // namespace
}  // namespace infergate::backends
