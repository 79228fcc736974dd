// The XDP ingress program through BPF_PROG_TEST_RUN: every fixture (verdict, reason,
// metadata tag, RST bytes and checksums), then the stateful parts (rejected flows, flow tags,
// rate limits, overload, CIDR classes, counters). Needs root (or CAP_BPF + CAP_PERFMON);
// skips with a message otherwise.
#include <arpa/inet.h>
#include <tuple>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <memory>
#include <optional>

#include "xdp/ingress_shared.h"
#include "ig_ingress.skel.h"  // after ingress_shared.h: it uses its structs
#include "xdp/testing/fixtures.h"
#include "xdp/testing/load_or_skip.h"
#include "xdp/testing/prog_run.h"
#include "xdp/xdp_filter.h"

namespace infergate::xdp::testing {
namespace {

ig_tag tagOf(const RunResult& r) {
  ig_tag t{};
  if (r.meta.size() >= sizeof(t)) std::memcpy(&t, r.meta.data() + r.meta.size() - sizeof(t), sizeof(t));
  return t;
}

// Each fixture against both tag placements: metadata (skipped, with the kernel's reason, where
// the kernel refuses bpf_xdp_adjust_meta), and the prefix of afxdp mode with no socket bound
// (redirects fall back to passes: the verdicts, counters and RSTs of the table, and no prefix on
// a frame the kernel gets; tests/bpf/xsk_redirect_test.cc binds a socket and reads the prefix).
using Placement = XdpOptions::TagPlacement;

XdpOptions placementOptions(Placement p) {
  XdpOptions o = fixtureOptions();
  o.tags = p;
  if (p == Placement::kPrefix) o.redirect_xsk = true;
  return o;
}

class XdpFixtures : public ::testing::TestWithParam<std::tuple<Placement, size_t>> {
 protected:
  // Each placement's program is loaded once per process, when a case first needs it (ctest runs
  // one case per process: one load each).
  static void load(int i) {
    if (tried_[i]) return;
    tried_[i] = true;
    auto f = XdpFilter::load(placementOptions(i == 0 ? Placement::kMetadata : Placement::kPrefix));
    if (f.ok()) {
      filter_[i] = std::move(*f).release();
    } else {
      load_error_[i] = std::string(f.status().message());
      permission_[i] = f.status().code() == absl::StatusCode::kPermissionDenied;
      refused_[i] = metadataRefused(f.status());
    }
  }
  static void TearDownTestSuite() {
    for (XdpFilter*& f : filter_) {
      delete f;
      f = nullptr;
    }
  }
  void SetUp() override {
    const int i = std::get<0>(GetParam()) == Placement::kMetadata ? 0 : 1;
    load(i);
    filter = filter_[i];
    if (!filter) {
      if (permission_[i]) GTEST_SKIP() << "needs root or CAP_BPF+CAP_PERFMON: " << load_error_[i];
      if (refused_[i]) GTEST_SKIP() << "the metadata path: " << load_error_[i];
      FAIL() << "loading the XDP program failed: " << load_error_[i];
    }
  }
  XdpFilter* filter = nullptr;
  static XdpFilter* filter_[2];
  static std::string load_error_[2];
  static bool refused_[2];
  static bool permission_[2];
  static bool tried_[2];
};
XdpFilter* XdpFixtures::filter_[2] = {nullptr, nullptr};
std::string XdpFixtures::load_error_[2];
bool XdpFixtures::refused_[2] = {false, false};
bool XdpFixtures::permission_[2] = {false, false};
bool XdpFixtures::tried_[2] = {false, false};

std::string testName(const ::testing::TestParamInfo<std::tuple<Placement, size_t>>& info) {
  std::string n = fixtures()[std::get<1>(info.param)].name;
  for (char& c : n)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return std::string(tagPlacementName(std::get<0>(info.param))) + "_" +
         std::to_string(std::get<1>(info.param)) + "_" + n;
}

TEST_P(XdpFixtures, Verdict) {
  const Fixture& f = fixtures()[std::get<1>(GetParam())];
  const bool meta = std::get<0>(GetParam()) == Placement::kMetadata;
  XdpFilter* filter_ = filter;
  int fd = filter_->programFd();
  if (f.first_segment) {
    RunResult syn = runXdp(fd, f.syn);
    ASSERT_EQ(syn.err, 0);
    ASSERT_EQ(syn.retval, static_cast<uint32_t>(XDP_PASS));
  }
  auto before = filter_->readCounters();
  RunResult r = runXdp(fd, f.packet);
  if (f.packet.size() < 14) {
    // BPF_PROG_TEST_RUN refuses frames shorter than an Ethernet header (a NIC never delivers
    // them); the host test runs this case through the classifier.
    EXPECT_EQ(r.err, -EINVAL);
    return;
  }
  ASSERT_EQ(r.err, 0) << "bpf_prog_test_run_opts: " << strerror(-r.err);
  EXPECT_EQ(r.retval, static_cast<uint32_t>(f.action)) << f.name;
  auto after = filter_->readCounters();
  EXPECT_EQ(after.packets[f.action][f.reason], before.packets[f.action][f.reason] + 1)
      << f.name << ": counter " << actionName(f.action) << "/" << reasonName(f.reason);

  bool service_pass = f.action == XDP_PASS &&
                      (f.reason == IG_R_SEGMENT || f.reason == IG_R_SYN || f.reason == IG_R_REQUEST);
  if (f.action == XDP_PASS && !service_pass) {
    EXPECT_TRUE(r.meta.empty()) << f.name;
    EXPECT_EQ(r.out, f.packet) << f.name << ": a passed frame must be untouched";
  }
  if (service_pass && !meta) {
    // afxdp's prefix is written only on a redirect: a frame the kernel gets is untouched.
    EXPECT_TRUE(r.meta.empty()) << f.name;
    EXPECT_EQ(r.out, f.packet) << f.name;
  }
  if (service_pass && meta) {
    ASSERT_EQ(r.meta.size(), sizeof(ig_tag)) << f.name;
    ig_tag t = tagOf(r);
    EXPECT_EQ(t.magic, IG_TAG_MAGIC);
    EXPECT_EQ(t.reason, f.reason) << f.name;
    EXPECT_EQ(t.flags, f.tag_flags) << f.name;
    // The program's clock is read for request starts only (a segment's costs ~30 ns less).
    if (f.reason == IG_R_REQUEST)
      EXPECT_NE(t.rx_ns, 0u) << f.name;
    else
      EXPECT_EQ(t.rx_ns, 0u) << f.name;
    EXPECT_EQ(t.verdict, IG_TV_ADMIT);
    if (f.reason == IG_R_REQUEST)
      EXPECT_EQ(t.cls, f.cls) << f.name;
    else
      EXPECT_EQ(t.cls, IG_CLASS_NONE) << f.name;
    EXPECT_EQ(r.out, f.packet) << f.name;
  }
  if (f.action == XDP_TX) {
    EXPECT_TRUE(r.meta.empty());
    EXPECT_EQ(hex(r.out), hex(f.expected_out)) << f.name;
    EXPECT_TRUE(checksumsValid(r.out)) << f.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, XdpFixtures,
                         ::testing::Combine(::testing::Values(Placement::kMetadata, Placement::kPrefix),
                                            ::testing::Range<size_t>(0, fixtures().size())),
                         testName);


const char* kGood = "GET /v2/health/ready HTTP/1.1\r\nHost: gw\r\n\r\n";
const char* kPriority2 = "POST /v2/models/m/infer HTTP/1.1\r\nx-infergate-priority: 2\r\n\r\n";

// The tag the program recorded for the test client's flow 10.0.0.2:sport -> 10.0.0.1:8000.
std::optional<Tag> testFlowTag(const XdpFilter& f, uint16_t sport) {
  sockaddr_in peer{}, local{};
  peer.sin_family = local.sin_family = AF_INET;
  inet_pton(AF_INET, "10.0.0.2", &peer.sin_addr);
  inet_pton(AF_INET, "10.0.0.1", &local.sin_addr);
  peer.sin_port = htons(sport);
  local.sin_port = htons(8000);
  return f.lookupFlowTag(FlowTuple::fromSockaddrs(reinterpret_cast<sockaddr*>(&peer),
                                                  reinterpret_cast<sockaddr*>(&local)));
}

TEST(XdpState, RejectedFlowDropsLaterSegments) {
  LOAD_OR_SKIP(f, fixtureOptions());
  int fd = f->programFd();
  RunResult r = runXdp(fd, buildPacket(flow(41000, kAck | kPsh, "DELETE /v2/x HTTP/1.1\r\n\r\n")));
  ASSERT_EQ(r.retval, static_cast<uint32_t>(XDP_TX));
  r = runXdp(fd, buildPacket(flow(41000, kAck | kPsh, "more bytes")));
  EXPECT_EQ(r.retval, static_cast<uint32_t>(XDP_DROP));
  auto c = f->readCounters();
  EXPECT_EQ(c.packets[XDP_DROP][IG_R_REJECTED_FLOW], 1u);
  EXPECT_EQ(c.packets[XDP_TX][IG_R_BAD_METHOD], 1u);
  // another flow from the same client is unaffected
  r = runXdp(fd, buildPacket(flow(41001, kAck | kPsh, "more bytes")));
  EXPECT_EQ(r.retval, static_cast<uint32_t>(XDP_PASS));
}

TEST(XdpState, RejectedFlowPassesSegmentsWithoutData) {
  // The client's RST (answering the kernel's FIN after the idle timeout) must reach the kernel
  // socket, or the gateway retransmits its FIN for minutes; ACKs carry nothing to judge.
  LOAD_OR_SKIP(f, fixtureOptions());
  int fd = f->programFd();
  ASSERT_EQ(runXdp(fd, buildPacket(flow(41010, kAck | kPsh, "BREW /v2/x HTTP/1.1\r\n\r\n"))).retval,
            static_cast<uint32_t>(XDP_TX));
  EXPECT_EQ(runXdp(fd, buildPacket(flow(41010, kRst))).retval, static_cast<uint32_t>(XDP_PASS));
  EXPECT_EQ(runXdp(fd, buildPacket(flow(41010, kAck))).retval, static_cast<uint32_t>(XDP_PASS));
  EXPECT_EQ(runXdp(fd, buildPacket(flow(41010, kAck | kPsh, "BREW /v2/x HTTP/1.1\r\n\r\n"))).retval,
            static_cast<uint32_t>(XDP_DROP));
  EXPECT_EQ(f->readCounters().packets[XDP_DROP][IG_R_REJECTED_FLOW], 1u);
}

TEST(XdpState, RstByRedirectToTheIngressInterface) {
  // RstTx::kRedirect (chosen automatically on a veth): the same RST, sent with XDP_REDIRECT,
  // counted as tx.
  XdpOptions o = fixtureOptions();
  o.rst_tx = RstTx::kRedirect;
  LOAD_OR_SKIP(f, o);
  PacketSpec bad = flow(41020, kAck | kPsh, "BREW /v2/health/live HTTP/1.1\r\nHost: x\r\n\r\n");
  RunResult r = runXdp(f->programFd(), buildPacket(bad));
  EXPECT_EQ(r.retval, static_cast<uint32_t>(XDP_REDIRECT));
  EXPECT_EQ(hex(r.out), hex(buildPacket(rstFor(bad))));
  EXPECT_TRUE(checksumsValid(r.out));
  EXPECT_EQ(f->readCounters().packets[XDP_TX][IG_R_BAD_METHOD], 1u);
  // XDP_TX stays the default elsewhere
  LOAD_OR_SKIP(g, fixtureOptions());
  EXPECT_EQ(runXdp(g->programFd(), buildPacket(bad)).retval, static_cast<uint32_t>(XDP_TX));
}

TEST(XdpState, FlowSlotsAreRoundedToAPowerOfTwo) {
  // A direct-mapped table: a tag written for one flow is found for that flow only, also with
  // a table size that is not a power of two.
  XdpOptions o = fixtureOptions();
  o.flow_entries = 1000;
  LOAD_OR_SKIP(f, o);
  int found = 0;
  for (uint16_t port = 42000; port < 42100; ++port) {
    ASSERT_EQ(runXdp(f->programFd(), buildPacket(flow(port, kAck | kPsh, kGood))).retval,
              static_cast<uint32_t>(XDP_PASS));
    found += testFlowTag(*f, port).has_value();
  }
  EXPECT_EQ(found, 100);
  EXPECT_FALSE(testFlowTag(*f, 42100).has_value());
}

TEST(XdpState, FirstSegmentNeedsRequestOnlyAfterSyn) {
  LOAD_OR_SKIP(f, fixtureOptions());
  int fd = f->programFd();
  PacketSpec syn = flow(41100, kSyn);
  syn.seq = 999;
  ASSERT_EQ(runXdp(fd, buildPacket(syn)).retval, static_cast<uint32_t>(XDP_PASS));
  PacketSpec later = flow(41100, kAck | kPsh, "garbage");
  later.seq = 5000;  // not the first segment: nothing provable
  EXPECT_EQ(runXdp(fd, buildPacket(later)).retval, static_cast<uint32_t>(XDP_PASS));
  PacketSpec first = flow(41100, kAck | kPsh, "garbage");
  first.seq = 1000;
  EXPECT_EQ(runXdp(fd, buildPacket(first)).retval, static_cast<uint32_t>(XDP_TX));
}

TEST(XdpState, FlowTagLookup) {
  LOAD_OR_SKIP(f, fixtureOptions());
  int fd = f->programFd();
  RunResult r = runXdp(fd, buildPacket(flow(41200, kAck | kPsh, kPriority2)));
  ASSERT_EQ(r.retval, static_cast<uint32_t>(XDP_PASS));
  auto tag = testFlowTag(*f, 41200);
  ASSERT_TRUE(tag.has_value());
  EXPECT_EQ(tag->cls, 2);
  EXPECT_EQ(tag->verdict, IG_TV_ADMIT);
  EXPECT_TRUE(tag->flags & IG_TF_REQUEST_START);
  EXPECT_FALSE(testFlowTag(*f, 41201).has_value());
  auto c = f->readCounters();
  EXPECT_EQ(c.requests[2][IG_TV_ADMIT], 1u);
}

TEST(XdpState, SynRateLimit) {
  XdpOptions o = fixtureOptions();
  o.syn_rate_per_sec = 1;
  o.syn_burst = 3;
  LOAD_OR_SKIP(f, o);
  int fd = f->programFd();
  int passed = 0, dropped = 0;
  for (int i = 0; i < 10; ++i) {
    RunResult r = runXdp(fd, buildPacket(flow(static_cast<uint16_t>(42000 + i), kSyn)));
    (r.retval == XDP_PASS ? passed : dropped)++;
  }
  EXPECT_EQ(passed, 3);
  EXPECT_EQ(dropped, 7);
  EXPECT_EQ(f->readCounters().packets[XDP_DROP][IG_R_SYN_RATE_LIMITED], 7u);
  // another source has its own bucket
  EXPECT_EQ(runXdp(fd, buildPacket(flow(42100, kSyn, "", "10.0.0.3"))).retval,
            static_cast<uint32_t>(XDP_PASS));
}

TEST(XdpState, RequestRateLimitTagsInsteadOfDropping) {
  XdpOptions o = fixtureOptions();
  o.request_rate_per_sec = 1;
  o.request_burst = 2;
  o = withMetadata(o);
  LOAD_OR_SKIP(f, o);
  int fd = f->programFd();
  std::vector<int> verdicts;
  for (int i = 0; i < 4; ++i) {
    RunResult r = runXdp(fd, buildPacket(flow(43000, kAck | kPsh, kGood)));
    ASSERT_EQ(r.retval, static_cast<uint32_t>(XDP_PASS));
    verdicts.push_back(tagOf(r).verdict);
  }
  EXPECT_EQ(verdicts, (std::vector<int>{IG_TV_ADMIT, IG_TV_ADMIT, IG_TV_RATE_LIMITED,
                                        IG_TV_RATE_LIMITED}));
  EXPECT_EQ(f->readCounters().requests[1][IG_TV_RATE_LIMITED], 2u);
}

TEST(XdpState, OverloadAdmitsOnlyHighClasses) {
  LOAD_OR_SKIP(f, withMetadata(fixtureOptions()));
  int fd = f->programFd();
  ASSERT_TRUE(f->setOverloadLevel(3).ok());
  EXPECT_EQ(runXdp(fd, buildPacket(flow(44000, kSyn))).retval, static_cast<uint32_t>(XDP_DROP));
  RunResult r = runXdp(fd, buildPacket(flow(44001, kAck | kPsh, kGood)));
  EXPECT_EQ(r.retval, static_cast<uint32_t>(XDP_PASS));
  EXPECT_EQ(tagOf(r).verdict, IG_TV_OVERLOAD);
  r = runXdp(fd, buildPacket(flow(44002, kAck | kPsh, "GET /v2/models/urgent HTTP/1.1\r\n\r\n")));
  EXPECT_EQ(tagOf(r).verdict, IG_TV_ADMIT);
  EXPECT_EQ(tagOf(r).cls, 0);
  ASSERT_TRUE(f->setOverloadLevel(0).ok());
  EXPECT_EQ(runXdp(fd, buildPacket(flow(44003, kSyn))).retval, static_cast<uint32_t>(XDP_PASS));
  EXPECT_FALSE(f->setOverloadLevel(7).ok());
  auto c = f->readCounters();
  EXPECT_EQ(c.packets[XDP_DROP][IG_R_SYN_OVERLOAD], 1u);
  EXPECT_EQ(c.requests[1][IG_TV_OVERLOAD], 1u);
}

TEST(XdpState, CidrClassesAndExemption) {
  XdpOptions o = fixtureOptions();
  o.syn_rate_per_sec = 1;
  o.syn_burst = 1;
  o.cidr_rules = {{"10.9.0.0/16", 0, true}, {"2001:db8:bad::/48", 3, false}};
  o = withMetadata(o);
  LOAD_OR_SKIP(f, o);
  int fd = f->programFd();
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(runXdp(fd, buildPacket(flow(static_cast<uint16_t>(45000 + i), kSyn, "", "10.9.1.1")))
                  .retval,
              static_cast<uint32_t>(XDP_PASS))
        << "exempt source, SYN " << i;
  RunResult r = runXdp(fd, buildPacket(flow(45100, kAck | kPsh, kGood, "10.9.1.1")));
  EXPECT_EQ(tagOf(r).cls, 0);
  PacketSpec v6 = flow(45200, kAck | kPsh, "GET /v2/models/urgent HTTP/1.1\r\n\r\n", "2001:db8:bad::7");
  v6.ipv6 = true;
  v6.dst = "2001:db8::1";
  r = runXdp(fd, buildPacket(v6));
  EXPECT_EQ(tagOf(r).cls, 3) << "the CIDR class comes before the path rule";
  r = runXdp(fd, buildPacket(flow(45300, kAck | kPsh, kGood, "10.8.1.1")));
  EXPECT_EQ(tagOf(r).cls, 1);
  o.cidr_rules = {{"not-a-cidr", 0, false}};
  auto bad = XdpFilter::load(o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(std::string(bad.status().message()).find("xdp.cidr_rules[0]"), std::string::npos);
}

TEST(XdpState, NoRstWhenDisabledAndNoMetadataWhenOff) {
  XdpOptions o = fixtureOptions();
  o.send_rst = false;
  o.tags = XdpOptions::TagPlacement::kOff;
  LOAD_OR_SKIP(f, o);
  int fd = f->programFd();
  RunResult r = runXdp(fd, buildPacket(flow(46000, kAck | kPsh, "PUT /v2/ HTTP/1.1\r\n\r\n")));
  EXPECT_EQ(r.retval, static_cast<uint32_t>(XDP_DROP));
  r = runXdp(fd, buildPacket(flow(46001, kAck | kPsh, kGood)));
  EXPECT_EQ(r.retval, static_cast<uint32_t>(XDP_PASS));
  EXPECT_TRUE(r.meta.empty());
  EXPECT_EQ(f->readCounters().packets[XDP_DROP][IG_R_BAD_METHOD], 1u);
}

TEST(XdpState, MetricsCollector) {
  LOAD_OR_SKIP(f, fixtureOptions());
  runXdp(f->programFd(), buildPacket(flow(47000, kAck | kPsh, "GET /nope HTTP/1.1\r\n\r\n")));
  common::MetricsRegistry reg;
  f->registerMetrics(reg);
  std::string text = reg.renderPrometheus();
  EXPECT_NE(text.find("infergate_xdp_packets_total{verdict=\"tx\",reason=\"bad_path\"} 1"),
            std::string::npos)
      << text;
}

// Issue 13, item 5: the x-infergate-priority header sets the class only from trusted sources
// (priority.from_client: trusted, priority.trusted_sources); the test client is 10.0.0.2.
// The class in the flow tag of a request start `payload` from 10.0.0.2:sport under `o`.
int classFor(const XdpOptions& o, uint16_t sport, const std::string& payload, bool* skipped) {
  std::string skip;
  auto f = loadOrSkip(o, &skip);
  if (!f) {
    *skipped = !skip.empty();
    return -1;
  }
  RunResult r = runXdp(f->programFd(), buildPacket(flow(sport, kAck | kPsh, payload)));
  EXPECT_EQ(r.retval, static_cast<uint32_t>(XDP_PASS));
  auto tag = testFlowTag(*f, sport);
  EXPECT_TRUE(tag.has_value());
  return tag ? tag->cls : -1;
}

int headerClassFrom(const XdpOptions& o, uint16_t sport, bool* skipped) {
  return classFor(o, sport, kPriority2, skipped);
}

TEST(XdpPriority, HeaderCountsOnlyFromTrustedSources) {
  XdpOptions o = fixtureOptions();
  o.priority_from = XdpOptions::PriorityFrom::kTrusted;
  bool skipped = false;
  o.trusted_sources = {"10.0.0.0/24"};
  const int trusted = headerClassFrom(o, 41300, &skipped);
  if (skipped) GTEST_SKIP() << "needs BPF";
  EXPECT_EQ(trusted, 2);
  o.trusted_sources = {"192.0.2.0/24", "2001:db8::/32"};
  EXPECT_EQ(headerClassFrom(o, 41301, &skipped), 1);  // the default class: header ignored
  o.trusted_sources = {};
  EXPECT_EQ(headerClassFrom(o, 41302, &skipped), 1);
  o.priority_from = XdpOptions::PriorityFrom::kOff;
  o.trusted_sources = {"10.0.0.0/24"};
  EXPECT_EQ(headerClassFrom(o, 41303, &skipped), 1);
  o.priority_from = XdpOptions::PriorityFrom::kAll;
  o.trusted_sources = {};
  EXPECT_EQ(headerClassFrom(o, 41304, &skipped), 2);
}

// A longer class rule inside a trusted prefix keeps the trust (the LPM entry an address
// matches is the longest; it must say what both lists say).
TEST(XdpPriority, TrustSurvivesALongerCidrRule) {
  XdpOptions o = fixtureOptions();
  o.priority_from = XdpOptions::PriorityFrom::kTrusted;
  o.trusted_sources = {"10.0.0.0/8"};
  o.cidr_rules = {{"10.0.0.2", -1, true}};  // exempt, no class
  bool skipped = false;
  const int cls = headerClassFrom(o, 41310, &skipped);
  if (skipped) GTEST_SKIP() << "needs BPF";
  EXPECT_EQ(cls, 2);
}

// Issue 15: the source is looked up only when its answer can count, and the header scanned only
// when it can set the class. These pin the orders that made that safe: a source class beats the
// header (so a source with a class needs no scan), a path class beats both, trust entries alone
// give a SYN neither class nor exemption (so SYNs are not looked up), and a trusted source's
// header still counts when the lookup is made only because a header block is there.

TEST(XdpPriority, SourceClassBeatsTheHeaderAndPathClassBeatsBoth) {
  XdpOptions o = fixtureOptions();
  o.priority_from = XdpOptions::PriorityFrom::kTrusted;
  o.trusted_sources = {"10.0.0.0/8"};
  bool skipped = false;
  // trust entries only: the header of a trusted source counts...
  const int trusted = classFor(o, 41320, kPriority2, &skipped);
  if (skipped) GTEST_SKIP() << "needs BPF";
  EXPECT_EQ(trusted, 2);
  // ...not when the path rule already set the class, nor without a header block
  EXPECT_EQ(classFor(o, 41321, "GET /v2/models/urgent HTTP/1.1\r\nx-infergate-priority: 3\r\n\r\n",
                     &skipped),
            0);
  EXPECT_EQ(classFor(o, 41322, "GET /v2/health/ready HTTP/1.1\r\n", &skipped), 1);
  // a class rule for the source wins over its (trusted) header
  o.cidr_rules = {{"10.0.0.2", 3, false}};
  EXPECT_EQ(classFor(o, 41323, kPriority2, &skipped), 3);
  // a rule without a class leaves the header to decide
  o.cidr_rules = {{"10.0.0.2", -1, false}};
  EXPECT_EQ(classFor(o, 41324, kPriority2, &skipped), 2);
  // every source's header counts: a source class still wins
  o.priority_from = XdpOptions::PriorityFrom::kAll;
  o.trusted_sources = {};
  o.cidr_rules = {{"10.0.0.0/24", 0, false}};
  EXPECT_EQ(classFor(o, 41325, kPriority2, &skipped), 0);
}

TEST(XdpPriority, TrustEntriesGiveSynsNoExemption) {
  XdpOptions o = fixtureOptions();
  o.priority_from = XdpOptions::PriorityFrom::kTrusted;
  o.trusted_sources = {"10.0.0.0/8"};
  o.syn_rate_per_sec = 1;
  o.syn_burst = 1;
  o = withMetadata(o);
  LOAD_OR_SKIP(f, o);
  int fd = f->programFd();
  EXPECT_EQ(runXdp(fd, buildPacket(flow(41330, kSyn))).retval, static_cast<uint32_t>(XDP_PASS));
  EXPECT_EQ(runXdp(fd, buildPacket(flow(41331, kSyn))).retval, static_cast<uint32_t>(XDP_DROP))
      << "a trusted source is still rate-limited";
  EXPECT_EQ(f->readCounters().packets[XDP_DROP][IG_R_SYN_RATE_LIMITED], 1u);
  o.cidr_rules = {{"10.0.0.2", -1, true}};  // an exemption rule is looked up for SYNs
  o = withMetadata(o);
  LOAD_OR_SKIP(g, o);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(runXdp(g->programFd(), buildPacket(flow(static_cast<uint16_t>(41340 + i), kSyn))).retval,
              static_cast<uint32_t>(XDP_PASS));
}


// Configuration reload (XdpFilter::reconfigure): the rules are map entries, rewritten in place.

// The tag verdict and class of one request start on a fresh flow.
ig_tag requestTag(int fd, uint16_t sport, const char* payload = kGood) {
  return tagOf(runXdp(fd, buildPacket(flow(sport, kAck | kPsh, payload))));
}

TEST(XdpReload, RulesChangeInPlaceWithTheSameProgram) {
  XdpOptions o = withMetadata(fixtureOptions());
  LOAD_OR_SKIP(f, o);
  const int fd = f->programFd();
  const uint32_t slot = f->rulesSlot();
  const char* kModel = "POST /v2/models/m/infer HTTP/1.1\r\n\r\n";
  RunResult r = runXdp(fd, buildPacket(flow(48000, kAck | kPsh, kModel)));
  ASSERT_EQ(r.retval, static_cast<uint32_t>(XDP_PASS));
  EXPECT_EQ(tagOf(r).cls, 1);
  // Another path list, a path class, a method and a default class, all at once.
  XdpOptions next = o;
  next.path_prefixes = {"/v1/models/"};
  next.path_classes = {{"/v1/models/gold", 0}};
  next.methods = {"GET"};
  next.default_class = 2;
  ASSERT_TRUE(f->reconfigure(next).ok());
  EXPECT_EQ(f->programFd(), fd) << "no new program";
  EXPECT_EQ(f->rulesSlot(), slot ^ 1u) << "the other entry is in force";
  r = runXdp(fd, buildPacket(flow(48001, kAck | kPsh, kModel)));
  EXPECT_EQ(r.retval, static_cast<uint32_t>(XDP_TX)) << "POST is no longer a method";
  r = runXdp(fd, buildPacket(flow(48002, kAck | kPsh, kGood)));
  EXPECT_EQ(r.retval, static_cast<uint32_t>(XDP_TX)) << "/v2/ is no longer a path";
  EXPECT_EQ(requestTag(fd, 48003, "GET /v1/models/gold HTTP/1.1\r\n\r\n").cls, 0);
  EXPECT_EQ(requestTag(fd, 48004, "GET /v1/models/x HTTP/1.1\r\n\r\n").cls, 2);
  auto c = f->readCounters();
  EXPECT_EQ(c.packets[XDP_TX][IG_R_BAD_METHOD], 1u);
  EXPECT_EQ(c.packets[XDP_TX][IG_R_BAD_PATH], 1u);
  // And back: the first entry again.
  ASSERT_TRUE(f->reconfigure(o).ok());
  EXPECT_EQ(f->rulesSlot(), slot);
  EXPECT_EQ(requestTag(fd, 48005, kModel).cls, 1);
}

// The entry a switch took out of force keeps the old rules (a program run that read it before
// the switch finishes with them); the one in force holds the new rules exactly.
// The rule fields of a config (the load-time ones zero: the program reads those from its
// read-only data, and attach adjusts some of them to the interface).
ig_config rulesOnly(ig_config c) {
  c.tag_mode = c.redirect_xsk = c.tx_redirect = c.syn_cookies = c.prove_handshake = 0;
  c.synack_wscale = 0;
  c.synack_mss = 0;
  c.flow_mask = 0;
  return c;
}

TEST(XdpReload, TheOldEntryStaysIntactUntilTheNextSwitch) {
  XdpOptions o = fixtureOptions();
  LOAD_OR_SKIP(f, o);
  absl::StatusOr<ig_config> first = f->rulesInForce();
  ASSERT_TRUE(first.ok()) << first.status();
  XdpOptions next = o;
  next.request_rate_per_sec = 5;
  next.http2_max_frame_size = 32768;
  ASSERT_TRUE(f->reconfigure(next).ok());
  ig_config want_new{};
  ASSERT_TRUE(buildConfig(next, &want_new).ok());
  absl::StatusOr<ig_config> now = f->rulesInForce();
  ASSERT_TRUE(now.ok()) << now.status();
  ig_config a = rulesOnly(*now), b = rulesOnly(want_new);
  EXPECT_EQ(std::memcmp(&a, &b, sizeof(a)), 0);
  EXPECT_EQ(now->req_rate, 5u);
  ig_config old{};
  const uint32_t other = f->rulesSlot() ^ 1u;
  ASSERT_EQ(bpf_map__lookup_elem(f->skeleton()->maps.ig_rules, &other, sizeof(other), &old,
                                 sizeof(old), 0),
            0);
  EXPECT_EQ(std::memcmp(&old, &*first, sizeof(old)), 0) << "the old entry is untouched";
  EXPECT_EQ(old.req_rate, 0u);
  // The program's read-only data holds the load-time part only: no rule lives there.
  ig_config ro{};
  std::memcpy(&ro, const_cast<const ig_config*>(&f->skeleton()->rodata->ig_cfg), sizeof(ro));
  EXPECT_EQ(ro.nprefixes, 0u);
  EXPECT_EQ(ro.nmethods, 0u);
  EXPECT_EQ(ro.nports, 0u);
  EXPECT_EQ(ro.flow_mask, want_new.flow_mask);
}

TEST(XdpReload, RateLimitsApplyOnReload) {
  XdpOptions o = withMetadata(fixtureOptions());  // the verdicts are read from the tag
  LOAD_OR_SKIP(f, o);
  const int fd = f->programFd();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(requestTag(fd, 48100).verdict, IG_TV_ADMIT);
  XdpOptions next = o;
  next.request_rate_per_sec = 1;
  next.request_burst = 2;
  next.syn_rate_per_sec = 1;
  next.syn_burst = 1;
  ASSERT_TRUE(f->reconfigure(next).ok());
  std::vector<int> verdicts;
  for (int i = 0; i < 3; ++i) verdicts.push_back(requestTag(fd, 48101).verdict);
  EXPECT_EQ(verdicts, (std::vector<int>{IG_TV_ADMIT, IG_TV_ADMIT, IG_TV_RATE_LIMITED}));
  EXPECT_EQ(runXdp(fd, buildPacket(flow(48102, kSyn))).retval, static_cast<uint32_t>(XDP_PASS));
  EXPECT_EQ(runXdp(fd, buildPacket(flow(48103, kSyn))).retval, static_cast<uint32_t>(XDP_DROP));
  ASSERT_TRUE(f->reconfigure(o).ok());  // off again
  EXPECT_EQ(requestTag(fd, 48104).verdict, IG_TV_ADMIT);
  EXPECT_EQ(runXdp(fd, buildPacket(flow(48105, kSyn))).retval, static_cast<uint32_t>(XDP_PASS));
}

// Priority rules and CIDR rules together: the trusted entries and the header rule change, the
// prefixes that went away are deleted from the trie.
TEST(XdpReload, PriorityAndCidrRulesFollowTheReload) {
  XdpOptions o = fixtureOptions();
  o.priority_from = XdpOptions::PriorityFrom::kTrusted;
  o.trusted_sources = {"192.0.2.0/24"};
  o = withMetadata(o);
  LOAD_OR_SKIP(f, o);
  const int fd = f->programFd();
  EXPECT_EQ(requestTag(fd, 48200, kPriority2).cls, 1) << "10.0.0.2 is not trusted";
  XdpOptions next = o;
  next.trusted_sources = {"10.0.0.0/24"};
  next.cidr_rules = {{"10.9.0.0/16", 3, false}};
  ASSERT_TRUE(f->reconfigure(next).ok());
  EXPECT_EQ(requestTag(fd, 48201, kPriority2).cls, 2) << "trusted now: its header counts";
  EXPECT_EQ(tagOf(runXdp(fd, buildPacket(flow(48202, kAck | kPsh, kGood, "10.9.1.1")))).cls, 3);
  auto keys = [&] {
    int n = 0;
    ig_cidr_key k{}, prev{};
    const void* p = nullptr;
    while (bpf_map__get_next_key(f->skeleton()->maps.ig_cidrs, p, &k, sizeof(k)) == 0 && n < 100) {
      ++n;
      prev = k;
      p = &prev;
    }
    return n;
  };
  EXPECT_EQ(keys(), 2) << "192.0.2.0/24 went away";
  next.priority_from = XdpOptions::PriorityFrom::kOff;
  next.cidr_rules = {};
  ASSERT_TRUE(f->reconfigure(next).ok());
  EXPECT_EQ(requestTag(fd, 48203, kPriority2).cls, 1) << "no header counts";
  EXPECT_EQ(tagOf(runXdp(fd, buildPacket(flow(48204, kAck | kPsh, kGood, "10.9.1.1")))).cls, 1);
  EXPECT_EQ(keys(), 0);
}

// What the program is loaded with cannot change in place: refused, naming the key, and the
// rules in force stay.
TEST(XdpReload, LoadTimeOptionsAreRefused) {
  XdpOptions o = fixtureOptions();
  LOAD_OR_SKIP(f, o);
  const uint32_t slot = f->rulesSlot();
  XdpOptions next = o;
  next.rst_tx = RstTx::kRedirect;
  absl::Status st = f->reconfigure(next);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(st.message()).find("rst_tx"), std::string::npos) << st;
  next = o;
  next.flow_entries = 1024;
  EXPECT_NE(std::string(f->reconfigure(next).message()).find("flow_entries"), std::string::npos);
  next = o;
  next.service_ports = {9000};
  EXPECT_EQ(f->reconfigure(next).code(), absl::StatusCode::kFailedPrecondition);
  next = o;
  next.methods = {"lower"};  // invalid: nothing applied
  EXPECT_EQ(f->reconfigure(next).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(f->rulesSlot(), slot);
}

// The point of keeping the rules in maps: a reload needs no capability (the gateway has dropped
// them by then). A child process without any capability rewrites the rules of the program this
// process loaded; loading a program would fail there with EPERM.
TEST(XdpReload, NeedsNoCapability) {
  XdpOptions o = fixtureOptions();
  LOAD_OR_SKIP(f, o);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct d[2] = {};
    if (syscall(SYS_capset, &h, d) != 0) _exit(2);
    XdpOptions next = o;
    next.path_prefixes = {"/v1/models/"};
    // (a program load here is refused: shows the child really has no capability)
    if (XdpFilter::load(o).ok()) _exit(3);
    _exit(f->reconfigure(next).ok() ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0) << "1: reconfigure failed, 2: capset, 3: load succeeded";
  // The child's switch is the program's (the maps are shared; this process's copy of
  // rules_slot is stale, so read the entry the program uses from ig_state).
  EXPECT_EQ(runXdp(f->programFd(), buildPacket(flow(48300, kAck | kPsh, kGood))).retval,
            static_cast<uint32_t>(XDP_TX))
      << "/v2/ is no longer a path";
}

}  // namespace
}  // namespace infergate::xdp::testing
