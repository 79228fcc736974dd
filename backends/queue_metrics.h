#pragma once
// A server's own queue depth, read from its Prometheus /metrics page, for queue-depth aware
// endpoint picking (backends/pool.h; docs/BACKENDS.md "Queue-depth aware picking").
//
// Built on two pieces usable on their own: the blocking HTTP/1.1 GET and URL parser
// (backends/http_client.h) and the Prometheus text parser (backends/prometheus_text.h).
// Every failure (refused, timeout, HTTP status, framing, unparsable text) is a status; nothing
// throws, and a missing metric is "no reading" (an empty optional), not an error.
//
// Threading: QueueDepthSource::read() blocks for up to its timeout; call it from a background
// thread (the pool's metrics thread), never from the data path.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "backends/http_client.h"

namespace infergate::backends {

// Triton's per-model gauge of requests waiting in its scheduler queue.
inline constexpr char kTritonPendingMetric[] = "nv_inference_pending_request_count";

// Where a pool endpoint's queue depth comes from (a fake in tests).
class QueueDepthSource {
 public:
  virtual ~QueueDepthSource() = default;
  virtual const std::string& url() const = 0;  // for logs and messages
  // Blocking. OK with a value: the server's queue depth now; OK and empty: the page has no
  // reading for the model; an error: the scrape failed.
  virtual absl::StatusOr<std::optional<double>> read() = 0;
};

// Triton's /metrics: GET `url` within `timeout_ms`, expect 200, and sum
// nv_inference_pending_request_count over the samples with model="<model>" (and
// version="<version>" when `version` is not empty).
std::unique_ptr<QueueDepthSource> makeTritonQueueDepthSource(HttpUrl url, std::string model,
                                                             std::string version,
                                                             uint64_t timeout_ms);

}  // namespace infergate::backends
