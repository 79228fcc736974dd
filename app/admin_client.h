#pragma once
// A small blocking HTTP/1.1 GET of a running gateway's admin listener, for the commands that
// read it (`infergate gpu`: /admin/gpu; `infergate top`: /metrics). Moved here from
// app/gpu_watch.cc (issue 19) so both share one client.
//
// What the listener sends is untrusted: the whole exchange has one deadline (a peer that
// trickles bytes cannot hold the command), the response is bounded (`max_body_bytes`; more is
// an error, never a silently truncated body), and only a Content-Length or read-to-close body
// is accepted (chunked is refused with a clear error).
//
// Threading: no shared state; call from any thread.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace infergate::app {

struct AdminResponse {
  int status = 0;    // the HTTP status code (100..599)
  std::string body;  // the body, at most max_body_bytes
};

struct AdminGetOptions {
  size_t max_body_bytes = 16u << 20;
  uint64_t timeout_ms = 2000;  // connect + send + the whole response
};

// GET `target` from `admin` ("host:port", "[v6]:port"). Errors: InvalidArgument for a bad
// address, Unavailable when it cannot connect / times out / the answer is not HTTP,
// ResourceExhausted when the response exceeds max_body_bytes. A non-200 status is returned in
// AdminResponse::status, not as an error.
absl::StatusOr<AdminResponse> adminGet(const std::string& admin, const std::string& target,
                                       const AdminGetOptions& options = {});

}  // namespace infergate::app
