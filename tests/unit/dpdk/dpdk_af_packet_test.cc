// DpdkDevice over a real poll-mode driver: net_af_packet on one end of a veth pair inside a
// network namespace this test creates and deletes; the other end is an AF_PACKET socket of the
// test. Frames go both ways byte-exact and every mbuf returns to the queue's pool. Needs root
// (namespaces, veth); skips with a message otherwise.
#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
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

constexpr uint16_t kTypeIn = 0x88b5;   // IEEE local experimental ethertypes: nothing else
constexpr uint16_t kTypeOut = 0x88b6;  // on the link uses them

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

std::vector<uint8_t> frame(uint16_t type, uint32_t len, int seed) {
  std::vector<uint8_t> f(len);
  std::memset(f.data(), 0xff, 6);  // broadcast
  const uint8_t src[6] = {0x02, 0, 0, 0, 0, static_cast<uint8_t>(seed)};
  std::memcpy(f.data() + 6, src, 6);
  f[12] = static_cast<uint8_t>(type >> 8);
  f[13] = static_cast<uint8_t>(type);
  for (uint32_t j = 14; j < len; ++j) f[j] = static_cast<uint8_t>(seed * 31 + j * 7);
  return f;
}

class DpdkAfPacketTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (a network namespace and a veth pair)";
    ns_ = "igdpdk" + std::to_string(getpid());
    if (!sh("ip netns add " + ns_)) GTEST_SKIP() << "cannot create a network namespace (ip netns)";
    made_ns_ = true;
    ASSERT_TRUE(sh("ip netns exec " + ns_ + " sysctl -qw net.ipv6.conf.all.disable_ipv6=1"));
    ASSERT_TRUE(sh("ip netns exec " + ns_ + " sysctl -qw net.ipv6.conf.default.disable_ipv6=1"));
    ASSERT_TRUE(sh("ip -n " + ns_ + " link add dp0 type veth peer name peer0"));
    ASSERT_TRUE(sh("ip -n " + ns_ + " link set dp0 up"));
    ASSERT_TRUE(sh("ip -n " + ns_ + " link set peer0 up"));

    if (!ealReady()) {
      const absl::Status s = test_support::initTestEal();
      ASSERT_TRUE(s.ok()) << s.message();
    }
    // This thread works inside the namespace until TearDown: net_af_packet opens its socket
    // there and sets the interface's flags (up, promiscuous) by name at start and stop.
    self_ns_ = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    const int inside = open(("/var/run/netns/" + ns_).c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(self_ns_, 0);
    ASSERT_GE(inside, 0);
    const int entered = setns(inside, CLONE_NEWNET);
    close(inside);
    ASSERT_EQ(entered, 0) << std::strerror(errno);
    vdev_ = "net_af_packet_" + ns_;
    const int probed = rte_eal_hotplug_add("vdev", vdev_.c_str(), "iface=dp0,qpairs=1");
    ASSERT_EQ(probed, 0) << "net_af_packet on dp0: " << rte_strerror(-probed);
    peer_ = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_ALL));
    ASSERT_GE(peer_, 0);
    peer_index_ = if_nametoindex("peer0");
    ASSERT_NE(peer_index_, 0u);
    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = static_cast<int>(peer_index_);
    ASSERT_EQ(bind(peer_, reinterpret_cast<sockaddr*>(&sll), sizeof sll), 0);

    uint16_t port_id = 0;
    ASSERT_EQ(rte_eth_dev_get_port_by_name(vdev_.c_str(), &port_id), 0);
    DpdkPortOptions po;
    po.port_id = port_id;
    po.rx_desc = 256;
    po.tx_desc = 256;
    po.hold_frames = 64;
    po.tx_pending_max = 64;
    po.mbuf_cache = 32;
    po.mbufs_per_queue = 1024;
    ASSERT_NO_FATAL_FAILURE(test_support::openQueue(po, &port_, &dev_));
    start_ = dev_->poolAvailable();
  }

  void TearDown() override {
    dev_.reset();
    uint16_t port_id = 0;
    const bool have_port = port_ != nullptr;
    if (have_port) port_id = port_->portId();
    port_.reset();
    if (have_port) rte_eth_dev_close(port_id);
    if (!vdev_.empty()) rte_eal_hotplug_remove("vdev", vdev_.c_str());
    if (peer_ >= 0) close(peer_);
    if (self_ns_ >= 0) {
      EXPECT_EQ(setns(self_ns_, CLONE_NEWNET), 0) << std::strerror(errno);
      close(self_ns_);
    }
    if (made_ns_) sh("ip netns del " + ns_);
  }

  void peerSend(const std::vector<uint8_t>& f) {
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_ifindex = static_cast<int>(peer_index_);
    to.sll_halen = 6;
    std::memset(to.sll_addr, 0xff, 6);
    ASSERT_EQ(sendto(peer_, f.data(), f.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(f.size()))
        << std::strerror(errno);
  }

  // The next frame of ethertype `type` the peer receives (1 s at most); empty if none.
  std::vector<uint8_t> peerReceive(uint16_t type) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    std::vector<uint8_t> buf(4096);
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{peer_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      const ssize_t n = recv(peer_, buf.data(), buf.size(), 0);
      if (n >= 14 && ((buf[12] << 8) | buf[13]) == type) {
        buf.resize(static_cast<size_t>(n));
        return buf;
      }
    }
    return {};
  }

  std::string ns_;
  bool made_ns_ = false;
  std::string vdev_;
  int self_ns_ = -1;  // the namespace the thread came from
  int peer_ = -1;
  unsigned peer_index_ = 0;
  std::unique_ptr<DpdkPort> port_;
  std::unique_ptr<DpdkDevice> dev_;
  uint32_t start_ = 0;
};

TEST_F(DpdkAfPacketTest, FramesBothWaysByteExactAndEveryMbufComesBack) {
  EXPECT_EQ(port_->caps().driver, "net_af_packet");
  EXPECT_TRUE(port_->caps().vdev);
  EXPECT_TRUE(port_->caps().promiscuous) << "a vdev is put in promiscuous mode";
  EXPECT_EQ(dev_->fd(), -1);

  // Peer -> device: 20 frames of our ethertype (the link may carry others: skipped).
  constexpr int kFrames = 20;
  for (int i = 0; i < kFrames; ++i)
    ASSERT_NO_FATAL_FAILURE(peerSend(frame(kTypeIn, 60 + 50 * i, i)));
  int got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (got < kFrames && std::chrono::steady_clock::now() < deadline) {
    Frame f[32];
    const size_t n = dev_->rxBurst(f, 32);
    for (size_t k = 0; k < n; ++k) {
      if (f[k].len >= 14 && ((f[k].data[12] << 8) | f[k].data[13]) == kTypeIn) {
        const std::vector<uint8_t> want = frame(kTypeIn, 60 + 50 * got, got);
        ASSERT_EQ(f[k].len, want.size()) << "frame " << got;
        EXPECT_EQ(std::memcmp(f[k].data, want.data(), want.size()), 0) << "frame " << got;
        ++got;
      }
    }
    dev_->rxRelease(f, n);
    if (n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(got, kFrames);
  EXPECT_EQ(dev_->stats().rx_outstanding, 0u);

  // Device -> peer.
  for (int i = 0; i < kFrames; ++i) {
    Frame f;
    ASSERT_TRUE(dev_->txAlloc(&f));
    const std::vector<uint8_t> b = frame(kTypeOut, 1514 - 40 * i, 100 + i);
    std::memcpy(f.data, b.data(), b.size());
    f.len = static_cast<uint32_t>(b.size());
    dev_->txBurst(&f, 1);
  }
  dev_->txFlush();
  EXPECT_FALSE(dev_->txPending());
  for (int i = 0; i < kFrames; ++i) {
    const std::vector<uint8_t> r = peerReceive(kTypeOut);
    EXPECT_EQ(r, frame(kTypeOut, 1514 - 40 * i, 100 + i)) << "frame " << i;
  }
  EXPECT_EQ(dev_->stats().tx_packets, uint64_t{kFrames});
  EXPECT_EQ(dev_->stats().tx_dropped, 0u);
  // net_af_packet copies each mbuf into its ring and frees it at once: all back in the pool.
  EXPECT_EQ(dev_->poolAvailable(), start_);
}

}  // namespace
}  // namespace infergate::dataplane::dpdk
