// The userspace TCP stack (dataplane/tcp) over a DpdkDevice: the test plays the client on a
// ring port (ring_port.h), building segments with the stack's own packet builder into mbufs it
// enqueues, and parsing (checksums verified) what the stack transmits. An out-of-order segment
// is held in its mbuf (no copy) until the hole fills; every mbuf returns to the pool.
#include <rte_mbuf.h>
#include <rte_ring.h>

#include <memory>
#include <string>
#include <vector>

#include "dataplane/dpdk/dpdk_device.h"
#include "dataplane/dpdk/eal.h"
#include "dataplane/tcp/packet.h"
#include "dataplane/tcp/tcp_stack.h"
#include "gtest/gtest.h"
#include "tests/mocks/variable_clock.h"
#include "tests/unit/dpdk/ring_port.h"

namespace infergate::dataplane::dpdk {
namespace {

using tcp::kAck;
using tcp::kSyn;

class EalEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const absl::Status s = test_support::initTestEal();
    ASSERT_TRUE(s.ok()) << s.message();
  }
};
::testing::Environment* const kEal = ::testing::AddGlobalTestEnvironment(new EalEnvironment);

struct EchoSession : net::Session {
  explicit EchoSession(net::Transport& t) : transport(&t) {}
  void onData(const char* d, size_t n) override {
    received.append(d, n);
    copies += transport->deliveringCopy() ? 1 : 0;
    transport->send(std::string_view(d, n));
  }
  void onPeerClosed() override {}
  void onTick(uint64_t) override {}
  void onClosed() override { transport = nullptr; }
  bool idle() const override { return true; }
  net::Transport* transport;
  std::string received;
  int copies = 0;
};

constexpr uint16_t kPort = 8080;
const uint8_t kClientMac[6] = {0x02, 0, 0, 0, 0, 2};
const uint8_t kServerMac[6] = {0x02, 0, 0, 0, 0, 1};

class DpdkTcpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    rp_ = std::make_unique<test_support::RingPort>(1);
    DpdkPortOptions o;
    o.port_id = rp_->id();
    o.rx_desc = 256;
    o.tx_desc = 256;
    o.hold_frames = 16;
    o.tx_pending_max = 64;
    o.mbuf_cache = 32;
    o.mbufs_per_queue = 2048;
    auto port = DpdkPort::configure(o);
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = std::move(*port);
    auto dev = DpdkDevice::open(*port_, 0);
    ASSERT_TRUE(dev.ok()) << dev.status().message();
    dev_ = std::move(*dev);
    start_ = dev_->poolAvailable();
    tcp::TcpOptions opts;
    opts.timestamps = false;
    stack_ = std::make_unique<tcp::TcpStack>(opts, *dev_, clock_);
    ASSERT_TRUE(stack_
                    ->listen(kPort,
                             [this](net::Transport& t) {
                               auto s = std::make_shared<EchoSession>(t);
                               sessions_.push_back(s);
                               return s;
                             })
                    .ok());
    const uint8_t c[4] = {10, 0, 0, 2}, s[4] = {10, 0, 0, 1};
    std::memcpy(key_.local_ip, c, 4);
    std::memcpy(key_.remote_ip, s, 4);
    key_.local_port = 40000;
    key_.remote_port = kPort;
  }
  void TearDown() override {
    stack_.reset();  // releases what it holds (the device outlives it)
    dev_.reset();
    if (rp_) rp_->drain();
    port_.reset();
    rp_.reset();
  }

  // Client -> stack: a segment built into an mbuf of the queue's pool, through the device.
  void send(uint8_t flags, uint32_t seq, uint32_t ack, const std::string& payload = {}) {
    tcp::SegmentSpec s;
    s.src_mac = kClientMac;
    s.dst_mac = kServerMac;
    s.key = &key_;
    s.seq = seq;
    s.ack = ack;
    s.flags = flags;
    s.window = 65535;
    if (flags & kSyn) s.mss = 1460;
    rte_mbuf* m = rte_pktmbuf_alloc(dev_->pool());
    ASSERT_NE(m, nullptr);
    uint8_t* p = rte_pktmbuf_mtod(m, uint8_t*);
    const size_t len = tcp::buildSegment(p, rte_pktmbuf_tailroom(m), s,
                                         reinterpret_cast<const uint8_t*>(payload.data()),
                                         static_cast<uint32_t>(payload.size()));
    ASSERT_GT(len, 0u);
    ASSERT_NE(rte_pktmbuf_append(m, static_cast<uint16_t>(len)), nullptr);
    ASSERT_EQ(rte_ring_enqueue(rp_->rx(), m), 0);
    stack_->processRx(64, now_);
  }
  // Stack -> client: every segment on the tx ring, parsed with checksums verified.
  struct Out {
    tcp::Segment seg;
    std::string data;
  };
  std::vector<Out> sent() {
    stack_->poll(now_);
    std::vector<Out> out;
    for (rte_mbuf* m : rp_->takeSent()) {
      Out o;
      tcp::DropReason why;
      EXPECT_EQ(tcp::parseFrame(rte_pktmbuf_mtod(m, uint8_t*), m->pkt_len, true, o.seg, why),
                tcp::FrameKind::kTcp);
      o.data.assign(reinterpret_cast<const char*>(o.seg.payload), o.seg.payload_len);
      o.seg.payload = nullptr;
      EXPECT_EQ(std::memcmp(o.seg.dst_mac, kClientMac, 6), 0);
      out.push_back(std::move(o));
      rte_pktmbuf_free(m);
    }
    return out;
  }

  uint64_t now_ = 5'000'000'000ull;
  mocks::VariableClock clock_{now_};
  std::unique_ptr<test_support::RingPort> rp_;
  std::unique_ptr<DpdkPort> port_;
  std::unique_ptr<DpdkDevice> dev_;
  std::unique_ptr<tcp::TcpStack> stack_;
  std::vector<std::shared_ptr<EchoSession>> sessions_;
  tcp::FlowKey key_;
  uint32_t start_ = 0;
};

TEST_F(DpdkTcpTest, HandshakeEchoAndAnOutOfOrderSegmentHeldInItsMbuf) {
  send(kSyn, 1000, 0);
  std::vector<Out> out = sent();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].seg.flags, kSyn | kAck);
  EXPECT_EQ(out[0].seg.ack, 1001u);
  const uint32_t sseq = out[0].seg.seq + 1;
  send(kAck, 1001, sseq);
  EXPECT_TRUE(sent().empty());
  ASSERT_EQ(sessions_.size(), 1u);

  std::string a(1000, 'a'), b(1000, 'b');
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<char>('a' + i % 26);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<char>('A' + i % 26);
  // The second half first: the stack holds its mbuf (no copy) and asks for the hole.
  send(kAck, 2001, sseq, b);
  EXPECT_EQ(stack_->counters().ooo_frames_held, 1u);
  EXPECT_EQ(dev_->stats().rx_outstanding, 1u) << "the held frame is an mbuf still out";
  EXPECT_TRUE(sessions_[0]->received.empty());
  out = sent();
  ASSERT_FALSE(out.empty());
  EXPECT_EQ(out.back().seg.ack, 1001u) << "a duplicate ACK for the hole";
  // The first half fills the hole: both are delivered from their frames, then released.
  send(kAck, 1001, sseq, a);
  EXPECT_EQ(sessions_[0]->received, a + b);
  EXPECT_EQ(sessions_[0]->copies, 0) << "delivered from the mbufs";
  EXPECT_EQ(stack_->counters().rx_copied_ooo_bytes, 0u);
  EXPECT_EQ(stack_->counters().ooo_frames_held, 0u);
  EXPECT_EQ(dev_->stats().rx_outstanding, 0u);
  // The echo comes back in order, checksums right (parseFrame verified them).
  std::string echoed;
  uint32_t expect_seq = sseq;
  for (const Out& o : sent()) {
    if (o.data.empty()) continue;
    EXPECT_EQ(o.seg.seq, expect_seq);
    expect_seq += static_cast<uint32_t>(o.data.size());
    echoed += o.data;
  }
  EXPECT_EQ(echoed, a + b);
  EXPECT_EQ(dev_->stats().rx_packets, 4u);
  EXPECT_EQ(dev_->stats().tx_dropped, 0u);
  EXPECT_EQ(dev_->stats().tx_alloc_failed, 0u);
  EXPECT_EQ(dev_->poolAvailable(), start_) << "every mbuf back (rx released, tx taken off)";
}

}  // namespace
}  // namespace infergate::dataplane::dpdk
