// The stack's checksum (dataplane/tcp/packet.h checksumPartial, eight bytes a step) against
// the reference four-bytes-a-step ig_csum_partial of common/checksum.h: every length and
// alignment, random and extreme bytes, with and without a carried-in sum.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "common/checksum.h"
#include "dataplane/tcp/packet.h"

namespace infergate::dataplane::tcp {
namespace {

TEST(TcpChecksum, EqualsReferenceForEveryLengthAndAlignment) {
  std::mt19937 rng(15);
  std::vector<uint8_t> buf(2048 + 16);
  for (int pass = 0; pass < 3; ++pass) {
    for (auto& b : buf) {
      b = pass == 0 ? static_cast<uint8_t>(rng()) : pass == 1 ? 0xff : static_cast<uint8_t>(rng() & 1 ? 0xff : 0);
    }
    for (size_t off = 0; off < 8; ++off) {
      for (size_t len = 0; len <= 2048; len += (len < 80 ? 1 : 37)) {
        for (uint32_t sum : {0u, 1u, 0xffffu, 0x12345u, 0xfffffff0u}) {
          ASSERT_EQ(checksumPartial(buf.data() + off, len, sum), ig_csum_partial(buf.data() + off, len, sum))
              << "pass " << pass << " off " << off << " len " << len << " sum " << sum;
        }
      }
    }
  }
}

TEST(TcpChecksum, BuiltSegmentsVerify) {
  // A segment the builder checksums parses with verification on, and a flipped payload bit
  // is caught.
  FlowKey k;
  k.local_ip[0] = 10, k.local_ip[3] = 1, k.remote_ip[0] = 10, k.remote_ip[3] = 2;
  k.local_port = 8000;
  k.remote_port = 40000;
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 1};
  for (uint32_t len : {0u, 1u, 7u, 8u, 33u, 1448u}) {
    SegmentSpec s;
    s.src_mac = mac;
    s.dst_mac = mac;
    s.key = &k;
    s.flags = kAck;
    s.has_ts = true;
    std::vector<uint8_t> payload(len);
    for (uint32_t i = 0; i < len; ++i) payload[i] = static_cast<uint8_t>(i * 7 + 3);
    std::vector<uint8_t> f(1600);
    f.resize(buildSegment(f.data(), f.size(), s, payload.data(), len));
    Segment seg;
    DropReason why{};
    ASSERT_EQ(parseFrame(f.data(), f.size(), true, seg, why), FrameKind::kTcp) << len;
    if (len > 0) {
      f.back() ^= 0x10;
      ASSERT_EQ(parseFrame(f.data(), f.size(), true, seg, why), FrameKind::kDropped) << len;
      EXPECT_EQ(why, DropReason::kBadTcpChecksum);
    }
  }
}

}  // namespace
}  // namespace infergate::dataplane::tcp
