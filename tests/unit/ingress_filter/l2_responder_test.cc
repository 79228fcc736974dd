// dpdk mode's ARP / ICMP / ICMPv6 answers through the FilteringDevice: exact reply bytes,
// valid checksums, frames for other addresses and other protocols dropped and counted, the
// per-burst reply budget, no transmit frame.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <cstring>
#include <string>

#include "common/checksum.h"
#include "tests/unit/ingress_filter/test_rig.h"
#include "xdp/testing/fixtures.h"
#include "xdp/testing/packet_builder.h"

namespace infergate::dataplane::ingress_filter {
namespace {

using namespace xdp::testing;  // NOLINT

constexpr std::array<uint8_t, 6> kOurMac{0x02, 0, 0, 0, 0, 0x01};   // the builder's dst_mac
constexpr std::array<uint8_t, 6> kPeerMac{0x02, 0, 0, 0, 0, 0x02};  // the builder's src_mac

FilterOptions l2Options(uint32_t max_replies = 32) {
  FilterOptions o = filterOptionsFor(fixtureOptions());
  o.l2.mac = kOurMac;
  inet_pton(AF_INET, "10.0.0.1", &o.l2.ipv4);
  inet_pton(AF_INET6, "2001:db8::1", o.l2.ipv6.data());
  o.l2.max_replies_per_burst = max_replies;
  return o;
}

std::vector<uint8_t> cat(std::initializer_list<std::vector<uint8_t>> parts) {
  std::vector<uint8_t> out;
  for (const auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}
std::vector<uint8_t> bytes(const std::array<uint8_t, 6>& a) { return {a.begin(), a.end()}; }

std::vector<uint8_t> arpRequest(const char* target, std::vector<uint16_t> vlans = {}) {
  PacketSpec s;
  s.vlans = std::move(vlans);
  s.dst_mac = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
  s.ethertype = 0x0806;
  uint8_t tpa[4];
  inet_pton(AF_INET, target, tpa);
  s.raw_l4 = cat({{0, 1, 0x08, 0, 6, 4, 0, 1},
                  bytes(kPeerMac),
                  {10, 0, 0, 2},
                  {0, 0, 0, 0, 0, 0},
                  {tpa[0], tpa[1], tpa[2], tpa[3]}});
  // the builder puts an IP header in front of raw_l4 unless told otherwise: build by hand
  std::vector<uint8_t> f = cat({bytes(s.dst_mac), bytes(s.src_mac)});
  for (uint16_t t : s.vlans)
    f.insert(f.end(), {0x81, 0x00, static_cast<uint8_t>(t >> 8), static_cast<uint8_t>(t)});
  f.insert(f.end(), {0x08, 0x06});
  f.insert(f.end(), s.raw_l4->begin(), s.raw_l4->end());
  return f;
}

// An ICMP message with its checksum set (IPv4: no pseudo-header).
std::vector<uint8_t> icmp(uint8_t type, const std::string& rest) {
  std::vector<uint8_t> m = {type, 0, 0, 0, 0x12, 0x34, 0, 7};
  m.insert(m.end(), rest.begin(), rest.end());
  const uint16_t c = inetChecksum(m.data(), m.size());
  m[2] = static_cast<uint8_t>(c >> 8);
  m[3] = static_cast<uint8_t>(c);
  return m;
}

// An ICMPv6 message `m` with its checksum set for src -> dst.
std::vector<uint8_t> withIcmp6Checksum(std::vector<uint8_t> m, const char* src, const char* dst) {
  uint8_t s[16], d[16];
  inet_pton(AF_INET6, src, s);
  inet_pton(AF_INET6, dst, d);
  m[2] = m[3] = 0;
  uint32_t pseudo = ig_csum_partial(s, 16, 0);
  pseudo = ig_csum_partial(d, 16, pseudo);
  pseudo += 58 + static_cast<uint32_t>(m.size());
  const uint16_t c = inetChecksum(m.data(), m.size(), pseudo);
  m[2] = static_cast<uint8_t>(c >> 8);
  m[3] = static_cast<uint8_t>(c);
  return m;
}

PacketSpec icmpSpec(const std::vector<uint8_t>& msg, const char* dst = "10.0.0.1") {
  PacketSpec s;
  s.ip_proto = 1;
  s.dst = dst;
  s.ip_id = 0x4242;
  s.raw_l4 = msg;
  return s;
}

TEST(L2Responder, ArpRequestForOurAddressGetsTheExactReply) {
  Rig rig(l2Options());
  for (std::vector<uint16_t> vlans : {std::vector<uint16_t>{}, std::vector<uint16_t>{0x0064}}) {
    rig.dev.sent.clear();
    EXPECT_TRUE(rig.run(arpRequest("10.0.0.1", vlans)).meta.empty()) << "not for the stack";
    ASSERT_EQ(rig.dev.sent.size(), 1u);
    std::vector<uint8_t> want = cat({bytes(kPeerMac), bytes(kOurMac)});
    for (uint16_t t : vlans)
      want.insert(want.end(), {0x81, 0x00, static_cast<uint8_t>(t >> 8), static_cast<uint8_t>(t)});
    want = cat({want,
                {0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2},
                bytes(kOurMac),
                {10, 0, 0, 1},
                bytes(kPeerMac),
                {10, 0, 0, 2}});
    EXPECT_EQ(hex(rig.dev.sent[0]), hex(want));
  }
  EXPECT_EQ(rig.filter->l2Counters().arp_replies, 2u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_TX][IG_R_NOT_IP], 2u);
  EXPECT_EQ(rig.dev.outstanding(), 0u);
  EXPECT_EQ(rig.dev.flushes, 2u) << "one kick per burst with answers";
}

TEST(L2Responder, OtherAddressesAndOtherEthertypesAreDroppedAndCounted) {
  Rig rig(l2Options());
  EXPECT_TRUE(rig.run(arpRequest("10.0.0.9")).meta.empty());
  PacketSpec lldp;
  lldp.ethertype = 0x88cc;
  lldp.raw_l4 = std::vector<uint8_t>(40, 0);
  EXPECT_TRUE(rig.run(buildPacket(lldp)).meta.empty());
  EXPECT_TRUE(rig.run(buildPacket(icmpSpec(icmp(8, "ping"), "10.0.0.9"))).meta.empty());
  PacketSpec udp;
  udp.ip_proto = 17;
  udp.raw_l4 = std::vector<uint8_t>{0x9c, 0x40, 0x1f, 0x40, 0, 8, 0, 0};
  EXPECT_TRUE(rig.run(buildPacket(udp)).meta.empty());
  EXPECT_TRUE(rig.run(buildPacket(icmpSpec(icmp(0, "a reply"))))  // not a request
                  .meta.empty());
  EXPECT_TRUE(rig.dev.sent.empty());
  const IngressCounters c = rig.filter->counters();
  EXPECT_EQ(c.packets[XDP_DROP][IG_R_NOT_IP], 2u);
  EXPECT_EQ(c.packets[XDP_DROP][IG_R_NOT_TCP], 3u);
  EXPECT_EQ(c.packets[XDP_TX][IG_R_NOT_IP] + c.packets[XDP_TX][IG_R_NOT_TCP], 0u);
  EXPECT_EQ(rig.filter->l2Counters().not_for_us, 5u);
  EXPECT_EQ(rig.dev.outstanding(), 0u);
  EXPECT_EQ(rig.dev.released_, 5u);
  // TCP to another port is the stack's (it answers like a host), untagged.
  PacketSpec other = flow(50000, kSyn);
  other.dport = 22;
  Rig::Passed p = rig.run(buildPacket(other));
  ASSERT_EQ(p.meta.size(), 1u);
  EXPECT_EQ(p.meta[0], 0u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_PASS][IG_R_NOT_SERVICE], 1u);
}

TEST(L2Responder, IcmpEchoGetsTheExactReplyWithValidChecksums) {
  Rig rig(l2Options());
  const std::vector<uint8_t> req = icmp(8, "0123456789abcdefghij");
  EXPECT_TRUE(rig.run(buildPacket(icmpSpec(req))).meta.empty());
  ASSERT_EQ(rig.dev.sent.size(), 1u);
  PacketSpec want;
  want.src_mac = kOurMac;
  want.dst_mac = kPeerMac;
  want.src = "10.0.0.1";
  want.dst = "10.0.0.2";
  want.ip_proto = 1;
  want.ip_id = 0x4242;
  want.frag = 0;
  want.ttl = 64;
  std::vector<uint8_t> rep = req;
  rep[0] = 0;
  rep[2] = rep[3] = 0;
  const uint16_t c = inetChecksum(rep.data(), rep.size());
  rep[2] = static_cast<uint8_t>(c >> 8);
  rep[3] = static_cast<uint8_t>(c);
  want.raw_l4 = rep;
  const std::vector<uint8_t>& got = rig.dev.sent[0];
  EXPECT_EQ(hex(got), hex(buildPacket(want)));
  EXPECT_EQ(inetChecksum(got.data() + 14, 20), 0) << "IPv4 header checksum";
  EXPECT_EQ(inetChecksum(got.data() + 34, got.size() - 34), 0) << "ICMP checksum";
  EXPECT_EQ(rig.filter->l2Counters().icmp_echo_replies, 1u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_TX][IG_R_NOT_TCP], 1u);
  // A bad checksum or a fragment is not answered.
  std::vector<uint8_t> bad = req;
  bad[5] ^= 1;
  EXPECT_TRUE(rig.run(buildPacket(icmpSpec(bad))).meta.empty());
  PacketSpec frag = icmpSpec(req);
  frag.frag = 0x2000;  // more fragments
  EXPECT_TRUE(rig.run(buildPacket(frag)).meta.empty());
  EXPECT_EQ(rig.dev.sent.size(), 1u);
  EXPECT_EQ(rig.filter->l2Counters().malformed, 2u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_DROP][IG_R_NOT_TCP], 2u);
}

TEST(L2Responder, Icmpv6EchoAndNeighbourSolicitation) {
  Rig rig(l2Options());
  // echo request
  std::vector<uint8_t> echo = {128, 0, 0, 0, 0xab, 0xcd, 0, 1, 'h', 'i', '!'};
  echo = withIcmp6Checksum(echo, "2001:db8::2", "2001:db8::1");
  PacketSpec s;
  s.ipv6 = true;
  s.src = "2001:db8::2";
  s.dst = "2001:db8::1";
  s.ip_proto = 58;
  s.raw_l4 = echo;
  EXPECT_TRUE(rig.run(buildPacket(s)).meta.empty());
  ASSERT_EQ(rig.dev.sent.size(), 1u);
  PacketSpec want;
  want.ipv6 = true;
  want.src_mac = kOurMac;
  want.dst_mac = kPeerMac;
  want.src = "2001:db8::1";
  want.dst = "2001:db8::2";
  want.ip_proto = 58;
  want.ttl = 64;
  std::vector<uint8_t> rep = echo;
  rep[0] = 129;
  want.raw_l4 = withIcmp6Checksum(rep, "2001:db8::1", "2001:db8::2");
  EXPECT_EQ(hex(rig.dev.sent[0]), hex(buildPacket(want)));

  // neighbour solicitation for our address, to the solicited-node group, hop limit 255
  std::vector<uint8_t> ns = {135, 0, 0, 0, 0, 0, 0, 0};
  uint8_t target[16];
  inet_pton(AF_INET6, "2001:db8::1", target);
  ns.insert(ns.end(), target, target + 16);
  ns.insert(ns.end(), {1, 1});  // source link-layer address option
  ns.insert(ns.end(), kPeerMac.begin(), kPeerMac.end());
  PacketSpec n = s;
  n.dst = "ff02::1:ff00:1";
  n.dst_mac = {0x33, 0x33, 0xff, 0, 0, 1};
  n.ttl = 255;
  n.raw_l4 = withIcmp6Checksum(ns, "2001:db8::2", "ff02::1:ff00:1");
  EXPECT_TRUE(rig.run(buildPacket(n)).meta.empty());
  ASSERT_EQ(rig.dev.sent.size(), 2u);
  std::vector<uint8_t> na = {136, 0, 0, 0, 0x60, 0, 0, 0};
  na.insert(na.end(), target, target + 16);
  na.insert(na.end(), {2, 1});
  na.insert(na.end(), kOurMac.begin(), kOurMac.end());
  PacketSpec wna = want;
  wna.ttl = 255;
  wna.raw_l4 = withIcmp6Checksum(na, "2001:db8::1", "2001:db8::2");
  EXPECT_EQ(hex(rig.dev.sent[1]), hex(buildPacket(wna)));
  // a solicitation that did not come from a neighbour (hop limit < 255) or for another target
  n.ttl = 64;
  n.raw_l4 = withIcmp6Checksum(ns, "2001:db8::2", "ff02::1:ff00:1");
  EXPECT_TRUE(rig.run(buildPacket(n)).meta.empty());
  EXPECT_EQ(rig.dev.sent.size(), 2u);
  const L2Counters c = rig.filter->l2Counters();
  EXPECT_EQ(c.icmp6_echo_replies, 1u);
  EXPECT_EQ(c.nd_adverts, 1u);
  EXPECT_EQ(c.malformed, 1u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_TX][IG_R_NOT_TCP], 2u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_DROP][IG_R_NOT_TCP], 1u);
}

TEST(L2Responder, RepliesPerBurstAreBoundedAndCounted) {
  Rig rig(l2Options(2));
  for (int i = 0; i < 5; ++i) rig.dev.inject(arpRequest("10.0.0.1"));
  EXPECT_TRUE(rig.burst().empty());
  EXPECT_EQ(rig.dev.sent.size(), 2u);
  EXPECT_EQ(rig.filter->l2Counters().over_budget, 3u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_TX][IG_R_NOT_IP], 2u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_DROP][IG_R_NOT_IP], 3u);
  EXPECT_EQ(rig.dev.outstanding(), 0u);
  // the next burst has its own budget
  rig.dev.inject(arpRequest("10.0.0.1"));
  EXPECT_TRUE(rig.burst().empty());
  EXPECT_EQ(rig.dev.sent.size(), 3u);
  // no transmit frame: not answered, counted
  rig.dev.tx_limit = 0;
  rig.dev.inject(arpRequest("10.0.0.1"));
  EXPECT_TRUE(rig.burst().empty());
  EXPECT_EQ(rig.dev.sent.size(), 3u);
  EXPECT_EQ(rig.filter->l2Counters().no_tx_frame, 1u);
  EXPECT_EQ(rig.dev.outstanding(), 0u);
}

TEST(L2Responder, WithoutAnAddressNothingIsAnswered) {
  FilterOptions o = filterOptionsFor(fixtureOptions());
  Rig rig(o);
  EXPECT_TRUE(rig.run(arpRequest("10.0.0.1")).meta.empty());
  EXPECT_TRUE(rig.run(buildPacket(icmpSpec(icmp(8, "x")))).meta.empty());
  EXPECT_TRUE(rig.dev.sent.empty());
  EXPECT_EQ(rig.filter->counters().packets[XDP_DROP][IG_R_NOT_IP], 1u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_DROP][IG_R_NOT_TCP], 1u);
}

}  // namespace
}  // namespace infergate::dataplane::ingress_filter
