#pragma once
// Test support for the DPDK device tests: EAL on ordinary memory (no NIC touched; initTestEal,
// or EalEnvironment as a gtest global environment), ethdev ports built from the test's own
// rings (rte_eth_from_rings, the net_ring PMD): what a test enqueues on a port's rx ring is what
// the device receives, and what the device transmits lands on the port's tx ring; and
// openQueue(), a configured port with the device of its queue 0.
#include <rte_eth_ring.h>
#include <rte_ethdev.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>
#include <rte_ring.h>
#include <sched.h>

#include <cstring>
#include <string>
#include <vector>

#include <memory>

#include "absl/status/status.h"
#include "dataplane/dpdk/dpdk_device.h"
#include "dataplane/dpdk/eal.h"
#include "gtest/gtest.h"

namespace infergate::dataplane::dpdk::test_support {

inline int firstAllowedCpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) return c;
  return 0;
}

// The bytes of test frame `i`: `len` bytes, a pattern that differs per frame and per byte.
inline std::vector<uint8_t> frameBytes(int i, uint32_t len) {
  std::vector<uint8_t> b(len);
  for (uint32_t j = 0; j < len; ++j) b[j] = static_cast<uint8_t>(i * 7 + j * 13 + (j >> 8));
  return b;
}
inline uint32_t frameLen(int i) { return 60 + (i * 37) % 1455; }  // 60..1514

// A port over rings of the test: `queues` rx rings and tx rings of `ring_size` slots each.
class RingPort {
 public:
  RingPort(uint16_t queues, unsigned rx_ring_size = 1024, unsigned tx_ring_size = 1024) {
    static int serial = 0;
    const int id = serial++;
    for (uint16_t q = 0; q < queues; ++q) {
      rx_.push_back(makeRing("rx" + std::to_string(id) + "_" + std::to_string(q), rx_ring_size));
      tx_.push_back(makeRing("tx" + std::to_string(id) + "_" + std::to_string(q), tx_ring_size));
    }
    name_ = "ig_ring" + std::to_string(id);
    const int p =
        rte_eth_from_rings(name_.c_str(), rx_.data(), queues, tx_.data(), queues, SOCKET_ID_ANY);
    EXPECT_GE(p, 0) << "rte_eth_from_rings: " << rte_strerror(rte_errno);
    port_id_ = static_cast<uint16_t>(p);
  }
  // Frees what the rings still hold: call it while the mbufs' pools exist (before the
  // DpdkPort goes).
  void drain() {
    for (rte_ring* r : rx_) drainRing(r);
    for (rte_ring* r : tx_) drainRing(r);
  }
  // After the DpdkPort (stopped) is gone.
  ~RingPort() {
    if (rte_eth_dev_is_valid_port(port_id_)) {
      EXPECT_EQ(rte_eth_dev_close(port_id_), 0);
    }
    for (rte_ring* r : rx_) rte_ring_free(r);
    for (rte_ring* r : tx_) rte_ring_free(r);
  }
  uint16_t id() const { return port_id_; }
  rte_ring* rx(uint16_t q = 0) const { return rx_[q]; }
  rte_ring* tx(uint16_t q = 0) const { return tx_[q]; }

  // Enqueues frame `i` (an mbuf of `pool`) on rx ring `q`; returns the mbuf.
  rte_mbuf* inject(rte_mempool* pool, int i, uint16_t q = 0) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool);
    EXPECT_NE(m, nullptr);
    const std::vector<uint8_t> b = frameBytes(i, frameLen(i));
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(b.size())), b.data(), b.size());
    EXPECT_EQ(rte_ring_enqueue(rx_[q], m), 0);
    return m;
  }
  // Everything on tx ring `q`, oldest first (the caller frees it).
  std::vector<rte_mbuf*> takeSent(uint16_t q = 0) {
    std::vector<rte_mbuf*> out(rte_ring_count(tx_[q]));
    const unsigned n = rte_ring_dequeue_burst(tx_[q], reinterpret_cast<void**>(out.data()),
                                              static_cast<unsigned>(out.size()), nullptr);
    out.resize(n);
    return out;
  }

 private:
  static rte_ring* makeRing(const std::string& name, unsigned size) {
    rte_ring* r = rte_ring_create(name.c_str(), size, SOCKET_ID_ANY,
                                  RING_F_SP_ENQ | RING_F_SC_DEQ | RING_F_EXACT_SZ);
    EXPECT_NE(r, nullptr) << name << ": " << rte_strerror(rte_errno);
    return r;
  }
  static void drainRing(rte_ring* r) {
    void* m;
    while (rte_ring_dequeue(r, &m) == 0) rte_pktmbuf_free(static_cast<rte_mbuf*>(m));
  }
  std::string name_;
  uint16_t port_id_ = 0;
  std::vector<rte_ring*> rx_, tx_;
};

// EAL for the tests: one lcore the process may run on, ordinary memory, no shared files
// (--no-shconf), no PCI, no telemetry socket: test processes do not meet.
inline absl::Status initTestEal() {
  EalOptions o;
  o.main_lcore = firstAllowedCpu();
  o.no_huge = true;
  o.in_memory = true;
  o.memory_mb = 256;
  o.args = {"--no-telemetry"};
  return initEal(o);
}

// initTestEal() once before a binary's tests:
//   ::testing::AddGlobalTestEnvironment(new test_support::EalEnvironment);
class EalEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const absl::Status s = initTestEal();
    ASSERT_TRUE(s.ok()) << s.message();
  }
};

// Configures a port with `o` into *port and opens its queue 0 into *dev (fatal failures on
// error: call it with ASSERT_NO_FATAL_FAILURE or at the end of SetUp).
inline void openQueue(const DpdkPortOptions& o, std::unique_ptr<DpdkPort>* port,
                      std::unique_ptr<DpdkDevice>* dev) {
  auto p = DpdkPort::configure(o);
  ASSERT_TRUE(p.ok()) << p.status().message();
  *port = std::move(*p);
  auto d = DpdkDevice::open(**port, 0);
  ASSERT_TRUE(d.ok()) << d.status().message();
  *dev = std::move(*d);
}

}  // namespace infergate::dataplane::dpdk::test_support
