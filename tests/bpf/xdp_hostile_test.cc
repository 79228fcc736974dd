// The XDP ingress program against a hostile network, through BPF_PROG_TEST_RUN (issue 12):
//  - spoofed SYNs cannot rewrite a tracked flow's slot, a spoofed "first" segment cannot get a
//    victim's flow rejected, and a rejected slot is no permanent black hole;
//  - the flow hash is keyed (flows that collide under a fixed hash do not collide);
//  - per-source buckets key IPv6 by prefix, and afxdp charges request starts only to proven
//    handshakes;
//  - IPv4 fragments and IPv6 extension headers to a service port are dropped (by policy);
//  - XDP RSTs are rate-limited; a first segment cut inside the method is no bad request;
//  - SYN cookies: SYN -> SYN-ACK bytes (options, checksums, a cookie the host validates), the
//    deferred accept, the first data segment judged and flagged IG_TF_COOKIE.
// Needs root (or CAP_BPF + CAP_PERFMON); skips with a message otherwise.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <time.h>

#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <thread>

#include "common/secret.h"
#include "dataplane/tcp/syncookie.h"
#include "xdp/ingress_shared.h"
#include "xdp/testing/fixtures.h"
#include "xdp/testing/load_or_skip.h"
#include "xdp/testing/prog_run.h"
#include "xdp/xdp_filter.h"

namespace infergate::xdp::testing {
namespace {

constexpr uint32_t kPass = XDP_PASS, kDrop = XDP_DROP, kTx = XDP_TX;
const char* kGood = "GET /v2/health/ready HTTP/1.1\r\nHost: gw\r\n\r\n";
const char* kBadLine = "XXXXXXXXX /nope HTTP/1.1\r\n\r\n";

ig_tag tagOf(const RunResult& r) {
  ig_tag t{};
  if (r.meta.size() >= sizeof(t))
    std::memcpy(&t, r.meta.data() + r.meta.size() - sizeof(t), sizeof(t));
  return t;
}

PacketSpec seg(uint16_t sport, uint8_t flags, uint32_t seq, std::string payload = "",
               std::string src = "10.0.0.2") {
  PacketSpec s = flow(sport, flags, std::move(payload), std::move(src));
  s.seq = seq;
  return s;
}

uint32_t run(XdpFilter& f, const PacketSpec& s) { return runXdp(f.programFd(), buildPacket(s)).retval; }

// afxdp: redirect_xsk + metadata (no socket is bound in a test run: redirects become passes).
XdpOptions afxdpOptions() {
  XdpOptions o = fixtureOptions();
  o.redirect_xsk = true;
  o.tags = XdpOptions::TagPlacement::kAuto;
  o.reject_mid_stream = false;
  o.synack_mss = 1460;
  o.synack_wscale = 7;
  return o;
}

// ---------------------------------------------------------------- flow slots (item 2)

TEST(XdpHostile, SpoofedSynAndFirstSegmentDoNotRejectAVictimsFlow) {
  // A live keep-alive connection, then a raw SYN with its 4-tuple and a bad request line at
  // that SYN's ISN + 1: the victim's later data must still pass (xdp-filter mode).
  LOAD_OR_SKIP(f, fixtureOptions());
  ASSERT_EQ(run(*f, seg(50000, kSyn, 999)), kPass);
  ASSERT_EQ(run(*f, seg(50000, kAck | kPsh, 1000, kGood)), kPass);
  EXPECT_EQ(run(*f, seg(50000, kSyn, 0x7fffffff)), kPass);
  uint32_t v = run(*f, seg(50000, kAck | kPsh, 0x80000000, kBadLine));
  EXPECT_EQ(v, kPass) << "the spoofed segment is not the flow's first: nothing provable";
  EXPECT_EQ(run(*f, seg(50000, kAck | kPsh, 1000 + std::strlen(kGood), kGood)), kPass);
  EXPECT_EQ(f->readCounters().packets[XDP_DROP][IG_R_REJECTED_FLOW], 0u);
}

TEST(XdpHostile, SpoofedSynDoesNotMoveFirstSeqOfASynSeenSlot) {
  // The victim connected (SYN seen) and has not written yet: a spoofed SYN must not move the
  // first-segment rule to the attacker's sequence space.
  LOAD_OR_SKIP(f, withMetadata(fixtureOptions()));
  ASSERT_EQ(run(*f, seg(50010, kSyn, 999)), kPass);
  ASSERT_EQ(run(*f, seg(50010, kSyn, 4999)), kPass);
  EXPECT_EQ(run(*f, seg(50010, kAck | kPsh, 5000, kBadLine)), kPass);
  RunResult r = runXdp(f->programFd(), buildPacket(seg(50010, kAck | kPsh, 1000, kGood)));
  EXPECT_EQ(r.retval, kPass);
  EXPECT_NE(tagOf(r).flags & IG_TF_FIRST_SEGMENT, 0) << "the victim's own first segment";
}

TEST(XdpHostile, SpoofedSynAndFirstSegmentDoNotFlagAVictimRejectedInAfxdp) {
  LOAD_OR_SKIP(f, withMetadata(afxdpOptions()));
  ASSERT_EQ(run(*f, seg(50020, kSyn, 999)), kPass);
  ASSERT_EQ(run(*f, seg(50020, kAck | kPsh, 1000, kGood)), kPass);
  ASSERT_EQ(run(*f, seg(50020, kSyn, 0x7fffffff)), kPass);
  RunResult r = runXdp(f->programFd(), buildPacket(seg(50020, kAck | kPsh, 0x80000000, kBadLine)));
  EXPECT_EQ(r.retval, kPass);
  EXPECT_EQ(tagOf(r).flags & IG_TF_REJECTED, 0);
  r = runXdp(f->programFd(), buildPacket(seg(50020, kAck | kPsh, 1000 + std::strlen(kGood), kGood)));
  EXPECT_EQ(r.retval, kPass);
  EXPECT_EQ(tagOf(r).flags & IG_TF_REJECTED, 0);
}

TEST(XdpHostile, RejectedSlotOnlyCoversItsSegmentsAndExpires) {
  XdpOptions o = fixtureOptions();
  o.reject_ttl_ms = 100;
  LOAD_OR_SKIP(f, o);
  ASSERT_EQ(run(*f, seg(50030, kSyn, 999)), kPass);
  ASSERT_EQ(run(*f, seg(50030, kAck | kPsh, 1000, kBadLine)), kTx);
  EXPECT_EQ(run(*f, seg(50030, kAck | kPsh, 1000, kBadLine)), kDrop) << "a retransmission";
  EXPECT_EQ(run(*f, seg(50030, kAck | kPsh, 1030, "more")), kDrop) << "what follows it";
  // After reject_ttl_ms the slot no longer drops, and a SYN claims it again.
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  EXPECT_EQ(run(*f, seg(50030, kAck | kPsh, 1030, "more")), kPass);
  ASSERT_EQ(run(*f, seg(50030, kSyn, 0xa0000000)), kPass);
  EXPECT_EQ(run(*f, seg(50030, kAck | kPsh, 0xa0000001, kBadLine)), kTx)
      << "the new incarnation's first segment is judged again";

  // A later incarnation of a 4-tuple (a new random ISN) is outside the rejected window at once.
  ASSERT_EQ(run(*f, seg(50031, kSyn, 999)), kPass);
  ASSERT_EQ(run(*f, seg(50031, kAck | kPsh, 1000, kBadLine)), kTx);
  ASSERT_EQ(run(*f, seg(50031, kSyn, 0x90000000)), kPass);
  EXPECT_EQ(run(*f, seg(50031, kAck | kPsh, 0x90000001, kGood)), kPass);
}

// ---------------------------------------------------------------- keyed flow hash (item 3)

// The flow hash before issue 12 (fixed constants), to find flows that collided under it.
uint64_t unkeyedHash(const ig_flow_key* k) {
  uint64_t a = (uint64_t{k->saddr[0]} << 32) | k->daddr[0];
  uint64_t b = (uint64_t{k->sport} << 16) | k->dport | (uint64_t{k->family} << 32);
  uint64_t h = a * 0x9e3779b97f4a7c15ULL ^ b * 0xc2b2ae3d27d4eb4fULL;
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 29;
  return h;
}

TEST(XdpHostile, FlowHashIsKeyedSoChosenCollisionsDoNotEvict) {
  XdpOptions o = fixtureOptions();
  LOAD_OR_SKIP(f, o);
  uint32_t mask = 65535;
  ig_flow_key k{};
  k.family = 4;
  inet_pton(AF_INET, "10.0.0.2", &k.saddr[0]);
  inet_pton(AF_INET, "10.0.0.1", &k.daddr[0]);
  k.dport = htons(8000);
  // an attacker's pick: ten ports whose slots equal the victim's under the fixed hash
  k.sport = htons(40000);
  uint32_t victim_slot = static_cast<uint32_t>(unkeyedHash(&k)) & mask;
  std::vector<uint16_t> colliders;
  for (uint32_t p = 1024; p < 65536 && colliders.size() < 10; ++p) {
    if (p == 40000) continue;
    k.sport = htons(static_cast<uint16_t>(p));
    if ((static_cast<uint32_t>(unkeyedHash(&k)) & mask) == victim_slot) colliders.push_back(p);
  }
  ASSERT_FALSE(colliders.empty());
  ASSERT_EQ(run(*f, seg(40000, kAck | kPsh, 1000, kGood)), kPass);
  for (uint16_t p : colliders) ASSERT_EQ(run(*f, seg(p, kAck | kPsh, 1000, kGood)), kPass);
  FlowTuple t;
  t.family = AF_INET;
  inet_pton(AF_INET, "10.0.0.2", t.peer_addr.data());
  inet_pton(AF_INET, "10.0.0.1", t.local_addr.data());
  t.peer_port = 40000;
  t.local_port = 8000;
  EXPECT_TRUE(f->lookupFlowTag(t).has_value()) << "the victim's tag was evicted by chosen flows";
  // and the key comes from getrandom: two loads differ
  LOAD_OR_SKIP(g, o);
  EXPECT_NE(std::memcmp(&f->flowSecret(), &g->flowSecret(), sizeof(ig_sipkey)), 0);
}

// ---------------------------------------------------------------- per-source buckets (item 6)

TEST(XdpHostile, Ipv6SourcesShareABucketPerSlash64) {
  XdpOptions o = fixtureOptions();
  o.syn_rate_per_sec = 1;
  o.syn_burst = 2;
  LOAD_OR_SKIP(f, o);
  int passed = 0;
  for (int i = 0; i < 6; ++i) {
    PacketSpec s = seg(static_cast<uint16_t>(51000 + i), kSyn, 1, "",
                       "2001:db8:1:2::" + std::to_string(i + 1));  // six addresses, one /64
    s.ipv6 = true;
    s.dst = "2001:db8::1";
    passed += run(*f, s) == kPass;
  }
  EXPECT_EQ(passed, 2);
  PacketSpec other = seg(51100, kSyn, 1, "", "2001:db8:1:3::1");  // another /64
  other.ipv6 = true;
  other.dst = "2001:db8::1";
  EXPECT_EQ(run(*f, other), kPass);
}

TEST(XdpHostile, Ipv4PrefixIsConfigurable) {
  XdpOptions o = fixtureOptions();
  o.syn_rate_per_sec = 1;
  o.syn_burst = 1;
  o.source_prefix_v4 = 24;
  LOAD_OR_SKIP(f, o);
  EXPECT_EQ(run(*f, seg(51200, kSyn, 1, "", "10.1.2.3")), kPass);
  EXPECT_EQ(run(*f, seg(51201, kSyn, 1, "", "10.1.2.4")), kDrop) << "same /24";
  EXPECT_EQ(run(*f, seg(51202, kSyn, 1, "", "10.1.3.4")), kPass) << "another /24";
  o.source_prefix_v6 = 0;
  EXPECT_FALSE(XdpFilter::load(o).ok());
}

// ---------------------------------------------------------------- fragments (item 7)

TEST(XdpHostile, FragmentPolicies) {
  PacketSpec first = seg(52000, kAck | kPsh, 1000, kGood);
  first.frag = 0x2000;
  PacketSpec later = seg(52000, kAck | kPsh, 1000);
  later.frag = 0x0010;
  later.raw_l4 = std::vector<uint8_t>(32, 'z');
  for (FragPolicy pol : {FragPolicy::kDrop, FragPolicy::kDropAll, FragPolicy::kPass}) {
    XdpOptions o = fixtureOptions();
    o.fragments = pol;
    LOAD_OR_SKIP(f, o);
    EXPECT_EQ(run(*f, first), pol == FragPolicy::kPass ? kPass : kDrop);
    EXPECT_EQ(run(*f, later), pol == FragPolicy::kDropAll ? kDrop : kPass);
    auto c = f->readCounters();
    EXPECT_EQ(c.packets[XDP_DROP][IG_R_IP_FRAGMENT] + c.packets[XDP_PASS][IG_R_IP_FRAGMENT], 2u);
  }
}

// ---------------------------------------------------------------- RSTs, short segments (item 8)

TEST(XdpHostile, RstsAreRateLimited) {
  XdpOptions o = fixtureOptions();
  o.rst_rate_per_sec = 1;
  o.rst_burst = 2;
  LOAD_OR_SKIP(f, o);
  std::vector<uint32_t> v;
  for (int i = 0; i < 4; ++i)
    v.push_back(run(*f, seg(static_cast<uint16_t>(53000 + i), kAck | kPsh, 1000, "BREW /v2/ HTTP/1.1\r\n")));
  EXPECT_EQ(v, (std::vector<uint32_t>{kTx, kTx, kDrop, kDrop}));
  EXPECT_EQ(f->readCounters().packets[XDP_DROP][IG_R_RST_RATE_LIMITED], 2u);
}

TEST(XdpHostile, FirstSegmentCutInsideTheMethodIsARequestStart) {
  LOAD_OR_SKIP(f, withMetadata(fixtureOptions()));
  struct Case {
    const char* payload;
    uint32_t verdict;
  } cases[] = {{"G", kPass}, {"GE", kPass}, {"GET", kPass}, {"POS", kPass},
               {"P", kPass}, {"PR", kPass}, {"PRI", kPass}, {"X", kTx},
               {"GX", kTx},  {"g", kTx}};
  uint16_t port = 54000;
  for (const Case& c : cases) {
    ASSERT_EQ(run(*f, seg(port, kSyn, 999)), kPass);
    RunResult r = runXdp(f->programFd(), buildPacket(seg(port, kAck | kPsh, 1000, c.payload)));
    EXPECT_EQ(r.retval, c.verdict) << c.payload;
    if (c.verdict == kPass) {
      EXPECT_NE(tagOf(r).flags & IG_TF_REQUEST_START, 0) << c.payload;
    }
    ++port;
  }
}

// Found by fuzz_xdp_classifier (tests/fuzz/regressions/fuzz_xdp_classifier/
// method_8_letters_shift64): a first segment of exactly 8 letters shifted a 64-bit mask by 64.
TEST(XdpHostile, FirstSegmentOfAnEightLetterMethod) {
  XdpOptions o = fixtureOptions();
  o.methods = {"GET", "POST", "PROPFIND"};
  o = withMetadata(o);
  LOAD_OR_SKIP(f, o);
  struct Case {
    const char* payload;
    uint32_t verdict;
  } cases[] = {{"PROPFIND", kPass}, {"PROPFINX", kTx}, {"PROPFIN", kPass}};
  uint16_t port = 54500;
  for (const Case& c : cases) {
    ASSERT_EQ(run(*f, seg(port, kSyn, 999)), kPass);
    EXPECT_EQ(run(*f, seg(port, kAck | kPsh, 1000, c.payload)), c.verdict) << c.payload;
    ++port;
  }
}

// ---------------------------------------------------------------- SYN cookies (main feature)

ig_cookie_keys makeKeys(uint32_t gen = 3) {
  ig_cookie_keys k{};
  k.key[0] = common::randomSipKey();
  k.key[1] = common::randomSipKey();
  k.gen = gen;
  return k;
}

std::vector<uint8_t> u32be(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}
uint32_t be32(const std::vector<uint8_t>& b, size_t off) {
  return (uint32_t{b[off]} << 24) | (uint32_t{b[off + 1]} << 16) | (uint32_t{b[off + 2]} << 8) |
         b[off + 3];
}

struct SynCase {
  const char* name;
  bool v6 = false;
  bool vlan = false;
  int mss = 1460;  // -1: none
  int wscale = 7;  // -1: none
  bool sack = true;
  bool ts = true;
};

std::vector<uint8_t> synOptions(const SynCase& c, uint32_t tsval) {
  std::vector<uint8_t> o;
  if (c.mss >= 0) o.insert(o.end(), {2, 4, uint8_t(c.mss >> 8), uint8_t(c.mss)});
  if (c.sack) o.insert(o.end(), {4, 2});
  if (c.ts) {
    o.insert(o.end(), {8, 10});
    auto t = u32be(tsval);
    o.insert(o.end(), t.begin(), t.end());
    o.insert(o.end(), {0, 0, 0, 0});
  }
  if (c.wscale >= 0) o.insert(o.end(), {1, 3, 3, uint8_t(c.wscale)});
  return o;
}

PacketSpec clientSpec(const SynCase& c, uint16_t sport) {
  PacketSpec s;
  s.ipv6 = c.v6;
  if (c.v6) {
    s.src = "2001:db8::2";
    s.dst = "2001:db8::1";
  }
  if (c.vlan) s.vlans = {42};
  s.sport = sport;
  return s;
}

void flowAddrs(const PacketSpec& s, uint32_t saddr[4], uint32_t daddr[4]) {
  std::memset(saddr, 0, 16);
  std::memset(daddr, 0, 16);
  inet_pton(s.ipv6 ? AF_INET6 : AF_INET, s.src.c_str(), saddr);
  inet_pton(s.ipv6 ? AF_INET6 : AF_INET, s.dst.c_str(), daddr);
}

uint64_t monoMs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

class CookieTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto f = XdpFilter::load(afxdpOptions());
    if (!f.ok()) {
      if (f.status().code() == absl::StatusCode::kPermissionDenied) GTEST_SKIP() << f.status();
      FAIL() << f.status();
    }
    f_ = std::move(*f);
    keys_ = makeKeys();
    ASSERT_TRUE(f_->setCookieKeys(keys_).ok());
    ASSERT_TRUE(f_->setCookieMode(true).ok());
  }

  // Runs the client's SYN, checks the SYN-ACK byte for byte; returns our ISN.
  uint32_t handshake(const SynCase& c, uint16_t sport, uint32_t client_isn = 0x12345678) {
    PacketSpec syn = clientSpec(c, sport);
    syn.flags = kSyn;
    syn.seq = client_isn;
    syn.ack = 0;
    syn.window = 64240;
    syn.tcp_options = synOptions(c, 0xabcdef01);
    std::vector<uint8_t> in = buildPacket(syn);
    uint64_t before_ms = monoMs();
    RunResult r = runXdp(f_->programFd(), in);
    uint64_t after_ms = monoMs();
    EXPECT_EQ(r.err, 0);
    EXPECT_EQ(r.retval, kTx) << c.name;
    EXPECT_TRUE(r.meta.empty());
    // our cookie, as the host computes it for what the client offered
    uint32_t saddr[4], daddr[4];
    flowAddrs(syn, saddr, daddr);
    uint32_t opts = ig_cookie_encode_opts(c.mss >= 0 ? c.mss : 536, c.wscale, c.sack, c.ts);
    uint32_t isn = ig_cookie_make(&keys_, saddr, daddr, htons(syn.sport), htons(syn.dport), c.v6,
                                  client_isn, opts);
    // the SYN-ACK we expect (TSval taken from the output, then checked against the clock)
    PacketSpec sa = replyTo(syn);
    sa.seq = isn;
    sa.ack = client_isn + 1;
    sa.flags = kSyn | kAck;
    sa.window = 65535;
    uint16_t mss = c.v6 ? 1440 : 1460;
    sa.tcp_options = {2, 4, uint8_t(mss >> 8), uint8_t(mss)};
    size_t tcp_off = 14 + (c.vlan ? 4 : 0) + (c.v6 ? 40 : 20);
    uint32_t tsval = 0;
    if (c.ts) {
      EXPECT_GE(r.out.size(), tcp_off + 36);
      if (r.out.size() >= tcp_off + 36) tsval = be32(r.out, tcp_off + 28);
      std::vector<uint8_t> t = {uint8_t(c.sack ? 4 : 1), uint8_t(c.sack ? 2 : 1), 8, 10};
      auto a = u32be(tsval), b = u32be(0xabcdef01);
      t.insert(t.end(), a.begin(), a.end());
      t.insert(t.end(), b.begin(), b.end());
      sa.tcp_options.insert(sa.tcp_options.end(), t.begin(), t.end());
      uint32_t ms = tsval - isn;  // a millisecond clock plus the per-flow offset
      EXPECT_GE(ms + 1, static_cast<uint32_t>(before_ms)) << c.name;
      EXPECT_LE(ms, static_cast<uint32_t>(after_ms) + 1) << c.name;
    } else if (c.sack) {
      sa.tcp_options.insert(sa.tcp_options.end(), {1, 1, 4, 2});
    }
    if (c.wscale >= 0) sa.tcp_options.insert(sa.tcp_options.end(), {1, 3, 3, 7});
    EXPECT_EQ(hex(r.out), hex(buildPacket(sa))) << c.name;
    EXPECT_TRUE(checksumsValid(r.out)) << c.name;
    // and the host validates the cookie the frame carries, with what the client offered
    if (r.out.size() >= tcp_off + 8) {
      ig_cookie_opts got{};
      EXPECT_EQ(ig_cookie_check(&keys_, saddr, daddr, htons(syn.sport), htons(syn.dport), c.v6,
                                client_isn, be32(r.out, tcp_off + 4), &got),
                1)
          << c.name;
      uint16_t want_mss = ig_cookie_mss[0];  // the largest entry <= what the client offered
      for (uint16_t m : ig_cookie_mss)
        if (c.mss >= m) want_mss = m;
      EXPECT_EQ(got.mss, want_mss) << c.name;
      EXPECT_EQ(got.wscale, c.wscale) << c.name;
      EXPECT_EQ(got.sack, c.sack ? 1 : 0) << c.name;
      EXPECT_EQ(got.ts, c.ts ? 1 : 0) << c.name;
    }
    return isn;
  }

  // The handshake, then the client's first data segment carrying `payload`, acking our ISN.
  PacketSpec firstDataAfterHandshake(const SynCase& c, uint16_t sport, uint32_t client_isn,
                                     const char* payload) {
    const uint32_t isn = handshake(c, sport, client_isn);
    PacketSpec d = clientSpec(c, sport);
    d.seq = client_isn + 1;
    d.ack = isn + 1;
    d.payload = payload;
    return d;
  }

  std::unique_ptr<XdpFilter> f_;
  ig_cookie_keys keys_{};
};

TEST_F(CookieTest, SynIsAnsweredWithACookieSynAck) {
  const SynCase cases[] = {
      {"ipv4, every option"},
      {"ipv4, no options", false, false, -1, -1, false, false},
      {"ipv4, mss only", false, false, 1460, -1, false, false},
      {"ipv4, mss + wscale", false, false, 1460, 7, false, false},
      {"ipv4, mss + sack", false, false, 1460, -1, true, false},
      {"ipv4, mss + timestamps", false, false, 536, -1, false, true},
      {"ipv4, vlan", false, true},
      {"ipv6, every option", true},
      {"ipv6, no options", true, false, -1, -1, false, false},
      {"ipv6, vlan, sack + wscale", true, true, 1440, 2, true, false},
  };
  uint16_t port = 55000;
  for (const SynCase& c : cases) handshake(c, port++);
  auto k = CookieCounters::from(f_->readCounters());
  EXPECT_EQ(k.syn_cookies_sent, std::size(cases));
  EXPECT_EQ(f_->readCounters().packets[XDP_TX][IG_R_SYN_COOKIE_SENT], std::size(cases));
}

TEST_F(CookieTest, SynCookiesAreNotChargedToTheSynBucket) {
  XdpOptions o = afxdpOptions();
  o.syn_rate_per_sec = 1;
  o.syn_burst = 1;
  LOAD_OR_SKIP(g, o);
  ASSERT_TRUE(g->setCookieKeys(keys_).ok());
  ASSERT_TRUE(g->setCookieMode(true).ok());
  for (int i = 0; i < 5; ++i) {
    PacketSpec s = seg(static_cast<uint16_t>(55100 + i), kSyn, 7);
    EXPECT_EQ(run(*g, s), kTx) << "a spoofed flood from this source must not lock it out";
  }
}

TEST_F(CookieTest, PureAckIsDeferredAndABadOneIsPassed) {
  SynCase c{"ipv4"};
  uint32_t isn = handshake(c, 55200, 1000);
  PacketSpec ack = seg(55200, kAck, 1001);
  ack.ack = isn + 1;
  EXPECT_EQ(run(*f_, ack), kDrop);
  ack.ack = isn + 2;
  EXPECT_EQ(run(*f_, ack), kPass) << "not our cookie: maybe an established connection";
  ack.ack = isn + 1;
  ack.seq = 1002;
  EXPECT_EQ(run(*f_, ack), kPass) << "the cookie covers the client's ISN";
  auto k = CookieCounters::from(f_->readCounters());
  EXPECT_EQ(k.acks_deferred, 1u);
  EXPECT_EQ(k.acks_no_match, 2u);
}

TEST_F(CookieTest, ValidCookieGoodRequestGoesToTheStackFlagged) {
  SKIP_WITHOUT_METADATA_TAGS(*f_);
  PacketSpec d = firstDataAfterHandshake({"ipv6", true}, 55300, 77, kGood);
  RunResult r = runXdp(f_->programFd(), buildPacket(d));
  EXPECT_EQ(r.retval, kPass);  // XDP_REDIRECT with a socket bound on the queue
  ig_tag t = tagOf(r);
  EXPECT_EQ(t.magic, IG_TAG_MAGIC);
  EXPECT_EQ(t.reason, IG_R_REQUEST);
  EXPECT_EQ(t.flags, IG_TF_COOKIE | IG_TF_PROVEN | IG_TF_REQUEST_START | IG_TF_FIRST_SEGMENT);
  EXPECT_EQ(r.out, buildPacket(d));
  EXPECT_EQ(f_->readCounters().packets[XDP_PASS][IG_R_COOKIE_VALID], 1u);
  // the next request on the connection is no first segment and carries no cookie flag
  d.seq += static_cast<uint32_t>(d.payload.size());
  r = runXdp(f_->programFd(), buildPacket(d));
  EXPECT_EQ(tagOf(r).flags, IG_TF_PROVEN | IG_TF_REQUEST_START);
}

TEST_F(CookieTest, ValidCookieBadRequestIsResetByTheProgram) {
  SKIP_WITHOUT_METADATA_TAGS(*f_);
  PacketSpec d = firstDataAfterHandshake({"ipv4", false, true}, 55400, 5000, kBadLine);
  RunResult r = runXdp(f_->programFd(), buildPacket(d));
  EXPECT_EQ(r.retval, kTx) << "never reaches userspace";
  EXPECT_TRUE(r.meta.empty());
  EXPECT_EQ(hex(r.out), hex(buildPacket(rstFor(d))));
  EXPECT_TRUE(checksumsValid(r.out));
  EXPECT_EQ(run(*f_, d), kDrop) << "its retransmission";
  auto c2 = f_->readCounters();
  EXPECT_EQ(c2.packets[XDP_TX][IG_R_BAD_REQUEST_LINE], 1u);
  EXPECT_EQ(c2.packets[XDP_DROP][IG_R_REJECTED_FLOW], 1u);
}

TEST_F(CookieTest, ModeOffPassesSynsAndDrainsInFlightHandshakes) {
  SKIP_WITHOUT_METADATA_TAGS(*f_);
  SynCase c{"ipv4"};
  uint32_t isn = handshake(c, 55500, 900);
  ASSERT_TRUE(f_->setCookieMode(false).ok());
  EXPECT_FALSE(f_->cookieMode());
  PacketSpec syn = seg(55501, kSyn, 1);
  RunResult r = runXdp(f_->programFd(), buildPacket(syn));
  EXPECT_EQ(r.retval, kPass);
  EXPECT_EQ(tagOf(r).reason, IG_R_SYN);
  EXPECT_EQ(r.out, buildPacket(syn));
  PacketSpec ack = seg(55500, kAck, 901);
  ack.ack = isn + 1;
  EXPECT_EQ(run(*f_, ack), kDrop) << "a handshake in flight is still deferred while draining";
  ASSERT_TRUE(f_->setCookieMode(true).ok());
  ASSERT_TRUE(f_->setCookieMode(false, 0).ok());
  EXPECT_EQ(run(*f_, ack), kPass) << "drained: no cookie checks";
}

TEST_F(CookieTest, NoKeysNoCookies) {
  LOAD_OR_SKIP(g, afxdpOptions());
  ASSERT_TRUE(g->setCookieMode(true).ok());
  EXPECT_EQ(run(*g, seg(55600, kSyn, 1)), kPass) << "an unset (zero) key signs nothing";
  // a cookie made with the zero key is no proof either
  ig_cookie_keys zero{};
  uint32_t s[4] = {}, d[4] = {};
  inet_pton(AF_INET, "10.0.0.2", s);
  inet_pton(AF_INET, "10.0.0.1", d);
  uint32_t forged = ig_cookie_make(&zero, s, d, htons(55601), htons(8000), 0, 10,
                                   ig_cookie_encode_opts(1460, 7, 1, 1));
  PacketSpec ack = seg(55601, kAck, 11);
  ack.ack = forged + 1;
  EXPECT_EQ(run(*g, ack), kPass);
  EXPECT_EQ(g->readCounters().byReason(IG_R_COOKIE_ACK_DEFERRED), 0u);
}

TEST(XdpHostile, CookieModeNeedsAfxdp) {
  LOAD_OR_SKIP(f, fixtureOptions());
  EXPECT_EQ(f->setCookieMode(true).code(), absl::StatusCode::kFailedPrecondition);
  XdpOptions o = afxdpOptions();
  o.syn_cookies = SynCookies::kOff;
  LOAD_OR_SKIP(g, o);
  EXPECT_EQ(g->setCookieMode(true).code(), absl::StatusCode::kFailedPrecondition);
  o.syn_cookies = SynCookies::kAlways;
  LOAD_OR_SKIP(h, o);
  EXPECT_TRUE(h->cookieMode());
}

TEST(XdpHostile, AfxdpChargesRequestStartsOnlyToProvenHandshakes) {
  // Spoofed request starts (no handshake with us) must not drain a source's bucket; a client
  // whose first segment acks one of our cookies (the stack's ISNs are cookies) is charged.
  XdpOptions o = afxdpOptions();
  o.request_rate_per_sec = 1;
  o.request_burst = 1;
  o = withMetadata(o);
  LOAD_OR_SKIP(f, o);
  ig_cookie_keys keys = makeKeys();
  ASSERT_TRUE(f->setCookieKeys(keys).ok());
  for (int i = 0; i < 5; ++i) {
    RunResult r = runXdp(f->programFd(),
                         buildPacket(seg(static_cast<uint16_t>(56000 + i), kAck | kPsh, 1000, kGood)));
    EXPECT_EQ(tagOf(r).verdict, IG_TV_ADMIT) << "spoofed request start " << i;
  }
  uint32_t s[4] = {}, d[4] = {};
  inet_pton(AF_INET, "10.0.0.2", s);
  inet_pton(AF_INET, "10.0.0.1", d);
  std::vector<int> verdicts;
  for (int i = 0; i < 2; ++i) {
    uint16_t port = static_cast<uint16_t>(56100 + i);
    ASSERT_EQ(run(*f, seg(port, kSyn, 999)), kPass);  // cookie mode off: the stack answers
    PacketSpec first = seg(port, kAck | kPsh, 1000, kGood);
    first.ack = ig_cookie_make(&keys, s, d, htons(port), htons(8000), 0, 999,
                               ig_cookie_encode_opts(1460, 7, 1, 1)) + 1;
    RunResult r = runXdp(f->programFd(), buildPacket(first));
    EXPECT_NE(tagOf(r).flags & IG_TF_PROVEN, 0);
    EXPECT_EQ(tagOf(r).flags & IG_TF_COOKIE, 0) << "the stack saw this SYN";
    verdicts.push_back(tagOf(r).verdict);
  }
  EXPECT_EQ(verdicts, (std::vector<int>{IG_TV_ADMIT, IG_TV_RATE_LIMITED}));
}

TEST(XdpHostile, WarnsWhenKernelSynCookiesAreOff) {
  // xdp-filter mode relies on the kernel's SYN cookies: one clear line naming the sysctl.
  std::string dir = ::testing::TempDir();
  auto write = [&](const char* name, const char* text) {
    std::string path = dir + name;
    std::FILE* f = std::fopen(path.c_str(), "w");
    std::fputs(text, f);
    std::fclose(f);
    return path;
  };
  auto off = kernelSynCookiesWarning(write("/ig_syncookies_0", "0\n"));
  ASSERT_TRUE(off.has_value());
  EXPECT_NE(off->find("net.ipv4.tcp_syncookies=1"), std::string::npos) << *off;
  EXPECT_FALSE(kernelSynCookiesWarning(write("/ig_syncookies_1", "1\n")).has_value());
  EXPECT_FALSE(kernelSynCookiesWarning(write("/ig_syncookies_2", "2\n")).has_value());
  EXPECT_TRUE(kernelSynCookiesWarning(dir + "/ig_no_such_file").has_value());
}

}  // namespace
}  // namespace infergate::xdp::testing
