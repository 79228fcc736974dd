// The userspace TCP stack (dataplane/tcp) over a DpdkDevice: the test plays the client on a
// ring port (ring_port.h), building segments with the stack's own packet builder into mbufs it
// enqueues, and parsing (checksums verified) what the stack transmits. An out-of-order segment
// is held in its mbuf (no copy) until the hole fills; every mbuf returns to the pool.
//
// Checksum offload: net_ring offers none, so those tests open the port with
// emulate_checksum_offload and the test plays the NIC: on tx it checks the offload fields and
// the pseudo-header sum (computed with DPDK's own rte_ipv4/ipv6_phdr_cksum), then completes the
// checksums (rte_ipv4_cksum, rte_ipv4/ipv6_udptcp_cksum) before the client parses them; on rx
// it sets the mbuf's RTE_MBUF_F_RX_*_CKSUM_* flags itself.
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_ip.h>
#include <rte_mbuf.h>
#include <rte_ring.h>
#include <rte_tcp.h>

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
using tcp::Segment;

::testing::Environment* const kEal =
    ::testing::AddGlobalTestEnvironment(new test_support::EalEnvironment);

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

// How a fixture opens the port and addresses the client.
struct PortSetup {
  bool v6 = false;
  bool emulate_offload = false;  // DpdkPortOptions::emulate_checksum_offload
  ChecksumOffload setting = ChecksumOffload::kAuto;
};

// What a test frame carries wrong on purpose.
enum class Corrupt { kNone, kTcpChecksum, kIpChecksum };

class DpdkTcpTest : public ::testing::Test {
 protected:
  virtual PortSetup setup() const { return {}; }
  void SetUp() override {
    const PortSetup su = setup();
    nic_completes_ = su.emulate_offload && su.setting == ChecksumOffload::kAuto;
    rp_ = std::make_unique<test_support::RingPort>(1);
    DpdkPortOptions o;
    o.port_id = rp_->id();
    o.rx_desc = 256;
    o.tx_desc = 256;
    o.hold_frames = 16;
    o.tx_pending_max = 64;
    o.mbuf_cache = 32;
    o.mbufs_per_queue = 2048;
    o.emulate_checksum_offload = su.emulate_offload;
    o.checksum_offload = su.setting;
    ASSERT_NO_FATAL_FAILURE(test_support::openQueue(o, &port_, &dev_));
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
    if (su.v6) {
      const uint8_t c[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
      const uint8_t s[16] = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
      std::memcpy(key_.local_ip, c, 16);
      std::memcpy(key_.remote_ip, s, 16);
      key_.v6 = 1;
    } else {
      const uint8_t c[4] = {10, 0, 0, 2}, s[4] = {10, 0, 0, 1};
      std::memcpy(key_.local_ip, c, 4);
      std::memcpy(key_.remote_ip, s, 4);
    }
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

  // Client -> stack: a segment built into an mbuf of the queue's pool, through the device;
  // `ol_flags`: what the "NIC" says of it (RTE_MBUF_F_RX_*_CKSUM_*; 0: unknown).
  void send(uint8_t flags, uint32_t seq, uint32_t ack, const std::string& payload = {},
            uint64_t ol_flags = 0, Corrupt corrupt = Corrupt::kNone) {
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
    const size_t l3 = key_.v6 ? 40 : 20;
    if (corrupt == Corrupt::kTcpChecksum) p[tcp::kEthHeader + l3 + 17] ^= 0x5a;
    if (corrupt == Corrupt::kIpChecksum) p[tcp::kEthHeader + 11] ^= 0x5a;
    ASSERT_NE(rte_pktmbuf_append(m, static_cast<uint16_t>(len)), nullptr);
    m->ol_flags = ol_flags;
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
      if (nic_completes_) {
        completeAsNic(m);
      } else {
        EXPECT_EQ(m->ol_flags & RTE_MBUF_F_TX_OFFLOAD_MASK, 0u) << "complete in software";
      }
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

  // The "NIC" of an offloading port: checks what the stack left for it (the offload flags and
  // lengths, IPv4 header checksum 0, exactly the pseudo-header sum in the TCP field, a frame
  // that does not verify as it is), then completes the checksums in software.
  void completeAsNic(rte_mbuf* m) {
    uint8_t* p = rte_pktmbuf_mtod(m, uint8_t*);
    const bool v6 = key_.v6 != 0;
    EXPECT_EQ(m->ol_flags,
              v6 ? RTE_MBUF_F_TX_IPV6 | RTE_MBUF_F_TX_TCP_CKSUM
                 : RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_IP_CKSUM | RTE_MBUF_F_TX_TCP_CKSUM);
    EXPECT_EQ(m->l2_len, 14u);
    EXPECT_EQ(m->l3_len, v6 ? 40u : 20u);
    Segment seg;
    tcp::DropReason why;
    EXPECT_EQ(tcp::parseFrame(p, m->pkt_len, true, seg, why), tcp::FrameKind::kDropped)
        << "not a complete frame before the NIC";
    rte_tcp_hdr* th = reinterpret_cast<rte_tcp_hdr*>(p + 14 + (v6 ? 40 : 20));
    if (v6) {
      rte_ipv6_hdr* ip = reinterpret_cast<rte_ipv6_hdr*>(p + 14);
      EXPECT_EQ(th->cksum, rte_ipv6_phdr_cksum(ip, m->ol_flags)) << "the pseudo-header sum";
      th->cksum = 0;
      th->cksum = rte_ipv6_udptcp_cksum(ip, th);
    } else {
      rte_ipv4_hdr* ip = reinterpret_cast<rte_ipv4_hdr*>(p + 14);
      EXPECT_EQ(ip->hdr_checksum, 0) << "the NIC computes it";
      EXPECT_EQ(th->cksum, rte_ipv4_phdr_cksum(ip, m->ol_flags)) << "the pseudo-header sum";
      ip->hdr_checksum = rte_ipv4_cksum(ip);
      th->cksum = 0;
      th->cksum = rte_ipv4_udptcp_cksum(ip, th);
    }
    ++nic_completed_;
  }
  // SYN, SYN-ACK, ACK: the connection is up with one session; returns the stack's next seq.
  uint32_t establish() {
    send(kSyn, 1000, 0);
    std::vector<Out> out = sent();
    EXPECT_EQ(out.size(), 1u);
    if (out.size() != 1) return 0;
    EXPECT_EQ(out[0].seg.flags, kSyn | kAck);
    EXPECT_EQ(out[0].seg.ack, 1001u);
    const uint32_t sseq = out[0].seg.seq + 1;
    send(kAck, 1001, sseq);
    EXPECT_TRUE(sent().empty());
    EXPECT_EQ(sessions_.size(), 1u);
    return sseq;
  }
  // The bytes the stack echoed (in order), from what it transmitted.
  std::string echoed(uint32_t sseq) {
    std::string e;
    uint32_t expect_seq = sseq;
    for (const Out& o : sent()) {
      if (o.data.empty()) continue;
      EXPECT_EQ(o.seg.seq, expect_seq);
      expect_seq += static_cast<uint32_t>(o.data.size());
      e += o.data;
    }
    return e;
  }
  uint64_t dropped(tcp::DropReason r) const { return stack_->counters().dropped(r); }

  bool nic_completes_ = false;
  int nic_completed_ = 0;
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

// Transmit offload, IPv4 and IPv6: every segment the stack sends leaves the checksums to the
// NIC (flags, lengths, pseudo-header sum checked in completeAsNic); once the test's NIC has
// completed them the client accepts them: the handshake completes and the echo arrives whole.
class DpdkTcpTxOffloadTest : public DpdkTcpTest, public ::testing::WithParamInterface<bool> {
 protected:
  PortSetup setup() const override { return {.v6 = GetParam(), .emulate_offload = true}; }
};

TEST_P(DpdkTcpTxOffloadTest, SegmentsCarryThePseudoHeaderSumAndFlagsTheNicCompletes) {
  EXPECT_TRUE(port_->caps().tx_checksum_offload);
  EXPECT_TRUE(port_->caps().checksum_emulated);
  EXPECT_TRUE(dev_->txChecksumOffload());
  const uint32_t sseq = establish();
  ASSERT_EQ(sessions_.size(), 1u);
  ASSERT_EQ(nic_completed_, 1) << "the SYN-ACK";
  std::string a(3000, 'x');
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<char>('a' + i * 7 % 26);
  send(kAck, 1001, sseq, a.substr(0, 1400));
  send(kAck, 2401, sseq, a.substr(1400));
  EXPECT_EQ(sessions_[0]->received, a);
  EXPECT_EQ(echoed(sseq), a) << "the client accepted every completed segment";
  EXPECT_GE(nic_completed_, 3);
  EXPECT_EQ(dev_->stats().tx_checksum_offloaded, static_cast<uint64_t>(nic_completed_));
  EXPECT_EQ(dev_->stats().tx_checksum_fallbacks, 0u);
  // A RST for no connection goes through the same path.
  key_.local_port = 40001;
  send(kAck, 5000, 7000);
  std::vector<Out> rst = sent();
  ASSERT_EQ(rst.size(), 1u);
  EXPECT_EQ(rst[0].seg.flags, tcp::kRst);
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

// A PMD whose rte_eth_tx_prepare() refuses the offload (the test installs one in the port's
// fast-path table; net_ring has none): the device finishes those frames in software and sends
// them without flags.
uint16_t refuseEverything(void*, rte_mbuf**, uint16_t) {
  rte_errno = ENOTSUP;
  return 0;
}

TEST_P(DpdkTcpTxOffloadTest, FramesThePmdRefusesToPrepareGetSoftwareChecksums) {
  rte_eth_fp_ops[port_->portId()].tx_pkt_prepare = refuseEverything;
  nic_completes_ = false;  // sent() checks: no flags, checksums complete
  const uint32_t sseq = establish();
  ASSERT_EQ(sessions_.size(), 1u);
  send(kAck, 1001, sseq, "hello");
  EXPECT_EQ(echoed(sseq), "hello");
  EXPECT_GE(dev_->stats().tx_checksum_fallbacks, 2u) << "the SYN-ACK and the echo at least";
  EXPECT_EQ(dev_->stats().tx_checksum_offloaded, 0u);
}

INSTANTIATE_TEST_SUITE_P(Ipv4AndIpv6, DpdkTcpTxOffloadTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "ipv6" : "ipv4"; });

// Receive offload: only the NIC's explicit GOOD spares the stack its own sums, and a BAD never
// reaches the stack, whatever the bytes say.
class DpdkTcpRxOffloadTest : public DpdkTcpTest {
 protected:
  PortSetup setup() const override { return {.emulate_offload = true}; }
};

constexpr uint64_t kGood = RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_GOOD;

TEST_F(DpdkTcpRxOffloadTest, GoodSkipsVerificationUnknownVerifiesInSoftware) {
  EXPECT_TRUE(port_->caps().rx_checksum_offload);
  const uint32_t sseq = establish();
  ASSERT_EQ(sessions_.size(), 1u);
  ASSERT_EQ(dev_->stats().rx_checksum_unknown, 2u) << "SYN and ACK came without flags";
  // A wrong TCP checksum and no flag: the stack's own sum finds it.
  send(kAck, 1001, sseq, "first", 0, Corrupt::kTcpChecksum);
  EXPECT_EQ(dropped(tcp::DropReason::kBadTcpChecksum), 1u);
  EXPECT_TRUE(sessions_[0]->received.empty());
  // The same frame marked GOOD by the NIC: not summed again, so it is taken (the proof that
  // verification was skipped: the bytes are wrong).
  send(kAck, 1001, sseq, "first", kGood, Corrupt::kTcpChecksum);
  EXPECT_EQ(sessions_[0]->received, "first");
  EXPECT_EQ(dropped(tcp::DropReason::kBadTcpChecksum), 1u);
  EXPECT_EQ(dev_->stats().rx_checksum_good, 1u);
  // Each checksum on its own: a wrong IPv4 header checksum with only the L4 GOOD is dropped...
  send(kAck, 1006, sseq, "second", RTE_MBUF_F_RX_L4_CKSUM_GOOD, Corrupt::kIpChecksum);
  EXPECT_EQ(dropped(tcp::DropReason::kBadIpChecksum), 1u);
  // ...and so is a wrong TCP checksum with only the IP GOOD, or with the L4 flag UNKNOWN/NONE.
  send(kAck, 1006, sseq, "second", RTE_MBUF_F_RX_IP_CKSUM_GOOD, Corrupt::kTcpChecksum);
  send(kAck, 1006, sseq, "second", RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_NONE,
       Corrupt::kTcpChecksum);
  EXPECT_EQ(dropped(tcp::DropReason::kBadTcpChecksum), 3u);
  EXPECT_EQ(sessions_[0]->received, "first");
  // IP GOOD + L4 GOOD over a wrong IPv4 header checksum: both skipped.
  send(kAck, 1006, sseq, "second", kGood, Corrupt::kIpChecksum);
  EXPECT_EQ(sessions_[0]->received, "firstsecond");
  EXPECT_EQ(echoed(sseq), "firstsecond");
  EXPECT_EQ(dev_->stats().rx_checksum_bad, 0u);
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

TEST_F(DpdkTcpRxOffloadTest, BadIsDroppedAndCountedBeforeTheStackEvenWhenTheSumIsRight) {
  const uint32_t sseq = establish();
  ASSERT_EQ(sessions_.size(), 1u);
  const uint64_t frames_in = stack_->counters().frames_in;
  send(kAck, 1001, sseq, "data", RTE_MBUF_F_RX_IP_CKSUM_GOOD | RTE_MBUF_F_RX_L4_CKSUM_BAD);
  send(kAck, 1001, sseq, "data", RTE_MBUF_F_RX_IP_CKSUM_BAD | RTE_MBUF_F_RX_L4_CKSUM_GOOD);
  EXPECT_EQ(dev_->stats().rx_checksum_bad, 2u);
  EXPECT_EQ(stack_->counters().frames_in, frames_in) << "the stack never saw them";
  EXPECT_TRUE(sessions_[0]->received.empty());
  // The bytes were right: without the NIC's BAD the same frame is taken.
  send(kAck, 1001, sseq, "data");
  EXPECT_EQ(sessions_[0]->received, "data");
  EXPECT_EQ(dev_->stats().rx_packets, 3u) << "SYN, ACK, data; the BAD ones not handed out";
  EXPECT_EQ(echoed(sseq), "data");
  EXPECT_EQ(dev_->poolAvailable(), start_) << "the BAD frames were freed";
}

// dpdk.checksum_offload: off: whatever the port (here: the emulation) offers, the stack sums
// everything and the NIC's flags are not read.
class DpdkTcpChecksumOffTest : public DpdkTcpTest {
 protected:
  PortSetup setup() const override {
    return {.emulate_offload = true, .setting = ChecksumOffload::kOff};
  }
};

TEST_F(DpdkTcpChecksumOffTest, SoftwareBothWaysAndTheFlagsIgnored) {
  EXPECT_FALSE(port_->caps().tx_checksum_offload);
  EXPECT_FALSE(port_->caps().rx_checksum_offload);
  EXPECT_FALSE(dev_->txChecksumOffload());
  const uint32_t sseq = establish();  // sent() verifies complete checksums, no NIC step
  send(kAck, 1001, sseq, "x", kGood, Corrupt::kTcpChecksum);
  EXPECT_EQ(dropped(tcp::DropReason::kBadTcpChecksum), 1u) << "GOOD is not trusted when off";
  send(kAck, 1001, sseq, "x", RTE_MBUF_F_RX_L4_CKSUM_BAD);
  EXPECT_EQ(sessions_[0]->received, "x") << "BAD is not read when off";
  for (rte_mbuf* m : rp_->takeSent()) {
    EXPECT_EQ(m->ol_flags & RTE_MBUF_F_TX_OFFLOAD_MASK, 0u);
    rte_pktmbuf_free(m);
  }
  EXPECT_EQ(dev_->stats().rx_checksum_bad + dev_->stats().rx_checksum_good +
                dev_->stats().tx_checksum_offloaded,
            0u);
}

}  // namespace
}  // namespace infergate::dataplane::dpdk
