// ServerMetrics: models known at start-up and added by a configuration reload get their own
// series; requests for unknown models go to model=""; adding is safe while reactors record.
#include "frontend/server_metrics.h"

#include <gtest/gtest.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

namespace infergate::frontend {
namespace {

uint64_t requests(common::MetricsRegistry& r, const std::string& model, const std::string& code) {
  return r.counter("infergate_requests_total", "Requests answered, by model, protocol and status code.",
                   {{"model", model}, {"protocol", "kserve_http"}, {"code", code}})
      .value();
}

TEST(ServerMetrics, StartUpModelsHaveTheirIndexAndSeries) {
  common::MetricsRegistry r;
  ServerMetrics m(r, {"a", "b"});
  EXPECT_EQ(m.modelIndex("a"), 0);
  EXPECT_EQ(m.modelIndex("b"), 1);
  EXPECT_EQ(m.modelIndex("c"), -1);
  m.recordRequest(1, net::Protocol::kHttpKserve, 200, 1000);
  m.recordRequest(-1, net::Protocol::kHttpKserve, 404, 1000);
  m.recordRequest(7, net::Protocol::kHttpKserve, 200, 1000);  // out of range: model=""
  EXPECT_EQ(requests(r, "b", "200"), 1u);
  EXPECT_EQ(requests(r, "", "404"), 1u);
  EXPECT_EQ(requests(r, "", "200"), 1u);
  EXPECT_EQ(requests(r, "a", "200"), 0u);
}

TEST(ServerMetrics, AModelAddedByAReloadIsCountedUnderItsName) {
  common::MetricsRegistry r;
  ServerMetrics m(r, {"a"});
  EXPECT_EQ(m.addModel("new"), 1);
  EXPECT_EQ(m.addModel("new"), 1);  // known: same index, no second row
  EXPECT_EQ(m.addModel("a"), 0);
  ASSERT_EQ(m.modelIndex("new"), 1);
  m.recordRequest(m.modelIndex("new"), net::Protocol::kHttpKserve, 200, 1000);
  EXPECT_EQ(requests(r, "new", "200"), 1u);
  EXPECT_EQ(requests(r, "", "200"), 0u);
}

TEST(ServerMetrics, RowsAreBounded) {
  common::MetricsRegistry r;
  ServerMetrics m(r, {});
  for (size_t i = 0; i < ServerMetrics::kMaxModels; ++i) {
    ASSERT_EQ(m.addModel("m" + std::to_string(i)), static_cast<int>(i));
  }
  EXPECT_EQ(m.addModel("one-too-many"), -1);
  EXPECT_EQ(m.modelIndex("one-too-many"), -1);
  EXPECT_EQ(m.modelIndex("m1023"), 1023);
}

TEST(ServerMetrics, AddingWhileOtherThreadsRecordAndLookUp) {
  common::MetricsRegistry r;
  ServerMetrics m(r, {"a"});
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> recorded{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        for (int i = 0; i < 50; ++i) {
          const int idx = m.modelIndex("m" + std::to_string(i));
          m.recordRequest(idx, net::Protocol::kHttpKserve, 200, 10);
          recorded.fetch_add(1);
        }
      }
    });
  }
  for (int i = 0; i < 50; ++i) m.addModel("m" + std::to_string(i));
  stop = true;
  for (std::thread& t : readers) t.join();
  uint64_t total = requests(r, "", "200");
  for (int i = 0; i < 50; ++i) total += requests(r, "m" + std::to_string(i), "200");
  EXPECT_EQ(total, recorded.load());  // every request counted exactly once, in some row
}

}  // namespace
}  // namespace infergate::frontend
