// Issue 19: Retry-After hints on queue refusals and sheds (docs/ERRORS.md "Retry-After"): the
// expected time for the queue ahead to drain, from the configured cost until a batch has been
// measured, then from the measured service time.
#include "backends/retry_after.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "backends/batcher.h"
#include "common/clock.h"
#include "common/metrics.h"

namespace infergate::backends {
namespace {

TEST(RetryAfter, SecondsRoundUpAndClamp) {
  EXPECT_EQ(retryAfterFromNs(0), 1u);
  EXPECT_EQ(retryAfterFromNs(1), 1u);
  EXPECT_EQ(retryAfterFromNs(1'000'000'000), 1u);
  EXPECT_EQ(retryAfterFromNs(1'000'000'001), 2u);
  EXPECT_EQ(retryAfterFromNs(4'900'000'000), 5u);
  EXPECT_EQ(retryAfterFromNs(60'000'000'000), 60u);
  EXPECT_EQ(retryAfterFromNs(61'000'000'000), 60u);
  EXPECT_EQ(retryAfterFromNs(UINT64_MAX), 60u);
}

TEST(RetryAfter, DrainTimeCountsBatchesAndStreams) {
  // 4 ahead, batches of 2: the newcomer is in the 3rd batch.
  EXPECT_EQ(drainTimeNs(4, 2, 1, 1000), 3000u);
  EXPECT_EQ(drainTimeNs(3, 2, 1, 1000), 2000u);
  EXPECT_EQ(drainTimeNs(0, 8, 1, 1000), 1000u);
  // Two streams halve the rounds (rounded up).
  EXPECT_EQ(drainTimeNs(4, 2, 2, 1000), 2000u);
  EXPECT_EQ(drainTimeNs(5, 1, 2, 1000), 3000u);
  // 0 batch size / streams count as 1; saturates.
  EXPECT_EQ(drainTimeNs(2, 0, 0, 10), 30u);
  EXPECT_EQ(drainTimeNs(UINT64_MAX - 1, 1, 1, 1'000'000'000), UINT64_MAX);
}

TEST(RetryAfter, PayloadRoundTrip) {
  EXPECT_EQ(retryAfterOf(absl::UnavailableError("x")), std::nullopt);
  EXPECT_EQ(retryAfterOf(withRetryAfter(absl::UnavailableError("x"), 7)), 7u);
  EXPECT_EQ(retryAfterOf(withRetryAfter(absl::ResourceExhaustedError("x"), 0)), 1u);
  EXPECT_EQ(retryAfterOf(withRetryAfter(absl::ResourceExhaustedError("x"), 600)), 60u);
  EXPECT_TRUE(withRetryAfter(absl::OkStatus(), 5).ok());
  EXPECT_EQ(retryAfterOf(withRetryAfter(absl::OkStatus(), 5)), std::nullopt);
  // Code and message are untouched.
  const absl::Status st = withRetryAfter(absl::UnavailableError("queue full"), 3);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(st.message(), "queue full");
  // A malformed payload is no hint.
  absl::Status bad = absl::UnavailableError("x");
  bad.SetPayload(kRetryAfterPayload, absl::Cord("abc"));
  EXPECT_EQ(retryAfterOf(bad), std::nullopt);
  bad.SetPayload(kRetryAfterPayload, absl::Cord("0"));
  EXPECT_EQ(retryAfterOf(bad), std::nullopt);
}

class BatcherRetryAfterTest : public ::testing::Test {
 protected:
  static ModelConfig model(int max_batch, uint64_t cost_fixed_us) {
    ModelConfig c;
    c.name = "m";
    c.max_batch_size = max_batch;
    c.cost_fixed_us = cost_fixed_us;
    c.inputs = {{"IN", DataType::kFp32, {1}}};
    c.outputs = {{"OUT", DataType::kFp32, {1}}};
    return c;
  }
  void make(ModelConfig m, BatchingConfig cfg) {
    auto b = Batcher::create(std::move(m), std::move(cfg), &clock_, &metrics_, nullptr);
    ASSERT_TRUE(b.ok()) << b.status();
    batcher_ = std::move(*b);
  }
  static InferRequest req(const std::string& id, int64_t priority = 0) {
    InferRequest r;
    r.model_name = "m";
    r.id = id;
    r.priority = priority;
    r.inputs.push_back(Tensor{"IN", DataType::kFp32, {1, 1}, std::vector<uint8_t>(4)});
    return r;
  }
  uint64_t enqueue(const std::string& id, int64_t priority = 0) {
    return batcher_->enqueue(req(id, priority), [this, id](absl::StatusOr<InferResponse> r) {
      results_.insert_or_assign(id, r.status());
    });
  }
  // Dispatches the next batch and completes it `took_ns` later.
  void runBatch(uint64_t took_ns) {
    std::unique_ptr<Batch> b = batcher_->poll();
    ASSERT_NE(b, nullptr);
    clock_.advanceNs(took_ns);
    std::vector<BatchTensor> out = b->inputs;
    for (BatchTensor& t : out) t.name = "OUT";
    batcher_->complete(std::move(b), std::move(out));
  }
  // The hint of the refusal of one more request (which must be refused).
  std::optional<uint32_t> refusedHint(const std::string& id, int64_t priority = 0) {
    EXPECT_EQ(enqueue(id, priority), 0u) << id;
    auto it = results_.find(id);
    if (it == results_.end() || it->second.ok()) return std::nullopt;
    return retryAfterOf(it->second);
  }

  common::ManualClock clock_;
  common::MetricsRegistry metrics_;
  std::map<std::string, absl::Status> results_;
  std::unique_ptr<Batcher> batcher_;
};

TEST_F(BatcherRetryAfterTest, FromConfiguredCostThenMeasured) {
  BatchingConfig cfg;
  cfg.default_queue_policy.max_queue_size = 4;
  make(model(/*max_batch=*/2, /*cost_fixed_us=*/2'000'000), cfg);
  for (int i = 0; i < 4; ++i) ASSERT_NE(enqueue("q" + std::to_string(i)), 0u);
  // 4 ahead in batches of 2: the 3rd batch, 3 x 2 s.
  EXPECT_EQ(refusedHint("r1"), 6u);
  EXPECT_EQ(results_["r1"].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(batcher_->retryAfterSeconds(0), 6u);
  // Refused before copying: the same hint.
  const absl::Status adm = batcher_->admission(0);
  EXPECT_EQ(adm.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(retryAfterOf(adm), 6u);

  // The first batch takes 0.5 s: the measurement replaces the configured 2 s.
  runBatch(500'000'000);
  for (int i = 4; i < 6; ++i) ASSERT_NE(enqueue("q" + std::to_string(i)), 0u);
  EXPECT_EQ(refusedHint("r2"), 2u);  // 3 x 0.5 s = 1.5 s, rounded up
  // The next one takes 1.5 s: 0.5 x 3/4 + 1.5 / 4 = 0.75 s per batch.
  runBatch(1'500'000'000);
  for (int i = 6; i < 8; ++i) ASSERT_NE(enqueue("q" + std::to_string(i)), 0u);
  EXPECT_EQ(refusedHint("r3"), 3u);  // 3 x 0.75 s = 2.25 s
}

TEST_F(BatcherRetryAfterTest, CountsOnlyTheLevelsAheadAndStreams) {
  BatchingConfig cfg;
  cfg.priority_levels = 2;
  cfg.default_queue_policy.max_queue_size = 2;
  cfg.max_inflight_batches = 2;
  make(model(/*max_batch=*/1, /*cost_fixed_us=*/1'000'000), cfg);
  ASSERT_NE(enqueue("low0", 2), 0u);
  ASSERT_NE(enqueue("low1", 2), 0u);
  ASSERT_NE(enqueue("high0", 1), 0u);
  ASSERT_NE(enqueue("high1", 1), 0u);
  // Level 1 is behind its own 2 only: 3 batches of 1, 2 at a time: 2 rounds of 1 s.
  EXPECT_EQ(refusedHint("high2", 1), 2u);
  // Level 2 is behind all 4: 5 batches, 3 rounds.
  EXPECT_EQ(refusedHint("low2", 2), 3u);
}

TEST_F(BatcherRetryAfterTest, ShedRequestCarriesItsLevelsHint) {
  BatchingConfig cfg;
  cfg.priority_levels = 2;
  cfg.max_total_queue_size = 2;
  cfg.overload_status = 429;
  make(model(/*max_batch=*/1, /*cost_fixed_us=*/3'000'000), cfg);
  ASSERT_NE(enqueue("low0", 2), 0u);
  ASSERT_NE(enqueue("low1", 2), 0u);
  ASSERT_NE(enqueue("high0", 1), 0u);  // sheds low1 (the newest of the lower level)
  ASSERT_TRUE(results_.count("low1"));
  EXPECT_EQ(results_["low1"].code(), absl::StatusCode::kResourceExhausted);
  // After the shed: low0 and high0 queued; low1 would wait for both, 3 x 3 s.
  EXPECT_EQ(retryAfterOf(results_["low1"]), 9u);
}

TEST_F(BatcherRetryAfterTest, NoCostNoMeasurementIsTheMinimumAndTimeoutsCarryNone) {
  BatchingConfig cfg;
  cfg.default_queue_policy.max_queue_size = 1;
  cfg.default_queue_policy.default_timeout_us = 1000;
  make(model(/*max_batch=*/1, /*cost_fixed_us=*/0), cfg);
  ASSERT_NE(enqueue("q0"), 0u);
  EXPECT_EQ(refusedHint("r"), 1u);
  clock_.advanceNs(2'000'000);
  EXPECT_EQ(batcher_->poll(), nullptr);  // q0 expired
  ASSERT_TRUE(results_.count("q0"));
  EXPECT_EQ(results_["q0"].code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(retryAfterOf(results_["q0"]), std::nullopt);  // a timeout is not an invitation
}

}  // namespace
}  // namespace infergate::backends
