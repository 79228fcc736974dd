// Who dispatches (docs/BATCHING.md): a reactor dispatches at the end of its burst, a backend
// completing on its own thread starts the next batch before answering, the dispatcher thread
// handles what is due later.
#include "backends/batched_model.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "backends/identity_model.h"
#include "net/burst.h"
#include "tests/unit/backends/tiny_model.h"

namespace infergate::backends {
namespace {


// Records the batches it runs (size, thread, answers seen so far) and completes them inline
// (on the caller's thread) or, with `async`, on its own worker thread in order.
class RecordingBackend : public BatchBackend {
 public:
  struct Run {
    int64_t size;
    std::thread::id thread;
    int answered_before;  // requests answered when execute() was called
  };
  explicit RecordingBackend(bool async, std::atomic<int>* answered)
      : async_(async), answered_(answered) {
    if (async_) worker_ = std::thread([this] { loop(); });
  }
  ~RecordingBackend() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }
  void execute(const Batch& batch, BatchDone done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      runs_.push_back(Run{batch.size, std::this_thread::get_id(), answered_->load()});
    }
    auto finish = [&batch, done = std::move(done)] {
      std::vector<BatchTensor> out = batch.inputs;
      for (BatchTensor& t : out) t.name = "OUT";
      done(std::move(out));
    };
    if (!async_) {
      finish();
      return;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(finish));
    }
    cv_.notify_one();
  }
  std::vector<Run> runs() {
    std::lock_guard<std::mutex> lock(mu_);
    return runs_;
  }
  std::thread::id workerId() const { return worker_.get_id(); }
  // Holds the worker before its next job until release().
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

 private:
  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || (!jobs_.empty() && !held_); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }
  const bool async_;
  std::atomic<int>* answered_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Run> runs_;
  std::deque<std::function<void()>> jobs_;
  bool held_ = false;
  bool stopping_ = false;
  std::thread worker_;
};

struct Fixture {
  Fixture(int max_batch, BatchingConfig cfg, bool async) {
    auto b = std::make_unique<RecordingBackend>(async, &answered);
    backend = b.get();
    auto m = BatchedModel::create(test_util::tinyModelConfig(max_batch), cfg, std::move(b), nullptr, nullptr);
    EXPECT_TRUE(m.ok()) << m.status();
    if (m.ok()) model = std::move(*m);
  }
  void submit() {
    model->infer(test_util::tinyRequest(), [this](absl::StatusOr<InferResponse> res) {
      if (res.ok()) ok.fetch_add(1);
      answered.fetch_add(1);
    });
  }
  bool waitAnswered(int n) {
    for (int i = 0; i < 5000 && answered.load() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return answered.load() >= n;
  }
  std::atomic<int> answered{0}, ok{0};
  RecordingBackend* backend = nullptr;
  std::unique_ptr<BatchedModel> model;
};

// A reactor's burst of requests becomes one batch, run on the reactor's thread at the end of
// the burst: no dispatcher hop, answers inline.
TEST(BatchedModelDispatch, AReactorBurstBecomesOneBatchOnTheReactorThread) {
  Fixture f(8, BatchingConfig{}, /*async=*/false);
  std::thread reactor([&] {
    net::markBurstThread();
    for (int i = 0; i < 5; ++i) f.submit();
    // Nothing runs before the burst ends (the dispatcher thread is not woken either).
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_TRUE(f.backend->runs().empty());
    EXPECT_EQ(f.answered.load(), 0);
    net::runBurstEnd();
    EXPECT_EQ(f.ok.load(), 5);  // answered inline, before runBurstEnd returned
    const auto runs = f.backend->runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].size, 5);
    EXPECT_EQ(runs[0].thread, std::this_thread::get_id());
  });
  reactor.join();
}

// More than a batch in one burst: batches of max_batch_size, all at the end of that burst.
TEST(BatchedModelDispatch, ABurstLargerThanABatchIsSplitAtMaxBatchSize) {
  Fixture f(4, BatchingConfig{}, /*async=*/false);
  std::thread reactor([&] {
    net::markBurstThread();
    for (int i = 0; i < 10; ++i) f.submit();
    net::runBurstEnd();
    EXPECT_EQ(f.ok.load(), 10);
    const auto runs = f.backend->runs();
    ASSERT_EQ(runs.size(), 3u);
    EXPECT_EQ(runs[0].size, 4);
    EXPECT_EQ(runs[1].size, 4);
    EXPECT_EQ(runs[2].size, 2);
  });
  reactor.join();
}

// A backend completing on its own thread starts the next due batch there, before the finished
// batch's requests are answered (the device is not idle while answers go out).
TEST(BatchedModelDispatch, TheNextBatchStartsOnTheCompletingThreadBeforeAnswers) {
  Fixture f(2, BatchingConfig{}, /*async=*/true);
  f.backend->hold();
  f.submit();  // not a burst thread: the dispatcher thread dispatches batch 1
  for (int i = 0; i < 2000 && f.backend->runs().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ(f.backend->runs().size(), 1u);
  f.submit();
  f.submit();  // queued behind the in-flight batch (max_inflight_batches 1)
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(f.backend->runs().size(), 1u);
  f.backend->release();
  ASSERT_TRUE(f.waitAnswered(3));
  const auto runs = f.backend->runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].size, 2);
  EXPECT_EQ(runs[1].thread, f.backend->workerId());
  EXPECT_EQ(runs[1].answered_before, 0);  // batch 1's answer had not gone out yet
  EXPECT_EQ(f.ok.load(), 3);
}

// With a queue delay, the end of the burst finds nothing due yet; the dispatcher thread must
// be armed for the delay, or the request would wait for the next enqueue.
TEST(BatchedModelDispatch, ADelayedBatchIsDispatchedByTheArmedDispatcher) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 3000;
  Fixture f(8, cfg, /*async=*/false);
  std::thread reactor([&] {
    net::markBurstThread();
    f.submit();
    f.submit();
    net::runBurstEnd();
    EXPECT_TRUE(f.backend->runs().empty());  // 2 < 8 and the delay has not run out
  });
  reactor.join();
  ASSERT_TRUE(f.waitAnswered(2));
  const auto runs = f.backend->runs();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].size, 2);
  EXPECT_NE(runs[0].thread, reactor.get_id());
}

// A reactor may still hold the model's end-of-burst task when the model is destroyed.
TEST(BatchedModelDispatch, AModelDestroyedWithItsTaskQueuedIsNotTouched) {
  std::thread reactor([&] {
    net::markBurstThread();
    auto f = std::make_unique<Fixture>(8, BatchingConfig{}, /*async=*/false);
    f->submit();  // queues the model's task
    f->model.reset();  // answers the request UNAVAILABLE
    EXPECT_EQ(f->answered.load(), 1);
    EXPECT_EQ(f->ok.load(), 0);
    net::runBurstEnd();  // the task finds its model gone (ASan: no use after free)
    EXPECT_EQ(f->answered.load(), 1);
  });
  reactor.join();
}

// The simulated device runs a job queued during the previous job's completion callback while
// that callback is still running (as a GPU stream runs the next kernel while the host posts
// results): job B, queued at the start of A's 30 ms callback, takes 20 ms of device time and
// completes when the callback returns (~30 ms after A), not 20 ms after it (~50 ms).
TEST(SimulatedDevice, AJobQueuedDuringACallbackRunsOnTheDeviceMeanwhile) {
  using Clock = std::chrono::steady_clock;
  SimulatedDevice device(20000, 0);
  Clock::time_point a_done, b_done;
  std::atomic<bool> finished{false};
  device.run(1, [&] {
    a_done = Clock::now();
    device.run(1, [&] {
      b_done = Clock::now();
      finished.store(true);
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the host answers A
  });
  for (int i = 0; i < 5000 && !finished.load(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(finished.load());
  const auto gap = std::chrono::duration_cast<std::chrono::milliseconds>(b_done - a_done);
  EXPECT_GE(gap.count(), 29);
  EXPECT_LT(gap.count(), 42) << "B waited for A's callback before starting on the device";
}

}  // namespace
}  // namespace infergate::backends
