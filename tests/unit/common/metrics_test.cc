#include "common/metrics.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace infergate::common {
namespace {

using H = LogLinearHistogram;
constexpr uint64_t kMaxU64 = std::numeric_limits<uint64_t>::max();

// ---------------------------------------------------------------------------------------------
// Bucket math

TEST(LogLinearBuckets, SmallValuesAreExact) {
  for (uint64_t v = 0; v < static_cast<uint64_t>(H::kSubBuckets); ++v) {
    const int b = H::bucketOf(v);
    EXPECT_EQ(b, static_cast<int>(v));
    EXPECT_EQ(H::bucketLow(b), v);
    EXPECT_EQ(H::bucketHigh(b), v);
  }
  // The first octave above kSubBuckets still has width 1.
  for (uint64_t v = H::kSubBuckets; v < 2u * H::kSubBuckets; ++v) {
    EXPECT_EQ(H::bucketLow(H::bucketOf(v)), v);
    EXPECT_EQ(H::bucketHigh(H::bucketOf(v)), v);
  }
}

TEST(LogLinearBuckets, EveryBucketIsContiguousAndRoundTrips) {
  EXPECT_EQ(H::bucketLow(0), 0u);
  EXPECT_EQ(H::bucketHigh(H::kBuckets - 1), kMaxU64);
  EXPECT_EQ(H::bucketOf(kMaxU64), H::kBuckets - 1);
  for (int b = 0; b < H::kBuckets; ++b) {
    SCOPED_TRACE(b);
    const uint64_t lo = H::bucketLow(b), hi = H::bucketHigh(b);
    ASSERT_LE(lo, hi);
    EXPECT_EQ(H::bucketOf(lo), b);
    EXPECT_EQ(H::bucketOf(hi), b);
    if (b > 0) {
      EXPECT_EQ(H::bucketHigh(b - 1) + 1, lo) << "gap or overlap before bucket";
    }
    // Relative width bound: (hi - lo + 1) / lo <= 1 / kSubBuckets (widths are powers of two).
    if (b >= H::kSubBuckets) {
      const uint64_t width = hi - lo + 1;
      EXPECT_LE(width, lo / H::kSubBuckets);
    }
  }
}

TEST(LogLinearBuckets, PowerOfTwoBoundariesAreMonotonicAndContained) {
  std::vector<uint64_t> values;
  for (int k = 0; k < 64; ++k) {
    const uint64_t p = uint64_t{1} << k;
    values.push_back(p - 1);
    values.push_back(p);
    values.push_back(p + 1);
  }
  values.push_back(kMaxU64 - 1);
  values.push_back(kMaxU64);
  std::sort(values.begin(), values.end());
  int prev = -1;
  for (uint64_t v : values) {
    SCOPED_TRACE(v);
    const int b = H::bucketOf(v);
    ASSERT_GE(b, 0);
    ASSERT_LT(b, H::kBuckets);
    EXPECT_LE(H::bucketLow(b), v);
    EXPECT_GE(H::bucketHigh(b), v);
    EXPECT_GE(b, prev);
    prev = b;
  }
  // Each power of two >= kSubBuckets starts a new bucket (and a new octave).
  for (int k = H::kSubBucketBits; k < 64; ++k) {
    const uint64_t p = uint64_t{1} << k;
    EXPECT_EQ(H::bucketLow(H::bucketOf(p)), p) << k;
    EXPECT_EQ(H::bucketHigh(H::bucketOf(p - 1)), p - 1) << k;
  }
}

TEST(LogLinearBuckets, RandomValuesAreMonotonicAndContained) {
  std::mt19937_64 rng(12345);
  std::vector<uint64_t> values;
  for (int i = 0; i < 200000; ++i) {
    const int bits = static_cast<int>(rng() % 65);  // spread over all magnitudes
    const uint64_t v = bits == 0 ? 0 : (rng() >> (64 - bits));
    values.push_back(v);
  }
  std::sort(values.begin(), values.end());
  int prev = -1;
  for (uint64_t v : values) {
    const int b = H::bucketOf(v);
    ASSERT_LE(H::bucketLow(b), v);
    ASSERT_GE(H::bucketHigh(b), v);
    ASSERT_GE(b, prev) << v;
    prev = b;
  }
}

// ---------------------------------------------------------------------------------------------
// LogLinearHistogram

TEST(LogLinearHistogram, CountSumMaxAndClear) {
  H h;
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.quantile(0.5), 0u);
  h.record(3);
  h.record(1000, 4);
  h.record(7, 0);  // zero count records nothing
  EXPECT_EQ(h.count(), 5u);
  EXPECT_EQ(h.sum(), 4003u);
  EXPECT_EQ(h.max(), 1000u);
  EXPECT_EQ(h.bucketCount(H::bucketOf(1000)), 4u);
  EXPECT_EQ(h.bucketCount(3), 1u);
  EXPECT_EQ(h.bucketCount(7), 0u);
  h.clear();
  EXPECT_EQ(h.count(), 0u);
  EXPECT_EQ(h.sum(), 0u);
  EXPECT_EQ(h.max(), 0u);
  EXPECT_EQ(h.bucketCount(3), 0u);
}

TEST(LogLinearHistogram, QuantilesOfSmallExactValues) {
  H h;
  for (uint64_t v = 0; v < 8; ++v) h.record(v);  // ranks 1..8 hold 0..7
  EXPECT_EQ(h.quantile(0.0), 0u);                 // rank clamps to 1
  EXPECT_EQ(h.quantile(0.125), 0u);               // rank 1
  EXPECT_EQ(h.quantile(0.5), 3u);                 // rank 4
  EXPECT_EQ(h.quantile(0.51), 4u);                // rank ceil(4.08) = 5
  EXPECT_EQ(h.quantile(1.0), 7u);
  EXPECT_EQ(h.quantile(7.0), 7u);  // out-of-range q clamps
}

TEST(LogLinearHistogram, QuantilesOfUniformDistribution) {
  H h;
  for (uint64_t v = 1; v <= 10000; ++v) h.record(v);
  EXPECT_EQ(h.count(), 10000u);
  EXPECT_EQ(h.sum(), 10000u * 10001u / 2);
  EXPECT_EQ(h.max(), 10000u);
  for (double q : {0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999}) {
    SCOPED_TRACE(q);
    const double exact = std::ceil(q * 10000);
    const double got = static_cast<double>(h.quantile(q));
    EXPECT_GE(got, exact);  // upper bound of the bucket holding the rank
    EXPECT_LE((got - exact) / exact, 1.0 / H::kSubBuckets);
  }
  EXPECT_EQ(h.quantile(0.5), H::bucketHigh(H::bucketOf(5000)));
  EXPECT_EQ(h.quantile(0.0), 1u);
  EXPECT_EQ(h.quantile(1.0), 10000u);  // bucket of 10000 ends above it; clamped to max()
}

TEST(LogLinearHistogram, Merge) {
  H a, b;
  for (uint64_t v = 1; v <= 100; ++v) a.record(v);
  for (uint64_t v = 1000; v <= 2000; ++v) b.record(v);
  H m = a;
  m.merge(b);
  EXPECT_EQ(m.count(), 100u + 1001u);
  EXPECT_EQ(m.sum(), a.sum() + b.sum());
  EXPECT_EQ(m.max(), 2000u);
  for (int i = 0; i < H::kBuckets; ++i) {
    ASSERT_EQ(m.bucketCount(i), a.bucketCount(i) + b.bucketCount(i)) << i;
  }
  EXPECT_EQ(m.quantile(0.05), a.quantile(0.55));  // rank 56 is value 56 in either
  EXPECT_EQ(m.quantile(1.0), 2000u);
  // Merging into an empty histogram copies.
  H e;
  e.merge(b);
  EXPECT_EQ(e.count(), b.count());
  EXPECT_EQ(e.max(), b.max());
  EXPECT_EQ(e.quantile(0.5), b.quantile(0.5));
}

// ---------------------------------------------------------------------------------------------
// Concurrent metrics

TEST(ThreadShard, StablePerThreadAndRoundRobin) {
  const int mine = threadShard();
  EXPECT_EQ(threadShard(), mine);
  EXPECT_GE(mine, 0);
  EXPECT_LT(mine, kMetricShards);
  // Threads started one after another take consecutive tickets: kMetricShards of them cover
  // every shard.
  std::set<int> seen;
  for (int i = 0; i < kMetricShards; ++i) {
    int s = -1;
    std::thread([&] { s = threadShard(); }).join();
    seen.insert(s);
  }
  EXPECT_EQ(static_cast<int>(seen.size()), kMetricShards);
}

TEST(ConcurrentMetrics, FourThreadsSumExactly) {
  Counter c;
  Histogram h(latencyBucketsSeconds(), 1e6);
  constexpr int kThreads = 4;
  constexpr uint64_t kPerThread = 200000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; i < kPerThread; ++i) {
        c.inc();
        h.record(i * kThreads + t);  // every value 0 .. kThreads*kPerThread-1 exactly once
      }
      c.inc(10);
    });
  }
  for (auto& th : threads) th.join();
  const uint64_t n = kThreads * kPerThread;
  EXPECT_EQ(c.value(), n + 10 * kThreads);
  const H s = h.snapshot();
  EXPECT_EQ(s.count(), n);
  EXPECT_EQ(s.sum(), n * (n - 1) / 2);
  EXPECT_EQ(s.max(), n - 1);
  // Same buckets as recording single-threaded.
  H ref;
  for (uint64_t v = 0; v < n; ++v) ref.record(v);
  for (int b = 0; b < H::kBuckets; ++b) ASSERT_EQ(s.bucketCount(b), ref.bucketCount(b)) << b;
}

TEST(ConcurrentMetrics, TwoThreadsOnOneShardSumExactly) {
  // Shards are per thread, so contention only happens when two threads share a shard. Start
  // thread A, then spawn candidates until one lands on A's shard, and race the two.
  Counter c;
  Histogram h({1}, 1);
  constexpr uint64_t kPerThread = 2000000;
  std::atomic<bool> go{false};
  auto work = [&](uint64_t parity) {
    while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
    for (uint64_t i = 0; i < kPerThread; ++i) {
      c.inc();
      h.record(2 * i + parity);
    }
  };
  std::atomic<int> target{-1};
  std::thread a([&] {
    target.store(threadShard());
    work(0);
  });
  while (target.load() < 0) std::this_thread::yield();
  std::thread b;
  for (int tries = 0; tries < 10 * kMetricShards && !b.joinable(); ++tries) {
    std::atomic<int> decided{0};
    std::thread cand([&] {
      if (threadShard() != target.load()) {
        decided.store(1);
        return;
      }
      decided.store(2);
      work(1);
    });
    while (decided.load() == 0) std::this_thread::yield();
    if (decided.load() == 2) {
      b = std::move(cand);
    } else {
      cand.join();
    }
  }
  go.store(true, std::memory_order_release);
  a.join();
  ASSERT_TRUE(b.joinable()) << "no thread landed on the first thread's shard";
  b.join();
  const uint64_t n = 2 * kPerThread;  // values 0 .. n-1, each once
  EXPECT_EQ(c.value(), n);
  const H s = h.snapshot();
  EXPECT_EQ(s.count(), n);
  EXPECT_EQ(s.sum(), n * (n - 1) / 2);
  EXPECT_EQ(s.max(), n - 1);
}

TEST(Gauge, AddSubSet) {
  Gauge g;
  g.add(5);
  g.sub(7);
  EXPECT_EQ(g.value(), -2);
  g.set(42);
  EXPECT_EQ(g.value(), 42);
}

TEST(Histogram, BoundsAreNormalised) {
  Histogram h({0.5, 0.1, std::numeric_limits<double>::infinity(), 0.1, 1}, 1000);
  EXPECT_EQ(h.upperBounds(), (std::vector<double>{0.1, 0.5, 1}));
  EXPECT_EQ(h.scale(), 1000);
}

TEST(LatencyBuckets, OneTwoFiveFrom10usTo10s) {
  const auto b = latencyBucketsSeconds();
  ASSERT_EQ(b.size(), 19u);
  EXPECT_EQ(b.front(), 10e-6);
  EXPECT_EQ(b.back(), 10.0);
  for (size_t i = 1; i < b.size(); ++i) {
    const double ratio = b[i] / b[i - 1];
    EXPECT_TRUE(std::abs(ratio - 2) < 1e-9 || std::abs(ratio - 2.5) < 1e-9) << i;
  }
}

// ---------------------------------------------------------------------------------------------
// Registry

TEST(MetricsRegistry, SameNameAndLabelsGiveSameObject) {
  MetricsRegistry r;
  Counter& a = r.counter("x_total", "X.", {{"k", "1"}});
  Counter& b = r.counter("x_total", "X.", {{"k", "1"}});
  Counter& c = r.counter("x_total", "X.", {{"k", "2"}});
  Counter& d = r.counter("x_total", "X.");
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
  EXPECT_NE(&a, &d);
  // Label order does not matter.
  Counter& e = r.counter("y_total", "Y.", {{"a", "1"}, {"b", "2"}});
  Counter& f = r.counter("y_total", "Y.", {{"b", "2"}, {"a", "1"}});
  EXPECT_EQ(&e, &f);
  Gauge& g1 = r.gauge("g", "G.");
  EXPECT_EQ(&g1, &r.gauge("g", "G."));
  Histogram& h1 = r.histogram("h", "H.", {}, {1, 2}, 1);
  EXPECT_EQ(&h1, &r.histogram("h", "H.", {}, {2, 1}, 1));  // same bounds after sorting
  EXPECT_NE(&h1, &r.histogram("h", "H.", {{"k", "v"}}, {1, 2}, 1));
  // References stay valid as the registry grows.
  a.inc(3);
  for (int i = 0; i < 1000; ++i) r.counter("x_total", "X.", {{"k", std::to_string(i + 10)}});
  EXPECT_EQ(r.counter("x_total", "X.", {{"k", "1"}}).value(), 3u);
  EXPECT_EQ(&MetricsRegistry::global(), &MetricsRegistry::global());
}

TEST(MetricsRegistryDeathTest, TypeMismatchAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  MetricsRegistry r;
  r.counter("x_total", "X.");
  EXPECT_DEATH(r.gauge("x_total", "X."), "'x_total' registered as counter and as gauge");
  EXPECT_DEATH(r.histogram("x_total", "X.", {}, {1}, 1), "as counter and as histogram");
}

TEST(MetricsRegistryDeathTest, HelpMismatchAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  MetricsRegistry r;
  r.counter("x_total", "X.");
  EXPECT_DEATH(r.counter("x_total", "Other."), "two help texts");
}

TEST(MetricsRegistryDeathTest, InvalidNamesAndBucketMismatchAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  MetricsRegistry r;
  EXPECT_DEATH(r.counter("bad-name", "X."), "invalid metric name");
  EXPECT_DEATH(r.counter("x_total", "X.", {{"1k", "v"}}), "invalid label name");
  EXPECT_DEATH(r.counter("x_total", "X.", {{"k", "a"}, {"k", "b"}}), "duplicate label");
  EXPECT_DEATH(r.histogram("h", "H.", {{"le", "1"}}, {1}, 1), "reserved");
  r.histogram("h", "H.", {}, {1, 2}, 1);
  EXPECT_DEATH(r.histogram("h", "H.", {}, {1, 3}, 1), "different buckets");
  EXPECT_DEATH(r.histogram("h", "H.", {}, {1, 2}, 10), "different buckets");
  EXPECT_DEATH(Histogram({1}, 0), "scale");
}

TEST(MetricsRegistry, ExactExposition) {
  MetricsRegistry r;
  r.counter("ig_requests_total", "Requests received.", {{"route", "/v1"}, {"code", "200"}})
      .inc(3);
  r.counter("ig_requests_total", "Requests received.", {{"code", "500"}, {"route", "/v1"}})
      .inc();
  r.counter("ig_errors_total", "Errors.");
  r.gauge("ig_inflight", "In-flight requests.").set(-2);
  Histogram& h = r.histogram("ig_latency_seconds", "Request latency.", {{"route", "/v1"}},
                             {0.00001, 0.0001, 0.001}, 1e6);
  h.record(5);    // exact bucket [5,5]
  h.record(10);   // exact bucket [10,10]
  h.record(50);   // bucket [48,51]
  h.record(700);  // bucket [640,703]
  const std::string expected =
      "# HELP ig_errors_total Errors.\n"
      "# TYPE ig_errors_total counter\n"
      "ig_errors_total 0\n"
      "# HELP ig_inflight In-flight requests.\n"
      "# TYPE ig_inflight gauge\n"
      "ig_inflight -2\n"
      "# HELP ig_latency_seconds Request latency.\n"
      "# TYPE ig_latency_seconds histogram\n"
      "ig_latency_seconds_bucket{route=\"/v1\",le=\"0.00001\"} 2\n"
      "ig_latency_seconds_bucket{route=\"/v1\",le=\"0.0001\"} 3\n"
      "ig_latency_seconds_bucket{route=\"/v1\",le=\"0.001\"} 4\n"
      "ig_latency_seconds_bucket{route=\"/v1\",le=\"+Inf\"} 4\n"
      "ig_latency_seconds_sum{route=\"/v1\"} 0.000765\n"
      "ig_latency_seconds_count{route=\"/v1\"} 4\n"
      "# HELP ig_requests_total Requests received.\n"
      "# TYPE ig_requests_total counter\n"
      "ig_requests_total{code=\"200\",route=\"/v1\"} 3\n"
      "ig_requests_total{code=\"500\",route=\"/v1\"} 1\n";
  EXPECT_EQ(r.renderPrometheus(), expected);
}

TEST(MetricsRegistry, EscapesLabelValuesAndHelp) {
  MetricsRegistry r;
  r.counter("esc_total", "Line one\nback\\slash \"quoted\"", {{"path", "a\\b\"c\nd"}}).inc(2);
  EXPECT_EQ(r.renderPrometheus(),
            "# HELP esc_total Line one\\nback\\\\slash \"quoted\"\n"
            "# TYPE esc_total counter\n"
            "esc_total{path=\"a\\\\b\\\"c\\nd\"} 2\n");
  // Distinct raw values that would collide without escaping stay distinct series.
  EXPECT_NE(&r.counter("esc_total", "Line one\nback\\slash \"quoted\"", {{"path", "a\",b=\""}}),
            &r.counter("esc_total", "Line one\nback\\slash \"quoted\"",
                       {{"path", "a"}, {"b", ""}}));
}

struct BucketLine {
  std::string le;
  uint64_t count;
};

// Parses `name_bucket{...le="X"} N` lines of one histogram series.
std::vector<BucketLine> parseBuckets(const std::string& text, const std::string& name) {
  std::vector<BucketLine> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + "_bucket{", 0) != 0) continue;
    const size_t le = line.find("le=\"");
    const size_t q = line.find('"', le + 4);
    const size_t sp = line.rfind(' ');
    out.push_back({line.substr(le + 4, q - le - 4), std::stoull(line.substr(sp + 1))});
  }
  return out;
}

TEST(MetricsRegistry, HistogramExpositionIsCumulativeAndConservative) {
  MetricsRegistry r;
  Histogram& h = r.histogram("lat_seconds", "Latency.", {}, latencyBucketsSeconds(), 1e6);
  std::mt19937_64 rng(7);
  std::vector<uint64_t> values;
  for (int i = 0; i < 50000; ++i) {
    // Log-uniform from 1 µs to ~30 s, so every bound and +Inf sees observations.
    const double us = std::exp(std::uniform_real_distribution<double>(0, std::log(3e7))(rng));
    values.push_back(static_cast<uint64_t>(us));
  }
  for (uint64_t v : values) h.record(v);
  const std::string text = r.renderPrometheus();
  const auto buckets = parseBuckets(text, "lat_seconds");
  const std::vector<std::string> expected_le = {
      "0.00001", "0.00002", "0.00005", "0.0001", "0.0002", "0.0005", "0.001",
      "0.002",   "0.005",   "0.01",    "0.02",   "0.05",   "0.1",    "0.2",
      "0.5",     "1",       "2",       "5",      "10",     "+Inf"};
  ASSERT_EQ(buckets.size(), expected_le.size());
  const auto bounds = latencyBucketsSeconds();
  uint64_t prev = 0;
  for (size_t i = 0; i < buckets.size(); ++i) {
    SCOPED_TRACE(expected_le[i]);
    EXPECT_EQ(buckets[i].le, expected_le[i]);
    EXPECT_GE(buckets[i].count, prev);
    prev = buckets[i].count;
    if (i + 1 == buckets.size()) break;
    const uint64_t limit = static_cast<uint64_t>(std::llround(bounds[i] * 1e6));
    uint64_t at_most = 0, attributed = 0;
    for (uint64_t v : values) {
      at_most += v <= limit;
      attributed += H::bucketHigh(H::bucketOf(v)) <= limit;
    }
    EXPECT_EQ(buckets[i].count, attributed);  // the documented attribution rule
    EXPECT_LE(buckets[i].count, at_most);     // never over-counts
  }
  EXPECT_EQ(buckets.back().count, values.size());
  EXPECT_NE(text.find("lat_seconds_count " + std::to_string(values.size()) + "\n"),
            std::string::npos);
  // A value inside a bucket that straddles a bound is counted under the next bound:
  // 20 µs lies in [20,21], so it is not <= 0.00002 s but is <= 0.00005 s.
  MetricsRegistry r2;
  r2.histogram("s_seconds", "S.", {}, {0.00002, 0.00005}, 1e6).record(20);
  const auto b2 = parseBuckets(r2.renderPrometheus(), "s_seconds");
  ASSERT_EQ(b2.size(), 3u);
  EXPECT_EQ(b2[0].count, 0u);
  EXPECT_EQ(b2[1].count, 1u);
  EXPECT_EQ(b2[2].count, 1u);
}

TEST(MetricsRegistry, HistogramExpositionExactOnBucketEdges) {
  // Bounds 2^k - 1 are bucket upper edges, so cumulative counts equal the true counts.
  MetricsRegistry r;
  const std::vector<double> bounds = {7, 15, 31, 63, 127, 1023, 65535};
  Histogram& h = r.histogram("edge", "Edges.", {}, bounds, 1);
  std::mt19937_64 rng(99);
  std::vector<uint64_t> values;
  for (int i = 0; i < 20000; ++i) values.push_back(rng() % 100000);
  uint64_t sum = 0;
  for (uint64_t v : values) {
    h.record(v);
    sum += v;
  }
  const std::string text = r.renderPrometheus();
  const auto buckets = parseBuckets(text, "edge");
  ASSERT_EQ(buckets.size(), bounds.size() + 1);
  for (size_t i = 0; i < bounds.size(); ++i) {
    const uint64_t truth = std::count_if(values.begin(), values.end(), [&](uint64_t v) {
      return v <= static_cast<uint64_t>(bounds[i]);
    });
    EXPECT_EQ(buckets[i].count, truth) << bounds[i];
  }
  EXPECT_EQ(buckets.back().count, values.size());
  EXPECT_NE(text.find("edge_sum " + std::to_string(sum) + "\n"), std::string::npos);
}

TEST(MetricsRegistry, BoundTimesScaleSnapsToInteger) {
  // 0.00015 * 1e5 is 14.999999999999998 in doubles; the bound must still cover 15.
  MetricsRegistry r;
  r.histogram("snap", "S.", {}, {0.00015}, 1e5).record(15);
  const auto b = parseBuckets(r.renderPrometheus(), "snap");
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0].le, "0.00015");
  EXPECT_EQ(b[0].count, 1u);
}

TEST(MetricsRegistry, CollectorsAppendedAfterFamilies) {
  MetricsRegistry r;
  r.counter("a_total", "A.").inc(1);
  r.addCollector([](std::string& out) {
    out += "# TYPE xdp_drops_total counter\nxdp_drops_total 7\n";
  });
  // A collector may use the registry itself (render does not hold the lock while calling it).
  r.addCollector([&r](std::string& out) {
    out += "z " + std::to_string(r.counter("a_total", "A.").value()) + "\n";
  });
  EXPECT_EQ(r.renderPrometheus(),
            "# HELP a_total A.\n"
            "# TYPE a_total counter\n"
            "a_total 1\n"
            "# TYPE xdp_drops_total counter\n"
            "xdp_drops_total 7\n"
            "z 1\n");
}

}  // namespace
}  // namespace infergate::common

namespace infergate::common {
namespace {

// What a removed endpoint or tenant leaves behind leaves the exposition (hideSeries), and
// comes back with its value when registered again.
TEST(MetricsRegistryHide, HidesEverySeriesWithTheLabelsAndShowsThemAgainOnRegistration) {
  MetricsRegistry r;
  r.counter("t_batches_total", "b", {{"model", "m"}, {"endpoint", "a:1"}}).inc(3);
  r.gauge("t_healthy", "h", {{"endpoint", "a:1"}, {"model", "m"}}).set(1);
  r.histogram("t_seconds", "s", {{"model", "m"}, {"endpoint", "a:1"}, {"path", "shm"}}, {0.1}, 1e6)
      .record(5);
  r.counter("t_batches_total", "b", {{"model", "m"}, {"endpoint", "b:1"}}).inc(7);
  r.counter("t_batches_total", "b", {{"model", "other"}, {"endpoint", "a:1"}}).inc(9);
  // A value that contains what a pair looks like must not match across pairs.
  r.counter("t_batches_total", "b", {{"model", "m\",endpoint=\"a:1"}, {"endpoint", "c:1"}}).inc(1);
  EXPECT_EQ(r.hideSeries({{"model", "m"}, {"endpoint", "a:1"}}), 3u);
  EXPECT_EQ(r.hideSeries({{"model", "m"}, {"endpoint", "a:1"}}), 0u) << "already hidden";
  std::string text = r.renderPrometheus();
  EXPECT_EQ(text.find("endpoint=\"a:1\",model=\"m\""), std::string::npos) << text;
  EXPECT_NE(text.find("t_batches_total{endpoint=\"b:1\",model=\"m\"} 7"), std::string::npos);
  EXPECT_NE(text.find("t_batches_total{endpoint=\"a:1\",model=\"other\"} 9"), std::string::npos);
  EXPECT_NE(text.find("endpoint=\"c:1\""), std::string::npos) << text;
  EXPECT_EQ(text.find("t_seconds_bucket"), std::string::npos);
  // Registered again (the endpoint came back): shown, with the value it kept.
  r.counter("t_batches_total", "b", {{"endpoint", "a:1"}, {"model", "m"}}).inc();
  text = r.renderPrometheus();
  EXPECT_NE(text.find("t_batches_total{endpoint=\"a:1\",model=\"m\"} 4"), std::string::npos);
  EXPECT_EQ(text.find("t_healthy{endpoint=\"a:1\""), std::string::npos) << "only what registered";
  EXPECT_EQ(r.hideSeries({}), 0u) << "an empty match hides nothing";
}

// Series of objects that come and go (claimSeries): they stay while any claim on their labels
// is held, and leave the registry, objects and all, with the last one; a series registered
// again later starts afresh; other series, and hidden ones of other labels, stay.
TEST(MetricsRegistryClaims, TheLastClaimRemovesTheSeries) {
  MetricsRegistry r;
  const Labels a = {{"model", "m"}, {"endpoint", "a:1"}};
  auto claim1 = std::make_unique<SeriesClaim>(&r, a);
  // The same pairs in another order are the same claim.
  SeriesClaim claim2(&r, {{"endpoint", "a:1"}, {"model", "m"}});
  r.counter("t_batches_total", "b", a).inc(3);
  r.gauge("t_healthy", "h", a).set(1);
  r.histogram("t_seconds", "s", {{"model", "m"}, {"endpoint", "a:1"}, {"path", "shm"}}, {0.1}, 1e6)
      .record(5);
  r.counter("t_batches_total", "b", {{"model", "m"}, {"endpoint", "b:1"}}).inc(7);
  r.counter("t_batches_total", "b", {{"model", "m\",endpoint=\"a:1"}, {"endpoint", "c:1"}}).inc(1);
  EXPECT_EQ(r.seriesCount(), 5u);

  claim1.reset();  // one holder left: nothing goes
  EXPECT_EQ(r.seriesCount(), 5u);
  EXPECT_NE(r.renderPrometheus().find("t_batches_total{endpoint=\"a:1\",model=\"m\"} 3"),
            std::string::npos);

  SeriesClaim moved = std::move(claim2);  // a moved claim is still one claim
  claim2.reset();                         // the moved-from one holds nothing
  EXPECT_EQ(r.seriesCount(), 5u);
  moved.reset();
  EXPECT_EQ(r.seriesCount(), 2u) << "the three series of {m, a:1} are gone";
  std::string text = r.renderPrometheus();
  EXPECT_EQ(text.find("endpoint=\"a:1\",model=\"m\""), std::string::npos) << text;
  EXPECT_NE(text.find("t_batches_total{endpoint=\"b:1\",model=\"m\"} 7"), std::string::npos);
  EXPECT_NE(text.find("endpoint=\"c:1\""), std::string::npos) << text;

  // Registered again later: a fresh series.
  r.counter("t_batches_total", "b", a).inc();
  EXPECT_NE(r.renderPrometheus().find("t_batches_total{endpoint=\"a:1\",model=\"m\"} 1"),
            std::string::npos);
  // Unclaiming what was never claimed removes nothing.
  EXPECT_EQ(r.unclaimSeries({{"model", "m"}, {"endpoint", "b:1"}}), 0u);
  EXPECT_EQ(r.seriesCount(), 3u);
}

// Addresses that come and go, each claimed, used and let go: the registry does not grow.
TEST(MetricsRegistryClaims, ChurningLabelsDoNotAccumulate) {
  MetricsRegistry r;
  r.counter("t_other_total", "o").inc();
  for (int i = 0; i < 1000; ++i) {
    const Labels l = {
        {"model", "m"},
        {"endpoint", "10.0." + std::to_string(i / 250) + "." + std::to_string(i % 250) + ":8001"}};
    SeriesClaim c(&r, l);
    r.counter("t_batches_total", "b", l).inc();
    r.gauge("t_healthy", "h", l).set(1);
    r.histogram("t_seconds", "s", l, {0.1}, 1e6).record(1);
    EXPECT_EQ(r.seriesCount(), 4u);
  }
  EXPECT_EQ(r.seriesCount(), 1u);
}

}  // namespace
}  // namespace infergate::common
