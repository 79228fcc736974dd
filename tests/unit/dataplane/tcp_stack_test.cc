// The TCP state machine through a fake packet device, packetdrill style: the test plays the
// client, injects segments built with the stack's own packet builder, and checks every
// segment the stack sends (flags, sequence numbers, options, payload) and its counters.
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dataplane/tcp/fake_device.h"
#include "dataplane/tcp/frame_tag.h"
#include "dataplane/tcp/packet.h"
#include "dataplane/tcp/seq.h"
#include "dataplane/tcp/tcp_stack.h"
#include "tests/mocks/variable_clock.h"

namespace infergate::dataplane::tcp {
namespace {

constexpr uint64_t kMs = 1'000'000;
constexpr uint16_t kPort = 8080;

// A session that records what arrives and lets the test drive the transport.
struct TestSession : net::Session {
  explicit TestSession(net::Transport& t) : transport(&t) {}
  void onData(const char* d, size_t n) override {
    received.append(d, n);
    if (transport) tags.push_back(transport->ingressTag());
    if (transport) copies.push_back(transport->deliveringCopy());
    if (pause_after_bytes > 0 && received.size() >= pause_after_bytes && transport) {
      pause_after_bytes = 0;
      transport->pauseReading(true);
    }
    if (echo && transport) transport->send(std::string_view(d, n));
  }
  void onPeerClosed() override {
    peer_closed = true;
    if (close_on_peer_close && transport) transport->closeAfterFlush();
  }
  void onTick(uint64_t) override { ++ticks; }
  void onClosed() override {
    closed = true;
    transport = nullptr;
  }
  bool idle() const override { return true; }
  net::Transport* transport;
  std::string received;
  bool peer_closed = false, closed = false, echo = false, close_on_peer_close = false;
  int ticks = 0;
  std::vector<std::optional<net::IngressTag>> tags;  // ingressTag() at each onData
  std::vector<bool> copies;  // deliveringCopy() at each onData
  size_t pause_after_bytes = 0;  // > 0: pauseReading(true) once this much has arrived
};

struct Out {
  Segment seg;
  std::string data;
  uint32_t len() const { return static_cast<uint32_t>(data.size()); }
  bool has(uint8_t f) const { return (seg.flags & f) == f; }
};

struct SynOpts {
  uint16_t mss = 1460;
  int8_t wscale = 7;
  bool sack = true;
  bool ts = true;
};

class TcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    opts.initial_rto_ns = 1000 * kMs;
    opts.min_rto_ns = 200 * kMs;
    opts.time_wait_ns = 1000 * kMs;
  }
  void start(bool v6 = false) {
    dev = std::make_unique<FakePacketDevice>(1500, 4096);
    dev->hold_budget = hold_budget;
    dev->poison_released = true;  // a read from a released frame shows as 0xdb bytes
    dev->tx_checksum_offload = tx_offload;
    stack = std::make_unique<TcpStack>(opts, *dev, clock);
    ASSERT_TRUE(stack->listen(kPort, [this](net::Transport& t) {
                         auto s = std::make_shared<TestSession>(t);
                         s->echo = echo;
                         s->close_on_peer_close = close_on_peer_close;
                         sessions.push_back(s);
                         return s;
                       }).ok());
    key = clientKey(40000, v6);
  }
  static FlowKey clientKey(uint16_t port, bool v6) {
    FlowKey k;
    k.v6 = v6;
    if (v6) {
      k.local_ip[0] = 0xfd;
      k.local_ip[15] = 2;
      k.remote_ip[0] = 0xfd;
      k.remote_ip[15] = 1;
    } else {
      const uint8_t c[4] = {10, 0, 0, 2}, s[4] = {10, 0, 0, 1};
      std::memcpy(k.local_ip, c, 4);
      std::memcpy(k.remote_ip, s, 4);
    }
    k.local_port = port;
    k.remote_port = kPort;
    return k;
  }
  // Client -> stack.
  void send(uint8_t flags, uint32_t seq, uint32_t ack, std::string_view payload = {},
            uint16_t window = 65535, const FlowKey* k = nullptr) {
    SegmentSpec s;
    s.src_mac = cmac;
    s.dst_mac = smac;
    s.key = k ? k : &key;
    s.seq = seq;
    s.ack = ack;
    s.flags = flags;
    s.window = window;
    if (client_ts && !(flags & kSyn)) {
      s.has_ts = true;
      s.ts_val = ts_val;
      s.ts_ecr = last_ts_from_server;
    }
    if (nsack) {
      s.num_sack = nsack;
      s.sack = sack;
    }
    std::vector<uint8_t> f(9100);
    f.resize(buildSegment(f.data(), f.size(), s, reinterpret_cast<const uint8_t*>(payload.data()),
                          static_cast<uint32_t>(payload.size())));
    if (corrupt_tcp_checksum) f[kEthHeader + (s.key->v6 ? 40 : 20) + 16] ^= 0x21;
    if (via_device) {  // through the device burst: the stack may hold the frame
      dev->inject(std::move(f), meta);
      stack->processRx(64);
      return;
    }
    stack->onFrame(f.data(), f.size(), meta);
  }
  void sendSyn(uint32_t isn, const SynOpts& o, const FlowKey* k = nullptr) {
    SegmentSpec s;
    s.src_mac = cmac;
    s.dst_mac = smac;
    s.key = k ? k : &key;
    s.seq = isn;
    s.flags = kSyn;
    s.window = 65535;
    s.mss = o.mss;
    s.wscale = o.wscale;
    s.sack_permitted = o.sack;
    s.has_ts = o.ts;
    s.ts_val = ts_val;
    client_ts = o.ts;
    std::vector<uint8_t> f(256);
    f.resize(buildSegment(f.data(), f.size(), s, nullptr, 0));
    stack->onFrame(f.data(), f.size());
  }
  // Stack -> client: everything sent since the last call.
  std::vector<Out> drain() {
    stack->poll(now);  // flushes what the test made the session send (same time: no timer moves)
    std::vector<Out> out;
    while (!dev->sent.empty()) {
      const std::vector<uint8_t>& f = dev->sent.front();
      Out o;
      DropReason why;
      EXPECT_EQ(parseFrame(f.data(), f.size(), true, o.seg, why), FrameKind::kTcp);
      o.data.assign(reinterpret_cast<const char*>(o.seg.payload), o.seg.payload_len);
      o.seg.payload = nullptr;
      if (o.seg.opt.has_ts) last_ts_from_server = o.seg.opt.ts_val;
      EXPECT_EQ(std::memcmp(o.seg.dst_mac, cmac, 6), 0);  // replies go to the sender's MAC
      out.push_back(std::move(o));
      dev->sent.pop_front();
    }
    return out;
  }
  void advance(uint64_t ns) {
    now += ns;
    stack->poll(now);
  }
  // Full handshake; returns the server's ISN. Client ISN = cisn.
  uint32_t connect(uint32_t cisn = 1000, SynOpts o = SynOpts{}) {
    sendSyn(cisn, o);
    auto out = drain();
    EXPECT_EQ(out.size(), 1u);
    if (out.empty()) return 0;
    EXPECT_TRUE(out[0].has(kSyn | kAck));
    EXPECT_EQ(out[0].seg.ack, cisn + 1);
    siss = out[0].seg.seq;
    cseq = cisn + 1;
    sseq = siss + 1;
    send(kAck, cseq, sseq);
    EXPECT_TRUE(drain().empty());
    return siss;
  }
  TestSession& session(size_t i = 0) { return *sessions.at(i); }
  size_t payloadMss(const SynOpts& o) const { return std::min<size_t>(o.mss, 1460) - (o.ts ? 12 : 0); }

  TcpOptions opts;
  uint64_t now = 5'000'000'000ull;
  mocks::VariableClock clock{now};  // declared before the stack, which reads it
  std::unique_ptr<FakePacketDevice> dev;
  std::unique_ptr<TcpStack> stack;
  std::vector<std::shared_ptr<TestSession>> sessions;
  FlowKey key;
  uint8_t cmac[6] = {2, 0, 0, 0, 0, 2};
  uint8_t smac[6] = {2, 0, 0, 0, 0, 1};
  bool client_ts = false;
  uint32_t ts_val = 777;
  uint32_t last_ts_from_server = 0;
  uint8_t nsack = 0;
  uint32_t sack[4][2] = {};
  bool echo = false, close_on_peer_close = false;
  uint64_t meta = 0;  // Frame::meta of the segments send() injects (the XDP program's tag)
  bool via_device = false;  // send(): inject + processRx() instead of onFrame()
  uint32_t hold_budget = 0;  // the fake device's rxHoldBudget() (set before start())
  bool tx_offload = false;   // the fake device's txChecksumOffload() (set before start())
  bool corrupt_tcp_checksum = false;  // send(): a wrong TCP checksum
  uint32_t siss = 0, cseq = 0, sseq = 0;
};

std::string pattern(size_t n, uint32_t seed = 1) {
  std::string s(n, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1103515245u + 12345u;
    s[i] = static_cast<char>('a' + (x >> 16) % 26);
  }
  return s;
}

// ---- Handshake: every option combination --------------------------------------------------

class HandshakeTest : public TcpTest, public ::testing::WithParamInterface<int> {};

TEST_P(HandshakeTest, NegotiatesOffered) {
  const int m = GetParam() & 15;
  // Client ISNs in both halves of sequence space (issue 12: 0x80000000 disabled the window).
  const uint32_t cisn = GetParam() < 16 ? 1000u : 0x80000000u;
  SynOpts o;
  o.mss = (m & 1) ? 1000 : 0;  // 0: no MSS option -> 536
  o.wscale = (m & 2) ? 9 : -1;
  o.sack = m & 4;
  o.ts = m & 8;
  opts.rcv_buf = 1 << 20;
  start();
  sendSyn(cisn, o);
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  const Out& sa = out[0];
  EXPECT_TRUE(sa.has(kSyn | kAck));
  EXPECT_FALSE(sa.has(kFin));
  EXPECT_EQ(sa.seg.ack, cisn + 1);
  EXPECT_TRUE(sa.seg.opt.has_mss);
  EXPECT_EQ(sa.seg.opt.mss, 1460);
  EXPECT_EQ(sa.seg.opt.wscale >= 0, o.wscale >= 0);
  if (o.wscale >= 0) {
    EXPECT_EQ(sa.seg.opt.wscale, 5);  // 1 MiB needs shift 5
  }
  EXPECT_EQ(sa.seg.opt.sack_permitted, o.sack);
  EXPECT_EQ(sa.seg.opt.has_ts, o.ts);
  if (o.ts) {
    EXPECT_EQ(sa.seg.opt.ts_ecr, ts_val);
  }
  EXPECT_EQ(sa.seg.window, 65535);  // SYN windows are never scaled
  EXPECT_EQ(stack->counters().inState(TcpState::kSynReceived), 1u);
  siss = sa.seg.seq;
  send(kAck, cisn + 1, siss + 1, {}, 65535);
  EXPECT_EQ(stack->counters().inState(TcpState::kEstablished), 1u);
  EXPECT_EQ(stack->counters().accepted, 1u);
  ASSERT_EQ(sessions.size(), 1u);
  // Segment size: min(peer MSS or 536, ours) minus 12 bytes of timestamps.
  session().transport->send(pattern(5000));
  out = drain();
  ASSERT_GE(out.size(), 2u);
  const size_t expect_mss = (o.mss ? 1000 : 536) - (o.ts ? 12 : 0);
  EXPECT_EQ(out[0].len(), expect_mss);
  EXPECT_EQ(out[0].seg.opt.has_ts, o.ts);
  // Our window after the handshake: scaled when scaling was negotiated.
  const uint32_t adv = static_cast<uint32_t>(out[0].seg.window) << (o.wscale >= 0 ? 5 : 0);
  if (o.wscale >= 0) EXPECT_EQ(adv, 1u << 20);
  else EXPECT_EQ(adv, 65535u);
  // The peer's window, scaled by its shift: with wscale 9 and window 65535 nothing limits,
  // without scaling 65535 bytes; either way cwnd (10 segments) limits the first flight.
  size_t total = 0;
  for (auto& s : out) total += s.len();
  EXPECT_EQ(total, std::min<size_t>(5000, 10 * expect_mss));
  // The window holds: bytes far beyond it are not stored, whatever half the ISN is in.
  session().transport->pauseReading(true);
  const size_t held = stack->bufferBytes();  // our unacknowledged response
  send(kAck, cisn + 1 + 0x7FFF0000u, siss + 1, "x", 65535);
  EXPECT_EQ(stack->bufferBytes(), held);
  EXPECT_GE(stack->counters().dropped(DropReason::kOutOfWindow), 1u);
}

INSTANTIATE_TEST_SUITE_P(AllCombinations, HandshakeTest, ::testing::Range(0, 32));

TEST_F(TcpTest, Ipv6Handshake) {
  start(true);
  connect();
  EXPECT_EQ(stack->counters().accepted, 1u);
  send(kAck | kPsh, cseq, sseq, "hello");
  EXPECT_EQ(session().received, "hello");
}

TEST_F(TcpTest, SynAckRetransmittedWithBackoffThenDropped) {
  opts.syn_ack_retries = 2;
  start();
  sendSyn(1000, SynOpts{});
  ASSERT_EQ(drain().size(), 1u);
  advance(999 * kMs);
  EXPECT_TRUE(drain().empty());
  advance(1 * kMs);
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kSyn | kAck));
  advance(2000 * kMs);  // doubled
  ASSERT_EQ(drain().size(), 1u);
  advance(4000 * kMs);  // retries exhausted: the half-open connection goes, silently
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_EQ(stack->counters().timeouts, 1u);
}

TEST_F(TcpTest, DuplicateSynGetsSynAckAgain) {
  start();
  sendSyn(1000, SynOpts{});
  auto a = drain();
  sendSyn(1000, SynOpts{});
  auto b = drain();
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(a[0].seg.seq, b[0].seg.seq);
  EXPECT_EQ(stack->connectionCount(), 1u);
}

TEST_F(TcpTest, ClosedPortAndStraySegmentsGetRst) {
  start();
  FlowKey other = key;
  other.remote_port = 9999;
  SegmentSpec s;
  s.src_mac = cmac;
  s.dst_mac = smac;
  s.key = &other;
  s.seq = 5;
  s.flags = kSyn;
  std::vector<uint8_t> f(128);
  f.resize(buildSegment(f.data(), f.size(), s, nullptr, 0));
  stack->onFrame(f.data(), f.size());
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kRst | kAck));
  EXPECT_EQ(out[0].seg.ack, 6u);
  EXPECT_EQ(stack->counters().dropped(DropReason::kNoListener), 1u);
  // An ACK for no connection: RST with seq = its ack.
  send(kAck, 100, 4242);
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kRst));
  EXPECT_FALSE(out[0].has(kAck));
  EXPECT_EQ(out[0].seg.seq, 4242u);
  // A RST for no connection: nothing.
  send(kRst, 100, 0);
  EXPECT_TRUE(drain().empty());
}

// ---- Data in ------------------------------------------------------------------------------

TEST_F(TcpTest, InOrderDataDelayedAckAndEverySecondSegment) {
  start();
  connect();
  send(kAck | kPsh, cseq, sseq, "abc");
  EXPECT_EQ(session().received, "abc");
  EXPECT_TRUE(drain().empty());  // delayed
  advance(39 * kMs);
  EXPECT_TRUE(drain().empty());
  advance(1 * kMs);
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.ack, cseq + 3);
  cseq += 3;
  send(kAck, cseq, sseq, "d");
  EXPECT_TRUE(drain().empty());
  send(kAck, cseq + 1, sseq, "e");  // second segment: ACK now
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.ack, cseq + 2);
  EXPECT_EQ(session().received, "abcde");
  EXPECT_EQ(stack->counters().bytes_in, 5u);
}

// Checksums (packet_io.h): a tag from the XDP program never spares a verification; only the
// device's own kMetaRxL4ChecksumGood (dpdk mode, the NIC's GOOD) does. Devices without
// txChecksumOffload() (AF_XDP, this fake) get complete checksums and unmarked frames.
TEST_F(TcpTest, OnlyTheDevicesGoodBitSkipsVerificationNeverTheTag) {
  start();
  connect();
  corrupt_tcp_checksum = true;
  meta = makeMeta(1, kVerdictAdmit, kTagRequestStart, 0);
  send(kAck | kPsh, cseq, sseq, "abc");
  EXPECT_EQ(stack->counters().dropped(DropReason::kBadTcpChecksum), 1u);
  EXPECT_EQ(session().received, "");
  meta |= kMetaRxIpChecksumGood;  // the IPv4 header's word says nothing of TCP
  send(kAck | kPsh, cseq, sseq, "abc");
  EXPECT_EQ(stack->counters().dropped(DropReason::kBadTcpChecksum), 2u);
  meta |= kMetaRxL4ChecksumGood;
  send(kAck | kPsh, cseq, sseq, "abc");
  EXPECT_EQ(session().received, "abc");
  advance(40 * kMs);
  EXPECT_EQ(drain().size(), 1u) << "the ACK, complete checksums (drain verifies them)";
  EXPECT_EQ(dev->tx_offload_marked, 0u);
}

// A device with txChecksumOffload(): every segment the stack sends (SYN-ACK, data, RST) is
// marked and carries the pseudo-header sum, not a complete checksum.
TEST_F(TcpTest, TxOffloadMarksEverySegmentAndLeavesThePseudoHeaderSum) {
  tx_offload = true;
  start();
  sendSyn(1000, SynOpts{});
  ASSERT_EQ(dev->sent.size(), 1u);
  EXPECT_EQ(dev->tx_offload_marked, 1u);
  const std::vector<uint8_t>& f = dev->sent.front();
  Segment seg;
  DropReason why{};
  EXPECT_EQ(parseFrame(f.data(), f.size(), false, false, seg, why), FrameKind::kTcp);
  EXPECT_EQ(seg.flags, kSyn | kAck);
  const size_t tcp = kEthHeader + 20;
  EXPECT_EQ(f[kEthHeader + 10] << 8 | f[kEthHeader + 11], 0) << "IPv4 header checksum left";
  EXPECT_EQ(f[tcp + 16] << 8 | f[tcp + 17],
            pseudoHeaderSum(f.data() + kEthHeader + 12, f.data() + kEthHeader + 16, false,
                            static_cast<uint32_t>(f.size() - tcp)));
  dev->sent.clear();
  const FlowKey other = clientKey(40009, false);
  send(kAck, 5, 6, {}, 65535, &other);  // no connection: a RST
  EXPECT_EQ(dev->tx_offload_marked, 2u);
}

TEST_F(TcpTest, OutOfOrderReassemblyWithSack) {
  start();
  connect();
  const std::string d = pattern(3000);
  send(kAck, cseq + 1000, sseq, std::string_view(d).substr(1000, 1000));
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);  // immediate duplicate ACK
  EXPECT_EQ(out[0].seg.ack, cseq);
  ASSERT_EQ(out[0].seg.opt.num_sack, 1);
  EXPECT_EQ(out[0].seg.opt.sack[0][0], cseq + 1000);
  EXPECT_EQ(out[0].seg.opt.sack[0][1], cseq + 2000);
  send(kAck, cseq + 2500, sseq, std::string_view(d).substr(2500, 500));
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  ASSERT_EQ(out[0].seg.opt.num_sack, 2);
  EXPECT_EQ(out[0].seg.opt.sack[0][0], cseq + 2500);  // most recent first
  EXPECT_EQ(out[0].seg.opt.sack[1][0], cseq + 1000);
  EXPECT_EQ(session().received, "");
  send(kAck, cseq, sseq, std::string_view(d).substr(0, 1000));  // fills the first hole
  EXPECT_EQ(session().received, d.substr(0, 2000));
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.ack, cseq + 2000);
  send(kAck, cseq + 2000, sseq, std::string_view(d).substr(2000, 500));
  EXPECT_EQ(session().received, d);
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.ack, cseq + 3000);
  EXPECT_EQ(out[0].seg.opt.num_sack, 0);
  EXPECT_EQ(stack->counters().out_of_order, 2u);
}

TEST_F(TcpTest, DuplicateAndOverlappingSegmentsAreTrimmed) {
  start();
  connect();
  const std::string d = pattern(4000);
  auto sv = [&](size_t a, size_t n) { return std::string_view(d).substr(a, n); };
  send(kAck, cseq, sseq, sv(0, 1000));
  send(kAck, cseq, sseq, sv(0, 1000));       // exact duplicate
  send(kAck, cseq + 500, sseq, sv(500, 1000));  // overlaps the front
  send(kAck, cseq + 3000, sseq, sv(3000, 500));  // out of order
  send(kAck, cseq + 2800, sseq, sv(2800, 1000));  // overlaps the OOO range on both sides
  send(kAck, cseq + 3100, sseq, sv(3100, 100));  // inside a stored range
  send(kAck, cseq + 1200, sseq, sv(1200, 1700));  // overlaps in-order end and OOO start
  EXPECT_EQ(session().received, d.substr(0, 3800));
  send(kAck, cseq + 3700, sseq, sv(3700, 300));
  EXPECT_EQ(session().received, d);
  EXPECT_GE(stack->counters().duplicate_segments, 2u);
  EXPECT_GE(stack->counters().partial_duplicates, 2u);
  drain();
}

TEST_F(TcpTest, OooRangeTableIsBounded) {
  opts.max_ooo_ranges = 2;
  start();
  connect();
  send(kAck, cseq + 100, sseq, "x");
  send(kAck, cseq + 200, sseq, "y");
  send(kAck, cseq + 300, sseq, "z");  // a third hole: dropped
  EXPECT_EQ(stack->counters().dropped(DropReason::kOooLimit), 1u);
  EXPECT_EQ(stack->counters().out_of_order, 2u);
}

// ---- Out-of-order segments held in their frames ---------------------------------------------
// Through the device burst (via_device) with a hold budget, out-of-order segments stay in
// their received frames and are delivered from there; the device's frame accounting balances.

class HeldTest : public TcpTest {
 protected:
  void SetUp() override {
    TcpTest::SetUp();
    via_device = true;
    hold_budget = 64;
  }
  void expectBalanced() {
    EXPECT_EQ(dev->outstanding(), 0u);
    EXPECT_EQ(dev->double_releases, 0u);
    EXPECT_EQ(dev->unknown_releases, 0u);
    EXPECT_EQ(stack->heldFrames(), 0u);
    EXPECT_EQ(stack->counters().ooo_frames_held, 0u);
  }
  std::string_view sv(const std::string& d, size_t a, size_t n) {
    return std::string_view(d).substr(a, n);
  }
};

TEST_F(HeldTest, ReorderedSegmentsAreDeliveredFromTheirFramesWithoutACopy) {
  start();
  connect();
  const std::string d = pattern(4000);
  send(kAck, cseq + 3000, sseq, sv(d, 3000, 1000));
  send(kAck, cseq + 1000, sseq, sv(d, 1000, 1000));
  auto out = drain();
  ASSERT_EQ(out.size(), 2u);  // duplicate ACKs with SACK, as in copy mode
  ASSERT_EQ(out[1].seg.opt.num_sack, 2);
  EXPECT_EQ(out[1].seg.opt.sack[0][0], cseq + 1000);
  EXPECT_EQ(out[1].seg.opt.sack[1][0], cseq + 3000);
  EXPECT_EQ(dev->outstanding(), 2u);  // both frames held
  EXPECT_EQ(stack->heldFrames(), 2u);
  EXPECT_EQ(stack->counters().ooo_frames_held, 2u);
  EXPECT_EQ(stack->bufferBytes(), 0u);  // nothing copied into a receive buffer
  send(kAck, cseq, sseq, sv(d, 0, 1000));  // fills the first hole: 0..2000 delivered
  EXPECT_EQ(session().received, d.substr(0, 2000));
  EXPECT_EQ(dev->outstanding(), 1u);       // the frame of 1000..2000 released at once
  send(kAck, cseq + 2000, sseq, sv(d, 2000, 1000));
  EXPECT_EQ(session().received, d);
  out = drain();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().seg.ack, cseq + 4000);
  const TcpCounters& c = stack->counters();
  EXPECT_EQ(c.ooo_frames_held_total, 2u);
  EXPECT_EQ(c.ooo_held_bytes_delivered, 2000u);
  EXPECT_EQ(c.rx_copied_ooo_bytes, 0u);
  EXPECT_EQ(c.rx_copied_paused_bytes, 0u);
  EXPECT_EQ(c.ooo_hold_fallbacks, 0u);
  EXPECT_EQ(c.bytes_in, 4000u);
  EXPECT_EQ(stack->bufferBytes(), 0u);
  for (bool copy : session().copies) EXPECT_FALSE(copy);
  EXPECT_EQ(session().copies.size(), 4u);  // 0..1000, 1000..2000, 2000..3000, 3000..4000
  expectBalanced();
}

TEST_F(HeldTest, WithoutAHoldBudgetTheBytesAreCopiedAsBefore) {
  hold_budget = 0;
  start();
  connect();
  const std::string d = pattern(3000);
  send(kAck, cseq + 2000, sseq, sv(d, 2000, 1000));
  send(kAck, cseq + 1000, sseq, sv(d, 1000, 1000));
  EXPECT_EQ(dev->outstanding(), 0u);
  send(kAck, cseq, sseq, sv(d, 0, 1000));
  EXPECT_EQ(session().received, d);
  const TcpCounters& c = stack->counters();
  EXPECT_EQ(c.ooo_frames_held_total, 0u);
  EXPECT_EQ(c.rx_copied_ooo_bytes, 3000u);  // the two held back and the segment filling the hole
  EXPECT_EQ(c.ooo_hold_fallbacks, 0u);      // holding was never possible: no fallback
  ASSERT_FALSE(session().copies.empty());
  for (bool copy : session().copies) EXPECT_TRUE(copy);  // delivered from the stack's buffer
  drain();
  expectBalanced();
}

TEST_F(HeldTest, StackBudgetExhaustedFallsBackToTheCopyExactly) {
  hold_budget = 2;
  start();
  connect();
  const std::string d = pattern(5000);
  send(kAck, cseq + 1000, sseq, sv(d, 1000, 1000));
  send(kAck, cseq + 2000, sseq, sv(d, 2000, 1000));
  EXPECT_EQ(dev->outstanding(), 2u);
  send(kAck, cseq + 3000, sseq, sv(d, 3000, 1000));  // no frame left: copy, the held ones too
  EXPECT_EQ(dev->outstanding(), 0u);
  const TcpCounters& c = stack->counters();
  EXPECT_EQ(c.ooo_hold_fallbacks, 1u);
  EXPECT_EQ(c.rx_copied_ooo_bytes, 3000u);
  send(kAck, cseq + 4000, sseq, sv(d, 4000, 1000));  // copied too until the ranges drain
  EXPECT_EQ(c.ooo_hold_fallbacks, 2u);
  EXPECT_EQ(c.rx_copied_ooo_bytes, 4000u);
  send(kAck, cseq, sseq, sv(d, 0, 1000));
  EXPECT_EQ(session().received, d);
  EXPECT_EQ(c.rx_copied_ooo_bytes, 5000u);  // the hole's filler joined the copied bytes
  EXPECT_EQ(c.ooo_held_bytes_delivered, 0u);
  EXPECT_EQ(c.ooo_frames_held_total, 2u);
  for (bool copy : session().copies) EXPECT_TRUE(copy);
  // The ranges drained: the next reordering is held again.
  const std::string e = pattern(2000, 9);
  send(kAck, cseq + 6000, sseq, sv(e, 1000, 1000));
  EXPECT_EQ(dev->outstanding(), 1u);
  send(kAck, cseq + 5000, sseq, sv(e, 0, 1000));
  EXPECT_EQ(session().received, d + e);
  EXPECT_EQ(c.ooo_held_bytes_delivered, 1000u);
  EXPECT_EQ(c.rx_copied_ooo_bytes, 5000u);
  EXPECT_FALSE(session().copies.back());
  drain();
  expectBalanced();
}

TEST_F(HeldTest, PerConnectionBoundFallsBackForThatConnectionOnly) {
  opts.max_held_frames_per_connection = 1;
  start();
  connect();
  const std::string d = pattern(3000);
  send(kAck, cseq + 1000, sseq, sv(d, 1000, 500));
  send(kAck, cseq + 2000, sseq, sv(d, 2000, 1000));  // a second frame: over the bound
  EXPECT_EQ(stack->counters().ooo_hold_fallbacks, 1u);
  EXPECT_EQ(stack->counters().rx_copied_ooo_bytes, 1500u);
  EXPECT_EQ(dev->outstanding(), 0u);
  send(kAck, cseq + 1500, sseq, sv(d, 1500, 500));
  send(kAck, cseq, sseq, sv(d, 0, 1000));
  EXPECT_EQ(session().received, d);
  drain();
  expectBalanced();
}

TEST_F(HeldTest, DuplicatesAndOverlapsOfHeldSegmentsAreTrimmed) {
  start();
  connect();
  const std::string d = pattern(6000);
  send(kAck, cseq, sseq, sv(d, 0, 1000));
  send(kAck, cseq + 3000, sseq, sv(d, 3000, 500));   // held
  send(kAck, cseq + 3000, sseq, sv(d, 3000, 500));   // exact duplicate: not held again
  send(kAck, cseq + 3100, sseq, sv(d, 3100, 100));   // inside a held range: not held
  EXPECT_EQ(stack->counters().ooo_frames_held_total, 1u);
  send(kAck, cseq + 2800, sseq, sv(d, 2800, 1000));  // overlaps the held range on both sides
  send(kAck, cseq + 5000, sseq, sv(d, 5000, 1000));  // a second range
  send(kAck, cseq + 4500, sseq, sv(d, 4500, 700));   // joins them, overlapping the later one
  send(kAck, cseq + 1200, sseq, sv(d, 1200, 1700));  // before a hole at 1000..1200
  EXPECT_EQ(stack->counters().ooo_frames_held_total, 5u);
  EXPECT_EQ(dev->outstanding(), 5u);
  EXPECT_EQ(session().received, d.substr(0, 1000));
  send(kAck, cseq + 500, sseq, sv(d, 500, 1000));   // overlaps delivered bytes, fills 1000..1200
  EXPECT_EQ(session().received, d.substr(0, 3800));  // 3800..4500 is still a hole
  EXPECT_EQ(dev->outstanding(), 2u);  // 4500.. and 5000..; the three below 3800 released
  send(kAck, cseq + 3700, sseq, sv(d, 3700, 900));
  EXPECT_EQ(session().received, d);
  const TcpCounters& c = stack->counters();
  EXPECT_EQ(c.rx_copied_ooo_bytes + c.rx_copied_paused_bytes, 0u);
  // From held frames: 1500..2900 (the 1200 frame after the filler's 1000..1500), 2900..3800
  // (the 2800 frame; the 3000 frame adds nothing), then after 3700..4600: 4600..5200 (4500
  // frame) and 5200..6000 (5000 frame).
  EXPECT_EQ(c.ooo_held_bytes_delivered, 1400u + 900u + 600u + 800u);
  EXPECT_EQ(c.bytes_in, 6000u);
  drain();
  expectBalanced();
}

TEST_F(HeldTest, HeldFramesAreReleasedWhenThePeerResets) {
  start();
  connect();
  send(kAck, cseq + 100, sseq, "held");
  send(kAck, cseq + 200, sseq, "held too");
  EXPECT_EQ(dev->outstanding(), 2u);
  send(kRst, cseq, 0);
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_TRUE(session().closed);
  expectBalanced();
}

TEST_F(HeldTest, HeldFramesAreReleasedOnAbortAndWhenTheStackGoes) {
  start();
  connect();
  send(kAck, cseq + 100, sseq, "x");
  drain();
  key = clientKey(40001, false);
  connect();
  send(kAck, cseq + 100, sseq, "y");
  drain();
  EXPECT_EQ(dev->outstanding(), 2u);
  stack->abortAll();
  drain();
  expectBalanced();
  key = clientKey(40002, false);
  connect();
  send(kAck, cseq + 100, sseq, "z");
  EXPECT_EQ(dev->outstanding(), 1u);
  stack.reset();
  EXPECT_EQ(dev->outstanding(), 0u);
  EXPECT_EQ(dev->double_releases, 0u);
}

TEST_F(HeldTest, HeldFramesAreReleasedWhenTheSessionClosesFirst) {
  start();
  connect();
  const std::string d = pattern(2000);
  send(kAck, cseq + 1000, sseq, sv(d, 1000, 1000));
  session().transport->closeAfterFlush();
  send(kAck, cseq, sseq, sv(d, 0, 1000));  // the hole fills after the close: discarded
  EXPECT_EQ(session().received, "");
  EXPECT_EQ(dev->outstanding(), 0u);
  EXPECT_EQ(stack->counters().ooo_held_bytes_delivered, 0u);
  drain();
  expectBalanced();
}

TEST_F(HeldTest, PausedSessionGetsTheHeldBytesCopiedThenFromTheBuffer) {
  start();
  connect();
  const std::string d = pattern(3000);
  send(kAck, cseq + 1000, sseq, sv(d, 1000, 1000));
  send(kAck, cseq + 2000, sseq, sv(d, 2000, 1000));
  session().pause_after_bytes = 500;  // pauses inside the first delivery
  send(kAck, cseq, sseq, sv(d, 0, 1000));
  EXPECT_EQ(session().received, d.substr(0, 1000));  // the frame's bytes, then paused
  EXPECT_EQ(dev->outstanding(), 0u);  // the held bytes were copied: the frames are back
  const TcpCounters& c = stack->counters();
  EXPECT_EQ(c.rx_copied_paused_bytes, 2000u);
  EXPECT_EQ(c.rx_copied_ooo_bytes, 0u);
  EXPECT_EQ(c.ooo_held_bytes_delivered, 0u);
  session().transport->pauseReading(false);
  stack->poll(now);
  EXPECT_EQ(session().received, d);
  ASSERT_GE(session().copies.size(), 2u);
  EXPECT_FALSE(session().copies.front());  // from the frame
  EXPECT_TRUE(session().copies.back());    // from the stack's buffer
  drain();
  expectBalanced();
}

TEST_F(HeldTest, DeliveringCopyIsFalseFromFramesAndTrueFromTheBuffer) {
  start();
  connect();
  send(kAck, cseq, sseq, "in order");  // straight from the frame
  session().transport->pauseReading(true);
  send(kAck, cseq + 8, sseq, "buffered");  // copied while paused
  EXPECT_EQ(stack->counters().rx_copied_paused_bytes, 8u);
  session().transport->pauseReading(false);
  stack->poll(now);
  send(kAck, cseq + 21, sseq, "held");  // held (a hole at 16..21)
  send(kAck, cseq + 16, sseq, "hole!");
  EXPECT_EQ(session().received, "in orderbufferedhole!held");
  const std::vector<bool> expect = {false, true, false, false};
  EXPECT_EQ(session().copies, expect);
  drain();
  expectBalanced();
}

TEST_F(HeldTest, TheReceiveWindowIsTheSameAsWithCopies) {
  // The same script with and without holds: every window and ACK we advertise is identical
  // (held bytes count against rcv_buf exactly as buffered bytes do), and bytes beyond the
  // window are trimmed before a frame is held.
  auto run = [this](uint32_t budget) {
    hold_budget = budget;
    opts.rcv_buf = 8192;
    sessions.clear();
    start();
    connect(1000, SynOpts{1460, -1, true, false});
    session().transport->pauseReading(true);
    const std::string d = pattern(12000);
    std::vector<std::pair<uint32_t, uint16_t>> acks;
    auto step = [&](size_t a, size_t n) {
      send(kAck, cseq + static_cast<uint32_t>(a), sseq, std::string_view(d).substr(a, n));
      for (const Out& o : drain()) acks.emplace_back(o.seg.ack, o.seg.window);
    };
    step(1000, 1400);
    step(6000, 1400);
    step(7400, 1400);  // partly beyond rcv_buf: trimmed at 8192
    step(0, 1000);
    step(2400, 1400);
    session().transport->pauseReading(false);
    stack->poll(now);
    for (const Out& o : drain()) acks.emplace_back(o.seg.ack, o.seg.window);
    step(3800, 1400);
    step(5200, 800);
    EXPECT_EQ(session().received, d.substr(0, 8192));
    EXPECT_EQ(stack->counters().dropped(DropReason::kBeyondWindow), 1u);
    expectBalanced();
    return acks;
  };
  const auto copied = run(0);
  const auto held = run(64);
  EXPECT_GT(stack->counters().ooo_frames_held_total, 0u);
  EXPECT_EQ(copied, held);
}

// ---- Retransmission ------------------------------------------------------------------------

TEST_F(TcpTest, RetransmissionTimeoutBacksOffExponentiallyThenAborts) {
  opts.max_retries = 3;
  start();
  connect(1000, SynOpts{1460, 7, true, false});  // no timestamps: Karn timing
  session().transport->send("response");
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  // The handshake RTT was 0 -> RTO clamps to min_rto (200 ms).
  std::vector<uint64_t> at;
  const uint64_t t0 = now;
  for (int i = 0; i < 60; ++i) {
    advance(50 * kMs);
    for (auto& o : drain()) {
      if (o.has(kRst)) {
        at.push_back(0);
        continue;
      }
      EXPECT_EQ(o.data, "response");
      EXPECT_EQ(o.seg.seq, sseq);
      at.push_back(now - t0);
    }
  }
  ASSERT_EQ(at.size(), 4u);
  EXPECT_EQ(at[0], 200 * kMs);
  EXPECT_EQ(at[1], 600 * kMs);   // +400
  EXPECT_EQ(at[2], 1400 * kMs);  // +800
  EXPECT_EQ(at[3], 0u);          // a fourth expiry aborts with RST
  EXPECT_EQ(stack->counters().retransmits, 3u);
  EXPECT_EQ(stack->counters().timeouts, 1u);
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_TRUE(session().closed);
}

TEST_F(TcpTest, RtoFollowsMeasuredRtt) {
  start();
  connect(1000, SynOpts{1460, 7, true, false});  // handshake RTT 0 -> one 1 ms sample
  // Six exchanges with a 100 ms RTT. RFC 6298: SRTT/RTTVAR in ns, integer arithmetic:
  // after them SRTT = 55.569262 ms, RTTVAR = 53.710716 ms, RTO = SRTT + 4 RTTVAR = 270.41 ms.
  for (int i = 0; i < 6; ++i) {
    session().transport->send("x");
    ASSERT_EQ(drain().size(), 1u);
    advance(100 * kMs);
    ASSERT_TRUE(drain().empty());
    sseq += 1;
    send(kAck, cseq, sseq);
    drain();
  }
  session().transport->send("y");
  ASSERT_EQ(drain().size(), 1u);
  const uint64_t t0 = now;
  uint64_t first = 0;
  for (int i = 0; i < 1000 && first == 0; ++i) {
    advance(1 * kMs);
    if (!drain().empty()) first = now - t0;
  }
  EXPECT_EQ(first, 271 * kMs);
}

TEST_F(TcpTest, FastRetransmitOnThreeDupAcksAndNewRenoRecovery) {
  start();
  connect(1000, SynOpts{1000, 7, true, false});
  const std::string d = pattern(20000);
  session().transport->send(d);
  auto out = drain();
  ASSERT_EQ(out.size(), 10u);  // IW10
  const uint32_t m = 1000;
  // Segment 2 lost: ACK of seg 1, then three duplicates.
  send(kAck, cseq, sseq + m);
  out = drain();
  EXPECT_EQ(out.size(), 2u);  // slow start: cwnd 11 segments, 9 in flight
  for (int i = 0; i < 2; ++i) {
    send(kAck, cseq, sseq + m);
    EXPECT_TRUE(drain().empty());
  }
  send(kAck, cseq, sseq + m);
  out = drain();
  ASSERT_GE(out.size(), 1u);
  EXPECT_EQ(out[0].seg.seq, sseq + m);  // the hole, at once (no RTO)
  EXPECT_EQ(out[0].data, d.substr(m, m));
  EXPECT_EQ(stack->counters().fast_retransmits, 1u);
  EXPECT_EQ(stack->counters().rto_expirations, 0u);
  // Partial ACK (up to seg 5): retransmit seg 5 at once (NewReno).
  send(kAck, cseq, sseq + 4 * m);
  out = drain();
  ASSERT_GE(out.size(), 1u);
  EXPECT_EQ(out[0].seg.seq, sseq + 4 * m);
  // Full ACK: everything sent so far; recovery ends, new data flows.
  uint32_t highest = sseq;
  for (auto& o : out) highest = seqMax(highest, o.seg.seq + o.len());
  send(kAck, cseq, sseq + 12 * m);
  out = drain();
  EXPECT_FALSE(out.empty());
  EXPECT_EQ(stack->counters().rto_expirations, 0u);
}

// Linux receivers grow their window while out-of-order data arrives, so their duplicate ACKs
// carry a different window each time, and SACK blocks reporting the data above the hole. Such
// an ACK counts as a duplicate when its SACK blocks report data not reported before (RFC 6675
// §2), so the hole goes out at the third instead of after an RTO and a go-back-N of the
// whole flight (found with 4 MiB responses to Linux clients over AF_XDP: 12 RTOs, 3893
// retransmitted segments and no fast retransmit in one run).
TEST_F(TcpTest, SackedDuplicateAcksWithAGrowingWindowTriggerFastRetransmit) {
  start();
  connect(1000, SynOpts{1000, 7, true, false});
  const std::string d = pattern(20000);
  session().transport->send(d);
  auto out = drain();
  ASSERT_EQ(out.size(), 10u);  // IW10
  const uint32_t m = 1000;
  send(kAck, cseq, sseq + m, {}, 600);  // segment 1 arrived, segment 2 lost
  out = drain();
  EXPECT_EQ(out.size(), 2u);
  nsack = 1;
  const auto dupack = [&](uint32_t sacked_to, uint16_t window) {
    sack[0][0] = sseq + 2 * m;
    sack[0][1] = sseq + sacked_to;
    send(kAck, cseq, sseq + m, {}, window);
    return drain();
  };
  EXPECT_TRUE(dupack(3 * m, 601).empty());  // duplicate 1
  EXPECT_TRUE(dupack(3 * m, 602).empty());  // the same block, a new window: not a duplicate
  EXPECT_TRUE(dupack(4 * m, 603).empty());  // duplicate 2
  EXPECT_EQ(stack->counters().fast_retransmits, 0u);
  out = dupack(5 * m, 604);                 // duplicate 3: fast retransmit
  ASSERT_GE(out.size(), 1u);
  EXPECT_EQ(out[0].seg.seq, sseq + m);  // the hole, at once
  EXPECT_EQ(out[0].data, d.substr(m, m));
  EXPECT_EQ(stack->counters().fast_retransmits, 1u);
  EXPECT_EQ(stack->counters().rto_expirations, 0u);
  EXPECT_EQ(stack->counters().retransmits, 1u);
  nsack = 0;
  send(kAck, cseq, sseq + 12 * m, {}, 605);  // full ACK: recovery ends without an RTO
  EXPECT_FALSE(drain().empty());
  EXPECT_EQ(stack->counters().rto_expirations, 0u);
}

// ---- Window --------------------------------------------------------------------------------

TEST_F(TcpTest, ZeroWindowProbesThenResume) {
  start();
  connect(1000, SynOpts{1460, 0, false, false});
  send(kAck, cseq, sseq, {}, 0);  // window closes
  session().transport->send("blocked");
  EXPECT_TRUE(drain().empty());
  advance(199 * kMs);
  EXPECT_TRUE(drain().empty());
  advance(1 * kMs);
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.seq, sseq - 1);  // probe with an old sequence number
  EXPECT_EQ(out[0].len(), 0u);
  advance(399 * kMs);
  EXPECT_TRUE(drain().empty());
  advance(1 * kMs);  // backed off to 400 ms
  ASSERT_EQ(drain().size(), 1u);
  EXPECT_EQ(stack->counters().zero_window_probes, 2u);
  send(kAck, cseq, sseq, {}, 1000);  // window opens
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "blocked");
}

TEST_F(TcpTest, WindowScalingArithmetic) {
  opts.rcv_buf = 1 << 20;
  start();
  SynOpts o{1460, 7, false, false};
  connect(1000, o);
  // Peer window 8 << 7 = 1024 bytes: exactly one 1024-byte flight.
  send(kAck, cseq, sseq, {}, 8);
  session().transport->send(pattern(5000));
  auto out = drain();
  size_t sent = 0;
  for (auto& s : out) sent += s.len();
  EXPECT_EQ(sent, 1024u);
  // Our window: 1 MiB >> 5.
  send(kAck, cseq, sseq + 1024, "z", 8);
  out = drain();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().seg.window, ((1u << 20) - 0) >> 5);  // "z" went straight to the session
}

// The receive buffer (xdp.tcp_rcv_buf, 64 KiB .. 16 MiB) decides the shift our SYN-ACKs announce
// (windowShiftFor, which the app also gives the XDP program for its cookie SYN-ACKs) and the
// window our ACKs advertise: all of rcv_buf, scaled, once the session reads what arrived.
TEST_F(TcpTest, WindowShiftAndAdvertisedWindowFollowTheReceiveBuffer) {
  const struct { uint32_t rcv_buf; uint8_t shift; } cases[] = {
      {64 * 1024, 1}, {256 * 1024, 3}, {1 << 20, 5}, {4 << 20, 7}, {16 << 20, 9}};
  for (const auto& k : cases) {
    SCOPED_TRACE(k.rcv_buf);
    EXPECT_EQ(windowShiftFor(k.rcv_buf), k.shift);
    opts.rcv_buf = k.rcv_buf;
    sessions.clear();
    start();
    SynOpts o{1460, 7, false, false};
    sendSyn(1000, o);
    auto out = drain();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].seg.opt.wscale, k.shift);
    EXPECT_EQ(out[0].seg.window, 65535);  // SYN windows are never scaled
    cseq = 1001;
    sseq = out[0].seg.seq + 1;
    send(kAck, cseq, sseq);
    EXPECT_TRUE(drain().empty());
    // Two full segments (an immediate ACK): read at once, so the whole buffer is free again.
    const std::string d = pattern(2 * 1460);
    send(kAck, cseq, sseq, std::string_view(d).substr(0, 1460));
    send(kAck, cseq + 1460, sseq, std::string_view(d).substr(1460));
    out = drain();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].seg.ack, cseq + 2 * 1460);
    EXPECT_EQ(out[0].seg.window, std::min<uint32_t>(k.rcv_buf >> k.shift, 65535));
    EXPECT_EQ(session().received, d);
    // Receive memory is taken in chunks as data arrives, not up front: none once it was read.
    EXPECT_EQ(stack->bufferBytes(), 0u);
  }
}

TEST_F(TcpTest, ReceiveMemoryLimitClosesTheWindow) {
  opts.rcv_buf = 4096;
  start();
  connect(1000, SynOpts{1460, -1, false, false});
  session().transport->pauseReading(true);
  const std::string d = pattern(6000);
  send(kAck, cseq, sseq, std::string_view(d).substr(0, 1000));
  send(kAck, cseq + 1000, sseq, std::string_view(d).substr(1000, 1000));
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.window, 2096);  // 4096 - 2000 held
  send(kAck, cseq + 2000, sseq, std::string_view(d).substr(2000, 1400));
  send(kAck, cseq + 3400, sseq, std::string_view(d).substr(3400, 1000));  // beyond: trimmed
  out = drain();
  ASSERT_EQ(out.size(), 1u);  // every second segment
  EXPECT_EQ(out[0].seg.ack, cseq + 4096);
  EXPECT_EQ(out[0].seg.window, 0);
  EXPECT_EQ(stack->counters().dropped(DropReason::kBeyondWindow), 1u);
  EXPECT_EQ(session().received, "");
  EXPECT_LE(stack->bufferBytes(), 16384u);
  session().transport->pauseReading(false);
  stack->poll(now);
  EXPECT_EQ(session().received, d.substr(0, 4096));
  out = drain();
  ASSERT_EQ(out.size(), 1u);  // window update
  EXPECT_EQ(out[0].seg.window, 4096);
  EXPECT_EQ(stack->bufferBytes(), 0u);  // nothing held once read
}

// ---- Close ---------------------------------------------------------------------------------

TEST_F(TcpTest, FinFromClientThenServerCloses) {
  close_on_peer_close = true;
  start();
  connect();
  send(kAck | kFin, cseq, sseq, "bye");
  EXPECT_EQ(session().received, "bye");
  EXPECT_TRUE(session().peer_closed);
  auto out = drain();  // the session closed at once: ACK + FIN, maybe in one segment
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(out.back().has(kFin));
  EXPECT_EQ(out.back().seg.ack, cseq + 4);
  EXPECT_EQ(stack->counters().inState(TcpState::kLastAck), 1u);
  send(kAck, cseq + 4, sseq + 1);
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_TRUE(session().closed);
}

TEST_F(TcpTest, FinFromServerThroughTimeWait) {
  start();
  connect();
  session().transport->send("resp");
  session().transport->closeAfterFlush();
  stack->poll(now);
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kFin | kAck));
  EXPECT_EQ(out[0].data, "resp");
  EXPECT_TRUE(session().closed);  // session released at closeAfterFlush
  EXPECT_EQ(stack->counters().inState(TcpState::kFinWait1), 1u);
  send(kAck, cseq, sseq + 5);
  EXPECT_EQ(stack->counters().inState(TcpState::kFinWait2), 1u);
  send(kAck, cseq, sseq + 5, "late data is discarded");
  drain();
  send(kAck | kFin, cseq + 22, sseq + 5);
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.ack, cseq + 23);
  EXPECT_EQ(stack->counters().inState(TcpState::kTimeWait), 1u);
  send(kAck | kFin, cseq + 22, sseq + 5);  // retransmitted FIN: ACK again
  ASSERT_EQ(drain().size(), 1u);
  advance(1001 * kMs);
  EXPECT_EQ(stack->connectionCount(), 0u);
}

TEST_F(TcpTest, SimultaneousCloseGoesThroughClosing) {
  start();
  connect();
  session().transport->closeAfterFlush();
  stack->poll(now);
  drain();
  send(kAck | kFin, cseq, sseq);  // FIN crossing ours, not acking it
  EXPECT_EQ(stack->counters().inState(TcpState::kClosing), 1u);
  drain();
  send(kAck, cseq + 1, sseq + 1);
  EXPECT_EQ(stack->counters().inState(TcpState::kTimeWait), 1u);
}

TEST_F(TcpTest, HalfCloseServerKeepsSending) {
  start();
  connect();
  send(kAck | kFin, cseq, sseq, "request");
  EXPECT_TRUE(session().peer_closed);
  EXPECT_EQ(stack->counters().inState(TcpState::kCloseWait), 1u);
  drain();
  session().transport->send(pattern(3000));
  auto out = drain();
  size_t n = 0;
  for (auto& o : out) n += o.len();
  EXPECT_EQ(n, 3000u);
  session().transport->closeAfterFlush();
  stack->poll(now);
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kFin));
  EXPECT_EQ(out[0].seg.seq, sseq + 3000);
  send(kAck, cseq + 8, sseq + 3001);
  EXPECT_EQ(stack->connectionCount(), 0u);
}

TEST_F(TcpTest, UnansweredFinIsRetransmittedThenConnectionAborts) {
  opts.max_retries = 2;
  start();
  connect(1000, SynOpts{1460, 7, true, false});
  session().transport->closeAfterFlush();
  stack->poll(now);
  ASSERT_EQ(drain().size(), 1u);
  int fins = 0, rsts = 0;
  for (int i = 0; i < 100; ++i) {
    advance(20 * kMs);
    for (auto& o : drain()) {
      fins += o.has(kFin);
      rsts += o.has(kRst);
    }
  }
  EXPECT_EQ(fins, 2);
  EXPECT_EQ(rsts, 1);  // the peer is not left hanging
  EXPECT_EQ(stack->connectionCount(), 0u);
}

// ---- RST / SYN in window (RFC 5961) ---------------------------------------------------------

TEST_F(TcpTest, RstInWindowGetsChallengeAckExactRstResets) {
  start();
  connect();
  send(kRst, cseq + 100, 0);  // in window, not exact
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kAck));
  EXPECT_FALSE(out[0].has(kRst));
  EXPECT_EQ(out[0].seg.ack, cseq);
  EXPECT_EQ(stack->counters().challenge_acks, 1u);
  EXPECT_EQ(stack->connectionCount(), 1u);
  send(kRst, cseq + 10'000'000, 0);  // out of window: ignored
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(stack->connectionCount(), 1u);
  advance(opts.challenge_ack_interval_ns);  // one challenge ACK per connection per interval
  send(kSyn, cseq + 5, 0);  // SYN on an established connection: challenge ACK
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.ack, cseq);
  EXPECT_EQ(stack->counters().challenge_acks, 2u);
  send(kRst, cseq, 0);  // exact: reset
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_EQ(stack->counters().rst_in, 1u);
  EXPECT_TRUE(session().closed);
}

TEST_F(TcpTest, AckForUnsentDataIsRejected) {
  start();
  connect();
  send(kAck, cseq, sseq + 5000, "x");
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.seq, sseq);
  EXPECT_EQ(session().received, "");  // segment dropped
  EXPECT_EQ(stack->counters().dropped(DropReason::kBadAck), 1u);
}

TEST_F(TcpTest, PawsDropsOldTimestamps) {
  start();
  connect();
  ts_val = 1000;
  send(kAck, cseq, sseq, "a");
  ts_val = 900;  // older
  send(kAck, cseq + 1, sseq, "b");
  EXPECT_EQ(session().received, "a");
  EXPECT_EQ(stack->counters().dropped(DropReason::kPaws), 1u);
}

// ---- Limits --------------------------------------------------------------------------------

TEST_F(TcpTest, SynFloodBeyondTheQueueIsDroppedWhenCookiesAreOff) {
  opts.syn_backlog = 4;
  opts.syn_cookies = SynCookies::kOff;
  start();
  for (uint16_t p = 0; p < 10; ++p) {
    FlowKey k = clientKey(static_cast<uint16_t>(30000 + p), false);
    sendSyn(100, SynOpts{}, &k);
  }
  EXPECT_EQ(drain().size(), 4u);
  EXPECT_EQ(stack->counters().dropped(DropReason::kSynQueueFull), 6u);
  EXPECT_EQ(stack->counters().inState(TcpState::kSynReceived), 4u);
  // The queue stays full of the flood's half-open connections until they time out.
  sendSyn(5000, SynOpts{});
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(stack->counters().dropped(DropReason::kSynQueueFull), 7u);
  for (int i = 0; i < 64; ++i) advance(1000 * kMs);  // SYN-ACK retries exhausted
  drain();
  EXPECT_EQ(stack->counters().inState(TcpState::kSynReceived), 0u);
  connect(5000);
  EXPECT_EQ(stack->counters().accepted, 1u);
}

TEST_F(TcpTest, ConnectionCapRefusesWithRst) {
  opts.max_connections = 2;
  start();
  for (uint16_t p = 0; p < 2; ++p) {
    key = clientKey(static_cast<uint16_t>(30000 + p), false);
    connect();
  }
  key = clientKey(31000, false);
  sendSyn(100, SynOpts{});
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kRst | kAck));
  EXPECT_EQ(out[0].seg.ack, 101u);
  EXPECT_EQ(stack->counters().refused, 1u);
  EXPECT_EQ(stack->connectionCount(), 2u);
}

TEST_F(TcpTest, TimeWaitIsRecycledByANewSyn) {
  opts.max_connections = 1;
  start();
  connect();
  session().transport->closeAfterFlush();
  stack->poll(now);
  drain();
  send(kAck | kFin, cseq, sseq + 1);
  drain();
  EXPECT_EQ(stack->counters().inState(TcpState::kTimeWait), 1u);
  sendSyn(cseq + 100000, SynOpts{});  // same 4-tuple, newer sequence
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kSyn | kAck));
  EXPECT_EQ(stack->counters().time_wait_recycled, 1u);
}

// ---- Sequence wrap-around -------------------------------------------------------------------

TEST_F(TcpTest, SequenceNumbersWrapOnBothSides) {
  opts.isn_fn = [](const FlowKey&) { return 0xfffffff0u; };
  echo = true;
  start();
  const uint32_t cisn = 0xffffff00u;
  connect(cisn, SynOpts{1460, 7, true, true});
  EXPECT_EQ(siss, 0xfffffff0u);
  const std::string d = pattern(200000);
  size_t off = 0;
  std::string echoed;
  uint32_t acked_by_client = sseq;
  size_t idx = 0, held_off = 0;
  std::string_view held;
  for (int iter = 0; iter < 10000 && (off < d.size() || seqLt(acked_by_client, sseq + static_cast<uint32_t>(d.size())));
       ++iter) {
    if (off < d.size()) {
      const size_t n = std::min<size_t>(1448, d.size() - off);
      const std::string_view chunk = std::string_view(d).substr(off, n);
      // Every third segment goes out of order (held back, sent after the next one).
      if (idx++ % 3 == 1) {
        held_off = off;
        held = chunk;
      } else {
        send(kAck, cseq + static_cast<uint32_t>(off), acked_by_client, chunk);
        if (!held.empty()) {
          send(kAck, cseq + static_cast<uint32_t>(held_off), acked_by_client, held);
          held = {};
        }
      }
      off += n;
    } else if (!held.empty()) {
      send(kAck, cseq + static_cast<uint32_t>(held_off), acked_by_client, held);
      held = {};
    }
    for (auto& o : drain()) {
      if (o.len() && o.seg.seq == sseq + static_cast<uint32_t>(echoed.size())) echoed += o.data;
      acked_by_client = sseq + static_cast<uint32_t>(echoed.size());
    }
    send(kAck, cseq + static_cast<uint32_t>(off), acked_by_client);
    for (auto& o : drain()) {
      if (o.len() && o.seg.seq == sseq + static_cast<uint32_t>(echoed.size())) echoed += o.data;
      acked_by_client = sseq + static_cast<uint32_t>(echoed.size());
    }
  }
  EXPECT_EQ(session().received.size(), d.size());
  EXPECT_EQ(echoed.size(), d.size());
  EXPECT_TRUE(session().received == d);
  EXPECT_TRUE(echoed == d);
  EXPECT_EQ(stack->counters().dropped(DropReason::kOutOfWindow), 0u);
  EXPECT_GT(stack->counters().out_of_order, 40u);
}

// ---- Link layer / IP -----------------------------------------------------------------------

TEST_F(TcpTest, BadChecksumsArpIcmpAndIpv6ExtensionsAreCountedNotServed) {
  start();
  SegmentSpec s;
  s.src_mac = cmac;
  s.dst_mac = smac;
  s.key = &key;
  s.seq = 1;
  s.flags = kSyn;
  std::vector<uint8_t> f(128);
  f.resize(buildSegment(f.data(), f.size(), s, nullptr, 0));
  f[14 + 20 + 4] ^= 1;  // TCP sequence bit flipped after the checksum
  stack->onFrame(f.data(), f.size());
  EXPECT_EQ(stack->counters().dropped(DropReason::kBadTcpChecksum), 1u);
  f[14 + 20 + 4] ^= 1;
  f[14 + 8] ^= 1;  // TTL: IPv4 header checksum
  stack->onFrame(f.data(), f.size());
  EXPECT_EQ(stack->counters().dropped(DropReason::kBadIpChecksum), 1u);
  std::vector<uint8_t> arp(60, 0);
  arp[12] = 0x08;
  arp[13] = 0x06;
  stack->onFrame(arp.data(), arp.size());
  EXPECT_EQ(stack->counters().ignored_arp, 1u);
  FlowKey k6 = clientKey(1234, true);
  s.key = &k6;
  f.assign(128, 0);
  f.resize(buildSegment(f.data(), f.size(), s, nullptr, 0));
  f[14 + 6] = 0;  // next header: hop-by-hop
  stack->onFrame(f.data(), f.size());
  EXPECT_EQ(stack->counters().dropped(DropReason::kIpv6ExtHeader), 1u);
  f[14 + 6] = 58;  // ICMPv6
  stack->onFrame(f.data(), f.size());
  EXPECT_EQ(stack->counters().ignored_icmp, 1u);
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(stack->connectionCount(), 0u);
}

TEST_F(TcpTest, KeepaliveProbesThenAbort) {
  opts.keepalive_idle_ns = 1000 * kMs;
  opts.keepalive_interval_ns = 100 * kMs;
  opts.keepalive_probes = 2;
  start();
  connect(1000, SynOpts{1460, 7, true, false});
  advance(1000 * kMs);
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.seq, sseq - 1);
  send(kAck, cseq, sseq);  // the peer answers: alive
  advance(100 * kMs);
  EXPECT_TRUE(drain().empty());
  advance(900 * kMs);
  ASSERT_EQ(drain().size(), 1u);
  advance(100 * kMs);
  ASSERT_EQ(drain().size(), 1u);
  advance(100 * kMs);
  out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kRst));
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_EQ(stack->counters().keepalive_probes, 3u);
}

TEST_F(TcpTest, SessionTicksAndPostedWorkRunOnPoll) {
  start();
  connect();
  bool ran = false;
  stack->loop().post([&] { ran = true; });
  EXPECT_FALSE(ran);
  advance(100 * kMs);
  EXPECT_TRUE(ran);
  EXPECT_EQ(session().ticks, 1);
}

}  // namespace
}  // namespace infergate::dataplane::tcp

namespace infergate::dataplane::tcp {
namespace {

// ---- Ingress tags (afxdp: the XDP program's verdict in Frame::meta) -------------------------

TEST_F(TcpTest, IngressTagIsTheRequestStartSegments) {
  start();
  connect();
  // No tag yet: nullopt (socket-mode behaviour without a filter).
  send(kAck | kPsh, cseq, sseq, "xx");
  cseq += 2;
  ASSERT_EQ(session().tags.size(), 1u);
  EXPECT_FALSE(session().tags[0].has_value());
  // A request start tagged class 0, rate-limited.
  meta = makeMeta(0, kVerdictRateLimited, kTagRequestStart);
  send(kAck | kPsh, cseq, sseq, "POST /a");
  cseq += 7;
  ASSERT_EQ(session().tags.size(), 2u);
  ASSERT_TRUE(session().tags[1].has_value());
  EXPECT_EQ(session().tags[1]->priority_class, 0);
  EXPECT_EQ(session().tags[1]->verdict, net::IngressTag::Verdict::kRateLimited);
  EXPECT_EQ(session().tags[1]->rx_ns, now);
  // A continuation segment (tagged, but not a request start) keeps the request's tag.
  meta = makeMeta(2, kVerdictAdmit, 0);
  send(kAck | kPsh, cseq, sseq, " body");
  cseq += 5;
  ASSERT_EQ(session().tags.size(), 3u);
  EXPECT_EQ(session().tags[2]->verdict, net::IngressTag::Verdict::kRateLimited);
  // An untagged segment keeps it too.
  meta = 0;
  send(kAck | kPsh, cseq, sseq, "..");
  cseq += 2;
  EXPECT_EQ(session().tags[3]->priority_class, 0);
  // The next request start replaces it: class 3, overload.
  meta = makeMeta(3, kVerdictOverload, kTagRequestStart);
  send(kAck | kPsh, cseq, sseq, "GET /b");
  const uint32_t start_b = cseq;
  cseq += 6;
  EXPECT_EQ(session().tags[4]->priority_class, 3);
  EXPECT_EQ(session().tags[4]->verdict, net::IngressTag::Verdict::kOverload);
  // A retransmission of that old start (bytes already delivered) tagged differently changes
  // nothing; the next request start, admitted, does.
  meta = makeMeta(1, kVerdictRateLimited, kTagRequestStart);
  send(kAck | kPsh, start_b, sseq, "GET /b");
  EXPECT_EQ(stack->counters().duplicate_segments, 1u);
  meta = makeMeta(1, kVerdictAdmit, kTagRequestStart);
  send(kAck | kPsh, cseq, sseq, "GET /c");
  cseq += 6;
  ASSERT_EQ(session().tags.size(), 6u);
  EXPECT_EQ(session().tags[5]->priority_class, 1);
  EXPECT_EQ(session().tags[5]->verdict, net::IngressTag::Verdict::kAdmit);
  EXPECT_EQ(session().received, "xxPOST /a body..GET /bGET /c");
}

TEST_F(TcpTest, IngressTagOfAnOutOfOrderRequestStartAppliesWhenDelivered) {
  start();
  connect();
  // The request start arrives after a hole; the tag is kept and seen once the hole fills.
  meta = makeMeta(2, kVerdictRateLimited, kTagRequestStart);
  send(kAck | kPsh, cseq + 3, sseq, "GET /x");
  EXPECT_TRUE(session().tags.empty());
  meta = 0;
  send(kAck | kPsh, cseq, sseq, "abc");
  ASSERT_FALSE(session().tags.empty());
  for (const auto& t : session().tags) {
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->priority_class, 2);
    EXPECT_EQ(t->verdict, net::IngressTag::Verdict::kRateLimited);
  }
  EXPECT_EQ(session().received, "abcGET /x");
}

TEST_F(TcpTest, TagsComeThroughTheDeviceBurst) {
  start();
  connect();
  SegmentSpec sp;
  sp.src_mac = cmac;
  sp.dst_mac = smac;
  sp.key = &key;
  sp.seq = cseq;
  sp.ack = sseq;
  sp.flags = kAck | kPsh;
  sp.window = 65535;
  sp.has_ts = true;  // negotiated by connect()
  sp.ts_val = ts_val;
  sp.ts_ecr = last_ts_from_server;
  std::vector<uint8_t> f(256);
  const std::string req = "GET /y HTTP/1.1\r\n";
  f.resize(buildSegment(f.data(), f.size(), sp, reinterpret_cast<const uint8_t*>(req.data()),
                        static_cast<uint32_t>(req.size())));
  dev->inject(f, makeMeta(0, kVerdictRateLimited, kTagRequestStart));
  EXPECT_EQ(stack->processRx(), 1u);
  ASSERT_EQ(session().tags.size(), 1u);
  ASSERT_TRUE(session().tags[0].has_value());
  EXPECT_EQ(session().tags[0]->verdict, net::IngressTag::Verdict::kRateLimited);
}

TEST_F(TcpTest, FirstDataSegmentRejectedByTheXdpProgramResetsAtOnce) {
  start();
  connect();
  ASSERT_EQ(stack->connectionCount(), 1u);
  // The program rejected the connection's first data segment (flagged): the connection is
  // reset and freed at once, the session closed, the peer told with a RST from our sequence
  // space.
  meta = makeMeta(1, kVerdictAdmit, kTagRejected);
  send(kAck | kPsh, cseq, sseq, "BAD REQUEST");
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_TRUE(session().closed);
  EXPECT_EQ(session().received, "");  // the rejected bytes never arrive
  EXPECT_EQ(stack->counters().xdp_rejected, 1u);
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kRst));
  EXPECT_EQ(out[0].seg.seq, sseq);
  // A later flagged segment of the flow finds no connection and proves no cookie: dropped.
  send(kAck | kPsh, cseq + 11, sseq + 5, "more");
  EXPECT_TRUE(drain().empty());
  EXPECT_EQ(stack->counters().dropped(DropReason::kNoConnection), 1u);
  EXPECT_EQ(stack->counters().xdp_rejected, 1u);
  // Without the flag a new connection on the same tuple works again.
  meta = 0;
  connect(50000);
  EXPECT_EQ(stack->connectionCount(), 1u);
}

// Issue 12, item 2: a spoofed SYN with the victim's 4-tuple makes the XDP program believe the
// attacker's next segment is the flow's first; the program's reject flag on it must not reset
// the victim's live connection.
TEST_F(TcpTest, ForgedFirstSegmentAgainstAnEstablishedFlowIsIgnored) {
  start();
  connect();
  send(kAck | kPsh, cseq, sseq, "GET / HTTP/1.1\r\n");
  cseq += 16;
  drain();
  sendSyn(0x12345678, SynOpts{});  // the attacker's SYN: a challenge ACK, nothing else
  drain();
  meta = makeMeta(1, kVerdictAdmit, kTagRejected);
  send(kAck | kPsh, 0x12345679, 0xdeadbeef, "XXXXXXXXX /nope HTTP/1.1\r\n");  // its "first" data
  send(kAck | kPsh, cseq, sseq, "X");  // even at the right sequence: not the first data
  EXPECT_EQ(stack->connectionCount(), 1u);
  EXPECT_FALSE(session().closed);
  EXPECT_EQ(stack->counters().xdp_rejected, 0u);
  EXPECT_EQ(stack->counters().xdp_reject_ignored, 2u);
  meta = 0;
  send(kAck | kPsh, cseq + 1, sseq, "Host: a\r\n");
  EXPECT_EQ(session().received, "GET / HTTP/1.1\r\nXHost: a\r\n");
  // A forged "first" segment acknowledging what we never sent is ignored too.
  start();
  connect();
  meta = makeMeta(1, kVerdictAdmit, kTagRejected);
  send(kAck | kPsh, cseq, sseq + 1000, "BAD");
  EXPECT_EQ(stack->connectionCount(), 1u);
}

// Issue 12, item 1: with a client ISN in the upper half of sequence space the window used to be
// unbounded (rcv_adv stuck at 0): one segment far ahead grew the receive buffer by gigabytes.
TEST_F(TcpTest, ReceiveWindowHoldsForClientIsnInTheUpperHalf) {
  for (uint32_t cisn : {0x80000000u, 0xfffffff0u, 0x7fffffffu}) {
    opts.rcv_buf = 64 * 1024;
    start();
    connect(cisn, SynOpts{1460, 7, true, false});
    session().transport->pauseReading(true);
    for (uint32_t i = 0; i < 4; ++i) send(kAck, cseq + 0x7FFF0000u + i * 0x1000, sseq, "x");
    EXPECT_EQ(stack->bufferBytes(), 0u) << std::hex << cisn;
    // In order, a paused session: the window closes at rcv_buf (plus scale rounding).
    const std::string d = pattern(1400);
    for (uint32_t off = 0; off < 80 * 1024; off += 1400) send(kAck, cseq + off, sseq, d);
    EXPECT_LE(stack->bufferBytes(), 64u * 1024 + 16384u) << std::hex << cisn;
    EXPECT_GE(stack->counters().dropped(DropReason::kBeyondWindow), 1u) << std::hex << cisn;
    sessions.clear();
  }
}

// Issue 12, item 4: MAC addresses come only from accepted segments.
TEST_F(TcpTest, SpoofedSegmentsDoNotRedirectRepliesAtL2) {
  start();
  connect();
  const uint8_t real[6] = {2, 0, 0, 0, 0, 2};
  const uint8_t evil[6] = {2, 0, 0, 0, 0, 0x66};
  std::memcpy(cmac, evil, 6);
  send(kAck, cseq + 50'000'000, sseq, "x");  // out of window
  send(kAck, cseq, sseq + 100'000, "y");     // acknowledges unsent data
  sendSyn(4242, SynOpts{});                  // SYN on the tuple
  send(kRst, cseq + 10, 0);                  // in-window RST
  std::memcpy(cmac, real, 6);
  auto out = drain();  // drain() checks every reply goes to cmac (the real client)
  EXPECT_FALSE(out.empty());
  send(kAck | kPsh, cseq, sseq, "hello");
  session().transport->send("world");
  out = drain();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().data, "world");
}

// Issue 12, item 5: challenge ACKs are limited per connection, and the global limit per second
// is drawn at random so that it cannot serve as a side channel.
TEST_F(TcpTest, ChallengeAckLimitsArePerConnectionAndRandomGlobally) {
  opts.challenge_ack_limit = 40;
  opts.max_connections = 200;
  start();
  std::vector<std::pair<FlowKey, uint32_t>> conns;
  for (uint16_t p = 0; p < 60; ++p) {
    key = clientKey(static_cast<uint16_t>(20000 + p), false);
    connect(1000 + p, SynOpts{1460, 7, true, false});
    conns.emplace_back(key, cseq);
  }
  // Per connection: a second in-window RST within the interval gets nothing.
  key = conns[0].first;
  send(kRst, conns[0].second + 10, 0);
  send(kRst, conns[0].second + 20, 0);
  EXPECT_EQ(drain().size(), 1u);
  std::set<uint64_t> per_second;
  for (int round = 0; round < 8; ++round) {
    advance(1100 * kMs);
    const uint64_t before = stack->counters().challenge_acks;
    for (auto& [k, seq] : conns) {
      key = k;
      send(kRst, seq + 10, 0);
    }
    drain();
    const uint64_t n = stack->counters().challenge_acks - before;
    EXPECT_GE(n, 20u);
    EXPECT_LE(n, 40u);
    per_second.insert(n);
  }
  EXPECT_GE(per_second.size(), 2u) << "the global limit is the same every second";
}

// Issue 12, item 8: ts_recent only moves for segments whose ACK is acceptable, and segments
// without a timestamp are dropped once timestamps were negotiated (RFC 7323 §3.2, §4.3).
TEST_F(TcpTest, TimestampsFollowRfc7323) {
  start();
  connect();
  ts_val = 5000;
  send(kAck, cseq, sseq + 100'000, "a");  // unacceptable ACK with a far-future timestamp
  ts_val = 1000;
  send(kAck, cseq, sseq, "b");  // must not be PAWS-dropped because of the forged one
  EXPECT_EQ(session().received, "b");
  EXPECT_EQ(stack->counters().dropped(DropReason::kPaws), 0u);
  client_ts = false;
  send(kAck, cseq + 1, sseq, "c");
  EXPECT_EQ(session().received, "b");
  EXPECT_EQ(stack->counters().dropped(DropReason::kMissingTimestamp), 1u);
}

// Issue 12, item 8: SACK blocks in our ACKs must not push a data segment past the MTU.
TEST_F(TcpTest, SackBlocksNeverPushADataSegmentPastTheMtu) {
  for (bool ts : {false, true}) {
    start();
    connect(1000, SynOpts{1460, 7, true, ts});
    const std::string d = pattern(100);
    for (uint32_t i = 1; i <= 4; ++i) send(kAck, cseq + i * 200, sseq, d);  // four holes
    drain();
    session().transport->send(pattern(20000));
    stack->poll(now);
    size_t data_frames = 0;
    for (const auto& f : dev->sent) {
      EXPECT_LE(f.size(), 1500u + 14u) << "ts " << ts;
      Segment seg;
      DropReason why;
      ASSERT_EQ(parseFrame(f.data(), f.size(), true, seg, why), FrameKind::kTcp);
      if (seg.payload_len > 0) {
        ++data_frames;
        EXPECT_GT(seg.opt.num_sack, 0u);
      }
    }
    EXPECT_GE(data_frames, 5u);
    drain();
    sessions.clear();
  }
}

// ---- SYN cookies ---------------------------------------------------------------------------

class CookieTest : public TcpTest {
 protected:
  void SetUp() override {
    TcpTest::SetUp();
    jar = std::make_shared<SynCookieJar>(ig_sipkey{1, 2}, ig_sipkey{3, 4}, 0);
    opts.cookie_jar = jar;
  }
  // SYN answered statelessly: returns the SYN-ACK.
  Out cookieSyn(uint32_t cisn, SynOpts o = SynOpts{}) {
    const uint64_t sent = stack->counters().cookies_sent;
    const uint64_t half_open = stack->counters().inState(TcpState::kSynReceived);
    sendSyn(cisn, o);
    auto out = drain();
    EXPECT_EQ(out.size(), 1u);
    EXPECT_EQ(stack->counters().cookies_sent, sent + 1);
    EXPECT_EQ(stack->counters().inState(TcpState::kSynReceived), half_open);  // no state
    if (out.empty()) return Out{};
    EXPECT_TRUE(out[0].has(kSyn | kAck));
    EXPECT_EQ(out[0].seg.ack, cisn + 1);
    return out[0];
  }
  std::shared_ptr<SynCookieJar> jar;
};

TEST_F(CookieTest, BacklogFullAnswersWithCookiesAndTheAckCreatesTheConnection) {
  opts.syn_backlog = 2;
  start();
  for (uint16_t p = 0; p < 2; ++p) {  // the flood fills the backlog
    FlowKey k = clientKey(static_cast<uint16_t>(30000 + p), false);
    sendSyn(100, SynOpts{}, &k);
  }
  drain();
  EXPECT_EQ(stack->counters().inState(TcpState::kSynReceived), 2u);
  const Out sa = cookieSyn(0x80000000u);
  EXPECT_EQ(stack->counters().syn_backlog_full, 1u);
  EXPECT_TRUE(sa.seg.opt.has_ts);
  EXPECT_EQ(sa.seg.opt.wscale, 3);  // 256 KiB
  EXPECT_TRUE(sa.seg.opt.sack_permitted);
  cseq = 0x80000001u;
  sseq = sa.seg.seq + 1;
  send(kAck, cseq, sseq);  // completes: ESTABLISHED, no half-open state ever
  EXPECT_EQ(stack->counters().cookies_validated, 1u);
  EXPECT_EQ(stack->counters().inState(TcpState::kEstablished), 1u);
  EXPECT_EQ(stack->counters().inState(TcpState::kSynReceived), 2u);
  send(kAck | kPsh, cseq, sseq, "GET / HTTP/1.1\r\n");
  EXPECT_EQ(session().received, "GET / HTTP/1.1\r\n");
  session().transport->send(pattern(3000));
  auto out = drain();
  ASSERT_GE(out.size(), 2u);
  EXPECT_EQ(out[0].seg.seq, sseq);
  EXPECT_EQ(out[0].len(), 1460u - 12u);  // MSS from the cookie (1460) less timestamps
  EXPECT_TRUE(out[0].seg.opt.has_ts);
  EXPECT_GE(out[0].seg.opt.ts_val, sa.seg.opt.ts_val);  // our clock continues
  EXPECT_EQ(out[0].seg.opt.ts_ecr, ts_val);
}

TEST_F(CookieTest, EveryOptionCombinationSurvivesTheCookie) {
  opts.syn_cookies = SynCookies::kAlways;
  opts.rcv_buf = 1 << 20;
  for (int m = 0; m < 16; ++m) {
    SynOpts o;
    o.mss = (m & 1) ? 1400 : 536;
    o.wscale = (m & 2) ? 9 : -1;
    o.sack = m & 4;
    o.ts = m & 8;
    start();
    const Out sa = cookieSyn(1000 + m, o);
    EXPECT_EQ(sa.seg.opt.wscale >= 0, o.wscale >= 0) << m;
    EXPECT_EQ(sa.seg.opt.sack_permitted, o.sack) << m;
    EXPECT_EQ(sa.seg.opt.has_ts, o.ts) << m;
    cseq = 1001 + m;
    sseq = sa.seg.seq + 1;
    send(kAck, cseq, sseq, {}, 65535);
    ASSERT_EQ(stack->counters().cookies_validated, 1u) << m;
    session().transport->send(pattern(5000));
    auto out = drain();
    ASSERT_GE(out.size(), 2u) << m;
    EXPECT_EQ(out[0].len(), o.mss - (o.ts ? 12u : 0u)) << m;
    EXPECT_EQ(out[0].seg.opt.has_ts, o.ts) << m;
    const uint32_t adv = static_cast<uint32_t>(out[0].seg.window) << (o.wscale >= 0 ? 5 : 0);
    if (o.wscale >= 0) EXPECT_EQ(adv, 1u << 20) << m;
    else EXPECT_EQ(adv, 65535u) << m;
    sessions.clear();
  }
}

TEST_F(CookieTest, FirstDataSegmentAloneCreatesTheConnection) {
  opts.syn_cookies = SynCookies::kAlways;
  start();
  const Out sa = cookieSyn(7000);
  // The pure ACK was lost (or dropped by the XDP program: deferred accept): the request
  // carries the same proof.
  send(kAck | kPsh, 7001, sa.seg.seq + 1, "GET / HTTP/1.1\r\n");
  EXPECT_EQ(stack->counters().cookies_validated, 1u);
  EXPECT_EQ(session().received, "GET / HTTP/1.1\r\n");
}

TEST_F(CookieTest, ForgedAndStaleCookiesAreRejected) {
  opts.syn_cookies = SynCookies::kAlways;
  start();
  const Out sa = cookieSyn(9000);
  send(kAck, 9001, sa.seg.seq + 1 + (1u << 12));  // a forged cookie: RST, nothing created
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kRst));
  EXPECT_EQ(stack->counters().cookies_rejected, 1u);
  EXPECT_EQ(stack->connectionCount(), 0u);
  send(kAck, 9002, sa.seg.seq + 1);  // the client ISN is part of the cookie
  EXPECT_EQ(stack->counters().cookies_rejected, 2u);
  client_ts = false;  // a timestamp cookie completed without timestamps
  send(kAck, 9001, sa.seg.seq + 1);
  EXPECT_EQ(stack->counters().cookies_rejected, 3u);
  client_ts = true;
  jar->rotate();  // the previous key still validates
  send(kAck, 9001, sa.seg.seq + 1);
  EXPECT_EQ(stack->counters().cookies_validated, 1u);
  EXPECT_EQ(drain().size(), 2u);  // the RSTs for the two rejected ones
  key = clientKey(40001, false);
  const Out sa3 = cookieSyn(12000, SynOpts{});
  jar->rotate();
  jar->rotate();  // two rotations later a cookie is stale
  send(kAck, 12001, sa3.seg.seq + 1);
  EXPECT_EQ(stack->counters().cookies_rejected, 4u);
  EXPECT_EQ(stack->counters().cookies_validated, 1u);
}

TEST_F(CookieTest, CookieFirstSegmentRejectedByTheXdpProgramIsAnsweredWithoutState) {
  opts.syn_cookies = SynCookies::kAlways;
  start();
  const Out sa = cookieSyn(3000);
  meta = makeMeta(1, kVerdictAdmit, kTagRejected);
  send(kAck | kPsh, 3001, sa.seg.seq + 1, "BREW / HTTP/1.1\r\n");
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_TRUE(out[0].has(kRst));
  EXPECT_EQ(out[0].seg.seq, sa.seg.seq + 1);
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_TRUE(sessions.empty());
  EXPECT_EQ(stack->counters().xdp_rejected, 1u);
}

// A flood's half-open connections fill the whole table: a client completing a cookie
// handshake, or one whose own half-open entry was dropped to make room, still gets in.
TEST_F(CookieTest, HalfOpenStateNeverStarvesCompletedHandshakes) {
  opts.max_connections = 4;
  opts.syn_backlog = 4;
  start();
  const Out mine = [&] {
    sendSyn(600, SynOpts{});  // a real client's SYN, half-open with state
    auto out = drain();
    EXPECT_EQ(out.size(), 1u);
    return out.empty() ? Out{} : out[0];
  }();
  for (uint16_t p = 0; p < 3; ++p) {  // the flood fills the rest
    FlowKey k = clientKey(static_cast<uint16_t>(30000 + p), false);
    sendSyn(100, SynOpts{}, &k);
  }
  drain();
  EXPECT_EQ(stack->counters().inState(TcpState::kSynReceived), 4u);
  FlowKey other = clientKey(41000, false);
  key = other;
  const Out sa = cookieSyn(8000);  // backlog full: a cookie
  send(kAck, 8001, sa.seg.seq + 1);
  EXPECT_EQ(stack->counters().half_open_evicted, 1u);  // the oldest half-open: the real one
  EXPECT_EQ(stack->counters().inState(TcpState::kEstablished), 1u);
  key = clientKey(40000, false);  // the real client's ACK arrives late: its ISN is a cookie
  send(kAck, 601, mine.seg.seq + 1);
  EXPECT_EQ(stack->counters().inState(TcpState::kEstablished), 2u);
  EXPECT_EQ(stack->counters().cookies_validated, 2u);
  EXPECT_EQ(stack->counters().dropped(DropReason::kConnLimit), 0u);
}

TEST_F(CookieTest, OrdinaryIsnsAreCookiesToo) {
  start();  // backlog healthy: a normal handshake with state
  sendSyn(5000, SynOpts{});
  auto out = drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(stack->counters().cookies_sent, 0u);
  const ig_cookie_keys keys = jar->snapshot();
  uint32_t saddr[4] = {}, daddr[4] = {};
  std::memcpy(saddr, key.local_ip, 4);   // the test's key is the client's view: local = client
  std::memcpy(daddr, key.remote_ip, 4);
  ig_cookie_opts o{};
  // The stack's view of the tuple: the client's address and port are the source.
  EXPECT_EQ(ig_cookie_check(&keys, saddr, daddr, __builtin_bswap16(key.local_port),
                            __builtin_bswap16(key.remote_port), 0, 5000, out[0].seg.seq, &o),
            1);
  EXPECT_EQ(o.mss, 1460);
  EXPECT_EQ(o.ts, 1);
}

// ---- Slow readers and output memory (issue 13, item 3) -------------------------------------

// A peer that answers every zero-window probe with a zero window pinned its send buffer until
// 2 x max_retries probes had gone unanswered... and forever when it answered them. With the
// send timeout, it is reset once it has drained less than min_drain_bytes in the period.
TEST_F(TcpTest, SendTimeoutResetsAPeerThatNeverOpensItsWindow) {
  opts.output.send_timeout_ns = 2000 * kMs;
  opts.output.min_drain_bytes = 1000;
  start();
  connect(1000, SynOpts{1460, 0, false, false});
  send(kAck, cseq, sseq, {}, 0);  // window closes
  session().transport->send(pattern(5000));
  drain();
  const uint64_t t0 = now;
  while (now - t0 < 1900 * kMs) {
    advance(100 * kMs);
    for (const Out& o : drain()) {
      EXPECT_FALSE(o.has(kRst));
      if (o.len() == 0 && o.seg.seq == sseq - 1) send(kAck, cseq, sseq, {}, 0);  // probe: still 0
    }
  }
  EXPECT_EQ(stack->connectionCount(), 1u);
  EXPECT_GE(stack->counters().zero_window_probes, 3u);
  advance(100 * kMs);
  auto out = drain();
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(out.back().has(kRst));
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_EQ(stack->counters().send_timeouts, 1u);
  EXPECT_EQ(stack->counters().output_discarded_bytes, 5000u);
  EXPECT_EQ(stack->bufferBytes(), 0u);
  EXPECT_TRUE(session().closed);
}

// Zero-window probing is bounded by itself too (send timeout off): probes answered with a
// zero window count like unanswered ones, and after 2 x max_retries the connection is reset.
TEST_F(TcpTest, ZeroWindowProbesAnsweredWithZeroEndAtTheLimit) {
  opts.output.send_timeout_ns = 0;
  opts.max_retries = 2;
  start();
  connect(1000, SynOpts{1460, 0, false, false});
  send(kAck, cseq, sseq, {}, 0);
  session().transport->send("blocked");
  drain();
  bool reset = false;
  for (int i = 0; i < 200 && !reset; ++i) {  // 20 s
    advance(100 * kMs);
    for (const Out& o : drain()) {
      if (o.has(kRst)) reset = true;
      else if (o.len() == 0 && o.seg.seq == sseq - 1) send(kAck, cseq, sseq, {}, 0);
    }
  }
  EXPECT_TRUE(reset);
  EXPECT_EQ(stack->counters().zero_window_probes, 4u);
  EXPECT_EQ(stack->counters().timeouts, 1u);
  EXPECT_EQ(stack->connectionCount(), 0u);
}

// A 1-byte window moves snd_una a byte per round trip: the retransmission and persist limits
// never fire, the minimum drain rate does.
TEST_F(TcpTest, SendTimeoutResetsATrickleReader) {
  opts.output.send_timeout_ns = 2000 * kMs;
  opts.output.min_drain_bytes = 1000;
  start();
  connect(1000, SynOpts{1460, 0, false, false});
  send(kAck, cseq, sseq, {}, 1);
  session().transport->send(pattern(100000));
  uint32_t acked = sseq;
  bool reset = false;
  for (int i = 0; i < 100 && !reset; ++i) {  // 10 s at 100 ms per step
    for (const Out& o : drain()) {
      if (o.has(kRst)) reset = true;
      if (o.len() > 0) acked = std::max(acked, o.seg.seq + o.len());
    }
    if (reset) break;
    send(kAck, cseq, acked, {}, 1);  // read one byte, offer one more
    advance(100 * kMs);
  }
  EXPECT_TRUE(reset);
  EXPECT_EQ(stack->counters().send_timeouts, 1u);
  EXPECT_LT(acked - sseq, 1000u);
  EXPECT_GE(now - 5'000'000'000ull, 2000 * kMs);
  EXPECT_LE(now - 5'000'000'000ull, 2300 * kMs);
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_EQ(stack->bufferBytes(), 0u);
}

// ...while a slow but steady reader (more than min_drain_bytes per period) is left alone.
TEST_F(TcpTest, SendTimeoutSparesASteadyReader) {
  opts.output.send_timeout_ns = 1000 * kMs;
  opts.output.min_drain_bytes = 1000;
  start();
  connect(1000, SynOpts{1460, 0, false, false});
  send(kAck, cseq, sseq, {}, 300);
  const std::string body = pattern(12000);
  session().transport->send(body);
  std::string got;
  for (int i = 0; i < 100 && got.size() < body.size(); ++i) {  // 300 bytes per 100 ms
    for (const Out& o : drain()) {
      EXPECT_FALSE(o.has(kRst));
      if (o.len() > 0 && o.seg.seq == sseq + got.size()) got += o.data;
    }
    send(kAck, cseq, sseq + static_cast<uint32_t>(got.size()), {}, 300);
    advance(100 * kMs);
  }
  EXPECT_EQ(got, body);
  EXPECT_EQ(stack->counters().send_timeouts, 0u);
  EXPECT_EQ(stack->connectionCount(), 1u);
}

// The send buffer is bounded: reading pauses at half the per-connection limit (the session
// gets no new requests) and resumes when the peer drains; a send that would take a non-empty
// buffer past the limit resets the connection, and what it held is counted as lost.
TEST_F(TcpTest, OutputLimitPausesReadingThenResets) {
  opts.output.max_bytes_per_connection = 64 * 1024;  // pause at 32 KiB
  opts.output.send_timeout_ns = 0;
  start();
  connect(1000, SynOpts{1460, 0, false, false});
  send(kAck, cseq, sseq, {}, 0);  // the peer reads nothing
  session().transport->send(pattern(40 * 1024));
  drain();
  EXPECT_EQ(stack->counters().output_read_pauses, 1u);
  send(kAck | kPsh, cseq, sseq, "GET /next", 0);
  EXPECT_EQ(session().received, "");  // paused: held in the receive buffer, not delivered
  // The peer takes one flight (IW10): 40 KiB - 14600 B left, below the mark: the held request
  // is delivered.
  send(kAck, cseq + 9, sseq, {}, 65535);
  uint32_t top = sseq;
  for (const Out& o : drain()) top = std::max(top, o.seg.seq + o.len());
  EXPECT_EQ(top - sseq, 14600u);
  send(kAck, cseq + 9, top, {}, 0);
  drain();
  EXPECT_EQ(session().received, "GET /next");
  // 50 KiB more onto what is left would exceed 64 KiB: reset.
  const uint32_t left = 40 * 1024 - 14600;
  session().transport->send(pattern(50 * 1024));
  auto out = drain();
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(out.back().has(kRst));
  EXPECT_EQ(stack->counters().output_limit_closes, 1u);
  EXPECT_EQ(stack->counters().output_discarded_bytes, 50 * 1024u + left);
  EXPECT_EQ(stack->connectionCount(), 0u);
  EXPECT_EQ(stack->bufferBytes(), 0u);
  EXPECT_TRUE(session().closed);
}

// One response larger than the limit is accepted onto an empty buffer: the limit bounds what
// piles up behind output the peer has not taken, not the size of an answer.
TEST_F(TcpTest, OutputLimitAcceptsOneLargeResponseOntoAnEmptyBuffer) {
  opts.output.max_bytes_per_connection = 64 * 1024;
  start();
  connect(1000, SynOpts{1460, 0, false, false});
  session().transport->send(pattern(100 * 1024));
  auto out = drain();
  ASSERT_FALSE(out.empty());
  for (const Out& o : out) EXPECT_FALSE(o.has(kRst));
  EXPECT_EQ(stack->counters().output_limit_closes, 0u);
  EXPECT_EQ(stack->connectionCount(), 1u);
}

// The process budget: while half of it is used, connections with output queued stop being
// read; a send that would exceed it onto a non-empty buffer resets that connection; a
// connection with nothing queued is still served. The gauge follows every byte.
TEST_F(TcpTest, ProcessOutputBudget) {
  common::Gauge used;
  opts.output.max_bytes_per_connection = 1 << 20;
  opts.output.max_bytes = 128 * 1024;
  opts.output.used = &used;
  opts.output.send_timeout_ns = 0;
  start();
  const FlowKey a = clientKey(41000, false), b = clientKey(41001, false),
                c = clientKey(41002, false);
  std::vector<uint32_t> isn;
  for (const FlowKey* k : {&a, &b, &c}) {
    key = *k;
    connect(1000, SynOpts{1460, 0, false, false});
    send(kAck, cseq, sseq, {}, 0);  // nobody reads
    isn.push_back(sseq);
  }
  session(0).transport->send(pattern(60 * 1024));
  session(1).transport->send(pattern(60 * 1024));
  drain();
  EXPECT_EQ(used.value(), 120 * 1024);
  // 120 KiB >= 64 KiB: b paused at its send, a at the next session tick.
  EXPECT_EQ(stack->counters().output_read_pauses, 1u);
  advance(opts.session_tick_ns);
  EXPECT_EQ(stack->counters().output_read_pauses, 2u);
  key = a;
  send(kAck | kPsh, cseq, isn[0], "held", 0);
  EXPECT_EQ(session(0).received, "");
  // b would take the process to 130 KiB: reset, its bytes given back.
  session(1).transport->send(pattern(10 * 1024));
  auto out = drain();
  ASSERT_FALSE(out.empty());
  EXPECT_TRUE(out.back().has(kRst));
  EXPECT_EQ(stack->counters().output_process_closes, 1u);
  EXPECT_TRUE(session(1).closed);
  EXPECT_EQ(used.value(), 60 * 1024);
  // c has nothing queued: its answer goes out although the process is near its budget.
  key = c;
  send(kAck | kPsh, cseq, isn[2], "q", 65535);
  session(2).transport->send(pattern(1000));
  out = drain();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().data.size(), 1000u);
  EXPECT_EQ(session(2).received, "q");
  EXPECT_EQ(used.value(), 60 * 1024 + 1000);
  // a's peer starts reading: the gauge goes back down as it acknowledges, reading resumes.
  key = a;
  uint32_t acked = isn[0];
  for (int i = 0; i < 50 && acked != isn[0] + 60 * 1024; ++i) {
    send(kAck, cseq + 4, acked, {}, 65535);  // after "held"
    for (const Out& o : drain()) acked = std::max(acked, o.seg.seq + o.len());
  }
  send(kAck | kPsh, cseq + 4, acked, "r", 65535);
  drain();
  EXPECT_EQ(acked, isn[0] + 60 * 1024);
  EXPECT_EQ(session(0).received, "heldr");
  EXPECT_EQ(used.value(), 1000);
  stack.reset();  // connections still holding output give it back
  EXPECT_EQ(used.value(), 0);
}

}  // namespace
}  // namespace infergate::dataplane::tcp
