// app/prom_text_parser.h: the Prometheus text `infergate top` reads from a gateway's admin
// port, parsed with every size bounded and malformed lines skipped and counted.
#include "app/prom_text_parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>

namespace infergate::app {
namespace {

TEST(PromTextParser, SamplesLabelsEscapesAndValues) {
  const std::string body =
      "# HELP infergate_requests_total Requests answered.\n"
      "# TYPE infergate_requests_total counter\n"
      "infergate_requests_total{code=\"200\",model=\"identity\",protocol=\"kserve_http\"} 20\n"
      "\n"
      "plain_gauge -3.5\r\n"
      "with_ts{a=\"x\"} 1e3 1700000000000\n"
      "esc{v=\"a\\\\b\\\"c\\nd\"} +Inf\n"
      "ninf -Inf\n"
      "nan NaN\n"
      "  spaced { a = \"1\" , b=\"2\", } 7\n"
      "empty_labels{} 0.25";  // no trailing newline
  absl::StatusOr<PromScrape> r = parsePromText(body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->skipped_lines, 0u);
  ASSERT_EQ(r->samples.size(), 8u);
  const PromSample& s0 = r->samples[0];
  EXPECT_EQ(s0.name, "infergate_requests_total");
  ASSERT_EQ(s0.labels.size(), 3u);
  EXPECT_EQ(s0.label("code"), "200");
  EXPECT_EQ(s0.label("model"), "identity");
  EXPECT_EQ(s0.label("protocol"), "kserve_http");
  EXPECT_EQ(s0.label("absent"), "");
  EXPECT_EQ(s0.value, 20);
  EXPECT_EQ(r->samples[1].name, "plain_gauge");
  EXPECT_EQ(r->samples[1].value, -3.5);
  EXPECT_EQ(r->samples[2].value, 1000);
  EXPECT_EQ(r->samples[3].label("v"), "a\\b\"c\nd");
  EXPECT_TRUE(std::isinf(r->samples[3].value) && r->samples[3].value > 0);
  EXPECT_TRUE(std::isinf(r->samples[4].value) && r->samples[4].value < 0);
  EXPECT_TRUE(std::isnan(r->samples[5].value));
  EXPECT_EQ(r->samples[6].name, "spaced");
  EXPECT_EQ(r->samples[6].label("a"), "1");
  EXPECT_EQ(r->samples[6].label("b"), "2");
  EXPECT_EQ(r->samples[6].value, 7);
  EXPECT_EQ(r->samples[7].labels.size(), 0u);
  EXPECT_EQ(r->samples[7].value, 0.25);
}

TEST(PromTextParser, MalformedLinesAreSkippedAndCounted) {
  const char* bad[] = {
      "1name 1",                  // name starts with a digit
      "name",                     // no value
      "name{a=\"1\"}",            // no value after labels
      "name{a=\"1\" 1",           // unterminated label set
      "name{a=\"1} 1",            // unterminated value
      "name{a=1} 1",              // unquoted value
      "name{a=\"\\x\"} 1",        // unknown escape
      "name{a=\"1\",a=\"2\"} 1",  // a label twice
      "name{:a=\"1\"} 1",         // a label name with a colon
      "name 1 2 3",               // junk after the timestamp
      "name 1 12x",               // a bad timestamp
      "name 0x10",                // hex
      "name 1e999",               // beyond double's range
      "name infinity",            // not the format's spelling
      "name{a=\"1\"}1",           // no blank before the value
      "name 1.2.3",               // not a number
      "name +",                   // a sign alone
  };
  std::string body = "good 1\n";
  for (const char* b : bad) body += std::string(b) + "\n";
  body += "good 2\n";
  absl::StatusOr<PromScrape> r = parsePromText(body);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->skipped_lines, std::size(bad));
  ASSERT_EQ(r->samples.size(), 2u);
  EXPECT_EQ(r->samples[0].value, 1);
  EXPECT_EQ(r->samples[1].value, 2);
}

TEST(PromTextParser, BodyOverItsLimitIsAnError) {
  PromLimits limits;
  limits.max_body_bytes = 16;
  EXPECT_TRUE(parsePromText("a 1\nb 2\nc 3\nd 44", limits).ok());  // 16 bytes
  absl::StatusOr<PromScrape> r = parsePromText("a 1\nb 2\nc 3\nd 444", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PromTextParser, SampleCountOverItsLimitIsAnError) {
  PromLimits limits;
  limits.max_samples = 3;
  EXPECT_TRUE(parsePromText("a 1\nb 2\nc 3\n# comments do not count\n", limits).ok());
  absl::StatusOr<PromScrape> r = parsePromText("a 1\nb 2\nc 3\nd 4\n", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PromTextParser, PerLineLimitsSkipTheLine) {
  PromLimits limits;
  limits.max_labels = 2;
  limits.max_label_value_bytes = 4;
  limits.max_name_bytes = 8;
  limits.max_line_bytes = 40;
  const std::string body =
      "ok{a=\"1\",b=\"2\"} 1\n"                      // at the label limit
      "many{a=\"1\",b=\"2\",c=\"3\"} 1\n"            // one label too many
      "val{a=\"1234\"} 1\n"                          // value at its limit
      "long{a=\"12345\"} 1\n"                        // value one byte over
      "name5678 1\n"                                 // name at its limit
      "name56789 1\n"                                // name one over
      "lbl{k2345678=\"1\"} 1\n"                      // label name at its limit
      "lbl{k23456789=\"1\"} 1\n"                     // label name one over
      "w 1                                     \n"   // 40 bytes: at the line limit
      "w 1                                      \n"  // 41 bytes
      "# a comment longer than the line limit is counted too ............\n";
  absl::StatusOr<PromScrape> r = parsePromText(body, limits);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->samples.size(), 5u);
  EXPECT_EQ(r->samples[0].name, "ok");
  EXPECT_EQ(r->samples[1].name, "val");
  EXPECT_EQ(r->samples[2].name, "name5678");
  EXPECT_EQ(r->samples[3].name, "lbl");
  EXPECT_EQ(r->samples[4].name, "w");
  EXPECT_EQ(r->skipped_lines, 6u);
}

TEST(PromTextParser, TheGatewaysOwnHistogramLines) {
  const std::string body =
      "infergate_request_duration_seconds_bucket{model=\"identity\",protocol=\"kserve_http\","
      "le=\"0.00005\"} 16\n"
      "infergate_request_duration_seconds_bucket{model=\"identity\",protocol=\"kserve_http\","
      "le=\"+Inf\"} 20\n"
      "infergate_request_duration_seconds_sum{model=\"identity\",protocol=\"kserve_http\"} "
      "0.000027543\n";
  absl::StatusOr<PromScrape> r = parsePromText(body);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->samples.size(), 3u);
  EXPECT_EQ(r->samples[0].label("le"), "0.00005");
  EXPECT_EQ(r->samples[1].label("le"), "+Inf");
  EXPECT_DOUBLE_EQ(r->samples[2].value, 0.000027543);
}

}  // namespace
}  // namespace infergate::app
