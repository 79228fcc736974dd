// Issue 13, item 6: one status mapping for every protocol (docs/ERRORS.md). Before, CANCELLED
// was 400 for KServe REST, 499 for gRPC metrics and TF Serving REST, and ALREADY_EXISTS,
// PERMISSION_DENIED, UNAUTHENTICATED and UNKNOWN differed between KServe and TF Serving.
#include "frontend/status_map.h"

#include <gtest/gtest.h>

#include <set>

namespace infergate::frontend {
namespace {

TEST(StatusMap, EveryCodeAsDocumented) {
  using C = absl::StatusCode;
  const std::pair<C, int> table[] = {
      {C::kOk, 200},
      {C::kCancelled, 499},
      {C::kUnknown, 500},
      {C::kInvalidArgument, 400},
      {C::kDeadlineExceeded, 504},
      {C::kNotFound, 404},
      {C::kAlreadyExists, 409},
      {C::kPermissionDenied, 403},
      {C::kResourceExhausted, 429},
      {C::kFailedPrecondition, 400},
      {C::kAborted, 409},
      {C::kOutOfRange, 400},
      {C::kUnimplemented, 501},
      {C::kInternal, 500},
      {C::kUnavailable, 503},
      {C::kDataLoss, 500},
      {C::kUnauthenticated, 401},
  };
  std::set<int> codes;
  for (const auto& [code, http] : table) {
    EXPECT_EQ(httpStatusForCode(code), http) << absl::StatusCodeToString(code);
    EXPECT_EQ(httpStatusFor(absl::Status(code, code == C::kOk ? "" : "x")), http)
        << absl::StatusCodeToString(code);
    codes.insert(static_cast<int>(code));
  }
  EXPECT_EQ(codes.size(), 17u);  // every absl code is in the table
}

}  // namespace
}  // namespace infergate::frontend
