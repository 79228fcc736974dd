#pragma once
// The one mapping from a status code to an HTTP status, for every protocol: KServe REST, TF
// Serving REST, and the HTTP status label of gRPC calls in the metrics. The table is in
// docs/ERRORS.md ("Status mapping"); tests/unit/frontend/status_map_test.cc checks every code.

#include "absl/status/status.h"

namespace infergate::frontend {

// INVALID_ARGUMENT, FAILED_PRECONDITION, OUT_OF_RANGE 400; UNAUTHENTICATED 401;
// PERMISSION_DENIED 403; NOT_FOUND 404; ALREADY_EXISTS, ABORTED 409; RESOURCE_EXHAUSTED 429;
// CANCELLED 499 (the client went away); UNIMPLEMENTED 501; UNAVAILABLE 503;
// DEADLINE_EXCEEDED 504; UNKNOWN, INTERNAL, DATA_LOSS 500; OK 200.
int httpStatusForCode(absl::StatusCode code);
inline int httpStatusFor(const absl::Status& status) { return httpStatusForCode(status.code()); }

}  // namespace infergate::frontend
