#include "gpu/detectors.h"

#include <gtest/gtest.h>

namespace infergate::gpu {
namespace {

constexpr uint64_t kSec = 1'000'000'000;

TEST(LeakDetector, EntersAfterAFullWindowOfGrowthWithOldAllocations) {
  LeakDetector d(10 * kSec);
  int asked = 0;
  auto yes = [&] {
    ++asked;
    return true;
  };
  // Samples every second, +1 MiB each; the window (10 s) is complete at t = 10 s.
  for (int t = 0; t < 10; ++t) {
    EXPECT_EQ(d.update(t * kSec, int64_t{t} << 20, yes), Transition::kNone) << t;
    EXPECT_FALSE(d.windowGrew()) << t;
  }
  EXPECT_EQ(asked, 0);  // the costly evidence is not asked for before the window holds
  EXPECT_EQ(d.update(10 * kSec, int64_t{10} << 20, yes), Transition::kEntered);
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(d.suspect());
  EXPECT_EQ(d.windowStartBytes(), 0);
  EXPECT_EQ(d.windowSpanNs(), 10 * kSec);
  // Still growing, or flat: stays a suspect, and the evidence is not asked again.
  EXPECT_EQ(d.update(11 * kSec, int64_t{11} << 20, yes), Transition::kNone);
  EXPECT_EQ(d.update(12 * kSec, int64_t{11} << 20, yes), Transition::kNone);
  EXPECT_EQ(asked, 1);
  EXPECT_TRUE(d.suspect());
}

TEST(LeakDetector, NoOldAllocationsNoSuspicion) {
  LeakDetector d(10 * kSec);
  int asked = 0;
  auto no = [&] {
    ++asked;
    return false;
  };
  for (int t = 0; t <= 20; ++t) EXPECT_EQ(d.update(t * kSec, int64_t{t} << 20, no), Transition::kNone);
  EXPECT_FALSE(d.suspect());
  EXPECT_EQ(asked, 11);  // asked at each sample from t = 10 s on
}

TEST(LeakDetector, ADecreaseRestartsTheWindow) {
  LeakDetector d(10 * kSec);
  auto yes = [] { return true; };
  for (int t = 0; t <= 5; ++t) d.update(t * kSec, 100 + t, yes);
  d.update(6 * kSec, 50, yes);  // freed something: the run starts again at 6 s
  for (int t = 7; t < 16; ++t) EXPECT_EQ(d.update(t * kSec, 50 + t, yes), Transition::kNone) << t;
  EXPECT_EQ(d.update(16 * kSec, 70, yes), Transition::kEntered);
  EXPECT_EQ(d.windowStartBytes(), 50);
}

TEST(LeakDetector, FlatIsNotGrowth) {
  LeakDetector d(10 * kSec);
  auto yes = [] { return true; };
  for (int t = 0; t <= 30; ++t) EXPECT_EQ(d.update(t * kSec, 4096, yes), Transition::kNone);
  EXPECT_FALSE(d.suspect());
}

TEST(LeakDetector, ClearsOnlyBelowTheWindowStart) {
  LeakDetector d(10 * kSec);
  auto yes = [] { return true; };
  for (int t = 0; t <= 10; ++t) d.update(t * kSec, 1000 + 10 * t, yes);
  ASSERT_TRUE(d.suspect());
  EXPECT_EQ(d.windowStartBytes(), 1000);
  EXPECT_EQ(d.update(11 * kSec, 1005, yes), Transition::kNone);  // decreased, not below 1000
  EXPECT_TRUE(d.suspect());
  EXPECT_EQ(d.update(12 * kSec, 1000, yes), Transition::kNone);  // equal is not below
  EXPECT_EQ(d.update(13 * kSec, 999, yes), Transition::kCleared);
  EXPECT_FALSE(d.suspect());
  EXPECT_EQ(d.windowStartBytes(), 0);
}

TEST(LeakDetector, UnevenSamplesUseTheNewestSampleAWindowOld) {
  LeakDetector d(10 * kSec);
  auto yes = [] { return true; };
  d.update(0, 10, yes);
  d.update(3 * kSec, 20, yes);
  EXPECT_EQ(d.update(9 * kSec, 30, yes), Transition::kNone);
  EXPECT_EQ(d.update(13 * kSec, 40, yes), Transition::kEntered);
  // The window's start is the newest sample at least 10 s old: t = 3 s, 20 bytes.
  EXPECT_EQ(d.windowStartBytes(), 20);
  EXPECT_EQ(d.windowSpanNs(), 10 * kSec);
}

AnomalyOptions opts(uint32_t windows = 10) { return AnomalyOptions{3.0, 20, windows}; }

TEST(AnomalyDetector, BaselineAfterNWindowsThenAnomalyAndClear) {
  AnomalyDetector d(opts(10));
  for (int i = 0; i < 9; ++i) {
    EXPECT_EQ(d.update(100 * 1'000'000, 100), Transition::kNone);  // 100 syncs of 1 ms
    EXPECT_FALSE(d.hasBaseline()) << i;
    EXPECT_EQ(d.baselineNs(), 0.0);
  }
  // A 3.5 ms window before the baseline exists is folded in, not flagged: use 1 ms.
  EXPECT_EQ(d.update(100 * 1'000'000, 100), Transition::kNone);
  ASSERT_TRUE(d.hasBaseline());
  EXPECT_DOUBLE_EQ(d.baselineNs(), 1e6);
  EXPECT_EQ(d.update(100 * 3'500'000, 100), Transition::kEntered);
  EXPECT_TRUE(d.anomalous());
  EXPECT_DOUBLE_EQ(d.lastMeanNs(), 3.5e6);
  EXPECT_EQ(d.update(100 * 3'500'000, 100), Transition::kNone);  // still anomalous
  EXPECT_DOUBLE_EQ(d.baselineNs(), 1e6);                          // frozen
  EXPECT_EQ(d.update(100 * 1'000'000, 100), Transition::kCleared);
  EXPECT_FALSE(d.anomalous());
  EXPECT_DOUBLE_EQ(d.baselineNs(), 1e6);
}

TEST(AnomalyDetector, WindowsWithTooFewSyncsChangeNothing) {
  AnomalyDetector d(opts(2));
  d.update(20 * 1'000'000, 20);
  d.update(20 * 1'000'000, 20);
  ASSERT_DOUBLE_EQ(d.baselineNs(), 1e6);
  EXPECT_EQ(d.update(19 * 10'000'000, 19), Transition::kNone);  // 10 ms, 19 syncs: ignored
  EXPECT_FALSE(d.anomalous());
  EXPECT_EQ(d.update(0, 0), Transition::kNone);
  EXPECT_DOUBLE_EQ(d.lastMeanNs(), 1e6);
  EXPECT_EQ(d.update(20 * 10'000'000, 20), Transition::kEntered);
  EXPECT_EQ(d.update(19 * 1'000'000, 19), Transition::kNone);  // too few to clear it either
  EXPECT_TRUE(d.anomalous());
  EXPECT_EQ(d.update(20 * 3'000'000, 20), Transition::kCleared);  // exactly 3x is not above
}

TEST(AnomalyDetector, EwmaWithAlphaOneOverWindows) {
  AnomalyDetector d(opts(4));  // alpha 0.25, seeded by the first window
  d.update(20 * 1000, 20);     // 1000
  d.update(20 * 2000, 20);     // 1000 + 0.25 * 1000 = 1250
  d.update(20 * 1250, 20);     // 1250
  EXPECT_FALSE(d.hasBaseline());
  d.update(20 * 2250, 20);  // 1250 + 0.25 * 1000 = 1500
  ASSERT_TRUE(d.hasBaseline());
  EXPECT_DOUBLE_EQ(d.baselineNs(), 1500.0);
  EXPECT_EQ(d.update(20 * 4501, 20), Transition::kEntered);  // > 4500
}

TEST(QuotaDetector, Transitions) {
  QuotaDetector q;
  EXPECT_EQ(q.update(100, 0), Transition::kNone);  // no quota
  EXPECT_EQ(q.update(100, 100), Transition::kNone);  // equal is not over
  EXPECT_EQ(q.update(101, 100), Transition::kEntered);
  EXPECT_TRUE(q.over());
  EXPECT_EQ(q.update(200, 100), Transition::kNone);
  EXPECT_EQ(q.update(100, 100), Transition::kCleared);
  EXPECT_FALSE(q.over());
}

TEST(Quota, RulesMatchTheWaysDocumentedAndTheFirstWins) {
  ContainerInfo c;
  c.cgroup_path = "/kubepods.slice/kubepods-burstable.slice/pod1/cri-containerd-abcdef0123.scope";
  c.runtime = "containerd";
  c.container_id = "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
  c.pod_uid = "1b2c3d4e-0000-1111-2222-333344445555";
  c.pod_name = "triton-0";
  c.pod_namespace = "ml";
  EXPECT_EQ(c.label(), "triton-0");
  EXPECT_EQ(quotaFor(c, {}, 7), 7u);
  EXPECT_EQ(quotaFor(c, {{"triton-0", 1}}, 7), 1u);
  EXPECT_EQ(quotaFor(c, {{"1b2c3d4e-0000-1111-2222-333344445555", 2}}, 7), 2u);
  EXPECT_EQ(quotaFor(c, {{"abcdef01", 3}}, 7), 3u);
  EXPECT_EQ(quotaFor(c, {{"abc", 3}}, 7), 7u);  // under 4 hex digits: no
  EXPECT_EQ(quotaFor(c, {{"bcdef012", 3}}, 7), 7u);  // not a prefix
  EXPECT_EQ(quotaFor(c, {{"/kubepods.slice/kubepods-burstable.slice", 4}}, 7), 4u);
  EXPECT_EQ(quotaFor(c, {{"/system.slice", 4}}, 7), 7u);
  EXPECT_EQ(quotaFor(c, {{"", 9}, {"other", 8}, {"triton-0", 5}, {"abcdef01", 6}}, 7), 5u);
  ContainerInfo host;  // not a container: label "host"
  EXPECT_EQ(quotaFor(host, {{"host", 11}}, 7), 11u);
  EXPECT_EQ(quotaFor(host, {{"triton-0", 1}}, 7), 7u);
}

TEST(LogRateLimiter, OnePerIntervalAndTheSuppressedCount) {
  LogRateLimiter l(60 * kSec);
  uint64_t s = 99;
  EXPECT_TRUE(l.allow("leak:pid:1", 0, &s));
  EXPECT_EQ(s, 0u);
  EXPECT_FALSE(l.allow("leak:pid:1", 1 * kSec, &s));
  EXPECT_FALSE(l.allow("leak:pid:1", 59 * kSec, &s));
  EXPECT_TRUE(l.allow("leak:pid:2", 59 * kSec, &s));  // another subject
  EXPECT_TRUE(l.allow("leak:pid:1", 60 * kSec, &s));
  EXPECT_EQ(s, 2u);
  EXPECT_FALSE(l.allow("leak:pid:1", 61 * kSec, &s));
  EXPECT_TRUE(l.allow("leak:pid:1", 200 * kSec, &s));
  EXPECT_EQ(s, 1u);
}

TEST(LogRateLimiter, BoundedKeys) {
  LogRateLimiter l(60 * kSec, 3);
  uint64_t s = 0;
  EXPECT_TRUE(l.allow("a", 1, &s));
  EXPECT_TRUE(l.allow("b", 2, &s));
  EXPECT_TRUE(l.allow("c", 3, &s));
  EXPECT_TRUE(l.allow("d", 4, &s));  // evicts "a", the stalest
  EXPECT_EQ(l.size(), 3u);
  EXPECT_TRUE(l.allow("a", 5, &s));  // forgotten, so allowed again
  EXPECT_FALSE(l.allow("d", 6, &s));
}

}  // namespace
}  // namespace infergate::gpu
