#pragma once
// For gtest BPF tests: load the ingress program or skip when the kernel refuses BPF to this
// process. Header-only (it needs gtest; the benchmarks that share xdp/testing do not).

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "xdp/xdp_filter.h"

namespace infergate::xdp::testing {

// The load asked for tags in XDP metadata (XdpOptions::TagPlacement::kMetadata) and this kernel
// cannot write them (it refuses bpf_xdp_adjust_meta): a test of the metadata path skips, saying
// so; the prefix path is tested on its own.
inline bool metadataRefused(const absl::Status& s) {
  return s.code() == absl::StatusCode::kFailedPrecondition &&
         s.message().rfind("xdp.tags: metadata:", 0) == 0;
}

// Loads `opts`; nullptr with *skip set when the kernel refuses BPF or the metadata `opts` ask
// for (the test skips saying what it needs), nullptr with a test failure for any other error.
inline std::unique_ptr<XdpFilter> loadOrSkip(const XdpOptions& opts, std::string* skip) {
  auto f = XdpFilter::load(opts);
  if (!f.ok()) {
    if (metadataRefused(f.status())) {
      *skip = "the metadata path: " + std::string(f.status().message());
      return nullptr;
    }
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

// In a test body that reads the tag from XDP metadata under BPF_PROG_TEST_RUN: skips, saying
// why, when `filter` was loaded with another placement (a kernel that refuses metadata; the
// prefix placement is tested with a bound socket: tests/bpf/xsk_redirect_test.cc).
#define SKIP_WITHOUT_METADATA_TAGS(filter)                                                   \
  if ((filter).tagMode() != IG_TAG_META)                                                   \
  GTEST_SKIP() << "the metadata path: this test reads the tag from XDP metadata, and the "  \
                  "program was loaded with tags "                                          \
               << ((filter).tagMode() == IG_TAG_PREFIX ? "in a prefix" : "off") << " ("    \
               << (filter).tagReason() << ")"
