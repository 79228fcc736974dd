// Report formatting: the final table (rates, percentiles, per-priority rows, errors by kind,
// malformed outcomes, the saturation verdict), the progress line and the JSON report (parsed
// back with simdjson).
#include "bench/load/report.h"

#include <gtest/gtest.h>
#include <simdjson.h>

namespace infergate::bench {
namespace {

RunReport sampleRun() {
  RunReport r{.label = "ig-socket",
              .target = "127.0.0.1:8000",
              .protocol = "rest/json",
              .mode = LoadMode::kOpen,
              .target_rate = 100,
              .connections = 4,
              .threads = 1,
              .warmup_s = 1,
              .duration_s = 10,
              .lag_threshold_ns = 1000000};
  RunStats& s = r.result.stats;
  for (int i = 0; i < 990; ++i) s.recordOk(i % 2 ? 1 : 2, 1000000 + i * 1000, i / 100);  // 1-2 ms
  s.recordOk(1, 1500000000, 5);  // one 1.5 s stall
  for (int i = 0; i < 3; ++i) s.recordError(2, "http_503");
  s.recordError(1, "timeout");
  s.malformed["bad-json http_400"] = 5;
  s.malformed_latency.record(200000);
  s.sent = 1000;
  for (int i = 0; i < 1000; ++i) s.send_lag.record(20000);
  return r;
}

TEST(ReportTest, TableHasRatePercentilesLevelsAndErrors) {
  const RunReport r = sampleRun();
  const std::string t = formatTable(r);
  EXPECT_NE(t.find("infergate-bench [ig-socket]: open-loop constant 100 req/s, rest/json to "
                   "127.0.0.1:8000, 4 connections, 1 thread, 10 s (+1 s warm-up)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("target rate      100.0 req/s"), std::string::npos) << t;
  EXPECT_NE(t.find("achieved rate    99.1 req/s  (991 ok, 4 errors, 1000 sent in the window)"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("p50        p90        p99      p99.9        max      count"), std::string::npos) << t;
  // p50 of 1..1.99 ms is ~1.5 ms (bucket bound 1.572864 ms); max is the 1.5 s stall, exact.
  EXPECT_NE(t.find("  all                   1.573"), std::string::npos) << t;
  EXPECT_NE(t.find("1500.000        991"), std::string::npos) << t;
  EXPECT_NE(t.find("  priority 1 "), std::string::npos) << t;
  EXPECT_NE(t.find("  priority 2 "), std::string::npos) << t;
  EXPECT_NE(t.find("errors           http_503 3; timeout 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("malformed        5 sent; answered: bad-json http_400 5\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("SATURATED"), std::string::npos) << t;
  EXPECT_FALSE(r.saturated());
}

TEST(ReportTest, SaturationIsReportedInsteadOfTrusted) {
  RunReport r = sampleRun();
  for (int i = 0; i < 100; ++i) r.result.stats.send_lag.record(5000000);  // 5 ms late: 9% of sends
  r.result.stats.late_sends = 100;
  ASSERT_TRUE(r.saturated());
  const std::string t = formatTable(r);
  EXPECT_NE(t.find("SATURATED: the load generator could not keep its schedule: p99 send lag"),
            std::string::npos)
      << t;
  EXPECT_NE(t.find("exceeds the 1.000 ms threshold (100 of 1100 sends late)"), std::string::npos) << t;
  RunReport b = sampleRun();
  b.result.stats.errors["backlog_overflow"] = 2;
  EXPECT_NE(b.saturationReason().find("2 due requests dropped: backlog full"), std::string::npos);
}

TEST(ReportTest, ProgressLine) {
  Progress p;
  p.elapsed_s = 3;
  p.warming_up = true;
  EXPECT_EQ(formatProgress(p, 0), "[   3.0s] warming up");
  p.warming_up = false;
  p.stats.recordOk(-1, 2000000, 0);
  p.stats.recordError(-1, "reset");
  EXPECT_EQ(formatProgress(p, 1234.5),
            "[   3.0s]    1234.5 req/s  ok 1  errors 1  p50 2.000 ms  p99 2.000 ms");
}

TEST(ReportTest, JsonReportParsesAndCarriesTheFigures) {
  RunReport r = sampleRun();
  const std::string j = toJson(r);
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  ASSERT_EQ(parser.parse(j).get(doc), simdjson::SUCCESS) << j;
  EXPECT_EQ(std::string_view(doc["label"]), "ig-socket");
  EXPECT_EQ(std::string_view(doc["mode"]), "open");
  EXPECT_DOUBLE_EQ(double(doc["achieved_rate"]), 99.1);
  EXPECT_EQ(uint64_t(doc["ok"]), 991u);
  EXPECT_EQ(uint64_t(doc["error_count"]), 4u);
  EXPECT_EQ(uint64_t(doc["errors"]["http_503"]), 3u);
  EXPECT_DOUBLE_EQ(double(doc["latency_us"]["max"]), 1500000.0);
  EXPECT_EQ(uint64_t(doc["by_priority"]["2"]["errors"]), 3u);
  EXPECT_EQ(uint64_t(doc["malformed"]["bad-json http_400"]), 5u);
  EXPECT_EQ(bool(doc["generator"]["saturated"]), false);
  simdjson::dom::array timeline = doc["timeline"];
  EXPECT_EQ(timeline.size(), 10u);
  EXPECT_DOUBLE_EQ(double(timeline.at(5)["max_us"]), 1500000.0);
  simdjson::dom::array spectrum = doc["spectrum"];
  EXPECT_DOUBLE_EQ(double(spectrum.at(spectrum.size() - 1).at(0)), 1.0);

  SweepReport s;
  s.p99_target_ms = 5;
  s.steps.push_back({r, false, "p99 1500.000 ms"});
  s.stop_reason = "100 req/s failed";
  ASSERT_EQ(parser.parse(sweepToJson(s)).get(doc), simdjson::SUCCESS);
  EXPECT_EQ(std::string_view(doc["steps"].at(0)["why_not"]), "p99 1500.000 ms");
  const std::string table = formatSweepTable(s);
  EXPECT_NE(table.find("fails: p99 1500.000 ms"), std::string::npos) << table;
  EXPECT_NE(table.find("no rate met the target (100 req/s failed)"), std::string::npos) << table;
}

}  // namespace
}  // namespace infergate::bench
