#include "backends/batcher.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "backends/batched_model.h"
#include "backends/identity_model.h"
#include "common/metrics.h"

namespace infergate::backends {
namespace {

// One request's outcome, recorded by its callback.
struct Outcome {
  int calls = 0;
  std::optional<absl::StatusOr<InferResponse>> result;
};

class BatcherTest : public ::testing::Test {
 protected:
  ModelConfig model(int max_batch = 8, std::vector<int64_t> shape = {4},
                    DataType dtype = DataType::kFp32) {
    ModelConfig c;
    c.name = "m";
    c.version = "1";
    c.max_batch_size = max_batch;
    c.inputs = {{"IN", dtype, shape}};
    c.outputs = {{"OUT", dtype, shape}};
    return c;
  }

  void make(ModelConfig m, BatchingConfig cfg) {
    absl::StatusOr<std::unique_ptr<Batcher>> b =
        Batcher::create(std::move(m), std::move(cfg), &clock_, &metrics_, nullptr);
    ASSERT_TRUE(b.ok()) << b.status();
    batcher_ = std::move(*b);
  }

  // FP32 request "id" with `rows` rows of `cols` floats; element values start at `base`.
  InferRequest fp32(const std::string& id, int64_t rows, int64_t cols, float base,
                    int64_t priority = 0, uint64_t timeout_us = 0, bool batched = true) {
    InferRequest r;
    r.model_name = "m";
    r.id = id;
    r.priority = priority;
    r.timeout_us = timeout_us;
    Tensor t{"IN", DataType::kFp32, {}, {}};
    if (batched) t.shape.push_back(rows);
    t.shape.push_back(cols);
    t.data.resize(static_cast<size_t>(rows * cols) * 4);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float f = base + static_cast<float>(i);
      std::memcpy(t.data.data() + 4 * i, &f, 4);
    }
    r.inputs.push_back(std::move(t));
    return r;
  }

  uint64_t enqueue(InferRequest r) {
    const std::string id = r.id;
    outcomes_[id];  // exists even if answered inline
    return batcher_->enqueue(std::move(r), [this, id](absl::StatusOr<InferResponse> res) {
      Outcome& o = outcomes_[id];
      ++o.calls;
      o.result = std::move(res);
    });
  }

  // Completes `b` the way the identity backend would: outputs = inputs, renamed.
  void completeEcho(std::unique_ptr<Batch> b) {
    std::vector<BatchTensor> out = b->inputs;
    for (BatchTensor& t : out) t.name = "OUT";
    batcher_->complete(std::move(b), std::move(out));
  }

  static std::vector<std::string> ids(const Batch& b) {
    std::vector<std::string> v;
    for (const auto& r : b.requests) v.push_back(r->request.id);
    return v;
  }

  bool answeredOk(const std::string& id) {
    const Outcome& o = outcomes_[id];
    return o.calls == 1 && o.result && o.result->ok();
  }

  absl::Status statusOf(const std::string& id) {
    const Outcome& o = outcomes_[id];
    EXPECT_EQ(o.calls, 1) << id;
    if (!o.result) return absl::UnknownError("not answered");
    return o.result->status();
  }

  // Value of the exposition line `series` ("name{labels}"), -1 when absent.
  double sample(const std::string& series) {
    const std::string text = "\n" + metrics_.renderPrometheus();
    const std::string key = "\n" + series + " ";
    const size_t p = text.find(key);
    if (p == std::string::npos) return -1;
    return std::stod(text.substr(p + key.size(), text.find('\n', p + 1) - p - key.size()));
  }

  common::ManualClock clock_;
  common::MetricsRegistry metrics_;
  std::map<std::string, Outcome> outcomes_;  // before batcher_: its destructor answers into it
  std::unique_ptr<Batcher> batcher_;
};

TEST_F(BatcherTest, FormsBatchAtMaxSizeAndSlicesOutputsPerRequest) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1000;
  make(model(4), cfg);
  for (int i = 0; i < 3; ++i) enqueue(fp32("r" + std::to_string(i), 1, 4, 10.0f * i));
  uint64_t wake = 0;
  EXPECT_EQ(batcher_->poll(&wake), nullptr);  // 3 < 4 and the delay has not run out
  EXPECT_EQ(wake, clock_.nowNs() + 1'000'000);
  enqueue(fp32("r3", 1, 4, 30.0f));
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 4);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"r0", "r1", "r2", "r3"}));
  ASSERT_EQ(b->inputs.size(), 1u);
  EXPECT_EQ(b->inputs[0].shape, (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(b->inputs[0].bytes, 64u);
  float f;
  std::memcpy(&f, b->inputs[0].data + 2 * 16, 4);  // row 2, element 0
  EXPECT_EQ(f, 20.0f);
  completeEcho(std::move(b));
  for (int i = 0; i < 4; ++i) {
    const std::string id = "r" + std::to_string(i);
    ASSERT_TRUE(answeredOk(id)) << id;
    const InferResponse& resp = **outcomes_[id].result;
    EXPECT_EQ(resp.id, id);
    ASSERT_EQ(resp.outputs.size(), 1u);
    EXPECT_EQ(resp.outputs[0].name, "OUT");
    EXPECT_EQ(resp.outputs[0].shape, (std::vector<int64_t>{1, 4}));
    ASSERT_EQ(resp.outputs[0].data.size(), 16u);
    for (int e = 0; e < 4; ++e) {
      std::memcpy(&f, resp.outputs[0].data.data() + 4 * e, 4);
      EXPECT_EQ(f, 10.0f * i + e);
    }
  }
  EXPECT_EQ(sample("infergate_batcher_batch_size_count{model=\"m\"}"), 1);
  EXPECT_EQ(sample("infergate_batcher_batch_size_sum{model=\"m\"}"), 4);
  EXPECT_EQ(sample("infergate_batcher_batch_fill_ratio_bucket{model=\"m\",le=\"0.75\"}"), 0);
  EXPECT_EQ(sample("infergate_batcher_batch_fill_ratio_bucket{model=\"m\",le=\"1\"}"), 1);
  // Heap tensors (no slots placed): the decoder's write plus the staged copy at dispatch.
  EXPECT_EQ(sample("infergate_batcher_bytes_copied_total{model=\"m\"}"), 128);
  EXPECT_EQ(sample("infergate_batcher_staged_bytes_total{model=\"m\"}"), 64);
  EXPECT_EQ(sample("infergate_batcher_slot_bytes_total{model=\"m\"}"), 0);
  EXPECT_EQ(sample("infergate_batcher_request_bytes_total{model=\"m\"}"), 64);
  EXPECT_EQ(sample("infergate_batcher_queue_depth{level=\"1\",model=\"m\"}"), 0);
  EXPECT_EQ(batcher_->inflight(), 0u);
}

TEST_F(BatcherTest, FormsBatchWhenQueueDelayRunsOut) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 500;
  make(model(8), cfg);
  enqueue(fp32("a", 1, 4, 0));
  clock_.advanceUs(200);
  enqueue(fp32("b", 2, 4, 0));
  EXPECT_EQ(sample("infergate_batcher_queue_depth{level=\"1\",model=\"m\"}"), 2);
  clock_.advanceUs(299);
  EXPECT_EQ(batcher_->poll(), nullptr);  // oldest waited 499 us
  clock_.advanceUs(1);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(b->size, 3);  // rows, not requests
  completeEcho(std::move(b));
  EXPECT_TRUE(answeredOk("a"));
  ASSERT_TRUE(answeredOk("b"));
  EXPECT_EQ(outcomes_["b"].result->value().outputs[0].shape, (std::vector<int64_t>{2, 4}));
  // Queue time of "a": 500 us, of "b": 300 us. (500 lands in the log-linear bucket
  // [480, 511], which the exposition counts under the next bound, 0.001.)
  EXPECT_EQ(sample("infergate_batcher_queue_time_seconds_bucket{level=\"1\",model=\"m\",le=\"0.0005\"}"),
            1);
  EXPECT_EQ(sample("infergate_batcher_queue_time_seconds_bucket{level=\"1\",model=\"m\",le=\"0.001\"}"),
            2);
  EXPECT_EQ(sample("infergate_batcher_queue_time_seconds_bucket{level=\"1\",model=\"m\",le=\"0.0002\"}"),
            0);
}

TEST_F(BatcherTest, WithoutDelayDispatchesAtOnceAndGrowsBatchesWhileBackendIsBusy) {
  make(model(8), BatchingConfig{});
  enqueue(fp32("a", 1, 4, 0));
  std::unique_ptr<Batch> first = batcher_->poll();
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->size, 1);
  for (const char* id : {"b", "c", "d"}) enqueue(fp32(id, 1, 4, 0));
  EXPECT_EQ(batcher_->poll(), nullptr);  // the one in-flight slot is taken
  const size_t buffers = batcher_->pool(0)->slabCount();
  EXPECT_EQ(buffers, 2 + Batcher::kSpareBuffers);
  EXPECT_EQ(batcher_->pool(0)->available(), buffers - 1);  // the batch's
  completeEcho(std::move(first));
  EXPECT_EQ(batcher_->pool(0)->available(), buffers);
  std::unique_ptr<Batch> second = batcher_->poll();
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(ids(*second), (std::vector<std::string>{"b", "c", "d"}));
  completeEcho(std::move(second));
  for (const char* id : {"a", "b", "c", "d"}) EXPECT_TRUE(answeredOk(id)) << id;
}

TEST_F(BatcherTest, PreferredBatchSizes) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 10000;
  cfg.preferred_batch_sizes = {4, 2};
  make(model(8), cfg);
  enqueue(fp32("a", 1, 4, 0));
  EXPECT_EQ(batcher_->poll(), nullptr);
  enqueue(fp32("b", 1, 4, 0));
  std::unique_ptr<Batch> b = batcher_->poll();  // 2 is preferred: no waiting for the delay
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 2);
  for (const char* id : {"c", "d", "e", "f", "g"}) enqueue(fp32(id, 1, 4, 0));
  completeEcho(std::move(b));
  b = batcher_->poll();  // 5 queued: the largest preferred size that fits is 4
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"c", "d", "e", "f"}));
  completeEcho(std::move(b));
  EXPECT_EQ(batcher_->poll(), nullptr);  // "g" alone waits for the delay
  clock_.advanceUs(10000);
  b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"g"}));
  completeEcho(std::move(b));
}

TEST_F(BatcherTest, RequestThatWouldOverflowMaxBatchClosesTheBatch) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 10000;
  make(model(4), cfg);
  enqueue(fp32("a", 3, 4, 0));
  enqueue(fp32("b", 2, 4, 0));
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);  // 3 + 2 > 4: "a" goes now, without waiting
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"a"}));
  EXPECT_EQ(b->size, 3);
  completeEcho(std::move(b));
  EXPECT_EQ(batcher_->poll(), nullptr);
}

TEST_F(BatcherTest, StrictPriorityFifoWithinALevel) {
  BatchingConfig cfg;
  cfg.priority_levels = 3;  // default level 0 -> 3 (the lowest)
  make(model(2), cfg);
  EXPECT_EQ(batcher_->levelOf(0), 3u);
  EXPECT_EQ(batcher_->levelOf(-1), 3u);
  EXPECT_EQ(batcher_->levelOf(4), 3u);
  EXPECT_EQ(batcher_->levelOf(1), 1u);
  EXPECT_EQ(batcher_->levelOf(2), 2u);
  // Hold the in-flight slot so everything queues first.
  enqueue(fp32("blocker", 1, 4, 0, 1));
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  enqueue(fp32("a", 1, 4, 0, 0));
  enqueue(fp32("b", 1, 4, 0, 3));
  enqueue(fp32("c", 1, 4, 0, 1));
  enqueue(fp32("d", 1, 4, 0, 2));
  enqueue(fp32("e", 1, 4, 0, 1));
  EXPECT_EQ(batcher_->queued(1), 2u);
  EXPECT_EQ(batcher_->queued(2), 1u);
  EXPECT_EQ(batcher_->queued(3), 2u);
  std::vector<std::vector<std::string>> order;
  completeEcho(std::move(b));
  while ((b = batcher_->poll()) != nullptr) {
    order.push_back(ids(*b));
    completeEcho(std::move(b));
  }
  EXPECT_EQ(order, (std::vector<std::vector<std::string>>{{"c", "e"}, {"d", "a"}, {"b"}}));
  for (const char* id : {"a", "b", "c", "d", "e"}) EXPECT_TRUE(answeredOk(id)) << id;
}

TEST_F(BatcherTest, FullQueueRejectsWithUnavailableOr429) {
  for (int status : {503, 429}) {
    batcher_.reset();
    outcomes_.clear();
    BatchingConfig cfg;
    cfg.max_queue_delay_us = 1000;
    cfg.default_queue_policy.max_queue_size = 2;
    cfg.overload_status = status;
    make(model(8), cfg);
    EXPECT_NE(enqueue(fp32("a", 1, 4, 0)), 0u);
    EXPECT_NE(enqueue(fp32("b", 1, 4, 0)), 0u);
    EXPECT_EQ(enqueue(fp32("c", 1, 4, 0)), 0u);
    const absl::Status st = statusOf("c");
    EXPECT_EQ(st.code(), status == 503 ? absl::StatusCode::kUnavailable
                                       : absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(st.message(), "Exceeds maximum queue size");
    EXPECT_EQ(outcomes_["a"].calls, 0);
  }
  EXPECT_EQ(sample("infergate_batcher_rejections_total{level=\"1\",model=\"m\",reason=\"queue_full\"}"),
            2);
}

// Issue 13: the queues were unbounded unless configured; by default each level now holds
// kDefaultMaxQueueSize requests and refuses the next at once with the overload status
// (UNAVAILABLE = HTTP 503 by frontend/status_map.h), each level on its own. 0 stays an
// explicit "unbounded".
TEST_F(BatcherTest, DefaultQueueSizeIsFinite) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1'000'000;  // nothing leaves the queue while the test fills it
  cfg.priority_levels = 2;
  EXPECT_EQ(cfg.default_queue_policy.max_queue_size, kDefaultMaxQueueSize);
  make(model(8), cfg);
  for (uint64_t i = 0; i < kDefaultMaxQueueSize; ++i) {
    ASSERT_NE(enqueue(fp32("lo" + std::to_string(i), 1, 4, 0, 2)), 0u) << i;
  }
  EXPECT_EQ(enqueue(fp32("lo-over", 1, 4, 0, 2)), 0u);
  EXPECT_EQ(statusOf("lo-over").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(statusOf("lo-over").message(), "Exceeds maximum queue size");
  EXPECT_NE(enqueue(fp32("hi", 1, 4, 0, 1)), 0u);  // level 1 has its own queue
  EXPECT_EQ(batcher_->queued(), kDefaultMaxQueueSize + 1);
  EXPECT_EQ(sample("infergate_batcher_rejections_total{level=\"2\",model=\"m\",reason=\"queue_full\"}"),
            1);

  batcher_.reset();
  outcomes_.clear();
  cfg.default_queue_policy.max_queue_size = 0;  // explicitly unbounded
  make(model(8), cfg);
  for (uint64_t i = 0; i < 2 * kDefaultMaxQueueSize; ++i) {
    ASSERT_NE(enqueue(fp32("u" + std::to_string(i), 1, 4, 0, 2)), 0u) << i;
  }
}

TEST_F(BatcherTest, ExpiredRequestsAreAnsweredAndNeverDispatched) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 5000;
  cfg.default_queue_policy.default_timeout_us = 1000;
  make(model(8), cfg);
  enqueue(fp32("default", 1, 4, 0));              // deadline 1000 us
  enqueue(fp32("shorter", 1, 4, 0, 0, 200));      // override shortens to 200 us
  enqueue(fp32("longer", 1, 4, 0, 0, 100000));    // may not lengthen: 1000 us
  uint64_t wake = 0;
  EXPECT_EQ(batcher_->poll(&wake), nullptr);
  EXPECT_EQ(wake, clock_.nowNs() + 200'000);
  clock_.advanceUs(200);
  EXPECT_EQ(batcher_->poll(), nullptr);
  EXPECT_EQ(statusOf("shorter").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(statusOf("shorter").message(), "Request timeout expired");
  EXPECT_EQ(outcomes_["default"].calls, 0);
  clock_.advanceUs(800);
  EXPECT_EQ(batcher_->poll(), nullptr);  // both expired before the 5 ms delay: nothing to send
  EXPECT_EQ(statusOf("default").message(), "Request timeout expired");
  EXPECT_EQ(statusOf("longer").message(), "Request timeout expired");
  EXPECT_EQ(batcher_->queued(), 0u);
  EXPECT_EQ(sample("infergate_batcher_timeouts_total{level=\"1\",model=\"m\"}"), 3);
  EXPECT_EQ(sample("infergate_batcher_batches_total{model=\"m\"}"), 0);
}

TEST_F(BatcherTest, TimeoutOverrideCanBeRefused) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 5000;
  cfg.default_queue_policy.allow_timeout_override = false;
  make(model(8), cfg);
  enqueue(fp32("a", 1, 4, 0, 0, 100));
  clock_.advanceUs(1000);
  EXPECT_EQ(batcher_->poll(), nullptr);
  EXPECT_EQ(outcomes_["a"].calls, 0);  // its 100 us timeout was ignored
  clock_.advanceUs(4000);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  completeEcho(std::move(b));
  EXPECT_TRUE(answeredOk("a"));
}

TEST_F(BatcherTest, DelayActionRunsExpiredAfterUnexpiredOfSameOrHigherLevel) {
  BatchingConfig cfg;
  cfg.priority_levels = 3;
  cfg.priority_queue_policy[2].default_timeout_us = 100;
  cfg.priority_queue_policy[2].timeout_action = TimeoutAction::kDelay;
  make(model(1), cfg);
  enqueue(fp32("blocker", 1, 4, 0, 1));
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  enqueue(fp32("x", 1, 4, 0, 2));
  clock_.advanceUs(100);
  EXPECT_EQ(batcher_->poll(), nullptr);  // x expired: delayed, not answered
  EXPECT_EQ(outcomes_["x"].calls, 0);
  EXPECT_EQ(sample("infergate_batcher_delayed_total{level=\"2\",model=\"m\"}"), 1);
  enqueue(fp32("w", 1, 4, 0, 3));
  enqueue(fp32("y", 1, 4, 0, 2));
  enqueue(fp32("z", 1, 4, 0, 1));
  completeEcho(std::move(b));
  std::vector<std::string> order;
  while ((b = batcher_->poll()) != nullptr) {
    order.push_back(ids(*b)[0]);
    completeEcho(std::move(b));
  }
  EXPECT_EQ(order, (std::vector<std::string>{"z", "y", "x", "w"}));
  for (const char* id : {"w", "x", "y", "z"}) EXPECT_TRUE(answeredOk(id)) << id;
}

TEST_F(BatcherTest, CancellingAQueuedRequest) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1000;
  make(model(8), cfg);
  enqueue(fp32("a", 1, 4, 0));
  const uint64_t t = enqueue(fp32("b", 1, 4, 0));
  enqueue(fp32("c", 1, 4, 0));
  EXPECT_TRUE(batcher_->cancel(t));
  EXPECT_FALSE(batcher_->cancel(t));
  EXPECT_EQ(statusOf("b").code(), absl::StatusCode::kCancelled);
  clock_.advanceUs(1000);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"a", "c"}));
  completeEcho(std::move(b));
  EXPECT_TRUE(answeredOk("a"));
  EXPECT_TRUE(answeredOk("c"));
  EXPECT_EQ(outcomes_["b"].calls, 1);
}

TEST_F(BatcherTest, CancellingAnInFlightRequestDropsOnlyItsSlice) {
  BatchingConfig cfg;
  make(model(8), cfg);
  std::unique_ptr<Batch> blocker;
  enqueue(fp32("first", 1, 4, 0));
  blocker = batcher_->poll();
  enqueue(fp32("a", 1, 4, 1.0f));
  const uint64_t t = enqueue(fp32("b", 2, 4, 2.0f));
  enqueue(fp32("c", 1, 4, 3.0f));
  completeEcho(std::move(blocker));
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 4);
  EXPECT_TRUE(batcher_->cancel(t));
  EXPECT_FALSE(batcher_->cancel(t));
  EXPECT_EQ(outcomes_["b"].calls, 0);  // answered when the batch completes
  completeEcho(std::move(b));
  EXPECT_EQ(statusOf("b").code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(answeredOk("c"));
  float f;
  std::memcpy(&f, outcomes_["c"].result->value().outputs[0].data.data(), 4);
  EXPECT_EQ(f, 3.0f);  // the slice after the cancelled one is still c's
  ASSERT_TRUE(answeredOk("a"));
  EXPECT_FALSE(batcher_->cancel(t));
  EXPECT_EQ(sample("infergate_batcher_cancellations_total{level=\"1\",model=\"m\"}"), 1);
}

TEST_F(BatcherTest, BatchesOnlyShapeCompatibleRequests) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1000;
  make(model(8, {-1}), cfg);
  enqueue(fp32("a4", 1, 4, 0));
  enqueue(fp32("b4", 1, 4, 0));
  enqueue(fp32("c3", 1, 3, 0));
  enqueue(fp32("d4", 1, 4, 0));
  std::unique_ptr<Batch> b = batcher_->poll();  // closed by c3: sent without waiting
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"a4", "b4"}));
  EXPECT_EQ(b->inputs[0].shape, (std::vector<int64_t>{2, 4}));
  completeEcho(std::move(b));
  b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"c3"}));  // d4 may not overtake... nor join
  EXPECT_EQ(b->inputs[0].shape, (std::vector<int64_t>{1, 3}));
  completeEcho(std::move(b));
  EXPECT_EQ(batcher_->poll(), nullptr);  // d4 alone waits for the delay
  clock_.advanceUs(1000);
  b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"d4"}));
  completeEcho(std::move(b));
  ASSERT_TRUE(answeredOk("c3"));
  EXPECT_EQ(outcomes_["c3"].result->value().outputs[0].shape, (std::vector<int64_t>{1, 3}));
}

TEST(PriorityClassMapping, ClassesSpreadOverTritonLevels) {
  // 1 + floor(class x levels / 4).
  EXPECT_EQ(levelOfPriorityClass(0, 1), 1u);
  EXPECT_EQ(levelOfPriorityClass(3, 1), 1u);
  EXPECT_EQ(levelOfPriorityClass(0, 2), 1u);
  EXPECT_EQ(levelOfPriorityClass(1, 2), 1u);
  EXPECT_EQ(levelOfPriorityClass(2, 2), 2u);
  EXPECT_EQ(levelOfPriorityClass(3, 2), 2u);
  EXPECT_EQ(levelOfPriorityClass(1, 3), 1u);
  EXPECT_EQ(levelOfPriorityClass(2, 3), 2u);
  EXPECT_EQ(levelOfPriorityClass(3, 3), 3u);
  for (int c = 0; c < 4; ++c) EXPECT_EQ(levelOfPriorityClass(c, 4), static_cast<uint32_t>(c + 1));
  EXPECT_EQ(levelOfPriorityClass(1, 8), 3u);
  EXPECT_EQ(levelOfPriorityClass(3, 8), 7u);
  EXPECT_EQ(levelOfPriorityClass(-5, 4), 1u);  // clamped
  EXPECT_EQ(levelOfPriorityClass(99, 4), 4u);
  EXPECT_EQ(levelOfPriorityClass(2, 0), 1u);
}

TEST(PriorityClassMapping, ShedClassesForLevel) {
  EXPECT_EQ(shedClassesForLevel(2, 2), 2);  // classes 2, 3
  EXPECT_EQ(shedClassesForLevel(1, 2), 3);  // all but class 0 (never shed at the NIC)
  EXPECT_EQ(shedClassesForLevel(4, 4), 1);
  EXPECT_EQ(shedClassesForLevel(3, 4), 2);
  EXPECT_EQ(shedClassesForLevel(1, 1), 3);
  EXPECT_EQ(shedClassesForLevel(3, 3), 1);
}

TEST_F(BatcherTest, OverloadLevelIsPublishedAndDropsWithHysteresis) {
  BatchingConfig cfg;
  cfg.priority_levels = 2;
  cfg.max_total_queue_size = 4;
  cfg.max_queue_delay_us = 1000;
  make(model(1), cfg);  // one row per batch: each poll drains one request
  std::vector<int> published;
  batcher_->setOverloadListener([&](int level) { published.push_back(level); });
  for (int i = 0; i < 3; ++i) enqueue(fp32("low" + std::to_string(i), 1, 4, 0, 2));
  EXPECT_TRUE(published.empty());
  EXPECT_EQ(batcher_->overloadLevel(), 0);
  enqueue(fp32("low3", 1, 4, 0, 2));  // queues full: shed the classes of the lowest level
  EXPECT_EQ(published, (std::vector<int>{2}));
  EXPECT_EQ(sample("infergate_batcher_overload_level{model=\"m\"}"), 2);
  enqueue(fp32("low4", 1, 4, 0, 2));  // refused at level 2: already shedding its classes
  EXPECT_EQ(statusOf("low4").message(), "Exceeds maximum queue size");
  EXPECT_EQ(published, (std::vector<int>{2}));
  // Level 1 sheds a queued level-2 request, then level 1 itself is refused: escalate to every
  // class but 0.
  EXPECT_NE(enqueue(fp32("high0", 1, 4, 0, 1)), 0u);
  EXPECT_EQ(published, (std::vector<int>{2}));
  for (int i = 1; i <= 4; ++i) enqueue(fp32("high" + std::to_string(i), 1, 4, 0, 1));
  EXPECT_EQ(outcomes_["high3"].calls, 0);  // queued
  EXPECT_EQ(statusOf("high4").message(), "Exceeds maximum queue size");
  EXPECT_EQ(published, (std::vector<int>{2, 3}));
  EXPECT_EQ(batcher_->queued(), 4u);
  // Drain: 3 queued (above half of 4) keeps the level; 2 (= half) clears it.
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  completeEcho(std::move(b));
  EXPECT_EQ(batcher_->queued(), 3u);
  EXPECT_EQ(batcher_->overloadLevel(), 3);
  EXPECT_EQ(sample("infergate_batcher_overloaded{model=\"m\"}"), 0);
  b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  completeEcho(std::move(b));
  EXPECT_EQ(batcher_->queued(), 2u);
  EXPECT_EQ(published, (std::vector<int>{2, 3, 0}));
  EXPECT_EQ(sample("infergate_batcher_overload_level{model=\"m\"}"), 0);
  // A new listener hears nothing while the level is 0; refilling raises it again.
  std::vector<int> second;
  batcher_->setOverloadListener([&](int level) { second.push_back(level); });
  EXPECT_TRUE(second.empty());
  enqueue(fp32("again0", 1, 4, 0, 2));
  enqueue(fp32("again1", 1, 4, 0, 2));
  EXPECT_EQ(second, (std::vector<int>{2}));
  EXPECT_EQ(published.size(), 3u);  // the old listener was replaced
  batcher_->setOverloadListener(nullptr);  // `second` dies before the batcher
}

TEST_F(BatcherTest, OverloadLevelClearsOnExpiryCancelAndShutdown) {
  BatchingConfig cfg;
  cfg.priority_levels = 4;
  cfg.max_total_queue_size = 2;
  cfg.max_queue_delay_us = 100000;
  cfg.default_queue_policy.default_timeout_us = 500;
  make(model(8), cfg);
  std::vector<int> published;
  enqueue(fp32("a", 1, 4, 0, 4));
  enqueue(fp32("b", 1, 4, 0, 4));
  EXPECT_EQ(batcher_->overloadLevel(), 1);  // only class 3 maps to level 4
  // A listener set while overloaded hears the current level at once.
  batcher_->setOverloadListener([&](int level) { published.push_back(level); });
  EXPECT_EQ(published, (std::vector<int>{1}));
  clock_.advanceUs(600);  // both expire (REJECT)
  EXPECT_EQ(batcher_->poll(), nullptr);
  EXPECT_EQ(published, (std::vector<int>{1, 0}));
  const uint64_t t1 = enqueue(fp32("c", 1, 4, 0, 3));
  enqueue(fp32("d", 1, 4, 0, 3));
  // Full again: the classes of the lowest level (4) first, whatever level filled the queues.
  EXPECT_EQ(published, (std::vector<int>{1, 0, 1}));
  enqueue(fp32("f", 1, 4, 0, 3));  // level 3 refused: shed the classes of levels 3..4
  EXPECT_EQ(published, (std::vector<int>{1, 0, 1, 2}));
  EXPECT_TRUE(batcher_->cancel(t1));
  EXPECT_EQ(published.back(), 0);
  enqueue(fp32("e", 1, 4, 0, 3));
  EXPECT_EQ(published.back(), 1);
  batcher_->shutdown();
  EXPECT_EQ(published, (std::vector<int>{1, 0, 1, 2, 0, 1, 0}));
  batcher_->setOverloadListener(nullptr);
}

TEST_F(BatcherTest, NoOverloadLevelWithoutATotalLimit) {
  BatchingConfig cfg;
  cfg.priority_levels = 2;
  cfg.max_queue_delay_us = 1000;
  cfg.default_queue_policy.max_queue_size = 1;
  make(model(8), cfg);
  int calls = 0;
  batcher_->setOverloadListener([&](int) { ++calls; });
  enqueue(fp32("a", 1, 4, 0, 2));
  enqueue(fp32("b", 1, 4, 0, 2));  // refused by the level's own limit
  EXPECT_EQ(statusOf("b").message(), "Exceeds maximum queue size");
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(batcher_->overloadLevel(), 0);
  batcher_->setOverloadListener(nullptr);
}

TEST_F(BatcherTest, OverloadShedsTheLowestLevelFirst) {
  BatchingConfig cfg;
  cfg.priority_levels = 2;
  cfg.max_total_queue_size = 2;
  cfg.max_queue_delay_us = 1000;
  make(model(8), cfg);
  enqueue(fp32("low1", 1, 4, 0, 2));
  enqueue(fp32("low2", 1, 4, 0, 2));
  EXPECT_EQ(sample("infergate_batcher_overloaded{model=\"m\"}"), 1);
  EXPECT_NE(enqueue(fp32("high1", 1, 4, 0, 1)), 0u);
  EXPECT_EQ(statusOf("low2").code(), absl::StatusCode::kUnavailable);  // newest low goes first
  EXPECT_NE(statusOf("low2").message().find("shed"), absl::string_view::npos);
  EXPECT_EQ(outcomes_["low1"].calls, 0);
  EXPECT_NE(enqueue(fp32("high2", 1, 4, 0, 1)), 0u);
  EXPECT_EQ(statusOf("low1").code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(enqueue(fp32("high3", 1, 4, 0, 1)), 0u);  // nothing lower left to shed
  EXPECT_EQ(statusOf("high3").message(), "Exceeds maximum queue size");
  EXPECT_EQ(enqueue(fp32("low3", 1, 4, 0, 2)), 0u);
  EXPECT_EQ(statusOf("low3").message(), "Exceeds maximum queue size");
  EXPECT_EQ(sample("infergate_batcher_shed_total{level=\"2\",model=\"m\"}"), 2);
  EXPECT_EQ(sample("infergate_batcher_rejections_total{level=\"1\",model=\"m\",reason=\"overload\"}"),
            1);
  clock_.advanceUs(1000);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"high1", "high2"}));
  completeEcho(std::move(b));
  EXPECT_EQ(sample("infergate_batcher_overloaded{model=\"m\"}"), 0);
}

TEST_F(BatcherTest, PoolExhaustionIsBackPressureUnderTheQueuePolicy) {
  BatchingConfig cfg;
  cfg.default_queue_policy.max_queue_size = 1;
  cfg.default_queue_policy.default_timeout_us = 500;
  make(model(8), cfg);
  enqueue(fp32("a", 1, 4, 0));
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(batcher_->inflight(), 1u);
  enqueue(fp32("b", 1, 4, 0));                 // waits: no in-flight slot
  EXPECT_EQ(batcher_->poll(), nullptr);
  EXPECT_EQ(enqueue(fp32("c", 1, 4, 0)), 0u);  // queue full while waiting
  EXPECT_EQ(statusOf("c").message(), "Exceeds maximum queue size");
  clock_.advanceUs(500);
  EXPECT_EQ(batcher_->poll(), nullptr);
  EXPECT_EQ(statusOf("b").message(), "Request timeout expired");  // expired while waiting
  enqueue(fp32("d", 1, 4, 0));
  completeEcho(std::move(b));
  b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"d"}));
  completeEcho(std::move(b));
  EXPECT_TRUE(answeredOk("a"));
  EXPECT_TRUE(answeredOk("d"));
}

TEST_F(BatcherTest, BytesTensorsAreSlicedByElementLengths) {
  ModelConfig m = model(4, {2}, DataType::kBytes);
  make(m, BatchingConfig{});
  std::unique_ptr<Batch> blocker;
  auto bytesReq = [](const std::string& id, std::vector<std::string> items) {
    InferRequest r;
    r.id = id;
    Tensor t{"IN", DataType::kBytes, {static_cast<int64_t>(items.size() / 2), 2}, {}};
    for (const std::string& s : items) {
      const uint32_t len = s.size();
      t.data.insert(t.data.end(), reinterpret_cast<const uint8_t*>(&len),
                    reinterpret_cast<const uint8_t*>(&len) + 4);
      t.data.insert(t.data.end(), s.begin(), s.end());
    }
    r.inputs.push_back(std::move(t));
    return r;
  };
  enqueue(bytesReq("x", {"a", "bc"}));
  blocker = batcher_->poll();
  enqueue(bytesReq("y", {"hello", "", "w", "xyz"}));
  enqueue(bytesReq("z", {"12", "3"}));
  completeEcho(std::move(blocker));
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 3);
  completeEcho(std::move(b));
  ASSERT_TRUE(answeredOk("y"));
  ASSERT_TRUE(answeredOk("z"));
  const Tensor& y = outcomes_["y"].result->value().outputs[0];
  EXPECT_EQ(y.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(y.data.size(), 4u * 4 + 9);
  const Tensor& z = outcomes_["z"].result->value().outputs[0];
  EXPECT_EQ(std::string(z.data.begin(), z.data.end()), std::string("\x02\0\0\0" "12" "\x01\0\0\0" "3", 11));
}

TEST_F(BatcherTest, ModelWithoutBatchDimensionRunsRequestsOneByOne) {
  make(model(0, {-1}), BatchingConfig{});
  enqueue(fp32("a", 1, 4, 0, 0, 0, false));
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  enqueue(fp32("b", 1, 4, 0, 0, 0, false));
  enqueue(fp32("c", 1, 4, 0, 0, 0, false));
  EXPECT_EQ(b->inputs[0].shape, (std::vector<int64_t>{4}));
  completeEcho(std::move(b));
  b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"b"}));
  completeEcho(std::move(b));
  ASSERT_TRUE(answeredOk("b"));
  EXPECT_EQ(outcomes_["b"].result->value().outputs[0].shape, (std::vector<int64_t>{4}));
}

TEST_F(BatcherTest, RequestLargerThanABufferIsServedFromTheHeap) {
  BatchingConfig cfg;
  cfg.variable_input_buffer_bytes = 64;
  make(model(8, {-1}), cfg);
  enqueue(fp32("big", 1, 32, 0));  // 128 bytes > 64-byte slab
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->slabs[0], nullptr);
  completeEcho(std::move(b));
  ASSERT_TRUE(answeredOk("big"));
  EXPECT_EQ(outcomes_["big"].result->value().outputs[0].data.size(), 128u);
  EXPECT_EQ(sample("infergate_batcher_unpinned_batches_total{model=\"m\"}"), 1);
  EXPECT_EQ(batcher_->pool(0)->available(), batcher_->pool(0)->slabCount());
}

TEST_F(BatcherTest, BackendErrorReachesEveryRequestOfTheBatch) {
  make(model(8), BatchingConfig{});
  enqueue(fp32("a", 1, 4, 0));
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  batcher_->complete(std::move(b), absl::InternalError("device lost"));
  EXPECT_EQ(statusOf("a").message(), "device lost");
  // A backend output with the wrong batch dimension is an INTERNAL error, not a crash.
  enqueue(fp32("b", 1, 4, 0));
  b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  std::vector<BatchTensor> out = b->inputs;
  out[0].shape[0] = 7;
  batcher_->complete(std::move(b), std::move(out));
  EXPECT_EQ(statusOf("b").code(), absl::StatusCode::kInternal);
  EXPECT_EQ(sample("infergate_batcher_backend_errors_total{model=\"m\"}"), 2);
}

TEST_F(BatcherTest, RejectsInconsistentConfigs) {
  BatchingConfig cfg;
  cfg.preferred_batch_sizes = {16};
  EXPECT_FALSE(Batcher::create(model(8), cfg, &clock_, nullptr, nullptr).ok());
  cfg = {};
  cfg.priority_levels = 2;
  cfg.default_priority_level = 3;
  EXPECT_FALSE(Batcher::create(model(8), cfg, &clock_, nullptr, nullptr).ok());
  cfg = {};
  cfg.overload_status = 500;
  EXPECT_FALSE(Batcher::create(model(8), cfg, &clock_, nullptr, nullptr).ok());
  cfg = {};
  cfg.priority_queue_policy[4] = {};
  EXPECT_FALSE(Batcher::create(model(8), cfg, &clock_, nullptr, nullptr).ok());
}

// --- one copy: decoders write into slots (Batcher::placeInputs) ------------------------------

// Places `r` (FP32, data in Tensor::data as a decoder's source) and writes its bytes into the
// slot the way a decoder does: one memcpy. False when the batcher placed nothing.
static bool placeAndWrite(Batcher& b, InferRequest& r) {
  std::vector<uint8_t> src = std::move(r.inputs[0].data);
  r.inputs[0].data.clear();
  r.inputs[0].slot_bytes = src.size();
  if (!b.placeInputs(r)) {
    r.inputs[0].data = std::move(src);
    r.inputs[0].slot_bytes = 0;
    return false;
  }
  std::memcpy(r.inputs[0].slot, src.data(), src.size());
  return true;
}

TEST_F(BatcherTest, PlacedRequestsAreDispatchedInPlaceWithExactlyOneCopy) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1000;
  make(model(8), cfg);
  std::vector<const uint8_t*> slots;
  for (int k = 0; k < 3; ++k) {
    InferRequest r = fp32(std::string(1, static_cast<char>('a' + k)), k == 1 ? 2 : 1, 4,
                          10.0f * static_cast<float>(k));
    ASSERT_TRUE(placeAndWrite(*batcher_, r));
    EXPECT_TRUE(r.inputs[0].data.empty());
    slots.push_back(r.inputs[0].slot);
    enqueue(std::move(r));
  }
  EXPECT_EQ(slots[1], slots[0] + 16);  // consecutive placements are contiguous
  EXPECT_EQ(slots[2], slots[1] + 32);
  EXPECT_EQ(batcher_->liveSlots(), 3u);
  clock_.advanceUs(1000);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->size, 4);
  EXPECT_EQ(b->inputs[0].data, slots[0]);  // the batch is read where the decoder wrote it
  EXPECT_EQ(b->inputs[0].bytes, 64u);
  completeEcho(std::move(b));
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(answeredOk(id)) << id;
  float f;
  std::memcpy(&f, outcomes_["c"].result->value().outputs[0].data.data(), 4);
  EXPECT_EQ(f, 20.0f);
  EXPECT_EQ(sample("infergate_batcher_request_bytes_total{model=\"m\"}"), 64);
  EXPECT_EQ(sample("infergate_batcher_slot_bytes_total{model=\"m\"}"), 64);
  EXPECT_EQ(sample("infergate_batcher_bytes_copied_total{model=\"m\"}"), 64);  // ratio 1
  EXPECT_EQ(sample("infergate_batcher_staged_bytes_total{model=\"m\"}"), 0);
  EXPECT_EQ(sample("infergate_batcher_compacted_bytes_total{model=\"m\"}"), 0);
  EXPECT_EQ(batcher_->liveSlots(), 0u);
  EXPECT_EQ(batcher_->pool(0)->available(), batcher_->pool(0)->slabCount() - 1);  // filling
}

TEST_F(BatcherTest, CancellingAPlacedRequestFreesItsSlotAndNeighboursAreCompacted) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1000;
  make(model(8), cfg);
  uint64_t ticket_b = 0;
  for (int k = 0; k < 3; ++k) {
    InferRequest r = fp32(std::string(1, static_cast<char>('a' + k)), 1, 4,
                          10.0f * static_cast<float>(k));
    ASSERT_TRUE(placeAndWrite(*batcher_, r));
    const uint64_t t = enqueue(std::move(r));
    if (k == 1) ticket_b = t;
  }
  EXPECT_EQ(batcher_->liveSlots(), 3u);
  EXPECT_TRUE(batcher_->cancel(ticket_b));
  EXPECT_EQ(statusOf("b").code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(batcher_->liveSlots(), 2u);  // b's slot is released at once
  clock_.advanceUs(1000);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(ids(*b), (std::vector<std::string>{"a", "c"}));
  completeEcho(std::move(b));
  ASSERT_TRUE(answeredOk("a"));
  ASSERT_TRUE(answeredOk("c"));
  float f;
  std::memcpy(&f, outcomes_["c"].result->value().outputs[0].data.data(), 4);
  EXPECT_EQ(f, 20.0f);  // c's own values, moved next to a's
  std::memcpy(&f, outcomes_["a"].result->value().outputs[0].data.data() + 12, 4);
  EXPECT_EQ(f, 3.0f);
  EXPECT_EQ(sample("infergate_batcher_compacted_bytes_total{model=\"m\"}"), 32);
  EXPECT_EQ(sample("infergate_batcher_cancellations_total{level=\"1\",model=\"m\"}"), 1);
  EXPECT_EQ(batcher_->liveSlots(), 0u);
}

TEST_F(BatcherTest, PlacementFallsBackWhenNoBufferIsFreeAndIsRefusedForForeignInputs) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1000;
  make(model(1), cfg);
  const size_t buffers = batcher_->pool(0)->slabCount();
  const size_t per_buffer = batcher_->pool(0)->slabBytes() / 16;  // slabs are 64-byte rounded
  std::vector<InferRequest> held;
  for (size_t k = 0; k < buffers * per_buffer; ++k) {
    InferRequest r = fp32("p" + std::to_string(k), 1, 4, 0);
    ASSERT_TRUE(placeAndWrite(*batcher_, r)) << k;
    held.push_back(std::move(r));
  }
  InferRequest extra = fp32("x", 1, 4, 5.0f);
  EXPECT_FALSE(placeAndWrite(*batcher_, extra));  // no buffer: the decoder fills Tensor::data
  EXPECT_EQ(extra.slots, nullptr);
  EXPECT_EQ(extra.inputs[0].data.size(), 16u);
  held.clear();  // dropped (e.g. invalid after decoding): the slots go back
  EXPECT_EQ(batcher_->liveSlots(), 0u);
  EXPECT_GE(batcher_->pool(0)->available(), buffers - 1);
  InferRequest wrong = fp32("w", 1, 4, 0);
  wrong.inputs[0].name = "NOPE";
  wrong.inputs[0].slot_bytes = 16;
  EXPECT_FALSE(batcher_->placeInputs(wrong));
  enqueue(std::move(extra));  // a heap request is still served (staged at dispatch)
  clock_.advanceUs(1000);
  std::unique_ptr<Batch> b = batcher_->poll();
  ASSERT_NE(b, nullptr);
  completeEcho(std::move(b));
  EXPECT_TRUE(answeredOk("x"));
  EXPECT_EQ(sample("infergate_batcher_staged_bytes_total{model=\"m\"}"), 16);
  EXPECT_EQ(sample("infergate_batcher_bytes_copied_total{model=\"m\"}"), 32);
}

// Issue 16, refuse before copying: admission() gives the refusal enqueue() would give, for the
// level of the priority asked, counts it, and never sheds or reserves anything.
TEST_F(BatcherTest, AdmissionRefusesWhatEnqueueWouldRefuseWithoutShedding) {
  BatchingConfig cfg;
  cfg.priority_levels = 2;
  cfg.max_total_queue_size = 2;
  cfg.max_queue_delay_us = 1000;
  cfg.priority_queue_policy[1].max_queue_size = 1;  // level 1 holds one request
  make(model(8), cfg);
  EXPECT_TRUE(batcher_->admission(1).ok());
  enqueue(fp32("high1", 1, 4, 0, 1));
  const absl::Status full = batcher_->admission(1);  // level 1 at its max_queue_size
  EXPECT_EQ(full.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(full.message(), "Exceeds maximum queue size");
  EXPECT_TRUE(batcher_->admission(2).ok());
  enqueue(fp32("low1", 1, 4, 0, 2));  // the model is at max_total_queue_size now
  EXPECT_FALSE(batcher_->admission(2).ok());  // nothing lower than level 2 to shed
  EXPECT_EQ(batcher_->queued(), 2u);
  EXPECT_EQ(outcomes_["low1"].calls, 0);  // admission never sheds
  EXPECT_EQ(sample("infergate_batcher_refused_before_copy_total{model=\"m\"}"), 2);
  EXPECT_EQ(sample("infergate_batcher_rejections_total{level=\"1\",model=\"m\",reason=\"queue_full\"}"),
            1);
  EXPECT_EQ(sample("infergate_batcher_rejections_total{level=\"2\",model=\"m\",reason=\"overload\"}"),
            1);
  batcher_->shutdown();
  EXPECT_EQ(batcher_->admission(0).code(), absl::StatusCode::kUnavailable);
}

// Issue 16, honest counters: copies a session made before the decoder (received_copy_bytes)
// are added to bytes_copied, so the ratio tells the whole userspace count.
TEST_F(BatcherTest, CopiesBeforeTheDecoderAreCounted) {
  BatchingConfig cfg;
  cfg.max_queue_delay_us = 1000;
  make(model(8), cfg);
  InferRequest r = fp32("a", 1, 4, 0);
  ASSERT_TRUE(placeAndWrite(*batcher_, r));
  r.received_copy_bytes = 16;  // e.g. the body was assembled once before the decoder
  enqueue(std::move(r));
  EXPECT_EQ(sample("infergate_batcher_request_bytes_total{model=\"m\"}"), 16);
  EXPECT_EQ(sample("infergate_batcher_received_copy_bytes_total{model=\"m\"}"), 16);
  EXPECT_EQ(sample("infergate_batcher_bytes_copied_total{model=\"m\"}"), 32);  // two copies
}

TEST(BatchedModelTest, CancelTokenCancelsAQueuedRequest) {
  ModelConfig m;
  m.name = "slow";
  m.max_batch_size = 4;
  m.inputs = {{"IN", DataType::kFp32, {2}}};
  m.outputs = {{"OUT", DataType::kFp32, {2}}};
  m.cost_fixed_us = 100000;
  BatchingConfig cfg;
  common::MetricsRegistry registry;
  auto model = BatchedModel::create(m, cfg, std::make_unique<IdentityBatchBackend>(m), &registry,
                                    nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  auto request = [&](const std::string& id) {
    InferRequest r;
    r.model_name = "slow";
    r.id = id;
    r.inputs.push_back({"IN", DataType::kFp32, {1, 2}, {}});
    r.inputs[0].slot_bytes = 8;
    EXPECT_TRUE((*model)->placeInputs(r));
    std::memset(r.inputs[0].slot, 0, 8);
    return r;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, absl::StatusCode> codes;
  auto done = [&](const std::string& id) {
    return [&, id](absl::StatusOr<InferResponse> res) {
      std::lock_guard<std::mutex> lock(mu);
      codes[id] = res.status().code();
      cv.notify_all();
    };
  };
  (*model)->infer(request("running"), done("running"));  // occupies the backend for 100 ms
  for (int i = 0; i < 200 && (*model)->batcher().inflight() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_EQ((*model)->batcher().inflight(), 1u);
  InferRequest gone = request("gone");
  gone.cancel = std::make_shared<net::CancelToken>();
  auto token = gone.cancel;
  (*model)->infer(std::move(gone), done("gone"));
  (*model)->infer(request("stays"), done("stays"));
  EXPECT_EQ((*model)->batcher().liveSlots(), 3u);
  token->cancel();  // the client went away before its batch was dispatched
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return codes.count("gone"); }));
    EXPECT_EQ(codes["gone"], absl::StatusCode::kCancelled);
    EXPECT_EQ(codes.count("stays"), 0u);  // still queued behind "running"
  }
  EXPECT_EQ((*model)->batcher().liveSlots(), 2u);
  {
    std::unique_lock<std::mutex> lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return codes.size() == 3; }));
  }
  EXPECT_EQ(codes["running"], absl::StatusCode::kOk);
  EXPECT_EQ(codes["stays"], absl::StatusCode::kOk);
}

// The real thing: dispatcher thread, identity backend with a cost, many producer threads.
TEST(BatchedModelTest, ConcurrentClientsAreBatchedAndEachAnsweredOnce) {
  ModelConfig m;
  m.name = "id";
  m.max_batch_size = 8;
  m.inputs = {{"IN", DataType::kFp32, {4}}};
  m.outputs = {{"OUT", DataType::kFp32, {4}}};
  m.cost_fixed_us = 2000;
  m.cost_per_item_us = 100;
  BatchingConfig cfg;
  common::MetricsRegistry registry;
  absl::StatusOr<std::unique_ptr<Model>> model = createModel(m, &cfg, &registry, nullptr);
  ASSERT_TRUE(model.ok()) << model.status();
  constexpr int kThreads = 8, kPerThread = 10;
  std::atomic<int> ok{0}, calls{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        std::atomic<bool> done{false};
        InferRequest r;
        r.id = std::to_string(t * 100 + i);
        Tensor in{"IN", DataType::kFp32, {1, 4}, std::vector<uint8_t>(16, static_cast<uint8_t>(t))};
        r.inputs.push_back(in);
        (*model)->infer(std::move(r), [&, t](absl::StatusOr<InferResponse> res) {
          calls.fetch_add(1);
          if (res.ok() && res->outputs.size() == 1 &&
              res->outputs[0].data == std::vector<uint8_t>(16, static_cast<uint8_t>(t))) {
            ok.fetch_add(1);
          }
          done.store(true);
        });
        while (!done.load()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(calls.load(), kThreads * kPerThread);
  EXPECT_EQ(ok.load(), kThreads * kPerThread);
  const std::string text = registry.renderPrometheus();
  const std::string key = "infergate_batcher_batches_total{model=\"id\"} ";
  const size_t p = text.find(key);
  ASSERT_NE(p, std::string::npos);
  const int batches = std::stoi(text.substr(p + key.size()));
  EXPECT_LT(batches, kThreads * kPerThread / 2) << "8 closed-loop clients should share batches";
}

TEST(BatchedModelTest, ShutdownAnswersQueuedRequests) {
  ModelConfig m;
  m.name = "id";
  m.max_batch_size = 1;
  m.inputs = {{"IN", DataType::kFp32, {1}}};
  m.outputs = {{"OUT", DataType::kFp32, {1}}};
  m.cost_fixed_us = 20000;
  BatchingConfig cfg;
  std::atomic<int> ok{0}, unavailable{0};
  {
    absl::StatusOr<std::unique_ptr<Model>> model = createModel(m, &cfg, nullptr, nullptr);
    ASSERT_TRUE(model.ok());
    for (int i = 0; i < 5; ++i) {
      InferRequest r;
      r.inputs.push_back(Tensor{"IN", DataType::kFp32, {1, 1}, std::vector<uint8_t>(4, 0)});
      (*model)->infer(std::move(r), [&](absl::StatusOr<InferResponse> res) {
        if (res.ok()) ok.fetch_add(1);
        else if (res.status().code() == absl::StatusCode::kUnavailable) unavailable.fetch_add(1);
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(ok.load() + unavailable.load(), 5);
  EXPECT_GE(ok.load(), 1);
  EXPECT_GE(unavailable.load(), 1);
}

// GPU health (docs/GPU.md "Closing the loop"): the external level is published as the higher
// of it and the queues' level, refuses the levels only shed classes map to (before copying and
// at enqueue, counted), and falls back when cleared.
TEST_F(BatcherTest, ExternalOverloadIsPublishedAndShedsTheLowestLevels) {
  BatchingConfig cfg;
  cfg.priority_levels = 4;
  cfg.max_queue_delay_us = 1000000;
  make(model(8), cfg);
  std::vector<int> published;
  batcher_->setOverloadListener([&](int level) { published.push_back(level); });
  batcher_->setExternalOverload(1);
  EXPECT_EQ(published, (std::vector<int>{1}));
  EXPECT_EQ(batcher_->publishedLevel(), 1);
  EXPECT_EQ(batcher_->overloadLevel(), 0);  // the queues' own level
  EXPECT_EQ(sample("infergate_batcher_external_overload_level{model=\"m\"}"), 1);
  // Level 4 (class 3 only) is refused; level 3 (class 2) is not.
  EXPECT_EQ(batcher_->admission(4).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(batcher_->admission(3).ok());
  EXPECT_EQ(enqueue(fp32("bg", 1, 4, 0, 4)), 0u);
  EXPECT_EQ(statusOf("bg").code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(std::string(statusOf("bg").message()).find("GPU backend is unhealthy"), std::string::npos);
  EXPECT_NE(enqueue(fp32("low", 1, 4, 0, 3)), 0u);
  EXPECT_EQ(sample("infergate_batcher_rejections_total{level=\"4\",model=\"m\",reason=\"gpu_unhealthy\"}"), 2);
  EXPECT_EQ(sample("infergate_batcher_refused_before_copy_total{model=\"m\"}"), 1);
  // Level 2 sheds classes 2 and 3: level 3 goes too, level 2 (class 1) stays.
  batcher_->setExternalOverload(2);
  EXPECT_EQ(batcher_->admission(3).code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(batcher_->admission(2).ok());
  batcher_->setExternalOverload(2);  // unchanged: nothing published
  batcher_->setExternalOverload(0);
  EXPECT_EQ(published, (std::vector<int>{1, 2, 0}));
  EXPECT_TRUE(batcher_->admission(4).ok());
  EXPECT_NE(enqueue(fp32("bg2", 1, 4, 0, 4)), 0u);
}

}  // namespace
}  // namespace infergate::backends
