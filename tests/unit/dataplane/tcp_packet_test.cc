// The stack's checksum (dataplane/tcp/packet.h checksumPartial, eight bytes a step) against
// the reference four-bytes-a-step ig_csum_partial of common/checksum.h: every length and
// alignment, random and extreme bytes, with and without a carried-in sum. The checksum offload
// form (pseudo-header sum only) and verification of each checksum apart.
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

// TxChecksum::kOffload (a NIC completes the sums, packet_io.h kMetaTxChecksumOffload): the
// IPv4 header checksum is 0 and the TCP field holds exactly the pseudo-header sum, computed here
// from the RFC 793 / RFC 8200 pseudo-header bytes with the reference ig_csum_partial; summing
// the segment onto it (what the NIC does) gives the checksum the software path writes.
TEST(TcpChecksum, OffloadLeavesThePseudoHeaderSumForTheNic) {
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 1};
  for (bool v6 : {false, true}) {
    FlowKey k;
    k.v6 = v6;
    for (int i = 0; i < (v6 ? 16 : 4); ++i) {
      k.local_ip[i] = static_cast<uint8_t>(0xfd + i * 3);
      k.remote_ip[i] = static_cast<uint8_t>(0x10 + i * 5);
    }
    k.local_port = 8000;
    k.remote_port = 40000;
    SegmentSpec s;
    s.src_mac = mac;
    s.dst_mac = mac;
    s.key = &k;
    s.flags = kAck | kPsh;
    s.seq = 0x01020304;
    std::vector<uint8_t> payload(333);
    for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<uint8_t>(i * 11 + 1);
    std::vector<uint8_t> soft(1600), off(1600);
    soft.resize(buildSegment(soft.data(), soft.size(), s, payload.data(), 333));
    off.resize(buildSegment(off.data(), off.size(), s, payload.data(), 333, TxChecksum::kOffload));
    ASSERT_EQ(off.size(), soft.size());
    const size_t l3 = v6 ? 40 : 20, tcp = kEthHeader + l3;
    const uint32_t tcp_len = static_cast<uint32_t>(soft.size() - tcp);
    // The pseudo-header, byte by byte: src, dst, (zero, protocol 6, TCP length) as IPv4 has it,
    // or (32-bit length, three zero bytes, next header 6) as IPv6 has it.
    std::vector<uint8_t> ph;
    const size_t alen = v6 ? 16 : 4;
    ph.insert(ph.end(), k.local_ip, k.local_ip + alen);
    ph.insert(ph.end(), k.remote_ip, k.remote_ip + alen);
    if (v6) {
      ph.insert(ph.end(), {0, 0, static_cast<uint8_t>(tcp_len >> 8), static_cast<uint8_t>(tcp_len),
                           0, 0, 0, 6});
    } else {
      ph.insert(ph.end(),
                {0, 6, static_cast<uint8_t>(tcp_len >> 8), static_cast<uint8_t>(tcp_len)});
    }
    uint32_t sum = ig_csum_partial(ph.data(), ph.size(), 0);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    EXPECT_EQ(off[tcp + 16] << 8 | off[tcp + 17], sum) << (v6 ? "v6" : "v4");
    if (!v6) {
      EXPECT_EQ(off[kEthHeader + 10] << 8 | off[kEthHeader + 11], 0) << "left to the NIC";
    }
    // Everything but the checksums is the same frame.
    std::vector<uint8_t> a = soft, b = off;
    for (auto* f : {&a, &b}) {
      (*f)[tcp + 16] = (*f)[tcp + 17] = 0;
      if (!v6) (*f)[kEthHeader + 10] = (*f)[kEthHeader + 11] = 0;
    }
    EXPECT_EQ(a, b);
    // The NIC's work: the TCP segment summed onto the field, complemented.
    const uint16_t nic = ig_csum_fold(ig_csum_partial(off.data() + tcp, tcp_len, 0));
    EXPECT_EQ(nic, soft[tcp + 16] << 8 | soft[tcp + 17]);
    Segment seg;
    DropReason why{};
    EXPECT_EQ(parseFrame(off.data(), off.size(), true, seg, why), FrameKind::kDropped);
    EXPECT_EQ(why, v6 ? DropReason::kBadTcpChecksum : DropReason::kBadIpChecksum);
  }
}

// Each checksum is verified on its own: the stack skips only the one the NIC vouched for.
TEST(TcpChecksum, IpAndTcpVerificationChosenApart) {
  FlowKey k;
  k.local_ip[0] = 10, k.local_ip[3] = 1, k.remote_ip[0] = 10, k.remote_ip[3] = 2;
  k.local_port = 8000;
  k.remote_port = 40000;
  const uint8_t mac[6] = {2, 0, 0, 0, 0, 1};
  SegmentSpec s;
  s.src_mac = mac;
  s.dst_mac = mac;
  s.key = &k;
  s.flags = kAck;
  std::vector<uint8_t> f(200);
  f.resize(buildSegment(f.data(), f.size(), s, reinterpret_cast<const uint8_t*>("abc"), 3));
  Segment seg;
  DropReason why{};
  std::vector<uint8_t> bad_ip = f, bad_tcp = f;
  bad_ip[kEthHeader + 10] ^= 1;
  bad_tcp.back() ^= 1;
  EXPECT_EQ(parseFrame(bad_ip.data(), bad_ip.size(), true, true, seg, why), FrameKind::kDropped);
  EXPECT_EQ(why, DropReason::kBadIpChecksum);
  EXPECT_EQ(parseFrame(bad_ip.data(), bad_ip.size(), false, true, seg, why), FrameKind::kTcp);
  EXPECT_EQ(parseFrame(bad_tcp.data(), bad_tcp.size(), false, true, seg, why), FrameKind::kDropped);
  EXPECT_EQ(why, DropReason::kBadTcpChecksum);
  EXPECT_EQ(parseFrame(bad_tcp.data(), bad_tcp.size(), true, false, seg, why), FrameKind::kTcp);
  EXPECT_EQ(parseFrame(bad_ip.data(), bad_ip.size(), true, false, seg, why), FrameKind::kDropped);
}

}  // namespace
}  // namespace infergate::dataplane::tcp
