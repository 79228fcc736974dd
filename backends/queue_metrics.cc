#include "backends/queue_metrics.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "backends/prometheus_text.h"

namespace infergate::backends {
namespace {

class TritonQueueDepthSource : public QueueDepthSource {
 public:
  TritonQueueDepthSource(HttpUrl url, std::string model, std::string version, uint64_t timeout_ms)
      : url_(std::move(url)), url_str_(url_.str()), timeout_ms_(timeout_ms) {
    match_.emplace_back("model", std::move(model));
    if (!version.empty()) match_.emplace_back("version", std::move(version));
  }
  const std::string& url() const override { return url_str_; }

  absl::StatusOr<std::optional<double>> read() override {
    absl::StatusOr<HttpResponse> r = httpGet(url_, timeout_ms_);
    if (!r.ok()) return r.status();
    if (r->status != 200) {
      return absl::UnavailableError(fmt::format("HTTP status {}", r->status));
    }
    return sumMetricSamples(r->body, kTritonPendingMetric, match_);
  }

 private:
  HttpUrl url_;
  std::string url_str_;
  uint64_t timeout_ms_;
  std::vector<std::pair<std::string, std::string>> match_;
};

}  // namespace

std::unique_ptr<QueueDepthSource> makeTritonQueueDepthSource(HttpUrl url, std::string model,
                                                             std::string version,
                                                             uint64_t timeout_ms) {
  return std::make_unique<TritonQueueDepthSource>(std::move(url), std::move(model),
                                                  std::move(version), timeout_ms);
}

}  // namespace infergate::backends
