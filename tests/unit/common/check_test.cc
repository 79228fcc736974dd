// IG_CHECK / fatal (release asserts) and Anomaly (log once, count, carry on).
#include "common/check.h"

#include <gtest/gtest.h>

#include <memory>
#include <sstream>

#include "common/metrics.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace infergate::common {
namespace {

TEST(CheckDeathTest, FailedCheckAbortsNamingWhatBroke) {
  EXPECT_DEATH(IG_CHECK(1 + 1 == 3, "sum was {}", 2),
               "infergate: fatal: .*check_test.cc:[0-9]+: check failed: 1 \\+ 1 == 3: sum was 2");
}

TEST(CheckDeathTest, FatalAborts) {
  EXPECT_DEATH(fatal("no way on"), "infergate: fatal: no way on");
}

TEST(Check, PassingCheckEvaluatesOnce) {
  int n = 0;
  IG_CHECK(++n == 1, "evaluated {} times", n);
  EXPECT_EQ(n, 1);
}

TEST(Anomaly, CountsEveryOneInTheRegistry) {
  Anomaly a("check_test_counts");
  EXPECT_EQ(a.count(), 0u);
  a.record("first");
  a.record("second");
  a.record("third");
  EXPECT_EQ(a.count(), 3u);
  const std::string text = MetricsRegistry::global().renderPrometheus();
  EXPECT_NE(text.find("infergate_anomalies_total{what=\"check_test_counts\"} 3"), std::string::npos)
      << text;
}

TEST(Anomaly, LogsOnlyTheFirst) {
  std::ostringstream log;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(std::make_shared<spdlog::logger>(
      "check_test", std::make_shared<spdlog::sinks::ostream_sink_mt>(log)));
  Anomaly a("check_test_logs");
  a.record("stray segment 1");
  a.record("stray segment 2");
  spdlog::set_default_logger(previous);
  EXPECT_NE(log.str().find("anomaly check_test_logs"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("stray segment 1"), std::string::npos) << log.str();
  EXPECT_EQ(log.str().find("stray segment 2"), std::string::npos) << log.str();
  EXPECT_EQ(a.count(), 2u);
}

}  // namespace
}  // namespace infergate::common
