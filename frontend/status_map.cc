#include "frontend/status_map.h"

#include "backends/retry_after.h"

namespace infergate::frontend {

int httpStatusForCode(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted: return 409;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    case absl::StatusCode::kUnknown:
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
    default: return 500;
  }
}

std::optional<uint32_t> retryAfterFor(const absl::Status& status) {
  return backends::retryAfterOf(status);
}

HttpResponse httpErrorResponse(const absl::Status& status) {
  HttpResponse r;
  r.status = httpStatusFor(status);
  r.body = errorBody(std::string(status.message()));
  if (std::optional<uint32_t> s = retryAfterFor(status)) {
    r.headers.push_back({"Retry-After", std::to_string(*s)});
  }
  return r;
}

}  // namespace infergate::frontend
