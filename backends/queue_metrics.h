#pragma once
// A server's own queue depth, read from its Prometheus /metrics page, for queue-depth aware
// endpoint picking (backends/pool.h; docs/BACKENDS.md "Queue-depth aware picking").
//
// Three small pieces, usable on their own:
//  - parseHttpUrl(): `http://host:port[/path]` (plain http only; the config validates with it);
//  - httpGet(): one blocking HTTP/1.1 GET over a plain socket with an overall deadline,
//    `Connection: close`, a cap on the body, and content-length, chunked or close-delimited
//    framing;
//  - sumMetricSamples(): a Prometheus text-format (0.0.4) parser that sums the samples of one
//    metric whose labels match.
// Every failure (refused, timeout, HTTP status, framing, unparsable text) is a status; nothing
// throws, and a missing metric is "no reading" (an empty optional), not an error.
//
// Threading: all functions are thread-safe (no shared state). QueueDepthSource::read() blocks
// for up to its timeout; call it from a background thread (the pool's metrics thread), never
// from the data path.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace infergate::backends {

// Triton's per-model gauge of requests waiting in its scheduler queue.
inline constexpr char kTritonPendingMetric[] = "nv_inference_pending_request_count";
// Default cap on a metrics page (a Triton with many models exposes a few hundred KiB).
inline constexpr size_t kMaxMetricsBodyBytes = 4u << 20;

struct HttpUrl {
  std::string host;  // as written: a name, an IPv4 literal or a bracketed IPv6 literal "[::1]"
  uint16_t port = 0;
  std::string path;  // starts with '/'; "/" when the URL has none

  std::string hostPort() const;  // "host:port" (the Host header)
  std::string str() const;       // "http://host:port/path"
};

// Parses `http://host:port[/path]`: the scheme must be http (https and others are refused), the
// port is required (1..65535), the host is a name of [A-Za-z0-9.-] or an IP literal (IPv6 in
// brackets); no user info, no fragment, no spaces or control characters. The message says
// what is wrong (the caller adds where).
absl::StatusOr<HttpUrl> parseHttpUrl(std::string_view url);

struct HttpResponse {
  int status = 0;
  std::string body;  // de-chunked
};

// One GET of `url.path` at `url.hostPort()` with `Connection: close`. The whole exchange
// (name resolution excepted, which uses getaddrinfo) finishes within `timeout_ms` or returns
// DEADLINE_EXCEEDED. Errors: UNAVAILABLE (resolve/connect/reset), DEADLINE_EXCEEDED,
// RESOURCE_EXHAUSTED (body over `max_body_bytes`, or headers over 64 KiB), DATA_LOSS (bad or
// truncated framing). Any HTTP status is returned as a response (the caller judges it).
absl::StatusOr<HttpResponse> httpGet(const HttpUrl& url, uint64_t timeout_ms,
                                     size_t max_body_bytes = kMaxMetricsBodyBytes);

// Sum of the values of the samples named `metric` in Prometheus text `text` whose labels include
// every (name, value) in `match` (label values compared after unescaping). NaN samples are
// skipped. Empty optional: no matching (non-NaN) sample. INVALID_ARGUMENT naming the line when
// a line is not valid exposition syntax.
absl::StatusOr<std::optional<double>> sumMetricSamples(
    std::string_view text, std::string_view metric,
    const std::vector<std::pair<std::string, std::string>>& match);

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
