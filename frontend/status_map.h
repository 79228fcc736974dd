#pragma once
// The one mapping from a status code to an HTTP status, for every protocol: KServe REST, TF
// Serving REST, and the HTTP status label of gRPC calls in the metrics. The table is in
// docs/ERRORS.md ("Status mapping"); tests/unit/frontend/status_map_test.cc checks every code.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "frontend/http.h"

namespace infergate::frontend {

// INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE 400; UNAUTHENTICATED 401;
// PERMISSION_DENIED 403; NOT_FOUND 404; ALREADY_EXISTS, ABORTED 409; RESOURCE_EXHAUSTED 429;
// CANCELLED 499 (the client went away); UNIMPLEMENTED 501; UNAVAILABLE 503;
// DEADLINE_EXCEEDED 504; UNKNOWN, INTERNAL, DATA_LOSS 500; OK 200.
int httpStatusForCode(absl::StatusCode code);
inline int httpStatusFor(const absl::Status& status) { return httpStatusForCode(status.code()); }

// Retry-After (docs/ERRORS.md "Retry-After"): the hint a refusal carries (backends/retry_after.h:
// queue refusals and sheds, tenant limits, the ingress filter's refusals), in whole seconds
// 1..60; nullopt when it carries none.
std::optional<uint32_t> retryAfterFor(const absl::Status& status);

// The HTTP answer of a failed request: httpStatusFor(status), KServe's {"error":"<message>"}
// body, and a `Retry-After: <seconds>` header when the status carries a hint.
HttpResponse httpErrorResponse(const absl::Status& status);

// gRPC carries the hint in the call's trailing metadata (Trailers-Only for errors before any
// message): `retry-after: <seconds>`, and gRPC's own `grpc-retry-pushback-ms: <milliseconds>`,
// which gRPC clients with a retry policy honour as the delay before their next attempt.
inline constexpr std::string_view kGrpcRetryAfterKey = "retry-after";
inline constexpr std::string_view kGrpcRetryPushbackKey = "grpc-retry-pushback-ms";

}  // namespace infergate::frontend
