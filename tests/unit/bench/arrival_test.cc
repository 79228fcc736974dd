// Arrival schedules: a constant schedule keeps exact gaps without drift; a Poisson schedule has
// the requested mean and exponentially distributed gaps (Kolmogorov-Smirnov against the CDF).
#include "bench/load/arrival.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace infergate::bench {
namespace {

TEST(ArrivalTest, ConstantRateHasExactGapsAndNoDrift) {
  ArrivalSchedule s(Arrival::kConstant, 3000.0, 1, 500);
  uint64_t prev = s.next();
  EXPECT_EQ(prev, 500u);
  for (int i = 1; i < 3000000; ++i) {
    const uint64_t t = s.next();
    const uint64_t gap = t - prev;
    ASSERT_TRUE(gap == 333333 || gap == 333334) << "gap " << gap << " at " << i;
    prev = t;
  }
  // The last of 3,000,000 arrivals at 3000/s is (3e6 - 1) exact gaps after the phase, to the ns.
  EXPECT_NEAR(static_cast<double>(prev), 500 + (3e6 - 1) * (1e9 / 3000), 2.0);
}

std::vector<double> poissonGaps(double rate, uint64_t seed, int n) {
  ArrivalSchedule s(Arrival::kPoisson, rate, seed);
  std::vector<double> gaps;
  uint64_t prev = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t t = s.next();
    EXPECT_GE(t, prev);
    gaps.push_back(static_cast<double>(t - prev));
    prev = t;
  }
  return gaps;
}

TEST(ArrivalTest, PoissonMeanInterArrivalWithinTolerance) {
  const int n = 200000;
  for (double rate : {100.0, 5000.0, 250000.0}) {
    const auto gaps = poissonGaps(rate, 42, n);
    double sum = 0, sq = 0;
    for (double g : gaps) {
      sum += g;
      sq += g * g;
    }
    const double mean = sum / n, expected = 1e9 / rate;
    // Standard error of the mean of n exponential gaps is mean/sqrt(n) (0.22%): allow 1%.
    EXPECT_NEAR(mean / expected, 1.0, 0.01) << "rate " << rate;
    // Exponential: standard deviation equals the mean (coefficient of variation 1).
    const double sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(sd / mean, 1.0, 0.02) << "rate " << rate;
  }
}

TEST(ArrivalTest, PoissonGapsAreExponential) {
  const int n = 100000;
  const double rate = 2000.0, mean = 1e9 / rate;
  auto gaps = poissonGaps(rate, 7, n);
  std::sort(gaps.begin(), gaps.end());
  // Kolmogorov-Smirnov distance to F(x) = 1 - exp(-x/mean); critical value at alpha = 0.001 is
  // 1.95/sqrt(n) = 0.0062. (Gaps are truncated to whole ns: negligible at a 500 µs mean.)
  double d = 0;
  for (int i = 0; i < n; ++i) {
    const double f = 1.0 - std::exp(-gaps[i] / mean);
    d = std::max({d, std::abs(f - static_cast<double>(i) / n), std::abs(f - static_cast<double>(i + 1) / n)});
  }
  EXPECT_LT(d, 1.95 / std::sqrt(static_cast<double>(n)));
  // Memorylessness in numbers: P(gap > mean) = 1/e.
  const auto above = std::count_if(gaps.begin(), gaps.end(), [&](double g) { return g > mean; });
  EXPECT_NEAR(static_cast<double>(above) / n, std::exp(-1.0), 0.006);
}

TEST(ArrivalTest, PoissonIsReproducibleBySeedAndDiffersAcrossSeeds) {
  ArrivalSchedule a(Arrival::kPoisson, 1000, 5), b(Arrival::kPoisson, 1000, 5),
      c(Arrival::kPoisson, 1000, 6);
  int same = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.next();
    EXPECT_EQ(x, b.next());
    same += x == c.next();
  }
  EXPECT_LT(same, 10);
}

TEST(ArrivalTest, ConstantScheduleIsNotPoisson) {
  // The KS check above must be able to fail: constant gaps are far from exponential.
  ArrivalSchedule s(Arrival::kConstant, 2000.0, 1);
  uint64_t prev = s.next();
  const double mean = 5e5;
  int above = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t t = s.next();
    above += static_cast<double>(t - prev) > mean * 0.999;
    prev = t;
  }
  EXPECT_EQ(above, 1000);  // every gap equals the mean; an exponential has only 37% above it
}

}  // namespace
}  // namespace infergate::bench
