// dpdk mode's FilteringDevice over the XDP fixture table (the one tests/bpf runs through
// BPF_PROG_TEST_RUN): for every fixture, the verdict the program gives in afxdp mode with a
// socket bound (service passes and rejected request starts to the stack, tagged; drops
// released at once), the tag in Frame::meta, the counters exact, every frame released once.
// Then the state the program keeps in maps: rejected flows, SYN and request rate limits,
// the overload level, CIDR classes and exemptions, the bounded bucket table.
#include <gtest/gtest.h>
#include <linux/bpf.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/tcp/frame_tag.h"
#include "tests/unit/ingress_filter/test_rig.h"
#include "xdp/testing/fixtures.h"
#include "xdp/testing/packet_builder.h"

namespace infergate::dataplane::ingress_filter {
namespace {

using namespace xdp::testing;  // NOLINT: the fixture table's helpers
using tcp::metaClass;
using tcp::metaFlags;
using tcp::metaReason;
using tcp::metaValid;
using tcp::metaVerdict;

const char* kGood = "GET /v2/health/ready HTTP/1.1\r\nHost: gw\r\n\r\n";

uint64_t sumPackets(const IngressCounters& c) {
  uint64_t t = 0;
  for (const auto& row : c.packets)
    for (uint64_t v : row) t += v;
  return t;
}

bool servicePass(const Fixture& f) {
  return f.action == XDP_PASS &&
         (f.reason == IG_R_SEGMENT || f.reason == IG_R_SYN || f.reason == IG_R_REQUEST);
}

TEST(FilteringDevice, EveryFixtureGetsTheProgramsVerdictTagAndCounter) {
  Rig rig(filterOptionsFor(fixtureOptions()));
  ASSERT_TRUE(rig.filter);
  int to_stack = 0, dropped = 0, rejected = 0;
  for (const Fixture& fx : fixtures()) {
    SCOPED_TRACE(fx.name);
    if (fx.first_segment) {
      Rig::Passed syn = rig.run(fx.syn);
      ASSERT_EQ(syn.meta.size(), 1u) << "the SYN goes to the stack";
      EXPECT_EQ(metaReason(syn.meta[0]), IG_R_SYN);
    }
    const IngressCounters before = rig.filter->counters();
    const size_t released_before = rig.dev.released_;
    rig.dev.inject(fx.packet);
    std::vector<Frame> out = rig.burst();
    // Dropped frames were released by the filter, once; passed ones are still ours.
    EXPECT_EQ(rig.dev.released_ - released_before, out.empty() ? 1u : 0u);
    EXPECT_EQ(rig.dev.outstanding(), out.size());
    const IngressCounters after = rig.filter->counters();
    EXPECT_EQ(sumPackets(after) - sumPackets(before), 1u) << "exactly one counter moves";

    int want_action = fx.action;  // the counter's action
    bool want_stack = false;
    if (servicePass(fx)) {
      want_action = XDP_REDIRECT;
      want_stack = true;
    } else if (fx.action == XDP_TX) {
      want_action = XDP_REDIRECT;  // to the stack, flagged rejected: it sends the RST
      want_stack = true;
    } else if (fx.action == XDP_PASS && fx.reason == IG_R_NOT_SERVICE) {
      want_stack = true;  // TCP to another port: the stack answers it
    } else if (fx.action == XDP_PASS) {
      want_action = XDP_DROP;  // ARP/ICMP (no responder configured), fragments, ext headers
    }
    EXPECT_EQ(after.packets[want_action][fx.reason] - before.packets[want_action][fx.reason], 1u)
        << xdp::actionName(want_action) << "/" << xdp::reasonName(fx.reason);
    EXPECT_EQ(after.bytes[want_action][fx.reason] - before.bytes[want_action][fx.reason],
              fx.packet.size());
    ASSERT_EQ(out.size(), want_stack ? 1u : 0u);
    if (want_stack) {
      ++to_stack;
      const Frame& f = out[0];
      EXPECT_EQ(std::vector<uint8_t>(f.data, f.data + f.len), fx.packet) << "untouched";
      if (fx.reason == IG_R_NOT_SERVICE) {
        EXPECT_EQ(f.meta, 0u);
      } else {
        ASSERT_TRUE(metaValid(f.meta));
        EXPECT_EQ(metaReason(f.meta), fx.reason);
        EXPECT_EQ(metaVerdict(f.meta), IG_TV_ADMIT);
        if (fx.action == XDP_TX) {
          ++rejected;
          EXPECT_EQ(metaFlags(f.meta), fx.tag_flags | IG_TF_REJECTED);
          EXPECT_EQ(metaClass(f.meta), IG_CLASS_NONE);
        } else {
          EXPECT_EQ(metaFlags(f.meta), fx.tag_flags);
          EXPECT_EQ(metaClass(f.meta), fx.reason == IG_R_REQUEST ? fx.cls : IG_CLASS_NONE);
        }
      }
      if (fx.reason == IG_R_REQUEST) {
        EXPECT_EQ(after.requests[fx.cls][IG_TV_ADMIT] - before.requests[fx.cls][IG_TV_ADMIT], 1u);
      }
    } else {
      ++dropped;
    }
    rig.release(out);
    EXPECT_EQ(rig.dev.outstanding(), 0u);
  }
  EXPECT_EQ(rig.dev.double_releases, 0u);
  EXPECT_EQ(rig.dev.unknown_releases, 0u);
  EXPECT_TRUE(rig.dev.sent.empty()) << "nothing transmitted without a responder";
  EXPECT_GT(to_stack, 40);
  EXPECT_GT(dropped, 40);
  EXPECT_GT(rejected, 5);
}

TEST(FilteringDevice, ABurstKeepsArrivalOrderAndReleasesDropsOnce) {
  Rig rig(filterOptionsFor(fixtureOptions()));
  std::vector<std::vector<uint8_t>> frames = {
      buildPacket(flow(30000, kAck | kPsh, kGood)),
      std::vector<uint8_t>(10, 0),  // truncated: dropped
      buildPacket(flow(30001, kSyn)),
      buildPacket(flow(30002, kAck | kPsh, "PUT /v2/ HTTP/1.1\r\n\r\n")),  // rejected
      buildPacket(flow(30003, kSyn | kFin)),                               // bad flags: dropped
  };
  for (const auto& f : frames) rig.dev.inject(f);
  std::vector<Frame> out = rig.burst();
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(std::vector<uint8_t>(out[0].data, out[0].data + out[0].len), frames[0]);
  EXPECT_EQ(std::vector<uint8_t>(out[1].data, out[1].data + out[1].len), frames[2]);
  EXPECT_EQ(std::vector<uint8_t>(out[2].data, out[2].data + out[2].len), frames[3]);
  EXPECT_EQ(metaReason(out[0].meta), IG_R_REQUEST);
  EXPECT_EQ(metaReason(out[1].meta), IG_R_SYN);
  EXPECT_NE(metaFlags(out[2].meta) & IG_TF_REJECTED, 0);
  EXPECT_EQ(rig.dev.released_, 2u);
  rig.release(out);
  EXPECT_EQ(rig.dev.outstanding(), 0u);
  EXPECT_EQ(rig.dev.double_releases, 0u);
  // A burst is at most kMaxBurst frames; the rest waits for the next one.
  for (size_t i = 0; i < FilteringDevice::kMaxBurst + 10; ++i)
    rig.dev.inject(buildPacket(flow(31000, kAck, "")));
  std::vector<Frame> big = rig.burst(FilteringDevice::kMaxBurst * 2);
  EXPECT_EQ(big.size(), FilteringDevice::kMaxBurst);
  rig.release(big);
  std::vector<Frame> rest = rig.burst();
  EXPECT_EQ(rest.size(), 10u);
  rig.release(rest);
}

// Checksum offload passes through the filter: the NIC's GOOD bits from the wrapped device stay
// beside the tag (the stack reads them), the tag never sets them, and txChecksumOffload() is
// the wrapped device's.
TEST(FilteringDevice, KeepsTheNicsChecksumBitsBesideTheTagAndForwardsTxOffload) {
  Rig rig(filterOptionsFor(fixtureOptions()));
  rig.dev.inject(buildPacket(flow(33000, kSyn)), kMetaRxChecksumMask);
  rig.dev.inject(buildPacket(flow(33001, kSyn)), 0);
  std::vector<Frame> out = rig.burst();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].meta & kMetaRxChecksumMask, kMetaRxChecksumMask);
  EXPECT_EQ(metaReason(out[0].meta), IG_R_SYN);
  EXPECT_TRUE(metaValid(out[0].meta));
  EXPECT_EQ(out[1].meta & kMetaRxChecksumMask, 0u) << "no bit without the NIC's word";
  EXPECT_EQ(metaReason(out[1].meta), IG_R_SYN);
  rig.release(out);
  EXPECT_FALSE(rig.filter->txChecksumOffload());
  rig.dev.tx_checksum_offload = true;
  EXPECT_TRUE(rig.filter->txChecksumOffload());
}

TEST(FilteringDevice, RejectedFlowDropsItsRetransmissionsForTheTtl) {
  Rig rig(filterOptionsFor(fixtureOptions()));
  PacketSpec bad = flow(32000, kAck | kPsh, "PUT /v2/ HTTP/1.1\r\n\r\n");
  Rig::Passed r = rig.run(buildPacket(bad));
  ASSERT_EQ(r.meta.size(), 1u);
  EXPECT_NE(metaFlags(r.meta[0]) & IG_TF_REJECTED, 0);
  // The retransmission and a follower inside the window: dropped.
  EXPECT_TRUE(rig.run(buildPacket(bad)).meta.empty());
  PacketSpec next = bad;
  next.seq += 100;
  next.payload = "more";
  EXPECT_TRUE(rig.run(buildPacket(next)).meta.empty());
  // A segment without data still reaches the stack (a client's RST must free the flow).
  PacketSpec ack = bad;
  ack.payload.clear();
  EXPECT_EQ(rig.run(buildPacket(ack)).meta.size(), 1u);
  EXPECT_EQ(rig.filter->counters().packets[XDP_DROP][IG_R_REJECTED_FLOW], 2u);
  // reject_ttl_ms (2000) later the flow's data is judged again.
  rig.clock.advanceNs(2'000'000'001);
  PacketSpec good = bad;
  good.payload = kGood;
  r = rig.run(buildPacket(good));
  ASSERT_EQ(r.meta.size(), 1u);
  EXPECT_EQ(metaReason(r.meta[0]), IG_R_REQUEST);
}

TEST(FilteringDevice, FirstSegmentMustStartARequestOnlyAfterTheSyn) {
  Rig rig(filterOptionsFor(fixtureOptions()));
  PacketSpec syn = flow(33000, kSyn);
  syn.seq = 999;
  PacketSpec data = flow(33000, kAck | kPsh, "\x01\x02 binary");
  data.seq = 1000;
  ASSERT_EQ(rig.run(buildPacket(syn)).meta.size(), 1u);
  Rig::Passed r = rig.run(buildPacket(data));
  ASSERT_EQ(r.meta.size(), 1u);
  EXPECT_EQ(metaReason(r.meta[0]), IG_R_BAD_REQUEST_LINE);
  EXPECT_NE(metaFlags(r.meta[0]) & IG_TF_REJECTED, 0);
  // The same bytes on a flow whose SYN was not seen: a continuation.
  data.sport = 33001;
  r = rig.run(buildPacket(data));
  ASSERT_EQ(r.meta.size(), 1u);
  EXPECT_EQ(metaReason(r.meta[0]), IG_R_SEGMENT);
  EXPECT_EQ(metaFlags(r.meta[0]) & IG_TF_REJECTED, 0);
}

TEST(FilteringDevice, SynRateLimitPerSource) {
  xdp::XdpOptions o = fixtureOptions();
  o.syn_rate_per_sec = 1;
  o.syn_burst = 3;
  Rig rig(filterOptionsFor(o));
  int passed = 0, dropped = 0;
  for (int i = 0; i < 10; ++i)
    (rig.run(buildPacket(flow(static_cast<uint16_t>(42000 + i), kSyn))).meta.size() ? passed
                                                                                    : dropped)++;
  EXPECT_EQ(passed, 3);
  EXPECT_EQ(dropped, 7);
  EXPECT_EQ(rig.filter->counters().packets[XDP_DROP][IG_R_SYN_RATE_LIMITED], 7u);
  EXPECT_EQ(rig.dev.outstanding(), 0u);
  // another source has its own bucket; one second refills one token
  EXPECT_EQ(rig.run(buildPacket(flow(42100, kSyn, "", "10.0.0.3"))).meta.size(), 1u);
  rig.clock.advanceNs(1'000'000'000);
  EXPECT_EQ(rig.run(buildPacket(flow(42200, kSyn))).meta.size(), 1u);
  EXPECT_EQ(rig.run(buildPacket(flow(42201, kSyn))).meta.size(), 0u);
}

TEST(FilteringDevice, RequestRateLimitTagsInsteadOfDropping) {
  xdp::XdpOptions o = fixtureOptions();
  o.request_rate_per_sec = 1;
  o.request_burst = 2;
  Rig rig(filterOptionsFor(o));
  std::vector<int> verdicts;
  for (int i = 0; i < 4; ++i) {
    Rig::Passed r = rig.run(buildPacket(flow(43000, kAck | kPsh, kGood)));
    ASSERT_EQ(r.meta.size(), 1u);
    verdicts.push_back(metaVerdict(r.meta[0]));
  }
  EXPECT_EQ(verdicts,
            (std::vector<int>{IG_TV_ADMIT, IG_TV_ADMIT, IG_TV_RATE_LIMITED, IG_TV_RATE_LIMITED}));
  EXPECT_EQ(rig.filter->counters().requests[1][IG_TV_RATE_LIMITED], 2u);
  EXPECT_EQ(rig.filter->counters().requests[1][IG_TV_ADMIT], 2u);
}

TEST(FilteringDevice, OverloadDropsShedClassSynsAndTagsTheirRequests) {
  Rig rig(filterOptionsFor(fixtureOptions()));
  rig.filter->setOverloadLevel(3);
  EXPECT_TRUE(rig.run(buildPacket(flow(44000, kSyn))).meta.empty());
  Rig::Passed r = rig.run(buildPacket(flow(44001, kAck | kPsh, kGood)));
  ASSERT_EQ(r.meta.size(), 1u);
  EXPECT_EQ(metaVerdict(r.meta[0]), IG_TV_OVERLOAD);
  r = rig.run(buildPacket(flow(44002, kAck | kPsh, "GET /v2/models/urgent HTTP/1.1\r\n\r\n")));
  ASSERT_EQ(r.meta.size(), 1u);
  EXPECT_EQ(metaVerdict(r.meta[0]), IG_TV_ADMIT);
  EXPECT_EQ(metaClass(r.meta[0]), 0);
  rig.filter->setOverloadLevel(0);
  EXPECT_EQ(rig.run(buildPacket(flow(44003, kSyn))).meta.size(), 1u);
  const IngressCounters c = rig.filter->counters();
  EXPECT_EQ(c.packets[XDP_DROP][IG_R_SYN_OVERLOAD], 1u);
  EXPECT_EQ(c.requests[1][IG_TV_OVERLOAD], 1u);
  EXPECT_EQ(c.requests[0][IG_TV_ADMIT], 1u);
}

TEST(FilteringDevice, CidrClassesExemptionAndTrustedPriorityHeader) {
  xdp::XdpOptions o = fixtureOptions();
  o.syn_rate_per_sec = 1;
  o.syn_burst = 1;
  o.cidr_rules = {{"10.9.0.0/16", 0, true}, {"2001:db8:bad::/48", 3, false}};
  o.priority_from = xdp::XdpOptions::PriorityFrom::kTrusted;
  o.trusted_sources = {"10.7.0.0/16"};
  Rig rig(filterOptionsFor(o));
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(rig.run(buildPacket(flow(static_cast<uint16_t>(45000 + i), kSyn, "", "10.9.1.1")))
                  .meta.size(),
              1u)
        << "exempt source, SYN " << i;
  Rig::Passed r = rig.run(buildPacket(flow(45100, kAck | kPsh, kGood, "10.9.1.1")));
  EXPECT_EQ(metaClass(r.meta.at(0)), 0);
  PacketSpec v6 =
      flow(45200, kAck | kPsh, "GET /v2/models/urgent HTTP/1.1\r\n\r\n", "2001:db8:bad::7");
  v6.ipv6 = true;
  v6.dst = "2001:db8::1";
  r = rig.run(buildPacket(v6));
  EXPECT_EQ(metaClass(r.meta.at(0)), 3) << "the CIDR class comes before the path rule";
  r = rig.run(buildPacket(flow(45300, kAck | kPsh, kGood, "10.8.1.1")));
  EXPECT_EQ(metaClass(r.meta.at(0)), 1);
  // The priority header counts from a trusted source only.
  const char* prio = "POST /v2/models/m/infer HTTP/1.1\r\nx-infergate-priority: 2\r\n\r\n";
  r = rig.run(buildPacket(flow(45400, kAck | kPsh, prio, "10.7.3.3")));
  EXPECT_EQ(metaClass(r.meta.at(0)), 2);
  r = rig.run(buildPacket(flow(45401, kAck | kPsh, prio, "10.8.3.3")));
  EXPECT_EQ(metaClass(r.meta.at(0)), 1);
  // a non-exempt source is limited
  EXPECT_EQ(rig.run(buildPacket(flow(45500, kSyn, "", "10.8.1.1"))).meta.size(), 1u);
  EXPECT_EQ(rig.run(buildPacket(flow(45501, kSyn, "", "10.8.1.1"))).meta.size(), 0u);
}

TEST(FilteringDevice, BucketTableIsBoundedAndEvictsTheLeastRecentlyUsed) {
  xdp::XdpOptions o = fixtureOptions();
  o.syn_rate_per_sec = 1;
  o.syn_burst = 1;
  o.bucket_entries = 4;  // one set of four ways
  Rig rig(filterOptionsFor(o));
  auto syn = [&](int src, uint16_t port) {
    return rig.run(buildPacket(flow(port, kSyn, "", "10.1.0." + std::to_string(src)))).meta.size();
  };
  for (int s = 1; s <= 4; ++s) {
    EXPECT_EQ(syn(s, static_cast<uint16_t>(46000 + s)), 1u);
    rig.clock.advanceNs(1000);
  }
  EXPECT_EQ(syn(1, 46100), 0u) << "source 1's bucket is empty";
  rig.clock.advanceNs(1000);
  EXPECT_EQ(syn(5, 46101), 1u) << "source 5 evicts the least recently used (source 2)";
  EXPECT_EQ(syn(1, 46102), 0u) << "source 1 was used since: still limited";
  EXPECT_EQ(syn(2, 46103), 1u) << "source 2 starts again with a full bucket";
}

TEST(FilteringDevice, CreateRefusesBadOptions) {
  tcp::FakePacketDevice dev;
  common::ManualClock clock;
  FilterOptions o = filterOptionsFor(fixtureOptions());
  FilterOptions bad = o;
  bad.config.flow_mask = 1000;
  auto r = FilteringDevice::create(dev, bad, clock);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("flow_entries"), std::string::npos);
  bad = o;
  bad.bucket_entries = 2;
  EXPECT_FALSE(FilteringDevice::create(dev, bad, clock).ok());
  bad = o;
  bad.config.nports = 0;
  EXPECT_FALSE(FilteringDevice::create(dev, bad, clock).ok());
  bad = o;
  bad.l2.ipv4 = 0x0100000a;
  bad.l2.mac = {0x01, 0, 0x5e, 0, 0, 1};  // multicast
  r = FilteringDevice::create(dev, bad, clock);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.status().message()).find("MAC"), std::string::npos);
}

TEST(FilteringDevice, CountersRenderWithTheXdpMetricNames) {
  Rig rig(filterOptionsFor(fixtureOptions()));
  rig.run(buildPacket(flow(47000, kAck | kPsh, "GET /nope HTTP/1.1\r\n\r\n")));
  rig.run(buildPacket(flow(47001, kAck | kPsh, kGood)));
  IngressCounters sum;
  sum += rig.filter->counters();
  sum += rig.filter->counters();  // two reactors
  xdp::XdpCounters x;
  x.packets = sum.packets;
  x.bytes = sum.bytes;
  x.requests = sum.requests;
  const std::string text = xdp::renderPrometheus(x);
  EXPECT_NE(text.find("infergate_xdp_packets_total{verdict=\"redirect\",reason=\"bad_path\"} 2"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("infergate_xdp_requests_total{class=\"normal\",verdict=\"admit\"} 2"),
            std::string::npos)
      << text;
}

// A configuration reload in dpdk mode: rules prepared on another thread replace the ones in
// force between two frames (CIDR classes and exemptions, path prefixes), while the state the
// filter keeps stays (a source whose SYN bucket was empty is still limited); a flow table of
// another size is refused with nothing changed.
TEST(FilteringDevice, SetRulesTakesEffectAtTheNextFrameAndKeepsTheState) {
  xdp::XdpOptions a = fixtureOptions();
  a.syn_rate_per_sec = 1;
  a.syn_burst = 1;
  a.cidr_rules = {{"10.9.0.0/16", 3, false}};
  Rig rig(filterOptionsFor(a));
  const char* v1 = "GET /v1/models/m HTTP/1.1\r\n\r\n";
  EXPECT_EQ(metaClass(rig.run(buildPacket(flow(48000, kAck | kPsh, kGood, "10.9.1.1"))).meta.at(0)),
            3);
  Rig::Passed r = rig.run(buildPacket(flow(48001, kAck | kPsh, v1, "10.8.1.1")));
  EXPECT_EQ(metaReason(r.meta.at(0)), IG_R_REQUEST);
  EXPECT_EQ(rig.run(buildPacket(flow(48002, kSyn, "", "10.8.1.1"))).meta.size(), 1u);
  EXPECT_EQ(rig.run(buildPacket(flow(48003, kSyn, "", "10.8.1.1"))).meta.size(), 0u);
  EXPECT_EQ(rig.filter->rulesGeneration(), 0u);

  xdp::XdpOptions b = a;
  b.cidr_rules = {{"10.9.0.0/16", 0, true}};  // class 0 and exempt
  b.path_prefixes = {"/v2/", "/metrics"};     // /v1/models/ goes
  const FilterOptions bo = filterOptionsFor(b);
  absl::StatusOr<std::shared_ptr<const FilteringDevice::Rules>> rules;
  std::thread([&] { rules = FilteringDevice::prepareRules(bo.config, bo.cidrs); }).join();
  ASSERT_TRUE(rules.ok()) << rules.status();
  ASSERT_TRUE(rig.filter->setRules(*rules).ok());
  EXPECT_EQ(rig.filter->rulesGeneration(), 1u);

  EXPECT_EQ(metaClass(rig.run(buildPacket(flow(48100, kAck | kPsh, kGood, "10.9.1.1"))).meta.at(0)),
            0);
  r = rig.run(buildPacket(flow(48101, kAck | kPsh, v1, "10.8.1.1")));
  EXPECT_EQ(metaReason(r.meta.at(0)), IG_R_BAD_PATH);
  EXPECT_NE(metaFlags(r.meta.at(0)) & IG_TF_REJECTED, 0);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(rig.run(buildPacket(flow(static_cast<uint16_t>(48200 + i), kSyn, "", "10.9.1.1")))
                  .meta.size(),
              1u)
        << "exempt now, SYN " << i;
  EXPECT_EQ(rig.run(buildPacket(flow(48300, kSyn, "", "10.8.1.1"))).meta.size(), 0u)
      << "the source's bucket survived the reload";

  // The flow table's size is fixed at start-up: refused, the rules in force unchanged.
  FilterOptions bigger = filterOptionsFor(b);
  bigger.config.flow_mask = bigger.config.flow_mask * 2 + 1;
  auto other = FilteringDevice::prepareRules(bigger.config, bigger.cidrs);
  ASSERT_TRUE(other.ok()) << other.status();
  const absl::Status st = rig.filter->setRules(*other);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("flow_entries"), std::string::npos) << st;
  EXPECT_EQ(rig.filter->rulesGeneration(), 1u);
  r = rig.run(buildPacket(flow(48400, kAck | kPsh, v1, "10.8.1.1")));
  EXPECT_EQ(metaReason(r.meta.at(0)), IG_R_BAD_PATH);

  // prepareRules validates as create() does.
  std::vector<CidrRule> many(1025, CidrRule{common::Cidr{}, 1, 0, 0});
  EXPECT_EQ(FilteringDevice::prepareRules(bo.config, many).status().code(),
            absl::StatusCode::kInvalidArgument);
  ig_config none = bo.config;
  none.nports = 0;
  EXPECT_FALSE(FilteringDevice::prepareRules(none, bo.cidrs).ok());
}

}  // namespace
}  // namespace infergate::dataplane::ingress_filter
