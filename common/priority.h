#pragma once
// infergate's priority classes, the one definition every layer uses: the XDP program's tag
// (IG_NUM_CLASSES in xdp/ingress_shared.h is checked against it), the ingress tag, the
// overload level and the batcher's mapping to Triton levels (docs/BATCHING.md "Priority").
// 0 is the highest class; the overload level n admits classes < kPriorityClasses - n.

namespace infergate::common {

inline constexpr int kPriorityClasses = 4;  // 0 high, 1 normal, 2 low, 3 background

}  // namespace infergate::common
