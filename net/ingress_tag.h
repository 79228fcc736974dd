#pragma once
// What the ingress filter (the XDP program, xdp/ingress.bpf.c) decided about a connection's
// latest request start: its priority class and whether it was admitted. The program writes it
// as struct ig_tag (xdp/ingress_shared.h): in afxdp mode in front of each frame (packed into
// Frame::meta, dataplane/tcp/frame_tag.h), in xdp-filter mode in the flow map the app reads by
// the connection's addresses. Both paths decode it here, once (fromProgram).

#include <cstdint>

#include "common/priority.h"

namespace infergate::net {

// Priority classes: 0 is the highest. The overload level n admits classes < kPriorityClasses - n.
inline constexpr int kPriorityClasses = common::kPriorityClasses;  // common/priority.h

struct IngressTag {
  // The values are the program's (enum ig_tag_verdict; static_asserts where the two meet).
  enum class Verdict : uint8_t { kAdmit = 0, kRateLimited = 1, kOverload = 2 };
  int priority_class = 1;  // 0 (high) .. kPriorityClasses - 1 (background)
  Verdict verdict = Verdict::kAdmit;
  uint64_t rx_ns = 0;      // CLOCK_MONOTONIC time the program (or the stack) saw the segment

  // Answer without doing any work: 429 (rate limited) or 503 (overload).
  bool refused() const { return verdict != Verdict::kAdmit; }

  // The tag from the program's raw fields: a class out of range is the default class (1), an
  // unknown verdict admits (the program never writes one; userspace judges the request).
  static IngressTag fromProgram(uint8_t cls, uint8_t verdict, uint64_t rx_ns) {
    IngressTag t;
    t.priority_class = cls < kPriorityClasses ? cls : 1;
    t.verdict = verdict == static_cast<uint8_t>(Verdict::kRateLimited) ? Verdict::kRateLimited
                : verdict == static_cast<uint8_t>(Verdict::kOverload)  ? Verdict::kOverload
                                                                       : Verdict::kAdmit;
    t.rx_ns = rx_ns;
    return t;
  }
};

}  // namespace infergate::net
