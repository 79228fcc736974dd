#pragma once
// The Retry-After hint of a refusal (docs/ERRORS.md "Retry-After"): how long a client should
// wait before it tries again, carried explicitly in the absl::Status of the refusal as a
// payload, so every frontend maps it the same way: HTTP/1.1 answers get a `Retry-After: N`
// header, gRPC answers the trailing metadata `retry-after: N` and `grpc-retry-pushback-ms`.
//
// Who sets it: the batcher's queue refusals and sheds (the expected time for the queue ahead
// to drain, PriorityQueues), the tenant limiter (the token bucket's refill time,
// frontend/tenants.h) and the ingress filter's refusals (1 s).
// Threading: plain functions over values.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"

namespace infergate::backends {

// Retry-After values are whole seconds in [kMinRetryAfterSeconds, kMaxRetryAfterSeconds]: a
// hint of 0 would invite an immediate retry storm, and one over a minute is a guess too long
// to be useful (clients fall back to their own backoff).
inline constexpr uint32_t kMinRetryAfterSeconds = 1;
inline constexpr uint32_t kMaxRetryAfterSeconds = 60;

// The payload's type URL (absl::Status::SetPayload); its value is the decimal seconds.
inline constexpr char kRetryAfterPayload[] = "type.infergate.dev/retry-after-seconds";

// A wait of `ns` nanoseconds as a Retry-After value: rounded up to whole seconds, clamped to
// [kMinRetryAfterSeconds, kMaxRetryAfterSeconds].
inline uint32_t retryAfterFromNs(uint64_t ns) {
  const uint64_t s = ns / 1'000'000'000ull + (ns % 1'000'000'000ull != 0 ? 1 : 0);
  if (s < kMinRetryAfterSeconds) return kMinRetryAfterSeconds;
  if (s > kMaxRetryAfterSeconds) return kMaxRetryAfterSeconds;
  return static_cast<uint32_t>(s);
}

// The expected time, in ns, until a request that joins a queue behind `ahead` requests is
// dispatched and done: its batch is the ceil((ahead + 1) / batch_requests)-th, the batches run
// `streams` at a time, each taking `batch_ns`. Saturating; batch_requests and streams 0 count
// as 1.
inline uint64_t drainTimeNs(uint64_t ahead, uint64_t batch_requests, uint64_t streams,
                            uint64_t batch_ns) {
  if (batch_requests == 0) batch_requests = 1;
  if (streams == 0) streams = 1;
  const uint64_t batches = ahead / batch_requests + 1;  // = ceil((ahead + 1) / batch_requests)
  const uint64_t rounds = (batches + streams - 1) / streams;
  if (batch_ns != 0 && rounds > UINT64_MAX / batch_ns) return UINT64_MAX;
  return rounds * batch_ns;
}

// `status` with the hint `seconds` (clamped to the range above) attached. OK stays OK.
inline absl::Status withRetryAfter(absl::Status status, uint32_t seconds) {
  if (status.ok()) return status;
  if (seconds < kMinRetryAfterSeconds) seconds = kMinRetryAfterSeconds;
  if (seconds > kMaxRetryAfterSeconds) seconds = kMaxRetryAfterSeconds;
  status.SetPayload(kRetryAfterPayload, absl::Cord(std::to_string(seconds)));
  return status;
}

// The hint `status` carries (seconds), nullopt when none (or malformed).
inline std::optional<uint32_t> retryAfterOf(const absl::Status& status) {
  if (status.ok()) return std::nullopt;
  const auto p = status.GetPayload(kRetryAfterPayload);  // absl::optional<absl::Cord>
  if (!p) return std::nullopt;
  const std::string s(*p);
  if (s.empty() || s.size() > 3) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v < kMinRetryAfterSeconds || v > kMaxRetryAfterSeconds) return std::nullopt;
  return v;
}

}  // namespace infergate::backends
