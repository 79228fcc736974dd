// Latency histograms as infergate-bench uses them (common::LogLinearHistogram): bounded
// relative error of reported quantiles, exact merging across threads (RunStats::merge), and
// the percentile spectrum.
#include "bench/load/report.h"
#include "bench/load/stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace infergate::bench {
namespace {

TEST(StatsTest, QuantilesAreWithinTheRelativeErrorBound) {
  std::mt19937_64 rng(3);
  std::lognormal_distribution<double> dist(12.0, 1.5);  // ns: around 160 µs, long tail
  std::vector<uint64_t> values;
  LogLinearHistogram h;
  for (int i = 0; i < 100000; ++i) {
    const uint64_t v = static_cast<uint64_t>(dist(rng)) + 1;
    values.push_back(v);
    h.record(v);
  }
  std::sort(values.begin(), values.end());
  for (double q : {0.5, 0.9, 0.99, 0.999, 0.9999}) {
    const uint64_t exact = values[static_cast<size_t>(std::ceil(q * values.size())) - 1];
    const uint64_t got = h.quantile(q);
    // Reported value is the bucket's upper bound: never below the true one, at most 1/8 above.
    EXPECT_GE(got, exact) << "q " << q;
    EXPECT_LE(static_cast<double>(got), static_cast<double>(exact) * (1.0 + 1.0 / 8)) << "q " << q;
  }
  EXPECT_EQ(h.max(), values.back());
  EXPECT_EQ(h.quantile(1.0), values.back());
}

TEST(StatsTest, MergingPerThreadStatsEqualsRecordingInOne) {
  RunStats a, b, all;
  std::mt19937_64 rng(9);
  for (int i = 0; i < 20000; ++i) {
    const uint64_t v = rng() % 50000000;
    const int prio = static_cast<int>(rng() % 3) - 1;
    const size_t interval = rng() % 7;
    RunStats& part = (i % 3 == 0) ? a : b;
    part.recordOk(prio, v, i % 2 ? interval : interval + 3);  // b's timeline is longer
    all.recordOk(prio, v, i % 2 ? interval : interval + 3);
    if (i % 100 == 0) {
      part.recordError(prio, "http_503");
      all.recordError(prio, "http_503");
    }
    part.recordCompletion(interval);
    all.recordCompletion(interval);
  }
  a.max_backlog = 7;
  b.max_backlog = 3;
  a.errors["timeout"] = 2;
  RunStats merged;
  merged.merge(a);
  merged.merge(b);
  EXPECT_EQ(merged.ok, all.ok);
  EXPECT_EQ(merged.latency.count(), all.latency.count());
  EXPECT_EQ(merged.latency.sum(), all.latency.sum());
  EXPECT_EQ(merged.latency.max(), all.latency.max());
  for (int k = 0; k < LogLinearHistogram::kBuckets; ++k) {
    ASSERT_EQ(merged.latency.bucketCount(k), all.latency.bucketCount(k)) << k;
  }
  for (double q : {0.5, 0.99, 0.999}) EXPECT_EQ(merged.latency.quantile(q), all.latency.quantile(q));
  ASSERT_EQ(merged.by_priority.size(), 3u);
  for (const auto& [p, l] : all.by_priority) {
    EXPECT_EQ(merged.by_priority[p].ok, l.ok);
    EXPECT_EQ(merged.by_priority[p].errors, l.errors);
    EXPECT_EQ(merged.by_priority[p].latency.quantile(0.99), l.latency.quantile(0.99));
  }
  EXPECT_EQ(merged.errors["http_503"], all.errors["http_503"]);
  EXPECT_EQ(merged.errors["timeout"], 2u);
  EXPECT_EQ(merged.errorCount(), all.errorCount() + 2);
  EXPECT_EQ(merged.max_backlog, 7u);
  ASSERT_EQ(merged.timeline.size(), all.timeline.size());
  for (size_t i = 0; i < all.timeline.size(); ++i) {
    EXPECT_EQ(merged.timeline[i].count(), all.timeline[i].count()) << i;
  }
  EXPECT_EQ(merged.timeline_completions, all.timeline_completions);
  EXPECT_EQ(merged.completed_in_window, all.completed_in_window);
}

TEST(StatsTest, PercentileSpectrumIsMonotonicAndEndsAtMax) {
  LogLinearHistogram h;
  for (uint64_t v = 1; v <= 100000; v += 7) h.record(v * 1000);
  const auto rows = percentileSpectrum(h);
  ASSERT_FALSE(rows.empty());
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_GT(rows[i].first, rows[i - 1].first);
    EXPECT_GT(rows[i].second, rows[i - 1].second);
  }
  EXPECT_DOUBLE_EQ(rows.back().first, 1.0);
  EXPECT_EQ(rows.back().second, h.max());
  EXPECT_TRUE(percentileSpectrum(LogLinearHistogram()).empty());
}

}  // namespace
}  // namespace infergate::bench
