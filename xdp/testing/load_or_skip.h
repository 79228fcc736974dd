#pragma once
// For gtest BPF tests: load the ingress program or skip when the kernel refuses BPF to this
// process. Header-only (it needs gtest; the benchmarks that share xdp/testing do not).

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "xdp/xdp_filter.h"

namespace infergate::xdp::testing {

// Loads `opts`; nullptr with *skip set when the kernel refuses BPF (the test skips saying what
// it needs), nullptr with a test failure for any other error.
inline std::unique_ptr<XdpFilter> loadOrSkip(const XdpOptions& opts, std::string* skip) {
  auto f = XdpFilter::load(opts);
  if (!f.ok()) {
    if (f.status().code() == absl::StatusCode::kPermissionDenied) {
      *skip = "needs root or CAP_BPF+CAP_PERFMON to load BPF programs: " +
              std::string(f.status().message());
      return nullptr;
    }
    ADD_FAILURE() << f.status();
    return nullptr;
  }
  return std::move(*f);
}

}  // namespace infergate::xdp::testing

// In a test body: `LOAD_OR_SKIP(f, opts);` declares f (std::unique_ptr<XdpFilter>) or returns.
#define LOAD_OR_SKIP(var, opts)                                          \
  std::string skip_##var;                                                \
  auto var = ::infergate::xdp::testing::loadOrSkip(opts, &skip_##var);   \
  if (!var) {                                                            \
    if (!skip_##var.empty()) GTEST_SKIP() << skip_##var;                 \
    return;                                                              \
  }
