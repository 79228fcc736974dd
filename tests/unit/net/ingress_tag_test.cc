// The one decoder of the XDP program's tag (net::IngressTag::fromProgram), used by both the
// afxdp path (Frame::meta) and the xdp-filter path (the flow map).
#include "net/ingress_tag.h"

#include <gtest/gtest.h>

namespace infergate::net {
namespace {

TEST(IngressTag, DecodesEveryVerdict) {
  EXPECT_EQ(IngressTag::fromProgram(0, 0, 5).verdict, IngressTag::Verdict::kAdmit);
  EXPECT_EQ(IngressTag::fromProgram(0, 1, 5).verdict, IngressTag::Verdict::kRateLimited);
  EXPECT_EQ(IngressTag::fromProgram(0, 2, 5).verdict, IngressTag::Verdict::kOverload);
  EXPECT_FALSE(IngressTag::fromProgram(0, 0, 5).refused());
  EXPECT_TRUE(IngressTag::fromProgram(0, 1, 5).refused());
  EXPECT_TRUE(IngressTag::fromProgram(0, 2, 5).refused());
  EXPECT_EQ(IngressTag::fromProgram(2, 0, 12345).rx_ns, 12345u);
}

TEST(IngressTag, UnknownVerdictAdmits) {
  // The program never writes one; userspace then judges the request itself.
  EXPECT_EQ(IngressTag::fromProgram(0, 3, 0).verdict, IngressTag::Verdict::kAdmit);
  EXPECT_EQ(IngressTag::fromProgram(0, 255, 0).verdict, IngressTag::Verdict::kAdmit);
}

TEST(IngressTag, ClassOutOfRangeIsTheDefaultClass) {
  for (int c = 0; c < kPriorityClasses; ++c) {
    EXPECT_EQ(IngressTag::fromProgram(static_cast<uint8_t>(c), 0, 0).priority_class, c);
  }
  EXPECT_EQ(IngressTag::fromProgram(kPriorityClasses, 0, 0).priority_class, 1);
  EXPECT_EQ(IngressTag::fromProgram(255, 0, 0).priority_class, 1);
}

}  // namespace
}  // namespace infergate::net
