#include "common/check.h"

#include <cstdio>
#include <cstdlib>

#include "common/metrics.h"
#include "spdlog/spdlog.h"

namespace infergate::common {

void fatal(std::string_view msg) {
  std::fprintf(stderr, "infergate: fatal: %.*s\n", static_cast<int>(msg.size()), msg.data());
  std::fflush(stderr);
  std::abort();
}

void checkFailed(const char* file, int line, const char* condition, std::string_view msg) {
  fatal(fmt::format("{}:{}: check failed: {}: {}", file, line, condition, msg));
}

Anomaly::Anomaly(std::string name)
    : name_(std::move(name)),
      counter_(MetricsRegistry::global().counter(
          "infergate_anomalies_total",
          "Should-never-happen events the process survived, by kind (the first of each kind "
          "is logged).",
          {{"what", name_}})) {}

void Anomaly::record(std::string_view what) {
  counter_.inc();
  if (!logged_.exchange(true, std::memory_order_relaxed)) {
    spdlog::warn("anomaly {} (counted in infergate_anomalies_total, logged once): {}", name_, what);
  }
}

uint64_t Anomaly::count() const { return counter_.value(); }

}  // namespace infergate::common
