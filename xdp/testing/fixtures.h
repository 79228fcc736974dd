#pragma once
// The XDP ingress fixture table: {description, input frame, expected verdict, reason, tag
// class and flags, expected output frame for XDP_TX}. Run through BPF_PROG_TEST_RUN
// (tests/bpf), through the host-compiled classifier (tests/unit/xdp) and timed by
// bench/xdp. All fixtures assume fixtureOptions().

#include <cstdint>
#include <string>
#include <vector>

#include "xdp/testing/packet_builder.h"
#include "xdp/xdp_options.h"

namespace infergate::xdp::testing {

struct Fixture {
  std::string name;
  std::string group;            // benchmark class: non_service, syn, segment, request_h1, ...
  PacketSpec spec;
  std::vector<uint8_t> packet;
  int action = 0;               // XDP_*
  int reason = 0;               // enum ig_reason
  int cls = -1;                 // for IG_R_REQUEST: the class in the tag
  uint8_t tag_flags = 0;        // for service passes: flags in the tag
  bool first_segment = false;   // a SYN for the same flow (seq - 1) is run first
  std::vector<uint8_t> syn;     // that SYN
  std::vector<uint8_t> expected_out;  // for XDP_TX: the RST
};

// Service ports 8000 and 8001; methods GET, POST; prefixes /v2/, /v1/models/, /metrics;
// class rule /v2/models/urgent -> 0; default class 1; RSTs on; flows tracked; tags auto
// (metadata where the kernel accepts it; else none, since nothing is redirected).
// `o` asking for tags in XDP metadata: a load fails with "xdp.tags: metadata: ..." where the
// kernel cannot write metadata (loadOrSkip skips the test, saying so).
inline XdpOptions withMetadata(XdpOptions o) {
  o.tags = XdpOptions::TagPlacement::kMetadata;
  return o;
}
XdpOptions fixtureOptions();

const std::vector<Fixture>& fixtures();

}  // namespace infergate::xdp::testing
