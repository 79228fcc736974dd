// DpdkDevice and DpdkPort over ports built from the test's own rings (ring_port.h): what the
// test enqueues on a port's rx ring is what the device receives, and what the device transmits
// lands on the port's tx ring, where the test reads it. No NIC is touched.
#include <pthread.h>
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dataplane/dpdk/dpdk_device.h"
#include "dataplane/dpdk/eal.h"
#include "gtest/gtest.h"
#include "tests/unit/dpdk/ring_port.h"

namespace infergate::dataplane::dpdk {
namespace {

::testing::Environment* const kEal =
    ::testing::AddGlobalTestEnvironment(new test_support::EalEnvironment);

TEST(DpdkEalTest, ASecondInitReturnsTheFirstResultWithoutRunningEalAgain) {
  EXPECT_TRUE(ealReady());
  EXPECT_TRUE(initEal(EalOptions{}).ok());
  EXPECT_TRUE(ealReady());
}

using test_support::frameBytes;
using test_support::frameLen;
using test_support::RingPort;

DpdkPortOptions smallOptions(uint16_t port_id) {
  DpdkPortOptions o;
  o.port_id = port_id;
  o.queues = 1;
  o.rx_desc = 256;
  o.tx_desc = 256;
  o.hold_frames = 37;
  o.tx_pending_max = 16;
  o.burst = 64;
  o.mbuf_cache = 32;
  o.mbufs_per_queue = 2048;
  return o;
}

void expectFrame(const Frame& f, int i) {
  const std::vector<uint8_t> b = frameBytes(i, frameLen(i));
  ASSERT_EQ(f.len, b.size()) << "frame " << i;
  EXPECT_EQ(std::memcmp(f.data, b.data(), b.size()), 0) << "frame " << i;
}

// A ring port (rp_), its DpdkPort (port_) and the device of queue 0 (dev_), torn down in the
// order the pools need: devices, what the rings still hold, the port (stopped, pools freed), the
// ethdev port and its rings.
class DpdkDeviceTest : public ::testing::Test {
 protected:
  RingPort& ring(uint16_t queues = 1, unsigned tx_ring_size = 1024) {
    rp_ = std::make_unique<RingPort>(queues, 1024, tx_ring_size);
    return *rp_;
  }
  void open(const DpdkPortOptions& o) {
    ASSERT_NO_FATAL_FAILURE(test_support::openQueue(o, &port_, &dev_));
    start_ = dev_->poolAvailable();
  }
  void TearDown() override {
    dev_.reset();
    others_.clear();
    if (rp_) rp_->drain();
    port_.reset();
    rp_.reset();
  }
  // Frames go out of the device into `sent` and are freed; returns them as (len, bytes ok).
  void checkSent(const std::vector<rte_mbuf*>& sent, int first, int count) {
    ASSERT_EQ(sent.size(), static_cast<size_t>(count));
    for (int k = 0; k < count; ++k) {
      rte_mbuf* m = sent[k];
      const int i = first + k;
      const std::vector<uint8_t> b = frameBytes(i, frameLen(i));
      EXPECT_EQ(m->pkt_len, b.size()) << "frame " << i;
      EXPECT_EQ(m->data_len, b.size()) << "frame " << i;
      EXPECT_EQ(m->nb_segs, 1);
      EXPECT_EQ(m->pool, dev_->pool());
      EXPECT_EQ(m->ol_flags & RTE_MBUF_F_TX_OFFLOAD_MASK, 0u) << "no offload asked";
      EXPECT_EQ(std::memcmp(rte_pktmbuf_mtod(m, void*), b.data(), b.size()), 0) << "frame " << i;
    }
    rte_pktmbuf_free_bulk(const_cast<rte_mbuf**>(sent.data()), static_cast<unsigned>(sent.size()));
  }
  // Allocates and fills frames first..first+n-1, passes them to txBurst in one call.
  void sendFrames(int first, int n) {
    std::vector<Frame> frames(n);
    for (int k = 0; k < n; ++k) {
      ASSERT_TRUE(dev_->txAlloc(&frames[k])) << "frame " << first + k;
      const std::vector<uint8_t> b = frameBytes(first + k, frameLen(first + k));
      ASSERT_GE(frames[k].capacity, b.size());
      std::memcpy(frames[k].data, b.data(), b.size());
      frames[k].len = static_cast<uint32_t>(b.size());
    }
    dev_->txBurst(frames.data(), frames.size());
  }

  std::unique_ptr<RingPort> rp_;
  std::unique_ptr<DpdkPort> port_;
  std::unique_ptr<DpdkDevice> dev_;
  std::vector<std::unique_ptr<DpdkDevice>> others_;
  uint32_t start_ = 0;
};

TEST(DpdkPoolSizingTest, MinimumIsTheSumOfWhereMbufsCanBe) {
  DpdkPortOptions o;  // 1024 + 64 + 1024 + 1024 + 1024 + 64 + 256 * 3 / 2
  EXPECT_EQ(minMbufsPerQueue(o), 4608u);
  EXPECT_LE(minMbufsPerQueue(o), o.mbufs_per_queue) << "the defaults satisfy the rule";
  EXPECT_EQ(minMbufsPerQueue(smallOptions(0)), 256u + 64 + 37 + 256 + 16 + 64 + 48);
}

TEST_F(DpdkDeviceTest, PortCapsOfARingPort) {
  RingPort& rp = ring();
  ASSERT_NO_FATAL_FAILURE(open(smallOptions(rp.id())));
  const PortCaps& c = port_->caps();
  EXPECT_EQ(c.driver, "net_ring");
  EXPECT_TRUE(c.vdev);
  EXPECT_FALSE(c.tx_ip_cksum);  // the ring PMD offloads nothing
  EXPECT_FALSE(c.tx_checksum_offload) << "nothing to use: software checksums";
  EXPECT_FALSE(c.rx_checksum_offload);
  EXPECT_FALSE(dev_->txChecksumOffload());
  EXPECT_FALSE(c.tx_tcp_cksum);
  EXPECT_FALSE(c.rx_cksum);
  EXPECT_FALSE(c.rss);
  EXPECT_EQ(c.max_rx_queues, 1);
  EXPECT_EQ(c.rx_desc, 256);
  EXPECT_EQ(c.tx_desc, 256);
  EXPECT_EQ(c.mtu, 1500u);
  EXPECT_EQ(c.mbuf_data_room, uint32_t{RTE_MBUF_DEFAULT_BUF_SIZE});
  EXPECT_EQ(dev_->mtu(), 1500u);
  EXPECT_EQ(dev_->rxHoldBudget(), 37u);
  // The reactor contract: nothing to sleep on, nothing pending.
  EXPECT_EQ(dev_->fd(), -1);
  EXPECT_FALSE(dev_->txPending());
  EXPECT_EQ(start_, 2048u) << "a fresh pool has every mbuf";
  EXPECT_EQ(rte_eth_promiscuous_get(rp.id()), c.promiscuous ? 1 : 0);
}

TEST_F(DpdkDeviceTest, ReceivesFramesInOrderByteExactAndReleasesThemToThePool) {
  RingPort& rp = ring();
  ASSERT_NO_FATAL_FAILURE(open(smallOptions(rp.id())));
  std::vector<rte_mbuf*> injected;
  uint64_t bytes = 0;
  for (int i = 0; i < 100; ++i) {
    injected.push_back(rp.inject(dev_->pool(), i));
    bytes += frameLen(i);
  }
  EXPECT_EQ(dev_->poolAvailable(), start_ - 100);
  Frame frames[128];
  ASSERT_EQ(dev_->rxBurst(frames, 64), 64u);
  ASSERT_EQ(dev_->rxBurst(frames + 64, 64), 36u);
  EXPECT_EQ(dev_->rxBurst(frames + 100, 28), 0u);
  for (int i = 0; i < 100; ++i) {
    expectFrame(frames[i], i);
    EXPECT_EQ(frames[i].handle, reinterpret_cast<uintptr_t>(injected[i]));
    EXPECT_EQ(frames[i].data, rte_pktmbuf_mtod(injected[i], uint8_t*)) << "no copy";
    EXPECT_EQ(frames[i].meta, 0u);
  }
  EXPECT_EQ(dev_->stats().rx_packets, 100u);
  EXPECT_EQ(dev_->stats().rx_bytes, bytes);
  EXPECT_EQ(dev_->stats().rx_outstanding, 100u);
  dev_->rxRelease(frames, 100);
  EXPECT_EQ(dev_->stats().rx_outstanding, 0u);
  EXPECT_EQ(dev_->stats().rx_outstanding_max, 100u);
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

TEST_F(DpdkDeviceTest, HeldFramesReleasedInAnyOrderAllComeBack) {
  RingPort& rp = ring();
  ASSERT_NO_FATAL_FAILURE(open(smallOptions(rp.id())));
  for (int i = 0; i < 50; ++i) rp.inject(dev_->pool(), i);
  Frame a[50];
  ASSERT_EQ(dev_->rxBurst(a, 50), 50u);
  // Release the odd frames, hold the even ones (25 <= the budget of 37) past the next burst.
  std::vector<Frame> held;
  for (int i = 0; i < 50; ++i) {
    if (i % 2) {
      dev_->rxRelease(&a[i], 1);
    } else {
      held.push_back(a[i]);
    }
  }
  EXPECT_LE(held.size(), dev_->rxHoldBudget());
  for (int i = 50; i < 80; ++i) rp.inject(dev_->pool(), i);
  Frame b[30];
  ASSERT_EQ(dev_->rxBurst(b, 30), 30u);
  for (int i = 0; i < 30; ++i) expectFrame(b[i], 50 + i);
  EXPECT_EQ(dev_->stats().rx_outstanding, 55u);
  EXPECT_EQ(dev_->stats().rx_outstanding_max, 55u);
  dev_->rxRelease(b, 30);
  // The held frames are intact after the other frames went back, then go back newest first.
  for (size_t k = 0; k < held.size(); ++k) expectFrame(held[k], static_cast<int>(2 * k));
  std::reverse(held.begin(), held.end());
  dev_->rxRelease(held.data(), held.size());
  EXPECT_EQ(dev_->stats().rx_outstanding, 0u);
  EXPECT_EQ(dev_->stats().rx_packets, 80u);
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

TEST_F(DpdkDeviceTest, ChainedMbufIsDroppedAndCounted) {
  RingPort& rp = ring();
  ASSERT_NO_FATAL_FAILURE(open(smallOptions(rp.id())));
  rte_mbuf* head = rte_pktmbuf_alloc(dev_->pool());
  rte_mbuf* tail = rte_pktmbuf_alloc(dev_->pool());
  ASSERT_NE(head, nullptr);
  ASSERT_NE(tail, nullptr);
  std::memset(rte_pktmbuf_append(head, 100), 1, 100);
  std::memset(rte_pktmbuf_append(tail, 100), 2, 100);
  ASSERT_EQ(rte_pktmbuf_chain(head, tail), 0);
  ASSERT_EQ(rte_ring_enqueue(rp.rx(), head), 0);
  rp.inject(dev_->pool(), 7);
  Frame f[4];
  ASSERT_EQ(dev_->rxBurst(f, 4), 1u);
  expectFrame(f[0], 7);
  EXPECT_EQ(dev_->stats().rx_dropped_chained, 1u);
  EXPECT_EQ(dev_->stats().rx_packets, 1u);
  dev_->rxRelease(f, 1);
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

TEST_F(DpdkDeviceTest, TransmitsAllocatedFramesByteExact) {
  RingPort& rp = ring();
  ASSERT_NO_FATAL_FAILURE(open(smallOptions(rp.id())));
  Frame f;
  ASSERT_TRUE(dev_->txAlloc(&f));
  EXPECT_EQ(f.capacity, uint32_t{RTE_MBUF_DEFAULT_DATAROOM}) << "at least mtu + 14";
  EXPECT_GE(f.capacity, dev_->mtu() + 14);
  EXPECT_EQ(f.len, 0u);
  EXPECT_EQ(dev_->poolAvailable(), start_ - 1);
  // A frame handed back unsent is not possible (txBurst takes it for good): send it empty-ish.
  const std::vector<uint8_t> b = frameBytes(0, frameLen(0));
  std::memcpy(f.data, b.data(), b.size());
  f.len = static_cast<uint32_t>(b.size());
  dev_->txBurst(&f, 1);
  ASSERT_NO_FATAL_FAILURE(sendFrames(1, 99));
  dev_->txFlush();
  EXPECT_FALSE(dev_->txPending());
  uint64_t bytes = 0;
  for (int i = 0; i < 100; ++i) bytes += frameLen(i);
  EXPECT_EQ(dev_->stats().tx_packets, 100u);
  EXPECT_EQ(dev_->stats().tx_bytes, bytes);
  EXPECT_EQ(dev_->stats().tx_deferred, 0u);
  EXPECT_EQ(dev_->stats().tx_dropped, 0u);
  EXPECT_EQ(dev_->poolAvailable(), start_ - 100) << "the frames are on the tx ring";
  ASSERT_NO_FATAL_FAILURE(checkSent(rp.takeSent(), 0, 100));
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

TEST_F(DpdkDeviceTest, FullTxRingKeepsFramesPendingInOrderAndLosesNone) {
  RingPort& rp = ring(1, 8);  // the "NIC" takes 8 frames at a time
  ASSERT_NO_FATAL_FAILURE(open(smallOptions(rp.id())));
  ASSERT_NO_FATAL_FAILURE(sendFrames(0, 20));
  EXPECT_EQ(rte_ring_count(rp.tx()), 8u);
  EXPECT_TRUE(dev_->txPending());
  EXPECT_EQ(dev_->stats().tx_packets, 8u);
  EXPECT_EQ(dev_->stats().tx_deferred, 12u);
  EXPECT_EQ(dev_->stats().tx_pending, 12u);
  dev_->txFlush();  // still full: nothing moves, nothing is lost
  EXPECT_EQ(dev_->stats().tx_pending, 12u);
  EXPECT_EQ(dev_->stats().tx_retries, 1u);
  ASSERT_NO_FATAL_FAILURE(checkSent(rp.takeSent(), 0, 8));
  // New frames queue behind the pending ones (order on the wire is kept).
  ASSERT_NO_FATAL_FAILURE(sendFrames(20, 2));
  EXPECT_EQ(dev_->stats().tx_pending, 6u);  // 8 of the 12 went, then the 2 new ones wait
  ASSERT_NO_FATAL_FAILURE(checkSent(rp.takeSent(), 8, 8));
  dev_->kick();  // the reactor's call while txPending()
  EXPECT_FALSE(dev_->txPending());
  ASSERT_NO_FATAL_FAILURE(checkSent(rp.takeSent(), 16, 6));
  EXPECT_EQ(dev_->stats().tx_packets, 22u);
  EXPECT_EQ(dev_->stats().tx_dropped, 0u);
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

TEST_F(DpdkDeviceTest, PendingBoundDropsCountsAndPushesBackOnAlloc) {
  RingPort& rp = ring(1, 8);
  ASSERT_NO_FATAL_FAILURE(open(smallOptions(rp.id())));  // tx_pending_max 16
  ASSERT_NO_FATAL_FAILURE(sendFrames(0, 8));             // the ring is full
  ASSERT_NO_FATAL_FAILURE(sendFrames(8, 20));            // 16 wait, 4 cannot
  EXPECT_EQ(dev_->stats().tx_pending, 16u);
  EXPECT_EQ(dev_->stats().tx_deferred, 16u);
  EXPECT_EQ(dev_->stats().tx_dropped, 4u);
  Frame f;
  EXPECT_FALSE(dev_->txAlloc(&f)) << "the pending list is full: the stack must wait";
  EXPECT_EQ(dev_->stats().tx_alloc_failed, 1u);
  ASSERT_NO_FATAL_FAILURE(checkSent(rp.takeSent(), 0, 8));
  ASSERT_TRUE(dev_->txAlloc(&f)) << "txAlloc retries the pending frames first";
  EXPECT_EQ(dev_->stats().tx_pending, 8u);
  const std::vector<uint8_t> b = frameBytes(99, frameLen(99));
  std::memcpy(f.data, b.data(), b.size());
  f.len = static_cast<uint32_t>(b.size());
  dev_->txBurst(&f, 1);
  ASSERT_NO_FATAL_FAILURE(checkSent(rp.takeSent(), 8, 8));
  EXPECT_EQ(dev_->stats().tx_pending, 9u) << "frame 99 waits behind the 8 older ones";
  dev_->txFlush();
  ASSERT_NO_FATAL_FAILURE(checkSent(rp.takeSent(), 16, 8));  // 24..27 were dropped
  EXPECT_TRUE(dev_->txPending());
  dev_->txFlush();
  EXPECT_FALSE(dev_->txPending());
  ASSERT_NO_FATAL_FAILURE(checkSent(rp.takeSent(), 99, 1));
  EXPECT_EQ(dev_->stats().tx_packets, 25u);
  EXPECT_EQ(dev_->stats().tx_dropped, 4u);
  EXPECT_EQ(dev_->stats().tx_deferred, 17u);
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

TEST_F(DpdkDeviceTest, ClosingWithPendingFramesFreesThem) {
  RingPort& rp = ring(1, 8);
  ASSERT_NO_FATAL_FAILURE(open(smallOptions(rp.id())));
  ASSERT_NO_FATAL_FAILURE(sendFrames(0, 12));
  rte_mempool* pool = dev_->pool();
  EXPECT_EQ(rte_mempool_avail_count(pool), start_ - 12);
  dev_.reset();
  EXPECT_EQ(rte_mempool_avail_count(pool), start_ - 8) << "the 4 pending frames are freed";
  for (rte_mbuf* m : rp.takeSent()) rte_pktmbuf_free(m);
  EXPECT_EQ(rte_mempool_avail_count(pool), start_);
}

TEST_F(DpdkDeviceTest, RegistersAReactorThreadWithEal) {
  RingPort& rp = ring();
  ASSERT_NO_FATAL_FAILURE(open(smallOptions(rp.id())));
  rp.inject(dev_->pool(), 3);
  unsigned lcore_before = 0, lcore_after = 0;
  size_t got = 0;
  Frame f;
  std::thread t([&] {
    lcore_before = rte_lcore_id();
    got = dev_->rxBurst(&f, 1);
    lcore_after = rte_lcore_id();
    dev_->rxRelease(&f, got);
    rte_thread_unregister();
  });
  t.join();
  EXPECT_EQ(lcore_before, LCORE_ID_ANY);
  EXPECT_NE(lcore_after, LCORE_ID_ANY);
  EXPECT_EQ(got, 1u);
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

TEST_F(DpdkDeviceTest, TwoQueuesEachReceiveTheirOwnRing) {
  RingPort& rp = ring(2);
  DpdkPortOptions o = smallOptions(rp.id());
  o.queues = 2;
  o.rss = false;  // the ring PMD has no RSS
  ASSERT_NO_FATAL_FAILURE(open(o));
  auto d1 = DpdkDevice::open(*port_, 1);
  ASSERT_TRUE(d1.ok()) << d1.status().message();
  others_.push_back(std::move(*d1));
  DpdkDevice& q1 = *others_.back();
  EXPECT_EQ(q1.queue(), 1);
  EXPECT_NE(dev_->pool(), q1.pool()) << "a pool per queue";
  rp.inject(q1.pool(), 5, 1);
  Frame f;
  EXPECT_EQ(dev_->rxBurst(&f, 1), 0u);
  ASSERT_EQ(q1.rxBurst(&f, 1), 1u);
  expectFrame(f, 5);
  q1.rxRelease(&f, 1);
  ASSERT_TRUE(dev_->txAlloc(&f));
  f.len = 60;
  dev_->txBurst(&f, 1);
  EXPECT_EQ(rte_ring_count(rp.tx(0)), 1u);
  EXPECT_EQ(rte_ring_count(rp.tx(1)), 0u);
}

TEST_F(DpdkDeviceTest, JumboMtuGetsBiggerBuffers) {
  RingPort& rp = ring();
  DpdkPortOptions o = smallOptions(rp.id());
  o.mtu = 9000;
  ASSERT_NO_FATAL_FAILURE(open(o));
  // 9000 + 14 + 4 (CRC) + 4 (VLAN) = 9022, rounded up to 128 bytes, plus the headroom.
  EXPECT_EQ(port_->caps().mbuf_data_room, 9088u + RTE_PKTMBUF_HEADROOM);
  EXPECT_EQ(dev_->mtu(), 9000u);
  Frame f;
  ASSERT_TRUE(dev_->txAlloc(&f));
  EXPECT_EQ(f.capacity, 9088u);
  f.len = 9014;
  dev_->txBurst(&f, 1);
  std::vector<rte_mbuf*> sent = rp.takeSent();
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0]->pkt_len, 9014u);
  EXPECT_EQ(sent[0]->nb_segs, 1);
  rte_pktmbuf_free(sent[0]);
}

TEST(DpdkPortErrorsTest, NoSuchPortListsThePortsEalFound) {
  RingPort rp(1);
  DpdkPortOptions o = smallOptions(1000);
  auto port = DpdkPort::configure(o);
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(port.status().message().find("no port 1000 (EAL found: "), std::string::npos)
      << port.status().message();
  EXPECT_NE(port.status().message().find("(net_ring_ig_ring"), std::string::npos)
      << port.status().message();
}

TEST(DpdkPortErrorsTest, MoreQueuesThanThePortHas) {
  RingPort rp(1);
  DpdkPortOptions o = smallOptions(rp.id());
  o.queues = 2;
  auto port = DpdkPort::configure(o);
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(port.status().message().find("has at most 1 rx and 1 tx queue(s) but 2 were asked"),
            std::string::npos)
      << port.status().message();
  EXPECT_NE(port.status().message().find("set reactors to at most 1"), std::string::npos);
}

TEST(DpdkPortErrorsTest, SeveralQueuesWithoutRss) {
  RingPort rp(2);
  DpdkPortOptions o = smallOptions(rp.id());
  o.queues = 2;
  auto port = DpdkPort::configure(o);
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.status().message().find("cannot spread flows over 2 queues"), std::string::npos)
      << port.status().message();
}

TEST(DpdkPortErrorsTest, PoolBelowTheSizingRule) {
  RingPort rp(1);
  DpdkPortOptions o = smallOptions(rp.id());
  o.mbufs_per_queue = 740;  // needs 741
  auto port = DpdkPort::configure(o);
  ASSERT_FALSE(port.ok());
  EXPECT_EQ(port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(port.status().message().find("mbufs_per_queue 740 is below what a queue needs (741 ="),
            std::string::npos)
      << port.status().message();
  o.mbufs_per_queue = 741;
  EXPECT_TRUE(DpdkPort::configure(o).ok());
}

TEST(DpdkPortErrorsTest, ZeroQueuesAndQueueOutOfRange) {
  RingPort rp(1);
  DpdkPortOptions o = smallOptions(rp.id());
  o.queues = 0;
  EXPECT_EQ(DpdkPort::configure(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.queues = 1;
  auto port = DpdkPort::configure(o);
  ASSERT_TRUE(port.ok()) << port.status().message();
  auto dev = DpdkDevice::open(**port, 1);
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.status().message(),
            "dpdk: port " + std::to_string(rp.id()) + " has 1 queue(s): no queue 1");
}

TEST(DpdkPortErrorsTest, MtuOutsideThePortsRange) {
  RingPort rp(1);
  DpdkPortOptions o = smallOptions(rp.id());
  o.mtu = 40;
  auto port = DpdkPort::configure(o);
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.status().message().find("takes an MTU of"), std::string::npos)
      << port.status().message();
}

}  // namespace
}  // namespace infergate::dataplane::dpdk
