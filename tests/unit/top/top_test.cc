// app/top.h: the figures `infergate top` shows (rates and percentiles from the deltas of two
// scrapes), what it reads from each metric family, its ordering and its rendering.
#include "app/top.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace infergate::app::top {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Histogram hist(std::initializer_list<std::pair<double, double>> b, double sum = 0) {
  Histogram h;
  for (const auto& [le, v] : b) addBucket(h, le, v);
  h.count = h.buckets.empty() ? 0 : h.buckets.back().second;
  h.sum = sum;
  return h;
}

Snapshot snap(const std::string& body) {
  absl::StatusOr<PromScrape> p = parsePromText(body);
  EXPECT_TRUE(p.ok()) << p.status();
  return buildSnapshot(*p);
}

TEST(TopQuantile, InterpolatesInsideTheBucketLikePrometheus) {
  const Histogram h = hist({{0.001, 10}, {0.002, 30}, {0.005, 40}, {kInf, 40}});
  // rank 20 lies in (0.001, 0.002] holding ranks 10..30: 0.001 + 0.001 * 10/20.
  EXPECT_DOUBLE_EQ(histogramQuantile(0.5, h), 0.0015);
  // rank 39.6 lies in (0.002, 0.005] holding 30..40: 0.002 + 0.003 * 9.6/10.
  EXPECT_DOUBLE_EQ(histogramQuantile(0.99, h), 0.00488);
  // rank 5 in the first bucket: from 0 to 0.001.
  EXPECT_DOUBLE_EQ(histogramQuantile(0.125, h), 0.0005);
  EXPECT_DOUBLE_EQ(histogramQuantile(0, h), 0);
  EXPECT_DOUBLE_EQ(histogramQuantile(1, h), 0.005);
}

TEST(TopQuantile, RankInTheInfBucketGivesTheHighestFiniteBound) {
  EXPECT_DOUBLE_EQ(histogramQuantile(0.5, hist({{0.001, 0}, {0.002, 0}, {kInf, 10}})), 0.002);
}

TEST(TopQuantile, NanWithoutObservationsOrWithoutInf) {
  EXPECT_TRUE(std::isnan(histogramQuantile(0.5, hist({{0.001, 0}, {kInf, 0}}))));
  EXPECT_TRUE(std::isnan(histogramQuantile(0.5, hist({{0.001, 3}, {0.002, 5}}))));
  EXPECT_TRUE(std::isnan(histogramQuantile(0.5, Histogram{})));
  EXPECT_TRUE(std::isnan(histogramQuantile(1.5, hist({{0.001, 3}, {kInf, 3}}))));
}

TEST(TopQuantile, NonMonotonicBucketsAreMadeMonotonic) {
  // A scrape racing recording: the 0.002 bucket reads lower than the 0.001 one.
  const Histogram h = hist({{0.001, 10}, {0.002, 8}, {0.004, 20}, {kInf, 20}});
  // Cumulative 10, 10, 20: rank 15 lies in (0.002, 0.004] holding 10..20.
  EXPECT_DOUBLE_EQ(histogramQuantile(0.75, h), 0.003);
}

TEST(TopDelta, OverTheIntervalOnly) {
  const Histogram prev = hist({{0.001, 5}, {0.002, 10}, {0.005, 10}, {kInf, 10}}, 1);
  const Histogram cur = hist({{0.001, 15}, {0.002, 40}, {0.005, 50}, {kInf, 50}}, 3);
  const Histogram d = histogramDelta(prev, cur);
  ASSERT_EQ(d.buckets.size(), 4u);
  EXPECT_EQ(d.buckets[0].second, 10);
  EXPECT_EQ(d.buckets[1].second, 30);
  EXPECT_EQ(d.buckets[2].second, 40);
  EXPECT_EQ(d.buckets[3].second, 40);
  EXPECT_EQ(d.count, 40);
  EXPECT_EQ(d.sum, 2);
  // The interval's p50, not the lifetime's (which would be 0.0017).
  EXPECT_DOUBLE_EQ(histogramQuantile(0.5, d), 0.0015);
}

TEST(TopDelta, ResetGivesTheNewValues) {
  const Histogram prev = hist({{0.001, 100}, {kInf, 200}}, 5);
  const Histogram cur = hist({{0.001, 3}, {kInf, 4}}, 0.1);
  const Histogram d = histogramDelta(prev, cur);
  EXPECT_EQ(d.buckets[0].second, 3);
  EXPECT_EQ(d.buckets[1].second, 4);
  EXPECT_EQ(counterDelta(100, 7), 7);
  EXPECT_EQ(counterDelta(100, 107), 7);
  EXPECT_EQ(counterDelta(100, std::numeric_limits<double>::quiet_NaN()), 0);
  EXPECT_EQ(counterDelta(100, -5), 0);  // a negative counter: never a negative rate
}

TEST(TopHistogram, BucketCountIsBounded) {
  Histogram h;
  for (size_t i = 0; i < kMaxHistogramBuckets + 10; ++i) addBucket(h, static_cast<double>(i), 1);
  EXPECT_EQ(h.buckets.size(), kMaxHistogramBuckets);
  addBucket(h, 3, 5);  // an existing bound still adds
  EXPECT_EQ(h.buckets[3].second, 6);
}

const char* kScrape0 =
    "infergate_requests_total{code=\"200\",model=\"identity\",protocol=\"kserve_http\"} 100\n"
    "infergate_requests_total{code=\"404\",model=\"identity\",protocol=\"kserve_http\"} 2\n"
    "infergate_requests_total{code=\"503\",model=\"identity\",protocol=\"kserve_http\"} 0\n"
    "infergate_requests_total{code=\"200\",model=\"slow\",protocol=\"kserve_grpc\"} 10\n"
    "infergate_requests_total{code=\"200\",model=\"idle\",protocol=\"kserve_http\"} 0\n"
    "infergate_request_duration_seconds_bucket{model=\"identity\",protocol=\"kserve_http\",le=\"0."
    "001\"} 50\n"
    "infergate_request_duration_seconds_bucket{model=\"identity\",protocol=\"kserve_http\",le=\"0."
    "002\"} 102\n"
    "infergate_request_duration_seconds_bucket{model=\"identity\",protocol=\"kserve_http\",le=\"+"
    "Inf\"} 102\n"
    "infergate_batcher_queue_depth{level=\"10\",model=\"identity\"} 1\n"
    "infergate_batcher_queue_depth{level=\"2\",model=\"identity\"} 4\n"
    "infergate_batcher_batch_size_bucket{model=\"identity\",le=\"1\"} 10\n"
    "infergate_batcher_batch_size_bucket{model=\"identity\",le=\"8\"} 20\n"
    "infergate_batcher_batch_size_bucket{model=\"identity\",le=\"+Inf\"} 20\n"
    "infergate_batcher_batch_size_sum{model=\"identity\"} 60\n"
    "infergate_batcher_batch_size_count{model=\"identity\"} 20\n"
    "infergate_batcher_rejections_total{level=\"1\",model=\"identity\",reason=\"queue_full\"} 5\n"
    "infergate_batcher_rejections_total{level=\"2\",model=\"identity\",reason=\"queue_full\"} 5\n"
    "infergate_batcher_shed_total{level=\"1\",model=\"identity\"} 1\n";

const char* kScrape1 =
    "infergate_requests_total{code=\"200\",model=\"identity\",protocol=\"kserve_http\"} 150\n"
    "infergate_requests_total{code=\"404\",model=\"identity\",protocol=\"kserve_http\"} 5\n"
    "infergate_requests_total{code=\"503\",model=\"identity\",protocol=\"kserve_http\"} 0\n"
    "infergate_requests_total{code=\"200\",model=\"slow\",protocol=\"kserve_grpc\"} 110\n"
    "infergate_requests_total{code=\"200\",model=\"idle\",protocol=\"kserve_http\"} 0\n"
    "infergate_request_duration_seconds_bucket{model=\"identity\",protocol=\"kserve_http\",le=\"0."
    "001\"} 60\n"
    "infergate_request_duration_seconds_bucket{model=\"identity\",protocol=\"kserve_http\",le=\"0."
    "002\"} 155\n"
    "infergate_request_duration_seconds_bucket{model=\"identity\",protocol=\"kserve_http\",le=\"+"
    "Inf\"} 155\n"
    "infergate_batcher_queue_depth{level=\"10\",model=\"identity\"} 0\n"
    "infergate_batcher_queue_depth{level=\"2\",model=\"identity\"} 7\n"
    "infergate_batcher_batch_size_bucket{model=\"identity\",le=\"1\"} 10\n"
    "infergate_batcher_batch_size_bucket{model=\"identity\",le=\"8\"} 30\n"
    "infergate_batcher_batch_size_bucket{model=\"identity\",le=\"+Inf\"} 30\n"
    "infergate_batcher_batch_size_sum{model=\"identity\"} 110\n"
    "infergate_batcher_batch_size_count{model=\"identity\"} 30\n"
    "infergate_batcher_rejections_total{level=\"1\",model=\"identity\",reason=\"queue_full\"} 6\n"
    "infergate_batcher_rejections_total{level=\"2\",model=\"identity\",reason=\"queue_full\"} 7\n"
    "infergate_batcher_shed_total{level=\"1\",model=\"identity\"} 3\n";

TEST(TopFrame, RatesErrorsAndPercentilesOverTheInterval) {
  const Snapshot s0 = snap(kScrape0), s1 = snap(kScrape1);
  const Frame f = computeFrame(&s0, s1, 0.5);
  ASSERT_TRUE(f.has_rates);
  ASSERT_EQ(f.models.size(), 2u);  // "idle" never answered a request: no row
  const ModelRow& id = f.models[0];
  EXPECT_EQ(id.model, "identity");
  EXPECT_EQ(id.protocol, "kserve_http");
  EXPECT_DOUBLE_EQ(id.rate, 106);      // (50 + 3) / 0.5
  EXPECT_DOUBLE_EQ(id.error_rate, 6);  // 3 / 0.5
  ASSERT_EQ(id.errors.size(), 1u);     // 503 did not change
  EXPECT_EQ(id.errors[0].first, "404");
  EXPECT_DOUBLE_EQ(id.errors[0].second, 6);
  EXPECT_DOUBLE_EQ(id.total, 155);
  // Interval buckets: 10 <= 1 ms, 53 <= 2 ms. p50: rank 26.5 in (1, 2] ms holding 10..53.
  EXPECT_DOUBLE_EQ(id.p50, 0.001 + 0.001 * (16.5 / 43));
  EXPECT_DOUBLE_EQ(id.p99, 0.001 + 0.001 * ((0.99 * 53 - 10) / 43));
  const ModelRow& slow = f.models[1];
  EXPECT_EQ(slow.model, "slow");
  EXPECT_DOUBLE_EQ(slow.rate, 200);
  EXPECT_TRUE(std::isnan(slow.p50));  // no duration histogram for it in this scrape

  ASSERT_EQ(f.batchers.size(), 1u);
  const BatcherRow& b = f.batchers[0];
  ASSERT_EQ(b.queue_depth.size(), 2u);
  EXPECT_EQ(b.queue_depth[0].first, "2");  // numeric order, not text order
  EXPECT_EQ(b.queue_depth[0].second, 7);
  EXPECT_EQ(b.queue_depth[1].first, "10");
  EXPECT_DOUBLE_EQ(b.batch_rate, 20);  // 10 batches / 0.5 s
  EXPECT_DOUBLE_EQ(b.mean_batch, 5);   // 50 rows / 10 batches
  EXPECT_DOUBLE_EQ(b.shed_rate, 4);    // 2 / 0.5
  ASSERT_EQ(b.rejections.size(), 1u);
  EXPECT_EQ(b.rejections[0].first, "queue_full");
  EXPECT_DOUBLE_EQ(b.rejections[0].second, 6);  // (1 + 2) / 0.5, summed over levels
}

TEST(TopFrame, FirstFrameHasNoRates) {
  const Snapshot s1 = snap(kScrape1);
  const Frame f = computeFrame(nullptr, s1, 0);
  EXPECT_FALSE(f.has_rates);
  ASSERT_EQ(f.models.size(), 2u);
  EXPECT_TRUE(std::isnan(f.models[0].rate));
  EXPECT_EQ(f.models[0].total, 155);
}

TEST(TopFrame, RestartedGatewayCountsFromZero) {
  const Snapshot s0 = snap(kScrape1);
  const Snapshot s1 = snap(
      "infergate_requests_total{code=\"200\",model=\"identity\",protocol=\"kserve_http\"} 4\n");
  const Frame f = computeFrame(&s0, s1, 1);
  ASSERT_EQ(f.models.size(), 1u);
  EXPECT_DOUBLE_EQ(f.models[0].rate, 4);
}

TEST(TopFrame, XdpTcpAfxdpAndGpuSections) {
  const std::string a =
      "infergate_xdp_packets_total{verdict=\"pass\",reason=\"request\"} 100\n"
      "infergate_xdp_packets_total{verdict=\"drop\",reason=\"bad_method\"} 4\n"
      "infergate_xdp_packets_total{verdict=\"drop\",reason=\"syn_rate_limited\"} 0\n"
      "infergate_xdp_requests_total{class=\"high\",verdict=\"admit\"} 10\n"
      "infergate_xdp_requests_total{class=\"low\",verdict=\"admit\"} 5\n"
      "infergate_tcp_segments_in_total{queue=\"0\"} 10\n"
      "infergate_tcp_segments_in_total{queue=\"1\"} 20\n"
      "infergate_tcp_retransmits_total{queue=\"0\"} 1\n"
      "infergate_tcp_drops_total{queue=\"0\",reason=\"bad_tcp_checksum\"} 2\n"
      "infergate_tcp_drops_total{queue=\"1\",reason=\"paws\"} 0\n"
      "infergate_tcp_connections{queue=\"0\",state=\"established\"} 3\n"
      "infergate_tcp_connections{queue=\"1\",state=\"time_wait\"} 2\n"
      "infergate_afxdp_zero_copy{queue=\"0\"} 1\n"
      "infergate_afxdp_zero_copy{queue=\"1\"} 0\n"
      "infergate_afxdp_rx_frames_total{queue=\"0\"} 100\n"
      "infergate_afxdp_tx_frames_total{queue=\"0\"} 50\n"
      "infergate_afxdp_kernel_rx_ring_full_total{queue=\"0\"} 0\n"
      "infergate_gpu_probes_active 1\n"
      "infergate_gpu_processes 2\n"
      "infergate_gpu_live_bytes{kind=\"device\"} 1048576\n"
      "infergate_gpu_live_bytes{kind=\"host\"} 1048576\n";
  std::string b = a;
  auto bump = [&b](const std::string& from, const std::string& to) {
    b.replace(b.find(from), from.size(), to);
  };
  bump("reason=\"request\"} 100", "reason=\"request\"} 300");
  bump("reason=\"bad_method\"} 4", "reason=\"bad_method\"} 14");
  bump("queue=\"1\"} 20\n", "queue=\"1\"} 40\n");
  bump("reason=\"bad_tcp_checksum\"} 2", "reason=\"bad_tcp_checksum\"} 6");
  bump("infergate_afxdp_rx_frames_total{queue=\"0\"} 100",
       "infergate_afxdp_rx_frames_total{queue=\"0\"} 300");
  const Snapshot s0 = snap(a), s1 = snap(b);
  const Frame f = computeFrame(&s0, s1, 2);
  ASSERT_TRUE(f.has_xdp);
  ASSERT_EQ(f.xdp_verdicts.size(), 2u);  // drop, pass
  EXPECT_EQ(f.xdp_verdicts[0].name, "drop");
  EXPECT_DOUBLE_EQ(f.xdp_verdicts[0].rate, 5);
  EXPECT_EQ(f.xdp_verdicts[1].name, "pass");
  EXPECT_DOUBLE_EQ(f.xdp_verdicts[1].rate, 100);
  ASSERT_EQ(f.xdp_drops.size(), 1u);  // syn_rate_limited never counted: not listed
  EXPECT_EQ(f.xdp_drops[0].name, "bad_method");
  EXPECT_DOUBLE_EQ(f.xdp_drops[0].total, 14);
  ASSERT_EQ(f.xdp_requests.size(), 1u);  // by verdict, over classes
  EXPECT_EQ(f.xdp_requests[0].name, "admit");
  EXPECT_DOUBLE_EQ(f.xdp_requests[0].total, 15);
  ASSERT_TRUE(f.has_tcp);
  EXPECT_EQ(f.tcp_established, 3);
  EXPECT_EQ(f.tcp_connections, 5);
  ASSERT_EQ(f.tcp.size(), 2u);
  EXPECT_EQ(f.tcp[0].name, "segments_in");
  EXPECT_DOUBLE_EQ(f.tcp[0].rate, 10);  // (10 + 40 - 30) / 2
  EXPECT_EQ(f.tcp[1].name, "retransmits");
  ASSERT_EQ(f.tcp_drops.size(), 1u);
  EXPECT_DOUBLE_EQ(f.tcp_drops[0].rate, 2);
  ASSERT_TRUE(f.has_afxdp);
  EXPECT_EQ(f.afxdp_queues, 2);
  EXPECT_EQ(f.afxdp_zero_copy_queues, 1);
  ASSERT_EQ(f.afxdp.size(), 2u);  // the zero kernel counter is not listed
  EXPECT_EQ(f.afxdp[0].name, "rx_frames");
  EXPECT_DOUBLE_EQ(f.afxdp[0].rate, 100);
  ASSERT_TRUE(f.has_gpu);
  EXPECT_EQ(f.gpu_processes, 2);
  EXPECT_EQ(f.gpu_live_bytes, 2097152);

  RenderOptions o;
  const std::vector<std::string> lines = renderFrame(f, o);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_NE(all.find("XDP     drops    bad_method 5/s"), std::string::npos) << all;
  EXPECT_NE(all.find("TCP     established 3 of 5"), std::string::npos) << all;
  EXPECT_NE(all.find("AF_XDP  zero-copy 1 of 2 queues  rx_frames 100/s"), std::string::npos) << all;
  EXPECT_NE(all.find("GPU     probes on  processes 2"), std::string::npos) << all;
  EXPECT_NE(all.find("live 2.0 MiB"), std::string::npos) << all;
}

TEST(TopFrame, SocketModeHasNoXdpTcpOrGpuLines) {
  const Snapshot s0 = snap(kScrape0), s1 = snap(kScrape1);
  const Frame f = computeFrame(&s0, s1, 1);
  EXPECT_FALSE(f.has_xdp || f.has_tcp || f.has_afxdp || f.has_gpu);
  std::string all;
  for (const auto& l : renderFrame(f, RenderOptions{})) all += l + "\n";
  EXPECT_EQ(all.find("XDP"), std::string::npos);
  EXPECT_EQ(all.find("GPU"), std::string::npos);
}

TEST(TopSort, ByEachKey) {
  std::vector<ModelRow> rows(3);
  rows[0].model = "b";
  rows[0].rate = 5;
  rows[0].p99 = 0.3;
  rows[0].error_rate = 0;
  rows[1].model = "a";
  rows[1].rate = 50;
  rows[1].p99 = std::numeric_limits<double>::quiet_NaN();
  rows[1].error_rate = 1;
  rows[2].model = "c";
  rows[2].rate = 5;
  rows[2].p99 = 0.1;
  rows[2].error_rate = 2;
  auto order = [&rows](SortKey k) {
    sortRows(rows, k);
    std::string s;
    for (const auto& r : rows) s += r.model;
    return s;
  };
  EXPECT_EQ(order(SortKey::kRate), "abc");  // 50, then the tie 5/5 by name
  EXPECT_EQ(order(SortKey::kP99), "bca");   // NaN last
  EXPECT_EQ(order(SortKey::kErrors), "cab");
  EXPECT_EQ(order(SortKey::kName), "abc");
  SortKey k;
  EXPECT_TRUE(parseSortKey("p99", k));
  EXPECT_EQ(k, SortKey::kP99);
  EXPECT_FALSE(parseSortKey("bogus", k));
}

TEST(TopRender, HostileLabelsCannotReachTheTerminal) {
  // A model name carrying an escape sequence (clear screen) and a non-ASCII byte.
  const std::string body =
      "infergate_requests_total{code=\"200\",model=\"evil\x1b[2J\xc3\xa9\",protocol=\"kserve_"
      "http\"} 1\n";
  const Snapshot s = snap(body);
  const Frame f = computeFrame(nullptr, s, 0);
  for (const std::string& l : renderFrame(f, RenderOptions{})) {
    for (char c : l) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "byte " << static_cast<int>(c) << " in: " << l;
    }
  }
  EXPECT_EQ(printable("a\x1b[2J\xc3\xa9", 100), "a?[2J??");
  EXPECT_EQ(printable("abcdef", 4), "abc~");
}

TEST(TopRender, FitsTheWidthAndHeight) {
  std::string body;
  for (int i = 0; i < 30; ++i) {
    body += "infergate_requests_total{code=\"200\",model=\"m" + std::to_string(i) +
            "\",protocol=\"kserve_http\"} " + std::to_string(i + 1) + "\n";
  }
  const Snapshot s = snap(body);
  const Frame f = computeFrame(nullptr, s, 0);
  RenderOptions o;
  o.width = 40;
  o.height = 15;
  o.status = "q quit";
  const std::vector<std::string> lines = renderFrame(f, o);
  // header, blank, column titles, 9 model rows, "... 21 more", blank, status: the 15 rows.
  ASSERT_EQ(lines.size(), 15u);
  EXPECT_EQ(lines[12], "  ... 21 more row(s)");
  for (const auto& l : lines) EXPECT_LE(l.size(), 40u) << l;
  EXPECT_EQ(lines.back(), "q quit");
  bool more = false;
  for (const auto& l : lines) more |= l.find("more row(s)") != std::string::npos;
  EXPECT_TRUE(more);
}

TEST(TopRender, Formats) {
  EXPECT_EQ(formatRate(0), "0");
  EXPECT_EQ(formatRate(2.5), "2.5");
  EXPECT_EQ(formatRate(512), "512");
  EXPECT_EQ(formatRate(1234), "1234");
  EXPECT_EQ(formatRate(12345.6), "12.3k");
  EXPECT_EQ(formatRate(3.4e6), "3.4M");
  EXPECT_EQ(formatRate(std::numeric_limits<double>::quiet_NaN()), "-");
  EXPECT_EQ(formatSeconds(0.000045), "45us");
  EXPECT_EQ(formatSeconds(0.0012), "1.2ms");
  EXPECT_EQ(formatSeconds(3.4), "3.40s");
}

}  // namespace
}  // namespace infergate::app::top
