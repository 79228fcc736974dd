#pragma once
// A minimal blocking HTTP/1.1 client for scraping metrics pages (the queue-depth source,
// backends/queue_metrics.h):
//  - parseHttpUrl(): `http://host:port[/path]` (plain http only; the config validates with it);
//  - httpGet(): one blocking HTTP/1.1 GET over a plain socket with an overall deadline,
//    `Connection: close`, a cap on the body, and content-length, chunked or close-delimited
//    framing.
// Every failure (refused, timeout, framing, limits) is a status; nothing throws.
//
// Threading: all functions are thread-safe (no shared state). httpGet() blocks for up to its
// timeout; call it from a background thread, never from the data path.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace infergate::backends {

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

}  // namespace infergate::backends
